//! The profilers compared: how each is attached to a target, and how its output is read back
//! into stacks of (function, line) frames.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::bench::util::{Interpreter, Proc, Usage};

/// One profiler configuration (a row of the tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profiler {
    /// No profiler: the baseline (always measured, not a `--profilers` value).
    #[value(skip)]
    None,
    /// `pyagent record --mode ebpf`.
    PyagentEbpf,
    /// `pyagent record --mode userspace`.
    PyagentUserspace,
    /// `py-spy record` (stops the target's threads while reading each sample).
    PySpy,
    /// `py-spy record --nonblocking`.
    PySpyNonblocking,
    /// `austin` (never stops the target): wall-clock mode, every thread sampled.
    Austin,
    /// `austin -s`: CPU mode, idle threads left out (each thread's state read every sample),
    /// the mode pyagent's `record` samples in by default.
    AustinCpu,
    /// `python3.15 -m profiling.sampling attach` (CPython's own sampler).
    Tachyon,
    /// A control of the toggled slowdown, no profiler: a `cpu-clock` perf event on every CPU at
    /// the rate, no program attached and no buffer (each overflow is dropped at once), opened by
    /// the harness. What any perf-event sampler pays before its own work (pyagent's eBPF mode,
    /// the eBPF agents). Measured beside pyagent's eBPF mode, not a `--profilers` value.
    #[value(skip)]
    TimerOnly,
}

impl Profiler {
    /// The name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Profiler::None => "none",
            Profiler::PyagentEbpf => "pyagent ebpf",
            Profiler::PyagentUserspace => "pyagent userspace",
            Profiler::PySpy => "py-spy",
            Profiler::PySpyNonblocking => "py-spy --nonblocking",
            Profiler::Austin => "austin",
            Profiler::AustinCpu => "austin -s",
            Profiler::Tachyon => "tachyon",
            Profiler::TimerOnly => "cpu-clock events only (control)",
        }
    }

    /// A short name for chart labels.
    pub fn short(self) -> &'static str {
        match self {
            Profiler::None => "none",
            Profiler::PyagentEbpf => "pyagent ebpf",
            Profiler::PyagentUserspace => "pyagent user",
            Profiler::PySpy => "py-spy",
            Profiler::PySpyNonblocking => "py-spy nb",
            Profiler::Austin => "austin",
            Profiler::AustinCpu => "austin -s",
            Profiler::Tachyon => "tachyon",
            Profiler::TimerOnly => "timer only",
        }
    }

    /// Austin, in either mode.
    pub fn is_austin(self) -> bool {
        matches!(self, Profiler::Austin | Profiler::AustinCpu)
    }

    /// Ours.
    pub fn is_pyagent(self) -> bool {
        matches!(self, Profiler::PyagentEbpf | Profiler::PyagentUserspace)
    }

    /// Why the profiler refuses `rate_hz`, if it does.
    pub fn refuses(self, rate_hz: u32) -> Option<&'static str> {
        // `pyagent record --rate` accepts the samplers' one range (its flag parser refuses others).
        (self.is_pyagent() && !PYAGENT_RATE_HZ.contains(&rate_hz))
            .then_some("pyagent accepts --rate 1 to 10000")
    }
}

/// `pyagent::config::RATE_HZ`, repeated because xtask does not link the agent (a test of the
/// `agent-lib` build checks that they agree).
const PYAGENT_RATE_HZ: std::ops::RangeInclusive<u32> = 1..=10_000;

/// Where the programs are.
#[derive(Debug)]
pub struct Tools {
    /// The pyagent binary.
    pub agent: PathBuf,
    /// py-spy 0.4.3.
    pub py_spy: PathBuf,
    /// Austin 3.7.0.
    pub austin: PathBuf,
}

/// A frame as a profiler reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Function name (Tachyon and py-spy give the bare name, pyagent and Austin may qualify it).
    pub function: String,
    /// Line number, when the profiler gave one.
    pub line: Option<u32>,
}

impl Frame {
    /// Whether this is a frame of the function `name` (bare or qualified).
    pub fn is(&self, name: &str) -> bool {
        self.function == name
            || self
                .function
                .strip_suffix(name)
                .is_some_and(|q| q.ends_with('.'))
    }
}

/// One stack and how many samples had it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Outermost first.
    pub frames: Vec<Frame>,
    /// Samples.
    pub count: u64,
}

/// What a profiler collected and what that cost it.
#[derive(Debug)]
pub struct Sampled {
    /// The profiler process's rusage.
    pub usage: Usage,
    /// Stacks read back from its output.
    pub stacks: Vec<Stack>,
    /// Ticks `pyagent record --mode userspace` reports it could not serve on time.
    pub lagged: Option<u64>,
    /// Samples `pyagent record --mode ebpf` reports it dropped (torn, anchor misses, incomplete).
    pub dropped: Option<u64>,
}

impl Sampled {
    /// Samples in the output.
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }
}

/// A profiler attached to a target, running.
pub struct Attached {
    profiler: Profiler,
    proc: Proc,
    out: PathBuf,
}

/// Output files get distinct names within a run (several profilers may read one target).
static RUN_NUMBER: AtomicU32 = AtomicU32::new(0);

/// Starts `profiler` on process `pid` (running on `interp`) for `secs` seconds at `rate_hz`.
pub fn attach(
    tools: &Tools,
    profiler: Profiler,
    interp: &Interpreter,
    pid: u32,
    rate_hz: u32,
    secs: u32,
) -> Result<Attached> {
    let (inside, host) = interp.scratch_dir()?;
    let name = format!(
        "compare-{}-{}.txt",
        std::process::id(),
        RUN_NUMBER.fetch_add(1, Ordering::Relaxed)
    );
    let out = host.join(&name);
    let _ = std::fs::remove_file(&out);
    let (pid, rate, secs) = (pid.to_string(), rate_hz.to_string(), secs.to_string());
    let mut cmd = match profiler {
        Profiler::None | Profiler::TimerOnly => bail!("no profiler to attach"),
        Profiler::PyagentEbpf | Profiler::PyagentUserspace => {
            let mode = if profiler == Profiler::PyagentEbpf {
                "ebpf"
            } else {
                "userspace"
            };
            let mut c = Command::new(&tools.agent);
            c.args([
                "record", "--pid", &pid, "--mode", mode, "-r", &rate, "-d", &secs,
            ])
            // Every counter: the lagged ticks and drops are in the details line.
            .args(["--verbose", "-f", "collapsed", "-o"])
            .arg(&out);
            c
        }
        Profiler::PySpy | Profiler::PySpyNonblocking => {
            let mut c = Command::new(&tools.py_spy);
            c.args([
                "record", "--pid", &pid, "-r", &rate, "-d", &secs, "-f", "raw", "-o",
            ])
            .arg(&out);
            if profiler == Profiler::PySpyNonblocking {
                c.arg("--nonblocking");
            }
            c
        }
        Profiler::Austin | Profiler::AustinCpu => {
            // Austin takes an interval in microseconds.
            let interval_us = (1_000_000 / rate_hz.max(1)).max(1).to_string();
            let mut c = Command::new(&tools.austin);
            if profiler == Profiler::AustinCpu {
                c.arg("-s");
            }
            c.args(["-i", &interval_us, "-p", &pid, "-x", &secs, "-o"])
                .arg(&out);
            c
        }
        Profiler::Tachyon => {
            let inside_out = inside.join(&name).display().to_string();
            interp.command([
                "-m",
                "profiling.sampling",
                "attach",
                &pid,
                "-r",
                &rate,
                "-d",
                &secs,
                "--collapsed",
                "-o",
                &inside_out,
            ])
        }
    };
    let proc = Proc::spawn(&mut cmd, profiler.label())?;
    Ok(Attached {
        profiler,
        proc,
        out,
    })
}

impl Attached {
    /// The profiler's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Waits (at most `timeout`, then kills it) for the profiler to exit, and reads its output.
    pub fn finish(mut self, timeout: Duration) -> Result<Sampled> {
        let (usage, stderr) = self.proc.wait(timeout)?;
        let stdout = self.proc.rest_of_stdout();
        if !usage.success() {
            bail!(
                "{} failed ({}): {}",
                self.profiler.label(),
                usage.status,
                last_lines(&format!("{stdout}{stderr}"))
            );
        }
        let text = std::fs::read_to_string(&self.out).with_context(|| {
            format!(
                "{} wrote no {} ({})",
                self.profiler.label(),
                self.out.display(),
                last_lines(&stderr)
            )
        })?;
        let _ = std::fs::remove_file(&self.out);
        let lagged = (self.profiler == Profiler::PyagentUserspace)
            .then(|| number_before(&stderr, " lagged ticks"))
            .flatten();
        let dropped = (self.profiler == Profiler::PyagentEbpf)
            .then(|| number_before(&stderr, " dropped"))
            .flatten();
        Ok(Sampled {
            usage,
            stacks: parse(self.profiler, &text),
            lagged,
            dropped,
        })
    }
}

/// The last two non-empty lines of a message.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

/// The number just before `suffix` in `text` (`"3 lagged ticks"` → 3).
fn number_before(text: &str, suffix: &str) -> Option<u64> {
    let head = &text[..text.find(suffix)?];
    head.rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Reads a profiler's output back into stacks.
///
/// - pyagent collapsed: `thread TID (NAME);func (file:line);... COUNT`
/// - py-spy raw: `func (file:line);... COUNT`
/// - Austin 3.7: `P<pid>;T<iid>:<tid>;file:func:line;... METRIC`, one line per sample (the metric
///   is time, not a count), after `# key: value` header lines
/// - Tachyon collapsed: `tid:TID;file:func:line;... COUNT`
pub fn parse(profiler: Profiler, text: &str) -> Vec<Stack> {
    let mut stacks = Vec::new();
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        let count = if profiler.is_austin() { 1 } else { count };
        let frames = stack
            .split(';')
            .filter(|e| !is_thread_element(profiler, e))
            .map(|e| match profiler {
                Profiler::Austin | Profiler::AustinCpu | Profiler::Tachyon => colon_frame(e),
                _ => paren_frame(e),
            })
            .collect();
        stacks.push(Stack { frames, count });
    }
    stacks
}

/// Process and thread elements that lead a collapsed line.
fn is_thread_element(profiler: Profiler, e: &str) -> bool {
    let tagged = |tag: char| {
        e.strip_prefix(tag).is_some_and(|rest| {
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == ':')
        })
    };
    match profiler {
        Profiler::PyagentEbpf | Profiler::PyagentUserspace => {
            e.starts_with("thread ") || e.starts_with("process ")
        }
        Profiler::Austin | Profiler::AustinCpu => tagged('P') || tagged('T'),
        Profiler::Tachyon => e.starts_with("tid:"),
        _ => false,
    }
}

/// `func (file:line)`, or a bare name such as `<native>`.
fn paren_frame(e: &str) -> Frame {
    if let Some((function, rest)) = e.rsplit_once(" (") {
        if let Some(inner) = rest.strip_suffix(')') {
            let line = inner.rsplit_once(':').and_then(|(_, l)| l.parse().ok());
            return Frame {
                function: function.to_owned(),
                line,
            };
        }
    }
    Frame {
        function: e.to_owned(),
        line: None,
    }
}

/// `file:func:line` (the file may hold colons; the function does not).
fn colon_frame(e: &str) -> Frame {
    let mut parts = e.rsplitn(3, ':');
    let last = parts.next().unwrap_or_default();
    match (last.parse::<u32>(), parts.next()) {
        (Ok(line), Some(function)) => Frame {
            function: function.to_owned(),
            line: Some(line),
        },
        _ => Frame {
            function: e.to_owned(),
            line: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "agent-lib")]
    #[test]
    fn rate_range_is_the_agents() {
        assert_eq!(PYAGENT_RATE_HZ, pyagent::config::RATE_HZ);
    }

    fn f(function: &str, line: u32) -> Frame {
        Frame {
            function: function.into(),
            line: Some(line),
        }
    }

    #[test]
    fn reads_every_format() {
        let want = vec![f("<module>", 7), f("work", 4)];
        let pyagent = "thread 9624 (python3.13);<module> (/tmp/x.py:7);work (/tmp/x.py:4) 1325\n";
        let py_spy = "<module> (x.py:7);work (x.py:4) 1325\n";
        let tachyon = "tid:7829;x.py:<module>:7;x.py:work:4 1325\n";
        for (p, text) in [
            (Profiler::PyagentEbpf, pyagent),
            (Profiler::PySpy, py_spy),
            (Profiler::Tachyon, tachyon),
        ] {
            assert_eq!(
                parse(p, text),
                vec![Stack {
                    frames: want.clone(),
                    count: 1325
                }],
                "{p:?}"
            );
        }
        let austin = concat!(
            "# austin: 3.7.0\n# mode: wall\n\n",
            "P5146;T0:5146;/tmp/x.py:<module>:7;/tmp/x.py:work:4 532\n",
            "P5146;T0:5146;/tmp/x.py:<module>:7;/tmp/x.py:work:4 10112\n",
        );
        let stacks = parse(Profiler::Austin, austin);
        assert_eq!(stacks.len(), 2);
        assert!(stacks.iter().all(|s| s.frames == want && s.count == 1));
    }

    #[test]
    fn reads_the_summary_counters() {
        let err = "pyagent: wrote a.txt (1696 samples, 3 stacks, 0 failed, 297 lagged ticks)\n";
        assert_eq!(number_before(err, " lagged ticks"), Some(297));
        let err = "pyagent: ebpf mode, wrote a.txt (4835 samples, 9 stacks, 12 dropped: 0 torn)\n";
        assert_eq!(number_before(err, " dropped"), Some(12));
        assert_eq!(number_before("nothing", " lagged ticks"), None);
    }

    #[test]
    fn matches_qualified_names() {
        assert!(f("hot_a", 1).is("hot_a"));
        assert!(f("Cls.hot_a", 1).is("hot_a"));
        assert!(!f("not_hot_a", 1).is("hot_a"));
    }
}
