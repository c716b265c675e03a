//! What goes wrong loading and driving the BPF sampler, and how a refusal by the kernel is
//! told apart from a rejection by the verifier.

use std::io;

use aya::maps::MapError;
use aya::programs::ProgramError;
use aya::EbpfError;
use common::ProcError;

use crate::discovery::privileges::Privileges;
use crate::sampler::perf_event::max_sample_rate;

/// Errors of the BPF sampler.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The configuration is out of range.
    #[error("invalid BPF sampler configuration: {0}")]
    InvalidConfig(&'static str),
    /// The kernel refused for lack of privileges (EPERM/EACCES).
    #[error(
        "permission denied while {during}: the BPF sampler needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN{lacking} (run as root or grant them)"
    )]
    PermissionDenied {
        /// What was being done (`loading maps`, `loading the program`, `attaching to cpu 3`).
        during: String,
        /// `; CAP_PERFMON missing; kernel.perf_event_paranoid = 2` when this process's
        /// capabilities and the kernel's settings tell why.
        lacking: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Loading the object failed (map creation, relocation, verifier).
    #[error("loading the BPF sampler failed")]
    Load(#[source] Box<EbpfError>),
    /// Loading or attaching the program failed; the verifier log, if any, is in the source.
    #[error("{during} failed")]
    Program {
        /// What was being done.
        during: String,
        /// aya's error.
        #[source]
        source: Box<ProgramError>,
    },
    /// A map operation failed.
    #[error("BPF map {map} operation failed")]
    Map {
        /// The map's name.
        map: &'static str,
        /// aya's error.
        #[source]
        source: Box<MapError>,
    },
    /// The object lacks a map or program this module expects (build mismatch).
    #[error("BPF object has no {0}")]
    Missing(&'static str),
    /// Off-CPU profiling needs the kernel's BTF (`/sys/kernel/btf/vmlinux`) for its
    /// `tp_btf/sched_switch` program.
    #[error("off-CPU profiling needs the kernel's BTF at /sys/kernel/btf/vmlinux: {0}")]
    OffCpuUnavailable(String),
    /// Opening a perf event, or attaching the program to it, failed.
    #[error("{during} failed")]
    PerfEvent {
        /// What was being done.
        during: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The kernel refuses (EINVAL) to open a sampling event above
    /// `kernel.perf_event_max_sample_rate`, which an administrator or another tool may have
    /// lowered (on hosts with a PMU the kernel lowers it itself when perf interrupts run long).
    #[error(
        "{during} failed: sampling at {rate_hz} Hz is above kernel.perf_event_max_sample_rate ({limit}); lower the rate or raise the setting"
    )]
    RateAboveKernelLimit {
        /// What was being done.
        during: String,
        /// The rate asked for.
        rate_hz: u64,
        /// The kernel's setting when the event was refused.
        limit: u64,
    },
    /// A rate change failed, and so did opening the events again at the old rate: the program
    /// has no event and takes no sample until a rate change succeeds.
    #[error("{new}; {restore} (at {old_rate} Hz): no samples are taken")]
    NoEvents {
        /// Why the new rate failed, in one line.
        new: String,
        /// The rate before the change.
        old_rate: u64,
        /// Why the old rate failed, in one line.
        restore: String,
    },
    /// Listing CPUs from sysfs failed.
    #[error("cannot read {path}")]
    Cpus {
        /// The sysfs file.
        path: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The process configuration would be refused by the program.
    #[error("invalid walk configuration for pid {pid}")]
    InvalidProc {
        /// The host tgid.
        pid: u32,
        /// What is wrong.
        #[source]
        source: ProcError,
    },
}

pub(super) fn map_error(map: &'static str) -> impl Fn(MapError) -> BpfError {
    move |e| BpfError::Map {
        map,
        source: Box::new(e),
    }
}

pub(super) fn ignore_absent(r: Result<(), MapError>) -> Result<(), MapError> {
    match r {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

pub(super) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

/// The kernel said no: names the BPF capabilities this process lacks, if its set tells.
pub(super) fn permission_denied(during: &str, source: io::Error) -> BpfError {
    let lacking: String = Privileges::current()
        .bpf_shortfalls()
        .iter()
        .map(|s| format!("; {}", s.brief()))
        .collect();
    BpfError::PermissionDenied {
        during: during.to_owned(),
        lacking,
        source,
    }
}

pub(super) fn load_error(e: EbpfError) -> BpfError {
    match e {
        EbpfError::MapError(MapError::CreateError { io_error, .. }) if is_permission(&io_error) => {
            permission_denied("creating the BPF maps", io_error)
        }
        EbpfError::ProgramError(p) => program_error("loading the program", p),
        other => BpfError::Load(Box::new(other)),
    }
}

pub(super) fn perf_event_error(during: &str, e: io::Error) -> BpfError {
    if is_permission(&e) {
        return permission_denied(during, e);
    }
    BpfError::PerfEvent {
        during: during.to_owned(),
        source: e,
    }
}

/// [`perf_event_error`] for opening cpu-clock events at `rate_hz`: the kernel's EINVAL is told
/// apart when the rate is above the host's limit.
pub(super) fn clock_event_error(during: &str, rate_hz: u64, e: io::Error) -> BpfError {
    if e.raw_os_error() == Some(libc::EINVAL) {
        if let Some(limit) = max_sample_rate().filter(|&limit| rate_hz > limit) {
            return BpfError::RateAboveKernelLimit {
                during: during.to_owned(),
                rate_hz,
                limit,
            };
        }
    }
    perf_event_error(during, e)
}

/// A failed rate change, each failure told with its own rate.
pub(super) fn rate_change_error(rate_hz: u64, e: super::clock::ReopenError) -> BpfError {
    const DURING: &str = "changing the rate";
    const AGAIN: &str = "opening the cpu-clock events again at the old rate";
    let new = clock_event_error(DURING, rate_hz, e.new);
    match e.restore {
        None => new,
        Some((old_rate, restore)) => BpfError::NoEvents {
            new: format!("{:#}", anyhow::Error::new(new)),
            old_rate,
            restore: format!(
                "{:#}",
                anyhow::Error::new(clock_event_error(AGAIN, old_rate, restore))
            ),
        },
    }
}

pub(super) fn program_error(during: &str, e: ProgramError) -> BpfError {
    match e {
        // The verifier answers EACCES too when it rejects a program: with a log, that is what
        // it is, and the log must reach the user.
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } if is_permission(&io_error) && format!("{verifier_log}").trim().is_empty() => {
            permission_denied(during, io_error)
        }
        ProgramError::SyscallError(aya::sys::SyscallError { io_error, .. })
            if is_permission(&io_error) =>
        {
            permission_denied(during, io_error)
        }
        other => BpfError::Program {
            during: during.to_owned(),
            source: Box::new(other),
        },
    }
}

/// Lines of a verifier log kept in a one-line summary: the refusal is among the last, before the
/// statistics.
const VERIFIER_TAIL_LINES: usize = 3;

impl BpfError {
    /// The kernel's verifier log, when the verifier refused a program.
    fn verifier_log(&self) -> Option<String> {
        let program = match self {
            BpfError::Program { source, .. } => source.as_ref(),
            BpfError::Load(e) => match e.as_ref() {
                EbpfError::ProgramError(p) => p,
                _ => return None,
            },
            _ => return None,
        };
        match program {
            ProgramError::LoadError { verifier_log, .. } => Some(verifier_log.to_string()),
            _ => None,
        }
    }

    /// Whether the kernel's verifier refused a program (another build may pass).
    pub fn is_verifier_refusal(&self) -> bool {
        self.verifier_log()
            .is_some_and(|log| !log.trim().is_empty())
    }

    /// The verifier's last lines that say why it refused the program (its statistics left out),
    /// joined with ` | `.
    pub fn verifier_tail(&self) -> Option<String> {
        let log = self.verifier_log()?;
        let lines: Vec<&str> = log
            .lines()
            .map(str::trim)
            .filter(|l| {
                !l.is_empty()
                    && !l.starts_with("verification time")
                    && !l.starts_with("stack depth")
                    && !l.starts_with("processed ")
            })
            .collect();
        if lines.is_empty() {
            return None;
        }
        Some(lines[lines.len().saturating_sub(VERIFIER_TAIL_LINES)..].join(" | "))
    }

    /// One line for the user: the error and its causes, with a verifier's refusal shortened to
    /// its last lines (the whole log runs to thousands).
    pub fn summary(&self) -> String {
        match self.verifier_tail() {
            Some(tail) => format!("{self}: the kernel's verifier refused it: {tail}"),
            None => {
                let mut line = self.to_string();
                let mut cause = std::error::Error::source(self);
                while let Some(c) = cause {
                    line.push_str(": ");
                    line.push_str(&c.to_string());
                    cause = c.source();
                }
                line
            }
        }
    }
}
