//! The rules that choose a few roles of a table rather than every role with a property:
//! [`representatives`] ([`crate::Capability::Representative`]) and [`oldest_and_newest`]
//! ([`crate::Capability::OldestAndNewest`]).

use crate::{FrameModel, GilLayout, Libpython, Role, Threading};

/// A build kind the representative set has whenever the table has it.
type Kind = (&'static str, fn(&Role) -> bool);

/// The build kinds, each with the name the unit tests report it by.
pub(crate) const BUILD_KINDS: &[Kind] = &[
    ("static libpython", |r| r.libpython() == Libpython::Static),
    ("shared libpython", |r| r.libpython() == Libpython::Shared),
    ("in a chroot", |r| r.in_chroot()),
    ("on the host", |r| !r.in_chroot()),
    ("with .symtab", |r| r.has_symtab()),
    ("stripped", |r| !r.has_symtab()),
];

/// The representative roles of `table`, in its order: the first role of each (frame model,
/// threading) pair; then, for each GIL layout and each of [`BUILD_KINDS`] that some role of
/// `table` has and none of those does, the first role that has it.
pub(crate) fn representatives<'a>(table: &[&'a Role]) -> Vec<&'a Role> {
    let mut kept: Vec<usize> = Vec::new();
    for &model in FrameModel::ALL {
        for threading in [Threading::Gil, Threading::FreeThreaded] {
            keep_first(table, &mut kept, |role| {
                role.frame_model() == model && role.threading == threading
            });
        }
    }
    for &layout in GilLayout::ALL {
        keep_first(table, &mut kept, |role| role.gil_layout() == layout);
    }
    for &(_, kind) in BUILD_KINDS {
        keep_first(table, &mut kept, kind);
    }
    kept.sort_unstable();
    kept.into_iter().map(|i| table[i]).collect()
}

/// Adds to `kept` (indices into `table`) the first role of `table` that is `wanted`, unless a
/// role of `kept` already is.
fn keep_first(table: &[&Role], kept: &mut Vec<usize>, wanted: impl Fn(&Role) -> bool) {
    if kept.iter().any(|&i| wanted(table[i])) {
        return;
    }
    if let Some(i) = table.iter().position(|role| wanted(role)) {
        kept.push(i);
    }
}

/// The first role with a GIL of the oldest frame model of `table` and the first of the newest,
/// in table order (one role when `table` has one frame model).
pub(crate) fn oldest_and_newest<'a>(table: &[&'a Role]) -> Vec<&'a Role> {
    let with_gil: Vec<&Role> = table.iter().copied().filter(|r| r.with_gil()).collect();
    let first_of = |model: Option<FrameModel>| {
        model.and_then(|model| with_gil.iter().position(|r| r.frame_model() == model))
    };
    let oldest = first_of(with_gil.iter().map(|r| r.frame_model()).min());
    let newest = first_of(with_gil.iter().map(|r| r.frame_model()).max());
    let mut picked: Vec<usize> = oldest.into_iter().chain(newest).collect();
    picked.dedup();
    picked.into_iter().map(|i| with_gil[i]).collect()
}
