//! The DWARF of a relocatable object (a kernel module's `.ko`, ELF
//! `ET_REL`): its debug sections hold zeros where `.rela.debug_*` entries
//! say which section or symbol an offset or an address points into, and
//! every allocated section (`.text`, `.text.unlikely`, `.init.text` ...)
//! starts at address 0. [`Relocated`] lays the allocated sections out at
//! distinct addresses and keeps a relocated copy of each debug section
//! that has relocations, so the reader sees the DWARF a link would have
//! made. Modules are small (a few MiB of debug info); a linked file (a
//! vmlinux, a user binary) never comes here and stays mapped in place.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationKind, RelocationTarget};

use crate::error::{Error, Result};

/// Where the first allocated section is laid: any address above 0, so
/// that no function is at 0 (which symbol tables take as "none").
const FIRST_BASE: u64 = 0x10_0000;

/// The layout of a relocatable file's allocated sections and its
/// relocated debug sections.
#[derive(Debug, Default)]
pub(crate) struct Relocated {
    /// The address each section starts at, by section index (0 for
    /// sections that are not allocated: the debug sections themselves).
    bases: Vec<u64>,
    /// The relocated bytes of each debug section that has relocations.
    sections: HashMap<String, Vec<u8>>,
}

impl Relocated {
    /// Lays out the allocated sections of `obj` and relocates every
    /// `.debug_*` section that has relocations. `path` names the file in
    /// errors.
    pub(crate) fn new(obj: &object::File<'_>, path: &std::path::Path) -> Result<Self> {
        let bases = layout(obj);
        let mut sections = HashMap::new();
        for sec in obj.sections() {
            let Ok(name) = sec.name() else { continue };
            if !name.starts_with(".debug_") || sec.relocations().next().is_none() {
                continue;
            }
            let data = relocate(obj, &sec, &bases).map_err(|reason| Error::Elf {
                path: path.to_path_buf(),
                reason: format!("relocating {name}: {reason}"),
            })?;
            sections.insert(name.to_string(), data);
        }
        Ok(Relocated { bases, sections })
    }

    /// The relocated bytes of section `name`, when it has relocations.
    pub(crate) fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections.get(name).map(Vec::as_slice)
    }

    /// Where section `index` starts (0 for a section not laid out).
    pub(crate) fn base(&self, index: object::SectionIndex) -> u64 {
        self.bases.get(index.0).copied().unwrap_or(0)
    }
}

/// Distinct, aligned addresses for the allocated sections, in file order.
fn layout(obj: &object::File<'_>) -> Vec<u64> {
    let mut bases = Vec::new();
    let mut next = FIRST_BASE;
    for sec in obj.sections() {
        let i = sec.index().0;
        if bases.len() <= i {
            bases.resize(i + 1, 0);
        }
        let alloc = match sec.flags() {
            object::SectionFlags::Elf { sh_flags, .. } => {
                sh_flags.0 & object::elf::SHF_ALLOC.0 != 0
            }
            _ => false,
        };
        if !alloc {
            continue;
        }
        let align = sec.align().max(16);
        let base = next.div_ceil(align).saturating_mul(align);
        bases[i] = base;
        // At least one byte each, so that two sections never share a start.
        next = base.saturating_add(sec.size().max(1));
    }
    bases
}

/// A copy of `sec`'s bytes with its relocations applied.
fn relocate(
    obj: &object::File<'_>,
    sec: &object::Section<'_, '_>,
    bases: &[u64],
) -> std::result::Result<Vec<u8>, String> {
    // A compressed section is decompressed here; relocating needs a copy
    // anyway.
    let mut data = sec
        .uncompressed_data()
        .map_err(|e| e.to_string())?
        .into_owned();
    let little = obj.is_little_endian();
    for (offset, rel) in sec.relocations() {
        let RelocationTarget::Symbol(index) = rel.target() else {
            return Err(format!(
                "the relocation at +0x{offset:x} does not name a symbol"
            ));
        };
        let sym = obj
            .symbol_by_index(index)
            .map_err(|e| format!("the relocation at +0x{offset:x}: {e}"))?;
        let base = sym
            .section_index()
            .and_then(|i| bases.get(i.0).copied())
            .unwrap_or(0);
        let target = base.wrapping_add(sym.address());
        let implicit = rel.has_implicit_addend();
        let value = |at: &[u8]| -> u64 {
            let addend = if implicit { read(at, little) } else { 0 };
            target
                .wrapping_add(rel.addend() as u64)
                .wrapping_add(addend)
        };
        if rel.kind() != RelocationKind::Absolute {
            return Err(format!(
                "the relocation at +0x{offset:x} is {:?}, not an absolute one (the only kind DWARF sections are expected to carry)",
                rel.kind()
            ));
        }
        let width = match rel.size() {
            32 => 4,
            64 => 8,
            n => {
                return Err(format!(
                    "the relocation at +0x{offset:x} is {n} bits wide (32 or 64 are read)"
                ))
            }
        };
        let at = usize::try_from(offset).map_err(|e| e.to_string())?;
        let place = at
            .checked_add(width)
            .and_then(|end| data.get_mut(at..end))
            .ok_or_else(|| format!("the relocation at +0x{offset:x} is past the section's end"))?;
        let v = value(place);
        let bytes = if little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        };
        if little {
            place.copy_from_slice(&bytes[..width]);
        } else {
            place.copy_from_slice(&bytes[8 - width..]);
        }
    }
    Ok(data)
}

/// The unsigned value in `place` (4 or 8 bytes).
fn read(place: &[u8], little: bool) -> u64 {
    let mut b = [0u8; 8];
    if little {
        b[..place.len()].copy_from_slice(place);
        u64::from_le_bytes(b)
    } else {
        b[8 - place.len()..].copy_from_slice(place);
        u64::from_be_bytes(b)
    }
}
