//! The checks an offsets table passes before anything is read with it: offsets read from a target
//! are untrusted, so garbage must fail here, once, and not mid-walk.

use super::{
    BytecodeLayout, DictKeysHeader, GcBase, GilLocation, ManagedDict, NativeThreadId, Offsets,
    OffsetsError, MAX_HEADER_READ,
};

/// Largest struct we accept from a table: guards against garbage sizes.
const MAX_STRUCT_SIZE: u64 = 1 << 20;

impl Offsets {
    /// Checks every offset the unwinder dereferences against the struct sizes the table
    /// reports, and their alignment, so garbage tables fail here and not mid-walk.
    pub fn validate(&self) -> Result<(), OffsetsError> {
        fn check(
            field: &'static str,
            off: u64,
            width: u64,
            limit: u64,
        ) -> Result<(), OffsetsError> {
            let end = off.saturating_add(width);
            if end > limit || !off.is_multiple_of(width.min(8)) {
                return Err(OffsetsError::Implausible {
                    field,
                    value: off,
                    limit,
                });
            }
            Ok(())
        }
        let r = &self.runtime_state;
        let i = &self.interpreter_state;
        let t = &self.thread_state;
        let f = &self.interpreter_frame;
        let c = &self.code_object;
        for (field, size) in [
            ("runtime_state.size", r.size),
            ("interpreter_state.size", i.size),
            ("thread_state.size", t.size),
            ("interpreter_frame.size", f.size),
            ("code_object.size", c.size),
        ] {
            if size == 0 || size > MAX_STRUCT_SIZE {
                return Err(OffsetsError::Implausible {
                    field,
                    value: size,
                    limit: MAX_STRUCT_SIZE,
                });
            }
        }
        check(
            "runtime_state.interpreters_head",
            r.interpreters_head,
            8,
            r.size,
        )?;
        check("interpreter_state.next", i.next, 8, i.size)?;
        check("interpreter_state.threads_head", i.threads_head, 8, i.size)?;
        check("interpreter_state.gc", i.gc, 8, i.size)?;
        if let Some(d) = i.sysdict {
            check("interpreter_state.sysdict", d, 8, i.size)?;
        }
        if let Some(g) = i.code_object_generation {
            check("interpreter_state.code_object_generation", g, 8, i.size)?;
        }
        let tmax = t.size.min(MAX_HEADER_READ);
        check("thread_state.next", t.next, 8, tmax)?;
        check("thread_state.current_frame", t.current_frame, 8, tmax)?;
        check("thread_state.thread_id", t.thread_id, 8, tmax)?;
        match t.native_thread_id {
            NativeThreadId::Field(off) => check("thread_state.native_thread_id", off, 8, tmax)?,
            // The C library's thread descriptor: its tid lies within a page of its start.
            NativeThreadId::InPthread { offset } => check("pthread.tid", offset, 4, 4096)?,
        }
        for (field, off) in [
            ("thread_state.base_frame", t.base_frame),
            ("thread_state.last_profiled_frame", t.last_profiled_frame),
            (
                "thread_state.last_profiled_frame_seq",
                t.last_profiled_frame_seq,
            ),
        ] {
            if let Some(off) = off {
                check(field, off, 8, tmax)?;
            }
        }
        let fmax = f.size.min(MAX_HEADER_READ);
        check("interpreter_frame.previous", f.previous, 8, fmax)?;
        check("interpreter_frame.executable", f.executable, 8, fmax)?;
        check("interpreter_frame.instr_ptr", f.instr_ptr, 8, fmax)?;
        if let Some(off) = f.owner {
            check("interpreter_frame.owner", off, 1, fmax)?;
        }
        if let Some(off) = f.tlbc_index {
            check("interpreter_frame.tlbc_index", off, 4, fmax)?;
        }
        let cmax = c.size.min(MAX_HEADER_READ);
        check("code_object.filename", c.filename, 8, cmax)?;
        check("code_object.qualname", c.qualname, 8, cmax)?;
        check("code_object.linetable", c.linetable, 8, cmax)?;
        check("code_object.firstlineno", c.firstlineno, 4, cmax)?;
        match c.bytecode {
            BytecodeLayout::Inline {
                ob_size,
                co_code_adaptive,
            } => {
                check(
                    "code_object.co_code_adaptive",
                    co_code_adaptive,
                    2,
                    cmax + 8,
                )?;
                check("code_object.ob_size", ob_size, 8, cmax)?;
            }
            BytecodeLayout::Object { co_code } => check("code_object.co_code", co_code, 8, cmax)?,
        }
        check(
            "pyobject.ob_type",
            self.pyobject.ob_type,
            8,
            self.pyobject.size,
        )?;
        check("bytes_object.ob_sval", self.bytes_object.ob_sval, 1, 256)?;
        check(
            "unicode_object.asciiobject_size",
            self.unicode_object.asciiobject_size,
            1,
            256,
        )?;
        // The rest is read too (header lengths are summed from these), so a garbage table must
        // fail here rather than overflow an addition later.
        check("thread_state.interp", t.interp, 8, tmax)?;
        check("code_object.name", c.name, 8, cmax)?;
        if let Some(off) = c.co_tlbc {
            check("code_object.co_tlbc", off, 8, cmax)?;
        }
        let u = &self.unicode_object;
        check("unicode_object.state", u.state, 4, 256)?;
        check("unicode_object.length", u.length, 8, 256)?;
        check(
            "unicode_object.compactunicodeobject_size",
            u.compactunicodeobject_size,
            1,
            256,
        )?;
        check("bytes_object.ob_size", self.bytes_object.ob_size, 8, 256)?;
        // `collecting` and `frame` are relative to the `gc` member of the interpreter or runtime.
        // 3.6's statics are addresses, found in the process: nothing to check them against.
        let gc_max = match self.gc.base {
            GcBase::Interpreter => Some(i.size.saturating_sub(i.gc)),
            GcBase::Runtime(at) => {
                check("runtime_state.gc", at, 8, r.size)?;
                Some(r.size.saturating_sub(at))
            }
            GcBase::Process | GcBase::Unknown => None,
        };
        if let Some(gc_max) = gc_max {
            check("gc.collecting", self.gc.collecting, 4, gc_max)?;
            if let Some(off) = self.gc.frame {
                check("gc.frame", off, 8, gc_max)?;
            }
        }
        match self.gil {
            GilLocation::Runtime { locked, holder } => {
                check("runtime_state.gil_locked", locked, 4, r.size)?;
                check("runtime_state.gil_holder", holder, 8, r.size)?;
            }
            GilLocation::Interpreter { locked, holder } => {
                check(
                    "interpreter_state.gil_runtime_state_locked",
                    locked,
                    4,
                    i.size,
                )?;
                check(
                    "interpreter_state.gil_runtime_state_holder",
                    holder,
                    8,
                    i.size,
                )?;
            }
            GilLocation::ThreadFlag {
                holds_gil,
                locked,
                holder,
            } => {
                check("thread_state.holds_gil", holds_gil, 4, tmax)?;
                check(
                    "interpreter_state.gil_runtime_state_locked",
                    locked,
                    4,
                    i.size,
                )?;
                check(
                    "interpreter_state.gil_runtime_state_holder",
                    holder,
                    8,
                    i.size,
                )?;
            }
            GilLocation::Disabled { thread_state } => {
                check("thread_state.state", thread_state, 4, tmax)?;
            }
            GilLocation::Statics { .. } | GilLocation::Unknown => {}
        }
        if let Some(n) = &self.thread_names {
            check(
                "interpreter_state.imports_modules",
                n.imports_modules,
                8,
                i.size,
            )?;
            // Object fields are read one at a time, at most a header's length in.
            for (field, off) in [
                ("module_object.md_dict", n.md_dict),
                ("dict_object.ma_keys", n.dict_object.ma_keys),
                ("dict_object.ma_values", n.dict_object.ma_values),
                ("dict_values.values", n.dict_values),
                ("type_object.tp_flags", n.tp_flags),
                ("type_object.tp_basicsize", n.tp_basicsize),
                ("heap_type_object.ht_cached_keys", n.ht_cached_keys),
                ("long_object.lv_tag", n.long_object.lv_tag),
            ] {
                check(field, off, 8, MAX_HEADER_READ)?;
            }
            check(
                "long_object.ob_digit",
                n.long_object.ob_digit,
                4,
                MAX_HEADER_READ,
            )?;
            let k = &n.dict_keys;
            match k.header {
                DictKeysHeader::Log2 {
                    log2_size,
                    log2_index_bytes,
                    kind,
                } => {
                    for (field, off) in [
                        ("dict_keys.log2_size", log2_size),
                        ("dict_keys.log2_index_bytes", log2_index_bytes),
                        ("dict_keys.kind", kind),
                    ] {
                        check(field, off, 1, 256)?;
                    }
                }
                DictKeysHeader::Slots { size } => check("dict_keys.size", size, 8, 256)?,
            }
            for (field, off, width) in [
                ("dict_keys.nentries", k.nentries, 8),
                ("dict_keys.indices", k.indices, 8),
            ] {
                check(field, off, width, 256)?;
            }
            for (field, size) in [
                ("dict_keys.general_entry_size", k.general_entry_size),
                ("dict_keys.unicode_entry_size", k.unicode_entry_size),
            ] {
                check(field, size, 8, 64)?;
                if size == 0 {
                    return Err(OffsetsError::Implausible {
                        field,
                        value: size,
                        limit: 64,
                    });
                }
            }
            match n.managed_dict {
                ManagedDict::ValuesOrDict {
                    values_before,
                    dict_before,
                } => {
                    check("managed_dict.values_before", values_before, 8, 64)?;
                    check("managed_dict.dict_before", dict_before, 8, 64)?;
                }
                ManagedDict::TaggedDictOrValues { before } => {
                    check("managed_dict.before", before, 8, 64)?;
                }
                ManagedDict::AtDictOffset { tp_dictoffset } => {
                    check("type_object.tp_dictoffset", tp_dictoffset, 8, 1024)?;
                }
                ManagedDict::InlineValues {
                    dict_before,
                    capacity,
                    valid,
                } => {
                    check("managed_dict.dict_before", dict_before, 8, 64)?;
                    check("dict_values.capacity", capacity, 1, n.dict_values)?;
                    check("dict_values.valid", valid, 1, n.dict_values)?;
                }
            }
        }
        if let Some(c) = &self.coroutines {
            // The frame lies inside the coroutine object, within a header's reach.
            check(
                "gen_object.gi_iframe",
                c.gi_iframe,
                8,
                MAX_HEADER_READ.saturating_sub(f.size),
            )?;
            check(
                "gen_object.gi_frame_state",
                c.gi_frame_state,
                1,
                MAX_HEADER_READ,
            )?;
            check("interpreter_frame.stackpointer", c.stackpointer, 8, f.size)?;
            for (field, off) in [
                ("set_object.used", c.set_used),
                ("set_object.table", c.set_table),
                ("set_object.mask", c.set_mask),
                ("type_object.tp_flags", c.tp_flags),
            ] {
                check(field, off, 8, MAX_HEADER_READ)?;
            }
            check("llist_node.next", c.llist_next, 8, 16)?;
        }
        Ok(())
    }
}
