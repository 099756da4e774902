//! The steps of [`Session::open`](super::Session::open), one function
//! each: find the PMUs, define the tracefs events, compute the scopes
//! (perf_event_open's pid × cpu pairs), open each event (retrying a
//! refused `MOD:SYM` by address), and map or share each scope's ring.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};

use mio::unix::SourceFd;
use mio::{Interest, Poll, Token};

use super::{check_capabilities, preflight, CpuStream, RecordTarget, SessionOptions, StreamRing};
use crate::attach::attr::{self, EventSettings, Opener, SideRecords};
use crate::attach::pmu::{ProbePmu, SYSFS_PMUS};
use crate::attach::ring::{BackwardRing, RingBuffer};
use crate::attach::sys;
use crate::attach::target::Slot;
use crate::attach::tracefs::{ProbeKind, Tracefs, TracefsProbes};
use crate::error::{explain_open_errno, Error, OpenedAs};
use crate::plan::{AttachPoint, Backend, ProbePlan};

fn is_user(p: &ProbePlan) -> bool {
    matches!(p.attach, AttachPoint::User { .. })
}

/// The plans as a target opens them: when it inherits, uprobes go through
/// `uprobe_events` (see [`ProbePlan::through_uprobe_events`]); when it
/// opens each probe more than once (per CPU, per thread, inherited), kernel
/// probes the automatic backend put on the PMU go through `kprobe_events`
/// where this process may define them (see
/// [`ProbePlan::through_kprobe_events`]): one kprobe in all instead of one
/// per perf event. Not when entry values are joined in user space
/// (`joined`: the joined probes stay as planned). A uprobe the user put on
/// the PMU (`--backend pmu`) cannot follow forks: refused for a target that
/// inherits.
pub(crate) fn plans_for_target(
    plans: Vec<ProbePlan>,
    target: &RecordTarget,
    joined: bool,
) -> Result<Vec<ProbePlan>, Error> {
    let inherits = target.inherits();
    if inherits {
        if let Some(p) = plans
            .iter()
            .find(|p| is_user(p) && p.backend == Backend::Pmu && !p.auto_backend)
        {
            return Err(Error::UprobePmuCannotInherit {
                probe: p.spec.to_string(),
            });
        }
    }
    // The CPUs are counted, and tracefs looked at, only when some probe
    // would move.
    let kernel_via_tracefs = !joined
        && plans.iter().any(ProbePlan::may_go_through_kprobe_events)
        && target.opens_each_probe_more_than_once(
            crate::attach::cpus::online_cpus().map_or(1, |c| c.len()),
        )
        && Tracefs::find().is_ok_and(|t| t.can_define(ProbeKind::Kernel));
    if !inherits && !kernel_via_tracefs {
        return Ok(plans);
    }
    Ok(plans
        .into_iter()
        .map(|p| {
            let p = if inherits {
                p.through_uprobe_events()
            } else {
                p
            };
            if kernel_via_tracefs {
                p.through_kprobe_events()
            } else {
                p
            }
        })
        .collect())
}

/// The PMUs the plans need (kprobe, uprobe), checked to exist; without a
/// kprobe PMU probe, the capabilities are still checked.
pub(crate) fn probe_pmus(
    plans: &[ProbePlan],
) -> Result<(Option<ProbePmu>, Option<ProbePmu>), Error> {
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
        let pmu = ProbePmu::discover("uprobe")?.ok_or_else(|| Error::NoUprobePmu {
            dir: format!("{SYSFS_PMUS}/uprobe"),
        })?;
        let counted = plans.iter().find(|p| {
            p.backend == Backend::Pmu
                && matches!(
                    p.attach,
                    AttachPoint::User {
                        ref_ctr: Some(_),
                        ..
                    }
                )
        });
        if let (Some(p), None) = (counted, pmu.ref_ctr_shift) {
            return Err(Error::NoRefCtrOffset {
                probe: p.spec.to_string(),
                dir: format!("{SYSFS_PMUS}/uprobe"),
            });
        }
        Some(pmu)
    } else {
        None
    };
    Ok((pmu, uprobe_pmu))
}

/// How each probe is opened, after [`define_events`].
pub(crate) struct Defined {
    /// The private tracefs group, when a probe is defined there.
    pub(crate) tracefs: Option<TracefsProbes>,
    /// Per probe, how it is opened.
    pub(crate) openers: Vec<Opener>,
    /// Per probe, where its arguments lie in its raw record (empty for
    /// PMU probes).
    pub(super) field_offsets: Vec<Vec<usize>>,
}

/// Picks each probe's opener; tracefs-defined probes are defined in our
/// private group first, and their arguments located in the event format
/// (named and typed by the kernel when it gives them).
pub(crate) fn define_events(
    plans: &mut [ProbePlan],
    (pmu, uprobe_pmu): (Option<ProbePmu>, Option<ProbePmu>),
) -> Result<Defined, Error> {
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
                    None => tracefs_guard.insert(TracefsProbes::new(Tracefs::find_or_mount()?)),
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
                let (from_kernel, joined) = (plan.args_from_kernel(), plan.entry_join.is_some());
                if let Some(filter) = plan.filter.as_mut() {
                    if from_kernel {
                        filter
                            .recompile(&plan.args)
                            .map_err(|error| Error::Filter {
                                probe: plan.spec.to_string(),
                                error,
                            })?;
                    }
                    if !joined {
                        filter.place(&crate::attach::tracefs::filter_fields(&fields));
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
                                Error::Tracefs(crate::attach::tracefs::TracefsError::Format {
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
    Ok(Defined {
        tracefs: tracefs_guard,
        openers,
        field_offsets,
    })
}

/// Raises the fd limit for every event of `plans` on every slot.
pub(crate) fn reserve_fds(plans: &[ProbePlan], slots: &[Slot]) -> Result<(), Error> {
    // A PMU kretprobe has a second fd per slot: its entry counter.
    let per_slot = plans.len()
        + plans
            .iter()
            .filter(|p| p.is_return() && p.backend == Backend::Pmu)
            .count();
    sys::raise_fd_limit(slots.len() * per_slot + 64).map_err(|e| match e {
        sys::FdLimitError::HardLimit { hard } => Error::TooManyFds {
            probes: plans.len(),
            slots: slots.len(),
            needed: slots.len() * per_slot,
            hard_limit: hard,
        },
        sys::FdLimitError::Os(e) => Error::io("raising the limit on open files", e),
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
pub(super) fn file_attrs(
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
pub(super) fn open_retrying_by_address<T>(
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
) -> Result<OwnedFd, Error> {
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
        Error::Open {
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
) -> Result<(sys::perf_event_attr, Option<&'n CStr>), Error> {
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
                return Err(Error::Internal {
                    what: format!(
                        "following a command's children with the uprobe {}: an inherited uprobe PMU event would make the kernel re-read the binary's path at each fork; it must be defined through uprobe_events",
                        plan.spec
                    ),
                })
            }
            _ => {
                return Err(Error::InheritNeedsAddress {
                    probe: plan.spec.to_string(),
                })
            }
        }
    }
    Ok((attr, name))
}

/// The string the kernel runs for `plan`'s filter, when it runs there.
pub(crate) fn kernel_filter(plan: &ProbePlan) -> Result<Option<CString>, Error> {
    let Some(crate::plan::filter::FilterRuns::Kernel(s)) = plan.filter.as_ref().map(|f| f.runs())
    else {
        return Ok(None);
    };
    CString::new(s.as_bytes())
        .map(Some)
        .map_err(|_| Error::FilterRefused {
            probe: plan.spec.to_string(),
            filter: s.clone(),
            reason: "it contains a NUL byte, which ends a filter string for the kernel".into(),
        })
}

/// This process's threads (`/proc/self/task`).
fn own_threads() -> Result<Vec<i32>, Error> {
    let dir = std::fs::read_dir("/proc/self/task")
        .map_err(|e| Error::io("listing this process's threads (/proc/self/task)", e))?;
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
) -> Result<(), Error> {
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
        Error::FilterRefused {
            probe: plan.spec.to_string(),
            filter: text,
            reason,
        }
    })
}

/// Every event of a session, open on its scopes.
pub(super) struct Opened {
    /// One per ring.
    pub(super) streams: Vec<CpuStream>,
    /// Event id -> its probe.
    pub(super) probe_of_id: HashMap<u64, usize>,
    /// Per PMU kretprobe (its index) and slot, its entry counter.
    pub(super) entry_counters: Vec<(usize, OwnedFd)>,
    /// Per probe: for a PMU return probe, the session's probe that
    /// samples every entry of the same function (see [`entry_partners`]).
    pub(super) entry_partners: Vec<Option<usize>>,
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
pub(super) fn open_events(
    plans: &[ProbePlan],
    openers: &[Opener],
    opts: &SessionOptions,
    slots: &[Slot],
    poll: &Poll,
    tracefs: Option<&TracefsProbes>,
) -> Result<Opened, Error> {
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
        any_user: plans.iter().any(is_user)
            || opts
                .call_graph
                .is_some_and(|g| g.user() || g.dwarf_stack().is_some()),
        poll,
    };
    let mut opened = Opened {
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
    ) -> Result<SlotOutcome, Error> {
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
                Err(Error::Open { source, .. })
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
            let id = sys::event_id(&fd).map_err(|e| Error::io("reading a perf event id", e))?;
            probe_of_id.insert(id, i);
            match (&ring, owner) {
                (None, Some(owner)) => {
                    sys::set_output(&fd, owner).map_err(|e| {
                        Error::io(format!("sharing the ring buffer of {}", slot.label), e)
                    })?;
                }
                (None, None) => ring = Some(self.map_ring(&fd, slot, token)?),
                (Some(_), _) => {
                    sys::set_output(&fd, &fds[0]).map_err(|e| {
                        Error::io(format!("sharing the ring buffer of {}", slot.label), e)
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
    fn set_filter(&self, i: usize, plan: &ProbePlan, fd: &OwnedFd) -> Result<(), Error> {
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
    ) -> Result<(sys::perf_event_attr, Option<&CStr>), Error> {
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
    fn map_ring(&self, fd: &OwnedFd, slot: &Slot, token: usize) -> Result<StreamRing, Error> {
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
                BackwardRing::new(fd, opts.mmap_pages).map_err(|e| Error::io(what(), e))?,
            ));
        }
        let ring = StreamRing::Forward(
            RingBuffer::new(fd, opts.mmap_pages).map_err(|e| Error::io(what(), e))?,
        );
        self.poll
            .registry()
            .register(
                &mut SourceFd(&fd.as_raw_fd()),
                Token(token),
                Interest::READABLE,
            )
            .map_err(|e| Error::io("registering a ring with the poller", e))?;
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
        let syms = kprobe_perf_symbols::KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffffc0a01230 t mod_fn\t[m]\n",
        )
        .unwrap();
        crate::plan::resolve(
            kprobe_perf_spec::ProbeSpec::parse(spec, kprobe_perf_arch::Arch::X86_64).unwrap(),
            &syms,
            kprobe_perf_arch::Arch::X86_64,
            crate::plan::BackendChoice::Pmu,
        )
        .unwrap()
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
