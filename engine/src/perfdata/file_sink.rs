//! A perf.data file written from a session, as an [`EventSink`]: the
//! session's raw records as they are, the kernel's and modules' MMAP
//! records perf resolves kernel samples through, the processes' mappings,
//! perf's tracing data when probes are tracefs events (without it `perf
//! script` refuses the file), the hidden entry probes' samples apart, and
//! at the end the [`Metadata`] the session describes ([`Metadata::of`]).
//! What `kprobe-perf record -o` writes, for any embedder.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Seek, Write};
use std::ops::ControlFlow;
use std::path::Path;

use kprobe_perf_arch::Arch;
use kprobe_perf_spec::BaseType;
use kprobe_perf_symbols::KernelSymbols;

use super::{symbol_subset, tracing_data, Metadata, PerfDataError, ReadBack, StoredProbe, Writer};
use crate::attach::tracefs;
use crate::decode::records::{RecordSink, RingRecord};
use crate::decode::{AddressSet, Event, Value};
use crate::plan::Backend;
use crate::session::sink::EventSink;
use crate::session::Session;

impl Metadata {
    /// What a file of `session` stores besides its records: its probes,
    /// attrs and ids, the symbols of `addresses` (and of the addresses
    /// the session counted without decoding), this host's name, release,
    /// CPUs and command line, `notes`, and perf's tracing data
    /// (`tracing_data`, see [`FileSink::start`]).
    pub fn of(
        session: &Session,
        symbols: &KernelSymbols,
        addresses: HashSet<u64>,
        notes: Vec<(String, String)>,
        tracing_data: Option<Vec<u8>>,
    ) -> Metadata {
        let d = session.decoder();
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let count = |cpus: Result<Vec<u32>, crate::attach::error::AttachError>| {
            cpus.map_or(0, |c| u32::try_from(c.len()).unwrap_or(u32::MAX))
        };
        let addresses = addresses
            .into_iter()
            .chain(session.counted_addresses().iter().copied());
        Metadata {
            arch: Arch::host().unwrap_or(Arch::X86_64),
            probes: d
                .plans()
                .iter()
                .enumerate()
                .map(|(i, p)| StoredProbe::from_plan(p, d.field_offsets(i)))
                .collect(),
            attrs: (0..d.plans().len()).map(|i| d.attr(i).to_vec()).collect(),
            ids: d.ids(),
            hidden: d.plans().len() - d.shown_plans().len(),
            symbols: symbol_subset(symbols, addresses),
            hostname: read("/proc/sys/kernel/hostname"),
            osrelease: read("/proc/sys/kernel/osrelease"),
            nr_cpus: (
                count(crate::attach::cpus::possible_cpus()),
                count(crate::attach::cpus::online_cpus()),
            ),
            cmdline: std::env::args().collect(),
            notes,
            tracing_data,
            build_ids: build_ids(d.plans()),
        }
    }
}

/// The build IDs of the probes' files: each uprobe's binary, and the
/// running kernel when a probe is in it. A file without one (or that
/// cannot be read any more) is left out, as perf leaves it.
fn build_ids(plans: &[crate::plan::ProbePlan]) -> Vec<super::FileBuildId> {
    use crate::plan::AttachPoint;
    let mut out: Vec<super::FileBuildId> = Vec::new();
    for p in plans {
        let (kernel, path) = match &p.attach {
            AttachPoint::User { path, .. } => (false, path.clone()),
            _ => (true, "[kernel.kallsyms]".to_string()),
        };
        if out.iter().any(|b| b.path == path) {
            continue;
        }
        let id = if kernel {
            kprobe_perf_symbols::image::running_build_id()
        } else {
            kprobe_perf_symbols::elf::UserBinary::open(std::path::Path::new(&path))
                .ok()
                .and_then(|b| b.build_id())
        };
        if let Some(id) = id {
            out.push(super::FileBuildId { kernel, id, path });
        }
    }
    out
}

/// A perf.data file being written from a session (see the module
/// documentation). Give it every drain's records, alone or through a
/// sink of yours that forwards [`EventSink::record`] and
/// [`EventSink::round_end`] (and [`EventSink::event`], whose kernel
/// addresses are then named in the file); then [`FileSink::finish`].
pub struct FileSink<W: Write + Seek> {
    writer: Writer<W>,
    tracing_data: Option<Vec<u8>>,
    addresses: AddressSet,
    /// Drains leave the counting of its ring bytes to the end
    /// ([`FileSink::counting_later`]).
    later: bool,
}

impl<W: Write + Seek> FileSink<W> {
    /// Starts the file in `out` for `session` (opened, before or after
    /// enabling it: the mappings of its processes are written now). The
    /// hidden entry probes' samples (a joined return probe's) wait in an
    /// unnamed file in `spill_dir` (default: the system's temporary
    /// directory) until the end.
    pub fn start(
        out: W,
        session: &Session,
        symbols: &KernelSymbols,
        spill_dir: Option<&Path>,
    ) -> Result<FileSink<W>, PerfDataError> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| PerfDataError::Io {
                what,
                offset: 0,
                source,
            }
        };
        let tracing_data = tracing_data_of(session).map_err(io("reading the events' formats"))?;
        // What a reader needs before the data, should the file never be
        // finished: the probes, and the symbols of their places.
        let first = Metadata::of(
            session,
            symbols,
            probe_addresses(session, symbols),
            Vec::new(),
            None,
        );
        let mut writer = Writer::new_readable(out, &first)?;
        // perf resolves kernel samples through the kernel's MMAP record.
        if !symbols.addresses_hidden() {
            if let Some(text) = symbols.lookup("_text").first() {
                writer
                    .kernel_mmap(text.address)
                    .and_then(|()| writer.module_mmaps().map(drop))
                    .map_err(io("writing the kernel's MMAP records"))?;
            }
        }
        let d = session.decoder();
        let shown = d.shown_plans().len();
        let hidden: Vec<u64> = d.ids().into_iter().skip(shown).flatten().collect();
        if !hidden.is_empty() {
            let dir = spill_dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
            let spill = tempfile::tempfile_in(&dir).map_err(io(&format!(
                "creating an unnamed file in {} for the hidden entry probes' samples",
                dir.display()
            )))?;
            writer.hide(hidden, spill);
        }
        let mut sink = FileSink {
            writer,
            tracing_data,
            addresses: AddressSet::new(HashSet::new()),
            later: false,
        };
        session
            .user_mmap_records(&mut sink)
            .map_err(writing("the processes' MMAP records"))?;
        Ok(sink)
    }

    /// From now on, the records go out zstd-compressed at `level` (1 to
    /// 22) as `perf record -z` writes them ([`Writer::compress`]); the
    /// drains then count the samples as they go (see
    /// [`FileSink::counting_later`]).
    pub fn compress(&mut self, level: u32) -> Result<(), PerfDataError> {
        self.writer
            .compress(level)
            .map_err(|source| PerfDataError::Io {
                what: format!("starting zstd compression at level {level}"),
                offset: 0,
                source,
            })
    }

    /// Adds kernel addresses whose symbols the file is to store (those of
    /// events a sink of yours printed without handing them to this one).
    pub fn add_addresses(&mut self, addresses: impl IntoIterator<Item = u64>) {
        self.addresses.extend(addresses);
    }

    /// Writes the metadata of `session` ([`Metadata::of`], with the
    /// addresses of the events given to this sink and `notes`) and
    /// closes the file; returns its writer. Refused while the session
    /// has ring bytes to count ([`FileSink::count_taken`] comes first,
    /// before the session's summary too).
    pub fn finish(
        self,
        session: &Session,
        symbols: &KernelSymbols,
        notes: Vec<(String, String)>,
    ) -> Result<W, PerfDataError> {
        if session.counts_pending() {
            return Err(PerfDataError::Io {
                what: "finishing the file: the samples the drains left uncounted must be \
                       counted first (FileSink::count_taken)"
                    .into(),
                offset: 0,
                source: std::io::ErrorKind::InvalidInput.into(),
            });
        }
        let meta = Metadata::of(
            session,
            symbols,
            self.addresses.into_set(),
            notes,
            self.tracing_data,
        );
        self.writer.finish(&meta)
    }
}

impl<W: ReadBack> FileSink<W> {
    /// Lets drains give this file each ring's bytes without the session
    /// looking at a record, as perf record writes them (see
    /// [`EventSink::counts_later`]); the samples are counted when
    /// [`FileSink::count_taken`] reads them back, which must come before
    /// the session's summary and [`FileSink::finish`]. Before the probes
    /// are enabled: the names of the threads `session` may sample that
    /// are alive now are written first, as perf record does (names read
    /// from /proc at the end would come too late in the file for a
    /// reader that goes by rounds, and miss the threads gone by then).
    /// A file must be open for reading too ([`File::create`] is not).
    pub fn counting_later(mut self, session: &mut Session) -> Result<Self, PerfDataError> {
        if self.writer.takes_ring_bytes() {
            session
                .thread_comm_records(&mut self)
                .map_err(writing("the threads' COMM records"))?;
        }
        self.later = true;
        Ok(self)
    }

    /// After the last drain (the session disabled): reads back the ring
    /// bytes the drains gave without counting them and counts them
    /// ([`Session::count_taken`], then [`Session::end_count`], whose
    /// names read from /proc this file then holds). Nothing to do when
    /// every drain counted. A ring's piece of bytes that ends at a header
    /// whose size cannot be right counts as an undecodable record. When
    /// reading fails, what was read is counted and the count still ends
    /// (the file can be finished), and the error is returned: the
    /// session's counts then miss the samples not read.
    pub fn count_taken(&mut self, session: &mut Session) -> Result<(), crate::error::Error> {
        if !session.counts_pending() {
            return Ok(());
        }
        let read = self.writer.taken_records(|rec| session.count_taken(rec));
        // What was read is counted, and the count ends, whatever failed.
        session.note_undecodable(*read.as_ref().unwrap_or(&0));
        session.end_count(self)?;
        read.map(drop)
            .map_err(|e| crate::error::Error::io("reading the perf.data file's records back", e))
    }
}

/// The kernel addresses the probes of `session` are at, and the return
/// trampoline: what a file's output names before any event.
fn probe_addresses(session: &Session, symbols: &KernelSymbols) -> HashSet<u64> {
    use crate::plan::AttachPoint;
    let mut set: HashSet<u64> = crate::plan::return_trampoline(symbols)
        .into_iter()
        .collect();
    for p in session.plans() {
        match &p.attach {
            AttachPoint::Symbol { name, offset } => set.extend(
                symbols
                    .lookup(name)
                    .first()
                    .map(|s| s.address.wrapping_add(*offset)),
            ),
            AttachPoint::Address(a) => {
                set.insert(*a);
            }
            AttachPoint::User { .. } => {}
        }
    }
    set
}

/// A failed write of the records `what`, at the file's start.
fn writing(what: &str) -> impl FnOnce(crate::error::Error) -> PerfDataError + '_ {
    move |e| PerfDataError::Io {
        what: format!("writing {what}: {e}"),
        offset: 0,
        source: std::io::Error::other(e.to_string()),
    }
}

/// Notes in `set` the kernel addresses an event's output names, whose
/// symbols a file stores: its probe and return addresses, its kernel
/// frames and its `:symbol` arguments.
pub fn note_addresses(set: &mut AddressSet, e: &Event) {
    set.note_site(e.probe_addr, e.ret_addr);
    set.extend(e.callchain.iter().filter(|f| !f.user).map(|f| f.address));
    for v in &e.args {
        if let Value::Int {
            raw,
            ty: BaseType::Symbol,
        } = v
        {
            set.insert(*raw);
        }
    }
}

/// Every raw record goes to the file; events only name addresses.
impl<W: Write + Seek> EventSink for FileSink<W> {
    type Error = crate::error::Error;

    fn event(&mut self, e: &Event) -> Result<ControlFlow<()>, Self::Error> {
        note_addresses(&mut self.addresses, e);
        Ok(ControlFlow::Continue(()))
    }

    fn record(&mut self, record: RingRecord<'_>) -> Result<ControlFlow<()>, Self::Error> {
        self.writer
            .record(record)
            .map_err(|e| crate::error::Error::io("writing records to the perf.data file", e))?;
        Ok(ControlFlow::Continue(()))
    }

    fn round_end(&mut self) -> Result<ControlFlow<()>, Self::Error> {
        self.writer
            .round_end()
            .map_err(|e| crate::error::Error::io("writing records to the perf.data file", e))?;
        Ok(ControlFlow::Continue(()))
    }

    /// The file needs no decoded event: the session counts without
    /// decoding, and names the addresses it counted.
    fn wants_events(&self) -> bool {
        false
    }

    /// A ring's records go to the file in one write, unless hidden entry
    /// probes' samples must be taken out of them.
    fn takes_ring_bytes(&self) -> bool {
        self.writer.takes_ring_bytes()
    }

    fn ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<ControlFlow<()>, Self::Error> {
        self.writer
            .ring_bytes(bytes)
            .map_err(|e| crate::error::Error::io("writing records to the perf.data file", e))?;
        Ok(ControlFlow::Continue(()))
    }

    /// See [`FileSink::counting_later`]; not when the records are
    /// compressed ([`FileSink::compress`]): the file's bytes are then not
    /// the records to read back, and each drain counts its own.
    fn counts_later(&self) -> bool {
        self.later && self.takes_ring_bytes() && !self.writer.compresses()
    }

    fn taken_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<ControlFlow<()>, Self::Error> {
        self.writer
            .taken_bytes(bytes)
            .map_err(|e| crate::error::Error::io("writing records to the perf.data file", e))?;
        Ok(ControlFlow::Continue(()))
    }
}

/// The event formats perf needs to read the samples of tracefs-defined
/// probes (tracepoint events), read while the session's events exist.
fn tracing_data_of(session: &Session) -> std::io::Result<Option<Vec<u8>>> {
    let Some(group) = session.tracefs_group() else {
        return Ok(None);
    };
    let fs = tracefs::Tracefs::find().map_err(std::io::Error::other)?;
    // One large read first: header_page and header_event answer only the
    // first read() call (a later one at a nonzero offset gets nothing), so
    // read_to_string's small first probe would truncate them.
    let read = |rel: &str| -> std::io::Result<String> {
        let path = fs.root().join(rel);
        let named =
            |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let mut f = File::open(&path).map_err(named)?;
        let mut buf = vec![0u8; 1 << 16];
        let mut len = 0;
        loop {
            if len == buf.len() {
                buf.resize(len * 2, 0);
            }
            let n = std::io::Read::read(&mut f, &mut buf[len..]).map_err(named)?;
            if n == 0 {
                break;
            }
            len += n;
        }
        buf.truncate(len);
        String::from_utf8(buf).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is not UTF-8", path.display()),
            )
        })
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
        .collect::<std::io::Result<Vec<_>>>()?;
    let page = u32::try_from(crate::attach::os::page_size()).unwrap_or(4096);
    Ok(Some(tracing_data(
        page,
        &read("events/header_page")?,
        &read("events/header_event")?,
        &events,
    )))
}
