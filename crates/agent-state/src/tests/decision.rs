//! Decision rules (sign, veto, propose) and the weighted-majority tally.

use serde_json::json;

use super::id;
use crate::{
    AgentId, Decision, DecisionId, DecisionStatus, ProposeError, SignError, SignOutcome, Signature,
    Tally, TallyError, Timestamp, Veto, Vote, tally,
};

const D: DecisionId = DecisionId::from_u128(1);

fn propose(signers: &[&str]) -> Result<Decision, ProposeError> {
    Decision::propose(
        D,
        id("top-1"),
        json!({"plan": "p"}),
        signers.iter().map(|s| id(s)).collect(),
        Timestamp(100),
    )
}

fn three() -> Decision {
    propose(&["top-1", "top-2", "top-3"]).unwrap()
}

#[test]
fn propose_starts_pending_and_empty() {
    let d = three();
    assert_eq!(d.status, DecisionStatus::Pending);
    assert!(d.signatures.is_empty() && d.vetoes.is_empty());
    assert_eq!((d.id, d.created_at), (D, Timestamp(100)));
    assert_eq!(d.missing_signers().count(), 3);
    assert!(d.is_required_signer(&id("top-2")) && !d.is_required_signer(&id("mid-1")));
}

#[test]
fn propose_with_no_signers_is_refused() {
    let err = propose(&[]).unwrap_err();
    assert_eq!(err, ProposeError::NoSigners { id: D });
    assert!(err.to_string().contains("`required_signers` must name at least one agent"));
}

#[test]
fn propose_with_duplicate_signers_is_refused() {
    let err = propose(&["top-1", "top-2", "top-1"]).unwrap_err();
    assert_eq!(err, ProposeError::DuplicateSigner { id: D, signer: id("top-1") });
    assert!(err.to_string().contains("lists `top-1` twice"), "{err}");
}

#[test]
fn stranger_signature_is_refused_and_decision_unchanged() {
    let mut d = three();
    d.sign(&id("top-1"), Timestamp(1)).unwrap();
    let before = d.clone();
    let err = d.sign(&id("mid-1"), Timestamp(2)).unwrap_err();
    assert_eq!(
        err,
        SignError::NotARequiredSigner {
            id: D,
            agent: id("mid-1"),
            required: "top-1, top-2, top-3".to_owned(),
        }
    );
    assert!(
        err.to_string()
            .contains("`mid-1` is not a required signer (required: top-1, top-2, top-3)")
    );
    assert_eq!(d, before);
    // The proposer is not a signer unless listed.
    let mut other = propose(&["top-2"]).unwrap();
    assert!(matches!(
        other.sign(&id("top-1"), Timestamp(3)),
        Err(SignError::NotARequiredSigner { .. })
    ));
}

#[test]
fn stranger_veto_is_refused_and_decision_unchanged() {
    let mut d = three();
    let before = d.clone();
    let err = d.veto(&id("bottom-1"), "no", Timestamp(2)).unwrap_err();
    assert!(
        matches!(err, SignError::NotARequiredSigner { ref agent, .. } if *agent == id("bottom-1"))
    );
    assert_eq!(d, before);
}

#[test]
fn signing_twice_is_already_signed_and_changes_nothing() {
    let mut d = three();
    assert_eq!(d.sign(&id("top-2"), Timestamp(1)), Ok(SignOutcome::Signed));
    let before = d.clone();
    assert_eq!(d.sign(&id("top-2"), Timestamp(2)), Ok(SignOutcome::AlreadySigned));
    assert_eq!(d, before);
    assert_eq!(d.signatures, [Signature { signer: id("top-2"), at: Timestamp(1) }]);
}

#[test]
fn approved_exactly_at_the_last_signature() {
    let mut d = three();
    assert_eq!(d.sign(&id("top-3"), Timestamp(1)), Ok(SignOutcome::Signed));
    assert_eq!(d.status, DecisionStatus::Pending);
    assert_eq!(d.sign(&id("top-1"), Timestamp(2)), Ok(SignOutcome::Signed));
    assert_eq!(d.status, DecisionStatus::Pending);
    assert_eq!(d.missing_signers().collect::<Vec<_>>(), [&id("top-2")]);
    assert_eq!(d.sign(&id("top-2"), Timestamp(3)), Ok(SignOutcome::Approved));
    assert_eq!(d.status, DecisionStatus::Approved);
    assert_eq!(d.missing_signers().count(), 0);
    let signers: Vec<&AgentId> = d.signatures.iter().map(|s| &s.signer).collect();
    assert_eq!(signers, [&id("top-3"), &id("top-1"), &id("top-2")]);
}

#[test]
fn a_single_signer_approves_at_once() {
    let mut d = propose(&["top-2"]).unwrap();
    assert_eq!(d.sign(&id("top-2"), Timestamp(1)), Ok(SignOutcome::Approved));
    assert_eq!(d.status, DecisionStatus::Approved);
}

#[test]
fn veto_is_final() {
    let mut d = three();
    d.sign(&id("top-1"), Timestamp(1)).unwrap();
    d.veto(&id("top-2"), "risk assessment failed", Timestamp(2)).unwrap();
    assert_eq!(d.status, DecisionStatus::Vetoed);
    assert_eq!(
        d.vetoes,
        [Veto {
            vetoer: id("top-2"),
            reason: "risk assessment failed".to_owned(),
            at: Timestamp(2)
        }]
    );
    let before = d.clone();
    for signer in ["top-1", "top-2", "top-3"] {
        let err = d.sign(&id(signer), Timestamp(3)).unwrap_err();
        assert_eq!(err, SignError::AlreadyDecided { id: D, status: DecisionStatus::Vetoed });
        let err = d.veto(&id(signer), "again", Timestamp(3)).unwrap_err();
        assert_eq!(err, SignError::AlreadyDecided { id: D, status: DecisionStatus::Vetoed });
    }
    assert_eq!(d, before);
}

#[test]
fn a_signer_who_signed_may_still_veto_while_pending() {
    let mut d = three();
    d.sign(&id("top-1"), Timestamp(1)).unwrap();
    assert_eq!(d.veto(&id("top-1"), "changed my mind", Timestamp(2)), Ok(()));
    assert_eq!(d.status, DecisionStatus::Vetoed);
}

#[test]
fn sign_or_veto_after_approval_is_already_decided() {
    let mut d = propose(&["top-1", "top-2"]).unwrap();
    d.sign(&id("top-1"), Timestamp(1)).unwrap();
    d.sign(&id("top-2"), Timestamp(2)).unwrap();
    let before = d.clone();
    let decided = SignError::AlreadyDecided { id: D, status: DecisionStatus::Approved };
    assert_eq!(d.sign(&id("top-1"), Timestamp(3)), Err(decided.clone()));
    assert_eq!(d.veto(&id("top-2"), "late", Timestamp(3)), Err(decided.clone()));
    // A stranger gets the same answer: the decision is closed to everyone.
    assert_eq!(d.sign(&id("mid-1"), Timestamp(3)), Err(decided.clone()));
    assert!(decided.to_string().contains("already approved"), "{decided}");
    assert_eq!(d, before);
}

#[test]
fn veto_needs_a_reason() {
    let mut d = three();
    let before = d.clone();
    for reason in ["", "   ", "\n\t"] {
        let err = d.veto(&id("top-3"), reason, Timestamp(1)).unwrap_err();
        assert_eq!(err, SignError::EmptyVetoReason { id: D });
        assert!(err.to_string().contains("a veto needs a reason"));
    }
    assert_eq!(d, before);
}

#[test]
fn check_validates_a_submitted_decision() {
    let mut d = three();
    assert_eq!(d.check(), Ok(()));
    d.required_signers.push(id("top-2"));
    assert_eq!(d.check(), Err(ProposeError::DuplicateSigner { id: D, signer: id("top-2") }));
    d.required_signers.clear();
    assert_eq!(d.check(), Err(ProposeError::NoSigners { id: D }));
}

fn vote(voter: &str, choice: &str, weight: f64) -> Vote {
    Vote { voter: id(voter), choice: choice.to_owned(), weight }
}

#[test]
fn weighted_majority_wins() {
    let t = tally(&[vote("top-1", "a", 1.0), vote("top-2", "b", 1.5), vote("top-3", "a", 0.25)])
        .unwrap();
    assert_eq!(
        t,
        Tally {
            winner: "b".to_owned(),
            totals: vec![("a".to_owned(), 1.25), ("b".to_owned(), 1.5)],
            tie_broken: false,
        }
    );
    // More voters but less weight loses.
    let t = tally(&[vote("a1", "x", 1.0), vote("a2", "x", 1.0), vote("b1", "y", 3.0)]).unwrap();
    assert_eq!((t.winner.as_str(), t.tie_broken), ("y", false));
}

#[test]
fn tie_goes_to_the_earliest_votes_option() {
    let t = tally(&[vote("top-2", "b", 1.0), vote("top-1", "a", 1.0)]).unwrap();
    assert_eq!((t.winner.as_str(), t.tie_broken), ("b", true));
    let t = tally(&[vote("top-1", "a", 1.0), vote("top-2", "b", 1.0)]).unwrap();
    assert_eq!((t.winner.as_str(), t.tie_broken), ("a", true));
    // Three-way with a weaker option first: the earliest of the *leaders* wins.
    let t = tally(&[
        vote("v1", "weak", 0.5),
        vote("v2", "c", 2.0),
        vote("v3", "d", 2.0),
        vote("v4", "e", 1.0),
    ])
    .unwrap();
    assert_eq!((t.winner.as_str(), t.tie_broken), ("c", true));
    // All weights zero: everyone ties at zero.
    let t = tally(&[vote("v1", "p", 0.0), vote("v2", "q", 0.0)]).unwrap();
    assert_eq!((t.winner.as_str(), t.tie_broken), ("p", true));
}

#[test]
fn a_single_option_is_not_a_tie() {
    let t = tally(&[vote("v1", "only", 1.0), vote("v2", "only", 2.0)]).unwrap();
    assert_eq!(t.totals, [("only".to_owned(), 3.0)]);
    assert_eq!((t.winner.as_str(), t.tie_broken), ("only", false));
}

#[test]
fn invalid_weights_are_refused() {
    for w in [-1.0, -f64::MIN_POSITIVE, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = tally(&[vote("v1", "a", 1.0), vote("v2", "b", w)]).unwrap_err();
        match err {
            TallyError::InvalidWeight { ref voter, weight } => {
                assert_eq!(voter, &id("v2"));
                assert!(weight.to_bits() == w.to_bits(), "{weight} vs {w}");
            }
            ref other => panic!("expected InvalidWeight for {w}, got {other:?}"),
        }
        assert!(err.to_string().contains("must be finite and not negative"), "{err}");
    }
}

#[test]
fn duplicate_voter_is_refused() {
    let err =
        tally(&[vote("v1", "a", 1.0), vote("v2", "b", 1.0), vote("v1", "b", 1.0)]).unwrap_err();
    assert_eq!(err, TallyError::DuplicateVoter { voter: id("v1") });
    assert_eq!(err.to_string(), "`v1` voted twice");
}

#[test]
fn no_votes_is_refused() {
    assert_eq!(tally(&[]), Err(TallyError::NoVotes));
}
