//! Times the parse of native objects as `record --native` does it, and says where their names
//! came from: `cargo run --release -p pyagent --example parse_object -- [--debug-dir DIR]...
//! FILE...`. Each file is parsed five times (outside the agent's cache); the median is printed.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use pyagent::symbolize::native::{DebugDirs, DebugSearch, ElfObject};

fn main() -> Result<()> {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--debug-dir" {
            dirs.push(PathBuf::from(
                args.next().context("--debug-dir needs a directory")?,
            ));
        } else {
            files.push(PathBuf::from(arg));
        }
    }
    let dirs = if dirs.is_empty() {
        DebugDirs::default()
    } else {
        DebugDirs::new(dirs)
    };
    for path in files {
        let path = std::path::absolute(&path)?;
        let search = DebugSearch {
            pid: std::process::id(),
            object_path: &path,
            dirs: &dirs,
        };
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let file = File::open(&path).with_context(|| format!("{}", path.display()))?;
            let start = Instant::now();
            let object = ElfObject::read(&path.to_string_lossy(), &file, Some(&search))?;
            times.push(start.elapsed());
            last = Some(Arc::new(object));
        }
        times.sort();
        let object = last.expect("parsed five times");
        println!(
            "{}: {:.1} ms, {} function symbols, names beyond .dynsym from {:?}, eval loop: {}",
            path.display(),
            times[2].as_secs_f64() * 1e3,
            object.symbol_count(),
            object.symbol_source,
            object.has_eval_loop()
        );
    }
    Ok(())
}
