//! Named conformance scenarios: one per guarantee and per refusal in the `MessageBus` docs.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp, check_agent_id};

use super::BusFactory;
use crate::{InboxError, MessageBus, RegisterError, SendError};

/// The outcome of one scenario: `Err` says what differed from the contract.
type Check = Result<(), String>;

/// Runs every scenario, each on a fresh store; panics with the name of the first that fails.
pub(super) async fn run_all<F: BusFactory>(factory: &F, durable: bool) {
    run(
        "register is idempotent and lists agents sorted",
        register_is_idempotent(factory.fresh().await),
    )
    .await;
    run("register refuses invalid ids", register_refuses_invalid_ids(factory.fresh().await)).await;
    run(
        "unregister refuses an agent that is not registered",
        unregister_refuses_unknown(factory.fresh().await),
    )
    .await;
    run(
        "unregister_many unregisters each agent once and skips the rest",
        unregister_many_skips_unregistered(factory.fresh().await),
    )
    .await;
    run("one inbox keeps send order; take 0 takes nothing", order_is_kept(factory.fresh().await))
        .await;
    run("send returns how many inboxes it reached", send_counts_inboxes(factory.fresh().await))
        .await;
    run("send to an unknown agent is refused", unknown_recipient_is_refused(factory.fresh().await))
        .await;
    run(
        "an unregistered agent keeps its messages and its inbox is closed",
        unregistered_agent_keeps_messages(factory.fresh().await),
    )
    .await;
    run(
        "broadcast reaches every registered agent but the sender",
        broadcast_reaches_all_but_sender(factory.fresh().await),
    )
    .await;
    run("broadcast as a sender is refused", broadcast_sender_is_refused(factory.fresh().await))
        .await;
    run("broadcast is not an inbox", broadcast_is_not_an_inbox(factory.fresh().await)).await;
    run("the system inbox always exists", system_inbox_always_exists(factory.fresh().await)).await;
    run("a taken message is not taken again", taken_is_not_taken_again(factory.fresh().await))
        .await;
    run("an acknowledged message is gone for good", ack_removes_for_good(factory.fresh().await))
        .await;
    run(
        "ack ignores pending messages and other inboxes",
        ack_ignores_pending_and_other_inboxes(factory.fresh().await),
    )
    .await;
    run(
        "release puts messages back ahead, in order",
        release_puts_back_in_order(factory.fresh().await),
    )
    .await;
    run("the bus does not deduplicate by id", no_dedup_by_id(factory.fresh().await)).await;
    run("a message arrives unchanged", message_arrives_unchanged(factory.fresh().await)).await;
    run(
        "concurrent senders keep their own order",
        concurrent_senders_keep_order(factory.fresh().await),
    )
    .await;
    run_batches(factory).await;
    if let Some(bus) = factory.fresh_with_capacity(2).await {
        run("a full inbox refuses a send and changes nothing", full_inbox_refuses(bus)).await;
    }
    if let Some(bus) = factory.fresh_with_capacity(2).await {
        run("broadcast delivers to none if any inbox is full", broadcast_all_or_nothing(bus)).await;
    }
    if durable {
        run(
            "a restart keeps registrations and messages, in-flight back to pending",
            restart_keeps_messages(factory, factory.fresh().await),
        )
        .await;
        run(
            "a restart keeps every message of a send_many",
            restart_keeps_batch(factory, factory.fresh().await),
        )
        .await;
    }
}

/// The scenarios of `send_many`.
async fn run_batches<F: BusFactory>(factory: &F) {
    run(
        "send_many delivers each message once, in order per inbox",
        send_many_keeps_order(factory.fresh().await),
    )
    .await;
    run("send_many of nothing does nothing", send_many_empty(factory.fresh().await)).await;
    run(
        "a refused send_many delivers nothing of its batch",
        send_many_refused_stores_nothing(factory.fresh().await),
    )
    .await;
    run(
        "concurrent send_many batches keep their order and do not interleave",
        concurrent_batches_keep_order(factory.fresh().await),
    )
    .await;
    if let Some(bus) = factory.fresh_with_capacity(2).await {
        run(
            "send_many counts its own messages against capacity, all or nothing",
            send_many_full_all_or_nothing(bus),
        )
        .await;
    }
}

async fn run(name: &str, check: impl Future<Output = Check>) {
    if let Err(failure) = check.await {
        panic!("message-bus conformance, scenario `{name}`: {failure}");
    }
}

// ---------------------------------------------------------------------------------------------
// Registration

async fn register_is_idempotent(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = (agent("agent-a"), agent("agent-b"), agent("agent-c"));
    eq(ok(bus.registered().await, "registered")?, vec![], "registered on a fresh bus")?;
    eq(ok(bus.is_registered(&a).await, "is_registered")?, false, "is_registered on a fresh bus")?;
    for id in [&c, &a, &b, &a] {
        ok(bus.register(id).await, "register")?;
    }
    eq(
        ok(bus.registered().await, "registered")?,
        vec![a.clone(), b.clone(), c.clone()],
        "registered",
    )?;
    eq(ok(bus.is_registered(&a).await, "is_registered")?, true, "is_registered(agent-a)")?;
    eq(ok(bus.is_registered(&ghost()).await, "is_registered")?, false, "is_registered(ghost)")?;

    ok(bus.send(msg(1, &b, &a)).await, "send")?;
    ok(bus.register(&a).await, "register again")?;
    eq(ok(bus.pending(&inbox(&a)).await, "pending")?, 1, "pending after registering again")?;
    eq(
        ids(&ok(bus.take(&inbox(&a), 10).await, "take")?),
        vec![id(1)],
        "take after registering again",
    )
}

async fn register_refuses_invalid_ids(bus: Arc<dyn MessageBus>) -> Check {
    let long = "x".repeat(agent_state::MAX_AGENT_ID_LEN + 1);
    for raw in ["", "system", "broadcast", "global", "has space", "a/b", "é", long.as_str()] {
        let Err(kind) = check_agent_id(raw) else {
            return Err(format!("suite bug: `{raw}` is a valid agent id"));
        };
        let before = snapshot(&bus, &[]).await;
        match bus.register(&agent(raw)).await {
            Err(RegisterError::InvalidAgent { agent, reason })
                if agent == raw && reason == kind.to_string() => {}
            other => {
                return Err(format!(
                    "register(`{raw}`): expected InvalidAgent {{ agent: {raw:?}, reason: {:?} }}, got {other:?}",
                    kind.to_string()
                ));
            }
        }
        eq(snapshot(&bus, &[]).await, before, &format!("state after refused register(`{raw}`)"))?;
        eq(ok(bus.is_registered(&agent(raw)).await, "is_registered")?, false, "is_registered")?;
    }
    Ok(())
}

async fn unregister_refuses_unknown(bus: Arc<dyn MessageBus>) -> Check {
    let a = agent("agent-a");
    let before = snapshot(&bus, &[]).await;
    expect_unregister_refused(&bus, &ghost()).await?;
    eq(snapshot(&bus, &[]).await, before, "state after refused unregister(ghost)")?;

    ok(bus.register(&a).await, "register")?;
    ok(bus.unregister(&a).await, "unregister")?;
    eq(ok(bus.registered().await, "registered")?, vec![], "registered after unregister")?;
    let before = snapshot(&bus, &[]).await;
    expect_unregister_refused(&bus, &a).await?;
    eq(snapshot(&bus, &[]).await, before, "state after refused second unregister")
}

async fn unregister_many_skips_unregistered(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    ok(bus.send(msg(1, &c, &a)).await, "send")?;
    ok(bus.send(msg(2, &c, &b)).await, "send")?;
    eq(ok(bus.unregister_many(&[]).await, "unregister_many")?, vec![], "an empty batch")?;
    eq(ok(bus.registered().await, "registered")?, vec![a.clone(), b.clone(), c.clone()], "after")?;
    let batch = [a.clone(), ghost(), b.clone(), a.clone()];
    eq(
        ok(bus.unregister_many(&batch).await, "unregister_many")?,
        vec![true, false, true, false],
        "unregister_many(a, ghost, b, a)",
    )?;
    eq(ok(bus.registered().await, "registered")?, vec![c.clone()], "registered after the batch")?;
    expect_unknown_recipient(&bus, msg(3, &c, &a), &a).await?;
    expect_unregister_refused(&bus, &b).await?;
    // Each keeps its messages for when it registers again.
    ok(bus.register(&a).await, "register again")?;
    eq(ids(&ok(bus.take(&inbox(&a), 10).await, "take")?), vec![id(1)], "a's inbox")?;
    eq(
        ok(bus.unregister_many(std::slice::from_ref(&b)).await, "unregister_many")?,
        vec![false],
        "b again",
    )
}

async fn expect_unregister_refused(bus: &Arc<dyn MessageBus>, who: &AgentId) -> Check {
    match bus.unregister(who).await {
        Err(RegisterError::NotRegistered { agent }) if agent == *who => Ok(()),
        other => Err(format!(
            "unregister({who}): expected NotRegistered {{ agent: {who} }}, got {other:?}"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Sending and order

async fn order_is_kept(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    for (n, from) in [(1, &a), (4, &b), (2, &a), (5, &b), (3, &a)] {
        eq(ok(bus.send(msg(n, from, &c)).await, "send")?, 1, "send to one agent")?;
    }
    let c_inbox = inbox(&c);
    eq(ok(bus.take(&c_inbox, 0).await, "take 0")?, vec![], "take with max 0")?;
    eq(ok(bus.pending(&c_inbox).await, "pending")?, 5, "pending after take 0")?;
    eq(ids(&ok(bus.take(&c_inbox, 2).await, "take")?), vec![id(1), id(4)], "first take")?;
    eq(ids(&ok(bus.take(&c_inbox, 10).await, "take")?), vec![id(2), id(5), id(3)], "second take")?;
    eq(ok(bus.take(&c_inbox, 10).await, "take")?, vec![], "third take")
}

async fn send_counts_inboxes(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    eq(ok(bus.send(msg(1, &a, &b)).await, "send")?, 1, "send to an agent")?;
    eq(ok(bus.send(msg(2, &a, Address::System)).await, "send")?, 1, "send to system")?;
    eq(ok(bus.send(msg(3, &a, Address::Broadcast)).await, "send")?, 2, "broadcast from an agent")?;
    eq(
        ok(bus.send(msg(4, Address::System, Address::Broadcast)).await, "send")?,
        3,
        "broadcast from system",
    )?;
    eq(
        ok(bus.send(msg(5, ghost(), Address::Broadcast)).await, "send")?,
        3,
        "broadcast from an unregistered agent",
    )?;
    let counts = snapshot(&bus, &[inbox(&a), inbox(&b), inbox(&c), Address::System]).await;
    let want = [2, 4, 3, 1];
    for ((address, got), want) in counts.pending.iter().zip(want) {
        eq(got.clone(), Ok(want), &format!("pending({address})"))?;
    }
    Ok(())
}

async fn unknown_recipient_is_refused(bus: Arc<dyn MessageBus>) -> Check {
    let a = agent("agent-a");
    ok(bus.register(&a).await, "register")?;
    ok(bus.send(msg(1, &a, &a)).await, "send")?;
    let watched = [inbox(&a), Address::System];
    let before = snapshot(&bus, &watched).await;
    expect_unknown_recipient(&bus, msg(2, &a, ghost()), &ghost()).await?;
    expect_unknown_recipient(&bus, msg(3, Address::System, ghost()), &ghost()).await?;
    eq(snapshot(&bus, &watched).await, before, "state after refused sends")?;
    eq(ids(&ok(bus.take(&inbox(&a), 10).await, "take")?), vec![id(1)], "take after refused sends")
}

async fn unregistered_agent_keeps_messages(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b) = (agent("agent-a"), agent("agent-b"));
    ok(bus.register(&a).await, "register")?;
    ok(bus.register(&b).await, "register")?;
    ok(bus.send(msg(1, &a, &b)).await, "send")?;
    ok(bus.send(msg(2, &a, &b)).await, "send")?;
    eq(ids(&ok(bus.take(&inbox(&b), 1).await, "take")?), vec![id(1)], "take before unregister")?;
    ok(bus.unregister(&b).await, "unregister")?;

    let before = snapshot(&bus, &[inbox(&a), inbox(&b), Address::System]).await;
    expect_unknown_recipient(&bus, msg(3, &a, &b), &b).await?;
    let b_inbox = inbox(&b);
    expect_not_registered("take", bus.take(&b_inbox, 10).await, &b)?;
    expect_not_registered("ack", bus.ack(&b_inbox, &[id(1)]).await, &b)?;
    expect_not_registered("release", bus.release(&b_inbox).await, &b)?;
    expect_not_registered("pending", bus.pending(&b_inbox).await, &b)?;
    eq(
        ok(bus.send(msg(4, &a, Address::Broadcast)).await, "send")?,
        0,
        "broadcast skips the unregistered agent",
    )?;
    eq(
        snapshot(&bus, &[inbox(&a), inbox(&b), Address::System]).await,
        before,
        "state after refused calls",
    )?;
    eq(ok(bus.is_registered(&b).await, "is_registered")?, false, "is_registered after unregister")?;

    ok(bus.register(&b).await, "register again")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 1, "pending after registering again")?;
    eq(
        ok(bus.release(&b_inbox).await, "release")?,
        1,
        "release after registering again (the refused ack kept message 1 in flight)",
    )?;
    eq(
        ids(&ok(bus.take(&b_inbox, 10).await, "take")?),
        vec![id(1), id(2)],
        "take after registering again",
    )
}

// ---------------------------------------------------------------------------------------------
// Broadcast

async fn broadcast_reaches_all_but_sender(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let m = msg(1, &a, Address::Broadcast);
    eq(ok(bus.send(m.clone()).await, "send")?, 2, "broadcast count")?;
    let counts = snapshot(&bus, &[inbox(&a), inbox(&b), inbox(&c), Address::System]).await;
    for ((address, got), want) in counts.pending.iter().zip([0, 1, 1, 0]) {
        eq(got.clone(), Ok(want), &format!("pending({address}) after broadcast"))?;
    }
    eq(ok(bus.take(&inbox(&b), 10).await, "take")?, vec![m.clone()], "agent-b's copy")?;
    eq(ok(bus.take(&inbox(&c), 10).await, "take")?, vec![m], "agent-c's copy")?;

    let lonely = agent("agent-z");
    ok(bus.unregister(&b).await, "unregister")?;
    ok(bus.unregister(&c).await, "unregister")?;
    eq(
        ok(bus.send(msg(2, &a, Address::Broadcast)).await, "send")?,
        0,
        "broadcast with no other agent",
    )?;
    ok(bus.register(&lonely).await, "register")?;
    eq(
        ok(bus.send(msg(3, &lonely, Address::Broadcast)).await, "send")?,
        1,
        "broadcast to the one other agent",
    )?;
    eq(ids(&ok(bus.take(&inbox(&a), 10).await, "take")?), vec![id(3)], "agent-a's inbox")
}

async fn broadcast_sender_is_refused(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let watched = [inbox(&a), inbox(&b), inbox(&c), Address::System];
    let before = snapshot(&bus, &watched).await;
    for (n, to) in [(1, inbox(&b)), (2, Address::System), (3, Address::Broadcast)] {
        match bus.send(msg(n, Address::Broadcast, to.clone())).await {
            Err(SendError::InvalidSender { id: got }) if got == id(n) => {}
            other => {
                return Err(format!(
                    "send from broadcast to {to}: expected InvalidSender {{ id: {} }}, got {other:?}",
                    id(n)
                ));
            }
        }
    }
    eq(snapshot(&bus, &watched).await, before, "state after refused sends")
}

async fn broadcast_is_not_an_inbox(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    ok(bus.send(msg(1, &a, Address::Broadcast)).await, "send")?;
    let watched = [inbox(&a), inbox(&b), inbox(&c), Address::System];
    let before = snapshot(&bus, &watched).await;
    let all = Address::Broadcast;
    expect_not_an_inbox("take", bus.take(&all, 10).await)?;
    expect_not_an_inbox("ack", bus.ack(&all, &[id(1)]).await)?;
    expect_not_an_inbox("release", bus.release(&all).await)?;
    expect_not_an_inbox("pending", bus.pending(&all).await)?;
    eq(snapshot(&bus, &watched).await, before, "state after refused calls")
}

// ---------------------------------------------------------------------------------------------
// The system inbox

async fn system_inbox_always_exists(bus: Arc<dyn MessageBus>) -> Check {
    let system = Address::System;
    eq(ok(bus.pending(&system).await, "pending")?, 0, "pending(system) on a fresh bus")?;
    eq(ok(bus.take(&system, 10).await, "take")?, vec![], "take(system) on a fresh bus")?;
    eq(ok(bus.ack(&system, &[id(9)]).await, "ack")?, 0, "ack(system) on a fresh bus")?;
    eq(ok(bus.release(&system).await, "release")?, 0, "release(system) on a fresh bus")?;
    eq(
        ok(bus.send(msg(1, ghost(), Address::System)).await, "send")?,
        1,
        "send from an unregistered agent to system",
    )?;
    eq(
        ok(bus.send(msg(2, Address::System, Address::System)).await, "send")?,
        1,
        "send from system to system",
    )?;
    eq(ids(&ok(bus.take(&system, 10).await, "take")?), vec![id(1), id(2)], "take(system)")?;
    eq(ok(bus.ack(&system, &[id(1), id(2)]).await, "ack")?, 2, "ack(system)")?;
    eq(ok(bus.registered().await, "registered")?, vec![], "system is not a registered agent")
}

// ---------------------------------------------------------------------------------------------
// Take, ack, release

async fn taken_is_not_taken_again(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, _) = register3(&bus).await?;
    for n in 1..=3 {
        ok(bus.send(msg(n, &a, &b)).await, "send")?;
    }
    let b_inbox = inbox(&b);
    eq(ids(&ok(bus.take(&b_inbox, 2).await, "take")?), vec![id(1), id(2)], "first take")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 1, "pending after first take")?;
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), vec![id(3)], "second take")?;
    eq(ok(bus.take(&b_inbox, 10).await, "take")?, vec![], "third take")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 0, "pending after taking all")
}

async fn ack_removes_for_good(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, _) = register3(&bus).await?;
    for n in 1..=3 {
        ok(bus.send(msg(n, &a, &b)).await, "send")?;
    }
    let b_inbox = inbox(&b);
    ok(bus.take(&b_inbox, 3).await, "take")?;
    eq(ok(bus.ack(&b_inbox, &[id(2)]).await, "ack")?, 1, "ack one in-flight message")?;
    eq(ok(bus.ack(&b_inbox, &[id(2)]).await, "ack")?, 0, "ack the same id twice")?;
    eq(ok(bus.ack(&b_inbox, &[id(99)]).await, "ack")?, 0, "ack an unknown id")?;
    eq(ok(bus.ack(&b_inbox, &[]).await, "ack")?, 0, "ack no id")?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 2, "release after the ack")?;
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), vec![id(1), id(3)], "take after release")?;
    eq(
        ok(bus.ack(&b_inbox, &[id(3), id(99), id(1)]).await, "ack")?,
        2,
        "ack in any order, with an unknown id",
    )?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 0, "release after acking all")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 0, "pending after acking all")?;
    eq(ok(bus.take(&b_inbox, 10).await, "take")?, vec![], "take after acking all")
}

async fn ack_ignores_pending_and_other_inboxes(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    eq(ok(bus.send(msg(1, Address::System, Address::Broadcast)).await, "send")?, 3, "broadcast")?;
    ok(bus.send(msg(2, &a, &b)).await, "send")?;
    let (b_inbox, c_inbox) = (inbox(&b), inbox(&c));
    eq(ids(&ok(bus.take(&b_inbox, 1).await, "take")?), vec![id(1)], "take(agent-b)")?;
    eq(ok(bus.ack(&b_inbox, &[id(2)]).await, "ack")?, 0, "ack of a pending message")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 1, "pending after acking a pending message")?;
    eq(ids(&ok(bus.take(&c_inbox, 1).await, "take")?), vec![id(1)], "take(agent-c)")?;
    eq(ok(bus.ack(&b_inbox, &[id(1)]).await, "ack")?, 1, "ack agent-b's copy")?;
    eq(ok(bus.release(&c_inbox).await, "release")?, 1, "agent-c's copy is still in flight")?;
    eq(
        ids(&ok(bus.take(&c_inbox, 10).await, "take")?),
        vec![id(1)],
        "take(agent-c) after release",
    )?;
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), vec![id(2)], "take(agent-b) after ack")?;
    eq(ok(bus.pending(&inbox(&a)).await, "pending")?, 1, "agent-a's copy is untouched")
}

async fn release_puts_back_in_order(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, _) = register3(&bus).await?;
    let b_inbox = inbox(&b);
    eq(ok(bus.release(&b_inbox).await, "release")?, 0, "release with nothing in flight")?;
    for n in 1..=3 {
        ok(bus.send(msg(n, &a, &b)).await, "send")?;
    }
    eq(ids(&ok(bus.take(&b_inbox, 2).await, "take")?), vec![id(1), id(2)], "first take")?;
    ok(bus.send(msg(4, &a, &b)).await, "send")?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 2, "release")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 4, "pending after release")?;
    let all = vec![id(1), id(2), id(3), id(4)];
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), all, "take after release")?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 4, "release all")?;
    eq(ids(&ok(bus.take(&b_inbox, 1).await, "take")?), vec![id(1)], "take one")?;
    eq(ids(&ok(bus.take(&b_inbox, 1).await, "take")?), vec![id(2)], "take another")?;
    eq(ok(bus.ack(&b_inbox, &[id(1)]).await, "ack")?, 1, "ack the first")?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 1, "release the second")?;
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), vec![id(2), id(3), id(4)], "take the rest")
}

async fn no_dedup_by_id(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, _) = register3(&bus).await?;
    let b_inbox = inbox(&b);
    eq(ok(bus.send(msg(1, &a, &b)).await, "send")?, 1, "first send")?;
    eq(ok(bus.send(msg(1, &a, &b)).await, "send")?, 1, "same id again")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 2, "pending after sending one id twice")?;
    eq(ids(&ok(bus.take(&b_inbox, 1).await, "take")?), vec![id(1)], "take one")?;
    eq(ok(bus.ack(&b_inbox, &[id(1)]).await, "ack")?, 1, "ack removes the one in flight")?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 1, "the pending copy stays")?;
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), vec![id(1)], "take the other copy")
}

async fn message_arrives_unchanged(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, _) = register3(&bus).await?;
    let mut content = serde_json::Map::new();
    content.insert("task".into(), "write hello.txt".into());
    content.insert("steps".into(), serde_json::Value::from(vec![1, 2, 3]));
    content.insert("nested".into(), serde_json::Value::from(vec![serde_json::Value::Null]));
    let m = Message::new(
        id(7),
        &a,
        &b,
        MessageKind::PeerHelpRequest,
        serde_json::Value::Object(content),
        Timestamp(1_700_000_000_123),
    )
    .in_reply_to(id(6));
    ok(bus.send(m.clone()).await, "send")?;
    eq(ok(bus.take(&inbox(&b), 10).await, "take")?, vec![m], "the message taken")?;
    let warning = Message::new(
        id(8),
        Address::System,
        &a,
        MessageKind::Warning,
        serde_json::Value::from("missed heartbeat"),
        Timestamp(0),
    );
    ok(bus.send(warning.clone()).await, "send")?;
    eq(ok(bus.take(&inbox(&a), 10).await, "take")?, vec![warning], "the warning taken")?;
    // Every kind, the operator's commands and their answers (to and from `system`) among them.
    let mut sent = Vec::new();
    for (n, kind) in (100..).zip(MessageKind::ALL) {
        let to = if kind == MessageKind::CommandOutcome { Address::System } else { inbox(&b) };
        let from = if kind == MessageKind::OperatorCommand { Address::System } else { inbox(&a) };
        let m = Message::new(id(n), from, to, kind, serde_json::json!({"n": n}), Timestamp(0))
            .in_reply_to(id(n - 1));
        ok(bus.send(m.clone()).await, "send")?;
        sent.push(m);
    }
    let mut taken = ok(bus.take(&inbox(&b), 100).await, "take")?;
    taken.extend(ok(bus.take(&Address::System, 100).await, "take")?);
    let mut expected: Vec<Message> =
        sent.iter().filter(|m| m.to != Address::System).cloned().collect();
    expected.extend(sent.iter().filter(|m| m.to == Address::System).cloned());
    eq(taken, expected, "a message of every kind taken")
}

async fn concurrent_senders_keep_order(bus: Arc<dyn MessageBus>) -> Check {
    const SENDERS: u128 = 4;
    const EACH: u128 = 50;
    let target = agent("agent-target");
    ok(bus.register(&target).await, "register")?;
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let (bus, target) = (Arc::clone(&bus), target.clone());
        tasks.push(tokio::spawn(async move {
            let from = agent(&format!("sender-{s}"));
            for n in 0..EACH {
                ok(bus.send(msg(s * 1_000 + n, &from, &target)).await, "send")?;
                tokio::task::yield_now().await;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|err| format!("sender task failed: {err}"))??;
    }
    let taken = ok(bus.take(&inbox(&target), 1_000).await, "take")?;
    eq(taken.len(), (SENDERS * EACH) as usize, "messages taken")?;
    for s in 0..SENDERS {
        let from = Address::Agent(agent(&format!("sender-{s}")));
        let got: Vec<MessageId> = taken.iter().filter(|m| m.from == from).map(|m| m.id).collect();
        let want: Vec<MessageId> = (0..EACH).map(|n| id(s * 1_000 + n)).collect();
        eq(got, want, &format!("order of sender-{s}'s messages"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Batches (send_many)

async fn send_many_keeps_order(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let batch = vec![
        msg(1, &a, &b),
        msg(2, &a, &c),
        msg(3, &a, &b),
        msg(4, &a, Address::System),
        msg(5, &a, Address::Broadcast),
        msg(6, &c, &b),
        msg(7, Address::System, &a),
    ];
    eq(
        ok(bus.send_many(batch.clone()).await, "send_many")?,
        vec![1, 1, 1, 1, 2, 1, 1],
        "inboxes each message of the batch reached",
    )?;
    let counts = snapshot(&bus, &[inbox(&a), inbox(&b), inbox(&c), Address::System]).await;
    for ((address, got), want) in counts.pending.iter().zip([1, 4, 2, 1]) {
        eq(got.clone(), Ok(want), &format!("pending({address}) after send_many"))?;
    }
    let b_got = ok(bus.take(&inbox(&b), 10).await, "take")?;
    let b_want = vec![batch[0].clone(), batch[2].clone(), batch[4].clone(), batch[5].clone()];
    eq(b_got, b_want, "agent-b's messages, as sent and in batch order")?;
    eq(ids(&ok(bus.take(&inbox(&c), 10).await, "take")?), vec![id(2), id(5)], "agent-c's")?;
    eq(ids(&ok(bus.take(&inbox(&a), 10).await, "take")?), vec![id(7)], "agent-a's")?;
    eq(ids(&ok(bus.take(&Address::System, 10).await, "take")?), vec![id(4)], "system's")?;
    for address in [inbox(&a), inbox(&b), inbox(&c), Address::System] {
        eq(ok(bus.take(&address, 10).await, "take")?, vec![], &format!("{address} again"))?;
    }
    // A batch after single sends, and a single send after it, keep the order of the calls.
    ok(bus.send(msg(8, &a, &b)).await, "send")?;
    eq(
        ok(bus.send_many(vec![msg(9, &a, &b), msg(10, &a, &b)]).await, "send_many")?,
        vec![1, 1],
        "a batch to one inbox",
    )?;
    ok(bus.send(msg(11, &a, &b)).await, "send")?;
    eq(
        ids(&ok(bus.take(&inbox(&b), 10).await, "take")?),
        vec![id(8), id(9), id(10), id(11)],
        "sends and a batch, in call order",
    )
}

async fn send_many_empty(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    ok(bus.send(msg(1, &a, &b)).await, "send")?;
    let watched = [inbox(&a), inbox(&b), inbox(&c), Address::System];
    let before = snapshot(&bus, &watched).await;
    eq(ok(bus.send_many(Vec::new()).await, "send_many")?, vec![], "send_many of nothing")?;
    eq(snapshot(&bus, &watched).await, before, "state after send_many of nothing")
}

async fn send_many_refused_stores_nothing(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    ok(bus.send(msg(1, &a, &b)).await, "send")?;
    let watched = [inbox(&a), inbox(&b), inbox(&c), Address::System];
    let before = snapshot(&bus, &watched).await;

    // An unknown recipient last: everything before it (an agent, system, a broadcast) is
    // taken back or never stored.
    let batch = vec![
        msg(2, &a, &b),
        msg(3, &a, Address::System),
        msg(4, &a, Address::Broadcast),
        msg(5, &a, ghost()),
        msg(6, &a, &c),
    ];
    match bus.send_many(batch).await {
        Err(SendError::UnknownRecipient { id: got, recipient, .. })
            if got == id(5) && recipient == ghost() => {}
        other => {
            return Err(format!(
                "send_many with message 5 to ghost: expected UnknownRecipient {{ id: {}, recipient: ghost }}, got {other:?}",
                id(5)
            ));
        }
    }
    eq(
        snapshot(&bus, &watched).await,
        before.clone(),
        "state after a batch refused for its recipient",
    )?;

    // `broadcast` as a sender in the middle.
    let batch = vec![msg(7, &a, &b), msg(8, Address::Broadcast, &c), msg(9, &a, &c)];
    match bus.send_many(batch).await {
        Err(SendError::InvalidSender { id: got }) if got == id(8) => {}
        other => {
            return Err(format!(
                "send_many with message 8 from broadcast: expected InvalidSender {{ id: {} }}, got {other:?}",
                id(8)
            ));
        }
    }
    eq(snapshot(&bus, &watched).await, before, "state after a batch refused for its sender")?;
    eq(ids(&ok(bus.take(&inbox(&b), 10).await, "take")?), vec![id(1)], "agent-b's inbox")?;
    eq(ok(bus.take(&inbox(&c), 10).await, "take")?, vec![], "agent-c's inbox")?;
    eq(ok(bus.take(&Address::System, 10).await, "take")?, vec![], "system's inbox")
}

async fn concurrent_batches_keep_order(bus: Arc<dyn MessageBus>) -> Check {
    const SENDERS: u128 = 4;
    const BATCHES: u128 = 10;
    const EACH: u128 = 5;
    let target = agent("agent-target");
    ok(bus.register(&target).await, "register")?;
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let (bus, target) = (Arc::clone(&bus), target.clone());
        tasks.push(tokio::spawn(async move {
            let from = agent(&format!("sender-{s}"));
            for b in 0..BATCHES {
                let batch: Vec<Message> =
                    (0..EACH).map(|n| msg(s * 1_000 + b * EACH + n, &from, &target)).collect();
                ok(bus.send_many(batch).await, "send_many")?;
                tokio::task::yield_now().await;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|err| format!("sender task failed: {err}"))??;
    }
    let taken = ok(bus.take(&inbox(&target), 1_000).await, "take")?;
    eq(taken.len(), (SENDERS * BATCHES * EACH) as usize, "messages taken")?;
    for s in 0..SENDERS {
        let from = Address::Agent(agent(&format!("sender-{s}")));
        let got: Vec<MessageId> = taken.iter().filter(|m| m.from == from).map(|m| m.id).collect();
        let want: Vec<MessageId> = (0..BATCHES * EACH).map(|n| id(s * 1_000 + n)).collect();
        eq(got, want, &format!("order of sender-{s}'s messages"))?;
    }
    // Each batch arrives in one piece: no other sender's message between its messages.
    for (i, window) in taken.chunks(EACH as usize).enumerate() {
        let first = window[0].id.as_uuid().as_u128();
        let want: Vec<MessageId> = (first..first + EACH).map(id).collect();
        eq(ids(window), want, &format!("batch at position {}", i * EACH as usize))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Capacity (backends that can be built with a given capacity)

async fn send_many_full_all_or_nothing(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let watched = [inbox(&a), inbox(&b), inbox(&c), Address::System];

    // Three to an empty inbox of two: the third is refused, counting the first two.
    let before = snapshot(&bus, &watched).await;
    match bus.send_many(vec![msg(1, &a, &b), msg(2, &a, &b), msg(3, &a, &b)]).await {
        Err(SendError::InboxFull { id: got, inbox: full, capacity: 2 })
            if got == id(3) && full == inbox(&b) => {}
        other => {
            return Err(format!(
                "send_many of 3 to an inbox of 2: expected InboxFull {{ id: {}, inbox: agent-b, capacity: 2 }}, got {other:?}",
                id(3)
            ));
        }
    }
    eq(snapshot(&bus, &watched).await, before.clone(), "state after a batch overfilling an inbox")?;

    // A broadcast of the batch meets an inbox its own messages filled.
    match bus
        .send_many(vec![
            msg(4, &a, &c),
            msg(5, &b, &c),
            msg(6, Address::System, Address::Broadcast),
        ])
        .await
    {
        Err(SendError::InboxFull { id: got, inbox: full, capacity: 2 })
            if got == id(6) && full == inbox(&c) => {}
        other => {
            return Err(format!(
                "send_many with a broadcast to a filled inbox: expected InboxFull {{ id: {}, inbox: agent-c, capacity: 2 }}, got {other:?}",
                id(6)
            ));
        }
    }
    eq(snapshot(&bus, &watched).await, before, "state after a batch whose broadcast was refused")?;

    // A full inbox early in the batch is the refusal named, before an unknown recipient later.
    ok(bus.send(msg(7, &a, &c)).await, "send")?;
    ok(bus.send(msg(8, &a, &c)).await, "send")?;
    let before = snapshot(&bus, &watched).await;
    match bus.send_many(vec![msg(9, &a, &b), msg(10, &a, &c), msg(11, &a, ghost())]).await {
        Err(SendError::InboxFull { id: got, inbox: full, capacity: 2 })
            if got == id(10) && full == inbox(&c) => {}
        other => {
            return Err(format!(
                "send_many to a full inbox, then to ghost: expected InboxFull {{ id: {}, inbox: agent-c, capacity: 2 }}, got {other:?}",
                id(10)
            ));
        }
    }
    eq(snapshot(&bus, &watched).await, before, "state after a batch refused at a full inbox")?;
    eq(ok(bus.take(&inbox(&b), 10).await, "take")?, vec![], "agent-b got nothing")?;

    // Exactly the room left: accepted.
    eq(
        ok(bus.send_many(vec![msg(12, &a, &b), msg(13, &c, &b)]).await, "send_many")?,
        vec![1, 1],
        "a batch that fills an inbox",
    )?;
    eq(ids(&ok(bus.take(&inbox(&b), 10).await, "take")?), vec![id(12), id(13)], "agent-b's")
}

async fn full_inbox_refuses(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let b_inbox = inbox(&b);
    ok(bus.send(msg(1, &a, &b)).await, "send")?;
    ok(bus.send(msg(2, &a, &b)).await, "send")?;
    let watched = [inbox(&a), b_inbox.clone(), inbox(&c), Address::System];
    let before = snapshot(&bus, &watched).await;
    expect_full(&bus, msg(3, &a, &b), &b_inbox).await?;
    eq(snapshot(&bus, &watched).await, before, "state after a refused send")?;

    eq(ids(&ok(bus.take(&b_inbox, 2).await, "take")?), vec![id(1), id(2)], "take")?;
    expect_full(&bus, msg(3, &a, &b), &b_inbox)
        .await
        .map_err(|e| format!("in-flight messages count: {e}"))?;
    eq(ok(bus.ack(&b_inbox, &[id(1)]).await, "ack")?, 1, "ack")?;
    eq(ok(bus.send(msg(3, &a, &b)).await, "send")?, 1, "send after an ack made room")?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 1, "release")?;
    eq(ids(&ok(bus.take(&b_inbox, 10).await, "take")?), vec![id(2), id(3)], "take")?;

    let system = Address::System;
    ok(bus.send(msg(4, &a, Address::System)).await, "send")?;
    ok(bus.send(msg(5, &a, Address::System)).await, "send")?;
    let before = snapshot(&bus, &watched).await;
    expect_full(&bus, msg(6, &a, Address::System), &system).await?;
    eq(snapshot(&bus, &watched).await, before, "state after a refused send to system")?;
    eq(ids(&ok(bus.take(&system, 10).await, "take")?), vec![id(4), id(5)], "take(system)")
}

async fn broadcast_all_or_nothing(bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let c_inbox = inbox(&c);
    ok(bus.send(msg(1, &a, &c)).await, "send")?;
    ok(bus.send(msg(2, &a, &c)).await, "send")?;
    let watched = [inbox(&a), inbox(&b), c_inbox.clone(), Address::System];
    let before = snapshot(&bus, &watched).await;
    expect_full(&bus, msg(3, &a, Address::Broadcast), &c_inbox).await?;
    eq(snapshot(&bus, &watched).await, before, "state after a refused broadcast")?;
    eq(ok(bus.take(&inbox(&b), 10).await, "take")?, vec![], "agent-b got nothing")?;

    // The sender's own full inbox does not block its broadcast.
    eq(
        ok(bus.send(msg(4, &c, Address::Broadcast)).await, "send")?,
        2,
        "broadcast from the full agent",
    )?;
    ok(bus.take(&c_inbox, 10).await, "take")?;
    eq(ok(bus.ack(&c_inbox, &[id(1), id(2)]).await, "ack")?, 2, "ack")?;
    eq(
        ok(bus.send(msg(5, &a, Address::Broadcast)).await, "send")?,
        2,
        "broadcast after room was made",
    )?;
    eq(ids(&ok(bus.take(&inbox(&b), 10).await, "take")?), vec![id(4), id(5)], "agent-b's copies")?;
    eq(ids(&ok(bus.take(&c_inbox, 10).await, "take")?), vec![id(5)], "agent-c's copy")
}

// ---------------------------------------------------------------------------------------------
// Restart (durable backends)

async fn restart_keeps_messages<F: BusFactory>(factory: &F, bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    for n in 1..=3 {
        ok(bus.send(msg(n, &a, &b)).await, "send")?;
    }
    ok(bus.send(msg(4, &a, Address::System)).await, "send")?;
    ok(bus.send(msg(5, &a, &c)).await, "send")?;
    ok(bus.unregister(&c).await, "unregister")?;
    let b_inbox = inbox(&b);
    eq(ids(&ok(bus.take(&b_inbox, 2).await, "take")?), vec![id(1), id(2)], "take before restart")?;
    eq(ok(bus.ack(&b_inbox, &[id(1)]).await, "ack")?, 1, "ack before restart")?;
    eq(
        ids(&ok(bus.take(&Address::System, 1).await, "take")?),
        vec![id(4)],
        "take(system) before restart",
    )?;

    let Some(bus) = factory.reopen(bus).await else {
        return Err("reopen returned None, but it returned Some for the probe".into());
    };
    eq(
        ok(bus.registered().await, "registered")?,
        vec![a.clone(), b.clone()],
        "registered after restart",
    )?;
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 2, "pending(agent-b) after restart")?;
    eq(
        ids(&ok(bus.take(&b_inbox, 10).await, "take")?),
        vec![id(2), id(3)],
        "take(agent-b) after restart",
    )?;
    eq(
        ids(&ok(bus.take(&Address::System, 10).await, "take")?),
        vec![id(4)],
        "take(system) after restart",
    )?;
    expect_not_registered("pending", bus.pending(&inbox(&c)).await, &c)?;
    ok(bus.register(&c).await, "register")?;
    eq(
        ids(&ok(bus.take(&inbox(&c), 10).await, "take")?),
        vec![id(5)],
        "take(agent-c) after restart",
    )?;
    eq(ok(bus.ack(&b_inbox, &[id(2), id(3)]).await, "ack")?, 2, "ack after restart")?;

    let Some(bus) = factory.reopen(bus).await else {
        return Err("second reopen returned None".into());
    };
    eq(ok(bus.pending(&b_inbox).await, "pending")?, 0, "pending(agent-b) after second restart")?;
    eq(ok(bus.release(&b_inbox).await, "release")?, 0, "release(agent-b) after second restart")?;
    eq(ok(bus.pending(&inbox(&c)).await, "pending")?, 1, "pending(agent-c) after second restart")
}

async fn restart_keeps_batch<F: BusFactory>(factory: &F, bus: Arc<dyn MessageBus>) -> Check {
    let (a, b, c) = register3(&bus).await?;
    let batch = vec![
        msg(1, &a, &b),
        msg(2, &a, Address::Broadcast),
        msg(3, &a, Address::System),
        msg(4, &c, &b),
    ];
    eq(ok(bus.send_many(batch).await, "send_many")?, vec![1, 2, 1, 1], "send_many")?;
    let Some(bus) = factory.reopen(bus).await else {
        return Err("reopen returned None, but it returned Some for the probe".into());
    };
    eq(
        ids(&ok(bus.take(&inbox(&b), 10).await, "take")?),
        vec![id(1), id(2), id(4)],
        "take(agent-b) after restart",
    )?;
    eq(ids(&ok(bus.take(&inbox(&c), 10).await, "take")?), vec![id(2)], "take(agent-c)")?;
    eq(ids(&ok(bus.take(&Address::System, 10).await, "take")?), vec![id(3)], "take(system)")?;
    eq(ok(bus.take(&inbox(&a), 10).await, "take")?, vec![], "take(agent-a) after restart")
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// What a scenario compares before and after a refused call.
#[derive(Clone, Debug, PartialEq)]
struct Snapshot {
    registered: Result<Vec<AgentId>, String>,
    pending: Vec<(Address, Result<usize, String>)>,
}

async fn snapshot(bus: &Arc<dyn MessageBus>, inboxes: &[Address]) -> Snapshot {
    let mut pending = Vec::with_capacity(inboxes.len());
    for address in inboxes {
        pending.push((address.clone(), bus.pending(address).await.map_err(|e| format!("{e:?}"))));
    }
    Snapshot { registered: bus.registered().await.map_err(|e| format!("{e:?}")), pending }
}

async fn register3(bus: &Arc<dyn MessageBus>) -> Result<(AgentId, AgentId, AgentId), String> {
    let (a, b, c) = (agent("agent-a"), agent("agent-b"), agent("agent-c"));
    for id in [&a, &b, &c] {
        ok(bus.register(id).await, "register")?;
    }
    Ok((a, b, c))
}

async fn expect_unknown_recipient(bus: &Arc<dyn MessageBus>, m: Message, to: &AgentId) -> Check {
    let want_id = m.id;
    let want_kind = m.kind.as_str();
    match bus.send(m).await {
        Err(SendError::UnknownRecipient { id, kind, recipient })
            if id == want_id && kind == want_kind && recipient == *to =>
        {
            Ok(())
        }
        other => Err(format!(
            "send {want_id} to {to}: expected UnknownRecipient {{ id: {want_id}, kind: {want_kind}, recipient: {to} }}, got {other:?}"
        )),
    }
}

async fn expect_full(bus: &Arc<dyn MessageBus>, m: Message, full: &Address) -> Check {
    let want_id = m.id;
    match bus.send(m).await {
        Err(SendError::InboxFull { id, inbox, capacity })
            if id == want_id && inbox == *full && capacity == 2 =>
        {
            Ok(())
        }
        other => Err(format!(
            "send {want_id}: expected InboxFull {{ id: {want_id}, inbox: {full}, capacity: 2 }}, got {other:?}"
        )),
    }
}

fn expect_not_registered<T: fmt::Debug>(
    what: &str,
    got: Result<T, InboxError>,
    who: &AgentId,
) -> Check {
    match got {
        Err(InboxError::NotRegistered { agent }) if agent == *who => Ok(()),
        other => {
            Err(format!("{what}({who}): expected NotRegistered {{ agent: {who} }}, got {other:?}"))
        }
    }
}

fn expect_not_an_inbox<T: fmt::Debug>(what: &str, got: Result<T, InboxError>) -> Check {
    match got {
        Err(InboxError::NotAnInbox) => Ok(()),
        other => Err(format!("{what}(broadcast): expected NotAnInbox, got {other:?}")),
    }
}

fn ok<T, E: fmt::Debug>(result: Result<T, E>, what: &str) -> Result<T, String> {
    result.map_err(|err| format!("{what}: unexpected error {err:?}"))
}

fn eq<T: PartialEq + fmt::Debug>(got: T, want: T, what: &str) -> Check {
    if got == want { Ok(()) } else { Err(format!("{what}: expected {want:?}, got {got:?}")) }
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name)
}

fn ghost() -> AgentId {
    agent("ghost")
}

fn inbox(agent: &AgentId) -> Address {
    Address::from(agent)
}

fn id(n: u128) -> MessageId {
    MessageId::from_u128(n)
}

fn ids(messages: &[Message]) -> Vec<MessageId> {
    messages.iter().map(|m| m.id).collect()
}

fn msg(n: u128, from: impl Into<Address>, to: impl Into<Address>) -> Message {
    let content = serde_json::Value::from(format!("message {n}"));
    Message::new(id(n), from, to, MessageKind::TaskAssign, content, Timestamp(n as u64))
}
