//! Function symbols of one object, merged from its sources (its own `.symtab` and `.dynsym`, a
//! separate debug file's `.symtab`, MiniDebugInfo's): link-time address → name.

use goblin::elf::{sym, Elf};

/// A function symbol: link-time range and raw (mangled) name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Symbol {
    pub start: u64,
    pub end: u64,
    pub name: Box<str>,
}

/// The symbol whose code holds an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolHit<'a> {
    /// raw (possibly mangled) name
    pub name: &'a str,
    /// offset of the address from the symbol's start
    pub offset: u64,
}

/// Which symbol table of an ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    /// `.symtab`: every function, static ones included (what stripping removes)
    Static,
    /// `.dynsym`: the exported functions, which stripping keeps
    Dynamic,
}

/// The function symbols of `table` in `elf`: defined, with an address and a name.
pub(super) fn functions<'a>(elf: &'a Elf<'_>, table: Table) -> impl Iterator<Item = Symbol> + 'a {
    let (syms, strtab) = match table {
        Table::Static => (&elf.syms, &elf.strtab),
        Table::Dynamic => (&elf.dynsyms, &elf.dynstrtab),
    };
    syms.iter().filter_map(move |s| {
        let kind = s.st_type();
        if !(kind == sym::STT_FUNC || kind == sym::STT_GNU_IFUNC)
            || s.st_shndx == 0
            || s.st_value == 0
        {
            return None;
        }
        let name = strtab.get_at(s.st_name).filter(|n| !n.is_empty())?;
        Some(Symbol {
            start: s.st_value,
            end: s.st_value.saturating_add(s.st_size),
            name: name.into(),
        })
    })
}

/// Function symbols sorted by start address, one per address.
#[derive(Debug, Default)]
pub(super) struct SymbolTable {
    symbols: Vec<Symbol>,
}

impl SymbolTable {
    /// The table of `symbols`, given in order of preference: of the symbols starting at one
    /// address (the same function in `.symtab` and `.dynsym`, or aliases), the longest is kept,
    /// and of equally long ones the first given.
    pub fn new(mut symbols: Vec<Symbol>) -> SymbolTable {
        // Stable: equal keys keep the order given.
        symbols.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        symbols.dedup_by(|b, a| a.start == b.start);
        symbols.shrink_to_fit();
        SymbolTable { symbols }
    }

    /// Heap bytes the table holds: its entries and their names.
    pub fn heap_bytes(&self) -> u64 {
        let names: usize = self.symbols.iter().map(|s| s.name.len()).sum();
        (self.symbols.capacity() * std::mem::size_of::<Symbol>() + names) as u64
    }

    /// Every symbol, by start address.
    pub fn iter(&self) -> impl Iterator<Item = &Symbol> {
        self.symbols.iter()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// The function holding link-time address `svma`. A symbol without a size covers nothing
    /// beyond its first byte: naming an address after it would guess, and a wrong name is
    /// worse than `object+offset`.
    pub fn lookup(&self, svma: u64) -> Option<SymbolHit<'_>> {
        let i = self.symbols.partition_point(|s| s.start <= svma);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        (svma < s.end || svma == s.start).then(|| SymbolHit {
            name: &s.name,
            offset: svma - s.start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(start: u64, end: u64, name: &str) -> Symbol {
        Symbol {
            start,
            end,
            name: name.into(),
        }
    }

    #[test]
    fn one_symbol_per_address_the_longest_then_the_first_given() {
        let table = SymbolTable::new(vec![
            symbol(0x200, 0x210, "from_symtab"),
            symbol(0x100, 0x180, "outer"),
            symbol(0x200, 0x210, "from_dynsym"),
            symbol(0x100, 0x110, "shorter_alias"),
            symbol(0x300, 0x300, "sizeless"),
        ]);
        assert_eq!(table.len(), 3);
        let hit = |a| table.lookup(a).map(|h| (h.name, h.offset));
        assert_eq!(hit(0x150), Some(("outer", 0x50)));
        assert_eq!(hit(0x20f), Some(("from_symtab", 0xf)));
        assert_eq!(hit(0x210), None);
        assert_eq!(hit(0x300), Some(("sizeless", 0)));
        assert_eq!(
            hit(0x301),
            None,
            "a sizeless symbol covers its first byte only"
        );
        assert_eq!(hit(0xff), None);
    }
}
