//! The one rule for "`notes/todo.md` lists three tasks", the one-file goal of
//! `cargo xtask bench --models`. A file of its own, without dependencies, so that the CI test of
//! the same goal on the embedded model (agent-cli's `tests/it/local.rs`, which includes it by
//! path) checks exactly what the bench checks.

/// How many list items (`-`, `*`, `+`, `1.`, `1)`, each optionally `[ ]` or `[x]`) with some
/// text each (three letters or digits at least) `text` holds.
pub(crate) fn list_items(text: &str) -> usize {
    text.lines()
        .map(str::trim_start)
        .filter_map(|line| {
            let rest = line
                .strip_prefix("- ")
                .or_else(|| line.strip_prefix("* "))
                .or_else(|| line.strip_prefix("+ "))
                .or_else(|| {
                    let digits = line.chars().take_while(char::is_ascii_digit).count();
                    (digits > 0)
                        .then(|| &line[digits..])
                        .and_then(|r| r.strip_prefix(". ").or_else(|| r.strip_prefix(") ")))
                })?;
            let rest = rest.trim_start_matches("[ ]").trim_start_matches("[x]").trim();
            (rest.chars().filter(|c| c.is_alphanumeric()).count() >= 3).then_some(rest)
        })
        .count()
}
