//! What the kernel answers for one offset: the verdict, the reason for a
//! refusal with the error number it maps to, and the sentence that explains
//! it.

use std::fmt;

use super::{arm64, x86, Arm64Refusal, FunctionText, UprobeRule, MAX_INSN_BYTES};

/// The error number the kernel answers a refused probe with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errno {
    /// `EILSEQ` (84): not an instruction boundary, or an instruction kprobes
    /// never probe.
    Eilseq,
    /// `EINVAL` (22): refused by the address checks or the instruction copy.
    Einval,
    /// `EOPNOTSUPP` (95): an instruction x86 kprobes cannot emulate.
    Eopnotsupp,
    /// `ENOTSUPP` (524, kernel-internal, printed as "Unknown error 524"):
    /// an instruction the uprobe layer refuses.
    Enotsupp,
    /// `ENOEXEC` (8): the uprobe layer cannot decode the instruction.
    Enoexec,
}

impl Errno {
    /// The numeric value on Linux (x86_64 and arm64 share it).
    pub fn raw(self) -> i32 {
        match self {
            Errno::Eilseq => 84,
            Errno::Einval => 22,
            Errno::Eopnotsupp => 95,
            Errno::Enotsupp => 524,
            Errno::Enoexec => 8,
        }
    }

    /// The symbolic name, as in `errno.h`.
    pub fn name(self) -> &'static str {
        match self {
            Errno::Eilseq => "EILSEQ",
            Errno::Einval => "EINVAL",
            Errno::Eopnotsupp => "EOPNOTSUPP",
            Errno::Enotsupp => "ENOTSUPP (524)",
            Errno::Enoexec => "ENOEXEC",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One x86-64 instruction of a function, copied out so a verdict can name
/// it without borrowing the function's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insn {
    offset: u64,
    address: u64,
    size: u8,
    bytes: [u8; MAX_INSN_BYTES],
    arm64: bool,
}

impl Insn {
    pub(super) fn new(text: &FunctionText<'_>, offset: u64, size: u8) -> Insn {
        let mut bytes = [0u8; MAX_INSN_BYTES];
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        let n = usize::from(size).min(MAX_INSN_BYTES);
        if let Some(src) = text.bytes.get(from..).map(|s| &s[..n.min(s.len())]) {
            bytes[..src.len()].copy_from_slice(src);
        }
        Insn {
            offset,
            address: text.start.wrapping_add(offset),
            size,
            bytes,
            arm64: false,
        }
    }

    /// The arm64 instruction (one 4-byte word) at `offset`.
    pub(super) fn new_arm64(text: &FunctionText<'_>, offset: u64) -> Insn {
        Insn {
            arm64: true,
            ..Insn::new(text, offset, 4)
        }
    }

    /// Offset of the first byte from the function start.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Address of the first byte.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Length in bytes (an emulate prefix counts as part of the instruction,
    /// as the kernel's decoder sees it).
    pub fn size(&self) -> usize {
        usize::from(self.size)
    }

    /// The instruction's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.size().min(MAX_INSN_BYTES)]
    }

    /// x86-64: AT&T text as objdump prints it, e.g. `nopl
    /// 0x0(%rax,%rax,1)`; arm64: the usual assembler syntax, e.g. `mrs
    /// x0, sp_el0`.
    pub fn text(&self) -> String {
        if self.arm64 {
            let b = self.bytes;
            arm64::text(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), self.address)
        } else {
            x86::att_text(self.bytes(), self.address)
        }
    }
}

impl fmt::Display for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// Why the kernel refuses a probe at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefuseReason {
    /// Inside the 5-byte ftrace site at the entry (EILSEQ, `can_probe`).
    InsideFtraceSite {
        /// The ftrace NOP (or the `call` ftrace patched in).
        site: Insn,
    },
    /// Inside the ENDBR64 at +0 (EILSEQ, `can_probe`).
    InsideEndbr {
        /// The ENDBR64 (or its poisoned NOP).
        endbr: Insn,
    },
    /// Not an instruction start (EILSEQ, `can_probe`).
    InsideInstruction {
        /// The instruction containing the offset.
        containing: Insn,
    },
    /// INT3, INT n, INTO, INT1, UD0, UD1 or UD2 (EILSEQ, `is_exception_insn`).
    ExceptionInstruction {
        /// The instruction.
        insn: Insn,
    },
    /// The `movl`/`addl` of a clang kCFI type check (EILSEQ, `can_probe`).
    KcfiCheck {
        /// The instruction.
        insn: Insn,
    },
    /// The bytes at `at` do not decode, so `can_probe` cannot walk from the
    /// symbol start to the offset (EILSEQ).
    Undecodable {
        /// Offset of the first byte that does not decode.
        at: u64,
    },
    /// An instruction with a Xen/KVM emulate prefix (EINVAL,
    /// `insn_has_emulate_prefix` in `__copy_instruction`).
    EmulatePrefix {
        /// The prefix and the instruction it marks.
        insn: Insn,
    },
    /// `mov` to `%ss`, which masks interrupts for one instruction (EINVAL,
    /// `insn_masking_exception`).
    MasksExceptions {
        /// The instruction.
        insn: Insn,
    },
    /// An instruction x86 kprobes cannot emulate (EOPNOTSUPP,
    /// `prepare_emulation`).
    CannotEmulate {
        /// The instruction.
        insn: Insn,
    },
    /// A return probe away from the function entry (EINVAL,
    /// `kprobe_on_func_entry`).
    NotFunctionEntry {
        /// True when the function starts with ENDBR, so +4 is the entry too.
        endbr: bool,
    },
    /// Not 4-byte aligned on arm64 (EINVAL, `arch_prepare_kprobe`; for a
    /// uprobe, `uprobe_register`).
    Misaligned,
    /// An instruction the uprobe layer refuses (ENOTSUPP, 524;
    /// `arch_uprobe_analyze_insn`), or one it would mis-emulate
    /// ([`UprobeRule::kernel_refuses`] false: the errno is then nominal).
    UprobeInstruction {
        /// The instruction.
        insn: Insn,
        /// The kernel's rule.
        rule: UprobeRule,
    },
    /// arm64: an instruction `arm_probe_decode_insn` rejects, or one the
    /// exception table lists (EINVAL, `arch_prepare_kprobe`).
    Arm64Instruction {
        /// The instruction.
        insn: Insn,
        /// Which rule refuses it.
        refusal: Arm64Refusal,
    },
    /// arm64: an exclusive load (`ldxr`, or on kernels before 6.15 any
    /// load-acquire or `casa`) precedes the offset within 16 instructions
    /// with no exclusive store between (EINVAL,
    /// `is_probed_address_atomic`).
    AtomicSequence {
        /// The instruction at the offset.
        insn: Insn,
        /// The exclusive load that opens the sequence.
        load: Insn,
    },
    /// arm64: the ftrace call site at the entry (the second patchable
    /// NOP, `bl ftrace_caller` while traced): arm64 has no
    /// kprobes-on-ftrace, so `check_ftrace_location` answers EINVAL.
    FtraceCallSite {
        /// The site.
        site: Insn,
    },
    /// Uprobe rules: the bytes at `at` do not decode (the uprobe layer
    /// answers ENOEXEC for an instruction it cannot decode; past such
    /// bytes no boundary is known).
    UprobeUndecodable {
        /// Offset of the first byte that does not decode.
        at: u64,
    },
}

impl RefuseReason {
    /// The error number the kernel returns for this reason.
    pub fn errno(&self) -> Errno {
        match self {
            RefuseReason::InsideFtraceSite { .. }
            | RefuseReason::InsideEndbr { .. }
            | RefuseReason::InsideInstruction { .. }
            | RefuseReason::ExceptionInstruction { .. }
            | RefuseReason::KcfiCheck { .. }
            | RefuseReason::Undecodable { .. } => Errno::Eilseq,
            RefuseReason::EmulatePrefix { .. }
            | RefuseReason::MasksExceptions { .. }
            | RefuseReason::NotFunctionEntry { .. }
            | RefuseReason::Arm64Instruction { .. }
            | RefuseReason::AtomicSequence { .. }
            | RefuseReason::FtraceCallSite { .. }
            | RefuseReason::Misaligned => Errno::Einval,
            RefuseReason::CannotEmulate { .. } => Errno::Eopnotsupp,
            RefuseReason::UprobeInstruction { .. } => Errno::Enotsupp,
            RefuseReason::UprobeUndecodable { .. } => Errno::Enoexec,
        }
    }

    /// Writes the part of the sentence after `SYM+OFF`.
    fn write_predicate(&self, offset: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::Misaligned
            | RefuseReason::Arm64Instruction { .. }
            | RefuseReason::AtomicSequence { .. }
            | RefuseReason::FtraceCallSite { .. } => self.write_arm64_predicate(f),
            RefuseReason::UprobeInstruction { .. } | RefuseReason::UprobeUndecodable { .. } => {
                self.write_uprobe_predicate(offset, f)
            }
            RefuseReason::InsideFtraceSite { site } => {
                let what = if site.bytes().first() == Some(&0xe8) {
                    "call"
                } else {
                    "NOP"
                };
                write!(
                    f,
                    "falls inside the {}-byte ftrace {what} at +{}",
                    site.size(),
                    site.offset()
                )
            }
            RefuseReason::InsideEndbr { endbr } => {
                let what = if endbr.bytes().first() == Some(&0xf3) {
                    "ENDBR64"
                } else {
                    "poisoned ENDBR"
                };
                write!(
                    f,
                    "falls inside the {}-byte {what} at +{}",
                    endbr.size(),
                    endbr.offset()
                )
            }
            RefuseReason::InsideInstruction { containing } => write!(
                f,
                "falls inside the instruction at +{} ({}, {} bytes)",
                containing.offset(),
                containing.text(),
                containing.size()
            ),
            RefuseReason::ExceptionInstruction { insn } => write!(
                f,
                "is an INT/UD instruction ({}), which kprobes refuse",
                insn.text()
            ),
            RefuseReason::KcfiCheck { insn } => write!(
                f,
                "is part of a kCFI type check ({}), which kprobes refuse",
                insn.text()
            ),
            RefuseReason::Undecodable { at } if *at == offset => {
                f.write_str("does not decode as an x86-64 instruction")
            }
            RefuseReason::Undecodable { at } => write!(
                f,
                "cannot be reached: the bytes at +{at} do not decode as an x86-64 instruction"
            ),
            RefuseReason::EmulatePrefix { insn } => write!(
                f,
                "carries a Xen/KVM emulate prefix ({}), which kprobes cannot copy",
                insn.text()
            ),
            RefuseReason::MasksExceptions { insn } => write!(
                f,
                "loads %ss ({}), which kprobes cannot single-step",
                insn.text()
            ),
            RefuseReason::CannotEmulate { insn } => write!(
                f,
                "is an instruction kprobes cannot emulate ({})",
                insn.text()
            ),
            RefuseReason::NotFunctionEntry { endbr: false } => {
                f.write_str("is not the function entry; a return probe goes at +0")
            }
            RefuseReason::NotFunctionEntry { endbr: true } => f.write_str(
                "is not the function entry; a return probe goes at +0 (moved past ENDBR64 to +4)",
            ),
        }
    }

    /// The arm64 kprobe refusals' part of the sentence.
    fn write_arm64_predicate(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::Misaligned => {
                f.write_str("is not 4-byte aligned (arm64 instructions are 4 bytes)")
            }
            RefuseReason::Arm64Instruction { insn, refusal } => write!(
                f,
                "is {}, which arm64 kprobes refuse: {}",
                insn.text(),
                refusal.why()
            ),
            RefuseReason::AtomicSequence { insn, load } => write!(
                f,
                "({}) is inside the exclusive sequence opened by {} at +{}, which arm64 kprobes refuse: a single-step there would make the store-exclusive fail every time",
                insn.text(),
                load.text(),
                load.offset()
            ),
            RefuseReason::FtraceCallSite { site } => write!(
                f,
                "is the ftrace call site ({}), where arm64 kernels put no kprobe (they have no kprobes-on-ftrace); +0 fires at the same moment",
                site.text()
            ),
            // write_predicate routes only the arm64 reasons here.
            _ => Ok(()),
        }
    }

    /// The uprobe refusals' part of the sentence.
    fn write_uprobe_predicate(&self, offset: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::UprobeInstruction { insn, rule } => write!(
                f,
                "is {}, which uprobes refuse: {}",
                insn.text(),
                rule.why()
            ),
            RefuseReason::UprobeUndecodable { at } if *at == offset => {
                f.write_str("does not decode as an x86-64 instruction")
            }
            RefuseReason::UprobeUndecodable { at } => write!(
                f,
                "cannot be checked: the bytes at +{at} do not decode as an x86-64 instruction, so no instruction boundary past them is known"
            ),
            // write_predicate routes only the uprobe reasons here.
            _ => Ok(()),
        }
    }
}

/// The nearest offsets, before and after some offset, where an entry probe
/// is accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Nearby {
    /// The largest accepted offset below it.
    pub before: Option<u64>,
    /// The smallest accepted offset above it.
    pub after: Option<u64>,
}

impl Nearby {
    fn write_suffix(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.before, self.after) {
            (None, None) => Ok(()),
            (Some(b), None) => write!(f, "; valid nearby: +{b}"),
            (None, Some(a)) => write!(f, "; valid nearby: +{a}"),
            (Some(b), Some(a)) => write!(f, "; valid nearby: +{b}, +{a}"),
        }
    }
}

/// A probe the kernel would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The offset asked about.
    pub offset: u64,
    /// Why.
    pub reason: RefuseReason,
    /// Accepted entry-probe offsets around it (empty for a return probe
    /// away from the entry, whose only place is the entry).
    pub nearby: Nearby,
}

impl Refusal {
    /// The error number the kernel returns.
    pub fn errno(&self) -> Errno {
        self.reason.errno()
    }
}

/// What the kernel does with a probe at one offset of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Accepted; the kernel plants an int3 at `at`.
    Accept {
        /// The offset asked about.
        offset: u64,
        /// Where the probe really goes: `offset`, or +4 for offset 0 of a
        /// function that starts with ENDBR.
        at: u64,
    },
    /// Accepted on the ftrace site at the entry; the kernel makes it an
    /// ftrace-based kprobe (`KPROBE_FLAG_FTRACE`).
    AcceptFtraceSite {
        /// The offset asked about.
        offset: u64,
        /// Where the probe really goes (the ftrace site).
        at: u64,
    },
    /// Refused.
    Refuse(Refusal),
    /// The offset is not inside the function. The kernel would re-base
    /// `sym+off` onto whatever symbol holds that address, so there is no
    /// single answer; a planner should treat it as a user error.
    OutsideFunction {
        /// The offset asked about.
        offset: u64,
        /// The function's size in bytes.
        size: u64,
    },
}

impl Verdict {
    /// The offset asked about.
    pub fn offset(&self) -> u64 {
        match self {
            Verdict::Accept { offset, .. }
            | Verdict::AcceptFtraceSite { offset, .. }
            | Verdict::OutsideFunction { offset, .. } => *offset,
            Verdict::Refuse(r) => r.offset,
        }
    }

    /// True when the kernel would accept the probe.
    pub fn is_accepted(&self) -> bool {
        matches!(
            self,
            Verdict::Accept { .. } | Verdict::AcceptFtraceSite { .. }
        )
    }

    /// Where an accepted probe really goes (after the ENDBR adjustment).
    pub fn probed_offset(&self) -> Option<u64> {
        match self {
            Verdict::Accept { at, .. } | Verdict::AcceptFtraceSite { at, .. } => Some(*at),
            _ => None,
        }
    }

    /// The error number of a refused probe.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Verdict::Refuse(r) => Some(r.errno()),
            _ => None,
        }
    }

    /// A sentence naming the probe as `symbol+offset`, e.g.
    /// `do_sys_openat2+3 falls inside the 5-byte ftrace NOP at +0; valid
    /// nearby: +0, +5`. Offsets are decimal, as the probe grammar reads
    /// them.
    pub fn describe<'a>(&'a self, symbol: &'a str) -> DescribedVerdict<'a> {
        DescribedVerdict {
            verdict: self,
            symbol,
        }
    }
}

/// A [`Verdict`] with the symbol it is about, for display.
#[derive(Debug, Clone, Copy)]
pub struct DescribedVerdict<'a> {
    verdict: &'a Verdict,
    symbol: &'a str,
}

impl fmt::Display for DescribedVerdict<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sym = self.symbol;
        let off = self.verdict.offset();
        write!(f, "{sym}+{off} ")?;
        match self.verdict {
            Verdict::Accept { offset, at } if offset == at => {
                f.write_str("is an instruction boundary and can be probed")
            }
            Verdict::Accept { at, .. } => {
                write!(f, "is moved past ENDBR64 to +{at} and can be probed")
            }
            Verdict::AcceptFtraceSite { offset, at } if offset == at => {
                f.write_str("is the ftrace site and is probed through ftrace")
            }
            Verdict::AcceptFtraceSite { at, .. } => write!(
                f,
                "is moved past ENDBR64 to the ftrace site at +{at} and is probed through ftrace"
            ),
            Verdict::OutsideFunction { size, .. } => {
                write!(f, "is past the end of the function ({size} bytes)")
            }
            Verdict::Refuse(r) => {
                r.reason.write_predicate(off, f)?;
                r.nearby.write_suffix(f)
            }
        }
    }
}

/// Displays the sentence with an empty symbol name (`+3 falls inside ...`).
impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe("").fmt(f)
    }
}
