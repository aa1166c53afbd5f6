//! The `search` and `glob` tools: a regular expression over the workspace's files, and the
//! files whose paths match a glob, both honouring `.gitignore` (see the walk in `walk.rs`).

use std::fs::FileType;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use serde::Deserialize;
use serde_json::{Value, json};

use rustix::fs::OFlags;

use super::beneath::Beneath;
use super::fs::{Workspace, blocking, parse};
use super::walk::{GlobFilter, Notes, Scope};
use super::{Tool, ToolContext, ToolError, ToolOutput};

/// `search { pattern, path?, glob?, max_results?, case_insensitive? }`: the lines of the
/// workspace's files that match a regular expression. No side effects.
///
/// - `pattern` is a regular expression in the syntax of the `regex` crate (Perl-like, no
///   look-around or back-references), matched against each line; one that does not parse is
///   [`ToolError::InvalidPattern`] naming the parser's error.
/// - `path` (default: the workspace) is the directory or file to search, inside the workspace
///   like every tool's path; `glob` keeps only the files it matches (`*.rs` by name, `src/**/*.rs`
///   by path under `path`).
/// - Files that `.gitignore` or `.ignore` files inside the workspace exclude are not searched,
///   nor hidden ones (a name starting with `.`, unless `path` names it), nor symlinks (their
///   targets inside the workspace are searched under their own path). A file with a NUL byte
///   is binary and skipped whole. FIFOs, sockets and devices are never opened.
/// - `output` is one `path:line:text` line per matching line (paths relative to the
///   workspace, text cut at [`MAX_LINE_CHARS`](Self::MAX_LINE_CHARS) characters), at most
///   `max_results` (default [`DEFAULT_MAX_RESULTS`](Self::DEFAULT_MAX_RESULTS)), then a line
///   counting the matches left out. `data` is `{"matches": [{"path", "line", "text"}], "total",
///   "omitted", "files_searched", "binary_files_skipped", "skipped"}`.
#[derive(Debug)]
pub struct Search {
    schema: Value,
}

/// `glob { pattern, path?, max_results? }`: the workspace's files whose paths match a glob,
/// sorted. No side effects.
///
/// A pattern without `/` matches file names at any depth (`*.toml`); one with `/` matches paths
/// relative to `path` (default: the workspace; `src/**/*.rs`, `**/tests/*.rs`). `*` and `?`
/// stay within one name, `**` crosses directories. A pattern that is absolute or climbs with
/// `..` is refused: choose the directory with `path`. Files excluded by `.gitignore` or
/// `.ignore` files inside the workspace and hidden ones are left out, as by `search`; symlinks
/// are listed by their own path, not followed. `output` is one path per line, relative to the
/// workspace, at most `max_results` (default [`DEFAULT_MAX_RESULTS`](Self::DEFAULT_MAX_RESULTS)),
/// then a line counting those left out; `data` is `{"files", "total", "omitted", "skipped"}`.
#[derive(Debug)]
pub struct Glob {
    schema: Value,
}

impl Search {
    /// The tool's name.
    pub const NAME: &'static str = "search";
    /// The matching lines returned when `max_results` is not given.
    pub const DEFAULT_MAX_RESULTS: u64 = 200;
    /// The largest `max_results` a call may ask for.
    pub const MAX_RESULTS: u64 = 2000;
    /// Matching lines longer than this many characters are cut, with `…` appended.
    pub const MAX_LINE_CHARS: usize = 300;

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "a regular expression (Rust regex syntax), matched against each line",
                    },
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "directory or file to search, relative to the workspace root; default the whole workspace",
                    },
                    "glob": {
                        "type": "string",
                        "minLength": 1,
                        "description": "only files matching this glob: `*.rs` matches names, `src/**/*.rs` paths under `path`",
                    },
                    "max_results": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": Self::MAX_RESULTS,
                        "description": "the most matching lines to return; default 200",
                    },
                    "case_insensitive": {
                        "type": "boolean",
                        "description": "match letters regardless of case; default false",
                    },
                },
                "required": ["pattern"],
                "additionalProperties": false,
            }),
        }
    }
}

impl Glob {
    /// The tool's name.
    pub const NAME: &'static str = "glob";
    /// The paths returned when `max_results` is not given.
    pub const DEFAULT_MAX_RESULTS: u64 = 1000;
    /// The largest `max_results` a call may ask for.
    pub const MAX_RESULTS: u64 = 10_000;

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "a glob: `*.toml` matches file names at any depth, `src/**/*.rs` paths under `path`",
                    },
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "directory to look in, relative to the workspace root; default the whole workspace",
                    },
                    "max_results": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": Self::MAX_RESULTS,
                        "description": "the most paths to return; default 1000",
                    },
                },
                "required": ["pattern"],
                "additionalProperties": false,
            }),
        }
    }
}

impl Default for Search {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for Glob {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for Search {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "Search the workspace's files for a regular expression, skipping files ignored by \
         .gitignore and binary files; returns `path:line:text` lines."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        false
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: SearchArgs = parse(Self::NAME, args)?;
        let ws = Workspace::of(ctx);
        let limit = ctx.tool_timeout();
        blocking(Self::NAME, move || search(&ws.open(Self::NAME)?, args, limit)).await
    }
}

#[async_trait]
impl Tool for Glob {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "List the workspace's files whose paths match a glob (`*.rs`, `src/**/*.toml`), sorted, \
         leaving out files ignored by .gitignore."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        false
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: GlobArgs = parse(Self::NAME, args)?;
        let ws = Workspace::of(ctx);
        let limit = ctx.tool_timeout();
        blocking(Self::NAME, move || glob(&ws.open(Self::NAME)?, args, limit)).await
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    max_results: Option<u64>,
    #[serde(default)]
    case_insensitive: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    path: Option<String>,
    max_results: Option<u64>,
}

/// The longest line the searcher holds in memory (its heap limit): a file with a longer line
/// is skipped and reported rather than read whole.
const MAX_LINE_BUFFER: usize = 8 * 1024 * 1024;

/// One matching line.
struct Found {
    path: String,
    line: u64,
    text: String,
}

/// `max_results` checked like the schema does, for calls that bypass the registry.
fn cap(tool: &str, requested: Option<u64>, default: u64, max: u64) -> Result<usize, ToolError> {
    let n = requested.unwrap_or(default);
    if n == 0 || n > max {
        return Err(ToolError::invalid(
            tool,
            format!("`max_results`: must be from 1 to {max}, found {n}"),
        ));
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The matcher of `args.pattern`: line-oriented (a match never spans a line break, a literal
/// `\n` is refused), a NUL byte banned (it marks a binary file, which is skipped: it could
/// never match).
fn matcher(args: &SearchArgs) -> Result<grep_regex::RegexMatcher, ToolError> {
    RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .line_terminator(Some(b'\n'))
        .ban_byte(Some(b'\0'))
        .build(&args.pattern)
        .map_err(|err| ToolError::InvalidPattern {
            tool: Search::NAME.into(),
            argument: "pattern",
            pattern: args.pattern.as_str().into(),
            kind: "regular expression",
            reason: err.to_string().into(),
        })
}

fn search(ws: &Beneath, args: SearchArgs, limit: Duration) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Search::NAME;
    if args.pattern.is_empty() {
        return Err(ToolError::invalid(TOOL, "`pattern`: must not be empty"));
    }
    let cap = cap(TOOL, args.max_results, Search::DEFAULT_MAX_RESULTS, Search::MAX_RESULTS)?;
    let matcher = matcher(&args)?;
    let filter = args.glob.as_deref().map(|g| GlobFilter::new(TOOL, "glob", g)).transpose()?;
    let scope = Scope::new(TOOL, ws.root(), args.path.as_deref(), ws.masks().clone())?;
    // A scope in a masked directory is refused rather than walked (and found empty).
    drop(ws.open(TOOL, scope.target(), OFlags::PATH)?);
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(b'\0'))
        .heap_limit(Some(MAX_LINE_BUFFER))
        .build();

    let mut found: Vec<Found> = Vec::new();
    let mut total: u64 = 0;
    let mut files_searched: u64 = 0;
    let mut binary_files: u64 = 0;
    let mut problems = Notes::default();
    let notes = scope.walk(TOOL, limit, |path, file_type| {
        if !file_type.is_file() || filter.as_ref().is_some_and(|f| !f.matches(scope.base(), path)) {
            return;
        }
        let shown = scope.show(path);
        let room = cap.saturating_sub(found.len());
        match search_file(ws, &mut searcher, &matcher, path, &shown, room) {
            Ok(FileResult::Binary) => binary_files += 1,
            Ok(FileResult::Text { count, kept }) => {
                files_searched += 1;
                total += count;
                found.extend(kept);
            }
            Ok(FileResult::NotRegular) => {}
            Err(err) => problems.push(format!("{shown}: {err}")),
        }
    })?;
    let omitted = total.saturating_sub(found.len() as u64);

    let mut lines: Vec<String> =
        found.iter().map(|f| format!("{}:{}:{}", f.path, f.line, f.text)).collect();
    if found.is_empty() {
        lines.push(format!("no matches in {files_searched} files"));
    }
    if omitted > 0 {
        lines.push(format!(
            "[{omitted} more matches not shown; narrow `pattern`, `path` or `glob`, or raise \
             `max_results` (at most {})]",
            Search::MAX_RESULTS
        ));
    }
    let mut skipped = notes.lines();
    skipped.extend(problems.lines());
    lines.extend(skipped.iter().cloned());
    let matches: Vec<Value> = found
        .into_iter()
        .map(|f| json!({ "path": f.path, "line": f.line, "text": f.text }))
        .collect();
    Ok(ToolOutput {
        success: true,
        output: lines.join("\n"),
        data: json!({
            "matches": matches,
            "total": total,
            "omitted": omitted,
            "files_searched": files_searched,
            "binary_files_skipped": binary_files,
            "skipped": skipped,
        }),
    })
}

/// What searching one file gave.
enum FileResult {
    /// Text: how many lines matched, and those kept under the cap.
    Text { count: u64, kept: Vec<Found> },
    /// It has a NUL byte: its matches are dropped.
    Binary,
    /// It was replaced by something other than a regular file since the walk saw it.
    NotRegular,
}

/// Searches the regular file at `path`, opened without blocking beneath the workspace root
/// through no symlink (the walk followed none: a component swapped for one since fails) and
/// outside the masked directories, and checked on the handle, keeping at most `room` matches.
/// A failure never quotes the file.
fn search_file(
    ws: &Beneath,
    searcher: &mut Searcher,
    matcher: &grep_regex::RegexMatcher,
    path: &Path,
    shown: &str,
    room: usize,
) -> std::io::Result<FileResult> {
    let file = ws
        .open_no_links(Search::NAME, path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)
        .map_err(std::io::Error::other)?;
    if !file.metadata()?.is_file() {
        tracing::debug!(path = %shown, "no longer a regular file; not searched");
        return Ok(FileResult::NotRegular);
    }
    let mut sink = Collect { shown, room, count: 0, kept: Vec::new(), binary: false };
    searcher.search_file(matcher, &file, &mut sink)?;
    if sink.binary {
        return Ok(FileResult::Binary);
    }
    Ok(FileResult::Text { count: sink.count, kept: sink.kept })
}

/// Collects one file's matching lines.
struct Collect<'a> {
    shown: &'a str,
    room: usize,
    count: u64,
    kept: Vec<Found>,
    binary: bool,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        if self.kept.len() < self.room {
            self.kept.push(Found {
                path: self.shown.to_owned(),
                line: found.line_number().unwrap_or(0),
                text: shorten_line(found.bytes()),
            });
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A matching line without its line break, lossily decoded and cut at
/// [`Search::MAX_LINE_CHARS`] characters.
fn shorten_line(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    agent_state::shorten(&text, Search::MAX_LINE_CHARS)
}

fn glob(ws: &Beneath, args: GlobArgs, limit: Duration) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Glob::NAME;
    if args.pattern.is_empty() {
        return Err(ToolError::invalid(TOOL, "`pattern`: must not be empty"));
    }
    let cap = cap(TOOL, args.max_results, Glob::DEFAULT_MAX_RESULTS, Glob::MAX_RESULTS)?;
    let filter = GlobFilter::new(TOOL, "pattern", &args.pattern)?;
    let scope = Scope::new(TOOL, ws.root(), args.path.as_deref(), ws.masks().clone())?;
    // A scope in a masked directory is refused rather than walked (and found empty).
    drop(ws.open(TOOL, scope.target(), OFlags::PATH)?);
    let mut files: Vec<String> = Vec::new();
    let notes = scope.walk(TOOL, limit, |path, _: &FileType| {
        if filter.matches(scope.base(), path) {
            files.push(scope.show(path));
        }
    })?;
    files.sort();
    let total = files.len();
    files.truncate(cap);
    let omitted = total - files.len();

    let mut lines = files.clone();
    if total == 0 {
        lines.push(format!("no files match {:?}", args.pattern));
    }
    if omitted > 0 {
        lines.push(format!(
            "[{omitted} more files not shown; narrow `pattern` or `path`, or raise `max_results` \
             (at most {})]",
            Glob::MAX_RESULTS
        ));
    }
    let skipped = notes.lines();
    lines.extend(skipped.iter().cloned());
    Ok(ToolOutput {
        success: true,
        output: lines.join("\n"),
        data: json!({ "files": files, "total": total, "omitted": omitted, "skipped": skipped }),
    })
}
