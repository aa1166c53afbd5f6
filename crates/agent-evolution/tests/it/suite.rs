//! The built-in evaluator on the shipped suite (real teams, real sandboxed commands) and on
//! suites that are wrong.

use std::path::Path;

use agent_evolution::{
    EvalContext, Evolution, EvolutionFile, FitnessEvaluator, MemoryRecorder, SuiteError,
    SuiteEvaluator, TaskSuite,
};
use agent_state::evolution::Genome;
use serde_json::json;

use crate::support::*;

fn ctx() -> EvalContext {
    EvalContext { generation: 0, index: 0, agent_id: "evolution/0/0".into() }
}

fn shipped() -> (EvolutionFile, TaskSuite) {
    let file = EvolutionFile::read(&example().join("evolution.toml")).unwrap();
    let suite = TaskSuite::load(&file.suite).unwrap();
    (file, suite)
}

fn tuned(genesis: &Genome, retries: u32, limit: u64) -> Genome {
    let mut config = genesis.config.clone();
    config.max_retries = retries;
    config.strategy.insert("tool_timeout_ms".into(), json!(limit));
    Genome::genesis(config, genesis.permissions.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_the_tool_limit_change_the_outcome_of_the_shipped_tasks() {
    let (file, suite) = shipped();
    let genesis = file.genesis(&suite).unwrap();
    assert_eq!(genesis.config.max_retries, 0);
    assert_eq!(genesis.permissions, ["read_file", "shell", "write_file"]);
    let evaluator = SuiteEvaluator::new(suite.clone()).unwrap();
    let task = |name: &str| suite.tasks.iter().find(|t| t.name == name).unwrap().clone();

    // The flaky build needs two retries.
    let flaky = task("flaky-build");
    assert!(!evaluator.run_task(&genesis, &flaky).await.unwrap().passed);
    let run = evaluator.run_task(&tuned(&genesis, 2, 5000), &flaky).await.unwrap();
    assert!(run.passed && run.calls == 3 && run.failed_calls == 2, "{run:?}");

    // The compile takes 0.6 s: a 300 ms tool limit fails it whatever the retries.
    let compile = task("slow-compile");
    assert!(evaluator.run_task(&tuned(&genesis, 0, 1000), &compile).await.unwrap().passed);
    let cut = evaluator.run_task(&tuned(&genesis, 2, 300), &compile).await.unwrap();
    assert!(!cut.passed && cut.calls == 3, "{cut:?}");

    // The broken deploy never passes; each retry is one more failed call.
    let deploy = task("broken-deploy");
    let a = evaluator.run_task(&tuned(&genesis, 1, 1000), &deploy).await.unwrap();
    let b = evaluator.run_task(&tuned(&genesis, 4, 1000), &deploy).await.unwrap();
    assert!(!a.passed && !b.passed);
    assert_eq!((a.calls, b.calls), (2, 5));

    // Without the shell nothing is done, and that scores nothing.
    let mut config = genesis.config.clone();
    config.tools = vec!["read_file".into()];
    let idle = Genome::genesis(config, genesis.permissions.clone()).unwrap();
    let fitness = evaluator.evaluate(&idle, &ctx()).await.unwrap();
    assert_eq!(fitness.overall, 0.0, "{fitness:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_evolution_improves_on_generation_zero() {
    let (file, suite) = shipped();
    let genesis = file.genesis(&suite).unwrap();
    let evaluator = SuiteEvaluator::new(suite).unwrap().with_weights(file.settings.weights);
    let report = Evolution::new(
        file.settings.clone(),
        file.space.clone(),
        genesis,
        arc(evaluator),
        arc(MemoryRecorder::new()),
        arc(agent_core::TokioClock::new()),
    )
    .unwrap()
    .run()
    .await
    .unwrap();
    let first = report.generations[0].best;
    let last = report.generations.last().unwrap().best;
    // Measured, not assumed: the genesis (no retries, a 5 s tool limit) passes one task of
    // four; the best of the last generation passes three.
    assert!(last > first, "generation 0 best {first:.3}, last generation best {last:.3}");
    assert!(report.best_fitness.scores["passed"] > 1.0, "{:?}", report.best_fitness);
    assert!(report.best.config.max_retries >= 2, "{:?}", report.best.config);
}

fn write(dir: &Path, path: &str, text: &str) {
    let file = dir.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
}

/// A one-task suite in a temporary folder, with the shipped team.
fn tiny_suite(task_toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "suite.toml", "team = \"team.toml\"\nheartbeat = \"20ms\"\n");
    let team = std::fs::read_to_string(example().join("suite/team.toml")).unwrap();
    write(dir.path(), "team.toml", &team);
    write(dir.path(), "tasks/one/task.toml", task_toml);
    write(
        dir.path(),
        "tasks/one/plan.toml",
        "id = \"one\"\ngoal = \"g\"\n[[steps]]\nid = \"s\"\ndomain = \"ops\"\ntool = \"shell\"\nargs = { command = \"cat seed.txt > out.txt\" }\n",
    );
    write(dir.path(), "tasks/one/files/seed.txt", "seeded\n");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suite_task_copies_its_files_and_checks_the_result() {
    let dir = tiny_suite("check = 'test \"$(cat out.txt)\" = seeded'\n");
    let suite = TaskSuite::load(dir.path()).unwrap();
    let genesis = Genome::genesis(suite.executor_config(), suite.permissions()).unwrap();
    let evaluator = SuiteEvaluator::new(suite).unwrap();
    let fitness = evaluator.evaluate(&genesis, &ctx()).await.unwrap();
    assert_eq!(fitness.scores["passed"], 1.0, "{fitness:?}");
    assert_eq!(fitness.scores["success"], 1.0);
}

#[test]
fn a_suite_task_without_a_check_command_is_refused_naming_it() {
    let dir = tiny_suite("description = \"no check\"\n");
    let err = TaskSuite::load(dir.path()).unwrap_err();
    assert!(matches!(&err, SuiteError::MissingCheck { task, .. } if task == "one"), "{err}");
    assert!(err.to_string().contains("add `check = \"...\"`"), "{err}");
    let dir = tiny_suite("check = \"true\"\nchek = 1\n");
    assert!(TaskSuite::load(dir.path()).unwrap_err().to_string().contains("chek"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_command_that_does_not_exist_fails_the_evaluation_naming_the_task() {
    let dir = tiny_suite("check = \"no-such-checker --strict\"\n");
    let suite = TaskSuite::load(dir.path()).unwrap();
    let genesis = Genome::genesis(suite.executor_config(), suite.permissions()).unwrap();
    let err = SuiteEvaluator::new(suite).unwrap().evaluate(&genesis, &ctx()).await.unwrap_err();
    assert!(err.to_string().contains("task `one`"), "{err}");
    assert!(err.to_string().contains("exit 127"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_a_genomes_model_uses_count_in_its_efficiency() {
    use std::sync::Arc;

    use agent_core::{ScriptedAnswer, ScriptedReasoner};
    use agent_evolution::Reasoning;

    let dir = tiny_suite("check = 'test \"$(cat out.txt)\" = seeded'\n");
    let settings = std::fs::read_to_string(dir.path().join("suite.toml")).unwrap();
    write(dir.path(), "suite.toml", &format!("{settings}token_budget = 20000\n"));
    let suite = TaskSuite::load(dir.path()).unwrap();
    assert_eq!(suite.token_budget, Some(20_000));
    // Every decision of the team costs what the genome's model costs per call: a stand-in for
    // a provider's usage, through the same meter a model reasoner's ledger would give.
    let evaluator =
        SuiteEvaluator::new(suite.clone()).unwrap().with_reasoning(Arc::new(|genome: &Genome| {
            let per_call: u64 =
                if genome.config.model.as_deref() == Some("large") { 1_000 } else { 100 };
            let reasoner = Arc::new(ScriptedReasoner::from_fn(|_| ScriptedAnswer::Fallback));
            let meter = reasoner.clone();
            Reasoning {
                reasoner,
                tokens: Some(Arc::new(move || meter.requests().len() as u64 * per_call)),
            }
        }));
    let with = |model: &str| {
        let mut config = suite.executor_config();
        config.model = Some(model.into());
        Genome::genesis(config, suite.permissions()).unwrap()
    };
    let small = evaluator.evaluate(&with("small"), &ctx()).await.unwrap();
    let large = evaluator.evaluate(&with("large"), &ctx()).await.unwrap();
    assert_eq!(small.scores["passed"], 1.0);
    assert_eq!(large.scores["passed"], 1.0);
    assert!(small.scores["tokens"] > 0.0);
    assert_eq!(
        large.scores["tokens"],
        small.scores["tokens"] * 10.0,
        "the same calls, ten times the price"
    );
    assert!(large.scores["efficiency"] < small.scores["efficiency"], "{small:?} {large:?}");
    assert!(large.overall < small.overall);
}
