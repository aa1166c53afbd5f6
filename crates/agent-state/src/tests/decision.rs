//! Decision rules (sign, veto, propose) and the weighted-majority tally.

use serde_json::json;

use super::id;
use crate::{
    AgentId, BallotChoice, Decision, DecisionId, DecisionStatus, ProposeError, SignError,
    SignOutcome, Signature, Tally, TallyError, Timestamp, Veto, Vote, tally,
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
    Vote { voter: id(voter), choice: choice.into(), weight }
}

#[test]
fn weighted_majority_wins() {
    let t = tally(&[vote("top-1", "a", 1.0), vote("top-2", "b", 1.5), vote("top-3", "a", 0.25)])
        .unwrap();
    assert_eq!(
        t,
        Tally {
            winner: "b".into(),
            totals: vec![("a".into(), 1.25), ("b".into(), 1.5)],
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
    assert_eq!(t.totals, [(BallotChoice::from("only"), 3.0)]);
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

fn human(name: &str) -> AgentId {
    AgentId::human(name).unwrap()
}

#[test]
fn human_ids_are_prefixed_checked_and_never_agent_ids() {
    let alice = human("alice");
    assert_eq!(alice.as_str(), "human:alice");
    assert!(alice.is_human() && alice.human_name() == Some("alice"));
    assert!(crate::check_agent_id(alice.as_str()).is_err(), "a human id is never an agent id");
    assert!(!id("alice").is_human() && id("alice").human_name().is_none());
    assert!(!id("human:").is_human() && !id("human:a b").is_human());
    assert_eq!(AgentId::human(""), Err(crate::HumanNameError::Empty));
    assert!(matches!(AgentId::human("a:b"), Err(crate::HumanNameError::InvalidCharacter { .. })));
    assert!(matches!(AgentId::human("x\ny"), Err(crate::HumanNameError::InvalidCharacter { .. })));
    let long = "a".repeat(crate::MAX_HUMAN_NAME_LEN + 1);
    assert!(matches!(AgentId::human(&long), Err(crate::HumanNameError::TooLong { .. })));
    assert!(AgentId::human(&long[1..]).is_ok());
}

#[test]
fn a_human_required_signer_signs_and_vetoes_like_an_agent() {
    let mut d = Decision::propose(
        D,
        id("top-1"),
        json!({"plan": "p"}),
        vec![id("top-2"), human("alice")],
        Timestamp(100),
    )
    .unwrap();
    assert_eq!(d.sign(&id("top-2"), Timestamp(101)), Ok(SignOutcome::Signed));
    assert!(matches!(
        d.sign(&human("mallory"), Timestamp(102)),
        Err(SignError::NotARequiredSigner { .. })
    ));
    let mut vetoed = d.clone();
    assert_eq!(d.sign(&human("alice"), Timestamp(103)), Ok(SignOutcome::Approved));
    vetoed.veto(&human("alice"), "not today", Timestamp(103)).unwrap();
    assert_eq!(vetoed.status, DecisionStatus::Vetoed);
}

fn one_of_humans() -> Decision {
    propose(&["top-2"]).unwrap().with_human_approval(vec!["alice".into(), "bob".into()]).unwrap()
}

#[test]
fn one_human_of_the_allowed_set_is_needed_besides_the_required_signers() {
    let mut d = one_of_humans();
    assert!(d.needs_human() && !d.fully_signed());
    assert_eq!(d.sign(&id("top-2"), Timestamp(101)), Ok(SignOutcome::Signed));
    assert_eq!(d.status, DecisionStatus::Pending, "the human's signature is still missing");
    let before = d.clone();
    let err = d.sign(&human("mallory"), Timestamp(102)).unwrap_err();
    assert!(
        matches!(&err, SignError::NotARequiredSigner { agent, required, .. }
            if *agent == human("mallory") && required.contains("human:alice")),
        "{err}"
    );
    assert!(matches!(
        d.veto(&human("mallory"), "no", Timestamp(102)),
        Err(SignError::NotARequiredSigner { .. })
    ));
    assert!(matches!(
        d.sign(&id("alice"), Timestamp(102)),
        Err(SignError::NotARequiredSigner { .. })
    ));
    assert_eq!(d, before, "refusals change nothing");
    assert_eq!(d.sign(&human("bob"), Timestamp(103)), Ok(SignOutcome::Approved));
    assert!(d.fully_signed());
    assert!(matches!(
        d.sign(&human("alice"), Timestamp(104)),
        Err(SignError::AlreadyDecided { .. })
    ));
}

#[test]
fn a_second_human_signature_changes_nothing_and_any_allowed_human_may_veto() {
    let mut d = one_of_humans();
    assert_eq!(d.sign(&human("alice"), Timestamp(101)), Ok(SignOutcome::Signed));
    let before = d.clone();
    assert_eq!(d.sign(&human("bob"), Timestamp(102)), Ok(SignOutcome::AlreadySigned));
    assert_eq!(d.sign(&human("alice"), Timestamp(102)), Ok(SignOutcome::AlreadySigned));
    assert_eq!(d, before);
    d.veto(&human("bob"), "changed my mind", Timestamp(103)).unwrap();
    assert_eq!(d.status, DecisionStatus::Vetoed);
    assert_eq!(d.vetoes[0].vetoer, human("bob"));
}

#[test]
fn a_human_approval_alone_is_enough_signers_and_its_names_are_checked() {
    let mut alone = propose(&[]).unwrap_err();
    assert_eq!(alone, ProposeError::NoSigners { id: D });
    let mut d = one_of_humans();
    d.required_signers.clear();
    assert_eq!(d.check(), Ok(()));
    assert_eq!(d.sign(&human("alice"), Timestamp(1)), Ok(SignOutcome::Approved));
    let base = || propose(&["top-2"]).unwrap();
    assert_eq!(base().with_human_approval(vec![]).unwrap_err(), ProposeError::NoHumans { id: D });
    alone = base().with_human_approval(vec!["a b".into()]).unwrap_err();
    assert!(matches!(alone, ProposeError::BadHuman { .. }), "{alone}");
    alone = base().with_human_approval(vec!["al".into(), "al".into()]).unwrap_err();
    assert!(
        matches!(&alone, ProposeError::BadHuman { why, .. } if why.contains("twice")),
        "{alone}"
    );
}

#[test]
fn decisions_stored_before_human_approval_still_read_and_round_trip() {
    let d = three();
    let json = serde_json::to_value(&d).unwrap();
    assert!(json.get("human_approval").is_none(), "not written when absent");
    let back: Decision = serde_json::from_value(json).unwrap();
    assert_eq!(back, d);
    let h = one_of_humans();
    let back: Decision = serde_json::from_value(serde_json::to_value(&h).unwrap()).unwrap();
    assert_eq!(back, h);
}

#[test]
fn ballot_choices_read_and_write_their_stored_form() {
    // A vote, a tally and the choices as stored runs hold them (plain strings).
    let stored = r#"{"voter":"top-a","choice":"retry","weight":2.0}"#;
    let vote: Vote = serde_json::from_str(stored).unwrap();
    assert_eq!(vote.choice, BallotChoice::Retry);
    assert_eq!(serde_json::to_string(&vote).unwrap(), stored);
    let stored =
        r#"{"winner":"merge","totals":[["merge",2.0],["abandon",1.0]],"tie_broken":false}"#;
    let tally: Tally = serde_json::from_str(stored).unwrap();
    assert_eq!(tally.winner, BallotChoice::Other("merge".into()));
    assert_eq!(tally.totals[1].0, BallotChoice::Abandon);
    assert_eq!(serde_json::to_string(&tally).unwrap(), stored);
    for (choice, name) in [
        (BallotChoice::Retry, "retry"),
        (BallotChoice::Abandon, "abandon"),
        (BallotChoice::Redo, "redo"),
        (BallotChoice::Accept, "accept"),
        (BallotChoice::Proceed, "proceed"),
        (BallotChoice::Other("ship it".into()), "ship it"),
    ] {
        assert_eq!(serde_json::to_value(&choice).unwrap(), json!(name));
        assert_eq!(serde_json::from_value::<BallotChoice>(name.into()).unwrap(), choice);
        assert_eq!(BallotChoice::from(name), choice);
        assert_eq!(choice.to_string(), name);
        assert_eq!(choice, name);
    }
}
