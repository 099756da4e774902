//! arm64 verdicts and text on fixed instruction words.

use super::*;
use crate::Arch;

const START: u64 = 0xffff_8000_0812_3400;

/// A traced function after boot: `mov x9, x30; nop` (the ftrace site),
/// a pac-ret prologue, an exclusive sequence, a call and an autiasp.
const FUNCTION: [u32; 14] = [
    0xaa1e_03e9, // +0  mov x9, x30 (was the first patchable NOP)
    0xd503_201f, // +4  nop: the ftrace call site
    0xd503_233f, // +8  paciasp
    0xa9bf_7bfd, // +12 stp x29, x30, [sp, #-0x10]!
    0x9100_03fd, // +16 mov x29, sp
    0xd53b_4220, // +20 mrs x0, daif
    0xc85f_7c01, // +24 ldxr x1, [x0]
    0x9100_0421, // +28 add x1, x1, #0x1
    0xc802_7c01, // +32 stxr w2, x1, [x0]
    0x35ff_ffa2, // +36 cbnz w2, +24
    0x9400_0040, // +40 bl +0x100
    0xa8c1_7bfd, // +44 ldp x29, x30, [sp], #0x10
    0xd503_23bf, // +48 autiasp
    0xd65f_03c0, // +52 ret
];

fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn sentence(words: &[u32], offset: u64, kind: ProbeSite) -> String {
    let b = bytes(words);
    let text = FunctionText {
        start: START,
        bytes: &b,
    };
    verdict(Arch::Aarch64, &text, offset, kind)
        .describe("f")
        .to_string()
}

fn layout_errnos(words: &[u32]) -> Vec<(u64, Option<&'static str>)> {
    let b = bytes(words);
    let text = FunctionText {
        start: START,
        bytes: &b,
    };
    let layout = FunctionLayout::new(Arch::Aarch64, &text);
    (0..words.len() as u64 * 4)
        .step_by(4)
        .map(|o| {
            (
                o,
                layout.verdict(o, ProbeSite::Entry).errno().map(Errno::name),
            )
        })
        .collect()
}

#[test]
fn every_word_of_a_traced_function() {
    let got = layout_errnos(&FUNCTION);
    let refused: Vec<u64> = got
        .iter()
        .filter(|(_, e)| e.is_some())
        .map(|(o, _)| *o)
        .collect();
    assert_eq!(refused, vec![4, 20, 24, 28, 32, 48]);
    assert!(got.iter().all(|(_, e)| e.is_none() || *e == Some("EINVAL")));
}

#[test]
fn the_ftrace_site_is_found_and_refused() {
    let b = bytes(&FUNCTION);
    let text = FunctionText {
        start: START,
        bytes: &b,
    };
    let layout = FunctionLayout::new(Arch::Aarch64, &text);
    assert_eq!(layout.ftrace_site(), Some(4));
    assert_eq!(layout.entry(), 0);
    assert_eq!(
        sentence(&FUNCTION, 4, ProbeSite::Entry),
        "f+4 is the ftrace call site (nop), where arm64 kernels put no kprobe (they have no kprobes-on-ftrace); +0 fires at the same moment; valid nearby: +0, +8"
    );
    // Before boot (vmlinux bytes) both entry words are NOPs; with BTI the
    // pair follows `bti c`.
    let mut raw = FUNCTION;
    raw[0] = arm64::NOP;
    let b = bytes(&raw);
    let t = FunctionText {
        start: START,
        bytes: &b,
    };
    assert_eq!(
        FunctionLayout::new(Arch::Aarch64, &t).ftrace_site(),
        Some(4)
    );
    let bti = [0xd503_245f, arm64::NOP, 0x9400_0010, 0xd65f_03c0];
    let b = bytes(&bti);
    let t = FunctionText {
        start: START,
        bytes: &b,
    };
    assert_eq!(
        FunctionLayout::new(Arch::Aarch64, &t).ftrace_site(),
        Some(8)
    );
    // A notrace function has no such pair.
    let b = bytes(&FUNCTION[2..]);
    let t = FunctionText {
        start: START,
        bytes: &b,
    };
    assert_eq!(FunctionLayout::new(Arch::Aarch64, &t).ftrace_site(), None);
}

#[test]
fn refusals_name_the_instruction_and_the_rule() {
    assert_eq!(
        sentence(&FUNCTION, 20, ProbeSite::Entry),
        "f+20 is mrs x0, daif, which arm64 kprobes refuse: a read of DAIF (the interrupt mask), which single-stepping changes; valid nearby: +16, +36"
    );
    assert_eq!(
        sentence(&FUNCTION, 24, ProbeSite::Entry),
        "f+24 is ldxr x1, [x0], which arm64 kprobes refuse: an exclusive load/store, whose sequence a single-step exception would break; valid nearby: +16, +36"
    );
    assert_eq!(
        sentence(&FUNCTION, 28, ProbeSite::Entry),
        "f+28 (add x1, x1, #0x1) is inside the exclusive sequence opened by ldxr x1, [x0] at +24, which arm64 kprobes refuse: a single-step there would make the store-exclusive fail every time; valid nearby: +16, +36"
    );
    assert_eq!(
        sentence(&FUNCTION, 48, ProbeSite::Entry),
        "f+48 is autiasp, which arm64 kprobes refuse: a hint outside the list arm64 kprobes single-step (nop, bti, pac*, xpaclri); valid nearby: +44, +52"
    );
    assert_eq!(
        sentence(&FUNCTION, 6, ProbeSite::Entry),
        "f+6 is not 4-byte aligned (arm64 instructions are 4 bytes); valid nearby: +0, +8"
    );
    assert_eq!(
        sentence(&FUNCTION, 8, ProbeSite::Return),
        "f+8 is not the function entry; a return probe goes at +0"
    );
    assert!(sentence(&FUNCTION, 0, ProbeSite::Return).ends_with("can be probed"));
    assert_eq!(
        sentence(&FUNCTION, 56, ProbeSite::Entry),
        "f+56 is past the end of the function (56 bytes)"
    );
}

#[test]
fn simulated_and_stepped_instructions_are_accepted() {
    for w in [
        0x5400_0040u32, // b.eq
        0xb400_0040,    // cbz x0
        0x3600_0040,    // tbz w0, #0
        0x9000_0000,    // adrp x0
        0x1000_0000,    // adr x0
        0x1400_0010,    // b
        0xd61f_0200,    // br x16
        0xd63f_0200,    // blr x16
        0x5800_0040,    // ldr x0, literal
        0x9800_0040,    // ldrsw x0, literal
        0xd538_4100,    // mrs x0, sp_el0 (current)
        0xd538_d083,    // mrs x3, tpidr_el1
        0xd503_245f,    // bti c
        0xd503_20ff,    // xpaclri
        0xd503_3fbf,    // dmb sy
        0xf940_0000,    // ldr x0, [x0]
    ] {
        assert!(arm64::classify(w).accepted(), "{w:#010x}");
    }
}

#[test]
fn rejected_instructions() {
    use Arm64Refusal as R;
    for (w, why) in [
        (0xd420_0020u32, R::Exception),        // brk #1 (BUG)
        (0xd400_0001, R::Exception),           // svc #0
        (0xd503_42df, R::SystemRegisterWrite), // msr daifset, #2
        (0xd518_2020, R::SystemRegisterWrite), // msr ttbr0_el1 ... (msr reg)
        (0xd53b_4220, R::SystemRegisterRead),  // mrs x0, daif
        (0xd503_229f, R::Hint),                // csdb
        (0xd503_203f, R::Hint),                // yield
        (0xd69f_03e0, R::ExceptionReturn),     // eret
        (0xd65f_0bff, R::AuthenticatedBranch), // retaa
        (0xd71f_0a00, R::AuthenticatedBranch), // braa x16, x0
        (0xd800_0040, R::LiteralPrefetch),     // prfm literal
        (0x885f_7c01, R::Exclusive),           // ldxr w1, [x0]
        (0x4820_7c82, R::Exclusive),           // casp x0, x1, x2, x3, [x4]
        (0xb840_0801, R::UserAccess),          // ldtr w1, [x0]
        (0xf800_0801, R::UserAccess),          // sttr x1, [x0]
    ] {
        assert_eq!(arm64::classify(w), arm64::Class::Rejected(why), "{w:#010x}");
    }
}

#[test]
fn only_exclusive_loads_open_an_atomic_window() {
    // ldar x1, [x0]; add; casa w4, w2, [x0]; add: load-acquire and cas
    // are not exclusives (Debian 6.1 accepts all four).
    let ws = [0xc8df_fc01, 0x9100_0421, 0x88e4_7c02, 0x9100_0421];
    assert!(layout_errnos(&ws).iter().all(|(_, e)| e.is_none()));
    // ldaxr x1, [x0]; add; stlxr w2, x1, [x0]; add: the add after the
    // load is refused, the one after the store is not.
    let ws = [0xc85f_fc01, 0x9100_0421, 0xc802_fc01, 0x9100_0421];
    assert_eq!(
        layout_errnos(&ws),
        vec![
            (0, Some("EINVAL")),
            (4, Some("EINVAL")),
            (8, Some("EINVAL")),
            (12, None)
        ]
    );
    // The window is 16 instructions: the 17th after the load is free.
    let mut long = vec![0x885f_7c01u32];
    long.extend(std::iter::repeat_n(0x9100_0421, 17));
    let errnos = layout_errnos(&long);
    assert_eq!(errnos[16], (64, Some("EINVAL")));
    assert_eq!(errnos[17], (68, None));
}

#[test]
fn listing_uses_arm64_syntax_with_absolute_targets() {
    let b = bytes(&FUNCTION);
    let text = FunctionText {
        start: START,
        bytes: &b,
    };
    let lines = FunctionLayout::new(Arch::Aarch64, &text).instructions();
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        texts,
        vec![
            "mov x9, x30",
            "nop",
            "paciasp",
            "stp x29, x30, [sp, #-0x10]!",
            "mov x29, sp",
            "mrs x0, daif",
            "ldxr x1, [x0]",
            "add x1, x1, #0x1",
            "stxr w2, x1, [x0]",
            "cbnz w2, 0xffff800008123418",
            "bl 0xffff800008123528",
            "ldp x29, x30, [sp], #0x10",
            "autiasp",
            "ret",
        ]
    );
    assert_eq!(
        arm64::text(0x9000_0000 | (1 << 5), START + 8), // immhi 1: 4 pages on
        "adrp x0, 0xffff800008127000"
    );
    assert_eq!(
        arm64::text(0x9000_0000, START + 8),
        "adrp x0, 0xffff800008123000"
    );
    assert_eq!(arm64::text(0xffff_ffff, START), ".inst 0xffffffff");
}
