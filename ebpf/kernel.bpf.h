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

/* struct pt_regs, struct thread_struct and what the programs read of them. */
#include "arch.bpf.h"

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

#ifndef PA_PORTABLE

static __always_inline struct task_struct *pa_current_task(void)
{
	return bpf_get_current_task_btf();
}

/* The task's thread pointer (arch.bpf.h): 0 for a kernel thread and right after exec. */
static __always_inline __u64 pa_task_thread_pointer(struct task_struct *task)
{
	return task->PA_TASK_THREAD_POINTER;
}

#else /* PA_PORTABLE */

static __always_inline struct task_struct *pa_current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

static __always_inline __u64 pa_task_thread_pointer(struct task_struct *task)
{
	return BPF_CORE_READ(task, PA_TASK_THREAD_POINTER);
}

/* `task`'s saved user registers; -1 when it has none (a kernel thread). */
static __always_inline int pa_task_user_regs(struct task_struct *task, struct pa_user_regs *out)
{
	__u8 *top = BPF_CORE_READ(task, stack);

	if (!top)
		return -1;
	/* task_pt_regs(): the registers sit at the top of the kernel stack (arch.bpf.h). */
	return pa_read_saved_regs(top + PA_THREAD_SIZE - PA_PT_REGS_BYTES, out);
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
