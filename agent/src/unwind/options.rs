//! The unwinder's knobs ([`UnwindOptions`]) and counters ([`UnwindStats`]).

use std::collections::BTreeMap;

use super::{LossCounts, Unwinder};

/// Unwinder knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwindOptions {
    /// emit `<native>` where Python was re-entered from C
    pub native: bool,
    /// emit `<GC>` where the collector runs
    pub gc: bool,
    /// use the 3.15 frame cache (writes `last_profiled_frame` into the target)
    pub frame_cache: bool,
    /// most frames read per thread
    pub max_depth: usize,
    /// most reads of one thread's stack per sample: a walk the target moved under is read
    /// again, up to this many times (1: never re-read)
    pub read_attempts: u32,
    /// keep a walk whose top frame moved while it was read, when its chain is otherwise sound
    /// (see [`Unwinder::sample_thread`]); false re-reads it like any torn walk
    pub keep_moved_top: bool,
    /// read each thread's OpenTelemetry trace context (OTEP 4947) with its stack, where the
    /// process publishes one (see `trace_context`)
    pub trace_context: bool,
    /// task-aware stacks: a thread running an asyncio task shows the task and the tasks
    /// awaiting it (CPython 3.14+; see `asyncio`)
    pub async_tasks: bool,
    /// with `async_tasks`: which tasks a tick samples (the running ones, or every task)
    pub async_mode: AsyncMode,
}

/// Which asyncio tasks a tick samples, with task-aware stacks on (CPython's sampler's
/// `--async-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AsyncMode {
    /// Each thread's sample, attributed to the task it runs.
    #[default]
    Running,
    /// Also one sample of each waiting task that no other task awaits (a leaf of the task
    /// graph), at its await point, under its awaiters (userspace sampler only).
    All,
}

impl Default for UnwindOptions {
    fn default() -> Self {
        UnwindOptions {
            native: false,
            gc: true,
            frame_cache: true,
            max_depth: 4096,
            // A stack that changes every few dozen nanoseconds (a tight recursion) is still at
            // the depth it was read at in about 1 read in `depth`: 128 keep 95% of a 20-deep
            // one's ticks at ~5 µs a read.
            read_attempts: 128,
            keep_moved_top: true,
            trace_context: true,
            async_tasks: false,
            async_mode: AsyncMode::Running,
        }
    }
}

/// Counters of one [`Unwinder`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UnwindStats {
    /// calls to `sample`
    pub samples: u64,
    /// thread stacks produced
    pub thread_samples: u64,
    /// frames read from memory
    pub frames_read: u64,
    /// frames taken from the frame cache
    pub frames_cached: u64,
    /// frame cache: top frame unchanged, whole stack from the cache
    pub cache_full_hits: u64,
    /// frame cache: read down to the anchor, rest from the cache
    pub cache_partial_hits: u64,
    /// frame cache: anchor found but the sequence check failed, walked on
    pub cache_misses: u64,
    /// BPF records walked whole (no anchor) that repeated their thread's last stack but for the
    /// top frame's instruction: only its line was looked up
    pub records_repeated: u64,
    /// BPF records walked whole (no anchor) whose every frame was resolved
    pub records_resolved: u64,
    /// stacks cut at the depth bound
    pub truncated: u64,
    /// external (BPF) walks dropped because a read failed or the chain was inconsistent
    pub torn: u64,
    /// sampled threads that yielded no stack, by reason (after every re-read)
    pub lost: LossCounts,
    /// re-reads of a thread's stack after a walk the target moved under
    pub rereads: u64,
    /// stacks kept although their top frame moved while they were read (see
    /// [`UnwindOptions::keep_moved_top`]): sound chains, not proven to be one instant's
    pub unverified: u64,
    /// walks the target moved under, kept as the frames a second read proved (from the bottom
    /// up) under a `[stack moved while read]` frame
    pub proven_roots: u64,
    /// frames whose executable is not a code object (the sample is rejected as torn)
    pub non_code_frames: u64,
    /// frames that returned while a walk read them (3.14+ clear the executable), named by the
    /// code object their instruction pointer is in; their stacks count as unverified
    pub popped_frames_named: u64,
    /// anchor writes made
    pub anchor_writes: u64,
    /// anchor writes after which the walked frames had changed (the stored stack is dropped)
    pub anchor_write_races: u64,
    /// 3.15 walks whose stack the frame cache could not hold (its thread or depth bound, a
    /// truncated walk): the thread's anchor is cleared, so BPF walks it whole
    pub uncached_walks: u64,
    /// task-aware stacks: samples of a thread running an asyncio task, attributed to it
    pub task_samples: u64,
    /// task-aware stacks: samples of a thread running a task that could not be attributed
    /// (the task's frame was not on the walked stack, or the task could not be read); kept as
    /// the thread's plain stack
    pub task_unattributed: u64,
    /// task-aware stacks (eBPF): samples of a task that ended before its record was read,
    /// marked by its coroutine (`<task COROUTINE>`), without its awaiters or its name
    pub task_ended: u64,
    /// `--async-mode all`: samples of waiting tasks
    pub task_waiting_samples: u64,
    /// task-aware stacks: task objects, task lists, names or coroutine chains that made no
    /// sense when read (freed under the read, or not a task), and waiting tasks that changed
    /// while read: the walk stopped, nothing shown
    pub task_read_errors: u64,
}

impl std::ops::AddAssign for UnwindStats {
    /// Sums the counters of two unwinders (a host's processes, live and exited).
    fn add_assign(&mut self, o: UnwindStats) {
        let UnwindStats {
            samples,
            thread_samples,
            frames_read,
            frames_cached,
            cache_full_hits,
            cache_partial_hits,
            cache_misses,
            records_repeated,
            records_resolved,
            truncated,
            torn,
            lost,
            rereads,
            unverified,
            proven_roots,
            non_code_frames,
            popped_frames_named,
            anchor_writes,
            anchor_write_races,
            uncached_walks,
            task_samples,
            task_unattributed,
            task_ended,
            task_waiting_samples,
            task_read_errors,
        } = o;
        self.samples += samples;
        self.thread_samples += thread_samples;
        self.frames_read += frames_read;
        self.frames_cached += frames_cached;
        self.cache_full_hits += cache_full_hits;
        self.cache_partial_hits += cache_partial_hits;
        self.cache_misses += cache_misses;
        self.records_repeated += records_repeated;
        self.records_resolved += records_resolved;
        self.truncated += truncated;
        self.torn += torn;
        self.lost.merge(&lost);
        self.rereads += rereads;
        self.unverified += unverified;
        self.proven_roots += proven_roots;
        self.non_code_frames += non_code_frames;
        self.popped_frames_named += popped_frames_named;
        self.anchor_writes += anchor_writes;
        self.anchor_write_races += anchor_write_races;
        self.uncached_walks += uncached_walks;
        self.task_samples += task_samples;
        self.task_unattributed += task_unattributed;
        self.task_ended += task_ended;
        self.task_waiting_samples += task_waiting_samples;
        self.task_read_errors += task_read_errors;
    }
}

/// Unwinder cache counters summed over processes: hits and misses per cache (`page`, `code`,
/// `frame`), and 3.15 walks the frame cache could not hold.
#[derive(Debug, Default, Clone)]
pub struct CacheTotals {
    /// hits and misses per cache
    pub caches: BTreeMap<&'static str, (u64, u64)>,
    /// 3.15 walks the frame cache could not hold
    pub frame_cache_bypassed: u64,
}

impl CacheTotals {
    /// Adds the counters of `u`.
    pub fn add(&mut self, u: &Unwinder) {
        let p = u.page_cache_stats();
        let s = u.symbolizer_stats();
        let w = u.stats();
        let mut add = |cache, hits, misses| {
            let e = self.caches.entry(cache).or_default();
            e.0 += hits;
            e.1 += misses;
        };
        // Pages read from the process, one by one or in a prefetch.
        add("page", p.hits, p.misses + p.prefetched);
        add("code", s.hits, s.misses);
        add(
            "frame",
            w.cache_full_hits + w.cache_partial_hits,
            w.cache_misses,
        );
        // BPF records that repeated their thread's last stack, against those resolved whole.
        add("record", w.records_repeated, w.records_resolved);
        self.frame_cache_bypassed += w.uncached_walks;
    }
}
