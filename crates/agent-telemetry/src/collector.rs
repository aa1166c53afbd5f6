//! [`Collector`]: the spans the runtime finishes, kept in memory (no export, no network),
//! for tests of the instrumentation inside one process (`testing::Collector`, and this
//! crate's own tests).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Keeps, in memory, every span the runtime finishes while its [`subscriber`](Self::subscriber)
/// is the default: for tests of the instrumentation inside one process.
#[derive(Clone, Debug, Default)]
pub struct Collector {
    spans: Arc<Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>,
}

impl opentelemetry_sdk::trace::SpanProcessor for Collector {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
    fn on_end(&self, span: opentelemetry_sdk::trace::SpanData) {
        self.spans.lock().unwrap_or_else(PoisonError::into_inner).push(span);
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(
        &self,
        _: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

impl Collector {
    /// A `tracing` subscriber with the telemetry layer handing its spans to this collector
    /// (set it as the default for the test: `tracing::subscriber::set_default`).
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing_subscriber::registry().with(crate::OtelLayer::new(Arc::new(self.clone()), None))
    }

    /// The spans finished so far, whole.
    pub fn span_data(&self) -> Vec<opentelemetry_sdk::trace::SpanData> {
        self.spans.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The spans finished so far: name and attributes (values as text).
    pub fn spans(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|s| {
                let attributes = s
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect();
                (s.name.to_string(), attributes)
            })
            .collect()
    }
}
