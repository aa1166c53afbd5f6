//! The NATS backend against the real server at `STRATA_NATS_URL` (default
//! `nats://127.0.0.1:4222`): the conformance suite with restarts (a restart is a new connection),
//! races between two connections, refused calls that write nothing, records that cannot be
//! decoded, and a bucket of another schema. Every test deletes the namespaces it made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_state::{
    AgentId, Decision, DecisionId, DecisionStatus, SignError, SignOutcome, Timestamp, encode,
};
use async_trait::async_trait;
use governance::testing::{GovernanceFactory, run_conformance};
use governance::{DECISIONS_BUCKET, DecideError, Governance, NatsGovernance, SubmitError};
use nats_store::testing::{bucket_description, make_foreign_bucket};
use nats_store::{NatsError, NatsStore, TestNamespaces, test_url};

/// Each `fresh` backend is a new namespace on its own connection; `reopen` drops the backend,
/// and with it its connection, and connects again to the same namespace.
#[derive(Default)]
struct Nats {
    namespaces: TestNamespaces,
    /// The namespace of each live backend, by the address of its allocation.
    live: Mutex<HashMap<usize, String>>,
}

impl Nats {
    async fn open(&self, namespace: &str) -> Arc<dyn Governance> {
        let store = NatsStore::connect(&test_url(), namespace).await.unwrap();
        let gov: Arc<dyn Governance> = Arc::new(NatsGovernance::open(&store).await.unwrap());
        self.live.lock().unwrap().insert(address(&gov), namespace.to_owned());
        gov
    }
}

fn address(gov: &Arc<dyn Governance>) -> usize {
    Arc::as_ptr(gov).cast::<()>().addr()
}

#[async_trait]
impl GovernanceFactory for Nats {
    async fn fresh(&self) -> Arc<dyn Governance> {
        let namespace = self.namespaces.make();
        self.open(&namespace).await
    }

    async fn reopen(&self, gov: Arc<dyn Governance>) -> Option<Arc<dyn Governance>> {
        let namespace = self.live.lock().unwrap().remove(&address(&gov)).unwrap();
        // The suite passes its only handle: dropping it closes the old connection.
        drop(gov);
        Some(self.open(&namespace).await)
    }
}

#[test]
fn nats_backend_passes_the_conformance_suite_with_restarts() {
    run_conformance(Nats::default());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap()
}

/// Two connections to one new namespace, each with its own backend: two processes of a team.
async fn two_processes(
    namespaces: &TestNamespaces,
) -> (NatsStore, Arc<NatsGovernance>, Arc<NatsGovernance>) {
    let namespace = namespaces.make();
    let one = NatsStore::connect(&test_url(), &namespace).await.unwrap();
    let two = NatsStore::connect(&test_url(), &namespace).await.unwrap();
    let gov_one = Arc::new(NatsGovernance::open(&one).await.unwrap());
    let gov_two = Arc::new(NatsGovernance::open(&two).await.unwrap());
    (one, gov_one, gov_two)
}

fn decision(n: u128, signers: &[AgentId], created_at: u64) -> Decision {
    Decision::propose(
        DecisionId::from_u128(n),
        signers[0].clone(),
        serde_json::json!({ "plan": n.to_string() }),
        signers.to_vec(),
        Timestamp(created_at),
    )
    .unwrap()
}

/// The last sequence of the bucket's stream: it moves on every write, refused or not by the
/// rules, so an unchanged sequence proves nothing was written.
async fn last_sequence(store: &NatsStore) -> u64 {
    let name = format!("KV_{}", store.name(DECISIONS_BUCKET));
    let mut stream = store.jetstream().get_stream(name).await.unwrap();
    stream.info().await.unwrap().state.last_sequence
}

/// Many signers of one decision sign at once, half through each connection: every signature is
/// kept, exactly one call approves; the same id submitted through both at once is stored once;
/// a signature and a veto racing to decide a decision: exactly one wins, and the loser is told
/// the winner's outcome.
#[test]
fn two_connections_never_both_win_and_lose_nothing() {
    const SIGNERS: usize = 16;
    const DECISIONS: u128 = 12;
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let (store, one, two) = two_processes(&namespaces).await;
        let via = |i: usize| if i.is_multiple_of(2) { Arc::clone(&one) } else { Arc::clone(&two) };

        // Concurrent signers.
        let signers: Vec<AgentId> =
            (0..SIGNERS).map(|i| AgentId::new(format!("top-{i}"))).collect();
        let id = DecisionId::from_u128(1);
        one.submit(decision(1, &signers, 0)).await.unwrap();
        let tasks: Vec<_> = signers
            .iter()
            .enumerate()
            .map(|(i, signer)| {
                let (gov, signer) = (via(i), signer.clone());
                tokio::spawn(async move { gov.sign(id, &signer, Timestamp(1)).await })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap().unwrap());
        }
        assert_eq!(
            outcomes.iter().filter(|o| **o == SignOutcome::Approved).count(),
            1,
            "{outcomes:?}"
        );
        assert_eq!(outcomes.iter().filter(|o| **o == SignOutcome::Signed).count(), SIGNERS - 1);
        for gov in [&one, &two] {
            let stored = gov.get(id).await.unwrap().unwrap();
            assert_eq!(stored.status, DecisionStatus::Approved);
            let mut signed: Vec<&str> =
                stored.signatures.iter().map(|s| s.signer.as_str()).collect();
            signed.sort_unstable();
            let mut want: Vec<&str> = signers.iter().map(AgentId::as_str).collect();
            want.sort_unstable();
            assert_eq!(signed, want, "every signature once");
        }

        // Concurrent submissions of the same ids, with different content.
        let (a, b) = (AgentId::new("top-a"), AgentId::new("top-b"));
        let tasks: Vec<_> = (0..2 * DECISIONS)
            .map(|k| {
                let n = 100 + k / 2;
                let gov = via(usize::try_from(k).unwrap());
                let mut d = decision(n, &[a.clone(), b.clone()], u64::try_from(n).unwrap());
                d.content = serde_json::json!({ "by": k % 2 });
                tokio::spawn(async move { (n, k % 2, gov.submit(d).await) })
            })
            .collect();
        let mut winners = HashMap::new();
        for task in tasks {
            let (n, by, result) = task.await.unwrap();
            match result {
                Ok(()) => assert!(winners.insert(n, by).is_none(), "decision {n} submitted twice"),
                Err(SubmitError::DuplicateId { id }) => assert_eq!(id, DecisionId::from_u128(n)),
                Err(e) => panic!("submit of {n}: {e}"),
            }
        }
        assert_eq!(winners.len(), usize::try_from(DECISIONS).unwrap());
        for (n, by) in &winners {
            let stored = two.get(DecisionId::from_u128(*n)).await.unwrap().unwrap();
            assert_eq!(stored.content, serde_json::json!({ "by": by }), "the winner's content");
        }

        // On each of those decisions `top-a` has signed; `top-b` signs through one connection
        // and vetoes through the other, at once. Exactly one of the two decides it.
        for n in 100..100 + DECISIONS {
            one.sign(DecisionId::from_u128(n), &a, Timestamp(2)).await.unwrap();
        }
        let tasks: Vec<_> = (100..100 + DECISIONS)
            .map(|n| {
                let id = DecisionId::from_u128(n);
                let (sign_via, veto_via) =
                    if n % 2 == 0 { (via(0), via(1)) } else { (via(1), via(0)) };
                let (b1, b2) = (b.clone(), b.clone());
                let sign = tokio::spawn(async move { sign_via.sign(id, &b1, Timestamp(3)).await });
                let veto =
                    tokio::spawn(
                        async move { veto_via.veto(id, &b2, "too risky", Timestamp(3)).await },
                    );
                (id, sign, veto)
            })
            .collect();
        let (mut approved, mut vetoed) = (0, 0);
        for (id, sign, veto) in tasks {
            let (sign, veto) = (sign.await.unwrap(), veto.await.unwrap());
            let stored = one.get(id).await.unwrap().unwrap();
            match (sign, veto) {
                (
                    Ok(SignOutcome::Approved),
                    Err(DecideError::Rule(SignError::AlreadyDecided { status, .. })),
                ) => {
                    assert_eq!(status, DecisionStatus::Approved);
                    assert_eq!(stored.status, DecisionStatus::Approved);
                    assert!(stored.vetoes.is_empty());
                    approved += 1;
                }
                (Err(DecideError::Rule(SignError::AlreadyDecided { status, .. })), Ok(())) => {
                    assert_eq!(status, DecisionStatus::Vetoed);
                    assert_eq!(stored.status, DecisionStatus::Vetoed);
                    assert_eq!(stored.signatures.len(), 1, "only top-a's signature");
                    vetoed += 1;
                }
                other => panic!("{id}: both or neither decided it: {other:?}"),
            }
        }
        assert_eq!(approved + vetoed, DECISIONS);
        drop(store);
    });
}

/// Calls the rules refuse, and a signature given twice, write nothing to the bucket; so do
/// invalid submissions.
#[test]
fn refused_calls_write_nothing() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let (store, gov, _) = two_processes(&namespaces).await;
        let (a, b) = (AgentId::new("top-a"), AgentId::new("top-b"));
        let id = DecisionId::from_u128(1);
        gov.submit(decision(1, &[a.clone(), b.clone()], 0)).await.unwrap();
        assert_eq!(gov.sign(id, &a, Timestamp(1)).await.unwrap(), SignOutcome::Signed);
        let before = gov.list().await.unwrap();
        let sequence = last_sequence(&store).await;

        assert_eq!(gov.sign(id, &a, Timestamp(2)).await.unwrap(), SignOutcome::AlreadySigned);
        assert!(matches!(
            gov.sign(id, &AgentId::new("stranger"), Timestamp(2)).await,
            Err(DecideError::Rule(SignError::NotARequiredSigner { .. }))
        ));
        assert!(matches!(
            gov.veto(id, &b, " ", Timestamp(2)).await,
            Err(DecideError::Rule(SignError::EmptyVetoReason { .. }))
        ));
        assert!(matches!(
            gov.sign(DecisionId::from_u128(9), &a, Timestamp(2)).await,
            Err(DecideError::UnknownDecision { .. })
        ));
        let mut again = decision(1, std::slice::from_ref(&b), 5);
        again.content = serde_json::json!("other");
        assert!(matches!(gov.submit(again).await, Err(SubmitError::DuplicateId { .. })));
        let mut pre_signed = decision(2, std::slice::from_ref(&a), 5);
        pre_signed.signatures = before[0].signatures.clone();
        assert!(matches!(gov.submit(pre_signed).await, Err(SubmitError::NotFresh { .. })));
        let mut repeated = decision(3, std::slice::from_ref(&a), 5);
        repeated.required_signers.push(a.clone());
        assert!(matches!(gov.submit(repeated).await, Err(SubmitError::Invalid(_))));

        assert_eq!(last_sequence(&store).await, sequence, "a refused call wrote to the bucket");
        assert_eq!(gov.list().await.unwrap(), before);
    });
}

/// A record that cannot be decoded makes `get`, `sign` and `veto` of it fail with a backend error
/// naming the bucket and the key, is never overwritten, and leaves the rest readable; the lists
/// skip it.
#[test]
fn an_undecodable_record_is_reported_by_name_and_the_rest_stays_readable() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let (store, gov, _) = two_processes(&namespaces).await;
        let a = AgentId::new("top-a");
        for n in 1..=3 {
            gov.submit(decision(n, std::slice::from_ref(&a), u64::try_from(n).unwrap()))
                .await
                .unwrap();
        }
        let bucket = store.jetstream().get_key_value(store.name(DECISIONS_BUCKET)).await.unwrap();
        let key = |n: u128| DecisionId::from_u128(n).to_string();
        let damaged: [(String, Vec<u8>); 3] = [
            (key(1), b"\xff\x00 not a decision".to_vec()),
            (key(2), br#"{"kind":"decision","schema_version":99,"value":{}}"#.to_vec()),
            (key(4), encode(&decision(9, std::slice::from_ref(&a), 4)).unwrap()),
        ];
        for (key, bytes) in &damaged {
            bucket.put(key, bytes.clone().into()).await.unwrap();
        }
        let bucket_name = store.name(DECISIONS_BUCKET);
        for n in [1, 2, 4] {
            let id = DecisionId::from_u128(n);
            let e = gov.get(id).await.unwrap_err().to_string();
            assert!(
                e.contains(&format!("`{id}`")) && e.contains(&format!("`{bucket_name}`")),
                "the error does not name the record: {e}"
            );
            assert!(matches!(gov.sign(id, &a, Timestamp(9)).await, Err(DecideError::Backend(_))));
            assert!(matches!(
                gov.veto(id, &a, "no", Timestamp(9)).await,
                Err(DecideError::Backend(_))
            ));
            assert!(matches!(
                gov.submit(decision(n, std::slice::from_ref(&a), 0)).await,
                Err(SubmitError::DuplicateId { .. })
            ));
        }
        let three = DecisionId::from_u128(3);
        let listed: Vec<DecisionId> = gov.list().await.unwrap().iter().map(|d| d.id).collect();
        assert_eq!(listed, [three]);
        let pending: Vec<DecisionId> =
            gov.list_pending().await.unwrap().iter().map(|d| d.id).collect();
        assert_eq!(pending, [three]);
        assert_eq!(gov.sign(three, &a, Timestamp(10)).await.unwrap(), SignOutcome::Approved);
        for (key, bytes) in &damaged {
            assert_eq!(bucket.get(key).await.unwrap().as_deref(), Some(bytes.as_slice()), "{key}");
        }
    });
}

/// A decision deleted behind the backend's back (a delete marker) is gone: `get` is `None`, the
/// lists leave it out, deciding it is an unknown decision, and its id may be submitted again.
#[test]
fn a_deleted_decision_is_gone_and_its_id_free() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let (store, gov, _) = two_processes(&namespaces).await;
        let a = AgentId::new("top-a");
        let id = DecisionId::from_u128(1);
        gov.submit(decision(1, std::slice::from_ref(&a), 1)).await.unwrap();
        let bucket = store.jetstream().get_key_value(store.name(DECISIONS_BUCKET)).await.unwrap();
        bucket.delete(id.to_string()).await.unwrap();
        assert_eq!(gov.get(id).await.unwrap(), None);
        assert!(gov.list().await.unwrap().is_empty());
        assert!(matches!(
            gov.sign(id, &a, Timestamp(2)).await,
            Err(DecideError::UnknownDecision { .. })
        ));
        let again = decision(1, std::slice::from_ref(&a), 7);
        gov.submit(again.clone()).await.unwrap();
        assert_eq!(gov.list().await.unwrap(), [again]);
    });
}

/// A bucket of the same name made by another schema version is refused and left as it was.
#[test]
fn a_bucket_of_another_schema_is_refused() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let store = NatsStore::connect(&test_url(), &namespaces.make()).await.unwrap();
        make_foreign_bucket(&store, DECISIONS_BUCKET).await.unwrap();
        let err = NatsGovernance::open(&store).await.unwrap_err();
        assert!(matches!(err, NatsError::SchemaMismatch { kind: "bucket", .. }), "{err}");
        assert_eq!(
            bucket_description(&store, DECISIONS_BUCKET).await.unwrap().as_deref(),
            Some("strata schema 0: decisions")
        );
    });
}
