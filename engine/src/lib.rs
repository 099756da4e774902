//! kprobe-perf engine: dynamic kernel probes through perf_event_open.
//!
//! The path of a probe: a [`Kernel`] parses kprobe_events definitions
//! ([`spec`]) and plans them ([`Kernel::plan`], the one way to make a
//! [`ProbePlan`]) against the kernel's symbols and the architecture's
//! registers; a [`Session`] opens them through the kprobe PMU on every
//! CPU (or for a [`RecordTarget`]) and reads the per-CPU rings, turning
//! each sample into an [`Event`] of [`Value`]s handed to the
//! [`EventSink`] given to each drain. With
//! [`SessionOptions::with_call_graph`] each event also carries its
//! callchain ([`Event::callchain`]), which [`StackSymbolizer`] names;
//! [`analysis`] turns events into latencies, counts and histograms, and
//! [`perfdata`] writes and reads perf.data files.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use kprobe_perf_engine::{
//!     sink_fn, BackendChoice, Kernel, KernelOptions, Session, SessionOptions,
//! };
//!
//! fn main() -> Result<(), kprobe_perf_engine::Error> {
//!     let kernel = Kernel::discover(KernelOptions::default())?;
//!     let plans = kernel.plan(&["r:do_sys_openat2 ret=$retval:s64"], BackendChoice::Auto)?;
//!     // What the kernel would refuse is refused before anything is opened.
//!     kernel.check(&plans)?;
//!     let mut session = Session::open(plans, SessionOptions::default())?;
//!     session.enable()?;
//!     session.poll(
//!         Some(Duration::from_secs(1)),
//!         &mut sink_fn(|e| println!("tid {} returned {:?}", e.tid, e.args[0].as_i64())),
//!     )?;
//!     session.disable()?;
//!     // The exact loss: hits the kernel counted that were not handed over.
//!     println!("lost: {:?}", session.summary().loss.count());
//!     Ok(())
//! }
//! ```
//!
//! See `examples/record.rs` for a longer embedding, and
//! `examples/tokio_record.rs` for a session in a tokio task.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]
// Without the `cli` feature the CLI's modules below are private, and what
// only the CLI reaches in them is `pub` in a private module, or unused:
// the workspace's build (the CLI turns `cli` on) lints all of it.
#![cfg_attr(
    not(feature = "cli"),
    allow(unreachable_pub, unused_imports, dead_code)
)]

// One module per stage. Data flows plan -> kernel -> attach -> decode ->
// session -> analysis, perfdata (error wraps the errors of plan, kernel
// and attach; stack names the frames decode reads); each stage imports
// only from the stages before it and from the crates below the engine.
pub mod analysis;
mod attach;
mod decode;
mod error;
// The planning and kernel stages are the CLI's to open by name (its
// listings, globs and preflight); an embedder plans through `Kernel` and
// `ProbeSpec` at the root. Public only with the `cli` feature (which the
// CLI and the workspace's tests turn on), and hidden from the
// documentation then: not part of the embedding API, and free to change.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod kernel;
#[cfg(not(feature = "cli"))]
mod kernel;
pub mod perfdata;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod plan;
#[cfg(not(feature = "cli"))]
mod plan;
mod session;
pub mod stack;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod testing;

/// The probe language, from its own pure crate (`kprobe-perf-spec`).
pub use kprobe_perf_spec as spec;

// Modules of private stages the CLI uses by name (the attach stage's
// system facts and tracefs, the ring's records, counting sessions),
// public with the `cli` feature only, as `kernel` and `plan` are.
pub use attach::error::AttachError;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub use attach::{cpus, os, tracefs};
#[cfg(feature = "cli")]
#[doc(hidden)]
pub use decode::records;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub use session::counting;

// What an embedder uses, at the crate root.
pub use analysis::calltree::{
    CallEvent, CallSite, CallTree, CallTreeBuilder, CallTreeOptions, ReturnKind, TracedFunction,
};
pub use attach::guardian::{Guardian, GuardianError};
pub use attach::target::{CommandScope, RecordTarget};
pub use decode::frames::StackFrame;
pub use decode::{AddressSet, Event, Handed, IntEvent, Value};
pub use error::Error;
pub use kernel::{GlobOptions, Kernel, KernelOptions};
pub use kprobe_perf_arch::Arch;
pub use kprobe_perf_symbols::KernelSymbols;
pub use plan::filter::FilterRuns;
pub use plan::{BackendChoice, ProbePlan};
pub use session::counting::CountingSession;
pub use session::eprobe::{EventProbeSession, EventProbeSummary, FtraceEvent};
pub use session::sink::{sink_fn, EventSink, Flow};
pub use session::summary::Summary;
/// A session awaited on tokio's reactor (feature `tokio`).
#[cfg(feature = "tokio")]
pub use session::tokio::AsyncSession;
pub use session::{
    CallCounts, Session, SessionOptions, SessionStats, Throttling, DEFAULT_MMAP_PAGES,
};
pub use spec::ProbeSpec;
pub use stack::StackSymbolizer;
