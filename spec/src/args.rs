//! Fetch arguments: `[NAME=]FETCHARG[:TYPE]`, checked in the order the
//! kernel checks them (traceprobe_parse_probe_arg and its body parser),
//! with refusals placed where the kernel's `error_log` places them.
//!
//! One quirk is kept on purpose: as the kernel descends into
//! `+OFFS(...)`, its notion of the current position advances by the
//! length of the prefix less its `u` (`+u8(` counts 3), and the errors it
//! finds inside, or after the descent (bitfields, string types, arrays),
//! are reported at that position. The carets here follow it.

use kprobe_perf_arch::Arch;

use super::parse::{is_identifier, parse_number, parse_signed, Cursor, SpecError};
use super::target::GLOB_CHARS;
use super::{
    ArgType, BaseType, Deref, Fetch, FetchArg, FetchBase, Immediate, Member, ProbeSpec, Target,
    MAX_ARG_NAME, MAX_ARRAY_LEN, RESERVED_NAMES,
};

/// Longest argument body (after `NAME=`, type included) the kernel takes
/// (`MAX_ARGSTR_LEN`).
pub const MAX_ARG_BODY: usize = 63;
/// Instructions a fetch may use (`FETCH_INSN_MAX`, less the end mark).
const MAX_FETCH_INSNS: usize = 15;
/// Largest `$argN` and `$stackN` of a kernel probe (`PARAM_MAX_STACK`: a
/// 16 KiB kernel stack in longs).
pub const MAX_PARAM: u64 = 2048;

/// One argument of `spec` (which holds the arguments before it).
pub(crate) fn parse_arg(
    cur: &Cursor,
    spec: &ProbeSpec,
    arch: Arch,
    at: usize,
    text: &str,
) -> Result<FetchArg, SpecError> {
    // The name ends at the first `=`, wherever it is.
    let (name, body, body_at) = match text.find('=') {
        Some(i) => (Some(&text[..i]), &text[i + 1..], at + i + 1),
        None => (None, text, at),
    };
    if let Some(n) = name {
        check_arg_name(cur, at, n)?;
    }
    if body.len() > MAX_ARG_BODY {
        return Err(cur.err(
            body_at,
            body.len(),
            format!(
                "an argument is at most {MAX_ARG_BODY} characters after its name (type included)"
            ),
        ));
    }
    if body.is_empty() {
        return Err(cur.err(body_at, 1, "missing fetch argument after NAME="));
    }
    let (fetch_text, type_text) = match body.find(':') {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let ty_at = body_at + fetch_text.len() + 1;
    let parsed = match type_text {
        Some(t) => Some(parse_type(cur, spec, ty_at, t, body_at + body.len())?),
        None => None,
    };
    let ty = parsed.as_ref().map(|p| p.0);
    // $comm and immediate strings are strings (found by their text, as
    // the kernel finds them, before anything else is parsed).
    let stringy = matches!(fetch_text, "$comm" | "$COMM") || fetch_text.starts_with("\\\"");
    if stringy && !cur.eprobe {
        if let Some(t) = ty.filter(|t| !(t.base == BaseType::String && t.array.is_none())) {
            return Err(cur.err(
                ty_at,
                type_text.map_or(1, str::len),
                format!("$comm and immediate strings are strings: leave out :{t} or write :string"),
            ));
        }
    }
    // traceprobe_expand_dentry_args rewrites `ARG:%pd` as
    // `+0(+40(ARG)):string` and `ARG:%pD` as `+0(+40(+24(ARG))):string`
    // (offsets of struct dentry and struct file on x86_64 6.x) before the
    // length is checked.
    let expanded = match ty.map(|t| t.base) {
        Some(BaseType::Dentry) => fetch_text.len() + "+0(+40()):string".len(),
        Some(BaseType::File) => fetch_text.len() + "+0(+40(+24())):string".len(),
        _ => 0,
    };
    if expanded > MAX_ARG_BODY {
        return Err(cur.err(
            body_at,
            body.len(),
            format!("{body} is too long once the kernel expands it ({expanded} characters, at most {MAX_ARG_BODY})"),
        ));
    }
    let (fetch, shift) = parse_fetch(cur, spec, arch, body_at, fetch_text)?;
    if fetch.base == FetchBase::AllArgs && (name.is_some() || !fetch.derefs.is_empty()) {
        // traceprobe_expand_meta_args only expands `$arg*` written alone.
        return Err(cur.err(
            body_at,
            fetch_text.len(),
            "$arg* stands alone: it expands to every parameter with its own name",
        ));
    }
    let arg = FetchArg {
        name: name.map(str::to_string),
        fetch,
        ty,
    };
    // A symbol type on a uprobe: 6.2+ refuse it while looking the type
    // up, before the fetch is read, and 6.1 marks its type's mistakes
    // unshifted; either way the caret is on the type.
    let user_symbol = spec.target.is_user()
        && ty.is_some_and(|t| matches!(t.base, BaseType::Symbol | BaseType::SymStr));
    let after = if user_symbol { ty_at } else { ty_at + shift };
    let ty_len = type_text.map_or(1, str::len);
    check_type(cur, &arg, body_at, after, ty_len)?;
    if let Some((_, Some(bitfield))) = parsed {
        return Err(cur.err(after, ty_len, bitfield));
    }
    Ok(arg)
}

fn check_arg_name(cur: &Cursor, at: usize, n: &str) -> Result<(), SpecError> {
    if n.is_empty() {
        return Err(cur.err(at, 1, "missing argument name before =: write NAME=FETCHARG"));
    }
    if !is_identifier(n) {
        return Err(cur.err(
            at,
            n.len(),
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
    Ok(())
}

/// `TYPE[N]`: the type, and a refusal of a bitfield that names a valid
/// container but is malformed otherwise (the kernel reports that one
/// after the fetch is parsed).
fn parse_type(
    cur: &Cursor,
    spec: &ProbeSpec,
    at: usize,
    text: &str,
    end: usize,
) -> Result<(ArgType, Option<String>), SpecError> {
    let (base_text, array) = match text.find('[') {
        Some(i) => {
            let Some(j) = text[i + 1..].find(']').map(|j| i + 1 + j) else {
                return Err(cur.err(end, 1, "the array type is not closed: TYPE[N]"));
            };
            if j + 1 != text.len() {
                return Err(cur.err(
                    at + j + 1,
                    text.len() - j - 1,
                    "nothing may follow ] in an array type",
                ));
            }
            let n = &text[i + 1..j];
            let len = parse_number(n)
                .filter(|v| (1..=u64::from(MAX_ARRAY_LEN)).contains(v))
                .ok_or_else(|| {
                    cur.err(
                        at + i + 1,
                        j - i - 1,
                        format!("array length must be a number from 1 to {MAX_ARRAY_LEN}"),
                    )
                })?;
            (&text[..i], Some(len as u32))
        }
        None => (text, None),
    };
    let unknown = |what: &str| {
        cur.err(at, base_text.len().max(1), format!("{what}: use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>"))
    };
    let user = spec.target.is_user();
    let (base, bitfield_error) = match base_text {
        "string" => (BaseType::String, None),
        "ustring" => (BaseType::UString, None),
        "char" => (BaseType::Char, None),
        // The symbol types on a uprobe: 6.1 takes them, 6.2+ refuse them
        // (the planner decides from the release, `KernelFeatures`).
        "%pd" | "%pD" if user => {
            return Err(unknown(&format!(
                "{base_text} needs kernel structures: uprobes have no such type"
            )))
        }
        "symbol" => (BaseType::Symbol, None),
        "symstr" => (BaseType::SymStr, None),
        "%pd" | "%pD" if array.is_some() => {
            return Err(unknown(&format!(
                "{base_text} takes no array: it names one dentry or file"
            )))
        }
        "%pd" => (BaseType::Dentry, None),
        "%pD" => (BaseType::File, None),
        t if t.starts_with('b') => parse_bitfield(t).ok_or_else(|| {
            unknown(&format!(
                "{t} is not a type (a bitfield's container, after /, is 8, 16, 32 or 64)"
            ))
        })?,
        t => {
            let bits = match t.get(1..) {
                Some("8") => 8,
                Some("16") => 16,
                Some("32") => 32,
                Some("64") => 64,
                _ => return Err(unknown(&format!("unknown type {t}"))),
            };
            match t.as_bytes()[0] {
                b'u' => (BaseType::Unsigned(bits), None),
                b's' => (BaseType::Signed(bits), None),
                b'x' => (BaseType::Hex(bits), None),
                _ => return Err(unknown(&format!("unknown type {t}"))),
            }
        }
    };
    Ok((ArgType { base, array }, bitfield_error))
}

/// `b<width>@<offset>/<container>`: `None` when the container is not one
/// (an unknown type to the kernel); otherwise the bitfield, or a
/// placeholder with the refusal of its width or offset.
fn parse_bitfield(t: &str) -> Option<(BaseType, Option<String>)> {
    let container = match parse_number(&t[t.find('/')? + 1..])? {
        c @ (8 | 16 | 32 | 64) => c as u8,
        _ => return None,
    };
    let placeholder = BaseType::Unsigned(container);
    let syntax = "a bitfield is b<width>@<offset>/<container>, as in b4@2/32";
    let fields = t[1..].split_once('@').and_then(|(w, rest)| {
        let (o, _) = rest.split_once('/')?;
        Some((parse_number(w)?, parse_number(o)?))
    });
    let Some((width, offset)) = fields else {
        return Some((placeholder, Some(syntax.into())));
    };
    if width == 0 || width + offset > u64::from(container) {
        return Some((
            placeholder,
            Some(format!("a bitfield of {width} bits at bit {offset} does not fit in a container of {container} bits")),
        ));
    }
    Some((
        BaseType::Bitfield {
            width: width as u8,
            offset: offset as u8,
            container,
        },
        None,
    ))
}

/// The fetch, and how far the kernel's position advanced through its
/// dereference prefixes.
fn parse_fetch(
    cur: &Cursor,
    spec: &ProbeSpec,
    arch: Arch,
    body_at: usize,
    text: &str,
) -> Result<(Fetch, usize), SpecError> {
    let mut level = text;
    let mut kpos = body_at;
    let mut derefs = Vec::new();
    let mut content_at = Vec::new();
    while let Some(sign @ (b'+' | b'-')) = level.bytes().next() {
        let mut rest = &level[1..];
        let user = rest.starts_with('u');
        if user {
            rest = &rest[1..];
        }
        let Some(open) = rest.find('(') else {
            return Err(cur.err(
                kpos,
                level.len(),
                "a dereference is +OFFS(FETCHARG), as in +8(%di)",
            ));
        };
        let offset = parse_signed(sign, &rest[..open]).ok_or_else(|| {
            cur.err(kpos, open + 2, "a dereference is +OFFS(FETCHARG) with a number for OFFS, as in +8(%di) or -0x10(%si)")
        })?;
        kpos += open + 2;
        let inner = &rest[open + 1..];
        // The kernel pairs the `(` with the last `)`.
        let Some(close) = inner.rfind(')') else {
            return Err(cur.err(
                kpos + inner.len(),
                1,
                "the dereference is not closed: +OFFS(FETCHARG)",
            ));
        };
        derefs.push(Deref { offset, user });
        content_at.push(kpos);
        level = &inner[..close];
    }
    let base = parse_base(cur, spec, arch, kpos, level)?;
    if !derefs.is_empty()
        && matches!(
            base,
            FetchBase::Comm | FetchBase::Immediate(Immediate::String(_))
        )
    {
        return Err(cur.err(kpos, level.len(), format!("{level} cannot be dereferenced")));
    }
    let base_insns = match base {
        FetchBase::Symbol { .. } => 3,
        FetchBase::Address(_) | FetchBase::FileOffset(_) => 2,
        _ => 1,
    };
    if base_insns + derefs.len() > MAX_FETCH_INSNS {
        // The dereference that takes the 16th instruction, counted from
        // the innermost, is refused at its contents.
        let failing = derefs.len() - (MAX_FETCH_INSNS + 1 - base_insns);
        return Err(cur.err(
            content_at[failing],
            1,
            format!(
                "dereferences are nested too deep: the kernel runs at most {MAX_FETCH_INSNS} steps per argument"
            ),
        ));
    }
    derefs.reverse();
    // What the kernel checks after the fetch (types) it reports past the
    // outermost prefix only.
    let shift = content_at.first().map_or(0, |&c| c - body_at);
    Ok((Fetch { base, derefs }, shift))
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
        // parse_probe_arg: fprobe, tracepoint and event probes have no
        // registers.
        if spec.target.is_dynamic_only() || cur.eprobe {
            return err(format!("%{reg}: fprobe, tracepoint and event probes cannot fetch registers: use $argN, a parameter name or $retval"));
        }
        if arch.register(reg).is_none() && !kernel_only_register(arch, reg) {
            let hint = arch
                .closest_register(reg)
                .map(|r| format!("; did you mean %{r}?"))
                .unwrap_or_default();
            return err(format!("unknown register %{reg} on {}{hint}", arch.name()));
        }
        return Ok(FetchBase::Register(reg.to_string()));
    }
    if let Some(var) = text.strip_prefix('$') {
        if cur.eprobe {
            // Event probes read the attached event's fields as `$FIELD`.
            return if is_identifier(var) {
                Ok(FetchBase::EventField(var.to_string()))
            } else {
                err(format!(
                    "${var} is not a field name: write $FIELD, a field of the attached event"
                ))
            };
        }
        return parse_var(cur, spec, at, text, var);
    }
    if let Some(mem) = text.strip_prefix('@') {
        return parse_memory(spec, mem).or_else(err);
    }
    if let Some(imm) = text.strip_prefix('\\') {
        return parse_immediate(cur, at, text, imm);
    }
    if is_identifier(text) {
        if cur.eprobe {
            return err(format!("{text}: event probes read their event's fields as $FIELD; BTF names are not available there"));
        }
        check_btf_place(spec, text).map_err(|m| cur.err(at, text.len(), m))?;
        return Ok(FetchBase::Name(text.to_string()));
    }
    if text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && text.contains(['.', '-'])
        && !cur.eprobe
    {
        return parse_member(cur, spec, at, text);
    }
    err(format!("unknown fetch argument {text}: use %REG, $argN, $retval, $stack, $stackN, $comm, @ADDR, @SYM, +OFFS(...) or a BTF argument name"))
}

/// Registers the kernel's probes name that perf cannot sample
/// (regs_query_register_offset knows them; the planner sends such
/// arguments through tracefs).
fn kernel_only_register(arch: Arch, reg: &str) -> bool {
    match arch {
        Arch::X86_64 => reg == "orig_ax",
        _ => reg == "pstate",
    }
}

/// `$retval`, `$stack`, `$stackN`, `$comm`, `$argN`, `$arg*` and
/// `$retval->member`.
fn parse_var(
    cur: &Cursor,
    spec: &ProbeSpec,
    at: usize,
    text: &str,
    var: &str,
) -> Result<FetchBase, SpecError> {
    let err = |msg: String| Err(cur.err(at, text.len().max(1), msg));
    let kernel = !spec.target.is_user();
    if var == "retval" || var.starts_with("retval->") || var.starts_with("retval.") {
        if !spec.is_return() {
            return err("$retval is only available at a return probe: use r: instead of p:".into());
        }
        if var == "retval" {
            return Ok(FetchBase::Retval);
        }
        if !kernel {
            return err("$retval->member needs the kernel's BTF: uprobes have none".into());
        }
        return parse_member(cur, spec, at, text);
    }
    if var == "stack" {
        return Ok(FetchBase::Stack);
    }
    if var == "comm" || var == "COMM" {
        return Ok(FetchBase::Comm);
    }
    if var == "arg*" {
        check_btf_place(spec, "$arg*").map_err(|m| cur.err(at, text.len(), m))?;
        return Ok(FetchBase::AllArgs);
    }
    if let Some(n) = var.strip_prefix("stack") {
        let n = n
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| n.parse::<u64>().ok())
            .flatten()
            .filter(|_| !n.is_empty());
        return match n {
            Some(n) if kernel && n > MAX_PARAM => err(format!(
                "$stack{n} is beyond the kernel's stack: $stack0 to $stack{MAX_PARAM}"
            )),
            Some(n) => match u32::try_from(n) {
                Ok(n) => Ok(FetchBase::StackEntry(n)),
                Err(_) => err(format!("$stack{n} is beyond any stack")),
            },
            None => err("$stack takes a number from 0, as in $stack0".into()),
        };
    }
    if let Some(n) = var.strip_prefix("arg") {
        let n = match n.parse::<u64>() {
            Ok(v) if n.bytes().all(|b| b.is_ascii_digit()) => v,
            _ => return err("$arg takes a number from 1, as in $arg1".into()),
        };
        if n == 0 || n > MAX_PARAM {
            return err(format!("arguments count from $arg1 to $arg{MAX_PARAM}"));
        }
        // A return probe's $argN is saved at the entry by the kernel
        // (6.10+, "kernel return probes support: $retval, $arg<N>" in
        // tracefs's README); the planner checks the kernel has it, and
        // joins a hidden entry probe to the return where it does not (a
        // uprobe's return always: the kernel saves nothing for it).
        // Whether the probe is at the function's entry is the kernel's
        // to say (kprobe_on_func_entry).
        return Ok(FetchBase::Arg(n as u32));
    }
    err(format!(
        "unknown variable ${var}: use $argN, $retval, $stack, $stackN or $comm"
    ))
}

/// `@ADDR`, `@+OFFS` (uprobes) and `@SYM[+|-OFFS]`.
fn parse_memory(spec: &ProbeSpec, mem: &str) -> Result<FetchBase, String> {
    if let Some(off) = mem.strip_prefix('+') {
        if !spec.target.is_user() {
            return Err("@+OFFS reads a file offset of a uprobe's binary; for kernel memory use @ADDR or @SYM".into());
        }
        return parse_number(off)
            .map(FetchBase::FileOffset)
            .ok_or_else(|| "not a valid file offset: write @+0x1234".into());
    }
    if mem.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_number(mem)
            .map(FetchBase::Address)
            .ok_or_else(|| "not a valid address: write @0xffffffff82000000".into());
    }
    if spec.target.is_user() {
        return Err("@SYM reads kernel memory; in a uprobe use @+OFFS (a file offset)".into());
    }
    let (name, offset) = match mem.find(['+', '-']) {
        Some(i) => match parse_signed(mem.as_bytes()[i], &mem[i + 1..]) {
            Some(o) => (&mem[..i], o),
            None => return Err("not a valid offset: write @SYM+8 or @SYM-0x10".into()),
        },
        None => (mem, 0),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        || name.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err("not a symbol name after @: write @jiffies or @SYM+OFFS".into());
    }
    Ok(FetchBase::Symbol {
        name: name.to_string(),
        offset,
    })
}

/// `\NUMBER` or `\"text"` (the text runs to a closing `"` at the end).
fn parse_immediate(cur: &Cursor, at: usize, text: &str, imm: &str) -> Result<FetchBase, SpecError> {
    if let Some(s) = imm.strip_prefix('"') {
        return match s.strip_suffix('"') {
            Some(body) => Ok(FetchBase::Immediate(Immediate::String(body.to_string()))),
            None => Err(cur.err(
                at + text.len(),
                1,
                "the immediate string is not closed: \\\"text\"",
            )),
        };
    }
    // str_to_immediate: an unsigned number, or a signed one after - or +.
    let value = match imm.as_bytes().first() {
        Some(b'-') => parse_signed(b'-', &imm[1..]),
        Some(b'+') => parse_signed(b'+', &imm[1..]),
        Some(b'0'..=b'9') => parse_number(imm).map(|v| v as i64),
        _ => None,
    };
    value
        .map(|v| FetchBase::Immediate(Immediate::Number(v)))
        .ok_or_else(|| {
            cur.err(
                at + 1,
                imm.len().max(1),
                "an immediate is \\NUMBER (at most 64 bits) or \\\"text\"",
            )
        })
}

/// Where BTF names may be used (parse_btf_arg, traceprobe_expand_meta_args):
/// in one kernel function (its entry, which the kernel decides, or its
/// return), or on a tracepoint.
pub(crate) fn check_btf_place(spec: &ProbeSpec, what: &str) -> Result<(), String> {
    match &spec.target {
        Target::User { .. } => Err(format!(
            "{what} needs the kernel's BTF: uprobes have none; fetch registers or $argN"
        )),
        Target::Fprobe { name } if name.bytes().any(|b| GLOB_CHARS.contains(&b)) => Err(format!(
            "{what} needs one function's BTF, and {name} is a glob of functions: use $argN"
        )),
        Target::Address(_) => Err(format!(
            "{what} needs a function name to find its BTF: probe the function by name"
        )),
        _ => Ok(()),
    }
}

/// `NAME->field[->field|.field...]` (parse_btf_arg, parse_btf_field),
/// `NAME` being a parameter or `$retval`.
fn parse_member(
    cur: &Cursor,
    spec: &ProbeSpec,
    at: usize,
    text: &str,
) -> Result<FetchBase, SpecError> {
    let root_end = text.find(['.', '-']).unwrap_or(text.len());
    let name = &text[..root_end];
    if name != "$retval" && !is_identifier(name) {
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
                at + field_at,
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

/// Rules that tie a type to where the value comes from, checked after
/// the fetch (refused at `after`, the kernel's position past the
/// dereference prefixes).
fn check_type(
    cur: &Cursor,
    arg: &FetchArg,
    body_at: usize,
    after: usize,
    ty_len: usize,
) -> Result<(), SpecError> {
    let Some(ty) = arg.ty else {
        return Ok(());
    };
    let memory = arg.fetch.reads_memory();
    let plain = arg.fetch.derefs.is_empty();
    let outer_user = arg.fetch.derefs.last().is_some_and(|d| d.user);
    let base = &arg.fetch.base;
    match ty.base {
        // traceprobe_expand_dentry_args turns `ARG:%pd` into dereferences
        // of ARG.
        BaseType::Dentry | BaseType::File
            if plain
                && matches!(
                    base,
                    FetchBase::Comm | FetchBase::Immediate(Immediate::String(_))
                ) =>
        {
            return Err(cur.err(
                after,
                ty_len,
                format!(
                    "{} dereferences a struct pointer: {} is not one",
                    ty.base, arg.fetch
                ),
            ));
        }
        BaseType::SymStr if outer_user => {
            return Err(cur.err(
                after,
                ty_len,
                "symstr reads kernel addresses: not through a user dereference (+u)",
            ));
        }
        BaseType::SymStr if ty.array.is_some() => {
            return Err(cur.err(after, ty_len, "symstr takes no array"));
        }
        BaseType::SymStr if plain && matches!(base, FetchBase::Immediate(_) | FetchBase::Comm) => {
            return Err(cur.err(
                after,
                ty_len,
                "symstr names an address: an immediate or $comm is not one",
            ));
        }
        BaseType::String | BaseType::UString => {
            let source = memory
                || matches!(
                    base,
                    FetchBase::Comm
                        | FetchBase::Immediate(_)
                        | FetchBase::Retval
                        | FetchBase::EventField(_)
                );
            if !source {
                let at = match base {
                    FetchBase::Name(_) | FetchBase::Member { .. } => body_at,
                    _ => after,
                };
                let f = &arg.fetch;
                return Err(cur.err(
                    at,
                    ty_len,
                    format!(
                        "{} reads memory at an address: write +0({f}):{}, not {f}:{}",
                        ty.base, ty.base, ty.base
                    ),
                ));
            }
        }
        _ => {}
    }
    if ty.array.is_some() && !ty.base.is_string() && outer_user {
        return Err(cur.err(
            after,
            ty_len,
            "arrays are read through kernel dereferences (+OFFS), not user ones (+uOFFS)",
        ));
    }
    if ty.array.is_some() && !ty.base.is_string() && !memory {
        let f = &arg.fetch;
        return Err(cur.err(
            after,
            ty_len,
            format!("arrays are read from memory: write +0({f}):{ty}, not {f}:{ty}"),
        ));
    }
    Ok(())
}
