//! The sandbox every `shell` command runs in: bubblewrap (`bwrap`) namespaces plus resource
//! limits, or explicitly none ([`Sandbox::unsandboxed`]). See [`Sandbox`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A `shell` command's default address-space limit: 8 GiB (compilers reserve a lot of address
/// space they never touch).
pub const DEFAULT_MEMORY_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// A `shell` command's default limit on processes and threads alive at once: 512.
pub const DEFAULT_PROCESSES: u64 = 512;
/// A `shell` command's default limit on the size of any file it writes: 1 GiB.
pub const DEFAULT_FILE_BYTES: u64 = 1024 * 1024 * 1024;
/// A `shell` command's default limit on open files per process: 4096.
pub const DEFAULT_OPEN_FILES: u64 = 4096;
/// The default size of a sandbox's private `/tmp`: 256 MiB.
pub const DEFAULT_TMP_BYTES: u64 = 256 * 1024 * 1024;

/// Where the kernel's `pids` controller is mounted on cgroup v1 systems.
const PIDS_CGROUP_V1: &str = "/sys/fs/cgroup/pids";

/// The resource limits of a sandboxed command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Address space of each process, in bytes (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// Processes and threads alive at once (`RLIMIT_NPROC`, and a `pids` cgroup as root).
    pub processes: u64,
    /// The largest file a process may write, in bytes (`RLIMIT_FSIZE`).
    pub file_bytes: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// The size of the private `/tmp`, in bytes.
    pub tmp_bytes: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            processes: DEFAULT_PROCESSES,
            file_bytes: DEFAULT_FILE_BYTES,
            open_files: DEFAULT_OPEN_FILES,
            tmp_bytes: DEFAULT_TMP_BYTES,
        }
    }
}

/// How `shell` commands are confined: a bubblewrap sandbox (the default) or, explicitly,
/// none ([`Sandbox::unsandboxed`]).
///
/// A sandboxed command (Linux only) sees:
///
/// - the whole system read-only (`--ro-bind / /`), a fresh `/dev` and `/proc` (its own PID
///   namespace: no other process of the machine is visible), an empty private `/tmp` of at most
///   [`SandboxLimits::tmp_bytes`];
/// - the workspace read-write, and nothing else writable;
/// - hidden (an empty read-only directory, or an empty file, mounted over them): the user's
///   home (`$HOME`, `/home`, `/root`), `/run` (where daemons' sockets live), the password and
///   sudo files and SSH host keys, the run's crash journals and every path added with
///   [`Sandbox::hide`] (a run hides its data directory: other runs and its own store);
/// - no network (a network namespace of its own, with only its own loopback) unless
///   [`Sandbox::with_network`] allows it; no capabilities; no new user namespaces;
/// - limits: address space, file size, open files and processes ([`SandboxLimits`]). The
///   process limit is `RLIMIT_NPROC` in the sandbox's own user namespace; the kernel never
///   applies it to root, so when Strata runs as root the command is also put into a `pids`
///   control group of its own (cgroup v1 `/sys/fs/cgroup/pids`, when writable).
///   [`Sandbox::enforces_process_limit`] says whether a limit holds on this machine.
///
/// Every process of a call lives in the sandbox's PID namespace, so when the command exits, is
/// killed at its timeout, or its runner dies (`--die-with-parent`), the kernel kills every
/// process it started, including ones that left its process group or session (`setsid`, a
/// double fork): a call leaves nothing running.
///
/// The sandbox sits inside the `shell` tool's runner (runner `sh` → `timeout` → `bwrap` →
/// `prlimit` → `sh -c command`), so a command still outlives a crash of Strata and is adopted on
/// resume.
///
/// [`Sandbox::check`] tells whether `bwrap` works here ([`SandboxError`] says how to fix it);
/// a `shell` call under a sandbox that cannot work is refused with
/// [`ToolError::Sandbox`](super::ToolError::Sandbox), never run without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    enabled: bool,
    network: bool,
    limits: SandboxLimits,
    hidden: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
}

/// Why the sandbox cannot work on this machine, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// `bwrap` is not installed.
    #[error(
        "commands run in a bubblewrap sandbox, and `bwrap` is not installed: install it \
         (Debian/Ubuntu `apt-get install bubblewrap`, Fedora `dnf install bubblewrap`), or pass \
         `--unsandboxed` to run commands without a sandbox"
    )]
    Missing,
    /// `bwrap` is there but cannot create the sandbox (user namespaces disabled, say).
    #[error(
        "commands run in a bubblewrap sandbox, and `bwrap` cannot create one here ({detail}): \
         allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`; on \
         Ubuntu also `kernel.apparmor_restrict_unprivileged_userns=0`), or pass \
         `--unsandboxed` to run commands without a sandbox"
    )]
    Unusable {
        /// What `bwrap` reported.
        detail: String,
    },
    /// The sandbox is not available on this operating system.
    #[error(
        "commands run in a sandbox, which needs Linux (bubblewrap); pass `--unsandboxed` to run \
         commands without one"
    )]
    Unsupported,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    /// The default: sandboxed, no network, [`SandboxLimits::default`].
    pub fn new() -> Self {
        Self {
            enabled: true,
            network: false,
            limits: SandboxLimits::default(),
            hidden: Vec::new(),
            read_only: Vec::new(),
        }
    }

    /// No sandbox: commands run as Strata's own user with its whole file system and network.
    /// Only on an explicit request (`--unsandboxed`), which a run records.
    pub fn unsandboxed() -> Self {
        Self { enabled: false, ..Self::new() }
    }

    /// Whether commands run sandboxed.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The same sandbox with the network allowed (`true`) or cut off (`false`, the default).
    #[must_use]
    pub fn with_network(mut self, allowed: bool) -> Self {
        self.network = allowed;
        self
    }

    /// Whether sandboxed commands may use the network.
    pub fn allows_network(&self) -> bool {
        self.network || !self.enabled
    }

    /// The same sandbox with `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits of sandboxed commands.
    pub fn limits(&self) -> SandboxLimits {
        self.limits
    }

    /// The same sandbox also hiding `path` (a directory or a file) from commands: they see an
    /// empty read-only directory or an empty file there. A run hides its data directory.
    #[must_use]
    pub fn hide(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let path = std::path::absolute(&path).unwrap_or(path);
        if !self.hidden.contains(&path) {
            self.hidden.push(path);
        }
        self
    }

    /// The paths added with [`hide`](Self::hide).
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// The same sandbox showing `path` read-only to commands even where it lies in a hidden
    /// directory: a toolchain installed in the home (`~/.cargo`, `~/.rustup`), say. A path
    /// that does not exist when a command starts is skipped.
    #[must_use]
    pub fn show_read_only(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let path = std::path::absolute(&path).unwrap_or(path);
        if !self.read_only.contains(&path) {
            self.read_only.push(path);
        }
        self
    }

    /// The paths added with [`show_read_only`](Self::show_read_only).
    pub fn read_only(&self) -> &[PathBuf] {
        &self.read_only
    }

    /// Whether the sandbox can work on this machine: `Ok` when it is disabled or `bwrap` can
    /// create it. The answer is probed once per process (it runs `bwrap … true`).
    ///
    /// Blocking: call it while setting up.
    pub fn check(&self) -> Result<(), SandboxError> {
        if !self.enabled {
            return Ok(());
        }
        static PROBE: OnceLock<Result<(), SandboxError>> = OnceLock::new();
        PROBE.get_or_init(|| probe("bwrap")).clone()
    }

    /// Whether the process limit binds on this machine: always for a user other than root
    /// (`RLIMIT_NPROC` in the sandbox's user namespace), for root only with a writable `pids`
    /// cgroup. Without one, a fork bomb run as root is stopped only by the call's timeout.
    pub fn enforces_process_limit(&self) -> bool {
        self.enabled && (!is_root() || pids_cgroup_root().is_some())
    }

    /// A command that runs `program` inside this sandbox, in `workspace` (the workspace
    /// read-write, the rest as for a `shell` call; no per-call `pids` cgroup, so as root the
    /// process limit is not enforced: see [`enforces_process_limit`](Self::enforces_process_limit)).
    /// Disabled: `program` itself. Add its arguments; run it in its own process group and kill
    /// the group when done (the PID namespace then takes every process it started with it).
    pub fn command(&self, workspace: &Path, program: &str) -> tokio::process::Command {
        let prefix = self.command_prefix(workspace, None, None);
        let Some((first, rest)) = prefix.split_first() else {
            return tokio::process::Command::new(program);
        };
        let mut command = tokio::process::Command::new(first);
        command.args(rest).arg(program);
        command
    }

    /// The command line that runs a command inside the sandbox, before `sh -c command`: empty
    /// when disabled. `journal` (the context's journal root) is hidden too. `cgroup` is the
    /// `pids` cgroup to create for this call, when [`pids_cgroup_for`] gave one.
    pub(crate) fn command_prefix(
        &self,
        workspace: &Path,
        journal: Option<&Path>,
        cgroup: Option<&Path>,
    ) -> Vec<OsString> {
        if !self.enabled {
            return Vec::new();
        }
        let mut args: Vec<OsString> = Vec::new();
        if let Some(cgroup) = cgroup {
            // Joins the call's own `pids` cgroup before the sandbox starts (root only).
            args.extend(strs(&["sh", "-c", CGROUP_PRELUDE, "strata-sandbox"]));
            args.push(cgroup.into());
            args.push((self.limits.processes + CGROUP_OVERHEAD).to_string().into());
        }
        args.extend(strs(&[
            "bwrap",
            "--die-with-parent",
            "--new-session",
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--cap-drop",
            "ALL",
        ]));
        if !self.network {
            args.push("--unshare-net".into());
        }
        args.extend(strs(&["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]));
        args.extend(strs(&["--perms", "1777", "--size"]));
        args.push(self.limits.tmp_bytes.to_string().into());
        args.extend(strs(&["--tmpfs", "/tmp"]));
        let hides = self.hides(workspace, journal);
        let (before, after): (Vec<_>, Vec<_>) =
            hides.iter().partition(|(path, _)| workspace.starts_with(path));
        for (path, is_dir) in &before {
            hide_args(&mut args, path, *is_dir);
        }
        args.extend(["--bind".into(), workspace.into(), workspace.into()]);
        for (path, is_dir) in &after {
            hide_args(&mut args, path, *is_dir);
        }
        // Paths shown read-only, perhaps inside a hidden directory (a toolchain in the home).
        let mut shown: Vec<PathBuf> =
            self.read_only.iter().filter_map(|path| std::fs::canonicalize(path).ok()).collect();
        // A resolver configuration that lives under a hidden directory comes back with the
        // network.
        if self.network
            && let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf")
            && resolv != Path::new("/etc/resolv.conf")
        {
            shown.push(resolv);
        }
        for path in shown {
            args.extend(["--ro-bind-try".into(), path.clone().into(), path.into()]);
        }
        // Hidden directories become read-only last: the mounts above may need mount points
        // made inside them (a workspace in the hidden home, say).
        for (path, is_dir) in &hides {
            if *is_dir {
                args.extend(["--remount-ro".into(), path.into()]);
            }
        }
        args.extend(["--chdir".into(), workspace.into(), "--".into()]);
        let limits = self.limits;
        args.extend([
            "prlimit".into(),
            format!("--nproc={}", limits.processes).into(),
            format!("--as={}", limits.memory_bytes).into(),
            format!("--fsize={}", limits.file_bytes).into(),
            format!("--nofile={}", limits.open_files).into(),
            "--core=0".into(),
            "--".into(),
        ]);
        args
    }

    /// The paths to hide that exist, canonical, with whether each is a directory; none is `/`
    /// or the workspace itself.
    fn hides(&self, workspace: &Path, journal: Option<&Path>) -> Vec<(PathBuf, bool)> {
        let mut paths: Vec<PathBuf> = Vec::new();
        if let Some(home) = std::env::var_os("HOME") {
            paths.push(PathBuf::from(home));
        }
        paths.extend(SECRET_PATHS.iter().map(PathBuf::from));
        if let Ok(entries) = std::fs::read_dir("/etc/ssh") {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("ssh_host_") && name.ends_with("_key") {
                    paths.push(entry.path());
                }
            }
        }
        paths.extend(journal.map(Path::to_path_buf));
        paths.extend(self.hidden.iter().cloned());
        let mut candidates: Vec<(PathBuf, bool)> = Vec::new();
        for path in paths {
            let Ok(real) = std::fs::canonicalize(&path) else { continue };
            let Ok(meta) = std::fs::metadata(&real) else { continue };
            if real == Path::new("/") || real == workspace {
                continue;
            }
            candidates.push((real, meta.is_dir()));
        }
        // Outer directories first; a path under a hidden directory is hidden with it (unless
        // the workspace, mounted again, lies between them), and mounting over it inside an
        // empty read-only directory would fail.
        candidates.sort_by_key(|(path, _)| path.components().count());
        let mut found: Vec<(PathBuf, bool)> = Vec::new();
        for (path, is_dir) in candidates {
            let covered = found.iter().any(|(outer, outer_is_dir)| {
                *outer_is_dir
                    && path.starts_with(outer)
                    && !(workspace.starts_with(outer) && path.starts_with(workspace))
            });
            if !covered {
                found.push((path, is_dir));
            }
        }
        found
    }
}

/// Paths no command needs and that hold secrets or reach daemons: hidden when they exist.
const SECRET_PATHS: [&str; 10] = [
    "/root",
    "/home",
    "/run",
    "/var/run",
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
];

/// Joins a fresh `pids` cgroup (`$1`, limit `$2`), then runs the rest of the arguments.
const CGROUP_PRELUDE: &str = r#"cg=$1; max=$2; shift 2
mkdir "$cg" && echo "$max" > "$cg/pids.max" && echo $$ > "$cg/cgroup.procs" || {
  echo "strata: cannot create the command's pids cgroup $cg" >&2; exit 126; }
exec "$@""#;

/// Processes of the sandbox's own machinery inside a call's `pids` cgroup (the prelude
/// shell, bwrap and its PID 1, prlimit's exec counts as the command).
const CGROUP_OVERHEAD: u64 = 3;

/// An empty `--tmpfs` over a directory (made read-only at the end), an empty file bound over
/// a file.
fn hide_args(args: &mut Vec<OsString>, path: &Path, is_dir: bool) {
    if is_dir {
        args.extend(["--tmpfs".into(), path.into()]);
    } else {
        args.extend(["--ro-bind".into(), "/dev/null".into(), path.into()]);
    }
}

/// A new `pids` cgroup path for one call (not created yet), when the process limit needs one:
/// Strata runs as root and cgroup v1's `pids` controller is writable. `tag` names the call.
pub(crate) fn pids_cgroup_for(sandbox: &Sandbox, tag: &str) -> Option<PathBuf> {
    if !sandbox.enabled || !is_root() {
        return None;
    }
    Some(pids_cgroup_root()?.join(tag))
}

/// Removes a call's `pids` cgroup once its processes are gone. Best effort.
pub(crate) fn remove_cgroup(cgroup: &Path) {
    if let Err(err) = std::fs::remove_dir(cgroup)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(cgroup = %cgroup.display(), %err, "could not remove a call's pids cgroup");
    }
}

fn pids_cgroup_root() -> Option<&'static Path> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    ROOT.get_or_init(|| {
        // Usable if a child cgroup can be made there and has the `pids` controller's limit.
        let root = Path::new(PIDS_CGROUP_V1);
        let probe = root.join(format!("strata-probe-{}", std::process::id()));
        let usable = std::fs::create_dir(&probe).is_ok() && {
            let has_limit = probe.join("pids.max").is_file();
            let _ = std::fs::remove_dir(&probe);
            has_limit
        };
        usable.then(|| root.to_path_buf())
    })
    .as_deref()
}

fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        // The real user id, from the kernel's view of this process.
        std::fs::read_to_string("/proc/self/status").ok().is_some_and(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next())
                == Some("0")
        })
    })
}

/// Runs `program` (`bwrap`) with the sandbox's namespaces around `true`.
pub(super) fn probe(program: &str) -> Result<(), SandboxError> {
    if !cfg!(target_os = "linux") {
        return Err(SandboxError::Unsupported);
    }
    let output = Command::new(program)
        .args([
            "--die-with-parent",
            "--new-session",
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match output {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(SandboxError::Missing),
        Err(err) => Err(SandboxError::Unusable { detail: format!("cannot start bwrap: {err}") }),
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let detail = stderr.trim();
            let detail = if detail.is_empty() {
                format!("bwrap exited with {}", output.status)
            } else {
                detail.chars().take(300).collect()
            };
            Err(SandboxError::Unusable { detail })
        }
    }
}

/// Each of `items` as an argument.
fn strs(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}
