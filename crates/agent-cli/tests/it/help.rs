//! `--help` for the tool and every command: exit code 0 and the command's arguments.

use crate::support::Scratch;

#[test]
fn help_for_every_command_names_its_arguments() {
    let s = Scratch::new();
    for (command, needles) in [
        ("", &["Usage: strata", "init", "run", "exec", "resume", "runs", "inspect", "verify"][..]),
        ("init", &["Usage: strata init", "[DIR]"]),
        (
            "run",
            &[
                "Usage: strata run",
                "<PLAN|--goal <TEXT>>",
                "[PLAN]",
                "--goal <TEXT>",
                "--team",
                "--data",
                "--workspace",
                "--heartbeat",
                "--reasoner",
                "--no-sync",
                "--run-id",
                "--nats <URL>",
                "--quiet",
                "--json",
            ],
        ),
        (
            "exec",
            &[
                "Usage: strata exec",
                "[KIND]",
                "[OBJECTIVE]",
                "--list",
                "--input <KEY=VALUE>",
                "--inputs <JSON>",
                "--team",
                "--data",
                "--workspace",
                "--heartbeat",
                "--reasoner",
                "--no-sync",
                "--run-id",
                "--quiet",
                "--json",
            ],
        ),
        ("resume", &["Usage: strata resume", "<RUN>", "--data", "--no-sync", "--quiet", "--json"]),
        ("runs", &["Usage: strata runs", "--data", "--json"]),
        (
            "inspect",
            &[
                "Usage: strata inspect",
                "<RUN>",
                "[VIEW]",
                "tree",
                "audit",
                "messages",
                "whiteboards",
                "decisions",
                "metrics",
                "usage",
                "calls",
                "timeline",
                "[AGENT]",
                "--full",
                "--data",
                "--json",
            ],
        ),
        ("verify", &["Usage: strata verify", "<RUN>", "--data", "--json"]),
        (
            "eval",
            &[
                "Usage: strata eval",
                "[SUITE]",
                "--team <FILE>",
                "--repeat <REPEAT>",
                "--resume <EVAL>",
                "--reasoner",
                "--json",
                "--svg <FILE>",
            ],
        ),
    ] {
        let args: Vec<&str> = [command, "--help"].into_iter().filter(|a| !a.is_empty()).collect();
        let out = s.strata(&args);
        out.code(0).stdout_has(needles);
        if !command.is_empty() {
            s.strata(&["help", command]).code(0).stdout_has(needles);
        }
    }
    assert!(std::fs::read_dir(s.root()).unwrap().next().is_none(), "--help wrote something");
    s.strata(&["--version"]).code(0).stdout_has(&["strata "]);
}
