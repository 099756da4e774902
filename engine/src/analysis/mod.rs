//! Answers from decoded events: histograms, entry/return latency pairing,
//! counts by key, and their text rendering.
//!
//! Everything here is pure code over [`Event`](crate::Event)s: no I/O and
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
//!
//! Each accumulator has a `take()` that returns what it holds and starts
//! again empty, for per-interval (`-I MS`) output.

pub mod aggregate;
pub mod hist;
pub mod latency;
pub mod render;

mod key;

pub use aggregate::{
    parse_count_by, parse_hist, parse_lhist, AggregateSnapshot, Aggregator, ArgField, ArgHists,
    ArgKind, CountBy, CountKey, CountRow, CountTable, HistBy, ProbeFields, ProbeHist,
};
pub use hist::{
    Bucket, Hist, HistError, HistShape, LinearHist, LinearRange, Log2Hist, Percentiles,
};
pub use key::KeyPart;
pub use latency::{
    Call, FrameMatch, FunctionLatency, FunctionProbes, Key, KeyedHist, LatencyOptions,
    LatencyPairer, LatencySnapshot, TimeUnit,
};

/// Why an analysis cannot be set up as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnalysisError {
    /// A histogram's bounds are wrong.
    #[error(transparent)]
    Hist(#[from] HistError),
    /// `--count-by` with nothing in it.
    #[error("--count-by needs at least one key: comm, pid, tid, cpu, probe or an argument name")]
    EmptyKeyList,
    /// A key that is neither a built-in key nor an argument of a probe.
    #[error(
        "unknown key {key:?} in {option}: the keys are {builtins}, or an argument name \
         ({arguments})"
    )]
    UnknownKey {
        /// The option (`--count-by`, `--by`).
        option: &'static str,
        /// The key as given.
        key: String,
        /// The built-in keys of that option.
        builtins: &'static str,
        /// The arguments of each probe, as `probe: a, b; probe2: c`
        /// (`none` when no probe has arguments).
        arguments: String,
    },
    /// A `--hist`/`--lhist` argument no probe has.
    #[error(
        "no probe has an argument named {name:?} for {option}; the arguments are: {arguments}"
    )]
    UnknownArgument {
        /// The option (`--hist`, `--lhist`).
        option: &'static str,
        /// The name as given.
        name: String,
        /// The arguments of each probe, as in [`AnalysisError::UnknownKey`].
        arguments: String,
    },
    /// A histogram over an argument that is not a number.
    #[error(
        "{option} {name}: argument {name} of probe {probe} is a {kind}, not a number; a \
         histogram needs an integer argument (use --count-by {name} to count its values)"
    )]
    NotNumeric {
        /// The option (`--hist`, `--lhist`).
        option: &'static str,
        /// The argument's name.
        name: String,
        /// The probe whose argument it is.
        probe: String,
        /// What it is (`string`, `array`).
        kind: &'static str,
    },
    /// A `--lhist` spec that is not `ARG:MIN,MAX,STEP`.
    #[error("--lhist {spec:?}: {why}; write ARG:MIN,MAX,STEP, e.g. --lhist size:0,4096,512")]
    BadLhist {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `--by` key that is not comm, pid, tid, cpu or ret.
    #[error("unknown key {0:?} for --by: use comm, pid, tid, cpu or ret")]
    UnknownByKey(String),
    /// A `--unit` that is not ns, us or ms.
    #[error("unknown unit {0:?}: use ns, us or ms")]
    UnknownUnit(String),
    /// `--by ret` without a return value to key on.
    #[error(
        "--by ret needs the return value: the return probe of function {function} fetches no \
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
