//! Probe points: kernel symbols and addresses, uprobe paths and offsets,
//! and the targets of `f:` and `t:`, checked in the order the kernel's
//! create functions check them.

use super::parse::{parse_number, Cursor, Flavor, SpecError};
use super::{Target, UserLocation};

/// The suffix of an `f:` or `t:` target, and a tracepoint's name
/// (parse_symbol_and_return, which the kernel runs before it reads the
/// event name): the name, and whether it carried `%return`.
pub(crate) fn dynamic_suffix<'t>(
    cur: &Cursor,
    flavor: Flavor,
    at: usize,
    text: &'t str,
) -> Result<(&'t str, bool), SpecError> {
    let (name, returns) = match text.find('%') {
        Some(i) if flavor == Flavor::Fprobe && &text[i..] == "%return" => (&text[..i], true),
        Some(i) => {
            let msg = if flavor == Flavor::Tprobe {
                "a tracepoint probe fires at the tracepoint: it takes no %return or other suffix"
            } else {
                "the only suffix an fprobe takes is %return"
            };
            return Err(cur.err(at + i, text.len() - i, msg));
        }
        None => (text, false),
    };
    if flavor == Flavor::Tprobe {
        if let Some(i) = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            return Err(cur.err(
                at + i,
                1,
                "a tracepoint is named by letters, digits and _, as in sched_switch (no group, no glob)",
            ));
        }
    }
    Ok((name, returns))
}

/// The target of an `f:` or `t:` definition, from the name
/// [`dynamic_suffix`] left.
pub(crate) fn parse_dynamic_target(
    cur: &Cursor,
    flavor: Flavor,
    at: usize,
    name: &str,
) -> Result<Target, SpecError> {
    if name.is_empty() {
        return Err(cur.err(at, 1, "missing function name before %return"));
    }
    if flavor == Flavor::Tprobe {
        return Ok(Target::Tracepoint {
            name: name.to_string(),
        });
    }
    if let Some(i) = name.find(':') {
        return Err(cur.err(
            at,
            i + 1,
            "fprobe events take no MOD: prefix: name the function alone (modules' functions are found by name)",
        ));
    }
    if outside_classes(name).any(|(_, b)| b == b'+' || b == b'-') {
        return Err(cur.err(
            at,
            name.len(),
            "an fprobe goes on a function's entry or return: no offset (use p:SYM+OFFS for an offset)",
        ));
    }
    // ftrace reads a leading `!` as "take these out of the filter", and
    // an fprobe's filter starts empty: empty means every function.
    if name.starts_with('!') {
        return Err(cur.err(
            at,
            1,
            "an fprobe's glob cannot start with !: the kernel would read it as an exclusion from an empty filter, which arms every function; name the functions to keep (a class [!...] excludes within one position)",
        ));
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(cur.err(
            at,
            name.len(),
            "an fprobe takes a function name or a glob, not an address",
        ));
    }
    let (name, _) = parse_sym_offset(cur, at, name)?;
    Ok(Target::Fprobe {
        name: name.to_string(),
    })
}

/// `SYM[+offs]` (shared by kernel and user symbols).
/// Glob metacharacters allowed in kernel function and module names.
pub(crate) const GLOB_CHARS: &[u8] = b"*?[]!";

/// The bytes of a glob outside its character classes (`[...]`, as
/// lib/glob.c reads them: a `]` right after `[` or `[!` is a member, an
/// unclosed `[` is literal), with their indices.
fn outside_classes(text: &str) -> impl Iterator<Item = (usize, u8)> + '_ {
    let b = text.as_bytes();
    let mut inside_until = 0;
    (0..b.len()).filter_map(move |i| {
        if i < inside_until {
            return None;
        }
        if b[i] == b'[' {
            let mut j = i + 1;
            if b.get(j) == Some(&b'!') {
                j += 1;
            }
            // The first member may be `]`.
            j += 1;
            while j < b.len() && b[j] != b']' {
                j += 1;
            }
            if j < b.len() {
                inside_until = j + 1;
                return None;
            }
        }
        Some((i, b[i]))
    })
}

fn parse_sym_offset<'t>(
    cur: &Cursor,
    at: usize,
    text: &'t str,
) -> Result<(&'t str, u64), SpecError> {
    // A glob (`tcp_v4_*`) stands for a set of functions; it takes no
    // offset.
    if text.bytes().any(|b| GLOB_CHARS.contains(&b)) {
        // A range in a class (`[a-k]`) is the one place for a `-`.
        let in_class: Vec<bool> = {
            let mut flags = vec![true; text.len()];
            for (i, _) in outside_classes(text) {
                flags[i] = false;
            }
            flags
        };
        let valid = !text.starts_with(['.', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])
            && text.bytes().zip(&in_class).all(|(b, &inside)| {
                b.is_ascii_alphanumeric()
                    || b == b'_'
                    || b == b'.'
                    || GLOB_CHARS.contains(&b)
                    || (b == b'-' && inside)
            });
        if !valid {
            return Err(cur.err(
                at,
                text.len(),
                "a glob of functions is letters, digits, _ and . with * ? [...], and takes no offset",
            ));
        }
        return Ok((text, 0));
    }
    // traceprobe_split_symbol_offset: the offset starts at the first `+`
    // or `-` and is read as a long; any mistake in it is reported at the
    // start of the target ("Invalid probed address or symbol").
    let (name, offset) = match text.find(['+', '-']) {
        Some(i) => {
            let off_text = &text[i + 1..];
            if text.as_bytes()[i] == b'-' {
                return Err(cur.err(
                    at,
                    text.len(),
                    "offsets into a symbol are positive: SYM+OFFS",
                ));
            }
            let off = parse_number(off_text)
                .filter(|&o| i64::try_from(o).is_ok())
                .ok_or_else(|| {
                    cur.err(
                        at,
                        text.len(),
                        "not a valid offset: write SYM+0x10 or SYM+16 (at most 0x7fffffffffffffff)",
                    )
                })?;
            (&text[..i], off)
        }
        None => (text, 0),
    };
    if name.is_empty()
        || name.starts_with(['.', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return Err(cur.err(
            at,
            name.len().max(1),
            "not a symbol name: symbols are letters, digits, _ and .",
        ));
    }
    Ok((name, offset))
}

/// What starts the SDT form of a target (`usdt:PATH:PROVIDER:NAME`).
pub(crate) const SDT_PREFIX: &str = "usdt:";

/// `PATH:PROVIDER:NAME` after `usdt:`: a binary's statically defined
/// tracepoints, provider and name each a name or a glob.
fn parse_sdt_target(cur: &Cursor, at: usize, text: &str) -> Result<Target, SpecError> {
    let shape = "an SDT probe is usdt:PATH:PROVIDER:NAME, as in usdt:/usr/bin/python3.11:python:function__entry";
    if !text.starts_with('/') && !text.starts_with("*:") {
        return Err(cur.err(
            at,
            text.split(':').next().unwrap_or(text).len().max(1),
            format!("the binary's path must be absolute (or *, every file of the processes recorded); {shape}"),
        ));
    }
    let mut parts = text.rsplitn(3, ':');
    let (Some(name), Some(provider), Some(path)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(cur.err(at, text.len(), shape));
    };
    let name_at = at + text.len() - name.len();
    let provider_at = name_at - 1 - provider.len();
    let valid = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || GLOB_CHARS.contains(&b))
    };
    for (what, part, part_at) in [("provider", provider, provider_at), ("name", name, name_at)] {
        if !valid(part) {
            return Err(cur.err(
                part_at,
                part.len().max(1),
                format!("the {what} is letters, digits and _, or a glob (*, ?, [...]); {shape}"),
            ));
        }
    }
    Ok(Target::User {
        path: path.to_string(),
        location: UserLocation::Sdt {
            provider: provider.to_string(),
            name: name.to_string(),
        },
    })
}

/// A uprobe's `PATH:OFFSET[%return][(REF_CTR)]` (the kernel's form, checked
/// in the order __trace_uprobe_create checks it: the reference counter,
/// then the suffix, then the offset), or kprobe-perf's
/// `PATH:SYMBOL[+offs][%return]`.
fn parse_user_target(cur: &Cursor, at: usize, text: &str) -> Result<(Target, bool), SpecError> {
    let Some(colon) = text.rfind(':') else {
        return Err(cur.err(
            at,
            text.len(),
            "a uprobe target is PATH:0xOFFSET or PATH:SYMBOL[+offs]",
        ));
    };
    let (path, mut loc) = (&text[..colon], &text[colon + 1..]);
    let loc_at = at + colon + 1;
    let mut ref_ctr = None;
    if let Some(open) = loc.find('(') {
        let inner_at = loc_at + open + 1;
        let Some(close) = loc[open..].find(')').map(|i| open + i) else {
            return Err(cur.err(
                at + text.len(),
                1,
                "the reference counter offset is not closed: PATH:OFFS(CTR)",
            ));
        };
        if close + 1 != loc.len() {
            return Err(cur.err(
                loc_at + close + 1,
                loc.len() - close - 1,
                "nothing may follow the reference counter: write PATH:OFFS%return(CTR)",
            ));
        }
        let ctr = &loc[open + 1..close];
        ref_ctr = Some(parse_number(ctr).ok_or_else(|| {
            cur.err(
                inner_at,
                ctr.len().max(1),
                "the reference counter is a file offset: PATH:OFFS(0x1234)",
            )
        })?);
        loc = &loc[..open];
    }
    let (loc, returns) = match loc.find('%') {
        Some(i) if &loc[i..] == "%return" => (&loc[..i], true),
        Some(i) => {
            return Err(cur.err(
                loc_at + i,
                loc.len() - i,
                "the only suffix a uprobe takes is %return",
            ))
        }
        None => (loc, false),
    };
    if loc.is_empty() {
        return Err(cur.err(
            loc_at,
            1,
            "missing offset after the path: PATH:0xOFFSET or PATH:SYMBOL",
        ));
    }
    if loc.bytes().any(|b| GLOB_CHARS.contains(&b)) {
        return Err(cur.err(
            loc_at,
            loc.len(),
            "globs select kernel functions only; name one symbol of the binary",
        ));
    }
    let location = if loc.starts_with(|c: char| c.is_ascii_digit()) {
        let offset = parse_number(loc).ok_or_else(|| {
            cur.err(
                loc_at,
                loc.len(),
                "not a valid file offset: write PATH:0x1234",
            )
        })?;
        match ref_ctr {
            Some(ref_ctr) => UserLocation::Counted { offset, ref_ctr },
            None => UserLocation::Offset(offset),
        }
    } else {
        if ref_ctr.is_some() {
            return Err(cur.err(
                loc_at,
                loc.len(),
                "a reference counter goes with a file offset: PATH:0xOFFS(CTR)",
            ));
        }
        let (name, offset) = parse_sym_offset(cur, loc_at, loc)?;
        UserLocation::Symbol {
            name: name.to_string(),
            offset,
        }
    };
    Ok((
        Target::User {
            path: path.to_string(),
            location,
        },
        returns,
    ))
}

/// The target, and whether it carried `%return`.
pub(crate) fn parse_target(
    cur: &Cursor,
    at: usize,
    text: &str,
) -> Result<(Target, bool), SpecError> {
    if let Some(rest) = text.strip_prefix(SDT_PREFIX) {
        return parse_sdt_target(cur, at + SDT_PREFIX.len(), rest).map(|t| (t, false));
    }
    if text.starts_with('/') {
        return parse_user_target(cur, at, text);
    }
    // The only suffix is `%return`; anything else from the `%` on is
    // refused there ("Invalid probed address suffix").
    let (text, returns) = match text.find('%') {
        Some(i) if &text[i..] == "%return" => (&text[..i], true),
        Some(i) => {
            return Err(cur.err(
                at + i,
                text.len() - i,
                "the only suffix a probe point takes is %return",
            ))
        }
        None => (text, false),
    };
    if text.starts_with(|c: char| c.is_ascii_digit()) && !text.contains(':') {
        let addr = parse_number(text).ok_or_else(|| {
            cur.err(
                at,
                text.len(),
                "not a valid address: write it in hex, as in 0xffffffff81234560",
            )
        })?;
        return Ok((Target::Address(addr), returns));
    }
    let (module, rest, rest_at) = match text.split_once(':') {
        Some((m, r)) => (Some(m), r, at + m.len() + 1),
        None => (None, text, at),
    };
    if let Some(m) = module {
        // Module names may start with a digit (9pnet, 8021q); a glob
        // (`*:ext4_*`) selects modules.
        if m.is_empty()
            || !m
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || GLOB_CHARS.contains(&b))
        {
            return Err(cur.err(
                at,
                m.len().max(1),
                "module names are letters, digits and _ (or a glob: * ? [...])",
            ));
        }
    }
    // `NAME@0xADDR[+offs]` picks one of several functions sharing NAME.
    let (name, instance, offset) = match rest.split_once('@') {
        Some((name, tail)) => {
            let tail_at = rest_at + name.len() + 1;
            let (addr_text, off_text) = match tail.split_once('+') {
                Some((a, o)) => (a, Some(o)),
                None => (tail, None),
            };
            let addr = parse_number(addr_text).filter(|_| addr_text.starts_with("0x")).ok_or_else(|| {
                cur.err(
                    tail_at,
                    addr_text.len().max(1),
                    "not an instance address: write NAME@0xffffffff81234560 (the address of one of its instances, as kallsyms lists them)",
                )
            })?;
            let offset = match off_text {
                Some(o) => parse_number(o).ok_or_else(|| {
                    cur.err(
                        tail_at + addr_text.len() + 1,
                        o.len().max(1),
                        "not a valid offset: write SYM+0x10 or SYM+16",
                    )
                })?,
                None => 0,
            };
            let (name, _) = parse_sym_offset(cur, rest_at, name)?;
            (name, Some(addr), offset)
        }
        None => {
            let (name, offset) = parse_sym_offset(cur, rest_at, rest)?;
            (name, None, offset)
        }
    };
    Ok((
        Target::Symbol {
            module: module.map(str::to_string),
            name: name.to_string(),
            instance,
            offset,
        },
        returns,
    ))
}
