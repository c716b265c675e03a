//! Ring-buffer sample records as the BPF program writes them.
#![no_main]

use common::SampleRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = SampleRecord::parse(data) {
        let _ = record.header();
        assert_eq!(record.frames().count(), record.len());
        let _ = record.frame(record.len());
    }
});
