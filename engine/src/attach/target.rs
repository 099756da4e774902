//! Whose probe hits a session records ([`RecordTarget`]), and how a
//! target becomes the (pid, cpu) pairs perf_event_open takes
//! (`RecordTarget::scopes`), and the backend each plan takes for it
//! ([`plans_for_target`]).

use std::os::fd::AsRawFd;
use std::path::PathBuf;

use crate::attach::error::AttachError;
use crate::attach::process;
use crate::attach::tracefs::{ProbeKind, Tracefs};
use crate::plan::{Backend, ProbePlan};

/// Whose probe hits are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordTarget {
    /// Every task on every online CPU.
    AllCpus,
    /// Every task, on these CPUs only (each must be online; a CPU listed
    /// twice counts once).
    Cpus(Vec<u32>),
    /// These threads (tids; duplicates count once), on any CPU; children
    /// are not followed.
    Threads(Vec<i32>),

    /// Every task in a cgroup (v2: a directory under the cgroup2 mount),
    /// on every online CPU, through `PERF_FLAG_PID_CGROUP`.
    Cgroup(PathBuf),

    /// Processes (pids; duplicates count once): every thread each has
    /// when the session opens, and every thread and child process they
    /// start afterwards (the events are inherited, as with `perf record
    /// -p`). The engine finds the threads in `/proc/PID/task`, and lists
    /// them again once the events are open: if a thread appeared in
    /// between (created by a thread not yet attached, so not inherited),
    /// it closes everything and attaches again (up to 5 times; after
    /// that, such late threads are not recorded).
    /// [`Session::target_exited`](crate::session::Session::target_exited) says when
    /// every process has exited.
    Processes(Vec<i32>),

    /// A command the session starts: [`Session::open`](crate::session::Session::open)
    /// looks `argv[0]` up in `PATH` and forks it held before exec (a
    /// missing command is an error before any probe is opened);
    /// [`Session::enable`](crate::session::Session::enable) releases it once the
    /// probes are armed. It starts with every signal at its default action
    /// and none blocked, whatever this process ignores, handles or blocks.
    /// [`Session::command_status`](crate::session::Session::command_status) and
    /// [`Session::wait_command`](crate::session::Session::wait_command) reap it and
    /// give its exit status; a session dropped before releasing it kills it.
    Command {
        /// The program (looked up in `PATH` unless it contains a `/`) and
        /// its arguments.
        argv: Vec<String>,
        /// Whose hits are recorded while it runs.
        scope: CommandScope,
    },
}

/// Whose hits are recorded while a [`RecordTarget::Command`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandScope {
    /// The command and every thread and process it starts (the events are
    /// inherited), armed by the kernel at its exec (`enable_on_exec`), so
    /// nothing of this process is recorded.
    Descendants,
    /// Every task on every online CPU, as [`RecordTarget::AllCpus`].
    AllCpus,
    /// Every task on these CPUs, as [`RecordTarget::Cpus`].
    Cpus(Vec<u32>),
    /// Every task in this cgroup, as [`RecordTarget::Cgroup`].
    Cgroup(PathBuf),
}

impl RecordTarget {
    /// Records `argv` and its descendants only (`perf record -- CMD`).
    pub fn command(argv: Vec<String>) -> RecordTarget {
        RecordTarget::Command {
            argv,
            scope: CommandScope::Descendants,
        }
    }

    /// True when the session opens each probe more than once: once per
    /// CPU on a machine with `online_cpus` CPUs (every task, a cgroup, a
    /// command recorded system-wide), once per listed CPU or thread, or
    /// per task and CPU when the events are inherited. Each PMU probe
    /// event is then a kprobe of its own, and every hit runs all their
    /// handlers.
    pub(crate) fn opens_each_probe_more_than_once(&self, online_cpus: usize) -> bool {
        match self {
            RecordTarget::Processes(_) => true,
            RecordTarget::AllCpus | RecordTarget::Cgroup(_) => online_cpus > 1,
            RecordTarget::Cpus(c) => c.len() > 1,
            RecordTarget::Threads(t) => t.len() > 1,
            RecordTarget::Command { scope, .. } => match scope {
                CommandScope::Descendants => true,
                CommandScope::AllCpus | CommandScope::Cgroup(_) => online_cpus > 1,
                CommandScope::Cpus(c) => c.len() > 1,
            },
        }
    }

    /// True when the target's events are inherited by the tasks it
    /// creates (a command and its children, processes and their new
    /// threads): such uprobes then go through `uprobe_events`.
    pub fn inherits(&self) -> bool {
        matches!(
            self,
            RecordTarget::Processes(_)
                | RecordTarget::Command {
                    scope: CommandScope::Descendants,
                    ..
                }
        )
    }

    /// True when the kernel arms the probes itself at the command's exec
    /// (`enable_on_exec`), so that [`Session::enable`](crate::session::Session::enable)
    /// has nothing to arm.
    pub(crate) fn enables_on_exec(&self) -> bool {
        self.inherits() && matches!(self, RecordTarget::Command { .. })
    }

    /// Where the events of this target are opened: one [`Slot`] per ring,
    /// on the online `cpus`. `threads` are the (pid, tid) pairs of
    /// [`RecordTarget::Processes`] (see [`threads_of_processes`]), and
    /// `command` the pid of the held command of [`RecordTarget::Command`].
    pub(crate) fn scopes(
        &self,
        cpus: &[u32],
        threads: &[(i32, i32)],
        command: Option<i32>,
    ) -> Result<Scopes, AttachError> {
        let system_wide = |list: &[u32]| -> Result<Scopes, AttachError> {
            if let Some(&bad) = list.iter().find(|c| !cpus.contains(c)) {
                return Err(AttachError::CpuNotOnline {
                    cpu: bad,
                    online: cpus.to_vec(),
                });
            }
            // A CPU listed twice would count each event twice.
            let mut list = list.to_vec();
            list.sort_unstable();
            list.dedup();
            Ok(Scopes::new(list.iter().map(|&c| Slot::cpu(c)).collect()))
        };
        match self {
            RecordTarget::AllCpus => system_wide(cpus),
            RecordTarget::Cpus(list) => system_wide(list),
            RecordTarget::Cgroup(path) => cgroup(path, cpus),
            RecordTarget::Processes(_) => Ok(Scopes::new(
                threads
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
            )),
            RecordTarget::Threads(tids) => Ok(Scopes::new(
                // A thread listed twice would count each event twice.
                process::unique_pids(tids)
                    .into_iter()
                    .map(|t| Slot {
                        pid: t,
                        cpu: -1,
                        label: format!("tid {t}"),
                        flags: 0,
                    })
                    .collect(),
            )),
            RecordTarget::Command { scope, .. } => match scope {
                CommandScope::AllCpus => system_wide(cpus),
                CommandScope::Cpus(list) => system_wide(list),
                CommandScope::Cgroup(path) => cgroup(path, cpus),
                CommandScope::Descendants => {
                    let pid = command.ok_or_else(|| AttachError::Internal {
                        what: "a command target opened without its command".into(),
                    })?;
                    Ok(Scopes::new(
                        cpus.iter()
                            .map(|&c| Slot {
                                pid,
                                cpu: c as i32,
                                label: format!("pid {pid}, CPU {c}"),
                                flags: 0,
                            })
                            .collect(),
                    ))
                }
            },
        }
    }
}

/// Every task of the cgroup at `path`, on each of `cpus`.
fn cgroup(path: &std::path::Path, cpus: &[u32]) -> Result<Scopes, AttachError> {
    let dir = std::fs::File::open(path).map_err(|e| {
        AttachError::io(
            format!(
                "cannot open the cgroup {} (give a directory of the cgroup2 hierarchy, e.g. /sys/fs/cgroup/system.slice)",
                path.display()
            ),
            e,
        )
    })?;
    let fd = dir.as_raw_fd();
    let slots = cpus
        .iter()
        .map(|&c| Slot {
            pid: fd,
            cpu: c as i32,
            label: format!("cgroup {}, CPU {c}", path.display()),
            flags: u64::from(perf_event_open_sys::bindings::PERF_FLAG_PID_CGROUP),
        })
        .collect();
    Ok(Scopes {
        slots,
        // perf_event_open takes its own reference to the cgroup.
        _cgroup_dir: Some(dir),
    })
}

/// The (pid, tid) of every thread of `pids` now, in their order.
pub(crate) fn threads_of_processes(pids: &[i32]) -> Result<Vec<(i32, i32)>, AttachError> {
    let mut threads = Vec::new();
    for &pid in pids {
        let tids = process::threads_of(pid).map_err(|e| {
            AttachError::io(
                format!("listing the threads of process {pid} (/proc/{pid}/task)"),
                e,
            )
        })?;
        threads.extend(tids.unwrap_or_default().into_iter().map(|t| (pid, t)));
    }
    Ok(threads)
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
) -> Result<Vec<ProbePlan>, AttachError> {
    let inherits = target.inherits();
    if inherits {
        if let Some(p) = plans
            .iter()
            .find(|p| p.is_user() && p.backend == Backend::Pmu && !p.auto_backend)
        {
            return Err(AttachError::UprobePmuCannotInherit {
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

/// The rings of a target and what must stay open while its events are
/// opened.
pub(crate) struct Scopes {
    /// One per ring.
    pub(crate) slots: Vec<Slot>,
    /// The cgroup directory whose fd the slots name, kept open until
    /// every event is opened.
    _cgroup_dir: Option<std::fs::File>,
}

impl Scopes {
    fn new(slots: Vec<Slot>) -> Scopes {
        Scopes {
            slots,
            _cgroup_dir: None,
        }
    }
}

/// Where one ring's events are opened: perf_event_open's pid and cpu, and
/// how to name it in messages.
pub(crate) struct Slot {
    pub(crate) pid: i32,
    pub(crate) cpu: i32,
    pub(crate) label: String,
    /// perf_event_open flags (`PERF_FLAG_PID_CGROUP` when `pid` is a
    /// cgroup directory's fd).
    pub(crate) flags: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(s: &Scopes) -> Vec<(i32, i32, &str)> {
        s.slots
            .iter()
            .map(|s| (s.pid, s.cpu, s.label.as_str()))
            .collect()
    }

    #[test]
    fn each_target_opens_where_it_says() {
        let cpus = [0, 1, 3];
        let s = RecordTarget::AllCpus.scopes(&cpus, &[], None).unwrap();
        assert_eq!(
            pairs(&s),
            [(-1, 0, "CPU 0"), (-1, 1, "CPU 1"), (-1, 3, "CPU 3")]
        );
        let s = RecordTarget::Cpus(vec![3, 0, 3])
            .scopes(&cpus, &[], None)
            .unwrap();
        assert_eq!(pairs(&s), [(-1, 0, "CPU 0"), (-1, 3, "CPU 3")]);
        let e = RecordTarget::Cpus(vec![2]).scopes(&cpus, &[], None);
        assert!(matches!(e, Err(AttachError::CpuNotOnline { cpu: 2, .. })));
        let s = RecordTarget::Threads(vec![42, 43, 42])
            .scopes(&cpus, &[], None)
            .unwrap();
        assert_eq!(pairs(&s), [(42, -1, "tid 42"), (43, -1, "tid 43")]);
        let s = RecordTarget::Processes(vec![7])
            .scopes(&cpus[..2], &[(7, 7), (7, 9)], None)
            .unwrap();
        assert_eq!(
            pairs(&s),
            [
                (7, 0, "thread 7 of process 7, CPU 0"),
                (7, 1, "thread 7 of process 7, CPU 1"),
                (9, 0, "thread 9 of process 7, CPU 0"),
                (9, 1, "thread 9 of process 7, CPU 1"),
            ]
        );
        let cmd = RecordTarget::command(vec!["true".into()]);
        let s = cmd.scopes(&cpus[..2], &[], Some(55)).unwrap();
        assert_eq!(
            pairs(&s),
            [(55, 0, "pid 55, CPU 0"), (55, 1, "pid 55, CPU 1")]
        );
        let wide = RecordTarget::Command {
            argv: vec!["true".into()],
            scope: CommandScope::Cpus(vec![1]),
        };
        let s = wide.scopes(&cpus, &[], Some(55)).unwrap();
        assert_eq!(pairs(&s), [(-1, 1, "CPU 1")]);
    }

    #[test]
    fn only_descendants_of_a_command_inherit_and_wait_for_exec() {
        let cmd = RecordTarget::command(vec!["true".into()]);
        assert!(cmd.inherits() && cmd.enables_on_exec());
        let wide = RecordTarget::Command {
            argv: vec!["true".into()],
            scope: CommandScope::AllCpus,
        };
        assert!(!wide.inherits() && !wide.enables_on_exec());
        let p = RecordTarget::Processes(vec![1]);
        assert!(p.inherits() && !p.enables_on_exec());
        assert!(!RecordTarget::AllCpus.inherits());
    }

    #[test]
    fn a_cgroup_that_cannot_be_opened_is_named() {
        let e = RecordTarget::Cgroup("/nonexistent/kprobe-perf".into())
            .scopes(&[0], &[], None)
            .err()
            .unwrap();
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(e
            .to_string()
            .starts_with("cannot open the cgroup /nonexistent/kprobe-perf"));
    }
}
