//! The runtime's metrics, counted from its spans and events as they end ([`Instruments`]).
//!
//! | metric | kind | attributes | counted on |
//! |---|---|---|---|
//! | `strata.messages` | counter | `agent.id`, `agent.layer`, `message.kind` | a message sent (`strata.message`, `strata.delegation` spans) |
//! | `strata.transitions` | counter | `agent.id`, `agent.layer`, `to` | a lifecycle transition (event `strata.event = "transition"`) |
//! | `strata.failures` | counter | `agent.id`, `agent.layer`, `failure` (`agent`, `tool`) | a transition to `failed`; a tool call that did not succeed |
//! | `strata.retries` | counter | `agent.id`, `agent.layer` | a heartbeat retried (event `strata.event = "retry"`) |
//! | `gen_ai.client.token.usage` | histogram | `gen_ai.token.type`, `gen_ai.request.model`, `agent.id`, `agent.layer` | a reasoning call (`chat` span) |
//! | `strata.cost` | counter (USD) | `agent.id`, `agent.layer`, `gen_ai.request.model` | a reasoning call with a price |

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

/// The instruments, made once from a [`Meter`].
#[derive(Clone, Debug)]
pub struct Instruments {
    messages: Counter<u64>,
    transitions: Counter<u64>,
    failures: Counter<u64>,
    retries: Counter<u64>,
    tokens: Histogram<u64>,
    cost: Counter<f64>,
}

fn find<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a opentelemetry::Value> {
    attributes.iter().find(|a| a.key.as_str() == key).map(|a| &a.value)
}

fn as_u64(value: Option<&opentelemetry::Value>) -> Option<u64> {
    match value? {
        opentelemetry::Value::I64(v) => u64::try_from(*v).ok(),
        opentelemetry::Value::F64(v) if *v >= 0.0 => Some(*v as u64),
        _ => None,
    }
}

fn as_f64(value: Option<&opentelemetry::Value>) -> Option<f64> {
    match value? {
        opentelemetry::Value::I64(v) => Some(*v as f64),
        opentelemetry::Value::F64(v) => Some(*v),
        _ => None,
    }
}

fn who(agent: Option<&str>, layer: Option<&str>) -> Vec<KeyValue> {
    vec![
        KeyValue::new("agent.id", agent.unwrap_or("").to_owned()),
        KeyValue::new("agent.layer", layer.unwrap_or("").to_owned()),
    ]
}

impl Instruments {
    /// The instruments on `meter`.
    pub fn new(meter: &Meter) -> Self {
        Self {
            messages: meter
                .u64_counter("strata.messages")
                .with_description("Messages sent by agents")
                .build(),
            transitions: meter
                .u64_counter("strata.transitions")
                .with_description("Lifecycle transitions of agents")
                .build(),
            failures: meter
                .u64_counter("strata.failures")
                .with_description("Agents that failed, and tool calls that did not succeed")
                .build(),
            retries: meter
                .u64_counter("strata.retries")
                .with_description("Heartbeats retried after a transient error")
                .build(),
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used by reasoning calls")
                .build(),
            cost: meter
                .f64_counter("strata.cost")
                .with_unit("USD")
                .with_description("What reasoning calls cost, at the team file's prices")
                .build(),
        }
    }

    /// Counts what an event says (`strata.event` tells which).
    pub(crate) fn event(
        &self,
        event: Option<&str>,
        agent: Option<&str>,
        layer: Option<&str>,
        attributes: &[KeyValue],
    ) {
        match event {
            Some("transition") => {
                let to =
                    find(attributes, "to").map(|v| v.as_str().into_owned()).unwrap_or_default();
                let mut attrs = who(agent, layer);
                if to == "failed" {
                    let mut failure = attrs.clone();
                    failure.push(KeyValue::new("failure", "agent"));
                    self.failures.add(1, &failure);
                }
                attrs.push(KeyValue::new("to", to));
                self.transitions.add(1, &attrs);
            }
            Some("retry") => self.retries.add(1, &who(agent, layer)),
            _ => {}
        }
    }

    /// Counts what a finished span says, by its name.
    pub(crate) fn span(
        &self,
        name: &str,
        agent: Option<&str>,
        layer: Option<&str>,
        attributes: &[KeyValue],
    ) {
        let operation = find(attributes, "gen_ai.operation.name").map(|v| v.as_str());
        if name == "strata.message" || name == "strata.delegation" {
            if let Some(kind) = find(attributes, "message.kind") {
                let mut attrs = who(agent, layer);
                attrs.push(KeyValue::new("message.kind", kind.as_str().into_owned()));
                self.messages.add(1, &attrs);
            }
        } else if operation.as_deref() == Some("execute_tool") {
            let ok = find(attributes, "tool.outcome").map(|v| v.as_str()).as_deref() == Some("ok");
            if !ok {
                let mut attrs = who(agent, layer);
                attrs.push(KeyValue::new("failure", "tool"));
                self.failures.add(1, &attrs);
            }
        } else if operation.as_deref() == Some("chat") {
            let model = find(attributes, "gen_ai.request.model")
                .map(|v| v.as_str().into_owned())
                .unwrap_or_default();
            for (field, kind) in
                [("gen_ai.usage.input_tokens", "input"), ("gen_ai.usage.output_tokens", "output")]
            {
                if let Some(n) = as_u64(find(attributes, field)) {
                    let mut attrs = who(agent, layer);
                    attrs.push(KeyValue::new("gen_ai.token.type", kind));
                    attrs.push(KeyValue::new("gen_ai.request.model", model.clone()));
                    self.tokens.record(n, &attrs);
                }
            }
            if let Some(cost) = as_f64(find(attributes, "strata.cost_usd")) {
                let mut attrs = who(agent, layer);
                attrs.push(KeyValue::new("gen_ai.request.model", model));
                self.cost.add(cost, &attrs);
            }
        }
    }
}
