//! Counting sessions: how many times each probe fired, with no ring
//! buffer and no sample.
//!
//! A [`CountingSession`] opens each probe as a counting-only perf event on
//! each of its target's scopes (every online CPU, the target's threads, a
//! cgroup on every CPU, or a command and its children): the kernel adds one
//! to the event's count at each hit and writes nothing anywhere, so a hit
//! costs what the probe itself costs. [`CountingSession::read`] reads every
//! count with read(2) into a [`CountSnapshot`]: per probe, the total and
//! the share of each CPU; [`CountSnapshot::since`] gives the hits between
//! two snapshots (interval output).
//!
//! The probes reach the kernel as in a recording [`Session`](crate::session::Session):
//! the same PMUs and tracefs definitions (removed on drop, and by the
//! [`Guardian`](crate::Guardian) if the process dies), the same scopes and
//! the same by-address retry of a refused `MOD:SYM`.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

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
use crate::attach::target::{self, Slot};
use crate::attach::target::{plans_for_target, RecordTarget};
use crate::attach::tracefs::{self, TracefsProbes};
use crate::error::Error;
use crate::plan::ProbePlan;

/// One probe's count on one scope.
#[derive(Debug)]
struct Counter {
    /// The probe (its index in the plans).
    probe: usize,
    /// The CPU the event counts on (`None`: a thread's event, on any CPU).
    cpu: Option<u32>,
    fd: OwnedFd,
}

/// Probes opened to count their hits.
pub struct CountingSession {
    // Field order matters: the counters must close before `tracefs`
    // removes the events they use.
    counters: Vec<Counter>,
    tracefs: Option<TracefsProbes>,
    plans: Vec<ProbePlan>,
    enabled: bool,
    /// The processes of [`RecordTarget::Processes`].
    watched: Vec<ProcessWatch>,
    /// The command of [`RecordTarget::Command`], held until
    /// [`CountingSession::enable`].
    command: Option<HeldCommand>,
}

/// One probe's hits: the total, and per CPU (`None`: counted by a
/// thread's event, which follows the thread on any CPU).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeCount {
    /// Every hit.
    pub total: u64,
    /// Hits per CPU; every CPU the probe is open on has an entry.
    pub per_cpu: BTreeMap<Option<u32>, u64>,
}

/// Every probe's hits at one moment, in the order of the plans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountSnapshot {
    /// Per probe.
    pub probes: Vec<ProbeCount>,
}

impl CountSnapshot {
    /// The hits between `earlier` and this snapshot (per probe and CPU;
    /// never negative).
    pub fn since(&self, earlier: &CountSnapshot) -> CountSnapshot {
        let none = ProbeCount::default();
        let probes = self
            .probes
            .iter()
            .enumerate()
            .map(|(i, now)| {
                let before = earlier.probes.get(i).unwrap_or(&none);
                ProbeCount {
                    total: now.total.saturating_sub(before.total),
                    per_cpu: now
                        .per_cpu
                        .iter()
                        .map(|(cpu, n)| {
                            let b = before.per_cpu.get(cpu).copied().unwrap_or(0);
                            (*cpu, n.saturating_sub(b))
                        })
                        .collect(),
                }
            })
            .collect();
        CountSnapshot { probes }
    }
}

/// The counting-only attr and name of `plan` opened by `opener` for a
/// target that inherits (`inherit`) and arms at exec (`enable_on_exec`).
fn counter_attr<'n>(
    opener: Opener,
    plan: &ProbePlan,
    name: Option<&'n std::ffi::CStr>,
    settings: &EventSettings,
) -> Result<(sys::perf_event_attr, Option<&'n std::ffi::CStr>), Error> {
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
        Ok(inherited(event, name, plan)?)
    } else {
        Ok((event, name))
    }
}

/// The filter the kernel runs for each probe; a filter that would run in
/// user space is refused, as a counting event hands nothing to user space.
fn kernel_filters(plans: &[ProbePlan]) -> Result<Vec<Option<std::ffi::CString>>, Error> {
    for plan in plans {
        if let Some(f) = &plan.filter {
            if let crate::plan::filter::FilterRuns::UserSpace(why) = f.runs() {
                return Err(Error::FilterNeedsUserSpace {
                    probe: plan.spec.to_string(),
                    filter: f.text().to_string(),
                    why: why.clone(),
                });
            }
        }
    }
    Ok(plans.iter().map(kernel_filter).collect::<Result<_, _>>()?)
}

/// The CPU of a slot (`None` for a thread's slot, cpu -1).
fn slot_cpu(slot: &Slot) -> Option<u32> {
    u32::try_from(slot.cpu).ok()
}

impl CountingSession {
    /// Opens every probe, counting only, on every scope of `target`, and
    /// leaves them disabled until [`CountingSession::enable`] (or, for a
    /// command's descendants, until the command calls exec: `enable`
    /// releases the command, started held as
    /// [`Session::open`](crate::session::Session::open) starts it).
    ///
    /// As [`Session::open`](crate::session::Session::open): the tracefs definitions
    /// of kprobe-perf processes that are gone are removed first, and a
    /// target that inherits defines its uprobes through `uprobe_events`.
    /// For [`RecordTarget::Processes`], the threads are those each process
    /// has now (a thread that exits meanwhile is skipped), and their new
    /// threads and children are counted as they inherit the events.
    pub fn open(plans: Vec<ProbePlan>, target: RecordTarget) -> Result<CountingSession, Error> {
        tracefs::remove_stale_if_mounted();
        let mut plans = plans_for_target(plans, &target, false)?;
        let pmus = probe_pmus(&plans)?;
        let cpus = online_cpus()?;
        let (threads, watched) = match &target {
            RecordTarget::Processes(pids) => scan(pids)?,
            _ => (Vec::new(), Vec::new()),
        };
        let command = match &target {
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
                    Err(e) => return Err(e.into()),
                }
            }
            counters.extend(opened);
        }
        Ok(CountingSession {
            counters,
            tracefs: defined.tracefs,
            plans,
            enabled: settings.enable_on_exec,
            watched,
            command,
        })
    }

    /// Arms every probe (the kernel does it at exec for a command's
    /// descendants), then releases the command of a
    /// [`RecordTarget::Command`], reporting exec's failure.
    pub fn enable(&mut self) -> Result<(), Error> {
        if !self.enabled {
            for c in &self.counters {
                sys::enable(&c.fd).map_err(|e| Error::io("enabling a probe's counter", e))?;
            }
            self.enabled = true;
        }
        if let Some(command) = self.command.as_mut() {
            command.release()?;
        }
        Ok(())
    }

    /// The pid of the command of a [`RecordTarget::Command`].
    pub fn command_pid(&self) -> Option<i32> {
        self.command.as_ref().map(HeldCommand::pid)
    }

    /// The exit status of the command of a [`RecordTarget::Command`] once
    /// it has ended (it is then reaped); `None` while it runs, and for
    /// other targets. Does not block.
    pub fn command_status(&mut self) -> Result<Option<std::process::ExitStatus>, Error> {
        match self.command.as_mut() {
            Some(command) => Ok(command.try_wait()?),
            None => Ok(None),
        }
    }

    /// As [`CountingSession::command_status`], waiting up to `grace` for
    /// the command to end (for instance after a Ctrl-C that reached it
    /// too).
    pub fn wait_command(
        &mut self,
        grace: Duration,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        match self.command.as_mut() {
            Some(command) => Ok(command.wait(grace)?),
            None => Ok(None),
        }
    }

    /// Disarms every probe; the counts can still be read.
    pub fn disable(&mut self) -> Result<(), Error> {
        for c in &self.counters {
            sys::disable(&c.fd).map_err(|e| Error::io("disabling a probe's counter", e))?;
        }
        Ok(())
    }

    /// Every probe's hits so far (read(2) of each event; an inherited
    /// event's count includes its children's).
    pub fn read(&self) -> Result<CountSnapshot, Error> {
        let mut probes = vec![ProbeCount::default(); self.plans.len()];
        for c in &self.counters {
            let n = sys::read_count(&c.fd).map_err(|e| {
                let probe = self.plans.get(c.probe).map_or("?", |p| p.event.as_str());
                Error::io(format!("reading the count of {probe}"), e)
            })?;
            if let Some(p) = probes.get_mut(c.probe) {
                p.total += n;
                *p.per_cpu.entry(c.cpu).or_insert(0) += n;
            }
        }
        Ok(CountSnapshot { probes })
    }

    /// The probes, in the order of the counts.
    pub fn plans(&self) -> &[ProbePlan] {
        &self.plans
    }

    /// The perf event fds open (one per probe and scope).
    pub fn fd_count(&self) -> usize {
        self.counters.len()
    }

    /// The private tracefs group, when some probe is defined there.
    pub fn tracefs_group(&self) -> Option<&str> {
        self.tracefs.as_ref().map(TracefsProbes::group)
    }

    /// For [`RecordTarget::Processes`]: true once every target process has
    /// exited. False for every other target.
    pub fn target_exited(&self) -> bool {
        !self.watched.is_empty() && self.watched.iter().all(ProcessWatch::exited)
    }
}

/// The (pid, tid) of every thread of `pids` now, and a watch on each
/// process (started before the scan, so that no exit is missed).
#[allow(clippy::type_complexity)]
fn scan(pids: &[i32]) -> Result<(Vec<(i32, i32)>, Vec<ProcessWatch>), Error> {
    let pids = process::unique_pids(pids);
    if pids.is_empty() {
        return Err(AttachError::NoProcesses.into());
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
    use crate::attach::sys::{fake, Syscall};
    use std::cell::RefCell;
    use std::os::fd::AsRawFd;
    use std::rc::Rc;

    const PMU: ProbePmu = ProbePmu {
        type_: 9,
        retprobe_bit: 0,
        ref_ctr_shift: None,
    };

    fn planned(spec: &str) -> ProbePlan {
        let syms = kprobe_perf_symbols::KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\n",
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

    #[test]
    fn snapshots_subtract_per_probe_and_cpu() {
        let count = |total, cpus: &[(Option<u32>, u64)]| ProbeCount {
            total,
            per_cpu: cpus.iter().copied().collect(),
        };
        let earlier = CountSnapshot {
            probes: vec![count(10, &[(Some(0), 4), (Some(1), 6)])],
        };
        let now = CountSnapshot {
            probes: vec![
                count(25, &[(Some(0), 4), (Some(1), 21)]),
                count(3, &[(None, 3)]),
            ],
        };
        assert_eq!(
            now.since(&earlier),
            CountSnapshot {
                probes: vec![
                    count(15, &[(Some(0), 0), (Some(1), 15)]),
                    count(3, &[(None, 3)]),
                ]
            }
        );
    }

    #[test]
    fn read_sums_each_probes_counters_per_cpu() {
        // Counters of probe 0 on CPUs 0 and 1 (twice on CPU 1: two
        // threads), of probe 1 on CPU 0; each fd's count is fd-specific.
        let fds: Vec<OwnedFd> = (0..4)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect();
        let counts: Rc<RefCell<std::collections::HashMap<i32, u64>>> = Rc::default();
        for (k, fd) in fds.iter().enumerate() {
            counts
                .borrow_mut()
                .insert(fd.as_raw_fd(), [7, 100, 23, 5][k]);
        }
        let log = Rc::new(RefCell::new(Vec::new()));
        let _fake = fake::install({
            let (counts, log) = (counts.clone(), log.clone());
            move |call| match call {
                Syscall::Read { fd, buf } => {
                    let n = counts.borrow()[&fd.as_raw_fd()];
                    buf[..8].copy_from_slice(&n.to_ne_bytes());
                    Ok(8)
                }
                other => {
                    log.borrow_mut().push(format!("{other:?}"));
                    Ok(0)
                }
            }
        });
        let placed = [(0, Some(0)), (0, Some(1)), (0, Some(1)), (1, Some(0))];
        let counters = fds
            .into_iter()
            .zip(placed)
            .map(|(fd, (probe, cpu))| Counter { probe, cpu, fd })
            .collect();
        let mut session = CountingSession {
            counters,
            tracefs: None,
            plans: vec![planned("p:do_sys_openat2"), planned("r:do_sys_openat2")],
            enabled: false,
            watched: Vec::new(),
            command: None,
        };
        session.enable().unwrap();
        session.enable().unwrap();
        assert_eq!(log.borrow().len(), 4, "each counter enabled once");
        let snap = session.read().unwrap();
        assert_eq!(snap.probes.len(), 2);
        assert_eq!(snap.probes[0].total, 130);
        assert_eq!(
            snap.probes[0].per_cpu,
            [(Some(0), 7), (Some(1), 123)].into_iter().collect()
        );
        assert_eq!(snap.probes[1].total, 5);
        assert_eq!(snap.probes[1].per_cpu, [(Some(0), 5)].into_iter().collect());
        drop(session);
    }
}
