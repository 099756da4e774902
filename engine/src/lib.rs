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
//!
//! # Features
//!
//! None is on by default; the default build pulls no async runtime, no
//! argument parser, no JSON and no SVG drawing.
//!
//! - `tokio`: `AsyncSession`, a session awaited on tokio's reactor,
//!   with no `unsafe` in the embedder's code.
//! - `flamegraph`: `analysis::FoldedStacks::flamegraph`, SVG flame
//!   graphs drawn with inferno.
//! - `cli`: makes public the modules the `kprobe-perf` command opens by
//!   name (`kernel`, `plan`, `cpus`, `os`, `tracefs`, `records`,
//!   `counting`). Hidden from this documentation and unstable: not part
//!   of the embedding API, and free to change in any release.
//! - `test-util` (implies `cli`): makes public the syscall layer, the
//!   ring reader and sample-record builders, for the workspace's tests,
//!   fuzzers and benchmarks. Hidden and unstable as `cli` is.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
// docs.rs (`--cfg docsrs`): each item gated on a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

// One module per stage. Data flows plan -> kernel -> attach -> decode ->
// session -> analysis, perfdata (error wraps the errors of plan, kernel
// and attach; stack names the frames decode reads); each stage imports
// only from the stages before it and from the crates below the engine.
// The stages are private: an embedder uses the names at the root and the
// public modules below; the CLI uses `cli` too.
pub mod analysis;
mod attach;
pub mod cli;
mod decode;
mod error;
mod kernel;
pub mod perfdata;
mod plan;
mod session;
pub mod stack;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod testing;

/// The probe language, from its own pure crate (`kprobe-perf-spec`).
pub use kprobe_perf_spec as spec;

// What an embedder uses, at the crate root.
pub use analysis::calltree::{
    CallEvent, CallSite, CallTree, CallTreeBuilder, CallTreeOptions, ReturnKind, TracedFunction,
};
pub use attach::error::AttachError;
pub use attach::guardian::{Guardian, GuardianError};
pub use attach::options::{SessionOptions, DEFAULT_MMAP_PAGES};
pub use attach::target::{CommandScope, RecordTarget};
pub use attach::tracefs::TracefsError;
pub use decode::frames::StackFrame;
pub use decode::{AddressSet, Event, Handed, IntEvent, Value};
pub use error::Error;
pub use kernel::{GlobOptions, Kernel, KernelError, KernelOptions};
pub use kprobe_perf_arch::Arch;
pub use kprobe_perf_symbols::KernelSymbols;
pub use plan::filter::FilterRuns;
pub use plan::{BackendChoice, PlanError, ProbePlan};
pub use session::boot::{read_boot_probes, BootRecording};
pub use session::counting::CountingSession;
pub use session::eprobe::{EventProbeSession, EventProbeSummary, FtraceEvent};
pub use session::sink::{sink_fn, EventSink, Flow};
pub use session::summary::Summary;
/// A session awaited on tokio's reactor (feature `tokio`).
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use session::tokio::AsyncSession;
pub use session::{CallCounts, Session, SessionStats, Throttling};
pub use spec::ProbeSpec;
pub use stack::StackSymbolizer;
