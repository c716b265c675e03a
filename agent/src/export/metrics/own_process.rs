//! The agent's own cost, under the standard `process_*` names Prometheus clients export.
//!
//! The `prometheus` crate's process collector counts CPU in whole seconds (an integer counter
//! fed by `(utime + stime) / CLK_TCK`), so an agent that costs less than a second of CPU shows
//! `process_cpu_seconds_total 0` for as long as it runs, which is exactly the number an
//! operator looks at. This collector reports the same families with CPU time in ticks'
//! resolution (10 ms).

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

/// `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
/// `process_open_fds`, `process_max_fds`, `process_threads` and `process_start_time_seconds` of
/// this process, read from `/proc/self` at each scrape.
pub struct OwnProcessCollector {
    cpu: Counter,
    /// one scrape at a time: the CPU counter is advanced by the difference to the last read
    refreshing: std::sync::Mutex<()>,
    resident: Gauge,
    virtual_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    threads: Gauge,
    start_time: Gauge,
    descs: Vec<Desc>,
}

impl OwnProcessCollector {
    /// The collector; reads nothing until scraped.
    pub fn new() -> OwnProcessCollector {
        let gauge = |name: &str, help: &str| {
            Gauge::with_opts(Opts::new(name, help)).expect("valid process metric")
        };
        let cpu = Counter::with_opts(Opts::new(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
        ))
        .expect("valid process metric");
        let resident = gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
        );
        let virtual_bytes = gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
        );
        let open_fds = gauge("process_open_fds", "Number of open file descriptors.");
        let max_fds = gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
        );
        let threads = gauge("process_threads", "Number of OS threads in the process.");
        let start_time = gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
        );
        let mut descs: Vec<Desc> = cpu.desc().into_iter().cloned().collect();
        descs.extend(
            [
                &resident,
                &virtual_bytes,
                &open_fds,
                &max_fds,
                &threads,
                &start_time,
            ]
            .iter()
            .flat_map(|g| g.desc().into_iter().cloned()),
        );
        OwnProcessCollector {
            cpu,
            refreshing: std::sync::Mutex::new(()),
            resident,
            virtual_bytes,
            open_fds,
            max_fds,
            threads,
            start_time,
            descs,
        }
    }

    /// Reads `/proc/self`; a file that cannot be read leaves its gauges as they were.
    fn refresh(&self) {
        let _one_at_a_time = self.refreshing.lock();
        let Ok(me) = procfs::process::Process::myself() else {
            return;
        };
        let ticks = procfs::ticks_per_second() as f64;
        if let Ok(stat) = me.stat() {
            let cpu = (stat.utime + stat.stime) as f64 / ticks;
            let past = self.cpu.get();
            if cpu > past {
                self.cpu.inc_by(cpu - past);
            }
            self.resident
                .set(stat.rss as f64 * procfs::page_size() as f64);
            self.virtual_bytes.set(stat.vsize as f64);
            self.threads.set(stat.num_threads as f64);
            if let Ok(boot) = procfs::boot_time_secs() {
                self.start_time
                    .set(boot as f64 + stat.starttime as f64 / ticks);
            }
        }
        if let Ok(n) = me.fd_count() {
            self.open_fds.set(n as f64);
        }
        if let Ok(limits) = me.limits() {
            if let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit {
                self.max_fds.set(max as f64);
            }
        }
    }
}

impl Default for OwnProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector for OwnProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        let mut families = self.cpu.collect();
        for gauge in [
            &self.resident,
            &self.virtual_bytes,
            &self.open_fds,
            &self.max_fds,
            &self.threads,
            &self.start_time,
        ] {
            families.extend(gauge.collect());
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_have_sub_second_resolution() {
        let collector = OwnProcessCollector::new();
        // Burn some CPU so the tick count is above zero but well below a second.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(150) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let families = collector.collect();
        let cpu = &families[0];
        assert_eq!(cpu.name(), "process_cpu_seconds_total");
        assert_eq!(cpu.get_field_type(), prometheus::proto::MetricType::COUNTER);
        let value = cpu.get_metric()[0].get_counter().get_value();
        assert!(value > 0.0, "{value}");
        assert!(families
            .iter()
            .any(|f| f.name() == "process_resident_memory_bytes"));
    }
}
