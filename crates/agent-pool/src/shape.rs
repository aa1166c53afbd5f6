//! Team shapes: the layered team (powers, leads, executors), a crew (one lead and its
//! executors, no powers) and a single agent (one executor with every tool, no supervisor).
//! Every shape runs on the same runtime (the same driver, tool path, audit log, budget and
//! stores); a shape only decides which agent takes the team's tasks ([`TeamSpec::entry`]) and
//! who plans, places and closes them.

use std::fmt;
use std::str::FromStr;

use agent_state::{AgentId, AgentLayer};
use thiserror::Error;

use crate::team::{AgentSpec, RoleSpec, TeamError, TeamSpec};

/// The shape of a team: which layers it has, and so which agent takes its tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TeamShape {
    /// Top powers, mid leads and bottom executors: the first power proposes each plan, the
    /// powers sign it (or veto it) and arbitrate, the leads place its steps on their executors.
    #[default]
    Layered,
    /// One mid lead without a supervisor and its executors, no powers: the lead takes each
    /// task itself (plans a goal with its reasoner), places its steps on its executors wave by
    /// wave, judges the results and closes it. Nothing is signed, vetoed or put to a vote.
    Crew,
    /// One bottom executor without a supervisor: it takes each task itself (plans a goal with
    /// its reasoner) and works every step in turn with its own tool loop.
    Single,
}

impl TeamShape {
    /// Every shape.
    pub const ALL: [TeamShape; 3] = [TeamShape::Layered, TeamShape::Crew, TeamShape::Single];

    /// The name used in team files and on the command line: `layered`, `crew` or `single`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TeamShape::Layered => "layered",
            TeamShape::Crew => "crew",
            TeamShape::Single => "single",
        }
    }

    /// The shape of a team with these layers: with a top power, layered; else with a lead, a
    /// crew; else a single agent.
    pub fn of_layers(mut layers: impl Iterator<Item = AgentLayer>) -> Self {
        let mut shape = TeamShape::Single;
        for layer in layers.by_ref() {
            match layer {
                AgentLayer::Top => return TeamShape::Layered,
                AgentLayer::Mid => shape = TeamShape::Crew,
                AgentLayer::Bottom => {}
            }
        }
        shape
    }
}

impl fmt::Display for TeamShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A shape name that does not exist.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown team shape `{shape}`; the shapes: layered, crew, single")]
pub struct UnknownShape {
    /// The name given.
    pub shape: String,
}

impl FromStr for TeamShape {
    type Err = UnknownShape;

    /// The shape called `name` ([`TeamShape::as_str`]).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        TeamShape::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| UnknownShape { shape: name.to_owned() })
    }
}

impl TeamSpec {
    /// The team's shape, from its agents' layers ([`TeamShape::of_layers`]).
    pub fn shape(&self) -> TeamShape {
        TeamShape::of_layers(self.agents.iter().map(|a| a.config.layer))
    }

    /// The agent the team hands its tasks to: the first top power of a layered team, the lead
    /// of a crew, the executor of a single agent (`None` in a team without agents).
    pub fn entry(&self) -> Option<&AgentSpec> {
        match self.shape() {
            TeamShape::Layered => self.agents.iter().find(|a| a.config.layer == AgentLayer::Top),
            TeamShape::Crew | TeamShape::Single => {
                self.agents.iter().find(|a| a.config.supervisor.is_none())
            }
        }
    }
}

/// Checks that the team's agents make one of the shapes: a layered team's leads and executors
/// each have a supervisor; a crew has one lead, without a supervisor, and executors; a single
/// agent is one executor, without a supervisor, that runs a tool loop or a kind.
pub(crate) fn check_shape(spec: &TeamSpec) -> Result<TeamShape, TeamError> {
    let shape = spec.shape();
    let bad = |reason: String| Err(TeamError::Shape { shape, reason });
    if shape != TeamShape::Layered && !spec.roles.is_empty() {
        return bad(format!(
            "roles (agents created while the team works) need a layered team, whose powers and leads create them; a {shape} has the agents it lists"
        ));
    }
    match shape {
        TeamShape::Layered => {
            if let Some(a) = spec
                .agents
                .iter()
                .find(|a| a.config.layer != AgentLayer::Top && a.config.supervisor.is_none())
            {
                return Err(TeamError::MissingSupervisor {
                    agent: a.config.id.clone(),
                    layer: a.config.layer,
                });
            }
        }
        TeamShape::Crew => {
            let leads: Vec<&AgentId> = ids_on(spec, AgentLayer::Mid).collect();
            if let [first, second, ..] = leads[..] {
                return bad(format!(
                    "a crew has one lead, but `{first}` and `{second}` are leads; give the team top powers (a layered team) for several leads"
                ));
            }
            if let Some(lead) = spec.agents.iter().find(|a| a.config.layer == AgentLayer::Mid)
                && let Some(supervisor) = &lead.config.supervisor
            {
                return bad(format!(
                    "the lead `{}` of a crew has no supervisor (a crew has no powers), but it names `{supervisor}`",
                    lead.config.id
                ));
            }
            if ids_on(spec, AgentLayer::Bottom).next().is_none() {
                return bad("a crew needs at least one executor under its lead".into());
            }
            if let Some(a) = spec
                .agents
                .iter()
                .find(|a| a.config.layer == AgentLayer::Bottom && a.config.supervisor.is_none())
            {
                return Err(TeamError::MissingSupervisor {
                    agent: a.config.id.clone(),
                    layer: a.config.layer,
                });
            }
        }
        TeamShape::Single => check_single(spec)?,
    }
    Ok(shape)
}

/// A single agent: exactly one executor, without a supervisor, not an OODA agent.
fn check_single(spec: &TeamSpec) -> Result<(), TeamError> {
    let bad = |reason: String| Err(TeamError::Shape { shape: TeamShape::Single, reason });
    let agent = match &spec.agents[..] {
        [] => return bad("the team has no agents; a team needs at least one".into()),
        [agent] => agent,
        [first, second, ..] => {
            return bad(format!(
                "a single-agent team has one executor, but `{}` and `{}` are executors; give them a lead (a crew) for several",
                first.config.id, second.config.id
            ));
        }
    };
    if let Some(supervisor) = &agent.config.supervisor {
        return bad(format!(
            "the executor `{}` of a single-agent team has no supervisor, but it names `{supervisor}`",
            agent.config.id
        ));
    }
    if let RoleSpec::Bottom(b) = &agent.role
        && b.ooda.is_some()
    {
        return bad(format!(
            "the executor `{}` of a single-agent team runs the team's tasks with its own tool loop (or a kind); an OODA agent takes its objectives from a lead",
            agent.config.id
        ));
    }
    Ok(())
}

/// Whom an agent of `layer` without a supervisor should report to, in words.
pub(crate) fn reports_to(layer: AgentLayer) -> &'static str {
    match layer {
        AgentLayer::Mid => "in a team with top powers a lead reports to a top power",
        _ => "in a team with leads an executor reports to a lead",
    }
}

fn ids_on(spec: &TeamSpec, layer: AgentLayer) -> impl Iterator<Item = &AgentId> {
    spec.agents.iter().filter(move |a| a.config.layer == layer).map(|a| &a.config.id)
}
