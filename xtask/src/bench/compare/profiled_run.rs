//! A target script running on its interpreter with a profiler attached (unless none): how every
//! run of this benchmark starts its processes and waits for their ends. Every process is bounded
//! by a deadline and killed when its handle drops.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};

use super::profiler::{self, Profiler, Sampled, Tools};
use crate::bench::util::{Interpreter, Proc};

/// How long a target may take to print `ready` (a chroot's interpreter on a loaded machine).
pub const READY: Duration = Duration::from_secs(30);
/// Slack on top of a run's own length before it counts as hung and is killed.
pub const SLACK: Duration = Duration::from_secs(30);

/// The bench scripts of this benchmark (`xtask/compare-scripts`).
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compare-scripts")
        .join(name)
}

/// A target script running, with its profiler attached (unless none).
pub struct ProfiledRun {
    script_name: String,
    target: Proc,
    attached: Option<profiler::Attached>,
    attached_secs: u32,
}

impl ProfiledRun {
    /// Starts `script ARGS` on `interp` (pinned to `target_cpu`) and attaches `profiler` for
    /// `attached_secs` once it is ready.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        tools: &Tools,
        interp: &Interpreter,
        script_name: &str,
        args: &[String],
        profiler: Profiler,
        rate_hz: u32,
        attached_secs: u32,
        target_cpu: Option<usize>,
    ) -> Result<ProfiledRun> {
        let mut cmd = interp.script_command(&script(script_name), args)?;
        if let Some(cpu) = target_cpu {
            pin_to_cpu(&mut cmd, cpu);
        }
        let mut target = Proc::spawn(&mut cmd, format!("{} {script_name}", interp.name))?;
        target.wait_line(|l| l.starts_with("ready"), READY)?;
        let attached = match profiler {
            Profiler::None => None,
            p => Some(profiler::attach(
                tools,
                p,
                interp,
                target.pid(),
                rate_hz,
                attached_secs,
            )?),
        };
        Ok(ProfiledRun {
            script_name: script_name.to_owned(),
            target,
            attached,
            attached_secs,
        })
    }

    /// The profiler's process id (`None` without a profiler).
    pub fn profiler_pid(&self) -> Option<u32> {
        self.attached.as_ref().map(profiler::Attached::pid)
    }

    /// Waits (up to `target_secs` and some slack) for the JSON line the target prints before
    /// exiting, then for the profiler. Returns both.
    pub fn finish(mut self, target_secs: f64) -> Result<(String, Option<Sampled>)> {
        let json = self.target.wait_line(
            |l| l.starts_with('{'),
            Duration::from_secs_f64(target_secs) + SLACK,
        )?;
        let (usage, stderr) = self.target.wait(SLACK)?;
        if !usage.success() {
            bail!("{} failed: {}", self.script_name, stderr.trim());
        }
        let sampled = self
            .attached
            .map(|a| a.finish(Duration::from_secs(self.attached_secs.into()) + SLACK))
            .transpose()?;
        Ok((json, sampled))
    }
}

/// Runs the command's process (and what it executes, a chroot's interpreter included) on `cpu`
/// alone. The profilers are not pinned: on the other CPUs they take nothing from the target.
pub fn pin_to_cpu(cmd: &mut std::process::Command, cpu: usize) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls sched_setaffinity(2) on a set built
    // on its own stack: no allocation, no lock.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
