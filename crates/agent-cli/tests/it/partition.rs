//! A network partition between two workers of one run, made on this machine: a network
//! namespace joined to the host by a veth pair, a `nats-server` of the test's own on the host
//! end, worker `wa` inside the namespace hosting the executors, worker `wb` on the host hosting
//! the rest, and the link cut mid-step with `ip link set <host end> down`. The cut-off worker
//! must stop acting on the leases it can no longer renew before the other worker takes its
//! agents over, and the step it was in the middle of must not run twice.
//!
//! Needs root and iproute2 (`ip netns`, veth pairs) and `nats-server` on the `PATH`. Where the
//! namespace cannot be made (not root, no `ip`), the test fails when the environment variable
//! `CI` is set (CI runs as root, so it must run there) and is skipped with a note otherwise.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// The run's id (the server is the test's own, so any id will do).
const RUN: &str = "partition";

/// The run's heartbeat: its leases live three of them (600 ms).
const HEARTBEAT: &str = "200ms";

/// How long after the cut the test waits for the stop and the takeover at most.
const PARTITION_PATIENCE: Duration = Duration::from_secs(15);

/// How long the run may take to end once the gate is open.
const END_PATIENCE: Duration = Duration::from_secs(30);

/// A network namespace joined to the host by a veth pair (`host_veth` on the host with
/// `host_ip`, its peer in the namespace); deleted when dropped (the veth pair with it), also
/// when the test fails.
struct Net {
    ns: String,
    host_veth: String,
    host_ip: String,
}

impl Net {
    /// A namespace and veth pair named after this process, on a /30 of 10.200.0.0/16 chosen by
    /// the process id (so concurrent test processes do not clash). `Err` says why not.
    fn make() -> Result<Self, String> {
        let pid = std::process::id();
        let n = pid % (256 * 64);
        let (third, base) = (n / 64, (n % 64) * 4);
        let net = Self {
            ns: format!("strata-part-{pid}"),
            host_veth: format!("sph{pid}"),
            host_ip: format!("10.200.{third}.{}", base + 1),
        };
        let ns_ip = format!("10.200.{third}.{}", base + 2);
        let ns_veth = format!("spn{pid}");
        ip(&["netns", "add", &net.ns])?;
        let ns = net.ns.as_str();
        ip(&[
            "link",
            "add",
            &net.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &ns_veth,
            "netns",
            ns,
        ])?;
        ip(&["addr", "add", &format!("{}/30", net.host_ip), "dev", &net.host_veth])?;
        ip(&["link", "set", &net.host_veth, "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{ns_ip}/30"), "dev", &ns_veth])?;
        ip(&["-n", ns, "link", "set", &ns_veth, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// Cuts the link: the namespace can no longer reach the host (the host still reaches its
    /// own address).
    fn cut(&self) {
        ip(&["link", "set", &self.host_veth, "down"]).unwrap();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = ip(&["netns", "delete", &self.ns]);
        // Gone with the namespace, unless a process still in there keeps it alive.
        let _ = ip(&["link", "delete", &self.host_veth]);
    }
}

/// `ip ARGS`; `Err` with what it printed when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A `nats-server` with JetStream listening on one address only (`TestServer` listens on
/// loopback, which the namespace cannot reach); killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(ip: &str, store: &Path) -> Self {
        let port = TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port();
        let child = Command::new("nats-server")
            .args(["-a", ip, "-p", &port.to_string(), "-js", "-sd"])
            .arg(store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start nats-server (Debian's nats-server package)");
        let server = Self { child, url: format!("nats://{ip}:{port}") };
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect((ip, port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen on {ip}:{port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agents named by the `run RUN: hosting a, b` lines of a worker's output.
fn hosted(stdout: &str) -> Vec<String> {
    let prefix = format!("run {RUN}: hosting ");
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .flat_map(|agents| agents.split(", ").map(str::to_owned))
        .collect()
}

/// The first `run RUN: stopped hosting ...` line of a worker's output.
fn stop_line(stdout: &str) -> Option<String> {
    let prefix = format!("run {RUN}: stopped hosting ");
    stdout.lines().find(|line| line.starts_with(&prefix)).map(str::to_owned)
}

/// Waits until `worker`'s stdout holds `needle`; fails if it exits first.
fn wait_for_line(worker: &mut Running, name: &str, needle: &str) {
    wait_for(&format!("{name} to print {needle:?}"), || {
        assert!(
            !worker.exited(),
            "{name} exited:\n--- stdout:\n{}\n--- stderr:\n{}",
            worker.stdout_so_far(),
            worker.stderr_so_far()
        );
        worker.stdout_so_far().contains(needle)
    });
}

#[test]
#[allow(clippy::print_stderr, reason = "says why the test did not run where it cannot")]
fn a_worker_cut_off_by_a_partition_stops_before_its_agents_are_taken_over() {
    let net = match Net::make() {
        Ok(net) => net,
        Err(why) => {
            let needs = "the partition test needs root and iproute2 (`ip netns`, veth pairs)";
            assert!(std::env::var_os("CI").is_none(), "{needs}, and CI runs it: {why}");
            eprintln!("not run: {needs} (CI runs as root): {why}");
            return;
        }
    };
    let s = Scratch::new();
    s.write("gated.toml", GATED_PLAN);
    std::fs::create_dir_all(s.path("W")).unwrap();
    std::fs::create_dir_all(s.path("js")).unwrap();
    let server = Server::start(&net.host_ip, &s.path("js"));
    let url = server.url.as_str();
    // Absolute: worker `wa` runs through `ip netns exec`.
    let (data, workspace) = (s.path("D"), s.path("W"));
    let (data, workspace) = (data.to_str().unwrap(), workspace.to_str().unwrap());

    // Worker `wa`, in the namespace, hosts the executors (the bottom layer) only.
    let a_args = [
        "netns",
        "exec",
        &net.ns,
        STRATA,
        "worker",
        "--nats",
        url,
        "--id",
        "wa",
        "--layer",
        "bottom",
        "--data",
        data,
        "--workspace",
        workspace,
    ];
    let mut a_command = Command::new("ip");
    a_command.args(a_args).current_dir(s.root()).stdin(Stdio::null());
    let mut a = Scratch::spawn_command(&a_args, &mut a_command);
    wait_for_line(&mut a, "worker wa", "waiting for runs");

    // The run waits for a worker to host its proposing power; `wa` takes the executors.
    let mut run = s.spawn(&[
        "run",
        "gated.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        RUN,
        "--nats",
        url,
        "--heartbeat",
        HEARTBEAT,
        "--no-sync",
        "--quiet",
    ]);
    wait_for_line(&mut a, "worker wa", &format!("run {RUN}: hosting "));
    let a_agents = hosted(&a.stdout_so_far());
    assert!(
        !a_agents.is_empty() && a_agents.iter().all(|a| a.starts_with("bottom-")),
        "wa should host the executors: {a_agents:?}"
    );

    // Worker `wb`, on the host, takes the rest; the run goes on to the gate, on an executor.
    let gate = Gate(s.path("W/go"));
    let mut b =
        s.spawn(&["worker", "--nats", url, "--id", "wb", "--data", data, "--workspace", workspace]);
    wait_for_line(&mut b, "worker wb", &format!("run {RUN}: hosting "));
    let waiting = s.path("W/waiting");
    wait_for("the gate step to start on wa", || {
        assert!(!run.exited(), "the run ended before the gate:\n{}", run.stderr_so_far());
        waiting.exists()
    });
    assert!(
        hosted(&b.stdout_so_far()).iter().all(|agent| !a_agents.contains(agent)),
        "wb hosts an executor before the cut:\n{}",
        b.stdout_so_far()
    );

    // The cut. `wa` can no longer renew its leases: it must stop hosting its agents before
    // they expire on the server, hence before `wb` can take them.
    net.cut();
    let cut = Instant::now();
    // wa's command is past its `touch waiting`: the file coming back means the step started
    // again.
    std::fs::remove_file(&waiting).unwrap();
    let mut stopped: Option<(Duration, String)> = None;
    let mut taken: Option<Duration> = None;
    let mut stopped_first = false;
    loop {
        // `wa` is read before `wb`: its line seen, then `wb`'s not, shows the order.
        let a_out = a.stdout_so_far();
        let at = cut.elapsed();
        let b_hosts = hosted(&b.stdout_so_far());
        let takeover = b_hosts.iter().any(|agent| a_agents.contains(agent));
        if stopped.is_none()
            && let Some(line) = stop_line(&a_out)
        {
            stopped = Some((at, line));
            stopped_first = !takeover;
        }
        if takeover && taken.is_none() {
            taken = Some(cut.elapsed());
        }
        let all_taken = a_agents.iter().all(|agent| b_hosts.contains(agent));
        if (stopped.is_some() && all_taken) || cut.elapsed() > PARTITION_PATIENCE {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    // The gate's command still runs in wa's process tree (a command outlives its call, to its
    // own timeout): opened, it finishes there. If wb ran the step again, a second `ran` is
    // counted.
    gate.open();
    let opened = Instant::now();
    while !run.exited() && opened.elapsed() < END_PATIENCE {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = run.exited();
    let run = if ended { run.finish() } else { run.kill() };
    let count = std::fs::read_to_string(s.path("W/count.txt")).unwrap_or_default();
    let again = waiting.exists();
    let b = b.kill();
    let a = a.kill();
    // The tool calls as the run audited them, read from the server (the host still reaches it).
    let audit = s.strata(&["inspect", RUN, "audit", "--data", "D"]);
    let report = format!(
        "wa hosted {a_agents:?}; after the cut: wa stopped {stopped:?}, wb took over {taken:?} \
         (wa's stop seen before wb's takeover: {stopped_first}); the gate started again: \
         {again}; count.txt {count:?}; the run {}\n--- wa stdout:\n{}--- wa stderr:\n{}\
         --- wb stdout:\n{}--- wb stderr:\n{}--- run stdout:\n{}--- run stderr:\n{}--- its audit:\n{}{}",
        if ended { format!("ended with {:?}", run.status.code()) } else { "hung".to_owned() },
        a.stdout,
        a.stderr,
        b.stdout,
        b.stderr,
        run.stdout,
        run.stderr,
        audit.stdout,
        audit.stderr
    );

    let Some(_) = &stopped else {
        panic!("wa, cut off, never stopped hosting its agents: {report}")
    };
    assert!(taken.is_some(), "wb did not take wa's agents over: {report}");
    assert!(stopped_first, "wb took the agents over before wa stopped hosting them: {report}");
    assert!(!again, "the gate step ran again after the takeover: {report}");
    assert!(ended, "the run did not end within {END_PATIENCE:?} of the gate opening: {report}");
    // wb shares wa's data directory (one machine), so it finds the command's crash journal,
    // waits for the command wa began and adopts its result: the step runs once and the task
    // completes.
    assert_eq!(count, "ran\n", "the gate step did not run exactly once: {report}");
    assert_eq!(run.status.code(), Some(0), "the task did not complete: {report}");
    drop(server);
    drop(net);
}
