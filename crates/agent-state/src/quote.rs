//! Model text in messages: [`quote`] shows what a model wrote (a judgement, a veto reason, the
//! summary of a step it gave up) inside a failure reason or another message as one short,
//! quoted line, so it cannot pass for the runtime's own words, run on for pages, or carry the
//! chat template's markup (`[INST]`, `<start_of_turn>`, `<|im_end|>`, ...) that small models
//! echo back.

/// How many characters of model text a message quotes by default (see [`quote`]).
pub const QUOTE_CHARS: usize = 200;

/// The chat-template tokens [`quote`] removes (compared ignoring ASCII case): Llama 2 and
/// Mistral (`[INST]`, `<<SYS>>`, `<s>`), Gemma (`<start_of_turn>`, `<bos>`), ChatML
/// (`<|im_start|>`), Llama 3 (`<|start_header_id|>`, `<|eot_id|>`), Phi (`<|user|>`,
/// `<|end|>`) and GPT-style end markers (`<|endoftext|>`).
pub const TEMPLATE_TOKENS: &[&str] = &[
    "[INST]",
    "[/INST]",
    "<<SYS>>",
    "<</SYS>>",
    "<s>",
    "</s>",
    "<bos>",
    "<eos>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|im_start|>",
    "<|im_end|>",
    "<|im_sep|>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
];

/// The roles a template names right after a turn's opening token (`<start_of_turn>model`,
/// `<|im_start|>assistant`, `<|start_header_id|>user<|end_header_id|>`): removed with it.
const ROLES: &[&str] = &["system", "user", "assistant", "model"];

/// Tokens after which a role name is part of the markup.
const TURN_OPENERS: &[&str] = &["<start_of_turn>", "<|im_start|>", "<|start_header_id|>"];

/// `text` as one quoted line of at most `max_chars` characters between the quotes: the
/// chat-template tokens of [`TEMPLATE_TOKENS`] removed (with the role name a turn's opening
/// token carries), every run of whitespace and control characters made one space, the ends
/// trimmed, and text longer than `max_chars` cut at a character boundary with `…` as its last
/// character. The result is `"…"`-wrapped: `quote("  [INST]every step\nfailed ", 200)` is
/// `"every step failed"` with the quotes; empty text is `""`.
///
/// ```
/// use agent_state::quote;
///
/// assert_eq!(quote("<start_of_turn>model\nall  done<end_of_turn>", 200), "\"all done\"");
/// assert_eq!(quote("abcdef", 4), "\"abc…\"");
/// ```
pub fn quote(text: &str, max_chars: usize) -> String {
    let line = one_line(&strip_template(text));
    let inner = cut(&line, max_chars);
    let mut out = String::with_capacity(inner.len() + 2);
    out.push('"');
    out.push_str(&inner);
    out.push('"');
    out
}

/// `text` with every chat-template token (and the role after a turn's opening token) replaced
/// by a space. A space, never nothing: removing a token cannot join its neighbours into a new
/// one (`[IN[INST]ST]` becomes `[IN ST]`, not `[INST]`). Nothing else changes: for model text
/// shown in its own words (a step's summary, a reply); [`quote`] for an error.
pub fn strip_template(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while let Some(c) = rest.chars().next() {
        if c == '[' || c == '<' {
            for token in TEMPLATE_TOKENS {
                if starts_with_ignore_case(rest, token) {
                    rest = &rest[token.len()..];
                    if TURN_OPENERS.contains(token) {
                        rest = skip_role(rest);
                    }
                    out.push(' ');
                    continue 'scan;
                }
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `rest` past the role name it starts with (after optional spaces), if it starts with one
/// that ends there (followed by whitespace, markup or nothing).
fn skip_role(rest: &str) -> &str {
    let trimmed = rest.trim_start_matches([' ', '\t']);
    for role in ROLES {
        if starts_with_ignore_case(trimmed, role) {
            let after = &trimmed[role.len()..];
            if after.chars().next().is_none_or(|c| !c.is_alphanumeric()) {
                return after;
            }
        }
    }
    rest
}

/// Whether `text` starts with `prefix`, ignoring ASCII case (`prefix` is ASCII).
fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Every run of whitespace and control characters as one space, the ends trimmed.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()).filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// At most `max` characters of `text`: when it is longer, its first `max - 1` and `…`.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some(_) if max == 0 => String::new(),
        Some(_) => {
            let end = text.char_indices().nth(max - 1).map_or(text.len(), |(i, _)| i);
            format!("{}…", text[..end].trim_end())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use proptest::prelude::*;

    use super::*;

    fn has_token(text: &str) -> Option<&'static str> {
        let lower = text.to_ascii_lowercase();
        TEMPLATE_TOKENS.iter().copied().find(|t| lower.contains(&t.to_ascii_lowercase()))
    }

    #[test]
    fn template_tokens_and_turn_roles_are_stripped() {
        assert_eq!(
            quote("[INST]The tool's result:\nok\n\nNext?[/INST] </s>", 200),
            "\"The tool's result: ok Next?\""
        );
        assert_eq!(
            quote(
                "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nevery step failed",
                200
            ),
            "\"hi every step failed\""
        );
        assert_eq!(quote("<|im_start|>assistant\ndone<|im_end|><|eot_id|>", 200), "\"done\"");
        assert_eq!(
            quote("<|start_header_id|>assistant<|end_header_id|>\n\nfine<|eot_id|>", 200),
            "\"fine\""
        );
        // Only the role right after an opening token is markup; a word that merely starts
        // like one stays, and so does a role named elsewhere.
        assert_eq!(quote("<start_of_turn>modeling is hard", 200), "\"modeling is hard\"");
        assert_eq!(quote("ask the user", 200), "\"ask the user\"");
        // Case does not hide a token.
        assert_eq!(quote("[inst]x[/Inst]", 200), "\"x\"");
    }

    #[test]
    fn removing_a_token_does_not_join_its_neighbours_into_another() {
        assert_eq!(quote("[IN[INST]ST]", 200), "\"[IN ST]\"");
        assert_eq!(quote("<</s>s>", 200), "\"< s>\"");
    }

    #[test]
    fn whitespace_and_controls_collapse_and_long_text_is_cut_with_an_ellipsis() {
        assert_eq!(quote("  a\tb\r\n\u{1b}c  ", 200), "\"a b c\"");
        assert_eq!(quote("", 200), "\"\"");
        assert_eq!(quote("[INST] [/INST]", 200), "\"\"");
        assert_eq!(quote("abcdef", 6), "\"abcdef\"");
        assert_eq!(quote("abcdef", 5), "\"abcd…\"");
        assert_eq!(quote("ab cdef", 4), "\"ab…\"", "no space before the ellipsis");
        assert_eq!(quote("abcdef", 1), "\"…\"");
        assert_eq!(quote("abcdef", 0), "\"\"");
        // Cut between characters, never inside one.
        assert_eq!(quote("ééééé", 3), "\"éé…\"");
        assert_eq!(quote("👍👍👍", 2), "\"👍…\"");
    }

    /// Text built from pieces that small models write: template tokens (in any case), roles,
    /// whitespace, quotes and arbitrary characters.
    fn model_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            proptest::sample::select(TEMPLATE_TOKENS).prop_map(str::to_owned),
            proptest::sample::select(TEMPLATE_TOKENS).prop_map(|t| t.to_ascii_lowercase()),
            proptest::sample::select(ROLES).prop_map(str::to_owned),
            Just("\n".to_owned()),
            Just(" ".to_owned()),
            Just("[".to_owned()),
            Just("<".to_owned()),
            Just("|".to_owned()),
            "[a-zA-Z/|_<>\\[\\]]{0,6}",
            any::<String>(),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn quote_is_bounded_one_line_and_free_of_template_tokens(
            text in model_text(),
            max in 0usize..64,
        ) {
            let quoted = quote(&text, max);
            prop_assert!(quoted.starts_with('"') && quoted.ends_with('"') && quoted.len() >= 2);
            let inner = &quoted[1..quoted.len() - 1];
            prop_assert!(inner.chars().count() <= max, "{quoted:?} longer than {max}");
            prop_assert!(!inner.chars().any(|c| c.is_control()), "{quoted:?}");
            prop_assert!(!inner.starts_with(' ') && !inner.ends_with(' '), "{quoted:?}");
            prop_assert!(!inner.contains("  "), "{quoted:?}");
            prop_assert_eq!(has_token(&quoted), None, "{:?} from {:?}", quoted, text);
        }

        #[test]
        fn quote_never_panics_and_keeps_short_plain_text(text in "[a-z]{1,10}( [a-z]{1,10}){0,3}") {
            prop_assert_eq!(quote(&text, 200), format!("\"{text}\""));
        }
    }
}
