//! Which build of the BPF program this kernel runs, from the helpers it has.
//!
//! `build.rs` compiles `ebpf/sampler.bpf.c` twice (`ebpf/kernel.bpf.h` says what differs). The
//! default build needs three helpers that Linux 5.10 lacks; the portable build replaces each with
//! what older kernels have. At start the agent asks the kernel which helpers it has (a one-call
//! program per helper, as libbpf probes them) and loads the default build only if all are there.
//! Each missing helper is told in one line: what replaces it and what that costs.

use aya::programs::ProgramType;
use aya::sys::{is_helper_supported, BpfHelper};

/// The two builds of the sampler's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramBuild {
    /// `bpf_loop` and the BTF task helpers (Linux 5.17 and later).
    Default,
    /// Bounded loops and `bpf_probe_read_kernel` of the task (Linux 5.10 and later).
    Portable,
}

impl ProgramBuild {
    /// The build's name in messages and metrics.
    pub fn name(self) -> &'static str {
        match self {
            ProgramBuild::Default => "default",
            ProgramBuild::Portable => "portable",
        }
    }
}

/// A helper the default build calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Facility {
    /// `bpf_loop`: the frame walk and the thread search as loops the verifier checks once.
    Loop,
    /// `bpf_task_pt_regs`: a task's saved user registers (native stacks, off-CPU wait reasons).
    TaskPtRegs,
    /// `bpf_get_current_task_btf`: the current task as a typed pointer (spans' thread pointer,
    /// native stacks' registers).
    CurrentTaskBtf,
}

impl Facility {
    /// Every facility the default build needs.
    pub const ALL: [Facility; 3] = [
        Facility::Loop,
        Facility::TaskPtRegs,
        Facility::CurrentTaskBtf,
    ];

    fn helper(self) -> BpfHelper {
        match self {
            Facility::Loop => BpfHelper::BPF_FUNC_loop,
            Facility::TaskPtRegs => BpfHelper::BPF_FUNC_task_pt_regs,
            Facility::CurrentTaskBtf => BpfHelper::BPF_FUNC_get_current_task_btf,
        }
    }

    /// The helper's name and the Linux release that added it.
    pub fn describe(self) -> &'static str {
        match self {
            Facility::Loop => "bpf_loop (Linux 5.17)",
            Facility::TaskPtRegs => "bpf_task_pt_regs (Linux 5.15)",
            Facility::CurrentTaskBtf => "bpf_get_current_task_btf (Linux 5.11)",
        }
    }

    /// What the portable build does instead, and what that costs.
    pub fn replacement(self) -> &'static str {
        match self {
            Facility::Loop => {
                "the frame walk is a bounded loop reading each frame by itself: the same stacks, \
                 deep ones cost more per sample, and the verifier takes longer at start"
            }
            Facility::TaskPtRegs => {
                "user registers are read from the top of the task's 16 KiB kernel stack \
                 (wrong on a kernel built with KASAN, whose stacks are larger)"
            }
            Facility::CurrentTaskBtf => {
                "the task's fields are read with bpf_probe_read_kernel, a helper call each"
            }
        }
    }

    /// The one line a user sees when the kernel lacks this facility.
    pub fn note(self) -> String {
        format!(
            "the kernel lacks {}: {}",
            self.describe(),
            self.replacement()
        )
    }
}

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelFacilities {
    /// Facilities the kernel answered it lacks.
    pub missing: Vec<Facility>,
}

impl KernelFacilities {
    /// Asks the running kernel for each helper with a minimal perf_event program. A probe that
    /// cannot tell (no privileges, an unexpected error) counts the helper as present: loading
    /// the default build then says what is wrong, and the loader falls back to the portable one.
    pub fn probe() -> KernelFacilities {
        let missing = Facility::ALL
            .into_iter()
            .filter(|f| {
                matches!(
                    is_helper_supported(ProgramType::PerfEvent, f.helper()),
                    Ok(false)
                )
            })
            .collect();
        KernelFacilities { missing }
    }

    /// The build this kernel can run.
    pub fn build(&self) -> ProgramBuild {
        if self.missing.is_empty() {
            ProgramBuild::Default
        } else {
            ProgramBuild::Portable
        }
    }

    /// One line per missing facility.
    pub fn notes(&self) -> Vec<String> {
        self.missing.iter().map(|f| f.note()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_helper_selects_the_portable_build() {
        let none = KernelFacilities { missing: vec![] };
        assert_eq!(none.build(), ProgramBuild::Default);
        assert!(none.notes().is_empty());
        let old = KernelFacilities {
            missing: vec![Facility::Loop],
        };
        assert_eq!(old.build(), ProgramBuild::Portable);
        assert_eq!(old.notes().len(), 1);
        assert!(old.notes()[0].starts_with("the kernel lacks bpf_loop (Linux 5.17)"));
    }

    #[test]
    fn this_kernel_has_every_helper() {
        // The machines the suite runs on (6.18) have all three: a probe that reports one
        // missing there is broken. Older kernels are covered by `cargo xtask kernels`.
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let found = KernelFacilities::probe();
        let release = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        let major_minor: Vec<u32> = release
            .split(|c: char| !c.is_ascii_digit())
            .take(2)
            .filter_map(|p| p.parse().ok())
            .collect();
        if major_minor.as_slice() >= [5, 17].as_slice() {
            assert_eq!(found.missing, vec![], "on {release}");
        }
    }
}
