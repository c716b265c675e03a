//! A process's CPU limit and how often the kernel throttled it there: the cgroup of its `cpu`
//! controller (`/proc/PID/cgroup`) under the controller's mount (the agent's own mountinfo),
//! its `cpu.stat` and quota. CFS throttling by a CPU limit (a Kubernetes `limits.cpu`) is time
//! a Python service cannot run although it is runnable; its profile shows nothing of it.
//!
//! cgroup v1 (`cpu.stat`: `throttled_time` in ns; `cpu.cfs_quota_us` / `cpu.cfs_period_us`)
//! and v2 (`throttled_usec`; `cpu.max`). The agent must run in the host's cgroup namespace
//! and see the host's hierarchy (the systemd unit does; a container needs `--cgroupns=host`).
//! In a namespace of its own, other containers' cgroups read `/../..` from its root: they are
//! not guessed at ([`outside_namespace`]), and a cgroup it cannot read is left out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use procfs::process::Process;

/// Where the `cpu` controller is mounted, as the agent sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuControllerMounts {
    /// a cgroup v1 hierarchy with `cpu` among its controllers
    pub v1: Option<PathBuf>,
    /// the cgroup v2 hierarchy, if `cpu` is enabled in it
    pub v2: Option<PathBuf>,
}

/// A cgroup's CFS bandwidth figures, cumulative since the cgroup was made.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuThrottling {
    /// enforcement periods that elapsed while the cgroup had runnable tasks
    pub periods: u64,
    /// of those, the periods in which it used up its quota and was throttled
    pub throttled_periods: u64,
    /// time its tasks were throttled
    pub throttled: Duration,
    /// its limit in cores (quota / period), `None` without one
    pub limit_cores: Option<f64>,
}

impl CpuControllerMounts {
    /// The mounts of the agent's own mount namespace (none found: nothing to read).
    pub fn find() -> CpuControllerMounts {
        let Ok(mounts) = Process::myself().and_then(|p| p.mountinfo()) else {
            return CpuControllerMounts::default();
        };
        let mut found = CpuControllerMounts::default();
        for m in mounts {
            match m.fs_type.as_str() {
                "cgroup" if found.v1.is_none() && m.super_options.contains_key("cpu") => {
                    found.v1 = Some(m.mount_point);
                }
                "cgroup2" if found.v2.is_none() => {
                    let controllers =
                        std::fs::read_to_string(m.mount_point.join("cgroup.controllers"))
                            .unwrap_or_default();
                    if controllers.split_whitespace().any(|c| c == "cpu") {
                        found.v2 = Some(m.mount_point);
                    }
                }
                _ => {}
            }
        }
        found
    }

    /// The directory of the `cpu` cgroup that `/proc/PID/cgroup`'s text `cgroup` names, if
    /// its hierarchy is mounted here and the cgroup lies inside the agent's namespace.
    pub fn cgroup_dir(&self, cgroup: &str) -> Option<PathBuf> {
        let mut unified = None;
        for line in cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let relative = path.trim_start_matches('/');
            if relative.split('/').any(|c| c == "..") {
                return None;
            }
            if controllers.is_empty() {
                unified = Some(relative);
            } else if controllers.split(',').any(|c| c == "cpu") {
                return Some(self.v1.as_ref()?.join(relative));
            }
        }
        Some(self.v2.as_ref()?.join(unified?))
    }
}

/// Whether `/proc/PID/cgroup`'s text `cgroup` names cgroups above the reader's cgroup
/// namespace root (`0::/../../kubepods/…`): paths the agent cannot map to its mount.
pub fn outside_namespace(cgroup: &str) -> bool {
    cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| path.split('/').any(|c| c == ".."))
}

/// The throttling figures of the cgroup at `dir` (either version).
pub fn read_throttling(dir: &Path) -> std::io::Result<CpuThrottling> {
    let stat = std::fs::read_to_string(dir.join("cpu.stat"))?;
    let limit = match std::fs::read_to_string(dir.join("cpu.max")) {
        Ok(max) => parse_cpu_max(&max),
        Err(_) => {
            let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).unwrap_or_default();
            let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).unwrap_or_default();
            parse_v1_quota(&quota, &period)
        }
    };
    Ok(CpuThrottling {
        limit_cores: limit,
        ..parse_cpu_stat(&stat)
    })
}

/// `cpu.stat` of either version (v2 counts throttled time in µs, v1 in ns).
fn parse_cpu_stat(text: &str) -> CpuThrottling {
    let mut t = CpuThrottling::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        match key {
            "nr_periods" => t.periods = value,
            "nr_throttled" => t.throttled_periods = value,
            "throttled_usec" => t.throttled = Duration::from_micros(value),
            "throttled_time" => t.throttled = Duration::from_nanos(value),
            _ => {}
        }
    }
    t
}

/// v2 `cpu.max`: `QUOTA PERIOD` in µs, or `max PERIOD` without a limit.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota: f64 = parts.next()?.parse().ok()?;
    let period: f64 = parts.next()?.parse().ok()?;
    (period > 0.0).then(|| quota / period)
}

/// v1 `cpu.cfs_quota_us` (`-1` without a limit) over `cpu.cfs_period_us`.
fn parse_v1_quota(quota: &str, period: &str) -> Option<f64> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period: i64 = period.trim().parse().ok()?;
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_stat_of_either_version() {
        let v2 = "usage_usec 8000000\nuser_usec 7000000\nsystem_usec 1000000\nnr_periods 120\nnr_throttled 80\nthrottled_usec 2500000\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse_cpu_stat(v2),
            CpuThrottling {
                periods: 120,
                throttled_periods: 80,
                throttled: Duration::from_millis(2500),
                limit_cores: None,
            }
        );
        let v1 = "nr_periods 10\nnr_throttled 3\nthrottled_time 1500000000\n";
        let t = parse_cpu_stat(v1);
        assert_eq!((t.periods, t.throttled_periods), (10, 3));
        assert_eq!(t.throttled, Duration::from_millis(1500));
    }

    #[test]
    fn limits_in_cores() {
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_v1_quota("200000\n", "100000\n"), Some(2.0));
        assert_eq!(parse_v1_quota("-1\n", "100000\n"), None);
    }

    #[test]
    fn the_cpu_controller_s_cgroup_of_either_version() {
        let mounts = CpuControllerMounts {
            v1: Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")),
            v2: Some(PathBuf::from("/sys/fs/cgroup")),
        };
        let hybrid = "4:memory:/kubepods/pod1\n3:cpu,cpuacct:/kubepods/pod1/abc\n0::/\n";
        assert_eq!(
            mounts.cgroup_dir(hybrid),
            Some(PathBuf::from(
                "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/abc"
            ))
        );
        let unified = "0::/system.slice/app.service\n";
        assert_eq!(
            mounts.cgroup_dir(unified),
            Some(PathBuf::from("/sys/fs/cgroup/system.slice/app.service"))
        );
        let v1_only = CpuControllerMounts {
            v1: None,
            ..mounts.clone()
        };
        assert_eq!(
            v1_only.cgroup_dir(hybrid),
            None,
            "cpu's hierarchy is not mounted"
        );
        assert_eq!(CpuControllerMounts::default().cgroup_dir("garbage"), None);
        let other_namespace = "0::/../../kubepods/pod1/abc\n";
        assert_eq!(mounts.cgroup_dir(other_namespace), None);
        assert!(outside_namespace(other_namespace));
        assert!(!outside_namespace(unified));
    }
}
