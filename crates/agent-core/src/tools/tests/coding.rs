//! The coding tools: `edit_file` (exact text found once, or a typed error naming the count and
//! an unchanged file), `search` (regex over the files `.gitignore` keeps, with line numbers, a
//! cap and binary files skipped) and `glob` (sorted paths), each confined to the workspace and
//! never blocked by a FIFO.

use std::sync::atomic::AtomicBool;

use super::*;

/// Writes `files` (path, content) into the workspace, creating parent directories.
fn files(dir: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The `path:line` of each match of a `search` output.
fn hits(out: &ToolOutput) -> Vec<String> {
    out.data["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}:{}", m["path"].as_str().unwrap(), m["line"]))
        .collect()
}

fn listed(out: &ToolOutput) -> Vec<String> {
    serde_json::from_value(out.data["files"].clone()).unwrap()
}

/// Opens `fifo` for writing (releasing a reader stuck in `open`) unless stopped within 10 s, and
/// says whether it had to: a tool that never opens the FIFO finishes long before.
struct FifoWatch {
    stop: std::sync::mpsc::Sender<()>,
    fired: Arc<AtomicBool>,
}

impl FifoWatch {
    fn arm(fifo: &Path) -> Self {
        let (stop, rx) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let (fifo, flag) = (fifo.to_path_buf(), fired.clone());
        std::thread::spawn(move || {
            if rx.recv_timeout(Duration::from_secs(10))
                == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            {
                flag.store(true, Ordering::SeqCst);
                let _ = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo);
            }
        });
        Self { stop, fired }
    }

    /// Stops the watch; true if it had to release a blocked reader.
    fn fired(self) -> bool {
        let _ = self.stop.send(());
        self.fired.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// edit_file

#[tokio::test(start_paused = true)]
async fn edit_file_replaces_text_found_once_keeps_permissions_and_reports_the_line() {
    let (dir, ctx) = workspace();
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho hello\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();

    let out = call(
        &ctx,
        "edit_file",
        json!({ "path": "run.sh", "old_text": "echo hello", "new_text": "echo hello, world" }),
    )
    .await
    .unwrap();
    assert!(out.success);
    assert_eq!(
        out.output,
        "edited run.sh: replaced 1 occurrence at line 2 (+7 bytes, now 35 bytes)"
    );
    assert_eq!(
        out.data,
        json!({ "path": "run.sh", "replacements": 1, "lines": [2], "bytes": 35, "delta": 7 })
    );
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "#!/bin/sh\necho hello, world\nexit 0\n");
    let mode = std::fs::metadata(&script).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o750);
    assert_eq!(names_in(dir.path()), ["run.sh"], "no temporary file is left");

    // Deleting text: an empty `new_text`.
    let out = call(
        &ctx,
        "edit_file",
        json!({ "path": "./run.sh", "old_text": "exit 0\n", "new_text": "" }),
    )
    .await
    .unwrap();
    assert_eq!(out.data["lines"], json!([3]));
    assert_eq!(out.data["delta"], -7);
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "#!/bin/sh\necho hello, world\n");
}

#[tokio::test(start_paused = true)]
async fn edit_file_refuses_text_found_zero_or_many_times_and_leaves_the_file_unchanged() {
    let (dir, ctx) = workspace();
    let text = "let a = 1;\nlet b = 1;\nlet c = 1;\n";
    files(dir.path(), &[("src/lib.rs", text)]);

    let err = call(
        &ctx,
        "edit_file",
        json!({ "path": "src/lib.rs", "old_text": "let d = 1;", "new_text": "x" }),
    )
    .await
    .unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(
        err.to_string(),
        "tool `edit_file`: `old_text` was found 0 times in `src/lib.rs`; it must match exactly \
         once: read the file and copy the text to replace exactly, with its whitespace and line \
         breaks"
    );
    assert!(
        matches!(err, ToolError::EditMatchCount { found: 0, ref path, .. } if path == "src/lib.rs")
    );

    let err = call(
        &ctx,
        "edit_file",
        json!({ "path": "src/lib.rs", "old_text": " = 1;", "new_text": " = 2;" }),
    )
    .await
    .unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(
        err.to_string(),
        "tool `edit_file`: `old_text` was found 3 times in `src/lib.rs`: give more surrounding \
         text so it matches once, or set `replace_all` to replace every occurrence"
    );
    assert!(matches!(err, ToolError::EditMatchCount { found: 3, .. }));

    // Overlapping occurrences count: `aa` does not pick one place in `aaa`.
    files(dir.path(), &[("a.txt", "aaa")]);
    let err =
        call(&ctx, "edit_file", json!({ "path": "a.txt", "old_text": "aa", "new_text": "b" }))
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::EditMatchCount { found: 2, .. }), "{err:?}");

    assert_eq!(std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(), text);
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "aaa");
    assert_eq!(names_in(&dir.path().join("src")), ["lib.rs"]);
}

#[tokio::test(start_paused = true)]
async fn edit_file_replace_all_replaces_every_occurrence_and_still_needs_one() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("cfg.toml", "a = 1\nb = 1\n\nc = 1\n")]);
    let out = call(
        &ctx,
        "edit_file",
        json!({ "path": "cfg.toml", "old_text": "= 1", "new_text": "= 22", "replace_all": true }),
    )
    .await
    .unwrap();
    assert_eq!(
        out.output,
        "edited cfg.toml: replaced 3 occurrences at lines 1, 2, 4 (+3 bytes, now 22 bytes)"
    );
    assert_eq!(out.data["replacements"], 3);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("cfg.toml")).unwrap(),
        "a = 22\nb = 22\n\nc = 22\n"
    );
    let err = call(
        &ctx,
        "edit_file",
        json!({ "path": "cfg.toml", "old_text": "= 1", "new_text": "= 3", "replace_all": true }),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::EditMatchCount { found: 0, .. }), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn edit_file_refuses_empty_old_text_a_no_op_and_what_it_cannot_edit() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("a.txt", "abc")]);
    let err = call(&ctx, "edit_file", json!({ "path": "a.txt", "old_text": "", "new_text": "x" }))
        .await
        .unwrap_err();
    assert_eq!(problems(err), ["`old_text`: must not be empty"]);
    // Called directly, bypassing the registry's schema check.
    let err = EditFile::new()
        .call(&ctx, json!({ "path": "a.txt", "old_text": "", "new_text": "x" }))
        .await
        .unwrap_err();
    assert_eq!(problems(err), ["`old_text`: must not be empty"]);
    let err = call(&ctx, "edit_file", json!({ "path": "a.txt", "old_text": "b", "new_text": "b" }))
        .await
        .unwrap_err();
    assert_eq!(
        problems(err),
        ["`new_text`: is the same as `old_text`, so the edit would change nothing"]
    );

    std::fs::write(dir.path().join("bin"), [b'a', 0xff]).unwrap();
    let err = call(&ctx, "edit_file", json!({ "path": "bin", "old_text": "a", "new_text": "b" }))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool `edit_file` failed: `bin` is not UTF-8 text (invalid byte at offset 1); \
         edit_file only edits text"
    );
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let err = call(&ctx, "edit_file", json!({ "path": "sub", "old_text": "a", "new_text": "b" }))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`sub` is a directory"), "{err}");
    let err =
        call(&ctx, "edit_file", json!({ "path": "missing.txt", "old_text": "a", "new_text": "b" }))
            .await
            .unwrap_err();
    assert!(
        matches!(&err, ToolError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(!dir.path().join("missing.txt").exists());
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "abc");
}

#[tokio::test(start_paused = true)]
async fn edit_file_refuses_paths_outside_the_workspace() {
    let (dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    symlink(outside.path().join("secret.txt"), dir.path().join("link.txt")).unwrap();
    let absolute = outside.path().join("secret.txt").to_str().unwrap().to_owned();
    for path in ["../secret.txt", "a/../../secret.txt", absolute.as_str(), "link.txt"] {
        let args = json!({ "path": path, "old_text": "secret", "new_text": "pwned" });
        assert_outside(call(&ctx, "edit_file", args).await, path, &ctx);
    }
    assert_eq!(std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(), "secret");

    // A symlink inside the workspace edits its target and stays a symlink.
    files(dir.path(), &[("real.txt", "old")]);
    symlink(dir.path().join("real.txt"), dir.path().join("alias.txt")).unwrap();
    call(&ctx, "edit_file", json!({ "path": "alias.txt", "old_text": "old", "new_text": "new" }))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("real.txt")).unwrap(), "new");
    assert!(
        std::fs::symlink_metadata(dir.path().join("alias.txt")).unwrap().file_type().is_symlink()
    );
}

#[tokio::test(start_paused = true)]
async fn edit_file_refuses_a_fifo_without_blocking() {
    let (dir, ctx) = workspace();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let watch = FifoWatch::arm(&fifo);
    let err = call(&ctx, "edit_file", json!({ "path": "pipe", "old_text": "a", "new_text": "b" }))
        .await
        .unwrap_err();
    assert!(!watch.fired(), "edit_file blocked on the FIFO");
    assert_not_a_file(err, "edit_file", "pipe", "a FIFO (named pipe)");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(names_in(dir.path()), ["pipe"]);
}

// ---------------------------------------------------------------------------------------------
// search

#[tokio::test(start_paused = true)]
async fn search_finds_matches_with_line_numbers_in_path_order() {
    let (dir, ctx) = workspace();
    files(
        dir.path(),
        &[
            ("src/main.rs", "fn main() {\n    helper();\n}\n"),
            ("src/util.rs", "// helpers\npub fn helper() {}\n"),
            ("README.md", "Call helper() first.\r\nNothing else.\n"),
            ("notes.txt", "nothing to see\n"),
        ],
    );
    let out = call(&ctx, "search", json!({ "pattern": r"helper\(\)" })).await.unwrap();
    assert!(out.success);
    assert_eq!(
        out.output,
        "README.md:1:Call helper() first.\nsrc/main.rs:2:    helper();\nsrc/util.rs:2:pub fn helper() {}"
    );
    assert_eq!(
        out.data,
        json!({
            "matches": [
                { "path": "README.md", "line": 1, "text": "Call helper() first." },
                { "path": "src/main.rs", "line": 2, "text": "    helper();" },
                { "path": "src/util.rs", "line": 2, "text": "pub fn helper() {}" },
            ],
            "total": 3,
            "omitted": 0,
            "files_searched": 4,
            "binary_files_skipped": 0,
            "skipped": [],
        })
    );

    let out = call(&ctx, "search", json!({ "pattern": "HELPERS" })).await.unwrap();
    assert_eq!(out.output, "no matches in 4 files");
    let out = call(&ctx, "search", json!({ "pattern": "HELPERS", "case_insensitive": true }))
        .await
        .unwrap();
    assert_eq!(hits(&out), ["src/util.rs:1"]);
}

#[tokio::test(start_paused = true)]
async fn search_honours_gitignore_and_ignore_files_without_a_git_directory() {
    let (dir, ctx) = workspace();
    files(
        dir.path(),
        &[
            (".gitignore", "*.log\n/build/\n"),
            ("app.log", "needle\n"),
            ("build/out.txt", "needle\n"),
            ("keep.txt", "needle\n"),
            ("sub/.gitignore", "secret.txt\n"),
            ("sub/secret.txt", "needle\n"),
            ("sub/open.txt", "needle\n"),
            ("sub/build/kept.txt", "needle\n"),
            (".ignore", "vendor/\n"),
            ("vendor/lib.txt", "needle\n"),
            (".hidden/file.txt", "needle\n"),
            (".env", "needle\n"),
        ],
    );
    assert!(!dir.path().join(".git").exists());
    let out = call(&ctx, "search", json!({ "pattern": "needle" })).await.unwrap();
    assert_eq!(hits(&out), ["keep.txt:1", "sub/build/kept.txt:1", "sub/open.txt:1"]);
    assert_eq!(out.data["files_searched"], 3);

    // A hidden directory is searched when `path` names it; ignored files stay ignored.
    let out =
        call(&ctx, "search", json!({ "pattern": "needle", "path": ".hidden" })).await.unwrap();
    assert_eq!(hits(&out), [".hidden/file.txt:1"]);
    let out = call(&ctx, "search", json!({ "pattern": "needle", "path": "sub" })).await.unwrap();
    assert_eq!(hits(&out), ["sub/build/kept.txt:1", "sub/open.txt:1"]);
}

#[tokio::test(start_paused = true)]
async fn search_is_limited_to_its_path_and_glob() {
    let (dir, ctx) = workspace();
    files(
        dir.path(),
        &[
            ("src/a.rs", "todo\n"),
            ("src/deep/b.rs", "x\ntodo\n"),
            ("src/deep/c.txt", "todo\n"),
            ("tests/d.rs", "todo\n"),
            ("top.rs", "todo\n"),
        ],
    );
    let search = |args: Value| {
        let ctx = ctx.clone();
        async move { hits(&call(&ctx, "search", args).await.unwrap()) }
    };
    assert_eq!(
        search(json!({ "pattern": "todo", "path": "src" })).await,
        ["src/a.rs:1", "src/deep/b.rs:2", "src/deep/c.txt:1"]
    );
    assert_eq!(
        search(json!({ "pattern": "todo", "glob": "*.rs" })).await,
        ["src/a.rs:1", "src/deep/b.rs:2", "tests/d.rs:1", "top.rs:1"]
    );
    assert_eq!(
        search(json!({ "pattern": "todo", "path": "src", "glob": "deep/*.rs" })).await,
        ["src/deep/b.rs:2"]
    );
    assert_eq!(
        search(json!({ "pattern": "todo", "glob": "src/**/*.rs" })).await,
        ["src/a.rs:1", "src/deep/b.rs:2"]
    );
    // A file as the path searches that file.
    assert_eq!(
        search(json!({ "pattern": "todo", "path": "src/deep/b.rs" })).await,
        ["src/deep/b.rs:2"]
    );

    for path in ["..", "../x", "/etc"] {
        assert_outside(
            call(&ctx, "search", json!({ "pattern": "x", "path": path })).await,
            path,
            &ctx,
        );
    }
    let err = call(&ctx, "search", json!({ "pattern": "x", "glob": "../*" })).await.unwrap_err();
    assert_eq!(
        problems(err),
        ["`glob`: \"../*\" must be relative to the searched directory, without a leading `/` or \
          a `..`; choose the directory with `path`"]
    );
    let err = call(&ctx, "search", json!({ "pattern": "x", "path": "nope" })).await.unwrap_err();
    assert!(
        matches!(&err, ToolError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    );
}

#[tokio::test(start_paused = true)]
async fn search_caps_its_results_and_counts_the_rest() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("a.txt", "hit\nhit\nmiss\nhit\n"), ("b.txt", "hit\nhit\n")]);
    let out = call(&ctx, "search", json!({ "pattern": "hit", "max_results": 2 })).await.unwrap();
    assert_eq!(hits(&out), ["a.txt:1", "a.txt:2"]);
    assert_eq!((out.data["total"].clone(), out.data["omitted"].clone()), (json!(5), json!(3)));
    assert_eq!(
        out.output,
        "a.txt:1:hit\na.txt:2:hit\n[3 more matches not shown; narrow `pattern`, `path` or \
         `glob`, or raise `max_results` (at most 2000)]"
    );
    let out = call(&ctx, "search", json!({ "pattern": "hit", "max_results": 4 })).await.unwrap();
    assert_eq!(hits(&out), ["a.txt:1", "a.txt:2", "a.txt:4", "b.txt:1"]);
    assert_eq!(out.data["omitted"], 1);
}

#[tokio::test(start_paused = true)]
async fn search_reports_an_invalid_regex_as_a_typed_error() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("a.txt", "(x\n")]);
    let err = call(&ctx, "search", json!({ "pattern": "(x" })).await.unwrap_err();
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(
        message.starts_with("tool `search`: `pattern` \"(x\" is not a valid regular expression: "),
        "{message}"
    );
    assert!(message.contains("unclosed group"), "{message}");
    assert!(message.ends_with("to match them literally)"), "{message}");
    match err {
        ToolError::InvalidPattern { tool, argument, pattern, kind, .. } => {
            assert_eq!(
                (&*tool, argument, &*pattern, kind),
                ("search", "pattern", "(x", "regular expression")
            );
        }
        other => panic!("expected an invalid pattern, got {other:?}"),
    }
    let err = call(&ctx, "search", json!({ "pattern": r"\(x", "glob": "[a" })).await.unwrap_err();
    assert!(
        matches!(err, ToolError::InvalidPattern { argument: "glob", kind: "glob", .. }),
        "{err:?}"
    );
    // A match cannot span lines.
    let err = call(&ctx, "search", json!({ "pattern": "a\nb" })).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidPattern { .. }), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn search_skips_binary_files_and_cuts_long_lines() {
    let (dir, ctx) = workspace();
    let mut binary = b"needle in text\n".to_vec();
    binary.extend_from_slice(&[0, 1, 2, b'\n']);
    binary.extend_from_slice(b"needle after the NUL\n");
    std::fs::write(dir.path().join("blob.bin"), binary).unwrap();
    let long = format!("needle {}\n", "x".repeat(400));
    files(dir.path(), &[("long.txt", &long)]);
    std::fs::write(dir.path().join("latin1.txt"), b"needle caf\xe9\n").unwrap();

    let out = call(&ctx, "search", json!({ "pattern": "needle" })).await.unwrap();
    assert_eq!(hits(&out), ["latin1.txt:1", "long.txt:1"]);
    assert_eq!(out.data["binary_files_skipped"], 1);
    assert_eq!(out.data["matches"][0]["text"], "needle caf\u{fffd}");
    let text = out.data["matches"][1]["text"].as_str().unwrap();
    assert_eq!(text.chars().count(), Search::MAX_LINE_CHARS + 1);
    assert!(text.starts_with("needle xxx") && text.ends_with("x…"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn search_never_follows_symlinks_or_opens_fifos() {
    let (dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    files(outside.path(), &[("secret.txt", "needle\n")]);
    files(dir.path(), &[("inside.txt", "needle\n")]);
    symlink(outside.path().join("secret.txt"), dir.path().join("link.txt")).unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    symlink(dir.path().join("inside.txt"), dir.path().join("alias.txt")).unwrap();
    let fifo = dir.path().join("pipe.txt");
    mkfifo(&fifo);

    let watch = FifoWatch::arm(&fifo);
    let out = call(&ctx, "search", json!({ "pattern": "needle" })).await.unwrap();
    assert!(!watch.fired(), "search blocked on the FIFO");
    assert_eq!(hits(&out), ["inside.txt:1"]);
    assert_eq!(out.data["files_searched"], 1);

    let watch = FifoWatch::arm(&fifo);
    let err =
        call(&ctx, "search", json!({ "pattern": "x", "path": "pipe.txt" })).await.unwrap_err();
    assert!(!watch.fired());
    assert_eq!(
        err.to_string(),
        "tool `search`: `pipe.txt` is a FIFO (named pipe); only regular files and directories \
         can be searched"
    );
    assert_outside(
        call(&ctx, "search", json!({ "pattern": "x", "path": "out" })).await,
        "out",
        &ctx,
    );
}

#[tokio::test(start_paused = true)]
async fn a_directory_whose_gitignore_is_a_fifo_is_skipped_not_blocked_on() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("a.txt", "needle\n"), ("sub/b.txt", "needle\n")]);
    let fifo = dir.path().join("sub/.gitignore");
    mkfifo(&fifo);
    let watch = FifoWatch::arm(&fifo);
    let out = call(&ctx, "search", json!({ "pattern": "needle" })).await.unwrap();
    assert!(!watch.fired(), "the walk blocked on sub/.gitignore");
    assert_eq!(hits(&out), ["a.txt:1"]);
    let note = "skipped: sub: `.gitignore` is a FIFO (named pipe), not a regular file";
    assert_eq!(out.data["skipped"], json!([note]));
    assert!(out.output.ends_with(note), "{}", out.output);

    let watch = FifoWatch::arm(&fifo);
    let out = call(&ctx, "glob", json!({ "pattern": "*.txt" })).await.unwrap();
    assert!(!watch.fired());
    assert_eq!(listed(&out), ["a.txt"]);

    // At the root the walk cannot start.
    std::fs::remove_file(&fifo).unwrap();
    let fifo = dir.path().join(".gitignore");
    mkfifo(&fifo);
    let watch = FifoWatch::arm(&fifo);
    let err = call(&ctx, "search", json!({ "pattern": "needle" })).await.unwrap_err();
    assert!(!watch.fired());
    assert_eq!(
        err.to_string(),
        "tool `search` failed: the workspace root's `.gitignore` is a FIFO (named pipe), not a \
         regular file, so its ignore rules cannot be read; replace it with a regular file or \
         remove it"
    );
}

// ---------------------------------------------------------------------------------------------
// glob

#[tokio::test(start_paused = true)]
async fn glob_lists_matching_files_sorted() {
    let (dir, ctx) = workspace();
    files(
        dir.path(),
        &[
            ("b.rs", ""),
            ("a.rs", ""),
            ("a/z.rs", ""),
            ("src/lib.rs", ""),
            ("src/deep/mod.rs", ""),
            ("src/deep/data.json", ""),
            ("Cargo.toml", ""),
        ],
    );
    let out = call(&ctx, "glob", json!({ "pattern": "*.rs" })).await.unwrap();
    assert!(out.success);
    assert_eq!(out.output, "a.rs\na/z.rs\nb.rs\nsrc/deep/mod.rs\nsrc/lib.rs");
    assert_eq!(
        out.data,
        json!({
            "files": ["a.rs", "a/z.rs", "b.rs", "src/deep/mod.rs", "src/lib.rs"],
            "total": 5,
            "omitted": 0,
            "skipped": [],
        })
    );
    let glob = |args: Value| {
        let ctx = ctx.clone();
        async move { listed(&call(&ctx, "glob", args).await.unwrap()) }
    };
    assert_eq!(glob(json!({ "pattern": "src/*.rs" })).await, ["src/lib.rs"]);
    assert_eq!(glob(json!({ "pattern": "src/**/*.rs" })).await, ["src/deep/mod.rs", "src/lib.rs"]);
    assert_eq!(
        glob(json!({ "pattern": "**/deep/*" })).await,
        ["src/deep/data.json", "src/deep/mod.rs"]
    );
    assert_eq!(glob(json!({ "pattern": "./*.{rs,toml}" })).await, ["Cargo.toml", "a.rs", "b.rs"]);
    assert_eq!(
        glob(json!({ "pattern": "deep/*", "path": "src" })).await,
        ["src/deep/data.json", "src/deep/mod.rs"]
    );
    let out = call(&ctx, "glob", json!({ "pattern": "*.py" })).await.unwrap();
    assert_eq!(out.output, "no files match \"*.py\"");
    assert_eq!(out.data["files"], json!([]));
}

#[tokio::test(start_paused = true)]
async fn glob_honours_gitignore_and_lists_symlinks_without_following_them() {
    let (dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    files(outside.path(), &[("x.txt", "")]);
    files(
        dir.path(),
        &[
            (".gitignore", "target/\n*.tmp\n"),
            ("target/debug/out.txt", ""),
            ("scratch.tmp", ""),
            ("notes.txt", ""),
            (".hidden.txt", ""),
        ],
    );
    symlink(outside.path(), dir.path().join("linked")).unwrap();
    symlink(outside.path().join("x.txt"), dir.path().join("link.txt")).unwrap();
    let out = call(&ctx, "glob", json!({ "pattern": "**" })).await.unwrap();
    assert_eq!(listed(&out), ["link.txt", "linked", "notes.txt"]);
    let out = call(&ctx, "glob", json!({ "pattern": "*.txt" })).await.unwrap();
    assert_eq!(listed(&out), ["link.txt", "notes.txt"]);
}

#[tokio::test(start_paused = true)]
async fn glob_refuses_patterns_and_paths_that_leave_the_workspace() {
    let (_dir, ctx) = workspace();
    for pattern in ["../*", "/etc/*", "a/../../x", "./../*"] {
        let err = call(&ctx, "glob", json!({ "pattern": pattern })).await.unwrap_err();
        assert!(!err.is_transient());
        let problems = problems(err);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("`pattern`: "), "{problems:?}");
        assert!(problems[0].ends_with("choose the directory with `path`"), "{problems:?}");
    }
    for path in ["..", "/"] {
        assert_outside(
            call(&ctx, "glob", json!({ "pattern": "*", "path": path })).await,
            path,
            &ctx,
        );
    }
    let err = call(&ctx, "glob", json!({ "pattern": "[a" })).await.unwrap_err();
    assert!(!err.is_transient());
    assert!(
        err.to_string().starts_with("tool `glob`: `pattern` \"[a\" is not a valid glob: "),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn glob_caps_its_results_and_counts_the_rest() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("c.txt", ""), ("a.txt", ""), ("b.txt", ""), ("d/e.txt", "")]);
    let out = call(&ctx, "glob", json!({ "pattern": "*.txt", "max_results": 2 })).await.unwrap();
    assert_eq!(listed(&out), ["a.txt", "b.txt"]);
    assert_eq!((out.data["total"].clone(), out.data["omitted"].clone()), (json!(4), json!(2)));
    assert!(out.output.ends_with("[2 more files not shown; narrow `pattern` or `path`, or raise `max_results` (at most 10000)]"), "{}", out.output);
}

// ---------------------------------------------------------------------------------------------
// arguments

#[tokio::test(start_paused = true)]
async fn coding_tools_refuse_mistyped_and_unknown_arguments() {
    let (dir, ctx) = workspace();
    files(dir.path(), &[("a.txt", "a")]);
    let cases = [
        (
            "edit_file",
            json!({ "path": "a.txt", "old_text": 5, "new_text": "b" }),
            vec!["`old_text`: expected string, found integer"],
        ),
        (
            "edit_file",
            json!({ "path": "a.txt", "old_text": "a" }),
            vec!["`new_text`: required property is missing"],
        ),
        (
            "edit_file",
            json!({ "path": "a.txt", "old_text": "a", "new_text": "b", "replace_all": "yes" }),
            vec!["`replace_all`: expected boolean, found string"],
        ),
        (
            "search",
            json!({ "pattern": "a", "max_results": "10" }),
            vec!["`max_results`: expected integer, found string"],
        ),
        (
            "search",
            json!({ "pattern": "a", "max_results": 0 }),
            vec!["`max_results`: 0 is less than the minimum 1"],
        ),
        (
            "search",
            json!({ "pattern": "a", "max_results": 2001 }),
            vec!["`max_results`: 2001 is greater than the maximum 2000"],
        ),
        (
            "search",
            json!({ "pattern": ["a"], "regex": true }),
            vec![
                "`pattern`: expected string, found array",
                "`regex`: unknown property; expected one of: case_insensitive, glob, \
                 max_results, path, pattern",
            ],
        ),
        ("search", json!({ "pattern": "" }), vec!["`pattern`: must not be empty"]),
        ("glob", json!({}), vec!["`pattern`: required property is missing"]),
        (
            "glob",
            json!({ "pattern": "*", "path": 1 }),
            vec!["`path`: expected string, found integer"],
        ),
    ];
    for (tool, args, expected) in cases {
        let err = call(&ctx, tool, args.clone()).await.unwrap_err();
        assert!(!err.is_transient());
        assert_eq!(problems(err), expected, "{tool} {args}");
    }
    // Called directly, the tools still check their arguments.
    let err =
        Search::new().call(&ctx, json!({ "pattern": "a", "max_results": 0 })).await.unwrap_err();
    assert_eq!(problems(err), ["`max_results`: must be from 1 to 2000, found 0"]);
    let err = Glob::new().call(&ctx, json!({ "pattern": 3 })).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { ref tool, .. } if tool == "glob"));
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "a");
}
