//! The model-based conformance test: generated operation sequences, run on a backend and on a
//! reference model, compared after every step.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp, check_agent_id};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tokio::runtime::Runtime;

use super::BusFactory;
use crate::{InboxError, MessageBus, RegisterError, SendError};

/// The agents a sequence may register, in sorted order.
const AGENTS: [&str; 3] = ["agent-0", "agent-1", "agent-2"];
/// An agent that is never registered.
const GHOST: &str = "ghost";
/// An id `register` must refuse.
const INVALID: &str = "not valid!";
/// An id no sequence ever sends.
const UNKNOWN_ID: u128 = u128::MAX;
/// Inbox capacity used when the backend can be built with one, so sequences reach it.
const CAPACITY: usize = 3;
/// Longest generated sequence.
const MAX_OPS: usize = 40;
/// Sequences generated when `PROPTEST_CASES` is unset.
const DEFAULT_CASES: u32 = 64;

/// Runs the model-based test; panics with the smallest failing sequence found.
pub(super) fn run<F: BusFactory>(runtime: &Runtime, factory: &F, durable: bool) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&sequence(), |ops| {
        runtime.block_on(check_sequence(factory, durable, &ops)).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => panic!(
            "message-bus conformance, model-based test: {reason}\nminimal failing sequence: {ops:#?}"
        ),
        Err(TestError::Abort(reason)) => {
            panic!("message-bus conformance, model-based test aborted: {reason}")
        }
    }
}

/// Who an operation names.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    /// `AGENTS[i]`.
    Agent(usize),
    /// The runtime.
    System,
    /// Every agent.
    Broadcast,
    /// An agent that is never registered.
    Ghost,
}

/// One generated operation.
#[derive(Clone, Debug)]
enum Op {
    Register(usize),
    RegisterInvalid,
    /// Only `Agent` or `Ghost`.
    Unregister(Who),
    /// One `unregister_many` of these, in order; only `Agent` or `Ghost`.
    UnregisterMany(Vec<Who>),
    Send {
        from: Who,
        to: Who,
    },
    /// One `send_many` of these (from, to) pairs, in order.
    SendMany(Vec<(Who, Who)>),
    Take {
        inbox: Who,
        max: usize,
    },
    /// Acknowledges the in-flight messages `in_flight` picks, the pending one `pending` picks,
    /// and an id that was never sent if `unknown`.
    Ack {
        inbox: Who,
        in_flight: Vec<Index>,
        pending: Option<Index>,
        unknown: bool,
    },
    Release(Who),
    Pending(Who),
    /// Reopens a durable backend; nothing for one that keeps nothing across a restart.
    Restart,
}

/// Any address, weighted towards a few inboxes so that messages pile up where they are read.
fn who() -> impl Strategy<Value = Who> {
    prop_oneof![
        4 => Just(Who::Agent(0)),
        2 => Just(Who::Agent(1)),
        1 => Just(Who::Agent(2)),
        2 => Just(Who::System),
        1 => Just(Who::Broadcast),
        1 => Just(Who::Ghost),
    ]
}

/// A sequence: register every agent, then up to `MAX_OPS` random operations.
fn sequence() -> impl Strategy<Value = Vec<Op>> {
    vec(op(), 1..=MAX_OPS).prop_map(|ops| (0..AGENTS.len()).map(Op::Register).chain(ops).collect())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..AGENTS.len()).prop_map(Op::Register),
        1 => Just(Op::RegisterInvalid),
        1 => prop_oneof![3 => (0..AGENTS.len()).prop_map(Who::Agent), 1 => Just(Who::Ghost)]
            .prop_map(Op::Unregister),
        1 => vec(
            prop_oneof![3 => (0..AGENTS.len()).prop_map(Who::Agent), 1 => Just(Who::Ghost)],
            0..4
        )
        .prop_map(Op::UnregisterMany),
        8 => (who(), who()).prop_map(|(from, to)| Op::Send { from, to }),
        4 => vec((who(), who()), 0..5).prop_map(Op::SendMany),
        5 => (who(), 0..5usize).prop_map(|(inbox, max)| Op::Take { inbox, max }),
        3 => (who(), vec(any::<Index>(), 0..3), option::of(any::<Index>()), any::<bool>())
            .prop_map(|(inbox, in_flight, pending, unknown)| Op::Ack {
                inbox,
                in_flight,
                pending,
                unknown
            }),
        3 => who().prop_map(Op::Release),
        1 => who().prop_map(Op::Pending),
        1 => Just(Op::Restart),
    ]
}

/// The result of one call, in a form both the backend and the model produce.
#[derive(Debug, PartialEq)]
enum Outcome {
    Done,
    Registered(bool),
    Agents(Vec<AgentId>),
    Count(usize),
    Counts(Vec<usize>),
    Unregistered(Vec<bool>),
    Taken(Vec<Message>),
    InvalidAgent {
        agent: String,
        reason: String,
    },
    UnregisterNotRegistered(AgentId),
    UnknownRecipient {
        id: MessageId,
        kind: &'static str,
        recipient: AgentId,
    },
    InvalidSender(MessageId),
    InboxFull {
        id: MessageId,
        inbox: Address,
        capacity: usize,
    },
    /// Model only: a broadcast refused because these inboxes are full; the backend may name any.
    BroadcastFull {
        id: MessageId,
        full: Vec<Address>,
        capacity: usize,
    },
    NotAnInbox,
    InboxNotRegistered(AgentId),
    Backend(String),
}

impl Outcome {
    /// Whether `got`, from the backend, is what the model's `self` allows.
    fn allows(&self, got: &Outcome) -> bool {
        match (self, got) {
            (
                Outcome::BroadcastFull { id, full, capacity },
                Outcome::InboxFull { id: got_id, inbox, capacity: got_capacity },
            ) => id == got_id && capacity == got_capacity && full.contains(inbox),
            _ => self == got,
        }
    }
}

async fn check_sequence<F: BusFactory>(
    factory: &F,
    durable: bool,
    ops: &[Op],
) -> Result<(), String> {
    let (mut bus, capacity) = match factory.fresh_with_capacity(CAPACITY).await {
        Some(bus) => (bus, Some(CAPACITY)),
        None => (factory.fresh().await, None),
    };
    let mut model = Model::new(capacity);
    for (step, op) in ops.iter().enumerate() {
        let want = model.apply(op, durable);
        let got = match op {
            Op::Restart if durable => match factory.reopen(bus).await {
                Some(reopened) => {
                    bus = reopened;
                    Outcome::Done
                }
                None => return Err(format!("step {step} {op:?}: reopen returned None")),
            },
            _ => apply(&bus, &model, op).await,
        };
        if !want.allows(&got) {
            return Err(format!(
                "step {step} {op:?}: the model says {want:?}, the backend says {got:?}"
            ));
        }
        for (what, want) in model.observe() {
            let got = observe(&bus, &what).await;
            if !want.allows(&got) {
                return Err(format!(
                    "after step {step} {op:?}, {what}: the model says {want:?}, the backend says {got:?}"
                ));
            }
        }
        model.next_id += 1;
    }
    Ok(())
}

/// Runs `op` on the backend. `model` has already applied it; it only supplies the ids.
async fn apply(bus: &Arc<dyn MessageBus>, model: &Model, op: &Op) -> Outcome {
    match op {
        Op::Register(i) => outcome(bus.register(&agent(*i)).await, |()| Outcome::Done),
        Op::RegisterInvalid => {
            outcome(bus.register(&AgentId::new(INVALID)).await, |()| Outcome::Done)
        }
        Op::Unregister(who) => match who.agent() {
            Some(agent) => outcome(bus.unregister(&agent).await, |()| Outcome::Done),
            None => Outcome::Backend(format!("suite bug: unregister {who:?}")),
        },
        Op::UnregisterMany(whos) => {
            let Some(agents) = whos.iter().map(|w| w.agent()).collect::<Option<Vec<AgentId>>>()
            else {
                return Outcome::Backend(format!("suite bug: unregister_many {whos:?}"));
            };
            outcome(bus.unregister_many(&agents).await, Outcome::Unregistered)
        }
        Op::Send { from, to } => {
            outcome(bus.send(message(model.next_id, *from, *to)).await, Outcome::Count)
        }
        Op::SendMany(pairs) => {
            outcome(bus.send_many(batch(model.next_id, pairs)).await, Outcome::Counts)
        }
        Op::Take { inbox, max } => outcome(bus.take(&inbox.address(), *max).await, Outcome::Taken),
        Op::Ack { inbox, .. } => {
            outcome(bus.ack(&inbox.address(), &model.last_ack).await, Outcome::Count)
        }
        Op::Release(inbox) => outcome(bus.release(&inbox.address()).await, Outcome::Count),
        Op::Pending(inbox) => outcome(bus.pending(&inbox.address()).await, Outcome::Count),
        Op::Restart => Outcome::Done,
    }
}

/// Reads what `what` names on the backend; see [`Model::observe`].
async fn observe(bus: &Arc<dyn MessageBus>, what: &Observation) -> Outcome {
    match what {
        Observation::Registered => outcome(bus.registered().await, Outcome::Agents),
        Observation::IsRegistered(who) => match who.agent() {
            Some(agent) => outcome(bus.is_registered(&agent).await, Outcome::Registered),
            None => Outcome::Backend(format!("suite bug: is_registered {who:?}")),
        },
        Observation::Pending(who) => outcome(bus.pending(&who.address()).await, Outcome::Count),
        Observation::WithMail => outcome(bus.inboxes_with_mail().await, Outcome::Agents),
    }
}

fn outcome<T, E: Into<Outcome>>(result: Result<T, E>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match result {
        Ok(value) => ok(value),
        Err(err) => err.into(),
    }
}

impl From<RegisterError> for Outcome {
    fn from(err: RegisterError) -> Self {
        match err {
            RegisterError::InvalidAgent { agent, reason } => {
                Outcome::InvalidAgent { agent, reason }
            }
            RegisterError::NotRegistered { agent } => Outcome::UnregisterNotRegistered(agent),
            RegisterError::Backend(err) => Outcome::Backend(err.to_string()),
        }
    }
}

impl From<SendError> for Outcome {
    fn from(err: SendError) -> Self {
        match err {
            // A placed run's waiting bus gives up this way; the backends refuse at once.
            SendError::UnknownRecipient { id, kind, recipient }
            | SendError::NotHosted { id, kind, recipient, .. } => {
                Outcome::UnknownRecipient { id, kind, recipient }
            }
            SendError::InvalidSender { id } => Outcome::InvalidSender(id),
            SendError::InboxFull { id, inbox, capacity } => {
                Outcome::InboxFull { id, inbox, capacity }
            }
            SendError::Backend(err) => Outcome::Backend(err.to_string()),
        }
    }
}

impl From<InboxError> for Outcome {
    fn from(err: InboxError) -> Self {
        match err {
            InboxError::NotAnInbox => Outcome::NotAnInbox,
            InboxError::NotRegistered { agent } => Outcome::InboxNotRegistered(agent),
            InboxError::Backend(err) => Outcome::Backend(err.to_string()),
        }
    }
}

impl From<agent_state::BackendError> for Outcome {
    fn from(err: agent_state::BackendError) -> Self {
        Outcome::Backend(err.to_string())
    }
}

/// What is compared after every step, besides the step's own result.
enum Observation {
    Registered,
    IsRegistered(Who),
    Pending(Who),
    WithMail,
}

impl fmt::Display for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Observation::Registered => f.write_str("registered()"),
            Observation::IsRegistered(who) => write!(f, "is_registered({})", who.address()),
            Observation::Pending(who) => write!(f, "pending({})", who.address()),
            Observation::WithMail => f.write_str("inboxes_with_mail()"),
        }
    }
}

/// The reference model: the contract of `MessageBus`, in the plainest code.
struct Model {
    capacity: Option<usize>,
    agents: [Inbox; AGENTS.len()],
    system: Inbox,
    /// The id the current step's send uses.
    next_id: u128,
    /// The ids the current step's ack sends, chosen from the model's state.
    last_ack: Vec<MessageId>,
}

#[derive(Clone, Default)]
struct Inbox {
    registered: bool,
    pending: VecDeque<Message>,
    in_flight: VecDeque<Message>,
}

impl Inbox {
    fn len(&self) -> usize {
        self.pending.len() + self.in_flight.len()
    }

    fn release(&mut self) -> usize {
        let released = self.in_flight.len();
        while let Some(message) = self.in_flight.pop_back() {
            self.pending.push_front(message);
        }
        released
    }
}

impl Model {
    fn new(capacity: Option<usize>) -> Self {
        Self {
            capacity,
            agents: Default::default(),
            system: Inbox::default(),
            next_id: 1,
            last_ack: Vec::new(),
        }
    }

    fn full(&self, inbox: &Inbox) -> bool {
        self.capacity.is_some_and(|capacity| inbox.len() >= capacity)
    }

    fn unregister(&mut self, who: &Who) -> Outcome {
        match who {
            Who::Agent(i) if self.agents[*i].registered => {
                self.agents[*i].registered = false;
                Outcome::Done
            }
            _ => match who.agent() {
                Some(agent) => Outcome::UnregisterNotRegistered(agent),
                None => Outcome::Backend(format!("suite bug: unregister {who:?}")),
            },
        }
    }

    /// Unregisters each of `whos` that is registered, in order.
    fn unregister_many(&mut self, whos: &[Who]) -> Outcome {
        Outcome::Unregistered(
            whos.iter()
                .map(|who| match who {
                    Who::Agent(i) if self.agents[*i].registered => {
                        self.agents[*i].registered = false;
                        true
                    }
                    _ => false,
                })
                .collect(),
        )
    }

    fn apply(&mut self, op: &Op, durable: bool) -> Outcome {
        match op {
            Op::Register(i) => {
                self.agents[*i].registered = true;
                Outcome::Done
            }
            Op::RegisterInvalid => Outcome::InvalidAgent {
                agent: INVALID.to_owned(),
                reason: check_agent_id(INVALID)
                    .err()
                    .map(|kind| kind.to_string())
                    .unwrap_or_default(),
            },
            Op::Unregister(who) => self.unregister(who),
            Op::UnregisterMany(whos) => self.unregister_many(whos),
            Op::Send { from, to } => self.send(message(self.next_id, *from, *to)),
            Op::SendMany(pairs) => self.send_many(batch(self.next_id, pairs)),
            Op::Take { inbox, max } => match self.inbox_mut(*inbox) {
                Ok(inbox) => {
                    let n = (*max).min(inbox.pending.len());
                    let taken: Vec<Message> = inbox.pending.drain(..n).collect();
                    inbox.in_flight.extend(taken.iter().cloned());
                    Outcome::Taken(taken)
                }
                Err(err) => err,
            },
            Op::Ack { inbox, in_flight, pending, unknown } => {
                let mut ids = Vec::new();
                if let Ok(inbox) = self.inbox_mut(*inbox) {
                    for pick in in_flight {
                        if !inbox.in_flight.is_empty() {
                            ids.push(inbox.in_flight[pick.index(inbox.in_flight.len())].id);
                        }
                    }
                    if let Some(pick) = pending
                        && !inbox.pending.is_empty()
                    {
                        ids.push(inbox.pending[pick.index(inbox.pending.len())].id);
                    }
                }
                if *unknown {
                    ids.push(MessageId::from_u128(UNKNOWN_ID));
                }
                let outcome = match self.inbox_mut(*inbox) {
                    Ok(inbox) => {
                        let before = inbox.in_flight.len();
                        inbox.in_flight.retain(|m| !ids.contains(&m.id));
                        Outcome::Count(before - inbox.in_flight.len())
                    }
                    Err(err) => err,
                };
                self.last_ack = ids;
                outcome
            }
            Op::Release(inbox) => match self.inbox_mut(*inbox) {
                Ok(inbox) => Outcome::Count(inbox.release()),
                Err(err) => err,
            },
            Op::Pending(inbox) => match self.inbox_mut(*inbox) {
                Ok(inbox) => Outcome::Count(inbox.pending.len()),
                Err(err) => err,
            },
            Op::Restart => {
                if durable {
                    for inbox in self.agents.iter_mut().chain(std::iter::once(&mut self.system)) {
                        inbox.release();
                    }
                }
                Outcome::Done
            }
        }
    }

    /// All or nothing: sent one by one on the model, put back at the first refusal.
    fn send_many(&mut self, messages: Vec<Message>) -> Outcome {
        let (agents, system) = (self.agents.clone(), self.system.clone());
        let mut counts = Vec::with_capacity(messages.len());
        for message in messages {
            match self.send(message) {
                Outcome::Count(n) => counts.push(n),
                refused => {
                    (self.agents, self.system) = (agents, system);
                    return refused;
                }
            }
        }
        Outcome::Counts(counts)
    }

    fn send(&mut self, message: Message) -> Outcome {
        if message.from == Address::Broadcast {
            return Outcome::InvalidSender(message.id);
        }
        let capacity = self.capacity.unwrap_or(usize::MAX);
        match message.to.clone() {
            Address::Broadcast => {
                let targets: Vec<usize> = (0..AGENTS.len())
                    .filter(|&i| {
                        self.agents[i].registered && message.from != Who::Agent(i).address()
                    })
                    .collect();
                let full: Vec<Address> = targets
                    .iter()
                    .filter(|&&i| self.full(&self.agents[i]))
                    .map(|&i| Who::Agent(i).address())
                    .collect();
                if !full.is_empty() {
                    return Outcome::BroadcastFull { id: message.id, full, capacity };
                }
                for &i in &targets {
                    self.agents[i].pending.push_back(message.clone());
                }
                Outcome::Count(targets.len())
            }
            to => {
                let index =
                    AGENTS.iter().position(|name| Some(*name) == to.agent().map(AgentId::as_str));
                let inbox = match (&to, index) {
                    (Address::System, _) => &self.system,
                    (_, Some(i)) if self.agents[i].registered => &self.agents[i],
                    _ => {
                        return Outcome::UnknownRecipient {
                            id: message.id,
                            kind: message.kind.as_str(),
                            recipient: to.agent().cloned().unwrap_or_else(|| AgentId::new("")),
                        };
                    }
                };
                if self.full(inbox) {
                    return Outcome::InboxFull { id: message.id, inbox: to, capacity };
                }
                let inbox = match index {
                    Some(i) => &mut self.agents[i],
                    None => &mut self.system,
                };
                inbox.pending.push_back(message);
                Outcome::Count(1)
            }
        }
    }

    /// The inbox `who` names for reading, or the refusal the backend must give.
    fn inbox_mut(&mut self, who: Who) -> Result<&mut Inbox, Outcome> {
        match who {
            Who::System => Ok(&mut self.system),
            Who::Broadcast => Err(Outcome::NotAnInbox),
            Who::Agent(i) if self.agents[i].registered => Ok(&mut self.agents[i]),
            Who::Agent(_) | Who::Ghost => {
                Err(Outcome::InboxNotRegistered(who.agent().unwrap_or_else(|| AgentId::new(""))))
            }
        }
    }

    /// Everything compared after every step, with the model's answer.
    fn observe(&mut self) -> Vec<(Observation, Outcome)> {
        let registered: Vec<AgentId> =
            (0..AGENTS.len()).filter(|&i| self.agents[i].registered).map(agent).collect();
        let mut seen = vec![(Observation::Registered, Outcome::Agents(registered))];
        let everyone = (0..AGENTS.len()).map(Who::Agent).chain([Who::Ghost]);
        for who in everyone.clone() {
            let registered = matches!(who, Who::Agent(i) if self.agents[i].registered);
            seen.push((Observation::IsRegistered(who), Outcome::Registered(registered)));
        }
        for who in everyone.chain([Who::System, Who::Broadcast]) {
            let pending = match self.inbox_mut(who) {
                Ok(inbox) => Outcome::Count(inbox.pending.len()),
                Err(err) => err,
            };
            seen.push((Observation::Pending(who), pending));
        }
        let with_mail: Vec<AgentId> = (0..AGENTS.len())
            .filter(|&i| self.agents[i].registered && !self.agents[i].pending.is_empty())
            .map(agent)
            .collect();
        seen.push((Observation::WithMail, Outcome::Agents(with_mail)));
        seen
    }
}

impl Who {
    fn address(self) -> Address {
        match self {
            Who::Agent(i) => Address::Agent(agent(i)),
            Who::System => Address::System,
            Who::Broadcast => Address::Broadcast,
            Who::Ghost => Address::Agent(AgentId::new(GHOST)),
        }
    }

    fn agent(self) -> Option<AgentId> {
        self.address().agent().cloned()
    }
}

fn agent(i: usize) -> AgentId {
    AgentId::new(AGENTS[i])
}

/// The messages of a `send_many` at step `step`: ids `step * 1000 + k`, above every id a
/// single send uses (the step number).
fn batch(step: u128, pairs: &[(Who, Who)]) -> Vec<Message> {
    (0..).zip(pairs).map(|(k, (from, to))| message(step * 1_000 + k, *from, *to)).collect()
}

fn message(id: u128, from: Who, to: Who) -> Message {
    let content = serde_json::Value::from(id as u64);
    Message::new(
        MessageId::from_u128(id),
        from.address(),
        to.address(),
        MessageKind::StatusReport,
        content,
        Timestamp(id as u64),
    )
}
