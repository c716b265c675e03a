//! `co_linetable` decoding and lookups, as read from a target's code objects.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyagent::symbolize::LineTable;

fuzz_target!(|data: &[u8]| {
    let Some((head, table)) = data.split_first_chunk::<4>() else {
        return;
    };
    let table_ = LineTable::decode(table, u32::from_le_bytes(*head));
    let len = table_.len_units();
    for addrq in [
        0,
        1,
        len / 2,
        len.saturating_sub(1),
        len,
        len.saturating_add(1),
        u32::MAX,
    ] {
        let _ = table_.line_at(addrq);
    }
});
