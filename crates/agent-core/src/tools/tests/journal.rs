//! Crash journals: `Shell::call_journaled` keeps a journal that `Shell::recover` reads after a
//! crash, the registry keeps one journal directory per key, and tools without a journal know
//! nothing. Journals of interrupted calls are prepared by hand, and runners that outlive their
//! caller are spawned by the test with the runner's file protocol (`started`, `out`, `err`, then
//! `done` renamed into place).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::*;

/// A workspace and a context keeping its journals under a separate directory, `journal/`,
/// which does not exist yet.
fn journaled() -> (TempDir, TempDir, ToolContext) {
    let (dir, ctx) = workspace();
    let runs = tempfile::tempdir().unwrap();
    let ctx = ctx.with_journal(runs.path().join("journal"));
    (dir, runs, ctx)
}

/// The journal directory of one call, under the context's journal root.
fn journal_of(ctx: &ToolContext, name: &str) -> PathBuf {
    ctx.journal().unwrap().join(name)
}

async fn run_journaled(
    ctx: &ToolContext,
    args: Value,
    journal: &Path,
) -> Result<ToolOutput, ToolError> {
    Shell::new().call_journaled(ctx, args, journal).await
}

async fn recover(ctx: &ToolContext, args: Value, journal: &Path) -> Recovery {
    Shell::new().recover(ctx, args, journal).await.unwrap()
}

/// Writes the journal files `files` (name, content) into `journal`, creating it.
fn prepare(journal: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(journal).unwrap();
    for (name, content) in files {
        std::fs::write(journal.join(name), content).unwrap();
    }
}

/// The sorted names of the entries of `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Spawns a stand-in for a runner that outlived its caller: `sh -c script` with the journal
/// directory as `$1`, in its own process group, like the real runner.
fn spawn_runner(journal: &Path, script: &str) -> Child {
    use std::os::unix::process::CommandExt as _;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("test-runner")
        .arg(journal)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap()
}

/// What a runner writes once its command printed `late` and exited 0.
const FINISH: &str =
    r#"echo late > "$1/out"; : > "$1/err"; echo 0 > "$1/done.tmp"; mv "$1/done.tmp" "$1/done""#;

/// A successful shell output with `stdout` and an empty stderr.
fn ok_output(stdout: &str) -> ToolOutput {
    ToolOutput {
        success: true,
        output: stdout.into(),
        data: json!({
            "exit_code": 0,
            "signal": null,
            "stdout": stdout,
            "stderr": "",
            "stdout_truncated": false,
            "stderr_truncated": false,
        }),
    }
}

/// A tool with side effects that overrides none of the journal methods.
struct Unjournaled {
    calls: AtomicUsize,
    schema: Value,
}

#[async_trait]
impl Tool for Unjournaled {
    fn name(&self) -> &str {
        "deploy"
    }

    fn description(&self) -> &str {
        "changes the world, keeps no journal"
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ok_output("deployed\n"))
    }
}

// ---------------------------------------------------------------------------------------------
// idempotence, the context, the error

#[test]
fn only_tools_without_side_effects_and_write_file_are_idempotent() {
    // `edit_file` is not: a second application finds its text gone, or changes the file again.
    let registry = ToolRegistry::with_builtins();
    let idempotent: Vec<(&str, bool)> = registry
        .names()
        .into_iter()
        .map(|name| (name, registry.get(name).unwrap().idempotent()))
        .collect();
    assert_eq!(
        idempotent,
        [
            ("edit_file", false),
            ("glob", true),
            ("list_dir", true),
            ("read_file", true),
            ("search", true),
            ("shell", false),
            ("write_file", true),
        ]
    );
    // The default follows the side effects.
    assert!(Counting::new("count", count_schema()).idempotent());
    let effect = Unjournaled { calls: AtomicUsize::new(0), schema: json!({ "type": "object" }) };
    assert!(!effect.idempotent());
}

#[test]
fn a_context_has_no_journal_until_given_one_and_keeps_the_rest() {
    let (_dir, ctx) = workspace();
    let ctx = ctx.with_shell_timeout(Duration::from_millis(1234));
    assert_eq!(ctx.journal(), None);

    let with = ctx.clone().with_journal("/runs/r1/journal");

    assert_eq!(with.journal(), Some(Path::new("/runs/r1/journal")));
    assert_eq!(with.workspace(), ctx.workspace());
    assert_eq!(with.shell_timeout(), Duration::from_millis(1234));
    assert_ne!(with, ctx);
    assert_eq!(with.with_journal("/other").journal(), Some(Path::new("/other")));
}

#[test]
fn an_interrupted_call_is_a_permanent_error_that_says_what_to_do() {
    let err = ToolError::Interrupted { tool: "shell".into(), partial: String::new() };
    assert!(!err.is_transient());
    assert_eq!(err.class(), agent_state::ErrorClass::Permanent);
    assert_eq!(
        err.to_string(),
        "tool `shell` was interrupted while running and may or may not have had its effect; it \
         is not run again: check the workspace, then re-plan the step (or mark it \
         `idempotent = true` if running it twice is safe)"
    );
    let with_output = ToolError::Interrupted { tool: "shell".into(), partial: "half\n".into() };
    assert!(with_output.to_string().ends_with("; partial output: half"), "{with_output}");
}

// ---------------------------------------------------------------------------------------------
// Shell::call_journaled

#[tokio::test(start_paused = true)]
async fn a_journaled_shell_call_returns_what_a_plain_call_returns() {
    let (_dir, _runs, ctx) = journaled();
    let commands = [
        "true",
        "echo out; echo err >&2",
        "echo partial; echo oops >&2; exit 3",
        "printf 'no newline'; exit 1",
        "printf 'only stderr' >&2; exit 255",
        r#"printf '%s|' "a \"b\"" '$HOME' "$#" 'it''s'"#,
        "pwd; ls; cat",
        "head -c 100000 /dev/zero | tr '\\0' a; head -c 70000 /dev/zero | tr '\\0' b >&2",
    ];
    for (n, command) in commands.into_iter().enumerate() {
        let args = json!({ "command": command });
        let plain = call(&ctx, "shell", args.clone()).await.unwrap();
        let journaled = run_journaled(&ctx, args, &journal_of(&ctx, &n.to_string())).await.unwrap();
        assert_eq!(journaled, plain, "{command}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_journaled_shell_call_leaves_a_complete_journal_outside_the_workspace() {
    let (dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "call-1");

    let out = run_journaled(
        &ctx,
        json!({ "command": "echo made > made.txt; echo partial; echo oops >&2; exit 3" }),
        &journal,
    )
    .await
    .unwrap();

    assert!(!out.success);
    assert_eq!(out.output, "partial\n[stderr]\noops\n[exit code 3]");
    assert_eq!(std::fs::read_to_string(dir.path().join("made.txt")).unwrap(), "made\n");
    assert_eq!(entries(dir.path()), ["made.txt"]);
    assert_eq!(
        entries(&journal),
        ["done", "err", "err.more", "group", "out", "out.more", "started"]
    );
    let read = |name: &str| std::fs::read_to_string(journal.join(name)).unwrap();
    assert_eq!(read("done"), "3\n");
    assert_eq!((read("out.more"), read("err.more")), ("0\n".into(), "0\n".into()));
    assert!(read("group").trim().parse::<u32>().is_ok(), "group holds the command's group");
    assert_eq!(read("out"), "partial\n");
    assert_eq!(read("err"), "oops\n");
    let pid = read("started");
    assert!(pid.trim().parse::<u32>().is_ok(), "started holds the runner's pid, got {pid:?}");
}

#[tokio::test(start_paused = true)]
async fn a_journaled_shell_call_checks_its_arguments_before_creating_the_journal() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "bad");
    let cases = [
        (json!({ "command": "" }), "`command`: must not be empty"),
        (
            json!({ "command": "true", "timeout_ms": 0 }),
            "`timeout_ms`: 0 is less than the minimum 1",
        ),
    ];
    for (args, problem) in cases {
        let err = run_journaled(&ctx, args.clone(), &journal).await.unwrap_err();
        assert_eq!(problems(err), [problem]);
        let err = Shell::new().recover(&ctx, args, &journal).await.unwrap_err();
        assert_eq!(problems(err), [problem]);
    }
    let err =
        run_journaled(&ctx, json!({ "command": "true", "extra": 1 }), &journal).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
    assert!(!journal.exists());
    assert!(!ctx.journal().unwrap().exists());
}

#[tokio::test(start_paused = true)]
async fn a_journaled_shell_call_times_out_kills_the_group_and_leaves_no_done() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "slow");
    let sleep = unique_sleep();
    let args = json!({
        "command": format!("sleep {sleep} & echo begun; wait"),
        "timeout_ms": 1000,
    });

    let err = run_journaled(&ctx, args, &journal).await.unwrap_err();

    assert!(matches!(err, ToolError::Timeout { ref tool, after_ms: 1000 } if tool == "shell"));
    assert!(err.is_transient());
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new(), "background sleep survived");
    assert!(journal.join("started").exists());
    assert!(!journal.join("done").exists());
    assert_eq!(std::fs::read_to_string(journal.join("out")).unwrap(), "begun\n");
    // Recovery cannot tell what the killed command did: it was interrupted, with its output.
    let recovered = recover(&ctx, json!({ "command": "x", "timeout_ms": 50 }), &journal).await;
    let Recovery::Interrupted(partial) = recovered else { panic!("{recovered:?}") };
    assert!(partial.output.starts_with("begun\n[interrupted:"), "{}", partial.output);
    assert_eq!(partial.data["interrupted"], true);
}

#[tokio::test(start_paused = true)]
async fn a_journaled_shell_call_returns_when_the_command_exits_and_kills_its_background_processes()
{
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "bg");
    let sleep = unique_sleep();
    let command = format!("sleep {sleep} & echo started");

    let out = run_journaled(&ctx, json!({ "command": command, "timeout_ms": 10000 }), &journal)
        .await
        .unwrap();

    assert_eq!(out, ok_output("started\n"));
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new(), "background sleep survived");
}

#[tokio::test(start_paused = true)]
async fn a_journaled_flood_of_output_keeps_only_the_cap_on_disk() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "flood");
    let total = 8 * MAX_STREAM_BYTES + 5;

    let out = run_journaled(&ctx, json!({ "command": format!("yes | head -c {total}") }), &journal)
        .await
        .unwrap();

    assert!(out.success);
    let on_disk = std::fs::metadata(journal.join("out")).unwrap().len();
    assert_eq!(on_disk, MAX_STREAM_BYTES as u64, "the journal keeps the cap, not the flood");
    let more: u64 =
        std::fs::read_to_string(journal.join("out.more")).unwrap().trim().parse().unwrap();
    assert_eq!(more, (total - MAX_STREAM_BYTES) as u64, "the rest is counted");
    let stdout = out.data["stdout"].as_str().unwrap();
    assert!(stdout.ends_with(&format!("[truncated: {more} more bytes]\n")), "{stdout:.80}");
}

#[tokio::test(start_paused = true)]
async fn a_live_runner_found_after_a_crash_is_adopted_when_it_finishes_in_time() {
    let (dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "adopt");
    let args =
        json!({ "command": "sleep 0.4; echo once >> log.txt; echo done", "timeout_ms": 20000 });
    // The crashed caller: its call is dropped, its runner lives on.
    let call = tokio::spawn({
        let (ctx, args, journal) = (ctx.clone(), args.clone(), journal.clone());
        async move { run_journaled(&ctx, args, &journal).await }
    });
    while !journal.join("started").exists() {
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(5));
    }
    call.abort();

    let recovered = recover(&ctx, args, &journal).await;

    assert_eq!(recovered, Recovery::Completed(ok_output("done\n")));
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "once\n");
}

#[tokio::test(start_paused = true)]
async fn a_runner_past_its_deadline_after_a_crash_is_killed_and_reported_interrupted() {
    let (dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "overdue");
    let sleep = unique_sleep();
    let args = json!({
        "command": format!("echo begun; echo ran >> count.txt; sleep {sleep} & echo $! > bg.pid; wait"),
        "timeout_ms": 600,
    });
    let call = tokio::spawn({
        let (ctx, args, journal) = (ctx.clone(), args.clone(), journal.clone());
        async move { run_journaled(&ctx, args, &journal).await }
    });
    while !dir.path().join("bg.pid").exists() {
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(5));
    }
    call.abort();

    let recovered = recover(&ctx, args, &journal).await;

    let Recovery::Interrupted(partial) = recovered else { panic!("{recovered:?}") };
    assert!(partial.output.starts_with("begun\n"), "{}", partial.output);
    assert!(partial.output.contains("stopped at its timeout of 600 ms"), "{}", partial.output);
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new(), "the command's sleep outlived it");
    assert_eq!(std::fs::read_to_string(dir.path().join("count.txt")).unwrap(), "ran\n");
}

#[tokio::test(start_paused = true)]
async fn recover_does_not_kill_a_process_group_whose_id_was_reused() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "reused");
    // An unrelated process group, named in a stale journal as if it were the runner's.
    let mut stranger = spawn_runner(Path::new("/nonexistent"), "sleep 5");
    prepare(&journal, &[("started", &format!("{}\n", stranger.id())), ("group", "1\n")]);

    let recovered = recover(&ctx, json!({ "command": "x", "timeout_ms": 10 }), &journal).await;

    assert!(matches!(recovered, Recovery::Interrupted(_)), "{recovered:?}");
    assert_eq!(stranger.try_wait().unwrap(), None, "an unrelated process was killed");
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_journaled_call_in_a_reused_directory_reports_its_own_run() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "again");
    run_journaled(&ctx, json!({ "command": "echo first; exit 1" }), &journal).await.unwrap();

    let out = run_journaled(&ctx, json!({ "command": "echo second" }), &journal).await.unwrap();

    assert_eq!(out, ok_output("second\n"));
    let recovered = recover(&ctx, json!({ "command": "echo second" }), &journal).await;
    assert_eq!(recovered, Recovery::Completed(ok_output("second\n")));
}

// ---------------------------------------------------------------------------------------------
// Shell::recover

#[tokio::test(start_paused = true)]
async fn recover_adopts_a_call_that_completed_before_the_crash() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "done");
    let args = json!({ "command": "echo built; echo warning >&2; exit 2" });
    let out = run_journaled(&ctx, args.clone(), &journal).await.unwrap();

    let recovered = recover(&ctx, args, &journal).await;

    assert_eq!(recovered, Recovery::Completed(out));
}

#[tokio::test(start_paused = true)]
async fn recover_reads_a_done_journal_like_the_call_reports_it() {
    let (_dir, _runs, ctx) = journaled();
    let args = json!({ "command": "x" });
    let success = journal_of(&ctx, "success");
    prepare(&success, &[("started", "42\n"), ("out", "hi\n"), ("err", ""), ("done", "0\n")]);
    assert_eq!(recover(&ctx, args.clone(), &success).await, Recovery::Completed(ok_output("hi\n")));

    // `err` is missing (as if empty), and `started` too: `done` alone says it ran.
    let failure = journal_of(&ctx, "failure");
    prepare(&failure, &[("out", "partial"), ("done", "7")]);
    let Recovery::Completed(out) = recover(&ctx, args.clone(), &failure).await else {
        panic!("expected a completed call");
    };
    assert!(!out.success);
    assert_eq!(out.output, "partial\n[exit code 7]");
    assert_eq!(out.data["exit_code"], 7);
    assert_eq!(out.data["stderr"], "");

    let large = journal_of(&ctx, "large");
    let big = "a".repeat(MAX_STREAM_BYTES + 10);
    prepare(&large, &[("out", &big), ("err", "oops\n"), ("done", "1\n")]);
    let Recovery::Completed(out) = recover(&ctx, args, &large).await else {
        panic!("expected a completed call");
    };
    let stdout = format!("{}\n[truncated: 10 more bytes]\n", "a".repeat(MAX_STREAM_BYTES));
    assert_eq!(out.data["stdout"], stdout.as_str());
    assert_eq!(out.data["stdout_truncated"], true);
    assert_eq!(out.output, format!("{stdout}[stderr]\noops\n[exit code 1]"));
}

#[tokio::test(start_paused = true)]
async fn recover_says_not_started_when_no_runner_marked_its_start() {
    let (_dir, _runs, ctx) = journaled();
    let args = json!({ "command": "x", "timeout_ms": 60000 });
    // The crash came before the journal directory was made, or right after.
    let missing = journal_of(&ctx, "missing");
    assert_eq!(recover(&ctx, args.clone(), &missing).await, Recovery::NotStarted);
    let empty = journal_of(&ctx, "empty");
    prepare(&empty, &[]);
    assert_eq!(recover(&ctx, args, &empty).await, Recovery::NotStarted);
    assert!(!missing.exists(), "recovery creates nothing");
}

#[tokio::test(start_paused = true)]
async fn recover_reports_interrupted_when_a_started_call_never_finishes_within_its_timeout() {
    let (_dir, _runs, ctx) = journaled();
    let interrupted = |recovery: Recovery| match recovery {
        Recovery::Interrupted(partial) => partial.output,
        other => panic!("expected an interrupted call, got {other:?}"),
    };
    let started = journal_of(&ctx, "started");
    prepare(&started, &[("started", "42\n"), ("out", "half")]);
    let partial =
        interrupted(recover(&ctx, json!({ "command": "x", "timeout_ms": 50 }), &started).await);
    assert!(partial.starts_with("half\n[interrupted:"), "{partial}");
    // The context's default timeout applies when the call had none.
    let ctx = ctx.with_shell_timeout(Duration::from_millis(50));
    interrupted(recover(&ctx, json!({ "command": "x" }), &started).await);

    // A runner killed between writing `done.tmp` and renaming it never published its code;
    // neither did one whose `done` is unreadable.
    let torn = journal_of(&ctx, "torn");
    prepare(&torn, &[("started", "42\n"), ("done.tmp", "0\n")]);
    interrupted(recover(&ctx, json!({ "command": "x" }), &torn).await);
    let garbled = journal_of(&ctx, "garbled");
    prepare(&garbled, &[("started", "42\n"), ("done", "zero\n")]);
    interrupted(recover(&ctx, json!({ "command": "x" }), &garbled).await);
}

#[tokio::test(start_paused = true)]
async fn recover_waits_for_a_runner_that_outlived_its_caller_and_adopts_its_result() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "outlived");
    prepare(&journal, &[]);
    let mut runner = spawn_runner(&journal, &format!("sleep 0.3; {FINISH}"));
    // Its pid, as the runner writes it when it starts.
    std::fs::write(journal.join("started"), format!("{}\n", runner.id())).unwrap();

    let recovered = recover(&ctx, json!({ "command": "x", "timeout_ms": 30000 }), &journal).await;

    assert_eq!(recovered, Recovery::Completed(ok_output("late\n")));
    assert!(runner.wait().unwrap().success());
}

/// A runner that is gone without having published an outcome (killed along with its caller,
/// or by a restart of the machine) cannot finish: recovery says so at once instead of waiting
/// out the call's timeout (ten minutes here), and the outcome is unknown.
#[tokio::test]
async fn recover_reports_a_call_whose_runner_is_gone_as_interrupted_at_once() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "gone");
    prepare(&journal, &[]);
    let mut runner = spawn_runner(&journal, r#"echo $$ > "$1/started"; echo half > "$1/out""#);
    assert!(runner.wait().unwrap().success());
    let args = json!({ "command": "x", "timeout_ms": 600_000 });

    let recovered = tokio::time::timeout(Duration::from_secs(120), recover(&ctx, args, &journal))
        .await
        .expect("recovery waited for a runner that is gone");

    let Recovery::Interrupted(partial) = recovered else { panic!("{recovered:?}") };
    assert!(partial.output.starts_with("half\n[interrupted:"), "{}", partial.output);
    assert!(partial.output.contains("its process was gone"), "{}", partial.output);
}

/// A runner that could not write its pid (a full disk left `started` empty) and is gone is
/// found gone by the call's tag, which it and its command carry among their arguments: no
/// process has it, so recovery says so at once instead of waiting out the call's timeout.
#[tokio::test]
async fn recover_finds_a_runner_that_left_no_pid_gone_by_its_tag() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "no-pid");
    prepare(&journal, &[("started", "")]);
    let args = json!({ "command": "x", "timeout_ms": 600_000 });

    let recovered = tokio::time::timeout(Duration::from_secs(120), recover(&ctx, args, &journal))
        .await
        .expect("recovery waited for a runner that is gone");

    let Recovery::Interrupted(partial) = recovered else { panic!("{recovered:?}") };
    assert!(partial.output.contains("its process was gone"), "{}", partial.output);
}

/// A pid in `started` that now belongs to a process started after the runner wrote it (the
/// pid was reused) is not the runner: the call is interrupted at once, and that process is
/// left alone.
#[tokio::test]
async fn recover_does_not_take_a_process_that_reused_the_runners_pid_for_the_runner() {
    let (_dir, _runs, ctx) = journaled();
    let ctx = ctx.with_tool_timeout(Duration::from_secs(3600));
    let journal = journal_of(&ctx, "reused-pid");
    let mut stranger = spawn_runner(Path::new("/nonexistent"), "sleep 30");
    prepare(&journal, &[("started", &format!("{}\n", stranger.id()))]);
    // Written ten minutes before the process with that pid started.
    let touched = Command::new("touch")
        .args(["-d", "10 minutes ago"])
        .arg(journal.join("started"))
        .status()
        .unwrap();
    assert!(touched.success());
    // Fifty minutes of the call's hour are left.
    let args = json!({ "command": "x", "timeout_ms": 3_600_000 });

    let recovered = tokio::time::timeout(Duration::from_secs(120), recover(&ctx, args, &journal))
        .await
        .expect("recovery took an unrelated process for the runner");

    assert!(matches!(recovered, Recovery::Interrupted(_)), "{recovered:?}");
    assert_eq!(stranger.try_wait().unwrap(), None, "an unrelated process was killed");
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

#[tokio::test(start_paused = true)]
async fn recover_waits_for_a_runner_spawned_just_before_the_crash_to_mark_its_start() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "late-start");
    prepare(&journal, &[]);
    // Marks its start well within recovery's grace period, then finishes.
    let script = format!(r#"sleep 0.05; echo $$ > "$1/started"; sleep 0.2; {FINISH}"#);
    let mut runner = spawn_runner(&journal, &script);

    let recovered = recover(&ctx, json!({ "command": "x", "timeout_ms": 30000 }), &journal).await;

    assert_eq!(recovered, Recovery::Completed(ok_output("late\n")));
    assert!(runner.wait().unwrap().success());
}

// ---------------------------------------------------------------------------------------------
// the registry's journals and the defaults

#[tokio::test(start_paused = true)]
async fn the_registry_keeps_each_keys_journal_in_its_own_escaped_directory() {
    let (dir, _runs, ctx) = journaled();
    let tools = ToolRegistry::with_builtins();
    let root = ctx.journal().unwrap().to_path_buf();
    let keys = [
        ("bottom-1/task-1:s1#1#0", "bottom-1_2ftask-1_3as1_231_230"),
        ("a/b", "a_2fb"),
        ("a_2fb", "a_5f2fb"),
        ("../up", "_2e_2e_2fup"),
        ("é.x", "_c3_a9_2ex"),
    ];
    for (n, (key, _)) in keys.iter().enumerate() {
        let args = json!({ "command": format!("echo {n} >> log; echo {n}") });
        let out = tools.call_journaled(&ctx, "shell", args, key).await.unwrap();
        assert_eq!(out, ok_output(&format!("{n}\n")));
    }

    let mut names: Vec<&str> = keys.iter().map(|(_, name)| *name).collect();
    names.sort_unstable();
    assert_eq!(entries(&root), names);
    for (n, (_, name)) in keys.iter().enumerate() {
        let out = std::fs::read_to_string(root.join(name).join("out")).unwrap();
        assert_eq!(out, format!("{n}\n"), "{name}");
    }
    assert_eq!(std::fs::read_to_string(dir.path().join("log")).unwrap(), "0\n1\n2\n3\n4\n");
}

#[tokio::test(start_paused = true)]
async fn the_registry_recovers_a_call_by_its_key() {
    let (_dir, _runs, ctx) = journaled();
    let tools = ToolRegistry::with_builtins();
    let args = json!({ "command": "echo once >> log; echo ran" });
    let out = tools.call_journaled(&ctx, "shell", args.clone(), "agent/k1").await.unwrap();

    let same = tools.recover(&ctx, "shell", args.clone(), "agent/k1").await.unwrap();
    let other = tools.recover(&ctx, "shell", args, "agent/k2").await.unwrap();

    assert_eq!(same, Recovery::Completed(out));
    assert_eq!(other, Recovery::NotStarted);
}

#[tokio::test(start_paused = true)]
async fn the_registry_validates_before_journaling_or_recovering() {
    let (_dir, _runs, ctx) = journaled();
    let tools = ToolRegistry::with_builtins();

    let bad = json!({ "command": "touch made", "timeout_ms": "soon" });
    let err = tools.call_journaled(&ctx, "shell", bad.clone(), "k").await.unwrap_err();
    assert_eq!(problems(err), ["`timeout_ms`: expected integer, found string"]);
    let err = tools.recover(&ctx, "shell", bad, "k").await.unwrap_err();
    assert_eq!(problems(err), ["`timeout_ms`: expected integer, found string"]);
    let err = tools.call_journaled(&ctx, "deploy", json!({}), "k").await.unwrap_err();
    assert!(matches!(err, ToolError::UnknownTool { ref name, .. } if name == "deploy"));
    let err = tools.recover(&ctx, "deploy", json!({}), "k").await.unwrap_err();
    assert!(matches!(err, ToolError::UnknownTool { ref name, .. } if name == "deploy"));

    assert!(!ctx.journal().unwrap().exists());
    assert!(!ctx.workspace().join("made").exists());
}

#[tokio::test(start_paused = true)]
async fn without_a_journal_directory_the_registry_calls_plainly_and_knows_nothing() {
    let (dir, ctx) = workspace();
    let tools = ToolRegistry::with_builtins();
    let args = json!({ "command": "echo x > made; echo ran" });

    let out = tools.call_journaled(&ctx, "shell", args.clone(), "k").await.unwrap();
    let recovered = tools.recover(&ctx, "shell", args, "k").await.unwrap();

    assert_eq!(out, ok_output("ran\n"));
    assert_eq!(entries(dir.path()), ["made"]);
    // Not even `NotStarted`: without a journal the call may have run.
    assert_eq!(recovered, Recovery::Unknown);
}

#[tokio::test(start_paused = true)]
async fn tools_without_a_journal_just_run_and_recover_nothing() {
    let (dir, _runs, ctx) = journaled();
    let mut tools = ToolRegistry::with_builtins();
    let deploy = Arc::new(Unjournaled {
        calls: AtomicUsize::new(0),
        schema: json!({ "type": "object", "additionalProperties": false }),
    });
    tools.register(deploy.clone()).unwrap();
    let write = json!({ "path": "a.txt", "content": "hello" });

    let wrote = tools.call_journaled(&ctx, "write_file", write.clone(), "w").await.unwrap();
    let deployed = tools.call_journaled(&ctx, "deploy", json!({}), "d").await.unwrap();

    assert!(wrote.success);
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "hello");
    assert_eq!(deployed, ok_output("deployed\n"));
    assert_eq!(deploy.calls.load(Ordering::SeqCst), 1);
    assert!(!ctx.journal().unwrap().exists(), "no journal was kept");
    assert_eq!(tools.recover(&ctx, "write_file", write, "w").await.unwrap(), Recovery::Unknown);
    assert_eq!(tools.recover(&ctx, "deploy", json!({}), "d").await.unwrap(), Recovery::Unknown);
    assert_eq!(deploy.calls.load(Ordering::SeqCst), 1, "recovery does not run the tool");
}

/// Regression: a journaled command killed by a signal was reported as exit code 128 + N.
#[tokio::test(start_paused = true)]
async fn a_journaled_command_killed_by_a_signal_is_reported_like_a_plain_call() {
    let (_dir, _runs, ctx) = journaled();
    let args = json!({ "command": "kill -KILL $$" });
    let plain = call(&ctx, "shell", args.clone()).await.unwrap();
    let journaled = run_journaled(&ctx, args, &journal_of(&ctx, "k")).await.unwrap();
    // The runner's shell adds its own `Killed` notice to stderr; the status is the same.
    assert_eq!(
        (journaled.success, &journaled.data["signal"], &journaled.data["exit_code"]),
        (false, &json!(9), &json!(null))
    );
    assert_eq!(
        (plain.success, &plain.data["signal"], &plain.data["exit_code"]),
        (false, &json!(9), &json!(null))
    );
    assert!(journaled.output.ends_with("[killed by signal 9]"), "{}", journaled.output);
}

/// Regression: the keys `.` and `..` named the journal root and its parent.
#[tokio::test(start_paused = true)]
async fn every_key_gets_its_own_journal_directory_inside_the_journal_root() {
    let (_dir, runs, ctx) = journaled();
    let tools = ToolRegistry::with_builtins();
    std::fs::create_dir_all(ctx.journal().unwrap()).unwrap();
    for key in [".", ".."] {
        tools.call_journaled(&ctx, "shell", json!({ "command": "true" }), key).await.unwrap();
    }
    assert!(!ctx.journal().unwrap().join("done").exists(), "key `.` used the root itself");
    assert!(!runs.path().join("done").exists(), "key `..` wrote into the run directory");
}

/// Regression: the journal's files were read with blocking opens, so a command that put a
/// FIFO in its journal directory could hang the recovering agent for good.
#[tokio::test(start_paused = true)]
async fn recover_does_not_block_on_a_fifo_in_the_journal() {
    let (_dir, _runs, ctx) = journaled();
    let journal = journal_of(&ctx, "fifo");
    prepare(&journal, &[("started", "42\n")]);
    for name in ["done", "out", "out.more"] {
        let made = Command::new("mkfifo").arg(journal.join(name)).status().unwrap();
        assert!(made.success());
    }
    let (sender, receiver) = std::sync::mpsc::channel();
    let recovering = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let recovery =
            runtime.block_on(recover(&ctx, json!({ "command": "x", "timeout_ms": 10 }), &journal));
        let _ = sender.send(recovery);
    });

    let recovery = receiver.recv_timeout(Duration::from_secs(30)).expect("recovery hung on a FIFO");

    assert!(matches!(recovery, Recovery::Interrupted(_)), "{recovery:?}");
    recovering.join().unwrap();
}
