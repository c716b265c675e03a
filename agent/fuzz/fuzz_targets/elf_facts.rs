//! ELF discovery: symbol, section and PT_LOAD lookup in a mapped object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyagent::discovery::parse_elf_facts;

fuzz_target!(|data: &[u8]| {
    let _ = parse_elf_facts(data);
});
