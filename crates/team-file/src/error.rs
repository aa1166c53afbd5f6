//! The errors: [`FileError`] (`path:line:column: message`), [`ReadError`], and [`Source`],
//! which turns a byte span of a file's text into the line and column of a [`FileError`].

use std::ops::Range;
use std::path::{Path, PathBuf};

use agent_state::find_control;
use thiserror::Error;
use toml::Spanned;

use crate::text::escape_controls;

/// A team or plan file that cannot be used: where, and what is expected there.
///
/// It displays as one line, `path:line:column: message`, with the control characters of the
/// path and the message escaped ([`escape_controls`]); the crate docs show one.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "{}:{line}:{column}: {}",
    escape_controls(&path.display().to_string()),
    escape_controls(message)
)]
pub struct FileError {
    pub(crate) path: PathBuf,
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
}

/// Why [`read`](crate::read) returned no text.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The file cannot be opened or read.
    #[error("cannot read {}: {source}", escape_controls(&path.display().to_string()))]
    Io {
        /// The file, as the caller named it.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file was read, but it is not UTF-8 text or it is over the limit.
    #[error(transparent)]
    File(#[from] FileError),
}

impl FileError {
    /// The file, as the caller named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The line, from 1.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column, from 1, counted in characters (not bytes).
    pub fn column(&self) -> usize {
        self.column
    }

    /// What is wrong and what is expected, without the position (and not escaped).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// One step of a path into a TOML document ([`Source::locate`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seg<'k> {
    /// A key of a table.
    Key(&'k str),
    /// An element of an array (of tables).
    Index(usize),
}

/// A file's path and text, to turn byte spans into positions.
pub(crate) struct Source<'a> {
    pub(crate) path: &'a Path,
    pub(crate) text: &'a str,
}

impl Source<'_> {
    pub(crate) fn error(&self, span: Range<usize>, message: impl Into<String>) -> FileError {
        let (line, column) = self.position(span);
        FileError { path: self.path.to_path_buf(), line, column, message: message.into() }
    }

    /// Refuses a text over `limit` bytes, pointing at where the limit is passed.
    pub(crate) fn check_size(&self, limit: usize, what: &str) -> Result<(), FileError> {
        if self.text.len() <= limit {
            return Ok(());
        }
        Err(self.error(
            limit..limit,
            format!(
                "the {what} is {} bytes, over the limit of {limit} bytes; the limit is passed \
                 here: make the file smaller",
                self.text.len()
            ),
        ))
    }

    /// Refuses a control character in an id or a name, pointing at the value.
    pub(crate) fn no_control(&self, value: &Spanned<String>, what: &str) -> Result<(), FileError> {
        match find_control(value.get_ref()) {
            None => Ok(()),
            Some((index, c)) => Err(self.error(
                value.span(),
                format!(
                    "{what}: character {} is the control character {}; ids and names are one \
                     line of printable text (no newline, tab or escape)",
                    index + 1,
                    c.escape_unicode()
                ),
            )),
        }
    }

    pub(crate) fn toml_error(&self, error: &toml::de::Error) -> FileError {
        let message = error.message().trim().replace('\n', "; ");
        self.error(error.span().unwrap_or(0..0), message)
    }

    /// The span of the value at `path` in the file (such as `endpoints`, 0, `headers`,
    /// `Authorization`), if it is there and has one. For values `serde` cannot span: those in
    /// a table written with dotted keys (`args.inputs.path = "x"`). The text was parsed once
    /// already, so this is called only to point an error at its value.
    pub(crate) fn locate(&self, path: &[Seg<'_>]) -> Option<Range<usize>> {
        let doc = toml_edit::ImDocument::parse(self.text).ok()?;
        let mut item = doc.as_item();
        for seg in path {
            item = match seg {
                Seg::Key(key) => item.get(*key),
                Seg::Index(i) => item.get(*i),
            }?;
        }
        item.span()
    }

    /// The 1-based line and column (in characters) where `span` starts.
    pub(crate) fn position(&self, span: Range<usize>) -> (usize, usize) {
        let mut start = span.start.min(self.text.len());
        while !self.text.is_char_boundary(start) {
            start -= 1;
        }
        let before = &self.text[..start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    }
}
