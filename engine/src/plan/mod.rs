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
