//! The probe language: kprobe_events definitions parsed into a typed AST.
//! Pure: no I/O, no symbol lookup.
//!
//! Supported so far: `p[:[GRP/]EVENT] SYM[+offs]|MEMADDR [FETCHARGS]` and
//! `r[MAXACTIVE][:[GRP/]EVENT] SYM[+0] [FETCHARGS]`, plus the short form
//! `p:SYM[+offs] [FETCHARGS]` (the colon followed by the target when no
//! event name is wanted, as in `p:do_sys_openat2 dfd=%di`), with fetch args
//! `[NAME=](%REG|$argN|$retval|$stack)[:TYPE]`, TYPE one of u8..u64,
//! s8..s64, x8..x64. Forms that need kernel memory (`+offs(...)`, `@SYM`,
//! `$stackN`, `$comm`, strings) are refused with a clear message.
//!
//! ```
//! use kprobe_perf_engine::spec::{ProbeSpec, ProbeKind, FetchSource};
//! use kprobe_perf_arch::Arch;
//! let s = ProbeSpec::parse("r:myret do_sys_openat2 ret=$retval:s64", Arch::X86_64).unwrap();
//! assert_eq!(s.kind, ProbeKind::Return { maxactive: None });
//! assert_eq!(s.event_name(), "myret");
//! assert_eq!(s.args[0].source, FetchSource::Retval);
//! assert_eq!(s.to_string(), "r:kprobes/myret do_sys_openat2 ret=$retval:s64");
//! ```

use std::fmt;

use kprobe_perf_arch::Arch;

/// Longest argument list the kernel accepts (`MAX_TRACE_ARGS`).
pub const MAX_ARGS: usize = 128;
/// Largest kretprobe maxactive the kernel accepts (`KRETPROBE_MAXACTIVE_MAX`).
pub const MAX_MAXACTIVE: u32 = 4096;

/// A byte range of the input, for pointing at mistakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Byte offset of the first character.
    pub start: usize,
    /// Length in bytes (at least 1 when shown).
    pub len: usize,
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
    /// Three lines: the message, the input, and a caret under the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pad = self.input[..self.span.start.min(self.input.len())]
            .chars()
            .count();
        let width = self
            .input
            .get(self.span.start..self.span.start + self.span.len)
            .map_or(1, |s| s.chars().count().max(1));
        write!(
            f,
            "{}\n  {}\n  {}{}",
            self.message,
            self.input,
            " ".repeat(pad),
            "^".repeat(width)
        )
    }
}

/// Entry probe or return probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// `p`: fires when the instruction at the target runs.
    Entry,
    /// `r[MAXACTIVE]`: fires when the function returns.
    Return {
        /// Instances for concurrent calls; `None` is the kernel default.
        maxactive: Option<u32>,
    },
}

/// Where the probe goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `[MOD:]SYM[+offs]`.
    Symbol {
        /// Module, for `MOD:SYM`.
        module: Option<String>,
        /// Symbol name.
        name: String,
        /// Offset into the symbol.
        offset: u64,
    },
    /// `MEMADDR`: an absolute kernel text address.
    Address(u64),
}

/// Where an argument's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchSource {
    /// `%REG`.
    Register(String),
    /// `$argN` (1-based).
    Arg(u32),
    /// `$retval`.
    Retval,
    /// `$stack`: the stack pointer.
    StackPointer,
}

/// How a fetched value is typed and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    /// `uN`: unsigned decimal.
    Unsigned(u8),
    /// `sN`: signed decimal.
    Signed(u8),
    /// `xN`: hexadecimal (the default is x64 on 64-bit machines).
    Hex(u8),
}

impl ArgType {
    /// Width in bits.
    pub fn bits(self) -> u8 {
        match self {
            ArgType::Unsigned(b) | ArgType::Signed(b) | ArgType::Hex(b) => b,
        }
    }
}

impl fmt::Display for ArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgType::Unsigned(b) => write!(f, "u{b}"),
            ArgType::Signed(b) => write!(f, "s{b}"),
            ArgType::Hex(b) => write!(f, "x{b}"),
        }
    }
}

/// One fetch argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchArg {
    /// `NAME=`; `None` means the kernel's default name `argN`.
    pub name: Option<String>,
    /// The value's source.
    pub source: FetchSource,
    /// `:TYPE`; `None` is the default (x64).
    pub ty: Option<ArgType>,
}

/// A parsed probe definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Entry or return.
    pub kind: ProbeKind,
    /// `GRP` of `GRP/EVENT`.
    pub group: Option<String>,
    /// `EVENT`; when `None`, [`ProbeSpec::event_name`] generates one.
    pub event: Option<String>,
    /// Where the probe goes.
    pub target: Target,
    /// Fetch arguments in order.
    pub args: Vec<FetchArg>,
}

/// The group the kernel uses when none is given.
pub const DEFAULT_GROUP: &str = "kprobes";

struct Cursor<'a> {
    input: &'a str,
}

impl Cursor<'_> {
    fn err(&self, start: usize, len: usize, message: impl Into<String>) -> SpecError {
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
    t.contains('=') || t.starts_with(['%', '$', '@', '+', '-'])
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_number(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    }
}

impl ProbeSpec {
    /// Parses and validates one definition for `arch`.
    pub fn parse(input: &str, arch: Arch) -> Result<ProbeSpec, SpecError> {
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
        let kind = match kind_text.as_bytes().first() {
            Some(b'p') if kind_text.len() == 1 => ProbeKind::Entry,
            Some(b'r') => {
                let digits = &kind_text[1..];
                if digits.is_empty() {
                    ProbeKind::Return { maxactive: None }
                } else {
                    match digits.parse::<u32>() {
                        Ok(n) if (1..=MAX_MAXACTIVE).contains(&n) => {
                            ProbeKind::Return { maxactive: Some(n) }
                        }
                        _ => {
                            return Err(cur.err(
                                head_at + 1,
                                digits.len(),
                                format!(
                                "maxactive must be a number from 1 to {MAX_MAXACTIVE}, as in r100:"
                            ),
                            ))
                        }
                    }
                }
            }
            Some(b'p') => {
                return Err(cur.err(
                    head_at + 1,
                    kind_text.len() - 1,
                    "maxactive applies only to return probes: write r100:, not p100:",
                ))
            }
            Some(b'-') => {
                return Err(cur.err(
                    head_at,
                    head.len(),
                    "-:EVENT deletes a tracefs event; kprobe-perf removes its probes itself",
                ))
            }
            _ => {
                return Err(cur.err(
                    head_at,
                    kind_text.len().max(1),
                    "a probe starts with p (entry) or r (return), as in p:do_sys_openat2",
                ))
            }
        };
        // Short form `p:SYM [ARGS]`: when what follows the colon cannot be
        // an event name (it has a module prefix or an offset) or nothing
        // but fetch args follows it, it is the target.
        let next_is_arg = toks.get(1).is_none_or(|&(_, t)| looks_like_fetch_arg(t));
        let short_form =
            name_part.is_some_and(|n| !n.is_empty() && (n.contains([':', '+']) || next_is_arg));
        let (group, event, target_at, target_text, args_from) = if short_form {
            let at = head_at + kind_text.len() + 1;
            (None, None, at, name_part.unwrap_or_default(), 1)
        } else {
            let (group, event) = match name_part {
                None => (None, None),
                Some(n) => {
                    let at = head_at + kind_text.len() + 1;
                    let (g, e, e_at) = match n.split_once('/') {
                        Some((g, e)) => (Some(g), e, at + g.len() + 1),
                        None => (None, n, at),
                    };
                    if let Some(g) = g {
                        if !is_identifier(g) {
                            return Err(cur.err(at, g.len().max(1), "group names are letters, digits and _, starting with a letter or _"));
                        }
                    }
                    if !is_identifier(e) {
                        return Err(cur.err(
                            e_at,
                            e.len().max(1),
                            "event names are letters, digits and _, starting with a letter or _",
                        ));
                    }
                    (g.map(str::to_string), Some(e.to_string()))
                }
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
        let target = parse_target(&cur, target_at, target_text)?;
        if let (ProbeKind::Return { .. }, Target::Symbol { offset, .. }) = (kind, &target) {
            if *offset != 0 {
                return Err(cur.err(
                    target_at,
                    target_text.len(),
                    "a return probe goes on a function's entry: remove the offset (r:SYM or r:SYM+0)",
                ));
            }
        }
        let mut spec = ProbeSpec {
            kind,
            group,
            event,
            target,
            args: Vec::new(),
        };
        let arg_toks = &toks[args_from.min(toks.len())..];
        if arg_toks.len() > MAX_ARGS {
            let (at, t) = arg_toks[MAX_ARGS];
            return Err(cur.err(
                at,
                t.len(),
                format!("at most {MAX_ARGS} arguments per probe"),
            ));
        }
        for (i, &(at, text)) in arg_toks.iter().enumerate() {
            let arg = parse_arg(&cur, &spec, arch, at, text)?;
            let name = arg.name.clone().unwrap_or_else(|| format!("arg{}", i + 1));
            if spec
                .args
                .iter()
                .enumerate()
                .any(|(j, a)| a.name.clone().unwrap_or_else(|| format!("arg{}", j + 1)) == name)
            {
                return Err(cur.err(
                    at,
                    text.len(),
                    format!("argument name {name} is used twice; names must be unique"),
                ));
            }
            spec.args.push(arg);
        }
        Ok(spec)
    }

    /// The event name: as given, or generated the way the kernel does
    /// (`p_SYM_OFFS`, `r_MOD_SYM_OFFS`, `p_0xADDR`, with
    /// characters other than letters, digits and `_` replaced by `_`).
    pub fn event_name(&self) -> String {
        if let Some(e) = &self.event {
            return e.clone();
        }
        let prefix = match self.kind {
            ProbeKind::Entry => 'p',
            ProbeKind::Return { .. } => 'r',
        };
        let raw = match &self.target {
            Target::Symbol {
                module: Some(m),
                name,
                offset,
            } => format!("{prefix}_{m}_{name}_{offset}"),
            Target::Symbol { name, offset, .. } => format!("{prefix}_{name}_{offset}"),
            Target::Address(a) => format!("{prefix}_0x{a:x}"),
        };
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The group name: as given, or `kprobes`.
    pub fn group_name(&self) -> &str {
        self.group.as_deref().unwrap_or(DEFAULT_GROUP)
    }

    /// The display name of argument `i`: as given, or `arg{i+1}`.
    pub fn arg_name(&self, i: usize) -> String {
        self.args
            .get(i)
            .and_then(|a| a.name.clone())
            .unwrap_or_else(|| format!("arg{}", i + 1))
    }
}

fn parse_target(cur: &Cursor, at: usize, text: &str) -> Result<Target, SpecError> {
    if text.starts_with("0x") || text.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_number(text).map(Target::Address).ok_or_else(|| {
            cur.err(
                at,
                text.len(),
                "not a valid address: write it in hex, as in 0xffffffff81234560",
            )
        });
    }
    let (module, rest, rest_at) = match text.split_once(':') {
        Some((m, r)) => (Some(m), r, at + m.len() + 1),
        None => (None, text, at),
    };
    if let Some(m) = module {
        if m.starts_with('/') {
            return Err(cur.err(
                at,
                text.len(),
                "uprobe targets (PATH:SYMBOL) are not supported yet",
            ));
        }
        if !is_identifier(m) {
            return Err(cur.err(at, m.len().max(1), "module names are letters, digits and _"));
        }
    }
    let (name, offset) = match rest.find(['+', '-']) {
        Some(i) => {
            let off_text = &rest[i + 1..];
            if rest.as_bytes()[i] == b'-' {
                return Err(cur.err(
                    rest_at + i,
                    rest.len() - i,
                    "offsets into a symbol are positive: SYM+OFFS",
                ));
            }
            let off = parse_number(off_text).ok_or_else(|| {
                cur.err(
                    rest_at + i + 1,
                    off_text.len().max(1),
                    "not a valid offset: write SYM+0x10 or SYM+16",
                )
            })?;
            (&rest[..i], off)
        }
        None => (rest, 0),
    };
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        || name.is_empty()
        || name.starts_with('.')
    {
        return Err(cur.err(
            rest_at,
            name.len().max(1),
            "not a symbol name: symbols are letters, digits, _ and .",
        ));
    }
    Ok(Target::Symbol {
        module: module.map(str::to_string),
        name: name.to_string(),
        offset,
    })
}

fn parse_type(cur: &Cursor, at: usize, text: &str) -> Result<ArgType, SpecError> {
    let bad = || {
        let hint = if matches!(text, "string" | "ustring" | "symbol")
            || text.starts_with('b')
            || text.contains('[')
        {
            format!("type {text} needs the kernel to fetch memory, which is not supported yet; use u8..u64, s8..s64 or x8..x64")
        } else {
            format!("unknown type {text}: use u8/u16/u32/u64, s8..s64 or x8..x64")
        };
        cur.err(at, text.len().max(1), hint)
    };
    let (k, bits) = text.split_at(text.len().min(1));
    let bits: u8 = bits.parse().map_err(|_| bad())?;
    if !matches!(bits, 8 | 16 | 32 | 64) {
        return Err(bad());
    }
    match k {
        "u" => Ok(ArgType::Unsigned(bits)),
        "s" => Ok(ArgType::Signed(bits)),
        "x" => Ok(ArgType::Hex(bits)),
        _ => Err(bad()),
    }
}

fn parse_arg(
    cur: &Cursor,
    spec: &ProbeSpec,
    arch: Arch,
    at: usize,
    text: &str,
) -> Result<FetchArg, SpecError> {
    let (name, body, body_at) = match text.split_once('=') {
        Some((n, b)) => {
            if !is_identifier(n) {
                return Err(cur.err(
                    at,
                    n.len().max(1),
                    "argument names are letters, digits and _, starting with a letter or _",
                ));
            }
            (Some(n.to_string()), b, at + n.len() + 1)
        }
        None => (None, text, at),
    };
    let (source_text, ty) = match body.rsplit_once(':') {
        Some((s, t)) => (s, Some(parse_type(cur, body_at + s.len() + 1, t)?)),
        None => (body, None),
    };
    let err = |msg: String| Err(cur.err(body_at, source_text.len().max(1), msg));
    let source = if let Some(reg) = source_text.strip_prefix('%') {
        if arch.register(reg).is_none() {
            let hint = arch
                .closest_register(reg)
                .map(|r| format!("; did you mean %{r}?"))
                .unwrap_or_default();
            return err(format!("unknown register %{reg} on {}{hint}", arch.name()));
        }
        FetchSource::Register(reg.to_string())
    } else if let Some(n) = source_text.strip_prefix("$arg") {
        let Ok(n) = n.parse::<u32>() else {
            return err("$arg takes a number from 1, as in $arg1".into());
        };
        if n == 0 {
            return err("arguments count from 1: $arg1 is the first".into());
        }
        if let Target::Symbol { offset, .. } = &spec.target {
            if *offset != 0 && spec.kind == ProbeKind::Entry {
                return err(format!("$arg{n} is only meaningful at a function's entry, not at +{offset}; fetch the register instead"));
            }
        }
        if matches!(spec.kind, ProbeKind::Return { .. }) {
            return err(format!("$arg{n} is not available at a return probe: the argument registers are overwritten by then"));
        }
        if arch.arg_register(n).is_none() {
            return err(format!("$arg{n} is passed on the stack on {}, which needs a kernel memory fetch (not supported yet)", arch.name()));
        }
        FetchSource::Arg(n)
    } else if source_text == "$retval" {
        if spec.kind == ProbeKind::Entry {
            return err("$retval is only available at a return probe: use r: instead of p:".into());
        }
        FetchSource::Retval
    } else if source_text == "$stack" {
        FetchSource::StackPointer
    } else if source_text == "$comm"
        || source_text.starts_with("$stack")
        || source_text.starts_with('@')
        || source_text.contains('(')
    {
        return err(format!("{source_text} needs a kernel memory fetch, which is not supported yet; use %REG, $argN, $retval or $stack"));
    } else {
        return err(format!(
            "unknown fetch argument {source_text}: use %REG, $argN, $retval or $stack"
        ));
    };
    Ok(FetchArg { name, source, ty })
}

impl fmt::Display for FetchArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = &self.name {
            write!(f, "{n}=")?;
        }
        match &self.source {
            FetchSource::Register(r) => write!(f, "%{r}")?,
            FetchSource::Arg(n) => write!(f, "$arg{n}")?,
            FetchSource::Retval => f.write_str("$retval")?,
            FetchSource::StackPointer => f.write_str("$stack")?,
        }
        if let Some(t) = self.ty {
            write!(f, ":{t}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ProbeSpec {
    /// Canonical kprobe_events syntax, group and event always spelled out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ProbeKind::Entry => f.write_str("p")?,
            ProbeKind::Return { maxactive: None } => f.write_str("r")?,
            ProbeKind::Return { maxactive: Some(n) } => write!(f, "r{n}")?,
        }
        write!(f, ":{}/{} ", self.group_name(), self.event_name())?;
        match &self.target {
            Target::Symbol {
                module,
                name,
                offset,
            } => {
                if let Some(m) = module {
                    write!(f, "{m}:")?;
                }
                f.write_str(name)?;
                if *offset != 0 {
                    write!(f, "+{offset}")?;
                }
            }
            Target::Address(a) => write!(f, "0x{a:x}")?,
        }
        for a in &self.args {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ProbeSpec, SpecError> {
        ProbeSpec::parse(s, Arch::X86_64)
    }

    #[test]
    fn entry_probe_with_register() {
        let s = parse("p:do_sys_openat2 dfd=%di").unwrap();
        assert_eq!(s.kind, ProbeKind::Entry);
        assert_eq!(s.event_name(), "p_do_sys_openat2_0");
        assert_eq!(
            s.target,
            Target::Symbol {
                module: None,
                name: "do_sys_openat2".into(),
                offset: 0
            }
        );
        assert_eq!(
            s.args,
            vec![FetchArg {
                name: Some("dfd".into()),
                source: FetchSource::Register("di".into()),
                ty: None
            }]
        );
    }

    #[test]
    fn return_probe_with_maxactive_and_group() {
        let s = parse("r100:mygrp/myret do_sys_openat2 $retval").unwrap();
        assert_eq!(
            s.kind,
            ProbeKind::Return {
                maxactive: Some(100)
            }
        );
        assert_eq!(s.group_name(), "mygrp");
        assert_eq!(s.arg_name(0), "arg1");
        assert_eq!(s.to_string(), "r100:mygrp/myret do_sys_openat2 $retval");
    }

    #[test]
    fn generated_names_follow_the_kernel() {
        assert_eq!(
            parse("p do_sys_open+16").unwrap().event_name(),
            "p_do_sys_open_16"
        );
        assert_eq!(
            parse("p 0xffffffff81000000").unwrap().event_name(),
            "p_0xffffffff81000000"
        );
        assert_eq!(
            parse("r ext4:ext4_file_open").unwrap().event_name(),
            "r_ext4_ext4_file_open_0"
        );
    }

    #[test]
    fn round_trip() {
        for text in [
            "p:kprobes/a do_sys_open+5 x=%di:u32 %si $stack",
            "r:kprobes/b do_sys_open $retval:s64",
            "p:kprobes/c 0xffffffff81000000 $arg1:x16",
        ] {
            let s = parse(text).unwrap();
            assert_eq!(s.to_string(), text);
            assert_eq!(parse(&s.to_string()).unwrap(), s);
        }
    }

    #[test]
    fn errors_point_at_the_token() {
        let e = parse("p:do_sys_openat2 dfd=%rx").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown register %rx on x86_64; did you mean %r8?\n  p:do_sys_openat2 dfd=%rx\n                       ^^^"
        );
        let e = parse("p:do_sys_openat2 ret=$retval").unwrap_err();
        assert_eq!(
            e.message,
            "$retval is only available at a return probe: use r: instead of p:"
        );
        assert_eq!(e.span, Span { start: 21, len: 7 });
        let e = parse("r:x do_sys_openat2+5").unwrap_err();
        assert_eq!(e.span, Span { start: 4, len: 16 });
        let e = parse("r5000 do_sys_open").unwrap_err();
        assert_eq!(
            e.message,
            "maxactive must be a number from 1 to 4096, as in r100:"
        );
        let e = parse("p:do_sys_open+4 $arg1").unwrap_err();
        assert!(
            e.message
                .starts_with("$arg1 is only meaningful at a function's entry"),
            "{}",
            e.message
        );
        let e = parse("p:a do_sys_open x=%di x=%si").unwrap_err();
        assert_eq!(
            e.message,
            "argument name x is used twice; names must be unique"
        );
        let e = parse("p:a do_sys_open +8(%di)").unwrap_err();
        assert!(e.message.contains("kernel memory fetch"), "{}", e.message);
        assert!(parse("").is_err());
        assert!(parse("q:foo bar").is_err());
        assert!(parse("p:").is_err());
    }
}
