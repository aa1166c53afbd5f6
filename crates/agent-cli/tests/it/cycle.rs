//! A real wait cycle, built through the CLI: a goal-driven team placed on a worker, whose
//! model (a fake one over HTTP) has a lead spawn a sub-lead and wait for its results, and the
//! sub-lead ask the lead a question with `speak_to_agent`; the lead's model never answers in
//! time (each of its turns runs out of its `turn_ms`), so the lead waits on the sub-lead and the
//! sub-lead on the lead. The run's guard (the coordinator's, reading the worker's report of its
//! agents) stops the task with the wait-cycle reason, naming both, and the run exits 1.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_llm::testing::{
    FakeModel, decision_of, speaker_of, text_completion, tool_call_completion,
};
use serde_json::{Value, json};

use crate::support::*;
use crate::workers::Server;

const KEY_VAR: &str = "STRATA_CYCLE_TEST_KEY";

/// The team: three powers (as the goal example), a `docs_lead` that may spawn a `sub_lead`,
/// which may spawn a `writer`; turns limited to 1 s.
fn team(url: &str) -> String {
    format!(
        r#"heartbeat = "200ms"
max_agents = 20
max_spawn_depth = 3

[reasoner]
kind = "openai"
base_url = "{url}"
model = "fake-model"
api_key_env = "{KEY_VAR}"

[timeouts]
turn_ms = 1000

[[top]]
id = "top-a"
name = "Power A"
power_type = "power_a"
vote_weight = 2.0
signature_authority = ["plan"]

[[top]]
id = "top-b"
name = "Power B"
power_type = "power_b"
vote_weight = 1.0
signature_authority = ["plan"]

[[roles]]
name = "docs_lead"
layer = "mid"
description = "Leads the documentation."
enabled_agents = ["sub_lead", "writer"]
max_instances = 1

[[roles]]
name = "sub_lead"
layer = "mid"
description = "Leads one document."
enabled_agents = ["writer"]
max_instances = 1

[[roles]]
name = "writer"
layer = "bottom"
description = "Writes documentation files."
tools = ["write_file"]
max_instances = 1
"#
    )
}

/// The tools called so far in the request's conversation, with their outputs (in order).
fn calls(body: &Value) -> Vec<(String, String)> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    for m in &messages {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            pending.push((
                c["id"].as_str().unwrap_or_default().to_owned(),
                c["function"]["name"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        if m["role"] == "tool"
            && let Some(i) = pending.iter().position(|(id, _)| *id == m["tool_call_id"])
        {
            let (_, tool) = pending.remove(i);
            out.push((tool, m["content"].as_str().unwrap_or_default().to_owned()));
        }
    }
    out
}

fn call(model: &str, body: &Value, tool: &str, args: Value) -> Value {
    let n = calls(body).len() + 1;
    tool_call_completion(model, &format!("call_{n}"), tool, &args)
}

/// The model: plans one goal step for `docs_lead`; the lead spawns a `sub_lead` and waits for
/// it; the sub-lead asks its lead a question (trying the lead's id as a run in one process
/// names it, then as a share of a placed run does); the lead's answer never comes in time.
fn model(body: &Value) -> Result<Value, String> {
    let model = body["model"].as_str().unwrap_or("fake-model");
    if let Some(decision) = decision_of(body) {
        let answer = match decision {
            "probe" => json!({"ok": true}),
            "review" => json!({"verdict": "sign", "reason": "sound"}),
            "judge" => json!({"complete": true, "summary": "judged"}),
            "plan" => json!({
                "leads": [{"role": "docs_lead", "domain": "docs"}],
                "steps": [{
                    "id": "readme",
                    "description": "write README.md",
                    "domain": "docs",
                    "role": "writer",
                    "after": [],
                    "acceptance": "README.md exists"
                }]
            }),
            "answer" if speaker_of(body) == "docs_lead" => {
                // The lead's model hangs past the lead's turn limit: no answer goes out.
                std::thread::sleep(Duration::from_secs(3));
                json!({"reply": "too late"})
            }
            "answer" => json!({"reply": "fine"}),
            "vote" => {
                let schema = &body["response_format"]["json_schema"]["schema"];
                json!({"choice": schema["properties"]["choice"]["enum"][0], "reason": "first"})
            }
            other => return Err(format!("unexpected decision {other:?}")),
        };
        return Ok(text_completion(model, &answer));
    }
    let done = calls(body);
    let finish = |summary: &str| {
        call(model, body, "finish_subtask", json!({"success": true, "summary": summary}))
    };
    Ok(match speaker_of(body) {
        "docs_lead" if !done.iter().any(|(t, _)| t == "spawn_agent") => call(
            model,
            body,
            "spawn_agent",
            json!({"role_name": "sub_lead", "task_prompt": "write README.md"}),
        ),
        "docs_lead" => finish("waiting for the sub-lead"),
        "sub_lead" => {
            let spoken: Vec<&(String, String)> =
                done.iter().filter(|(t, _)| t == "speak_to_agent").collect();
            let to = match spoken.len() {
                0 => "docs_lead-1",
                1 if spoken[0].1.contains("error") => "docs_lead-top-a-1",
                _ => return Ok(finish("asked")),
            };
            call(
                model,
                body,
                "speak_to_agent",
                json!({"agent_id": to, "message": "which README do you want?"}),
            )
        }
        "writer" => call(
            model,
            body,
            "return_results",
            json!({"result": {"status": "success", "summary": "nothing", "artifacts": [], "known_issues": []}}),
        ),
        other => return Err(format!("unexpected agent {other:?}")),
    })
}

#[test]
fn a_lead_and_its_sub_lead_waiting_on_each_other_end_the_placed_run_with_a_wait_cycle() {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(8).enable_all().build().unwrap();
    let fake = runtime.block_on(FakeModel::start("fake-model", model)).unwrap();
    let problems = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = Scratch::new();
    s.write("team.toml", &team(&fake.url()));
    let server = Server::start();
    let url = server.url();
    std::fs::create_dir_all(s.path("W")).unwrap();
    let workspace = s.path("W");
    let worker_args = [
        "worker",
        "--nats",
        &url,
        "--id",
        "w1",
        "--data",
        "D",
        "--workspace",
        workspace.to_str().unwrap(),
    ];
    let mut command = s.command(&worker_args);
    command.env(KEY_VAR, "k");
    let worker = Scratch::spawn_command(&worker_args, &mut command);
    wait_for("the worker to start", || worker.stdout_so_far().contains("waiting for runs"));
    let run_args = [
        "run",
        "--goal",
        "write a README",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "cycle",
        "--nats",
        &url,
        "--no-sync",
    ];
    let mut command = s.command(&run_args);
    command.env(KEY_VAR, "k");
    let out = Scratch::spawn_command(&run_args, &mut command).finish();
    problems.lock().unwrap().extend(fake.problems());
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}\nworker:\n{}\n{}\nmodel problems: {:?}",
        out.stdout,
        out.stderr,
        worker.stdout_so_far(),
        worker.stderr_so_far(),
        problems.lock().unwrap()
    );
    assert!(out.stdout.contains("stopped a wait cycle"), "{}\n{}", out.stdout, out.stderr);
    let audit = s.strata(&["inspect", "cycle", "audit", "--data", "D", "--json"]);
    let records = audit.json();
    let cycle = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"]["event"] == "stuck" && r["event"]["reason"]["kind"] == "wait_cycle")
        .unwrap_or_else(|| panic!("no wait cycle audited: {records:#}"));
    let agents = cycle["event"]["reason"]["cycle"].to_string();
    assert!(agents.contains("docs_lead") && agents.contains("sub_lead"), "{cycle}");
}
