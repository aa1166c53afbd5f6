//! Evolution through the library: a suite's task teams run on the services `strata run` gives
//! a run's team ([`TeamFileServices`]), so the team file's per-agent network rule holds during
//! evaluation too, where the built-in in-memory services give every agent the team's network.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

use agent_evolution::{SuiteEvaluator, TaskRun, TaskSuite};
use agent_state::evolution::Genome;
use strata::evaluation::TeamFileServices;

fn write(dir: &Path, path: &str, text: &str) {
    let file = dir.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
}

/// A one-task suite whose team lets commands use the network (`[sandbox] network = true`)
/// but not its executor's (`network = false`); the task connects to `port` on this machine
/// and writes `reached` if it could; its check passes when it could not.
fn denied_suite(port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "suite.toml", "team = \"team.toml\"\nheartbeat = \"20ms\"\n");
    let team = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/evolve/suite/team.toml"),
    )
    .unwrap();
    let team = team.replace("id = \"bottom-1\"\n", "id = \"bottom-1\"\nnetwork = false\n");
    assert!(team.contains("network = false"));
    write(dir.path(), "team.toml", &format!("{team}\n[sandbox]\nnetwork = true\n"));
    write(dir.path(), "tasks/connect/task.toml", "check = \"test ! -e reached\"\n");
    let connect = format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && touch reached; true");
    write(
        dir.path(),
        "tasks/connect/plan.toml",
        &format!(
            "id = \"connect\"\ngoal = \"connect\"\n[[steps]]\nid = \"s\"\ndomain = \"ops\"\ntool = \"shell\"\nargs = {{ command = \"{connect}\" }}\n"
        ),
    );
    dir
}

async fn run(evaluator: &SuiteEvaluator) -> TaskRun {
    let suite = evaluator.suite();
    let genesis = Genome::genesis(suite.executor_config(), suite.permissions()).unwrap();
    evaluator.run_task(&genesis, &suite.tasks[0]).await.unwrap()
}

/// Whether a connection is waiting on `listener` (and takes it).
fn connected(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    listener.accept().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_agent_network_rule_holds_during_evaluation() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = denied_suite(listener.local_addr().unwrap().port());
    let suite = TaskSuite::load(dir.path()).unwrap();
    assert!(suite.team.sandbox.network);

    // The built-in services give every agent the team's sandbox: the executor connects.
    let built_in = run(&SuiteEvaluator::new(suite.clone()).unwrap()).await;
    assert!(built_in.succeeded && !built_in.passed, "{built_in:?}");
    assert!(connected(&listener), "the built-in services' executor did not connect");

    // The library's services apply the team file's rule, as `strata run` does: it cannot.
    let services = TeamFileServices::new(&suite.team, false).unwrap();
    let evaluator = SuiteEvaluator::with_services(suite, Arc::new(services));
    let denied = run(&evaluator).await;
    assert!(denied.succeeded && denied.passed, "{denied:?}");
    assert_eq!(denied.calls, 1, "{denied:?}");
    assert!(!connected(&listener), "the executor without the network reached the server");
}
