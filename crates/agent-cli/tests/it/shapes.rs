//! The smaller team shapes, end to end: `strata init --shape crew|single` writes a team and a
//! plan that run to success on the rule-based reasoner (files in the workspace, nothing
//! signed, the run inspected and verified); a goal in words runs on each shape with a model
//! (a fake one over HTTP); a crew or a single agent killed mid-step resumes to success with the
//! step run once; and `--scale` stays a layered team's.

use serde_json::{Value, json};

use agent_llm::testing::{FakeModel, decision_of, text_completion, tool_call_completion};

use crate::support::{FAST, GATED_PLAN, Scratch, audited_calls, listed_run, run_id_of};

const HELLO: &str = "hello, strata\n";
const NOTES: &str = "# Plan\n- greet\n- measure\n";

/// The shapes `init` writes besides the layered default: name, agents, the entry agent.
const SHAPES: [(&str, usize, &str); 2] = [("crew", 3, "lead"), ("single", 1, "agent")];

#[test]
fn init_writes_each_shape_and_its_plan_runs_to_success() {
    for (shape, agents, entry) in SHAPES {
        let s = Scratch::new();
        s.strata(&["init", "--shape", shape, "."]).code(0).stdout_has(&["team.toml", "plan.toml"]);
        let team = s.read("team.toml");
        assert!(team.contains(&format!("shape = \"{shape}\"")), "{team}");
        assert!(!team.contains("[[top]]"), "a {shape} has no powers");

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
        ]);
        assert!(!run.stdout.contains("signed by"), "{shape}: nothing is signed:\n{}", run.stdout);
        assert_eq!(s.read("W/hello.txt"), HELLO, "{shape}");
        assert_eq!(s.read("W/notes/plan.md"), NOTES, "{shape}");
        let id = run_id_of(&run);
        assert_eq!(listed_run(&s, "D", &id)["status"], "succeeded");

        // Inspect: the agents (the entry agent a root), the audit log, the messages.
        let inspect = |view: &str| s.strata(&["inspect", &id, view, "--data", "D", "--json"]);
        let tree = inspect("tree").code(0).json();
        assert_eq!(tree["status"], "succeeded", "{shape}");
        let listed = tree["agents"].as_array().unwrap();
        assert_eq!(listed.len(), agents, "{shape}: {tree}");
        assert!(listed.iter().all(|a| a["status"] == "terminated"), "{shape}: {tree}");
        let roots: Vec<&Value> = listed.iter().filter(|a| a["supervisor"].is_null()).collect();
        assert_eq!(roots.len(), 1, "{shape}: one agent takes the tasks: {tree}");
        assert_eq!(roots[0]["id"], entry, "{shape}");
        let messages = inspect("messages").code(0).json();
        let to_entry = messages.as_array().unwrap().iter().any(|m| {
            m["message"]["kind"] == "task_assign"
                && m["message"]["from"] == "system"
                && m["message"]["to"] == entry
        });
        assert!(to_entry, "{shape}: the task goes from the system to `{entry}`: {messages}");
        assert!(inspect("decisions").code(0).json().as_array().unwrap().is_empty(), "{shape}");
        s.strata(&["inspect", &id, "--data", "D"]).code(0).stdout_has(&[entry, "task `hello`"]);
        let verify = s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json();
        assert_eq!(verify["ok"], true, "{shape}: {verify}");
    }
}

#[test]
fn scale_is_a_layered_teams_and_an_unknown_shape_is_refused() {
    let s = Scratch::new();
    for shape in ["crew", "single"] {
        s.strata(&["init", "--shape", shape, "--scale", "10", "."])
            .bad_input(&["--scale 10 writes a layered team", &format!("--shape {shape}")]);
    }
    assert!(!s.path("team.toml").exists(), "nothing written");
    let unknown = s.strata(&["init", "--shape", "pair", "."]);
    unknown.code(2);
    assert!(unknown.stderr.contains("unknown team shape `pair`"), "{}", unknown.stderr);
    s.strata(&["init", "--shape", "layered", "--scale", "10", "."]).code(0);
    assert!(s.read("team.toml").contains("[[top]]"));
}

/// The plan a goal becomes: one goal step, written into a file by whoever carries it out.
fn goal_model(body: &Value) -> Result<Value, String> {
    let model = body["model"].as_str().unwrap_or("fake-model");
    let text = |answer: Value| Ok(text_completion(model, &answer));
    if let Some(decision) = decision_of(body) {
        let schema = &body["response_format"]["json_schema"]["schema"];
        return match decision {
            "probe" => text(json!({"ok": true})),
            "plan" => text(json!({"steps": [{
                "id": "readme",
                "description": "write README.md",
                "domain": "docs",
                "after": [],
                "acceptance": "README.md greets"
            }]})),
            // A crew's lead places each step on the first executor it may.
            "decompose" => {
                let steps = schema["properties"]["placements"]["properties"]
                    .as_object()
                    .ok_or("no placements in the decompose schema")?;
                let placements: serde_json::Map<String, Value> =
                    steps.iter().map(|(step, s)| (step.clone(), s["enum"][0].clone())).collect();
                text(json!({ "placements": placements }))
            }
            "judge" => text(json!({"complete": true, "summary": "README.md greets"})),
            other => Err(format!("unexpected decision {other:?}")),
        };
    }
    // The tool loop: write the file, then finish.
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let calls = messages.iter().filter(|m| m["role"] == "tool").count();
    Ok(if calls == 0 {
        tool_call_completion(
            model,
            "call_1",
            "write_file",
            &json!({"path": "README.md", "content": "# hello\n"}),
        )
    } else {
        tool_call_completion(
            model,
            "call_2",
            "finish_subtask",
            &json!({"success": true, "summary": "wrote README.md"}),
        )
    })
}

#[test]
fn a_goal_runs_on_a_crew_and_on_a_single_agent() {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let model = runtime.block_on(FakeModel::start("fake-model", goal_model)).unwrap();
    for (shape, _, entry) in SHAPES {
        let s = Scratch::new();
        s.strata(&["init", "--shape", shape, "."]).code(0);
        let reasoner = format!(
            "[reasoner]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\n",
            model.url()
        );
        let team = s.read("team.toml").replace("[reasoner]\nkind = \"rule-based\"\n", &reasoner);
        assert!(team.contains("fake-model"), "the example's [reasoner] changed: {team}");
        s.write("team.toml", &team);
        let run = s.strata(&[
            "run",
            "--goal",
            "write a README that greets",
            "--team",
            "team.toml",
            "--data",
            "D",
            "--workspace",
            "W",
            "--heartbeat",
            "50ms",
            "--quiet",
            "--run-id",
            "g",
        ]);
        run.code(0).stdout_has(&["succeeded", "files written: README.md"]);
        assert_eq!(s.read("W/README.md"), "# hello\n", "{shape}");
        // The entry agent planned it (the global board says so) and took the task from the
        // system.
        let board = s.strata(&["inspect", "g", "whiteboards", "--data", "D"]);
        board
            .code(0)
            .stdout_has(&["planned from its goal: 1 step(s)", &format!("Taken by {entry}")]);
    }
    let problems = model.problems();
    assert!(problems.is_empty(), "the fake model was asked what it did not expect: {problems:#?}");
}

#[test]
fn a_crew_or_a_single_agent_killed_mid_step_resumes_to_success() {
    for (shape, _, _) in SHAPES {
        let s = Scratch::new();
        s.strata(&["init", "--shape", shape, "."]).code(0);
        // The gated plan names the domains `docs` and `build`: the crew's lead (the single
        // agent) takes both.
        assert!(GATED_PLAN.contains("domain = \"build\""));
        let id = format!("k-{shape}");
        let (run, gate) = crate::support::start_gated(
            &s,
            &id,
            FAST[1],
            &["--team", "team.toml", "--no-sync", "--quiet"],
            |_| {},
        );
        assert_eq!(listed_run(&s, "D", &id)["status"], "running");
        let killed = run.kill();
        assert_eq!(killed.status.code(), None, "killed by a signal");
        assert_eq!(listed_run(&s, "D", &id)["status"], "killed (resumable)");
        assert!(!s.path("W/done.txt").exists(), "{shape}: killed before the last step");

        gate.open();
        let resume = s.strata(&["resume", &id, "--data", "D", "--no-sync", "--quiet"]);
        resume.code(0).stdout_has(&["resumed", "task `gated` succeeded", "(3 steps)"]);
        assert_eq!(s.read("W/hello.txt"), "hello\n");
        assert_eq!(s.read("W/count.txt"), "ran\n", "{shape}: the gate's effect ran once");
        assert_eq!(s.read("W/done.txt"), "done\n");
        assert_eq!(listed_run(&s, "D", &id)["status"], "succeeded");
        assert_eq!(audited_calls(&s, &id, "shell"), 1, "{shape}: the gate is audited once");
        let verify = s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json();
        assert_eq!(verify["ok"], true, "{shape}: {verify}");
        let tree = s.strata(&["inspect", &id, "--data", "D", "--json"]).code(0).json();
        assert_eq!(tree["status"], "succeeded");
        for agent in tree["agents"].as_array().unwrap() {
            assert_eq!(agent["status"], "terminated", "{shape}: {agent}");
        }
    }
}
