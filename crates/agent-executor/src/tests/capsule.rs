//! Capsules: each run's scratch, conversation and budget are its own, and the processes it
//! starts die with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::tools::ToolContext;
use agent_core::{ScriptedAnswer, ScriptedReasoner};
use agent_state::{FailureKind, RetryPolicy, RunState};

use super::cx;
use crate::{ExecEnv, Executor, FnKind, KindError, KindOutput, Registry, RunContext, RunRequest};

fn scratch_executor(dir: &std::path::Path) -> Executor {
    let mut registry = Registry::new();
    registry
        .register(FnKind::new("scratch", "writes or reads its scratch", |req, capsule| {
            Box::pin(async move {
                let (op, name) = req.objective.split_once(' ').unwrap_or(("", ""));
                let out = match op {
                    "write" => {
                        capsule.write_scratch(name, "secret of this run").await?;
                        "written".to_owned()
                    }
                    _ => capsule.read_scratch(name).await?,
                };
                Ok(KindOutput::new(out, 1.0))
            })
        }))
        .unwrap();
    let workspace = Arc::new(ToolContext::new(dir).unwrap());
    Executor::new(registry).with_env(ExecEnv::with_workspace(workspace))
}

#[tokio::test]
async fn one_run_cannot_read_another_runs_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let executor = scratch_executor(dir.path());
    let a = RunRequest::new("scratch", "write notes.txt").with_run_id("run-a".parse().unwrap());
    assert!(executor.execute(a, cx("scratch")).await.unwrap().success());
    assert!(dir.path().join(".strata/capsules/run-a/notes.txt").is_file());

    let own = RunRequest::new("scratch", "read notes.txt").with_run_id("run-a".parse().unwrap());
    assert_eq!(
        executor.execute(own, cx("scratch")).await.unwrap().primary_output,
        "secret of this run"
    );

    for name in ["../run-a/notes.txt", "/etc/passwd", "sub/../../run-a/notes.txt"] {
        let b = RunRequest::new("scratch", format!("read {name}"))
            .with_run_id("run-b".parse().unwrap());
        let response = executor.execute(b, cx("scratch")).await.unwrap();
        assert_eq!(response.status, RunState::Failed, "{name}");
        let failure = response.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::Permission, "{name}: {failure}");
        assert!(failure.reason.contains("leaves the run's capsule"), "{failure}");
    }
    // Its own scratch holds nothing of run a's.
    let b = RunRequest::new("scratch", "read notes.txt").with_run_id("run-b".parse().unwrap());
    let response = executor.execute(b, cx("scratch")).await.unwrap();
    assert_eq!(response.status, RunState::Failed);
}

#[tokio::test]
async fn conversation_and_budget_are_the_runs_own() {
    let reasoner = Arc::new(ScriptedReasoner::from_answers(vec![
        ScriptedAnswer::Compose("first".into()),
        ScriptedAnswer::Compose("second".into()),
        ScriptedAnswer::Compose("third".into()),
    ]));
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut registry = Registry::new();
    let turns = seen.clone();
    registry
        .register(FnKind::new("talk", "composes twice", move |_, capsule| {
            let turns = turns.clone();
            Box::pin(async move {
                let mut out = Vec::new();
                for _ in 0..2 {
                    turns.lock().unwrap().push(capsule.conversation().len());
                    out.push(capsule.compose("write", "material").await?.unwrap_or_default());
                }
                Ok(KindOutput::new(out.join(","), 1.0))
            })
        }))
        .unwrap();
    let executor = Executor::new(registry);
    let with = |calls| RunContext {
        reasoner_calls: calls,
        ..RunContext::standalone("talk", reasoner.clone())
    };

    let response = executor.execute(RunRequest::new("talk", "a"), with(None)).await.unwrap();
    assert_eq!(response.primary_output, "first,second");
    // A second run starts with an empty conversation, and its share of the budget is one call.
    let response = executor.execute(RunRequest::new("talk", "b"), with(Some(1))).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [0, 1, 0, 1]);
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Permission);
    assert!(failure.reason.contains("budget"), "{failure}");
}

#[tokio::test]
async fn the_hard_timeout_kills_the_processes_a_run_started() {
    let pid: Arc<Mutex<Option<u32>>> = Arc::default();
    let mut registry = Registry::new();
    let seen = pid.clone();
    registry
        .register(FnKind::new("hang", "starts a process and waits", move |_, capsule| {
            let seen = seen.clone();
            Box::pin(async move {
                // The group leader and a grandchild in the same group.
                let mut command = capsule.command("sh")?;
                command.arg("-c").arg("sleep 1000 & wait");
                let child = capsule.spawn(&mut command)?;
                *seen.lock().unwrap() = child.id();
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                drop(child);
                Err(KindError::invalid("unreachable"))
            })
        }))
        .unwrap();
    let policy = RetryPolicy {
        hard_timeout_ms: 300,
        soft_timeout_ms: 100,
        ..RetryPolicy::executor_default()
    };
    let dir = tempfile::tempdir().unwrap();
    let workspace = Arc::new(ToolContext::new(dir.path()).unwrap());
    let executor =
        Executor::new(registry).with_env(ExecEnv::with_workspace(workspace)).with_policy(policy);
    let response = executor.execute(RunRequest::new("hang", "go"), cx("hang")).await.unwrap();
    assert_eq!(response.failure.map(|f| f.kind), Some(FailureKind::HardTimeout));
    let group = pid.lock().unwrap().expect("the process started");
    // Every process of the group is gone (or a zombie awaiting its reaper).
    let mut alive = Vec::new();
    for _ in 0..200 {
        alive = group_members(group);
        if alive.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(alive.is_empty(), "still running in group {group}: {alive:?}");
}

/// The live (not zombie) processes of process group `group`, from /proc.
fn group_members(group: u32) -> Vec<u32> {
    let mut members = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return members };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid pgrp ...: split after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2) == Some(&group.to_string().as_str()) && fields.first() != Some(&"Z") {
            members.push(pid);
        }
    }
    members
}

/// The processes of `arg` in their command line, from /proc (not zombies).
fn alive_with_arg(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
            .unwrap_or(false);
        if !zombie && cmdline.split(|b| *b == 0).any(|part| part == arg.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// A kind that runs `sh -c <objective>` through its capsule and returns what it printed.
fn shell_kind() -> Registry {
    let mut registry = Registry::new();
    registry
        .register(FnKind::new("sh", "runs its objective in sh", |req, capsule| {
            Box::pin(async move {
                let mut command = capsule.command("sh")?;
                command.arg("-c").arg(&req.objective).stdout(std::process::Stdio::piped());
                command.stderr(std::process::Stdio::piped());
                let child = capsule.spawn(&mut command)?;
                let out = child
                    .wait_with_output()
                    .await
                    .map_err(|e| KindError::new(FailureKind::Internal, e.to_string()))?;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                if out.status.success() {
                    Ok(KindOutput::new(text, 1.0))
                } else {
                    Err(KindError::new(FailureKind::Client, text))
                }
            })
        }))
        .unwrap();
    registry
}

#[tokio::test]
async fn a_process_a_kind_starts_runs_in_the_workspace_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Arc::new(ToolContext::new(dir.path()).unwrap());
    let executor = Executor::new(shell_kind()).with_env(ExecEnv::with_workspace(workspace));
    // The workspace is writable and the command runs in it.
    let ok = RunRequest::new("sh", "echo hi > here.txt && cat here.txt");
    let response = executor.execute(ok, cx("sh")).await.unwrap();
    assert!(response.success(), "{:?}", response.failure);
    assert_eq!(std::fs::read_to_string(dir.path().join("here.txt")).unwrap(), "hi\n");
    // What the sandbox hides stays hidden (a hidden file reads as an empty one)...
    let shadow = RunRequest::new("sh", "cat /etc/shadow");
    let response = executor.execute(shadow, cx("sh")).await.unwrap();
    assert!(!response.primary_output.contains("root:"), "{response:?}");
    // ...and the system is read-only.
    let escape = RunRequest::new("sh", "touch /etc/strata-capsule-escape");
    let response = executor.execute(escape, cx("sh")).await.unwrap();
    assert_eq!(response.status, RunState::Failed, "{response:?}");
    assert!(!std::path::Path::new("/etc/strata-capsule-escape").exists());
}

#[tokio::test]
async fn the_hard_timeout_kills_a_sandboxed_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Arc::new(ToolContext::new(dir.path()).unwrap());
    let policy = RetryPolicy {
        hard_timeout_ms: 500,
        soft_timeout_ms: 100,
        ..RetryPolicy::executor_default()
    };
    let executor = Executor::new(shell_kind())
        .with_env(ExecEnv::with_workspace(workspace))
        .with_policy(policy);
    // A unique sleep, doubly forked into its own session inside the sandbox.
    let marker = format!(
        "{}.{}",
        1000 + std::process::id() % 1000,
        uuid::Uuid::new_v4().as_u128() % 1_000_000
    );
    let objective = format!("setsid sh -c 'sleep {marker} &' ; sleep {marker}");
    let response = executor.execute(RunRequest::new("sh", objective), cx("sh")).await.unwrap();
    assert_eq!(response.failure.map(|f| f.kind), Some(FailureKind::HardTimeout));
    let mut alive = Vec::new();
    for _ in 0..200 {
        alive = alive_with_arg(&marker);
        if alive.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(alive.is_empty(), "still running: {alive:?}");
}

#[tokio::test]
async fn a_capsule_without_a_workspace_refuses_to_start_a_process() {
    let executor = Executor::new(shell_kind());
    let dir = tempfile::tempdir().unwrap();
    let witness = dir.path().join("ran");
    let objective = format!("touch {}", witness.display());
    let response = executor.execute(RunRequest::new("sh", objective), cx("sh")).await.unwrap();
    assert_eq!(response.status, RunState::Failed, "{response:?}");
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::InvalidInput, "{failure}");
    assert!(failure.reason.contains("has no workspace"), "{failure}");
    assert!(failure.reason.contains("ExecEnv::with_workspace"), "says what to set: {failure}");
    assert!(!witness.exists(), "no bare process ran");
}
