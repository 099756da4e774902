//! Opening a session's events, once its plans are routed and defined
//! (see [`attach::open`](crate::attach::open())): raise the fd limit, open
//! each event on each scope (perf_event_open's pid × cpu pairs; a refused
//! `MOD:SYM` is retried by address), give the kernel each probe's filter,
//! and map or share each scope's ring. What comes out, [`Opened`], is what
//! a session reads.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};

use mio::unix::SourceFd;
use mio::{Interest, Poll, Token};

use crate::attach::attr::{self, EventSettings, Opener, SideRecords};
use crate::attach::command::HeldCommand;
use crate::attach::error::{explain_open_errno, AttachError, OpenedAs};
use crate::attach::options::SessionOptions;
use crate::attach::process::ProcessWatch;
use crate::attach::ring::{BackwardRing, RingBuffer};
use crate::attach::sys;
use crate::attach::target::{RecordTarget, Slot};
use crate::attach::tracefs::TracefsProbes;
use crate::plan::{AttachPoint, Backend, ProbePlan};

/// Raises the fd limit for every event of `plans` on every slot.
pub(crate) fn reserve_fds(plans: &[ProbePlan], slots: &[Slot]) -> Result<(), AttachError> {
    // A PMU kretprobe has a second fd per slot: its entry counter.
    let per_slot = plans.len()
        + plans
            .iter()
            .filter(|p| p.is_return() && p.backend == Backend::Pmu)
            .count();
    sys::raise_fd_limit(slots.len() * per_slot + 64).map_err(|e| match e {
        sys::FdLimitError::HardLimit { hard } => AttachError::TooManyFds {
            probes: plans.len(),
            slots: slots.len(),
            needed: slots.len() * per_slot,
            hard_limit: hard,
        },
        sys::FdLimitError::Os(e) => AttachError::io("raising the limit on open files", e),
    })
}

/// What the kernel was asked, as [`EventSettings`].
fn event_settings(opts: &SessionOptions) -> EventSettings {
    EventSettings {
        mmap_pages: opts.mmap_pages,
        write_backward: opts.overwrite,
        inherit: opts.target.inherits(),
        enable_on_exec: opts.target.enables_on_exec(),
        call_graph: opts.call_graph,
    }
}

/// The bytes of each probe's attr as a perf.data file stores them (no
/// side records).
pub(crate) fn file_attrs(
    plans: &[ProbePlan],
    openers: &[Opener],
    opts: &SessionOptions,
) -> Vec<Vec<u8>> {
    let settings = event_settings(opts);
    plans
        .iter()
        .zip(openers)
        .map(|(plan, &opener)| {
            sys::attr_bytes(&attr::probe_event(
                opener,
                plan,
                &settings,
                SideRecords::None,
            ))
        })
        .collect()
}

/// Opens one probe's event with `open`; a `MOD:SYM` name the kernel
/// refuses (ENOENT on some 6.1/5.10 stables, EINVAL before ~5.3) is
/// retried by the address kallsyms gave, with no name. `open` is
/// perf_event_open on the scope, or a fake in tests.
pub(crate) fn open_retrying_by_address<T>(
    attr: &sys::perf_event_attr,
    name: Option<&CStr>,
    plan: &ProbePlan,
    opener: Opener,
    mut open: impl FnMut(&sys::perf_event_attr, Option<&CStr>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let mut opened = open(attr, name);
    // Some kernels refuse MOD:SYM names over perf_event_open
    // (ENOENT on some 6.1/5.10 stables, EINVAL before ~5.3):
    // retry by the address kallsyms gives.
    if let (Err(e), Opener::Pmu(_), Some(addr)) = (&opened, opener, plan.resolved_address) {
        let refused_name = matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL));
        if refused_name && plan.spec.target_module().is_some() {
            opened = open(&attr::by_address(attr, plan, addr), None);
        }
    }
    opened
}

/// Opens one probe's event on `slot`; a `MOD:SYM` name the kernel refuses
/// is retried by the address kallsyms gave.
pub(crate) fn open_at(
    attr: &sys::perf_event_attr,
    name: Option<&CStr>,
    plan: &ProbePlan,
    opener: Opener,
    slot: &Slot,
) -> Result<OwnedFd, AttachError> {
    let opened = open_retrying_by_address(attr, name, plan, opener, |attr, name| {
        sys::perf_event_open(attr, name, slot.pid, slot.cpu, slot.flags)
    });
    opened.map_err(|source| {
        let target = match &plan.attach {
            AttachPoint::Symbol { name, offset: 0 } => name.clone(),
            AttachPoint::Symbol { name, offset } => format!("{name}+{offset}"),
            AttachPoint::Address(a) => format!("0x{a:x}"),
            AttachPoint::User {
                path,
                offset,
                ref_ctr: None,
            } => format!("{path}:0x{offset:x}"),
            AttachPoint::User {
                path,
                offset,
                ref_ctr: Some(c),
            } => format!("{path}:0x{offset:x}(0x{c:x})"),
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
        AttachError::Open {
            probe: plan.spec.to_string(),
            where_: slot.label.clone(),
            reason,
            source,
        }
    })
}

/// The name (config1) `plan` is opened with through a PMU: its symbol
/// or its binary's path (none for an address).
pub(crate) fn pmu_name(plan: &ProbePlan) -> Option<CString> {
    match &plan.attach {
        AttachPoint::Symbol { name, .. } => CString::new(name.as_bytes()).ok(),
        AttachPoint::User { path, .. } => CString::new(path.as_bytes()).ok(),
        AttachPoint::Address(_) => None,
    }
}

/// The attr and name of an inherited event of `plan` (`attr` and `name`
/// as a PMU opens it otherwise).
pub(crate) fn inherited<'n>(
    mut attr: sys::perf_event_attr,
    mut name: Option<&'n CStr>,
    plan: &ProbePlan,
) -> Result<(sys::perf_event_attr, Option<&'n CStr>), AttachError> {
    // An inherited event is re-created at every fork of the
    // recorded command, and the kernel then reads config1 (the
    // name or path) as a user pointer of the forking process,
    // which is not ours: the fork fails. So inherited kprobes go
    // by address, and inherited uprobes through uprobe_events
    // (made tracepoints above, so they never get here).
    if name.is_some() {
        match (&plan.attach, plan.resolved_address) {
            (AttachPoint::Symbol { .. }, Some(addr)) => {
                name = None;
                attr = attr::by_address(&attr, plan, addr);
            }
            (AttachPoint::User { .. }, _) => {
                return Err(AttachError::Internal {
                    what: format!(
                        "following a command's children with the uprobe {}: an inherited uprobe PMU event would make the kernel re-read the binary's path at each fork; it must be defined through uprobe_events",
                        plan.spec
                    ),
                })
            }
            _ => {
                return Err(AttachError::InheritNeedsAddress {
                    probe: plan.spec.to_string(),
                })
            }
        }
    }
    Ok((attr, name))
}

/// The string the kernel runs for `plan`'s filter, when it runs there.
pub(crate) fn kernel_filter(plan: &ProbePlan) -> Result<Option<CString>, AttachError> {
    let Some(crate::plan::filter::FilterRuns::Kernel(s)) = plan.filter.as_ref().map(|f| f.runs())
    else {
        return Ok(None);
    };
    CString::new(s.as_bytes())
        .map(Some)
        .map_err(|_| AttachError::FilterRefused {
            probe: plan.spec.to_string(),
            filter: s.clone(),
            reason: "it contains a NUL byte, which ends a filter string for the kernel".into(),
        })
}

/// This process's threads (`/proc/self/task`).
fn own_threads() -> Result<Vec<i32>, AttachError> {
    let dir = std::fs::read_dir("/proc/self/task")
        .map_err(|e| AttachError::io("listing this process's threads (/proc/self/task)", e))?;
    let mut tids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Adds to each probe's kernel filter (or gives it one) the clauses that
/// drop the hits of the threads `tids`.
fn exclude_own_threads(filters: &mut [Option<CString>], tids: &[i32]) {
    let clause = tids
        .iter()
        .map(|t| format!("common_pid != {t}"))
        .collect::<Vec<_>>()
        .join(" && ");
    if clause.is_empty() {
        return;
    }
    for f in filters.iter_mut() {
        let text = match f.as_ref() {
            Some(user) => format!("({}) && {clause}", user.to_string_lossy()),
            None => clause.clone(),
        };
        // The clause holds digits and ASCII words only, and the user's
        // filter had no NUL: no NUL in the result.
        *f = CString::new(text).ok();
    }
}

/// `PERF_EVENT_IOC_SET_FILTER` of `filter` on `fd`, an event of `plan`;
/// a refusal is explained by `explain` (the kernel's `error_log` words
/// for the filter, when it can give them), else by its errno.
pub(crate) fn apply_kernel_filter(
    fd: &OwnedFd,
    filter: &CStr,
    plan: &ProbePlan,
    explain: impl FnOnce(&str) -> Option<String>,
) -> Result<(), AttachError> {
    sys::set_filter(fd, filter).map_err(|e| {
        let text = filter.to_string_lossy().into_owned();
        let reason = explain(&text).unwrap_or_else(|| match e.raw_os_error() {
            Some(libc::EINVAL) => format!(
                "{e}: the kernel could not apply it to the event's fields (with the PMU backend, \
                 kprobe-perf runs a filter on arguments in user space)"
            ),
            Some(libc::EEXIST) => format!("{e}: the event already has a filter"),
            _ => e.to_string(),
        });
        AttachError::FilterRefused {
            probe: plan.spec.to_string(),
            filter: text,
            reason,
        }
    })
}

/// A stream's ring: read as it fills, or kept as a flight recorder.
pub(crate) enum StreamRing {
    Forward(RingBuffer),
    Backward(BackwardRing),
}

pub(crate) struct CpuStream {
    pub(crate) ring: StreamRing,
    /// All fds of this CPU; the first owns the ring.
    pub(crate) fds: Vec<OwnedFd>,
    /// The CPU the ring's events were opened on (`None`: per thread).
    pub(crate) cpu: Option<u32>,
    /// Samples of the user's probes decoded from this ring: the rest of
    /// their events' counts were lost (or, in flight-recorder mode, not
    /// kept). A hidden probe's samples (see the planner's entry joins) are
    /// not among them, nor its counts among those compared.
    pub(crate) samples: u64,
}

/// Every event of a session, open on its scopes: what
/// [`attach::open`](crate::attach::open()) hands a session.
pub(crate) struct Opened {
    /// The probes as opened (routed for the target, their tracefs
    /// fields named), in the order of event ids' probes.
    pub(crate) plans: Vec<ProbePlan>,
    /// Per probe, its attr's bytes as a perf.data file stores them.
    pub(crate) attrs: Vec<Vec<u8>>,
    /// Per probe, where its arguments lie in its raw record (empty for
    /// PMU probes).
    pub(crate) field_offsets: Vec<Vec<usize>>,
    /// Their events, rings and counters.
    pub(crate) events: Events,
    /// The private tracefs group, when a probe is defined there (it
    /// removes its events when dropped, after the fds).
    pub(crate) tracefs: Option<TracefsProbes>,
    /// The poller every forward ring, and the targets' pidfds, are
    /// registered with.
    pub(crate) poll: Poll,
    /// The probes are armed already (by the kernel, at the command's
    /// exec).
    pub(crate) enabled: bool,
    /// The processes of [`RecordTarget::Processes`], until they exit.
    pub(crate) watched: Vec<ProcessWatch>,
    /// The command of [`RecordTarget::Command`], and its pidfd (whose
    /// readiness ends a poll's wait when it exits).
    pub(crate) command: Option<(HeldCommand, Option<OwnedFd>)>,
}

/// The events of every probe on every slot, and how they are read.
pub(crate) struct Events {
    /// One per ring.
    pub(crate) streams: Vec<CpuStream>,
    /// Event id -> its probe.
    pub(crate) probe_of_id: HashMap<u64, usize>,
    /// Per PMU kretprobe (its index) and slot, its entry counter.
    pub(crate) entry_counters: Vec<(usize, OwnedFd)>,
    /// Per probe: for a PMU return probe, the session's probe that
    /// samples every entry of the same function (see [`entry_partners`]).
    pub(crate) entry_partners: Vec<Option<usize>>,
}

/// For each PMU return probe, an entry probe of the session that the
/// kernel counts at every entry of the same function: the same place
/// (symbol, address or binary offset, at offset 0 of the function), the
/// same kind (kernel or user) and the same kernel filter. Its count is
/// the calls entered, so the return probe needs no counting twin: one
/// kprobe handler less per call (a latency session's entry probe, a
/// return probe's hidden entry probe that fetches entry values).
fn entry_partners(
    plans: &[ProbePlan],
    openers: &[Opener],
    filters: &[Option<CString>],
) -> Vec<Option<usize>> {
    plans
        .iter()
        .enumerate()
        .map(|(i, ret)| {
            if !ret.is_return() || !matches!(openers.get(i), Some(Opener::Pmu(_))) {
                return None;
            }
            plans.iter().enumerate().position(|(j, entry)| {
                !entry.is_return()
                    && entry.attach == ret.attach
                    && entry.spec.target.is_user() == ret.spec.target.is_user()
                    && filters.get(j) == filters.get(i)
            })
        })
        .collect()
}

/// What opening every probe on one slot needs.
struct Opening<'a> {
    plans: &'a [ProbePlan],
    openers: &'a [Opener],
    /// The name (config1) of each probe opened through a PMU by name.
    names: Vec<Option<CString>>,
    /// The filter the kernel runs for each probe, if any.
    filters: Vec<Option<CString>>,
    /// See [`entry_partners`].
    partners: Vec<Option<usize>>,
    /// The session's tracefs probes, to explain a refused filter.
    tracefs: Option<&'a TracefsProbes>,
    settings: EventSettings,
    opts: &'a SessionOptions,
    /// Some probe is a uprobe: the first event of each ring records
    /// executable mappings too.
    any_user: bool,
    poll: &'a Poll,
}

/// What became of one slot.
enum SlotOutcome {
    /// Its events, the first owning `ring` when it has its own.
    Opened {
        fds: Vec<OwnedFd>,
        ring: Option<StreamRing>,
    },
    /// The thread exited after the scan: nothing to record.
    Gone,
}

/// Opens every probe on every slot, maps one ring per slot (for
/// [`RecordTarget::Processes`], one per CPU shared by every thread) and
/// registers the forward rings with `poll`.
pub(crate) fn open_events(
    plans: &[ProbePlan],
    openers: &[Opener],
    opts: &SessionOptions,
    slots: &[Slot],
    poll: &Poll,
    tracefs: Option<&TracefsProbes>,
) -> Result<Events, AttachError> {
    let names: Vec<Option<CString>> = plans.iter().map(pmu_name).collect();
    let mut filters = plans
        .iter()
        .map(kernel_filter)
        .collect::<Result<Vec<_>, _>>()?;
    if opts.exclude_self {
        exclude_own_threads(&mut filters, &own_threads()?);
    }
    let partners = entry_partners(plans, openers, &filters);
    let opening = Opening {
        plans,
        openers,
        names,
        partners,
        filters,
        tracefs,
        settings: event_settings(opts),
        opts,
        // User callchains are named from the binaries' mappings too.
        any_user: plans.iter().any(ProbePlan::is_user)
            || opts
                .call_graph
                .is_some_and(|g| g.user() || g.dwarf_stack().is_some()),
        poll,
    };
    let mut opened = Events {
        streams: Vec::with_capacity(slots.len()),
        probe_of_id: HashMap::new(),
        entry_counters: Vec::new(),
        entry_partners: Vec::new(),
    };
    // Processes: the stream of each CPU, whose ring every thread's
    // events on that CPU share (as perf does).
    let mut ring_of_cpu: Option<HashMap<i32, usize>> =
        matches!(opts.target, RecordTarget::Processes(_)).then(HashMap::new);
    for slot in slots {
        let shared = ring_of_cpu.as_ref().and_then(|m| m.get(&slot.cpu)).copied();
        let owner = shared
            .and_then(|s| opened.streams.get(s))
            .and_then(|s| s.fds.first());
        let exited = if ring_of_cpu.is_some() {
            ExitedThread::Skip
        } else {
            ExitedThread::Fail
        };
        let outcome = opening.open_slot(
            slot,
            owner,
            opened.streams.len(),
            exited,
            &mut opened.probe_of_id,
            &mut opened.entry_counters,
        )?;
        let SlotOutcome::Opened { fds, ring } = outcome else {
            continue;
        };
        if let Some(ring) = ring {
            if let Some(m) = ring_of_cpu.as_mut() {
                m.insert(slot.cpu, opened.streams.len());
            }
            opened.streams.push(CpuStream {
                ring,
                fds,
                cpu: u32::try_from(slot.cpu).ok(),
                samples: 0,
            });
        } else if let Some(stream) = shared.and_then(|s| opened.streams.get_mut(s)) {
            stream.fds.extend(fds);
        }
    }
    opened.entry_partners = opening.partners;
    Ok(opened)
}

/// How a slot's thread having exited is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExitedThread {
    /// Skip the slot (threads of [`RecordTarget::Processes`] found by a
    /// scan).
    Skip,
    /// An error, like any other.
    Fail,
}

impl Opening<'_> {
    /// Opens every probe on `slot`: the first event maps the slot's ring,
    /// or shares `owner`'s (the ring of another thread on the same CPU);
    /// the others write to the first's. `token` is the poll token of a new
    /// ring; `exited` says what a thread gone since the scan means.
    fn open_slot(
        &self,
        slot: &Slot,
        owner: Option<&OwnedFd>,
        token: usize,
        exited: ExitedThread,
        probe_of_id: &mut HashMap<u64, usize>,
        entry_counters: &mut Vec<(usize, OwnedFd)>,
    ) -> Result<SlotOutcome, AttachError> {
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(self.plans.len());
        let mut ring = None;
        for (i, plan) in self.plans.iter().enumerate() {
            let side = match (fds.is_empty(), self.any_user) {
                (false, _) => SideRecords::None,
                (true, false) => SideRecords::Comm,
                (true, true) => SideRecords::CommAndMmap,
            };
            let (attr, name) = self.attr_and_name(i, plan, side)?;
            let fd = match open_at(&attr, name, plan, self.openers[i], slot) {
                // The thread exited after the scan: nothing to record.
                Err(AttachError::Open { source, .. })
                    if exited == ExitedThread::Skip
                        && source.raw_os_error() == Some(libc::ESRCH) =>
                {
                    return Ok(SlotOutcome::Gone);
                }
                opened => opened?,
            };
            self.set_filter(i, plan, &fd)?;
            // A PMU kretprobe's entries, counted by the kernel: the
            // same function's entry probe on the same slot, in
            // counting mode, unless the session samples them already.
            if let (true, Opener::Pmu(pmu), None) =
                (plan.is_return(), self.openers[i], self.partners[i])
            {
                let counting = attr::entry_counter(&attr, pmu.retprobe_bit);
                let counter = open_at(&counting, name, plan, self.openers[i], slot)?;
                // A PMU probe's kernel filter tests common fields only,
                // the same at the entry: entries and returns stay paired.
                self.set_filter(i, plan, &counter)?;
                entry_counters.push((i, counter));
            }
            let id =
                sys::event_id(&fd).map_err(|e| AttachError::io("reading a perf event id", e))?;
            probe_of_id.insert(id, i);
            match (&ring, owner) {
                (None, Some(owner)) => {
                    sys::set_output(&fd, owner).map_err(|e| {
                        AttachError::io(format!("sharing the ring buffer of {}", slot.label), e)
                    })?;
                }
                (None, None) => ring = Some(self.map_ring(&fd, slot, token)?),
                (Some(_), _) => {
                    sys::set_output(&fd, &fds[0]).map_err(|e| {
                        AttachError::io(format!("sharing the ring buffer of {}", slot.label), e)
                    })?;
                }
            }
            fds.push(fd);
        }
        Ok(SlotOutcome::Opened { fds, ring })
    }

    /// Gives probe `i`'s kernel filter, if it has one, to `fd` (one of
    /// its events: the kernel keeps a filter per fd). A refusal is
    /// explained in the kernel's words when the probe is a tracefs event.
    fn set_filter(&self, i: usize, plan: &ProbePlan, fd: &OwnedFd) -> Result<(), AttachError> {
        let Some(Some(filter)) = self.filters.get(i) else {
            return Ok(());
        };
        apply_kernel_filter(fd, filter, plan, |text| {
            match (self.tracefs, self.openers[i]) {
                (Some(t), Opener::Tracepoint(_)) => {
                    t.tracefs().explain_filter(t.group(), &plan.event, text)
                }
                _ => None,
            }
        })
    }

    /// The attr and name (config1) probe `i` is opened with.
    fn attr_and_name(
        &self,
        i: usize,
        plan: &ProbePlan,
        side: SideRecords,
    ) -> Result<(sys::perf_event_attr, Option<&CStr>), AttachError> {
        let attr = attr::probe_event(self.openers[i], plan, &self.settings, side);
        let name = match self.openers[i] {
            Opener::Pmu(_) => self.names[i].as_deref(),
            Opener::Tracepoint(_) => None,
        };
        if self.settings.inherit {
            return inherited(attr, name, plan);
        }
        Ok((attr, name))
    }

    /// Maps the ring of `fd`, the first event of `slot`: read as it fills
    /// (registered with the poller under `token`), or in flight-recorder
    /// mode kept read-only and read only on demand.
    fn map_ring(&self, fd: &OwnedFd, slot: &Slot, token: usize) -> Result<StreamRing, AttachError> {
        let opts = self.opts;
        let what = || {
            format!(
                "mapping a {}-page ring buffer for {}",
                opts.mmap_pages, slot.label
            )
        };
        if opts.overwrite {
            // Read only on demand: not registered for wakeups.
            return Ok(StreamRing::Backward(
                BackwardRing::new(fd, opts.mmap_pages).map_err(|e| AttachError::io(what(), e))?,
            ));
        }
        let ring = StreamRing::Forward(
            RingBuffer::new(fd, opts.mmap_pages).map_err(|e| AttachError::io(what(), e))?,
        );
        self.poll
            .registry()
            .register(
                &mut SourceFd(&fd.as_raw_fd()),
                Token(token),
                Interest::READABLE,
            )
            .map_err(|e| AttachError::io("registering a ring with the poller", e))?;
        Ok(ring)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_threads_are_left_out_after_the_users_filter() {
        let mut filters = vec![None, CString::new("count > 4").ok()];
        super::exclude_own_threads(&mut filters, &[100, 101]);
        assert_eq!(
            filters,
            vec![
                CString::new("common_pid != 100 && common_pid != 101").ok(),
                CString::new("(count > 4) && common_pid != 100 && common_pid != 101").ok(),
            ]
        );
        let mut none = vec![None];
        super::exclude_own_threads(&mut none, &[]);
        assert_eq!(none, vec![None]);
    }

    use super::*;
    use crate::attach::pmu::ProbePmu;

    /// The module symbol of the tests, as kallsyms gives it.
    const MOD_FN: u64 = 0xffff_ffff_c0a0_1230;

    const PMU: ProbePmu = ProbePmu {
        type_: 9,
        retprobe_bit: 0,
        ref_ctr_shift: None,
    };

    /// A probe at `spec`, planned for the PMU against a kallsyms with
    /// `mod_fn` in module `m` at [`MOD_FN`].
    fn planned(spec: &str) -> ProbePlan {
        crate::plan::planned_for_pmu(
            spec,
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffffc0a01230 t mod_fn\t[m]\n",
        )
    }

    fn attr_of(plan: &ProbePlan) -> sys::perf_event_attr {
        let settings = EventSettings {
            mmap_pages: 8,
            write_backward: false,
            inherit: false,
            enable_on_exec: false,
            call_graph: None,
        };
        attr::probe_event(Opener::Pmu(PMU), plan, &settings, SideRecords::Comm)
    }

    /// `(config, config2)` of an attr, from its bytes as the kernel reads
    /// them (config at byte 8, config2 at byte 64).
    fn configs(attr: &sys::perf_event_attr) -> (u64, u64) {
        let b = sys::attr_bytes(attr);
        let at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        (at(8), at(64))
    }

    /// Opens with a fake that fails with each of `errors` in turn, then
    /// succeeds (fd 42); returns the result and each call's (config,
    /// config2, name).
    #[allow(clippy::type_complexity)]
    fn open_with(
        plan: &ProbePlan,
        name: Option<&CStr>,
        errors: &[i32],
    ) -> (std::io::Result<i32>, Vec<(u64, u64, Option<String>)>) {
        let attr = attr_of(plan);
        let mut calls = Vec::new();
        let result = open_retrying_by_address(&attr, name, plan, Opener::Pmu(PMU), |a, n| {
            let (config, config2) = configs(a);
            calls.push((config, config2, n.map(|n| n.to_string_lossy().into_owned())));
            match errors.get(calls.len() - 1) {
                Some(&errno) => Err(std::io::Error::from_raw_os_error(errno)),
                None => Ok(42),
            }
        });
        (result, calls)
    }

    #[test]
    fn a_return_probe_counts_entries_by_an_entry_probe_of_the_same_function() {
        let pmu = Opener::Pmu(PMU);
        let partners = |specs: &[&str], openers: &[Opener], filters: &[Option<&str>]| {
            let plans: Vec<ProbePlan> = specs.iter().map(|s| planned(s)).collect();
            let filters: Vec<Option<CString>> = filters
                .iter()
                .map(|f| f.map(|f| CString::new(f).unwrap()))
                .collect();
            entry_partners(&plans, openers, &filters)
        };
        // A latency session: the entry probe counts the calls.
        assert_eq!(
            partners(
                &["p:do_sys_openat2", "r:do_sys_openat2"],
                &[pmu; 2],
                &[None; 2]
            ),
            vec![None, Some(0)]
        );
        // Alone, or next to an entry probe elsewhere: a counter is opened.
        assert_eq!(partners(&["r:do_sys_openat2"], &[pmu], &[None]), vec![None]);
        assert_eq!(
            partners(
                &["p:do_sys_openat2+4", "p:mod_fn", "r:do_sys_openat2"],
                &[pmu; 3],
                &[None; 3]
            ),
            vec![None, None, None]
        );
        // Another kernel filter counts other calls.
        assert_eq!(
            partners(
                &["p:do_sys_openat2", "r:do_sys_openat2"],
                &[pmu; 2],
                &[Some("common_pid == 1"), None]
            ),
            vec![None, None]
        );
        assert_eq!(
            partners(
                &["p:do_sys_openat2", "r:do_sys_openat2"],
                &[pmu; 2],
                &[Some("common_pid == 1"); 2]
            ),
            vec![None, Some(0)]
        );
        // A tracefs return probe has the kernel's own miss count.
        assert_eq!(
            partners(
                &["p:do_sys_openat2", "r:do_sys_openat2"],
                &[pmu, Opener::Tracepoint(7)],
                &[None; 2]
            ),
            vec![None, None]
        );
    }

    #[test]
    fn a_refused_module_symbol_is_retried_by_address() {
        let plan = planned("p:m:mod_fn+16");
        assert_eq!(plan.resolved_address, Some(MOD_FN));
        let name = CString::new("m:mod_fn").unwrap();
        for errno in [libc::ENOENT, libc::EINVAL] {
            let (result, calls) = open_with(&plan, Some(&name), &[errno]);
            assert_eq!(result.unwrap(), 42);
            assert_eq!(
                calls,
                vec![
                    (0, 16, Some("m:mod_fn".to_string())),
                    (0, MOD_FN + 16, None),
                ],
                "after errno {errno}"
            );
        }
        // The retry's error is the one reported.
        let (result, calls) = open_with(&plan, Some(&name), &[libc::ENOENT, libc::EPERM]);
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EPERM));
        assert_eq!(calls.len(), 2);
    }

    #[test]
    fn other_errors_and_other_probes_are_not_retried() {
        let plan = planned("p:m:mod_fn+16");
        let name = CString::new("m:mod_fn").unwrap();
        // An error that is not about the name.
        let (result, calls) = open_with(&plan, Some(&name), &[libc::EBUSY]);
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EBUSY));
        assert_eq!(calls, vec![(0, 16, Some("m:mod_fn".to_string()))]);
        // A vmlinux symbol: its name is what the kernel refused.
        let plan = planned("p:do_sys_openat2");
        let name = CString::new("do_sys_openat2").unwrap();
        let (result, calls) = open_with(&plan, Some(&name), &[libc::ENOENT]);
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert_eq!(calls, vec![(0, 0, Some("do_sys_openat2".to_string()))]);
        // A module symbol with no address from kallsyms.
        let mut plan = planned("p:m:mod_fn");
        plan.resolved_address = None;
        let name = CString::new("m:mod_fn").unwrap();
        let (result, calls) = open_with(&plan, Some(&name), &[libc::ENOENT]);
        assert!(result.is_err());
        assert_eq!(calls.len(), 1);
    }

    /// The kernel filter goes to the fd as given; a refusal names the
    /// probe and filter, with the kernel's explanation when there is one
    /// and the errno's meaning otherwise.
    #[test]
    fn a_kernel_filter_is_set_on_the_fd_and_a_refusal_explained() {
        use std::cell::RefCell;
        use std::rc::Rc;
        let plan = planned("p:do_sys_openat2");
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let raw = fd.as_raw_fd();
        let filter = CString::new("common_pid == 42").unwrap();
        let log = Rc::new(RefCell::new(Vec::new()));
        let answers = Rc::new(RefCell::new(vec![
            Ok(0),
            Err(libc::EINVAL),
            Err(libc::EINVAL),
            Err(libc::EEXIST),
        ]));
        let _fake = sys::fake::install({
            let (log, answers) = (log.clone(), answers.clone());
            move |call| {
                log.borrow_mut().push(format!("{call:?}"));
                match answers.borrow_mut().remove(0) {
                    Ok(v) => Ok(v),
                    Err(errno) => Err(sys::fake::errno(errno)),
                }
            }
        });
        apply_kernel_filter(&fd, &filter, &plan, |_| None).unwrap();
        assert_eq!(
            *log.borrow(),
            [format!("ioctl({raw}, SET_FILTER, \"common_pid == 42\")")]
        );
        let e = apply_kernel_filter(&fd, &filter, &plan, |f| {
            Some(format!("Field not found\n  {f}\n  ^"))
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the kernel refused the filter `common_pid == 42` of p do_sys_openat2: Field not found\n  common_pid == 42\n  ^"
        );
        let e = apply_kernel_filter(&fd, &filter, &plan, |_| None).unwrap_err();
        assert!(
            e.to_string().ends_with(
                "(os error 22): the kernel could not apply it to the event's fields (with the PMU backend, kprobe-perf runs a filter on arguments in user space)"
            ),
            "{e}"
        );
        let e = apply_kernel_filter(&fd, &filter, &plan, |_| None).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("(os error 17): the event already has a filter"),
            "{e}"
        );
        assert_eq!(log.borrow().len(), 4);
    }

    #[test]
    fn only_a_filter_that_runs_in_the_kernel_is_given_to_it() {
        let plan = planned("p:do_sys_openat2 dfd=%di:s32");
        assert_eq!(kernel_filter(&plan).unwrap(), None);
        let user = plan.clone().with_filter("dfd == -100").unwrap();
        assert_eq!(kernel_filter(&user).unwrap(), None);
        let kernel = plan.with_filter("comm ~ \"cat*\" && tid != 1").unwrap();
        assert_eq!(
            kernel_filter(&kernel).unwrap(),
            Some(CString::new("comm ~ \"cat*\" && common_pid != 1").unwrap())
        );
    }

    #[test]
    fn a_kretprobe_retry_keeps_the_return_bit() {
        let plan = planned("r:m:mod_fn");
        let name = CString::new("m:mod_fn").unwrap();
        let (result, calls) = open_with(&plan, Some(&name), &[libc::ENOENT]);
        assert_eq!(result.unwrap(), 42);
        assert_eq!(
            calls,
            vec![(1, 0, Some("m:mod_fn".to_string())), (1, MOD_FN, None)]
        );
    }
}
