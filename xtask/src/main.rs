//! Development tasks for pyagent, run as `cargo xtask <task>` (an alias in
//! `.cargo/config.toml`). One module per subcommand; `main` only parses and dispatches.

mod pythons;

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
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Pythons(args) => pythons::run(&args),
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
