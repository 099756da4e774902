//! What the workspace's tests, fuzzers and benchmarks use beyond the
//! public API (the `test-util` feature): not for embedders, and not
//! stable. Each name here is crate-private without the feature; the
//! feature makes just these `pub` (`visibility::make`), so the stages
//! stay private and nothing else of them is reachable.

pub use crate::attach::attr::ask_kernel;
pub use crate::attach::error::Privilege;
pub use crate::attach::pmu::{check_capabilities, preflight};
pub use crate::plan::probes::{plan_probes, plan_probes_with};

/// The dynamic probe PMUs, as sysfs describes them.
pub mod pmu {
    pub use crate::attach::pmu::ProbePmu;
}

/// The syscall layer, for tests that open perf events by hand.
pub mod sys {
    pub use crate::attach::sys::{enable, gettid, perf_event_open, ATTR_SIZE};
    pub use perf_event_open_sys::bindings::perf_event_attr;
}

/// The kernel's live text (`/proc/kcore`) and a matched vmlinux's.
pub mod kcore {
    pub use crate::kernel::kcore::{ImageText, Kcore, TextSources};
}
