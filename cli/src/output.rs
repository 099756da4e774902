//! `record -o FILE`: the perf.data file written beside the live output.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kprobe_perf_engine::perfdata::{self, symbol_subset, Metadata, StoredProbe, Writer};
use kprobe_perf_engine::plan::Backend;
use kprobe_perf_engine::records::RecordSink;
use kprobe_perf_engine::records::RingRecord;
use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::tracefs;
use kprobe_perf_engine::AddressSet;
use kprobe_perf_engine::{Arch, Event, EventSink, KernelSymbols, Session, Value};

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

/// A perf.data file being written.
pub(crate) struct FileOutput {
    path: PathBuf,
    /// perf's tracing data, when some probes are tracefs events.
    tracing_data: Option<Vec<u8>>,
    writer: Writer<BufWriter<File>>,
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
        self.0.note_site(e.probe_addr, e.ret_addr);
        self.0
            .extend(e.callchain.iter().filter(|f| !f.user).map(|f| f.address));
        for v in &e.args {
            if let Value::Int {
                raw,
                ty: BaseType::Symbol,
            } = v
            {
                self.0.insert(*raw);
            }
        }
    }

    /// Every address noted.
    pub(crate) fn into_set(self) -> HashSet<u64> {
        self.0.into_set()
    }
}

impl FileOutput {
    /// Starts writing `file` (made by [`create`]) for `session`, whose
    /// records each drain then gives it (as an [`EventSink`], or through
    /// another sink that forwards them).
    pub(crate) fn start(
        file: NewFile,
        session: &Session,
        symbols: &KernelSymbols,
    ) -> Result<FileOutput> {
        let path = file.path().to_path_buf();
        let tracing_data = tracing_data(session)?;
        let Some(file) = file.into_file() else {
            anyhow::bail!("-o {}: the file was already handed over", path.display());
        };
        let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, file))
            .map_err(|e| write_error(&path, &e, io_source(&e)))?;
        // perf resolves kernel samples through the kernel's MMAP record.
        if !symbols.addresses_hidden() {
            if let Some(text) = symbols.lookup("_text").first() {
                writer
                    .kernel_mmap(text.address)
                    .and_then(|()| writer.module_mmaps().map(drop))
                    .map_err(|e| {
                        write_error(
                            &path,
                            &format!("writing the kernel's MMAP records: {e}"),
                            Some(&e),
                        )
                    })?;
            }
        }
        // The probes the session opened for itself (the entry half of a
        // joined return probe) stay out of perf's sight: their samples
        // wait in an unnamed file beside the output until the end.
        let d = session.decoder();
        let shown = d.shown_plans().len();
        let hidden: Vec<u64> = d.ids().into_iter().skip(shown).flatten().collect();
        if !hidden.is_empty() {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let spill = tempfile::tempfile_in(dir).map_err(|e| {
                write_error(
                    &path,
                    &format!(
                        "creating an unnamed file in {} for the hidden entry probes' samples: {e}",
                        dir.display()
                    ),
                    Some(&e),
                )
            })?;
            writer.hide(hidden, spill);
        }
        let mut out = FileOutput {
            path,
            tracing_data,
            writer,
        };
        session.user_mmap_records(&mut out)?;
        Ok(out)
    }

    /// A failed write of records, with the file's path and advice.
    fn named(&self, e: io::Error) -> anyhow::Error {
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
        let d = session.decoder();
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let count = |cpus: Result<Vec<u32>, kprobe_perf_engine::AttachError>| {
            cpus.map_or(0, |c| u32::try_from(c.len()).unwrap_or(u32::MAX))
        };
        let meta = Metadata {
            arch: Arch::host().unwrap_or(Arch::X86_64),
            probes: d
                .plans()
                .iter()
                .zip(d.field_offsets())
                .map(|(p, o)| StoredProbe::from_plan(p, o))
                .collect(),
            attrs: d.attrs().to_vec(),
            ids: d.ids(),
            hidden: d.plans().len() - d.shown_plans().len(),
            symbols: symbol_subset(symbols, addresses),
            hostname: read("/proc/sys/kernel/hostname"),
            osrelease: read("/proc/sys/kernel/osrelease"),
            nr_cpus: (
                count(kprobe_perf_engine::cpus::possible_cpus()),
                count(kprobe_perf_engine::cpus::online_cpus()),
            ),
            cmdline: std::env::args().collect(),
            notes: vec![
                (NOTE_JSON_SUMMARY.into(), json_summary.into()),
                (NOTE_SUMMARY.into(), summary.join("\n")),
            ],
            tracing_data: self.tracing_data,
        };
        self.writer
            .finish(&meta)
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
        match self.writer.record(record) {
            Ok(()) => Ok(ControlFlow::Continue(())),
            Err(e) => Err(self.named(e)),
        }
    }

    fn round_end(&mut self) -> Result<ControlFlow<()>> {
        match self.writer.round_end() {
            Ok(()) => Ok(ControlFlow::Continue(())),
            Err(e) => Err(self.named(e)),
        }
    }
}

/// The event formats perf needs to read the samples of tracefs-defined
/// probes (tracepoint events), read while the session's events exist.
fn tracing_data(session: &Session) -> Result<Option<Vec<u8>>> {
    let Some(group) = session.tracefs_group() else {
        return Ok(None);
    };
    let fs = tracefs::Tracefs::find()?;
    // One large read first: header_page and header_event answer only the
    // first read() call (a later one at a nonzero offset gets nothing), so
    // read_to_string's small first probe would truncate them.
    let read = |rel: &str| -> Result<String> {
        let path = fs.root().join(rel);
        let mut f = File::open(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut buf = vec![0u8; 1 << 16];
        let mut len = 0;
        loop {
            if len == buf.len() {
                buf.resize(len * 2, 0);
            }
            let n = std::io::Read::read(&mut f, &mut buf[len..])
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            len += n;
        }
        buf.truncate(len);
        String::from_utf8(buf).with_context(|| format!("{} is not UTF-8", path.display()))
    };
    let events = session
        .plans()
        .iter()
        .filter(|p| p.backend == Backend::Tracefs)
        .map(|p| {
            Ok((
                group.to_string(),
                read(&format!("events/{group}/{}/format", p.event))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let page = u32::try_from(kprobe_perf_engine::os::page_size()).unwrap_or(4096);
    Ok(Some(perfdata::tracing_data(
        page,
        &read("events/header_page")?,
        &read("events/header_event")?,
        &events,
    )))
}
