//! The ftrace filter grammar, parsed into an [`Expr`] with the byte span of
//! every token.
//!
//! The rules follow the kernel's `predicate_parse()` and `parse_pred()`
//! (kernel/trace/trace_events_filter.c, the parser rewritten in 4.17):
//! parentheses and quotes are checked first over the whole input (as
//! `calc_stack()` does), `!` binds to the predicate or group after it,
//! `&&` binds tighter than `||`, a predicate is `FIELD OP VALUE` with the
//! field a run of letters, digits and `_`, the operator the first of
//! `~ != == <= < >= > &` that matches, and the value a quoted string (`"`
//! or `'`, no escapes) or a number (`-`, then letters and digits, read as
//! `kstrtoll`/`kstrtoull` with base 0 do: `0x` hex, leading `0` octal).

use super::{Expr, FilterError, Literal, Number, Op, Predicate, Radix, Span};

/// Deepest nesting of parentheses accepted (the kernel has no such limit
/// short of its 4095-byte filter length; this one keeps the parser's
/// recursion bounded).
pub const MAX_DEPTH: usize = 128;

/// Longest string value, in bytes (the kernel's `MAX_FILTER_STR_VAL` is
/// 256 including the NUL).
pub const MAX_STRING: usize = 255;

/// Longest number token, in bytes (the kernel's `num_buf` is 24 bytes
/// including the NUL).
const MAX_NUMBER: usize = 23;

/// The operators in the order the kernel tries them (`<=` before `<`).
const OPS: [(&str, Op); 8] = [
    ("~", Op::Glob),
    ("!=", Op::Ne),
    ("==", Op::Eq),
    ("<=", Op::Le),
    ("<", Op::Lt),
    (">=", Op::Ge),
    (">", Op::Gt),
    ("&", Op::BitAnd),
];

pub(crate) struct Parser<'a> {
    input: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

fn is_field_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The word starting at `at`: what a caret should underline when the
/// token there is not what was expected.
fn word_len(bytes: &[u8], at: usize) -> usize {
    let mut end = at;
    while end < bytes.len()
        && !bytes[end].is_ascii_whitespace()
        && !matches!(bytes[end], b'(' | b')' | b'&' | b'|')
    {
        end += 1;
    }
    if end == at && at < bytes.len() {
        // One punctuation byte (or the UTF-8 character starting there).
        let mut e = at + 1;
        while e < bytes.len() && (bytes[e] & 0xc0) == 0x80 {
            e += 1;
        }
        return e - at;
    }
    end - at
}

impl<'a> Parser<'a> {
    pub(crate) fn new(input: &'a str) -> Parser<'a> {
        Parser {
            input,
            bytes: input.as_bytes(),
            pos: 0,
            depth: 0,
        }
    }

    fn err(&self, start: usize, len: usize, kernel: &'static str, message: String) -> FilterError {
        FilterError {
            input: self.input.to_string(),
            span: Span { start, len },
            message,
            kernel,
        }
    }

    fn skip_ws(&mut self) {
        while self.pos < self.bytes.len() && self.bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn text(&self, start: usize, len: usize) -> &str {
        self.input.get(start..start + len).unwrap_or("")
    }

    /// The whole-input checks the kernel makes before parsing
    /// (`calc_stack()`): a quote left open, a `)` without its `(`, a `(`
    /// never closed, and an input with no predicate at all.
    fn prescan(&self) -> Result<(), FilterError> {
        let mut open: Vec<usize> = Vec::new();
        let mut quote: Option<(u8, usize)> = None;
        for (i, &b) in self.bytes.iter().enumerate() {
            if let Some((q, _)) = quote {
                if b == q {
                    quote = None;
                }
                continue;
            }
            match b {
                b'"' | b'\'' => quote = Some((b, i)),
                b'(' => open.push(i),
                b')' if open.pop().is_none() => {
                    return Err(self.err(
                        i,
                        1,
                        "Too few '('",
                        "unbalanced parenthesis: this `)` has no matching `(`".to_string(),
                    ));
                }
                _ => {}
            }
        }
        if let Some((q, at)) = quote {
            return Err(self.err(
                at,
                1,
                "Missing matching quote",
                format!(
                    "unterminated string: this {} is never closed (strings have no escapes; \
                     use the other quote character to include this one)",
                    q as char
                ),
            ));
        }
        if let Some(&at) = open.last() {
            return Err(self.err(
                at,
                1,
                "Too many '('",
                "unbalanced parenthesis: this `(` is never closed".to_string(),
            ));
        }
        if self.bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(self.err(
                self.bytes.len(),
                0,
                "No filter found",
                "empty filter: write a comparison such as `size > 4096` or `comm == \"bash\"`"
                    .to_string(),
            ));
        }
        Ok(())
    }

    pub(crate) fn parse(mut self) -> Result<Expr, FilterError> {
        self.prescan()?;
        let e = self.or()?;
        self.skip_ws();
        if self.pos < self.bytes.len() {
            // Only a stray `)` can stop `or()` here; the prescan has
            // balanced them, so this is defensive.
            let len = word_len(self.bytes, self.pos);
            return Err(self.err(
                self.pos,
                len,
                "Too many terms in predicate expression",
                format!(
                    "expected && or || here, found `{}`",
                    self.text(self.pos, len)
                ),
            ));
        }
        Ok(e)
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut items = Vec::new();
        push_flat(&mut items, self.and()?, true);
        loop {
            self.skip_ws();
            if self.bytes[self.pos..].starts_with(b"||") {
                self.pos += 2;
                push_flat(&mut items, self.and()?, true);
            } else {
                break;
            }
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Expr::Or(Vec::new()))
        } else {
            Expr::Or(items)
        })
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut items = Vec::new();
        push_flat(&mut items, self.unary()?, false);
        loop {
            self.skip_ws();
            if self.bytes[self.pos..].starts_with(b"&&") {
                self.pos += 2;
                push_flat(&mut items, self.unary()?, false);
            } else {
                self.after_term()?;
                break;
            }
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Expr::And(Vec::new()))
        } else {
            Expr::And(items)
        })
    }

    /// After a predicate or a group only `&&`, `||`, `)` or the end may
    /// come (the kernel says "Too many terms in predicate expression").
    fn after_term(&self) -> Result<(), FilterError> {
        let rest = &self.bytes[self.pos..];
        if rest.is_empty() || rest.starts_with(b"||") || rest[0] == b')' {
            return Ok(());
        }
        let len = word_len(self.bytes, self.pos);
        let found = self.text(self.pos, len);
        let hint = if rest[0] == b'&' {
            ": `&` alone tests bits (`flags & 0x4`); join comparisons with `&&`"
        } else if rest[0] == b'|' {
            ": join comparisons with `||`"
        } else if rest[0] == b'(' {
            ": join the group to what comes before with && or ||"
        } else {
            ": join comparisons with && or ||, and quote strings that contain spaces"
        };
        Err(self.err(
            self.pos,
            len,
            "Too many terms in predicate expression",
            format!("expected &&, || or ) here, found `{found}`{hint}"),
        ))
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        // `!` chains fold into one negation (iteratively: no recursion
        // per `!`).
        let mut negate = false;
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'!') if !matches!(self.bytes.get(self.pos + 1), Some(b'=') | Some(b'~')) => {
                    negate = !negate;
                    self.pos += 1;
                }
                _ => break,
            }
        }
        let inner = if self.peek() == Some(b'(') {
            let open = self.pos;
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(self.err(
                    open,
                    1,
                    "Too many '('",
                    format!("parentheses nested more than {MAX_DEPTH} deep"),
                ));
            }
            self.pos += 1;
            let e = self.or()?;
            self.skip_ws();
            if self.peek() != Some(b')') {
                // Unreachable after the prescan; kept for safety.
                return Err(self.err(
                    open,
                    1,
                    "Too many '('",
                    "unbalanced parenthesis: this `(` is never closed".to_string(),
                ));
            }
            self.pos += 1;
            self.depth -= 1;
            e
        } else {
            Expr::Cmp(self.predicate()?)
        };
        Ok(if negate {
            Expr::Not(Box::new(inner))
        } else {
            inner
        })
    }

    fn predicate(&mut self) -> Result<Predicate, FilterError> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.bytes.len() && is_field_byte(self.bytes[self.pos]) {
            self.pos += 1;
        }
        let field_span = Span {
            start,
            len: self.pos - start,
        };
        if field_span.len == 0 {
            let len = word_len(self.bytes, start);
            let found = self.text(start, len);
            let message = if start >= self.bytes.len() {
                "expected a comparison such as `size > 4096` at the end".to_string()
            } else {
                format!("expected a field name, found `{found}`")
            };
            return Err(self.err(start, len, "Field not found", message));
        }
        let field = self.text(start, field_span.len).to_string();
        if self.bytes[start].is_ascii_digit() {
            return Err(self.err(
                start,
                field_span.len,
                "Field not found",
                format!(
                    "expected a field name, found `{field}`: the field comes first \
                     (`size > 1`, not `1 < size`)"
                ),
            ));
        }
        if self.peek() == Some(b'.') {
            let len = word_len(self.bytes, self.pos);
            let suffix = self.text(self.pos, len).to_string();
            return Err(self.err(
                self.pos,
                len,
                "Invalid operator",
                format!(
                    "`{field}{suffix}`: field suffixes (.ustring, .function) are not \
                     supported; compare the field itself"
                ),
            ));
        }
        self.skip_ws();
        let op_at = self.pos;
        let (op_text, op) = self.operator(&field)?;
        self.pos += op_text.len();
        let op_span = Span {
            start: op_at,
            len: op_text.len(),
        };
        self.skip_ws();
        let (value, value_span) = self.value(&field, op_text)?;
        Ok(Predicate {
            field,
            field_span,
            op,
            op_span,
            value,
            value_span,
        })
    }

    /// The comparison operator after `field`, at the current position.
    fn operator(&mut self, field: &str) -> Result<(&'static str, Op), FilterError> {
        let op_at = self.pos;
        let rest = &self.bytes[self.pos..];
        let found = OPS.iter().find(|(t, _)| rest.starts_with(t.as_bytes()));
        match found {
            Some(&(t, op)) if !(op == Op::BitAnd && rest.starts_with(b"&&")) => Ok((t, op)),
            _ => {
                let len = if rest.starts_with(b"&&") || rest.starts_with(b"||") {
                    2
                } else if rest.is_empty() {
                    0
                } else {
                    word_len(self.bytes, op_at).max(1)
                };
                let tok = self.text(op_at, len);
                let message = if rest.starts_with(b"&&")
                    || rest.starts_with(b"||")
                    || rest.is_empty()
                    || rest[0] == b')'
                {
                    format!(
                        "`{field}` alone is not a comparison: compare it with a value, \
                         e.g. `{field} != 0`"
                    )
                } else if rest.starts_with(b"!~") {
                    format!(
                        "`!~` is not an operator: negate the pattern (`{field} ~ \"!PATTERN\"`) \
                         or the comparison (`!({field} ~ \"PATTERN\")`)"
                    )
                } else if rest[0] == b'=' {
                    "`=` is not an operator: use `==` to test equality".to_string()
                } else {
                    format!(
                        "expected an operator after `{field}` (==, !=, <, <=, >, >=, & or ~), \
                         found `{tok}`"
                    )
                };
                Err(self.err(op_at, len, "Invalid operator", message))
            }
        }
    }

    fn value(&mut self, field: &str, op: &str) -> Result<(Literal, Span), FilterError> {
        let at = self.pos;
        match self.peek() {
            None => Err(self.err(
                at,
                0,
                "Invalid value (did you forget quotes)?",
                format!("expected a value after `{field} {op}`"),
            )),
            Some(q @ (b'"' | b'\'')) => {
                let body = at + 1;
                let end = self.bytes[body..]
                    .iter()
                    .position(|&b| b == q)
                    .map(|p| body + p)
                    .ok_or_else(|| {
                        self.err(
                            at,
                            1,
                            "Missing matching quote",
                            format!("unterminated string: this {} is never closed", q as char),
                        )
                    })?;
                let s = self.text(body, end - body).to_string();
                self.pos = end + 1;
                let span = Span {
                    start: at,
                    len: end + 1 - at,
                };
                if s.len() > MAX_STRING {
                    return Err(self.err(
                        at,
                        span.len,
                        "Operand too long",
                        format!(
                            "this string is {} bytes long; the kernel takes at most {MAX_STRING}",
                            s.len()
                        ),
                    ));
                }
                Ok((Literal::Str(s), span))
            }
            Some(b) if b.is_ascii_digit() || b == b'-' => {
                let mut end = at + usize::from(b == b'-');
                while end < self.bytes.len() && self.bytes[end].is_ascii_alphanumeric() {
                    end += 1;
                }
                self.pos = end;
                let span = Span {
                    start: at,
                    len: end - at,
                };
                let tok = self.text(at, span.len);
                if span.len > MAX_NUMBER {
                    return Err(self.err(
                        at,
                        span.len,
                        "Operand too long",
                        format!(
                            "`{tok}` is longer than the kernel's {MAX_NUMBER}-character numbers"
                        ),
                    ));
                }
                let n = parse_number(tok).map_err(|why| {
                    self.err(
                        at,
                        span.len,
                        "Illegal integer value",
                        format!("`{tok}` {why}"),
                    )
                })?;
                Ok((Literal::Num(n), span))
            }
            Some(_) => {
                let len = word_len(self.bytes, at);
                let tok = self.text(at, len).to_string();
                let message = if tok.starts_with("CPUS{") {
                    "CPUS{...} cpu lists are not supported: write `cpu == 0 || cpu == 2`"
                        .to_string()
                } else {
                    format!("`{tok}` is not a value: quote strings (`{field} {op} \"{tok}\"`)")
                };
                Err(self.err(at, len, "Invalid value (did you forget quotes)?", message))
            }
        }
    }
}

/// Appends `e` to the operands of an `||` (`or`) or `&&` list, taking in
/// the operands of a parenthesized list of the same kind: `a && (b && c)`
/// is `a && b && c`, so the tree, like the canonical form, has one shape
/// per meaning of the grouping.
fn push_flat(items: &mut Vec<Expr>, e: Expr, or: bool) {
    match e {
        Expr::Or(v) if or => items.extend(v),
        Expr::And(v) if !or => items.extend(v),
        e => items.push(e),
    }
}

/// Reads a number as the kernel's `kstrtoll`/`kstrtoull` with base 0 do:
/// an optional `-`, then `0x`/`0X` and hex digits, `0` and octal digits,
/// or decimal digits; nothing after them.
pub(crate) fn parse_number(tok: &str) -> Result<Number, &'static str> {
    let (negative, digits) = match tok.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, tok),
    };
    let (radix, body) = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (Radix::Hex, h)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (Radix::Octal, &digits[1..])
    } else {
        (Radix::Decimal, digits)
    };
    let base = match radix {
        Radix::Hex => 16,
        Radix::Octal => 8,
        Radix::Decimal => 10,
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(base)) {
        return Err(match radix {
            Radix::Octal => {
                "is not a number (a leading 0 means octal, as in the kernel; drop the 0 for decimal)"
            }
            _ => "is not a number: write decimal, 0x hex, 0 octal, with - for negative values",
        });
    }
    let magnitude = u64::from_str_radix(body, base).map_err(|_| "does not fit in 64 bits")?;
    if negative && magnitude > 1u64 << 63 {
        return Err("is below the smallest 64-bit value (-9223372036854775808)");
    }
    Ok(Number {
        negative,
        magnitude,
        radix,
    })
}
