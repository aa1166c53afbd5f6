//! [`OtelLayer`]: a `tracing` layer that turns the runtime's spans (target [`TARGET`]) into
//! OpenTelemetry spans with ids of their own choosing (see the crate docs), and its events and
//! spans into metrics ([`crate::metrics`]).
//!
//! Only callsites of target [`TARGET`] are enabled: every other `tracing` span and event of the
//! process stays disabled, and so costs what it costs with no subscriber at all.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::ids;
use crate::metrics::Instruments;

/// The `tracing` target of every span and event this layer exports: the runtime's
/// instrumentation uses it, and nothing else is looked at.
pub const TARGET: &str = "strata::otel";

/// Fields that steer the layer and are not exported as attributes.
mod keys {
    pub(super) const RUN: &str = "run.id";
    pub(super) const TASK: &str = "strata.task";
    pub(super) const SPAN_KEY: &str = "strata.span_key";
    pub(super) const PARENT_KEY: &str = "strata.parent_key";
    pub(super) const LINKS: &str = "strata.links";
    pub(super) const NAME: &str = "otel.name";
    pub(super) const KIND: &str = "otel.kind";
    pub(super) const STATUS: &str = "otel.status_code";
    pub(super) const EVENT: &str = "strata.event";
    pub(super) const AGENT: &str = "agent.id";
    pub(super) const LAYER: &str = "agent.layer";
}

/// What the layer keeps of an open span (in the registry's extensions).
struct SpanState {
    name: Cow<'static, str>,
    start: SystemTime,
    context: SpanContext,
    parent: SpanId,
    parent_remote: bool,
    links: Vec<Link>,
    kind: SpanKind,
    status: Status,
    run: Option<Arc<str>>,
    agent: Option<Arc<str>>,
    layer: Option<Arc<str>>,
    attributes: Vec<KeyValue>,
}

/// The fields of a span or an event, as they were recorded.
#[derive(Default)]
struct Fields {
    run: Option<String>,
    task: Option<String>,
    span_key: Option<String>,
    parent_key: Option<String>,
    links: Option<String>,
    name: Option<String>,
    kind: Option<String>,
    status: Option<String>,
    event: Option<String>,
    agent: Option<String>,
    layer: Option<String>,
    attributes: Vec<KeyValue>,
}

impl Fields {
    fn set(&mut self, field: &Field, value: Value) {
        let text = || value.as_str().into_owned();
        match field.name() {
            keys::RUN => self.run = Some(text()),
            keys::TASK => self.task = Some(text()),
            keys::SPAN_KEY => self.span_key = Some(text()),
            keys::PARENT_KEY => self.parent_key = Some(text()),
            keys::LINKS => self.links = Some(text()),
            keys::NAME => self.name = Some(text()),
            keys::KIND => self.kind = Some(text()),
            keys::STATUS => self.status = Some(text()),
            keys::EVENT => self.event = Some(text()),
            "message" => {}
            name => {
                if name == keys::AGENT {
                    self.agent = Some(text());
                } else if name == keys::LAYER {
                    self.layer = Some(text());
                }
                self.attributes.push(KeyValue::new(name, value));
            }
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, Value::from(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, i64::try_from(value).map_or_else(|_| Value::F64(value as f64), Value::I64));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, Value::F64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, Value::Bool(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, Value::from(format!("{value:?}")));
    }
}

fn kind(name: Option<&str>) -> SpanKind {
    match name {
        Some("client") => SpanKind::Client,
        Some("server") => SpanKind::Server,
        Some("producer") => SpanKind::Producer,
        Some("consumer") => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

fn status(code: Option<&str>) -> Status {
    match code {
        Some(c) if c.eq_ignore_ascii_case("error") => Status::error(""),
        Some(c) if c.eq_ignore_ascii_case("ok") => Status::Ok,
        _ => Status::Unset,
    }
}

fn remote(trace: TraceId, span: SpanId) -> SpanContext {
    SpanContext::new(trace, span, TraceFlags::SAMPLED, true, TraceState::NONE)
}

/// A `tracing` layer exporting the runtime's spans to a [`SpanProcessor`] (a batch processor
/// over OTLP, in [`crate::Telemetry`]) and counting its metrics.
pub struct OtelLayer {
    processor: Arc<dyn SpanProcessor>,
    metrics: Option<Instruments>,
    scope: InstrumentationScope,
    ids: RandomIdGenerator,
}

impl std::fmt::Debug for OtelLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelLayer").finish_non_exhaustive()
    }
}

impl OtelLayer {
    /// A layer handing each finished span to `processor`, and counting metrics on `metrics`
    /// when given.
    pub fn new(processor: Arc<dyn SpanProcessor>, metrics: Option<Instruments>) -> Self {
        let scope =
            InstrumentationScope::builder("strata").with_version(env!("CARGO_PKG_VERSION")).build();
        Self { processor, metrics, scope, ids: RandomIdGenerator::default() }
    }

    /// Where a new span goes: its context, its parent (and whether that parent is in another
    /// process, or not exported yet), and its links.
    fn place(
        &self,
        fields: &Fields,
        run: Option<&str>,
        ancestor: Option<&SpanState>,
    ) -> (SpanContext, SpanId, bool, Vec<Link>) {
        let run_str = run.unwrap_or("");
        let span_id = match &fields.span_key {
            Some(key) => ids::span_id(run_str, key),
            None => self.ids.new_span_id(),
        };
        let mut links = Vec::new();
        let (trace, parent, parent_remote) = if let Some(task) = &fields.task {
            let task_key = ids::task_key(task);
            let trace = ids::trace_id(run_str, &task_key);
            let (parent, remote_parent) = if let Some(key) = &fields.parent_key {
                (ids::span_id(run_str, key), true)
            } else if let Some(a) = ancestor.filter(|a| a.context.trace_id() == trace) {
                (a.context.span_id(), false)
            } else if fields.span_key.as_deref() == Some(task_key.as_str()) {
                (SpanId::INVALID, false)
            } else {
                (ids::span_id(run_str, &task_key), true)
            };
            if let Some(a) = ancestor.filter(|a| a.context.trace_id() != trace) {
                // The task's trace is its own; where it was started from (the run) is linked.
                links.push(Link::with_context(a.context.clone()));
            }
            (trace, parent, remote_parent)
        } else if let Some(a) = ancestor {
            (a.context.trace_id(), a.context.span_id(), false)
        } else if run.is_some() {
            (ids::trace_id(run_str, "run"), SpanId::INVALID, false)
        } else {
            (self.ids.new_trace_id(), SpanId::INVALID, false)
        };
        if let Some(list) = &fields.links {
            for key in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                links.push(Link::with_context(remote(trace, ids::span_id(run_str, key))));
            }
        }
        let context =
            SpanContext::new(trace, span_id, TraceFlags::SAMPLED, false, TraceState::NONE);
        (context, parent, parent_remote, links)
    }
}

impl<S> Layer<S> for OtelLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if metadata.target() == TARGET {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        metadata.target() == TARGET
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        // The nearest enclosing span this layer keeps, and what it inherits from it.
        let parent = span.parent();
        let ancestor_ext = parent.as_ref().map(|p| p.extensions());
        let ancestor = ancestor_ext.as_ref().and_then(|e| e.get::<SpanState>());
        let run: Option<Arc<str>> = match fields.run.take() {
            Some(run) => Some(run.into()),
            None => ancestor.and_then(|a| a.run.clone()),
        };
        let agent =
            fields.agent.take().map(Arc::from).or_else(|| ancestor.and_then(|a| a.agent.clone()));
        let layer =
            fields.layer.take().map(Arc::from).or_else(|| ancestor.and_then(|a| a.layer.clone()));
        let (context, parent_id, parent_remote, links) =
            self.place(&fields, run.as_deref(), ancestor);
        if let Some(run) = &run {
            fields.attributes.push(KeyValue::new(keys::RUN, run.to_string()));
        }
        if let Some(task) = &fields.task {
            fields.attributes.push(KeyValue::new("strata.task.id", task.clone()));
        }
        let state = SpanState {
            name: fields.name.take().map_or(Cow::Borrowed(attrs.metadata().name()), Cow::Owned),
            start: SystemTime::now(),
            context,
            parent: parent_id,
            parent_remote,
            links,
            kind: kind(fields.kind.as_deref()),
            status: status(fields.status.as_deref()),
            run,
            agent,
            layer,
            attributes: fields.attributes,
        };
        drop(ancestor_ext);
        span.extensions_mut().insert(state);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut ext = span.extensions_mut();
        let Some(state) = ext.get_mut::<SpanState>() else { return };
        if let Some(name) = fields.name {
            state.name = Cow::Owned(name);
        }
        if let Some(code) = fields.status {
            state.status = status(Some(&code));
        }
        if let Some(agent) = fields.agent {
            state.agent = Some(agent.into());
        }
        if let Some(layer) = fields.layer {
            state.layer = Some(layer.into());
        }
        for kv in fields.attributes {
            match state.attributes.iter_mut().find(|a| a.key == kv.key) {
                Some(existing) => *existing = kv,
                None => state.attributes.push(kv),
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(metrics) = &self.metrics else { return };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let current = ctx.event_span(event);
        let ext = current.as_ref().map(|s| s.extensions());
        let state = ext.as_ref().and_then(|e| e.get::<SpanState>());
        let agent = fields.agent.as_deref().or_else(|| state.and_then(|s| s.agent.as_deref()));
        let layer = fields.layer.as_deref().or_else(|| state.and_then(|s| s.layer.as_deref()));
        metrics.event(fields.event.as_deref(), agent, layer, &fields.attributes);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(state) = span.extensions_mut().remove::<SpanState>() else { return };
        if let Some(metrics) = &self.metrics {
            metrics.span(
                &state.name,
                state.agent.as_deref(),
                state.layer.as_deref(),
                &state.attributes,
            );
        }
        let mut links = SpanLinks::default();
        links.links = state.links;
        let data = SpanData {
            span_context: state.context,
            parent_span_id: state.parent,
            parent_span_is_remote: state.parent_remote,
            span_kind: state.kind,
            name: state.name,
            start_time: state.start,
            end_time: SystemTime::now(),
            attributes: state.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links,
            status: state.status,
            instrumentation_scope: self.scope.clone(),
        };
        self.processor.on_end(data);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn collected(work: impl FnOnce()) -> Vec<SpanData> {
        let sink = crate::collector::Collector::default();
        tracing::subscriber::with_default(sink.subscriber(), work);
        sink.span_data()
    }

    fn find<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
        spans.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn spans_are_placed_by_the_run_task_and_message_they_name() {
        let spans = collected(|| {
            let run = tracing::info_span!(target: "strata::otel", "strata.run", run.id = "r");
            run.in_scope(|| {
                let task = tracing::info_span!(target: "strata::otel", "strata.task",
                    strata.task = "t1", strata.span_key = "task:t1");
                task.in_scope(|| {
                    let _m = tracing::info_span!(target: "strata::otel", "strata.delegation",
                        strata.task = "t1", strata.span_key = "msg:m1")
                    .entered();
                });
                // Another agent (here: the same run, no enclosing task) handles message m1.
                let hb = tracing::info_span!(target: "strata::otel", "strata.heartbeat",
                    agent.layer = "bottom", strata.task = "t1", strata.parent_key = "msg:m1",
                    strata.links = "msg:m2");
                hb.in_scope(|| {
                    let _t = tracing::info_span!(target: "strata::otel", "execute_tool",
                        otel.name = "execute_tool shell")
                    .entered();
                    // Not the telemetry's target: never exported.
                    let _other = tracing::info_span!("elsewhere").entered();
                });
                let _idle =
                    tracing::info_span!(target: "strata::otel", "strata.heartbeat2").entered();
            });
        });
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert!(!names.contains(&"elsewhere"), "{names:?}");
        let task_trace = ids::trace_id("r", "task:t1");
        let run = find(&spans, "strata.run");
        assert_eq!(run.span_context.trace_id(), ids::trace_id("r", "run"));
        assert_eq!(run.parent_span_id, SpanId::INVALID);

        let task = find(&spans, "strata.task");
        assert_eq!(task.span_context.trace_id(), task_trace);
        assert_eq!(task.span_context.span_id(), ids::span_id("r", "task:t1"));
        assert_eq!(task.parent_span_id, SpanId::INVALID);
        assert_eq!(task.links.links.len(), 1);
        assert_eq!(task.links.links[0].span_context.span_id(), run.span_context.span_id());

        let sent = find(&spans, "strata.delegation");
        assert_eq!(sent.span_context.span_id(), ids::span_id("r", "msg:m1"));
        assert_eq!(sent.parent_span_id, task.span_context.span_id());

        let hb = find(&spans, "strata.heartbeat");
        assert_eq!(hb.span_context.trace_id(), task_trace);
        assert_eq!(hb.parent_span_id, sent.span_context.span_id());
        assert!(hb.parent_span_is_remote);
        let linked: Vec<SpanId> = hb.links.links.iter().map(|l| l.span_context.span_id()).collect();
        assert!(linked.contains(&ids::span_id("r", "msg:m2")), "{linked:?}");

        let tool = find(&spans, "execute_tool shell");
        assert_eq!(tool.span_context.trace_id(), task_trace);
        assert_eq!(tool.parent_span_id, hb.span_context.span_id());
        assert!(tool.attributes.iter().any(|kv| kv.key.as_str() == "run.id"));

        let idle = find(&spans, "strata.heartbeat2");
        assert_eq!(idle.span_context.trace_id(), run.span_context.trace_id());
        assert_eq!(idle.parent_span_id, run.span_context.span_id());
    }
}
