//! Unit tests of the executor's core: lifecycle and retries on paused time, timeouts, progress,
//! batches, capsules and bad input. The built-in kinds are tested in `tests/it`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod batch;
mod capsule;
mod input;
mod lifecycle;
mod progress;
mod toolpath;

use std::sync::{Arc, Mutex};

use agent_core::RuleBasedReasoner;
use async_trait::async_trait;

use crate::{Capsule, Kind, KindError, KindOutput, RunContext, RunRequest};

/// A kind that plays a script: attempt `n` gets the `n`th answer (the last one repeats), and
/// every attempt's start is recorded on tokio's clock.
struct Scripted {
    name: &'static str,
    answers: Vec<Answer>,
    starts: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

#[derive(Clone)]
enum Answer {
    Ok(&'static str),
    Fail(KindError),
    /// Waits this long, then answers `ok`.
    Sleep(std::time::Duration),
    Panic,
}

impl Scripted {
    fn new(name: &'static str, answers: Vec<Answer>) -> Self {
        Self { name, answers, starts: Arc::default() }
    }

    fn starts(&self) -> Arc<Mutex<Vec<tokio::time::Instant>>> {
        self.starts.clone()
    }
}

#[async_trait]
impl Kind for Scripted {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        "plays a script"
    }

    async fn run(
        &self,
        _request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError> {
        let n = {
            let mut starts = self.starts.lock().unwrap();
            starts.push(tokio::time::Instant::now());
            starts.len()
        };
        assert_eq!(capsule.attempt() as usize, n, "the capsule counts attempts");
        let answer = self.answers.get(n - 1).or(self.answers.last()).cloned();
        match answer.unwrap_or(Answer::Ok("")) {
            Answer::Ok(text) => Ok(KindOutput::new(text, 0.5)),
            Answer::Fail(error) => Err(error),
            Answer::Sleep(d) => {
                tokio::time::sleep(d).await;
                Ok(KindOutput::new("slept", 1.0))
            }
            Answer::Panic => panic!("the handler broke"),
        }
    }
}

fn cx(kind: &str) -> RunContext {
    RunContext::standalone(kind, Arc::new(RuleBasedReasoner::new()))
}
