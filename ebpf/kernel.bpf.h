/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kernel.bpf.h: what the programs read of the kernel, and the facilities that differ between
 * the kernels pyagent supports.
 *
 * The kernel structures are declared with only the fields read; their offsets are relocated
 * against the running kernel's BTF at load (CO-RE), so no vmlinux.h is needed.
 *
 * The object is built twice (agent/build.rs):
 * - the default build uses bpf_get_current_task_btf (5.11), bpf_task_pt_regs (5.15) and, in
 *   the walk, bpf_loop (5.17) with global functions taking pointers (5.12);
 * - PA_PORTABLE (Linux 5.10 and later) reads the current task and its saved user registers
 *   with bpf_probe_read_kernel instead, and walks with bounded loops (walk.bpf.h).
 * The agent probes the helpers at start and loads the build the kernel can run.
 */
#ifndef PA_KERNEL_BPF_H
#define PA_KERNEL_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* struct pt_regs: read here and by the off-CPU program. */
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

struct task_struct {
	int pid;
	int tgid;
	/* The task's state, named __state since 5.14. */
	unsigned int __state;
	/* The bottom of its kernel stack (the portable build finds the user registers from it). */
	void *stack;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

/* Before 5.14 the state was `long state`. */
struct task_struct___pre_5_14 {
	long state;
} __attribute__((preserve_access_index));

/* The user registers a task saved entering the kernel, what the programs use of them: the
 * portable build's copy (the default build reads bpf_task_pt_regs' typed pointer in place). */
struct pa_user_regs {
	__u64 bp;
	__u64 si;
	__u64 di;
	__u64 orig_ax;
	__u64 ip;
	__u64 sp;
};

#ifndef PA_PORTABLE

static __always_inline struct task_struct *pa_current_task(void)
{
	return bpf_get_current_task_btf();
}

static __always_inline __u64 pa_task_fsbase(struct task_struct *task)
{
	return task->thread.fsbase;
}

#else /* PA_PORTABLE */

/* x86_64's kernel stack: 16 KiB (THREAD_SIZE_ORDER 2) on kernels built without KASAN, which
 * distributions' kernels are. The user registers sit at its top: TOP_OF_KERNEL_STACK_PADDING
 * is 0 on x86_64. */
#define PA_THREAD_SIZE 16384
/* The uapi struct pt_regs of x86_64 (the kernel's has the same layout): 21 words. These are
 * the word indexes read. */
#define PA_PT_REGS_WORDS 21
#define PA_PT_BP 4
#define PA_PT_SI 13
#define PA_PT_SP 19

static __always_inline struct task_struct *pa_current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

static __always_inline __u64 pa_task_fsbase(struct task_struct *task)
{
	return BPF_CORE_READ(task, thread.fsbase);
}

/* `task`'s saved user registers; -1 when it has none (a kernel thread). */
static __always_inline int pa_task_user_regs(struct task_struct *task, struct pa_user_regs *out)
{
	/* si, di, orig_ax, ip, cs, flags, sp: one read. */
	__u64 w[PA_PT_SP - PA_PT_SI + 1];
	__u8 *top = BPF_CORE_READ(task, stack);

	if (!top)
		return -1;
	top += PA_THREAD_SIZE - PA_PT_REGS_WORDS * 8;
	if (bpf_probe_read_kernel(&out->bp, 8, top + PA_PT_BP * 8) ||
	    bpf_probe_read_kernel(w, sizeof(w), top + PA_PT_SI * 8))
		return -1;
	out->si = w[0];
	out->di = w[1];
	out->orig_ax = w[2];
	out->ip = w[3];
	out->sp = w[6];
	return 0;
}

#endif /* PA_PORTABLE */

/* Whether `prev`, leaving the CPU in sched_switch, blocks: it is not preempted (a preempted
 * task stays runnable whatever its state says) and its state is not TASK_RUNNING. The state is
 * read from the task on every kernel: the tracepoint's prev_state argument exists only since
 * 5.18, and a task the kernel woke for a pending signal reads TASK_RUNNING here. */
static __always_inline int pa_task_blocks(struct task_struct *prev, int preempt)
{
	if (preempt)
		return 0;
	if (bpf_core_field_exists(prev->__state))
		return BPF_CORE_READ(prev, __state) != 0;
	return BPF_CORE_READ((struct task_struct___pre_5_14 *)prev, state) != 0;
}

#endif /* PA_KERNEL_BPF_H */
