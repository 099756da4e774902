//! A recording session: armed probes, one ring buffer per CPU polled with
//! mio, and decoded events handed to the caller in time order.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::decode::Event;
use crate::error::Error;
use crate::plan::{AttachPoint, Backend, ProbePlan};
use crate::pmu::{ProbePmu, SYSFS_PMUS};
use crate::process::{self, ProcessWatch};
use crate::records::{self, Handover, RecordDecoder, RecordSink, ThreadNames};
use crate::ring::{BackwardRing, RingBuffer};
pub use crate::stats::{SessionStats, ThrottleChange, Throttling};
use crate::sys;
use crate::tracefs::{self, TracefsProbes};

/// Default ring size per CPU in data pages (512 KiB with 4 KiB pages).
pub const DEFAULT_MMAP_PAGES: usize = 128;

/// Whose probe hits are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordTarget {
    /// Every task on every online CPU.
    AllCpus,
    /// Every task, on these CPUs only.
    Cpus(Vec<u32>),
    /// These threads (tids), on any CPU; children are not followed.
    Threads(Vec<i32>),

    /// Every task in a cgroup (v2: a directory under the cgroup2 mount),
    /// on every online CPU, through `PERF_FLAG_PID_CGROUP`.
    Cgroup(std::path::PathBuf),

    /// One process and the children it creates afterwards.
    Process {
        /// The process id.
        pid: i32,
        /// Arm the probes only when the process calls exec (for a command
        /// started held before exec).
        enable_on_exec: bool,
    },

    /// Processes (pids; duplicates count once): every thread each has
    /// when the session opens, and every thread and child process they
    /// start afterwards (the events are inherited, as with `perf record
    /// -p`). The engine finds the threads in `/proc/PID/task`, and lists
    /// them again once the events are open: if a thread appeared in
    /// between (created by a thread not yet attached, so not inherited),
    /// it closes everything and attaches again (up to 5 times; after
    /// that, such late threads are not recorded). [`Session::target_exited`]
    /// says when every process has exited.
    Processes(Vec<i32>),
}

impl RecordTarget {
    /// True when the target's events are inherited by the tasks it
    /// creates (a command and its children, processes and their new
    /// threads): such uprobes then go through `uprobe_events` (see
    /// [`ProbePlan::through_uprobe_events`]).
    pub fn inherits(&self) -> bool {
        matches!(
            self,
            RecordTarget::Process { .. } | RecordTarget::Processes(_)
        )
    }
}

/// Session settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// Whose hits to record.
    pub target: RecordTarget,
    /// Data pages per CPU ring (a power of two).
    pub mmap_pages: usize,
    /// Flight-recorder mode: rings are written backward and mapped
    /// read-only, so the kernel keeps the newest records and overwrites
    /// the oldest; nothing is read until [`Session::dump_overwrite`].
    pub overwrite: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            target: RecordTarget::AllCpus,
            mmap_pages: DEFAULT_MMAP_PAGES,
            overwrite: false,
        }
    }
}

/// Calls of a PMU kretprobe's function, as the kernel counted them: the
/// entries (a counting-only kprobe at the function's entry, which writes
/// no sample) and the returns the kretprobe reported (its own count,
/// samples lost to a full ring included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls that entered the function while the session was enabled.
    pub entries: u64,
    /// Returns the kretprobe reported.
    pub returns: u64,
}

impl CallCounts {
    /// Calls whose entry was counted and whose return was not: missed for
    /// lack of a kretprobe instance, or still running at the end.
    pub fn unreturned(&self) -> u64 {
        self.entries.saturating_sub(self.returns)
    }
}

/// A stream's ring: read as it fills, or kept as a flight recorder.
enum StreamRing {
    Forward(RingBuffer),
    Backward(BackwardRing),
}

struct CpuStream {
    ring: StreamRing,
    /// All fds of this CPU; the first owns the ring.
    fds: Vec<OwnedFd>,
    /// The CPU the ring's events were opened on (`None`: per thread).
    cpu: Option<u32>,
    /// Samples decoded from this ring: the rest of its events' counts
    /// were lost (or, in flight-recorder mode, not kept).
    samples: u64,
}

/// Hits and misses the kernel counted for a tracefs probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelCounts {
    /// Times the probe fired.
    pub hits: u64,
    /// Times it could not run (for a kretprobe: no free instance, so the
    /// return was not reported).
    pub misses: u64,
}

/// Armed probes and their ring buffers.
pub struct Session {
    // Field order matters: the perf fds in `streams` must close before
    // `tracefs` removes the events they use.
    streams: Vec<CpuStream>,
    /// Per PMU kretprobe (its index) and slot, a counting-only event at
    /// the function's entry: no ring, no samples, read with read(2).
    entry_counters: Vec<(usize, OwnedFd)>,
    tracefs: Option<TracefsProbes>,
    /// Plans, attrs, ids, thread names and counters.
    decoder: RecordDecoder,
    /// Where raw records are copied (see [`Session::set_record_sink`]).
    sink: Option<Box<dyn RecordSink>>,
    /// The first error of the sink, returned by the next poll.
    sink_error: Option<std::io::Error>,
    /// Canonical paths of the uprobes' binaries.
    user_binaries: Vec<std::path::PathBuf>,
    poll: Poll,
    events: Events,
    enabled: bool,
    /// The processes of [`RecordTarget::Processes`], until they exit.
    watched: Vec<ProcessWatch>,
}

pub use crate::cpus::online_cpus;

pub(crate) mod attach;

/// Checks what a newcomer hits first: a kernel without the kprobe PMU, or
/// a process without the capability to use it.
pub fn preflight() -> Result<ProbePmu, Error> {
    let pmu = ProbePmu::discover("kprobe")
        .map_err(|e| Error::io("reading the kprobe PMU from sysfs", e))?
        .ok_or_else(|| Error::NoKprobePmu {
            dir: format!("{SYSFS_PMUS}/kprobe"),
        })?;
    check_capabilities()?;
    Ok(pmu)
}

/// Fails unless this process has CAP_PERFMON or CAP_SYS_ADMIN.
pub fn check_capabilities() -> Result<(), Error> {
    let caps = sys::effective_capabilities().map_err(|e| Error::io("reading capabilities", e))?;
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if !has(sys::CAP_PERFMON) && !has(sys::CAP_SYS_ADMIN) {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "kprobe-perf".into());
        return Err(Error::NotPermitted { exe });
    }
    Ok(())
}

impl Session {
    /// Opens every probe on every online CPU (or for the target's tasks),
    /// maps one ring per CPU and leaves the probes disabled until
    /// [`Session::enable`].
    ///
    /// Every open first removes the tracefs definitions of kprobe-perf
    /// processes that are gone (silently nothing without tracefs). When
    /// the target inherits ([`RecordTarget::inherits`]), uprobes are
    /// defined through `uprobe_events`, whose events follow forks.
    pub fn open(plans: Vec<ProbePlan>, opts: SessionOptions) -> Result<Session, Error> {
        tracefs::remove_stale_if_mounted();
        let RecordTarget::Processes(pids) = &opts.target else {
            return Session::open_tasks(plans, opts, &[]);
        };
        const ATTEMPTS: usize = 5;
        let pids = process::unique_pids(pids);
        if pids.is_empty() {
            return Err(Error::Target(
                "no process to record: give at least one pid".into(),
            ));
        }
        // Watched from before the first scan, so an exit is never missed.
        let watched = pids
            .iter()
            .map(|&p| ProcessWatch::new(p))
            .collect::<Result<Vec<_>, _>>()?;
        let scan = || -> Result<Vec<(i32, i32)>, Error> {
            let mut threads = Vec::new();
            for &pid in &pids {
                let tids = process::threads_of(pid).map_err(|e| {
                    Error::io(
                        format!("listing the threads of process {pid} (/proc/{pid}/task)"),
                        e,
                    )
                })?;
                threads.extend(tids.unwrap_or_default().into_iter().map(|t| (pid, t)));
            }
            Ok(threads)
        };
        let mut attempt = 1;
        loop {
            let threads = scan()?;
            let mut session = Session::open_tasks(plans.clone(), opts.clone(), &threads)?;
            // A thread created before its creator's events were open
            // inherited nothing: attach again, from a new list.
            let late = scan()?.iter().any(|t| !threads.contains(t));
            if !late || attempt == ATTEMPTS {
                for (k, w) in watched.iter().enumerate() {
                    if let Some(fd) = w.pidfd() {
                        session
                            .poll
                            .registry()
                            .register(
                                &mut SourceFd(&fd.as_raw_fd()),
                                Token(usize::MAX - k),
                                Interest::READABLE,
                            )
                            .map_err(|e| Error::io("registering a pidfd with the poller", e))?;
                    }
                }
                session.watched = watched;
                return Ok(session);
            }
            attempt += 1;
        }
    }

    /// For [`RecordTarget::Processes`]: true once every target process has
    /// exited (checked with a pidfd, whose readiness also ends the wait of
    /// [`Session::poll`]; before Linux 5.3, with `/proc/PID/stat`). False
    /// for every other target.
    pub fn target_exited(&self) -> bool {
        !self.watched.is_empty() && self.watched.iter().all(ProcessWatch::exited)
    }

    /// Opens the probes for `opts.target`; for
    /// [`RecordTarget::Processes`], on each (pid, tid) of `threads` on
    /// every CPU, one ring per CPU shared by all threads.
    fn open_tasks(
        plans: Vec<ProbePlan>,
        opts: SessionOptions,
        threads: &[(i32, i32)],
    ) -> Result<Session, Error> {
        let mut plans = attach::plans_for_target(plans, &opts.target);
        let pmus = attach::probe_pmus(&plans)?;
        let cpus = online_cpus()?;
        let defined = attach::define_events(&mut plans, pmus)?;
        let scopes = attach::scopes(&opts.target, &cpus, threads)?;
        attach::reserve_fds(&plans, &scopes.slots)?;
        let attrs = attach::file_attrs(&plans, &defined.openers, &opts);
        let poll = Poll::new().map_err(|e| Error::io("creating the poller", e))?;
        let opened = attach::open_events(&plans, &defined.openers, &opts, &scopes.slots, &poll)?;
        let attach::Opened {
            streams,
            probe_of_id,
            entry_counters,
        } = opened;
        let tracefs_guard = defined.tracefs;
        let field_offsets = defined.field_offsets;
        let enabled = matches!(
            opts.target,
            RecordTarget::Process {
                enable_on_exec: true,
                ..
            }
        );
        let decoder = RecordDecoder::new(
            plans,
            field_offsets,
            attrs,
            probe_of_id,
            ThreadNames::ReadProc,
        )
        .map_err(|e| {
            Error::io(
                "describing the sample layout",
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })?;
        let user_binaries = decoder
            .plans()
            .iter()
            .filter_map(|p| match &p.attach {
                AttachPoint::User { path, .. } => std::fs::canonicalize(path).ok(),
                _ => None,
            })
            .collect();
        Ok(Session {
            streams,
            entry_counters,
            tracefs: tracefs_guard,
            decoder,
            sink: None,
            sink_error: None,
            user_binaries,
            poll,
            events: Events::with_capacity(64),
            enabled,
            watched: Vec::new(),
        })
    }

    /// Arms every probe (not needed when the target enables on exec).
    pub fn enable(&mut self) -> Result<(), Error> {
        if self.enabled {
            return Ok(());
        }
        for s in &self.streams {
            for fd in &s.fds {
                sys::enable(fd).map_err(|e| Error::io("enabling a probe", e))?;
            }
        }
        // Entries counted from now on have their kretprobe armed.
        for (_, fd) in &self.entry_counters {
            sys::enable(fd).map_err(|e| Error::io("enabling a kretprobe's entry counter", e))?;
        }
        self.enabled = true;
        Ok(())
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

    /// The probes of this session, in the order events refer to them.
    pub fn plans(&self) -> &[ProbePlan] {
        self.decoder.plans()
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

    /// Copies every record read from the rings from now on to `sink`,
    /// before decoding it; thread names the decoder learns from /proc are
    /// given to it as COMM records just before the record that needed
    /// them. A sink error ends the next [`Session::poll`].
    /// When the session has uprobes, the sink first gets MMAP records of
    /// their binaries in every running process (as `perf record`
    /// synthesizes them), and the kernel's MMAP records follow.
    pub fn set_record_sink(&mut self, mut sink: Box<dyn RecordSink>) {
        if !self.user_binaries.is_empty() {
            let pids = std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()));
            for pid in pids {
                for body in records::user_mmap_bodies(pid, pid, &self.user_binaries, 0, 0, 0) {
                    if let Err(e) =
                        sink.record(records::RECORD_MMAP, records::MISC_USER, (&body, &[]))
                    {
                        self.sink_error.get_or_insert(e);
                    }
                }
            }
        }
        self.sink = Some(sink);
    }

    /// Takes the record sink back (to finish a file, say).
    pub fn take_record_sink(&mut self) -> Option<Box<dyn RecordSink>> {
        self.sink.take()
    }

    /// Hits the kernel counted for each probe, summed over its fds: every
    /// hit, including those whose samples were lost to a full ring.
    pub fn kernel_hits(&self) -> Result<Vec<u64>, Error> {
        let mut hits = vec![0u64; self.plans().len()];
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
        for s in &self.streams {
            let mut counted = 0u64;
            for fd in &s.fds {
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
        for (c, returns) in counts.iter_mut().zip(self.kernel_hits()?) {
            if let Some(c) = c {
                c.returns = returns;
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
    /// the output, and hands the events to `f` in timestamp order. Returns
    /// the number of events delivered. Does nothing without
    /// [`SessionOptions::overwrite`].
    pub fn dump_overwrite(&mut self, mut f: impl FnMut(&Event)) -> Result<usize, Error> {
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
            for rec in taken.iter().rev() {
                // An undecodable record is counted in the stats.
                let decoded = self.decoder.record(rec.kind, rec.misc, (&rec.body, &[]));
                if decoded.is_ok() && rec.kind == records::RECORD_SAMPLE {
                    stream.samples += 1;
                }
            }
        }
        let n = self.decoder.round(Handover::All, |e, _| f(e));
        // No file in this mode: nothing keeps names learned from /proc.
        let _ = self.decoder.take_learned();
        Ok(n)
    }

    /// True in flight-recorder mode ([`SessionOptions::overwrite`]).
    pub fn is_overwrite(&self) -> bool {
        self.streams
            .iter()
            .any(|s| matches!(s.ring, StreamRing::Backward(_)))
    }

    /// Waits up to `timeout` (forever with `None`) for data, reads every
    /// ring, and hands events to `f` in timestamp order across all CPUs.
    /// An event is handed over once a later poll round has passed its time
    /// (a CPU may still be writing an older event when another's ring is
    /// read), so events come one round late; after [`Session::disable`],
    /// a poll hands over everything. A signal ends the wait early without
    /// error. Each event is lent for the call (its storage is reused for
    /// the next): clone it to keep it. Returns the number of events
    /// delivered.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&Event),
    ) -> Result<usize, Error> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("waiting for ring buffers", e)),
        }
        let Session {
            streams,
            decoder,
            sink,
            sink_error,
            ..
        } = self;
        for stream in streams.iter_mut() {
            let StreamRing::Forward(ring) = &mut stream.ring else {
                continue;
            };
            let samples = &mut stream.samples;
            ring.drain(|rec| {
                // An undecodable record is counted in the stats.
                let decoded = decoder.record(rec.kind, rec.misc, rec.body).is_ok();
                if decoded && rec.kind == records::RECORD_SAMPLE {
                    *samples += 1;
                }
                let Some(sink) = sink.as_mut() else { return };
                if sink_error.is_some() {
                    return;
                }
                if let Err(e) = sink.record(rec.kind, rec.misc, rec.body) {
                    *sink_error = Some(e);
                }
            });
        }
        let handover = if self.enabled {
            Handover::Ordered
        } else {
            Handover::All
        };
        let n = self.decoder.round(handover, |e, _| f(e));
        // Names read from /proc that this round used, dated at the first
        // event they named: in the file before the round ends, so that a
        // replay's round has them too.
        let learned = self.decoder.take_learned();
        if let Some(sink) = self.sink.as_mut() {
            for l in learned {
                if self.sink_error.is_some() {
                    break;
                }
                let body = records::comm_record_body(l.pid, l.tid, &l.name, l.time_ns, l.cpu, l.id);
                if let Err(e) = sink.record(records::RECORD_COMM, 0, (&body, &[])) {
                    self.sink_error = Some(e);
                }
            }
            if self.sink_error.is_none() {
                if let Err(e) = sink.round_end() {
                    self.sink_error = Some(e);
                }
            }
        }
        if let Some(e) = self.sink_error.take() {
            return Err(Error::io("writing records to the output file", e));
        }
        Ok(n)
    }
}
