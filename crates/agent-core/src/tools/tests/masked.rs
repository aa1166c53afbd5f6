//! The run's data directory inside the workspace is masked: no file tool lists, reads, writes
//! or edits it, directly, through a symlink or after a rename; and `search`, `glob` and
//! `list_dir` never follow a file or directory swapped for a symlink while they run.

use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::*;

/// A workspace holding a run's data directory (`.strata/runs/r1`, with a stored team file),
/// and a context that masks it.
struct Run {
    _dir: TempDir,
    ctx: ToolContext,
    team: std::path::PathBuf,
}

const TEAM: &str = "[[mcp_servers]] # the stored team file\n";

fn run_in_workspace() -> Run {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join(".strata/runs");
    std::fs::create_dir_all(data.join("r1/requests")).unwrap();
    let team = data.join("r1/team.toml");
    std::fs::write(&team, TEAM).unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap().with_masked([&data]);
    Run { _dir: dir, ctx, team }
}

fn assert_masked(result: Result<ToolOutput, ToolError>, what: &str) {
    match result {
        Err(err @ ToolError::Masked { .. }) => {
            assert!(!err.is_transient());
            assert!(err.to_string().contains("run's data directory"), "{err}");
            assert!(!err.to_string().contains("mcp_servers"), "{err}");
        }
        other => panic!("{what}: expected a masked refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn the_data_directory_cannot_be_listed_read_written_or_edited() {
    let run = run_in_workspace();
    let ctx = &run.ctx;
    assert_eq!(ctx.masked().count(), 1);
    assert_masked(call(ctx, "list_dir", json!({ "path": ".strata/runs" })).await, "list runs");
    assert_masked(call(ctx, "list_dir", json!({ "path": ".strata/runs/r1" })).await, "list run");
    assert_masked(
        call(ctx, "read_file", json!({ "path": ".strata/runs/r1/team.toml" })).await,
        "read",
    );
    assert_masked(
        call(ctx, "write_file", json!({ "path": ".strata/runs/r1/team.toml", "content": "x" }))
            .await,
        "overwrite",
    );
    assert_masked(
        call(
            ctx,
            "write_file",
            json!({ "path": ".strata/runs/r1/requests/new/approve.json", "content": "{}" }),
        )
        .await,
        "drop a request",
    );
    assert_masked(
        call(
            ctx,
            "edit_file",
            json!({ "path": ".strata/runs/r1/team.toml", "old_text": "#", "new_text": "x" }),
        )
        .await,
        "edit",
    );
    assert_masked(
        call(ctx, "search", json!({ "pattern": "mcp", "path": ".strata/runs" })).await,
        "search in it",
    );
    assert_masked(
        call(ctx, "glob", json!({ "pattern": "*", "path": ".strata/runs/r1" })).await,
        "glob in it",
    );
    assert_eq!(std::fs::read_to_string(&run.team).unwrap(), TEAM);
    assert!(!run.team.with_file_name("requests").join("new").exists());

    // Walks leave it out: its parent lists no `runs/`, a search over its parent finds nothing.
    let listed = call(ctx, "list_dir", json!({ "path": ".strata" })).await.unwrap();
    assert_eq!(listed.output, "");
    let found = call(ctx, "search", json!({ "pattern": "mcp", "path": ".strata" })).await.unwrap();
    assert!(!found.output.contains("mcp_servers"), "{}", found.output);
    let globbed =
        call(ctx, "glob", json!({ "pattern": "*.toml", "path": ".strata" })).await.unwrap();
    assert!(!globbed.output.contains("team.toml"), "{}", globbed.output);

    // The rest of the workspace works as before.
    call(ctx, "write_file", json!({ "path": "notes.txt", "content": "hi" })).await.unwrap();
    let read = call(ctx, "read_file", json!({ "path": "notes.txt" })).await.unwrap();
    assert_eq!(read.output, "hi");
}

#[tokio::test]
async fn a_symlink_into_the_data_directory_does_not_get_round_the_mask() {
    let run = run_in_workspace();
    let ctx = &run.ctx;
    let ws = ctx.workspace();
    symlink(".strata/runs/r1", ws.join("dir-link")).unwrap();
    symlink(".strata/runs/r1/team.toml", ws.join("file-link")).unwrap();
    symlink(".strata", ws.join("parent-link")).unwrap();
    assert_masked(call(ctx, "list_dir", json!({ "path": "dir-link" })).await, "list");
    assert_masked(call(ctx, "list_dir", json!({ "path": "parent-link/runs" })).await, "list");
    assert_masked(call(ctx, "read_file", json!({ "path": "file-link" })).await, "read");
    assert_masked(call(ctx, "read_file", json!({ "path": "dir-link/team.toml" })).await, "read");
    assert_masked(
        call(ctx, "write_file", json!({ "path": "dir-link/team.toml", "content": "x" })).await,
        "write",
    );
    assert_masked(
        call(ctx, "write_file", json!({ "path": "dir-link/requests/a.json", "content": "x" }))
            .await,
        "write a request",
    );
    assert_masked(
        call(ctx, "edit_file", json!({ "path": "file-link", "old_text": "#", "new_text": "x" }))
            .await,
        "edit",
    );
    assert_masked(
        call(ctx, "search", json!({ "pattern": "mcp", "path": "dir-link" })).await,
        "search",
    );
    assert_eq!(std::fs::read_to_string(&run.team).unwrap(), TEAM);
    assert!(!run.team.with_file_name("requests").join("a.json").exists());
}

#[tokio::test]
async fn a_renamed_data_directory_stays_masked() {
    let run = run_in_workspace();
    let ctx = &run.ctx;
    let ws = ctx.workspace();
    // A command renames the data directory's parent to a name that is not hidden.
    std::fs::rename(ws.join(".strata"), ws.join("visible")).unwrap();
    assert_masked(
        call(ctx, "read_file", json!({ "path": "visible/runs/r1/team.toml" })).await,
        "read",
    );
    assert_masked(call(ctx, "list_dir", json!({ "path": "visible/runs" })).await, "list");
    let found = call(ctx, "search", json!({ "pattern": "mcp" })).await.unwrap();
    assert!(!found.output.contains("mcp_servers"), "{}", found.output);
    let globbed = call(ctx, "glob", json!({ "pattern": "*.toml" })).await.unwrap();
    assert!(!globbed.output.contains("team.toml"), "{}", globbed.output);
}

#[tokio::test]
async fn without_a_mask_the_same_files_are_ordinary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data/r1")).unwrap();
    std::fs::write(dir.path().join("data/r1/team.toml"), TEAM).unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    let read = call(&ctx, "read_file", json!({ "path": "data/r1/team.toml" })).await.unwrap();
    assert_eq!(read.output, TEAM);
}

#[tokio::test]
async fn a_workspace_inside_the_data_directory_works() {
    // The default: `<data>/<run>/workspace`. The data directory contains the workspace, so
    // the mask covers nothing the tools can reach, and nothing in the workspace is refused.
    let data = tempfile::tempdir().unwrap();
    let workspace = data.path().join("r1/workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(data.path().join("r1/team.toml"), TEAM).unwrap();
    let ctx =
        ToolContext::new(&workspace).unwrap().with_masked([data.path(), &data.path().join("r1")]);
    call(&ctx, "write_file", json!({ "path": "a/b.txt", "content": "hello" })).await.unwrap();
    assert_eq!(
        call(&ctx, "read_file", json!({ "path": "a/b.txt" })).await.unwrap().output,
        "hello"
    );
    assert_eq!(call(&ctx, "list_dir", json!({})).await.unwrap().output, "a/");
    let found = call(&ctx, "search", json!({ "pattern": "hello" })).await.unwrap();
    assert!(found.output.contains("a/b.txt:1:hello"), "{}", found.output);
    call(&ctx, "edit_file", json!({ "path": "a/b.txt", "old_text": "hello", "new_text": "bye" }))
        .await
        .unwrap();
    let err = call(&ctx, "read_file", json!({ "path": "../team.toml" })).await.unwrap_err();
    assert!(matches!(err, ToolError::PathOutsideWorkspace { .. }), "{err:?}");
}

/// A thread that swaps a path back and forth until `stop` ([`swapper`], [`dir_swapper`]),
/// counting its swaps as it goes, so a test races it until it has swapped often enough,
/// however loaded the machine is.
struct Racer {
    thread: std::thread::JoinHandle<()>,
    swaps: Arc<AtomicUsize>,
}

impl Racer {
    fn start(stop: Arc<AtomicBool>, mut swap: impl FnMut() + Send + 'static) -> Self {
        let swaps = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&swaps);
        let thread = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                swap();
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        Self { thread, swaps }
    }

    /// Swaps done so far.
    fn swaps(&self) -> usize {
        self.swaps.load(Ordering::Relaxed)
    }

    /// Waits for the thread (stopped by its `stop`) and returns its swaps; a swap that
    /// failed fails the test.
    fn join(self) -> usize {
        self.thread.join().unwrap();
        self.swaps.load(Ordering::Relaxed)
    }
}

/// Rounds a racing test runs: at least `MIN_ROUNDS`, and on until every racer has swapped more
/// than `MIN_SWAPS` times (a loaded machine may starve a racer), at most `MAX_ROUNDS`.
const MIN_ROUNDS: usize = 200;
const MIN_SWAPS: usize = 10;
const MAX_ROUNDS: usize = 20_000;

/// Whether a racing test goes on after `round` rounds (see [`MIN_ROUNDS`]).
fn racing(round: usize, racers: &[&Racer]) -> bool {
    round < MIN_ROUNDS || (round < MAX_ROUNDS && racers.iter().any(|r| r.swaps() <= MIN_SWAPS))
}

/// Swaps `path` between a regular file and a symlink to `target` until `stop`, each swap an
/// atomic rename (so the path always exists).
fn swapper(path: std::path::PathBuf, target: std::path::PathBuf, stop: Arc<AtomicBool>) -> Racer {
    let dir = path.parent().unwrap().to_path_buf();
    let (link, file) = (dir.join(".swap-link"), dir.join(".swap-file"));
    Racer::start(stop, move || {
        let _ = std::fs::remove_file(&link);
        symlink(&target, &link).unwrap();
        std::fs::rename(&link, &path).unwrap();
        std::fs::write(&file, "LINE harmless\n").unwrap();
        std::fs::rename(&file, &path).unwrap();
    })
}

/// A directory swapped between a real one and a symlink to `target` until `stop`.
fn dir_swapper(
    path: std::path::PathBuf,
    target: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> Racer {
    let parent = path.parent().unwrap().to_path_buf();
    let (link, real) = (parent.join(".swap-dlink"), parent.join(".swap-dir"));
    Racer::start(stop, move || {
        let _ = std::fs::remove_file(&link);
        symlink(&target, &link).unwrap();
        // A directory cannot be renamed over another: move the real one aside first.
        let _ = std::fs::remove_dir_all(&real);
        if std::fs::rename(&path, &real).is_err() {
            let _ = std::fs::remove_file(&path);
        }
        std::fs::rename(&link, &path).unwrap();
        std::fs::create_dir_all(real.join("x")).unwrap();
        std::fs::write(real.join("x/a.txt"), "LINE harmless\n").unwrap();
        let _ = std::fs::remove_file(&path);
        std::fs::rename(&real, &path).unwrap();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_never_reads_a_file_swapped_for_a_symlink_while_it_runs() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("shadow");
    std::fs::write(&secret, "LINE root:SECRET-HASH:19000\n".repeat(20)).unwrap();
    std::fs::create_dir_all(outside.path().join("x")).unwrap();
    std::fs::write(outside.path().join("x/a.txt"), "LINE root:SECRET-DIR\n").unwrap();
    let (dir, ctx) = workspace();
    std::fs::write(dir.path().join("a.txt"), "LINE harmless\n").unwrap();
    std::fs::create_dir_all(dir.path().join("d/x")).unwrap();
    std::fs::write(dir.path().join("d/x/a.txt"), "LINE harmless\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let files = swapper(dir.path().join("a.txt"), secret.clone(), Arc::clone(&stop));
    let dirs = dir_swapper(dir.path().join("d"), outside.path().to_path_buf(), Arc::clone(&stop));
    let mut seen_harmless = 0;
    let mut round = 0;
    while racing(round, &[&files, &dirs]) || seen_harmless == 0 && round < MAX_ROUNDS {
        round += 1;
        let out = call(&ctx, "search", json!({ "pattern": "LINE" })).await.unwrap();
        assert!(
            !out.output.contains("SECRET"),
            "search read outside the workspace: {}",
            out.output
        );
        assert!(!out.data.to_string().contains("SECRET"), "{}", out.data);
        seen_harmless += usize::from(out.output.contains("harmless"));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(files.join() > MIN_SWAPS, "the file swapper must have raced the searches");
    assert!(dirs.join() > MIN_SWAPS, "the directory swapper must have raced the searches");
    assert!(seen_harmless > 0, "search found the workspace's own lines");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_never_reads_the_data_directory_through_a_swapped_directory() {
    let run = run_in_workspace();
    let ws = run.ctx.workspace().to_path_buf();
    std::fs::create_dir_all(ws.join("d/x")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let dirs = dir_swapper(ws.join("d"), ws.join(".strata/runs/r1"), Arc::clone(&stop));
    let mut round = 0;
    while racing(round, &[&dirs]) {
        round += 1;
        let out = call(&run.ctx, "search", json!({ "pattern": "mcp|LINE" })).await.unwrap();
        assert!(
            !out.output.contains("mcp_servers"),
            "search read the data directory: {}",
            out.output
        );
    }
    stop.store(true, Ordering::Relaxed);
    assert!(dirs.join() > MIN_SWAPS);
}

/// `glob` and `list_dir` while a command swaps a workspace directory for a symlink to a
/// directory outside: no name from outside is ever printed (issue 30, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_and_list_dir_never_show_names_from_a_directory_swapped_for_a_symlink() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("x")).unwrap();
    std::fs::write(outside.path().join("OUTSIDE-top.txt"), "").unwrap();
    std::fs::write(outside.path().join("x/OUTSIDE-shadow.txt"), "").unwrap();
    let (dir, ctx) = workspace();
    std::fs::create_dir_all(dir.path().join("d/x")).unwrap();
    std::fs::write(dir.path().join("d/x/a.txt"), "LINE harmless\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let dirs = dir_swapper(dir.path().join("d"), outside.path().to_path_buf(), Arc::clone(&stop));
    let mut seen_inside = 0;
    let mut round = 0;
    while racing(round, &[&dirs]) || seen_inside == 0 && round < MAX_ROUNDS {
        round += 1;
        let out = call(&ctx, "glob", json!({ "pattern": "*.txt" })).await.unwrap();
        assert!(!out.output.contains("OUTSIDE"), "glob listed outside names: {}", out.output);
        assert!(!out.data.to_string().contains("OUTSIDE"), "{}", out.data);
        seen_inside += usize::from(out.output.contains("d/x/a.txt"));
    }
    let swapped = dirs.swaps();
    let mut round = 0;
    while round < MIN_ROUNDS || (round < MAX_ROUNDS && dirs.swaps() <= swapped + MIN_SWAPS) {
        round += 1;
        for path in ["d", "d/x"] {
            // Listing a directory that is a link out at that moment is refused; never followed.
            match call(&ctx, "list_dir", json!({ "path": path })).await {
                Ok(out) => {
                    assert!(!out.output.contains("OUTSIDE"), "list_dir {path}: {}", out.output);
                    assert!(!out.data.to_string().contains("OUTSIDE"), "{}", out.data);
                }
                Err(err) => assert!(!err.to_string().contains("OUTSIDE"), "{err}"),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(dirs.join() > MIN_SWAPS, "the directory swapper must have raced the walks");
    assert!(seen_inside > 0, "glob found the workspace's own file");
}

#[test]
fn workspace_files_read_only_regular_files_beneath_the_root() {
    let run = run_in_workspace();
    let ws = run.ctx.workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "SECRET").unwrap();
    symlink(outside.path().join("secret"), ws.join("out")).unwrap();
    symlink("a.txt", ws.join("in")).unwrap();
    std::fs::write(ws.join("a.txt"), "text").unwrap();
    let files = WorkspaceFiles::of(&run.ctx).unwrap();
    assert_eq!(files.read(Path::new("a.txt"), 100).unwrap(), b"text");
    for link in ["out", "in"] {
        let err = files.read(Path::new(link), 100).unwrap_err();
        assert!(!err.to_string().contains("SECRET"), "{err}");
        assert!(matches!(err, ToolError::PathOutsideWorkspace { .. }), "{link}: {err:?}");
    }
    let err = files.read(Path::new(".strata/runs/r1/team.toml"), 100).unwrap_err();
    assert!(matches!(err, ToolError::Masked { .. }), "{err:?}");
    let err = files.read(Path::new("a.txt"), 2).unwrap_err();
    assert!(matches!(err, ToolError::TooLarge { .. }), "{err:?}");
    let entries = files.entries(Path::new(".strata")).unwrap();
    assert!(entries.is_empty(), "{entries:?}");
    let root: Vec<_> = files.entries(Path::new(".")).unwrap();
    assert!(root.contains(&("out".into(), EntryKind::Other)), "{root:?}");
    assert!(root.contains(&("a.txt".into(), EntryKind::File)), "{root:?}");
    files.write(Path::new("new/b.txt"), b"b").unwrap();
    assert_eq!(std::fs::read(ws.join("new/b.txt")).unwrap(), b"b");
    assert!(files.write(Path::new("../escape"), b"x").is_err());
    assert!(matches!(
        files.write(Path::new(".strata/runs/r1/team.toml"), b"x").unwrap_err(),
        ToolError::Masked { .. }
    ));
    assert_eq!(std::fs::read_to_string(&run.team).unwrap(), TEAM);
}
