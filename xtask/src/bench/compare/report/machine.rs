//! The machine the benchmark ran on and the load around the run, for the report's header.

use std::time::Instant;

use crate::bench::util;

/// The machine and the run, for the report's header.
#[derive(Debug)]
pub struct Machine {
    pub(super) command: String,
    pub(super) cpus: usize,
    pub(super) cpu_model: String,
    pub(super) kernel: String,
    /// Load average when the run started.
    pub load_before: String,
    pub(super) load_after: String,
    started: Instant,
    /// Minutes the run took.
    pub(super) minutes: f64,
}

impl Machine {
    /// Reads the machine's facts and the load now.
    pub fn probe(command: String) -> Machine {
        use procfs::Current;
        let cpu_model = procfs::CpuInfo::current()
            .ok()
            .and_then(|c| c.model_name(0).map(|m| m.trim().to_owned()))
            .unwrap_or_else(|| "unknown".into());
        // Read whole: procfs's kernel Version keeps only the numbers of the release.
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            command,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model,
            kernel,
            load_before: util::load_average(),
            load_after: String::new(),
            started: Instant::now(),
            minutes: 0.0,
        }
    }

    /// Adds the load and the time at the end of the run.
    pub fn finish(mut self) -> Machine {
        self.load_after = util::load_average();
        self.minutes = self.started.elapsed().as_secs_f64() / 60.0;
        self
    }
}
