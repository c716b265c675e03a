//! The table. Adding an interpreter to the matrix is one row here: `cargo xtask pythons`
//! provides and verifies it, the manifest lists it, and every test matrix of a capability it
//! has (`tests/build.rs`) runs on it.

use crate::Build::{Chroot, HostApt, Pyenv, Source};
use crate::Role;
use crate::Suite::{Bullseye, Sid};
use crate::Threading::{FreeThreaded, Gil};
use crate::Version as V;

/// Every role, in manifest order.
#[rustfmt::skip]
pub const ROLES: &[Role] = &[
    // Frame objects on the heap (before 3.11): the system Pythons of RHEL 8 (platform-python
    // 3.6; 3.8 and 3.9 in AppStream), Debian bullseye (3.9), Ubuntu 20.04 (3.8) and 22.04
    // (3.10). 3.6 has no `_PyRuntime`.
    Role::new("py36", V::patch(3, 6, 15), Pyenv, Gil),
    Role::new("py37", V::patch(3, 7, 16), Pyenv, Gil),
    Role::new("py38", V::patch(3, 8, 18), Pyenv, Gil),
    Role::new("py39", V::patch(3, 9, 18), Pyenv, Gil),
    Role::new("py310", V::patch(3, 10, 13), Pyenv, Gil),
    // Debian bullseye's own 3.9, as a distribution builds it: static libpython, stripped.
    Role::new("py39-debian", V::minor(3, 9), Chroot(Bullseye, "python3.9"), Gil),
    // Debian bookworm's own 3.11: static libpython, non-PIE, stripped.
    Role::new("py311-debian", V::minor(3, 11), HostApt("python3.11"), Gil),
    Role::new("py311", V::patch(3, 11, 7), Pyenv, Gil),
    Role::new("py312", V::patch(3, 12, 1), Pyenv, Gil),
    Role::new("py313", V::patch(3, 13, 0), Pyenv, Gil),
    // The upstream tarball of Debian's `python3.13 3.13.15-1` source package.
    Role::new("py313-static", V::patch(3, 13, 15), Source, Gil),
    Role::new("py313t", V::patch(3, 13, 15), Source, FreeThreaded),
    Role::new("py314", V::minor(3, 14), Chroot(Sid, "python3.14"), Gil),
    Role::new("py315", V::minor(3, 15), Chroot(Sid, "python3.15"), Gil),
];

/// The role called `name`.
pub fn role(name: &str) -> Option<&'static Role> {
    ROLES.iter().find(|role| role.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Libpython;

    #[test]
    fn names_are_unique() {
        for (i, role) in ROLES.iter().enumerate() {
            assert!(
                ROLES[..i].iter().all(|other| other.name != role.name),
                "{} twice",
                role.name
            );
        }
    }

    #[test]
    fn capabilities_follow_version_and_build() {
        let py = |name| role(name).expect(name);
        assert!(py("py313t").free_threaded() && !py("py313t").with_gil());
        assert_eq!(py("py313t").executable_name(), "python3.13t");
        assert_eq!(py("py313t").configure_args(), ["--disable-gil"]);
        assert_eq!(py("py311").libpython(), Libpython::Shared);
        assert_eq!(py("py311-debian").libpython(), Libpython::Static);
        assert!(!py("py313").asyncio_tasks() && py("py314").asyncio_tasks());
        assert!(!py("py314").frame_cache() && py("py315").frame_cache());
        assert!(py("py315").in_chroot() && !py("py315").has_symtab());
        assert!(
            py("py39-debian").in_chroot() && py("py39-debian").libpython() == Libpython::Static
        );
        assert!(py("py313-static").has_symtab());
    }
}
