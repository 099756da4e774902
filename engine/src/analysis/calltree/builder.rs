//! [`CallTreeBuilder`]: entries and returns, in time order, into trees.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::tree::{CallTree, Frame, Missing, ReturnKind};
use crate::decode::records::IntHasher;
use crate::decode::Value;

/// A function whose calls the builder follows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TracedFunction {
    /// Its name (for the embedder's rendering; the builder uses indices).
    pub name: String,
    /// What it returns (tells errors from results).
    pub returns: ReturnKind,
    /// A tree starts at each call of it made outside another tree.
    pub root: bool,
    /// Its parameters' names, in order (empty when unknown), for
    /// rendering the entry's arguments.
    pub params: Vec<String>,
}

impl TracedFunction {
    /// A function returning `returns`; `root` when trees start at it.
    pub fn new(name: impl Into<String>, returns: ReturnKind, root: bool) -> TracedFunction {
        TracedFunction {
            name: name.into(),
            returns,
            root,
            params: Vec::new(),
        }
    }
}

/// Whether an event is a function's entry or its return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallSite {
    /// The entry.
    Entry,
    /// The return, with the return register when the probe fetched it.
    Return {
        /// The whole return register (`ax` on x86_64, `x0` on arm64).
        retval: Option<u64>,
    },
}

/// One entry or return of a traced function.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallEvent {
    /// Index of the function in the builder's list.
    pub function: usize,
    /// Entry or return.
    pub site: CallSite,
    /// Thread id (0: a CPU's idle task, kept apart per CPU).
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Command name.
    pub comm: Arc<str>,
    /// CPU.
    pub cpu: u32,
    /// Time (ns, one clock for all events).
    pub time_ns: u64,
    /// The entry's arguments (kept in the frame); ignored at a return.
    pub args: Vec<Value>,
}

impl CallEvent {
    /// An event of `function` at `site` on thread `tid` of process `pid`
    /// at `time_ns`, on CPU 0, unnamed, with no argument.
    pub fn new(function: usize, site: CallSite, pid: i32, tid: i32, time_ns: u64) -> CallEvent {
        CallEvent {
            function,
            site,
            tid,
            pid,
            comm: Arc::from(""),
            cpu: 0,
            time_ns,
            args: Vec::new(),
        }
    }
}

/// Limits of a [`CallTreeBuilder`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallTreeOptions {
    /// Most frames kept in one tree (default 65536); calls past it are
    /// counted in [`Missing::TooManyFrames`].
    pub max_frames: usize,
    /// Most calls followed outside trees per thread (default 256): the
    /// entries of traced functions waiting for their returns while no
    /// root call runs.
    pub max_outside: usize,
}

impl Default for CallTreeOptions {
    fn default() -> Self {
        CallTreeOptions {
            max_frames: 1 << 16,
            max_outside: 256,
        }
    }
}

/// A tree being built: its frames and the open ones (innermost last).
struct Building {
    tree: CallTree,
    open: Vec<usize>,
    dropped: u64,
}

/// What the builder follows on one thread.
#[derive(Default)]
struct Thread {
    /// The root call running, with its open calls.
    building: Option<Building>,
    /// Calls of traced functions open outside any tree (innermost last).
    outside: Vec<usize>,
    /// The open-call list of the last tree closed, kept for the next
    /// (no allocation per tree).
    spare_open: Vec<usize>,
    /// Frames of the last tree closed: the next one's room.
    last_frames: usize,
}

/// Rebuilds call trees from entries and returns (see the
/// [module documentation](super)).
pub struct CallTreeBuilder {
    functions: Vec<TracedFunction>,
    options: CallTreeOptions,
    /// Keyed by tid, or by `-1 - cpu` for tid 0 (each CPU's idle task).
    threads: HashMap<i64, Thread, BuildHasherDefault<IntHasher>>,
    /// The thread of the last event, out of `threads` while its events
    /// follow one another (they need no lookup then).
    hot: Option<(i64, Thread)>,
    finished: Vec<CallTree>,
    /// Thread exits not yet applied: (tid, time).
    exits: Vec<(i32, u64)>,
}

impl CallTreeBuilder {
    /// A builder for `functions` (an event's `function` indexes them).
    pub fn new(functions: Vec<TracedFunction>, options: CallTreeOptions) -> CallTreeBuilder {
        CallTreeBuilder {
            functions,
            options,
            threads: HashMap::default(),
            hot: None,
            finished: Vec::new(),
            exits: Vec::new(),
        }
    }

    /// The functions given.
    pub fn functions(&self) -> &[TracedFunction] {
        &self.functions
    }

    /// Takes one event, in time order with the others. A root's return
    /// closes its tree, which [`CallTreeBuilder::take_finished`] then
    /// returns. Events of functions not in the list are ignored.
    pub fn record(&mut self, e: CallEvent) {
        let Some(f) = self.functions.get(e.function) else {
            return;
        };
        let (root, returns) = (f.root, f.returns);
        if !self.exits.is_empty() {
            self.apply_exits_before(e.time_ns);
        }
        let key = if e.tid == 0 {
            -1 - i64::from(e.cpu)
        } else {
            i64::from(e.tid)
        };
        let thread = hot_thread(&mut self.hot, &mut self.threads, key);
        let done = match e.site {
            CallSite::Entry => {
                entry(thread, e, root, &self.options);
                None
            }
            CallSite::Return { retval } => ret(thread, &e, root, returns, retval),
        };
        if let Some(tree) = done {
            self.finished.push(tree);
        }
    }

    /// Puts the hot thread back with the others.
    fn park(&mut self) {
        if let Some((k, t)) = self.hot.take() {
            self.threads.insert(k, t);
        }
    }

    /// Events were lost (of any thread: a ring overflowed). Every tree
    /// being built, and every tree closed and not yet taken, is marked
    /// [`Missing::EventsLost`]; the open ones are closed now, their open
    /// calls unreturned, and every thread starts again from nothing (a
    /// return after that whose entry came before is not paired).
    pub fn events_lost(&mut self) {
        for t in &mut self.finished {
            if !t.missing.contains(&Missing::EventsLost) {
                t.missing.push(Missing::EventsLost);
            }
        }
        self.park();
        for (_, mut thread) in self.threads.drain() {
            if let Some(b) = thread.building.take() {
                self.finished.push(close(b, Some(Missing::EventsLost)));
            }
        }
    }

    /// Thread `tid` exited at `time_ns`: its tree is closed as
    /// [`Missing::ThreadExited`] once an event later than that is
    /// recorded (the exit may be told before the thread's last events).
    pub fn thread_exits(&mut self, tid: i32, time_ns: u64) {
        if tid != 0 {
            self.exits.push((tid, time_ns));
        }
    }

    /// Applies the exits up to `time_ns`.
    fn apply_exits_before(&mut self, time_ns: u64) {
        self.park();
        let mut i = 0;
        while i < self.exits.len() {
            let (tid, at) = self.exits[i];
            if at < time_ns {
                self.exits.swap_remove(i);
                if let Some(mut t) = self.threads.remove(&i64::from(tid)) {
                    if let Some(b) = t.building.take() {
                        self.finished.push(close(b, Some(Missing::ThreadExited)));
                    }
                }
            } else {
                i += 1;
            }
        }
    }

    /// The trees closed since the last call, in the order they closed.
    pub fn take_finished(&mut self) -> Vec<CallTree> {
        std::mem::take(&mut self.finished)
    }

    /// The recording is over: pending exits apply, and the trees still
    /// being built close as [`Missing::Unfinished`]. Returns every tree
    /// not yet taken.
    pub fn finish(&mut self) -> Vec<CallTree> {
        self.apply_exits_before(u64::MAX);
        let mut open: Vec<CallTree> = self
            .threads
            .drain()
            .filter_map(|(_, mut t)| t.building.take())
            .map(|b| close(b, Some(Missing::Unfinished)))
            .collect();
        open.sort_by_key(|t| t.root().entry_ns);
        self.finished.extend(open);
        self.take_finished()
    }
}

/// The thread of `key`, made the hot one (the one before it put back
/// with the others).
#[inline]
fn hot_thread<'a>(
    hot: &'a mut Option<(i64, Thread)>,
    threads: &mut HashMap<i64, Thread, BuildHasherDefault<IntHasher>>,
    key: i64,
) -> &'a mut Thread {
    if !matches!(hot, Some((k, _)) if *k == key) {
        let t = threads.remove(&key).unwrap_or_default();
        if let Some((k, cold)) = hot.replace((key, t)) {
            threads.insert(k, cold);
        }
    }
    let (_, t) = hot.get_or_insert_with(|| (key, Thread::default()));
    t
}

fn new_frame(e: &CallEvent, depth: u32, parent: Option<usize>, args: Vec<Value>) -> Frame {
    Frame {
        function: e.function,
        depth,
        parent,
        cpu: e.cpu,
        entry_ns: Some(e.time_ns),
        return_ns: None,
        retval: None,
        error: None,
        args,
        self_ns: None,
    }
}

/// An entry: a callee in the tree being built, a new tree at a root, or
/// a call followed outside any tree.
fn entry(thread: &mut Thread, e: CallEvent, root: bool, options: &CallTreeOptions) {
    if let Some(b) = thread.building.as_mut() {
        if b.tree.frames.len() >= options.max_frames {
            // Its return will not find it: counted, and the tree marked.
            b.dropped += 1;
            return;
        }
        let parent = b.open.last().copied();
        let depth = u32::try_from(b.open.len()).unwrap_or(u32::MAX);
        let frame = new_frame(&e, depth, parent, Vec::new());
        b.tree.frames.push(Frame {
            args: e.args,
            ..frame
        });
        b.open.push(b.tree.frames.len() - 1);
    } else if root {
        let frame = new_frame(&e, 0, None, Vec::new());
        // Room for as many frames as the thread's last tree had: a
        // thread's calls of a root tend to look alike.
        let mut frames = Vec::with_capacity(thread.last_frames.clamp(4, 64));
        frames.push(Frame {
            args: e.args,
            ..frame
        });
        let mut open = std::mem::take(&mut thread.spare_open);
        open.clear();
        open.push(0);
        thread.building = Some(Building {
            tree: CallTree {
                tid: e.tid,
                pid: e.pid,
                comm: e.comm,
                frames,
                missing: Vec::new(),
            },
            open,
            dropped: 0,
        });
    } else {
        if thread.outside.len() >= options.max_outside {
            thread.outside.remove(0);
        }
        thread.outside.push(e.function);
    }
}

/// A return: closes the innermost open call of its function (the calls
/// opened above it lost their returns), which may close the tree; or
/// ends a call followed outside; or, for a root with no entry seen,
/// makes a tree of its own. Returns the tree it closed.
fn ret(
    thread: &mut Thread,
    e: &CallEvent,
    root: bool,
    returns: ReturnKind,
    retval: Option<u64>,
) -> Option<CallTree> {
    if let Some(b) = thread.building.as_mut() {
        match b
            .open
            .iter()
            .rposition(|&i| b.tree.frames[i].function == e.function)
        {
            Some(pos) => {
                let i = b.open[pos];
                for &above in &b.open[pos + 1..] {
                    b.tree.missing.push(Missing::Return { frame: above });
                }
                b.open.truncate(pos);
                let frame = &mut b.tree.frames[i];
                frame.return_ns = Some(e.time_ns);
                frame.retval = retval.map(|r| returns.value(r));
                frame.error = retval.and_then(|r| returns.error(r));
                if b.open.is_empty() {
                    let mut b = thread.building.take()?;
                    thread.last_frames = b.tree.frames.len();
                    thread.spare_open = std::mem::take(&mut b.open);
                    return Some(close(b, None));
                }
                return None;
            }
            None if thread.outside.contains(&e.function) => {
                // An outer call returned: the tree's open calls (its root
                // among them) lost their returns.
                let mut b = thread.building.take()?;
                pop_outside(&mut thread.outside, e.function);
                for &frame in &b.open {
                    b.tree.missing.push(Missing::Return { frame });
                }
                return Some(close(b, None));
            }
            None => {
                let m = Missing::Entry {
                    function: e.function,
                };
                if !b.tree.missing.contains(&m) {
                    b.tree.missing.push(m);
                }
                return None;
            }
        }
    }
    if pop_outside(&mut thread.outside, e.function) || !root {
        return None;
    }
    Some(orphan_root(e, returns, retval))
}

/// Removes the innermost open call of `function` outside trees (and the
/// ones above it, whose returns were missed); false when there is none.
fn pop_outside(outside: &mut Vec<usize>, function: usize) -> bool {
    match outside.iter().rposition(|&f| f == function) {
        Some(pos) => {
            outside.truncate(pos);
            true
        }
        None => false,
    }
}

/// The tree of a root call whose entry was not seen: its return alone.
fn orphan_root(e: &CallEvent, returns: ReturnKind, retval: Option<u64>) -> CallTree {
    let mut tree = CallTree {
        tid: e.tid,
        pid: e.pid,
        comm: e.comm.clone(),
        frames: vec![Frame {
            entry_ns: None,
            return_ns: Some(e.time_ns),
            retval: retval.map(|r| returns.value(r)),
            error: retval.and_then(|r| returns.error(r)),
            ..new_frame(e, 0, None, Vec::new())
        }],
        missing: vec![Missing::RootEntry],
    };
    tree.compute_self_times();
    tree
}

/// Closes a tree, saying `why` when it closes before its root returned
/// (its open calls then have no return), and computes the self times.
fn close(b: Building, why: Option<Missing>) -> CallTree {
    let Building {
        mut tree, dropped, ..
    } = b;
    tree.missing.extend(why);
    if dropped > 0 {
        tree.missing.push(Missing::TooManyFrames { dropped });
    }
    tree.compute_self_times();
    tree
}
