//! Event filters in the kernel's ftrace filter grammar (`--filter EXPR`):
//! parsed, type-checked against a probe's fields, evaluated in user space
//! over [`Event`](crate::decode::Event)s, and written back in the form the kernel takes through
//! `PERF_EVENT_IOC_SET_FILTER`.
//!
//! The grammar is the one of Documentation/trace/events.rst ("Event
//! filtering") as kernel/trace/trace_events_filter.c implements it since
//! 4.17:
//!
//! - a predicate is `FIELD OP VALUE`; numbers take `==`, `!=`, `<`, `<=`,
//!   `>`, `>=` and `&` (true when any masked bit is set); strings take
//!   `==`, `!=` and `~` (a glob);
//! - numbers are decimal, `0x` hex, `0`-prefixed octal, `-` for negative
//!   (only on signed fields, as the kernel's `kstrtoull` refuses `-` for
//!   unsigned ones); the constant is cast to the field's width, as the
//!   kernel casts it;
//! - strings are quoted with `"` or `'` (no escapes); unquoted words are
//!   refused, as the kernel refuses them ("did you forget quotes?");
//! - `~` patterns: `*` at the start, the end or both is a suffix, prefix or
//!   substring test; a `*` elsewhere, `?`, `[...]` or `\` make a full glob
//!   (`*`, `?`, classes `[a-z]` and `[!a-z]`); a leading `!` in the
//!   pattern negates it; `==`/`!=` compare literally. Two patterns the
//!   kernel reads otherwise (one starting with a digit, compared
//!   literally; a `*suffix` on `comm`, tested against the end of the
//!   16-byte buffer) mean here what they say, and
//!   [`Filter::where_it_can_run`] keeps them in user space;
//! - `!` negates the predicate or parenthesized group after it, `&&` binds
//!   tighter than `||`, parentheses group.
//!
//! Fields: the probe's named arguments, then `comm` (also `COMM`), `pid`
//! (the process id), `tid` (also `common_pid`, the kernel's name for the
//! thread id) and `cpu` (also `CPU`, `common_cpu`). An argument with one of
//! these names hides the special field, as an event field hides the
//! kernel's generic ones.
//!
//! ```
//! use kprobe_perf_engine::cli::plan::filter::{FieldDef, FieldType, Filter, Placement};
//! let fields = [FieldDef::new("size", FieldType::Int { bits: 64, signed: false })];
//! let f = Filter::compile("size > 0x1000 && comm ~ \"post*\"", &fields).unwrap();
//! assert_eq!(f.to_string(), "size > 0x1000 && comm ~ \"post*\"");
//! let format = [
//!     FieldDef::new("common_pid", FieldType::Int { bits: 32, signed: true }),
//!     FieldDef::new("size", FieldType::Int { bits: 64, signed: false }),
//! ];
//! assert_eq!(
//!     f.where_it_can_run(&format),
//!     Placement::Kernel("size > 0x1000 && comm ~ \"post*\"".to_string())
//! );
//! let err = Filter::compile("sise > 1", &fields).unwrap_err();
//! assert_eq!(err.to_string(), "unknown field `sise`: this probe's fields are size, comm, pid, tid, cpu\n  sise > 1\n  ^^^^");
//! ```

use std::fmt;

use kprobe_perf_spec::{ArgType, BaseType, Span};

mod check;
pub(crate) mod eval;
mod kernel;
mod parse;
mod probe;
#[cfg(test)]
mod tests;

pub use kernel::{common_fields, Placement, UserSpaceReason, MAX_KERNEL_FILTER};
pub use parse::{MAX_DEPTH, MAX_STRING};
pub use probe::{expected_format, fields_of, FilterRuns, ProbeFilter};

/// A refused filter: the input, the offending token, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// The whole filter as given.
    pub input: String,
    /// The offending token (shown as at least one caret).
    pub span: Span,
    /// What is wrong and what would be right.
    pub message: String,
    /// The kernel's own words for the same mistake (its `err_text[]`,
    /// as `error_log` would show them), for cross-reference.
    pub kernel: &'static str,
}

impl std::error::Error for FilterError {}

impl fmt::Display for FilterError {
    /// Three lines, as probe definition errors print: the message, the
    /// input, and carets under the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.span.write_under(f, &self.message, &self.input)
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&`: true when `field & value` is not zero.
    BitAnd,
    /// `~`: glob match (strings only).
    Glob,
}

impl Op {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::BitAnd => "&",
            Op::Glob => "~",
        }
    }
}

/// How a number was written (kept so the canonical and kernel forms
/// read as the user wrote them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Radix {
    /// `123`
    Decimal,
    /// `0x7b`
    Hex,
    /// `0173`
    Octal,
}

/// A number constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Number {
    /// Written with a leading `-`.
    pub negative: bool,
    /// The digits' value.
    pub magnitude: u64,
    /// How it was written.
    pub radix: Radix,
}

impl Number {
    /// The 64-bit pattern the kernel stores in `pred->val` (two's
    /// complement for negative numbers).
    pub fn bits(self) -> u64 {
        if self.negative {
            self.magnitude.wrapping_neg()
        } else {
            self.magnitude
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.negative { "-" } else { "" };
        match self.radix {
            Radix::Decimal => write!(f, "{sign}{}", self.magnitude),
            Radix::Hex => write!(f, "{sign}0x{:x}", self.magnitude),
            Radix::Octal => write!(f, "{sign}0{:o}", self.magnitude),
        }
    }
}

/// The value side of a predicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// A number.
    Num(Number),
    /// A quoted string (without its quotes).
    Str(String),
}

impl fmt::Display for Literal {
    /// Numbers as written; strings in double quotes, or single quotes
    /// when they contain a double quote (neither form has escapes).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Num(n) => n.fmt(f),
            Literal::Str(s) if s.contains('"') => write!(f, "'{s}'"),
            Literal::Str(s) => write!(f, "\"{s}\""),
        }
    }
}

/// One `FIELD OP VALUE` test, with where each part was in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    /// The field name as written.
    pub field: String,
    /// Where the field name is.
    pub field_span: Span,
    /// The operator.
    pub op: Op,
    /// Where the operator is.
    pub op_span: Span,
    /// The constant.
    pub value: Literal,
    /// Where the constant is (quotes included).
    pub value_span: Span,
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// A comparison.
    Cmp(Predicate),
    /// `!X`
    Not(Box<Expr>),
    /// `A && B && ...` (two or more).
    And(Vec<Expr>),
    /// `A || B || ...` (two or more).
    Or(Vec<Expr>),
}

impl Expr {
    /// Parses a filter (syntax only; [`Filter::compile`] also checks it
    /// against the probe's fields).
    pub fn parse(input: &str) -> Result<Expr, FilterError> {
        parse::Parser::new(input).parse()
    }

    /// Every predicate, left to right.
    pub fn predicates(&self) -> Vec<&Predicate> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Predicate>) {
        match self {
            Expr::Cmp(p) => out.push(p),
            Expr::Not(e) => e.collect(out),
            Expr::And(v) | Expr::Or(v) => v.iter().for_each(|e| e.collect(out)),
        }
    }

    /// Writes the canonical form, naming each predicate's field with
    /// `name(predicate)`.
    pub(crate) fn write_with(&self, out: &mut String, name: &dyn Fn(&Predicate) -> String) {
        match self {
            Expr::Cmp(p) => {
                out.push_str(&name(p));
                out.push(' ');
                out.push_str(p.op.as_str());
                out.push(' ');
                out.push_str(&p.value.to_string());
            }
            Expr::Not(e) => {
                out.push_str("!(");
                e.write_with(out, name);
                out.push(')');
            }
            Expr::And(v) => {
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" && ");
                    }
                    if matches!(e, Expr::Or(_)) {
                        out.push('(');
                        e.write_with(out, name);
                        out.push(')');
                    } else {
                        e.write_with(out, name);
                    }
                }
            }
            Expr::Or(v) => {
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" || ");
                    }
                    e.write_with(out, name);
                }
            }
        }
    }
}

impl fmt::Display for Expr {
    /// The canonical form: single spaces around operators, `&&` groups
    /// inside `||` without parentheses, `||` groups inside `&&` and every
    /// negated term in parentheses, numbers as written, strings in double
    /// quotes. It parses back to the same tree.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.write_with(&mut s, &|p| p.field.clone());
        f.write_str(&s)
    }
}

/// The type of a field, as far as filtering cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldType {
    /// An integer of 8, 16, 32 or 64 bits.
    Int {
        /// Width in bits.
        bits: u8,
        /// Signed (compared as such by `<`, `>`, ...).
        signed: bool,
    },
    /// A string.
    Str,
    /// Anything else (arrays, odd sizes): not filterable; the text says
    /// what it is.
    Other(String),
}

impl FieldType {
    /// The filter type of a probe argument of type `ty`, as the kernel
    /// defines its field in the event's format: `uN`/`xN`/`char`/bitfields
    /// unsigned (a bitfield as its container), `sN` signed, `symbol` an
    /// unsigned 64-bit integer, the string types (`string`, `ustring`,
    /// `symstr`, `%pd`, `%pD`) strings, arrays not filterable.
    pub fn of_arg(ty: &ArgType) -> FieldType {
        if let Some(n) = ty.array {
            return FieldType::Other(format!("an array ({n} elements)"));
        }
        match ty.base {
            BaseType::Unsigned(b) | BaseType::Hex(b) => FieldType::Int {
                bits: b,
                signed: false,
            },
            BaseType::Signed(b) => FieldType::Int {
                bits: b,
                signed: true,
            },
            BaseType::Char => FieldType::Int {
                bits: 8,
                signed: false,
            },
            BaseType::Symbol => FieldType::Int {
                bits: 64,
                signed: false,
            },
            BaseType::Bitfield { container, .. } => FieldType::Int {
                bits: container,
                signed: false,
            },
            BaseType::String
            | BaseType::UString
            | BaseType::SymStr
            | BaseType::Dentry
            | BaseType::File => FieldType::Str,
        }
    }

    /// The filter type of a field of an event's `format` file
    /// (`field:TYPE NAME; offset:O; size:S; signed:G;`), by the kernel's
    /// own rules (`filter_assign_type()`): `__data_loc`/`__rel_loc` char
    /// arrays, fixed `char[N]` arrays and `char *` are strings; other
    /// arrays are not filterable; the rest are integers of `size` bytes
    /// (1, 2, 4 or 8) and the given signedness.
    pub fn from_format(type_text: &str, size: usize, signed: bool) -> FieldType {
        let t = type_text.trim();
        let is_char = t.contains("char");
        let char_array = t.contains("__data_loc") || t.contains("__rel_loc") || t.contains('[');
        if char_array && is_char || t == "char *" || t == "const char *" {
            return FieldType::Str;
        }
        if t.contains('[') || t.contains("__data_loc") || t.contains("__rel_loc") {
            return FieldType::Other(format!("`{t}`"));
        }
        match size {
            1 | 2 | 4 | 8 => FieldType::Int {
                bits: (size * 8) as u8,
                signed,
            },
            _ => FieldType::Other(format!("`{t}` of {size} bytes")),
        }
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldType::Int { bits, signed: true } => write!(f, "s{bits}"),
            FieldType::Int {
                bits,
                signed: false,
            } => write!(f, "u{bits}"),
            FieldType::Str => f.write_str("string"),
            FieldType::Other(what) => f.write_str(what),
        }
    }
}

/// A named field a filter may test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDef {
    /// The name (a probe argument's name, or a format file's field name).
    pub name: String,
    /// Its type.
    pub ty: FieldType,
}

impl FieldDef {
    /// A field.
    pub fn new(name: impl Into<String>, ty: FieldType) -> FieldDef {
        FieldDef {
            name: name.into(),
            ty,
        }
    }
}

/// What a predicate reads from an [`Event`](crate::decode::Event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRef {
    /// `event.args[i]`, the probe's i-th field.
    Arg(usize),
    /// `event.comm`.
    Comm,
    /// `event.pid` (the process id).
    Pid,
    /// `event.tid` (the thread id; the kernel's `common_pid`).
    Tid,
    /// `event.cpu`.
    Cpu,
}

/// A filter checked against a probe's fields, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Filter {
    expr: Expr,
    /// Resolved field and type of each predicate, in
    /// [`Expr::predicates`] order.
    resolved: Vec<(FieldRef, FieldType)>,
    pub(crate) program: eval::Program,
}

impl Filter {
    /// Parses `input` and checks it against `fields` (the probe's named
    /// arguments in [`Event::args`](crate::decode::Event::args) order; `comm`, `pid`, `tid` and `cpu`
    /// are added). Errors point at the offending token: an unknown
    /// field, an operator the field's type does not take, a value of the
    /// wrong type or out of range, and every syntax error of
    /// [`Expr::parse`].
    pub fn compile(input: &str, fields: &[FieldDef]) -> Result<Filter, FilterError> {
        let expr = Expr::parse(input)?;
        let resolved = check::check(input, &expr, fields)?;
        let program = eval::Program::compile(&expr, &resolved);
        Ok(Filter {
            expr,
            resolved,
            program,
        })
    }

    /// The parse tree.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// What each predicate reads, in [`Expr::predicates`] order.
    pub fn fields(&self) -> Vec<FieldRef> {
        self.resolved.iter().map(|(r, _)| *r).collect()
    }
}

impl fmt::Display for Filter {
    /// The canonical form of [`Expr`]'s `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.expr.fmt(f)
    }
}
