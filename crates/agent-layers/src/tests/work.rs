//! The tool loop's journal check: which shell commands count as touching a claimed file.

use crate::work::mentions;

#[test]
fn a_command_mentions_a_file_by_its_path_or_its_name_as_a_word() {
    assert!(mentions("python3 gen.py > out/report.txt", "out/report.txt"));
    assert!(mentions("cd out && echo hi > report.txt", "./out/report.txt"));
    assert!(mentions("touch 'notes.md'", "notes.md"));
    assert!(mentions("cp a.txt build/notes.md", "docs/notes.md"), "the same name in a path");
    assert!(!mentions("cat mynotes.md", "notes.md"), "a longer name is another file");
    assert!(!mentions("ls", "notes.md"));
    assert!(!mentions("echo hi", ""));
}
