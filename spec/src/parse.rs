//! The kprobe_events parser and its validation rules.

use std::fmt;

use kprobe_perf_arch::Arch;

use super::{
    args, proto, Definition, EventProbe, Fetch, FetchArg, FetchBase, ProbeKind, ProbeSpec, Span,
    Target, UserLocation, MAX_ARGS, MAX_EVENT_NAME, MAX_MAXACTIVE,
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
    /// `e:` (trace_eprobe.c, probes on trace events).
    Eprobe,
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
    /// Parsing an event probe's arguments (`$FIELD`, no registers).
    pub(crate) eprobe: bool,
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

/// A group name as the kernel takes it (is_good_system_name): an
/// identifier in which `-` is also allowed.
pub(crate) fn is_group_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
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
pub(crate) fn parse_signed(sign: u8, digits: &str) -> Option<i64> {
    let v = parse_number(digits)?;
    if sign == b'-' {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

impl Definition {
    /// Parses one line: a probe (any form), an event probe, or a `-:`
    /// deletion.
    pub fn parse(input: &str, arch: Arch) -> Result<Definition, SpecError> {
        let cur = Cursor {
            input,
            eprobe: false,
        };
        let toks = tokens(input);
        if let Some(&(at, head)) = toks.first() {
            if let Some(rest) = head.strip_prefix("-:") {
                return parse_delete(&cur, at, rest, &toks[1..]);
            }
            if head.starts_with('e') && !head.starts_with("e-") {
                return parse_eprobe(input, arch, &toks).map(Definition::EventProbe);
            }
        }
        ProbeSpec::parse(input, arch).map(Definition::Probe)
    }
}

/// `-:[GRP/]EVENT [PROBE-POINT [ARGS]]` (dyn_event_release).
fn parse_delete(
    cur: &Cursor,
    at: usize,
    rest: &str,
    words: &[(usize, &str)],
) -> Result<Definition, SpecError> {
    let (group, event, ev_at) = match rest.split_once('/') {
        Some((g, e)) => (Some(g), e, at + 3 + g.len()),
        None => (None, rest, at + 2),
    };
    if let Some(g) = group {
        if !is_group_name(g) {
            return Err(cur.err(
                at + 2,
                g.len().max(1),
                "group names are letters, digits, _ and -, starting with a letter or _",
            ));
        }
    }
    // `-:GRP/` names every event of the group.
    if !(is_identifier(event) || event.is_empty() && group.is_some()) {
        return Err(cur.err(
            ev_at,
            event.len().max(1),
            "name the event to delete: -:EVENT or -:GRP/EVENT",
        ));
    }
    Ok(Definition::Delete {
        group: group.map(str::to_string),
        event: event.to_string(),
        matching: words.iter().map(|&(_, w)| w.to_string()).collect(),
    })
}

/// `e[:[GRP/][EVENT]] SYSTEM.EVENT [ARGS]` (__trace_eprobe_create: the
/// attached event is checked first, then the event name, then the
/// arguments).
fn parse_eprobe(input: &str, arch: Arch, toks: &[(usize, &str)]) -> Result<EventProbe, SpecError> {
    let cur = Cursor {
        input,
        eprobe: true,
    };
    let (head_at, head) = toks[0];
    let (kind_text, name_part) = match head.split_once(':') {
        Some((k, n)) => (k, Some(n)),
        None => (head, None),
    };
    let Some(&(target_at, target)) = toks.get(1) else {
        return Err(cur.err(
            head_at,
            head.len(),
            "missing the attached event: e:[GRP/]EVENT SYSTEM.EVENT",
        ));
    };
    let Some((system, attached)) = target.split_once(['.', '/']) else {
        return Err(cur.err(
            target_at,
            target.len(),
            "an event probe attaches to SYSTEM.EVENT, as in sched.sched_switch",
        ));
    };
    if !is_group_name(system) || !is_identifier(attached) {
        return Err(cur.err(
            target_at,
            target.len(),
            "an event probe attaches to SYSTEM.EVENT, as in sched.sched_switch",
        ));
    }
    let (group, event) = match name_part {
        Some(n) => parse_group_event(&cur, head_at + kind_text.len() + 1, n)?,
        None => (None, None),
    };
    let arg_toks = &toks[2..];
    if arg_toks.len() > MAX_ARGS {
        let (at, _) = arg_toks[0];
        return Err(cur.err(
            at,
            1,
            format!(
                "at most {MAX_ARGS} arguments per probe, and {} are given",
                arg_toks.len()
            ),
        ));
    }
    // The arguments are parsed as a tracepoint probe's would be, with
    // `$FIELD` for the event's fields.
    let mut spec = ProbeSpec {
        kind: ProbeKind::Entry,
        group: None,
        event: None,
        target: Target::Tracepoint {
            name: attached.to_string(),
        },
        args: Vec::new(),
    };
    for &(at, text) in arg_toks {
        let arg = args::parse_arg(&cur, &spec, arch, at, text)?;
        spec.args.push(arg);
        check_names(&cur, &spec, at, text)?;
    }
    Ok(EventProbe {
        group,
        event,
        system: system.to_string(),
        attached: attached.to_string(),
        args: spec.args,
    })
}

impl ProbeSpec {
    /// Parses and validates one probe definition for `arch`.
    ///
    /// The checks run in the kernel's order (the kind and maxactive,
    /// then the target, then the event name, then each argument), so a
    /// definition with several mistakes is refused for the one the
    /// kernel's `error_log` names.
    pub fn parse(input: &str, arch: Arch) -> Result<ProbeSpec, SpecError> {
        if proto::looks_like_prototype(input) {
            return proto::parse(input, arch);
        }
        // One word is no kind of dynamic event to the kernel (7.x marks it
        // at its start, older kernels log nothing), unless it is
        // kprobe-perf's short form `p:SYM`.
        let words = tokens(input);
        Self::parse_words(input, arch).map_err(|mut e| {
            if let [(at, word)] = words[..] {
                e.span = Span {
                    start: at,
                    len: word.len(),
                };
            }
            e
        })
    }

    fn parse_words(input: &str, arch: Arch) -> Result<ProbeSpec, SpecError> {
        let cur = Cursor {
            input,
            eprobe: false,
        };
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
        if flavor == Flavor::Eprobe {
            return Err(cur.err(
                head_at,
                head.len(),
                "event probes (e:) can be checked (Definition::parse) but not recorded yet",
            ));
        }

        // Short form `p:SYM [ARGS]` (kprobe-perf's own): what follows the
        // colon is the target when it cannot be an event name, or only
        // fetch args follow it.
        let next_is_arg = toks.get(1).is_none_or(|&(_, t)| looks_like_fetch_arg(t));
        let short_form = name_part.is_some_and(|n| {
            !n.is_empty()
                && (n.contains([':', '+', '%'])
                    || n.bytes().any(|b| GLOB_CHARS.contains(&b))
                    || next_is_arg)
        });
        let name_at = head_at + kind_text.len() + 1;
        let (target_at, target_text, args_from) = if short_form {
            (name_at, name_part.unwrap_or_default(), 1)
        } else {
            let Some(&(target_at, target_text)) = toks.get(1) else {
                // The kernel marks the place after the last word.
                return Err(cur.err(
                    input.trim_end().len() + 1,
                    1,
                    "missing probe target: give a symbol (do_sys_openat2), symbol+offset, or address",
                ));
            };
            (target_at, target_text, 2)
        };
        let arg_toks = &toks[args_from.min(toks.len())..];
        let mut early_names = None;
        let (target, returns) = match flavor {
            Flavor::Kprobe => parse_target(&cur, target_at, target_text)?,
            Flavor::Fprobe | Flavor::Tprobe | Flavor::Eprobe => {
                // The kernel's order for these: the suffix (and a
                // tracepoint's name), maxactive, the event name, and only
                // then the function.
                let (name, mut returns) = dynamic_suffix(&cur, flavor, target_at, target_text)?;
                let has_return = returns || arg_toks.iter().any(|&(_, t)| find_retval(t).is_some());
                let extra = kind_text.len() - 1;
                match (flavor, kind, has_return) {
                    (Flavor::Fprobe, ProbeKind::Return { maxactive: Some(_) }, false) => {
                        return Err(cur.err(
                            head_at + 1,
                            extra,
                            "maxactive applies only to return fprobes: add %return to the function (f100:EV SYM%return)",
                        ));
                    }
                    (Flavor::Tprobe, _, _)
                        if kind_text[1..].starts_with(|c: char| c.is_ascii_digit()) =>
                    {
                        return Err(cur.err(
                            head_at + 1,
                            extra,
                            "a tracepoint probe takes no maxactive: write t:[GRP/]EVENT TRACEPOINT",
                        ));
                    }
                    _ => {}
                }
                if let (false, Some(n)) = (short_form, name_part) {
                    early_names = Some(parse_group_event(&cur, name_at, n)?);
                }
                let target = parse_dynamic_target(&cur, flavor, target_at, name)?;
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
                if returns {
                    if let ProbeKind::Entry = kind {
                        kind = ProbeKind::Return { maxactive: None };
                    }
                }
                (target, false)
            }
        };
        // `r SYM%return` is a return probe said twice, which the kernel
        // takes. Whether an offset is the function's entry (+4 after an
        // ENDBR, the ftrace site) is the kernel's to say
        // (kprobe_on_func_entry): the planner checks it.
        if returns && kind == ProbeKind::Entry {
            kind = ProbeKind::Return { maxactive: None };
        }
        let (group, event) = match (early_names, short_form, name_part) {
            (Some(names), _, _) => names,
            (None, false, Some(n)) => parse_group_event(&cur, name_at, n)?,
            _ => (None, None),
        };
        let mut spec = ProbeSpec {
            kind,
            group,
            event,
            target,
            args: Vec::new(),
        };
        if arg_toks.len() > MAX_ARGS {
            // The kernel (7.x; older ones log nothing) marks the first.
            let (at, _) = arg_toks[0];
            let (last_at, last) = arg_toks[arg_toks.len() - 1];
            return Err(cur.err(
                at,
                last_at + last.len() - at,
                format!(
                    "at most {MAX_ARGS} arguments per probe, and {} are given",
                    arg_toks.len()
                ),
            ));
        }
        for &(at, text) in arg_toks {
            let arg = args::parse_arg(&cur, &spec, arch, at, text)?;
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
            check_names(&cur, &spec, at, text)?;
        }
        Ok(spec)
    }
}

fn parse_kind(cur: &Cursor, at: usize, kind_text: &str) -> Result<(ProbeKind, Flavor), SpecError> {
    let flavor = match kind_text.as_bytes().first() {
        Some(b'f') => Flavor::Fprobe,
        Some(b't') => Flavor::Tprobe,
        Some(b'e') => Flavor::Eprobe,
        _ => Flavor::Kprobe,
    };
    // As the kernel reads the head: a maxactive is looked for only when
    // a digit follows the letter; anything else up to the colon is
    // ignored (`rx:EV` is `r:EV`).
    let rest = kind_text.get(1..).unwrap_or_default();
    let digits = rest.starts_with(|c: char| c.is_ascii_digit());
    match kind_text.as_bytes().first() {
        Some(b'p' | b'f' | b't' | b'e') if !digits => Ok((ProbeKind::Entry, flavor)),
        // A tracepoint's maxactive is refused after its target is read.
        Some(b'e' | b't') => Ok((ProbeKind::Entry, flavor)),
        Some(b'r') if !digits => Ok((ProbeKind::Return { maxactive: None }, flavor)),
        Some(b'r' | b'f') => match parse_number(rest) {
            Some(n) if (1..=u64::from(MAX_MAXACTIVE)).contains(&n) => Ok((
                ProbeKind::Return {
                    maxactive: u32::try_from(n).ok(),
                },
                flavor,
            )),
            _ => Err(cur.err(
                at + 1,
                rest.len(),
                format!(
                    "maxactive must be a number from 1 to {MAX_MAXACTIVE}, as in {}100:",
                    &kind_text[..1]
                ),
            )),
        },
        Some(b'p') => Err(cur.err(
            at + 1,
            rest.len(),
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
            "a probe starts with p (entry), r (return), f (fprobe), t (tracepoint) or e (event probe), as in p:do_sys_openat2",
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
/// The suffix of an `f:` or `t:` target, and a tracepoint's name
/// (parse_symbol_and_return, which the kernel runs before it reads the
/// event name): the name, and whether it carried `%return`.
fn dynamic_suffix<'t>(
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
fn parse_dynamic_target(
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

type GroupEvent = (Option<String>, Option<String>);

fn parse_group_event(cur: &Cursor, at: usize, n: &str) -> Result<GroupEvent, SpecError> {
    // traceprobe_parse_event_name: the group ends at the first `/`, or
    // at the first `.` when there is no `/`.
    let split = n.split_once('/').or_else(|| n.split_once('.'));
    let (g, e, e_at) = match split {
        Some((g, e)) => (Some(g), e, at + g.len() + 1),
        None => (None, n, at),
    };
    if let Some(g) = g {
        if !is_group_name(g) {
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
fn parse_target(cur: &Cursor, at: usize, text: &str) -> Result<(Target, bool), SpecError> {
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

/// Argument names (given or generated) must be unique. A `$argN` without
/// a name is left out: kernels with BTF arguments name it after the
/// parameter, older ones `argN` (checked against the README by
/// [`crate::KernelFeatures::lacking`]).
fn check_names(cur: &Cursor, spec: &ProbeSpec, at: usize, text: &str) -> Result<(), SpecError> {
    let last = spec.args.len() - 1;
    if unnamed_arg(spec, last) {
        return Ok(());
    }
    let name = spec.arg_name(last);
    if (0..last).any(|j| !unnamed_arg(spec, j) && spec.arg_name(j) == name) {
        return Err(cur.err(
            at,
            text.len(),
            format!("argument name {name} is used twice; names must be unique"),
        ));
    }
    Ok(())
}

/// True for argument `i` written as a bare `$argN` (no name, no
/// dereference) in a kernel probe, whose name depends on the kernel.
pub(crate) fn unnamed_arg(spec: &ProbeSpec, i: usize) -> bool {
    matches!(
        spec.args.get(i),
        Some(FetchArg { name: None, fetch: Fetch { base: FetchBase::Arg(_), derefs }, .. }) if derefs.is_empty()
    ) && !spec.target.is_user()
}
