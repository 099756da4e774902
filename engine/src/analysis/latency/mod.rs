//! Function latency: each return paired with its entry, per thread.
//!
//! A [`LatencyPairer`] is told which probe is the entry and which the
//! return of each function ([`FunctionProbes`]). It keeps, per thread and
//! function, a stack of the entries not yet returned: an entry pushes, a
//! return pops the newest entry of the same thread and function, so
//! recursion and nesting give each call its own duration. It needs the
//! events in time order, as a session delivers them.
//!
//! # What is never paired wrongly
//!
//! - A return with no entry on its thread's stack (its entry was before
//!   the start, or lost) is counted in `unpaired_returns`, never paired.
//! - A return earlier than the newest entry cannot be its return: counted
//!   as unpaired, the entry stays.
//! - tid 0 is each CPU's idle task (and interrupts taken while idle): its
//!   stacks are kept per CPU, so calls on two idle CPUs do not mix.
//! - Thread exits and tid reuse: [`LatencyPairer::thread_exits`] drops a
//!   thread's stacks in time order, for the kernel's exit records (which a session hands over
//!   before the events of the same poll, the decoder's `thread_exit`
//!   reads them). Without them, an entry or return whose pid differs from the
//!   pid of the entries on its tid's stack shows the tid was reused by
//!   another process: the old entries are dropped first. (A tid reused
//!   inside the same process cannot be told apart this way.)
//! - Lost events: [`LatencyPairer::events_lost`] drops every pending
//!   entry, since the missing events may be entries or returns of any of
//!   them; returns after that are unpaired until the stacks fill again.
//! - A return that was missed while its entry was seen (a kretprobe out of
//!   instances) would make the next return pop the wrong entry. When both
//!   probes fetch the stack pointer, a [`FrameMatch`] pairs a return only
//!   with the entry of the same frame, and drops the entries above it.
//! - Stacks deeper than [`LatencyOptions::max_depth`] drop their oldest
//!   entry (memory stays bounded); its return is then unpaired.
//!
//! Dropped entries are counted in `dropped_entries`; entries still waiting
//! are `unreturned` in a snapshot (at the end: calls that never returned).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::hist::{Hist, HistShape};
use super::{AnalysisError, KeyPart};
use crate::decode::pairing::CallStacks;
use crate::decode::{Event, Value};
use kprobe_perf_spec::BaseType;

pub use crate::decode::pairing::{FrameMatch, FunctionProbes};

/// What `--by` keys latency histograms on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Key {
    /// The command name at the return.
    Comm,
    /// The process id.
    Pid,
    /// The thread id.
    Tid,
    /// The CPU of the return.
    Cpu,
    /// The return value.
    Ret,
}

/// The key of a return value. An `int` comes back in the low half of
/// the 64-bit register (x86's eax, arm64's w0), the upper half zeroed: a
/// 64-bit signed value whose upper 32 bits are zero and whose bit 31 is
/// set is keyed as the negative int it is for C's error returns (-1, not
/// 4294967295), as perf prints an int `$retval` typed from DWARF. A
/// 64-bit return in that range (an unsigned int of 2^31 or more, a size)
/// is keyed negative too: no type is known here to tell them apart.
fn ret_key(v: &Value) -> KeyPart {
    match *v {
        Value::Int {
            raw,
            ty: BaseType::Signed(64),
        } if raw >> 32 == 0 && raw & (1 << 31) != 0 => {
            KeyPart::Signed(i64::from(raw as u32 as i32))
        }
        _ => KeyPart::of_value(v),
    }
}

impl Key {
    /// Parses `comm`, `pid`, `tid`, `cpu` or `ret`.
    pub fn parse(s: &str) -> Result<Key, AnalysisError> {
        match s {
            "comm" => Ok(Key::Comm),
            "pid" => Ok(Key::Pid),
            "tid" => Ok(Key::Tid),
            "cpu" => Ok(Key::Cpu),
            "ret" => Ok(Key::Ret),
            other => Err(AnalysisError::UnknownByKey(other.to_string())),
        }
    }

    /// The key's name, as parsed.
    pub fn name(self) -> &'static str {
        match self {
            Key::Comm => "comm",
            Key::Pid => "pid",
            Key::Tid => "tid",
            Key::Cpu => "cpu",
            Key::Ret => "ret",
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The unit durations are histogrammed and shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TimeUnit {
    /// Nanoseconds.
    #[default]
    Ns,
    /// Microseconds.
    Us,
    /// Milliseconds.
    Ms,
}

impl TimeUnit {
    /// Parses `ns`, `us` or `ms`.
    pub fn parse(s: &str) -> Result<TimeUnit, AnalysisError> {
        match s {
            "ns" => Ok(TimeUnit::Ns),
            "us" => Ok(TimeUnit::Us),
            "ms" => Ok(TimeUnit::Ms),
            other => Err(AnalysisError::UnknownUnit(other.to_string())),
        }
    }

    /// Nanoseconds in one unit.
    pub fn ns(self) -> u64 {
        match self {
            TimeUnit::Ns => 1,
            TimeUnit::Us => 1_000,
            TimeUnit::Ms => 1_000_000,
        }
    }

    /// `ns`, `us` or `ms`.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Us => "us",
            TimeUnit::Ms => "ms",
        }
    }

    /// `ns` nanoseconds in this unit, rounded down.
    pub(crate) fn in_unit(self, ns: u64) -> u64 {
        ns / self.ns()
    }
}

/// Parses a duration with its unit (`--min`): `250ns`, `500us`, `1.5ms`,
/// `2s`; up to 9 decimals; into nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, AnalysisError> {
    let bad = |why: &str| AnalysisError::BadDuration {
        spec: s.to_string(),
        why: why.to_string(),
    };
    let t = s.trim();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| bad("it has no unit"))?;
    let (number, unit) = t.split_at(digits_end);
    let per: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(bad(&format!("{unit:?} is not a unit"))),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() {
        return Err(bad("it has no number"));
    }
    if frac.contains('.') {
        return Err(bad(&format!("{number:?} is not a number")));
    }
    if frac.len() > 9 {
        return Err(bad("it has more than 9 decimals"));
    }
    let parse = |d: &str| {
        if d.is_empty() {
            Ok(0)
        } else {
            d.parse::<u64>().map_err(|_| bad("the number is too large"))
        }
    };
    let (whole, frac_value) = (parse(whole)?, parse(frac)?);
    // frac_value / 10^len of a unit, in nanoseconds.
    let frac_ns = u128::from(frac_value) * u128::from(per) / 10u128.pow(frac.len() as u32);
    u128::from(whole)
        .checked_mul(u128::from(per))
        .and_then(|w| w.checked_add(frac_ns))
        .and_then(|ns| u64::try_from(ns).ok())
        .ok_or_else(|| bad("it is more than 2^64 nanoseconds"))
}

/// How a [`LatencyPairer`] histograms and what it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencyOptions {
    /// One histogram per value of this key, besides the total.
    pub by: Option<Key>,
    /// Log2 (default) or linear buckets, in `unit`.
    pub shape: HistShape,
    /// The unit of the histograms (durations are divided, rounding down).
    pub unit: TimeUnit,
    /// [`LatencyPairer::record`] returns each call of at least this many
    /// nanoseconds (`--min`); `None`: no call is returned.
    pub calls_from_ns: Option<u64>,
    /// Most entries kept per thread and function (default 1024).
    pub max_depth: usize,
}

impl Default for LatencyOptions {
    fn default() -> Self {
        LatencyOptions {
            by: None,
            shape: HistShape::Log2,
            unit: TimeUnit::Ns,
            calls_from_ns: None,
            max_depth: 1024,
        }
    }
}

/// One paired call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call {
    /// Index of the function in the pairer's list.
    pub function: usize,
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Command name at the return.
    pub comm: Arc<str>,
    /// CPU of the entry.
    pub entry_cpu: u32,
    /// CPU of the return.
    pub cpu: u32,
    /// Time of the entry (perf clock, ns).
    pub entry_time_ns: u64,
    /// Return time minus entry time, in nanoseconds.
    pub duration_ns: u64,
    /// The entry probe's arguments.
    pub entry_args: Vec<Value>,
    /// The return probe's arguments.
    pub return_args: Vec<Value>,
}

/// A histogram for one key value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KeyedHist {
    /// The key's value.
    pub key: KeyPart,
    /// Its durations.
    pub hist: Hist,
}

/// The latency of one function over a run or an interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FunctionLatency {
    /// Every paired call's duration, in the options' unit.
    pub total: Hist,
    /// One histogram per key value (with `--by`), sorted by key.
    pub by_key: Vec<KeyedHist>,
    /// Calls paired.
    pub paired: u64,
    /// Returns whose entry was not seen.
    pub unpaired_returns: u64,
    /// Entries given up without their return (see the module
    /// documentation).
    pub dropped_entries: u64,
    /// Entries still waiting for their return at the snapshot.
    pub unreturned: u64,
}

/// Per-function snapshot of a [`LatencyPairer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LatencySnapshot {
    /// The unit of the histograms.
    pub unit: TimeUnit,
    /// What the histograms are keyed by.
    #[serde(serialize_with = "ser_key")]
    pub by: Option<Key>,
    /// One per function, in the order given to the pairer.
    pub functions: Vec<FunctionLatency>,
}

fn ser_key<S: serde::Serializer>(k: &Option<Key>, s: S) -> Result<S::Ok, S::Error> {
    match k {
        Some(k) => s.serialize_str(k.name()),
        None => s.serialize_none(),
    }
}

struct Totals {
    total: Hist,
    by_key: HashMap<KeyPart, Hist>,
    paired: u64,
}

/// Pairs returns with entries (see the [module documentation](self)).
pub struct LatencyPairer {
    /// The entries waiting, per thread and function, and what was
    /// dropped or left unpaired (the decoder's [`CallStacks`]).
    stacks: CallStacks,
    options: LatencyOptions,
    totals: Vec<Totals>,
}

impl LatencyPairer {
    /// A pairer for `functions`. Fails when a probe is given twice, or
    /// with `--by ret` when a function has no return value.
    pub fn new(
        functions: &[FunctionProbes],
        options: LatencyOptions,
    ) -> Result<LatencyPairer, AnalysisError> {
        let mut seen = std::collections::HashSet::new();
        for (i, f) in functions.iter().enumerate() {
            for probe in [f.entry, f.ret] {
                if !seen.insert(probe) {
                    return Err(AnalysisError::ProbeReused { probe });
                }
            }
            if options.by == Some(Key::Ret) && f.ret_value.is_none() {
                return Err(AnalysisError::NoReturnValue { function: i });
            }
        }
        let stacks = CallStacks::new(functions, options.max_depth)
            .map_err(|probe| AnalysisError::ProbeReused { probe })?;
        let totals = functions
            .iter()
            .map(|_| Totals {
                total: options.shape.new_hist(),
                by_key: HashMap::new(),
                paired: 0,
            })
            .collect();
        Ok(LatencyPairer {
            stacks,
            options,
            totals,
        })
    }

    /// The options given.
    pub fn options(&self) -> &LatencyOptions {
        &self.options
    }

    /// Takes one event (others than the functions' probes are ignored).
    /// Returns the call a return completes when it lasted at least
    /// [`LatencyOptions::calls_from_ns`].
    pub fn record(&mut self, e: &Event) -> Option<Call> {
        let (f, entry) = self.stacks.record(e)?;
        let duration_ns = e.time_ns - entry.time_ns;
        let totals = &mut self.totals[f];
        totals.paired += 1;
        let v = self.options.unit.in_unit(duration_ns);
        totals.total.record_u64(v);
        if let Some(key) = self.options.by {
            let part = match key {
                Key::Comm => KeyPart::Comm(e.comm.clone()),
                Key::Pid => KeyPart::Pid(e.pid),
                Key::Tid => KeyPart::Tid(e.tid),
                Key::Cpu => KeyPart::Cpu(e.cpu),
                Key::Ret => self.stacks.functions()[f]
                    .ret_value
                    .and_then(|i| e.args.get(i))
                    .map_or(KeyPart::Missing, ret_key),
            };
            let shape = self.options.shape;
            totals
                .by_key
                .entry(part)
                .or_insert_with(|| shape.new_hist())
                .record_u64(v);
        }
        let from = self.options.calls_from_ns?;
        (duration_ns >= from).then(|| Call {
            function: f,
            tid: e.tid,
            pid: e.pid,
            comm: e.comm.clone(),
            entry_cpu: entry.cpu,
            cpu: e.cpu,
            entry_time_ns: entry.time_ns,
            duration_ns,
            entry_args: entry.args,
            return_args: e.args.clone(),
        })
    }

    /// Thread `tid` exited: its pending entries are dropped (tid 0, the
    /// idle tasks, never exits: ignored).
    #[cfg(test)]
    pub(crate) fn thread_exited(&mut self, tid: i32) {
        self.stacks.thread_exited(tid);
    }

    /// Thread `tid` exited at `time_ns`: its pending entries are dropped
    /// once an event later than that is recorded (events come in time
    /// order; the exit record may come before the thread's last ones).
    /// Entries of a thread that exited inside the function (a call that
    /// never returns, such as `do_exit`) are then counted as dropped, not
    /// as unreturned, and the thread's stacks are freed.
    pub fn thread_exits(&mut self, tid: i32, time_ns: u64) {
        self.stacks.thread_exits(tid, time_ns);
    }

    /// Every event has been recorded (the session is over): the thread
    /// exits not yet applied take effect.
    pub fn apply_exits(&mut self) {
        self.stacks.apply_exits();
    }

    /// Events were lost: every pending entry is dropped (see the module
    /// documentation).
    pub fn events_lost(&mut self) {
        self.stacks.events_lost();
    }

    /// Entries waiting for their return, per function.
    pub fn unreturned(&self) -> Vec<u64> {
        self.stacks.unreturned()
    }

    /// What the pairer holds, without resetting it.
    pub fn snapshot(&self) -> LatencySnapshot {
        let unreturned = self.unreturned();
        LatencySnapshot {
            unit: self.options.unit,
            by: self.options.by,
            functions: self
                .totals
                .iter()
                .enumerate()
                .zip(unreturned)
                .map(|((f, t), unreturned)| {
                    let mut by_key: Vec<KeyedHist> = t
                        .by_key
                        .iter()
                        .map(|(k, h)| KeyedHist {
                            key: k.clone(),
                            hist: h.clone(),
                        })
                        .collect();
                    by_key.sort_by(|a, b| a.key.cmp(&b.key));
                    FunctionLatency {
                        total: t.total.clone(),
                        by_key,
                        paired: t.paired,
                        unpaired_returns: self.stacks.unpaired_returns[f],
                        dropped_entries: self.stacks.dropped_entries[f],
                        unreturned,
                    }
                })
                .collect(),
        }
    }

    /// The snapshot, then empties histograms and counters (one interval).
    /// Pending entries stay: a call is counted in the interval of its
    /// return.
    pub fn take(&mut self) -> LatencySnapshot {
        let s = self.snapshot();
        for t in &mut self.totals {
            t.total.take();
            t.by_key.clear();
            t.paired = 0;
        }
        self.stacks.reset_counts();
        s
    }
}

#[cfg(test)]
mod tests;
