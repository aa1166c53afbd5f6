//! [`add_program_scenario`]: the model of a goal-driven team that writes, tests and documents a
//! shell program that adds two numbers, read from each request alone; and the helpers it is
//! written with.

use agent_core::spawn::{RETURN_RESULTS, SPAWN_AGENT};
use serde_json::{Value, json};

use crate::reasoner::FINISH_TOOL;

/// The prompt tokens every completion built here reports (`usage.prompt_tokens`).
pub const USAGE_PROMPT_TOKENS: u64 = 100;
/// The completion tokens every completion built here reports (`usage.completion_tokens`).
pub const USAGE_COMPLETION_TOKENS: u64 = 20;

/// An OpenAI chat completion body whose answer is `answer` as JSON text (a structured
/// decision), by `model`, with the usage [`USAGE_PROMPT_TOKENS`] and
/// [`USAGE_COMPLETION_TOKENS`].
pub fn text_completion(model: &str, answer: &Value) -> Value {
    completion(model, json!({"role": "assistant", "content": answer.to_string()}))
}

/// An OpenAI chat completion body whose answer is one call of `tool` with `arguments` (sent as
/// a JSON string, as OpenAI does) and the call id `id`, by `model`, with the usage
/// [`USAGE_PROMPT_TOKENS`] and [`USAGE_COMPLETION_TOKENS`].
pub fn tool_call_completion(model: &str, id: &str, tool: &str, arguments: &Value) -> Value {
    completion(
        model,
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": id,
                "type": "function",
                "function": {"name": tool, "arguments": arguments.to_string()}
            }]
        }),
    )
}

fn completion(model: &str, message: Value) -> Value {
    json!({
        "id": "chatcmpl-strata-testing",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": USAGE_PROMPT_TOKENS,
            "completion_tokens": USAGE_COMPLETION_TOKENS,
            "total_tokens": USAGE_PROMPT_TOKENS + USAGE_COMPLETION_TOKENS
        }
    })
}

/// Which structured decision a chat completion request asks for: the name of its
/// `response_format` JSON schema (`plan`, `review`, `vote`, `judge`, `answer`, ...); `None`
/// for a tool-loop request.
pub fn decision_of(body: &Value) -> Option<&str> {
    body["response_format"]["json_schema"]["name"].as_str()
}

/// Who asks: the name the system prompt starts with (`You are code_lead, a mid-layer
/// agent.` gives `code_lead`), which for an agent spawned or created from a role is the
/// role; empty when the request has no such system prompt.
pub fn speaker_of(body: &Value) -> &str {
    first_of(body, "system")
        .strip_prefix("You are ")
        .and_then(|rest| rest.split_once(", a "))
        .map_or("", |(name, _)| name)
}

/// The model of a goal-driven team that builds a tested, documented shell program adding two
/// numbers: a [`FakeModel`](super::FakeModel) handler. It answers each request from its body
/// alone (no state is kept between requests), so it serves many agents asking at once, a
/// request asked again, and a run killed and resumed. The team must have the roles
/// `code_lead` and `docs_lead` (mid; the plan's lead roles must be exactly these two, in this
/// order) and the workers `coder` (with `write_file`), `tester` (with `shell`) and `writer`
/// (with `write_file`), the leads enabling them (`code_lead`: `coder` and `tester`;
/// `docs_lead`: `writer`). The goal's words do not matter.
///
/// What it plays, by the request:
/// - **`plan`** (the proposing power): two leads, `code_lead` for domain `code` and
///   `docs_lead` for `docs`, and two goal steps without `after`: `program` ("write add.sh and
///   its test, and run the test", role `coder`, domain `code`, accepted when `sh test_add.sh`
///   prints PASS) and `readme` ("write README.md", role `writer`, domain `docs`).
/// - **`probe`** (the pre-run check's structured request): `{"ok": true}`.
/// - **`review`**: sign. **`vote`**: the first option. **`answer`** (a reply to
///   `speak_to_agent`): "Understood; working on it." **`judge`**: complete, unless the last
///   user message says `: failed`.
/// - **`code_lead`**'s tool loop, counting its `spawn_agent` calls and the results its workers
///   returned since the step's question: spawn a `coder` for "write add.sh: print the sum of
///   two numbers", then a `coder` for "write test_add.sh: check add.sh 2 3 prints 5"; finish
///   ("waiting for the coders", which the runtime defers) until both returned; then spawn a
///   `tester` for "run the tests with shell"; finish (deferred) until it returned; then finish
///   with success: six spawned agents in all, `coder-1`, `coder-2`, `tester-1` under
///   `code_lead-1` and `writer-1` under `docs_lead-1`.
/// - **`docs_lead`**: spawn a `writer` for "write README.md for add.sh", finish (deferred)
///   until it returned, then finish with success.
/// - **the workers**, by the task they were spawned for, one tool call each and then
///   `return_results` with status `success`: the `add.sh` coder writes `add.sh`
///   (`echo $(($1 + $2))`), the `test_add.sh` coder writes `test_add.sh` (which prints `PASS`
///   when `sh add.sh 2 3` prints 5), each reporting its file `created`; the tester runs
///   `sh test_add.sh` with `shell` and returns `success` if the output starts with `ok` and
///   holds `PASS` (else `failure` with the output), the file `referenced`; the writer writes
///   `README.md`. Four structured results in all, each claiming only files its own calls
///   touched (so all are trusted).
///
/// Every answer reports [`USAGE_PROMPT_TOKENS`] and [`USAGE_COMPLETION_TOKENS`] and echoes the
/// request's `model`; a tool call's id is `call_N`, N counting the tool calls in the request's
/// messages, so it is unique within the conversation the request shows.
///
/// It refuses (returns a problem, which [`FakeModel`](super::FakeModel) answers with a 400)
/// anything it does not expect: another decision, a plan schema offering other lead roles,
/// a tool loop that does not require a tool or does not offer `finish_subtask` last, a
/// question that is not a step's (`Carry out step ...`), a tool call without its answer or
/// with arguments that are not a JSON string, a user message in the loop other than a
/// worker's `[return_results] ...`, an agent or a worker task it does not know, and a call of
/// a tool the request does not offer.
pub fn add_program_scenario(body: &Value) -> Result<Value, String> {
    let model = body["model"].as_str().unwrap_or("fake-model");
    match choose(body)? {
        Choice::Text(answer) => Ok(text_completion(model, &answer)),
        Choice::Call(tool, arguments) => {
            let made = messages(body)
                .iter()
                .filter_map(|m| m["tool_calls"].as_array())
                .map(Vec::len)
                .sum::<usize>();
            let id = format!("call_{}", made + 1);
            Ok(tool_call_completion(model, &id, tool, &arguments))
        }
    }
}

/// What the scenario chose: a structured answer (text) or one tool call.
enum Choice {
    Text(Value),
    Call(&'static str, Value),
}

fn call(tool: &'static str, args: Value) -> Result<Choice, String> {
    Ok(Choice::Call(tool, args))
}

fn finish(summary: &str) -> Result<Choice, String> {
    call(FINISH_TOOL, json!({"success": true, "summary": summary}))
}

fn results(status: &str, summary: &str, artifacts: &[(&str, &str)]) -> Result<Choice, String> {
    let artifacts: Vec<Value> = artifacts
        .iter()
        .map(
            |(path, change)| json!({"file_path": path, "description": path, "change_type": change}),
        )
        .collect();
    call(
        RETURN_RESULTS,
        json!({"result": {"status": status, "summary": summary, "artifacts": artifacts, "known_issues": []}}),
    )
}

fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The content of the first message of `role`.
fn first_of<'a>(body: &'a Value, role: &str) -> &'a str {
    messages(body)
        .iter()
        .find(|m| m["role"] == role)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

/// The content of the last message of `role`.
fn last_of<'a>(body: &'a Value, role: &str) -> &'a str {
    messages(body)
        .iter()
        .rev()
        .find(|m| m["role"] == role)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

/// The names of the tools the request offers.
fn offered(body: &Value) -> Vec<&str> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect()
}

/// One call of the step so far, as the wire tells it: the tool called (its arguments checked
/// to be a JSON string) and the tool message that answered it.
struct Past {
    tool: String,
    output: String,
}

/// The step's question (the last user message that asks to carry out a step) and the calls
/// made and results received since it.
fn step_so_far(body: &Value) -> Result<(String, Vec<Past>), String> {
    let messages = messages(body);
    let Some(at) = messages.iter().rposition(|m| {
        m["role"] == "user"
            && m["content"].as_str().is_some_and(|c| c.starts_with("Carry out step "))
    }) else {
        let question = last_of(body, "user");
        return Err(format!("not a step's question: {question:?}"));
    };
    let question = messages[at]["content"].as_str().unwrap_or_default();
    // "Carry out step <id> of task <task>: <description>\n..."
    let description = question
        .lines()
        .next()
        .filter(|l| l.starts_with("Carry out step "))
        .and_then(|l| l.split_once(": "))
        .map(|(_, d)| d.to_owned())
        .ok_or_else(|| format!("not a step's question: {question:?}"))?;
    let mut past: Vec<Past> = Vec::new();
    let mut pending: Vec<(String, String)> = Vec::new(); // (call id, tool)
    for m in messages.get(at + 1..).unwrap_or_default() {
        match m["role"].as_str() {
            Some("assistant") => {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let args = c["function"]["arguments"].as_str().unwrap_or_default();
                    serde_json::from_str::<Value>(args)
                        .map_err(|e| format!("arguments not a JSON string ({e}): {c}"))?;
                    pending.push((
                        c["id"].as_str().unwrap_or_default().to_owned(),
                        c["function"]["name"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                let Some(i) = pending.iter().position(|(p, _)| p == id) else {
                    return Err(format!("a tool message answering no call: {m}"));
                };
                let (_, tool) = pending.remove(i);
                let output = m["content"].as_str().unwrap_or_default().to_owned();
                past.push(Past { tool, output });
            }
            // What reached the agent meanwhile: a worker's results.
            Some("user") => {
                let content = m["content"].as_str().unwrap_or_default();
                let Some(rest) = content.strip_prefix("[return_results] ") else {
                    return Err(format!("an unexpected user message in the loop: {content:?}"));
                };
                past.push(Past { tool: RETURN_RESULTS.into(), output: rest.to_owned() });
            }
            other => return Err(format!("unexpected {other:?} message after the question")),
        }
    }
    if !pending.is_empty() {
        return Err("a tool call without its answer".into());
    }
    Ok((description, past))
}

fn count(past: &[Past], tool: &str) -> usize {
    past.iter().filter(|p| p.tool == tool).count()
}

/// A lead of code: two coders, then (their results in) a tester, then done. Finishing while
/// workers still work is deferred by the runtime; the lead is asked again as results arrive.
fn code_lead(past: &[Past]) -> Result<Choice, String> {
    match (count(past, SPAWN_AGENT), count(past, RETURN_RESULTS)) {
        (0, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "coder", "task_prompt": "write add.sh: print the sum of two numbers"}),
        ),
        (1, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "coder", "task_prompt": "write test_add.sh: check add.sh 2 3 prints 5"}),
        ),
        (2, r) if r < 2 => finish("waiting for the coders"),
        (2, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "tester", "task_prompt": "run the tests with shell"}),
        ),
        (3, r) if r < 3 => finish("waiting for the tester"),
        _ => finish("add.sh written and its test passes"),
    }
}

/// A lead of docs: one writer, then done.
fn docs_lead(past: &[Past]) -> Result<Choice, String> {
    match (count(past, SPAWN_AGENT), count(past, RETURN_RESULTS)) {
        (0, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "writer", "task_prompt": "write README.md for add.sh"}),
        ),
        (_, 0) => finish("waiting for the writer"),
        _ => finish("README written"),
    }
}

/// The workers, by what they were spawned for: one call, then their results.
fn worker(description: &str, past: &[Past]) -> Result<Choice, String> {
    let first = past.first();
    match description {
        d if d.starts_with("write add.sh") => match first {
            None => call("write_file", json!({"path": "add.sh", "content": "echo $(($1 + $2))\n"})),
            Some(_) => results("success", "wrote add.sh", &[("add.sh", "created")]),
        },
        d if d.starts_with("write test_add.sh") => match first {
            None => call(
                "write_file",
                json!({"path": "test_add.sh", "content": "[ \"$(sh add.sh 2 3)\" = 5 ] && echo PASS\n"}),
            ),
            Some(_) => results("success", "wrote test_add.sh", &[("test_add.sh", "created")]),
        },
        d if d.starts_with("run the tests") => match first {
            None => call("shell", json!({"command": "sh test_add.sh"})),
            Some(ran) => {
                let ran = &ran.output;
                let passed = ran.starts_with("ok") && ran.contains("PASS");
                results(
                    if passed { "success" } else { "failure" },
                    &format!("tests: {}", if passed { "PASS" } else { ran.as_str() }),
                    &[("test_add.sh", "referenced")],
                )
            }
        },
        d if d.starts_with("write README.md") => match first {
            None => call(
                "write_file",
                json!({"path": "README.md", "content": "# add\n\nsh add.sh 2 3\n"}),
            ),
            Some(_) => results("success", "wrote README.md", &[("README.md", "created")]),
        },
        other => Err(format!("unexpected worker task {other:?}")),
    }
}

/// The plan: a lead for code and one for docs, one goal step each.
fn plan(body: &Value) -> Result<Choice, String> {
    let schema = &body["response_format"]["json_schema"]["schema"];
    let lead_roles = &schema["properties"]["leads"]["items"]["properties"]["role"]["enum"];
    if *lead_roles != json!(["code_lead", "docs_lead"]) {
        return Err(format!("the plan schema offers the lead roles {lead_roles}"));
    }
    Ok(Choice::Text(json!({
        "leads": [
            {"role": "code_lead", "domain": "code"},
            {"role": "docs_lead", "domain": "docs"}
        ],
        "steps": [
            {
                "id": "program",
                "description": "write add.sh and its test, and run the test",
                "domain": "code",
                "role": "coder",
                "after": [],
                "acceptance": "sh test_add.sh prints PASS"
            },
            {
                "id": "readme",
                "description": "write README.md",
                "domain": "docs",
                "role": "writer",
                "after": [],
                "acceptance": "README.md says how to run add.sh"
            }
        ]
    })))
}

/// The scenario's choice for one request body.
fn choose(body: &Value) -> Result<Choice, String> {
    if let Some(name) = decision_of(body) {
        let schema = &body["response_format"]["json_schema"]["schema"];
        return match name {
            "plan" => plan(body),
            "review" => Ok(Choice::Text(json!({"verdict": "sign", "reason": "the plan is sound"}))),
            "judge" => {
                let failed = last_of(body, "user").contains(": failed");
                Ok(Choice::Text(json!({"complete": !failed, "summary": "judged from the results"})))
            }
            "answer" => Ok(Choice::Text(json!({"reply": "Understood; working on it."}))),
            "probe" => Ok(Choice::Text(json!({"ok": true}))),
            "vote" => Ok(Choice::Text(
                json!({"choice": schema["properties"]["choice"]["enum"][0], "reason": "first"}),
            )),
            other => Err(format!("unexpected decision {other:?}")),
        };
    }
    let tools = offered(body);
    if tools.is_empty() {
        return Err("neither a decision nor a tool-loop request".into());
    }
    if body["tool_choice"] != "required" || tools.last() != Some(&FINISH_TOOL) {
        return Err(format!(
            "a tool loop must require a tool and offer {FINISH_TOOL} last: {tools:?}"
        ));
    }
    let (description, past) = step_so_far(body)?;
    let choice = match speaker_of(body) {
        "code_lead" => code_lead(&past),
        "docs_lead" => docs_lead(&past),
        "coder" | "tester" | "writer" => worker(&description, &past),
        other => Err(format!("unexpected agent {other:?} in the tool loop")),
    }?;
    if let Choice::Call(tool, _) = &choice
        && !tools.contains(tool)
    {
        return Err(format!(
            "{} would call `{tool}`, which is not offered: {tools:?}",
            speaker_of(body)
        ));
    }
    Ok(choice)
}
