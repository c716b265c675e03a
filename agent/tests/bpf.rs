//! The BPF sampler against fake CPython frame chains built in this test process's memory: no
//! Python needed. Each test loads its own sampler (own maps), registers this process and one
//! spinning thread, and waits (with a deadline) for the program to record that thread.
//!
//! Needs root, or CAP_BPF + CAP_PERFMON (CI runs as root). The cost figures come from
//! `bench_ns_per_run`, ignored by default:
//! `cargo test -p pyagent --test bpf -- --ignored --nocapture --test-threads=1`.

use std::cell::Cell;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{
    Counter, PaFrame, PaOtelCtx, PaProc, PaSampleHdr, PaThreadList, GIL_HOLDER, GIL_THREAD_FLAG,
    MAX_FRAMES, NOTICE_EXEC, NOTICE_THREAD_EXIT, NOTICE_UNKNOWN_THREAD, PROC_ANCHOR,
    PROC_BASE_FRAME, PROC_CFRAME, PROC_SLOTS, PROC_TRACE_CONTEXT, SAMPLE_ANCHOR_HIT,
    SAMPLE_COMPLETE, SAMPLE_CYCLIC, SAMPLE_GIL_HELD, SAMPLE_GIL_KNOWN, SAMPLE_REACHED_BASE,
    SAMPLE_READ_FAILED, SAMPLE_SPAN, SAMPLE_TRUNCATED, SHORT_FRAMES, THREAD_SLOTS,
};
use pyagent::sampler::bpf::{BpfConfig, BpfError, BpfSampler};

const DEADLINE: Duration = Duration::from_secs(20);

/// Where the fields of a fake `_PyInterpreterFrame` go.
struct Layout {
    size: usize,
    executable: usize,
    previous: usize,
    instr_ptr: usize,
    owner: usize,
    tag_mask: u64,
}

/// 3.14/3.15 default build: `_PyStackRef` executable with tag bits, 88-byte frames.
const PY315: Layout = Layout {
    size: 88,
    executable: 0,
    previous: 8,
    instr_ptr: 56,
    owner: 74,
    tag_mask: 3,
};
/// 3.11: `f_code` at 32, `previous` at 48, `prev_instr` at 56, `owner` at 69, 80-byte frames.
const PY311: Layout = Layout {
    size: 80,
    executable: 32,
    previous: 48,
    instr_ptr: 56,
    owner: 69,
    tag_mask: 0,
};

/// A chain of fake frames in one heap block (never resized, so addresses are stable); frame 0 is
/// the top, frame i's `previous` is frame i+1, the last one's is 0.
struct Chain {
    words: Vec<u64>,
    layout: &'static Layout,
    depth: usize,
    /// Every frame owned by the thread: any of them may serve as an anchor.
    thread_owned: bool,
}

impl Chain {
    fn new(layout: &'static Layout, depth: usize) -> Chain {
        Self::build(layout, depth, false)
    }

    fn thread_owned(layout: &'static Layout, depth: usize) -> Chain {
        Self::build(layout, depth, true)
    }

    fn build(layout: &'static Layout, depth: usize, thread_owned: bool) -> Chain {
        let mut c = Chain {
            words: vec![0; depth * layout.size / 8],
            layout,
            depth,
            thread_owned,
        };
        for i in 0..depth {
            let prev = if i + 1 < depth { c.addr(i + 1) } else { 0 };
            c.put_u64(i, layout.previous, prev);
            c.put_u64(i, layout.executable, Self::executable(i));
            c.put_u64(i, layout.instr_ptr, Self::instr_ptr(i));
            c.put_u8(i, layout.owner, c.owner_of(i));
        }
        c
    }

    /// A code-object-like pointer with both tag bits set (3.14+ `_PyStackRef` tagging).
    fn executable(i: usize) -> u64 {
        0x7f10_0000_0000 + i as u64 * 0x100 + 3
    }
    fn instr_ptr(i: usize) -> u64 {
        0x7f20_0000_0000 + i as u64 * 2
    }
    /// Owners cycle thread (0), generator (1), C-stack entry (3): only a thread-owned frame,
    /// every third one from the top, may vouch for its callers as an anchor.
    fn owner(i: usize) -> u8 {
        [0, 1, 3][i % 3]
    }

    fn owner_of(&self, i: usize) -> u8 {
        if self.thread_owned {
            0
        } else {
            Self::owner(i)
        }
    }

    /// The nearest frame at or below `i` that may serve as an anchor.
    fn anchorable(i: usize) -> usize {
        i.next_multiple_of(3)
    }

    fn addr(&self, i: usize) -> u64 {
        self.words.as_ptr() as u64 + (i * self.layout.size) as u64
    }

    fn put_u64(&mut self, frame: usize, off: usize, v: u64) {
        let byte = frame * self.layout.size + off;
        assert_eq!(byte % 8, 0, "aligned field");
        self.words[byte / 8] = v;
    }

    fn put_u8(&mut self, frame: usize, off: usize, v: u8) {
        let byte = frame * self.layout.size + off;
        let shift = (byte % 8) * 8; // little endian
        let w = &mut self.words[byte / 8];
        *w = (*w & !(0xff << shift)) | (u64::from(v) << shift);
    }

    /// What the program must record for frame i.
    fn expected(&self, i: usize) -> PaFrame {
        PaFrame {
            addr: self.addr(i),
            executable: Self::executable(i) & !self.layout.tag_mask,
            instr_ptr: Self::instr_ptr(i),
            owner: u32::from(self.owner_of(i)),
            is_entry: 0,
        }
    }

    fn check_prefix(&self, frames: &[PaFrame], n: usize) {
        assert_eq!(frames.len(), n, "frame count");
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(*f, self.expected(i), "frame {i} of {}", self.depth);
        }
    }
}

/// A fake thread state: 1 KiB of u64 words, fields set by byte offset.
struct TState(Vec<u64>);

impl TState {
    fn new() -> TState {
        TState(vec![0; 128])
    }
    fn set(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off / 8] = v;
        self
    }
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}

/// 3.15 thread-state offsets: current_frame 72, base_frame 80, anchor 88/96.
fn proc315(flags: u32) -> PaProc {
    PaProc {
        generation: 0x5eed,
        executable_tag_mask: PY315.tag_mask,
        flags,
        thread_state_current_frame: 72,
        cframe_current_frame: 0,
        thread_state_base_frame: 80,
        thread_state_last_profiled_frame: 88,
        thread_state_last_profiled_frame_seq: 96,
        interpreter_frame_previous: PY315.previous as u32,
        interpreter_frame_executable: PY315.executable as u32,
        interpreter_frame_instr_ptr: PY315.instr_ptr as u32,
        interpreter_frame_owner: PY315.owner as u32,
        ..PaProc::default()
    }
}

thread_local! {
    /// Stands for OTEP 4947's `otel_thread_ctx_v1`: a spinner copies into its own the record
    /// address the test publishes ([`Spinner::publish`]).
    static OTEL_CTX: Cell<u64> = const { Cell::new(0) };
}

/// Where a spinner's `OTEL_CTX` is, as glibc lays it out (x86_64).
#[derive(Debug, Clone, Copy)]
struct SpinnerTls {
    /// the thread pointer: `pthread_self()`, the task's FS base
    thread_pointer: u64,
    /// the address of the spinner's `OTEL_CTX`
    variable: u64,
    /// the executable's TLS block (module 1) in the spinner, as its DTV gives it
    block: u64,
}

impl SpinnerTls {
    /// The spinner's own view of its TLS. glibc x86_64: `tcbhead_t.dtv` is at 8 from the thread
    /// pointer (what `_thread_db_pthread_dtvp` says), DTV entries are 16 bytes, the block
    /// pointer first, and the executable is module 1.
    fn here() -> SpinnerTls {
        // SAFETY: pthread_self has no preconditions.
        let thread_pointer = unsafe { libc::pthread_self() } as u64;
        let variable = OTEL_CTX.with(|c| c.as_ptr() as u64);
        // SAFETY: glibc's TCB and DTV of the running thread, read while it runs.
        let block = unsafe {
            let dtv = std::ptr::read_volatile((thread_pointer + 8) as *const u64);
            std::ptr::read_volatile((dtv + 16) as *const u64)
        };
        SpinnerTls {
            thread_pointer,
            variable,
            block,
        }
    }

    /// The program's way to the variable through static TLS, below the thread pointer.
    fn static_tls(&self) -> PaOtelCtx {
        PaOtelCtx {
            static_offset: self.thread_pointer - self.variable,
            ..PaOtelCtx::default()
        }
    }

    /// The program's way to the variable through the DTV.
    fn dtv(&self) -> PaOtelCtx {
        PaOtelCtx {
            static_offset: 0,
            offset_in_block: self.variable - self.block,
            dtv_in_pthread: 8,
            dtv_entry_size: 16,
            pointer_in_entry: 0,
            module_id: 1,
        }
    }
}

/// A thread burning CPU until dropped, so that cpu-clock events interrupt it.
struct Spinner {
    tid: u32,
    /// its OTel thread context (`OTEL_CTX`)
    tls: SpinnerTls,
    /// the record address the spinner keeps in its `OTEL_CTX`
    record: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Spinner {
    fn start() -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let record = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel();
        let (flag, published) = (stop.clone(), record.clone());
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            tx.send((tid, SpinnerTls::here())).expect("send tid");
            let mut x = 0u64;
            while !flag.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                OTEL_CTX.with(|c| c.set(published.load(Ordering::Relaxed)));
            }
        });
        let (tid, tls) = rx.recv().expect("spinner tid");
        Spinner {
            tid,
            tls,
            record,
            stop,
            handle: Some(handle),
        }
    }

    /// Makes the record at `addr` (0: none) the spinner's current context, from its next spin.
    fn publish(&self, addr: u64) {
        self.record.store(addr, Ordering::Relaxed);
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// An inaccessible page: reads of it fail like reads of unmapped memory.
struct NoAccessPage(u64);

impl NoAccessPage {
    fn new() -> NoAccessPage {
        // SAFETY: anonymous mapping, checked for failure, unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap PROT_NONE");
        NoAccessPage(p as u64)
    }
}

impl Drop for NoAccessPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new().
        unsafe { libc::munmap(self.0 as *mut libc::c_void, 4096) };
    }
}

fn config() -> BpfConfig {
    BpfConfig {
        rate_hz: 1999,
        ring_bytes: 1 << 22,
        enable_stats: false,
        ..BpfConfig::default()
    }
}

fn load(config: &BpfConfig) -> BpfSampler {
    let _settings = host_perf_settings();
    BpfSampler::load(config).unwrap_or_else(|e| panic!("load BPF sampler: {}", error_chain(&e)))
}

/// Tests run in parallel and `kernel.perf_event_max_sample_rate` is the host's: the kernel
/// refuses (EINVAL) to open an event above it, so no test opens events while another has it
/// lowered.
static HOST_PERF_SETTINGS: RwLock<()> = RwLock::new(());

/// Held while opening events.
fn host_perf_settings() -> RwLockReadGuard<'static, ()> {
    HOST_PERF_SETTINGS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Registers this process with `proc`, runs a spinner on `tstate`, and returns its first record.
fn first_record(config: &BpfConfig, proc: &PaProc, tstate: u64) -> (PaSampleHdr, Vec<PaFrame>) {
    let (h, frames, _) = first_record_of(&Spinner::start(), config, proc, tstate);
    (h, frames)
}

/// [`first_record`] of a given spinner, with the sampler that took it.
fn first_record_of(
    spinner: &Spinner,
    config: &BpfConfig,
    proc: &PaProc,
    tstate: u64,
) -> (PaSampleHdr, Vec<PaFrame>, BpfSampler) {
    let mut s = load(config);
    let pid = std::process::id();
    s.track_process(pid, proc).expect("track_process");
    s.set_thread(spinner.tid, tstate).expect("set_thread");
    let (h, frames) = next_record(&mut s, spinner.tid);
    assert_eq!(h.tstate, tstate);
    assert_eq!(h.generation, proc.generation);
    (h, frames, s)
}

/// Polls `done` every 10 ms until it gives a value; fails after [`DEADLINE`] naming `what`
/// and the program's counters.
fn wait_until<T>(
    s: &mut BpfSampler,
    what: &str,
    mut done: impl FnMut(&mut BpfSampler) -> Option<T>,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = done(s) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {DEADLINE:?}; counters: {:?}",
            counters(s)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `counter` is positive.
fn wait_for_count(s: &mut BpfSampler, counter: Counter) {
    wait_until(s, &format!("{counter:?} stayed 0"), |s| {
        (s.counter(counter).expect("counter") > 0).then_some(())
    });
}

/// The first record of this process's thread `tid` drained from `s`.
fn next_record(s: &mut BpfSampler, tid: u32) -> (PaSampleHdr, Vec<PaFrame>) {
    let pid = std::process::id();
    let (h, frames) = wait_until(s, &format!("no record for tid {tid}"), |s| {
        let mut got = None;
        s.drain(|rec| {
            let h = rec.header();
            if got.is_none() && h.pid == pid && h.tid == tid {
                got = Some((*h, rec.frames().collect::<Vec<_>>()));
            }
        });
        got
    });
    assert_eq!(h.nframes as usize, frames.len());
    assert_eq!(s.malformed_records(), 0);
    (h, frames)
}

/// A process or thread whose direct-mapped slot it shares with another is found through the
/// hash map; when the other leaves, the slot holds it again; when it leaves, nothing does.
#[test]
fn shared_slots_fall_back_to_the_hash_maps() {
    let chain = Chain::new(&PY315, 20);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let mut s = load(&config());
    let spinner = Spinner::start();
    let pid = std::process::id();
    // Same slots as the real process and thread, keys no real task has (pid_max is 2^22).
    let (other_pid, other_tid) = (pid + PROC_SLOTS * 1024, spinner.tid + THREAD_SLOTS * 1024);
    let proc = proc315(0);
    s.track_process(pid, &proc).expect("track");
    s.track_process(other_pid, &proc).expect("track other");
    s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
    s.set_thread(other_tid, 0x1000).expect("set other thread");
    let check = |s: &mut BpfSampler| {
        let (h, frames) = next_record(s, spinner.tid);
        assert_eq!((h.tstate, h.flags), (ts.addr(), SAMPLE_COMPLETE), "{h:?}");
        chain.check_prefix(&frames, 20);
    };
    check(&mut s);

    s.untrack_process(other_pid).expect("untrack other");
    s.remove_thread(other_tid).expect("remove other thread");
    s.drain(|_| {});
    check(&mut s);

    // Gone from the slot and the hash map: the program reports a thread it does not know.
    s.remove_thread(spinner.tid).expect("remove thread");
    let _ = s.take_notices(None);
    wait_for_notice(&mut s, pid, NOTICE_UNKNOWN_THREAD);
}

fn counters(s: &BpfSampler) -> Vec<(&'static str, u64)> {
    s.counters()
        .expect("read counters")
        .into_iter()
        .map(|(i, v)| (i.name, v))
        .collect()
}

/// Waits until `counter` is positive while a spinner runs on `tstate`.
fn wait_for_counter(proc: &PaProc, tstate: u64, counter: Counter) {
    let mut s = load(&config());
    let spinner = Spinner::start();
    s.track_process(std::process::id(), proc)
        .expect("track_process");
    s.set_thread(spinner.tid, tstate).expect("set_thread");
    wait_for_count(&mut s, counter);
    assert_eq!(
        s.counter(Counter::SamplesEmitted).expect("counter"),
        0,
        "{:?}",
        counters(&s)
    );
}

#[test]
fn verifier_accepts_every_knob() {
    for max_frames in [1, 2, 3, 16, 100, 1000, MAX_FRAMES - 1, MAX_FRAMES] {
        for wakeup_bytes in [0, 1 << 20] {
            let cfg = BpfConfig {
                max_frames,
                wakeup_bytes,
                ..config()
            };
            let s = BpfSampler::load_detached(&cfg).unwrap_or_else(|e| {
                panic!(
                    "max_frames {max_frames}, wakeup {wakeup_bytes}: {}",
                    error_chain(&e)
                )
            });
            let size = s.program_size().expect("program info");
            // The kernel reports the count since 5.16 (`cargo xtask kernels` loads on 5.10).
            assert!(size.verified_insns.is_none_or(|n| n > 0), "{size:?}");
            assert!(s.cpus().is_empty());
        }
    }
    for stop_after in (1..=common::STAGE_LAST).chain([0]) {
        let cfg = BpfConfig {
            stop_after,
            ..config()
        };
        BpfSampler::load_detached(&cfg)
            .unwrap_or_else(|e| panic!("stop_after {stop_after}: {}", error_chain(&e)));
    }
    assert!(BpfSampler::load_detached(&BpfConfig {
        stop_after: common::STAGE_LAST + 1,
        ..config()
    })
    .is_err());
    let s = load(&config());
    assert!(!s.cpus().is_empty());
    eprintln!("program size: {:?}", s.program_size());
}

#[test]
fn complete_chain_315() {
    let chain = Chain::new(&PY315, 1000);
    let mut ts = TState::new();
    // The anchor slot holds a frame address, but PROC_ANCHOR is off: the walk must not stop.
    ts.set(72, chain.addr(0))
        .set(80, chain.addr(999))
        .set(88, chain.addr(3))
        .set(96, 7);
    let (h, frames) = first_record(&config(), &proc315(PROC_BASE_FRAME), ts.addr());
    assert_eq!(h.flags, SAMPLE_COMPLETE | SAMPLE_REACHED_BASE, "{h:?}");
    assert_eq!(
        (h.anchor_frame, h.anchor_seq, h.base_frame),
        (0, 0, chain.addr(999))
    );
    chain.check_prefix(&frames, 1000);
}

#[test]
fn anchor_stops_walk() {
    let chain = Chain::new(&PY315, 1000);
    let anchor = Chain::anchorable(500);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0))
        .set(80, 0xbad)
        .set(88, chain.addr(anchor))
        .set(96, 0xabcdef);
    let (h, frames) = first_record(&config(), &proc315(PROC_ANCHOR), ts.addr());
    assert_eq!(h.flags, SAMPLE_ANCHOR_HIT, "{h:?}");
    assert_eq!(
        (h.anchor_frame, h.anchor_seq, h.base_frame),
        (chain.addr(anchor), 0xabcdef, 0)
    );
    chain.check_prefix(&frames, anchor + 1);

    // A generator's frame or a C-stack entry frame leaves the chain without moving the anchor and
    // comes back under other callers at the same address: as an anchor it vouches for nothing,
    // and the walk goes on to the end.
    for below in [1, 2] {
        ts.set(88, chain.addr(anchor + below));
        let (h, frames) = first_record(&config(), &proc315(PROC_ANCHOR), ts.addr());
        assert_eq!(
            h.flags,
            SAMPLE_COMPLETE,
            "owner {}: {h:?}",
            Chain::owner(anchor + below)
        );
        assert_eq!(
            h.anchor_frame,
            chain.addr(anchor + below),
            "reported, not hit"
        );
        chain.check_prefix(&frames, 1000);
    }

    // No anchor set (0): a full walk, still reporting the sequence.
    ts.set(88, 0);
    let (h, frames) = first_record(
        &config(),
        &proc315(PROC_ANCHOR | PROC_BASE_FRAME),
        ts.addr(),
    );
    assert_eq!(
        h.flags, SAMPLE_COMPLETE,
        "base 0xbad is not the last frame: {h:?}"
    );
    assert_eq!(
        (h.anchor_frame, h.anchor_seq, h.base_frame),
        (0, 0xabcdef, 0xbad)
    );
    chain.check_prefix(&frames, 1000);
}

#[test]
fn deep_chain_is_truncated() {
    let chain = Chain::new(&PY315, 1100);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let (h, frames) = first_record(&config(), &proc315(0), ts.addr());
    assert_eq!(h.flags, SAMPLE_TRUNCATED, "{h:?}");
    chain.check_prefix(&frames, MAX_FRAMES as usize);

    // The knob lowers the bound.
    let (h, frames) = first_record(
        &BpfConfig {
            max_frames: 16,
            ..config()
        },
        &proc315(0),
        ts.addr(),
    );
    assert_eq!(h.flags, SAMPLE_TRUNCATED, "{h:?}");
    chain.check_prefix(&frames, 16);
}

/// Walks of SHORT_FRAMES frames or fewer are written into a short ring-buffer record, longer ones
/// move to the scratch record: every walk length around the switch, each way a walk can end.
#[test]
fn short_and_long_records_meet_at_the_switch() {
    let short = SHORT_FRAMES as usize;
    for depth in [1, short - 1, short, short + 1, short + 2] {
        let chain = Chain::new(&PY315, depth);
        let mut ts = TState::new();
        ts.set(72, chain.addr(0));
        let (h, frames) = first_record(&config(), &proc315(0), ts.addr());
        assert_eq!(h.flags, SAMPLE_COMPLETE, "depth {depth}: {h:?}");
        chain.check_prefix(&frames, depth);
    }
    let chain = Chain::thread_owned(&PY315, 100);
    for stop in [short - 1, short, short + 1] {
        let mut ts = TState::new();
        ts.set(72, chain.addr(0)).set(88, chain.addr(stop - 1));
        let (h, frames) = first_record(&config(), &proc315(PROC_ANCHOR), ts.addr());
        assert_eq!(h.flags, SAMPLE_ANCHOR_HIT, "anchor at {stop}: {h:?}");
        chain.check_prefix(&frames, stop);

        let mut ts = TState::new();
        ts.set(72, chain.addr(0));
        let config = BpfConfig {
            max_frames: stop as u32,
            ..config()
        };
        let (h, frames) = first_record(&config, &proc315(0), ts.addr());
        assert_eq!(h.flags, SAMPLE_TRUNCATED, "bound {stop}: {h:?}");
        chain.check_prefix(&frames, stop);
    }
}

/// Frames laid out as CPython lays them in a thread's data stack: each caller right below its
/// callee, the oldest one at the bottom of a mapping whose page below is inaccessible (the edge
/// of a data-stack chunk). One frame (`outside`) lies elsewhere, like a generator's frame.
struct DataStack {
    base: *mut u8,
    len: usize,
    /// Address of frame i (0 the top).
    frames: Vec<u64>,
    /// The block that holds the frame that lies elsewhere.
    _outside: Vec<u64>,
}

impl DataStack {
    const PAGE: usize = 4096;

    fn new(layout: &'static Layout, depth: usize, outside: usize) -> DataStack {
        let data_pages = (depth * layout.size).div_ceil(Self::PAGE);
        let len = (1 + data_pages) * Self::PAGE;
        // SAFETY: anonymous mapping, checked for failure, unmapped on drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap");
        // SAFETY: the first page of the mapping just made.
        let guarded = unsafe { libc::mprotect(base, Self::PAGE, libc::PROT_NONE) };
        assert_eq!(guarded, 0, "mprotect");
        let top = base as u64 + len as u64;
        let out_block = vec![0u64; layout.size / 8];
        let frames: Vec<u64> = (0..depth)
            .map(|i| {
                if i == outside {
                    out_block.as_ptr() as u64
                } else {
                    top - ((i + 1) * layout.size) as u64
                }
            })
            .collect();
        for (i, &addr) in frames.iter().enumerate() {
            let prev = frames.get(i + 1).copied().unwrap_or(0);
            // SAFETY: each frame lies inside the mapping or the block, 8-byte aligned.
            unsafe {
                let at = |off: usize| (addr + off as u64) as *mut u64;
                *at(layout.previous) = prev;
                *at(layout.executable) = Chain::executable(i);
                *at(layout.instr_ptr) = Chain::instr_ptr(i);
                *((addr + layout.owner as u64) as *mut u8) = Chain::owner(i);
            }
        }
        DataStack {
            base: base.cast(),
            len,
            frames,
            _outside: out_block,
        }
    }

    fn check(&self, layout: &Layout, frames: &[PaFrame]) {
        assert_eq!(frames.len(), self.frames.len(), "frame count");
        for (i, f) in frames.iter().enumerate() {
            let want = PaFrame {
                addr: self.frames[i],
                executable: Chain::executable(i) & !layout.tag_mask,
                instr_ptr: Chain::instr_ptr(i),
                owner: u32::from(Chain::owner(i)),
                is_entry: 0,
            };
            assert_eq!(*f, want, "frame {i} of {}", self.frames.len());
        }
    }
}

impl Drop for DataStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new().
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Frames below their callee, as in a CPython data stack, are read a window at a time: a walk
/// of 1000 such frames, past a window's edge many times, down to the bottom of the mapping (the
/// wide window would cross into the inaccessible page below: the frame's page is read instead),
/// and through one frame elsewhere, records every frame exactly.
#[test]
fn frames_below_their_callee_are_read_a_window_at_a_time() {
    for (depth, outside) in [(1000, 10), (60, 9), (12, 30)] {
        let stack = DataStack::new(&PY315, depth, outside);
        let mut ts = TState::new();
        ts.set(72, stack.frames[0]);
        let (h, frames) = first_record(&config(), &proc315(0), ts.addr());
        assert_eq!(h.flags, SAMPLE_COMPLETE, "depth {depth}: {h:?}");
        stack.check(&PY315, &frames);
    }
}

const MAX_SAMPLE_RATE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

/// `kernel.perf_event_max_sample_rate` set for a while, put back as it was when dropped (also
/// when the test fails): the setting is the whole host's, so no other test opens events
/// meanwhile (see [`HOST_PERF_SETTINGS`]).
struct MaxSampleRate {
    before: String,
    // Dropped after the setting is put back.
    _exclusive: RwLockWriteGuard<'static, ()>,
}

impl MaxSampleRate {
    fn set(rate: u32) -> MaxSampleRate {
        let exclusive = HOST_PERF_SETTINGS
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let before = std::fs::read_to_string(MAX_SAMPLE_RATE).expect("read the sysctl");
        std::fs::write(MAX_SAMPLE_RATE, rate.to_string()).expect("write the sysctl");
        MaxSampleRate {
            before: before.trim().to_owned(),
            _exclusive: exclusive,
        }
    }
}

impl Drop for MaxSampleRate {
    fn drop(&mut self) {
        let _ = std::fs::write(MAX_SAMPLE_RATE, &self.before);
    }
}

/// The kernel throttles an event that fires more often in one scheduler tick than
/// `perf_event_max_sample_rate / HZ`; the ticks it drops are counted from its throttle records.
/// On these VMs (no PMU, cpu-clock events) the kernel never lowers the rate by itself, so the
/// test lowers it below the sampler's rate for the moment it takes to see a throttle, then puts
/// it back. Sampling at 99 Hz with the setting as it was, nothing is throttled.
#[test]
fn throttled_ticks_are_counted() {
    let chain = Chain::new(&PY315, 20);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let spinner = Spinner::start();
    let slow = BpfConfig {
        rate_hz: 99,
        ..config()
    };
    let (_, _, mut s) = first_record_of(&spinner, &slow, &proc315(0), ts.addr());
    // A second of samples at 99 Hz on every CPU.
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        s.drain(|_| {});
        std::thread::sleep(Duration::from_millis(20));
    }
    // An idle CPU may be throttled (its interrupts add up with no tick) but loses nothing.
    let t = s.throttling();
    assert_eq!(t.lost_ticks, 0, "at 99 Hz: {t:?}");
    drop(s);

    let (_, _, mut s) = first_record_of(&spinner, &config(), &proc315(0), ts.addr());
    let throttled = {
        // At most one interrupt per 4 ms tick (HZ 250): the sampler's 1999 Hz is 8 a tick.
        let _lowered = MaxSampleRate::set(250);
        userspace_ticks_keep_their_rate_while_their_event_is_throttled();
        // Events above the setting are refused, and the error says why.
        let Err(refused) = BpfSampler::load(&config()) else {
            panic!("1999 Hz opened above a limit of 250");
        };
        assert!(
            matches!(
                refused,
                BpfError::RateAboveKernelLimit {
                    rate_hz: 1999,
                    limit: 250,
                    ..
                }
            ),
            "{}",
            error_chain(&refused)
        );
        let throttled = wait_until(&mut s, "no throttled tick", |s| {
            s.drain(|_| {});
            let t = s.throttling();
            (t.lost_ticks > 0).then_some(t)
        });
        // A rate the kernel refuses, with the old one now refused too, leaves no event open:
        // the error says so.
        let e = s.set_rate(499).expect_err("499 Hz above a limit of 250");
        assert!(
            matches!(e, BpfError::NoEvents { old_rate: 1999, .. }),
            "{}",
            error_chain(&e)
        );
        throttled
    };
    assert!(throttled.episodes > 0, "{throttled:?}");
    // Without events, nothing new reaches the ring: what it holds is from before.
    s.drain(|_| {});
    let _settings = host_perf_settings();
    // With the setting back, asking for the rate again opens the events again.
    s.set_rate(1999).expect("events opened again");
    next_record(&mut s, spinner.tid);
    // A rate change opens new events and keeps the totals.
    s.set_rate(499).expect("set_rate");
    assert!(s.throttling().lost_ticks >= throttled.lost_ticks);
}

#[test]
fn exact_depth_bound_is_complete() {
    let chain = Chain::new(&PY315, MAX_FRAMES as usize);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let (h, frames) = first_record(&config(), &proc315(0), ts.addr());
    assert_eq!(h.flags, SAMPLE_COMPLETE, "{h:?}");
    chain.check_prefix(&frames, MAX_FRAMES as usize);
}

#[test]
fn cframe_chain_311() {
    let chain = Chain::new(&PY311, 50);
    // _PyCFrame (3.11): use_tracing at 0, current_frame at 8.
    let cframe: Vec<u64> = vec![1, chain.addr(0), 0, 0];
    let mut ts = TState::new();
    ts.set(56, cframe.as_ptr() as u64);
    let proc = PaProc {
        generation: 311,
        executable_tag_mask: 0,
        flags: PROC_CFRAME,
        thread_state_current_frame: 56,
        cframe_current_frame: 8,
        interpreter_frame_previous: PY311.previous as u32,
        interpreter_frame_executable: PY311.executable as u32,
        interpreter_frame_instr_ptr: PY311.instr_ptr as u32,
        interpreter_frame_owner: PY311.owner as u32,
        ..PaProc::default()
    };
    let (h, frames) = first_record(&config(), &proc, ts.addr());
    assert_eq!(h.flags, SAMPLE_COMPLETE, "{h:?}");
    // Tag mask 0: the low bits of f_code are kept.
    assert_eq!(frames[0].executable & 3, 3);
    chain.check_prefix(&frames, 50);
}

/// Each record says whether its thread held the GIL, read where the layout keeps it: the
/// `last_holder`/`locked` pair (3.11-3.14: one read when adjacent, two otherwise) or the thread
/// state's flag (3.15). Without a GIL model, or when the GIL cannot be read, it says nothing.
#[test]
fn records_say_whether_the_thread_held_the_gil() {
    let chain = Chain::new(&PY315, 3);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let known = SAMPLE_GIL_KNOWN;
    let held = SAMPLE_GIL_KNOWN | SAMPLE_GIL_HELD;
    let gil_bits = |proc: &PaProc, ts: &TState| {
        let (h, _) = first_record(&config(), proc, ts.addr());
        assert_eq!(h.flags & SAMPLE_COMPLETE, SAMPLE_COMPLETE, "{h:?}");
        h.flags & held
    };
    assert_eq!(gil_bits(&proc315(0), &ts), 0, "no GIL model, no bits");

    // 3.11-3.14: [last_holder, locked] as in `_gil_runtime_state`, and apart.
    let mut gil: Vec<u64> = vec![ts.addr(), 1, 0, 0];
    let base = gil.as_ptr() as u64;
    for (holder, locked) in [(base, base + 8), (base, base + 24)] {
        let proc = PaProc {
            gil_model: GIL_HOLDER,
            gil_holder_addr: holder,
            gil_locked_addr: locked,
            ..proc315(0)
        };
        gil[1] = 1;
        gil[3] = 1;
        assert_eq!(
            gil_bits(&proc, &ts),
            held,
            "held ({holder:#x}, {locked:#x})"
        );
        gil[0] = ts.addr() + 8;
        assert_eq!(gil_bits(&proc, &ts), known, "another holder");
        gil[0] = ts.addr();
        gil[1] = 0;
        gil[3] = 0;
        assert_eq!(gil_bits(&proc, &ts), known, "unlocked");
    }
    let hole = NoAccessPage::new();
    let unreadable = PaProc {
        gil_model: GIL_HOLDER,
        gil_holder_addr: hole.0,
        gil_locked_addr: hole.0 + 8,
        ..proc315(0)
    };
    assert_eq!(gil_bits(&unreadable, &ts), 0, "unreadable GIL, no bits");

    // 3.15: the thread state's own int.
    let flag = PaProc {
        gil_model: GIL_THREAD_FLAG,
        thread_state_holds_gil: 120,
        ..proc315(0)
    };
    ts.set(120, 1);
    assert_eq!(gil_bits(&flag, &ts), held, "flag set");
    ts.set(120, 0);
    assert_eq!(gil_bits(&flag, &ts), known, "flag clear");
}

/// An OTEP 4947 record: trace id at 0, span id at 16, `valid` at 24.
fn otel_record(trace_id: [u8; 16], span_id: [u8; 8], valid: u8) -> [u8; 28] {
    let mut r = [0u8; 28];
    r[..16].copy_from_slice(&trace_id);
    r[16..24].copy_from_slice(&span_id);
    r[24] = valid;
    r
}

/// The program reads the trace and span the interrupted thread is in, at the tick, through static TLS or
/// the DTV as glibc lays them out; a thread in no span, or whose record is not valid, gets none
/// and counts nothing; an unreadable record is counted; a process without the flag is not read;
/// a native record (`PROC_NATIVE`) keeps its span.
#[test]
fn records_carry_the_span_the_thread_is_in() {
    let chain = Chain::new(&PY315, 3);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let trace = [
        0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31,
        0x9c,
    ];
    let span = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
    let valid = otel_record(trace, span, 1);
    let invalid = otel_record(trace, span, 0);
    let hole = NoAccessPage::new();
    let spinner = Spinner::start();
    // ((trace, span) read, read failures) of the spinner's first record with `otel`, `flags`.
    let read = |otel: PaOtelCtx, flags: u32, record: u64| {
        spinner.publish(record);
        let proc = PaProc {
            otel,
            ..proc315(flags)
        };
        let (h, _, s) = first_record_of(&spinner, &config(), &proc, ts.addr());
        assert_eq!(h.flags & SAMPLE_COMPLETE, SAMPLE_COMPLETE, "{h:?}");
        let failed = s.counter(Counter::SpanReadFail).expect("counter");
        (h.trace_context(), failed)
    };
    let tls = spinner.tls;
    for (way, otel) in [("static TLS", tls.static_tls()), ("DTV", tls.dtv())] {
        let publishing = |record: u64| read(otel, PROC_TRACE_CONTEXT, record);
        assert_eq!(
            publishing(valid.as_ptr() as u64),
            (Some((trace, span)), 0),
            "{way}: {tls:?}"
        );
        assert_eq!(publishing(invalid.as_ptr() as u64), (None, 0), "{way}");
        assert_eq!(publishing(0), (None, 0), "{way}: no span");
        let (span_read, failed) = publishing(hole.0);
        assert_eq!(span_read, None, "{way}");
        assert!(failed > 0, "{way}: an unreadable record is counted");
    }
    assert_eq!(
        read(tls.static_tls(), 0, valid.as_ptr() as u64),
        (None, 0),
        "not published: not read"
    );
    let (h, _, _) = first_record_of(&spinner, &config(), &proc315(0), ts.addr());
    assert_eq!(h.flags & SAMPLE_SPAN, 0);
    assert_eq!(h.span_id, [0; 8], "zeros without a span");
    assert_eq!(h.trace_id, [0; 16], "zeros without a span");
    // With native stacks too, the record is long (the native section follows the frames) and
    // its header, copied to the scratch before the section is written, keeps the span.
    spinner.publish(valid.as_ptr() as u64);
    let proc = PaProc {
        otel: tls.static_tls(),
        ..proc315(PROC_TRACE_CONTEXT | common::PROC_NATIVE)
    };
    let (h, _, _) = first_record_of(&spinner, &config(), &proc, ts.addr());
    assert_ne!(h.flags & common::SAMPLE_NATIVE, 0, "{h:?}");
    assert_eq!(h.trace_context(), Some((trace, span)), "{h:?}");
}

#[test]
fn broken_chain_is_read_failed() {
    let mut chain = Chain::new(&PY315, 10);
    let hole = NoAccessPage::new();
    chain.put_u64(5, PY315.previous, hole.0);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let (h, frames) = first_record(&config(), &proc315(0), ts.addr());
    assert_eq!(h.flags, SAMPLE_READ_FAILED, "{h:?}");
    chain.check_prefix(&frames, 6);

    // The counter moves too (on a fresh sampler).
    let mut s = load(&config());
    let spinner = Spinner::start();
    s.track_process(std::process::id(), &proc315(0))
        .expect("track");
    s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
    wait_for_count(&mut s, Counter::ReadFailFrame);
    assert_eq!(s.counter(Counter::Complete).expect("counter"), 0);
}

/// Reliability issue: a frame whose `previous` is itself gave a record of one frame repeated
/// MAX_FRAMES times. A chain that loops back to the frame itself or one of the few before it
/// stops there, flagged cyclic and counted; the frames of the loop are recorded once.
#[test]
fn cyclic_chain_stops_the_walk_and_is_counted() {
    // (frame whose `previous` loops, frame it loops back to): in the short record and past it.
    for (from, to) in [(0, 0), (3, 3), (3, 1), (20, 20), (20, 16)] {
        let mut chain = Chain::new(&PY315, 30);
        let back = chain.addr(to);
        chain.put_u64(from, PY315.previous, back);
        let mut ts = TState::new();
        ts.set(72, chain.addr(0));
        let (h, frames) = first_record(&config(), &proc315(0), ts.addr());
        assert_eq!(h.flags, SAMPLE_CYCLIC, "{from} → {to}: {h:?}");
        chain.check_prefix(&frames, from + 1);
    }
    // A loop longer than the window the program remembers runs into the frame bound; the
    // agent finds the repeat in the record.
    let mut chain = Chain::new(&PY315, 30);
    let back = chain.addr(10);
    chain.put_u64(20, PY315.previous, back);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let (h, _) = first_record(&config(), &proc315(0), ts.addr());
    assert_eq!(h.flags, SAMPLE_TRUNCATED, "{h:?}");

    let mut chain = Chain::new(&PY315, 10);
    let back = chain.addr(4);
    chain.put_u64(4, PY315.previous, back);
    ts.set(72, chain.addr(0));
    let mut s = load(&config());
    let spinner = Spinner::start();
    s.track_process(std::process::id(), &proc315(0))
        .expect("track");
    s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
    wait_for_count(&mut s, Counter::CyclicChain);
    assert_eq!(s.counter(Counter::Truncated).expect("counter"), 0);
}

#[test]
fn early_exits_are_counted() {
    // Thread state unreadable.
    let hole = NoAccessPage::new();
    wait_for_counter(&proc315(0), hole.0, Counter::ReadFailTstate);
    // Thread runs no Python: current_frame is 0.
    let ts = TState::new();
    wait_for_counter(&proc315(0), ts.addr(), Counter::NoCurrentFrame);
    // cframe unreadable (3.11/3.12).
    let mut ts = TState::new();
    ts.set(56, hole.0);
    let proc = PaProc {
        flags: PROC_CFRAME,
        thread_state_current_frame: 56,
        cframe_current_frame: 8,
        ..proc315(0)
    };
    wait_for_counter(&proc, ts.addr(), Counter::ReadFailCframe);
}

/// Where this test process's PID namespace is (`st_dev`, `st_ino` of `/proc/self/ns/pid`).
fn own_pid_namespace() -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/self/ns/pid").expect("stat /proc/self/ns/pid");
    (m.dev(), m.ino())
}

/// A thread the agent has not registered (a thread younger than its last refresh) is found by
/// the program in the interpreter's thread list, by native thread id, and walked; one that is
/// not in the list is counted as lost.
#[test]
fn unregistered_thread_is_found_in_the_thread_list() {
    const NEXT: usize = 8;
    const NATIVE_THREAD_ID: usize = 160;
    let chain = Chain::new(&PY315, 3);
    let spinner = Spinner::start();
    // Newest first: a decoy thread state, then the spinner's.
    let mut mine = TState::new();
    mine.set(72, chain.addr(0))
        .set(NATIVE_THREAD_ID, u64::from(spinner.tid));
    let mut decoy = TState::new();
    decoy
        .set(NEXT, mine.addr())
        .set(NATIVE_THREAD_ID, u64::from(spinner.tid) + 1);
    let mut head = Box::new(decoy.addr());
    let (pidns_dev, pidns_ino) = own_pid_namespace();
    let list = PaThreadList {
        threads_head_addr: std::ptr::from_ref(&*head) as u64,
        pidns_dev,
        pidns_ino,
        thread_state_next: NEXT as u32,
        thread_state_native_thread_id: NATIVE_THREAD_ID as u32,
        ..PaThreadList::default()
    };

    let mut s = load(&config());
    let pid = std::process::id();
    s.track_process(pid, &proc315(0)).expect("track_process");
    s.set_thread_list(pid, &list).expect("set_thread_list");
    let (h, frames) = next_record(&mut s, spinner.tid);
    assert_eq!(h.tstate, mine.addr(), "{h:?}");
    assert_eq!(h.flags, SAMPLE_COMPLETE, "{h:?}");
    chain.check_prefix(&frames, 3);
    assert!(s.counter(Counter::ThreadFound).expect("counter") > 0);

    // Not in the list: lost, and counted.
    // Volatile: the program reads it, the compiler does not know.
    // SAFETY: `head` is a live, aligned, exclusively borrowed Box.
    unsafe { std::ptr::write_volatile(&mut *head, 0) };
    let unknown = s.counter(Counter::ThreadUnknown).expect("counter");
    wait_until(&mut s, "an unknown-thread loss", |s| {
        (s.counter(Counter::ThreadUnknown).expect("counter") > unknown).then_some(())
    });
}

/// Polls the notices until one for `pid` has `bit`.
fn wait_for_notice(s: &mut BpfSampler, pid: u32, bit: u32) {
    wait_until(s, &format!("no notice {bit:#x} for pid {pid}"), |s| {
        s.take_notices(None)
            .iter()
            .any(|&(p, bits)| p == pid && bits & bit != 0)
            .then_some(())
    });
}

#[test]
fn notices_name_unregistered_threads_execs_and_thread_exits() {
    let mut s = load(&config());
    assert!(s.notices_execs(), "the exec tracepoint attached");
    // A tracked process running a thread the agent has not registered.
    let _spinner = Spinner::start();
    let pid = std::process::id();
    s.track_process(pid, &proc315(0)).expect("track_process");
    wait_for_notice(&mut s, pid, NOTICE_UNKNOWN_THREAD);
    // Any process that calls execve, tracked or not.
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("run true");
    let child_pid = child.id();
    child.wait().expect("wait for true");
    wait_for_notice(&mut s, child_pid, NOTICE_EXEC);
    // A thread of a tracked process, not its main one, exiting (this machine has the kernel's
    // BTF, which the lifetime programs need).
    assert!(s.notices_lifetimes(), "the fork and exit programs attached");
    std::thread::spawn(|| {})
        .join()
        .expect("a thread that exits");
    wait_for_notice(&mut s, pid, NOTICE_THREAD_EXIT);
    // Taken notices are gone.
    let left = s.take_notices(None);
    assert!(
        left.iter().all(|&(p, _)| p != child_pid),
        "taken twice: {left:?}"
    );
}

#[test]
fn full_ring_wakes_reader_and_drops() {
    let chain = Chain::new(&PY315, 1000);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));

    // Threshold 1 byte: every record forces a wakeup, so the descriptor becomes readable.
    let mut s = load(&BpfConfig {
        wakeup_bytes: 1,
        ..config()
    });
    let spinner = Spinner::start();
    s.track_process(std::process::id(), &proc315(0))
        .expect("track");
    s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
    let mut pfd = libc::pollfd {
        fd: s.ring_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, DEADLINE.as_millis() as libc::c_int) };
    assert_eq!(
        ready,
        1,
        "ring buffer never became readable; counters: {:?}",
        counters(&s)
    );
    // Readable as soon as a record is reserved; the forced wakeup is counted at its submit.
    wait_for_count(&mut s, Counter::WakeupForced);
    assert!(s.drain(|_| {}) > 0);
    drop((s, spinner));

    // A one-page ring cannot hold a 1000-frame record (32 KiB): every sample is dropped.
    let mut s = load(&BpfConfig {
        ring_bytes: 4096,
        ..config()
    });
    let spinner = Spinner::start();
    s.track_process(std::process::id(), &proc315(0))
        .expect("track");
    s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
    wait_for_count(&mut s, Counter::RingbufDropped);
    assert_eq!(s.counter(Counter::SamplesEmitted).expect("counter"), 0);
    drop(spinner);
}

#[test]
fn map_updates() {
    let mut s = BpfSampler::load_detached(&config()).expect("load");
    s.set_thread(42, 0x1000).expect("set");
    s.set_thread(43, 0x2000).expect("set");
    s.set_thread(42, 0x3000).expect("replace");
    let mut t = s.threads().expect("threads");
    t.sort_unstable();
    assert_eq!(t, vec![(42, 0x3000), (43, 0x2000)]);
    s.remove_thread(42).expect("remove");
    s.remove_thread(42).expect("remove absent");
    assert_eq!(s.threads().expect("threads"), vec![(43, 0x2000)]);
    s.track_process(7, &proc315(0)).expect("track");
    s.untrack_process(7).expect("untrack");
    s.untrack_process(7).expect("untrack absent");
    let bad = PaProc {
        interpreter_frame_owner: 200,
        ..proc315(0)
    };
    assert!(s.track_process(7, &bad).is_err());
}

/// Cost per BPF run for fake 3.15 chains (prints a table; run with --ignored --nocapture
/// --test-threads=1 on an otherwise idle machine).
#[test]
#[ignore = "benchmark: prints BPF ns per run"]
fn bench_ns_per_run() {
    const RATE_HZ: u64 = 999;
    const SECS: u64 = 4;
    let chain = Chain::new(&PY315, 1000);

    // Runs that do not walk (idle CPU, this process's other threads) cost `other_ns` each; a
    // baseline with the spinner untracked measures it.
    let run = |depth: Option<usize>, anchor: Option<usize>| -> (u64, u64, u64, u64) {
        let mut ts = TState::new();
        let mut flags = 0;
        if let Some(d) = depth {
            ts.set(72, chain.addr(1000 - d));
        }
        if let Some(a) = anchor {
            flags |= PROC_ANCHOR;
            ts.set(
                88,
                chain.addr(1000 - depth.expect("anchor needs depth") + a - 1),
            )
            .set(96, 1);
        }
        let mut s = load(&BpfConfig {
            rate_hz: RATE_HZ,
            enable_stats: true,
            ..config()
        });
        assert!(s.run_stats().is_some(), "BPF statistics need CAP_SYS_ADMIN");
        let spinner = Spinner::start();
        s.track_process(std::process::id(), &proc315(flags))
            .expect("track");
        if depth.is_some() {
            s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
        }
        let end = Instant::now() + Duration::from_secs(SECS);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            s.drain(|_| {});
        }
        let (ns, runs) = s.run_stats().expect("stats");
        let emitted = s.counter(Counter::SamplesEmitted).expect("counter");
        let frames = s.counter(Counter::Frames).expect("counter");
        drop(spinner);
        (ns, runs, emitted, frames)
    };

    let (base_ns, base_runs, _, _) = run(None, None);
    let other_ns = base_ns as f64 / base_runs.max(1) as f64;
    eprintln!("baseline (no walk): {base_runs} runs, {other_ns:.0} ns/run");
    if let Some(size) = load(&config()).program_size() {
        eprintln!("program size: {size:?}");
    }
    eprintln!(
        "{:>6} {:>7} {:>7} {:>8} {:>9} {:>11} {:>12}",
        "depth", "anchor", "runs", "walks", "frames/w", "ns/run all", "ns/walk est"
    );
    for (depth, anchor) in [
        (10, None),
        (100, None),
        (1000, None),
        (100, Some(1)),
        (100, Some(5)),
        (1000, Some(5)),
    ] {
        let (ns, runs, walks, frames) = run(Some(depth), anchor);
        let walk_ns = (ns as f64 - (runs - walks) as f64 * other_ns) / walks.max(1) as f64;
        eprintln!(
            "{depth:>6} {:>7} {runs:>7} {walks:>8} {:>9.0} {:>11.0} {walk_ns:>12.0}",
            anchor.map_or("-".to_owned(), |a| a.to_string()),
            frames as f64 / walks.max(1) as f64,
            ns as f64 / runs.max(1) as f64,
        );
    }
}

/// What reading the trace context (trace id, span id) costs a walk (prints a table; run with --ignored --nocapture
/// --test-threads=1 on an otherwise idle machine): a depth-10 3.15 chain walked on every run
/// (the perf event follows the spinner alone), without the flag (a process that publishes
/// nothing), and reading a valid record through static TLS and through the DTV.
#[test]
#[ignore = "benchmark: prints the ns per run of reading the span"]
fn bench_span_read() {
    const RATE_HZ: u64 = 999;
    const SECS: u64 = 4;
    let chain = Chain::new(&PY315, 10);
    let mut ts = TState::new();
    ts.set(72, chain.addr(0));
    let record = otel_record([0x22; 16], [0x11; 8], 1);
    let spinner = Spinner::start();
    spinner.publish(record.as_ptr() as u64);
    let tls = spinner.tls;
    eprintln!(
        "{:>22} {:>7} {:>8} {:>8}",
        "span", "runs", "spans", "ns/run (median of 100 ms)"
    );
    for (what, flags, otel) in [
        ("not published", 0, PaOtelCtx::default()),
        ("static TLS", PROC_TRACE_CONTEXT, tls.static_tls()),
        ("DTV", PROC_TRACE_CONTEXT, tls.dtv()),
        ("not published (again)", 0, PaOtelCtx::default()),
    ] {
        let mut s = load(&BpfConfig {
            rate_hz: RATE_HZ,
            enable_stats: true,
            only_thread: Some(spinner.tid),
            ..config()
        });
        assert!(s.run_stats().is_some(), "BPF statistics need CAP_SYS_ADMIN");
        let proc = PaProc {
            otel,
            ..proc315(flags)
        };
        s.track_process(std::process::id(), &proc).expect("track");
        s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
        let mut spans = 0u64;
        // ns/run of each 100 ms: the median leaves out other tenants' bursts.
        let mut windows = Vec::new();
        let mut last = (0, 0);
        let end = Instant::now() + Duration::from_secs(SECS);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            s.drain(|r| {
                spans += u64::from(r.header().trace_context() == Some(([0x22; 16], [0x11; 8])))
            });
            let (ns, runs) = s.run_stats().expect("stats");
            if runs > last.1 {
                windows.push((ns - last.0) as f64 / (runs - last.1) as f64);
            }
            last = (ns, runs);
        }
        windows.sort_by(f64::total_cmp);
        let median = windows.get(windows.len() / 2).copied().unwrap_or(0.0);
        eprintln!("{what:>22} {:>7} {spans:>8} {median:>8.0}", last.1);
    }
}

/// With `PROC_NATIVE`, every on-CPU record of the process carries a native section after its
/// frames, whatever its depth (short and long walks): registers of the interrupted thread and a
/// copy of its stack from `sp` up. The frames themselves are unchanged.
#[test]
fn native_records_carry_registers_and_a_stack_copy() {
    for depth in [3, SHORT_FRAMES as usize + 5] {
        let chain = Chain::new(&PY315, depth);
        let mut ts = TState::new();
        ts.set(72, chain.addr(0));
        let mut s = load(&config());
        let spinner = Spinner::start();
        let pid = std::process::id();
        s.track_process(pid, &proc315(common::PROC_NATIVE))
            .expect("track_process");
        s.set_thread(spinner.tid, ts.addr()).expect("set_thread");
        let (h, frames, native) = wait_until(&mut s, "no native record", |s| {
            let mut got = None;
            s.drain(|rec| {
                let h = rec.header();
                if got.is_none() && h.pid == pid && h.tid == spinner.tid {
                    let native = rec.native().map(|n| (n.hdr, n.stack.len()));
                    got = Some((*h, rec.frames().collect::<Vec<_>>(), native));
                }
            });
            got
        });
        assert_eq!(s.malformed_records(), 0);
        assert_eq!(
            h.flags & !common::SAMPLE_NATIVE,
            SAMPLE_COMPLETE,
            "depth {depth}: {h:?}"
        );
        chain.check_prefix(&frames, depth);
        let (n, copied) = native.unwrap_or_else(|| panic!("depth {depth}: no native section"));
        assert!(n.ip != 0 && n.sp != 0, "{n:?}");
        assert_eq!(copied, n.stack_bytes as usize);
        assert!(
            copied > 0 && copied <= common::NATIVE_STACK_BYTES as usize,
            "{n:?}"
        );
        // The spinner's stack is a mapping of this process, and sp lies in it.
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let in_mapping = maps.lines().any(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap_or(0),
                u64::from_str_radix(b, 16).unwrap_or(0),
            );
            (a..b).contains(&n.sp)
        });
        assert!(in_mapping, "sp {:#x} in no mapping", n.sp);
        assert!(s.counter(Counter::NativeStacks).expect("counter") > 0);
    }
}

/// The userspace sampler's tick event, throttled (the host's limit lowered to one interrupt a
/// scheduler tick by the caller): a 200 Hz event stops after each interrupt until the next tick,
/// and on a CPU idle between the sampler's wakes that tick may not come. The ticks come late or
/// from deadlines, and the ticks taken and missed still add up to the rate.
fn userspace_ticks_keep_their_rate_while_their_event_is_throttled() {
    use pyagent::sampler::tick::{TickSource, Ticker, Wait};
    let rate = 200;
    // Above the limit the kernel would throttle the event at every tick: the ticker sleeps.
    assert_eq!(Ticker::new(300).source(), TickSource::Sleep);
    let mut ticker = Ticker::new(rate);
    assert_eq!(ticker.source(), TickSource::PerfEvent);
    let start = Instant::now();
    let (mut taken, mut missed) = (0u64, 0u64);
    while taken < 200 {
        match ticker.wait(None) {
            Wait::Tick { missed: m } => {
                taken += 1;
                missed += m;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(ticker.stats().throttles > 0, "{:?}", ticker.stats());
    // The first tick is the start's, at no time.
    let due = start.elapsed().as_secs_f64() * f64::from(rate) + 1.0;
    let counted = (taken + missed) as f64;
    assert!(
        (counted - due).abs() <= due * 0.15 + 2.0,
        "{taken} ticks and {missed} missed in {:?} at {rate} Hz: {:?}",
        start.elapsed(),
        ticker.stats()
    );
}
