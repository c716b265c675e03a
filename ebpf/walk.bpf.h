/* SPDX-License-Identifier: GPL-2.0 */
/*
 * walk.bpf.h: the _PyInterpreterFrame chain walk.
 *
 * Each step reads the first PA_FRAME_READ_BYTES of one frame with a single bpf_probe_read_user
 * into a window on the BPF stack, records (address, executable & ~tag mask, instr_ptr, owner)
 * and moves to `previous`. The first PA_SHORT_FRAMES steps write into a short record reserved in
 * the ring buffer (pa_walk_short); a walk that goes on continues in the per-CPU scratch record
 * under bpf_loop (pa_walk_step). Stack windows and the direct ring-buffer write keep a short walk
 * off the scratch pages: on these VMs every cold page a run touches costs a few hundred ns.
 */
#ifndef PA_WALK_BPF_H
#define PA_WALK_BPF_H

#include "maps.bpf.h"

_Static_assert((PA_MAX_FRAMES & (PA_MAX_FRAMES - 1)) == 0, "PA_MAX_FRAMES is a power of two");
_Static_assert(PA_SHORT_FRAMES < PA_MAX_FRAMES, "a short record is shorter than the longest");

/* Frames whose addresses the walk remembers to catch a chain that loops back (a power of two).
 * A live chain never names a frame twice; a corrupt one that loops would otherwise be recorded
 * as one function repeated PA_MAX_FRAMES times. Longer loops end at the frame bound (truncated)
 * and userspace finds the repeat in the record. */
#define PA_RECENT_FRAMES 4

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
	/* The last PA_RECENT_FRAMES frame addresses, slot n % PA_RECENT_FRAMES. */
	__u64 recent[PA_RECENT_FRAMES];
	/* Frames recorded so far. */
	__u32 n;
	/* PA_SAMPLE_* */
	__u32 flags;
	/* Record the byte before the owner as is_entry (PA_PROC_IS_ENTRY). */
	__u32 entry_before_owner;
	__u32 _pad;
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

/* The word at byte offset `off` (8-aligned, checked before the walk) of a window of `nwords`
 * words on the BPF stack. A stack read at a variable offset must be provably bounded and 8-byte
 * aligned: the barrier keeps clang from bounding one copy of the index and reading with another. */
static __always_inline __u64 pa_word(const __u64 *win, __u32 off, __u32 nwords)
{
	__u32 i = off / 8;

	asm volatile("" : "+r"(i));
	if (i >= nwords)
		return 0;
	return win[i];
}

/* The walk stopped: complete, read failure, anchor or loop (else it hit the frame bound). */
static __always_inline int pa_walk_done(const struct pa_walk *w)
{
	return w->flags & (PA_SAMPLE_COMPLETE | PA_SAMPLE_READ_FAILED | PA_SAMPLE_ANCHOR_HIT |
			   PA_SAMPLE_CYCLIC);
}

/* Whether `prev` is `addr` or one of the last PA_RECENT_FRAMES frames: the chain loops. Then
 * remembers `addr`. Unrolled compares of a few words on the walk's own stack: a few ns a frame. */
static __always_inline int pa_loops_back(struct pa_walk *w, __u64 addr, __u64 prev)
{
	int loops = prev == addr;

	for (int i = 0; i < PA_RECENT_FRAMES; i++)
		loops |= prev == w->recent[i];
	w->recent[w->n & (PA_RECENT_FRAMES - 1)] = addr;
	return loops;
}

/* Records the next frame into *f. Returns 1 when the walk ends with it (or before it). */
static __always_inline int pa_walk_one(struct pa_walk *w, struct pa_frame *f)
{
	__u32 op = w->off_previous, oe = w->off_executable, oi = w->off_instr_ptr;
	__u32 oo = w->off_owner;
	__u64 addr = w->frame, prev;
	/* Words, so that the verifier sees the variable-offset reads below as 8-byte aligned. */
	__u64 win[PA_FRAME_READ_BYTES / 8];

	/* For the verifier: offsets copied through the stack are unbounded scalars to it; the
	 * program checked them before the walk. */
	if (op > PA_FRAME_READ_BYTES - 8 || oe > PA_FRAME_READ_BYTES - 8 ||
	    oi > PA_FRAME_READ_BYTES - 8 || oo > PA_FRAME_READ_BYTES - 1)
		return 1;
	if (bpf_probe_read_user(win, sizeof(win), (const void *)addr)) {
		/* Not resident, unmapped or torn: the chain is cut here, never "complete". */
		w->flags |= PA_SAMPLE_READ_FAILED;
		pa_count(pa_counters_here(), PA_CNT_READ_FAIL_FRAME);
		return 1;
	}
	prev = pa_word(win, op, PA_FRAME_READ_BYTES / 8);
	f->addr = addr;
	f->executable = pa_word(win, oe, PA_FRAME_READ_BYTES / 8) & ~w->tag_mask;
	f->instr_ptr = pa_word(win, oi, PA_FRAME_READ_BYTES / 8);
	f->owner = ((const __u8 *)win)[oo];
	f->is_entry = w->entry_before_owner && oo ? ((const __u8 *)win)[oo - 1] : 0;
	w->n++;

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
	if (pa_loops_back(w, addr, prev)) {
		w->flags |= PA_SAMPLE_CYCLIC;
		return 1;
	}
	w->frame = prev;
	return 0;
}

/* The first min(max, PA_SHORT_FRAMES) frames, into a short record's slots. */
static __always_inline void pa_walk_short(struct pa_walk *w, struct pa_frame *frames, __u32 max)
{
	for (__u32 i = 0; i < PA_SHORT_FRAMES && i < max; i++)
		if (pa_walk_one(w, &frames[i]))
			return;
}

/* One bpf_loop step past the short record: frame w->n, into the scratch record. */
static long pa_walk_step(__u32 i, void *ctx)
{
	struct pa_walk *w = ctx;
	__u32 n = w->n;

	/* A native record's walk may have ended in the short record already. */
	if (pa_walk_done(w))
		return 1;
	/* For the verifier: n < PA_MAX_FRAMES (bpf_loop's bound), a power of two. */
	asm volatile("" : "+r"(n));
	n &= PA_MAX_FRAMES - 1;
	return pa_walk_one(w, &w->s->rec.frames[n]);
}

#endif /* PA_WALK_BPF_H */
