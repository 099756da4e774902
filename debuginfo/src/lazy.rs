//! The units that define one name, found without the name index: the
//! first question on a file never indexed reads only the units that can
//! hold the name, instead of the top-level entries of every unit.
//!
//! A unit whose top-level entry is named `NAME` holds the name's bytes or
//! a reference to them: `DW_FORM_string` (`NAME\0` in the unit itself),
//! `DW_FORM_strp`/`DW_FORM_line_strp` (the 4-byte offset, or the low 4
//! bytes of an 8-byte one, of a place of `.debug_str`/`.debug_line_str`
//! where `NAME\0` is, a suffix of a longer string included, as linkers
//! merge tails). Searching `.debug_info` for those bytes gives every such
//! unit (and a few more by chance); reading the top-level entries of
//! those alone, as the index does, gives the same units as the index.
//!
//! Files where names can be elsewhere are left to the index: string
//! offsets tables (`DW_FORM_strx`), split units (the names are in the
//! `.dwo`), a supplementary (dwz) file, relocatable files (the offsets
//! are in relocations), big-endian ones.

use gimli::{Reader as _, Section as _};
use memchr::memmem;

use crate::file::{DebugFile, R};
use crate::index::{self, FILE_KEY};

/// More places to look than this: the index is as quick.
const MOST_NEEDLES: usize = 24;
/// More candidate units than this: the index is as quick.
const MOST_UNITS: usize = 256;

/// The units of a file, for finding those that hold a name.
pub(crate) struct Finder<'a> {
    info: &'a [u8],
    strings: [&'a [u8]; 2],
    headers: Vec<gimli::UnitHeader<R<'a>>>,
    /// Where each unit of `headers` starts in `.debug_info`.
    starts: Vec<usize>,
    /// Whether an abbreviation may be of `DW_TAG_imported_unit` (its tag
    /// byte, 0x3d, before a children byte): if not, no unit imports another.
    imports: bool,
}

impl<'a> Finder<'a> {
    /// A finder for `dwarf` of `file`, or None when only the index can
    /// say where a name is (see the module's comment).
    pub(crate) fn new(file: &'a DebugFile, dwarf: &gimli::Dwarf<R<'a>>) -> Option<Self> {
        let info = dwarf.debug_info.reader();
        let split_or_indexed =
            !dwarf.debug_str_offsets.reader().is_empty() || !dwarf.debug_addr.reader().is_empty();
        if file.is_relocatable()
            || dwarf.sup().is_some()
            || split_or_indexed
            || !gimli::Endianity::is_little_endian(info.endian())
        {
            return None;
        }
        let mut headers = Vec::new();
        let mut starts = Vec::new();
        let mut units = dwarf.units();
        while let Some(h) = units.next().ok()? {
            match h.type_() {
                gimli::UnitType::Compilation | gimli::UnitType::Partial => {}
                // Type units hold no top-level functions; split ones are
                // read through the index.
                gimli::UnitType::Type { .. } => {}
                _ => return None,
            }
            starts.push(h.offset().as_debug_info_offset()?.0);
            headers.push(h);
        }
        let abbrev = dwarf.debug_abbrev.reader().slice();
        let imports = [b"\x3d\x00", b"\x3d\x01"]
            .iter()
            .any(|pair| memmem::find(abbrev, &pair[..]).is_some());
        Some(Finder {
            imports,
            info: info.slice(),
            strings: [
                dwarf.debug_str.reader().slice(),
                dwarf.debug_line_str.reader().slice(),
            ],
            headers,
            starts,
        })
    }

    /// The units (in file order) that the index would list for `key`, or
    /// None when the index is needed: a unit's name (looked up by its
    /// tail), or a name found in too many places.
    pub(crate) fn lookup(
        &self,
        dwarf: &gimli::Dwarf<R<'a>>,
        key: &[u8],
    ) -> Option<gimli::Result<Vec<gimli::DebugInfoOffset<usize>>>> {
        if key.starts_with(&[FILE_KEY, 1]) && !self.imports {
            return Some(Ok(Vec::new()));
        }
        let needles = self.needles(key)?;
        let mut candidates = Vec::new();
        for needle in &needles {
            for at in memmem::find_iter(self.info, needle) {
                let i = self.starts.partition_point(|&s| s <= at).checked_sub(1)?;
                candidates.push(i);
            }
            candidates.sort_unstable();
            candidates.dedup();
            if candidates.len() > MOST_UNITS {
                return None;
            }
        }
        Some(self.defining(dwarf, key, &candidates))
    }

    /// The bytes whose presence in a unit it takes for the unit to name `key`.
    fn needles(&self, key: &[u8]) -> Option<Vec<Vec<u8>>> {
        if key.first() == Some(&FILE_KEY) {
            // An import of a partial unit: DW_AT_import's offset.
            let hex = std::str::from_utf8(key.strip_prefix(&[FILE_KEY, 1][..])?).ok()?;
            let offset = u32::try_from(usize::from_str_radix(hex, 16).ok()?).ok()?;
            return Some(vec![offset.to_le_bytes().to_vec()]);
        }
        if key.is_empty() {
            return None;
        }
        let mut name = key.to_vec();
        name.push(0);
        let mut needles = Vec::new();
        for strings in self.strings {
            for at in memmem::find_iter(strings, &name) {
                needles.push(u32::try_from(at).ok()?.to_le_bytes().to_vec());
                if needles.len() > MOST_NEEDLES {
                    return None;
                }
            }
        }
        needles.push(name);
        Some(needles)
    }

    /// The units of `candidates` (indexes into `headers`) that the index
    /// lists for `key`: read as the index reads them.
    fn defining(
        &self,
        dwarf: &gimli::Dwarf<R<'a>>,
        key: &[u8],
        candidates: &[usize],
    ) -> gimli::Result<Vec<gimli::DebugInfoOffset<usize>>> {
        let mut out = Vec::new();
        for &i in candidates {
            let (Some(header), Some(&start)) = (self.headers.get(i), self.starts.get(i)) else {
                continue;
            };
            let unit = dwarf.unit(*header)?;
            if index::names_key(dwarf, &unit, key)? {
                out.push(gimli::DebugInfoOffset(start));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::Finder;
    use crate::{DebugFile, DebugInfo};
    use std::path::{Path, PathBuf};

    /// Every `step`th key of the index, looked up without it, gives the
    /// index's units (or asks for the index: a unit's name, or a name in
    /// too many places).
    fn same_units_as_the_index(path: &Path, step: usize) -> usize {
        let file = DebugFile::open(path).expect("open");
        let di = DebugInfo::with_cache(&file, None).expect("dwarf");
        let finder = Finder::new(&file, &di.dwarf).expect("a file the finder reads");
        let index = di.names().expect("index");
        let mut found = 0;
        for (key, units) in index.entries().step_by(step) {
            if let Some(lazy) = finder.lookup(&di.dwarf, key) {
                let lazy = lazy.expect("lookup");
                assert_eq!(lazy, units, "{}", String::from_utf8_lossy(key));
                found += 1;
            }
        }
        found
    }

    const MAIN: &str = "#include \"h.h\"\nint other(int);\nint do_open(int a) { return twice(a) + 1; }\n\
        int open(int a) { return do_open(a) * 3; }\nint main(int c, char **v) { return open(c) + other(c) + v[0][0]; }\n";
    const OTHER: &str = "#include \"h.h\"\nstatic int __attribute__((noinline)) do_open(int a) { return twice(a) - a; }\n\
        int other(int a) { return do_open(a) + twice(a); }\n";
    const HEADER: &str = "static inline int twice(int a) { return a * 2; }\n";

    /// Two units built by gcc, sharing an inline function and a static
    /// name, with names that are tails of others; None without gcc.
    fn compile() -> Option<PathBuf> {
        let dir = std::env::temp_dir().join(format!("kprobe-perf-lazy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        for (name, text) in [("main.c", MAIN), ("other.c", OTHER), ("h.h", HEADER)] {
            std::fs::write(dir.join(name), text).ok()?;
        }
        let bin = dir.join("prog");
        let ok = std::process::Command::new("gcc")
            .args(["-g", "-O2", "-o"])
            .arg(&bin)
            .arg(dir.join("main.c"))
            .arg(dir.join("other.c"))
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(bin)
    }

    #[test]
    fn units_found_without_the_index_are_the_index_units() {
        let Some(bin) = compile() else {
            println!("SKIP: gcc did not build the two-unit program");
            return;
        };
        assert!(same_units_as_the_index(&bin, 1) >= 4);
        let _ = std::fs::remove_dir_all(bin.parent().unwrap_or(&bin));
    }

    /// The same over every 40th key of libc6-dbg's debug file, when it is
    /// installed (the package the issue names).
    #[test]
    fn libc_debug_file_units_found_without_the_index() {
        let Some(path) = std::fs::read_dir("/usr/lib/debug/.build-id")
            .ok()
            .and_then(|_| libc_debug())
        else {
            println!("SKIP: libc6-dbg is not installed");
            return;
        };
        assert!(same_units_as_the_index(&path, 40) > 50);
    }

    fn libc_debug() -> Option<PathBuf> {
        let libc = DebugFile::open("/lib/x86_64-linux-gnu/libc.so.6").ok()?;
        let id = libc.build_id().ok()??;
        let hex = crate::file::hex(&id);
        let path = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            hex.get(..2)?,
            hex.get(2..)?
        ));
        path.exists().then_some(path)
    }
}
