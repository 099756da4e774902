//! [`CallProbes`]: a session's events of entry and return probes, as the
//! [`CallEvent`]s a [`CallTreeBuilder`](super::CallTreeBuilder) takes.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use kprobe_perf_symbols::KernelSymbols;

use super::builder::{CallEvent, CallSite, TracedFunction};
use crate::decode::records::IntHasher;
use crate::decode::{Event, IntEvent, Value};
use crate::plan::ProbePlan;

/// Which function an event is of, and whether it is an entry or a
/// return: from the probe's plan (an entry or a return probe; a return
/// probe's first argument is the return value) and from the address the
/// event names (the probed function, found in the kernel's symbols:
/// one probe may cover many functions, as a glob's fprobe event does).
#[derive(Debug, Clone)]
pub struct CallProbes {
    /// Per probe: `Some(true)` for a return probe, `Some(false)` for an
    /// entry, `None` for a probe that is neither (ignored).
    returns: Vec<Option<bool>>,
    /// The functions by name.
    by_name: HashMap<String, usize>,
    /// Addresses already looked up.
    by_addr: HashMap<u64, Option<usize>, BuildHasherDefault<IntHasher>>,
    /// Per probe, the last address looked up and its function: most
    /// probes name one function, so most events need no lookup at all.
    last: Vec<(u64, Option<usize>)>,
}

impl CallProbes {
    /// The probes of a session (`plans`, in its order) for `functions`.
    pub fn new(plans: &[ProbePlan], functions: &[TracedFunction]) -> CallProbes {
        CallProbes {
            returns: plans.iter().map(|p| Some(p.is_return())).collect(),
            by_name: functions
                .iter()
                .enumerate()
                .map(|(i, f)| (f.name.clone(), i))
                .collect(),
            by_addr: HashMap::default(),
            last: vec![(0, None); plans.len()],
        }
    }

    /// The function probe `probe` names at `addr` (kprobes on ENDBR
    /// kernels and ftrace sites sit a few bytes past the start: the
    /// holding symbol counts).
    #[inline]
    fn function_at(&mut self, probe: usize, addr: u64, symbols: &KernelSymbols) -> Option<usize> {
        let last = self.last.get_mut(probe)?;
        if last.0 == addr && addr != 0 {
            return last.1;
        }
        let f = match self.by_addr.get(&addr) {
            Some(f) => *f,
            None => {
                let f = symbols
                    .symbolize(addr)
                    .and_then(|l| self.by_name.get(&l.symbol.name).copied());
                self.by_addr.insert(addr, f);
                f
            }
        };
        *last = (addr, f);
        f
    }

    /// `e` as a call event, or `None` when it is of no traced function.
    pub fn call_event(&mut self, e: &Event, symbols: &KernelSymbols) -> Option<CallEvent> {
        let is_return = (*self.returns.get(e.probe)?)?;
        let function = self.function_at(e.probe, e.probe_addr, symbols)?;
        let (site, args) = if is_return {
            let retval = e.args.first().and_then(|v| v.as_u64());
            (CallSite::Return { retval }, Vec::new())
        } else {
            (CallSite::Entry, e.args.clone())
        };
        Some(CallEvent {
            function,
            site,
            tid: e.tid,
            pid: e.pid,
            comm: e.comm.clone(),
            cpu: e.cpu,
            time_ns: e.time_ns,
            args,
        })
    }

    /// As [`CallProbes::call_event`], for an event handed over with its
    /// integer arguments bare ([`crate::decode::Handed::Ints`]): the
    /// same call event, without the [`Event`] made first.
    pub fn call_ints(&mut self, e: &IntEvent<'_>, symbols: &KernelSymbols) -> Option<CallEvent> {
        let is_return = (*self.returns.get(e.probe)?)?;
        let function = self.function_at(e.probe, e.probe_addr, symbols)?;
        let (site, args) = if is_return {
            let retval = e.ints.first().copied();
            (CallSite::Return { retval }, Vec::new())
        } else {
            let args = e
                .ints
                .iter()
                .zip(e.kinds)
                .map(|(&raw, &ty)| Value::Int { raw, ty })
                .collect();
            (CallSite::Entry, args)
        };
        Some(CallEvent {
            function,
            site,
            tid: e.tid,
            pid: e.pid,
            comm: e.comm.clone(),
            cpu: e.cpu,
            time_ns: e.time_ns,
            args,
        })
    }
}
