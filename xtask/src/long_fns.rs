//! Long functions: every `fn` over [`MAX_LINES`] lines or with more than [`MAX_PARAMS`]
//! parameters (`self` not counted), found by a scan of the source that knows comments, strings
//! and braces, not by a parser.
//!
//! What is scanned: the `.rs` files under `crates/*/src/` and `xtask/src/`. What is left out:
//! test code (items under `#[cfg(test)]`, functions marked `#[test]` or `#[tokio::test]`, and
//! files that only hold tests: `tests.rs`, `*_tests.rs`, anything under a `tests/` folder),
//! integration tests, benches and examples. A function's lines run from the line of its `fn`
//! to the line of its closing brace (attributes and doc comments not counted); a nested
//! function counts within its parent too.
//!
//! The tidy step fails on a long function in any scanned file; `cargo xtask long-fns` lists
//! them all.

use std::path::Path;

use anyhow::Context;

/// Most lines a function may have.
pub(crate) const MAX_LINES: usize = 80;

/// Most parameters a function may take, `self` not counted.
pub(crate) const MAX_PARAMS: usize = 6;

/// A function over a limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LongFn {
    /// Its name.
    pub(crate) name: String,
    /// The line of its `fn`, from 1.
    pub(crate) line: usize,
    /// How many lines it spans.
    pub(crate) lines: usize,
    /// How many parameters it takes, `self` not counted.
    pub(crate) params: usize,
}

impl LongFn {
    /// The problem, as tidy reports it, for the file at `path`.
    pub(crate) fn problem(&self, path: &str) -> String {
        let mut over = Vec::new();
        if self.lines > MAX_LINES {
            over.push(format!("is {} lines long (at most {MAX_LINES})", self.lines));
        }
        if self.params > MAX_PARAMS {
            over.push(format!("takes {} parameters (at most {MAX_PARAMS})", self.params));
        }
        format!(
            "{path}:{}: fn `{}` {}; split it into smaller functions, or gather its parameters in a type",
            self.line,
            self.name,
            over.join(" and ")
        )
    }
}

/// Whether the file at `path` (relative to the workspace root, `/` separators) is scanned.
pub(crate) fn scanned(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let in_src = matches!(parts.as_slice(), ["crates", _, "src", ..] | ["xtask", "src", ..]);
    let file = path.rsplit('/').next().unwrap_or(path);
    in_src
        && path.ends_with(".rs")
        && file != "tests.rs"
        && !file.ends_with("_tests.rs")
        && !path.contains("/tests/")
}

/// The functions of `text` (Rust source) over a limit, test code left out.
pub(crate) fn long_fns(text: &str) -> Vec<LongFn> {
    let code = blank_comments_and_literals(text);
    let bytes = code.as_bytes();
    let newlines: Vec<usize> =
        bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(at, _)| at).collect();
    let line_of = |at: usize| newlines.partition_point(|&newline| newline < at) + 1;
    let mut found = Vec::new();
    let mut skip_next_item = false;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'#' && code[at..].starts_with("#[") {
            let end = matching(bytes, at + 1).unwrap_or(bytes.len() - 1);
            let attribute: String =
                code[at + 2..end].chars().filter(|c| !c.is_whitespace()).collect();
            if attribute == "cfg(test)"
                || attribute == "test"
                || attribute.starts_with("tokio::test")
            {
                skip_next_item = true;
            }
            at = end + 1;
            continue;
        }
        if skip_next_item && (bytes[at] == b'{' || bytes[at] == b';') {
            // The end of the test item: its block, or a `mod tests;` declaration.
            skip_next_item = false;
            at =
                if bytes[at] == b'{' { matching(bytes, at).unwrap_or(bytes.len() - 1) } else { at };
            at += 1;
            continue;
        }
        if !skip_next_item
            && code[at..].starts_with("fn")
            && (at == 0 || !is_ident_byte(bytes[at - 1]))
            && let Some(item) = function_at(&code, at)
        {
            let lines = item.body_end.map_or(1, |end| line_of(end) - line_of(at) + 1);
            if lines > MAX_LINES || item.params > MAX_PARAMS {
                found.push(LongFn {
                    name: item.name,
                    line: line_of(at),
                    lines,
                    params: item.params,
                });
            }
            // Go on inside the body: a nested function is a function too.
            at = item.signature_end + 1;
            continue;
        }
        at += 1;
    }
    found
}

/// A function found at an `fn` keyword.
struct FnItem {
    name: String,
    params: usize,
    /// Where its signature ends: the body's `{`, or the `;` of a declaration.
    signature_end: usize,
    /// Where its body's `}` is; `None` for a declaration.
    body_end: Option<usize>,
}

/// The function whose `fn` keyword is at `at` in `code` (comments and literals blanked), if it
/// is one: not `fn(...)`, a function pointer type, nor a word such as `fn_name`.
fn function_at(code: &str, at: usize) -> Option<FnItem> {
    let bytes = code.as_bytes();
    let after = at + 2;
    if bytes.get(after).is_none_or(|b| !b.is_ascii_whitespace()) {
        return None;
    }
    let name_start = after + code[after..].find(|c: char| !c.is_whitespace())?;
    let name_len = code[name_start..].find(|c: char| !is_ident_byte(c as u8)).unwrap_or(0);
    if name_len == 0 {
        return None;
    }
    let name = code[name_start..name_start + name_len].to_owned();
    let open = name_start + name_len + code[name_start + name_len..].find('(')?;
    let close = matching(bytes, open)?;
    let params = count_params(&code[open + 1..close]);
    let signature_end = close + code[close..].find(['{', ';'])?;
    let body_end = match bytes[signature_end] {
        b'{' => Some(matching(bytes, signature_end)?),
        _ => None,
    };
    Some(FnItem { name, params, signature_end, body_end })
}

/// How many parameters a parameter list (between its parentheses) declares, `self` not counted.
fn count_params(list: &str) -> usize {
    let mut params = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut previous = ' ';
    for c in list.chars() {
        match c {
            '(' | '[' | '{' | '<' => depth += 1,
            // `->` in a `Fn(..) -> T` bound is not a closing bracket.
            '>' if previous == '-' => {}
            ')' | ']' | '}' | '>' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                params.push(std::mem::take(&mut current));
                previous = c;
                continue;
            }
            _ => {}
        }
        current.push(c);
        previous = c;
    }
    params.push(current);
    params
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let binding = p.split(':').next().unwrap_or(p).trim();
            let binding = binding.trim_start_matches('&').trim();
            let binding = binding.strip_prefix("mut ").unwrap_or(binding).trim();
            // `&'a mut self`, `self: Arc<Self>` and `mut self` are all `self`.
            let binding = binding.split_whitespace().last().unwrap_or(binding);
            binding != "self"
        })
        .count()
}

/// Where the bracket closing the one at `open` (`(`, `[` or `{`) is.
fn matching(bytes: &[u8], open: usize) -> Option<usize> {
    let (opening, closing) = match bytes[open] {
        b'(' => (b'(', b')'),
        b'[' => (b'[', b']'),
        b'{' => (b'{', b'}'),
        _ => return None,
    };
    let mut depth = 0usize;
    for (at, &b) in bytes.iter().enumerate().skip(open) {
        if b == opening {
            depth += 1;
        } else if b == closing {
            depth -= 1;
            if depth == 0 {
                return Some(at);
            }
        }
    }
    None
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `text` with every comment, string and character literal replaced by spaces (newlines
/// kept), so the brackets left are the code's.
pub(crate) fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"...", r#"..."#, br"...": no escapes; ends at `"` and as many `#`.
            let opening = chars[i..].iter().position(|&c| c == '"').unwrap_or(0) + 1;
            for _ in 0..opening {
                out.push(' ');
            }
            i += opening;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    out.push(blank(c));
                }
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\''
            && let Some(len) = char_literal_len(&chars, i)
        {
            for _ in 0..len {
                out.push(' ');
            }
            i += len;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The number of `#` of a raw string starting at `i` (`r"`, `r#"`, `br"`), if one does.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && is_ident_byte(u8::try_from(chars[i - 1]).unwrap_or(b'x')) {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    (chars.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// The length of a character literal starting at `i` (`'a'`, `'\n'`, `'\u{1F600}'`), if one
/// does: a lifetime such as `'a` is not one.
fn char_literal_len(chars: &[char], i: usize) -> Option<usize> {
    match chars.get(i + 1)? {
        '\\' => {
            let close = chars[i + 2..].iter().take(10).position(|&c| c == '\'')?;
            Some(close + 3)
        }
        _ => (chars.get(i + 2) == Some(&'\'')).then_some(3),
    }
}

/// `cargo xtask long-fns`: every long function in the scanned files, longest first.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let mut all = Vec::new();
    for path in crate::tidy::listed_files(root)? {
        if !scanned(&path) {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&path))
            .with_context(|| format!("could not read {path}"))?;
        all.extend(long_fns(&text).into_iter().map(|f| (path.clone(), f)));
    }
    all.sort_by(|(_, a), (_, b)| b.lines.cmp(&a.lines).then(b.params.cmp(&a.params)));
    for (path, f) in &all {
        println!("{:>4} lines {:>2} params  {path}:{} {}", f.lines, f.params, f.line, f.name);
    }
    println!("{} function(s) over {MAX_LINES} lines or {MAX_PARAMS} parameters", all.len());
    Ok(())
}
