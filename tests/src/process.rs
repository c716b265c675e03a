//! `PythonProcess`: a matrix interpreter running a test script, whose PID is the Python
//! process itself, synchronised with through the script's stdout lines (the scripts print
//! `ready` once their workload runs), and killed with its process group on drop.
//!
//! Chroot interpreters (py314, py315) run as `chroot ROOT EXE /tmp/pyagent-tests/N/SCRIPT`
//! on a copy of the script's directory; chroot(8) execs, so the child is Python. Python's
//! stdout is unbuffered (`PYTHONUNBUFFERED`), so lines arrive as they are printed.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::pythons::Interpreter;

/// Lines of stdout quoted when a wait fails.
const QUOTED_STDOUT_LINES: usize = 20;
/// How long a failure report waits for the killed process's stderr to be read to its end.
const STDERR_DRAIN: Duration = Duration::from_secs(5);

/// A running interpreter on a test script.
pub struct PythonProcess {
    child: Child,
    /// `py315 running x.py`, for messages.
    what: String,
    lines: Receiver<String>,
    /// stdout lines read so far.
    seen: Vec<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_done: Receiver<()>,
    status: Option<ExitStatus>,
    /// The copy of the script's directory inside a chroot, removed on drop.
    staged: Option<PathBuf>,
}

impl PythonProcess {
    /// Starts `interpreter` on `script` with `args`, stdout and stderr piped, in a process
    /// group of its own.
    ///
    /// # Panics
    /// When the script cannot be staged or the interpreter cannot be started.
    pub fn spawn(interpreter: &Interpreter, script: &Path, args: &[&str]) -> PythonProcess {
        PythonProcess::spawn_with_env(interpreter, script, args, &[])
    }

    /// [`PythonProcess::spawn`] with `env` added to the process's environment.
    ///
    /// # Panics
    /// As [`PythonProcess::spawn`].
    pub fn spawn_with_env(
        interpreter: &Interpreter,
        script: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> PythonProcess {
        let script = script
            .canonicalize()
            .unwrap_or_else(|err| panic!("cannot resolve the script {}: {err}", script.display()));
        let file_name = script
            .file_name()
            .expect("a canonical file path has a file name");
        let what = format!(
            "{} running {}",
            interpreter.name,
            file_name.to_string_lossy()
        );
        let (mut cmd, staged) = match &interpreter.root {
            None => {
                let mut cmd = Command::new(&interpreter.exe);
                cmd.arg(&script);
                (cmd, None)
            }
            Some(root) => {
                interpreter.ensure_proc_mounted();
                let inside = stage(root, &script);
                let mut cmd = Command::new("chroot");
                cmd.arg(root)
                    .arg(&interpreter.exe)
                    .arg(inside.join(file_name));
                (cmd, Some(interpreter.host_path(&inside)))
            }
        };
        cmd.args(args)
            .envs(env.iter().copied())
            .env("PYTHONUNBUFFERED", "1")
            .env_remove("PYTHONHOME")
            .env_remove("PYTHONPATH")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|err| panic!("{what}: cannot start {cmd:?}: {err}"));

        let stdout = child.stdout.take().expect("stdout is piped");
        let (line_tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, stderr_done) = mpsc::channel();
        let sink = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr_pipe.read(&mut buf) {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(&buf[..n]);
            }
            let _ = done_tx.send(());
        });

        PythonProcess {
            child,
            what,
            lines,
            seen: Vec::new(),
            stderr,
            stderr_done,
            status: None,
            staged,
        }
    }

    /// The test script `name` (in `tests/scripts/`) on the matrix interpreter `py` with `args`,
    /// once it has printed `ready` (within 30 s).
    ///
    /// # Panics
    /// As [`PythonProcess::spawn`] and [`PythonProcess::wait_for_line`].
    pub fn ready(py: &str, name: &str, args: &[&str]) -> PythonProcess {
        PythonProcess::ready_with_env(py, name, args, &[])
    }

    /// [`PythonProcess::ready`] with `env` added to the process's environment.
    ///
    /// # Panics
    /// As [`PythonProcess::ready`].
    pub fn ready_with_env(
        py: &str,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> PythonProcess {
        let script = crate::stacks::script(name);
        let mut p = PythonProcess::spawn_with_env(Interpreter::by_name(py), &script, args, env);
        p.wait_for_line("ready", Duration::from_secs(30));
        p
    }

    /// The Python process's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads stdout lines until one starts with `prefix` and returns it.
    ///
    /// # Panics
    /// When no such line comes within `timeout`, or stdout ends first (the process exited);
    /// the message quotes the process's stdout and stderr.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.fail(&format!(
                    "no stdout line starting with {prefix:?} within {timeout:?}"
                )),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.try_wait_until(deadline);
                    let how = status.map_or_else(|| "still running".to_owned(), |s| s.to_string());
                    self.fail(&format!(
                        "stdout ended ({how}) before a line starting with {prefix:?}"
                    ))
                }
            }
        }
    }

    /// Waits for the process to exit and returns its status.
    ///
    /// # Panics
    /// When it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        match self.try_wait_until(Instant::now() + timeout) {
            Some(status) => status,
            None => self.fail(&format!("still running after {timeout:?}")),
        }
    }

    /// The stderr read so far, lossily decoded.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// The exit status, waiting until `deadline` at most; `None` if still running.
    fn try_wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        if self.status.is_none() {
            if wait_readable(pidfd(self.pid()), deadline) {
                self.status = self
                    .child
                    .try_wait()
                    .unwrap_or_else(|err| panic!("{}: wait failed: {err}", self.what));
            }
            // Without a pidfd (or if it lied), fall back to checking until the deadline.
            while self.status.is_none() {
                self.status = self
                    .child
                    .try_wait()
                    .unwrap_or_else(|err| panic!("{}: wait failed: {err}", self.what));
                if self.status.is_some() || Instant::now() >= deadline {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        self.status
    }

    /// Kills the process, then panics with `why`, its PID, recent stdout and all stderr.
    fn fail(&mut self, why: &str) -> ! {
        self.kill();
        // stderr closes once the process group is gone; read it to its end, within bounds.
        let _ = self.stderr_done.recv_timeout(STDERR_DRAIN);
        let recent = &self.seen[self.seen.len().saturating_sub(QUOTED_STDOUT_LINES)..];
        panic!(
            "{} (pid {}): {why}\n--- stdout (last {} lines) ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.pid(),
            recent.len(),
            recent.join("\n"),
            self.stderr().trim_end()
        );
    }

    /// SIGKILLs the process group (the script's children too) and reaps the process.
    fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        let pgid = libc::pid_t::try_from(self.pid()).expect("PIDs fit in pid_t");
        // SAFETY: kill(2) takes no pointers; the group is the one spawn() created, and the
        // child is not reaped yet, so its PID (the group id) cannot have been reused.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
    }
}

impl Drop for PythonProcess {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = self.staged.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Copies the regular files of `script`'s directory (the script and helpers it may import)
/// to a fresh `/tmp/pyagent-tests/<pid>-<n>/` inside `root`; returns that directory as seen
/// from inside.
fn stage(root: &Path, script: &Path) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let inside = PathBuf::from(format!(
        "/tmp/pyagent-tests/{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let host = root.join(inside.strip_prefix("/").expect("absolute"));
    let _ = fs::remove_dir_all(&host);
    fs::create_dir_all(&host)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", host.display()));
    let dir = script.parent().expect("a canonical file path has a parent");
    let entries =
        fs::read_dir(dir).unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let to = host.join(entry.file_name());
            fs::copy(entry.path(), &to).unwrap_or_else(|err| {
                panic!(
                    "cannot copy {} to {}: {err}",
                    entry.path().display(),
                    to.display()
                )
            });
        }
    }
    inside
}

/// A pidfd for `pid` (Linux 5.3+), closed on drop; `None` where unsupported.
fn pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a PID and flags, no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether `fd` (a pidfd: readable once the process exits) becomes readable before
/// `deadline`; false without a descriptor.
fn wait_readable(fd: Option<std::os::fd::OwnedFd>, deadline: Instant) -> bool {
    use std::os::fd::AsRawFd;
    let Some(fd) = fd else { return false };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout_ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        match n {
            1.. => return true,
            0 => return false,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
                continue
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script in a scratch directory of its own, removed on drop.
    struct Script {
        path: PathBuf,
    }

    impl Script {
        fn new(name: &str, text: &str) -> Script {
            let dir = std::env::temp_dir()
                .join(format!("pyagent-tests-unit-{}-{name}", std::process::id()));
            fs::create_dir_all(&dir).expect("create scratch dir");
            let path = dir.join(format!("{name}.py"));
            fs::write(&path, text).expect("write script");
            Script { path }
        }
    }

    impl Drop for Script {
        fn drop(&mut self) {
            if let Some(dir) = self.path.parent() {
                let _ = fs::remove_dir_all(dir);
            }
        }
    }

    #[test]
    fn every_interpreter_reports_its_manifest_version() {
        let script = Script::new(
            "version",
            "import sys\nprint('version %d.%d.%d' % sys.version_info[:3])\nprint('ready')\n",
        );
        for py in Interpreter::all() {
            let mut process = PythonProcess::spawn(py, &script.path, &[]);
            let line = process.wait_for_line("version ", Duration::from_secs(30));
            assert_eq!(line, format!("version {}", py.version), "{}", py.name);
            process.wait_for_line("ready", Duration::from_secs(30));
            let status = process.wait_exit(Duration::from_secs(30));
            assert!(
                status.success(),
                "{}: {status}; stderr: {}",
                py.name,
                process.stderr()
            );
        }
    }

    #[test]
    fn pid_is_the_interpreter_and_drop_kills_it() {
        let script = Script::new(
            "sleeper",
            "import sys, time\nprint('ready', sys.argv[1])\ntime.sleep(600)\n",
        );
        for name in ["py311", "py315"] {
            let py = Interpreter::by_name(name);
            let mut process = PythonProcess::spawn(py, &script.path, &["arg1"]);
            assert_eq!(
                process.wait_for_line("ready", Duration::from_secs(30)),
                "ready arg1"
            );
            let pid = process.pid();
            let exe = fs::read_link(format!("/proc/{pid}/exe")).expect("readlink /proc/PID/exe");
            let want = py.host_exe().canonicalize().expect("canonical exe");
            assert_eq!(exe, want, "{name}: pid {pid} is not the interpreter");
            drop(process);
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "{name}: pid {pid} survived drop"
            );
        }
    }

    #[test]
    #[should_panic(expected = "ValueError: boom")]
    fn early_exit_panics_with_stderr() {
        let script = Script::new("boom", "raise ValueError('boom')\n");
        let mut process = PythonProcess::spawn(Interpreter::by_name("py312"), &script.path, &[]);
        process.wait_for_line("ready", Duration::from_secs(30));
    }

    #[test]
    #[should_panic(expected = "within")]
    fn timeout_panics() {
        let script = Script::new("silent", "import time\ntime.sleep(600)\n");
        let mut process = PythonProcess::spawn(Interpreter::by_name("py313"), &script.path, &[]);
        process.wait_for_line("ready", Duration::from_millis(300));
    }
}
