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
 *
 * Past the short record, frames are read a window at a time (pa_window_fill): since 3.11 a
 * thread's frames lie next to each other in its data-stack chunks, each caller below its callee,
 * so one bpf_probe_read_user of the bytes below a frame brings dozens of its callers. A helper
 * call per frame was most of a deep walk's cost. The window is only a copy: a frame is read from
 * it when its whole header lies inside, and by itself otherwise (generator frames, 3.12-3.14
 * entry frames on the C stack, 3.15's base frame). The thread is interrupted on this CPU, so
 * the copy cannot differ from what per-frame reads would see.
 *
 * The frames are walked by global functions, eight at a time: pa_walk_short (the short record's)
 * and pa_walk_run (each bpf_loop step's). The verifier checks a global function once, against
 * its prototype, where it checks an inlined one again on every path that reaches it. With the
 * short frames inlined and a step of one frame under bpf_loop, verifying the program took about
 * 0.25 s of CPU (114k instructions processed), most of a short `record`'s start; now about
 * 0.015-0.04 s (13-20k). Eight frames a call keep the calls' cost (a return through this
 * kernel's return thunk) off a deep walk. The price: after a call the verifier knows nothing of
 * the memory its pointer arguments pointed to, so struct pa_walk holds no pointer (struct
 * pa_walk_loop holds them), and a global function's pointer arguments may be NULL to it.
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

/* Bytes below (and including) a frame's header copied in one read. The wide read may cross into
 * unmapped memory below a chunk; then the window is the frame's own page (always mapped), which
 * still holds the callers that share the page. */
#define PA_WINDOW_BYTES 8192
#define PA_PAGE_BYTES 4096
_Static_assert(PA_PAGE_BYTES + PA_FRAME_READ_BYTES <= PA_WINDOW_BYTES, "a page window fits");



/* The walk's state, on the program's stack; bpf_loop hands a pointer to each step. Offsets are
 * checked against the read window before the walk (pa_frame_offsets_ok). */
struct pa_walk {
	/* The target addresses this CPU's window holds: [win_lo, win_lo + win_len). 0: empty. */
	__u64 win_lo;
	__u64 win_len;
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
	/* Windows filled so far. */
	__u32 fills;
	/* Bytes of each frame read: PA_FRAME_READ_BYTES, or PA_FRAME_OBJECT_READ_BYTES for
	 * PyFrameObjects (3.6-3.10, PA_PROC_FRAME_OBJECTS), which are read each by itself. */
	__u32 read_len;
};

struct pa_frame_window {
	__u8 bytes[PA_WINDOW_BYTES];
	/* The walk's state (record.bpf.h, pa_record_stack). Also the room that a
	 * frame offset masked to 0x7f (pa_walk_windowed) may reach past the window's end. */
	struct pa_walk walk;
};
_Static_assert(sizeof(struct pa_walk) >= 0x80 - PA_FRAME_READ_BYTES,
	       "a masked offset from the window's last frame stays inside the value");

/* Per CPU: the window of the walk under way (a perf_event program never nests on a CPU; an
 * off-CPU walk runs in sched_switch, with interrupts off). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pa_frame_window);
} pa_frame_windows SEC(".maps");

/* A pointer field: 8-byte aligned, wholly inside the frame window. */
static __always_inline int pa_ptr_off_ok(__u32 off, __u32 window)
{
	return (off & 7) == 0 && off <= window - 8;
}

static __always_inline int pa_frame_offsets_ok(const struct pa_walk *w)
{
	/* read_len is PA_FRAME_READ_BYTES or PA_FRAME_OBJECT_READ_BYTES, set without a branch
	 * (pa_record_stack): comparing it with each would split the verifier's walk in two. */
	__u32 len = w->read_len;

	return pa_ptr_off_ok(w->off_previous, len) && pa_ptr_off_ok(w->off_executable, len) &&
	       pa_ptr_off_ok(w->off_instr_ptr, len) && w->off_owner < len;
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

/* `x & mask`, computed even where clang can prove the mask changes nothing: a verifier that
 * lost x's bound (6.1, after a spill) learns it again from the mask. */
static __always_inline __u64 pa_mask(__u64 x, __u64 mask)
{
	asm volatile("" : "+r"(x));
	return x & mask;
}

/* The byte at `off` of a window of `nbytes` bytes (0 past its end). The bound is checked on
 * the copy that indexes: older verifiers (6.1) lose an offset's bound when clang spills it. */
static __always_inline __u8 pa_byte(const __u8 *win, __u32 off, __u32 nbytes)
{
	asm volatile("" : "+r"(off));
	if (off >= nbytes)
		return 0;
	return win[off];
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

/* Owners of frames that leave the chain without moving the 3.15 anchor and come back at the
 * same address under other callers: a generator's (it yields, and is resumed by whoever) and an
 * entry frame on the C stack (its evaluation returns; the next one at that depth reuses it). An
 * anchor on one vouches for nothing: the walk goes on past it. The values of 3.15's
 * `FRAME_OWNED_BY_GENERATOR` and `FRAME_OWNED_BY_CSTACK` (the anchor exists from 3.15 on;
 * userspace checks the same with the offsets it read). */
#define PA_OWNER_GENERATOR 1
#define PA_OWNER_CSTACK 3

static __always_inline __u64 pa_can_anchor(__u32 owner)
{
	return owner != PA_OWNER_GENERATOR && owner != PA_OWNER_CSTACK;
}

/* Records frame w->frame, whose header fields were read (its `previous` is `prev`), into *f.
 * Returns 1 when the walk ends with it. */
static __always_inline int pa_walk_record(struct pa_walk *w, struct pa_frame *f, __u64 prev)
{
	__u64 addr = w->frame;

	f->addr = addr;
	w->n++;
	if (addr == w->anchor && pa_can_anchor(f->owner)) {
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

/* The frame's header could not be read: the chain is cut here, never "complete". */
static __always_inline int pa_walk_read_failed(struct pa_walk *w)
{
	w->flags |= PA_SAMPLE_READ_FAILED;
	pa_count(pa_counters_here(), PA_CNT_READ_FAIL_FRAME);
	return 1;
}

/* Records the next frame into *f, read by itself into `win` (PA_FRAME_READ_BYTES). Returns 1
 * when the walk ends with it (or before it). */
static __always_inline int pa_walk_one_into(struct pa_walk *w, struct pa_frame *f, __u64 *win)
{
	__u32 op = w->off_previous, oe = w->off_executable, oi = w->off_instr_ptr;
	__u32 oo = w->off_owner;

	/* For the verifier: offsets copied through the stack are unbounded scalars to it; the
	 * program checked them before the walk. */
	if (op > PA_FRAME_READ_BYTES - 8 || oe > PA_FRAME_READ_BYTES - 8 ||
	    oi > PA_FRAME_READ_BYTES - 8 || oo > PA_FRAME_READ_BYTES - 1)
		return 1;
	/* Not resident, unmapped or torn. */
	if (bpf_probe_read_user(win, PA_FRAME_READ_BYTES, (const void *)w->frame))
		return pa_walk_read_failed(w);
	f->executable = pa_word(win, oe, PA_FRAME_READ_BYTES / 8) & ~w->tag_mask;
	f->instr_ptr = pa_word(win, oi, PA_FRAME_READ_BYTES / 8);
	f->owner = pa_byte((const __u8 *)win, oo, PA_FRAME_READ_BYTES);
	f->is_entry = w->entry_before_owner && oo ?
			      pa_byte((const __u8 *)win, oo - 1, PA_FRAME_READ_BYTES) :
			      0;
	return pa_walk_record(w, f, pa_word(win, op, PA_FRAME_READ_BYTES / 8));
}

_Static_assert(PA_FRAME_OBJECT_READ_BYTES == 128, "masked frame-object offsets stay inside it");

/* Records the next frame, a PyFrameObject (3.6-3.10), into *f: its first
 * PA_FRAME_OBJECT_READ_BYTES are read into this CPU's window (map memory, where a masked index
 * needs no initialised stack). A frame object lies on the heap, away from its caller, so the
 * window holds no other frame after: it is marked empty. Returns 1 when the walk ends with it. */
static __always_inline int pa_walk_object(struct pa_walk *w, struct pa_frame *f)
{
	__u32 zero = 0;
	struct pa_frame_window *fw = bpf_map_lookup_elem(&pa_frame_windows, &zero);
	const __u64 *words;
	const __u8 *bytes;

	if (!fw)
		return 1;
	w->win_len = 0;
	if (bpf_probe_read_user(fw->bytes, PA_FRAME_OBJECT_READ_BYTES, (const void *)w->frame))
		return pa_walk_read_failed(w);
	words = (const __u64 *)fw->bytes;
	bytes = fw->bytes;
	f->executable = words[(w->off_executable >> 3) & 15] & ~w->tag_mask;
	f->instr_ptr = words[(w->off_instr_ptr >> 3) & 15];
	f->owner = bytes[w->off_owner & 127];
	f->is_entry = 0;
	return pa_walk_record(w, f, words[(w->off_previous >> 3) & 15]);
}

#ifndef PA_PORTABLE

/* pa_walk_one_into with the frame read into the program's stack (a frame object: into this
 * CPU's window). */
static __always_inline int pa_walk_one(struct pa_walk *w, struct pa_frame *f)
{
	/* Words, so that the verifier sees the variable-offset reads as 8-byte aligned. */
	__u64 win[PA_FRAME_READ_BYTES / 8];

	if (w->read_len != PA_FRAME_READ_BYTES)
		return pa_walk_object(w, f);
	return pa_walk_one_into(w, f, win);
}

/* Copies into the window the bytes that end with the header of the frame at `addr`: the
 * PA_WINDOW_BYTES below it, or if those cannot all be read, the part of its page below it.
 * The walk's first window is the page part alone: a walk that ends a few frames past the short
 * record (most of them) then never pays for a wide copy, nor for the failed read of one that
 * crosses below the thread's first chunk. Returns 0 when the window holds the header. */
static __always_inline int pa_window_fill(struct pa_walk *w, struct pa_frame_window *win,
					  __u64 addr)
{
	__u64 end = addr + PA_FRAME_READ_BYTES, lo, len;

	w->win_len = 0;
	if (end < addr || end < PA_WINDOW_BYTES)
		return -1;
	lo = end - PA_WINDOW_BYTES;
	if (w->fills++ &&
	    !bpf_probe_read_user(win->bytes, PA_WINDOW_BYTES, (const void *)lo)) {
		w->win_lo = lo;
		w->win_len = PA_WINDOW_BYTES;
		return 0;
	}
	lo = addr & ~(__u64)(PA_PAGE_BYTES - 1);
	len = end - lo;
	/* For the verifier (always true: len <= PA_PAGE_BYTES - 8 + PA_FRAME_READ_BYTES). */
	if (len > PA_WINDOW_BYTES)
		return -1;
	if (bpf_probe_read_user(win->bytes, len, (const void *)lo))
		return -1;
	w->win_lo = lo;
	w->win_len = len;
	return 0;
}

/* Records the next frame into *f, from the window (filled first when the frame's header is not
 * in it). Returns 1 when the walk ends with it (or before it). */
static __always_inline int pa_walk_windowed(struct pa_walk *w, struct pa_frame *f,
					    struct pa_frame_window *win)
{
	__u32 op = w->off_previous, oe = w->off_executable, oi = w->off_instr_ptr;
	__u32 oo = w->off_owner;
	__u64 addr = w->frame, off = addr - w->win_lo;
	const __u8 *h;

	if (!win || w->read_len != PA_FRAME_READ_BYTES)
		return pa_walk_one(w, f);
	if (op > PA_FRAME_READ_BYTES - 8 || oe > PA_FRAME_READ_BYTES - 8 ||
	    oi > PA_FRAME_READ_BYTES - 8 || oo > PA_FRAME_READ_BYTES - 1)
		return 1;
	if (addr < w->win_lo || w->win_len < PA_FRAME_READ_BYTES ||
	    off > w->win_len - PA_FRAME_READ_BYTES) {
		if (w->fills && (addr >= w->win_lo || w->win_lo - addr > PA_WINDOW_BYTES)) {
			/* Far from the last window: a frame elsewhere (a generator's, 3.15's base
			 * frame in the thread state, a new chunk). Read alone; a next frame right
			 * below it starts a window. */
			w->win_lo = addr;
			w->win_len = 0;
			return pa_walk_one(w, f);
		}
		if (pa_window_fill(w, win, addr))
			return pa_walk_read_failed(w);
		off = addr - w->win_lo;
	}
	/* For the verifier: the header lies inside the window (pa_window_fill made sure). */
	asm volatile("" : "+r"(off));
	if (off > PA_WINDOW_BYTES - PA_FRAME_READ_BYTES)
		return pa_walk_read_failed(w);
	/* The offsets are masked where they index (they were checked before the walk, so the
	 * masks change nothing): older verifiers (6.1) lose a bound when clang spills it. The
	 * window's value has room past its bytes for any masked offset. */
	h = win->bytes + off;
	f->executable = *(const __u64 *)(h + pa_mask(oe, 0x78)) & ~w->tag_mask;
	f->instr_ptr = *(const __u64 *)(h + pa_mask(oi, 0x78));
	f->owner = h[pa_mask(oo, 0x7f)];
	f->is_entry = 0;
	/* The byte before the owner, masked like the offsets (oo >= 1 here, so the mask changes
	 * nothing). */
	if (w->entry_before_owner && oo)
		f->is_entry = h[pa_mask(oo - 1, 0x7f)];
	return pa_walk_record(w, f, *(const __u64 *)(h + pa_mask(op, 0x78)));
}

/* The slots one global call fills: a short record's frames, or a run of a longer walk's. */
struct pa_frame_run {
	struct pa_frame f[PA_SHORT_FRAMES];
};

/* The first min(max, PA_SHORT_FRAMES) frames, each read alone, into a short record's slots.
 * Global (verified once: see the top of this file). Returns 1 when the walk ended (complete,
 * cut, anchored, looping), 0 when it may go on (at `max` frames the caller stops it). */
__attribute__((noinline)) int pa_walk_short(struct pa_walk *w, struct pa_frame_run *run, __u32 max)
{
	if (!w || !run)
		return 1;
	for (__u32 i = 0; i < PA_SHORT_FRAMES && i < max; i++)
		if (pa_walk_one(w, &run->f[i]))
			return 1;
	return 0;
}

/* The next PA_SHORT_FRAMES frames at most, from this CPU's window (`win`; NULL: each read
 * alone), into `run`, the slots from frame w->n; the walk stops at `max` frames. Global, like
 * pa_walk_short. Returns 1 to stop the loop (the walk ended, or reached `max`), 0 after eight
 * frames. */
__attribute__((noinline)) int pa_walk_run(struct pa_walk *w, struct pa_frame_run *run,
					  struct pa_frame_window *win, __u32 max)
{
	if (!w || !run)
		return 1;
	for (__u32 i = 0; i < PA_SHORT_FRAMES; i++) {
		if (w->n >= max)
			return 1;
		if (pa_walk_windowed(w, &run->f[i], win))
			return 1;
	}
	return 0;
}

/* What the bpf_loop steps past the short record share: the walk, and the pointers it cannot
 * hold (the verifier forgets what w points to at each global call). */
struct pa_walk_loop {
	struct pa_walk *w;
	struct pa_scratch *s;
	/* This CPU's window (NULL: every frame is read by itself). */
	struct pa_frame_window *win;
	/* The frame bound. */
	__u32 max;
};

/* One bpf_loop step past the short record: a run of frames from w->n, into the scratch record.
 * Runs start at frames 8, 16, ... 1016; to the verifier, which sees n only as masked below, a
 * run may start at the last slot: the scratch record's native area leaves room for it. */
static long pa_walk_step(__u32 i, void *ctx)
{
	struct pa_walk_loop *l = ctx;
	struct pa_walk *w = l->w;
	__u32 n = w->n;
	long done;

	/* A native record's walk may have ended in the short record already. */
	if (pa_walk_done(w))
		return 1;
	/* For the verifier: n < PA_MAX_FRAMES (bpf_loop's bound), a power of two. */
	asm volatile("" : "+r"(n));
	n &= PA_MAX_FRAMES - 1;
	done = pa_walk_run(w, (struct pa_frame_run *)&l->s->rec.frames[n], l->win, l->max);
	/* For the verifier, a callback returns 0 or 1; a global call's result is any int (the
	 * barrier keeps clang from dropping the test as redundant). */
	asm volatile("" : "+r"(done));
	return done ? 1 : 0;
}

#else /* PA_PORTABLE */

/* The portable walk (Linux 5.10 and later): no bpf_loop (5.17), no global function taking
 * pointers (5.12), no read of the stack at a variable offset (5.12). Every frame is read by
 * itself into this CPU's window and recorded into the scratch record by a bounded loop, which
 * the verifier follows iteration by iteration along one path. Each branch it cannot decide on
 * that path waits on its stack of pending branches (8,192 at most), so a frame's step decides
 * with arithmetic where it can: the offsets are masked instead of compared (pa_frame_offsets_ok
 * checked them before the walk, and the window has room for any masked index), and the three
 * ways a walk ends are one branch. */

/* 1 if x is not 0, 0 if it is, without a branch (the barrier keeps clang from turning it back
 * into a compare). */
static __always_inline __u64 pa_nonzero(__u64 x)
{
	__u64 neg = -x;

	asm volatile("" : "+r"(neg));
	return (x | neg) >> 63;
}

/* Records the next frame into *f, read by itself into `buf` (this CPU's window). Returns 1 when
 * the walk ends with it (or before it). */
static __always_inline int pa_walk_step_portable(struct pa_walk *w, struct pa_frame *f,
						 __u8 *buf)
{
	const __u64 *words = (const __u64 *)buf;
	__u64 addr = w->frame, prev, at_anchor, at_end, loops;
	__u32 oo = w->off_owner;

	/* As much as a frame object needs, for every frame: a read of a length that depends on
	 * the process would double the states the verifier walks at each of the loop's steps (and
	 * 5.10's refuses the off-CPU program then). A 3.11+ frame is followed by its own locals,
	 * so the extra bytes are mapped but for a frame at the very end of its stack chunk, whose
	 * read fails: a torn sample, never a wrong one. */
	if (bpf_probe_read_user(buf, PA_FRAME_OBJECT_READ_BYTES, (const void *)addr))
		return pa_walk_read_failed(w);
	f->addr = addr;
	f->executable = words[(w->off_executable >> 3) & 15] & ~w->tag_mask;
	f->instr_ptr = words[(w->off_instr_ptr >> 3) & 15];
	f->owner = buf[oo & 127];
	f->is_entry = buf[(oo - 1) & 127] & -(__u8)(w->entry_before_owner & pa_nonzero(oo));
	prev = words[(w->off_previous >> 3) & 15];
	w->n++;
	at_anchor = (1 - pa_nonzero(addr ^ w->anchor)) &
		    pa_nonzero(f->owner ^ PA_OWNER_GENERATOR) & pa_nonzero(f->owner ^ PA_OWNER_CSTACK);
	at_end = 1 - pa_nonzero(prev);
	loops = 1 - (pa_nonzero(prev ^ addr) & pa_nonzero(prev ^ w->recent[0]) &
		     pa_nonzero(prev ^ w->recent[1]) & pa_nonzero(prev ^ w->recent[2]) &
		     pa_nonzero(prev ^ w->recent[3]));
	w->recent[w->n & (PA_RECENT_FRAMES - 1)] = addr;
	if (at_anchor | at_end | loops) {
		/* The same order as pa_walk_record: the anchor first, then the end. */
		if (at_anchor)
			w->flags |= PA_SAMPLE_ANCHOR_HIT;
		else if (at_end)
			w->flags |= PA_SAMPLE_COMPLETE |
				    (addr == w->base ? PA_SAMPLE_REACHED_BASE : 0);
		else
			w->flags |= PA_SAMPLE_CYCLIC;
		return 1;
	}
	w->frame = prev;
	return 0;
}

_Static_assert(PA_WINDOW_BYTES >= 128, "the window holds any masked frame offset");
_Static_assert(PA_RECENT_FRAMES == 4, "pa_walk_step_portable compares four recent frames");

/* Frames the portable walk records at most: deeper stacks are cut there (flagged truncated).
 * The verifier checks every iteration of a bounded loop, and 5.10's takes minutes over 1,024. */
#define PA_PORTABLE_MAX_FRAMES 256
_Static_assert(PA_PORTABLE_MAX_FRAMES <= PA_MAX_FRAMES, "the portable walk fits a record");

static __always_inline void pa_walk_portable(struct pa_walk *w, struct pa_scratch *s, __u64 *win,
					     __u32 max)
{
	for (__u32 i = 0; i < PA_PORTABLE_MAX_FRAMES; i++) {
		if (i >= max || pa_walk_step_portable(w, &s->rec.frames[i], (__u8 *)win))
			break;
	}
}

#endif /* PA_PORTABLE */

#endif /* PA_WALK_BPF_H */
