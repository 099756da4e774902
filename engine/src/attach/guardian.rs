//! The guardian: a small process that removes this process's tracefs
//! definitions when it dies, however it dies.
//!
//! Probes defined through tracefs (kretprobes with maxactive, arguments
//! the kernel fetches from memory, uprobes that follow a command's forks)
//! outlive the process that defined them: the kernel keeps a definition
//! until someone writes its removal. [`TracefsProbes`](crate::attach::tracefs::TracefsProbes)
//! removes them on drop, but a SIGKILL, an abort or a panic with
//! `panic=abort` drops nothing.
//!
//! [`Guardian::start`] forks a detached process holding one end of a
//! socket pair whose other end only this process holds (close-on-exec, so
//! a recorded command does not inherit it). Each session tells it the
//! tracefs group it is about to define events in. When its end reaches
//! end-of-file (this process exited, normally or not) the guardian
//! removes every kprobe and uprobe of those groups, waiting for the kernel
//! to release the perf events that still used them, and exits.
//!
//! The guardian ignores SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGPIPE (a
//! Ctrl-C reaches the whole process group: it must outlive the recorder),
//! runs in its own session, holds none of this process's descriptors (its
//! stdio is `/dev/null`, so a `| head` reader sees end-of-file when this
//! process dies), and is not a child of this process. Its command name
//! (comm) is `kprobe-perf-gd`.
//!
//! Without a guardian (an embedder that did not start one), definitions
//! are removed on drop, and those of dead processes at the next start of
//! any session (`remove_stale_if_mounted`)
//! or by `kprobe-perf cleanup`.

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::Duration;

use crate::attach::sys;
use crate::attach::tracefs::{self, Tracefs, GROUPS_TO_GUARD, GROUP_PREFIX};

/// How long the guardian keeps retrying removals the kernel refuses
/// (EBUSY until the dead process's perf events are released).
const PATIENCE: Duration = Duration::from_secs(10);

/// Longest group name accepted from the socket.
const MAX_GROUP: usize = 64;

/// Why the guardian could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardianError {
    /// It was started already in this process.
    #[error("the tracefs guardian is already running for this process")]
    AlreadyRunning,
    /// Creating the socket or forking failed (or threads already run).
    #[error("starting the tracefs guardian: {0} (call Guardian::start first thing in main, before any thread is spawned)")]
    Start(#[from] std::io::Error),
}

/// The guardian of this process's tracefs definitions (see the module
/// documentation).
#[derive(Debug)]
pub struct Guardian;

impl Guardian {
    /// Starts the guardian. Call before spawning threads (first thing in
    /// `main`): the process is forked, which is only sound while this
    /// process has a single thread; with more it fails and forks nothing.
    /// Sessions opened afterwards are guarded; on failure they fall back
    /// to removal on drop and at the next start.
    pub fn start() -> Result<(), GuardianError> {
        if GROUPS_TO_GUARD.get().is_some() {
            return Err(GuardianError::AlreadyRunning);
        }
        let (ours, theirs) = sys::socket_pair_cloexec()?;
        sys::spawn_detached(c"kprobe-perf-gd", theirs, guard)?;
        GROUPS_TO_GUARD
            .set(Mutex::new(ours))
            .map_err(|_| GuardianError::AlreadyRunning)
    }

    /// True when a guardian was started in this process.
    pub fn is_running() -> bool {
        GROUPS_TO_GUARD.get().is_some()
    }
}

/// The groups named in what the guardian read: one per complete line
/// (a line the recorder died while writing could name a shorter pid's
/// group), ours only.
fn groups_in(bytes: &[u8]) -> HashSet<String> {
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(&[][..], |end| &bytes[..end]);
    complete
        .split(|&b| b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .filter(|g| {
            g.len() <= MAX_GROUP
                && g.starts_with(GROUP_PREFIX)
                && tracefs::pid_of_group(g).is_some()
                && g.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .map(str::to_string)
        .collect()
}

/// The guardian's life: collect group names until end-of-file, then
/// remove every definition of those groups.
fn guard(fd: OwnedFd) {
    let mut socket = std::fs::File::from(fd);
    let mut read = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                read.extend_from_slice(&buf[..n]);
                // Bounded: a line per session; keep at most 1 MiB.
                if read.len() > 1 << 20 {
                    let groups = groups_in(&read);
                    // The unfinished last line stays to be completed.
                    let tail = read
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(read.len(), |end| end + 1);
                    let mut kept: Vec<u8> = groups
                        .into_iter()
                        .flat_map(|g| (g + "\n").into_bytes())
                        .collect();
                    kept.extend_from_slice(&read[tail..]);
                    read = kept;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let groups = groups_in(&read);
    if groups.is_empty() {
        return;
    }
    if let Ok(fs) = Tracefs::find() {
        tracefs::remove_groups(&fs, &groups, PATIENCE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_once_threads_run() {
        // The test harness runs this on a thread of its own.
        let e = Guardian::start().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("starting the tracefs guardian: this process already has "),
            "{e}"
        );
        assert!(!Guardian::is_running());
    }

    #[test]
    fn only_our_groups_are_read() {
        let g = groups_in(
            b"kprobe_perf_12_0\nkprobe_perf_12_1\nkprobes\nkprobe_perf_12_0\nkprobe_perf_1/x\nkprobe_perf_9\nkprobe_perf_1",
        );
        // The unfinished last line (`kprobe_perf_1`, perhaps the start of
        // `kprobe_perf_1234_0`) is not taken for pid 1's group.
        let mut g: Vec<_> = g.into_iter().collect();
        g.sort();
        assert_eq!(g, ["kprobe_perf_12_0", "kprobe_perf_12_1", "kprobe_perf_9"]);
    }
}
