//! What a blocked thread waits for: the wait reason of an off-CPU record or of a thread found
//! blocked (its system call, read from `/proc`), and the GIL state that wait implies.

use crate::aggregate::WaitReason;
use crate::unwind::GilState;

pub use super::syscalls::{syscall_name, syscall_wait_class};

/// The wait reason of an off-CPU record: a futex inside the GIL's state is a GIL wait.
pub fn wait_reason(class: u32, wait_addr: u64, gil: Option<std::ops::Range<u64>>) -> WaitReason {
    match class {
        common::WAIT_IO => WaitReason::Io,
        common::WAIT_SLEEP => WaitReason::Sleep,
        common::WAIT_FUTEX if gil.is_some_and(|g| g.contains(&wait_addr)) => WaitReason::Gil,
        common::WAIT_FUTEX => WaitReason::Lock,
        _ => WaitReason::Other,
    }
}

/// The GIL state of a thread blocked for `wait`, whose GIL read as `gil` when its stack was
/// taken: blocked on the GIL's own futex is waiting for it, whatever `last_holder` says (a
/// thread handing the GIL over waits there too, after releasing it).
pub fn gil_while_blocked(gil: Option<GilState>, wait: WaitReason) -> Option<GilState> {
    match wait {
        WaitReason::Gil => Some(GilState::Waiting),
        _ => gil,
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The system call a blocked thread is in, from `/proc/PID/task/TID/syscall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockedIn {
    /// the system call number
    pub nr: i64,
    /// its `common::WAIT_*` class
    pub class: u32,
    /// the futex word, for futex waits
    pub wait_addr: u64,
}

/// What thread `tid` of `pid` is blocked in, if it is asleep in a system call (`S` or `D`).
pub fn blocked_in(pid: u32, tid: u32) -> Option<BlockedIn> {
    let task = procfs::process::Process::new(pid as i32)
        .ok()?
        .task_from_tid(tid as i32)
        .ok()?;
    let state = task.stat().ok()?.state;
    if state != 'S' && state != 'D' {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    parse_syscall(&text)
}

/// `NR ARG0 ARG1 ... SP PC` (hex arguments); `running` and `-1 SP PC` (blocked outside any
/// system call) say nothing.
pub(crate) fn parse_syscall(text: &str) -> Option<BlockedIn> {
    let mut fields = text.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    if nr < 0 {
        return None;
    }
    let arg = |s: Option<&str>| {
        s.and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0)
    };
    let (a0, a1) = (arg(fields.next()), arg(fields.next()));
    let (class, wait_addr) = syscall_wait_class(nr, a0, a1);
    Some(BlockedIn {
        nr,
        class,
        wait_addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // x86_64 numbers; syscalls.rs tests aarch64's table.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn proc_syscall_lines_classify_like_the_bpf_program() {
        let futex = parse_syscall("202 0x7f0012345678 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f00\n");
        assert_eq!(
            futex,
            Some(BlockedIn {
                nr: 202,
                class: common::WAIT_FUTEX,
                wait_addr: 0x7f00_1234_5678
            })
        );
        let sleep = parse_syscall("230 0x1 0x0 0x7ffc 0x0 0x0 0x0 0x7ffd 0x7f00").unwrap();
        assert_eq!(sleep.class, common::WAIT_SLEEP);
        let select_no_fds = parse_syscall("23 0x0 0x0 0x0 0x0 0x7ffc 0x0 0x7ffd 0x7f00").unwrap();
        assert_eq!(select_no_fds.class, common::WAIT_SLEEP);
        let recv = parse_syscall("45 0x3 0x7f 0x1 0x0 0x0 0x0 0x7ffd 0x7f00").unwrap();
        assert_eq!(recv.class, common::WAIT_IO);
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x7f00"), None);
        assert_eq!(parse_syscall("garbage"), None);
    }

    #[test]
    fn futex_in_the_gil_is_a_gil_wait() {
        let gil = Some(0x1000..0x1100);
        assert_eq!(
            wait_reason(common::WAIT_FUTEX, 0x1010, gil.clone()),
            WaitReason::Gil
        );
        assert_eq!(
            wait_reason(common::WAIT_FUTEX, 0x2000, gil),
            WaitReason::Lock
        );
        assert_eq!(
            wait_reason(common::WAIT_FUTEX, 0x1010, None),
            WaitReason::Lock
        );
        assert_eq!(wait_reason(common::WAIT_NONE, 0, None), WaitReason::Other);
    }
}
