//! The whiteboard permission policy, as a literal table.

use super::id;
use crate::{Actor, AgentLayer, BoardAccess, BoardId, Principal, board_permits};

use AgentLayer::{Bottom, Mid, Top};

/// The boards of a small team: the global board and two boards per layer.
const BOARDS: [(&str, Option<AgentLayer>); 7] = [
    ("global", None),
    ("top-1", Some(Top)),
    ("top-2", Some(Top)),
    ("mid-1", Some(Mid)),
    ("mid-2", Some(Mid)),
    ("bottom-1", Some(Bottom)),
    ("bottom-2", Some(Bottom)),
];

/// Expected permissions, one string per board in [`BOARDS`] order: `r` read, `w` write
/// (replace), `a` append, `-` denied.
///
/// - System reads everything, writes and appends nothing (not even the global board).
/// - Agents: global `r-a`; own board `rwa`; same layer `r--`; a layer below `r--`; a layer above `---`.
#[rustfmt::skip]
const EXPECTED: [(&str, [&str; 7]); 4] = [
    //               global top-1  top-2  mid-1  mid-2  bottom-1 bottom-2
    ("system",   ["r--", "r--", "r--", "r--", "r--", "r--",   "r--"]),
    ("top-1",    ["r-a", "rwa", "r--", "r--", "r--", "r--",   "r--"]),
    ("mid-1",    ["r-a", "---", "---", "rwa", "r--", "r--",   "r--"]),
    ("bottom-1", ["r-a", "---", "---", "---", "---", "rwa",   "r--"]),
];

fn principal(name: &str) -> Principal {
    match name {
        "system" => Principal::System,
        "top-1" => Principal::Agent { id: id(name), layer: Top },
        "mid-1" => Principal::Agent { id: id(name), layer: Mid },
        _ => Principal::Agent { id: id(name), layer: Bottom },
    }
}

fn board(name: &str) -> BoardId {
    if name == "global" { BoardId::Global } else { BoardId::Agent(id(name)) }
}

#[test]
fn board_permits_matches_the_policy_table() {
    let mut mismatches = Vec::new();
    for (actor, row) in EXPECTED {
        let p = principal(actor);
        for ((name, layer), perms) in BOARDS.iter().zip(row) {
            let got: String =
                [(BoardAccess::Read, 'r'), (BoardAccess::Write, 'w'), (BoardAccess::Append, 'a')]
                    .into_iter()
                    .map(
                        |(access, c)| {
                            if board_permits(&p, access, &board(name), *layer) { c } else { '-' }
                        },
                    )
                    .collect();
            if got != perms {
                mismatches.push(format!("{actor} on {name}: expected {perms}, got {got}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn the_global_board_ignores_the_layer_argument() {
    let p = principal("bottom-1");
    for layer in [None, Some(Top), Some(Bottom)] {
        assert!(board_permits(&p, BoardAccess::Append, &BoardId::Global, layer));
        assert!(!board_permits(&p, BoardAccess::Write, &BoardId::Global, layer));
    }
}

#[test]
fn an_agent_board_of_unknown_layer_is_readable_only_by_its_owner() {
    let owner = board("mid-2");
    assert!(board_permits(&principal("top-1"), BoardAccess::Read, &owner, Some(Mid)));
    assert!(!board_permits(&principal("top-1"), BoardAccess::Read, &owner, None));
    let me = Principal::Agent { id: id("mid-2"), layer: Mid };
    assert!(board_permits(&me, BoardAccess::Read, &owner, None));
    assert!(board_permits(&me, BoardAccess::Write, &owner, None));
}

#[test]
fn actor_display_and_conversions() {
    assert_eq!(Actor::System.to_string(), "system");
    assert_eq!(Actor::from(id("mid-1")).to_string(), "mid-1");
    assert_eq!(Actor::from(&id("mid-1")), Actor::Agent(id("mid-1")));
    assert_eq!(BoardAccess::Append.to_string(), "append to");
}
