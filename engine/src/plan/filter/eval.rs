//! User-space evaluation: the expression compiled to a flat list of tests
//! with forward jumps (short-circuit `&&`/`||`, negation folded into the
//! jump conditions), run without recursion or allocation (by the decoder,
//! `decode/filter.rs`: this stage sees no event).

use super::{Expr, FieldRef, FieldType, Literal, Op};

/// Where a jump goes when the filter is decided false.
pub(crate) const FALSE: usize = usize::MAX;

/// How a string test compares (the kernel's `regex_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatchKind {
    /// Equal.
    Full,
    /// `abc*`
    Prefix,
    /// `*abc`
    Suffix,
    /// `*abc*`
    Contains,
    /// Anything else with `*`, `?`, `[` or `\`: `glob_match()`.
    Glob,
}

#[derive(Debug, Clone)]
pub(crate) enum Test {
    Int {
        field: FieldRef,
        op: Op,
        value: u64,
        bits: u8,
        signed: bool,
    },
    Str {
        field: FieldRef,
        kind: MatchKind,
        pattern: Box<str>,
        /// `!=`, or a `~` pattern with a leading `!`.
        negate: bool,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) test: usize,
    /// Jump when the test gives this; fall through otherwise.
    pub(crate) jump_when: bool,
    /// Step index to jump to; `steps.len()` is "true", [`FALSE`] false.
    pub(crate) target: usize,
}

/// A compiled filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct Program {
    pub(crate) tests: Vec<Test>,
    pub(crate) steps: Vec<Step>,
}

/// The kernel's reading of a `~` pattern (`filter_parse_regex()`): a
/// leading `!` negates; `*` first, last or both make suffix, prefix and
/// substring tests; a `*` elsewhere, `?`, `[` or `\` make a full glob.
pub(crate) fn classify(pattern: &str) -> (MatchKind, &str, bool) {
    let (negate, p) = match pattern.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    };
    let b = p.as_bytes();
    let mut kind = MatchKind::Full;
    for (i, &c) in b.iter().enumerate() {
        if c == b'*' {
            if i == 0 {
                kind = MatchKind::Suffix;
            } else if i == b.len() - 1 {
                kind = if kind == MatchKind::Suffix {
                    MatchKind::Contains
                } else {
                    MatchKind::Prefix
                };
                break;
            } else {
                return (MatchKind::Glob, p, negate);
            }
        } else if matches!(c, b'[' | b'?' | b'\\') {
            return (MatchKind::Glob, p, negate);
        }
    }
    let body = match kind {
        MatchKind::Suffix => &p[1..],
        MatchKind::Prefix => &p[..p.len() - 1],
        MatchKind::Contains => &p[1..p.len() - 1],
        _ => p,
    };
    (kind, body, negate)
}

/// Jump target while generating: the "false" exit or a label.
#[derive(Clone, Copy)]
enum Target {
    False,
    Label(usize),
}

struct Gen {
    steps: Vec<Step>,
    /// Label id -> step index, once placed.
    labels: Vec<usize>,
    /// (step, label) pairs to patch.
    fixups: Vec<(usize, usize)>,
    next_test: usize,
}

impl Gen {
    fn new_label(&mut self) -> usize {
        self.labels.push(FALSE);
        self.labels.len() - 1
    }

    fn place(&mut self, label: usize) {
        self.labels[label] = self.steps.len();
    }

    /// Emits code that jumps to `target` when `e` evaluates to `sense`
    /// and falls through otherwise.
    fn cond(&mut self, e: &Expr, sense: bool, target: Target) {
        match e {
            Expr::Cmp(_) => {
                let at = self.steps.len();
                let t = match target {
                    Target::False => FALSE,
                    Target::Label(l) => {
                        self.fixups.push((at, l));
                        FALSE
                    }
                };
                self.steps.push(Step {
                    test: self.next_test,
                    jump_when: sense,
                    target: t,
                });
                self.next_test += 1;
            }
            Expr::Not(inner) => self.cond(inner, !sense, target),
            // All true jumps only once the last is true; any false jumps.
            Expr::And(items) | Expr::Or(items) => {
                let is_and = matches!(e, Expr::And(_));
                // `&&` wanting false and `||` wanting true: any item decides.
                if sense != is_and {
                    for it in items {
                        self.cond(it, sense, target);
                    }
                } else {
                    let skip = self.new_label();
                    if let Some((last, rest)) = items.split_last() {
                        for it in rest {
                            self.cond(it, !sense, Target::Label(skip));
                        }
                        self.cond(last, sense, target);
                    }
                    self.place(skip);
                }
            }
        }
    }
}

impl Program {
    pub(crate) fn compile(expr: &Expr, resolved: &[(FieldRef, FieldType)]) -> Program {
        let tests = expr
            .predicates()
            .into_iter()
            .zip(resolved)
            .map(|(p, (field, ty))| match (&p.value, ty) {
                (Literal::Str(s), _) => {
                    let (kind, pattern, negate_pattern) = if p.op == Op::Glob {
                        classify(s)
                    } else {
                        (MatchKind::Full, s.as_str(), false)
                    };
                    Test::Str {
                        field: *field,
                        kind,
                        pattern: pattern.into(),
                        negate: negate_pattern ^ (p.op == Op::Ne),
                    }
                }
                (Literal::Num(n), FieldType::Int { bits, signed }) => Test::Int {
                    field: *field,
                    op: p.op,
                    value: n.bits(),
                    bits: *bits,
                    signed: *signed,
                },
                // The checker refuses numbers on other types; a test
                // that never matches keeps this total.
                (Literal::Num(n), _) => Test::Int {
                    field: FieldRef::Arg(usize::MAX),
                    op: p.op,
                    value: n.bits(),
                    bits: 64,
                    signed: false,
                },
            })
            .collect();
        let mut g = Gen {
            steps: Vec::new(),
            labels: Vec::new(),
            fixups: Vec::new(),
            next_test: 0,
        };
        g.cond(expr, false, Target::False);
        for &(step, label) in &g.fixups {
            g.steps[step].target = g.labels[label];
        }
        Program {
            tests,
            steps: g.steps,
        }
    }
}

/// `a OP b` at the field's width and signedness, the constant cast to
/// the field's type as the kernel casts `pred->val`.
pub(crate) fn compare(a: u64, op: Op, b: u64, bits: u8, signed: bool) -> bool {
    let shift = 64 - u32::from(bits.clamp(1, 64));
    let (ua, ub) = ((a << shift) >> shift, (b << shift) >> shift);
    let (sa, sb) = (
        ((a << shift) as i64) >> shift,
        ((b << shift) as i64) >> shift,
    );
    match op {
        Op::Eq => ua == ub,
        Op::Ne => ua != ub,
        Op::BitAnd => ua & ub != 0,
        Op::Lt if signed => sa < sb,
        Op::Le if signed => sa <= sb,
        Op::Gt if signed => sa > sb,
        Op::Ge if signed => sa >= sb,
        Op::Lt => ua < ub,
        Op::Le => ua <= ub,
        Op::Gt => ua > ub,
        Op::Ge => ua >= ub,
        Op::Glob => false,
    }
}

/// A character class starting after its `[` at `k`: whether `c` is in it
/// (inversion applied) and where the pattern continues, or `None` when
/// the class is not closed (the `[` is then a literal).
fn class(pat: &[u8], mut k: usize, c: Option<u8>) -> Option<(bool, usize)> {
    let inverted = pat.get(k) == Some(&b'!');
    if inverted {
        k += 1;
    }
    let mut matched = false;
    let mut a = *pat.get(k)?;
    k += 1;
    loop {
        let mut b = a;
        if pat.get(k) == Some(&b'-') {
            match pat.get(k + 1) {
                None => return None,
                Some(b']') => {}
                Some(&hi) => {
                    b = hi;
                    k += 2;
                }
            }
        }
        if let Some(ch) = c {
            matched |= a <= ch && ch <= b;
        }
        a = *pat.get(k)?;
        k += 1;
        if a == b']' {
            break;
        }
    }
    Some((c.is_some() && matched != inverted, k))
}

/// glob(7) matching as the kernel's `glob_match()` does it: `?` one
/// character, `*` any run, `[abc]`, `[a-z]`, `[!a-z]` (a `]` first in a
/// class is a member; an unclosed `[` is literal), `\` quotes the next
/// character. One backtracking point suffices because `*` matches
/// anything.
pub(crate) fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut back: Option<(usize, usize)> = None;
    loop {
        let c = s.get(i).copied();
        let d = pat.get(p).copied();
        match d {
            Some(b'?') => {
                if c.is_none() {
                    return false;
                }
                i += 1;
                p += 1;
                continue;
            }
            Some(b'*') => {
                if p + 1 >= pat.len() {
                    return true;
                }
                back = Some((p + 1, i));
                p += 1;
                continue;
            }
            Some(b'[') => match class(pat, p + 1, c) {
                Some((true, next)) => {
                    i += 1;
                    p = next;
                    continue;
                }
                Some((false, _)) => {}
                None => {
                    if c == Some(b'[') {
                        i += 1;
                        p += 1;
                        continue;
                    }
                }
            },
            _ => {
                let (lit, width) = if d == Some(b'\\') {
                    (pat.get(p + 1).copied(), 2)
                } else {
                    (d, 1)
                };
                if c == lit {
                    if lit.is_none() {
                        return true;
                    }
                    i += 1;
                    p += width;
                    continue;
                }
            }
        }
        // Mismatch: retry from the last `*`, one character further.
        match back {
            Some((bp, bi)) if c.is_some() => {
                p = bp;
                i = bi + 1;
                back = Some((bp, bi + 1));
            }
            _ => return false,
        }
    }
}
