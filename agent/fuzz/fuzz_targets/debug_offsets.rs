//! `_Py_DebugOffsets` as read from `_PyRuntime` (3.13+): the length probe, then the full parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyagent::offsets::{debug_offsets_len, parse_debug_offsets};

fuzz_target!(|data: &[u8]| {
    let _ = debug_offsets_len(data);
    if let Ok(offsets) = parse_debug_offsets(data) {
        // A table that parses was validated: the read lengths derived from it must be sane.
        assert!(offsets.validate().is_ok());
        let _ = offsets.frame_read_len();
        let _ = offsets.thread_read_len();
        let _ = offsets.code_read_len();
    }
});
