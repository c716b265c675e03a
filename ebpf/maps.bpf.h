/* SPDX-License-Identifier: GPL-2.0 */
/*
 * maps.bpf.h: the sampler's maps and the counter helper.
 *
 * Key and value types come from common/include/pyagent.h. Sizes marked "set by userspace" are
 * overridden with EbpfLoader::map_max_entries before load (agent/src/sampler/bpf.rs).
 */
#ifndef PA_MAPS_BPF_H
#define PA_MAPS_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pyagent.h"

/* Per-CPU scratch: a record of more than PA_SHORT_FRAMES frames under construction. Too big for a
 * PERCPU_ARRAY value (the per-CPU allocator caps a value at 32 KiB), so it is an ARRAY with one
 * slot per possible CPU, indexed by bpf_get_smp_processor_id(); perf_event programs do not nest
 * on a CPU, so a slot has one user. */
struct pa_scratch {
	struct pa_record rec;
	/* Room for a native section after the longest record (native.bpf.h writes it right after
	 * the record's last frame, wherever that is). */
	__u8 native[PA_NATIVE_MAX_BYTES];
};

/* host tgid -> walk configuration (set by userspace). Read only for a shared pa_proc_slots
 * slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* set by userspace */
	__type(key, __u32);
	__type(value, struct pa_proc);
} pa_procs SEC(".maps");

/* host tid -> PyThreadState address (set by userspace from the interpreter's thread list). Read
 * only for a shared pa_thread_slots slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* set by userspace */
	__type(key, __u32);
	__type(value, __u64);
} pa_threads SEC(".maps");

/* host tgid -> where to look for a thread the agent has not registered (set by userspace). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* set by userspace */
	__type(key, __u32);
	__type(value, struct pa_thread_list);
} pa_thread_lists SEC(".maps");

/* Direct-mapped tables in front of pa_procs and pa_threads (pyagent.h says how they are kept). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PA_PROC_SLOTS);
	__type(key, __u32);
	__type(value, struct pa_proc_slot);
} pa_proc_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PA_THREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct pa_thread_slot);
} pa_thread_slots SEC(".maps");

_Static_assert((PA_PROC_SLOTS & (PA_PROC_SLOTS - 1)) == 0, "PA_PROC_SLOTS is a power of two");
_Static_assert((PA_THREAD_SLOTS & (PA_THREAD_SLOTS - 1)) == 0, "PA_THREAD_SLOTS is a power of two");

/* The walk configuration of tracked process `tgid`, or NULL. */
static __always_inline const struct pa_proc *pa_find_proc(__u32 tgid)
{
	__u32 i = tgid & (PA_PROC_SLOTS - 1);
	const struct pa_proc_slot *e = bpf_map_lookup_elem(&pa_proc_slots, &i);

	if (!e)
		return NULL;
	if (e->tgid == tgid)
		return &e->proc;
	if (e->tgid != PA_SLOT_SHARED)
		return NULL;
	return bpf_map_lookup_elem(&pa_procs, &tgid);
}

/* The PyThreadState address of registered thread `tid` (0: runs no Python), or NULL when the
 * agent has not registered it. */
static __always_inline const __u64 *pa_find_thread(__u32 tid)
{
	__u32 i = tid & (PA_THREAD_SLOTS - 1);
	const struct pa_thread_slot *e = bpf_map_lookup_elem(&pa_thread_slots, &i);

	if (!e)
		return NULL;
	if (e->tid == tid)
		return &e->tstate;
	if (e->tid != PA_SLOT_SHARED)
		return NULL;
	return bpf_map_lookup_elem(&pa_threads, &tid);
}

/* host tgid -> PA_NOTICE_* bits: processes the agent should look at again (it deletes them). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} pa_notices SEC(".maps");

/* host tid -> the off-CPU state of a tracked thread (pyagent.h says how it is kept). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct pa_off_cpu_thread);
} pa_off_cpu_threads SEC(".maps");

/* Records: struct pa_sample_hdr followed by nframes x struct pa_frame. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* set by userspace */
} pa_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by userspace: number of possible CPUs */
	__type(key, __u32);
	__type(value, struct pa_scratch);
} pa_scratch SEC(".maps");

/* The program's log: one entry per CPU holding every counter, so a run looks its counters up
 * once instead of once per counter. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[PA_CNT__COUNT]);
} pa_counters SEC(".maps");

/* This CPU's counters (NULL only if the map is broken: then nothing is counted). */
static __always_inline __u64 *pa_counters_here(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&pa_counters, &zero);
}

/* Adds `n` to counter `id`. Plain add: a perf_event program never nests on a CPU. */
static __always_inline void pa_count_add(__u64 *cnt, enum pa_counter id, __u64 n)
{
	if (cnt)
		cnt[id] += n;
}

static __always_inline void pa_count(__u64 *cnt, enum pa_counter id)
{
	pa_count_add(cnt, id, 1);
}

/* Sets `bits` in the notice of `tgid`, and counts it when that changed the map (the agent reads
 * the map only when the count moved). Not atomic: two CPUs racing on one entry may lose a bit,
 * and a full map drops the notice; the agent's slow periodic pass covers both. The count is an
 * atomic add: a tracepoint program here can be interrupted by the sampler on the same CPU. */
static __always_inline void pa_notice(__u32 tgid, __u32 bits)
{
	__u32 *v = bpf_map_lookup_elem(&pa_notices, &tgid);
	__u64 *cnt;

	if (v) {
		if ((*v & bits) == bits)
			return;
		*v |= bits;
	} else if (bpf_map_update_elem(&pa_notices, &tgid, &bits, BPF_NOEXIST)) {
		return;
	}
	cnt = pa_counters_here();
	if (cnt)
		__sync_fetch_and_add(&cnt[PA_CNT_NOTICES], 1);
}

#endif /* PA_MAPS_BPF_H */
