//! The agent-overhead tables: the agent beside N busy processes (section 2), and with one flag
//! off and on beside processes that exercise it (section 3). Each row is a run of the agent
//! ([`super::agent_run`]).

use std::path::Path;

use anyhow::Result;

use super::agent_rows::{flag_row, flag_target_line, overhead_row, overhead_target_line, Flag};
use super::agent_run::run_agent;
use super::targets::{AGENT_TARGET_DEPTH, READY};
use crate::bench::util::{self, niced, Interpreter, Proc, Table};

/// Section 2: the agent in ebpf then userspace mode beside each number of busy processes.
pub(super) fn agent_overhead(
    agent: &Path,
    py: &Interpreter,
    script: &Path,
    counts: &[usize],
    secs: f64,
) -> Result<()> {
    let load_before = util::load_average();
    let mut t = Table::new(&[
        "processes, mode",
        "profiled",
        "samples",
        "CPU s / wall s",
        "agent CPU % (whole run)",
        "agent CPU % (after first scan)",
        "agent CPU % (sampling only)",
        "agent CPU % (sampling, second half)",
        "peak RSS MiB (whole run)",
        "peak RSS MiB (after first scan)",
        "BPF in targets, % of a core",
    ]);
    let mut notes = Vec::new();
    let mut busy: Vec<Proc> = Vec::new();
    let mut counts = counts.to_vec();
    counts.sort_unstable();
    let mut target_lines = Vec::new();
    for &n in &counts {
        eprintln!(
            "bench ebpf: starting {} busy {} processes",
            n.saturating_sub(busy.len()),
            py.name
        );
        let mut starting = Vec::new();
        while busy.len() + starting.len() < n {
            // At nice 19 they take every idle cycle yet leave the agent (nice 0) the CPU it asks
            // for: its CPU % is then what it needs, not the share 50 competitors leave it.
            let inner =
                py.script_command(script, &[AGENT_TARGET_DEPTH.to_string(), "busy".to_owned()])?;
            let mut cmd = niced(&inner, 19);
            starting.push(Proc::spawn(
                &mut cmd,
                format!("busy {} #{}", py.name, busy.len() + starting.len()),
            )?);
        }
        for mut p in starting {
            p.wait_line(|l| l == "ready", READY)?;
            busy.push(p);
        }
        for mode in ["ebpf", "userspace"] {
            eprintln!("bench ebpf: agent, {n} processes, {mode} mode, {secs} s");
            let r = run_agent(agent, mode, secs, &[])?;
            t.row(overhead_row(n, mode, &r));
            notes.push(format!("{n} {mode}: {}", r.summary));
            if n == 50 && mode == "ebpf" {
                target_lines.push(overhead_target_line(&r));
            }
        }
    }
    drop(busy);
    println!(
        "\n## Agent overhead: `pyagent --all-python -r 99` with N busy {} processes\n",
        py.name
    );
    println!("{load_before} at start, {} at end; {secs} s per run; busy processes: `nice -n 19 deep.py {AGENT_TARGET_DEPTH} busy`\n", util::load_average());
    t.print();
    println!(
        "\n\"profiled\": profiles written (every CPython process on the host, so other users' \
         processes count too). CPU %: the agent's user+system time (`wait4`) over its wall time; \
         \"after first scan\" starts when it prints that it is profiling (the first scan parses every \
         Python binary on the host) and ends at its exit, after it wrote its profiles; \"sampling \
         only\" ends at the last reading 0.5 s before its sampling stops, from the run time of its \
         threads (`/proc/PID/task/*/schedstat`, to the nanosecond); \"second half\" is the second \
         half of that span (a service's steady cost: a new process's maps are read again at 2, 6, \
         14 s … after it is found, for a tracer loaded late, then at most every 5 minutes). BPF in targets: the program's kernel run time over the run \
         (spent in the interrupted processes, not charged to the agent). Peak RSS: `ru_maxrss` over the \
         whole run, and the highest `VmRSS` polled every 200 ms after the first scan."
    );
    println!("\nAgent summaries:\n");
    for n in notes {
        println!("- {n}");
    }
    println!("\nTargets (50 processes: agent ≤ 0.5% of one core, ≤ 50 MiB RSS):\n");
    if target_lines.is_empty() {
        println!("- not measured in this run (needs 50 processes)");
    }
    for l in target_lines {
        println!("{l}");
    }
    Ok(())
}

/// The agent in ebpf mode with and without `flag` beside `n` processes that exercise it: its
/// CPU, and the time of both BPF programs (charged to the tasks they interrupt, not to the
/// agent).
pub(super) fn flag_overhead(
    agent: &Path,
    py: &Interpreter,
    script: &Path,
    n: usize,
    secs: f64,
    flag: Flag,
) -> Result<()> {
    let load_before = util::load_average();
    let kind = flag.target_kind();
    eprintln!(
        "bench ebpf: starting {n} {} {} processes",
        flag.what(),
        py.name
    );
    let mut procs = Vec::new();
    for i in 0..n {
        let inner =
            py.script_command(script, &[AGENT_TARGET_DEPTH.to_string(), kind.to_owned()])?;
        // Busy ones at nice 19, as in the agent-overhead runs: they take every idle cycle yet
        // leave the agent the CPU it asks for.
        let mut cmd = niced(&inner, if flag == Flag::Native { 19 } else { 0 });
        procs.push(Proc::spawn(&mut cmd, format!("{kind} {} #{i}", py.name))?);
    }
    for p in &mut procs {
        p.wait_line(|l| l == "ready", READY)?;
    }
    let mut t = Table::new(&[
        flag.arg(),
        "samples",
        "agent CPU % (sampling, second half)",
        "agent CPU % (sampling only)",
        "agent CPU % (after first scan)",
        "peak RSS MiB (after first scan)",
        "pa_sample, % of a core",
        "pa_switch, % of a core",
        "summary",
    ]);
    let mut verdicts = Vec::new();
    for on in [false, true] {
        let extra: &[&str] = if on { &[flag.arg()] } else { &[] };
        eprintln!(
            "bench ebpf: agent, {n} {kind} processes, {} {on}, {secs} s",
            flag.arg()
        );
        let r = run_agent(agent, "ebpf", secs, extra)?;
        t.row(flag_row(flag, on, &r));
        if on {
            verdicts.push(flag_target_line(flag, n, &r));
        }
    }
    drop(procs);
    println!(
        "\n## `pyagent --all-python --mode ebpf -r 99 [{}]` with {n} {} {} processes\n",
        flag.arg(),
        flag.what(),
        py.name
    );
    let how = match flag {
        Flag::OffCpu => "`deep.py {D} block` (time.sleep(0.001) in a loop)",
        Flag::Native => "`nice -n 19 deep.py {D} native` (sorted() with a key calling zlib.crc32)",
    }
    .replace("{D}", &AGENT_TARGET_DEPTH.to_string());
    println!(
        "{load_before} at start, {} at end; {secs} s per run; processes: {how}\n",
        util::load_average()
    );
    t.print();
    println!("\nAgent CPU: its threads' run time (`/proc/PID/task/*/schedstat`) over its wall time; \"sampling only\" from its first scan to 0.5 s before sampling stops, \"second half\" over the second half of that span (a service's steady cost, after the one-time work for new processes). BPF columns: each program's kernel run time over the run, as % of one core (charged to the tasks it runs in). Targets:\n");
    for v in verdicts {
        println!("{v}");
    }
    Ok(())
}
