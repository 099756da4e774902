//! The thread-name table of a decoder: names from COMM records and, for
//! a live session, from /proc, dated so that each sample is named as its
//! thread was called at the sample's time.

use std::collections::HashMap;
use std::sync::Arc;

use super::{IntMap, ThreadNames};

/// Thread id -> command name, from COMM records and (for a live session)
/// /proc. Names are kept in one table and referred to by index. A thread
/// renamed while the session runs keeps every name with the time it was
/// given, and a sample is named at handover, in time order, by the name
/// its thread had at the sample's time: rings are read one after the
/// other, so a COMM record may be read before or after a sample of the
/// same thread taken on another CPU.
///
/// A name read from /proc is the thread's name when it was read, which
/// may be after a rename: it is provisional, used only for samples no COMM
/// record names, until a handover uses it; it is then dated at that
/// sample's time (the earliest it names) and reported as learned, so that
/// a perf.data file can hold it as a COMM record of that time and a replay
/// names every sample as the live session did.
pub(super) struct CommTable {
    /// Every name given so far, once each; the first is `<...>` (no name
    /// known).
    pub(super) names: Vec<Arc<str>>,
    /// Name -> its index in `names`.
    index_of: HashMap<Arc<str>, u32>,
    /// Thread id -> its name's code (see [`CommTable::HISTORY`] and
    /// [`CommTable::PROVISIONAL`]) and, for a single dated name, the time
    /// it was given.
    of_tid: IntMap<i32, (u32, u64)>,
    /// The same for recent threads, direct-mapped by thread id: `(tid,
    /// code)`, checked before the map.
    recent: Vec<(i32, u32)>,
    /// Names of threads with more than one.
    histories: Vec<History>,
    /// Read /proc for threads not seen in a COMM record.
    live: bool,
    /// Names from /proc dated since the last
    /// [`RecordDecoder::take_learned`](super::RecordDecoder::take_learned).
    pub(super) learned: Vec<LearnedComm>,
}

/// The names of one thread.
#[derive(Debug, Default)]
struct History {
    /// Dated names: `(time, name index)`, in time order.
    timed: Vec<(u64, u32)>,
    /// A name read from /proc, not dated yet.
    provisional: Option<u32>,
}

impl CommTable {
    /// Threads in [`CommTable::recent`] (a power of two).
    const RECENT: usize = 256;
    /// In a code, the bit that says the rest is an index in
    /// [`CommTable::histories`] rather than in [`CommTable::names`].
    const HISTORY: u32 = 1 << 31;
    /// In a code, the bit that says the name was read from /proc and is
    /// not dated yet. Name indices stay below it.
    const PROVISIONAL: u32 = 1 << 30;

    #[inline]
    fn recent_slot(tid: i32) -> usize {
        tid as u32 as usize & (Self::RECENT - 1)
    }

    fn remember(&mut self, tid: i32, code: u32, since: u64) {
        self.of_tid.insert(tid, (code, since));
        self.keep_recent(tid, code);
    }

    #[inline]
    fn keep_recent(&mut self, tid: i32, code: u32) {
        if let Some(r) = self.recent.get_mut(Self::recent_slot(tid)) {
            *r = (tid, code);
        }
    }

    #[inline]
    fn code(&self, tid: i32) -> u32 {
        match self.recent.get(Self::recent_slot(tid)) {
            Some(&(t, code)) if t == tid => code,
            _ => self.of_tid.get(&tid).map_or(0, |&(code, _)| code),
        }
    }

    #[inline]
    fn history(&self, code: u32) -> Option<&History> {
        if code & Self::HISTORY == 0 {
            return None;
        }
        self.histories.get((code & !Self::HISTORY) as usize)
    }

    pub(super) fn new(names: ThreadNames) -> CommTable {
        CommTable {
            names: vec![Arc::from("<...>")],
            index_of: HashMap::new(),
            of_tid: IntMap::default(),
            recent: vec![(i32::MIN, 0); Self::RECENT],
            histories: Vec::new(),
            live: names == ThreadNames::ReadProc,
            learned: Vec::new(),
        }
    }

    /// The index of a name, added to the table if new (0, `<...>`, if
    /// the table is full). A name is stored once, however many threads
    /// or execs give it.
    fn push(&mut self, name: &str) -> u32 {
        if let Some(&n) = self.index_of.get(name) {
            return n;
        }
        let n = u32::try_from(self.names.len())
            .ok()
            .filter(|&n| n < Self::PROVISIONAL)
            .unwrap_or(0);
        if n != 0 {
            let name: Arc<str> = Arc::from(name);
            self.names.push(name.clone());
            self.index_of.insert(name, n);
        }
        n
    }

    /// Makes sure the thread `tid` of process `pid` has an entry, reading
    /// /proc for a new one.
    #[inline]
    pub(super) fn see(&mut self, pid: i32, tid: i32) {
        match self.recent.get(Self::recent_slot(tid)) {
            Some(&(t, _)) if t == tid => {}
            _ => self.see_slow(pid, tid),
        }
    }

    fn see_slow(&mut self, pid: i32, tid: i32) {
        if let Some(&(code, _)) = self.of_tid.get(&tid) {
            self.keep_recent(tid, code);
            return;
        }
        let read = || std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok();
        let code = match self.live.then(read).flatten() {
            Some(text) => self.push(text.trim_end()) | Self::PROVISIONAL,
            None => 0,
        };
        self.remember(tid, code, 0);
    }

    /// The index of the name thread `tid` had at `time`: the last name
    /// given at or before it, else the name read from /proc (then `true`),
    /// else the first name given (0 for none).
    #[inline]
    pub(super) fn at(&self, tid: i32, time: u64) -> (u32, bool) {
        let code = self.code(tid);
        let Some(h) = self.history(code) else {
            return (code & !Self::PROVISIONAL, code & Self::PROVISIONAL != 0);
        };
        match (h.timed.iter().rev().find(|e| e.0 <= time), h.provisional) {
            (Some(&(_, n)), _) => (n, false),
            (None, Some(p)) => (p, true),
            (None, None) => (h.timed.first().map_or(0, |e| e.1), false),
        }
    }

    /// A handover named a sample of `tid` at `time` by its name from
    /// /proc: the name counts from then on. Returns it, if it was still
    /// provisional.
    pub(super) fn settle(&mut self, tid: i32, time: u64) -> Option<u32> {
        let code = self.code(tid);
        if code & Self::PROVISIONAL != 0 {
            let n = code & !Self::PROVISIONAL;
            self.remember(tid, n, time);
            return Some(n);
        }
        if code & Self::HISTORY == 0 {
            return None;
        }
        let h = self.histories.get_mut((code & !Self::HISTORY) as usize)?;
        let p = h.provisional.take()?;
        let at = h.timed.partition_point(|e| e.0 <= time);
        h.timed.insert(at, (time, p));
        Some(p)
    }

    /// The name of index `n` (`<...>` when unknown).
    #[inline]
    pub(super) fn name(&self, n: u32) -> &Arc<str> {
        &self.names[(n as usize).min(self.names.len() - 1)]
    }

    /// Gives `tid` a history of names.
    fn add_history(&mut self, tid: i32, h: History) {
        let Ok(index) = u32::try_from(self.histories.len()) else {
            return;
        };
        if index >= Self::HISTORY {
            return;
        }
        self.histories.push(h);
        self.remember(tid, index | Self::HISTORY, 0);
    }

    /// A FORK record: thread `tid` of process `pid` was made by `ptid` of
    /// `ppid` at `time` (on `cpu`, `id` an event id of the record), and is
    /// called what `ptid` was then until a COMM record (its exec, or a
    /// rename) names it otherwise. In a live session the name is also
    /// reported as learned, so that a file holds it as a COMM record of
    /// the child at that time: its replay names the child the same way,
    /// whatever the parent's name came from (a record, or /proc).
    pub(super) fn fork(
        &mut self,
        (pid, tid): (i32, i32),
        (ppid, ptid): (i32, i32),
        time: u64,
        cpu: u32,
        id: u64,
    ) {
        if tid == ptid {
            return;
        }
        self.see(ppid, ptid);
        let (n, _) = self.at(ptid, time);
        if n == 0 {
            return;
        }
        let name = Arc::clone(self.name(n));
        self.set(tid, name.as_bytes(), time);
        if self.live {
            self.learned.push(LearnedComm {
                pid,
                tid,
                name,
                time_ns: time,
                cpu,
                id,
            });
        }
    }

    /// A COMM record: `tid` is called `name` from `time` on.
    pub(super) fn set(&mut self, tid: i32, name: &[u8], time: u64) {
        let name = String::from_utf8_lossy(name);
        match self.of_tid.get(&tid).copied() {
            // A new thread, or one whose name was unknown.
            None | Some((0, _)) => {
                let n = self.push(&name);
                self.remember(tid, n, time);
            }
            // Named from /proc: that name stays for the samples no COMM
            // record names.
            Some((code, _)) if code & Self::PROVISIONAL != 0 => {
                let n = self.push(&name);
                let h = History {
                    timed: vec![(time, n)],
                    provisional: Some(code & !Self::PROVISIONAL),
                };
                self.add_history(tid, h);
            }
            Some((code, since)) if code & Self::HISTORY == 0 => {
                // A repeated COMM (exec without a rename) keeps the entry.
                if **self.name(code) == *name {
                    if time < since {
                        self.remember(tid, code, time);
                    }
                    return;
                }
                let n = self.push(&name);
                let mut timed = vec![(since, code), (time, n)];
                timed.sort_by_key(|e| e.0);
                let h = History {
                    timed,
                    provisional: None,
                };
                self.add_history(tid, h);
            }
            Some((code, _)) => {
                let index = (code & !Self::HISTORY) as usize;
                let Some(h) = self.histories.get(index) else {
                    return;
                };
                let at = h.timed.partition_point(|e| e.0 <= time);
                // Given the name it already had at that time: nothing new.
                let before = at.checked_sub(1).and_then(|i| h.timed.get(i));
                if before.is_some_and(|&(_, b)| **self.name(b) == *name) {
                    return;
                }
                let n = self.push(&name);
                if let Some(h) = self.histories.get_mut(index) {
                    h.timed.insert(at, (time, n));
                }
            }
        }
    }
}

/// A command name the decoder learned from /proc rather than from a COMM
/// record, dated just before the earliest sample it named: a perf.data writer
/// stores it as a COMM record of that time, in the same round, so that a
/// replay names the thread the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedComm {
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// The name.
    pub name: Arc<str>,
    /// Just before the time of the earliest sample it named (1 ns).
    pub time_ns: u64,
    /// CPU of that sample.
    pub cpu: u32,
    /// An event id of that sample's probe.
    pub id: u64,
}
