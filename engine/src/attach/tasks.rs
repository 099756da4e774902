//! The tasks a target names ([`Tasks`]): the command a session starts
//! and holds until its probes are armed, the processes it watches; and
//! how they are handed, with their pidfds, to the probes once opened.

use std::os::fd::AsRawFd;

use mio::unix::SourceFd;
use mio::{Interest, Poll, Token};

use crate::attach::command::HeldCommand;
use crate::attach::error::AttachError;
use crate::attach::open::Opened;
use crate::attach::process::{self, ProcessWatch};
use crate::attach::sys;
use crate::attach::target::{self, RecordTarget};

/// The tasks a target names, before its probes are opened: the held
/// command of a [`RecordTarget::Command`], the processes of a
/// [`RecordTarget::Processes`] (watched from before the first scan of
/// their threads, so an exit is never missed).
#[derive(Default)]
pub(super) struct Tasks {
    command: Option<HeldCommand>,
    pids: Vec<i32>,
    watched: Vec<ProcessWatch>,
}

impl Tasks {
    pub(super) fn of(target: &RecordTarget) -> Result<Tasks, AttachError> {
        match target {
            RecordTarget::Command { argv, .. } => Ok(Tasks {
                command: Some(HeldCommand::spawn(argv)?),
                ..Tasks::default()
            }),
            RecordTarget::Processes(pids) => {
                let pids = process::unique_pids(pids);
                if pids.is_empty() {
                    return Err(AttachError::NoProcesses);
                }
                let watched = pids
                    .iter()
                    .map(|&p| ProcessWatch::new(p))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Tasks {
                    command: None,
                    pids,
                    watched,
                })
            }
            _ => Ok(Tasks::default()),
        }
    }

    pub(super) fn command_pid(&self) -> Option<i32> {
        self.command.as_ref().map(HeldCommand::pid)
    }

    /// The (pid, tid) of each thread of the processes, now (none for
    /// other targets).
    pub(super) fn threads(&self) -> Result<Vec<(i32, i32)>, AttachError> {
        if self.pids.is_empty() {
            return Ok(Vec::new());
        }
        target::threads_of_processes(&self.pids)
    }

    /// Gives `opened` the tasks, each pidfd registered with its poller
    /// so that an exit ends a poll's wait: the command's under
    /// `usize::MAX`, the processes' under the tokens below it.
    pub(super) fn hand_over(self, mut opened: Opened) -> Result<Opened, AttachError> {
        let register = |poll: &Poll, fd: &std::os::fd::OwnedFd, token: usize| {
            poll.registry()
                .register(
                    &mut SourceFd(&fd.as_raw_fd()),
                    Token(token),
                    Interest::READABLE,
                )
                .map_err(|e| AttachError::io("registering a pidfd with the poller", e))
        };
        for (k, w) in self.watched.iter().enumerate() {
            if let Some(fd) = w.pidfd() {
                register(&opened.poll, fd, usize::MAX - k)?;
            }
        }
        opened.watched = self.watched;
        if let Some(command) = self.command {
            // Before Linux 5.3 (no pidfd), its exit is seen at the next
            // poll.
            let pidfd = sys::pidfd_open(command.pid()).ok();
            if let Some(fd) = &pidfd {
                register(&opened.poll, fd, usize::MAX)?;
            }
            opened.command = Some((command, pidfd));
        }
        Ok(opened)
    }
}
