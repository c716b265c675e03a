/* SPDX-License-Identifier: GPL-2.0 */
/*
 * arch_arm64.bpf.h: what the programs know of aarch64 (arch.bpf.h picks it): the registers a
 * perf event interrupted, the user registers a task saved entering the kernel, its thread
 * pointer, the kernel stack and the system calls a thread blocks in.
 */
#ifndef PA_ARCH_ARM64_BPF_H
#define PA_ARCH_ARM64_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "pyagent.h"

/* struct pt_regs (arch/arm64/include/asm/ptrace.h): regs, sp, pc and pstate sit in an
 * anonymous union with struct user_pt_regs, which CO-RE looks through; orig_x0 keeps the
 * first argument of the system call (x0 is overwritten with its result), syscallno its
 * number (NO_SYSCALL, -1, outside one). */
struct pt_regs {
	unsigned long regs[31];
	unsigned long sp;
	unsigned long pc;
	unsigned long pstate;
	unsigned long orig_x0;
	int syscallno;
} __attribute__((preserve_access_index));

/* TPIDR_EL0, the thread pointer, saved in the task at each switch out (tls_thread_switch):
 * exact for a thread that has left a CPU once since it set the register (glibc's main thread
 * sets it in userspace at start, a new thread through clone's CLONE_SETTLS). */
struct thread_struct {
	struct {
		unsigned long tp_value;
	} uw;
} __attribute__((preserve_access_index));

/* task_struct's path to the thread pointer. */
#define PA_TASK_THREAD_POINTER thread.uw.tp_value

/* TLS variant 1 (glibc's aarch64): the thread pointer is the 16-byte TCB, whose first word is
 * the DTV pointer, with struct pthread below it and static TLS above it, `off`
 * (link_map.l_tls_offset, the TCB included) bytes up. `dtvp` (_thread_db_pthread_dtvp) counts
 * from struct pthread, not from the thread pointer, and is not needed. */
#define PA_TLS_STATIC(tp, off) ((tp) + (off))
#define PA_TLS_DTV_PTR(tp, dtvp) (tp)

/* The fields of struct pt_regs the programs use: x29 is the frame pointer (AAPCS64). */
#define PA_PT_IP(r) ((r)->pc)
#define PA_PT_SP(r) ((r)->sp)
#define PA_PT_FP(r) ((r)->regs[29])
/* The system call number and its first two arguments. */
#define PA_PT_SYSCALL(r) ((long)(r)->syscallno)
#define PA_PT_ARG0(r) ((r)->orig_x0)
#define PA_PT_ARG1(r) ((r)->regs[1])

/* A perf_event program's context starts with the interrupted context's registers as struct
 * user_pt_regs (bpf_user_pt_regs_t on arm64): x0..x30, sp, pc, pstate. Word indexes. */
#define PA_UREG_FP 29
#define PA_UREG_IP 32
#define PA_UREG_SP 31
#define PA_UREG_PSTATE 33

/* Whether the perf event interrupted user mode: pstate's mode field is EL0t (user_mode() in
 * arch/arm64/include/asm/ptrace.h). */
static __always_inline int pa_ctx_user_mode(const __u64 *regs)
{
	return (regs[PA_UREG_PSTATE] & 0xf) == 0;
}

/* arm64's kernel stack with 4 KiB pages and without KASAN, as Debian's kernels are: 16 KiB
 * (THREAD_SHIFT 14). task_pt_regs() is the struct pt_regs at its top, whose size differs
 * between kernels (6.1: 336 bytes; later kernels grew stackframe), hence its size from the
 * running kernel's BTF. */
#define PA_THREAD_SIZE 16384
#define PA_PT_REGS_BYTES bpf_core_type_size(struct pt_regs)
/* Word indexes in the saved registers that the portable build reads. */
#define PA_PTW_X1 1
#define PA_PTW_X29 29
#define PA_PTW_ORIG_X0 34
#define PA_PTW_SYSCALLNO 35

/* The portable build's copy of the saved user registers at `regs` (the top of the kernel
 * stack) into `out`; nonzero when a read failed. */
static __always_inline int pa_read_saved_regs(const __u8 *regs, struct pa_user_regs *out)
{
	/* x29, x30, sp, pc, pstate, orig_x0, syscallno: one read. */
	__u64 w[PA_PTW_SYSCALLNO - PA_PTW_X29 + 1];

	if (bpf_probe_read_kernel(&out->arg1, 8, regs + PA_PTW_X1 * 8) ||
	    bpf_probe_read_kernel(w, sizeof(w), regs + PA_PTW_X29 * 8))
		return -1;
	out->fp = w[0];
	out->sp = w[2];
	out->ip = w[3];
	out->arg0 = w[PA_PTW_ORIG_X0 - PA_PTW_X29];
	/* syscallno is an s32 in the word's low half (little-endian). */
	out->syscall = (long)(int)w[PA_PTW_SYSCALLNO - PA_PTW_X29];
	return 0;
}

/* What a thread blocked in system call `nr` with first arguments `a0`, `a1` waits in
 * (PA_WAIT_*), and for a futex its word in `*addr`. The generic numbers
 * (include/uapi/asm-generic/unistd.h), which have no select, poll, pause or epoll_wait; the
 * same table as `syscall_wait_class` in agent/src/sampler/off_cpu.rs: change both. */
static __always_inline __u32 pa_syscall_wait(long nr, __u64 a0, __u64 a1, __u64 *addr)
{
	switch (nr) {
	case 101: /* nanosleep */
	case 115: /* clock_nanosleep */
		return PA_WAIT_SLEEP;
	case 72: /* pselect6 */
		return a0 == 0 ? PA_WAIT_SLEEP : PA_WAIT_IO; /* nfds */
	case 73: /* ppoll */
		return a1 == 0 ? PA_WAIT_SLEEP : PA_WAIT_IO; /* nfds */
	case 63: /* read */
	case 64: /* write */
	case 67: /* pread64 */
	case 68: /* pwrite64 */
	case 65: /* readv */
	case 66: /* writev */
	case 203: /* connect */
	case 202: /* accept */
	case 206: /* sendto */
	case 207: /* recvfrom */
	case 211: /* sendmsg */
	case 212: /* recvmsg */
	case 4: /* io_getevents */
	case 22: /* epoll_pwait */
	case 242: /* accept4 */
	case 243: /* recvmmsg */
	case 269: /* sendmmsg */
	case 426: /* io_uring_enter */
	case 441: /* epoll_pwait2 */
		return PA_WAIT_IO;
	case 98: /* futex */
	case 449: /* futex_waitv */
		*addr = a0;
		return PA_WAIT_FUTEX;
	}
	return PA_WAIT_OTHER;
}

#endif /* PA_ARCH_ARM64_BPF_H */
