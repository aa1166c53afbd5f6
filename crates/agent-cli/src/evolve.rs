//! `strata evolve` (an evolution from an evolution file, durable, resumable: the engine's
//! [`strata::evolve`]), `strata lineage` (its family tree as JSON, DOT or Mermaid) and
//! `strata inspect RUN lineage`, with their terminal views: the header, each generation's
//! figures as they come, the report, Ctrl-C.

use std::path::Path;
use std::sync::Arc;

use agent_evolution::EvolutionReport;
use agent_state::evolution::Genome;
use strata::evolve::{EvolveOptions, Evolving, Ready};
use strata::run::Observer;

use crate::cli::{EvolveArgs, LineageArgs, LineageFormat};
use crate::{Failure, INTERRUPTED, bad_input};

use strata::evolve::{EvolutionInfo, resolve};

/// The engine's warnings, on standard error.
struct Warnings;

impl Observer for Warnings {
    fn warn(&self, text: &str) {
        errln!("{text}");
    }
}

/// `strata evolve CONFIG` or `strata evolve --resume RUN`.
pub(crate) async fn evolve(args: EvolveArgs) -> Result<u8, Failure> {
    let options = EvolveOptions {
        data: args.data.clone(),
        run_id: args.run_id.clone(),
        unsandboxed: args.unsandboxed,
        no_sync: args.no_sync,
        observer: Arc::new(Warnings),
    };
    let evolving = match (&args.config, &args.resume) {
        (_, Some(run)) => Evolving::resume(run, &options).await?,
        (Some(config), None) => Evolving::start(config, &options).await?,
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!(
                "give an evolution file (`strata evolve FILE`) or --resume RUN"
            )));
        }
    };
    let ready = evolving.prepare(&options)?;
    let ready = if args.json { ready } else { with_progress(ready) };
    let stop = async {
        // An error listening for Ctrl-C stops at once, as before.
        let _ = tokio::signal::ctrl_c().await;
    };
    let evolved = ready.run(stop).await?;
    let Some(report) = evolved.report else {
        errln!(
            "interrupted; every finished evaluation is recorded: `strata evolve --resume {}` goes on",
            evolved.info.run_id
        );
        return Ok(INTERRUPTED);
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &evolved.info, &evolved.dir);
    }
    Ok(0)
}

/// Prints the evolution's header and has each generation's figures printed as they come.
fn with_progress(ready: Ready) -> Ready {
    let (info, settings) = (ready.info(), ready.settings());
    outln!(
        "evolution {}: {} generations of {} genomes on {} ({} tasks), seed {}",
        info.run_id,
        settings.generations,
        settings.population,
        info.suite.display(),
        ready.tasks(),
        settings.seed
    );
    outln!(
        "{:>4} {:>8} {:>7} {:>7} {:>9} {:>5}",
        "gen",
        "members",
        "best",
        "mean",
        "survived",
        "died"
    );
    ready.with_progress(Arc::new(|g: &agent_evolution::GenerationReport| {
        outln!(
            "{:>4} {:>8} {:>7.3} {:>7.3} {:>9} {:>5}",
            g.generation,
            g.members,
            g.best,
            g.mean,
            g.survived,
            g.died
        );
    }))
}

/// What an evolution found (its generations were printed as they ran).
fn print_report(report: &EvolutionReport, info: &EvolutionInfo, dir: &Path) {
    let best = &report.best;
    outln!(
        "best genome {} (generation {}): fitness {:.3}",
        best.id.short(),
        best.generation,
        report.best_fitness.overall
    );
    outln!("  {}", genome_line(best));
    let scores: Vec<String> = report
        .best_fitness
        .scores
        .iter()
        .map(|(k, v)| format!("{k} {}", short_number(*v)))
        .collect();
    outln!("  {}", scores.join(", "));
    outln!(
        "{} evaluations run, {} reused; data in {}",
        report.evaluated,
        report.reused,
        dir.display()
    );
    outln!(
        "its family tree: strata lineage {} --format dot (or json, mermaid); strata inspect {} lineage",
        info.run_id,
        info.run_id
    );
}

fn short_number(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.3}") }
}

/// A genome's settings in one line.
fn genome_line(genome: &Genome) -> String {
    let c = &genome.config;
    let mut parts = vec![
        format!("max_retries = {}", c.max_retries),
        format!("timeout_ms = {}", c.timeout_ms),
        format!("tools = {}", c.tools.join(", ")),
    ];
    for (k, v) in &c.strategy {
        parts.push(format!("strategy.{k} = {v}"));
    }
    if let Some(m) = &c.model {
        parts.push(format!("model = {m}"));
    }
    if let Some(t) = c.temperature {
        parts.push(format!("temperature = {t}"));
    }
    if !c.prompt.is_empty() {
        parts.push(format!("prompt = {:?}", c.prompt.chars().take(40).collect::<String>()));
    }
    parts.join(", ")
}

/// `strata lineage RUN --format json|dot|mermaid`.
pub(crate) async fn lineage(args: &LineageArgs) -> Result<u8, Failure> {
    let dir = resolve(&args.data, &args.run)?;
    let tree = strata::evolve::lineage(&dir)?;
    match args.format {
        LineageFormat::Json => outln!("{}", serde_json::to_string_pretty(&tree.to_json())?),
        LineageFormat::Dot => out!("{}", tree.to_dot()),
        LineageFormat::Mermaid => out!("{}", tree.to_mermaid()),
    }
    Ok(0)
}

/// `strata inspect RUN lineage`: the family tree as an indented table.
pub(crate) async fn inspect(data: &Path, run: &str, json: bool) -> Result<(), Failure> {
    let dir = resolve(data, run)?;
    let info = EvolutionInfo::read(&dir).map_err(bad_input)?;
    let tree = strata::evolve::lineage(&dir)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&tree.to_json())?);
        return Ok(());
    }
    outln!(
        "evolution {} ({}): {} genomes, {} events",
        info.run_id,
        info.effective_status(&dir),
        tree.nodes.len(),
        tree.events
    );
    let best = tree.best.as_ref().map(|(id, _)| id.as_str());
    for (node, depth) in strata::evolve::family(&tree) {
        let fitness = node.fitness.map_or("  -  ".to_owned(), |f| format!("{f:.3}"));
        let fate = match node.fate {
            Some(agent_state::evolution::Fate::Died) => "died",
            Some(agent_state::evolution::Fate::Survived) => "survived",
            None => "",
        };
        let marks = format!(
            "{}{}",
            if Some(node.genome_id.as_str()) == best { " BEST" } else { "" },
            if node.adopted { " ADOPTED" } else { "" }
        );
        outln!(
            "{}{} gen {} fitness {fitness} {fate}{marks}  {}",
            "  ".repeat(depth),
            node.genome_id.short(),
            node.generation,
            node.mutations.join("; ")
        );
    }
    Ok(())
}
