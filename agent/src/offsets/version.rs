use std::fmt;

/// A CPython version as encoded in `PY_VERSION_HEX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PythonVersion {
    /// 3
    pub major: u8,
    /// e.g. 13
    pub minor: u8,
    /// e.g. 2
    pub micro: u8,
    /// 0xA alpha, 0xB beta, 0xC release candidate, 0xF final
    pub release_level: u8,
    /// pre-release serial
    pub serial: u8,
}

impl PythonVersion {
    /// Decodes `PY_VERSION_HEX` (`0x030f02f0` is 3.15.2 final).
    pub fn from_hex(hex: u64) -> PythonVersion {
        PythonVersion {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
            micro: (hex >> 8) as u8,
            release_level: ((hex >> 4) & 0xf) as u8,
            serial: (hex & 0xf) as u8,
        }
    }

    /// A final release `major.minor.micro`.
    pub const fn new(major: u8, minor: u8, micro: u8) -> PythonVersion {
        PythonVersion {
            major,
            minor,
            micro,
            release_level: 0xf,
            serial: 0,
        }
    }

    /// Not a final release (alpha, beta, candidate).
    pub fn is_prerelease(&self) -> bool {
        self.release_level != 0xf
    }

    /// `(major, minor)`
    pub fn minor_version(&self) -> (u8, u8) {
        (self.major, self.minor)
    }
}

impl fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)?;
        match self.release_level {
            0xa => write!(f, "a{}", self.serial),
            0xb => write!(f, "b{}", self.serial),
            0xc => write!(f, "rc{}", self.serial),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_version_hex() {
        let v = PythonVersion::from_hex(0x030f02f0);
        assert_eq!(v, PythonVersion::new(3, 15, 2));
        assert_eq!(v.to_string(), "3.15.2");
        let b = PythonVersion::from_hex(0x030e00b3);
        assert!(b.is_prerelease());
        assert_eq!(b.to_string(), "3.14.0b3");
    }
}
