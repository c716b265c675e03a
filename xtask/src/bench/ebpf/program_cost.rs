//! The program-cost tables: ns per run by interpreter and depth (section 1), by stage of an
//! anchored walk, and with native stacks (section 4). Each row is a load of the sampler
//! ([`super::program_run`]).

use std::path::Path;

use anyhow::{Context, Result};
use pyagent::sampler::bpf::{BpfConfig, BpfSampler};

use super::cost_rows::{
    anchor_cell, anchor_target_line, depth_row, native_row, native_target_line, stage_row,
};
use super::program_run::{measure, Walk, UNWOUND_PER_INTERVAL};
use crate::bench::util::{self, Interpreter, Table};

/// Section 1: ns per run of the program, for each interpreter and depth, whole and anchored,
/// beside the early exit of an untracked load.
pub(super) fn bpf_cost(
    pythons: &[&Interpreter],
    depths: &[usize],
    script: &Path,
    secs: f64,
    rate: u64,
) -> Result<()> {
    let load_before = util::load_average();
    let size = BpfSampler::load_detached(&BpfConfig::default())
        .context("loading the BPF sampler (needs root)")?
        .program_size();
    // The baseline target: busy like the others, never tracked.
    let base_py = pythons.last().copied().context("no interpreter given")?;
    eprintln!(
        "bench ebpf: early-exit baseline ({} busy, untracked)",
        base_py.name
    );
    let baseline = measure(base_py, script, 100, Walk::Untracked, 0, secs, rate)?;
    let early_ns = baseline.ns_per_run()[1];

    let mut t = Table::new(&[
        "python, depth",
        "walks",
        "frames/walk",
        "ns/walk: median [quartiles]",
        "with anchor: ns/walk (frames/walk)",
    ]);
    let mut target_line = String::new();
    for py in pythons {
        for &depth in depths {
            eprintln!("bench ebpf: {} depth {depth}", py.name);
            let full = measure(py, script, depth, Walk::Full, 0, secs, rate)?;
            let has_anchor = py.minor() >= (3, 15);
            let (anchor, anchor_ns) = if has_anchor {
                eprintln!("bench ebpf: {} depth {depth}, with anchor", py.name);
                let p = measure(py, script, depth, Walk::AgentAnchor, 0, secs, rate)?;
                (anchor_cell(&p), Some(p.ns_per_run()[1]))
            } else {
                ("n/a (< 3.15)".to_owned(), None)
            };
            t.row(depth_row(&py.name, depth, &full, anchor));
            if let (Some(ns), 100) = (anchor_ns, depth) {
                target_line += &anchor_target_line(&py.name, ns, full.ns_per_run()[1]);
            }
        }
    }
    println!("\n## BPF program cost: ns per run (kernel BPF statistics, lower is better)\n");
    println!(
        "{load_before} at start, {} at end; perf event at {rate} Hz per CPU, {secs} s per row\n",
        util::load_average()
    );
    t.print();
    println!(
        "\nEarly exit (idle CPU or untracked task): {early_ns:.0} ns/run, median of 100 ms intervals \
         ({} runs on every CPU, {} of them on an idle CPU, {} tracked nothing). Walks: the perf \
         event follows the target's thread alone, so every run is a walk; ns/walk per 100 ms \
         interval, the median and quartiles over the intervals (steal time and other tenants' \
         cache traffic come in bursts here; whole-run means differ by ±30%). Targets: `deep.py DEPTH busy` (one thread looping on \
         the CPU DEPTH Python frames deep; frames/walk adds the interpreter's own frames: the C-entry shim, and 3.15's base frame).",
        baseline.runs, baseline.idle, baseline.early - baseline.idle
    );
    if let Some(s) = size {
        println!(
            "Program size: {} verified instructions, {} bytes translated, {} bytes JIT-compiled.",
            s.verified_insns.map_or("?".to_owned(), |v| v.to_string()),
            s.xlated_bytes.map_or("?".to_owned(), |v| v.to_string()),
            s.jited_bytes
        );
    }
    println!(
        "\nWith anchor (3.15): as in the agent, a userspace walk of each thread every 100 ms moves \
         `last_profiled_frame` to its top frame, and the program stops there; the agent splices \
         the rest from its frame cache (anchor hits / walks shown when not all hit).\n"
    );
    println!("Target (≤ 2 µs per run at depth 100 on 3.15 with the anchor):\n");
    if target_line.is_empty() {
        println!("- not measured in this run (needs 3.15 at depth 100)");
    } else {
        println!("{target_line}");
    }
    Ok(())
}

/// What each stage of an anchored depth-100 walk adds, on every 3.15 interpreter given.
pub(super) fn stage_costs(
    pythons: &[&Interpreter],
    script: &Path,
    secs: f64,
    rate: u64,
) -> Result<()> {
    const DEPTH: usize = 100;
    for py in pythons.iter().filter(|p| p.minor() >= (3, 15)) {
        let mut t = Table::new(&[
            "the program stops after",
            "ns/run: median [quartiles]",
            "added by the stage",
        ]);
        let mut prev = 0.0;
        let stages = common::STAGES
            .iter()
            .copied()
            .chain([(0, "submit the record (the whole run)")]);
        for (stage, what) in stages {
            eprintln!(
                "bench ebpf: {} depth {DEPTH}, with anchor, stage {stage}",
                py.name
            );
            let q = measure(py, script, DEPTH, Walk::AgentAnchor, stage, secs, rate)?.ns_per_run();
            t.row(stage_row(stage, what, q, prev));
            prev = q[1];
        }
        println!(
            "\n## Cost by stage: {} depth {DEPTH} with the anchor\n\nThe perf event follows the \
             target's thread; with the loader's `stop_after` knob the program returns right \
             after stage N (a reserved record is discarded). Each row is a separate load of \
             {secs} s, so neighbouring rows can differ by the noise of the quartiles.\n",
            py.name
        );
        t.print();
    }
    Ok(())
}

/// The program's cost per sample with and without the native section, on a target whose leaf
/// sits in C under Python frames (`deep.py 100 native`).
pub(super) fn native_cost(
    pythons: &[&Interpreter],
    script: &Path,
    secs: f64,
    rate: u64,
) -> Result<()> {
    const DEPTH: usize = 100;
    let load_before = util::load_average();
    let mut t = Table::new(&[
        "python, native",
        "walks",
        "Python frames/walk",
        "native frames/record",
        "stack bytes/record",
        "kernel frames/record",
        "ns/walk: median [quartiles]",
        "native adds",
    ]);
    let mut target_lines = Vec::new();
    for py in pythons {
        let mut off_ns = None;
        for section in [false, true] {
            eprintln!(
                "bench ebpf: {} deep.py {DEPTH} native, native section {section}",
                py.name
            );
            let c = measure(
                py,
                script,
                DEPTH,
                Walk::NativeTarget {
                    section,
                    // as the agent does
                    anchored: py.minor() >= (3, 15),
                },
                0,
                secs,
                rate,
            )?;
            let q = c.ns_per_run();
            t.row(native_row(&py.name, section, &c, off_ns));
            if section {
                target_lines.push(native_target_line(&py.name, q[1], off_ns));
            }
            off_ns.get_or_insert(q[1]);
        }
    }
    println!(
        "\n## Native stacks: BPF program cost per sample, `deep.py {DEPTH} native` (lower is better)\n"
    );
    println!(
        "{load_before} at start, {} at end; perf event at {rate} Hz per CPU on the target's \
         thread, {secs} s per row\n",
        util::load_average()
    );
    t.print();
    println!(
        "\nTarget: one thread {DEPTH} Python frames deep looping on `sorted(range(64), \
         key=slow_key)`, whose key calls `zlib.crc32` on 64 KiB: the leaf is in libz under the \
         zlib module, under the key (Python), under `list.sort` (C), under the {DEPTH} Python \
         frames and the interpreter's own C frames. On 3.15 the walk stops at the anchor, as \
         in the agent. \"off\": the same walk without a native \
         section; \"on\": each record also carries the user registers, the kernel stack when the \
         tick was in the kernel, and a copy of the user stack from `sp` up (at most 16 KiB, or to \
         the stack's top). Native frames: the first {UNWOUND_PER_INTERVAL} records of each \
         100 ms interval unwound by this process with the agent's unwinder (kernel frames \
         included).\n\nTarget (≤ 10 µs per sample in the program with native on):\n"
    );
    for l in target_lines {
        println!("{l}");
    }
    Ok(())
}
