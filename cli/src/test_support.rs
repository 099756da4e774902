//! What the CLI's unit tests share: a small kallsyms and plans made
//! against it.

use kprobe_perf_engine::plan::{self, BackendChoice};
use kprobe_perf_engine::{Arch, KernelSymbols, ProbePlan, ProbeSpec};

/// `_text`, `do_sys_openat2` at 0xffffffff812345a0 and `do_sys_open` at
/// 0xffffffff81234690.
pub(crate) fn open_symbols() -> KernelSymbols {
    KernelSymbols::parse(
        "ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\nffffffff81234690 T do_sys_open\n",
    )
    .unwrap()
}

/// `spec` planned for x86_64 against `symbols` with `choice`.
pub(crate) fn planned(spec: &str, symbols: &KernelSymbols, choice: BackendChoice) -> ProbePlan {
    plan::resolve(
        ProbeSpec::parse(spec, Arch::X86_64).unwrap(),
        symbols,
        Arch::X86_64,
        choice,
    )
    .unwrap()
}
