//! arm64: every instruction is one little-endian 32-bit word. Text comes
//! from yaxpeax-arm (a pure-Rust A64 decoder covering ARMv8.x and its
//! extensions); the verdicts come from the encoding masks the kernel's own
//! `aarch64_insn_is_*` helpers use (`arch/arm64/include/asm/insn.h`),
//! applied in the order of `arch_prepare_kprobe` and
//! `arm_kprobe_decode_insn` (`arch/arm64/kernel/probes/`, 6.1 to 6.14).

use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Operand};

/// `nop` (`hint #0`).
pub(super) const NOP: u32 = 0xd503_201f;
/// `mov x9, x30`: what `ftrace_init_nop` writes over the first entry NOP.
const MOV_X9_LR: u32 = 0xaa1e_03e9;

/// How many words before a probe `is_probed_address_atomic` looks at
/// (`MAX_ATOMIC_CONTEXT_SIZE`).
const ATOMIC_WINDOW: usize = 16;

/// `(mask, value)`: the word is of the kind when `word & mask == value`.
type Pattern = (u32, u32);

const B: Pattern = (0xfc00_0000, 0x1400_0000);
const BL: Pattern = (0xfc00_0000, 0x9400_0000);
const CBZ: Pattern = (0x7f00_0000, 0x3400_0000);
const CBNZ: Pattern = (0x7f00_0000, 0x3500_0000);
const TBZ: Pattern = (0x7f00_0000, 0x3600_0000);
const TBNZ: Pattern = (0x7f00_0000, 0x3700_0000);
const BCOND: Pattern = (0xff00_0010, 0x5400_0000);
const BR: Pattern = (0xffff_fc1f, 0xd61f_0000);
const BR_AUTH: Pattern = (0xfeff_f800, 0xd61f_0800);
const BLR: Pattern = (0xffff_fc1f, 0xd63f_0000);
const BLR_AUTH: Pattern = (0xfeff_f800, 0xd63f_0800);
const RET: Pattern = (0xffff_fc1f, 0xd65f_0000);
const RET_AUTH: Pattern = (0xffff_fbff, 0xd65f_0bff);
const ERET: Pattern = (0xffff_ffff, 0xd69f_03e0);
const ERET_AUTH: Pattern = (0xffff_fbff, 0xd69f_0bff);
const EXCEPTION: Pattern = (0xff00_0000, 0xd400_0000);
const HINT: Pattern = (0xffff_f01f, 0xd503_201f);
const MRS: Pattern = (0xfff0_0000, 0xd530_0000);
const MSR_IMM: Pattern = (0xfff8_f01f, 0xd500_401f);
const MSR_REG: Pattern = (0xfff0_0000, 0xd510_0000);
const ADR: Pattern = (0x9f00_0000, 0x1000_0000);
const ADRP: Pattern = (0x9f00_0000, 0x9000_0000);
const LDR_LIT: Pattern = (0xbf00_0000, 0x1800_0000);
const LDRSW_LIT: Pattern = (0xff00_0000, 0x9800_0000);
const PRFM_LIT: Pattern = (0xff00_0000, 0xd800_0000);
const EXCLUSIVE: Pattern = (0x3f80_0000, 0x0800_0000);
/// `load_ex`/`store_ex` with bit 23 in the mask (mainline 6.15, and the
/// stable 6.1 and 6.12 releases Debian ships): load-acquire/store-release
/// (`ldar`, `stlr`) and `cas*` are not exclusives. (Older masks left bit
/// 23 out; Debian 6.1.192 accepts a probe right after a `casa`, which
/// they would refuse.)
const LOAD_EX: Pattern = (0x3fc0_0000, 0x0840_0000);
const STORE_EX: Pattern = (0x3fc0_0000, 0x0800_0000);
/// Unprivileged loads and stores (`ldtr*`, `sttr*`): user-memory accesses,
/// each with an exception-table entry in kernel text.
const UNPRIVILEGED: Pattern = (0x3f20_0c00, 0x3800_0800);

fn is(word: u32, (mask, value): Pattern) -> bool {
    word & mask == value
}

/// `aarch64_insn_is_branch`.
fn is_branch(w: u32) -> bool {
    [
        B, BL, CBZ, CBNZ, TBZ, TBNZ, RET, RET_AUTH, BR, BR_AUTH, BLR, BLR_AUTH, BCOND,
    ]
    .iter()
    .any(|&p| is(w, p))
}

/// `aarch64_insn_is_steppable_hint`: `hint` immediates (CRm:op2) that are
/// safe to single-step: nop, xpaclri, pacia1716, pacib1716, paciaz,
/// paciasp, pacibz, pacibsp and the four `bti` forms.
fn is_steppable_hint(w: u32) -> bool {
    matches!(
        (w >> 5) & 0x7f,
        0 | 7 | 8 | 10 | 24 | 25 | 26 | 27 | 32 | 34 | 36 | 38
    )
}

/// `hint #32..#38` even: `bti`, `bti c`, `bti j`, `bti jc`.
fn is_bti(w: u32) -> bool {
    is(w, HINT) && matches!((w >> 5) & 0x7f, 32 | 34 | 36 | 38)
}

/// What the kernel makes of a probe on one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// Single-stepped out of line (`INSN_GOOD`).
    Stepped,
    /// Simulated in the exception handler (`INSN_GOOD_NO_SLOT`).
    Simulated,
    /// The ftrace call site (the second entry NOP, patched to `bl
    /// ftrace_caller` while traced): `check_ftrace_location` answers EINVAL,
    /// arm64 having no kprobes-on-ftrace.
    FtraceSite,
    /// Refused by `arm_probe_decode_insn` (EINVAL).
    Rejected(Arm64Refusal),
    /// An exclusive load earlier in the window with no exclusive store
    /// between (`is_probed_address_atomic`, EINVAL): offset of that load.
    InAtomicSequence(u64),
}

impl Class {
    pub(super) fn accepted(self) -> bool {
        matches!(self, Class::Stepped | Class::Simulated)
    }
}

/// Why `arm_probe_decode_insn` rejects an instruction, in its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arm64Refusal {
    /// An authenticated branch or return (`braa`, `blraa`, `retaa`, ...):
    /// not steppable and not simulated.
    AuthenticatedBranch,
    /// `msr` to a system register or PSTATE field.
    SystemRegisterWrite,
    /// `mrs` of DAIF, the interrupt mask, which single-stepping changes.
    SystemRegisterRead,
    /// `svc`, `hvc`, `smc`, `brk`, `hlt`, `dcps*` (BUG()/WARN() sites are
    /// `brk`).
    Exception,
    /// `eret`, `eretaa`, `eretab`.
    ExceptionReturn,
    /// A `hint` outside the steppable list (e.g. `autiasp`, `csdb`,
    /// `yield`, `wfe`, `esb`).
    Hint,
    /// `prfm` of a PC-relative literal: reads PC, not simulated.
    LiteralPrefetch,
    /// An exclusive load or store (`ldxr`, `stxr`, `ldaxp`, `casp`, ...).
    Exclusive,
    /// `ldtr`/`sttr`: a user-memory access, listed in the exception table
    /// (`search_exception_tables` in `arch_prepare_kprobe`).
    UserAccess,
}

impl Arm64Refusal {
    /// The sentence after "is ... which kprobes refuse:".
    pub fn why(self) -> &'static str {
        match self {
            Arm64Refusal::AuthenticatedBranch => {
                "an authenticated branch, which arm64 kprobes can neither single-step nor simulate"
            }
            Arm64Refusal::SystemRegisterWrite => {
                "an msr, which arm64 kprobes never single-step (it could change the CPU state the step relies on)"
            }
            Arm64Refusal::SystemRegisterRead => {
                "a read of DAIF (the interrupt mask), which single-stepping changes"
            }
            Arm64Refusal::Exception => {
                "an exception-generating instruction (BUG()/WARN() sites are brk)"
            }
            Arm64Refusal::ExceptionReturn => "an exception return",
            Arm64Refusal::Hint => {
                "a hint outside the list arm64 kprobes single-step (nop, bti, pac*, xpaclri)"
            }
            Arm64Refusal::LiteralPrefetch => {
                "a PC-relative prefetch, which cannot run out of line and is not simulated"
            }
            Arm64Refusal::Exclusive => {
                "an exclusive load/store, whose sequence a single-step exception would break"
            }
            Arm64Refusal::UserAccess => {
                "a user-memory access with an exception-table fixup, which kprobes refuse"
            }
        }
    }
}

/// `arm_probe_decode_insn` (with `arm_kprobe_decode_insn`'s literal loads)
/// for one word, before the atomic-sequence scan.
pub(super) fn classify(w: u32) -> Class {
    use Arm64Refusal as R;
    // aarch64_insn_is_class_branch_sys
    let steppable = if w & 0x1c00_0000 == 0x1400_0000 {
        if is_branch(w) || is(w, MSR_IMM) || is(w, MSR_REG) || is(w, EXCEPTION) {
            false
        } else if is(w, ERET) || is(w, ERET_AUTH) {
            return Class::Rejected(R::ExceptionReturn);
        } else if is(w, MRS) {
            // Steppable unless it reads DAIF, which the step itself masks
            // (aarch64_insn_extract_system_reg != AARCH64_INSN_SPCLREG_DAIF).
            (w & 0x1f_ffe0) >> 5 != 0xda11
        } else if is(w, HINT) {
            is_steppable_hint(w)
        } else {
            true
        }
    } else {
        !(is(w, LDR_LIT)
            || is(w, LDRSW_LIT)
            || is(w, ADR)
            || is(w, ADRP)
            || is(w, PRFM_LIT)
            || is(w, EXCLUSIVE))
    };
    if steppable {
        if is(w, UNPRIVILEGED) {
            return Class::Rejected(R::UserAccess);
        }
        return Class::Stepped;
    }
    let simulated = [
        BCOND, CBZ, CBNZ, TBZ, TBNZ, ADR, ADRP, B, BL, BR, BLR, RET, LDR_LIT, LDRSW_LIT,
    ]
    .iter()
    .any(|&p| is(w, p));
    if simulated {
        return Class::Simulated;
    }
    Class::Rejected(if is(w, EXCEPTION) {
        R::Exception
    } else if is(w, MSR_IMM) || is(w, MSR_REG) {
        R::SystemRegisterWrite
    } else if is(w, MRS) {
        R::SystemRegisterRead
    } else if is(w, HINT) {
        R::Hint
    } else if is(w, PRFM_LIT) {
        R::LiteralPrefetch
    } else if is(w, EXCLUSIVE) {
        R::Exclusive
    } else {
        R::AuthenticatedBranch
    })
}

/// One word of the function, classified.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub(super) offset: u64,
    pub(super) class: Class,
}

/// The words of a function, classified as the kernel would for a probe on
/// each, and the offset of the ftrace call site if the entry has one.
pub(super) struct Decoded {
    pub(super) slots: Vec<Slot>,
    pub(super) ftrace_site: Option<u64>,
}

/// Words of `bytes`, little-endian (a trailing partial word is dropped).
pub(super) fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// Where the ftrace call site is: with `-fpatchable-function-entry=2` the
/// function starts (after a `bti c`, if any) with two NOPs, the first of
/// which `ftrace_init_nop` turns into `mov x9, x30` at boot, the second
/// being the site (`ftrace_call_adjust`) that becomes `bl ftrace_caller`.
fn ftrace_site(words: &[u32]) -> Option<u64> {
    let first = if words.first().copied().is_some_and(is_bti) {
        1
    } else {
        0
    };
    let a = *words.get(first)?;
    let b = *words.get(first + 1)?;
    ((a == NOP || a == MOV_X9_LR) && (b == NOP || is(b, BL))).then_some(4 * (first as u64 + 1))
}

/// Every aligned word accepted: the uprobe rules on arm64, which check
/// alignment only.
pub(super) fn aligned_only(bytes: &[u8]) -> Decoded {
    Decoded {
        slots: (0..bytes.len() / 4)
            .map(|i| Slot {
                offset: 4 * i as u64,
                class: Class::Stepped,
            })
            .collect(),
        ftrace_site: None,
    }
}

/// Classifies every word of `bytes` under the kprobe rules.
pub(super) fn decode(bytes: &[u8]) -> Decoded {
    let ws: Vec<u32> = words(bytes).collect();
    let site = ftrace_site(&ws);
    let mut slots = Vec::with_capacity(ws.len());
    for (i, &w) in ws.iter().enumerate() {
        let offset = 4 * i as u64;
        let mut class = if Some(offset) == site {
            Class::FtraceSite
        } else {
            classify(w)
        };
        if class != Class::FtraceSite && !matches!(class, Class::Rejected(_)) {
            // is_probed_address_atomic: back from the word before, at most
            // ATOMIC_WINDOW words and never before the symbol.
            let from = i.saturating_sub(ATOMIC_WINDOW);
            for j in (from..i).rev() {
                let Some(&prev) = ws.get(j) else { break };
                if is(prev, STORE_EX) {
                    break;
                }
                if is(prev, LOAD_EX) {
                    class = Class::InAtomicSequence(4 * j as u64);
                    break;
                }
            }
        }
        slots.push(Slot { offset, class });
    }
    Decoded {
        slots,
        ftrace_site: site,
    }
}

/// System registers the kernel reads and writes often, by the name
/// assemblers use (the decoder prints the generic `s<op0>_<op1>_c<n>_c<m>_<op2>`).
const SYSTEM_REGISTERS: &[(&str, &str)] = &[
    ("s3_0_c4_c1_0", "sp_el0"),
    ("s3_3_c4_c2_1", "daif"),
    ("s3_3_c4_c2_0", "nzcv"),
    ("s3_0_c4_c2_2", "currentel"),
    ("s3_0_c4_c0_0", "spsr_el1"),
    ("s3_0_c4_c0_1", "elr_el1"),
    ("s3_0_c13_c0_4", "tpidr_el1"),
    ("s3_4_c13_c0_2", "tpidr_el2"),
    ("s3_3_c13_c0_2", "tpidr_el0"),
    ("s3_3_c13_c0_3", "tpidrro_el0"),
    ("s3_0_c13_c0_1", "contextidr_el1"),
    ("s3_0_c1_c0_0", "sctlr_el1"),
    ("s3_0_c2_c0_0", "ttbr0_el1"),
    ("s3_0_c2_c0_1", "ttbr1_el1"),
    ("s3_0_c2_c0_2", "tcr_el1"),
    ("s3_0_c5_c2_0", "esr_el1"),
    ("s3_0_c6_c0_0", "far_el1"),
    ("s3_0_c12_c0_0", "vbar_el1"),
    ("s3_0_c0_c0_0", "midr_el1"),
    ("s3_0_c0_c0_5", "mpidr_el1"),
    ("s3_3_c0_c0_1", "ctr_el0"),
    ("s3_3_c4_c4_0", "fpcr"),
    ("s3_3_c4_c4_1", "fpsr"),
    ("s3_3_c14_c0_0", "cntfrq_el0"),
    ("s3_3_c14_c0_1", "cntpct_el0"),
    ("s3_3_c14_c0_2", "cntvct_el0"),
    ("s3_0_c14_c1_0", "cntkctl_el1"),
    ("s2_0_c0_c2_2", "mdscr_el1"),
    ("s3_3_c9_c13_0", "pmccntr_el0"),
];

/// The instruction in the usual arm64 assembler syntax, PC-relative
/// targets as absolute addresses (`bl 0xffff800008012340`), or `.inst
/// 0x...` for a word that does not decode.
pub(super) fn text(word: u32, address: u64) -> String {
    let bytes = word.to_le_bytes();
    let mut reader = U8Reader::new(&bytes);
    let Ok(insn) = InstDecoder::default().decode(&mut reader) else {
        return format!(".inst 0x{word:08x}");
    };
    let mut s = insn.to_string();
    let pc_rel = insn.operands.iter().find_map(|o| match o {
        Operand::PCOffset(off) => Some(*off),
        _ => None,
    });
    for (generic, name) in SYSTEM_REGISTERS {
        if s.ends_with(generic) || s.contains(&format!("{generic},")) {
            s = s.replace(generic, name);
            break;
        }
    }
    if let Some(off) = pc_rel {
        let base = if is(word, ADRP) {
            address & !0xfff
        } else {
            address
        };
        let target = base.wrapping_add_signed(off);
        let shown = if off < 0 {
            format!("$-{:#x}", off.unsigned_abs())
        } else {
            format!("$+{off:#x}")
        };
        s = s.replace(&shown, &format!("0x{target:x}"));
    }
    s
}
