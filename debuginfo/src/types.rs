//! C types from DWARF: their names (for listings), sizes, signedness, members.

use crate::dies::Attrs as _;

use crate::dies::{Dwarf, Entry, Unit};

/// The type entry `e` refers to with DW_AT_type, if any.
pub(crate) fn type_of(e: &Entry<'_, '_>) -> Option<gimli::UnitOffset> {
    match e.val(gimli::DW_AT_type) {
        Some(gimli::AttributeValue::UnitRef(o)) => Some(o),
        _ => None,
    }
}

/// Follows typedefs and qualifiers to the type that has a shape.
pub(crate) fn real_type(unit: &Unit<'_>, mut off: gimli::UnitOffset) -> Option<gimli::UnitOffset> {
    for _ in 0..32 {
        let e = unit.entry(off).ok()?;
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => off = type_of(&e)?,
            _ => return Some(off),
        }
    }
    None
}

/// A type's name as perf's listing spells it (`char*`, `struct open_how*`;
/// arrays as pointers, `int*`).
pub(crate) fn type_name(
    dwarf: &Dwarf<'_>,
    unit: &Unit<'_>,
    off: Option<gimli::UnitOffset>,
) -> String {
    let Some(off) = off else { return "void".into() };
    let Ok(e) = unit.entry(off) else {
        return "?".into();
    };
    let name = || {
        e.val(gimli::DW_AT_name)
            .and_then(|v| dwarf.attr_string(unit, v).ok())
            .map(|s| String::from_utf8_lossy(s.slice()).into_owned())
    };
    match e.tag() {
        gimli::DW_TAG_pointer_type | gimli::DW_TAG_array_type => {
            let inner = type_name(dwarf, unit, type_of(&e));
            // perf cannot name types built on void; it says so.
            if inner == "(unknown_type)" || inner == "void" {
                return "(unknown_type)".into();
            }
            // perf spells arrays as pointers.
            format!("{inner}*")
        }
        gimli::DW_TAG_const_type
        | gimli::DW_TAG_volatile_type
        | gimli::DW_TAG_restrict_type
        | gimli::DW_TAG_atomic_type => type_name(dwarf, unit, type_of(&e)),
        // An anonymous aggregate has no name to print: perf says unknown.
        gimli::DW_TAG_structure_type => {
            name().map_or("(unknown_type)".into(), |n| format!("struct {n}"))
        }
        gimli::DW_TAG_union_type => {
            name().map_or("(unknown_type)".into(), |n| format!("union {n}"))
        }
        gimli::DW_TAG_enumeration_type => {
            name().map_or("(unknown_type)".into(), |n| format!("enum {n}"))
        }
        gimli::DW_TAG_subroutine_type => "(function_type)".into(),
        _ => name().unwrap_or_else(|| "?".into()),
    }
}

/// What a fetch needs to know about a type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) tag: gimli::DwTag,
    pub(crate) size: Option<u64>,
    pub(crate) signed: bool,
    /// The pointee or element type, for pointers and arrays.
    pub(crate) inner: Option<gimli::UnitOffset>,
}

pub(crate) fn shape(unit: &Unit<'_>, off: gimli::UnitOffset) -> Option<Shape> {
    let real = real_type(unit, off)?;
    let e = unit.entry(real).ok()?;
    let signed = matches!(
        e.val(gimli::DW_AT_encoding),
        Some(gimli::AttributeValue::Encoding(
            gimli::DW_ATE_signed | gimli::DW_ATE_signed_char
        ))
    );
    let size = e.val(gimli::DW_AT_byte_size).and_then(|v| v.udata_value());
    Some(Shape {
        tag: e.tag(),
        size,
        signed,
        inner: type_of(&e),
    })
}

/// Whether the type at `off` (after typedefs) is `char` or `unsigned char`.
pub(crate) fn is_char(dwarf: &Dwarf<'_>, unit: &Unit<'_>, off: Option<gimli::UnitOffset>) -> bool {
    let Some(real) = off.and_then(|o| real_type(unit, o)) else {
        return false;
    };
    let Ok(e) = unit.entry(real) else {
        return false;
    };
    let name = e
        .val(gimli::DW_AT_name)
        .and_then(|v| dwarf.attr_string(unit, v).ok())
        .map(|s| s.slice().to_vec());
    matches!(name.as_deref(), Some(b"char" | b"unsigned char"))
}

/// A member found in a structure (through anonymous members).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Member {
    pub(crate) offset: u64,
    pub(crate) ty: Option<gimli::UnitOffset>,
    /// (bit size, bit offset from `offset`) for bitfields.
    pub(crate) bits: Option<(u64, u64)>,
}

/// Finds member `name` of the struct/union at `off`, descending into anonymous members.
pub(crate) fn find_member(
    dwarf: &Dwarf<'_>,
    unit: &Unit<'_>,
    off: gimli::UnitOffset,
    name: &[u8],
    depth: u32,
) -> Option<Member> {
    if depth > 8 {
        return None;
    }
    let mut tree = unit.entries_tree(Some(off)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let m = child.entry();
        if m.tag() != gimli::DW_TAG_member {
            continue;
        }
        let member_off = match m.val(gimli::DW_AT_data_member_location) {
            Some(v) => v.udata_value().unwrap_or(0),
            None => m
                .val(gimli::DW_AT_data_bit_offset)
                .and_then(|v| v.udata_value())
                .map_or(0, |b| b / 8),
        };
        let ty = type_of(m);
        match m.val(gimli::DW_AT_name) {
            Some(v) => {
                let n = dwarf.attr_string(unit, v).ok()?;
                if n.slice() != name {
                    continue;
                }
                let bits = m.val(gimli::DW_AT_bit_size).and_then(|v| v.udata_value());
                let Some(bit_size) = bits else {
                    return Some(Member {
                        offset: member_off,
                        ty,
                        bits: None,
                    });
                };
                let dbo = m
                    .val(gimli::DW_AT_data_bit_offset)
                    .and_then(|v| v.udata_value())
                    .unwrap_or(member_off * 8);
                let cbytes = ty
                    .and_then(|t| shape(unit, t))
                    .and_then(|s| s.size)
                    .unwrap_or(4)
                    .max(1);
                let start = dbo / (cbytes * 8) * cbytes;
                return Some(Member {
                    offset: start,
                    ty,
                    bits: Some((bit_size, dbo - start * 8)),
                });
            }
            None => {
                let inner = ty.and_then(|t| real_type(unit, t))?;
                if let Some(mut found) = find_member(dwarf, unit, inner, name, depth + 1) {
                    found.offset += member_off;
                    return Some(found);
                }
            }
        }
    }
    None
}
