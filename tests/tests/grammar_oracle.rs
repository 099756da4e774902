//! The kernel as the oracle of the probe language (issue #31): every
//! definition of a corpus built from the grammar is written to tracefs's
//! `dynamic_events` (`uprobe_events` for uprobes), and the kernel's
//! verdict and its `error_log` caret are compared with what
//! `kprobe_perf_spec` (the parser `probe --parse` runs) says, the kernel's
//! differences decided by its tracefs README (`KernelFeatures`).
//!
//! Run it in the VM (release build, as the VM tests are):
//! `cargo test --release -p kprobe-perf-tests --test grammar_oracle --no-run`,
//! then `cargo xtask vm --kernel 6.12 -- target/release/deps/grammar_oracle-HASH --nocapture`.

use std::fs::OpenOptions;
use std::io::Write;

use kprobe_perf_arch::Arch;
use kprobe_perf_spec::{Definition, KernelFeatures, ProbeSpec, Target, UserLocation};
use kprobe_perf_tests::{skip, vm_kernel};

const TRACING: &str = "/sys/kernel/tracing";
/// A binary every VM has (the host root, mounted read-only).
const UPROBE_BIN: &str = "/bin/true";

/// What one side said about a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Accepted,
    /// Refused, with the caret column (when the side gave one) and why.
    Refused(Option<usize>, String),
}

impl Verdict {
    fn accepted(&self) -> bool {
        matches!(self, Verdict::Accepted)
    }
}

/// Names a corpus entry by where it came from.
struct Entry {
    def: String,
    origin: &'static str,
}

fn push(out: &mut Vec<Entry>, origin: &'static str, def: impl Into<String>) {
    out.push(Entry {
        def: def.into(),
        origin,
    });
}

/// The kprobe, fprobe, tracepoint and uprobe heads whose argument lists
/// the argument productions are tried in.
fn arg_heads() -> Vec<String> {
    vec![
        "p:kpo/a vfs_read".into(),
        "r:kpo/a vfs_read".into(),
        "p:kpo/a vfs_read+4".into(),
        "f:kpo/a vfs_read".into(),
        "f:kpo/a vfs_read%return".into(),
        "t:kpo/a sched_switch".into(),
        format!("p:kpo/a {UPROBE_BIN}:0x1000"),
        format!("r:kpo/a {UPROBE_BIN}:0x1000"),
    ]
}

/// Fetch argument bodies: one or more per production of FETCHARG.
fn fetch_bodies() -> Vec<String> {
    let mut v: Vec<String> = [
        // registers
        "%ax",
        "%di",
        "%si",
        "%dx",
        "%cx",
        "%r8",
        "%r9",
        "%r15",
        "%ip",
        "%sp",
        "%bp",
        "%flags",
        "%cs",
        "%orig_ax",
        "%rax",
        "%xx",
        "%",
        "%x0",
        // $ variables
        "$retval",
        "$stack",
        "$stack0",
        "$stack1",
        "$stackx",
        "$stack-1",
        "$comm",
        "$COMM",
        "$current",
        "$foo",
        "$",
        "$arg1",
        "$arg2",
        "$arg6",
        "$arg7",
        "$arg0",
        "$arg",
        "$argx",
        "$arg01",
        "$arg*",
        "$retval1",
        "$retvalue",
        // memory
        "@0x1000",
        "@4096",
        "@0xzz",
        "@12x",
        "@jiffies",
        "@jiffies+8",
        "@jiffies-8",
        "@jiffies+0x10",
        "@jiffies+x",
        "@+0",
        "@+0x10",
        "@+x",
        "@",
        "@_text",
        // dereferences
        "+0(%di)",
        "-8(%di)",
        "+u0(%di)",
        "-u8(%di)",
        "+0x10(%di)",
        "+(%di)",
        "+8%di",
        "+0(%di",
        "+0(%di))",
        "+0(+0(%di))",
        "+0(+8($stack))",
        "+0($arg1)",
        "+0($retval)",
        "+0($comm)",
        "+0(\\1)",
        "+0(@jiffies)",
        "+x(%di)",
        "+0()",
        "+0(%xx)",
        "+ 0(%di)",
        "+0(file)",
        "+0(file->f_inode)",
        // immediates
        "\\1",
        "\\-1",
        "\\+5",
        "\\0x10",
        "\\0xzz",
        "\\x",
        "\\",
        "\\\"abc\"",
        "\\\"abcd",
        "\\\"\"",
        "\\\"a\"b\"",
        "\\\"a b",
        "\\18446744073709551615",
        "\\18446744073709551616",
        // BTF names and members (vfs_read(file, buf, count, pos);
        // sched_switch(preempt, prev, next, prev_state))
        "file",
        "count",
        "buf",
        "pos",
        "nosuch",
        "prev",
        "next",
        "file->f_mode",
        "file->f_path.dentry",
        "file->f_inode->i_ino",
        "file->",
        "file.f_mode",
        "file->1x",
        "count->x",
        "file->f_path.",
        "prev->pid",
        "prev->comm",
        "next->nosuch",
        "$arg1->f_mode",
        "$retval->f_mode",
        "$retval->",
        "$retval.x",
        "$retval1",
        "(struct file *)$arg1->f_mode",
        "this_cpu_read(@jiffies)",
        "this_cpu_ptr(@jiffies)",
        // junk
        "1abc",
        "=x",
        "-",
        "+",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // $argN and $stackN around their bounds (PARAM_MAX_STACK on a 16 KiB
    // stack is 2048).
    for n in [5, 8, 128, 2047, 2048, 2049, 4096, 10000, 4294967296u64] {
        v.push(format!("$arg{n}"));
        v.push(format!("$stack{n}"));
    }
    // Nesting depth of dereferences.
    for depth in 1..=16 {
        v.push(format!("{}%di{}", "+0(".repeat(depth), ")".repeat(depth)));
        v.push(format!(
            "{}@jiffies{}",
            "+0(".repeat(depth),
            ")".repeat(depth)
        ));
    }
    // Offsets at the edges of a long.
    for off in [
        "0x7fffffffffffffff",
        "0x8000000000000000",
        "9223372036854775807",
        "9223372036854775808",
        "0xffffffffffffffd0",
    ] {
        v.push(format!("+{off}(%di)"));
        v.push(format!("-{off}(%di)"));
        v.push(format!("@jiffies+{off}"));
    }
    // Argument body lengths around MAX_ARGSTR_LEN.
    for len in [62, 63, 64, 65, 100] {
        let body = format!("\\\"{}\"", "a".repeat(len - 3));
        assert_eq!(body.len(), len);
        v.push(body);
        let mut d = format!("+{}(%di)", "0".repeat(len - 6));
        d.truncate(len);
        v.push(d);
    }
    v
}

/// Types, each tried on a few fetch bodies.
fn types() -> Vec<String> {
    let mut v: Vec<String> = [
        "u8",
        "u16",
        "u32",
        "u64",
        "s8",
        "s16",
        "s32",
        "s64",
        "x8",
        "x16",
        "x32",
        "x64",
        "string",
        "ustring",
        "symbol",
        "symstr",
        "char",
        "%pd",
        "%pD",
        "u7",
        "x128",
        "s",
        "foo",
        "",
        "b4@2/32",
        "b1@0/8",
        "b8@0/8",
        "b9@0/8",
        "b0@0/8",
        "b4@60/64",
        "b4@61/64",
        "b4@2/24",
        "b4@2",
        "b4/32",
        "bx@2/32",
        "b4@x/32",
        "b4@2/x",
        "b64@0/64",
        "b65@0/64",
        "u8[1]",
        "u8[10]",
        "u8[64]",
        "u8[65]",
        "u8[0]",
        "u8[10",
        "u8[10]a",
        "u8[x]",
        "u8[]",
        "string[2]",
        "ustring[2]",
        "symbol[2]",
        "char[4]",
        "symstr[2]",
        "%pd[2]",
        "x32[0x10]",
        "b4@2/32[2]",
        "u8[-1]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("U8".into());
    v
}

/// Argument names.
fn arg_names() -> Vec<String> {
    let mut v: Vec<String> = [
        "a",
        "_a",
        "a_b",
        "A1",
        "1a",
        "var.1",
        "a-b",
        "a$",
        "common_pid",
        "common_type",
        "__probe_ip",
        "__probe_func",
        "__probe_ret_ip",
        "comm",
        "arg1",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for len in [31, 32, 33, 63, 64] {
        v.push("n".repeat(len));
    }
    v
}

/// The head and target productions of kprobes, kretprobes, fprobes,
/// tracepoint probes, uprobes, eprobes and deletions.
fn heads_and_targets(out: &mut Vec<Entry>) {
    let o = "heads";
    let names = |kind: &str| -> Vec<String> {
        let mut v: Vec<String> = [
            "",
            ":",
            ":ev",
            ":kpo/ev",
            ":kpo/",
            ":/ev",
            ":1ev",
            ":ev-1",
            ":kpo.ev",
            ":kpo/ev/x",
            ":kpo/ev.x",
            ":k-po/ev",
            ":_k/_e",
            ":kpo//ev",
            ":kpo/1ev",
        ]
        .iter()
        .map(|s| format!("{kind}{s}"))
        .collect();
        for len in [63, 64, 65] {
            v.push(format!("{kind}:kpo/{}", "e".repeat(len)));
            v.push(format!("{kind}:{}/ev", "g".repeat(len)));
        }
        v
    };
    let kheads: Vec<String> = [
        "p", "r", "r1", "r100", "r4096", "r4097", "r0", "rx", "p1", "R", "x",
    ]
    .iter()
    .flat_map(|k| names(k))
    .collect();
    let ktargets = [
        "vfs_read",
        "vfs_read+0",
        "vfs_read+4",
        "vfs_read+0x4",
        "vfs_read%return",
        "vfs_read+0%return",
        "vfs_read+4%return",
        "vfs_read-4",
        "vfs_read+0xffffffffffffffd0",
        "vfs_read+18446744073709551616",
        "vfs_read+x",
        "vfs_read%hoge",
        "vfs_read%",
        "hoge-fuga",
        "vfs_read+1000-1000",
        "1vfs_read",
        "0xzz",
        "do_sys_openat2",
        "do_sys_openat2+0",
        "vfs_read:x",
        "vfs_read/x",
    ];
    for h in &kheads {
        for t in &ktargets[..if h.len() <= 6 { ktargets.len() } else { 3 }] {
            push(out, o, format!("{h} {t}"));
        }
    }
    // The head alone, and extra separators.
    for h in ["p", "r", "p:kpo/ev", "f", "t", "e", "-", "-:", "p:kpo/ev "] {
        push(out, o, h);
    }
    // fprobes.
    for h in names("f").into_iter().chain(
        ["f1", "f100", "f4096", "f4097", "f0"]
            .iter()
            .map(|k| format!("{k}:kpo/ev")),
    ) {
        for t in [
            "vfs_read",
            "vfs_read%return",
            "vfs_read+4",
            "vfs_read%hoge",
            "vfs_read%",
            "vfs_*",
            "vfs_read:x",
            "do_sys_openat2",
            "1x",
            "kmem/kfree",
        ] {
            push(out, o, format!("{h} {t}"));
        }
    }
    // Tracepoint probes.
    for h in names("t").into_iter().chain(["t1:kpo/ev".to_string()]) {
        for t in [
            "sched_switch",
            "sched_switch%return",
            "sched/sched_switch",
            "kmem/kfree",
            "kfree",
            "nosuch_tracepoint",
            "sched_*",
            "sched_switch+4",
        ] {
            push(out, o, format!("{h} {t}"));
        }
    }
    // Uprobes.
    for h in ["p", "r", "p:kpo/u", "r:kpo/u", "r10:kpo/u", "p:kpo/u"] {
        for t in [
            "0x1000",
            "0x1000%return",
            "0x1000(0x20)",
            "0x1000(0x20)%return",
            "0x1000%return(0x20)",
            "0x1000%ret",
            "0x1000%return(x)",
            "0x1000(0x20",
            "0x1000(x)",
            "0x1000()",
            "4096",
            "-1",
            "0xzz",
            "",
            "main",
            "0x1000+4",
        ] {
            push(out, o, format!("{h} {UPROBE_BIN}:{t}"));
        }
        push(out, o, format!("{h} /nonexistent/file:0x10"));
        push(out, o, format!("{h} {UPROBE_BIN}"));
    }
    // Event probes (5.15+).
    for h in ["e", "e:kpo/ev", "e:ev", "e:kpo/", "e1:kpo/ev", "e:kpo.ev"] {
        for t in [
            "sched.sched_switch",
            "sched/sched_switch",
            "sched.nosuch",
            "sched_switch",
            "sched.sched_switch prev=$prev_pid",
            "sched.sched_switch prev_pid",
            "sched.sched_switch comm=$prev_comm:string",
            "sched.sched_switch x=$nosuch",
            "sched.sched_switch x=%di",
            "sched.sched_switch x=+0($prev_pid)",
        ] {
            push(out, o, format!("{h} {t}"));
        }
    }
}

fn args_corpus(out: &mut Vec<Entry>) {
    let heads = arg_heads();
    for body in fetch_bodies() {
        for h in &heads {
            push(out, "args", format!("{h} {body}"));
        }
    }
    let bases = [
        "%di", "+0(%di)", "+u0(%di)", "$comm", "\\1", "\\\"s\"", "$stack0", "$retval", "@jiffies",
        "file",
    ];
    for t in types() {
        for b in bases {
            let head = if b == "$retval" || t.contains('[') && b == "%di" {
                "r:kpo/a vfs_read"
            } else {
                "p:kpo/a vfs_read"
            };
            push(out, "types", format!("{head} {b}:{t}"));
        }
        push(out, "types", format!("f:kpo/a vfs_read file:{t}"));
        push(
            out,
            "types",
            format!(
                "p:kpo/a vfs_read {}%di{}:{t}",
                "+0(".repeat(13),
                ")".repeat(13)
            ),
        );
        push(
            out,
            "types",
            format!(
                "p:kpo/a vfs_read {}%di{}:{t}",
                "+0(".repeat(14),
                ")".repeat(14)
            ),
        );
        push(
            out,
            "types",
            format!("p:kpo/a {UPROBE_BIN}:0x1000 +0(%di):{t}"),
        );
    }
    for n in arg_names() {
        for b in ["%di", "$arg1", "+0(%di):u8"] {
            push(out, "names", format!("p:kpo/a vfs_read {n}={b}"));
        }
        push(out, "names", format!("f:kpo/a vfs_read {n}=$arg1"));
    }
    // Return values that are pointers, and probes past the entry.
    for d in [
        "r:kpo/a filp_open $retval->f_mode",
        "r:kpo/a filp_open $retval->f_path.dentry",
        "r:kpo/a filp_open $retval->nosuch",
        "f:kpo/a filp_open%return $retval->f_mode",
        "f:kpo/a filp_open%return $retval->f_inode->i_ino",
        "f:kpo/a filp_open%return $retval->",
        "p:kpo/a filp_open $retval->f_mode",
        "r:kpo/a vfs_read+8",
        "p:kpo/a vfs_read+8 $arg1",
        "p:kpo/a vfs_read+8 file",
        "p:kpo/a do_sys_openat2+5 $arg1",
    ] {
        push(out, "names", d);
    }
    for len in [61, 62, 63, 64] {
        let s = format!("\\\"{}\"", "a".repeat(len - 3));
        push(out, "limits", format!("p:kpo/a vfs_read n={s}"));
        push(out, "limits", format!("p:kpo/a vfs_read {s}:string"));
        let d = format!("+{}(%di):u8", "0".repeat(len - 9));
        push(out, "limits", format!("p:kpo/a vfs_read {d}"));
    }
    for extra in [
        "a=%di a=%si",
        "a=%di A=%si",
        "$arg1 arg1=%si",
        "%di arg1=%si",
        "arg2=%di %si",
        "file count",
        "file file",
        "$arg* $arg*",
        "$arg* x=%di",
        "x=$arg*",
        "$arg*:u8",
        "a=%di  b=%si",
    ] {
        push(out, "names", format!("p:kpo/a vfs_read {extra}"));
        push(out, "names", format!("f:kpo/a vfs_read {extra}"));
    }
    // Argument counts around MAX_TRACE_ARGS.
    for n in [127, 128, 129] {
        let args: Vec<String> = (0..n).map(|i| format!("a{i}=%di")).collect();
        push(
            out,
            "limits",
            format!("p:kpo/a vfs_read {}", args.join(" ")),
        );
        let args: Vec<String> = (0..n).map(|i| format!("a{i}=$arg1")).collect();
        push(
            out,
            "limits",
            format!("f:kpo/a vfs_read {}", args.join(" ")),
        );
    }
}

/// Deletions: each preceded (by the runner) by `p:kpo_del/ev vfs_read`.
fn deletions(out: &mut Vec<Entry>) {
    for d in [
        "-:kpo_del/ev",
        "-:ev",
        "-:kpo_del/ev vfs_read",
        "-:kpo_del/ev vfs_read+0",
        "-:kpo_del/",
        "-:/ev",
        "-:kpo_del/1ev",
        "-:kpo_del/ev x y",
        "-:kpo_del.ev",
    ] {
        push(out, "delete", d);
    }
}

/// The `-e '...'` definitions of the README, docs and tests, in the
/// kernel's syntax: kprobe-perf's own forms (the short form `p:SYM`,
/// globs, `PATH:SYMBOL`, `SYM@0xADDR`, prototypes) are sent as their
/// canonical form when the kernel has one, and left out otherwise.
fn documented(out: &mut Vec<Entry>) -> usize {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "tests/tests", "cli/src", "engine/src"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "md" || x == "rs") {
                    files.push(p);
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for (i, _) in text.match_indices("-e '") {
            let rest = &text[i + 4..];
            if let Some(end) = rest.find('\'') {
                let d = &rest[..end];
                if d.starts_with(['p', 'r', 'f', 't']) && !d.contains(['{', '\n']) {
                    seen.insert(d.to_string());
                }
            }
        }
    }
    let mut left_out = 0;
    for d in seen {
        match kernel_form(&d) {
            Some(k) => push(out, "docs", k),
            None => left_out += 1,
        }
    }
    left_out
}

/// `def` in the kernel's syntax, or `None` for kprobe-perf's own forms
/// that have none (globs on p:/r:, `PATH:SYMBOL`, `SYM@0xADDR`,
/// prototypes, paths the VM lacks, perf's and bpftrace's event names,
/// and `MOD:SYM` where MOD is not a loaded module: a pending module's
/// probe, whose `$argN` kprobe-perf writes as registers, or a library's
/// short name, which is a uprobe).
fn kernel_form(def: &str) -> Option<String> {
    // perf's and bpftrace's names (`probe_prog:walk`, `fprobes:F__exit`),
    // which the CLI turns into probes before the grammar sees them: the
    // kernel's head is one letter, with maxactive after `r`.
    let head = def.split([':', ' ']).next().unwrap_or("");
    let mut chars = head.chars();
    if !(chars.next().is_some_and(|c| "prfte".contains(c)) && chars.all(|c| c.is_ascii_digit())) {
        return None;
    }
    let spec = ProbeSpec::parse(def, Arch::X86_64).ok()?;
    let own = match &spec.target {
        Target::Symbol {
            name,
            instance,
            module,
            ..
        } => {
            instance.is_some()
                || name.contains(['*', '?', '['])
                || module.as_deref().is_some_and(|m| !module_loaded(m))
        }
        Target::User { path, location } => {
            matches!(location, UserLocation::Symbol { .. }) || !std::path::Path::new(path).exists()
        }
        _ => false,
    };
    if own || def.contains('(') && !def.contains("+0(") && !def.contains("+8(") {
        return None;
    }
    Some(spec.qualified().to_string())
}

/// Whether /proc/modules lists `module` (a loaded kernel module).
fn module_loaded(module: &str) -> bool {
    std::fs::read_to_string("/proc/modules").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').next() == Some(module.replace('-', "_").as_str()))
    })
}

/// The whole corpus, and how many documented definitions were left out.
fn corpus() -> (Vec<Entry>, usize) {
    let mut out = Vec::new();
    heads_and_targets(&mut out);
    args_corpus(&mut out);
    deletions(&mut out);
    let left_out = documented(&mut out);
    let mut seen = std::collections::HashSet::new();
    out.retain(|e| seen.insert(e.def.clone()));
    (out, left_out)
}

/// What `kprobe_perf_spec` says of `def` on a kernel with `features`.
fn parser_verdict(def: &str, features: &KernelFeatures) -> Verdict {
    match Definition::parse(def, Arch::X86_64) {
        Ok(d) => match features.lacking_definition(&d) {
            None => Verdict::Accepted,
            Some(l) => Verdict::Refused(None, format!("lacks {} ({})", l.what, l.needs)),
        },
        Err(e) => Verdict::Refused(Some(e.span.start), e.message),
    }
}

/// kprobe-perf's own forms, which the kernel does not have and the
/// engine turns into the kernel's before defining anything: a uprobe's
/// `PATH:SYMBOL` and `$argN` (resolved from the binary and the ABI),
/// globs and `SYM@0xADDR` on p:/r: (expanded from kallsyms), and BTF
/// names on an entry kprobe where the kernel has no BTF arguments.
fn extension(def: &str, features: &KernelFeatures) -> Option<&'static str> {
    let Ok(Definition::Probe(spec)) = Definition::parse(def, Arch::X86_64) else {
        return None;
    };
    match &spec.target {
        Target::User {
            location: UserLocation::Symbol { .. },
            ..
        } => return Some("uprobe PATH:SYMBOL"),
        Target::User { .. }
            if spec
                .args
                .iter()
                .any(|a| matches!(a.fetch.base, kprobe_perf_spec::FetchBase::Arg(_))) =>
        {
            return Some("$argN in a uprobe")
        }
        Target::Symbol {
            instance: Some(_), ..
        } => return Some("SYM@0xADDR"),
        Target::Symbol { name, .. } if name.contains(['*', '?', '[']) => {
            return Some("a glob on p:/r:")
        }
        // Without the kernel's BTF arguments, the planner turns names on
        // an entry probe into $argN itself.
        Target::Symbol { .. }
            if !features.btf_args
                && !spec.is_return()
                && spec
                    .args
                    .iter()
                    .any(|a| matches!(a.fetch.base, kprobe_perf_spec::FetchBase::Name(_))) =>
        {
            return Some("a BTF name on an entry kprobe")
        }
        _ => {}
    }
    None
}

/// Refusals that need what a pure parser cannot know (symbols, BTF, the
/// attached event's fields, existing events, the instruction stream),
/// made while the kernel looks things up or registers the probe.
fn semantic(def: &str, k: &Verdict) -> bool {
    const LOOKUPS: &[&str] = &[
        "This variable is not found at this probe point",
        "This field is not found.",
        "Non pointer structure/union argument is not supported.",
        "This is not a pointer to union/structure.",
        "Failed to find the given file",
        "Failed to register probe event",
        "Probe point is not an instruction boundary",
        "Retprobe address must be an function entry",
        "Attached event does not exist",
        "Tracepoint is not found",
        // Whether the probe is at the function's entry (after an ENDBR,
        // at the ftrace site) is the kernel's knowledge.
        "$arg* can be used only on function entry or exit",
        "Attached event does not have this field",
    ];
    let Verdict::Refused(_, m) = k else {
        return false;
    };
    LOOKUPS.iter().any(|l| m.starts_with(l))
        || def.starts_with('e') && m.starts_with("Invalid $-variable specified")
        || m.contains("os error 2), nothing in error_log")
        // At an offset of a kernel function: whether it is the entry
        // (6.1 takes $argN at offset 0 only, 6.12 asks kprobe_on_func_entry).
        || (m.starts_with("BTF is not available or not supported")
            || m.starts_with("Invalid $-variable specified") && def.contains("$arg"))
            && def.starts_with(['p', 'r'])
            && def
                .split_whitespace()
                .nth(1)
                .is_some_and(|t| t.contains('+') && !t.starts_with('/'))
        || m.starts_with("Invalid probed address or symbol") && m.contains("(os error 2)")
        || m.contains("os error 84)")
}

/// True when `def` uses a form this kernel's README lacks: the kernel
/// refuses it as an unknown word, at its start, where kprobe-perf (which
/// knows the form) points inside it. The verdicts still agree (the
/// planner refuses the form on this kernel, naming it).
fn lacks_form(def: &str, f: &KernelFeatures) -> bool {
    let args = def.split_whitespace().skip(2);
    let bodies: Vec<&str> = args
        .map(|a| a.split_once('=').map_or(a, |(_, b)| b))
        .collect();
    let named = |b: &&str| {
        let inner = b.trim_start_matches(|c: char| "+-u0123456789x(".contains(c));
        inner.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            || inner.starts_with("$arg*")
            || inner.starts_with("$retval-")
            || inner.starts_with("$retval.")
    };
    let typed = |t: &str| bodies.iter().any(|b| b.contains(&format!(":{t}")));
    !f.btf_args && bodies.iter().any(named)
        || !f.dentry && (typed("%pd") || typed("%pD"))
        || !f.char_type && typed("char")
        || !f.symstr && typed("symstr")
}

/// The verdict differences docs/grammar.md lists, each explained by the
/// kernel version (none of them shows in the README): why, or `None`.
fn documented_difference(kernel: &str, def: &str, kernel_accepts: bool) -> Option<&'static str> {
    let uprobe = def.contains(" /bin/true:");
    let newer = kernel != "6.1";
    let sid = !matches!(kernel, "6.1" | "6.12");
    if uprobe && kernel_accepts && def.ends_with("$stack4294967296") {
        return Some("the kernel keeps the low 32 bits of $stackN");
    }
    if uprobe && kernel_accepts && newer && def.starts_with("r:") && def.contains(" $retval") {
        return Some("6.6+ reads anything after $retval on a uprobe as $retval");
    }
    if kernel_accepts && !newer && def.split_whitespace().count() > 130 {
        return Some("6.1 takes 129 arguments and drops the 129th");
    }
    if kernel_accepts && sid && def.starts_with(['f', 't']) && def.contains(" @") {
        return Some("6.17+ checks fprobe and tracepoint @SYM arguments at enable time");
    }
    None
}

fn write_to(file: &str, text: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .append(true)
        .open(format!("{TRACING}/{file}"))?;
    f.write_all(text.as_bytes())
}

/// The kernel's last error: its message and the caret's column in the
/// command it logged.
fn last_error() -> Option<(Option<usize>, String)> {
    let log = std::fs::read_to_string(format!("{TRACING}/error_log")).ok()?;
    let lines: Vec<&str> = log.lines().collect();
    let cmd = lines.iter().rposition(|l| l.contains("Command: "))?;
    let start = lines[cmd].find("Command: ")? + "Command: ".len();
    let caret = lines
        .get(cmd + 1)
        .and_then(|l| l.find('^'))
        .map(|c| c.saturating_sub(start));
    let msg = lines[..cmd]
        .iter()
        .rev()
        .find_map(|l| l.split_once("error: ").map(|(_, m)| m.trim().to_string()))
        .unwrap_or_default();
    Some((caret, msg))
}

/// The events defined now (`GRP/EVENT`), from dynamic_events.
fn defined() -> Vec<String> {
    std::fs::read_to_string(format!("{TRACING}/dynamic_events"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.split_once(':'))
        .map(|(_, n)| n.to_string())
        .collect()
}

/// Writes `def` and reads the kernel's verdict; removes what it defined.
fn kernel_verdict(def: &str, baseline: &[String]) -> Verdict {
    let _ = std::fs::write(format!("{TRACING}/error_log"), "");
    if def.starts_with("-:") {
        let _ = write_to("dynamic_events", "p:kpo_del/ev vfs_read");
    }
    let user = def
        .split_whitespace()
        .nth(1)
        .is_some_and(|t| t.starts_with('/'));
    let file = if user {
        "uprobe_events"
    } else {
        "dynamic_events"
    };
    let result = write_to(file, def);
    for ev in defined() {
        if !baseline.contains(&ev) {
            let _ = write_to("dynamic_events", &format!("-:{ev}"));
        }
    }
    match result {
        Ok(()) => Verdict::Accepted,
        Err(e) => match last_error() {
            Some((caret, msg)) => Verdict::Refused(caret, format!("{msg} ({e})")),
            None => Verdict::Refused(None, format!("({e}, nothing in error_log)")),
        },
    }
}

#[test]
fn grammar_oracle() {
    let Some(kernel) = vm_kernel() else {
        return skip(
            "grammar_oracle",
            "the kernel is the oracle: run it in the VM (cargo xtask vm)",
        );
    };
    let readme = std::fs::read_to_string(format!("{TRACING}/README")).expect("tracefs README");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let features = KernelFeatures::from_readme(&readme).with_release(release.trim());
    println!("kernel {kernel}: {features:?}");
    let (corpus, left_out) = corpus();
    let baseline = defined();
    let (mut verdict_ok, mut refused, mut caret_ok, mut by_readme) =
        (0usize, 0usize, 0usize, 0usize);
    let mut verdict_bad = Vec::new();
    let mut caret_bad = Vec::new();
    let mut by_origin = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    let (mut semantic_n, mut extension_n, mut no_caret) = (0usize, 0usize, 0usize);
    let mut set_aside = Vec::new();
    for e in &corpus {
        let k = kernel_verdict(&e.def, &baseline);
        let p = parser_verdict(&e.def, &features);
        let o = by_origin.entry(e.origin).or_default();
        o.0 += 1;
        if let Some(what) = extension(&e.def, &features) {
            extension_n += 1;
            set_aside.push(format!("EXTENSION ({what}) {}: kernel {k:?}", e.def));
            continue;
        }
        if semantic(&e.def, &k) {
            semantic_n += 1;
            set_aside.push(format!("SEMANTIC {}: kernel {k:?}; parser {p:?}", e.def));
            continue;
        }
        if k.accepted() != p.accepted() {
            let known = documented_difference(&kernel, &e.def, k.accepted());
            verdict_bad.push((
                known,
                format!(
                    "{} [{}]{}\n    kernel: {k:?}\n    parser: {p:?}",
                    e.def,
                    e.origin,
                    known
                        .map(|w| format!(" (docs/grammar.md: {w})"))
                        .unwrap_or_default()
                ),
            ));
            continue;
        }
        o.1 += 1;
        verdict_ok += 1;
        if let (Verdict::Refused(kc, km), Verdict::Refused(pc, pm)) = (&k, &p) {
            // Refusals decided by the README carry no caret on our side
            // (the planner makes them, naming the feature).
            if pc.is_none() {
                by_readme += 1;
                continue;
            }
            // Nor do some of the kernel's (nothing in error_log).
            if kc.is_none() || kc != pc && lacks_form(&e.def, &features) {
                no_caret += 1;
                continue;
            }
            refused += 1;
            if kc == pc {
                caret_ok += 1;
            } else {
                caret_bad.push(format!(
                    "{}\n    kernel {:?}: {km}\n    parser {:?}: {pm}",
                    e.def, kc, pc
                ));
            }
        }
    }
    for d in &set_aside {
        println!("{d}");
    }
    for (_, d) in &verdict_bad {
        println!("VERDICT {d}");
    }
    for d in &caret_bad {
        println!("CARET {d}");
    }
    for (o, (n, ok)) in &by_origin {
        println!("origin {o}: {ok}/{n} verdicts agree");
    }
    let n = corpus.len() - semantic_n - extension_n;
    println!(
        "kernel {kernel}: set aside {semantic_n} semantic refusals (symbols, BTF, fields, registration) \
         and {extension_n} uses of kprobe-perf's own forms; {no_caret} kernel refusals without a caret or of a form its README lacks"
    );
    println!(
        "kernel {kernel}: corpus {} definitions, {n} compared ({left_out} documented ones in kprobe-perf's own syntax left out); \
         verdicts agree {verdict_ok}/{n} ({:.1}%); carets agree {caret_ok}/{refused} refused ({:.1}%; \
         {by_readme} more refused from the README, without a caret)",
        corpus.len(),
        100.0 * verdict_ok as f64 / n as f64,
        100.0 * caret_ok as f64 / refused.max(1) as f64
    );
    assert!(
        corpus.len() >= 2000,
        "the corpus has {} definitions, fewer than 2000",
        corpus.len()
    );
    let unexplained = verdict_bad.iter().filter(|(k, _)| k.is_none()).count();
    assert_eq!(
        unexplained, 0,
        "{unexplained} verdicts differ that docs/grammar.md does not explain"
    );
    assert!(
        caret_ok * 100 >= refused * 98,
        "carets agree on {caret_ok} of {refused} refusals, under 98%"
    );
}

/// With `KPROBE_PERF_FUZZ_CORPUS=DIR` (`cargo xtask fuzz seed`), writes
/// every corpus definition into DIR, one file each, as seeds of the
/// parser's fuzz target; otherwise does nothing.
#[test]
fn write_the_corpus_for_the_fuzzer() {
    let Some(dir) = std::env::var_os("KPROBE_PERF_FUZZ_CORPUS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (corpus, _) = corpus();
    for (i, e) in corpus.iter().enumerate() {
        std::fs::write(dir.join(format!("oracle-{i:05}")), &e.def).unwrap();
    }
    println!("{} definitions written to {}", corpus.len(), dir.display());
}
