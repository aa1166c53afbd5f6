//! The rules every whiteboard backend applies, written once: the permission check with its
//! refusal, the append separator, and version bumps.

use agent_state::{
    Actor, AgentLayer, BoardAccess, BoardId, BoardSnapshot, Principal, Timestamp, board_permits,
};

use crate::{BoardError, denial_rule};

/// A board never written.
pub(crate) fn empty_board(board: BoardId, layer: Option<AgentLayer>) -> BoardSnapshot {
    BoardSnapshot { board, layer, content: String::new(), version: 0, updated_at: None }
}

/// Applies the policy, or says which rule refuses the access.
pub(crate) fn permit(
    principal: &Principal,
    actor: &Actor,
    access: BoardAccess,
    target: &BoardSnapshot,
) -> Result<(), BoardError> {
    if board_permits(principal, access, &target.board, target.layer) {
        return Ok(());
    }
    tracing::debug!(%actor, %access, board = %target.board, "whiteboard access refused");
    Err(BoardError::PermissionDenied {
        actor: actor.clone(),
        access,
        board: target.board.clone(),
        rule: denial_rule(actor, access, &target.board),
    })
}

/// Whether appended content must start on a new line: the board holds text not ending in one.
pub(crate) fn needs_separator(content: &str) -> bool {
    !content.is_empty() && !content.ends_with('\n')
}

/// Records a successful change made at `at`; returns the new version.
pub(crate) fn bump(board: &mut BoardSnapshot, at: Timestamp) -> u64 {
    board.version += 1;
    board.updated_at = Some(at);
    board.version
}
