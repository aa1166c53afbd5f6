//! Where and how a stdio MCP server's process starts: [`McpLaunch`] (the workspace and the
//! sandbox), the minimal environment it gets, and what of a hidden directory it must see.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use agent_core::tools::Sandbox;

use crate::McpError;

/// Strata's own secrets: never passed to a server, even by name (`pass_env`).
pub use agent_core::secrets::ENV_VARS as STRATA_SECRET_VARS;

/// Where a team's stdio servers start: in `workspace` (their working directory, read-write
/// inside the sandbox) and inside `sandbox` (its network setting is replaced by each server's
/// own `network`). A disabled sandbox ([`Sandbox::unsandboxed`], a run's `--unsandboxed`)
/// starts every server without one; a server that opted out (`sandboxed: false`) starts
/// without one in any case. HTTP servers are not started, only reached: neither applies.
#[derive(Clone, Debug)]
pub struct McpLaunch {
    /// The servers' working directory.
    pub workspace: PathBuf,
    /// The sandbox they start in.
    pub sandbox: Sandbox,
    /// Where answers too large to hand on whole are kept as blobs (the whole answer, in a
    /// file named by its SHA-256): a directory of the run's own, hidden from the servers.
    /// `None`: such an answer is only counted, its head handed on.
    pub results: Option<PathBuf>,
}

/// A stdio server's declaration ([`McpTransport::Stdio`](crate::McpTransport::Stdio)), as
/// [`McpLaunch::command`] starts it.
pub(crate) struct StdioServer<'a> {
    /// The program.
    pub(crate) command: &'a str,
    /// Its arguments.
    pub(crate) args: &'a [String],
    /// Variables set in its environment.
    pub(crate) env: &'a BTreeMap<String, String>,
    /// Variables of Strata's environment passed on by name.
    pub(crate) pass_env: &'a [String],
    /// Whether it runs inside the sandbox.
    pub(crate) sandboxed: bool,
    /// Whether it may use the network inside the sandbox.
    pub(crate) network: bool,
}

impl McpLaunch {
    /// Servers started in `workspace`, inside `sandbox`.
    pub fn new(workspace: impl Into<PathBuf>, sandbox: Sandbox) -> Self {
        Self { workspace: workspace.into(), sandbox, results: None }
    }

    /// The same launch keeping answers too large to hand on whole (over 4 MiB as a message,
    /// over 64 KiB of text) as blobs in `dir` ([`results`](Self::results)).
    #[must_use]
    pub fn with_results(mut self, dir: impl Into<PathBuf>) -> Self {
        self.results = Some(dir.into());
        self
    }

    /// Servers started in `workspace` without a sandbox (tests, and runs given
    /// `--unsandboxed`): still with the minimal environment, killed with their run.
    pub fn unsandboxed(workspace: impl Into<PathBuf>) -> Self {
        Self::new(workspace, Sandbox::unsandboxed())
    }

    /// Whether a server declared `sandboxed` starts inside the sandbox here.
    pub fn sandboxes(&self, sandboxed: bool) -> bool {
        sandboxed && self.sandbox.is_enabled()
    }

    /// The command that starts the stdio server `server` (`command` with `args`): inside the
    /// sandbox (with `network`) when [`sandboxes`](Self::sandboxes), else through the
    /// sandbox's launcher without one (which still makes it die with Strata), in the
    /// workspace, with the minimal environment ([`server_env`](Self::server_env)), killed when
    /// dropped. A program that is not found is [`McpError::Spawn`].
    pub(crate) fn command(
        &self,
        server: &str,
        stdio: StdioServer<'_>,
    ) -> Result<tokio::process::Command, McpError> {
        let StdioServer { command, args, env, pass_env, sandboxed, network } = stdio;
        if find_program(command, &self.workspace).is_none() {
            return Err(McpError::Spawn {
                server: server.to_owned(),
                command: command.to_owned(),
                error: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such program (found on PATH, or relative to the workspace)",
                ),
            });
        }
        let sandbox = self.sandbox_for(command, pass_env, sandboxed, network);
        sandbox.check().map_err(|error| McpError::Sandbox { server: server.to_owned(), error })?;
        let mut cmd = sandbox.command(&self.workspace, command);
        cmd.args(args).current_dir(&self.workspace).kill_on_drop(true);
        cmd.env_clear().envs(server_env_of(&sandbox, env));
        Ok(cmd)
    }

    /// The environment a stdio server gets: `PATH`, `LANG`, `TERM` and `HOME` (inside the
    /// sandbox, its own `/tmp`), the variables the sandbox passes (a team's `[sandbox] env`)
    /// and those of `pass_env` that are set, except [`STRATA_SECRET_VARS`], then `env`.
    pub fn server_env(
        &self,
        command: &str,
        env: &BTreeMap<String, String>,
        pass_env: &[String],
        sandboxed: bool,
    ) -> Vec<(String, OsString)> {
        server_env_of(&self.sandbox_for(command, pass_env, sandboxed, false), env)
    }

    /// The sandbox a server starts in: this one (with the server's `network`, its program's
    /// prefix shown, its `pass_env` passed), or none when it does not [`sandboxes`](Self::sandboxes).
    fn sandbox_for(
        &self,
        command: &str,
        pass_env: &[String],
        sandboxed: bool,
        network: bool,
    ) -> Sandbox {
        let base = if self.sandboxes(sandboxed) {
            let mut sandbox = self.sandbox.clone().with_network(network);
            for prefix in program_prefix(command, &self.workspace) {
                sandbox = sandbox.show_read_only(prefix);
            }
            sandbox
        } else {
            Sandbox::unsandboxed().pass_env(self.sandbox.passed_env().iter().cloned())
        };
        base.pass_env(
            pass_env.iter().filter(|n| !STRATA_SECRET_VARS.contains(&n.as_str())).cloned(),
        )
    }
}

/// The sandbox's command environment less Strata's own secrets, then `env`.
fn server_env_of(sandbox: &Sandbox, env: &BTreeMap<String, String>) -> Vec<(String, OsString)> {
    let mut out: Vec<(String, OsString)> = sandbox
        .command_env()
        .into_iter()
        .filter(|(name, _)| !STRATA_SECRET_VARS.contains(&name.as_str()) && !env.contains_key(name))
        .collect();
    out.extend(env.iter().map(|(k, v)| (k.clone(), OsString::from(v))));
    out
}

/// `command` found as a shell would: on `PATH` for a bare name, relative to `workspace` (the
/// server's working directory) otherwise.
fn find_program(command: &str, workspace: &Path) -> Option<PathBuf> {
    if command.contains('/') {
        let path = workspace.join(command);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(command)).find(|p| p.is_file())
}

/// What a sandboxed server must see read-only to run when its program lives under a
/// directory the sandbox hides (a virtual environment in `~/.cache`, a Python built by pyenv
/// in `~/.pyenv`): the program's prefix (the directory above its `bin/`, else its own
/// directory), found as a shell would (`PATH` for a bare name, the workspace for a relative
/// path), and the prefix of the file it links to (a virtual environment's `bin/python` links
/// to the Python it was made from; its packages are beside the link). None when the program is
/// not found; a prefix that would be `/`, a system directory, the home directory or one of its
/// ancestors is left out (then only what `[sandbox] read_only` lists is shown).
pub fn program_prefix(command: &str, workspace: &Path) -> Vec<PathBuf> {
    let Some(program) = find_program(command, workspace) else { return Vec::new() };
    let Ok(program) = std::path::absolute(&program) else { return Vec::new() };
    let mut prefixes = Vec::new();
    for path in [Some(program.clone()), std::fs::canonicalize(&program).ok()].into_iter().flatten()
    {
        if let Some(prefix) = prefix_of(&path)
            && !prefixes.contains(&prefix)
        {
            prefixes.push(prefix);
        }
    }
    prefixes
}

/// The prefix of the program at `program`, unless too wide to show (see [`program_prefix`]).
fn prefix_of(program: &Path) -> Option<PathBuf> {
    let dir = program.parent()?;
    let prefix = match dir.file_name() {
        Some(name) if name == "bin" => dir.parent()?,
        _ => dir,
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let too_wide = prefix.parent().is_none()
        || home.as_deref().is_some_and(|home| home.starts_with(prefix))
        || ["/usr", "/usr/local", "/bin", "/usr/bin", "/home", "/root", "/opt", "/tmp"]
            .iter()
            .any(|p| prefix == Path::new(p));
    (!too_wide).then(|| prefix.to_path_buf())
}
