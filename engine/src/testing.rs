//! What the workspace's tests, fuzzers and benchmarks use beyond the
//! public API (the `test-util` feature): not for embedders, and not
//! stable.

pub use crate::attach::attr::ask_kernel;
pub use crate::attach::error::Privilege;
pub use crate::attach::pmu::{check_capabilities, preflight};
pub use crate::attach::{pmu, ring, sys};
pub use crate::kernel::kcore;
pub use crate::plan::probes::{plan_probes, plan_probes_with};
