//! The tidy step: conventions a compiler does not check, over the files git knows about.
//!
//! - every `.rs` file under `crates/` and `xtask/` starts with a `//!` line saying what it holds;
//! - library crates do not print: no `print!`, `println!`, `eprint!`, `eprintln!` or `dbg!` in
//!   `crates/*/src` (binaries, `src/bin/` and `*-cli` crates may print);
//! - no text file names a machine-specific absolute path such as a home directory;
//! - `ARCHITECTURE.md` stays a map: at most [`ARCHITECTURE_MAX_BYTES`], and every location in
//!   its "Where is it" index (`path` or `path#symbol`) exists, the symbol as a whole identifier
//!   in the file;
//! - every link to a section of `docs/concepts.md` names a heading that exists;
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

/// The repository's map, whose size and index tidy checks.
const ARCHITECTURE: &str = "ARCHITECTURE.md";

/// The most `ARCHITECTURE.md` may weigh: a map, not a manual (details go to the crate docs).
pub(crate) const ARCHITECTURE_MAX_BYTES: usize = 30 * 1024;

/// The heading of the index of `ARCHITECTURE.md`: concept → location.
const INDEX_HEADING: &str = "## Where is it";

/// The page of concepts that code comments and the README link into, by section.
const CONCEPTS: &str = "docs/concepts.md";

/// Checks every tracked (or new, not ignored) file and reports all problems at once.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let binary_crates = binary_crates(root)?;
    let mut problems = check_architecture(root);
    let concept_anchors = match std::fs::read_to_string(root.join(CONCEPTS)) {
        Ok(text) => heading_anchors(&text),
        Err(error) => {
            problems.push(format!("{CONCEPTS}: cannot be read ({error})"));
            Vec::new()
        }
    };
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
        problems.extend(check_concept_links(relative, &text, &concept_anchors));
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
    if long_fns::scanned(path) {
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

/// The problems of `ARCHITECTURE.md` under `root`: its size, and each location of its index
/// that does not exist.
fn check_architecture(root: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(root.join(ARCHITECTURE)) {
        Ok(text) => text,
        Err(error) => return vec![format!("{ARCHITECTURE}: cannot be read ({error})")],
    };
    let mut problems = Vec::new();
    if text.len() > ARCHITECTURE_MAX_BYTES {
        problems.push(format!(
            "{ARCHITECTURE}: {} bytes, more than {ARCHITECTURE_MAX_BYTES}; keep it a map and move \
             details into the crates' docs",
            text.len()
        ));
    }
    let (locations, form) = index_locations(&text);
    problems.extend(form);
    for location in locations {
        problems.extend(check_location(root, &location));
    }
    problems
}

/// A problem if `location` does not exist under `root`, or its symbol is not in the file.
fn check_location(root: &Path, location: &Location) -> Option<String> {
    let Location { line, path, symbol } = location;
    let full = root.join(path);
    if !full.exists() {
        return Some(format!(
            "{ARCHITECTURE}:{line}: `{path}` does not exist; point the entry at the file that \
             holds it now"
        ));
    }
    let symbol = symbol.as_deref()?;
    match std::fs::read_to_string(&full) {
        Ok(text) if contains_identifier(&text, symbol) => None,
        Ok(_) => Some(format!(
            "{ARCHITECTURE}:{line}: `{symbol}` does not occur in `{path}`; name a symbol the \
             file holds, or drop the `#{symbol}`"
        )),
        Err(error) => Some(format!(
            "{ARCHITECTURE}:{line}: `{path}#{symbol}`: the file cannot be read as text ({error})"
        )),
    }
}

/// One location of the "Where is it" index: a path relative to the repository root, and
/// optionally a symbol in that file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Location {
    /// The line of `ARCHITECTURE.md` it is on, from 1.
    pub(crate) line: usize,
    /// The path, relative to the repository root, with `/` separators.
    pub(crate) path: String,
    /// The symbol after `#`, if given.
    pub(crate) symbol: Option<String>,
}

/// The locations in the table under the "Where is it" heading of `text`, and the problems of
/// its form: no such heading, a row of the table without a location, a location that is not a
/// relative path inside the repository or has an empty symbol. A location is a `code span` in
/// a row's last cell; a row may hold several.
pub(crate) fn index_locations(text: &str) -> (Vec<Location>, Vec<String>) {
    let mut locations = Vec::new();
    let mut problems = Vec::new();
    let mut lines = text.lines().enumerate();
    if !lines.any(|(_, line)| line.trim_end() == INDEX_HEADING) {
        problems.push(format!("{ARCHITECTURE}: no `{INDEX_HEADING}` section"));
        return (locations, problems);
    }
    let mut header_seen = false;
    for (index, line) in lines {
        let number = index + 1;
        if line.starts_with("## ") {
            break;
        }
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = row.trim_end_matches('|').split('|').collect();
        let is_separator = cells.iter().all(|cell| cell.trim().chars().all(|c| "-: ".contains(c)));
        if is_separator {
            continue;
        }
        if !header_seen {
            header_seen = true;
            continue;
        }
        let last = cells.last().copied().unwrap_or_default();
        let spans = code_spans(last);
        if spans.is_empty() {
            problems.push(format!(
                "{ARCHITECTURE}:{number}: an index row without a location; write it as \
                 `path` or `path#symbol` in the last cell"
            ));
        }
        for span in spans {
            let (path, symbol) = match span.split_once('#') {
                Some((path, symbol)) => (path, Some(symbol)),
                None => (span, None),
            };
            if path.is_empty()
                || path.starts_with('/')
                || path.split('/').any(|part| part == "..")
                || symbol.is_some_and(str::is_empty)
            {
                problems.push(format!(
                    "{ARCHITECTURE}:{number}: `{span}` is not a location; write a path relative \
                     to the repository root, optionally with `#symbol`"
                ));
                continue;
            }
            locations.push(Location {
                line: number,
                path: path.to_owned(),
                symbol: symbol.map(str::to_owned),
            });
        }
    }
    (locations, problems)
}

/// The contents of the `code spans` of a Markdown cell, in order.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).map(str::trim).filter(|span| !span.is_empty()).collect()
}

/// Whether `symbol` occurs in `text` as a whole identifier (not inside a longer one).
pub(crate) fn contains_identifier(text: &str, symbol: &str) -> bool {
    text.match_indices(symbol).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + symbol.len()..].chars().next();
        before.is_none_or(|c| !is_ident_char(c)) && after.is_none_or(|c| !is_ident_char(c))
    })
}

/// The anchors of a Markdown document's headings, as GitHub makes them: lower case, spaces as
/// `-`, punctuation other than `-` and `_` dropped.
pub(crate) fn heading_anchors(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter_map(|line| {
            let title = line.trim_start_matches('#');
            (title.len() < line.len() && title.starts_with(' ')).then_some(title.trim())
        })
        .map(|title| {
            title
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => {
                        Some(c.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The problems of the links to sections of `docs/concepts.md` in one file: a section
/// that `anchors` (the page's heading anchors) does not have.
pub(crate) fn check_concept_links(path: &str, text: &str, anchors: &[String]) -> Vec<String> {
    let link = format!("{CONCEPTS}#");
    let mut problems = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(&link) {
            let rest = &line[at + link.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(rest.len());
            let anchor = &rest[..end];
            if !anchors.iter().any(|known| known == anchor) {
                problems.push(format!(
                    "{path}:{}: `{link}{anchor}` names no section of {CONCEPTS}; its sections \
                     are {}",
                    index + 1,
                    anchors.join(", ")
                ));
            }
        }
    }
    problems
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
