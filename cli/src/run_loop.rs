//! The run loop `record`, `latency` and `stat` share: Ctrl-C and the
//! other stop signals, the `-d` deadline, the `-I` interval timer, and
//! the end of the recorded command or of every `-p` process. Each command
//! does its own work between checks; this module only says when the run
//! ends, and with which exit status.

use std::process::{ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kprobe_perf_engine::{CountingSession, Error, EventProbeSession, Session};

/// What the loop watches of a session: its command and its processes.
pub(crate) trait Watched {
    /// The command's exit status once it has ended (not blocking).
    fn command_status(&mut self) -> Result<Option<ExitStatus>, Error>;
    /// As `command_status`, waiting up to `grace`.
    fn wait_command(&mut self, grace: Duration) -> Result<Option<ExitStatus>, Error>;
    /// Every process of `-p` has exited.
    fn target_exited(&self) -> bool;
}

impl Watched for Session {
    fn command_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        Session::command_status(self)
    }
    fn wait_command(&mut self, grace: Duration) -> Result<Option<ExitStatus>, Error> {
        Session::wait_command(self, grace)
    }
    fn target_exited(&self) -> bool {
        Session::target_exited(self)
    }
}

impl Watched for CountingSession {
    fn command_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        CountingSession::command_status(self)
    }
    fn wait_command(&mut self, grace: Duration) -> Result<Option<ExitStatus>, Error> {
        CountingSession::wait_command(self, grace)
    }
    fn target_exited(&self) -> bool {
        CountingSession::target_exited(self)
    }
}

impl Watched for EventProbeSession {
    fn command_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        EventProbeSession::command_status(self)
    }
    fn wait_command(&mut self, grace: Duration) -> Result<Option<ExitStatus>, Error> {
        EventProbeSession::wait_command(self, grace)
    }
    fn target_exited(&self) -> bool {
        false
    }
}

/// Signals, deadline, interval and the command's end for one run.
pub(crate) struct RunLoop {
    stop: Arc<AtomicBool>,
    start: Instant,
    duration: Option<Duration>,
    interval: Option<Duration>,
    next_tick: Option<Instant>,
    command_status: Option<ExitStatus>,
}

impl RunLoop {
    /// Installs the handlers of SIGINT, SIGTERM and SIGHUP (each ends the
    /// run; the recorded command gets its own). `duration` (seconds, `-d`)
    /// and `interval` (`-I`) count from [`RunLoop::armed`].
    pub(crate) fn new(duration: Option<f64>, interval: Option<Duration>) -> Result<RunLoop> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register(sig, Arc::clone(&stop))
                .context("installing a signal handler")?;
        }
        let start = Instant::now();
        Ok(RunLoop {
            stop,
            start,
            duration: duration.map(|d| Duration::from_secs_f64(d.max(0.0))),
            interval,
            next_tick: interval.map(|i| start + i),
            command_status: None,
        })
    }

    /// The probes are armed: the deadline and the intervals count from now.
    pub(crate) fn armed(&mut self) {
        self.start = Instant::now();
        self.next_tick = self.interval.map(|i| self.start + i);
    }

    /// Time since [`RunLoop::armed`].
    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn deadline(&self) -> Option<Instant> {
        self.duration.map(|d| self.start + d)
    }

    /// How long the next wait may last: `nap` at most, ending at the
    /// deadline or the next interval if one comes first.
    pub(crate) fn timeout(&self, nap: Duration) -> Duration {
        let now = Instant::now();
        [self.deadline(), self.next_tick]
            .into_iter()
            .flatten()
            .fold(nap, |t, at| t.min(at.saturating_duration_since(now)))
    }

    /// True (once per interval) when an interval of `-I` has ended.
    pub(crate) fn tick(&mut self) -> bool {
        match (self.next_tick.as_mut(), self.interval) {
            (Some(t), Some(step)) if Instant::now() >= *t => {
                *t += step;
                true
            }
            _ => false,
        }
    }

    /// True when the run is over: a stop signal, the deadline, the
    /// command's exit (its status kept), or every `-p` process gone.
    pub(crate) fn over(&mut self, session: &mut impl Watched) -> Result<bool> {
        if self.stopped() || self.deadline().is_some_and(|d| Instant::now() >= d) {
            return Ok(true);
        }
        if let Some(status) = session.command_status()? {
            self.command_status = Some(status);
            return Ok(true);
        }
        Ok(session.target_exited())
    }

    /// A stop signal came.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The exit code of the run: the command's status, passed on (waited
    /// for briefly when a signal stopped the run: it reached the command
    /// too), or success.
    pub(crate) fn exit(self, session: &mut impl Watched) -> Result<ExitCode> {
        let interrupted = self.stopped();
        crate::command_exit(self.command_status, interrupted, |grace| {
            session.wait_command(grace)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_end_at_the_deadline_or_the_next_interval() {
        let mut l = RunLoop::new(Some(0.05), Some(Duration::from_millis(20))).unwrap();
        l.armed();
        let t = l.timeout(Duration::from_millis(100));
        assert!(t <= Duration::from_millis(20), "{t:?}");
        assert!(!l.tick());
        std::thread::sleep(Duration::from_millis(25));
        assert!(l.tick());
        assert!(!l.tick(), "one tick per interval");
        let t = l.timeout(Duration::from_millis(100));
        assert!(t <= Duration::from_millis(20), "{t:?}");
    }
}
