//! Function symbols sorted by address, looked up by the bucket address.

/// A function (or a pseudo-symbol for a section) over `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub start: u64,
    pub end: u64,
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

impl SymbolTable {
    /// Sorts; one symbol per start address (the first given wins, so pass
    /// preferred names first); a symbol with no size ends where the next
    /// begins (or at `limit`).
    pub fn new(mut symbols: Vec<Symbol>, limit: u64) -> SymbolTable {
        symbols.retain(|s| !s.name.is_empty());
        // Stable: among equal starts the earlier (preferred) one stays first.
        symbols.sort_by_key(|s| s.start);
        symbols.dedup_by_key(|s| s.start);
        let starts: Vec<u64> = symbols.iter().map(|s| s.start).collect();
        for (i, s) in symbols.iter_mut().enumerate() {
            if s.end <= s.start {
                s.end = starts.get(i + 1).copied().unwrap_or(limit.max(s.start + 1));
            }
        }
        SymbolTable { symbols }
    }

    /// The symbol containing `addr`. Where sized symbols overlap (nested or
    /// aliased), the one starting last before `addr` wins.
    pub fn lookup(&self, addr: u64) -> Option<&Symbol> {
        let i = self.symbols.partition_point(|s| s.start <= addr);
        self.symbols[..i]
            .iter()
            .rev()
            .take(4)
            .find(|s| addr < s.end)
    }

    /// The last function that starts in `(lo, hi)`: in a bucket that
    /// holds several, the one whose code runs on into the next bucket.
    pub fn last_starting_in(&self, lo: u64, hi: u64) -> Option<&Symbol> {
        let i = self.symbols.partition_point(|s| s.start < hi);
        self.symbols[..i].last().filter(|s| s.start > lo)
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Symbol> {
        self.symbols.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(start: u64, end: u64, name: &str) -> Symbol {
        Symbol {
            start,
            end,
            name: name.into(),
        }
    }

    #[test]
    fn lookup_by_containing_range() {
        let t = SymbolTable::new(
            vec![
                sym(0x200, 0x210, "b"),
                sym(0x100, 0x180, "a"),
                sym(0x300, 0, "c"),
            ],
            0x400,
        );
        assert_eq!(t.lookup(0x100).unwrap().name, "a");
        assert_eq!(t.lookup(0x17f).unwrap().name, "a");
        assert_eq!(t.lookup(0x180), None, "gap between a and b");
        assert_eq!(t.lookup(0xff), None);
        assert_eq!(t.lookup(0x20f).unwrap().name, "b");
        assert_eq!(
            t.lookup(0x3ff).unwrap().name,
            "c",
            "sizeless c runs to the limit"
        );
        assert_eq!(t.lookup(0x400), None);
    }

    #[test]
    fn aliases_keep_the_first_name_and_sizeless_symbols_end_at_the_next() {
        let t = SymbolTable::new(
            vec![
                sym(0x10, 0, "x"),
                sym(0x10, 0x20, "alias"),
                sym(0x30, 0x40, "y"),
            ],
            0x100,
        );
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(0x2f).unwrap().name, "x");
        assert_eq!(t.lookup(0x30).unwrap().name, "y");
    }
}
