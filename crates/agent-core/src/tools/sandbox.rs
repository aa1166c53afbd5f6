//! The sandbox every `shell` command runs in: Strata's built-in sandbox (namespaces, mounts,
//! resource limits and control groups, through the hakoniwa crate and a launcher process), or
//! explicitly none ([`Sandbox::unsandboxed`]). See [`Sandbox`].

pub(super) mod launch;

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
/// Where the kernel's `memory` controller is mounted on cgroup v1 systems.
const MEMORY_CGROUP_V1: &str = "/sys/fs/cgroup/memory";

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

/// How `shell` commands are confined: Strata's built-in sandbox (the default) or,
/// explicitly, none ([`Sandbox::unsandboxed`]).
///
/// The sandbox needs no external program: it is built by the crate
/// [hakoniwa](https://docs.rs/hakoniwa) (Linux namespaces, mounts and rlimits; built without
/// its seccomp, cgroups and landlock features, so no system C library is needed) and a few
/// safe `nix`/`caps` calls, run by a launcher process that Strata starts before each command
/// (see "The launcher" below). hakoniwa was chosen over landlock + seccomp because namespaces
/// give what the previous bubblewrap sandbox gave on every kernel Strata meets (mount, PID,
/// network isolation, hidden paths, a private `/tmp`), while landlock only restricts file
/// access and needs kernel 5.13+ with the LSM enabled.
///
/// A sandboxed command (Linux only) sees:
///
/// - the whole system read-only (every mount), a fresh `/dev` and `/proc` (its own PID
///   namespace: no other process of the machine is visible; `/proc/sys` read-only), a private
///   `/tmp` and a private `/dev/shm`, each a tmpfs of at most [`SandboxLimits::tmp_bytes`];
/// - the workspace read-write, and nothing else writable;
/// - hidden (an empty read-only directory, or an empty file, mounted over them): the user's
///   home (`$HOME`, `/home`, `/root`), `/run` (where daemons' sockets live), the password and
///   sudo files and SSH host keys, the run's crash journals and every path added with
///   [`Sandbox::hide`] (a run hides its data directory: other runs and its own store);
/// - no network (a network namespace of its own, with only its own loopback, up: a command
///   may serve and reach 127.0.0.1 inside, never the host's) unless [`Sandbox::with_network`]
///   allows it; no capabilities (bounding set
///   included); no new user namespaces; `no_new_privs`; its own IPC and UTS namespaces and its
///   own session;
/// - a minimal environment: `PATH`, `LANG`, `TERM`, `HOME=/tmp` (inside the sandbox) and the
///   variables named with [`Sandbox::pass_env`] (a team file's `[sandbox] env`). Strata's own
///   environment (API keys, tokens, OTLP headers) never reaches a command, unsandboxed
///   neither (there `HOME` is the user's);
/// - limits ([`SandboxLimits`]): per process `RLIMIT_AS`, `RLIMIT_FSIZE`, `RLIMIT_NOFILE` and
///   `RLIMIT_NPROC` (counted in the sandbox's own user namespace; the kernel never applies it
///   to root). For the whole command tree, when Strata runs as root, a `pids` and a `memory`
///   control group of the call's own (cgroup v1 `/sys/fs/cgroup/{pids,memory}`, or a pure
///   cgroup v2 hierarchy), capped at [`SandboxLimits::processes`] and
///   [`SandboxLimits::memory_bytes`] (tmpfs pages count too). As another user, only the
///   rlimits hold: the process count is bounded by `RLIMIT_NPROC`, memory per process only.
///   [`Sandbox::enforces_process_limit`] says whether a process limit holds here.
///
/// Every process of a call lives in the sandbox's PID namespace, whose PID 1 is the command:
/// when it exits, is killed at its timeout, or the launcher dies (the parent-death signal), the
/// kernel kills every process it started, including ones that left its process group or
/// session (`setsid`, a double fork). The launcher then removes the call's control groups and
/// the empty skeleton directory it made under the temporary directory; after a kill the
/// caller removes them, and a leftover control group of an earlier attempt is emptied and
/// removed when the call is retried, so a retry never finds it in the way.
///
/// The sandbox sits inside the `shell` tool's runner (runner `sh` → `timeout` → launcher →
/// `sh -c command`), so a command still outlives a crash of Strata and is adopted on resume.
///
/// # The launcher
///
/// The launcher is a fresh process of an executable that hands itself to
/// [`run_sandbox_launcher_if_requested`](super::run_sandbox_launcher_if_requested) first
/// thing in `main` (before any thread starts, so it may fork). Strata looks for it:
///
/// 1. the running executable itself, if it called that function (`strata` does);
/// 2. else a `strata-sandbox` binary (this crate's, `cargo build -p strata-agent-core --bin
///    strata-sandbox`) next to the running executable, or in its parent directory (test
///    binaries live in `target/<profile>/deps`, the binary in `target/<profile>`; a workspace
///    build or test builds it).
///
/// Where none is found, [`Sandbox::check`] answers [`SandboxError::NoLauncher`] saying
/// exactly that.
///
/// [`Sandbox::check`] tells whether the sandbox works here ([`SandboxError`] names what is
/// missing and how to fix it); a `shell` call under a sandbox that cannot work is refused with
/// [`ToolError::Sandbox`](super::ToolError::Sandbox), never run without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    enabled: bool,
    network: bool,
    limits: SandboxLimits,
    hidden: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    pass_env: Vec<String>,
}

/// Why the sandbox cannot work on this machine, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// No launcher executable was found.
    #[error(
        "commands run in Strata's built-in sandbox, whose launcher was not found: call \
         `agent_core::tools::run_sandbox_launcher_if_requested()` first thing in `main`, or \
         build the `strata-sandbox` binary (`cargo build -p strata-agent-core --bin strata-sandbox`) \
         and put it next to the executable (looked for {searched}); or pass `--unsandboxed` \
         to run commands without a sandbox"
    )]
    NoLauncher {
        /// The paths looked at.
        searched: String,
    },
    /// The kernel lacks what the sandbox needs (user or mount namespaces, say).
    #[error(
        "commands run in Strata's built-in sandbox, which cannot be built here: {detail}; \
         pass `--unsandboxed` to run commands without a sandbox"
    )]
    Unusable {
        /// What is missing, or what the launcher reported.
        detail: String,
    },
    /// The sandbox is not available on this operating system.
    #[error(
        "commands run in a sandbox, which needs Linux (namespaces); pass `--unsandboxed` to run \
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
            pass_env: Vec::new(),
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

    /// The same sandbox also passing the variables `names` of Strata's environment to
    /// commands (those that are set): a team file's `[sandbox] env`. Nothing else of Strata's
    /// environment reaches a command but `PATH`, `LANG`, `TERM` and a `HOME`; Strata's own
    /// secrets ([`crate::secrets::ENV_VARS`]) are never passed, even when named.
    #[must_use]
    pub fn pass_env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for name in names {
            let name = name.into();
            if !self.pass_env.contains(&name) {
                self.pass_env.push(name);
            }
        }
        self
    }

    /// The variables added with [`pass_env`](Self::pass_env).
    pub fn passed_env(&self) -> &[String] {
        &self.pass_env
    }

    /// The whole environment of a command: `PATH`, `LANG`, `TERM` and `HOME` (the user's
    /// unsandboxed; the launcher sets `/tmp` inside the sandbox), and the variables of
    /// [`pass_env`](Self::pass_env) that are set. Give it after `env_clear`.
    pub fn command_env(&self) -> Vec<(String, OsString)> {
        let mut env: Vec<(String, OsString)> = Vec::new();
        let path = std::env::var_os("PATH")
            .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
        env.push(("PATH".to_owned(), path));
        for name in ["LANG", "TERM"] {
            if let Some(value) = std::env::var_os(name) {
                env.push((name.to_owned(), value));
            }
        }
        let home = if self.enabled { None } else { std::env::var_os("HOME") };
        env.push(("HOME".to_owned(), home.unwrap_or_else(|| OsString::from("/tmp"))));
        // Strata's own secrets never, whatever was passed.
        let passed =
            self.pass_env.iter().filter(|name| !crate::secrets::ENV_VARS.contains(&name.as_str()));
        for name in passed {
            if let Some(value) = std::env::var_os(name) {
                env.retain(|(known, _)| known != name);
                env.push((name.clone(), value));
            }
        }
        env
    }

    /// Whether the sandbox can work on this machine: `Ok` when it is disabled, or when the
    /// launcher is found and builds a sandbox around `true`. Probed once per process.
    ///
    /// Blocking: call it while setting up.
    pub fn check(&self) -> Result<(), SandboxError> {
        if !self.enabled {
            return Ok(());
        }
        static PROBE: OnceLock<Result<(), SandboxError>> = OnceLock::new();
        PROBE.get_or_init(probe).clone()
    }

    /// Whether the process limit binds on this machine: always for a user other than root
    /// (`RLIMIT_NPROC` in the sandbox's user namespace), for root only with a writable `pids`
    /// cgroup. Without one, a fork bomb run as root is stopped only by the call's timeout.
    pub fn enforces_process_limit(&self) -> bool {
        self.enabled && (!is_root() || cgroup_roots().iter().any(|c| c.pids))
    }

    /// A command that runs `program` inside this sandbox, in `workspace` (the workspace
    /// read-write, the rest as for a `shell` call, with the [minimal
    /// environment](Self::command_env); as root no per-call control group, so the process and
    /// memory limits are per process: see
    /// [`enforces_process_limit`](Self::enforces_process_limit)). Add its arguments; run it in
    /// its own process group and kill the group when done (the PID namespace then takes every
    /// process it started with it).
    ///
    /// It dies with its parent: the launcher sets the parent-death signal, which Linux sends
    /// when the *thread* that spawned it ends, so spawn it from a thread that lives as long
    /// as it should (an async runtime's worker, not `spawn_blocking`). Disabled, the launcher
    /// only sets that signal and the minimal environment, then runs `program`. Check
    /// [`check`](Self::check) first: without a launcher the command fails to start.
    pub fn command(&self, workspace: &Path, program: &str) -> tokio::process::Command {
        let launcher = launcher_path().unwrap_or_else(|_| PathBuf::from(LAUNCHER_NAME));
        let spec = self.spec(workspace, None, &[], "strata-command");
        let mut command = tokio::process::Command::new(launcher);
        command.arg(launch::LAUNCH_ARG).arg(spec).arg("--").arg(program);
        command.env_clear().envs(self.command_env()).current_dir(workspace);
        command
    }

    /// The launcher's specification, as JSON, for a command in `workspace` (`journal`, the
    /// context's journal root, hidden too; `cgroups` to create).
    fn spec(
        &self,
        workspace: &Path,
        journal: Option<&Path>,
        cgroups: &[PathBuf],
        tag: &str,
    ) -> String {
        let mut spec = launch::Spec::new(self.enabled);
        if self.enabled {
            spec.workspace = workspace.to_path_buf();
            spec.network = self.network;
            spec.memory_bytes = self.limits.memory_bytes;
            spec.processes = self.limits.processes;
            spec.file_bytes = self.limits.file_bytes;
            spec.open_files = self.limits.open_files;
            spec.tmp_bytes = self.limits.tmp_bytes;
            spec.hides = self.hides(workspace, journal);
            // Paths shown read-only, perhaps inside a hidden directory (a toolchain in the home).
            let mut shown: Vec<PathBuf> =
                self.read_only.iter().filter_map(|path| std::fs::canonicalize(path).ok()).collect();
            // A resolver configuration under a hidden directory comes back with the network.
            if self.network
                && let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf")
                && resolv != Path::new("/etc/resolv.conf")
            {
                shown.push(resolv);
            }
            spec.shown = shown;
            spec.cgroups = cgroups.to_vec();
            spec.tag = tag.to_owned();
        }
        serde_json::to_string(&spec).unwrap_or_default()
    }

    /// The command line that runs a command inside the sandbox, before `sh -c command`: empty
    /// when disabled. `journal` (the context's journal root) is hidden too; `cgroups` are the
    /// call's control groups ([`cgroups_for`]); `tag` names the call.
    pub(crate) fn command_prefix(
        &self,
        workspace: &Path,
        journal: Option<&Path>,
        cgroups: &[PathBuf],
        tag: &str,
    ) -> Result<Vec<OsString>, SandboxError> {
        if !self.enabled {
            return Ok(Vec::new());
        }
        let launcher = launcher_path()?;
        let spec = self.spec(workspace, journal, cgroups, tag);
        Ok(vec![launcher.into(), launch::LAUNCH_ARG.into(), spec.into(), "--".into()])
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

/// The name of the launcher binary looked for next to the executable.
const LAUNCHER_NAME: &str = "strata-sandbox";

/// The launcher: this executable when it registered as one, else `strata-sandbox` next to it
/// or in its parent directory.
pub(crate) fn launcher_path() -> Result<PathBuf, SandboxError> {
    #[cfg(test)]
    build_launcher_for_tests();
    launcher_next_to(std::env::current_exe().ok().as_deref(), launch::registered())
}

/// [`launcher_path`] for the executable `exe`, which is itself a launcher when `registered`.
pub(super) fn launcher_next_to(
    exe: Option<&Path>,
    registered: bool,
) -> Result<PathBuf, SandboxError> {
    if registered && let Some(exe) = exe {
        return Ok(exe.to_path_buf());
    }
    let mut searched = Vec::new();
    if let Some(exe) = exe {
        let dir = exe.parent();
        for dir in [dir, dir.and_then(Path::parent)].into_iter().flatten() {
            let candidate = dir.join(LAUNCHER_NAME);
            if candidate.is_file() {
                return Ok(candidate);
            }
            searched.push(candidate.display().to_string());
        }
    }
    let searched = if searched.is_empty() {
        "nothing: the executable's path is unknown".into()
    } else {
        searched.join(", ")
    };
    Err(SandboxError::NoLauncher { searched })
}

/// This crate's unit tests run in a test binary, which is no launcher: they build the
/// `strata-sandbox` binary when it is missing or older than a source it is built from (see
/// [`newest_source`]), so they never use a stale one.
///
/// A `cargo test` or `cargo nextest run` that builds this crate's integration tests builds the
/// launcher with them, with the same features, so this seldom builds anything. It compares with
/// the sources, not with the test binary: the same build may link the test binary after the
/// launcher, and the build here (default features, where the tests may have been built with
/// others) then compiled this crate again, in every test process that uses the sandbox, each
/// waiting for the others' build (35 s of two test slots in CI's run).
#[cfg(test)]
fn build_launcher_for_tests() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        let launcher = exe.as_deref().and_then(Path::parent).and_then(Path::parent);
        let launcher = launcher.map(|dir| dir.join(LAUNCHER_NAME));
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        if let Some(built) = launcher.as_deref().and_then(super::shell::modified)
            && newest_source(manifest).is_some_and(|newest| built >= newest)
        {
            return;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", env!("CARGO_PKG_NAME"), "--bin", LAUNCHER_NAME])
            .current_dir(manifest)
            .stdin(Stdio::null())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "cannot build the sandbox launcher");
        // Cargo leaves a launcher that was up to date untouched (a change to test code only):
        // marked fresh now, so the next test process does not ask cargo again.
        if let Some(launcher) = &launcher
            && let Ok(file) = std::fs::File::open(launcher)
        {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
    });
}

/// The newest modification time among the files the launcher is built from, as far as a test
/// can tell: the workspace's lock file and every workspace crate's manifest and sources (this
/// crate and the crates it depends on, and the others, which costs a few hundred `stat`s).
/// `None` when the workspace cannot be read, which makes the launcher be built.
#[cfg(test)]
fn newest_source(manifest: &Path) -> Option<std::time::SystemTime> {
    use super::shell::modified;
    let workspace = manifest.parent()?.parent()?;
    let mut newest = modified(&workspace.join("Cargo.lock"));
    let mut dirs = Vec::new();
    for krate in std::fs::read_dir(workspace.join("crates")).ok()?.flatten() {
        newest = newest.max(modified(&krate.path().join("Cargo.toml")));
        dirs.push(krate.path().join("src"));
    }
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path);
            } else {
                newest = newest.max(modified(&path));
            }
        }
    }
    newest
}

/// Runs the launcher around `true` with the sandbox's namespaces, after checking what the
/// kernel offers.
fn probe() -> Result<(), SandboxError> {
    if !cfg!(target_os = "linux") {
        return Err(SandboxError::Unsupported);
    }
    kernel_support()?;
    let launcher = launcher_path()?;
    let sandbox = Sandbox::new();
    let workspace = std::env::temp_dir();
    let spec = sandbox.spec(&workspace, None, &[], "strata-probe");
    probe_with(&launcher, &spec)
}

/// Runs `launcher` with `spec` around `true`.
pub(super) fn probe_with(launcher: &Path, spec: &str) -> Result<(), SandboxError> {
    let output = Command::new(launcher)
        .arg(launch::LAUNCH_ARG)
        .arg(spec)
        .args(["--", "true"])
        .env_clear()
        .envs(Sandbox::new().command_env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match output {
        Err(err) => Err(SandboxError::Unusable {
            detail: format!("cannot start the launcher {}: {err}", launcher.display()),
        }),
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let detail = stderr.trim();
            let detail = if detail.is_empty() {
                format!("the launcher exited with {}", output.status)
            } else {
                detail.chars().take(400).collect()
            };
            Err(SandboxError::Unusable { detail })
        }
    }
}

/// What the kernel must offer: user, mount, PID, IPC, UTS and network namespaces, and user
/// namespaces allowed to this user.
fn kernel_support() -> Result<(), SandboxError> {
    let missing: Vec<&str> = ["user", "mnt", "pid", "ipc", "uts", "net"]
        .into_iter()
        .filter(|ns| !Path::new(&format!("/proc/self/ns/{ns}")).exists())
        .collect();
    if !missing.is_empty() {
        return Err(SandboxError::Unusable {
            detail: format!(
                "this kernel has no {} namespaces (CONFIG_{}_NS)",
                missing.join(", "),
                missing[0].to_uppercase()
            ),
        });
    }
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|text| text.trim().to_owned());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Err(SandboxError::Unusable {
            detail: "user namespaces are disabled (`user.max_user_namespaces = 0`): allow them \
                     with `sysctl user.max_user_namespaces=15000`"
                .into(),
        });
    }
    if !is_root() {
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return Err(SandboxError::Unusable {
                detail: "user namespaces are closed to users other than root \
                         (`kernel.unprivileged_userns_clone = 0`): allow them with \
                         `sysctl kernel.unprivileged_userns_clone=1`"
                    .into(),
            });
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            return Err(SandboxError::Unusable {
                detail: "AppArmor keeps users other than root from using user namespaces \
                         (`kernel.apparmor_restrict_unprivileged_userns = 1`): allow them with \
                         `sysctl kernel.apparmor_restrict_unprivileged_userns=0`"
                    .into(),
            });
        }
    }
    Ok(())
}

/// A controller hierarchy where a call's control groups can be made (root only).
#[derive(Clone, Debug)]
pub(crate) struct CgroupRoot {
    pub(crate) path: PathBuf,
    /// It caps processes.
    pub(crate) pids: bool,
}

/// The control group hierarchies usable here: cgroup v1's `pids` and `memory`, or a pure
/// cgroup v2 hierarchy with both controllers. Empty unless root. Probed once.
pub(crate) fn cgroup_roots() -> &'static [CgroupRoot] {
    static ROOTS: OnceLock<Vec<CgroupRoot>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        if !is_root() {
            return Vec::new();
        }
        let usable = |root: &Path, file: &str| {
            let probe = root.join(format!("strata-probe-{}", std::process::id()));
            std::fs::create_dir(&probe).is_ok() && {
                let ok = probe.join(file).is_file();
                let _ = std::fs::remove_dir(&probe);
                ok
            }
        };
        let v2 = Path::new("/sys/fs/cgroup");
        if v2.join("cgroup.controllers").is_file() {
            let has = |c: &str| {
                std::fs::read_to_string(v2.join("cgroup.subtree_control"))
                    .is_ok_and(|text| text.split_whitespace().any(|x| x == c))
            };
            if has("pids") && has("memory") && usable(v2, "pids.max") {
                return vec![CgroupRoot { path: v2.to_path_buf(), pids: true }];
            }
            return Vec::new();
        }
        let mut roots = Vec::new();
        let pids = Path::new(PIDS_CGROUP_V1);
        if usable(pids, "pids.max") {
            roots.push(CgroupRoot { path: pids.to_path_buf(), pids: true });
        }
        let memory = Path::new(MEMORY_CGROUP_V1);
        if usable(memory, "memory.limit_in_bytes") {
            roots.push(CgroupRoot { path: memory.to_path_buf(), pids: false });
        }
        roots
    })
}

/// The control groups of one call (not created yet: the launcher makes them), when Strata runs
/// as root with usable hierarchies. `tag` names the call.
pub(crate) fn cgroups_for(sandbox: &Sandbox, tag: &str) -> Vec<PathBuf> {
    if !sandbox.enabled {
        return Vec::new();
    }
    cgroup_roots().iter().map(|root| root.path.join(tag)).collect()
}

/// Whether `path` is a call's control group: named for a call, right under a usable hierarchy.
pub(crate) fn is_call_cgroup(path: &Path) -> bool {
    let parent_ok = path.parent().is_some_and(|parent| {
        [PIDS_CGROUP_V1, MEMORY_CGROUP_V1, "/sys/fs/cgroup"]
            .iter()
            .any(|root| parent == Path::new(root))
    });
    parent_ok
        && path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("strata-shell-"))
}

/// Removes a call's control group, killing what is left in it after half of `grace`.
pub(crate) fn remove_cgroup(cgroup: &Path, grace: std::time::Duration) {
    launch::remove_cgroup(cgroup, grace);
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
