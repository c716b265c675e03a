//! Code objects read from a target: header, qualified name, file name and line table, then a
//! frame's line lookup, through the symbolizer's cache (twice, to exercise the hit path).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyagent::memory::StructBytes;
use pyagent::symbolize::Symbolizer;
use pyagent_fuzz::{layout, u64_prefix, ImageMemory};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Some((ip, image)) = rest.split_first_chunk::<8>() else {
        return;
    };
    let offsets = layout(selector);
    let addr = 8 + u64::from(selector >> 1) * 8;
    // Take whatever type pointer the object has as `PyCode_Type`, so every input is a code object.
    let code_type = image
        .get(addr as usize..)
        .map(|o| o.u64_at(offsets.pyobject.ob_type))
        .unwrap_or(0);
    let mut symbolizer = Symbolizer::new(offsets, code_type);
    let mut mem = ImageMemory { image };
    for epoch in [Some(1), Some(1), None] {
        symbolizer.begin_sample(epoch);
        if let Ok(Some(info)) = symbolizer.code_info(&mut mem, addr) {
            let ip = u64_prefix(ip);
            for base in [0, ip, ip.wrapping_add(2), ip / 2] {
                let _ = symbolizer.frame(&info, ip, base);
            }
        }
    }
});
