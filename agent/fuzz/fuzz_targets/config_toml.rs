//! The `--config` TOML file: parse, then validate into a service configuration.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pyagent::config::{Overrides, ServiceConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(layer) = Overrides::from_toml(text, Path::new("fuzz.toml")) {
        let _ = ServiceConfig::from_overrides(layer);
    }
});
