//! `inspect RUN tree` and `inspect RUN results` on stored runs: an ordinary run says that
//! nothing was spawned and nothing returned; a run whose audit log holds a spawn, a result and
//! a dismissal (appended as the runtime appends them) shows the spawned agent under its
//! spawner with its task, status, result, dismissal and cost, and lists its result.

use std::path::Path;

use agent_core::{AuditEvent, AuditLog, SledAuditLog, SpawnRecord};
use agent_llm::{LlmStore, SledLlmStore, Tally, UsageReport};
use agent_state::{
    AgentId, AgentLayer, AgentResult, AgentStatus, Artifact, ChangeType, ResultStatus, Timestamp,
};
use run_store::{Durability, RunStore};

use crate::support::{Scratch, finished_run};

#[test]
fn an_ordinary_run_has_no_spawned_agents_and_no_results() {
    let s = Scratch::with_example();
    finished_run(&s);

    let tree = s.strata(&["inspect", "r", "tree", "--data", "D"]);
    tree.code(0).stdout_has(&[
        "run r · task `hello` · succeeded\n",
        "top-a · terminated\n├─ mid-docs · terminated\n│  ├─ bottom-d1 · terminated\n",
        "└─ mid-build · terminated\n   ├─ bottom-b1 · terminated\n   └─ bottom-b2 · terminated\n",
        "top-c · terminated\n",
        "no agents were spawned in this run\n",
    ]);
    assert!(!tree.stdout.contains('$'), "no usage, no costs: {}", tree.stdout);
    let json = s.strata(&["inspect", "r", "tree", "--data", "D", "--json"]).code(0).json();
    assert_eq!(json["spawned"], 0);
    let agents = json["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 9);
    assert!(agents.iter().all(|a| a["spawned"] == false && a["results"] == 0), "{json}");

    let results = s.strata(&["inspect", "r", "results", "--data", "D"]).code(0).stdout.clone();
    assert_eq!(
        results,
        "no structured results in this run (no agent returned results with return_results)\n"
    );
    let json = s.strata(&["inspect", "r", "results", "--data", "D", "--json"]).code(0).json();
    assert_eq!(json, serde_json::json!([]));

    s.strata(&["inspect", "--help"]).code(0).stdout_has(&["results", "tree"]);
}

/// Appends to the stored run's audit log as the runtime would (hash chain and anchors kept),
/// stores a usage ledger, and closes the run cleanly again.
fn add_spawned_worker(run: &Path) {
    let store = RunStore::open(run, Durability::Synced).unwrap();
    let log = SledAuditLog::open(&store).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let last = log.records(None).await.unwrap().last().unwrap().at.0;
        let mut at = last;
        let mut append = async |agent: &str, event: AuditEvent| {
            at += 1;
            log.append(&AgentId::from(agent), Timestamp(at), event).await.unwrap();
        };
        let spawn = SpawnRecord {
            agent: AgentId::from("w-1"),
            parent: AgentId::from("top-a"),
            role: "coder".into(),
            layer: AgentLayer::Bottom,
            task_prompt: "Write the parser\nwith tests".into(),
            key: "call-1".into(),
            domain: None,
            depth: 1,
        };
        append("top-a", AuditEvent::Spawned { spawn }).await;
        use AgentStatus::{Idle, Initializing, ShuttingDown, Terminated, Working};
        for (from, to) in [(Initializing, Idle), (Idle, Working)] {
            append("w-1", AuditEvent::Transition { from, to, reason: "test".into() }).await;
        }
        let result = AgentResult {
            status: ResultStatus::Partial,
            summary: "parser written\nerrors not yet".into(),
            artifacts: vec![Artifact {
                file_path: "src/parser.rs".into(),
                description: "the parser".into(),
                change_type: ChangeType::Created,
            }],
            known_issues: vec!["no error messages".into()],
        };
        let event = AuditEvent::Result { task: "Write the parser".into(), result, trusted: false };
        append("w-1", event).await;
        let summary = "wrote the parser".to_owned();
        append("top-a", AuditEvent::Despawned { agent: AgentId::from("w-1"), summary }).await;
        for (from, to) in [(Working, Idle), (Idle, ShuttingDown), (ShuttingDown, Terminated)] {
            append("w-1", AuditEvent::Transition { from, to, reason: "test".into() }).await;
        }
    });
    let mut report = UsageReport::default();
    for (agent, cost) in [("top-a", 0.01), ("w-1", 0.002)] {
        let tally = Tally { calls: 1, input_tokens: 10, cost_usd: cost, ..Tally::default() };
        report.by_agent.insert(agent.into(), tally);
    }
    SledLlmStore::open(&store).unwrap().save_usage(&report).unwrap();
    store.commit_blocking().unwrap();
    drop((log, store));
    // The store seals the run as it closes; wait until it has let go of the run.
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
    // The run's copy of the team file prices the model, so costs are known.
    let team = run.join("team.toml");
    let text = std::fs::read_to_string(&team).unwrap();
    let priced = format!(
        "{text}\n[prices]\n\"gpt-a\" = {{ input_per_mtok = 1.0, output_per_mtok = 2.0 }}\n"
    );
    std::fs::write(&team, priced).unwrap();
}

#[test]
fn a_spawned_worker_shows_under_its_spawner_and_its_result_is_listed() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    add_spawned_worker(&run);
    s.strata(&["verify", "r", "--data", "D"]).code(0).stdout_has(&["the run verifies"]);

    let tree = s.strata(&["inspect", "r", "tree", "--data", "D"]);
    tree.code(0).stdout_has(&[
        "top-a · terminated · $0.0100 · subtree $0.0120\n├─ mid-docs · terminated · $0.0000",
        "\n└─ w-1 (coder) · terminated · task: Write the parser… · returned UNTRUSTED results · despawned · $0.0020\ntop-b · terminated · $0.0000\n",
        "1 agent(s) spawned in this run, 1 returned results, 1 despawned\n",
        "costs: the agent's own model calls in USD",
    ]);
    assert!(!tree.stdout.contains("warning"), "the log is intact: {}", tree.stdout);
    let json = s.strata(&["inspect", "r", "tree", "--data", "D", "--json"]).code(0).json();
    assert_eq!(json["spawned"], 1);
    let agents = json["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 10);
    let w = &agents[9];
    assert_eq!(
        (&w["id"], &w["supervisor"], &w["role"], &w["status"]),
        (&"w-1".into(), &"top-a".into(), &"coder".into(), &"terminated".into())
    );
    assert_eq!((&w["despawned"], &w["untrusted_results"]), (&true.into(), &1.into()), "{w}");
    assert!((agents[0]["subtree_cost_usd"].as_f64().unwrap() - 0.012).abs() < 1e-12);

    s.strata(&["inspect", "r", "results", "--data", "D"]).code(0).stdout_has(&[
        "w-1 (coder) · partial · UNTRUSTED · audit record ",
        "  task: Write the parser\n  summary: parser written\n    errors not yet\n",
        "  artifacts:\n    created src/parser.rs — the parser\n",
        "  known issues:\n    - no error messages\n",
    ]);
    let json = s.strata(&["inspect", "r", "results", "--data", "D", "--json"]).code(0).json();
    let results = json.as_array().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["agent"], "w-1");
    assert_eq!(results[0]["trusted"], false);
    assert_eq!(results[0]["result"]["summary"], "parser written\nerrors not yet");
}
