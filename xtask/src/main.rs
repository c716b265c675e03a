//! Development tasks for pyagent, run as `cargo xtask <task>` (an alias in
//! `.cargo/config.toml`). One module per subcommand; `main` only parses and dispatches.

mod agent;
mod bench;
mod cross;
mod dist;
mod docs;
mod fuzz;
mod kernels;
mod pythons;
mod rootfs;
mod test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "pyagent development tasks", long_about = None)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Prepare and cache the test interpreter matrix (outside the repository) and write its
    /// manifest.json.
    Pythons(pythons::Args),
    /// Install what the tests need (Debian packages, the interpreter matrix), build, and run
    /// every test; arguments after `--` go to the test binaries.
    Test {
        /// passed to the test binaries (e.g. a name filter)
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Build the release agent and run it with the arguments after `--`.
    Agent {
        /// passed to pyagent
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Benchmarks that print tables.
    Bench(bench::BenchArgs),
    /// Build the release artifacts into target/dist/: the .deb and the OCI image archive
    /// (`--arch arm64`: the arm64 .deb, cross-built).
    Dist(dist::Args),
    /// Make (once) and print the cached tarball of a minimal bookworm root file system.
    Rootfs,
    /// Run each libFuzzer target of agent/fuzz for a bounded time (installs cargo-fuzz) and
    /// print executions and crashes per target.
    Fuzz(fuzz::Args),
    /// Run a chosen set of the eBPF tests on Debian's 5.10, 6.1 and 6.12 kernels (booted with
    /// virtme-ng under QEMU) and on the host's kernel, and print kernels by feature.
    Kernels(kernels::Args),
    /// Regenerate the book's reference pages from the code, check its links and build it with
    /// mdBook into target/book (`--check`: fail on a stale page or a broken link instead).
    Docs(docs::Args),
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Pythons(args) => pythons::run(&args),
        Task::Test { args } => test::run(&args),
        Task::Agent { args } => agent::run(&args),
        Task::Bench(args) => bench::run(&args),
        Task::Rootfs => rootfs::run(),
        Task::Dist(args) => dist::run(&args),
        Task::Fuzz(args) => fuzz::run(&args),
        Task::Kernels(args) => kernels::run(&args),
        Task::Docs(args) => docs::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One message with its causes, without the backtrace `Result` from `main` would add
            // when RUST_BACKTRACE is set.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
