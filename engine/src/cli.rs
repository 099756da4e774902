//! What the `kprobe-perf` command line uses beyond the embedding API at
//! the crate root: the planning and kernel stages it opens by name (its
//! listings, globs, preflight and source-level probes), the system facts
//! it prints (CPUs, page size, capabilities), the tracefs control path of
//! its cleanup, the ring's records its sinks take, and counting sessions.
//!
//! **Unstable.** This module is the CLI's, and changes with it: nothing
//! here is part of the embedding API, whose names are at the crate root.
//! An embedder plans through [`Kernel`](crate::Kernel) and opens through
//! [`Session`](crate::Session).

/// The kernel stage: symbols, images, text, globs, preflight, debug files.
pub mod kernel {
    pub use crate::kernel::*;
}

/// The planning stage: plans, backends, filters, USDT notes, uprobes.
pub mod plan {
    pub use crate::plan::*;
}

pub use crate::attach::{cpus, os, tracefs};
pub use crate::decode::records;
pub use crate::session::counting;
