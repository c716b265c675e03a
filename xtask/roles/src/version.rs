//! CPython versions as the matrix pins them.

use std::fmt;

/// The version a role must report: major and minor always, the patch release only where the
/// provider lets the matrix choose it (a distribution's package moves with the distribution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    /// `None`: any patch release of `major.minor`.
    pub patch: Option<u32>,
}

impl Version {
    /// Exactly `major.minor.patch`.
    pub const fn patch(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch: Some(patch),
        }
    }

    /// Any patch release of `major.minor`.
    pub const fn minor(major: u32, minor: u32) -> Version {
        Version {
            major,
            minor,
            patch: None,
        }
    }

    /// Whether this is `major.minor` or later.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Whether `reported` (`platform.python_version()`, such as `3.15.2` or `3.15.0b1`) is
    /// this version.
    pub fn admits(self, reported: &str) -> bool {
        let mut parts = reported.splitn(3, '.');
        let (Some(major), Some(minor), patch) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        major.parse() == Ok(self.major)
            && minor.parse() == Ok(self.minor)
            && self
                .patch
                .is_none_or(|want| patch == Some(want.to_string().as_str()))
    }
}

/// `(major, minor)` of a reported version string, such as `(3, 13)` for `3.13.0`.
pub(crate) fn major_minor(reported: &str) -> Option<(u32, u32)> {
    let mut parts = reported.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Some((major, minor)),
        _ => None,
    }
}

/// `3.13.15`, or `3.14.*` for any patch release.
impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(patch) => write!(f, "{}.{}.{patch}", self.major, self.minor),
            None => write!(f, "{}.{}.*", self.major, self.minor),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_versions_admit_their_release_only() {
        let v = Version::patch(3, 11, 7);
        assert!(v.admits("3.11.7"));
        assert!(!v.admits("3.11.70"));
        assert!(!v.admits("3.11.8"));
        assert!(!v.admits("3.11"));
        assert_eq!(v.to_string(), "3.11.7");
    }

    #[test]
    fn minor_versions_admit_any_patch_release() {
        let v = Version::minor(3, 15);
        assert!(v.admits("3.15.2"));
        assert!(v.admits("3.15.0b1"));
        assert!(!v.admits("3.1.5"));
        assert!(!v.admits("3.16.0"));
        assert_eq!(v.to_string(), "3.15.*");
    }

    #[test]
    fn later_versions_are_at_least() {
        assert!(Version::minor(3, 15).at_least(3, 14));
        assert!(Version::minor(3, 14).at_least(3, 14));
        assert!(!Version::patch(3, 13, 15).at_least(3, 14));
        assert!(Version::minor(4, 0).at_least(3, 14));
    }

    #[test]
    fn major_minor_of_reported_versions() {
        assert_eq!(major_minor("3.13.0"), Some((3, 13)));
        assert_eq!(major_minor("3.15.0b1"), Some((3, 15)));
        assert_eq!(major_minor("three"), None);
    }
}
