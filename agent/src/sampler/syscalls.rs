//! The system calls a blocked thread waits in, by the number the architecture gives them: their
//! names (for `dump`) and their `common::WAIT_*` class, the same tables as `pa_syscall_wait` in
//! `ebpf/arch_x86.bpf.h` and `ebpf/arch_arm64.bpf.h`: change both.
//!
//! In: a system call number and its first two arguments, from `/proc/PID/task/TID/syscall` or
//! an off-CPU record. Out: a name, a class and, for futex waits, the futex word.

#[cfg(target_arch = "x86_64")]
pub use x86_64::{syscall_name, syscall_wait_class};

#[cfg(target_arch = "aarch64")]
pub use aarch64::{syscall_name, syscall_wait_class};

/// x86_64's numbers (arch/x86/entry/syscalls/syscall_64.tbl).
#[cfg(target_arch = "x86_64")]
mod x86_64 {
    /// The name of system call `nr`, for the ones [`syscall_wait_class`] knows.
    pub fn syscall_name(nr: i64) -> Option<&'static str> {
        Some(match nr {
            0 => "read",
            1 => "write",
            7 => "poll",
            17 => "pread64",
            18 => "pwrite64",
            19 => "readv",
            20 => "writev",
            23 => "select",
            34 => "pause",
            35 => "nanosleep",
            42 => "connect",
            43 => "accept",
            44 => "sendto",
            45 => "recvfrom",
            46 => "sendmsg",
            47 => "recvmsg",
            202 => "futex",
            208 => "io_getevents",
            230 => "clock_nanosleep",
            232 => "epoll_wait",
            270 => "pselect6",
            271 => "ppoll",
            281 => "epoll_pwait",
            288 => "accept4",
            299 => "recvmmsg",
            307 => "sendmmsg",
            426 => "io_uring_enter",
            441 => "epoll_pwait2",
            449 => "futex_waitv",
            _ => return None,
        })
    }

    /// The `common::WAIT_*` class of system call `nr` with first arguments `a0`, `a1`, and the
    /// futex word for futex waits.
    pub fn syscall_wait_class(nr: i64, a0: u64, a1: u64) -> (u32, u64) {
        match nr {
            35 | 230 | 34 => (common::WAIT_SLEEP, 0),
            23 | 270 if a0 == 0 => (common::WAIT_SLEEP, 0),
            7 | 271 if a1 == 0 => (common::WAIT_SLEEP, 0),
            0 | 1 | 7 | 17 | 18 | 19 | 20 | 23 | 42 | 43 | 44 | 45 | 46 | 47 | 208 | 232 | 270
            | 271 | 281 | 288 | 299 | 307 | 426 | 441 => (common::WAIT_IO, 0),
            202 | 449 => (common::WAIT_FUTEX, a0),
            _ => (common::WAIT_OTHER, 0),
        }
    }
}

/// The generic numbers aarch64 uses (include/uapi/asm-generic/unistd.h): no select, poll, pause
/// or epoll_wait, whose libc wrappers call pselect6, ppoll and epoll_pwait.
#[cfg(any(target_arch = "aarch64", test))]
mod aarch64 {
    /// The name of system call `nr`, for the ones [`syscall_wait_class`] knows.
    pub fn syscall_name(nr: i64) -> Option<&'static str> {
        Some(match nr {
            4 => "io_getevents",
            22 => "epoll_pwait",
            63 => "read",
            64 => "write",
            65 => "readv",
            66 => "writev",
            67 => "pread64",
            68 => "pwrite64",
            72 => "pselect6",
            73 => "ppoll",
            98 => "futex",
            101 => "nanosleep",
            115 => "clock_nanosleep",
            202 => "accept",
            203 => "connect",
            206 => "sendto",
            207 => "recvfrom",
            211 => "sendmsg",
            212 => "recvmsg",
            242 => "accept4",
            243 => "recvmmsg",
            269 => "sendmmsg",
            426 => "io_uring_enter",
            441 => "epoll_pwait2",
            449 => "futex_waitv",
            _ => return None,
        })
    }

    /// The `common::WAIT_*` class of system call `nr` with first arguments `a0`, `a1`, and the
    /// futex word for futex waits.
    pub fn syscall_wait_class(nr: i64, a0: u64, a1: u64) -> (u32, u64) {
        match nr {
            101 | 115 => (common::WAIT_SLEEP, 0),
            72 if a0 == 0 => (common::WAIT_SLEEP, 0),
            73 if a1 == 0 => (common::WAIT_SLEEP, 0),
            4
            | 22
            | 63..=68
            | 72
            | 73
            | 202
            | 203
            | 206
            | 207
            | 211
            | 212
            | 242
            | 243
            | 269
            | 426
            | 441 => (common::WAIT_IO, 0),
            98 | 449 => (common::WAIT_FUTEX, a0),
            _ => (common::WAIT_OTHER, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::aarch64;

    #[test]
    fn aarch64_waits_are_classified_and_named() {
        assert_eq!(
            aarch64::syscall_wait_class(98, 0x1000, 0x80),
            (common::WAIT_FUTEX, 0x1000)
        );
        assert_eq!(
            aarch64::syscall_wait_class(115, 1, 0),
            (common::WAIT_SLEEP, 0)
        );
        assert_eq!(
            aarch64::syscall_wait_class(72, 0, 0),
            (common::WAIT_SLEEP, 0)
        );
        assert_eq!(aarch64::syscall_wait_class(72, 4, 0), (common::WAIT_IO, 0));
        assert_eq!(
            aarch64::syscall_wait_class(73, 3, 0),
            (common::WAIT_SLEEP, 0)
        );
        assert_eq!(aarch64::syscall_wait_class(207, 3, 0), (common::WAIT_IO, 0));
        // x86_64's futex number is aarch64's accept.
        assert_eq!(aarch64::syscall_wait_class(202, 3, 0), (common::WAIT_IO, 0));
        assert_eq!(
            aarch64::syscall_wait_class(260, 0, 0),
            (common::WAIT_OTHER, 0)
        );
        for nr in 0..500 {
            let named = aarch64::syscall_name(nr).is_some();
            let classed = aarch64::syscall_wait_class(nr, 1, 1).0 != common::WAIT_OTHER;
            assert_eq!(named, classed, "syscall {nr}");
        }
    }
}
