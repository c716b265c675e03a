//! What this run may do, checked once at start: root or the capabilities the systemd unit
//! grants, and the kernel settings that limit them. Each shortfall is one line that names what
//! is missing and what it costs, so that a missing privilege never looks like an empty host.
//!
//! Facts used (Linux `capability.h`, `Documentation/admin-guide/LSM/Yama.rst`,
//! `Documentation/admin-guide/sysctl/kernel.rst`, `kernel_lockdown(7)`):
//! - reading another user's process (`/proc/PID/exe`, `maps`, `process_vm_readv`) needs
//!   `CAP_SYS_PTRACE`; opening its interpreter under a directory only its owner can search
//!   (`/root/.pyenv`, a container's root) needs `CAP_DAC_READ_SEARCH`;
//! - the eBPF sampler needs `CAP_BPF` and `CAP_PERFMON` (or `CAP_SYS_ADMIN`), and without
//!   `CAP_PERFMON` a `kernel.perf_event_paranoid` above 0 forbids CPU-wide perf events;
//! - `kernel.yama.ptrace_scope` 2 lets only `CAP_SYS_PTRACE` read other processes, 3 nobody;
//! - lockdown `confidentiality` forbids BPF programs reading kernel memory.

use std::fmt;

/// The capabilities the agent uses, with their bit numbers in `CapEff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Search any directory, read any file.
    DacReadSearch = 2,
    /// Read any process's memory and `/proc` entries.
    SysPtrace = 19,
    /// Stands in for both BPF capabilities.
    SysAdmin = 21,
    /// Open perf events on every CPU.
    Perfmon = 38,
    /// Load BPF programs and maps.
    Bpf = 39,
}

/// What to do about a process the kernel would not let us inspect. Asking for privileges this
/// process already has would send the user in circles: with `CAP_SYS_PTRACE` held, the refusal
/// comes from something else.
pub fn denied_hint() -> &'static str {
    // A host scan asks once per refused process; the agent's capabilities do not change.
    static HOLDS_PTRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *HOLDS_PTRACE.get_or_init(|| Privileges::current().has(Capability::SysPtrace)) {
        "refused although pyagent holds CAP_SYS_PTRACE (the process may be in a user namespace pyagent is not privileged over, not dumpable, or protected by a security module such as Yama, SELinux or AppArmor)"
    } else {
        "run as root or grant CAP_SYS_PTRACE"
    }
}

impl Capability {
    /// The name as `capabilities(7)` and systemd's `AmbientCapabilities=` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::DacReadSearch => "CAP_DAC_READ_SEARCH",
            Capability::SysPtrace => "CAP_SYS_PTRACE",
            Capability::SysAdmin => "CAP_SYS_ADMIN",
            Capability::Perfmon => "CAP_PERFMON",
            Capability::Bpf => "CAP_BPF",
        }
    }
}

/// The kernel lockdown mode (`/sys/kernel/security/lockdown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lockdown {
    /// No lockdown.
    None,
    /// Integrity: the kernel cannot be modified (`bpf_probe_write_user` refused); reading is fine.
    Integrity,
    /// Confidentiality: BPF programs cannot read kernel memory either.
    Confidentiality,
}

/// This process's privileges and the kernel settings that bound them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privileges {
    /// Effective capability set (`CapEff` of `/proc/self/status`).
    pub effective: u64,
    /// `kernel.yama.ptrace_scope`, when Yama is built in.
    pub ptrace_scope: Option<u32>,
    /// `kernel.perf_event_paranoid`.
    pub perf_event_paranoid: Option<i32>,
    /// The lockdown mode, when securityfs shows it.
    pub lockdown: Option<Lockdown>,
}

/// One thing this run lacks, and what it costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    /// A capability the agent uses is not effective.
    Missing(Capability),
    /// Yama forbids reading other processes (3: for everyone; 2: without `CAP_SYS_PTRACE`).
    PtraceScope(u32),
    /// No `CAP_PERFMON` and a `perf_event_paranoid` that forbids CPU-wide events.
    PerfEventParanoid(i32),
    /// Lockdown in confidentiality mode.
    LockdownConfidentiality,
}

impl Shortfall {
    /// Nothing can be profiled at all: the run should stop with this line.
    pub fn prevents_profiling(&self) -> bool {
        matches!(self, Shortfall::PtraceScope(_))
    }
}

impl Shortfall {
    /// What is missing, without what it costs: `CAP_BPF missing`.
    pub fn brief(&self) -> String {
        match self {
            Shortfall::Missing(cap) => format!("{} missing", cap.name()),
            Shortfall::PtraceScope(scope) => format!("kernel.yama.ptrace_scope = {scope}"),
            Shortfall::PerfEventParanoid(level) => format!("kernel.perf_event_paranoid = {level}"),
            Shortfall::LockdownConfidentiality => "kernel lockdown = confidentiality".to_string(),
        }
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shortfall::Missing(cap @ Capability::SysPtrace) => write!(
                f,
                "{} missing: processes of other users cannot be read (counted as denied); run as root or grant it",
                cap.name()
            ),
            Shortfall::Missing(cap @ Capability::DacReadSearch) => write!(
                f,
                "{} missing: interpreters under directories only their owner can search (/root/.pyenv, container roots) cannot be read; run as root or grant it",
                cap.name()
            ),
            Shortfall::Missing(cap) => write!(
                f,
                "{} missing: the eBPF sampler cannot load (it needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN); run as root or grant it",
                cap.name()
            ),
            Shortfall::PtraceScope(scope) => write!(
                f,
                "kernel.yama.ptrace_scope = {scope} forbids reading other processes{}: nothing can be profiled",
                if *scope >= 3 { "" } else { " without CAP_SYS_PTRACE" }
            ),
            Shortfall::PerfEventParanoid(level) => write!(
                f,
                "kernel.perf_event_paranoid = {level} forbids CPU-wide perf events without CAP_PERFMON: the eBPF sampler cannot attach"
            ),
            Shortfall::LockdownConfidentiality => write!(
                f,
                "kernel lockdown is in confidentiality mode: BPF programs may not read kernel memory, so the eBPF sampler may fail to load"
            ),
        }
    }
}

impl Privileges {
    /// This process's, read from `/proc` and `/sys` (an unreadable setting is `None`).
    pub fn current() -> Privileges {
        let effective = procfs::process::Process::myself()
            .and_then(|p| p.status())
            .map(|s| s.capeff)
            .unwrap_or(0);
        let sysctl = |path: &str| -> Option<String> {
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_string())
        };
        Privileges {
            effective,
            ptrace_scope: sysctl("/proc/sys/kernel/yama/ptrace_scope").and_then(|s| s.parse().ok()),
            perf_event_paranoid: sysctl("/proc/sys/kernel/perf_event_paranoid")
                .and_then(|s| s.parse().ok()),
            lockdown: sysctl("/sys/kernel/security/lockdown").and_then(|s| parse_lockdown(&s)),
        }
    }

    /// Whether `cap` is effective.
    pub fn has(&self, cap: Capability) -> bool {
        self.effective & (1u64 << cap as u32) != 0
    }

    /// The BPF capabilities missing (empty when `CAP_SYS_ADMIN` stands in for them).
    pub fn missing_for_bpf(&self) -> Vec<Capability> {
        if self.has(Capability::SysAdmin) {
            return Vec::new();
        }
        [Capability::Bpf, Capability::Perfmon]
            .into_iter()
            .filter(|c| !self.has(*c))
            .collect()
    }

    /// What keeps this run from reading processes: reported once at start.
    pub fn shortfalls(&self) -> Vec<Shortfall> {
        let mut out = Vec::new();
        match self.ptrace_scope {
            Some(scope) if scope >= 3 => out.push(Shortfall::PtraceScope(scope)),
            Some(2) if !self.has(Capability::SysPtrace) => out.push(Shortfall::PtraceScope(2)),
            _ => {}
        }
        for cap in [Capability::SysPtrace, Capability::DacReadSearch] {
            if !self.has(cap) {
                out.push(Shortfall::Missing(cap));
            }
        }
        out
    }

    /// What keeps the eBPF sampler from loading or attaching: part of its error when the
    /// kernel refuses it (the run then says it falls back, or fails in `--mode ebpf`).
    pub fn bpf_shortfalls(&self) -> Vec<Shortfall> {
        let missing = self.missing_for_bpf();
        let no_perfmon = missing.contains(&Capability::Perfmon);
        let mut out: Vec<Shortfall> = missing.into_iter().map(Shortfall::Missing).collect();
        if let Some(level) = self.perf_event_paranoid.filter(|l| *l > 0 && no_perfmon) {
            out.push(Shortfall::PerfEventParanoid(level));
        }
        if self.lockdown == Some(Lockdown::Confidentiality) {
            out.push(Shortfall::LockdownConfidentiality);
        }
        out
    }
}

/// `none [integrity] confidentiality`: the bracketed word is the mode in force.
fn parse_lockdown(text: &str) -> Option<Lockdown> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    match &text[start + 1..end] {
        "none" => Some(Lockdown::None),
        "integrity" => Some(Lockdown::Integrity),
        "confidentiality" => Some(Lockdown::Confidentiality),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(caps: &[Capability]) -> Privileges {
        Privileges {
            effective: caps.iter().fold(0, |acc, c| acc | 1u64 << *c as u32),
            ptrace_scope: Some(1),
            perf_event_paranoid: Some(2),
            lockdown: Some(Lockdown::Integrity),
        }
    }

    const UNIT: [Capability; 4] = [
        Capability::Bpf,
        Capability::Perfmon,
        Capability::SysPtrace,
        Capability::DacReadSearch,
    ];

    #[test]
    fn the_unit_capabilities_lack_nothing() {
        assert_eq!(with(&UNIT).shortfalls(), vec![]);
        assert_eq!(with(&UNIT).bpf_shortfalls(), vec![]);
    }

    #[test]
    fn each_capability_removed_is_named() {
        for removed in UNIT {
            let caps: Vec<_> = UNIT.into_iter().filter(|c| *c != removed).collect();
            let p = with(&caps);
            let lacks: Vec<_> = p
                .shortfalls()
                .into_iter()
                .chain(p.bpf_shortfalls())
                .collect();
            assert!(lacks.contains(&Shortfall::Missing(removed)), "{lacks:?}");
            assert!(lacks.iter().all(|s| !s.prevents_profiling()));
            for s in &lacks {
                assert!(!s.to_string().contains('\n'));
            }
        }
        // Without CAP_PERFMON, the paranoid level is why the program cannot attach.
        let caps = [
            Capability::Bpf,
            Capability::SysPtrace,
            Capability::DacReadSearch,
        ];
        assert!(with(&caps)
            .bpf_shortfalls()
            .contains(&Shortfall::PerfEventParanoid(2)));
        let admin = with(&[
            Capability::SysAdmin,
            Capability::SysPtrace,
            Capability::DacReadSearch,
        ]);
        assert!(admin.shortfalls().is_empty() && admin.bpf_shortfalls().is_empty());
    }

    #[test]
    fn ptrace_scope_three_stops_everyone() {
        let mut p = with(&UNIT);
        p.ptrace_scope = Some(3);
        assert!(p.shortfalls()[0].prevents_profiling());
        p.ptrace_scope = Some(2);
        assert!(p.shortfalls().is_empty());
        let mut p = with(&[Capability::DacReadSearch]);
        p.ptrace_scope = Some(2);
        assert!(p.shortfalls()[0].prevents_profiling());
    }

    #[test]
    fn lockdown_reads_the_bracketed_mode() {
        assert_eq!(
            parse_lockdown("none [integrity] confidentiality"),
            Some(Lockdown::Integrity)
        );
        assert_eq!(parse_lockdown("[none] integrity"), Some(Lockdown::None));
        assert_eq!(parse_lockdown("garbage"), None);
    }
}
