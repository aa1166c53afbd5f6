//! The tidy step: conventions a compiler does not check, over the files git knows about.
//!
//! - every `.rs` file under `crates/` and `xtask/` starts with a `//!` line saying what it holds;
//! - library crates do not print: no `print!`, `println!`, `eprint!`, `eprintln!` or `dbg!` in
//!   `crates/*/src` (binaries, `src/bin/` and `*-cli` crates may print);
//! - no text file names a machine-specific absolute path such as a home directory;
//! - no function is over 80 lines or takes more than 6 parameters (see [`crate::long_fns`] for
//!   what is scanned and the crates not checked yet).

use std::path::Path;

use anyhow::{Context, bail};

use crate::{capture, long_fns};

/// Macros a library crate must not call: it logs through `tracing` instead.
const PRINT_MACROS: [&str; 5] = ["print", "println", "eprint", "eprintln", "dbg"];

/// Starts of machine-specific absolute paths. Spelled in pieces so this file passes its own check.
const MACHINE_PATHS: [&str; 3] =
    [concat!("/", "work/"), concat!("/", "root/"), concat!("/", "home/")];

/// Checks every tracked (or new, not ignored) file and reports all problems at once.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let binary_crates = binary_crates(root)?;
    let mut problems = Vec::new();
    let mut checked = 0;
    for relative in listed_files(root)? {
        let relative = relative.as_str();
        let path = root.join(relative);
        let Ok(bytes) = std::fs::read(&path) else {
            // Listed by git but deleted in the working tree.
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue; // not a text file
        };
        checked += 1;
        problems.extend(check_file(relative, &text, &binary_crates));
    }
    for problem in &problems {
        println!("{problem}");
    }
    if !problems.is_empty() {
        bail!("{} tidy problem(s) in {checked} files, listed above", problems.len());
    }
    println!("{checked} files are tidy");
    Ok(())
}

/// The problems in one file, `path` being relative to the workspace root with `/` separators;
/// `binary_crates` names the crates under `crates/` that have a `src/main.rs`.
pub(crate) fn check_file(path: &str, text: &str, binary_crates: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let is_rust = path.ends_with(".rs");
    if is_rust
        && (path.starts_with("crates/") || path.starts_with("xtask/"))
        && !text.starts_with("//!")
    {
        problems.push(format!("{path}:1: does not start with a `//!` line saying what it holds"));
    }
    let in_library = is_rust && is_library_source(path, binary_crates);
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if let Some(prefix) = machine_path(line) {
            problems.push(format!(
                "{path}:{number}: machine-specific absolute path `{prefix}...`; use a path relative to the repository or an environment variable"
            ));
        }
        if in_library
            && !line.trim_start().starts_with("//")
            && let Some(name) = print_macro(line)
        {
            problems.push(format!(
                "{path}:{number}: `{name}!` in a library crate; log through `tracing` instead"
            ));
        }
    }
    if long_fns::enforced(path) {
        problems.extend(long_fns::long_fns(text).iter().map(|f| f.problem(path)));
    }
    problems
}

/// The files git knows about (tracked, or new and not ignored), relative to `root`.
pub(crate) fn listed_files(root: &Path) -> anyhow::Result<Vec<String>> {
    let listing = capture(&mut git_ls_files(root))
        .context("could not list the repository's files with git")?;
    Ok(listing.split('\0').filter(|path| !path.is_empty()).map(str::to_owned).collect())
}

/// Whether `path` is library code: `crates/<name>/src/...` outside `src/bin/`, in a crate that
/// has no `src/main.rs` and is not a `*-cli` crate.
fn is_library_source(path: &str, binary_crates: &[String]) -> bool {
    let mut parts = path.split('/');
    let (Some("crates"), Some(name), Some("src"), Some(next)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !(next == "bin" || name.ends_with("-cli") || binary_crates.iter().any(|binary| binary == name))
}

/// The machine-specific path prefix in `line`, if one starts a path there (not `foo/home/`).
pub(crate) fn machine_path(line: &str) -> Option<&'static str> {
    MACHINE_PATHS.into_iter().find(|prefix| {
        line.match_indices(prefix).any(|(at, _)| {
            line[..at].chars().next_back().is_none_or(|before| !is_path_char(before))
        })
    })
}

/// The name of a print macro called in `line`, if any (`println` in `println!(...)`).
pub(crate) fn print_macro(line: &str) -> Option<&'static str> {
    PRINT_MACROS.into_iter().find(|name| {
        line.match_indices(&format!("{name}!")).any(|(at, _)| {
            line[..at].chars().next_back().is_none_or(|before| !is_ident_char(before))
        })
    })
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `git ls-files` for tracked files plus new files that are not ignored, NUL-separated.
fn git_ls_files(root: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("git");
    command.current_dir(root).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]);
    command
}

/// The crates under `crates/` that have a `src/main.rs`: binaries, which may print.
fn binary_crates(root: &Path) -> anyhow::Result<Vec<String>> {
    let crates_dir = root.join("crates");
    let mut binaries = Vec::new();
    for entry in std::fs::read_dir(&crates_dir)
        .with_context(|| format!("could not list {}", crates_dir.display()))?
    {
        let entry = entry?;
        if entry.path().join("src").join("main.rs").is_file() {
            binaries.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    Ok(binaries)
}
