//! Thread names: each thread's `threading.Thread.name`, read from the target's memory, as
//! py-spy shows them; the OS name from /proc where there is none (a thread `threading` does not
//! know, a process that never imported it, a read that failed).
//!
//! In: a thread id in the target's PID namespace. Out: its name, and its host TID. The Python
//! names come from `sys.modules["threading"]._active`, a dict {pthread ident → `Thread`}: each
//! `Thread`'s `_name` attribute, matched to a native thread id through the `thread_id` of the
//! thread states. Cached: read again when a thread id shows up that the last read did not see
//! (at most every [`MIN_REREAD`]) and when the names are [`MAX_AGE`] old (a renamed thread), never
//! per sample. A read goes through a page cache of its own, so it neither disturbs the sampler's
//! (and the prefetch plan it keeps) nor counts in its syscalls. Everything read is untrusted:
//! sizes and counts are bounded, and a failure means "no Python names", never a panic.
//!
//! This module is the cache and the walk from the runtime to the names; decoding the objects
//! on the way (dicts, ints, strs, instance attributes) is [`objects`]'s.

pub(super) mod objects;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

// foldhash: looked up on every sample, keyed by thread ids.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::threads::{MAX_INTERPRETERS, MAX_THREADS};
use crate::discovery::{task_ids, thread_name, PythonTarget};
use crate::memory::{MemoryError, PageCache, ProcessMemory, RemoteMemory, StructBytes};
use crate::offsets::{NativeThreadId, Offsets, ThreadNameOffsets};
use crate::symbolize::ObjectError;
use objects::{KeyHints, Reader};

/// How long Python names are used before they are read again, for threads renamed after they
/// started (`thread.name = ...`). Renames are rare (pools name their threads before they start,
/// and a new thread is read at once, see [`MIN_REREAD`]), while each read costs a dozen page
/// reads per process: at 1 s, with 50 processes, these reads were 15% of the agent's CPU. One
/// default profile window: a rename shows in the next window at the latest.
const MAX_AGE: Duration = Duration::from_secs(10);
/// Shortest time between two reads made for a thread the last one did not see: bounds the cost
/// when threads come and go faster than that.
const MIN_REREAD: Duration = Duration::from_millis(20);
/// Longest thread name kept, in characters.
const MAX_NAME_CHARS: usize = 256;
/// Pages one read of the names may cache.
const NAME_READ_PAGES: usize = 1024;
/// Positions of found keys remembered before the memo is cleared.
const MAX_HINTS: usize = 1024;

/// Host TIDs and names of one process's threads.
#[derive(Debug, Default)]
pub(super) struct ThreadNames {
    /// namespace TID → (host TID, /proc name), reloaded when an unknown thread shows up
    by_ns_tid: HashMap<u32, (u32, Option<Arc<str>>)>,
    /// host TID → namespace TID, for BPF records (which carry host TIDs)
    ns_of_host: HashMap<u32, u32>,
    python: PythonNames,
}

impl ThreadNames {
    /// Host TID and /proc name of a thread, reading /proc again if it is not known.
    fn lookup(&mut self, pid: u32, ns_tid: u32) -> Option<&(u32, Option<Arc<str>>)> {
        if !self.by_ns_tid.contains_key(&ns_tid) {
            self.reload(pid);
        }
        self.by_ns_tid.get(&ns_tid)
    }

    /// The host TID of a thread given its namespace TID.
    pub(super) fn host_tid(&mut self, pid: u32, ns_tid: u32) -> Option<u32> {
        self.lookup(pid, ns_tid).map(|(host, _)| *host)
    }

    /// The name of thread `ns_tid`: its `threading` name, else the OS one; `now` is when the
    /// caller's batch began, what the names' age is measured at.
    pub(super) fn name(
        &mut self,
        target: &PythonTarget,
        ns_tid: u32,
        now: Instant,
    ) -> Option<Arc<str>> {
        if let Some(name) = self.python.name(target, ns_tid, now) {
            return Some(name);
        }
        self.lookup(target.pid, ns_tid).and_then(|(_, n)| n.clone())
    }

    /// The namespace TID of a host TID (itself outside containers).
    pub(super) fn ns_tid_of(&mut self, pid: u32, host_tid: u32) -> u32 {
        if !self.ns_of_host.contains_key(&host_tid) {
            self.reload(pid);
        }
        // A thread gone from /proc keeps its own id, without a /proc read per record.
        *self.ns_of_host.entry(host_tid).or_insert(host_tid)
    }

    /// Reads of the Python names made so far.
    pub(super) fn python_reads(&self) -> u64 {
        self.python.reads
    }

    fn reload(&mut self, pid: u32) {
        self.by_ns_tid = task_ids(pid)
            .into_iter()
            .map(|t| {
                (
                    t.ns_tid,
                    (t.host_tid, thread_name(pid, t.host_tid).map(Arc::from)),
                )
            })
            .collect();
        self.ns_of_host = self
            .by_ns_tid
            .iter()
            .map(|(ns, (host, _))| (*host, *ns))
            .collect();
    }
}

/// The `threading` names of a process, as of the last read.
#[derive(Debug, Default)]
struct PythonNames {
    /// namespace TID → name
    names: HashMap<u32, Arc<str>>,
    /// thread ids the last read found (named or not) or was made for
    seen: HashSet<u32>,
    read_at: Option<Instant>,
    hints: KeyHints,
    reads: u64,
}

impl PythonNames {
    fn name(&mut self, target: &PythonTarget, ns_tid: u32, now: Instant) -> Option<Arc<str>> {
        // No layout for them: /proc names only.
        target.offsets.thread_names?;
        if needs_read(self.read_at, now, || self.seen.contains(&ns_tid)) {
            self.refresh(target, now);
            // Asked for and still unseen: not worth another read before the names age.
            self.seen.insert(ns_tid);
        }
        self.names.get(&ns_tid).cloned()
    }

    fn refresh(&mut self, target: &PythonTarget, now: Instant) {
        self.read_at = Some(now);
        self.reads += 1;
        let mut mem = PageCache::new(RemoteMemory::new(target.pid), NAME_READ_PAGES);
        match read_python_names(
            &mut mem,
            &target.offsets,
            target.runtime_addr,
            &mut self.hints,
        ) {
            Ok(read) => {
                self.names = read.names;
                self.seen = read.seen;
            }
            // A torn read keeps the names it would have replaced; a process that cannot be
            // read any more is the sampler's to notice.
            Err(e) => tracing::trace!(pid = target.pid, error = %e, "reading thread names failed"),
        }
    }
}

/// Whether names read at `read_at` must be read again at `now` for a thread the last read saw
/// (`seen`) or not.
fn needs_read(read_at: Option<Instant>, now: Instant, seen: impl FnOnce() -> bool) -> bool {
    read_at.is_none_or(|at| {
        let age = now.saturating_duration_since(at);
        age >= MAX_AGE || (age >= MIN_REREAD && !seen())
    })
}

/// What one read of the names found.
#[derive(Debug, Default, PartialEq, Eq)]
struct PythonThreadNames {
    /// namespace TID → `threading` name
    names: HashMap<u32, Arc<str>>,
    /// every thread id of the thread lists (named or not)
    seen: HashSet<u32>,
}

/// Reads the `threading` name of every thread of every interpreter; the main interpreter's
/// name wins for a thread that has several. An interpreter whose names cannot be read (no
/// `threading`, a torn read) leaves its threads unnamed.
fn read_python_names(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    runtime: u64,
    hints: &mut KeyHints,
) -> Result<PythonThreadNames, ObjectError> {
    let n = o
        .thread_names
        .as_ref()
        .ok_or(ObjectError::Malformed { addr: runtime })?;
    if hints.len() > MAX_HINTS {
        hints.clear();
    }
    let mut r = Reader::new(mem, o, n, hints);
    let mut out = PythonThreadNames::default();
    let mut interp = r.u64_at(runtime, o.runtime_state.interpreters_head)?;
    let mut visited = HashSet::new();
    // Newest first: the main interpreter, the oldest, comes last and overrides.
    while interp != 0 && visited.len() < MAX_INTERPRETERS && visited.insert(interp) {
        let idents = thread_idents(&mut r, o, interp)?;
        out.seen.extend(idents.values().copied());
        match active_names(&mut r, n, interp) {
            Ok(names) => {
                for (ident, name) in names {
                    if let Some(&tid) = idents.get(&ident) {
                        out.names.insert(tid, name);
                    }
                }
            }
            Err(e) if is_fatal(&e) => return Err(e),
            Err(_) => {}
        }
        interp = r.u64_at(interp, o.interpreter_state.next)?;
    }
    Ok(out)
}

/// pthread ident → namespace TID of every thread state of the interpreter at `interp`.
fn thread_idents(
    r: &mut Reader<'_, impl ProcessMemory>,
    o: &Offsets,
    interp: u64,
) -> Result<HashMap<u64, u32>, ObjectError> {
    let t = &o.thread_state;
    let mut out = HashMap::new();
    let mut visited = HashSet::new();
    let mut tstate = r.u64_at(interp, o.interpreter_state.threads_head)?;
    let mut buf = [0u8; 512];
    let native = match t.native_thread_id {
        NativeThreadId::Field(off) => off,
        NativeThreadId::InPthread { .. } => 0,
    };
    let len = (t.next.max(t.thread_id).max(native) + 8).min(512) as usize;
    while tstate != 0 && visited.len() < MAX_THREADS && visited.insert(tstate) {
        let buf = &mut buf[..len];
        r.read(tstate, buf)?;
        let tid = match t.native_thread_id {
            NativeThreadId::Field(off) => buf.u64_at(off) as u32,
            NativeThreadId::InPthread { offset: 0 } => 0,
            NativeThreadId::InPthread { offset } => match buf.u64_at(t.thread_id) {
                0 => 0,
                pthread => r.u64_at(pthread, offset)? as u32,
            },
        };
        if tid != 0 {
            out.insert(buf.u64_at(t.thread_id), tid);
        }
        tstate = buf.u64_at(t.next);
    }
    Ok(out)
}

/// pthread ident → `_name` of each `Thread` in the interpreter's `threading._active`.
fn active_names(
    r: &mut Reader<'_, impl ProcessMemory>,
    n: &ThreadNameOffsets,
    interp: u64,
) -> Result<Vec<(u64, Arc<str>)>, ObjectError> {
    let modules = r.u64_at(interp, n.imports_modules)?;
    let Some(threading) = r.dict_get(modules, "threading")? else {
        return Ok(Vec::new());
    };
    let md_dict = r.u64_at(threading, n.md_dict)?;
    let Some(active) = r.dict_get(md_dict, "_active")? else {
        return Ok(Vec::new());
    };
    let table = r.open_dict(active)?;
    let mut out = Vec::new();
    for (key, thread) in r.entries(&table, MAX_THREADS as u64)? {
        match active_thread_name(r, key, thread) {
            Ok(Some(named)) => out.push(named),
            Ok(None) => {}
            Err(e) if is_fatal(&e) => return Err(e),
            // One thread torn or strange: the others still have their names.
            Err(_) => {}
        }
    }
    Ok(out)
}

/// The ident (an int key of `_active`) and `_name` of one `Thread`.
fn active_thread_name(
    r: &mut Reader<'_, impl ProcessMemory>,
    key: u64,
    thread: u64,
) -> Result<Option<(u64, Arc<str>)>, ObjectError> {
    let Some(ident) = r.read_int(key)? else {
        return Ok(None);
    };
    let Some(name) = r.instance_attr(thread, "_name")? else {
        return Ok(None);
    };
    // A `_name` that is not a str (user code can set anything) is not a name.
    let Some(name) = r.str_prefix(name, MAX_NAME_CHARS)? else {
        return Ok(None);
    };
    Ok(Some((ident, Arc::from(name))))
}

/// The process is gone or unreadable: nothing further can be read.
fn is_fatal(e: &ObjectError) -> bool {
    matches!(
        e,
        ObjectError::Memory(MemoryError::Gone { .. } | MemoryError::Denied { .. })
    )
}
