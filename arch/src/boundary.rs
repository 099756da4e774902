//! Where a kprobe may go inside a function, decided from the function's
//! bytes alone: no I/O, no kernel. This predicts the answer
//! `perf_event_open` would give for `SYM+OFFSET` before asking it.
//!
//! The caller supplies the bytes of one function (from `/proc/kcore`, which
//! shows the live text, or from vmlinux) and its start address; the module
//! decodes them once into a sorted table ([`FunctionLayout`]) and answers
//! each offset by binary search.
//!
//! ```
//! use kprobe_perf_arch::Arch;
//! use kprobe_perf_arch::boundary::{verdict, FunctionText, ProbeSite};
//!
//! // ftrace NOP, push %rbp, mov %rsp,%rbp, pop %rbp, ret
//! let bytes = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
//! let text = FunctionText { start: 0xffff_ffff_8120_5c20, bytes: &bytes };
//! let v = verdict(Arch::X86_64, &text, 3, ProbeSite::Entry);
//! assert_eq!(
//!     v.describe("do_sys_openat2").to_string(),
//!     "do_sys_openat2+3 falls inside the 5-byte ftrace NOP at +0; valid nearby: +0, +5"
//! );
//! assert!(verdict(Arch::X86_64, &text, 5, ProbeSite::Entry).is_accepted());
//! ```
//!
//! # The kernel's rules, as modelled here
//!
//! Read from `kernel/kprobes.c`, `arch/x86/kernel/kprobes/core.c` and
//! `arch/arm64/kernel/probes/kprobes.c` (6.x trees); the function names
//! below are the kernel's.
//!
//! 1. `_kprobe_addr` re-bases `sym+off` to (containing symbol, offset) and
//!    calls `arch_adjust_kprobe_addr`. On x86 that function asks `is_endbr`
//!    whether the symbol starts with ENDBR64 (`f3 0f 1e fa`; ENDBR32 and the
//!    4-byte "poison" NOPs that IBT/FineIBT write over sealed ENDBRs,
//!    `66 0f 1f 00` and later `0f 1f 40 d6`, count too). If so, offset 0 is
//!    moved to +4 and "on function entry" means offset 0 or 4; otherwise it
//!    means offset 0. Offsets 1..3 stay where they are and fail below.
//! 2. Return probes: `register_kretprobe` calls `kprobe_on_func_entry`,
//!    which returns EINVAL for any offset that is not the entry. This comes
//!    first, so `r` at a mid-instruction offset is EINVAL, not EILSEQ.
//! 3. `check_kprobe_address_safe` → `check_ftrace_location`: an address that
//!    is exactly an ftrace site (the 5-byte `nopl 0x0(%rax,%rax,1)` at the
//!    entry, or the `call` ftrace patches into it while tracing) becomes an
//!    ftrace-based kprobe, and `arch_prepare_kprobe` is never called for it.
//!    (Without CONFIG_KPROBES_ON_FTRACE it would be EINVAL; every x86_64
//!    distribution kernel has that option.) The same function returns EINVAL
//!    for blacklisted, jump-label, static-call, BUG (`find_bug`) and
//!    `__cfi_`/`__pfx_` addresses, and `arch_prepare_kprobe` does for
//!    alternatives (`alternatives_text_reserved`); those need tables this
//!    module does not have, so the planner checks them elsewhere.
//! 4. `arch_prepare_kprobe` → `can_probe` decodes from the symbol start
//!    (`insn_decode_kernel`, with `recover_probed_instruction` reading the
//!    ftrace site as the ideal NOP) and returns false, which
//!    `arch_prepare_kprobe` turns into **EILSEQ**, when: the offset is not an
//!    instruction start (this is what offsets inside the ftrace NOP get);
//!    an instruction before it or at it does not decode; the instruction is
//!    INT3/INT n/INTO/INT1/UD0/UD1/UD2 (`is_exception_insn`, which looks at
//!    the first opcode byte after prefixes, so VEX/EVEX instructions whose
//!    opcode byte is `cc`/`cd`/`ce`/`f1` are refused too); or, on clang kCFI
//!    kernels, it is the `movl`/`addl` of a kCFI type check (`is_cfi_trap`).
//! 5. `arch_copy_kprobe` → `__copy_instruction` fails, giving **EINVAL**, for
//!    an instruction with a Xen/KVM emulate prefix (`ud2; .ascii "xen"` or
//!    `"kvm"` before it: `insn_has_emulate_prefix`) and for `mov` to `%ss`
//!    (`insn_masking_exception`).
//! 6. `prepare_emulation` returns **EOPNOTSUPP** for far call/jmp (`9a`,
//!    `ea`, `ff /3`, `ff /5`), `iret` (`cf`), VMX `0f 01` with reg 0 and
//!    mod 3 (`vmcall`, `vmlaunch`, ...), and indirect `call`/`jmp` (`ff /2`,
//!    `ff /4`) through memory or with a 32-bit address size.
//! 7. arm64 (`arch/arm64/kernel/probes/kprobes.c`, `decode-insn.c`), every
//!    refusal being **EINVAL**, in the kernel's order:
//!    - there is no ENDBR move: `sym+0` stays at +0 and return probes go
//!      only there;
//!    - `check_ftrace_location`: with `-fpatchable-function-entry=2` a
//!      traced function starts (after `bti c`, if any) with two NOPs; at
//!      boot the first becomes `mov x9, x30` and the second, the ftrace
//!      site (`ftrace_call_adjust`), becomes `bl ftrace_caller` while
//!      traced. arm64 has no kprobes-on-ftrace, so a probe exactly on that
//!      site is refused; `sym+0` is not the site and is accepted;
//!    - `arch_prepare_kprobe`: an address that is not 4-byte aligned; an
//!      address in the exception table (`search_exception_tables`: the
//!      `ldtr`/`sttr` user accesses are recognised from their encoding);
//!    - `arm_kprobe_decode_insn`: `ldr`/`ldrsw` of a literal are simulated;
//!      `arm_probe_decode_insn` single-steps what is steppable and
//!      simulates `b.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`, `adr`/`adrp`,
//!      `b`/`bl`, `br`/`blr`/`ret`; it rejects the rest: authenticated
//!      branches (`retaa`, `braa`, ...), `msr`, `mrs` of DAIF (other
//!      `mrs`, such as `mrs x0, sp_el0` for `current`, are stepped), exception-generating
//!      instructions (`brk` of BUG()/WARN(), `svc`, `hvc`, `smc`), `eret`,
//!      `hint`s outside nop/bti/pac*/xpaclri (so `autiasp`, `csdb`,
//!      `yield`), `prfm` of a literal, and exclusive loads/stores;
//!    - `is_probed_address_atomic`: looking back up to 16 instructions
//!      (never before the symbol), an exclusive load met before any
//!      exclusive store means the probe is inside an atomic sequence.
//!      Mainline before 6.15 also counted `ldar`/`stlr`/`cas*` there; the
//!      6.1 and 6.12 stable kernels Debian ships do not (a probe right
//!      after `casa` is accepted), and neither does this module.
//!
//! What the bytes cannot tell: the tables named in point 3, `notrace`
//! (`within_notrace_func` in `trace_kprobe.c` refuses, with EINVAL, any
//! function that has no ftrace site when CONFIG_KPROBE_EVENTS_ON_NOTRACE is
//! off; [`FunctionLayout::ftrace_site`] gives the bytes' hint), and live
//! text patched by other probes (an armed kprobe shows as `int3`, an
//! optimized one as a 5-byte `jmp`; the kernel undoes both before decoding,
//! this module cannot).

mod arm64;
mod uprobe;
mod verdict;
mod x86;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_arm64;

use crate::Arch;

/// Longest instruction kept: 15 bytes plus a 5-byte Xen/KVM emulate prefix.
const MAX_INSN_BYTES: usize = 20;

pub use arm64::Arm64Refusal;
pub use uprobe::UprobeRule;
pub use verdict::{DescribedVerdict, Errno, Insn, Nearby, Refusal, RefuseReason, Verdict};

/// Whose rules decide where a probe may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Rules {
    /// Kernel text and the kprobe layer (the module documentation's list).
    #[default]
    Kprobe,
    /// A user binary and the uprobe layer (see [`UprobeRule`]): no ENDBR
    /// move, no ftrace site; an offset must be an instruction start of the
    /// function's own instruction stream (the kernel does not check this)
    /// and the instruction one the uprobe layer accepts.
    Uprobe,
}

/// The machine code of one function and the address it starts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionText<'a> {
    /// Address of the first byte (the symbol's address).
    pub start: u64,
    /// The function's bytes, from the symbol to its end.
    pub bytes: &'a [u8],
}

/// Which kind of probe is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeSite {
    /// A `p` probe: fires when the instruction at the offset runs.
    Entry,
    /// An `r` probe (kretprobe): only accepted at the function entry.
    Return,
}

/// One line of a function listing (`kprobe-perf probe --lines FUNC`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsnInfo {
    /// Offset from the function start.
    pub offset: u64,
    /// Length in bytes.
    pub len: usize,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// x86-64: AT&T text as objdump prints it (`(bad)` for bytes that do
    /// not decode); arm64: the usual assembler syntax (`.inst 0x...` for a
    /// word that does not decode).
    pub text: String,
    /// The verdict for an entry probe at this offset.
    pub verdict: Verdict,
}

/// Where the kernel stands on every offset of one function: its bytes
/// decoded once into a sorted table.
#[derive(Debug, Clone)]
pub struct FunctionLayout<'a> {
    arch: Arch,
    rules: Rules,
    text: FunctionText<'a>,
    /// x86: the decoded instructions in offset order (empty on arm64).
    slots: Vec<x86::Slot>,
    /// arm64: one per 4-byte word (empty on x86).
    words: Vec<arm64::Slot>,
    /// Offsets where an entry probe is accepted, ascending.
    accepted: Vec<u64>,
    /// x86: for each slot, how many accepted offsets are <= its offset, so a
    /// refusal finds its neighbours without searching again.
    ranks: Vec<u32>,
    endbr: bool,
    ftrace_site: Option<u64>,
    undecodable: Option<u64>,
}

impl<'a> FunctionLayout<'a> {
    /// Decodes `text` under the kprobe rules.
    pub fn new(arch: Arch, text: &FunctionText<'a>) -> FunctionLayout<'a> {
        FunctionLayout::with_rules(arch, text, Rules::Kprobe)
    }

    /// Decodes `text` under `rules` (on arm64 the uprobe rules check
    /// alignment only).
    pub fn with_rules(arch: Arch, text: &FunctionText<'a>, rules: Rules) -> FunctionLayout<'a> {
        match arch {
            Arch::X86_64 => {
                let d = x86::decode(text, rules);
                let mut accepted = Vec::with_capacity(d.slots.len() + 1);
                if d.endbr {
                    accepted.push(0);
                }
                accepted.extend(
                    d.slots
                        .iter()
                        .filter(|s| s.class.accepted())
                        .map(|s| s.offset),
                );
                let mut ranks = Vec::with_capacity(d.slots.len());
                let mut seen = 0usize;
                for slot in &d.slots {
                    while accepted.get(seen).is_some_and(|&o| o <= slot.offset) {
                        seen += 1;
                    }
                    ranks.push(u32::try_from(seen).unwrap_or(u32::MAX));
                }
                FunctionLayout {
                    arch,
                    rules,
                    text: *text,
                    slots: d.slots,
                    words: Vec::new(),
                    accepted,
                    ranks,
                    endbr: d.endbr,
                    ftrace_site: d.ftrace_site,
                    undecodable: d.undecodable,
                }
            }
            Arch::Aarch64 => {
                let d = match rules {
                    Rules::Kprobe => arm64::decode(text.bytes),
                    Rules::Uprobe => arm64::aligned_only(text.bytes),
                };
                let accepted = d
                    .slots
                    .iter()
                    .filter(|s| s.class.accepted())
                    .map(|s| s.offset)
                    .collect();
                FunctionLayout {
                    arch,
                    rules,
                    text: *text,
                    slots: Vec::new(),
                    words: d.slots,
                    accepted,
                    ranks: Vec::new(),
                    endbr: false,
                    ftrace_site: d.ftrace_site,
                    undecodable: None,
                }
            }
        }
    }

    /// Whose rules the layout applies.
    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// The architecture the text was read as.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The function's size in bytes.
    pub fn size(&self) -> u64 {
        self.text.bytes.len() as u64
    }

    /// True when the function starts with ENDBR (or a poisoned ENDBR), so
    /// the kernel moves `sym+0` to +4.
    pub fn has_endbr(&self) -> bool {
        self.endbr
    }

    /// The offset where the kernel puts `sym+0` and where return probes go.
    pub fn entry(&self) -> u64 {
        if self.endbr {
            4
        } else {
            0
        }
    }

    /// Offset of the ftrace site at the entry, if the bytes show one (x86:
    /// the 5-byte NOP or call; arm64: the second patchable NOP or `bl`).
    /// `None` hints at a `notrace` function, which kprobe events refuse
    /// unless CONFIG_KPROBE_EVENTS_ON_NOTRACE is set.
    pub fn ftrace_site(&self) -> Option<u64> {
        self.ftrace_site
    }

    /// What the kernel does with a probe of `kind` at `offset`.
    pub fn verdict(&self, offset: u64, kind: ProbeSite) -> Verdict {
        let size = self.size();
        if offset >= size {
            return Verdict::OutsideFunction { offset, size };
        }
        let on_entry = offset == 0 || (self.endbr && offset == 4);
        if kind == ProbeSite::Return && !on_entry {
            return Verdict::Refuse(Refusal {
                offset,
                reason: RefuseReason::NotFunctionEntry { endbr: self.endbr },
                nearby: Nearby::default(),
            });
        }
        match self.arch {
            Arch::X86_64 => self.verdict_x86(offset),
            Arch::Aarch64 => self.verdict_arm64(offset),
        }
    }

    fn verdict_arm64(&self, offset: u64) -> Verdict {
        use arm64::Class;
        if !offset.is_multiple_of(4) {
            return self.refuse(offset, RefuseReason::Misaligned);
        }
        let slot = usize::try_from(offset / 4)
            .ok()
            .and_then(|i| self.words.get(i));
        let Some(slot) = slot else {
            return self.refuse(offset, RefuseReason::Misaligned);
        };
        let insn = Insn::new_arm64(&self.text, offset);
        let reason = match slot.class {
            Class::Stepped | Class::Simulated => return Verdict::Accept { offset, at: offset },
            Class::FtraceSite => RefuseReason::FtraceCallSite { site: insn },
            Class::Rejected(refusal) => RefuseReason::Arm64Instruction { insn, refusal },
            Class::InAtomicSequence(at) => RefuseReason::AtomicSequence {
                insn,
                load: Insn::new_arm64(&self.text, at),
            },
        };
        self.refuse(offset, reason)
    }

    fn refuse(&self, offset: u64, reason: RefuseReason) -> Verdict {
        Verdict::Refuse(Refusal {
            offset,
            reason,
            nearby: self.nearest_valid(offset),
        })
    }

    fn verdict_x86(&self, offset: u64) -> Verdict {
        use x86::Class;
        let at = if self.endbr && offset == 0 { 4 } else { offset };
        let size = self.size();
        if at >= size {
            return Verdict::OutsideFunction { offset: at, size };
        }
        let idx = self.slots.partition_point(|s| s.offset <= at);
        let found = idx
            .checked_sub(1)
            .and_then(|i| Some((i, *self.slots.get(i)?)))
            .filter(|(_, s)| at < s.end());
        let Some((i, slot)) = found else {
            let first_bad = self.undecodable.unwrap_or(at);
            let reason = match self.rules {
                Rules::Kprobe => RefuseReason::Undecodable { at: first_bad },
                Rules::Uprobe => RefuseReason::UprobeUndecodable { at: first_bad },
            };
            return self.refuse(offset, reason);
        };
        let insn = Insn::new(&self.text, slot.offset, slot.len);
        let reason = if slot.offset != at {
            match slot.class {
                Class::FtraceSite => RefuseReason::InsideFtraceSite { site: insn },
                Class::Endbr => RefuseReason::InsideEndbr { endbr: insn },
                _ => RefuseReason::InsideInstruction { containing: insn },
            }
        } else {
            match slot.class {
                Class::Plain | Class::Endbr => return Verdict::Accept { offset, at },
                Class::FtraceSite => return Verdict::AcceptFtraceSite { offset, at },
                Class::Exception => RefuseReason::ExceptionInstruction { insn },
                Class::KcfiCheck => RefuseReason::KcfiCheck { insn },
                Class::EmulatePrefix => RefuseReason::EmulatePrefix { insn },
                Class::MasksExceptions => RefuseReason::MasksExceptions { insn },
                Class::CannotEmulate => RefuseReason::CannotEmulate { insn },
                Class::Uprobe(rule) => RefuseReason::UprobeInstruction { insn, rule },
            }
        };
        let nearby = if offset == at {
            self.nearby_in_slot(i, slot, offset)
        } else {
            self.nearest_valid(offset)
        };
        Verdict::Refuse(Refusal {
            offset,
            reason,
            nearby,
        })
    }

    /// [`Self::nearest_valid`] for an offset inside slot `i`, from its rank.
    fn nearby_in_slot(&self, i: usize, slot: x86::Slot, offset: u64) -> Nearby {
        let Some(&rank) = self.ranks.get(i) else {
            return self.nearest_valid(offset);
        };
        let le = usize::try_from(rank).unwrap_or(usize::MAX);
        let own = slot.class.accepted() || (self.endbr && slot.offset == 0);
        let lt = if offset == slot.offset && own {
            le.saturating_sub(1)
        } else {
            le
        };
        Nearby {
            before: lt
                .checked_sub(1)
                .and_then(|j| self.accepted.get(j).copied()),
            after: self.accepted.get(le).copied(),
        }
    }

    /// Every offset where an entry probe is accepted, ascending.
    pub fn accepted_offsets(&self) -> Vec<u64> {
        self.accepted.clone()
    }

    /// The nearest offsets strictly before and after `offset` where an entry
    /// probe is accepted.
    pub fn nearest_valid(&self, offset: u64) -> Nearby {
        let below = self.accepted.partition_point(|&o| o < offset);
        let above = self.accepted.partition_point(|&o| o <= offset);
        Nearby {
            before: below
                .checked_sub(1)
                .and_then(|i| self.accepted.get(i).copied()),
            after: self.accepted.get(above).copied(),
        }
    }

    /// Every instruction with its text and entry-probe verdict (on arm64,
    /// every 4-byte word).
    pub fn instructions(&self) -> Vec<InsnInfo> {
        match self.arch {
            Arch::X86_64 => self.instructions_x86(),
            Arch::Aarch64 => self
                .text
                .bytes
                .chunks_exact(4)
                .zip((0u64..).step_by(4))
                .map(|(w, offset)| {
                    let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    InsnInfo {
                        offset,
                        len: 4,
                        bytes: w.to_vec(),
                        text: arm64::text(word, self.text.start.wrapping_add(offset)),
                        verdict: self.verdict(offset, ProbeSite::Entry),
                    }
                })
                .collect(),
        }
    }

    fn instructions_x86(&self) -> Vec<InsnInfo> {
        let mut printer = x86::AttPrinter::new();
        let mut out = Vec::with_capacity(self.slots.len() + 1);
        for slot in &self.slots {
            let insn = Insn::new(&self.text, slot.offset, slot.len);
            out.push(InsnInfo {
                offset: slot.offset,
                len: insn.size(),
                bytes: insn.bytes().to_vec(),
                text: printer.text(insn.bytes(), insn.address()),
                verdict: self.verdict(slot.offset, ProbeSite::Entry),
            });
        }
        if let Some(bad) = self.undecodable {
            let rest = usize::try_from(bad)
                .ok()
                .and_then(|b| self.text.bytes.get(b..))
                .unwrap_or(&[]);
            out.push(InsnInfo {
                offset: bad,
                len: rest.len(),
                bytes: rest.to_vec(),
                text: "(bad)".to_string(),
                verdict: self.verdict(bad, ProbeSite::Entry),
            });
        }
        out
    }
}

/// What the kernel does with a probe of `kind` at `offset` of `text`.
/// Decodes the whole function; to ask about many offsets, build a
/// [`FunctionLayout`] once.
pub fn verdict(arch: Arch, text: &FunctionText<'_>, offset: u64, kind: ProbeSite) -> Verdict {
    FunctionLayout::new(arch, text).verdict(offset, kind)
}

/// Every instruction of an x86-64 function, with its AT&T text and the
/// verdict for an entry probe at its offset.
pub fn instructions(text: &FunctionText<'_>) -> Vec<InsnInfo> {
    FunctionLayout::new(Arch::X86_64, text).instructions()
}

/// The nearest offsets before and after `offset` where an entry probe is
/// accepted, to suggest when it is refused.
pub fn nearest_valid(arch: Arch, text: &FunctionText<'_>, offset: u64) -> Nearby {
    FunctionLayout::new(arch, text).nearest_valid(offset)
}
