//! `cargo xtask bench compare --quick` end to end (issue 5), so that the benchmark cannot rot:
//! every profiler attaches to real interpreters, and the markdown report and the SVG chart come
//! out with a row (and a bar group) per profiler. The numbers of the quick mode are not checked:
//! speed targets live in the benchmark's report, never in timed asserts.

use std::path::Path;
use std::process::Command;

use pyagent_tests::agent::pyagent_bin;
use pyagent_tests::pythons::manifest_path;

/// The rows the report must have: (profiler, manifest name of its interpreter).
const ROWS: &[(&str, &str)] = &[
    ("pyagent ebpf", "py313"),
    ("pyagent userspace", "py313"),
    ("py-spy", "py313"),
    ("py-spy --nonblocking", "py313"),
    ("austin", "py313"),
    ("austin -s", "py313"),
    ("pyagent ebpf", "py315"),
    ("pyagent userspace", "py315"),
    ("tachyon", "py315"),
];

/// Chart labels (`Profiler::short` and the interpreter).
const BARS: &[&str] = &[
    "pyagent ebpf (py313)",
    "pyagent user (py313)",
    "py-spy (py313)",
    "py-spy nb (py313)",
    "austin (py313)",
    "austin -s (py313)",
    "pyagent ebpf (py315)",
    "pyagent user (py315)",
    "tachyon (py315)",
];

/// The report's sections with a row per profiler: slowdown, cost, toggled slowdown, accuracy,
/// throughput, cost by depth.
const SECTIONS_WITH_ROWS: usize = 6;

/// Table rows of `md` as trimmed cells.
fn rows(md: &str) -> Vec<Vec<&str>> {
    md.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect()
}

#[test]
fn compare_quick_reports_every_profiler() {
    assert!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() } == 0,
        "the compare benchmark loads BPF programs and reads other processes' memory: run the \
         tests as root"
    );
    let manifest = manifest_path();
    assert!(
        manifest.exists(),
        "{} is missing: run `cargo xtask pythons` (the interpreters and peer profilers the \
         benchmark compares)",
        manifest.display()
    );
    let agent = pyagent_bin();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compare-smoke");
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "compare", "--quick", "--agent"])
        .arg(&agent)
        .arg("--out-dir")
        .arg(&out)
        .output()
        .expect("cannot run xtask");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`xtask bench compare --quick` failed ({}); if an interpreter or peer profiler is \
         missing, run `cargo xtask pythons`.\nstderr:\n{stderr}\nstdout:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );

    let md_path = out.join("compare.md");
    let md = std::fs::read_to_string(&md_path)
        .unwrap_or_else(|e| panic!("{} was not written: {e}", md_path.display()));
    let table = rows(&md);
    for &(profiler, python) in ROWS {
        let found = table
            .iter()
            .filter(|r| r.len() > 2 && r[0] == profiler && r[1].ends_with(&format!("({python})")))
            .count();
        assert_eq!(
            found,
            SECTIONS_WITH_ROWS,
            "{profiler} on {python}: expected a row in each of the {SECTIONS_WITH_ROWS} tables of \
             {}:\n{md}",
            md_path.display()
        );
    }
    for python in ["py313", "py315"] {
        assert!(
            table
                .iter()
                .any(|r| r[0].starts_with("none (") && r[1].ends_with(&format!("({python})"))),
            "no baseline row for {python}:\n{md}"
        );
        assert!(
            table
                .iter()
                .any(|r| r[0] == "truth (process_time)" && r[1].ends_with(&format!("({python})"))),
            "no accuracy truth row for {python}:\n{md}"
        );
    }
    // The toggled slowdown's control: the perf events alone, beside pyagent's eBPF mode.
    for python in ["py313", "py315"] {
        let control = table.iter().find(|r| {
            r[0] == "cpu-clock events only (control)" && r[1].ends_with(&format!("({python})"))
        });
        assert!(
            // Its two rates' cells: a median with its interval over n pairs.
            control.is_some_and(|r| r.len() > 4 && r[2].contains("n=") && r[4].contains("n=")),
            "no measured control row for {python} in the toggled slowdown:\n{md}"
        );
    }
    assert!(
        md.contains("load average") && md.contains("--quick"),
        "the report must name the load and the command:\n{md}"
    );

    let svg_path = out.join("compare.svg");
    let svg = std::fs::read_to_string(&svg_path)
        .unwrap_or_else(|e| panic!("{} was not written: {e}", svg_path.display()));
    assert!(
        svg.trim_start().starts_with("<svg"),
        "not an SVG: {svg_path:?}"
    );
    for bar in BARS {
        assert!(svg.contains(bar), "the chart has no label {bar:?}");
    }
    // Two bars (99 Hz and 1 kHz) per profiler, besides the background and the legend.
    let rects = svg.matches("<rect").count();
    assert!(
        rects >= 2 * BARS.len(),
        "the chart has {rects} rectangles, fewer than two bars per profiler"
    );
}
