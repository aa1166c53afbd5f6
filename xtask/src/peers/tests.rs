//! Unit tests of the peer comparison: reading the figures, formatting ratios, the table, the
//! report when AutoGen is missing, `BENCHMARKS.md` updates and the plots.

use super::*;

fn figure(id: &str, values: &[(&str, f64)]) -> Figure {
    Figure {
        id: id.to_owned(),
        values: values.iter().map(|(name, value)| ((*name).to_owned(), *value)).collect(),
    }
}

fn m(runtime: Runtime, workload: Workload, agents: u64, value: f64) -> Measurement {
    Measurement { runtime, workload, agents, value }
}

/// A small report: throughput at 1 000 agents for all three, the idle cycle for Strata, memory
/// at 1 000 agents for Strata and ractor only.
fn report(autogen: AutoGen) -> Report {
    let mut measurements = vec![
        m(Runtime::Strata, Workload::Throughput, 1_000, 508_408.2),
        m(Runtime::Ractor, Workload::Throughput, 1_000, 3_709_954.3),
        m(Runtime::Strata, Workload::Idle, 100_000, 0.14),
        m(Runtime::Strata, Workload::Memory, 1_000, 1_679.4),
        m(Runtime::Ractor, Workload::Memory, 1_000, 6_795.3),
    ];
    if let AutoGen::Measured { .. } = autogen {
        measurements.push(m(Runtime::AutoGen, Workload::Throughput, 1_000, 10_780.6));
    }
    Report {
        measurements,
        autogen,
        ractor_version: "0.16.5".to_owned(),
        machine: vec![("CPU".to_owned(), "Test CPU, 2 cores (`nproc`)".to_owned())],
        quick: false,
    }
}

fn measured() -> AutoGen {
    AutoGen::Measured { version: "0.7.5".to_owned(), python: "3.11.7".to_owned() }
}

fn missing() -> AutoGen {
    AutoGen::Missing {
        why:
            "could not be installed: `python3 -m venv target/peers/venv` failed (exit status: 1): \
              ensurepip is not available"
                .to_owned(),
    }
}

#[test]
fn figures_are_read_by_their_id_and_the_workloads_unit() -> anyhow::Result<()> {
    let throughput = figure(
        "strata/throughput/1000",
        &[("agents", 1000.0), ("median_ms", 196.7), ("messages_per_s", 508_408.2)],
    );
    assert_eq!(
        measurement(&throughput)?,
        m(Runtime::Strata, Workload::Throughput, 1_000, 508_408.2)
    );
    let memory = figure("ractor/memory/100000", &[("bytes_per_agent", 6692.9)]);
    assert_eq!(measurement(&memory)?, m(Runtime::Ractor, Workload::Memory, 100_000, 6692.9));
    assert_eq!(
        measurement(&figure("strata/idle/10000", &[("tick_us", 0.14)]))?,
        m(Runtime::Strata, Workload::Idle, 10_000, 0.14)
    );
    Ok(())
}

#[test]
fn a_figure_with_a_bad_id_or_without_its_number_is_an_error() {
    let error = |id: &str, values: &[(&str, f64)]| match measurement(&figure(id, values)) {
        Ok(measurement) => panic!("{id} was read as {measurement:?}"),
        Err(error) => format!("{error:#}"),
    };
    assert_eq!(
        error("strata/throughput", &[]),
        "figure `strata/throughput`: expected an id `runtime/workload/agents`"
    );
    assert_eq!(
        error("akka/throughput/10", &[("messages_per_s", 1.0)]),
        "figure `akka/throughput/10`: unknown runtime `akka`"
    );
    assert_eq!(
        error("strata/latency/10", &[]),
        "figure `strata/latency/10`: unknown workload `latency`"
    );
    assert!(error("strata/create/many", &[]).starts_with("figure `strata/create/many`: `many`"));
    assert_eq!(
        error("strata/create/10", &[("median_ms", 1.0)]),
        "figure `strata/create/10` has no number `agents_per_s`"
    );
}

#[test]
fn autogens_report_is_its_last_line_of_output() -> anyhow::Result<()> {
    let stdout = "\
some warning a library printed
{\"runtime\": \"autogen-core\", \"version\": \"0.7.5\", \"python\": \"3.11.7\", \"figures\": [\
{\"id\": \"autogen/throughput/100\", \"agents\": 100, \"messages_per_s\": 11721.4, \"repetitions\": 3}, \
{\"id\": \"autogen/memory/1000\", \"agents\": 1000, \"bytes_per_agent\": 679.9}]}

";
    let (status, measurements) = parse_autogen(stdout)?;
    assert_eq!(status, measured());
    assert_eq!(
        measurements,
        vec![
            m(Runtime::AutoGen, Workload::Throughput, 100, 11721.4),
            m(Runtime::AutoGen, Workload::Memory, 1_000, 679.9),
        ]
    );
    Ok(())
}

#[test]
fn a_bad_autogen_report_is_an_error() {
    let error = |stdout: &str| match parse_autogen(stdout) {
        Ok(parsed) => panic!("{stdout:?} was read as {parsed:?}"),
        Err(error) => format!("{error:#}"),
    };
    assert_eq!(error(""), "AutoGen's bench printed nothing");
    assert!(
        error("Traceback (most recent call last):")
            .starts_with("AutoGen's bench printed a line that is not JSON")
    );
    assert_eq!(
        error(r#"{"version": "0.7.5", "python": "3.11.7", "figures": []}"#),
        "AutoGen's report has no figures"
    );
    assert_eq!(
        error(r#"{"version": "0.7.5", "figures": []}"#),
        "AutoGen's report has no string `python`"
    );
    assert!(
        error(
            r#"{"version": "0.7.5", "python": "3.11.7", "figures": [{"id": "strata/memory/10", "bytes_per_agent": 1}]}"#
        )
        .starts_with("AutoGen's report has a figure of another runtime")
    );
}

#[test]
fn ratios_say_who_is_ahead_in_the_workloads_direction() {
    // Rates: more is better.
    assert_eq!(format_ratio(508_408.2, 3_709_954.3, true, "ractor"), "0.14× (ractor better)");
    assert_eq!(format_ratio(508_408.2, 10_780.6, true, "AutoGen"), "47.2× (Strata better)");
    assert_eq!(format_ratio(600_000.0, 2_000.0, true, "AutoGen"), "300× (Strata better)");
    assert_eq!(format_ratio(1.0, 20.0, true, "ractor"), "0.050× (ractor better)");
    // Memory and time: less is better.
    assert_eq!(format_ratio(1_679.4, 6_795.3, false, "ractor"), "0.25× (Strata better)");
    assert_eq!(format_ratio(1_679.4, 679.9, false, "AutoGen"), "2.47× (AutoGen better)");
    // Within 2 %, and nothing to divide by.
    assert_eq!(format_ratio(101.0, 100.0, true, "ractor"), "1.01× (even)");
    assert_eq!(format_ratio(1.0, 0.0, true, "ractor"), "n/a");
}

#[test]
fn numbers_are_shown_in_si_units() {
    assert_eq!(si(950.0), "950");
    assert_eq!(si(684_397.4), "684.4k");
    assert_eq!(si(4_274_302.5), "4.27M");
    assert_eq!(si(2.5e9), "2.50G");
    assert_eq!(axis_label(1_000.0), "1k");
    assert_eq!(axis_label(2_500.0), "2.5k");
    assert_eq!(axis_label(100_000.0), "100k");
    assert_eq!(axis_label(1e6), "1M");
    assert_eq!(axis_label(0.5), "0.5");
    assert_eq!(Workload::Throughput.format(508_408.2), "508.4k msg/s");
    assert_eq!(Workload::Idle.format(0.14), "0.14 µs");
    assert_eq!(Workload::Create.format(517_961.1), "518.0k agents/s");
    assert_eq!(Workload::Memory.format(1_679.4), "1679 B");
}

#[test]
fn the_table_has_every_runtime_and_the_ratios() {
    assert_eq!(
        table(&report(measured())),
        "\
workload        agents  Strata        ractor              AutoGen             Strata/ractor          Strata/AutoGen
messages/s ↑      1000  508.4k msg/s  3.71M msg/s         10.8k msg/s         0.14× (ractor better)  47.2× (Strata better)
idle cycle ↓    100000  0.14 µs       n/a (no heartbeat)  n/a (no heartbeat)  —                      —
memory/agent ↓    1000  1679 B        6795 B              not measured        0.25× (Strata better)  —

messages/s ↑: messages processed per second, N agents × 100 messages sent round-robin, until the last is processed (higher is better)
idle cycle ↓: one heartbeat cycle over N idle agents (lower is better)
creations/s ↑: agents created per second, one after the other (higher is better)
memory/agent ↓: resident memory per agent, N agents in a fresh process (lower is better)
Strata/peer is Strata's figure over the peer's: above 1 Strata does more per second (↑ rows) or uses more (↓ rows)."
    );
}

#[test]
fn without_autogen_the_table_says_it_is_incomplete() {
    let why = "could not be installed: pip could not install autogen-core==0.7.5: no network";
    assert_eq!(
        AutoGen::missing_message(why),
        "AutoGen could not be installed: pip could not install autogen-core==0.7.5: no network; \
         the table shows Strata and ractor only"
    );
    let table = table(&report(missing()));
    let mut lines = table.lines();
    assert_eq!(
        lines.next(),
        Some(
            "INCOMPLETE: AutoGen is missing (could not be installed: `python3 -m venv target/peers/venv` \
             failed (exit status: 1): ensurepip is not available)"
        )
    );
    assert!(lines.next().is_some_and(|header| header.starts_with("workload")));
    let throughput = lines.next().unwrap_or_default();
    assert!(throughput.contains("missing"), "{throughput}");
    assert!(throughput.ends_with("0.14× (ractor better)  —"), "{throughput}");
    // The idle row says AutoGen is missing, not that it has no heartbeat: nothing was measured.
    let idle = lines.next().unwrap_or_default();
    assert!(idle.contains("n/a (no heartbeat)  missing"), "{idle}");

    let quick = Report { quick: true, ..report(missing()) };
    let table = super::table(&quick);
    let first_lines: Vec<&str> = table.lines().take(3).collect();
    assert!(first_lines[0].starts_with("INCOMPLETE: AutoGen is missing"), "{table}");
    assert_eq!(first_lines[1], "QUICK: the smaller sizes only");
    assert!(first_lines[2].starts_with("workload"), "{table}");
}

#[test]
fn the_report_names_a_missing_autogen_at_the_top() {
    let complete = markdown(&report(measured()));
    assert!(!complete.contains("Incomplete"), "{complete}");
    assert!(complete.contains("- autogen-core 0.7.5 on Python 3.11.7 (from PyPI)"), "{complete}");
    assert!(complete.contains(
        "| messages/s ↑ | 1000 | 508.4k msg/s | 3.71M msg/s | 10.8k msg/s | 0.14× (ractor better) | 47.2× (Strata better) |"
    ));
    assert!(complete.contains("![Messages per second against agents (100 messages per agent)](docs/bench/peers-throughput.svg)"));

    let partial = markdown(&report(missing()));
    let first_lines: Vec<&str> = partial.lines().take(3).collect();
    assert_eq!(first_lines[0], "## Peer comparison: Strata, ractor and AutoGen");
    assert!(
        first_lines[2].starts_with(
            "> **Incomplete run: AutoGen is missing.** AutoGen could not be installed: "
        ),
        "{partial}"
    );
    assert!(partial.contains("- autogen-core 0.7.5: missing in this run"));
    assert!(!partial.contains("| 10.8k msg/s |"));
    assert!(partial.contains("| missing |"));
}

#[test]
fn benchmarks_md_keeps_what_is_outside_the_markers() {
    let created = update_document(None, "## Figures\n\nfirst\n");
    assert!(created.starts_with("# Benchmarks\n\n"), "{created}");
    assert!(created.ends_with(&format!("{BEGIN}\n\n## Figures\n\nfirst\n{END}\n")), "{created}");

    let edited = created.replace("# Benchmarks\n", "# Benchmarks\n\nA note by hand.\n")
        + "\n## Later section\n\nkept\n";
    let updated = update_document(Some(&edited), "## Figures\n\nsecond");
    assert!(updated.contains("A note by hand."));
    assert!(updated.contains(&format!(
        "{BEGIN}\n\n## Figures\n\nsecond\n{END}\n\n## Later section\n\nkept\n"
    )));
    assert!(!updated.contains("first"));
    assert_eq!(update_document(Some(&updated), "## Figures\n\nsecond"), updated);

    let appended = update_document(Some("# Benchmarks\n\nBy hand only.\n"), "## Figures");
    assert_eq!(
        appended,
        format!("# Benchmarks\n\nBy hand only.\n\n{BEGIN}\n\n## Figures\n{END}\n")
    );
}

#[test]
fn the_machine_is_read_from_proc_and_os_release() {
    let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
    assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
    assert_eq!(cpu_model("processor\t: 0\n"), None);
    assert_eq!(mem_total("MemTotal:       24567892 kB\nMemFree: 1 kB\n"), Some(24_567_892));
    assert_eq!(mem_total(""), None);
    assert_eq!(load_average("0.35 1.02 1.10 1/250 4242\n"), Some(0.35));
    assert_eq!(load_average(""), None);
    let os_release = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
    assert_eq!(os_name(os_release).as_deref(), Some("Debian GNU/Linux 12 (bookworm)"));
    assert_eq!(civil_date(0), "1970-01-01");
    assert_eq!(civil_date(11_016), "2000-02-29");
    assert_eq!(civil_date(19_723), "2024-01-01");
    let lock = "[[package]]\nname = \"ractor\"\nversion = \"0.16.5\"\nsource = \"registry+...\"\n\n[[package]]\nname = \"ractor_macros\"\nversion = \"1.0.0\"\n";
    assert_eq!(lock_version(lock, "ractor").as_deref(), Some("0.16.5"));
    assert_eq!(lock_version(lock, "plotters"), None);
    assert_eq!(tail("\n  first\nsecond\n\nthird  \n", 2), "second / third");
    assert_eq!(tail("", 2), "no error output");
}

#[test]
fn the_plots_are_svg_with_a_line_per_runtime_measured() -> anyhow::Result<()> {
    let mut full = report(measured());
    full.measurements.extend([
        m(Runtime::Strata, Workload::Throughput, 100, 684_397.4),
        m(Runtime::Ractor, Workload::Throughput, 100, 4_274_302.5),
        m(Runtime::AutoGen, Workload::Throughput, 100, 11_721.4),
        m(Runtime::Strata, Workload::Create, 1_000, 517_961.1),
        m(Runtime::Ractor, Workload::Create, 1_000, 787_329.7),
    ]);
    let plots = plots(&full)?;
    let names: Vec<&str> = plots.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["peers-throughput.svg", "peers-memory.svg", "peers-create.svg"]);
    let (_, throughput) = &plots[0];
    assert!(throughput.starts_with("<svg"), "{throughput}");
    for name in ["Strata", "ractor", "AutoGen", "agents", "messages per second"] {
        assert!(throughput.contains(name), "no {name} in the throughput plot");
    }
    let (_, memory) = &plots[1];
    assert!(!memory.contains(">AutoGen<"), "AutoGen has no memory figure here");

    let partial = report(missing());
    let (_, throughput) = &plots_of(&partial)?[0];
    assert!(throughput.contains("(AutoGen missing)"), "{throughput}");
    Ok(())
}

fn plots_of(report: &Report) -> anyhow::Result<Vec<(&'static str, String)>> {
    // A report without creation figures cannot draw that plot: an error, not an empty chart.
    let error = plots(report).err().map(|e| format!("{e:#}"));
    assert_eq!(error.as_deref(), Some("could not draw peers-create.svg: no figures to plot"));
    let workloads = [Workload::Throughput, Workload::Memory];
    PLOTS
        .into_iter()
        .zip(workloads)
        .map(|((file, title), workload)| Ok((file, plot(report, workload, title)?)))
        .collect()
}
