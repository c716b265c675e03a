//! Built-in layouts for CPython versions without `_Py_DebugOffsets` (3.7–3.12).

mod frame_objects;
mod v3_10;
mod v3_11;
mod v3_12;
mod v3_7;
mod v3_8;
mod v3_9;

use super::{Offsets, OffsetsError, PythonVersion};

/// The built-in layout for `version`, validated.
pub fn builtin_offsets(version: PythonVersion) -> Result<Offsets, OffsetsError> {
    if version.is_prerelease() {
        return Err(OffsetsError::PreRelease(version));
    }
    let table = match version.minor_version() {
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
        for minor in 7..=12 {
            builtin_offsets(PythonVersion::new(3, minor, 1)).expect("built-in table is valid");
        }
        assert!(builtin_offsets(PythonVersion::new(3, 6, 0)).is_err());
        assert!(builtin_offsets(PythonVersion::new(2, 7, 18)).is_err());
    }
}
