/* SPDX-License-Identifier: Apache-2.0 OR GPL-2.0 */
/*
 * pyagent.h: the contract between the BPF sampler (ebpf/sampler.bpf.c) and userspace.
 *
 * The single source of truth for the ring-buffer record, the map keys and values, the counter ids
 * and the limits. common/src/lib.rs mirrors every item with layout asserts, and the drift test
 * common/tests/layout.rs compiles a probe against this header and compares sizes, offsets and
 * values with the Rust mirror: change this file, then the mirror, then run `cargo test -p
 * pyagent-common`.
 *
 * Rules (style.md section 3): fixed-width fields only, explicit padding, every name prefixed.
 */
#ifndef PYAGENT_H
#define PYAGENT_H

#include <linux/types.h>

/* ---- Limits ----------------------------------------------------------------------------- */

/* Frames recorded per sample at most (also the `bpf_loop` bound of the walk). */
#define PA_MAX_FRAMES 1024
/*
 * Bytes of each _PyInterpreterFrame read in one bpf_probe_read_user. Every frame field the walk
 * uses must lie inside it: the frame header is 80 bytes in 3.11-3.13 and 88 in 3.14+ (owner at
 * 69/70/74/78), so 80 covers every supported layout and never reads past a frame.
 */
#define PA_FRAME_READ_BYTES 80
/*
 * Bytes of each PyFrameObject read (3.6-3.10, PA_PROC_FRAME_OBJECTS): `f_lasti` lies at 96-120,
 * and a frame object (a heap object of 360+ bytes) is never shorter.
 */
#define PA_FRAME_OBJECT_READ_BYTES 128
/*
 * Bytes of the PyThreadState read in one bpf_probe_read_user, starting at the lowest offset the
 * walk uses: current_frame (or cframe), base_frame, last_profiled_frame and its sequence must all
 * lie in this window (3.15: 72..104).
 */
#define PA_TSTATE_READ_BYTES 64

/* ---- pa_procs: host tgid (__u32) -> struct pa_proc ----------------------------------------- */

/* current_frame is reached through tstate->cframe (3.11, 3.12). */
#define PA_PROC_CFRAME (1u << 0)
/*
 * Stop at tstate->last_profiled_frame and report the anchor (3.15 frame-cache protocol).
 * The program only reads the anchor; it cannot write it: bpf_probe_write_user is refused to
 * every program type on our kernels (lockdown=integrity is forced by their configuration: the
 * verifier says "program of this type cannot use helper bpf_probe_write_user#36"), and on any
 * kernel it returns -EPERM in interrupt context (`in_interrupt()` check), which is where a
 * cpu-clock perf_event program runs. Whoever moves the anchor does so from userspace.
 */
#define PA_PROC_ANCHOR (1u << 1)
/* Read tstate->base_frame and report it (3.15: the bottom sentinel of every complete chain). */
#define PA_PROC_BASE_FRAME (1u << 2)
/*
 * The process publishes OpenTelemetry's thread context (OTEP 4947): read the span the
 * interrupted thread is in, at the tick, through pa_proc.otel. Processes that publish none do
 * not have the bit and pay nothing.
 */
#define PA_PROC_TRACE_CONTEXT (1u << 3)
/* Also copy the user registers, a window of the user stack and the kernel stack into each
 * on-CPU record (PA_SAMPLE_NATIVE): userspace unwinds them into native frames. */
#define PA_PROC_NATIVE (1u << 4)
/* 3.11: the byte right before the owner is is_entry; each frame records it (pa_frame.is_entry),
 * so that userspace knows where C-level evaluations begin (native stacks cut the Python stack
 * there). Later versions mark those boundaries with entry frames instead. */
#define PA_PROC_IS_ENTRY (1u << 5)
/* 3.6-3.10: frames are PyFrameObjects on the heap, read PA_FRAME_OBJECT_READ_BYTES at a time,
 * each by itself (they do not lie next to their callers). */
#define PA_PROC_FRAME_OBJECTS (1u << 6)
#define PA_PROC__ALL                                                                              \
	(PA_PROC_CFRAME | PA_PROC_ANCHOR | PA_PROC_BASE_FRAME | PA_PROC_TRACE_CONTEXT |            \
	 PA_PROC_NATIVE | PA_PROC_IS_ENTRY | PA_PROC_FRAME_OBJECTS)

/*
 * The OTEP 4947 record the thread-local otel_thread_ctx_v1 points to (packed): trace id
 * u8[16] at 0, span id u8[8] at 16, valid u8 at 24 (1: the record may be used), trace flags,
 * attributes. The program reads the trace id, the span id and `valid` in one read from the
 * record's start.
 */
#define PA_OTEL_SPAN_ID_OFFSET 16
#define PA_OTEL_VALID_OFFSET 24
#define PA_OTEL_READ_BYTES 25

/*
 * Where a thread's otel_thread_ctx_v1 is, from its thread pointer (x86_64: task->thread.fsbase,
 * glibc's pthread_t; aarch64: TPIDR_EL0, ebpf/arch_arm64.bpf.h). The offsets come from glibc's
 * own libthread_db descriptors and its link_map (agent/src/discovery/thread_context.rs).
 * static_offset != 0: the publisher's TLS block is in static TLS, at the thread pointer minus
 * this (x86_64) or plus it (aarch64). 0: it is reached through the DTV, `*(tp + dtv_in_pthread)`
 * (aarch64: `*tp`), whose entry module_id (dtv_entry_size bytes each, the entry count at
 * dtv[-1]) holds the block pointer at pointer_in_entry. The variable is offset_in_block into the
 * block.
 */
struct pa_otel_ctx {
	__u64 static_offset;
	__u64 offset_in_block;
	__u32 dtv_in_pthread;
	__u32 dtv_entry_size;
	__u32 pointer_in_entry;
	__u32 module_id;
};
_Static_assert(sizeof(struct pa_otel_ctx) == 32, "struct pa_otel_ctx layout");

/*
 * How to walk one process's frame chain. All offsets are byte offsets, spelled after the
 * _Py_DebugOffsets groups (thread_state.*, interpreter_frame.*).
 */
struct pa_proc {
	/* Chosen by userspace (e.g. process start time); copied into every record of the process. */
	__u64 generation;
	/* Bits to clear from the executable/f_code pointer: 3 on 3.14+, 0 before. */
	__u64 executable_tag_mask;
	/* PA_PROC_* */
	__u32 flags;
	/* PyThreadState: current_frame (3.13+), or the cframe pointer when PA_PROC_CFRAME is set. */
	__u32 thread_state_current_frame;
	/* _PyCFrame: current_frame (used only with PA_PROC_CFRAME). */
	__u32 cframe_current_frame;
	/* PyThreadState: base_frame (used only with PA_PROC_BASE_FRAME). */
	__u32 thread_state_base_frame;
	/* PyThreadState: last_profiled_frame and last_profiled_frame_seq (only with PA_PROC_ANCHOR). */
	__u32 thread_state_last_profiled_frame;
	__u32 thread_state_last_profiled_frame_seq;
	/* _PyInterpreterFrame: previous, f_executable (f_code before 3.13), instr_ptr (prev_instr
	 * before 3.13), owner (one byte). */
	__u32 interpreter_frame_previous;
	__u32 interpreter_frame_executable;
	__u32 interpreter_frame_instr_ptr;
	__u32 interpreter_frame_owner;
	/* Where the GIL says who holds it (PA_GIL_*): absolute addresses of the main interpreter's
	 * `locked` int and `last_holder` pointer (PA_GIL_HOLDER, and with PA_GIL_THREAD_FLAG where
	 * off-CPU records name the holder of the GIL a thread waits for; 0: not known), and the
	 * offset of the thread state's `holds_gil` int (PA_GIL_THREAD_FLAG). */
	__u64 gil_locked_addr;
	__u64 gil_holder_addr;
	__u32 gil_model;
	__u32 thread_state_holds_gil;
	/* Where each thread's OTEP 4947 context is (only with PA_PROC_TRACE_CONTEXT). */
	struct pa_otel_ctx otel;
	/* Where the GIL's futex words (its mutex and conditions) begin: a thread blocked on a
	 * futex within PA_GIL_WAIT_BYTES from here waits for the GIL (0: not known). */
	__u64 gil_waits_addr;
	/* Where the coroutine frame of the asyncio task a thread runs is (3.14+, with task-aware
	 * stacks, once the program has imported asyncio; 0: not read): the thread state's
	 * running task at _PyThreadStateImpl + thread_state_running_task (the _asyncio module's
	 * .AsyncioDebug table), its coroutine at task + task_coro, and the coroutine's frame,
	 * which lives inside it, at coroutine + coroutine_iframe (_Py_DebugOffsets). Records copy
	 * that frame's address (PA_SAMPLE_TASK), and whether the task's awaited-by pointer at
	 * task + task_awaited_by is set (PA_SAMPLE_TASK_AWAITED). */
	__u32 thread_state_running_task;
	__u32 task_coro;
	__u32 coroutine_iframe;
	__u32 task_awaited_by;
};
_Static_assert(sizeof(struct pa_proc) == 136, "struct pa_proc layout");

/* How a process's records learn whether the sampled thread holds the GIL. */
#define PA_GIL_NONE 0 /* free-threaded (no GIL), or unknown: records carry no GIL bits */
#define PA_GIL_HOLDER 1 /* 3.11-3.14: held when `locked` != 0 and `last_holder` is the tstate */
#define PA_GIL_THREAD_FLAG 2 /* 3.15: held when the tstate's `holds_gil` int != 0 */

/* ---- pa_threads: host tid (__u32) -> PyThreadState address (__u64) -------------------------- */

/* ---- pa_proc_slots, pa_thread_slots: direct-mapped ARRAYs in front of the two hash maps ---- */
/*
 * Slot `tgid % PA_PROC_SLOTS` (`tid % PA_THREAD_SLOTS`) holds the one tracked process (thread)
 * that falls in it, an empty key (0) when none does, or PA_SLOT_SHARED when several do: only
 * then does the program look in the hash map. An array slot is one inlined load where a hash
 * lookup is a call, a hash and two cold cache lines. The key is the last field: userspace
 * zeroes a slot before writing a new occupant, and the kernel copies a value upwards, so a
 * reader that sees the key sees the value written before it.
 */
#define PA_PROC_SLOTS 4096
#define PA_THREAD_SLOTS 4096
#define PA_SLOT_SHARED 0xffffffffu

struct pa_proc_slot {
	struct pa_proc proc;
	__u32 tgid;
	__u32 _pad;
};
_Static_assert(sizeof(struct pa_proc_slot) == 144, "struct pa_proc_slot layout");

struct pa_thread_slot {
	__u64 tstate;
	__u32 tid;
	__u32 _pad;
};
_Static_assert(sizeof(struct pa_thread_slot) == 16, "struct pa_thread_slot layout");

/* ---- pa_thread_lists: host tgid (__u32) -> struct pa_thread_list ------------------------------ */
/*
 * Where the program finds a thread the agent has not registered yet: it walks the interpreter's
 * thread list from its head (CPython pushes new thread states there, so a new thread is among
 * the first) for at most pa_thread_search_max entries and takes the one whose native_thread_id
 * is the interrupted task's tid in the process's PID namespace. Without this, a thread that
 * lives shorter than the agent's refresh (100 ms drains) is never sampled.
 */
#define PA_THREAD_SEARCH_MAX 64

struct pa_thread_list {
	/* Address of the main interpreter's threads.head pointer. */
	__u64 threads_head_addr;
	/* The process's PID namespace (stat of /proc/PID/ns/pid: st_dev, st_ino), for
	 * bpf_get_ns_current_pid_tgid: native_thread_id is a tid in that namespace. */
	__u64 pidns_dev;
	__u64 pidns_ino;
	/* PyThreadState: next, native_thread_id (3.11+), or thread_id (3.6-3.10: a pthread_t). */
	__u32 thread_state_next;
	__u32 thread_state_native_thread_id;
	/* 3.6-3.10 (non-zero): the tid lies at this offset of the C library's thread descriptor,
	 * which thread_state_native_thread_id names the pointer to. */
	__u32 pthread_tid;
	__u32 _pad;
};
_Static_assert(sizeof(struct pa_thread_list) == 40, "struct pa_thread_list layout");

/* ---- pa_samples ring buffer: struct pa_sample_hdr, then nframes x struct pa_frame ----------- */

/* The walk reached a frame whose `previous` is 0. */
#define PA_SAMPLE_COMPLETE (1u << 0)
/* The walk stopped at the frame-count bound with `previous` != 0. */
#define PA_SAMPLE_TRUNCATED (1u << 1)
/* Reading the next frame failed (not resident, unmapped, torn): the chain is cut, not complete. */
#define PA_SAMPLE_READ_FAILED (1u << 2)
/* The last recorded frame is the anchor (tstate->last_profiled_frame). */
#define PA_SAMPLE_ANCHOR_HIT (1u << 3)
/* Complete, and the last frame is tstate->base_frame (only with PA_PROC_BASE_FRAME). */
#define PA_SAMPLE_REACHED_BASE (1u << 4)
/* A frame's `previous` is the frame itself or one of the few frames recorded just before it: the
 * chain loops (corrupt memory), so the walk stopped there rather than repeat the loop. */
#define PA_SAMPLE_CYCLIC (1u << 5)
/* Taken as the thread left the CPU to wait (sched_switch, the thread blocked: not preempted).
 * `wait` says what in, `wait_addr` the futex word for PA_WAIT_FUTEX, `time_ns` when. */
#define PA_SAMPLE_OFF_CPU (1u << 6)
/* No stack: the thread of an earlier PA_SAMPLE_OFF_CPU record runs again at `time_ns`. */
#define PA_SAMPLE_WAKE (1u << 7)
/* The process has a GIL and it was read: PA_SAMPLE_GIL_HELD says whether this thread held it
 * when the record was taken (for an off-CPU record: as it blocked). */
#define PA_SAMPLE_GIL_KNOWN (1u << 8)
#define PA_SAMPLE_GIL_HELD (1u << 9)
/* The thread was in a span (PA_PROC_TRACE_CONTEXT, a valid record): `span_id` is its id. */
#define PA_SAMPLE_SPAN (1u << 10)
/* A native section (struct pa_native_hdr, kernel_frames x __u64, stack_bytes of user stack)
 * follows the frames. */
#define PA_SAMPLE_NATIVE (1u << 11)
/* The thread was running an asyncio task at the tick: `task_frame` is its coroutine's frame
 * (processes with pa_proc.thread_state_running_task). */
#define PA_SAMPLE_TASK (1u << 12)
/* With PA_SAMPLE_TASK: something awaited the task at the tick (it is not a root task). */
#define PA_SAMPLE_TASK_AWAITED (1u << 13)

/* What an off-CPU thread waits in, from the system call it blocked in (the architecture's
 * numbers: pa_syscall_wait in ebpf/arch_*.bpf.h). */
#define PA_WAIT_NONE 0 /* on-CPU records */
#define PA_WAIT_OTHER 1 /* any other call, or none (a page fault, a signal stop) */
#define PA_WAIT_IO 2 /* read/write/poll/select/epoll/accept/connect/recv/send... on descriptors */
#define PA_WAIT_SLEEP 3 /* nanosleep, clock_nanosleep, pause; select/poll without descriptors */
#define PA_WAIT_FUTEX 4 /* futex: a lock, a condition, or the GIL (userspace tells by address) */

struct pa_sample_hdr {
	/* Host (initial pid namespace) tgid and tid of the interrupted task. */
	__u32 pid;
	__u32 tid;
	/* PyThreadState address from pa_threads. */
	__u64 tstate;
	/* pa_proc.generation at sampling time. */
	__u64 generation;
	/* last_profiled_frame and its sequence, read before the walk (0 without PA_PROC_ANCHOR). */
	__u64 anchor_frame;
	__u64 anchor_seq;
	/* tstate->base_frame (0 without PA_PROC_BASE_FRAME). */
	__u64 base_frame;
	__u32 cpu;
	/* Number of struct pa_frame following this header (<= PA_MAX_FRAMES). */
	__u32 nframes;
	/* PA_SAMPLE_* */
	__u32 flags;
	/* PA_WAIT_* (PA_SAMPLE_OFF_CPU records; PA_WAIT_NONE otherwise). */
	__u32 wait;
	/* bpf_ktime_get_ns() (CLOCK_MONOTONIC) when the record was taken. */
	__u64 time_ns;
	/* The futex word waited on (PA_WAIT_FUTEX), 0 otherwise. */
	__u64 wait_addr;
	/* PA_SAMPLE_OFF_CPU records: the thread's running total of waits timed but not walked
	 * (pa_off_cpu_threads.carried_ns) as this wait began. Its growth since the previous record
	 * went to waits that repeated that record's (pyagent.h, pa_off_cpu_threads): userspace adds
	 * it to that record's stack and reason. On-CPU records (with off-CPU on): nanoseconds the
	 * thread spent on a run queue, runnable after leaving the CPU, since its previous on-CPU
	 * record; userspace adds them to this record's stack as a wait for a CPU. */
	__u64 carried_ns;
	/* The trace and span the thread was in, as the OTEP 4947 record has them (PA_SAMPLE_SPAN;
	 * zeros otherwise). */
	__u8 trace_id[16];
	__u8 span_id[8];
	/* Off-CPU records of a thread blocked on the GIL's futex, while another thread held it:
	 * that thread state, and the code object (tag bits cleared) its current frame ran at the
	 * switch (0 when that read failed). Zeros otherwise. */
	__u64 gil_holder;
	__u64 gil_holder_code;
	/* PA_SAMPLE_TASK: the frame of the coroutine of the asyncio task the thread ran, read at
	 * the tick (0 otherwise): which of the record's frames begins the task's own, even when the
	 * task has ended before the agent reads the record. */
	__u64 task_frame;
};
_Static_assert(sizeof(struct pa_sample_hdr) == 136, "struct pa_sample_hdr layout");

/* How many bytes from pa_proc.gil_waits_addr hold the GIL's futex words: a futex in there is a
 * wait for the GIL. 3.7+ keep the whole _gil_runtime_state within 32 bytes before its `locked`
 * word and 256 after it (interval and last holder before; switch number, condition and mutex
 * after); 3.6's separate statics (the mutexes and conditions) lie within 256 bytes. */
#define PA_GIL_WAIT_BYTES 288

/* One _PyInterpreterFrame as read from the target; userspace symbolizes it later. */
struct pa_frame {
	/* Address of the _PyInterpreterFrame. */
	__u64 addr;
	/* f_executable / f_code with pa_proc.executable_tag_mask cleared. */
	__u64 executable;
	/* instr_ptr (3.13+) / prev_instr (3.11, 3.12), raw. */
	__u64 instr_ptr;
	/* The frame's owner byte (FRAME_OWNED_BY_*). */
	__u32 owner;
	/* With PA_PROC_IS_ENTRY (3.11): the frame's is_entry byte (the first Python frame of a
	 * C-level evaluation); 0 otherwise. */
	__u32 is_entry;
};
_Static_assert(sizeof(struct pa_frame) == 32, "struct pa_frame layout");

/*
 * Frames of a short record. The program reserves one short record in the ring buffer and walks
 * straight into it: a walk that stops within PA_SHORT_FRAMES frames (the 3.15 anchor, shallow
 * stacks) touches no scratch memory and is not copied. Deeper walks move to the per-CPU scratch
 * and are output with their exact length. A short record is always PA_SHORT_RECORD_BYTES long,
 * whatever its nframes (<= PA_SHORT_FRAMES).
 */
#define PA_SHORT_FRAMES 8

struct pa_short_record {
	struct pa_sample_hdr hdr;
	struct pa_frame frames[PA_SHORT_FRAMES];
};
#define PA_SHORT_RECORD_BYTES (136 + 32 * PA_SHORT_FRAMES)
_Static_assert(sizeof(struct pa_short_record) == PA_SHORT_RECORD_BYTES, "struct pa_short_record layout");

/* The largest record: header plus PA_MAX_FRAMES frames. */
struct pa_record {
	struct pa_sample_hdr hdr;
	struct pa_frame frames[PA_MAX_FRAMES];
};
_Static_assert(sizeof(struct pa_record) == 136 + 32 * PA_MAX_FRAMES, "struct pa_record layout");

/* ---- Native section of a PA_SAMPLE_NATIVE record ------------------------------------------ */
/*
 * After the frames: the user registers at the tick (from the perf event when it interrupted user
 * mode, else the ones saved at the thread's entry into the kernel), the kernel stack when the
 * tick interrupted the kernel, and the user stack from sp up, copied a page at a time until
 * PA_NATIVE_STACK_BYTES or the first page that cannot be read (the top of the stack, or a page
 * not resident). Userspace unwinds the copy with the objects' CFI (.eh_frame).
 */
#define PA_NATIVE_STACK_BYTES 16384
#define PA_KERNEL_FRAMES 32

struct pa_native_hdr {
	/* User instruction pointer, stack pointer, frame pointer (rbp; aarch64: x29). */
	__u64 ip;
	__u64 sp;
	__u64 bp;
	/* Kernel return addresses following this header (innermost first, <= PA_KERNEL_FRAMES). */
	__u32 kernel_frames;
	/* Bytes of user stack, copied from `sp` up, following the kernel frames. */
	__u32 stack_bytes;
};
_Static_assert(sizeof(struct pa_native_hdr) == 32, "struct pa_native_hdr layout");

/* The largest native section. */
#define PA_NATIVE_MAX_BYTES (32 + 8 * PA_KERNEL_FRAMES + PA_NATIVE_STACK_BYTES)

/* ---- pa_off_cpu_threads: HASH host tid (__u32) -> struct pa_off_cpu_thread ------------------ */
/*
 * One entry per tracked thread that has blocked since it was registered: created by the
 * program at the thread's first wait, deleted by userspace when the thread is unregistered.
 * Walking the stack of every wait costs microseconds, and each walk is two records for
 * userspace to resolve; a host of idle workers blocks tens of thousands of times a second. So
 * a wait that repeats the thread's last recorded one, in the same call on the same futex word,
 * is only timed, when either
 *   - it begins less than pa_off_cpu_min_gap_ns after that recorded wait (a thread blocking on
 *     one thing again and again), or
 *   - it waits from the same place (pa_wait_place: the same top Python frame and caller, at the
 *     same instructions, in the same span), not for the GIL (whose record names the holder),
 *     and begins less than pa_off_cpu_max_carry_ns after the recorded wait (a worker that
 *     sleeps or polls in a loop).
 * Its time is added to carried_ns, a running total that userspace reads from the thread's next
 * record (pa_sample_hdr.carried_ns) or from this map, and counts under the last recorded wait's
 * stack. A wait on anything else, from anywhere else, is walked.
 */
/* The current wait's stack was recorded: its wake-up is recorded too (PA_SAMPLE_WAKE). */
#define PA_OFF_CPU_RECORDED (1u << 0)

struct pa_off_cpu_thread {
	/* ktime of the thread's last recorded wait (0: none yet). */
	__u64 last_recorded_ns;
	/* ktime the current unrecorded wait began (0: not in one). Cleared as carried_ns grows by
	 * the wait: userspace reads the entry until two copies agree. */
	__u64 blocked_ns;
	/* Time of every unrecorded wait of the thread so far: a running total, never reset (the
	 * entry starts at 0 with the thread's first wait). */
	__u64 carried_ns;
	/* What the last recorded wait waited in: its futex word, and its PA_WAIT_* class. */
	__u64 last_wait_addr;
	__u32 last_wait;
	/* Host tgid of the thread (an entry of another tgid is a reused tid: reset). */
	__u32 tgid;
	/* PA_OFF_CPU_* */
	__u32 flags;
	__u32 _pad;
	/* ktime the thread left the CPU still runnable (preempted, or yielding), 0 once it runs
	 * again: its wait for a CPU. */
	__u64 queued_since_ns;
	/* Run-queue time of those waits not yet carried by an on-CPU record. */
	__u64 queued_ns;
	/* Where the last recorded wait waited from (pa_wait_place; 0: unknown). */
	__u64 last_place;
};
_Static_assert(sizeof(struct pa_off_cpu_thread) == 72, "struct pa_off_cpu_thread layout");

/* ---- Stages, for measuring what each part of a run costs -------------------------------- */
/*
 * With the knob pa_stop_after set to one of these, the program returns right after that stage
 * (a reserved record is discarded). 0, the default, runs everything; the verifier drops the
 * checks of a knob that is 0, so they cost nothing there.
 */
#define PA_STAGE_ENTERED 1 /* nothing done yet: what running any program costs */
#define PA_STAGE_COUNTED 2 /* run counted (the per-CPU counters looked up) */
#define PA_STAGE_PROCESS 3 /* process found (pa_proc_slots, or pa_procs for a shared slot) */
#define PA_STAGE_THREAD 4 /* thread state found (pa_thread_slots, or pa_threads) */
#define PA_STAGE_THREAD_STATE 5 /* thread-state window read, current frame known */
#define PA_STAGE_RESERVED 6 /* short record reserved, header filled */
#define PA_STAGE_SPAN 7 /* the span read (PA_PROC_TRACE_CONTEXT; nothing to do without it) */
#define PA_STAGE_SHORT_WALK 8 /* the first PA_SHORT_FRAMES frames walked */
#define PA_STAGE__LAST PA_STAGE_SHORT_WALK

/* ---- pa_notices: HASH host tgid -> __u32 of PA_NOTICE_* bits ------------------------------- */
/* Processes the agent should look at again; it takes (reads and deletes) the entries. */

/* A tracked process ran a thread that is not in pa_threads at all (a thread registered with
 * thread state 0, known to run no Python, sends none). */
#define PA_NOTICE_UNKNOWN_THREAD (1u << 0)
/* The process called execve: it may run another program now (sched_process_exec). */
#define PA_NOTICE_EXEC (1u << 1)
/* A new process forked by a tracked one (sched_process_fork): a Python process that did not
 * exec, like a pre-forked worker. The notice is the child's. */
#define PA_NOTICE_FORK (1u << 2)
/* A tracked process's main thread exited (sched_process_exit). */
#define PA_NOTICE_EXIT (1u << 3)
/* Another thread of a tracked process exited (sched_process_exit): its pa_threads entry is
 * stale, and the agent re-reads the thread list. */
#define PA_NOTICE_THREAD_EXIT (1u << 4)

/* ---- pa_counters: PERCPU_ARRAY, one entry of __u64[PA_CNT__COUNT] by enum pa_counter ---- */

enum pa_counter {
	/* BPF program runs (every perf event). */
	PA_CNT_RUNS = 0,
	/* Records written to the ring buffer. */
	PA_CNT_SAMPLES_EMITTED = 1,
	/* Interrupted the idle task (pid 0). */
	PA_CNT_IDLE = 2,
	/* The tgid is not in pa_procs. */
	PA_CNT_NOT_TRACKED = 3,
	/* The tid is registered with tstate 0: a thread known to run no Python. (Unregistered
	 * tids count PA_CNT_THREAD_FOUND or PA_CNT_THREAD_UNKNOWN.) */
	PA_CNT_NO_THREAD_STATE = 4,
	/* current_frame is 0: the thread runs no Python code. */
	PA_CNT_NO_CURRENT_FRAME = 5,
	/* Reading the thread state failed. */
	PA_CNT_READ_FAIL_TSTATE = 6,
	/* Reading tstate->cframe->current_frame failed (3.11, 3.12). */
	PA_CNT_READ_FAIL_CFRAME = 7,
	/* Reading a frame failed (sample emitted with PA_SAMPLE_READ_FAILED). */
	PA_CNT_READ_FAIL_FRAME = 8,
	/* Samples cut at the frame-count bound. */
	PA_CNT_TRUNCATED = 9,
	/* Samples whose walk stopped at the anchor. */
	PA_CNT_ANCHOR_HIT = 10,
	/* Samples whose walk reached a frame with previous == 0. */
	PA_CNT_COMPLETE = 11,
	/* Frames recorded in emitted samples. */
	PA_CNT_FRAMES = 12,
	/* bpf_ringbuf_output failed (ring buffer full): sample dropped. */
	PA_CNT_RINGBUF_DROPPED = 13,
	/* Records submitted with a forced consumer wakeup (buffer past the threshold). */
	PA_CNT_WAKEUP_FORCED = 14,
	/* pa_proc offsets outside the read windows: sample dropped. */
	PA_CNT_BAD_CONFIG = 15,
	/* The per-CPU scratch slot was missing (pa_scratch smaller than the CPU count). */
	PA_CNT_NO_SCRATCH = 16,
	/* A thread not in pa_threads, found in its interpreter's thread list and walked. */
	PA_CNT_THREAD_FOUND = 17,
	/* A thread not in pa_threads and not found in the first pa_thread_search_max entries of
	 * its interpreter's thread list (or the process has no pa_thread_lists entry): sample
	 * lost. Threads registered as running no Python are not counted here. */
	PA_CNT_THREAD_UNKNOWN = 18,
	/* Walks stopped at a frame chain that loops back (PA_SAMPLE_CYCLIC). */
	PA_CNT_CYCLIC_CHAIN = 19,
	/* Context switches seen by the off-CPU program (every task on the host). */
	PA_CNT_SWITCHES = 20,
	/* Tracked Python threads that left the CPU to wait, their stack recorded. */
	PA_CNT_OFF_CPU_WALKS = 21,
	/* Off-CPU threads that ran again (PA_SAMPLE_WAKE records written). */
	PA_CNT_WAKES = 22,
	/* pa_off_cpu full: an off-CPU thread's start was not kept, its wait is lost. */
	PA_CNT_OFF_CPU_MAP_FULL = 23,
	/* A tracked thread's wait repeated its last recorded one (pa_off_cpu_threads): timed only,
	 * its time counted under that wait's stack. */
	PA_CNT_OFF_CPU_CARRIED = 24,
	/* Reading a published thread context (PA_PROC_TRACE_CONTEXT) failed: the record is
	 * written without its span. A thread in no span, or whose record is not valid, is not
	 * counted. */
	PA_CNT_SPAN_READ_FAIL = 25,
	/* Records with a native section (PA_SAMPLE_NATIVE). */
	PA_CNT_NATIVE_STACKS = 26,
	/* Native sections whose user-stack copy stopped before PA_NATIVE_STACK_BYTES at a page
	 * that could not be read (usually the top of the stack: not an error). */
	PA_CNT_NATIVE_STACK_SHORT = 27,
	/* A native process's tick without user registers (no task pt_regs): Python frames only. */
	PA_CNT_NATIVE_NO_REGS = 28,
	/* Notices set in pa_notices (a new entry or a new bit): the agent looks the map through
	 * only when this moved, since walking an empty hash map scans all its buckets. */
	PA_CNT_NOTICES = 29,
	PA_CNT__COUNT = 30,
};

#endif /* PYAGENT_H */
