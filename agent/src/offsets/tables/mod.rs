//! Built-in layouts for CPython versions without `_Py_DebugOffsets` (3.6–3.12).

mod frame_objects;
mod v3_10;
mod v3_11;
mod v3_12;
mod v3_6;
mod v3_7;
mod v3_8;
mod v3_9;

use super::{Offsets, OffsetsError, PythonVersion};

/// The minor versions of 3.x whose runtime says its version nowhere a reader can look before
/// it has chosen a layout (no `Py_Version`, no `_Py_DebugOffsets`): their tables are tried in
/// turn.
pub const UNLABELLED_MINORS: [u8; 4] = [7, 8, 9, 10];

/// What the CPython release a file names (`libpython3.9.so.1.0`, `python2.7`) means for
/// finding its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedRelease {
    /// One of [`UNLABELLED_MINORS`]: its table is tried first.
    Unlabelled(u8),
    /// A release whose runtime says its version (`Py_Version`, 3.11+).
    Labelled,
    /// 3.6: no `_PyRuntime`; its interpreter list and GIL are statics of their own, and
    /// `sys.hexversion` says the exact version.
    Statics,
    /// A release with no layout here (2.x, 3.0–3.5).
    Unsupported,
}

impl NamedRelease {
    /// The minor versions whose tables to try, in order, for a file that names this release.
    pub fn minors_to_try(self) -> &'static [u8] {
        match self {
            NamedRelease::Unlabelled(minor) => {
                let at = UNLABELLED_MINORS
                    .iter()
                    .position(|&m| m == minor)
                    .unwrap_or(0);
                &UNLABELLED_MINORS[at..=at]
            }
            NamedRelease::Labelled | NamedRelease::Statics | NamedRelease::Unsupported => {
                &UNLABELLED_MINORS
            }
        }
    }
}

/// What release `major.minor`, as a file names it, is.
pub fn named_release(major: u8, minor: u8) -> NamedRelease {
    match (major, minor) {
        (3, m) if UNLABELLED_MINORS.contains(&m) => NamedRelease::Unlabelled(m),
        (3, m) if m > 10 => NamedRelease::Labelled,
        (3, 6) => NamedRelease::Statics,
        _ => NamedRelease::Unsupported,
    }
}

/// The built-in layout for `version`, validated.
pub fn builtin_offsets(version: PythonVersion) -> Result<Offsets, OffsetsError> {
    if version.is_prerelease() {
        return Err(OffsetsError::PreRelease(version));
    }
    let table = match version.minor_version() {
        (3, 6) => v3_6::OFFSETS,
        (3, 7) => v3_7::OFFSETS,
        (3, 8) => v3_8::OFFSETS,
        (3, 9) => v3_9::OFFSETS,
        (3, 10) => v3_10::OFFSETS,
        (3, 11) => v3_11::OFFSETS,
        (3, 12) => v3_12::OFFSETS,
        _ => return Err(OffsetsError::Unsupported(version)),
    };
    let offsets = Offsets { version, ..table };
    offsets.validate()?;
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_validate() {
        for minor in 6..=12 {
            builtin_offsets(PythonVersion::new(3, minor, 1)).expect("built-in table is valid");
        }
        assert!(builtin_offsets(PythonVersion::new(3, 5, 0)).is_err());
        assert!(builtin_offsets(PythonVersion::new(2, 7, 18)).is_err());
    }
}
