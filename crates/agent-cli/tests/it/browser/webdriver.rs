//! A minimal W3C WebDriver client for Debian's headless Chromium: it starts `chromedriver` on a
//! free loopback port, opens one session, and speaks the protocol's JSON over HTTP (reqwest on a
//! runtime of its own, so callers stay synchronous). It does what the dashboard's tests and
//! bench need and no more: navigate, run a script, find elements, click, read attributes and
//! text, take a screenshot.
//!
//! Dropping a [`Browser`] deletes the session (chromedriver quits Chromium and removes its
//! profile) and then kills chromedriver, so a failing test leaves no browser behind.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The key of an element reference in the W3C protocol.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long chromedriver may take to answer `/status` after it starts.
const DRIVER_PATIENCE: Duration = Duration::from_secs(20);

/// The longest one WebDriver command may take (a navigation waits for the page's load).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A headless Chromium driven through its own chromedriver.
pub(crate) struct Browser {
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: Option<String>,
    driver: Child,
}

/// One element of the page, by its WebDriver reference.
#[derive(Debug, Clone)]
pub(crate) struct Element(String);

/// `name` on the `PATH`, if it is there and executable.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| {
        std::fs::metadata(candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// A port on loopback that nothing listens on now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Browser {
    /// Chromium (`chromium`) and chromedriver (`chromedriver`) from the `PATH`, as Debian's
    /// `chromium` and `chromium-driver` packages install them; `Err` says which is missing.
    pub(crate) fn installed() -> Result<(PathBuf, PathBuf), String> {
        let chromium = on_path("chromium");
        let driver = on_path("chromedriver");
        match (chromium, driver) {
            (Some(chromium), Some(driver)) => Ok((chromium, driver)),
            (chromium, driver) => {
                let missing: Vec<&str> =
                    [("chromium", chromium.is_none()), ("chromedriver", driver.is_none())]
                        .into_iter()
                        .filter_map(|(name, gone)| gone.then_some(name))
                        .collect();
                Err(format!(
                    "{} not on the PATH (Debian: `apt-get install chromium chromium-driver`, as `.ci/run` does)",
                    missing.join(" and ")
                ))
            }
        }
    }

    /// Starts chromedriver on a free loopback port and opens a session of headless Chromium
    /// with a 1400×1000 window. `Err` when either is not installed.
    pub(crate) fn start() -> Result<Self, String> {
        let (chromium, driver) = Self::installed()?;
        let port = free_port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", driver.display()))?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let http = reqwest::Client::builder().timeout(COMMAND_TIMEOUT).build().unwrap();
        let mut browser = Self { runtime, http, session: None, driver: child };
        let base = format!("http://127.0.0.1:{port}");
        browser.wait_for_driver(&base);
        browser.open_session(&base, &chromium);
        Ok(browser)
    }

    fn wait_for_driver(&mut self, base: &str) {
        let deadline = Instant::now() + DRIVER_PATIENCE;
        loop {
            if let Some(status) = self.driver.try_wait().unwrap() {
                panic!("chromedriver exited at its start: {status}");
            }
            if let Ok(status) = self.request(reqwest::Method::GET, &format!("{base}/status"), None)
                && status["ready"] == true
            {
                return;
            }
            assert!(Instant::now() < deadline, "chromedriver did not answer on {base} in time");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn open_session(&mut self, base: &str, chromium: &Path) {
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium.to_str().unwrap(),
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--window-size=1400,1000",
                        ],
                    },
                },
            },
        });
        let value = self
            .request(reqwest::Method::POST, &format!("{base}/session"), Some(capabilities))
            .unwrap_or_else(|e| panic!("chromedriver did not open a session: {e}"));
        let id = value["sessionId"].as_str().expect("a session id");
        self.session = Some(format!("{base}/session/{id}"));
    }

    /// One WebDriver command: its `value`, or the protocol's error as text.
    fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        self.runtime.block_on(async {
            let mut request = self.http.request(method, url);
            if let Some(body) = body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string());
            }
            let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
            let ok = response.status().is_success();
            let text = response.text().await.map_err(|e| format!("{url}: {e}"))?;
            let mut reply: Value = serde_json::from_str(&text)
                .map_err(|e| format!("{url}: not JSON ({e}): {text}"))?;
            let value = reply["value"].take();
            if ok {
                Ok(value)
            } else {
                Err(format!("{url}: {} ({})", value["error"], value["message"]))
            }
        })
    }

    /// A command of this session (`path` after `/session/ID`); panics on a WebDriver error.
    #[track_caller]
    fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let session = self.session.as_deref().expect("a session");
        self.request(method, &format!("{session}{path}"), body).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Navigates to `url` and waits for the page's load.
    #[track_caller]
    pub(crate) fn goto(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body: `return` gives the result) with `args` as `arguments`.
    #[track_caller]
    pub(crate) fn execute(&self, script: &str, args: &[Value]) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs `script` asynchronously: it ends by calling `arguments[arguments.length - 1]` with
    /// its result (within 30 s, WebDriver's default script timeout).
    #[track_caller]
    pub(crate) fn execute_async(&self, script: &str, args: &[Value]) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Every element that matches the CSS `selector`, in document order.
    #[track_caller]
    pub(crate) fn find_all(&self, selector: &str) -> Vec<Element> {
        let found = self.command(
            reqwest::Method::POST,
            "/elements",
            Some(json!({ "using": "css selector", "value": selector })),
        );
        found.as_array().expect("a list of elements").iter().map(Element::of).collect()
    }

    /// The first element that matches `selector`, if any.
    #[track_caller]
    pub(crate) fn find(&self, selector: &str) -> Option<Element> {
        self.find_all(selector).into_iter().next()
    }

    /// Clicks `element` (scrolled into view first, as WebDriver does).
    #[track_caller]
    pub(crate) fn click(&self, element: &Element) {
        self.command(
            reqwest::Method::POST,
            &format!("/element/{}/click", element.0),
            Some(json!({})),
        );
    }

    /// The attribute `name` of `element`, or `None` when it has none.
    #[track_caller]
    pub(crate) fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        let value = self.command(
            reqwest::Method::GET,
            &format!("/element/{}/attribute/{name}", element.0),
            None,
        );
        value.as_str().map(str::to_owned)
    }

    /// The rendered text of `element`.
    #[track_caller]
    pub(crate) fn text(&self, element: &Element) -> String {
        let value =
            self.command(reqwest::Method::GET, &format!("/element/{}/text", element.0), None);
        value.as_str().unwrap_or_default().to_owned()
    }

    /// A screenshot of the window, as PNG bytes.
    #[track_caller]
    pub(crate) fn screenshot(&self) -> Vec<u8> {
        let value = self.command(reqwest::Method::GET, "/screenshot", None);
        base64_decode(value.as_str().expect("a base64 screenshot"))
    }

    /// Polls `probe` every 50 ms until it gives `Some`, for at most `patience`; panics naming
    /// `what` (and the last thing `probe` saw, through `last`) when it never does.
    #[track_caller]
    pub(crate) fn wait_for<T>(
        &self,
        what: &str,
        patience: Duration,
        mut probe: impl FnMut(&Self) -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + patience;
        loop {
            match probe(self) {
                Ok(found) => return found,
                Err(last) => {
                    assert!(
                        Instant::now() < deadline,
                        "gave up waiting for {what}; last seen: {last}"
                    )
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Element {
    fn of(value: &Value) -> Self {
        Self(value[ELEMENT_KEY].as_str().expect("an element reference").to_owned())
    }

    /// This element as a script argument (it arrives as the DOM element).
    pub(crate) fn arg(&self) -> Value {
        json!({ ELEMENT_KEY: self.0 })
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The session first: chromedriver quits Chromium and removes its profile directory.
        // Killed first, it would leave Chromium running with no parent.
        if let Some(session) = self.session.take() {
            let _ = self.request(reqwest::Method::DELETE, &session, None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (with padding, as WebDriver sends screenshots) to bytes.
fn base64_decode(text: &str) -> Vec<u8> {
    fn sextet(c: u8) -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {:?}", c as char),
        }
    }
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for chunk in clean.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let bits =
            data.iter().enumerate().fold(0u32, |acc, (i, &c)| acc | sextet(c) << (18 - 6 * i));
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..data.len()]);
    }
    out
}

#[test]
fn base64_decodes_with_and_without_padding() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("aGV5"), b"hey");
    assert_eq!(base64_decode("iVBO\nRw0K\nGgo="), b"\x89PNG\r\n\x1a\n");
    assert_eq!(base64_decode(""), b"");
}
