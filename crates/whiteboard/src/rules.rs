//! The rules every whiteboard backend applies, written once: who may own a board, creating a
//! board that exists, the permission check with its refusal, the append separator, and version
//! bumps.

use agent_state::{
    Actor, AgentId, AgentLayer, BoardAccess, BoardId, BoardSnapshot, Principal, Timestamp,
    board_permits, check_agent_id,
};

use crate::{BoardError, CreateError, denial_rule};

/// Refuses an owner id that cannot name an agent.
pub(crate) fn check_owner(owner: &AgentId) -> Result<(), CreateError> {
    check_agent_id(owner.as_str()).map_err(|kind| CreateError::InvalidOwner {
        owner: owner.to_string(),
        reason: kind.to_string(),
    })
}

/// Creating a board that exists with layer `existing`: the same layer changes nothing, another
/// is refused.
pub(crate) fn check_recreate(
    owner: &AgentId,
    existing: AgentLayer,
    requested: AgentLayer,
) -> Result<(), CreateError> {
    if existing == requested {
        return Ok(());
    }
    Err(CreateError::LayerMismatch { owner: owner.clone(), existing, requested })
}

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
