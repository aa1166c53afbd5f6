//! The example from `strata init`, run to success, then listed, inspected and verified.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::{FAST, Scratch, listed_run, run_id_of, snapshot};

const HELLO: &str = "hello, strata\n";
const NOTES: &str = "# Plan\n- greet\n- measure\n";

/// init → run → runs → inspect (every view, text and JSON) → verify, with a relative data
/// directory and workspace (a relative journal directory once broke every shell step).
#[test]
fn init_run_inspect_verify_the_example() {
    let s = Scratch::new();
    let init = s.strata(&["init", "."]);
    init.code(0).stdout_has(&["team.toml", "plan.toml", "strata run"]);
    assert!(s.read("team.toml").contains("[[top]]"));
    assert!(s.read("plan.toml").contains("[[steps]]"));

    let run = s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--quiet",
    ]);
    run.code(0).stdout_has(&[
        "task `hello` succeeded",
        "(4 steps)",
        "files written: hello.txt, notes/plan.md",
        "approved (signed by ",
        "retries: 0, failures: 0",
        "inspect it with: strata inspect ",
    ]);
    let id = run_id_of(&run);
    assert!(id.starts_with("hello-"), "the run id names the task: {id}");
    assert!(s.path("D").join(&id).join("run.json").is_file());
    assert_eq!(s.read("W/hello.txt"), HELLO);
    assert_eq!(s.read("W/notes/plan.md"), NOTES);

    let listed = listed_run(&s, "D", &id);
    assert_eq!(listed["status"], "succeeded");
    assert_eq!(listed["task"], "hello");
    assert_eq!(listed["failure"], Value::Null);
    s.strata(&["runs", "--data", "D"]).code(0).stdout_has(&[&id, "succeeded"]);

    let inspect = |view: &str| s.strata(&["inspect", &id, view, "--data", "D", "--json"]);

    let tree = inspect("tree").code(0).json();
    assert_eq!(tree["run_id"], id.as_str());
    assert_eq!(tree["status"], "succeeded");
    assert_eq!(tree["task"], "hello");
    let agents = tree["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 9);
    for (layer, n) in [("top", 3), ("mid", 2), ("bottom", 4)] {
        assert_eq!(agents.iter().filter(|a| a["layer"] == layer).count(), n, "{layer}");
    }
    for a in agents {
        assert_eq!(a["status"], "terminated", "every agent ends terminated: {a}");
        assert_eq!(a["supervisor"].is_null(), a["layer"] == "top", "only powers lack a supervisor");
    }

    let audit = inspect("audit").code(0).json();
    let records = audit.as_array().unwrap();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["seq"], i, "audit records are numbered from 0 without gaps");
        if i > 0 {
            assert_eq!(
                r["prev_hash"],
                records[i - 1]["hash"],
                "record {i} links to the one before"
            );
        }
    }
    let tools: BTreeSet<&str> = records
        .iter()
        .filter(|r| r["event"]["event"] == "tool_call")
        .inspect(|r| assert_eq!(r["event"]["success"], true, "{r}"))
        .map(|r| r["event"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, BTreeSet::from(["list_dir", "shell", "write_file"]));
    let tool_calls = records.iter().filter(|r| r["event"]["event"] == "tool_call").count();
    assert_eq!(tool_calls, 4, "one tool call per step, none repeated");

    let decisions = inspect("decisions").code(0).json();
    let decisions = decisions.as_array().unwrap();
    assert_eq!(decisions.len(), 1);
    let d = &decisions[0];
    assert_eq!(d["status"], "approved");
    assert_eq!(d["proposer"], "top-a");
    assert_eq!(d["vetoes"], serde_json::json!([]));
    let signers: BTreeSet<&str> =
        d["signatures"].as_array().unwrap().iter().map(|s| s["signer"].as_str().unwrap()).collect();
    assert_eq!(signers, BTreeSet::from(["top-b", "top-c"]), "two signatures: {d}");
    assert_eq!(d["content"]["task_id"], "hello");
    assert_eq!(d["content"]["steps"].as_array().unwrap().len(), 4);

    let metrics = inspect("metrics").code(0).json();
    let metrics = metrics.as_array().unwrap();
    assert_eq!(metrics.len(), 9);
    let bottom_done: u64 = metrics
        .iter()
        .filter(|m| m["agent"].as_str().unwrap().starts_with("bottom-"))
        .map(|m| m["metrics"]["tasks_completed"].as_u64().unwrap())
        .sum();
    assert_eq!(bottom_done, 4, "the executors completed the four steps");
    for m in metrics {
        assert_eq!(m["metrics"]["tasks_failed"], 0, "{m}");
        assert!(m["score"].as_f64().unwrap() > 0.0, "{m}");
    }

    let boards = inspect("whiteboards").code(0).json();
    let global =
        boards.as_array().unwrap().iter().find(|b| b["board"] == "global").expect("a global board");
    assert!(
        global["content"].as_str().unwrap().contains("Task hello closed: succeeded"),
        "{global}"
    );

    // Every message of the run is listed and acknowledged (a warning the scheduler sent as the
    // run closed is read at shutdown).
    let messages = inspect("messages").code(0).json();
    let messages = messages.as_array().unwrap();
    assert!(messages.len() > 9, "every message of the run: {messages:?}");
    assert!(
        messages.iter().any(|m| m["message"]["kind"] == "task_assign"),
        "no task_assign message: {messages:?}"
    );
    for m in messages {
        assert_eq!(m["acknowledged"], true, "{m}");
    }
    let seqs: Vec<u64> = messages.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert!(seqs.is_sorted(), "in send order: {seqs:?}");
    assert_eq!(inspect("usage").code(0).json()["reasoner"], "rule-based");

    // The text views, and `tree` by default.
    s.strata(&["inspect", &id, "--data", "D"]).code(0).stdout_has(&[
        "top-a",
        "mid-docs",
        "bottom-b2",
    ]);
    s.strata(&["inspect", &id, "audit", "--data", "D"]).code(0).stdout_has(&["tool write_file ok"]);
    s.strata(&["inspect", &id, "decisions", "--data", "D"]).code(0).stdout_has(&["approved"]);
    s.strata(&["inspect", &id, "messages", "--data", "D"]).code(0).stdout_has(&[
        &format!("{0} messages, {0} acknowledged, 0 not acknowledged", messages.len()),
        "acked",
        "task_assign",
    ]);
    for view in ["whiteboards", "metrics", "usage"] {
        s.strata(&["inspect", &id, view, "--data", "D"]).code(0);
    }

    // The timeline: the plan's four steps, each with who did it for whom, how long it took,
    // its call and its result, and its own tool call on the way.
    let timeline = inspect("timeline").code(0).json();
    let steps = timeline["steps"].as_array().unwrap();
    let keys: std::collections::BTreeSet<&str> =
        steps.iter().map(|st| st["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["hello/list", "hello/measure", "hello/write-hello", "hello/write-notes"].into(),
        "{timeline:#}"
    );
    for step in steps {
        assert_eq!(
            (&step["kind"], &step["success"], &step["attempt"]),
            (&"step".into(), &true.into(), &1.into()),
            "{step:#}"
        );
        assert!(step["agent"].as_str().unwrap().starts_with("bottom-"), "{step:#}");
        assert!(step["for"].as_str().unwrap().starts_with("mid-"), "{step:#}");
        assert!(step["duration_s"].as_f64().unwrap() >= 0.0, "{step:#}");
        let tool = if step["key"] == "hello/measure" { "tool shell ok" } else { "tool " };
        let records = step["records"].as_array().unwrap();
        assert_eq!(records.len(), 1, "one tool call per step: {step:#}");
        assert!(records[0]["line"].as_str().unwrap().contains(tool), "{step:#}");
        assert_eq!(records[0]["agent"], step["agent"]);
    }
    let greeting = steps.iter().find(|st| st["key"] == "hello/write-hello").unwrap();
    assert!(greeting["input"].as_str().unwrap().contains("hello.txt"), "{greeting:#}");
    assert!(greeting["output"].as_str().unwrap().contains("wrote"), "{greeting:#}");
    let worker = greeting["agent"].as_str().unwrap().to_owned();
    let text = s.strata(&["inspect", &id, "timeline", &worker, "--data", "D"]);
    text.code(0).stdout_has(&["step hello/write-hello · ", "  input: ", "  output: ", "succeeded"]);
    assert!(!text.stdout.contains("hello/measure"), "another agent's step: {}", text.stdout);

    let verify = s.strata(&["verify", &id, "--data", "D"]);
    verify.code(0).stdout_has(&["ok      audit chain", "the run verifies"]);
    let verify = s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    let checks = verify["checks"].as_array().unwrap();
    assert!(checks.len() >= 6, "{verify}");
    assert!(checks.iter().all(|c| c["ok"] == true), "{verify}");

    // A run is also found by its directory.
    let by_dir = format!("D/{id}");
    s.strata(&["verify", &by_dir, "--json"]).code(0);
}

/// `run --json` prints only JSON lines: `run_started`, audit records, then `run_finished` with
/// the outcome.
#[test]
fn run_json_prints_json_lines_ending_in_run_finished() {
    let s = Scratch::with_example();
    let run = s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--json",
    ]);
    run.code(0);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let first = lines.first().unwrap();
    assert_eq!(first["event"], "run_started");
    let id = first["run_id"].as_str().unwrap();
    assert_eq!(first["task"], "hello");
    assert!(
        lines.iter().any(|l| l["event"] == "audit" && l["record"]["event"]["event"] == "tool_call")
    );
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "run_finished", "{last}");
    assert_eq!(last["run_id"], id);
    assert_eq!(last["outcome"]["outcome"], "succeeded", "{last}");
    let results = last["outcome"]["results"].as_array().unwrap();
    let steps: Vec<&str> = results.iter().map(|r| r["step_id"].as_str().unwrap()).collect();
    assert_eq!(steps, ["write-hello", "write-notes", "measure", "list"]);
    let measured = results.iter().find(|r| r["step_id"] == "measure").unwrap();
    assert_eq!(measured["output"].as_str().unwrap().trim(), HELLO.len().to_string());
    assert_eq!(last["files_written"], serde_json::json!(["hello.txt", "notes/plan.md"]));
    assert_eq!(last["retries"], 0);
    assert_eq!(last["failures"], 0);
    assert_eq!(last["decisions"][0]["status"], "approved");
    assert_eq!(listed_run(&s, "D", id)["status"], "succeeded");

    // Every stored record was printed, once; each agent's transitions and tool calls (which
    // its own turns append one after another) in order.
    let printed: Vec<&Value> =
        lines.iter().filter(|l| l["event"] == "audit").map(|l| &l["record"]).collect();
    let mut seqs: Vec<u64> = printed.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    let stored: Vec<u64> =
        audit.as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let mut by_agent: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for r in printed
        .iter()
        .filter(|r| r["event"]["event"] == "transition" || r["event"]["event"] == "tool_call")
    {
        by_agent.entry(r["agent"].as_str().unwrap()).or_default().push(r["seq"].as_u64().unwrap());
    }
    assert!(by_agent.values().any(|s| s.len() > 3), "{by_agent:?}");
    for (agent, agent_seqs) in &by_agent {
        assert!(agent_seqs.is_sorted(), "{agent}'s records out of order: {agent_seqs:?}");
    }
    seqs.sort_unstable();
    assert_eq!(seqs, stored);
}

/// Without `--team` the default team runs the example plan, and without `--data` and
/// `--workspace` the run goes to `.strata/runs/<id>`, its files to the run's own `workspace`.
#[test]
fn default_team_data_and_workspace() {
    let s = Scratch::with_example();
    assert_eq!(s.strata(&["runs", "--json"]).code(0).json(), serde_json::json!([]));
    s.strata(&["runs"]).code(0).stdout_has(&["no runs yet"]);
    let run = s.strata(&["run", "plan.toml", FAST[0], FAST[1], "--no-sync", "--quiet"]);
    run.code(0).stdout_has(&["task `hello` succeeded"]);
    let id = run_id_of(&run);
    assert!(s.path(".strata/runs").join(&id).is_dir());
    assert_eq!(s.read(&format!(".strata/runs/{id}/workspace/hello.txt")), HELLO);
    assert_eq!(s.read(&format!(".strata/runs/{id}/workspace/notes/plan.md")), NOTES);
    assert!(!s.path("workspace").exists());
    let runs = s.strata(&["runs", "--json"]).code(0).json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
    let tree = s.strata(&["inspect", &id, "tree", "--json"]).code(0).json();
    assert_eq!(tree["agents"].as_array().unwrap().len(), 9);
    s.strata(&["verify", &id]).code(0);
}

/// `run --run-id` of a run that exists is bad input, and leaves the run as it was.
#[test]
fn run_id_of_an_existing_run_is_refused_and_the_run_is_untouched() {
    let s = Scratch::with_example();
    let args = [
        "run",
        "plan.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "taken",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ];
    s.strata(&args).code(0);
    let data = snapshot(&s.path("D"));
    let workspace = snapshot(&s.path("W"));
    s.strata(&args).bad_input(&["D/taken already exists", "resume the run in it"]);
    assert!(snapshot(&s.path("D")) == data, "the data directory changed");
    assert!(snapshot(&s.path("W")) == workspace, "the workspace changed");
    assert_eq!(listed_run(&s, "D", "taken")["status"], "succeeded");
    s.strata(&["verify", "taken", "--data", "D"]).code(0);
}

/// A run made before run ids had one rule for every store may be named with `_` or `.`. Run
/// ids are one type now (`RunId`), so this version does not open it: `strata runs` lists it as
/// unreadable with why, `strata inspect` refuses it as an older Strata's and changes nothing,
/// and a new run cannot take such an id.
#[test]
fn a_run_named_before_the_run_id_rule_is_listed_as_unreadable_and_refused_as_older() {
    let s = Scratch::with_example();
    let args = [
        "run",
        "plan.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "made",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ];
    s.strata(&args).code(0);
    // As an older Strata named it.
    let old = "old_run.v1";
    std::fs::rename(s.path("D/made"), s.path(&format!("D/{old}"))).unwrap();
    for file in ["run.json", "strata-run.json"] {
        let path = s.path(&format!("D/{old}/{file}"));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"made\"", &format!("\"{old}\""))).unwrap();
    }
    let before = snapshot(&s.path(&format!("D/{old}")));
    let row = listed_run(&s, "D", old);
    assert_eq!(row["status"], "unreadable", "{row}");
    assert!(row["failure"].as_str().unwrap().contains("older Strata"), "{row}");
    let out = s.strata(&["inspect", old, "tree", "--data", "D"]);
    out.code(2);
    assert!(out.stderr.contains("older Strata"), "{}", out.stderr);
    assert_eq!(snapshot(&s.path(&format!("D/{old}"))), before, "nothing is changed");
    // A new run cannot take that id: refused by the command line, nothing written.
    let mut again = args.to_vec();
    again[7] = old;
    again[3] = "D2";
    let out = s.strata(&again);
    out.code(2);
    assert!(out.stderr.contains("cannot be a run id"), "{}", out.stderr);
    assert!(out.stderr.contains("1 to 64 ASCII letters, digits or `-`"), "{}", out.stderr);
    assert!(!s.path("D2").exists());
}

/// The total size of the files under `dir`.
fn size_of(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() {
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            total += meta.len();
        }
    }
    total
}

/// Regression (issue #10): a large `write_file` content in a plan was copied into the store
/// many times over (the task message, the decision, each work package and subtask, every
/// saved agent state, the audit log): about 24 times its size. It is stored once now, and
/// everything else carries a reference.
#[test]
fn a_large_content_in_a_plan_is_stored_once() {
    let s = Scratch::new();
    let content = "0123456789abcdef".repeat(256 * 1024); // 4 MiB
    s.write(
        "big.toml",
        &format!(
            "id = \"big\"\ngoal = \"write a big file\"\n[[steps]]\nid = \"w\"\ndomain = \"docs\"\ntool = \"write_file\"\nargs = {{ path = \"big.txt\", content = \"{content}\" }}\n"
        ),
    );

    s.strata(&[
        "run",
        "big.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "b",
        FAST[0],
        FAST[1],
        "--quiet",
    ])
    .code(0);

    assert!(s.read("W/big.txt") == content, "the file has the plan's content");
    let db = size_of(&s.path("D/b/db"));
    let size = content.len() as u64;
    assert!(
        db < size * 3 / 2,
        "the store holds {db} bytes for a {size}-byte content: copied more than once"
    );
    let audit = s.strata(&["inspect", "b", "audit", "--data", "D", "--json"]);
    audit.code(0);
    assert!(audit.stdout.len() < size as usize / 4, "the audit log repeats the content");
    assert!(audit.stdout.contains("\"$blob\""), "the audit log names the content by its hash");
}

/// `init --scale N` writes a team of N agents (three powers, a lead per thousand agents, the
/// rest executors) and a plan with work for a share of them, which runs to success.
#[test]
fn a_generated_team_of_a_thousand_agents_runs_its_plan() {
    let s = Scratch::new();
    s.strata(&["init", "gen", "--scale", "1000"]).code(0);
    let team = s.read("gen/team.toml");
    assert_eq!(team.matches("[[top]]").count(), 3);
    assert_eq!(team.matches("[[mid]]").count(), 1);
    assert_eq!(team.matches("[[bottom]]").count(), 996);

    let run = s.strata(&[
        "run",
        "gen/plan.toml",
        "--team",
        "gen/team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "g",
        "--no-sync",
        "--quiet",
    ]);

    run.code(0).stdout_has(&["task `scale-1000` succeeded", "(10 steps)"]);
    assert_eq!(s.read("W/out/9.txt"), "step 9\n");
    let tree = s.strata(&["inspect", "g", "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["agents"].as_array().unwrap().len(), 1000);
}
