//! The prototype form of the "function based events" proposal:
//! `do_sys_openat2(int dfd, string filename, x32 flags)`.
//!
//! Each parameter is `TYPE NAME` and maps by position to `$argN` with a
//! kprobe_events type: C integer types to their sized signed/unsigned
//! types, pointers (`T *`) to x64, the kprobe types (`u32`, `x64`, `symbol`)
//! to themselves, and `string`/`ustring` to the string the parameter points
//! at (`+0($argN):string`). `NULL` skips a parameter. The event is named
//! after the function.

use kprobe_perf_arch::Arch;

use super::parse::{is_identifier, Cursor, SpecError};
use super::{
    ArgType, BaseType, Deref, Fetch, FetchArg, FetchBase, ProbeKind, ProbeSpec, Target, MAX_ARGS,
    MAX_EVENT_NAME,
};

/// True when the input has the `FUNC(...)` shape.
pub fn looks_like_prototype(input: &str) -> bool {
    let t = input.trim();
    match t.find('(') {
        Some(i) => {
            let func = t[..i].trim_end();
            t.ends_with(')')
                && !func.is_empty()
                && func
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                && !func.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// What a C or kprobe type name means for a parameter.
enum ParamType {
    Value(BaseType),
    /// The parameter points at a string of this kind.
    PointsAtString(BaseType),
}

/// Whether a parameter's declaration has a `*`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Declared {
    Pointer,
    Plain,
}

fn c_type(words: &[&str], declared: Declared) -> Option<ParamType> {
    use BaseType::*;
    let words: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !matches!(*w, "const" | "volatile" | "__user" | "__rcu"))
        .collect();
    let joined = words.join(" ");
    if declared == Declared::Pointer {
        // `char *name` reads as "a string" to most people, but whether it is
        // a kernel or a user string cannot be told from the type: keep it a
        // pointer; `string`/`ustring` say what to read.
        return Some(ParamType::Value(Hex(64)));
    }
    let t = match joined.as_str() {
        "string" => return Some(ParamType::PointsAtString(String)),
        "ustring" => return Some(ParamType::PointsAtString(UString)),
        "symbol" => Symbol,
        "char" | "signed char" | "s8" | "__s8" => Signed(8),
        "unsigned char" | "u8" | "__u8" | "bool" | "_Bool" => Unsigned(8),
        "short" | "short int" | "signed short" | "s16" | "__s16" => Signed(16),
        "unsigned short" | "unsigned short int" | "u16" | "__u16" | "umode_t" => Unsigned(16),
        "int" | "signed" | "signed int" | "s32" | "__s32" | "pid_t" => Signed(32),
        "unsigned" | "unsigned int" | "u32" | "__u32" | "gfp_t" => Unsigned(32),
        "long" | "long int" | "signed long" | "long long" | "s64" | "__s64" | "ssize_t"
        | "loff_t" => Signed(64),
        "unsigned long" | "unsigned long int" | "unsigned long long" | "u64" | "__u64"
        | "size_t" => Unsigned(64),
        "x8" => Hex(8),
        "x16" => Hex(16),
        "x32" => Hex(32),
        "x64" => Hex(64),
        t if t.starts_with("enum ") => Signed(32),
        _ => return None,
    };
    Some(ParamType::Value(t))
}

/// One parameter `p` (at `p_at`, the `position`th) of a prototype: its
/// name, what fetches it, and its type.
fn parse_param<'p>(
    cur: &Cursor,
    p_at: usize,
    p: &'p str,
    position: u32,
) -> Result<(&'p str, Fetch, BaseType), SpecError> {
    if p.contains(['[', '+', '|', '(']) {
        return Err(cur.err(p_at, p.len(), "indexing and offsets inside a prototype are not supported; use the kprobe_events form (+OFFS($argN))"));
    }
    let declared = if p.contains('*') {
        Declared::Pointer
    } else {
        Declared::Plain
    };
    let words: Vec<&str> = p
        .split(|c: char| c.is_ascii_whitespace() || c == '*')
        .filter(|w| !w.is_empty())
        .collect();
    let Some((name, type_words)) = words.split_last() else {
        return Err(cur.err(p_at, p.len(), "a parameter is TYPE NAME"));
    };
    if type_words.is_empty() {
        if c_type(&[name], declared).is_some() {
            return Err(cur.err(
                p_at,
                p.len(),
                format!("this parameter has a type but no name: write {name} NAME"),
            ));
        }
        return Err(cur.err(
            p_at,
            p.len(),
            format!("parameter {name} has no type: write e.g. int {name}"),
        ));
    }
    if !is_identifier(name) {
        return Err(cur.err(p_at, p.len(), format!("{name} is not a parameter name")));
    }
    // The name is the argument's (found by cargo xtask fuzz: a longer one
    // printed a definition that did not parse again).
    if name.len() > super::MAX_ARG_NAME {
        let at = p_at + p.rfind(name).unwrap_or(0);
        return Err(cur.err(
            at,
            name.len(),
            format!(
                "argument names are at most {} characters",
                super::MAX_ARG_NAME
            ),
        ));
    }
    let type_text = type_words.join(" ");
    let ty = c_type(type_words, declared).ok_or_else(|| {
        cur.err(p_at, p.len() - name.len(), format!("unknown type {type_text}{}: use a C integer type, a pointer, string, ustring, symbol, or u8..u64/s8..s64/x8..x64", if declared == Declared::Pointer { " *" } else { "" }))
    })?;
    let (fetch, base) = match ty {
        ParamType::Value(b) => (
            Fetch {
                base: FetchBase::Arg(position),
                derefs: Vec::new(),
            },
            b,
        ),
        ParamType::PointsAtString(b) => (
            Fetch {
                base: FetchBase::Arg(position),
                derefs: vec![Deref {
                    offset: 0,
                    user: false,
                }],
            },
            b,
        ),
    };
    Ok((name, fetch, base))
}

/// Parses `FUNC(TYPE NAME, ...)`.
pub fn parse(input: &str, _arch: Arch) -> Result<ProbeSpec, SpecError> {
    let cur = Cursor {
        input,
        eprobe: false,
    };
    let lead = input.len() - input.trim_start().len();
    let t = input.trim();
    let open = t.find('(').unwrap_or(t.len());
    let func = t[..open].trim_end();
    let func_at = lead;
    let body_start = lead + open + 1;
    let body = &input[body_start..lead + t.len() - 1];
    let mut args = Vec::new();
    let mut position = 0u32;
    let mut at = body_start;
    if !body.trim().is_empty() {
        for param in body.split(',') {
            let p_at = at + (param.len() - param.trim_start().len());
            at += param.len() + 1;
            position += 1;
            let p = param.trim();
            if p.is_empty() {
                return Err(cur.err(
                    p_at,
                    1,
                    "empty parameter: write TYPE NAME, or NULL to skip one",
                ));
            }
            if p == "NULL" {
                continue;
            }
            let (name, fetch, base) = parse_param(&cur, p_at, p, position)?;
            if args.len() == MAX_ARGS {
                return Err(cur.err(
                    p_at,
                    p.len(),
                    format!("at most {MAX_ARGS} arguments per probe"),
                ));
            }
            if args
                .iter()
                .any(|a: &FetchArg| a.name.as_deref() == Some(name))
            {
                return Err(cur.err(
                    p_at,
                    p.len(),
                    format!("argument name {name} is used twice; names must be unique"),
                ));
            }
            args.push(FetchArg {
                name: Some(name.to_string()),
                fetch,
                ty: Some(ArgType::scalar(base)),
            });
        }
    }
    let event: String = func
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if func.starts_with('.') {
        return Err(cur.err(func_at, func.len(), "not a function name"));
    }
    // The event is named after the function, and the kernel's event
    // names fit MAX_EVENT_NAME_LEN (found by `cargo xtask fuzz`: the
    // canonical form of a longer one did not parse).
    if event.len() > MAX_EVENT_NAME {
        return Err(cur.err(
            func_at,
            func.len(),
            format!(
                "the event is named after the function, and event names are at most {MAX_EVENT_NAME} characters; write p:SHORT_NAME {func} ... instead"
            ),
        ));
    }
    Ok(ProbeSpec {
        kind: ProbeKind::Entry,
        group: None,
        event: Some(event),
        target: Target::Symbol {
            module: None,
            name: func.to_string(),
            instance: None,
            offset: 0,
        },
        args,
    })
}
