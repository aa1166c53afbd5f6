//! `cargo xtask coverage`: the workspace's line coverage, measured by cargo-llvm-cov.

use std::path::Path;

use anyhow::{Context, bail};

use crate::{capture, cargo, succeeds};

/// Lines of code that the tests ran, out of all instrumented lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineCoverage {
    pub(crate) covered: u64,
    pub(crate) total: u64,
}

/// Runs the tests under cargo-llvm-cov, shows its per-file table and prints the line coverage.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    if !succeeds(cargo(root).args(["llvm-cov", "--version"])) {
        bail!(
            "cargo-llvm-cov is not installed; install it with:\n    \
             cargo install cargo-llvm-cov --locked\n    \
             rustup component add llvm-tools-preview"
        );
    }
    let report = capture(cargo(root).args(["llvm-cov", "--workspace", "--summary-only"]))?;
    print!("{report}");
    let coverage = parse_total(&report)?;
    println!("{}", coverage.summary());
    Ok(())
}

impl LineCoverage {
    /// `line coverage: 87.50% (7/8 lines)`.
    pub(crate) fn summary(self) -> String {
        if self.total == 0 {
            return "line coverage: n/a (no instrumented lines)".to_owned();
        }
        #[allow(clippy::cast_precision_loss, reason = "line counts are far below 2^52")]
        let percent = self.covered as f64 * 100.0 / self.total as f64;
        format!("line coverage: {percent:.2}% ({}/{} lines)", self.covered, self.total)
    }
}

/// Reads the line counts from the `TOTAL` row of `cargo llvm-cov --summary-only`'s table.
///
/// The columns are found by name in the header row (`Filename  Regions  Missed Regions  Cover
/// ...  Lines  Missed Lines  Cover ...`), so added or reordered columns do not break it.
pub(crate) fn parse_total(report: &str) -> anyhow::Result<LineCoverage> {
    let header = report
        .lines()
        .find(|line| line.trim_start().starts_with("Filename"))
        .context("no header row (`Filename ...`) in the cargo llvm-cov report")?;
    let columns = column_names(header);
    let column = |name: &str| {
        columns
            .iter()
            .position(|column| column == name)
            .with_context(|| format!("no `{name}` column in the cargo llvm-cov report"))
    };
    let (lines_at, missed_at) = (column("Lines")?, column("Missed Lines")?);
    let total_row: Vec<&str> = report
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&"TOTAL"))
        .context("no TOTAL row in the cargo llvm-cov report")?;
    let cell = |at: usize| -> anyhow::Result<u64> {
        let text = total_row.get(at).context("the TOTAL row is shorter than the header")?;
        text.parse().with_context(|| format!("`{text}` in the TOTAL row is not a line count"))
    };
    let (total, missed) = (cell(lines_at)?, cell(missed_at)?);
    let covered = total
        .checked_sub(missed)
        .with_context(|| format!("the TOTAL row misses {missed} of only {total} lines"))?;
    Ok(LineCoverage { covered, total })
}

/// The header's column names; `Missed` joins the word after it (`Missed Lines` is one column).
fn column_names(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut words = header.split_whitespace();
    while let Some(word) = words.next() {
        match (word, words.clone().next()) {
            ("Missed", Some(next)) => {
                names.push(format!("Missed {next}"));
                words.next();
            }
            _ => names.push(word.to_owned()),
        }
    }
    names
}
