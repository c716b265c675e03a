//! A real CPU-limited cgroup for the tests, of whichever `cpu` controller this host mounts
//! (cgroup v1's `cpu` hierarchy, or v2 with `cpu` enabled), removed when dropped.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use pyagent::discovery::cgroup_cpu::CpuControllerMounts;

use crate::wait::poll_until;

/// A cgroup limited to `quota / period` of a core.
pub struct CpuLimitedCgroup {
    dir: PathBuf,
    v2: bool,
}

impl CpuLimitedCgroup {
    /// A new cgroup `pyagent-test-TAG-PID` limited to `quota_us` per `period_us`.
    ///
    /// # Panics
    /// When no `cpu` controller is mounted, or the cgroup cannot be made (the tests run as
    /// root).
    pub fn new(tag: &str, quota_us: u64, period_us: u64) -> CpuLimitedCgroup {
        let (mount, v2) = cpu_mount().expect("a cgroup hierarchy with the cpu controller");
        let dir = mount.join(format!("pyagent-test-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir(&dir);
        if v2 {
            write(&mount.join("cgroup.subtree_control"), "+cpu");
        }
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let cgroup = CpuLimitedCgroup { dir, v2 };
        if v2 {
            write(
                &cgroup.dir.join("cpu.max"),
                &format!("{quota_us} {period_us}"),
            );
        } else {
            write(
                &cgroup.dir.join("cpu.cfs_period_us"),
                &period_us.to_string(),
            );
            write(&cgroup.dir.join("cpu.cfs_quota_us"), &quota_us.to_string());
        }
        cgroup
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    ///
    /// # Panics
    /// When the kernel refuses.
    pub fn add(&self, pid: u32) {
        write(&self.dir.join("cgroup.procs"), &pid.to_string());
    }

    /// The time the cgroup's tasks were throttled so far, from its `cpu.stat`.
    ///
    /// # Panics
    /// When `cpu.stat` cannot be read.
    pub fn throttled(&self) -> Duration {
        let stat = fs::read_to_string(self.dir.join("cpu.stat")).expect("read cpu.stat");
        let key = if self.v2 {
            "throttled_usec "
        } else {
            "throttled_time "
        };
        let value = stat
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            .expect("throttled time in cpu.stat");
        if self.v2 {
            Duration::from_micros(value)
        } else {
            Duration::from_nanos(value)
        }
    }
}

impl Drop for CpuLimitedCgroup {
    fn drop(&mut self) {
        // Its processes have been killed; the directory goes once they are reaped.
        let dir = self.dir.clone();
        let removed = poll_until(Duration::from_secs(10), || fs::remove_dir(&dir).ok());
        if removed.is_none() {
            eprintln!("left behind: {}", dir.display());
        }
    }
}

/// The mount point of the `cpu` controller and whether it is cgroup v2, as the agent finds it
/// (v1 first: a hybrid host's `cpu` hierarchy is v1).
fn cpu_mount() -> Option<(PathBuf, bool)> {
    let mounts = CpuControllerMounts::find();
    mounts
        .v1
        .map(|m| (m, false))
        .or(mounts.v2.map(|m| (m, true)))
}

fn write(path: &std::path::Path, value: &str) {
    fs::write(path, value).unwrap_or_else(|e| panic!("write {value} to {}: {e}", path.display()));
}
