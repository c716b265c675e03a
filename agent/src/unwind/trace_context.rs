//! The trace and span each thread is in, as the process publishes them (OTEP 4947): the
//! thread-local `otel_thread_ctx_v1` points to a record, packed, little endian:
//!
//! | offset | field |
//! |---|---|
//! | 0 | trace id, u8[16] |
//! | 16 | span id, u8[8] |
//! | 24 | valid, u8 (1) |
//! | 25 | trace flags, u8 |
//! | 26 | attributes size, u16, then the attributes (not read) |
//!
//! In: a thread's `pthread_t`. Out: its [`TraceContext`] (trace and span ids), or none. Where the
//! variable lives ([`ThreadContextLayout`]) is found once per process; a process that publishes
//! nothing is looked at again at most every [`LOOK_AGAIN`], since the publishing extension may
//! be `dlopen`ed later. Writers do not stop for readers (they swap the pointer or clear
//! `valid`), so a record read while it changes can be torn; a record not marked valid is no
//! context. The BPF program reads the same record at the tick (`pa_read_span` in
//! `ebpf/record.bpf.h`), through the layout this finds.

use std::time::{Duration, Instant};

use common::{OTEL_READ_BYTES, OTEL_SPAN_ID_OFFSET, OTEL_VALID_OFFSET};

use super::sample::TraceContext;
use crate::discovery::look_again::LookAgain;
use crate::discovery::thread_context::{ThreadContextFinder, ThreadContextLayout};
use crate::memory::{ProcessMemory, RemoteMemory};

/// How long a process that publishes no thread context is left alone before looking again,
/// at first; each look that finds nothing doubles it, up to [`LOOK_AGAIN_MAX`] (a tracer is
/// loaded early in a process's life, or not at all).
const LOOK_AGAIN: Duration = Duration::from_secs(2);
/// The longest wait between two looks. Each look reads `/proc/PID/maps` (80 µs of kernel time
/// for a plain Python process's 48 mappings) and searches the objects found there: a host of
/// processes that publish nothing pays it for each of them at every look.
const LOOK_AGAIN_MAX: Duration = Duration::from_secs(300);
/// Bytes of the record read, from its start: the trace id, the span id and `valid`, in one
/// read (as the BPF program does).
const CONTEXT_READ: usize = OTEL_READ_BYTES as usize;
/// Offsets of the span id and of `valid` in what is read (the trace id is at 0).
const SPAN_ID: usize = OTEL_SPAN_ID_OFFSET as usize;
const VALID: usize = OTEL_VALID_OFFSET as usize;
/// Most DTV entries believed: a torn or foreign DTV reads as "no context", not a huge index.
const MAX_DTV_ENTRIES: u64 = 1 << 20;

/// One process's thread-context layout, found lazily.
#[derive(Debug)]
pub(super) struct TraceContexts {
    finder: ThreadContextFinder,
    layout: Option<ThreadContextLayout>,
    /// when to look again while it publishes nothing
    look: LookAgain,
}

impl Default for TraceContexts {
    fn default() -> TraceContexts {
        TraceContexts {
            finder: ThreadContextFinder::default(),
            layout: None,
            look: LookAgain::new(LOOK_AGAIN, LOOK_AGAIN_MAX),
        }
    }
}

impl TraceContexts {
    /// The context of the thread whose `pthread_t` is `pthread`, read through `mem`.
    pub(super) fn read(
        &mut self,
        pid: u32,
        mem: &mut impl ProcessMemory,
        pthread: u64,
    ) -> Option<TraceContext> {
        let layout = self.layout(pid)?;
        read_context(mem, &layout, pthread)
    }

    /// Whether [`TraceContexts::layout`] would look at `now`.
    pub(super) fn look_due(&self, now: Instant) -> bool {
        self.layout.is_none() && self.look.due(now)
    }

    /// Where process `pid` publishes its threads' contexts, looking again when the last look
    /// is old enough (`None`: it publishes none, as far as the last look saw).
    pub(super) fn layout(&mut self, pid: u32) -> Option<ThreadContextLayout> {
        if self.layout.is_some() {
            return self.layout;
        }
        let now = Instant::now();
        if !self.look.due(now) {
            return None;
        }
        self.look.missed(now);
        // Uncached reads: the sampler's page cache plans its prefetch from what samples read.
        self.layout = self.finder.find(pid, &mut RemoteMemory::new(pid));
        if let Some(layout) = &self.layout {
            tracing::debug!(pid, ?layout, "process publishes OTel thread contexts");
        }
        self.layout
    }
}

/// The context of the thread at `pthread`: its DTV, its entry for the publishing module, the
/// variable in that module's TLS block, the record it points to.
pub(super) fn read_context(
    mem: &mut impl ProcessMemory,
    layout: &ThreadContextLayout,
    pthread: u64,
) -> Option<TraceContext> {
    if pthread == 0 {
        return None;
    }
    let variable = match layout.static_offset {
        // x86_64: static TLS lies below the thread pointer, which `pthread_t` is.
        Some(offset) => pthread
            .checked_sub(offset)?
            .checked_add(layout.offset_in_block)?,
        None => dtv_variable(mem, layout, pthread)?,
    };
    let record = mem.read_u64(variable).ok()?;
    if record == 0 {
        return None;
    }
    let mut bytes = [0u8; CONTEXT_READ];
    mem.read(record, &mut bytes).ok()?;
    if bytes[VALID] != 1 {
        return None;
    }
    let (trace_id, rest) = bytes.split_first_chunk::<SPAN_ID>()?;
    let (span_id, _) = rest.split_first_chunk::<8>()?;
    Some(TraceContext {
        trace_id: *trace_id,
        span_id: *span_id,
    })
}

/// The variable's address in the thread's copy of a dynamically allocated block: through the
/// thread's DTV (`None` while the thread has not touched the module).
fn dtv_variable(
    mem: &mut impl ProcessMemory,
    layout: &ThreadContextLayout,
    pthread: u64,
) -> Option<u64> {
    let dtv = mem
        .read_u64(pthread.checked_add(layout.dtv_in_pthread)?)
        .ok()?;
    // dtv[-1] counts the entries; a thread that never touched a module loaded after it started
    // has a shorter DTV, and nothing published.
    let entries = mem.read_u64(dtv.checked_sub(layout.dtv_entry_size)?).ok()?;
    if layout.module_id > entries.min(MAX_DTV_ENTRIES) {
        return None;
    }
    let entry = layout
        .module_id
        .checked_mul(layout.dtv_entry_size)?
        .checked_add(dtv)?
        .checked_add(layout.pointer_in_entry)?;
    let block = mem.read_u64(entry).ok()?;
    // 0 or -1 (TLS_DTV_UNALLOCATED): this thread has no block for the module yet.
    if block == 0 || block == u64::MAX {
        return None;
    }
    block.checked_add(layout.offset_in_block)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeMemory;

    const BASE: u64 = 0x1000;
    const PTHREAD: u64 = BASE;
    const DTV: u64 = BASE + 0x110; // dtv[-1] at 0x100
    const BLOCK: u64 = BASE + 0x200;
    const RECORD: u64 = BASE + 0x300;
    const LAYOUT: ThreadContextLayout = ThreadContextLayout {
        dtv_in_pthread: 8,
        dtv_entry_size: 16,
        pointer_in_entry: 0,
        module_id: 2,
        offset_in_block: 0x10,
        static_offset: None,
    };

    fn put(mem: &mut FakeMemory, addr: u64, data: &[u8]) {
        let at = (addr - BASE) as usize;
        mem.bytes[at..at + data.len()].copy_from_slice(data);
    }

    /// A thread whose DTV has 2 entries, the second the publisher's block, pointing to a valid
    /// record.
    fn thread() -> FakeMemory {
        let mut mem = FakeMemory {
            base: BASE,
            bytes: vec![0; 0x400],
        };
        put(&mut mem, PTHREAD + 8, &DTV.to_le_bytes());
        put(&mut mem, DTV - 16, &2u64.to_le_bytes());
        put(&mut mem, DTV + 2 * 16, &BLOCK.to_le_bytes());
        put(&mut mem, BLOCK + 0x10, &RECORD.to_le_bytes());
        let ids: Vec<u8> = (1..=24).collect();
        put(&mut mem, RECORD, &ids);
        put(&mut mem, RECORD + 24, &[1, 1, 0, 0]);
        mem
    }

    #[test]
    fn a_valid_record_is_the_threads_context() {
        let ctx = read_context(&mut thread(), &LAYOUT, PTHREAD).expect("a context");
        assert_eq!(ctx.trace_id_hex(), "0102030405060708090a0b0c0d0e0f10");
        assert_eq!(ctx.span_id_hex(), "1112131415161718");
    }

    /// A block in static TLS is found below the thread pointer, whatever the DTV says (a thread
    /// that ran before the object was loaded has no DTV entry for it).
    #[test]
    fn a_block_in_static_tls_is_read_below_the_thread_pointer() {
        let mut mem = thread();
        put(&mut mem, DTV + 2 * 16, &u64::MAX.to_le_bytes());
        let pthread = BASE + 0x380;
        // The block starts 0x180 below the thread pointer: at BLOCK.
        let layout = ThreadContextLayout {
            static_offset: Some(pthread - BLOCK),
            ..LAYOUT
        };
        let ctx = read_context(&mut mem, &layout, pthread).expect("a context");
        assert_eq!(ctx.span_id_hex(), "1112131415161718");
        assert_eq!(
            read_context(&mut mem, &LAYOUT, pthread),
            None,
            "no DTV entry"
        );
    }

    #[test]
    fn no_record_an_invalid_one_or_no_block_is_no_context() {
        let mut mem = thread();
        put(&mut mem, RECORD + 24, &[0]);
        assert_eq!(read_context(&mut mem, &LAYOUT, PTHREAD), None);
        let mut mem = thread();
        put(&mut mem, BLOCK + 0x10, &0u64.to_le_bytes());
        assert_eq!(read_context(&mut mem, &LAYOUT, PTHREAD), None);
        let mut mem = thread();
        put(&mut mem, DTV + 2 * 16, &u64::MAX.to_le_bytes());
        assert_eq!(read_context(&mut mem, &LAYOUT, PTHREAD), None);
    }

    #[test]
    fn a_module_beyond_the_dtv_or_garbage_pointers_are_no_context() {
        let mut mem = thread();
        put(&mut mem, DTV - 16, &1u64.to_le_bytes());
        assert_eq!(read_context(&mut mem, &LAYOUT, PTHREAD), None);
        let mut mem = thread();
        put(&mut mem, PTHREAD + 8, &u64::MAX.to_le_bytes());
        assert_eq!(read_context(&mut mem, &LAYOUT, PTHREAD), None);
        assert_eq!(read_context(&mut thread(), &LAYOUT, 0), None);
        assert_eq!(read_context(&mut thread(), &LAYOUT, u64::MAX - 4), None);
    }
}
