//! The kernel's answer to a kprobe, predicted before asking it: the
//! checks `register_kprobe` and the kprobe PMU make, in the order they make
//! them, from the kernel's symbols and the function's own bytes.
//!
//! In order (kernel/trace/trace_kprobe.c, kernel/kprobes.c, 6.x):
//!
//! 1. `within_notrace_func`: a function with no ftrace site is `notrace`,
//!    and kprobe events refuse it (EINVAL) unless the kernel was built with
//!    CONFIG_KPROBE_EVENTS_ON_NOTRACE, which distribution kernels are not.
//!    A compiler clone (`foo.isra.0`) is judged by its base `foo`.
//! 2. `check_kprobe_address_safe`: the blacklist, the entry, noinstr and
//!    kprobes sections, init text and generated code (EINVAL), and
//!    `find_bug`: a `ud2` in kernel text is a BUG()/WARN() site (EINVAL).
//! 3. `arch_prepare_kprobe`: instruction boundaries and instructions
//!    kprobes cannot handle ([`kprobe_perf_arch::boundary`]).
//!
//! Not predicted: jump-label and static-call sites and alternatives
//! (EINVAL), whose tables the kernel does not export. (On arm64 a jump
//! label is a plain `nop`; in the VM most mid-function `nop`s were
//! alternatives or padding the kernel accepts, so they are not guessed.)
//!
//! Uprobes (`check_uprobe`, in the
//! plan) are checked on the binary's own bytes: the
//! offset must be an instruction start of the function's instruction
//! stream (which the kernel does not check: an int3 planted inside an
//! instruction corrupts it in every process mapping the file), within the
//! function, an instruction the uprobe layer accepts
//! ([`kprobe_perf_arch::boundary::UprobeRule`]), 4-byte aligned on arm64,
//! and a return probe goes at the function's first byte.

use std::fmt;

use kprobe_perf_arch::boundary::{
    Errno, FunctionLayout, FunctionText, InsnInfo, ProbeSite, RefuseReason, Verdict,
};
use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::{Exclusion, KernelSymbols, Symbol};

use crate::plan::{AttachPoint, PlanError, ProbePlan};

/// Where the bytes of kernel functions come from: `/proc/kcore` (the live
/// text) or a vmlinux image.
pub trait KernelTextSource {
    /// The `len` bytes at kernel address `address`, or why they cannot be
    /// read.
    fn read_text(&self, address: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Where the bytes come from, to name in messages (`/proc/kcore`).
    fn describe(&self) -> String;
    /// The exact size of the function starting at `address` (a vmlinux's
    /// `st_size`), when this source knows it.
    fn function_size(&self, _address: u64) -> Option<u64> {
        None
    }
}

/// Largest function read for a check (larger ones are refused as
/// unknown, not guessed).
const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// One kernel function: its symbol, size and bytes.
#[derive(Debug, Clone)]
pub struct KernelFunction {
    /// The symbol.
    pub symbol: Symbol,
    /// Size in bytes (to the next symbol).
    pub size: u64,
    /// The exact size of its code (a vmlinux's `st_size`) when known; the
    /// bytes beyond it up to `size` are alignment padding.
    pub code_size: Option<u64>,
    /// The bytes, as the text source shows them.
    pub bytes: Vec<u8>,
}

impl KernelFunction {
    /// The function as [`FunctionLayout`] wants it.
    pub fn text(&self) -> FunctionText<'_> {
        FunctionText {
            start: self.symbol.address,
            bytes: &self.bytes,
        }
    }
}

/// What the kernel is predicted to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prediction {
    /// perf_event_open succeeds.
    Accept,
    /// perf_event_open fails with `errno`, for `reason` (a clause to follow
    /// `SYM+OFF`).
    Refuse {
        /// The error number.
        errno: Errno,
        /// Why, as a sentence after the probe's location.
        reason: String,
    },
}

impl Prediction {
    /// The error number, `None` when accepted.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Prediction::Accept => None,
            Prediction::Refuse { errno, .. } => Some(*errno),
        }
    }
}

/// Why a function as a whole cannot be probed, before its bytes matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionRefusal {
    /// An [`Exclusion`] the kernel enforces.
    Excluded(Exclusion),
    /// No ftrace site: `notrace`.
    Notrace {
        /// The function whose ftrace site was looked for (the base of a
        /// clone).
        checked: String,
    },
}

impl fmt::Display for FunctionRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FunctionRefusal::Excluded(x) => write!(f, "{x}"),
            FunctionRefusal::Notrace { checked } => write!(
                f,
                "{checked} has no ftrace site (it is notrace), and kprobe events refuse notrace functions unless the kernel has CONFIG_KPROBE_EVENTS_ON_NOTRACE; probe a function that calls it"
            ),
        }
    }
}

/// The checks, over one symbol table and one source of kernel text.
pub struct Preflight<'a> {
    symbols: &'a KernelSymbols,
    text: &'a dyn KernelTextSource,
    arch: Arch,
    release: Option<(u32, u32)>,
}

impl<'a> Preflight<'a> {
    /// Checks against `symbols` (with its blacklist, if set) and bytes from
    /// `text`.
    pub fn new(symbols: &'a KernelSymbols, text: &'a dyn KernelTextSource, arch: Arch) -> Self {
        Preflight {
            symbols,
            text,
            arch,
            release: None,
        }
    }

    /// Models the kernel `release` (`uname -r`, e.g. `6.1.0-56-amd64`)
    /// where its answers changed between versions; without it, the
    /// newest kernels' rules apply.
    pub fn with_release(mut self, release: &str) -> Self {
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major = parts.next().and_then(|p| p.parse().ok());
        let minor = parts.next().and_then(|p| p.parse().ok());
        self.release = major.zip(minor);
        self
    }

    /// Where the bytes come from.
    pub fn text_source(&self) -> String {
        self.text.describe()
    }

    /// The function `sym` with its bytes.
    pub fn function(&self, sym: &Symbol) -> Result<KernelFunction, PlanError> {
        let unreadable = |why: String| PlanError::Preflight {
            probe: sym.name.clone(),
            reason: why,
        };
        let loc = self
            .symbols
            .symbolize(sym.address)
            .filter(|l| l.offset == 0)
            .ok_or_else(|| unreadable("its size is unknown (no symbol follows it)".into()))?;
        if loc.size > MAX_FUNCTION_BYTES {
            return Err(unreadable(format!(
                "it spans {} bytes to the next symbol, too many for a function",
                loc.size
            )));
        }
        let len = usize::try_from(loc.size).unwrap_or(usize::MAX);
        let bytes = self
            .text
            .read_text(sym.address, len)
            .map_err(|e| unreadable(format!("its bytes cannot be read: {e}")))?;
        let code_size = self
            .text
            .function_size(sym.address)
            .filter(|&s| s <= loc.size);
        Ok(KernelFunction {
            symbol: sym.clone(),
            size: loc.size,
            code_size,
            bytes,
        })
    }

    /// Why the kernel refuses every probe on `f`, if it does.
    pub fn function_refusal(&self, f: &KernelFunction) -> Option<FunctionRefusal> {
        match self.symbols.exclusion(&f.symbol) {
            None | Some(Exclusion::ColdFragment) => {}
            Some(x) => return Some(FunctionRefusal::Excluded(x)),
        }
        // A clone is judged by its base function's ftrace site.
        if FunctionLayout::new(self.arch, &f.text())
            .ftrace_site()
            .is_some()
        {
            return None;
        }
        let base = f.symbol.name.split_once('.').map(|(b, _)| b);
        if let Some(base) = base.filter(|b| !b.is_empty()) {
            let instances = self.symbols.lookup(base);
            let pick = instances
                .iter()
                .find(|s| s.is_text() && s.module == f.symbol.module)
                .or_else(|| instances.iter().find(|s| s.is_text()));
            if let Some(b) = pick {
                let traced = self
                    .function(b)
                    .map(|bf| {
                        FunctionLayout::new(self.arch, &bf.text())
                            .ftrace_site()
                            .is_some()
                    })
                    .unwrap_or(true);
                return (!traced).then(|| FunctionRefusal::Notrace {
                    checked: base.to_string(),
                });
            }
        }
        Some(FunctionRefusal::Notrace {
            checked: f.symbol.name.clone(),
        })
    }

    /// The kernel's answer for a probe of `kind` at `offset` of `f`.
    pub fn predict(&self, f: &KernelFunction, offset: u64, kind: ProbeSite) -> Prediction {
        if let Some(r) = self.function_refusal(f) {
            return Prediction::Refuse {
                errno: Errno::Einval,
                reason: format!("is refused: {r}"),
            };
        }
        let layout = FunctionLayout::new(self.arch, &f.text());
        self.predict_in(f, &layout, offset, kind)
    }

    /// As [`Preflight::predict`] for a function already laid out (from
    /// `f`) and known not to be refused as a whole.
    pub fn predict_in(
        &self,
        f: &KernelFunction,
        layout: &FunctionLayout<'_>,
        offset: u64,
        kind: ProbeSite,
    ) -> Prediction {
        let v = layout.verdict(offset, kind);
        if self.arch == Arch::X86_64 && kind == ProbeSite::Entry {
            if let Some(p) = self.reserved_site(f, layout, &v) {
                return p;
            }
        }
        match &v {
            Verdict::Refuse(r) => {
                // `describe` says "SYM+OFF <why>"; keep the why.
                let text = v.describe("").to_string();
                Prediction::Refuse {
                    errno: r.errno(),
                    reason: text
                        .split_once(' ')
                        .map_or(text.clone(), |(_, why)| why.to_string()),
                }
            }
            Verdict::OutsideFunction { size, .. } => Prediction::Refuse {
                errno: Errno::Einval,
                reason: format!("is past the end of the function ({size} bytes)"),
            },
            _ => Prediction::Accept,
        }
    }

    /// What `check_kprobe_address_safe` refuses (EINVAL) before the
    /// instruction is looked at, recognised from the bytes: BUG()/WARN()
    /// sites (`ud2`, `find_bug`), jump-label and static-call NOPs (a 2- or
    /// 5-byte NOP away from the entry that is not alignment padding;
    /// `jump_label_text_reserved` and
    /// `static_call_text_reserved` refuse any byte of them), calls through a
    /// static-call trampoline (`__SCT__*`); and on kernels before 6.9, whose
    /// `__copy_instruction` refuses an `int3` as another subsystem's
    /// breakpoint with EINVAL where later ones answer EILSEQ.
    fn reserved_site(
        &self,
        f: &KernelFunction,
        layout: &FunctionLayout<'_>,
        v: &Verdict,
    ) -> Option<Prediction> {
        let (insn_offset, insn_len) = match v {
            Verdict::Accept { at, .. } => {
                let i = f.bytes.get(usize::try_from(*at).ok()?..)?;
                (*at, x86_len(i))
            }
            Verdict::Refuse(r) => match &r.reason {
                RefuseReason::InsideInstruction { containing } => {
                    (containing.offset(), containing.size())
                }
                RefuseReason::ExceptionInstruction { insn } => (insn.offset(), insn.size()),
                _ => return None,
            },
            _ => return None,
        };
        let start = usize::try_from(insn_offset).ok()?;
        let bytes = f.bytes.get(start..start + insn_len)?;
        let einval = |reason: String| {
            Some(Prediction::Refuse {
                errno: Errno::Einval,
                reason,
            })
        };
        let entry_site = layout.ftrace_site() == Some(insn_offset);
        // The assembler's alignment padding uses the same NOPs; it ends on
        // a 16-byte boundary (a loop or branch target), which a jump label
        // does only by chance.
        let padding = f
            .symbol
            .address
            .wrapping_add(insn_offset + insn_len as u64)
            .is_multiple_of(16);
        match bytes {
            [0x0f, 0x0b] => einval(
                "is a ud2 of a BUG()/WARN() site, which the kernel refuses (find_bug)".into(),
            ),
            [0xcc] if self.release.is_some_and(|r| r < (6, 9)) => einval(
                "is an int3, which this kernel refuses as another subsystem's breakpoint".into(),
            ),
            [0x66, 0x90] | [0x0f, 0x1f, 0x44, 0x00, 0x00] if !entry_site && !padding => einval(format!(
                "is inside the {}-byte NOP at +{insn_offset} of a jump label or static call, whose sites the kernel reserves",
                bytes.len()
            )),
            [0xe8, rel @ ..] if rel.len() == 4 => {
                let rel = i32::from_le_bytes(rel.try_into().ok()?);
                let target = f
                    .symbol
                    .address
                    .wrapping_add(insn_offset + 5)
                    .wrapping_add_signed(i64::from(rel));
                let loc = self.symbols.symbolize(target)?;
                loc.symbol.name.starts_with("__SCT__").then(|| Prediction::Refuse {
                    errno: Errno::Einval,
                    reason: format!(
                        "is inside the call at +{insn_offset} through the static-call trampoline {}, a site the kernel reserves",
                        loc.symbol.name
                    ),
                })
            }
            _ => None,
        }
    }

    /// Refuses `plan` if the kernel would: the function, then the offset.
    /// Uprobes, addresses outside any function and probes whose address
    /// kallsyms hides are left to the kernel.
    pub fn check(&self, plan: &ProbePlan) -> Result<(), PlanError> {
        let (address, offset) = match (&plan.attach, plan.resolved_address) {
            (AttachPoint::Symbol { offset, .. }, Some(address)) => (address, *offset),
            (AttachPoint::Address(a), _) => match self.symbols.symbolize(*a) {
                Some(loc) => (loc.symbol.address, loc.offset),
                None => return Ok(()),
            },
            _ => return Ok(()),
        };
        let offset = &offset;
        let Some(loc) = self.symbols.symbolize(address).filter(|l| l.offset == 0) else {
            return Ok(());
        };
        let sym = loc.symbol.clone();
        let f = self.function(&sym)?;
        let kind = if plan.is_return() {
            ProbeSite::Return
        } else {
            ProbeSite::Entry
        };
        match self.predict(&f, *offset, kind) {
            Prediction::Accept => match f.code_size {
                Some(code) if *offset >= code => Err(PlanError::PastLastInstruction {
                    function: sym.name.clone(),
                    offset: *offset,
                    code,
                }),
                _ => Ok(()),
            },
            Prediction::Refuse { errno, reason } => Err(PlanError::Preflight {
                probe: format!("{}+{offset}", sym.name),
                reason: format!(
                    "{reason} (the kernel would answer {errno}; bytes from {})",
                    self.text.describe()
                ),
            }),
        }
    }

    /// Every instruction of `f` with the verdict for an entry probe, and
    /// whether a return probe may go there: `probe --lines`.
    pub fn listing(&self, f: &KernelFunction) -> Listing {
        let layout = FunctionLayout::new(self.arch, &f.text());
        let refusal = self.function_refusal(f);
        let lines = layout
            .instructions()
            .into_iter()
            .map(|insn| {
                let entry = match &refusal {
                    Some(r) => Prediction::Refuse {
                        errno: Errno::Einval,
                        reason: format!("is refused: {r}"),
                    },
                    None => self.predict_in(f, &layout, insn.offset, ProbeSite::Entry),
                };
                let ret = refusal.is_none()
                    && self.predict_in(f, &layout, insn.offset, ProbeSite::Return)
                        == Prediction::Accept;
                let padding = f.code_size.is_some_and(|c| insn.offset >= c);
                ListingLine {
                    insn,
                    entry,
                    ret,
                    padding,
                }
            })
            .collect();
        Listing {
            name: f.symbol.name.clone(),
            address: f.symbol.address,
            size: f.size,
            code_size: f.code_size,
            source: self.text.describe(),
            refusal,
            lines,
        }
    }
}

/// One line of [`Listing`].
#[derive(Debug, Clone)]
pub struct ListingLine {
    /// The instruction and its bytes.
    pub insn: InsnInfo,
    /// What a kprobe at its offset gets.
    pub entry: Prediction,
    /// True when a kretprobe may go at its offset.
    pub ret: bool,
    /// True when the instruction lies past the function's code (by its
    /// vmlinux size): alignment padding that never runs.
    pub padding: bool,
}

/// A function's instructions with the kernel's verdict at each.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The function.
    pub name: String,
    /// Its address.
    pub address: u64,
    /// Its size (to the next symbol).
    pub size: u64,
    /// The size of its code, when a vmlinux says.
    pub code_size: Option<u64>,
    /// Where the bytes came from.
    pub source: String,
    /// Why the whole function is refused, if it is.
    pub refusal: Option<FunctionRefusal>,
    /// One per instruction.
    pub lines: Vec<ListingLine>,
}

/// Length of the x86-64 instruction at the start of `bytes` (1 when it
/// does not decode).
fn x86_len(bytes: &[u8]) -> usize {
    kprobe_perf_arch::boundary::instructions(&FunctionText {
        start: 0,
        bytes: &bytes[..bytes.len().min(15)],
    })
    .first()
    .map_or(1, |i| i.len)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(u64, Vec<u8>);

    impl KernelTextSource for Bytes {
        fn read_text(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
            let start = usize::try_from(address.wrapping_sub(self.0)).map_err(|e| e.to_string())?;
            self.1
                .get(start..start + len)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| format!("0x{address:x} is not in the test image"))
        }
        fn describe(&self) -> String {
            "the test image".into()
        }
    }

    const BASE: u64 = 0xffff_ffff_8100_0000;

    /// traced: nop5; push %rbp; mov %rsp,%rbp; ud2; pop %rbp; ret (12 bytes)
    /// untraced: push %rbp; pop %rbp; ret (at +0x10)
    fn image() -> (KernelSymbols, Bytes) {
        let mut bytes = vec![
            0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55, 0x48, 0x89, 0xe5, 0x0f, 0x0b, 0x5d, 0xc3,
        ];
        bytes.resize(0x10, 0xcc);
        bytes.extend([0x55, 0x5d, 0xc3]);
        bytes.resize(0x20, 0xcc);
        let syms = KernelSymbols::parse(&format!(
            "{:016x} T traced\n{:016x} t untraced\n{:016x} t untraced.isra.0\n{:016x} T end\n",
            BASE,
            BASE + 0x10,
            BASE + 0x18,
            BASE + 0x20
        ))
        .unwrap();
        (syms, Bytes(BASE, bytes))
    }

    fn predict(name: &str, offset: u64, kind: ProbeSite) -> Prediction {
        let (syms, text) = image();
        let p = Preflight::new(&syms, &text, Arch::X86_64);
        let sym = syms.lookup(name)[0].clone();
        let f = p.function(&sym).unwrap();
        p.predict(&f, offset, kind)
    }

    #[test]
    fn offsets_are_judged_as_the_kernel_does() {
        assert_eq!(predict("traced", 0, ProbeSite::Entry), Prediction::Accept);
        assert_eq!(predict("traced", 5, ProbeSite::Entry), Prediction::Accept);
        assert_eq!(
            predict("traced", 3, ProbeSite::Entry),
            Prediction::Refuse {
                errno: Errno::Eilseq,
                reason: "falls inside the 5-byte ftrace NOP at +0; valid nearby: +0, +5".into()
            }
        );
        assert_eq!(
            predict("traced", 9, ProbeSite::Entry).errno(),
            Some(Errno::Einval),
            "ud2 is a BUG site"
        );
        assert_eq!(
            predict("traced", 5, ProbeSite::Return).errno(),
            Some(Errno::Einval)
        );
        assert_eq!(
            predict("traced", 16, ProbeSite::Entry),
            Prediction::Refuse {
                errno: Errno::Einval,
                reason: "is past the end of the function (16 bytes)".into()
            }
        );
    }

    #[test]
    fn notrace_functions_and_their_clones_are_refused() {
        let p = predict("untraced", 0, ProbeSite::Entry);
        assert_eq!(p.errno(), Some(Errno::Einval));
        let Prediction::Refuse { reason, .. } = p else {
            unreachable!()
        };
        assert!(
            reason.starts_with("is refused: untraced has no ftrace site"),
            "{reason}"
        );
        let Prediction::Refuse { reason, .. } = predict("untraced.isra.0", 0, ProbeSite::Entry)
        else {
            panic!("clone of a notrace function accepted")
        };
        assert!(reason.contains("untraced has no ftrace site"), "{reason}");
    }

    #[test]
    fn listing_marks_each_instruction() {
        let (syms, text) = image();
        let p = Preflight::new(&syms, &text, Arch::X86_64);
        let f = p.function(syms.lookup("traced")[0]).unwrap();
        let l = p.listing(&f);
        assert_eq!(l.size, 16);
        let offsets: Vec<u64> = l.lines.iter().map(|x| x.insn.offset).collect();
        assert_eq!(&offsets[..6], &[0, 5, 6, 9, 11, 12]);
        assert!(l.lines[0].ret && !l.lines[1].ret);
        assert_eq!(l.lines[3].entry.errno(), Some(Errno::Einval));
    }
}
