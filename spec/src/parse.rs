//! The kprobe_events parser and its validation rules.

use std::fmt;

use kprobe_perf_arch::Arch;

use super::target::{dynamic_suffix, parse_dynamic_target, parse_target, GLOB_CHARS, SDT_PREFIX};
use super::{
    args, proto, Definition, EventProbe, Fetch, FetchArg, FetchBase, ProbeKind, ProbeSpec, Span,
    Target, MAX_ARGS, MAX_EVENT_NAME, MAX_MAXACTIVE,
};

/// Which kind of dynamic event a definition's first letter asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
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
                if word.starts_with(SDT_PREFIX) {
                    // A whole probe in one word, marked where it is wrong.
                    return e;
                }
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
        if head.starts_with(SDT_PREFIX) {
            return parse_sdt(&cur, arch, &toks);
        }
        let (kind_text, name_part) = match head.split_once(':') {
            Some((k, n)) => (k, Some(n)),
            None => (head, None),
        };
        let (mut kind, flavor) = parse_kind(&cur, head_at, kind_text)?;
        if flavor == Flavor::Eprobe {
            return Err(cur.err(
                head_at,
                head.len(),
                "an event probe (e:) is a Definition::EventProbe, not a ProbeSpec: parse it with Definition::parse",
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
                let dynamic = DynamicHead {
                    flavor,
                    kind_text,
                    head_at,
                    name: (!short_form).then_some(name_part).flatten(),
                    name_at,
                };
                let (target, names) =
                    dynamic.parse(&cur, &mut kind, target_at, target_text, arg_toks)?;
                early_names = names;
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
        push_args(&cur, &mut spec, arch, arg_toks)?;
        Ok(spec)
    }
}

/// The SDT form on its own (`usdt:PATH:PROVIDER:NAME ARGS`), as bpftrace
/// writes it: an entry probe named by the kernel's rules; `toks` are its
/// words, the target first.
fn parse_sdt(cur: &Cursor, arch: Arch, toks: &[(usize, &str)]) -> Result<ProbeSpec, SpecError> {
    let Some(&(head_at, head)) = toks.first() else {
        return Err(cur.err(
            0,
            0,
            "empty probe definition; expected e.g. p:do_sys_openat2",
        ));
    };
    let (target, _) = parse_target(cur, head_at, head)?;
    let mut spec = ProbeSpec {
        kind: ProbeKind::Entry,
        group: None,
        event: None,
        target,
        args: Vec::new(),
    };
    push_args(cur, &mut spec, arch, &toks[1..])?;
    Ok(spec)
}

/// Parses each fetch argument of `toks` into `spec`, in order (at most
/// [`MAX_ARGS`]).
fn push_args(
    cur: &Cursor,
    spec: &mut ProbeSpec,
    arch: Arch,
    toks: &[(usize, &str)],
) -> Result<(), SpecError> {
    if toks.len() > MAX_ARGS {
        // The kernel (7.x; older ones log nothing) marks the first.
        let (at, _) = toks[0];
        let (last_at, last) = toks[toks.len() - 1];
        return Err(cur.err(
            at,
            last_at + last.len() - at,
            format!(
                "at most {MAX_ARGS} arguments per probe, and {} are given",
                toks.len()
            ),
        ));
    }
    for &(at, text) in toks {
        let arg = args::parse_arg(cur, spec, arch, at, text)?;
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

/// The first word of an fprobe, tracepoint or event probe: its flavor,
/// its kind's text (`f`, `f100`, `t`) at `head_at`, and its
/// `[GRP/]EVENT` (when not the short form) at `name_at`.
struct DynamicHead<'a> {
    flavor: Flavor,
    kind_text: &'a str,
    head_at: usize,
    name: Option<&'a str>,
    name_at: usize,
}

impl DynamicHead<'_> {
    /// The target of the probe and its names, checked in the kernel's
    /// order for these probes: the suffix (and a tracepoint's name),
    /// maxactive, the event name, and only then the function. `kind`
    /// becomes a return probe when the target or an argument says so.
    fn parse(
        &self,
        cur: &Cursor,
        kind: &mut ProbeKind,
        target_at: usize,
        target_text: &str,
        arg_toks: &[(usize, &str)],
    ) -> Result<(Target, Option<GroupEvent>), SpecError> {
        let (flavor, kind_text, head_at) = (self.flavor, self.kind_text, self.head_at);
        let (name, mut returns) = dynamic_suffix(cur, flavor, target_at, target_text)?;
        let has_return = returns || arg_toks.iter().any(|&(_, t)| find_retval(t).is_some());
        let extra = kind_text.len() - 1;
        match (flavor, *kind, has_return) {
            (Flavor::Fprobe, ProbeKind::Return { maxactive: Some(_) }, false) => {
                return Err(cur.err(
                    head_at + 1,
                    extra,
                    "maxactive applies only to return fprobes: add %return to the function (f100:EV SYM%return)",
                ));
            }
            (Flavor::Tprobe, _, _) if kind_text[1..].starts_with(|c: char| c.is_ascii_digit()) => {
                return Err(cur.err(
                    head_at + 1,
                    extra,
                    "a tracepoint probe takes no maxactive: write t:[GRP/]EVENT TRACEPOINT",
                ));
            }
            _ => {}
        }
        let names = match self.name {
            Some(n) => Some(parse_group_event(cur, self.name_at, n)?),
            None => None,
        };
        let target = parse_dynamic_target(cur, flavor, target_at, name)?;
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
        if returns && *kind == ProbeKind::Entry {
            *kind = ProbeKind::Return { maxactive: None };
        }
        Ok((target, names))
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
