//! The example suite `examples/eval` is a fair test: it loads as `strata eval` loads it, and
//! every task's check, run as the engine runs it, fails on the files the task starts from and
//! passes once a reference solution is laid over them. The reference solutions live in
//! `tests/eval-solutions/NAME/`, outside the suite, so that no team under evaluation sees
//! them. The team files beside the suite are the three shapes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_core::tools::Sandbox;
use agent_evolution::{Check, CheckRun, SuiteFile, Work, copy_files, run_check};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `check` in `workspace` as the engine does (here without the sandbox: this test
/// process is not a sandbox launcher), within the suite's check time limit.
async fn check(check: &Check, workspace: &Path, limit: Duration) -> CheckRun {
    run_check(check, &Sandbox::unsandboxed(), workspace, limit)
        .await
        .unwrap_or_else(|e| panic!("the check {check} did not run to its end: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_task_fails_as_given_and_passes_with_its_reference_solution() {
    let suite = SuiteFile::read(&manifest_dir().join("../../examples/eval")).unwrap();
    assert!(suite.team.is_none(), "the teams come from the command line");
    assert!(suite.tasks.len() >= 6, "{} tasks", suite.tasks.len());
    let solutions = manifest_dir().join("tests/eval-solutions");
    let mut solved: Vec<String> = std::fs::read_dir(&solutions)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    solved.sort();
    let names: Vec<String> = suite.tasks.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, solved, "a reference solution for each task, and none other");

    for task in &suite.tasks {
        let name = &task.name;
        assert!(matches!(&task.work, Work::Goal(g) if !g.trim().is_empty()), "{name}: a goal");
        let files = task.files.as_ref().unwrap_or_else(|| panic!("{name} has no files/"));
        let workspace = tempfile::tempdir().unwrap();
        copy_files(files, workspace.path()).unwrap();

        let given = check(&task.check, workspace.path(), suite.check_timeout).await;
        assert_eq!(given.code, Some(1), "{name}: the check must fail as given: {given:?}");
        assert!(given.stderr.contains("FAIL: "), "{name} fails saying why: {given:?}");

        copy_files(&solutions.join(name), workspace.path()).unwrap();
        let solved = check(&task.check, workspace.path(), suite.check_timeout).await;
        assert!(solved.passed(), "{name}: the reference solution must pass: {solved:?}");
    }
}

#[test]
fn the_suite_s_team_files_are_the_three_shapes_and_leave_the_reasoner_to_the_command_line() {
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    for shape in ["layered", "crew", "single"] {
        let path = manifest_dir().join(format!("../../examples/eval/{shape}.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let team = team_file::parse_team(&path, &text, &tools).unwrap();
        assert_eq!(team.spec.shape().as_str(), shape);
        assert!(
            matches!(team.default_reasoner.kind, team_file::ReasonerKind::RuleBased)
                && team.agent_reasoners.is_empty(),
            "{shape}.toml names no reasoner: `strata eval --reasoner` gives it"
        );
    }
}
