/* SPDX-License-Identifier: GPL-2.0 */
/*
 * native.bpf.h: the native section of a record (pyagent.h, PA_SAMPLE_NATIVE): user registers,
 * kernel stack and a copy of the user stack, written into the per-CPU scratch right after the
 * record's last frame. The program does not unwind native code: the copy is unwound in
 * userspace with each object's CFI, which needs neither frame pointers nor maps of unwind
 * tables in the kernel.
 */
#ifndef PA_NATIVE_BPF_H
#define PA_NATIVE_BPF_H

#include "maps.bpf.h"
#include "kernel.bpf.h"

#define PA_PAGE 4096u

/* Where the native section of a record with `frames_end` bytes of header and frames goes, and
 * the verifier's bounds on it: it must end inside struct pa_scratch. */
_Static_assert(sizeof(struct pa_scratch) == sizeof(struct pa_record) + PA_NATIVE_MAX_BYTES,
	       "scratch has room for a native section after the longest record");

/* What the context of a native section's program is, which says where the user registers are.
 * A constant at each call site, so that each program keeps only its own branch: the verifier
 * refuses a perf event's register read on a tracepoint's context even where it cannot run. */
#define PA_NATIVE_FROM_TICK 1 /* a perf event's: the interrupted registers */
#define PA_NATIVE_FROM_SWITCH 2 /* sched_switch's: the current task is in the kernel */

/* Fills `h`'s registers: those of the tick when it interrupted user mode (returns 1), else the
 * user registers the thread saved entering the kernel (returns 0: the tick was in the kernel,
 * or the thread is switching out). -1 when there are none. */
static __always_inline int pa_user_regs(void *ctx, int from, struct pa_native_hdr *h)
{
	const __u64 *regs = ctx;
#ifndef PA_PORTABLE
	struct pt_regs *u;
#else
	struct pa_user_regs u;
#endif

	/* The registers' places in the context and in struct pt_regs: arch.bpf.h. */
	if (from == PA_NATIVE_FROM_TICK && pa_ctx_user_mode(regs)) {
		h->ip = regs[PA_UREG_IP];
		h->sp = regs[PA_UREG_SP];
		h->bp = regs[PA_UREG_FP];
		return 1;
	}
#ifndef PA_PORTABLE
	u = (struct pt_regs *)bpf_task_pt_regs(pa_current_task());
	if (!u)
		return -1;
	h->ip = PA_PT_IP(u);
	h->sp = PA_PT_SP(u);
	h->bp = PA_PT_FP(u);
#else
	if (pa_task_user_regs(pa_current_task(), &u))
		return -1;
	h->ip = u.ip;
	h->sp = u.sp;
	h->bp = u.fp;
#endif
	return h->sp ? 0 : -1;
}

/* Copies the user stack from `sp` up into `base + at`, a page at a time so that a window
 * reaching past the top of the stack keeps what lies below the top; returns the bytes copied. */
static __always_inline __u32 pa_copy_user_stack(__u8 *base, __u32 at, __u64 sp, __u64 *cnt)
{
	/* 64-bit, so that no zero-extension separates a checked copy from the one used: the
	 * verifier carries a bound over to the copies of a register only while they stay equal. */
	__u64 got = 0, chunk, d;
	__u64 src = sp;
	int i;

#pragma unroll
	for (i = 0; i < PA_NATIVE_STACK_BYTES / PA_PAGE + 1; i++) {
		chunk = PA_PAGE - (src & (PA_PAGE - 1));
		if (chunk > PA_NATIVE_STACK_BYTES - got)
			chunk = PA_NATIVE_STACK_BYTES - got;
		if (chunk == 0)
			break;
		d = at + got;
		/* For the verifier: the destination and length stay inside the scratch value. The
		 * barriers keep clang from folding the checks into arithmetic the verifier cannot
		 * follow. */
		asm volatile("" : "+r"(d));
		asm volatile("" : "+r"(chunk));
		if (d > sizeof(struct pa_scratch) - PA_PAGE || chunk > PA_PAGE)
			break;
		/* 1..PA_PAGE, masked as well: 6.1's verifier loses the compare's bound on the copy
		 * it passes to the helper. */
		chunk = pa_mask(chunk - 1, PA_PAGE - 1) + 1;
		if (bpf_probe_read_user(base + d, chunk, (const void *)src)) {
			pa_count(cnt, PA_CNT_NATIVE_STACK_SHORT);
			break;
		}
		got += chunk;
		src += chunk;
	}
	return (__u32)got;
}

/* Writes the native section of the record in `s` whose frames end at byte `off`; returns its
 * length (0: none written). `from`: PA_NATIVE_FROM_*, what `ctx` is. */
static __always_inline __u32 pa_native_section(void *ctx, int from, struct pa_scratch *s,
					       __u32 off, __u64 *cnt)
{
	struct pa_native_hdr h = {};
	__u8 *base = (__u8 *)s;
	__u32 kbytes = 0, at;
	long k;
	int user;

	asm volatile("" : "+r"(off));
	if (off > sizeof(struct pa_record))
		return 0;
	user = pa_user_regs(ctx, from, &h);
	if (user < 0) {
		pa_count(cnt, PA_CNT_NATIVE_NO_REGS);
		return 0;
	}
	at = off + sizeof(h);
	if (!user) {
		/* The tick interrupted the kernel, or the thread is switching out: the kernel stack,
		 * the leaf of the sample (for a tracepoint, from the program's caller). The offset is
		 * checked again here, on the register passed: 5.10's and 6.1's verifiers lose the
		 * first check's bound when clang spills it. */
		__u64 kat = at;

		asm volatile("" : "+r"(kat));
		if (kat > sizeof(struct pa_record) + sizeof(h))
			return 0;
		k = bpf_get_stack(ctx, base + kat, PA_KERNEL_FRAMES * 8, 0);
		/* Bytes written, at most the size given; masked and clamped so that the verifier
		 * sees the stack copy's offset below bounded, and whole entries only. */
		if (k > 0)
			kbytes = (__u32)k & (PA_KERNEL_FRAMES * 8 * 2 - 1);
		if (kbytes > PA_KERNEL_FRAMES * 8)
			kbytes = PA_KERNEL_FRAMES * 8;
		kbytes &= ~7u;
	}
	h.kernel_frames = kbytes / 8;
	h.stack_bytes = pa_copy_user_stack(base, at + kbytes, h.sp, cnt);
	/* Checked again on the register used, as above. */
	{
		__u64 hat = off;

		asm volatile("" : "+r"(hat));
		if (hat > sizeof(struct pa_record))
			return 0;
		__builtin_memcpy(base + hat, &h, sizeof(h));
	}
	pa_count(cnt, PA_CNT_NATIVE_STACKS);
	return sizeof(h) + kbytes + h.stack_bytes;
}

#endif /* PA_NATIVE_BPF_H */
