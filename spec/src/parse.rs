//! The kprobe_events parser and its validation rules.

use std::fmt;

use kprobe_perf_arch::Arch;

use super::{
    proto, ArgType, BaseType, Definition, Deref, Fetch, FetchArg, FetchBase, Immediate, Member,
    ProbeKind, ProbeSpec, Span, Target, UserLocation, MAX_ARGS, MAX_ARG_NAME, MAX_ARRAY_LEN,
    MAX_EVENT_NAME, MAX_MAXACTIVE, RESERVED_NAMES,
};

/// Which kind of dynamic event a definition's first letter asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// `p:`/`r:` (kprobes and uprobes).
    Kprobe,
    /// `f:` (trace_fprobe.c).
    Fprobe,
    /// `t:` (trace_fprobe.c, tracepoint probes).
    Tprobe,
}

/// A refused probe definition: the input, where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The whole definition as given.
    pub input: String,
    /// The offending token.
    pub span: Span,
    /// What is wrong and what would be right.
    pub message: String,
}

impl std::error::Error for SpecError {}

impl fmt::Display for SpecError {
    /// Three lines: the message, the input, and carets under the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.span.write_under(f, &self.message, &self.input)
    }
}

/// Builds errors against one input.
pub(crate) struct Cursor<'a> {
    pub(crate) input: &'a str,
}

impl Cursor<'_> {
    pub(crate) fn err(&self, start: usize, len: usize, message: impl Into<String>) -> SpecError {
        SpecError {
            input: self.input.to_string(),
            span: Span { start, len },
            message: message.into(),
        }
    }
}

/// Splits on ASCII whitespace, keeping byte offsets.
fn tokens(input: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in input.char_indices() {
        if c.is_ascii_whitespace() {
            if let Some(s) = start.take() {
                out.push((s, &input[s..i]));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push((s, &input[s..]));
    }
    out
}

/// True for a token that can only be a fetch argument, never a target.
fn looks_like_fetch_arg(t: &str) -> bool {
    t.contains('=')
        || t.contains("->")
        || t.contains(":%")
        || t.starts_with(['%', '$', '@', '+', '-', '\\'])
}

pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A decimal or `0x` hexadecimal unsigned number.
pub(crate) fn parse_number(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// `+N`/`-N` as a signed offset.
fn parse_signed(sign: u8, digits: &str) -> Option<i64> {
    let v = parse_number(digits)?;
    if sign == b'-' {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

impl Definition {
    /// Parses one line: a probe (any form) or a `-:` deletion.
    pub fn parse(input: &str, arch: Arch) -> Result<Definition, SpecError> {
        let cur = Cursor { input };
        let toks = tokens(input);
        if let Some(&(at, head)) = toks.first() {
            if let Some(rest) = head.strip_prefix("-:") {
                if let Some(&(extra_at, extra)) = toks.get(1) {
                    return Err(cur.err(
                        extra_at,
                        extra.len(),
                        "-:[GRP/]EVENT takes nothing after the event name",
                    ));
                }
                let (group, event, ev_at) = match rest.split_once('/') {
                    Some((g, e)) => (Some(g), e, at + 3 + g.len()),
                    None => (None, rest, at + 2),
                };
                if let Some(g) = group {
                    if !is_identifier(g) {
                        return Err(cur.err(
                            at + 2,
                            g.len().max(1),
                            "group names are letters, digits and _, starting with a letter or _",
                        ));
                    }
                }
                if !is_identifier(event) {
                    return Err(cur.err(
                        ev_at,
                        event.len().max(1),
                        "name the event to delete: -:EVENT or -:GRP/EVENT",
                    ));
                }
                return Ok(Definition::Delete {
                    group: group.map(str::to_string),
                    event: event.to_string(),
                });
            }
        }
        ProbeSpec::parse(input, arch).map(Definition::Probe)
    }
}

impl ProbeSpec {
    /// Parses and validates one probe definition for `arch`.
    pub fn parse(input: &str, arch: Arch) -> Result<ProbeSpec, SpecError> {
        if proto::looks_like_prototype(input) {
            return proto::parse(input, arch);
        }
        let cur = Cursor { input };
        let toks = tokens(input);
        let Some(&(head_at, head)) = toks.first() else {
            return Err(cur.err(
                0,
                0,
                "empty probe definition; expected e.g. p:do_sys_openat2",
            ));
        };
        let (kind_text, name_part) = match head.split_once(':') {
            Some((k, n)) => (k, Some(n)),
            None => (head, None),
        };
        let (mut kind, flavor) = parse_kind(&cur, head_at, kind_text)?;

        // Short form `p:SYM [ARGS]`: what follows the colon is the target
        // when it cannot be an event name, or only fetch args follow it.
        let next_is_arg = toks.get(1).is_none_or(|&(_, t)| looks_like_fetch_arg(t));
        let short_form = name_part.is_some_and(|n| {
            !n.is_empty()
                && (n.contains([':', '+', '%'])
                    || n.bytes().any(|b| GLOB_CHARS.contains(&b))
                    || n.starts_with(|c: char| c.is_ascii_digit())
                    || next_is_arg)
        });
        let name_at = head_at + kind_text.len() + 1;
        let (group, event, target_at, target_text, args_from) = if short_form {
            (None, None, name_at, name_part.unwrap_or_default(), 1)
        } else {
            let (group, event) = match name_part {
                None => (None, None),
                Some(n) => parse_group_event(&cur, name_at, n)?,
            };
            let Some(&(target_at, target_text)) = toks.get(1) else {
                return Err(cur.err(
                    input.len(),
                    1,
                    "missing probe target: give a symbol (do_sys_openat2), symbol+offset, or address",
                ));
            };
            (group, event, target_at, target_text, 2)
        };
        let arg_toks = &toks[args_from.min(toks.len())..];
        let (target, returns) = match flavor {
            Flavor::Kprobe => parse_target(&cur, target_at, target_text)?,
            Flavor::Fprobe | Flavor::Tprobe => {
                let head = (head_at, kind_text);
                let target_tok = (target_at, target_text);
                let target;
                (target, kind) = dynamic_target(&cur, flavor, kind, head, target_tok, arg_toks)?;
                (target, false)
            }
        };
        if returns {
            if kind != ProbeKind::Entry {
                return Err(cur.err(
                    target_at,
                    target_text.len(),
                    "%return makes a return probe of a p: definition; with r: leave it out",
                ));
            }
            kind = ProbeKind::Return { maxactive: None };
        }
        check_return(
            &cur,
            kind,
            &target,
            (head_at, kind_text),
            (target_at, target_text),
        )?;
        let mut spec = ProbeSpec {
            kind,
            group,
            event,
            target,
            args: Vec::new(),
        };
        push_args(&cur, &mut spec, arch, arg_toks)?;
        Ok(spec)
    }
}

/// The target of an `f:` or `t:` probe (`target_tok`, with the probe's
/// `head` token) and its kind: `$retval` among the args makes an fprobe a
/// return probe, and is refused on a tracepoint.
fn dynamic_target(
    cur: &Cursor,
    flavor: Flavor,
    mut kind: ProbeKind,
    (head_at, kind_text): (usize, &str),
    (target_at, target_text): (usize, &str),
    arg_toks: &[(usize, &str)],
) -> Result<(Target, ProbeKind), SpecError> {
    let (target, mut returns) = parse_dynamic_target(cur, flavor, target_at, target_text)?;
    // As parse_symbol_and_return does: `$retval` among the args
    // makes an fprobe a return probe, and is refused on a
    // tracepoint.
    for &(at, t) in arg_toks {
        let Some(i) = find_retval(t) else { continue };
        if flavor == Flavor::Tprobe {
            return Err(cur.err(
                at + i,
                7,
                "$retval is not available at a tracepoint: it fires inside the traced function",
            ));
        }
        returns = true;
    }
    if let (ProbeKind::Return { maxactive: Some(_) }, false) = (kind, returns) {
        return Err(cur.err(
            head_at + 1,
            kind_text.len() - 1,
            "maxactive applies only to return fprobes: add %return to the function (f100:EV SYM%return)",
        ));
    }
    if returns {
        if let ProbeKind::Entry = kind {
            kind = ProbeKind::Return { maxactive: None };
        }
    }
    Ok((target, kind))
}

/// Refuses a return probe (`kind`) that is not at its function's entry,
/// or a maxactive on a uretprobe.
fn check_return(
    cur: &Cursor,
    kind: ProbeKind,
    target: &Target,
    (head_at, kind_text): (usize, &str),
    (target_at, target_text): (usize, &str),
) -> Result<(), SpecError> {
    if let ProbeKind::Return { maxactive } = kind {
        if !target.at_entry() {
            return Err(cur.err(
                target_at,
                target_text.len(),
                "a return probe goes on a function's entry: remove the offset (r:SYM or r:SYM+0)",
            ));
        }
        if maxactive.is_some() && target.is_user() {
            return Err(cur.err(
                head_at + 1,
                kind_text.len() - 1,
                "maxactive applies to kernel return probes only; uretprobes have no such limit",
            ));
        }
    }
    Ok(())
}

/// Parses the fetch arguments `arg_toks` into `spec`, at most
/// [`MAX_ARGS`], `$arg*` once, each name once.
fn push_args(
    cur: &Cursor,
    spec: &mut ProbeSpec,
    arch: Arch,
    arg_toks: &[(usize, &str)],
) -> Result<(), SpecError> {
    if arg_toks.len() > MAX_ARGS {
        let (at, t) = arg_toks[MAX_ARGS];
        return Err(cur.err(
            at,
            t.len(),
            format!("at most {MAX_ARGS} arguments per probe"),
        ));
    }
    for &(at, text) in arg_toks {
        let arg = parse_arg(cur, spec, arch, at, text)?;
        if arg.fetch.base == FetchBase::AllArgs
            && spec.args.iter().any(|a| a.fetch.base == FetchBase::AllArgs)
        {
            // traceprobe_expand_meta_args: once only.
            return Err(cur.err(
                at,
                text.len(),
                "$arg* can be used only once: it already stands for every parameter",
            ));
        }
        spec.args.push(arg);
        check_names(cur, spec, at, text)?;
    }
    Ok(())
}

fn parse_kind(cur: &Cursor, at: usize, kind_text: &str) -> Result<(ProbeKind, Flavor), SpecError> {
    let flavor = match kind_text.as_bytes().first() {
        Some(b'f') => Flavor::Fprobe,
        Some(b't') => Flavor::Tprobe,
        _ => Flavor::Kprobe,
    };
    match kind_text.as_bytes().first() {
        Some(b'p') if kind_text.len() == 1 => Ok((ProbeKind::Entry, flavor)),
        Some(b'f' | b't') if kind_text.len() == 1 => Ok((ProbeKind::Entry, flavor)),
        Some(b't') => Err(cur.err(
            at + 1,
            kind_text.len() - 1,
            "a tracepoint probe takes no maxactive: write t:[GRP/]EVENT TRACEPOINT",
        )),
        Some(b'r' | b'f') => {
            let digits = &kind_text[1..];
            if digits.is_empty() {
                return Ok((ProbeKind::Return { maxactive: None }, flavor));
            }
            match digits.parse::<u32>() {
                Ok(n)
                    if (1..=MAX_MAXACTIVE).contains(&n)
                        && digits.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    Ok((ProbeKind::Return { maxactive: Some(n) }, flavor))
                }
                _ => Err(cur.err(
                    at + 1,
                    digits.len(),
                    format!(
                        "maxactive must be a number from 1 to {MAX_MAXACTIVE}, as in {}100:",
                        &kind_text[..1]
                    ),
                )),
            }
        }
        Some(b'p') => Err(cur.err(
            at + 1,
            kind_text.len() - 1,
            "maxactive applies only to return probes: write r100:, not p100:",
        )),
        Some(b'-') => Err(cur.err(
            at,
            kind_text.len(),
            "-:EVENT deletes a probe; it takes a colon and a name, as in -:myprobe",
        )),
        _ => Err(cur.err(
            at,
            kind_text.len().max(1),
            "a probe starts with p (entry), r (return), f (fprobe) or t (tracepoint), as in p:do_sys_openat2",
        )),
    }
}

/// Where `$retval` stands in an argument as the kernel looks for it
/// (parse_symbol_and_return: the text `$retval` not followed by a name
/// character).
fn find_retval(arg: &str) -> Option<usize> {
    let i = arg.find("$retval")?;
    let next = arg.as_bytes().get(i + 7).copied();
    (!next.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some(i)
}

/// The target of an `f:` or `t:` definition, and whether it carried
/// `%return`.
fn parse_dynamic_target(
    cur: &Cursor,
    flavor: Flavor,
    at: usize,
    text: &str,
) -> Result<(Target, bool), SpecError> {
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
    if name.is_empty() {
        return Err(cur.err(at, 1, "missing function name before %return"));
    }
    if flavor == Flavor::Tprobe {
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(cur.err(
                at,
                name.len(),
                "a tracepoint is named by letters, digits and _, as in sched_switch (no group, no glob)",
            ));
        }
        return Ok((
            Target::Tracepoint {
                name: name.to_string(),
            },
            false,
        ));
    }
    if let Some(i) = name.find(':') {
        return Err(cur.err(
            at,
            i + 1,
            "fprobe events take no MOD: prefix: name the function alone (modules' functions are found by name)",
        ));
    }
    if let Some(i) = outside_classes(name)
        .find(|&(_, b)| b == b'+' || b == b'-')
        .map(|(i, _)| i)
    {
        return Err(cur.err(
            at + i,
            name.len() - i,
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
    Ok((
        Target::Fprobe {
            name: name.to_string(),
        },
        returns,
    ))
}

type GroupEvent = (Option<String>, Option<String>);

fn parse_group_event(cur: &Cursor, at: usize, n: &str) -> Result<GroupEvent, SpecError> {
    let (g, e, e_at) = match n.split_once('/') {
        Some((g, e)) => (Some(g), e, at + g.len() + 1),
        None => (None, n, at),
    };
    if let Some(g) = g {
        if !is_identifier(g) {
            return Err(cur.err(
                at,
                g.len().max(1),
                "group names are letters, digits and _, starting with a letter or _",
            ));
        }
    }
    if e.is_empty() {
        if g.is_some() {
            return Ok((g.map(str::to_string), None));
        }
        return Err(cur.err(
            e_at,
            1,
            "missing event name after the colon: write p:NAME SYM, or p SYM",
        ));
    }
    if !is_identifier(e) {
        return Err(cur.err(
            e_at,
            e.len(),
            "event names are letters, digits and _, starting with a letter or _",
        ));
    }
    // traceprobe_parse_event_name: both fit MAX_EVENT_NAME_LEN.
    if let Some(g) = g.filter(|g| g.len() > MAX_EVENT_NAME) {
        return Err(cur.err(
            at,
            g.len(),
            format!("group names are at most {MAX_EVENT_NAME} characters"),
        ));
    }
    if e.len() > MAX_EVENT_NAME {
        return Err(cur.err(
            e_at,
            e.len(),
            format!("event names are at most {MAX_EVENT_NAME} characters"),
        ));
    }
    Ok((g.map(str::to_string), Some(e.to_string())))
}

/// `SYM[+offs]` (shared by kernel and user symbols).
/// Glob metacharacters allowed in kernel function and module names.
const GLOB_CHARS: &[u8] = b"*?[]!";

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
    let (name, offset) = match text.find(['+', '-']) {
        Some(i) => {
            let off_text = &text[i + 1..];
            if text.as_bytes()[i] == b'-' {
                return Err(cur.err(
                    at + i,
                    text.len() - i,
                    "offsets into a symbol are positive: SYM+OFFS",
                ));
            }
            let off = parse_number(off_text).ok_or_else(|| {
                cur.err(
                    at + i + 1,
                    off_text.len().max(1),
                    "not a valid offset: write SYM+0x10 or SYM+16",
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

/// The target, and whether it carried `%return`.
fn parse_target(cur: &Cursor, at: usize, text: &str) -> Result<(Target, bool), SpecError> {
    let (text, returns) = match text.strip_suffix("%return") {
        Some(t) => (t, true),
        None => (text, false),
    };
    if text.starts_with('/') {
        return Ok((parse_user_target(cur, at, text)?, returns));
    }
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

/// A uprobe's target: `PATH:SYMBOL[+offs]` or `PATH:0xOFFSET` (`text`,
/// at `at`, without `%return`).
fn parse_user_target(cur: &Cursor, at: usize, text: &str) -> Result<Target, SpecError> {
    let Some(colon) = text.rfind(':') else {
        return Err(cur.err(
            at,
            text.len(),
            "a uprobe target is PATH:SYMBOL[+offs] or PATH:0xOFFSET",
        ));
    };
    let (path, loc) = (&text[..colon], &text[colon + 1..]);
    let loc_at = at + colon + 1;
    if loc.is_empty() {
        return Err(cur.err(
            loc_at,
            1,
            "missing symbol or offset after the path: PATH:SYMBOL or PATH:0xOFFSET",
        ));
    }
    if loc.contains('(') {
        return Err(cur.err(
            loc_at,
            loc.len(),
            "reference counter offsets (PATH:OFFS(CTR)) are not supported",
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
        UserLocation::Offset(parse_number(loc).ok_or_else(|| {
            cur.err(
                loc_at,
                loc.len(),
                "not a valid file offset: write PATH:0x1234",
            )
        })?)
    } else {
        let (name, offset) = parse_sym_offset(cur, loc_at, loc)?;
        UserLocation::Symbol {
            name: name.to_string(),
            offset,
        }
    };
    Ok(Target::User {
        path: path.to_string(),
        location,
    })
}

fn parse_type(cur: &Cursor, at: usize, text: &str) -> Result<ArgType, SpecError> {
    let (base_text, array) = match text.strip_suffix(']').and_then(|t| t.split_once('[')) {
        Some((b, n)) => {
            let n_at = at + b.len() + 1;
            let len = match n.parse::<u32>() {
                Ok(v)
                    if (1..=MAX_ARRAY_LEN).contains(&v)
                        && n.bytes().all(|c| c.is_ascii_digit()) =>
                {
                    v
                }
                _ => {
                    return Err(cur.err(
                        n_at,
                        n.len().max(1),
                        format!("array length must be a number from 1 to {MAX_ARRAY_LEN}"),
                    ))
                }
            };
            (b, Some(len))
        }
        None => (text, None),
    };
    let unknown = || {
        cur.err(at, base_text.len().max(1), format!("unknown type {base_text}: use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>"))
    };
    let base = match base_text {
        "string" => BaseType::String,
        "ustring" => BaseType::UString,
        "symbol" => BaseType::Symbol,
        "char" => BaseType::Char,
        "symstr" => BaseType::SymStr,
        "%pd" => BaseType::Dentry,
        "%pD" => BaseType::File,
        t if t.starts_with('b') && t.contains('@') => parse_bitfield(cur, at, t)?,
        t => {
            let mut chars = t.chars();
            let k = chars.next().map_or("", |c| match c {
                'u' => "u",
                's' => "s",
                'x' => "x",
                _ => "?",
            });
            let bits = chars.as_str();
            let bits: u8 = match bits.parse() {
                Ok(b @ (8 | 16 | 32 | 64)) if bits.bytes().all(|c| c.is_ascii_digit()) => b,
                Ok(_) if matches!(k, "u" | "s" | "x") => {
                    return Err(cur.err(
                        at,
                        t.len(),
                        format!("{t} is not a size: integer types are 8, 16, 32 or 64 bits"),
                    ))
                }
                _ => return Err(unknown()),
            };
            match k {
                "u" => BaseType::Unsigned(bits),
                "s" => BaseType::Signed(bits),
                "x" => BaseType::Hex(bits),
                _ => return Err(unknown()),
            }
        }
    };
    Ok(ArgType { base, array })
}

fn parse_bitfield(cur: &Cursor, at: usize, t: &str) -> Result<BaseType, SpecError> {
    let bad = |msg: &str| cur.err(at, t.len(), msg.to_string());
    let syntax = "a bitfield is b<width>@<offset>/<container>, as in b4@2/32";
    let (width, rest) = t[1..].split_once('@').ok_or_else(|| bad(syntax))?;
    let (offset, container) = rest.split_once('/').ok_or_else(|| bad(syntax))?;
    let num = |s: &str| {
        s.parse::<u8>()
            .ok()
            .filter(|_| s.bytes().all(|c| c.is_ascii_digit()))
    };
    let (Some(width), Some(offset), Some(container)) = (num(width), num(offset), num(container))
    else {
        return Err(bad(syntax));
    };
    if !matches!(container, 8 | 16 | 32 | 64) {
        return Err(bad("a bitfield's container is 8, 16, 32 or 64 bits"));
    }
    if width == 0 || u16::from(width) + u16::from(offset) > u16::from(container) {
        return Err(cur.err(at, t.len(), format!("a bitfield of {width} bits at bit {offset} does not fit in a container of {container} bits")));
    }
    Ok(BaseType::Bitfield {
        width,
        offset,
        container,
    })
}

/// Splits `NAME=BODY`; the name is present when the text before the first
/// `=` is made of name characters (an immediate string may contain `=`).
fn split_name(text: &str) -> (Option<&str>, &str, usize) {
    match text.split_once('=') {
        Some((n, b))
            if !n.starts_with('\\')
                && n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') =>
        {
            (Some(n), b, n.len() + 1)
        }
        _ => (None, text, 0),
    }
}

/// Splits `FETCH:TYPE`, ignoring colons inside an immediate string.
fn split_type(body: &str) -> (&str, Option<&str>) {
    if let Some(rest) = body.strip_prefix("\\\"") {
        return match rest.find('"') {
            Some(q) => {
                let end = 2 + q + 1;
                match body[end..].strip_prefix(':') {
                    Some(t) => (&body[..end], Some(t)),
                    None => (body, None),
                }
            }
            None => (body, None),
        };
    }
    match body.rsplit_once(':') {
        Some((s, t)) => (s, Some(t)),
        None => (body, None),
    }
}

fn parse_fetch(
    cur: &Cursor,
    spec: &ProbeSpec,
    arch: Arch,
    at: usize,
    text: &str,
) -> Result<Fetch, SpecError> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut opened: Vec<Deref> = Vec::new();
    // `+|-[u]OFFS(` prefixes, outermost first.
    while pos < bytes.len() && (bytes[pos] == b'+' || bytes[pos] == b'-') {
        let Some(paren) = text[pos..].find('(') else {
            if text[pos..].contains(')') {
                return Err(cur.err(
                    at + pos,
                    text.len() - pos,
                    "a dereference is +OFFS(FETCHARG), as in +8(%di)",
                ));
            }
            break;
        };
        let sign = bytes[pos];
        let mut digits = &text[pos + 1..pos + paren];
        let user = digits.starts_with('u');
        if user {
            digits = &digits[1..];
        }
        let offset = parse_signed(sign, digits).ok_or_else(|| {
            cur.err(at + pos, paren + 1, "a dereference is +OFFS(FETCHARG) with a number for OFFS, as in +8(%di) or -0x10(%si)")
        })?;
        opened.push(Deref { offset, user });
        pos += paren + 1;
    }
    let base_end = text[pos..].find(')').map_or(text.len(), |i| pos + i);
    let closers = &text[base_end..];
    if closers.len() != opened.len() || !closers.bytes().all(|b| b == b')') {
        return Err(cur.err(
            at + base_end.min(text.len().saturating_sub(1)),
            closers.len().max(1),
            format!(
                "unbalanced parentheses: {} opened, {} closed",
                opened.len(),
                closers.bytes().filter(|&b| b == b')').count()
            ),
        ));
    }
    let base_text = &text[pos..base_end];
    let base_at = at + pos;
    let base = parse_base(cur, spec, arch, base_at, base_text)?;
    if !opened.is_empty() && matches!(base, FetchBase::Comm | FetchBase::Immediate(_)) {
        return Err(cur.err(
            base_at,
            base_text.len(),
            format!("{base_text} cannot be dereferenced"),
        ));
    }
    opened.reverse();
    Ok(Fetch {
        base,
        derefs: opened,
    })
}

fn parse_base(
    cur: &Cursor,
    spec: &ProbeSpec,
    arch: Arch,
    at: usize,
    text: &str,
) -> Result<FetchBase, SpecError> {
    let err = |msg: String| Err(cur.err(at, text.len().max(1), msg));
    if text.is_empty() {
        return err("missing fetch argument: use %REG, $argN, $retval, $stack, $stackN, $comm, @ADDR, @SYM or +OFFS(...)".into());
    }
    if let Some(reg) = text.strip_prefix('%') {
        // parse_probe_arg: fprobe and tracepoint probes have no registers.
        if spec.target.is_dynamic_only() {
            return err(format!("%{reg}: fprobe and tracepoint probes cannot fetch registers: use $argN, a parameter name or $retval"));
        }
        if arch.register(reg).is_none() {
            let hint = arch
                .closest_register(reg)
                .map(|r| format!("; did you mean %{r}?"))
                .unwrap_or_default();
            return err(format!("unknown register %{reg} on {}{hint}", arch.name()));
        }
        return Ok(FetchBase::Register(reg.to_string()));
    }
    if let Some(var) = text.strip_prefix('$') {
        return parse_variable(cur, spec, at, text, var);
    }
    if let Some(mem) = text.strip_prefix('@') {
        return parse_memory(cur, spec, at, text, mem);
    }
    if let Some(imm) = text.strip_prefix('\\') {
        return parse_immediate(cur, at, text, imm);
    }
    if is_identifier(text) {
        check_btf_place(spec, text).map_err(|m| cur.err(at, text.len(), m))?;
        return Ok(FetchBase::Name(text.to_string()));
    }
    if text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && text.contains(['.', '-'])
    {
        return parse_member(cur, spec, at, text);
    }
    err(format!("unknown fetch argument {text}: use %REG, $argN, $retval, $stack, $stackN, $comm, @ADDR, @SYM, +OFFS(...) or a BTF argument name"))
}

/// `$VAR` (`var`, of the whole fetch argument `text` at `at`).
fn parse_variable(
    cur: &Cursor,
    spec: &ProbeSpec,
    at: usize,
    text: &str,
    var: &str,
) -> Result<FetchBase, SpecError> {
    let err = |msg: String| Err(cur.err(at, text.len().max(1), msg));
    match var {
        "retval" => {
            if !spec.is_return() {
                return err(
                    "$retval is only available at a return probe: use r: instead of p:".into(),
                );
            }
            Ok(FetchBase::Retval)
        }
        "stack" => Ok(FetchBase::Stack),
        "comm" | "COMM" => Ok(FetchBase::Comm),
        v if v.starts_with("stack") => match v[5..].parse::<u32>() {
            Ok(n) if v[5..].bytes().all(|b| b.is_ascii_digit()) => Ok(FetchBase::StackEntry(n)),
            _ => err("$stack takes a number from 0, as in $stack0".into()),
        },
        "arg*" => {
            check_btf_place(spec, "$arg*").map_err(|m| cur.err(at, text.len(), m))?;
            Ok(FetchBase::AllArgs)
        }
        v if v.starts_with("arg") => {
            let n = match v[3..].parse::<u32>() {
                Ok(n) if v[3..].bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return err("$arg takes a number from 1, as in $arg1".into()),
            };
            if n == 0 {
                return err("arguments count from 1: $arg1 is the first".into());
            }
            // A return probe's $argN is saved at the entry by the kernel
            // (6.10+, "kernel return probes support: $retval, $arg<N>"
            // in tracefs's README); the planner checks the kernel has it.
            if spec.is_return() && spec.target.is_user() {
                return err(format!("$arg{n} is not available at a uprobe's return: the argument registers are overwritten by then"));
            }
            if !spec.target.at_entry() {
                return err(format!("$arg{n} is only meaningful at a function's entry (offset 0); fetch the register instead"));
            }
            Ok(FetchBase::Arg(n))
        }
        _ => err(format!(
            "unknown variable ${var}: use $argN, $retval, $stack, $stackN or $comm"
        )),
    }
}

/// `@ADDR`, `@SYM[+|-OFFS]` or `@+OFFS` (`mem`, after the `@`).
fn parse_memory(
    cur: &Cursor,
    spec: &ProbeSpec,
    at: usize,
    text: &str,
    mem: &str,
) -> Result<FetchBase, SpecError> {
    let err = |msg: String| Err(cur.err(at, text.len().max(1), msg));
    if let Some(off) = mem.strip_prefix('+') {
        if !spec.target.is_user() {
            return err("@+OFFS reads a file offset of a uprobe's binary; for kernel memory use @ADDR or @SYM".into());
        }
        return match parse_number(off) {
            Some(o) => Ok(FetchBase::FileOffset(o)),
            None => err("not a valid file offset: write @+0x1234".into()),
        };
    }
    if mem.starts_with(|c: char| c.is_ascii_digit()) {
        return match parse_number(mem) {
            Some(a) => Ok(FetchBase::Address(a)),
            None => err("not a valid address: write @0xffffffff82000000".into()),
        };
    }
    if spec.target.is_user() {
        return err("@SYM reads kernel memory; in a uprobe use @+OFFS (a file offset)".into());
    }
    let (name, offset) = match mem.find(['+', '-']) {
        Some(i) => match parse_signed(mem.as_bytes()[i], &mem[i + 1..]) {
            Some(o) => (&mem[..i], o),
            None => return err("not a valid offset: write @SYM+8 or @SYM-0x10".into()),
        },
        None => (mem, 0),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        || name.starts_with(|c: char| c.is_ascii_digit())
    {
        return err("not a symbol name after @: write @jiffies or @SYM+OFFS".into());
    }
    Ok(FetchBase::Symbol {
        name: name.to_string(),
        offset,
    })
}

/// `\NUMBER` or `\"text"` (`imm`, after the backslash).
fn parse_immediate(cur: &Cursor, at: usize, text: &str, imm: &str) -> Result<FetchBase, SpecError> {
    let err = |msg: String| Err(cur.err(at, text.len().max(1), msg));
    if let Some(s) = imm.strip_prefix('"') {
        return match s.strip_suffix('"') {
            Some(body) if !body.contains('"') => {
                Ok(FetchBase::Immediate(Immediate::String(body.to_string())))
            }
            _ => err("an immediate string is \\\"text\" with one pair of quotes".into()),
        };
    }
    let value = match imm.strip_prefix('-') {
        Some(d) => parse_signed(b'-', d),
        None => parse_signed(b'+', imm),
    };
    match value {
        Some(v) => Ok(FetchBase::Immediate(Immediate::Number(v))),
        None => err("an immediate is \\NUMBER or \\\"text\"".into()),
    }
}

/// Where BTF names may be used (parse_btf_arg, traceprobe_expand_meta_args):
/// at the entry of one kernel function (or its return), or on a tracepoint.
fn check_btf_place(spec: &ProbeSpec, what: &str) -> Result<(), String> {
    match &spec.target {
        Target::User { .. } => Err(format!(
            "{what} needs the kernel's BTF: uprobes have none; fetch registers or $argN"
        )),
        Target::Fprobe { name } if name.bytes().any(|b| GLOB_CHARS.contains(&b)) => Err(format!(
            "{what} needs one function's BTF, and {name} is a glob of functions: use $argN"
        )),
        Target::Symbol { offset, .. } if *offset != 0 => Err(format!(
            "{what} reads parameters, which only the function entry has: remove the offset"
        )),
        Target::Address(_) => Err(format!(
            "{what} needs a function name to find its BTF: probe the function by name"
        )),
        _ => Ok(()),
    }
}

/// `NAME->field[->field|.field...]` (parse_btf_arg, parse_btf_field).
fn parse_member(
    cur: &Cursor,
    spec: &ProbeSpec,
    at: usize,
    text: &str,
) -> Result<FetchBase, SpecError> {
    let root_end = text.find(['.', '-']).unwrap_or(text.len());
    let name = &text[..root_end];
    if !is_identifier(name) {
        return Err(cur.err(
            at,
            root_end.max(1),
            format!("{name} is not a parameter name"),
        ));
    }
    check_btf_place(spec, &format!("{name}->...")).map_err(|m| cur.err(at, text.len(), m))?;
    let mut path = Vec::new();
    let mut pos = root_end;
    while pos < text.len() {
        let rest = &text[pos..];
        let (through_pointer, sep) = if rest.starts_with("->") {
            (true, 2)
        } else if rest.starts_with('.') {
            (false, 1)
        } else {
            return Err(cur.err(
                at + pos,
                rest.len(),
                "members are reached with ->field (through a pointer) or .field (within a struct)",
            ));
        };
        let field_at = pos + sep;
        let field_end = text[field_at..]
            .find(['.', '-'])
            .map_or(text.len(), |i| field_at + i);
        let field = &text[field_at..field_end];
        if !is_identifier(field) {
            return Err(cur.err(
                at + field_at.min(text.len() - 1),
                field.len().max(1),
                "missing member name: write NAME->field or NAME->field.sub",
            ));
        }
        path.push(Member {
            through_pointer,
            field: field.to_string(),
        });
        pos = field_end;
    }
    Ok(FetchBase::Member {
        name: name.to_string(),
        path,
    })
}

fn parse_arg(
    cur: &Cursor,
    spec: &ProbeSpec,
    arch: Arch,
    at: usize,
    text: &str,
) -> Result<FetchArg, SpecError> {
    let (name, body, body_off) = split_name(text);
    if name == Some("") {
        return Err(cur.err(at, 1, "missing argument name before =: write NAME=FETCHARG"));
    }
    if let Some(n) = name {
        if !is_identifier(n) {
            return Err(cur.err(
                at,
                n.len().max(1),
                "argument names are letters, digits and _, starting with a letter or _",
            ));
        }
        if n.len() > MAX_ARG_NAME {
            return Err(cur.err(
                at,
                n.len(),
                format!("argument names are at most {MAX_ARG_NAME} characters"),
            ));
        }
        if RESERVED_NAMES.contains(&n) {
            return Err(cur.err(
                at,
                n.len(),
                format!("{n} is a field name the kernel reserves; pick another name"),
            ));
        }
    }
    let body_at = at + body_off;
    let (fetch_text, type_text) = split_type(body);
    let ty = match type_text {
        Some(t) => Some(parse_type(cur, body_at + fetch_text.len() + 1, t)?),
        None => None,
    };
    let fetch = parse_fetch(cur, spec, arch, body_at, fetch_text)?;
    if fetch.base == FetchBase::AllArgs
        && (name.is_some() || ty.is_some() || !fetch.derefs.is_empty())
    {
        // traceprobe_expand_meta_args only expands `$arg*` written alone.
        return Err(cur.err(
            at,
            text.len(),
            "$arg* stands alone: it expands to every parameter with its own name and type",
        ));
    }
    let arg = FetchArg {
        name: name.map(str::to_string),
        fetch,
        ty,
    };
    check_type(cur, &arg, body_at, fetch_text, type_text)?;
    Ok(arg)
}

/// Rules that tie a type to where the value comes from.
fn check_type(
    cur: &Cursor,
    arg: &FetchArg,
    at: usize,
    fetch_text: &str,
    type_text: Option<&str>,
) -> Result<(), SpecError> {
    let ty_at = at + fetch_text.len() + 1;
    let ty_len = type_text.map_or(1, str::len);
    let Some(ty) = arg.ty else {
        return Ok(());
    };
    let memory = arg.fetch.reads_memory();
    match &arg.fetch.base {
        FetchBase::Comm
            if arg.fetch.derefs.is_empty()
                && !(ty.base == BaseType::String && ty.array.is_none()) =>
        {
            return Err(cur.err(
                ty_at,
                ty_len,
                "$comm is a string: leave out the type or write $comm:string",
            ));
        }
        FetchBase::Immediate(Immediate::String(_))
            if !(ty.base == BaseType::String && ty.array.is_none()) =>
        {
            return Err(cur.err(ty_at, ty_len, "an immediate string has type string"));
        }
        _ => {}
    }
    if matches!(ty.base, BaseType::Dentry | BaseType::File) {
        return check_dentry_type(cur, arg, ty, ty_at, ty_len);
    }
    if ty.base == BaseType::SymStr {
        // symstr turns any value into `sym+off/size`; only strings of
        // text cannot be one.
        if matches!(
            arg.fetch.base,
            FetchBase::Comm | FetchBase::Immediate(Immediate::String(_))
        ) && arg.fetch.derefs.is_empty()
        {
            return Err(cur.err(
                ty_at,
                ty_len,
                "symstr names an address: $comm and strings are not addresses",
            ));
        }
        if ty.array.is_some() && !memory {
            return Err(cur.err(ty_at, ty_len, format!("arrays are read from memory: write +0({fetch_text}):{ty}, not {fetch_text}:{ty}")));
        }
        return Ok(());
    }
    let string_source = memory
        || matches!(
            arg.fetch.base,
            FetchBase::Comm | FetchBase::Immediate(Immediate::String(_))
        );
    if ty.base.is_string() && !string_source {
        return Err(cur.err(
            ty_at,
            ty_len,
            format!(
                "{} reads memory at an address: write +0({fetch_text}):{}, not {fetch_text}:{}",
                ty.base, ty.base, ty.base
            ),
        ));
    }
    if ty.array.is_some() && !memory {
        return Err(cur.err(
            ty_at,
            ty_len,
            format!(
                "arrays are read from memory: write +0({fetch_text}):{ty}, not {fetch_text}:{ty}"
            ),
        ));
    }
    Ok(())
}

/// Checks a `%pd`/`%pD` type (`ty`, written at `ty_at`) on `arg`.
fn check_dentry_type(
    cur: &Cursor,
    arg: &FetchArg,
    ty: ArgType,
    ty_at: usize,
    ty_len: usize,
) -> Result<(), SpecError> {
    // traceprobe_expand_dentry_args rewrites `ARG:%pd` only when the
    // type is exactly `%pd`/`%pD`, of a pointer.
    if ty.array.is_some() {
        return Err(cur.err(
            ty_at,
            ty_len,
            format!("{} takes no array: it names one dentry or file", ty.base),
        ));
    }
    if matches!(
        arg.fetch.base,
        FetchBase::Comm | FetchBase::Immediate(_) | FetchBase::Retval
    ) && arg.fetch.derefs.is_empty()
    {
        return Err(cur.err(
            ty_at,
            ty_len,
            format!(
                "{} prints the name of a struct {} pointer: fetch one, as in file:%pD",
                ty.base,
                if ty.base == BaseType::File {
                    "file"
                } else {
                    "dentry"
                }
            ),
        ));
    }
    Ok(())
}

/// Argument names (given or generated) must be unique.
fn check_names(cur: &Cursor, spec: &ProbeSpec, at: usize, text: &str) -> Result<(), SpecError> {
    let last = spec.args.len() - 1;
    let name = spec.arg_name(last);
    if (0..last).any(|j| spec.arg_name(j) == name) {
        return Err(cur.err(
            at,
            text.len(),
            format!("argument name {name} is used twice; names must be unique"),
        ));
    }
    Ok(())
}
