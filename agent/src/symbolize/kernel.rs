//! Kernel symbols: a kernel return address → the kernel function holding it, from
//! `/proc/kallsyms`, read once per agent (the kernel's text does not move while it runs;
//! modules loaded later are named by the next agent start).

use std::sync::{Arc, LazyLock};

/// The kernel's text symbols, sorted by address.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    symbols: Vec<(u64, Arc<str>)>,
}

static KERNEL: LazyLock<KernelSymbols> = LazyLock::new(|| {
    std::fs::read_to_string("/proc/kallsyms")
        .map(|text| KernelSymbols::parse(&text))
        .unwrap_or_default()
});

impl KernelSymbols {
    /// The host's kernel symbols (empty when `/proc/kallsyms` is unreadable or hides addresses).
    pub fn host() -> &'static KernelSymbols {
        &KERNEL
    }

    /// Parses kallsyms text: `address type name [module]` lines; only text symbols (`t`, `T`)
    /// are kept, and a file of zero addresses (kptr_restrict) gives none.
    pub fn parse(text: &str) -> KernelSymbols {
        let mut symbols: Vec<(u64, Arc<str>)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                (addr != 0 && matches!(kind, "t" | "T")).then(|| (addr, Arc::from(name)))
            })
            .collect();
        symbols.sort_by_key(|(a, _)| *a);
        KernelSymbols { symbols }
    }

    /// The function holding `addr` (the nearest symbol at or below it).
    pub fn name(&self, addr: u64) -> Option<&Arc<str>> {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        self.symbols.get(i.checked_sub(1)?).map(|(_, n)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_nearest_text_symbol_below() {
        let k = KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 t do_one\n\
             ffffffff81002000 D some_data\n\
             ffffffff81003000 T do_two [mod]\n\
             garbage\n",
        );
        assert_eq!(k.name(0xffffffff81001010).map(|n| &**n), Some("do_one"));
        assert_eq!(k.name(0xffffffff81002010).map(|n| &**n), Some("do_one"));
        assert_eq!(k.name(0xffffffff81003000).map(|n| &**n), Some("do_two"));
        assert_eq!(k.name(0x1000), None);
        let hidden = KernelSymbols::parse("0000000000000000 T _stext\n");
        assert_eq!(hidden.name(0xffffffff81000000), None);
    }
}
