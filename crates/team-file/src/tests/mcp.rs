//! `[[mcp_servers]]`: declarations read alone and with the team, their mistakes at the value,
//! executors and roles listing the servers' tools (checked against what the servers offer), and
//! a stored team file read without starting them.

use std::sync::Arc;

use agent_core::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;

const SERVERS: &str = r#"[[mcp_servers]]
name = "notes"
command = "python3"
args = ["notes_server.py", "--quiet"]
env = { NOTES_DIR = "notes" }

[[mcp_servers]]
name = "web"
url = "http://127.0.0.1:8931/mcp"
"#;

/// A team whose executor lists `tools` and whose role lists `role_tools`.
fn with_tools(tools: &str) -> String {
    format!(
        "{SERVERS}\n[[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n\n\
         [[mid]]\nid = \"mid-a\"\ndomain = \"notes\"\nsupervisor = \"top-a\"\n\n\
         [[bottom]]\nid = \"e-1\"\nsupervisor = \"mid-a\"\ntools = {tools}\n"
    )
}

/// What an MCP server's tool looks like in the registry.
struct Served(&'static str, Value);

#[async_trait]
impl Tool for Served {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "served by an MCP server"
    }
    fn schema(&self) -> &Value {
        &self.1
    }
    fn has_side_effects(&self) -> bool {
        true
    }
    fn foreign_schema(&self) -> bool {
        true
    }
    async fn call(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput { success: true, output: String::new(), data: Value::Null })
    }
}

/// The built-in tools and `mcp__notes__append_line`, as after the servers started.
fn started() -> ToolRegistry {
    let mut tools = ToolRegistry::with_builtins();
    let schema = json!({
        "type": "object",
        "properties": { "line": { "type": "string" } },
        "required": ["line"],
        "$defs": {},
    });
    tools.register(Arc::new(Served("mcp__notes__append_line", schema))).unwrap();
    tools
}

fn parse(text: &str, tools: &ToolRegistry) -> Result<TeamFile, FileError> {
    parse_team(Path::new("team.toml"), text, tools)
}

#[test]
fn servers_are_declared_with_a_command_or_a_url() {
    let servers = mcp_servers(Path::new("team.toml"), SERVERS).unwrap();
    assert_eq!(
        servers,
        [
            McpServerDecl {
                name: "notes".into(),
                transport: McpTransport::Stdio {
                    command: "python3".into(),
                    args: vec!["notes_server.py".into(), "--quiet".into()],
                    env: [("NOTES_DIR".to_owned(), "notes".to_owned())].into(),
                    pass_env: Vec::new(),
                    sandboxed: true,
                    network: false,
                },
            },
            McpServerDecl {
                name: "web".into(),
                transport: McpTransport::Http { url: "http://127.0.0.1:8931/mcp".into() },
            },
        ]
    );
    let t = parse(&with_tools(r#"["read_file", "mcp__notes__append_line"]"#), &started()).unwrap();
    assert_eq!(t.mcp_servers, servers);
    let executor = t.spec.agents.iter().find(|a| a.config.id.as_str() == "e-1").unwrap();
    match &executor.role {
        RoleSpec::Bottom(b) => assert_eq!(&b.tools[..], ["read_file", "mcp__notes__append_line"]),
        other => panic!("expected an executor, got {other:?}"),
    }
}

#[test]
fn declaration_mistakes_are_pointed_at() {
    let check = |text: &str, expected: &str| {
        let err = mcp_servers(Path::new("team.toml"), text).unwrap_err().to_string();
        assert_eq!(err, expected, "{text}");
    };
    check(
        "[[mcp_servers]]\nname = \"a__b\"\ncommand = \"x\"\n",
        "team.toml:2:8: `name`: an MCP server's name may not hold `__` or end with `_` (its tools are `mcp__<server>__<tool>`)",
    );
    check(
        "[[mcp_servers]]\nname = \"a\"\ncommand = \"x\"\n[[mcp_servers]]\nname = \"a\"\nurl = \"http://h/mcp\"\n",
        "team.toml:5:8: two MCP servers are named `a`; give each a unique name",
    );
    check(
        "[[mcp_servers]]\nname = \"a\"\n",
        "team.toml:2:8: MCP server `a` needs a `command` (with `args`: a program speaking MCP on stdio) or a `url` (a streamable-HTTP endpoint)",
    );
    check(
        "[[mcp_servers]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h/mcp\"\n",
        "team.toml:4:7: an MCP server has a `command` (started by the run) or a `url` (already running), not both",
    );
    check(
        "[[mcp_servers]]\nname = \"a\"\nurl = \"https://h/mcp\"\n",
        "team.toml:3:7: `url`: only plain `http://` endpoints are supported (no TLS); reach an HTTPS server through a local proxy",
    );
    check(
        "[[mcp_servers]]\nname = \"a\"\ncommand = \"  \"\n",
        "team.toml:3:11: `command` is empty",
    );
    let err = mcp_servers(Path::new("team.toml"), "[[mcp_servers]]\nname = \"a\"\ncmd = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("team.toml:3:1: unknown field `cmd`"), "{err}");
}

#[test]
fn a_listed_tool_the_server_does_not_offer_is_an_error_at_its_name() {
    let err = parse(&with_tools(r#"["read_file", "mcp__notes__delete_all"]"#), &started())
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with(
            ":23:23: MCP server `notes` does not offer a tool `delete_all` (it offers: mcp__notes__append_line)"
        ),
        "{err}"
    );
    let err = parse(&with_tools(r#"["mcp__other__x"]"#), &started()).unwrap_err().to_string();
    assert!(
        err.contains(
            "unknown tool `mcp__other__x`: no MCP server `other` is declared in [[mcp_servers]], or it offers no tools"
        ),
        "{err}"
    );
}

#[test]
fn a_stored_team_file_is_read_without_starting_its_servers() {
    let text = with_tools(r#"["read_file", "mcp__notes__append_line", "mcp__web__search"]"#);
    let builtins = ToolRegistry::with_builtins();
    assert!(parse(&text, &builtins).is_err(), "a run needs the servers' tools");
    let t = parse_stored_team(Path::new("team.toml"), &text, &builtins).unwrap();
    assert_eq!(t.mcp_servers.len(), 2);
    // A server the file does not declare is still refused.
    let text = with_tools(r#"["mcp__nowhere__x"]"#);
    assert!(parse_stored_team(Path::new("team.toml"), &text, &builtins).is_err());
}

#[test]
fn a_plan_step_names_an_mcp_tool_and_its_arguments_are_checked() {
    let tools = started();
    let t = parse(&with_tools(r#"["mcp__notes__append_line"]"#), &tools).unwrap();
    let plan = "id = \"t\"\ngoal = \"g\"\n\n[[steps]]\nid = \"s\"\ntool = \"mcp__notes__append_line\"\nargs = { line = \"hello\" }\n";
    let task = parse_plan(Path::new("plan.toml"), plan, &t.spec, &tools).unwrap();
    assert_eq!(task.steps[0].tool, "mcp__notes__append_line");
    let bad = plan.replace("line = \"hello\"", "line = 3");
    let err = parse_plan(Path::new("plan.toml"), &bad, &t.spec, &tools).unwrap_err().to_string();
    assert!(err.contains("`line`: expected string, found integer"), "{err}");
}

/// The sandbox fields of a started server: explicit opt-out and network, names passed; a
/// default entry is sandboxed without network. Strata's own secrets and names that are not
/// variable names are refused at their place.
#[test]
fn a_started_server_is_sandboxed_unless_it_says_otherwise() {
    let text = "[[mcp_servers]]\nname = \"a\"\ncommand = \"x\"\n\n\
                [[mcp_servers]]\nname = \"b\"\ncommand = \"x\"\nsandbox = false\nnetwork = true\npass_env = [\"LC_ALL\"]\n";
    let servers = mcp_servers(Path::new("team.toml"), text).unwrap();
    let fields = |i: usize| match &servers[i].transport {
        McpTransport::Stdio { sandboxed, network, pass_env, .. } => {
            (*sandboxed, *network, pass_env.clone())
        }
        McpTransport::Http { .. } => panic!("stdio"),
    };
    assert_eq!(fields(0), (true, false, vec![]));
    assert_eq!(fields(1), (false, true, vec!["LC_ALL".to_owned()]));
    for (bad, said) in [
        (
            "pass_env = [\"STRATA_SERVE_TOKEN\"]",
            "team.toml:4:13: `pass_env`: `STRATA_SERVE_TOKEN` is one of strata's own secrets",
        ),
        (
            "pass_env = [\"A-B\"]",
            "team.toml:4:13: `pass_env`: `A-B` is not an environment variable name",
        ),
    ] {
        let text = format!("[[mcp_servers]]\nname = \"a\"\ncommand = \"x\"\n{bad}\n");
        let err = mcp_servers(Path::new("team.toml"), &text).unwrap_err().to_string();
        assert!(err.starts_with(said), "{err}");
    }
}
