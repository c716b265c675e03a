//! Capabilities that choose test matrices: a test that needs one runs on every role that has
//! it, so that a new role joins the tests it can take part in without editing them.

use crate::{Libpython, Role, ROLES};

/// What a test can require of an interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Every role.
    Any,
    /// Has a GIL.
    WithGil,
    /// Built with `--disable-gil`.
    FreeThreaded,
    /// Asyncio tasks can be read from outside (3.14+).
    AsyncioTasks,
    /// No asyncio task layout to read (before 3.14).
    NoAsyncioTasks,
    /// Has the frame cache `last_profiled_frame` (3.15+).
    FrameCache,
    /// No frame cache: every walk is a whole walk (before 3.15).
    NoFrameCache,
    /// The runtime is in a `libpython3.X.so`.
    SharedLibpython,
    /// The runtime is in the executable.
    StaticLibpython,
    /// Runs in the sid chroot.
    InChroot,
}

impl Capability {
    /// Every capability, each the name of a test template (`tests/build.rs`).
    pub const ALL: &[Capability] = &[
        Capability::Any,
        Capability::WithGil,
        Capability::FreeThreaded,
        Capability::AsyncioTasks,
        Capability::NoAsyncioTasks,
        Capability::FrameCache,
        Capability::NoFrameCache,
        Capability::SharedLibpython,
        Capability::StaticLibpython,
        Capability::InChroot,
    ];

    /// The name of its test template: `#[apply(with_asyncio_tasks)]`. The matrix of every role
    /// keeps its historical name, `matrix`.
    pub fn template_name(self) -> &'static str {
        match self {
            Capability::Any => "matrix",
            Capability::WithGil => "with_gil",
            Capability::FreeThreaded => "free_threaded",
            Capability::AsyncioTasks => "with_asyncio_tasks",
            Capability::NoAsyncioTasks => "without_asyncio_tasks",
            Capability::FrameCache => "with_frame_cache",
            Capability::NoFrameCache => "without_frame_cache",
            Capability::SharedLibpython => "shared_libpython",
            Capability::StaticLibpython => "static_libpython",
            Capability::InChroot => "in_chroot",
        }
    }

    /// One line on what the template's interpreters have in common, for its doc comment.
    pub fn describe(self) -> &'static str {
        match self {
            Capability::Any => "Every interpreter of the matrix",
            Capability::WithGil => "Every interpreter with a GIL",
            Capability::FreeThreaded => "Every free-threaded interpreter",
            Capability::AsyncioTasks => "Every interpreter whose asyncio tasks can be read (3.14+)",
            Capability::NoAsyncioTasks => {
                "Every interpreter without an asyncio task layout (before 3.14)"
            }
            Capability::FrameCache => {
                "Every interpreter with the frame cache `last_profiled_frame` (3.15+)"
            }
            Capability::NoFrameCache => "Every interpreter without the frame cache (before 3.15)",
            Capability::SharedLibpython => {
                "Every interpreter whose runtime is in a shared libpython"
            }
            Capability::StaticLibpython => "Every interpreter whose runtime is in the executable",
            Capability::InChroot => "Every interpreter that runs in the sid chroot",
        }
    }

    /// Whether `role` has it.
    pub fn of(self, role: &Role) -> bool {
        match self {
            Capability::Any => true,
            Capability::WithGil => role.with_gil(),
            Capability::FreeThreaded => role.free_threaded(),
            Capability::AsyncioTasks => role.asyncio_tasks(),
            Capability::NoAsyncioTasks => !role.asyncio_tasks(),
            Capability::FrameCache => role.frame_cache(),
            Capability::NoFrameCache => !role.frame_cache(),
            Capability::SharedLibpython => role.libpython() == Libpython::Shared,
            Capability::StaticLibpython => role.libpython() == Libpython::Static,
            Capability::InChroot => role.in_chroot(),
        }
    }

    /// The roles that have it, in manifest order.
    pub fn roles(self) -> impl Iterator<Item = &'static Role> {
        self.select(ROLES)
    }

    /// The roles of `table` that have it, in order.
    pub fn select(self, table: &[Role]) -> impl Iterator<Item = &Role> {
        table.iter().filter(move |role| self.of(role))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(capability: Capability) -> Vec<&'static str> {
        capability.roles().map(|role| role.name).collect()
    }

    #[test]
    fn template_names_are_unique() {
        for (i, cap) in Capability::ALL.iter().enumerate() {
            assert!(Capability::ALL[..i]
                .iter()
                .all(|other| other.template_name() != cap.template_name()));
        }
    }

    /// A new interpreter is one row: every matrix of a capability it has takes it.
    #[test]
    fn a_new_row_joins_the_matrices_of_its_capabilities() {
        use crate::{Build, Threading, Version};
        let row = Role::new(
            "py316",
            Version::minor(3, 16),
            Build::SidChroot("python3.16"),
            Threading::Gil,
        );
        let table = [ROLES, &[row]].concat();
        let joined: Vec<&str> = Capability::ALL
            .iter()
            .filter(|cap| cap.select(&table).any(|role| role.name == "py316"))
            .map(|cap| cap.template_name())
            .collect();
        assert_eq!(
            joined,
            [
                "matrix",
                "with_gil",
                "with_asyncio_tasks",
                "with_frame_cache",
                "static_libpython",
                "in_chroot"
            ]
        );
    }

    #[test]
    fn matrices_of_the_current_table() {
        assert_eq!(names(Capability::Any).len(), ROLES.len());
        assert_eq!(names(Capability::AsyncioTasks), ["py314", "py315"]);
        assert_eq!(names(Capability::FrameCache), ["py315"]);
        assert_eq!(names(Capability::FreeThreaded), ["py313t"]);
        assert_eq!(
            names(Capability::SharedLibpython),
            ["py311", "py312", "py313"]
        );
        assert_eq!(names(Capability::InChroot), ["py314", "py315"]);
    }
}
