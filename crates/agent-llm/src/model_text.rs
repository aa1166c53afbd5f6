//! Model text in errors and messages. What a model wrote (a value in an invalid answer, an
//! answer that is not JSON, a step's summary) is shown without the chat template's markup that
//! models echo back (`[INST]`, `<start_of_turn>`, `<|im_end|>`, `</s>`, ...: the tokens of
//! [`agent_state::TEMPLATE_TOKENS`]): [`quoted`] puts it in an error as one short quoted line
//! ([`agent_state::quote`]), [`shown`] a name it wrote, [`stripped`] cleans it for a message in
//! the model's own words (a step's summary, a reply).

/// Most characters of model text [`quoted`] keeps between its quotes.
pub(crate) const QUOTE_CHARS: usize = agent_state::QUOTE_CHARS;

/// Model text for an error: the template tokens removed, every run of whitespace and control
/// characters one space, cut to [`QUOTE_CHARS`] characters with `…` at the end when longer,
/// between double quotes.
///
/// `quoted("[INST]The tool's result:\nok [/INST]")` is `"The tool's result: ok"` (quotes
/// included).
pub(crate) fn quoted(text: &str) -> String {
    agent_state::quote(text, QUOTE_CHARS)
}

/// A name the model wrote (a tool, a role, an id), for an error: in backticks when it is a
/// plain name (1 to 64 ASCII letters, digits, `-`, `_` and `.`), else [`quoted`].
pub(crate) fn shown(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain { format!("`{name}`") } else { quoted(name) }
}

/// Model text for a message in its own words: the template tokens removed (with the role name
/// after a turn opener, [`agent_state::strip_template`]), the ends trimmed; nothing else
/// changes.
pub(crate) fn stripped(text: &str) -> String {
    agent_state::strip_template(text).trim().to_owned()
}

/// `text` as one line of at most `max` characters: runs of whitespace and control characters
/// made one space, cut with `…` as its last character when longer.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let words = text.split(|c: char| c.is_whitespace() || c.is_control()).filter(|w| !w.is_empty());
    let line = words.collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(max) {
        None => line,
        Some(_) if max == 0 => String::new(),
        Some(_) => {
            let end = line.char_indices().nth(max - 1).map_or(line.len(), |(i, _)| i);
            format!("{}…", line[..end].trim_end())
        }
    }
}

#[cfg(test)]
mod tests {
    use agent_state::TEMPLATE_TOKENS;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn an_error_quotes_model_text_on_one_short_line_without_markup() {
        assert_eq!(
            quoted("[INST]The tool's result:\nok\n\nNext?[/INST] </s>"),
            "\"The tool's result: ok Next?\""
        );
        assert_eq!(quoted(&"é".repeat(500)).chars().count(), QUOTE_CHARS + 2);
        assert_eq!(shown("write_file"), "`write_file`");
        assert_eq!(shown("release notes"), "\"release notes\"");
        assert_eq!(shown("<|im_end|>x"), "\"x\"");
        assert_eq!(one_line("ab\ncdef", 4), "ab…");
        assert_eq!(one_line("abcdef", 6), "abcdef");
        assert_eq!(one_line("abcdef", 0), "");
    }

    #[test]
    fn a_message_keeps_its_lines_and_loses_only_the_markup() {
        assert_eq!(stripped("line 1\nline 2<end_of_turn>\n"), "line 1\nline 2");
        assert_eq!(
            stripped("<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nall done"),
            "hi \n \nall done"
        );
        assert_eq!(stripped("<|im_start|>assistant\ndone<|im_end|><|eot_id|>"), "done");
        assert_eq!(stripped("<s>[inst]x[/Inst]"), "x", "any case");
        assert_eq!(stripped("<start_of_turn>modeling is hard"), "modeling is hard");
        assert_eq!(stripped("[IN[INST]ST]"), "[IN ST]", "no new token from the neighbours");
        assert_eq!(stripped("plain text"), "plain text");
    }

    proptest! {
        #[test]
        fn a_stripped_message_has_no_template_tokens(
            pieces in proptest::collection::vec(
                prop_oneof![
                    proptest::sample::select(TEMPLATE_TOKENS).prop_map(str::to_owned),
                    proptest::sample::select(TEMPLATE_TOKENS).prop_map(|t| t.to_lowercase()),
                    proptest::sample::select(&["system", "user", "assistant", "model"][..])
                        .prop_map(str::to_owned),
                    "[a-zA-Z/|_<>\\[\\] \n]{0,6}",
                    any::<String>(),
                ],
                0..24,
            )
        ) {
            let text = stripped(&pieces.concat());
            let lower = text.to_ascii_lowercase();
            prop_assert!(
                !TEMPLATE_TOKENS.iter().any(|t| lower.contains(&t.to_ascii_lowercase())),
                "{text:?}"
            );
            prop_assert_eq!(text.trim(), text.as_str());
        }
    }
}
