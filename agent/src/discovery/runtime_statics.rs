//! CPython 3.6 keeps no `_PyRuntime`: what later versions gather there are statics of their
//! own files (`interp_head` in pystate.c, the GIL's in ceval.c, `collecting` in gcmodule.c).
//! Found by name in `.symtab`; a build stripped of it still exports `PyInterpreterState_Head`,
//! a function that only returns `interp_head`, so its first instructions say where that is.
//! The GIL's and the collector's statics have no such accessor: a stripped build is read
//! without them.

use goblin::elf::header::{EM_AARCH64, EM_X86_64};
use goblin::elf::sym::STT_OBJECT;

use super::elf_headers::{ElfHeaders, SymbolTable};

/// The statics looked up by name, with what they are.
const NAMES: [&str; 8] = [
    "interp_head",
    "gil_locked",
    "gil_last_holder",
    "gil_mutex",
    "gil_cond",
    "switch_mutex",
    "switch_cond",
    "collecting",
];

/// 3.6's runtime globals: link-time addresses in the object (`None`: not named there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStatics {
    /// `interp_head`: the first interpreter
    pub interp_head: u64,
    /// int `gil_locked`
    pub gil_locked: Option<u64>,
    /// `gil_last_holder` tstate pointer
    pub gil_last_holder: Option<u64>,
    /// the lowest of `gil_mutex`, `gil_cond`, `switch_mutex` and `switch_cond`: where the GIL's
    /// futex words begin
    pub gil_waits: Option<u64>,
    /// int `collecting`: non-zero while a collection runs
    pub collecting: Option<u64>,
}

/// The runtime statics of `elf`, when it is a CPython 3.6 object (it has `interp_head`).
pub(super) fn find(elf: &ElfHeaders) -> Result<Option<RuntimeStatics>, goblin::error::Error> {
    let named = elf.defined(SymbolTable::Full, &NAMES)?;
    let object = |name: &str| {
        named
            .get(name)
            .filter(|s| s.kind == STT_OBJECT && s.value != 0)
            .map(|s| s.value)
    };
    let interp_head = match object("interp_head") {
        Some(at) => at,
        None => match head_from_accessor(elf)? {
            Some(at) => at,
            None => return Ok(None),
        },
    };
    let gil_waits = ["gil_mutex", "gil_cond", "switch_mutex", "switch_cond"]
        .into_iter()
        .filter_map(object)
        .min();
    Ok(Some(RuntimeStatics {
        interp_head,
        gil_locked: object("gil_locked"),
        gil_last_holder: object("gil_last_holder"),
        gil_waits,
        collecting: object("collecting"),
    }))
}

/// Where `interp_head` is, from the exported `PyInterpreterState_Head`, which loads it and
/// returns.
fn head_from_accessor(elf: &ElfHeaders) -> Result<Option<u64>, goblin::error::Error> {
    const ACCESSOR: &str = "PyInterpreterState_Head";
    let Some(function) = elf
        .defined(SymbolTable::Dynamic, &[ACCESSOR])?
        .remove(ACCESSOR)
    else {
        return Ok(None);
    };
    let Some(code) = elf.bytes_at(function.value, 16) else {
        return Ok(None);
    };
    Ok(match elf.header.e_machine {
        EM_X86_64 => x86_64_load_target(function.value, code),
        EM_AARCH64 => aarch64_load_target(function.value, code),
        _ => None,
    })
}

/// The address `mov rax, [rip + disp32]; ret` at `at` loads from (after an `endbr64`, which
/// builds with control-flow protection start every function with).
fn x86_64_load_target(at: u64, code: &[u8]) -> Option<u64> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    const MOV_RAX_RIP: [u8; 3] = [0x48, 0x8b, 0x05];
    const RET: u8 = 0xc3;
    let skip = if code.starts_with(&ENDBR64) { 4 } else { 0 };
    let insn = code.get(skip..skip + 8)?;
    if insn[..3] != MOV_RAX_RIP || insn[7] != RET {
        return None;
    }
    let disp = i32::from_le_bytes(insn[3..7].try_into().ok()?);
    let next = at.checked_add(skip as u64 + 7)?;
    Some(next.wrapping_add_signed(i64::from(disp)))
}

/// The address `adrp x0, PAGE; ldr x0, [x0, #OFF]; ret` at `at` loads from (after a `bti c` or
/// `paciasp`, which builds with branch protection start functions with).
fn aarch64_load_target(at: u64, code: &[u8]) -> Option<u64> {
    const HINTS: [u32; 2] = [0xd503_245f, 0xd503_233f]; // bti c, paciasp
    const RET: u32 = 0xd65f_03c0;
    let word = |i: usize| {
        code.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("four bytes")))
    };
    let first = usize::from(word(0).is_some_and(|w| HINTS.contains(&w)));
    let (adrp, ldr, ret) = (word(first)?, word(first + 1)?, word(first + 2)?);
    // adrp x0: op 1, bits 28-24 10000, Rd 0; ldr x0, [x0, #imm]: 64-bit unsigned offset form.
    if adrp & 0x9f00_001f != 0x9000_0000 || ldr & 0xffc0_03ff != 0xf940_0000 || ret != RET {
        return None;
    }
    let immlo = u64::from((adrp >> 29) & 0x3);
    let immhi = u64::from((adrp >> 5) & 0x7_ffff);
    // A 21-bit signed page count.
    let pages = (((immhi << 2) | immlo) << 43) as i64 >> 43;
    let pc = at.checked_add(first as u64 * 4)?;
    let page = (pc & !0xfff).wrapping_add_signed(pages << 12);
    Some(page.wrapping_add(u64::from((ldr >> 10) & 0xfff) * 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_accessor_loads_rip_relative() {
        // mov rax, [rip + 0x100]; ret
        let code = [0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3];
        assert_eq!(x86_64_load_target(0x1000, &code), Some(0x1000 + 7 + 0x100));
        let with_endbr = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8b, 0x05, 0xf0, 0xff, 0xff, 0xff, 0xc3,
        ];
        assert_eq!(
            x86_64_load_target(0x2000, &with_endbr),
            Some(0x2000 + 11 - 0x10)
        );
        // Anything else (a call, a jump to a PLT stub) is not read as the accessor.
        assert_eq!(
            x86_64_load_target(0x1000, &[0xe9, 0, 0, 0, 0, 0, 0, 0]),
            None
        );
    }

    #[test]
    fn aarch64_accessor_loads_page_and_offset() {
        // adrp x0, #+6 pages (immlo 2, immhi 1); ldr x0, [x0, #0x18]; ret
        let adrp: u32 = 0x9000_0000 | 2 << 29 | 1 << 5;
        let ldr: u32 = 0xf940_0000 | (0x18 / 8) << 10;
        let code: Vec<u8> = [adrp, ldr, 0xd65f_03c0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(
            aarch64_load_target(0x40_1234, &code),
            Some(0x40_7000 + 0x18)
        );
        assert_eq!(aarch64_load_target(0x40_1234, &[0; 12]), None);
    }

    #[test]
    fn pyenv_3_6_names_its_statics() {
        // Every machine of the project's kind has pyenv's 3.6.15, built with `.symtab`.
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let path =
            std::path::Path::new(&home).join(".pyenv/versions/3.6.15/lib/libpython3.6m.so.1.0");
        let Ok(bytes) = std::fs::read(&path) else {
            panic!("{} is missing", path.display());
        };
        let elf = ElfHeaders::parse(&bytes).expect("ELF");
        let statics = find(&elf).expect("parse").expect("3.6 statics");
        for (name, at) in [
            ("gil_locked", statics.gil_locked),
            ("gil_last_holder", statics.gil_last_holder),
            ("gil_waits", statics.gil_waits),
            ("collecting", statics.collecting),
        ] {
            assert!(at.is_some(), "{name}");
        }
        // The accessor leads to the same static.
        assert_eq!(
            head_from_accessor(&elf).expect("parse"),
            Some(statics.interp_head)
        );
    }
}
