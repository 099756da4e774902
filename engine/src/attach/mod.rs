//! The only stage that makes system calls, and the one that opens:
//! [`open()`] turns a session's plans into its opened probes (fds, rings,
//! tracefs definitions). Its parts: the syscall layer ([`sys`]), the
//! per-CPU rings ([`ring`]), the `perf_event_attr`s ([`attr`]), the probe
//! PMUs, CPUs, processes and the recorded command, and the tracefs
//! definer with its guardian.

pub(crate) mod attr;
pub(crate) mod command;
pub(crate) mod counters;
mod cpu_list;
pub mod cpus;
pub(crate) mod definition;
pub(crate) mod error;
pub(crate) mod guardian;
pub(crate) mod instance;
pub(crate) mod open;
pub(crate) mod options;
pub mod os;
pub(crate) mod pmu;
pub(crate) mod process;
pub(crate) mod ring;
pub(crate) mod sys;
pub(crate) mod target;
mod tasks;
pub mod tracefs;

use mio::Poll;

use crate::attach::error::AttachError;
use crate::attach::open::Opened;
use crate::attach::options::SessionOptions;
use crate::attach::tasks::Tasks;
use crate::plan::entry_join::Expanded;

/// Opens the probes `plans` lays out on every online CPU, or for the
/// target's tasks, maps one ring per CPU and leaves the probes disabled
/// (but for a command's, which the kernel arms at its exec).
///
/// Every open first removes the tracefs definitions of kprobe-perf
/// processes that are gone (silently nothing without tracefs). For
/// [`RecordTarget::Processes`](target::RecordTarget::Processes), a thread created before its creator's
/// events were open inherited nothing: the probes are opened again, from
/// a new list of threads, until no thread is late (five times at most).
pub(crate) fn open(plans: &Expanded, opts: &SessionOptions) -> Result<Opened, AttachError> {
    const ATTEMPTS: usize = 5;
    if !opts.mmap_pages.is_power_of_two() {
        return Err(AttachError::RingPages {
            pages: opts.mmap_pages,
        });
    }
    tracefs::remove_stale_if_mounted();
    let tasks = Tasks::of(&opts.target)?;
    let mut attempt = 1;
    loop {
        let threads = tasks.threads()?;
        let opened = open_tasks(plans, opts, &threads, tasks.command_pid())?;
        let late = tasks.threads()?.iter().any(|t| !threads.contains(t));
        if !late || attempt == ATTEMPTS {
            return tasks.hand_over(opened);
        }
        attempt += 1;
    }
}

/// Opens the probes for `opts.target`; for [`RecordTarget::Processes`](target::RecordTarget::Processes),
/// on each (pid, tid) of `threads` on every CPU, one ring per CPU shared
/// by all threads; for a [`RecordTarget::Command`](target::RecordTarget::Command), for the held
/// command's pid `command`.
fn open_tasks(
    plans: &Expanded,
    opts: &SessionOptions,
    threads: &[(i32, i32)],
    command: Option<i32>,
) -> Result<Opened, AttachError> {
    let joined = !plans.joins.is_empty();
    let mut plans = target::plans_for_target(plans.opened.clone(), &opts.target, joined)?;
    let pmus = pmu::probe_pmus(&plans)?;
    let cpus = cpus::online_cpus()?;
    let defined = definition::define_events(&mut plans, pmus)?;
    let scopes = opts.target.scopes(&cpus, threads, command)?;
    open::reserve_fds(&plans, &scopes.slots)?;
    let attrs = open::file_attrs(&plans, &defined.openers, opts);
    let poll = Poll::new().map_err(|e| AttachError::io("creating the poller", e))?;
    let events = open::open_events(
        &plans,
        &defined.openers,
        opts,
        &scopes.slots,
        &poll,
        defined.tracefs.as_ref(),
    )?;
    Ok(Opened {
        plans,
        attrs,
        field_offsets: defined.field_offsets,
        events,
        tracefs: defined.tracefs,
        poll,
        enabled: opts.target.enables_on_exec(),
        watched: Vec::new(),
        command: None,
    })
}
