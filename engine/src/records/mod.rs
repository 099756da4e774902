//! From raw perf records to [`Event`]s, with no kernel in sight: the
//! decoding a [`Session`](crate::Session) applies to what its rings hold,
//! usable as well on records read back from a perf.data file
//! ([`crate::perfdata`]) or made up by benchmarks and fuzzers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::ControlFlow;
use std::sync::Arc;

use byteorder::NativeEndian;
use linux_perf_event_reader::{
    get_record_identifier, Endianness, EventRecord, PerfEventAttr, RawData, RawEventRecord,
    RecordParseInfo, RecordType,
};
use perf_event_open_sys::bindings::{
    PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_RAW,
    PERF_SAMPLE_REGS_INTR, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

use crate::decode::{
    arg_kinds, decode_head, decode_into, decode_sample, DecodeError, Event, EventHead, SampleParts,
    Value,
};
use crate::plan::{ArgSource, ProbePlan};
use crate::session::SessionStats;
use crate::spec::BaseType;

mod build;
mod order;
#[cfg(test)]
mod tests;

pub use build::{
    comm_record_body, sample_attr_bytes, sample_record_body, user_mmap_bodies, SampleFields,
    MISC_USER, RECORD_MMAP,
};
use order::EventQueue;

/// The thread name a queued sample is decoded with: its `$comm` arguments
/// are set when it is handed over, from its thread's name at its time.
const COMM_AT_HANDOVER: &str = "";

/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = 3;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = 9;

/// The `sample_type` a session asks the kernel for with this plan: every
/// sample carries its event id, ip, pid/tid, time, cpu and raw data, plus
/// the registers the arguments need.
pub fn sample_type(plan: &ProbePlan) -> u64 {
    let mut t = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_RAW;
    if plan.regs_mask != 0 {
        t |= PERF_SAMPLE_REGS_INTR;
    }
    u64::from(t)
}

/// Why a set of probes cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordsError {
    /// An attr does not describe a sample layout we can read.
    #[error("the perf_event_attr of probe {probe} cannot be parsed: {source}")]
    Attr {
        /// Index of the probe.
        probe: usize,
        /// What the parser said.
        source: std::io::Error,
    },
    /// An attr asks for sample fields a kprobe-perf session never does.
    #[error("the perf_event_attr of probe {probe} has sample_type 0x{sample_type:x}; kprobe-perf's samples have only IDENTIFIER, IP, TID, TIME, CPU, RAW and REGS_INTR (0x{allowed:x}) and IDENTIFIER")]
    Layout {
        /// Index of the probe.
        probe: usize,
        /// Its sample_type.
        sample_type: u64,
        /// The bits allowed.
        allowed: u64,
    },
    /// The number of attrs, field tables or plans differ.
    #[error("{plans} probes but {attrs} attrs and {offsets} field tables")]
    Mismatch {
        /// Plans given.
        plans: usize,
        /// Attrs given.
        attrs: usize,
        /// Field offset tables given.
        offsets: usize,
    },
}

/// Why one record could not be used (it is also counted in
/// [`SessionStats::undecodable`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The record's event id belongs to no probe.
    #[error("its event id ({}) belongs to no probe", .0.map_or("none".to_string(), |i| i.to_string()))]
    UnknownId(Option<u64>),
    /// The record does not have the layout its attr describes.
    #[error("it does not have the layout of its attr: {0}")]
    Parse(String),
    /// The sample could not be decoded with its probe's plan.
    #[error("its sample cannot be decoded: {0}")]
    Decode(#[from] DecodeError),
}

/// A multiplicative hasher for the integer keys of the per-record lookups
/// (event ids, thread ids): SipHash costs more than the rest of a lookup.
#[derive(Default, Clone, Copy)]
struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i32(&mut self, i: i32) {
        self.write_u64(u64::from(i as u32));
    }
}

type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

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
struct CommTable {
    /// Every name given so far, once each; the first is `<...>` (no name
    /// known).
    names: Vec<Arc<str>>,
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
    /// [`RecordDecoder::take_learned`].
    learned: Vec<LearnedComm>,
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

    fn recent_slot(tid: i32) -> usize {
        tid as u32 as usize & (Self::RECENT - 1)
    }

    fn remember(&mut self, tid: i32, code: u32, since: u64) {
        self.of_tid.insert(tid, (code, since));
        self.keep_recent(tid, code);
    }

    fn keep_recent(&mut self, tid: i32, code: u32) {
        if let Some(r) = self.recent.get_mut(Self::recent_slot(tid)) {
            *r = (tid, code);
        }
    }

    fn code(&self, tid: i32) -> u32 {
        match self.recent.get(Self::recent_slot(tid)) {
            Some(&(t, code)) if t == tid => code,
            _ => self.of_tid.get(&tid).map_or(0, |&(code, _)| code),
        }
    }

    fn history(&self, code: u32) -> Option<&History> {
        if code & Self::HISTORY == 0 {
            return None;
        }
        self.histories.get((code & !Self::HISTORY) as usize)
    }

    fn new(live: bool) -> CommTable {
        CommTable {
            names: vec![Arc::from("<...>")],
            index_of: HashMap::new(),
            of_tid: IntMap::default(),
            recent: vec![(i32::MIN, 0); Self::RECENT],
            histories: Vec::new(),
            live,
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
    fn see(&mut self, pid: i32, tid: i32) {
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
    fn at(&self, tid: i32, time: u64) -> (u32, bool) {
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
    fn settle(&mut self, tid: i32, time: u64) -> Option<u32> {
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
    fn name(&self, n: u32) -> &Arc<str> {
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

    /// A COMM record: `tid` is called `name` from `time` on.
    fn set(&mut self, tid: i32, name: &[u8], time: u64) {
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

/// Where a probe's sampled registers lie in its samples.
#[derive(Debug)]
struct FastLayout {
    /// How many registers are sampled (`sample_regs_intr`'s bits).
    regs: usize,
    /// Per perf_regs index, its slot among the sampled registers
    /// ([`u8::MAX`]: not sampled).
    slot: [u8; 64],
    /// When every argument is a sampled register: per argument, its slot,
    /// type and name.
    registers_only: Option<Vec<(usize, BaseType, &'static str)>>,
}

impl FastLayout {
    fn new(mask: u64) -> FastLayout {
        let mut slot = [u8::MAX; 64];
        let mut n = 0u8;
        for (i, s) in slot.iter_mut().enumerate() {
            if mask & (1u64 << i) != 0 {
                *s = n;
                n += 1;
            }
        }
        FastLayout {
            regs: usize::from(n),
            slot,
            registers_only: None,
        }
    }

    /// Notes the plan's arguments, if all are sampled registers.
    fn with_plan(mut self, plan: &ProbePlan) -> FastLayout {
        self.registers_only = plan
            .args
            .iter()
            .map(|a| match a.source {
                ArgSource::Register(r) => self
                    .slot
                    .get(r.perf_index as usize)
                    .filter(|&&s| s != u8::MAX)
                    .map(|&s| (usize::from(s), a.ty.base, r.name)),
                _ => None,
            })
            .collect();
        self
    }
}

/// Event ids in [`RecordDecoder::probe_of_fast`]'s cache (a power of two).
const RECENT_IDS: usize = 64;

/// What handing over a probe's events needs of its plan.
#[derive(Debug)]
pub(crate) struct ProbeShape {
    /// [`arg_kinds`] of the plan.
    pub kinds: Vec<Option<BaseType>>,
    /// A kretprobe: the sampled ip is the return address.
    pub is_return: bool,
    /// The arguments that are the thread's name (`$comm` read by the
    /// engine), set when the event is handed over.
    pub comm_args: Vec<usize>,
}

/// Decodes the records of a set of probes: samples into [`Event`]s, handed
/// over in time order round by round ([`RecordDecoder::round`]), COMM
/// records into the thread-name table, LOST records into the counters.
pub struct RecordDecoder {
    plans: Vec<ProbePlan>,
    field_offsets: Vec<Vec<usize>>,
    attrs: Vec<Vec<u8>>,
    probe_of_id: IntMap<u64, usize>,
    parse_info: Vec<RecordParseInfo>,
    /// Per probe: `Some` when its samples have exactly the session layout,
    /// which [`RecordDecoder::fast_sample`] reads.
    fast: Vec<Option<FastLayout>>,
    comms: CommTable,
    stats: SessionStats,
    queue: EventQueue,
    /// Per probe, what delivering its events needs of its plan.
    shapes: Vec<ProbeShape>,
    /// See [`RecordDecoder::probe_of_fast`].
    recent_ids: Vec<(u64, usize)>,
    /// Per probe, its smallest event id (for the COMM records of names
    /// learned from /proc).
    first_ids: Vec<u64>,
}

impl RecordDecoder {
    /// A decoder for `plans`, whose events were opened with `attrs` (the
    /// bytes of each probe's perf_event_attr) and carry the ids of
    /// `probe_of_id`. `field_offsets[i]` lists where the arguments of
    /// tracefs probe `i` lie in its raw record (empty for PMU probes).
    /// `live` lets the decoder read /proc for threads it has no COMM for.
    pub fn new(
        plans: Vec<ProbePlan>,
        field_offsets: Vec<Vec<usize>>,
        attrs: Vec<Vec<u8>>,
        probe_of_id: HashMap<u64, usize>,
        live: bool,
    ) -> Result<RecordDecoder, RecordsError> {
        if attrs.len() != plans.len() || field_offsets.len() != plans.len() {
            return Err(RecordsError::Mismatch {
                plans: plans.len(),
                attrs: attrs.len(),
                offsets: field_offsets.len(),
            });
        }
        let allowed = u64::from(
            PERF_SAMPLE_IDENTIFIER
                | PERF_SAMPLE_IP
                | PERF_SAMPLE_TID
                | PERF_SAMPLE_TIME
                | PERF_SAMPLE_CPU
                | PERF_SAMPLE_RAW
                | PERF_SAMPLE_REGS_INTR,
        );
        let parse_info = attrs
            .iter()
            .enumerate()
            .map(|(probe, bytes)| {
                let (a, _) = PerfEventAttr::parse::<_, NativeEndian>(&bytes[..])
                    .map_err(|source| RecordsError::Attr { probe, source })?;
                // The record parser trusts the attr (a CALLCHAIN bit makes
                // it multiply a length from the record): allow only the
                // layout sessions use.
                let sample_type = a.sample_format.bits();
                if sample_type & !allowed != 0
                    || sample_type & u64::from(PERF_SAMPLE_IDENTIFIER) == 0
                {
                    return Err(RecordsError::Layout {
                        probe,
                        sample_type,
                        allowed,
                    });
                }
                let base = allowed & !u64::from(PERF_SAMPLE_REGS_INTR);
                let fast = (sample_type & base == base).then(|| {
                    FastLayout::new(if sample_type & u64::from(PERF_SAMPLE_REGS_INTR) != 0 {
                        a.sample_regs_intr
                    } else {
                        0
                    })
                });
                Ok((RecordParseInfo::new(&a, Endianness::LittleEndian), fast))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (parse_info, fast): (Vec<_>, Vec<Option<FastLayout>>) = parse_info.into_iter().unzip();
        let fast = fast
            .into_iter()
            .zip(&plans)
            .map(|(f, plan)| f.map(|f| f.with_plan(plan)))
            .collect();
        let mut decoder = RecordDecoder {
            first_ids: Vec::new(),
            stats: SessionStats {
                hits: vec![0; plans.len()],
                ..Default::default()
            },
            field_offsets,
            attrs,
            probe_of_id: probe_of_id.into_iter().collect(),
            parse_info,
            fast,
            comms: CommTable::new(live),
            queue: EventQueue::new(),
            shapes: plans
                .iter()
                .map(|p| ProbeShape {
                    kinds: arg_kinds(p),
                    is_return: p.is_return(),
                    comm_args: p
                        .args
                        .iter()
                        .enumerate()
                        .filter(|(_, a)| matches!(a.source, ArgSource::Comm))
                        .map(|(i, _)| i)
                        .collect(),
                })
                .collect(),
            plans,
            recent_ids: vec![(0, 0); RECENT_IDS],
        };
        decoder.first_ids = decoder
            .ids()
            .iter()
            .map(|ids| ids.first().copied().unwrap_or(0))
            .collect();
        Ok(decoder)
    }

    /// The probes, in the order events refer to them.
    pub fn plans(&self) -> &[ProbePlan] {
        &self.plans
    }

    /// Where each tracefs probe's arguments lie in its raw record.
    pub fn field_offsets(&self) -> &[Vec<usize>] {
        &self.field_offsets
    }

    /// The perf_event_attr bytes of each probe.
    pub fn attrs(&self) -> &[Vec<u8>] {
        &self.attrs
    }

    /// The event ids of each probe (one per CPU or thread it was opened
    /// on), sorted.
    pub fn ids(&self) -> Vec<Vec<u64>> {
        let mut ids = vec![Vec::new(); self.plans.len()];
        for (&id, &p) in &self.probe_of_id {
            if let Some(v) = ids.get_mut(p) {
                v.push(id);
            }
        }
        for v in &mut ids {
            v.sort_unstable();
        }
        ids
    }

    /// The probe an event id belongs to.
    pub fn probe_of_id(&self, id: u64) -> Option<usize> {
        self.probe_of_id.get(&id).copied()
    }

    /// [`RecordDecoder::probe_of_id`] through a direct-mapped cache of
    /// recent ids (`(id, probe)`; no event has id 0).
    #[inline]
    fn probe_of_fast(&mut self, id: u64) -> Option<usize> {
        let slot = id as usize & (RECENT_IDS - 1);
        if let Some(&(cached, probe)) = self.recent_ids.get(slot) {
            if cached == id && id != 0 {
                return Some(probe);
            }
        }
        let probe = self.probe_of_id(id)?;
        if let Some(r) = self.recent_ids.get_mut(slot) {
            *r = (id, probe);
        }
        Some(probe)
    }

    /// Counters so far.
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Counters, for the owner to add what it learns elsewhere.
    pub fn stats_mut(&mut self) -> &mut SessionStats {
        &mut self.stats
    }

    /// The names read from /proc since the last call.
    pub fn take_learned(&mut self) -> Vec<LearnedComm> {
        std::mem::take(&mut self.comms.learned)
    }

    /// Decodes one sample of a known probe without touching the counters
    /// or the name table (the thread is named `comm`): the decode step
    /// alone, for benchmarks and fuzzers. `body` is the record after its
    /// 8-byte header.
    pub fn decode_sample_bytes(
        &self,
        misc: u16,
        body: &[u8],
        comm: &Arc<str>,
    ) -> Result<Event, DecodeError> {
        let data = RawData::Single(body);
        let kind = RecordType(RECORD_SAMPLE);
        let probe = get_record_identifier::<NativeEndian>(kind, data, true)
            .and_then(|id| self.probe_of_id(id))
            .ok_or(DecodeError::Missing("a known event id"))?;
        let (Some(plan), Some(info)) = (self.plans.get(probe), self.parse_info.get(probe)) else {
            return Err(DecodeError::Missing("a known event id"));
        };
        match RawEventRecord::new(kind, misc, data, *info).parse() {
            Ok(EventRecord::Sample(s)) => {
                let offsets = self.field_offsets.get(probe).map_or(&[][..], Vec::as_slice);
                decode_sample(probe, plan, &s, comm.clone(), offsets)
            }
            _ => Err(DecodeError::Missing("a well-formed sample")),
        }
    }

    /// Handles one record (`kind` and `misc` from its header, `body` the
    /// rest, in one or two parts). A decoded sample of a probe the user
    /// asked for waits for [`RecordDecoder::round`]; counters and names are
    /// updated. Records of perf's own types (`FINISHED_ROUND` ...) are
    /// ignored.
    pub fn record(
        &mut self,
        kind: u32,
        misc: u16,
        body: (&[u8], &[u8]),
    ) -> Result<(), RecordError> {
        if kind == RECORD_SAMPLE && body.1.is_empty() {
            // The common case returns no more than a flag, so that no
            // result is copied between return slots.
            match self.fast_sample(body.0) {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => return Err(RecordError::Decode(e)),
                None => {}
            }
        }
        let data = if body.1.is_empty() {
            RawData::Single(body.0)
        } else {
            RawData::Split(body.0, body.1)
        };
        let kind = RecordType(kind);
        if kind.is_user_type() {
            return Ok(());
        }
        let id = get_record_identifier::<NativeEndian>(kind, data, true);
        let probe = id.and_then(|id| self.probe_of_id.get(&id).copied());
        let (Some(probe), Some(plan), Some(info)) = (
            probe,
            probe.and_then(|p| self.plans.get(p)),
            probe.and_then(|p| self.parse_info.get(p)),
        ) else {
            self.stats.undecodable += 1;
            return Err(RecordError::UnknownId(id));
        };
        let raw = RawEventRecord::new(kind, misc, data, *info);
        let cpu = || raw.common_data().ok().and_then(|c| c.cpu);
        match raw.parse() {
            Ok(EventRecord::Sample(s)) => {
                self.comms.see(s.pid.unwrap_or(-1), s.tid.unwrap_or(-1));
                let offsets = self.field_offsets.get(probe).map_or(&[][..], Vec::as_slice);
                let Some(sample_raw) = s.raw.map(|r| r.as_slice()) else {
                    self.stats.undecodable += 1;
                    return Err(DecodeError::Missing("raw data").into());
                };
                let parts = SampleParts::of(&s, &sample_raw);
                let regs = s.intr_regs.as_ref();
                let (head, args) = self.queue.begin();
                let decoded = decode_into(
                    probe,
                    plan,
                    &parts,
                    |i| regs.and_then(|r| r.get(i)),
                    COMM_AT_HANDOVER,
                    offsets,
                    head,
                    args,
                );
                account(&mut self.stats, &mut self.queue, decoded.map(|()| probe))
                    .map_err(RecordError::Decode)
            }
            Ok(EventRecord::Comm(c)) => {
                // Without a time (no sample_id_all), the name counts from
                // the start.
                let time = raw.common_data().ok().and_then(|c| c.timestamp);
                self.comms.set(c.tid, &c.name.as_slice(), time.unwrap_or(0));
                Ok(())
            }
            Ok(EventRecord::Lost(l)) => {
                self.stats.note_lost(cpu(), l.count);
                Ok(())
            }
            Ok(EventRecord::Throttle(_)) => {
                self.stats.note_throttle(cpu(), probe, true);
                Ok(())
            }
            Ok(EventRecord::Unthrottle(_)) => {
                self.stats.note_throttle(cpu(), probe, false);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => {
                self.stats.undecodable += 1;
                Err(RecordError::Parse(e.to_string()))
            }
        }
    }

    /// Hands `f` (with the plans events refer to) the decoded events known
    /// to be in time order: those older than the newest event of an earlier
    /// round, as a CPU may still be writing an older event when another's
    /// ring is read; with `all`, every one (the last round). Call it after
    /// each round of [`RecordDecoder::record`] calls (each ring read once).
    /// The event handed over is reused for the next: clone it to keep it.
    /// Names read from /proc that the round used are then ready for
    /// [`RecordDecoder::take_learned`]. Returns how many were handed over.
    pub fn round(&mut self, all: bool, mut f: impl FnMut(&Event, &[ProbePlan])) -> usize {
        self.try_round(all, |e, plans| {
            f(e, plans);
            ControlFlow::Continue(())
        })
    }

    /// As [`RecordDecoder::round`], but `f` may stop the round with
    /// `Break`: the events not yet handed over stay queued, in order, for
    /// the next round.
    pub fn try_round(
        &mut self,
        all: bool,
        mut f: impl FnMut(&Event, &[ProbePlan]) -> ControlFlow<()>,
    ) -> usize {
        let plans = &self.plans;
        let comms = &self.comms;
        // Per thread, the first (earliest) event named from /proc.
        let mut from_proc: Vec<EventHead> = Vec::new();
        let n = self.queue.round(
            &comms.names,
            |h| {
                let (n, provisional) = comms.at(h.tid, h.time_ns);
                if provisional && !from_proc.iter().any(|p| p.tid == h.tid) {
                    from_proc.push(*h);
                }
                n
            },
            &self.shapes,
            all,
            |e| f(e, plans),
        );
        for h in from_proc {
            // Dated just before that event: a COMM record of the same time
            // written after the sample would be applied after it by perf,
            // which keeps records of equal times in file order.
            let time = h.time_ns.saturating_sub(1);
            if let Some(name) = self.comms.settle(h.tid, time) {
                let learned = LearnedComm {
                    pid: h.pid,
                    tid: h.tid,
                    name: self.comms.name(name).clone(),
                    time_ns: time,
                    cpu: h.cpu,
                    id: self.first_ids.get(h.probe as usize).copied().unwrap_or(0),
                };
                self.comms.learned.push(learned);
            }
        }
        n
    }

    /// Decoded events waiting for a later round.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// A sample of the exact layout sessions use, in one piece, parsed
    /// directly; `None` sends it down the general path (which also reports
    /// any error).
    fn fast_sample(&mut self, b: &[u8]) -> Option<Result<(), DecodeError>> {
        let id = u64_at(b, 0)?;
        let probe = self.probe_of_fast(id)?;
        let layout = self.fast.get(probe)?.as_ref()?;
        let plan = self.plans.get(probe)?;
        let size = u32_at(b, 40)? as usize;
        let raw = b.get(44..44usize.checked_add(size)?)?;
        let regs: &[u8] = if layout.regs == 0 {
            &[]
        } else {
            let at = 44 + size;
            match u64_at(b, at)? {
                0 => &[],
                _ => b.get(at + 8..at + 8 + 8 * layout.regs)?,
            }
        };
        let parts = SampleParts {
            ip: u64_at(b, 8),
            pid: u32_at(b, 16).map(|v| v as i32),
            tid: u32_at(b, 20).map(|v| v as i32),
            time: u64_at(b, 24),
            cpu: u32_at(b, 32),
            raw,
        };
        self.comms
            .see(parts.pid.unwrap_or(-1), parts.tid.unwrap_or(-1));
        let offsets = self.field_offsets.get(probe).map_or(&[][..], Vec::as_slice);
        let reg = |i: u64| {
            let slot = *layout.slot.get(i as usize).filter(|&&s| s != u8::MAX)?;
            u64_at(regs, usize::from(slot) * 8)
        };
        let (head, args) = self.queue.begin();
        let decoded = match &layout.registers_only {
            // The usual PMU probe: its registers straight from their slots.
            Some(program) => decode_head(
                probe,
                plan.is_return(),
                plan.return_trampoline,
                &parts,
                head,
            )
            .and_then(|()| {
                for &(slot, ty, name) in program {
                    // None when the sample has no registers (ABI 0).
                    let v = u64_at(regs, slot * 8).ok_or(DecodeError::MissingRegister(name))?;
                    args.ints.push(Value::typed(v, ty));
                }
                Ok(())
            }),
            None => decode_into(
                probe,
                plan,
                &parts,
                reg,
                COMM_AT_HANDOVER,
                offsets,
                head,
                args,
            ),
        }
        .map(|()| probe);
        Some(account(&mut self.stats, &mut self.queue, decoded))
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at.checked_add(8)?)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_ne_bytes)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_ne_bytes)
}

/// Counts a decoded sample of `probe` and commits the queue's slot it was
/// decoded into, or counts a failure as undecodable.
#[inline]
fn account(
    stats: &mut SessionStats,
    queue: &mut EventQueue,
    decoded: Result<usize, DecodeError>,
) -> Result<(), DecodeError> {
    match decoded {
        Ok(probe) => {
            if let Some(h) = stats.hits.get_mut(probe) {
                *h += 1;
            }
            queue.commit();
            Ok(())
        }
        Err(e) => {
            queue.abort();
            stats.undecodable += 1;
            Err(e)
        }
    }
}

/// What takes raw records untouched, as a perf.data writer does (see
/// [`crate::perfdata::Writer`]). A session hands records to an
/// [`EventSink`](crate::EventSink) given to each drain; a sink that writes
/// a file forwards them here.
pub trait RecordSink {
    /// One record: `kind` and `misc` from its header, `body` the bytes
    /// after the header, in one or two parts.
    fn record(&mut self, kind: u32, misc: u16, body: (&[u8], &[u8])) -> std::io::Result<()>;

    /// Every ring has been read once since the last round: no record
    /// still to come is older than those already given.
    fn round_end(&mut self) -> std::io::Result<()>;
}
