//! The release artifacts of `cargo xtask dist`, installed as a fleet would: the `.deb` into a
//! fresh bookworm root (debootstrap minbase), the OCI image under podman with the DaemonSet's
//! capabilities next to a Python process in a second container.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use pyagent_tests::agent::host_wide_lock;
use pyagent_tests::consumers::go_pprof_raw;
use pyagent_tests::stacks::script;
use pyagent_tests::wait::{poll_until, wait_for};
use pyagent_tests::{Interpreter, PythonProcess};

/// The agent's version, which names both artifacts and the image tag.
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_owned()
}

/// Runs `cargo xtask ARGS` and returns its stdout; panics with its stderr on failure.
fn xtask(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["run", "--quiet", "-p", "xtask", "--"])
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("cannot run cargo");
    assert!(
        out.status.success(),
        "cargo xtask {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The artifacts, built once per test run (so that the tests never install stale ones).
fn artifacts() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        xtask(&["dist"]);
        let dist = workspace_root().join("target/dist");
        let deb = dist.join(format!("pyagent_{VERSION}_amd64.deb"));
        let image = dist.join(format!("pyagent_{VERSION}_oci.tar"));
        for path in [&deb, &image] {
            assert!(path.exists(), "cargo xtask dist made no {}", path.display());
        }
        (deb, image)
    })
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A bookworm minbase root unpacked from `cargo xtask rootfs`'s tarball, with the host's /proc
/// mounted (the same PID namespace, as on a host the `.deb` is installed on); unmounted and
/// removed on drop.
struct FreshRoot(PathBuf);

impl FreshRoot {
    fn new(name: &str) -> FreshRoot {
        let tarball = xtask(&["rootfs"]);
        let tarball = tarball.lines().last().expect("the tarball's path").trim();
        let dir = PathBuf::from(format!("/var/tmp/pyagent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the root");
        let root = FreshRoot(dir);
        run(Command::new("tar")
            .arg("-C")
            .arg(&root.0)
            .args(["-xf", tarball]));
        run(Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(root.0.join("proc")));
        root
    }

    fn chroot(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("chroot");
        cmd.arg(&self.0)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        cmd
    }
}

impl Drop for FreshRoot {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.0.join("proc"))
            .status();
        let _ = Command::new("rm")
            .args(["-rf", "--one-file-system"])
            .arg(&self.0)
            .status();
    }
}

#[test]
fn deb_installs_into_a_fresh_root_and_dumps_a_host_python() {
    let (deb, _) = artifacts();
    let root = FreshRoot::new("deb");
    std::fs::copy(deb, root.0.join("tmp/pyagent.deb")).expect("copy the .deb");
    run(&mut root.chroot(&["dpkg", "-i", "/tmp/pyagent.deb"]));

    for (path, mode) in [
        ("usr/bin/pyagent", 0o755),
        ("lib/systemd/system/pyagent.service", 0o644),
        ("etc/pyagent/pyagent.toml", 0o600),
        ("usr/share/man/man1/pyagent.1.gz", 0o644),
    ] {
        let meta = std::fs::metadata(root.0.join(path))
            .unwrap_or_else(|e| panic!("the .deb installed no /{path}: {e}"));
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
            mode,
            "/{path}"
        );
    }
    // Stripped (a fleet pulls it onto every node), its debug info in the dbgsym package under
    // its build id, where gdb and symbolizers look.
    let binary = root.0.join("usr/bin/pyagent");
    let size = std::fs::metadata(&binary).expect("the binary").len();
    assert!(size <= 20 << 20, "installed binary of {size} bytes");
    let notes = run(Command::new("readelf").arg("-n").arg(&binary));
    let notes = String::from_utf8_lossy(&notes.stdout).into_owned();
    let build_id = notes
        .split("Build ID: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no build id in:\n{notes}"))
        .to_owned();
    let dbgsym = deb.with_file_name(format!("pyagent-dbgsym_{VERSION}_amd64.ddeb"));
    std::fs::copy(&dbgsym, root.0.join("tmp/pyagent-dbgsym.ddeb")).expect("copy the .ddeb");
    run(&mut root.chroot(&["dpkg", "-i", "/tmp/pyagent-dbgsym.ddeb"]));
    let debug = root.0.join(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    ));
    let sections = run(Command::new("readelf").arg("-S").arg(&debug));
    assert!(
        String::from_utf8_lossy(&sections.stdout).contains(".debug_line"),
        "{} holds the line tables",
        debug.display()
    );
    let unit = std::fs::read_to_string(root.0.join("lib/systemd/system/pyagent.service"))
        .expect("the unit");
    assert!(
        unit.contains("ExecStart=/usr/bin/pyagent --all-python --config /etc/pyagent/pyagent.toml"),
        "{unit}"
    );
    let conffiles =
        run(&mut root.chroot(&["dpkg-query", "--showformat=${Conffiles}", "-W", "pyagent"]));
    assert!(
        String::from_utf8_lossy(&conffiles.stdout).contains("/etc/pyagent/pyagent.toml"),
        "the config file is a conffile (kept on upgrade)"
    );
    let man = run(&mut root.chroot(&["sh", "-c", "gzip -dc /usr/share/man/man1/pyagent.1.gz"]));
    let man = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.contains(".TH PYAGENT") && man.contains("pyagent record"),
        "{man}"
    );

    let target = PythonProcess::ready("py312", "busy.py", &["60"]);
    let pid = target.pid().to_string();
    // Every dump must succeed; one may legitimately catch the main thread between two calls of
    // `warm` (at module level) or report it unread under load, so up to five are taken, and the
    // failure shows all of them.
    let mut dumps = Vec::new();
    let found = (0..5).any(|_| {
        let dump = run(&mut root.chroot(&["/usr/bin/pyagent", "dump", "--pid", &pid]));
        let dump = String::from_utf8_lossy(&dump.stdout).into_owned();
        let shows_warm = dump.contains("warm") && dump.contains("busy.py");
        dumps.push(dump);
        shows_warm
    });
    assert!(
        found,
        "no dump of five showed warm in busy.py:\n{}",
        dumps.join("\n---\n")
    );
}

/// `podman run` with what these machines need: runc (crun refuses their hybrid cgroup v1/v2
/// layout), and limits no higher than this process's own (root here lacks CAP_SYS_RESOURCE, so
/// podman's default of raising them fails with EPERM).
fn podman_run() -> Command {
    let mut cmd = Command::new("podman");
    cmd.args(["--runtime", "runc", "run", "--network=none"])
        .args(["--ulimit=nofile=1024:1024", "--ulimit=nproc=4096:4096"]);
    cmd
}

/// Podman's default seccomp profile with the rules that containerd (>= 1.6) and Docker (>= 20.10)
/// have in theirs and Debian bookworm's podman lacks: bpf(2) for holders of CAP_BPF (podman's
/// allows it to CAP_SYS_ADMIN only) and perf_event_open(2) for holders of CAP_PERFMON (podman's
/// does not list it: ENOSYS). The DaemonSet asks for `RuntimeDefault`, which is that on the
/// runtimes it names. Written to `path`.
fn seccomp_profile_with_cap_bpf(path: &Path) {
    let default = std::fs::read_to_string("/usr/share/containers/seccomp.json")
        .expect("podman's default seccomp profile (containers-common)");
    let mut profile: serde_json::Value = serde_json::from_str(&default).expect("seccomp.json");
    let rules = profile["syscalls"].as_array_mut().expect("syscalls");
    // The refusal of bpf applies unless the container holds CAP_BPF too.
    for rule in rules.iter_mut() {
        let names = rule["names"].as_array().cloned().unwrap_or_default();
        if names.iter().any(|n| n == "bpf") && rule["action"] == "SCMP_ACT_ERRNO" {
            rule["names"] = serde_json::json!(["bpf"]);
            rule["excludes"] = serde_json::json!({"caps": ["CAP_SYS_ADMIN", "CAP_BPF"]});
        }
    }
    rules.push(serde_json::json!({
        "names": ["bpf"],
        "action": "SCMP_ACT_ALLOW",
        "includes": {"caps": ["CAP_BPF"]}
    }));
    rules.push(serde_json::json!({
        "names": ["perf_event_open"],
        "action": "SCMP_ACT_ALLOW",
        "includes": {"caps": ["CAP_PERFMON"]}
    }));
    std::fs::write(path, serde_json::to_string_pretty(&profile).expect("json")).expect("write");
}

/// A file the directory sink is still writing (`.NAME.tmp-…`).
fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

/// A container of the test: removed (with `--force`, so also when running) on drop.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "0", &self.0])
            .output();
    }
}

/// What `podman inspect --format FORMAT NAME` prints.
fn inspect(name: &str, format: &str) -> String {
    let out = run(Command::new("podman").args(["inspect", "--format", format, name]));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn image_profiles_a_python_in_another_container_with_the_daemonsets_capabilities() {
    let (_, image) = artifacts();
    let _serial = host_wide_lock();
    run(Command::new("podman")
        .args(["load", "--quiet", "--input"])
        .arg(image));
    let tag = format!("localhost/pyagent:{VERSION}");
    let daemonset =
        std::fs::read_to_string(workspace_root().join("deploy/kubernetes/daemonset.yaml"))
            .expect("daemonset.yaml");
    assert!(
        daemonset.contains(&format!("image: {tag}")),
        "the DaemonSet runs {tag}"
    );

    // The target: a pyenv CPython (read-only from the host) in a container of its own, based on
    // the agent's image for its glibc.
    let python = Interpreter::by_name("py312");
    let pyenv = python.host_exe();
    let pyenv_root = pyenv
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "versions"))
        .and_then(Path::parent)
        .expect("a pyenv interpreter")
        .to_owned();
    let scripts = script("busy.py").parent().expect("scripts").to_owned();
    let name = format!("pyagent-test-target-{}", std::process::id());
    let target = Container(name.clone());
    run(podman_run()
        .args(["--detach", "--name", &name])
        .arg(format!("--volume={}:{0}:ro", pyenv_root.display()))
        .arg(format!("--volume={}:/scripts:ro", scripts.display()))
        .arg("--entrypoint")
        .arg(&pyenv)
        .args([&tag, "-u", "/scripts/busy.py", "120"]));
    wait_for(
        "the target container to get ready",
        Duration::from_secs(30),
        || {
            let logs = run(Command::new("podman").args(["logs", &name]));
            String::from_utf8_lossy(&logs.stdout)
                .contains("ready")
                .then_some(())
        },
    );
    let target_pid = inspect(&target.0, "{{.State.Pid}}");
    let container_id = inspect(&target.0, "{{.Id}}");

    // The agent: host PID namespace, exactly the DaemonSet's capabilities, a read-only root, the
    // kernel's BTF mounted read-only, the runtime's default seccomp profile (see
    // `seccomp_profile_with_cap_bpf`).
    let out_dir = PathBuf::from(format!("/var/tmp/pyagent-image-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).expect("output dir");
    let seccomp = out_dir.with_extension("seccomp.json");
    seccomp_profile_with_cap_bpf(&seccomp);
    let agent_name = format!("pyagent-test-agent-{}", std::process::id());
    let agent = Container(agent_name.clone());
    // The image's own command (the service with the shipped config), as the DaemonSet runs it,
    // cutting every second instead of every 10 s.
    run(podman_run()
        .args([
            "--detach",
            "--name",
            &agent_name,
            "--pid=host",
            "--read-only",
        ])
        .args([
            "--cap-drop=ALL",
            "--cap-add=CAP_BPF,CAP_PERFMON,CAP_SYS_PTRACE,CAP_DAC_READ_SEARCH",
        ])
        .args([
            "--volume=/sys/kernel/btf:/sys/kernel/btf:ro",
            "--tmpfs=/tmp",
            "--env=PYAGENT_INTERVAL=1s",
        ])
        .arg(format!("--volume={}:/var/lib/pyagent", out_dir.display()))
        .arg(format!("--security-opt=seccomp={}", seccomp.display()))
        .arg(&tag));
    let profiles = out_dir.join("profiles");
    let of_target = format!("-{target_pid}-");
    let profile = poll_until(Duration::from_secs(60), || {
        std::fs::read_dir(&profiles).ok().and_then(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.to_string_lossy().contains(&of_target) && !is_hidden(p))
        })
    })
    .unwrap_or_else(|| {
        let logs = run(Command::new("podman").args(["logs", &agent_name]));
        panic!(
            "no profile of the target (PID {target_pid}) in 60 s: {}",
            String::from_utf8_lossy(&logs.stderr)
        )
    });
    run(Command::new("podman").args(["stop", "--time", "30", &agent.0]));
    let logs = run(Command::new("podman").args(["logs", &agent_name]));
    let logs = String::from_utf8_lossy(&logs.stderr).into_owned();
    assert!(
        logs.contains("pyagent service started") && logs.contains("ebpf"),
        "the image's agent samples with eBPF: {logs}"
    );
    assert_eq!(inspect(&agent.0, "{{.State.ExitCode}}"), "0", "{logs}");

    let raw = go_pprof_raw(&profile);
    assert!(raw.contains(" hot ") && raw.contains("busy.py"), "{raw}");
    assert!(
        raw.contains(&format!("container_id:[{container_id}]")),
        "{raw}"
    );
    let _ = std::fs::remove_dir_all(&out_dir);
    let _ = std::fs::remove_file(&seccomp);
}
