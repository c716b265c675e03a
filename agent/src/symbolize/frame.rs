use std::sync::{Arc, LazyLock};

use super::native::ObjectName;

/// What a reported frame stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A Python function frame.
    Python,
    /// `<native>`: Python code below called into C, which re-entered the interpreter above.
    Native,
    /// `<GC>`: the garbage collector ran from the frame below.
    Gc,
    /// `<task NAME>`: the asyncio task whose coroutine runs in the frames above (task-aware
    /// stacks); the frames below belong to the task awaiting it, or to the event loop.
    Task,
    /// A function of native code (C, C++, Rust) in a loaded object.
    NativeCode,
    /// A kernel function.
    Kernel,
    /// `[truncated native]`: native frames the unwind did not reach (the stack copy's end, code
    /// it could not unwind) between the last native frame it named and the Python frames below.
    TruncatedNative,
    /// `[stack moved while read]`: the frames above the ones shown changed while the userspace
    /// sampler read them (the thread ran on); only the frames below, proven by a second read,
    /// are kept.
    Moved,
}

/// What a frame runs: the parts of a code object a profile shows, shared by every frame of it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CodeName {
    /// Qualified name (`Class.method`, `outer.<locals>.inner`), or `<native>` / `<GC>`.
    pub function: Arc<str>,
    /// `co_filename` as the target sees it; `~` for pseudo-frames.
    pub file: Arc<str>,
    /// `co_firstlineno`, the line where the function starts (0 for pseudo-frames and native
    /// code).
    pub first_line: u32,
    /// The object native code lies in (`None` for Python frames and pseudo-frames).
    pub object: Option<Arc<ObjectName>>,
    /// The function name and first line hashed once, at construction (see the `Hash` impl).
    name_hash: u64,
}

/// Hashes the function name and first line only, hashed once when the name is made: names
/// that are equal have those equal, and they tell nearly all names apart. The aggregator hashes
/// every frame of every sample; a native frame's file and object are long paths (and a build ID)
/// that would triple the bytes, and rehashing the function name per sample was a tenth of the
/// agent's time at 50 busy processes.
impl std::hash::Hash for CodeName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.name_hash);
    }
}

/// One hasher for the agent's lifetime, so two equal names made apart hash alike; its seed is
/// random, as a map's is, since the names come from the targets' memory.
static NAME_HASHER: LazyLock<foldhash::fast::RandomState> =
    LazyLock::new(foldhash::fast::RandomState::default);

fn name_hash(function: &str, first_line: u32) -> u64 {
    use std::hash::BuildHasher;
    NAME_HASHER.hash_one((function, first_line))
}

impl CodeName {
    /// A code name.
    pub fn new(function: &str, file: &str, first_line: u32) -> CodeName {
        CodeName::from_parts(Arc::from(function), Arc::from(file), first_line, None)
    }

    /// A code name of shared strings.
    pub fn from_parts(
        function: Arc<str>,
        file: Arc<str>,
        first_line: u32,
        object: Option<Arc<ObjectName>>,
    ) -> CodeName {
        CodeName {
            name_hash: name_hash(&function, first_line),
            function,
            file,
            first_line,
            object,
        }
    }

    /// A function of native code: its (demangled) name in `object` (the file is the object's
    /// path).
    pub fn native(function: &str, object: Arc<ObjectName>) -> CodeName {
        CodeName::from_parts(
            Arc::from(function),
            Arc::clone(&object.path),
            0,
            Some(object),
        )
    }
}

/// One symbolized frame, as every exporter sees it. Cloning one is a single reference count:
/// a sample copies a hundred of them out of the frame cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// Function, file and first line.
    pub code: Arc<CodeName>,
    /// Line being executed, `None` where the location table has none.
    pub line: Option<u32>,
    /// Python frame or pseudo-frame.
    pub kind: FrameKind,
}

static NATIVE: LazyLock<Arc<CodeName>> =
    LazyLock::new(|| Arc::new(CodeName::new("<native>", "~", 0)));
static GC: LazyLock<Arc<CodeName>> = LazyLock::new(|| Arc::new(CodeName::new("<GC>", "~", 0)));
static TASK: LazyLock<Arc<CodeName>> = LazyLock::new(|| Arc::new(CodeName::new("<task>", "~", 0)));
static TRUNCATED: LazyLock<Arc<CodeName>> =
    LazyLock::new(|| Arc::new(CodeName::new("[truncated native]", "~", 0)));
static MOVED: LazyLock<Arc<CodeName>> =
    LazyLock::new(|| Arc::new(CodeName::new("[stack moved while read]", "~", 0)));
static PYTHON: LazyLock<Arc<CodeName>> =
    LazyLock::new(|| Arc::new(CodeName::new("<python>", "~", 0)));

impl Frame {
    /// A `<native>` or `<GC>` pseudo-frame.
    pub fn pseudo(kind: FrameKind) -> Frame {
        let code = match kind {
            FrameKind::Native => &NATIVE,
            FrameKind::Gc => &GC,
            FrameKind::Task => &TASK,
            FrameKind::TruncatedNative => &TRUNCATED,
            FrameKind::Moved => &MOVED,
            FrameKind::Python | FrameKind::NativeCode | FrameKind::Kernel => &PYTHON,
        };
        Frame {
            code: Arc::clone(code),
            line: None,
            kind,
        }
    }

    /// The `<task NAME>` frame of a task, from its code name ([`task_code_name`]).
    pub fn task(code: Arc<CodeName>) -> Frame {
        Frame {
            code,
            line: None,
            kind: FrameKind::Task,
        }
    }

    /// Qualified name.
    pub fn function(&self) -> &str {
        &self.code.function
    }

    /// File name.
    pub fn file(&self) -> &str {
        &self.code.file
    }
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.kind, self.line) {
            (FrameKind::Python, Some(line)) => {
                write!(f, "{} ({}:{})", self.function(), self.file(), line)
            }
            (FrameKind::Python, None) => write!(f, "{} ({})", self.function(), self.file()),
            // `deflate [libz.so.1.2.13]`, `do_syscall_64 [kernel]`: brackets, where Python
            // frames have parentheses, so that a native frame never reads as a Python one.
            (FrameKind::NativeCode | FrameKind::Kernel, _) => match &self.code.object {
                Some(o) if o.path.starts_with('[') => write!(f, "{} {}", self.function(), o.path),
                Some(o) => write!(f, "{} [{}]", self.function(), o.file_name()),
                None => write!(f, "{}", self.function()),
            },
            _ => write!(f, "{}", self.function()),
        }
    }
}

/// The code name of a `<task NAME>` frame: made once per task name, shared by its frames.
pub fn task_code_name(name: &str) -> Arc<CodeName> {
    Arc::new(CodeName::new(&format!("<task {name}>"), "~", 0))
}
