//! From a parsed probe to what the kernel is asked for: where the probe goes,
//! which registers a sample must carry, and how each argument is decoded.
//! Every mistake a user can make is reported here, before any fd is opened.

pub mod entry_join;
pub mod filter;
pub(crate) mod probes;
pub mod sdt;
pub mod uprobe;
pub(crate) mod user_source;

mod probe_plan;
mod resolve;

pub use kprobe_perf_spec::KernelFeatures;
pub use probe_plan::{
    return_trampoline, tracefs_reason, ArgPlan, ArgSource, AttachPoint, Backend, BackendChoice,
    PlanError, ProbePlan,
};
pub use resolve::{resolve, resolve_with, running_kernel_features, TRACEFS_ROOTS};

/// For the engine's unit tests: `spec` planned for the PMU on x86_64
/// against `kallsyms` (a /proc/kallsyms text).
#[cfg(test)]
pub(crate) fn planned_for_pmu(spec: &str, kallsyms: &str) -> ProbePlan {
    let syms = kprobe_perf_symbols::KernelSymbols::parse(kallsyms).unwrap();
    resolve(
        kprobe_perf_spec::ProbeSpec::parse(spec, kprobe_perf_arch::Arch::X86_64).unwrap(),
        &syms,
        kprobe_perf_arch::Arch::X86_64,
        BackendChoice::Pmu,
    )
    .unwrap()
}
