//! Answers from decoded events: histograms, entry/return latency pairing,
//! counts by key, and their text rendering.
//!
//! Everything here is pure code over [`Event`](crate::decode::Event)s: no I/O and
//! no system call, so an embedder gets the same analysis as the CLI by
//! feeding it the events a session delivers (in time order).
//!
//! - [`hist`]: [`Log2Hist`], [`LinearHist`] with count, sum, min, max,
//!   average and percentiles.
//! - [`latency`]: [`LatencyPairer`] pairs each return with its entry per
//!   thread and gives per-call durations and histograms by [`Key`].
//! - [`aggregate`]: [`Aggregator`] for `--count-by KEY,...`, `--hist ARG`
//!   and `--lhist ARG:MIN,MAX,STEP`, with the parsers of those specs.
//! - [`render`]: bpftrace-like text for histograms and count tables.
//! - [`calltree`]: [`CallTreeBuilder`] rebuilds, per thread, the call
//!   tree of each call of a root function from entries and returns, with
//!   durations, self times and the frame where an error first arose.
//! - [`FoldedStacks`]: stacks counted in the folded format flame graph
//!   tools read, and drawn as a flame graph with the `flamegraph` feature.
//!
//! Each accumulator has a `take()` that returns what it holds and starts
//! again empty, for per-interval (`-I MS`) output.
//!
//! ```
//! use std::sync::Arc;
//! use kprobe_perf_engine::analysis::{render, FunctionProbes, LatencyOptions, LatencyPairer};
//! use kprobe_perf_engine::Event;
//!
//! // Probe 0 is the entry of a function, probe 1 its return.
//! let mut pairer = LatencyPairer::new(&[FunctionProbes::new(0, 1)], LatencyOptions::default())?;
//! let event = |probe, time_ns| {
//!     let mut e = Event::default();
//!     (e.probe, e.pid, e.tid, e.comm, e.time_ns) = (probe, 42, 42, Arc::from("app"), time_ns);
//!     e
//! };
//! for (entry, ret) in [(1_000, 1_700), (5_000, 5_300), (9_000, 10_500)] {
//!     pairer.record(&event(0, entry));
//!     pairer.record(&event(1, ret));
//! }
//! let snapshot = pairer.take();
//! assert_eq!(snapshot.functions[0].paired, 3);
//! assert_eq!(
//!     render::render_latency(&snapshot, &["my_func"]),
//!     "my_func: count 3, avg 833.3ns, min 300ns, p50 700ns, p90 1500ns, p99 1500ns, \
//!      p99.9 1500ns, max 1500ns\n\
//!      [256, 512) 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
//!      [512, 1K)  1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
//!      [1K, 2K)   1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
//! );
//! # Ok::<(), kprobe_perf_engine::analysis::AnalysisError>(())
//! ```

pub mod aggregate;
pub mod calltree;
mod folded;
pub mod hist;
pub mod latency;
pub mod render;

mod key;

pub use aggregate::{
    parse_count_by, parse_hist, parse_lhist, parse_linear, AggregateSnapshot, Aggregator, ArgField,
    ArgHists, ArgKind, CountBy, CountKey, CountRow, CountTable, HistBy, ProbeFields, ProbeHist,
};
pub use calltree::{
    errno_name, functions_from_note, functions_note, CallError, CallEvent, CallProbes, CallSite,
    CallTree, CallTreeBuilder, CallTreeOptions, Frame, FunctionTime, Missing, ReturnKind,
    TracedFunction, FUNCTIONS_NOTE, LOST_NOTE,
};
#[cfg(feature = "flamegraph")]
pub use folded::FlameGraphError;
pub use folded::FoldedStacks;
pub use hist::{
    Bucket, Hist, HistError, HistShape, LinearHist, LinearRange, Log2Hist, Percentiles,
};
pub use key::KeyPart;
pub use latency::{
    parse_duration, Call, FrameMatch, FunctionLatency, FunctionProbes, Key, KeyedHist,
    LatencyOptions, LatencyPairer, LatencySnapshot, TimeUnit,
};

/// Why an analysis cannot be set up as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnalysisError {
    /// A histogram's bounds are wrong.
    #[error(transparent)]
    Hist(#[from] HistError),
    /// A list of count keys with nothing in it.
    #[error("a count needs at least one key: comm, pid, tid, cpu, probe or an argument name")]
    EmptyKeyList,
    /// A key that is neither a built-in key nor an argument of a probe.
    #[error(
        "unknown key {key:?} in {option}: the keys are {builtins}, or an argument name \
         ({arguments})"
    )]
    UnknownKey {
        /// What the key was given for (`the count keys`).
        option: &'static str,
        /// The key as given.
        key: String,
        /// The built-in keys of that option.
        builtins: &'static str,
        /// The arguments of each probe, as `probe: a, b; probe2: c`
        /// (`none` when no probe has arguments).
        arguments: String,
    },
    /// A histogram's argument that no probe has.
    #[error(
        "no probe has an argument named {name:?} for {option}; the arguments are: {arguments}"
    )]
    UnknownArgument {
        /// The histogram (`a log2 histogram`, `a linear histogram`).
        option: &'static str,
        /// The name as given.
        name: String,
        /// The arguments of each probe, as in [`AnalysisError::UnknownKey`].
        arguments: String,
    },
    /// A histogram over an argument that is not a number.
    #[error(
        "{option} of {name}: argument {name} of probe {probe} is a {kind}, not a number; a \
         histogram needs an integer argument (count its values by {name} instead)"
    )]
    NotNumeric {
        /// The histogram (`a log2 histogram`, `a linear histogram`).
        option: &'static str,
        /// The argument's name.
        name: String,
        /// The probe whose argument it is.
        probe: String,
        /// What it is (`string`, `array`).
        kind: &'static str,
    },
    /// A linear histogram's spec that is not `ARG:MIN,MAX,STEP`.
    #[error("linear histogram {spec:?}: {why}; write ARG:MIN,MAX,STEP, e.g. size:0,4096,512")]
    BadLhist {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A latency key that is not comm, pid, tid, cpu or ret.
    #[error("unknown latency key {0:?}: use comm, pid, tid, cpu or ret")]
    UnknownByKey(String),
    /// Linear buckets that are not `MIN,MAX,STEP`.
    #[error("linear buckets {spec:?}: {why}; write MIN,MAX,STEP, e.g. 0,1000,100")]
    BadLinear {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A duration that is not a number and a unit.
    #[error("duration {spec:?}: {why}; write a number and a unit: 250ns, 500us, 1.5ms, 2s")]
    BadDuration {
        /// The duration as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `--unit` that is not ns, us or ms.
    #[error("unknown unit {0:?}: use ns, us or ms")]
    UnknownUnit(String),
    /// Latencies keyed by `ret` without a return value to key on.
    #[error(
        "keying latencies by ret needs the return value: the return probe of function {function} fetches no \
         argument chosen as its return value"
    )]
    NoReturnValue {
        /// Index of the function in the pairer's list.
        function: usize,
    },
    /// A probe given as the entry or return of two functions, or as both
    /// the entry and the return.
    #[error(
        "probe {probe} is given twice to the latency pairer: each function needs its own \
         entry probe and its own return probe"
    )]
    ProbeReused {
        /// The probe index.
        probe: usize,
    },
}
