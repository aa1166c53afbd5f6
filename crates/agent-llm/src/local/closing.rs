//! Closing a JSON answer in time. The grammar keeps every token of a JSON answer valid, but an
//! answer the token limit cuts off is still not JSON. So the last [`CLOSING_TOKENS`] tokens
//! before the limit are spent closing it: where the grammar allows it, the token that closes
//! the innermost open value (`"` in a string, else `]` or `}`) is taken instead of the model's
//! choice; where it does not (a required property still missing, a string or array below its
//! minimum), the model's choice under the grammar. The plan's and the tools' schemas bound every
//! string and array, so what a closing answer still needs is a few dozen tokens at most.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// Tokens before the limit at which an open JSON answer starts closing (a quarter of the limit
/// when that is less).
pub(super) const CLOSING_TOKENS: usize = 64;

/// The number of generated tokens from which an answer limited to `limit` tokens closes.
pub(super) fn closing_from(limit: usize) -> usize {
    limit - CLOSING_TOKENS.min(limit / 4)
}

/// Where a JSON text being written stands: the containers open, and whether it is inside a
/// string (and just after a backslash there).
#[derive(Debug, Default)]
pub(super) struct JsonCursor {
    open: Vec<u8>,
    in_string: bool,
    escaped: bool,
}

impl JsonCursor {
    /// Moves past `bytes`, the next piece of the text.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.open.push(b),
                b'}' | b']' => {
                    self.open.pop();
                }
                _ => {}
            }
        }
    }

    /// The character that closes the innermost open value: `"` inside a string, else `]` or
    /// `}` for the innermost open container; `None` when nothing is open.
    pub(super) fn closer(&self) -> Option<u8> {
        if self.in_string {
            return (!self.escaped).then_some(b'"');
        }
        self.open.last().map(|open| if *open == b'{' { b'}' } else { b']' })
    }
}

/// The model's tokens for `"`, `]` and `}` on their own (`None` for one the vocabulary has no
/// single token for).
#[derive(Debug)]
pub(super) struct Closers([Option<LlamaToken>; 3]);

impl Closers {
    /// Looks the three tokens up in `model`'s vocabulary.
    pub(super) fn of(model: &LlamaModel) -> Self {
        let vocab = model.vocab();
        let single = |c: &[u8]| match vocab.tokenize(c, false, false).as_slice() {
            [token] => Some(*token),
            _ => None,
        };
        Self([single(b"\""), single(b"]"), single(b"}")])
    }

    /// The token for the closing character `c`.
    pub(super) fn token(&self, c: u8) -> Option<LlamaToken> {
        match c {
            b'"' => self.0[0],
            b']' => self.0[1],
            b'}' => self.0[2],
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closer_after(text: &str) -> Option<char> {
        let mut cursor = JsonCursor::default();
        // In pieces, as tokens come.
        for piece in text.as_bytes().chunks(3) {
            cursor.feed(piece);
        }
        cursor.closer().map(char::from)
    }

    #[test]
    fn the_innermost_open_value_is_closed_first() {
        assert_eq!(closer_after(r#"{"steps": [{"id": "a"#), Some('"'));
        assert_eq!(closer_after(r#"{"steps": [{"id": "a""#), Some('}'));
        assert_eq!(closer_after(r#"{"steps": [{"id": "a"}"#), Some(']'));
        assert_eq!(closer_after(r#"{"steps": [{"id": "a"}]"#), Some('}'));
        assert_eq!(closer_after(r#"{"steps": [{"id": "a"}]}"#), None);
        assert_eq!(closer_after(""), None);
    }

    #[test]
    fn brackets_and_escaped_quotes_inside_strings_are_text() {
        assert_eq!(closer_after(r#"{"a": "x]}{[ \"quoted\" "#), Some('"'));
        assert_eq!(closer_after(r#"{"a": "back\\"#), Some('"'), "an escaped backslash");
        assert_eq!(closer_after(r#"{"a": "back\"#), None, "after a backslash: no closing yet");
        assert_eq!(closer_after(r#"{"a": ["x]", "y"#), Some('"'));
        assert_eq!(closer_after(r#"{"a": ["x]", "y""#), Some(']'));
    }

    #[test]
    fn closing_starts_a_few_dozen_tokens_before_the_limit() {
        assert_eq!(closing_from(2048), 2048 - CLOSING_TOKENS);
        assert_eq!(closing_from(256), 256 - CLOSING_TOKENS);
        assert_eq!(closing_from(100), 75);
        assert_eq!(closing_from(0), 0);
    }
}
