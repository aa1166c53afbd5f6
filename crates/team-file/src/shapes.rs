//! The files `strata init --shape SHAPE` writes ([`shape_team_toml`], [`shape_plan_toml`]):
//! for `layered`, the example team and plan ([`example_team_toml`](crate::example_team_toml));
//! for `crew` and `single`, the smaller teams (also in `examples/shapes/`) and a plan that
//! runs on any shape.

use agent_pool::TeamShape;

/// The commented team file `strata init --shape shape` writes: the layered example, a crew
/// (one lead and two executors) or a single agent (one executor with every built-in tool).
pub fn shape_team_toml(shape: TeamShape) -> &'static str {
    match shape {
        TeamShape::Layered => crate::example_team_toml(),
        TeamShape::Crew => CREW_TEAM,
        TeamShape::Single => SINGLE_TEAM,
    }
}

/// The plan `strata init --shape shape` writes beside [`shape_team_toml`]'s team: the
/// layered example's, or for a crew and a single agent the same work without naming a lead
/// or an agent, so that it runs on every shape.
pub fn shape_plan_toml(shape: TeamShape) -> &'static str {
    match shape {
        TeamShape::Layered => crate::example_plan_toml(),
        TeamShape::Crew => CREW_PLAN,
        TeamShape::Single => SINGLE_PLAN,
    }
}

const CREW_TEAM: &str = r##"# A Strata crew: one lead and its executors, no top powers.
# Run a plan with it: strata run plan.toml --team team.toml
#
# The lead takes each task itself: it plans a goal with its reasoner, hands each step to one
# of its executors (a step whose `after` steps are done goes out next), judges the results
# and closes the task. Nothing is signed, vetoed or put to a vote: a step that every able
# executor failed fails the task, and a result the lead finds short of its step's
# `acceptance` goes to another executor. Same runtime, tools, sandbox, audit log, budget and
# resume as a layered team (`strata init --shape layered`).

shape = "crew"        # "layered", "crew" or "single"; left out, the shape the agents make
heartbeat = "4s"      # how often each agent with work takes a turn: "250ms", "4s", "1m"
max_agents = 10       # the pool's limit

# How agents decide: "rule-based" (deterministic, no model: every step names its tool),
# "openai", "anthropic" or "local" (a model: a goal in words, goal steps). The lead plans
# and judges with it, the executors choose their tool calls with it.
[reasoner]
kind = "rule-based"

# The lead: no supervisor (a crew has no powers). It takes every step of a plan, whatever
# its `domain`.
[[mid]]
id = "lead"
name = "Lead"
domain = "work"
max_subordinates = 4

# The executors run tools in the workspace; each reports to the lead.
[[bottom]]
id = "exec-1"
name = "Executor 1"
supervisor = "lead"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "exec-2"
name = "Executor 2"
supervisor = "lead"
tools = ["read_file", "write_file", "list_dir", "shell"]
"##;

const SINGLE_TEAM: &str = r##"# A single Strata agent: one executor with every built-in tool, no lead, no powers.
# Run a plan with it: strata run plan.toml --team team.toml
#
# The agent takes each task itself: it plans a goal with its reasoner, then works the steps
# in turn (a step whose `after` steps are done comes next), each with its own tool loop,
# judges the results and closes the task. A step that fails for good (past the agent's
# retries) fails the task: there is no one to hand it to. Same runtime, tools, sandbox, audit
# log, budget and resume as a layered team (`strata init --shape layered`).

shape = "single"      # "layered", "crew" or "single"; left out, the shape the agents make
heartbeat = "4s"      # how often the agent, when it has work, takes a turn

# How it decides: "rule-based" (deterministic, no model: every step names its tool),
# "openai", "anthropic" or "local" (a model: a goal in words, goal steps).
[reasoner]
kind = "rule-based"

# The agent: no supervisor. It takes every step of a plan, whatever its `domain`.
[[bottom]]
id = "agent"
name = "Agent"
tools = ["read_file", "write_file", "edit_file", "list_dir", "search", "glob", "shell"]
"##;

/// The steps of the crew's and the single agent's plans (the same work; only their headers
/// differ), a macro so that `concat!` can join it to each header.
macro_rules! shape_plan_steps {
    () => {
        r##"id = "hello"
goal = "write a greeting and notes, then measure the greeting"

[[steps]]
id = "write-hello"
description = "write the greeting"
tool = "write_file"
args = { path = "hello.txt", content = "hello, strata\n" }

[[steps]]
id = "write-notes"
description = "write the notes"
tool = "write_file"
args = { path = "notes/plan.md", content = "# Plan\n- greet\n- measure\n" }

[[steps]]
id = "measure"
description = "count the greeting's bytes"
tool = "shell"
args = { command = "wc -c < hello.txt" }
after = ["write-hello"]         # waits until the greeting is written

[[steps]]
id = "list"
description = "list the workspace"
tool = "list_dir"
args = { path = "." }
after = ["write-hello", "write-notes"]
"##
    };
}

const CREW_PLAN: &str = concat!(
    r##"# A plan for the crew in team.toml.
#
# The lead takes it (nothing to sign) and hands each step to one of its executors; a step
# with `after` goes out once those steps are done. No step names a lead or an agent, so the
# plan runs on every team shape (a `domain` would be taken by the crew's one lead).

"##,
    shape_plan_steps!()
);

const SINGLE_PLAN: &str = concat!(
    r##"# A plan for the single agent in team.toml.
#
# The agent takes it (nothing to sign) and works the steps in turn; a step with `after`
# comes once those steps are done. No step names a lead or an agent, so the plan runs on
# every team shape (a `domain` would be taken by the single agent).

"##,
    shape_plan_steps!()
);
