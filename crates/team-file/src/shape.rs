//! A team file's shape ([`TeamShape`]): `shape = "layered" | "crew" | "single"`, or the
//! shape its agents make when it is left out, and every check of it with the position it
//! refers to: the agents a shape has, who has a `supervisor`, and the tables that need top
//! powers (`[[roles]]`, `[arbitration]`, `[approvals] plans`, `[budget] on_exceed = "ask"`).

use std::str::FromStr;

use agent_pool::TeamShape;
use agent_state::AgentLayer;
use toml::Spanned;

use crate::error::{FileError, Seg, Source};
use crate::raw::{Entry, EntryKind, RawTeam};
use crate::team::list_or_none;

/// The team's shape: the one written, checked against its agents, or the one they make.
pub(crate) fn shape(
    src: &Source<'_>,
    raw: &RawTeam,
    entries: &[Entry<'_>],
) -> Result<TeamShape, FileError> {
    if entries.is_empty() {
        return Err(src.error(
            raw.shape.as_ref().map_or(0..0, Spanned::span),
            "the team has no agents; add a [[bottom]] executor (a single agent), a [[mid]] lead with executors (a crew), or [[top]] powers with leads and executors (a layered team)",
        ));
    }
    let made = TeamShape::of_layers(entries.iter().map(|e| e.layer));
    let shape = match &raw.shape {
        Some(written) => {
            let shape = TeamShape::from_str(written.get_ref()).map_err(|_| {
                src.error(
                    written.span(),
                    format!(
                        "`shape` is \"layered\" (powers, leads, executors), \"crew\" (one lead and its executors) or \"single\" (one executor), not \"{}\"",
                        written.get_ref()
                    ),
                )
            })?;
            if shape != made {
                return Err(mismatch(src, written, shape, made, entries));
            }
            shape
        }
        None => made,
    };
    Checks { src, raw, entries }.check(shape)?;
    Ok(shape)
}

/// The written shape is not the one the agents make: the first agent that does not belong,
/// or what is missing.
fn mismatch(
    src: &Source<'_>,
    written: &Spanned<String>,
    shape: TeamShape,
    made: TeamShape,
    entries: &[Entry<'_>],
) -> FileError {
    let first = |layer: AgentLayer| entries.iter().find(|e| e.layer == layer);
    let remove = |e: &Entry<'_>, what: &str| {
        src.error(
            e.id.span(),
            format!(
                "`{}` is a {}, but the team is written as `shape = \"{shape}\"`, which has {what}; remove it, or write `shape = \"{made}\"`",
                e.id(),
                noun(e.layer)
            ),
        )
    };
    match (shape, made) {
        (TeamShape::Crew | TeamShape::Single, TeamShape::Layered) => match first(AgentLayer::Top) {
            Some(top) => remove(top, "no top powers"),
            None => src.error(written.span(), "no top powers expected"),
        },
        (TeamShape::Single, TeamShape::Crew) => match first(AgentLayer::Mid) {
            Some(lead) => remove(lead, "no lead (one executor alone)"),
            None => src.error(written.span(), "no lead expected"),
        },
        (TeamShape::Layered, _) => src.error(
            written.span(),
            format!(
                "`shape = \"layered\"` needs top powers to propose and sign plans: add a [[top]] table, or write `shape = \"{made}\"` (the agents listed make a {made})"
            ),
        ),
        _ => src.error(
            written.span(),
            format!(
                "`shape = \"crew\"` needs a lead: add a [[mid]] table, or write `shape = \"{made}\"`"
            ),
        ),
    }
}

/// The checks of a shape, on a team file's agents and tables.
struct Checks<'c, 'e> {
    src: &'c Source<'c>,
    raw: &'c RawTeam,
    entries: &'c [Entry<'e>],
}

impl Checks<'_, '_> {
    fn check(&self, shape: TeamShape) -> Result<(), FileError> {
        match shape {
            TeamShape::Layered => self.layered(),
            TeamShape::Crew => self.crew()?.tables(shape),
            TeamShape::Single => self.single()?.tables(shape),
        }
    }

    /// Every lead reports to a power and every executor to a lead.
    fn layered(&self) -> Result<(), FileError> {
        let Some(entry) =
            self.entries.iter().find(|e| e.layer != AgentLayer::Top && e.supervisor.is_none())
        else {
            return Ok(());
        };
        let (above, noun_above) = match entry.layer {
            AgentLayer::Mid => (AgentLayer::Top, "a top power"),
            _ => (AgentLayer::Mid, "a lead"),
        };
        Err(self.src.error(
            entry.id.span(),
            format!(
                "the {} `{}` has no `supervisor`; in a team with top powers it reports to {noun_above} ({}): add `supervisor = \"...\"`",
                noun(entry.layer),
                entry.id(),
                self.ids_on(above)
            ),
        ))
    }

    /// One lead without a supervisor, and executors that report to it.
    fn crew(&self) -> Result<&Self, FileError> {
        let src = self.src;
        let mut leads = self.entries.iter().filter(|e| e.layer == AgentLayer::Mid);
        let Some(lead) = leads.next() else { return Ok(self) };
        if let Some(second) = leads.next() {
            return Err(src.error(
                second.id.span(),
                format!(
                    "a crew has one lead, and `{}` (line {}) is this crew's: remove `{}`, or give the team top powers (a layered team) for several leads",
                    lead.id(),
                    src.position(lead.id.span()).0,
                    second.id()
                ),
            ));
        }
        if let Some(supervisor) = lead.supervisor {
            return Err(src.error(
                supervisor.span(),
                "a crew's lead has no supervisor (a crew has no top powers); remove `supervisor`",
            ));
        }
        let mut executors = self.entries.iter().filter(|e| e.layer == AgentLayer::Bottom);
        if executors.clone().next().is_none() {
            return Err(src.error(
                lead.id.span(),
                format!(
                    "a crew needs at least one executor: add a [[bottom]] table with `supervisor = \"{}\"`",
                    lead.id()
                ),
            ));
        }
        if let Some(alone) = executors.find(|e| e.supervisor.is_none()) {
            return Err(src.error(
                alone.id.span(),
                format!(
                    "the executor `{}` has no `supervisor`; in a crew it reports to the lead: add `supervisor = \"{}\"`",
                    alone.id(),
                    lead.id()
                ),
            ));
        }
        Ok(self)
    }

    /// One executor, without a supervisor, that runs its own tool loop (or a kind).
    fn single(&self) -> Result<&Self, FileError> {
        let src = self.src;
        let first = &self.entries[0];
        if let Some(second) = self.entries.get(1) {
            return Err(src.error(
                second.id.span(),
                format!(
                    "a single-agent team has one agent, and `{}` (line {}) is this one's: remove `{}`, or give the executors a lead (a crew)",
                    first.id(),
                    src.position(first.id.span()).0,
                    second.id()
                ),
            ));
        }
        if let Some(supervisor) = first.supervisor {
            return Err(src.error(
                supervisor.span(),
                "a single agent has no supervisor: it takes the team's tasks itself; remove `supervisor`",
            ));
        }
        if let EntryKind::Bottom(raw) = first.kind
            && let Some(ooda) = &raw.ooda
        {
            return Err(src.error(
                ooda.span(),
                "a single agent works the team's tasks with its own tool loop (or a `kind`); an OODA agent takes its objectives from a lead: remove `ooda`, or add a lead (a crew)",
            ));
        }
        Ok(self)
    }

    /// The tables that need top powers: roles (powers and leads create them), arbitration
    /// (the powers vote), plans signed by a human, budget extensions the powers vote on.
    fn tables(&self, shape: TeamShape) -> Result<(), FileError> {
        let (src, raw) = (self.src, self.raw);
        let without = |what: &str| {
            format!(
                "{what} needs top powers, and a {} has none; remove it, or use a layered team",
                describe(shape)
            )
        };
        if let Some(role) = raw.roles.first() {
            return Err(src.error(
                role.name.span(),
                without("[[roles]] (agents the powers and leads create while the team works)"),
            ));
        }
        if raw.arbitration.is_some() {
            let span = ["escalations", "acceptance", "vetoed_plans"]
                .into_iter()
                .find_map(|key| src.locate(&[Seg::Key("arbitration"), Seg::Key(key)]))
                .unwrap_or(0..0);
            return Err(src.error(
                span,
                format!(
                    "{} (nothing is put to a vote: a step no executor finishes fails the task, a result short of its acceptance check goes to another executor)",
                    without("[arbitration]")
                ),
            ));
        }
        if let Some(plans) = raw.approvals.as_ref().and_then(|a| a.plans.as_ref())
            && *plans.get_ref()
        {
            let span = src
                .locate(&[Seg::Key("approvals"), Seg::Key("plans")])
                .filter(|_| plans.span().is_empty())
                .unwrap_or_else(|| plans.span());
            return Err(src.error(
                span,
                without("[approvals] `plans = true` (a human signs each plan beside the powers)"),
            ));
        }
        if let Some(on_exceed) = raw.budget.as_ref().and_then(|b| b.on_exceed.as_ref())
            && on_exceed.get_ref() == "ask"
        {
            return Err(src.error(
                on_exceed.span(),
                format!(
                    "{} Use \"stop\", or \"ask_human\" with [approvals] humans",
                    without("[budget] `on_exceed = \"ask\"` (the powers vote on an extension)")
                ),
            ));
        }
        Ok(())
    }

    /// The ids on `layer`, in file order, for messages.
    fn ids_on(&self, layer: AgentLayer) -> String {
        list_or_none(self.entries.iter().filter(|e| e.layer == layer).map(Entry::id))
    }
}

/// A shape in words.
fn describe(shape: TeamShape) -> &'static str {
    match shape {
        TeamShape::Layered => "layered team",
        TeamShape::Crew => "crew",
        TeamShape::Single => "single-agent team",
    }
}

fn noun(layer: AgentLayer) -> &'static str {
    match layer {
        AgentLayer::Top => "top power",
        AgentLayer::Mid => "mid lead",
        AgentLayer::Bottom => "bottom executor",
    }
}
