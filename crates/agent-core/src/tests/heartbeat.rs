//! The heartbeat: idle and working beats, retries, permanent errors, timeouts, and what a failed
//! agent listens to.

use agent_state::{AgentStatus::*, Assignment};
use serde_json::json;

use super::*;
use crate::HeartbeatOutcome;
use crate::payload;
use crate::protocol::{ErrorReport, HeartbeatAck};

fn from_supervisor() -> Address {
    inbox(SUPERVISOR)
}

/// Sends one message from the supervisor to the agent under test.
async fn one_message(s: &Services) -> MessageId {
    s.send(from_supervisor(), ME, MessageKind::StatusQuery, json!({})).await
}

/// The error reports in `inbox`, as (sender, report).
async fn error_reports(s: &Services, inbox: &Address) -> Vec<(Address, ErrorReport)> {
    s.drain(inbox)
        .await
        .into_iter()
        .filter(|m| m.kind == MessageKind::ErrorReport)
        .map(|m| (m.from.clone(), payload::<ErrorReport>(&m).unwrap()))
        .collect()
}

/// An initialized executor that failed on a permanent error; its supervisor's inbox is empty.
async fn failed_agent(s: &Services, probe: &Probe) -> Agent {
    let mut agent = s.ready(probe).await;
    probe.steps([Step::Permanent]);
    one_message(s).await;
    assert!(matches!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Failed { .. }));
    s.drain(&from_supervisor()).await;
    agent
}

#[tokio::test(start_paused = true)]
async fn an_empty_heartbeat_is_idle_and_changes_no_status() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Idle);

    assert_eq!(agent.status(), Idle);
    assert_eq!(s.edges(ME).await, [(Initializing, Idle)]);
    assert_eq!(agent.ctx().metrics().heartbeats_responded, 1);
    assert_eq!(agent.ctx().heartbeat_number(), 1);
    assert!(probe.calls().is_empty(), "nothing to process");
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_with_messages_works_acknowledges_them_and_returns_to_idle() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    let first = one_message(&s).await;
    let second = s.send(Address::System, ME, MessageKind::Warning, json!({"why": "test"})).await;

    assert_eq!(agent.heartbeat(7).await.unwrap(), HeartbeatOutcome::Processed { messages: 2 });

    assert_eq!(
        probe.calls(),
        [Call { messages: vec![first, second], board: BoardId::Agent(id(ME)) }]
    );
    assert_eq!(agent.status(), Idle);
    assert_eq!(s.edges(ME).await, [(Initializing, Idle), (Idle, Working), (Working, Idle)]);
    // Acknowledged: nothing pending, nothing in flight to release.
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert_eq!(s.bus.release(&inbox(ME)).await.unwrap(), 0);
    assert!(s.bus.take(&inbox(ME), 16).await.unwrap().is_empty());
    let acks = s.drain(&Address::System).await;
    assert_eq!(acks.len(), 1);
    assert_eq!((acks[0].kind, &acks[0].from), (MessageKind::HeartbeatAck, &inbox(ME)));
    assert_eq!(payload::<HeartbeatAck>(&acks[0]).unwrap(), HeartbeatAck { heartbeat: 7 });
    let metrics = agent.ctx().metrics();
    // Two messages handled plus the heartbeat ack sent.
    assert_eq!(metrics.messages_processed, 3);
    assert_eq!((metrics.heartbeats_responded, metrics.heartbeats_missed), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_wants_a_tick_is_processed_with_an_empty_inbox() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    probe.with(|s| s.wants_tick = true);

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 0 });

    assert_eq!(probe.calls().len(), 1);
    assert_eq!(s.edges(ME).await[1..], [(Idle, Working), (Working, Idle)]);
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_is_retried_with_the_same_messages_on_the_next_heartbeat() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    probe.steps([Step::Transient]);
    let message = one_message(&s).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Retrying { retry: 1, error: transient().to_string() });
    assert_eq!(agent.status(), Working);
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 1, "released for the next heartbeat");
    assert_eq!(s.errors(ME).await, [(transient().to_string(), 1, 2)]);
    assert!(s.drain(&Address::System).await.is_empty(), "no heartbeat ack for a failed beat");

    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    let seen: Vec<Vec<MessageId>> = probe.calls().into_iter().map(|c| c.messages).collect();
    assert_eq!(seen, [vec![message], vec![message]]);
    assert_eq!(agent.status(), Idle);
    assert_eq!(agent.ctx().retries(), 0, "a success resets the retries");
    let metrics = agent.ctx().metrics();
    assert_eq!(
        (metrics.retries, metrics.heartbeats_missed, metrics.heartbeats_responded),
        (1, 1, 1)
    );
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

#[tokio::test(start_paused = true)]
async fn exhausted_retries_fail_the_agent_and_report_the_abandoned_work_to_the_supervisor() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    probe.steps([Step::Transient; 3]);
    probe.with(|s| s.abandon = Some(subtask("s1")));
    one_message(&s).await;
    let error = transient().to_string();

    assert_eq!(
        agent.heartbeat(1).await.unwrap(),
        HeartbeatOutcome::Retrying { retry: 1, error: error.clone() }
    );
    assert_eq!(
        agent.heartbeat(2).await.unwrap(),
        HeartbeatOutcome::Retrying { retry: 2, error: error.clone() }
    );
    // The second retry waits 2 heartbeats.
    assert_eq!(agent.heartbeat(3).await.unwrap(), HeartbeatOutcome::Waiting { due: 4 });
    assert_eq!(
        agent.heartbeat(4).await.unwrap(),
        HeartbeatOutcome::Failed { error: error.clone() }
    );

    assert_eq!(agent.status(), Failed);
    assert_eq!(probe.calls().len(), 3);
    assert_eq!(agent.ctx().metrics().tasks_failed, 1);
    assert_eq!(
        s.errors(ME).await,
        [(error.clone(), 1, 2), (error.clone(), 2, 2), (error.clone(), 2, 2)]
    );
    // The messages are consumed by the report: neither pending nor in flight.
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert_eq!(s.bus.release(&inbox(ME)).await.unwrap(), 0);
    let reports = error_reports(&s, &from_supervisor()).await;
    assert_eq!(reports.len(), 1);
    let (from, report) = &reports[0];
    assert_eq!(from, &inbox(ME));
    assert_eq!(report.error, error);
    assert_eq!(report.work, Some(subtask("s1")));
    assert_eq!(report.metrics.tasks_failed, 1);
    let transitions = s.transitions(ME).await;
    assert_eq!(transitions.last().unwrap().2, format!("retry limit exceeded: {error}"));
    assert_eq!(s.edges(ME).await, [(Initializing, Idle), (Idle, Working), (Working, Failed)]);
    assert_eq!(s.chain().await, [(id(ME), Failed)]);
}

#[tokio::test(start_paused = true)]
async fn a_top_agent_without_a_supervisor_reports_its_failure_to_system() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(top_config("top-a").with_max_retries(0), &probe);
    agent.initialize().await.unwrap();
    probe.steps([Step::Transient]);
    s.send(Address::System, "top-a", MessageKind::TaskAssign, json!({})).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Failed { error: transient().to_string() });
    let system = s.drain(&Address::System).await;
    let kinds: Vec<MessageKind> = system.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [MessageKind::ErrorReport]);
    assert_eq!(system[0].from, inbox("top-a"));
    assert_eq!(payload::<ErrorReport>(&system[0]).unwrap().error, transient().to_string());
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_fails_the_agent_at_once_without_retries() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    probe.steps([Step::Permanent]);
    one_message(&s).await;
    let error = permanent().to_string();

    assert_eq!(
        agent.heartbeat(1).await.unwrap(),
        HeartbeatOutcome::Failed { error: error.clone() }
    );

    assert_eq!(agent.status(), Failed);
    assert_eq!(probe.calls().len(), 1);
    assert_eq!(s.errors(ME).await, [(error.clone(), 0, 2)]);
    assert_eq!(agent.ctx().metrics().retries, 0);
    assert_eq!(agent.ctx().metrics().tasks_failed, 1);
    assert_eq!(s.transitions(ME).await.last().unwrap().2, format!("permanent error: {error}"));
    let reports = error_reports(&s, &from_supervisor()).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].1.error, error);
    assert_eq!(reports[0].1.work, None);
}

#[tokio::test(start_paused = true)]
async fn a_task_past_its_timeout_is_a_timeout_error_and_is_retried() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config().with_timeout_ms(1_000), &probe);
    agent.initialize().await.unwrap();
    probe.steps([Step::Sleep(Duration::from_secs(5))]);
    let message = one_message(&s).await;
    let started = s.now();
    let error = AgentError::Timeout { after_ms: 1_000 }.to_string();

    let outcome = agent.heartbeat(1).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Retrying { retry: 1, error: error.clone() });
    assert_eq!(s.now(), Timestamp(started.0 + 1_000), "cut off at the timeout, not after 5 s");
    assert_eq!(s.errors(ME).await, [(error, 1, 2)]);
    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });
    assert_eq!(probe.calls()[1].messages, [message]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_agent_holds_messages_from_others_until_its_supervisor_reassigns_it() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = failed_agent(&s, &probe).await;
    let edges = s.edges(ME).await;
    let assignment = Assignment::Subtask { subtask: subtask("s1") };
    let content = serde_json::to_value(&assignment).unwrap();
    let stranger = s.send(inbox("bottom-2"), ME, MessageKind::TaskAssign, content).await;
    // From the supervisor, only a `task_assign` is an order.
    let note = s.send(from_supervisor(), ME, MessageKind::Warning, json!({})).await;

    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Skipped { status: Failed });

    assert_eq!(agent.status(), Failed);
    assert_eq!(s.edges(ME).await, edges);
    assert_eq!(probe.calls().len(), 1, "only the heartbeat that failed");
    // Held, not pending: nothing wakes the failed agent again for them.
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert!(!s.bus.inboxes_with_mail().await.unwrap().contains(&id(ME)));
    assert_eq!(agent.heartbeat(3).await.unwrap(), HeartbeatOutcome::Skipped { status: Failed });
    assert_eq!(probe.calls().len(), 1);

    // New work from its supervisor: the held messages come with it, in order.
    let content = serde_json::to_value(Assignment::Subtask { subtask: subtask("s2") }).unwrap();
    let order = s.send(from_supervisor(), ME, MessageKind::TaskAssign, content).await;
    assert_eq!(agent.heartbeat(4).await.unwrap(), HeartbeatOutcome::Processed { messages: 3 });
    assert_eq!(probe.calls()[1].messages, [stranger, note, order]);
    assert_eq!(agent.status(), Idle);
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_agent_refuses_speak_peer_help_and_status_queries_at_once() {
    use crate::protocol::{HelpRequest, HelpResponse, StatusReport, failed_refusal};
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = failed_agent(&s, &probe).await;
    s.bus.register(&id("bottom-2")).await.unwrap();
    let speak = serde_json::to_value(HelpRequest::Speak { message: "status?".into() }).unwrap();
    let spoken = s.send(from_supervisor(), ME, MessageKind::PeerHelpRequest, speak).await;
    let take = HelpRequest::TakeOverTask { subtask: Box::new(subtask("s9")) };
    let take = serde_json::to_value(take).unwrap();
    let asked = s.send(inbox("bottom-2"), ME, MessageKind::PeerHelpRequest, take).await;
    let queried = one_message(&s).await;

    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Skipped { status: Failed });

    let refusal = failed_refusal(&id(ME));
    assert_eq!(refusal, format!("agent {ME} has failed and cannot process messages"));
    let to_supervisor = s.drain(&from_supervisor()).await;
    let answers: Vec<(MessageKind, Option<MessageId>, serde_json::Value)> =
        to_supervisor.iter().map(|m| (m.kind, m.correlation_id, m.content.clone())).collect();
    assert_eq!(
        answers,
        [
            (
                MessageKind::PeerHelpResponse,
                Some(spoken),
                serde_json::to_value(HelpResponse::Refused { reason: refusal.clone() }).unwrap()
            ),
            (
                MessageKind::StatusReport,
                Some(queried),
                serde_json::to_value(StatusReport::Refused { reason: refusal.clone() }).unwrap()
            ),
        ]
    );
    let to_peer = s.drain(&inbox("bottom-2")).await;
    assert_eq!(to_peer.len(), 1);
    assert_eq!(to_peer[0].correlation_id, Some(asked));
    assert_eq!(
        payload::<HelpResponse>(&to_peer[0]).unwrap(),
        HelpResponse::Refused { reason: refusal.clone() }
    );
    // Each refusal is audited; the requests are answered and gone; the agent is still failed.
    let denied = s.denied(ME).await;
    assert_eq!(denied.len(), 3, "{denied:?}");
    assert!(denied.iter().all(|(_, error)| *error == refusal), "{denied:?}");
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert_eq!(agent.status(), Failed);
    assert_eq!(probe.calls().len(), 1, "the layer saw none of them");
    // Answered once: nothing comes again.
    assert_eq!(agent.heartbeat(3).await.unwrap(), HeartbeatOutcome::Skipped { status: Failed });
    assert!(s.drain(&from_supervisor()).await.is_empty());
}

/// The retry records of `agent`: (attempt, class, heartbeat, wait, due).
async fn retries(
    s: &Services,
    agent: &str,
) -> Vec<(u32, agent_state::ErrorClass, u64, Option<u64>, Option<u64>)> {
    s.events(agent)
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::Retry { attempt, class, heartbeat, wait_beats, due_heartbeat, .. } => {
                Some((attempt, class, heartbeat, wait_beats, due_heartbeat))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_retry_waits_for_a_later_heartbeat_1_2_4_beats_whatever_mail_arrives() {
    use agent_state::ErrorClass::Transient;
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config().with_max_retries(3), &probe);
    agent.initialize().await.unwrap();
    probe.steps([Step::Transient; 4]);
    one_message(&s).await;
    let error = transient().to_string();

    let mut outcomes = Vec::new();
    for n in 1..=8 {
        outcomes.push(agent.heartbeat(n).await.unwrap());
        // Mail between two heartbeats wakes no attempt before it is due.
        one_message(&s).await;
        if let HeartbeatOutcome::Waiting { .. } = agent.wake().await.unwrap() {
        } else if agent.status() != Failed {
            panic!("a wake-up turn ran before the retry was due");
        }
    }

    let retrying = |retry| HeartbeatOutcome::Retrying { retry, error: error.clone() };
    assert_eq!(
        outcomes,
        [
            retrying(1),
            retrying(2),
            HeartbeatOutcome::Waiting { due: 4 },
            retrying(3),
            HeartbeatOutcome::Waiting { due: 8 },
            HeartbeatOutcome::Waiting { due: 8 },
            HeartbeatOutcome::Waiting { due: 8 },
            HeartbeatOutcome::Failed { error: error.clone() },
        ]
    );
    assert_eq!(probe.calls().len(), 4, "one attempt per due heartbeat");
    assert_eq!(
        retries(&s, ME).await,
        [
            (1, Transient, 1, Some(1), Some(2)),
            (2, Transient, 2, Some(2), Some(4)),
            (3, Transient, 4, Some(4), Some(8)),
            (4, Transient, 8, None, None),
        ]
    );
    // Waiting, it answered the heartbeats; the failed attempts missed theirs.
    let metrics = agent.ctx().metrics();
    assert_eq!((metrics.heartbeats_responded, metrics.heartbeats_missed), (4, 4));
    assert_eq!(agent.retry_due(), None);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_audited_as_not_retried() {
    let s = Services::new().await;
    let probe = Probe::default();
    let _agent = failed_agent(&s, &probe).await;

    assert_eq!(retries(&s, ME).await, [(1, agent_state::ErrorClass::Permanent, 1, None, None)]);
}

#[tokio::test(start_paused = true)]
async fn a_task_assign_from_the_supervisor_brings_a_failed_agent_back_to_working() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = failed_agent(&s, &probe).await;
    let content = serde_json::to_value(Assignment::Subtask { subtask: subtask("s2") }).unwrap();
    let order = s.send(from_supervisor(), ME, MessageKind::TaskAssign, content).await;

    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    assert_eq!(probe.calls()[1].messages, [order]);
    assert_eq!(agent.status(), Idle);
    let transitions = s.transitions(ME).await;
    let tail: Vec<(AgentStatus, AgentStatus, &str)> =
        transitions[3..].iter().map(|(f, t, r)| (*f, *t, r.as_str())).collect();
    assert_eq!(
        tail,
        [(Failed, Working, "reassigned by supervisor"), (Working, Idle, "work complete")]
    );
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

#[tokio::test(start_paused = true)]
async fn a_dismissal_terminates_a_failed_agent_and_unregisters_it() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = failed_agent(&s, &probe).await;
    let content = serde_json::to_value(Assignment::Dismiss { reason: "failed 3 times".into() });
    s.send(from_supervisor(), ME, MessageKind::TaskAssign, content.unwrap()).await;

    let outcome = agent.heartbeat(2).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Skipped { status: Terminated });
    assert_eq!(agent.status(), Terminated);
    assert!(!s.bus.is_registered(&id(ME)).await.unwrap());
    let last = s.transitions(ME).await.pop().unwrap();
    assert_eq!(last, (Failed, Terminated, "dismissed by supervisor: failed 3 times".to_owned()));
    assert_eq!(probe.calls().len(), 1, "a dismissal is not processed by the layer");
    assert_eq!(s.chain().await, [(id(ME), Terminated)]);
    assert_eq!(agent.heartbeat(3).await.unwrap(), HeartbeatOutcome::Skipped { status: Terminated });
}

/// Regression: a dismissal behind an assignment in the same batch used to be lost.
#[tokio::test(start_paused = true)]
async fn a_dismissal_after_an_assignment_in_the_same_batch_still_terminates_a_failed_agent() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = failed_agent(&s, &probe).await;
    let work = serde_json::to_value(Assignment::Subtask { subtask: subtask("s2") }).unwrap();
    s.send(from_supervisor(), ME, MessageKind::TaskAssign, work).await;
    let dismiss = serde_json::to_value(Assignment::Dismiss { reason: "failed 3 times".into() });
    s.send(from_supervisor(), ME, MessageKind::TaskAssign, dismiss.unwrap()).await;

    let outcome = agent.heartbeat(2).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Skipped { status: Terminated });
    assert!(!s.bus.is_registered(&id(ME)).await.unwrap());
}

/// `s.bus`, whose next acknowledgement fails (a NATS server restarting).
struct AckFailsOnce {
    inner: Arc<message_bus::InMemoryBus>,
    failed: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl MessageBus for AckFailsOnce {
    async fn register(&self, agent: &AgentId) -> Result<(), message_bus::RegisterError> {
        self.inner.register(agent).await
    }
    async fn unregister(&self, agent: &AgentId) -> Result<(), message_bus::RegisterError> {
        self.inner.unregister(agent).await
    }
    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        self.inner.is_registered(agent).await
    }
    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.registered().await
    }
    async fn send(&self, message: Message) -> Result<usize, message_bus::SendError> {
        self.inner.send(message).await
    }
    async fn send_many(
        &self,
        messages: Vec<Message>,
    ) -> Result<Vec<usize>, message_bus::SendError> {
        self.inner.send_many(messages).await
    }
    async fn take(
        &self,
        inbox: &Address,
        max: usize,
    ) -> Result<Vec<Message>, message_bus::InboxError> {
        self.inner.take(inbox, max).await
    }
    async fn ack(
        &self,
        inbox: &Address,
        ids: &[MessageId],
    ) -> Result<usize, message_bus::InboxError> {
        if !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(BackendError::new("test", "the acknowledgement timed out").into());
        }
        self.inner.ack(inbox, ids).await
    }
    async fn release(&self, inbox: &Address) -> Result<usize, message_bus::InboxError> {
        self.inner.release(inbox).await
    }
    async fn pending(&self, inbox: &Address) -> Result<usize, message_bus::InboxError> {
        self.inner.pending(inbox).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_turn_whose_acknowledgement_fails_puts_its_messages_back_and_the_next_acknowledges_them()
{
    let s = Services::new().await;
    let probe = Probe::default();
    let bus = AckFailsOnce { inner: s.bus.clone(), failed: false.into() };
    let deps = Arc::new(AgentDeps { bus: Arc::new(bus), ..(*s.deps).clone() });
    let mut agent =
        Agent::new(bottom_config(), Box::new(TestBehavior(probe.clone())), deps).unwrap();
    agent.initialize().await.unwrap();
    let message = one_message(&s).await;

    assert!(agent.heartbeat(1).await.is_err(), "the acknowledgement failed");

    // Not stranded in flight: pending again, for the next heartbeat (not for a wake before).
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 1);
    assert!(agent.waits_for_retry(1));
    assert!(!agent.waits_for_retry(2));
    // Taken again, acknowledged without being processed again; the turn ends the work.
    let outcome = agent.heartbeat(2).await.unwrap();
    assert_eq!(outcome, HeartbeatOutcome::Processed { messages: 0 });
    assert_eq!(agent.status(), Idle);
    assert_eq!(s.bus.pending(&inbox(ME)).await.unwrap(), 0);
    assert_eq!(s.bus.release(&inbox(ME)).await.unwrap(), 0, "acknowledged, not in flight");
    let seen: Vec<MessageId> = probe.calls().into_iter().flat_map(|c| c.messages).collect();
    assert_eq!(seen, [message], "processed once");
}
