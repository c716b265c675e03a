// SPDX-License-Identifier: GPL-2.0
/*
 * tasks.bpf.c: processes' lives as notices for the agent: every execve, a tracked process's
 * forks, and its threads' exits (the main one's told apart).
 */
#include "record.bpf.h"

/* Every execve on the host: the agent re-classifies the process (a shell that became Python, a
 * Python that became something else) instead of re-reading /proc for every process. A raw
 * tracepoint: it attaches by name, with no tracefs mounted. */
SEC("raw_tracepoint/sched_process_exec")
int pa_exec(void *ctx)
{
	pa_notice(bpf_get_current_pid_tgid() >> 32, PA_NOTICE_EXEC);
	return 0;
}

/* Every fork on the host (threads too: same tgid, ignored); runs in the parent. A tracked
 * process's new child is noticed, so that a worker forked without exec is found without
 * listing /proc. The child's tgid is a CO-RE read of the task_struct the tracepoint passes. */
SEC("raw_tracepoint/sched_process_fork")
int pa_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	int child_tgid = 0;

	if (!pa_find_proc(parent))
		return 0;
	if (bpf_probe_read_kernel(&child_tgid, sizeof(child_tgid), &child->tgid) ||
	    child_tgid <= 0 || (__u32)child_tgid == parent)
		return 0;
	pa_notice((__u32)child_tgid, PA_NOTICE_FORK);
	return 0;
}

/* Every task's exit on the host: a tracked process's main thread exiting is noticed (its last
 * thread may still run: the agent checks, and its periodic /proc pass covers the rest), and so
 * is any other of its threads exiting (the agent drops the thread's stale entry). */
SEC("raw_tracepoint/sched_process_exit")
int pa_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	if (!pa_find_proc(tgid))
		return 0;
	pa_notice(tgid, (__u32)id == tgid ? PA_NOTICE_EXIT : PA_NOTICE_THREAD_EXIT);
	return 0;
}
