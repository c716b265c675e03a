//! Compiles the BPF sampler (`ebpf/sampler.bpf.c`) for the target architecture (x86_64 or
//! aarch64) into `$OUT_DIR/sampler.bpf.o` and, for older kernels,
//! `$OUT_DIR/sampler-portable.bpf.o`, embedded by `src/sampler/bpf/mod.rs` with
//! `aya::include_bytes_aligned!`, so every build runs the current program. The objects are never
//! committed.
//!
//! Tools: `clang-19` and `llvm-strip-19` (override with `PYAGENT_CLANG` / `PYAGENT_LLVM_STRIP`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL_HINT: &str = "apt-get install clang-19 llvm-19 libbpf-dev";

fn main() {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .expect("agent/ lives in the workspace root");
    let ebpf = root.join("ebpf");
    let include = root.join("common").join("include");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    for dir in [&ebpf, &include] {
        rerun_on_dir(dir);
    }
    println!("cargo:rerun-if-env-changed=PYAGENT_CLANG");
    println!("cargo:rerun-if-env-changed=PYAGENT_LLVM_STRIP");

    let clang = env::var("PYAGENT_CLANG").unwrap_or_else(|_| "clang-19".to_owned());
    let strip = env::var("PYAGENT_LLVM_STRIP").unwrap_or_else(|_| "llvm-strip-19".to_owned());
    let target_arch = bpf_target_arch();
    let host_include = host_multiarch_include();

    // Two builds of one source: the default one for kernels with bpf_loop and the BTF task
    // helpers, the portable one (PA_PORTABLE) for Linux 5.10 and later (ebpf/kernel.bpf.h).
    for (object, defines) in [
        ("sampler.bpf.o", &[][..]),
        ("sampler-portable.bpf.o", &["-DPA_PORTABLE"][..]),
    ] {
        let out = out_dir.join(object);
        // -g is required for BTF (maps, CO-RE); llvm-strip -g then drops DWARF but keeps .BTF.
        let mut cmd = Command::new(&clang);
        cmd.args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            target_arch,
            "-Wall",
            "-Werror",
        ])
        .args(defines)
        .arg(&host_include)
        .arg("-I")
        .arg(&include)
        .arg("-c")
        .arg(ebpf.join("sampler.bpf.c"))
        .arg("-o")
        .arg(&out);
        run(&mut cmd, &clang);
        run(Command::new(&strip).arg("-g").arg(&out), &strip);
    }
}

/// The `__TARGET_ARCH_*` define of the architecture the agent is built for: the program reads
/// that architecture's registers, thread pointer and system call numbers (`ebpf/arch.bpf.h`).
fn bpf_target_arch() -> &'static str {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    match arch.as_str() {
        "x86_64" => "-D__TARGET_ARCH_x86",
        "aarch64" => "-D__TARGET_ARCH_arm64",
        other => panic!("the BPF sampler supports x86_64 and aarch64, not {other}"),
    }
}

/// `-I/usr/include/<multiarch>` of the machine that builds: `asm/types.h` is not found under
/// `-target bpf` without it. The build machine's headers, not the target's: the types the
/// program takes from them (`__u64`, ...) are the same on every 64-bit Linux.
fn host_multiarch_include() -> String {
    let host = env::var("HOST").expect("cargo sets HOST");
    let arch = host.split('-').next().expect("a target triple has an arch");
    format!("-I/usr/include/{arch}-linux-gnu")
}

fn run(cmd: &mut Command, tool: &str) {
    let status = cmd.status().unwrap_or_else(|e| {
        panic!(
            "cannot run `{tool}` to build the BPF sampler ({e}); install it with `{INSTALL_HINT}`"
        )
    });
    assert!(
        status.success(),
        "`{tool}` failed building the BPF sampler ({status}): see the messages above"
    );
}

fn rerun_on_dir(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "c" || e == "h") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
