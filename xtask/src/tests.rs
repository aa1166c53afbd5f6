//! Unit tests for xtask's parsers and checks, on captured samples.

use crate::bench::{self, Figure, Row, Throughput};
use crate::coverage::{LineCoverage, parse_total};
use crate::{ci, long_fns, tidy};

/// `cargo llvm-cov --workspace --summary-only` output, shortened.
const LLVM_COV_REPORT: &str = "\
Filename                      Regions    Missed Regions     Cover   Functions  Missed Functions  Executed       Lines      Missed Lines     Cover    Branches   Missed Branches     Cover
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
agent-state/src/lib.rs             40                 4    90.00%          10                 1    90.00%         120                 9    92.50%           0                 0         -
xtask/src/main.rs                  10                10     0.00%           2                 2     0.00%          30                30     0.00%           0                 0         -
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
TOTAL                              50                14    72.00%          12                 3    75.00%         150                39    74.00%           0                 0         -
";

#[test]
fn coverage_reads_lines_from_the_total_row_by_column_name() -> anyhow::Result<()> {
    let coverage = parse_total(LLVM_COV_REPORT)?;
    assert_eq!(coverage, LineCoverage { covered: 111, total: 150 });
    assert_eq!(coverage.summary(), "line coverage: 74.00% (111/150 lines)");
    Ok(())
}

#[test]
fn coverage_without_a_total_row_is_an_error() {
    let without_total: Vec<&str> =
        LLVM_COV_REPORT.lines().filter(|line| !line.starts_with("TOTAL")).collect();
    let without_total = without_total.join("\n");
    assert!(parse_total(&without_total).is_err());
    assert!(parse_total("").is_err());
}

#[test]
fn coverage_of_nothing_is_not_a_division_by_zero() {
    let summary = LineCoverage { covered: 0, total: 0 }.summary();
    assert_eq!(summary, "line coverage: n/a (no instrumented lines)");
}

#[test]
fn layering_bans_async_and_io_crates_and_every_tokio_crate() {
    for banned in ["tokio", "tokio-util", "tokio-macros", "sled", "async-trait", "futures", "mio"] {
        assert!(ci::is_banned(banned), "{banned} should be banned");
    }
    assert!(ci::is_banned("async-nats"));
    for allowed in ["serde", "serde_json", "thiserror", "uuid", "agent-state", "async-stream-x"] {
        assert!(!ci::is_banned(allowed), "{allowed} should be allowed");
    }
}

#[test]
fn tidy_finds_machine_paths_only_where_a_path_starts() {
    let home = concat!("/", "home/");
    let work = concat!("/", "work/");
    assert_eq!(tidy::machine_path(&format!("see {home}me/notes")), Some(home));
    assert_eq!(tidy::machine_path(&format!("\"{work}main/target\"")), Some(work));
    assert_eq!(tidy::machine_path(&format!("{work}x")), Some(work));
    assert_eq!(tidy::machine_path(&format!("https://example.com{home}")), None);
    assert_eq!(tidy::machine_path(&format!("crates{work}")), None);
    assert_eq!(tidy::machine_path("-sd /var/lib/nats-server"), None);
}

#[test]
fn tidy_finds_print_macros_but_not_lookalikes() {
    assert_eq!(tidy::print_macro("    println!(\"x\");"), Some("println"));
    assert_eq!(tidy::print_macro("eprintln!(\"{e}\")"), Some("eprintln"));
    assert_eq!(tidy::print_macro("let x = dbg!(y);"), Some("dbg"));
    assert_eq!(tidy::print_macro("tracing::info!(\"x\")"), None);
    assert_eq!(tidy::print_macro("my_println!(x)"), None);
}

#[test]
fn tidy_requires_a_doc_line_in_rust_files_under_crates_and_xtask() {
    let none: &[String] = &[];
    assert_eq!(tidy::check_file("crates/a/src/x.rs", "//! Holds x.\nfn f() {}\n", none).len(), 0);
    assert_eq!(tidy::check_file("crates/a/src/x.rs", "fn f() {}\n", none).len(), 1);
    assert_eq!(tidy::check_file("xtask/src/x.rs", "// not a doc line\n", none).len(), 1);
    assert_eq!(tidy::check_file("README.md", "no doc line\n", none).len(), 0);
}

#[test]
fn tidy_forbids_printing_in_library_crates_only() {
    let text = "//! Holds f.\nfn f() {\n    println!(\"hi\");\n}\n";
    let binaries = ["strata".to_owned()];
    let problems = tidy::check_file("crates/agent-core/src/lib.rs", text, &binaries);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("crates/agent-core/src/lib.rs:3:"), "{problems:?}");
    for may_print in [
        "crates/strata/src/run.rs",
        "crates/agent-core/src/bin/tool.rs",
        "crates/strata-cli/src/lib.rs",
        "crates/agent-core/tests/it/main.rs",
        "xtask/src/main.rs",
    ] {
        assert_eq!(
            tidy::check_file(may_print, text, &binaries),
            Vec::<String>::new(),
            "{may_print}"
        );
    }
    let commented =
        "//! Holds f.\n/// ```\n/// println!(\"in a doc example\");\n/// ```\nfn f() {}\n";
    assert_eq!(tidy::check_file("crates/a/src/lib.rs", commented, &binaries).len(), 0);
}

#[test]
fn bench_formats_times_and_throughput_in_human_units() {
    let rate = Figure {
        id: "pool/spawn_agent".to_owned(),
        values: vec![("spawns_per_s".to_owned(), 26_251.4), ("runs".to_owned(), 15.0)],
    };
    assert_eq!(bench::format_figure(&rate), "26251 spawns/s, runs 15");
    assert_eq!(bench::format_time(812.4), "812.40 ns");
    assert_eq!(bench::format_time(3_210.0), "3.21 µs");
    assert_eq!(bench::format_time(1_500_000.0), "1.50 ms");
    assert_eq!(bench::format_time(2e9), "2.00 s");
    // 1000 elements in 1 µs: 1e9 elements per second.
    assert_eq!(bench::format_throughput(Throughput::Elements(1000.0), 1000.0), "1.00 Gelem/s");
    assert_eq!(bench::format_throughput(Throughput::Elements(1.0), 2e9), "0.50 elem/s");
    assert_eq!(bench::format_throughput(Throughput::Bytes(1024.0), 1e9), "1.00 KiB/s");
}

#[test]
fn bench_reads_every_criterion_result_and_prints_one_table() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("xtask-bench-test-{}", std::process::id()));
    let write = |relative: &str, json: &str| -> anyhow::Result<()> {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
        std::fs::write(path, json)?;
        Ok(())
    };
    let estimates = |median: f64| {
        format!(
            r#"{{"mean":{{"point_estimate":{median}}},"median":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0}},"point_estimate":{median},"standard_error":0.1}},"slope":null}}"#
        )
    };
    write("lifecycle/apply/new/estimates.json", &estimates(250.0))?;
    write(
        "lifecycle/apply/new/benchmark.json",
        r#"{"group_id":"lifecycle","function_id":"apply","value_str":null,"throughput":null,"full_id":"lifecycle/apply","directory_name":"lifecycle/apply","title":"lifecycle/apply"}"#,
    )?;
    write("bus/publish/100/new/estimates.json", &estimates(50_000.0))?;
    write(
        "bus/publish/100/new/benchmark.json",
        r#"{"group_id":"bus","function_id":"publish","value_str":"100","throughput":{"Elements":100},"full_id":"bus/publish/100","directory_name":"bus/publish/100","title":"bus/publish/100"}"#,
    )?;
    write("bus/publish/100/base/estimates.json", &estimates(1.0))?;
    write("bus/publish/100/report/index.html", "<html></html>")?;

    let rows = bench::read_results(&dir);
    std::fs::remove_dir_all(&dir)?;
    let rows = rows?;
    assert_eq!(
        rows,
        vec![
            Row {
                id: "bus/publish/100".to_owned(),
                median_ns: 50_000.0,
                throughput: Some(Throughput::Elements(100.0)),
            },
            Row { id: "lifecycle/apply".to_owned(), median_ns: 250.0, throughput: None },
        ]
    );
    assert_eq!(
        bench::table(&rows, &[]),
        "\
benchmark           median  throughput
bus/publish/100   50.00 µs  2.00 Melem/s
lifecycle/apply  250.00 ns"
    );
    Ok(())
}

#[test]
fn bench_reads_figures_and_prints_them_in_the_same_table() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("xtask-bench-figures-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a-run-directory"))?;
    std::fs::write(
        dir.join("memory.json"),
        r#"{"id": "pool/memory_per_idle_agent", "bytes_per_agent": 812.3, "agents": 100000}"#,
    )?;
    std::fs::write(
        dir.join("latency.json"),
        r#"{"id": "bus/send_latency", "p50_us": 2017.0, "p99_us": 23247.0, "sends": 43975, "note": "x"}"#,
    )?;
    std::fs::write(dir.join("notes.txt"), "not a figure")?;
    let figures = bench::read_figures(&dir);
    std::fs::remove_dir_all(&dir)?;
    let figures = figures?;
    let values = |values: &[(&str, f64)]| -> Vec<(String, f64)> {
        values.iter().map(|(name, value)| ((*name).to_owned(), *value)).collect()
    };
    assert_eq!(
        figures,
        vec![
            Figure {
                id: "bus/send_latency".to_owned(),
                values: values(&[("p50_us", 2017.0), ("p99_us", 23247.0), ("sends", 43975.0)]),
            },
            Figure {
                id: "pool/memory_per_idle_agent".to_owned(),
                values: values(&[("agents", 100_000.0), ("bytes_per_agent", 812.3)]),
            },
        ]
    );

    let rows = vec![
        Row {
            id: "pool/tick_idle/1000".to_owned(),
            median_ns: 100.0,
            throughput: Some(Throughput::Elements(1000.0)),
        },
        Row { id: "lifecycle/apply".to_owned(), median_ns: 250.0, throughput: None },
    ];
    assert_eq!(
        bench::table(&rows, &figures),
        "\
benchmark                      median  throughput     figures
bus/send_latency                                      p50 2.02 ms, p99 23.25 ms, sends 43975
lifecycle/apply             250.00 ns
pool/memory_per_idle_agent                            812.3 B/agent, agents 100000
pool/tick_idle/1000         100.00 ns  10.00 Gelem/s"
    );
    Ok(())
}

#[test]
fn bench_figure_without_an_id_is_an_error() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("xtask-bench-bad-figure-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("memory.json"), r#"{"bytes_per_agent": 812.3}"#)?;
    let figures = bench::read_figures(&dir);
    std::fs::remove_dir_all(&dir)?;
    assert!(figures.is_err());
    assert_eq!(bench::read_figures(&dir.join("missing"))?, Vec::new());
    Ok(())
}

#[test]
fn bench_without_results_reads_nothing() -> anyhow::Result<()> {
    let missing = std::env::temp_dir().join("xtask-bench-test-no-such-dir");
    assert_eq!(bench::read_results(&missing)?, Vec::new());
    Ok(())
}

#[test]
fn commands_are_shown_as_a_shell_would_read_them() {
    let mut command = std::process::Command::new("cargo");
    command.env("RUSTDOCFLAGS", "-Dwarnings").args(["bench", "--bench", "*", "--", "it's"]);
    assert_eq!(
        crate::show(&command),
        r"RUSTDOCFLAGS=-Dwarnings cargo bench --bench '*' -- 'it'\''s'"
    );
}

#[test]
fn simulate_reads_its_seeds_and_start() -> anyhow::Result<()> {
    use crate::simulate::{DEFAULT_SEEDS, args};
    assert_eq!(args(&[])?, (DEFAULT_SEEDS, 0));
    assert_eq!(args(&["--seeds", "1", "--start", "4242"])?, (1, 4242));
    assert_eq!(args(&["--start", "7"])?, (DEFAULT_SEEDS, 7));
    assert!(args(&["--seeds"]).is_err());
    assert!(args(&["--seeds", "many"]).is_err());
    assert!(args(&["--kills", "3"]).is_err());
    Ok(())
}

/// A function of `body_lines` lines between its signature and its closing brace.
fn function(name: &str, params: &str, body_lines: usize) -> String {
    let body: String = (0..body_lines).map(|i| format!("    let _x{i} = {i};\n")).collect();
    format!("fn {name}({params}) {{\n{body}}}\n")
}

#[test]
fn long_fns_finds_a_function_over_80_lines_with_its_line_and_length() {
    let text = format!("//! A file.\n\n{}{}", function("short", "", 78), function("long", "", 79));
    let found = long_fns::long_fns(&text);
    assert_eq!(
        found,
        vec![long_fns::LongFn { name: "long".into(), line: 83, lines: 81, params: 0 }],
        "an 80-line function passes, an 81-line one does not"
    );
    assert_eq!(
        found[0].problem("crates/x/src/lib.rs"),
        "crates/x/src/lib.rs:83: fn `long` is 81 lines long (at most 80); split it into smaller \
         functions, or gather its parameters in a type"
    );
}

#[test]
fn long_fns_counts_parameters_but_not_self_nor_commas_inside_types() {
    let six = "&self, a: u8, b: BTreeMap<String, Vec<(u8, u8)>>, c: impl Fn(u8, u8) -> bool, d: [u8; 2], e: &'a str, f: u8";
    let seven = "mut self, a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8,";
    let text = format!("{}{}", function("six", six, 1), function("seven", seven, 1));
    let found = long_fns::long_fns(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].name.as_str(), found[0].params), ("seven", 7));
    assert!(found[0].problem("p.rs").contains("takes 7 parameters (at most 6)"));
    let declaration =
        "trait T { fn many(&self, a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8); }";
    assert_eq!(long_fns::long_fns(declaration)[0].params, 7);
}

#[test]
fn long_fns_ignores_braces_and_fn_in_comments_strings_and_chars() {
    let body = "    // } fn fake(a: u8) {\n    let _s = \"}}}\";\n    let _c = '}';\n    let _r = r#\"{ \"}\" \"#;\n    /* } */\n";
    let text = format!("fn outer<'a>(x: &'a str) {{\n{body}}}\n{}", function("after", "", 81));
    let found = long_fns::long_fns(&text);
    let names: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["after"], "`outer` ends at its own brace; nothing in a literal counts");
    assert_eq!(found[0].line, 8);
}

#[test]
fn long_fns_leaves_out_test_code_but_not_the_code_after_it() {
    let text = format!(
        "#[cfg(test)]\nmod tests {{\n{}}}\n#[test]\n{}#[tokio::test(flavor = \"multi_thread\")]\n{}{}",
        function("in_test_module", "", 90),
        function("a_test", "", 90),
        function("an_async_test", "", 90),
        function("library", "", 90),
    );
    let names: Vec<String> = long_fns::long_fns(&text).into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["library"]);
}

#[test]
fn long_fns_counts_a_nested_function_on_its_own_and_skips_fn_pointer_types() {
    let inner = function("inner", "a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8", 1);
    let text = format!("fn outer(callback: fn(u8) -> u8) {{\n{inner}}}\nfn fn_like() {{}}\n");
    let names: Vec<String> = long_fns::long_fns(&text).into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["inner"]);
}

#[test]
fn long_fns_scans_crate_and_xtask_sources_and_tidy_enforces_the_checked_crates() {
    assert!(long_fns::scanned("crates/message-bus/src/nats.rs"));
    assert!(long_fns::scanned("xtask/src/chaos.rs"));
    for left_out in [
        "crates/message-bus/tests/bus.rs",
        "crates/message-bus/src/tests.rs",
        "crates/agent-llm/src/local/grammar_tests.rs",
        "crates/agent-pool/src/guard/tests/mod.rs",
        "crates/agent-pool/examples/hello_team.rs",
        "crates/message-bus/README.md",
    ] {
        assert!(!long_fns::scanned(left_out), "{left_out} should not be scanned");
    }
    assert!(long_fns::enforced("crates/message-bus/src/nats.rs"));
    assert!(!long_fns::enforced("crates/agent-cli/src/run.rs"));
    let long = function("long", "", 79);
    let problems = tidy::check_file("crates/message-bus/src/x.rs", &format!("//! x\n{long}"), &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("crates/message-bus/src/x.rs:2: fn `long` is 81 lines"));
    assert!(
        tidy::check_file("crates/agent-cli/src/x.rs", &format!("//! x\n{long}"), &[]).is_empty()
    );
}
