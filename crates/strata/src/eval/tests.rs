//! The eval's report (its counts, percentiles, table and SVG) and its typed stop reasons.

#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

fn result(passed: bool, wall_ms: u64, stop: Option<StopReason>) -> AttemptResult {
    AttemptResult {
        passed,
        status: if passed { RunStatus::Succeeded } else { RunStatus::Failed },
        stop,
        runaway: false,
        failure: None,
        check: passed.then_some(CheckResult { passed: true, code: Some(0), error: None }),
        wall_ms,
        model_calls: 2,
        tokens: 240,
        cost_usd: Some(0.5),
        repairs: 1,
    }
}

fn info(attempts: Vec<Attempt>) -> EvalInfo {
    EvalInfo {
        eval_id: agent_state::RunId::parse("eval-1").unwrap(),
        suite: PathBuf::from("/suite"),
        suite_sha256: String::new(),
        teams: vec![EvalTeam {
            label: "a<b>.toml".into(),
            path: "/a".into(),
            sha256: String::new(),
        }],
        repeat: 3,
        reasoner: None,
        flags: ModelFlags::default(),
        unsandboxed: false,
        started_at: 0,
        finished_at: None,
        status: EvalStatus::Running,
        failure: None,
        attempts,
    }
}

fn attempt(task: &str, repeat: u32, result: Option<AttemptResult>) -> Attempt {
    Attempt {
        task: task.into(),
        team: 0,
        repeat,
        run_id: Some(agent_state::RunId::parse(&format!("{task}-{repeat}")).unwrap()),
        result,
    }
}

#[test]
fn wall_times_are_nearest_rank_percentiles() {
    let w = WallTime::of(&[50, 10, 40, 30, 20, 60, 70, 80, 90, 100]).unwrap();
    assert_eq!((w.p50_ms, w.p90_ms, w.min_ms, w.max_ms), (50, 90, 10, 100));
    let one = WallTime::of(&[7]).unwrap();
    assert_eq!((one.p50_ms, one.p90_ms), (7, 7));
    assert_eq!(WallTime::of(&[]), None);
}

#[test]
fn the_report_counts_each_task_each_team_and_the_total() {
    let info = info(vec![
        attempt("pass", 1, Some(result(true, 100, None))),
        attempt("pass", 2, Some(result(true, 300, None))),
        attempt("pass", 3, None),
        attempt("loop", 1, Some(result(false, 200, Some(StopReason::Loop)))),
        attempt(
            "loop",
            2,
            Some(AttemptResult { cost_usd: None, ..result(false, 200, Some(StopReason::Budget)) }),
        ),
        attempt("loop", 3, Some(AttemptResult { runaway: true, ..result(false, 900, None) })),
    ]);
    let report = Report::of(&info);
    assert_eq!(report.rows.len(), 2);
    let pass = &report.rows[0];
    assert_eq!((pass.task.as_str(), pass.planned, pass.attempts, pass.passed), ("pass", 3, 2, 2));
    assert_eq!(pass.wall.unwrap().p50_ms, 100);
    assert_eq!(pass.cost_usd, Some(1.0));
    let looped = &report.rows[1];
    assert_eq!(looped.stops[&StopReason::Loop], 1);
    assert_eq!(looped.stops[&StopReason::Budget], 1);
    assert_eq!(looped.runaway, 1);
    assert_eq!(looped.cost_usd, None, "an unpriced call makes the cost unknown");
    assert_eq!(report.total.attempts, 5);
    assert_eq!(report.total.passed, 2);
    assert_eq!(report.total.model_calls, 10);
    assert_eq!(report.total.repairs, 5);
    assert_eq!(report.teams[0].tokens, 1200);
    let table = report.table();
    assert!(table.starts_with("task"), "{table}");
    assert!(table.contains("loop 1, budget 1"), "{table}");
    assert!(table.contains("2/2"), "{table}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["total"]["stops"]["loop"], 1);
}

#[test]
fn the_svg_plot_has_a_line_per_row_and_escapes_labels() {
    let report = Report::of(&info(vec![
        attempt("pass", 1, Some(result(true, 100, None))),
        attempt("fail", 1, Some(result(false, 400, Some(StopReason::Failed)))),
    ]));
    let svg = report.svg();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("pass / a&lt;b&gt;.toml"), "{svg}");
    assert!(!svg.contains("a<b>"), "{svg}");
    assert_eq!(svg.matches("fill=\"#3a9d5d\"").count(), 3, "two tasks and the team's line");
}

#[test]
fn stop_reasons_come_from_the_typed_failure() {
    let loop_ = TaskFailure::Loop { agent: "a".into(), item: "x".into(), repeats: 3 };
    assert_eq!(StopReason::of(&loop_), StopReason::Loop);
    let budget = TaskFailure::BudgetExceeded { reason: "calls".into() };
    assert_eq!(StopReason::of(&budget), StopReason::Budget);
    assert_eq!(StopReason::of(&TaskFailure::ShutDown), StopReason::Failed);
    assert_eq!(serde_json::to_value(StopReason::PingPong).unwrap(), "ping_pong");
}

#[test]
fn an_attempts_verdict_says_how_it_went() {
    assert_eq!(result(true, 10, None).verdict(), "passed");
    assert_eq!(result(false, 10, Some(StopReason::Failed)).verdict(), "failed");
    assert_eq!(result(false, 10, Some(StopReason::Loop)).verdict(), "failed (loop)");
    assert_eq!(result(false, 10, None).verdict(), "failed");
    let runaway = AttemptResult { runaway: true, ..result(false, 10, Some(StopReason::TimedOut)) };
    assert_eq!(runaway.verdict(), "runaway");
    let check = CheckResult { passed: false, code: Some(1), error: None };
    let checked = AttemptResult { check: Some(check), ..result(false, 10, None) };
    assert_eq!(checked.verdict(), "failed its check");
}
