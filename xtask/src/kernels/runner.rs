//! Runs `inside.sh` on one kernel, a guest's under virtme-ng or the host's directly, within a
//! deadline, and reads back what it wrote.

use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::fetch::Kernel;
use super::plan::Check;
use super::script::{self, Inputs};
use crate::pythons::cmd::{self, say};

const TAG: &str = "kernels";

/// How long one kernel's whole run may take, boot included, before it is killed.
pub const DEADLINE: Duration = Duration::from_secs(20 * 60);
/// Set in the environment of everything a run starts, to find it all when the run is killed.
const RUN_MARK: &str = "PYAGENT_KERNELS_RUN";

/// Where a kernel runs.
pub enum Target {
    /// A Debian kernel booted under QEMU's TCG.
    Guest(Kernel),
    /// The host's own kernel, without a VM.
    Host,
}

impl Target {
    /// `uname -r` of the kernel.
    pub fn version(&self) -> Result<String> {
        match self {
            Target::Guest(kernel) => Ok(kernel.version.clone()),
            Target::Host => host_version(),
        }
    }

    /// `bullseye` or `host`, for the table.
    pub fn place(&self) -> &'static str {
        match self {
            Target::Guest(kernel) => kernel.suite,
            Target::Host => "host",
        }
    }
}

/// The host's `uname -r`.
pub fn host_version() -> Result<String> {
    let path = "/proc/sys/kernel/osrelease";
    let text = fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    Ok(text.trim().to_owned())
}

/// What every kernel's run shares.
pub struct Setup<'a> {
    /// Each run writes under `logs/VERSION/`.
    pub logs: &'a Path,
    pub workspace: &'a Path,
    /// The venv's `vng` (guests only).
    pub vng: Option<&'a Path>,
    /// Host directories the checks read that a guest gets with `--rodir` (with a page cache):
    /// the interpreters, the copied executables.
    pub shared_dirs: &'a [PathBuf],
    pub bpf_exe: &'a Path,
    pub integration_exe: &'a Path,
    pub pyagent: &'a Path,
    pub pythons_dir: &'a Path,
    pub probe_python: &'a Path,
    pub checks: &'a [Check],
}

/// How one check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Passed,
    /// The test binary's exit status.
    Failed(i32),
    /// Killed at [`script::CHECK_TIMEOUT`].
    TimedOut,
    /// Never reached: the run ended first.
    NotRun,
}

/// How a kernel's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The script reached its end.
    Finished,
    /// Killed at [`DEADLINE`].
    TimedOut,
    /// The guest (or the host's shell) stopped before the script's end.
    Stopped,
}

/// One kernel's run, read back.
pub struct Outcome {
    pub version: String,
    pub place: &'static str,
    pub elapsed: Duration,
    pub end: End,
    /// Per check of the plan, with its seconds when it ran.
    pub statuses: Vec<(Status, Option<u64>)>,
    /// `bpf mounted`, `BTF present`...
    pub facilities: Vec<String>,
    /// The probe's exit status and the lines about the kernel in its stderr.
    pub probe: Option<(i32, Vec<String>)>,
    /// The output directory.
    pub out: PathBuf,
}

impl Outcome {
    /// The log of check `index`.
    pub fn check_log(&self, setup: &Setup, index: usize) -> PathBuf {
        self.out
            .join(script::TESTS_DIR)
            .join(setup.checks[index].log_name(index))
    }
}

/// Runs the plan on `target`.
pub fn run(setup: &Setup, target: &Target) -> Result<Outcome> {
    let version = target.version()?;
    let out = setup.logs.join(&version);
    fresh_dir(&out)?;
    let token = format!("{}-{}", std::process::id(), version);
    write_inputs(setup, target, &out, &token)?;
    let mut command = command(setup, target, &out, &token)?;
    say(
        TAG,
        format_args!(
            "{version} ({}): running {} checks and the probe; logs in {}",
            target.place(),
            setup.checks.len(),
            out.display()
        ),
    );
    let started = Instant::now();
    let status = run_to_deadline(&mut command, &token, DEADLINE)?;
    let elapsed = started.elapsed();
    let end = if out.join(script::DONE).exists() {
        End::Finished
    } else if status.is_none() {
        End::TimedOut
    } else {
        End::Stopped
    };
    say(
        TAG,
        format_args!("{version}: {end:?} in {}", cmd::elapsed(elapsed)),
    );
    Ok(Outcome {
        version,
        place: target.place(),
        elapsed,
        end,
        statuses: read_results(&out, setup.checks.len())?,
        facilities: read_lines(&out.join(script::FACILITIES)),
        probe: read_probe(&out),
        out,
    })
}

/// The command that runs `out/inside.sh` on `target`, marked with `token`, its output in
/// `out/console.log`.
fn command(setup: &Setup, target: &Target, out: &Path, token: &str) -> Result<Command> {
    let mut command = match target {
        Target::Guest(kernel) => guest_command(setup, kernel, out)?,
        Target::Host => {
            let mut cmd = Command::new("bash");
            cmd.arg(out.join("inside.sh"));
            cmd
        }
    };
    let console = out.join("console.log");
    let console_file = fs::File::create(&console)
        .with_context(|| format!("cannot create {}", console.display()))?;
    let stdout = console_file
        .try_clone()
        .context("cannot duplicate the console log's handle")?;
    command
        .current_dir(out)
        .env(RUN_MARK, token)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(console_file);
    Ok(command)
}

/// Writes `inside.sh` and the probe's script into `out`.
fn write_inputs(setup: &Setup, target: &Target, out: &Path, token: &str) -> Result<()> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    let text = script::render(&Inputs {
        out,
        workspace: setup.workspace,
        bpf_exe: setup.bpf_exe,
        integration_exe: setup.integration_exe,
        pyagent: setup.pyagent,
        pythons_dir: setup.pythons_dir,
        sid_chroot: &setup.pythons_dir.join("sid-chroot"),
        probe_python: setup.probe_python,
        path: &path,
        cached_dirs: setup.shared_dirs,
        token,
        guest: matches!(target, Target::Guest(_)),
        checks: setup.checks,
    });
    for (name, contents) in [
        ("inside.sh", text.as_str()),
        (script::PROBE_SCRIPT, script::PROBE_PY),
    ] {
        let file = out.join(name);
        fs::write(&file, contents).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

/// `vng` booting `kernel` over the host's root, read-only, with `out` writable and the shared
/// directories mounted on their own: virtme-ng hides /var/cache under a tmpfs, and the root's
/// 9p mount has no page cache, which the script gives these directories.
fn guest_command(setup: &Setup, kernel: &Kernel, out: &Path) -> Result<Command> {
    let vng = setup.vng.context("no vng for a guest")?;
    let bin = vng.parent().context("vng has no directory")?;
    // vng runs `virtme-run` from PATH.
    let mut path = OsString::from(bin);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let mut cmd = Command::new(vng);
    cmd.env("PATH", path)
        .arg("--verbose")
        .arg("-r")
        .arg(kernel.vmlinuz())
        // KVM guests hang on these VMs (the module doc).
        .args(["--disable-kvm", "--force-9p", "--disable-microvm"])
        .args(["-m", "4G", "-p", "2"])
        .arg("--rwdir")
        .arg(out);
    // The kernel's own tree too: the guest's /lib/modules/VERSION links into it.
    for dir in setup.shared_dirs.iter().chain([&kernel.root]) {
        cmd.arg("--rodir").arg(dir);
    }
    cmd.arg("-e")
        .arg(format!("bash {}", out.join("inside.sh").display()));
    Ok(cmd)
}

/// Runs `command` in a process group of its own until it exits or `deadline` passes; then
/// kills the group and everything marked with `token`, and returns `None`.
fn run_to_deadline(
    command: &mut Command,
    token: &str,
    deadline: Duration,
) -> Result<Option<ExitStatus>> {
    let line = cmd::display(command);
    let mut child = command
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let result = match rx.recv_timeout(deadline) {
        Ok(status) => Some(status.with_context(|| format!("cannot wait for `{line}`"))?),
        Err(RecvTimeoutError::Timeout) => {
            say(
                TAG,
                format_args!("killing `{line}` after {}", cmd::elapsed(deadline)),
            );
            kill_group(pid);
            kill_marked(token);
            rx.recv()
                .context("the waiter thread ended without a status")?
                .with_context(|| format!("cannot wait for `{line}`"))?;
            None
        }
        Err(RecvTimeoutError::Disconnected) => bail!("the waiter thread of `{line}` ended"),
    };
    if waiter.join().is_err() {
        bail!("the waiter thread of `{line}` panicked");
    }
    Ok(result)
}

fn kill_group(pid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) takes no pointers; the group is the child's, which is not reaped
        // yet, so its id cannot have been reused.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// Kills every process whose environment has `RUN_MARK=token`: what the host's run started in
/// process groups of its own (the tests' Python targets).
fn kill_marked(token: &str) {
    let Ok(all) = procfs::process::all_processes() else {
        return;
    };
    for process in all.flatten() {
        let marked = process
            .environ()
            .is_ok_and(|env| env.get(&OsString::from(RUN_MARK)) == Some(&OsString::from(token)));
        if marked {
            // SAFETY: kill(2) takes no pointers.
            unsafe { libc::kill(process.pid, libc::SIGKILL) };
        }
    }
}

/// Removes `dir` if it exists and creates it empty.
fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir.join(script::TESTS_DIR))
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// The `results` file: `INDEX STATUS SECONDS` per check that ran.
fn read_results(out: &Path, checks: usize) -> Result<Vec<(Status, Option<u64>)>> {
    let mut statuses = vec![(Status::NotRun, None); checks];
    let path = out.join(script::RESULTS);
    for line in read_lines(&path) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = match fields.as_slice() {
            [index, status, secs] => index
                .parse::<usize>()
                .ok()
                .zip(status.parse::<i32>().ok())
                .zip(secs.parse::<u64>().ok()),
            _ => None,
        };
        let Some(((index, status), secs)) = parsed.filter(|((i, _), _)| *i < checks) else {
            bail!("malformed line in {}: {line:?}", path.display());
        };
        statuses[index] = (status_of(status), Some(secs));
    }
    Ok(statuses)
}

/// A check's exit status under `timeout`: 124 when it timed out, 137 when it then had to be
/// killed.
fn status_of(code: i32) -> Status {
    match code {
        0 => Status::Passed,
        124 | 137 => Status::TimedOut,
        code => Status::Failed(code),
    }
}

/// The probe's exit status and the lines of its stderr about the kernel, if it ran.
fn read_probe(out: &Path) -> Option<(i32, Vec<String>)> {
    let status = read_lines(&out.join(script::PROBE_STATUS))
        .first()?
        .parse()
        .ok()?;
    let lines = read_lines(&out.join(script::PROBE_STDERR))
        .into_iter()
        .filter(|line| about_the_kernel(line))
        .collect();
    Some((status, lines))
}

/// Whether a line of pyagent's stderr says what it could not use: its own `pyagent:` lines
/// (an error, a fallback, a warning) but the counts of what it wrote, and its logged warnings.
fn about_the_kernel(line: &str) -> bool {
    const COUNTS: [&str; 5] = [
        "pyagent: wrote ",
        "pyagent: native stacks (",
        "pyagent: native stacks: ",
        "pyagent: native symbols: ",
        "pyagent: off-CPU: ",
    ];
    let line = line.trim();
    let summary = COUNTS.iter().any(|c| line.starts_with(c)) || line.contains(" mode, wrote ");
    line.contains("kernel lacks")
        || (line.starts_with("pyagent: ") && !summary)
        || line.contains(" WARN ")
        || line.contains(" ERROR ")
}

/// The lines of a file, none if it cannot be read.
fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run past its deadline is killed with what it started in another process group.
    #[test]
    fn deadline_kills_the_group_and_the_marked_processes() {
        let pid_file =
            std::env::temp_dir().join(format!("xtask-kernels-escaped-{}", std::process::id()));
        let token = format!("test-{}", std::process::id());
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(
                "setsid sleep 600 & echo $! >{}; wait",
                pid_file.display()
            ))
            .env(RUN_MARK, &token);
        let started = Instant::now();
        let status = run_to_deadline(&mut command, &token, Duration::from_secs(2)).expect("ran");
        assert_eq!(status, None);
        assert!(started.elapsed() < Duration::from_secs(60));
        let escaped: i32 = fs::read_to_string(&pid_file)
            .expect("the shell wrote the pid")
            .trim()
            .parse()
            .expect("a pid");
        fs::remove_file(&pid_file).expect("cleanup");
        assert!(
            exits_within(escaped, Duration::from_secs(30)),
            "the setsid child {escaped} survived"
        );
    }

    /// Whether the process `pid` (not a child) exits within `limit`: its pidfd becomes
    /// readable then.
    fn exits_within(pid: i32, limit: Duration) -> bool {
        // SAFETY: pidfd_open takes a PID and flags, no pointers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let Ok(fd) = i32::try_from(fd) else {
            return false;
        };
        if fd < 0 {
            // ESRCH: gone already.
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call; the descriptor is ours.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout) } == 1;
        // SAFETY: closes the descriptor opened above, once.
        unsafe { libc::close(fd) };
        ready
    }

    #[test]
    fn exits_before_the_deadline_are_returned() {
        let mut command = Command::new("sh");
        command.args(["-c", "exit 3"]);
        let status = run_to_deadline(&mut command, "unused", Duration::from_secs(60))
            .expect("ran")
            .expect("exited");
        assert_eq!(status.code(), Some(3));
    }

    #[test]
    fn statuses_follow_timeouts_conventions() {
        assert_eq!(status_of(0), Status::Passed);
        assert_eq!(status_of(101), Status::Failed(101));
        assert_eq!(status_of(124), Status::TimedOut);
        assert_eq!(status_of(137), Status::TimedOut);
    }

    #[test]
    fn results_fill_the_checks_that_ran() {
        let dir = std::env::temp_dir().join(format!("xtask-kernels-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("scratch dir");
        fs::write(dir.join(script::RESULTS), "0 0 12\n2 101 30\n").expect("write");
        let got = read_results(&dir, 4).expect("parsed");
        assert_eq!(
            got,
            [
                (Status::Passed, Some(12)),
                (Status::NotRun, None),
                (Status::Failed(101), Some(30)),
                (Status::NotRun, None),
            ]
        );
        fs::write(dir.join(script::RESULTS), "9 0 1\n").expect("write");
        assert!(read_results(&dir, 4).is_err());
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn kernel_lines_leave_out_the_counts() {
        let kept = [
            "pyagent: off-CPU profiling unavailable (no BTF); profiling on-CPU time only",
            "pyagent: --off-cpu needs the eBPF sampler, which is unavailable: load failed",
            "pyagent: native stacks need the eBPF sampler: Python frames only",
            "pyagent: the kernel lacks bpf_loop (Linux 5.17): the frame walk is a bounded loop",
            "the kernel lacks bpf_loop",
            "2026-11-28T09:00:00Z  WARN pyagent::sampler: loading the off-CPU program failed",
        ];
        let dropped = [
            "pyagent: wrote /o/probe.txt (97 samples, 3 stacks, 0 failed)",
            "pyagent: ebpf mode, wrote /o/probe.txt (97 samples)",
            "pyagent: native stacks (each thread stopped while read): 1 merged whole",
            "pyagent: native stacks: 563 merged whole, 0 cut above the stack's bottom",
            "pyagent: off-CPU: 0 waits recorded, 0 repeats timed only",
            "pyagent: native symbols: 3 from .symtab",
            "some other line",
        ];
        for line in kept {
            assert!(about_the_kernel(line), "{line}");
        }
        for line in dropped {
            assert!(!about_the_kernel(line), "{line}");
        }
    }
}
