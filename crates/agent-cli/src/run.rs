//! `strata run` and `strata resume`: the engine's durable run ([`strata::run`]) with the
//! terminal's view of it: progress, Ctrl-C, the operator inbox, the dashboard, the summary.

use std::path::Path;
use std::sync::Arc;

use strata::run::{End, Ended, How, Observer, ResumeOptions, Resumed, Run, StartOptions};
use strata::run_dir::{ModelFlags, RunInfo, RunStatus, resolve_run};

pub(crate) use strata::run::Prepared;

use crate::cli::{OutputArgs, ResumeArgs, RunArgs, StartArgs};
use crate::{Failure, INTERRUPTED, TASK_FAILED, bad_input, view};

/// The model flags of a new run (or `exec`), with `$OPENAI_BASE_URL` read now.
pub(crate) fn model_flags(args: &StartArgs) -> ModelFlags {
    ModelFlags::with_env(args.base_url.clone(), args.model.clone(), args.small_model)
}

/// What the terminal is told as a run goes: its header when it is recorded, the warnings of
/// `--no-sync` and `--unsandboxed`, and the engine's warnings on standard error.
struct Terminal {
    output: OutputArgs,
    no_sync: bool,
    unsandboxed: bool,
}

impl Observer for Terminal {
    fn recorded(&self, info: &RunInfo, dir: &Path, how: How) {
        match how {
            How::Started => view::started(&self.output, info, dir),
            How::Resumed => view::resumed(&self.output, info, dir),
        }
        if self.no_sync {
            errln!(
                "warning: --no-sync: commits are not fdatasync'ed; a power loss can lose acknowledged data"
            );
        }
        if self.unsandboxed {
            tracing::warn!("--unsandboxed: shell commands run without a sandbox");
            errln!(
                "warning: --unsandboxed: shell commands run without a sandbox, with your user's files \
                 and network; the run records it"
            );
        }
    }

    fn warn(&self, text: &str) {
        errln!("{text}");
    }
}

/// The engine's options of a new run from the command line.
pub(crate) fn start_options(args: &StartArgs) -> StartOptions {
    StartOptions {
        data: args.data.clone(),
        workspace: args.workspace.clone(),
        run_id: args.run_id.clone(),
        heartbeat: args.heartbeat,
        reasoner: args.reasoner.clone(),
        flags: model_flags(args),
        unsandboxed: args.unsandboxed,
        no_sync: args.no_sync,
        nats: args.nats.clone(),
        local: args.local,
        observer: Arc::new(Terminal {
            output: args.output.clone(),
            no_sync: args.no_sync,
            unsandboxed: args.unsandboxed,
        }),
    }
}

/// `strata run`.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    let options = start_options(&args.start);
    let team = args.start.team.as_deref();
    let prepared = match (&args.plan, &args.goal) {
        (_, Some(goal)) => Prepared::from_goal(team, goal, &options).await?,
        (Some(plan), None) => Prepared::from_files(team, plan, &options).await?,
        // clap requires one of them.
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!("give a plan file or --goal \"what to do\"")));
        }
    };
    start(prepared, &args.start).await
}

/// Starts `prepared` as a new run with `args`' data directory, workspace, run id, reasoner,
/// sync and output options (its plan, goal and team are read already), and drives it to its
/// end: `strata run`, and `strata exec` on the run it generates.
pub(crate) async fn start(prepared: Prepared, args: &StartArgs) -> Result<u8, Failure> {
    // The dashboard's port is taken before anything is written: one in use is bad input.
    let serving = match &args.serve {
        Some(addr) => Some(crate::serve::bind("--serve", addr, None).await?),
        None => None,
    };
    let run = Run::start(prepared, &start_options(args)).await?;
    drive(run, &args.output, serving).await
}

/// `strata resume`.
pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, Failure> {
    resolve_run(&args.data, &args.run)?;
    // The dashboard's port is taken before anything is written: one in use is bad input.
    let serving = match &args.serve {
        Some(addr) => Some(crate::serve::bind("--serve", addr, None).await?),
        None => None,
    };
    let options = ResumeOptions {
        data: args.data.clone(),
        unsandboxed: args.unsandboxed,
        no_sync: args.no_sync,
        observer: Arc::new(Terminal {
            output: args.output.clone(),
            no_sync: args.no_sync,
            unsandboxed: args.unsandboxed,
        }),
    };
    match Run::resume(&args.run, &options).await? {
        Resumed::Finished { info, dir } => {
            view::already_finished(&args.output, &info, &dir);
            Ok(if info.status == RunStatus::Succeeded { 0 } else { TASK_FAILED })
        }
        Resumed::Running(run) => drive(*run, &args.output, serving).await,
    }
}

/// Drives `run` to its end, serving the dashboard meanwhile on `serving` (`--serve`): the
/// server sends the run's last records and its end, then stops.
async fn drive(
    run: Run,
    output: &OutputArgs,
    serving: Option<crate::serve::Bound>,
) -> Result<u8, Failure> {
    let server = match serving {
        Some(bound) => {
            let dir = run.dir();
            let data = dir.parent().map_or_else(|| dir.to_path_buf(), Path::to_path_buf);
            Some(crate::serve::serve_run(bound, data, dir, &run.info().run_id, run.live()).await?)
        }
        None => None,
    };
    let result = drive_run(run, output).await;
    if let Some(server) = server {
        server.finish().await;
    }
    result
}

/// Drives `run` with its progress shown and its operator inbox served
/// ([`Run::drive_operated`]); Ctrl-C (or the dashboard's cancel) stops it, resumable.
async fn drive_run(run: Run, output: &OutputArgs) -> Result<u8, Failure> {
    let watcher = view::watch(
        run.team().clone(),
        run.services().clone(),
        run.task().clone(),
        run.info().clone(),
        output.clone(),
    );
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let ended = run
        .drive_operated(ctrl_c, || {
            view::interrupting(output);
            // A second Ctrl-C exits at once; what is stored so far is enough to resume.
            tokio::spawn(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    errln!("stopped at once; the run can still be resumed");
                    std::process::exit(i32::from(INTERRUPTED));
                }
            });
        })
        .await;
    watcher.stop().await;
    report(ended?, output).await
}

/// Says how the run ended, and the exit code: 0 the task succeeded, 1 it failed (or the run's
/// storage did), 130 interrupted.
async fn report(ended: Ended, output: &OutputArgs) -> Result<u8, Failure> {
    let Ended { info, dir, .. } = &ended;
    match &ended.end {
        End::Interrupted { cut_short } => {
            if *cut_short {
                view::left_running(output);
            }
            view::interrupted(output, info, dir);
            if *cut_short {
                // The cut turn's call holds a thread of the blocking pool, which the runtime
                // would wait for on its way out: leave now, as the second Ctrl-C does. What
                // was committed is durable; the run is recovered when it resumes.
                std::process::exit(i32::from(INTERRUPTED));
            }
            Ok(INTERRUPTED)
        }
        End::Storage(_) => {
            // Nothing more can be stored: say why, and that the run can be resumed.
            errln!("error: {}", info.failure.as_deref().unwrap_or("the run's storage failed"));
            outln!(
                "run {}: data in {}; resume it with: strata resume {}",
                info.run_id,
                dir.display(),
                info.run_id
            );
            Ok(TASK_FAILED)
        }
        End::Outcome(_) | End::Budget(_) | End::LeaderFailed(..) => {
            let Some(summary) = ended.summary().await? else { return Ok(TASK_FAILED) };
            view::summary(output, &summary, &ended);
            if let End::LeaderFailed(..) = &ended.end
                && let Some(cause) = &info.failure
            {
                errln!("error: {cause}");
            }
            Ok(if ended.succeeded() { 0 } else { TASK_FAILED })
        }
    }
}
