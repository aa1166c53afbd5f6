//! `cargo xtask torture [--kills N] [--seed S]`: the crash torture harness.
//!
//! Runs `strata` on a plan in a child process, `SIGKILL`s it at random moments (start-up, the
//! middle of heartbeats, shutdown) and, half of the time, in the middle of a shell command (each
//! shell step marks its start, sleeps, then appends its line, and the harness kills while a
//! command is between the two), resumes, and repeats until at least N kills have happened and
//! the run has finished. Then it checks: the task succeeded; every file the plan writes is there
//! once with the right content; every side effect (a start mark and a line appended by a shell
//! step) happened exactly once and in order; no process of the run is left (nothing runs in its
//! workspace); no message is left unacknowledged; `strata verify` passes (the audit chain links,
//! every transition is allowed, every record decodes). The team also has an OODA executor
//! whose steps change a file of its own code, one version after another: the file
//! ends at the last version and every version was applied, in order (a kill during a change
//! leaves the old version or the resumed run completes the new one, never a mix).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{cargo, run as run_command};

/// Kills in CI's short form.
pub(crate) const CI_KILLS: u32 = 50;
/// Kills in the full run.
pub(crate) const FULL_KILLS: u32 = 500;
/// Steps of the plan; each appends one line and odd ones also write a file.
const STEPS: usize = 8;
/// How long each shell step sleeps between its start mark and its line: the window in which
/// mid-command kills land.
const COMMAND_SLEEP: &str = "0.15";
/// The OODA executor's changes to its file `ooda.md`: versions 2 to `OODA_CHANGES + 1`.
const OODA_CHANGES: usize = 3;

/// The example team with an OODA executor under the build lead (its only tools read and write
/// files, so the shell steps never reach it).
fn team(root: &Path) -> anyhow::Result<String> {
    let example = root.join("examples").join("hello").join("team.toml");
    let team = std::fs::read_to_string(&example)
        .with_context(|| format!("cannot read {}", example.display()))?;
    Ok(format!(
        "{team}
[[bottom]]
id = \"ooda-1\"
supervisor = \"mid-build\"
tools = [\"read_file\", \"write_file\"]
[bottom.ooda]
role = \"Editor\"
goal = \"keep ooda.md current\"
self_modification_enabled = true
self_modification_level = 2
"
    ))
}

/// A small deterministic random source (xorshift64*), seeded and printed for reproduction.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

fn plan() -> String {
    let mut plan =
        String::from("id = \"torture\"\ngoal = \"append lines in order and write files\"\n");
    for i in 0..STEPS {
        let domain = if i % 2 == 0 { "docs" } else { "build" };
        let after =
            if i == 0 { String::new() } else { format!("after = [\"append-{}\"]\n", i - 1) };
        plan.push_str(&format!(
            "\n[[steps]]\nid = \"append-{i}\"\ndescription = \"append line {i}\"\ndomain = \"{domain}\"\ntool = \"shell\"\nargs = {{ command = \"echo start-{i} >> starts.txt; sleep {COMMAND_SLEEP}; echo line-{i} >> log.txt\" }}\n{after}"
        ));
        if i % 2 == 0 && i / 2 < OODA_CHANGES {
            let k = i / 2;
            let after =
                if k == 0 { String::new() } else { format!("after = [\"modify-{}\"]\n", k - 1) };
            plan.push_str(&format!(
                "\n[[steps]]\nid = \"modify-{k}\"\ndescription = \"the OODA agent changes ooda.md to version {}\"\nagent = \"ooda-1\"\ntool = \"modify_self\"\nargs = {{ modification_type = \"code\", target = \"ooda.md\", change = {{ content = \"v{}\\n\" }}, safety_level = 2 }}\n{after}",
                k + 2,
                k + 2
            ));
        }
        if i % 2 == 1 {
            plan.push_str(&format!(
                "\n[[steps]]\nid = \"write-{i}\"\ndescription = \"write file {i}\"\ndomain = \"docs\"\ntool = \"write_file\"\nargs = {{ path = \"out/file-{i}.txt\", content = \"content {i}\\n\" }}\nafter = [\"append-{i}\"]\n"
            ));
        }
    }
    plan
}

/// Runs the harness with at least `kills` kills, on `built` (a `strata` binary) or, without
/// one, on a `strata` it builds.
pub(crate) fn run(
    root: &Path,
    kills: u32,
    seed: Option<u64>,
    built: Option<&Path>,
) -> anyhow::Result<()> {
    let strata = match built {
        Some(strata) => strata.to_path_buf(),
        None => {
            run_command(cargo(root).args([
                "build",
                "--quiet",
                "--locked",
                "-p",
                "agent-cli",
                "--bin",
                "strata",
            ]))?;
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| root.join("target"), PathBuf::from);
            target.join("debug").join("strata")
        }
    };
    if !strata.is_file() {
        bail!("the strata binary is not at {}", strata.display());
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1
    });
    println!("torture: seed {seed} (rerun with --seed {seed}), at least {kills} kills");
    let scratch = tempdir(root)?;
    std::fs::write(scratch.join("team.toml"), team(root)?)?;
    let result = torture(&strata, &scratch, kills, seed);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&scratch);
    } else {
        println!("torture: the failed run is kept in {}", scratch.display());
    }
    result
}

fn tempdir(root: &Path) -> anyhow::Result<PathBuf> {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("torture");
    let dir = base.join(format!("run-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

fn torture(strata: &Path, scratch: &Path, kills: u32, seed: u64) -> anyhow::Result<()> {
    let mut rng = Rng(seed);
    let plan_path = scratch.join("plan.toml");
    std::fs::write(&plan_path, plan())?;
    let data = scratch.join("data");
    let started = Instant::now();
    let (mut runs, mut counts) = (0u32, Counts::default());
    // One run after another, each killed at random moments until it finishes, until enough
    // kills have happened; every run is checked.
    while counts.killed < kills || runs == 0 {
        runs += 1;
        let run = OneRun {
            strata,
            plan_path: &plan_path,
            data: &data,
            workspace: scratch.join(format!("workspace-{runs}")),
            run_id: format!("torture-{runs}"),
        };
        let one = run.drive(&mut rng, kills.saturating_sub(counts.killed))?;
        counts.killed += one.killed;
        counts.launches += one.launches;
        counts.mid_command += one.mid_command;
        check(strata, &data, &run.workspace, &run.run_id)?;
    }
    let Counts { killed, launches, mid_command } = counts;
    println!(
        "torture: ok — {runs} runs, {killed} kills ({mid_command} of them while a shell command ran), \
         {launches} launches in {:.1}s; every run succeeded, each of its {STEPS} side effects ran \
         exactly once and in order, its OODA agent applied its {OODA_CHANGES} changes in order \
         and ended at the last, no process of it was left, its files are right, its audit \
         chain verifies and no message is left",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What driving runs counted.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// Kills.
    killed: u32,
    /// Launches of `strata`.
    launches: u32,
    /// Kills that landed while a shell command ran.
    mid_command: u32,
}

/// One run of the plan, with its own id and workspace.
struct OneRun<'a> {
    strata: &'a Path,
    plan_path: &'a Path,
    data: &'a Path,
    workspace: PathBuf,
    run_id: String,
}

impl OneRun<'_> {
    /// Drives the run to the end, killing it up to `budget` times.
    fn drive(&self, rng: &mut Rng, budget: u32) -> anyhow::Result<Counts> {
        let mut counts = Counts::default();
        loop {
            let mut child = self.launch()?;
            counts.launches += 1;
            // Half of the kills at a random moment of start-up, heartbeats and shutdown of a
            // whole run (~2.5 s); the other half while a shell command runs, a random time after
            // it marked its start.
            let kill = (counts.killed < budget).then(|| {
                if rng.below(2) == 0 {
                    Kill::After(Duration::from_millis(rng.below(2_500) + 1))
                } else {
                    Kill::MidCommand(Duration::from_millis(rng.below(150)))
                }
            });
            match self.watch(&mut child, kill, counts.launches)? {
                Watched::Ended(status) => return self.ended(&mut child, status, counts),
                Watched::Killed { mid_command } => {
                    counts.killed += 1;
                    counts.mid_command += u32::from(mid_command);
                }
            }
        }
    }

    /// Starts `strata`: the run afresh when nothing of it was acknowledged yet, else a resume.
    fn launch(&self) -> anyhow::Result<Child> {
        let run_dir = self.data.join(&self.run_id);
        let fresh =
            !run_dir.join("strata-run.json").is_file() || !run_dir.join("run.json").is_file();
        if fresh && run_dir.exists() {
            // Killed while the run directory was being created: nothing was acknowledged yet.
            std::fs::remove_dir_all(&run_dir)?;
        }
        let mut command = Command::new(self.strata);
        if fresh {
            command
                .arg("run")
                .arg(self.plan_path)
                .arg("--team")
                .arg(self.plan_path.with_file_name("team.toml"))
                .arg("--run-id")
                .arg(&self.run_id)
                .arg("--workspace")
                .arg(&self.workspace);
            command.args(["--heartbeat", "20ms"]);
        } else {
            command.arg("resume").arg(&self.run_id);
        }
        command
            .arg("--data")
            .arg(self.data)
            .arg("--quiet")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command.spawn().context("cannot start strata")
    }

    /// Waits for the launch to end, or kills it (`SIGKILL`) at `kill`.
    fn watch(
        &self,
        child: &mut Child,
        kill: Option<Kill>,
        launches: u32,
    ) -> anyhow::Result<Watched> {
        let launched = Instant::now();
        let mut mid_command_since: Option<Instant> = None;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Watched::Ended(status));
            }
            let due = match kill {
                Some(Kill::After(after)) => launched.elapsed() >= after,
                Some(Kill::MidCommand(into)) => {
                    if mid_command_since.is_none() && command_running(&self.workspace) {
                        mid_command_since = Some(Instant::now());
                    }
                    mid_command_since.is_some_and(|since| since.elapsed() >= into)
                }
                None => false,
            };
            if due {
                let mid_command = command_running(&self.workspace);
                child.kill().context("cannot kill strata")?; // SIGKILL
                child.wait()?;
                return Ok(Watched::Killed { mid_command });
            }
            if launched.elapsed() > Duration::from_secs(120) {
                child.kill()?;
                bail!(
                    "{}: strata did not finish within 120 s after launch {launches}",
                    self.run_id
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The counts when the launch ended by itself with `status`: an error unless it succeeded.
    fn ended(
        &self,
        child: &mut Child,
        status: ExitStatus,
        counts: Counts,
    ) -> anyhow::Result<Counts> {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut stderr);
        }
        let (run_id, launches) = (&self.run_id, counts.launches);
        match status.code() {
            Some(0) => Ok(counts),
            Some(code) => {
                bail!("{run_id}: strata exited with {code} on launch {launches}: {}", stderr.trim())
            }
            None => {
                bail!("{run_id}: strata died by a signal on launch {launches}: {}", stderr.trim())
            }
        }
    }
}

/// How a launch that was watched ended.
enum Watched {
    /// By itself, with this status.
    Ended(ExitStatus),
    /// Killed by the harness, while a shell command ran or not.
    Killed { mid_command: bool },
}

/// When a launch is killed.
#[derive(Clone, Copy)]
enum Kill {
    /// This long after the launch.
    After(Duration),
    /// This long after a shell command was seen between its start mark and its line.
    MidCommand(Duration),
}

/// Whether a shell step is between its start mark and its line (more marks than lines).
fn command_running(workspace: &Path) -> bool {
    let lines = |name: &str| {
        std::fs::read_to_string(workspace.join(name)).map_or(0, |text| text.lines().count())
    };
    lines("starts.txt") > lines("log.txt")
}

/// The processes that run in `workspace` (their working directory is in it), as `pid: command`.
fn processes_in(workspace: &Path) -> anyhow::Result<Vec<String>> {
    let workspace = std::fs::canonicalize(workspace)?;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd.starts_with(&workspace)
        {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    Ok(found)
}

fn check(strata: &Path, data: &Path, workspace: &Path, run_id: &str) -> anyhow::Result<()> {
    let log = std::fs::read_to_string(workspace.join("log.txt")).context("log.txt is missing")?;
    let expected: String = (0..STEPS).map(|i| format!("line-{i}\n")).collect();
    if log != expected {
        bail!(
            "side effects ran a wrong number of times or out of order:\nexpected:\n{expected}got:\n{log}"
        );
    }
    let starts =
        std::fs::read_to_string(workspace.join("starts.txt")).context("starts.txt is missing")?;
    let expected: String = (0..STEPS).map(|i| format!("start-{i}\n")).collect();
    if starts != expected {
        bail!(
            "a shell command started a wrong number of times (a kill mid-command repeated it):\nexpected:\n{expected}got:\n{starts}"
        );
    }
    let left = processes_in(workspace)?;
    if !left.is_empty() {
        bail!("processes of the run are still running after it ended:\n{}", left.join("\n"));
    }
    for i in (1..STEPS).step_by(2) {
        let path = workspace.join("out").join(format!("file-{i}.txt"));
        let content = std::fs::read_to_string(&path)
            .with_context(|| format!("{} is missing", path.display()))?;
        if content != format!("content {i}\n") {
            bail!("{} has the wrong content: {content:?}", path.display());
        }
    }
    check_ooda(strata, data, workspace, run_id)?;
    let verify = Command::new(strata).args(["verify", run_id]).arg("--data").arg(data).output()?;
    if !verify.status.success() {
        bail!("strata verify failed:\n{}", String::from_utf8_lossy(&verify.stdout));
    }
    let messages = Command::new(strata)
        .args(["inspect", run_id, "messages", "--json"])
        .arg("--data")
        .arg(data)
        .output()?;
    let listed: serde_json::Value =
        serde_json::from_slice(&messages.stdout).context("inspect messages printed no JSON")?;
    if listed
        .as_array()
        .is_none_or(|m| m.iter().any(|m| m.get("acknowledged") != Some(&serde_json::json!(true))))
    {
        bail!("messages are left unacknowledged: {listed}");
    }
    let runs = Command::new(strata).args(["runs", "--json"]).arg("--data").arg(data).output()?;
    let runs: serde_json::Value =
        serde_json::from_slice(&runs.stdout).context("runs printed no JSON")?;
    let this = runs.as_array().and_then(|all| {
        all.iter().find(|r| r.get("run_id").and_then(|i| i.as_str()) == Some(run_id))
    });
    if this.and_then(|r| r.get("status")).and_then(|s| s.as_str()) != Some("succeeded") {
        bail!("the run is not recorded as succeeded: {runs}");
    }
    Ok(())
}

/// The OODA executor's file is at its last version, and its audit applied every version from 2
/// to the last, in order (a version applied again after a kill is the same change completed,
/// through the tool journal: the file shows no mix).
fn check_ooda(strata: &Path, data: &Path, workspace: &Path, run_id: &str) -> anyhow::Result<()> {
    let last = OODA_CHANGES + 1;
    let file = std::fs::read_to_string(workspace.join("ooda.md")).context("ooda.md is missing")?;
    if file != format!("v{last}\n") {
        bail!("ooda.md is {file:?}, not its last version v{last}");
    }
    let audit = Command::new(strata)
        .args(["inspect", run_id, "audit", "--json"])
        .arg("--data")
        .arg(data)
        .output()?;
    let audit: serde_json::Value =
        serde_json::from_slice(&audit.stdout).context("inspect audit printed no JSON")?;
    let mut applied: Vec<u64> = Vec::new();
    for record in audit.as_array().map(Vec::as_slice).unwrap_or_default() {
        let event = &record["event"];
        if event["event"] == "ooda"
            && event["ooda"]["kind"] == "modify_self"
            && event["ooda"]["data"]["outcome"] == "applied"
            && let Some(version) = event["ooda"]["data"]["version"].as_u64()
            && applied.last() != Some(&version)
        {
            applied.push(version);
        }
    }
    let expected: Vec<u64> = (2..=last as u64).collect();
    if applied != expected {
        bail!("the OODA agent applied versions {applied:?}, not {expected:?} in order");
    }
    Ok(())
}
