//! An eval's report as a small hand-written SVG plot: a line per task and team (then per
//! team), with its pass rate as a bar, and its wall times as a box (median to 90th percentile)
//! with a whisker (shortest to longest) on a scale shared by every line.

use std::fmt::Write as _;

use super::report::{Report, Row, seconds};

const LABEL_W: f64 = 260.0;
const BAR_W: f64 = 200.0;
const GAP: f64 = 30.0;
const BOX_W: f64 = 320.0;
const LINE_H: f64 = 24.0;
const TOP: f64 = 56.0;

/// `text` safe in SVG text and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

impl Report {
    /// The report as an SVG image (see the module docs).
    pub fn svg(&self) -> String {
        let rows: Vec<&Row> = self.rows.iter().chain(&self.teams).collect();
        let longest =
            rows.iter().filter_map(|r| r.wall.map(|w| w.max_ms)).max().unwrap_or(0).max(1);
        let width = LABEL_W + BAR_W + GAP + BOX_W + 20.0;
        let height = TOP + LINE_H * rows.len() as f64 + 30.0;
        let bar_x = LABEL_W;
        let box_x = LABEL_W + BAR_W + GAP;
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="10" y="20" font-size="14" font-weight="bold">eval {} ({} attempts of each task by each team)</text>"#,
            escape(&self.eval_id),
            self.repeat
        );
        let _ = writeln!(svg, r#"<text x="{bar_x}" y="44">pass rate</text>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{box_x}" y="44">wall time 0 to {}: box median to p90, line min to max</text>"#,
            seconds(longest)
        );
        for (i, row) in rows.iter().enumerate() {
            let y = TOP + LINE_H * i as f64;
            line(&mut svg, row, y, longest);
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// One line of the plot: `row` at height `y`, its wall times on a scale to `longest` ms.
fn line(svg: &mut String, row: &Row, y: f64, longest: u64) {
    let mid = y + LINE_H / 2.0;
    let label = if row.task == "*" {
        format!("{} (all tasks)", row.team)
    } else {
        format!("{} / {}", row.task, row.team)
    };
    let weight = if row.task == "*" { "bold" } else { "normal" };
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{}" font-weight="{weight}">{}</text>"#,
        mid + 4.0,
        escape(&label)
    );
    let bar_x = LABEL_W;
    let rate = if row.attempts == 0 { 0.0 } else { row.passed as f64 / row.attempts as f64 };
    let _ = writeln!(
        svg,
        r##"<rect x="{bar_x}" y="{}" width="{BAR_W}" height="{}" fill="#eeeeee"/><rect x="{bar_x}" y="{}" width="{:.1}" height="{}" fill="#3a9d5d"/><text x="{}" y="{}">{}/{}</text>"##,
        y + 4.0,
        LINE_H - 8.0,
        y + 4.0,
        BAR_W * rate,
        LINE_H - 8.0,
        bar_x + 4.0,
        mid + 4.0,
        row.passed,
        row.attempts
    );
    let Some(wall) = row.wall else { return };
    let box_x = LABEL_W + BAR_W + GAP;
    let at = |ms: u64| box_x + BOX_W * ms as f64 / longest as f64;
    let _ = writeln!(
        svg,
        r##"<line x1="{:.1}" y1="{mid}" x2="{:.1}" y2="{mid}" stroke="#555555"/><rect x="{:.1}" y="{}" width="{:.1}" height="{}" fill="#7aa6d6" stroke="#2b5d8f"/><line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#12324f" stroke-width="2"/>"##,
        at(wall.min_ms),
        at(wall.max_ms),
        at(wall.p50_ms),
        y + 5.0,
        (at(wall.p90_ms) - at(wall.p50_ms)).max(1.0),
        LINE_H - 10.0,
        at(wall.p50_ms),
        y + 3.0,
        at(wall.p50_ms),
        y + LINE_H - 3.0
    );
}
