//! Export stage: a [`ProfileWindow`] -> bytes in one of the [`Format`]s.
//!
//! In comes one window from [`crate::aggregate`]; out go the bytes of one file, written to any
//! [`Write`]: a gzipped pprof `Profile` ([`pprof`]), Brendan Gregg's collapsed stacks ([`collapsed`]), an
//! SVG flame graph drawn from those ([`flamegraph`]) or a speedscope JSON file ([`speedscope`]). Every format is deterministic: the same window gives
//! the same bytes. Nothing is cached between windows.

pub mod atomic_file;
pub mod collapsed;
pub mod flamegraph;
pub mod metrics;
pub mod otlp;
pub mod pprof;
pub mod sinks;
pub mod speedscope;

use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;

use crate::aggregate::ProfileWindow;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Gzipped pprof protobuf (`perftools.profiles.Profile`), as `go tool pprof` and Pyroscope read it.
    Pprof,
    /// Collapsed stacks, one `frame;frame;... count` line per stack.
    Collapsed,
    /// An interactive SVG flame graph.
    Flamegraph,
    /// speedscope's JSON file format, one profile per thread.
    Speedscope,
}

impl Format {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [Format; 4] = [
        Format::Pprof,
        Format::Collapsed,
        Format::Flamegraph,
        Format::Speedscope,
    ];

    /// The name used on the command line and in [`Display`](fmt::Display).
    pub fn name(self) -> &'static str {
        match self {
            Format::Pprof => "pprof",
            Format::Collapsed => "collapsed",
            Format::Flamegraph => "flamegraph",
            Format::Speedscope => "speedscope",
        }
    }

    /// The format a file name's extension names: `.pb.gz`, `.pb` or `.pprof` (pprof), `.svg`
    /// (flame graph), `.txt`, `.folded` or `.collapsed` (collapsed stacks), `.json` (speedscope);
    /// `None` for any other.
    pub fn from_extension(path: &std::path::Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        [
            (".pb.gz", Format::Pprof),
            (".pb", Format::Pprof),
            (".pprof", Format::Pprof),
            (".svg", Format::Flamegraph),
            (".txt", Format::Collapsed),
            (".folded", Format::Collapsed),
            (".collapsed", Format::Collapsed),
            (".json", Format::Speedscope),
        ]
        .into_iter()
        .find_map(|(ext, format)| name.ends_with(ext).then_some(format))
    }

    /// The file extension, without the leading dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Pprof => "pb.gz",
            Format::Collapsed => "txt",
            Format::Flamegraph => "svg",
            Format::Speedscope => "speedscope.json",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = ExportError;

    fn from_str(name: &str) -> Result<Format, ExportError> {
        Format::ALL
            .into_iter()
            .find(|format| format.name() == name)
            .ok_or_else(|| ExportError::UnknownFormat {
                name: name.to_owned(),
            })
    }
}

/// Why a window could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The name is none of `pprof`, `collapsed`, `flamegraph`, `speedscope`.
    #[error(
        "unknown export format {name:?} (expected pprof, collapsed, flamegraph or speedscope)"
    )]
    UnknownFormat {
        /// The name given.
        name: String,
    },
    /// The format cannot represent a window without samples (a flame graph has nothing to draw); skip it.
    #[error("no samples in the window, nothing to write as {format}")]
    EmptyWindow {
        /// The format asked for.
        format: Format,
    },
    /// Writing the output failed.
    #[error("cannot write {format} output")]
    Write {
        /// The format being written.
        format: Format,
        /// The writer's error.
        #[source]
        source: io::Error,
    },
}

/// Writes `window` to `out` as `format`.
pub fn write(
    format: Format,
    window: &ProfileWindow,
    out: &mut impl Write,
) -> Result<(), ExportError> {
    let result = match format {
        Format::Pprof => pprof::write(window, out),
        Format::Collapsed => collapsed::write(window, out),
        Format::Flamegraph => {
            if window.is_empty() {
                return Err(ExportError::EmptyWindow { format });
            }
            flamegraph::write(window, out)
        }
        Format::Speedscope => speedscope::write(window, out),
    };
    result.map_err(|source| ExportError::Write { format, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for format in Format::ALL {
            assert_eq!(format.to_string().parse::<Format>().unwrap(), format);
        }
        assert_eq!(Format::Pprof.extension(), "pb.gz");
        assert_eq!(Format::Collapsed.extension(), "txt");
        assert_eq!(Format::Flamegraph.extension(), "svg");
        let err = "svg".parse::<Format>().unwrap_err();
        assert!(
            matches!(err, ExportError::UnknownFormat { ref name } if name == "svg"),
            "{err}"
        );
    }

    #[test]
    fn empty_flamegraph_is_refused() {
        let window = crate::aggregate::Aggregator::new(1).cut();
        let mut out = Vec::new();
        let err = write(Format::Flamegraph, &window, &mut out).unwrap_err();
        assert!(
            matches!(
                err,
                ExportError::EmptyWindow {
                    format: Format::Flamegraph
                }
            ),
            "{err}"
        );
        assert!(out.is_empty());
        write(Format::Collapsed, &window, &mut out).unwrap();
        assert!(out.is_empty());
    }
}
