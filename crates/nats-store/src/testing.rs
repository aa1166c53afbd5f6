//! Namespaces for tests against a real server (feature `testing`): each one new, all of them
//! deleted from the server when the [`TestNamespaces`] is dropped, also when the test fails.

use std::sync::{Mutex, PoisonError};

use crate::{NatsError, NatsStore, test_url};

/// The namespaces a test made on the server at [`test_url`]. Dropping it deletes each one,
/// from a thread and runtime of its own, so it works inside and outside a tokio runtime.
#[derive(Debug, Default)]
pub struct TestNamespaces {
    made: Mutex<Vec<String>>,
}

impl TestNamespaces {
    /// No namespaces yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new namespace (`t` and 12 random hex digits), deleted when `self` is dropped.
    pub fn make(&self) -> String {
        let namespace = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        self.made.lock().unwrap_or_else(PoisonError::into_inner).push(namespace.clone());
        namespace
    }

    /// A connection to a new namespace on the test server.
    pub async fn connect(&self) -> Result<NatsStore, NatsError> {
        NatsStore::connect(&test_url(), &self.make()).await
    }
}

impl Drop for TestNamespaces {
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(PoisonError::into_inner));
        if made.is_empty() {
            return;
        }
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build()
            else {
                return;
            };
            runtime.block_on(async {
                for namespace in made {
                    let deleted = match NatsStore::connect(&test_url(), &namespace).await {
                        Ok(store) => store.delete_namespace().await.map(drop),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = deleted {
                        tracing::warn!(%namespace, error = %e, "cannot delete a test namespace");
                    }
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// Makes the bucket for `part` in `store`'s namespace as another schema version (0) would
/// have made it, so a test can check that a backend refuses to open it.
pub async fn make_foreign_bucket(store: &NatsStore, part: &str) -> Result<(), NatsError> {
    let name = store.name(part);
    let config = async_nats::jetstream::stream::Config {
        name: format!("KV_{name}"),
        description: Some(format!("strata schema 0: {part}")),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        allow_direct: true,
        ..Default::default()
    };
    store
        .jetstream()
        .create_stream(config)
        .await
        .map_err(|e| crate::backend_error(format!("creating the bucket `{name}`"), e))?;
    Ok(())
}

/// The description the server has for the bucket of `part` (`None` if it has none).
pub async fn bucket_description(
    store: &NatsStore,
    part: &str,
) -> Result<Option<String>, NatsError> {
    let name = format!("KV_{}", store.name(part));
    let mut stream = store
        .jetstream()
        .get_stream(&name)
        .await
        .map_err(|e| crate::backend_error(format!("opening the stream `{name}`"), e))?;
    let info =
        stream.info().await.map_err(|e| crate::backend_error(format!("reading `{name}`"), e))?;
    Ok(info.config.description.clone())
}
