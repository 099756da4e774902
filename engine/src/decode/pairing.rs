//! Returns paired with their entries, per thread: the stacks of entries
//! waiting for their return (`CallStacks`) that both the entry-join
//! [`Joiner`](crate::decode::joiner::Joiner) and the latency analysis
//! ([`crate::analysis::LatencyPairer`], which adds histograms) use. The
//! rules (tid 0 per CPU, exits, tid reuse, losses, frames, depth) are
//! those the analysis' module documentation lists.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

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
pub(crate) const SWEEP_MIN: usize = 4096;

/// An entry waiting for its return.
pub(crate) struct Pending {
    /// Its time (perf clock, ns).
    pub(crate) time_ns: u64,
    pid: i32,
    /// Its CPU.
    pub(crate) cpu: u32,
    /// Its arguments.
    pub(crate) args: Vec<Value>,
}

/// Per thread and function, the entries waiting for their return, and
/// per function the entries dropped and the returns left unpaired.
pub(crate) struct CallStacks {
    functions: Vec<FunctionProbes>,
    /// Probe index to (function, is the return).
    roles: HashMap<usize, (usize, bool)>,
    /// Most entries kept per thread and function.
    max_depth: usize,
    /// Per thread: one stack per function. A thread's entry stays when
    /// its stacks empty (no allocation per call); empty ones are swept
    /// when the map doubles. Keyed by [`thread_key`].
    pub(crate) stacks: HashMap<i64, Vec<Vec<Pending>>>,
    /// Map size at which empty stacks are swept.
    pub(crate) sweep_at: usize,
    /// Thread exits not yet applied, earliest first: (time, tid).
    exits: BinaryHeap<Reverse<(u64, i32)>>,
    /// Per function: entries given up without their return.
    pub(crate) dropped_entries: Vec<u64>,
    /// Per function: returns whose entry was not seen.
    pub(crate) unpaired_returns: Vec<u64>,
}

impl CallStacks {
    /// Stacks for `functions`, at most `max_depth` entries deep; fails
    /// with the probe given twice, if one is.
    pub(crate) fn new(functions: &[FunctionProbes], max_depth: usize) -> Result<CallStacks, usize> {
        let mut roles = HashMap::new();
        for (i, f) in functions.iter().enumerate() {
            for (probe, is_return) in [(f.entry, false), (f.ret, true)] {
                if roles.insert(probe, (i, is_return)).is_some() {
                    return Err(probe);
                }
            }
        }
        Ok(CallStacks {
            functions: functions.to_vec(),
            roles,
            max_depth,
            stacks: HashMap::new(),
            sweep_at: SWEEP_MIN,
            exits: BinaryHeap::new(),
            dropped_entries: vec![0; functions.len()],
            unpaired_returns: vec![0; functions.len()],
        })
    }

    /// The functions given.
    pub(crate) fn functions(&self) -> &[FunctionProbes] {
        &self.functions
    }

    /// Takes one event (others than the functions' probes are ignored):
    /// an entry waits on its thread's stack; a return paired with its
    /// entry gives the function and the entry.
    pub(crate) fn record(&mut self, e: &Event) -> Option<(usize, Pending)> {
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
                self.dropped_entries[g] += s.len() as u64;
                s.clear();
            }
        }
        &mut stacks[f]
    }

    fn on_entry(&mut self, f: usize, e: &Event) {
        let max_depth = self.max_depth.max(1);
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
        self.dropped_entries[f] += dropped;
    }

    fn on_return(&mut self, f: usize, e: &Event) -> Option<(usize, Pending)> {
        let frame = self.functions[f].frame;
        let thread = thread_key(e.tid, e.cpu);
        if !self.stacks.contains_key(&thread) {
            self.unpaired_returns[f] += 1;
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
            self.unpaired_returns[f] += 1;
            return None;
        };
        // Entries above the frame returned without their return seen.
        let skipped = (stack.len() - at - 1) as u64;
        stack.truncate(at + 1);
        let entry = stack.pop()?;
        self.dropped_entries[f] += skipped;
        Some((f, entry))
    }

    /// Thread `tid` exited: its pending entries are dropped (tid 0, the
    /// idle tasks, never exits: ignored).
    pub(crate) fn thread_exited(&mut self, tid: i32) {
        if tid == 0 {
            return;
        }
        if let Some(stacks) = self.stacks.remove(&i64::from(tid)) {
            for (f, s) in stacks.iter().enumerate() {
                self.dropped_entries[f] += s.len() as u64;
            }
        }
    }

    /// Thread `tid` exited at `time_ns`: its pending entries are dropped
    /// once an event later than that is recorded.
    pub(crate) fn thread_exits(&mut self, tid: i32, time_ns: u64) {
        if tid != 0 {
            self.exits.push(Reverse((time_ns, tid)));
        }
    }

    /// The thread exits not yet applied take effect.
    pub(crate) fn apply_exits(&mut self) {
        while let Some(Reverse((_, tid))) = self.exits.pop() {
            self.thread_exited(tid);
        }
    }

    /// Events were lost: every pending entry is dropped.
    pub(crate) fn events_lost(&mut self) {
        for (_, stacks) in self.stacks.drain() {
            for (f, s) in stacks.iter().enumerate() {
                self.dropped_entries[f] += s.len() as u64;
            }
        }
    }

    /// Entries waiting for their return, per function.
    pub(crate) fn unreturned(&self) -> Vec<u64> {
        let mut n = vec![0; self.functions.len()];
        for stacks in self.stacks.values() {
            for (f, s) in stacks.iter().enumerate() {
                n[f] += s.len() as u64;
            }
        }
        n
    }

    /// Zeroes the dropped and unpaired counts (a new interval).
    pub(crate) fn reset_counts(&mut self) {
        self.dropped_entries.iter_mut().for_each(|n| *n = 0);
        self.unpaired_returns.iter_mut().for_each(|n| *n = 0);
    }
}
