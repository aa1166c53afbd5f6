//! Any bytes as a plan file for the default team: a task or a `FileError`, never a panic; a
//! task that parses passes its own checks (`Task::check_request`).

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use agent_core::tools::ToolRegistry;
use libfuzzer_sys::fuzz_target;
use team_file::TeamFile;

fn fixtures() -> &'static (ToolRegistry, TeamFile) {
    static FIXTURES: OnceLock<(ToolRegistry, TeamFile)> = OnceLock::new();
    FIXTURES.get_or_init(|| (ToolRegistry::with_builtins(), team_file::default_team()))
}

fuzz_target!(|data: &[u8]| {
    let (tools, team) = fixtures();
    let path = Path::new("plan.toml");
    let Ok(text) = team_file::decode(path, data.to_vec(), team_file::MAX_PLAN_FILE_BYTES) else {
        return;
    };
    if let Ok(task) = team_file::parse_plan(path, &text, &team.spec, tools) {
        assert!(task.check_request().is_ok(), "a parsed plan is a valid request: {task:?}");
    }
});
