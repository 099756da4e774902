//! Writing a perf.data file while a session runs.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};

use super::compress::Compressor;
use super::{
    put_string, Metadata, PerfDataError, Section, FEATURE_BITS, FEAT_ARCH, FEAT_BUILD_ID,
    FEAT_CMDLINE, FEAT_EVENT_DESC, FEAT_HIDDEN, FEAT_HOSTNAME, FEAT_KPROBE_PERF, FEAT_NRCPUS,
    FEAT_OSRELEASE, FEAT_TRACING_DATA, FEAT_VERSION, HEADER_SIZE, MAGIC, MISC_KERNEL,
    RECORD_FINISHED_ROUND, RECORD_MMAP,
};
use crate::decode::records::RingRecord;
use crate::decode::records::{RecordSink, RECORD_SAMPLE};

/// Size of the sample_id trailer of the engine's non-sample records
/// (TID, TIME, CPU, IDENTIFIER).
const ID_TRAILER: usize = 32;

/// Writes a perf.data file: records as they come, then (in
/// [`Writer::finish`]) the features, attrs and header.
pub struct Writer<W: Write + Seek> {
    out: W,
    /// Bytes of records written.
    data_size: u64,
    /// Records written since the last FINISHED_ROUND.
    in_round: u64,
    /// FINISHED_ROUND records written.
    rounds: u64,
    /// A FINISHED_ROUND counted in `data_size` but not written yet: it
    /// goes out with whatever is written next (a ring's bytes in the
    /// same write), or at [`Writer::finish`].
    round_pending: bool,
    /// The samples perf must not see ([`Writer::hide`]).
    hidden: Option<Hidden>,
    /// Where the ring bytes no drain counted went
    /// ([`Writer::taken_bytes`]), as (offset in the file, length): what
    /// [`Writer::taken_records`] reads back. Pieces with nothing but
    /// round marks between them are one range, so that its size stays
    /// the same however long the recording runs.
    taken: Vec<(u64, u64)>,
    /// The last range of `taken` ends where the data ends, but for round
    /// marks: the next piece extends it.
    taken_open: bool,
    /// Byte offset of the data section.
    data_start: u64,
    /// The header says how far the data goes at each round's end
    /// ([`Writer::new_readable`]).
    readable: bool,
    /// The records go out compressed ([`Writer::compress`]).
    compress: Option<Compressor>,
}

/// A writer's output that can be read back (a file, open for reading
/// too): what the ring bytes it took are counted from at the end
/// ([`FileSink::count_taken`](super::FileSink::count_taken)).
pub trait ReadBack: Write + Seek {
    /// Fills `buf` from `offset`, anything buffered written first; the
    /// position where writes go does not move.
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

impl ReadBack for File {
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl<W: ReadBack> ReadBack for BufWriter<W> {
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.flush()?;
        self.get_mut().read_back(offset, buf)
    }
}

impl ReadBack for io::Cursor<Vec<u8>> {
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        match self.get_ref().get(from..).and_then(|b| b.get(..buf.len())) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// The samples of hidden probes, kept out of perf's data section: written
/// to a spill file as they come, copied after the attrs at the end
/// (`super::FEAT_HIDDEN` gives the layout).
struct Hidden {
    /// Their event ids, sorted.
    ids: Vec<u64>,
    spill: BufWriter<File>,
    /// Bytes written to the spill.
    size: u64,
    /// Samples spilled since the last round mark.
    in_round: u64,
}

fn io_err(what: &str, offset: u64) -> impl FnOnce(io::Error) -> PerfDataError + '_ {
    move |source| PerfDataError::Io {
        what: what.to_string(),
        offset,
        source,
    }
}

impl<W: Write + Seek> Writer<W> {
    /// Starts a file: a placeholder header, then the data section.
    pub fn new(out: W) -> Result<Self, PerfDataError> {
        Self::start(out, &[0u8; HEADER_SIZE as usize], false)
    }

    /// Starts a file that can be read even if it is never finished (the
    /// recorder killed, the machine's power lost, the disk full): the
    /// attrs of `meta` with their ids, and kprobe-perf's metadata (its
    /// probes; `meta.symbols` for those its output will name first), go
    /// before the data, in front of it the header, whose data size each
    /// round's end brings up to date (perf reads the file up to there;
    /// kprobe-perf up to its last whole record, see [`super::UNFINISHED`]).
    /// [`Writer::finish`] then ends it as [`Writer::new`]'s.
    pub fn new_readable(out: W, meta: &Metadata) -> Result<Self, PerfDataError> {
        let (head, data_start) = unfinished_head(meta);
        debug_assert_eq!(head.len() as u64, data_start);
        Self::start(out, &head, true)
    }

    /// A writer whose data section starts after `head`, written at the
    /// file's start.
    fn start(mut out: W, head: &[u8], readable: bool) -> Result<Self, PerfDataError> {
        out.seek(SeekFrom::Start(0))
            .and_then(|_| out.write_all(head))
            .map_err(io_err("writing the header", 0))?;
        Ok(Writer {
            out,
            data_size: 0,
            in_round: 0,
            rounds: 0,
            round_pending: false,
            hidden: None,
            taken: Vec::new(),
            taken_open: false,
            data_start: head.len() as u64,
            readable,
            compress: None,
        })
    }

    /// Keeps the samples of `ids` (the events of probes the user did not
    /// ask for, such as the entry half of a joined return probe) out of
    /// what perf reads: they go to `spill` (an empty file, read and
    /// written, which nothing else uses) and end up after the attrs,
    /// where only kprobe-perf's reader looks (`super::FEAT_HIDDEN`).
    /// The probes themselves are the last `meta.hidden` of
    /// [`Writer::finish`]'s metadata.
    pub fn hide(&mut self, mut ids: Vec<u64>, spill: File) {
        ids.sort_unstable();
        self.hidden = Some(Hidden {
            ids,
            spill: BufWriter::with_capacity(1 << 20, spill),
            size: 0,
            in_round: 0,
        });
    }

    /// From now on, the records go out zstd-compressed at `level` (1 to
    /// 22), as `perf record -z` writes them: in `PERF_RECORD_COMPRESSED`
    /// records, each round's flushed before its `FINISHED_ROUND`, with
    /// perf's `HEADER_COMPRESSED` feature at the end. Records written
    /// before stay as they are (perf record compresses only what its
    /// rings held); the hidden probes' samples too.
    pub fn compress(&mut self, level: u32) -> io::Result<()> {
        self.compress = Some(Compressor::new(level)?);
        Ok(())
    }

    /// True when the records go out compressed ([`Writer::compress`]).
    pub(crate) fn compresses(&self) -> bool {
        self.compress.is_some()
    }

    /// Writes the `PERF_RECORD_MMAP` perf record synthesizes for the
    /// kernel (`[kernel.kallsyms]_text` from `text`, the address of
    /// `_text`, to the end of the address space), so that `perf script`
    /// resolves kernel addresses.
    pub fn kernel_mmap(&mut self, text: u64) -> io::Result<()> {
        let mut body = Vec::with_capacity(96);
        body.extend_from_slice(&(-1i32).to_ne_bytes());
        body.extend_from_slice(&0i32.to_ne_bytes());
        body.extend_from_slice(&text.to_ne_bytes());
        body.extend_from_slice(&u64::MAX.wrapping_sub(text).to_ne_bytes());
        body.extend_from_slice(&text.to_ne_bytes());
        body.extend_from_slice(b"[kernel.kallsyms]_text\0");
        while body.len() % 8 != 0 {
            body.push(0);
        }
        body.resize(body.len() + ID_TRAILER, 0);
        self.record(RingRecord::new(RECORD_MMAP, MISC_KERNEL, (&body, &[])))
    }

    /// Writes a `PERF_RECORD_MMAP` for each loaded module `/proc/modules`
    /// lists with an address, from its address for its size, as perf
    /// record synthesizes them: named by the module's file under
    /// /lib/modules/RELEASE (from modules.dep), or `[NAME]` where that
    /// directory has none, so that `perf script` puts module frames in
    /// their module. Returns how many were written (none when the file
    /// cannot be read or hides addresses).
    pub(crate) fn module_mmaps(&mut self) -> io::Result<usize> {
        let Ok(text) = std::fs::read_to_string("/proc/modules") else {
            return Ok(0);
        };
        let files = module_files();
        let mut n = 0;
        for line in text.lines() {
            // name size refcount deps state address [taints]
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(name), Some(size), Some(addr)) = (f.first(), f.get(1), f.get(5)) else {
                continue;
            };
            let (Ok(size), Ok(addr)) = (
                size.parse::<u64>(),
                u64::from_str_radix(addr.trim_start_matches("0x"), 16),
            ) else {
                continue;
            };
            if addr == 0 || size == 0 {
                continue;
            }
            let mut body = Vec::with_capacity(64 + name.len());
            body.extend_from_slice(&(-1i32).to_ne_bytes());
            body.extend_from_slice(&0i32.to_ne_bytes());
            body.extend_from_slice(&addr.to_ne_bytes());
            body.extend_from_slice(&size.to_ne_bytes());
            body.extend_from_slice(&0u64.to_ne_bytes());
            match files.get(*name) {
                Some(path) => body.extend_from_slice(path.as_bytes()),
                None => body.extend_from_slice(format!("[{name}]").as_bytes()),
            }
            body.push(0);
            while body.len() % 8 != 0 {
                body.push(0);
            }
            body.resize(body.len() + ID_TRAILER, 0);
            self.record(RingRecord::new(RECORD_MMAP, MISC_KERNEL, (&body, &[])))?;
            n += 1;
        }
        Ok(n)
    }

    /// How many ranges of taken ring bytes wait to be read back.
    #[cfg(test)]
    pub(crate) fn taken_ranges(&self) -> usize {
        self.taken.len()
    }

    /// The output, the file left unfinished (as a recorder killed leaves
    /// it).
    #[cfg(test)]
    pub(crate) fn into_inner(self) -> W {
        self.out
    }

    /// Ends the file: features, ids and attrs after the data, then the
    /// header. Returns the output.
    pub fn finish(mut self, meta: &Metadata) -> Result<W, PerfDataError> {
        self.write_compressed().map_err(io_err(
            "writing the last compressed records",
            self.data_size,
        ))?;
        let data_end = self.data_start + self.data_size;
        self.write_pending_round()
            .map_err(io_err("writing the last round's mark", data_end))?;
        // perf sees the user's probes only: the last `meta.hidden` attrs
        // go to kprobe-perf's hidden section.
        let shown = meta.attrs.len().saturating_sub(meta.hidden);
        let attr_size = meta.attrs.first().map_or(0, Vec::len);
        let ids_of = |i: usize| ids_of(meta, i);
        let mut features = shown_features(meta, shown, attr_size);
        if let Some(c) = &self.compress {
            features.push((super::FEAT_COMPRESSED, c.feature()));
            // perf reads the sections in the order of their bits.
            features.sort_by_key(|(bit, _)| *bit);
        }
        // The hidden section's own size is known before the offset of the
        // region it points at: the region follows the attrs.
        let hidden_attrs = &meta.attrs[shown.min(meta.attrs.len())..];
        let hidden_section_size = if hidden_attrs.is_empty() && self.hidden.is_none() {
            None
        } else {
            Some(
                8 + hidden_attrs
                    .iter()
                    .enumerate()
                    .map(|(j, _)| attr_size + 4 + ids_of(shown + j).len() * 8)
                    .sum::<usize>()
                    + 16,
            )
        };

        // Feature table right after the data, then the features.
        let n_features = features.len() + usize::from(hidden_section_size.is_some());
        let table_size = n_features as u64 * 16;
        let features_size: u64 = features.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
            + hidden_section_size.unwrap_or(0) as u64;
        let ids_size: u64 = (0..shown).map(|i| ids_of(i).len() as u64 * 8).sum();
        let attrs = Section {
            offset: data_end + table_size + features_size + ids_size,
            size: (shown * (attr_size + 16)) as u64,
        };
        let spill_size = self.hidden.as_ref().map_or(0, |h| h.size);
        let region = Section {
            offset: attrs.offset + attrs.size,
            size: spill_size,
        };
        if let Some(size) = hidden_section_size {
            let b = hidden_section(meta, shown, attr_size, region);
            debug_assert_eq!(b.len(), size);
            features.push((FEAT_HIDDEN, b));
        }
        let (tail, bitmap) = tail_bytes(&features, meta, shown, data_end);
        debug_assert_eq!(tail.len() as u64, attrs.offset + attrs.size - data_end);
        self.out
            .write_all(&tail)
            .map_err(io_err("writing the features and attrs", data_end))?;
        if let Some(h) = self.hidden.take() {
            copy_hidden(h, region, &mut self.out)?;
        }

        let data = Section {
            offset: self.data_start,
            size: self.data_size,
        };
        let header = file_header(attrs, data, attr_size, &bitmap);
        self.out
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.out.write_all(&header))
            .and_then(|()| self.out.flush())
            .map_err(io_err("writing the header", 0))?;
        Ok(self.out)
    }
}

/// What follows the data, from `table_at`: the feature table and the
/// features, each shown attr's ids, then the shown attrs with their id
/// sections; and the header's bitmap of the features.
fn tail_bytes(
    features: &[(u32, Vec<u8>)],
    meta: &Metadata,
    shown: usize,
    table_at: u64,
) -> (Vec<u8>, [u64; (FEATURE_BITS / 64) as usize]) {
    let attr_size = meta.attrs.first().map_or(0, Vec::len);
    let mut tail = Vec::new();
    let mut at = table_at + features.len() as u64 * 16;
    let mut bitmap = [0u64; (FEATURE_BITS / 64) as usize];
    for (bit, bytes) in features {
        tail.extend_from_slice(&at.to_le_bytes());
        tail.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        at += bytes.len() as u64;
        bitmap[(bit / 64) as usize] |= 1u64 << (bit % 64);
    }
    for (_, bytes) in features {
        tail.extend_from_slice(bytes);
    }
    // Ids of each attr, then the attrs with their id sections.
    let mut id_sections = Vec::new();
    for i in 0..shown {
        let ids = ids_of(meta, i);
        id_sections.push(Section {
            offset: at,
            size: ids.len() as u64 * 8,
        });
        for id in ids {
            tail.extend_from_slice(&id.to_le_bytes());
            at += 8;
        }
    }
    for (attr, ids) in meta.attrs.iter().zip(&id_sections) {
        tail.extend_from_slice(&sized(attr, attr_size));
        tail.extend_from_slice(&ids.offset.to_le_bytes());
        tail.extend_from_slice(&ids.size.to_le_bytes());
    }
    (tail, bitmap)
}

/// The sized copy of an attr (every attr of a file has one size).
fn sized(attr: &[u8], attr_size: usize) -> Vec<u8> {
    let mut a = attr.to_vec();
    a.resize(attr_size, 0);
    a
}

/// The ids of attr `i`.
fn ids_of(meta: &Metadata, i: usize) -> &[u64] {
    meta.ids.get(i).map_or(&[][..], Vec::as_slice)
}

/// The header features perf reads, for the first `shown` attrs (the
/// user's probes): tracing data, host, kernel and tool, CPUs, command
/// line, event descriptions, and kprobe-perf's own metadata.
/// perf's `HEADER_BUILD_ID` section: per file, a `build_id_event` as
/// perf writes it (a header of type 0 whose misc says kernel or user
/// and that the ID's size is given, pid -1 for the host, the ID in 20
/// bytes then its size, then the NUL-terminated name padded to 64).
fn build_id_section(ids: &[super::FileBuildId]) -> Vec<u8> {
    /// `PERF_RECORD_MISC_BUILD_ID_SIZE`.
    const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
    /// `PERF_RECORD_MISC_USER`.
    const MISC_USER: u16 = 2;
    /// perf's `NAME_ALIGN`.
    const NAME_ALIGN: usize = 64;
    let mut out = Vec::new();
    for b in ids {
        let name_len = (b.path.len() + 1).div_ceil(NAME_ALIGN) * NAME_ALIGN;
        let misc = if b.kernel { MISC_KERNEL } else { MISC_USER } | MISC_BUILD_ID_SIZE;
        let size = 8 + 4 + 24 + name_len;
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&misc.to_le_bytes());
        out.extend_from_slice(&u16::try_from(size).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(&(-1i32).to_le_bytes());
        let id = &b.id[..b.id.len().min(20)];
        let mut data = [0u8; 24];
        data[..id.len()].copy_from_slice(id);
        data[20] = id.len() as u8;
        out.extend_from_slice(&data);
        let start = out.len();
        out.extend_from_slice(b.path.as_bytes());
        out.resize(start + name_len, 0);
    }
    out
}

fn shown_features(meta: &Metadata, shown: usize, attr_size: usize) -> Vec<(u32, Vec<u8>)> {
    let sized = |attr: &Vec<u8>| sized(attr, attr_size);
    let ids_of = |i: usize| ids_of(meta, i);
    let mut features: Vec<(u32, Vec<u8>)> = Vec::new();
    if let Some(t) = &meta.tracing_data {
        features.push((FEAT_TRACING_DATA, t.clone()));
    }
    if !meta.build_ids.is_empty() {
        features.push((FEAT_BUILD_ID, build_id_section(&meta.build_ids)));
    }
    let string = |s: &str| {
        let mut b = Vec::new();
        put_string(&mut b, s);
        b
    };
    features.push((FEAT_HOSTNAME, string(&meta.hostname)));
    features.push((FEAT_OSRELEASE, string(&meta.osrelease)));
    features.push((
        FEAT_VERSION,
        string(concat!("kprobe-perf ", env!("CARGO_PKG_VERSION"))),
    ));
    features.push((FEAT_ARCH, string(meta.arch.name())));
    let mut nrcpus = Vec::new();
    nrcpus.extend_from_slice(&meta.nr_cpus.0.to_le_bytes());
    nrcpus.extend_from_slice(&meta.nr_cpus.1.to_le_bytes());
    features.push((FEAT_NRCPUS, nrcpus));
    let mut cmdline = (meta.cmdline.len() as u32).to_le_bytes().to_vec();
    for a in &meta.cmdline {
        put_string(&mut cmdline, a);
    }
    features.push((FEAT_CMDLINE, cmdline));
    let mut desc = Vec::new();
    desc.extend_from_slice(&(shown as u32).to_le_bytes());
    desc.extend_from_slice(&(attr_size as u32).to_le_bytes());
    for (i, attr) in meta.attrs.iter().enumerate().take(shown) {
        desc.extend_from_slice(&sized(attr));
        let ids = ids_of(i);
        desc.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        put_string(
            &mut desc,
            meta.probes.get(i).map_or("", |p| p.event.as_str()),
        );
        for id in ids {
            desc.extend_from_slice(&id.to_le_bytes());
        }
    }
    features.push((FEAT_EVENT_DESC, desc));
    features.push((FEAT_KPROBE_PERF, meta.encode().into_bytes()));
    features
}

/// kprobe-perf's hidden section: the attrs after the first `shown` with
/// their ids, then where the hidden samples' region is.
fn hidden_section(meta: &Metadata, shown: usize, attr_size: usize, region: Section) -> Vec<u8> {
    let hidden_attrs = &meta.attrs[shown.min(meta.attrs.len())..];
    let mut b = Vec::new();
    b.extend_from_slice(&(hidden_attrs.len() as u32).to_le_bytes());
    b.extend_from_slice(&(attr_size as u32).to_le_bytes());
    for (j, attr) in hidden_attrs.iter().enumerate() {
        b.extend_from_slice(&sized(attr, attr_size));
        let ids = ids_of(meta, shown + j);
        b.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        for id in ids {
            b.extend_from_slice(&id.to_le_bytes());
        }
    }
    b.extend_from_slice(&region.offset.to_le_bytes());
    b.extend_from_slice(&region.size.to_le_bytes());
    b
}

/// Copies the hidden samples spilled to `h` into `out` at `region`.
fn copy_hidden<W: Write>(h: Hidden, region: Section, out: &mut W) -> Result<(), PerfDataError> {
    let mut spill = h
        .spill
        .into_inner()
        .map_err(|e| e.into_error())
        .and_then(|mut f| f.seek(SeekFrom::Start(0)).map(|_| f))
        .map_err(io_err("reading back the hidden samples", region.offset))?;
    let copied = io::copy(&mut io::Read::take(&mut spill, region.size), out)
        .map_err(io_err("copying the hidden samples", region.offset))?;
    if copied != region.size {
        return Err(io_err("copying the hidden samples", region.offset)(
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{copied} of {} bytes", region.size),
            ),
        ));
    }
    Ok(())
}

/// The file header: magic, sizes, the attrs and data sections, and the
/// feature bitmap.
fn file_header(
    attrs: Section,
    data: Section,
    attr_size: usize,
    bitmap: &[u64; (FEATURE_BITS / 64) as usize],
) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_SIZE as usize);
    header.extend_from_slice(&MAGIC.to_le_bytes());
    header.extend_from_slice(&HEADER_SIZE.to_le_bytes());
    header.extend_from_slice(&(attr_size as u64 + 16).to_le_bytes());
    for s in [attrs, data, Section::default()] {
        header.extend_from_slice(&s.offset.to_le_bytes());
        header.extend_from_slice(&s.size.to_le_bytes());
    }
    for w in bitmap {
        header.extend_from_slice(&w.to_le_bytes());
    }
    header
}

/// perf's `HEADER_TRACING_DATA` (version 0.6, little-endian, 64-bit):
/// tracefs's `events/header_page` and `events/header_event`, then the
/// `format` file of each tracepoint event, by system (tracefs group);
/// no ftrace formats, kallsyms, printk formats or saved cmdlines.
pub fn tracing_data(
    page_size: u32,
    header_page: &str,
    header_event: &str,
    events: &[(String, String)],
) -> Vec<u8> {
    let mut b = vec![23, 8, 68];
    b.extend_from_slice(b"tracing0.6\0");
    b.push(0); // little-endian
    b.push(8); // sizeof(long)
    b.extend_from_slice(&page_size.to_le_bytes());
    for (name, text) in [("header_page", header_page), ("header_event", header_event)] {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&(text.len() as u64).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes()); // ftrace formats
    let mut systems: Vec<&str> = events.iter().map(|(s, _)| s.as_str()).collect();
    systems.dedup();
    b.extend_from_slice(&(systems.len() as u32).to_le_bytes());
    for sys in systems {
        b.extend_from_slice(sys.as_bytes());
        b.push(0);
        let formats: Vec<&String> = events
            .iter()
            .filter(|(s, _)| s == sys)
            .map(|(_, f)| f)
            .collect();
        b.extend_from_slice(&(formats.len() as u32).to_le_bytes());
        for f in formats {
            b.extend_from_slice(&(f.len() as u64).to_le_bytes());
            b.extend_from_slice(f.as_bytes());
        }
    }
    b.extend_from_slice(&0u32.to_le_bytes()); // kallsyms
    b.extend_from_slice(&0u32.to_le_bytes()); // printk formats
    b.extend_from_slice(&0u64.to_le_bytes()); // saved cmdlines
    b
}

impl<W: Write + Seek> Writer<W> {
    /// True when a ring's records can go to the file as they are, as one
    /// piece of bytes ([`Writer::ring_bytes`]): no hidden probe's samples
    /// are to be taken out of them.
    pub(crate) fn takes_ring_bytes(&self) -> bool {
        self.hidden.is_none()
    }

    /// A ring's records as the kernel wrote them (whole records, headers
    /// included, in one or two parts), written as they are.
    pub(crate) fn ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> io::Result<()> {
        self.taken_open = false;
        self.write_ring_bytes(bytes)
    }

    /// Writes a ring's bytes, after the round mark waiting.
    fn write_ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> io::Result<()> {
        debug_assert!(self.takes_ring_bytes());
        let len = bytes.0.len() + bytes.1.len();
        if len == 0 {
            return Ok(());
        }
        if self.compress.is_some() {
            self.in_round += 1;
            return self.push_compressed(&[bytes.0, bytes.1]);
        }
        // The round mark waiting to be written, and the ring's one or
        // two parts, in one write.
        let round = if std::mem::take(&mut self.round_pending) {
            &ROUND_MARK[..]
        } else {
            &[]
        };
        write_all_vectored(&mut self.out, [round, bytes.0, bytes.1])?;
        self.data_size += len as u64;
        self.in_round += 1;
        Ok(())
    }
}

impl<W: Write + Seek> Writer<W> {
    /// [`Writer::ring_bytes`] of bytes no drain counted: where they went
    /// is kept for [`Writer::taken_records`].
    pub(crate) fn taken_bytes(&mut self, bytes: (&[u8], &[u8])) -> io::Result<()> {
        // What is read back must be the records as they are.
        debug_assert!(self.compress.is_none());
        let len = (bytes.0.len() + bytes.1.len()) as u64;
        self.write_ring_bytes(bytes)?;
        if len == 0 {
            return Ok(());
        }
        let end = self.data_start + self.data_size;
        match self.taken.last_mut() {
            // Only round marks came between: one range, read back with
            // the marks in it (which the reading passes over).
            Some((start, n)) if self.taken_open => *n = end - *start,
            _ => self.taken.push((end - len, len)),
        }
        self.taken_open = true;
        Ok(())
    }
}

/// How much of the file [`Writer::taken_records`] reads at a time: far
/// more than a record's 64 KiB at most.
const READ_BACK: usize = 1 << 20;

impl<W: ReadBack> Writer<W> {
    /// Hands `f` each record of the ring bytes no drain counted, written
    /// since the last call ([`Writer::taken_bytes`]), read back from the
    /// file in order. Returns the number of rings' pieces that ended at a
    /// header whose size cannot be right (the rest of that piece is not
    /// read: nothing after it can be found).
    pub(crate) fn taken_records(&mut self, mut f: impl FnMut(RingRecord<'_>)) -> io::Result<u64> {
        self.taken_open = false;
        let mut buf = vec![0u8; READ_BACK];
        let mut corrupt = 0;
        for (start, len) in std::mem::take(&mut self.taken) {
            let end = start + len;
            let mut pos = start;
            'piece: while end - pos >= 8 {
                let n = usize::try_from(end - pos).map_or(READ_BACK, |n| n.min(READ_BACK));
                let chunk = &mut buf[..n];
                self.out.read_back(pos, chunk)?;
                let mut at = 0;
                while let Some(h) = chunk.get(at..at + 8) {
                    let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
                    if size < 8 || pos + (at + size) as u64 > end {
                        corrupt += 1;
                        break 'piece;
                    }
                    let Some(body) = chunk.get(at + 8..at + size) else {
                        // Past what was read: the next read starts here.
                        break;
                    };
                    let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
                    let misc = u16::from_ne_bytes([h[4], h[5]]);
                    // The kernel writes no round mark: those between
                    // the pieces of a range are the writer's.
                    if kind != RECORD_FINISHED_ROUND {
                        f(RingRecord::new(kind, misc, (body, &[])));
                    }
                    at += size;
                }
                pos += at as u64;
            }
        }
        Ok(corrupt)
    }
}

/// A FINISHED_ROUND record: a header alone.
const ROUND_MARK: [u8; 8] = {
    let k = RECORD_FINISHED_ROUND.to_ne_bytes();
    let size = 8u16.to_ne_bytes();
    [k[0], k[1], k[2], k[3], 0, 0, size[0], size[1]]
};

/// Writes `parts` in order, in as few write(2) calls as `out` lets (one,
/// past a buffer).
fn write_all_vectored<const N: usize>(out: &mut impl Write, parts: [&[u8]; N]) -> io::Result<()> {
    let mut slices = parts.map(io::IoSlice::new);
    let mut bufs = &mut slices[..];
    io::IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match out.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl<W: Write + Seek> Writer<W> {
    /// Gives the compressor `parts` (whole records); writes what it
    /// gives back.
    fn push_compressed(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let Some(c) = self.compress.as_mut() else {
            return Ok(());
        };
        if let Some(out) = c.push(parts)? {
            Self::write_after_round(&mut self.out, &mut self.round_pending, out)?;
            self.data_size += out.len() as u64;
        }
        Ok(())
    }

    /// [`Writer::push_compressed`] of one record.
    fn push_record(&mut self, kind: u32, misc: u16, body: (&[u8], &[u8])) -> io::Result<()> {
        let size = u16::try_from(8 + body.0.len() + body.1.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record over 64 KiB"))?;
        let mut hdr = [0u8; 8];
        hdr[..4].copy_from_slice(&kind.to_ne_bytes());
        hdr[4..6].copy_from_slice(&misc.to_ne_bytes());
        hdr[6..].copy_from_slice(&size.to_ne_bytes());
        self.push_compressed(&[&hdr, body.0, body.1])
    }

    /// Compresses the records waiting and writes them.
    fn write_compressed(&mut self) -> io::Result<()> {
        let Some(c) = self.compress.as_mut() else {
            return Ok(());
        };
        let out = c.flush()?;
        if !out.is_empty() {
            Self::write_after_round(&mut self.out, &mut self.round_pending, out)?;
            self.data_size += out.len() as u64;
        }
        Ok(())
    }

    /// Writes `bytes` after the round mark left waiting, if any.
    fn write_after_round(out: &mut W, round_pending: &mut bool, bytes: &[u8]) -> io::Result<()> {
        let round = if std::mem::take(round_pending) {
            &ROUND_MARK[..]
        } else {
            &[]
        };
        write_all_vectored(out, [round, bytes])
    }

    /// Writes the FINISHED_ROUND [`RecordSink::round_end`] left waiting.
    fn write_pending_round(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.round_pending) {
            self.out.write_all(&ROUND_MARK)?;
        }
        Ok(())
    }
}

impl<W: Write + Seek> Writer<W> {
    /// Writes what is buffered and the data size written so far into the
    /// header, where perf reads it ([`Writer::new_readable`]).
    fn mark_data_size(&mut self) -> io::Result<()> {
        self.out.seek(SeekFrom::Start(DATA_SIZE_AT))?;
        self.out.write_all(&self.data_size.to_le_bytes())?;
        self.out
            .seek(SeekFrom::Start(self.data_start + self.data_size))
            .map(drop)
    }
}

/// Where the header holds the data section's size.
const DATA_SIZE_AT: u64 = 48;

/// The start of a file [`Writer::new_readable`] writes, and the offset of
/// its data: the header (no feature bits, an empty data section), the
/// [`super::UNFINISHED`] block, the shown attrs, their ids.
fn unfinished_head(meta: &Metadata) -> (Vec<u8>, u64) {
    let shown = meta.attrs.len().saturating_sub(meta.hidden);
    let attr_size = meta.attrs.first().map_or(0, Vec::len);
    let mut block = super::UNFINISHED.to_vec();
    let private = meta.encode().into_bytes();
    let hidden = match meta.hidden {
        0 => Vec::new(),
        _ => hidden_section(meta, shown, attr_size, Section::default()),
    };
    for part in [&private, &hidden] {
        block.extend_from_slice(&(part.len() as u64).to_le_bytes());
        block.extend_from_slice(part);
        block.resize(block.len().next_multiple_of(8), 0);
    }
    let attrs_at = HEADER_SIZE + block.len() as u64;
    let attrs = Section {
        offset: attrs_at,
        size: (shown * (attr_size + 16)) as u64,
    };
    let mut ids_at = attrs.offset + attrs.size;
    let mut tail = Vec::new();
    let mut id_bytes = Vec::new();
    for (i, attr) in meta.attrs.iter().enumerate().take(shown) {
        let ids = ids_of(meta, i);
        tail.extend_from_slice(&sized(attr, attr_size));
        tail.extend_from_slice(&ids_at.to_le_bytes());
        tail.extend_from_slice(&(ids.len() as u64 * 8).to_le_bytes());
        for id in ids {
            id_bytes.extend_from_slice(&id.to_le_bytes());
        }
        ids_at += ids.len() as u64 * 8;
    }
    let data = Section {
        offset: ids_at,
        size: 0,
    };
    let bitmap = [0u64; (FEATURE_BITS / 64) as usize];
    let mut head = file_header(attrs, data, attr_size, &bitmap);
    head.extend_from_slice(&block);
    head.extend_from_slice(&tail);
    head.extend_from_slice(&id_bytes);
    (head, ids_at)
}

impl<W: Write + Seek> RecordSink for Writer<W> {
    fn record(&mut self, record: RingRecord<'_>) -> io::Result<()> {
        let RingRecord { kind, misc, body } = record;
        if kind == RECORD_SAMPLE {
            if let Some(h) = &mut self.hidden {
                // PERF_SAMPLE_IDENTIFIER: the id comes first.
                let mut id = [0u8; 8];
                let n = body.0.len().min(8);
                id[..n].copy_from_slice(&body.0[..n]);
                if n < 8 && body.1.len() >= 8 - n {
                    id[n..].copy_from_slice(&body.1[..8 - n]);
                }
                if h.ids.binary_search(&u64::from_ne_bytes(id)).is_ok() {
                    h.size += write_record(&mut h.spill, kind, misc, body)?;
                    h.in_round += 1;
                    return Ok(());
                }
            }
        }
        if self.compress.is_some() {
            self.in_round += 1;
            return self.push_record(kind, misc, body);
        }
        self.write_pending_round()?;
        self.taken_open = false;
        self.data_size += write_record(&mut self.out, kind, misc, body)?;
        self.in_round += 1;
        Ok(())
    }

    fn round_end(&mut self) -> io::Result<()> {
        let hidden = self.hidden.as_ref().map_or(0, |h| h.in_round);
        if self.in_round == 0 && hidden == 0 {
            return Ok(());
        }
        // The round's records go out before its mark.
        self.write_compressed()?;
        // Written with what comes next (see `round_pending`).
        self.write_pending_round()?;
        if self.readable {
            self.mark_data_size()?;
        }
        self.round_pending = true;
        self.data_size += ROUND_MARK.len() as u64;
        if let Some(h) = self.hidden.as_mut().filter(|h| h.in_round > 0) {
            // The samples spilled since the last mark belong to the round
            // this FINISHED_ROUND ends.
            h.size += write_record(
                &mut h.spill,
                RECORD_FINISHED_ROUND,
                0,
                (&self.rounds.to_le_bytes(), &[]),
            )?;
            h.in_round = 0;
        }
        self.rounds += 1;
        self.in_round = 0;
        Ok(())
    }
}

/// Writes one record (header, then `body`) to `out`; returns its size.
pub(super) fn write_record(
    out: &mut impl Write,
    kind: u32,
    misc: u16,
    body: (&[u8], &[u8]),
) -> io::Result<u64> {
    let size = 8 + body.0.len() + body.1.len();
    let size16 = u16::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record over 64 KiB"))?;
    let mut hdr = [0u8; 8];
    hdr[..4].copy_from_slice(&kind.to_ne_bytes());
    hdr[4..6].copy_from_slice(&misc.to_ne_bytes());
    hdr[6..].copy_from_slice(&size16.to_ne_bytes());
    out.write_all(&hdr)?;
    out.write_all(body.0)?;
    out.write_all(body.1)?;
    Ok(size as u64)
}

/// The running kernel's module files by module name (as /proc/modules
/// writes it, `-` as `_`), from /lib/modules/RELEASE/modules.dep.
fn module_files() -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return out;
    };
    let dir = format!("/lib/modules/{}", release.trim());
    let Ok(dep) = std::fs::read_to_string(format!("{dir}/modules.dep")) else {
        return out;
    };
    for line in dep.lines() {
        let Some((rel, _)) = line.split_once(':') else {
            continue;
        };
        let file = rel.rsplit('/').next().unwrap_or(rel);
        let Some(name) = file.split(".ko").next().filter(|n| !n.is_empty()) else {
            continue;
        };
        let path = if rel.starts_with('/') {
            rel.to_string()
        } else {
            format!("{dir}/{rel}")
        };
        out.insert(name.replace('-', "_"), path);
    }
    out
}
