//! Arbitration by weighted vote, as governance uses `agent_state::tally` when powers conflict.

use agent_state::{AgentId, BallotChoice, TallyError, Vote, tally};

fn vote(voter: &str, choice: &str, weight: f64) -> Vote {
    Vote { voter: AgentId::new(voter), choice: choice.into(), weight }
}

#[test]
fn the_heaviest_option_wins_even_against_more_voters() {
    let t = tally(&[
        vote("top-a", "ship", 3.0),
        vote("top-b", "wait", 1.0),
        vote("top-c", "wait", 1.5),
    ])
    .unwrap();
    assert_eq!(t.winner, "ship");
    assert_eq!(t.totals, [(BallotChoice::from("ship"), 3.0), ("wait".into(), 2.5)]);
    assert!(!t.tie_broken);
}

#[test]
fn on_a_tie_the_earliest_vote_wins_so_the_arbitrator_votes_first() {
    let arbitrator_first = [vote("arbiter", "wait", 1.0), vote("top-a", "ship", 1.0)];
    let t = tally(&arbitrator_first).unwrap();
    assert_eq!(t.winner, "wait");
    assert!(t.tie_broken);

    let arbitrator_last = [vote("top-a", "ship", 1.0), vote("arbiter", "wait", 1.0)];
    let t = tally(&arbitrator_last).unwrap();
    assert_eq!(t.winner, "ship");
    assert!(t.tie_broken);
}

#[test]
fn a_tie_among_the_leaders_only_counts_the_leaders() {
    let t =
        tally(&[vote("top-a", "low", 0.5), vote("top-b", "ship", 2.0), vote("top-c", "wait", 2.0)])
            .unwrap();
    assert_eq!(t.winner, "ship");
    assert!(t.tie_broken);
}

#[test]
fn invalid_arbitrations_are_refused() {
    assert_eq!(tally(&[]), Err(TallyError::NoVotes));
    assert_eq!(
        tally(&[vote("top-a", "ship", -1.0)]),
        Err(TallyError::InvalidWeight { voter: AgentId::new("top-a"), weight: -1.0 })
    );
    assert!(matches!(
        tally(&[vote("top-a", "ship", f64::NAN)]),
        Err(TallyError::InvalidWeight { .. })
    ));
    assert_eq!(
        tally(&[vote("top-a", "ship", 1.0), vote("top-a", "wait", 1.0)]),
        Err(TallyError::DuplicateVoter { voter: AgentId::new("top-a") })
    );
}
