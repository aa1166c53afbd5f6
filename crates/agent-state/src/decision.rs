//! Governance decisions and their rules, and the weighted-majority tally for arbitration.
//!
//! The rules, each enforced by [`Decision::sign`] and [`Decision::veto`]:
//! - only a required signer may sign or veto;
//! - nothing can be signed or vetoed once the decision is approved or vetoed;
//! - signing twice changes nothing;
//! - a decision is approved exactly when every required signer has signed;
//! - any required signer's veto is final.

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

/// A decision that needs the signatures of named agents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Id, supplied by the proposer.
    pub id: DecisionId,
    /// Who proposed it.
    pub proposer: AgentId,
    /// What is decided.
    pub content: serde_json::Value,
    /// Who must sign: not empty, no repeats.
    pub required_signers: Vec<AgentId>,
    /// Signatures so far, in order.
    pub signatures: Vec<Signature>,
    /// The veto, if any. At most one: a veto is final.
    pub vetoes: Vec<Veto>,
    /// Where it stands.
    pub status: DecisionStatus,
    /// When it was proposed.
    pub created_at: Timestamp,
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
    /// No required signers.
    #[error("decision {id}: `required_signers` must name at least one agent")]
    NoSigners {
        /// The decision.
        id: DecisionId,
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
        };
        decision.check()?;
        Ok(decision)
    }

    /// Checks what a submitted decision must hold: signers present and unique.
    pub fn check(&self) -> Result<(), ProposeError> {
        if self.required_signers.is_empty() {
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

    /// Whether `agent` has signed.
    pub fn has_signed(&self, agent: &AgentId) -> bool {
        self.signatures.iter().any(|s| &s.signer == agent)
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
        self.signatures.push(Signature { signer: signer.clone(), at });
        if self.missing_signers().next().is_none() {
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
        if !self.is_required_signer(agent) {
            return Err(SignError::NotARequiredSigner {
                id: self.id,
                agent: agent.clone(),
                required: self
                    .required_signers
                    .iter()
                    .map(AgentId::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
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
    pub choice: String,
    /// The voter's weight; must be finite and not negative.
    pub weight: f64,
}

/// The result of a weighted-majority tally.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// The winning option.
    pub winner: String,
    /// Total weight per option, in order of first appearance.
    pub totals: Vec<(String, f64)>,
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
    let mut totals: Vec<(String, f64)> = Vec::new();
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
    let winner =
        totals.iter().find(|(_, w)| *w == best).map(|(c, _)| c.clone()).unwrap_or_default();
    Ok(Tally { winner, totals, tie_broken: leaders > 1 })
}
