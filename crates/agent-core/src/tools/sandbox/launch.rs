//! The sandbox launcher: the program put before `sh -c COMMAND` in every sandboxed call.
//!
//! It is this crate's own code, run in a fresh process of an executable that hands it control
//! first thing in `main` ([`run_sandbox_launcher_if_requested`]): `strata`, or the small
//! `strata-sandbox` binary of this crate. Being a fresh, single-threaded process, it may fork.
//!
//! Two stages, both from the same executable:
//!
//! 1. **outside** (`EXE __strata_sandbox SPEC -- PROGRAM ARGS...`): puts itself into the call's
//!    control groups (as root: `pids` and `memory`, created here with their limits), then has
//!    [`hakoniwa`] build the sandbox: new user, mount, PID, IPC, UTS and (unless the network
//!    is allowed) network namespaces, the host's top-level directories bound read-only, a fresh
//!    `/dev` and `/proc`, a private `/tmp` and `/dev/shm` (tmpfs, each capped), the hidden
//!    paths covered, the workspace bound read-write, the rlimits, `no_new_privs` and the
//!    parent-death signal. Inside, it runs stage 2 (this executable, bound at
//!    [`INNER_PATH`]). When that ends it removes the control groups and the empty skeleton
//!    directory it made, and exits with the command's status (128 + N for signal N).
//! 2. **inside** (`/.strata-sandbox __strata_sandbox_inner SPEC -- PROGRAM ARGS...`, PID 1 of
//!    the sandbox): makes every mount read-only but the workspace, `/tmp`, `/dev/shm` and
//!    `/proc` (and `/proc/sys` and friends read-only too), forbids new user namespaces
//!    (`user.max_user_namespaces = 0` in the sandbox's own), brings the loopback of its own
//!    network namespace up (without the network), starts a new session, drops every
//!    capability (bounding set included), then starts the program and stays as the
//!    namespace's init (reaping orphans) until it ends.
//!
//! Without a sandbox (`Sandbox::unsandboxed`) the launcher only sets the parent-death signal
//! and `exec`s the program (pass-through).

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The first argument that makes an executable act as the launcher (stage 1).
pub(crate) const LAUNCH_ARG: &str = "__strata_sandbox";
/// The first argument of stage 2, inside the sandbox.
const INNER_ARG: &str = "__strata_sandbox_inner";
/// Where the launcher's own executable is bound inside the sandbox, to run stage 2.
const INNER_PATH: &str = "/.strata-sandbox";
/// The version of [`Spec`]: a launcher of another version refuses it (a stale binary).
const SPEC_VERSION: u32 = 1;
/// The exit code of a launcher that could not set the sandbox up.
pub(crate) const SETUP_FAILED: i32 = 126;
/// Processes of the sandbox's machinery in a call's `pids` cgroup: the launcher, hakoniwa's
/// process that holds the namespaces and the namespace's init (stage 2).
pub(crate) const CGROUP_OVERHEAD: u64 = 3;

/// Set once this process handed itself to [`run_sandbox_launcher_if_requested`]: its own
/// executable is then a launcher.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// What the launcher is to build, passed as JSON on its command line (no secret in it: the
/// command's environment is inherited, never written here).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) version: u32,
    /// `false`: pass-through (parent-death signal, then `exec`).
    pub(crate) sandboxed: bool,
    pub(crate) workspace: PathBuf,
    pub(crate) network: bool,
    pub(crate) memory_bytes: u64,
    pub(crate) processes: u64,
    pub(crate) file_bytes: u64,
    pub(crate) open_files: u64,
    pub(crate) tmp_bytes: u64,
    /// Canonical paths to hide, with whether each is a directory.
    pub(crate) hides: Vec<(PathBuf, bool)>,
    /// Canonical paths shown read-only.
    pub(crate) shown: Vec<PathBuf>,
    /// The call's control groups to create, fill and remove (root only).
    pub(crate) cgroups: Vec<PathBuf>,
    /// Where the empty skeleton of the sandbox's root is made (and removed).
    pub(crate) scratch: PathBuf,
    /// Names the call (the skeleton directory carries it).
    pub(crate) tag: String,
}

impl Spec {
    pub(crate) fn new(sandboxed: bool) -> Self {
        Self {
            version: SPEC_VERSION,
            sandboxed,
            workspace: PathBuf::new(),
            network: false,
            memory_bytes: 0,
            processes: 0,
            file_bytes: 0,
            open_files: 0,
            tmp_bytes: 0,
            hides: Vec::new(),
            shown: Vec::new(),
            cgroups: Vec::new(),
            scratch: std::env::temp_dir(),
            tag: String::new(),
        }
    }
}

/// Hands this process to the sandbox launcher when it was started as one, and never returns
/// then; otherwise returns at once. Call it first thing in `main`, before any thread or async
/// runtime starts: `strata` does, so its own executable serves as the launcher of its
/// commands. A program that does not call it needs the `strata-sandbox` binary next to its
/// executable (see [`Sandbox`](super::Sandbox)).
pub fn run_sandbox_launcher_if_requested() {
    REGISTERED.store(true, Ordering::SeqCst);
    let mut args = std::env::args_os().skip(1);
    let stage = match args.next() {
        Some(arg) if arg == LAUNCH_ARG => Stage::Outside,
        Some(arg) if arg == INNER_ARG => Stage::Inside,
        _ => return,
    };
    let code = match parse(args) {
        Ok((spec, program)) => match stage {
            Stage::Outside => outside(&spec, &program),
            Stage::Inside => inside(&spec, &program),
        },
        Err(message) => {
            report(&message);
            SETUP_FAILED
        }
    };
    std::process::exit(code);
}

/// The launcher's own entry, for the `strata-sandbox` binary: like
/// [`run_sandbox_launcher_if_requested`], but a process started without the launcher's
/// arguments is told how it is used.
pub fn sandbox_launcher_main() -> ! {
    run_sandbox_launcher_if_requested();
    report("this is Strata's sandbox launcher, which Strata runs itself; it takes no commands");
    std::process::exit(2);
}

enum Stage {
    Outside,
    Inside,
}

/// Whether this process is a launcher (it called [`run_sandbox_launcher_if_requested`]).
pub(crate) fn registered() -> bool {
    REGISTERED.load(Ordering::SeqCst)
}

/// `SPEC -- PROGRAM ARGS...`.
fn parse(mut args: impl Iterator<Item = OsString>) -> Result<(Spec, Vec<OsString>), String> {
    let spec = args.next().ok_or("no sandbox specification")?;
    let spec = spec.to_str().ok_or("the sandbox specification is not UTF-8")?;
    let rebuild = "rebuild the launcher (`cargo build -p strata-agent-core --bin strata-sandbox`)";
    let value: serde_json::Value = serde_json::from_str(spec)
        .map_err(|err| format!("unreadable sandbox specification ({err}): {rebuild}"))?;
    let version = value.get("version").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(SPEC_VERSION)) {
        return Err(format!(
            "the sandbox specification is of version {version:?}, this launcher reads \
             {SPEC_VERSION}: {rebuild}"
        ));
    }
    let spec: Spec = serde_json::from_value(value)
        .map_err(|err| format!("unreadable sandbox specification ({err}): {rebuild}"))?;
    if args.next().is_none_or(|sep| sep != "--") {
        return Err("expected `--` after the sandbox specification".into());
    }
    let program: Vec<OsString> = args.collect();
    if program.is_empty() {
        return Err("no program to run".into());
    }
    Ok((spec, program))
}

fn report(message: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "strata-sandbox: {message}");
}

/// Stage 1, on the host.
fn outside(spec: &Spec, program: &[OsString]) -> i32 {
    // Dies with whoever started it (`timeout`, or the process that holds an MCP server).
    let parent = nix::unistd::getppid();
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err()
        || nix::unistd::getppid() != parent
    {
        return SETUP_FAILED;
    }
    if !spec.sandboxed {
        let err = std::process::Command::new(&program[0]).args(&program[1..]).exec();
        report(&format!("cannot run {:?}: {err}", program[0]));
        return 127;
    }
    let mut made = Vec::new();
    for cgroup in &spec.cgroups {
        match enter_cgroup(cgroup, spec) {
            Ok(()) => made.push(cgroup.clone()),
            Err(err) => {
                report(&format!("cannot set up the control group {}: {err}", cgroup.display()));
                leave_cgroups(&made);
                return SETUP_FAILED;
            }
        }
    }
    remove_stale_skeletons(&spec.scratch);
    let skeleton = spec.scratch.join(format!(
        "{}-{}{SKELETON_MARK}{}",
        spec.tag,
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let code = match std::fs::DirBuilder::new().mode_0700().create(&skeleton) {
        Ok(()) => {
            let code = run_sandboxed(spec, program, &skeleton);
            // Only empty directories, empty files and links are left: the mounts were in the
            // sandbox's own mount namespace, which is gone.
            if let Err(err) = std::fs::remove_dir_all(&skeleton) {
                report(&format!("cannot remove {}: {err}", skeleton.display()));
            }
            code
        }
        Err(err) => {
            report(&format!("cannot create {}: {err}", skeleton.display()));
            SETUP_FAILED
        }
    };
    leave_cgroups(&made);
    code
}

/// Separates a skeleton directory's launcher pid from its random part.
const SKELETON_MARK: &str = "-sbx-";

/// Removes the skeleton directories of launchers that were killed before they could (their
/// pid, in the name, is no launcher any more). A skeleton holds only empty directories and
/// files and links, and the sandbox that used it is gone with its launcher.
fn remove_stale_skeletons(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("strata-") {
            continue;
        }
        let Some((head, random)) = name.rsplit_once(SKELETON_MARK) else { continue };
        let Some((_, pid)) = head.rsplit_once('-') else { continue };
        if random.len() != 32 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let launcher_alive = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
            cmdline.split(|b| *b == 0).any(|arg| arg == LAUNCH_ARG.as_bytes())
        });
        if !launcher_alive && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

trait DirBuilderMode {
    fn mode_0700(&mut self) -> &mut Self;
}

impl DirBuilderMode for std::fs::DirBuilder {
    fn mode_0700(&mut self) -> &mut Self {
        use std::os::unix::fs::DirBuilderExt as _;
        self.mode(0o700)
    }
}

/// Builds the sandbox with hakoniwa and runs stage 2 in it; the command's exit code.
fn run_sandboxed(spec: &Spec, program: &[OsString], skeleton: &Path) -> i32 {
    use hakoniwa::{Container, MountOptions, Namespace, Runctl};
    let Some(args) = utf8_all(program) else {
        report("the command line is not UTF-8");
        return SETUP_FAILED;
    };
    let Ok(spec_json) = serde_json::to_string(spec) else { return SETUP_FAILED };
    let mut container = Container::new();
    container.unshare(Namespace::Ipc).unshare(Namespace::Uts);
    if !spec.network {
        container.unshare(Namespace::Network);
    }
    container.rootdir(skeleton).runctl(Runctl::MountFallback);
    if !mount_host_root(&mut container) {
        report("cannot list `/`");
        return SETUP_FAILED;
    }
    let tmpfs = |size: u64, mode: &str| Some(format!("size={size},mode={mode}"));
    let flags = MountOptions::NOSUID | MountOptions::NODEV;
    container.devfsmount("/dev");
    container.mount("tmpfs", "/dev/shm", "tmpfs", flags, tmpfs(spec.tmp_bytes, "1777"));
    container.mount("tmpfs", "/tmp", "tmpfs", flags, tmpfs(spec.tmp_bytes, "1777"));
    let Some(workspace) = utf8_path(spec.workspace.clone()) else {
        report("the workspace's path is not UTF-8");
        return SETUP_FAILED;
    };
    // Mounts are made in the order of their paths, so a directory is hidden before the
    // workspace inside it is bound again, and a hidden path inside the workspace after it.
    for (path, is_dir) in &spec.hides {
        let Some(path) = utf8_path(path.clone()) else { continue };
        if *is_dir {
            // Holds only mount points; made read-only in stage 2.
            container.mount("tmpfs", &path, "tmpfs", flags, tmpfs(1024 * 1024, "755"));
        } else {
            container.bindmount_ro("/dev/null", &path);
        }
    }
    container.bindmount_rw(&workspace, &workspace);
    for path in &spec.shown {
        if let Some(path) = utf8_path(path.clone()) {
            container.bindmount_ro(&path, &path);
        }
    }
    // This executable, for stage 2.
    let Some(exe) = std::env::current_exe().ok().and_then(utf8_path) else {
        report("cannot find this executable's path");
        return SETUP_FAILED;
    };
    container.bindmount_ro(&exe, INNER_PATH);
    set_limits(&mut container, spec);
    let mut command = container.command(INNER_PATH);
    command.arg(INNER_ARG).arg(&spec_json).arg("--").args(&args).current_dir(&workspace);
    // The environment the caller chose (already minimal), with a home inside the sandbox.
    for (key, value) in std::env::vars() {
        if key != "HOME" {
            command.env(&key, &value);
        }
    }
    command.env("HOME", "/tmp");
    match command.status() {
        Ok(status) => {
            if status.exit_code.is_none() && status.code == 125 {
                report(&format!("cannot build the sandbox: {}", status.reason));
                return SETUP_FAILED;
            }
            status.code
        }
        Err(err) => {
            report(&format!("cannot build the sandbox: {err}"));
            SETUP_FAILED
        }
    }
}

/// The host's top-level entries in `container`, read-only (its `/dev`, `/proc` and `/tmp` are
/// replaced); `false` if `/` cannot be listed.
fn mount_host_root(container: &mut hakoniwa::Container) -> bool {
    let Ok(entries) = std::fs::read_dir("/") else { return false };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if matches!(name.as_str(), "dev" | "proc" | "tmp") {
            continue;
        }
        let path = format!("/{name}");
        match entry.file_type() {
            Ok(kind) if kind.is_symlink() => {
                if let Some(target) = std::fs::read_link(&path).ok().and_then(utf8_path) {
                    container.symlink(&target, &path);
                }
            }
            Ok(kind) if kind.is_dir() || kind.is_file() => {
                container.bindmount_ro(&path, &path);
            }
            _ => {}
        }
    }
    true
}

/// The resource limits of `spec` on `container`'s processes (no core dumps).
fn set_limits(container: &mut hakoniwa::Container, spec: &Spec) {
    use hakoniwa::Rlimit;
    for (limit, value) in [
        (Rlimit::As, spec.memory_bytes),
        (Rlimit::Nproc, spec.processes),
        (Rlimit::Fsize, spec.file_bytes),
        (Rlimit::Nofile, spec.open_files),
        (Rlimit::Core, 0),
    ] {
        container.setrlimit(limit, value, value);
    }
}

fn utf8_path(path: PathBuf) -> Option<String> {
    path.into_os_string().into_string().ok()
}

fn utf8_all(items: &[OsString]) -> Option<Vec<String>> {
    items.iter().map(|item| item.to_str().map(str::to_owned)).collect()
}

/// Stage 2, PID 1 of the sandbox, still with every capability in its own user namespace:
/// seals the sandbox, starts the program as its child and stays as the namespace's init,
/// reaping orphans, until the program ends; then exits with its status (128 + N for signal
/// N), which ends every process left in the namespace. (The program is not PID 1 itself, so
/// signals reach it as anywhere else.)
fn inside(spec: &Spec, program: &[OsString]) -> i32 {
    use nix::sys::wait::{WaitStatus, waitpid};
    if let Err(err) = seal(spec) {
        report(&format!("cannot seal the sandbox: {err}"));
        return SETUP_FAILED;
    }
    let child = match std::process::Command::new(&program[0]).args(&program[1..]).spawn() {
        Ok(child) => child,
        Err(err) => {
            report(&format!("cannot run {:?}: {err}", program[0]));
            return 127;
        }
    };
    let Ok(pid) = i32::try_from(child.id()) else { return SETUP_FAILED };
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(reaped, code)) if reaped.as_raw() == pid => return code,
            Ok(WaitStatus::Signaled(reaped, signal, _)) if reaped.as_raw() == pid => {
                return 128 + signal as i32;
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return SETUP_FAILED,
        }
    }
}

/// Read-only mounts, no new user namespaces, the own loopback up, a new session, no
/// capabilities.
fn seal(spec: &Spec) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|err| format!("cannot read /proc/self/mountinfo: {err}"))?;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else { continue };
        if !options.split(',').any(|o| o == "rw") {
            continue;
        }
        let point = PathBuf::from(unescape(point));
        if stays_writable(spec, &point) {
            continue;
        }
        remount_read_only(&point)?;
    }
    // New user namespaces: none (the limit of the sandbox's own namespace binds its
    // descendants).
    std::fs::write("/proc/sys/user/max_user_namespaces", "0")
        .map_err(|err| format!("cannot forbid new user namespaces: {err}"))?;
    for path in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
        if Path::new(path).exists() {
            mount(Some(path), path, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
                .map_err(|err| format!("cannot bind {path}: {err}"))?;
            remount_read_only(Path::new(path))?;
        }
    }
    if !spec.network {
        loopback_up().map_err(|err| format!("cannot bring the loopback interface up: {err}"))?;
    }
    nix::unistd::setsid().map_err(|err| format!("cannot start a session: {err}"))?;
    for set in [caps::CapSet::Ambient, caps::CapSet::Inheritable, caps::CapSet::Bounding] {
        caps::clear(None, set).map_err(|err| format!("cannot drop capabilities: {err}"))?;
    }
    for set in [caps::CapSet::Effective, caps::CapSet::Permitted] {
        caps::clear(None, set).map_err(|err| format!("cannot drop capabilities: {err}"))?;
    }
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|err| format!("cannot set the parent-death signal: {err}"))?;
    Ok(())
}

/// Brings `lo` up in the sandbox's own network namespace (a new namespace has it down), with
/// one rtnetlink request (`RTM_SETLINK`, `IFF_UP`) acknowledged by the kernel: a command can
/// then serve and reach 127.0.0.1 and ::1 inside its sandbox. The namespace has no other
/// interface, so nothing outside it is reachable.
fn loopback_up() -> Result<(), String> {
    use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
    use netlink_packet_route::RouteNetlinkMessage;
    use netlink_packet_route::link::{LinkFlags, LinkMessage};
    use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
    let index = nix::net::if_::if_nametoindex("lo").map_err(|err| format!("no `lo`: {err}"))?;
    let mut link = LinkMessage::default();
    link.header.index = index;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    let mut request = NetlinkMessage::from(RouteNetlinkMessage::SetLink(link));
    request.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    request.header.sequence_number = 1;
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    let io = |err: std::io::Error| format!("rtnetlink: {err}");
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(io)?;
    socket.bind_auto().map_err(io)?;
    socket.connect(&SocketAddr::new(0, 0)).map_err(io)?;
    socket.send(&buf, 0).map_err(io)?;
    let (reply, _) = socket.recv_from_full().map_err(io)?;
    let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&reply)
        .map_err(|err| format!("unreadable rtnetlink reply: {err}"))?;
    match reply.payload {
        // The acknowledgement: an error message with no error.
        NetlinkPayload::Error(ack) if ack.code.is_none() => Ok(()),
        NetlinkPayload::Error(err) => Err(format!("rtnetlink: {}", err.to_io())),
        other => Err(format!("unexpected rtnetlink reply: {other:?}")),
    }
}

/// The workspace (but what is hidden or shown read-only in it), `/tmp`, `/dev/shm`, `/dev/pts`
/// and `/proc` stay writable.
fn stays_writable(spec: &Spec, point: &Path) -> bool {
    if ["/tmp", "/dev/shm", "/dev/pts", "/proc"].iter().any(|p| point == Path::new(p)) {
        return true;
    }
    // Hidden or shown paths inside the workspace stay read-only (not those around it: a
    // workspace in the hidden home).
    let covered = |path: &Path| path.starts_with(&spec.workspace) && point.starts_with(path);
    point.starts_with(&spec.workspace)
        && !spec.hides.iter().any(|(hidden, _)| covered(hidden))
        && !spec.shown.iter().any(|shown| covered(shown))
}

/// Makes the mount at `point` read-only, keeping the flags the kernel locked on it.
fn remount_read_only(point: &Path) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    use nix::sys::statvfs::{FsFlags, statvfs};
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    let stat = statvfs(point).map_err(|err| format!("cannot stat {}: {err}", point.display()))?;
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if stat.flags().contains(fs) {
            flags |= ms;
        }
    }
    mount(None::<&str>, point, None::<&str>, flags, None::<&str>)
        .map_err(|err| format!("cannot make {} read-only: {err}", point.display()))
}

/// A mount point of `/proc/self/mountinfo`, its octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> OsString {
    use std::os::unix::ffi::OsStringExt as _;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Some(value) = std::str::from_utf8(&bytes[i + 1..i + 4])
                .ok()
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        {
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

// ---- Control groups ---------------------------------------------------------------------------

/// Creates `cgroup` (first removing a leftover of an earlier attempt of the same call, its
/// processes killed), sets its limits and moves this process into it.
fn enter_cgroup(cgroup: &Path, spec: &Spec) -> std::io::Result<()> {
    if cgroup.exists() {
        remove_cgroup(cgroup, Duration::from_secs(2));
    }
    std::fs::create_dir(cgroup)?;
    let set = |file: &str, value: String| -> std::io::Result<()> {
        let path = cgroup.join(file);
        if path.exists() { std::fs::write(path, value) } else { Ok(()) }
    };
    set("pids.max", (spec.processes + CGROUP_OVERHEAD).to_string())?;
    set("memory.limit_in_bytes", spec.memory_bytes.to_string())?;
    // Swap counted too, where the kernel accounts it (best effort).
    let _ = set("memory.memsw.limit_in_bytes", spec.memory_bytes.to_string());
    set("memory.max", spec.memory_bytes.to_string())?;
    let _ = set("memory.swap.max", "0".to_owned());
    std::fs::write(cgroup.join("cgroup.procs"), std::process::id().to_string())
}

/// Moves this process back to each control group's parent and removes them.
fn leave_cgroups(cgroups: &[PathBuf]) {
    for cgroup in cgroups {
        if let Some(parent) = cgroup.parent() {
            let _ = std::fs::write(parent.join("cgroup.procs"), std::process::id().to_string());
        }
        remove_cgroup(cgroup, Duration::from_secs(2));
    }
}

/// Removes `cgroup`, killing what is still in it once half of `grace` has passed without it
/// emptying. Best effort: reports a cgroup it could not remove through tracing.
pub(crate) fn remove_cgroup(cgroup: &Path, grace: Duration) {
    let start = Instant::now();
    loop {
        match std::fs::remove_dir(cgroup) {
            Ok(()) => return,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
            Err(err) if start.elapsed() >= grace => {
                tracing::warn!(cgroup = %cgroup.display(), %err, "could not remove a call's cgroup");
                return;
            }
            Err(_) => {}
        }
        if start.elapsed() >= grace / 2 {
            kill_members(cgroup);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILL to every process in `cgroup` (all of them belong to the call it is named for).
fn kill_members(cgroup: &Path) {
    let Ok(procs) = std::fs::read_to_string(cgroup.join("cgroup.procs")) else { return };
    let me = std::process::id();
    for pid in procs.lines().filter_map(|line| line.trim().parse::<i32>().ok()) {
        if pid > 1 && u32::try_from(pid).is_ok_and(|pid| pid != me) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
