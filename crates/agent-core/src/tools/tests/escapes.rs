//! The escape catalogue: attempts to leave the workspace or the sandbox, or to outlive a call,
//! each of which must be blocked (a typed error, or a command that fails and changes nothing
//! outside) or bounded (a limit, a timeout), and none of which may leave a process running.
//!
//! Every `shell` attempt runs journaled through [`Jail::sh`], which checks afterwards that no
//! process carrying the call's tag (its `$0`, on the sandbox's and the runner's command lines)
//! is alive; attempts that start other programs in the background give them a unique `sleep`
//! argument ([`unique_sleep`]) that is looked for in `/proc` too.

use std::io::{ErrorKind, Read as _};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;

use super::*;

/// A workspace, a separate run directory holding the journals, and a context using them.
struct Jail {
    /// Kept until the end of the test: the workspace and the run directory.
    _dir: TempDir,
    _runs: TempDir,
    ctx: ToolContext,
}

fn jail() -> Jail {
    jail_with(|sandbox| sandbox)
}

fn jail_with(configure: impl FnOnce(Sandbox) -> Sandbox) -> Jail {
    let dir = tempfile::tempdir().unwrap();
    let runs = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path())
        .unwrap()
        .with_journal(runs.path().join("journal"))
        .with_sandbox(configure(Sandbox::new()));
    ctx.sandbox().check().expect("the sandbox must work on the test machine");
    Jail { _dir: dir, _runs: runs, ctx }
}

/// Small limits, so that bounded attempts end quickly.
fn small_limits() -> SandboxLimits {
    SandboxLimits {
        memory_bytes: 256 * 1024 * 1024,
        processes: 32,
        file_bytes: 1024 * 1024,
        open_files: 64,
        tmp_bytes: 1024 * 1024,
    }
}

impl Jail {
    fn ws(&self) -> &Path {
        self.ctx.workspace()
    }

    /// A handle on the workspace root, as the file tools open one.
    fn beneath(&self) -> beneath::Beneath {
        fs::Workspace::of(&self.ctx).open("test").unwrap()
    }

    /// Runs `command` journaled with a 20 s timeout and checks that nothing of it is left.
    async fn sh(&self, command: &str) -> Result<ToolOutput, ToolError> {
        self.sh_for(command, 20_000).await
    }

    async fn sh_for(&self, command: &str, timeout_ms: u64) -> Result<ToolOutput, ToolError> {
        let journal = self.ctx.journal().unwrap().join(uuid::Uuid::new_v4().simple().to_string());
        let args = json!({ "command": command, "timeout_ms": timeout_ms });
        let result = Shell::new().call_journaled(&self.ctx, args, &journal).await;
        let tag = shell::call_tag(&journal);
        assert_eq!(alive_with_arg(&tag), Vec::<String>::new(), "`{command}` left processes");
        result
    }

    /// `sh`, expecting the command to run and fail.
    async fn fails(&self, command: &str) -> ToolOutput {
        let out = self.sh(command).await.unwrap();
        assert!(!out.success, "`{command}` succeeded: {}", out.output);
        out
    }

    /// `sh`, expecting the command to succeed; its stdout.
    async fn stdout(&self, command: &str) -> String {
        let out = self.sh(command).await.unwrap();
        assert!(out.success, "`{command}` failed: {}", out.output);
        out.data["stdout"].as_str().unwrap().to_owned()
    }

    async fn tool(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        call(&self.ctx, tool, args).await
    }

    /// Calls a file tool and expects [`ToolError::PathOutsideWorkspace`].
    async fn refused(&self, tool: &str, args: Value) {
        let err = self.tool(tool, args.clone()).await.unwrap_err();
        assert!(
            matches!(err, ToolError::PathOutsideWorkspace { .. }),
            "{tool} {args}: expected a refusal, got {err:?}"
        );
        assert!(!err.is_transient());
    }
}

/// A file outside the workspace (in its own temporary directory) with `content`.
fn outside_file(content: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, content).unwrap();
    (dir, path)
}

// ---- File tools: lexical escapes ------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e01_read_dot_dot() {
    jail().refused("read_file", json!({ "path": "../outside.txt" })).await;
}

#[tokio::test(start_paused = true)]
async fn e02_read_dot_dot_after_a_real_directory() {
    let jail = jail();
    std::fs::create_dir(jail.ws().join("a")).unwrap();
    jail.refused("read_file", json!({ "path": "a/../../outside.txt" })).await;
}

#[tokio::test(start_paused = true)]
async fn e03_read_an_absolute_path() {
    jail().refused("read_file", json!({ "path": "/etc/passwd" })).await;
}

#[tokio::test(start_paused = true)]
async fn e04_read_proc_self_root() {
    jail().refused("read_file", json!({ "path": "/proc/self/root/etc/passwd" })).await;
}

#[tokio::test(start_paused = true)]
async fn e05_write_dot_dot() {
    let jail = jail();
    jail.refused("write_file", json!({ "path": "../escaped.txt", "content": "x" })).await;
    assert!(!jail.ws().parent().unwrap().join("escaped.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn e06_write_an_absolute_path() {
    let (outside, path) = outside_file("keep");
    let jail = jail();
    let args = json!({ "path": path.to_str().unwrap(), "content": "overwritten" });
    jail.refused("write_file", args).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep");
    drop(outside);
}

#[tokio::test(start_paused = true)]
async fn e07_list_the_parent() {
    jail().refused("list_dir", json!({ "path": ".." })).await;
}

#[tokio::test(start_paused = true)]
async fn e08_search_the_parent() {
    jail().refused("search", json!({ "pattern": "root", "path": ".." })).await;
}

#[tokio::test(start_paused = true)]
async fn e09_glob_out_of_the_scope() {
    let err = jail().tool("glob", json!({ "pattern": "../*" })).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
}

// ---- File tools: symlinks made before the run -----------------------------------------------

#[tokio::test(start_paused = true)]
async fn e10_read_through_a_symlink_to_an_outside_file() {
    let (_outside, path) = outside_file("secret");
    let jail = jail();
    symlink(&path, jail.ws().join("link")).unwrap();
    jail.refused("read_file", json!({ "path": "link" })).await;
}

#[tokio::test(start_paused = true)]
async fn e11_read_through_a_symlinked_parent_directory() {
    let jail = jail();
    symlink("..", jail.ws().join("up")).unwrap();
    jail.refused("read_file", json!({ "path": "up/anything" })).await;
}

#[tokio::test(start_paused = true)]
async fn e12_write_through_a_symlinked_directory() {
    let (outside, _) = outside_file("x");
    let jail = jail();
    symlink(outside.path(), jail.ws().join("out")).unwrap();
    jail.refused("write_file", json!({ "path": "out/new.txt", "content": "x" })).await;
    assert!(!outside.path().join("new.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn e13_edit_through_a_symlink_to_an_outside_file() {
    let (_outside, path) = outside_file("keep me");
    let jail = jail();
    symlink(&path, jail.ws().join("link")).unwrap();
    let args = json!({ "path": "link", "old_text": "keep", "new_text": "lost" });
    jail.refused("edit_file", args).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
}

#[tokio::test(start_paused = true)]
async fn e14_list_through_a_symlink_to_the_root() {
    let jail = jail();
    symlink("/", jail.ws().join("root")).unwrap();
    jail.refused("list_dir", json!({ "path": "root" })).await;
}

#[tokio::test(start_paused = true)]
async fn e15_read_through_a_symlink_to_proc_self_root() {
    let jail = jail();
    symlink("/proc/self/root", jail.ws().join("host")).unwrap();
    jail.refused("read_file", json!({ "path": "host/etc/passwd" })).await;
}

#[tokio::test(start_paused = true)]
async fn e16_search_does_not_follow_a_symlink_out() {
    let (outside, _) = outside_file("needle");
    let jail = jail();
    symlink(outside.path(), jail.ws().join("out")).unwrap();
    let out = jail.tool("search", json!({ "pattern": "needle" })).await.unwrap();
    assert!(!out.output.contains("needle"), "{}", out.output);
}

// ---- File tools: links made during the run, and swapped paths --------------------------------

#[tokio::test(start_paused = true)]
async fn e17_read_through_a_symlink_a_command_made() {
    let jail = jail();
    jail.stdout("ln -s /etc/hostname link").await;
    jail.refused("read_file", json!({ "path": "link" })).await;
}

#[tokio::test(start_paused = true)]
async fn e18_write_through_a_directory_symlink_a_command_made() {
    let (outside, _) = outside_file("x");
    let jail = jail();
    jail.stdout(&format!("ln -s {} d", outside.path().display())).await;
    jail.refused("write_file", json!({ "path": "d/planted.txt", "content": "x" })).await;
    assert!(!outside.path().join("planted.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn e19_list_through_a_relative_symlink_a_command_made() {
    let jail = jail();
    jail.stdout("ln -s ../.. up").await;
    jail.refused("list_dir", json!({ "path": "up" })).await;
}

/// A directory swapped for a symlink after the path was checked: the open itself refuses it.
#[test]
fn e20_a_read_whose_directory_became_a_symlink_is_refused_at_the_open() {
    let (outside, _) = outside_file("secret");
    let jail = jail();
    symlink(outside.path(), jail.ws().join("swapped")).unwrap();
    let path = jail.ws().join("swapped/secret.txt");
    let err =
        fs::read_regular("read_file", &jail.beneath(), &path, "swapped/secret.txt").unwrap_err();
    assert!(matches!(err, ToolError::PathOutsideWorkspace { .. }), "{err:?}");
}

#[test]
fn e21_a_write_whose_directory_became_a_symlink_is_refused_at_the_open() {
    let (outside, _) = outside_file("x");
    let jail = jail();
    symlink(outside.path(), jail.ws().join("swapped")).unwrap();
    let target = jail.ws().join("swapped/planted.txt");
    let err = fs::replace_file("write_file", &jail.beneath(), &target, b"x", None, || Ok(()))
        .unwrap_err();
    assert!(matches!(err, ToolError::PathOutsideWorkspace { .. }), "{err:?}");
    assert!(!outside.path().join("planted.txt").exists());
}

#[test]
fn e22_creating_directories_through_a_swapped_symlink_is_refused() {
    let (outside, _) = outside_file("x");
    let jail = jail();
    symlink(outside.path(), jail.ws().join("swapped")).unwrap();
    let err = jail
        .beneath()
        .create_dirs("write_file", &jail.ws().join("swapped/new/deeper"))
        .unwrap_err();
    assert!(matches!(err, ToolError::PathOutsideWorkspace { .. }), "{err:?}");
    assert!(!outside.path().join("new").exists());
}

#[test]
fn e23_an_absolute_symlink_back_into_the_workspace_is_still_refused_at_the_open() {
    // RESOLVE_BENEATH refuses absolute links outright, even ones that point inside.
    let jail = jail();
    std::fs::write(jail.ws().join("real.txt"), "x").unwrap();
    symlink(jail.ws().join("real.txt"), jail.ws().join("abs")).unwrap();
    let err =
        fs::read_regular("read_file", &jail.beneath(), &jail.ws().join("abs"), "abs").unwrap_err();
    assert!(matches!(err, ToolError::PathOutsideWorkspace { .. }), "{err:?}");
}

// ---- Hard links -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e24_a_command_cannot_hard_link_a_system_file() {
    let jail = jail();
    jail.fails("ln /etc/hostname hl").await;
    assert!(!jail.ws().join("hl").exists());
}

#[tokio::test(start_paused = true)]
async fn e25_writing_a_hard_link_made_before_the_run_leaves_the_outside_file_alone() {
    let (_outside, path) = outside_file("original");
    let jail = jail();
    std::fs::hard_link(&path, jail.ws().join("hl")).unwrap();
    jail.tool("write_file", json!({ "path": "hl", "content": "replaced" })).await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "original");
    assert_eq!(std::fs::read_to_string(jail.ws().join("hl")).unwrap(), "replaced");
}

#[tokio::test(start_paused = true)]
async fn e26_editing_a_hard_link_made_before_the_run_leaves_the_outside_file_alone() {
    let (_outside, path) = outside_file("original");
    let jail = jail();
    std::fs::hard_link(&path, jail.ws().join("hl")).unwrap();
    let args = json!({ "path": "hl", "old_text": "original", "new_text": "edited" });
    jail.tool("edit_file", args).await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "original");
}

// ---- Shell: reading what it must not see ----------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e27_read_etc_shadow() {
    let out = jail().sh("cat /etc/shadow").await.unwrap();
    assert!(!out.data["stdout"].as_str().unwrap().contains("root:"), "{}", out.output);
}

#[tokio::test(start_paused = true)]
async fn e28_read_etc_shadow_through_proc_self_root() {
    let out = jail().sh("cat /proc/self/root/etc/shadow; cat /proc/1/root/etc/shadow").await;
    assert!(!out.unwrap().data["stdout"].as_str().unwrap().contains("root:"));
}

#[tokio::test(start_paused = true)]
async fn e29_the_home_directory_is_empty() {
    let jail = jail();
    let home = std::env::var("HOME").unwrap();
    let listing = jail.stdout(&format!("ls -A '{home}' | wc -l")).await;
    assert_eq!(listing.trim(), "0");
}

#[tokio::test(start_paused = true)]
async fn e30_read_ssh_keys() {
    let jail = jail();
    // Root's and every user's keys too (`/root` and `/home` are hidden like `$HOME`).
    let (root, home) = ("/root", "/home");
    let command = format!("cat ~/.ssh/id_rsa ~/.ssh/id_ed25519 {root}/.ssh/* {home}/*/.ssh/*");
    let out = jail.sh(&command).await;
    let out = out.unwrap();
    assert!(!out.success);
    assert!(!out.data["stdout"].as_str().unwrap().contains("PRIVATE KEY"));
}

#[tokio::test(start_paused = true)]
async fn e31_other_homes_are_empty() {
    let listing = jail().stdout("ls -A /home /root | grep -v ':$' | grep -c . || true").await;
    assert_eq!(listing.trim(), "0");
}

#[tokio::test(start_paused = true)]
async fn e32_the_run_journals_are_hidden() {
    let jail = jail();
    // This call's own journal exists on the host while it runs; the command sees none.
    let journal = jail.ctx.journal().unwrap().display().to_string();
    let listing = jail.stdout(&format!("ls -A '{journal}' 2>/dev/null | wc -l")).await;
    assert_eq!(listing.trim(), "0");
}

#[tokio::test(start_paused = true)]
async fn e33_a_hidden_data_directory_inside_the_workspace_reads_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join(".strata-runs");
    std::fs::create_dir_all(data.join("other-run")).unwrap();
    std::fs::write(data.join("other-run/secret"), "other run's data").unwrap();
    let runs = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path())
        .unwrap()
        .with_journal(runs.path().join("journal"))
        .with_sandbox(Sandbox::new().hide(&data));
    let jail = Jail { _dir: dir, _runs: runs, ctx };
    let out = jail.fails("cat .strata-runs/other-run/secret").await;
    assert_eq!(out.data["stdout"], "");
    assert_eq!(jail.stdout("ls -A .strata-runs").await, "");
    jail.fails("echo x > .strata-runs/planted").await;
    assert!(!data.join("planted").exists());
}

#[tokio::test(start_paused = true)]
async fn e34_host_processes_are_invisible() {
    let jail = jail();
    let me = std::process::id();
    let out = jail.sh(&format!("cat /proc/{me}/cmdline; ls /proc | grep -c '^[0-9]'")).await;
    let stdout = out.unwrap().data["stdout"].as_str().unwrap().to_owned();
    let count: usize = stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!(count < 10, "the sandbox sees {count} processes: {stdout}");
    assert!(!stdout.contains("agent_core"), "{stdout}");
}

#[tokio::test(start_paused = true)]
async fn e35_daemon_sockets_under_run_are_hidden() {
    let jail = jail();
    let listing = jail.stdout("ls -A /run /var/run 2>/dev/null | grep -v ':$' | grep -c . || true");
    assert_eq!(listing.await.trim(), "0");
}

#[tokio::test(start_paused = true)]
async fn e36_a_unix_socket_in_a_hidden_directory_cannot_be_reached() {
    let secret = tempfile::tempdir().unwrap();
    let socket = secret.path().join("daemon.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let jail = jail_with(|sandbox| sandbox.hide(secret.path()));
    let script = format!(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}')\"",
        socket.display()
    );
    jail.fails(&script).await;
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
}

// ---- Shell: writing outside -----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e37_write_into_etc() {
    let jail = jail();
    let name = format!("/etc/strata-escape-{}", uuid::Uuid::new_v4().simple());
    jail.fails(&format!("echo x > {name}")).await;
    assert!(!Path::new(&name).exists());
}

#[tokio::test(start_paused = true)]
async fn e38_write_into_usr() {
    let jail = jail();
    let name = format!("/usr/strata-escape-{}", uuid::Uuid::new_v4().simple());
    jail.fails(&format!("touch {name}")).await;
    assert!(!Path::new(&name).exists());
}

#[tokio::test(start_paused = true)]
async fn e39_write_next_to_the_workspace() {
    let jail = jail();
    jail.sh("echo x > ../escaped.txt; cd .. && echo x > escaped2.txt").await.unwrap();
    let parent = jail.ws().parent().unwrap();
    assert!(!parent.join("escaped.txt").exists());
    assert!(!parent.join("escaped2.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn e40_write_to_tmp_stays_in_the_sandbox() {
    let jail = jail();
    let name = format!("/tmp/strata-escape-{}", uuid::Uuid::new_v4().simple());
    jail.stdout(&format!("echo x > {name} && cat {name}")).await;
    assert!(!Path::new(&name).exists());
}

#[tokio::test(start_paused = true)]
async fn e41_write_through_a_workspace_symlink_to_outside() {
    let (outside, path) = outside_file("keep");
    let jail = jail();
    symlink(&path, jail.ws().join("link")).unwrap();
    jail.sh("echo overwritten > link").await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep");
    drop(outside);
}

#[tokio::test(start_paused = true)]
async fn e42_write_to_proc_sys_and_sys() {
    let jail = jail();
    jail.fails("echo 1 > /proc/sys/kernel/sysrq").await;
    jail.fails("echo 1 > /sys/kernel/profiling").await;
}

#[tokio::test(start_paused = true)]
async fn e43_write_into_the_journal_directory() {
    let jail = jail();
    let journal = jail.ctx.journal().unwrap().to_owned();
    jail.sh(&format!("mkdir -p '{0}' && echo x > '{0}/planted'", journal.display())).await.unwrap();
    assert!(!journal.join("planted").exists());
}

// ---- Shell: privileges ----------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e44_no_new_user_namespace() {
    jail().fails("unshare -U true").await;
}

#[tokio::test(start_paused = true)]
async fn e45_no_mounts() {
    jail().fails("mount -t tmpfs none /mnt").await;
}

#[tokio::test(start_paused = true)]
async fn e46_no_chroot() {
    jail().fails("chroot / true").await;
}

#[tokio::test(start_paused = true)]
async fn e47_no_capabilities() {
    let caps = jail().stdout("grep CapEff /proc/self/status").await;
    assert_eq!(caps.split_whitespace().last(), Some("0000000000000000"), "{caps}");
}

#[tokio::test(start_paused = true)]
async fn e48_raw_devices_are_absent() {
    let jail = jail();
    jail.fails("cat /dev/mem").await;
    jail.fails("ls /dev/sda /dev/vda /dev/nvme0n1").await;
}

#[tokio::test(start_paused = true)]
async fn e49_host_processes_cannot_be_killed() {
    let marker = unique_sleep();
    let mut victim = std::process::Command::new("sleep").arg(&marker).spawn().unwrap();
    let jail = jail();
    jail.sh(&format!("kill -9 {}; kill -9 -1", victim.id())).await.unwrap();
    assert!(victim.try_wait().unwrap().is_none(), "the host process was killed");
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[tokio::test(start_paused = true)]
async fn e50_limits_cannot_be_raised() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    jail.fails("ulimit -n 100000").await;
    jail.fails("ulimit -f unlimited").await;
}

// ---- Shell: network -------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e51_tcp_to_the_host_is_cut_off() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    jail().fails(&format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'")).await;
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[tokio::test(start_paused = true)]
async fn e52_udp_to_the_host_is_cut_off() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let port = socket.local_addr().unwrap().port();
    jail().sh(&format!("bash -c 'echo hi > /dev/udp/127.0.0.1/{port}'")).await.unwrap();
    let mut buf = [0; 16];
    assert_eq!(socket.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[tokio::test(start_paused = true)]
async fn e53_only_a_loopback_interface() {
    let links = jail().stdout("cat /proc/net/dev | tail -n +3 | cut -d: -f1").await;
    assert_eq!(links.split_whitespace().collect::<Vec<_>>(), ["lo"], "{links}");
}

#[tokio::test(start_paused = true)]
async fn e54_an_abstract_unix_socket_of_the_host_cannot_be_reached() {
    use std::os::linux::net::SocketAddrExt as _;
    let name = format!("strata-escape-{}", uuid::Uuid::new_v4().simple());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{name}')\""
    );
    jail().fails(&script).await;
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
}

/// The control: with the network allowed, the same connection goes through (so e51 can fail).
#[tokio::test(start_paused = true)]
async fn e55_tcp_goes_through_when_the_team_allows_the_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let jail = jail_with(|sandbox| sandbox.with_network(true));
    jail.stdout(&format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'")).await;
    let (mut stream, _) = listener.accept().unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert_eq!(text, "hi\n");
}

/// A server and its client in one script: listens on 127.0.0.1 (at `port`, 0 for any),
/// connects to itself, and prints what the server sent.
fn loopback_echo(port: u16) -> String {
    format!(
        "/usr/bin/python3 - <<'EOF'\n\
         import socket\n\
         server = socket.socket()\n\
         server.bind(('127.0.0.1', {port}))\n\
         server.listen(1)\n\
         client = socket.create_connection(server.getsockname(), timeout=5)\n\
         peer, _ = server.accept()\n\
         peer.sendall(b'pong')\n\
         print(client.recv(4).decode())\n\
         EOF"
    )
}

/// A project's test suite that starts a local server and talks to it works without the
/// network: the sandbox has its own loopback, up.
#[tokio::test(start_paused = true)]
async fn e83_a_command_serves_and_reaches_its_own_loopback() {
    assert_eq!(jail().stdout(&loopback_echo(0)).await, "pong\n");
}

/// That loopback is the sandbox's own: the port a host process listens on at 127.0.0.1 is
/// free inside, and the command's connection to it reaches its own server, never the host's.
#[tokio::test(start_paused = true)]
async fn e84_the_own_loopback_is_not_the_hosts() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    assert_eq!(jail().stdout(&loopback_echo(port)).await, "pong\n");
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
}

// ---- Shell: processes that try to outlive the call ------------------------------------------

#[tokio::test(start_paused = true)]
async fn e56_a_background_sleep() {
    let sleep = unique_sleep();
    jail().stdout(&format!("sleep {sleep} & echo started")).await;
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e57_a_setsid_sleep() {
    let sleep = unique_sleep();
    jail().stdout(&format!("setsid sleep {sleep} > /dev/null 2>&1 < /dev/null & echo ok")).await;
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e58_a_double_fork() {
    let sleep = unique_sleep();
    jail().stdout(&format!("( sleep {sleep} > /dev/null 2>&1 & ) ; echo ok")).await;
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e59_a_nohup_daemon_with_its_output_closed() {
    let sleep = unique_sleep();
    jail().stdout(&format!("nohup setsid sh -c 'sleep {sleep}' > /dev/null 2>&1 & echo ok")).await;
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e60_a_background_process_that_ignores_sighup_and_sigterm() {
    let sleep = unique_sleep();
    let command = format!("sh -c 'trap \"\" HUP TERM; sleep {sleep}' > /dev/null 2>&1 & echo ok");
    jail().stdout(&command).await;
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e61_a_timeout_with_a_setsid_child() {
    let sleep = unique_sleep();
    let err = jail().sh_for(&format!("setsid sleep {sleep} & wait"), 500).await.unwrap_err();
    assert!(matches!(err, ToolError::Timeout { after_ms: 500, .. }), "{err:?}");
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e62_a_timeout_of_an_unjournaled_call_with_a_double_fork() {
    let jail = jail();
    let sleep = unique_sleep();
    let command = format!("( setsid sleep {sleep} & ) ; sleep {sleep}");
    let err = jail.tool("shell", json!({ "command": command, "timeout_ms": 500 })).await;
    assert!(matches!(err, Err(ToolError::Timeout { .. })), "{err:?}");
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

// ---- Shell: resource limits -----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn e63_a_fork_bomb_is_bounded() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    assert!(
        jail.ctx.sandbox().enforces_process_limit(),
        "the process limit does not hold on this machine (root without a writable pids cgroup)"
    );
    // A marker no other process carries, to find what is left of the bomb.
    let bomb = format!("b() {{ b | b & }}; b; wait; : {}", unique_sleep());
    match jail.sh_for(&bomb, 3_000).await {
        Err(ToolError::Timeout { .. }) => {}
        // The limit made forks fail and the bomb collapsed, or the command ended first (its
        // `wait` sees only its first job) and its sandbox's end took the rest with it: which
        // comes first depends on the machine's load.
        Ok(_) => {}
        Err(other) => panic!("{other:?}"),
    }
    assert_eq!(alive_with_arg(&bomb), Vec::<String>::new(), "the bomb outlived its call");
}

#[tokio::test(start_paused = true)]
async fn e64_the_process_limit_stops_a_spawning_loop() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    let sleep = unique_sleep();
    let command =
        format!("i=0; while [ $i -lt 200 ]; do sleep {sleep} & i=$((i+1)); echo $i > n; done");
    let out = jail.fails(&command).await;
    let started: u64 =
        std::fs::read_to_string(jail.ws().join("n")).unwrap().trim().parse().unwrap();
    assert!(started <= small_limits().processes, "{started} processes started: {}", out.output);
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn e65_the_memory_limit_stops_a_runaway_allocation() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    let out = jail.fails("awk 'BEGIN { s = \"x\"; while (1) s = s s }'").await;
    assert!(out.output.contains("allocate"), "{}", out.output);
}

#[tokio::test(start_paused = true)]
async fn e66_the_file_size_limit_stops_a_huge_file() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    jail.fails("head -c 5000000 /dev/zero > big").await;
    let size = std::fs::metadata(jail.ws().join("big")).unwrap().len();
    assert!(size <= small_limits().file_bytes, "{size} bytes written");
}

#[tokio::test(start_paused = true)]
async fn e67_the_private_tmp_is_bounded() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    let out = jail
        .fails("for i in 1 2 3 4; do head -c 900000 /dev/zero > /tmp/f$i || exit 1; done")
        .await;
    assert!(out.output.contains("No space left"), "{}", out.output);
}

#[tokio::test(start_paused = true)]
async fn e68_a_gigabyte_of_output_is_capped() {
    let jail = jail();
    let out = jail.stdout("head -c 1000000000 /dev/zero | tr '\\0' a").await;
    assert!(out.starts_with(&"a".repeat(MAX_STREAM_BYTES)));
    assert!(
        out.ends_with(&format!("[truncated: {} more bytes]\n", 1_000_000_000 - MAX_STREAM_BYTES))
    );
    // On disk too, the journal kept only the cap.
    for entry in std::fs::read_dir(jail.ctx.journal().unwrap()).unwrap() {
        let journal = entry.unwrap().path();
        let kept = std::fs::metadata(journal.join("out")).map(|m| m.len()).unwrap_or(0);
        assert!(kept <= MAX_STREAM_BYTES as u64, "{kept} bytes on disk");
    }
}

#[tokio::test(start_paused = true)]
async fn e69_a_gigabyte_on_stderr_is_capped() {
    let out = jail().sh("head -c 1000000000 /dev/zero >&2").await.unwrap();
    assert_eq!(out.data["stderr_truncated"], true);
    assert!(out.data["stderr"].as_str().unwrap().len() < MAX_STREAM_BYTES + 100);
}

#[tokio::test(start_paused = true)]
async fn e70_open_file_limit() {
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    let out =
        jail.fails("/usr/bin/python3 -c 'fs = [open(\"/dev/null\") for _ in range(1000)]'").await;
    assert!(out.output.contains("Too many open files"), "{}", out.output);
}

// ---- Refusals without a sandbox ---------------------------------------------------------------

#[test]
fn e71_a_missing_launcher_is_a_typed_error_that_says_how_to_fix_it() {
    let err = sandbox::launcher_next_to(Some(Path::new("/nonexistent/bin/program")), false);
    let err = err.unwrap_err();
    assert!(matches!(err, SandboxError::NoLauncher { .. }), "{err:?}");
    let text = err.to_string();
    for needed in [
        "run_sandbox_launcher_if_requested()",
        "cargo build -p strata-agent-core --bin strata-sandbox",
        "/nonexistent/bin/strata-sandbox",
        "--unsandboxed",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from: {text}");
    }
    // A program that registered as a launcher is its own.
    let own = sandbox::launcher_next_to(Some(Path::new("/opt/strata")), true).unwrap();
    assert_eq!(own, Path::new("/opt/strata"));
}

#[test]
fn e72_a_launcher_that_cannot_sandbox_is_a_typed_error() {
    // `false` stands in for a launcher that fails (user namespaces disabled, say).
    let err = sandbox::probe_with(Path::new("false"), "{}").unwrap_err();
    assert!(matches!(err, SandboxError::Unusable { .. }), "{err:?}");
    assert!(err.to_string().contains("--unsandboxed"));
    // A launcher of another build refuses the specification and says so.
    let launcher = sandbox::launcher_path().unwrap();
    let err = sandbox::probe_with(&launcher, r#"{"version": 999}"#).unwrap_err();
    assert!(err.to_string().contains("rebuild the launcher"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn e73_unsandboxed_is_explicit_and_visible() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    assert!(ctx.sandbox().is_enabled(), "a context is sandboxed unless told otherwise");
    assert!(!ctx.sandbox().allows_network());
    let ctx = ctx.with_sandbox(Sandbox::unsandboxed());
    assert!(!ctx.sandbox().is_enabled());
    // Unsandboxed, the host's processes are visible: the sandbox is really off.
    let out = call(&ctx, "shell", json!({ "command": "ls /proc | grep -c '^[0-9]'" })).await;
    let count: usize = out.unwrap().data["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert!(count > 1);
}

#[tokio::test(start_paused = true)]
async fn e74_journals_inside_a_hidden_data_directory_stay_hidden_call_after_call() {
    // A run directory (with its journals) inside the hidden data directory: the second call,
    // whose journal directory exists already, must work too, and neither sees the data.
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let run = data.path().join("run-1");
    let ctx = ToolContext::new(dir.path())
        .unwrap()
        .with_journal(run.join("journal"))
        .with_sandbox(Sandbox::new().hide(data.path()).hide(&run));
    let jail = Jail { _dir: dir, _runs: data, ctx };
    let listing = format!("ls -A '{}' | wc -l", run.display());
    assert_eq!(jail.stdout(&listing).await.trim(), "0");
    assert_eq!(jail.stdout(&listing).await.trim(), "0");
}

#[tokio::test(start_paused = true)]
async fn e75_a_shell_with_its_own_network_setting_overrides_the_context() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let jail = jail();
    let command = format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'");
    let args = json!({ "command": command });
    let mut tools = ToolRegistry::with_builtins();
    tools.replace(Arc::new(Shell::new().with_network(true))).unwrap();
    let out = tools.call(&jail.ctx, "shell", args.clone()).await.unwrap();
    assert!(out.success, "{}", out.output);
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok());
    // The context's own setting (no network) still holds for the plain `shell`.
    listener.set_nonblocking(true).unwrap();
    let out = call(&jail.ctx, "shell", args).await.unwrap();
    assert!(!out.success);
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[tokio::test(start_paused = true)]
async fn e76_a_workspace_inside_a_hidden_directory_works_and_its_siblings_stay_hidden() {
    // Like a project in the (hidden) home directory.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("secret.txt"), "private").unwrap();
    let workspace = home.path().join("project");
    let runs = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(&workspace)
        .unwrap()
        .with_journal(runs.path().join("journal"))
        .with_sandbox(Sandbox::new().hide(home.path()));
    let jail = Jail { _dir: home, _runs: runs, ctx };
    assert_eq!(jail.stdout("echo built > out.txt && cat out.txt").await, "built\n");
    assert_eq!(std::fs::read_to_string(workspace.join("out.txt")).unwrap(), "built\n");
    let out = jail.fails("cat ../secret.txt").await;
    assert!(!out.output.contains("private"), "{}", out.output);
    jail.fails("echo x > ../planted.txt").await;
    assert!(!workspace.parent().unwrap().join("planted.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn e77_a_path_shown_read_only_inside_a_hidden_directory_cannot_be_written() {
    // Like a toolchain in the hidden home: readable, never writable, its siblings hidden.
    let home = tempfile::tempdir().unwrap();
    let tools = home.path().join("toolchain");
    std::fs::create_dir(&tools).unwrap();
    std::fs::write(tools.join("version"), "1.0\n").unwrap();
    std::fs::write(home.path().join("secret.txt"), "private").unwrap();
    let (home_path, tools_path) = (home.path().to_owned(), tools.clone());
    let jail = jail_with(|sandbox| sandbox.hide(&home_path).show_read_only(&tools_path));
    let version = format!("cat '{}/version'", tools.display());
    assert_eq!(jail.stdout(&version).await, "1.0\n");
    jail.fails(&format!("echo 2.0 > '{}/version'", tools.display())).await;
    assert_eq!(std::fs::read_to_string(tools.join("version")).unwrap(), "1.0\n");
    jail.fails(&format!("cat '{}/secret.txt'", home.path().display())).await;
}

// ---- The built-in sandbox: shared memory, the tree's memory, clean-up, environment ----------

#[tokio::test(start_paused = true)]
async fn e78_shared_memory_is_private_and_capped() {
    // The host's /dev/shm is a large tmpfs: 3 GB must not fit in the sandbox's own.
    let jail = jail();
    let out = jail
        .fails("head -c 3000000000 /dev/zero > /dev/shm/big; s=$?; du -k /dev/shm/big; exit $s")
        .await;
    assert!(out.output.contains("No space left"), "{}", out.output);
    let kb: u64 =
        out.data["stdout"].as_str().unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(kb * 1024 <= DEFAULT_TMP_BYTES, "{kb} KiB written to /dev/shm");
    // Nothing of it reached the host.
    assert!(!Path::new("/dev/shm/big").exists());
}

#[tokio::test(start_paused = true)]
async fn e79_a_memory_hog_across_processes_is_stopped_by_the_tree_cap() {
    // Each process stays under the per-process limit (256 MiB); four together do not fit.
    let jail = jail_with(|sandbox| sandbox.with_limits(small_limits()));
    assert!(jail.ctx.sandbox().enforces_process_limit(), "no control groups here (not root?)");
    let hog = "python3 -c 'import time; b = b\"x\" * (150 << 20); time.sleep(2); print(\"held\")'";
    let command = format!("for i in 1 2 3 4; do {hog} & done; wait");
    let out = jail.sh(&command).await.unwrap();
    let held = out.data["stdout"].as_str().unwrap().matches("held").count();
    assert!(held <= 1, "{held} of 4 hogs kept 150 MiB each under a 256 MiB cap: {}", out.output);
}

#[tokio::test(start_paused = true)]
async fn e80_a_command_killed_at_its_timeout_leaves_nothing_and_its_retry_runs() {
    let jail = jail();
    let journal = jail.ctx.journal().unwrap().join("retried");
    let args = json!({ "command": "sleep 30", "timeout_ms": 500 });
    let err = Shell::new().call_journaled(&jail.ctx, args, &journal).await.unwrap_err();
    assert!(matches!(err, ToolError::Timeout { .. }), "{err:?}");
    let tag = shell::call_tag(&journal);
    for controller in ["pids", "memory"] {
        let cgroup = Path::new("/sys/fs/cgroup").join(controller).join(&tag);
        assert!(!cgroup.exists(), "{} was left behind", cgroup.display());
    }
    let skeletons = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&tag))
        .count();
    assert_eq!(skeletons, 0, "the sandbox's skeleton directory was left behind");
    assert_eq!(alive_with_arg(&tag), Vec::<String>::new());
    // The retry under the same key runs.
    let args = json!({ "command": "echo again", "timeout_ms": 20_000 });
    let out = Shell::new().call_journaled(&jail.ctx, args, &journal).await.unwrap();
    assert!(out.success, "{}", out.output);
    assert_eq!(out.data["stdout"], "again\n");
}

#[tokio::test(start_paused = true)]
async fn e81_a_command_sees_only_a_minimal_environment() {
    // Cargo and nextest set CARGO_PKG_NAME for this test process: it stands for a secret of
    // Strata's environment.
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    let names = |out: &ToolOutput| -> Vec<String> {
        let stdout = out.data["stdout"].as_str().unwrap();
        stdout.lines().filter_map(|line| line.split_once('=')).map(|(k, _)| k.to_owned()).collect()
    };
    let allowed = ["PATH", "LANG", "TERM", "HOME", "PWD", "SHLVL", "_", "OLDPWD"];
    let jail = jail();
    let out = jail.sh("env").await.unwrap();
    for name in names(&out) {
        assert!(allowed.contains(&name.as_str()), "{name} reached the command: {}", out.output);
    }
    assert!(out.output.contains("HOME=/tmp\n"), "{}", out.output);
    // Unsandboxed too.
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap().with_sandbox(Sandbox::unsandboxed());
    let out = call(&ctx, "shell", json!({ "command": "env" })).await.unwrap();
    for name in names(&out) {
        assert!(allowed.contains(&name.as_str()), "{name} reached the command: {}", out.output);
    }
    // A variable the team file lists reaches it.
    let jail = jail_with(|sandbox| sandbox.pass_env(["CARGO_PKG_NAME"]));
    assert_eq!(jail.stdout("echo $CARGO_PKG_NAME").await, "strata-agent-core\n");
}

#[tokio::test]
async fn e82_a_sandboxed_program_dies_with_its_parent_and_sees_the_minimal_environment() {
    let dir = tempfile::tempdir().unwrap();
    for sandbox in [Sandbox::new(), Sandbox::unsandboxed()] {
        sandbox.check().unwrap();
        let mut command = sandbox.command(dir.path(), "sh");
        command.args(["-c", "env; sleep 30"]).stdout(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        let launcher = child.id().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut seen = Vec::new();
        // The environment is printed before the sleep.
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            use tokio::io::AsyncReadExt as _;
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains("PATH=") {
                let n = stdout.read(&mut buf).await.unwrap();
                assert!(n > 0, "the program ended early");
                seen.extend_from_slice(&buf[..n]);
            }
        })
        .await
        .unwrap();
        assert!(!String::from_utf8_lossy(&seen).contains("CARGO_PKG_NAME"));
        child.kill().await.unwrap();
        // The launcher's death takes the program along.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < until && !alive_with_arg("env; sleep 30").is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(
            alive_with_arg("env; sleep 30"),
            Vec::<String>::new(),
            "the program outlived its launcher {launcher}"
        );
        // The next launch removes the skeleton directory the killed launcher left.
        if sandbox.is_enabled() {
            let status = sandbox.command(dir.path(), "true").status().await.unwrap();
            assert!(status.success());
            let left = format!("strata-command-{launcher}-sbx-");
            let stale = std::fs::read_dir(std::env::temp_dir())
                .unwrap()
                .flatten()
                .any(|entry| entry.file_name().to_string_lossy().starts_with(&left));
            assert!(!stale, "the killed launcher's skeleton directory is still there");
        }
    }
}
