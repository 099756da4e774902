//! A recording session: armed probes, one ring buffer per CPU polled with
//! mio, and decoded events handed to the caller in time order.

pub(crate) mod boot;
pub mod counting;
pub(crate) mod eprobe;
pub(crate) mod sink;
mod span;
pub(crate) mod summary;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use mio::{Events, Poll, Token};

use crate::attach;
use crate::attach::command::HeldCommand;
use crate::attach::open::{CpuStream, StreamRing};
use crate::attach::options::SessionOptions;
use crate::attach::process::{self, ProcessWatch};
use crate::attach::ring::RingBuffer;
use crate::attach::sys;

use crate::attach::tracefs::TracefsProbes;
use crate::decode::joiner::Joiner;
use crate::decode::records::{self, Handover, RecordDecoder, ThreadNames};
use crate::decode::records::{OpenedProbe, RingRecord};
use crate::decode::stats::KernelCounts;
pub use crate::decode::stats::{CallCounts, SessionStats, Throttling};
use crate::decode::Event;
use crate::error::Error;
use crate::plan::entry_join;
use crate::plan::{AttachPoint, Backend, ProbePlan};
use crate::session::sink::EventSink;
use crate::session::summary::{KernelSide, Summary};

/// What the session knows of the ring bytes a sink took without counting
/// them, for [`Session::count_taken`]: each event id's stream, and the
/// last id looked up (samples of one ring come together).
#[derive(Default)]
struct Taken {
    of_id: HashMap<u64, usize>,
    last: Option<(u64, usize)>,
}

/// Armed probes and their ring buffers.
pub struct Session {
    // Field order matters: the perf fds in `streams` must close before
    // `tracefs` removes the events they use.
    streams: Vec<CpuStream>,
    /// Per PMU kretprobe (its index) and slot, a counting-only event at
    /// the function's entry: no ring, no samples, read with read(2).
    entry_counters: Vec<(usize, OwnedFd)>,
    /// Per probe: the entry probe whose count gives a PMU kretprobe's
    /// entries instead of a counter (see `attach::open::entry_partners`).
    entry_partners: Vec<Option<usize>>,
    tracefs: Option<TracefsProbes>,
    /// Plans, attrs, ids, thread names and counters.
    decoder: RecordDecoder,
    /// Events handed over by [`Session::dump_overwrite`], for the
    /// flight recorder's window.
    dumped: u64,
    /// Ring bytes a sink took without the session counting them
    /// ([`EventSink::counts_later`]).
    taken: Option<Taken>,
    /// Canonical paths of the uprobes' binaries.
    user_binaries: Vec<std::path::PathBuf>,
    poll: Poll,
    events: Events,
    enabled: bool,
    /// The processes of [`RecordTarget::Processes`](crate::attach::target::RecordTarget::Processes), until they exit.
    watched: Vec<ProcessWatch>,
    /// The command of [`RecordTarget::Command`](crate::attach::target::RecordTarget::Command), and its pidfd (whose
    /// readiness ends a poll's wait when it exits).
    command: Option<(HeldCommand, Option<OwnedFd>)>,
    /// The command may have ended since [`Session::command_status`] last
    /// asked the kernel: a wait reported its pidfd (registered
    /// edge-triggered, so reported once), or could not tell (a full list
    /// of events, an error). Until then, the answer is the last one.
    command_may_have_ended: bool,
}

impl Session {
    /// Opens every probe on every online CPU (or for the target's tasks),
    /// maps one ring per CPU and leaves the probes disabled until
    /// [`Session::enable`].
    ///
    /// Every open first removes the tracefs definitions of kprobe-perf
    /// processes that are gone (silently nothing without tracefs). When
    /// the target inherits ([`RecordTarget::inherits`](crate::attach::target::RecordTarget::inherits)), uprobes are
    /// defined through `uprobe_events`, whose events follow forks.
    pub fn open(plans: Vec<ProbePlan>, opts: SessionOptions) -> Result<Session, Error> {
        let plans = entry_join::expand(plans);
        let opened = attach::open(&plans, &opts)?;
        // One attr and one offset table per plan, all made from the plans.
        let probes = opened
            .plans
            .into_iter()
            .zip(opened.attrs)
            .zip(opened.field_offsets)
            .map(|((plan, attr), field_offsets)| OpenedProbe {
                plan,
                attr,
                field_offsets,
            })
            .collect();
        let events = opened.events;
        let mut decoder = RecordDecoder::new(probes, events.probe_of_id, ThreadNames::ReadProc)
            .map_err(|e| Error::Internal {
                what: format!("describing the sample layout: {e}"),
            })?;
        if let Some(joiner) = Joiner::new(&plans) {
            decoder.join_entries(joiner);
        }
        let user_binaries = decoder
            .plans()
            .iter()
            .filter_map(|p| match &p.attach {
                AttachPoint::User { path, .. } => std::fs::canonicalize(path).ok(),
                _ => None,
            })
            .collect();
        let mut session = Session {
            streams: events.streams,
            entry_counters: events.entry_counters,
            entry_partners: events.entry_partners,
            tracefs: opened.tracefs,
            decoder,
            dumped: 0,
            taken: None,
            user_binaries,
            poll: opened.poll,
            events: Events::with_capacity(64),
            enabled: opened.enabled,
            watched: opened.watched,
            command: opened.command,
            command_may_have_ended: true,
        };
        if session.command.is_none() {
            // Every thread alive now named now, as perf record names
            // them: a process may end before its first samples are read,
            // taking its names in /proc with it, and a name read from
            // /proc at a thread's first sample is the one an exec since
            // gave it, on its events from before.
            session.thread_comm_records(&mut sink::sink_fn(|_| {}))?;
        }
        Ok(session)
    }

    /// For [`RecordTarget::Processes`](crate::attach::target::RecordTarget::Processes): true once every target process has
    /// exited (checked with a pidfd, whose readiness also ends the wait of
    /// [`Session::poll`]; before Linux 5.3, with `/proc/PID/stat`). False
    /// for every other target.
    pub fn target_exited(&self) -> bool {
        !self.watched.is_empty() && self.watched.iter().all(ProcessWatch::exited)
    }

    /// Arms every probe (the kernel does it at exec for a command's
    /// descendants, `RecordTarget::enables_on_exec`), then releases the
    /// command of a [`RecordTarget::Command`](crate::attach::target::RecordTarget::Command), reporting exec's failure.
    pub fn enable(&mut self) -> Result<(), Error> {
        if !self.enabled {
            for s in &self.streams {
                for fd in &s.fds {
                    sys::enable(fd).map_err(|e| Error::io("enabling a probe", e))?;
                }
            }
            // Entries counted from now on have their kretprobe armed.
            for (_, fd) in &self.entry_counters {
                sys::enable(fd)
                    .map_err(|e| Error::io("enabling a kretprobe's entry counter", e))?;
            }
            self.enabled = true;
        }
        if let Some((command, _)) = self.command.as_mut() {
            command.release()?;
        }
        Ok(())
    }

    /// The pid of the command of a [`RecordTarget::Command`](crate::attach::target::RecordTarget::Command).
    pub fn command_pid(&self) -> Option<i32> {
        self.command.as_ref().map(|(c, _)| c.pid())
    }

    /// The exit status of the command of a [`RecordTarget::Command`](crate::attach::target::RecordTarget::Command) once
    /// it has ended (it is then reaped); `None` while it runs, and for
    /// other targets. Does not block.
    pub fn command_status(&mut self) -> Result<Option<std::process::ExitStatus>, Error> {
        match self.command.as_mut() {
            // No wait has reported its pidfd since the kernel said it ran.
            Some((command, Some(_))) if !self.command_may_have_ended => Ok(command.status()),
            Some((command, _)) => {
                let status = command.try_wait()?;
                self.command_may_have_ended = status.is_some();
                Ok(status)
            }
            None => Ok(None),
        }
    }

    /// As [`Session::command_status`], waiting up to `grace` for the
    /// command to end (for instance after a Ctrl-C that reached it too).
    pub fn wait_command(
        &mut self,
        grace: Duration,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        match self.command.as_mut() {
            Some((command, _)) => Ok(command.wait(grace)?),
            None => Ok(None),
        }
    }

    /// Disarms every probe; buffered events can still be read.
    pub fn disable(&mut self) -> Result<(), Error> {
        for (_, fd) in &self.entry_counters {
            sys::disable(fd).map_err(|e| Error::io("disabling a kretprobe's entry counter", e))?;
        }
        for s in &self.streams {
            for fd in &s.fds {
                sys::disable(fd).map_err(|e| Error::io("disabling a probe", e))?;
            }
        }
        self.enabled = false;
        Ok(())
    }

    /// The probes of this session, in the order events refer to them:
    /// the user's (hidden entry probes are not among them, see
    /// the planner's entry joins).
    pub fn plans(&self) -> &[ProbePlan] {
        self.decoder.shown_plans()
    }

    /// Bytes written by the kernel and not yet read, per forward ring in
    /// the order the rings are read: for a drain timeline (the CLI's
    /// hidden `--drain-log`).
    #[doc(hidden)]
    pub fn ring_pending(&self) -> Vec<u64> {
        self.streams
            .iter()
            .filter_map(|s| match &s.ring {
                StreamRing::Forward(r) => Some(r.pending()),
                _ => None,
            })
            .collect()
    }

    /// Counters so far.
    pub fn stats(&self) -> &SessionStats {
        self.decoder.stats()
    }

    /// The decoder of this session's records: its plans, attrs and event
    /// ids, which a perf.data writer stores.
    pub fn decoder(&self) -> &RecordDecoder {
        &self.decoder
    }

    /// Hands `sink` (its [`EventSink::record`]) MMAP records of the
    /// uprobes' binaries in every running process, as `perf record`
    /// synthesizes them; the kernel's own MMAP records follow in the
    /// rings. Call it before the first drain, for a sink that writes a
    /// perf.data file, and again for each file a recording switches to.
    /// Nothing without uprobes, nor for a recorded command not yet
    /// released (the kernel describes its mappings as it execs).
    pub(crate) fn user_mmap_records<S: EventSink + ?Sized>(
        &self,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        // A recorded command's mappings all come from the kernel after its
        // exec: before it, its pid is this process's fork, whose mappings
        // would stand for the command's in a reader that does not drop
        // them at exec.
        let held = self.command.as_ref().is_some_and(|(c, _)| !c.released());
        if self.user_binaries.is_empty() || held {
            return Ok(());
        }
        for pid in proc_pids() {
            for body in records::user_mmap_bodies(pid, pid, &self.user_binaries, 0, 0, 0) {
                if sink
                    .record(RingRecord::new(
                        records::RECORD_MMAP,
                        records::MISC_USER,
                        (&body, &[]),
                    ))?
                    .is_break()
                {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// COMM records, dated 0, of the threads alive now whose samples the
    /// session may take: those of the `-p` processes, none for a command
    /// not yet released (the kernel names it at its exec, and its children
    /// by FORK records; a file switched to later names them so), every
    /// thread for any other target. perf record writes the
    /// same at its start: a file whose samples are counted only at the
    /// end ([`EventSink::counts_later`]) could otherwise name a thread
    /// from /proc only if it still runs then, and only at the file's end
    /// (where a thread gone meanwhile may have left its id to another).
    /// The decoder takes them too, so that counting names them alike.
    pub(crate) fn thread_comm_records<S: EventSink + ?Sized>(
        &mut self,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        let id = self.decoder.ids().into_iter().flatten().next();
        let held = self.command.as_ref().is_some_and(|(c, _)| !c.released());
        let (false, Some(id)) = (held, id) else {
            return Ok(());
        };
        let pids: Vec<i32> = if self.watched.is_empty() {
            proc_pids().collect()
        } else {
            self.watched.iter().map(ProcessWatch::pid).collect()
        };
        for pid in pids {
            // A process gone since the listing has nothing to name.
            let tids = process::threads_of(pid).ok().flatten().unwrap_or_default();
            for tid in tids {
                // Gone since the listing: nothing to name.
                let Ok(name) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                else {
                    continue;
                };
                let name = name.strip_suffix('\n').unwrap_or(&name);
                let body = records::comm_record_body(pid, tid, name, 0, 0, id);
                let comm = RingRecord::new(records::RECORD_COMM, 0, (&body, &[]));
                let _ = self.decoder.record(comm);
                if sink.record(comm)?.is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Hits the kernel counted for each probe, summed over its fds: every
    /// hit, including those whose samples were lost to a full ring.
    pub fn kernel_hits(&self) -> Result<Vec<u64>, Error> {
        let mut hits = self.all_kernel_hits()?;
        hits.truncate(self.plans().len());
        Ok(hits)
    }

    /// The kernel's hits of every probe opened, the user's then the
    /// hidden entry probes.
    fn all_kernel_hits(&self) -> Result<Vec<u64>, Error> {
        let mut hits = vec![0u64; self.decoder.plans().len()];
        for s in &self.streams {
            // fds of a stream are in plan order, once per thread sharing
            // the stream.
            let n = hits.len().max(1);
            for (i, fd) in s.fds.iter().enumerate() {
                let count =
                    sys::read_count(fd).map_err(|e| Error::io("reading a probe's count", e))?;
                if let Some(h) = hits.get_mut(i % n) {
                    *h += count;
                }
            }
        }
        Ok(hits)
    }

    /// Samples lost per probe: hits the kernel counted minus events decoded.
    /// Exact once the rings are drained (after [`Session::disable`] and a
    /// last [`Session::poll`]).
    pub fn lost_per_probe(&self) -> Result<Vec<u64>, Error> {
        Ok(self
            .kernel_hits()?
            .iter()
            .zip(&self.stats().hits)
            .map(|(k, got)| k.saturating_sub(*got))
            .collect())
    }

    /// Samples lost per CPU ring (`None`: a ring per thread; those are
    /// summed): the counts the kernel kept for the ring's events minus the
    /// samples decoded from it. Unlike [`SessionStats::lost_per_cpu`]
    /// (from `PERF_RECORD_LOST`, which the kernel writes only once a ring
    /// has room again), exact once the rings are drained, and summing to
    /// the total of [`Session::lost_per_probe`]. In flight-recorder mode,
    /// the samples not kept. CPUs that lost nothing are left out.
    pub fn lost_per_cpu(&self) -> Result<BTreeMap<Option<u32>, u64>, Error> {
        let mut lost = BTreeMap::new();
        let shown = self.plans().len();
        for s in &self.streams {
            let mut counted = 0u64;
            for fd in &s.fds {
                // The user's probes only: a hidden probe shares the ring.
                let id = sys::event_id(fd).map_err(|e| Error::io("reading a perf event id", e))?;
                if self.decoder.probe_of_id(id).is_none_or(|p| p >= shown) {
                    continue;
                }
                counted +=
                    sys::read_count(fd).map_err(|e| Error::io("reading a probe's count", e))?;
            }
            let n = counted.saturating_sub(s.samples);
            if n > 0 {
                *lost.entry(s.cpu).or_insert(0) += n;
            }
        }
        Ok(lost)
    }

    /// For each PMU kretprobe (`None` for other probes), the calls the
    /// kernel counted entering its function and the returns the kretprobe
    /// reported, over every CPU or thread; exact after
    /// [`Session::disable`]. Calls still running when the session was
    /// disabled count as unreturned.
    pub fn call_counts(&self) -> Result<Vec<Option<CallCounts>>, Error> {
        let mut counts: Vec<Option<CallCounts>> = vec![None; self.plans().len()];
        for (probe, fd) in &self.entry_counters {
            let n = sys::read_count(fd)
                .map_err(|e| Error::io("reading a kretprobe's entry count", e))?;
            if let Some(c) = counts.get_mut(*probe) {
                c.get_or_insert_with(CallCounts::default).entries += n;
            }
        }
        // Every probe's count read once: the partners' (hidden entry
        // probes included) and the returns (the user's probes, first).
        let all = self.all_kernel_hits()?;
        for (c, partner) in counts.iter_mut().zip(&self.entry_partners) {
            if let Some(entries) = partner.and_then(|j| all.get(j)) {
                c.get_or_insert_with(CallCounts::default).entries = *entries;
            }
        }
        for (c, returns) in counts.iter_mut().zip(&all) {
            if let Some(c) = c {
                c.returns = *returns;
            }
        }
        Ok(counts)
    }

    /// Hits and misses the kernel counted, for tracefs probes (`None` for
    /// PMU probes, whose counts the kernel does not expose).
    pub fn kernel_counts(&self) -> Vec<Option<KernelCounts>> {
        self.plans()
            .iter()
            .map(|p| {
                let fs = self.tracefs.as_ref()?;
                // kprobe_profile counts kprobes only.
                if p.backend != Backend::Tracefs || matches!(p.attach, AttachPoint::User { .. }) {
                    return None;
                }
                let (hits, misses) = fs.tracefs().profile(&p.event)?;
                Some(KernelCounts { hits, misses })
            })
            .collect()
    }

    /// The private tracefs group of this session's tracefs probes, if any.
    pub fn tracefs_group(&self) -> Option<&str> {
        self.tracefs.as_ref().map(|t| t.group())
    }

    /// Number of perf event fds this session holds.
    pub fn fd_count(&self) -> usize {
        self.streams.iter().map(|s| s.fds.len()).sum::<usize>() + self.entry_counters.len()
    }

    /// Flight-recorder mode: pauses every ring's output, takes the records
    /// written since the previous dump (those still in the ring), resumes
    /// the output, and hands the events to `sink` in timestamp order
    /// (raw records are not given: nothing is written to a file in this
    /// mode). Returns the number of events handed over; they count in
    /// the flight recorder's window of [`Session::summary`]. Does nothing
    /// without [`SessionOptions::overwrite`].
    pub fn dump_overwrite<S: EventSink + ?Sized>(
        &mut self,
        sink: &mut S,
    ) -> Result<usize, S::Error> {
        for stream in &mut self.streams {
            let StreamRing::Backward(ring) = &mut stream.ring else {
                continue;
            };
            let Some(owner) = stream.fds.first() else {
                continue;
            };
            sys::pause_output(owner, true)
                .map_err(|e| Error::io("pausing a flight-recorder ring", e))?;
            let taken = ring.take_new();
            sys::pause_output(owner, false)
                .map_err(|e| Error::io("resuming a flight-recorder ring", e))?;
            // Newest first in the ring: decode oldest first.
            let before = self.decoder.stats().shown_hits();
            for rec in taken.iter().rev() {
                // An undecodable record is counted in the stats.
                let _ = self
                    .decoder
                    .record(RingRecord::new(rec.kind, rec.misc, (&rec.body, &[])));
            }
            stream.samples += self.decoder.stats().shown_hits() - before;
        }
        let mut failed = None;
        let n = self
            .decoder
            .try_round(Handover::All, |e, _| hand(sink, e, &mut failed));
        self.dumped += n as u64;
        // No file in this mode: nothing keeps names learned from /proc.
        let _ = self.decoder.take_learned();
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// True in flight-recorder mode ([`SessionOptions::overwrite`]).
    pub(crate) fn is_overwrite(&self) -> bool {
        self.streams
            .iter()
            .any(|s| matches!(s.ring, StreamRing::Backward(_)))
    }

    /// Waits up to `timeout` (forever with `None`) until a ring has data
    /// (or a target process of [`RecordTarget::Processes`](crate::attach::target::RecordTarget::Processes), or the command
    /// of a [`RecordTarget::Command`](crate::attach::target::RecordTarget::Command), exits); a
    /// signal ends the wait early without error. Returns true when
    /// something was ready. Reads nothing: [`Session::drain`] does.
    ///
    /// A ring wakes the wait once a quarter of it is full, so an event
    /// loop also drains on a timer. An embedder with its own event loop
    /// watches [`Session::as_fd`] instead, then calls `wait(Some(Duration::ZERO))`
    /// (which takes the readiness the fd reported) and `drain`.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {
                // A full list may have left the pidfd's event for later.
                let full = self.events.iter().count() >= self.events.capacity();
                if full || self.events.iter().any(|e| e.token() == Token(usize::MAX)) {
                    self.command_may_have_ended = true;
                }
                Ok(!self.events.is_empty())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(Error::io("waiting for ring buffers", e)),
        }
    }

    /// Reads every ring without waiting, and hands `sink` each raw record
    /// (before decoding it), then the decoded events in timestamp order
    /// across all CPUs, then the COMM records of thread names this round
    /// read from /proc (dated just before the first event they named),
    /// then the end of the round.
    ///
    /// An event is handed over once a later round has passed its time (a
    /// CPU may still be writing an older event when another's ring is
    /// read), so events come one round late; after [`Session::disable`],
    /// a drain hands over everything. A sink error ends the drain and is
    /// returned; a `Break` ends it cleanly (see [`EventSink`] for what is
    /// kept for the next drain). Returns the number of events handed
    /// over. A sink that wants no events ([`EventSink::wants_events`])
    /// gets the records, names and round ends, its samples counted
    /// without being decoded; one that also counts later
    /// ([`EventSink::counts_later`]) gets each ring's bytes and the round
    /// ends, and nothing is counted until [`Session::count_taken`].
    pub fn drain<S: EventSink + ?Sized>(&mut self, sink: &mut S) -> Result<usize, S::Error> {
        let Session {
            streams, decoder, ..
        } = self;
        let count_only = !sink.wants_events() && decoder.can_count_only();
        let as_bytes = sink.takes_ring_bytes();
        let later = as_bytes && count_only && sink.counts_later();
        for stream in streams.iter_mut() {
            let StreamRing::Forward(ring) = &mut stream.ring else {
                continue;
            };
            let before = decoder.stats().shown_hits();
            let mut flow = Ok(ControlFlow::Continue(()));
            if later {
                let n = ring.take_bytes(|bytes| flow = sink.taken_bytes(bytes));
                decoder.stats_mut().ring_bytes += n as u64;
                if n > 0 {
                    self.taken.get_or_insert_default();
                }
            } else if as_bytes && count_only {
                flow = count_ring(ring, decoder, sink);
            } else if as_bytes {
                ring.drain_with_bytes(
                    |rec| take_record(decoder, rec, count_only),
                    |bytes| flow = sink.ring_bytes(bytes),
                );
            } else {
                ring.drain(|rec| {
                    take_record(decoder, rec, count_only);
                    if let Ok(ControlFlow::Continue(())) = flow {
                        flow = sink.record(rec);
                    }
                });
            }
            stream.samples += decoder.stats().shown_hits() - before;
            if flow?.is_break() {
                // The rings not read yet, and the events decoded, wait
                // for the next drain.
                return Ok(0);
            }
        }
        let handover = if self.enabled {
            Handover::Ordered
        } else {
            Handover::All
        };
        self.end_round(handover, sink)
    }

    /// True when a sink took ring bytes the session has not counted yet
    /// (see [`EventSink::counts_later`]).
    pub fn counts_pending(&self) -> bool {
        self.taken.is_some()
    }

    /// Counts one record of the ring bytes a sink took without the
    /// session counting them ([`EventSink::counts_later`]), given back
    /// in the order they were taken, as [`RecordDecoder::count`] would
    /// have in the drain: a sample is counted (for its ring too), its
    /// thread named and its addresses noted. Then [`Session::end_count`].
    pub fn count_taken(&mut self, record: RingRecord<'_>) {
        // An undecodable record is counted in the stats.
        let counted = self.decoder.count_inline(record).is_ok();
        // PERF_SAMPLE_IDENTIFIER: a sample's id comes first (a record
        // read back is in one piece).
        let id = match record.body.0.first_chunk::<8>() {
            Some(id) if counted && record.kind == records::RECORD_SAMPLE => u64::from_ne_bytes(*id),
            _ => return,
        };
        let taken = self.taken.get_or_insert_default();
        let stream = match taken.last {
            Some((last, stream)) if last == id => Some(stream),
            _ => {
                if taken.of_id.is_empty() {
                    // The ids of the user's probes' events, by ring.
                    let shown = self.decoder.shown_plans().len();
                    for (i, s) in self.streams.iter().enumerate() {
                        for fd in &s.fds {
                            let Ok(id) = sys::event_id(fd) else { continue };
                            if self.decoder.probe_of_id(id).is_some_and(|p| p < shown) {
                                taken.of_id.insert(id, i);
                            }
                        }
                    }
                }
                let stream = taken.of_id.get(&id).copied();
                taken.last = stream.map(|s| (id, s));
                stream
            }
        };
        if let Some(s) = stream.and_then(|i| self.streams.get_mut(i)) {
            s.samples += 1;
        }
    }

    /// Counts `n` records that could not be read (a piece of taken ring
    /// bytes ending at a corrupt header).
    pub(crate) fn note_undecodable(&mut self, n: u64) {
        self.decoder.stats_mut().undecodable += n;
    }

    /// After the last [`Session::count_taken`] (with the session
    /// disabled): the round of everything counted, its events (a sample
    /// split at a ring's end) and the names it read from /proc handed to
    /// `sink` as a drain hands them. The session's counters, names and
    /// addresses are then exact.
    pub fn end_count<S: EventSink + ?Sized>(&mut self, sink: &mut S) -> Result<usize, S::Error> {
        self.taken = None;
        self.end_round(Handover::All, sink)
    }

    /// The end of a drain's round: the events `handover` lets go to
    /// `sink`, then the names read from /proc as COMM records, then the
    /// round's end.
    fn end_round<S: EventSink + ?Sized>(
        &mut self,
        handover: Handover,
        sink: &mut S,
    ) -> Result<usize, S::Error> {
        let mut failed = None;
        let n = self
            .decoder
            .try_round(handover, |e, _| hand(sink, e, &mut failed));
        if let Some(e) = failed {
            return Err(e);
        }
        // Names read from /proc that this round used, dated at the first
        // event they named: in the file before the round ends, so that a
        // replay's round has them too.
        for l in self.decoder.take_learned() {
            let body = records::comm_record_body(l.pid, l.tid, &l.name, l.time_ns, l.cpu, l.id);
            if sink
                .record(RingRecord::new(records::RECORD_COMM, 0, (&body, &[])))?
                .is_break()
            {
                return Ok(n);
            }
        }
        // The round is over: a Break has nothing left to stop.
        let _ = sink.round_end()?;
        Ok(n)
    }

    /// The probe and return addresses of the samples drains counted
    /// without decoding, for a sink that wants no events (see
    /// [`EventSink::wants_events`]): what a symbol table needs to name
    /// them.
    pub fn counted_addresses(&self) -> &std::collections::HashSet<u64> {
        self.decoder.counted_addresses()
    }

    /// [`Session::wait`] up to `timeout`, then [`Session::drain`] into
    /// `sink`. Returns the number of events handed over.
    pub fn poll<S: EventSink + ?Sized>(
        &mut self,
        timeout: Option<Duration>,
        sink: &mut S,
    ) -> Result<usize, S::Error> {
        self.wait(timeout)?;
        self.drain(sink)
    }

    /// Everything counted so far: events and exact losses per probe, the
    /// kernel's hits and misses (tracefs kprobes), the calls entered and
    /// not returned (PMU kretprobes), throttling, lost records per CPU,
    /// and in flight-recorder mode the window the dumps held. Exact once
    /// the rings are drained (after [`Session::disable`] and a last
    /// drain). A count the kernel would not give is `None` (the losses
    /// then come from `PERF_RECORD_LOST`; see [`Summary::exact`]). While
    /// ring bytes wait to be counted ([`Session::counts_pending`]), their
    /// samples are not among the events and count as lost.
    pub fn summary(&self) -> Summary {
        Summary::new(
            self.plans(),
            self.stats(),
            KernelSide {
                overwrite: self.is_overwrite(),
                hits: self.kernel_hits().ok(),
                lost_per_cpu: self.lost_per_cpu().ok(),
                calls: self.call_counts().ok(),
                kernel: self.kernel_counts(),
                dumped: self.dumped,
            },
        )
    }
}

/// The usual file's drain of one ring: each record counted in the ring's
/// own loop (a repeat where it is read), the ring's bytes handed to `sink`
/// in one piece and added up once. A function of its own, so that the
/// loop is compiled as one.
#[inline(never)]
fn count_ring<S: EventSink + ?Sized>(
    ring: &mut RingBuffer,
    decoder: &mut RecordDecoder,
    sink: &mut S,
) -> Result<sink::Flow, S::Error> {
    let mut flow = Ok(ControlFlow::Continue(()));
    let mut read = 0;
    ring.drain_with_bytes(
        |rec| {
            let _ = decoder.count_inline(rec);
        },
        |bytes| {
            read = bytes.0.len() + bytes.1.len();
            flow = sink.ring_bytes(bytes);
        },
    );
    decoder.stats_mut().ring_bytes += read as u64;
    flow
}

/// The processes /proc lists now.
fn proc_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
}

/// Decodes one record read from a ring, or only counts it, and adds its
/// size to the bytes read. An undecodable record is counted in the stats.
#[inline]
fn take_record(decoder: &mut RecordDecoder, rec: RingRecord<'_>, count_only: bool) {
    decoder.stats_mut().ring_bytes += (8 + rec.body.0.len() + rec.body.1.len()) as u64;
    let _ = if count_only {
        decoder.count_inline(rec)
    } else {
        decoder.record(rec)
    };
}

/// Hands one event to `sink` for a round: an error is kept in `failed`
/// and stops the round.
#[inline]
fn hand<S: EventSink + ?Sized>(
    sink: &mut S,
    e: &Event,
    failed: &mut Option<S::Error>,
) -> ControlFlow<()> {
    match sink.event(e) {
        Ok(flow) => flow,
        Err(e) => {
            *failed = Some(e);
            ControlFlow::Break(())
        }
    }
}

/// The session's poller: readable when a ring has data to read (or a
/// watched process exited). For an embedder's event loop: on
/// readiness, call [`Session::wait`] with a zero timeout, then
/// [`Session::drain`].
impl AsFd for Session {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.poll.registry().as_fd()
    }
}

impl AsRawFd for Session {
    fn as_raw_fd(&self) -> RawFd {
        self.poll.as_raw_fd()
    }
}

// A session moves to another thread (a reader task, say): checked when
// the crate compiles.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Session>();
};
