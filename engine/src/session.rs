//! A recording session: armed probes, one ring buffer per CPU polled with
//! mio, and decoded events handed to the caller in time order.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use perf_event_open_sys::bindings::PERF_SAMPLE_REGS_INTR;

use crate::decode::Event;
use crate::error::{explain_open_errno, Error, OpenedAs};
use crate::plan::{AttachPoint, Backend, ProbePlan};
use crate::pmu::{ProbePmu, SYSFS_PMUS};
use crate::process::{self, ProcessWatch};
use crate::records::{self, RecordDecoder};
use crate::ring::{BackwardRing, RingBuffer};
use crate::sink::EventSink;
use crate::summary::{KernelSide, Summary};
use crate::sys;
use crate::tracefs::{self, ProbeKind, Tracefs, TracefsProbes};

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

/// Counters a session keeps; none of them is ever silently dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Events decoded per probe.
    pub hits: Vec<u64>,
    /// Samples the kernel dropped because a ring was full
    /// (`PERF_RECORD_LOST`), summed over CPUs.
    pub lost: u64,
    /// Records that could not be decoded.
    pub undecodable: u64,
    /// Samples lost (`PERF_RECORD_LOST`) per CPU (`None`: the record did
    /// not say), summed over the probes sharing that CPU's ring.
    pub lost_per_cpu: BTreeMap<Option<u32>, u64>,
    /// `PERF_RECORD_THROTTLE` / `UNTHROTTLE` records per (CPU, probe): the
    /// kernel stopped sampling that probe on that CPU for exceeding
    /// `perf_event_max_sample_rate`, and resumed it.
    pub throttling: BTreeMap<(Option<u32>, usize), Throttling>,
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

/// How often the kernel throttled one probe on one CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Throttling {
    /// `PERF_RECORD_THROTTLE` records: sampling stopped.
    pub throttled: u64,
    /// `PERF_RECORD_UNTHROTTLE` records: sampling resumed.
    pub unthrottled: u64,
}

impl SessionStats {
    /// Counts a `PERF_RECORD_LOST` of `count` samples on `cpu`.
    pub fn note_lost(&mut self, cpu: Option<u32>, count: u64) {
        self.lost += count;
        *self.lost_per_cpu.entry(cpu).or_default() += count;
    }

    /// Counts a `PERF_RECORD_THROTTLE` (`throttle`) or `UNTHROTTLE` record
    /// of `probe` on `cpu`.
    pub fn note_throttle(&mut self, cpu: Option<u32>, probe: usize, throttle: bool) {
        let t = self.throttling.entry((cpu, probe)).or_default();
        if throttle {
            t.throttled += 1;
        } else {
            t.unthrottled += 1;
        }
    }

    /// Throttle records of `probe`, summed over CPUs.
    pub fn throttling_of(&self, probe: usize) -> Throttling {
        self.throttling
            .iter()
            .filter(|((_, p), _)| *p == probe)
            .fold(Throttling::default(), |acc, (_, t)| Throttling {
                throttled: acc.throttled + t.throttled,
                unthrottled: acc.unthrottled + t.unthrottled,
            })
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

/// Where one ring's events are opened: perf_event_open's pid and cpu, and
/// how to name it in messages.
struct Slot {
    pid: i32,
    cpu: i32,
    label: String,
    /// perf_event_open flags (`PERF_FLAG_PID_CGROUP` when `pid` is a
    /// cgroup directory's fd).
    flags: u64,
}

impl Slot {
    fn cpu(c: u32) -> Slot {
        Slot {
            pid: -1,
            cpu: c as i32,
            label: format!("CPU {c}"),
            flags: 0,
        }
    }
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
    /// Events handed over by [`Session::dump_overwrite`], for the
    /// flight recorder's window.
    dumped: u64,
    /// Canonical paths of the uprobes' binaries.
    user_binaries: Vec<std::path::PathBuf>,
    poll: Poll,
    events: Events,
    enabled: bool,
    /// The processes of [`RecordTarget::Processes`], until they exit.
    watched: Vec<ProcessWatch>,
}

pub use crate::cpus::online_cpus;

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

/// The attr of a tracefs-defined probe's tracepoint event.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// How a probe is opened: through the kprobe PMU, or as the tracepoint
/// of a tracefs-defined event.
#[derive(Clone, Copy)]
enum Opener {
    Pmu(ProbePmu),
    Tracepoint(u64),
}

fn base_attr(
    opener: Opener,
    plan: &ProbePlan,
    opts: &SessionOptions,
    first_on_cpu: bool,
    mmaps: bool,
) -> sys::perf_event_attr {
    let mut attr = sys::perf_event_attr {
        size: sys::ATTR_SIZE,
        ..Default::default()
    };
    match opener {
        Opener::Pmu(pmu) => {
            attr.type_ = pmu.type_;
            if plan.is_return() {
                attr.config |= 1u64 << pmu.retprobe_bit;
            }
            // config2 is kprobe_addr (no name) or probe_offset (with a name
            // or a uprobe path).
            attr.__bindgen_anon_4.config2 = match &plan.attach {
                AttachPoint::Address(a) => *a,
                AttachPoint::Symbol { offset, .. } | AttachPoint::User { offset, .. } => *offset,
            };
        }
        Opener::Tracepoint(id) => {
            attr.type_ = PERF_TYPE_TRACEPOINT;
            attr.config = id;
        }
    }
    attr.__bindgen_anon_1.sample_period = 1;
    attr.sample_type = records::sample_type(plan);
    if attr.sample_type & u64::from(PERF_SAMPLE_REGS_INTR) != 0 {
        attr.sample_regs_intr = plan.regs_mask;
    }
    attr.set_disabled(1);
    attr.set_sample_id_all(1);
    if opts.overwrite {
        attr.set_write_backward(1);
    }
    // Wake the reader once a quarter of the ring is full; callers also poll
    // with a timeout, so sparse events are never held back for long.
    attr.set_watermark(1);
    let ring_bytes = opts.mmap_pages.saturating_mul(sys::page_size());
    attr.__bindgen_anon_2.wakeup_watermark = u32::try_from(ring_bytes / 4).unwrap_or(u32::MAX);
    if first_on_cpu {
        attr.set_comm(1);
        attr.set_comm_exec(1);
        // Executable mappings, for perf to name uprobe samples' functions.
        attr.set_mmap(u64::from(mmaps));
    }
    if opts.target.inherits() {
        attr.set_inherit(1);
    }
    if let RecordTarget::Process {
        enable_on_exec: true,
        ..
    } = &opts.target
    {
        attr.set_enable_on_exec(1);
    }
    attr
}

/// Opens one probe's event on `slot`; a `MOD:SYM` name the kernel refuses
/// is retried by the address kallsyms gave.
fn open_at(
    attr: &sys::perf_event_attr,
    name: Option<&std::ffi::CStr>,
    plan: &ProbePlan,
    opener: Opener,
    slot: &Slot,
) -> Result<OwnedFd, Error> {
    let mut opened = sys::perf_event_open(attr, name, slot.pid, slot.cpu, slot.flags);
    // Some kernels refuse MOD:SYM names over perf_event_open
    // (ENOENT on some 6.1/5.10 stables, EINVAL before ~5.3):
    // retry by the address kallsyms gives.
    if let (Err(e), Opener::Pmu(_), Some(addr)) = (&opened, opener, plan.resolved_address) {
        let refused_name = matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL));
        if refused_name && plan.spec.target_module().is_some() {
            let mut by_addr = *attr;
            if let AttachPoint::Symbol { offset, .. } = plan.attach {
                by_addr.__bindgen_anon_4.config2 = addr.wrapping_add(offset);
            }
            opened = sys::perf_event_open(&by_addr, None, slot.pid, slot.cpu, slot.flags);
        }
    }
    opened.map_err(|source| {
        let target = match &plan.attach {
            AttachPoint::Symbol { name, offset: 0 } => name.clone(),
            AttachPoint::Symbol { name, offset } => format!("{name}+{offset}"),
            AttachPoint::Address(a) => format!("0x{a:x}"),
            AttachPoint::User { path, offset } => format!("{path}:0x{offset:x}"),
        };
        let errno = source.raw_os_error().unwrap_or(0);
        let reason = if slot.flags != 0 && matches!(errno, libc::ENOENT | libc::EBADF) {
            "the kernel keeps no perf_event state for this cgroup (it is not a directory of a cgroup hierarchy with the perf_event controller, or that controller is not enabled there)".to_string()
        } else {
            let as_ = match (&plan.attach, opener) {
                (_, Opener::Tracepoint(_)) => OpenedAs::Tracepoint,
                (AttachPoint::User { .. }, _) => OpenedAs::Uprobe,
                _ => OpenedAs::Kprobe,
            };
            explain_open_errno(errno, &target, as_)
        };
        Error::Open {
            probe: plan.spec.to_string(),
            where_: slot.label.clone(),
            reason,
            source,
        }
    })
}

/// The counting-only twin of a kretprobe's `attr`: the same function
/// (name or address) and target, at its entry, sampling nothing and
/// writing nothing to any ring. The kernel adds one to its count at each
/// hit (perf_tp_event -> perf_swevent_event), read with read(2).
fn entry_counter_attr(ret: &sys::perf_event_attr, retprobe_bit: u32) -> sys::perf_event_attr {
    // The function (config1/config2), target flags (inherit,
    // enable_on_exec) and disabled state are kept; all that is about
    // samples and rings is cleared.
    let mut attr = *ret;
    attr.config &= !(1u64 << retprobe_bit);
    attr.__bindgen_anon_1.sample_period = 0;
    attr.sample_type = 0;
    attr.sample_regs_intr = 0;
    attr.__bindgen_anon_2.wakeup_events = 0;
    attr.set_watermark(0);
    attr.set_sample_id_all(0);
    attr.set_write_backward(0);
    attr.set_comm(0);
    attr.set_comm_exec(0);
    attr.set_mmap(0);
    attr
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
        let inherit = opts.target.inherits();
        let mut plans: Vec<ProbePlan> = if inherit {
            plans
                .into_iter()
                .map(ProbePlan::through_uprobe_events)
                .collect()
        } else {
            plans
        };
        let is_user = |p: &ProbePlan| matches!(p.attach, AttachPoint::User { .. });
        let needs_kprobe_pmu = plans
            .iter()
            .any(|p| p.backend == Backend::Pmu && !is_user(p));
        let pmu = if needs_kprobe_pmu {
            Some(preflight()?)
        } else {
            check_capabilities()?;
            None
        };
        let uprobe_pmu = if plans
            .iter()
            .any(|p| is_user(p) && p.backend == Backend::Pmu)
        {
            Some(
                ProbePmu::discover("uprobe")
                    .map_err(|e| Error::io("reading the uprobe PMU from sysfs", e))?
                    .ok_or_else(|| Error::NoUprobePmu {
                        dir: format!("{SYSFS_PMUS}/uprobe"),
                    })?,
            )
        } else {
            None
        };
        let cpus = online_cpus()?;
        // tracefs-defined probes: define them in our private group first.
        let mut tracefs_guard = None;
        let mut openers = Vec::with_capacity(plans.len());
        let mut field_offsets = Vec::with_capacity(plans.len());
        for plan in plans.iter_mut() {
            match (plan.backend, pmu) {
                (Backend::Pmu, _) if is_user(plan) => {
                    let Some(up) = uprobe_pmu else {
                        return Err(Error::NoUprobePmu {
                            dir: format!("{SYSFS_PMUS}/uprobe"),
                        });
                    };
                    openers.push(Opener::Pmu(up));
                    field_offsets.push(Vec::new());
                }
                (Backend::Pmu, Some(pmu)) => {
                    openers.push(Opener::Pmu(pmu));
                    field_offsets.push(Vec::new());
                }
                _ => {
                    let kind = if is_user(plan) {
                        ProbeKind::User
                    } else {
                        ProbeKind::Kernel
                    };
                    let guard = match tracefs_guard.as_mut() {
                        Some(guard) => guard,
                        None => tracefs_guard.insert(TracefsProbes::new(Tracefs::find()?)),
                    };
                    let group = guard.group().to_string();
                    guard.define(kind, &plan.tracefs_definition(&group), &plan.event)?;
                    let id = guard.tracefs().event_id(&group, &plan.event)?;
                    let fields = guard.tracefs().format(&group, &plan.event)?;
                    if plan.args_from_kernel() {
                        // BTF names, $arg*, fprobe/tracepoint probes: the
                        // kernel named and typed the fields.
                        let path = guard.tracefs().root().join("events").join(&group);
                        let path = path.join(&plan.event).join("format");
                        if let Ok(text) = std::fs::read_to_string(path) {
                            plan.set_args_from_format(&text);
                        }
                    }
                    let offsets = plan
                        .args
                        .iter()
                        .map(|a| {
                            fields
                                .iter()
                                .find(|f| f.name == a.name)
                                .map(|f| f.offset)
                                .ok_or_else(|| {
                                    Error::Tracefs(crate::tracefs::TracefsError::Format {
                                        path: guard.tracefs().format_path(&group, &plan.event),
                                        field: a.name.clone(),
                                    })
                                })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    openers.push(Opener::Tracepoint(id));
                    field_offsets.push(offsets);
                }
            }
        }
        // One ring per slot: (pid, cpu) as perf_event_open takes them.
        // Kept open until every event is opened.
        let mut _cgroup_dir = None;
        let slots: Vec<Slot> = match &opts.target {
            RecordTarget::AllCpus => cpus.iter().map(|&c| Slot::cpu(c)).collect(),
            RecordTarget::Cpus(list) => {
                if let Some(bad) = list.iter().find(|c| !cpus.contains(c)) {
                    return Err(Error::io(
                        format!(
                            "CPU {bad} is not online (online: {})",
                            crate::cpus::format_cpu_list(&cpus)
                        ),
                        std::io::Error::from(std::io::ErrorKind::NotFound),
                    ));
                }
                // A CPU listed twice would count each event twice.
                let mut list = list.clone();
                list.sort_unstable();
                list.dedup();
                list.iter().map(|&c| Slot::cpu(c)).collect()
            }
            RecordTarget::Process { pid, .. } => cpus
                .iter()
                .map(|&c| Slot {
                    pid: *pid,
                    cpu: c as i32,
                    label: format!("pid {pid}, CPU {c}"),
                    flags: 0,
                })
                .collect(),
            RecordTarget::Processes(_) => threads
                .iter()
                .flat_map(|&(pid, tid)| {
                    cpus.iter().map(move |&c| Slot {
                        pid: tid,
                        cpu: c as i32,
                        label: format!("thread {tid} of process {pid}, CPU {c}"),
                        flags: 0,
                    })
                })
                .collect(),
            RecordTarget::Threads(tids) => tids
                .iter()
                .map(|&t| Slot {
                    pid: t,
                    cpu: -1,
                    label: format!("tid {t}"),
                    flags: 0,
                })
                .collect(),
            RecordTarget::Cgroup(path) => {
                let dir = std::fs::File::open(path).map_err(|e| {
                    Error::io(
                        format!(
                            "cannot open the cgroup {} (give a directory of the cgroup2 hierarchy, e.g. /sys/fs/cgroup/system.slice)",
                            path.display()
                        ),
                        e,
                    )
                })?;
                let fd = dir.as_raw_fd();
                // perf_event_open takes its own reference to the cgroup.
                _cgroup_dir = Some(dir);
                cpus.iter()
                    .map(|&c| Slot {
                        pid: fd,
                        cpu: c as i32,
                        label: format!("cgroup {}, CPU {c}", path.display()),
                        flags: u64::from(perf_event_open_sys::bindings::PERF_FLAG_PID_CGROUP),
                    })
                    .collect()
            }
        };
        // A PMU kretprobe has a second fd per slot: its entry counter.
        let per_slot = plans.len()
            + plans
                .iter()
                .filter(|p| p.is_return() && p.backend == Backend::Pmu)
                .count();
        sys::raise_fd_limit(slots.len() * per_slot + 64).map_err(|e| {
            Error::io(
                format!(
                    "{} probes on {} CPUs/threads need {} file descriptors; raise the hard limit (ulimit -Hn)",
                    plans.len(),
                    slots.len(),
                    slots.len() * per_slot
                ),
                e,
            )
        })?;
        let names: Vec<Option<CString>> = plans
            .iter()
            .map(|p| match &p.attach {
                AttachPoint::Symbol { name, .. } => CString::new(name.as_bytes()).ok(),
                AttachPoint::User { path, .. } => CString::new(path.as_bytes()).ok(),
                AttachPoint::Address(_) => None,
            })
            .collect();
        let attrs: Vec<Vec<u8>> = plans
            .iter()
            .zip(&openers)
            .map(|(plan, &opener)| sys::attr_bytes(&base_attr(opener, plan, &opts, false, false)))
            .collect();
        let poll = Poll::new().map_err(|e| Error::io("creating the poller", e))?;
        let any_user = plans.iter().any(is_user);
        let mut streams: Vec<CpuStream> = Vec::with_capacity(slots.len());
        let mut probe_of_id = HashMap::new();
        // Processes: the stream of each CPU, whose ring every thread's
        // events on that CPU share (as perf does).
        let mut ring_of_cpu: Option<HashMap<i32, usize>> =
            matches!(opts.target, RecordTarget::Processes(_)).then(HashMap::new);
        let mut entry_counters = Vec::new();
        'slots: for slot in &slots {
            let mut fds: Vec<OwnedFd> = Vec::with_capacity(plans.len());
            let mut ring = None;
            let shared = ring_of_cpu.as_ref().and_then(|m| m.get(&slot.cpu)).copied();
            for (i, plan) in plans.iter().enumerate() {
                let attr = base_attr(openers[i], plan, &opts, fds.is_empty(), any_user);
                let mut attr = attr;
                let mut name = match openers[i] {
                    Opener::Pmu(_) => names[i].as_deref(),
                    Opener::Tracepoint(_) => None,
                };
                // An inherited event is re-created at every fork of the
                // recorded command, and the kernel then reads config1 (the
                // name or path) as a user pointer of the forking process,
                // which is not ours: the fork fails. So inherited kprobes go
                // by address, and inherited uprobes through uprobe_events
                // (made tracepoints above, so they never get here).
                if inherit && name.is_some() {
                    match (&plan.attach, plan.resolved_address) {
                        (AttachPoint::Symbol { offset, .. }, Some(addr)) => {
                            name = None;
                            attr.__bindgen_anon_4.config2 = addr.wrapping_add(*offset);
                        }
                        (AttachPoint::User { .. }, _) => {
                            return Err(Error::io(
                                format!("following a command's children with the uprobe {}", plan.spec),
                                std::io::Error::new(
                                    std::io::ErrorKind::Unsupported,
                                    "an inherited uprobe PMU event would make the kernel re-read the binary's path at each fork; it must be defined through uprobe_events (a bug: please report it)",
                                ),
                            ))
                        }
                        _ => {
                            return Err(Error::io(
                                format!("following a command's children with {}", plan.spec),
                                std::io::Error::new(
                                    std::io::ErrorKind::Unsupported,
                                    "this needs the symbol's address, which /proc/kallsyms hides from this process (kernel.kptr_restrict=2 hides it even from root): lower kernel.kptr_restrict, or record system-wide with -a",
                                ),
                            ))
                        }
                    }
                }
                let fd = match open_at(&attr, name, plan, openers[i], slot) {
                    // The thread exited after the scan: nothing to record.
                    Err(Error::Open { source, .. })
                        if ring_of_cpu.is_some() && source.raw_os_error() == Some(libc::ESRCH) =>
                    {
                        continue 'slots;
                    }
                    opened => opened?,
                };
                // A PMU kretprobe's entries, counted by the kernel: the
                // same function's entry probe on the same slot, in
                // counting mode.
                if let (true, Opener::Pmu(pmu)) = (plan.is_return(), openers[i]) {
                    let counting = entry_counter_attr(&attr, pmu.retprobe_bit);
                    let counter = open_at(&counting, name, plan, openers[i], slot)?;
                    entry_counters.push((i, counter));
                }
                let id = sys::event_id(&fd).map_err(|e| Error::io("reading a perf event id", e))?;
                probe_of_id.insert(id, i);
                let owner = shared
                    .and_then(|s| streams.get(s))
                    .and_then(|s| s.fds.first());
                match (&ring, owner) {
                    (None, Some(owner)) => {
                        sys::set_output(&fd, owner).map_err(|e| {
                            Error::io(format!("sharing the ring buffer of {}", slot.label), e)
                        })?;
                    }
                    (None, None) => {
                        let what = || {
                            format!(
                                "mapping a {}-page ring buffer for {}",
                                opts.mmap_pages, slot.label
                            )
                        };
                        if opts.overwrite {
                            // Read only on demand: not registered for wakeups.
                            ring = Some(StreamRing::Backward(
                                BackwardRing::new(&fd, opts.mmap_pages)
                                    .map_err(|e| Error::io(what(), e))?,
                            ));
                            fds.push(fd);
                            continue;
                        }
                        ring = Some(StreamRing::Forward(
                            RingBuffer::new(&fd, opts.mmap_pages)
                                .map_err(|e| Error::io(what(), e))?,
                        ));
                        poll.registry()
                            .register(
                                &mut SourceFd(&fd.as_raw_fd()),
                                Token(streams.len()),
                                Interest::READABLE,
                            )
                            .map_err(|e| Error::io("registering a ring with the poller", e))?;
                    }
                    (Some(_), _) => {
                        sys::set_output(&fd, &fds[0]).map_err(|e| {
                            Error::io(format!("sharing the ring buffer of {}", slot.label), e)
                        })?;
                    }
                }
                fds.push(fd);
            }
            if let Some(ring) = ring {
                if let Some(m) = ring_of_cpu.as_mut() {
                    m.insert(slot.cpu, streams.len());
                }
                streams.push(CpuStream {
                    ring,
                    fds,
                    cpu: u32::try_from(slot.cpu).ok(),
                    samples: 0,
                });
            } else if let Some(stream) = shared.and_then(|s| streams.get_mut(s)) {
                stream.fds.extend(fds);
            }
        }
        let enabled = matches!(
            opts.target,
            RecordTarget::Process {
                enable_on_exec: true,
                ..
            }
        );
        let decoder =
            RecordDecoder::new(plans, field_offsets, attrs, probe_of_id, true).map_err(|e| {
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
            dumped: 0,
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

    /// Hands `sink` (its [`EventSink::record`]) MMAP records of the
    /// uprobes' binaries in every running process, as `perf record`
    /// synthesizes them; the kernel's own MMAP records follow in the
    /// rings. Call it once, before the first drain, for a sink that
    /// writes a perf.data file. Nothing without uprobes.
    pub fn user_mmap_records<S: EventSink + ?Sized>(&self, sink: &mut S) -> Result<(), S::Error> {
        if self.user_binaries.is_empty() {
            return Ok(());
        }
        let pids = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()));
        for pid in pids {
            for body in records::user_mmap_bodies(pid, pid, &self.user_binaries, 0, 0, 0) {
                if sink
                    .record(records::RECORD_MMAP, records::MISC_USER, (&body, &[]))?
                    .is_break()
                {
                    return Ok(());
                }
            }
        }
        Ok(())
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
            for rec in taken.iter().rev() {
                // An undecodable record is counted in the stats.
                let decoded = self.decoder.record(rec.kind, rec.misc, (&rec.body, &[]));
                if decoded.is_ok() && rec.kind == records::RECORD_SAMPLE {
                    stream.samples += 1;
                }
            }
        }
        let mut failed = None;
        let n = self
            .decoder
            .try_round(true, |e, _| hand(sink, e, &mut failed));
        self.dumped += n as u64;
        // No file in this mode: nothing keeps names learned from /proc.
        let _ = self.decoder.take_learned();
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// True in flight-recorder mode ([`SessionOptions::overwrite`]).
    pub fn is_overwrite(&self) -> bool {
        self.streams
            .iter()
            .any(|s| matches!(s.ring, StreamRing::Backward(_)))
    }

    /// Waits up to `timeout` (forever with `None`) until a ring has data
    /// (or, for [`RecordTarget::Processes`], a target process exits); a
    /// signal ends the wait early without error. Returns true when
    /// something was ready. Reads nothing: [`Session::drain`] does.
    ///
    /// A ring wakes the wait once a quarter of it is full, so an event
    /// loop also drains on a timer. An embedder with its own event loop
    /// watches [`Session::as_fd`] instead, then calls `wait(Some(Duration::ZERO))`
    /// (which takes the readiness the fd reported) and `drain`.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool, Error> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => Ok(!self.events.is_empty()),
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
    /// over.
    pub fn drain<S: EventSink + ?Sized>(&mut self, sink: &mut S) -> Result<usize, S::Error> {
        let Session {
            streams, decoder, ..
        } = self;
        for stream in streams.iter_mut() {
            let StreamRing::Forward(ring) = &mut stream.ring else {
                continue;
            };
            let samples = &mut stream.samples;
            let mut flow = Ok(ControlFlow::Continue(()));
            ring.drain(|rec| {
                // An undecodable record is counted in the stats.
                let decoded = decoder.record(rec.kind, rec.misc, rec.body).is_ok();
                if decoded && rec.kind == records::RECORD_SAMPLE {
                    *samples += 1;
                }
                if let Ok(ControlFlow::Continue(())) = flow {
                    flow = sink.record(rec.kind, rec.misc, rec.body);
                }
            });
            if flow?.is_break() {
                // The rings not read yet, and the events decoded, wait
                // for the next drain.
                return Ok(0);
            }
        }
        let all = !self.enabled;
        let mut failed = None;
        let n = self
            .decoder
            .try_round(all, |e, _| hand(sink, e, &mut failed));
        if let Some(e) = failed {
            return Err(e);
        }
        // Names read from /proc that this round used, dated at the first
        // event they named: in the file before the round ends, so that a
        // replay's round has them too.
        for l in self.decoder.take_learned() {
            let body = records::comm_record_body(l.pid, l.tid, &l.name, l.time_ns, l.cpu, l.id);
            if sink
                .record(records::RECORD_COMM, 0, (&body, &[]))?
                .is_break()
            {
                return Ok(n);
            }
        }
        // The round is over: a Break has nothing left to stop.
        let _ = sink.round_end()?;
        Ok(n)
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
    /// then come from `PERF_RECORD_LOST`; see [`Summary::exact`]).
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

/// A session moves to another thread (a reader task, say).
#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Session>();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder for two probes with ids 7 (probe 0) and 8 (probe 1).
    fn decoder() -> RecordDecoder {
        let syms = kprobe_perf_symbols::KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\n",
        )
        .unwrap();
        let plans: Vec<ProbePlan> = ["p:a do_sys_openat2", "p:b do_sys_open"]
            .iter()
            .map(|s| {
                crate::plan::resolve(
                    crate::spec::ProbeSpec::parse(s, kprobe_perf_arch::Arch::X86_64).unwrap(),
                    &syms,
                    kprobe_perf_arch::Arch::X86_64,
                    crate::plan::BackendChoice::Auto,
                )
                .unwrap()
            })
            .collect();
        let attrs = plans.iter().map(records::sample_attr_bytes).collect();
        let ids = HashMap::from([(7u64, 0usize), (8, 1)]);
        RecordDecoder::new(plans, vec![vec![], vec![]], attrs, ids, false).unwrap()
    }

    /// `fields` then the sample_id trailer (pid, tid, time, cpu, id).
    fn with_sample_id(fields: &[u64], cpu: u32, id: u64) -> Vec<u8> {
        let mut b: Vec<u8> = fields.iter().flat_map(|v| v.to_ne_bytes()).collect();
        b.extend_from_slice(&1i32.to_ne_bytes());
        b.extend_from_slice(&1i32.to_ne_bytes());
        b.extend_from_slice(&100u64.to_ne_bytes());
        b.extend_from_slice(&cpu.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&id.to_ne_bytes());
        b
    }

    #[test]
    fn throttle_and_lost_records_are_counted_per_cpu_and_probe() {
        const LOST: u32 = 2;
        const THROTTLE: u32 = 5;
        const UNTHROTTLE: u32 = 6;
        let mut d = decoder();
        let mut feed = |kind, body: Vec<u8>| d.record(kind, 0, (&body, &[])).unwrap();
        // THROTTLE/UNTHROTTLE: time, id, stream_id; LOST: id, count.
        feed(THROTTLE, with_sample_id(&[50, 7, 7], 1, 7));
        feed(UNTHROTTLE, with_sample_id(&[60, 7, 7], 1, 7));
        feed(THROTTLE, with_sample_id(&[70, 7, 7], 1, 7));
        feed(THROTTLE, with_sample_id(&[80, 8, 8], 0, 8));
        feed(LOST, with_sample_id(&[7, 5], 1, 7));
        feed(LOST, with_sample_id(&[8, 3], 0, 8));
        feed(LOST, with_sample_id(&[7, 2], 1, 7));
        assert_eq!(d.round(true, |_, _| {}), 0);
        let st = d.stats();
        assert_eq!(st.lost, 10);
        assert_eq!(
            st.lost_per_cpu,
            BTreeMap::from([(Some(0), 3), (Some(1), 7)])
        );
        assert_eq!(
            st.throttling.get(&(Some(1), 0)),
            Some(&Throttling {
                throttled: 2,
                unthrottled: 1
            })
        );
        assert_eq!(
            st.throttling_of(1),
            Throttling {
                throttled: 1,
                unthrottled: 0
            }
        );
        assert_eq!(st.throttling.len(), 2);
    }
}
