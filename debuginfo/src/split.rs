//! Split DWARF (`-gsplit-dwarf`): a skeleton unit in the binary stands
//! for a full unit in a `.dwo` file (named by `DW_AT_dwo_name`, relative
//! to `DW_AT_comp_dir`) or in a `.dwp` package beside the binary
//! (`BINARY.dwp`). The split unit is read with the `.dwo`'s sections and
//! the skeleton's addresses (`.debug_addr`), ranges base and line table.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::file::{section_bytes, DebugFile, R};

type Dwarf<'a> = gimli::Dwarf<R<'a>>;
type GUnit<'a> = gimli::Unit<R<'a>>;

/// The full unit a skeleton unit stands for, with the DWARF it is read
/// with; `None` when `skeleton` is no skeleton, or its `.dwo` (or `.dwp`)
/// is not found (its functions are then unknown, as perf's are).
pub(crate) fn split_unit<'a>(
    file: &'a DebugFile,
    dwarf: &Dwarf<'a>,
    skeleton: &GUnit<'a>,
) -> Result<Option<(Dwarf<'a>, GUnit<'a>)>> {
    let Some(id) = skeleton.dwo_id else {
        return Ok(None);
    };
    let Some(dwo) = dwo_dwarf(file, dwarf, skeleton, id)? else {
        return Ok(None);
    };
    let mut units = dwo.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(mut unit) = dwo.unit(header) else {
            continue;
        };
        if unit.dwo_id != Some(id) {
            continue;
        }
        unit.copy_relocated_attributes(skeleton);
        // The line table is the skeleton's; the split unit's file
        // numbers (DW_AT_decl_file, DW_AT_call_file) index it too.
        unit.line_program.clone_from(&skeleton.line_program);
        if unit.comp_dir.is_none() {
            unit.comp_dir = skeleton.comp_dir;
        }
        return Ok(Some((dwo, unit)));
    }
    Ok(None)
}

/// The DWARF holding the split unit `id`: its `.dwo` file, else the
/// `.dwp` package beside `file`.
fn dwo_dwarf<'a>(
    file: &'a DebugFile,
    parent: &Dwarf<'a>,
    skeleton: &GUnit<'a>,
    id: gimli::DwoId,
) -> Result<Option<Dwarf<'a>>> {
    let endian = skeleton_endian(parent);
    if let Some(path) = dwo_path(parent, skeleton) {
        if let Some(dwo) = file.companion(&path, || unit_count(parent))? {
            let obj = dwo.object()?;
            let section = |name: Option<&str>| match name {
                Some(n) => section_bytes(dwo, &obj, n),
                None => Ok(&[][..]),
            };
            let mut dwarf =
                gimli::Dwarf::load(|s| section(s.dwo_name()).map(|d| R::new(d, endian)))?;
            dwarf.make_dwo(parent);
            share_line_strings(&mut dwarf, parent);
            return Ok(Some(dwarf));
        }
    }
    let mut dwp_path = file.path().as_os_str().to_owned();
    dwp_path.push(".dwp");
    let Some(dwp) = file.companion(Path::new(&dwp_path), || unit_count(parent))? else {
        return Ok(None);
    };
    let obj = dwp.object()?;
    let section = |name: Option<&str>| match name {
        Some(n) => section_bytes(dwp, &obj, n),
        None => Ok(&[][..]),
    };
    // A section that cannot be read is empty: the unit is then not found.
    let package = gimli::DwarfPackage::load(
        |s| Ok::<_, gimli::Error>(R::new(section(s.dwo_name()).unwrap_or(&[]), endian)),
        R::new(&[], endian),
    );
    let Ok(package) = package else {
        return Ok(None);
    };
    let Ok(Some(mut dwarf)) = package.find_cu(id, parent) else {
        return Ok(None);
    };
    share_line_strings(&mut dwarf, parent);
    Ok(Some(dwarf))
}

/// The skeleton's line table names its files in the parent's
/// `.debug_line_str`; the split unit reads it from there.
fn share_line_strings<'a>(dwo: &mut Dwarf<'a>, parent: &Dwarf<'a>) {
    dwo.debug_line_str = parent.debug_line_str;
}

/// How many units `dwarf` has: at most that many `.dwo` files, and a
/// `.dwp`, are read beside it.
fn unit_count(dwarf: &Dwarf<'_>) -> usize {
    let mut n = 1;
    let mut units = dwarf.units();
    while let Ok(Some(_)) = units.next() {
        n += 1;
    }
    n
}

/// The byte order of the parent's sections.
fn skeleton_endian(parent: &Dwarf<'_>) -> gimli::RunTimeEndian {
    gimli::Reader::endian(gimli::Section::reader(&parent.debug_info))
}

/// Where the skeleton's `.dwo` is: its name, under its compilation
/// directory unless absolute.
fn dwo_path<'a>(dwarf: &Dwarf<'a>, skeleton: &GUnit<'a>) -> Option<PathBuf> {
    let name = skeleton.dwo_name().ok()??;
    let name = dwarf.attr_string(skeleton, name).ok()?;
    let name = PathBuf::from(String::from_utf8_lossy(name.slice()).into_owned());
    if name.is_absolute() {
        return Some(name);
    }
    let dir = skeleton
        .comp_dir
        .map(|d| PathBuf::from(String::from_utf8_lossy(d.slice()).into_owned()))?;
    Some(dir.join(name))
}
