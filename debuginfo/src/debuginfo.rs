//! [`DebugInfo`]: the DWARF of one file, read lazily, and the queries on it.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use object::Object as _;

use crate::dies::{Dwarf, Unit};
use crate::error::{Error, Result};
use crate::file::{self, DebugFile, SymbolTable, R};
use crate::index::{self, NameIndex};
use crate::lazy::Finder;
use crate::split;

/// Options of a query.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Also probe the inlined copies of a function (perf's default); off
    /// gives only out-of-line bodies (perf's `--no-inlines`).
    pub inlines: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { inlines: true }
    }
}

/// The DWARF of one file. Opening reads the ELF symbol table and the name
/// index (from the cache when there is one); each query then parses only
/// the compilation units that define the function asked about.
pub struct DebugInfo<'a> {
    pub(crate) file: &'a DebugFile,
    pub(crate) dwarf: Dwarf<'a>,
    frame: file::Frames<'a>,
    fdes: OnceCell<Vec<(u64, u64, usize)>>,
    pub(crate) symbols: SymbolTable<'a>,
    /// The name index, from the cache or built when a question needs
    /// every unit's names (a source file's lines, a listing).
    index: OnceCell<NameIndex>,
    /// Finds the units defining one name without the index, while it is
    /// not there (see lazy.rs); None when the file needs the index.
    finder: Option<Finder<'a>>,
    /// The units found for each key without the index.
    found: RefCell<HashMap<Vec<u8>, Vec<gimli::DebugInfoOffset<usize>>>>,
    /// Where a built index is kept: the cache directory and file name,
    /// with the key it is checked against.
    cache: Option<(std::path::PathBuf, String, Vec<u8>)>,
    units: RefCell<HashMap<usize, Rc<Unit<'a>>>>,
    /// Parsed units of the supplementary (dwz) file, by offset.
    sup_units: RefCell<HashMap<usize, Rc<Unit<'a>>>>,
    /// Where each unit starts in `.debug_info`, of this file and of the
    /// supplementary one: made when a reference crosses units.
    unit_starts: [OnceCell<Vec<usize>>; 2],
    pub(crate) rows_cache: RefCell<HashMap<usize, Rc<Vec<crate::dies::Row>>>>,
    pub(crate) funcs_cache: RefCell<HashMap<usize, Rc<Vec<crate::dies::FuncDie>>>>,
    /// Where source files are looked for (perf probe's `-s`), for lazy
    /// patterns; `None`: the compilation directory.
    pub(crate) source_dir: Option<std::path::PathBuf>,
}

/// An entry anywhere in the DWARF: its unit (of this file, or of the
/// supplementary file when `sup`) and its offset there.
#[derive(Clone)]
pub(crate) struct At<'a> {
    pub(crate) unit: Rc<Unit<'a>>,
    pub(crate) sup: bool,
    pub(crate) off: gimli::UnitOffset,
}

impl std::fmt::Debug for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "At({:?}, sup {}, {:?})",
            self.unit.header.offset(),
            self.sup,
            self.off
        )
    }
}

/// How many parsed units (and their line tables and function lists) are
/// kept: enough for the units of one question and its neighbours, few
/// enough to keep the memory flat over thousands of questions.
const KEPT_UNITS: usize = 32;

/// Inserts into a per-unit cache, emptying it first when it is full.
pub(crate) fn bounded_insert<T>(cache: &RefCell<HashMap<usize, T>>, key: usize, value: T) {
    let mut c = cache.borrow_mut();
    if c.len() >= KEPT_UNITS {
        c.clear();
    }
    c.insert(key, value);
}

impl std::fmt::Debug for DebugInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugInfo")
            .field("path", &self.file.path())
            .field("names", &self.index.get().map(NameIndex::len))
            .finish_non_exhaustive()
    }
}

impl<'a> DebugInfo<'a> {
    /// Reads the DWARF of `file`, using (and writing) the index cache in
    /// [`cache_dir`](crate::index::cache_dir) when the file has a build ID.
    pub fn new(file: &'a DebugFile) -> Result<Self> {
        Self::with_cache(file, index::cache_dir().as_deref())
    }

    /// As [`new`](Self::new), with the index cache in `cache` (None: no cache).
    pub fn with_cache(file: &'a DebugFile, cache: Option<&std::path::Path>) -> Result<Self> {
        let obj = file.object()?;
        if !file.has_dwarf() {
            return Err(Error::NoDwarf {
                path: file.path().to_path_buf(),
            });
        }
        let (dwarf, frame) = file::load_dwarf(file, &obj)?;
        let symbols = SymbolTable::new(&obj, file.relocated()?);
        let size = file.bytes().len() as u64;
        let mut key = obj
            .build_id()
            .ok()
            .flatten()
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let cacheable = !key.is_empty();
        key.extend_from_slice(&size.to_le_bytes());
        let cache_name = format!("{}.idx", file::hex(&key));
        let cached = cache
            .filter(|_| cacheable)
            .and_then(|d| index::load_cached(d, &key, &cache_name));
        // Without a cached index, questions about one function read only
        // the units that can define it; the index is built (and cached)
        // when a question needs every unit's names.
        let finder = match cached {
            Some(_) => None,
            None => Finder::new(file, &dwarf),
        };
        let index = OnceCell::new();
        if let Some(i) = cached {
            let _ = index.set(i);
        }
        let cache = cache
            .filter(|_| cacheable)
            .map(|d| (d.to_path_buf(), cache_name, key));
        Ok(DebugInfo {
            file,
            dwarf,
            frame,
            fdes: OnceCell::new(),
            symbols,
            index,
            finder,
            found: RefCell::new(HashMap::new()),
            cache,
            units: RefCell::new(HashMap::new()),
            sup_units: RefCell::new(HashMap::new()),
            unit_starts: [OnceCell::new(), OnceCell::new()],
            rows_cache: RefCell::new(HashMap::new()),
            funcs_cache: RefCell::new(HashMap::new()),
            source_dir: None,
        })
    }

    /// Takes the call frame information (which a frame base that is the
    /// CFA needs) from `binary` when this file has none: a separate debug
    /// file found for a user binary keeps `.eh_frame` without its bytes,
    /// which are in the binary. A no-op otherwise.
    pub fn with_call_frames_of(mut self, binary: &'a DebugFile) -> Result<Self> {
        if self.frame.is_empty() {
            let obj = binary.object()?;
            self.frame = file::load_frames(binary, &obj, file::endian(&obj))?;
            self.fdes = OnceCell::new();
        }
        Ok(self)
    }

    /// Looks source files up under `dir` (perf probe's `-s DIR`), for the
    /// patterns of `FUNC;PATTERN`, instead of the compilation directory
    /// DWARF names: a file `a/b/c.c` is `DIR/a/b/c.c`, else `DIR/b/c.c`,
    /// else `DIR/c.c`.
    pub fn with_source_dir(mut self, dir: Option<&std::path::Path>) -> Self {
        self.source_dir = dir.map(std::path::Path::to_path_buf);
        self
    }

    /// The names of the functions with a definition (out-of-line or
    /// inlinable) in the debug info, in byte order.
    pub fn functions(&self) -> Result<impl Iterator<Item = &str> + '_> {
        Ok(self
            .names()?
            .entries()
            .filter(|(k, _)| k.first() != Some(&index::FILE_KEY))
            .filter_map(|(k, _)| std::str::from_utf8(k).ok()))
    }

    /// The name index, built (and cached, when the file has a build ID)
    /// the first time a question needs it.
    pub(crate) fn names(&self) -> Result<&NameIndex> {
        if let Some(i) = self.index.get() {
            return Ok(i);
        }
        let key = self.cache.as_ref().map_or(&[][..], |c| &c.2[..]);
        let built = index::build(self.file, &self.dwarf, key)?;
        // An index missing a split unit (its .dwo not found) is not
        // kept: the next process may find the file.
        if let Some((dir, name, _)) = self.cache.as_ref().filter(|_| built.complete()) {
            // A cache that cannot be written costs time, not answers.
            let _ = index::store(dir, name, &built);
        }
        Ok(self.index.get_or_init(|| built))
    }

    /// The units the index lists for `key` (a function's name, or a
    /// `@` key): from the index when it is there, else found without it
    /// when the file allows.
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<Vec<gimli::DebugInfoOffset<usize>>> {
        if let Some(i) = self.index.get() {
            return Ok(i.lookup(key));
        }
        if let Some(units) = self.found.borrow().get(key) {
            return Ok(units.clone());
        }
        let found = self
            .finder
            .as_ref()
            .and_then(|f| f.lookup(&self.dwarf, key));
        match found {
            Some(units) => {
                let units =
                    units.map_err(|e| self.dwarf_error("the units naming a function".into(), e))?;
                self.found.borrow_mut().insert(key.to_vec(), units.clone());
                Ok(units)
            }
            None => Ok(self.names()?.lookup(key)),
        }
    }

    /// The unit at `offset`, parsed once and kept.
    pub(crate) fn unit(&self, offset: gimli::DebugInfoOffset<usize>) -> Result<Rc<Unit<'a>>> {
        if let Some(u) = self.units.borrow().get(&offset.0) {
            return Ok(u.clone());
        }
        let err =
            |reason| self.dwarf_error(format!("the unit at .debug_info+0x{:x}", offset.0), reason);
        let header = self
            .dwarf
            .debug_info
            .header_from_offset(offset)
            .map_err(err)?;
        let unit = self.dwarf.unit(header).map_err(err)?;
        // A skeleton (split DWARF) stands for the unit in its .dwo.
        let unit = match split::split_unit(self.file, &self.dwarf, &unit)? {
            Some((dwo, split)) => Unit {
                unit: split,
                split: Some(dwo),
            },
            None => Unit { unit, split: None },
        };
        let unit = Rc::new(unit);
        bounded_insert(&self.units, offset.0, unit.clone());
        Ok(unit)
    }

    /// The DWARF `unit` is read with: the file's, or a split unit's `.dwo`.
    pub(crate) fn dw<'s>(&'s self, unit: &'s Unit<'a>) -> &'s Dwarf<'a> {
        unit.split.as_ref().unwrap_or(&self.dwarf)
    }

    /// The DWARF the entry at `at` is read with.
    pub(crate) fn dwarf_at<'s>(&'s self, at: &'s At<'a>) -> &'s Dwarf<'a> {
        if at.sup {
            return self.dwarf_for(true);
        }
        self.dw(&at.unit)
    }

    /// The DWARF an entry is read with: this file's, or (`sup`) the
    /// supplementary file's.
    pub(crate) fn dwarf_for(&self, sup: bool) -> &Dwarf<'a> {
        match (sup, self.dwarf.sup()) {
            (true, Some(s)) => s,
            _ => &self.dwarf,
        }
    }

    /// The entry a reference attribute value points at: in the same unit,
    /// another unit of the same file (`DW_FORM_ref_addr`, as dwz makes
    /// to its partial units), or the supplementary file
    /// (`DW_FORM_GNU_ref_alt`, `DW_FORM_ref_sup4/8`).
    pub(crate) fn follow(&self, from: &At<'a>, v: gimli::AttributeValue<R<'a>>) -> Option<At<'a>> {
        match v {
            gimli::AttributeValue::UnitRef(off) => Some(At {
                unit: from.unit.clone(),
                sup: from.sup,
                off,
            }),
            gimli::AttributeValue::DebugInfoRef(o) => self.at_offset(from.sup, o),
            gimli::AttributeValue::DebugInfoRefSup(o) => self.at_offset(true, o),
            _ => None,
        }
    }

    /// The entry at `off` of `unit`, a unit of this file.
    pub(crate) fn at(&self, unit: &Rc<Unit<'a>>, off: gimli::UnitOffset) -> At<'a> {
        At {
            unit: unit.clone(),
            sup: false,
            off,
        }
    }

    /// The name of the entry at `at`, following its abstract origin or
    /// specification (two levels, into other units or the supplementary
    /// file as dwz leaves them).
    pub(crate) fn name_at(&self, at: &At<'a>) -> Option<&'a [u8]> {
        let mut at = at.clone();
        for _ in 0..3 {
            let e = at.unit.entry(at.off).ok()?;
            let val = |a| e.attr_value(a).ok().flatten();
            if let Some(v) = val(gimli::DW_AT_name) {
                let name = self.dwarf_at(&at).attr_string(&at.unit, v).ok()?;
                return Some(name.slice());
            }
            let next =
                val(gimli::DW_AT_abstract_origin).or_else(|| val(gimli::DW_AT_specification))?;
            at = self.follow(&at, next)?;
        }
        None
    }

    /// The entry at `.debug_info` offset `o` of this file or (`sup`) the
    /// supplementary one.
    fn at_offset(&self, sup: bool, o: gimli::DebugInfoOffset<usize>) -> Option<At<'a>> {
        let starts = self.unit_starts[usize::from(sup)].get_or_init(|| {
            let mut out = Vec::new();
            let mut headers = self.dwarf_for(sup).units();
            while let Ok(Some(h)) = headers.next() {
                if let Some(o) = h.offset().as_debug_info_offset() {
                    out.push(o.0);
                }
            }
            out
        });
        let i = starts.partition_point(|&s| s <= o.0).checked_sub(1)?;
        let unit = self
            .unit_in(sup, gimli::DebugInfoOffset(*starts.get(i)?))
            .ok()?;
        let off = o.to_unit_offset(&unit.header)?;
        Some(At { unit, sup, off })
    }

    /// The unit at `offset` of this file or (`sup`) the supplementary one.
    pub(crate) fn unit_in(
        &self,
        sup: bool,
        offset: gimli::DebugInfoOffset<usize>,
    ) -> Result<Rc<Unit<'a>>> {
        if !sup {
            return self.unit(offset);
        }
        if let Some(u) = self.sup_units.borrow().get(&offset.0) {
            return Ok(u.clone());
        }
        let dwarf = self.dwarf_for(true);
        let err = |reason| {
            self.dwarf_error(
                format!(
                    "the supplementary file's unit at .debug_info+0x{:x}",
                    offset.0
                ),
                reason,
            )
        };
        let header = dwarf.debug_info.header_from_offset(offset).map_err(err)?;
        let unit = Rc::new(Unit {
            unit: dwarf.unit(header).map_err(err)?,
            split: None,
        });
        bounded_insert(&self.sup_units, offset.0, unit.clone());
        Ok(unit)
    }

    pub(crate) fn dwarf_error(&self, context: String, reason: gimli::Error) -> Error {
        Error::Dwarf {
            path: self.file.path().to_path_buf(),
            context,
            reason,
        }
    }

    /// SYMBOL+OFFSET for an address.
    pub(crate) fn sym_off(&self, address: u64) -> String {
        file::sym_off(&self.symbols, address)
    }

    /// The canonical frame address rule at `pc`: (DWARF register, offset).
    pub(crate) fn cfa(&self, pc: u64) -> Option<(u16, i64)> {
        let fdes = self.fdes.get_or_init(|| match &self.frame {
            file::Frames::Debug(f) => fde_table(f, &gimli::BaseAddresses::default()),
            file::Frames::Eh(f, bases) => fde_table(f, bases),
        });
        let i = fdes.partition_point(|f| f.0 <= pc).checked_sub(1)?;
        let (start, end, off) = *fdes.get(i)?;
        if !(start <= pc && pc < end) {
            return None;
        }
        match &self.frame {
            file::Frames::Debug(f) => cfa_at(f, &gimli::BaseAddresses::default(), off, pc),
            file::Frames::Eh(f, bases) => cfa_at(f, bases, off, pc),
        }
    }
}

/// The CFA rule at `pc` from the FDE at `off` of `section`.
fn cfa_at<'a, S: gimli::UnwindSection<R<'a>>>(
    section: &S,
    bases: &gimli::BaseAddresses,
    off: usize,
    pc: u64,
) -> Option<(u16, i64)>
where
    S::Offset: gimli::UnwindOffset<usize>,
{
    let fde = section
        .fde_from_offset(bases, off.into(), S::cie_from_offset)
        .ok()?;
    let mut ctx = gimli::UnwindContext::new();
    let row = fde
        .unwind_info_for_address(section, bases, &mut ctx, pc)
        .ok()?;
    match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, offset } => Some((register.0, *offset)),
        gimli::CfaRule::Expression(_) => None,
    }
}

/// Every FDE of `section`: (start, end, offset), sorted by start.
fn fde_table<'a, S: gimli::UnwindSection<R<'a>>>(
    section: &S,
    bases: &gimli::BaseAddresses,
) -> Vec<(u64, u64, usize)>
where
    S::Offset: gimli::UnwindOffset<usize>,
{
    let mut out = Vec::new();
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(S::cie_from_offset) {
                let start = fde.initial_address();
                out.push((start, start.saturating_add(fde.len()), fde.offset()));
            }
        }
    }
    out.sort_unstable_by_key(|f| f.0);
    out
}
