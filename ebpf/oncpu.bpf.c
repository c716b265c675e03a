// SPDX-License-Identifier: GPL-2.0
/*
 * oncpu.bpf.c: on each cpu-clock tick, record the CPython frame chain of the interrupted
 * thread, if userspace tracks its process and thread.
 */
#include "record.bpf.h"

SEC("perf_event")
int pa_sample(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct pa_wait_info on_cpu = {};
	struct pa_off_cpu_thread *t = NULL;
	const struct pa_proc *p;
	__u64 *cnt;

	if (pa_stop_after == PA_STAGE_ENTERED)
		return 0;
	cnt = pa_counters_here();
	pa_count(cnt, PA_CNT_RUNS);
	if (pa_stop_after == PA_STAGE_COUNTED)
		return 0;
	if (tid == 0) {
		pa_count(cnt, PA_CNT_IDLE);
		return 0;
	}
	p = pa_find_proc(tgid);
	if (!p) {
		pa_count(cnt, PA_CNT_NOT_TRACKED);
		return 0;
	}
	if (pa_stop_after == PA_STAGE_PROCESS)
		return 0;
	/* With off-CPU on, the record carries the thread's run-queue time since its last one
	 * (pa_switch_preempted), taken off only once the record is out. */
	if (pa_off_cpu_on) {
		t = bpf_map_lookup_elem(&pa_off_cpu_threads, &tid);
		if (t && t->tgid == tgid)
			on_cpu.carried_ns = t->queued_ns;
	}
	if (pa_record_stack(p, tgid, tid, &on_cpu, ctx, PA_NATIVE_FROM_TICK, cnt) && t &&
	    on_cpu.carried_ns)
		t->queued_ns -= on_cpu.carried_ns;
	return 0;
}
