//! Reading a perf.data file: header, attrs and ids, feature sections, then
//! the records one by one. Every size and offset is checked against the
//! file before it is used; a problem is an error naming the byte offset
//! (and, in the data section, the record's index and type), never a panic.

use std::io::{self, Read, Seek, SeekFrom};

use super::compress::{Decompressor, RECORD_COMPRESSED, RECORD_COMPRESSED2};
use super::{
    Metadata, PerfDataError, Section, FEATURE_BITS, FEAT_CMDLINE, FEAT_HIDDEN, FEAT_HOSTNAME,
    FEAT_KPROBE_PERF, FEAT_NRCPUS, FEAT_OSRELEASE, HEADER_SIZE, MAGIC,
};

/// Size of `perf_event_attr` version 0, the smallest perf accepts.
const ATTR_SIZE_VER0: u64 = 64;
/// Bounds that keep a corrupt file from asking for absurd allocations.
const MAX_ATTRS: u64 = 65_536;
const MAX_ATTR_SIZE: u64 = 4096;
const MAX_FEATURE: u64 = 256 << 20;

/// One attr of the file and the event ids that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAttr {
    /// The perf_event_attr bytes (its `size` field says how many count).
    pub attr: Vec<u8>,
    /// Event ids.
    pub ids: Vec<u64>,
}

/// One record of the data section, borrowed until the next read.
#[derive(Debug, Clone, Copy)]
pub struct FileRecord<'a> {
    /// Index in the data section, from 0.
    pub index: u64,
    /// Byte offset of its header in the file.
    pub offset: u64,
    /// `perf_event_header.type`.
    pub kind: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The bytes after the header.
    pub body: &'a [u8],
}

/// A file whose recording never finished it ([`super::Writer::new_readable`]):
/// killed, its machine's power lost, its disk full. Its records are read
/// up to the last whole one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unfinished {
    /// The file's size.
    pub len: u64,
    /// Where the data's whole records end, once they have all been read
    /// (the bytes after it are a record cut short, or nothing); before
    /// that, where the reader stands.
    pub whole_to: u64,
}

/// A perf.data file open for reading.
pub struct Reader<R> {
    r: R,
    attrs: Vec<FileAttr>,
    /// How many of the last attrs are hidden probes (`FEAT_HIDDEN`).
    hidden_attrs: usize,
    features: Vec<(u32, Section, Vec<u8>)>,
    data: Stream,
    /// The hidden probes' records (`FEAT_HIDDEN`).
    hidden: Option<Stream>,
    /// The whole file, mapped ([`Reader::from_file`]): records are sliced
    /// from it in place instead of read into `Stream::buf`.
    map: Option<Mapped>,
    /// The file was never finished (its length).
    unfinished: Option<u64>,
    /// The records of the `PERF_RECORD_COMPRESSED` records read so far
    /// (`perf record -z`, `record -z`), once there has been one.
    unpacked: Option<Decompressor>,
}

/// A mapped file, and the thread that maps its pages ahead of the reader.
struct Mapped {
    map: std::sync::Arc<memmap2::Mmap>,
    /// Tells the thread where the reader stands (dropped: it ends).
    ahead: std::sync::mpsc::Sender<usize>,
    /// Where the reader stood when it last told the thread.
    told: usize,
}

impl Mapped {
    /// Bytes the pages are mapped ahead of the reader.
    const WINDOW: usize = 32 << 20;
    /// The reader tells the thread each time it has read this much more.
    const STEP: usize = 4 << 20;

    /// Maps `file` and starts the thread that maps (populates) its pages
    /// ahead of the reader from `from` on: a page of a mapped file is
    /// otherwise mapped by a page fault at its first read, and those
    /// faults would take about a third of reading a large recording.
    /// Only a hint: where the kernel has no `MADV_POPULATE_READ` (5.14),
    /// or the thread cannot start, the pages fault in as usual.
    fn new(file: &std::fs::File, from: usize) -> io::Result<Mapped> {
        let map = std::sync::Arc::new(crate::attach::sys::map_file(file)?);
        let (ahead, wanted) = std::sync::mpsc::channel::<usize>();
        let pages = std::sync::Arc::clone(&map);
        let _ = std::thread::Builder::new()
            .name("kprobe-perf-map".into())
            .spawn(move || {
                let mut done = from.min(pages.len());
                while let Ok(at) = wanted.recv() {
                    let want = at.saturating_add(Self::WINDOW).min(pages.len());
                    while done < want {
                        let n = Self::STEP.min(want - done);
                        if pages
                            .advise_range(memmap2::Advice::PopulateRead, done, n)
                            .is_err()
                        {
                            return;
                        }
                        done += n;
                    }
                }
            });
        let _ = ahead.send(from);
        Ok(Mapped {
            map,
            ahead,
            told: from,
        })
    }

    /// The reader stands at `at`.
    #[inline]
    fn reading(&mut self, at: u64) {
        let at = at as usize;
        if at >= self.told + Self::STEP {
            self.told = at;
            let _ = self.ahead.send(at);
        }
    }
}

/// Records read one after the other from a section of the file.
struct Stream {
    sec: Section,
    /// Offset of the next record.
    pos: u64,
    index: u64,
    /// Data read ahead: `buf[start..end]` are the bytes at `pos`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The section runs to the end of an unfinished file: a record that
    /// is not whole there ends it, where an error would.
    tolerant: bool,
    /// Where such a record was found.
    cut: Option<u64>,
}

/// Bytes of the data section read at a time.
const CHUNK: usize = 1 << 20;

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

fn header_err(offset: u64, reason: impl Into<String>) -> PerfDataError {
    PerfDataError::Header {
        offset,
        reason: reason.into(),
    }
}

/// Checks that `s` (described at `at`) lies inside a file of `len` bytes.
fn check_section(s: Section, len: u64, what: &str, at: u64) -> Result<(), PerfDataError> {
    match s.offset.checked_add(s.size) {
        Some(end) if end <= len => Ok(()),
        _ => Err(header_err(
            at,
            format!(
                "the {what} ({} bytes at byte {}) runs past the end of the file ({len} bytes)",
                s.size, s.offset
            ),
        )),
    }
}

impl<R: Read + Seek> Reader<R> {
    /// Reads the header, attrs, ids and feature sections, and stands at
    /// the first record.
    pub fn new(mut r: R) -> Result<Self, PerfDataError> {
        let mut header = read_header(&mut r)?;
        let block = unfinished_block(&mut r, &mut header)?;
        // What the id and feature sections may take in all: the file's
        // size (in a sound file they do not overlap), so that sections
        // pointing at the same bytes cannot multiply the memory taken.
        let mut budget = Budget {
            left: header.len,
            len: header.len,
        };
        let mut attrs = read_attrs(&mut r, &header, &mut budget)?;
        let mut features = read_features(&mut r, &header, &mut budget)?;
        let unfinished = block.map(|b| {
            features.extend(b);
            header.len
        });
        let (len, data) = (header.len, header.data);
        let mut hidden = None;
        let mut hidden_attrs = 0;
        if let Some((_, s, b)) = features.iter().find(|(bit, _, _)| *bit == FEAT_HIDDEN) {
            let (more, region) =
                hidden_section(b, len).map_err(|(at, reason)| PerfDataError::Feature {
                    feature: FEAT_HIDDEN,
                    offset: s.offset + at as u64,
                    reason,
                })?;
            hidden_attrs = more.len();
            attrs.extend(more);
            hidden = Some(Stream::new(region));
        }
        Ok(Reader {
            r,
            attrs,
            hidden_attrs,
            features,
            data: Stream {
                tolerant: unfinished.is_some(),
                ..Stream::new(data)
            },
            hidden,
            map: None,
            unfinished,
            unpacked: None,
        })
    }

    /// Whether the file was never finished, and where its whole records
    /// end (see [`Unfinished`]); `None` for a finished file.
    pub fn unfinished(&self) -> Option<Unfinished> {
        self.unfinished.map(|len| Unfinished {
            len,
            whole_to: self.data.cut.unwrap_or(self.data.pos),
        })
    }

    /// The attrs, in file order, with their ids.
    pub fn attrs(&self) -> &[FileAttr] {
        &self.attrs
    }

    /// The bytes of a feature section, and where it is.
    pub(crate) fn feature(&self, bit: u32) -> Option<(Section, &[u8])> {
        self.features
            .iter()
            .find(|(b, _, _)| *b == bit)
            .map(|(_, s, b)| (*s, b.as_slice()))
    }

    #[cfg(test)]
    /// How many of the last [`Reader::attrs`] are probes hidden from
    /// perf (`FEAT_HIDDEN`).
    pub(crate) fn hidden_attrs(&self) -> usize {
        self.hidden_attrs
    }

    /// The next record, or `None` at the end of the data section. The
    /// records a `PERF_RECORD_COMPRESSED` holds come in its place, one
    /// by one, with its index and offset.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<FileRecord<'_>>, PerfDataError> {
        const WHAT: &str = "data section";
        if self.unpacked.is_some() || self.next_is_compressed() {
            loop {
                if self.unpacked.as_ref().is_some_and(Decompressor::has_record) {
                    return Ok(self.next_unpacked());
                }
                if !self.next_is_compressed() {
                    break;
                }
                self.unpack_next()?;
            }
        }
        match &mut self.map {
            Some(m) => {
                m.reading(self.data.pos);
                self.data.next_mapped(&m.map, WHAT)
            }
            None => self.data.next(&mut self.r, WHAT),
        }
    }

    /// True when the next record of the data section is a compressed one.
    fn next_is_compressed(&mut self) -> bool {
        let kind = match &self.map {
            Some(m) => self.data.peek_kind_mapped(&m.map),
            None => self.data.peek_kind(&mut self.r),
        };
        matches!(kind, Some(RECORD_COMPRESSED | RECORD_COMPRESSED2))
    }

    /// Reads the compressed record that comes next and decompresses it.
    #[cold]
    fn unpack_next(&mut self) -> Result<(), PerfDataError> {
        const WHAT: &str = "data section";
        let unpacked = match &mut self.unpacked {
            Some(d) => d,
            None => {
                self.unpacked
                    .insert(Decompressor::new().map_err(|e| PerfDataError::Record {
                        index: self.data.index,
                        kind: RECORD_COMPRESSED,
                        offset: self.data.pos,
                        reason: e.to_string(),
                    })?)
            }
        };
        let rec = match &mut self.map {
            Some(m) => self.data.next_mapped(&m.map, WHAT)?,
            None => self.data.next(&mut self.r, WHAT)?,
        };
        let Some(rec) = rec else {
            return Ok(());
        };
        unpacked
            .feed(rec.kind, rec.body, rec.offset)
            .map_err(|reason| PerfDataError::Record {
                index: rec.index,
                kind: rec.kind,
                offset: rec.offset,
                reason: format!("decompressing its records: {reason}"),
            })
    }

    /// The next record a compressed record held.
    fn next_unpacked(&mut self) -> Option<FileRecord<'_>> {
        let index = self.data.index.saturating_sub(1);
        let d = self.unpacked.as_mut()?;
        let offset = d.offset;
        let (kind, misc, body) = d.next()?;
        Some(FileRecord {
            index,
            offset,
            kind,
            misc,
            body,
        })
    }

    /// The next record of the hidden probes' region (`FEAT_HIDDEN`),
    /// or `None` at its end or when the file has none.
    pub(crate) fn next_hidden_record(&mut self) -> Result<Option<FileRecord<'_>>, PerfDataError> {
        const WHAT: &str = "hidden probes' region";
        match (&mut self.hidden, &self.map) {
            (Some(h), Some(m)) => h.next_mapped(&m.map, WHAT),
            (Some(h), None) => h.next(&mut self.r, WHAT),
            (None, _) => Ok(None),
        }
    }

    /// The whole file when it is mapped ([`Reader::from_file`]): every
    /// record's body is a slice of it, valid as long as the reader.
    pub(crate) fn mapped_bytes(&self) -> Option<&[u8]> {
        self.map.as_ref().map(|m| &m.map[..])
    }

    /// perf's sections (host, CPUs, command line) and kprobe-perf's own
    /// (probes, symbols, notes). Fails for a file without kprobe-perf's
    /// section: one `perf record` wrote.
    pub fn metadata(&self) -> Result<Metadata, PerfDataError> {
        let mut meta = Metadata {
            attrs: self.attrs.iter().map(|a| a.attr.clone()).collect(),
            ids: self.attrs.iter().map(|a| a.ids.clone()).collect(),
            hidden: self.hidden_attrs,
            ..Default::default()
        };
        let string = |bit: u32| -> Result<String, PerfDataError> {
            let Some((s, b)) = self.feature(bit) else {
                return Ok(String::new());
            };
            read_string(b, 0)
                .map(|(s, _)| s)
                .map_err(|reason| PerfDataError::Feature {
                    feature: bit,
                    offset: s.offset,
                    reason,
                })
        };
        meta.hostname = string(FEAT_HOSTNAME)?;
        meta.osrelease = string(FEAT_OSRELEASE)?;
        if let Some((_, b)) = self.feature(FEAT_NRCPUS) {
            meta.nr_cpus = (u32_at(b, 0), u32_at(b, 4));
        }
        if let Some((s, b)) = self.feature(FEAT_CMDLINE) {
            let n = u32_at(b, 0);
            let mut at = 4;
            for _ in 0..n {
                let (arg, next) = read_string(b, at).map_err(|reason| PerfDataError::Feature {
                    feature: FEAT_CMDLINE,
                    offset: s.offset + at as u64,
                    reason,
                })?;
                meta.cmdline.push(arg);
                at = next;
            }
        }
        let Some((s, b)) = self.feature(FEAT_KPROBE_PERF) else {
            return Err(header_err(
                72,
                "no kprobe-perf section (feature bit 200): the file was not written by kprobe-perf (its perf.data writer adds this section); read it with perf script",
            ));
        };
        let text = std::str::from_utf8(b).map_err(|e| PerfDataError::Feature {
            feature: FEAT_KPROBE_PERF,
            offset: s.offset + e.valid_up_to() as u64,
            reason: "not UTF-8".into(),
        })?;
        meta.decode_private(text)
            .map_err(|reason| PerfDataError::Feature {
                feature: FEAT_KPROBE_PERF,
                offset: s.offset,
                reason,
            })?;
        Ok(meta)
    }
}

impl Reader<std::fs::File> {
    /// As [`Reader::new`], reading a file the fastest way for what it
    /// holds: when its samples carry user stacks (`--call-graph dwarf`,
    /// kilobytes a sample), the file is mapped and records, stacks
    /// included, are read in place rather than copied, a thread mapping
    /// the pages ahead of the reader (it ends with the reader); other
    /// files, of small records, are read through a buffer, which costs
    /// less than mapping them. `file` must be a regular file that is not
    /// truncated while it is read.
    pub fn from_file(file: std::fs::File) -> Result<Self, PerfDataError> {
        let reader = Reader::new(file)?;
        // perf_event_attr.sample_type is at byte 24.
        let stacks = reader.attrs.iter().any(|a| {
            a.attr
                .get(24..32)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_ne_bytes)
                .is_some_and(|t| {
                    t & u64::from(perf_event_open_sys::bindings::PERF_SAMPLE_STACK_USER) != 0
                })
        });
        if stacks {
            reader.into_mapped()
        } else {
            Ok(reader)
        }
    }

    /// As [`Reader::new`], with the file mapped whatever it holds (see
    /// [`Reader::from_file`]).
    #[cfg(test)]
    pub(crate) fn mapped(file: std::fs::File) -> Result<Self, PerfDataError> {
        Reader::new(file)?.into_mapped()
    }

    fn into_mapped(mut self) -> Result<Self, PerfDataError> {
        let from = self.data.pos as usize;
        let map = Mapped::new(&self.r, from).map_err(io_at("mapping the file", 0))?;
        self.map = Some(map);
        Ok(self)
    }
}

impl Stream {
    fn new(sec: Section) -> Stream {
        Stream {
            sec,
            pos: sec.offset,
            index: 0,
            buf: Vec::new(),
            start: 0,
            end: 0,
            tolerant: false,
            cut: None,
        }
    }

    /// The type of the record at `pos`, if its header can be read.
    fn peek_kind(&mut self, r: &mut (impl Read + Seek)) -> Option<u32> {
        let end = self.sec.offset + self.sec.size;
        if end.saturating_sub(self.pos) < 8 || self.fill(r, 8).is_err() {
            return None;
        }
        let h = self.buf.get(self.start..self.start + 4)?;
        Some(u32::from_ne_bytes([h[0], h[1], h[2], h[3]]))
    }

    /// [`Stream::peek_kind`] in a mapped file.
    fn peek_kind_mapped(&self, map: &[u8]) -> Option<u32> {
        let end = self.sec.offset + self.sec.size;
        if end.saturating_sub(self.pos) < 8 {
            return None;
        }
        let at = usize::try_from(self.pos).ok()?;
        let h = map.get(at..at.checked_add(4)?)?;
        Some(u32::from_ne_bytes([h[0], h[1], h[2], h[3]]))
    }

    /// In an unfinished file ([`Stream::tolerant`]), ends the section at
    /// `pos`, where the record is not whole: `Ok(None)`; otherwise `err`.
    #[cold]
    fn cut_or<T>(&mut self, err: PerfDataError) -> Result<Option<T>, PerfDataError> {
        if !self.tolerant {
            return Err(err);
        }
        self.cut = Some(self.pos);
        self.sec.size = self.pos - self.sec.offset;
        Ok(None)
    }

    /// Makes at least `want` bytes (at most what the section still holds)
    /// available at `buf[start..]`.
    #[inline]
    fn fill(&mut self, r: &mut (impl Read + Seek), want: usize) -> io::Result<()> {
        if self.end - self.start >= want {
            return Ok(());
        }
        self.refill(r, want)
    }

    /// [`Stream::fill`] when the buffer runs short: moves what is left to
    /// the front and reads more (from where this stream stands: another
    /// may have moved the file's position).
    #[cold]
    fn refill(&mut self, r: &mut (impl Read + Seek), want: usize) -> io::Result<()> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        let read_at = self.pos + self.end as u64;
        let left = self.sec.offset + self.sec.size - self.pos;
        let target = (left.min(CHUNK.max(want) as u64)) as usize;
        if self.buf.len() < target {
            self.buf.resize(target, 0);
        }
        r.seek(SeekFrom::Start(read_at))?;
        while self.end < want {
            let n = r.read(&mut self.buf[self.end..target])?;
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            self.end += n;
        }
        Ok(())
    }

    /// The next record of the section (called `what` in errors), or
    /// `None` at its end.
    #[inline(always)]
    fn next(
        &mut self,
        r: &mut (impl Read + Seek),
        what: &str,
    ) -> Result<Option<FileRecord<'_>>, PerfDataError> {
        let end = self.sec.offset + self.sec.size;
        if self.pos >= end {
            return Ok(None);
        }
        // The usual record: whole in the buffer, of a sane size.
        let usual = self
            .buf
            .get(self.start..self.end)
            .and_then(|b| b.first_chunk::<8>())
            .map(|h| (*h, usize::from(u16::from_ne_bytes([h[6], h[7]]))))
            .filter(|&(_, size)| {
                size >= 8 && self.start + size <= self.end && size as u64 <= end - self.pos
            });
        let Some((h, size)) = usual else {
            return self.next_refilled(r, what);
        };
        let (index, offset) = (self.index, self.pos);
        let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let at = self.start;
        self.start += size;
        self.pos += size as u64;
        self.index += 1;
        let body = self.buf.get(at + 8..at + size).unwrap_or(&[]);
        Ok(Some(FileRecord {
            index,
            offset,
            kind,
            misc,
            body,
        }))
    }

    /// [`Stream::next`] of a record not whole in the buffer: refills it
    /// first.
    #[inline(never)]
    fn next_refilled(
        &mut self,
        r: &mut (impl Read + Seek),
        what: &str,
    ) -> Result<Option<FileRecord<'_>>, PerfDataError> {
        let end = self.sec.offset + self.sec.size;
        if let Err(e) = self.check_room(end, what) {
            return self.cut_or(e);
        }
        self.fill(r, 8)
            .map_err(|e| self.error(0, format!("reading the header: {e}")))?;
        let h = &self.buf[self.start..self.start + 8];
        let (kind, misc, size) = match self.header(h, end, what) {
            Ok(h) => h,
            Err(e) => return self.cut_or(e),
        };
        self.fill(r, size as usize)
            .map_err(|e| self.error(kind, format!("reading {size} bytes: {e}")))?;
        let at = self.start;
        self.start += size as usize;
        let (index, offset) = self.advance(size);
        let body = &self.buf[at + 8..at + size as usize];
        Ok(Some(FileRecord {
            index,
            offset,
            kind,
            misc,
            body,
        }))
    }

    /// [`Stream::next`] in a mapped file: the record is a slice of `map`.
    fn next_mapped<'m>(
        &mut self,
        map: &'m [u8],
        what: &str,
    ) -> Result<Option<FileRecord<'m>>, PerfDataError> {
        let end = self.sec.offset + self.sec.size;
        if self.pos >= end {
            return Ok(None);
        }
        if let Err(e) = self.check_room(end, what) {
            return self.cut_or(e);
        }
        let short = |n: u64| format!("the file ends at byte {}, inside {n} bytes", map.len());
        let at = usize::try_from(self.pos).unwrap_or(usize::MAX);
        let h = map
            .get(at..at.saturating_add(8))
            .ok_or_else(|| self.error(0, format!("reading the header: {}", short(8))))?;
        let (kind, misc, size) = match self.header(h, end, what) {
            Ok(h) => h,
            Err(e) => return self.cut_or(e),
        };
        let body = map
            .get(at + 8..at.saturating_add(size as usize))
            .ok_or_else(|| self.error(kind, format!("reading {size} bytes: {}", short(size))))?;
        // Records mostly follow with the same size: the end of the third
        // record after this one (where a sample's stack dump keeps its
        // size) and the start of the fourth start coming into the caches.
        let ahead = at.saturating_add(4 * size as usize);
        let near = map.get(ahead.saturating_sub(256)..).unwrap_or(&[]);
        crate::attach::sys::prefetch(near.get(..512).unwrap_or(near));
        let (index, offset) = self.advance(size);
        Ok(Some(FileRecord {
            index,
            offset,
            kind,
            misc,
            body,
        }))
    }

    /// An error about the record at `pos`.
    fn error(&self, kind: u32, reason: String) -> PerfDataError {
        PerfDataError::Record {
            index: self.index,
            kind,
            offset: self.pos,
            reason,
        }
    }

    /// Checks that a record header fits in what is left of the section.
    fn check_room(&self, end: u64, what: &str) -> Result<(), PerfDataError> {
        if end - self.pos < 8 {
            return Err(self.error(
                0,
                format!(
                    "only {} bytes left in the {what}, less than a record header",
                    end - self.pos
                ),
            ));
        }
        Ok(())
    }

    /// The type, misc and size of the record header `h` at `pos`,
    /// checked against the section's `end`.
    fn header(&self, h: &[u8], end: u64, what: &str) -> Result<(u32, u16, u64), PerfDataError> {
        let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let size = u64::from(u16::from_ne_bytes([h[6], h[7]]));
        if size < 8 {
            return Err(self.error(kind, format!("size {size} is smaller than its header")));
        }
        if size > end - self.pos {
            return Err(self.error(
                kind,
                format!("size {size} runs past the end of the {what} at byte {end}"),
            ));
        }
        Ok((kind, misc, size))
    }

    /// Steps past the record at `pos` of `size` bytes; returns its index
    /// and offset.
    fn advance(&mut self, size: u64) -> (u64, u64) {
        let at = (self.index, self.pos);
        self.pos += size;
        self.index += 1;
        at
    }
}

/// The hidden probes' attrs and the region of their records, from the
/// bytes of a `FEAT_HIDDEN` section of a `len`-byte file; an error
/// gives the offset in the section and the reason.
fn hidden_section(b: &[u8], len: u64) -> Result<(Vec<FileAttr>, Section), (usize, String)> {
    let short = |at: usize, what: &str| {
        (
            at,
            format!("the section ends ({} bytes) inside {what}", b.len()),
        )
    };
    if b.len() < 8 {
        return Err(short(0, "its counts"));
    }
    let (n, attr_size) = (u32_at(b, 0) as usize, u32_at(b, 4) as usize);
    if !(ATTR_SIZE_VER0 as usize..=MAX_ATTR_SIZE as usize).contains(&attr_size) {
        return Err((4, format!("attr size {attr_size}")));
    }
    let mut attrs = Vec::new();
    let mut at = 8;
    for i in 0..n {
        let mut a = b
            .get(at..at + attr_size)
            .ok_or_else(|| short(at, &format!("hidden attr #{i}")))?
            .to_vec();
        let declared = u32_at(&a, 4) as usize;
        if declared < ATTR_SIZE_VER0 as usize || declared > attr_size {
            return Err((
                at + 4,
                format!("hidden attr #{i} declares {declared} bytes in a {attr_size}-byte slot"),
            ));
        }
        a.truncate(declared);
        at += attr_size;
        if b.len() < at + 4 {
            return Err(short(at, &format!("the id count of hidden attr #{i}")));
        }
        let count = u32_at(b, at) as usize;
        at += 4;
        let ids = b
            .get(at..at.saturating_add(count.saturating_mul(8)))
            .ok_or_else(|| short(at, &format!("the {count} ids of hidden attr #{i}")))?
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect();
        at += count * 8;
        attrs.push(FileAttr { attr: a, ids });
    }
    if b.len() < at + 16 {
        return Err(short(at, "the region's offset and size"));
    }
    let region = Section {
        offset: u64_at(b, at),
        size: u64_at(b, at + 8),
    };
    if region
        .offset
        .checked_add(region.size)
        .is_none_or(|e| e > len)
    {
        return Err((
            at,
            format!(
                "the region of hidden records ({} bytes at byte {}) runs past the end of the file ({len} bytes)",
                region.size, region.offset
            ),
        ));
    }
    Ok((attrs, region))
}

/// A perf string at `at`: u32 length, then that many bytes (NUL-padded).
/// Returns the string and the offset after it.
fn read_string(b: &[u8], at: usize) -> Result<(String, usize), String> {
    let len = u32_at(b, at) as usize;
    let start = at + 4;
    let bytes = start
        .checked_add(len)
        .and_then(|end| b.get(start..end))
        .ok_or_else(|| {
            format!(
                "a {len}-byte string at {at} runs past the section's {} bytes",
                b.len()
            )
        })?;
    let text = bytes.split(|&c| c == 0).next().unwrap_or(bytes);
    Ok((String::from_utf8_lossy(text).into_owned(), start + len))
}

fn io_at(what: &'static str, offset: u64) -> impl FnOnce(io::Error) -> PerfDataError {
    move |source: io::Error| PerfDataError::Io {
        what: what.into(),
        offset,
        source,
    }
}

/// What the header says, checked against the file's length.
struct Header {
    /// The file's length.
    len: u64,
    /// The header's bytes.
    h: [u8; HEADER_SIZE as usize],
    attr_size: u64,
    attrs_sec: Section,
    data: Section,
}

/// The bytes the id and feature sections may still take (see
/// [`Reader::new`]).
struct Budget {
    left: u64,
    len: u64,
}

impl Budget {
    fn spend(&mut self, size: u64, at: u64, what: &str) -> Result<(), PerfDataError> {
        let len = self.len;
        self.left = self.left.checked_sub(size).ok_or_else(|| {
            header_err(
                at,
                format!("the {what} ({size} bytes) overlaps others: the sections hold more bytes than the file ({len} bytes)"),
            )
        })?;
        Ok(())
    }
}

/// Reads and checks the header: magic, sizes, the attr and data sections.
fn read_header<R: Read + Seek>(r: &mut R) -> Result<Header, PerfDataError> {
    let len = r
        .seek(SeekFrom::End(0))
        .map_err(io_at("finding the file size", 0))?;
    if len < HEADER_SIZE {
        return Err(header_err(
            len,
            format!("the file ends after {len} bytes, inside the {HEADER_SIZE}-byte header"),
        ));
    }
    let mut h = [0u8; HEADER_SIZE as usize];
    r.seek(SeekFrom::Start(0))
        .and_then(|_| r.read_exact(&mut h))
        .map_err(io_at("reading the header", 0))?;
    let magic = u64_at(&h, 0);
    if magic != MAGIC {
        let reason = if magic.swap_bytes() == MAGIC {
            "a big-endian perf.data file, which kprobe-perf does not read".to_string()
        } else {
            format!("magic 0x{magic:016x} is not PERFILE2: not a perf.data file, or one whose recording did not finish")
        };
        return Err(header_err(0, reason));
    }
    if u64_at(&h, 8) != HEADER_SIZE {
        return Err(header_err(
            8,
            format!("header size {} (expected {HEADER_SIZE})", u64_at(&h, 8)),
        ));
    }
    let attr_size = u64_at(&h, 16);
    let section = |at: usize| Section {
        offset: u64_at(&h, at),
        size: u64_at(&h, at + 8),
    };
    let (attrs_sec, data) = (section(24), section(40));
    if !(ATTR_SIZE_VER0 + 16..=MAX_ATTR_SIZE).contains(&attr_size) {
        return Err(header_err(16, format!("attr size {attr_size}")));
    }
    check_section(attrs_sec, len, "attr section", 24)?;
    // An unfinished file's data may end before its header says
    // ([`unfinished_block`] checks it).
    if h[72..].iter().any(|&b| b != 0) {
        check_section(data, len, "data section", 40)?;
    }
    if attrs_sec.size % attr_size != 0 || attrs_sec.size / attr_size > MAX_ATTRS {
        return Err(header_err(
            32,
            format!(
                "attr section of {} bytes does not hold whole {attr_size}-byte attrs",
                attrs_sec.size
            ),
        ));
    }
    Ok(Header {
        len,
        h,
        attr_size,
        attrs_sec,
        data,
    })
}

/// The [`super::UNFINISHED`] block of a file never finished, as the
/// feature sections it stands for (kprobe-perf's metadata and hidden
/// probes); its data section then runs to the end of the file. `None`
/// for a finished file (one with feature bits).
#[allow(clippy::type_complexity)]
fn unfinished_block<R: Read + Seek>(
    r: &mut R,
    header: &mut Header,
) -> Result<Option<Vec<(u32, Section, Vec<u8>)>>, PerfDataError> {
    if header.h[72..].iter().any(|&b| b != 0) {
        return Ok(None);
    }
    let mut magic = [0u8; 8];
    if header.len >= HEADER_SIZE + 8 {
        r.seek(SeekFrom::Start(HEADER_SIZE))
            .and_then(|_| r.read_exact(&mut magic))
            .map_err(io_at("reading the header", HEADER_SIZE))?;
    }
    let data = header.data;
    if &magic != super::UNFINISHED {
        check_section(data, header.len, "data section", 40)?;
        return Ok(None);
    }
    check_section(
        Section {
            offset: data.offset,
            size: 0,
        },
        header.len,
        "data section",
        40,
    )?;
    let mut parts = Vec::new();
    let mut at = HEADER_SIZE + 8;
    for bit in [FEAT_KPROBE_PERF, FEAT_HIDDEN] {
        let mut size = [0u8; 8];
        r.seek(SeekFrom::Start(at))
            .and_then(|_| r.read_exact(&mut size))
            .map_err(io_at("reading the unfinished file's metadata", at))?;
        let s = Section {
            offset: at + 8,
            size: u64::from_le_bytes(size),
        };
        check_section(s, header.data.offset, "unfinished file's metadata", at)?;
        let mut b = vec![0u8; s.size as usize];
        r.read_exact(&mut b)
            .map_err(io_at("reading the unfinished file's metadata", s.offset))?;
        at = s.offset + s.size.next_multiple_of(8);
        if !b.is_empty() {
            parts.push((bit, s, b));
        }
    }
    header.data.size = header.len - header.data.offset;
    Ok(Some(parts))
}

/// Reads the attrs and the ids of each.
fn read_attrs<R: Read + Seek>(
    r: &mut R,
    header: &Header,
    budget: &mut Budget,
) -> Result<Vec<FileAttr>, PerfDataError> {
    let Header {
        len,
        attr_size,
        attrs_sec,
        ..
    } = *header;
    let mut attrs = Vec::new();
    for i in 0..attrs_sec.size / attr_size {
        let at = attrs_sec.offset + i * attr_size;
        let mut a = vec![0u8; attr_size as usize];
        r.seek(SeekFrom::Start(at))
            .and_then(|_| r.read_exact(&mut a))
            .map_err(io_at("reading an attr", at))?;
        let body = attr_size as usize - 16;
        let declared = u32_at(&a, 4) as usize;
        if declared < ATTR_SIZE_VER0 as usize || declared > body {
            return Err(header_err(
                at + 4,
                format!("attr #{i} declares {declared} bytes in a {body}-byte slot"),
            ));
        }
        let ids_sec = Section {
            offset: u64_at(&a, body),
            size: u64_at(&a, body + 8),
        };
        check_section(ids_sec, len, &format!("id section of attr #{i}"), at)?;
        if !ids_sec.size.is_multiple_of(8) {
            return Err(header_err(
                at + body as u64 + 8,
                format!("id section of attr #{i} has {} bytes", ids_sec.size),
            ));
        }
        budget.spend(ids_sec.size, at, &format!("id section of attr #{i}"))?;
        let mut raw = vec![0u8; ids_sec.size as usize];
        r.seek(SeekFrom::Start(ids_sec.offset))
            .and_then(|_| r.read_exact(&mut raw))
            .map_err(io_at("reading event ids", ids_sec.offset))?;
        let ids = raw
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect::<Vec<u64>>();
        a.truncate(declared);
        attrs.push(FileAttr { attr: a, ids });
    }
    Ok(attrs)
}

/// Reads the feature sections: a table of sections right after the data
/// section, one per set bit, in bit order.
fn read_features<R: Read + Seek>(
    r: &mut R,
    header: &Header,
    budget: &mut Budget,
) -> Result<Vec<(u32, Section, Vec<u8>)>, PerfDataError> {
    let Header { len, h, data, .. } = *header;
    // Features: a table of sections right after the data section, one
    // per set bit, in bit order.
    let bits: Vec<u32> = (0..FEATURE_BITS)
        .filter(|b| u64_at(&h, 72 + (b / 64) as usize * 8) >> (b % 64) & 1 == 1)
        .collect();
    let table_at = data.offset + data.size;
    let table = Section {
        offset: table_at,
        size: bits.len() as u64 * 16,
    };
    check_section(table, len, "feature table", 72)?;
    let mut raw = vec![0u8; table.size as usize];
    r.seek(SeekFrom::Start(table_at))
        .and_then(|_| r.read_exact(&mut raw))
        .map_err(io_at("reading the feature table", table_at))?;
    let mut features = Vec::new();
    for (i, &bit) in bits.iter().enumerate() {
        let s = Section {
            offset: u64_at(&raw, i * 16),
            size: u64_at(&raw, i * 16 + 8),
        };
        let at = table_at + i as u64 * 16;
        check_section(s, len, &format!("feature section {bit}"), at)?;
        if s.size > MAX_FEATURE {
            return Err(header_err(
                at,
                format!("feature section {bit} of {} bytes", s.size),
            ));
        }
        budget.spend(s.size, at, &format!("feature section {bit}"))?;
        let mut b = vec![0u8; s.size as usize];
        r.seek(SeekFrom::Start(s.offset))
            .and_then(|_| r.read_exact(&mut b))
            .map_err(io_at("reading a feature section", s.offset))?;
        features.push((bit, s, b));
    }
    Ok(features)
}
