//! Per-architecture facts kprobe-perf needs and no I/O: the names
//! kprobe_events gives registers, the `perf_regs` index the kernel uses for
//! each in `PERF_SAMPLE_REGS_INTR`, and the calling convention that maps
//! `$argN` and `$retval` to registers; and, in [`boundary`], where inside a
//! function the kernel accepts a probe, decided from the function's bytes.
//!
//! ```
//! use kprobe_perf_arch::Arch;
//! let x86 = Arch::X86_64;
//! assert_eq!(x86.register("di").map(|r| r.perf_index), Some(5));
//! assert_eq!(x86.arg_register(1).map(|r| r.name), Some("di"));
//! assert_eq!(x86.retval_register().name, "ax");
//! ```
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod boundary;

/// A machine register as kprobe_events names it and perf samples it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Register {
    /// The name used after `%` in kprobe_events (`di`, `x0`).
    pub name: &'static str,
    /// Bit index in `sample_regs_intr` (the kernel's `perf_regs` enum).
    pub perf_index: u32,
}

/// An architecture kprobe-perf knows the registers and ABI of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arch {
    /// x86_64 (`arch/x86/include/uapi/asm/perf_regs.h`).
    X86_64,
    /// arm64 (`arch/arm64/include/uapi/asm/perf_regs.h`).
    Aarch64,
}

const fn reg(name: &'static str, perf_index: u32) -> Register {
    Register { name, perf_index }
}

/// x86_64 registers that `perf_event_open` accepts in `sample_regs_intr` for
/// kernel samples. DS/ES/FS/GS (12..15) are refused by the kernel and have no
/// kprobe_events meaning here; `orig_ax` has no perf index.
const X86_64_REGS: &[Register] = &[
    reg("ax", 0),
    reg("bx", 1),
    reg("cx", 2),
    reg("dx", 3),
    reg("si", 4),
    reg("di", 5),
    reg("bp", 6),
    reg("sp", 7),
    reg("ip", 8),
    reg("flags", 9),
    reg("cs", 10),
    reg("ss", 11),
    reg("r8", 16),
    reg("r9", 17),
    reg("r10", 18),
    reg("r11", 19),
    reg("r12", 20),
    reg("r13", 21),
    reg("r14", 22),
    reg("r15", 23),
];

/// Kernel argument registers on x86_64, in order.
const X86_64_ARGS: &[&str] = &["di", "si", "dx", "cx", "r8", "r9"];

const AARCH64_REGS: &[Register] = &[
    reg("x0", 0),
    reg("x1", 1),
    reg("x2", 2),
    reg("x3", 3),
    reg("x4", 4),
    reg("x5", 5),
    reg("x6", 6),
    reg("x7", 7),
    reg("x8", 8),
    reg("x9", 9),
    reg("x10", 10),
    reg("x11", 11),
    reg("x12", 12),
    reg("x13", 13),
    reg("x14", 14),
    reg("x15", 15),
    reg("x16", 16),
    reg("x17", 17),
    reg("x18", 18),
    reg("x19", 19),
    reg("x20", 20),
    reg("x21", 21),
    reg("x22", 22),
    reg("x23", 23),
    reg("x24", 24),
    reg("x25", 25),
    reg("x26", 26),
    reg("x27", 27),
    reg("x28", 28),
    reg("x29", 29),
    reg("fp", 29),
    reg("x30", 30),
    reg("lr", 30),
    reg("sp", 31),
    reg("pc", 32),
];

const AARCH64_ARGS: &[&str] = &["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"];

impl Arch {
    /// The architecture this program was compiled for, if supported.
    pub fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    /// The architecture `uname -m` (or `/proc/sys/kernel/arch`) names:
    /// `x86_64`, `aarch64` (Debian's `amd64`/`arm64` are accepted too).
    pub fn from_machine(machine: &str) -> Option<Arch> {
        match machine.trim() {
            "x86_64" | "amd64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The architecture of an ELF file's `e_machine` (62 `EM_X86_64`, 183
    /// `EM_AARCH64`).
    pub fn from_elf_machine(machine: u16) -> Option<Arch> {
        match machine {
            62 => Some(Arch::X86_64),
            183 => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The name the kernel and kprobe_events use for this architecture.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Every register that can be fetched from a kernel sample.
    pub fn registers(self) -> &'static [Register] {
        match self {
            Arch::X86_64 => X86_64_REGS,
            Arch::Aarch64 => AARCH64_REGS,
        }
    }

    /// Looks a register up by its kprobe_events name (without `%`).
    pub fn register(self, name: &str) -> Option<Register> {
        self.registers().iter().copied().find(|r| r.name == name)
    }

    /// The register holding argument `n` (1-based, as in `$argN`) at
    /// function entry, or `None` when that argument is passed on the stack.
    pub fn arg_register(self, n: u32) -> Option<Register> {
        let names = match self {
            Arch::X86_64 => X86_64_ARGS,
            Arch::Aarch64 => AARCH64_ARGS,
        };
        let idx = usize::try_from(n.checked_sub(1)?).ok()?;
        names.get(idx).and_then(|name| self.register(name))
    }

    /// The register holding a function's return value at a kretprobe.
    pub fn retval_register(self) -> Register {
        match self {
            Arch::X86_64 => reg("ax", 0),
            Arch::Aarch64 => reg("x0", 0),
        }
    }

    /// The stack pointer register.
    pub fn stack_register(self) -> Register {
        match self {
            Arch::X86_64 => reg("sp", 7),
            Arch::Aarch64 => reg("sp", 31),
        }
    }

    /// The register an assembler operand names (`rax`, `eax`, `ax`, `al`,
    /// `r12d`, `r12w`, `r12b` on x86_64; `x3`, `w3`, `sp` on arm64; with
    /// or without `%`), as kprobe_events names it, and the width in
    /// bytes the operand reads: what the operands of SDT notes
    /// (`8@%rbx`, `-4@%eax`) are written in.
    pub fn assembler_register(self, name: &str) -> Option<(Register, u8)> {
        let name = name.strip_prefix('%').unwrap_or(name);
        match self {
            Arch::X86_64 => x86_64_assembler_register(name),
            Arch::Aarch64 => {
                let (width, rest) = match name.as_bytes().first() {
                    Some(b'w') => (4, &name[1..]),
                    Some(b'x') => (8, &name[1..]),
                    _ => return self.register(name).map(|r| (r, 8)),
                };
                let n: u32 = rest.parse().ok().filter(|n| *n <= 30)?;
                self.register(&format!("x{n}")).map(|r| (r, width))
            }
        }
    }

    /// The register name closest to `name` (for "did you mean" hints);
    /// among equally close names, one with the same first letter wins.
    pub fn closest_register(self, name: &str) -> Option<&'static str> {
        self.registers()
            .iter()
            .map(|r| {
                let other_initial = name.as_bytes().first() != r.name.as_bytes().first();
                (edit_distance(name, r.name), other_initial, r.name)
            })
            .filter(|(d, _, _)| *d <= 2)
            .min_by_key(|(d, other_initial, _)| (*d, *other_initial))
            .map(|(_, _, n)| n)
    }
}

/// An x86_64 assembler register name (without `%`) as kprobe_events
/// names it, with the operand's width in bytes.
fn x86_64_assembler_register(name: &str) -> Option<(Register, u8)> {
    // r8..r15 and their d/w/b forms.
    if let Some(rest) = name.strip_prefix('r') {
        let digits = rest.trim_end_matches(['d', 'w', 'b']);
        if let Ok(n) = digits.parse::<u32>() {
            let width = match &rest[digits.len()..] {
                "" => 8,
                "d" => 4,
                "w" => 2,
                "b" => 1,
                _ => return None,
            };
            return (8..=15)
                .contains(&n)
                .then(|| Arch::X86_64.register(&format!("r{n}")))
                .flatten()
                .map(|r| (r, width));
        }
    }
    // The eight legacy registers: rax eax ax al (and ah), rsi esi si sil ...
    const LEGACY: [(&str, [&str; 4]); 8] = [
        ("ax", ["rax", "eax", "ax", "al"]),
        ("bx", ["rbx", "ebx", "bx", "bl"]),
        ("cx", ["rcx", "ecx", "cx", "cl"]),
        ("dx", ["rdx", "edx", "dx", "dl"]),
        ("si", ["rsi", "esi", "si", "sil"]),
        ("di", ["rdi", "edi", "di", "dil"]),
        ("bp", ["rbp", "ebp", "bp", "bpl"]),
        ("sp", ["rsp", "esp", "sp", "spl"]),
    ];
    const WIDTHS: [u8; 4] = [8, 4, 2, 1];
    for (reg, forms) in LEGACY {
        if let Some(i) = forms.iter().position(|f| *f == name) {
            return Arch::X86_64.register(reg).map(|r| (r, WIDTHS[i]));
        }
    }
    match name {
        "rip" => Arch::X86_64.register("ip").map(|r| (r, 8)),
        _ => None,
    }
}

/// Levenshtein distance over bytes, for "did you mean" hints on short
/// ASCII names (registers here, symbols in the engine).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembler_registers_as_sdt_notes_write_them() {
        let x = Arch::X86_64;
        let reg = |n| x.assembler_register(n).map(|(r, w)| (r.name, w));
        assert_eq!(reg("%rbx"), Some(("bx", 8)));
        assert_eq!(reg("%eax"), Some(("ax", 4)));
        assert_eq!(reg("%ebp"), Some(("bp", 4)));
        assert_eq!(reg("%r12"), Some(("r12", 8)));
        assert_eq!(reg("%r12d"), Some(("r12", 4)));
        assert_eq!(reg("r15w"), Some(("r15", 2)));
        assert_eq!(reg("%dil"), Some(("di", 1)));
        assert_eq!(reg("%rsp"), Some(("sp", 8)));
        assert_eq!(reg("%rip"), Some(("ip", 8)));
        assert_eq!(reg("%r7"), None);
        assert_eq!(reg("%r16"), None);
        assert_eq!(reg("%xmm0"), None);
        let a = Arch::Aarch64;
        let reg = |n| a.assembler_register(n).map(|(r, w)| (r.name, w));
        assert_eq!(reg("x3"), Some(("x3", 8)));
        assert_eq!(reg("w19"), Some(("x19", 4)));
        assert_eq!(reg("sp"), Some(("sp", 8)));
        assert_eq!(reg("w31"), None);
    }

    #[test]
    fn x86_64_indices_match_perf_regs_h() {
        let a = Arch::X86_64;
        let idx = |n| a.register(n).map(|r| r.perf_index);
        assert_eq!(idx("ax"), Some(0));
        assert_eq!(idx("si"), Some(4));
        assert_eq!(idx("di"), Some(5));
        assert_eq!(idx("ip"), Some(8));
        assert_eq!(idx("r8"), Some(16));
        assert_eq!(idx("r15"), Some(23));
        assert_eq!(idx("ds"), None);
        assert_eq!(idx("orig_ax"), None);
    }

    #[test]
    fn x86_64_args_follow_the_kernel_abi() {
        let a = Arch::X86_64;
        let names: Vec<_> = (1..=7).map(|n| a.arg_register(n).map(|r| r.name)).collect();
        assert_eq!(
            names,
            vec![
                Some("di"),
                Some("si"),
                Some("dx"),
                Some("cx"),
                Some("r8"),
                Some("r9"),
                None
            ]
        );
        assert_eq!(a.arg_register(0), None);
    }

    #[test]
    fn aarch64_tables() {
        let a = Arch::Aarch64;
        assert_eq!(a.register("lr").map(|r| r.perf_index), Some(30));
        assert_eq!(a.register("pc").map(|r| r.perf_index), Some(32));
        assert_eq!(a.arg_register(8).map(|r| r.name), Some("x7"));
        assert_eq!(a.arg_register(9), None);
        assert_eq!(a.retval_register().name, "x0");
        // $argN is x0..x7, $retval x0, $stack sp (perf_regs index 31).
        let args: Vec<_> = (1..=8).filter_map(|n| a.arg_register(n)).collect();
        assert_eq!(
            args.iter().map(|r| r.perf_index).collect::<Vec<_>>(),
            (0..8).collect::<Vec<u32>>()
        );
        assert_eq!(
            a.stack_register(),
            Register {
                name: "sp",
                perf_index: 31
            }
        );
    }

    #[test]
    fn machine_names() {
        assert_eq!(Arch::from_machine("aarch64\n"), Some(Arch::Aarch64));
        assert_eq!(Arch::from_machine("arm64"), Some(Arch::Aarch64));
        assert_eq!(Arch::from_machine("x86_64"), Some(Arch::X86_64));
        assert_eq!(Arch::from_machine("riscv64"), None);
        assert_eq!(Arch::from_elf_machine(183), Some(Arch::Aarch64));
        assert_eq!(Arch::from_elf_machine(62), Some(Arch::X86_64));
    }

    #[test]
    fn suggestions() {
        assert_eq!(Arch::X86_64.closest_register("rx"), Some("r8"));
        assert_eq!(Arch::X86_64.closest_register("dii"), Some("di"));
        assert_eq!(Arch::X86_64.closest_register("r9x"), Some("r9"));
        assert_eq!(Arch::X86_64.closest_register("zzzzzz"), None);
    }
}
