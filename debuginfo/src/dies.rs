//! Small readers over DWARF entries: names through abstract origins,
//! address ranges, entry PCs, declaration and call lines.

use crate::file::R;

pub(crate) type Entry<'a, 'u> = gimli::DebuggingInformationEntry<'u, 'u, R<'a>>;
pub(crate) type Dwarf<'a> = gimli::Dwarf<R<'a>>;
/// A unit as gimli reads it.
pub(crate) type GUnit<'a> = gimli::Unit<R<'a>>;

/// A unit of the file, with the DWARF it is read with when that is not
/// the file's own: a split unit's `.dwo` (see `split.rs`).
pub(crate) struct Unit<'a> {
    pub(crate) unit: GUnit<'a>,
    pub(crate) split: Option<Dwarf<'a>>,
}

impl<'a> std::ops::Deref for Unit<'a> {
    type Target = GUnit<'a>;

    fn deref(&self) -> &GUnit<'a> {
        &self.unit
    }
}

/// The entry that `attr` (abstract_origin or specification) of `e` points to, in the same unit.
pub(crate) fn origin_offset(e: &Entry<'_, '_>) -> Option<gimli::UnitOffset> {
    for at in [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification] {
        if let Some(gimli::AttributeValue::UnitRef(o)) = e.val(at) {
            return Some(o);
        }
    }
    None
}

/// The name of `e`, following abstract_origin/specification (two levels).
pub(crate) fn name_of<'a>(
    dwarf: &Dwarf<'a>,
    unit: &GUnit<'a>,
    e: &Entry<'a, '_>,
) -> gimli::Result<Option<&'a [u8]>> {
    if let Some(v) = e.val(gimli::DW_AT_name) {
        return Ok(Some(dwarf.attr_string(unit, v)?.slice()));
    }
    let Some(o) = origin_offset(e) else {
        return Ok(None);
    };
    let origin = unit.entry(o)?;
    if let Some(v) = origin.val(gimli::DW_AT_name) {
        return Ok(Some(dwarf.attr_string(unit, v)?.slice()));
    }
    let Some(o2) = origin_offset(&origin) else {
        return Ok(None);
    };
    let origin2 = unit.entry(o2)?;
    match origin2.val(gimli::DW_AT_name) {
        Some(v) => Ok(Some(dwarf.attr_string(unit, v)?.slice())),
        None => Ok(None),
    }
}

/// An unsigned integer attribute of `e`, following abstract_origin once.
pub(crate) fn udata_integrated(
    unit: &GUnit<'_>,
    e: &Entry<'_, '_>,
    at: gimli::DwAt,
) -> Option<u64> {
    if let Some(v) = e.val(at) {
        return num(v);
    }
    let origin = unit.entry(origin_offset(e)?).ok()?;
    if let Some(v) = origin.val(at) {
        return num(v);
    }
    let origin2 = unit.entry(origin_offset(&origin)?).ok()?;
    num(origin2.val(at)?)
}

/// The code ranges of `e` (low/high PC or DW_AT_ranges), in the order listed.
pub(crate) fn ranges(
    dwarf: &Dwarf<'_>,
    unit: &GUnit<'_>,
    e: &Entry<'_, '_>,
) -> gimli::Result<Vec<gimli::Range>> {
    let mut out = Vec::new();
    let mut it = dwarf.die_ranges(unit, e)?;
    while let Some(r) = it.next()? {
        if r.begin < r.end {
            out.push(r);
        }
    }
    Ok(out)
}

/// The entry PC of a function or inlined instance: DW_AT_entry_pc, else the
/// low PC, else the start of the first listed range.
pub(crate) fn entry_pc(
    dwarf: &Dwarf<'_>,
    unit: &GUnit<'_>,
    e: &Entry<'_, '_>,
    ranges: &[gimli::Range],
) -> gimli::Result<Option<u64>> {
    match e.val(gimli::DW_AT_entry_pc) {
        Some(gimli::AttributeValue::Addr(a)) => return Ok(Some(a)),
        Some(gimli::AttributeValue::DebugAddrIndex(i)) => return Ok(Some(dwarf.address(unit, i)?)),
        Some(v) => {
            // DWARF 5: a constant is an offset from the entry's base (low_pc or first range).
            if let (Some(off), Some(first)) = (v.udata_value(), ranges.first()) {
                let base = low_pc(dwarf, unit, e)?.unwrap_or(first.begin);
                return Ok(Some(base.wrapping_add(off)));
            }
        }
        None => {}
    }
    if let Some(lo) = low_pc(dwarf, unit, e)? {
        return Ok(Some(lo));
    }
    Ok(ranges.first().map(|r| r.begin))
}

fn low_pc(dwarf: &Dwarf<'_>, unit: &GUnit<'_>, e: &Entry<'_, '_>) -> gimli::Result<Option<u64>> {
    Ok(match e.val(gimli::DW_AT_low_pc) {
        Some(gimli::AttributeValue::Addr(a)) => Some(a),
        Some(gimli::AttributeValue::DebugAddrIndex(i)) => Some(dwarf.address(unit, i)?),
        _ => None,
    })
}

/// The `.debug_info` offset of the entry at `off` of `unit`.
pub(crate) fn global(
    unit: &GUnit<'_>,
    off: gimli::UnitOffset,
) -> Option<gimli::DebugInfoOffset<usize>> {
    off.to_debug_info_offset(&unit.header)
}

/// Whether any of `ranges` holds `pc`.
pub(crate) fn holds(ranges: &[gimli::Range], pc: u64) -> bool {
    ranges.iter().any(|r| r.begin <= pc && pc < r.end)
}

/// The path of file number `file` of the unit's line table.
pub(crate) fn file_name(dwarf: &Dwarf<'_>, unit: &GUnit<'_>, file: u64) -> Option<String> {
    let lp = unit.line_program.as_ref()?;
    let header = lp.header();
    let f = header.file(file)?;
    let name = dwarf.attr_string(unit, f.path_name()).ok()?;
    let name = String::from_utf8_lossy(name.slice()).into_owned();
    if name.starts_with('/') {
        return Some(name);
    }
    let dir = f
        .directory(header)
        .and_then(|d| dwarf.attr_string(unit, d).ok())
        .map(|d| String::from_utf8_lossy(d.slice()).into_owned());
    Some(match dir {
        Some(d) if !d.is_empty() && f.directory_index() != 0 => format!("{d}/{name}"),
        _ => name,
    })
}

/// Strips the unit's compilation directory from `path`, to print it as the kernel tree does.
pub(crate) fn relative<'p>(comp_dir: Option<&str>, path: &'p str) -> &'p str {
    match comp_dir {
        Some(d) if !d.is_empty() => path
            .strip_prefix(d)
            .map(|p| p.trim_start_matches('/'))
            .unwrap_or(path),
        _ => path,
    }
}

/// Whether `path` ends with the path components of `tail` (perf's file match).
pub(crate) fn tail_matches(path: &str, tail: &str) -> bool {
    let tail = tail.trim_start_matches("./");
    path == tail || path.ends_with(&format!("/{tail}"))
}

/// Attribute reads that treat an unreadable attribute as absent.
pub(crate) trait Attrs<'a> {
    /// The value of attribute `at`, if present and readable.
    fn val(&self, at: gimli::DwAt) -> Option<gimli::AttributeValue<R<'a>>>;
    /// Whether attribute `at` is present.
    fn has(&self, at: gimli::DwAt) -> bool;
}

impl<'a> Attrs<'a> for Entry<'a, '_> {
    fn val(&self, at: gimli::DwAt) -> Option<gimli::AttributeValue<R<'a>>> {
        self.attr_value(at).ok().flatten()
    }

    fn has(&self, at: gimli::DwAt) -> bool {
        matches!(self.attr(at), Ok(Some(_)))
    }
}

/// An unsigned attribute value, including file indexes.
pub(crate) fn num(v: gimli::AttributeValue<R<'_>>) -> Option<u64> {
    match v {
        gimli::AttributeValue::FileIndex(n) => Some(n),
        v => v.udata_value(),
    }
}

/// One row of a unit's line table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) address: u64,
    pub(crate) file: u64,
    pub(crate) line: u64,
    pub(crate) is_stmt: bool,
    pub(crate) end: bool,
}

/// A function or inlined copy of a unit, from one walk of the unit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FuncDie {
    pub(crate) off: gimli::UnitOffset,
    pub(crate) tag: gimli::DwTag,
    /// DW_AT_abstract_origin, as a `.debug_info` offset: in the same
    /// unit, or (dwz) in a partial unit of the same file.
    pub(crate) origin: Option<gimli::DebugInfoOffset<usize>>,
    /// The top-level (out-of-line) function it is in, or itself.
    pub(crate) top: Option<gimli::UnitOffset>,
}
