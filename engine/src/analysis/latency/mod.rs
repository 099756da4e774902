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
//! - Thread exits and tid reuse: [`LatencyPairer::thread_exited`] drops a
//!   thread's stacks; [`LatencyPairer::thread_exits`] does it in time
//!   order, for the kernel's exit records (which a session hands over
//!   before the events of the same poll, [`crate::decode::records::thread_exit`]
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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::hist::{Hist, HistShape};
use super::{AnalysisError, KeyPart};
use crate::decode::{Event, Value};

/// The probes of one function: its entry and its return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FunctionProbes {
    /// Index of the entry probe in the session's plan list.
    pub entry: usize,
    /// Index of the return probe.
    pub ret: usize,
    /// Which argument of the return probe is the return value (for
    /// `--by ret`).
    pub ret_value: Option<usize>,
    /// Pair by stack frame rather than by nesting alone.
    pub frame: Option<FrameMatch>,
}

impl FunctionProbes {
    /// A function whose entry is probe `entry` and return probe `ret`.
    pub fn new(entry: usize, ret: usize) -> FunctionProbes {
        FunctionProbes {
            entry,
            ret,
            ret_value: None,
            frame: None,
        }
    }

    /// The return value is argument `arg` of the return probe.
    pub fn with_return_value(mut self, arg: usize) -> FunctionProbes {
        self.ret_value = Some(arg);
        self
    }

    /// Pairs by stack frame (see [`FrameMatch`]).
    pub fn with_frame(mut self, frame: FrameMatch) -> FunctionProbes {
        self.frame = Some(frame);
        self
    }
}

/// How to tell the entry of a return by its frame: argument `entry_arg`
/// of the entry probe and `ret_arg` of the return probe both fetch the
/// stack pointer, and a return belongs to the entry whose value plus
/// `ret_minus_entry` equals the return's (on x86_64 the return pops the
/// return address: +8; on aarch64 the stack pointer is the same: 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameMatch {
    /// Argument of the entry probe holding the stack pointer.
    pub entry_arg: usize,
    /// Argument of the return probe holding the stack pointer.
    pub ret_arg: usize,
    /// Return's stack pointer minus the entry's.
    pub ret_minus_entry: i64,
}

impl FrameMatch {
    /// See the type's documentation.
    pub fn new(entry_arg: usize, ret_arg: usize, ret_minus_entry: i64) -> FrameMatch {
        FrameMatch {
            entry_arg,
            ret_arg,
            ret_minus_entry,
        }
    }
}

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
    pub fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Us => "us",
            TimeUnit::Ms => "ms",
        }
    }

    /// `ns` nanoseconds in this unit, rounded down.
    pub fn from_ns(self, ns: u64) -> u64 {
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

/// The stacks of thread `tid` on `cpu`: the tid, except for tid 0 (each
/// CPU's idle task, and interrupts taken in it), whose stacks are per CPU.
fn thread_key(tid: i32, cpu: u32) -> i64 {
    if tid == 0 {
        -1 - i64::from(cpu)
    } else {
        i64::from(tid)
    }
}

/// Threads tracked before empty stacks are first swept.
const SWEEP_MIN: usize = 4096;

struct Pending {
    time_ns: u64,
    pid: i32,
    cpu: u32,
    args: Vec<Value>,
}

struct Totals {
    total: Hist,
    by_key: HashMap<KeyPart, Hist>,
    paired: u64,
    unpaired_returns: u64,
    dropped_entries: u64,
}

/// Pairs returns with entries (see the [module documentation](self)).
pub struct LatencyPairer {
    functions: Vec<FunctionProbes>,
    /// Probe index to (function, is the return).
    roles: HashMap<usize, (usize, bool)>,
    options: LatencyOptions,
    /// Per thread: one stack per function. A thread's entry stays when
    /// its stacks empty (no allocation per call); empty ones are swept
    /// when the map doubles.
    /// Keyed by [`thread_key`].
    stacks: HashMap<i64, Vec<Vec<Pending>>>,
    /// Map size at which empty stacks are swept.
    sweep_at: usize,
    totals: Vec<Totals>,
    /// Thread exits not yet applied, earliest first: (time, tid).
    exits: BinaryHeap<Reverse<(u64, i32)>>,
}

impl LatencyPairer {
    /// A pairer for `functions`. Fails when a probe is given twice, or
    /// with `--by ret` when a function has no return value.
    pub fn new(
        functions: &[FunctionProbes],
        options: LatencyOptions,
    ) -> Result<LatencyPairer, AnalysisError> {
        let mut roles = HashMap::new();
        for (i, f) in functions.iter().enumerate() {
            for (probe, is_return) in [(f.entry, false), (f.ret, true)] {
                if roles.insert(probe, (i, is_return)).is_some() {
                    return Err(AnalysisError::ProbeReused { probe });
                }
            }
            if options.by == Some(Key::Ret) && f.ret_value.is_none() {
                return Err(AnalysisError::NoReturnValue { function: i });
            }
        }
        let totals = functions
            .iter()
            .map(|_| Totals {
                total: options.shape.new_hist(),
                by_key: HashMap::new(),
                paired: 0,
                unpaired_returns: 0,
                dropped_entries: 0,
            })
            .collect();
        Ok(LatencyPairer {
            functions: functions.to_vec(),
            roles,
            options,
            stacks: HashMap::new(),
            sweep_at: SWEEP_MIN,
            totals,
            exits: BinaryHeap::new(),
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
        while let Some(&Reverse((time, tid))) = self.exits.peek() {
            if time >= e.time_ns {
                break;
            }
            self.exits.pop();
            self.thread_exited(tid);
        }
        let &(f, is_return) = self.roles.get(&e.probe)?;
        if is_return {
            self.on_return(f, e)
        } else {
            self.on_entry(f, e);
            None
        }
    }

    fn stack_of(&mut self, tid: i64, f: usize, pid: i32) -> &mut Vec<Pending> {
        let n = self.functions.len();
        if self.stacks.len() >= self.sweep_at && !self.stacks.contains_key(&tid) {
            self.stacks.retain(|_, s| s.iter().any(|f| !f.is_empty()));
            self.sweep_at = (self.stacks.len() * 2).max(SWEEP_MIN);
        }
        let stacks = self.stacks.entry(tid).or_insert_with(|| {
            let mut v = Vec::with_capacity(n);
            v.resize_with(n, Vec::new);
            v
        });
        // A different process on this tid: the old thread is gone.
        // (All entries of a tid share one pid: the newest one tells.)
        if stacks
            .iter()
            .find_map(|s| s.last())
            .is_some_and(|p| p.pid != pid)
        {
            for (g, s) in stacks.iter_mut().enumerate() {
                self.totals[g].dropped_entries += s.len() as u64;
                s.clear();
            }
        }
        &mut stacks[f]
    }

    fn on_entry(&mut self, f: usize, e: &Event) {
        let max_depth = self.options.max_depth.max(1);
        let stack = self.stack_of(thread_key(e.tid, e.cpu), f, e.pid);
        let mut dropped = 0;
        if stack.len() >= max_depth {
            let excess = stack.len() + 1 - max_depth;
            stack.drain(..excess);
            dropped = excess as u64;
        }
        stack.push(Pending {
            time_ns: e.time_ns,
            pid: e.pid,
            cpu: e.cpu,
            args: e.args.clone(),
        });
        self.totals[f].dropped_entries += dropped;
    }

    fn on_return(&mut self, f: usize, e: &Event) -> Option<Call> {
        let frame = self.functions[f].frame;
        let thread = thread_key(e.tid, e.cpu);
        if !self.stacks.contains_key(&thread) {
            self.totals[f].unpaired_returns += 1;
            return None;
        }
        let stack = self.stack_of(thread, f, e.pid);
        let at = match frame {
            None => stack.len().checked_sub(1),
            Some(m) => {
                let ret_sp = e.args.get(m.ret_arg).and_then(Value::as_i64);
                stack.iter().rposition(|p| {
                    let entry_sp = p.args.get(m.entry_arg).and_then(Value::as_i64);
                    matches!((entry_sp, ret_sp), (Some(a), Some(b))
                        if a.wrapping_add(m.ret_minus_entry) == b)
                })
            }
        };
        let Some(at) = at.filter(|&i| stack[i].time_ns <= e.time_ns) else {
            self.totals[f].unpaired_returns += 1;
            return None;
        };
        // Entries above the frame returned without their return seen.
        let skipped = (stack.len() - at - 1) as u64;
        stack.truncate(at + 1);
        let entry = stack.pop()?;
        let duration_ns = e.time_ns - entry.time_ns;
        let totals = &mut self.totals[f];
        totals.dropped_entries += skipped;
        totals.paired += 1;
        let v = self.options.unit.from_ns(duration_ns);
        totals.total.record_u64(v);
        if let Some(key) = self.options.by {
            let part = match key {
                Key::Comm => KeyPart::Comm(e.comm.clone()),
                Key::Pid => KeyPart::Pid(e.pid),
                Key::Tid => KeyPart::Tid(e.tid),
                Key::Cpu => KeyPart::Cpu(e.cpu),
                Key::Ret => self.functions[f]
                    .ret_value
                    .and_then(|i| e.args.get(i))
                    .map_or(KeyPart::Missing, KeyPart::of_value),
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
    pub fn thread_exited(&mut self, tid: i32) {
        if tid == 0 {
            return;
        }
        if let Some(stacks) = self.stacks.remove(&i64::from(tid)) {
            for (f, s) in stacks.iter().enumerate() {
                self.totals[f].dropped_entries += s.len() as u64;
            }
        }
    }

    /// Thread `tid` exited at `time_ns`: its pending entries are dropped
    /// once an event later than that is recorded (events come in time
    /// order; the exit record may come before the thread's last ones).
    /// Entries of a thread that exited inside the function (a call that
    /// never returns, such as `do_exit`) are then counted as dropped, not
    /// as unreturned, and the thread's stacks are freed.
    pub fn thread_exits(&mut self, tid: i32, time_ns: u64) {
        if tid != 0 {
            self.exits.push(Reverse((time_ns, tid)));
        }
    }

    /// Every event has been recorded (the session is over): the thread
    /// exits not yet applied take effect.
    pub fn apply_exits(&mut self) {
        while let Some(Reverse((_, tid))) = self.exits.pop() {
            self.thread_exited(tid);
        }
    }

    /// Events were lost: every pending entry is dropped (see the module
    /// documentation).
    pub fn events_lost(&mut self) {
        for (_, stacks) in self.stacks.drain() {
            for (f, s) in stacks.iter().enumerate() {
                self.totals[f].dropped_entries += s.len() as u64;
            }
        }
    }

    /// Entries waiting for their return, per function.
    pub fn unreturned(&self) -> Vec<u64> {
        let mut n = vec![0; self.functions.len()];
        for stacks in self.stacks.values() {
            for (f, s) in stacks.iter().enumerate() {
                n[f] += s.len() as u64;
            }
        }
        n
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
                .zip(unreturned)
                .map(|(t, unreturned)| {
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
                        unpaired_returns: t.unpaired_returns,
                        dropped_entries: t.dropped_entries,
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
            t.unpaired_returns = 0;
            t.dropped_entries = 0;
        }
        s
    }
}

#[cfg(test)]
mod tests;
