//! Unit tests for xtask's parsers and checks, on captured samples.

use crate::bench::{self, Figure, Row, Throughput};
use crate::coverage::{LineCoverage, parse_total};
use crate::{ci, long_fns, publish, tidy};

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
    for allowed in
        ["serde", "serde_json", "thiserror", "uuid", "strata-agent-state", "async-stream-x"]
    {
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

/// A member called `name`, publishable or not, with `deps` as `(name, kind, versioned)`.
fn member(name: &str, publishable: bool, deps: &[(&str, &str, bool)]) -> publish::Member {
    publish::Member {
        name: name.to_owned(),
        dir: format!("crates/{name}"),
        publishable,
        deps: deps
            .iter()
            .map(|(name, kind, versioned)| publish::Dep {
                name: (*name).to_owned(),
                kind: (*kind).to_owned(),
                versioned: *versioned,
            })
            .collect(),
    }
}

#[test]
fn publish_order_puts_every_crate_after_what_it_needs_and_leaves_out_the_unpublishable()
-> anyhow::Result<()> {
    let members = [
        member("cli", true, &[("core", "normal", true), ("llm", "normal", true)]),
        // A versioned dev-dependency must be on crates.io first; a path-only one is stripped.
        member("llm", true, &[("core", "normal", true), ("pool", "dev", true)]),
        member("pool", true, &[("core", "normal", true), ("llm", "dev", false)]),
        member("core", true, &[("state", "normal", true), ("core", "dev", false)]),
        member("state", true, &[]),
        member("xtask", false, &[("cli", "normal", false)]),
    ];
    assert_eq!(publish::publish_order(&members)?, ["state", "core", "pool", "llm", "cli"]);
    // The order does not depend on the order of the listing.
    let mut reversed = members.to_vec();
    reversed.reverse();
    assert_eq!(publish::publish_order(&reversed)?, ["state", "core", "pool", "llm", "cli"]);
    Ok(())
}

#[test]
fn publish_order_names_every_dependency_that_cannot_be_published() {
    let members = [
        member("core", true, &[("state", "normal", false), ("tool", "build", true)]),
        member("pool", true, &[("tool", "dev", true), ("state", "normal", true)]),
        member("state", true, &[]),
        member("tool", false, &[]),
    ];
    let Err(error) = publish::publish_order(&members) else {
        panic!("path-only and unpublishable dependencies were accepted");
    };
    let error = error.to_string();
    assert!(error.contains("core depends on state by path only"), "{error}");
    assert!(error.contains("core (build dependency) needs tool"), "{error}");
    assert!(error.contains("pool (dev dependency) needs tool"), "{error}");
    assert_eq!(error.matches("\n  ").count(), 3, "{error}");
}

#[test]
fn publish_order_refuses_a_cycle_through_a_versioned_dev_dependency() {
    let members = [
        member("a", true, &[("b", "normal", true)]),
        member("b", true, &[("a", "dev", true)]),
        member("c", true, &[]),
    ];
    let Err(error) = publish::publish_order(&members) else {
        panic!("a cycle was given an order");
    };
    let error = error.to_string();
    assert!(error.contains("none can be published first: a, b ("), "{error}");
}

#[test]
fn publish_reads_members_and_their_dependencies_on_each_other_from_cargo_metadata()
-> anyhow::Result<()> {
    let metadata = serde_json::json!({
        "workspace_members": ["path+file:///w/crates/core#0.1.0", "path+file:///w/xtask#0.1.0",
                              "path+file:///w/crates/state#0.1.0"],
        "packages": [
            { "id": "path+file:///w/crates/core#0.1.0", "name": "core",
              "manifest_path": "/w/crates/core/Cargo.toml", "publish": null,
              "dependencies": [
                { "name": "state", "req": "^0.1.0", "kind": null, "path": "/w/crates/state" },
                { "name": "core", "req": "*", "kind": "dev", "path": "/w/crates/core" },
                { "name": "state", "req": "*", "kind": "dev", "path": "/w/crates/state" },
                { "name": "serde", "req": "^1", "kind": null }
              ] },
            { "id": "path+file:///w/xtask#0.1.0", "name": "xtask",
              "manifest_path": "/w/xtask/Cargo.toml", "publish": [], "dependencies": [] },
            { "id": "path+file:///w/crates/state#0.1.0", "name": "state",
              "manifest_path": "/w/crates/state/Cargo.toml", "publish": null,
              "dependencies": [] }
        ]
    });
    let members = publish::members(&metadata)?;
    let at = |dir: &str, member: publish::Member| publish::Member { dir: dir.to_owned(), ..member };
    assert_eq!(
        members,
        [
            at(
                "/w/crates/core",
                member("core", true, &[("state", "normal", true), ("state", "dev", false)]),
            ),
            at("/w/xtask", member("xtask", false, &[])),
            at("/w/crates/state", member("state", true, &[])),
        ]
    );
    assert_eq!(publish::publish_order(&members)?, ["state", "core"]);
    Ok(())
}

#[test]
fn publish_finds_files_a_crate_needs_from_outside_its_directory() {
    let source = r#"//! A crate.
const GOAL: &str = include_str!("../../../examples/goal/team.toml");
const PAGE: &str = include_str!("serve/page/index.html");
const README: &str = include_str!("../README.md");
const OTHER: &[u8] = include_bytes!("../../other/data.bin");
#[path = "../tests/it/webdriver.rs"]
mod webdriver;
#[path = "/etc/passwd"]
mod absolute;
const BUILT: &str = include_str!(concat!(env!("OUT_DIR"), "/x"));
"#;
    let found = publish::outside_references("crates/cli/src/run.rs", source, "crates/cli");
    assert_eq!(
        found,
        [
            "crates/cli/src/run.rs:2: include_str! \"../../../examples/goal/team.toml\" reaches outside crates/cli",
            "crates/cli/src/run.rs:5: include_bytes! \"../../other/data.bin\" reaches outside crates/cli",
            "crates/cli/src/run.rs:8: #[path] \"/etc/passwd\" reaches outside crates/cli",
        ]
    );
    assert!(publish::is_test_file("crates/team-file/src/tests.rs"));
    assert!(publish::is_test_file("crates/cli/src/run/tests/goal.rs"));
    assert!(publish::is_test_file("crates/llm/src/local/grammar_tests.rs"));
    assert!(!publish::is_test_file("crates/cli/src/run.rs"));
}

/// A small ARCHITECTURE.md: prose, the index with a header, a separator and three rows (one
/// with two locations), and a later section whose table is not part of the index.
const ARCHITECTURE_SAMPLE: &str = "\
# Architecture

| not | the index |
|---|---|
| x | `nowhere.rs` |

## Where is it

| concept | where |
|---|---|
| heartbeat loop | `crates/agent-pool/src/team.rs#drive` |
| anchors | `crates/agent-core/src/audit.rs#check_anchors`, `crates/run-store/src/anchor.rs` |
| tidy | `xtask/src/tidy.rs` |

## Testing

| also | not |
|---|---|
| y | `elsewhere.rs` |
";

#[test]
fn tidy_reads_the_index_rows_and_only_the_index() {
    let (locations, problems) = tidy::index_locations(ARCHITECTURE_SAMPLE);
    assert_eq!(problems, Vec::<String>::new());
    let found: Vec<(usize, &str, Option<&str>)> =
        locations.iter().map(|l| (l.line, l.path.as_str(), l.symbol.as_deref())).collect();
    assert_eq!(
        found,
        [
            (11, "crates/agent-pool/src/team.rs", Some("drive")),
            (12, "crates/agent-core/src/audit.rs", Some("check_anchors")),
            (12, "crates/run-store/src/anchor.rs", None),
            (13, "xtask/src/tidy.rs", None),
        ]
    );
}

#[test]
fn tidy_refuses_an_index_that_is_missing_or_malformed() {
    let (locations, problems) = tidy::index_locations("# Architecture\n\n| a | `b.rs` |\n");
    assert!(locations.is_empty());
    assert_eq!(problems.len(), 1);
    assert!(problems[0].contains("no `## Where is it` section"), "{problems:?}");

    let malformed = "## Where is it\n\n| concept | where |\n|---|---|\n\
                     | no location | somewhere |\n\
                     | absolute | `/etc/passwd` |\n\
                     | outside | `crates/../../x.rs` |\n\
                     | empty symbol | `xtask/src/tidy.rs#` |\n\
                     | fine | `xtask/src/tidy.rs#run` |\n";
    let (locations, problems) = tidy::index_locations(malformed);
    assert_eq!(locations.len(), 1, "{locations:?}");
    assert_eq!(locations[0].line, 9);
    let lines: Vec<&str> =
        problems.iter().map(|p| p.split(": ").next().unwrap_or_default()).collect();
    assert_eq!(
        lines,
        ["ARCHITECTURE.md:5", "ARCHITECTURE.md:6", "ARCHITECTURE.md:7", "ARCHITECTURE.md:8"]
    );
}

#[test]
fn tidy_matches_index_symbols_as_whole_identifiers() {
    let text = "pub async fn drive_run() {}\nfn redrive() {}\n";
    assert!(!tidy::contains_identifier(text, "drive"));
    assert!(tidy::contains_identifier(text, "drive_run"));
    assert!(tidy::contains_identifier("async fn drive(\n", "drive"));
    assert!(tidy::contains_identifier("drive", "drive"));
}

#[test]
fn tidy_makes_heading_anchors_as_github_does() {
    let page = "# Concepts: the agent model\n\n## Roles and spawning\n\n#not a heading\n\
                text\n### Self-modification\n";
    assert_eq!(
        tidy::heading_anchors(page),
        ["concepts-the-agent-model", "roles-and-spawning", "self-modification"]
    );
}

#[test]
fn tidy_finds_links_to_sections_of_the_concepts_page_that_do_not_exist() {
    // Spelled in pieces so that this file passes its own check.
    let page = concat!("docs/concepts", ".md#");
    let anchors = ["lifecycle".to_owned(), "roles-and-spawning".to_owned()];
    let text = format!(
        "//! The table ({page}lifecycle).\n/// See {page}roles-and-spawning, and {page}nope.\n"
    );
    let problems = tidy::check_concept_links("crates/a/src/x.rs", &text, &anchors);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("crates/a/src/x.rs:2: "), "{problems:?}");
    assert!(problems[0].contains("nope"), "{problems:?}");
    assert!(tidy::check_concept_links("README.md", "no links here", &anchors).is_empty());
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
    assert!(long_fns::scanned("crates/message-bus/src/nats.rs"));
    let long = function("long", "", 79);
    let problems = tidy::check_file("crates/message-bus/src/x.rs", &format!("//! x\n{long}"), &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("crates/message-bus/src/x.rs:2: fn `long` is 81 lines"));
    // Every crate is checked, the binary's too.
    let problems = tidy::check_file("crates/agent-cli/src/x.rs", &format!("//! x\n{long}"), &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
}
