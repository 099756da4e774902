//! `record -o FILE --switch-output`, `--switch-max-files` and
//! `--max-size`: a recording that runs for days, in files of a bounded
//! size or span, as perf record writes them.
//!
//! At a switch, after a drain (so no event falls between two files), the
//! file is counted, finished with the counts of its own span, and renamed
//! FILE.YYYYMMDDHHMMSSCC, as perf names it (tools/perf/util/time-utils.c,
//! fetch_current_timestamp: strftime "%Y%m%d%H%M%S" of the local time,
//! then the hundredths of the second, "%02u" of tv_usec / 10000;
//! builtin-record.c, record__switch_output, through perf_data__switch);
//! then FILE is made anew for the next span. At the end the last file is
//! renamed too, as perf renames it at exit.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use kprobe_perf_engine::{KernelSymbols, Session, Summary};

use crate::output::{self, FileOutput};

/// The flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct RotationArgs {
    /// With -o: switch to a new file on SIGUSR2 (`--switch-output` or
    /// `--switch-output=signal`), each time the file holds SIZE
    /// (`--switch-output=100M`; units B, K, M, G) or each TIME
    /// (`--switch-output=30s`; units s, m, h, d), as perf record does.
    /// The file done is renamed FILE.YYYYMMDDHHMMSSCC (local time, CC the
    /// hundredths of a second: perf's names) and FILE made anew; at the
    /// end the last one is renamed too. The switch comes after a drain of
    /// the rings: every event is in exactly one file. Each file stands
    /// alone (its header, attrs, probes, thread names, symbols, and the
    /// counts of its own span in its summary), for `perf script -i` and
    /// `kprobe-perf script -i`. stderr names each file done.
    /// Example: `record -a -q -o probes.data --switch-output=1G -e
    /// 'p:do_sys_openat2'`.
    #[arg(
        long,
        value_name = "signal|SIZE|TIME",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "signal",
        requires = "output",
        value_parser = parse_switch
    )]
    pub(crate) switch_output: Option<Switch>,
    /// With --switch-output: keep only the newest N files switched from
    /// (the oldest is removed when another is done), as perf's
    /// --switch-max-files. Example: `--switch-output=100M
    /// --switch-max-files 10` keeps about 1 GB.
    #[arg(
        long,
        value_name = "N",
        requires = "switch_output",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(crate) switch_max_files: Option<u32>,
    /// With -o: end the recording once the file holds SIZE (units B, K,
    /// M, G; with --switch-output, the file being written), saying so on
    /// stderr, as perf's --max-size. The file is finished as at any end.
    /// Example: `--max-size 2G`.
    #[arg(long, value_name = "SIZE", requires = "output", value_parser = parse_size)]
    pub(crate) max_size: Option<u64>,
}

/// When `--switch-output` switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    /// On SIGUSR2.
    Signal,
    /// When the file holds this many bytes.
    Size(u64),
    /// After this long.
    Time(Duration),
}

/// `signal`, SIZE or TIME, as perf reads --switch-output (its units are
/// case-sensitive: `m` minutes, `M` MiB).
fn parse_switch(s: &str) -> Result<Switch, String> {
    if s == "signal" {
        return Ok(Switch::Signal);
    }
    if let Ok(n) = parse_size(s) {
        return Ok(Switch::Size(n));
    }
    parse_time(s).map(Switch::Time).map_err(|_| {
        format!(
            "{s:?} is neither `signal`, a size (a number then B, K, M or G: 100M) nor a \
             time (a number then s, m, h or d: 30s)"
        )
    })
}

/// A size: a whole number then B, K, M or G (powers of 1024), more than 0.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a size: a number then B, K, M or G (e.g. 100M, 1G)");
    let (n, unit) = split_unit(s).ok_or_else(bad)?;
    let shift = match unit {
        'B' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).filter(|&v| v > 0).ok_or_else(bad)
}

/// A time: a whole number then s, m, h or d, more than 0.
fn parse_time(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a time: a number then s, m, h or d (e.g. 30s, 10m)");
    let (n, unit) = split_unit(s).ok_or_else(bad)?;
    let secs = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => return Err(bad()),
    };
    n.checked_mul(secs)
        .filter(|&v| v > 0)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

/// `123X` as (123, 'X').
fn split_unit(s: &str) -> Option<(u64, char)> {
    let unit = s.chars().last()?;
    let n = s.get(..s.len() - unit.len_utf8())?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((n.parse().ok()?, unit))
}

/// perf's name of a file switched from at `now`: `path.YYYYMMDDHHMMSSCC`
/// in local time.
pub(crate) fn switched_name(path: &Path, now: SystemTime) -> PathBuf {
    let since = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    let (y, mo, d, h, mi, s) =
        kprobe_perf_engine::cli::os::local_date_time(secs).unwrap_or((1970, 1, 1, 0, 0, 0));
    let cc = since.subsec_micros() / 10_000;
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}{cc:02}"));
    PathBuf::from(name)
}

/// What a recording with these flags does after each drain.
pub(crate) enum Due {
    /// Nothing.
    Nothing,
    /// Switch to a new file.
    Switch,
    /// End the recording: the file reached --max-size.
    Stop,
}

/// The switching of one recording's `-o` file.
pub(crate) struct Rotation<'a> {
    path: PathBuf,
    args: RotationArgs,
    symbols: &'a KernelSymbols,
    /// `-z`'s level, for every file switched to.
    compression: Option<u32>,
    /// Set by SIGUSR2 (`--switch-output` on a signal).
    signal: Arc<AtomicBool>,
    /// When the file being written was started.
    started: Instant,
    /// The files switched from, oldest first (with --switch-max-files).
    kept: VecDeque<PathBuf>,
    /// The session's summary at the last switch: a file's counts are
    /// those after it.
    before: Option<Summary>,
}

impl<'a> Rotation<'a> {
    /// The switching of `path` as `args` ask; `None` when they ask
    /// nothing. Installs the SIGUSR2 handler of `--switch-output=signal`.
    /// Files switched to are compressed as the first (`compression`).
    pub(crate) fn new(
        path: Option<&Path>,
        args: &RotationArgs,
        symbols: &'a KernelSymbols,
        compression: Option<u32>,
    ) -> Result<Option<Rotation<'a>>> {
        let Some(path) = path else { return Ok(None) };
        if args.switch_output.is_none() && args.max_size.is_none() {
            return Ok(None);
        }
        let signal = Arc::new(AtomicBool::new(false));
        if args.switch_output == Some(Switch::Signal) {
            signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&signal))
                .context("installing the SIGUSR2 handler of --switch-output")?;
        }
        Ok(Some(Rotation {
            path: path.to_path_buf(),
            args: args.clone(),
            symbols,
            compression,
            signal,
            started: Instant::now(),
            kept: VecDeque::new(),
            before: None,
        }))
    }

    /// What is due after a drain.
    pub(crate) fn due(&self) -> Due {
        let size = || std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if self.args.max_size.is_some_and(|max| size() >= max) {
            return Due::Stop;
        }
        let switch = match self.args.switch_output {
            None => false,
            Some(Switch::Signal) => self.signal.swap(false, Ordering::Relaxed),
            Some(Switch::Size(n)) => size() >= n,
            Some(Switch::Time(t)) => self.started.elapsed() >= t,
        };
        if switch {
            Due::Switch
        } else {
            Due::Nothing
        }
    }

    /// Says that the file reached --max-size and the recording ends.
    pub(crate) fn say_stopping(&self) {
        let max = self.args.max_size.unwrap_or(0);
        say!(
            "kprobe-perf: {} reached --max-size ({} KiB); stopping the recording",
            self.path.display(),
            max >> 10
        );
    }

    /// Finishes `file` (counted, with the counts of its span and the
    /// symbols of `addresses`), renames it as perf does, and starts
    /// FILE anew for `session`.
    pub(crate) fn switch(
        &mut self,
        file: FileOutput,
        session: &mut Session,
        addresses: HashSet<u64>,
    ) -> Result<FileOutput> {
        self.finish(file, session, addresses)?;
        let new = output::create(&self.path, false)?;
        let file = FileOutput::start(new, session, self.symbols, self.compression)?;
        self.started = Instant::now();
        Ok(file)
    }

    /// Counts and finishes `file` with the counts of its span, then
    /// renames it (also the last file, at the end).
    pub(crate) fn finish(
        &mut self,
        mut file: FileOutput,
        session: &mut Session,
        addresses: HashSet<u64>,
    ) -> Result<()> {
        if let Err(e) = file.count_taken(session) {
            say!("kprobe-perf: warning: {e:#}; the file's counts miss the samples not read back");
        }
        let (json, lines, events) = self.span_notes(session);
        file.finish(session, self.symbols, addresses, &json, &lines)?;
        self.rename(events)
    }

    /// The summaries of the span since the last switch (JSON, text), and
    /// its events; the session's summary is the next span's start.
    fn span_notes(&mut self, session: &Session) -> (String, Vec<String>, u64) {
        let now = session.summary();
        let span = match &self.before {
            Some(b) => now.since(b),
            None => now.clone(),
        };
        self.before = Some(now);
        (
            crate::json::summary(&span),
            crate::text::summary_lines(&span, session.plans()),
            span.events,
        )
    }

    /// Renames the finished FILE as perf names a file switched from,
    /// says so, and removes the oldest beyond --switch-max-files.
    fn rename(&mut self, events: u64) -> Result<()> {
        if self.args.switch_output.is_none() {
            return Ok(());
        }
        let mut to = switched_name(&self.path, SystemTime::now());
        // Two switches in one hundredth of a second: perf would overwrite
        // the first file; the second waits for the next name instead.
        while to.exists() {
            std::thread::sleep(Duration::from_millis(10));
            to = switched_name(&self.path, SystemTime::now());
        }
        std::fs::rename(&self.path, &to).with_context(|| {
            format!(
                "--switch-output: renaming {} to {}",
                self.path.display(),
                to.display()
            )
        })?;
        say!("kprobe-perf: wrote {} ({events} events)", to.display());
        self.kept.push_back(to);
        let max = self
            .args
            .switch_max_files
            .map_or(usize::MAX, |n| n as usize);
        while self.kept.len() > max {
            if let Some(old) = self.kept.pop_front() {
                std::fs::remove_file(&old)
                    .with_context(|| format!("--switch-max-files: removing {}", old.display()))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_output_reads_perfs_forms() {
        assert_eq!(parse_switch("signal"), Ok(Switch::Signal));
        assert_eq!(parse_switch("100M"), Ok(Switch::Size(100 << 20)));
        assert_eq!(parse_switch("1G"), Ok(Switch::Size(1 << 30)));
        assert_eq!(parse_switch("64K"), Ok(Switch::Size(64 << 10)));
        assert_eq!(
            parse_switch("30s"),
            Ok(Switch::Time(Duration::from_secs(30)))
        );
        assert_eq!(
            parse_switch("10m"),
            Ok(Switch::Time(Duration::from_secs(600)))
        );
        assert_eq!(
            parse_switch("1h"),
            Ok(Switch::Time(Duration::from_secs(3600)))
        );
        for bad in ["", "M", "100", "0M", "1.5G", "10x", "-1s", "sig"] {
            assert!(parse_switch(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_switched_file_is_named_as_perf_names_it() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let name = switched_name(Path::new("/tmp/p.data"), t);
        let name = name.to_str().unwrap();
        let stamp = name.strip_prefix("/tmp/p.data.").unwrap();
        // YYYYMMDDHHMMSS then the hundredths: 16 digits, as perf's
        // "2015122520103046".
        assert_eq!(stamp.len(), 16, "{stamp}");
        assert!(stamp.bytes().all(|b| b.is_ascii_digit()), "{stamp}");
        assert!(stamp.ends_with("12"), "{stamp}");
        let (y, mo, d, h, mi, s) =
            kprobe_perf_engine::cli::os::local_date_time(1_700_000_000).expect("local time");
        assert_eq!(
            &stamp[..14],
            format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}")
        );
    }
}
