//! A task given as a goal in words (`strata run --goal`) or with goal steps (a description and
//! no tool): refused with exit code 2 before anything is written when the reasoner cannot plan
//! (the rule-based one, the default), and `--goal` and a plan file are one or the other.

use crate::support::{FAST, Out, Scratch, snapshot};

/// `strata run ARGS` in `s` with the data directory `D` and workspace `W`; asserts that
/// neither was created and that nothing else in the scratch directory changed.
#[track_caller]
fn run(s: &Scratch, args: &[&str]) -> Out {
    let before = snapshot(s.root());
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--data", "D", "--workspace", "W", "--quiet", FAST[0], FAST[1]]);
    let out = s.strata(&all);
    assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
    assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    assert_eq!(snapshot(s.root()), before, "`strata {}` wrote something", out.args);
    out
}

/// What the refusal says, whichever agent it names.
const NEEDS_PLANNING: [&str; 3] = [
    "which needs a reasoner that plans",
    "use --reasoner openai, anthropic or local",
    "the rule-based reasoner runs only steps that name their tool and args",
];

#[test]
fn a_goal_on_the_rule_based_reasoner_is_refused_before_anything_starts() {
    let s = Scratch::with_example();
    let refused = run(&s, &["--goal", "write a README for the project"]);
    refused.bad_input(&NEEDS_PLANNING).bad_input(&[
        "this task has only a goal",
        "`top-a`, the top power that proposes it, has the rule-based one",
    ]);

    // The same with a team file, and with the rule-based reasoner named on the command line.
    let refused =
        run(&s, &["--goal", "write a README", "--team", "team.toml", "--reasoner", "rule-based"]);
    refused.bad_input(&NEEDS_PLANNING);

    // An empty goal is bad input of its own.
    run(&s, &["--goal", "  "]).bad_input(&["--goal is empty"]);
}

#[test]
fn a_plan_with_a_goal_step_on_the_rule_based_reasoner_is_refused() {
    let s = Scratch::with_example();
    let plan = s.read("plan.toml").replace(
        "tool = \"write_file\"\nargs = { path = \"hello.txt\", content = \"hello, strata\\n\" }\n",
        "acceptance = \"hello.txt holds a greeting\"\n",
    );
    assert_ne!(plan, s.read("plan.toml"), "the example plan changed: update this test");
    s.write("goal-step.toml", &plan);
    let refused = run(&s, &["goal-step.toml"]);
    refused.bad_input(&[
        "this task has goal steps (write-hello), which need a reasoner that plans",
        "use --reasoner openai, anthropic or local",
    ]);

    // The example plan itself (every step scripted) still runs on the rule-based reasoner.
    s.strata(&["run", "plan.toml", "--data", "D", "--workspace", "W", "--quiet", FAST[0], FAST[1]])
        .code(0);
}

#[test]
fn a_plan_file_and_goal_are_one_or_the_other() {
    let s = Scratch::with_example();
    let both = run(&s, &["plan.toml", "--goal", "write a README"]);
    both.code(2);
    assert!(both.stderr.contains("cannot be used with"), "{}", both.stderr);
    let neither = run(&s, &[]);
    neither.code(2);
    assert!(
        neither.stderr.contains("the following required arguments were not provided")
            && neither.stderr.contains("<PLAN|--goal <TEXT>>"),
        "{}",
        neither.stderr
    );
}
