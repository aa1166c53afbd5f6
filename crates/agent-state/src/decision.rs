//! Governance decisions and their rules, and the weighted-majority tally for arbitration.
//!
//! The rules, each enforced by [`Decision::sign`] and [`Decision::veto`]:
//! - only a required signer may sign or veto (and, on a decision that asks for a human's
//!   approval, one of its allowed humans);
//! - nothing can be signed or vetoed once the decision is approved or vetoed;
//! - signing twice changes nothing;
//! - a decision is approved exactly when every required signer has signed and, if it asks
//!   for a human's approval ([`HumanApproval`]), one of its allowed humans has signed;
//! - any required signer's (or allowed human's) veto is final.
//!
//! **Humans.** A human signs as `human:<name>` ([`AgentId::human`]). A human can be a required
//! signer like any agent. A decision may instead ask for *one* human signature out of a set
//! ([`Decision::human_approval`]: the team file's `[approvals] humans`): any allowed human may
//! sign or veto it, the first human signature satisfies it, and a second allowed human's
//! signature changes nothing ([`SignOutcome::AlreadySigned`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{AgentId, DecisionId, Timestamp, Versioned};

/// Where a decision stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionStatus {
    /// Waiting for signatures.
    Pending,
    /// Every required signer signed.
    Approved,
    /// A required signer vetoed.
    Vetoed,
}

impl DecisionStatus {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            DecisionStatus::Pending => "pending",
            DecisionStatus::Approved => "approved",
            DecisionStatus::Vetoed => "vetoed",
        }
    }
}

impl fmt::Display for DecisionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// Who signed.
    pub signer: AgentId,
    /// When.
    pub at: Timestamp,
}

/// One veto.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Veto {
    /// Who vetoed.
    pub vetoer: AgentId,
    /// Why.
    pub reason: String,
    /// When.
    pub at: Timestamp,
}

/// A decision's need for one human signature out of a set of allowed humans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HumanApproval {
    /// The humans (names, without `human:`) any one of whom may sign or veto: not empty, no
    /// repeats, each a valid name ([`check_human_name`](crate::check_human_name)).
    pub allowed: Vec<String>,
}

impl HumanApproval {
    /// Whether `agent` is `human:<name>` for an allowed name.
    pub fn allows(&self, agent: &AgentId) -> bool {
        agent.human_name().is_some_and(|name| self.allowed.iter().any(|a| a == name))
    }
}

/// A decision that needs the signatures of named agents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Id, supplied by the proposer.
    pub id: DecisionId,
    /// Who proposed it.
    pub proposer: AgentId,
    /// What is decided.
    pub content: serde_json::Value,
    /// Who must sign: no repeats; not empty unless [`human_approval`](Self::human_approval)
    /// asks for a human.
    pub required_signers: Vec<AgentId>,
    /// Signatures so far, in order.
    pub signatures: Vec<Signature>,
    /// The veto, if any. At most one: a veto is final.
    pub vetoes: Vec<Veto>,
    /// Where it stands.
    pub status: DecisionStatus,
    /// When it was proposed.
    pub created_at: Timestamp,
    /// One signature of these humans is needed too. Absent in decisions stored before humans
    /// could sign (read as `None`), and not written when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_approval: Option<HumanApproval>,
}

impl Versioned for Decision {
    const KIND: &'static str = "decision";
    const VERSION: u32 = 1;
}

/// What a successful signature did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignOutcome {
    /// Recorded; more signatures are needed.
    Signed,
    /// Recorded, and it was the last one: the decision is approved.
    Approved,
    /// This signer had already signed; nothing changed.
    AlreadySigned,
}

/// A proposal that cannot become a decision.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProposeError {
    /// No required signers (and no human approval asked).
    #[error("decision {id}: `required_signers` must name at least one agent")]
    NoSigners {
        /// The decision.
        id: DecisionId,
    },
    /// A human approval that names no human.
    #[error("decision {id}: a human approval must allow at least one human")]
    NoHumans {
        /// The decision.
        id: DecisionId,
    },
    /// A human approval naming a human that cannot be named so, or twice.
    #[error("decision {id}: the human approval's `{name}` is not allowed: {why}")]
    BadHuman {
        /// The decision.
        id: DecisionId,
        /// The name (control characters escaped).
        name: String,
        /// Why.
        why: String,
    },
    /// A signer listed twice.
    #[error("decision {id}: `required_signers` lists `{signer}` twice")]
    DuplicateSigner {
        /// The decision.
        id: DecisionId,
        /// The repeated signer.
        signer: AgentId,
    },
}

/// A refused signature or veto. The decision is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SignError {
    /// The agent is not a required signer of this decision.
    #[error("decision {id}: `{agent}` is not a required signer (required: {required})")]
    NotARequiredSigner {
        /// The decision.
        id: DecisionId,
        /// Who tried.
        agent: AgentId,
        /// The required signers, comma-separated.
        required: String,
    },
    /// The decision is already approved or vetoed.
    #[error("decision {id} is already {status}; it can no longer be signed or vetoed")]
    AlreadyDecided {
        /// The decision.
        id: DecisionId,
        /// Its final status.
        status: DecisionStatus,
    },
    /// A veto without a reason.
    #[error("decision {id}: a veto needs a reason")]
    EmptyVetoReason {
        /// The decision.
        id: DecisionId,
    },
}

impl Decision {
    /// A pending decision. Fails if `required_signers` is empty or repeats a name.
    pub fn propose(
        id: DecisionId,
        proposer: AgentId,
        content: serde_json::Value,
        required_signers: Vec<AgentId>,
        created_at: Timestamp,
    ) -> Result<Self, ProposeError> {
        let decision = Self {
            id,
            proposer,
            content,
            required_signers,
            signatures: Vec::new(),
            vetoes: Vec::new(),
            status: DecisionStatus::Pending,
            created_at,
            human_approval: None,
        };
        decision.check()?;
        Ok(decision)
    }

    /// This decision, asking also for one signature of the `allowed` humans; checked again.
    pub fn with_human_approval(mut self, allowed: Vec<String>) -> Result<Self, ProposeError> {
        self.human_approval = Some(HumanApproval { allowed });
        self.check()?;
        Ok(self)
    }

    /// Checks what a submitted decision must hold: signers unique and present (required
    /// signers, or a human approval), a human approval's names valid and unique.
    pub fn check(&self) -> Result<(), ProposeError> {
        if let Some(humans) = &self.human_approval {
            if humans.allowed.is_empty() {
                return Err(ProposeError::NoHumans { id: self.id });
            }
            for (i, name) in humans.allowed.iter().enumerate() {
                let why = match crate::check_human_name(name) {
                    Err(e) => Some(e.to_string()),
                    Ok(()) if humans.allowed[..i].contains(name) => Some("listed twice".into()),
                    Ok(()) => None,
                };
                if let Some(why) = why {
                    return Err(ProposeError::BadHuman {
                        id: self.id,
                        name: name.escape_debug().to_string(),
                        why,
                    });
                }
            }
        } else if self.required_signers.is_empty() {
            return Err(ProposeError::NoSigners { id: self.id });
        }
        for (i, s) in self.required_signers.iter().enumerate() {
            if self.required_signers[..i].contains(s) {
                return Err(ProposeError::DuplicateSigner { id: self.id, signer: s.clone() });
            }
        }
        Ok(())
    }

    /// Whether `agent` must sign.
    pub fn is_required_signer(&self, agent: &AgentId) -> bool {
        self.required_signers.contains(agent)
    }

    /// Whether `agent` is one of the humans the decision's human approval allows.
    pub fn is_allowed_human(&self, agent: &AgentId) -> bool {
        self.human_approval.as_ref().is_some_and(|h| h.allows(agent))
    }

    /// Whether `agent` may sign or veto: a required signer or an allowed human.
    pub fn may_sign(&self, agent: &AgentId) -> bool {
        self.is_required_signer(agent) || self.is_allowed_human(agent)
    }

    /// Whether `agent` has signed.
    pub fn has_signed(&self, agent: &AgentId) -> bool {
        self.signatures.iter().any(|s| &s.signer == agent)
    }

    /// Whether the decision still waits for a human's signature (its human approval, when it
    /// asks for one, has none yet).
    pub fn needs_human(&self) -> bool {
        self.human_approval.is_some()
            && !self.signatures.iter().any(|s| self.is_allowed_human(&s.signer))
    }

    /// Whether every signature the decision needs is there.
    pub fn fully_signed(&self) -> bool {
        self.missing_signers().next().is_none() && !self.needs_human()
    }

    /// The required signers who have not signed yet.
    pub fn missing_signers(&self) -> impl Iterator<Item = &AgentId> {
        self.required_signers.iter().filter(|s| !self.has_signed(s))
    }

    /// Records `signer`'s signature.
    pub fn sign(&mut self, signer: &AgentId, at: Timestamp) -> Result<SignOutcome, SignError> {
        self.check_actor(signer)?;
        if self.has_signed(signer) {
            return Ok(SignOutcome::AlreadySigned);
        }
        if !self.is_required_signer(signer) && !self.needs_human() {
            // Another allowed human signed already: the one human signature is there.
            return Ok(SignOutcome::AlreadySigned);
        }
        self.signatures.push(Signature { signer: signer.clone(), at });
        if self.fully_signed() {
            self.status = DecisionStatus::Approved;
            Ok(SignOutcome::Approved)
        } else {
            Ok(SignOutcome::Signed)
        }
    }

    /// Records `vetoer`'s veto, which is final.
    pub fn veto(
        &mut self,
        vetoer: &AgentId,
        reason: impl Into<String>,
        at: Timestamp,
    ) -> Result<(), SignError> {
        self.check_actor(vetoer)?;
        let reason = reason.into();
        if reason.trim().is_empty() {
            return Err(SignError::EmptyVetoReason { id: self.id });
        }
        self.vetoes.push(Veto { vetoer: vetoer.clone(), reason, at });
        self.status = DecisionStatus::Vetoed;
        Ok(())
    }

    fn check_actor(&self, agent: &AgentId) -> Result<(), SignError> {
        if self.status != DecisionStatus::Pending {
            return Err(SignError::AlreadyDecided { id: self.id, status: self.status });
        }
        if !self.may_sign(agent) {
            let mut required: Vec<String> =
                self.required_signers.iter().map(|s| s.as_str().to_owned()).collect();
            if let Some(humans) = &self.human_approval {
                let names: Vec<String> =
                    humans.allowed.iter().map(|n| format!("{}{n}", crate::HUMAN_PREFIX)).collect();
                required.push(format!("one of {}", names.join(" | ")));
            }
            return Err(SignError::NotARequiredSigner {
                id: self.id,
                agent: agent.clone(),
                required: required.join(", "),
            });
        }
        Ok(())
    }
}

/// One weighted vote in an arbitration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vote {
    /// Who voted.
    pub voter: AgentId,
    /// The option chosen.
    pub choice: BallotChoice,
    /// The voter's weight; must be finite and not negative.
    pub weight: f64,
}

/// The result of a weighted-majority tally.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// The winning option.
    pub winner: BallotChoice,
    /// Total weight per option, in order of first appearance.
    pub totals: Vec<(BallotChoice, f64)>,
    /// Whether the winner was chosen by the tie rule.
    pub tie_broken: bool,
}

/// A tally that cannot be computed.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TallyError {
    /// No votes.
    #[error("cannot tally an arbitration with no votes")]
    NoVotes,
    /// A negative, infinite or NaN weight.
    #[error("vote by `{voter}` has weight {weight}; weights must be finite and not negative")]
    InvalidWeight {
        /// Who voted.
        voter: AgentId,
        /// The weight.
        weight: f64,
    },
    /// The same voter twice.
    #[error("`{voter}` voted twice")]
    DuplicateVoter {
        /// Who voted twice.
        voter: AgentId,
    },
}

/// Weighted majority: the option with the largest total weight wins.
///
/// **Tie rule**: when several options share the largest total, the one named by the earliest
/// vote in `votes` wins. The arbitrator puts its own vote first, so it holds the casting vote.
pub fn tally(votes: &[Vote]) -> Result<Tally, TallyError> {
    if votes.is_empty() {
        return Err(TallyError::NoVotes);
    }
    let mut totals: Vec<(BallotChoice, f64)> = Vec::new();
    for (i, vote) in votes.iter().enumerate() {
        if !vote.weight.is_finite() || vote.weight < 0.0 {
            return Err(TallyError::InvalidWeight {
                voter: vote.voter.clone(),
                weight: vote.weight,
            });
        }
        if votes[..i].iter().any(|v| v.voter == vote.voter) {
            return Err(TallyError::DuplicateVoter { voter: vote.voter.clone() });
        }
        match totals.iter_mut().find(|(c, _)| *c == vote.choice) {
            Some((_, w)) => *w += vote.weight,
            None => totals.push((vote.choice.clone(), vote.weight)),
        }
    }
    let best = totals.iter().map(|(_, w)| *w).fold(f64::NEG_INFINITY, f64::max);
    let leaders = totals.iter().filter(|(_, w)| *w == best).count();
    // `totals` is in order of first appearance, so the first leader is the earliest vote's.
    let winner = totals
        .iter()
        .find(|(_, w)| *w == best)
        .map_or_else(|| BallotChoice::Other(String::new()), |(c, _)| c.clone());
    Ok(Tally { winner, totals, tie_broken: leaders > 1 })
}

/// Which situations the top layer settles by a weighted vote ([`tally`]) instead of a plain
/// rule (a team file's `[arbitration]`). Each arbitration's result is published on the global
/// board and sent to the parties, which act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArbitrationSettings {
    /// A lead that cannot finish a step (every able executor failed it) escalates it as a
    /// conflict: the powers vote [`Retry`](BallotChoice::Retry) (the lead places the step again,
    /// once) or [`Abandon`](BallotChoice::Abandon) (the task fails with the lead's reason).
    /// Default `true`; `false`: the task fails at once, as an escalation always did.
    pub escalations: bool,
    /// A lead checks an executor's successful result against the step's acceptance check
    /// (when the plan gives one) through its reasoner; when it finds the result falls short,
    /// lead and executor disagree and the powers vote [`Redo`](BallotChoice::Redo) (another
    /// executor does the step again) or [`Accept`](BallotChoice::Accept) (the result stands).
    /// Default `true`.
    pub acceptance: bool,
    /// A plan one power vetoes while its proposer stands by it is put to the vote
    /// ([`Proceed`](BallotChoice::Proceed) or [`Abandon`](BallotChoice::Abandon)) instead of
    /// being dropped. Default `false`: a veto is final.
    pub vetoed_plans: bool,
}

impl Default for ArbitrationSettings {
    fn default() -> Self {
        Self { escalations: true, acceptance: true, vetoed_plans: false }
    }
}

impl ArbitrationSettings {
    /// Whether any situation is arbitrated.
    pub fn any(&self) -> bool {
        self.escalations || self.acceptance || self.vetoed_plans
    }
}

/// An option on an arbitration's ballot, and so a vote's choice and a tally's winner: one of
/// those the runtime puts on the ballot of the situations it arbitrates, or any other a reported
/// conflict offers.
///
/// Written as its wire name, a JSON string (`"retry"`, or the other option's own text), as
/// votes, tallies and rulings were written when they held plain strings: stored runs read the
/// same. A name the runtime uses always reads as its variant, never as [`Other`](Self::Other):
/// make one from text with `From` (`BallotChoice::from("retry") == BallotChoice::Retry`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum BallotChoice {
    /// `retry`: the lead places the escalated step again.
    Retry,
    /// `abandon`: the task fails (an escalation), or the vetoed plan is dropped.
    Abandon,
    /// `redo`: another executor does the disputed step again.
    Redo,
    /// `accept`: the disputed result stands.
    Accept,
    /// `proceed`: the vetoed plan runs.
    Proceed,
    /// Another option, by its text: a conflict reported by its parties may offer any.
    Other(String),
}

impl BallotChoice {
    /// The wire name: `retry`, ..., or the other option's text.
    pub fn as_str(&self) -> &str {
        match self {
            BallotChoice::Retry => "retry",
            BallotChoice::Abandon => "abandon",
            BallotChoice::Redo => "redo",
            BallotChoice::Accept => "accept",
            BallotChoice::Proceed => "proceed",
            BallotChoice::Other(text) => text,
        }
    }
}

impl From<String> for BallotChoice {
    fn from(text: String) -> Self {
        match text.as_str() {
            "retry" => BallotChoice::Retry,
            "abandon" => BallotChoice::Abandon,
            "redo" => BallotChoice::Redo,
            "accept" => BallotChoice::Accept,
            "proceed" => BallotChoice::Proceed,
            _ => BallotChoice::Other(text),
        }
    }
}

impl From<&str> for BallotChoice {
    fn from(text: &str) -> Self {
        BallotChoice::from(text.to_owned())
    }
}

impl From<BallotChoice> for String {
    fn from(choice: BallotChoice) -> Self {
        match choice {
            BallotChoice::Other(text) => text,
            named => named.as_str().to_owned(),
        }
    }
}

impl fmt::Display for BallotChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for BallotChoice {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for BallotChoice {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
