//! agent-mcp against a real MCP server: `server.py` beside this file, written with the `mcp`
//! package from PyPI, run by the Python of the virtual environment `.ci/mcp-setup` makes
//! (`STRATA_MCP_PYTHON`, else `${XDG_CACHE_HOME:-$HOME/.cache}/strata/mcp/venv/bin/python`).
//! A missing environment fails the tests, saying how to make it.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_core::tools::{Sandbox, ToolContext, ToolError, ToolRegistry};
use agent_mcp::{McpError, McpLaunch, McpServerSpec, McpServers};
use serde_json::json;

/// The Python that has the `mcp` package; panics, saying how to install it, when there is none.
fn python() -> PathBuf {
    let python = match std::env::var_os("STRATA_MCP_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .expect("neither XDG_CACHE_HOME nor HOME is set");
            cache.join("strata/mcp/venv/bin/python")
        }
    };
    assert!(
        python.is_file(),
        "no Python with the `mcp` package at {}: run `bash .ci/mcp-setup` (CI's setup does), \
         or set STRATA_MCP_PYTHON to one",
        python.display()
    );
    python
}

fn server_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/server.py").display().to_string()
}

fn spec(extra: &[&str]) -> McpServerSpec {
    let mut args = vec![server_script()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    McpServerSpec::stdio("t", python().display().to_string(), args)
}

/// Servers started without the sandbox, in a scratch workspace (the sandboxed start has tests
/// of its own below).
fn unsandboxed() -> McpLaunch {
    McpLaunch::unsandboxed(std::env::temp_dir())
}

async fn start() -> (McpServers, ToolRegistry) {
    let servers =
        McpServers::start(&[spec(&[])], &unsandboxed(), Duration::from_secs(60)).await.unwrap();
    let mut tools = ToolRegistry::with_builtins();
    servers.register(&mut tools).unwrap();
    (servers, tools)
}

fn remote(err: ToolError) -> (String, McpError) {
    match err {
        ToolError::Remote { server, source, .. } => {
            (server, *source.downcast::<McpError>().expect("an McpError"))
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_at_start_with_their_schemas_and_annotations() {
    let (servers, tools) = start().await;
    let mut offered: Vec<&str> = servers.offered()["t"].clone();
    offered.sort_unstable();
    assert_eq!(
        offered,
        [
            "mcp__t__add",
            "mcp__t__append_line",
            "mcp__t__append_then_sleep",
            "mcp__t__crash",
            "mcp__t__echo",
            "mcp__t__effect_then_sleep",
            "mcp__t__env",
            "mcp__t__fail",
            "mcp__t__huge",
            "mcp__t__read_path",
            "mcp__t__slow"
        ]
    );
    let effects = |name: &str| {
        let tool = tools.get(name).unwrap();
        (tool.has_side_effects(), tool.idempotent())
    };
    assert_eq!(effects("mcp__t__echo"), (false, true), "readOnlyHint: no side effects");
    assert_eq!(effects("mcp__t__append_line"), (true, false), "journaled, never repeated");
    assert_eq!(effects("mcp__t__crash"), (true, false), "no annotations: side effects");
    let add = tools.get("mcp__t__add").unwrap();
    assert_eq!(add.description(), "Adds two integers.");
    assert_eq!(add.schema()["properties"]["b"]["exclusiveMinimum"], json!(-1000));
    assert!(add.foreign_schema());

    // The tool whose schema is not JSON Schema is refused, naming server and tool; the
    // others are offered.
    let refused = servers.refusal("mcp__t__bad_schema").expect("bad_schema is refused");
    assert!(
        matches!(refused, McpError::InvalidSchema { server, tool, problems }
            if server == "t" && tool == "bad_schema" && problems.len() == 2),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("unknown type \"strng\""), "{refused}");
    assert!(tools.get("mcp__t__bad_schema").is_none());
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_through_the_registry_and_map_results_and_tool_errors() {
    let (servers, tools) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();

    let out = tools.call(&ctx, "mcp__t__echo", json!({ "text": "hello" })).await.unwrap();
    assert!(out.success);
    assert_eq!(out.output, "hello");
    assert_eq!(out.data, json!({ "server": "t", "tool": "echo" }));
    let out = tools.call(&ctx, "mcp__t__add", json!({ "a": 2, "b": 3 })).await.unwrap();
    assert_eq!(out.output, "5");

    // The registry checks what it knows of the schema before the server sees the call.
    let err = tools.call(&ctx, "mcp__t__add", json!({ "a": "2" })).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { problems, .. } if problems.len() == 2),
        "{err:?}"
    );

    // isError: a failed output, not an error.
    let out = tools.call(&ctx, "mcp__t__fail", json!({})).await.unwrap();
    assert!(!out.success);
    assert_eq!(out.output, "this tool always fails");

    // A side effect, once per call.
    let file = dir.path().join("lines.txt");
    let path = file.display().to_string();
    for line in ["one", "two"] {
        let out = tools
            .call(&ctx, "mcp__t__append_line", json!({ "path": path, "line": line }))
            .await
            .unwrap();
        assert!(out.success, "{out:?}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\ntwo\n");
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_crashes_mid_call_fails_the_call_with_its_name_and_the_caller_goes_on() {
    let (servers, tools) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    let err = tools.call(&ctx, "mcp__t__crash", json!({})).await.unwrap_err();
    assert!(!err.is_transient());
    assert!(err.to_string().starts_with("tool `mcp__t__crash`: MCP server `t` is gone"), "{err}");
    let (server, mcp) = remote(err);
    assert_eq!(server, "t");
    match mcp {
        McpError::ServerGone { server, tool, stderr } => {
            assert_eq!((server.as_str(), tool.as_str()), ("t", "crash"));
            assert!(stderr.contains("crashing on purpose"), "{stderr:?}");
        }
        other => panic!("expected ServerGone, got {other:?}"),
    }
    // Later calls to the dead server fail the same way; the built-in tools still work.
    let (_, mcp) =
        remote(tools.call(&ctx, "mcp__t__echo", json!({ "text": "x" })).await.unwrap_err());
    assert!(matches!(mcp, McpError::ServerGone { .. }), "{mcp:?}");
    tools.call(&ctx, "write_file", json!({ "path": "a", "content": "b" })).await.unwrap();
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_tool_limit_times_out_and_the_server_keeps_serving() {
    let (servers, tools) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap().with_tool_timeout(Duration::from_millis(300));
    let err = tools.call(&ctx, "mcp__t__slow", json!({ "seconds": 30 })).await.unwrap_err();
    assert!(matches!(err, ToolError::Timeout { ref tool, .. } if tool == "mcp__t__slow"), "{err}");
    let out = tools.call(&ctx, "mcp__t__echo", json!({ "text": "still here" })).await.unwrap();
    assert_eq!(out.output, "still here");
    servers.shutdown().await;
}

/// Issue 31, item 4: a tool that is neither read-only nor idempotent, past the tool limit, is
/// cancelled through the protocol (the server sees `notifications/cancelled` and stops the
/// call) and its outcome is unknown: a permanent error, so nothing retries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_effecting_call_past_the_tool_limit_is_cancelled_and_its_outcome_unknown() {
    let (servers, tools) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap().with_tool_timeout(Duration::from_millis(500));
    let path = dir.path().join("effects.txt");
    let args = json!({ "path": path.display().to_string(), "line": "ran", "seconds": 60 });
    let err = tools.call(&ctx, "mcp__t__effect_then_sleep", args).await.unwrap_err();
    assert!(
        matches!(err, ToolError::OutcomeUnknown { ref tool, after_ms: 500, cancelled: true }
            if tool == "mcp__t__effect_then_sleep"),
        "{err:?}"
    );
    assert!(!err.is_transient(), "never retried automatically");
    assert!(err.to_string().contains("may or may not have had its effect"), "{err}");
    // The server got the cancellation: its call stopped sleeping and said so.
    let cancelled = dir.path().join("effects.txt.cancelled");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cancelled.exists() {
        assert!(std::time::Instant::now() < deadline, "the server never saw the cancellation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "ran\n", "ran once");
    assert_eq!(std::fs::read_to_string(&cancelled).unwrap(), "cancelled\n");
    // The connection is fine: the next call is answered.
    let out = tools.call(&ctx, "mcp__t__echo", json!({ "text": "still here" })).await.unwrap();
    assert_eq!(out.output, "still here");
    servers.shutdown().await;
}

/// The peak resident memory of this process (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Issue 31, item 4: a 200 MB answer is read with bounded memory (this process's peak stays
/// far under the answer's size, within a bound derived from the message limit), its text
/// capped like a `shell` stream, and the whole answer kept as a blob named by its SHA-256.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_answer_is_capped_with_bounded_memory_and_kept_as_a_blob() {
    let results = tempfile::tempdir().unwrap();
    let launch = unsandboxed().with_results(results.path().join("mcp-results"));
    let servers = McpServers::start(&[spec(&[])], &launch, Duration::from_secs(60)).await.unwrap();
    let mut tools = ToolRegistry::with_builtins();
    servers.register(&mut tools).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();

    // A text over the result cap but under the message limit: capped, kept as a blob.
    let out = tools.call(&ctx, "mcp__t__huge", json!({ "bytes": 100_000 })).await.unwrap();
    assert!(out.output.len() < agent_mcp::MAX_RESULT_BYTES + 400, "{}", out.output.len());
    assert!(out.output.contains("[truncated: the answer was 100000 bytes"), "{:.200}", out.output);
    assert_eq!(out.data["truncated"], true);
    let blob = std::fs::read(out.data["blob_path"].as_str().unwrap()).unwrap();
    assert_eq!(blob.len(), 100_000, "the whole text is kept");

    let before = peak_rss();
    let size: u64 = 200 * 1024 * 1024;
    let out = tools.call(&ctx, "mcp__t__huge", json!({ "bytes": size })).await.unwrap();
    let after = peak_rss();
    assert!(out.success);
    assert!(out.output.len() < agent_mcp::MAX_RESULT_BYTES + 400, "{}", out.output.len());
    assert!(out.output.starts_with("0123456789abcdef"), "{:.100}", out.output);
    assert!(out.output.contains("over the 65536-byte limit; kept whole as blob sha256:"));
    let bytes = out.data["bytes"].as_u64().unwrap();
    assert!(bytes > size, "the whole message's size: {bytes}");
    let kept = std::path::PathBuf::from(out.data["blob_path"].as_str().unwrap());
    assert_eq!(std::fs::metadata(&kept).unwrap().len(), bytes, "the whole message is kept");
    assert!(kept.starts_with(results.path()));
    // Memory: the answer is never held whole. A generous bound: 16 messages at the limit.
    let bound = 16 * agent_mcp::MAX_MESSAGE_BYTES as u64;
    assert!(
        after.saturating_sub(before) < bound,
        "the peak grew by {} MiB reading a {} MiB answer (bound {} MiB)",
        after.saturating_sub(before) >> 20,
        size >> 20,
        bound >> 20
    );
    // The connection goes on.
    let out = tools.call(&ctx, "mcp__t__echo", json!({ "text": "next" })).await.unwrap();
    assert_eq!(out.output, "next");
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_to_start_is_a_typed_error_naming_it() {
    let err =
        McpServers::start(&[spec(&["--exit-at-start"])], &unsandboxed(), Duration::from_secs(60))
            .await
            .unwrap_err();
    match &err {
        McpError::Start { server, stage, stderr, .. } => {
            assert_eq!((server.as_str(), *stage), ("t", "initialize"));
            assert!(stderr.contains("refuses to start"), "{stderr:?}");
        }
        other => panic!("expected Start, got {other:?}"),
    }
    assert!(err.to_string().starts_with("MCP server `t` failed to start"), "{err}");

    let missing = McpServerSpec::stdio("nope", "/nonexistent/strata-mcp-server", ["x"]);
    let err =
        McpServers::start(&[missing], &unsandboxed(), Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(&err, McpError::Spawn { server, .. } if server == "nope"), "{err:?}");
    assert!(
        err.to_string().starts_with(
            "MCP server `nope` failed to start: cannot run `/nonexistent/strata-mcp-server`"
        ),
        "{err}"
    );

    let twice = [spec(&[]), spec(&[])];
    let err = McpServers::start(&twice, &unsandboxed(), Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, McpError::DuplicateServer { server } if server == "t"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_serves_the_same_tools() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut child = tokio::process::Command::new(python())
        .arg(server_script())
        .args(["--http", &port.to_string()])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait (bounded) until it listens.
    let mut up = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the HTTP server did not listen on port {port} within 10 s");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let servers = McpServers::start(
        &[McpServerSpec::http("web", url)],
        &unsandboxed(),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(servers.servers()[0].sandboxed(), None, "not a process Strata starts");
    let mut tools = ToolRegistry::new();
    servers.register(&mut tools).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    let out = tools.call(&ctx, "mcp__web__add", json!({ "a": 40, "b": 2 })).await.unwrap();
    assert_eq!(out.output, "42");
    servers.shutdown().await;
    child.kill().await.unwrap();
}

/// What the server `t` reports of itself: its environment, working directory and pid.
async fn env_of(tools: &ToolRegistry) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    let out = tools.call(&ctx, "mcp__t__env", json!({})).await.unwrap();
    assert!(out.success, "{out:?}");
    serde_json::from_str(&out.output).unwrap()
}

/// Outside the sandbox (an opt-out) a server still gets only the minimal environment, the
/// variables its declaration passes by name and its own `env`, and runs in the workspace.
/// (Strata's secrets are kept from it even when named: the CLI test sets them in Strata's
/// environment; here the test's own environment has `HOME` and `PATH`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsandboxed_server_gets_the_minimal_environment_in_the_workspace() {
    let workspace = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(workspace.path()).unwrap();
    let spec = spec(&[])
        .sandboxed(false)
        .with_env("MCP_OWN", "own value")
        .pass_env("CARGO_PKG_NAME")
        .pass_env("STRATA_SERVE_TOKEN");
    let launch = McpLaunch::unsandboxed(&workspace);
    let servers = McpServers::start(&[spec], &launch, Duration::from_secs(60)).await.unwrap();
    assert_eq!(servers.servers()[0].sandboxed(), Some(false));
    let mut tools = ToolRegistry::new();
    servers.register(&mut tools).unwrap();
    let seen = env_of(&tools).await;
    assert_eq!(seen["cwd"], json!(workspace.display().to_string()));
    let env = seen["env"].as_object().unwrap();
    assert_eq!(env["MCP_OWN"], json!("own value"));
    assert_eq!(env["PATH"], json!(std::env::var("PATH").unwrap()));
    // Cargo sets CARGO_PKG_NAME for the test; the declaration passes it by name.
    assert_eq!(
        env.get("CARGO_PKG_NAME"),
        std::env::var("CARGO_PKG_NAME").ok().map(|v| json!(v)).as_ref()
    );
    let mut names: Vec<&str> = env.keys().map(String::as_str).collect();
    // Python adds nothing of Strata's; what it may set itself (LC_CTYPE) is not Strata's.
    names.retain(|n| !["LC_CTYPE"].contains(n));
    let allowed = ["PATH", "LANG", "TERM", "HOME", "MCP_OWN", "CARGO_PKG_NAME"];
    assert!(names.iter().all(|n| allowed.contains(n)), "only the minimal environment: {names:?}");
    // Cargo's own variables (CARGO_MANIFEST_DIR, RUST_*...) that the test process has do not
    // reach it.
    assert!(!env.contains_key("CARGO_MANIFEST_DIR"), "{names:?}");
    servers.shutdown().await;
}

/// The environment a server's command gets, exactly: the minimal one, those passed by name
/// except Strata's own secrets, then the declaration's own; the same with the sandbox
/// (`HOME` is then the sandbox's own `/tmp`).
#[test]
fn the_server_environment_is_minimal_and_never_holds_strata_secrets() {
    let own = std::collections::BTreeMap::from([("MODE".to_owned(), "fast".to_owned())]);
    let pass: Vec<String> =
        ["OPENAI_API_KEY", "STRATA_SERVE_TOKEN", "CARGO_PKG_NAME", "UNSET_HERE"]
            .map(str::to_owned)
            .to_vec();
    for (launch, home) in [
        (McpLaunch::unsandboxed("/tmp"), std::env::var("HOME").unwrap()),
        (McpLaunch::new("/tmp", Sandbox::new()), "/tmp".to_owned()),
    ] {
        let env = launch.server_env("python3", &own, &pass, true);
        let mut names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        let mut want = vec!["CARGO_PKG_NAME", "HOME", "MODE", "PATH"];
        want.extend(["LANG", "TERM"].into_iter().filter(|n| std::env::var_os(n).is_some()));
        want.sort_unstable();
        assert_eq!(names, want, "{env:?}");
        let home_seen = env.iter().find(|(n, _)| n == "HOME").map(|(_, v)| v.clone());
        assert_eq!(home_seen, Some(home.into()));
    }
}

/// A sandboxed server (the default) runs inside the sandbox: in the workspace, without the
/// network, with the home hidden, and its program's virtual environment (in the hidden
/// `~/.cache`) shown read-only so that it runs at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_runs_in_the_workspace_and_cannot_read_hidden_files() {
    let sandbox = Sandbox::new();
    sandbox.check().expect("the sandbox works on this machine (CI's machine has what it needs)");
    let workspace = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(workspace.path()).unwrap();
    // The server script lives in the workspace (the repository may be in a hidden home).
    std::fs::copy(server_script(), workspace.join("server.py")).unwrap();
    std::fs::write(workspace.join("mine.txt"), "the workspace's").unwrap();
    // A secret beside the workspace, outside it: hidden.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "do not read").unwrap();
    let spec = McpServerSpec::stdio("t", python().display().to_string(), ["server.py"]);
    let launch = McpLaunch::new(&workspace, sandbox.hide(outside.path()));
    let servers = McpServers::start(&[spec], &launch, Duration::from_secs(60)).await.unwrap();
    assert_eq!(servers.servers()[0].sandboxed(), Some(true));
    let mut tools = ToolRegistry::new();
    servers.register(&mut tools).unwrap();
    let seen = env_of(&tools).await;
    assert_eq!(seen["cwd"], json!(workspace.display().to_string()));
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    let read = |path: String| {
        let tools = &tools;
        let ctx = &ctx;
        async move { tools.call(ctx, "mcp__t__read_path", json!({ "path": path })).await.unwrap() }
    };
    let mine = read(workspace.join("mine.txt").display().to_string()).await;
    assert_eq!((mine.success, mine.output.as_str()), (true, "the workspace's"));
    let secret = read(outside.path().join("secret.txt").display().to_string()).await;
    assert!(!secret.success && !secret.output.contains("do not read"), "{secret:?}");
    servers.shutdown().await;
}

/// Where the sandbox cannot work, a sandboxed server is refused with the sandbox's reason,
/// never started without it; the opt-out starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_is_never_started_without_the_sandbox() {
    let sandbox = Sandbox::new();
    let launch = McpLaunch::new(std::env::temp_dir(), sandbox.clone());
    let result = McpServers::start(&[spec(&[])], &launch, Duration::from_secs(60)).await;
    match (sandbox.check(), result) {
        (Ok(()), Ok(servers)) => {
            assert_eq!(servers.servers()[0].sandboxed(), Some(true));
            servers.shutdown().await;
        }
        (Err(why), Err(McpError::Sandbox { server, error })) => {
            assert_eq!((server.as_str(), error), ("t", why));
        }
        (check, result) => panic!("sandbox {check:?}, start {result:?}"),
    }
}
