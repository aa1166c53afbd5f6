//! `strata eval`: the engine's durable eval ([`strata::eval`]) with its terminal view: a line
//! per attempt as it ends, the report as a table (or JSON), the SVG plot, Ctrl-C.

use std::sync::Arc;

use strata::eval::{EvalInfo, EvalObserver, EvalOptions, EvalStatus, Evaluating};
use strata::run_dir::ModelFlags;

use crate::cli::EvalArgs;
use crate::{Failure, INTERRUPTED, bad_input};

/// A line per attempt on standard output (none with `--json`), the warnings on standard
/// error.
struct Lines {
    quiet: bool,
}

impl EvalObserver for Lines {
    fn finished(&self, info: &EvalInfo, index: usize) {
        let (Some(attempt), false) = (info.attempts.get(index), self.quiet) else { return };
        let Some(result) = &attempt.result else { return };
        let team = info.teams.get(attempt.team).map_or("?", |t| t.label.as_str());
        outln!(
            "[{}/{}] {} by {} #{}: {} in {:.2}s, {} model calls (run {})",
            info.done(),
            info.attempts.len(),
            attempt.task,
            team,
            attempt.repeat,
            result.verdict(),
            result.wall_ms as f64 / 1000.0,
            result.model_calls,
            attempt.run_id.as_deref().unwrap_or("?")
        );
    }

    fn warn(&self, text: &str) {
        errln!("{text}");
    }
}

/// `strata eval SUITE` or `strata eval --resume EVAL`.
pub(crate) async fn eval(args: EvalArgs) -> Result<u8, Failure> {
    let options = EvalOptions {
        data: args.data.clone(),
        eval_id: args.eval_id.clone(),
        reasoner: args.reasoner.clone(),
        flags: ModelFlags::with_env(args.base_url.clone(), args.model.clone(), args.small_model),
        unsandboxed: args.unsandboxed,
        no_sync: args.no_sync,
        observer: Arc::new(Lines { quiet: args.json }),
    };
    let evaluating = match (&args.suite, &args.resume) {
        (_, Some(eval)) => Evaluating::resume(eval, &options).await?,
        (Some(suite), None) => Evaluating::start(suite, &args.teams, args.repeat, &options).await?,
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!("give a suite folder, or --resume EVAL")));
        }
    };
    let info = evaluating.info();
    if info.unsandboxed {
        errln!("warning: --unsandboxed: the teams' commands and the checks run without a sandbox");
    }
    if !args.json {
        outln!(
            "eval {}: {} attempts ({} done) of {} by {} team(s); data in {}",
            info.eval_id,
            info.attempts.len(),
            info.done(),
            info.suite.display(),
            info.teams.len(),
            evaluating.dir().display()
        );
    }
    let stop = async {
        // An error listening for Ctrl-C stops at once.
        let _ = tokio::signal::ctrl_c().await;
    };
    let evaluated = evaluating.run(stop).await?;
    if let Some(path) = &args.svg {
        std::fs::write(path, evaluated.report.svg())
            .map_err(|e| anyhow::anyhow!("cannot write the plot {}: {e}", path.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&evaluated.report)?);
    } else {
        out!("{}", evaluated.report.table());
    }
    if evaluated.info.status == EvalStatus::Interrupted {
        errln!(
            "interrupted; every finished attempt is recorded: `strata eval --resume {}` goes on",
            evaluated.info.eval_id
        );
        return Ok(INTERRUPTED);
    }
    Ok(0)
}
