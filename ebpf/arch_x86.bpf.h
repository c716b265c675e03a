/* SPDX-License-Identifier: GPL-2.0 */
/*
 * arch_x86.bpf.h: what the programs know of x86_64 (arch.bpf.h picks it): the registers a
 * perf event interrupted, the user registers a task saved entering the kernel, its thread
 * pointer, the kernel stack and the system calls a thread blocks in.
 */
#ifndef PA_ARCH_X86_BPF_H
#define PA_ARCH_X86_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pyagent.h"

/* struct pt_regs: the saved user registers (bpf_task_pt_regs), read by the native section
 * and the off-CPU program. */
struct pt_regs {
	unsigned long bp;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long sp;
} __attribute__((preserve_access_index));

/* The task's saved FS base is its thread pointer (glibc's pthread_t), where the span reader
 * (record.bpf.h, pa_tls_variable) starts. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

/* task_struct's path to the thread pointer. */
#define PA_TASK_THREAD_POINTER thread.fsbase

/* TLS variant 2 (glibc's x86_64): the thread pointer is the TCB, struct pthread; static TLS
 * lies below it, `off` (link_map.l_tls_offset) bytes down; the DTV pointer is the pthread
 * field at `dtvp` (_thread_db_pthread_dtvp). */
#define PA_TLS_STATIC(tp, off) ((tp) - (off))
#define PA_TLS_DTV_PTR(tp, dtvp) ((tp) + (dtvp))

/* The fields of struct pt_regs the programs use. */
#define PA_PT_IP(r) ((r)->ip)
#define PA_PT_SP(r) ((r)->sp)
#define PA_PT_FP(r) ((r)->bp)
/* The system call number and its first two arguments. */
#define PA_PT_SYSCALL(r) ((long)(r)->orig_ax)
#define PA_PT_ARG0(r) ((r)->di)
#define PA_PT_ARG1(r) ((r)->si)

/* A perf_event program's context starts with the interrupted context's registers in the uapi
 * struct pt_regs layout (21 words); these are their word indexes. */
#define PA_UREG_FP 4 /* rbp */
#define PA_UREG_IP 16
#define PA_UREG_CS 17
#define PA_UREG_SP 19

/* Whether the perf event interrupted user mode: the code segment's privilege level. */
static __always_inline int pa_ctx_user_mode(const __u64 *regs)
{
	return regs[PA_UREG_CS] & 3;
}

/* x86_64's kernel stack: 16 KiB (THREAD_SIZE_ORDER 2) on kernels built without KASAN, which
 * distributions' kernels are. The user registers sit at its top: TOP_OF_KERNEL_STACK_PADDING
 * is 0 on x86_64. */
#define PA_THREAD_SIZE 16384
/* The uapi struct pt_regs of x86_64 (the kernel's has the same layout): 21 words. These are
 * the word indexes the portable build reads. */
#define PA_PT_REGS_BYTES (21 * 8)
#define PA_PTW_BP 4
#define PA_PTW_SI 13
#define PA_PTW_SP 19

/* The portable build's copy of the saved user registers at `regs` (the top of the kernel
 * stack) into `out`; nonzero when a read failed. */
static __always_inline int pa_read_saved_regs(const __u8 *regs, struct pa_user_regs *out)
{
	/* si, di, orig_ax, ip, cs, flags, sp: one read. */
	__u64 w[PA_PTW_SP - PA_PTW_SI + 1];

	if (bpf_probe_read_kernel(&out->fp, 8, regs + PA_PTW_BP * 8) ||
	    bpf_probe_read_kernel(w, sizeof(w), regs + PA_PTW_SI * 8))
		return -1;
	out->arg1 = w[0];
	out->arg0 = w[1];
	out->syscall = w[2];
	out->ip = w[3];
	out->sp = w[6];
	return 0;
}

/* What a thread blocked in system call `nr` with first arguments `a0`, `a1` waits in
 * (PA_WAIT_*), and for a futex its word in `*addr`. x86_64 numbers; the same table as
 * `syscall_wait_class` in agent/src/sampler/off_cpu.rs: change both. */
static __always_inline __u32 pa_syscall_wait(long nr, __u64 a0, __u64 a1, __u64 *addr)
{
	switch (nr) {
	case 35: /* nanosleep */
	case 230: /* clock_nanosleep */
	case 34: /* pause */
		return PA_WAIT_SLEEP;
	case 23: /* select */
	case 270: /* pselect6 */
		return a0 == 0 ? PA_WAIT_SLEEP : PA_WAIT_IO; /* nfds */
	case 7: /* poll */
	case 271: /* ppoll */
		return a1 == 0 ? PA_WAIT_SLEEP : PA_WAIT_IO; /* nfds */
	case 0: /* read */
	case 1: /* write */
	case 17: /* pread64 */
	case 18: /* pwrite64 */
	case 19: /* readv */
	case 20: /* writev */
	case 42: /* connect */
	case 43: /* accept */
	case 44: /* sendto */
	case 45: /* recvfrom */
	case 46: /* sendmsg */
	case 47: /* recvmsg */
	case 208: /* io_getevents */
	case 232: /* epoll_wait */
	case 281: /* epoll_pwait */
	case 288: /* accept4 */
	case 299: /* recvmmsg */
	case 307: /* sendmmsg */
	case 426: /* io_uring_enter */
	case 441: /* epoll_pwait2 */
		return PA_WAIT_IO;
	case 202: /* futex */
	case 449: /* futex_waitv */
		*addr = a0;
		return PA_WAIT_FUTEX;
	}
	return PA_WAIT_OTHER;
}

#endif /* PA_ARCH_X86_BPF_H */
