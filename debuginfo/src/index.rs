//! The name index: which compilation units define (or hold an abstract,
//! inlinable definition of) a function, and which unit a source file is.
//!
//! Built once by reading only the top-level entries of every unit (two
//! threads), then kept as one sorted byte table that is also the on-disk
//! cache format, so a cached index is used straight from its mapping.

use crate::dies::Attrs as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::file::{DebugFile, R};
use crate::split;

const MAGIC: &[u8; 8] = b"KPDIDX02";
/// Keys of unit names start with this byte, which no C identifier has.
pub(crate) const FILE_KEY: u8 = b'@';

/// The key listing the units that import the (dwz) partial unit whose
/// root entry is at `partial` (`DW_TAG_imported_unit`): where the copies of the abstract
/// functions dwz moved there are.
pub(crate) fn import_key(partial: gimli::DebugInfoOffset<usize>) -> Vec<u8> {
    format!("{}\u{1}{:x}", FILE_KEY as char, partial.0).into_bytes()
}

/// Where the bytes of an index live.
#[derive(Debug)]
enum Bytes {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

/// A sorted table: names -> unit offsets in `.debug_info`.
#[derive(Debug)]
pub(crate) struct NameIndex {
    bytes: Bytes,
    /// Whether every unit was read: false when a split unit's `.dwo` was
    /// not found, so the index must not be kept for later processes.
    complete: bool,
    units: usize,
    names: usize,
    names_at: usize,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

impl NameIndex {
    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
        }
    }

    /// Checks the table and returns it, or None if it is not a whole index for `key`.
    fn from_bytes(bytes: Bytes, key: &[u8]) -> Option<Self> {
        let b = match &bytes {
            Bytes::Owned(v) => &v[..],
            Bytes::Mapped(m) => &m[..],
        };
        if b.get(..8)? != MAGIC {
            return None;
        }
        let key_len = u32_at(b, 8)? as usize;
        if b.get(12..12usize.checked_add(key_len)?)? != key {
            return None;
        }
        let mut at = 12 + key_len;
        let units = u32_at(b, at)? as usize;
        let names = u32_at(b, at + 4)? as usize;
        at += 8;
        let names_at = at.checked_add(units.checked_mul(8)?)?;
        let end = names_at.checked_add(names.checked_mul(4)?)?;
        if end > b.len() {
            return None;
        }
        Some(NameIndex {
            bytes,
            complete: true,
            units,
            names,
            names_at,
        })
    }

    fn unit_offset(&self, i: u32) -> Option<gimli::DebugInfoOffset<usize>> {
        if i as usize >= self.units {
            return None;
        }
        let at = self.names_at - self.units * 8 + i as usize * 8;
        u64_at(self.bytes(), at).map(|o| gimli::DebugInfoOffset(o as usize))
    }

    /// The name and unit list of entry `i` of the sorted table.
    fn entry(&self, i: usize) -> Option<(&[u8], Vec<gimli::DebugInfoOffset<usize>>)> {
        let b = self.bytes();
        let at = u32_at(b, self.names_at + i * 4)? as usize;
        let len = u32_at(b, at)? as usize;
        let name = b.get(at + 4..(at + 4).checked_add(len)?)?;
        let count = u32_at(b, at + 4 + len)? as usize;
        let list = (0..count)
            .filter_map(|k| u32_at(b, at + 8 + len + 4 * k).and_then(|u| self.unit_offset(u)))
            .collect();
        Some((name, list))
    }

    fn name_at(&self, i: usize) -> &[u8] {
        self.entry_name(i).unwrap_or_default()
    }

    fn entry_name(&self, i: usize) -> Option<&[u8]> {
        let b = self.bytes();
        let at = u32_at(b, self.names_at + i * 4)? as usize;
        let len = u32_at(b, at)? as usize;
        b.get(at + 4..(at + 4).checked_add(len)?)
    }

    /// The units that define `name` (a function, or `@path` for a unit).
    pub(crate) fn lookup(&self, name: &[u8]) -> Vec<gimli::DebugInfoOffset<usize>> {
        let i = partition(self.names, |i| self.name_at(i) < name);
        match self.entry(i) {
            Some((n, list)) if n == name => list,
            _ => Vec::new(),
        }
    }

    /// Every key, in order, with its units (for `@` file keys and globs).
    pub(crate) fn entries(
        &self,
    ) -> impl Iterator<Item = (&[u8], Vec<gimli::DebugInfoOffset<usize>>)> + '_ {
        (0..self.names).filter_map(|i| self.entry(i))
    }

    /// Whether every unit was read (see the field): only then is it cached.
    pub(crate) fn complete(&self) -> bool {
        self.complete
    }

    /// The number of names in the index.
    pub(crate) fn len(&self) -> usize {
        self.names
    }
}

fn partition(n: usize, mut pred: impl FnMut(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A key of the index as read, borrowed from the file where it can be:
/// a function's name, a unit's name (stored behind [`FILE_KEY`]), or a
/// made key (a dwz import).
#[derive(Debug, Clone)]
enum Key<'a> {
    Name(&'a [u8]),
    File(&'a [u8]),
    Made(Vec<u8>),
}

impl Key<'_> {
    /// The bytes after the first, and the first, of a key.
    fn split(&self) -> (Option<u8>, &[u8]) {
        match self {
            Key::Name(n) => (n.first().copied(), n.get(1..).unwrap_or_default()),
            Key::File(n) => (Some(FILE_KEY), n),
            Key::Made(n) => (n.first().copied(), n.get(1..).unwrap_or_default()),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        if let Key::File(_) = self {
            out.push(FILE_KEY);
        }
        match self {
            Key::Name(n) | Key::File(n) => out.extend_from_slice(n),
            Key::Made(n) => out.extend_from_slice(n),
        }
    }

    /// Whether the key's bytes are `bytes`.
    fn is(&self, bytes: &[u8]) -> bool {
        match self {
            Key::Name(n) => *n == bytes,
            Key::Made(n) => n[..] == *bytes,
            Key::File(n) => bytes.first() == Some(&FILE_KEY) && bytes.get(1..) == Some(*n),
        }
    }

    fn len(&self) -> usize {
        match self {
            Key::Name(n) => n.len(),
            Key::File(n) => n.len() + 1,
            Key::Made(n) => n.len(),
        }
    }
}

impl Ord for Key<'_> {
    /// The order of the keys' bytes, as the table is sorted.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Key::Name(a), Key::Name(b)) | (Key::File(a), Key::File(b)) => a.cmp(b),
            _ => self.split().cmp(&other.split()),
        }
    }
}

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Key<'_> {}

impl PartialOrd for Key<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A key and the number of a unit it names.
type KeyAndUnit<'a> = (Key<'a>, u32);

/// Reads the top-level entries of every unit and returns the index.
pub(crate) fn build<'a>(
    file: &'a DebugFile,
    dwarf: &gimli::Dwarf<R<'a>>,
    key: &[u8],
) -> Result<NameIndex> {
    let path = file.path();
    let dwarf_err = |context: String, reason| Error::Dwarf {
        path: path.to_path_buf(),
        context,
        reason,
    };
    let mut headers = Vec::new();
    let mut iter = dwarf.units();
    while let Some(h) = iter
        .next()
        .map_err(|e| dwarf_err("unit headers".into(), e))?
    {
        headers.push(h);
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 2);
    let missing_split = std::sync::atomic::AtomicBool::new(false);
    let parts: Vec<Result<Vec<KeyAndUnit<'a>>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let headers = &headers;
                let dwarf_err = &dwarf_err;
                let missing_split = &missing_split;
                s.spawn(move || {
                    let mut out = Vec::new();
                    for (i, h) in headers.iter().enumerate().skip(t).step_by(threads) {
                        let unit = dwarf
                            .unit(*h)
                            .map_err(|e| dwarf_err(format!("unit {i}"), e))?;
                        // A skeleton's names are in its split unit.
                        let named = match split::split_unit(file, dwarf, &unit) {
                            Ok(Some((dwo, split))) => {
                                top_level_names(&dwo, &split, i as u32, &mut out)
                            }
                            _ => {
                                if unit.dwo_id.is_some() {
                                    missing_split.store(true, std::sync::atomic::Ordering::Relaxed);
                                }
                                top_level_names(dwarf, &unit, i as u32, &mut out)
                            }
                        };
                        named.map_err(|e| dwarf_err(format!("unit {i}"), e))?;
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            // A reader thread that panicked leaves the index incomplete:
            // fail rather than cache a partial one.
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(dwarf_err(
                        "a thread reading the units (it panicked)".into(),
                        gimli::Error::Io,
                    ))
                })
            })
            .collect()
    });
    let mut all = Vec::new();
    for p in parts {
        all.extend(p?);
    }
    all.sort_unstable();
    all.dedup();
    let offsets: Vec<u64> = headers
        .iter()
        .map(|h| h.offset().as_debug_info_offset().map_or(0, |o| o.0 as u64))
        .collect();
    let bytes = serialize(key, &offsets, &all);
    let mut index =
        NameIndex::from_bytes(Bytes::Owned(bytes), key).ok_or_else(|| Error::Dwarf {
            path: path.to_path_buf(),
            context: "the name index".into(),
            reason: gimli::Error::OffsetOutOfBounds,
        })?;
    index.complete = !missing_split.load(std::sync::atomic::Ordering::Relaxed);
    Ok(index)
}

fn top_level_names<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    unit: &gimli::Unit<R<'a>>,
    idx: u32,
    out: &mut Vec<KeyAndUnit<'a>>,
) -> gimli::Result<()> {
    let mut tree = unit.entries_tree(None)?;
    let root = tree.root()?;
    if let Some(name) = root.entry().val(gimli::DW_AT_name) {
        let name = dwarf.attr_string(unit, name)?;
        out.push((Key::File(name.slice()), idx));
    }
    let mut children = root.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        // The tag first: most top-level entries are types and variables,
        // whose attributes need not be read.
        match e.tag() {
            gimli::DW_TAG_imported_unit => {
                if let Some(gimli::AttributeValue::DebugInfoRef(o)) = e.val(gimli::DW_AT_import) {
                    out.push((Key::Made(import_key(o)), idx));
                }
            }
            gimli::DW_TAG_subprogram => {
                if let Some(name) = definition_name(dwarf, unit, e)? {
                    out.push((Key::Name(name), idx));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the top-level entries of `unit` give it `key` in the index.
pub(crate) fn names_key<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    unit: &gimli::Unit<R<'a>>,
    key: &[u8],
) -> gimli::Result<bool> {
    let mut out = Vec::new();
    top_level_names(dwarf, unit, 0, &mut out)?;
    Ok(out.iter().any(|(k, _)| k.is(key)))
}

/// The name of subprogram `e` when it is a definition (not a declaration),
/// from one pass over its attributes (a name of its own, else through its
/// abstract origin or specification, as `dies::name_of`).
fn definition_name<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    unit: &gimli::Unit<R<'a>>,
    e: &crate::dies::Entry<'a, '_>,
) -> gimli::Result<Option<&'a [u8]>> {
    let mut name = None;
    let mut attrs = e.attrs();
    loop {
        match attrs.next() {
            Ok(Some(a)) if a.name() == gimli::DW_AT_declaration => return Ok(None),
            Ok(Some(a)) if a.name() == gimli::DW_AT_name && name.is_none() => {
                name = Some(a.value());
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            // An attribute that does not parse: the readers that look
            // attributes up one by one decide, as the queries do.
            Err(_) => {
                if e.has(gimli::DW_AT_declaration) {
                    return Ok(None);
                }
                return crate::dies::name_of(dwarf, unit, e);
            }
        }
    }
    match name {
        Some(v) => Ok(Some(dwarf.attr_string(unit, v)?.slice())),
        None => crate::dies::name_of(dwarf, unit, e),
    }
}

fn serialize(key: &[u8], offsets: &[u64], all: &[KeyAndUnit<'_>]) -> Vec<u8> {
    let mut groups: Vec<(&Key<'_>, Vec<u32>)> = Vec::new();
    for (name, unit) in all {
        match groups.last_mut() {
            Some((n, units)) if *n == name => units.push(*unit),
            _ => groups.push((name, vec![*unit])),
        }
    }
    let mut b = Vec::with_capacity(64 + offsets.len() * 8 + all.len() * 32);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&(key.len() as u32).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(&(offsets.len() as u32).to_le_bytes());
    b.extend_from_slice(&(groups.len() as u32).to_le_bytes());
    for o in offsets {
        b.extend_from_slice(&o.to_le_bytes());
    }
    let table_at = b.len();
    b.resize(table_at + groups.len() * 4, 0);
    for (i, (name, units)) in groups.iter().enumerate() {
        let at = b.len() as u32;
        b[table_at + i * 4..table_at + i * 4 + 4].copy_from_slice(&at.to_le_bytes());
        b.extend_from_slice(&(name.len() as u32).to_le_bytes());
        name.write(&mut b);
        b.extend_from_slice(&(units.len() as u32).to_le_bytes());
        for u in units {
            b.extend_from_slice(&u.to_le_bytes());
        }
    }
    b
}

/// The directory for cached indexes: `$KPROBE_PERF_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/kprobe-perf/debuginfo`, else `~/.cache/kprobe-perf/debuginfo`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("KPROBE_PERF_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("kprobe-perf").join("debuginfo"))
}

/// Loads the cached index for `key` from `dir`, if one is there and whole.
pub(crate) fn load_cached(dir: &Path, key: &[u8], name: &str) -> Option<NameIndex> {
    let file = std::fs::File::open(dir.join(name)).ok()?;
    // SAFETY: read-only private map of a cache file this crate writes by
    // rename (never in place); its contents are checked before use and
    // every read is bounds-checked.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    NameIndex::from_bytes(Bytes::Mapped(map), key)
}

/// Writes `index` to `dir` (by a temporary file and a rename).
pub(crate) fn store(dir: &Path, name: &str, index: &NameIndex) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, index.bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| Error::Cache { path, source })
}
