//! A resume started in the background (the dashboard's resume button): a process of its own,
//! its output in a log file in the run's directory, watched until the run is live again or the
//! process refuses it; then it runs on its own, reaped by a thread whenever it ends.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::run_dir::{RunInfo, effective_status};

/// How often the process is looked at while it is watched.
const LOOK: Duration = Duration::from_millis(100);

/// What came of a resume started by [`resume_in_background`].
#[derive(Debug)]
pub enum BackgroundResume {
    /// The run is already running: nothing was started.
    Running,
    /// The process resumed the run and it ended, while it was watched.
    Finished,
    /// The process ended at once, with `status`, refusing the run; `said` is its output.
    Refused {
        /// How it ended.
        status: ExitStatus,
        /// What it wrote (control characters escaped, trimmed).
        said: String,
    },
    /// The run is live again (or was still starting when the watch ended): it goes on in the
    /// background.
    Resuming,
}

/// Why a resume could not be started.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    /// Whether the run is running cannot be told.
    #[error("cannot tell whether the run is running: {0}")]
    Status(#[source] run_store::StoreError),
    /// The process could not be started.
    #[error("cannot start the resume: {0}")]
    Start(#[source] std::io::Error),
}

/// Resumes the run in `dir` with the process `command` makes (a `strata resume` of it, or
/// any program that resumes it) in the background, its standard output and error written to
/// `log` in `dir`: watched for at most `patience`, until the run is live again (a refusal
/// comes before).
pub async fn resume_in_background(
    dir: &Path,
    command: impl FnOnce() -> std::io::Result<Command> + Send + 'static,
    log: &str,
    patience: Duration,
) -> Result<BackgroundResume, BackgroundError> {
    if run_store::RunStore::is_in_use(dir).map_err(BackgroundError::Status)? {
        return Ok(BackgroundResume::Running);
    }
    let started = tokio::task::spawn_blocking({
        let path = dir.join(log);
        move || start(command, &path)
    })
    .await;
    let mut child = started
        .map_err(std::io::Error::other)
        .and_then(|spawned| spawned)
        .map_err(BackgroundError::Start)?;
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(BackgroundResume::Finished),
            Ok(Some(status)) => {
                let said = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
                let said = team_file::escape_controls(said.trim()).into_owned();
                return Ok(BackgroundResume::Refused { status, said });
            }
            Ok(None)
                if tokio::time::Instant::now() < deadline
                    && !RunInfo::read(dir)
                        .is_ok_and(|info| effective_status(dir, &info) == "running") =>
            {
                tokio::time::sleep(LOOK).await;
            }
            Ok(None) | Err(_) => break,
        }
    }
    std::thread::spawn(move || child.wait());
    Ok(BackgroundResume::Resuming)
}

/// Starts the process `command` makes, its input empty, its output and errors in the file
/// `log` (made anew).
fn start(command: impl FnOnce() -> std::io::Result<Command>, log: &Path) -> std::io::Result<Child> {
    let log = std::fs::File::create(log)?;
    command()?.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).spawn()
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// A run directory no process holds, and the store kept open when `held`.
    fn run_dir(held: bool) -> (tempfile::TempDir, Option<run_store::RunStore>) {
        let tmp = tempfile::tempdir().unwrap();
        let store = run_store::RunStore::create(
            &tmp.path().join("r"),
            "r",
            agent_state::Timestamp(1),
            run_store::Durability::NoSync,
        )
        .unwrap();
        (tmp, held.then_some(store))
    }

    fn shell(script: &'static str) -> impl FnOnce() -> std::io::Result<Command> + Send {
        move || {
            let mut command = Command::new("sh");
            command.arg("-c").arg(script);
            Ok(command)
        }
    }

    #[tokio::test]
    async fn a_process_that_ends_at_once_refuses_the_run_with_what_it_said() {
        let (tmp, _) = run_dir(false);
        let dir = tmp.path().join("r");
        let patience = Duration::from_secs(10);
        let resumed =
            resume_in_background(&dir, shell("echo 'no: \x1b[1m'; exit 3"), "log", patience)
                .await
                .unwrap();
        let BackgroundResume::Refused { status, said } = resumed else { panic!("{resumed:?}") };
        assert_eq!(status.code(), Some(3));
        assert!(said.starts_with("no: ") && !said.contains('\x1b'), "{said:?}");
        let finished = resume_in_background(&dir, shell("true"), "log", patience).await.unwrap();
        assert!(matches!(finished, BackgroundResume::Finished), "{finished:?}");
    }

    #[tokio::test]
    async fn a_run_in_use_is_not_resumed_and_a_slow_one_goes_on_in_the_background() {
        let (tmp, held) = run_dir(true);
        let dir = tmp.path().join("r");
        let patience = Duration::from_millis(300);
        let resumed = resume_in_background(&dir, shell("exit 1"), "log", patience).await.unwrap();
        assert!(matches!(resumed, BackgroundResume::Running), "{resumed:?}");
        assert!(!dir.join("log").exists(), "nothing was started");
        drop(held);
        let resumed = resume_in_background(&dir, shell("sleep 2"), "log", patience).await.unwrap();
        assert!(matches!(resumed, BackgroundResume::Resuming), "{resumed:?}");
    }
}
