//! Helpers shared by the benchmarks: the interpreter manifest, processes that die with the bench,
//! a child's CPU time and peak RSS (`wait4`), this thread's CPU time, the load average, markdown
//! tables, and re-running the bench from a release build.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::test;

/// Where bench scripts are copied inside a chroot.
const CHROOT_SCRIPTS: &str = "/tmp/pyagent-bench";

/// `manifest.json` written by `cargo xtask pythons` (the shared [`roles::Manifest`]), with
/// each interpreter wrapped for the benchmarks.
#[derive(Debug)]
pub struct Manifest {
    /// The interpreter matrix.
    pub interpreters: Vec<Interpreter>,
    peers: roles::Peers,
}

/// One interpreter of the matrix: the shared manifest entry (its fields and `minor`,
/// `host_path`, `command` through `Deref`), plus what the benchmarks do with it.
#[derive(Debug, Clone)]
pub struct Interpreter(roles::Entry);

impl std::ops::Deref for Interpreter {
    type Target = roles::Entry;

    fn deref(&self) -> &roles::Entry {
        &self.0
    }
}

impl Manifest {
    /// Reads the manifest of the interpreter cache, naming `cargo xtask pythons` if it is missing.
    pub fn load() -> Result<Manifest> {
        let roles::Manifest {
            interpreters,
            peers,
        } = roles::Manifest::load()?;
        Ok(Manifest {
            interpreters: interpreters.into_iter().map(Interpreter).collect(),
            peers,
        })
    }

    /// The interpreter called `name`.
    pub fn interpreter(&self, name: &str) -> Result<&Interpreter> {
        self.interpreters
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| {
                anyhow!("no interpreter {name} in the manifest: run `cargo xtask pythons`")
            })
    }

    /// The peer profiler called `name`, if the manifest has it and it exists.
    pub fn peer(&self, name: &str) -> Option<&Path> {
        self.peers.get(name).filter(|p| p.exists())
    }
}

impl Interpreter {
    /// A command running `script` (copied into the chroot first if there is one) with `args`.
    pub fn script_command(&self, script: &Path, args: &[String]) -> Result<Command> {
        let script = self.visible_path(script)?;
        Ok(self
            .command(std::iter::once(script.into_os_string()).chain(args.iter().map(Into::into))))
    }

    /// `path` as the interpreter sees it: copied into `ROOT/tmp/pyagent-bench/` for a chroot.
    fn visible_path(&self, path: &Path) -> Result<PathBuf> {
        let Some(root) = &self.root else {
            return Ok(path.to_owned());
        };
        let name = path
            .file_name()
            .ok_or_else(|| anyhow!("{} has no file name", path.display()))?;
        let inside = Path::new(CHROOT_SCRIPTS).join(name);
        let host = self.host_path(&inside);
        std::fs::create_dir_all(host.parent().expect("has a parent"))
            .with_context(|| format!("cannot create the script directory in {}", root.display()))?;
        std::fs::copy(path, &host)
            .with_context(|| format!("cannot copy {} to {}", path.display(), host.display()))?;
        Ok(inside)
    }

    /// A scratch directory the interpreter sees (created): `(inside, on the host)`.
    pub fn scratch_dir(&self) -> Result<(PathBuf, PathBuf)> {
        let inside = match &self.root {
            Some(_) => PathBuf::from(CHROOT_SCRIPTS),
            None => std::env::temp_dir().join("pyagent-bench"),
        };
        let host = self.host_path(&inside);
        std::fs::create_dir_all(&host)
            .with_context(|| format!("cannot create {}", host.display()))?;
        Ok((inside, host))
    }
}

/// The bench scripts directory (`xtask/bench-scripts`).
pub fn bench_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("bench-scripts")
        .join(name)
}

/// CPU time and peak memory of a reaped child.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// `wait4` status.
    pub status: i32,
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub sys: Duration,
    /// Peak resident set (`ru_maxrss`), bytes.
    pub max_rss: u64,
    /// From spawn to reaping.
    pub wall: Duration,
}

impl Usage {
    /// User + system time, seconds.
    pub fn cpu_secs(&self) -> f64 {
        (self.user + self.sys).as_secs_f64()
    }

    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, unless reaped before.
#[derive(Debug)]
pub struct Proc {
    child: Option<Child>,
    what: String,
    started: Instant,
    stdout: mpsc::Receiver<String>,
    stderr_lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Forwards the lines of `r` to a channel (until EOF, whether or not anyone listens) and
/// returns them all.
fn pump(
    r: impl Read + Send + 'static,
) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            all += &line;
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, h)
}

fn wait_for(
    rx: &mpsc::Receiver<String>,
    what: &str,
    pred: impl Fn(&str) -> bool,
    timeout: Duration,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if pred(&line) => return Ok(line),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("{what}: expected output not seen within {timeout:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("{what}: exited before the expected output")
            }
        }
    }
}

impl Proc {
    /// Spawns `cmd` with stdin closed and stdout and stderr captured (as line streams:
    /// [`Self::wait_line`], [`Self::wait_stderr_line`]; [`Self::wait`] returns all of stderr).
    pub fn spawn(cmd: &mut Command, what: impl Into<String>) -> Result<Proc> {
        let what = what.into();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {what} ({cmd:?})"))?;
        let (stdout, _) = pump(child.stdout.take().expect("piped"));
        let (stderr_lines, stderr) = pump(child.stderr.take().expect("piped"));
        Ok(Proc {
            child: Some(child),
            what,
            started: Instant::now(),
            stdout,
            stderr_lines,
            stderr: Some(stderr),
        })
    }

    /// Spawns `cmd` and waits (up to `timeout`) for it to print a line equal to `ready`.
    pub fn spawn_ready(
        cmd: &mut Command,
        what: impl Into<String>,
        ready: &str,
        timeout: Duration,
    ) -> Result<Proc> {
        let mut p = Proc::spawn(cmd, what)?;
        p.wait_line(|l| l == ready, timeout)?;
        Ok(p)
    }

    /// Waits for a stdout line matching `pred`; fails on timeout or end of output.
    pub fn wait_line(&mut self, pred: impl Fn(&str) -> bool, timeout: Duration) -> Result<String> {
        wait_for(&self.stdout, &self.what, pred, timeout)
    }

    /// Waits for a stderr line matching `pred`; fails on timeout or end of output.
    pub fn wait_stderr_line(
        &mut self,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String> {
        wait_for(&self.stderr_lines, &self.what, pred, timeout)
    }

    /// The stdout lines not consumed by [`Self::wait_line`], up to end of output (or 2 s).
    pub fn rest_of_stdout(&mut self) -> String {
        let mut out = String::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(line) = self
            .stdout
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            out += &line;
            out.push('\n');
        }
        out
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends `sig` (if not reaped yet).
    pub fn signal(&self, sig: i32) {
        if self.child.is_some() {
            // SAFETY: kill(2) on our own unreaped child: the pid cannot have been reused.
            unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        }
    }

    /// Reaps the child with `wait4` if it has exited: its resource usage and all of its stderr.
    pub fn try_wait(&mut self) -> Result<Option<(Usage, String)>> {
        if self.child.is_none() {
            bail!("{} was already reaped", self.what);
        }
        let pid = self.pid() as libc::pid_t;
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == 0 {
            return Ok(None);
        }
        if r != pid {
            bail!(
                "wait4 on {} failed: {}",
                self.what,
                std::io::Error::last_os_error()
            );
        }
        let wall = self.started.elapsed();
        // Reaped: std's Child must not touch the pid again (dropping it only closes pipes).
        drop(self.child.take());
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        let usage = Usage {
            status,
            user: tv(ru.ru_utime),
            sys: tv(ru.ru_stime),
            max_rss: ru.ru_maxrss as u64 * 1024,
            wall,
        };
        Ok(Some((usage, stderr)))
    }

    /// Waits up to `timeout` for the child to exit (SIGKILL, and an error, after that) and
    /// reaps it: its resource usage and all of its stderr.
    pub fn wait(&mut self, timeout: Duration) -> Result<(Usage, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(done) = self.try_wait()? {
                return Ok(done);
            }
            if Instant::now() >= deadline {
                self.signal(libc::SIGKILL);
                let (_, stderr) = self.wait(Duration::from_secs(10))?;
                bail!(
                    "{} did not exit within {timeout:?} (killed); stderr: {}",
                    self.what,
                    stderr.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `inner` run under `nice -n niceness`.
pub fn niced(inner: &Command, niceness: u32) -> Command {
    let mut cmd = Command::new("nice");
    cmd.args(["-n", &niceness.to_string()])
        .arg(inner.get_program())
        .args(inner.get_args());
    cmd
}

/// Makes the process `cmd` starts receive SIGKILL when the thread that started it ends: nothing
/// the bench starts outlives it, even when the bench itself is killed.
pub fn die_with_bench(cmd: &mut Command) {
    // SAFETY: between fork and exec the closure only calls prctl(2): no allocation, no lock.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// CPU time consumed by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> Duration {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// User + system CPU seconds a live process has used so far (`/proc/PID/stat`, clock ticks).
pub fn proc_cpu_secs(pid: u32) -> Option<f64> {
    let stat = process(pid)?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second().max(1) as f64)
}

/// `/proc/PID` of a live process.
fn process(pid: u32) -> Option<procfs::process::Process> {
    procfs::process::Process::new(i32::try_from(pid).ok()?).ok()
}

/// Time the live threads of `pid` have run on a CPU, in seconds, to the nanosecond (the sum of
/// `/proc/PID/task/*/schedstat`; threads that already exited are not counted).
pub fn proc_cpu_secs_precise(pid: u32) -> Option<f64> {
    let ns: u64 = process(pid)?
        .tasks()
        .ok()?
        .flatten()
        .filter_map(|task| task.schedstat().ok())
        .map(|s| s.sum_exec_runtime)
        .sum();
    Some(ns as f64 / 1e9)
}

/// Resident set size of a live process now (`VmRSS` in `/proc/PID/status`), bytes.
pub fn proc_rss_bytes(pid: u32) -> Option<u64> {
    Some(process(pid)?.status().ok()?.vmrss? * 1024)
}

/// The command line of this run and the build it runs (a debug build's numbers say little),
/// as the first line of a report.
pub fn print_command_line() {
    println!("{}", command_line());
}

/// What [`print_command_line`] prints.
pub fn command_line() -> String {
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    let build = if cfg!(debug_assertions) {
        "DEBUG"
    } else {
        "release"
    };
    format!("`xtask {}` ({build} build)", cmd.join(" "))
}

/// The 1, 5 and 15 minute load averages and the CPU count, as one line.
pub fn load_average() -> String {
    use procfs::Current;
    let load = procfs::LoadAverage::current()
        .map(|l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen))
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!("load average {load} ({cpus} CPUs)")
}

/// A markdown table printed with aligned columns.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as markdown: first column left-aligned, the others right-aligned.
    pub fn render(&self) -> String {
        let n = self.header.len();
        let cell = |r: &Vec<String>, i: usize| r.get(i).cloned().unwrap_or_default();
        let width: Vec<usize> = (0..n)
            .map(|i| {
                let w = self
                    .rows
                    .iter()
                    .map(|r| cell(r, i).chars().count())
                    .max()
                    .unwrap_or(0);
                w.max(self.header[i].chars().count()).max(3)
            })
            .collect();
        let line = |cells: Vec<String>| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == 0 {
                        format!("{c:<w$}", w = width[i])
                    } else {
                        format!("{c:>w$}", w = width[i])
                    }
                })
                .collect();
            format!("| {} |\n", parts.join(" | "))
        };
        let mut out = line(self.header.clone());
        let rule: Vec<String> = (0..n)
            .map(|i| {
                if i == 0 {
                    format!(":{}", "-".repeat(width[i] - 1))
                } else {
                    format!("{}:", "-".repeat(width[i] - 1))
                }
            })
            .collect();
        out += &format!("| {} |\n", rule.join(" | "));
        for r in &self.rows {
            out += &line((0..n).map(|i| cell(r, i)).collect());
        }
        out
    }

    /// Prints [`Self::render`] to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// A rate with a thousands unit (`12.3k`, `1.20M`).
pub fn si(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e4 => format!("{:.1}k", v / 1e3),
        v if v >= 1e3 => format!("{:.2}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// Which optional parts the re-run `xtask` is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Features {
    /// The toolchain-only build (`bench compare` drives release binaries).
    None,
    /// The in-process benches: they link the agent library, whose build script needs clang.
    AgentLib,
}

/// Benchmarks measure optimised code: from a debug build (what `cargo xtask` runs), install what
/// the agent's build needs, build the release `xtask` with `features` (and `also`, e.g.
/// `pyagent`) and replace this process with it and the same arguments. Returns (and the bench
/// runs here) in a release build that has `features`, or in a debug build that has them when
/// `stay` is set.
pub fn reexec_release(also: &[&str], features: Features, stay: bool) -> Result<()> {
    let has_features = features == Features::None || cfg!(feature = "agent-lib");
    if has_features && (!cfg!(debug_assertions) || stay) {
        return Ok(());
    }
    let logs = crate::pythons::Args::prepare().dir().join("logs");
    test::ensure_build_packages(&logs)?;
    let profile = if stay { "debug" } else { "release" };
    let mut args = vec!["build", "--quiet", "-p", "xtask"];
    if !stay {
        args.push("--release");
    }
    if features == Features::AgentLib {
        args.extend(["--features", "xtask/agent-lib"]);
    }
    for p in also {
        args.extend(["-p", p]);
    }
    eprintln!(
        "bench: building the {profile} xtask (`cargo {}`) and running the bench from it",
        args.join(" ")
    );
    test::cargo(&args)?;
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let built = exe
        .parent()
        .and_then(Path::parent)
        .map(|t| t.join(profile).join("xtask"))
        .ok_or_else(|| anyhow!("cannot find the target directory from {}", exe.display()))?;
    let err = Command::new(&built)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(err).with_context(|| format!("cannot run {}", built.display()))
}

/// The release binary `name` next to this (release) executable, or an error naming the build.
pub fn release_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", exe.display()))?;
    let dir = if cfg!(debug_assertions) {
        dir.parent()
            .map(|t| t.join("release"))
            .unwrap_or_else(|| dir.to_owned())
    } else {
        dir.to_owned()
    };
    let bin = dir.join(name);
    if !bin.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p {name}`",
            bin.display()
        );
    }
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_from_proc() {
        let me = std::process::id();
        // 50 ms of CPU, not of wall time: the machine may be busy.
        let spin = thread_cpu_time();
        while thread_cpu_time() < spin + Duration::from_millis(50) {}
        assert!(
            proc_cpu_secs(me).is_some_and(|s| s > 0.0),
            "{:?}",
            proc_cpu_secs(me)
        );
        assert!(
            proc_cpu_secs_precise(me).is_some_and(|s| s >= 0.05),
            "{:?}",
            proc_cpu_secs_precise(me)
        );
        assert!(proc_rss_bytes(me).is_some_and(|b| b > 0));
        let load = load_average();
        assert!(
            load.starts_with("load average ") && !load.contains("  "),
            "{load}"
        );
        assert_eq!(proc_cpu_secs(4_194_305), None);
    }

    #[test]
    fn a_niced_command_keeps_its_program_and_arguments() {
        let mut inner = Command::new("/usr/bin/python3");
        inner.args(["deep.py", "30", "busy"]);
        let cmd = niced(&inner, 19);
        assert_eq!(cmd.get_program(), "nice");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(
            args,
            ["-n", "19", "/usr/bin/python3", "deep.py", "30", "busy"]
        );
    }

    #[test]
    fn a_process_that_dies_with_the_bench_runs() {
        let mut cmd = Command::new("true");
        die_with_bench(&mut cmd);
        assert!(cmd.status().expect("true runs").success());
    }
}
