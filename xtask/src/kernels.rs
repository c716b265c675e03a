//! `cargo xtask kernels`: runs a chosen set of the eBPF tests on the kernels fleets run, each
//! booted under QEMU with virtme-ng, plus the host's own kernel, and prints which kernel
//! supports which feature.
//!
//! ```text
//! cargo xtask kernels [--kernel 5.10]... [--feature off-cpu]... [--no-host]
//! ```
//!
//! **Kernels.** Debian's generic amd64 kernels of bullseye (5.10), bookworm (6.1) and trixie
//! (6.12), the current one of each suite (what its `linux-image-amd64` depends on), and the
//! host's (labelled with its `uname -r`, run without a VM). `--kernel` takes a version prefix
//! (`5.10`, `6.1`: `6.1` is not `6.12`), a suite, or `host`; it may be repeated.
//!
//! **Why TCG.** Each guest boots with `vng --disable-kvm`: `/dev/kvm` exists on the project's
//! machines, but a KVM guest hangs right after the kernel decompresses. QEMU's emulation is
//! slow (a guest runs the checks many times slower than the host), so the plan keeps to a few
//! checks per feature, and each check and each kernel has a deadline
//! ([`script::CHECK_TIMEOUT`], [`runner::DEADLINE`]) after which it is killed.
//!
//! **The guest.** virtme-ng shares the host's root read-only over 9p, so the guest runs the
//! host's interpreters, tools and the executables built on the host (it builds nothing). The
//! guest writes only under its output directory (`--rwdir`); it reports through files there,
//! as its console does not always reach the host. virtme-ng puts a tmpfs on `/var/cache`, and
//! its 9p mounts have no page cache (each start of an interpreter reads every page it touches
//! across 9p again, which dominated a guest's time): so the interpreter matrix, pyenv's
//! versions and the copied executables are shared again (`--rodir`) and mounted over by the
//! script with a cache (`cache=loose`; nothing changes under them during a run). The kernel's
//! own tree is shared too, for its modules. The sid chroot of py314/py315 gets its `/proc`
//! and, being read-only, a tmpfs on its `/tmp`, where the tests copy their scripts.
//!
//! **Executables.** `cargo test --no-run` builds the tests (debug, as `cargo test` does) and
//! `cargo build --release` the `pyagent` they run: the debug agent, unoptimised, spends many
//! times as long under TCG parsing objects and unwinding, and an agent that slow registers a
//! target's threads late, so that their first records are dropped and timing-bound checks
//! fail for reasons that are not the kernel's. Both are copied to `build/` first, so that
//! every kernel runs the same build while others rebuild the workspace; the tests' own `cargo
//! build` of `pyagent` is a no-op (`CARGO=/bin/true`). The run checks first that the plan's
//! test names still exist.
//!
//! **Columns.** Each feature is a few existing tests ([`plan::CHECKS`]), run one per
//! invocation (`--exact NAME --test-threads=1`) as `cargo test` would (from the package's
//! directory):
//!
//! | column | the kernel lets pyagent |
//! |---|---|
//! | load | load the BPF sampler with every knob and attach it to the cpu-clock events (`bpf` test) |
//! | cpu-clock | sample a known Python function from the cpu-clock event (py37, py315) |
//! | off-cpu | time waits off CPU with their reason, from `tp_btf/sched_switch` (py37, py315) |
//! | native | copy user stacks and unwind native frames under the Python caller (py312, py315) |
//! | frame cache 3.15 | stop 3.15 walks at the frame-cache anchor without ever mixing chains |
//!
//! A cell is `ok` when every test of the feature passed, `FAIL` when one failed or timed
//! out, `skipped` when none failed but some never ran (the kernel's run was killed or
//! stopped). The command fails if a cell is `FAIL` or a run did not finish. Under the table:
//! each failure's message and log, then per kernel the mounts the tests might want (bpffs,
//! debugfs, tracefs, cgroup2, `/sys/kernel/btf/vmlinux`) and the lines about the kernel in
//! the stderr of a `pyagent record --mode ebpf --off-cpu --native -d 3` of a small Python
//! process (the probe), run after the checks.
//!
//! **Cache** (`/var/cache/pyagent/kernels`, or `PYAGENT_KERNELS_DIR`):
//!
//! | path | what |
//! |---|---|
//! | `SUITE/sources.list`, `lists/`, `cache/` | the suite's private apt configuration |
//! | `SUITE/linux-image-*.deb`, `SUITE/root/` | the kernel package and its contents; `root/` marks the suite as fetched |
//! | `venv/` | virtme-ng from the Python package index |
//! | `build/` | copies of the test executables and `pyagent`, so all kernels run one build |
//! | `logs/` | apt, pip and depmod logs; `logs/VERSION/` a kernel's last run: `inside.sh`, its `inside.log`, `console.log` (vng's, with the boot), `tests/NN-*.log`, the probe's files |
//!
//! The kernels' modules are also copied to `/lib/modules/VERSION` (and indexed with depmod).
//! A second run fetches nothing. The interpreter matrix is `cargo xtask pythons`', prepared
//! first (cached too).

mod build;
mod fetch;
mod plan;
mod report;
mod runner;
mod script;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::pythons::{self, cmd::say};
use plan::Feature;
use runner::{End, Outcome, Setup, Target};

const TAG: &str = "kernels";

/// Where kernels, virtme-ng and logs are cached unless `PYAGENT_KERNELS_DIR` says otherwise.
pub const DEFAULT_DIR: &str = "/var/cache/pyagent/kernels";

/// What booting the guests needs besides Python's venv: QEMU, depmod, the static busybox
/// virtme-ng puts in the guest's initramfs, the archive's keyring for the suites' apt.
const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "kmod",
    "busybox-static",
    "python3-venv",
    "debian-archive-keyring",
];

/// The matrix interpreter the probe runs: on the host, any kernel runs it.
const PROBE_INTERPRETER: &str = "py312";

/// `cargo xtask kernels` options.
#[derive(clap::Args)]
pub struct Args {
    /// Only this kernel: a version prefix (5.10, 6.1), a suite (bookworm) or `host`;
    /// repeatable.
    #[arg(long = "kernel", value_name = "VERSION")]
    kernels: Vec<String>,
    /// Only this feature (column): load, cpu-clock, off-cpu, native, "frame cache 3.15"
    /// (or frame-cache-3.15); repeatable.
    #[arg(long = "feature", value_name = "NAME", value_parser = Feature::parse)]
    features: Vec<Feature>,
    /// Leave out the host's own kernel.
    #[arg(long)]
    no_host: bool,
    /// Cache directory for the kernels, virtme-ng, the copied executables and the logs.
    #[arg(long, env = "PYAGENT_KERNELS_DIR", default_value = DEFAULT_DIR)]
    dir: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        crate::test::is_root(),
        "the guests' setup and the tests need root (modules, mounts, BPF)"
    );
    ensure!(
        args.dir.is_absolute(),
        "the cache directory must be an absolute path, not {}",
        args.dir.display()
    );
    let started = Instant::now();
    let (suites, host) = select_kernels(args)?;
    let pythons = pythons::Args::prepare();
    pythons::run(&pythons)?;
    let logs = args.dir.join("logs");
    let packages: Vec<&str> = [
        crate::test::BUILD_PACKAGES,
        crate::test::TEST_PACKAGES,
        PACKAGES,
    ]
    .concat();
    pythons::host::ensure_installed(&logs, TAG, &packages)?;

    let vng = match suites.is_empty() {
        true => None,
        false => Some(fetch::ensure_vng(&args.dir, &logs)?),
    };
    let mut targets = Vec::new();
    for suite in suites {
        targets.push(Target::Guest(fetch::ensure_kernel(
            &args.dir, suite, &logs,
        )?));
    }
    if host {
        targets.push(Target::Host);
    }

    let workspace = workspace_root();
    let checks = plan::select(&args.features);
    let built = build::build(&workspace, &args.dir.join("build"))?;
    build::verify(&built, &checks)?;
    let probe_python = probe_python(pythons.dir())?;
    let shared_dirs = [
        pythons.dir().to_owned(),
        pythons::pyenv_versions(),
        built.dir.clone(),
    ];
    let setup = Setup {
        logs: &logs,
        workspace: &workspace,
        vng: vng.as_deref(),
        shared_dirs: &shared_dirs,
        bpf_exe: &built.bpf,
        integration_exe: &built.integration,
        pyagent: &built.pyagent,
        pythons_dir: pythons.dir(),
        probe_python: &probe_python,
        checks: &checks,
    };
    let mut outcomes = Vec::new();
    for target in &targets {
        outcomes.push(runner::run(&setup, target)?);
    }
    print!("\n{}", report::render(&setup, &outcomes, started.elapsed()));
    verdict(&setup, &outcomes)
}

/// The suites and whether the host's kernel are asked for by `--kernel` and `--no-host`;
/// fails on a `--kernel` that names none.
fn select_kernels(args: &Args) -> Result<(Vec<&'static str>, bool)> {
    let host_version = runner::host_version()?;
    let wanted = |suite: &str, version: &str| {
        args.kernels.is_empty()
            || args
                .kernels
                .iter()
                .any(|k| k == suite || version_matches(version, k))
    };
    let suites: Vec<&'static str> = fetch::SUITES
        .iter()
        .filter(|(suite, version)| wanted(suite, version))
        .map(|(suite, _)| *suite)
        .collect();
    let host = !args.no_host && wanted("host", &host_version);
    for filter in &args.kernels {
        let known = fetch::SUITES
            .iter()
            .any(|(suite, version)| filter == suite || version_matches(version, filter))
            || filter == "host"
            || version_matches(&host_version, filter);
        ensure!(
            known,
            "--kernel {filter}: no such kernel (suites: bullseye 5.10, bookworm 6.1, trixie 6.12; \
             host {host_version})"
        );
    }
    if suites.is_empty() && !host {
        bail!("no kernel left to run (--kernel and --no-host leave none)");
    }
    say(
        TAG,
        format_args!(
            "kernels: {}{}",
            suites.join(", "),
            if host {
                format!(" and the host's {host_version}")
            } else {
                String::new()
            }
        ),
    );
    Ok((suites, host))
}

/// Whether `version` is `prefix` or starts with it followed by a `.` or `-`: `6.1` matches
/// `6.1` and `6.1.0-50-amd64` but not `6.12.117`.
fn version_matches(version: &str, prefix: &str) -> bool {
    match version.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with(['.', '-', '+']),
        None => false,
    }
}

/// The probe's interpreter from the matrix's manifest: a host interpreter, so it runs without
/// the sid chroot's setup.
fn probe_python(pythons_dir: &Path) -> Result<PathBuf> {
    let path = pythons_dir.join("manifest.json");
    let manifest = roles::Manifest::read(&path)?;
    manifest
        .interpreters
        .into_iter()
        .find(|entry| entry.name == PROBE_INTERPRETER && entry.root.is_none())
        .map(|entry| entry.exe)
        .with_context(|| {
            format!(
                "no host interpreter {PROBE_INTERPRETER} in {}",
                path.display()
            )
        })
}

/// Fails when a cell failed or a kernel's run did not finish.
fn verdict(setup: &Setup, outcomes: &[Outcome]) -> Result<()> {
    let columns = report::columns(setup);
    let failed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            columns
                .iter()
                .filter(|f| report::cell(setup, o, **f) == report::Cell::Fail)
                .map(move |f| format!("{} {f}", o.version))
        })
        .collect();
    let unfinished: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.end != End::Finished)
        .map(|o| o.version.as_str())
        .collect();
    match (failed.is_empty(), unfinished.is_empty()) {
        (true, true) => Ok(()),
        (false, _) => bail!(
            "{} cell(s) failed: {}{}",
            failed.len(),
            failed.join(", "),
            if unfinished.is_empty() {
                String::new()
            } else {
                format!("; runs that did not finish: {}", unfinished.join(", "))
            }
        ),
        (true, false) => bail!("runs that did not finish: {}", unfinished.join(", ")),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_prefixes_stop_at_a_separator() {
        assert!(version_matches("6.1.0-50-amd64", "6.1"));
        assert!(version_matches("6.1", "6.1"));
        assert!(!version_matches("6.12.117+deb13-amd64", "6.1"));
        assert!(version_matches("6.12.117+deb13-amd64", "6.12"));
        assert!(version_matches("6.12.117+deb13-amd64", "6.12.117"));
        assert!(version_matches("5.10.0-32-amd64", "5.10"));
        assert!(!version_matches("5.10.0-32-amd64", "5.1"));
    }
}
