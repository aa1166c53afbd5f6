//! Any bytes as a team file: `team_file::decode` then `parse_team` give text and a team, or a
//! `FileError`; never a panic, and an error's line and column lie inside the text.

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use agent_core::tools::ToolRegistry;
use libfuzzer_sys::fuzz_target;

fn tools() -> &'static ToolRegistry {
    static TOOLS: OnceLock<ToolRegistry> = OnceLock::new();
    TOOLS.get_or_init(ToolRegistry::with_builtins)
}

fuzz_target!(|data: &[u8]| {
    let path = Path::new("team.toml");
    let Ok(text) = team_file::decode(path, data.to_vec(), team_file::MAX_TEAM_FILE_BYTES) else {
        return;
    };
    if let Err(error) = team_file::parse_team(path, &text, tools()) {
        let shown = error.to_string();
        assert!(shown.starts_with("team.toml:"), "an error names the file: {shown}");
    }
});
