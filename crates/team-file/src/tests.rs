//! Tests of the team and plan files: the examples, the defaults, and where each error points.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod mcp;
mod plan_repairs;
mod shapes;
mod timeouts;

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use agent_core::tools::ToolRegistry;
use agent_layers::{BottomSpec, LeadInfo, MidSpec, TopSpec, route};
use agent_pool::{RoleSpec, TeamSpec};
use agent_state::{AgentConfig, AgentId, AgentLayer, Capability, StepTarget, Task};

use crate::limits::parse_duration;
use crate::plan::{leads, table_to_json};
use crate::*;

/// Drops the newline after the opening quote, so line 1 is the first written line.
fn text(s: &str) -> &str {
    s.strip_prefix('\n').unwrap_or(s)
}

fn team(s: &str) -> TeamFile {
    parse_team(Path::new("team.toml"), text(s), &ToolRegistry::with_builtins())
        .unwrap_or_else(|e| panic!("team should parse: {e}"))
}

#[track_caller]
fn team_err(s: &str) -> FileError {
    match parse_team(Path::new("team.toml"), text(s), &ToolRegistry::with_builtins()) {
        Ok(t) => panic!("team should not parse: {t:?}"),
        Err(e) => e,
    }
}

fn plan(s: &str) -> Task {
    parse_plan(
        Path::new("plan.toml"),
        text(s),
        &default_team().spec,
        &ToolRegistry::with_builtins(),
    )
    .unwrap_or_else(|e| panic!("plan should parse: {e}"))
}

#[track_caller]
fn plan_err_for(team: &TeamSpec, s: &str) -> FileError {
    match parse_plan(Path::new("plan.toml"), text(s), team, &ToolRegistry::with_builtins()) {
        Ok(t) => panic!("plan should not parse: {t:?}"),
        Err(e) => e,
    }
}

#[track_caller]
fn plan_err(s: &str) -> FileError {
    plan_err_for(&default_team().spec, s)
}

/// The built-in tools, as an error lists them: `list_dir, read_file, shell, write_file`, and
/// any tool added to the registry since.
fn available() -> String {
    let tools = ToolRegistry::with_builtins();
    let names = tools.names();
    for builtin in ["list_dir", "read_file", "shell", "write_file"] {
        assert!(names.contains(&builtin), "{builtin} is a built-in tool");
    }
    names.join(", ")
}

/// Asserts the error's position and that its message contains every fragment.
#[track_caller]
fn assert_at(err: &FileError, line: usize, column: usize, fragments: &[&str]) {
    assert_eq!((err.line(), err.column()), (line, column), "wrong position for: {err}");
    for fragment in fragments {
        assert!(err.message().contains(fragment), "`{fragment}` not in: {err}");
    }
}

/// A valid team head: two powers and a lead with two executors.
const HEAD: &str = r#"
[[top]]
id = "top-a"
power_type = "power_a"

[[top]]
id = "top-b"
power_type = "power_b"

[[mid]]
id = "mid-a"
domain = "docs"
supervisor = "top-a"
"#;

/// `HEAD` followed by `rest`; `HEAD` is 12 lines, so `rest` starts on line 13.
fn with_head(rest: &str) -> String {
    format!("{}{}", text(HEAD), text(rest))
}

// ---------------------------------------------------------------------------------------------
// The examples and the defaults.

#[test]
fn example_team_is_the_default_team() {
    assert_eq!(team(example_team_toml()), default_team());
}

#[test]
fn example_plan_runs_on_the_example_team_through_all_layers() {
    let team = team(example_team_toml());
    let task = parse_plan(
        Path::new("plan.toml"),
        example_plan_toml(),
        &team.spec,
        &ToolRegistry::with_builtins(),
    )
    .unwrap();
    task.check().unwrap();

    // All three layers: powers that sign plans, and every step reaches a lead with executors.
    let signers = team
        .spec
        .agents
        .iter()
        .filter(|a| matches!(&a.role, RoleSpec::Top(t) if t.signature_authority.contains(&"plan".to_owned())))
        .count();
    assert_eq!(signers, 3);
    let leads: Vec<LeadInfo> = leads(&team.spec)
        .into_iter()
        .map(|l| LeadInfo {
            id: l.id.clone(),
            domain: l.domain.to_owned(),
            executors: l
                .executors
                .iter()
                .map(|(id, t, _)| ((*id).clone(), t.to_vec().into()))
                .collect(),
        })
        .collect();
    let routed: Vec<String> = task
        .steps
        .iter()
        .map(|s| route(&leads, s).unwrap_or_else(|| panic!("{} unroutable", s.id)).to_string())
        .collect();
    assert!(routed.contains(&"mid-docs".to_owned()) && routed.contains(&"mid-build".to_owned()));

    // A real write, and a real shell command that waits for a write.
    assert!(task.steps.iter().any(|s| s.tool == "write_file"));
    let shell = task.steps.iter().find(|s| s.tool == "shell").unwrap();
    assert!(!shell.after.is_empty());
    for dep in &shell.after {
        assert_eq!(task.steps.iter().find(|s| &s.id == dep).unwrap().tool, "write_file");
    }
    assert!(task.steps.iter().any(|s| matches!(s.target, StepTarget::Agent(_))));
}

#[test]
fn module_docs_examples_parse() {
    let source = include_str!("lib.rs");
    let mut blocks: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in source.lines().take_while(|l| l.starts_with("//!")) {
        let line = line.trim_start_matches("//!").strip_prefix(' ').unwrap_or("");
        match (&mut current, line) {
            (None, "```toml") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert_eq!(blocks.len(), 2, "a team and a plan example in the crate docs");
    let team = team(&blocks[0]);
    assert_eq!(team.spec.heartbeat, Duration::from_secs(4));
    assert!(team.default_reasoner.forbid_tools.is_empty());
    assert_eq!(team.agent_reasoners.len(), 1);
    assert_eq!(team.spec.roles.names(), "docs_lead, writer");
    assert_eq!(team.role_reasoners.len(), 1);
    assert_eq!(team.spec.agent_roles[&AgentId::from("mid-docs")], "docs_lead");
    // The executor settings.
    assert_eq!(team.executor.http.allow_hosts, ["127.0.0.1:8080", "docs.example.com"]);
    assert_eq!(team.executor.endpoints["tickets"].method, agent_executor::Method::Post);
    assert_eq!(team.executor.policy, agent_state::RetryPolicy::executor_default());
    assert_eq!(team.executor.kind_policies["research_agent"].max_retries, 2);
    assert_eq!(team.executor.agent_policies[&AgentId::from("bottom-r1")].max_retries, 3);
    let task =
        parse_plan(Path::new("plan.toml"), &blocks[1], &team.spec, &ToolRegistry::with_builtins())
            .unwrap();
    assert!(!task.is_scripted(), "the plan example shows a goal step");
    assert!(task.steps.iter().any(|s| s.tool == "research_agent"), "and a kind step");
}

#[test]
fn defaults_fill_everything_left_out() {
    let file = team(
        r#"
[[top]]
id = "top-a"
power_type = "power_a"

[[mid]]
id = "mid-a"
domain = "docs"
supervisor = "top-a"

[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell"]
"#,
    );
    assert_eq!(file.spec.heartbeat, agent_pool::DEFAULT_HEARTBEAT);
    assert_eq!(file.spec.max_agents, agent_pool::DEFAULT_MAX_AGENTS);
    assert_eq!(file.default_reasoner, ReasonerSettings::default());
    assert!(file.agent_reasoners.is_empty());
    let [top, mid, bottom] = &file.spec.agents[..] else { panic!("three agents") };
    // Each agent's turns are bounded by the team's default `turn_ms`.
    let turn = agent_state::DEFAULT_TURN_MS;
    assert_eq!(
        top.config,
        AgentConfig::new("top-a", "top-a", AgentLayer::Top).with_timeout_ms(turn)
    );
    assert_eq!(
        top.role,
        RoleSpec::Top(TopSpec {
            power_type: "power_a".into(),
            vote_weight: 1.0,
            signature_authority: vec!["plan".into()],
        })
    );
    assert_eq!(
        mid.config,
        AgentConfig::new("mid-a", "mid-a", AgentLayer::Mid)
            .with_supervisor("top-a")
            .with_timeout_ms(turn)
    );
    assert_eq!(mid.role, RoleSpec::Mid(MidSpec { domain: "docs".into(), max_subordinates: 4 }));
    assert_eq!(
        bottom.config,
        AgentConfig::new("bottom-a", "bottom-a", AgentLayer::Bottom)
            .with_supervisor("mid-a")
            .with_timeout_ms(turn)
    );
    assert_eq!(bottom.role, RoleSpec::Bottom(BottomSpec::new(["shell"])));
}

#[test]
fn every_agent_field_is_read() {
    let file = team(
        r#"
heartbeat = "250ms"
max_agents = 3

[reasoner]
forbid_tools = ["shell"]
prefer = ["a"]

[[top]]
id = "top-a"
name = "Power A"
power_type = "power_a"
vote_weight = 2
signature_authority = ["plan", "budget"]
role = "governance"
capabilities = ["review", "arbitrate", "review"]
model = "m"
temperature = 0.5
max_retries = 7
timeout_ms = 1000
reasoner = { prefer = ["b"] }
"#,
    );
    assert_eq!(file.spec.heartbeat, Duration::from_millis(250));
    assert_eq!(file.spec.max_agents, 3);
    let top = &file.spec.agents[0];
    let mut expected = AgentConfig::new("top-a", "Power A", AgentLayer::Top)
        .with_role("governance")
        .with_capabilities([Capability::Review, Capability::Arbitrate])
        .with_max_retries(7)
        .with_timeout_ms(1000);
    expected.model = Some("m".into());
    expected.temperature = Some(0.5);
    assert_eq!(top.config, expected);
    assert_eq!(
        top.role,
        RoleSpec::Top(TopSpec {
            power_type: "power_a".into(),
            vote_weight: 2.0,
            signature_authority: vec!["plan".into(), "budget".into()],
        })
    );
    // The agent's own table overrides `prefer` and keeps the team's `forbid_tools`.
    let own = &file.agent_reasoners[&AgentId::from("top-a")];
    assert_eq!(own.forbid_tools, ["shell"]);
    assert_eq!(own.prefer, ["b"]);
    assert_eq!(own.kind, ReasonerKind::RuleBased);
}

#[test]
fn durations_take_a_unit() {
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("4s"), Ok(Duration::from_secs(4)));
    assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
    assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    for bad in ["4", "s", "4 s", "-4s", "4.5s", "4sec", "", "99999999999999999999h"] {
        assert!(parse_duration(bad).unwrap_err().contains("not a duration"), "{bad}");
    }
    assert!(parse_duration("0ms").unwrap_err().contains("longer than 0"));
}

#[test]
fn a_plan_becomes_a_task() {
    let task = plan(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
description = "write"
domain = "docs"
tool = "write_file"
args = { path = "x", content = "y" }

[[steps]]
id = "b"
agent = "mid-build"
tool = "list_dir"
after = ["a"]

[[steps]]
id = "c"
tool = "shell"
args.command = "true"
after = ["a", "b"]
"#,
    );
    assert_eq!(task.id, "t");
    assert_eq!(task.goal, "g");
    let [a, b, c] = &task.steps[..] else { panic!("three steps") };
    assert_eq!(a.description, "write");
    assert_eq!(a.target, StepTarget::Domain("docs".into()));
    assert_eq!(a.args, serde_json::json!({"path": "x", "content": "y"}));
    assert!(a.after.is_empty());
    assert_eq!(b.description, "b (list_dir)");
    assert_eq!(b.target, StepTarget::Agent("mid-build".into()));
    assert_eq!(b.args, serde_json::json!({}));
    assert_eq!(b.after, ["a"]);
    assert_eq!(c.target, StepTarget::Any);
    assert_eq!(c.args, serde_json::json!({"command": "true"}));
    assert_eq!(c.after, ["a", "b"]);
}

#[test]
fn arguments_become_json() {
    let table: toml::Table = toml::from_str(
        "s = \"x\"\ni = 3\nf = 2.5\nb = true\nd = 1979-05-27T07:32:00Z\na = [1, \"y\"]\nt = { k = 1 }\n",
    )
    .unwrap();
    assert_eq!(
        table_to_json(&table).unwrap(),
        serde_json::json!({
            "s": "x", "i": 3, "f": 2.5, "b": true, "d": "1979-05-27T07:32:00Z",
            "a": [1, "y"], "t": { "k": 1 },
        })
    );
    let table: toml::Table = toml::from_str("a = [1.0, inf]").unwrap();
    assert!(table_to_json(&table).unwrap_err().contains("inf cannot be passed to a tool"));
}

#[test]
fn errors_display_as_path_line_column_message() {
    let err = FileError {
        path: "dir/team.toml".into(),
        line: 3,
        column: 7,
        message: "unknown agent `x`".into(),
    };
    assert_eq!(err.to_string(), "dir/team.toml:3:7: unknown agent `x`");
    assert_eq!(err.path(), Path::new("dir/team.toml"));
    assert_eq!((err.line(), err.column()), (3, 7));
    assert_eq!(err.message(), "unknown agent `x`");
}

#[test]
fn columns_count_characters_not_bytes() {
    let err = team_err(
        r#"
top = [{ name = "Ünï", id = "top-a", power_type = "p", vote_weight = -1.0 }]
"#,
    );
    assert_at(&err, 1, 70, &["`vote_weight` must be a number of 0 or more, not -1"]);
}

// ---------------------------------------------------------------------------------------------
// Team file errors.

#[test]
fn invalid_toml() {
    let err = team_err(
        r#"
heartbeat = "4s
"#,
    );
    assert_eq!(err.path(), Path::new("team.toml"));
    assert_at(&err, 1, 16, &["invalid basic string"]);
    assert!(!err.message().contains('\n'));
}

#[test]
fn unknown_fields() {
    let err = team_err(
        r#"
heartbeats = "4s"
"#,
    );
    assert_at(&err, 1, 1, &["unknown field `heartbeats`", "`heartbeat`"]);

    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tool = ["shell"]
"#,
    ));
    assert_at(&err, 16, 1, &["unknown field `tool`", "`tools`"]);

    let err = team_err(
        r#"
[reasoner]
kind = "rule-based"
temperature = 1.0
"#,
    );
    assert_at(&err, 3, 1, &["unknown field `temperature`"]);
}

#[test]
fn wrong_types_and_missing_fields() {
    let err = team_err(
        r#"
max_agents = "50"
"#,
    );
    assert_at(&err, 1, 14, &["invalid type: string \"50\""]);

    let err = team_err(
        r#"
max_agents = -1
"#,
    );
    assert_at(&err, 1, 14, &["-1"]);

    let err = team_err(&with_head(
        r#"
[[mid]]
id = "mid-b"
supervisor = "top-a"
"#,
    ));
    assert_at(&err, 13, 1, &["missing field `domain`"]);
}

#[test]
fn bad_heartbeat_and_max_agents() {
    let err = team_err(&format!("heartbeat = \"4 sec\"\n{}", text(HEAD)));
    assert_at(&err, 1, 13, &["`4 sec` is not a duration", "\"250ms\""]);
    let err = team_err(&format!("heartbeat = \"0s\"\n{}", text(HEAD)));
    assert_at(&err, 1, 13, &["longer than 0"]);
    let err = team_err(&format!("max_agents = 0\n{}", text(HEAD)));
    assert_at(&err, 1, 14, &["at least 1"]);
}

#[test]
fn unknown_reasoner_kind_lists_the_known_ones() {
    let err = team_err(&format!("[reasoner]\nkind = \"llm\"\n{}", text(HEAD)));
    assert_at(&err, 2, 8, &["unknown reasoner kind `llm`; known kinds: rule-based"]);

    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = "p"
reasoner = { kind = "gpt" }
"#,
    );
    assert_at(&err, 4, 21, &["unknown reasoner kind `gpt`"]);
}

#[test]
fn reasoner_kinds_by_name() {
    assert_eq!("rule-based".parse(), Ok(ReasonerKind::RuleBased));
    assert_eq!("openai".parse(), Ok(ReasonerKind::OpenAi));
    assert_eq!("anthropic".parse(), Ok(ReasonerKind::Anthropic));
    assert_eq!("local".parse(), Ok(ReasonerKind::Local));
    for kind in ReasonerKind::ALL {
        assert_eq!(kind.as_str().parse(), Ok(kind));
    }
    assert_eq!(
        "llm".parse::<ReasonerKind>().unwrap_err().to_string(),
        "unknown reasoner kind `llm`; known kinds: rule-based, openai, anthropic, local"
    );
}

#[test]
fn forbidden_tools_must_exist() {
    let err = team_err(&format!("[reasoner]\nforbid_tools = [\"shell\", \"rm\"]\n{}", text(HEAD)));
    assert_at(
        &err,
        2,
        26,
        &[&format!("unknown tool `rm` in `forbid_tools` (available: {})", available())],
    );
}

#[test]
fn duplicate_ids_point_at_the_second() {
    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "top-b"
supervisor = "mid-a"
tools = ["shell"]
"#,
    ));
    assert_at(&err, 14, 6, &["agent id `top-b` is already used by the top power on line 6"]);
}

#[test]
fn invalid_id() {
    let err = team_err(
        r#"
[[top]]
id = "top a"
power_type = "p"
"#,
    );
    assert_at(&err, 2, 6, &["`top a` must be 1 to 64 ASCII letters"]);
}

#[test]
fn too_many_agents_points_at_the_first_that_does_not_fit() {
    let err = team_err(&format!("max_agents = 2\n{}", text(HEAD)));
    assert_at(
        &err,
        11,
        6,
        &["too many agents for the pool: this is agent 3 of 3, but `max_agents` (line 1) is 2"],
    );

    let mut many = text(HEAD).to_owned();
    for i in 0..48 {
        many.push_str(&format!(
            "[[bottom]]\nid = \"b{i}\"\nsupervisor = \"mid-a\"\ntools = [\"shell\"]\n"
        ));
    }
    // 51 agents; the 51st is the last bottom, on line 12 + 4 * 47 + 2.
    let err = team_err(&many);
    assert_at(&err, 12 + 4 * 47 + 2, 6, &["agent 51 of 51", "the pool allows 50"]);
}

#[test]
fn a_team_needs_agents() {
    let err = team_err(
        r#"
heartbeat = "1s"
"#,
    );
    assert_at(&err, 1, 1, &["the team has no agents; add a [[bottom]] executor"]);
}

#[test]
fn a_top_power_has_no_supervisor() {
    let err = team_err(&format!(
        "{}\n[[top]]\nid = \"top-c\"\npower_type = \"c\"\nsupervisor = \"top-a\"\n",
        text(HEAD)
    ));
    assert_at(&err, 17, 14, &["a top power has no supervisor; remove `supervisor`"]);
}

#[test]
fn unknown_supervisor_lists_the_right_layer() {
    let err = team_err(&with_head(
        r#"
[[mid]]
id = "mid-b"
domain = "build"
supervisor = "top-z"
"#,
    ));
    assert_at(
        &err,
        16,
        14,
        &["unknown agent `top-z`; a mid lead reports to a top power (top-a, top-b)"],
    );

    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-z"
tools = ["shell"]
"#,
    ));
    assert_at(
        &err,
        15,
        14,
        &["unknown agent `mid-z`; a bottom executor reports to a mid lead (mid-a)"],
    );
}

#[test]
fn supervisor_on_the_wrong_layer() {
    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "top-a"
tools = ["shell"]
"#,
    ));
    assert_at(
        &err,
        15,
        14,
        &["`top-a` is a top power, but a bottom executor reports to a mid lead (mid-a)"],
    );

    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell"]

[[mid]]
id = "mid-b"
domain = "build"
supervisor = "bottom-a"
"#,
    ));
    assert_at(
        &err,
        21,
        14,
        &["`bottom-a` is a bottom executor, but a mid lead reports to a top power"],
    );
}

#[test]
fn supervisor_cycles() {
    let err = team_err(&with_head(
        r#"
[[mid]]
id = "mid-b"
domain = "build"
supervisor = "mid-c"

[[mid]]
id = "mid-c"
domain = "test"
supervisor = "mid-b"
"#,
    ));
    assert_at(
        &err,
        16,
        14,
        &[
            "supervisor cycle: mid-b → mid-c → mid-b; a mid lead reports to a top power (top-a, top-b)",
        ],
    );

    let err = team_err(&with_head(
        r#"
[[mid]]
id = "mid-b"
domain = "build"
supervisor = "mid-b"
"#,
    ));
    assert_at(&err, 16, 14, &["supervisor cycle: `mid-b` cannot supervise itself"]);
}

#[test]
fn executor_tools_must_exist() {
    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell", "deploy"]
"#,
    ));
    assert_at(&err, 16, 19, &[&format!("unknown tool `deploy` (available: {})", available())]);

    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = []
"#,
    ));
    assert_at(&err, 16, 9, &["an executor needs at least one tool"]);
}

#[test]
fn capabilities_must_fit_the_layer() {
    let err = team_err(&with_head(
        r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell"]
capabilities = ["execute", "delegate"]
"#,
    ));
    assert_at(
        &err,
        17,
        28,
        &[
            "a bottom executor may not hold the capability `delegate`; allowed: plan, execute, reflect, tool_call, code_gen, test_exec, coordinate",
        ],
    );

    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = "p"
capabilities = ["fly"]
"#,
    );
    assert_at(&err, 4, 17, &["unknown capability `fly`; a top power may hold: plan,"]);
}

#[test]
fn bad_vote_weights() {
    for (weight, shown) in [("-0.5", "-0.5"), ("nan", "NaN"), ("inf", "inf")] {
        let err =
            team_err(&format!("[[top]]\nid = \"t\"\npower_type = \"p\"\nvote_weight = {weight}\n"));
        assert_at(
            &err,
            4,
            15,
            &[&format!("`vote_weight` must be a number of 0 or more, not {shown}")],
        );
    }
}

#[test]
fn empty_names_and_values() {
    let err = team_err(
        r#"
[[top]]
id = "top-a"
name = "  "
power_type = "p"
"#,
    );
    assert_at(&err, 3, 8, &["`name` must not be empty"]);

    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = ""
"#,
    );
    assert_at(&err, 3, 14, &["`power_type` must not be empty"]);

    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = "p"
signature_authority = ["plan", ""]
"#,
    );
    assert_at(&err, 4, 32, &["signature authority must not be empty"]);

    let err = team_err(&with_head(
        r#"
[[mid]]
id = "mid-b"
domain = ""
supervisor = "top-a"
"#,
    ));
    assert_at(&err, 15, 10, &["`domain` must not be empty"]);
}

#[test]
fn one_lead_per_domain() {
    let err = team_err(&with_head(
        r#"
[[mid]]
id = "mid-b"
domain = "docs"
supervisor = "top-a"
"#,
    ));
    assert_at(&err, 15, 10, &["domain `docs` already has a lead, `mid-a` (line 10)"]);
}

#[test]
fn too_many_executors_for_a_lead() {
    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = "p"

[[mid]]
id = "mid-a"
domain = "docs"
supervisor = "top-a"
max_subordinates = 1

[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell"]

[[bottom]]
id = "bottom-b"
supervisor = "mid-a"
tools = ["shell"]
"#,
    );
    assert_at(&err, 18, 14, &["lead `mid-a` already has 1 executors, its `max_subordinates`"]);
}

#[test]
fn temperature_and_timeout_ranges() {
    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = "p"
temperature = 2.5
"#,
    );
    assert_at(&err, 4, 15, &["`temperature` must be from 0.0 to 2.0, not 2.5"]);

    let err = team_err(
        r#"
[[top]]
id = "top-a"
power_type = "p"
timeout_ms = 0
"#,
    );
    assert_at(&err, 4, 14, &["`timeout_ms` must be greater than 0"]);
}

// ---------------------------------------------------------------------------------------------
// Plan file errors.

#[test]
fn plan_invalid_toml_and_unknown_fields() {
    let err = plan_err(
        r#"
id = "t"
goal = "g"
[[steps]
"#,
    );
    assert_eq!(err.path(), Path::new("plan.toml"));
    assert_eq!(err.line(), 3);

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "shell"
args = { command = "true" }
depends = ["x"]
"#,
    );
    assert_at(&err, 8, 1, &["unknown field `depends`", "`after`"]);

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
"#,
    );
    // Without a `tool` a step is a goal step, which needs a `description`.
    assert_at(&err, 5, 6, &["step `a` names no `tool` and has no `description`"]);

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "shell"
args = "true"
"#,
    );
    assert_at(&err, 7, 8, &["invalid type: string \"true\", expected a map"]);
}

#[test]
fn plan_needs_an_id_and_a_goal() {
    let err = plan_err("id = \"\"\ngoal = \"g\"\n");
    assert_at(&err, 1, 6, &["the plan's `id` must not be empty"]);
    let err = plan_err("id = \"t\"\ngoal = \" \"\n");
    assert_at(&err, 2, 8, &["the plan's `goal` must not be empty"]);
    let err = plan_err("goal = \"g\"\n");
    assert_at(&err, 1, 1, &["missing field `id`"]);
    let err = plan_err("id = \"t\"\n");
    assert_at(&err, 1, 1, &["missing field `goal`"]);
}

#[test]
fn duplicate_and_empty_step_ids() {
    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "list_dir"

[[steps]]
id = "a"
tool = "list_dir"
"#,
    );
    assert_at(&err, 9, 6, &["step id `a` is already used on line 5"]);

    let err = plan_err("id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"\"\ntool = \"list_dir\"\n");
    assert_at(&err, 4, 6, &["a step's `id` must not be empty"]);
}

#[test]
fn step_targets() {
    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
domain = "docs"
agent = "bottom-d1"
tool = "list_dir"
"#,
    );
    assert_at(&err, 7, 9, &["either a `domain` or an `agent`, not both"]);

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
domain = "ops"
tool = "list_dir"
"#,
    );
    assert_at(&err, 6, 10, &["no lead has the domain `ops`; the team's domains: docs, build"]);

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
agent = "bottom-x"
tool = "list_dir"
"#,
    );
    assert_at(
        &err,
        6,
        9,
        &[
            "unknown agent `bottom-x`; a step's `agent` is a lead or an executor: mid-docs, mid-build, bottom-d1",
        ],
    );

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
agent = "top-a"
tool = "list_dir"
"#,
    );
    assert_at(&err, 6, 9, &["`top-a` is a top power, which runs no steps"]);
}

#[test]
fn step_tools_must_exist_and_be_reachable() {
    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "deploy"
"#,
    );
    assert_at(&err, 6, 8, &[&format!("unknown tool `deploy` (available: {})", available())]);

    let small = team(
        r#"
[[top]]
id = "top-a"
power_type = "p"

[[mid]]
id = "mid-docs"
domain = "docs"
supervisor = "top-a"

[[mid]]
id = "mid-idle"
domain = "idle"
supervisor = "top-a"

[[bottom]]
id = "bottom-r"
supervisor = "mid-docs"
tools = ["read_file", "list_dir"]
"#,
    )
    .spec;
    let step = |target: &str| {
        format!(
            "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\n{target}\ntool = \"shell\"\nargs = {{ command = \"true\" }}\n"
        )
    };
    let err = plan_err_for(&small, &step("domain = \"docs\""));
    assert_at(
        &err,
        6,
        8,
        &[
            "no executor under the lead `mid-docs` of the domain `docs` has the tool `shell`; they have: list_dir, read_file",
        ],
    );
    let err = plan_err_for(&small, &step("agent = \"mid-docs\""));
    assert_at(&err, 6, 8, &["no executor under the lead `mid-docs` has the tool `shell`"]);
    let err = plan_err_for(&small, &step("agent = \"bottom-r\""));
    assert_at(
        &err,
        6,
        8,
        &["executor `bottom-r` does not have the tool `shell`; it has: read_file, list_dir"],
    );
    let err = plan_err_for(&small, &step("domain = \"idle\""));
    assert_at(
        &err,
        6,
        8,
        &["there is no executor under the lead `mid-idle` of the domain `idle` to run `shell`"],
    );
    let err = plan_err_for(&small, &step("# any"));
    assert_at(&err, 6, 8, &["no executor in the team has the tool `shell`"]);
}

#[test]
fn step_arguments_must_fit_the_tool() {
    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "write_file"
args = { path = "x", contents = "y" }
"#,
    );
    assert_at(
        &err,
        6,
        8,
        &["`args` do not fit the tool `write_file`: ", "`content`", "`contents`"],
    );

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "shell"
"#,
    );
    assert_at(
        &err,
        6,
        8,
        &["`args` do not fit the tool `shell`: `command`: required property is missing"],
    );

    let err = plan_err(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
tool = "shell"
args = { command = "true", timeout_ms = nan }
"#,
    );
    assert_at(&err, 6, 8, &["in `args`: NaN cannot be passed to a tool"]);
}

#[test]
fn step_after_names_an_earlier_step() {
    let head = "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ntool = \"list_dir\"\n[[steps]]\nid = \"b\"\ntool = \"list_dir\"\n";
    let err = plan_err(&format!("{head}after = [\"a\", \"c\"]\n"));
    assert_at(
        &err,
        9,
        15,
        &["no step `c` in this plan; a step may wait for a step listed before it (a)"],
    );
    let err = plan_err(&format!("{head}after = [\"b\"]\n"));
    assert_at(&err, 9, 10, &["a step cannot wait for itself"]);
    let err =
        plan_err(&format!("{head}after = [\"z\"]\n[[steps]]\nid = \"z\"\ntool = \"list_dir\"\n"));
    assert_at(&err, 9, 10, &["step `z` is listed later (line 11)"]);
}

#[test]
fn regression_dotted_keys_under_a_spanned_table_still_parse() {
    // toml 0.8 cannot span a table written with dotted keys; such tables are read unspanned.
    let task = plan(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ntool = \"shell\"\nargs.command = \"true\"\n",
    );
    assert_eq!(task.steps[0].args, serde_json::json!({"command": "true"}));
    let err = team_err("reasoner.kind = \"llm\"\n[[top]]\nid = \"t\"\npower_type = \"p\"\n");
    assert_at(&err, 1, 17, &["unknown reasoner kind `llm`"]);
    let err = team_err("[[top]]\nid = \"t\"\npower_type = \"p\"\nreasoner.kind = \"llm\"\n");
    assert_at(&err, 4, 17, &["unknown reasoner kind `llm`"]);
}

#[test]
fn the_checked_in_example_is_what_init_writes() {
    assert_eq!(include_str!("../../../examples/hello/team.toml"), example_team_toml());
    assert_eq!(include_str!("../../../examples/hello/plan.toml"), example_plan_toml());
}

/// The smallest valid team: one power.
const ONE_POWER: &str = "[[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n";

#[test]
fn model_reasoner_prices_budget_and_conversation_are_read() {
    let t = team(&format!(
        r#"
[reasoner]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "qwen"
api_key_env = "MY_KEY"
request_timeout = "30s"
max_tokens = 256
structured_output = "json_object"
small_model = true

[prices]
"qwen" = {{ input_per_mtok = 0.5, output_per_mtok = 1.5 }}

[budget]
max_tokens = 1000
max_cost_usd = 0.25
max_wall = "10m"
max_calls = 20
on_exceed = "ask"

[conversation]
max_turns = 3
max_chars = 900

{ONE_POWER}reasoner = {{ kind = "anthropic", model = "claude-x" }}
"#
    ));
    let r = &t.default_reasoner;
    assert_eq!(r.kind, ReasonerKind::OpenAi);
    assert_eq!(r.base_url.as_deref(), Some("http://127.0.0.1:11434/v1"));
    assert_eq!(r.model.as_deref(), Some("qwen"));
    assert_eq!(r.api_key_env.as_deref(), Some("MY_KEY"));
    assert_eq!(r.request_timeout, Some(Duration::from_secs(30)));
    assert_eq!(r.max_tokens, Some(256));
    assert_eq!(
        r.structured_output,
        agent_llm::StructuredOutput::Only(agent_llm::StructuredMode::JsonObject)
    );
    assert!(r.small_model);
    let own = &t.agent_reasoners[&agent_state::AgentId::new("top-a")];
    assert_eq!(own.kind, ReasonerKind::Anthropic);
    assert_eq!(own.model.as_deref(), Some("claude-x"));
    assert_eq!(own.api_key_env.as_deref(), Some("MY_KEY"), "fields not given are inherited");
    assert_eq!(
        t.prices.get("qwen"),
        Some(agent_llm::Price { input_per_mtok: 0.5, output_per_mtok: 1.5 })
    );
    assert_eq!(t.budget.max_tokens, Some(1000));
    assert_eq!(t.budget.max_cost_usd, Some(0.25));
    assert_eq!(t.budget.max_wall, Some(Duration::from_secs(600)));
    assert_eq!(t.budget.max_calls, Some(20));
    assert_eq!(t.budget.on_exceed, agent_llm::OnExceed::AskTop);
    assert_eq!(t.conversation.max_turns, 3);
    assert_eq!(t.conversation.max_chars, 900);
}

#[test]
fn a_human_decides_budget_extensions_with_ask_human_and_someone_must_be_listed() {
    let t = team(&format!(
        "[budget]\nmax_calls = 5\non_exceed = \"ask_human\"\n\n[approvals]\nhumans = [\"alice\"]\n\n{ONE_POWER}"
    ));
    assert_eq!(t.budget.on_exceed, agent_llm::OnExceed::AskHuman);
    assert_eq!(t.spec.approvals.humans, ["alice"]);

    // Nobody to decide: refused at the value.
    for approvals in ["", "[approvals]\nhumans = []\n"] {
        let err = team_err(&format!(
            "[budget]\nmax_calls = 5\non_exceed = \"ask_human\"\n{approvals}{ONE_POWER}"
        ));
        assert_eq!((err.line(), err.column()), (3, 13), "{err}");
        for f in ["ask_human", "[approvals]", "humans"] {
            assert!(err.message().contains(f), "`{f}` not in: {err}");
        }
    }
}

#[test]
fn bad_model_settings_are_refused_where_they_are_written() {
    let cases: [(&str, &[&str]); 10] = [
        ("[reasoner]\nkind = \"gpt\"\n", &["unknown reasoner kind `gpt`", "openai"]),
        (
            "[reasoner]\nstructured_output = \"json\"\n",
            &["`structured_output`", "`json`", "\"auto\"", "\"tool_call\"", "\"prompt\""],
        ),
        ("[reasoner]\nbase_url = \"not a url\"\n", &["`base_url`", "not an http(s) URL"]),
        ("[reasoner]\nbase_url = \"ftp://x\"\n", &["`base_url`", "https://api.openai.com/v1"]),
        (
            "[reasoner]\napi_key_env = \"sk-123 secret\"\n",
            &["`api_key_env`", "environment variable name"],
        ),
        ("[reasoner]\nmodel = \"  \"\n", &["`model` must not be empty"]),
        (
            "[prices]\n\"m\" = { input_per_mtok = -1.0, output_per_mtok = 1.0 }\n",
            &["price of model `m`", "input_per_mtok", "-1"],
        ),
        ("[budget]\nmax_calls = 0\n", &["`max_calls` must be at least 1"]),
        (
            "[budget]\non_exceed = \"pause\"\n",
            &["`on_exceed`", "\"stop\"", "\"ask\"", "\"ask_human\""],
        ),
        ("[conversation]\nmax_turns = 0\n", &["`max_turns` must be at least 1"]),
    ];
    for (table, fragments) in cases {
        let err = team_err(&format!("{table}{ONE_POWER}"));
        assert_eq!(err.line(), 2, "the error points at the setting: {err}");
        for f in fragments {
            assert!(err.message().contains(f), "`{f}` not in: {err}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Limits, encodings and control characters.

/// A plan of `n` steps `s1`..`sn`, each step 4 lines after a 2-line head.
fn many_steps(n: usize) -> String {
    let mut text = String::from("id = \"t\"\ngoal = \"g\"\n");
    for i in 1..=n {
        text.push_str(&format!(
            "[[steps]]\nid = \"s{i}\"\ntool = \"list_dir\"\nargs = {{ path = \".\" }}\n"
        ));
    }
    text
}

#[test]
fn plan_with_too_many_steps_is_refused_with_position() {
    assert_eq!(plan(&many_steps(MAX_PLAN_STEPS)).steps.len(), MAX_PLAN_STEPS);
    let err = plan_err(&many_steps(MAX_PLAN_STEPS + 1));
    // Step n's id is on line 2 + 4(n - 1) + 2.
    assert_at(
        &err,
        4 * MAX_PLAN_STEPS + 4,
        6,
        &["too many steps: this is step 10001 of 10001", "at most 10000", "several plans"],
    );
}

#[test]
fn oversized_files_and_step_arguments_are_refused_with_position() {
    let big = format!("id = \"t\"\ngoal = \"{}\"\n", "g".repeat(MAX_PLAN_FILE_BYTES));
    let err = plan_err(&big);
    assert_at(
        &err,
        2,
        MAX_PLAN_FILE_BYTES - 9 + 1,
        &["plan file is", "over the limit of 16777216"],
    );

    let big = format!("# {}\n{}", "x".repeat(MAX_TEAM_FILE_BYTES), text(HEAD));
    let err = team_err(&big);
    assert_at(
        &err,
        1,
        MAX_TEAM_FILE_BYTES + 1,
        &["team file is", &format!("over the limit of {MAX_TEAM_FILE_BYTES}")],
    );

    let content = "c".repeat(MAX_STEP_ARGS_BYTES);
    let err = plan_err(&format!(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"w\"\ntool = \"write_file\"\n\
         args = {{ path = \"big.txt\", content = \"{content}\" }}\n"
    ));
    assert_at(&err, 5, 8, &["`args` are 8388639 bytes as JSON", "limit of 8388608 bytes"]);
    // Just under the limit is accepted.
    let content = "c".repeat(MAX_STEP_ARGS_BYTES - 64);
    let task = plan(&format!(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"w\"\ntool = \"write_file\"\n\
         args = {{ path = \"big.txt\", content = \"{content}\" }}\n"
    ));
    assert_eq!(task.steps[0].args["content"].as_str().map(str::len), Some(content.len()));
}

/// A scripted step's tool and arguments, two lines.
const LIST: &str = "tool = \"list_dir\"\nargs = { path = \".\" }\n";

#[test]
fn texts_the_team_cannot_hold_are_refused_with_position() {
    // A description over 16 KiB: refused where it is, not signed and then lost on a board.
    let long = "d".repeat(MAX_TEXT_BYTES + 1);
    let err = plan_err(&format!(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"s\"\ndescription = \"{long}\"\n"
    ));
    assert_at(&err, 5, 15, &["a step's `description` is 16385 bytes, over the limit of 16384"]);
    let err = plan_err(&format!("id = \"t\"\ngoal = \"{long}\"\n"));
    assert_at(&err, 2, 8, &["the plan's `goal` is 16385 bytes"]);
    let id = "i".repeat(MAX_ID_BYTES + 1);
    let err = plan_err(&format!("id = \"{id}\"\ngoal = \"g\"\n"));
    assert_at(&err, 1, 6, &["the plan's `id` is 129 bytes, over the limit of 128"]);
    // At the limit each is accepted.
    let ok = "d".repeat(MAX_TEXT_BYTES);
    let task = plan(&format!(
        "id = \"t\"\ngoal = \"{ok}\"\n[[steps]]\nid = \"s\"\ndescription = \"{ok}\"\n{LIST}"
    ));
    assert_eq!(task.steps[0].description.len(), MAX_TEXT_BYTES);

    // Descriptions that are each short enough but together more than a lead's board can list:
    // refused at the step that passes the limit (the 17th of 16 KiB each).
    let mut text = String::from("id = \"t\"\ngoal = \"g\"\n");
    // 16 steps of 16 383 bytes (id and description) fit in 256 KiB; the 17th does not.
    let each = "d".repeat(MAX_TEXT_BYTES - 4);
    for i in 1..=17 {
        text.push_str(&format!("[[steps]]\nid = \"s{i:02}\"\ndescription = \"{each}\"\n{LIST}"));
    }
    assert_eq!(MAX_PLAN_TEXT_BYTES / MAX_TEXT_BYTES, 16);
    let err = plan_err(&text);
    // Step n's id is on line 2 + 5(n - 1) + 2.
    assert_at(&err, 84, 6, &["over 262144 bytes (256 KiB) by this step", "several plans"]);
    let sixteen: String = text.lines().take(2 + 5 * 16).map(|l| format!("{l}\n")).collect();
    assert_eq!(plan(&sixteen).steps.len(), 16);
}

#[test]
fn heartbeat_out_of_range_is_refused() {
    for (value, column) in [("9ms", 13), ("61m", 13), ("2h", 13), ("18446744073709551615ms", 13)] {
        let err = team_err(&format!("heartbeat = \"{value}\"\n{}", text(HEAD)));
        assert_at(&err, 1, column, &["`heartbeat`", "out of range; use 10ms to 1h"]);
    }
    // `u64::MAX` seconds does not fit in milliseconds: refused as not a duration.
    let err = team_err(&format!("heartbeat = \"18446744073709551615s\"\n{}", text(HEAD)));
    assert_at(&err, 1, 13, &["`heartbeat`", "not a duration"]);
    for (value, expected) in
        [("10ms", MIN_HEARTBEAT), ("1h", MAX_HEARTBEAT), ("60m", MAX_HEARTBEAT)]
    {
        let t = team(&format!("heartbeat = \"{value}\"\n{}", text(HEAD)));
        assert_eq!(t.spec.heartbeat, expected);
    }
    assert_eq!(check_heartbeat(MIN_HEARTBEAT), Ok(MIN_HEARTBEAT));
    assert_eq!(check_heartbeat(MAX_HEARTBEAT), Ok(MAX_HEARTBEAT));
    let short = Duration::from_millis(9);
    assert_eq!(check_heartbeat(short), Err(HeartbeatOutOfRange { heartbeat: short }));
    assert_eq!(
        check_heartbeat(MAX_HEARTBEAT + Duration::from_millis(1)).unwrap_err().to_string(),
        "a heartbeat of 3600001 ms is out of range; use 10ms to 1h (such as \"250ms\" or \"4s\")"
    );
}

#[test]
fn non_utf8_plan_reports_line_and_column() {
    let path = Path::new("plan.toml");
    let mut bytes = b"id = \"t\"\ngoal = \"caf\xc3\xa9 ".to_vec();
    bytes.extend_from_slice(b"\xff\xfe\"\n");
    let err = decode(path, bytes, MAX_PLAN_FILE_BYTES).unwrap_err();
    // Line 2, after `goal = "café ` (13 characters): column 14; byte offset 9 + 14 = 23.
    assert_eq!(
        err.to_string(),
        "plan.toml:2:14: the file is not UTF-8 text: byte 0xFF at byte offset 23 cannot start or \
         continue a character; save the file as UTF-8"
    );
    // A truncated character at the very end is invalid too.
    let err = decode(path, b"id = \"\xc3".to_vec(), MAX_PLAN_FILE_BYTES).unwrap_err();
    assert_eq!((err.line(), err.column()), (1, 7), "{err}");

    assert_eq!(decode(path, "ok = \"é\"".into(), 100).unwrap(), "ok = \"é\"");
    // Over the limit: the position where it is passed, even inside a character.
    let err = decode(path, "ab\ncdé".into(), 6).unwrap_err();
    assert_eq!((err.line(), err.column()), (2, 3), "{err}");
    assert!(err.message().contains("over the limit of 6 bytes"), "{err}");
    let err = decode(path, "ab\ncdéf".into(), 7).unwrap_err();
    assert_eq!((err.line(), err.column()), (2, 4), "{err}");
}

#[test]
fn control_characters_in_ids_are_refused() {
    // Plan: the task id, step ids and the names a step uses.
    let err = plan_err("id = \"t\\n\"\ngoal = \"g\"\n");
    assert_at(&err, 1, 6, &["the plan's `id`: character 2 is the control character \\u{a}"]);
    let step = |field: &str| {
        format!("id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"s\"\ntool = \"list_dir\"\n{field}\n")
    };
    for (field, fragment) in [
        ("domain = \"docs\\u001b[2J\"", "`domain`: character 5 is the control character \\u{1b}"),
        ("after = [\"s\\r\"]", "a step in `after`"),
    ] {
        let err = plan_err(&step(field));
        assert_eq!(err.line(), 6, "{err}");
        assert!(err.message().contains(fragment), "`{fragment}` not in {err}");
        assert!(!err.to_string().chars().any(agent_state::is_control), "{err:?}");
    }
    let err =
        plan_err("id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"s\\t2\"\ntool = \"list_dir\"\n");
    assert_at(&err, 4, 6, &["a step's `id`: character 2 is the control character \\u{9}"]);
    // A goal and a description are free text: printed escaped, not refused.
    let task = plan(
        "id = \"t\"\ngoal = \"two\\nlines\"\n[[steps]]\nid = \"s\"\ndescription = \"a\\tb\"\n\
         tool = \"list_dir\"\n",
    );
    assert_eq!(task.goal, "two\nlines");

    // Team: names, roles, models, domains, power types.
    for (field, line_of_value, fragment) in [
        ("name = \"Power\\nA\"", 15, "`name`: character 6 is the control character \\u{a}"),
        ("role = \"gov\\u0085\"", 15, "`role`: character 4 is the control character \\u{85}"),
        ("model = \"m\\u2028\"", 15, "`model`"),
    ] {
        let err = team_err(&with_head(&format!(
            "\n[[bottom]]\nid = \"bottom-a\"\nsupervisor = \"mid-a\"\ntools = [\"shell\"]\n{field}\n"
        )));
        assert_eq!(err.line(), line_of_value + 2, "{err}");
        assert!(err.message().contains(fragment), "`{fragment}` not in {err}");
    }
    let err = team_err("[[top]]\nid = \"top\\na\"\npower_type = \"p\"\n");
    assert_at(&err, 2, 6, &["an agent's `id`: character 4"]);
    let err = team_err("[[top]]\nid = \"top-a\"\npower_type = \"p\\u007f\"\n");
    assert_at(&err, 3, 14, &["`power_type`: character 2 is the control character \\u{7f}"]);
    let err = team_err(&format!("{}\n[reasoner]\nprefer = [\"a\\tb\"]\n", text(HEAD)));
    assert_at(&err, 15, 11, &["an option in `prefer`"]);
}

#[test]
fn escape_controls_keeps_text_on_one_line() {
    assert!(matches!(escape_controls("plain ünïcode"), Cow::Borrowed(_)));
    assert_eq!(escape_controls("a\nb\rc\td"), "a\\nb\\rc\\td");
    assert_eq!(
        escape_controls("\u{1b}[31m\u{7f}\u{9b}\u{2029}"),
        "\\u{1b}[31m\\u{7f}\\u{9b}\\u{2029}"
    );
    let err = FileError {
        path: "odd\nname.toml".into(),
        line: 1,
        column: 1,
        message: "bad `x\ny`".into(),
    };
    assert_eq!(err.to_string(), "odd\\nname.toml:1:1: bad `x\\ny`");
}

/// The generated teams of `strata init --scale` parse, with the documented shape: for 100 000
/// agents, 3 powers, 100 leads and 99 897 executors.
#[test]
fn scaled_teams_have_the_documented_shape() {
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    for (agents, leads) in [(5, 1), (1_000, 1), (12_345, 12)] {
        let text = scaled_team_toml(agents);
        let team = parse_team(Path::new("team.toml"), &text, &tools).unwrap();
        assert_eq!(team.spec.agents.len(), agents);
        assert_eq!(team.spec.max_agents, agents);
        let mids = team.spec.agents.iter().filter(|a| a.config.layer == AgentLayer::Mid).count();
        assert_eq!(mids, leads, "{agents} agents");
        let plan = scaled_plan_toml(agents);
        let task = parse_plan(Path::new("plan.toml"), &plan, &team.spec, &tools).unwrap();
        assert!(!task.steps.is_empty());
    }
    let big = scaled_team_toml(100_000);
    assert_eq!(big.matches("[[mid]]").count(), 100);
    assert_eq!(big.matches("[[bottom]]").count(), 99_897);
}

/// `read` reads at most the limit (and one byte), checks the text like `decode`, and names a
/// file it cannot read.
#[test]
fn read_is_bounded_checked_and_names_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, "id = \"t\"\n").unwrap();
    assert_eq!(read(&path, 100).unwrap(), "id = \"t\"\n");

    // Over the limit: the position where it is passed, like `decode`.
    match read(&path, 4) {
        Err(ReadError::File(err)) => {
            assert_eq!((err.line(), err.column()), (1, 5), "{err}");
            assert!(err.message().contains("over the limit of 4 bytes"), "{err}");
        }
        other => panic!("expected a file error, got {other:?}"),
    }
    std::fs::write(&path, b"id = \"\xff\"\n").unwrap();
    let err = read(&path, 100).unwrap_err();
    assert!(matches!(&err, ReadError::File(e) if (e.line(), e.column()) == (1, 7)), "{err}");

    let missing = dir.path().join("missing.toml");
    let err = read(&missing, 100).unwrap_err();
    let ReadError::Io { path, source } = &err else { panic!("expected an I/O error: {err}") };
    assert_eq!(path, &missing);
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(err.to_string(), format!("cannot read {}: {source}", missing.display()));
}

/// A generated team below the smallest size is the smallest one, not an arithmetic overflow.
#[test]
fn scaled_files_below_the_smallest_size_are_the_smallest() {
    for agents in [0, 1, 4] {
        assert_eq!(scaled_team_toml(agents), scaled_team_toml(MIN_SCALE));
        assert_eq!(scaled_plan_toml(agents), scaled_plan_toml(MIN_SCALE));
    }
}

// ---------------------------------------------------------------------------------------------
// Roles, the spawn depth, and goal steps.

/// `HEAD`, an executor, and two roles: a mid `lead` that enables the bottom `writer`. `HEAD`
/// is 12 lines, so the `[[bottom]]` is on line 13 and `rest` starts on line 28.
fn with_roles(rest: &str) -> String {
    with_head(&format!(
        "{}{}",
        text(
            r#"
[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell"]

[[roles]]
name = "lead"
layer = "mid"
enabled_agents = ["writer"]

[[roles]]
name = "writer"
layer = "bottom"
tools = ["write_file"]

"#
        ),
        text(rest)
    ))
}

#[test]
fn roles_and_the_spawn_depth_are_read() {
    let file = team(
        r#"
max_spawn_depth = 5

[reasoner]
forbid_tools = ["shell"]

[[top]]
id = "top-a"
power_type = "power_a"
role = "governance"

[[mid]]
id = "mid-a"
domain = "docs"
supervisor = "top-a"
role = "lead"

[[bottom]]
id = "bottom-a"
supervisor = "mid-a"
tools = ["shell"]
role = "writer"

[[roles]]
name = "lead"
layer = "mid"
description = "leads the docs"
enabled_agents = ["writer", "lead"]
max_instances = 2

[[roles]]
name = "writer"
layer = "bottom"
description = "writes"
system_prompt = "You write."
tools = ["write_file", "read_file", "write_file"]
capabilities = ["execute", "tool_call"]
model = "small"
reasoner = { kind = "openai", prefer = ["x"] }
max_instances = 4
"#,
    );
    assert_eq!(file.spec.max_spawn_depth, 5);
    let roles = &file.spec.roles;
    assert_eq!(roles.names(), "lead, writer");
    let lead = roles.get("lead").unwrap();
    assert_eq!(lead.layer, AgentLayer::Mid);
    assert_eq!(lead.description, "leads the docs");
    assert_eq!(lead.enabled_agents, ["writer", "lead"]);
    assert_eq!(lead.max_instances, Some(2));
    assert_eq!(
        (lead.system_prompt.as_deref(), &lead.capabilities, &lead.model),
        (None, &None, &None)
    );
    assert!(lead.tools.is_empty());
    let writer = roles.get("writer").unwrap();
    let mut expected = agent_state::Role::new("writer", AgentLayer::Bottom);
    expected.description = "writes".into();
    expected.system_prompt = Some("You write.".into());
    expected.tools = vec!["write_file".into(), "read_file".into()];
    expected.capabilities = Some(vec![Capability::Execute, Capability::ToolCall]);
    expected.model = Some("small".into());
    expected.max_instances = Some(4);
    assert_eq!(writer, &expected);
    assert!(roles.may_spawn("lead", "writer") && !roles.may_spawn("writer", "lead"));

    // The role's own reasoner table, with the default's fields filled in; none for `lead`.
    assert_eq!(file.role_reasoners.len(), 1);
    let own = &file.role_reasoners["writer"];
    assert_eq!(own.kind, ReasonerKind::OpenAi);
    assert_eq!(
        (&own.forbid_tools[..], &own.prefer[..]),
        (&["shell".to_owned()][..], &["x".to_owned()][..])
    );

    // Configured leads and executors that name a role; a top power's `role` stays free text.
    let agent_roles: Vec<(&str, &str)> =
        file.spec.agent_roles.iter().map(|(id, r)| (id.as_str(), r.as_str())).collect();
    assert_eq!(agent_roles, [("bottom-a", "writer"), ("mid-a", "lead")]);
    assert_eq!(file.spec.agents[0].config.role, "governance");
    assert_eq!(file.spec.agents[1].config.role, "lead");

    // Without roles: none, the default depth, and `role` is free text on every layer.
    let plain = team(
        r#"
[[top]]
id = "top-a"
power_type = "power_a"

[[mid]]
id = "mid-a"
domain = "docs"
supervisor = "top-a"
role = "anything"
"#,
    );
    assert!(plain.spec.roles.is_empty() && plain.spec.agent_roles.is_empty());
    assert!(plain.role_reasoners.is_empty());
    assert_eq!(plain.spec.max_spawn_depth, agent_state::DEFAULT_MAX_SPAWN_DEPTH);
    assert_eq!(plain.spec.agents[1].config.role, "anything");
    assert_eq!(default_team().spec.max_spawn_depth, agent_state::DEFAULT_MAX_SPAWN_DEPTH);
}

#[test]
fn bad_max_spawn_depth() {
    for (depth, column) in [("0", 19), ("11", 19), ("-1", 19)] {
        let err = team_err(&format!("max_spawn_depth = {depth}\n{}", text(HEAD)));
        assert_eq!((err.line(), err.column()), (1, column), "{err}");
        if depth != "-1" {
            assert_at(
                &err,
                1,
                column,
                &[&format!("`max_spawn_depth` must be from 1 to 10, not {depth}")],
            );
        }
    }
    assert_eq!(team(&format!("max_spawn_depth = 10\n{}", text(HEAD))).spec.max_spawn_depth, 10);
}

#[test]
fn role_errors_point_at_the_value() {
    // The valid base parses.
    let base = team(&with_roles(""));
    assert_eq!(base.spec.roles.names(), "lead, writer");

    // An enabled role that does not exist: the entry in `enabled_agents`.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "boss"
layer = "mid"
enabled_agents = ["writer", "tester"]
"#,
    ));
    assert_at(
        &err,
        31,
        29,
        &["role `boss` enables `tester`, which is not a role (known roles: boss, lead, writer)"],
    );

    // A role enabling one of a higher layer: the entry. (A top role is refused too, but `boss`
    // is checked first.)
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "boss"
layer = "mid"
enabled_agents = ["power"]

[[roles]]
name = "power"
layer = "top"
"#,
    ));
    assert_at(&err, 31, 19, &["role `boss` (mid) enables `power`, a top role"]);

    // A bottom role enabling anything: the list.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
enabled_agents = ["writer"]
"#,
    ));
    assert_at(
        &err,
        32,
        18,
        &["role `tester` (bottom) enables roles", "only mid roles may spawn agents"],
    );

    // A top role: its layer.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "power"
layer = "top"
"#,
    ));
    assert_at(&err, 30, 9, &["role `power` is on the top layer"]);

    // A layer that is not one.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "x"
layer = "side"
"#,
    ));
    assert_at(&err, 30, 9, &["`layer` is \"mid\"", "or \"bottom\"", "not \"side\""]);

    // Tools on a mid role: the list.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "boss"
layer = "mid"
tools = ["shell"]
"#,
    ));
    assert_at(&err, 31, 9, &["role `boss` (mid) lists tools", "give tools to bottom roles"]);

    // A capability its layer may not hold: the capability, with what it may hold.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
capabilities = ["execute", "delegate"]
"#,
    ));
    assert_at(
        &err,
        32,
        28,
        &[
            "role `tester` (bottom) holds `delegate`, which the bottom layer may not hold",
            "allowed: plan, execute",
        ],
    );
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "boss"
layer = "mid"
capabilities = ["arbitrate"]
"#,
    ));
    assert_at(&err, 31, 17, &["role `boss` (mid) holds `arbitrate`"]);
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "boss"
layer = "mid"
capabilities = ["fly"]
"#,
    ));
    assert_at(&err, 31, 17, &["unknown capability `fly`; a mid role may hold: plan"]);

    // Tools: a bottom role needs them, and they must be registered.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
"#,
    ));
    assert_at(&err, 29, 8, &["role `tester` is a bottom role and needs `tools`"]);
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell", "hammer"]
"#,
    ));
    assert_at(&err, 31, 19, &["unknown tool `hammer`", &available()]);
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = []
"#,
    ));
    assert_at(&err, 31, 9, &["needs at least one tool"]);

    // Duplicate and bad names: the second name, the name.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "writer"
layer = "bottom"
tools = ["shell"]
"#,
    ));
    assert_at(
        &err,
        29,
        8,
        &["role `writer` is already defined on line 24; role names must be unique"],
    );
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "test writer"
layer = "bottom"
tools = ["shell"]
"#,
    ));
    assert_at(&err, 29, 8, &["role name `test writer` is not valid"]);

    // `max_instances = 0`.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
max_instances = 0
"#,
    ));
    assert_at(&err, 32, 17, &["role `tester` has `max_instances = 0`"]);

    // Empty texts and unknown fields.
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
system_prompt = " "
"#,
    ));
    assert_at(&err, 32, 17, &["`system_prompt` must not be empty"]);
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
enabled = ["writer"]
"#,
    ));
    assert_at(&err, 32, 1, &["unknown field `enabled`", "`enabled_agents`"]);
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
reasoner = { kind = "oracle" }
"#,
    ));
    assert_at(&err, 32, 21, &["unknown reasoner kind `oracle`"]);
    let err = team_err(&with_roles(
        r#"
[[roles]]
name = "tester"
layer = "bottom"
tools = ["shell"]
enabled_agents = ["wri\tter"]
"#,
    ));
    assert_at(&err, 32, 19, &["a role in `enabled_agents`", "control character"]);
}

#[test]
fn an_agents_role_is_a_role_of_its_layer() {
    // `mid-a` is on lines 9 to 12 of `HEAD`; its `role` goes on line 13 (col 8 is the value).
    let with_mid_role = |role: &str| {
        with_roles("").replacen(
            "supervisor = \"top-a\"\n",
            &format!("supervisor = \"top-a\"\nrole = \"{role}\"\n"),
            1,
        )
    };
    let file = team(&with_mid_role("lead"));
    assert_eq!(file.spec.agent_roles[&AgentId::from("mid-a")], "lead");

    let err = team_err(&with_mid_role("boss"));
    assert_at(
        &err,
        13,
        8,
        &[
            "unknown role `boss`; in a team with [[roles]], a mid lead's `role` names a mid role (lead)",
        ],
    );
    let err = team_err(&with_mid_role("writer"));
    assert_at(
        &err,
        13,
        8,
        &[
            "`writer` is a bottom role, but `mid-a` is a mid lead; a mid lead's `role` names a mid role (lead)",
        ],
    );

    // An executor naming a mid role; a top power naming a role at all.
    let text = with_roles("").replacen(
        "tools = [\"shell\"]\n",
        "tools = [\"shell\"]\nrole = \"lead\"\n",
        1,
    );
    assert_at(
        &team_err(&text),
        17,
        8,
        &["`lead` is a mid role, but `bottom-a` is a bottom executor"],
    );
    let text = with_roles("").replacen(
        "power_type = \"power_a\"\n",
        "power_type = \"power_a\"\nrole = \"writer\"\n",
        1,
    );
    assert_at(
        &team_err(&text),
        4,
        8,
        &["`writer` is a bottom role, and a top power takes no role from [[roles]]"],
    );
}

/// The team of `with_roles`, for plans.
fn roles_team() -> TeamSpec {
    team(&with_roles("")).spec
}

#[test]
fn a_goal_only_plan_is_a_task_without_steps() {
    let task = plan("id = \"t\"\ngoal = \"write a README\"\n");
    assert_eq!(task, Task::goal("t", "write a README"));
    assert!(!task.is_scripted());
    task.check_request().unwrap();

    // What `strata run --goal` writes reads back as the same goal, whatever its text.
    for goal in ["write a README", "say \"hi\"\nthen 'bye' \\ done", "tab\there \u{7f} ü"] {
        let toml = goal_plan_toml("goal-x", goal);
        assert_eq!(plan(&toml), Task::goal("goal-x", goal), "{toml}");
    }
}

#[test]
fn a_step_with_only_a_description_is_a_goal_step() {
    let task = plan(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "readme"
description = "write README.md"
domain = "docs"
acceptance = "README.md exists"

[[steps]]
id = "list"
tool = "list_dir"
after = ["readme"]
"#,
    );
    let goal = &task.steps[0];
    assert!(!goal.is_scripted());
    assert_eq!((goal.tool.as_str(), &goal.args), ("", &serde_json::Value::Null));
    assert_eq!(goal.description, "write README.md");
    assert_eq!(goal.acceptance, "README.md exists");
    assert_eq!(goal.target, StepTarget::Domain("docs".into()));
    assert!(task.steps[1].is_scripted() && !task.is_scripted());
    assert_eq!(task.steps[1].acceptance, "");

    // No tool and no description; `args` without a tool; an empty description.
    let err = plan_err("id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndomain = \"docs\"\n");
    assert_at(&err, 4, 6, &["step `a` names no `tool` and has no `description`"]);
    let err = plan_err(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndescription = \"d\"\nargs = { path = \".\" }\n",
    );
    assert_at(&err, 4, 6, &["step `a` has `args` but no `tool`"]);
    let err = plan_err("id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndescription = \"\"\n");
    assert_at(&err, 5, 15, &["a goal step's `description` must say what to do"]);
    // In a scripted step an empty description is kept, as it always was.
    let task = plan(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndescription = \"\"\ntool = \"list_dir\"\n",
    );
    assert_eq!(task.steps[0].description, "");

    // A goal step's target is still checked, and it must reach an executor (the team has no
    // roles to spawn one from).
    let err = plan_err(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndescription = \"d\"\ndomain = \"ops\"\n",
    );
    assert_at(&err, 6, 10, &["no lead has the domain `ops`"]);
    let lonely = team(text(HEAD)).spec;
    let err = plan_err_for(
        &lonely,
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndescription = \"d\"\ndomain = \"docs\"\n",
    );
    assert_at(&err, 6, 10, &["there is no executor under the lead `mid-a` of the domain `docs`"]);
}

#[test]
fn a_steps_role_is_a_bottom_role_of_the_team() {
    let team = roles_team();
    let parse = |s: &str| {
        parse_plan(Path::new("plan.toml"), text(s), &team, &ToolRegistry::with_builtins())
    };
    let task = parse(
        r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
description = "write the docs"
role = "writer"

[[steps]]
id = "b"
domain = "docs"
role = "writer"
tool = "write_file"
args = { path = "x", content = "y" }
"#,
    )
    .unwrap();
    assert_eq!(task.steps[0].role.as_deref(), Some("writer"));
    // `write_file` is no configured executor's tool, but the step's role has it.
    assert_eq!(task.steps[1].role.as_deref(), Some("writer"));

    let step = |role: &str| {
        format!(
            "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ndescription = \"d\"\nrole = \"{role}\"\n"
        )
    };
    let err = parse(&step("tester")).unwrap_err();
    assert_at(
        &err,
        6,
        8,
        &["unknown role `tester`; a step's `role` names a bottom role of the team (writer)"],
    );
    let err = parse(&step("lead")).unwrap_err();
    assert_at(&err, 6, 8, &["`lead` is a mid role; a step's `role` names a bottom role"]);
    let err = plan_err(&step("writer"));
    assert_at(&err, 6, 8, &["the team has no roles, so a step cannot ask for the role `writer`"]);

    // A scripted step without a role still needs an executor with its tool.
    let err = parse(
        "id = \"t\"\ngoal = \"g\"\n[[steps]]\nid = \"a\"\ntool = \"write_file\"\nargs = { path = \"x\", content = \"y\" }\n",
    )
    .unwrap_err();
    assert_at(&err, 5, 8, &["no executor in the team has the tool `write_file`; they have: shell"]);
}

// ---------------------------------------------------------------------------------------------
// Executor kinds: `kind`, `[http]`, `[[endpoints]]`, `[executor]`, kind steps.

/// The line and column (in characters, from 1) where the `nth` occurrence (from 0) of `needle`
/// starts in `text`.
#[track_caller]
fn position_of(text: &str, needle: &str, nth: usize) -> (usize, usize) {
    let (at, _) = text
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("`{needle}` #{nth} is not in the text"));
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// Asserts that `err` points at the `nth` occurrence of `needle` in `text` and says every
/// fragment.
#[track_caller]
fn assert_points(err: &FileError, text: &str, needle: &str, nth: usize, fragments: &[&str]) {
    let (line, column) = position_of(text, needle, nth);
    assert_at(err, line, column, fragments);
}

fn team_result(s: &str) -> Result<TeamFile, FileError> {
    parse_team(Path::new("team.toml"), s, &ToolRegistry::with_builtins())
}

/// The kinds an error lists.
fn known() -> String {
    agent_executor::builtins().names().collect::<Vec<_>>().join(", ")
}

#[test]
fn the_builtin_kinds_are_the_four_of_the_seed() {
    assert_eq!(known(), "integrations_agent, planner_agent, research_agent, writer_agent");
}

/// `HEAD` and one executor with `extra` lines.
fn executor_team(extra: &str) -> String {
    with_head(&format!(
        "\n[[bottom]]\nid = \"bottom-a\"\nsupervisor = \"mid-a\"\ntools = [\"read_file\"]\n{extra}"
    ))
}

#[test]
fn an_executor_may_run_a_kind() {
    let file = team(&executor_team("kind = \"research_agent\"\n"));
    let bottom = file.spec.agents.iter().find(|a| a.config.id.as_str() == "bottom-a").unwrap();
    assert_eq!(
        bottom.role,
        RoleSpec::Bottom(BottomSpec::new(["read_file"]).with_kind("research_agent"))
    );
    // Nothing else given: no hosts, no endpoints, the default policy.
    assert_eq!(file.executor, ExecutorSettings::default());
    assert_eq!(file.executor.policy, agent_state::RetryPolicy::executor_default());
    assert_eq!(default_team().executor, ExecutorSettings::default());

    // Without a kind, none.
    let file = team(&executor_team(""));
    let bottom = file.spec.agents.iter().find(|a| a.config.id.as_str() == "bottom-a").unwrap();
    assert_eq!(bottom.role, RoleSpec::Bottom(BottomSpec::new(["read_file"])));
}

#[test]
fn an_unknown_kind_is_refused_at_its_value_with_the_known_kinds() {
    let text = executor_team("kind = \"poet_agent\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(
        &err,
        &text,
        "\"poet_agent\"",
        0,
        &[&format!("unknown executor kind `poet_agent`; the kinds are: {}", known())],
    );
}

#[test]
fn a_kind_on_a_lead_or_a_power_is_refused_at_its_value() {
    let text =
        text(HEAD).replace("domain = \"docs\"\n", "domain = \"docs\"\nkind = \"research_agent\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(
        &err,
        &text,
        "\"research_agent\"",
        0,
        &["a mid lead runs no executor kind: only a bottom executor takes a `kind`"],
    );

    let text = text.replace("kind = \"research_agent\"\n", "").replace(
        "power_type = \"power_b\"\n",
        "power_type = \"power_b\"\nkind = \"writer_agent\"\n",
    );
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"writer_agent\"", 0, &["a top power runs no executor kind"]);
}

#[test]
fn a_bottom_role_may_run_a_kind_and_a_mid_role_may_not() {
    let roles = r#"
[[roles]]
name = "researcher"
layer = "bottom"
tools = ["read_file"]
kind = "research_agent"
"#;
    let file = team(&with_head(roles));
    assert_eq!(file.spec.roles.get("researcher").unwrap().kind.as_deref(), Some("research_agent"));

    let text = with_head(&format!(
        "{roles}\n[[roles]]\nname = \"lead\"\nlayer = \"mid\"\nkind = \"planner_agent\"\n"
    ));
    let err = team_result(&text).unwrap_err();
    assert_points(
        &err,
        &text,
        "\"planner_agent\"",
        0,
        &["role `lead` (mid) has a `kind`; only bottom roles run an executor kind"],
    );

    let text = with_head(&roles.replace("research_agent", "dreamer"));
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"dreamer\"", 0, &["unknown executor kind `dreamer`", &known()]);
}

#[test]
fn http_settings_are_read() {
    let file = team(&executor_team(
        "\n[http]\nallow_hosts = [\"127.0.0.1:8080\", \"docs.example.com\", \"[::1]:9000\", \"::1\"]\ntimeout_ms = 2500\nmax_body_bytes = 4096\n",
    ));
    assert_eq!(
        file.executor.http,
        agent_executor::HttpPolicy {
            allow_hosts: vec![
                "127.0.0.1:8080".into(),
                "docs.example.com".into(),
                "[::1]:9000".into(),
                "::1".into()
            ],
            timeout_ms: 2500,
            max_body_bytes: 4096,
        }
    );
    // Left out: the defaults.
    let file = team(&executor_team("\n[http]\nallow_hosts = [\"example.org\"]\n"));
    assert_eq!(file.executor.http.timeout_ms, agent_executor::HttpPolicy::default().timeout_ms);
}

#[test]
fn bad_http_settings_are_refused_at_their_value() {
    for (entry, fragment) in [
        ("https://docs.example.com", "is a URL, not a host"),
        ("docs.example.com/path", "is a URL, not a host"),
        ("", "is empty"),
        ("two words", "is not a host name or an IP address"),
        ("example.org:http", "has the port `http`, not a number from 1 to 65535"),
        ("example.org:0", "has the port `0`"),
        ("[nope]:80", "not an IPv6 address"),
    ] {
        let text = executor_team(&format!("\n[http]\nallow_hosts = [\"ok.org\", \"{entry}\"]\n"));
        let err = team_result(&text).unwrap_err();
        assert_points(&err, &text, &format!("\"{entry}\""), 0, &["`allow_hosts`", fragment]);
    }
    let text = executor_team("\n[http]\ntimeout_ms = 0\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "0\n", 0, &["`timeout_ms` must be greater than 0"]);
    let text = executor_team("\n[http]\nmax_body_bytes = 0\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "0\n", 0, &["`max_body_bytes` must be at least 1"]);
    let text = executor_team("\n[http]\nallow = [\"x.org\"]\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "allow =", 0, &["unknown field `allow`"]);
}

const HTTP: &str = "\n[http]\nallow_hosts = [\"127.0.0.1:8080\"]\n";

#[test]
fn endpoints_are_read_with_their_headers() {
    let file = team(&executor_team(&format!(
        r#"{HTTP}
[[endpoints]]
name = "tickets"
method = "post"
url = "http://127.0.0.1:8080/api/tickets"
description = "opens a ticket"
headers = {{ Authorization = {{ env = "API_TOKEN" }}, Accept = "application/json" }}

[[endpoints]]
name = "status"
url = "http://127.0.0.1:8080/status"

[endpoints.headers]
X-Trace.env = "TRACE_ID"
"#
    )));
    let tickets = &file.executor.endpoints["tickets"];
    assert_eq!(
        *tickets,
        agent_executor::Endpoint {
            name: "tickets".into(),
            method: agent_executor::Method::Post,
            url: "http://127.0.0.1:8080/api/tickets".into(),
            headers: [
                (
                    "Accept".to_owned(),
                    agent_executor::HeaderValue::Value("application/json".into())
                ),
                ("Authorization".to_owned(), agent_executor::HeaderValue::Env("API_TOKEN".into())),
            ]
            .into(),
            description: "opens a ticket".into(),
        }
    );
    let status = &file.executor.endpoints["status"];
    assert_eq!(status.method, agent_executor::Method::Get, "GET by default");
    assert_eq!(
        status.headers["X-Trace"],
        agent_executor::HeaderValue::Env("TRACE_ID".into()),
        "a header written with dotted keys"
    );
    assert_eq!(file.executor.endpoints.len(), 2);
}

/// `executor_team` with `[http]` and one endpoint of `fields`.
fn endpoint_team(fields: &str) -> String {
    executor_team(&format!("{HTTP}\n[[endpoints]]\nname = \"e\"\n{fields}"))
}

#[test]
fn bad_endpoints_are_refused_at_their_value() {
    let text = endpoint_team("url = \"ftp://127.0.0.1:8080/x\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"ftp:", 0, &["endpoint `e`: scheme `ftp` is not supported"]);

    let text = endpoint_team("url = \"127.0.0.1:8080/x\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"127.0.0.1:8080/x\"", 0, &["is not a URL"]);

    // A host (or a port) outside the allow-list.
    for url in ["http://evil.example.com/x", "http://127.0.0.1:9999/x"] {
        let text = endpoint_team(&format!("url = \"{url}\"\n"));
        let err = team_result(&text).unwrap_err();
        assert_points(
            &err,
            &text,
            &format!("\"{url}\""),
            0,
            &["is not in the allowed hosts (127.0.0.1:8080); add it to `[http] allow_hosts`"],
        );
    }
    // No [http] at all: no host is allowed.
    let text = executor_team("\n[[endpoints]]\nname = \"e\"\nurl = \"http://127.0.0.1:8080/x\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"http://", 0, &["is not in the allowed hosts (none)"]);

    let text = endpoint_team("method = \"FETCH\"\nurl = \"http://127.0.0.1:8080/x\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(
        &err,
        &text,
        "\"FETCH\"",
        0,
        &["`method` is GET, POST, PUT, PATCH or DELETE, not `FETCH`"],
    );

    let text = endpoint_team(
        "url = \"http://127.0.0.1:8080/x\"\nheaders = { Accept = \"a\", \"Bad Name\" = \"b\" }\n",
    );
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"b\"", 0, &["header name `Bad Name` is not valid"]);

    let text =
        endpoint_team("url = \"http://127.0.0.1:8080/x\"\nheaders = { Authorization = 42 }\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "42", 0, &["header `Authorization` is a string"]);

    let text = endpoint_team(
        "url = \"http://127.0.0.1:8080/x\"\nheaders = { Authorization = { env = \"MY TOKEN\" } }\n",
    );
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "{ env", 0, &["`MY TOKEN` is not an environment variable name"]);

    let text =
        endpoint_team("url = \"http://127.0.0.1:8080/x\"\n").replace("name = \"e\"", "name = \"\"");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "\"\"", 0, &["endpoint name `` is not valid"]);

    let text = endpoint_team("url = \"http://127.0.0.1:8080/x\"\nbody = \"{}\"\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "body", 0, &["unknown field `body`"]);
}

#[test]
fn endpoint_names_are_unique() {
    let text = endpoint_team(
        "url = \"http://127.0.0.1:8080/x\"\n\n[[endpoints]]\nname = \"e\"\nurl = \"http://127.0.0.1:8080/y\"\n",
    );
    let err = team_result(&text).unwrap_err();
    let first_line = position_of(&text, "name = \"e\"", 0).0;
    assert_points(
        &err,
        &text,
        "\"e\"",
        1,
        &[&format!(
            "endpoint `e` is already defined on line {first_line}; endpoint names must be unique"
        )],
    );
}

#[test]
fn executor_retry_policies_are_read_per_team_kind_and_agent() {
    use agent_state::RetryPolicy;
    let file = team(&executor_team(
        r#"kind = "writer_agent"
executor_retry = { max_retries = 4 }

[[bottom]]
id = "bottom-b"
supervisor = "mid-a"
tools = ["read_file"]
kind = "research_agent"
executor_retry = { hard_timeout_ms = 200000 }

[executor]
max_retries = 2
initial_delay_ms = 500
backoff_multiplier = 3.0

[executor.kinds.research_agent]
soft_timeout_ms = 60000
"#,
    ));
    let seed = RetryPolicy::executor_default();
    let team_policy = RetryPolicy {
        max_retries: 2,
        initial_delay_ms: 500,
        backoff_multiplier: 3.0,
        ..seed.clone()
    };
    assert_eq!(file.executor.policy, team_policy, "left out: the default");
    // The kind's override over the team's (the built-in research_agent has no policy of its
    // own, or its own is the base).
    let research_base = agent_executor::builtins()
        .get("research_agent")
        .and_then(|k| k.policy())
        .unwrap_or_else(|| team_policy.clone());
    let research = RetryPolicy { soft_timeout_ms: 60_000, ..research_base };
    assert_eq!(file.executor.kind_policies["research_agent"], research);
    assert_eq!(file.executor.kind_policies.len(), 1);
    // Each agent's over what its kind gets.
    let writer_base = file.executor.policy_for("writer_agent", None);
    assert_eq!(
        file.executor.agent_policies[&AgentId::from("bottom-a")],
        RetryPolicy { max_retries: 4, ..writer_base }
    );
    assert_eq!(
        file.executor.agent_policies[&AgentId::from("bottom-b")],
        RetryPolicy { hard_timeout_ms: 200_000, ..research.clone() }
    );
    assert_eq!(
        file.executor
            .policy_for("research_agent", Some(&AgentId::from("bottom-b")))
            .hard_timeout_ms,
        200_000
    );
    assert_eq!(file.executor.policy_for("research_agent", None), research);

    // The executor built from the file applies the team's and the kind's policies.
    let dir = tempfile::tempdir().unwrap();
    let workspace = std::sync::Arc::new(agent_core::tools::ToolContext::new(dir.path()).unwrap());
    let executor = file.executor(workspace);
    let cx = agent_executor::RunContext::standalone(
        "writer_agent",
        std::sync::Arc::new(agent_core::RuleBasedReasoner::new()),
    );
    assert_eq!(executor.policy_for("research_agent", &cx), research);
    assert_eq!(
        executor.policy_for("writer_agent", &cx),
        file.executor.policy_for("writer_agent", None)
    );
    // ... and each executor's own to the runs made for it.
    let for_agent = |id: &str| agent_executor::RunContext {
        agent: std::sync::Arc::new(agent_state::AgentConfig::new(
            id,
            "executor",
            agent_state::AgentLayer::Bottom,
        )),
        ..cx.clone()
    };
    assert_eq!(
        executor.policy_for("research_agent", &for_agent("bottom-b")),
        file.executor.agent_policies[&AgentId::from("bottom-b")]
    );
    assert_eq!(executor.policy_for("writer_agent", &for_agent("bottom-a")).max_retries, 4);
    assert!(executor.env().workspace.is_some());
}

#[test]
fn bad_retry_numbers_are_refused_at_their_value() {
    for (table, needle, fragment) in [
        (
            "[executor]\nhard_timeout_ms = 0\n",
            "0\n",
            "[executor]: `hard_timeout_ms` must be greater than 0",
        ),
        ("[executor]\nsoft_timeout_ms = 0\n", "0\n", "`soft_timeout_ms` must be greater than 0"),
        (
            "[executor]\nbackoff_multiplier = 0.5\n",
            "0.5",
            "`backoff_multiplier` must be a number of 1 or more",
        ),
        (
            "[executor]\nsoft_timeout_ms = 400000\n",
            "400000",
            "`soft_timeout_ms` (400000) is over `hard_timeout_ms` (300000)",
        ),
        (
            "[executor]\nsoft_timeout_ms = 1000\nhard_timeout_ms = 900\n",
            "1000",
            "`soft_timeout_ms` (1000) is over `hard_timeout_ms` (900)",
        ),
        (
            "[executor]\ninitial_delay_ms = 9000\n",
            "9000",
            "`initial_delay_ms` (9000) is over `max_delay_ms` (5000)",
        ),
        (
            "[executor.kinds.writer_agent]\nhard_timeout_ms = 1000\n",
            "1000",
            "[executor.kinds.writer_agent]: `soft_timeout_ms` (120000) is over `hard_timeout_ms` (1000)",
        ),
        ("[executor]\nmax_retries = -1\n", "-1", "invalid value"),
        ("[executor]\nretries = 1\n", "retries", "unknown field `retries`"),
    ] {
        let text = executor_team(&format!("\n{table}"));
        let err = team_result(&text).unwrap_err();
        assert_points(&err, &text, needle, 0, &[fragment]);
    }
    let text = executor_team("\n[executor.kinds.poet_agent]\nmax_retries = 1\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "poet_agent", 0, &["unknown executor kind `poet_agent`", &known()]);

    let text =
        executor_team("kind = \"writer_agent\"\nexecutor_retry = { backoff_multiplier = -2.0 }\n");
    let err = team_result(&text).unwrap_err();
    assert_points(&err, &text, "-2.0", 0, &["`executor_retry`: `backoff_multiplier` must be"]);

    let text = executor_team("executor_retry = { max_retries = 3 }\n");
    let err = team_result(&text).unwrap_err();
    assert_points(
        &err,
        &text,
        "3 }",
        0,
        &[
            "`executor_retry` is the retry policy of an executor's kind runs, and `bottom-a` has no `kind`",
        ],
    );
}

/// A team with a lead over an executor that runs `research_agent` and one that runs none, a
/// lead over a writer, and a bottom role that runs `planner_agent`.
fn kinds_team() -> TeamSpec {
    team(
        r#"
[[top]]
id = "top-a"
power_type = "p"

[[mid]]
id = "mid-docs"
domain = "docs"
supervisor = "top-a"

[[mid]]
id = "mid-ops"
domain = "ops"
supervisor = "top-a"

[[bottom]]
id = "bottom-r"
supervisor = "mid-docs"
tools = ["read_file"]
kind = "research_agent"

[[bottom]]
id = "bottom-plain"
supervisor = "mid-docs"
tools = ["read_file"]

[[bottom]]
id = "bottom-w"
supervisor = "mid-ops"
tools = ["write_file"]
kind = "writer_agent"

[[roles]]
name = "planner"
layer = "bottom"
tools = ["read_file"]
kind = "planner_agent"
"#,
    )
    .spec
}

#[test]
fn a_step_may_call_its_executors_kind_with_an_objective_and_inputs() {
    let team = kinds_team();
    let text = r#"
id = "t"
goal = "g"

[[steps]]
id = "a"
domain = "docs"
tool = "research_agent"
args = { objective = "find the greeting", inputs = { paths = ["*.md"], max_sources = 2 } }

[[steps]]
id = "b"
agent = "bottom-w"
tool = "writer_agent"
args.objective = "write it down"
args.inputs.path = "notes/x.md"
args.inputs.content = "hello"

[[steps]]
id = "c"
role = "planner"
tool = "planner_agent"
args = { objective = "plan the release" }
"#;
    let task =
        parse_plan(Path::new("plan.toml"), text, &team, &ToolRegistry::with_builtins()).unwrap();
    assert!(task.is_scripted());
    assert_eq!(
        task.steps[0].args,
        serde_json::json!({"objective": "find the greeting", "inputs": {"paths": ["*.md"], "max_sources": 2}})
    );
    assert_eq!(
        task.steps[1].args,
        serde_json::json!({"objective": "write it down", "inputs": {"path": "notes/x.md", "content": "hello"}})
    );
    assert_eq!(task.steps[2].args, serde_json::json!({"objective": "plan the release"}));
    assert_eq!(task.steps[2].tool, "planner_agent");
}

#[test]
fn a_kind_steps_args_and_target_are_checked_at_their_value() {
    let team = kinds_team();
    let step = |target: &str, tool: &str, args: &str| {
        format!(
            "id = \"t\"\ngoal = \"g\"\n\n[[steps]]\nid = \"a\"\n{target}\ntool = \"{tool}\"\n{args}\n"
        )
    };
    let check = |text: &str, needle: &str, fragments: &[&str]| {
        let err = plan_err_for(&team, text);
        assert_points(&err, text, needle, 0, fragments);
    };
    let research = |args: &str| step("domain = \"docs\"", "research_agent", args);

    let text = research("args = { inputs = { query = \"x\" } }");
    check(&text, "\"research_agent\"", &["`args` has no `objective`"]);
    let text = research("");
    check(&text, "\"research_agent\"", &["`args` has no `objective`"]);
    let text = research("args = { objective = \"  \" }");
    check(
        &text,
        "\"  \"",
        &["the `objective` is empty: say in words what the `research_agent` run should do"],
    );
    let text = research("args = { objective = 7 }");
    check(&text, "7", &["the `objective` is a string"]);
    let long = "x".repeat(agent_executor::MAX_OBJECTIVE_BYTES + 1);
    let text = research(&format!("args = {{ objective = \"{long}\" }}"));
    check(&text, &format!("\"{long}\""), &["over the limit of 16384"]);
    let text = research("args = { objective = \"o\", extra = 1 }");
    check(&text, "1 }", &["unknown argument `extra`"]);
    let text = research("args = { objective = \"o\", inputs = \"paths\" }");
    check(&text, "\"paths\"", &["`inputs` is a table"]);
    let text = research("args = { objective = \"o\", inputs = { pages = [\"a\"] } }");
    check(&text, "{ pages", &["`inputs` do not fit the kind `research_agent`"]);
    let text = research("args.objective = \"o\"\nargs.inputs.max_sources = \"many\"");
    // `args.inputs` written with dotted keys has no span: the tool is pointed at.
    let err = plan_err_for(&team, &text);
    assert!(err.message().contains("`inputs` do not fit the kind `research_agent`"), "{err}");

    // The target must reach an executor (or a role) with the kind.
    let text = step("domain = \"ops\"", "research_agent", "args = { objective = \"o\" }");
    check(
        &text,
        "\"research_agent\"",
        &[
            "no executor under the lead `mid-ops` of the domain `ops` runs the executor kind `research_agent` (their kinds: writer_agent)",
        ],
    );
    let text = step("agent = \"bottom-plain\"", "research_agent", "args = { objective = \"o\" }");
    check(
        &text,
        "\"research_agent\"",
        &[
            "executor `bottom-plain` does not run the executor kind `research_agent` (its kind: none)",
        ],
    );
    let text = step("", "integrations_agent", "args = { objective = \"o\" }");
    check(
        &text,
        "\"integrations_agent\"",
        &["no executor in the team runs the executor kind `integrations_agent`"],
    );
    // Neither a tool nor a kind.
    let text = step("", "poet_agent", "args = { objective = \"o\" }");
    check(&text, "\"poet_agent\"", &["unknown tool `poet_agent`", &known()]);
}

#[test]
fn exec_gives_an_executor_the_kind_and_a_plan_of_one_step() {
    let tools = ToolRegistry::with_builtins();
    let exec =
        with_executor_kind(Path::new("team.toml"), example_team_toml(), "writer_agent", &tools)
            .unwrap();
    assert_eq!(exec.executor.as_str(), "bottom-d1");
    let bottom = exec.team.spec.agents.iter().find(|a| a.config.id == exec.executor).unwrap();
    assert!(
        matches!(&bottom.role, RoleSpec::Bottom(b) if b.kind.as_deref() == Some("writer_agent"))
    );
    // The rest of the team is the example's, comments kept.
    assert_eq!(exec.team.spec.agents.len(), default_team().spec.agents.len());
    assert!(exec.text.starts_with(&example_team_toml()[..20]));

    // An executor that already runs the kind is taken as it is.
    let again =
        with_executor_kind(Path::new("team.toml"), &exec.text, "writer_agent", &tools).unwrap();
    assert_eq!(again.text, exec.text);
    assert_eq!(again.executor, exec.executor);
    // Another kind: the next executor without one.
    let other =
        with_executor_kind(Path::new("team.toml"), &exec.text, "research_agent", &tools).unwrap();
    assert_eq!(other.executor.as_str(), "bottom-d2");

    let err = with_executor_kind(Path::new("team.toml"), example_team_toml(), "poet", &tools)
        .unwrap_err();
    assert!(err.message().contains(&format!("the kinds are: {}", known())), "{err}");
    let err = with_executor_kind(
        Path::new("team.toml"),
        "[[top]]\nid = \"t\"\npower_type = \"p\"\n",
        "writer_agent",
        &tools,
    )
    .unwrap_err();
    assert!(err.message().contains("the team has no executor to run `writer_agent`"), "{err}");
    // The team file's own mistakes point into it.
    let err = with_executor_kind(Path::new("team.toml"), "heartbeat = 5\n", "writer_agent", &tools)
        .unwrap_err();
    assert_eq!((err.line(), err.column()), (1, 13));

    let inputs = serde_json::json!({"path": "notes/x.md", "content": "line 1\n\"quoted\"", "n": 3, "list": [1.5, true]});
    let plan_text =
        exec_plan_toml("writer_agent", "write \"it\"\ndown", &inputs, &exec.executor).unwrap();
    let task = parse_plan(Path::new("plan.toml"), &plan_text, &exec.team.spec, &tools);
    // The plan is checked against the kind's schema: `n` and `list` are not writer inputs.
    assert!(task.unwrap_err().message().contains("`inputs` do not fit the kind `writer_agent`"));
    let inputs = serde_json::json!({"path": "notes/x.md", "content": "line 1\n\"quoted\""});
    let plan_text =
        exec_plan_toml("writer_agent", "write \"it\"\ndown", &inputs, &exec.executor).unwrap();
    let task = parse_plan(Path::new("plan.toml"), &plan_text, &exec.team.spec, &tools).unwrap();
    assert_eq!(task.id, "exec-writer_agent");
    assert_eq!(task.goal, "write \"it\"\ndown");
    assert_eq!(task.steps.len(), 1);
    assert_eq!(task.steps[0].tool, "writer_agent");
    assert_eq!(task.steps[0].target, StepTarget::Agent(exec.executor.clone()));
    assert_eq!(
        task.steps[0].args,
        serde_json::json!({"objective": "write \"it\"\ndown", "inputs": inputs})
    );
    let bare =
        exec_plan_toml("writer_agent", "o", &serde_json::Value::Null, &exec.executor).unwrap();
    let task = parse_plan(Path::new("plan.toml"), &bare, &exec.team.spec, &tools).unwrap();
    assert_eq!(task.steps[0].args, serde_json::json!({"objective": "o"}));

    assert!(
        exec_plan_toml("k", "o", &serde_json::json!({"a": null}), &exec.executor)
            .unwrap_err()
            .contains("`inputs.a` is null")
    );
    assert!(exec_plan_toml("k", "o", &serde_json::json!([1]), &exec.executor).is_err());
}

// ---------------------------------------------------------------------------------------------
// [guards]

#[test]
fn guards_take_their_thresholds_and_what_to_do_when_stuck() {
    let file = team(&with_head(
        r#"
[guards]
repeat_limit = 5
idle_heartbeats = 30
on_stuck = "escalate"
"#,
    ));
    let guards = file.spec.guards;
    assert_eq!((guards.repeat_limit, guards.idle_heartbeats), (5, 30));
    assert_eq!(guards.bounce_limit, agent_state::DEFAULT_BOUNCE_LIMIT, "left out: the default");
    assert_eq!(guards.on_stuck, agent_state::OnStuck::Escalate);
    assert_eq!(team(HEAD).spec.guards, agent_state::GuardSettings::default());
    // The module docs' example shows every field.
    let docs = include_str!("lib.rs");
    for field in ["repeat_limit", "bounce_limit", "idle_heartbeats", "wait_heartbeats", "on_stuck"]
    {
        assert!(docs.contains(&format!("//! {field} = ")), "{field} is documented");
    }
}

#[test]
fn guards_out_of_range_or_unknown_point_at_the_value() {
    let err = team_err(&with_head("\n[guards]\nrepeat_limit = 1\n"));
    assert_at(&err, 14, 16, &["[guards]", "`repeat_limit` is 1", "at least 2"]);
    let err = team_err(&with_head("\n[guards]\nidle_heartbeats = 0\n"));
    assert_at(&err, 14, 19, &["`idle_heartbeats` is 0", "at least 1"]);
    let err = team_err(&with_head("\n[guards]\non_stuck = \"retry\"\n"));
    assert_at(&err, 14, 12, &["\"stop\"", "\"escalate\"", "not \"retry\""]);
    let err = team_err(&with_head("\n[guards]\nmax_loops = 3\n"));
    assert!(err.message().contains("max_loops"), "{err}");
    // Written with a dotted key: the error still points at the value.
    let err = team_err(&format!("guards.bounce_limit = 2\n{}", text(HEAD)));
    assert_at(&err, 1, 23, &["`bounce_limit` is 2", "at least 3"]);
}

// ---------------------------------------------------------------------------------------------
// [arbitration]

#[test]
fn arbitration_says_what_goes_to_the_vote_and_defaults_to_escalations_and_acceptance() {
    let file = team(&with_head(
        r#"
[arbitration]
vetoed_plans = true
acceptance = false
"#,
    ));
    let arbitration = file.spec.arbitration;
    assert!(arbitration.vetoed_plans && !arbitration.acceptance);
    assert!(arbitration.escalations, "left out: the default");
    assert_eq!(team(HEAD).spec.arbitration, agent_state::ArbitrationSettings::default());
    let docs = include_str!("lib.rs");
    for field in ["escalations", "acceptance", "vetoed_plans"] {
        assert!(docs.contains(&format!("//! {field} = ")), "{field} is documented");
    }
    let err = team_err(&with_head("\n[arbitration]\nconflicts = true\n"));
    assert!(err.message().contains("conflicts"), "{err}");
    let err = team_err(&with_head("\n[arbitration]\nescalations = \"yes\"\n"));
    assert!(err.message().contains("bool"), "{err}");
}

#[test]
fn sandbox_takes_the_network_and_limits_and_each_executor_or_role_may_differ() {
    let file = team(&with_head(
        r#"
[sandbox]
network = false
memory_mb = 512
processes = 64

[[bottom]]
id = "fetcher"
supervisor = "mid-a"
tools = ["shell"]
network = true

[[bottom]]
id = "builder"
supervisor = "mid-a"
tools = ["shell"]
role = "builder"

[[bottom]]
id = "plain"
supervisor = "mid-a"
tools = ["shell"]

[[roles]]
name = "builder"
layer = "bottom"
tools = ["shell"]
network = true
"#,
    ));
    let sandbox = &file.sandbox;
    assert!(!sandbox.network);
    assert_eq!(sandbox.limits.memory_bytes, 512 * 1024 * 1024);
    assert_eq!(sandbox.limits.processes, 64);
    assert_eq!(sandbox.limits.open_files, agent_core::tools::DEFAULT_OPEN_FILES, "left out");
    assert!(sandbox.network_for(&AgentId::new("fetcher"), None));
    assert!(sandbox.network_for(&AgentId::new("builder"), Some("builder")));
    assert!(!sandbox.network_for(&AgentId::new("plain"), None));
    assert!(sandbox.sandbox().is_enabled());
    assert!(!sandbox.sandbox().allows_network());
    // Left out: sandboxed, no network, the default limits.
    assert_eq!(team(HEAD).sandbox, team_file_default_sandbox());
    // The module docs' example shows every field.
    let docs = include_str!("lib.rs");
    for field in ["[sandbox]", "network = ", "memory_mb = ", "processes = ", "file_size_mb = "] {
        assert!(docs.contains(field), "{field} is documented");
    }
}

/// What a team file without `[sandbox]` gets.
fn team_file_default_sandbox() -> crate::SandboxSettings {
    crate::SandboxSettings::default()
}

#[test]
fn sandbox_limits_out_of_range_or_unknown_point_at_the_value() {
    let err = team_err(&with_head("\n[sandbox]\nprocesses = 0\n"));
    assert_at(&err, 14, 13, &["`processes`", "from 1"]);
    let err = team_err(&with_head("\n[sandbox]\nmemory_mb = 17592186044416\n"));
    assert!(err.message().contains("`memory_mb`"), "{err}");
    let err = team_err(&with_head("\n[sandbox]\nnetwork = \"yes\"\n"));
    assert!(err.message().contains("bool"), "{err}");
    let err = team_err(&with_head("\n[sandbox]\nfilesystem = \"open\"\n"));
    assert!(err.message().contains("filesystem"), "{err}");
}

#[test]
fn sandbox_read_only_paths_must_be_absolute() {
    let file = team(&with_head("\n[sandbox]\nread_only = [\"/opt/toolchain\"]\n"));
    assert_eq!(file.sandbox.read_only, [std::path::PathBuf::from("/opt/toolchain")]);
    assert_eq!(file.sandbox.sandbox().read_only(), [std::path::PathBuf::from("/opt/toolchain")]);
    let err = team_err(&with_head("\n[sandbox]\nread_only = [\"toolchain\"]\n"));
    assert_at(&err, 14, 14, &["`read_only`", "not an absolute path"]);
}

#[test]
fn sandbox_env_names_variables_and_never_strata_s_secrets() {
    let file = team(&with_head("\n[sandbox]\nenv = [\"CARGO_HOME\"]\n"));
    assert_eq!(file.sandbox.env, ["CARGO_HOME"]);
    let err = team_err(&with_head("\n[sandbox]\nenv = [\"CARGO-HOME\"]\n"));
    assert_at(&err, 14, 8, &["`env`", "not an environment variable's name"]);
    for secret in agent_core::secrets::ENV_VARS {
        let err = team_err(&with_head(&format!("\n[sandbox]\nenv = [\"{secret}\"]\n")));
        assert_at(&err, 14, 8, &["`env`", secret, "strata's own secrets"]);
    }
}

// ---------------------------------------------------------------------------------------------
// [approvals]

#[test]
fn approvals_name_the_humans_and_whether_plans_need_one() {
    let file = team(&with_head("\n[approvals]\nhumans = [\"alice\", \"bob-2\"]\nplans = true\n"));
    assert_eq!(file.spec.approvals.humans, ["alice", "bob-2"]);
    assert!(file.spec.approvals.plans);
    let file = team(&with_head("\n[approvals]\nhumans = [\"alice\"]\n"));
    assert!(!file.spec.approvals.plans, "left out: plans need no human");
    assert_eq!(team(HEAD).spec.approvals, agent_pool::Approvals::default());
    let docs = include_str!("lib.rs");
    for field in ["humans", "plans"] {
        assert!(docs.contains(&format!("//! {field} = ")), "{field} is documented");
    }
}

#[test]
fn approvals_refuse_unknown_keys_bad_names_and_plans_without_humans() {
    let err = team_err(&with_head("\n[approvals]\nsigners = [\"alice\"]\n"));
    assert!(err.message().contains("signers"), "{err}");
    let err = team_err(&with_head("\n[approvals]\nhumans = [\"alice\", \"bad name\"]\n"));
    assert_at(&err, 14, 20, &["[approvals] `humans`", "`bad name` cannot name a human"]);
    let err = team_err(&with_head("\n[approvals]\nhumans = [\"human:eve\"]\n"));
    assert_at(&err, 14, 11, &["human:eve"]);
    let err = team_err(&with_head("\n[approvals]\nhumans = [\"\"]\n"));
    assert_at(&err, 14, 11, &["must not be empty"]);
    let err = team_err(&with_head("\n[approvals]\nhumans = [\"al\", \"al\"]\n"));
    assert_at(&err, 14, 17, &["`al` twice"]);
    let err = team_err(&with_head("\n[approvals]\nplans = true\n"));
    assert_at(&err, 14, 9, &["`plans = true` needs someone to sign", "humans"]);
    // Written with a dotted key: the error still points at the value.
    let err = team_err(&format!("approvals.humans = [\"a b\"]\n{}", text(HEAD)));
    assert_at(&err, 1, 21, &["`a b` cannot name a human"]);
}

// ---------------------------------------------------------------------------------------------
// OODA executors

const OODA: &str = r#"
[[bottom]]
id = "ooda-1"
supervisor = "mid-a"
tools = ["read_file", "write_file"]
[bottom.ooda]
role = "Editor"
goal = "keep the docs clear"
self_modification_enabled = true
self_modification_level = 4
"#;

#[test]
fn an_ooda_executor_reads_its_config_with_the_executors_tools_by_default() {
    let file = team(&with_head(OODA));
    let ooda = file.spec.agents.iter().find(|a| a.config.id.as_str() == "ooda-1").unwrap();
    let RoleSpec::Bottom(b) = &ooda.role else { panic!("{ooda:?}") };
    let config = b.ooda.as_deref().expect("an OODA configuration");
    assert_eq!((config.role.as_str(), config.goal.as_str()), ("Editor", "keep the docs clear"));
    assert_eq!(config.tools, ["read_file", "write_file"]);
    assert_eq!(config.self_modification_level.get(), 4);
    assert_eq!(config.max_iterations, 10, "the default");
    assert_eq!(
        (config.max_retries, config.turn_timeout_ms, config.temperature),
        (None, None, None)
    );
    // Its own runtime settings, as a hot-swapped genome sets them.
    let tuned = team(&with_head(&format!(
        "{OODA}max_retries = 5\nturn_timeout_ms = 9000\ntemperature = 0.5\n"
    )));
    let ooda = tuned.spec.agents.iter().find(|a| a.config.id.as_str() == "ooda-1").unwrap();
    let RoleSpec::Bottom(b) = &ooda.role else { panic!("{ooda:?}") };
    let config = b.ooda.as_deref().expect("an OODA configuration");
    assert_eq!(
        (config.max_retries, config.turn_timeout_ms, config.temperature),
        (Some(5), Some(9000), Some(0.5))
    );
}

#[test]
fn a_bad_ooda_config_points_at_it() {
    let bad = |extra: &str| team_err(&with_head(&format!("{OODA}{extra}\n")));
    let err = bad("safety_level = 9");
    assert!(err.message().contains("safety level 9 does not exist"), "{err}");
    let err = bad("tools = [\"shell\"]");
    assert!(err.message().contains("`shell` is not one of the executor's `tools`"), "{err}");
    let err = bad("max_iterations = 0");
    assert!(err.message().contains("max_iterations"), "{err}");
    let err = bad("turn_timeout_ms = 0");
    assert!(err.message().contains("turn_timeout_ms"), "{err}");
    let err = bad("temperature = 3.0");
    assert!(err.message().contains("temperature"), "{err}");
    let err = bad("sandbox_enabled = false");
    assert!(err.message().contains("sandbox"), "{err}");
    let both = OODA.replace(
        "tools = [\"read_file\", \"write_file\"]",
        "tools = [\"read_file\"]\nkind = \"research_agent\"",
    );
    let err = team_err(&with_head(&both));
    assert!(err.message().contains("either an executor `kind` or an `ooda` loop"), "{err}");
    let err = team_err(&with_head(&OODA.replace("role = \"Editor\"\n", "")));
    assert!(err.message().contains("role"), "{err}");
}

#[test]
fn a_plan_step_may_name_an_ooda_call_only_for_an_ooda_executor() {
    let team = team(&with_head(&format!(
        "{OODA}\n[[bottom]]\nid = \"plain\"\nsupervisor = \"mid-a\"\ntools = [\"read_file\"]\n"
    )));
    let step = |agent: &str, args: &str| {
        format!(
            "id = \"t\"\ngoal = \"g\"\n\n[[steps]]\nid = \"s\"\nagent = \"{agent}\"\ntool = \"modify_self\"\nargs = {args}\n"
        )
    };
    let good = r#"{ modification_type = "prompt", target = "prompt", change = { text = "x" }, safety_level = 4 }"#;
    let task = parse_plan(
        Path::new("plan.toml"),
        &step("ooda-1", good),
        &team.spec,
        &ToolRegistry::with_builtins(),
    )
    .unwrap();
    assert_eq!(task.steps[0].tool, "modify_self");
    assert_eq!(task.steps[0].args["safety_level"], 4);
    let err = plan_err_for(&team.spec, &step("plain", good));
    assert_at(&err, 7, 8, &["`modify_self` is a call of an OODA agent", "`plain` is not one"]);
    let bad = r#"{ modification_type = "firmware", target = "x", change = {}, safety_level = 2 }"#;
    let err = plan_err_for(&team.spec, &step("ooda-1", bad));
    assert_at(&err, 7, 8, &["unknown modification type `firmware`"]);
}

#[test]
fn streaming_is_on_unless_a_reasoner_table_turns_it_off_and_agents_inherit_it() {
    let t = team(&format!(
        "[reasoner]\nkind = \"openai\"\nmodel = \"m\"\nstream = false\n\n{ONE_POWER}reasoner = {{ model = \"n\" }}\n"
    ));
    assert_eq!(t.default_reasoner.stream, Some(false));
    let own = &t.agent_reasoners[&agent_state::AgentId::new("top-a")];
    assert_eq!(own.stream, Some(false), "inherited from [reasoner]");
    let t = team(&format!(
        "{ONE_POWER}reasoner = {{ kind = \"openai\", model = \"n\", stream = true }}\n"
    ));
    assert_eq!(t.default_reasoner.stream, None, "not said: the default, on");
    assert_eq!(t.agent_reasoners[&agent_state::AgentId::new("top-a")].stream, Some(true));
    let err = team_err(&format!("[reasoner]\nstream = \"yes\"\n\n{ONE_POWER}"));
    assert!(err.to_string().starts_with("team.toml:2:"), "{err}");
}

/// A role that may spawn another holding a capability or the network it lacks is refused at
/// load, at the `enabled_agents` entry (file:line:col).
#[test]
fn a_spawn_role_holding_more_than_its_spawner_is_refused_at_load() {
    let spawner = |parent: &str, child: &str| {
        format!(
            r#"
[[roles]]
name = "lead"
layer = "mid"
description = "leads"
{parent}
enabled_agents = ["helper"]

[[roles]]
name = "helper"
{child}
"#
        )
    };
    let refused = |parent: &str, child: &str, what: &str| {
        let text = with_head(&spawner(parent, child));
        let err = parse_team(Path::new("team.toml"), &text, &ToolRegistry::with_builtins())
            .expect_err("more than the spawner holds is refused");
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("may not spawn `helper`: it would hold {what}")),
            "{shown}"
        );
        let line = text.lines().position(|l| l.contains("enabled_agents = [\"helper\"]")).unwrap();
        assert!(shown.contains(&format!("team.toml:{}:", line + 1)), "{shown}");
    };
    const EXECUTOR: &str = "layer = \"bottom\"\ntools = [\"read_file\"]";
    const SUB_LEAD: &str = "layer = \"mid\"\ndescription = \"sub\"";
    // An executor with the network, spawned by a lead without it.
    refused("", &format!("{EXECUTOR}\nnetwork = true"), "the network");
    // A sub-lead with a capability its spawning lead does not hold.
    refused(
        "capabilities = [\"plan\", \"coordinate\", \"delegate\"]",
        &format!("{SUB_LEAD}\ncapabilities = [\"plan\", \"review\", \"delegate\"]"),
        "the capability `review`",
    );
    // As much as the spawner, or less, loads.
    let networked = format!("{EXECUTOR}\nnetwork = true");
    for (parent, child) in [("", EXECUTOR), ("network = true", networked.as_str()), ("", SUB_LEAD)]
    {
        let text = with_head(&spawner(parent, child));
        parse_team(Path::new("team.toml"), &text, &ToolRegistry::with_builtins()).unwrap();
    }
}

#[test]
fn a_signer_without_review_is_refused_at_load() {
    let file = |top: &str| {
        format!(
            r#"
[[top]]
id = "top-a"
power_type = "power_a"

[[top]]
id = "top-b"
power_type = "power_b"
{top}

[[mid]]
id = "mid-a"
domain = "docs"
supervisor = "top-a"
"#
        )
    };
    // Signature authority (the default, ["plan"], or named) without `review`: what it must
    // sign would stay pending forever.
    for top in [
        "capabilities = [\"plan\", \"arbitrate\"]",
        "signature_authority = [\"plan\", \"budget\"]\ncapabilities = [\"plan\", \"arbitrate\"]",
    ] {
        let text = file(top);
        let err = parse_team(Path::new("team.toml"), &text, &ToolRegistry::with_builtins())
            .expect_err("a signer that may not review is refused");
        let shown = err.to_string();
        let line = text.lines().position(|l| l.starts_with("capabilities = ")).unwrap();
        assert!(shown.starts_with(&format!("team.toml:{}:", line + 1)), "{shown}");
        assert!(
            shown.contains("top power `top-b` has signature authority (plan")
                && shown.contains("not the capability `review`")
                && shown.contains("add \"review\" to its `capabilities`, or drop the authority"),
            "{shown}"
        );
    }
    // With `review`, or without authority, it loads.
    for top in [
        "capabilities = [\"plan\", \"review\", \"arbitrate\"]",
        "signature_authority = []\ncapabilities = [\"plan\", \"arbitrate\"]",
        "",
    ] {
        parse_team(Path::new("team.toml"), &file(top), &ToolRegistry::with_builtins()).unwrap();
    }
}

#[test]
fn a_lead_role_without_a_capability_its_executor_role_holds_is_refused_at_load() {
    // Across layers: the lead may not reflect; the executor role, by default, does.
    let text = with_head(
        r#"
[[roles]]
name = "lead"
layer = "mid"
capabilities = ["plan", "review", "coordinate", "delegate"]
enabled_agents = ["helper"]

[[roles]]
name = "helper"
layer = "bottom"
tools = ["read_file"]
"#,
    );
    let err = parse_team(Path::new("team.toml"), &text, &ToolRegistry::with_builtins())
        .expect_err("a capability the spawner's layer may hold and it lacks is refused");
    let shown = err.to_string();
    let line = text.lines().position(|l| l.contains("enabled_agents = [\"helper\"]")).unwrap();
    assert!(shown.starts_with(&format!("team.toml:{}:", line + 1)), "{shown}");
    assert!(shown.contains("it would hold the capability `reflect`"), "{shown}");
}

#[test]
fn the_team_file_network_settings_reach_the_spawner() {
    let text = with_head(
        r#"
[sandbox]
network = false

[[roles]]
name = "lead"
layer = "mid"
network = true
enabled_agents = ["helper"]

[[roles]]
name = "helper"
layer = "bottom"
tools = ["read_file"]
network = true
"#,
    );
    let team = parse_team(Path::new("team.toml"), &text, &ToolRegistry::with_builtins()).unwrap();
    let grants = &team.spec.network;
    assert!(!grants.default);
    assert!(grants.of_role("lead") && grants.of_role("helper"));
    assert!(!grants.of(&AgentId::new("mid-a"), None));
}
