//! Tests of the thread names: whole reads from fake processes of every layout, the objects
//! read on the way, garbage memory, and when names are read again.

mod image;

use super::*;
use crate::memory::FakeMemory;
use crate::offsets::DictKeysHeader;
use image::{offsets, Image, BASE};
use objects::KeyHint;

fn names(read: &PythonThreadNames) -> Vec<(u32, &str)> {
    let mut v: Vec<(u32, &str)> = read.names.iter().map(|(t, n)| (*t, &**n)).collect();
    v.sort_unstable();
    v
}

#[test]
fn reads_names_in_values_and_dicts_of_every_layout() {
    for minor in [7, 10, 11, 12, 13] {
        let mut img = Image::new(offsets(minor));
        let runtime = img.process(
            &[
                (0x7f00_0000_1000, 100, Some("MainThread")),
                (0x7f00_0000_2000, 101, Some("worker-1")),
                (0x7f00_0000_3000, 102, Some("CustomThreadName-3")),
                (0x7f00_0000_4000, 103, None),
            ],
            true,
        );
        let o = img.o;
        let read =
            read_python_names(&mut img.mem, &o, runtime, &mut KeyHints::new()).expect("readable");
        assert_eq!(
            names(&read),
            [
                (100, "MainThread"),
                (101, "worker-1"),
                (102, "CustomThreadName-3")
            ],
            "3.{minor}"
        );
        assert_eq!(read.seen.len(), 4, "3.{minor}: the unnamed thread is seen");
    }
}

#[test]
fn no_threading_module_means_no_names() {
    let mut img = Image::new(offsets(12));
    let runtime = img.process(&[(0x7f00_0000_1000, 100, Some("MainThread"))], false);
    let o = img.o;
    let read =
        read_python_names(&mut img.mem, &o, runtime, &mut KeyHints::new()).expect("readable");
    assert!(read.names.is_empty());
    assert!(read.seen.contains(&100));
}

/// Counts the reads that reach the image.
struct Counting<'a>(&'a mut FakeMemory, u64);

impl ProcessMemory for Counting<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.1 += 1;
        self.0.read(addr, buf)
    }
}

#[test]
fn a_second_read_checks_remembered_keys_instead_of_scanning() {
    let mut img = Image::new(offsets(13));
    let threads: Vec<(u64, u32, Option<&str>)> = (0..4)
        .map(|i| (0x7f00_0000_1000 * (i + 1), 100 + i as u32, Some("t")))
        .collect();
    let runtime = img.process(&threads, true);
    let o = img.o;
    let mut hints = KeyHints::new();
    let mut mem = Counting(&mut img.mem, 0);
    let first = read_python_names(&mut mem, &o, runtime, &mut hints).expect("readable");
    let scanned = std::mem::take(&mut mem.1);
    let second = read_python_names(&mut mem, &o, runtime, &mut hints).expect("readable");
    assert_eq!(first, second);
    assert!(mem.1 < scanned, "{} reads, then {}", scanned, mem.1);
}

#[test]
fn a_key_not_found_is_not_searched_again_until_the_dict_grows() {
    // A program that never imports `threading`: `sys.modules` has no such key.
    let mut img = Image::new(offsets(12));
    let runtime = img.process(&[(0x7f00_0000_1000, 100, None)], false);
    let o = img.o;
    let mut hints = KeyHints::new();
    let mut mem = Counting(&mut img.mem, 0);
    let first = read_python_names(&mut mem, &o, runtime, &mut hints).expect("readable");
    assert!(first.names.is_empty());
    let searched = std::mem::take(&mut mem.1);
    let second = read_python_names(&mut mem, &o, runtime, &mut hints).expect("readable");
    assert_eq!(first, second);
    assert!(mem.1 < searched, "{searched} reads, then {}", mem.1);
    assert!(
        hints.values().any(|h| matches!(h, KeyHint::Absent { .. })),
        "{hints:?}"
    );
}

#[test]
fn garbage_keys_objects_are_errors() {
    let o = offsets(12);
    let k = o.thread_names.expect("names").dict_keys;
    for (log2_size, log2_index, kind, nentries) in [
        (200u8, 200u8, 1u8, 5u64), // a huge table
        (3, 3, 1, u64::MAX),       // more entries than slots
        (3, 3, 1, 9),
        (3, 7, 1, 1),   // an index table that does not match the size
        (3, 3, 9, 1),   // no such kind
        (40, 42, 0, 1), // past the bound
        (16, 17, 0, 1 << 20),
    ] {
        let mut img = Image::new(o);
        let keys = img.alloc(64);
        let DictKeysHeader::Log2 {
            log2_size: size_at,
            log2_index_bytes: index_at,
            kind: kind_at,
        } = k.header
        else {
            panic!("3.11+ keys say their sizes in log2");
        };
        img.put(keys + size_at, &[log2_size]);
        img.put(keys + index_at, &[log2_index]);
        img.put(keys + kind_at, &[kind]);
        img.put_u64(keys + k.nentries, nentries);
        let dict = img.dict(keys, 0);
        let n = o.thread_names.expect("names");
        let mut hints = KeyHints::new();
        let mut r = Reader::new(&mut img.mem, &o, &n, &mut hints);
        assert!(
            matches!(r.open_dict(dict), Err(ObjectError::Malformed { .. })),
            "{log2_size} {log2_index} {kind} {nentries}"
        );
    }
}

#[test]
fn ints_beyond_64_bits_or_negative_are_not_idents() {
    for minor in [11, 12] {
        let mut img = Image::new(offsets(minor));
        let n = img.n();
        let l = n.long_object;
        let big = img.int(u64::MAX);
        let over = img.alloc(64);
        img.put_u64(over + l.lv_tag, if minor == 11 { 3 } else { 3 << 3 });
        img.put(over + l.ob_digit + 8, &(1u32 << 5).to_le_bytes()); // bit 65
        let negative = img.alloc(64);
        img.put_u64(
            negative + l.lv_tag,
            if minor == 11 {
                (-1i64) as u64
            } else {
                1 << 3 | 2
            },
        );
        let huge = img.alloc(64);
        img.put_u64(huge + l.lv_tag, u64::MAX - 7);
        let o = img.o;
        let mut hints = KeyHints::new();
        let mut r = Reader::new(&mut img.mem, &o, &n, &mut hints);
        assert_eq!(r.read_int(big).expect("int"), Some(u64::MAX), "3.{minor}");
        assert_eq!(r.read_int(over).expect("int"), None, "3.{minor}");
        assert_eq!(r.read_int(negative).expect("int"), None, "3.{minor}");
        assert_eq!(r.read_int(huge).expect("int"), None, "3.{minor}");
    }
}

/// Random memory full of pointers back into itself: every read must end, without a panic.
#[test]
fn random_memory_neither_panics_nor_hangs() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for minor in [11, 12, 13] {
        let o = offsets(minor);
        for _ in 0..200 {
            let mut mem = FakeMemory {
                base: BASE,
                bytes: vec![0; 1 << 14],
            };
            for word in mem.bytes.chunks_exact_mut(8) {
                let r = next();
                let v = match r % 4 {
                    // a pointer into the image
                    0 | 1 => BASE + (r >> 8) % (1 << 14),
                    2 => r >> 40,
                    _ => r,
                };
                word.copy_from_slice(&v.to_le_bytes());
            }
            let _ = read_python_names(&mut mem, &o, BASE, &mut KeyHints::new());
        }
    }
}

#[test]
fn names_are_read_again_for_new_threads_and_when_old() {
    let t0 = Instant::now();
    assert!(needs_read(None, t0, || true));
    // A batch's clock reading taken before a read made since (by a userspace round): no read.
    assert!(!needs_read(Some(t0 + MIN_REREAD), t0, || false));
    assert!(!needs_read(Some(t0), t0 + MIN_REREAD / 2, || false));
    assert!(!needs_read(Some(t0), t0 + MAX_AGE / 2, || true));
    assert!(needs_read(Some(t0), t0 + MAX_AGE / 2, || false));
    assert!(needs_read(Some(t0), t0 + MAX_AGE, || true));
}
