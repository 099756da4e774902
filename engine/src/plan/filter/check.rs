//! Type checking: every predicate's field resolved against the probe's
//! fields and the special ones, and its operator and value checked
//! against the field's type, with the kernel's rules.

use super::{Expr, FieldDef, FieldRef, FieldType, FilterError, Literal, Op, Predicate, Span};

const S32: FieldType = FieldType::Int {
    bits: 32,
    signed: true,
};

/// The special fields, after the probe's own (which hide them).
pub(crate) const SPECIALS: [&str; 4] = ["comm", "pid", "tid", "cpu"];

/// Resolves a field name: the probe's fields first (as the kernel looks
/// at an event's own fields before its generic and common ones), then
/// `comm`/`COMM`, `pid`, `tid`/`common_pid`, `cpu`/`CPU`/`common_cpu`.
pub(crate) fn resolve(name: &str, fields: &[FieldDef]) -> Option<(FieldRef, FieldType)> {
    if let Some(i) = fields.iter().position(|f| f.name == name) {
        return Some((FieldRef::Arg(i), fields[i].ty.clone()));
    }
    match name {
        "comm" | "COMM" => Some((FieldRef::Comm, FieldType::Str)),
        "pid" => Some((FieldRef::Pid, S32)),
        "tid" | "common_pid" => Some((FieldRef::Tid, S32)),
        "cpu" | "CPU" | "common_cpu" => Some((FieldRef::Cpu, S32)),
        _ => None,
    }
}

fn err(input: &str, span: Span, kernel: &'static str, message: String) -> FilterError {
    FilterError {
        input: input.to_string(),
        span,
        message,
        kernel,
    }
}

/// Checks every predicate of `expr`; returns what each reads, in
/// [`Expr::predicates`] order.
pub(crate) fn check(
    input: &str,
    expr: &Expr,
    fields: &[FieldDef],
) -> Result<Vec<(FieldRef, FieldType)>, FilterError> {
    expr.predicates()
        .into_iter()
        .map(|p| check_one(input, p, fields))
        .collect()
}

fn check_one(
    input: &str,
    p: &Predicate,
    fields: &[FieldDef],
) -> Result<(FieldRef, FieldType), FilterError> {
    let name = &p.field;
    let Some((fref, ty)) = resolve(name, fields) else {
        let mut known: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        for s in SPECIALS {
            if !known.contains(&s) {
                known.push(s);
            }
        }
        return Err(err(
            input,
            p.field_span,
            "Field not found",
            format!(
                "unknown field `{name}`: this probe's fields are {}",
                known.join(", ")
            ),
        ));
    };
    match (&ty, &p.value) {
        (FieldType::Other(what), _) => Err(err(
            input,
            p.field_span,
            "Illegal operation for field type",
            format!("`{name}` is {what}: filters compare numbers and strings only"),
        )),
        (FieldType::Str, value) => check_string(input, p, value).map(|()| (fref, ty)),
        (FieldType::Int { bits, signed }, value) => {
            check_number(input, p, value, fref, (&ty, *bits, *signed)).map(|()| (fref, ty))
        }
    }
}

/// Refuses an operator or a value a string field does not take.
fn check_string(input: &str, p: &Predicate, value: &Literal) -> Result<(), FilterError> {
    let name = &p.field;
    if !matches!(p.op, Op::Eq | Op::Ne | Op::Glob) {
        return Err(err(
            input,
            p.op_span,
            "Illegal operation for field type",
            format!(
                "`{}` does not apply to strings: `{name}` is a string, which takes \
                 ==, != and ~ (glob)",
                p.op.as_str()
            ),
        ));
    }
    match value {
        Literal::Num(n) => Err(err(
            input,
            p.value_span,
            "Expecting string field",
            format!(
                "`{name}` is a string: quote the value (`{name} {} \"{n}\"`)",
                p.op.as_str()
            ),
        )),
        Literal::Str(_) => Ok(()),
    }
}

/// Refuses an operator or a value a number field (of type `ty`, `bits`
/// wide, `signed` or not) does not take, as the kernel reads them.
fn check_number(
    input: &str,
    p: &Predicate,
    value: &Literal,
    fref: FieldRef,
    (ty, bits, signed): (&FieldType, u8, bool),
) -> Result<(), FilterError> {
    let name = &p.field;
    if p.op == Op::Glob {
        return Err(err(
            input,
            p.op_span,
            "Illegal operation for field type",
            format!(
                "`~` matches strings, but `{name}` is a number ({ty}): use ==, !=, <, \
                 <=, >, >= or &"
            ),
        ));
    }
    let n = match value {
        Literal::Str(_) => {
            return Err(err(
                input,
                p.value_span,
                "Expecting numeric field",
                format!("`{name}` is a number ({ty}): compare it with a number, not a string"),
            ))
        }
        Literal::Num(n) => n,
    };
    if fref == FieldRef::Cpu && p.op == Op::BitAnd {
        return Err(err(
            input,
            p.op_span,
            "Illegal operation for field type",
            "`&` does not apply to cpu: the kernel's cpu test has no mask (it is always \
             false); write `cpu == 0 || cpu == 2`"
                .to_string(),
        ));
    }
    // The kernel reads the constant with kstrtoull for unsigned
    // fields (no `-`) and kstrtoll for signed ones (i64 range),
    // then casts it to the field's width.
    if n.negative && !signed {
        return Err(err(
            input,
            p.value_span,
            "Illegal integer value",
            format!(
                "`{name}` is unsigned ({ty}): it cannot be compared with a negative \
                 number (write its two's complement, e.g. 0x{:x})",
                n.bits() & mask(bits)
            ),
        ));
    }
    if signed && !n.negative && n.magnitude > i64::MAX as u64 {
        return Err(err(
            input,
            p.value_span,
            "Illegal integer value",
            format!(
                "`{name}` is signed ({ty}): {n} is above the largest value the kernel \
                 reads for it (9223372036854775807); write it negative"
            ),
        ));
    }
    Ok(())
}

/// The low `bits` bits set.
pub(crate) fn mask(bits: u8) -> u64 {
    if bits == 0 || bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}
