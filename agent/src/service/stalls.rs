//! Stalled threads: a thread blocked in one stack for longer than `stall_after` is reported
//! once per stall: counted in the metrics, logged, and, with an output directory, a dump of its
//! process written next to the profiles (`stall-<service>-<pid>-<tid>-<unix ms>.txt`), for the
//! hang an operator would otherwise catch with a hand-written py-spy watcher.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::ServiceNameRule;
use crate::dump;
use crate::export::atomic_file::write_atomically;
use crate::export::metrics::{AgentMetrics, ServiceSeries};
use crate::export::sinks::file_safe_service;
use crate::profiler::HostProfiler;
use crate::profiler::Stall;
use crate::unwind::UnwindOptions;

/// Watches the profiler's waits for stalls.
pub(super) struct StallWatch<'a> {
    /// the threshold (zero: the watch is off)
    pub after: Duration,
    /// where the dumps go (`None`: logged and counted only)
    pub dir: Option<&'a Path>,
    pub rules: &'a [ServiceNameRule],
    pub unwind: UnwindOptions,
}

impl StallWatch<'_> {
    /// Reports the stalls that began since the last check and sets the stalled-threads gauge.
    /// `services` is the service's cache of service names by PID, filled here too.
    pub fn check(
        &self,
        profiler: &mut HostProfiler,
        metrics: &AgentMetrics,
        services: &mut HashMap<u32, ServiceSeries>,
    ) {
        if self.after.is_zero() {
            return;
        }
        let mut series_of = |profiler: &HostProfiler, pid: u32| -> ServiceSeries {
            if !services.contains_key(&pid) {
                super::fill_series(profiler, self.rules, services);
            }
            services
                .get(&pid)
                .cloned()
                .unwrap_or_else(|| ServiceSeries {
                    service: "unknown".to_string(),
                    python_version: String::new(),
                    role: None,
                })
        };
        for stall in profiler.take_new_stalls(self.after) {
            let series = series_of(profiler, stall.pid);
            metrics.add_stall(&series);
            let service = series.service;
            let written = self.dir.map(|dir| self.write_dump(dir, &service, &stall));
            tracing::warn!(
                service,
                pid = stall.pid,
                tid = stall.tid,
                wait = %stall.wait,
                blocked_s = stall.blocked_for.as_secs_f64(),
                top = stall.frames.first().map(ToString::to_string).unwrap_or_default(),
                dump = written.flatten().map(|p| p.display().to_string()).unwrap_or_default(),
                "thread stalled"
            );
        }
        let mut per_series: HashMap<ServiceSeries, u64> = HashMap::new();
        for (pid, n) in profiler.stalled_threads() {
            *per_series.entry(series_of(profiler, pid)).or_default() += n;
        }
        let stalled: Vec<(&ServiceSeries, u64)> = per_series.iter().map(|(s, &n)| (s, n)).collect();
        metrics.set_stalled_threads(&stalled);
    }

    /// Writes the stall and a dump of its process; returns the file, or `None` (logged) when
    /// it could not be written.
    fn write_dump(&self, dir: &Path, service: &str, stall: &Stall) -> Option<PathBuf> {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let stem = file_safe_service(service);
        let path = dir.join(format!(
            "stall-{stem}-{}-{}-{at_ms}.txt",
            stall.pid, stall.tid
        ));
        let fill = |out: &mut dyn Write| {
            write_stall(out, service, stall)?;
            writeln!(out)?;
            // The process as it is now: every thread, its state and the GIL.
            if let Err(e) = dump::write(stall.pid, self.unwind, out) {
                writeln!(out, "(no dump of the process: {e})")?;
            }
            Ok(())
        };
        match write_atomically(&path, fill) {
            Ok(_) => Some(path),
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot write the stall dump: {e}");
                None
            }
        }
    }
}

/// The stall itself: which thread, for how long, in what, and the stack it blocked in.
fn write_stall(out: &mut dyn Write, service: &str, stall: &Stall) -> std::io::Result<()> {
    let name = stall
        .thread_name
        .as_deref()
        .map(|n| format!(" \"{n}\""))
        .unwrap_or_default();
    writeln!(
        out,
        "Stalled: thread {}{name} of process {} (service {service}) blocked for {:.1} s, waiting: {}",
        stall.tid,
        stall.pid,
        stall.blocked_for.as_secs_f64(),
        stall.wait
    )?;
    for frame in &stall.frames {
        writeln!(out, "    {frame}")?;
    }
    Ok(())
}
