//! The framehop unwinder, cache and registers of the architecture the agent is built for: a
//! record's registers (`ip`, `sp`, and the frame pointer, rbp or x29) are where it starts.

#[cfg(target_arch = "x86_64")]
pub(super) use framehop::x86_64::{CacheX86_64 as Cache, UnwinderX86_64 as Unwinder};

#[cfg(target_arch = "aarch64")]
pub(super) use framehop::aarch64::{CacheAarch64 as Cache, UnwinderAarch64 as Unwinder};

/// The registers framehop starts from.
#[cfg(target_arch = "x86_64")]
pub(super) fn start_regs(ip: u64, sp: u64, fp: u64) -> framehop::x86_64::UnwindRegsX86_64 {
    framehop::x86_64::UnwindRegsX86_64::new(ip, sp, fp)
}

/// The registers framehop starts from. A record carries no link register (x30), so the leaf
/// frame's caller is found only where the leaf has saved it (its CFI says where): a leaf
/// function that keeps its return address in x30 ends the stack there.
#[cfg(target_arch = "aarch64")]
pub(super) fn start_regs(_ip: u64, sp: u64, fp: u64) -> framehop::aarch64::UnwindRegsAarch64 {
    framehop::aarch64::UnwindRegsAarch64::new(0, sp, fp)
}
