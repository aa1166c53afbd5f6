//! A real OTLP/HTTP receiver for tests: an HTTP server on loopback that accepts
//! `POST /v1/traces` and `POST /v1/metrics` with protobuf bodies, decodes them with the
//! OpenTelemetry protocol's own types (`opentelemetry-proto`), and keeps what it received.
//!
//! [`Collector`] keeps the spans in memory instead, for tests of the instrumentation inside
//! one process (no export, no network).
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! let receiver = agent_telemetry::testing::Receiver::start().await?;
//! // run something with `--otlp {receiver.endpoint()}` ...
//! let spans = receiver.spans();
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message as _;

/// A span as received.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    /// Trace id, lower-case hex.
    pub trace_id: String,
    /// Span id, lower-case hex.
    pub span_id: String,
    /// Parent span id, lower-case hex; empty for a root.
    pub parent_span_id: String,
    /// Name.
    pub name: String,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Linked spans: (trace id, span id), hex.
    pub links: Vec<(String, String)>,
    /// The resource's `service.name`.
    pub service: String,
    /// The resource's attributes, values as text.
    pub resource: BTreeMap<String, String>,
    /// The instrumentation scope's name.
    pub scope: String,
    /// Start, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// End, in nanoseconds since the Unix epoch.
    pub end_ns: u64,
}

impl ReceivedSpan {
    /// The attribute `key`, if it is there.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// One data point of a metric as received: its attributes and value (a sum's or gauge's
/// value, a histogram's sum).
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedPoint {
    /// The metric's name.
    pub metric: String,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// The value.
    pub value: f64,
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<ReceivedSpan>>,
    points: Mutex<Vec<ReceivedPoint>>,
    requests: Mutex<u64>,
}

/// The receiver; it stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    received: Arc<Received>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn traces(State(received): State<Arc<Received>>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "text/plain")], Vec::new());
    };
    let mut spans = Vec::new();
    for resource in &request.resource_spans {
        let resource_attributes =
            resource.resource.as_ref().map(|r| attributes(&r.attributes)).unwrap_or_default();
        let service = resource_attributes.get("service.name").cloned().unwrap_or_default();
        for scope in &resource.scope_spans {
            let scope_name = scope.scope.as_ref().map(|s| s.name.clone()).unwrap_or_default();
            for span in &scope.spans {
                spans.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    attributes: attributes(&span.attributes),
                    links: span.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    service: service.clone(),
                    resource: resource_attributes.clone(),
                    scope: scope_name.clone(),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                });
            }
        }
    }
    received.spans.lock().unwrap_or_else(PoisonError::into_inner).extend(spans);
    *received.requests.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

async fn metrics(State(received): State<Arc<Received>>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "text/plain")], Vec::new());
    };
    let mut points = Vec::new();
    for resource in &request.resource_metrics {
        for scope in &resource.scope_metrics {
            for m in &scope.metrics {
                let mut push = |attrs: &[KeyValue], value: f64| {
                    points.push(ReceivedPoint {
                        metric: m.name.clone(),
                        attributes: attributes(attrs),
                        value,
                    });
                };
                let number = |v: &Option<number_data_point::Value>| match v {
                    Some(number_data_point::Value::AsDouble(d)) => *d,
                    Some(number_data_point::Value::AsInt(i)) => *i as f64,
                    None => 0.0,
                };
                match &m.data {
                    Some(metric::Data::Sum(sum)) => {
                        for p in &sum.data_points {
                            push(&p.attributes, number(&p.value));
                        }
                    }
                    Some(metric::Data::Gauge(gauge)) => {
                        for p in &gauge.data_points {
                            push(&p.attributes, number(&p.value));
                        }
                    }
                    Some(metric::Data::Histogram(h)) => {
                        for p in &h.data_points {
                            push(&p.attributes, p.sum.unwrap_or(0.0));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    received.points.lock().unwrap_or_else(PoisonError::into_inner).extend(points);
    *received.requests.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportMetricsServiceResponse::default().encode_to_vec(),
    )
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts a receiver on `addr`.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(received.clone());
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "the OTLP test receiver stopped");
            }
        });
        Ok(Self { addr, received, server })
    }

    /// The base URL to export to (`--otlp`, `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.spans.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The metric points received so far.
    pub fn points(&self) -> Vec<ReceivedPoint> {
        self.received.points.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many export requests were received.
    pub fn requests(&self) -> u64 {
        *self.received.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub use crate::collector::Collector;
