//! Bad input: exit code 2, one message naming the file (with `line:column` for a file's
//! content) and what to fix, and nothing written to the data directory or the workspace.

use crate::support::{FAST, Out, Scratch, pos, replace_once, snapshot};

/// `strata run PLAN [ARGS]` in `s` with the data directory `D` and workspace `W`; asserts
/// neither was created.
#[track_caller]
fn run(s: &Scratch, plan: &str, args: &[&str]) -> Out {
    let mut all = vec!["run", plan, "--data", "D", "--workspace", "W", "--quiet", FAST[0], FAST[1]];
    all.extend_from_slice(args);
    let out = s.strata(&all);
    assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
    assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    out
}

/// Writes the example team with `from` replaced by `to` as `file`; returns its text.
fn team_with(s: &Scratch, file: &str, from: &str, to: &str) -> String {
    let text = replace_once(&s.read("team.toml"), from, to);
    s.write(file, &text);
    text
}

/// Writes the example plan with `from` replaced by `to` as `file`; returns its text.
fn plan_with(s: &Scratch, file: &str, from: &str, to: &str) -> String {
    let text = replace_once(&s.read("plan.toml"), from, to);
    s.write(file, &text);
    text
}

#[test]
fn missing_and_unreadable_files() {
    let s = Scratch::with_example();
    std::fs::create_dir(s.path("a-dir")).unwrap();
    run(&s, "missing.toml", &[])
        .bad_input(&["cannot read the plan file missing.toml", "No such file or directory"]);
    // Tests run as root, which reads any file whatever its mode: a directory stands in for an
    // unreadable file.
    run(&s, "a-dir", &[]).bad_input(&["cannot read the plan file a-dir", "Is a directory"]);
    run(&s, "plan.toml", &["--team", "missing-team.toml"])
        .bad_input(&["cannot read the team file missing-team.toml", "No such file or directory"]);
    run(&s, "plan.toml", &["--team", "a-dir"])
        .bad_input(&["cannot read the team file a-dir", "Is a directory"]);
}

#[test]
fn invalid_toml_points_at_the_line_and_column() {
    let s = Scratch::with_example();
    s.write("broken-plan.toml", "id = \"x\"\ngoal = \n");
    run(&s, "broken-plan.toml", &[])
        .bad_input(&["broken-plan.toml:2:8: invalid string; expected `\"`, `'`"]);

    // The header `[[mid]` lacks a `]`: the error points at the lone `]`.
    let text = team_with(&s, "broken-team.toml", "[[mid]]", "[[mid]\n");
    let line = pos(&text, "\n[[mid]\n", "[[mid]").split(':').next().unwrap().to_owned();
    run(&s, "plan.toml", &["--team", "broken-team.toml"]).bad_input(&[&format!(
        "broken-team.toml:{line}:6: invalid table header; expected `.`, `]]`"
    )]);
}

#[test]
fn unknown_fields_name_the_field_and_the_known_ones() {
    let s = Scratch::with_example();
    let text = plan_with(&s, "color.toml", "goal = ", "color = \"red\"\ngoal = ");
    run(&s, "color.toml", &[]).bad_input(&[
        &format!("color.toml:{}: unknown field `color`", pos(&text, "\ncolor", "color")),
        "expected one of `id`, `goal`, `steps`",
    ]);

    let text =
        plan_with(&s, "depends.toml", "after = [\"write-hello\"]", "depends = [\"write-hello\"]");
    run(&s, "depends.toml", &[]).bad_input(&[
        &format!("depends.toml:{}: unknown field `depends`", pos(&text, "\ndepends", "depends")),
        "`after`",
    ]);

    let text = team_with(&s, "toolz.toml", "tools = [", "toolz = [");
    run(&s, "plan.toml", &["--team", "toolz.toml"]).bad_input(&[
        &format!("toolz.toml:{}: unknown field `toolz`", pos(&text, "\ntoolz", "toolz")),
        "`tools`",
    ]);
}

#[test]
fn an_agent_referenced_but_not_defined() {
    let s = Scratch::with_example();
    let text =
        team_with(&s, "no-lead.toml", "supervisor = \"mid-build\"", "supervisor = \"mid-nope\"");
    run(&s, "plan.toml", &["--team", "no-lead.toml"]).bad_input(&[&format!(
        "no-lead.toml:{}: unknown agent `mid-nope`; a bottom executor reports to a mid lead (mid-docs, mid-build)",
        pos(&text, "= \"mid-nope\"", "\"mid-nope\"")
    )]);

    let text = team_with(&s, "no-power.toml", "supervisor = \"top-a\"", "supervisor = \"top-z\"");
    run(&s, "plan.toml", &["--team", "no-power.toml"]).bad_input(&[&format!(
        "no-power.toml:{}: unknown agent `top-z`; a mid lead reports to a top power (top-a, top-b, top-c)",
        pos(&text, "= \"top-z\"", "\"top-z\"")
    )]);

    let text = plan_with(&s, "no-agent.toml", "agent = \"bottom-d2\"", "agent = \"bottom-x\"");
    run(&s, "no-agent.toml", &[]).bad_input(&[
        &format!(
            "no-agent.toml:{}: unknown agent `bottom-x`",
            pos(&text, "= \"bottom-x\"", "\"bottom-x\"")
        ),
        "bottom-d1",
    ]);

    let text = plan_with(&s, "no-domain.toml", "domain = \"build\"", "domain = \"ops\"");
    run(&s, "no-domain.toml", &[]).bad_input(&[&format!(
        "no-domain.toml:{}: no lead has the domain `ops`; the team's domains: docs, build",
        pos(&text, "\"ops\"", "\"ops\"")
    )]);
}

#[test]
fn supervisor_cycles_and_wrong_layers() {
    let s = Scratch::with_example();
    let cycle = "[[mid]]\nid = \"mid-x\"\ndomain = \"x\"\nsupervisor = \"mid-y\"\n\n\
                 [[mid]]\nid = \"mid-y\"\ndomain = \"y\"\nsupervisor = \"mid-x\"\n\n[[bottom]]";
    let text = team_with(&s, "cycle.toml", "[[bottom]]", cycle);
    run(&s, "plan.toml", &["--team", "cycle.toml"]).bad_input(&[&format!(
        "cycle.toml:{}: supervisor cycle: mid-x → mid-y → mid-x; a mid lead reports to a top power",
        pos(&text, "id = \"mid-x\"", "\"mid-y\"")
    )]);

    let text = team_with(&s, "self.toml", "supervisor = \"top-a\"", "supervisor = \"mid-docs\"");
    run(&s, "plan.toml", &["--team", "self.toml"]).bad_input(&[&format!(
        "self.toml:{}: supervisor cycle: `mid-docs` cannot supervise itself",
        pos(&text, "supervisor = \"mid-docs\"", "\"mid-docs\"")
    )]);

    let text = team_with(&s, "layer.toml", "supervisor = \"mid-build\"", "supervisor = \"top-a\"");
    run(&s, "plan.toml", &["--team", "layer.toml"]).bad_input(&[&format!(
        "layer.toml:{}: `top-a` is a top power, but a bottom executor reports to a mid lead",
        pos(&text, "id = \"bottom-b1\"", "\"top-a\"")
    )]);

    let text = team_with(
        &s,
        "top-sup.toml",
        "power_type = \"power_b\"",
        "power_type = \"power_b\"\nsupervisor = \"top-a\"",
    );
    run(&s, "plan.toml", &["--team", "top-sup.toml"]).bad_input(&[&format!(
        "top-sup.toml:{}: a top power has no supervisor; remove `supervisor`",
        pos(&text, "\"power_b\"", "\"top-a\"")
    )]);
}

#[test]
fn more_agents_than_the_pool_allows() {
    let s = Scratch::with_example();
    let text = team_with(&s, "small-pool.toml", "max_agents = 50", "max_agents = 5");
    run(&s, "plan.toml", &["--team", "small-pool.toml"]).bad_input(&[
        &format!(
            "small-pool.toml:{}: too many agents for the pool: this is agent 6 of 9, but `max_agents` (line {}) is 5",
            pos(&text, "id = \"bottom-d1\"", "\"bottom-d1\""),
            pos(&text, "max_agents = 5", "max_agents").split(':').next().unwrap()
        ),
        "raise `max_agents` or remove agents",
    ]);
}

#[test]
fn tools_and_reasoners_that_do_not_exist() {
    let s = Scratch::with_example();
    let available = "(available: edit_file, glob, list_dir, read_file, search, shell, write_file)";
    let text = plan_with(&s, "deploy.toml", "tool = \"shell\"", "tool = \"deploy\"");
    run(&s, "deploy.toml", &[]).bad_input(&[
        &format!("deploy.toml:{}: unknown tool `deploy`", pos(&text, "= \"deploy\"", "\"deploy\"")),
        available,
    ]);

    let text = team_with(&s, "teleport.toml", "tools = [\"read_file\"", "tools = [\"teleport\"");
    run(&s, "plan.toml", &["--team", "teleport.toml"]).bad_input(&[
        &format!(
            "teleport.toml:{}: unknown tool `teleport`",
            pos(&text, "[\"teleport\"", "\"teleport\"")
        ),
        available,
    ]);

    let text = team_with(&s, "forbid.toml", "forbid_tools = []", "forbid_tools = [\"rm\"]");
    run(&s, "plan.toml", &["--team", "forbid.toml"]).bad_input(&[&format!(
        "forbid.toml:{}: unknown tool `rm` in `forbid_tools`",
        pos(&text, "\nforbid_tools", "\"rm\"")
    )]);

    let text = team_with(&s, "gpt.toml", "kind = \"rule-based\"", "kind = \"gpt\"");
    run(&s, "plan.toml", &["--team", "gpt.toml"]).bad_input(&[&format!(
        "gpt.toml:{}: unknown reasoner kind `gpt`; known kinds: rule-based",
        pos(&text, "\nkind", "\"gpt\"")
    )]);

    run(&s, "plan.toml", &["--reasoner", "gpt"])
        .bad_input(&["--reasoner", "unknown reasoner kind `gpt`; known kinds: rule-based"]);
    run(&s, "plan.toml", &["--team", "team.toml", "--reasoner", "gpt"])
        .bad_input(&["unknown reasoner kind `gpt`"]);
}

#[test]
fn a_data_directory_or_workspace_that_is_a_file() {
    let s = Scratch::with_example();
    s.write("D", "not a directory\n");
    s.strata(&["run", "plan.toml", "--data", "D", "--workspace", "W"])
        .bad_input(&["the data directory D is a file", "--data"]);
    assert_eq!(s.read("D"), "not a directory\n");
    assert!(!s.path("W").exists());
    s.strata(&["runs", "--data", "D"]).bad_input(&["the data directory D is not a directory"]);
    s.strata(&["runs", "--data", "D", "--json"]).bad_input(&["D is not a directory"]);

    s.write("W", "not a directory\n");
    s.strata(&["run", "plan.toml", "--data", "data", "--workspace", "W"])
        .bad_input(&["the workspace W is a file", "--workspace"]);
    assert_eq!(s.read("W"), "not a directory\n");
    assert!(!s.path("data").exists());
}

/// `resume`, `inspect` and `verify` of something that is not a Strata run, by path or by id,
/// and of a run id that does not exist; none of them writes anything.
#[test]
fn commands_on_a_directory_that_is_not_a_run_or_a_run_that_does_not_exist() {
    let s = Scratch::new();
    s.write("data/not-a-run/notes.txt", "hello\n");
    s.write("data/half/run.json", "{}\n");
    let before = snapshot(s.root());
    for command in ["resume", "inspect", "verify"] {
        let at = |args: &[&str]| {
            let mut all = vec![command];
            all.extend_from_slice(args);
            s.strata(&all)
        };
        at(&["data/not-a-run"]).bad_input(&[
            "data/not-a-run is not a Strata run (no run.json or strata-run.json)",
            "`strata runs` lists the runs",
        ]);
        at(&["not-a-run", "--data", "data"])
            .bad_input(&["data/not-a-run is not a Strata run", "`strata runs` lists the runs"]);
        at(&["half", "--data", "data"]).bad_input(&["data/half is not a Strata run"]);
        at(&["data"]).bad_input(&["data is not a Strata run"]);
        at(&["nope", "--data", "data"]).bad_input(&[
            "no run `nope`: it is neither a run id in data nor a directory",
            "`strata runs` lists the runs",
        ]);
        at(&["nope"]).bad_input(&["no run `nope`", ".strata/runs"]);
        at(&["nope", "--data", "absent"]).bad_input(&["no run `nope`", "in absent"]);
    }
    s.strata(&["inspect", "nope", "audit", "--json"]).bad_input(&["no run `nope`"]);
    s.strata(&["verify", "nope", "--json"]).bad_input(&["no run `nope`"]);
    assert!(snapshot(s.root()) == before, "a refused command wrote something");
    assert!(!s.path(".strata").exists());
    assert!(!s.path("absent").exists());
}

/// `init` never overwrites a file.
#[test]
fn init_refuses_to_overwrite() {
    let s = Scratch::new();
    s.write("plan.toml", "mine\n");
    s.strata(&["init", "."])
        .bad_input(&["plan.toml already exists", "remove it or choose another directory"]);
    assert_eq!(s.read("plan.toml"), "mine\n");
    assert!(!s.path("team.toml").exists(), "init wrote one file of two");
}

/// `init --scale` outside what a pool can hold is refused, and nothing is written.
#[test]
fn init_scale_out_of_range_is_refused() {
    let s = Scratch::new();
    for scale in ["0", "4", "1000001"] {
        s.strata(&["init", "gen", "--scale", scale]).bad_input(&[
            &format!("--scale {scale}"),
            "from 5 agents",
            "to 1000000",
        ]);
        assert!(!s.path("gen").exists(), "--scale {scale} wrote something");
    }
    s.strata(&["init", "gen", "--scale", "many"]).code(2);
}

/// Arguments the command line itself refuses: exit code 2 with clap's message and a pointer
/// to `--help`.
#[test]
fn bad_arguments() {
    let s = Scratch::with_example();
    for (args, needle) in [
        // One parser for the flag and the team file's `heartbeat`.
        (
            &["run", "plan.toml", "--heartbeat", "4sec"][..],
            "is not a duration; write a whole number and a unit (ms, s, m or h)",
        ),
        (&["run", "plan.toml", "--heartbeat", "0s"], "a duration must be longer than 0"),
        (&["run", "plan.toml", "--heartbeat", "fast"], "is not a duration"),
        (&["run", "plan.toml", "--heartbeat", "18446744073709551615s"], "is not a duration"),
        (&["run", "plan.toml", "--heartbeat", "9ms"], "out of range; use 10ms to 1h"),
        (&["run", "plan.toml", "--heartbeat", "61m"], "out of range; use 10ms to 1h"),
        (&["run", "plan.toml", "--heartbeat", "2h"], "out of range; use 10ms to 1h"),
        (
            &["run", "plan.toml", "--heartbeat", "18446744073709551615ms"],
            "out of range; use 10ms to 1h",
        ),
        (&["run", "plan.toml", "--run-id", "../escape"], "cannot be a run id"),
        (&["run", "plan.toml", "--run-id", ".hidden"], "cannot be a run id"),
        // One rule for every store: `_` would make two runs' NATS streams meet, `.` splits a
        // NATS subject.
        (&["run", "plan.toml", "--run-id", "a_b"], "use 1 to 64 ASCII letters, digits or `-`"),
        (&["run", "plan.toml", "--run-id", "a.b"], "use 1 to 64 ASCII letters, digits or `-`"),
        (
            &[
                "run",
                "plan.toml",
                "--run-id",
                "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            ],
            "over 64",
        ),
        (&["run", "plan.toml", "--colour"], "unexpected argument '--colour'"),
        (&["run"], "the following required arguments were not provided"),
        (&["inspect", "some-run", "graph"], "invalid value 'graph'"),
        (&["launch"], "unrecognized subcommand 'launch'"),
    ] {
        let mut all = args.to_vec();
        if args[0] == "run" {
            all.extend(["--data", "D", "--workspace", "W"]);
        }
        let out = s.strata(&all);
        out.code(2);
        assert_eq!(out.stdout, "");
        assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
        assert!(
            out.stderr.contains(needle),
            "`strata {}`: {needle:?} not in\n{}",
            out.args,
            out.stderr
        );
        assert!(out.stderr.contains("--help"), "{}", out.stderr);
        assert!(!s.path("D").exists() && !s.path("W").exists());
    }
}

// ---------------------------------------------------------------------------------------------
// Limits, encodings and control characters: refused with a position, nothing written.

#[test]
fn heartbeat_out_of_range_is_refused() {
    let s = Scratch::with_example();
    // The flag: clap names it.
    for value in ["9ms", "2h", "18446744073709551615ms"] {
        let out = s.strata(&["run", "plan.toml", "--heartbeat", value, "--data", "D"]);
        out.code(2);
        assert!(
            out.stderr.contains(&format!("invalid value '{value}' for '--heartbeat <HEARTBEAT>'")),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("out of range; use 10ms to 1h"), "{}", out.stderr);
        assert!(!s.path("D").exists());
    }
    // The team file.
    let text = team_with(&s, "slow.toml", "heartbeat = \"4s\"", "heartbeat = \"2h\"");
    let out = s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "slow.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--quiet",
    ]);
    out.bad_input(&[&format!(
        "slow.toml:{}: `heartbeat`: a heartbeat of 7200000 ms is out of range; use 10ms to 1h",
        pos(&text, "heartbeat = ", "\"2h\"")
    )]);
    assert!(!s.path("D").exists() && !s.path("W").exists());
}

#[test]
fn plan_with_too_many_steps_is_refused_with_position() {
    let s = Scratch::with_example();
    let mut text = String::from("id = \"t\"\ngoal = \"g\"\n");
    for i in 1..=10_001 {
        text.push_str(&format!(
            "[[steps]]\nid = \"s{i}\"\ndomain = \"docs\"\ntool = \"list_dir\"\n"
        ));
    }
    s.write("many.toml", &text);
    run(&s, "many.toml", &[]).bad_input(&[&format!(
        "many.toml:{}: too many steps: this is step 10001 of 10001, and a plan has at most 10000",
        pos(&text, "\"s10001\"", "\"s10001\"")
    )]);
}

#[test]
fn oversized_plan_and_team_files_are_refused_with_position() {
    let s = Scratch::with_example();
    // 16 MiB of comment after the example plan: the error points where the limit is passed.
    let plan = s.read("plan.toml");
    let text = format!("{plan}# {}\n", "x".repeat(16 * 1024 * 1024));
    s.write("huge.toml", &text);
    let line = plan.matches('\n').count() + 1;
    let column = 16 * 1024 * 1024 - plan.len() + 1;
    run(&s, "huge.toml", &[]).bad_input(&[&format!(
        "huge.toml:{line}:{column}: the file is over the limit of 16777216 bytes"
    )]);

    let team = s.read("team.toml");
    let text = format!("{team}# {}\n", "x".repeat(32 * 1024 * 1024));
    s.write("huge-team.toml", &text);
    let line = team.matches('\n').count() + 1;
    let column = 32 * 1024 * 1024 - team.len() + 1;
    run(&s, "plan.toml", &["--team", "huge-team.toml"]).bad_input(&[&format!(
        "huge-team.toml:{line}:{column}: the file is over the limit of 33554432 bytes"
    )]);

    // One step's arguments over 8 MiB.
    let text = replace_once(
        &s.read("plan.toml"),
        "args = { path = \"hello.txt\"",
        &format!("args = {{ path = \"hello.txt\", pad = \"{}\"", "p".repeat(8 * 1024 * 1024)),
    );
    s.write("fat.toml", &text);
    run(&s, "fat.toml", &[]).bad_input(&[
        &format!("fat.toml:{}:", pos(&text, "tool = \"write_file\"", "\"write_file\"")),
        "over the limit of 8388608 bytes (8 MiB) for one tool call",
    ]);
}

#[test]
fn non_utf8_plan_reports_line_and_column() {
    let s = Scratch::with_example();
    let plan = s.read("plan.toml");
    let at = plan.find("goal = \"").unwrap() + "goal = \"".len();
    let mut bytes = plan.as_bytes().to_vec();
    bytes.insert(at, 0xff);
    std::fs::write(s.path("latin.toml"), &bytes).unwrap();
    // Right after `goal = "`: column 9 of the goal's line.
    let line = plan[..at].matches('\n').count() + 1;
    run(&s, "latin.toml", &[]).bad_input(&[&format!(
        "latin.toml:{line}:9: the file is not UTF-8 text: byte 0xFF at byte offset {at}"
    )]);
    let team = s.read("team.toml");
    let mut bytes = team.into_bytes();
    bytes.extend_from_slice(b"# \xc3\x28\n");
    std::fs::write(s.path("latin-team.toml"), &bytes).unwrap();
    run(&s, "plan.toml", &["--team", "latin-team.toml"]).bad_input(&[
        "latin-team.toml:",
        "byte 0xC3 at byte offset",
        "save the file as UTF-8",
    ]);
}

#[test]
fn control_characters_in_ids_are_refused() {
    let s = Scratch::with_example();
    let text = plan_with(&s, "nl-step.toml", "id = \"write-hello\"", "id = \"write\\nhello\"");
    run(&s, "nl-step.toml", &[]).bad_input(&[&format!(
        "nl-step.toml:{}: a step's `id`: character 6 is the control character \\u{{a}}",
        pos(&text, "id = \"write\\n", "\"write")
    )]);
    let text = plan_with(&s, "esc-task.toml", "id = \"hello\"", "id = \"hello\\u001b[2J\"");
    run(&s, "esc-task.toml", &[]).bad_input(&[&format!(
        "esc-task.toml:{}: the plan's `id`: character 6 is the control character \\u{{1b}}",
        pos(&text, "id = \"hello", "\"hello")
    )]);
    let text = team_with(&s, "tab-name.toml", "name = \"Power A\"", "name = \"Power\\tA\"");
    run(&s, "plan.toml", &["--team", "tab-name.toml"]).bad_input(&[&format!(
        "tab-name.toml:{}: `name`: character 6 is the control character \\u{{9}}",
        pos(&text, "name = \"Power\\t", "\"Power")
    )]);
    let text = team_with(&s, "nl-domain.toml", "domain = \"docs\"", "domain = \"do\\ncs\"");
    run(&s, "plan.toml", &["--team", "nl-domain.toml"]).bad_input(&[&format!(
        "nl-domain.toml:{}: `domain`: character 3",
        pos(&text, "domain = \"do", "\"do")
    )]);
}

#[test]
fn a_nul_byte_in_a_command_is_refused_where_it_is() {
    let s = Scratch::with_example();
    // TOML's `\u0000` is a NUL byte in the string: no command line can carry it.
    let text = plan_with(
        &s,
        "nul.toml",
        "args = { command = \"wc -c < hello.txt\" }",
        "args = { command = \"wc -c\\u0000 < hello.txt\" }",
    );
    run(&s, "nul.toml", &[]).bad_input(&[
        &format!(
            "nul.toml:{}: `args` do not fit the tool `shell`",
            pos(&text, "tool = \"shell\"", "\"shell\"")
        ),
        "`command`: holds a NUL byte (\\0) at character 6 (line 1 of the command)",
    ]);
}
