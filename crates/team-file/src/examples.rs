//! The files `strata init` writes: the example team and plan ([`example_team_toml`],
//! [`example_plan_toml`], also in `examples/hello/`) and generated ones of any size
//! ([`scaled_team_toml`], [`scaled_plan_toml`]).

use crate::limits::MAX_PLAN_STEPS;

/// A team file describing [`default_team`](crate::default_team), with a comment on every
/// field.
pub fn example_team_toml() -> &'static str {
    EXAMPLE_TEAM
}

/// The smallest team `strata init --scale` writes: three powers, a lead and an executor.
pub const MIN_SCALE: usize = 5;

/// A generated team file of `agents` agents: three powers, one lead per thousand agents (1 to
/// 1 000), the rest executors spread evenly over the leads, each lead with its own domain `dN`.
/// Fewer than [`MIN_SCALE`] agents count as [`MIN_SCALE`]; over the largest pool
/// ([`agent_pool::MAX_POOL_SIZE`]), the file is written but [`parse_team`](crate::parse_team)
/// refuses it (`max_agents` is over the largest pool), so callers check the range first.
pub fn scaled_team_toml(agents: usize) -> String {
    let agents = agents.max(MIN_SCALE);
    let leads = (agents / 1000).clamp(1, 1000);
    let executors = agents - 3 - leads;
    let per_lead = executors.div_ceil(leads);
    let mut text = format!(
        "# A generated team of {agents} agents (`strata init --scale {agents}`): three powers,\n\
         # {leads} lead(s), {executors} executors.\n\nheartbeat = \"4s\"\nmax_agents = {agents}\n\n"
    );
    for (i, weight) in [2.0, 1.0, 1.0].into_iter().enumerate() {
        text.push_str(&format!(
            "[[top]]\nid = \"top-{i}\"\npower_type = \"power_{i}\"\nvote_weight = {weight:.1}\nsignature_authority = [\"plan\"]\n\n"
        ));
    }
    for l in 0..leads {
        text.push_str(&format!(
            "[[mid]]\nid = \"lead-{l}\"\ndomain = \"d{l}\"\nsupervisor = \"top-0\"\nmax_subordinates = {per_lead}\n\n"
        ));
    }
    for e in 0..executors {
        text.push_str(&format!(
            "[[bottom]]\nid = \"e-{e}\"\nsupervisor = \"lead-{}\"\ntools = [\"write_file\", \"shell\"]\n\n",
            e % leads
        ));
    }
    text
}

/// A plan for [`scaled_team_toml`]'s team: work for a share of it, one step per hundred agents
/// (at least one per lead, at most [`MAX_PLAN_STEPS`]), each writing a small file, spread over
/// the leads' domains. Fewer than [`MIN_SCALE`] agents count as [`MIN_SCALE`], as in
/// [`scaled_team_toml`].
pub fn scaled_plan_toml(agents: usize) -> String {
    let agents = agents.max(MIN_SCALE);
    let leads = (agents / 1000).clamp(1, 1000);
    let steps = (agents / 100).clamp(leads, MAX_PLAN_STEPS);
    let mut text = format!(
        "# Work for a share of the generated team of {agents} agents: {steps} steps.\n\n\
         id = \"scale-{agents}\"\ngoal = \"write one file per step across the team\"\n\n"
    );
    for s in 0..steps {
        text.push_str(&format!(
            "[[steps]]\nid = \"s{s}\"\ndomain = \"d{}\"\ntool = \"write_file\"\nargs = {{ path = \"out/{s}.txt\", content = \"step {s}\\n\" }}\n\n",
            s % leads
        ));
    }
    text
}

/// A plan for [`example_team_toml`]'s team that uses all three layers and both domains, writes
/// real files and runs a real shell command once a write is done.
pub fn example_plan_toml() -> &'static str {
    EXAMPLE_PLAN
}

const EXAMPLE_TEAM: &str = r##"# A Strata team: three top powers, two mid leads, two bottom executors per lead.
# Run a plan with it: strata run plan.toml --team team.toml

heartbeat = "4s"      # how often each agent with work takes a turn: "250ms", "4s", "1m"
max_agents = 50       # the pool's limit

# How agents decide. An agent may override these with its own
# `reasoner = { kind = "...", forbid_tools = [...], prefer = [...] }`.
# kind: "rule-based" (deterministic, no model), "openai" (any OpenAI-compatible server),
# "anthropic", or "local" (the embedded model; `strata model fetch` first). With a model, set
# `model`, and `base_url` / `api_key_env` as needed; add [prices], [budget] and [conversation]
# tables to count cost and cap spending (see the docs of the team-file crate).
[reasoner]
kind = "rule-based"
forbid_tools = []     # top powers veto any plan that uses one of these tools
prefer = []           # in arbitration, vote for the first of these options on the ballot
                      # ("retry"/"abandon", "redo"/"accept", "proceed"/"abandon")

# What the top layer settles by a weighted vote instead of a plain rule.
[arbitration]
escalations = true    # a step every executor failed: "abandon" the task or "retry" it once
acceptance = true     # a result short of its step's `acceptance`: "redo" it or "accept" it
vetoed_plans = false  # a vetoed plan: "abandon" it or "proceed" anyway (false: a veto is final)

# Optional on every agent: role = "..." (for the system prompt), capabilities = [...]
# (default: all its layer may hold), model, temperature (0.0 to 2.0), max_retries = 3,
# timeout_ms = 30000.

# Top powers sign plans, veto them and arbitrate conflicts; votes are weighted.
# The first one proposes the plans; those with "plan" authority sign them.
[[top]]
id = "top-a"
name = "Power A"
power_type = "power_a"
vote_weight = 2.0
signature_authority = ["plan"]

[[top]]
id = "top-b"
name = "Power B"
power_type = "power_b"
vote_weight = 1.0
signature_authority = ["plan"]

[[top]]
id = "top-c"
name = "Power C"
power_type = "power_c"
vote_weight = 1.0
signature_authority = ["plan"]

# Mid leads each own a domain: plan steps for that domain go to them, and they hand
# each step to one of their executors.
[[mid]]
id = "mid-docs"
name = "Docs lead"
domain = "docs"
supervisor = "top-a"
max_subordinates = 4

[[mid]]
id = "mid-build"
name = "Build lead"
domain = "build"
supervisor = "top-a"
max_subordinates = 4

# Bottom executors run tools in the workspace: read_file, write_file, list_dir, shell.
[[bottom]]
id = "bottom-d1"
name = "Docs executor 1"
supervisor = "mid-docs"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "bottom-d2"
name = "Docs executor 2"
supervisor = "mid-docs"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "bottom-b1"
name = "Build executor 1"
supervisor = "mid-build"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "bottom-b2"
name = "Build executor 2"
supervisor = "mid-build"
tools = ["read_file", "write_file", "list_dir", "shell"]
"##;

const EXAMPLE_PLAN: &str = r##"# A plan for the team in team.toml.
#
# The first top power proposes it as a decision; the powers with "plan" authority review
# it and sign it (or veto it). Each mid lead then gets the steps of its domain and hands
# them to its executors, which run the tools in the workspace and report back up.

id = "hello"
goal = "write a greeting and notes, then measure the greeting"

[[steps]]
id = "write-hello"
description = "write the greeting"
domain = "docs"                 # for the lead of the docs domain
tool = "write_file"
args = { path = "hello.txt", content = "hello, strata\n" }

[[steps]]
id = "write-notes"
description = "write the notes"
agent = "bottom-d2"             # or name an agent: a lead, or an executor as here
tool = "write_file"
args = { path = "notes/plan.md", content = "# Plan\n- greet\n- measure\n" }

[[steps]]
id = "measure"
description = "count the greeting's bytes"
domain = "build"
tool = "shell"
args = { command = "wc -c < hello.txt" }
after = ["write-hello"]         # waits until the greeting is written

[[steps]]
id = "list"
description = "list the workspace"
domain = "build"
tool = "list_dir"
args = { path = "." }
after = ["write-hello", "write-notes"]
"##;
