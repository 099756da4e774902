//! x86-64: decoding with iced-x86, classifying each instruction the way the
//! kernel's `can_probe`, `__copy_instruction` and `prepare_emulation` would,
//! and printing AT&T text the way objdump does.

use iced_x86::{Code, Decoder, DecoderOptions, Formatter, GasFormatter, Instruction, Register};

use super::{FunctionText, Rules, MAX_INSN_BYTES};

/// `x86_nops[5]` on x86_64: the NOP ftrace leaves at each function entry.
const FTRACE_NOP: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// The 5-byte NOP ftrace writes on kernels before 5.13 that picked the
/// K8 NOPs at boot (`K8_NOP5_ATOMIC`, `66 66 66 66 90`, in
/// arch/x86/include/asm/nops.h; "x86: Remove dynamic NOP selection" made
/// every later kernel use the P6 one above). Seen on Debian's 5.10 under
/// QEMU's `-cpu max`.
const FTRACE_NOP_K8: [u8; 5] = [0x66, 0x66, 0x66, 0x66, 0x90];

/// `ud2` followed by the ASCII tag of a Xen or KVM emulate prefix.
const EMULATE_PREFIXES: [[u8; 5]; 2] = [
    [0x0f, 0x0b, b'x', b'e', b'n'],
    [0x0f, 0x0b, b'k', b'v', b'm'],
];

/// What the kernel makes of an instruction when a probe lands on its first
/// byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// Probed with an int3.
    Plain,
    /// The ENDBR at +0 (the kernel never probes it: +0 moves to +4).
    Endbr,
    /// The ftrace site at the entry.
    FtraceSite,
    /// `is_exception_insn`: EILSEQ.
    Exception,
    /// kCFI check refused by `can_probe`: EILSEQ.
    KcfiCheck,
    /// Emulate-prefixed instruction: EINVAL.
    EmulatePrefix,
    /// `insn_masking_exception`: EINVAL.
    MasksExceptions,
    /// `prepare_emulation`: EOPNOTSUPP.
    CannotEmulate,
    /// Refused by the uprobe layer (ENOTSUPP), uprobe rules only.
    Uprobe(super::uprobe::UprobeRule),
}

impl Class {
    /// True when an entry probe on the instruction's first byte is accepted.
    /// (The ENDBR counts through offset 0, which the layout lists itself.)
    pub(super) fn accepted(self) -> bool {
        matches!(self, Class::Plain | Class::FtraceSite)
    }
}

/// One decoded instruction in the layout's table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub(super) offset: u64,
    pub(super) len: u8,
    pub(super) class: Class,
}

impl Slot {
    /// Offset of the first byte after the instruction.
    pub(super) fn end(&self) -> u64 {
        self.offset + u64::from(self.len)
    }
}

/// The decoded table of one function.
pub(super) struct Decoded {
    pub(super) slots: Vec<Slot>,
    pub(super) endbr: bool,
    pub(super) ftrace_site: Option<u64>,
    pub(super) undecodable: Option<u64>,
}

/// `is_endbr`/`__is_endbr`: ENDBR64 or ENDBR32, or one of the 4-byte NOPs
/// IBT/FineIBT write over sealed ENDBRs (`gen_endbr_poison`: `66 0f 1f 00`
/// on 5.18 to 6.16-era kernels, `0f 1f 40 d6` later).
fn starts_with_endbr(bytes: &[u8]) -> bool {
    let Some(&[a, b, c, d]) = bytes.first_chunk::<4>() else {
        return false;
    };
    let v = u32::from_le_bytes([a, b, c, d]);
    v == 0x001f_0f66 || v == 0xd640_1f0f || (v & !0x0100_0000) == 0xfa1e_0ff3
}

/// True for the 5 bytes ftrace owns: the ideal NOP, or the `call` ftrace
/// writes over it while the function is traced.
fn is_ftrace_site(insn: &[u8]) -> bool {
    insn == FTRACE_NOP || insn == FTRACE_NOP_K8 || (insn.len() == 5 && insn.first() == Some(&0xe8))
}

/// Decodes a whole function from its first byte, as `can_probe` walks it
/// (kprobe rules), or as the program runs it (uprobe rules: no ENDBR move,
/// no ftrace site, no emulate prefixes, and the uprobe layer's refusals).
pub(super) fn decode(text: &FunctionText<'_>, rules: Rules) -> Decoded {
    let bytes = text.bytes;
    let kernel = rules == Rules::Kprobe;
    let endbr = kernel && starts_with_endbr(bytes);
    let mut slots = Vec::with_capacity(bytes.len() / 3 + 1);
    let mut undecodable = None;
    let mut decoder = Decoder::with_ip(64, bytes, text.start, DecoderOptions::NO_INVALID_CHECK);
    let mut insn = Instruction::default();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let here = &bytes[pos..];
        let prefixed = kernel && EMULATE_PREFIXES.iter().any(|p| here.starts_with(p));
        let skip = if prefixed {
            EMULATE_PREFIXES[0].len()
        } else {
            0
        };
        if prefixed || decoder.position() != pos {
            if decoder.set_position(pos + skip).is_err() {
                undecodable = Some(pos as u64);
                break;
            }
            decoder.set_ip(text.start.wrapping_add((pos + skip) as u64));
        }
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            undecodable = Some(pos as u64);
            break;
        }
        let len = skip + insn.len();
        let Ok(len8) = u8::try_from(len) else {
            undecodable = Some(pos as u64);
            break;
        };
        let class = if prefixed {
            Class::EmulatePrefix
        } else if kernel {
            classify(&here[..insn.len()], here)
        } else {
            super::uprobe::refusal(&here[..insn.len()]).map_or(Class::Plain, Class::Uprobe)
        };
        slots.push(Slot {
            offset: pos as u64,
            len: len8,
            class,
        });
        pos += len;
    }

    // The ENDBR, then the ftrace site right after it (or at +0).
    let mut entry = 0;
    if endbr {
        if let Some(first) = slots.first_mut().filter(|s| s.len == 4) {
            first.class = Class::Endbr;
        }
        entry = 4;
    }
    let mut ftrace_site = None;
    if let Some(slot) = slots
        .iter_mut()
        .find(|s| s.offset == entry)
        .filter(|_| kernel)
    {
        let at = usize::try_from(slot.offset).unwrap_or(usize::MAX);
        let insn = bytes
            .get(at..)
            .map(|b| &b[..usize::from(slot.len).min(b.len())]);
        if insn.is_some_and(is_ftrace_site) {
            slot.class = Class::FtraceSite;
            ftrace_site = Some(slot.offset);
        }
    }
    Decoded {
        slots,
        endbr,
        ftrace_site,
        undecodable,
    }
}

/// The opcode as the kernel's `struct insn` holds it: `opcode.bytes[0]`
/// and `[1]` after legacy prefixes and REX (for VEX/EVEX, the single opcode
/// byte after the VEX/EVEX prefix, with `[1]` zero), the ModRM byte that
/// follows, and whether an address-size prefix (`67`) was seen.
struct KernelOpcode {
    b0: u8,
    b1: u8,
    modrm: Option<u8>,
    addr32: bool,
}

fn kernel_opcode(insn: &[u8]) -> Option<KernelOpcode> {
    let mut i = 0;
    let mut addr32 = false;
    while let Some(&b) = insn.get(i) {
        match b {
            0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0xf0 | 0xf2 | 0xf3 => i += 1,
            0x67 => {
                addr32 = true;
                i += 1;
            }
            _ => break,
        }
    }
    if matches!(insn.get(i), Some(0x40..=0x4f)) {
        i += 1;
    }
    let vex_len = match insn.get(i)? {
        0xc5 => Some(2),
        0xc4 => Some(3),
        0x62 => Some(4),
        _ => None,
    };
    if let Some(n) = vex_len {
        let b0 = *insn.get(i + n)?;
        return Some(KernelOpcode {
            b0,
            b1: 0,
            modrm: insn.get(i + n + 1).copied(),
            addr32,
        });
    }
    let b0 = *insn.get(i)?;
    if b0 != 0x0f {
        return Some(KernelOpcode {
            b0,
            b1: 0,
            modrm: insn.get(i + 1).copied(),
            addr32,
        });
    }
    let b1 = *insn.get(i + 1)?;
    let modrm_at = if matches!(b1, 0x38 | 0x3a) {
        i + 3
    } else {
        i + 2
    };
    Some(KernelOpcode {
        b0,
        b1,
        modrm: insn.get(modrm_at).copied(),
        addr32,
    })
}

/// Classifies the instruction `insn` (its bytes), which starts `rest` (the
/// function from this instruction on), in the order the kernel checks.
fn classify(insn: &[u8], rest: &[u8]) -> Class {
    let Some(op) = kernel_opcode(insn) else {
        return Class::Plain;
    };
    // can_probe -> is_exception_insn.
    let exception = if op.b0 == 0x0f {
        matches!(op.b1, 0xff | 0xb9 | 0x0b)
    } else {
        matches!(op.b0, 0xcc | 0xcd | 0xce | 0xf1)
    };
    if exception {
        return Class::Exception;
    }
    // can_probe, CONFIG_CFI_CLANG: the movl/addl of a kCFI check, whose ud2
    // (`is_cfi_trap`) sits 12 or 6 bytes on, after a 2-byte `je`.
    let trap_at = match (op.b1, op.b0) {
        (0, 0xba) => Some(12),
        (0, 0x03) => Some(6),
        _ => None,
    };
    if let Some(t) = trap_at {
        if rest.get(t - 2..t + 2) == Some(&[0x74, 0x02, 0x0f, 0x0b][..]) {
            return Class::KcfiCheck;
        }
    }
    let modrm_reg = op.modrm.map(|m| (m >> 3) & 7);
    let modrm_mod = op.modrm.map(|m| m >> 6);
    // __copy_instruction -> insn_masking_exception: pop %ss, mov to %ss.
    if op.b0 == 0x17 || (op.b0 == 0x8e && modrm_reg == Some(2)) {
        return Class::MasksExceptions;
    }
    // prepare_emulation.
    let unsupported = match op.b0 {
        0x9a | 0xea | 0xcf => true,
        0x0f => op.b1 == 0x01 && modrm_reg == Some(0) && modrm_mod == Some(3),
        0xff => match modrm_reg {
            Some(3 | 5) => true,
            Some(2 | 4) => op.addr32 || modrm_mod != Some(3),
            _ => false,
        },
        _ => false,
    };
    if unsupported {
        Class::CannotEmulate
    } else {
        Class::Plain
    }
}

/// AT&T text of one instruction at `address`, objdump style.
pub(super) fn att_text(insn: &[u8], address: u64) -> String {
    AttPrinter::new().text(insn, address)
}

fn objdump_like(always_show_scale: bool) -> GasFormatter {
    let mut f = GasFormatter::new();
    let o = f.options_mut();
    o.set_small_hex_numbers_in_decimal(false);
    o.set_uppercase_hex(false);
    o.set_rip_relative_addresses(true);
    o.set_show_zero_displacements(true);
    o.set_space_after_operand_separator(false);
    o.set_first_operand_char_index(0);
    o.set_always_show_scale(always_show_scale);
    f
}

/// GNU-as formatting tuned to read like `objdump -d`: hex immediates and
/// displacements, `0x0(...)` when a zero displacement is encoded, the
/// `,1` scale whenever there is an index register, and `# 0xADDR` after a
/// RIP-relative operand.
pub(super) struct AttPrinter {
    plain: GasFormatter,
    scaled: GasFormatter,
}

impl AttPrinter {
    pub(super) fn new() -> AttPrinter {
        AttPrinter {
            plain: objdump_like(false),
            scaled: objdump_like(true),
        }
    }

    /// Text of the instruction in `insn` (bytes) at `address`.
    pub(super) fn text(&mut self, insn: &[u8], address: u64) -> String {
        if let Some(prefix) = EMULATE_PREFIXES.iter().find(|p| insn.starts_with(&p[..])) {
            let tag = String::from_utf8_lossy(&prefix[2..]).into_owned();
            let next = self.text(&insn[prefix.len()..], address.wrapping_add(5));
            return format!("ud2; .ascii \"{tag}\"; {next}");
        }
        let n = insn.len().min(MAX_INSN_BYTES);
        let mut decoder =
            Decoder::with_ip(64, &insn[..n], address, DecoderOptions::NO_INVALID_CHECK);
        let decoded = decoder.decode();
        if decoded.is_invalid() {
            return "(bad)".to_string();
        }
        let mut out = String::new();
        let formatter = if decoded.memory_index() != Register::None {
            &mut self.scaled
        } else {
            &mut self.plain
        };
        formatter.format(&decoded, &mut out);
        // Current objdump prints near indirect branches through memory
        // without the `q` suffix (`call *(%rax)`), as it does direct ones.
        if matches!(decoded.code(), Code::Call_rm64 | Code::Jmp_rm64) {
            if let Some(rest) = out
                .strip_prefix("callq ")
                .or_else(|| out.strip_prefix("jmpq "))
            {
                let mnemonic = if decoded.code() == Code::Call_rm64 {
                    "call"
                } else {
                    "jmp"
                };
                out = format!("{mnemonic} {rest}");
            }
        }
        if decoded.is_ip_rel_memory_operand() {
            out.push_str(&format!(" # 0x{:x}", decoded.ip_rel_memory_address()));
        }
        out
    }
}
