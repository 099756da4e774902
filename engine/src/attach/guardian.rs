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
//! a recorded command does not inherit it). A process that already has
//! threads cannot fork soundly: it starts itself again (`/proc/self/exe`,
//! same arguments, a variable in the environment), detached, and that
//! copy's own call of [`Guardian::start`] makes it the guardian. Each session tells it the
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

/// The guardian's command name (comm).
const GUARDIAN_NAME: &std::ffi::CStr = c"kprobe-perf-gd";

/// What an exec'd guardian sends first, once running.
const HELLO: &[u8] = b"guarding\n";

/// How long an exec'd guardian has to say [`HELLO`].
const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// True when the exec'd guardian said [`HELLO`] on `socket` in time.
fn hello_from(socket: &OwnedFd) -> Result<bool, GuardianError> {
    let mut got = Vec::new();
    let end = std::time::Instant::now() + HELLO_WITHIN;
    let mut file = std::fs::File::from(socket.try_clone()?);
    while got.len() < HELLO.len() {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || !sys::readable_within(socket, left)? {
            return Ok(false);
        }
        let mut buf = [0u8; 16];
        let n = file.read(&mut buf[..HELLO.len() - got.len()])?;
        if n == 0 {
            return Ok(false);
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got == HELLO)
}

/// Longest group name accepted from the socket.
const MAX_GROUP: usize = 64;

/// Why the guardian could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardianError {
    /// It was started already in this process.
    #[error("the tracefs guardian is already running for this process")]
    AlreadyRunning,
    /// Creating the socket, forking or starting the program again failed.
    #[error("starting the tracefs guardian: {0}")]
    Start(#[from] std::io::Error),
    /// The program started again (this process has threads) did not
    /// become the guardian in time.
    #[error("starting the tracefs guardian: this process has threads, so it was started again to guard, and that copy did not report within 5 s (call Guardian::start first thing in main, before anything else with effects, so that the copy reaches it)")]
    NoHello,
}

/// The guardian of this process's tracefs definitions (see the module
/// documentation).
#[derive(Debug)]
pub struct Guardian;

impl Guardian {
    /// Starts the guardian. Call it first thing in `main`, before
    /// anything with effects.
    ///
    /// In a process with one thread, the guardian is a fork of it. Once
    /// threads run (`#[tokio::main]`, a host application), forking is not
    /// sound: this program (`/proc/self/exe`) is then started again,
    /// detached, with the same arguments and a variable in its
    /// environment, and its own call of `start` makes it the guardian (it
    /// never returns there). Whatever `main` does before calling `start`
    /// is done in that copy too: keep it free of effects. If the copy does
    /// not report within 5 s, it is killed and an error returned.
    ///
    /// Sessions opened afterwards are guarded; on failure they fall back
    /// to removal on drop and at the next start.
    pub fn start() -> Result<(), GuardianError> {
        if let Some(fd) = sys::detached_fd() {
            // The exec'd copy: named as the forked guardian is, it
            // reports, then guards until the recorder's end.
            sys::set_thread_name(GUARDIAN_NAME);
            let _ = sys::send_all(&fd, HELLO);
            guard(fd);
            std::process::exit(0);
        }
        if GROUPS_TO_GUARD.get().is_some() {
            return Err(GuardianError::AlreadyRunning);
        }
        let (ours, theirs) = sys::socket_pair_cloexec()?;
        if sys::thread_count()? == 1 {
            sys::spawn_detached(GUARDIAN_NAME, theirs, guard)?;
        } else {
            let pid = sys::spawn_detached_exec(GUARDIAN_NAME, theirs)?;
            if !hello_from(&ours)? {
                sys::kill_process(pid);
                return Err(GuardianError::NoHello);
            }
        }
        GROUPS_TO_GUARD
            .set(Mutex::new(ours))
            .map_err(|_| GuardianError::AlreadyRunning)
    }

    #[cfg(test)]
    /// True when a guardian was started in this process.
    pub(crate) fn is_running() -> bool {
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
    fn only_an_exec_d_copy_takes_descriptor_3() {
        // No variable here (the exec'd route is run by
        // tests/guardian.rs with a program of its own: this test binary
        // would run its tests again).
        assert!(sys::detached_fd().is_none());
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
