//! Processes as recording targets: their threads, read from
//! `/proc/PID/task`, and whether they are still alive.

use std::io;
use std::os::fd::OwnedFd;

use crate::attach::error::AttachError;
use crate::attach::sys;

/// The pids in their first order, each once.
pub(crate) fn unique_pids(pids: &[i32]) -> Vec<i32> {
    let mut seen = std::collections::HashSet::new();
    pids.iter().copied().filter(|p| seen.insert(*p)).collect()
}

/// The thread ids in `/proc/PID/task`, in ascending order (the leader
/// first). `None` when the process is gone.
pub(crate) fn threads_of(pid: i32) -> io::Result<Option<Vec<i32>>> {
    let dir = format!("/proc/{pid}/task");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut tids = Vec::new();
    for entry in entries {
        if let Some(t) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(t);
        }
    }
    tids.sort_unstable();
    Ok(Some(tids))
}

/// The process a task belongs to (`Tgid:` of `/proc/TID/status`).
fn tgid_of(tid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// State and start time (fields 3 and 22 of `/proc/PID/stat`).
fn stat_of(pid: i32) -> Option<(char, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields that follow start after its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.to_string();
    Some((state, start))
}

/// Watches one target process until it exits.
#[derive(Debug)]
pub(crate) enum ProcessWatch {
    /// A pidfd, readable once the process has exited (Linux 5.3+).
    Pidfd {
        /// The process.
        pid: i32,
        /// Its pidfd.
        fd: OwnedFd,
    },
    /// Before Linux 5.3: `/proc/PID/stat` read at each check; the process
    /// has exited when it is gone, a zombie, or another process with a
    /// different start time holds the pid.
    Proc {
        /// The process.
        pid: i32,
        /// Its start time (clock ticks after boot), telling a reused pid.
        start: String,
    },
}

impl ProcessWatch {
    /// Starts watching `pid`, which must be a process (a thread group
    /// leader): a thread of another process is refused, naming both.
    pub(crate) fn new(pid: i32) -> Result<ProcessWatch, AttachError> {
        let not_found = || AttachError::NoSuchProcess { pid };
        if pid <= 0 {
            return Err(AttachError::NotAProcessId { pid });
        }
        match tgid_of(pid) {
            None => return Err(not_found()),
            Some(tgid) if tgid != pid => {
                return Err(AttachError::NotAProcess {
                    tid: pid,
                    process: tgid,
                })
            }
            Some(_) => {}
        }
        match sys::pidfd_open(pid) {
            Ok(fd) => Ok(ProcessWatch::Pidfd { pid, fd }),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(not_found()),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => match stat_of(pid) {
                Some((_, start)) => Ok(ProcessWatch::Proc { pid, start }),
                None => Err(not_found()),
            },
            Err(e) => Err(AttachError::io(
                format!("watching process {pid} (pidfd_open)"),
                e,
            )),
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> i32 {
        match self {
            ProcessWatch::Pidfd { pid, .. } | ProcessWatch::Proc { pid, .. } => *pid,
        }
    }

    /// The pidfd, to wait on (none before Linux 5.3).
    pub(crate) fn pidfd(&self) -> Option<&OwnedFd> {
        match self {
            ProcessWatch::Pidfd { fd, .. } => Some(fd),
            ProcessWatch::Proc { .. } => None,
        }
    }

    /// True once every thread of the process has exited (it may still
    /// wait to be reaped by its parent).
    pub(crate) fn exited(&self) -> bool {
        match self {
            // A pidfd that cannot be polled is an fd we hold, so poll
            // fails only on exhausted kernel memory: treat it as alive
            // and let the next check decide.
            ProcessWatch::Pidfd { fd, .. } => sys::pidfd_exited(fd).unwrap_or(false),
            ProcessWatch::Proc { pid, start } => match stat_of(*pid) {
                None => true,
                Some((state, s)) => matches!(state, 'Z' | 'X') || s != *start,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_pids_are_merged_in_first_order() {
        assert_eq!(unique_pids(&[7, 3, 7, 3, 9]), vec![7, 3, 9]);
    }

    #[test]
    fn own_threads_are_listed_with_the_leader_first() {
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(sys::gettid()).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let tids = threads_of(me).unwrap().unwrap();
        assert_eq!(tids[0], me);
        assert!(tids.contains(&tid), "{tids:?} lacks {tid}");
        // A thread is refused as a process, naming its process.
        let e = ProcessWatch::new(tid).unwrap_err();
        assert!(
            matches!(e, AttachError::NotAProcess { tid: t, process } if t == tid && process == me),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!("{tid} is a thread of process {me}, not a process: record process {me}, or thread {tid} alone as a thread target")
        );
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn a_child_is_watched_until_it_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let w = ProcessWatch::new(child.id() as i32).unwrap();
        assert!(!w.exited());
        // Exited but not yet reaped (a zombie) counts as exited.
        let t0 = std::time::Instant::now();
        while !w.exited() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(child.wait().unwrap().code(), Some(0));
        assert!(threads_of(child.id() as i32).unwrap().is_none());
    }

    #[test]
    fn a_missing_process_is_refused() {
        // pid_max is at most 2^22.
        let e = ProcessWatch::new(1 << 23).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "no process {0} (/proc/{0} does not exist): give the pid of a running process",
                1 << 23
            )
        );
    }
}
