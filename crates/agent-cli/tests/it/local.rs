//! The embedded model end to end (feature `local`): the hello plan run by a team whose every
//! agent reasons with Gemma 3 270M on llama.cpp. The model file must have been fetched (`strata
//! model fetch`; `cargo xtask ci` does it in its setup step): without it this test fails, saying
//! so.

use serde_json::Value;

use crate::support::{Out, Scratch};

#[test]
fn a_team_on_the_embedded_model_completes_the_hello_plan_with_valid_decisions() {
    let s = Scratch::with_example();
    // The model runs on the CPU beside the other tests: a turn (or call) it takes longer than
    // the default 30 s for would be cut, and a cut call counts as failed, which is not what
    // this test is about (every answer the model gives is valid).
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}\n[timeouts]\nturn_ms = 600000\nreasoning_ms = 600000\n"));
    let out = s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--reasoner",
        "local",
        "--heartbeat",
        "100ms",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "r1",
        "--quiet",
    ]);
    assert!(
        !out.stderr.contains("is missing; run `strata model fetch`"),
        "the embedded model is not fetched; run `cargo run -p agent-cli -- model fetch` first:\n{}",
        out.stderr
    );
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
    assert_eq!(s.read("W/notes/plan.md"), "# Plan\n- greet\n- measure\n");

    // Every decision went through the model: the plan was signed by the powers' reviews, and
    // the ledger counts the calls of every layer on the one local model.
    let usage = s.strata(&["inspect", "r1", "usage", "--data", "D", "--json"]).code(0).json();
    let report = &usage["usage"];
    let model = &report["by_model"]["local/gemma-3-270m-q4_k_m"];
    assert!(model["calls"].as_u64().unwrap() >= 6, "{report}");
    assert!(model["output_tokens"].as_u64().unwrap() > 0, "{report}");
    for layer in ["top", "mid", "bottom"] {
        assert!(report["by_layer"][layer]["calls"].as_u64().unwrap() > 0, "{layer}: {report}");
    }
    assert_eq!(report["total"]["failed_calls"], 0, "every answer was valid: {report}");
    let decisions =
        s.strata(&["inspect", "r1", "decisions", "--data", "D", "--json"]).code(0).json();
    let plan: Vec<&Value> = decisions.as_array().unwrap().iter().collect();
    assert!(plan.iter().any(|d| d["status"] == "approved"), "{decisions}");
    s.strata(&["verify", "r1", "--data", "D"]).code(0);
}

#[test]
fn a_missing_model_file_is_refused_before_the_run_naming_the_fix() {
    let s = Scratch::with_example();
    s.write("models/.keep", "");
    let args = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--reasoner",
        "local",
        "--data",
        "D",
        "--workspace",
        "W",
        "--quiet",
    ];
    let run_with_models =
        || Out::of(&args, s.command(&args).env("STRATA_MODEL_DIR", s.path("models")));
    run_with_models().bad_input(&["gemma-3-270m-q4_k_m.gguf", "missing", "strata model fetch"]);
    assert!(!s.path("D").exists(), "nothing is written");
    assert!(!s.path("W").exists(), "nothing is written");

    // A file of the wrong size is refused the same way.
    s.write("models/gemma-3-270m-q4_k_m.gguf", "not a model");
    run_with_models().bad_input(&["gemma-3-270m-q4_k_m.gguf", "strata model fetch"]);
    assert!(!s.path("D").exists(), "nothing is written");
}
