//! The asyncio row: samples per CPU-second of the unwinder with and without task-aware stacks,
//! beside Tachyon `--async-aware`, on one target of TASKS tasks DEPTH coroutines deep (see the
//! parent module).

use anyhow::Result;
use pyagent::unwind::{ThreadSample, UnwindOptions};

use super::cell::{ratio, Cell};
use super::samplers::{ours_checked, print_heading, tachyon_with, READY};
use crate::bench::util::{self, Manifest, Proc, Table};

/// Tasks the root task gathers.
const TASKS: usize = 100;
/// Coroutines each task is deep (`nest` awaiting `nest`).
const DEPTH: usize = 20;
/// The interpreter: task stacks need 3.14+, Tachyon 3.15.
const PYTHON: &str = "py315";
/// The task running on the CPU.
const BUSY_TASK: &str = "task-0";

/// Measures the row and prints its table.
pub fn run(manifest: &Manifest, seconds: f64, peer_seconds: f64) -> Result<()> {
    let py = manifest.interpreter(PYTHON)?;
    let load_before = util::load_average();
    eprintln!("bench unwind: asyncio, {TASKS} tasks {DEPTH} coroutines deep on {PYTHON}");
    let script = util::bench_script("async_deep.py");
    let mut cmd = py.script_command(&script, &[TASKS.to_string(), DEPTH.to_string()])?;
    let target = Proc::spawn_ready(
        &mut cmd,
        format!("{PYTHON} async_deep.py {TASKS} {DEPTH}"),
        "ready",
        READY,
    )?;
    let nests = |frames: &mut dyn Iterator<Item = &str>| frames.filter(|f| *f == "nest").count();
    // `tid:N;<task>:Task-1:0;async_deep.py:main:29;<task>:task-0:0;async_deep.py:nest:14;… COUNT`
    let theirs_right = |stack: &str| {
        stack.contains(&format!(";<task>:{BUSY_TASK}:"))
            && nests(&mut stack.split(';').filter_map(|f| f.split(':').nth(1))) == DEPTH
    };
    let tachyon = tachyon_with(
        py,
        &target,
        &["--async-aware", "-r", "100khz"],
        theirs_right,
        peer_seconds,
    );
    let ours = |async_tasks: bool| {
        let options = UnwindOptions {
            async_tasks,
            ..UnwindOptions::default()
        };
        let check = move |s: &[ThreadSample]| {
            s.len() == 1
                && nests(&mut s[0].frames.iter().map(|f| f.function())) == DEPTH
                && (!async_tasks || s[0].thread.task.as_deref() == Some(BUSY_TASK))
        };
        let expected = format!("one thread with {DEPTH} `nest` frames");
        ours_checked(&target, options, check, &expected, seconds)
    };
    let plain = ours(false);
    let tasks = ours(true);
    drop(target);

    print_heading("asyncio task-aware stacks", &load_before);
    let mut t = Table::new(&[
        "python, target",
        "pyagent --async",
        "pyagent (plain)",
        "Tachyon --async-aware",
        "--async/Tachyon",
    ]);
    t.row(vec![
        format!("{PYTHON} {TASKS} tasks × {DEPTH} coroutines"),
        tasks.show(),
        plain.show(),
        tachyon.show(),
        ratio(tasks.rate(), tachyon.rate()),
    ]);
    t.print();
    println!(
        "\nOne task loops on the CPU in its innermost coroutine, {} wait on an event. Ours: \
         unwinding (and with --async, the running task, its name and its awaiters' frames) \
         in-process, CPU time of the sampling thread, frame cache on. Tachyon (`--async-aware \
         -r 100khz --collapsed`, running mode): whole-process user+system time. A sample counts \
         when it holds the {DEPTH} coroutines (and, with tasks, names {BUSY_TASK}).",
        TASKS - 1
    );
    let mut d = Table::new(&["profiler", "samples", "CPU s", "wall s", "notes"]);
    for (who, c) in [
        ("pyagent --async", &tasks),
        ("pyagent (plain)", &plain),
        ("Tachyon --async-aware", &tachyon),
    ] {
        if let Cell::Measured(m) = c {
            d.row(vec![
                who.to_owned(),
                m.samples.to_string(),
                format!("{:.2}", m.cpu_secs),
                format!("{:.2}", m.wall_secs),
                m.note.clone(),
            ]);
        }
    }
    println!();
    d.print();
    let verdict = match (tasks.rate(), tachyon.rate()) {
        (Some(a), Some(b)) if a / b >= 2.0 => format!("met ({:.1}× ≥ 2×)", a / b),
        (Some(a), Some(b)) => format!("MISSED ({:.1}× < 2×)", a / b),
        _ => "not measured".to_owned(),
    };
    println!("\n### Target (issue 14: --async ≥ 2× Tachyon --async-aware)\n\n- {verdict}");
    Ok(())
}
