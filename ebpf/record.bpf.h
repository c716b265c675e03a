// SPDX-License-Identifier: GPL-2.0
/*
 * record.bpf.h: what every program that records a stack shares: the load-time knobs, the search
 * for a thread the agent has not registered, the walk of the interrupted or blocking thread into
 * a pa_samples record (short or long), its GIL flags, span and native stack.
 */
#ifndef PA_RECORD_BPF_H
#define PA_RECORD_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pyagent.h"
#include "maps.bpf.h"
#include "walk.bpf.h"
#include "native.bpf.h"

/* ---- Knobs, set with EbpfLoader::override_global before load ---- */

/* Frames per sample, 1..PA_MAX_FRAMES (other values mean PA_MAX_FRAMES). */
const volatile __u32 pa_max_frames = PA_MAX_FRAMES;
/* Force a consumer wakeup when unconsumed ring-buffer data reaches this many bytes (0: never;
 * userspace then drains on a timer): waking the consumer per record costs more than the record. */
const volatile __u64 pa_wakeup_bytes = 0;

/* Thread states searched at most for a thread the agent has not registered, 0..1024. */
const volatile __u32 pa_thread_search_max = PA_THREAD_SEARCH_MAX;

/* Off-CPU: pa_switch records a tracked thread's stack as it blocks, and its wake-up. Userspace
 * attaches pa_switch only when asked; the knob keeps a stray attach harmless. */
const volatile __u32 pa_off_cpu_on = 0;
/* A wait that repeats the thread's last recorded one is timed, not walked, when it begins
 * less than pa_off_cpu_min_gap_ns after it, or less than pa_off_cpu_max_carry_ns after it from
 * the same place (pyagent.h, pa_off_cpu_threads). */
const volatile __u64 pa_off_cpu_min_gap_ns = 50000000;
const volatile __u64 pa_off_cpu_max_carry_ns = 10000000000ULL;

/* Off-CPU records of GIL waits name the GIL's holder (pa_gil_holder); benchmarks turn it off
 * to measure what it costs. */
const volatile __u32 pa_gil_holder_on = 1;

/* Benchmarks only: return right after stage PA_STAGE_* (0: run everything). */
const volatile __u32 pa_stop_after = 0;

/* The kernel fields the programs read (struct task_struct with its thread pointer for the
 * span, struct pt_regs) are declared in kernel.bpf.h and arch.bpf.h, relocated against the
 * kernel's BTF at load. */

static __always_inline __u32 pa_min(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

/* A tstate field at `off`, inside the window that starts at `lo`. */
static __always_inline int pa_ts_off_ok(__u32 off, __u32 lo)
{
	return off >= lo && pa_ptr_off_ok(off - lo, PA_TSTATE_READ_BYTES);
}

/* The word at byte offset `rel` of the thread-state window (rel checked by pa_ts_off_ok). */
static __always_inline __u64 pa_ts_field(const __u64 *win, __u32 rel)
{
	return pa_word(win, rel, PA_TSTATE_READ_BYTES / 8);
}

/* Ring-buffer flags for a record of `len` bytes: no wakeup (userspace drains on a timer) unless
 * the unconsumed data reaches pa_wakeup_bytes. */
static __always_inline __u64 pa_submit_flags(__u64 len, __u64 *cnt)
{
	if (pa_wakeup_bytes &&
	    bpf_ringbuf_query(&pa_samples, BPF_RB_AVAIL_DATA) + len >= pa_wakeup_bytes) {
		pa_count(cnt, PA_CNT_WAKEUP_FORCED);
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* Counts how the walk ended and returns the record's flags. */
static __always_inline __u32 pa_finish(const struct pa_walk *w, __u64 *cnt)
{
	__u32 flags = w->flags;

	if (!pa_walk_done(w)) {
		flags |= PA_SAMPLE_TRUNCATED;
		pa_count(cnt, PA_CNT_TRUNCATED);
	}
	if (flags & PA_SAMPLE_COMPLETE)
		pa_count(cnt, PA_CNT_COMPLETE);
	if (flags & PA_SAMPLE_ANCHOR_HIT)
		pa_count(cnt, PA_CNT_ANCHOR_HIT);
	if (flags & PA_SAMPLE_CYCLIC)
		pa_count(cnt, PA_CNT_CYCLIC_CHAIN);
	return flags;
}

static __always_inline void pa_count_emitted(__u64 *cnt, __u32 nframes)
{
	pa_count(cnt, PA_CNT_SAMPLES_EMITTED);
	pa_count_add(cnt, PA_CNT_FRAMES, nframes);
}

/* The search of one interpreter's thread list for the thread whose native_thread_id is `want`. */
struct pa_thread_search {
	/* Next thread state to look at (0: end of the list). */
	__u64 tstate;
	/* The one found (0: none yet). */
	__u64 found;
	__u64 want;
	__u32 off_next;
	__u32 off_native_thread_id;
	/* Non-zero: the field above is a pthread_t, whose descriptor holds the tid here. */
	__u32 pthread_tid;
};

/* A loop step: a bpf_loop callback, or in the portable build the body of a bounded loop. */
#ifndef PA_PORTABLE
#define PA_LOOP_STEP static long
#else
#define PA_LOOP_STEP static __always_inline long
#endif

/* Thread states the portable build searches at most (a bounded loop the verifier checks
 * iteration by iteration): a thread further down the list waits for the agent's registration. */
#define PA_PORTABLE_SEARCH_MAX 64

/* One step: compares one thread state and moves to the next. */
PA_LOOP_STEP pa_thread_search_step(__u32 i, void *ctx)
{
	struct pa_thread_search *s = ctx;
	__u64 ts = s->tstate, native = 0, next = 0, in_pthread, keep;
	__u32 tid = 0;

	if (!ts)
		return 1;
	if (bpf_probe_read_user(&native, sizeof(native), (const void *)(ts + s->off_native_thread_id)) ||
	    bpf_probe_read_user(&next, sizeof(next), (const void *)(ts + s->off_next)))
		return 1;
	/* 3.6-3.10 keep no tid in the thread state: the field is a pthread_t, whose descriptor
	 * holds it at pthread_tid. Read and chosen without a branch, which the portable build's
	 * verifier would follow both ways at each step: elsewhere the read is of the tid as an
	 * address, which fails and leaves `tid` 0, and the field's own value is kept. */
	bpf_probe_read_user(&tid, sizeof(tid), (const void *)(native + s->pthread_tid));
	in_pthread = ((__u64)s->pthread_tid + 0xffffffffULL) >> 32;
	keep = in_pthread - 1;
	native = (native & keep) | ((__u64)tid & ~keep);
	if (native == s->want) {
		s->found = ts;
		return 1;
	}
	s->tstate = next;
	return 0;
}

/* The PyThreadState of the current task, a thread of `tgid` that the agent has not registered
 * yet (0: not found). A thread that lives shorter than the agent's refresh would otherwise never
 * be sampled. Runs only for unregistered threads: each step costs two user-memory reads. */
static __always_inline __u64 pa_search_thread(__u32 tgid)
{
	const struct pa_thread_list *l = bpf_map_lookup_elem(&pa_thread_lists, &tgid);
	struct pa_thread_search s = {};
	struct bpf_pidns_info ns = {};
	__u32 max = pa_thread_search_max;

	if (!l || max == 0)
		return 0;
	if (max > 1024)
		max = 1024;
	/* native_thread_id is a tid in the process's own PID namespace. */
	if (bpf_get_ns_current_pid_tgid(l->pidns_dev, l->pidns_ino, &ns, sizeof(ns)))
		return 0;
	if (bpf_probe_read_user(&s.tstate, sizeof(s.tstate), (const void *)l->threads_head_addr))
		return 0;
	s.want = ns.pid;
	s.off_next = l->thread_state_next;
	s.off_native_thread_id = l->thread_state_native_thread_id;
	s.pthread_tid = l->pthread_tid;
#ifndef PA_PORTABLE
	bpf_loop(max, pa_thread_search_step, &s, 0);
#else
	for (__u32 i = 0; i < PA_PORTABLE_SEARCH_MAX; i++) {
		if (i >= max || pa_thread_search_step(i, &s))
			break;
	}
#endif
	return s.found;
}

/* The rest of a record whose header and frames are in this CPU's scratch record `s` (the walk
 * `w` is over): the walk's flags and length, the native section (`native`: its
 * PA_NATIVE_FROM_*, what `native_ctx` is), then the record is output with its exact length.
 * Returns 1 if output. */
static __always_inline int pa_output_scratch(struct pa_walk *w, struct pa_scratch *s,
					     void *native_ctx, int native, __u64 *cnt)
{
	__u32 native_len = 0, n;
	__u64 len;

	s->rec.hdr.nframes = w->n;
	/* Read back from the map: the verifier knows no more of the length than its bound, so the
	 * walks that ended at different depths meet here as one state (the portable build's
	 * bounded walk would otherwise check what follows once per depth). */
	n = *(volatile __u32 *)&s->rec.hdr.nframes;
	/* For the verifier: bounds the record length below. */
	if (n > PA_MAX_FRAMES)
		n = PA_MAX_FRAMES;
	s->rec.hdr.flags = pa_finish(w, cnt);
	s->rec.hdr.nframes = n;
	len = sizeof(struct pa_sample_hdr) + (__u64)n * sizeof(struct pa_frame);
	if (native)
		native_len = pa_native_section(native_ctx, native, s, (__u32)len, cnt);
	if (native_len) {
		s->rec.hdr.flags |= PA_SAMPLE_NATIVE;
		len += native_len;
	}
	/* For the verifier: the output stays inside the scratch value (the barrier makes the
	 * bounded register the one passed: older verifiers do not carry a bound to its copies). */
	asm volatile("" : "+r"(len));
	if (len > sizeof(struct pa_scratch))
		return 0;
	if (bpf_ringbuf_output(&pa_samples, &s->rec, len, pa_submit_flags(len, cnt))) {
		pa_count(cnt, PA_CNT_RINGBUF_DROPPED);
		return 0;
	}
	pa_count_emitted(cnt, n);
	return 1;
}

/* This CPU's scratch record (NULL, counted, if the map is broken). */
static __always_inline struct pa_scratch *pa_scratch_here(__u32 cpu, __u64 *cnt)
{
	struct pa_scratch *s = bpf_map_lookup_elem(&pa_scratch, &cpu);

	if (!s)
		pa_count(cnt, PA_CNT_NO_SCRATCH);
	return s;
}

#ifndef PA_PORTABLE

/* To the verifier a run of frames may start at the last frame slot (pa_walk_step): it ends
 * inside the native area. */
_Static_assert(sizeof(struct pa_scratch) >=
		       sizeof(struct pa_record) + sizeof(struct pa_frame_run) - sizeof(struct pa_frame),
	       "a run of frames from the last slot stays inside the scratch record");

/* A walk longer than a short record, or one that gets a native section: the frames so far move
 * to this CPU's scratch record, the walk goes on there, and pa_output_scratch ends it. Returns
 * 1 if output. */
static __always_inline int pa_walk_long(struct pa_walk *w, struct pa_short_record *r,
					struct pa_frame_window *fw, __u32 max, void *native_ctx,
					int native, __u64 *cnt)
{
	struct pa_scratch *s = pa_scratch_here(r->hdr.cpu, cnt);
	struct pa_walk_loop loop = { .w = w, .max = max };

	if (!s) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		return 0;
	}
	__builtin_memcpy(&s->rec, r, sizeof(*r));
	bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
	loop.s = s;
	/* This CPU's window, looked up once per record by pa_record_stack. */
	loop.win = fw;
	/* Called even when the walk is over (a native record of a short walk: the step returns at
	 * once). Only the knob decides: a reachable bpf_loop whose count the verifier knows to be 0
	 * (or too large) leaves its callback unverified, and 6.18's verifier then fails with "No
	 * program to jit"; a call it can prove dead is removed together with the callback. */
	if (max > PA_SHORT_FRAMES)
		bpf_loop((max - 1) / PA_SHORT_FRAMES, pa_walk_step, &loop, 0);
	return pa_output_scratch(w, s, native_ctx, native, cnt);
}

#endif /* PA_PORTABLE */

/* What an off-CPU record adds to the header: PA_WAIT_*, the futex word and the thread's
 * running total of unrecorded waits (pa_off_cpu_threads.carried_ns; all 0 on-CPU). */
struct pa_wait_info {
	__u32 flags;
	__u32 wait;
	__u64 wait_addr;
	__u64 carried_ns;
};

/* PA_SAMPLE_GIL_* bits for thread state `ts` of process `p`: whether it holds the GIL now.
 * 0 (unknown) on a free-threaded build or when the read fails. */
static __always_inline __u32 pa_gil_flags(const struct pa_proc *p, __u64 ts)
{
	__u64 pair[2] = {};
	__u64 holder = 0;
	__u32 locked = 0;

	switch (p->gil_model) {
	case PA_GIL_HOLDER:
		if (p->gil_locked_addr == p->gil_holder_addr + 8) {
			/* Every supported version keeps last_holder right before locked: one read. */
			if (bpf_probe_read_user(pair, sizeof(pair), (const void *)p->gil_holder_addr))
				return 0;
			holder = pair[0];
			locked = (__u32)pair[1];
		} else if (bpf_probe_read_user(&locked, sizeof(locked),
					       (const void *)p->gil_locked_addr) ||
			   bpf_probe_read_user(&holder, sizeof(holder),
					       (const void *)p->gil_holder_addr)) {
			return 0;
		}
		/* -1: not created yet (3.6 creates it with a second thread); no GIL to hold. */
		if ((__s32)locked < 0)
			return 0;
		return PA_SAMPLE_GIL_KNOWN | (locked && holder == ts ? PA_SAMPLE_GIL_HELD : 0);
	case PA_GIL_THREAD_FLAG:
		if (bpf_probe_read_user(&locked, sizeof(locked),
					(const void *)(ts + p->thread_state_holds_gil)))
			return 0;
		return PA_SAMPLE_GIL_KNOWN | (locked ? PA_SAMPLE_GIL_HELD : 0);
	}
	return 0;
}

/* Whether an off-CPU wait `why` of a thread of `p` is on the GIL's futex (a futex word within
 * the GIL's state). */
static __always_inline int pa_waits_on_gil(const struct pa_proc *p, const struct pa_wait_info *why)
{
	__u64 waits_addr = p->gil_waits_addr;

	return (why->flags & PA_SAMPLE_OFF_CPU) && why->wait == PA_WAIT_FUTEX && waits_addr &&
	       p->gil_locked_addr && p->gil_holder_addr && why->wait_addr >= waits_addr &&
	       why->wait_addr < waits_addr + PA_GIL_WAIT_BYTES;
}

/* For an off-CPU record of thread state `ts` blocked on the GIL's futex while another thread
 * holds the GIL: that thread state, and the code object its current frame runs, into `h`
 * (left 0 otherwise). Read at the switch, as the wait begins: who the thread waits for then.
 * Costs nothing for other waits but the range check. */
static __always_inline void pa_gil_holder(const struct pa_proc *p, __u64 ts,
					  const struct pa_wait_info *why, struct pa_sample_hdr *h)
{
	__u64 locked_addr = p->gil_locked_addr;
	__u64 pair[2] = {};
	__u64 holder = 0, frame = 0, code = 0;
	__u32 locked = 0;

	if (!pa_gil_holder_on || !pa_waits_on_gil(p, why))
		return;
	if (locked_addr == p->gil_holder_addr + 8) {
		if (bpf_probe_read_user(pair, sizeof(pair), (const void *)p->gil_holder_addr))
			return;
		holder = pair[0];
		locked = (__u32)pair[1];
	} else if (bpf_probe_read_user(&locked, sizeof(locked), (const void *)locked_addr) ||
		   bpf_probe_read_user(&holder, sizeof(holder), (const void *)p->gil_holder_addr)) {
		return;
	}
	if (!locked || !holder || holder == ts)
		return;
	h->gil_holder = holder;
	if (bpf_probe_read_user(&frame, sizeof(frame),
				(const void *)(holder + p->thread_state_current_frame)))
		return;
	if ((p->flags & PA_PROC_CFRAME) && frame &&
	    bpf_probe_read_user(&frame, sizeof(frame),
				(const void *)(frame + p->cframe_current_frame)))
		return;
	if (!frame || bpf_probe_read_user(&code, sizeof(code),
					  (const void *)(frame + p->interpreter_frame_executable)))
		return;
	h->gil_holder_code = code & ~p->executable_tag_mask;
}

/* The coroutine frame of the asyncio task thread state `ts` of `p` runs (3.14+, once the
 * agent told where its running-task pointer is), into `h`: PA_SAMPLE_TASK when there is one,
 * with PA_SAMPLE_TASK_AWAITED when something awaits the task. Three reads of 8 bytes, only for
 * processes with task-aware stacks. The agent reads the task's chain later, at the drain; a
 * task that ended by then (a server's request lives a few ms) is still known to have run,
 * which of the record's frames is its coroutine's, and whether it was a root task. */
static __always_inline __u32 pa_running_task(const struct pa_proc *p, __u64 ts,
					     struct pa_sample_hdr *h)
{
	__u32 off = p->thread_state_running_task;
	__u64 task = 0, coro = 0, awaited = 0;

	if (!off || bpf_probe_read_user(&task, sizeof(task), (const void *)(ts + off)) || !task ||
	    bpf_probe_read_user(&coro, sizeof(coro), (const void *)(task + p->task_coro)) || !coro ||
	    bpf_probe_read_user(&awaited, sizeof(awaited),
				(const void *)(task + p->task_awaited_by)))
		return 0;
	/* The low two bits may be a tag, as in any object pointer the agent reads. */
	h->task_frame = (coro & ~3ull) + p->coroutine_iframe;
	return PA_SAMPLE_TASK | ((awaited & ~3ull) ? PA_SAMPLE_TASK_AWAITED : 0);
}

/* Most DTV entries believed: a torn or foreign DTV reads as "no context", not a huge index. */
#define PA_MAX_DTV_ENTRIES (1u << 20)

/* The address of the current thread's otel_thread_ctx_v1, found as `o` says (0: the thread has
 * no copy of it yet); -1 when a read failed. The thread pointer is the one the task saved
 * (x86_64: its FS base, which is its pthread_t; aarch64: TPIDR_EL0), which glibc sets once per
 * thread (clone's CLONE_SETTLS; for the main thread arch_prctl on x86_64): exact for the
 * interrupted thread, with no read of its memory. */
static __always_inline long pa_tls_variable(const struct pa_otel_ctx *o)
{
	__u64 tp = pa_task_thread_pointer(pa_current_task()), dtv = 0, entries = 0, block = 0;
	__u64 size = o->dtv_entry_size;

	if (!tp)
		return 0;
	/* Static TLS below (x86_64) or above (aarch64) the thread pointer: arch.bpf.h. */
	if (o->static_offset)
		return PA_TLS_STATIC(tp, o->static_offset) + o->offset_in_block;
	if (bpf_probe_read_user(&dtv, sizeof(dtv),
				(const void *)PA_TLS_DTV_PTR(tp, o->dtv_in_pthread)) ||
	    bpf_probe_read_user(&entries, sizeof(entries), (const void *)(dtv - size)))
		return -1;
	/* dtv[-1] counts the entries: a thread that never touched a module loaded after it
	 * started has a shorter DTV, and nothing published. */
	if (o->module_id > entries || o->module_id > PA_MAX_DTV_ENTRIES)
		return 0;
	if (bpf_probe_read_user(&block, sizeof(block),
				(const void *)(dtv + o->module_id * size + o->pointer_in_entry)))
		return -1;
	/* 0 or -1 (TLS_DTV_UNALLOCATED): no block for the module in this thread yet. */
	if (block == 0 || block == (__u64)-1)
		return 0;
	return block + o->offset_in_block;
}

/* The trace and span the current thread of `p` is in, into `h` (PA_SAMPLE_SPAN, or nothing):
 * its otel_thread_ctx_v1 points to the OTEP 4947 record, used only when marked valid. The
 * record's first 25 bytes (trace id, span id, valid) come in one read: the same one call as the
 * span id alone, 16 bytes longer. The thread is interrupted, so a writer cannot change the
 * record under this read. */
static __always_inline void pa_read_span(const struct pa_proc *p, struct pa_sample_hdr *h,
					 __u64 *cnt)
{
	__u8 buf[PA_OTEL_READ_BYTES];
	__u64 record = 0;
	long var;

	if (!(p->flags & PA_PROC_TRACE_CONTEXT))
		return;
	var = pa_tls_variable(&p->otel);
	if (var == -1)
		goto fail;
	if (!var)
		return;
	if (bpf_probe_read_user(&record, sizeof(record), (const void *)var))
		goto fail;
	if (!record)
		return;
	if (bpf_probe_read_user(buf, sizeof(buf), (const void *)record))
		goto fail;
	if (buf[PA_OTEL_VALID_OFFSET] != 1)
		return;
	__builtin_memcpy(h->trace_id, buf, sizeof(h->trace_id));
	__builtin_memcpy(h->span_id, buf + PA_OTEL_SPAN_ID_OFFSET, sizeof(h->span_id));
	h->flags |= PA_SAMPLE_SPAN;
	return;
fail:
	pa_count(cnt, PA_CNT_SPAN_READ_FAIL);
}

/* Walks the current task's Python stack (a thread of tracked process `p`) into a record, with
 * a native section if the process wants one (`native_ctx`: the program's context, `native_from`
 * what it is, PA_NATIVE_FROM_*). Returns 1 if a record was written. */
static __always_inline int pa_record_stack(const struct pa_proc *p, __u32 tgid, __u32 tid,
					   const struct pa_wait_info *why, void *native_ctx,
					   int native_from, __u64 *cnt)
{
	__u32 flags, lo, max, cpu = bpf_get_smp_processor_id();
	int native;
	struct pa_sample_hdr *h;
	const __u64 *tsp;
	__u64 ts, cur;
	/* The thread state is read into this CPU's window, not the stack: 5.10's verifier refuses
	 * reads of the stack at a variable offset, and the off-CPU program's walk needs the stack
	 * (512 bytes across its calls). */
	__u32 zero = 0;
	struct pa_frame_window *fw = bpf_map_lookup_elem(&pa_frame_windows, &zero);
	__u64 *win;
	struct pa_walk *w;
#ifndef PA_PORTABLE
	struct pa_short_record *r;
#else
	struct pa_scratch *s;
#endif

	if (!fw)
		return 0;
	win = (__u64 *)fw->bytes;
	/* The walk's state lives beside the window, not on the stack, for the same two reasons;
	 * and to the verifier it is then only bounds, so the portable build's walks that end at
	 * different depths meet as one state, checked once. */
	w = &fw->walk;
	__builtin_memset(w, 0, sizeof(*w));

	tsp = pa_find_thread(tid);
	if (tsp && !*tsp) {
		/* Registered as running no Python. */
		pa_count(cnt, PA_CNT_NO_THREAD_STATE);
		return 0;
	}
	if (tsp) {
		ts = *tsp;
	} else {
		/* A thread the agent has not seen yet: it re-reads this process's thread list when
		 * told, and until then the program finds the thread state itself. */
		pa_notice(tgid, PA_NOTICE_UNKNOWN_THREAD);
		ts = pa_search_thread(tgid);
		if (!ts) {
			pa_count(cnt, PA_CNT_THREAD_UNKNOWN);
			return 0;
		}
		pa_count(cnt, PA_CNT_THREAD_FOUND);
	}

	if (pa_stop_after == PA_STAGE_THREAD)
		return 0;

	/* One read of the thread state covers current_frame (or cframe), base_frame and the
	 * anchor pair: 3.15 keeps them at 72..104. */
	flags = p->flags;
	lo = p->thread_state_current_frame;
	if (flags & PA_PROC_ANCHOR)
		lo = pa_min(lo, pa_min(p->thread_state_last_profiled_frame,
				       p->thread_state_last_profiled_frame_seq));
	if (flags & PA_PROC_BASE_FRAME)
		lo = pa_min(lo, p->thread_state_base_frame);
	w->off_previous = p->interpreter_frame_previous;
	w->off_executable = p->interpreter_frame_executable;
	w->off_instr_ptr = p->interpreter_frame_instr_ptr;
	w->off_owner = p->interpreter_frame_owner;
	/* Without a branch: the verifier would walk the whole program once for each value. */
	w->read_len = PA_FRAME_READ_BYTES + ((flags / PA_PROC_FRAME_OBJECTS) & 1) *
						    (PA_FRAME_OBJECT_READ_BYTES - PA_FRAME_READ_BYTES);
	if (!pa_ts_off_ok(p->thread_state_current_frame, lo) ||
	    ((flags & PA_PROC_ANCHOR) &&
	     (!pa_ts_off_ok(p->thread_state_last_profiled_frame, lo) ||
	      !pa_ts_off_ok(p->thread_state_last_profiled_frame_seq, lo))) ||
	    ((flags & PA_PROC_BASE_FRAME) && !pa_ts_off_ok(p->thread_state_base_frame, lo)) ||
	    !pa_frame_offsets_ok(w)) {
		pa_count(cnt, PA_CNT_BAD_CONFIG);
		return 0;
	}
	if (bpf_probe_read_user(win, PA_TSTATE_READ_BYTES, (const void *)(ts + lo))) {
		pa_count(cnt, PA_CNT_READ_FAIL_TSTATE);
		return 0;
	}
	cur = pa_ts_field(win, p->thread_state_current_frame - lo);
	if (flags & PA_PROC_CFRAME) {
		/* 3.11/3.12: tstate->cframe->current_frame. */
		if (cur && bpf_probe_read_user(&cur, sizeof(cur),
					       (const void *)(cur + p->cframe_current_frame))) {
			pa_count(cnt, PA_CNT_READ_FAIL_CFRAME);
			return 0;
		}
	}
	if (!cur) {
		pa_count(cnt, PA_CNT_NO_CURRENT_FRAME);
		return 0;
	}

	if (pa_stop_after == PA_STAGE_THREAD_STATE)
		return 0;
#ifndef PA_PORTABLE
	/* A short walk is written straight into the ring buffer. */
	r = bpf_ringbuf_reserve(&pa_samples, sizeof(*r), 0);
	if (!r) {
		pa_count(cnt, PA_CNT_RINGBUF_DROPPED);
		return 0;
	}
	h = &r->hdr;
#define PA_ABANDON() bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP)
#else
	/* Every walk is written into the scratch record, then output with its length. */
	s = pa_scratch_here(cpu, cnt);
	if (!s)
		return 0;
	h = &s->rec.hdr;
#define PA_ABANDON() ((void)0)
#endif
	h->pid = tgid;
	h->tid = tid;
	h->tstate = ts;
	h->generation = p->generation;
	h->anchor_frame = 0;
	h->anchor_seq = 0;
	h->base_frame = 0;
	h->cpu = cpu;
	h->wait = why->wait;
	h->time_ns = bpf_ktime_get_ns();
	h->wait_addr = why->wait_addr;
	h->carried_ns = why->carried_ns;
	h->flags = 0;
	h->gil_holder = 0;
	h->gil_holder_code = 0;
	h->task_frame = 0;
	__builtin_memset(h->trace_id, 0, sizeof(h->trace_id));
	__builtin_memset(h->span_id, 0, sizeof(h->span_id));
	if (flags & PA_PROC_ANCHOR) {
		h->anchor_frame = pa_ts_field(win, p->thread_state_last_profiled_frame - lo);
		h->anchor_seq = pa_ts_field(win, p->thread_state_last_profiled_frame_seq - lo);
	}
	if (flags & PA_PROC_BASE_FRAME)
		h->base_frame = pa_ts_field(win, p->thread_state_base_frame - lo);

	if (pa_stop_after == PA_STAGE_RESERVED) {
		PA_ABANDON();
		return 0;
	}
	pa_read_span(p, h, cnt);
	if (pa_stop_after == PA_STAGE_SPAN) {
		PA_ABANDON();
		return 0;
	}
	w->flags = why->flags | pa_gil_flags(p, ts) | pa_running_task(p, ts, h) | h->flags;
	pa_gil_holder(p, ts, why, h);
	w->frame = cur;
	w->anchor = h->anchor_frame;
	w->base = h->base_frame;
	w->tag_mask = p->executable_tag_mask;
	w->entry_before_owner = !!(flags & PA_PROC_IS_ENTRY);
	max = pa_max_frames;
	if (max == 0 || max > PA_MAX_FRAMES)
		max = PA_MAX_FRAMES;
	/* A native section makes the record long whatever its depth. (A flag, not a pointer set
	 * to NULL: clang turns that into masking the pointer, which the verifier refuses.) */
	native = (flags & PA_PROC_NATIVE) ? native_from : 0;
#ifndef PA_PORTABLE
	pa_walk_short(w, (struct pa_frame_run *)r->frames, max);
	if (pa_stop_after == PA_STAGE_SHORT_WALK) {
		PA_ABANDON();
		return 0;
	}
	if ((!pa_walk_done(w) && w->n < max) || native)
		return pa_walk_long(w, r, fw, max, native_ctx, native, cnt);

	r->hdr.flags = pa_finish(w, cnt);
	r->hdr.nframes = w->n;
	bpf_ringbuf_submit(r, pa_submit_flags(sizeof(*r), cnt));
	pa_count_emitted(cnt, w->n);
	return 1;
#else
	pa_walk_portable(w, s, win, max);
	if (pa_stop_after == PA_STAGE_SHORT_WALK)
		return 0;
	return pa_output_scratch(w, s, native_ctx, native, cnt);
#endif
#undef PA_ABANDON
}

#endif /* PA_RECORD_BPF_H */
