//! `cargo xtask ci`'s setup step: installs and starts what the other steps need, so the README's
//! test command works on a fresh machine with only Rust installed.
//!
//! - Toolchain pieces: rustfmt and clippy (`rustup component add`), cargo-nextest and cargo-fuzz
//!   (`cargo install --locked`), each only when missing.
//! - System packages ([`PACKAGES`]), each only when missing: installed with `apt-get` when this
//!   runs as root on a Debian-like system; otherwise setup stops and names the packages and the
//!   command that installs them.
//! - A NATS server with JetStream on 127.0.0.1:4222 when `STRATA_NATS_URL` is not set and nothing
//!   answers there. A server started here is stopped when `cargo xtask ci` ends ([`Started`]),
//!   whether it passed or failed.
//! - PyPI's `mcp` (the MCP tests' server) and llama-cpp-python's server, in cached virtual
//!   environments ([`crate::pyenv`]).
//!
//! The embedded model is fetched by the tests step, with the `strata` it has just built.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::{run as run_command, succeeds};

/// A system package a step needs: how to tell it is installed, its Debian name, and what for.
struct Package {
    /// A program that answers `--version` (`-V` after a space: `dot -V`), or, starting with
    /// `dpkg:`, a package `dpkg -s` knows.
    probe: &'static str,
    /// The Debian package that provides it.
    name: &'static str,
    /// What needs it, for the messages.
    why: &'static str,
}

/// The system packages the steps need.
const PACKAGES: [Package; 11] = [
    Package { probe: "c++", name: "g++", why: "building llama.cpp (the embedded model)" },
    Package {
        probe: "ccache",
        name: "ccache",
        why: "keeping llama.cpp's compiled objects between builds of fresh checkouts",
    },
    Package { probe: "cmake", name: "cmake", why: "building llama.cpp" },
    Package { probe: "clang", name: "clang", why: "building llama.cpp's bindings" },
    Package {
        probe: "dpkg:libclang-dev",
        name: "libclang-dev",
        why: "building llama.cpp's bindings",
    },
    Package { probe: "dot -V", name: "graphviz", why: "rendering `strata lineage --format dot`" },
    Package {
        probe: "ip -V",
        name: "iproute2",
        why: "the workers' partition test (network namespaces)",
    },
    Package { probe: "chromium", name: "chromium", why: "the dashboard's browser test" },
    Package {
        probe: "chromedriver",
        name: "chromium-driver",
        why: "driving Chromium in that test",
    },
    Package { probe: "nats-server", name: "nats-server", why: "the NATS backends' tests" },
    Package {
        probe: "python3",
        name: "python3-venv",
        why: "the MCP and llama.cpp server tests' virtual environments",
    },
];

/// Processes setup started, stopped when the guard from [`started`] is dropped.
static STARTED: Mutex<Vec<Child>> = Mutex::new(Vec::new());

/// Stops every server setup started when dropped: hold it for the whole of `cargo xtask ci`.
pub(crate) struct Started;

/// The guard that stops what setup starts.
pub(crate) fn started() -> Started {
    Started
}

impl Drop for Started {
    fn drop(&mut self) {
        let mut children = STARTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for mut child in children.drain(..) {
            println!("ci: stopping the server setup started (pid {})", child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The setup step.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    toolchain()?;
    system_packages()?;
    nats()?;
    // The MCP tests' server: PyPI's `mcp` package in a cached virtual environment, where the
    // tests look for it (installed once).
    run_command(Command::new("bash").arg(root.join(".ci/mcp-setup")).stdout(Stdio::null()))?;
    crate::pyenv::llama_server().map(drop)
}

/// rustfmt, clippy, cargo-nextest and cargo-fuzz, each installed when missing.
fn toolchain() -> anyhow::Result<()> {
    for (subcommand, component) in [("fmt", "rustfmt"), ("clippy", "clippy")] {
        if !succeeds(Command::new("cargo").args([subcommand, "--version"])) {
            println!("ci: installing {component}");
            run_command(Command::new("rustup").args(["component", "add", component]))
                .with_context(|| format!("cannot install {component} (`cargo {subcommand}`)"))?;
        }
    }
    for (subcommand, krate) in [("nextest", "cargo-nextest"), ("fuzz", "cargo-fuzz")] {
        if !succeeds(Command::new("cargo").args([subcommand, "--version"])) {
            println!("ci: installing {krate} (once; it is kept in cargo's bin directory)");
            run_command(Command::new("cargo").args(["install", krate, "--locked"]))?;
        }
    }
    Ok(())
}

/// Whether `package` is installed.
fn installed(package: &Package) -> bool {
    match package.probe.strip_prefix("dpkg:") {
        Some(name) => succeeds(Command::new("dpkg").args(["-s", name])),
        None if package.name == "python3-venv" => {
            succeeds(Command::new("python3").args(["-c", "import venv, ensurepip"]))
        }
        None if package.name == "nats-server" => {
            Path::new("/usr/sbin/nats-server").is_file()
                || succeeds(Command::new("nats-server").arg("--version"))
        }
        None => match package.probe.split_once(' ') {
            Some((program, flag)) => succeeds(Command::new(program).arg(flag)),
            None => succeeds(Command::new(package.probe).arg("--version")),
        },
    }
}

/// Installs the missing system packages with apt-get as root; elsewhere fails naming them.
fn system_packages() -> anyhow::Result<()> {
    let missing: Vec<&Package> = PACKAGES.iter().filter(|package| !installed(package)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|package| package.name).collect();
    for package in &missing {
        println!("ci: {} is missing (for {})", package.name, package.why);
    }
    let root = succeeds(Command::new("sh").args(["-c", "[ \"$(id -u)\" = 0 ]"]));
    let apt = succeeds(Command::new("apt-get").arg("--version"));
    if !(root && apt) {
        bail!(
            "missing system packages: {}; install them (Debian/Ubuntu: `sudo apt-get install {}`) \
             and run `cargo xtask ci` again (run as root on a Debian-like system, it installs them itself)",
            names.join(", "),
            names.join(" ")
        );
    }
    println!("ci: installing {} with apt-get", names.join(" "));
    run_command(
        Command::new("apt-get")
            .args(["update", "-qq"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
    )?;
    run_command(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&names)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
    )?;
    let still: Vec<&str> =
        missing.iter().filter(|package| !installed(package)).map(|package| package.name).collect();
    if !still.is_empty() {
        bail!("apt-get ran, but these are still missing: {}", still.join(", "));
    }
    Ok(())
}

/// Where the NATS tests find their server, and the address they use when it is not set.
const NATS_URL_VAR: &str = "STRATA_NATS_URL";
const NATS_ADDR: &str = "127.0.0.1:4222";

/// The NATS backends' tests need a server with JetStream at `STRATA_NATS_URL`. When that is
/// not set and nothing answers on the default address, a `nats-server` is started there,
/// storing in the user's cache, and stopped when `cargo xtask ci` ends.
fn nats() -> anyhow::Result<()> {
    if std::env::var_os(NATS_URL_VAR).is_some_and(|v| !v.is_empty()) {
        return Ok(());
    }
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], 4222));
    let answers = || std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok();
    if answers() {
        return Ok(());
    }
    let program = if Path::new("/usr/sbin/nats-server").is_file() {
        "/usr/sbin/nats-server"
    } else {
        "nats-server"
    };
    let store = crate::pyenv::cache_dir()?.join("nats");
    std::fs::create_dir_all(&store)?;
    println!(
        "ci: starting nats-server with JetStream on {NATS_ADDR} (storing in {}; stopped when ci ends)",
        store.display()
    );
    let child = Command::new(program)
        .args(["-a", "127.0.0.1", "-p", "4222", "-js", "-sd"])
        .arg(&store)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    STARTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(child);
    for _ in 0..40 {
        if answers() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bail!("nats-server was started but does not answer on {NATS_ADDR} after 10 s")
}
