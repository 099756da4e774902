use std::sync::Arc;

use proptest::prelude::*;

use super::eval::{compare, glob_match};
use super::*;
use crate::decode::{Event, Value};
use kprobe_perf_spec::{ArgType, BaseType};

fn int(bits: u8, signed: bool) -> FieldType {
    FieldType::Int { bits, signed }
}

/// The probe of most tests: `size:u64 flags:x32 off:s64 delta:s32
/// small:u8 path:string buf:u8[4]`.
fn fields() -> Vec<FieldDef> {
    vec![
        FieldDef::new("size", int(64, false)),
        FieldDef::new("flags", int(32, false)),
        FieldDef::new("off", int(64, true)),
        FieldDef::new("delta", int(32, true)),
        FieldDef::new("small", int(8, false)),
        FieldDef::new("path", FieldType::Str),
        FieldDef::new(
            "buf",
            FieldType::of_arg(&ArgType {
                base: BaseType::Unsigned(8),
                array: Some(4),
            }),
        ),
    ]
}

struct Ev {
    size: u64,
    flags: u64,
    off: i64,
    delta: i32,
    small: u8,
    path: Option<&'static str>,
    comm: &'static str,
    pid: i32,
    tid: i32,
    cpu: u32,
}

const EV: Ev = Ev {
    size: 65536,
    flags: 0x8041,
    off: -4096,
    delta: -1,
    small: 200,
    path: Some("/etc/passwd"),
    comm: "postgres",
    pid: 1000,
    tid: 1002,
    cpu: 1,
};

fn event(e: &Ev) -> Event {
    Event {
        probe: 0,
        cpu: e.cpu,
        pid: e.pid,
        tid: e.tid,
        comm: Arc::from(e.comm),
        time_ns: 0,
        ip: 0,
        probe_addr: 0,
        ret_addr: None,
        callchain: Vec::new(),
        args: vec![
            Value::new(e.size, BaseType::Unsigned(64)),
            Value::new(e.flags, BaseType::Hex(32)),
            Value::new(e.off as u64, BaseType::Signed(64)),
            Value::new(e.delta as i64 as u64, BaseType::Signed(32)),
            Value::new(u64::from(e.small), BaseType::Unsigned(8)),
            Value::Str(e.path.map(str::to_string)),
            Value::Array(vec![Value::new(1, BaseType::Unsigned(8)); 4]),
        ],
    }
}

fn compile(s: &str) -> Filter {
    match Filter::compile(s, &fields()) {
        Ok(f) => f,
        Err(e) => panic!("{s}: {e}"),
    }
}

fn run(s: &str, e: &Ev) -> bool {
    compile(s).matches(&event(e))
}

/// A compact rendering of the parse tree: `(&& a b)`, `(|| a b)`,
/// `(! a)`, predicates as `[field op value]`.
fn tree(e: &Expr) -> String {
    match e {
        Expr::Cmp(p) => format!("[{} {} {}]", p.field, p.op.as_str(), p.value),
        Expr::Not(x) => format!("(! {})", tree(x)),
        Expr::And(v) => format!("(&& {})", v.iter().map(tree).collect::<Vec<_>>().join(" ")),
        Expr::Or(v) => format!("(|| {})", v.iter().map(tree).collect::<Vec<_>>().join(" ")),
    }
}

#[test]
fn filter_parse_table() {
    // input, parse tree, canonical form
    let table: &[(&str, &str, &str)] = &[
        ("size > 4096", "[size > 4096]", "size > 4096"),
        ("size>4096", "[size > 4096]", "size > 4096"),
        ("  size   >=   4096  ", "[size >= 4096]", "size >= 4096"),
        ("size < 10", "[size < 10]", "size < 10"),
        ("size <= 10", "[size <= 10]", "size <= 10"),
        ("size == 0", "[size == 0]", "size == 0"),
        ("size != 0", "[size != 0]", "size != 0"),
        ("flags & 0x40", "[flags & 0x40]", "flags & 0x40"),
        ("flags&0X40", "[flags & 0x40]", "flags & 0x40"),
        (
            "flags == 0xdeadBEEF",
            "[flags == 0xdeadbeef]",
            "flags == 0xdeadbeef",
        ),
        ("size == 010", "[size == 010]", "size == 010"),
        ("off < -1", "[off < -1]", "off < -1"),
        ("off > -0x10", "[off > -0x10]", "off > -0x10"),
        (
            "off >= -9223372036854775808",
            "[off >= -9223372036854775808]",
            "off >= -9223372036854775808",
        ),
        (
            "size == 18446744073709551615",
            "[size == 18446744073709551615]",
            "size == 18446744073709551615",
        ),
        ("comm == \"bash\"", "[comm == \"bash\"]", "comm == \"bash\""),
        ("comm == 'bash'", "[comm == \"bash\"]", "comm == \"bash\""),
        ("comm != \"a b\"", "[comm != \"a b\"]", "comm != \"a b\""),
        (
            "path == 'say \"hi\"'",
            "[path == 'say \"hi\"']",
            "path == 'say \"hi\"'",
        ),
        ("comm ~ \"post*\"", "[comm ~ \"post*\"]", "comm ~ \"post*\""),
        ("comm ~ \"*sh\"", "[comm ~ \"*sh\"]", "comm ~ \"*sh\""),
        ("comm ~ \"*gre*\"", "[comm ~ \"*gre*\"]", "comm ~ \"*gre*\""),
        ("comm ~ \"!bash\"", "[comm ~ \"!bash\"]", "comm ~ \"!bash\""),
        (
            "comm==\"x\"&&size>1",
            "(&& [comm == \"x\"] [size > 1])",
            "comm == \"x\" && size > 1",
        ),
        (
            "size > 1 && size < 9 && flags & 1",
            "(&& [size > 1] [size < 9] [flags & 1])",
            "size > 1 && size < 9 && flags & 1",
        ),
        (
            "size > 1 || size < 9 || flags & 1",
            "(|| [size > 1] [size < 9] [flags & 1])",
            "size > 1 || size < 9 || flags & 1",
        ),
        (
            "size > 1 && size < 9 || cpu == 0",
            "(|| (&& [size > 1] [size < 9]) [cpu == 0])",
            "size > 1 && size < 9 || cpu == 0",
        ),
        (
            "cpu == 0 || size > 1 && size < 9",
            "(|| [cpu == 0] (&& [size > 1] [size < 9]))",
            "cpu == 0 || size > 1 && size < 9",
        ),
        (
            "(cpu == 0 || cpu == 1) && size > 1",
            "(&& (|| [cpu == 0] [cpu == 1]) [size > 1])",
            "(cpu == 0 || cpu == 1) && size > 1",
        ),
        ("((size > 1))", "[size > 1]", "size > 1"),
        (
            "a == 1 && (b == 2 && c == 3) || (d == 4 || e == 5)",
            "(|| (&& [a == 1] [b == 2] [c == 3]) [d == 4] [e == 5])",
            "a == 1 && b == 2 && c == 3 || d == 4 || e == 5",
        ),
        ("!size > 1", "(! [size > 1])", "!(size > 1)"),
        ("!!size > 1", "[size > 1]", "size > 1"),
        ("! ! ! size > 1", "(! [size > 1])", "!(size > 1)"),
        (
            "!(size > 1 && tid == 5)",
            "(! (&& [size > 1] [tid == 5]))",
            "!(size > 1 && tid == 5)",
        ),
        (
            "!size > 1 && tid == 5",
            "(&& (! [size > 1]) [tid == 5])",
            "!(size > 1) && tid == 5",
        ),
        ("size!=1", "[size != 1]", "size != 1"),
        ("common_pid == 7", "[common_pid == 7]", "common_pid == 7"),
        (
            "CPU == 1 || COMM == \"x\"",
            "(|| [CPU == 1] [COMM == \"x\"])",
            "CPU == 1 || COMM == \"x\"",
        ),
        (
            "a == 1 && (b == 2 || (c == 3 && !(d == 4)))",
            "(&& [a == 1] (|| [b == 2] (&& [c == 3] (! [d == 4]))))",
            "a == 1 && (b == 2 || c == 3 && !(d == 4))",
        ),
        ("x\t==\n1", "[x == 1]", "x == 1"),
    ];
    assert!(table.len() >= 30);
    for &(input, want_tree, canonical) in table {
        let e = Expr::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(tree(&e), want_tree, "tree of {input}");
        assert_eq!(e.to_string(), canonical, "canonical form of {input}");
        // The canonical form parses back to the same tree and prints
        // itself.
        let again = Expr::parse(canonical).unwrap_or_else(|e| panic!("{canonical}: {e}"));
        assert_eq!(tree(&again), want_tree, "tree of canonical {canonical}");
        assert_eq!(again.to_string(), canonical);
    }
}

#[test]
fn filter_spans_of_a_predicate() {
    let e = Expr::parse("  size  >=  0x10").unwrap();
    let Expr::Cmp(p) = e else { panic!("{e:?}") };
    assert_eq!(p.field_span, Span { start: 2, len: 4 });
    assert_eq!(p.op_span, Span { start: 8, len: 2 });
    assert_eq!(p.value_span, Span { start: 12, len: 4 });
    assert_eq!(
        p.value,
        Literal::Num(Number {
            negative: false,
            magnitude: 16,
            radix: Radix::Hex
        })
    );
}

#[test]
fn filter_bad_expressions() {
    // input, message, span start, span len, the kernel's words
    let table: &[(&str, &str, usize, usize, &str)] = &[
        (
            "",
            "empty filter: write a comparison such as `size > 4096` or `comm == \"bash\"`",
            0,
            0,
            "No filter found",
        ),
        (
            "   ",
            "empty filter: write a comparison such as `size > 4096` or `comm == \"bash\"`",
            3,
            0,
            "No filter found",
        ),
        (
            "sise > 5",
            "unknown field `sise`: this probe's fields are size, flags, off, delta, small, path, buf, comm, pid, tid, cpu",
            0,
            4,
            "Field not found",
        ),
        (
            "(size > 5",
            "unbalanced parenthesis: this `(` is never closed",
            0,
            1,
            "Too many '('",
        ),
        (
            "(size > 5 && (cpu == 1) || (tid == 2)",
            "unbalanced parenthesis: this `(` is never closed",
            0,
            1,
            "Too many '('",
        ),
        (
            "size > 5)",
            "unbalanced parenthesis: this `)` has no matching `(`",
            8,
            1,
            "Too few '('",
        ),
        (
            "size > 5 foo",
            "expected &&, || or ) here, found `foo`: join comparisons with && or ||, and quote strings that contain spaces",
            9,
            3,
            "Too many terms in predicate expression",
        ),
        (
            "size > 5 & tid == 1",
            "expected &&, || or ) here, found `&`: `&` alone tests bits (`flags & 0x4`); join comparisons with `&&`",
            9,
            1,
            "Too many terms in predicate expression",
        ),
        (
            "comm > 5",
            "`>` does not apply to strings: `comm` is a string, which takes ==, != and ~ (glob)",
            5,
            1,
            "Illegal operation for field type",
        ),
        (
            "comm & 1",
            "`&` does not apply to strings: `comm` is a string, which takes ==, != and ~ (glob)",
            5,
            1,
            "Illegal operation for field type",
        ),
        (
            "comm == 5",
            "`comm` is a string: quote the value (`comm == \"5\"`)",
            8,
            1,
            "Expecting string field",
        ),
        (
            "size == \"big\"",
            "`size` is a number (u64): compare it with a number, not a string",
            8,
            5,
            "Expecting numeric field",
        ),
        (
            "size ~ \"1*\"",
            "`~` matches strings, but `size` is a number (u64): use ==, !=, <, <=, >, >= or &",
            5,
            1,
            "Illegal operation for field type",
        ),
        (
            "comm == bash",
            "`bash` is not a value: quote strings (`comm == \"bash\"`)",
            8,
            4,
            "Invalid value (did you forget quotes)?",
        ),
        (
            "comm == \"bash",
            "unterminated string: this \" is never closed (strings have no escapes; use the other quote character to include this one)",
            8,
            1,
            "Missing matching quote",
        ),
        (
            "size > 12abc",
            "`12abc` is not a number: write decimal, 0x hex, 0 octal, with - for negative values",
            7,
            5,
            "Illegal integer value",
        ),
        (
            "size > 08",
            "`08` is not a number (a leading 0 means octal, as in the kernel; drop the 0 for decimal)",
            7,
            2,
            "Illegal integer value",
        ),
        (
            "size > 18446744073709551616",
            "`18446744073709551616` does not fit in 64 bits",
            7,
            20,
            "Illegal integer value",
        ),
        (
            "size > -1",
            "`size` is unsigned (u64): it cannot be compared with a negative number (write its two's complement, e.g. 0xffffffffffffffff)",
            7,
            2,
            "Illegal integer value",
        ),
        (
            "flags == -1",
            "`flags` is unsigned (u32): it cannot be compared with a negative number (write its two's complement, e.g. 0xffffffff)",
            9,
            2,
            "Illegal integer value",
        ),
        (
            "off == 9223372036854775808",
            "`off` is signed (s64): 9223372036854775808 is above the largest value the kernel reads for it (9223372036854775807); write it negative",
            7,
            19,
            "Illegal integer value",
        ),
        (
            "size = 5",
            "`=` is not an operator: use `==` to test equality",
            5,
            1,
            "Invalid operator",
        ),
        (
            "size",
            "`size` alone is not a comparison: compare it with a value, e.g. `size != 0`",
            4,
            0,
            "Invalid operator",
        ),
        (
            "size && tid == 1",
            "`size` alone is not a comparison: compare it with a value, e.g. `size != 0`",
            5,
            2,
            "Invalid operator",
        ),
        (
            "size >",
            "expected a value after `size >`",
            6,
            0,
            "Invalid value (did you forget quotes)?",
        ),
        (
            "size > 1 &&",
            "expected a comparison such as `size > 4096` at the end",
            11,
            0,
            "Field not found",
        ),
        (
            "&& size > 1",
            "expected a field name, found `&`",
            0,
            1,
            "Field not found",
        ),
        (
            "1 < size",
            "expected a field name, found `1`: the field comes first (`size > 1`, not `1 < size`)",
            0,
            1,
            "Field not found",
        ),
        (
            "comm !~ \"x\"",
            "`!~` is not an operator: negate the pattern (`comm ~ \"!PATTERN\"`) or the comparison (`!(comm ~ \"PATTERN\")`)",
            5,
            2,
            "Invalid operator",
        ),
        (
            "path.ustring ~ \"x\"",
            "`path.ustring`: field suffixes (.ustring, .function) are not supported; compare the field itself",
            4,
            8,
            "Invalid operator",
        ),
        (
            "cpu & 1",
            "`&` does not apply to cpu: the kernel's cpu test has no mask (it is always false); write `cpu == 0 || cpu == 2`",
            4,
            1,
            "Illegal operation for field type",
        ),
        (
            "cpu == CPUS{1-2}",
            "CPUS{...} cpu lists are not supported: write `cpu == 0 || cpu == 2`",
            7,
            9,
            "Invalid value (did you forget quotes)?",
        ),
        (
            "buf == 1",
            "`buf` is an array (4 elements): filters compare numbers and strings only",
            0,
            3,
            "Illegal operation for field type",
        ),
        (
            "size > 1 ()",
            "expected &&, || or ) here, found `(`: join the group to what comes before with && or ||",
            9,
            1,
            "Too many terms in predicate expression",
        ),
        (
            "()",
            "expected a field name, found `)`",
            1,
            1,
            "Field not found",
        ),
        (
            "size > 0x",
            "`0x` is not a number: write decimal, 0x hex, 0 octal, with - for negative values",
            7,
            2,
            "Illegal integer value",
        ),
        (
            "size > 000000000000000000000001",
            "`000000000000000000000001` is longer than the kernel's 23-character numbers",
            7,
            24,
            "Operand too long",
        ),
    ];
    assert!(table.len() >= 15);
    for &(input, message, start, len, kernel) in table {
        let e = match Filter::compile(input, &fields()) {
            Ok(f) => panic!("{input:?} was accepted as {f}"),
            Err(e) => e,
        };
        assert_eq!(e.message, message, "message for {input:?}");
        assert_eq!(e.span, Span { start, len }, "span for {input:?}");
        assert_eq!(e.kernel, kernel, "kernel's words for {input:?}");
        assert_eq!(e.input, input);
    }
}

#[test]
fn filter_error_renders_a_caret_like_spec_errors() {
    let e = Filter::compile("size > 5 && comm == 5", &fields()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`comm` is a string: quote the value (`comm == \"5\"`)\n  size > 5 && comm == 5\n                      ^"
    );
    let e = Filter::compile("size > 5 && cmm == \"x\"", &fields()).unwrap_err();
    assert_eq!(e.to_string().lines().nth(2), Some("              ^^^"));
    // At the end of the input: one caret after the last character.
    let e = Filter::compile("size >", &fields()).unwrap_err();
    assert_eq!(e.to_string().lines().nth(2), Some("        ^"));
    // The caret counts characters, not bytes.
    let e = Filter::compile("path == \"é\" && x == 1", &fields()).unwrap_err();
    assert_eq!(e.span, Span { start: 16, len: 1 });
    assert_eq!(e.to_string().lines().nth(2), Some("                 ^"));
}

#[test]
fn filter_parentheses_nest_to_the_limit() {
    let ok = format!("{}size > 1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    assert!(Filter::compile(&ok, &fields()).is_ok());
    let deep = format!(
        "{}size > 1{}",
        "(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    let e = Filter::compile(&deep, &fields()).unwrap_err();
    assert_eq!(e.message, "parentheses nested more than 128 deep");
    assert_eq!(
        e.span,
        Span {
            start: MAX_DEPTH,
            len: 1
        }
    );
}

#[test]
fn filter_numbers() {
    // (expression, event, expected)
    let e = Ev { ..EV };
    let cases: &[(&str, bool)] = &[
        ("size == 65536", true),
        ("size == 0x10000", true),
        ("size == 0200000", true),
        ("size != 65536", false),
        ("size > 65535", true),
        ("size > 65536", false),
        ("size >= 65536", true),
        ("size < 65537", true),
        ("size <= 65535", false),
        // Unsigned comparisons: 0xffffffffffffffff is the largest u64.
        ("size < 0xffffffffffffffff", true),
        // Signed: off = -4096.
        ("off < 0", true),
        ("off == -4096", true),
        ("off == -0x1000", true),
        ("off > -4097", true),
        ("off >= -4096 && off <= -4096", true),
        ("off < -4096", false),
        // The constant is cast to the field's width: delta is s32 -1,
        // and 0xffffffff cast to s32 is -1 (the kernel's `(s32)val`).
        ("delta == -1", true),
        ("delta == 0xffffffff", true),
        ("delta < 0", true),
        ("delta < 0xffffffff", false),
        // small is u8 200; 456 cast to u8 is 200.
        ("small == 200", true),
        ("small == 456", true),
        ("small > 199", true),
        // Masks: flags = 0x8041.
        ("flags & 0x1", true),
        ("flags & 0x40", true),
        ("flags & 0x8000", true),
        ("flags & 0x2", false),
        ("flags & 0x7fbe", false),
        ("flags & 0xffff0000", false),
        ("!(flags & 0x2)", true),
        ("delta & 0x80000000", true),
        // Specials.
        ("pid == 1000 && tid == 1002", true),
        ("common_pid == 1002", true),
        ("pid == 1002", false),
        ("cpu == 1", true),
        ("CPU != 1", false),
        ("common_cpu >= 1", true),
        ("cpu < 1", false),
    ];
    for &(expr, want) in cases {
        assert_eq!(run(expr, &e), want, "{expr}");
    }
}

#[test]
fn filter_strings_and_globs() {
    let cases: &[(&str, &str, bool)] = &[
        // (expression, comm, expected)
        ("comm == \"postgres\"", "postgres", true),
        ("comm == \"postgre\"", "postgres", false),
        ("comm == \"post*\"", "postgres", false),
        ("comm == \"post*\"", "post*", true),
        ("comm != \"postgres\"", "postgres", false),
        ("comm != \"bash\"", "postgres", true),
        ("comm ~ \"postgres\"", "postgres", true),
        ("comm ~ \"post*\"", "postgres", true),
        ("comm ~ \"post*\"", "pos", false),
        ("comm ~ \"post*\"", "xpostgres", false),
        ("comm ~ \"*gres\"", "postgres", true),
        ("comm ~ \"*gres\"", "gres", true),
        ("comm ~ \"*gres\"", "postgresx", false),
        ("comm ~ \"*tgr*\"", "postgres", true),
        ("comm ~ \"*tgr*\"", "tgr", true),
        ("comm ~ \"*tgr*\"", "postgas", false),
        ("comm ~ \"*\"", "", true),
        ("comm ~ \"**\"", "anything", true),
        ("comm ~ \"p*s\"", "postgres", true),
        ("comm ~ \"p*s\"", "postgre", false),
        ("comm ~ \"p?st*\"", "postgres", true),
        ("comm ~ \"p?st*\"", "pst", false),
        ("comm ~ \"[pq]ostgres\"", "qostgres", true),
        ("comm ~ \"[!pq]ostgres\"", "postgres", false),
        ("comm ~ \"[!pq]ostgres\"", "xostgres", true),
        ("comm ~ \"[a-z]*\"", "postgres", true),
        ("comm ~ \"[a-z]*\"", "Postgres", false),
        ("comm ~ \"[]]x\"", "]x", true),
        ("comm ~ \"[x\"", "[x", true),
        ("comm ~ \"a\\*\"", "a*", true),
        ("comm ~ \"a\\*\"", "ab", false),
        ("comm ~ \"!post*\"", "postgres", false),
        ("comm ~ \"!post*\"", "bash", true),
        ("comm ~ \"[1]*\"", "1abc", true),
        ("comm ~ \"kworker/*\"", "kworker/0:1", true),
        ("!(comm ~ \"*sh\")", "bash", false),
    ];
    for &(expr, comm, want) in cases {
        let e = Ev { comm, ..EV };
        assert_eq!(run(expr, &e), want, "{expr} on comm {comm:?}");
    }
    // An argument string, and one the kernel could not read (a fault),
    // which matches nothing, `!=` included.
    assert!(run("path ~ \"/etc/*\"", &EV));
    assert!(run("path == \"/etc/passwd\"", &EV));
    let fault = Ev { path: None, ..EV };
    assert!(!run("path == \"/etc/passwd\"", &fault));
    assert!(!run("path != \"/etc/passwd\"", &fault));
    assert!(!run("path ~ \"*\"", &fault));
}

#[test]
fn filter_logic_short_circuits_and_precedence() {
    let cases: &[(&str, bool)] = &[
        ("size > 1 && cpu == 1", true),
        ("size > 1 && cpu == 0", false),
        ("size < 1 && cpu == 1", false),
        ("size < 1 || cpu == 1", true),
        ("size < 1 || cpu == 0", false),
        // && before ||: F && F || T = T; T || F && F = T.
        ("size < 1 && cpu == 0 || tid == 1002", true),
        ("tid == 1002 || size < 1 && cpu == 0", true),
        ("(tid == 1002 || size < 1) && cpu == 0", false),
        ("!(size > 1) || cpu == 1", true),
        ("!(size > 1 || cpu == 0)", false),
        ("!(size < 1 || cpu == 0)", true),
        ("!(size > 1 && cpu == 0)", true),
        ("!!(size > 1 && cpu == 1)", true),
        (
            "(size < 1 || (cpu == 1 && !(tid == 5))) && (comm ~ \"post*\" || pid == 0)",
            true,
        ),
        (
            "size < 1 || cpu == 0 || tid == 0 || pid == 0 || comm == \"x\"",
            false,
        ),
        (
            "size > 1 && cpu == 1 && tid == 1002 && pid == 1000 && comm == \"postgres\"",
            true,
        ),
    ];
    for &(expr, want) in cases {
        assert_eq!(run(expr, &EV), want, "{expr}");
    }
}

/// A reference evaluator: the tree walked recursively.
fn reference(e: &Expr, ev: &Event) -> bool {
    fn walk(e: &Expr, leaves: &mut std::slice::Iter<'_, bool>) -> bool {
        match e {
            Expr::Cmp(_) => *leaves.next().unwrap(),
            Expr::Not(x) => !walk(x, leaves),
            // Evaluate every child so the leaf iterator stays aligned.
            Expr::And(v) => v
                .iter()
                .map(|x| walk(x, leaves))
                .collect::<Vec<_>>()
                .into_iter()
                .all(|b| b),
            Expr::Or(v) => v
                .iter()
                .map(|x| walk(x, leaves))
                .collect::<Vec<_>>()
                .into_iter()
                .any(|b| b),
        }
    }
    // Each leaf alone, through a one-predicate filter.
    let leaves: Vec<bool> = e
        .predicates()
        .iter()
        .map(|p| {
            let one = format!("{} {} {}", p.field, p.op.as_str(), p.value);
            Filter::compile(&one, &fields()).unwrap().matches(ev)
        })
        .collect();
    walk(e, &mut leaves.iter())
}

#[test]
fn filter_compare_at_width() {
    // u8: 255 > 1; s8: -1 < 1.
    assert!(compare(0xff, Op::Gt, 1, 8, false));
    assert!(compare(0xff, Op::Lt, 1, 8, true));
    // Bits above the width are ignored on both sides.
    assert!(compare(0x1_0000_0005, Op::Eq, 5, 32, false));
    assert!(compare(5, Op::Eq, 0xffff_ffff_0000_0005, 32, true));
    assert!(compare(u64::MAX, Op::Gt, 0, 64, false));
    assert!(compare(u64::MAX, Op::Lt, 0, 64, true));
    assert!(!compare(0xf0, Op::BitAnd, 0x0f, 8, false));
}

#[test]
fn filter_glob_matches_like_the_kernel() {
    let cases: &[(&str, &str, bool)] = &[
        ("", "", true),
        ("", "a", false),
        ("a", "a", true),
        ("?", "", false),
        ("?", "x", true),
        ("*", "", true),
        ("a*b*c", "aXXbYYc", true),
        ("a*b*c", "aXXbYY", false),
        ("*aaaaa", "aaaaaaaaaa", true),
        ("[a-c]x", "bx", true),
        ("[a-c]x", "dx", false),
        ("[!a-c]x", "dx", true),
        ("[a-]x", "-x", true),
        ("[", "[", true),
        ("[a-", "[a-", true),
        ("a\\", "a", true),
        ("\\?", "?", true),
        ("\\?", "x", false),
    ];
    for &(pat, s, want) in cases {
        assert_eq!(
            glob_match(pat.as_bytes(), s.as_bytes()),
            want,
            "{pat:?} on {s:?}"
        );
    }
}

fn format_fields() -> Vec<FieldDef> {
    let mut f = common_fields();
    f.push(FieldDef::new("__probe_ip", int(64, false)));
    f.extend(fields());
    f
}

#[test]
fn filter_kernel_string_and_placement() {
    let f = compile("size > 0x1000 && (tid == 5 || !(comm ~ \"ba*\")) && cpu == 1");
    let want = "size > 0x1000 && (common_pid == 5 || !(comm ~ \"ba*\")) && cpu == 1";
    assert_eq!(f.to_kernel_string().as_deref(), Ok(want));
    assert_eq!(
        f.where_it_can_run(&format_fields()),
        Placement::Kernel(want.to_string())
    );
    // The kernel string parses back to the same tree (with the kernel's
    // names) and is stable.
    let back = Filter::compile(want, &fields()).unwrap();
    assert_eq!(back.to_kernel_string().as_deref(), Ok(want));
    assert_eq!(back.fields(), f.fields());
    for e in [
        EV,
        Ev {
            tid: 5,
            comm: "bash",
            ..EV
        },
        Ev { size: 1, ..EV },
        Ev { comm: "zsh", ..EV },
        Ev { cpu: 0, ..EV },
    ] {
        let ev = event(&e);
        assert_eq!(back.matches(&ev), f.matches(&ev));
    }

    // pid has no kernel field.
    let f = compile("size > 1 && pid == 1000");
    assert_eq!(f.user_space_fields(), vec!["pid"]);
    let Placement::UserSpace(why) = f.where_it_can_run(&format_fields()) else {
        panic!("pid went to the kernel")
    };
    assert_eq!(why.fields, vec!["pid".to_string()]);
    assert_eq!(
        why.reason,
        "`pid` (the process id) is in no field of the kernel's records, which carry only the thread id (`common_pid`, which `tid` names)"
    );
    assert_eq!(f.to_kernel_string(), Err(why));

    // A PMU probe's format has no arguments.
    let mut pmu = common_fields();
    pmu.push(FieldDef::new("__probe_ip", int(64, false)));
    let f = compile("size > 1 || tid == 3");
    assert_eq!(
        f.where_it_can_run(&pmu),
        Placement::UserSpace(UserSpaceReason {
            fields: vec!["size".to_string()],
            reason: "`size` is not a field of the event (PMU probes carry no arguments in their records; tracefs-defined ones do)".to_string(),
        })
    );
    // ...but common and generic fields work there.
    let f = compile("tid == 3 && cpu == 0 && comm == \"x\"");
    assert_eq!(
        f.where_it_can_run(&pmu),
        Placement::Kernel("common_pid == 3 && cpu == 0 && comm == \"x\"".to_string())
    );

    // A type that differs from the kernel's.
    let mut other = format_fields();
    for fd in &mut other {
        if fd.name == "delta" {
            fd.ty = int(64, true);
        }
    }
    let Placement::UserSpace(why) = compile("delta < 0").where_it_can_run(&other) else {
        panic!()
    };
    assert_eq!(
        why.reason,
        "`delta` is s64 in the event's format but s32 in the probe"
    );

    // An event field named cpu/comm hides the generic one: use CPU/COMM.
    let probe = vec![
        FieldDef::new("cpu", int(32, false)),
        FieldDef::new("comm", FieldType::Str),
    ];
    let mut fmt = common_fields();
    fmt.extend(probe.clone());
    let f = Filter::compile("cpu == 1 && CPU == 2 && COMM == \"x\"", &probe).unwrap();
    // `cpu` is the argument; `CPU` and `COMM` are the generic fields.
    assert_eq!(
        f.fields(),
        vec![FieldRef::Arg(0), FieldRef::Cpu, FieldRef::Comm]
    );
    assert_eq!(
        f.where_it_can_run(&fmt),
        Placement::Kernel("cpu == 1 && CPU == 2 && COMM == \"x\"".to_string())
    );
    fmt.push(FieldDef::new("CPU", int(32, false)));
    let Placement::UserSpace(why) = f.where_it_can_run(&fmt) else {
        panic!()
    };
    assert_eq!(
        why.reason,
        "the event has its own fields `cpu` and `CPU`, which hide the kernel's generic cpu field"
    );

    // The kernel's two ~ quirks keep a filter in user space, where the
    // pattern means what it says.
    let f = compile("comm ~ \"1*\"");
    assert!(f.matches(&event(&Ev { comm: "1abc", ..EV })));
    let Placement::UserSpace(why) = f.where_it_can_run(&format_fields()) else {
        panic!()
    };
    assert_eq!(
        why.reason,
        "the kernel compares a ~ pattern that starts with a digit literally, not as a glob (write the digit as a class, \"[1]*\", to filter in the kernel)"
    );
    assert_eq!(f.to_kernel_string(), Err(why));
    let f = compile("comm ~ \"!*sh\" && path ~ \"*wd\"");
    let Placement::UserSpace(why) = f.where_it_can_run(&format_fields()) else {
        panic!()
    };
    assert_eq!(why.fields, vec!["comm".to_string()]);
    assert_eq!(
        why.reason,
        "the kernel's suffix match on comm (\"!*sh\") compares the end of its 16-byte buffer, not of the name, so it misses shorter names (a full glob, \"!*[s]h\", works in the kernel)"
    );
    // The suggested forms do go to the kernel, and mean the same.
    let g = compile("comm ~ \"!*[s]h\" && path ~ \"*wd\"");
    assert_eq!(
        g.where_it_can_run(&format_fields()),
        Placement::Kernel("comm ~ \"!*[s]h\" && path ~ \"*wd\"".to_string())
    );
    for comm in ["bash", "zsh", "postgres", "sh", "s"] {
        let ev = event(&Ev { comm, ..EV });
        assert_eq!(f.matches(&ev), g.matches(&ev), "{comm}");
    }
    assert_eq!(
        compile("comm ~ \"*\" || comm ~ \"[1]*\"").where_it_can_run(&format_fields()),
        Placement::Kernel("comm ~ \"*\" || comm ~ \"[1]*\"".to_string())
    );

    // Too long for the kernel's page.
    let long = vec!["size > 1"; 600].join(" || ");
    let Placement::UserSpace(why) = compile(&long).where_it_can_run(&format_fields()) else {
        panic!()
    };
    assert_eq!(
        why.reason,
        "the filter is 7196 bytes long; the kernel takes at most 4095"
    );
}

#[test]
fn filter_field_types_from_args_and_format() {
    let arg = |base, array| FieldType::of_arg(&ArgType { base, array });
    assert_eq!(arg(BaseType::Hex(16), None), int(16, false));
    assert_eq!(arg(BaseType::Signed(8), None), int(8, true));
    assert_eq!(arg(BaseType::Symbol, None), int(64, false));
    assert_eq!(arg(BaseType::Char, None), int(8, false));
    assert_eq!(
        arg(
            BaseType::Bitfield {
                width: 3,
                offset: 4,
                container: 32
            },
            None
        ),
        int(32, false)
    );
    assert_eq!(arg(BaseType::UString, None), FieldType::Str);
    assert_eq!(arg(BaseType::Dentry, None), FieldType::Str);
    assert_eq!(
        arg(BaseType::Unsigned(32), Some(2)),
        FieldType::Other("an array (2 elements)".to_string())
    );
    assert_eq!(
        FieldType::from_format("__data_loc char[]", 4, false),
        FieldType::Str
    );
    assert_eq!(
        FieldType::from_format("char[16]", 16, false),
        FieldType::Str
    );
    assert_eq!(
        FieldType::from_format("const char *", 8, false),
        FieldType::Str
    );
    assert_eq!(FieldType::from_format("u64", 8, false), int(64, false));
    assert_eq!(FieldType::from_format("int", 4, true), int(32, true));
    assert_eq!(
        FieldType::from_format("unsigned long", 8, false),
        int(64, false)
    );
    assert_eq!(
        FieldType::from_format("u32[4]", 16, false),
        FieldType::Other("`u32[4]`".to_string())
    );
    assert_eq!(
        FieldType::from_format("__data_loc u32[]", 4, false),
        FieldType::Other("`__data_loc u32[]`".to_string())
    );
}

/// Random valid expressions over the test probe's fields.
fn arb_pred() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            prop::sample::select(vec!["size", "flags", "small", "cpu", "tid", "pid"]),
            prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">=", "&"]),
            0u64..300,
            any::<bool>(),
        )
            .prop_filter("no & on cpu", |(f, op, _, _)| !(*f == "cpu" && *op == "&"))
            .prop_map(|(f, op, n, hex)| if hex {
                format!("{f} {op} 0x{n:x}")
            } else {
                format!("{f} {op} {n}")
            }),
        (
            prop::sample::select(vec!["off", "delta"]),
            prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="]),
            -5000i64..5000,
        )
            .prop_map(|(f, op, n)| format!("{f} {op} {n}")),
        (
            prop::sample::select(vec!["comm", "path"]),
            prop::sample::select(vec!["==", "!=", "~"]),
            prop::sample::select(vec![
                "postgres",
                "post*",
                "*gres",
                "*stg*",
                "p?st*",
                "[a-p]*",
                "!bash",
                "",
                "*",
                "/etc/*",
                "/etc/passwd",
            ]),
        )
            .prop_map(|(f, op, s)| format!("{f} {op} \"{s}\"")),
    ]
}

fn arb_expr() -> impl Strategy<Value = String> {
    arb_pred().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} && {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} || {b}")),
            inner.clone().prop_map(|a| format!("({a})")),
            inner.prop_map(|a| format!("!({a})")),
        ]
    })
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        (
            0u64..300,
            0u64..300,
            -5000i64..5000,
            -5000i32..5000,
            any::<u8>(),
        ),
        prop::sample::select(vec!["postgres", "bash", "pst", "gres", ""]),
        prop::option::of(prop::sample::select(vec!["/etc/passwd", "/tmp/x", ""])),
        (0i32..300, 0i32..300, 0u32..300),
    )
        .prop_map(
            |((size, flags, off, delta, small), comm, path, (pid, tid, cpu))| {
                event(&Ev {
                    size,
                    flags,
                    off,
                    delta,
                    small,
                    path,
                    comm,
                    pid,
                    tid,
                    cpu,
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any input: an error or a filter, never a panic.
    #[test]
    fn filter_random_text_never_panics(s in ".{0,40}") {
        let _ = Filter::compile(&s, &fields()).map(|f| f.to_kernel_string());
    }

    /// Inputs built from the grammar's own pieces reach deeper states.
    #[test]
    fn filter_random_tokens_never_panic(
        parts in prop::collection::vec(
            prop::sample::select(vec![
                "size", "comm", "cpu", "pid", " ", "(", ")", "!", "&&", "||", "&", "|",
                "==", "!=", "<", "<=", ">", ">=", "~", "=", "\"", "'", "x", "0x", "-",
                "12", "0", "*", "?", "[", "]", "\\", ".", "CPUS{", "}", "é",
            ]),
            0..16,
        )
    ) {
        let s: String = parts.concat();
        if let Err(e) = Filter::compile(&s, &fields()) {
            prop_assert!(e.span.start <= s.len());
            prop_assert!(s.is_char_boundary(e.span.start));
            let _ = e.to_string();
        }
    }

    /// Valid expressions: the canonical and kernel forms parse back to the
    /// same tree, and the compiled program agrees with a plain recursive
    /// evaluation of the tree.
    #[test]
    fn filter_random_expressions_round_trip_and_agree(s in arb_expr(), ev in arb_event()) {
        let f = Filter::compile(&s, &fields()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let canonical = f.to_string();
        let again = Filter::compile(&canonical, &fields()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(tree(again.expr()), tree(f.expr()));
        prop_assert_eq!(again.to_string(), canonical);
        if let Ok(k) = f.to_kernel_string() {
            let back = Filter::compile(&k, &fields()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back.to_kernel_string(), Ok(k));
            prop_assert_eq!(back.matches(&ev), f.matches(&ev));
        }
        prop_assert_eq!(f.matches(&ev), reference(f.expr(), &ev));
    }
}
