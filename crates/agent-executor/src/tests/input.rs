//! Bad input is refused before anything runs, with a message that says what to fix.

use agent_state::RunState;

use super::{Answer, Scripted, cx};
use crate::{ExecError, Executor, MAX_OBJECTIVE_BYTES, Registry, RegistryError, RunRequest};

fn executor() -> Executor {
    let mut registry = Registry::new();
    registry.register(Scripted::new("alpha", vec![Answer::Ok("a")])).unwrap();
    registry.register(Scripted::new("beta", vec![Answer::Ok("b")])).unwrap();
    Executor::new(registry)
}

#[test]
fn a_name_is_registered_once_and_must_be_valid() {
    let mut registry = Registry::new();
    registry.register(Scripted::new("alpha", vec![])).unwrap();
    assert_eq!(
        registry.register(Scripted::new("alpha", vec![])),
        Err(RegistryError::Duplicate("alpha".into()))
    );
    for bad in ["", "Alpha", "1st", "has space", "dash-ed"] {
        assert_eq!(
            registry.register(Scripted::new(bad, vec![])),
            Err(RegistryError::BadName(bad.into())),
            "{bad:?}"
        );
    }
    assert_eq!(registry.names().collect::<Vec<_>>(), ["alpha"]);
    assert!(registry.get("alpha").is_some() && registry.get("beta").is_none());
}

#[tokio::test(start_paused = true)]
async fn refusals_name_the_problem() {
    let executor = executor();
    let err = executor.execute(RunRequest::new("gamma", "x"), cx("gamma")).await.unwrap_err();
    assert_eq!(err.to_string(), "unknown agent kind `gamma`; the kinds are: alpha, beta");

    let err = executor.execute(RunRequest::new("alpha", " \n\t"), cx("alpha")).await.unwrap_err();
    assert!(matches!(err, ExecError::EmptyObjective { .. }), "{err}");

    let long = "x".repeat(MAX_OBJECTIVE_BYTES + 1);
    let err = executor.execute(RunRequest::new("alpha", long), cx("alpha")).await.unwrap_err();
    assert!(err.to_string().contains("over the limit of 16384"), "{err}");
    let exact = "x".repeat(MAX_OBJECTIVE_BYTES);
    assert!(executor.execute(RunRequest::new("alpha", exact), cx("alpha")).await.is_ok());

    let request = RunRequest::new("alpha", "x").with_inputs(serde_json::json!([1, 2]));
    let err = executor.execute(request, cx("alpha")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "inputs of the `alpha` run: expected a JSON object, found an array"
    );

    // A run id is a `RunId`: a request with one that breaks its rule is refused as it is read.
    for id in ["", "a/b", "../x", "a_b", "a.b", &"i".repeat(65)] {
        let json = serde_json::json!({"run_id": id, "kind": "alpha", "objective": "x"});
        let err = serde_json::from_value::<RunRequest>(json).unwrap_err();
        assert!(err.to_string().contains(agent_state::RUN_ID_RULE), "{id:?}: {err}");
    }
    let json = serde_json::json!({"run_id": "run-1", "kind": "alpha", "objective": "x"});
    let request = serde_json::from_value::<RunRequest>(json).unwrap();
    assert_eq!(executor.execute(request, cx("alpha")).await.unwrap().run_id, "run-1");
}

#[tokio::test(start_paused = true)]
async fn inputs_are_checked_against_the_kinds_schema() {
    let mut registry = Registry::new();
    registry
        .register(crate::FnKind::new("typed", "takes a count", |_, _| {
            Box::pin(async { Ok(crate::KindOutput::new("ok", 1.0)) })
        }))
        .unwrap();
    // FnKind takes any object; a kind with a schema refuses what does not match it.
    struct Counted;
    #[async_trait::async_trait]
    impl crate::Kind for Counted {
        fn name(&self) -> &str {
            "counted"
        }
        fn description(&self) -> &str {
            "takes a count"
        }
        fn inputs_schema(&self) -> serde_json::Value {
            serde_json::json!({
                "type": "object",
                "properties": { "count": { "type": "integer" } },
                "required": ["count"]
            })
        }
        async fn run(
            &self,
            _: &RunRequest,
            _: &mut crate::Capsule,
        ) -> Result<crate::KindOutput, crate::KindError> {
            Ok(crate::KindOutput::new("ok", 1.0))
        }
    }
    registry.register(Counted).unwrap();
    let executor = Executor::new(registry);
    let bad = RunRequest::new("counted", "x").with_inputs(serde_json::json!({ "count": "three" }));
    let err = executor.execute(bad, cx("counted")).await.unwrap_err();
    assert!(err.to_string().contains("count"), "{err}");
    let good = RunRequest::new("counted", "x").with_inputs(serde_json::json!({ "count": 3 }));
    let response = executor.execute(good, cx("counted")).await.unwrap();
    assert_eq!(response.status, RunState::Completed);
}
