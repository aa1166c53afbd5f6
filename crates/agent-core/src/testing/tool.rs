//! [`FakeTool`]: the one tool tests register when they need a tool that fails, fails for a
//! while, never returns or takes its time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// What each call of a [`FakeTool`] does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FakeAct {
    /// Reports failure (`success: false`) with this output, every call.
    Fail(String),
    /// Reports failure with `failure` on the first `times` calls, then success with `success`.
    FailFirst {
        /// How many calls fail.
        times: usize,
        /// The output of a failed call.
        failure: String,
        /// The output of a call that works.
        success: String,
    },
    /// Never returns (a search over an endless tree, a file on a stuck mount).
    Hang,
    /// Waits this long on tokio's clock, then succeeds with `done`.
    Sleep(Duration),
}

/// A tool for tests: a name, what its calls do ([`FakeAct`]) and how many there were. Its
/// schema is any object; it has no side effects unless
/// [`with_side_effects`](Self::with_side_effects) says so.
#[derive(Debug)]
pub struct FakeTool {
    name: String,
    description: String,
    side_effects: bool,
    schema: Value,
    act: FakeAct,
    calls: AtomicUsize,
}

impl FakeTool {
    /// The tool `name` doing `act` on each call.
    pub fn new(name: impl Into<String>, act: FakeAct) -> Self {
        let description = match &act {
            FakeAct::Fail(_) => "always fails".to_owned(),
            FakeAct::FailFirst { times, .. } => format!("fails {times} times, then works"),
            FakeAct::Hang => "never returns".to_owned(),
            FakeAct::Sleep(wait) => format!("takes {} ms, then works", wait.as_millis()),
        };
        Self {
            name: name.into(),
            description,
            side_effects: false,
            schema: serde_json::json!({ "type": "object" }),
            act,
            calls: AtomicUsize::new(0),
        }
    }

    /// The tool `name` that reports failure with `output` on every call.
    pub fn failing(name: impl Into<String>, output: impl Into<String>) -> Self {
        Self::new(name, FakeAct::Fail(output.into()))
    }

    /// The tool `name` that reports failure (`not yet`) on its first `times` calls and works
    /// (`done`) afterwards.
    pub fn flaky(name: impl Into<String>, times: usize) -> Self {
        Self::new(
            name,
            FakeAct::FailFirst { times, failure: "not yet".into(), success: "done".into() },
        )
    }

    /// The tool `name` whose calls never return.
    pub fn hanging(name: impl Into<String>) -> Self {
        Self::new(name, FakeAct::Hang)
    }

    /// The tool `name` whose calls take `wait` on tokio's clock, then work (`done`).
    pub fn slow(name: impl Into<String>, wait: Duration) -> Self {
        Self::new(name, FakeAct::Sleep(wait))
    }

    /// The same tool, declared to have side effects (`true`) or not.
    #[must_use]
    pub fn with_side_effects(mut self, side_effects: bool) -> Self {
        self.side_effects = side_effects;
        self
    }

    /// How many times it was called.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Tool for FakeTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        self.side_effects
    }

    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let before = self.calls.fetch_add(1, Ordering::SeqCst);
        let (success, output) = match &self.act {
            FakeAct::Fail(output) => (false, output.clone()),
            FakeAct::FailFirst { times, failure, success } => {
                if before < *times {
                    (false, failure.clone())
                } else {
                    (true, success.clone())
                }
            }
            FakeAct::Hang => std::future::pending().await,
            FakeAct::Sleep(wait) => {
                tokio::time::sleep(*wait).await;
                (true, "done".to_owned())
            }
        };
        Ok(ToolOutput { success, output, data: Value::Null })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_act_answers_as_it_says_and_calls_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::new(dir.path()).unwrap();
        let args = serde_json::json!({});

        let failing = FakeTool::failing("broken", "disk on fire").with_side_effects(true);
        let out = failing.call(&ctx, args.clone()).await.unwrap();
        assert_eq!((out.success, out.output.as_str()), (false, "disk on fire"));
        assert!(failing.has_side_effects());

        let flaky = FakeTool::flaky("flaky", 2);
        let mut answers = Vec::new();
        for _ in 0..3 {
            let out = flaky.call(&ctx, args.clone()).await.unwrap();
            answers.push((out.success, out.output));
        }
        let not_yet = (false, "not yet".to_owned());
        assert_eq!(answers, [not_yet.clone(), not_yet, (true, "done".to_owned())]);
        assert_eq!(flaky.calls(), 3);
        assert!(!flaky.has_side_effects());

        let slow = FakeTool::slow("slow", Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        assert!(slow.call(&ctx, args.clone()).await.unwrap().success);
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        let hanging = FakeTool::hanging("hang");
        let call = tokio::time::timeout(Duration::from_secs(3600), hanging.call(&ctx, args));
        assert!(call.await.is_err(), "a hanging call does not return");
        assert_eq!(hanging.calls(), 1);
    }
}
