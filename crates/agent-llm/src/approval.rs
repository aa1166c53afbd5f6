//! Budget extensions put to the top layer ([`OnExceed::AskTop`]) or to a human
//! ([`OnExceed::AskHuman`]) as governance decisions.
//!
//! [`ApprovalDesk::run`] waits for the [`UsageLedger`] to ask for an extension, proposes a
//! decision whose content has `"kind": "budget_extension"` (with the limit, what was used, the
//! current and the proposed limit), signed by its `signers` (every top power; none when a
//! human decides) and, when it has `humans`, by one of them too ([`Decision::human_approval`]:
//! a human signs or vetoes with `strata approve` / `strata veto`), sends a
//! `signature_request` to every signer, and waits for the decision, however long it takes: approved → [`UsageLedger::approve`], vetoed →
//! [`UsageLedger::refuse`] with the veto's reason, which stops the run. While it waits, every
//! other reasoning call waits too: the run is paused. The powers' reviews of the extension are
//! exempt from the budget (they would otherwise wait for themselves), and the powers' other
//! calls do not wait for it either: a power handles its messages one at a time, so a call of
//! its that waited would keep it from ever reading the signature request. A signer that cannot
//! be sent the request could never sign: the extension is then refused with the reason.
//!
//! [`OnExceed::AskTop`]: crate::OnExceed::AskTop
//! [`OnExceed::AskHuman`]: crate::OnExceed::AskHuman

use std::sync::Arc;
use std::time::Duration;

use agent_core::protocol::SignatureRequest;
use agent_core::{Clock, new_decision_id, new_message_id};
use agent_state::{
    Address, AgentId, Decision, DecisionId, DecisionStatus, HumanApproval, Message, MessageKind,
};
use governance::Governance;
use message_bus::MessageBus;
use serde_json::json;

use crate::ledger::UsageLedger;
use crate::reasoner::BUDGET_DECISION_KIND;

/// Puts the ledger's extension requests to the top layer.
pub struct ApprovalDesk {
    /// The ledger to serve.
    pub ledger: Arc<UsageLedger>,
    /// Where the decision is taken.
    pub governance: Arc<dyn Governance>,
    /// Where the signature requests go.
    pub bus: Arc<dyn MessageBus>,
    /// The runtime's clock.
    pub clock: Arc<dyn Clock>,
    /// The power named as proposer (the team's first top power).
    pub proposer: AgentId,
    /// The powers who must sign (every top power; none when a human decides).
    pub signers: Vec<AgentId>,
    /// The humans one of whom must sign (names, without `human:`; the team's
    /// `[approvals] humans` with [`OnExceed::AskHuman`]), or none.
    ///
    /// [`OnExceed::AskHuman`]: crate::OnExceed::AskHuman
    pub humans: Vec<String>,
    /// How often the decision's status is checked.
    pub poll: Duration,
}

impl std::fmt::Debug for ApprovalDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalDesk")
            .field("proposer", &self.proposer)
            .field("signers", &self.signers)
            .field("humans", &self.humans)
            .finish_non_exhaustive()
    }
}

impl ApprovalDesk {
    /// Serves requests until the task is dropped or aborted. Cancellation-safe: an abort
    /// between steps leaves at most a pending decision behind.
    pub async fn run(self) {
        loop {
            let request = self.ledger.next_approval().await;
            let content = json!({
                "kind": BUDGET_DECISION_KIND,
                "limit": request.limit,
                "setting": request.limit.setting(),
                "used": request.used,
                "requested": request.requested,
                "cap": request.cap,
                "proposed_cap": request.proposed_cap,
            });
            let id = new_decision_id();
            // A decision a human decides may have no required signers.
            let decision = Decision {
                id,
                proposer: self.proposer.clone(),
                content,
                required_signers: self.signers.clone(),
                signatures: Vec::new(),
                vetoes: Vec::new(),
                status: DecisionStatus::Pending,
                created_at: self.clock.now(),
                human_approval: (!self.humans.is_empty())
                    .then(|| HumanApproval { allowed: self.humans.clone() }),
            };
            let decision = match decision.check().map(|()| decision) {
                Ok(d) => d,
                Err(e) => {
                    self.ledger
                        .refuse(request.id, &format!("could not propose the extension: {e}"));
                    continue;
                }
            };
            if let Err(e) = self.governance.submit(decision).await {
                self.ledger.refuse(request.id, &format!("could not propose the extension: {e}"));
                continue;
            }
            if self.humans.is_empty() {
                tracing::info!(decision = %id, limit = %request.limit, "budget extension put to the top layer");
            } else {
                tracing::warn!(decision = %id, limit = %request.limit, humans = %self.humans.join(", "), "budget extension waits for a human: strata approve RUN {id} --as NAME");
            }
            if let Err(reason) = self.ask_signers(id).await {
                // A power that was never asked cannot sign: the decision could never be
                // approved, and every reasoning call would wait for it forever.
                tracing::error!(decision = %id, %reason, "the budget extension cannot be decided");
                self.ledger.refuse(request.id, &reason);
                continue;
            }
            loop {
                tokio::time::sleep(self.poll).await;
                match self.governance.get(id).await {
                    Ok(Some(d)) if d.status == DecisionStatus::Approved => {
                        self.ledger.approve(request.id);
                        break;
                    }
                    Ok(Some(d)) if d.status == DecisionStatus::Vetoed => {
                        let reason = d
                            .vetoes
                            .first()
                            .map(|v| format!("vetoed by {}: {}", v.vetoer, v.reason))
                            .unwrap_or_else(|| "vetoed".into());
                        self.ledger.refuse(request.id, &reason);
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, decision = %id, "cannot read the extension decision; trying again")
                    }
                }
            }
        }
    }

    /// Sends a signature request for decision `id` to every signer; the first failure is the
    /// reason the extension cannot be decided.
    async fn ask_signers(&self, id: DecisionId) -> Result<(), String> {
        let payload = serde_json::to_value(SignatureRequest { decision: id })
            .map_err(|e| format!("cannot encode the signature request: {e}"))?;
        for signer in &self.signers {
            let message = Message::new(
                new_message_id(),
                self.proposer.clone(),
                Address::Agent(signer.clone()),
                MessageKind::SignatureRequest,
                payload.clone(),
                self.clock.now(),
            );
            self.bus.send(message).await.map_err(|e| {
                format!("could not ask {signer} to sign the extension (decision {id}): {e}")
            })?;
        }
        Ok(())
    }
}
