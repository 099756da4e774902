//! C types from DWARF: their names (for listings), sizes, signedness, members.
//! A type may be in another unit or in the supplementary (dwz) file: each
//! is an [`At`], and references are followed with [`DebugInfo::follow`].

use crate::debuginfo::{At, DebugInfo};
use crate::dies::{Attrs as _, Entry};

/// The entry `e` (at `at`) refers to with DW_AT_type, if any.
pub(crate) fn type_of<'a>(di: &DebugInfo<'a>, at: &At<'a>, e: &Entry<'a, '_>) -> Option<At<'a>> {
    di.follow(at, e.val(gimli::DW_AT_type)?)
}

/// Follows typedefs and qualifiers to the type that has a shape.
pub(crate) fn real_type<'a>(di: &DebugInfo<'a>, mut at: At<'a>) -> Option<At<'a>> {
    for _ in 0..32 {
        let e = at.unit.entry(at.off).ok()?;
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => at = type_of(di, &at, &e)?,
            _ => return Some(at),
        }
    }
    None
}

/// The name of the type entry at `at`, if it has one.
fn name_of<'a>(di: &DebugInfo<'a>, at: &At<'a>, e: &Entry<'a, '_>) -> Option<String> {
    let v = e.val(gimli::DW_AT_name)?;
    let s = di.dwarf_at(at).attr_string(&at.unit, v).ok()?;
    Some(String::from_utf8_lossy(s.slice()).into_owned())
}

/// A type's name as perf's listing spells it (`char*`, `struct open_how*`;
/// arrays as pointers, `int*`).
pub(crate) fn type_name<'a>(di: &DebugInfo<'a>, at: Option<&At<'a>>) -> String {
    let Some(at) = at else { return "void".into() };
    let Ok(e) = at.unit.entry(at.off) else {
        return "?".into();
    };
    let name = || name_of(di, at, &e);
    let inner = || type_name(di, type_of(di, at, &e).as_ref());
    match e.tag() {
        gimli::DW_TAG_pointer_type | gimli::DW_TAG_array_type => {
            let inner = inner();
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
        | gimli::DW_TAG_atomic_type => inner(),
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
#[derive(Debug, Clone)]
pub(crate) struct Shape<'a> {
    pub(crate) tag: gimli::DwTag,
    pub(crate) size: Option<u64>,
    pub(crate) signed: bool,
    /// The pointee or element type, for pointers and arrays.
    pub(crate) inner: Option<At<'a>>,
}

pub(crate) fn shape<'a>(di: &DebugInfo<'a>, at: &At<'a>) -> Option<Shape<'a>> {
    let real = real_type(di, at.clone())?;
    let e = real.unit.entry(real.off).ok()?;
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
        inner: type_of(di, &real, &e),
    })
}

/// Whether the type at `at` (after typedefs) is `char` or `unsigned char`.
pub(crate) fn is_char<'a>(di: &DebugInfo<'a>, at: Option<&At<'a>>) -> bool {
    let Some(real) = at.and_then(|a| real_type(di, a.clone())) else {
        return false;
    };
    let Ok(e) = real.unit.entry(real.off) else {
        return false;
    };
    matches!(
        name_of(di, &real, &e).as_deref(),
        Some("char" | "unsigned char")
    )
}

/// A member found in a structure (through anonymous members).
#[derive(Debug, Clone)]
pub(crate) struct Member<'a> {
    pub(crate) offset: u64,
    pub(crate) ty: Option<At<'a>>,
    /// (bit size, bit offset from `offset`) for bitfields.
    pub(crate) bits: Option<(u64, u64)>,
}

/// Finds member `name` of the struct/union at `agg`, descending into anonymous members.
pub(crate) fn find_member<'a>(
    di: &DebugInfo<'a>,
    agg: &At<'a>,
    name: &[u8],
    depth: u32,
) -> Option<Member<'a>> {
    if depth > 8 {
        return None;
    }
    let mut tree = agg.unit.entries_tree(Some(agg.off)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let m = child.entry();
        if m.tag() != gimli::DW_TAG_member {
            continue;
        }
        let here = At {
            unit: agg.unit.clone(),
            sup: agg.sup,
            off: m.offset(),
        };
        let member_off = match m.val(gimli::DW_AT_data_member_location) {
            Some(v) => v.udata_value().unwrap_or(0),
            None => m
                .val(gimli::DW_AT_data_bit_offset)
                .and_then(|v| v.udata_value())
                .map_or(0, |b| b / 8),
        };
        let ty = type_of(di, &here, m);
        if m.val(gimli::DW_AT_name).is_none() {
            let inner = ty.and_then(|t| real_type(di, t))?;
            if let Some(mut found) = find_member(di, &inner, name, depth + 1) {
                found.offset += member_off;
                return Some(found);
            }
            continue;
        }
        if name_of(di, &here, m)?.as_bytes() != name {
            continue;
        }
        return Some(member(di, m, member_off, ty));
    }
    None
}

/// The member `m` at byte `member_off`, of type `ty`, with its bitfield
/// position when it is one.
fn member<'a>(
    di: &DebugInfo<'a>,
    m: &Entry<'a, '_>,
    member_off: u64,
    ty: Option<At<'a>>,
) -> Member<'a> {
    let bits = m.val(gimli::DW_AT_bit_size).and_then(|v| v.udata_value());
    let Some(bit_size) = bits else {
        return Member {
            offset: member_off,
            ty,
            bits: None,
        };
    };
    let dbo = m
        .val(gimli::DW_AT_data_bit_offset)
        .and_then(|v| v.udata_value())
        .unwrap_or(member_off * 8);
    let cbytes = ty
        .as_ref()
        .and_then(|t| shape(di, t))
        .and_then(|s| s.size)
        .unwrap_or(4)
        .max(1);
    let start = dbo / (cbytes * 8) * cbytes;
    Member {
        offset: start,
        ty,
        bits: Some((bit_size, dbo - start * 8)),
    }
}
