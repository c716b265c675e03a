//! Running external programs for `pythons`: every step prints what it runs, prefixed with
//! the matrix part it works on (steps run in parallel threads), and sends the program's own
//! output to a log file so that parallel builds do not interleave; a failure quotes the
//! log's tail.

use std::fmt::Display;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Lines of a log quoted in the error when a logged command fails.
const LOG_TAIL_LINES: usize = 40;

/// Prints one progress line for the part `tag` of the matrix.
pub fn say(tag: &str, msg: impl Display) {
    println!("[{tag}] {msg}");
}

/// A step's log file under the cache directory's `logs/`.
pub struct Log {
    tag: &'static str,
    path: PathBuf,
}

impl Log {
    /// Starts a fresh `logs_dir/<name>.log` for steps of `tag`.
    pub fn new(tag: &'static str, logs_dir: &Path, name: &str) -> Result<Self> {
        fs::create_dir_all(logs_dir)
            .with_context(|| format!("cannot create log directory {}", logs_dir.display()))?;
        let path = logs_dir.join(format!("{name}.log"));
        File::create(&path).with_context(|| format!("cannot create log {}", path.display()))?;
        Ok(Self { tag, path })
    }

    /// The tag of this log's steps, for [`say`].
    pub fn tag(&self) -> &'static str {
        self.tag
    }

    /// Runs `cmd` to completion with stdout and stderr appended to the log; fails with the
    /// command line, the exit status and the log's tail unless it exits 0.
    pub fn run(&self, cmd: &mut Command) -> Result<()> {
        let line = display(cmd);
        say(
            self.tag,
            format_args!("$ {line}    (log: {})", self.path.display()),
        );
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot open log {}", self.path.display()))?;
        writeln!(file, "\n$ {line}")
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        let stderr = file
            .try_clone()
            .context("cannot duplicate the log file handle")?;
        let started = Instant::now();
        let status = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .status()
            .with_context(|| format!("cannot start `{line}`"))?;
        if !status.success() {
            bail!(
                "`{line}` failed ({status}); last lines of {}:\n{}",
                self.path.display(),
                tail(&self.path, LOG_TAIL_LINES)
            );
        }
        say(
            self.tag,
            format_args!("  ok in {}", elapsed(started.elapsed())),
        );
        Ok(())
    }
}

/// Runs `cmd` and returns its stdout; fails with its stderr unless it exits 0. For short
/// queries (interpreter probes), not for steps worth logging.
pub fn output(cmd: &mut Command) -> Result<String> {
    let line = display(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{line}` printed non-UTF-8 output"))
}

/// A command that runs the interpreter `exe`, inside `root` through chroot(8) if given.
pub fn python(root: Option<&Path>, exe: &Path) -> Command {
    let mut cmd = match root {
        Some(root) => {
            let mut cmd = Command::new("chroot");
            cmd.arg(root).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    cmd.env_remove("PYTHONHOME").env_remove("PYTHONPATH");
    cmd
}

/// `cmd` as a shell-like line, for messages.
pub fn display(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
            parts.push(format!("'{}'", arg.replace('\'', r"'\''")));
        } else {
            parts.push(arg.into_owned());
        }
    }
    parts.join(" ")
}

/// `d` as `1m05s` or `7.3s`.
pub fn elapsed(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The last `n` lines of the file at `path` (or why they cannot be read).
fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(err) => format!("(cannot read the log: {err})"),
    }
}

/// Writes `contents` to `path` through a temporary file and a rename, so that a reader never
/// sees half a file.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file =
        File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(contents)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    file.sync_all()
        .with_context(|| format!("cannot sync {}", tmp.display()))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}
