//! Unit tests of the in-memory backend: its limit, its constructors, its error messages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_state::{Actor, AgentId, AgentLayer, BoardAccess, BoardId, Timestamp};

use super::{InMemoryWhiteboard, MAX_BOARD_BYTES, needs_separator};
use crate::{BoardError, CreateError, Whiteboard};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
}

#[test]
fn default_limit_is_one_mebibyte() {
    assert_eq!(MAX_BOARD_BYTES, 1024 * 1024);
    assert_eq!(InMemoryWhiteboard::new().max_bytes(), MAX_BOARD_BYTES);
    assert_eq!(InMemoryWhiteboard::default().max_bytes(), MAX_BOARD_BYTES);
    assert_eq!(InMemoryWhiteboard::with_max_bytes(10).max_bytes(), 10);
}

#[test]
fn a_new_line_goes_before_appended_content_only_after_unterminated_text() {
    for (content, expected) in
        [("", false), ("a", true), ("a\n", false), ("\n", false), ("a\nb", true)]
    {
        assert_eq!(needs_separator(content), expected, "content {content:?}");
    }
}

#[test]
fn the_limit_counts_bytes_not_chars() {
    block_on(async {
        let boards = InMemoryWhiteboard::with_max_bytes(4);
        let me = AgentId::new("bottom-1");
        boards.create(&me, AgentLayer::Bottom).await.unwrap();
        // "éé" is 2 chars but 4 bytes: it fits; "ééé" (6 bytes) does not.
        assert_eq!(
            boards.write(&me, &BoardId::from(&me), "éé".into(), Timestamp(1)).await.unwrap(),
            1
        );
        let err =
            boards.write(&me, &BoardId::from(&me), "ééé".into(), Timestamp(2)).await.unwrap_err();
        assert!(
            matches!(err, BoardError::TooLarge { size: 6, limit: 4, .. }),
            "unexpected error: {err:?}"
        );
        let board = boards.read(&Actor::System, &BoardId::from(&me)).await.unwrap();
        assert_eq!((board.content.as_str(), board.version), ("éé", 1));
    });
}

#[test]
fn a_zero_limit_refuses_everything_but_empty_content() {
    block_on(async {
        let boards = InMemoryWhiteboard::with_max_bytes(0);
        let me = AgentId::new("mid-1");
        boards.create(&me, AgentLayer::Mid).await.unwrap();
        assert_eq!(boards.append(&me, &BoardId::Global, "", Timestamp(1)).await.unwrap(), 1);
        let err = boards.append(&me, &BoardId::Global, "x", Timestamp(2)).await.unwrap_err();
        assert!(matches!(err, BoardError::TooLarge { size: 1, limit: 0, .. }), "{err:?}");
    });
}

#[test]
fn error_messages_name_the_board_and_the_rule() {
    block_on(async {
        let boards = InMemoryWhiteboard::new();
        let (top, bottom) = (AgentId::new("top-1"), AgentId::new("bottom-1"));
        boards.create(&top, AgentLayer::Top).await.unwrap();
        boards.create(&bottom, AgentLayer::Bottom).await.unwrap();

        let read = boards.read(&Actor::from(&bottom), &BoardId::from(&top)).await.unwrap_err();
        assert_eq!(
            read.to_string(),
            "`bottom-1` may not read whiteboard `top-1`: an agent reads its own board, its \
             layer's, the layers below, and the global board"
        );
        let write =
            boards.write(&top, &BoardId::Global, "x".into(), Timestamp(1)).await.unwrap_err();
        assert_eq!(
            write.to_string(),
            "`top-1` may not write whiteboard `global`: the global board is append-only"
        );
        assert!(matches!(write, BoardError::PermissionDenied { access: BoardAccess::Write, .. }));
        let ghost = boards.list(&Actor::Agent(AgentId::new("ghost"))).await.unwrap_err();
        assert_eq!(
            ghost.to_string(),
            "agent `ghost` has no whiteboard, so its layer is unknown; create its board first"
        );
        let mismatch = boards.create(&top, AgentLayer::Mid).await.unwrap_err();
        assert_eq!(mismatch.to_string(), "board of `top-1` exists under layer top, not mid");
        let invalid = boards.create(&AgentId::new("system"), AgentLayer::Top).await.unwrap_err();
        assert!(
            matches!(&invalid, CreateError::InvalidOwner { owner, .. } if owner == "system"),
            "{invalid:?}"
        );
    });
}

#[test]
fn a_poisoned_lock_still_serves_the_boards() {
    let boards = std::sync::Arc::new(InMemoryWhiteboard::new());
    let me = AgentId::new("mid-1");
    block_on(boards.create(&me, AgentLayer::Mid)).unwrap();
    let poisoner = std::sync::Arc::clone(&boards);
    let joined = std::thread::spawn(move || {
        let _guard = poisoner.boards.lock();
        panic!("poison the lock");
    })
    .join();
    assert!(joined.is_err());
    assert!(boards.boards.is_poisoned());
    assert_eq!(
        block_on(boards.write(&me, &BoardId::from(&me), "still here".into(), Timestamp(1)))
            .unwrap(),
        1
    );
}
