//! `str` and `bytes` objects read from a target, laid out as 3.11 or 3.12 lay them out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyagent::symbolize::{read_bytes, read_str};
use pyagent_fuzz::{layout, ImageMemory};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, image)) = data.split_first() else {
        return;
    };
    let offsets = layout(selector);
    let mut mem = ImageMemory { image };
    // The object sits at a word boundary chosen by the fuzzer, within its own input.
    let addr = u64::from(selector >> 1) * 8;
    let _ = read_str(&mut mem, &offsets, addr);
    let _ = read_bytes(&mut mem, &offsets, addr);
});
