//! kprobe-perf engine: dynamic kernel probes through perf_event_open.
//!
//! The path of a probe: [`spec`] parses a kprobe_events definition,
//! [`plan`] resolves it against the kernel's symbols and the architecture's
//! registers, [`session`] opens it through the kprobe PMU on every CPU (or
//! for one process) and reads the per-CPU rings, and [`decode`] turns each
//! sample into an [`Event`], handed to an [`EventSink`] given to each
//! drain. With [`SessionOptions::with_call_graph`] each event also
//! carries its callchain ([`Event::callchain`]), which
//! [`stack::StackSymbolizer`] names. See `examples/record.rs` for an
//! embedding, and
//! `examples/tokio_record.rs` for a session in a tokio task.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]

// The stages, in the order data flows through them; each imports only
// from those before it (and from the crates below the engine).
pub mod analysis;
mod attach;
pub mod decode;
pub mod error;
pub mod kernel;
pub mod perfdata;
pub mod plan;
pub mod session;
pub mod stack;

/// The probe language, from its own pure crate (`kprobe-perf-spec`).
pub use kprobe_perf_spec as spec;

// The modules' paths from before the crate was arranged by stage.
pub use attach::attr::ask_kernel;
pub use attach::{cpus, guardian, os, pmu, process, target, tracefs};
#[cfg(feature = "test-util")]
pub use attach::{ring, sys};
pub use decode::records;
pub use kernel::{kcore, preflight, select};
pub use plan::{entry_join, filter};
pub use session::{counting, sink, summary};

pub use decode::{Event, Value};
pub use error::Error;
pub use kernel::{Kernel, KernelOptions};
pub use kprobe_perf_arch::Arch;
pub use kprobe_perf_symbols::KernelSymbols;
pub use plan::ProbePlan;
pub use session::{CallCounts, Session, SessionOptions, SessionStats, Throttling};
pub use sink::{sink_fn, EventSink};
pub use spec::ProbeSpec;
pub use summary::Summary;
pub use target::{CommandScope, RecordTarget};

/// Parses and plans probe definitions for this machine's architecture,
/// choosing the backend of each automatically (see [`plan_probes_with`]).
///
/// `symbols` may be empty (kallsyms unreadable); names are then left for
/// the kernel to check.
pub fn plan_probes<S: AsRef<str>>(
    specs: &[S],
    symbols: &KernelSymbols,
) -> Result<Vec<ProbePlan>, Error> {
    plan_probes_with(specs, symbols, plan::BackendChoice::Auto)
}

/// As [`plan_probes_with`], each definition with its filter (`None`: no
/// filter) in the kernel's ftrace grammar (see [`filter`]). A filter is
/// checked against its probe's arguments before anything is opened (a
/// refusal has a caret under the token). With
/// [`Auto`](plan::BackendChoice::Auto), a probe whose filter the kernel
/// could run only on a tracefs-defined event (it tests an argument, which
/// a PMU probe's record does not carry) goes through tracefs, so that the
/// kernel drops what the filter rejects before it reaches the ring.
pub fn plan_probes_filtered<S: AsRef<str>, F: AsRef<str>>(
    specs: &[(S, Option<F>)],
    symbols: &KernelSymbols,
    choice: plan::BackendChoice,
) -> Result<Vec<ProbePlan>, Error> {
    let texts: Vec<&str> = specs.iter().map(|(s, _)| s.as_ref()).collect();
    let plans = plan_probes_with(&texts, symbols, choice)?;
    let arch = Arch::host().ok_or(Error::UnsupportedArch)?;
    plans
        .into_iter()
        .zip(specs)
        .map(|(plan, (text, filter))| {
            let Some(filter) = filter else {
                return Ok(plan);
            };
            let refused = |error| Error::Filter {
                probe: text.as_ref().to_string(),
                error,
            };
            let event = plan.event.clone();
            let plan = plan.with_filter(filter.as_ref()).map_err(refused)?;
            let in_kernel = plan.filter.as_ref().is_some_and(|f| f.in_kernel());
            if in_kernel
                || choice != plan::BackendChoice::Auto
                || plan.backend != plan::Backend::Pmu
                || plan.entry_join.is_some()
            {
                return Ok(plan);
            }
            // Through tracefs, the record carries the arguments.
            let spec = ProbeSpec::parse(text.as_ref(), arch)?;
            let Ok(mut traced) = plan::resolve(spec, symbols, arch, plan::BackendChoice::Tracefs)
            else {
                return Ok(plan);
            };
            traced.event = event;
            let traced = traced.with_filter(filter.as_ref()).map_err(refused)?;
            Ok(if traced.filter.as_ref().is_some_and(|f| f.in_kernel()) {
                traced
            } else {
                plan
            })
        })
        .collect()
}

/// From this many kernel probes on, [`plan_probes_with`] puts every kernel
/// probe on the tracefs route when the choice is
/// [`Auto`](plan::BackendChoice::Auto).
pub const BULK_THROUGH_TRACEFS: usize = 64;

/// As [`plan_probes`], with an explicit backend choice. With
/// [`Auto`](plan::BackendChoice::Auto) and at least
/// [`BULK_THROUGH_TRACEFS`] kernel probes, all kernel probes go through
/// tracefs. Event names that repeat get a `_2`, `_3` ... suffix so each
/// probe stays distinct. The plans are the user's probes only, in order:
/// the calls a PMU kretprobe saw enter but not return are counted by the
/// [`Session`] itself ([`Session::call_counts`]).
pub fn plan_probes_with<S: AsRef<str>>(
    specs: &[S],
    symbols: &KernelSymbols,
    choice: plan::BackendChoice,
) -> Result<Vec<ProbePlan>, Error> {
    let arch = Arch::host().ok_or(Error::UnsupportedArch)?;
    let parsed = specs
        .iter()
        .map(|s| ProbeSpec::parse(s.as_ref(), arch))
        .collect::<Result<Vec<ProbeSpec>, _>>()?;
    let is_kernel = |s: &ProbeSpec| !matches!(s.target, spec::Target::User { .. });
    // Many kernel probes at once go through tracefs under `auto`: one
    // kernel kprobe per function, shared by every CPU's event, where the
    // PMU registers one per CPU and fd; detaching 1,000 is ~40% faster.
    let bulk = choice == plan::BackendChoice::Auto
        && parsed.iter().filter(|s| is_kernel(s)).count() >= BULK_THROUGH_TRACEFS;
    parsed
        .into_iter()
        .map(|spec| {
            let choice = if bulk && is_kernel(&spec) {
                plan::BackendChoice::Tracefs
            } else {
                choice
            };
            Ok(plan::resolve(spec, symbols, arch, choice)?)
        })
        .collect::<Result<Vec<ProbePlan>, Error>>()
        .map(|mut plans| {
            let mut seen = std::collections::HashMap::<String, usize>::new();
            for p in &mut plans {
                let n = seen.entry(p.event.clone()).or_insert(0);
                *n += 1;
                if *n > 1 {
                    p.event = format!("{}_{n}", p.event);
                }
            }
            plans
        })
}
