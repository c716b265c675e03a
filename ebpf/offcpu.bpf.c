// SPDX-License-Identifier: GPL-2.0
/*
 * offcpu.bpf.c: on every context switch, a tracked thread that blocks gets its stack recorded
 * with why it waits, and its wake-up when it runs again (attached with --off-cpu only).
 */
#include "record.bpf.h"

/* The kernel fields the off-CPU program reads (struct task_struct, struct pt_regs) are declared
 * in kernel.bpf.h and arch.bpf.h: their offsets are relocated against the running kernel's BTF
 * at load (CO-RE), so no vmlinux.h is needed. */

/* What `task`, which is blocking, waits in: the system call it is in (the user registers saved
 * at its entry: its number and first two arguments; the table is the architecture's,
 * arch.bpf.h). */
static __always_inline void pa_classify_wait(struct task_struct *task, struct pa_wait_info *why)
{
#ifndef PA_PORTABLE
	/* The typed pointer, read in place: a copy would take stack the off-CPU program's walk
	 * needs (512 bytes across its calls). */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

	why->wait = PA_WAIT_OTHER;
	if (!regs)
		return;
	why->wait = pa_syscall_wait(PA_PT_SYSCALL(regs), PA_PT_ARG0(regs), PA_PT_ARG1(regs),
				    &why->wait_addr);
#else
	struct pa_user_regs r;

	why->wait = PA_WAIT_OTHER;
	if (pa_task_user_regs(task, &r))
		return;
	why->wait = pa_syscall_wait(r.syscall, r.arg0, r.arg1, &why->wait_addr);
#endif
}

/* The off-CPU state of thread `tid` of `tgid`, created (or reset, for a reused tid) if needed;
 * NULL when the map is full. */
static __always_inline struct pa_off_cpu_thread *pa_off_cpu_state(__u32 tid, __u32 tgid, __u64 *cnt)
{
	struct pa_off_cpu_thread *t = bpf_map_lookup_elem(&pa_off_cpu_threads, &tid);
	struct pa_off_cpu_thread fresh = { .tgid = tgid };

	if (t && t->tgid == tgid)
		return t;
	if (bpf_map_update_elem(&pa_off_cpu_threads, &tid, &fresh, BPF_ANY)) {
		pa_count(cnt, PA_CNT_OFF_CPU_MAP_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&pa_off_cpu_threads, &tid);
}

/* One step of the place digest: `x` folded into `h` (a multiply-xorshift mix: a frame address
 * and a code address that differ by a few bits do not cancel out). */
static __always_inline __u64 pa_place_mix(__u64 h, __u64 x)
{
	h = (h ^ x) * 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 29);
}

/* Where thread `tid` of `p`, which is blocking, waits from, as a digest that is never 0 (0:
 * cannot tell): its top Python frame and that frame's caller, each by its address, its code
 * object and its instruction, and the span it is in. A wait that repeats the last recorded one
 * from the same place (in a loop, most often) is timed, not walked (pa_switch_out). Two or
 * three reads (four on 3.11 and 3.12: the cframe), and the span's for a process that publishes
 * one; the frames are read into this CPU's frame window, which the walk reuses after. */
static __always_inline __u64 pa_wait_place(const struct pa_proc *p, __u32 tid, __u64 *cnt)
{
	__u32 zero = 0, oe = p->interpreter_frame_executable, oi = p->interpreter_frame_instr_ptr,
	      op = p->interpreter_frame_previous;
	struct pa_frame_window *fw = bpf_map_lookup_elem(&pa_frame_windows, &zero);
	const __u64 *tsp = pa_find_thread(tid);
	__u64 h = 0x243f6a8885a308d3ULL, frame = 0;
	__u64 *win;

	/* Each frame is read as far as a frame object needs, whatever the process (see
	 * pa_walk_step_portable): one length, one path for the verifier. */
	if (!fw || !tsp || !*tsp || !pa_ptr_off_ok(oe, PA_FRAME_OBJECT_READ_BYTES) ||
	    !pa_ptr_off_ok(oi, PA_FRAME_OBJECT_READ_BYTES) ||
	    !pa_ptr_off_ok(op, PA_FRAME_OBJECT_READ_BYTES))
		return 0;
	if (bpf_probe_read_user(&frame, sizeof(frame),
				(const void *)(*tsp + p->thread_state_current_frame)))
		return 0;
	if ((p->flags & PA_PROC_CFRAME) && frame &&
	    bpf_probe_read_user(&frame, sizeof(frame),
				(const void *)(frame + p->cframe_current_frame)))
		return 0;
	if (!frame)
		return 0;
	win = (__u64 *)fw->bytes;
	/* The top frame, then its caller (when there is one). */
	for (int level = 0; level < 2 && frame; level++) {
		if (bpf_probe_read_user(win, PA_FRAME_OBJECT_READ_BYTES, (const void *)frame))
			return 0;
		h = pa_place_mix(h, frame);
		h = pa_place_mix(h, pa_word(win, oe, PA_FRAME_OBJECT_READ_BYTES / 8));
		h = pa_place_mix(h, pa_word(win, oi, PA_FRAME_OBJECT_READ_BYTES / 8));
		frame = pa_word(win, op, PA_FRAME_OBJECT_READ_BYTES / 8);
	}
	if (p->flags & PA_PROC_TRACE_CONTEXT) {
		/* The span, through a header in the window past the frames (the record's own is
		 * not reserved yet). */
		struct pa_sample_hdr *sh = (struct pa_sample_hdr *)(fw->bytes + PA_FRAME_READ_BYTES);
		__u64 span = 0;

		sh->flags = 0;
		/* Uncounted: a failed read here is counted by the record's own read, if walked. */
		pa_read_span(p, sh, NULL);
		if (sh->flags & PA_SAMPLE_SPAN)
			__builtin_memcpy(&span, sh->span_id, sizeof(span));
		h = pa_place_mix(h, span);
	}
	return h | 1;
}

/* The thread leaving the CPU (the current task) blocks: record its stack, or only time the
 * wait when it repeats its last recorded one (pyagent.h, pa_off_cpu_threads). */
static __always_inline void pa_switch_out(void *ctx, struct task_struct *prev, __u64 *cnt)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct pa_wait_info why = { .flags = PA_SAMPLE_OFF_CPU };
	struct pa_off_cpu_thread *t;
	const struct pa_proc *p;
	__u64 now, age, place;
	int same_wait;

	if (tid == 0)
		return;
	p = pa_find_proc(tgid);
	if (!p)
		return;
	t = pa_off_cpu_state(tid, tgid, cnt);
	if (!t)
		return;
	now = bpf_ktime_get_ns();
	pa_classify_wait(prev, &why);
	age = now - t->last_recorded_ns;
	same_wait = t->last_recorded_ns && why.wait == t->last_wait &&
		    why.wait_addr == t->last_wait_addr;
	if (same_wait && age < pa_off_cpu_min_gap_ns)
		goto carry;
	/* Not a wait for the GIL: its record names the holder, who changes more often than the
	 * waiter's place. */
	place = pa_waits_on_gil(p, &why) ? 0 : pa_wait_place(p, tid, cnt);
	if (same_wait && place && place == t->last_place && age < pa_off_cpu_max_carry_ns)
		goto carry;
	why.carried_ns = t->carried_ns;
	/* With native stacks, the user registers are the ones the thread saved entering the
	 * kernel, and the kernel stack is the switch's own. */
	if (!pa_record_stack(p, tgid, tid, &why, ctx, PA_NATIVE_FROM_SWITCH, cnt))
		return;
	pa_count(cnt, PA_CNT_OFF_CPU_WALKS);
	t->blocked_ns = 0;
	t->last_recorded_ns = now;
	t->last_wait = why.wait;
	t->last_wait_addr = why.wait_addr;
	t->last_place = place;
	t->flags |= PA_OFF_CPU_RECORDED;
	return;
carry:
	/* Timed, counted under the last recorded stack. */
	t->blocked_ns = now;
	pa_count(cnt, PA_CNT_OFF_CPU_CARRIED);
}

/* The thread leaving the CPU stays runnable (preempted, or yielding): it waits for a CPU from
 * now. Timed only, never a record: preemptions are frequent. Its next on-CPU record carries
 * the time (pa_sample_hdr.carried_ns). */
static __always_inline void pa_switch_preempted(__u64 *cnt)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct pa_off_cpu_thread *t;

	if (tid == 0 || !pa_find_proc(tgid))
		return;
	t = pa_off_cpu_state(tid, tgid, cnt);
	if (t)
		t->queued_since_ns = bpf_ktime_get_ns();
}

/* The thread taking the CPU: the end of its wait. A recorded wait's end is recorded; an
 * unrecorded one's time is carried; a wait for a CPU is added up. */
static __always_inline void pa_switch_in(struct task_struct *next, __u64 *cnt)
{
	__u32 tid = next->pid;
	struct pa_sample_hdr *h;
	struct pa_off_cpu_thread *t = bpf_map_lookup_elem(&pa_off_cpu_threads, &tid);

	if (!t)
		return;
	if (t->queued_since_ns) {
		t->queued_ns += bpf_ktime_get_ns() - t->queued_since_ns;
		t->queued_since_ns = 0;
	}
	if (t->blocked_ns) {
		__u64 began = t->blocked_ns;

		/* Userspace may copy the entry while this runs: it reads it until two copies agree
		 * (a copy with the new total and the old start would count the wait twice). */
		*(volatile __u64 *)&t->blocked_ns = 0;
		asm volatile("" ::: "memory");
		*(volatile __u64 *)&t->carried_ns = t->carried_ns + bpf_ktime_get_ns() - began;
	}
	if (!(t->flags & PA_OFF_CPU_RECORDED))
		return;
	t->flags &= ~PA_OFF_CPU_RECORDED;
	/* Written in place in the ring: a header on the stack would take room the switch-out
	 * walk needs (6.1 allows 512 bytes across its calls). */
	h = bpf_ringbuf_reserve(&pa_samples, sizeof(*h), 0);
	if (!h) {
		pa_count(cnt, PA_CNT_RINGBUF_DROPPED);
		return;
	}
	__builtin_memset(h, 0, sizeof(*h));
	h->pid = t->tgid;
	h->tid = tid;
	h->cpu = bpf_get_smp_processor_id();
	h->flags = PA_SAMPLE_WAKE;
	h->time_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(h, pa_submit_flags(sizeof(*h), cnt));
	pa_count(cnt, PA_CNT_WAKES);
}

/* Every context switch on the host (tp_btf: typed arguments, no tracefs). A thread that blocks
 * (pa_task_blocks: preemption is not waiting) gets its stack recorded, and its
 * wake-up when it is switched in again; userspace weighs the stack by the time in between. A
 * thread preempted is timed until it runs again.
 * Cost for a task the agent does not track: two map lookups. */
SEC("tp_btf/sched_switch")
int pa_switch(__u64 *ctx)
{
	int preempt = (__u8)ctx[0];
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u64 *cnt;

	if (!pa_off_cpu_on)
		return 0;
	cnt = pa_counters_here();
	pa_count(cnt, PA_CNT_SWITCHES);
	if (pa_task_blocks(prev, preempt))
		pa_switch_out(ctx, prev, cnt);
	else
		pa_switch_preempted(cnt);
	pa_switch_in(next, cnt);
	return 0;
}
