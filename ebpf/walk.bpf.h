/* SPDX-License-Identifier: GPL-2.0 */
/*
 * walk.bpf.h: one step of the _PyInterpreterFrame chain walk, run by bpf_loop.
 *
 * Each step reads the first PA_FRAME_READ_BYTES of one frame with a single bpf_probe_read_user,
 * records (address, executable & ~tag mask, instr_ptr, owner) and moves to `previous`.
 */
#ifndef PA_WALK_BPF_H
#define PA_WALK_BPF_H

#include "maps.bpf.h"

_Static_assert((PA_MAX_FRAMES & (PA_MAX_FRAMES - 1)) == 0, "PA_MAX_FRAMES is a power of two");

/* The walk's state, on the program's stack; bpf_loop hands a pointer to each step. Offsets are
 * checked against the read window before the walk (pa_frame_offsets_ok). */
struct pa_walk {
	struct pa_scratch *s;
	/* Next frame to read. */
	__u64 frame;
	/* Stop after recording this frame (0: no anchor). */
	__u64 anchor;
	/* Report PA_SAMPLE_REACHED_BASE when the last frame is this one (0: unknown). */
	__u64 base;
	__u64 tag_mask;
	__u32 off_previous;
	__u32 off_executable;
	__u32 off_instr_ptr;
	__u32 off_owner;
	/* Frames recorded so far. */
	__u32 n;
	/* PA_SAMPLE_* */
	__u32 flags;
};

/* A pointer field: 8-byte aligned, wholly inside the frame window. */
static __always_inline int pa_ptr_off_ok(__u32 off, __u32 window)
{
	return (off & 7) == 0 && off <= window - 8;
}

static __always_inline int pa_frame_offsets_ok(const struct pa_walk *w)
{
	return pa_ptr_off_ok(w->off_previous, PA_FRAME_READ_BYTES) &&
	       pa_ptr_off_ok(w->off_executable, PA_FRAME_READ_BYTES) &&
	       pa_ptr_off_ok(w->off_instr_ptr, PA_FRAME_READ_BYTES) &&
	       w->off_owner < PA_FRAME_READ_BYTES;
}

static long pa_walk_step(__u32 i, void *ctx)
{
	struct pa_walk *w = ctx;
	struct pa_scratch *s = w->s;
	__u32 op = w->off_previous, oe = w->off_executable, oi = w->off_instr_ptr;
	__u32 oo = w->off_owner;
	__u64 addr = w->frame, prev;
	struct pa_frame *f;

	/* For the verifier: offsets copied through the stack are unbounded scalars to it; the
	 * program checked them before the walk. */
	if (op > PA_FRAME_READ_BYTES - 8 || oe > PA_FRAME_READ_BYTES - 8 ||
	    oi > PA_FRAME_READ_BYTES - 8 || oo > PA_FRAME_READ_BYTES - 1)
		return 1;
	/* For the verifier: i < nr_loops <= PA_MAX_FRAMES (a power of two) already, but the
	 * verifier does not know bpf_loop's bound and clang would drop a plain compare. */
	asm volatile("" : "+r"(i));
	i &= PA_MAX_FRAMES - 1;

	if (bpf_probe_read_user(s->frame, PA_FRAME_READ_BYTES, (const void *)addr)) {
		/* Not resident, unmapped or torn: the chain is cut here, never "complete". */
		w->flags |= PA_SAMPLE_READ_FAILED;
		pa_count(pa_counters_here(), PA_CNT_READ_FAIL_FRAME);
		return 1;
	}

	prev = *(__u64 *)(s->frame + op);
	f = &s->rec.frames[i];
	f->addr = addr;
	f->executable = *(__u64 *)(s->frame + oe) & ~w->tag_mask;
	f->instr_ptr = *(__u64 *)(s->frame + oi);
	f->owner = s->frame[oo];
	f->_pad = 0;
	w->n = i + 1;

	if (addr == w->anchor) {
		/* Userspace holds this frame's ancestry (3.15 frame-cache protocol:
		 * cpython-internals.md §6.3 step 3). */
		w->flags |= PA_SAMPLE_ANCHOR_HIT;
		return 1;
	}
	if (prev == 0) {
		w->flags |= PA_SAMPLE_COMPLETE;
		if (addr == w->base)
			w->flags |= PA_SAMPLE_REACHED_BASE;
		return 1;
	}
	w->frame = prev;
	return 0;
}

#endif /* PA_WALK_BPF_H */
