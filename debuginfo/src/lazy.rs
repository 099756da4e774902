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
