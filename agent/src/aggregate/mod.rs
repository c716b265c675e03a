//! Aggregation stage: stacks -> counts per profile window.
//!
//! In come [`ThreadSample`]s from [`crate::unwind`], one per thread per tick, already symbolized. Out goes a
//! [`ProfileWindow`] each time the caller [`cut`](Aggregator::cut)s: how often each distinct stack (process,
//! thread, frames) was seen since the previous cut, with the sampling period, the wall-clock span, the
//! process-level labels and the number of samples that could not be counted. Memory stays bounded: identical
//! stacks share one map entry, thread names are interned, and past [`DEFAULT_MAX_STACKS`] distinct stacks a
//! sample with a new stack is counted as dropped instead of growing the map. Nothing outlives a window except
//! the labels and the interned thread names.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

// foldhash: the interned names (the counts and off-CPU times are hashbrown's maps, foldhash too,
// for lookups by a borrowed key).
use foldhash::{HashSet, HashSetExt};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::symbolize::Frame;
use crate::unwind::{GilState, SampleThread, ThreadSample};

mod part;
mod wait;
pub use part::WallPart;
pub use wait::WaitReason;

/// Distinct stacks one window holds before samples with new stacks are dropped (about 100 Hz x 60 s x a
/// dozen threads, each with a different stack; a real profile repeats stacks and stays far below).
pub const DEFAULT_MAX_STACKS: usize = 65_536;

/// What makes two samples the same: the thread they came from, its state, and their frames.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StackKey {
    /// The thread and its state, as the sample had them (thread names and task names interned).
    pub thread: SampleThread,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
}

/// Hashed through `KeyView`, as a sample not yet counted is: a lookup finds the key without
/// building one.
impl Hash for StackKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        KeyView::of_key(self).hash(state);
    }
}

/// A stack key's parts, borrowed from a kept key or from a sample. Counting a sample whose
/// stack was seen before in the window (nearly every sample) then copies nothing: no frame
/// vector, no reference count per frame.
#[derive(PartialEq, Hash)]
struct KeyView<'a>(&'a SampleThread, &'a [Frame]);

impl<'a> KeyView<'a> {
    fn of_key(key: &'a StackKey) -> KeyView<'a> {
        KeyView(&key.thread, &key.frames)
    }

    fn of_sample(sample: &'a ThreadSample) -> KeyView<'a> {
        KeyView(&sample.thread, &sample.frames)
    }
}

impl hashbrown::Equivalent<StackKey> for KeyView<'_> {
    fn equivalent(&self, key: &StackKey) -> bool {
        *self == KeyView::of_key(key)
    }
}

/// An off-CPU key's parts, borrowed: hashes as the tuple `(StackKey, WaitReason)` does (a
/// struct's fields hash in order, like a tuple's).
#[derive(PartialEq, Hash)]
struct WaitKeyView<'a>(KeyView<'a>, WaitReason);

impl hashbrown::Equivalent<(StackKey, WaitReason)> for WaitKeyView<'_> {
    fn equivalent(&self, (key, wait): &(StackKey, WaitReason)) -> bool {
        self.1 == *wait && self.0 == KeyView::of_key(key)
    }
}

/// Samples per distinct stack.
pub type StackCounts = hashbrown::HashMap<StackKey, u64>;

/// Off-CPU nanoseconds per distinct stack and wait reason.
pub type OffCpuTimes = hashbrown::HashMap<(StackKey, WaitReason), u64>;

/// The samples counted between two cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileWindow {
    /// Wall-clock time the window began.
    pub start: SystemTime,
    /// How long the window lasted (measured on the monotonic clock).
    pub duration: Duration,
    /// Sampling period: one sample stands for this many nanoseconds of thread time.
    pub period_ns: u64,
    /// Samples per distinct stack.
    pub counts: StackCounts,
    /// Process-level labels (`pid`, `python_version`, `service`, ...).
    pub labels: BTreeMap<String, String>,
    /// Samples lost in this window: reported by the caller, or refused because the stack map was full.
    pub dropped: u64,
    /// Off-CPU time per distinct stack and wait reason, in nanoseconds (empty unless off-CPU
    /// profiling is on).
    pub off_cpu: OffCpuTimes,
    /// Blocked threads were traced in this window, whether or not one waited: exports declare
    /// the off-CPU sample type, so that a script asking for it finds it, with 0 in it.
    pub off_cpu_traced: bool,
}

impl ProfileWindow {
    /// Sum of all counts (not including `dropped`).
    pub fn total_samples(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Samples taken while the thread held the GIL.
    pub fn gil_held_samples(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(key, _)| key.thread.gil == Some(GilState::Held))
            .map(|(_, &n)| n)
            .sum()
    }

    /// Keeps only the stacks whose thread held the GIL, on and off the CPU (`record --gil`);
    /// returns how many samples were left out.
    pub fn keep_gil_holders(&mut self) -> u64 {
        let before = self.total_samples();
        self.counts
            .retain(|key, _| key.thread.gil == Some(GilState::Held));
        self.off_cpu
            .retain(|(key, _), _| key.thread.gil == Some(GilState::Held));
        before - self.total_samples()
    }

    /// Off-CPU nanoseconds per wait reason, in [`WaitReason::ALL`] order.
    pub fn off_cpu_by_wait(&self) -> [(WaitReason, u64); WaitReason::ALL.len()] {
        WaitReason::ALL.map(|wait| {
            let ns = self
                .off_cpu
                .iter()
                .filter(|((_, w), _)| *w == wait)
                .map(|(_, &ns)| ns)
                .sum();
            (wait, ns)
        })
    }

    /// Nanoseconds of wall time per [`WallPart`], in [`WallPart::ALL`] order: on-CPU samples
    /// by their GIL and CPU labels (a sample stands for one period), off-CPU time by its wait.
    pub fn wall_by_part(&self) -> [(WallPart, u64); WallPart::ALL.len()] {
        let mut ns = [0u64; WallPart::ALL.len()];
        let at = |part: WallPart| WallPart::ALL.iter().position(|&p| p == part).unwrap_or(0);
        for (key, &n) in &self.counts {
            let part = WallPart::of_on_cpu(key.thread.gil, key.thread.cpu);
            ns[at(part)] += n.saturating_mul(self.period_ns);
        }
        for ((_, wait), &t) in &self.off_cpu {
            ns[at(WallPart::of_off_cpu(Some(*wait)))] += t;
        }
        std::array::from_fn(|i| (WallPart::ALL[i], ns[i]))
    }

    /// Whether no sample was counted, on or off the CPU.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.off_cpu.is_empty()
    }

    /// The off-CPU stacks and their nanoseconds, sorted by key like [`ProfileWindow::stacks`].
    pub fn off_cpu_stacks(&self) -> Vec<(&StackKey, WaitReason, u64)> {
        let mut stacks: Vec<_> = self
            .off_cpu
            .iter()
            .map(|((key, wait), &ns)| (key, *wait, ns))
            .collect();
        stacks.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        stacks
    }

    /// The stacks and their counts, sorted by key (pid, tid, thread name, frames), so that exporters write
    /// the same bytes for the same window.
    pub fn stacks(&self) -> Vec<(&StackKey, u64)> {
        let mut stacks: Vec<(&StackKey, u64)> =
            self.counts.iter().map(|(key, &n)| (key, n)).collect();
        stacks.sort_unstable_by(|a, b| a.0.cmp(b.0));
        stacks
    }

    /// Adds `other`'s samples, off-CPU time and losses to this window (`record --subprocesses`:
    /// one profile for the processes of a tree; stacks keep their pid). The window spans both;
    /// only the labels both carry with the same value stay.
    pub fn merge(&mut self, other: ProfileWindow) {
        let end = (self.start + self.duration).max(other.start + other.duration);
        self.start = self.start.min(other.start);
        self.duration = end.duration_since(self.start).unwrap_or(self.duration);
        for (key, n) in other.counts {
            *self.counts.entry(key).or_default() += n;
        }
        for (key, ns) in other.off_cpu {
            *self.off_cpu.entry(key).or_default() += ns;
        }
        self.labels
            .retain(|k, v| other.labels.get(k).is_some_and(|o| o == v));
        self.dropped += other.dropped;
        self.off_cpu_traced |= other.off_cpu_traced;
    }

    /// The distinct PIDs in the window, ascending.
    pub fn pids(&self) -> Vec<u32> {
        let pids: std::collections::BTreeSet<u32> =
            self.counts.keys().map(|key| key.thread.pid).collect();
        pids.into_iter().collect()
    }
}

/// Counts stacks and hands them out one window at a time.
#[derive(Debug)]
pub struct Aggregator {
    period_ns: u64,
    max_stacks: usize,
    counts: StackCounts,
    off_cpu: OffCpuTimes,
    labels: BTreeMap<String, String>,
    dropped: u64,
    /// Interned thread names, so each stack of a thread shares one allocation; emptied on cut when large.
    thread_names: HashSet<Arc<str>>,
    started_wall: SystemTime,
    started_mono: Instant,
    /// see [`Aggregator::trace_off_cpu`]
    off_cpu_traced: bool,
}

impl Aggregator {
    /// Heap bytes of the open window: its stack keys (their frames; names are shared with the
    /// code-object cache) and counts.
    pub fn bytes(&self) -> u64 {
        use std::mem::size_of;
        let frames = |k: &StackKey| k.frames.capacity() * size_of::<Frame>();
        let on: usize = self.counts.keys().map(frames).sum();
        let off: usize = self.off_cpu.keys().map(|(k, _)| frames(k)).sum();
        let maps = self.counts.capacity() * size_of::<(StackKey, u64)>()
            + self.off_cpu.capacity() * size_of::<((StackKey, WaitReason), u64)>();
        (on + off + maps) as u64
    }

    /// An empty aggregator for samples taken every `period_ns` nanoseconds; its first window starts now.
    pub fn new(period_ns: u64) -> Aggregator {
        Aggregator {
            period_ns,
            max_stacks: DEFAULT_MAX_STACKS,
            counts: StackCounts::default(),
            off_cpu: OffCpuTimes::default(),
            labels: BTreeMap::new(),
            dropped: 0,
            thread_names: HashSet::new(),
            started_wall: SystemTime::now(),
            started_mono: Instant::now(),
            off_cpu_traced: false,
        }
    }

    /// Sets the number of distinct stacks a window may hold (at least 1).
    pub fn with_max_stacks(mut self, max_stacks: usize) -> Aggregator {
        self.max_stacks = max_stacks.max(1);
        self
    }

    /// The sampling period of the window being counted.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Sets the sampling period of the samples counted from now on. Meant for the start of a
    /// window (right after a cut): a window has one period, and its counts are worth
    /// `count x period` of CPU time.
    pub fn set_period_ns(&mut self, period_ns: u64) {
        self.period_ns = period_ns;
    }

    /// Counts one sample.
    pub fn add(&mut self, sample: &ThreadSample) {
        self.add_count(sample, 1);
    }

    /// Adds `ns` nanoseconds the thread of `sample` spent off the CPU in that stack, waiting
    /// for `wait`. Off-CPU stacks count toward the same bound as on-CPU ones.
    pub fn add_off_cpu(&mut self, sample: &ThreadSample, wait: WaitReason, ns: u64) {
        if ns == 0 {
            return;
        }
        let view = WaitKeyView(KeyView::of_sample(sample), wait);
        if let Some(total) = self.off_cpu.get_mut(&view) {
            *total = total.saturating_add(ns);
        } else if self.counts.len() + self.off_cpu.len() < self.max_stacks {
            let key = (self.key(sample), wait);
            self.off_cpu.insert(key, ns);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    fn key(&mut self, sample: &ThreadSample) -> StackKey {
        let mut thread = sample.thread.clone();
        thread.thread_name = thread.thread_name.map(|name| self.intern(&name));
        thread.task = thread.task.map(|name| self.intern(&name));
        if let Some(holder) = &mut thread.gil_holder {
            holder.thread = self.intern(&holder.thread);
            holder.function = holder.function.take().map(|f| self.intern(&f));
        }
        StackKey {
            thread,
            frames: sample.frames.clone(),
        }
    }

    /// Counts `n` samples of the same stack (a BPF-side pre-aggregated count, for instance).
    pub fn add_count(&mut self, sample: &ThreadSample, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(count) = self.counts.get_mut(&KeyView::of_sample(sample)) {
            *count = count.saturating_add(n);
        } else if self.counts.len() + self.off_cpu.len() < self.max_stacks {
            let key = self.key(sample);
            self.counts.insert(key, n);
        } else {
            self.dropped = self.dropped.saturating_add(n);
        }
    }

    /// Records `n` samples lost before they reached the aggregator (ring buffer overrun, unreadable stack).
    pub fn add_dropped(&mut self, n: u64) {
        self.dropped = self.dropped.saturating_add(n);
    }

    /// Sets a process-level label; it stays on every later window until set again.
    pub fn set_label(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.labels.insert(key.into(), value.into());
    }

    /// Says that blocked threads are traced: every window from now on declares off-CPU time
    /// ([`ProfileWindow::off_cpu_traced`]).
    pub fn trace_off_cpu(&mut self) {
        self.off_cpu_traced = true;
    }

    /// Whether nothing was counted since the last cut, on or off the CPU.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.off_cpu.is_empty()
    }

    /// Returns the window since the last cut (or since [`new`](Aggregator::new)) and starts the next one.
    pub fn cut(&mut self) -> ProfileWindow {
        let now_mono = Instant::now();
        let duration = now_mono.saturating_duration_since(self.started_mono);
        let start = self.started_wall;
        self.started_mono = now_mono;
        // The next window starts where this one ended, on the wall clock too, so windows tile.
        self.started_wall = start + duration;
        // Names of threads that exited would otherwise pile up over the agent's lifetime.
        if self.thread_names.len() > self.max_stacks {
            self.thread_names.clear();
        }
        ProfileWindow {
            start,
            duration,
            period_ns: self.period_ns,
            counts: std::mem::take(&mut self.counts),
            labels: self.labels.clone(),
            dropped: std::mem::take(&mut self.dropped),
            off_cpu: std::mem::take(&mut self.off_cpu),
            off_cpu_traced: self.off_cpu_traced,
        }
    }

    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(interned) = self.thread_names.get(name) {
            return Arc::clone(interned);
        }
        let interned: Arc<str> = Arc::from(name);
        self.thread_names.insert(Arc::clone(&interned));
        interned
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::symbolize::FrameKind;

    /// A Python frame for tests.
    pub(crate) fn frame(function: &str, file: &str, line: u32, first_line: u32) -> Frame {
        Frame {
            code: Arc::new(crate::symbolize::CodeName::new(function, file, first_line)),
            line: Some(line),
            kind: FrameKind::Python,
        }
    }

    /// A sample for tests; `frames` innermost first.
    pub(crate) fn sample(
        pid: u32,
        tid: u32,
        name: Option<&str>,
        frames: Vec<Frame>,
    ) -> ThreadSample {
        let mut thread = SampleThread::new(pid, tid, tid);
        thread.thread_name = name.map(Arc::from);
        ThreadSample {
            thread,
            frames,
            truncated: false,
        }
    }

    fn two_stacks() -> (ThreadSample, ThreadSample) {
        let main = frame("main", "app.py", 10, 1);
        let work = frame("work", "app.py", 5, 4);
        let a = sample(
            100,
            100,
            Some("MainThread"),
            vec![work.clone(), main.clone()],
        );
        let b = sample(100, 100, Some("MainThread"), vec![main]);
        (a, b)
    }

    #[test]
    fn off_cpu_time_adds_up_per_stack_and_wait_and_shares_the_bound() {
        let (a, b) = two_stacks();
        let mut agg = Aggregator::new(10_000_000).with_max_stacks(3);
        agg.add_off_cpu(&a, WaitReason::Sleep, 5);
        assert!(!agg.is_empty(), "off-CPU time alone makes a window");
        agg.add_off_cpu(&a, WaitReason::Sleep, 7);
        agg.add_off_cpu(&a, WaitReason::Gil, 1);
        agg.add_off_cpu(&a, WaitReason::Io, 0);
        agg.add(&b);
        agg.add_off_cpu(&b, WaitReason::Lock, 3);
        let window = agg.cut();
        assert_eq!(
            window
                .off_cpu_stacks()
                .iter()
                .map(|(_, w, ns)| (*w, *ns))
                .collect::<Vec<_>>(),
            [(WaitReason::Sleep, 12), (WaitReason::Gil, 1)]
        );
        assert_eq!(window.dropped, 1, "past the bound of 3 stacks");
        assert_eq!(window.total_samples(), 1);
    }

    #[test]
    fn merged_windows_add_up_and_keep_the_labels_they_share() {
        let (a, b) = two_stacks();
        let mut first = Aggregator::new(10_000_000);
        first.set_label("pid", "100");
        first.set_label("python_version", "3.12.1");
        first.add(&a);
        first.add_off_cpu(&a, WaitReason::Io, 5);
        first.add_dropped(1);
        let mut second = Aggregator::new(10_000_000);
        second.set_label("pid", "200");
        second.set_label("python_version", "3.12.1");
        let child = sample(200, 201, None, b.frames.clone());
        second.add(&child);
        second.add(&a);
        second.add_off_cpu(&a, WaitReason::Io, 7);
        second.trace_off_cpu();
        let mut window = first.cut();
        window.merge(second.cut());
        assert_eq!(window.total_samples(), 3);
        assert_eq!(window.counts.len(), 2, "a's stack twice, the child's once");
        assert_eq!(window.pids(), vec![100, 200]);
        assert_eq!(window.off_cpu_by_wait()[0], (WaitReason::Io, 12));
        assert_eq!(window.dropped, 1);
        assert!(window.off_cpu_traced);
        assert_eq!(
            window.labels.into_iter().collect::<Vec<_>>(),
            [("python_version".to_string(), "3.12.1".to_string())]
        );
    }

    #[test]
    fn wall_time_splits_by_gil_cpu_and_wait() {
        let (a, _) = two_stacks();
        let with_gil = |gil| {
            let mut s = a.clone();
            s.thread.gil = Some(gil);
            s
        };
        let mut agg = Aggregator::new(10);
        agg.add_count(&with_gil(GilState::Held), 3);
        agg.add(&with_gil(GilState::Released));
        agg.add(&with_gil(GilState::Waiting));
        agg.add_off_cpu(&a, WaitReason::Io, 7);
        agg.add_off_cpu(&a, WaitReason::Cpu, 5);
        let parts: Vec<(&str, u64)> = agg
            .cut()
            .wall_by_part()
            .iter()
            .filter(|(_, ns)| *ns > 0)
            .map(|(p, ns)| (p.label(), *ns))
            .collect();
        assert_eq!(
            parts,
            [
                ("cpu_gil_held", 30),
                ("cpu_no_gil", 10),
                ("gil_wait", 10),
                ("cpu_wait", 5),
                ("io", 7)
            ]
        );
    }

    #[test]
    fn identical_stacks_share_one_entry() {
        let (a, b) = two_stacks();
        let mut agg = Aggregator::new(10_000_000);
        agg.add(&a);
        agg.add(&a);
        agg.add_count(&a, 3);
        agg.add(&b);
        agg.add_count(&b, 0);
        let window = agg.cut();
        assert_eq!(window.counts.len(), 2);
        assert_eq!(window.total_samples(), 6);
        assert_eq!(window.period_ns, 10_000_000);
        let stacks = window.stacks();
        // Sorted by frames, innermost first: "main" < "work".
        assert_eq!(stacks[0].0.frames.len(), 1);
        assert_eq!(stacks[0].1, 1);
        assert_eq!(stacks[1].1, 5);
        assert_eq!(
            stacks[1].0.thread.thread_name.as_deref(),
            Some("MainThread")
        );
        assert_eq!(window.pids(), vec![100]);
    }

    #[test]
    fn equal_stacks_made_apart_share_one_entry() {
        // Equal names in separate allocations, as two code-object reads make them: the lookup
        // by a sample's borrowed parts must hash and compare them as the kept key does.
        let made = || {
            sample(
                100,
                100,
                Some("MainThread"),
                vec![
                    frame("work", "app.py", 5, 4),
                    frame("main", "app.py", 10, 1),
                ],
            )
        };
        let (a, b) = (made(), made());
        assert!(!Arc::ptr_eq(&a.frames[0].code, &b.frames[0].code));
        let mut agg = Aggregator::new(1);
        agg.add(&a);
        agg.add_count(&b, 2);
        let mut moved = made();
        moved.frames[0].line = Some(6);
        agg.add(&moved);
        agg.add_off_cpu(&a, WaitReason::Io, 5);
        agg.add_off_cpu(&b, WaitReason::Io, 7);
        agg.add_off_cpu(&b, WaitReason::Lock, 1);
        let window = agg.cut();
        assert_eq!(window.counts.len(), 2, "{:?}", window.counts);
        assert_eq!(window.counts.get(&agg_key(&a)), Some(&3));
        assert_eq!(window.counts.get(&agg_key(&moved)), Some(&1));
        assert_eq!(window.off_cpu.len(), 2, "{:?}", window.off_cpu);
        assert_eq!(
            window.off_cpu.get(&(agg_key(&a), WaitReason::Io)),
            Some(&12)
        );
    }

    /// The key `sample` is counted under, made as the aggregator makes it.
    fn agg_key(sample: &ThreadSample) -> StackKey {
        Aggregator::new(1).key(sample)
    }

    #[test]
    fn thread_names_are_interned() {
        let (a, b) = two_stacks();
        let mut agg = Aggregator::new(1);
        agg.add(&a);
        agg.add(&b);
        let window = agg.cut();
        let names: Vec<&Arc<str>> = window
            .counts
            .keys()
            .filter_map(|key| key.thread.thread_name.as_ref())
            .collect();
        assert!(Arc::ptr_eq(names[0], names[1]));
    }

    #[test]
    fn cut_starts_a_new_window_and_keeps_labels() {
        let (a, b) = two_stacks();
        let mut agg = Aggregator::new(1_000);
        agg.set_label("service", "web");
        agg.set_label("pid", "100");
        assert!(agg.is_empty());
        agg.add(&a);
        agg.add_dropped(2);
        assert!(!agg.is_empty());

        let first = agg.cut();
        assert!(agg.is_empty());
        assert_eq!(first.total_samples(), 1);
        assert_eq!(first.dropped, 2);
        assert_eq!(first.labels.get("service").map(String::as_str), Some("web"));

        agg.add(&b);
        agg.set_label("service", "api");
        let second = agg.cut();
        assert_eq!(second.total_samples(), 1);
        assert_eq!(second.dropped, 0);
        assert_eq!(
            second.labels.get("service").map(String::as_str),
            Some("api")
        );
        assert_eq!(second.labels.len(), 2);
        // Windows tile: the second starts where the first ended.
        assert_eq!(second.start, first.start + first.duration);

        let third = agg.cut();
        assert!(third.is_empty());
        assert_eq!(third.total_samples(), 0);
    }

    #[test]
    fn full_map_counts_new_stacks_as_dropped() {
        let (a, b) = two_stacks();
        let mut agg = Aggregator::new(1).with_max_stacks(1);
        agg.add(&a);
        agg.add_count(&b, 4);
        agg.add(&a);
        let window = agg.cut();
        assert_eq!(window.counts.len(), 1);
        assert_eq!(window.total_samples(), 2);
        assert_eq!(window.dropped, 4);
    }
}
