//! The loop: phases and events in order, the final state, the iteration limit, the inbox and
//! outbox, and a tool the agent does not hold.

use agent_core::AuditLog;
use agent_core::protocol::HelpRequest;
use agent_core::{ReasoningRequest, ScriptedAnswer};
use agent_ooda::{SEND_MESSAGE, StepEnd};
use agent_state::ooda::{MessageRole, OodaEventKind, OodaMessage, StopReason};
use agent_state::{AgentId, MessageKind, TaskFailure};
use message_bus::MessageBus;
use serde_json::json;

use crate::support::*;

fn kinds(end: &StepEnd) -> Vec<OodaEventKind> {
    end.steps.iter().map(|s| s.step_type).collect()
}

#[tokio::test(start_paused = true)]
async fn an_agent_runs_its_steps_with_the_events_in_order_and_ends_in_the_right_state() {
    use OodaEventKind::*;
    let w = World::new().await;
    let mut ctx = w.ctx(script([
        call("write_file", json!({"path": "notes.md", "content": "hello\n"})),
        call("read_file", json!({"path": "notes.md"})),
        finish("notes.md says hello"),
    ]));
    let mut ooda = ooda(config(2));
    let mut stream = ooda.subscribe();

    let end = ooda.run(&mut ctx, 10).await.unwrap();

    assert_eq!(
        kinds(&end),
        [Observe, Decide, Act, Reflect, Observe, Decide, Act, Reflect, Observe, Decide]
    );
    assert_eq!(end.stop, Some(StopReason::Finished { summary: "notes.md says hello".into() }));
    assert_eq!(w.read("notes.md"), "hello\n");
    let state = ooda.state();
    assert_eq!((state.iteration, state.state_version), (3, 1));
    let outputs: Vec<&str> = state
        .memory
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(outputs.len(), 2);
    assert_eq!(outputs[1], "hello\n", "the read's output is remembered");
    assert_eq!(state.knowledge["failures"], json!(0));
    // The audit and the stream saw the same events, in the same order.
    let audited: Vec<OodaEventKind> = w.events().await.iter().map(|e| e.kind).collect();
    assert_eq!(audited, kinds(&end));
    let mut streamed = Vec::new();
    while let Ok(event) = stream.try_recv() {
        streamed.push(event.kind);
    }
    assert_eq!(streamed, audited);
    // A stopped loop runs nothing more and says why.
    let again = ooda.step(&mut ctx).await.unwrap();
    assert!(again.steps.is_empty());
    assert_eq!(again.stop, end.stop);
}

#[tokio::test(start_paused = true)]
async fn max_iterations_stops_the_loop_with_a_typed_reason() {
    let w = World::new().await;
    w.write("notes.md", "x");
    let reads = (0..5).map(|_| call("read_file", json!({"path": "notes.md"})));
    let mut ctx = w.ctx(script(reads));
    let mut c = config(2);
    c.max_iterations = 2;
    let mut ooda = ooda(c);

    let end = ooda.run(&mut ctx, 10).await.unwrap();

    assert_eq!(end.stop, Some(StopReason::MaxIterations { limit: 2 }));
    assert_eq!(end.steps.len(), 8, "two full loops");
    assert_eq!(ooda.state().iteration, 2);
    assert_eq!(ooda.stopped(), Some(&StopReason::MaxIterations { limit: 2 }));
    assert!(end.stop.unwrap().to_string().contains("max_iterations"));
}

#[tokio::test(start_paused = true)]
async fn messages_wait_in_the_inbox_for_the_next_observe_and_the_outbox_goes_through_the_bus() {
    let w = World::new().await;
    w.bus.register(&AgentId::new("peer")).await.unwrap();
    let reasoner = std::sync::Arc::new(script([
        call(SEND_MESSAGE, json!({"to": "peer", "content": "is notes.md yours?"})),
        finish("asked"),
    ]));
    let mut ctx = w.ctx_shared(reasoner.clone());
    let mut ooda = ooda(config(2));
    ooda.receive_message(OodaMessage {
        from: Some(AgentId::new("peer")),
        ..OodaMessage::new(MessageRole::Agent, "please look at notes.md", START)
    });
    assert_eq!(ooda.state().inbox.len(), 1, "waits for the next step");

    ooda.run(&mut ctx, 5).await.unwrap();

    assert!(ooda.state().inbox.is_empty());
    assert!(ooda.state().memory.iter().any(|m| m.content == "please look at notes.md"));
    // Decide saw the message in its history.
    let ReasoningRequest::NextAction { history, .. } = &reasoner.requests()[0] else {
        panic!("{:?}", reasoner.requests())
    };
    assert!(history.iter().any(|r| r.event && r.output == "please look at notes.md"));
    // The message it sent went through the bus.
    let sent = w.bus.take(&agent_state::Address::Agent(AgentId::new("peer")), 10).await.unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].kind, MessageKind::PeerHelpRequest);
    assert_eq!(
        serde_json::from_value::<HelpRequest>(sent[0].content.clone()).unwrap(),
        HelpRequest::Speak { message: "is notes.md yours?".into() }
    );
    assert!(ooda.state().outbox.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_tool_the_agent_does_not_hold_is_refused_and_the_loop_goes_on() {
    let w = World::new().await;
    let mut ctx = w.ctx(script([call("shell", json!({"command": "true"})), finish("gave up")]));
    let mut ooda = ooda(config(2));

    let end = ooda.run(&mut ctx, 5).await.unwrap();

    let act = end.steps.iter().find(|s| s.step_type == OodaEventKind::Act).unwrap();
    assert!(!act.success);
    assert!(act.error.as_deref().unwrap().contains("not one of this agent's tools"));
    assert!(matches!(end.stop, Some(StopReason::Finished { .. })));
    assert_eq!(ooda.state().knowledge["failures"], json!(1));
}

#[tokio::test(start_paused = true)]
async fn a_failing_phase_emits_an_error_event_and_fails_the_step() {
    let w = World::new().await;
    let failure = agent_core::ReasonError::Backend { reasoner: "s".into(), message: "down".into() };
    let mut ctx = w.ctx(script([ScriptedAnswer::Fail(failure)]));
    let mut ooda = ooda(config(2));

    assert!(ooda.step(&mut ctx).await.is_err());

    let events = w.events().await;
    let last = events.last().unwrap();
    assert_eq!(last.kind, OodaEventKind::Error);
    assert_eq!(last.data["phase"], "decide");
    assert_eq!(ooda.state().iteration, 0, "the step did not count");
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_repeats_itself_is_stopped_by_the_loop_guard_with_the_typed_reason() {
    let w = World::new().await;
    w.write("notes.md", "x");
    let reads = (0..10).map(|_| call("read_file", json!({"path": "notes.md"})));
    let mut ctx = w.ctx(script(reads));
    let mut ooda = ooda(config(2));

    let end = ooda.run(&mut ctx, 10).await.unwrap();

    // The third identical call in a row (the default `repeat_limit`) is not made.
    let Some(StopReason::Stuck { failure: TaskFailure::Loop { agent, item, repeats } }) = &end.stop
    else {
        panic!("not stopped by the loop guard: {:?}", end.stop)
    };
    assert_eq!((agent.as_str(), *repeats), (ME, 3));
    assert!(item.contains("read_file"), "{item}");
    let acts = end.steps.iter().filter(|s| s.step_type == OodaEventKind::Act).count();
    assert_eq!(acts, 2, "two reads made, the third refused");
    assert_eq!(ooda.stopped(), end.stop.as_ref());
    // Audited as every working agent's loop is.
    let stuck: Vec<TaskFailure> = w
        .audit
        .records(Some(&AgentId::new(ME)))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            agent_core::AuditEvent::Stuck { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(stuck.len(), 1);
    assert!(matches!(stuck[0], TaskFailure::Loop { repeats: 3, .. }));
    // Stopped, it stays stopped.
    let again = ooda.step(&mut ctx).await.unwrap();
    assert_eq!(again.stop, end.stop);
}

#[tokio::test(start_paused = true)]
async fn a_loop_guard_with_a_higher_limit_lets_more_repeats_through() {
    let w = World::new().await;
    w.write("notes.md", "x");
    let reads = (0..10).map(|_| call("read_file", json!({"path": "notes.md"})));
    let mut ctx = w.ctx(script(reads));
    let guards = agent_state::GuardSettings { repeat_limit: 5, ..Default::default() };
    let mut ooda = ooda(config(2)).with_guards(guards);

    let end = ooda.run(&mut ctx, 10).await.unwrap();

    assert!(
        matches!(
            &end.stop,
            Some(StopReason::Stuck { failure: TaskFailure::Loop { repeats: 5, .. } })
        ),
        "{:?}",
        end.stop
    );
    let acts = end.steps.iter().filter(|s| s.step_type == OodaEventKind::Act).count();
    assert_eq!(acts, 4);
}
