//! Kernel symbol tables for kprobe-perf: where a name is, and which symbol
//! holds an address. No perf events are opened here.
//!
//! ```
//! use kprobe_perf_symbols::KernelSymbols;
//! let text = "ffffffff81000000 T _text\n\
//!             ffffffff81200000 T do_sys_openat2\n\
//!             ffffffff81200100 t do_sys_open\n\
//!             ffffffff81200200 t init_once\t[ext4]\n";
//! let syms = KernelSymbols::parse(text).unwrap();
//! assert_eq!(syms.lookup("do_sys_openat2")[0].address, 0xffffffff81200000);
//! let at = syms.symbolize(0xffffffff81200005).unwrap();
//! assert_eq!((at.symbol.name.as_str(), at.offset, at.size), ("do_sys_openat2", 5, 0x100));
//! ```

#![deny(missing_docs)]

pub mod elf;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Errors from loading symbol tables.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymbolsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line did not have the `ADDR TYPE NAME [MODULE]` shape.
    #[error("{path}:{line}: not a kallsyms line: {text:?}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
}

/// One kernel symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Address (0 when kallsyms hides addresses).
    pub address: u64,
    /// kallsyms type letter (`T`/`t` text, `D`/`d` data ...).
    pub kind: char,
    /// Symbol name.
    pub name: String,
    /// Module name for module symbols, `None` for the core kernel.
    pub module: Option<String>,
}

impl Symbol {
    /// True for code symbols (`T`, `t`, `W`, `w` are text in kallsyms).
    pub fn is_text(&self) -> bool {
        matches!(self.kind, 'T' | 't' | 'W' | 'w')
    }
}

/// Where an address falls: a symbol, the offset into it and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location<'a> {
    /// The containing symbol.
    pub symbol: &'a Symbol,
    /// Offset of the address from the symbol's start.
    pub offset: u64,
    /// Distance from the symbol's start to the next symbol.
    pub size: u64,
}

/// The running kernel's symbols, as `/proc/kallsyms` shows them.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Symbols sorted by address.
    by_address: Vec<Symbol>,
    /// Name -> indices into `by_address`.
    by_name: HashMap<String, Vec<usize>>,
    hidden: bool,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<Self, SymbolsError> {
        Self::load_from(Path::new("/proc/kallsyms"))
    }

    /// Reads a kallsyms-format file.
    pub fn load_from(path: &Path) -> Result<Self, SymbolsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SymbolsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            SymbolsError::Malformed { line, text, .. } => SymbolsError::Malformed {
                path: path.to_path_buf(),
                line,
                text,
            },
            other => other,
        })
    }

    /// Parses kallsyms text.
    pub fn parse(text: &str) -> Result<Self, SymbolsError> {
        let mut syms = Vec::new();
        let mut any_nonzero = false;
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() {
                continue;
            }
            let malformed = || SymbolsError::Malformed {
                path: PathBuf::from("<kallsyms>"),
                line: i + 1,
                text: line.to_string(),
            };
            let (main, module) = match line.split_once('\t') {
                Some((m, rest)) => (
                    m,
                    Some(rest.trim().trim_start_matches('[').trim_end_matches(']')),
                ),
                None => (line, None),
            };
            let mut parts = main.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(malformed());
            };
            let address = u64::from_str_radix(addr, 16).map_err(|_| malformed())?;
            let kind = kind.chars().next().ok_or_else(malformed)?;
            any_nonzero |= address != 0;
            syms.push(Symbol {
                address,
                kind,
                name: name.to_string(),
                module: module.map(str::to_string),
            });
        }
        syms.sort_by_key(|s| s.address);
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::with_capacity(syms.len());
        for (i, s) in syms.iter().enumerate() {
            by_name.entry(s.name.clone()).or_default().push(i);
        }
        Ok(KernelSymbols {
            hidden: !syms.is_empty() && !any_nonzero,
            by_address: syms,
            by_name,
        })
    }

    /// True when every address is zero: kallsyms hides them from this reader
    /// (kptr_restrict, or no CAP_SYSLOG).
    pub fn addresses_hidden(&self) -> bool {
        self.hidden
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.by_address.len()
    }

    /// True when there are no symbols.
    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }

    /// Every distinct symbol name, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Every symbol with this name (core and modules), in address order.
    pub fn lookup(&self, name: &str) -> Vec<&Symbol> {
        self.by_name
            .get(name)
            .map(|v| v.iter().map(|&i| &self.by_address[i]).collect())
            .unwrap_or_default()
    }

    /// The text symbol containing `address`, with offset and size.
    pub fn symbolize(&self, address: u64) -> Option<Location<'_>> {
        if self.hidden || address == 0 {
            return None;
        }
        let idx = self
            .by_address
            .partition_point(|s| s.address <= address)
            .checked_sub(1)?;
        let symbol = &self.by_address[idx];
        if !symbol.is_text() {
            return None;
        }
        let next = self.by_address[idx + 1..]
            .iter()
            .find(|s| s.address > symbol.address)?;
        let size = next.address - symbol.address;
        let offset = address - symbol.address;
        (offset < size).then_some(Location {
            symbol,
            offset,
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffffc0a01000 t init_once\t[ext4]
ffffffff81000000 T _text
ffffffff81000000 T startup_64
ffffffff81234560 T __pfx_do_sys_openat2
ffffffff81234570 T do_sys_openat2
ffffffff81234650 T __pfx_do_sys_open
ffffffff81234660 T do_sys_open
ffffffff81234700 t init_once
ffffffff81234750 D some_data
";

    #[test]
    fn parses_core_and_module_symbols() {
        let s = KernelSymbols::parse(SAMPLE).unwrap();
        assert_eq!(s.len(), 9);
        let once = s.lookup("init_once");
        assert_eq!(once.len(), 2);
        assert_eq!(once[0].address, 0xffffffff81234700);
        assert_eq!(once[0].module, None);
        assert_eq!(once[1].module.as_deref(), Some("ext4"));
        assert!(!s.addresses_hidden());
    }

    #[test]
    fn sizes_stop_at_the_next_padding_symbol() {
        let s = KernelSymbols::parse(SAMPLE).unwrap();
        let at = s.symbolize(0xffffffff81234575).unwrap();
        assert_eq!(at.symbol.name, "do_sys_openat2");
        assert_eq!(at.offset, 5);
        assert_eq!(at.size, 0xe0);
        assert!(
            s.symbolize(0xffffffff81234750).is_none(),
            "data is not text"
        );
    }

    #[test]
    fn hidden_addresses_are_detected() {
        let s = KernelSymbols::parse("0000000000000000 T _text\n0000000000000000 T do_sys_open\n")
            .unwrap();
        assert!(s.addresses_hidden());
        assert!(s.symbolize(0).is_none());
    }

    #[test]
    fn malformed_line_names_its_number() {
        let e = KernelSymbols::parse("ffffffff81000000 T _text\nnonsense\n").unwrap_err();
        assert!(matches!(e, SymbolsError::Malformed { line: 2, .. }), "{e}");
    }
}
