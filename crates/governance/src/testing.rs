//! The conformance suite every [`Governance`] backend runs: named scenarios, then a model-based test.
//!
//! A backend author implements [`GovernanceFactory`] and calls [`run_conformance`] from a plain
//! `#[test]` (not a `#[tokio::test]`: the suite builds its own runtime).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use governance::testing::{GovernanceFactory, run_conformance};
//! use governance::{Governance, InMemoryGovernance};
//!
//! struct Memory;
//!
//! #[async_trait::async_trait]
//! impl GovernanceFactory for Memory {
//!     async fn fresh(&self) -> Arc<dyn Governance> {
//!         Arc::new(InMemoryGovernance::new())
//!     }
//!     async fn reopen(&self, _gov: Arc<dyn Governance>) -> Option<Arc<dyn Governance>> {
//!         None // nothing survives a restart
//!     }
//! }
//!
//! run_conformance(Memory);
//! ```
//!
//! What it checks:
//! 1. one scenario per guarantee and per refusal of the [`Governance`] docs, each asserting the
//!    error variant and that the store is exactly as it was before a refused call;
//! 2. a proptest that applies random sequences of submit, sign, veto, get, list and restart to the
//!    backend and to a reference model (a `BTreeMap` of [`Decision`] driven by the rules of
//!    `agent-state`), compares every reply and the whole store after every step, and checks the
//!    invariants: no decision is approved without every required signature, and a decided
//!    (approved or vetoed) decision never changes again. Cases: `PROPTEST_CASES`, else 64.
//!
//! Every failure panics with a message naming the scenario or the check that failed.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_state::{
    AgentId, Decision, DecisionId, DecisionStatus, HumanApproval, ProposeError, SignError,
    SignOutcome, Signature, Timestamp, Veto,
};
use async_trait::async_trait;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::{DecideError, Governance, SubmitError};

/// Makes the backends the suite runs against.
#[async_trait]
pub trait GovernanceFactory: Send + Sync {
    /// A fresh, empty backend (a new store each call).
    async fn fresh(&self) -> Arc<dyn Governance>;

    /// Drops the backend and opens the same store again, as after a process restart; `None` for
    /// backends that keep nothing across a restart.
    ///
    /// The suite passes its only handle, so the old backend is dropped before the store is opened
    /// again. On `Some`, every change the old backend acknowledged must be there. On `None`, the
    /// suite goes on with a [`fresh`](Self::fresh) backend and an empty model.
    async fn reopen(&self, gov: Arc<dyn Governance>) -> Option<Arc<dyn Governance>>;
}

/// Runs the whole conformance suite against backends from `factory`; panics on the first failure,
/// naming the check.
///
/// Builds its own current-thread tokio runtime (all drivers enabled), so call it from a plain
/// `#[test]`, outside any runtime.
pub fn run_conformance<F: GovernanceFactory>(factory: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("governance conformance: cannot build a tokio runtime: {e}"));
    rt.block_on(run_scenarios(&factory));
    run_model(&rt, &factory);
}

/// The longest generated sequence of operations.
const MAX_OPS: usize = 40;
/// Cases of the model-based test when `PROPTEST_CASES` is not set.
const DEFAULT_CASES: u32 = 64;
/// The agents of the model-based test: the first four may be required signers, the others
/// never are; `human:alice` is the human a generated human approval allows.
const AGENTS: [&str; 7] =
    ["agent-0", "agent-1", "agent-2", "agent-3", "stranger", "human:alice", "human:mallory"];
/// How many decision ids the model-based test submits, so that ids collide.
const SLOTS: u8 = 4;
/// The range of `target` in generated operations.
const TARGETS: u8 = 8;
/// `target` values below this pick a stored decision; the rest pick an unknown id.
const KNOWN_TARGETS: u8 = 7;
/// The range of `actor` in generated operations.
const ACTORS: u8 = 13;
/// `actor` values below this pick a required signer of the target; the rest pick from [`AGENTS`].
const SIGNER_PICKS: u8 = 6;
/// Veto reasons of the model-based test, blank ones included.
const REASONS: [&str; 5] = ["", " \t", "too risky", "needs a rollback plan", "over budget"];

/// A scenario's verdict: `Err` says what went wrong.
type Outcome = Result<(), String>;

/// Fails the scenario with a formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Fails the scenario unless `got` matches the pattern; the message shows what came instead.
macro_rules! ensure_matches {
    ($what:expr, $got:expr, $pat:pat $(if $guard:expr)?) => {
        match $got {
            $pat $(if $guard)? => {}
            ref other => {
                return Err(format!(
                    "{}: expected {}, got {other:?}",
                    $what,
                    stringify!($pat $(if $guard)?)
                ))
            }
        }
    };
}

/// Runs each scenario on a fresh backend.
async fn run_scenarios(factory: &dyn GovernanceFactory) {
    macro_rules! scenarios {
        ($($name:ident),+ $(,)?) => {$(
            let gov = factory.fresh().await;
            if let Err(why) = $name(gov).await {
                panic!("governance conformance: scenario `{}` failed: {why}", stringify!($name));
            }
        )+};
    }
    scenarios!(
        submit_stores_the_decision_as_given,
        get_of_an_unknown_id_is_none,
        duplicate_id_is_refused,
        not_fresh_submission_is_refused,
        empty_signers_are_refused,
        duplicate_signers_are_refused,
        stranger_cannot_sign,
        stranger_cannot_veto,
        approval_exactly_when_the_last_required_signer_signs,
        a_single_signer_approves_at_once,
        signing_twice_changes_nothing,
        approved_decision_refuses_sign_and_veto,
        veto_is_final,
        empty_veto_reason_is_refused,
        unknown_decision_is_refused,
        list_pending_is_exactly_the_pending_oldest_first,
        a_human_required_signer_signs_and_vetoes,
        one_allowed_human_approves_and_others_are_refused,
    );
    let gov = factory.fresh().await;
    if let Err(why) = acknowledged_changes_survive_a_restart(gov, factory).await {
        panic!(
            "governance conformance: scenario `acknowledged_changes_survive_a_restart` failed: {why}"
        );
    }
}

async fn submit_stores_the_decision_as_given(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    ensure!(stored(&gov, d.id).await? == d, "get returned something else than was submitted");
    ensure!(all(&gov).await? == [d.clone()], "list is not exactly the submitted decision");
    ensure!(pending(&gov).await? == [d], "list_pending is not exactly the submitted decision");
    Ok(())
}

async fn get_of_an_unknown_id_is_none(gov: Arc<dyn Governance>) -> Outcome {
    submit_ok(&gov, &proposal(1, &["a"], 10)).await?;
    let got = gov.get(id(2)).await.map_err(|e| format!("get failed: {e}"))?;
    ensure!(got.is_none(), "get of an unknown id returned {got:?}");
    Ok(())
}

async fn duplicate_id_is_refused(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    sign_ok(&gov, d.id, "a", 11, SignOutcome::Signed).await?;
    let before = all(&gov).await?;
    let mut again = proposal(1, &["c"], 12);
    again.content = serde_json::json!({"other": "content"});
    ensure_matches!(
        "submit of a used id",
        gov.submit(again).await,
        Err(SubmitError::DuplicateId { id }) if id == d.id
    );
    unchanged(&gov, &before, "a duplicate submission").await
}

async fn not_fresh_submission_is_refused(gov: Arc<dyn Governance>) -> Outcome {
    let mut signed = proposal(1, &["a", "b"], 10);
    signed.signatures.push(signature("a", 10));
    ensure_matches!(
        "submit of a pending decision that already has a signature",
        gov.submit(signed).await,
        Err(SubmitError::NotFresh { id, status: DecisionStatus::Pending }) if id == self::id(1)
    );
    let mut approved = proposal(2, &["a"], 10);
    approved.signatures.push(signature("a", 10));
    approved.status = DecisionStatus::Approved;
    ensure_matches!(
        "submit of an approved decision",
        gov.submit(approved).await,
        Err(SubmitError::NotFresh { id, status: DecisionStatus::Approved }) if id == self::id(2)
    );
    let mut vetoed = proposal(3, &["a"], 10);
    vetoed.vetoes.push(Veto { vetoer: agent("a"), reason: "no".into(), at: Timestamp(10) });
    vetoed.status = DecisionStatus::Vetoed;
    ensure_matches!(
        "submit of a vetoed decision",
        gov.submit(vetoed).await,
        Err(SubmitError::NotFresh { id, status: DecisionStatus::Vetoed }) if id == self::id(3)
    );
    let mut veto_but_pending = proposal(4, &["a"], 10);
    veto_but_pending.vetoes.push(Veto {
        vetoer: agent("a"),
        reason: "no".into(),
        at: Timestamp(10),
    });
    ensure_matches!(
        "submit of a pending decision that already has a veto",
        gov.submit(veto_but_pending).await,
        Err(SubmitError::NotFresh { id, status: DecisionStatus::Pending }) if id == self::id(4)
    );
    unchanged(&gov, &[], "refused submissions").await
}

async fn empty_signers_are_refused(gov: Arc<dyn Governance>) -> Outcome {
    ensure_matches!(
        "submit without required signers",
        gov.submit(proposal(1, &[], 10)).await,
        Err(SubmitError::Invalid(ProposeError::NoSigners { id })) if id == self::id(1)
    );
    unchanged(&gov, &[], "a submission without signers").await
}

async fn duplicate_signers_are_refused(gov: Arc<dyn Governance>) -> Outcome {
    ensure_matches!(
        "submit with a repeated signer",
        gov.submit(proposal(1, &["a", "b", "a"], 10)).await,
        Err(SubmitError::Invalid(ProposeError::DuplicateSigner { id, ref signer }))
            if id == self::id(1) && *signer == agent("a")
    );
    unchanged(&gov, &[], "a submission with a repeated signer").await
}

async fn stranger_cannot_sign(gov: Arc<dyn Governance>) -> Outcome {
    // The proposer is not a required signer either, so it is a stranger too.
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    sign_ok(&gov, d.id, "a", 11, SignOutcome::Signed).await?;
    let before = all(&gov).await?;
    for who in ["stranger", "proposer"] {
        ensure_matches!(
            format!("sign by `{who}`, not a required signer"),
            gov.sign(d.id, &agent(who), Timestamp(12)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { id, ref agent, .. }))
                if id == d.id && agent.as_str() == who
        );
    }
    unchanged(&gov, &before, "a stranger's signature").await
}

async fn stranger_cannot_veto(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    let before = all(&gov).await?;
    for who in ["stranger", "proposer"] {
        ensure_matches!(
            format!("veto by `{who}`, not a required signer"),
            gov.veto(d.id, &agent(who), "i object", Timestamp(12)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { id, ref agent, .. }))
                if id == d.id && agent.as_str() == who
        );
    }
    unchanged(&gov, &before, "a stranger's veto").await
}

async fn approval_exactly_when_the_last_required_signer_signs(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b", "c"], 10);
    submit_ok(&gov, &d).await?;
    // Signed out of the listed order: the order of signatures is the order of signing.
    sign_ok(&gov, d.id, "c", 11, SignOutcome::Signed).await?;
    let after_one = stored(&gov, d.id).await?;
    ensure!(after_one.status == DecisionStatus::Pending, "pending after 1 of 3 signatures");
    ensure!(after_one.signatures == [signature("c", 11)], "signatures after 1 of 3");
    sign_ok(&gov, d.id, "a", 12, SignOutcome::Signed).await?;
    let after_two = stored(&gov, d.id).await?;
    ensure!(after_two.status == DecisionStatus::Pending, "pending after 2 of 3 signatures");
    ensure!(pending(&gov).await? == [after_two], "list_pending after 2 of 3 signatures");
    sign_ok(&gov, d.id, "b", 13, SignOutcome::Approved).await?;
    let done = stored(&gov, d.id).await?;
    ensure!(done.status == DecisionStatus::Approved, "approved after 3 of 3 signatures");
    ensure!(
        done.signatures == [signature("c", 11), signature("a", 12), signature("b", 13)],
        "signatures after approval: {:?}",
        done.signatures
    );
    ensure!(done.vetoes.is_empty(), "an approved decision has vetoes");
    ensure!(pending(&gov).await?.is_empty(), "an approved decision is still listed as pending");
    Ok(())
}

async fn a_single_signer_approves_at_once(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a"], 10);
    submit_ok(&gov, &d).await?;
    sign_ok(&gov, d.id, "a", 11, SignOutcome::Approved).await?;
    ensure!(stored(&gov, d.id).await?.status == DecisionStatus::Approved, "approved");
    Ok(())
}

async fn signing_twice_changes_nothing(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    sign_ok(&gov, d.id, "a", 11, SignOutcome::Signed).await?;
    let before = all(&gov).await?;
    sign_ok(&gov, d.id, "a", 12, SignOutcome::AlreadySigned).await?;
    unchanged(&gov, &before, "a second signature by the same signer").await
}

async fn approved_decision_refuses_sign_and_veto(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    sign_ok(&gov, d.id, "a", 11, SignOutcome::Signed).await?;
    sign_ok(&gov, d.id, "b", 12, SignOutcome::Approved).await?;
    let before = all(&gov).await?;
    for who in ["a", "b"] {
        ensure_matches!(
            format!("sign by `{who}` after approval"),
            gov.sign(d.id, &agent(who), Timestamp(13)).await,
            Err(DecideError::Rule(SignError::AlreadyDecided {
                id,
                status: DecisionStatus::Approved
            })) if id == d.id
        );
        ensure_matches!(
            format!("veto by `{who}` after approval"),
            gov.veto(d.id, &agent(who), "too late", Timestamp(13)).await,
            Err(DecideError::Rule(SignError::AlreadyDecided {
                id,
                status: DecisionStatus::Approved
            })) if id == d.id
        );
    }
    unchanged(&gov, &before, "a signature or veto after approval").await
}

async fn veto_is_final(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b", "c"], 10);
    submit_ok(&gov, &d).await?;
    sign_ok(&gov, d.id, "a", 11, SignOutcome::Signed).await?;
    gov.veto(d.id, &agent("b"), "too risky", Timestamp(12))
        .await
        .map_err(|e| format!("veto by a required signer was refused: {e}"))?;
    let vetoed = stored(&gov, d.id).await?;
    ensure!(vetoed.status == DecisionStatus::Vetoed, "status after a veto is {}", vetoed.status);
    ensure!(
        vetoed.vetoes
            == [Veto { vetoer: agent("b"), reason: "too risky".into(), at: Timestamp(12) }],
        "vetoes after a veto: {:?}",
        vetoed.vetoes
    );
    ensure!(vetoed.signatures == [signature("a", 11)], "a veto changed the signatures");
    ensure!(pending(&gov).await?.is_empty(), "a vetoed decision is still listed as pending");
    let before = all(&gov).await?;
    for who in ["a", "b", "c"] {
        ensure_matches!(
            format!("sign by `{who}` after a veto"),
            gov.sign(d.id, &agent(who), Timestamp(13)).await,
            Err(DecideError::Rule(SignError::AlreadyDecided {
                id,
                status: DecisionStatus::Vetoed
            })) if id == d.id
        );
        ensure_matches!(
            format!("veto by `{who}` after a veto"),
            gov.veto(d.id, &agent(who), "me too", Timestamp(13)).await,
            Err(DecideError::Rule(SignError::AlreadyDecided {
                id,
                status: DecisionStatus::Vetoed
            })) if id == d.id
        );
    }
    unchanged(&gov, &before, "a signature or veto after a veto").await
}

async fn empty_veto_reason_is_refused(gov: Arc<dyn Governance>) -> Outcome {
    let d = proposal(1, &["a", "b"], 10);
    submit_ok(&gov, &d).await?;
    let before = all(&gov).await?;
    for reason in ["", "  \t\n"] {
        ensure_matches!(
            format!("veto with reason {reason:?}"),
            gov.veto(d.id, &agent("a"), reason, Timestamp(11)).await,
            Err(DecideError::Rule(SignError::EmptyVetoReason { id })) if id == d.id
        );
    }
    unchanged(&gov, &before, "a veto without a reason").await?;
    // Still pending, so a veto with a reason goes through.
    gov.veto(d.id, &agent("a"), "reason given", Timestamp(12))
        .await
        .map_err(|e| format!("veto with a reason after a refused one: {e}"))?;
    Ok(())
}

async fn unknown_decision_is_refused(gov: Arc<dyn Governance>) -> Outcome {
    submit_ok(&gov, &proposal(1, &["a"], 10)).await?;
    let before = all(&gov).await?;
    let unknown = id(99);
    ensure_matches!(
        "sign of an unknown decision",
        gov.sign(unknown, &agent("a"), Timestamp(11)).await,
        Err(DecideError::UnknownDecision { id }) if id == unknown
    );
    ensure_matches!(
        "veto of an unknown decision",
        gov.veto(unknown, &agent("a"), "no", Timestamp(11)).await,
        Err(DecideError::UnknownDecision { id }) if id == unknown
    );
    unchanged(&gov, &before, "calls on an unknown decision").await
}

async fn list_pending_is_exactly_the_pending_oldest_first(gov: Arc<dyn Governance>) -> Outcome {
    // Submitted out of order; 2 and 3 share a creation time, so the id breaks the tie.
    for (n, at) in [(5, 30), (3, 20), (1, 10), (4, 40), (2, 20)] {
        submit_ok(&gov, &proposal(n, &["a", "b"], at)).await?;
    }
    sign_ok(&gov, id(1), "a", 50, SignOutcome::Signed).await?;
    sign_ok(&gov, id(1), "b", 51, SignOutcome::Approved).await?;
    gov.veto(id(3), &agent("b"), "no", Timestamp(52))
        .await
        .map_err(|e| format!("veto refused: {e}"))?;
    sign_ok(&gov, id(4), "a", 53, SignOutcome::Signed).await?;
    let ids = |ds: &[Decision]| ds.iter().map(|d| d.id).collect::<Vec<_>>();
    let everything = all(&gov).await?;
    let listed = ids(&everything);
    ensure!(listed == [id(1), id(2), id(3), id(5), id(4)], "list order: {listed:?}");
    let pend = pending(&gov).await?;
    let want: Vec<Decision> =
        everything.into_iter().filter(|d| d.status == DecisionStatus::Pending).collect();
    ensure!(pend == want, "list_pending is not the pending part of list: {:?}", ids(&pend));
    ensure!(ids(&pend) == [id(2), id(5), id(4)], "list_pending order: {:?}", ids(&pend));
    for d in pending(&gov).await? {
        ensure!(d == stored(&gov, d.id).await?, "list_pending and get disagree on {}", d.id);
    }
    Ok(())
}

async fn a_human_required_signer_signs_and_vetoes(gov: Arc<dyn Governance>) -> Outcome {
    let signed = proposal(1, &["a", "human:alice"], 10);
    let vetoed = proposal(2, &["a", "human:alice"], 11);
    submit_ok(&gov, &signed).await?;
    submit_ok(&gov, &vetoed).await?;
    let before = all(&gov).await?;
    for who in ["human:mallory", "alice"] {
        ensure_matches!(
            format!("sign by `{who}`, not the required human"),
            gov.sign(signed.id, &agent(who), Timestamp(12)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { id, ref agent, .. }))
                if id == signed.id && agent.as_str() == who
        );
        ensure_matches!(
            format!("veto by `{who}`, not the required human"),
            gov.veto(vetoed.id, &agent(who), "no", Timestamp(12)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { id, .. })) if id == vetoed.id
        );
    }
    unchanged(&gov, &before, "a signature or veto by the wrong human").await?;
    sign_ok(&gov, signed.id, "human:alice", 13, SignOutcome::Signed).await?;
    sign_ok(&gov, signed.id, "a", 14, SignOutcome::Approved).await?;
    gov.veto(vetoed.id, &agent("human:alice"), "not today", Timestamp(15))
        .await
        .map_err(|e| format!("veto by the required human was refused: {e}"))?;
    let v = stored(&gov, vetoed.id).await?;
    ensure!(
        v.status == DecisionStatus::Vetoed && v.vetoes[0].vetoer == agent("human:alice"),
        "after the human's veto: {v:?}"
    );
    Ok(())
}

async fn one_allowed_human_approves_and_others_are_refused(gov: Arc<dyn Governance>) -> Outcome {
    let mut d = proposal(1, &["a"], 10);
    d.human_approval = Some(HumanApproval { allowed: vec!["alice".into(), "bob".into()] });
    let mut humans_only = proposal(2, &[], 11);
    humans_only.human_approval = d.human_approval.clone();
    submit_ok(&gov, &d).await?;
    submit_ok(&gov, &humans_only).await?;
    ensure!(stored(&gov, d.id).await? == d, "get returned something else than was submitted");
    let mut no_humans = proposal(3, &["a"], 12);
    no_humans.human_approval = Some(HumanApproval { allowed: Vec::new() });
    ensure_matches!(
        "submit of a human approval without humans",
        gov.submit(no_humans).await,
        Err(SubmitError::Invalid(ProposeError::NoHumans { id })) if id == self::id(3)
    );
    sign_ok(&gov, d.id, "a", 13, SignOutcome::Signed).await?;
    ensure!(stored(&gov, d.id).await?.status == DecisionStatus::Pending, "pending without a human");
    let before = all(&gov).await?;
    for who in ["human:mallory", "alice", "stranger"] {
        ensure_matches!(
            format!("sign by `{who}`, not an allowed human"),
            gov.sign(d.id, &agent(who), Timestamp(14)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { id, ref agent, .. }))
                if id == d.id && agent.as_str() == who
        );
        ensure_matches!(
            format!("veto by `{who}`, not an allowed human"),
            gov.veto(humans_only.id, &agent(who), "no", Timestamp(14)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { .. }))
        );
    }
    unchanged(&gov, &before, "a signature or veto by a human not allowed").await?;
    sign_ok(&gov, d.id, "human:bob", 15, SignOutcome::Approved).await?;
    ensure!(stored(&gov, d.id).await?.status == DecisionStatus::Approved, "approved by bob");
    sign_ok(&gov, humans_only.id, "human:alice", 16, SignOutcome::Approved).await?;
    Ok(())
}

async fn acknowledged_changes_survive_a_restart(
    gov: Arc<dyn Governance>,
    factory: &dyn GovernanceFactory,
) -> Outcome {
    submit_ok(&gov, &proposal(1, &["a", "b"], 10)).await?;
    submit_ok(&gov, &proposal(2, &["a", "b"], 11)).await?;
    submit_ok(&gov, &proposal(3, &["a"], 12)).await?;
    sign_ok(&gov, id(1), "a", 13, SignOutcome::Signed).await?;
    gov.veto(id(2), &agent("b"), "no", Timestamp(14)).await.map_err(|e| format!("veto: {e}"))?;
    sign_ok(&gov, id(3), "a", 15, SignOutcome::Approved).await?;
    let before = all(&gov).await?;
    let before_pending = pending(&gov).await?;
    let Some(gov) = factory.reopen(gov).await else {
        return Ok(()); // the backend keeps nothing across a restart
    };
    ensure!(all(&gov).await? == before, "list after a restart differs from before");
    ensure!(pending(&gov).await? == before_pending, "list_pending after a restart differs");
    ensure_matches!(
        "submit of an id used before the restart",
        gov.submit(proposal(1, &["c"], 16)).await,
        Err(SubmitError::DuplicateId { id }) if id == self::id(1)
    );
    sign_ok(&gov, id(1), "a", 17, SignOutcome::AlreadySigned).await?;
    sign_ok(&gov, id(1), "b", 18, SignOutcome::Approved).await?;
    ensure_matches!(
        "sign of a decision vetoed before the restart",
        gov.sign(id(2), &agent("a"), Timestamp(19)).await,
        Err(DecideError::Rule(SignError::AlreadyDecided { status: DecisionStatus::Vetoed, .. }))
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The model-based test.

/// One generated operation.
///
/// `target` picks a stored decision (values below [`KNOWN_TARGETS`], when the store holds any)
/// or an id never submitted. `actor` picks one of the target's required signers (values below
/// [`SIGNER_PICKS`]) or else one of [`AGENTS`], the stranger included. Both are resolved against
/// the model, which equals the backend's store at every step.
#[derive(Clone, Debug)]
enum Op {
    /// Submit a decision with id `slot + 1`, the agents of the bit mask `signers` (bits 0 to 3:
    /// the first four [`AGENTS`]; bit 4: a human approval allowing `alice`), and `fault`.
    Submit { slot: u8, signers: u8, created_at: u64, fault: Fault },
    /// Sign `target` as `actor`.
    Sign { target: u8, actor: u8, at: u64 },
    /// Veto `target` as `actor`, with `REASONS[reason]`.
    Veto { target: u8, actor: u8, reason: usize, at: u64 },
    /// Read `target`.
    Get { target: u8 },
    /// Read the pending decisions.
    ListPending,
    /// Read every decision.
    List,
    /// Restart the backend through [`GovernanceFactory::reopen`].
    Restart,
}

/// How a generated submission breaks the submit rules, if it does.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Valid,
    DuplicateSigner,
    PreSigned,
    PreApproved,
    PreVetoed,
}

/// A refused submission, comparable between backend and model.
#[derive(Debug, PartialEq)]
enum SubmitRefusal {
    DuplicateId(DecisionId),
    NotFresh(DecisionId, DecisionStatus),
    Invalid(ProposeError),
}

/// A refused signature or veto, comparable between backend and model.
#[derive(Debug, PartialEq)]
enum DecideRefusal {
    Unknown(DecisionId),
    Rule(SignError),
}

/// The reference model: the decisions by id, changed only through `agent-state`'s rules.
#[derive(Debug, Default)]
struct Model {
    decisions: BTreeMap<DecisionId, Decision>,
}

fn run_model(rt: &tokio::runtime::Runtime, factory: &dyn GovernanceFactory) {
    let cases =
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let ops = proptest::collection::vec(op_strategy(), 1..=MAX_OPS);
    let result =
        runner.run(&ops, |ops| rt.block_on(run_case(factory, &ops)).map_err(TestCaseError::fail));
    if let Err(err) = result {
        panic!("governance conformance: model-based test failed: {err}");
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let target = 0..TARGETS;
    let actor = 0..ACTORS;
    prop_oneof![
        8 => (0..SLOTS, 0u8..32, 0u64..4, fault_strategy()).prop_map(
            |(slot, signers, created_at, fault)| Op::Submit { slot, signers, created_at, fault }
        ),
        10 => (target.clone(), actor.clone(), 0u64..100)
            .prop_map(|(target, actor, at)| Op::Sign { target, actor, at }),
        3 => (target.clone(), actor, 0..REASONS.len(), 0u64..100)
            .prop_map(|(target, actor, reason, at)| Op::Veto { target, actor, reason, at }),
        1 => target.prop_map(|target| Op::Get { target }),
        1 => Just(Op::ListPending),
        1 => Just(Op::List),
        1 => Just(Op::Restart),
    ]
}

fn fault_strategy() -> impl Strategy<Value = Fault> {
    prop_oneof![
        20 => Just(Fault::Valid),
        1 => Just(Fault::DuplicateSigner),
        1 => Just(Fault::PreSigned),
        1 => Just(Fault::PreApproved),
        1 => Just(Fault::PreVetoed),
    ]
}

/// Applies `ops` to a fresh backend and to the model, comparing after every step.
async fn run_case(factory: &dyn GovernanceFactory, ops: &[Op]) -> Outcome {
    let mut case = Case {
        factory,
        gov: factory.fresh().await,
        model: Model::default(),
        decided: BTreeMap::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        let at_step =
            |check: &str, detail: String| format!("step {step} {op:?}: {check}: {detail}");
        case.apply(op, step, &at_step).await?;
        let got = case.gov.list().await.map_err(|e| at_step("list", e.to_string()))?;
        let want = case.model.sorted(false);
        ensure!(
            got == want,
            "{}",
            at_step("store matches the model", format!("list {got:?}, model {want:?}"))
        );
        check_invariants(&got, &mut case.decided).map_err(|e| at_step("invariant", e))?;
    }
    Ok(())
}

/// One scenario under way: the backend, the model it is compared with, and every decided
/// decision as first seen decided (it must never change again).
struct Case<'f> {
    factory: &'f dyn GovernanceFactory,
    gov: Arc<dyn Governance>,
    model: Model,
    decided: BTreeMap<DecisionId, Decision>,
}

impl Case<'_> {
    /// Applies step `step`, `op`, to the backend and the model and compares their replies;
    /// `at_step` words a failure.
    async fn apply(
        &mut self,
        op: &Op,
        step: usize,
        at_step: &(dyn Fn(&str, String) -> String + Sync),
    ) -> Outcome {
        let (gov, model) = (&self.gov, &mut self.model);
        match *op {
            Op::Submit { slot, signers, created_at, fault } => {
                let d = generated(slot, signers, created_at, fault, step);
                let got =
                    submit_reply(gov.submit(d.clone()).await).map_err(|e| at_step("submit", e))?;
                let want = model.submit(d);
                ensure!(
                    got == want,
                    "{}",
                    at_step("submit reply", format!("{got:?}, model {want:?}"))
                );
            }
            Op::Sign { target, actor, at } => {
                let id = model.target(target);
                let who = model.actor(id, actor);
                let detail = |d: String| format!("{id} by `{who}`: {d}");
                let got = decide_reply(gov.sign(id, &who, Timestamp(at)).await)
                    .map_err(|e| at_step("sign", detail(e)))?;
                let want = model.decide(id, |d| d.sign(&who, Timestamp(at)));
                ensure!(
                    got == want,
                    "{}",
                    at_step("sign reply", detail(format!("{got:?}, model {want:?}")))
                );
            }
            Op::Veto { target, actor, reason, at } => {
                let id = model.target(target);
                let who = model.actor(id, actor);
                let reason = REASONS[reason];
                let detail = |d: String| format!("{id} by `{who}`: {d}");
                let got = decide_reply(gov.veto(id, &who, reason, Timestamp(at)).await)
                    .map_err(|e| at_step("veto", detail(e)))?;
                let want = model.decide(id, |d| d.veto(&who, reason, Timestamp(at)));
                ensure!(
                    got == want,
                    "{}",
                    at_step("veto reply", detail(format!("{got:?}, model {want:?}")))
                );
            }
            Op::Get { .. } | Op::ListPending => return self.read(op, at_step).await,
            Op::List => {} // compared after every step
            Op::Restart => self.restart().await,
        }
        Ok(())
    }

    /// A read (`get`, `list_pending`), compared with the model's answer.
    async fn read(&self, op: &Op, at_step: &(dyn Fn(&str, String) -> String + Sync)) -> Outcome {
        let (gov, model) = (&self.gov, &self.model);
        if let Op::Get { target } = *op {
            let id = model.target(target);
            let got = gov.get(id).await.map_err(|e| at_step("get", e.to_string()))?;
            let want = model.decisions.get(&id);
            ensure!(
                got.as_ref() == want,
                "{}",
                at_step("get reply", format!("{id}: {got:?}, model {want:?}"))
            );
            return Ok(());
        }
        let got = gov.list_pending().await.map_err(|e| at_step("list_pending", e.to_string()))?;
        let want = model.sorted(true);
        ensure!(
            got == want,
            "{}",
            at_step("list_pending reply", format!("{got:?}, model {want:?}"))
        );
        Ok(())
    }

    /// The backend restarted: reopened on its store, or (one that keeps nothing) fresh with an
    /// empty model.
    async fn restart(&mut self) {
        let gov = std::mem::replace(&mut self.gov, Arc::new(crate::InMemoryGovernance::new()));
        self.gov = match self.factory.reopen(gov).await {
            Some(reopened) => reopened,
            None => {
                self.model = Model::default();
                self.decided.clear();
                self.factory.fresh().await
            }
        };
    }
}

/// A backend's answer to a submission, as the model words it; a backend error is a failure.
fn submit_reply(r: Result<(), SubmitError>) -> Result<Result<(), SubmitRefusal>, String> {
    match r {
        Ok(()) => Ok(Ok(())),
        Err(SubmitError::DuplicateId { id }) => Ok(Err(SubmitRefusal::DuplicateId(id))),
        Err(SubmitError::NotFresh { id, status }) => Ok(Err(SubmitRefusal::NotFresh(id, status))),
        Err(SubmitError::Invalid(e)) => Ok(Err(SubmitRefusal::Invalid(e))),
        Err(SubmitError::Backend(e)) => Err(format!("backend error: {e}")),
    }
}

impl Model {
    /// The id `target` picks: a stored decision, or one never submitted.
    fn target(&self, target: u8) -> DecisionId {
        let n = self.decisions.len();
        let known = if target < KNOWN_TARGETS && n > 0 {
            self.decisions.keys().nth(usize::from(target) % n).copied()
        } else {
            None
        };
        // Slots are 0..SLOTS, so `slot_id(SLOTS)` is never submitted.
        known.unwrap_or(slot_id(SLOTS))
    }

    /// The agent `actor` picks for decision `id`.
    fn actor(&self, id: DecisionId, actor: u8) -> AgentId {
        let signers = self.decisions.get(&id).map_or(&[][..], |d| &d.required_signers[..]);
        if actor < SIGNER_PICKS && !signers.is_empty() {
            return signers[usize::from(actor) % signers.len()].clone();
        }
        AgentId::new(AGENTS[usize::from(actor) % AGENTS.len()])
    }

    /// The submit rules, written out independently of the backends' shared check.
    fn submit(&mut self, d: Decision) -> Result<(), SubmitRefusal> {
        d.check().map_err(SubmitRefusal::Invalid)?;
        if d.status != DecisionStatus::Pending || !d.signatures.is_empty() || !d.vetoes.is_empty() {
            return Err(SubmitRefusal::NotFresh(d.id, d.status));
        }
        if self.decisions.contains_key(&d.id) {
            return Err(SubmitRefusal::DuplicateId(d.id));
        }
        self.decisions.insert(d.id, d);
        Ok(())
    }

    /// Applies a rule of `agent-state` to decision `id`, keeping the change only on success.
    fn decide<T>(
        &mut self,
        id: DecisionId,
        change: impl FnOnce(&mut Decision) -> Result<T, SignError>,
    ) -> Result<T, DecideRefusal> {
        let stored = self.decisions.get_mut(&id).ok_or(DecideRefusal::Unknown(id))?;
        let mut next = stored.clone();
        let out = change(&mut next).map_err(DecideRefusal::Rule)?;
        *stored = next;
        Ok(out)
    }

    /// The decisions (pending ones only if asked), by `created_at` then id.
    fn sorted(&self, pending_only: bool) -> Vec<Decision> {
        let mut out: Vec<Decision> = self
            .decisions
            .values()
            .filter(|d| !pending_only || d.status == DecisionStatus::Pending)
            .cloned()
            .collect();
        out.sort_by_key(|d| (d.created_at, d.id));
        out
    }
}

/// The invariants of the stored decisions, checked on the backend's own `list`.
fn check_invariants(
    decisions: &[Decision],
    decided: &mut BTreeMap<DecisionId, Decision>,
) -> Outcome {
    for d in decisions {
        let id = d.id;
        for (i, s) in d.signatures.iter().enumerate() {
            ensure!(
                d.may_sign(&s.signer),
                "only required signers and allowed humans sign: {id} has a signature by `{}`",
                s.signer
            );
            ensure!(
                !d.signatures[..i].iter().any(|t| t.signer == s.signer),
                "each signer signs once: {id} has two signatures by `{}`",
                s.signer
            );
        }
        let all_signed = d.fully_signed();
        match d.status {
            DecisionStatus::Approved => ensure!(
                all_signed && d.vetoes.is_empty(),
                "no decision approved without every required signature: {id} is approved with \
                 {:?} and vetoes {:?}",
                d.signatures,
                d.vetoes
            ),
            DecisionStatus::Pending => ensure!(
                !all_signed && d.vetoes.is_empty(),
                "approved exactly when the last signer signs, vetoed exactly when vetoed: {id} is \
                 pending with {:?} and vetoes {:?}",
                d.signatures,
                d.vetoes
            ),
            DecisionStatus::Vetoed => ensure!(
                d.vetoes.len() == 1 && d.may_sign(&d.vetoes[0].vetoer),
                "a vetoed decision has one veto by a required signer: {id} has {:?}",
                d.vetoes
            ),
        }
    }
    for (id, first) in decided.iter() {
        let now = decisions.iter().find(|d| d.id == *id);
        ensure!(
            now == Some(first),
            "a decided decision never changes again: {id} was {first:?}, now {now:?}"
        );
    }
    for d in decisions.iter().filter(|d| d.status != DecisionStatus::Pending) {
        decided.entry(d.id).or_insert_with(|| d.clone());
    }
    Ok(())
}

/// The decision a generated `Submit` proposes.
fn generated(slot: u8, signers: u8, created_at: u64, fault: Fault, step: usize) -> Decision {
    let names: Vec<&str> = (0..4).filter(|i| signers & (1 << i) != 0).map(|i| AGENTS[i]).collect();
    let mut d = proposal(0, &names, created_at);
    if signers & (1 << 4) != 0 {
        d.human_approval = Some(HumanApproval { allowed: vec!["alice".into()] });
    }
    d.id = slot_id(slot);
    d.content = serde_json::json!({ "step": step });
    let first = d.required_signers.first().cloned().unwrap_or_else(|| AgentId::new(AGENTS[0]));
    match fault {
        Fault::Valid => {}
        Fault::DuplicateSigner => d.required_signers.push(first),
        Fault::PreSigned => {
            d.signatures.push(Signature { signer: first, at: Timestamp(created_at) })
        }
        Fault::PreApproved => {
            d.signatures = d
                .required_signers
                .iter()
                .map(|s| Signature { signer: s.clone(), at: Timestamp(created_at) })
                .collect();
            d.status = DecisionStatus::Approved;
        }
        Fault::PreVetoed => {
            d.vetoes.push(Veto { vetoer: first, reason: "no".into(), at: Timestamp(created_at) });
            d.status = DecisionStatus::Vetoed;
        }
    }
    d
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn agent(name: &str) -> AgentId {
    AgentId::new(name)
}

fn id(n: u128) -> DecisionId {
    DecisionId::from_u128(n)
}

fn slot_id(slot: u8) -> DecisionId {
    id(u128::from(slot) + 1)
}

fn signature(signer: &str, at: u64) -> Signature {
    Signature { signer: agent(signer), at: Timestamp(at) }
}

/// A pending decision built field by field, so that invalid ones can be built too.
fn proposal(n: u128, signers: &[&str], created_at: u64) -> Decision {
    Decision {
        id: id(n),
        proposer: agent("proposer"),
        content: serde_json::json!({ "decision": n }),
        required_signers: signers.iter().map(|s| agent(s)).collect(),
        signatures: Vec::new(),
        vetoes: Vec::new(),
        status: DecisionStatus::Pending,
        created_at: Timestamp(created_at),
        human_approval: None,
    }
}

/// A backend reply to sign or veto as a comparable value; a backend error is a failure.
fn decide_reply<T>(r: Result<T, DecideError>) -> Result<Result<T, DecideRefusal>, String> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(DecideError::UnknownDecision { id }) => Ok(Err(DecideRefusal::Unknown(id))),
        Err(DecideError::Rule(e)) => Ok(Err(DecideRefusal::Rule(e))),
        Err(DecideError::Backend(e)) => Err(format!("backend error: {e}")),
    }
}

async fn submit_ok(gov: &Arc<dyn Governance>, d: &Decision) -> Outcome {
    gov.submit(d.clone())
        .await
        .map_err(|e| format!("submit of a valid decision {} refused: {e}", d.id))
}

async fn sign_ok(
    gov: &Arc<dyn Governance>,
    id: DecisionId,
    signer: &str,
    at: u64,
    want: SignOutcome,
) -> Outcome {
    let got = gov.sign(id, &agent(signer), Timestamp(at)).await;
    ensure_matches!(format!("sign of {id} by `{signer}`"), got, Ok(outcome) if outcome == want);
    Ok(())
}

async fn stored(gov: &Arc<dyn Governance>, id: DecisionId) -> Result<Decision, String> {
    match gov.get(id).await {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(format!("decision {id} is missing")),
        Err(e) => Err(format!("get of {id} failed: {e}")),
    }
}

async fn all(gov: &Arc<dyn Governance>) -> Result<Vec<Decision>, String> {
    gov.list().await.map_err(|e| format!("list failed: {e}"))
}

async fn pending(gov: &Arc<dyn Governance>) -> Result<Vec<Decision>, String> {
    gov.list_pending().await.map_err(|e| format!("list_pending failed: {e}"))
}

/// Fails unless the whole store is exactly `before`.
async fn unchanged(gov: &Arc<dyn Governance>, before: &[Decision], after_what: &str) -> Outcome {
    let now = all(gov).await?;
    ensure!(
        now == before,
        "a refused call leaves the store as it was: after {after_what}, list is {now:?}, was {before:?}"
    );
    Ok(())
}
