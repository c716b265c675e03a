//! `cargo xtask bench soak`: the service over a long run with churn. The release agent runs as
//! the service (`--all-python --interval 10s --output DIR`) beside `--processes` Python
//! processes (`deep.py 30 busy`), of which one is replaced every `--churn-every` seconds (the
//! oldest killed, a new one started). Every `--sample-every` seconds the bench reads the agent's
//! RSS, open descriptors, CPU share since the previous row, and the output directory's files and
//! bytes, and prints them as a table; at the end it compares the last third of the rows with the
//! first third. Flat is the target: a leak shows as growth from one third to the other.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::stats;
use super::util::{self, Features, Manifest, Proc, Table};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Length of the run, minutes.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// Python processes kept running.
    #[arg(long, default_value_t = 50)]
    processes: usize,
    /// Seconds between two replacements of a process (0: no churn).
    #[arg(long, default_value_t = 10.0)]
    churn_every: f64,
    /// Seconds between two rows of the table.
    #[arg(long, default_value_t = 30.0)]
    sample_every: f64,
    /// Interpreter of the processes (manifest name).
    #[arg(long, default_value = "py312")]
    python: String,
    /// Run in this build even if it is a debug build.
    #[arg(long)]
    no_release: bool,
}

/// Depth of the busy targets.
const TARGET_DEPTH: usize = 30;
const READY: Duration = Duration::from_secs(60);

/// One reading of the agent.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Duration,
    rss: u64,
    fds: usize,
    cpu_pct: f64,
    files: usize,
    bytes: u64,
}

/// Runs the benchmark.
pub fn run(args: &Args) -> Result<()> {
    util::reexec_release(&["pyagent"], Features::None, args.no_release)?;
    if args.processes == 0 || args.minutes <= 0.0 || args.sample_every <= 0.0 {
        bail!("--processes, --minutes and --sample-every must be positive");
    }
    let manifest = Manifest::load()?;
    let py = manifest.interpreter(&args.python)?;
    let script = util::bench_script("deep.py");
    let agent_bin = util::release_binary("pyagent")?;
    let dir = std::env::temp_dir().join(format!("pyagent-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let start_target = || -> Result<Proc> {
        let mut cmd = py.script_command(&script, &[TARGET_DEPTH.to_string(), "busy".into()])?;
        Proc::spawn_ready(&mut cmd, "soak target", "ready", READY)
    };
    let mut targets: VecDeque<Proc> = VecDeque::new();
    for _ in 0..args.processes {
        targets.push_back(start_target()?);
    }
    let mut agent = Proc::spawn(
        std::process::Command::new(&agent_bin)
            .args(["--all-python", "--interval", "10s", "--rate", "19"])
            .args(["--metrics-addr", "127.0.0.1:0", "--output"])
            .arg(&dir),
        "pyagent service",
    )?;
    let pid = agent.pid();
    eprintln!(
        "soak: {} min, {} {} processes, one replaced every {} s, a row every {} s",
        args.minutes, args.processes, py.name, args.churn_every, args.sample_every
    );

    let started = Instant::now();
    let end = started + Duration::from_secs_f64(args.minutes * 60.0);
    let churn = (args.churn_every > 0.0).then(|| Duration::from_secs_f64(args.churn_every));
    let mut next_churn = churn.map(|c| started + c);
    let sample_every = Duration::from_secs_f64(args.sample_every);
    let mut next_row = started + sample_every;
    let mut last_cpu = (started, util::proc_cpu_secs_precise(pid).unwrap_or(0.0));
    let mut readings = Vec::new();
    let mut replaced = 0u64;
    while Instant::now() < end {
        if let Some((usage, stderr)) = agent.try_wait()? {
            bail!(
                "the agent exited during the run ({}): {stderr}",
                usage.status
            );
        }
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_churn, churn) {
            if now >= at {
                drop(targets.pop_front());
                targets.push_back(start_target()?);
                replaced += 1;
                next_churn = Some(at + every);
            }
        }
        if now >= next_row {
            let cpu = util::proc_cpu_secs_precise(pid).unwrap_or(last_cpu.1);
            let wall = now.duration_since(last_cpu.0).as_secs_f64();
            let (files, bytes) = directory_size(&dir);
            readings.push(Reading {
                at: now.duration_since(started),
                rss: util::proc_rss_bytes(pid).unwrap_or(0),
                fds: open_fds(pid),
                cpu_pct: 100.0 * (cpu - last_cpu.1) / wall.max(1e-9),
                files,
                bytes,
            });
            last_cpu = (now, cpu);
            next_row += sample_every;
        }
        let wake = [Some(next_row), next_churn, Some(end)]
            .into_iter()
            .flatten()
            .min()
            .expect("end is always there");
        std::thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(500)),
        );
    }
    agent.signal(libc::SIGTERM);
    let (usage, stderr) = agent.wait(Duration::from_secs(60))?;
    let last_line = stderr.lines().last().unwrap_or("").to_owned();
    drop(targets);
    let _ = std::fs::remove_dir_all(&dir);

    print_table(&readings);
    println!(
        "\n{replaced} processes replaced; agent exit {} after SIGTERM: {last_line}",
        if usage.success() { "0" } else { "non-zero" }
    );
    print_trend(&readings);
    Ok(())
}

fn print_table(readings: &[Reading]) {
    let mut table = Table::new(&[
        "minute",
        "RSS MiB",
        "open fds",
        "CPU % of a core",
        "files",
        "dir MiB",
    ]);
    for r in readings {
        table.row(vec![
            format!("{:.1}", r.at.as_secs_f64() / 60.0),
            format!("{:.1}", r.rss as f64 / 1048576.0),
            r.fds.to_string(),
            format!("{:.2}", r.cpu_pct),
            r.files.to_string(),
            format!("{:.2}", r.bytes as f64 / 1048576.0),
        ]);
    }
    table.print();
}

/// One column of a reading, as a number.
type Metric = fn(&Reading) -> f64;

/// First third against last third, by median: what "flat" is judged on.
fn print_trend(readings: &[Reading]) {
    if readings.len() < 3 {
        println!("too few rows to compare the first and last thirds");
        return;
    }
    let third = readings.len() / 3;
    let (first, last) = (&readings[..third], &readings[readings.len() - third..]);
    let median = |rows: &[Reading], f: Metric| {
        let v: Vec<f64> = rows.iter().map(f).collect();
        stats::median(&v)
    };
    let mut table = Table::new(&["", "first third", "last third", "change"]);
    let metrics: [(&str, Metric); 3] = [
        ("RSS MiB", |r| r.rss as f64 / 1048576.0),
        ("open fds", |r| r.fds as f64),
        ("CPU % of a core", |r| r.cpu_pct),
    ];
    for (name, f) in metrics {
        let (a, b) = (median(first, f), median(last, f));
        table.row(vec![
            name.to_owned(),
            format!("{a:.2}"),
            format!("{b:.2}"),
            format!("{:+.1}%", stats::percent_change(a, b)),
        ]);
    }
    table.print();
}

/// Descriptors the process has open.
fn open_fds(pid: u32) -> usize {
    i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok())
        .and_then(|p| p.fd_count().ok())
        .unwrap_or(0)
}

/// Files and bytes under `dir` (one level: the sink writes no subdirectories).
fn directory_size(dir: &Path) -> (usize, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
}
