//! x86-64 instructions the uprobe layer refuses, as the kernel decides it
//! in `arch/x86/kernel/uprobes.c` (6.1 to 6.18-era trees; the function
//! names below are the kernel's). `arch_uprobe_analyze_insn` runs when a
//! uprobe is installed in a process that maps the binary (so at
//! `perf_event_open` when one already does), on the instruction at the
//! probed address only:
//!
//! 1. `uprobe_init_insn`: the bytes must decode (else **ENOEXEC**); then
//!    `is_prefix_bad` refuses a legacy `es`/`cs`/`ss`/`ds` segment prefix
//!    (`26`, `2e`, `36`, `3e`) or `lock` (`f0`), `insn_masking_exception`
//!    refuses `pop %ss`/`mov` to `%ss`, and the first opcode byte (after
//!    legacy prefixes, REX, and a VEX/EVEX/XOP prefix) must be set in
//!    `good_insns_64`; all with **ENOTSUPP** (524). `0f` is set there, so
//!    every two- and three-byte opcode passes and `good_2byte_insns` is never
//!    consulted for 64-bit processes.
//! 2. `branch_setup_xol_ops`: a `jmp`, `call` or conditional jump (`eb`,
//!    `e9`, `e8`, `70`..`7f`, `0f 80`..`0f 8f`) with a `66` operand-size
//!    prefix is **ENOTSUPP**.
//! 3. `prepare_uprobe` (kernel/events/uprobes.c) refuses an `int3` already
//!    in the file (`is_trap_insn`), also **ENOTSUPP**; `cc` is not in
//!    `good_insns_64` either.
//!
//! Refused here although the kernel accepts it: a VEX, EVEX or XOP
//! instruction whose opcode byte is that of a branch or `nop` (`70`..`7f`,
//! `e8`, `e9`, `eb`, `90`: `vpcmpeqb`, `kmovw`, `vpsubsb` ...).
//! `branch_setup_xol_ops` looks at that byte without the prefix and sets the
//! instruction up to be emulated as the jump, call or nop, so it is never
//! executed (a `vpcmpeqb` probed on the host kernel left its result
//! unchanged: the program printed `mask=0` instead of `mask=ffff`).
//!
//! What the kernel does NOT check: that the offset is an instruction start
//! in the program's own instruction stream. An offset inside an instruction
//! decodes as whatever those bytes happen to mean, is accepted, and the
//! `int3` written there corrupts that instruction in every process that maps
//! the file. The boundary check is this crate's, from the function start.

/// Why the uprobe layer refuses an instruction (ENOTSUPP, 524).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UprobeRule {
    /// A segment (`es`, `cs`, `ss`, `ds`) or `lock` prefix (`is_prefix_bad`).
    BadPrefix(u8),
    /// `pop %ss` or `mov` to `%ss` (`insn_masking_exception`).
    MasksExceptions,
    /// The opcode byte is clear in `good_insns_64` (`uprobe_init_insn`).
    Opcode(u8),
    /// A branch with a `66` prefix (`branch_setup_xol_ops`).
    BranchOperandSize,
    /// A VEX/EVEX/XOP instruction whose opcode byte `branch_setup_xol_ops`
    /// takes for a branch or `nop`: the kernel accepts it, then emulates it
    /// as one instead of executing it.
    EmulatedAsBranch(u8),
}

impl UprobeRule {
    /// True when the kernel itself refuses the instruction (ENOTSUPP);
    /// false for the refusals made here to protect the probed program.
    pub fn kernel_refuses(self) -> bool {
        !matches!(self, UprobeRule::EmulatedAsBranch(_))
    }

    /// The clause after "which uprobes refuse", naming the kernel check.
    pub fn why(self) -> String {
        match self {
            UprobeRule::BadPrefix(p) => {
                let name = match p {
                    0x26 => "es segment",
                    0x2e => "cs segment",
                    0x36 => "ss segment",
                    0x3e => "ds segment (or notrack)",
                    _ => "lock",
                };
                format!("it has the {name} prefix 0x{p:02x} (is_prefix_bad)")
            }
            UprobeRule::MasksExceptions => {
                "it loads %ss, which cannot be single-stepped (insn_masking_exception)".to_string()
            }
            UprobeRule::Opcode(op) => {
                let what = match op {
                    0xcc => " (int3)",
                    0xcd => " (int n)",
                    0xce => " (into)",
                    0xcf => " (iret)",
                    0xf1 => " (int1)",
                    0xf4 => " (hlt)",
                    0xfa => " (cli)",
                    0xfb => " (sti)",
                    0x6c..=0x6f => " (ins/outs)",
                    0xe4..=0xe7 | 0xec..=0xef => " (in/out)",
                    0x9a | 0xea => " (far call/jmp)",
                    _ => "",
                };
                format!("its opcode 0x{op:02x}{what} is not in the kernel's good_insns_64 table (uprobe_init_insn)")
            }
            UprobeRule::BranchOperandSize => {
                "it is a branch with a 0x66 operand-size prefix (branch_setup_xol_ops)".to_string()
            }
            UprobeRule::EmulatedAsBranch(op) => format!(
                "the kernel would take its opcode byte 0x{op:02x} for a branch or nop and emulate that instead of running it (branch_setup_xol_ops ignores the VEX/EVEX prefix)"
            ),
        }
    }
}

/// Opcode bytes clear in `good_insns_64` (arch/x86/kernel/uprobes.c).
const BAD_OPCODES_64: [u8; 36] = [
    0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62, 0x6c, 0x6d,
    0x6e, 0x6f, 0x82, 0x9a, 0xcc, 0xcd, 0xce, 0xcf, 0xd4, 0xd5, 0xd6, 0xe4, 0xe5, 0xe6, 0xe7, 0xea,
    0xec, 0xed, 0xee, 0xef,
];

/// The remaining clear bits of `good_insns_64` (row `f0`).
const BAD_OPCODES_64_F: [u8; 4] = [0xf1, 0xf4, 0xfa, 0xfb];

fn good_insn_64(op: u8) -> bool {
    !BAD_OPCODES_64.contains(&op) && !BAD_OPCODES_64_F.contains(&op)
}

/// What `arch_uprobe_analyze_insn` says of the instruction `insn` (its
/// bytes, already known to decode): `None` when it is accepted.
pub(super) fn refusal(insn: &[u8]) -> Option<UprobeRule> {
    let mut i = 0;
    let mut has_66 = false;
    while let Some(&b) = insn.get(i) {
        match b {
            0x26 | 0x2e | 0x36 | 0x3e | 0xf0 => return Some(UprobeRule::BadPrefix(b)),
            0x66 => has_66 = true,
            0x64 | 0x65 | 0x67 | 0xf2 | 0xf3 => {}
            _ => break,
        }
        i += 1;
    }
    if matches!(insn.get(i), Some(0x40..=0x4f)) {
        i += 1;
    }
    // VEX (c5: 2 bytes, c4: 3), EVEX (62: 4) and XOP (8f with a ModRM reg
    // field other than 0: 3) prefixes: the opcode byte follows them.
    let prefix_len = match (insn.get(i), insn.get(i + 1)) {
        (Some(0xc5), _) => 2,
        (Some(0xc4), _) => 3,
        (Some(0x62), _) => 4,
        (Some(0x8f), Some(m)) if (m >> 3) & 7 != 0 => 3,
        _ => 0,
    };
    let vex = prefix_len != 0;
    i += prefix_len;
    let op = *insn.get(i)?;
    let modrm_reg = insn.get(i + 1).map(|m| (m >> 3) & 7);
    if op == 0x17 || (op == 0x8e && modrm_reg == Some(2)) {
        return Some(UprobeRule::MasksExceptions);
    }
    if !good_insn_64(op) {
        return Some(UprobeRule::Opcode(op));
    }
    if vex && matches!(op, 0xe8 | 0xe9 | 0xeb | 0x70..=0x7f | 0x90) {
        return Some(UprobeRule::EmulatedAsBranch(op));
    }
    let branch = match op {
        0xe8 | 0xe9 | 0xeb | 0x70..=0x7f => true,
        0x0f => matches!(insn.get(i + 1), Some(0x80..=0x8f)),
        _ => false,
    };
    (branch && has_66 && !vex).then_some(UprobeRule::BranchOperandSize)
}
