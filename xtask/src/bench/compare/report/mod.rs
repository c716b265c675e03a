//! The report: markdown tables (stdout and `compare.md`), the slowdown chart (`compare.svg`),
//! the targets ([`targets::TARGETS`]), and every place where pyagent is not ahead of a peer.
//! One file per part, lowest first: [`machine`] (the header's facts), [`targets`] (the table of
//! targets), [`summary`] (the numbers, from the results), [`cells`] (shared text cells),
//! [`ranking`] (where pyagent is not ahead), [`sections`] (the markdown, a function per section),
//! [`chart`] (the SVG). This file only puts them together.

mod cells;
mod chart;
mod machine;
mod ranking;
mod sections;
mod summary;
mod targets;

use std::path::Path;

use anyhow::{Context, Result};

pub use self::machine::Machine;
use super::plan::{Plan, Suite};
use super::profiler::Tools;
use super::results::Results;

/// Prints the report and writes `compare.md` and `compare.svg` into `out_dir`.
pub fn write(
    out_dir: &Path,
    machine: &Machine,
    tools: &Tools,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> Result<()> {
    let md = markdown(machine, tools, suites, plan, results);
    print!("{md}");
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let md_path = out_dir.join("compare.md");
    std::fs::write(&md_path, &md).with_context(|| format!("cannot write {}", md_path.display()))?;
    let svg_path = out_dir.join("compare.svg");
    chart::chart(&svg_path, suites, plan, results)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot draw {}", svg_path.display()))?;
    println!("\nwrote {} and {}", md_path.display(), svg_path.display());
    Ok(())
}

/// The whole markdown report.
fn markdown(
    machine: &Machine,
    tools: &Tools,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> String {
    let report = sections::Report {
        machine,
        tools,
        suites,
        plan,
        results,
    };
    let mut md = String::new();
    report.header(&mut md);
    if !results.slowdown.is_empty() {
        report.slowdown(&mut md);
        report.cost(&mut md);
    }
    if !results.toggled.is_empty() {
        report.toggled(&mut md);
    }
    if !plan.slowdown_only {
        report.accuracy(&mut md);
        report.throughput(&mut md);
    }
    report.targets(&mut md);
    report.not_ahead(&mut md);
    md
}
