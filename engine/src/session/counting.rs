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
use std::time::Duration;

use crate::attach::command::HeldCommand;
use crate::attach::counters::{self, Counter};
use crate::attach::process::ProcessWatch;
use crate::attach::sys;
use crate::attach::target::RecordTarget;
use crate::attach::tracefs::TracefsProbes;
use crate::error::Error;
use crate::plan::ProbePlan;

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
        let opened = counters::open(plans, &target)?;
        Ok(CountingSession {
            counters: opened.counters,
            tracefs: opened.tracefs,
            plans: opened.plans,
            enabled: opened.enabled,
            watched: opened.watched,
            command: opened.command,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::sys::{fake, Syscall};
    use std::cell::RefCell;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::rc::Rc;

    fn planned(spec: &str) -> ProbePlan {
        crate::plan::planned_for_pmu(
            spec,
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\n",
        )
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
