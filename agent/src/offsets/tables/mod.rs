//! Built-in layouts for CPython versions without `_Py_DebugOffsets` (3.11, 3.12).

mod v3_11;
mod v3_12;

use super::{Offsets, OffsetsError, PythonVersion};

/// The built-in layout for `version`, validated.
pub fn builtin_offsets(version: PythonVersion) -> Result<Offsets, OffsetsError> {
    if version.is_prerelease() {
        return Err(OffsetsError::PreRelease(version));
    }
    let table = match version.minor_version() {
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
        for v in [PythonVersion::new(3, 11, 2), PythonVersion::new(3, 12, 1)] {
            builtin_offsets(v).expect("built-in table is valid");
        }
        assert!(builtin_offsets(PythonVersion::new(3, 10, 0)).is_err());
    }
}
