use super::*;

/// `do_sys_open` of a 4.4 kernel, first 40 bytes, as `crash> dis` listed it
/// in the seeds (ftrace NOP, then the prologue).
const DO_SYS_OPEN_START: u64 = 0xffff_ffff_8120_5c20;
const DO_SYS_OPEN: &[u8] = &[
    0x0f, 0x1f, 0x44, 0x00, 0x00, // +0   nopl 0x0(%rax,%rax,1)
    0x41, 0x57, // +5   push %r15
    0x41, 0x56, // +7   push %r14
    0x41, 0x55, // +9   push %r13
    0x41, 0x54, // +11  push %r12
    0x55, // +13  push %rbp
    0x89, 0xfd, // +14  mov %edi,%ebp
    0x53, // +16  push %rbx
    0x89, 0xd3, // +17  mov %edx,%ebx
    0x48, 0x83, 0xec, 0x18, // +19  sub $0x18,%rsp
    0xf7, 0xc2, 0x40, 0x00, 0x40, 0x00, // +23  test $0x400040,%edx
    0x0f, 0x84, 0x9b, 0x01, 0x00, 0x00, // +29  je 0xffffffff81205dde
    0x66, 0x81, 0xe1, 0xff, 0x0f, // +35  and $0xfff,%cx
];

/// A module function from the seeds (`dis -l 0xffffffffa07aee50 15`).
const MODULE_FN_START: u64 = 0xffff_ffff_a07a_ee50;
const MODULE_FN: &[u8] = &[
    0x0f, 0x1f, 0x44, 0x00, 0x00, // +0   nopl 0x0(%rax,%rax,1)
    0x55, // +5   push %rbp
    0x48, 0x89, 0xe5, // +6   mov %rsp,%rbp
    0x41, 0x57, // +9   push %r15
    0x41, 0x56, // +11  push %r14
    0x41, 0x55, // +13  push %r13
    0x41, 0x54, // +15  push %r12
    0x41, 0x89, 0xd4, // +17  mov %edx,%r12d
    0x53, // +20  push %rbx
    0x48, 0x83, 0xec, 0x20, // +21  sub $0x20,%rsp
    0x48, 0x8b, 0x1d, 0x40, 0x67, 0x00, 0x00, // +25  mov 0x6740(%rip),%rbx
    0x65, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00, // +32  mov %gs:0x28,%rax
    0x48, 0x89, 0x45, 0xd0, // +41  mov %rax,-0x30(%rbp)
    0x31, 0xc0, // +45  xor %eax,%eax
    0x85, 0xd2, // +47  test %edx,%edx
];

/// An IBT (6.x) function: ENDBR64, ftrace NOP, body, return thunk, padding.
const IBT_FN: &[u8] = &[
    0xf3, 0x0f, 0x1e, 0xfa, // +0   endbr64
    0x0f, 0x1f, 0x44, 0x00, 0x00, // +4   nopl 0x0(%rax,%rax,1)
    0x55, // +9   push %rbp
    0x48, 0x89, 0xe5, // +10  mov %rsp,%rbp
    0x41, 0x54, // +13  push %r12
    0x53, // +15  push %rbx
    0x48, 0x89, 0xfb, // +16  mov %rdi,%rbx
    0xe8, 0x10, 0x20, 0x30, 0x00, // +19  call
    0x5b, // +24  pop %rbx
    0x41, 0x5c, // +25  pop %r12
    0x5d, // +27  pop %rbp
    0xe9, 0x00, 0x10, 0x00, 0x00, // +28  jmp (return thunk)
    0xcc, // +33  int3 (padding)
];

/// A function with a BUG() (`ud2`) on a cold path and int3 padding.
const BUG_FN: &[u8] = &[
    0x0f, 0x1f, 0x44, 0x00, 0x00, // +0   nopl 0x0(%rax,%rax,1)
    0x55, // +5   push %rbp
    0x48, 0x89, 0xe5, // +6   mov %rsp,%rbp
    0x48, 0x85, 0xff, // +9   test %rdi,%rdi
    0x74, 0x04, // +12  je +18
    0x31, 0xc0, // +14  xor %eax,%eax
    0x5d, // +16  pop %rbp
    0xc3, // +17  ret
    0x0f, 0x0b, // +18  ud2
    0xcc, // +20  int3
    0xcc, // +21  int3
];

const START: u64 = 0xffff_ffff_8100_0000;

fn text(bytes: &[u8]) -> FunctionText<'_> {
    FunctionText {
        start: START,
        bytes,
    }
}

fn entry(bytes: &[u8], offset: u64) -> Verdict {
    verdict(Arch::X86_64, &text(bytes), offset, ProbeSite::Entry)
}

fn ret(bytes: &[u8], offset: u64) -> Verdict {
    verdict(Arch::X86_64, &text(bytes), offset, ProbeSite::Return)
}

fn reason(v: &Verdict) -> &RefuseReason {
    match v {
        Verdict::Refuse(r) => &r.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn k8_ftrace_nop_of_older_kernels_is_the_ftrace_site() {
    // do_sys_openat2's first instructions on Debian's 5.10 under QEMU,
    // whose boot picked the K8 NOPs: `66 66 66 66 90`, then push %r13.
    let bytes = [
        0x66, 0x66, 0x66, 0x66, 0x90, 0x41, 0x55, 0x49, 0x89, 0xf5, 0xc3,
    ];
    let t = FunctionText {
        start: 0xffff_ffff_82cd_a7f0,
        bytes: &bytes,
    };
    let layout = FunctionLayout::new(Arch::X86_64, &t);
    assert_eq!(layout.ftrace_site(), Some(0));
    assert_eq!(
        layout.verdict(0, ProbeSite::Entry),
        Verdict::AcceptFtraceSite { offset: 0, at: 0 }
    );
    assert_eq!(
        layout.verdict(2, ProbeSite::Entry).errno(),
        Some(Errno::Eilseq)
    );
    assert_eq!(
        layout.verdict(5, ProbeSite::Entry),
        Verdict::Accept { offset: 5, at: 5 }
    );
}

#[test]
fn ftrace_nop_at_entry() {
    let t = FunctionText {
        start: DO_SYS_OPEN_START,
        bytes: DO_SYS_OPEN,
    };
    let layout = FunctionLayout::new(Arch::X86_64, &t);
    assert!(!layout.has_endbr());
    assert_eq!(layout.entry(), 0);
    assert_eq!(layout.ftrace_site(), Some(0));

    assert_eq!(
        layout.verdict(0, ProbeSite::Entry),
        Verdict::AcceptFtraceSite { offset: 0, at: 0 }
    );
    assert_eq!(
        layout.verdict(5, ProbeSite::Entry),
        Verdict::Accept { offset: 5, at: 5 }
    );
    for off in 1..=4 {
        let v = layout.verdict(off, ProbeSite::Entry);
        assert_eq!(v.errno(), Some(Errno::Eilseq), "+{off}");
        let RefuseReason::InsideFtraceSite { site } = reason(&v) else {
            panic!("+{off}: {v:?}");
        };
        assert_eq!((site.offset(), site.size()), (0, 5));
        assert_eq!(site.bytes(), &[0x0f, 0x1f, 0x44, 0x00, 0x00]);
    }
    assert_eq!(
        layout
            .verdict(3, ProbeSite::Entry)
            .describe("do_sys_openat2")
            .to_string(),
        "do_sys_openat2+3 falls inside the 5-byte ftrace NOP at +0; valid nearby: +0, +5"
    );
    assert_eq!(
        layout.verdict(3, ProbeSite::Entry).to_string(),
        "+3 falls inside the 5-byte ftrace NOP at +0; valid nearby: +0, +5"
    );
    assert_eq!(
        layout
            .verdict(0, ProbeSite::Entry)
            .describe("do_sys_open")
            .to_string(),
        "do_sys_open+0 is the ftrace site and is probed through ftrace"
    );
    assert_eq!(
        layout
            .verdict(16, ProbeSite::Entry)
            .describe("do_sys_open")
            .to_string(),
        "do_sys_open+16 is an instruction boundary and can be probed"
    );
}

#[test]
fn mid_instruction_names_the_instruction() {
    let t = FunctionText {
        start: DO_SYS_OPEN_START,
        bytes: DO_SYS_OPEN,
    };
    let v = verdict(Arch::X86_64, &t, 15, ProbeSite::Entry);
    let RefuseReason::InsideInstruction { containing } = reason(&v) else {
        panic!("{v:?}");
    };
    assert_eq!(containing.offset(), 14);
    assert_eq!(containing.size(), 2);
    assert_eq!(containing.address(), DO_SYS_OPEN_START + 14);
    assert_eq!(
        v.describe("do_sys_open").to_string(),
        "do_sys_open+15 falls inside the instruction at +14 (mov %edi,%ebp, 2 bytes); \
         valid nearby: +14, +16"
    );
    assert_eq!(
        verdict(Arch::X86_64, &t, 33, ProbeSite::Entry)
            .describe("do_sys_open")
            .to_string(),
        "do_sys_open+33 falls inside the instruction at +29 (je 0xffffffff81205dde, 6 bytes); \
         valid nearby: +29, +35"
    );
    assert_eq!(
        nearest_valid(Arch::X86_64, &t, 31),
        Nearby {
            before: Some(29),
            after: Some(35)
        }
    );
}

#[test]
fn every_offset_of_a_prologue() {
    let starts = [0u64, 5, 7, 9, 11, 13, 14, 16, 17, 19, 23, 29, 35];
    let layout = FunctionLayout::new(Arch::X86_64, &text(DO_SYS_OPEN));
    for off in 0..DO_SYS_OPEN.len() as u64 {
        let v = layout.verdict(off, ProbeSite::Entry);
        assert_eq!(v.is_accepted(), starts.contains(&off), "+{off}: {v}");
    }
    assert_eq!(
        layout.verdict(40, ProbeSite::Entry),
        Verdict::OutsideFunction {
            offset: 40,
            size: 40
        }
    );
    assert_eq!(
        layout
            .verdict(40, ProbeSite::Entry)
            .describe("do_sys_open")
            .to_string(),
        "do_sys_open+40 is past the end of the function (40 bytes)"
    );
}

#[test]
fn endbr_moves_entry_to_4() {
    let layout = FunctionLayout::new(Arch::X86_64, &text(IBT_FN));
    assert!(layout.has_endbr());
    assert_eq!(layout.entry(), 4);
    assert_eq!(layout.ftrace_site(), Some(4));

    assert_eq!(
        layout.verdict(0, ProbeSite::Entry),
        Verdict::AcceptFtraceSite { offset: 0, at: 4 }
    );
    assert_eq!(
        layout.verdict(4, ProbeSite::Entry),
        Verdict::AcceptFtraceSite { offset: 4, at: 4 }
    );
    assert_eq!(
        layout.verdict(9, ProbeSite::Entry),
        Verdict::Accept { offset: 9, at: 9 }
    );
    for off in 1..=3 {
        let v = layout.verdict(off, ProbeSite::Entry);
        assert!(
            matches!(reason(&v), RefuseReason::InsideEndbr { .. }),
            "{v:?}"
        );
        assert_eq!(v.errno(), Some(Errno::Eilseq));
    }
    for off in 5..=8 {
        let v = layout.verdict(off, ProbeSite::Entry);
        assert!(
            matches!(reason(&v), RefuseReason::InsideFtraceSite { site } if site.offset() == 4),
            "{v:?}"
        );
    }
    assert_eq!(
        layout
            .verdict(2, ProbeSite::Entry)
            .describe("vfs_read")
            .to_string(),
        "vfs_read+2 falls inside the 4-byte ENDBR64 at +0; valid nearby: +0, +4"
    );
    assert_eq!(
        layout
            .verdict(6, ProbeSite::Entry)
            .describe("vfs_read")
            .to_string(),
        "vfs_read+6 falls inside the 5-byte ftrace NOP at +4; valid nearby: +4, +9"
    );
    assert_eq!(
        layout
            .verdict(0, ProbeSite::Entry)
            .describe("vfs_read")
            .to_string(),
        "vfs_read+0 is moved past ENDBR64 to the ftrace site at +4 and is probed through ftrace"
    );
    // int3 padding after the return thunk.
    let pad = layout.verdict(33, ProbeSite::Entry);
    assert_eq!(
        pad.describe("vfs_read").to_string(),
        "vfs_read+33 is an INT/UD instruction (int3), which kprobes refuse; valid nearby: +28"
    );
}

#[test]
fn endbr_without_ftrace_site() {
    // endbr64; push %rbp; mov %rsp,%rbp; pop %rbp; ret (a notrace function)
    let bytes = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
    let layout = FunctionLayout::new(Arch::X86_64, &text(&bytes));
    assert_eq!(layout.ftrace_site(), None);
    assert_eq!(
        layout.verdict(0, ProbeSite::Entry),
        Verdict::Accept { offset: 0, at: 4 }
    );
    assert_eq!(
        layout
            .verdict(0, ProbeSite::Entry)
            .describe("f")
            .to_string(),
        "f+0 is moved past ENDBR64 to +4 and can be probed"
    );
    assert_eq!(
        layout.verdict(0, ProbeSite::Return),
        Verdict::Accept { offset: 0, at: 4 }
    );
}

#[test]
fn poisoned_endbr_counts_as_endbr() {
    // osp nopl (%rax) written over a sealed ENDBR, then the ftrace NOP.
    let bytes = [
        0x66, 0x0f, 0x1f, 0x00, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55, 0xc3,
    ];
    let layout = FunctionLayout::new(Arch::X86_64, &text(&bytes));
    assert!(layout.has_endbr());
    assert_eq!(
        layout.verdict(0, ProbeSite::Entry),
        Verdict::AcceptFtraceSite { offset: 0, at: 4 }
    );
    assert_eq!(
        layout
            .verdict(1, ProbeSite::Entry)
            .describe("f")
            .to_string(),
        "f+1 falls inside the 4-byte poisoned ENDBR at +0; valid nearby: +0, +4"
    );
}

#[test]
fn return_probes_only_at_entry() {
    assert_eq!(
        ret(DO_SYS_OPEN, 0),
        Verdict::AcceptFtraceSite { offset: 0, at: 0 }
    );
    let v = ret(DO_SYS_OPEN, 5);
    assert_eq!(reason(&v), &RefuseReason::NotFunctionEntry { endbr: false });
    assert_eq!(v.errno(), Some(Errno::Einval));
    assert_eq!(
        v.describe("do_sys_open").to_string(),
        "do_sys_open+5 is not the function entry; a return probe goes at +0"
    );
    // The entry check comes before the boundary check: EINVAL, not EILSEQ.
    assert_eq!(ret(DO_SYS_OPEN, 3).errno(), Some(Errno::Einval));

    assert_eq!(
        ret(IBT_FN, 0),
        Verdict::AcceptFtraceSite { offset: 0, at: 4 }
    );
    assert_eq!(
        ret(IBT_FN, 4),
        Verdict::AcceptFtraceSite { offset: 4, at: 4 }
    );
    assert_eq!(
        ret(IBT_FN, 9).describe("vfs_read").to_string(),
        "vfs_read+9 is not the function entry; a return probe goes at +0 (moved past ENDBR64 to +4)"
    );
    assert_eq!(ret(IBT_FN, 2).errno(), Some(Errno::Einval));
}

#[test]
fn ud2_and_int3_are_refused() {
    let layout = FunctionLayout::new(Arch::X86_64, &text(BUG_FN));
    let ud2 = layout.verdict(18, ProbeSite::Entry);
    let RefuseReason::ExceptionInstruction { insn } = reason(&ud2) else {
        panic!("{ud2:?}");
    };
    assert_eq!(
        (insn.offset(), insn.size(), insn.text().as_str()),
        (18, 2, "ud2")
    );
    assert_eq!(ud2.errno(), Some(Errno::Eilseq));
    assert_eq!(
        ud2.describe("f").to_string(),
        "f+18 is an INT/UD instruction (ud2), which kprobes refuse; valid nearby: +17"
    );
    assert_eq!(
        layout
            .verdict(19, ProbeSite::Entry)
            .describe("f")
            .to_string(),
        "f+19 falls inside the instruction at +18 (ud2, 2 bytes); valid nearby: +17"
    );
    for off in [20, 21] {
        let v = layout.verdict(off, ProbeSite::Entry);
        assert!(
            matches!(reason(&v), RefuseReason::ExceptionInstruction { insn } if insn.text() == "int3"),
            "{v:?}"
        );
    }
    assert_eq!(
        layout.verdict(17, ProbeSite::Entry),
        Verdict::Accept { offset: 17, at: 17 }
    );
    assert_eq!(
        layout.nearest_valid(20),
        Nearby {
            before: Some(17),
            after: None
        }
    );
}

#[test]
fn every_int_and_ud_form_is_refused() {
    // Each sequence starts with push %rbp so the refused one sits at +1.
    let cases: &[(&[u8], &str)] = &[
        (&[0x55, 0xcc], "int3"),
        (&[0x55, 0xcd, 0x80], "int $0x80"),
        (&[0x55, 0xf1], "int1"),
        (&[0x55, 0x0f, 0x0b], "ud2"),
        (&[0x55, 0x0f, 0xb9, 0x48, 0x0c], "ud1 0xc(%rax),%ecx"),
        (&[0x55, 0x0f, 0xff, 0xc0], "ud0 %eax,%eax"),
    ];
    for (bytes, text_) in cases {
        let v = entry(bytes, 1);
        let RefuseReason::ExceptionInstruction { insn } = reason(&v) else {
            panic!("{text_}: {v:?}");
        };
        assert_eq!(insn.text(), *text_);
        assert_eq!(v.errno(), Some(Errno::Eilseq));
    }
    // INTO does not exist in 64-bit mode: the decode fails, still EILSEQ.
    assert_eq!(entry(&[0x55, 0xce], 1).errno(), Some(Errno::Eilseq));
}

#[test]
fn vex_opcode_bytes_that_look_like_int_are_refused_too() {
    // vpsllw %xmm1,%xmm0,%xmm0: VEX opcode byte f1, which
    // is_exception_insn reads as INT1.
    let v = entry(&[0x55, 0xc5, 0xf9, 0xf1, 0xc1, 0xc3], 1);
    assert!(
        matches!(reason(&v), RefuseReason::ExceptionInstruction { .. }),
        "{v:?}"
    );
    // vpxor has no such opcode byte.
    assert!(entry(&[0x55, 0xc5, 0xf9, 0xef, 0xc0, 0xc3], 1).is_accepted());
}

#[test]
fn instructions_kprobes_cannot_emulate() {
    let cases: &[(&[u8], &str)] = &[
        (&[0x55, 0xff, 0x10], "call *(%rax)"),
        (
            &[0x55, 0xff, 0x24, 0xc5, 0x00, 0x10, 0x00, 0x00],
            "jmp *0x1000(,%rax,8)",
        ),
        (&[0x55, 0xff, 0x18], "lcalll *(%rax)"),
        (&[0x55, 0x48, 0xcf], "iretq"),
        (&[0x55, 0x0f, 0x01, 0xc1], "vmcall"),
    ];
    for (bytes, text_) in cases {
        let v = entry(bytes, 1);
        let RefuseReason::CannotEmulate { insn } = reason(&v) else {
            panic!("{text_}: {v:?}");
        };
        assert_eq!(insn.text(), *text_);
        assert_eq!(v.errno(), Some(Errno::Eopnotsupp));
    }
    assert_eq!(
        entry(&[0x55, 0x48, 0xcf], 1).describe("f").to_string(),
        "f+1 is an instruction kprobes cannot emulate (iretq); valid nearby: +0"
    );
    // Through a register, call and jmp are emulated.
    assert!(entry(&[0x55, 0xff, 0xd0, 0xc3], 1).is_accepted());
    assert!(entry(&[0x55, 0x41, 0xff, 0xe3], 1).is_accepted());
    // ... but not with a 32-bit address size.
    assert_eq!(
        entry(&[0x55, 0x67, 0xff, 0xd0], 1).errno(),
        Some(Errno::Eopnotsupp)
    );
}

#[test]
fn copy_failures_are_einval() {
    // mov %eax,%ss
    let v = entry(&[0x55, 0x8e, 0xd0, 0xc3], 1);
    assert!(
        matches!(reason(&v), RefuseReason::MasksExceptions { .. }),
        "{v:?}"
    );
    assert_eq!(v.errno(), Some(Errno::Einval));

    // Xen's emulate prefix before cpuid: one 7-byte instruction to the kernel.
    let bytes = [0x55, 0x0f, 0x0b, b'x', b'e', b'n', 0x0f, 0xa2, 0x5d, 0xc3];
    let v = entry(&bytes, 1);
    assert_eq!(v.errno(), Some(Errno::Einval));
    assert_eq!(
        v.describe("xen_cpuid").to_string(),
        "xen_cpuid+1 carries a Xen/KVM emulate prefix (ud2; .ascii \"xen\"; cpuid), \
         which kprobes cannot copy; valid nearby: +0, +8"
    );
    let inside = entry(&bytes, 3);
    assert!(
        matches!(reason(&inside), RefuseReason::InsideInstruction { containing } if containing.size() == 7),
        "{inside:?}"
    );
    assert!(entry(&bytes, 8).is_accepted());
}

#[test]
fn kcfi_check_is_refused() {
    let bytes = [
        0x55, // +0  push %rbp
        0x41, 0xba, 0x78, 0x56, 0x34, 0x12, // +1  mov $0x12345678,%r10d
        0x45, 0x03, 0x53, 0xfc, // +7  add -0x4(%r11),%r10d
        0x74, 0x02, // +11 je +15
        0x0f, 0x0b, // +13 ud2
        0x41, 0xff, 0xd3, // +15 call *%r11
        0x5d, 0xc3, // +18 pop %rbp; ret
    ];
    for off in [1, 7] {
        let v = entry(&bytes, off);
        assert!(
            matches!(reason(&v), RefuseReason::KcfiCheck { .. }),
            "{v:?}"
        );
        assert_eq!(v.errno(), Some(Errno::Eilseq));
    }
    assert_eq!(
        entry(&bytes, 1).describe("f").to_string(),
        "f+1 is part of a kCFI type check (mov $0x12345678,%r10d), which kprobes refuse; \
         valid nearby: +0, +11"
    );
    assert!(entry(&bytes, 11).is_accepted());
    assert!(entry(&bytes, 15).is_accepted());
    // A plain `mov $imm,%edx` is not a kCFI check.
    assert!(entry(&[0x55, 0xba, 0x01, 0x00, 0x00, 0x00, 0xc3], 1).is_accepted());
}

#[test]
fn undecodable_bytes_stop_the_walk() {
    // push %rbp, then 06 (push %es, invalid in 64-bit mode), then ret.
    let bytes = [0x55, 0x06, 0xc3];
    assert!(entry(&bytes, 0).is_accepted());
    let v = entry(&bytes, 1);
    assert_eq!(reason(&v), &RefuseReason::Undecodable { at: 1 });
    assert_eq!(
        v.describe("f").to_string(),
        "f+1 does not decode as an x86-64 instruction; valid nearby: +0"
    );
    assert_eq!(
        entry(&bytes, 2).describe("f").to_string(),
        "f+2 cannot be reached: the bytes at +1 do not decode as an x86-64 instruction; \
         valid nearby: +0"
    );
    // A truncated last instruction.
    let cut = [0x55, 0x48, 0x89];
    assert_eq!(
        reason(&entry(&cut, 2)),
        &RefuseReason::Undecodable { at: 1 }
    );
    let list = instructions(&text(&cut));
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[1].offset, list[1].len, list[1].text.as_str()),
        (1, 2, "(bad)")
    );
}

#[test]
fn att_text_matches_objdump() {
    let t = FunctionText {
        start: MODULE_FN_START,
        bytes: MODULE_FN,
    };
    let lines: Vec<(u64, String)> = instructions(&t)
        .into_iter()
        .map(|i| (i.offset, i.text))
        .collect();
    let want: Vec<(u64, &str)> = vec![
        (0, "nopl 0x0(%rax,%rax,1)"),
        (5, "push %rbp"),
        (6, "mov %rsp,%rbp"),
        (9, "push %r15"),
        (11, "push %r14"),
        (13, "push %r13"),
        (15, "push %r12"),
        (17, "mov %edx,%r12d"),
        (20, "push %rbx"),
        (21, "sub $0x20,%rsp"),
        (25, "mov 0x6740(%rip),%rbx # 0xffffffffa07b55b0"),
        (32, "mov %gs:0x28,%rax"),
        (41, "mov %rax,-0x30(%rbp)"),
        (45, "xor %eax,%eax"),
        (47, "test %edx,%edx"),
    ];
    let got: Vec<(u64, &str)> = lines.iter().map(|(o, s)| (*o, s.as_str())).collect();
    assert_eq!(got, want);

    let t = FunctionText {
        start: DO_SYS_OPEN_START,
        bytes: DO_SYS_OPEN,
    };
    let list = instructions(&t);
    let texts: Vec<&str> = list.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(
        &texts[9..],
        &[
            "sub $0x18,%rsp",
            "test $0x400040,%edx",
            "je 0xffffffff81205dde",
            "and $0xfff,%cx",
        ]
    );
    assert_eq!(list[0].bytes, vec![0x0f, 0x1f, 0x44, 0x00, 0x00]);
    assert_eq!(
        list[0].verdict,
        Verdict::AcceptFtraceSite { offset: 0, at: 0 }
    );
    assert_eq!(list[1].len, 2);
    assert_eq!(list[1].verdict, Verdict::Accept { offset: 5, at: 5 });
}

#[test]
fn att_text_of_other_forms() {
    let one = |bytes: &[u8]| instructions(&text(bytes)).remove(0).text;
    assert_eq!(one(&[0xf3, 0x0f, 0x1e, 0xfa]), "endbr64");
    assert_eq!(one(&[0xc7, 0x45, 0xfc, 0, 0, 0, 0]), "movl $0x0,-0x4(%rbp)");
    assert_eq!(one(&[0x0f, 0x1f, 0x40, 0x00]), "nopl 0x0(%rax)");
    assert_eq!(one(&[0x0f, 0x1f, 0x00]), "nopl (%rax)");
    assert_eq!(one(&[0x48, 0x8d, 0x04, 0x00]), "lea (%rax,%rax,1),%rax");
    assert_eq!(
        one(&[0x8b, 0x04, 0x8d, 0x10, 0, 0, 0]),
        "mov 0x10(,%rcx,4),%eax"
    );
    assert_eq!(
        one(&[0xe8, 0x00, 0x00, 0x00, 0x00]),
        "call 0xffffffff81000005"
    );
    assert_eq!(one(&[0xc3]), "ret");
}

#[test]
fn ftrace_call_when_traced() {
    // While ftrace is tracing the function its NOP is a call.
    let bytes = [0xe8, 0x2b, 0x39, 0x61, 0x00, 0x55, 0xc3];
    let layout = FunctionLayout::new(Arch::X86_64, &text(&bytes));
    assert_eq!(layout.ftrace_site(), Some(0));
    assert_eq!(
        layout
            .verdict(2, ProbeSite::Entry)
            .describe("do_fork")
            .to_string(),
        "do_fork+2 falls inside the 5-byte ftrace call at +0; valid nearby: +0, +5"
    );
}

#[test]
fn arm64_alignment() {
    // mov x9, x30; nop; paciasp; stp x29, x30, [sp, #-16]!
    let bytes = [
        0xe9, 0x03, 0x1e, 0xaa, 0x1f, 0x20, 0x03, 0xd5, 0x3f, 0x23, 0x03, 0xd5, 0xfd, 0x7b, 0xbf,
        0xa9,
    ];
    let t = text(&bytes);
    let layout = FunctionLayout::new(Arch::Aarch64, &t);
    // +4 is the ftrace call site (see tests_arm64).
    assert_eq!(
        layout.verdict(4, ProbeSite::Entry).errno(),
        Some(Errno::Einval)
    );
    assert!(layout.verdict(8, ProbeSite::Entry).is_accepted());
    let v = layout.verdict(6, ProbeSite::Entry);
    assert_eq!(reason(&v), &RefuseReason::Misaligned);
    assert_eq!(v.errno(), Some(Errno::Einval));
    assert_eq!(
        v.describe("do_sys_openat2").to_string(),
        "do_sys_openat2+6 is not 4-byte aligned (arm64 instructions are 4 bytes); \
         valid nearby: +0, +8"
    );
    assert_eq!(
        layout.nearest_valid(13),
        Nearby {
            before: Some(12),
            after: None
        }
    );
    assert_eq!(
        layout.nearest_valid(0),
        Nearby {
            before: None,
            after: Some(8)
        }
    );
    assert_eq!(
        layout.verdict(4, ProbeSite::Return),
        Verdict::Refuse(Refusal {
            offset: 4,
            reason: RefuseReason::NotFunctionEntry { endbr: false },
            nearby: Nearby::default(),
        })
    );
    assert!(layout.verdict(0, ProbeSite::Return).is_accepted());
    assert_eq!(
        layout.verdict(16, ProbeSite::Entry),
        Verdict::OutsideFunction {
            offset: 16,
            size: 16
        }
    );
    let list = layout.instructions();
    assert_eq!(list.len(), 4);
    assert_eq!(list[1].text, "nop");
}

#[test]
fn nearby_agrees_with_nearest_valid_everywhere() {
    let kcfi = [
        0x55, 0x41, 0xba, 0x78, 0x56, 0x34, 0x12, 0x45, 0x03, 0x53, 0xfc, 0x74, 0x02, 0x0f, 0x0b,
        0x41, 0xff, 0xd3, 0x5d, 0xc3,
    ];
    let functions: [&[u8]; 6] = [
        DO_SYS_OPEN,
        MODULE_FN,
        IBT_FN,
        BUG_FN,
        &kcfi,
        &[0x55, 0x06, 0xc3],
    ];
    for bytes in functions {
        let layout = FunctionLayout::new(Arch::X86_64, &text(bytes));
        for off in 0..bytes.len() as u64 {
            if let Verdict::Refuse(r) = layout.verdict(off, ProbeSite::Entry) {
                assert_eq!(
                    r.nearby,
                    layout.nearest_valid(off),
                    "+{off} of {bytes:02x?}"
                );
            }
        }
    }
}

#[test]
fn empty_text() {
    let v = entry(&[], 0);
    assert_eq!(v, Verdict::OutsideFunction { offset: 0, size: 0 });
    assert!(instructions(&text(&[])).is_empty());
}

#[test]
fn errno_values() {
    assert_eq!((Errno::Eilseq.raw(), Errno::Eilseq.name()), (84, "EILSEQ"));
    assert_eq!(
        (Errno::Einval.raw(), Errno::Einval.to_string()),
        (22, "EINVAL".to_string())
    );
    assert_eq!(Errno::Eopnotsupp.raw(), 95);
}

/// Prints how long deciding every offset of a 4 KiB function takes; run
/// with `cargo test --release -p kprobe-perf-arch -- --ignored --nocapture`.
#[test]
#[ignore]
fn speed_of_all_offsets_in_4k() {
    let bytes = synthetic_function(4096);
    let t = text(&bytes);
    let rounds = 200;
    let begin = std::time::Instant::now();
    let mut accepted = 0usize;
    for _ in 0..rounds {
        let layout = FunctionLayout::new(Arch::X86_64, &t);
        for off in 0..bytes.len() as u64 {
            accepted += usize::from(layout.verdict(off, ProbeSite::Entry).is_accepted());
        }
    }
    let per = begin.elapsed() / rounds;
    println!(
        "decode + {} verdicts: {per:?} per 4 KiB function ({} accepted)",
        bytes.len(),
        accepted / rounds as usize
    );
}

/// A function of `size` bytes built from real instruction encodings.
fn synthetic_function(size: usize) -> Vec<u8> {
    let mut out = DO_SYS_OPEN.to_vec();
    let body: &[&[u8]] = &[
        &[0x48, 0x8b, 0x47, 0x08],
        &[0x48, 0x85, 0xc0],
        &[0x74, 0x10],
        &[0x48, 0x8b, 0x1d, 0x40, 0x67, 0x00, 0x00],
        &[0x65, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00],
        &[0xe8, 0x00, 0x10, 0x00, 0x00],
        &[0x89, 0xc3],
        &[0x0f, 0x0b],
        &[0x41, 0x89, 0xd4],
        &[0xc7, 0x45, 0xfc, 0, 0, 0, 0],
    ];
    let mut i = 0;
    while out.len() < size {
        out.extend_from_slice(body[i % body.len()]);
        i += 1;
    }
    out.truncate(size);
    out
}

// ---- uprobe rules ----

fn user(bytes: &[u8]) -> FunctionLayout<'_> {
    FunctionLayout::with_rules(
        Arch::X86_64,
        &FunctionText {
            start: 0x1139,
            bytes,
        },
        Rules::Uprobe,
    )
}

fn user_says(bytes: &[u8], offset: u64) -> String {
    user(bytes)
        .verdict(offset, ProbeSite::Entry)
        .describe("f")
        .to_string()
}

/// endbr64; push %rbp; mov %rsp,%rbp; mov %edi,-0x4(%rbp);
/// movabs $0x1122334455667788,%rax; pop %rbp; ret
const USER_FN: [u8; 26] = [
    0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x89, 0x7d, 0xfc, 0x48, 0xb8, 0x88, 0x77, 0x66,
    0x55, 0x44, 0x33, 0x22, 0x11, 0x5d, 0xc3, 0x90, 0x90, 0x90,
];

#[test]
fn uprobe_offsets_are_instruction_starts_without_the_kernel_moves() {
    let l = user(&USER_FN);
    // No ENDBR move, no ftrace site: +0 is the ENDBR itself.
    assert_eq!(l.rules(), Rules::Uprobe);
    assert!(!l.has_endbr());
    assert_eq!(l.ftrace_site(), None);
    assert_eq!(
        l.accepted_offsets(),
        vec![0, 4, 5, 8, 11, 21, 22, 23, 24, 25]
    );
    assert_eq!(
        l.verdict(0, ProbeSite::Entry),
        Verdict::Accept { offset: 0, at: 0 }
    );
    assert_eq!(
        user_says(&USER_FN, 2),
        "f+2 falls inside the instruction at +0 (endbr64, 4 bytes); valid nearby: +0, +4"
    );
    assert_eq!(
        user_says(&USER_FN, 13),
        "f+13 falls inside the instruction at +11 (movabs $0x1122334455667788,%rax, 10 bytes); valid nearby: +11, +21"
    );
    assert_eq!(
        l.verdict(100, ProbeSite::Entry),
        Verdict::OutsideFunction {
            offset: 100,
            size: 26
        }
    );
    // A return probe goes at the entry only.
    assert!(l.verdict(0, ProbeSite::Return).is_accepted());
    assert_eq!(
        user_says_ret(&USER_FN, 4),
        "f+4 is not the function entry; a return probe goes at +0"
    );
}

fn user_says_ret(bytes: &[u8], offset: u64) -> String {
    user(bytes)
        .verdict(offset, ProbeSite::Return)
        .describe("f")
        .to_string()
}

#[test]
fn uprobe_layer_refusals_follow_uprobes_c() {
    let cases: &[(&[u8], &str)] = &[
        (&[0xcc], "f+0 is int3, which uprobes refuse: its opcode 0xcc (int3) is not in the kernel's good_insns_64 table (uprobe_init_insn)"),
        (&[0xcd, 0x80], "f+0 is int $0x80, which uprobes refuse: its opcode 0xcd (int n) is not in the kernel's good_insns_64 table (uprobe_init_insn)"),
        (&[0xf4], "f+0 is hlt, which uprobes refuse: its opcode 0xf4 (hlt) is not in the kernel's good_insns_64 table (uprobe_init_insn)"),
        (&[0xf0, 0x48, 0x0f, 0xb1, 0x0a], "f+0 is lock cmpxchg %rcx,(%rdx), which uprobes refuse: it has the lock prefix 0xf0 (is_prefix_bad)"),
        (&[0x3e, 0xff, 0xe0], "f+0 is notrack jmp *%rax, which uprobes refuse: it has the ds segment (or notrack) prefix 0x3e (is_prefix_bad)"),
        (&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], "f+0 is nopw 0x0(%rax,%rax,1), which uprobes refuse: it has the cs segment prefix 0x2e (is_prefix_bad)"),
        (&[0x8e, 0xd0], "f+0 is mov %eax,%ss, which uprobes refuse: it loads %ss, which cannot be single-stepped (insn_masking_exception)"),
        (&[0x66, 0xe9, 0, 0, 0, 0], "f+0 is jmp 0x000000000000113f, which uprobes refuse: it is a branch with a 0x66 operand-size prefix (branch_setup_xol_ops)"),
    ];
    for (bytes, want) in cases {
        let l = user(bytes);
        let v = l.verdict(0, ProbeSite::Entry);
        assert_eq!(v.describe("f").to_string(), *want, "{bytes:02x?}");
        assert_eq!(v.errno(), Some(Errno::Enotsupp), "{bytes:02x?}");
    }
    // Accepted: two-byte opcodes (0f is set in good_insns_64, so
    // good_2byte_insns is never consulted: syscall and ud2 pass), fs/gs
    // prefixes, VEX instructions whose opcode byte is good, a 66-prefixed
    // non-branch, rip-relative loads.
    let fine: &[&[u8]] = &[
        &[0x0f, 0x05],
        &[0x0f, 0x0b],
        &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0],
        &[0xc5, 0xf8, 0x28, 0xc1],
        &[0x66, 0x89, 0xc8],
        &[0x48, 0x8b, 0x05, 0x10, 0, 0, 0],
        &[0xf3, 0x0f, 0x1e, 0xfa],
        &[0xe8, 0, 0, 0, 0],
    ];
    for bytes in fine {
        assert!(
            user(bytes).verdict(0, ProbeSite::Entry).is_accepted(),
            "{bytes:02x?}: {}",
            user_says(bytes, 0)
        );
    }
    // VEX: the opcode byte after the prefix is what the table sees
    // (vmovdqu's 6f is outs there, vpxor's ef is out).
    // A VEX opcode byte of a branch or nop: accepted by the kernel, which
    // would emulate it as that branch; refused here.
    for (bytes, op) in [
        ([0xc5, 0xf9, 0x74, 0xc1], 0x74),
        ([0xc5, 0xf8, 0x90, 0xc1], 0x90),
    ] {
        match user(&bytes).verdict(0, ProbeSite::Entry) {
            Verdict::Refuse(r) => assert_eq!(
                r.reason,
                RefuseReason::UprobeInstruction {
                    insn: Insn::new(
                        &FunctionText {
                            start: 0x1139,
                            bytes: &bytes
                        },
                        0,
                        4
                    ),
                    rule: UprobeRule::EmulatedAsBranch(op)
                }
            ),
            v => panic!("{bytes:02x?}: {v:?}"),
        }
    }
    assert!(!UprobeRule::EmulatedAsBranch(0x74).kernel_refuses());
    for bytes in [[0xc5, 0xfe, 0x6f, 0x06], [0xc5, 0xf9, 0xef, 0xc0]] {
        assert_eq!(
            user(&bytes).verdict(0, ProbeSite::Entry).errno(),
            Some(Errno::Enotsupp),
            "{bytes:02x?}"
        );
    }
    // ud2 is an exception instruction for kprobes, not for uprobes.
    assert_eq!(
        verdict(Arch::X86_64, &text(&[0x0f, 0x0b]), 0, ProbeSite::Entry).errno(),
        Some(Errno::Eilseq)
    );
}

#[test]
fn uprobe_undecodable_bytes_stop_the_walk() {
    // push %rbp; then 06 (invalid in 64-bit mode); then ret.
    let bytes = [0x55, 0x06, 0xc3];
    assert_eq!(
        user_says(&bytes, 1),
        "f+1 does not decode as an x86-64 instruction; valid nearby: +0"
    );
    assert_eq!(
        user_says(&bytes, 2),
        "f+2 cannot be checked: the bytes at +1 do not decode as an x86-64 instruction, so no instruction boundary past them is known; valid nearby: +0"
    );
    assert_eq!(
        user(&bytes).verdict(1, ProbeSite::Entry).errno(),
        Some(Errno::Enoexec)
    );
    assert_eq!(Errno::Enotsupp.raw(), 524);
}

#[test]
fn uprobe_alignment_on_arm64() {
    let bytes = [0u8; 16];
    let l = FunctionLayout::with_rules(
        Arch::Aarch64,
        &FunctionText {
            start: 0x400,
            bytes: &bytes,
        },
        Rules::Uprobe,
    );
    assert_eq!(l.accepted_offsets(), vec![0, 4, 8, 12]);
    assert_eq!(
        l.verdict(6, ProbeSite::Entry).describe("f").to_string(),
        "f+6 is not 4-byte aligned (arm64 instructions are 4 bytes); valid nearby: +4, +8"
    );
}
