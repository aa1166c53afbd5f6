//! The conformance suite every [`Whiteboard`] backend runs: named checks of each guarantee and
//! each refusal, then a model-based property test with restarts.
//!
//! A backend author implements [`WhiteboardFactory`] and calls [`run_conformance`] from one
//! plain `#[test]` (not a `#[tokio::test]`: the suite builds its own runtime):
//!
//! ```
//! use std::sync::Arc;
//! use whiteboard::testing::{WhiteboardFactory, run_conformance};
//! use whiteboard::{InMemoryWhiteboard, Whiteboard};
//!
//! struct Memory;
//!
//! #[async_trait::async_trait]
//! impl WhiteboardFactory for Memory {
//!     async fn fresh(&self) -> Arc<dyn Whiteboard> {
//!         Arc::new(InMemoryWhiteboard::new())
//!     }
//!     async fn reopen(&self, _boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>> {
//!         None // nothing survives a restart
//!     }
//! }
//!
//! run_conformance(Memory);
//! ```

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::sync::Arc;

use agent_state::{
    Actor, AgentId, AgentLayer, BoardAccess, BoardId, BoardSnapshot, MAX_AGENT_ID_LEN, Principal,
    Timestamp, board_permits,
};
use async_trait::async_trait;
use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, prop_oneof};
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::{BoardError, CreateError, MAX_BOARD_BYTES, Whiteboard, denial_rule};

/// Builds the backends [`run_conformance`] checks.
#[async_trait]
pub trait WhiteboardFactory: Send + Sync {
    /// A fresh, empty backend (a new store each call).
    async fn fresh(&self) -> Arc<dyn Whiteboard>;

    /// Drops the backend and opens the same store again, as after a process restart; `None` for
    /// backends that keep nothing across a restart.
    ///
    /// The suite first calls it once on a fresh backend: if that returns `None`, it never calls
    /// it again and skips the restart checks. The suite holds no other clone of `boards` when it
    /// calls this, so dropping it releases the store.
    async fn reopen(&self, boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>>;

    /// The size limit of one board of the backends [`fresh`](Self::fresh) returns, in bytes;
    /// at least 64. The suite checks [`BoardError::TooLarge`] against it.
    fn max_board_bytes(&self) -> usize {
        MAX_BOARD_BYTES
    }
}

/// Runs the whole suite against the backends `factory` builds; panics, naming the failed
/// check, at the first difference from the [`Whiteboard`] contract.
///
/// First the named checks, each on a fresh backend; then a model-based property test that
/// applies random sequences of operations (creates, reads, writes, appends, lists, restarts) to
/// a fresh backend and to a reference model, and compares the outcomes and every board after
/// each step. The property test runs `PROPTEST_CASES` cases (64 if unset) and shrinks a
/// failure to a minimal sequence.
pub fn run_conformance<F: WhiteboardFactory>(factory: F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("whiteboard conformance: cannot build a tokio runtime: {e}"));
    let limit = factory.max_board_bytes();
    if limit < 64 {
        panic!("whiteboard conformance: max_board_bytes must be at least 64, got {limit}");
    }
    let durable = runtime.block_on(async { factory.reopen(factory.fresh().await).await.is_some() });
    let cx = Cx { factory: &factory, limit, durable };
    runtime.block_on(scenarios(&cx));
    model_test(&runtime, &cx);
}

/// What every check gets: the factory and what it told about its backends.
struct Cx<'a> {
    factory: &'a dyn WhiteboardFactory,
    limit: usize,
    durable: bool,
}

/// A check's verdict: `Err` says what differed.
type Checked = Result<(), String>;

/// A refused call, reduced to what the contract fixes, so outcomes can be compared.
#[derive(Clone, Debug, PartialEq)]
enum Refusal {
    UnknownBoard(BoardId),
    UnknownActor(AgentId),
    PermissionDenied {
        actor: Actor,
        access: BoardAccess,
        board: BoardId,
        rule: &'static str,
    },
    TooLarge {
        board: BoardId,
        size: usize,
        limit: usize,
    },
    InvalidOwner(String),
    LayerMismatch {
        owner: AgentId,
        existing: AgentLayer,
        requested: AgentLayer,
    },
    /// Never expected: the backend failed.
    Backend(String),
}

impl From<BoardError> for Refusal {
    fn from(e: BoardError) -> Self {
        match e {
            BoardError::UnknownBoard { board } => Refusal::UnknownBoard(board),
            BoardError::UnknownActor { agent } => Refusal::UnknownActor(agent),
            BoardError::PermissionDenied { actor, access, board, rule } => {
                Refusal::PermissionDenied { actor, access, board, rule }
            }
            BoardError::TooLarge { board, size, limit } => Refusal::TooLarge { board, size, limit },
            BoardError::Backend(e) => Refusal::Backend(e.to_string()),
        }
    }
}

impl From<CreateError> for Refusal {
    fn from(e: CreateError) -> Self {
        match e {
            CreateError::InvalidOwner { owner, .. } => Refusal::InvalidOwner(owner),
            CreateError::LayerMismatch { owner, existing, requested } => {
                Refusal::LayerMismatch { owner, existing, requested }
            }
            CreateError::Backend(e) => Refusal::Backend(e.to_string()),
        }
    }
}

/// The team most checks start from, in creation order (not owner-id order).
const TEAM: [(&str, AgentLayer); 6] = [
    ("top-1", AgentLayer::Top),
    ("top-2", AgentLayer::Top),
    ("mid-1", AgentLayer::Mid),
    ("mid-2", AgentLayer::Mid),
    ("bottom-1", AgentLayer::Bottom),
    ("bottom-2", AgentLayer::Bottom),
];

/// A valid agent id that never gets a board.
const GHOST: &str = "ghost-1";

async fn scenarios(cx: &Cx<'_>) {
    macro_rules! run {
        ($($check:ident),* $(,)?) => {$(
            if let Err(msg) = $check(cx).await {
                panic!("whiteboard conformance check `{}` failed: {msg}", stringify!($check));
            }
        )*};
    }
    run!(
        global_board_starts_empty,
        create_starts_empty_at_version_0,
        create_again_under_the_same_layer_changes_nothing,
        create_under_another_layer_is_layer_mismatch,
        create_rejects_an_invalid_owner,
        write_replaces_content_and_bumps_version,
        append_adds_content_on_a_new_line,
        every_layer_appends_to_the_global_board,
        global_board_is_append_only,
        nobody_writes_or_appends_to_another_agents_board,
        reads_follow_the_layers,
        list_shows_readable_boards_global_first_then_by_owner,
        system_reads_every_board_and_writes_none,
        agent_without_a_board_is_unknown_actor,
        missing_board_is_unknown_board,
        too_large_content_is_refused,
        acknowledged_changes_survive_a_restart,
    );
}

async fn global_board_starts_empty(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let global = empty(BoardId::Global, None);
    same(
        "system reads the global board",
        out(boards.read(&Actor::System, &BoardId::Global).await),
        Ok(global.clone()),
    )?;
    same(
        "system lists a fresh store",
        out(boards.list(&Actor::System).await),
        Ok(vec![global.clone()]),
    )?;
    out(boards.create(&id("bottom-1"), AgentLayer::Bottom).await)
        .map_err(|e| format!("create: {e:?}"))?;
    same(
        "bottom-1 reads the global board",
        out(boards.read(&agent("bottom-1"), &BoardId::Global).await),
        Ok(global),
    )
}

async fn create_starts_empty_at_version_0(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    for (name, layer) in TEAM {
        let want = empty(board(name), Some(layer));
        same(
            format!("create {name} under {layer}"),
            out(boards.create(&id(name), layer).await),
            Ok(want.clone()),
        )?;
        same(
            format!("{name} reads its new board"),
            out(boards.read(&agent(name), &board(name)).await),
            Ok(want.clone()),
        )?;
        same(
            format!("system reads {name}'s new board"),
            out(boards.read(&Actor::System, &board(name)).await),
            Ok(want),
        )?;
    }
    Ok(())
}

async fn create_again_under_the_same_layer_changes_nothing(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    for (name, layer) in TEAM {
        same(
            format!("create {name} again under {layer}"),
            out(boards.create(&id(name), layer).await),
            Ok(find(&before, name)?),
        )?;
        unchanged(&*boards, &before, format!("creating {name} again")).await?;
    }
    Ok(())
}

async fn create_under_another_layer_is_layer_mismatch(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    for (name, existing) in TEAM {
        for requested in AgentLayer::ALL.into_iter().filter(|l| *l != existing) {
            same(
                format!("create {name} under {requested}"),
                out(boards.create(&id(name), requested).await),
                Err(Refusal::LayerMismatch { owner: id(name), existing, requested }),
            )?;
            unchanged(&*boards, &before, format!("creating {name} under {requested}")).await?;
        }
    }
    // The refused create did not change mid-1's layer: it still may not read a top board.
    same(
        "mid-1 reads top-1 after asking for the top layer",
        out(boards.read(&agent("mid-1"), &board("top-1")).await),
        Err(denied(&agent("mid-1"), BoardAccess::Read, &board("top-1"))),
    )
}

async fn create_rejects_an_invalid_owner(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    let too_long = "a".repeat(MAX_AGENT_ID_LEN + 1);
    for owner in ["", "system", "broadcast", "global", "has space", "a/b", "é", too_long.as_str()]
    {
        let got = boards.create(&id(owner), AgentLayer::Mid).await;
        if let Err(CreateError::InvalidOwner { reason, .. }) = &got
            && reason.trim().is_empty()
        {
            return Err(format!("create `{owner}`: InvalidOwner gives no reason"));
        }
        same(format!("create `{owner}`"), out(got), Err(Refusal::InvalidOwner(owner.to_owned())))?;
        unchanged(&*boards, &before, format!("creating `{owner}`")).await?;
    }
    Ok(())
}

async fn write_replaces_content_and_bumps_version(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    team(&*boards).await?;
    let mine = board("mid-1");
    for (version, content, at) in [(2, "## Plan", 10), (3, "", 11), (4, "## Plan\n- a\n- b\n", 9)] {
        same(
            format!("mid-1 writes {content:?}"),
            out(boards.write(&id("mid-1"), &mine, content.to_owned(), Timestamp(at)).await),
            Ok(version),
        )?;
        same(
            format!("mid-1 reads after writing {content:?}"),
            out(boards.read(&agent("mid-1"), &mine).await),
            Ok(snapshot(mine.clone(), Some(AgentLayer::Mid), content, version, Some(at))),
        )?;
    }
    Ok(())
}

async fn append_adds_content_on_a_new_line(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let (who, mine) = (id("bottom-1"), board("bottom-1"));
    out(boards.create(&who, AgentLayer::Bottom).await).map_err(|e| format!("create: {e:?}"))?;
    enum Step {
        Write(&'static str),
        Append(&'static str),
    }
    let steps = [
        (Step::Append("a"), "a"),
        (Step::Append("b"), "a\nb"),
        (Step::Write("c\n"), "c\n"),
        (Step::Append("d"), "c\nd"),
        (Step::Append(""), "c\nd\n"),
        (Step::Append("e"), "c\nd\ne"),
        (Step::Write(""), ""),
        (Step::Append(""), ""),
        (Step::Append("f\n"), "f\n"),
    ];
    for (i, (step, want)) in steps.into_iter().enumerate() {
        let version = i as u64 + 1;
        let at = Timestamp(100 + version);
        let (what, got) = match step {
            Step::Write(c) => {
                (format!("write {c:?}"), boards.write(&who, &mine, c.to_owned(), at).await)
            }
            Step::Append(c) => (format!("append {c:?}"), boards.append(&who, &mine, c, at).await),
        };
        same(format!("step {i}: {what}"), out(got), Ok(version))?;
        same(
            format!("step {i}: read after {what}"),
            out(boards.read(&agent("bottom-1"), &mine).await),
            Ok(snapshot(mine.clone(), Some(AgentLayer::Bottom), want, version, Some(at.0))),
        )?;
    }
    Ok(())
}

async fn every_layer_appends_to_the_global_board(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    team(&*boards).await?;
    let mut lines = Vec::new();
    for (i, (name, _)) in TEAM.into_iter().enumerate() {
        let version = i as u64 + 1;
        let at = 200 + version;
        same(
            format!("{name} appends to the global board"),
            out(boards.append(&id(name), &BoardId::Global, name, Timestamp(at)).await),
            Ok(version),
        )?;
        lines.push(name);
        same(
            format!("global board after {name} appends"),
            out(boards.read(&agent(name), &BoardId::Global).await),
            Ok(snapshot(BoardId::Global, None, &lines.join("\n"), version, Some(at))),
        )?;
    }
    Ok(())
}

async fn global_board_is_append_only(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    team(&*boards).await?;
    out(boards.append(&id("top-1"), &BoardId::Global, "kept", Timestamp(3)).await)
        .map_err(|e| format!("top-1 appends to the global board: {e:?}"))?;
    let before = list_all(&*boards).await?;
    for (name, _) in TEAM {
        same(
            format!("{name} writes the global board"),
            out(boards.write(&id(name), &BoardId::Global, "replaced".into(), Timestamp(4)).await),
            Err(denied(&agent(name), BoardAccess::Write, &BoardId::Global)),
        )?;
        unchanged(&*boards, &before, format!("{name} writes the global board")).await?;
    }
    Ok(())
}

async fn nobody_writes_or_appends_to_another_agents_board(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    for (writer, _) in TEAM {
        for (owner, _) in TEAM.into_iter().filter(|(o, _)| *o != writer) {
            same(
                format!("{writer} writes {owner}'s board"),
                out(boards
                    .write(&id(writer), &board(owner), "mine now".into(), Timestamp(5))
                    .await),
                Err(denied(&agent(writer), BoardAccess::Write, &board(owner))),
            )?;
            unchanged(&*boards, &before, format!("{writer} writes {owner}'s board")).await?;
            same(
                format!("{writer} appends to {owner}'s board"),
                out(boards.append(&id(writer), &board(owner), "me too", Timestamp(5)).await),
                Err(denied(&agent(writer), BoardAccess::Append, &board(owner))),
            )?;
            unchanged(&*boards, &before, format!("{writer} appends to {owner}'s board")).await?;
        }
    }
    Ok(())
}

async fn reads_follow_the_layers(cx: &Cx<'_>) -> Checked {
    // Who may read whose board, written out rather than computed. Columns follow `TEAM`:
    // top-1, top-2, mid-1, mid-2, bottom-1, bottom-2.
    const MAY_READ: [[bool; 6]; 6] = [
        [true, true, true, true, true, true],     // top-1: every board
        [true, true, true, true, true, true],     // top-2
        [false, false, true, true, true, true],   // mid-1: mid and bottom, not top
        [false, false, true, true, true, true],   // mid-2
        [false, false, false, false, true, true], // bottom-1: bottom only
        [false, false, false, false, true, true], // bottom-2
    ];
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    for ((reader, _), row) in TEAM.into_iter().zip(MAY_READ) {
        same(
            format!("{reader} reads the global board"),
            out(boards.read(&agent(reader), &BoardId::Global).await),
            Ok(find_board(&before, &BoardId::Global)?),
        )?;
        for ((owner, _), allowed) in TEAM.into_iter().zip(row) {
            let want = if allowed {
                Ok(find(&before, owner)?)
            } else {
                Err(denied(&agent(reader), BoardAccess::Read, &board(owner)))
            };
            same(
                format!("{reader} reads {owner}'s board"),
                out(boards.read(&agent(reader), &board(owner)).await),
                want,
            )?;
        }
    }
    unchanged(&*boards, &before, "the reads").await
}

async fn list_shows_readable_boards_global_first_then_by_owner(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let all = team(&*boards).await?;
    let order = |b: &BoardSnapshot| b.board.as_str().to_owned();
    let names: Vec<String> = all.iter().map(order).collect();
    same(
        "system lists every board",
        names.clone(),
        ["global", "bottom-1", "bottom-2", "mid-1", "mid-2", "top-1", "top-2"]
            .map(String::from)
            .to_vec(),
    )?;
    let expected: [(&str, &[&str]); 6] = [
        ("top-1", &["global", "bottom-1", "bottom-2", "mid-1", "mid-2", "top-1", "top-2"]),
        ("top-2", &["global", "bottom-1", "bottom-2", "mid-1", "mid-2", "top-1", "top-2"]),
        ("mid-1", &["global", "bottom-1", "bottom-2", "mid-1", "mid-2"]),
        ("mid-2", &["global", "bottom-1", "bottom-2", "mid-1", "mid-2"]),
        ("bottom-1", &["global", "bottom-1", "bottom-2"]),
        ("bottom-2", &["global", "bottom-1", "bottom-2"]),
    ];
    for (reader, visible) in expected {
        let want: Vec<BoardSnapshot> =
            all.iter().filter(|b| visible.contains(&b.board.as_str())).cloned().collect();
        same(format!("{reader} lists boards"), out(boards.list(&agent(reader)).await), Ok(want))?;
    }
    Ok(())
}

async fn system_reads_every_board_and_writes_none(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    for snapshot in &before {
        same(
            format!("system reads {}", snapshot.board),
            out(boards.read(&Actor::System, &snapshot.board).await),
            Ok(snapshot.clone()),
        )?;
    }
    // Writes take an agent id, so the system cannot write by construction; an agent cannot
    // take its name either.
    let system = id("system");
    same(
        "create a board for `system`",
        out(boards.create(&system, AgentLayer::Top).await),
        Err(Refusal::InvalidOwner("system".into())),
    )?;
    same(
        "agent `system` appends to the global board",
        out(boards.append(&system, &BoardId::Global, "as system", Timestamp(6)).await),
        Err(Refusal::UnknownActor(system.clone())),
    )?;
    same(
        "agent `system` reads top-1's board",
        out(boards.read(&Actor::Agent(system.clone()), &board("top-1")).await),
        Err(Refusal::UnknownActor(system)),
    )?;
    unchanged(&*boards, &before, "the system's calls").await
}

async fn agent_without_a_board_is_unknown_actor(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    let (ghost, refusal) = (id(GHOST), Refusal::UnknownActor(id(GHOST)));
    let at = Timestamp(7);
    let calls = [
        (
            "read the global board",
            out(boards.read(&agent(GHOST), &BoardId::Global).await).map(drop),
        ),
        (
            "read bottom-1's board",
            out(boards.read(&agent(GHOST), &board("bottom-1")).await).map(drop),
        ),
        (
            "read its own missing board",
            out(boards.read(&agent(GHOST), &board(GHOST)).await).map(drop),
        ),
        (
            "write its own missing board",
            out(boards.write(&ghost, &board(GHOST), "x".into(), at).await).map(drop),
        ),
        (
            "write bottom-1's board",
            out(boards.write(&ghost, &board("bottom-1"), "x".into(), at).await).map(drop),
        ),
        (
            "append to the global board",
            out(boards.append(&ghost, &BoardId::Global, "x", at).await).map(drop),
        ),
        ("list boards", out(boards.list(&agent(GHOST)).await).map(drop)),
    ];
    for (what, got) in calls {
        same(format!("{GHOST} (no board) tries to {what}"), got, Err(refusal.clone()))?;
    }
    unchanged(&*boards, &before, format!("{GHOST}'s calls")).await
}

async fn missing_board_is_unknown_board(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    let (ghost, refusal) = (board(GHOST), Refusal::UnknownBoard(board(GHOST)));
    let at = Timestamp(8);
    let calls = [
        ("system reads it", out(boards.read(&Actor::System, &ghost).await).map(drop)),
        ("top-1 reads it", out(boards.read(&agent("top-1"), &ghost).await).map(drop)),
        ("bottom-1 reads it", out(boards.read(&agent("bottom-1"), &ghost).await).map(drop)),
        (
            "top-1 writes it",
            out(boards.write(&id("top-1"), &ghost, "x".into(), at).await).map(drop),
        ),
        ("mid-1 appends to it", out(boards.append(&id("mid-1"), &ghost, "x", at).await).map(drop)),
    ];
    for (what, got) in calls {
        same(format!("{GHOST} has no board; {what}"), got, Err(refusal.clone()))?;
    }
    unchanged(&*boards, &before, format!("the calls on {GHOST}'s board")).await
}

async fn too_large_content_is_refused(cx: &Cx<'_>) -> Checked {
    let boards = cx.factory.fresh().await;
    let before = team(&*boards).await?;
    let limit = cx.limit;
    let (who, mine, at) = (id("mid-1"), board("mid-1"), Timestamp(9));
    let too_large = |board: &BoardId, size| Refusal::TooLarge { board: board.clone(), size, limit };

    // The policy is checked before the size.
    same(
        "bottom-1 writes too much on mid-1's board",
        out(boards.write(&id("bottom-1"), &mine, "x".repeat(limit + 1), at).await),
        Err(denied(&agent("bottom-1"), BoardAccess::Write, &mine)),
    )?;
    same(
        "top-1 writes too much on the global board",
        out(boards.write(&id("top-1"), &BoardId::Global, "x".repeat(limit + 1), at).await),
        Err(denied(&agent("top-1"), BoardAccess::Write, &BoardId::Global)),
    )?;
    same(
        "mid-1 writes one byte over the limit",
        out(boards.write(&who, &mine, "x".repeat(limit + 1), at).await),
        Err(too_large(&mine, limit + 1)),
    )?;
    unchanged(&*boards, &before, "the refused large writes").await?;

    // Exactly the limit fits; the newline an append adds counts.
    let full = "x".repeat(limit);
    same(
        "mid-1 writes exactly the limit",
        out(boards.write(&who, &mine, full.clone(), at).await),
        Ok(2),
    )?;
    let after_full = list_all(&*boards).await?;
    same("mid-1's full board", find(&after_full, "mid-1").map(|b| b.content.len()), Ok(limit))?;
    same(
        "mid-1 appends an empty line to a full board",
        out(boards.append(&who, &mine, "", at).await),
        Err(too_large(&mine, limit + 1)),
    )?;
    unchanged(&*boards, &after_full, "the refused append to a full board").await?;
    let ends_in_newline = format!("{}\n", "x".repeat(limit - 1));
    same(
        "mid-1 writes the limit ending in a newline",
        out(boards.write(&who, &mine, ends_in_newline, at).await),
        Ok(3),
    )?;
    same(
        "mid-1 appends nothing after the newline",
        out(boards.append(&who, &mine, "", at).await),
        Ok(4),
    )?;

    let global = BoardId::Global;
    same(
        "top-1 appends to the global board",
        out(boards.append(&id("top-1"), &global, "g", at).await),
        Ok(1),
    )?;
    let before_global = list_all(&*boards).await?;
    same(
        "bottom-2 appends one byte too many to the global board",
        out(boards.append(&id("bottom-2"), &global, &"y".repeat(limit - 1), at).await),
        Err(too_large(&global, limit + 1)),
    )?;
    unchanged(&*boards, &before_global, "the refused append to the global board").await?;
    same(
        "bottom-2 fills the global board",
        out(boards.append(&id("bottom-2"), &global, &"y".repeat(limit - 2), at).await),
        Ok(2),
    )
}

async fn acknowledged_changes_survive_a_restart(cx: &Cx<'_>) -> Checked {
    if !cx.durable {
        return Ok(());
    }
    let boards = cx.factory.fresh().await;
    team(&*boards).await?;
    out(boards.append(&id("mid-1"), &BoardId::Global, "one", Timestamp(10)).await)
        .map_err(|e| format!("append: {e:?}"))?;
    out(boards.append(&id("bottom-1"), &board("bottom-1"), "two", Timestamp(11)).await)
        .map_err(|e| format!("append: {e:?}"))?;
    let before = list_all(&*boards).await?;
    let boards = cx
        .factory
        .reopen(boards)
        .await
        .ok_or("reopen returned None, although it returned Some for a fresh backend")?;
    unchanged(&*boards, &before, "a restart").await?;
    same(
        "mid-1 reads top-1's board after a restart",
        out(boards.read(&agent("mid-1"), &board("top-1")).await),
        Err(denied(&agent("mid-1"), BoardAccess::Read, &board("top-1"))),
    )?;
    same(
        "bottom-1 appends after a restart",
        out(boards.append(&id("bottom-1"), &board("bottom-1"), "three", Timestamp(12)).await),
        Ok(3),
    )?;
    same(
        "bottom-1's board after a restart",
        out(boards.read(&agent("bottom-1"), &board("bottom-1")).await),
        Ok(snapshot(
            board("bottom-1"),
            Some(AgentLayer::Bottom),
            "notes of bottom-1\ntwo\nthree",
            3,
            Some(12),
        )),
    )
}

/// Creates [`TEAM`], each agent writing a note on its board, and returns every board.
async fn team(boards: &dyn Whiteboard) -> Result<Vec<BoardSnapshot>, String> {
    for (name, layer) in TEAM {
        out(boards.create(&id(name), layer).await).map_err(|e| format!("create {name}: {e:?}"))?;
        let note = format!("notes of {name}");
        same(
            format!("{name} writes its first note"),
            out(boards.write(&id(name), &board(name), note, Timestamp(1)).await),
            Ok(1),
        )?;
    }
    list_all(boards).await
}

/// Every board, as the system lists it.
async fn list_all(boards: &dyn Whiteboard) -> Result<Vec<BoardSnapshot>, String> {
    out(boards.list(&Actor::System).await).map_err(|e| format!("system lists boards: {e:?}"))
}

/// Checks that every board is as `before`: a refused call changed nothing.
async fn unchanged(
    boards: &dyn Whiteboard,
    before: &[BoardSnapshot],
    after: impl Display,
) -> Checked {
    same(
        format!("every board after {after}"),
        out(boards.list(&Actor::System).await),
        Ok(before.to_vec()),
    )
}

fn find(boards: &[BoardSnapshot], owner: &str) -> Result<BoardSnapshot, String> {
    find_board(boards, &board(owner))
}

fn find_board(boards: &[BoardSnapshot], board: &BoardId) -> Result<BoardSnapshot, String> {
    boards
        .iter()
        .find(|b| b.board == *board)
        .cloned()
        .ok_or_else(|| format!("the system does not list {board}"))
}

fn same<T: PartialEq + Debug>(what: impl Display, got: T, want: T) -> Checked {
    if got == want {
        return Ok(());
    }
    Err(format!("{what}: got {}, expected {}", show(&got), show(&want)))
}

/// `Debug`, cut short: boards can hold a megabyte.
fn show(value: &impl Debug) -> String {
    const MAX_CHARS: usize = 600;
    let text = format!("{value:?}");
    if text.chars().count() <= MAX_CHARS {
        return text;
    }
    format!("{}… (cut)", text.chars().take(MAX_CHARS).collect::<String>())
}

fn out<T, E: Into<Refusal>>(result: Result<T, E>) -> Result<T, Refusal> {
    result.map_err(Into::into)
}

fn denied(actor: &Actor, access: BoardAccess, board: &BoardId) -> Refusal {
    Refusal::PermissionDenied {
        actor: actor.clone(),
        access,
        board: board.clone(),
        rule: denial_rule(actor, access, board),
    }
}

fn id(name: &str) -> AgentId {
    AgentId::new(name)
}

fn agent(name: &str) -> Actor {
    Actor::Agent(id(name))
}

fn board(owner: &str) -> BoardId {
    BoardId::Agent(id(owner))
}

fn empty(board: BoardId, layer: Option<AgentLayer>) -> BoardSnapshot {
    snapshot(board, layer, "", 0, None)
}

fn snapshot(
    board: BoardId,
    layer: Option<AgentLayer>,
    content: &str,
    version: u64,
    at: Option<u64>,
) -> BoardSnapshot {
    BoardSnapshot {
        board,
        layer,
        content: content.to_owned(),
        version,
        updated_at: at.map(Timestamp),
    }
}

// ---------------------------------------------------------------------------------------------
// The model-based property test.

/// The agents of the generated sequences, besides [`GHOST`], who is never created.
const AGENTS: [&str; 5] = ["top-1", "mid-1", "mid-2", "bottom-1", "bottom-2"];
/// The layer each of [`AGENTS`] is usually created under.
const HOME: [AgentLayer; 5] =
    [AgentLayer::Top, AgentLayer::Mid, AgentLayer::Mid, AgentLayer::Bottom, AgentLayer::Bottom];
/// Owner ids `create` must refuse.
const INVALID: [&str; 4] = ["", "system", "global", "no spaces"];
/// Short contents.
const SHORT: [&str; 5] = ["", "a", "note", "line\n", "## Plan\n- step 1"];
/// The longest generated sequence.
const MAX_OPS: usize = 40;

/// One generated operation.
#[derive(Clone, Debug)]
enum Op {
    Create {
        owner: &'static str,
        layer: AgentLayer,
    },
    CreateInvalid {
        owner: &'static str,
    },
    Read {
        reader: Who,
        board: Target,
    },
    Write {
        writer: &'static str,
        board: Target,
        text: Text,
        at: u64,
    },
    Append {
        writer: &'static str,
        board: Target,
        text: Text,
        at: u64,
    },
    List {
        reader: Who,
    },
    /// Reopen the store (durable backends only); everything acknowledged must be there.
    Restart,
}

#[derive(Clone, Copy, Debug)]
enum Who {
    System,
    Agent(&'static str),
}

#[derive(Clone, Copy, Debug)]
enum Target {
    Global,
    Agent(&'static str),
}

/// Content, named rather than spelled out so a failing sequence prints short.
#[derive(Clone, Copy, Debug)]
enum Text {
    Short(&'static str),
    /// Exactly the backend's limit.
    Fill,
    /// One byte over the limit.
    Over,
}

/// What an operation returned, comparable between backend and model.
#[derive(Debug, PartialEq)]
enum Value {
    Board(BoardSnapshot),
    Version(u64),
    Boards(Vec<BoardSnapshot>),
    Restarted,
}

/// The reference: the policy applied straight from [`board_permits`] to a map of boards.
struct Model {
    limit: usize,
    global: BoardSnapshot,
    agents: BTreeMap<AgentId, BoardSnapshot>,
}

fn model_test(runtime: &tokio::runtime::Runtime, cx: &Cx<'_>) {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    // Most sequences start by creating a few boards, so that later calls get past the actor
    // check often enough to reach the policy and the size limit.
    let ops = (vec(create(), 0..=8), vec(op(), 0..=MAX_OPS - 8)).prop_map(|(mut ops, more)| {
        ops.extend(more);
        ops
    });
    let result =
        runner.run(&ops, |ops| runtime.block_on(run_ops(cx, &ops)).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("whiteboard conformance check `model` failed: {e}");
    }
}

/// A create, usually under the agent's home layer.
fn create() -> impl Strategy<Value = Op> {
    (0..HOME.len(), 0..6usize).prop_map(|(i, r)| Op::Create {
        owner: AGENTS[i],
        layer: if r < 3 { HOME[i] } else { AgentLayer::ALL[r - 3] },
    })
}

/// Any operation.
fn op() -> impl Strategy<Value = Op> {
    let name = || prop_oneof![9 => select(AGENTS.to_vec()), 1 => Just(GHOST)];
    let who = prop_oneof![1 => Just(Who::System), 5 => name().prop_map(Who::Agent)];
    let target = || prop_oneof![1 => Just(Target::Global), 3 => name().prop_map(Target::Agent)];
    // Writers mostly aim at their own board, so that writes succeed often enough.
    let aimed = || {
        (name(), 0..4u8, target()).prop_map(|(writer, r, other)| {
            (writer, if r < 2 { Target::Agent(writer) } else { other })
        })
    };
    let text = || {
        prop_oneof![
            10 => select(SHORT.to_vec()).prop_map(Text::Short),
            1 => Just(Text::Fill),
            1 => Just(Text::Over),
        ]
    };
    prop_oneof![
        3 => create(),
        1 => select(INVALID.to_vec()).prop_map(|owner| Op::CreateInvalid { owner }),
        4 => (who.clone(), target()).prop_map(|(reader, board)| Op::Read { reader, board }),
        4 => (aimed(), text(), 0..1_000u64)
            .prop_map(|((writer, board), text, at)| Op::Write { writer, board, text, at }),
        4 => (aimed(), text(), 0..1_000u64)
            .prop_map(|((writer, board), text, at)| Op::Append { writer, board, text, at }),
        1 => who.prop_map(|reader| Op::List { reader }),
        1 => Just(Op::Restart),
    ]
}

/// Applies `ops` to a fresh backend and to the model; `Err` names the first step that differs.
async fn run_ops(cx: &Cx<'_>, ops: &[Op]) -> Checked {
    let mut boards = cx.factory.fresh().await;
    let mut model = Model::new(cx.limit);
    for (step, op) in ops.iter().enumerate() {
        let (got, want) = match *op {
            Op::Create { owner, layer } => (
                out(boards.create(&id(owner), layer).await).map(Value::Board),
                model.create(owner, layer).map(Value::Board),
            ),
            Op::CreateInvalid { owner } => (
                out(boards.create(&id(owner), AgentLayer::Bottom).await).map(Value::Board),
                Err(Refusal::InvalidOwner(owner.to_owned())),
            ),
            Op::Read { reader, board } => (
                out(boards.read(&reader.actor(), &board.id()).await).map(Value::Board),
                model.read(&reader.actor(), &board.id()).map(Value::Board),
            ),
            Op::Write { writer, board, text, at } => {
                let content = text.content(cx.limit);
                (
                    out(boards
                        .write(&id(writer), &board.id(), content.clone(), Timestamp(at))
                        .await)
                    .map(Value::Version),
                    model
                        .change(writer, &board.id(), BoardAccess::Write, &content, at)
                        .map(Value::Version),
                )
            }
            Op::Append { writer, board, text, at } => {
                let content = text.content(cx.limit);
                (
                    out(boards.append(&id(writer), &board.id(), &content, Timestamp(at)).await)
                        .map(Value::Version),
                    model
                        .change(writer, &board.id(), BoardAccess::Append, &content, at)
                        .map(Value::Version),
                )
            }
            Op::List { reader } => (
                out(boards.list(&reader.actor()).await).map(Value::Boards),
                model.list(&reader.actor()).map(Value::Boards),
            ),
            Op::Restart => {
                if cx.durable {
                    boards = cx.factory.reopen(boards).await.ok_or_else(|| {
                        format!(
                            "step {step} ({op:?}): reopen returned None, although it returned \
                             Some for a fresh backend"
                        )
                    })?;
                }
                (Ok(Value::Restarted), Ok(Value::Restarted))
            }
        };
        same(format!("step {step} ({op:?}), the outcome"), got, want)?;
        same(
            format!("step {step} ({op:?}), every board afterwards"),
            out(boards.list(&Actor::System).await),
            model.list(&Actor::System),
        )?;
    }
    Ok(())
}

impl Who {
    fn actor(self) -> Actor {
        match self {
            Who::System => Actor::System,
            Who::Agent(name) => agent(name),
        }
    }
}

impl Target {
    fn id(self) -> BoardId {
        match self {
            Target::Global => BoardId::Global,
            Target::Agent(owner) => board(owner),
        }
    }
}

impl Text {
    fn content(self, limit: usize) -> String {
        match self {
            Text::Short(text) => text.to_owned(),
            Text::Fill => "f".repeat(limit),
            Text::Over => "o".repeat(limit + 1),
        }
    }
}

impl Model {
    fn new(limit: usize) -> Self {
        Self { limit, global: empty(BoardId::Global, None), agents: BTreeMap::new() }
    }

    fn create(&mut self, owner: &str, layer: AgentLayer) -> Result<BoardSnapshot, Refusal> {
        let owner = id(owner);
        match self.agents.get(&owner) {
            Some(b) if b.layer == Some(layer) => Ok(b.clone()),
            Some(b) => Err(Refusal::LayerMismatch {
                owner,
                existing: b.layer.unwrap_or(layer),
                requested: layer,
            }),
            None => {
                let b = empty(BoardId::Agent(owner.clone()), Some(layer));
                self.agents.insert(owner, b.clone());
                Ok(b)
            }
        }
    }

    fn read(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, Refusal> {
        let principal = self.principal(reader)?;
        let b = self.board(board)?;
        if !board_permits(&principal, BoardAccess::Read, board, b.layer) {
            return Err(denied(reader, BoardAccess::Read, board));
        }
        Ok(b.clone())
    }

    /// A write or an append.
    fn change(
        &mut self,
        writer: &str,
        board: &BoardId,
        access: BoardAccess,
        content: &str,
        at: u64,
    ) -> Result<u64, Refusal> {
        let actor = agent(writer);
        let principal = self.principal(&actor)?;
        let limit = self.limit;
        let b = self.board_mut(board)?;
        if !board_permits(&principal, access, board, b.layer) {
            return Err(denied(&actor, access, board));
        }
        let new = match access {
            BoardAccess::Append if !b.content.is_empty() && !b.content.ends_with('\n') => {
                format!("{}\n{content}", b.content)
            }
            BoardAccess::Append => format!("{}{content}", b.content),
            _ => content.to_owned(),
        };
        if new.len() > limit {
            return Err(Refusal::TooLarge { board: board.clone(), size: new.len(), limit });
        }
        b.content = new;
        b.version += 1;
        b.updated_at = Some(Timestamp(at));
        Ok(b.version)
    }

    fn list(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, Refusal> {
        let principal = self.principal(reader)?;
        Ok(std::iter::once(&self.global)
            .chain(self.agents.values())
            .filter(|b| board_permits(&principal, BoardAccess::Read, &b.board, b.layer))
            .cloned()
            .collect())
    }

    fn principal(&self, actor: &Actor) -> Result<Principal, Refusal> {
        match actor {
            Actor::System => Ok(Principal::System),
            Actor::Agent(id) => match self.agents.get(id).and_then(|b| b.layer) {
                Some(layer) => Ok(Principal::Agent { id: id.clone(), layer }),
                None => Err(Refusal::UnknownActor(id.clone())),
            },
        }
    }

    fn board(&self, board: &BoardId) -> Result<&BoardSnapshot, Refusal> {
        match board {
            BoardId::Global => Ok(&self.global),
            BoardId::Agent(owner) => {
                self.agents.get(owner).ok_or_else(|| Refusal::UnknownBoard(board.clone()))
            }
        }
    }

    fn board_mut(&mut self, board: &BoardId) -> Result<&mut BoardSnapshot, Refusal> {
        match board {
            BoardId::Global => Ok(&mut self.global),
            BoardId::Agent(owner) => {
                self.agents.get_mut(owner).ok_or_else(|| Refusal::UnknownBoard(board.clone()))
            }
        }
    }
}
