//! Tests of the probe language: the seed documents' examples, a table of
//! bad inputs with their exact messages, round trips and robustness.

use super::*;
use kprobe_perf_arch::Arch;
use proptest::prelude::*;

fn parse(s: &str) -> Result<ProbeSpec, SpecError> {
    ProbeSpec::parse(s, Arch::X86_64)
}

fn reg(r: &str) -> Fetch {
    Fetch {
        base: FetchBase::Register(r.into()),
        derefs: vec![],
    }
}

fn named(name: &str, fetch: Fetch, ty: Option<ArgType>) -> FetchArg {
    FetchArg {
        name: Some(name.into()),
        fetch,
        ty,
    }
}

fn sym(name: &str, offset: u64) -> Target {
    Target::Symbol {
        module: None,
        name: name.into(),
        instance: None,
        offset,
    }
}

/// kprobetrace.rst (seed 000) and the blog posts (seeds 002, 004):
/// `p:myprobe do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)`.
#[test]
fn seed_myprobe_with_four_arguments() {
    let s = parse("p:myprobe do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)").unwrap();
    assert_eq!(s.kind, ProbeKind::Entry);
    assert_eq!(
        (s.group_name(), s.event_name().as_str()),
        ("kprobes", "myprobe")
    );
    assert_eq!(s.target, sym("do_sys_open", 0));
    assert_eq!(
        s.args,
        vec![
            named("dfd", reg("ax"), None),
            named("filename", reg("dx"), None),
            named("flags", reg("cx"), None),
            named(
                "mode",
                Fetch {
                    base: FetchBase::Stack,
                    derefs: vec![Deref {
                        offset: 4,
                        user: false
                    }]
                },
                None
            ),
        ]
    );
    assert_eq!(s.args[3].effective_type(), ArgType::DEFAULT);
}

/// Seed 002: the same probe at +260 and +263, and a second event myprobe2.
#[test]
fn seed_probes_at_offsets() {
    for (text, event, off) in [
        (
            "p:myprobe do_sys_open+260 dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
            "myprobe",
            260,
        ),
        (
            "p:myprobe do_sys_open+263 dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
            "myprobe",
            263,
        ),
        (
            "p:myprobe2 do_sys_open+260 dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
            "myprobe2",
            260,
        ),
    ] {
        let s = parse(text).unwrap();
        assert_eq!(s.event_name(), event);
        assert_eq!(s.target, sym("do_sys_open", off));
        assert_eq!(s.args.len(), 4);
    }
}

/// `r:myretprobe do_sys_open $retval`: a return probe whose one argument
/// the kernel names arg1.
#[test]
fn seed_myretprobe() {
    let s = parse("r:myretprobe do_sys_open $retval").unwrap();
    assert_eq!(s.kind, ProbeKind::Return { maxactive: None });
    assert_eq!(s.event_name(), "myretprobe");
    assert_eq!(s.args[0].fetch.base, FetchBase::Retval);
    assert_eq!(s.arg_name(0), "arg1");
}

/// `-:myprobe` deletes; `p:myprobe blk_start_request` (seed 004) has no args.
#[test]
fn seed_delete_and_bare_probe() {
    assert_eq!(
        Definition::parse("-:myprobe", Arch::X86_64).unwrap(),
        Definition::Delete {
            group: None,
            event: "myprobe".into(),
            matching: Vec::new(),
        }
    );
    let s = parse("p:myprobe blk_start_request").unwrap();
    assert_eq!((s.event_name().as_str(), s.args.len()), ("myprobe", 0));
    assert_eq!(s.target, sym("blk_start_request", 0));
    let b = parse("p:blkprobe blk_account_io_completion req=%di bytes=%si").unwrap();
    assert_eq!(
        b.args,
        vec![
            named("req", reg("di"), None),
            named("bytes", reg("si"), None)
        ]
    );
}

/// The synopsis forms of kprobetrace.rst.
#[test]
fn synopsis_forms() {
    let r = parse("r100:mygrp/myret do_sys_openat2 $retval").unwrap();
    assert_eq!(
        r.kind,
        ProbeKind::Return {
            maxactive: Some(100)
        }
    );
    assert_eq!(r.group_name(), "mygrp");
    let m = parse("p ext4:ext4_file_open").unwrap();
    assert_eq!(
        m.target,
        Target::Symbol {
            module: Some("ext4".into()),
            name: "ext4_file_open".into(),
            instance: None,
            offset: 0
        }
    );
    assert_eq!(m.event_name(), "p_ext4_ext4_file_open_0");
    let digit_module = parse("p:9pnet:p9_client_walk").unwrap();
    assert_eq!(
        digit_module.target,
        Target::Symbol {
            module: Some("9pnet".into()),
            name: "p9_client_walk".into(),
            instance: None,
            offset: 0
        }
    );
    let a = parse("p 0xffffffff81000000").unwrap();
    assert_eq!(
        (a.target.clone(), a.event_name()),
        (
            Target::Address(0xffffffff81000000),
            "p_0xffffffff81000000".to_string()
        )
    );
    let pr = parse("p:mygrp/ do_sys_open%return $retval").unwrap();
    assert_eq!(pr.kind, ProbeKind::Return { maxactive: None });
    assert_eq!(
        (pr.group.as_deref(), pr.event_name().as_str()),
        (Some("mygrp"), "r_do_sys_open_0")
    );
    let all = parse("p:e do_sys_open %di @jiffies @jiffies-8 @0xffffffff82000000 $stack $stack3 $comm +u8(%si):ustring \\42 \\\"hi\"").unwrap();
    let bases: Vec<_> = all.args.iter().map(|a| a.fetch.base.clone()).collect();
    assert_eq!(
        bases,
        vec![
            FetchBase::Register("di".into()),
            FetchBase::Symbol {
                name: "jiffies".into(),
                offset: 0
            },
            FetchBase::Symbol {
                name: "jiffies".into(),
                offset: -8
            },
            FetchBase::Address(0xffffffff82000000),
            FetchBase::Stack,
            FetchBase::StackEntry(3),
            FetchBase::Comm,
            FetchBase::Register("si".into()),
            FetchBase::Immediate(Immediate::Number(42)),
            FetchBase::Immediate(Immediate::String("hi".into())),
        ]
    );
    assert_eq!(
        all.args[6].effective_type(),
        ArgType::scalar(BaseType::String)
    );
    assert_eq!(
        all.args[7].fetch.derefs,
        vec![Deref {
            offset: 8,
            user: true
        }]
    );
}

#[test]
fn types_bitfields_and_arrays() {
    let s = parse("p:e f a=%di:u8 b=%di:s16 c=%di:x32 d=%di:symbol e=+0(%di):string f=%di:b4@2/32 g=+8(%di):x16[4] h=+0(%di):string[2]").unwrap();
    let tys: Vec<_> = s.args.iter().map(|a| a.ty.unwrap()).collect();
    assert_eq!(
        tys,
        vec![
            ArgType::scalar(BaseType::Unsigned(8)),
            ArgType::scalar(BaseType::Signed(16)),
            ArgType::scalar(BaseType::Hex(32)),
            ArgType::scalar(BaseType::Symbol),
            ArgType::scalar(BaseType::String),
            ArgType::scalar(BaseType::Bitfield {
                width: 4,
                offset: 2,
                container: 32
            }),
            ArgType {
                base: BaseType::Hex(16),
                array: Some(4)
            },
            ArgType {
                base: BaseType::String,
                array: Some(2)
            },
        ]
    );
}

/// Dereferences nest as deep as the kernel runs them (15 steps: 14
/// around a register, 12 around @SYM), and no deeper, refused where the
/// kernel's error_log points (at the contents of the dereference that
/// takes the 16th step).
#[test]
fn deep_nesting() {
    let nest = |depth: usize, base: &str| {
        format!("p:e f {}{base}{}", "+0(".repeat(depth), ")".repeat(depth))
    };
    let s = parse(&nest(14, "%di")).unwrap();
    assert_eq!(s.args[0].fetch.derefs.len(), 14);
    let e = parse(&nest(15, "%di")).unwrap_err();
    assert_eq!(e.span.start, 9);
    assert!(parse(&nest(12, "@jiffies")).is_ok());
    assert_eq!(parse(&nest(13, "@jiffies")).unwrap_err().span.start, 9);
    let neg = parse("p:e f -0x10(+u4($stack0)):s32").unwrap();
    assert_eq!(
        neg.args[0].fetch.derefs,
        vec![
            Deref {
                offset: 4,
                user: true
            },
            Deref {
                offset: -16,
                user: false
            }
        ]
    );
    assert_eq!(neg.args[0].to_string(), "-16(+u4($stack0)):s32");
}

#[test]
fn uprobes() {
    let s = parse("p:/usr/bin/bash:readline+4 %di").unwrap();
    assert_eq!(
        s.target,
        Target::User {
            path: "/usr/bin/bash".into(),
            location: UserLocation::Symbol {
                name: "readline".into(),
                offset: 4
            }
        }
    );
    assert_eq!(
        (s.group_name(), s.event_name().as_str()),
        ("uprobes", "p_bash_readline_4")
    );
    let o = parse("r:myu /lib/x86_64-linux-gnu/libc.so.6:0x1234 $retval").unwrap();
    assert_eq!(
        o.target,
        Target::User {
            path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            location: UserLocation::Offset(0x1234)
        }
    );
    assert!(o.is_return());
    assert_eq!(
        parse("p /lib/libc.so.6:0x10").unwrap().event_name(),
        "p_libc_0x10"
    );
    let f = parse("p:u /bin/true:0x10 @+0x20").unwrap();
    assert_eq!(f.args[0].fetch.base, FetchBase::FileOffset(0x20));
}

/// The SDT form: on its own, as bpftrace writes it, and as the target of
/// a kprobe_events-style definition.
#[test]
fn sdt_probes() {
    let s = parse("usdt:/usr/bin/python3.11:python:function__entry +0($arg1):ustring $arg3:s32")
        .unwrap();
    assert_eq!(
        s.target,
        Target::User {
            path: "/usr/bin/python3.11".into(),
            location: UserLocation::Sdt {
                provider: "python".into(),
                name: "function__entry".into()
            }
        }
    );
    assert_eq!(s.kind, ProbeKind::Entry);
    assert_eq!(s.args.len(), 2);
    assert_eq!(s.args[1].fetch.base, FetchBase::Arg(3));
    assert_eq!(s.event_name(), "function__entry");
    assert_eq!(
        s.to_string(),
        "usdt:/usr/bin/python3.11:python:function__entry +0($arg1):ustring $arg3:s32"
    );
    assert_eq!(
        s.qualified().to_string(),
        "p:uprobes/function__entry usdt:/usr/bin/python3.11:python:function__entry +0($arg1):ustring $arg3:s32"
    );
    // A path with a colon in it keeps it: provider and name are the last two.
    let g = parse("p:myev usdt:/opt/a:b/prog:py*:function__*").unwrap();
    assert_eq!(
        g.target,
        Target::User {
            path: "/opt/a:b/prog".into(),
            location: UserLocation::Sdt {
                provider: "py*".into(),
                name: "function__*".into()
            }
        }
    );
    assert_eq!(g.to_string(), "p:myev usdt:/opt/a:b/prog:py*:function__*");
    let any = parse("usdt:*:python:gc__start").unwrap();
    assert_eq!(any.to_string(), "usdt:*:python:gc__start");
    let e = parse("usdt:python:function__entry").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the binary's path must be absolute (or *, every file of the processes recorded); an SDT probe is usdt:PATH:PROVIDER:NAME, as in usdt:/usr/bin/python3.11:python:function__entry\n  usdt:python:function__entry\n       ^^^^^^"
    );
    let e = parse("usdt:/usr/bin/python3.11:py-thon:x").unwrap_err();
    assert_eq!((e.span.start, e.span.len), (25, 7));
    let e = parse("usdt:/usr/bin/python3.11:function__entry").unwrap_err();
    assert_eq!((e.span.start, e.span.len), (5, 35), "{e}");
}

/// The function-based-events proposal (seed 001).
#[test]
fn prototype_form() {
    let s = parse("SyS_openat(int dfd, string path, x32 flags, x16 mode)").unwrap();
    assert_eq!(s.event_name(), "SyS_openat");
    assert_eq!(s.target, sym("SyS_openat", 0));
    let arg = |n| Fetch {
        base: FetchBase::Arg(n),
        derefs: vec![],
    };
    assert_eq!(
        s.args,
        vec![
            named("dfd", arg(1), Some(ArgType::scalar(BaseType::Signed(32)))),
            named(
                "path",
                Fetch {
                    base: FetchBase::Arg(2),
                    derefs: vec![Deref {
                        offset: 0,
                        user: false
                    }]
                },
                Some(ArgType::scalar(BaseType::String))
            ),
            named("flags", arg(3), Some(ArgType::scalar(BaseType::Hex(32)))),
            named("mode", arg(4), Some(ArgType::scalar(BaseType::Hex(16)))),
        ]
    );
    let t = parse("do_sys_openat2(int dfd, const char __user *filename, struct open_how *how)")
        .unwrap();
    assert_eq!(t.args[1].ty, Some(ArgType::DEFAULT));
    assert_eq!(t.args[2].fetch.base, FetchBase::Arg(3));
    let skip = parse("f(NULL, unsigned long len)").unwrap();
    assert_eq!(
        skip.args,
        vec![named(
            "len",
            arg(2),
            Some(ArgType::scalar(BaseType::Unsigned(64)))
        )]
    );
    // The proposal's indexing forms are refused, not misread.
    for text in [
        "do_IRQ(symbol ip[16] | x64[6] irq_stack[16])",
        "__vfs_read(symbol read+40[0]+16)",
    ] {
        let e = parse(text).unwrap_err();
        assert!(
            e.message
                .starts_with("indexing and offsets inside a prototype are not supported"),
            "{}",
            e.message
        );
    }
}

#[test]
fn short_form_and_canonical_print() {
    let s = parse("p:do_sys_openat2 dfd=%di").unwrap();
    assert_eq!(
        (s.event.as_deref(), s.event_name().as_str()),
        (None, "p_do_sys_openat2_0")
    );
    assert_eq!(s.to_string(), "p do_sys_openat2 dfd=%di");
    assert_eq!(
        s.qualified().to_string(),
        "p:kprobes/p_do_sys_openat2_0 do_sys_openat2 dfd=%di"
    );
    assert_eq!(
        parse("p:do_sys_open+0x10 %si").unwrap().target,
        sym("do_sys_open", 16)
    );
    assert_eq!(
        parse("  p:e   do_sys_open\t%si:u32  ").unwrap().to_string(),
        "p:e do_sys_open %si:u32"
    );
}

#[test]
fn aarch64_registers() {
    let s = ProbeSpec::parse("p:e f a=%x0 b=%lr c=$arg8", Arch::Aarch64).unwrap();
    assert_eq!(s.args[1].fetch.base, FetchBase::Register("lr".into()));
    let e = ProbeSpec::parse("p:e f %di", Arch::Aarch64).unwrap_err();
    assert_eq!(
        e.message,
        "unknown register %di on aarch64; did you mean %x0?"
    );
}

#[test]
fn at_most_128_arguments() {
    let ok = format!("p:e f {}", vec!["%di"; 128].join(" "));
    assert_eq!(parse(&ok).unwrap().args.len(), 128);
    let e = parse(&format!("{ok} %si")).unwrap_err();
    assert_eq!(
        e.message,
        "at most 128 arguments per probe, and 129 are given"
    );
    // Where 7.x's error_log points: the first argument.
    assert_eq!(e.span.start, 6);
}

/// Found by the fuzzer: a multi-byte character where a type starts.
#[test]
fn multibyte_type_is_refused_not_a_panic() {
    let e = parse("p:e f +0(%si):\u{fffd}ustring").unwrap_err();
    assert!(
        e.message.starts_with("unknown type \u{fffd}ustring"),
        "{}",
        e.message
    );
    assert!(e.to_string().ends_with("^^^^^^^^"), "{e}");
}

#[test]
fn error_display_has_a_caret_under_the_token() {
    let e = parse("p:do_sys_openat2 dfd=%rx").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown register %rx on x86_64; did you mean %r8?\n  p:do_sys_openat2 dfd=%rx\n                       ^^^"
    );
}

/// (input, message, span start, span length), asserted verbatim.
const BAD: &[(&str, &str, usize, usize)] = &[
    ("", "empty probe definition; expected e.g. p:do_sys_openat2", 0, 0),
    ("q:foo do_sys_open", "a probe starts with p (entry), r (return), f (fprobe), t (tracepoint) or e (event probe), as in p:do_sys_openat2", 0, 1),
    ("p100:foo do_sys_open", "maxactive applies only to return probes: write r100:, not p100:", 1, 3),
    ("r0:foo do_sys_open", "maxactive must be a number from 1 to 4096, as in r100:", 1, 1),
    ("r5000 do_sys_open", "maxactive must be a number from 1 to 4096, as in r100:", 1, 4),
    ("p:", "missing probe target: give a symbol (do_sys_openat2), symbol+offset, or address", 0, 2),
    ("p:1abc do_sys_open", "event names are letters, digits and _, starting with a letter or _", 2, 4),
    ("p:ev do_sys_open-8", "offsets into a symbol are positive: SYM+OFFS", 5, 13),
    ("p:ev do_sys_open+zz", "not a valid offset: write SYM+0x10 or SYM+16 (at most 0x7fffffffffffffff)", 5, 14),
    ("p:ev 0xZZ", "not a valid address: write it in hex, as in 0xffffffff81234560", 5, 4),
    ("p:ev 9abc", "not a valid address: write it in hex, as in 0xffffffff81234560", 5, 4),
    ("p:ev mod-x:sym", "module names are letters, digits and _ (or a glob: * ? [...])", 5, 5),
    ("p:ev do_sys_open $arg0", "arguments count from $arg1 to $arg2048", 17, 5),
    ("p:ev do_sys_open $argx", "$arg takes a number from 1, as in $arg1", 17, 5),
    ("p:ev do_sys_open $retval", "$retval is only available at a return probe: use r: instead of p:", 17, 7),
    ("p:ev do_sys_open $foo", "unknown variable $foo: use $argN, $retval, $stack, $stackN or $comm", 17, 4),
    ("p:ev do_sys_open $stackx", "$stack takes a number from 0, as in $stack0", 17, 7),
    ("p:ev do_sys_open dfd=%rx", "unknown register %rx on x86_64; did you mean %r8?", 21, 3),
    ("p:ev do_sys_open dfd=%zzzzzz", "unknown register %zzzzzz on x86_64", 21, 7),
    ("p:ev do_sys_open x=%di x=%si", "argument name x is used twice; names must be unique", 23, 5),
    ("p:ev do_sys_open %di arg1=%si", "argument name arg1 is used twice; names must be unique", 21, 8),
    ("p:ev do_sys_open 1x=%di", "argument names are letters, digits and _, starting with a letter or _", 17, 2),
    ("p:ev do_sys_open common_pid=%di", "common_pid is a field name the kernel reserves; pick another name", 17, 10),
    ("p:ev do_sys_open %di:u12", "unknown type u12: use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>", 21, 3),
    ("p:ev do_sys_open %di:float", "unknown type float: use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>", 21, 5),
    ("f:ev vfs_read+4", "an fprobe goes on a function's entry or return: no offset (use p:SYM+OFFS for an offset)", 5, 10),
    ("f:ev !vfs_read", "an fprobe's glob cannot start with !: the kernel would read it as an exclusion from an empty filter, which arms every function; name the functions to keep (a class [!...] excludes within one position)", 5, 1),
    ("f:ev vfs_[a-k]*-4", "an fprobe goes on a function's entry or return: no offset (use p:SYM+OFFS for an offset)", 5, 12),
    ("f:ev ext4:ext4_file_open", "fprobe events take no MOD: prefix: name the function alone (modules' functions are found by name)", 5, 5),
    ("f:ev 0xffffffff81000000", "an fprobe takes a function name or a glob, not an address", 5, 18),
    ("f:ev vfs_read%ret", "the only suffix an fprobe takes is %return", 13, 4),
    ("f100:ev vfs_read", "maxactive applies only to return fprobes: add %return to the function (f100:EV SYM%return)", 1, 3),
    ("f0:ev vfs_read%return", "maxactive must be a number from 1 to 4096, as in f100:", 1, 1),
    ("f:ev vfs_read %di", "%di: fprobe, tracepoint and event probes cannot fetch registers: use $argN, a parameter name or $retval", 14, 3),
    ("f:ev vfs_* $arg*", "$arg* needs one function's BTF, and vfs_* is a glob of functions: use $argN", 11, 5),
    ("f:ev vfs_* count", "count needs one function's BTF, and vfs_* is a glob of functions: use $argN", 11, 5),
    ("t:ev sched_switch%return", "a tracepoint probe fires at the tracepoint: it takes no %return or other suffix", 17, 7),
    ("t:ev sched_switch $retval", "$retval is not available at a tracepoint: it fires inside the traced function", 18, 7),
    ("t:ev sched:sched_switch", "a tracepoint is named by letters, digits and _, as in sched_switch (no group, no glob)", 10, 1),
    ("t1:ev sched_switch", "a tracepoint probe takes no maxactive: write t:[GRP/]EVENT TRACEPOINT", 1, 1),
    ("p:ev vfs_read $arg* $arg*", "$arg* can be used only once: it already stands for every parameter", 20, 5),
    ("p:ev vfs_read all=$arg*", "$arg* stands alone: it expands to every parameter with its own name", 18, 5),
    ("p:ev vfs_read file->", "missing member name: write NAME->field or NAME->field.sub", 20, 1),
    ("p:ev vfs_read file->f_path..dentry", "missing member name: write NAME->field or NAME->field.sub", 27, 1),
    ("p:ev vfs_read file-f_flags", "members are reached with ->field (through a pointer) or .field (within a struct)", 18, 8),
    ("p:ev /bin/true:main argc", "argc needs the kernel's BTF: uprobes have none; fetch registers or $argN", 20, 4),
    ("p:ev vfs_read file->f_flags:%pd[2]", "%pd takes no array: it names one dentry or file: use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>", 28, 3),
    ("p:ev vfs_read $comm:%pD", "$comm and immediate strings are strings: leave out :%pD or write :string", 20, 3),
    ("p:ev vfs_read \\\"x\":symstr", "$comm and immediate strings are strings: leave out :symstr or write :string", 19, 6),
    ("p:ev vfs_read %di:char[2]", "arrays are read from memory: write +0(%di):char[2], not %di:char[2]", 18, 7),
    ("p:ev vfs_read abcdefghijabcdefghijabcdefghijabc=%di", "argument names are at most 32 characters", 14, 33),
    ("p:ev do_sys_open %di:string", "string reads memory at an address: write +0(%di):string, not %di:string", 21, 6),
    ("p:ev do_sys_open $stack3:x8[8]", "arrays are read from memory: write +0($stack3):x8[8], not $stack3:x8[8]", 25, 5),
    ("p:ev do_sys_open +0(%di):x8[0]", "array length must be a number from 1 to 64", 28, 1),
    ("p:ev do_sys_open +0(%di):x8[65]", "array length must be a number from 1 to 64", 28, 2),
    ("p:ev do_sys_open %di:b9@0/8", "a bitfield of 9 bits at bit 0 does not fit in a container of 8 bits", 21, 6),
    ("p:ev do_sys_open %di:b0@0/32", "a bitfield of 0 bits at bit 0 does not fit in a container of 32 bits", 21, 7),
    ("p:ev do_sys_open %di:b4@2/12", "b4@2/12 is not a type (a bitfield's container, after /, is 8, 16, 32 or 64): use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>", 21, 7),
    ("p:ev do_sys_open %di:b4@2", "b4@2 is not a type (a bitfield's container, after /, is 8, 16, 32 or 64): use u8..u64, s8..s64, x8..x64, char, string, ustring, symbol, symstr, %pd, %pD or b<width>@<offset>/<container>", 21, 4),
    ("p:ev do_sys_open $comm:u32", "$comm and immediate strings are strings: leave out :u32 or write :string", 23, 3),
    ("p:ev do_sys_open +8(%di", "the dereference is not closed: +OFFS(FETCHARG)", 23, 1),
    ("p:ev do_sys_open +8%di))", "a dereference is +OFFS(FETCHARG), as in +8(%di)", 17, 7),
    ("p:ev do_sys_open +zz(%di)", "a dereference is +OFFS(FETCHARG) with a number for OFFS, as in +8(%di) or -0x10(%si)", 17, 4),
    ("p:ev do_sys_open +0($comm)", "$comm cannot be dereferenced", 20, 5),
    ("p:ev do_sys_open @", "not a symbol name after @: write @jiffies or @SYM+OFFS", 17, 1),
    ("p:ev do_sys_open @0xZZ", "not a valid address: write @0xffffffff82000000", 17, 5),
    ("p:ev do_sys_open @jiffies+zz", "not a valid offset: write @SYM+8 or @SYM-0x10", 17, 11),
    ("p:ev do_sys_open @+10", "@+OFFS reads a file offset of a uprobe's binary; for kernel memory use @ADDR or @SYM", 17, 4),
    ("p:ev /bin/true:0x10 @jiffies", "@SYM reads kernel memory; in a uprobe use @+OFFS (a file offset)", 20, 8),
    ("p:ev /bin/true", "a uprobe target is PATH:0xOFFSET or PATH:SYMBOL[+offs]", 5, 9),
    ("p:ev /bin/true:", "missing offset after the path: PATH:0xOFFSET or PATH:SYMBOL", 15, 1),
    ("p:ev do_sys_open \\\"abc", "the immediate string is not closed: \\\"text\"", 22, 1),
    ("p:ev do_sys_open \\zz", "an immediate is \\NUMBER (at most 64 bits) or \\\"text\"", 18, 2),
    ("p:ev do_sys_open \\\"abc\":u32", "$comm and immediate strings are strings: leave out :u32 or write :string", 24, 3),
    ("p:ev do_sys_open =%di", "missing argument name before =: write NAME=FETCHARG", 17, 1),
    ("-:", "name the event to delete: -:EVENT or -:GRP/EVENT", 2, 1),
    ("do_sys_open(int)", "this parameter has a type but no name: write int NAME", 12, 3),
    ("do_sys_open(float f)", "unknown type float: use a C integer type, a pointer, string, ustring, symbol, or u8..u64/s8..s64/x8..x64", 12, 6),
    ("do_sys_open(int a, int a)", "argument name a is used twice; names must be unique", 19, 5),
    ("do_sys_open(int a, , int b)", "empty parameter: write TYPE NAME, or NULL to skip one", 19, 1),
    ("do_sys_open(x64[6] irq)", "indexing and offsets inside a prototype are not supported; use the kprobe_events form (+OFFS($argN))", 12, 10),
];

/// Definitions kprobe-perf once refused that the kernel takes (issue #31,
/// checked against error_log in tests/tests/grammar_oracle.rs).
const KERNEL_ACCEPTS: &[&str] = &[
    "rx:foo do_sys_open",
    "p:grp-x/ev do_sys_open",
    "r:ev do_sys_open+5",
    "r:ev do_sys_open+8%return",
    "r:ev do_sys_open%return",
    "p:ev do_sys_open+4 $arg1",
    "p:ev vfs_read $arg*:u32",
    "p:ev vfs_read+4 $arg*",
    "r100:ev /bin/true:main",
    "-:ev extra",
    "p:kpo.ev vfs_read",
    "r vfs_read%return",
    "p:ev vfs_read \\+5 \\\"a\"b\" +0(\\1)",
    "p /bin/true:0x1000(0x20)",
    "r /bin/true:0x1000%return(0x20)",
    "-:kpo/ev vfs_read",
    "-:kpo/",
    "e:kpo/ev sched.sched_switch prev=$prev_pid comm=$prev_comm:string",
    "r:ev filp_open $retval->f_mode",
];

#[test]
fn the_kernels_forms_are_accepted() {
    for input in KERNEL_ACCEPTS {
        if let Err(e) = Definition::parse(input, Arch::X86_64) {
            panic!("{input:?} is refused: {e}");
        }
    }
}

#[test]
fn bad_inputs_are_refused_with_their_message() {
    assert!(BAD.len() >= 40, "{} rows", BAD.len());
    for &(input, message, start, len) in BAD {
        let e = Definition::parse(input, Arch::X86_64).unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.span.start, e.span.len),
            (message, start, len),
            "input {input:?}"
        );
    }
}

// ---- generated ASTs: print, parse back, compare ----

fn ident() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,8}".prop_filter("reserved", |s| !RESERVED_NAMES.contains(&s.as_str()))
}

fn scalar_type() -> impl Strategy<Value = BaseType> {
    let bits = prop::sample::select(vec![8u8, 16, 32, 64]);
    prop_oneof![
        bits.clone().prop_map(BaseType::Unsigned),
        bits.clone().prop_map(BaseType::Signed),
        bits.prop_map(BaseType::Hex),
        Just(BaseType::Symbol),
        (prop::sample::select(vec![8u8, 16, 32, 64]), 1u8..8, 0u8..8).prop_map(|(c, w, o)| {
            BaseType::Bitfield {
                width: w,
                offset: o % (c - w + 1),
                container: c,
            }
        }),
    ]
}

fn register_arg(is_return: bool, entry: bool) -> impl Strategy<Value = FetchArg> {
    let regs = prop::sample::select(
        Arch::X86_64
            .registers()
            .iter()
            .map(|r| r.name)
            .collect::<Vec<_>>(),
    );
    let mut bases: Vec<BoxedStrategy<FetchBase>> = vec![
        regs.prop_map(|r| FetchBase::Register(r.to_string()))
            .boxed(),
        Just(FetchBase::Stack).boxed(),
        (0u32..20).prop_map(FetchBase::StackEntry).boxed(),
        any::<i64>()
            .prop_map(|n| FetchBase::Immediate(Immediate::Number(n)))
            .boxed(),
        any::<u64>().prop_map(FetchBase::Address).boxed(),
        (ident(), any::<i64>())
            .prop_map(|(name, offset)| FetchBase::Symbol { name, offset })
            .boxed(),
    ];
    if is_return {
        bases.push(Just(FetchBase::Retval).boxed());
    } else if entry {
        bases.push((1u32..7).prop_map(FetchBase::Arg).boxed());
    }
    let derefs = prop::collection::vec(
        (any::<i64>(), any::<bool>()).prop_map(|(offset, user)| Deref { offset, user }),
        0..4,
    );
    (
        prop::option::of(ident()),
        prop::strategy::Union::new(bases),
        derefs,
        prop::option::of(scalar_type()),
        prop::option::of(1u32..=64),
    )
        .prop_map(|(name, base, derefs, ty, array)| {
            let mut fetch = Fetch { base, derefs };
            if matches!(fetch.base, FetchBase::Immediate(_)) {
                fetch.derefs.clear();
            }
            // The kernel reads arrays through kernel dereferences only.
            let memory = fetch.reads_memory() && !fetch.derefs.last().is_some_and(|d| d.user);
            let ty = ty.map(|b| ArgType {
                base: b,
                array: if memory { array } else { None },
            });
            let mut arg = FetchArg { name, fetch, ty };
            // The kernel takes at most MAX_ARG_BODY characters after the
            // name (type included).
            let body = |a: &FetchArg| {
                let t = a.to_string();
                t.split_once('=').map_or(t.len(), |(_, b)| b.len())
            };
            if body(&arg) > crate::MAX_ARG_BODY {
                arg.fetch = Fetch {
                    base: FetchBase::Stack,
                    derefs: vec![],
                };
                arg.ty = None;
            }
            arg
        })
}

fn spec() -> impl Strategy<Value = ProbeSpec> {
    (
        any::<bool>(),
        prop::option::of(1u32..=4096),
        prop::option::of(ident()),
        prop::option::of(ident()),
        ident(),
        0u64..64,
        0usize..6,
    )
        .prop_flat_map(|(is_return, maxactive, group, event, func, off, nargs)| {
            let offset = if is_return { 0 } else { off };
            let kind = if is_return {
                ProbeKind::Return { maxactive }
            } else {
                ProbeKind::Entry
            };
            prop::collection::vec(register_arg(is_return, offset == 0), nargs).prop_map(
                move |args| {
                    // Generated names must stay unique, as the parser requires.
                    let args: Vec<FetchArg> = args
                        .into_iter()
                        .enumerate()
                        .map(|(i, mut a)| {
                            a.name = a.name.map(|n| format!("{n}_{i}"));
                            a
                        })
                        .collect();
                    ProbeSpec {
                        kind,
                        group: if event.is_some() { group.clone() } else { None },
                        event: event.clone(),
                        target: sym(&func, offset),
                        args,
                    }
                },
            )
        })
}

/// fprobe and tracepoint probes: no registers; `$retval` only in a
/// return fprobe (where it makes the kind), BTF names and members only on
/// one function, the newer types.
fn dynamic_spec() -> impl Strategy<Value = ProbeSpec> {
    let types = prop_oneof![
        Just(None),
        Just(Some(ArgType::scalar(BaseType::SymStr))),
        Just(Some(ArgType::scalar(BaseType::Char))),
        Just(Some(ArgType::scalar(BaseType::File))),
        Just(Some(ArgType::scalar(BaseType::Dentry))),
        (1u32..=64).prop_map(|n| Some(ArgType {
            base: BaseType::Char,
            array: Some(n)
        })),
        scalar_type().prop_map(|b| Some(ArgType::scalar(b))),
    ];
    let member = (any::<bool>(), ident()).prop_map(|(through_pointer, field)| Member {
        through_pointer,
        field,
    });
    let base = prop_oneof![
        (1u32..7).prop_map(FetchBase::Arg),
        ident().prop_map(FetchBase::Name),
        (ident(), prop::collection::vec(member, 1..4))
            .prop_map(|(name, path)| FetchBase::Member { name, path }),
        (0u32..8).prop_map(FetchBase::StackEntry),
    ];
    let arg = (prop::option::of(ident()), base, types).prop_map(|(name, base, ty)| {
        let fetch = Fetch {
            base,
            derefs: vec![],
        };
        // Arrays and strings read memory: behind a dereference.
        let fetch = match ty {
            Some(t) if t.array.is_some() || t.base == BaseType::SymStr => Fetch {
                derefs: vec![Deref {
                    offset: 0,
                    user: false,
                }],
                ..fetch
            },
            _ => fetch,
        };
        FetchArg { name, fetch, ty }
    });
    (
        0u8..3,
        prop::option::of(1u32..=4096),
        prop::option::of(ident()),
        ident(),
        prop::collection::vec(arg, 0..5),
    )
        .prop_map(|(form, maxactive, event, func, args)| {
            let args: Vec<FetchArg> = args
                .into_iter()
                .enumerate()
                .map(|(i, mut a)| {
                    a.name = Some(format!("{}_{i}", a.name.unwrap_or_else(|| "a".into())));
                    a
                })
                .collect();
            let (kind, target) = match form {
                0 => (ProbeKind::Entry, Target::Fprobe { name: func }),
                1 => (
                    ProbeKind::Return { maxactive },
                    Target::Fprobe { name: func },
                ),
                _ => (ProbeKind::Entry, Target::Tracepoint { name: func }),
            };
            ProbeSpec {
                kind,
                group: event.as_ref().map(|_| "grp".to_string()),
                event,
                target,
                args,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn newer_forms_print_then_parse_is_identity(s in dynamic_spec()) {
        let text = s.to_string();
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{text}\n{e}")))?;
        prop_assert_eq!(back, s);
    }

    #[test]
    fn print_then_parse_is_identity(s in spec()) {
        let text = s.to_string();
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{text}\n{e}")))?;
        prop_assert_eq!(back, s);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Definition::parse(&text, Arch::X86_64);
    }

    #[test]
    fn mutated_specs_never_panic(s in spec(), cut in 0usize..200, junk in "[ -~]{0,6}") {
        let mut text = s.to_string();
        let at = (0..=cut.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.insert_str(at, &junk);
        if let Ok(Definition::Probe(p)) = Definition::parse(&text, Arch::X86_64) {
            // Whatever parses must print to something that parses the same.
            prop_assert_eq!(parse(&p.to_string()).ok(), Some(p));
        }
    }
}

/// `NAME@0xADDR` picks one function of a duplicated name.
#[test]
fn instance_of_a_duplicate_name() {
    let s = parse("p:ext4:init_once@0xffffffffc0a01000+8 %di").unwrap();
    assert_eq!(
        s.target,
        Target::Symbol {
            module: Some("ext4".into()),
            name: "init_once".into(),
            instance: Some(0xffffffffc0a01000),
            offset: 8
        }
    );
    assert_eq!(s.to_string(), "p ext4:init_once@0xffffffffc0a01000+8 %di");
    assert_eq!(s.event_name(), "p_ext4_init_once_8");
    let e = parse("p init_once@12").unwrap_err();
    assert_eq!(
        e.to_string(),
        "not an instance address: write NAME@0xffffffff81234560 (the address of one of its instances, as kallsyms lists them)\n  p init_once@12\n              ^^"
    );
}

/// Every form of the current grammar: parse, print the canonical form,
/// parse that again: the same definition.
#[test]
fn newer_forms_round_trip() {
    let forms = [
        ("f:kpf/all vfs_*", "f:kpf/all vfs_*"),
        // Character classes, ranges included (lib/glob.c).
        ("f:kpf/cls ext4_[a-km-z]*", "f:kpf/cls ext4_[a-km-z]*"),
        ("f:kpf/neg vfs_[!l]*%return", "f:kpf/neg vfs_[!l]*%return"),
        ("f:vfs_read", "f:fprobes/vfs_read__entry vfs_read"),
        (
            "f vfs_read%return",
            "f:fprobes/vfs_read__exit vfs_read%return",
        ),
        (
            "f:kpf/ret vfs_read%return $retval",
            "f:kpf/ret vfs_read%return $retval",
        ),
        // `$retval` alone makes an fprobe a return probe.
        (
            "f:kpf/ret vfs_read ret=$retval",
            "f:kpf/ret vfs_read%return ret=$retval",
        ),
        (
            "f100:kpf/ret vfs_read%return $retval",
            "f100:kpf/ret vfs_read%return $retval",
        ),
        ("f:kpf/wc vfs_r* $arg1", "f:kpf/wc vfs_r* $arg1"),
        (
            "t:kpf/ss sched_switch prev next",
            "t:kpf/ss sched_switch prev next",
        ),
        ("t sched_switch", "t:tracepoints/sched_switch sched_switch"),
        (
            "t 9p_client_req",
            "t:tracepoints/_9p_client_req 9p_client_req",
        ),
        (
            "p:kpf/btf vfs_read file->f_flags count",
            "p:kpf/btf vfs_read file->f_flags count",
        ),
        (
            "f:kpf/btf vfs_read fn=file->f_path.dentry->d_name.name:string",
            "f:kpf/btf vfs_read fn=file->f_path.dentry->d_name.name:string",
        ),
        ("r:ev vfs_read $arg1", "r:kprobes/ev vfs_read $arg1"),
        (
            "r:ev vfs_read file count $retval",
            "r:kprobes/ev vfs_read file count $retval",
        ),
        ("p:ev vfs_read $arg*", "p:kprobes/ev vfs_read $arg*"),
        ("r:ev vfs_read $arg*", "r:kprobes/ev vfs_read $arg*"),
        (
            "p:ev vfs_read +0(%di):symstr %di:char",
            "p:kprobes/ev vfs_read +0(%di):symstr %di:char",
        ),
        (
            "p:ev vfs_read %di:symstr +0(%si):char[4]",
            "p:kprobes/ev vfs_read %di:symstr +0(%si):char[4]",
        ),
        ("p:ev vfs_read file:%pD", "p:kprobes/ev vfs_read file:%pD"),
        (
            "p:ev d_path path->dentry:%pd",
            "p:kprobes/ev d_path path->dentry:%pd",
        ),
        (
            "p:ev vfs_read +0(%di):%pD",
            "p:kprobes/ev vfs_read +0(%di):%pD",
        ),
    ];
    for (text, canonical) in forms {
        let d = Definition::parse(text, Arch::X86_64).unwrap_or_else(|e| panic!("{text}: {e}"));
        let Definition::Probe(p) = d else {
            panic!("{text}: not a probe")
        };
        assert_eq!(p.qualified().to_string(), canonical, "{text}");
        let back = parse(canonical).unwrap_or_else(|e| panic!("{canonical}: {e}"));
        assert_eq!(back, p.qualified(), "{text}");
    }
}

#[test]
fn newer_forms_parse_to_their_parts() {
    let s = parse("f:kpf/all vfs_*").unwrap();
    assert_eq!(
        s.target,
        Target::Fprobe {
            name: "vfs_*".into()
        }
    );
    assert_eq!(s.kind, ProbeKind::Entry);
    let s = parse("f:kpf/ret vfs_read $retval").unwrap();
    assert_eq!(s.kind, ProbeKind::Return { maxactive: None });
    let s = parse("t:kpf/ss sched_switch prev").unwrap();
    assert_eq!(
        s.target,
        Target::Tracepoint {
            name: "sched_switch".into()
        }
    );
    assert_eq!(s.args[0].fetch.base, FetchBase::Name("prev".into()));
    let s = parse("p:ev vfs_read fn=file->f_path.dentry").unwrap();
    assert_eq!(
        s.args[0].fetch.base,
        FetchBase::Member {
            name: "file".into(),
            path: vec![
                Member {
                    through_pointer: true,
                    field: "f_path".into()
                },
                Member {
                    through_pointer: false,
                    field: "dentry".into()
                },
            ]
        }
    );
    assert!(s.args[0].fetch.reads_memory());
    let s = parse("p:ev vfs_read $arg* +0(%di):symstr %di:char file:%pD").unwrap();
    assert_eq!(s.args[0].fetch.base, FetchBase::AllArgs);
    let types: Vec<_> = s.args[1..].iter().map(|a| a.ty.unwrap().base).collect();
    assert_eq!(
        types,
        vec![BaseType::SymStr, BaseType::Char, BaseType::File]
    );
    assert!(
        BaseType::File.is_data_loc()
            && BaseType::SymStr.is_data_loc()
            && !BaseType::Char.is_data_loc()
    );
}

#[test]
fn newer_form_errors_have_carets() {
    let e = parse("f:ev vfs_read+4").unwrap_err();
    assert_eq!(
        e.to_string(),
        "an fprobe goes on a function's entry or return: no offset (use p:SYM+OFFS for an offset)\n  f:ev vfs_read+4\n       ^^^^^^^^^^"
    );
    let e = parse("t:ev sched_switch $retval").unwrap_err();
    assert_eq!(
        e.to_string(),
        "$retval is not available at a tracepoint: it fires inside the traced function\n  t:ev sched_switch $retval\n                    ^^^^^^^"
    );
}

/// The kernel's newer forms print canonically and parse back.
#[test]
fn new_forms_print_canonically() {
    let canonical = |text: &str| match Definition::parse(text, Arch::X86_64).unwrap() {
        Definition::Probe(p) => p.qualified().to_string(),
        Definition::EventProbe(e) => e.qualified().to_string(),
        d => d.to_string(),
    };
    for (text, want) in [
        (
            "e sched.sched_switch prev=$prev_pid:s32",
            "e:eprobes/sched_switch sched.sched_switch prev=$prev_pid:s32",
        ),
        ("e:my/ev sched/sched_switch", "e:my/ev sched.sched_switch"),
        (
            "p /bin/true:0x10%return(0x20)",
            "r:uprobes/r_true_0x10 /bin/true:0x10(0x20)",
        ),
        ("-:kpo/ev vfs_read $arg1", "-:kpo/ev vfs_read $arg1"),
        (
            "r:ev filp_open f=$retval->f_path.dentry",
            "r:kprobes/ev filp_open f=$retval->f_path.dentry",
        ),
        ("rx:ev vfs_read", "r:kprobes/ev vfs_read"),
        ("p:grp.ev vfs_read", "p:grp/ev vfs_read"),
    ] {
        let got = canonical(text);
        assert_eq!(got, want, "{text}");
        assert_eq!(canonical(&got), want, "{got} parses back");
    }
    // An event probe is not a ProbeSpec: the message says what parses it.
    let e = ProbeSpec::parse("e sched.sched_switch", Arch::X86_64).unwrap_err();
    assert!(e.message.contains("parse it with Definition::parse"), "{e}");
}

#[test]
fn a_prototype_whose_event_name_would_be_too_long_is_refused_at_the_name() {
    // Found by cargo xtask fuzz spec_parse: the canonical form of such a
    // prototype (`p:kprobes/NAME NAME`) did not parse again.
    let name = "x".repeat(64);
    let e = crate::ProbeSpec::parse(&format!("{name}()"), Arch::X86_64).unwrap_err();
    assert_eq!((e.span.start, e.span.len), (0, 64), "{}", e.message);
    assert!(e.message.contains("at most 63 characters"), "{}", e.message);
    let ok = "y".repeat(63);
    let spec = crate::ProbeSpec::parse(&format!("{ok}(int a)"), Arch::X86_64).unwrap();
    let again = crate::ProbeSpec::parse(&spec.to_string(), Arch::X86_64).unwrap();
    assert_eq!(spec, again);
}

#[test]
fn a_prototype_parameter_name_longer_than_an_argument_name_is_refused() {
    // Found by cargo xtask fuzz spec_parse.
    let name = "n".repeat(33);
    let def = format!("vfs_read(int {name})");
    let e = crate::ProbeSpec::parse(&def, Arch::X86_64).unwrap_err();
    assert_eq!((e.span.start, e.span.len), (13, 33), "{}", e.message);
    assert_eq!(e.message, "argument names are at most 32 characters");
}
