//! Symbols of user-space ELF binaries and libraries, for uprobes: where a
//! function is, as the file offset the uprobe PMU takes.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

/// Errors from reading a user binary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not an ELF object this reader understands.
    #[error("{path} is not a readable ELF file: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// No function of that name.
    #[error("{path} has no function {name} in its symbol tables (stripped binaries keep only exported ones; give a file offset instead: {path}:0xOFFSET)")]
    NotFound {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// The symbol's address lies in no loadable segment.
    #[error("{name} in {path} is at 0x{address:x}, outside every loadable segment")]
    NoSegment {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
        /// Its virtual address.
        address: u64,
    },
}

/// A function of a user binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSymbol {
    /// The symbol's name.
    pub name: String,
    /// Its virtual address in the file's own address space.
    pub address: u64,
    /// Its size in bytes (0 when the table does not say).
    pub size: u64,
    /// The file offset of its first byte (what the uprobe PMU takes).
    pub file_offset: u64,
}

/// A function of a symbol table, by its virtual address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressSymbol {
    /// The symbol's name.
    pub name: String,
    /// Its virtual address in the file's own address space.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// Largest binary read (a reader's bound, far above any real executable
/// or library).
const MAX_BINARY_BYTES: u64 = 1 << 31;

/// A user binary read into memory once: its symbols and its bytes, for
/// checking uprobe offsets.
pub struct UserBinary {
    path: PathBuf,
    data: crate::file::FileBytes,
}

/// A text symbol with the file range its code occupies.
struct TextSymbol<'a> {
    name: &'a str,
    address: u64,
    /// Size from the table, or up to the next symbol or section end when
    /// the table says 0.
    size: u64,
    /// Size as the symbol table gives it.
    table_size: u64,
    file_offset: u64,
}

impl UserBinary {
    /// Reads the regular file at `path` (a symbolic link is followed, as
    /// the kernel does for a uprobe path), bounded by its size.
    pub fn open(path: &Path) -> Result<UserBinary, ElfError> {
        // Opened non-blocking and checked to be a regular file first, so a
        // FIFO or device never blocks or streams without end.
        let data = crate::file::map_regular(path, MAX_BINARY_BYTES).map_err(|source| {
            if source.kind() == std::io::ErrorKind::InvalidInput
                && source
                    .get_ref()
                    .is_some_and(|e| e.is::<crate::file::TooLarge>())
            {
                ElfError::Parse {
                    path: path.to_path_buf(),
                    reason: source.to_string(),
                }
            } else {
                ElfError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        Ok(UserBinary {
            path: path.to_path_buf(),
            data,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn parse(&self) -> Result<object::File<'_>, ElfError> {
        object::File::parse(&*self.data).map_err(|e| self.parse_error(e.to_string()))
    }

    /// The file parsed as an object (for the crate's other readers).
    pub(crate) fn parse_object(&self) -> Result<object::File<'_>, ElfError> {
        self.parse()
    }

    /// A parse error of this file, for `reason`.
    pub(crate) fn parse_error(&self, reason: String) -> ElfError {
        ElfError::Parse {
            path: self.path.clone(),
            reason,
        }
    }

    /// Every named function with an address, `.symtab` first, then
    /// `.dynsym`, each with its file range.
    fn text_symbols<'d>(&self, file: &object::File<'d>) -> Vec<TextSymbol<'d>> {
        let mut out = Vec::new();
        let mut starts: Vec<u64> = Vec::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.kind() != SymbolKind::Text || sym.address() == 0 {
                continue;
            }
            starts.push(sym.address());
            let Ok(name) = sym.name() else { continue };
            let Some(file_offset) = file_offset_of(file, sym.address()) else {
                continue;
            };
            // The end of the section holding it bounds its size.
            let section_end = sym
                .section_index()
                .and_then(|i| file.section_by_index(i).ok())
                .map(|sec| sec.address().saturating_add(sec.size()));
            let mut size = sym.size();
            if let Some(end) = section_end {
                size = size.min(end.saturating_sub(sym.address()));
            }
            out.push((
                TextSymbol {
                    name,
                    address: sym.address(),
                    size,
                    table_size: sym.size(),
                    file_offset,
                },
                section_end,
            ));
        }
        starts.sort_unstable();
        starts.dedup();
        out.into_iter()
            .map(|(mut t, section_end)| {
                if t.size == 0 {
                    // No size in the table: up to the next symbol, within
                    // the section.
                    let i = starts.partition_point(|&a| a <= t.address);
                    let next = starts.get(i).copied();
                    let end = match (next, section_end) {
                        (Some(n), Some(e)) => n.min(e),
                        (Some(n), None) => n,
                        (None, Some(e)) => e,
                        (None, None) => t.address,
                    };
                    t.size = end.saturating_sub(t.address);
                }
                t
            })
            .collect()
    }

    /// The function `name`, from `.symtab` or, when stripped, `.dynsym`.
    /// `size` is the table's, or (when it says 0) the distance to the next
    /// symbol or the end of the section.
    pub fn function(&self, name: &str) -> Result<UserSymbol, ElfError> {
        let file = self.parse()?;
        let syms = self.text_symbols(&file);
        if let Some(t) = syms.iter().find(|t| t.name == name) {
            return Ok(self.user_symbol(t));
        }
        let named = file
            .symbols()
            .chain(file.dynamic_symbols())
            .find(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.name() == Ok(name));
        Err(match named {
            Some(s) => ElfError::NoSegment {
                path: self.path.clone(),
                name: name.to_string(),
                address: s.address(),
            },
            None => ElfError::NotFound {
                path: self.path.clone(),
                name: name.to_string(),
            },
        })
    }

    /// The GNU build ID of the file, if it has one.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let file = self.parse().ok()?;
        file.build_id().ok().flatten().map(<[u8]>::to_vec)
    }

    /// The loadable segments: (file offset, size in the file, virtual
    /// address) each, to turn a mapping's file offset into the address
    /// the symbol tables use.
    pub fn segments(&self) -> Vec<(u64, u64, u64)> {
        let Ok(file) = self.parse() else {
            return Vec::new();
        };
        file.segments()
            .map(|seg| {
                let (off, size) = seg.file_range();
                (off, size, seg.address())
            })
            .collect()
    }

    /// Every named function with an address (`.symtab` and `.dynsym`,
    /// and the labels of executable sections, as perf keeps them: ld.so's
    /// `_dl_start_user`), sorted by address, one per address (of aliases,
    /// the one perf names, see [`perf_prefers`]), each with its size (up
    /// to the next function when the table says 0): what naming a
    /// callchain's frames searches. Also works on a separate debug file,
    /// whose code is not in the file.
    pub fn functions_by_address(&self) -> Result<Vec<AddressSymbol>, ElfError> {
        let file = self.parse()?;
        let executable = |s: &object::Symbol<'_, '_>| {
            s.section_index()
                .and_then(|i| file.section_by_index(i).ok())
                .is_some_and(|sec| match sec.flags() {
                    object::SectionFlags::Elf { sh_flags, .. } => {
                        sh_flags.contains(object::elf::SHF_EXECINSTR)
                    }
                    _ => false,
                })
        };
        let mut out: Vec<(AddressSymbol, Binding)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.address() != 0)
            .filter(|s| {
                // A label (STT_NOTYPE, which `object` calls Unknown) of
                // an executable section, but not Arm's `$x` mapping symbols.
                let label = matches!(s.kind(), SymbolKind::Label | SymbolKind::Unknown)
                    && !s.name().is_ok_and(|n| n.starts_with('$'));
                s.kind() == SymbolKind::Text || (label && executable(s))
            })
            .filter_map(|s| {
                let symbol = AddressSymbol {
                    name: s.name().ok().filter(|n| !n.is_empty())?.to_string(),
                    address: s.address(),
                    size: s.size(),
                };
                Some((symbol, Binding::of(&s)))
            })
            .collect();
        out.sort_by(|a, b| a.0.address.cmp(&b.0.address).then(perf_prefers(a, b)));
        out.dedup_by_key(|s| s.0.address);
        let mut out: Vec<AddressSymbol> = out.into_iter().map(|(s, _)| s).collect();
        for i in 0..out.len() {
            if out[i].size == 0 {
                if let Some(next) = out.get(i + 1).map(|n| n.address) {
                    out[i].size = next - out[i].address;
                }
            }
        }
        Ok(out)
    }

    /// The function whose code holds file offset `offset`, if a symbol
    /// with a size covers it.
    pub fn function_at(&self, offset: u64) -> Result<Option<UserSymbol>, ElfError> {
        let file = self.parse()?;
        let syms = self.text_symbols(&file);
        Ok(syms
            .iter()
            .filter(|t| t.table_size > 0)
            .find(|t| offset >= t.file_offset && offset - t.file_offset < t.size)
            .map(|t| self.user_symbol(t)))
    }

    fn user_symbol(&self, t: &TextSymbol<'_>) -> UserSymbol {
        UserSymbol {
            name: t.name.to_string(),
            address: t.address,
            size: t.size,
            file_offset: t.file_offset,
        }
    }

    /// The bytes of `sym` (up to `sym.size`, and at most `max`), bounded by
    /// the file.
    pub fn bytes(&self, sym: &UserSymbol, max: u64) -> &[u8] {
        let start = usize::try_from(sym.file_offset).unwrap_or(usize::MAX);
        let len = usize::try_from(sym.size.min(max)).unwrap_or(usize::MAX);
        let Some(rest) = self.data.get(start..) else {
            return &[];
        };
        &rest[..len.min(rest.len())]
    }
}

/// A symbol's binding, as perf ranks aliases by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Binding {
    Global,
    Local,
    Weak,
}

impl Binding {
    fn of(s: &object::Symbol<'_, '_>) -> Binding {
        if s.is_weak() {
            Binding::Weak
        } else if s.is_global() {
            Binding::Global
        } else {
            Binding::Local
        }
    }
}

/// Of two symbols at one address, the one perf keeps first (its
/// `choose_best_symbol` in tools/perf/util/symbol.c): one with a size,
/// then not weak, then global, then the fewest leading underscores,
/// then the longest name (so libc's `malloc` over `__libc_malloc`, and
/// `__GI___inet_pton` over the weak `inet_pton` and the local
/// `__inet_pton`). Ties keep the tables' order.
fn perf_prefers(a: &(AddressSymbol, Binding), b: &(AddressSymbol, Binding)) -> std::cmp::Ordering {
    let underscores = |s: &AddressSymbol| s.name.bytes().take_while(|&c| c == b'_').count();
    (a.0.size == 0)
        .cmp(&(b.0.size == 0))
        .then((a.1 == Binding::Weak).cmp(&(b.1 == Binding::Weak)))
        .then((a.1 != Binding::Global).cmp(&(b.1 != Binding::Global)))
        .then(underscores(&a.0).cmp(&underscores(&b.0)))
        .then(b.0.name.len().cmp(&a.0.name.len()))
}

/// The file offset of virtual address `address`, through the loadable
/// segment that maps it.
fn file_offset_of(file: &object::File<'_>, address: u64) -> Option<u64> {
    file.segments().find_map(|seg| {
        let (off, size) = seg.file_range();
        let start = seg.address();
        (address >= start && address - start < size).then(|| off + (address - start))
    })
}

/// The function `name` of the binary at `path`, from `.symtab` or, when
/// stripped, `.dynsym`.
pub fn find_function(path: &Path, name: &str) -> Result<UserSymbol, ElfError> {
    UserBinary::open(path)?.function(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_ranked_as_perf_ranks_them() {
        let sym = |name: &str, size, binding| {
            let s = AddressSymbol {
                name: name.into(),
                address: 0x98930,
                size,
            };
            (s, binding)
        };
        let best = |mut v: Vec<(AddressSymbol, Binding)>| {
            v.sort_by(perf_prefers);
            v[0].0.name.clone()
        };
        // libc6-dbg's malloc and inet_pton, in its symbol table's order.
        let malloc = vec![
            sym("__GI___libc_malloc", 791, Binding::Local),
            sym("__malloc", 791, Binding::Local),
            sym("__libc_malloc", 791, Binding::Global),
            sym("malloc", 791, Binding::Global),
        ];
        assert_eq!(best(malloc), "malloc");
        let pton = vec![
            sym("__inet_pton", 107, Binding::Local),
            sym("__GI_inet_pton", 107, Binding::Local),
            sym("__GI___inet_pton", 107, Binding::Local),
            sym("inet_pton", 107, Binding::Weak),
        ];
        assert_eq!(best(pton), "__GI___inet_pton");
        // A sized symbol over a label at the same address.
        let label = vec![
            sym("_start", 0, Binding::Global),
            sym("_x", 4, Binding::Local),
        ];
        assert_eq!(best(label), "_x");
    }

    #[test]
    fn finds_a_function_of_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        // main of the test harness is always there, and unmangled.
        let main = find_function(&exe, "main").unwrap();
        assert!(main.address > 0);
        assert!(main.file_offset > 0 && main.file_offset < std::fs::metadata(&exe).unwrap().len());
        let e = find_function(&exe, "no_such_function_kprobe_perf").unwrap_err();
        assert!(matches!(e, ElfError::NotFound { .. }), "{e}");
        let e = find_function(Path::new("/proc/cpuinfo"), "main").unwrap_err();
        assert!(matches!(e, ElfError::Parse { .. }), "{e}");
        // A device or a FIFO is refused before any read (no endless read
        // of /dev/zero, no blocking on a FIFO).
        let e = find_function(Path::new("/dev/zero"), "main").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read /dev/zero: it is a character device, not a regular file"
        );
    }

    #[test]
    fn function_bytes_and_the_function_at_an_offset() {
        let exe = std::env::current_exe().unwrap();
        let bin = UserBinary::open(&exe).unwrap();
        let main = bin.function("main").unwrap();
        assert!(main.size > 0);
        let bytes = bin.bytes(&main, u64::MAX);
        assert_eq!(bytes.len() as u64, main.size);
        let data = std::fs::read(&exe).unwrap();
        let at = main.file_offset as usize;
        assert_eq!(bytes, &data[at..at + bytes.len()]);
        assert_eq!(bin.bytes(&main, 3).len(), 3);
        let inside = bin.function_at(main.file_offset + 1).unwrap().unwrap();
        assert_eq!(inside.file_offset, main.file_offset);
        assert_eq!(bin.function_at(0).unwrap(), None);
    }
}
