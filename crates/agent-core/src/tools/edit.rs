//! The `edit_file` tool: replaces an exact piece of text in a workspace file.

use std::os::unix::fs::MetadataExt as _;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::beneath::Beneath;
use super::fs::{Workspace, blocking, parse, read_regular, replace_file};
use super::path::{display, resolve};
use super::{Tool, ToolContext, ToolError, ToolOutput};

/// `edit_file { path, old_text, new_text, replace_all? }`: replaces `old_text` with `new_text`
/// in a UTF-8 file of the workspace. Has side effects; not idempotent (a second application
/// finds the text gone, or finds it again and changes the file again).
///
/// - `old_text` must occur exactly once (overlapping occurrences count), or, with
///   `replace_all`, at least once (then every non-overlapping occurrence is replaced).
///   Otherwise the file is left unchanged and the call fails with
///   [`ToolError::EditMatchCount`], which says how many times it was found.
/// - The file is read like `read_file` reads it (a regular file of at most
///   [`MAX_READ_BYTES`](super::MAX_READ_BYTES), UTF-8; a FIFO, socket or device is refused
///   without blocking) and replaced like `write_file` replaces one: atomically, keeping its
///   permissions. A file that changed while it was being edited (its inode, size or
///   modification time differ just before the rename) is not overwritten
///   ([`ToolError::Failed`]: read it again and retry).
/// - `output` says where the text was replaced and how the size changed; `data` is
///   `{"path", "replacements", "lines", "bytes", "delta"}` (`lines`: the 1-based line of each
///   replacement in the old file; `bytes`: the new size; `delta`: new size minus old).
#[derive(Debug)]
pub struct EditFile {
    schema: Value,
}

impl EditFile {
    /// The tool's name.
    pub const NAME: &'static str = "edit_file";

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "file path relative to the workspace root",
                    },
                    "old_text": {
                        "type": "string",
                        "minLength": 1,
                        "description": "the exact text to replace, with its whitespace; it must occur exactly once",
                    },
                    "new_text": {
                        "type": "string",
                        "description": "the text to put in its place (may be empty)",
                    },
                    "replace_all": {
                        "type": "boolean",
                        "description": "replace every occurrence instead of requiring exactly one; default false",
                    },
                },
                "required": ["path", "old_text", "new_text"],
                "additionalProperties": false,
            }),
        }
    }
}

impl Default for EditFile {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "Replace an exact piece of text in a workspace file; `old_text` must occur exactly once \
         (give enough surrounding text) unless `replace_all` is set. Returns the edited line."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    /// Applying an edit twice does not leave the same file as applying it once.
    fn idempotent(&self) -> bool {
        false
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: EditArgs = parse(Self::NAME, args)?;
        if args.old_text.is_empty() {
            return Err(ToolError::invalid(Self::NAME, "`old_text`: must not be empty"));
        }
        if args.old_text == args.new_text {
            return Err(ToolError::invalid(
                Self::NAME,
                "`new_text`: is the same as `old_text`, so the edit would change nothing",
            ));
        }
        let ws = Workspace::of(ctx);
        blocking(Self::NAME, move || edit_file(&ws.open(Self::NAME)?, &args)).await
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_text: String,
    new_text: String,
    #[serde(default)]
    replace_all: bool,
}

fn edit_file(ws: &Beneath, args: &EditArgs) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = EditFile::NAME;
    let root = ws.root();
    let requested = args.path.as_str();
    let path = resolve(root, TOOL, requested)?;
    let (bytes, before) = read_regular(TOOL, ws, &path, requested)?;
    let content = String::from_utf8(bytes).map_err(|err| {
        let offset = err.utf8_error().valid_up_to();
        ToolError::failed(
            TOOL,
            format!(
                "`{requested}` is not UTF-8 text (invalid byte at offset {offset}); edit_file \
                 only edits text"
            ),
        )
    })?;
    let shown = display(root, &path);
    let old = args.old_text.as_str();
    let found = occurrences(&content, old);
    if found == 0 || (found > 1 && !args.replace_all) {
        return Err(ToolError::EditMatchCount { tool: TOOL.to_owned(), path: shown, found });
    }
    let starts: Vec<usize> = content.match_indices(old).map(|(at, _)| at).collect();
    let lines = line_numbers(&content, &starts);
    let edited = content.replace(old, &args.new_text);

    let unchanged = || {
        let now = std::fs::metadata(&path).map_err(|err| ToolError::io(TOOL, &path, err))?;
        let same = (now.dev(), now.ino(), now.len(), now.mtime(), now.mtime_nsec())
            == (before.dev(), before.ino(), before.len(), before.mtime(), before.mtime_nsec());
        if same {
            Ok(())
        } else {
            Err(ToolError::failed(
                TOOL,
                format!(
                    "`{requested}` changed while it was being edited, so the edit was not \
                     written; read it again and retry"
                ),
            ))
        }
    };
    replace_file(TOOL, ws, &path, edited.as_bytes(), Some(before.permissions()), unchanged)?;

    let bytes = edited.len();
    let delta =
        i64::try_from(bytes).unwrap_or(i64::MAX) - i64::try_from(content.len()).unwrap_or(i64::MAX);
    let at = match lines.as_slice() {
        [line] => format!("line {line}"),
        many => {
            let list: Vec<String> = many.iter().map(u64::to_string).collect();
            format!("lines {}", list.join(", "))
        }
    };
    let count = starts.len();
    let noun = if count == 1 { "occurrence" } else { "occurrences" };
    Ok(ToolOutput {
        success: true,
        output: format!(
            "edited {shown}: replaced {count} {noun} at {at} ({delta:+} bytes, now {bytes} bytes)"
        ),
        data: json!({
            "path": shown,
            "replacements": count,
            "lines": lines,
            "bytes": bytes,
            "delta": delta,
        }),
    })
}

/// How many times `needle` (not empty) occurs in `haystack`, overlapping occurrences included:
/// `aa` occurs twice in `aaa`, so it does not pick one place to edit.
fn occurrences(haystack: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut from = 0;
    while let Some(at) = haystack.get(from..).and_then(|rest| rest.find(needle)) {
        count += 1;
        let start = from + at;
        // Step past the first character of this occurrence, onto a character boundary.
        from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
    }
    count
}

/// The 1-based line of each byte offset in `starts` (ascending) within `text`.
fn line_numbers(text: &str, starts: &[usize]) -> Vec<u64> {
    let mut lines = Vec::with_capacity(starts.len());
    let mut line = 1_u64;
    let mut counted = 0;
    for &start in starts {
        line += text.as_bytes()[counted..start].iter().filter(|b| **b == b'\n').count() as u64;
        counted = start;
        lines.push(line);
    }
    lines
}
