//! The decode-time half of the entry joins planned in
//! [`crate::plan::entry_join`]: for the probes its `expand` laid out, the
//! [`Joiner`] pairs each return with its entry per thread and hands the
//! return on with the user's arguments.

use std::ops::ControlFlow;

use crate::decode::pairing::{CallStacks, FrameMatch, FunctionProbes};
use crate::decode::{Event, Value};
use crate::plan::entry_join::{Expanded, JoinSource};
use crate::plan::ProbePlan;

/// Most entries kept per thread and function (a latency pairer's default).
const MAX_DEPTH: usize = 1024;

/// One joined return probe, as the [`Joiner`] knows it.
#[derive(Debug)]
struct Joined {
    /// Index of the return probe (the user's probe).
    ret: usize,
    order: Vec<JoinSource>,
}

/// Pairs the hidden entry probes' events with their returns and gives
/// the returns the user's arguments (see the [module](self)).
pub struct Joiner {
    /// The user's probes, as shown.
    shown: Vec<ProbePlan>,
    /// Per function of `pairer`, its return probe.
    joined: Vec<Joined>,
    /// Per probe index (user's and hidden): its function, if any.
    role: Vec<Option<usize>>,
    pairer: CallStacks,
    /// The event handed over for a joined return (its storage reused).
    merged: Event,
    /// True when the consumer stopped at `merged` (it comes again).
    held: bool,
}

impl std::fmt::Debug for Joiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joiner")
            .field("shown", &self.shown.len())
            .field("joined", &self.joined)
            .finish_non_exhaustive()
    }
}

impl Joiner {
    /// The joiner of the probes `expanded` opens: `None` when no probe is
    /// joined.
    pub(crate) fn new(expanded: &Expanded) -> Option<Joiner> {
        if expanded.joins.is_empty() {
            return None;
        }
        let functions: Vec<FunctionProbes> = expanded
            .joins
            .iter()
            .map(|j| {
                let frame = FrameMatch::new(j.entry_frame_arg, j.ret_frame_arg, j.frame_step);
                FunctionProbes::new(j.entry, j.ret).with_frame(frame)
            })
            .collect();
        let mut role = vec![None; expanded.opened.len()];
        for (f, fp) in functions.iter().enumerate() {
            role[fp.entry] = Some(f);
            role[fp.ret] = Some(f);
        }
        // Each probe is in one function only: the stacks cannot refuse
        // them. As deep as a latency pairer's by default.
        let pairer = CallStacks::new(&functions, MAX_DEPTH).ok()?;
        let joined = expanded
            .joins
            .iter()
            .map(|j| Joined {
                ret: j.ret,
                order: j.order.clone(),
            })
            .collect();
        Some(Joiner {
            shown: expanded.shown.clone(),
            joined,
            role,
            pairer,
            merged: Event::default(),
            held: false,
        })
    }

    /// The user's probes, as shown (events refer to them).
    pub fn shown(&self) -> &[ProbePlan] {
        &self.shown
    }

    /// Takes one event in time order: a hidden entry is kept for its
    /// return, a joined return is handed to `f` with the user's
    /// arguments (entry values [`Value::Unknown`] when its entry was not
    /// seen, and then `unknown` is called with its probe), any other
    /// event is handed to `f` as it is. Returns what `f` returned; after a
    /// `Break` the same event may come again (it stays queued): a joined
    /// return then gets the same arguments again.
    pub fn pass(
        &mut self,
        e: &Event,
        mut unknown: impl FnMut(usize),
        mut f: impl FnMut(&Event, &[ProbePlan]) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let Some(func) = self.role.get(e.probe).copied().flatten() else {
            return f(e, &self.shown);
        };
        let Some(j) = self.joined.get(func) else {
            return ControlFlow::Continue(());
        };
        if e.probe != j.ret {
            // The hidden entry: kept on its thread's stack.
            let _ = self.pairer.record(e);
            return ControlFlow::Continue(());
        }
        let m = &mut self.merged;
        let again =
            self.held && (m.probe, m.tid, m.cpu, m.time_ns) == (e.probe, e.tid, e.cpu, e.time_ns);
        if !again {
            let call = self.pairer.record(e);
            m.probe = e.probe;
            m.cpu = e.cpu;
            m.pid = e.pid;
            m.tid = e.tid;
            m.comm = e.comm.clone();
            m.time_ns = e.time_ns;
            m.ip = e.ip;
            m.probe_addr = e.probe_addr;
            m.ret_addr = e.ret_addr;
            m.callchain.clone_from(&e.callchain);
            m.args.clear();
            for src in &j.order {
                let v = match (*src, &call) {
                    (JoinSource::Entry(k), Some((_, entry))) => entry.args.get(k).cloned(),
                    (JoinSource::Entry(_), None) => None,
                    (JoinSource::Return(k), _) => e.args.get(k).cloned(),
                };
                m.args.push(v.unwrap_or(Value::Unknown));
            }
            if call.is_none() {
                unknown(e.probe);
            }
        }
        let flow = f(m, &self.shown);
        self.held = flow.is_break();
        flow
    }

    /// Thread `tid` exited at `time_ns` (its EXIT record): its entries
    /// waiting, of calls it exited in, are let go once a later event
    /// comes.
    pub fn thread_exits(&mut self, tid: i32, time_ns: u64) {
        self.pairer.thread_exits(tid, time_ns);
    }

    /// Records were lost: the entries waiting may have lost their
    /// returns (or the returns their entries), so none is kept.
    pub fn events_lost(&mut self) {
        self.pairer.events_lost();
    }
}
