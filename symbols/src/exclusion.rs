//! Functions the kernel refuses to probe, predicted in user space, and the
//! kernel's kprobe blacklist from debugfs.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why the kernel would refuse a kprobe on a symbol. `Display` gives a
/// sentence to show after the symbol's name (`"NAME: {exclusion}"`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exclusion {
    /// `__pfx_*` / `__cfi_*`: padding or a CFI preamble the compiler put
    /// before a function, not a function.
    Padding,
    /// `NAME.cold*`: a fragment the compiler split off a function.
    ColdFragment,
    /// Between `_sinittext` and `_einittext`: `__init` code, freed after
    /// boot.
    InitText,
    /// Between `__entry_text_start` and `__entry_text_end`: kernel entry
    /// code.
    EntryText,
    /// Between `__noinstr_text_start` and `__noinstr_text_end`.
    NoinstrText,
    /// Between `__kprobes_text_start` and `__kprobes_text_end`: the kprobes
    /// machinery itself.
    KprobesText,
    /// Code the kernel generated at run time (ftrace and kprobe trampolines,
    /// BPF programs), shown in kallsyms under a pseudo-module.
    Generated {
        /// The pseudo-module, e.g. `__builtin__ftrace` or `bpf`.
        area: String,
    },
    /// Listed in the kernel's kprobe blacklist (debugfs).
    Blacklisted {
        /// The blacklist entry that covers the symbol.
        entry: String,
    },
    /// A compiler clone (`NAME.isra.0`, `.constprop.0`, `.part.0`, ...)
    /// whose base function is refused: the kernel checks a clone against
    /// its base name.
    CompilerClone {
        /// The base name (the text before the first `.`).
        base: String,
        /// Why the base is refused.
        reason: Box<Exclusion>,
    },
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::Padding => f.write_str(
                "it is padding the compiler put before a function (__pfx_/__cfi_), not a function; probe the function that follows it",
            ),
            Exclusion::ColdFragment => f.write_str(
                "it is a .cold fragment the compiler split off a function, not a function entry; probe the function it belongs to",
            ),
            Exclusion::InitText => f.write_str(
                "it is __init code (between _sinittext and _einittext), freed after boot",
            ),
            Exclusion::EntryText => f.write_str(
                "it is kernel entry code (between __entry_text_start and __entry_text_end), where the kernel allows no kprobes",
            ),
            Exclusion::NoinstrText => f.write_str(
                "it is in the noinstr section (between __noinstr_text_start and __noinstr_text_end), which must not be instrumented",
            ),
            Exclusion::KprobesText => f.write_str(
                "it is in the __kprobes section (between __kprobes_text_start and __kprobes_text_end), part of the kprobes machinery",
            ),
            Exclusion::Generated { area } => write!(
                f,
                "it is code the kernel generated at run time ([{area}]), not kernel or module text"
            ),
            Exclusion::Blacklisted { entry } => write!(
                f,
                "the kernel's kprobe blacklist lists it (entry {entry})"
            ),
            Exclusion::CompilerClone { base, reason } => write!(
                f,
                "it is a compiler clone of {base}, and the kernel refuses clones of a refused function ({base}: {reason})"
            ),
        }
    }
}

/// The pseudo-modules under which kallsyms lists generated code.
pub(crate) fn generated_area(module: &str) -> bool {
    module == "bpf" || module.starts_with("__builtin__")
}

/// The base name of a compiler clone: `foo` for `foo.isra.0`; `None` when
/// `name` has no suffix.
pub(crate) fn clone_base(name: &str) -> Option<&str> {
    name.split_once('.')
        .map(|(base, _)| base)
        .filter(|b| !b.is_empty())
}

/// Errors from reading the kprobe blacklist.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlacklistError {
    /// The file could not be read.
    #[error("cannot read {path}: {source} (it needs CONFIG_KPROBES, debugfs mounted on /sys/kernel/debug, and root)")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line did not have the `0xSTART-0xEND\tSYMBOL [MODULE]` shape.
    #[error("{path}:{line}: not a kprobe blacklist line: {text:?}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
}

/// One entry of the kprobe blacklist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlacklistEntry {
    /// The address range `[start, end)`, or `None` when the file hides
    /// addresses from this reader.
    pub range: Option<std::ops::Range<u64>>,
    /// The symbol the kernel printed for the start (`%ps`).
    pub name: String,
    /// Its module, `None` for the core kernel.
    pub module: Option<String>,
}

impl fmt::Display for BlacklistEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(m) = &self.module {
            write!(f, " [{m}]")?;
        }
        if let Some(r) = &self.range {
            write!(f, " 0x{:x}-0x{:x}", r.start, r.end)?;
        }
        Ok(())
    }
}

/// The kernel's kprobe blacklist, as `/sys/kernel/debug/kprobes/blacklist`
/// lists it: `NOKPROBE_SYMBOL` functions and the symbols of blacklisted
/// sections. Without privilege the kernel prints every address as zero;
/// then [`addresses_hidden`](Self::addresses_hidden) is true, no entry has
/// a range, and symbols are matched by name and module instead.
#[derive(Debug, Clone, Default)]
pub struct Blacklist {
    /// Sorted by start address when addresses are shown.
    entries: Vec<BlacklistEntry>,
    /// `reach[i]`: the highest end among `entries[..=i]`.
    reach: Vec<u64>,
    hidden: bool,
}

/// Where debugfs shows the blacklist.
pub const BLACKLIST_PATH: &str = "/sys/kernel/debug/kprobes/blacklist";

impl Blacklist {
    /// Reads [`BLACKLIST_PATH`].
    pub fn load() -> Result<Self, BlacklistError> {
        Self::load_from(Path::new(BLACKLIST_PATH))
    }

    /// Reads a blacklist-format file.
    pub fn load_from(path: &Path) -> Result<Self, BlacklistError> {
        let text = std::fs::read_to_string(path).map_err(|source| BlacklistError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            BlacklistError::Malformed { line, text, .. } => BlacklistError::Malformed {
                path: path.to_path_buf(),
                line,
                text,
            },
            other => other,
        })
    }

    /// Parses blacklist text: lines `0xSTART-0xEND\tSYMBOL` or
    /// `0xSTART-0xEND\tSYMBOL [MODULE]`.
    pub fn parse(text: &str) -> Result<Self, BlacklistError> {
        let mut raw = Vec::new();
        let mut any_nonzero = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (start, end, name, module) =
                parse_line(line).ok_or_else(|| BlacklistError::Malformed {
                    path: PathBuf::from("<blacklist>"),
                    line: i + 1,
                    text: line.to_string(),
                })?;
            any_nonzero |= start != 0 || end != 0;
            raw.push((start, end, name, module));
        }
        let hidden = !raw.is_empty() && !any_nonzero;
        let mut entries: Vec<BlacklistEntry> = raw
            .into_iter()
            .map(|(start, end, name, module)| BlacklistEntry {
                range: (!hidden).then_some(start..end),
                name: name.to_string(),
                module: module.map(str::to_string),
            })
            .collect();
        entries.sort_by_key(|e| e.range.as_ref().map(|r| r.start));
        let reach = entries
            .iter()
            .scan(0u64, |hi, e| {
                *hi = (*hi).max(e.range.as_ref().map_or(0, |r| r.end));
                Some(*hi)
            })
            .collect();
        Ok(Blacklist {
            entries,
            reach,
            hidden,
        })
    }

    /// True when every address in the file was zero: the kernel hides them
    /// from this reader (not root, or kptr_restrict), so entries are
    /// matched by name only and a duplicate name cannot be told apart.
    pub fn addresses_hidden(&self) -> bool {
        self.hidden
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, sorted by start address when addresses are shown.
    pub fn entries(&self) -> &[BlacklistEntry] {
        &self.entries
    }

    /// The entry whose range holds `address` (never one when addresses
    /// are hidden).
    pub fn containing(&self, address: u64) -> Option<&BlacklistEntry> {
        if self.hidden {
            return None;
        }
        let upto = self
            .entries
            .partition_point(|e| e.range.as_ref().is_some_and(|r| r.start <= address));
        // Walk back while an earlier entry could still reach `address`.
        (0..upto)
            .rev()
            .take_while(|&i| self.reach[i] > address)
            .map(|i| &self.entries[i])
            .find(|e| e.range.as_ref().is_some_and(|r| r.contains(&address)))
    }

    /// The entry listing `name` in `module` (`None`: the core kernel).
    pub fn by_name(&self, name: &str, module: Option<&str>) -> Option<&BlacklistEntry> {
        self.entries
            .iter()
            .find(|e| e.name == name && e.module.as_deref() == module)
    }
}

/// `0xSTART-0xEND\tNAME[ [MODULE]]`.
fn parse_line(line: &str) -> Option<(u64, u64, &str, Option<&str>)> {
    let (range, sym) = line.split_once(['\t', ' '])?;
    let (start, end) = range.split_once('-')?;
    let hex = |s: &str| {
        let s = s.strip_prefix("0x").unwrap_or(s);
        u64::from_str_radix(s, 16).ok()
    };
    let (start, end) = (hex(start)?, hex(end)?);
    let sym = sym.trim();
    let (name, module) = match sym.split_once(char::is_whitespace) {
        Some((name, rest)) => {
            let m = rest.trim().strip_prefix('[')?.strip_suffix(']')?;
            (name, Some(m))
        }
        None => (sym, None),
    };
    (!name.is_empty()).then_some((start, end, name, module))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
0xffffffff81001000-0xffffffff81001040\tfoo
0xffffffff81000000-0xffffffff81002000\tbig_area
0xffffffffc0001000-0xffffffffc0001100\tbar [ext4]
";

    #[test]
    fn parses_ranges_and_modules() {
        let b = Blacklist::parse(TEXT).unwrap();
        assert_eq!(b.len(), 3);
        assert!(!b.addresses_hidden());
        assert_eq!(b.entries()[0].name, "big_area");
        let bar = b.by_name("bar", Some("ext4")).unwrap();
        assert_eq!(bar.range, Some(0xffffffffc0001000..0xffffffffc0001100));
        assert!(b.by_name("bar", None).is_none());
        assert_eq!(
            bar.to_string(),
            "bar [ext4] 0xffffffffc0001000-0xffffffffc0001100"
        );
    }

    #[test]
    fn containing_finds_nested_and_overlapping_ranges() {
        let b = Blacklist::parse(TEXT).unwrap();
        assert_eq!(b.containing(0xffffffff81001010).unwrap().name, "foo");
        // Past foo's end but inside the wider area that starts before it.
        assert_eq!(b.containing(0xffffffff81001800).unwrap().name, "big_area");
        assert!(b.containing(0xffffffff81002000).is_none());
        assert!(b.containing(0xffffffffc0001100).is_none());
        assert!(b.containing(0).is_none());
    }

    #[test]
    fn zero_addresses_mean_hidden_not_ranges_at_zero() {
        let b = Blacklist::parse(
            "0x0000000000000000-0x0000000000000000\tfoo\n0x0000000000000000-0x0000000000000000\tbar [ext4]\n",
        )
        .unwrap();
        assert!(b.addresses_hidden());
        assert!(b.entries().iter().all(|e| e.range.is_none()));
        assert!(b.containing(0).is_none());
        assert!(b.by_name("foo", None).is_some());
    }

    #[test]
    fn malformed_lines_name_their_number() {
        let e = Blacklist::parse("0x1-0x2\tok\nnot a line\n").unwrap_err();
        assert!(
            matches!(e, BlacklistError::Malformed { line: 2, .. }),
            "{e}"
        );
        assert!(Blacklist::parse("0x1-0x2\tok [unclosed\n").is_err());
        assert!(Blacklist::parse("0x1-zz\tok\n").is_err());
    }

    #[test]
    fn clone_bases() {
        assert_eq!(clone_base("foo.isra.0"), Some("foo"));
        assert_eq!(clone_base("foo.constprop.0.isra.0"), Some("foo"));
        assert_eq!(clone_base("foo"), None);
        assert_eq!(clone_base(".foo"), None);
    }
}
