//! From raw perf records to [`Event`]s, with no kernel in sight: the
//! decoding a [`Session`](crate::session::Session) applies to what its rings hold,
//! usable as well on records read back from a perf.data file
//! ([`crate::perfdata`]) or made up by benchmarks and fuzzers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::ControlFlow;
use std::sync::Arc;

use byteorder::NativeEndian;
use kprobe_perf_arch::boundary::ProbeSite;
use linux_perf_event_reader::{
    get_record_identifier, Endianness, EventRecord, PerfEventAttr, RawData, RawEventRecord,
    RecordParseInfo, RecordType, SampleRecord,
};
use perf_event_open_sys::bindings::{
    PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,
    PERF_SAMPLE_RAW, PERF_SAMPLE_REGS_INTR, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

use crate::decode::stats::{SessionStats, ThrottleChange};
use crate::decode::{
    arg_kinds, decode_into, decode_sample, AddressSet, DecodeError, Event, EventHead, Handed,
    SampleParts,
};
use crate::plan::{ArgSource, ProbePlan};
use kprobe_perf_spec::BaseType;

mod build;
mod comm;
mod fast;
mod order;
#[cfg(test)]
mod tests;

/// The one type of a raw record, from a ring to a sink or a file.
pub use crate::attach::ring::RingRecord;
pub use build::{comm_record_body, sample_attr_bytes, user_mmap_bodies, MISC_USER};
/// Builders of sample records as the kernel lays them out, for tests,
/// fuzzers and benchmarks (the `test-util` feature).
#[cfg(any(test, feature = "test-util"))]
pub use build::{sample_record_body, SampleFields};
use comm::CommTable;
pub use comm::LearnedComm;
use fast::FastLayout;
use order::EventQueue;

pub use crate::attach::attr::sample_type;

/// The thread name a queued sample is decoded with: its `$comm` arguments
/// are set when it is handed over, from its thread's name at its time.
const COMM_AT_HANDOVER: &str = "";

/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = perf_event_open_sys::bindings::PERF_RECORD_COMM;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = perf_event_open_sys::bindings::PERF_RECORD_SAMPLE;
/// `PERF_RECORD_EXIT`.
pub const RECORD_EXIT: u32 = perf_event_open_sys::bindings::PERF_RECORD_EXIT;
/// `PERF_RECORD_FORK`.
pub const RECORD_FORK: u32 = perf_event_open_sys::bindings::PERF_RECORD_FORK;
/// `PERF_RECORD_MMAP`: the one definition, for the records built here,
/// the symbolizer and perf.data.
pub const RECORD_MMAP: u32 = perf_event_open_sys::bindings::PERF_RECORD_MMAP;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = perf_event_open_sys::bindings::PERF_RECORD_MMAP2;

/// The thread and time of a `PERF_RECORD_EXIT` (`kind`, `body` as a
/// [`RecordSink`] or [`crate::session::sink::EventSink`] is given them): `None` for
/// other records or a body too short. The body starts with pid, ppid,
/// tid and ptid (u32 each), then the time.
pub fn thread_exit(record: RingRecord<'_>) -> Option<(i32, u64)> {
    let RingRecord { kind, body, .. } = record;
    if kind != RECORD_EXIT {
        return None;
    }
    let mut b = [0u8; 24];
    let n = body.0.len().min(24);
    b[..n].copy_from_slice(&body.0[..n]);
    let rest = body.1.get(..24 - n)?;
    b[n..].copy_from_slice(rest);
    let tid = i32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
    let time = u64::from_ne_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]);
    Some((tid, time))
}

/// Which decoded events [`RecordDecoder::round`] hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// Those known to be in time order: older than the newest event of an
    /// earlier round (a CPU may still be writing an older event when
    /// another's ring is read).
    Ordered,
    /// Every one: the last round, when no older record can come.
    All,
}

/// Where a [`RecordDecoder`] finds the names of threads that no COMM
/// record named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadNames {
    /// Nowhere else (a file read back, made-up records): they are `<...>`.
    RecordsOnly,
    /// In /proc, as a live session can.
    ReadProc,
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
    #[error("the perf_event_attr of probe {probe} has sample_type 0x{sample_type:x}; kprobe-perf's samples have only IDENTIFIER, IP, TID, TIME, CPU, CALLCHAIN, RAW and REGS_INTR (0x{allowed:x}) and IDENTIFIER")]
    Layout {
        /// Index of the probe.
        probe: usize,
        /// Its sample_type.
        sample_type: u64,
        /// The bits allowed.
        allowed: u64,
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
pub(crate) struct IntHasher(u64);

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

    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }
}

type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Event ids in [`RecordDecoder::probe_of_fast`]'s cache (a power of two).
const RECENT_IDS: usize = 64;

/// What handing over a probe's events needs of its plan.
#[derive(Debug)]
pub(crate) struct ProbeShape {
    /// [`arg_kinds`] of the plan.
    pub kinds: Vec<Option<BaseType>>,
    /// A kretprobe ([`ProbeSite::Return`]): the sampled ip is the return
    /// address.
    pub site: ProbeSite,
    /// The arguments that are the thread's name (`$comm` read by the
    /// engine), set when the event is handed over.
    pub comm_args: Vec<usize>,
    /// For a kprobe whose arguments are all integers: their types, for
    /// handing its events over as [`crate::decode::IntEvent`]s.
    pub int_kinds: Option<Vec<BaseType>>,
}

/// Decodes the records of a set of probes: samples into [`Event`]s, handed
/// over in time order round by round ([`RecordDecoder::round`]), COMM
/// records into the thread-name table, LOST records into the counters.
pub struct RecordDecoder {
    /// The probes' plans, handed with each event.
    plans: Vec<ProbePlan>,
    /// Per probe (in the order of `plans`), how its records are read.
    probes: Vec<ProbeLayout>,
    probe_of_id: IntMap<u64, usize>,
    comms: CommTable,
    stats: SessionStats,
    queue: EventQueue,
    /// See [`RecordDecoder::probe_of_fast`].
    recent_ids: Vec<(u64, usize)>,
    /// Joins hidden entry probes to their returns ([`crate::plan::entry_join`]).
    join: Option<crate::decode::joiner::Joiner>,
    /// Per shown probe (the user's, once entries are joined), the filter
    /// run in user space at handover.
    user_filters: Vec<Option<crate::plan::filter::Filter>>,
    /// The probe and return addresses of the samples
    /// [`RecordDecoder::count`] passed over without decoding.
    counted_addresses: AddressSet,
    /// The callchain bytes of the last sample counted with one, whose
    /// kernel frames are in `counted_addresses` (most repeat it).
    counted_chain: Vec<u8>,
    /// Per thread named from /proc, its earliest sample counted this
    /// round: the next round settles the name there, as a handover does.
    counted_unnamed: IntMap<i32, EventHead>,
    /// The last sample [`RecordDecoder::count`] counted in full, whose
    /// repeats are only counted (see `fast::CountRepeat`).
    count_repeat: Option<fast::CountRepeat>,
    /// When some probe's samples carry user registers and stack bytes:
    /// the processes' mappings and the DWARF unwinder.
    user_stacks: Option<Box<crate::decode::user_stacks::UserStacks>>,
    /// False while [`RecordDecoder::count`] decodes a record: a sample's
    /// user stack is not unwound, and the processes' mappings are not
    /// followed.
    unwind_samples: bool,
    /// The address range of bytes that outlive every record of them
    /// (a mapped perf.data file, [`RecordDecoder::read_in_place`]): user
    /// stacks in it wait for handover as offsets, not copies.
    in_place: std::ops::Range<usize>,
}

/// One probe as it was opened, for a [`RecordDecoder`]: its plan, the
/// bytes of the perf_event_attr its events were opened with, and where
/// its arguments lie in its raw record when it is a tracefs probe (empty
/// for a PMU probe).
#[derive(Debug, Clone)]
pub struct OpenedProbe {
    /// The plan.
    pub plan: ProbePlan,
    /// The perf_event_attr's bytes.
    pub attr: Vec<u8>,
    /// Offsets of the arguments in a tracefs probe's raw record.
    pub field_offsets: Vec<usize>,
}

impl OpenedProbe {
    /// A PMU probe of `plan` opened with the sample layout sessions use
    /// (see [`sample_attr_bytes`]): for decoding made-up or stored records
    /// without a session.
    pub fn with_session_layout(plan: ProbePlan) -> OpenedProbe {
        OpenedProbe {
            attr: sample_attr_bytes(&plan),
            plan,
            field_offsets: Vec::new(),
        }
    }
}

/// How the records of one probe are read, fixed when the decoder is made.
#[derive(Debug)]
pub(super) struct ProbeLayout {
    /// The perf_event_attr's bytes.
    attr: Vec<u8>,
    /// See [`OpenedProbe::field_offsets`].
    field_offsets: Vec<usize>,
    /// The record parser's view of the attr.
    parse_info: RecordParseInfo,
    /// `Some` when the samples have exactly the session layout, which
    /// [`RecordDecoder::fast_sample`] reads.
    fast: Option<FastLayout>,
    /// Where the callchain's frame count lies in a sample record's body,
    /// when the samples carry one.
    chain_at: Option<usize>,
    /// The samples begin with the session's fixed fields, then the
    /// callchain if any, then the raw record (after which the user
    /// registers and stack may follow): what [`RecordDecoder::count`]
    /// reads without the parser.
    head: bool,
    /// What handing over the probe's events needs of its plan.
    pub(super) shape: ProbeShape,
    /// The probe's smallest event id (for the COMM records of names
    /// learned from /proc).
    first_id: u64,
}

/// The filters of `plans` that run in user space (one per plan).
fn user_filters(plans: &[ProbePlan]) -> Vec<Option<crate::plan::filter::Filter>> {
    plans
        .iter()
        .map(|p| {
            p.filter
                .as_ref()
                .filter(|f| !f.in_kernel())
                .map(|f| f.filter().clone())
        })
        .collect()
}

impl RecordDecoder {
    /// A decoder for `probes`, whose events carry the ids of
    /// `probe_of_id` (an id to its index in `probes`). With
    /// [`ThreadNames::ReadProc`], the decoder reads /proc for threads it
    /// has no COMM for.
    pub fn new(
        probes: Vec<OpenedProbe>,
        probe_of_id: HashMap<u64, usize>,
        names: ThreadNames,
    ) -> Result<RecordDecoder, RecordsError> {
        let mut first_ids: IntMap<usize, u64> = IntMap::default();
        for (&id, &p) in &probe_of_id {
            let first = first_ids.entry(p).or_insert(id);
            *first = (*first).min(id);
        }
        let mut plans = Vec::with_capacity(probes.len());
        let mut layouts = Vec::with_capacity(probes.len());
        let mut any_dwarf = false;
        for (probe, opened) in probes.into_iter().enumerate() {
            let (parse_info, fast, chain_at, dwarf, head) = sample_layout(probe, &opened.attr)?;
            any_dwarf |= dwarf;
            layouts.push(ProbeLayout {
                fast: fast.map(|f| f.with_plan(&opened.plan)),
                shape: probe_shape(&opened.plan),
                first_id: first_ids.get(&probe).copied().unwrap_or(0),
                attr: opened.attr,
                field_offsets: opened.field_offsets,
                parse_info,
                chain_at,
                head,
            });
            plans.push(opened.plan);
        }
        let user_filters = user_filters(&plans);
        let filtered = if user_filters.iter().any(Option::is_some) {
            vec![0; plans.len()]
        } else {
            Vec::new()
        };
        Ok(RecordDecoder {
            stats: SessionStats {
                hits: vec![0; plans.len()],
                filtered,
                ..Default::default()
            },
            probes: layouts,
            probe_of_id: probe_of_id.into_iter().collect(),
            comms: CommTable::new(names),
            queue: EventQueue::new(),
            user_filters,
            plans,
            recent_ids: vec![(0, 0); RECENT_IDS],
            join: None,
            counted_addresses: AddressSet::default(),
            counted_chain: Vec::new(),
            counted_unnamed: IntMap::default(),
            count_repeat: None,
            unwind_samples: true,
            in_place: 0..0,
            user_stacks: any_dwarf.then(|| {
                Box::new(crate::decode::user_stacks::UserStacks::new(
                    names == ThreadNames::ReadProc,
                ))
            }),
        })
    }

    /// The probes opened, in the order of the ids and attrs (with
    /// [`RecordDecoder::join_entries`], a joined probe is its return part
    /// and the hidden entry probes follow the user's: see
    /// [`RecordDecoder::shown_plans`]).
    pub fn plans(&self) -> &[ProbePlan] {
        &self.plans
    }

    /// Joins the hidden entry probes of `joiner` to their returns: events
    /// of hidden probes are no longer handed over nor counted in
    /// [`SessionStats::hits`] (which then has the user's probes only), and
    /// [`RecordDecoder::round`] hands the user's plans.
    pub fn join_entries(&mut self, joiner: crate::decode::joiner::Joiner) {
        let n = joiner.shown().len();
        self.stats.hits.truncate(n);
        self.stats.entry_unknown = vec![0; n];
        self.user_filters = user_filters(joiner.shown());
        self.stats.filtered = if self.user_filters.iter().any(Option::is_some) {
            vec![0; n]
        } else {
            Vec::new()
        };
        self.join = Some(joiner);
    }

    /// The user's probes, in the order handed-over events refer to them:
    /// [`RecordDecoder::plans`] unless entries are joined.
    pub fn shown_plans(&self) -> &[ProbePlan] {
        self.join.as_ref().map_or(&self.plans, |j| j.shown())
    }

    /// Where the arguments of probe `probe` (an index in
    /// [`RecordDecoder::plans`]) lie in its raw record: empty for a PMU
    /// probe or an index out of range.
    pub fn field_offsets(&self, probe: usize) -> &[usize] {
        self.probes.get(probe).map_or(&[], |p| &p.field_offsets)
    }

    /// The perf_event_attr bytes of probe `probe` (empty for an index out
    /// of range).
    pub fn attr(&self, probe: usize) -> &[u8] {
        self.probes.get(probe).map_or(&[], |p| &p.attr)
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

    /// True when some probe's samples carry a callchain.
    pub fn has_callchains(&self) -> bool {
        self.probes.iter().any(|p| p.chain_at.is_some())
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
        let (Some(plan), Some(layout)) = (self.plans.get(probe), self.probes.get(probe)) else {
            return Err(DecodeError::Missing("a known event id"));
        };
        if let Some(at) = layout.chain_at {
            if !chain_fits(&data, at) {
                return Err(DecodeError::Missing("a callchain that fits in the record"));
            }
        }
        match RawEventRecord::new(kind, misc, data, layout.parse_info).parse() {
            Ok(EventRecord::Sample(s)) => {
                decode_sample(probe, plan, &s, comm.clone(), &layout.field_offsets)
            }
            _ => Err(DecodeError::Missing("a well-formed sample")),
        }
    }

    /// True when [`RecordDecoder::count`] can stand for
    /// [`RecordDecoder::record`]: no probe's entry values are joined and
    /// no filter runs in user space (both need every argument decoded).
    pub fn can_count_only(&self) -> bool {
        self.join.is_none() && self.user_filters.iter().all(Option::is_none)
    }

    /// As [`RecordDecoder::record`] for a consumer that keeps raw records
    /// and looks at no event (a perf.data file written without live
    /// output): a sample of the session layout is counted, its thread
    /// named (a name read from /proc is dated, at the next round, just
    /// before the thread's earliest sample it names, and reported as
    /// learned, as for a decoded sample) and its probe and return addresses noted (see
    /// [`RecordDecoder::counted_addresses`]), but its arguments are not
    /// decoded and it is not queued for a round; its callchain's kernel
    /// frames are noted too, and its user registers and stack (DWARF
    /// call graphs) are not read. A sample that repeats the last one
    /// counted so (the same probe, thread, size and sampled caller, a
    /// later time) is only counted. Any other record (a sample split at
    /// the ring's end, COMM, LOST ...) goes to [`RecordDecoder::record`],
    /// whose events a round then hands over as usual. Counters are the same as `record` would keep, when
    /// [`RecordDecoder::can_count_only`].
    pub fn count(&mut self, record: RingRecord<'_>) -> Result<(), RecordError> {
        self.count_inline(record)
    }

    /// [`RecordDecoder::count`], a repeat of the last sample counted in
    /// full (`fast::CountRepeat`) counted where it is called (the drain's
    /// loop), anything else by [`RecordDecoder::count_in_full`].
    #[inline(always)]
    pub(crate) fn count_inline(&mut self, record: RingRecord<'_>) -> Result<(), RecordError> {
        if record.kind == RECORD_SAMPLE && record.body.1.is_empty() {
            let repeat = self.count_repeat.as_mut();
            if let Some(probe) = repeat.and_then(|r| r.repeats(record.body.0)) {
                if let Some(h) = self.stats.hits.get_mut(probe) {
                    *h += 1;
                }
                return Ok(());
            }
        }
        self.count_in_full(record)
    }

    /// [`RecordDecoder::count`] of a record that is no repeat.
    #[inline(never)]
    fn count_in_full(&mut self, record: RingRecord<'_>) -> Result<(), RecordError> {
        let RingRecord { kind, body, .. } = record;
        if kind == RECORD_SAMPLE && body.1.is_empty() {
            match self.count_sample(body.0) {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => return Err(RecordError::Decode(e)),
                None => {}
            }
        }
        // Nothing looks at the frames: the user stack stays unwound (a
        // file keeps its bytes for whoever reads it), as perf record does.
        let unwinding = self.unwind_samples;
        self.unwind_samples = false;
        let r = self.record(record);
        self.unwind_samples = unwinding;
        r
    }

    /// The probe addresses and return addresses (a kretprobe's caller) of
    /// the samples [`RecordDecoder::count`] counted without decoding: what
    /// a symbol table needs to name them, as a decoded [`Event`]'s
    /// `probe_addr` and `ret_addr` would.
    pub fn counted_addresses(&self) -> &std::collections::HashSet<u64> {
        self.counted_addresses.as_set()
    }

    /// Handles one record (`kind` and `misc` from its header, `body` the
    /// rest, in one or two parts). A decoded sample of a probe the user
    /// asked for waits for [`RecordDecoder::round`]; counters and names are
    /// updated. Records of perf's own types (`FINISHED_ROUND` ...) are
    /// ignored.
    #[inline]
    pub fn record(&mut self, record: RingRecord<'_>) -> Result<(), RecordError> {
        let RingRecord { kind, body, .. } = record;
        if kind == RECORD_SAMPLE && body.1.is_empty() && self.register_sample(body.0).is_some() {
            return Ok(());
        }
        self.other_record(record)
    }

    /// [`RecordDecoder::record`] of any record but the usual sample.
    #[inline(never)]
    fn other_record(&mut self, record: RingRecord<'_>) -> Result<(), RecordError> {
        let RingRecord { kind, misc, body } = record;
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
        // Mappings need no probe: perf.data files also hold ones made from
        // /proc, without a sample id.
        if kind.is_user_type() || self.note_mapping(kind.0, misc, data) {
            return Ok(());
        }
        let id = get_record_identifier::<NativeEndian>(kind, data, true);
        let probe = id.and_then(|id| self.probe_of_id.get(&id).copied());
        let (Some(probe), Some(_), Some(layout)) = (
            probe,
            probe.and_then(|p| self.plans.get(p)),
            probe.and_then(|p| self.probes.get(p)),
        ) else {
            self.stats.undecodable += 1;
            return Err(RecordError::UnknownId(id));
        };
        if kind.0 == RECORD_SAMPLE {
            if let Some(at) = layout.chain_at {
                if !chain_fits(&data, at) {
                    self.stats.undecodable += 1;
                    return Err(RecordError::Parse(
                        "its callchain is longer than the record".into(),
                    ));
                }
            }
        }
        let (info, first_id) = (layout.parse_info, layout.first_id);
        self.apply_record(probe, first_id, RawEventRecord::new(kind, misc, data, info))
    }

    /// What one identified record of `probe` changes: a sample is
    /// decoded; names, forks, exits, losses and throttling are noted.
    fn apply_record(
        &mut self,
        probe: usize,
        first_id: u64,
        raw: RawEventRecord<'_>,
    ) -> Result<(), RecordError> {
        let cpu = || raw.common_data().ok().and_then(|c| c.cpu);
        let time = || raw.common_data().ok().and_then(|c| c.timestamp);
        match self.follow_tasks(time().unwrap_or(0), raw.parse()) {
            Ok(EventRecord::Sample(s)) => self.sample(probe, s),
            Ok(EventRecord::Comm(c)) => {
                // Without a time (no sample_id_all), the name counts from
                // the start.
                self.comms
                    .set(c.tid, &c.name.as_slice(), time().unwrap_or(0));
                Ok(())
            }
            Ok(EventRecord::Fork(f)) => {
                self.comms.fork(
                    (f.pid, f.tid),
                    (f.ppid, f.ptid),
                    f.timestamp,
                    cpu().unwrap_or(0),
                    first_id,
                );
                Ok(())
            }
            Ok(EventRecord::Exit(x)) => {
                // A thread that exits inside a function whose return is
                // joined never returns: its entry goes (memory stays
                // bounded however many threads do).
                if let Some(j) = self.join.as_mut() {
                    j.thread_exits(x.tid, x.timestamp);
                }
                Ok(())
            }
            Ok(EventRecord::Lost(l)) => {
                self.stats.note_lost(cpu(), l.count);
                if let Some(j) = self.join.as_mut() {
                    j.events_lost();
                }
                Ok(())
            }
            Ok(EventRecord::Throttle(_)) => {
                self.stats
                    .note_throttle(cpu(), probe, ThrottleChange::Throttled);
                Ok(())
            }
            Ok(EventRecord::Unthrottle(_)) => {
                self.stats
                    .note_throttle(cpu(), probe, ThrottleChange::Unthrottled);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => {
                self.stats.undecodable += 1;
                Err(RecordError::Parse(e.to_string()))
            }
        }
    }

    /// Records given from now on may lie in `bytes`, which outlive them
    /// (a mapped perf.data file): a user stack in it is kept as its
    /// offset there, not copied, until [`RecordDecoder::round_in_place`]
    /// unwinds it with the same `bytes`.
    pub(crate) fn read_in_place(&mut self, bytes: &[u8]) {
        let start = bytes.as_ptr() as usize;
        self.in_place = start..start + bytes.len();
    }

    /// True when samples carry user stacks to unwind: the decoder then
    /// wants every MMAP, FORK, COMM and EXIT record (a file read back
    /// gives it those too).
    pub fn unwinds_user_stacks(&self) -> bool {
        self.user_stacks.is_some()
    }

    /// Lets the DWARF unwinder follow forks, execs and exits; `parsed`
    /// is handed back.
    fn follow_tasks<'a, E>(
        &mut self,
        time: u64,
        parsed: Result<EventRecord<'a>, E>,
    ) -> Result<EventRecord<'a>, E> {
        if let (Ok(r), Some(stacks), true) =
            (&parsed, self.user_stacks.as_mut(), self.unwind_samples)
        {
            stacks.follow(time, r);
        }
        parsed
    }

    /// Notes an executable mapping for the DWARF unwinder; true when the
    /// record is an MMAP or MMAP2 record (of any mapping).
    fn note_mapping(&mut self, kind: u32, misc: u16, data: RawData<'_>) -> bool {
        use linux_perf_event_reader::{Mmap2Record, MmapRecord};
        if !matches!(kind, RECORD_MMAP | RECORD_MMAP2) {
            return false;
        }
        // While counting (RecordDecoder::count) nothing is unwound:
        // following the mappings would load each object's unwind tables
        // in the middle of a drain for nothing (5 ms for python3.11 and
        // its libraries, against a ring that fills in 1 ms). A decoding
        // drain after counting ones reads a process it does not know from
        // /proc, as a live session does for one mapped before it began.
        if self.user_stacks.is_none() || !self.unwind_samples {
            return true;
        }
        // Its time, from the sample_id trailer of a probe's record; none
        // (0) in a mapping a perf.data file made from /proc.
        let time = get_record_identifier::<NativeEndian>(RecordType(kind), data, true)
            .and_then(|id| self.probe_of_id.get(&id))
            .and_then(|&p| self.probes.get(p))
            .and_then(|layout| {
                RawEventRecord::new(RecordType(kind), misc, data, layout.parse_info)
                    .common_data()
                    .ok()
                    .and_then(|c| c.timestamp)
            })
            .unwrap_or(0);
        let Some(stacks) = self.user_stacks.as_mut() else {
            return true;
        };
        if kind == RECORD_MMAP {
            if let Ok(m) = MmapRecord::parse::<NativeEndian>(data, misc) {
                if m.is_executable {
                    stacks.mapped(
                        time,
                        m.pid,
                        m.address,
                        m.length,
                        m.page_offset,
                        &m.path.as_slice(),
                    );
                }
            }
        } else if let Ok(m) = Mmap2Record::parse::<NativeEndian>(data, misc) {
            if m.protection & (libc::PROT_EXEC as u32) != 0 {
                stacks.mapped(
                    time,
                    m.pid,
                    m.address,
                    m.length,
                    m.page_offset,
                    &m.path.as_slice(),
                );
            }
        }
        true
    }

    /// Decodes the sample `s` of `probe` into the queue, counting it.
    fn sample(&mut self, probe: usize, s: SampleRecord<'_>) -> Result<(), RecordError> {
        let Some(plan) = self.plans.get(probe) else {
            self.stats.undecodable += 1;
            return Err(RecordError::UnknownId(None));
        };
        self.comms.see(s.pid.unwrap_or(-1), s.tid.unwrap_or(-1));
        let offsets = self.probes.get(probe).map_or(&[][..], |p| &p.field_offsets);
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
        if let (Ok(()), Some(chain)) = (&decoded, s.callchain) {
            self.queue
                .set_frames((0..chain.len()).filter_map(|i| chain.get(i)));
        }
        // Unwound at handover: the mappings of another CPU's ring may come
        // later in this round than the sample.
        if let (Ok(()), Some(stacks), Some(regs), Some((stack, dyn_size))) = (
            &decoded,
            self.user_stacks.as_ref().filter(|_| self.unwind_samples),
            s.user_regs.as_ref(),
            s.user_stack,
        ) {
            let regs = stacks.registers(regs);
            // Only the first dyn_size bytes were copied from the stack
            // (it ends there); the rest of the dump is padding.
            let stack = stack.as_slice();
            let len = usize::try_from(dyn_size).map_or(stack.len(), |n| n.min(stack.len()));
            let at = stack.as_ptr() as usize;
            if self.in_place.contains(&at) && at + len <= self.in_place.end {
                self.queue
                    .set_user_stack_in_place(regs, (at - self.in_place.start) as u64, len);
            } else {
                self.queue.set_user_stack(regs, &stack[..len]);
            }
        }
        account(&mut self.stats, &mut self.queue, decoded.map(|()| probe))
            .map_err(RecordError::Decode)
    }

    /// Hands `f` (with the plans events refer to) the decoded events known
    /// to be in time order: those older than the newest event of an earlier
    /// round, as a CPU may still be writing an older event when another's
    /// ring is read ([`Handover::Ordered`]); with [`Handover::All`], every
    /// one (the last round). Call it after
    /// each round of [`RecordDecoder::record`] calls (each ring read once).
    /// The event handed over is reused for the next: clone it to keep it.
    /// Names read from /proc that the round used are then ready for
    /// [`RecordDecoder::take_learned`]. Returns how many were handed over.
    pub fn round(&mut self, handover: Handover, mut f: impl FnMut(&Event, &[ProbePlan])) -> usize {
        self.try_round(handover, |e, plans| {
            f(e, plans);
            ControlFlow::Continue(())
        })
    }

    /// [`RecordDecoder::round`] for records read in place: `bytes` are
    /// those given to [`RecordDecoder::read_in_place`]. Kprobe hits with
    /// integer arguments only may be handed as [`Handed::Ints`]: `f`
    /// returns false to decline one, which is then handed as an [`Event`].
    pub(crate) fn round_in_place(
        &mut self,
        handover: Handover,
        bytes: &[u8],
        mut f: impl FnMut(Handed<'_>, &[ProbePlan]) -> bool,
    ) -> usize {
        self.round_with(handover, bytes, |h, plans| {
            f(h, plans).then_some(ControlFlow::Continue(()))
        })
    }

    /// As [`RecordDecoder::round`], but `f` may stop the round with
    /// `Break`: the events not yet handed over stay queued, in order, for
    /// the next round.
    pub fn try_round(
        &mut self,
        handover: Handover,
        mut f: impl FnMut(&Event, &[ProbePlan]) -> ControlFlow<()>,
    ) -> usize {
        self.round_with(handover, &[], |h, plans| match h {
            Handed::Event(e) => Some(f(e, plans)),
            Handed::Ints(_) => None,
        })
    }

    /// [`RecordDecoder::try_round`], with the bytes user stacks kept in
    /// place lie in, and [`Handed::Ints`] offered to `f` (`None`: declined).
    fn round_with(
        &mut self,
        handover: Handover,
        in_place: &[u8],
        mut f: impl FnMut(Handed<'_>, &[ProbePlan]) -> Option<ControlFlow<()>>,
    ) -> usize {
        let plans = &self.plans;
        let comms = &self.comms;
        let (join, stats) = (&mut self.join, &mut self.stats);
        let SessionStats {
            entry_unknown,
            filtered,
            ..
        } = stats;
        let user_filters = &self.user_filters;
        let mut dropped = 0usize;
        // The user-space filters, before `f` sees an event: a rejected
        // one is counted and skipped.
        let mut f = |h: Handed<'_>, plans: &[ProbePlan]| {
            if let Handed::Event(e) = h {
                if let Some(Some(filter)) = user_filters.get(e.probe) {
                    if !filter.matches(e) {
                        if let Some(n) = filtered.get_mut(e.probe) {
                            *n += 1;
                        }
                        dropped += 1;
                        return Some(ControlFlow::Continue(()));
                    }
                }
            }
            f(h, plans)
        };
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
            &self.probes,
            handover,
            order::UserStacksAt {
                in_place,
                unwind: |pid, time, regs, stack: &[u8], out: &mut Vec<_>| {
                    if let Some(u) = self.user_stacks.as_mut() {
                        u.unwind(pid, time, regs, stack, out);
                    }
                },
            },
            |h| match (h, &mut *join) {
                // Filtered or joined events are handed as events.
                (Handed::Ints(i), None) if !matches!(user_filters.get(i.probe), Some(Some(_))) => {
                    f(h, plans)
                }
                (Handed::Ints(_), _) => None,
                (Handed::Event(_), None) => Some(f(h, plans).unwrap_or(ControlFlow::Continue(()))),
                (Handed::Event(e), Some(j)) => {
                    let unknown = |p: usize| {
                        if let Some(n) = entry_unknown.get_mut(p) {
                            *n += 1;
                        }
                    };
                    Some(j.pass(e, unknown, |m, shown| {
                        f(Handed::Event(m), shown).unwrap_or(ControlFlow::Continue(()))
                    }))
                }
            },
        );
        let n = n.saturating_sub(dropped);
        // Mapping changes no sample waits for are applied (memory stays
        // bounded when samples are not unwound).
        if let Some(u) = self.user_stacks.as_mut() {
            u.advance(self.queue.read_up_to());
        }
        self.settle_names(from_proc);
        n
    }

    /// Dates the names read from /proc that a round used (`from_proc`:
    /// per thread, its earliest event so named), and those of samples
    /// counted without decoding, for [`RecordDecoder::take_learned`].
    fn settle_names(&mut self, mut from_proc: Vec<EventHead>) {
        // Samples counted without decoding (RecordDecoder::count), named
        // from /proc unless a COMM record read since names them.
        // A repeat counted from now on is checked in full once more: the
        // names this round settles change what a count notes.
        self.count_repeat = None;
        for (_, h) in self.counted_unnamed.drain() {
            if self.comms.at(h.tid, h.time_ns).1 {
                from_proc.push(h);
            }
        }
        // The earliest first: a thread's name is dated at its first use.
        from_proc.sort_by_key(|h| h.time_ns);
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
                    id: self.probes.get(h.probe as usize).map_or(0, |p| p.first_id),
                };
                self.comms.learned.push(learned);
            }
        }
    }

    /// Decoded events waiting for a later round.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// True when the callchain whose frame count lies at byte `at` of a
/// sample's body fits in it: the record parser trusts the count.
fn chain_fits(data: &RawData<'_>, at: usize) -> bool {
    let Some(nr) = data
        .get(at..at + 8)
        .map(|d| d.as_slice())
        .and_then(|b| <[u8; 8]>::try_from(&b[..]).ok())
        .map(u64::from_ne_bytes)
    else {
        return false;
    };
    usize::try_from(nr)
        .ok()
        .and_then(|n| n.checked_mul(8))
        .and_then(|n| n.checked_add(at + 8))
        .is_some_and(|end| end <= data.len())
}

/// Counts a decoded sample of `probe` and commits the queue's slot it was
/// decoded into, or counts a failure as undecodable.
#[inline(always)]
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

/// How the samples of probe `probe` are laid out, from its attr's
/// `bytes`: the parser's view, the fast reader's layout (`None`: the fast
/// reader does not know it), and where a callchain starts (`None`: no
/// callchain). Refuses a layout sessions do not open.
fn sample_layout(probe: usize, bytes: &[u8]) -> Result<SampleLayout, RecordsError> {
    let allowed = u64::from(
        PERF_SAMPLE_IDENTIFIER
            | PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CPU
            | PERF_SAMPLE_CALLCHAIN
            | PERF_SAMPLE_RAW
            | PERF_SAMPLE_REGS_INTR
            | PERF_SAMPLE_REGS_USER
            | PERF_SAMPLE_STACK_USER,
    );
    let dwarf = u64::from(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER);
    let (a, _) = PerfEventAttr::parse::<_, NativeEndian>(bytes)
        .map_err(|source| RecordsError::Attr { probe, source })?;
    // The record parser trusts the attr (a CALLCHAIN bit makes
    // it multiply a length from the record): allow only the
    // layout sessions use.
    let sample_type = a.sample_format.bits();
    if sample_type & !allowed != 0 || sample_type & u64::from(PERF_SAMPLE_IDENTIFIER) == 0 {
        return Err(RecordsError::Layout {
            probe,
            sample_type,
            allowed,
        });
    }
    let callchain = u64::from(PERF_SAMPLE_CALLCHAIN);
    // The fields before the callchain, 8 bytes each.
    let chain_at = (sample_type & callchain != 0).then(|| {
        [
            PERF_SAMPLE_IDENTIFIER,
            PERF_SAMPLE_IP,
            PERF_SAMPLE_TID,
            PERF_SAMPLE_TIME,
            PERF_SAMPLE_CPU,
        ]
        .iter()
        .filter(|&&b| sample_type & u64::from(b) != 0)
        .count()
            * 8
    });
    let base = allowed & !u64::from(PERF_SAMPLE_REGS_INTR | PERF_SAMPLE_CALLCHAIN) & !dwarf;
    // The fast reader knows the layout without a callchain or user stack.
    let fast =
        (sample_type & base == base && sample_type & callchain == 0 && sample_type & dwarf == 0)
            .then(|| {
                FastLayout::new(if sample_type & u64::from(PERF_SAMPLE_REGS_INTR) != 0 {
                    a.sample_regs_intr
                } else {
                    0
                })
            });
    Ok((
        RecordParseInfo::new(&a, Endianness::LittleEndian),
        fast,
        chain_at,
        sample_type & dwarf == dwarf,
        sample_type & base == base,
    ))
}

/// What [`sample_layout`] reads of one probe's attr: how to parse its
/// records, the fast reader's layout (when it applies), where the
/// callchain starts, and whether samples carry a user stack to unwind.
/// Last, whether samples begin with the session's fixed fields (then
/// the callchain, if any, then the raw record), which
/// [`RecordDecoder::count`] reads without the parser.
type SampleLayout = (
    RecordParseInfo,
    Option<FastLayout>,
    Option<usize>,
    bool,
    bool,
);

/// What the decoder keeps of a plan to turn its samples into events.
fn probe_shape(p: &ProbePlan) -> ProbeShape {
    let kinds = arg_kinds(p);
    let comm_args: Vec<usize> = p
        .args
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a.source, ArgSource::Comm))
        .map(|(i, _)| i)
        .collect();
    let int_kinds = (p.site() == ProbeSite::Entry && comm_args.is_empty())
        .then(|| kinds.iter().copied().collect::<Option<Vec<BaseType>>>())
        .flatten();
    ProbeShape {
        kinds,
        site: p.site(),
        comm_args,
        int_kinds,
    }
}

/// What takes raw records untouched, as a perf.data writer does (see
/// [`crate::perfdata::Writer`]). A session hands records to an
/// [`EventSink`](crate::session::sink::EventSink) given to each drain; a sink that writes
/// a file forwards them here.
pub trait RecordSink {
    /// One record: `kind` and `misc` from its header, `body` the bytes
    /// after the header, in one or two parts.
    fn record(&mut self, record: RingRecord<'_>) -> std::io::Result<()>;

    /// Every ring has been read once since the last round: no record
    /// still to come is older than those already given.
    fn round_end(&mut self) -> std::io::Result<()>;
}
