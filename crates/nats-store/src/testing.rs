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

/// A `nats-server` of a test's own on a free port of loopback, with JetStream storing in a
/// directory or without JetStream: it can be killed (as in a crash) and started again with what
/// it stored. Killed when dropped.
#[derive(Debug)]
pub struct TestServer {
    port: u16,
    jetstream: Option<std::path::PathBuf>,
    child: Option<std::process::Child>,
}

impl TestServer {
    /// A server with JetStream storing in `dir`.
    pub fn with_jetstream(dir: &std::path::Path) -> std::io::Result<Self> {
        Self::start(Some(dir.to_owned()))
    }

    /// A server without JetStream.
    pub fn without_jetstream() -> std::io::Result<Self> {
        Self::start(None)
    }

    fn start(jetstream: Option<std::path::PathBuf>) -> std::io::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = Self { port, jetstream, child: None };
        server.restart()?;
        Ok(server)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, after [`kill`](Self::kill)) and waits, up to 5 s, until it
    /// listens. Needs `nats-server` on the `PATH` (Debian's nats-server package).
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        let mut command = std::process::Command::new("nats-server");
        command.args(["-a", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(dir) = &self.jetstream {
            command.arg("-js").arg("-sd").arg(dir);
        }
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(std::io::Error::other(format!(
            "nats-server did not listen on port {} within 5 s",
            self.port
        )))
    }

    /// Stops the server with SIGSTOP: its connections stay open and nothing is answered, as
    /// on a host that hangs; [`thaw`](Self::thaw) lets it go on with what it was sent.
    pub fn freeze(&self) -> std::io::Result<()> {
        self.signal("-STOP")
    }

    /// Lets a [`freeze`](Self::freeze)d server go on (SIGCONT).
    pub fn thaw(&self) -> std::io::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> std::io::Result<()> {
        let Some(child) = &self.child else {
            return Err(std::io::Error::other("the server is not running"));
        };
        let status =
            std::process::Command::new("kill").arg(signal).arg(child.id().to_string()).status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("kill {signal} failed: {status}")))
        }
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}
