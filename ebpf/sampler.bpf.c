// SPDX-License-Identifier: GPL-2.0
/*
 * sampler.bpf.c: the one BPF object the agent loads. Its programs share maps and load-time
 * knobs, so they are built as one unit; each kind lives in its own file: oncpu.bpf.c (the
 * cpu-clock tick), offcpu.bpf.c (context switches), tasks.bpf.c (execs, forks, exits), over
 * record.bpf.h (what recording a stack needs) and walk.bpf.h (the frame walk).
 *
 * In: pa_procs (tgid -> walk configuration), pa_threads (tid -> PyThreadState address), each
 * behind a direct-mapped array (pa_proc_slots, pa_thread_slots) that answers most lookups;
 * pa_thread_lists (tgid -> where to search for a thread not registered yet).
 * Out: one pa_samples record per walk (struct pa_sample_hdr + nframes x struct pa_frame, raw
 * addresses for userspace to symbolize; a short record when the walk fits one), pa_counters
 * (one counter per exit, the program's log), pa_notices (processes to look at again: a thread
 * the agent has not registered; from the tracepoint programs at the end, an execve, a tracked
 * process's fork and its threads' exits, the main one's told apart).
 * Layouts: common/include/pyagent.h. GPL: bpf_probe_read_user is GPL-only.
 */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#include "oncpu.bpf.c"
#include "offcpu.bpf.c"
#include "tasks.bpf.c"
