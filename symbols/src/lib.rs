//! Kernel symbol tables for kprobe-perf: where a name is, which symbol
//! holds an address, which symbols a glob names, and which of them the
//! kernel would refuse to probe. No perf events are opened here.
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
//! let open: Vec<_> = syms.matches("do_sys_open*").iter().map(|s| s.name.as_str()).collect();
//! assert_eq!(open, ["do_sys_openat2", "do_sys_open"]);
//! assert_eq!(syms.matches("ext4:*")[0].label(), "init_once@0xffffffff81200200 [ext4]");
//! ```
//!
//! # Cost
//!
//! Loading keeps every name in one string and each symbol in a 24-byte
//! record. The [`Symbol`] values that methods hand out are built on first
//! use, 64 neighbours at a time, and the name index on the first
//! [`lookup`](KernelSymbols::lookup), [`names`](KernelSymbols::names) or
//! literal [`matches`](KernelSymbols::matches); a table is `Sync`, so that
//! work is shared between threads.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]

mod cover;
pub mod elf;
mod exclusion;
pub mod file;
mod glob;
pub mod image;
mod kallsyms;
mod names;
pub mod prototypes;
pub mod sdt;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use cover::{cover_globs, CoverGlob};
pub use exclusion::{Blacklist, BlacklistEntry, BlacklistError, Exclusion, BLACKLIST_PATH};
pub use glob::{glob_match, is_glob};

use glob::Glob;
use kallsyms::{Entry, LoadError, ParseError, Table};
use names::NameIndex;

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
    /// The text is beyond this table's limits (4 GiB of names, 2^32
    /// symbols or modules): not a kallsyms file.
    #[error("{path} is too large for a kallsyms file")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
}

impl SymbolsError {
    fn from_load(e: LoadError, path: &Path) -> Self {
        match e {
            LoadError::Io(source) => SymbolsError::Read {
                path: path.to_path_buf(),
                source,
            },
            LoadError::Parse(p) => Self::from_parse(p, path),
        }
    }

    fn from_parse(e: ParseError, path: &Path) -> Self {
        match e {
            ParseError::Malformed { line, text } => SymbolsError::Malformed {
                path: path.to_path_buf(),
                line,
                text,
            },
            ParseError::TooLarge => SymbolsError::TooLarge {
                path: path.to_path_buf(),
            },
        }
    }
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

    /// `name@0xADDR`, or `name@0xADDR [module]` for a module symbol: tells
    /// apart the instances of a duplicate name, and
    /// [`KernelSymbols::by_label`] takes it back.
    pub fn label(&self) -> String {
        match &self.module {
            Some(m) => format!("{}@0x{:x} [{m}]", self.name, self.address),
            None => format!("{}@0x{:x}", self.name, self.address),
        }
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

/// How many [`Symbol`]s are built together on first use.
const CHUNK: usize = 64;

/// The running kernel's symbols, as `/proc/kallsyms` shows them.
#[derive(Default)]
pub struct KernelSymbols {
    /// Entries sorted by address, names, modules, section bounds.
    table: Table,
    /// The `Symbol`s handed out, `CHUNK` entries per cell, built on demand.
    chunks: Vec<OnceLock<Box<[Symbol]>>>,
    /// Name -> entries, built on demand.
    index: OnceLock<NameIndex>,
    blacklist: Option<Blacklist>,
    hidden: bool,
}

impl std::fmt::Debug for KernelSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSymbols")
            .field("symbols", &self.table.entries.len())
            .field("modules", &self.table.modules.len())
            .field("addresses_hidden", &self.hidden)
            .field("blacklist", &self.blacklist.as_ref().map(Blacklist::len))
            .finish_non_exhaustive()
    }
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<Self, SymbolsError> {
        Self::load_from(Path::new("/proc/kallsyms"))
    }

    /// Reads a kallsyms-format file, parsing it piece by piece as it is
    /// read.
    pub fn load_from(path: &Path) -> Result<Self, SymbolsError> {
        let read_error = |source| SymbolsError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(read_error)?;
        // procfs files report 0; regular files their size.
        let size = file.metadata().map_or(0, |m| m.len());
        let table = kallsyms::read_table(file, usize::try_from(size).unwrap_or(0))
            .map_err(|e| SymbolsError::from_load(e, path))?;
        Ok(Self::from_table(table))
    }

    /// Parses kallsyms text.
    pub fn parse(text: &str) -> Result<Self, SymbolsError> {
        let mut parser = kallsyms::Parser::new(text.len());
        parser
            .feed(text)
            .map_err(|e| SymbolsError::from_parse(e, Path::new("<kallsyms>")))?;
        Ok(Self::from_table(parser.finish()))
    }

    fn from_table(table: Table) -> Self {
        let chunks = table.entries.len().div_ceil(CHUNK);
        KernelSymbols {
            hidden: !table.entries.is_empty() && !table.any_nonzero,
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            table,
            index: OnceLock::new(),
            blacklist: None,
        }
    }

    /// True when every address is zero: kallsyms hides them from this reader
    /// (kptr_restrict, or no CAP_SYSLOG).
    pub fn addresses_hidden(&self) -> bool {
        self.hidden
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.table.entries.len()
    }

    /// True when there are no symbols.
    pub fn is_empty(&self) -> bool {
        self.table.entries.is_empty()
    }

    /// Every symbol, in address order (file order among equal addresses).
    pub fn iter(&self) -> impl Iterator<Item = &Symbol> {
        (0..self.table.entries.len()).map(|i| self.symbol(i))
    }

    /// Every distinct symbol name, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let table = &self.table;
        self.index()
            .firsts(table)
            .map(move |i| table.name(&table.entries[i]))
    }

    /// Every symbol with this name (core and modules), in address order.
    pub fn lookup(&self, name: &str) -> Vec<&Symbol> {
        self.index()
            .get(&self.table, name)
            .map(|i| self.symbol(i))
            .collect()
    }

    /// The instance of a duplicate name that [`Symbol::label`] names:
    /// `name@0xADDR`, optionally followed by ` [module]`. `None` when no
    /// symbol has that name at that address (always, when addresses are
    /// hidden).
    pub fn by_label(&self, label: &str) -> Option<&Symbol> {
        if self.hidden {
            return None;
        }
        let (rest, module) = match label.trim().strip_suffix(']') {
            Some(head) => {
                let (rest, m) = head.rsplit_once('[')?;
                (rest.trim_end(), Some(m))
            }
            None => (label.trim(), None),
        };
        let (name, addr) = rest.rsplit_once('@')?;
        let addr = addr.strip_prefix("0x").unwrap_or(addr);
        let address = u64::from_str_radix(addr, 16).ok()?;
        self.index()
            .get(&self.table, name)
            .find(|&i| {
                let e = &self.table.entries[i];
                e.address == address && (module.is_none() || self.table.module(e) == module)
            })
            .map(|i| self.symbol(i))
    }

    /// The text symbols a shell-style glob names, in address order.
    ///
    /// `GLOB` matches names (`*`, `?`, `[a-z]`, `[!a-z]`, `\*`) in the core
    /// kernel and every module. `MOD:GLOB` limits the search to modules
    /// whose name matches the glob `MOD`: `ext4:*` is every function of
    /// ext4, `*:*_open` every `*_open` of any module (the core kernel
    /// excluded), and `vmlinux:GLOB` the core kernel alone. A pattern
    /// without metacharacters is an exact name. Symbols the kernel would
    /// refuse are included; filter them with [`exclusion`](Self::exclusion).
    pub fn matches(&self, pattern: &str) -> Vec<&Symbol> {
        let (module_glob, name_glob) = match pattern.split_once(':') {
            Some((m, n)) => (Some(m), n),
            None => (None, pattern),
        };
        // Which module ids (0: core kernel) are in scope.
        let in_scope: Vec<bool> = match module_glob {
            None => vec![true; self.table.modules.len() + 1],
            Some("vmlinux") => {
                let mut v = vec![false; self.table.modules.len() + 1];
                v[0] = true;
                v
            }
            Some(m) => {
                let g = Glob::new(m);
                std::iter::once(false)
                    .chain(self.table.modules.iter().map(|m| g.is_match(m)))
                    .collect()
            }
        };
        let wanted = |e: &Entry| {
            is_text_kind(e.kind) && in_scope.get(e.module as usize).copied().unwrap_or(false)
        };
        let glob = Glob::new(name_glob);
        match glob.literal() {
            Some(name) => self
                .index()
                .get(&self.table, &name)
                .filter(|&i| wanted(&self.table.entries[i]))
                .map(|i| self.symbol(i))
                .collect(),
            None => self
                .table
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| wanted(e) && glob.is_match(self.table.name(e)))
                .map(|(i, _)| self.symbol(i))
                .collect(),
        }
    }

    /// The text symbol containing `address`, with offset and size.
    pub fn symbolize(&self, address: u64) -> Option<Location<'_>> {
        if self.hidden || address == 0 {
            return None;
        }
        let entries = &self.table.entries;
        let idx = entries
            .partition_point(|e| e.address <= address)
            .checked_sub(1)?;
        let e = &entries[idx];
        if !is_text_kind(e.kind) {
            return None;
        }
        let next = entries[idx + 1..].iter().find(|n| n.address > e.address)?;
        let size = next.address - e.address;
        let offset = address - e.address;
        (offset < size).then(|| Location {
            symbol: self.symbol(idx),
            offset,
            size,
        })
    }

    /// Uses `blacklist` (from [`Blacklist::load`]) in
    /// [`exclusion`](Self::exclusion) from now on.
    pub fn set_blacklist(&mut self, blacklist: Blacklist) {
        self.blacklist = Some(blacklist);
    }

    /// The blacklist given to [`set_blacklist`](Self::set_blacklist).
    pub fn blacklist(&self) -> Option<&Blacklist> {
        self.blacklist.as_ref()
    }

    /// Why the kernel would refuse a kprobe at the start of `sym`, or
    /// `None` when nothing known here stops it. Checked: `__pfx_`/`__cfi_`
    /// padding, `.cold` fragments, init text, the entry, noinstr and
    /// kprobes sections (bounds from kallsyms itself, so only when
    /// addresses are shown), generated code, the debugfs blacklist when one
    /// was [set](Self::set_blacklist), and for a compiler clone
    /// (`NAME.isra.0` ...) what the kernel checks of its base `NAME`: the
    /// blacklist and the entry, noinstr and kprobes sections. Not checked
    /// here: instruction boundaries, jump labels, static calls, BUG sites
    /// and `notrace`.
    pub fn exclusion(&self, sym: &Symbol) -> Option<Exclusion> {
        if let Some(x) = self.own_exclusion(&sym.name, sym.module.as_deref(), sym.address) {
            return Some(x);
        }
        let base = exclusion::clone_base(&sym.name)?;
        let module = sym.module.as_deref();
        // The kernel looks the base name up and checks that address; prefer
        // the instance in the clone's own module.
        let instances: Vec<usize> = self
            .index()
            .get(&self.table, base)
            .filter(|&i| is_text_kind(self.table.entries[i].kind))
            .collect();
        let pick = instances
            .iter()
            .find(|&&i| self.table.module(&self.table.entries[i]) == module)
            .or(instances.first());
        let reason = match pick {
            Some(&i) => {
                let e = &self.table.entries[i];
                self.base_exclusion(base, self.table.module(e), e.address)?
            }
            None => self.blacklisted(base, module, 0)?,
        };
        Some(Exclusion::CompilerClone {
            base: base.to_string(),
            reason: Box::new(reason),
        })
    }

    /// What the kernel checks of a clone's base: the blacklist and the
    /// areas it blacklists (kernel/kprobes.c `within_kprobe_blacklist`).
    fn base_exclusion(&self, name: &str, module: Option<&str>, address: u64) -> Option<Exclusion> {
        if let Some(x) = self.section_exclusion(module, address) {
            if x != Exclusion::InitText {
                return Some(x);
            }
        }
        self.blacklisted(name, module, address)
    }

    fn section_exclusion(&self, module: Option<&str>, address: u64) -> Option<Exclusion> {
        if module.is_some() || self.hidden || address == 0 {
            return None;
        }
        let s = &self.table.sections;
        if s.init.contains(address) {
            Some(Exclusion::InitText)
        } else if s.entry.contains(address) {
            Some(Exclusion::EntryText)
        } else if s.noinstr.contains(address) {
            Some(Exclusion::NoinstrText)
        } else if s.kprobes.contains(address) {
            Some(Exclusion::KprobesText)
        } else {
            None
        }
    }

    fn own_exclusion(&self, name: &str, module: Option<&str>, address: u64) -> Option<Exclusion> {
        if name.starts_with("__pfx_") || name.starts_with("__cfi_") {
            return Some(Exclusion::Padding);
        }
        if name.contains(".cold") {
            return Some(Exclusion::ColdFragment);
        }
        if let Some(m) = module.filter(|m| exclusion::generated_area(m)) {
            return Some(Exclusion::Generated {
                area: m.to_string(),
            });
        }
        if let Some(x) = self.section_exclusion(module, address) {
            return Some(x);
        }
        self.blacklisted(name, module, address)
    }

    /// The blacklist's verdict: by address when both it and kallsyms show
    /// addresses, by name and module otherwise.
    fn blacklisted(&self, name: &str, module: Option<&str>, address: u64) -> Option<Exclusion> {
        let bl = self.blacklist.as_ref()?;
        let entry = if bl.addresses_hidden() || self.hidden || address == 0 {
            bl.by_name(name, module)
        } else {
            bl.containing(address)
        }?;
        Some(Exclusion::Blacklisted {
            entry: entry.to_string(),
        })
    }

    fn index(&self) -> &NameIndex {
        self.index.get_or_init(|| NameIndex::build(&self.table))
    }

    /// The `Symbol` of entry `i`, building its chunk on first use.
    fn symbol(&self, i: usize) -> &Symbol {
        let chunk = self.chunks[i / CHUNK].get_or_init(|| {
            let lo = i / CHUNK * CHUNK;
            let hi = (lo + CHUNK).min(self.table.entries.len());
            self.table.entries[lo..hi]
                .iter()
                .map(|e| Symbol {
                    address: e.address,
                    kind: char::from(e.kind),
                    name: self.table.name(e).to_string(),
                    module: self.table.module(e).map(str::to_string),
                })
                .collect()
        });
        &chunk[i % CHUNK]
    }
}

fn is_text_kind(kind: u8) -> bool {
    matches!(kind, b'T' | b't' | b'W' | b'w')
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
