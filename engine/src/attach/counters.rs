//! Probes opened to count their hits ([`open`]): each probe as a
//! counting-only perf event on each scope of its target, with no ring and
//! no sample, for a [`CountingSession`](crate::CountingSession). The
//! probes reach the kernel as a recording session's do: the same PMUs and
//! tracefs definitions, the same scopes and the same by-address retry of
//! a refused `MOD:SYM`.

use std::os::fd::OwnedFd;

use crate::attach::attr::{self, EventSettings, Opener, SideRecords};
use crate::attach::command::HeldCommand;
use crate::attach::cpus::online_cpus;
use crate::attach::definition::define_events;
use crate::attach::error::AttachError;
use crate::attach::open::{
    apply_kernel_filter, inherited, kernel_filter, open_at, pmu_name, reserve_fds,
};
use crate::attach::pmu::probe_pmus;
use crate::attach::process::{self, ProcessWatch};
use crate::attach::sys;
use crate::attach::target::{self, RecordTarget, Slot};
use crate::attach::tracefs::{self, TracefsProbes};
use crate::plan::ProbePlan;

/// One probe's count on one scope.
#[derive(Debug)]
pub(crate) struct Counter {
    /// The probe (its index in the plans).
    pub(crate) probe: usize,
    /// The CPU the event counts on (`None`: a thread's event, on any CPU).
    pub(crate) cpu: Option<u32>,
    /// The counting event.
    pub(crate) fd: OwnedFd,
}

/// Every probe opened to count, on every scope: what [`open`] hands a
/// counting session.
pub(crate) struct OpenedCounters {
    /// One per probe and scope. Listed before `tracefs`: the counters
    /// close before it removes the events they use.
    pub(crate) counters: Vec<Counter>,
    /// The private tracefs group, when a probe is defined there.
    pub(crate) tracefs: Option<TracefsProbes>,
    /// The probes as opened.
    pub(crate) plans: Vec<ProbePlan>,
    /// Armed already (by the kernel, at the command's exec).
    pub(crate) enabled: bool,
    /// The processes of [`RecordTarget::Processes`].
    pub(crate) watched: Vec<ProcessWatch>,
    /// The command of [`RecordTarget::Command`], held until enabled.
    pub(crate) command: Option<HeldCommand>,
}

/// Opens every probe of `plans`, counting only, on every scope of
/// `target`, disabled (but for a command's descendants, which the kernel
/// arms at exec): see [`CountingSession::open`](crate::CountingSession::open).
pub(crate) fn open(
    plans: Vec<ProbePlan>,
    target: &RecordTarget,
) -> Result<OpenedCounters, AttachError> {
    tracefs::remove_stale_if_mounted();
    let mut plans = target::plans_for_target(plans, target, false)?;
    let pmus = probe_pmus(&plans)?;
    let cpus = online_cpus()?;
    let (threads, watched) = match target {
        RecordTarget::Processes(pids) => scan(pids)?,
        _ => (Vec::new(), Vec::new()),
    };
    let command = match target {
        RecordTarget::Command { argv, .. } => Some(HeldCommand::spawn(argv)?),
        _ => None,
    };
    let defined = define_events(&mut plans, pmus)?;
    let filters = kernel_filters(&plans)?;
    let scopes = target.scopes(&cpus, &threads, command.as_ref().map(HeldCommand::pid))?;
    reserve_fds(&plans, &scopes.slots)?;
    let settings = EventSettings {
        mmap_pages: 0,
        write_backward: false,
        inherit: target.inherits(),
        enable_on_exec: target.enables_on_exec(),
        call_graph: None,
    };
    let names: Vec<_> = plans.iter().map(pmu_name).collect();
    let skip_gone = matches!(target, RecordTarget::Processes(_));
    let mut counters = Vec::with_capacity(scopes.slots.len() * plans.len());
    'slots: for slot in &scopes.slots {
        let mut opened = Vec::with_capacity(plans.len());
        for (i, plan) in plans.iter().enumerate() {
            let opener = defined.openers[i];
            let (event, name) = counter_attr(opener, plan, names[i].as_deref(), &settings)?;
            match open_at(&event, name, plan, opener, slot) {
                Ok(fd) => {
                    if let Some(Some(filter)) = filters.get(i) {
                        let fs = defined.tracefs.as_ref();
                        apply_kernel_filter(&fd, filter, plan, |text| match (fs, opener) {
                            (Some(t), Opener::Tracepoint(_)) => {
                                t.tracefs().explain_filter(t.group(), &plan.event, text)
                            }
                            _ => None,
                        })?;
                    }
                    opened.push(Counter {
                        probe: i,
                        cpu: slot_cpu(slot),
                        fd,
                    })
                }
                // The thread exited after the scan: nothing to count.
                Err(AttachError::Open { source, .. })
                    if skip_gone && source.raw_os_error() == Some(libc::ESRCH) =>
                {
                    continue 'slots;
                }
                Err(e) => return Err(e),
            }
        }
        counters.extend(opened);
    }
    Ok(OpenedCounters {
        counters,
        tracefs: defined.tracefs,
        plans,
        enabled: settings.enable_on_exec,
        watched,
        command,
    })
}

/// The counting-only attr and name of `plan` opened by `opener` for a
/// target that inherits (`inherit`) and arms at exec (`enable_on_exec`).
fn counter_attr<'n>(
    opener: Opener,
    plan: &ProbePlan,
    name: Option<&'n std::ffi::CStr>,
    settings: &EventSettings,
) -> Result<(sys::perf_event_attr, Option<&'n std::ffi::CStr>), AttachError> {
    let event = attr::counter(&attr::probe_event(
        opener,
        plan,
        settings,
        SideRecords::None,
    ));
    let name = match opener {
        Opener::Pmu(_) => name,
        Opener::Tracepoint(_) => None,
    };
    if settings.inherit {
        inherited(event, name, plan)
    } else {
        Ok((event, name))
    }
}

/// The filter the kernel runs for each probe; a filter that would run in
/// user space is refused, as a counting event hands nothing to user space.
fn kernel_filters(plans: &[ProbePlan]) -> Result<Vec<Option<std::ffi::CString>>, AttachError> {
    for plan in plans {
        if let Some(f) = &plan.filter {
            if let crate::plan::filter::FilterRuns::UserSpace(why) = f.runs() {
                return Err(AttachError::FilterNeedsUserSpace {
                    probe: plan.spec.to_string(),
                    filter: f.text().to_string(),
                    why: why.clone(),
                });
            }
        }
    }
    plans.iter().map(kernel_filter).collect()
}

/// The CPU of a slot (`None` for a thread's slot, cpu -1).
fn slot_cpu(slot: &Slot) -> Option<u32> {
    u32::try_from(slot.cpu).ok()
}

/// The (pid, tid) of every thread of `pids` now, and a watch on each
/// process (started before the scan, so that no exit is missed).
#[allow(clippy::type_complexity)]
fn scan(pids: &[i32]) -> Result<(Vec<(i32, i32)>, Vec<ProcessWatch>), AttachError> {
    let pids = process::unique_pids(pids);
    if pids.is_empty() {
        return Err(AttachError::NoProcesses);
    }
    let watched = pids
        .iter()
        .map(|&p| ProcessWatch::new(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((target::threads_of_processes(&pids)?, watched))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::pmu::ProbePmu;

    const PMU: ProbePmu = ProbePmu {
        type_: 9,
        retprobe_bit: 0,
        ref_ctr_shift: None,
    };

    fn planned(spec: &str) -> ProbePlan {
        crate::plan::planned_for_pmu(
            spec,
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\n",
        )
    }

    fn settings(inherit: bool, enable_on_exec: bool) -> EventSettings {
        EventSettings {
            mmap_pages: 0,
            write_backward: false,
            inherit,
            enable_on_exec,
            call_graph: None,
        }
    }

    /// (type, config, config2, sample_period, sample_type, flag bits) of
    /// an attr, from its bytes as the kernel reads them.
    fn fields(a: &sys::perf_event_attr) -> (u32, u64, u64, u64, u64, u64) {
        let b = sys::attr_bytes(a);
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        let type_ = u32::from_ne_bytes(b[0..4].try_into().unwrap());
        (
            type_,
            u64_at(8),
            u64_at(64),
            u64_at(16),
            u64_at(24),
            u64_at(40),
        )
    }

    #[test]
    fn a_counter_samples_nothing_and_keeps_the_probe_and_target() {
        let name = std::ffi::CString::new("do_sys_openat2").unwrap();
        let plan = planned("r:do_sys_openat2 ret=$retval");
        let (a, n) = counter_attr(
            Opener::Pmu(PMU),
            &plan,
            Some(&name),
            &settings(false, false),
        )
        .unwrap();
        assert_eq!(n, Some(name.as_c_str()));
        let (type_, config, config2, period, sample_type, flags) = fields(&a);
        assert_eq!((type_, config, config2), (9, 1, 0), "a kretprobe by name");
        assert_eq!((period, sample_type), (0, 0), "no samples");
        // Only `disabled` (bit 0) is set: no watermark (bit 14), no
        // comm/mmap/sample_id_all/write_backward, no inherit.
        assert_eq!(flags, 1);
        // A command's counter: inherited (bit 1), armed at exec (bit
        // 12), and by address (the name is read as a user pointer at
        // each fork).
        let (a, n) =
            counter_attr(Opener::Pmu(PMU), &plan, Some(&name), &settings(true, true)).unwrap();
        assert_eq!(n, None);
        let (_, config, config2, period, sample_type, flags) = fields(&a);
        assert_eq!((config, config2), (1, 0xffff_ffff_8123_4570));
        assert_eq!((period, sample_type), (0, 0));
        assert_eq!(flags, 1 | 1 << 1 | 1 << 12);
        // A tracefs event: its tracepoint id, no name.
        let (a, n) = counter_attr(
            Opener::Tracepoint(1234),
            &plan,
            Some(&name),
            &settings(false, false),
        )
        .unwrap();
        assert_eq!(n, None);
        let (type_, config, _, period, sample_type, flags) = fields(&a);
        assert_eq!(
            (type_, config, period, sample_type, flags),
            (2, 1234, 0, 0, 1)
        );
    }
}
