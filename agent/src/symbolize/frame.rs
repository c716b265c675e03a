use std::sync::Arc;

/// What a reported frame stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A Python function frame.
    Python,
    /// `<native>`: Python code below called into C, which re-entered the interpreter above.
    Native,
    /// `<GC>`: the garbage collector ran from the frame below.
    Gc,
}

/// One symbolized frame, as every exporter sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// Qualified name (`Class.method`, `outer.<locals>.inner`), or `<native>` / `<GC>`.
    pub function: Arc<str>,
    /// `co_filename` as the target sees it; `~` for pseudo-frames.
    pub file: Arc<str>,
    /// Line being executed, `None` where the location table has none.
    pub line: Option<u32>,
    /// `co_firstlineno`, the line where the function starts (0 for pseudo-frames).
    pub first_line: u32,
    /// Python frame or pseudo-frame.
    pub kind: FrameKind,
}

impl Frame {
    /// A `<native>` or `<GC>` pseudo-frame.
    pub fn pseudo(kind: FrameKind) -> Frame {
        let name = match kind {
            FrameKind::Native => "<native>",
            FrameKind::Gc => "<GC>",
            FrameKind::Python => "<python>",
        };
        Frame {
            function: Arc::from(name),
            file: Arc::from("~"),
            line: None,
            first_line: 0,
            kind,
        }
    }
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.kind, self.line) {
            (FrameKind::Python, Some(line)) => {
                write!(f, "{} ({}:{})", self.function, self.file, line)
            }
            (FrameKind::Python, None) => write!(f, "{} ({})", self.function, self.file),
            _ => write!(f, "{}", self.function),
        }
    }
}
