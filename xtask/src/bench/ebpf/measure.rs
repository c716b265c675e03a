//! The parts of the benchmark, in the order they run (`--only` picks one).

use anyhow::{bail, Result};

use super::agent_overhead;
use super::agent_rows::Flag;
use super::args::Args;
use super::program_cost;
use crate::bench::util::{self, Interpreter, Manifest};

/// Runs the benchmark.
pub fn run(args: &Args) -> Result<()> {
    if let Some(o) = args
        .only
        .as_deref()
        .filter(|o| !["cost", "agent", "offcpu", "native", "gil"].contains(o))
    {
        bail!("--only {o}: use cost, agent, offcpu, native or gil");
    }
    let manifest = Manifest::load()?;
    let script = util::bench_script("deep.py");
    let (seconds, agent_seconds) = if args.quick {
        (1.0, 5.0)
    } else {
        (args.seconds, args.agent_seconds)
    };
    util::print_command_line();
    let pythons: Vec<&Interpreter> = args
        .pythons
        .iter()
        .map(|n| manifest.interpreter(n))
        .collect::<Result<_>>()?;
    if args.only.is_none() || args.only.as_deref() == Some("offcpu") {
        let agent = util::release_binary("pyagent")?;
        let py = manifest.interpreter(&args.busy_python)?;
        agent_overhead::flag_overhead(
            &agent,
            py,
            &script,
            args.blocking_processes,
            agent_seconds,
            Flag::OffCpu,
        )?;
        if args.only.is_some() {
            return Ok(());
        }
    }
    if args.only.is_none() || args.only.as_deref() == Some("native") {
        program_cost::native_cost(&pythons, &script, seconds, args.bpf_rate)?;
        let agent = util::release_binary("pyagent")?;
        let py = manifest.interpreter(&args.busy_python)?;
        agent_overhead::flag_overhead(
            &agent,
            py,
            &script,
            args.native_processes,
            agent_seconds,
            Flag::Native,
        )?;
        if args.only.is_some() {
            return Ok(());
        }
    }
    if args.only.is_none() || args.only.as_deref() == Some("gil") {
        super::gil_cost::gil_holder_cost(&pythons, seconds.max(2.0))?;
        if args.only.is_some() {
            return Ok(());
        }
    }
    if args.only.as_deref() != Some("agent") {
        program_cost::bpf_cost(&pythons, &args.depths, &script, seconds, args.bpf_rate)?;
        if args.stages {
            program_cost::stage_costs(&pythons, &script, seconds, args.bpf_rate)?;
        }
    }
    if args.only.as_deref() != Some("cost") {
        let agent = util::release_binary("pyagent")?;
        let py = manifest.interpreter(&args.busy_python)?;
        agent_overhead::agent_overhead(&agent, py, &script, &args.processes, agent_seconds)?;
    }
    Ok(())
}
