//! `record --drain-log FILE` (hidden, for debugging losses): a line per
//! drain of the live loop, to see when the rings were read, how full they
//! were, and where the time between two reads went.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kprobe_perf_engine::Session;

/// The timeline being written.
pub(crate) struct DrainLog {
    out: BufWriter<File>,
    start: Instant,
}

/// What one pass of the loop saw, besides the session's counters.
pub(crate) struct Pass {
    /// When the wait began.
    pub(crate) wait_from: Instant,
    /// Whether the wait ended on readiness (not on its timeout).
    pub(crate) woke: bool,
    /// Bytes pending per ring when the wait ended.
    pub(crate) pending: Vec<u64>,
    /// When the drain began and ended.
    pub(crate) drain: (Instant, Instant),
    /// Bytes the drain read.
    pub(crate) read: u64,
    /// Time in the file's writes during the drain.
    pub(crate) writing: Duration,
}

impl DrainLog {
    /// Creates `path` and writes the column names.
    pub(crate) fn create(path: &Path) -> Result<DrainLog> {
        let file = File::create(path)
            .with_context(|| format!("--drain-log {}: creating the file", path.display()))?;
        let mut out = BufWriter::new(file);
        writeln!(
            out,
            "# ms since start (wait began), waited ms, woken by a ring (1) or the timer (0), \
             bytes pending per ring when woken, bytes read, drain ms, of which writing the file ms, \
             samples lost so far (- while -q -o leaves the counting to the end)"
        )?;
        Ok(DrainLog {
            out,
            start: Instant::now(),
        })
    }

    /// One line for `pass`, with the losses counted so far in `session`.
    pub(crate) fn line(&mut self, pass: &Pass, session: &Session) -> Result<()> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let pending: Vec<String> = pass.pending.iter().map(u64::to_string).collect();
        writeln!(
            self.out,
            "{:.3}\t{:.3}\t{}\t{}\t{}\t{:.3}\t{:.3}\t{}",
            ms(pass.wait_from - self.start),
            ms(pass.drain.0 - pass.wait_from),
            u8::from(pass.woke),
            pending.join(","),
            pass.read,
            ms(pass.drain.1 - pass.drain.0),
            ms(pass.writing),
            // Not known while the samples wait to be counted at the end.
            if session.counts_pending() {
                "-".to_string()
            } else {
                session.stats().lost.to_string()
            },
        )
        .context("writing the --drain-log file")
    }

    /// Writes what is buffered.
    pub(crate) fn finish(mut self) -> Result<()> {
        self.out.flush().context("writing the --drain-log file")
    }
}
