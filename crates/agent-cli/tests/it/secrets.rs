//! Secrets are redacted before anything is stored or served: a run whose steps print the
//! values of the API keys and the dashboard token strata knows (a workspace file holding
//! them, read by `read_file` and printed by a `shell` command) stores none of them, in its audit
//! log, boards, conversations or any other file of the run, and `inspect` shows `[redacted]`
//! where they were; the audit chain still verifies.

use std::path::Path;

use crate::fake_llm::{FakeLlm, Mode};
use crate::llm::{KEY, KEY_VAR, openai, team};
use crate::support::{Out, Scratch, snapshot};

/// `$OPENAI_API_KEY` and `$STRATA_SERVE_TOKEN` in the run's environment.
const OPENAI_KEY: &str = "sk-test-openai-5f3a9c1d7e2b";
const SERVE_TOKEN: &str = "serve-token-8d2b6e4f1a90";

/// Reads the notes, then prints them (and the key the command might be given).
const PLAN: &str = r#"id = "leak"
goal = "read the notes and print them"

[[steps]]
id = "read"
description = "read the notes"
domain = "docs"
tool = "read_file"
args = { path = "notes.txt" }

[[steps]]
id = "print"
description = "print the notes"
domain = "build"
tool = "shell"
args = { command = "cat notes.txt; echo \"key=$OPENAI_API_KEY token=$STRATA_SERVE_TOKEN\"" }
"#;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Asserts no secret is in what `out` printed.
#[track_caller]
fn printed_none(out: &Out) {
    for secret in [OPENAI_KEY, SERVE_TOKEN, KEY] {
        assert!(
            !out.stdout.contains(secret) && !out.stderr.contains(secret),
            "`strata {}` printed {secret}:\n{}\n{}",
            out.args,
            out.stdout,
            out.stderr
        );
    }
}

#[test]
fn a_run_that_prints_the_secrets_stores_none_of_them() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = Scratch::new();
    s.write("team.toml", &team(&openai(&server), ""));
    s.write("plan.toml", PLAN);
    s.write(
        "W/notes.txt",
        &format!("{OPENAI_KEY} is the key\ntoken: {SERVE_TOKEN}\nmodel key: {KEY}\n"),
    );
    let args = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--heartbeat",
        "50ms",
        "--no-sync",
        "--quiet",
        "--unsandboxed",
        "--run-id",
        "r1",
    ];
    let mut command = s.command(&args);
    command
        .env(KEY_VAR, KEY)
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("STRATA_SERVE_TOKEN", SERVE_TOKEN);
    let run = Out::of(&args, &mut command);
    run.code(0);
    printed_none(&run);

    // No file of the run holds a secret: the audit log, the boards, the conversations, the
    // recorded tool outputs.
    for (path, bytes) in snapshot(&s.path("D")) {
        let Some(bytes) = bytes else { continue };
        for secret in [OPENAI_KEY, SERVE_TOKEN, KEY] {
            assert!(
                !contains(&bytes, secret.as_bytes()),
                "{secret} is stored in {}",
                Path::new("D").join(&path).display()
            );
        }
    }
    // Read without the secrets in the environment: what was stored is what is shown.
    let audit = s.strata(&["inspect", "r1", "audit", "--data", "D", "--json"]);
    audit.code(0);
    printed_none(&audit);
    assert!(audit.stdout.contains("[redacted] is the key"), "{}", audit.stdout);
    for view in ["tree", "whiteboards", "results", "usage", "calls"] {
        let out = s.strata(&["inspect", "r1", view, "--data", "D"]);
        out.code(0);
        printed_none(&out);
    }
    for flag in ["--full", "--json"] {
        let out = s.strata(&["inspect", "r1", "calls", flag, "--data", "D"]);
        out.code(0);
        printed_none(&out);
        assert!(out.stdout.contains("[redacted] is the key"), "{}", out.stdout);
    }
    let verify = s.strata(&["verify", "r1", "--data", "D"]);
    verify.code(0);
    // The model was asked with the redacted result, never with a secret.
    for request in server.requests() {
        for secret in [OPENAI_KEY, SERVE_TOKEN, KEY] {
            assert!(!request.body.contains(secret), "a model request held {secret}");
        }
    }
}
