//! Property tests: the lifecycle and decisions against tiny reference models, and the bounds
//! of the score and backoff functions. Proptest shrinks any failure to a minimal sequence.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::id;
use crate::{
    AgentId, AgentMetrics, AgentStatus, Decision, DecisionId, DecisionStatus, Lifecycle,
    RetryPolicy, SignError, SignOutcome, Timestamp,
};

// ---------------------------------------------------------------------------------------------
// Lifecycle

/// The lifecycle table (docs/concepts.md#lifecycle) as an edge list, written independently of
/// `AgentStatus::successors`.
const EDGES: [(AgentStatus, AgentStatus); 17] = {
    use AgentStatus::*;
    [
        (Initializing, Idle),
        (Initializing, Failed),
        (Idle, Working),
        (Idle, WaitingApproval),
        (Idle, ShuttingDown),
        (Working, Idle),
        (Working, Blocked),
        (Working, Failed),
        (Working, WaitingApproval),
        (WaitingApproval, Working),
        (WaitingApproval, Idle),
        (WaitingApproval, Blocked),
        (Blocked, Working),
        (Blocked, Failed),
        (Failed, Working),
        (Failed, Terminated),
        (ShuttingDown, Terminated),
    ]
};

/// The reference model: just the current status and the edge list.
#[derive(Debug)]
struct LifecycleModel {
    status: AgentStatus,
}

impl LifecycleModel {
    /// Whether the model accepts `to`; moves if so.
    fn step(&mut self, to: AgentStatus) -> bool {
        let ok = EDGES.contains(&(self.status, to));
        if ok {
            self.status = to;
        }
        ok
    }
}

fn any_status() -> impl Strategy<Value = AgentStatus> {
    proptest::sample::select(AgentStatus::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn lifecycle_follows_the_seed_edges(targets in proptest::collection::vec(any_status(), 0..80)) {
        let mut life = Lifecycle::new(id("a"));
        let mut model = LifecycleModel { status: AgentStatus::Initializing };
        let mut records = Vec::new();
        for (t, to) in targets.into_iter().enumerate() {
            let before = life.status();
            let was_terminated = before == AgentStatus::Terminated;
            let model_ok = model.step(to);
            match life.apply(to, format!("step {t}"), Timestamp(t as u64)) {
                Ok(record) => {
                    prop_assert!(model_ok, "accepted {before} -> {to}, not an edge");
                    prop_assert!(!was_terminated, "left terminated");
                    prop_assert_eq!((record.from, record.to), (before, to));
                    prop_assert_eq!(record.at, Timestamp(t as u64));
                    prop_assert_eq!(&record.agent, &id("a"));
                    prop_assert_eq!(record.reason.clone(), format!("step {t}"));
                    records.push(record);
                }
                Err(err) => {
                    prop_assert!(!model_ok, "refused {before} -> {to}, an edge");
                    prop_assert_eq!(life.status(), before, "refusal changed the status");
                    prop_assert_eq!((err.from, err.to), (before, to));
                }
            }
            prop_assert_eq!(life.status(), model.status);
        }
        // The records form a chain from `initializing` to the current status.
        let mut at = AgentStatus::Initializing;
        for r in &records {
            prop_assert_eq!(r.from, at);
            at = r.to;
        }
        prop_assert_eq!(at, life.status());
    }
}

// ---------------------------------------------------------------------------------------------
// Decisions

/// Agents that may act: the first four can be required signers, the last two never are.
const ACTORS: [&str; 6] = ["top-1", "top-2", "top-3", "top-4", "mid-1", "stranger"];

#[derive(Clone, Debug)]
enum Op {
    Sign(usize),
    Veto(usize, &'static str),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..ACTORS.len()).prop_map(Op::Sign),
        1 => (0..ACTORS.len(), proptest::sample::select(vec!["", " ", "too risky"]))
            .prop_map(|(a, r)| Op::Veto(a, r)),
    ]
}

/// The reference model: who must sign, who has, and whether someone vetoed.
#[derive(Debug)]
struct DecisionModel {
    required: Vec<AgentId>,
    signed: Vec<AgentId>,
    vetoed: bool,
}

/// What the model expects of one operation.
#[derive(Debug, PartialEq)]
enum Expect {
    Signed,
    Approved,
    AlreadySigned,
    Vetoed,
    AlreadyDecided,
    NotASigner,
    EmptyReason,
}

impl DecisionModel {
    fn approved(&self) -> bool {
        !self.vetoed && self.required.iter().all(|r| self.signed.contains(r))
    }

    fn step(&mut self, op: &Op) -> Expect {
        let (agent, veto_reason) = match op {
            Op::Sign(a) => (id(ACTORS[*a]), None),
            Op::Veto(a, r) => (id(ACTORS[*a]), Some(*r)),
        };
        if self.vetoed || self.approved() {
            return Expect::AlreadyDecided;
        }
        if !self.required.contains(&agent) {
            return Expect::NotASigner;
        }
        match veto_reason {
            Some(r) if r.trim().is_empty() => Expect::EmptyReason,
            Some(_) => {
                self.vetoed = true;
                Expect::Vetoed
            }
            None if self.signed.contains(&agent) => Expect::AlreadySigned,
            None => {
                self.signed.push(agent);
                if self.approved() { Expect::Approved } else { Expect::Signed }
            }
        }
    }
}

fn observed(result: Result<Option<SignOutcome>, SignError>) -> Expect {
    match result {
        Ok(Some(SignOutcome::Signed)) => Expect::Signed,
        Ok(Some(SignOutcome::Approved)) => Expect::Approved,
        Ok(Some(SignOutcome::AlreadySigned)) => Expect::AlreadySigned,
        Ok(None) => Expect::Vetoed,
        Err(SignError::AlreadyDecided { .. }) => Expect::AlreadyDecided,
        Err(SignError::NotARequiredSigner { .. }) => Expect::NotASigner,
        Err(SignError::EmptyVetoReason { .. }) => Expect::EmptyReason,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decisions_match_the_signing_model(
        n_required in 1..=4usize,
        ops in proptest::collection::vec(op(), 0..40),
    ) {
        let required: Vec<AgentId> = ACTORS[..n_required].iter().map(|a| id(a)).collect();
        let mut d = Decision::propose(
            DecisionId::from_u128(1), id("top-1"), json!(null), required.clone(), Timestamp(0),
        ).unwrap();
        let mut model = DecisionModel { required: required.clone(), signed: Vec::new(), vetoed: false };

        for (t, op) in ops.iter().enumerate() {
            let before = d.clone();
            let at = Timestamp(t as u64 + 1);
            let result = match op {
                Op::Sign(a) => d.sign(&id(ACTORS[*a]), at).map(Some),
                Op::Veto(a, r) => d.veto(&id(ACTORS[*a]), *r, at).map(|()| None),
            };
            let refused = result.is_err();
            let expected = model.step(op);
            prop_assert_eq!(observed(result), expected, "op {:?}", op);

            // Refusals and repeated signatures change nothing.
            if refused || d.signatures.len() == before.signatures.len() && d.vetoes == before.vetoes {
                prop_assert_eq!(&d, &before);
            }
            // Once vetoed, status and vetoes never change.
            if before.status == DecisionStatus::Vetoed {
                prop_assert_eq!(d.status, DecisionStatus::Vetoed);
                prop_assert_eq!(&d.vetoes, &before.vetoes);
            }
            // Signatures only from required signers, each at most once.
            for (i, s) in d.signatures.iter().enumerate() {
                prop_assert!(required.contains(&s.signer), "signature by {}", s.signer);
                prop_assert!(d.signatures[..i].iter().all(|p| p.signer != s.signer), "twice: {}", s.signer);
            }
            prop_assert!(d.vetoes.len() <= 1);
            // Approved exactly when all signed and no veto.
            let all_signed = required.iter().all(|r| d.has_signed(r));
            prop_assert_eq!(
                d.status == DecisionStatus::Approved,
                all_signed && d.vetoes.is_empty(),
            );
            prop_assert_eq!(d.status == DecisionStatus::Vetoed, model.vetoed);
            prop_assert_eq!(d.signatures.len(), model.signed.len());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Score and backoff

fn count() -> impl Strategy<Value = u64> {
    prop_oneof![0..20u64, any::<u64>(), Just(u64::MAX), (u64::MAX - 20)..=u64::MAX]
}

fn duration_ms() -> impl Strategy<Value = f64> {
    prop_oneof![
        0.0..120_000.0f64,
        proptest::num::f64::ANY,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-1.0),
        Just(f64::MAX),
    ]
}

fn multiplier() -> impl Strategy<Value = f64> {
    prop_oneof![
        1.0..10.0f64,
        0.0..1.0f64,
        proptest::num::f64::ANY,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(1e300),
        Just(1.0 + f64::EPSILON),
    ]
}

fn millis() -> impl Strategy<Value = u64> {
    prop_oneof![0..10_000u64, any::<u64>(), Just(u64::MAX), Just(u64::MAX - 1), Just((1 << 53) + 1)]
}

fn policy() -> impl Strategy<Value = RetryPolicy> {
    (any::<u32>(), millis(), millis(), multiplier()).prop_map(|(max_retries, initial, max, m)| {
        RetryPolicy {
            max_retries,
            initial_delay_ms: initial,
            max_delay_ms: max,
            backoff_multiplier: m,
            ..RetryPolicy::executor_default()
        }
    })
}

fn retry_number() -> impl Strategy<Value = u32> {
    prop_oneof![0..70u32, any::<u32>(), Just(u32::MAX)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn performance_score_stays_in_0_to_100(
        completed in count(), failed in count(), avg in duration_ms(),
        responded in count(), missed in count(),
        messages in count(), warnings in count(),
    ) {
        let m = AgentMetrics {
            tasks_completed: completed,
            tasks_failed: failed,
            average_task_duration_ms: avg,
            messages_processed: messages,
            heartbeats_responded: responded,
            heartbeats_missed: missed,
            warnings_received: warnings,
            ..AgentMetrics::default()
        };
        let score = m.performance_score();
        prop_assert!((0.0..=100.0).contains(&score), "score {score} for {m:?}");
    }

    #[test]
    fn backoff_is_monotone_and_capped(p in policy(), a in retry_number(), b in retry_number()) {
        let cap = Duration::from_millis(p.max_delay_ms);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let (d_lo, d_hi) = (p.backoff(lo), p.backoff(hi));
        prop_assert!(d_lo <= d_hi, "backoff({lo}) = {d_lo:?} > backoff({hi}) = {d_hi:?} for {p:?}");
        prop_assert!(d_hi <= cap, "backoff({hi}) = {d_hi:?} exceeds {cap:?} for {p:?}");
        let next = p.backoff(hi.saturating_add(1));
        prop_assert!(d_hi <= next && next <= cap, "backoff({hi}+1) = {next:?} for {p:?}");
        prop_assert_eq!(p.backoff(0), Duration::ZERO);
    }

    #[test]
    fn backoff_sequences_never_decrease(p in policy()) {
        let mut prev = Duration::ZERO;
        for n in 0..80u32 {
            let d = p.backoff(n);
            prop_assert!(prev <= d, "backoff({n}) = {d:?} < {prev:?} for {p:?}");
            prop_assert!(d <= Duration::from_millis(p.max_delay_ms));
            prev = d;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Storage

fn arb_metrics() -> impl Strategy<Value = AgentMetrics> {
    (
        (count(), count(), duration_ms(), count(), count(), count()),
        (count(), count(), count(), count(), count(), any::<u64>()),
    )
        .prop_map(|((c, f, avg, m, hr, hm), (w, r, ds, dv, ca, last))| AgentMetrics {
            tasks_completed: c,
            tasks_failed: f,
            average_task_duration_ms: avg,
            messages_processed: m,
            heartbeats_responded: hr,
            heartbeats_missed: hm,
            warnings_received: w,
            retries: r,
            decisions_signed: ds,
            decisions_vetoed: dv,
            conflicts_arbitrated: ca,
            last_active: Timestamp(last),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Whatever `encode` accepts, `decode` reads back equal, bit for bit.
    #[test]
    fn encoded_metrics_decode_equal(m in arb_metrics()) {
        match crate::encode(&m) {
            Ok(bytes) => {
                let back: AgentMetrics = crate::decode(&bytes).unwrap();
                prop_assert_eq!(
                    back.average_task_duration_ms.to_bits(),
                    m.average_task_duration_ms.to_bits()
                );
                prop_assert_eq!(back, m);
            }
            Err(_) => prop_assert!(!m.average_task_duration_ms.is_finite(), "refused {m:?}"),
        }
    }
}
