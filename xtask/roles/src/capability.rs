//! Capabilities that choose test matrices: a test that needs one runs on every role that has
//! it, so that a new role joins the tests it can take part in without editing them. Two are
//! not a property of a role but a choice over the table: [`Capability::Representative`], for a
//! test that is not about one version's layout or one build kind, and
//! [`Capability::OldestAndNewest`].

use crate::representative::{oldest_and_newest, representatives};
use crate::{FrameModel, Libpython, Role, ROLES};

/// What a test can require of an interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Every role.
    Any,
    /// One role per frame model and threading, for a test that is not about one version's
    /// layout or one build kind (CLI behaviour, an output format, a consumer, the service):
    /// the matrix grows by a role per new frame model, not per interpreter.
    ///
    /// The rule, over the table in its order: first, the first role of each pair of frame
    /// model ([`crate::FrameModel`]: frame objects before 3.11, `_PyCFrame` in 3.11–3.12,
    /// `current_frame` in 3.13–3.14, the frame cache from 3.15) and threading (with a GIL,
    /// free-threaded); then, for each GIL layout ([`crate::GilLayout`]: statics in 3.6, the
    /// runtime's in 3.7–3.11, the interpreter's in 3.12–3.14, the thread flag from 3.15, none)
    /// and each build kind (static and shared libpython, in a chroot and on the host, with
    /// `.symtab` and stripped) that some role has and none of those does, the first role that
    /// has it.
    ///
    /// Today: `py36` (frame objects, shared), `py311-debian` (`_PyCFrame`, static, stripped),
    /// `py313` (`current_frame`), `py313t` (free-threaded) and `py315` (frame cache, sid
    /// chroot): 5 of the 14; the second step adds none.
    Representative,
    /// The first role with a GIL of the oldest frame model and of the newest, for a test of
    /// the agent's own behaviour that wants an old and a new interpreter rather than each
    /// layout. Today: `py36` and `py315`.
    OldestAndNewest,
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
    /// Runs in a chroot of its Debian release.
    InChroot,
    /// Its frames mark where Python was re-entered from C (3.11+, `<native>`).
    CBoundaries,
    /// Its frames are `_PyInterpreterFrame`s in the thread's own data stack (3.11+), which a
    /// reader from outside can catch half-written: the torn-read tests.
    InterpreterFrames,
}

impl Capability {
    /// Every capability, each the name of a test template (`tests/build.rs`).
    pub const ALL: &[Capability] = &[
        Capability::Any,
        Capability::Representative,
        Capability::OldestAndNewest,
        Capability::WithGil,
        Capability::FreeThreaded,
        Capability::AsyncioTasks,
        Capability::NoAsyncioTasks,
        Capability::FrameCache,
        Capability::NoFrameCache,
        Capability::SharedLibpython,
        Capability::StaticLibpython,
        Capability::InChroot,
        Capability::CBoundaries,
        Capability::InterpreterFrames,
    ];

    /// The name of its test template: `#[apply(with_asyncio_tasks)]`. The matrix of every role
    /// keeps its historical name, `matrix`.
    pub fn template_name(self) -> &'static str {
        match self {
            Capability::Any => "matrix",
            Capability::Representative => "representative",
            Capability::OldestAndNewest => "oldest_and_newest",
            Capability::WithGil => "with_gil",
            Capability::FreeThreaded => "free_threaded",
            Capability::AsyncioTasks => "with_asyncio_tasks",
            Capability::NoAsyncioTasks => "without_asyncio_tasks",
            Capability::FrameCache => "with_frame_cache",
            Capability::NoFrameCache => "without_frame_cache",
            Capability::SharedLibpython => "shared_libpython",
            Capability::StaticLibpython => "static_libpython",
            Capability::InChroot => "in_chroot",
            Capability::CBoundaries => "with_c_boundaries",
            Capability::InterpreterFrames => "with_interpreter_frames",
        }
    }

    /// The name of the template of its representative roles, such as
    /// `representative_with_gil`: [`Capability::Representative`]'s rule applied to the roles
    /// that have it. `None` for a choice of a few roles already, and for `Any`, whose
    /// representative roles are `representative`.
    pub fn representative_template_name(self) -> Option<String> {
        match self {
            Capability::Any | Capability::Representative | Capability::OldestAndNewest => None,
            _ => Some(format!("representative_{}", self.template_name())),
        }
    }

    /// One line on what the template's interpreters have in common, for its doc comment.
    pub fn describe(self) -> &'static str {
        match self {
            Capability::Any => "Every interpreter of the matrix",
            Capability::Representative => {
                "One interpreter per frame model and threading, and of every GIL layout and \
                 build kind (`roles::Capability::Representative`)"
            }
            Capability::OldestAndNewest => {
                "The first interpreter with a GIL of the oldest frame model and of the newest"
            }
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
            Capability::InChroot => "Every interpreter that runs in a chroot of its Debian release",
            Capability::CBoundaries => {
                "Every interpreter whose frames mark where Python was re-entered from C (3.11+)"
            }
            Capability::InterpreterFrames => {
                "Every interpreter whose frames lie in the thread's own data stack (3.11+)"
            }
        }
    }

    /// The roles that have it, in manifest order.
    pub fn roles(self) -> Vec<&'static Role> {
        self.select(ROLES)
    }

    /// The roles of `table` that have it, in order.
    pub fn select(self, table: &[Role]) -> Vec<&Role> {
        let has: fn(&Role) -> bool = match self {
            Capability::Representative => return representatives(&all(table)),
            Capability::OldestAndNewest => return oldest_and_newest(&all(table)),
            Capability::Any => |_| true,
            Capability::WithGil => Role::with_gil,
            Capability::FreeThreaded => Role::free_threaded,
            Capability::AsyncioTasks => Role::asyncio_tasks,
            Capability::NoAsyncioTasks => |role| !role.asyncio_tasks(),
            Capability::FrameCache => Role::frame_cache,
            Capability::NoFrameCache => |role| !role.frame_cache(),
            Capability::SharedLibpython => |role| role.libpython() == Libpython::Shared,
            Capability::StaticLibpython => |role| role.libpython() == Libpython::Static,
            Capability::InChroot => Role::in_chroot,
            Capability::CBoundaries => Role::marks_c_boundaries,
            Capability::InterpreterFrames => |role| role.frame_model() != FrameModel::FrameObjects,
        };
        table.iter().filter(|role| has(role)).collect()
    }

    /// Its representative roles (see [`Capability::representative_template_name`]), in
    /// manifest order.
    pub fn representatives(self) -> Vec<&'static Role> {
        self.select_representatives(ROLES)
    }

    /// The representative roles of those of `table` that have it, in order.
    pub fn select_representatives(self, table: &[Role]) -> Vec<&Role> {
        representatives(&self.select(table))
    }
}

/// Every role of `table`, by reference.
fn all(table: &[Role]) -> Vec<&Role> {
    table.iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(capability: Capability) -> Vec<&'static str> {
        capability.roles().iter().map(|role| role.name).collect()
    }

    #[test]
    fn template_names_are_unique() {
        let names: Vec<String> = Capability::ALL
            .iter()
            .map(|cap| cap.template_name().to_owned())
            .chain(
                Capability::ALL
                    .iter()
                    .filter_map(|cap| cap.representative_template_name()),
            )
            .collect();
        for (i, name) in names.iter().enumerate() {
            assert!(!names[..i].contains(name), "{name} twice");
        }
    }

    /// A new interpreter is one row: every matrix of a capability it has takes it.
    #[test]
    fn a_new_row_joins_the_matrices_of_its_capabilities() {
        use crate::{Build, Threading, Version};
        let row = Role::new(
            "py316",
            Version::minor(3, 16),
            Build::Chroot(crate::Suite::Sid, "python3.16"),
            Threading::Gil,
        );
        let table = [ROLES, &[row]].concat();
        let joined: Vec<&str> = Capability::ALL
            .iter()
            .filter(|cap| cap.select(&table).iter().any(|role| role.name == "py316"))
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
                "in_chroot",
                "with_c_boundaries",
                "with_interpreter_frames"
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
            ["py36", "py37", "py38", "py39", "py310", "py311", "py312", "py313"]
        );
        assert_eq!(
            names(Capability::InChroot),
            ["py39-debian", "py314", "py315"]
        );
        assert_eq!(
            names(Capability::Representative),
            ["py36", "py311-debian", "py313", "py313t", "py315"]
        );
        assert_eq!(names(Capability::OldestAndNewest), ["py36", "py315"]);
        let representatives = |cap: Capability| -> Vec<&str> {
            cap.representatives().iter().map(|role| role.name).collect()
        };
        assert_eq!(
            representatives(Capability::WithGil),
            ["py36", "py311-debian", "py313", "py315"]
        );
        // Without the frame cache, the first chroot role is bullseye's 3.9.
        assert_eq!(
            representatives(Capability::NoFrameCache),
            ["py36", "py39-debian", "py311-debian", "py313", "py313t"]
        );
    }

    /// What the representative set of `table` must have: every frame model, GIL layout,
    /// threading and build kind of the table, in fewer roles than the table, at most half.
    fn check_representatives(table: &[Role]) {
        use crate::representative::BUILD_KINDS;
        use crate::{FrameModel, GilLayout};
        let chosen = Capability::Representative.select(table);
        let names: Vec<&str> = chosen.iter().map(|role| role.name).collect();
        let covered = |what: &str, has: &dyn Fn(&Role) -> bool| {
            if table.iter().any(has) {
                assert!(
                    chosen.iter().any(|role| has(role)),
                    "{names:?}: none {what}"
                );
            }
        };
        for &model in FrameModel::ALL {
            covered(&format!("{model:?}"), &|role| role.frame_model() == model);
        }
        for &layout in GilLayout::ALL {
            covered(&format!("GIL {layout:?}"), &|role| {
                role.gil_layout() == layout
            });
        }
        for &(kind, has) in BUILD_KINDS {
            covered(kind, &has);
        }
        covered("free-threaded", &Role::free_threaded);
        covered("with a GIL", &Role::with_gil);
        // One role per frame model and threading: no two alike in both.
        for (i, role) in chosen.iter().enumerate() {
            let twin = chosen[..i].iter().find(|other| {
                other.frame_model() == role.frame_model() && other.threading == role.threading
            });
            if let Some(twin) = twin {
                // A second one only for a kind or GIL layout the first of the pair lacks.
                let before = &chosen[..i];
                let brings = BUILD_KINDS
                    .iter()
                    .any(|(_, has)| has(role) && !before.iter().any(|r| has(r)))
                    || before.iter().all(|r| r.gil_layout() != role.gil_layout());
                assert!(
                    brings,
                    "{names:?}: {} adds nothing to {}",
                    role.name, twin.name
                );
            }
        }
        // A strict subset of the table, in its order, at most half of it.
        let positions: Vec<usize> = chosen
            .iter()
            .map(|role| {
                table
                    .iter()
                    .position(|r| r.name == role.name)
                    .expect("a role of the table")
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        assert!(
            chosen.len() * 2 <= table.len(),
            "{names:?}: more than half of {} roles",
            table.len()
        );
    }

    #[test]
    fn the_representative_set_covers_every_layout_and_build_kind_in_half_the_table() {
        check_representatives(ROLES);
        let names: Vec<&str> = Capability::Representative
            .roles()
            .iter()
            .map(|role| role.name)
            .collect();
        let has = |name| names.contains(&name);
        // The kinds the issue names, today's roles of each.
        assert!(has("py36"), "frame objects and a shared libpython");
        assert!(
            has("py311-debian"),
            "a static libpython, non-PIE and stripped"
        );
        assert!(has("py313t"), "a free-threaded build");
        assert!(has("py315"), "a sid chroot interpreter and the frame cache");
    }

    /// The roles still to come of issue 47 (3.14t, 3.15t) add one role per new threading of a
    /// frame model, not one per interpreter.
    #[test]
    fn the_representative_set_grows_by_frame_model_not_by_interpreter() {
        use crate::{Build, Threading, Version};
        let mut table = ROLES.to_vec();
        table.extend([
            Role::new(
                "py314t",
                Version::minor(3, 14),
                Build::Source,
                Threading::FreeThreaded,
            ),
            Role::new(
                "py315t",
                Version::minor(3, 15),
                Build::Source,
                Threading::FreeThreaded,
            ),
        ]);
        check_representatives(&table);
        let names: Vec<&str> = Capability::Representative
            .select(&table)
            .iter()
            .map(|role| role.name)
            .collect();
        assert_eq!(
            names,
            ["py36", "py311-debian", "py313", "py313t", "py315", "py315t"]
        );
    }
}
