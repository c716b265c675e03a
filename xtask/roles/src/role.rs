//! One role of the matrix: what interpreter it is, how it is provided, and what it can do,
//! derived from its version and build rather than stated twice.

use serde::{Deserialize, Serialize};

use crate::{FrameModel, GilLayout, Version};

/// How `cargo xtask pythons` provides a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// A package of the host (Debian bookworm), installed with apt.
    HostApt(&'static str),
    /// The preinstalled pyenv version directory named after the role's exact version.
    Pyenv,
    /// CPython built from Debian's source package by `cargo xtask pythons` (see its
    /// `source` step), `--disable-gil` for a free-threaded role.
    Source,
    /// A package of a Debian release other than the host's, installed in that release's
    /// chroot, which `cargo xtask pythons` makes.
    Chroot(Suite, &'static str),
}

/// A Debian release whose own interpreters the matrix runs in a chroot of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// Debian 11: its `python3.9` is the system Python of a fleet's older hosts and images.
    Bullseye,
    /// Debian unstable: the newest releases, with a newer glibc than the host's.
    Sid,
}

impl Suite {
    /// The release's name in the archive, as debootstrap and apt take it.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Bullseye => "bullseye",
            Suite::Sid => "sid",
        }
    }

    /// The chroot's directory name in the cache directory, such as `sid-chroot`.
    pub fn tree_name(self) -> &'static str {
        match self {
            Suite::Bullseye => "bullseye-chroot",
            Suite::Sid => "sid-chroot",
        }
    }
}

/// Where an interpreter's `_PyRuntime` lives, which decides where discovery finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Libpython {
    /// In the executable itself.
    Static,
    /// In a `libpython3.X.so` the executable links.
    Shared,
}

impl Libpython {
    /// `static` or `shared`, as in the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Libpython::Static => "static",
            Libpython::Shared => "shared",
        }
    }
}

/// Whether the build has a GIL (`Py_GIL_DISABLED` unset) or is free-threaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threading {
    Gil,
    FreeThreaded,
}

/// How an interpreter's `time.sleep` waits ([`Role::time_sleep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SleepCall {
    /// the system call a sleeping thread is in, as `dump` names it
    pub syscall: &'static str,
    /// a part of the names of the kernel and C library functions it waits in
    pub function: &'static str,
}

/// One interpreter of the matrix: a row of [`crate::ROLES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// Matrix name, such as `py313t`: the manifest's key and the tests' handle.
    pub name: &'static str,
    /// What it must report.
    pub version: Version,
    pub build: Build,
    pub threading: Threading,
}

impl Role {
    /// A row of the table.
    pub const fn new(
        name: &'static str,
        version: Version,
        build: Build,
        threading: Threading,
    ) -> Role {
        Role {
            name,
            version,
            build,
            threading,
        }
    }

    /// `(major, minor)`, such as `(3, 13)`.
    pub fn minor(&self) -> (u32, u32) {
        (self.version.major, self.version.minor)
    }

    /// Built with `--disable-gil`.
    pub fn free_threaded(&self) -> bool {
        self.threading == Threading::FreeThreaded
    }

    /// Has a GIL for threads to hold and wait for.
    pub fn with_gil(&self) -> bool {
        self.threading == Threading::Gil
    }

    /// Debian's packages and a plain `configure` link the runtime into the executable; the
    /// pyenv versions this matrix uses are built with `--enable-shared`.
    pub fn libpython(&self) -> Libpython {
        match self.build {
            Build::Pyenv => Libpython::Shared,
            Build::HostApt(_) | Build::Source | Build::Chroot(..) => Libpython::Static,
        }
    }

    /// Runs through chroot(8), in the tree of its Debian release.
    pub fn in_chroot(&self) -> bool {
        matches!(self.build, Build::Chroot(..))
    }

    /// Keeps `.symtab`, so that its static functions have names; Debian's packages are
    /// stripped of it (their eval loop's body is found from the exported entry's jumps).
    pub fn has_symtab(&self) -> bool {
        matches!(self.build, Build::Pyenv | Build::Source)
    }

    /// Has the asyncio task layout an outside reader can walk (3.14+).
    pub fn asyncio_tasks(&self) -> bool {
        self.version.at_least(3, 14)
    }

    /// How its `time.sleep` waits: 3.11+ with `clock_nanosleep`, before that with `select`
    /// (which glibc makes a `pselect6` system call).
    pub fn time_sleep(&self) -> SleepCall {
        if self.version.at_least(3, 11) {
            SleepCall {
                syscall: "clock_nanosleep",
                function: "nanosleep",
            }
        } else {
            SleepCall {
                syscall: "pselect6",
                function: "select",
            }
        }
    }

    /// Its frame chain marks where Python was re-entered from C (3.11 `is_entry`, 3.12+ entry
    /// frames), which `<native>` shows; before 3.11 every Python call is a C-level evaluation
    /// of its own, and nothing tells a call through a C function from a plain one.
    pub fn marks_c_boundaries(&self) -> bool {
        self.version.at_least(3, 11)
    }

    /// Its code objects carry a qualified name (`co_qualname`, 3.11+: `Thread.run`); before
    /// that a frame names its function alone (`run`).
    pub fn qualified_names(&self) -> bool {
        self.version.at_least(3, 11)
    }

    /// The name a frame of the function called `qualified` has on this interpreter:
    /// `qualified` itself, or its last part where code objects carry no qualified name.
    pub fn function_name<'a>(&self, qualified: &'a str) -> &'a str {
        if self.qualified_names() {
            qualified
        } else {
            qualified.rsplit('.').next().unwrap_or(qualified)
        }
    }

    /// Has the frame cache `last_profiled_frame` (3.15+).
    pub fn frame_cache(&self) -> bool {
        self.frame_model() == FrameModel::FrameCache
    }

    /// How its thread states lead to its frames.
    pub fn frame_model(&self) -> FrameModel {
        FrameModel::of(self.version)
    }

    /// Where its GIL is, if it has one.
    pub fn gil_layout(&self) -> GilLayout {
        GilLayout::of(self.version, self.threading)
    }

    /// Ships CPython's own sampler, `python -m profiling.sampling` ("tachyon", 3.15+).
    pub fn tachyon(&self) -> bool {
        self.version.at_least(3, 15)
    }

    /// The executable's file name, such as `python3.13t`: CPython's own naming, which pyenv,
    /// Debian and `make install` all follow.
    pub fn executable_name(&self) -> String {
        let suffix = if self.free_threaded() { "t" } else { "" };
        format!(
            "python{}.{}{suffix}",
            self.version.major, self.version.minor
        )
    }

    /// The extra `configure` arguments of a [`Build::Source`] role.
    pub fn configure_args(&self) -> &'static [&'static str] {
        match self.threading {
            Threading::Gil => &[],
            Threading::FreeThreaded => &["--disable-gil"],
        }
    }
}
