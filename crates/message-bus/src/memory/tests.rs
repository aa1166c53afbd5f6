//! Unit tests of the in-memory backend's own choices; the shared contract is checked by `testing`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};

use super::{DEFAULT_INBOX_CAPACITY, InMemoryBus, Inbox};
use crate::{MessageBus, SendError};

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
}

fn id(n: u128) -> MessageId {
    MessageId::from_u128(n)
}

fn msg(n: u128, to: &AgentId) -> Message {
    Message::new(
        id(n),
        Address::System,
        to,
        MessageKind::StatusQuery,
        Default::default(),
        Timestamp(0),
    )
}

/// An inbox holding messages `ns`, all taken.
fn in_flight(ns: &[u128]) -> Inbox {
    let to = AgentId::new("a");
    let mut inbox = Inbox::registered();
    for &n in ns {
        inbox.push(msg(n, &to));
    }
    assert_eq!(inbox.take(usize::MAX).len(), ns.len());
    inbox
}

fn left(inbox: &Inbox) -> Vec<MessageId> {
    inbox.in_flight().map(|m| m.id).collect()
}

fn remove_acked(inbox: &mut Inbox, ids: &[MessageId]) -> usize {
    inbox.ack(ids, |m| m.id)
}

#[test]
fn new_and_default_use_the_default_capacity() {
    assert_eq!(InMemoryBus::new().capacity(), DEFAULT_INBOX_CAPACITY);
    assert_eq!(InMemoryBus::default().capacity(), DEFAULT_INBOX_CAPACITY);
    assert_eq!(InMemoryBus::with_capacity(3).capacity(), 3);
}

#[test]
fn zero_capacity_refuses_every_send() {
    let bus = InMemoryBus::with_capacity(0);
    let a = AgentId::new("a");
    block_on(async {
        bus.register(&a).await.unwrap();
        let err = bus.send(msg(1, &a)).await.unwrap_err();
        assert!(matches!(err, SendError::InboxFull { capacity: 0, .. }), "{err:?}");
        assert_eq!(bus.pending(&Address::from(&a)).await.unwrap(), 0);
    });
}

#[test]
fn ack_in_taken_order_removes_the_prefix() {
    let mut queue = in_flight(&[1, 2, 3, 4]);
    assert_eq!(remove_acked(&mut queue, &[id(1), id(2)]), 2);
    assert_eq!(left(&queue), [id(3), id(4)]);
}

#[test]
fn ack_out_of_order_with_few_ids_removes_each_listed() {
    let mut queue = in_flight(&[1, 2, 3, 4]);
    assert_eq!(remove_acked(&mut queue, &[id(3), id(9), id(1)]), 2);
    assert_eq!(left(&queue), [id(2), id(4)]);
}

#[test]
fn ack_out_of_order_with_many_ids_removes_each_listed() {
    let mut queue = in_flight(&(1..=20).collect::<Vec<_>>());
    let ids: Vec<MessageId> =
        (1..=20).rev().filter(|n| n % 2 == 0).chain(100..110).map(id).collect();
    assert_eq!(remove_acked(&mut queue, &ids), 10);
    assert_eq!(left(&queue), (1..=20).filter(|n| n % 2 == 1).map(id).collect::<Vec<_>>());
}

#[test]
fn ack_removes_every_in_flight_copy_of_an_id() {
    // The bus does not deduplicate: an id acknowledged in the in-order prefix is also removed
    // further on, so the result does not depend on which path ran.
    let mut queue = in_flight(&[1, 2, 1, 3]);
    assert_eq!(remove_acked(&mut queue, &[id(1)]), 2);
    assert_eq!(left(&queue), [id(2), id(3)]);
    let mut queue = in_flight(&[1, 2, 1, 3]);
    assert_eq!(remove_acked(&mut queue, &[id(2), id(1)]), 3);
    assert_eq!(left(&queue), [id(3)]);
}

#[test]
fn ack_of_nothing_removes_nothing() {
    let mut queue = in_flight(&[1, 2]);
    assert_eq!(remove_acked(&mut queue, &[]), 0);
    assert_eq!(remove_acked(&mut Inbox::registered(), &[id(1)]), 0);
    assert_eq!(left(&queue), [id(1), id(2)]);
}

#[test]
fn ack_leaves_pending_messages_alone_and_release_puts_the_rest_back_ahead_in_order() {
    let to = AgentId::new("a");
    let mut inbox = in_flight(&[1, 2, 3, 4, 5]);
    inbox.push(msg(6, &to));
    inbox.push(msg(7, &to));
    // Pending messages are not in flight: acknowledging their ids removes nothing of them.
    assert_eq!(remove_acked(&mut inbox, &[id(2), id(4), id(6)]), 2);
    assert_eq!(left(&inbox), [id(1), id(3), id(5)]);
    assert_eq!((inbox.pending_len(), inbox.len()), (2, 5));
    assert_eq!(inbox.release(), 3);
    assert_eq!(inbox.in_flight().count(), 0);
    let mut taken = Vec::new();
    taken.extend(inbox.take(2).map(|m| m.id));
    taken.extend(inbox.take(usize::MAX).map(|m| m.id));
    assert_eq!(taken, [id(1), id(3), id(5), id(6), id(7)]);
    assert_eq!(remove_acked(&mut inbox, &taken), 5);
    assert_eq!(inbox.len(), 0);
}

#[test]
fn restart_releases_every_inbox_including_unregistered_ones() {
    let bus = InMemoryBus::new();
    let (a, b) = (AgentId::new("a"), AgentId::new("b"));
    block_on(async {
        bus.register(&a).await.unwrap();
        bus.register(&b).await.unwrap();
        for n in 1..=3 {
            bus.send(msg(n, &a)).await.unwrap();
        }
        bus.send(msg(4, &b)).await.unwrap();
        bus.send(Message { to: Address::System, ..msg(5, &a) }).await.unwrap();
        bus.take(&Address::from(&a), 2).await.unwrap();
        bus.take(&Address::from(&b), 1).await.unwrap();
        bus.take(&Address::System, 1).await.unwrap();
        bus.unregister(&b).await.unwrap();

        assert_eq!(bus.restart(), 4);
        assert_eq!(bus.restart(), 0);
        let taken = bus.take(&Address::from(&a), 10).await.unwrap();
        assert_eq!(taken.iter().map(|m| m.id).collect::<Vec<_>>(), [id(1), id(2), id(3)]);
        assert_eq!(bus.pending(&Address::System).await.unwrap(), 1);
        assert!(!bus.is_registered(&b).await.unwrap());
        bus.register(&b).await.unwrap();
        assert_eq!(bus.pending(&Address::from(&b)).await.unwrap(), 1);
    });
}

#[test]
fn debug_shows_capacity_not_messages() {
    let bus = InMemoryBus::with_capacity(7);
    block_on(bus.register(&AgentId::new("a"))).unwrap();
    assert_eq!(format!("{bus:?}"), "InMemoryBus { capacity: 7, agents: 1, .. }");
}

#[test]
fn a_send_is_done_when_called_even_if_its_future_is_dropped_unpolled() {
    let bus = InMemoryBus::new();
    let (a, b) = (AgentId::new("a"), AgentId::new("b"));
    block_on(async {
        bus.register(&a).await.unwrap();
        drop(bus.send(msg(1, &a)));
        let inbox = Address::from(&a);
        assert_eq!(bus.pending(&inbox).await.unwrap(), 1);
        // Every answer is the one the call would have awaited: one inbox, or the refusal.
        assert_eq!(bus.send(msg(2, &a)).await.unwrap(), 1);
        let refused = bus.send(msg(3, &b)).await.unwrap_err();
        assert!(
            matches!(refused, SendError::UnknownRecipient { id, .. } if id == MessageId::from_u128(3))
        );
        let taken: Vec<MessageId> =
            bus.take(&inbox, 8).await.unwrap().iter().map(|m| m.id).collect();
        assert_eq!(taken, [id(1), id(2)]);
    });
}
