//! What the workspace's tests, fuzzers and benchmarks use beyond the
//! public API (the `test-util` feature): not for embedders, and not
//! stable.

pub use crate::attach::{ring, sys};
pub use crate::plan::probes::{plan_probes, plan_probes_with};
