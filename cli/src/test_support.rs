//! What the CLI's unit tests share: a small kallsyms and plans made
//! against it.

use kprobe_perf_engine::cli::plan::{self, BackendChoice};
use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Arch, Event, IntEvent, KernelSymbols, ProbePlan, ProbeSpec, Value};

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

/// The integers and their types of `e` when the ordering queue would hand
/// it over as an [`IntEvent`] (an entry hit whose arguments are all
/// integers), for `f` to format.
pub(crate) fn as_int_event<R>(e: &Event, f: impl FnOnce(&IntEvent<'_>) -> R) -> Option<R> {
    let parts: Option<(Vec<u64>, Vec<BaseType>)> = e
        .args
        .iter()
        .map(|v| match v {
            Value::Int { raw, ty } => Some((*raw, *ty)),
            _ => None,
        })
        .collect();
    let (ints, kinds) = parts.filter(|_| e.ret_addr.is_none())?;
    Some(f(&IntEvent {
        probe: e.probe,
        cpu: e.cpu,
        pid: e.pid,
        tid: e.tid,
        comm: &e.comm,
        time_ns: e.time_ns,
        ip: e.ip,
        probe_addr: e.probe_addr,
        ints: &ints,
        kinds: &kinds,
    }))
}
