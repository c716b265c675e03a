//! The contract between the BPF program (`ebpf/`, C) and userspace: `#[repr(C)]` mirrors of
//! `common/include/pyagent.h`, with compile-time layout checks.
