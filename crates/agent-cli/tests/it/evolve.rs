//! `strata evolve`, `strata lineage`, `strata inspect RUN lineage` and `strata adopt`: an
//! evolution of a small suite from start to family tree, killed and resumed, bad input refused
//! before anything is written, and its best genome hot-swapped into a live OODA agent.

use std::process::{Command, Stdio};

use agent_state::evolution::{Genome, GenomeConfig};
use serde_json::Value;

use crate::support::*;

const EVOLUTION: &str = r#"
suite = "suite"

[evolution]
population = 3
generations = 2
seed = 7
concurrency = 2

[genesis]
max_retries = 0

[[genes]]
target = "max_retries"
kind = "int"
min = 0
max = 3
"#;

/// A suite of two quick tasks: one passes only with a retry, one always.
fn scratch(slow: bool) -> Scratch {
    let s = Scratch::new();
    s.write("evolution.toml", EVOLUTION);
    s.write("suite/suite.toml", "team = \"team.toml\"\nheartbeat = \"20ms\"\n");
    let team = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/evolve/suite/team.toml"),
    )
    .unwrap();
    s.write("suite/team.toml", &team);
    let plan = |id: &str, command: &str| {
        format!(
            "id = \"{id}\"\ngoal = \"{id}\"\n[[steps]]\nid = \"s\"\ndomain = \"ops\"\ntool = \"shell\"\nargs = {{ command = \"{command}\" }}\n"
        )
    };
    let pause = if slow { "sleep 0.4; " } else { "" };
    s.write("suite/tasks/flaky/task.toml", "check = \"test -f ok\"\n");
    s.write(
        "suite/tasks/flaky/plan.toml",
        &plan(
            "flaky",
            &format!("{pause}if [ -f tried ]; then touch ok; else touch tried; exit 1; fi"),
        ),
    );
    s.write("suite/tasks/plain/task.toml", "check = \"test -f done\"\n");
    s.write("suite/tasks/plain/plan.toml", &plan("plain", &format!("{pause}touch done")));
    s
}

fn lineage(s: &Scratch, id: &str) -> Value {
    s.strata(&["lineage", id, "--format", "json", "--data", "D"]).code(0).json()
}

#[test]
fn strata_evolve_runs_an_evolution_and_exports_its_family_tree() {
    let s = scratch(false);
    let out = s.strata(&["evolve", "evolution.toml", "--data", "D", "--run-id", "e1", "--no-sync"]);
    out.code(0).stdout_has(&["evolution e1", "best genome", "max_retries = ", "strata lineage e1"]);
    let listed = listed_run(&s, "D", "e1");
    assert_eq!(listed["status"], "finished");
    assert_eq!(listed["task"], "(evolution)");

    // The best genome is stored and checks out; it retries (the flaky task needs one).
    let best: Genome = serde_json::from_str(&s.read("D/e1/best-genome.json")).unwrap();
    best.verify().unwrap();
    assert!(best.config.max_retries >= 1, "{:?}", best.config);

    // The tree: every genome with its fitness, the best one named; the same in `inspect`.
    let tree = lineage(&s, "e1");
    let nodes = tree["nodes"].as_array().unwrap();
    assert!(nodes.len() >= 3, "{tree}");
    assert_eq!(tree["best"]["genome_id"], Value::String(best.id.to_string()));
    assert!(nodes.iter().all(|n| n["fitness"].is_number()), "every genome was evaluated");
    assert_eq!(
        s.strata(&["inspect", "e1", "lineage", "--json", "--data", "D"]).code(0).json(),
        tree
    );
    let table = s.strata(&["inspect", "e1", "lineage", "--data", "D"]).code(0).stdout.clone();
    assert!(
        table.contains(&format!("{} gen", best.id.short())) && table.contains("BEST"),
        "{table}"
    );
    assert!(table.contains("max_retries = "), "{table}");

    // DOT that Graphviz renders, and Mermaid.
    let dot = s.strata(&["lineage", "e1", "--format", "dot", "--data", "D"]).code(0).stdout.clone();
    assert_eq!(
        dot.matches(" -> ").count(),
        nodes.iter().filter(|n| !n["parent_id"].is_null()).count()
    );
    let mut graphviz = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("Graphviz's `dot` (apt-get install graphviz; .ci/run installs it)");
    std::io::Write::write_all(graphviz.stdin.as_mut().unwrap(), dot.as_bytes()).unwrap();
    let svg = graphviz.wait_with_output().unwrap();
    assert!(svg.status.success(), "{}", String::from_utf8_lossy(&svg.stderr));
    assert!(String::from_utf8_lossy(&svg.stdout).contains(best.id.short()));
    let mermaid =
        s.strata(&["lineage", "e1", "--format", "mermaid", "--data", "D"]).code(0).stdout.clone();
    assert!(mermaid.starts_with("flowchart TD"), "{mermaid}");

    // A finished evolution is not resumed; the team-run commands say what it is.
    s.strata(&["evolve", "--resume", "e1", "--data", "D"]).bad_input(&["has finished"]);
    for command in [&["resume", "e1"][..], &["inspect", "e1", "tree"], &["verify", "e1"]] {
        let mut args = command.to_vec();
        args.extend(["--data", "D"]);
        s.strata(&args).bad_input(&["`e1` is an evolution", "strata evolve --resume e1"]);
    }
}

#[test]
fn a_killed_evolution_resumes_from_its_last_finished_evaluation() {
    let s = scratch(true);
    let run = s.spawn(&["evolve", "evolution.toml", "--data", "D", "--run-id", "e2"]);
    wait_for("two finished evaluations", || {
        let out = s.strata(&["lineage", "e2", "--data", "D"]);
        out.status.code() == Some(0)
            && out.json()["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().filter(|n| n["fitness"].is_number()).count() >= 2)
    });
    run.kill();
    assert_eq!(listed_run(&s, "D", "e2")["status"], "killed (resumable)");
    let out = s.strata(&["evolve", "--resume", "e2", "--data", "D"]);
    out.code(0).stdout_has(&["best genome"]);
    let reused: u64 = out
        .stdout
        .lines()
        .find_map(|l| l.split(" evaluations run, ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap();
    assert!(
        reused >= 2,
        "the evaluations finished before the kill are not run again:\n{}",
        out.stdout
    );
    assert_eq!(listed_run(&s, "D", "e2")["status"], "finished");
}

#[test]
fn bad_evolution_input_is_refused_before_anything_is_written() {
    let s = scratch(false);
    s.write("zero.toml", &EVOLUTION.replace("population = 3", "population = 0"));
    s.strata(&["evolve", "zero.toml", "--data", "D"]).bad_input(&["`population` is 0"]);
    s.write("suite/tasks/plain/task.toml", "description = \"no check\"\n");
    s.strata(&["evolve", "evolution.toml", "--data", "D"])
        .bad_input(&["task `plain` has no check command"]);
    s.write("suite/tasks/plain/task.toml", "check = \"test -f done\"\n");
    s.write(
        "wide.toml",
        &EVOLUTION.replace("max_retries = 0", "max_retries = 0\ntools = [\"http_get\"]"),
    );
    s.strata(&["evolve", "wide.toml", "--data", "D"]).bad_input(&["permissions", "http_get"]);
    s.write("out.toml", &EVOLUTION.replace("max_retries = 0", "max_retries = 9"));
    s.strata(&["evolve", "out.toml", "--data", "D"]).bad_input(&["genesis.max_retries"]);
    assert!(!s.path("D").exists(), "nothing written");
    s.strata(&["evolve", "missing.toml", "--data", "D"]).bad_input(&["missing.toml"]);
    s.strata(&["lineage", "nope", "--data", "D"]).bad_input(&["no evolution `nope`"]);
    s.strata(&["evolve", "--resume", "nope", "--data", "D"]).bad_input(&["no evolution `nope`"]);
}

/// The OODA scratch of `ooda.rs` (an OODA executor under the docs lead, alice allowed to
/// operate it) whose plan makes it wait for a human on a level-4 change, and a genome for it.
fn ooda_scratch() -> Scratch {
    let s = crate::ooda::scratch();
    s.write(
        "plan.toml",
        "id = \"improve\"\ngoal = \"wait for a human\"\n[[steps]]\nid = \"careful\"\nagent = \"ooda-1\"\ntool = \"modify_self\"\nargs = { modification_type = \"prompt\", target = \"prompt\", change = { text = \"Ask first.\" }, safety_level = 4 }\n",
    );
    let mut config = GenomeConfig::new("Careful editor");
    config.prompt = "check twice".into();
    config.max_retries = 5;
    config.tools = vec!["read_file".into(), "write_file".into()];
    let genome = Genome::genesis(config, vec!["read_file".into(), "write_file".into()]).unwrap();
    s.write("genome.json", &serde_json::to_string_pretty(&genome).unwrap());
    s
}

#[test]
fn strata_adopt_hot_swaps_a_genome_into_a_live_ooda_agent() {
    let s = ooda_scratch();
    let mut run = start_run(&s, "a1");
    pending_decision(&s, &mut run, "a1", "the change to wait for a human", |d| {
        d["status"] == "pending" && d["content"]["kind"] == "self_modification"
    });
    let mut tampered: Value = serde_json::from_str(&s.read("genome.json")).unwrap();
    tampered["config"]["max_retries"] = 9.into();
    s.write("tampered.json", &tampered.to_string());
    s.strata(&["adopt", "a1", "ooda-1", "tampered.json", "--as", "alice", "--data", "D"])
        .bad_input(&["not a valid genome"]);
    s.strata(&["adopt", "a1", "mid-docs", "genome.json", "--as", "alice", "--data", "D"])
        .bad_input(&["`mid-docs` is not an OODA agent"]);
    s.strata(&["adopt", "a1", "ooda-1", "genome.json", "--as", "alice", "--data", "D"])
        .code(0)
        .stdout_has(&["ooda-1 told to become genome"]);
    run.finish().code(0);

    let audit = s.strata(&["inspect", "a1", "audit", "--data", "D", "--json"]).code(0).json();
    let outcomes: Vec<String> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "ooda" && r["event"]["ooda"]["kind"] == "modify_self")
        .map(|r| r["event"]["ooda"]["data"]["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert!(outcomes.contains(&"hot_swap_scheduled".to_owned()), "{outcomes:?}");
    assert_eq!(outcomes.last().map(String::as_str), Some("adopted"), "{outcomes:?}");
    s.strata(&["verify", "a1", "--data", "D"]).code(0);
}
