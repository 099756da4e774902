//! `record -o FILE`: the perf.data file written beside the live output.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kprobe_perf_engine::cli::records::RingRecord;
use kprobe_perf_engine::perfdata::{self, FileSink};
use kprobe_perf_engine::AddressSet;
use kprobe_perf_engine::{Event, EventSink, KernelSymbols, Session};

mod create;
pub(crate) use create::NewFile;

/// Refuses, before anything is attached, a `-o` path the file could never
/// be written at (a directory, device, FIFO or socket; a directory that
/// does not exist). Changes nothing.
pub(crate) fn check(path: &Path) -> Result<()> {
    create::check(path).map_err(anyhow::Error::msg)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Err(e) = std::fs::metadata(dir) {
        anyhow::bail!(
            "-o {}: cannot use the directory {}: {e}; {}",
            path.display(),
            dir.display(),
            create::advice(path, &e)
        );
    }
    Ok(())
}

/// Creates the `-o` file just before the recording starts: an existing `path`
/// is renamed to `path.old` (or with `force` removed; a symbolic link is
/// never followed), then `path` is made anew, mode 0600. Says on stderr
/// what was done with an existing file.
pub(crate) fn create(path: &Path, force: bool) -> Result<NewFile> {
    let (file, note) = create::create(path, force).map_err(anyhow::Error::msg)?;
    if let Some(note) = note {
        say!("kprobe-perf: {note}");
    }
    Ok(file)
}

/// An error of the file code shared with -o, told of `flag`'s file.
pub(crate) fn named(flag: &str, e: anyhow::Error) -> anyhow::Error {
    let text = format!("{e:#}");
    match text.strip_prefix("-o ") {
        Some(rest) => anyhow::anyhow!("{flag} {rest}"),
        None => e.context(format!("{flag}: cannot write its file")),
    }
}

/// Creates `path` (given with `flag`) as -o creates its file and writes
/// `bytes` into it.
pub(crate) fn write_new(flag: &str, path: &Path, force: bool, bytes: &[u8]) -> Result<()> {
    let f = create(path, force).map_err(|e| named(flag, e))?;
    let Some(mut file) = f.into_file() else {
        anyhow::bail!("{}: the file was already handed over", path.display());
    };
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .with_context(|| format!("writing {}", path.display()))
}

/// One line for a failed write of the perf.data file at `path`: the
/// writer's own text (which already holds the OS error once) and what to
/// do.
fn write_error(path: &Path, what: &dyn std::fmt::Display, e: Option<&io::Error>) -> anyhow::Error {
    let advice = match e {
        Some(e) => create::advice(path, e),
        None => "choose another path".into(),
    };
    anyhow::anyhow!("-o {}: {what}; {advice}", path.display())
}

/// The OS error under a perf.data writer error, if any.
fn io_source(e: &perfdata::PerfDataError) -> Option<&io::Error> {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<io::Error>())
}

/// Note keys of the closing summaries, which `script` prints again.
pub(crate) const NOTE_JSON_SUMMARY: &str = "json_summary";
/// The stderr summary lines, joined by newlines.
pub(crate) const NOTE_SUMMARY: &str = "summary";

/// The output file's write buffer: records of at least this many bytes
/// in one piece bypass it.
const BUFFER: usize = 64 << 10;

/// A perf.data file being written (the engine's [`FileSink`]), named by
/// its path in errors.
pub(crate) struct FileOutput {
    path: PathBuf,
    sink: FileSink<BufWriter<File>>,
    /// Time spent writing records, when timed (`--drain-log`).
    write_time: Option<std::time::Duration>,
}

/// The kernel addresses the events' text or JSON lines symbolize, whose
/// symbols a file stores: each event's probe and return addresses (a
/// hash of each would cost more than the rest of a quiet `-o`
/// recording's work per event, so repeats are passed over), its kernel
/// frames and its `:symbol` arguments.
#[derive(Default)]
pub(crate) struct Addresses(AddressSet);

impl Addresses {
    /// Starts with `set` (e.g. the return trampolines).
    pub(crate) fn new(set: HashSet<u64>) -> Addresses {
        Addresses(AddressSet::new(set))
    }

    /// Notes the addresses of `e`.
    pub(crate) fn note(&mut self, e: &Event) {
        perfdata::note_addresses(&mut self.0, e);
    }

    /// Every address noted so far (for a file switched from).
    pub(crate) fn to_set(&self) -> HashSet<u64> {
        self.0.clone().into_set()
    }

    /// Every address noted.
    pub(crate) fn into_set(self) -> HashSet<u64> {
        self.0.into_set()
    }
}

impl FileOutput {
    /// Starts writing `file` (made by [`create`]) for `session`, whose
    /// records each drain then gives it (as an [`EventSink`], or through
    /// another sink that forwards them). With `compression`, a zstd
    /// level, the records go out compressed as `perf record -z` writes
    /// them.
    pub(crate) fn start(
        file: NewFile,
        session: &mut Session,
        symbols: &KernelSymbols,
        compression: Option<u32>,
    ) -> Result<FileOutput> {
        let path = file.path().to_path_buf();
        let Some(file) = file.into_file() else {
            anyhow::bail!("-o {}: the file was already handed over", path.display());
        };
        // The hidden entry probes' samples wait beside the output.
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // A ring's records (at least a quarter of the ring at full rate)
        // pass the buffer and go to the file in one write: the buffer
        // gathers only the small records written one by one.
        let sink = FileSink::start(
            BufWriter::with_capacity(BUFFER, file),
            session,
            symbols,
            Some(dir),
        )
        .and_then(|mut s| match compression {
            Some(level) => s.compress(level).map(|()| s),
            None => Ok(s),
        })
        // With nothing printed, the rings' bytes go to the file as they
        // are and their samples are counted when it is read back at the
        // end, as perf record does (not when compressed: the drains
        // count them).
        .and_then(|s| s.counting_later(session))
        .map_err(|e| write_error(&path, &e, io_source(&e)))?;
        Ok(FileOutput {
            path,
            sink,
            write_time: None,
        })
    }

    /// Times the writes of records from now on (for `--drain-log`).
    pub(crate) fn time_writes(&mut self) {
        self.write_time.get_or_insert_default();
    }

    /// The time spent writing records since the last call (zero when
    /// not timed).
    pub(crate) fn take_write_time(&mut self) -> std::time::Duration {
        self.write_time
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// `f` on the sink, timed when writes are timed.
    fn timed<T>(&mut self, f: impl FnOnce(&mut FileSink<BufWriter<File>>) -> T) -> T {
        match self.write_time {
            None => f(&mut self.sink),
            Some(spent) => {
                let start = std::time::Instant::now();
                let r = f(&mut self.sink);
                self.write_time = Some(spent + start.elapsed());
                r
            }
        }
    }

    /// Counts the samples of the ring bytes the file took without the
    /// session counting them (`-q -o`), reading them back: before the
    /// summary.
    pub(crate) fn count_taken(&mut self, session: &mut Session) -> Result<()> {
        self.sink.count_taken(session).with_context(|| {
            format!(
                "{}: counting the recorded samples, read back from the file",
                self.path.display()
            )
        })
    }

    /// A failed write of records, with the file's path and advice.
    fn named(&self, e: kprobe_perf_engine::Error) -> anyhow::Error {
        let e = match e.errno() {
            Some(n) => io::Error::from_raw_os_error(n),
            None => io::Error::other(e.to_string()),
        };
        let advice = create::advice(&self.path, &e);
        anyhow::Error::new(io::Error::new(
            e.kind(),
            format!("{}: {e}; {advice}", self.path.display()),
        ))
        .context("writing records to the output file")
    }

    /// Writes the probes, the symbols of `addresses`, the summaries and
    /// the host description, and closes the file.
    pub(crate) fn finish(
        self,
        session: &Session,
        symbols: &KernelSymbols,
        addresses: HashSet<u64>,
        json_summary: &str,
        summary: &[String],
    ) -> Result<()> {
        let notes = vec![
            (NOTE_JSON_SUMMARY.into(), json_summary.into()),
            (NOTE_SUMMARY.into(), summary.join("\n")),
        ];
        self.finish_with_notes(session, symbols, addresses, notes)
    }

    /// As [`FileOutput::finish`], with the notes given (a command's own
    /// keys beside the summaries).
    pub(crate) fn finish_with_notes(
        mut self,
        session: &Session,
        symbols: &KernelSymbols,
        addresses: HashSet<u64>,
        notes: Vec<(String, String)>,
    ) -> Result<()> {
        self.sink.add_addresses(addresses);
        self.sink
            .finish(session, symbols, notes)
            .map_err(|e| write_error(&self.path, &e, io_source(&e)))?;
        Ok(())
    }
}

/// Every raw record goes to the file; events are not its business.
impl EventSink for FileOutput {
    type Error = anyhow::Error;

    fn event(&mut self, _: &Event) -> Result<ControlFlow<()>> {
        Ok(ControlFlow::Continue(()))
    }

    fn record(&mut self, record: RingRecord<'_>) -> Result<ControlFlow<()>> {
        match self.timed(|s| s.record(record)) {
            Ok(flow) => Ok(flow),
            Err(e) => Err(self.named(e)),
        }
    }

    fn round_end(&mut self) -> Result<ControlFlow<()>> {
        match self.timed(|s| s.round_end()) {
            Ok(flow) => Ok(flow),
            Err(e) => Err(self.named(e)),
        }
    }

    fn takes_ring_bytes(&self) -> bool {
        self.sink.takes_ring_bytes()
    }

    fn ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<ControlFlow<()>> {
        match self.timed(|s| s.ring_bytes(bytes)) {
            Ok(flow) => Ok(flow),
            Err(e) => Err(self.named(e)),
        }
    }

    fn counts_later(&self) -> bool {
        self.sink.counts_later()
    }

    fn taken_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<ControlFlow<()>> {
        match self.timed(|s| s.taken_bytes(bytes)) {
            Ok(flow) => Ok(flow),
            Err(e) => Err(self.named(e)),
        }
    }
}
