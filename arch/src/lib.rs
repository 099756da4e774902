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
