//! A perf ring buffer mapped from a perf event fd, read without copying.
//!
//! The kernel writes records at `data_head`; we read up to it (loaded with
//! acquire ordering, so the record bytes are visible), hand each record to a
//! callback as one or two borrowed slices, then publish `data_tail` with
//! release ordering so the kernel may reuse the space. Slices are formed only
//! over `[tail, head)`, which the kernel does not write until the tail moves.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

use crate::attach::sys::{self, Mapping};

/// Size of `struct perf_event_header`.
const HEADER_SIZE: usize = 8;

/// One raw record (from a ring, a perf.data file, or made by the session),
/// borrowed until the callback returns: the one type raw records travel
/// in, from the ring to the decoder, the sinks and the perf.data writer.
#[derive(Debug, Clone, Copy)]
pub struct RingRecord<'a> {
    /// `perf_event_header.type`.
    pub kind: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The record body after the header; two parts when it wraps.
    pub body: (&'a [u8], &'a [u8]),
}

impl<'a> RingRecord<'a> {
    /// A record of type `kind` with header flags `misc` and `body` (the
    /// bytes after the header, in one or two parts).
    pub fn new(kind: u32, misc: u16, body: (&'a [u8], &'a [u8])) -> RingRecord<'a> {
        RingRecord { kind, misc, body }
    }
}

/// A mapped ring buffer of one perf event fd.
pub(crate) struct RingBuffer {
    map: Mapping,
    data_offset: usize,
    data_size: usize,
    /// How many times `data_tail` was stored, for the tests.
    #[cfg(test)]
    tail_stores: usize,
}

impl RingBuffer {
    /// Maps `data_pages` (a power of two) data pages of `fd`.
    pub(crate) fn new(fd: &OwnedFd, data_pages: usize) -> io::Result<RingBuffer> {
        if !data_pages.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring size must be a power of two pages, not {data_pages}"),
            ));
        }
        let map = Mapping::new(fd, data_pages)?;
        let page = sys::page_size();
        let meta = map.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the first page of the mapping is the kernel's
        // perf_event_mmap_page; data_offset/data_size are set by the kernel
        // before mmap returns and never change afterwards.
        let (off, size) = unsafe {
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile(),
                std::ptr::addr_of!((*meta).data_size).read_volatile(),
            )
        };
        // Kernels before 4.1 leave these 0: the data area follows page one.
        let (data_offset, data_size) = if size == 0 {
            (page, data_pages * page)
        } else {
            (
                usize::try_from(off).unwrap_or(page),
                usize::try_from(size).unwrap_or(data_pages * page),
            )
        };
        if data_offset.checked_add(data_size) != Some(map.len()) || !data_size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "perf ring layout does not match the mapping",
            ));
        }
        Ok(RingBuffer {
            map,
            data_offset,
            data_size,
            #[cfg(test)]
            tail_stores: 0,
        })
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        let meta = self.map.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: data_head and data_tail are naturally aligned u64 fields of
        // the metadata page that live as long as the mapping; the kernel and
        // we access them atomically (the kernel with smp_store_release /
        // READ_ONCE), so viewing them as AtomicU64 is sound.
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)),
            )
        }
    }

    /// Bytes written by the kernel and not yet consumed.
    pub(crate) fn pending(&self) -> u64 {
        let (head, tail) = self.head_tail();
        head.load(Ordering::Acquire)
            .wrapping_sub(tail.load(Ordering::Relaxed))
    }

    /// Hands every available record to `f`, then frees their space.
    /// Returns the number of records read. A corrupt header ends the drain
    /// as [`RingBuffer::try_drain`] describes; the records before it are
    /// counted, the bytes from it on are dropped.
    pub(crate) fn drain(&mut self, f: impl FnMut(RingRecord<'_>)) -> usize {
        self.try_drain(f).unwrap_or_else(|e| e.delivered)
    }

    /// [`RingBuffer::drain`], then hands `bytes` the records' bytes as the
    /// kernel wrote them (headers included; two parts when they wrap
    /// around the ring's end) before their space is freed: what a file
    /// writer copies in one write, as perf record does. After a corrupt
    /// header, only the good records before it are given.
    #[inline(always)]
    pub(crate) fn drain_with_bytes(
        &mut self,
        f: impl FnMut(RingRecord<'_>),
        bytes: impl FnOnce((&[u8], &[u8])),
    ) -> usize {
        self.drain_then(f, bytes).unwrap_or_else(|e| e.delivered)
    }

    /// Hands `bytes` everything pending, as the kernel wrote it (whole
    /// records, in one or two parts when they wrap around the ring's
    /// end), then frees it; returns how many bytes that was. No record is
    /// looked at, as perf record reads a ring: whoever keeps the bytes
    /// parses them later (a corrupt header is then found there).
    pub(crate) fn take_bytes(&mut self, bytes: impl FnOnce((&[u8], &[u8]))) -> usize {
        let (head, tail) = {
            let (head, tail) = self.head_tail();
            (head.load(Ordering::Acquire), tail.load(Ordering::Relaxed))
        };
        // The kernel never has more than the data area pending.
        let len = (head.wrapping_sub(tail) as usize).min(self.data_size);
        if len == 0 {
            return 0;
        }
        let start = (tail & (self.data_size as u64 - 1)) as usize;
        // SAFETY: the data area is `data_size` bytes at `data_offset` in the
        // mapping (checked in `new`); `[tail, tail + len)` lies in
        // `[tail, head)`, which the kernel finished writing before
        // publishing `head` (acquire load above) and does not reuse before
        // the tail is stored below; `len <= data_size` and `start` is
        // masked into the area. The slices are dropped when `bytes`
        // returns, before the store.
        bytes(unsafe {
            let data = self.map.as_ptr().add(self.data_offset);
            wrapped(data, start, len, self.data_size)
        });
        self.store_tail(tail.wrapping_add(len as u64));
        len
    }

    /// Hands every available record to `f`, in the order the kernel wrote
    /// them, then frees their space by storing `data_tail` once. Returns the
    /// number of records read.
    ///
    /// A header whose size cannot be right (under 8 bytes, more than is
    /// pending, or more than the ring holds) means the bytes from there on
    /// cannot be parsed: the drain stops, frees everything pending (the
    /// kernel could otherwise stall on a full ring), and returns
    /// [`CorruptRecord`], which says where and how many records came
    /// before. The next drain starts at the kernel's next record.
    pub(crate) fn try_drain(
        &mut self,
        f: impl FnMut(RingRecord<'_>),
    ) -> Result<usize, CorruptRecord> {
        self.drain_then(f, |_| ())
    }

    /// [`RingBuffer::try_drain`], handing `bytes` the good records' bytes
    /// before the tail moves.
    #[inline(always)]
    fn drain_then(
        &mut self,
        mut f: impl FnMut(RingRecord<'_>),
        bytes: impl FnOnce((&[u8], &[u8])),
    ) -> Result<usize, CorruptRecord> {
        let (head, mut tail) = {
            let (head, tail) = self.head_tail();
            (head.load(Ordering::Acquire), tail.load(Ordering::Relaxed))
        };
        // The data size is a power of two (checked in `new`): a position
        // in the area is a mask away, not a division.
        let mask = self.data_size - 1;
        // SAFETY: the data area is `data_size` bytes at `data_offset` within
        // the mapping (checked in `new`). We only read `[tail, head)`, which
        // the kernel finished writing before publishing `head` (acquire load
        // above) and will not overwrite until we store a new tail below.
        let data = unsafe { self.map.as_ptr().add(self.data_offset) };
        let mut count = 0;
        let mut corrupt = None;
        let first = tail;
        while head.wrapping_sub(tail) >= HEADER_SIZE as u64 {
            let start = (tail & mask as u64) as usize;
            // SAFETY: `data` is the area of `mask + 1` bytes and `start`
            // is masked into it; `[tail, head)` holds at least a header.
            let hdr = unsafe { header_at(data, start, mask) };
            let kind = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let misc = u16::from_ne_bytes([hdr[4], hdr[5]]);
            let rec_size = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
            let pending = head.wrapping_sub(tail);
            if rec_size < HEADER_SIZE || rec_size as u64 > pending || rec_size > self.data_size {
                // Drop everything that is pending rather than read garbage.
                corrupt = Some(CorruptRecord {
                    position: tail,
                    offset: start,
                    kind,
                    size: rec_size,
                    pending,
                    data_size: self.data_size,
                    delivered: count,
                });
                tail = head;
                break;
            }
            let body_start = (start + HEADER_SIZE) & mask;
            let body_len = rec_size - HEADER_SIZE;
            // SAFETY: `body_len < rec_size <= data_size` and `body_start`
            // is masked into the area; the body lies inside `[tail, head)`
            // (`rec_size <= pending`), which the kernel does not reuse
            // before `tail` is stored, after the slices are dropped.
            let body = unsafe { wrapped(data, body_start, body_len, self.data_size) };
            f(RingRecord { kind, misc, body });
            tail = tail.wrapping_add(rec_size as u64);
            count += 1;
        }
        // The good records end at a corrupt header, else where the tail
        // stopped; at most the data area: every good record fitted in
        // what was pending, which the kernel keeps within it.
        let good = corrupt.as_ref().map_or(tail, |c| c.position);
        let len = (good.wrapping_sub(first) as usize).min(self.data_size);
        if len > 0 {
            let start = (first & mask as u64) as usize;
            // SAFETY: `[first, good)` is inside `[tail, head)` as read at
            // the start, finished by the kernel and not reused before the
            // tail is stored below; `len <= data_size` and `start` is
            // masked into the area. The slices are dropped when `bytes`
            // returns, before the store.
            bytes(unsafe { wrapped(data, start, len, self.data_size) });
        }
        self.store_tail(tail);
        match corrupt {
            Some(e) => Err(e),
            None => Ok(count),
        }
    }

    /// Publishes `tail` (release: the kernel may reuse the space only
    /// after our reads of it).
    fn store_tail(&mut self, tail: u64) {
        #[cfg(test)]
        {
            self.tail_stores += 1;
        }
        self.head_tail().1.store(tail, Ordering::Release);
    }
}

/// A record header in a forward ring whose size cannot be right: the
/// bytes from it to `data_head` were dropped, since nothing after it can be
/// found. The kernel never writes such a header, so this means the mapping
/// was written by something else or the kernel has a bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "corrupt record header in a perf ring at position {position} (byte {offset} of its {data_size}-byte data area): \
     type {kind}, size {size}, with {pending} bytes pending; those {pending} bytes were dropped after {delivered} good records. \
     Nothing but the kernel should write to the ring: if nothing else maps it, report this as a bug"
)]
pub(crate) struct CorruptRecord {
    /// `data_tail` at the bad header (a byte count since the ring began).
    pub position: u64,
    /// Its offset in the data area.
    pub offset: usize,
    /// The header's `type`.
    pub kind: u32,
    /// The header's `size`.
    pub size: usize,
    /// Bytes between the bad header and `data_head`, all dropped.
    pub pending: u64,
    /// Size of the ring's data area.
    pub data_size: usize,
    /// Records handed over before the bad header.
    pub delivered: usize,
}

/// One record copied out of an overwrite ring: header fields and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedRecord {
    /// `perf_event_header.type`.
    pub kind: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The record body after the header, joined if it wrapped.
    pub body: Vec<u8>,
}

/// A read-only ("overwrite", flight-recorder) ring of an event opened with
/// `write_backward`: the kernel writes each record just below the previous
/// one, moving `data_head` down, and overwrites the oldest records once the
/// ring is full. It is read only while the kernel's output is paused
/// (`PERF_EVENT_IOC_PAUSE_OUTPUT`), by copying the data area.
pub(crate) struct BackwardRing {
    map: Mapping,
    data_offset: usize,
    data_size: usize,
    /// `data_head` at the previous [`BackwardRing::take_new`], so a second
    /// dump holds only records written since.
    last_head: Option<u64>,
}

impl BackwardRing {
    /// Maps `data_pages` (a power of two) data pages of `fd` read-only.
    pub(crate) fn new(fd: &OwnedFd, data_pages: usize) -> io::Result<BackwardRing> {
        if !data_pages.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring size must be a power of two pages, not {data_pages}"),
            ));
        }
        let map = Mapping::new_read_only(fd, data_pages)?;
        let page = sys::page_size();
        let data_size = data_pages * page;
        if page.checked_add(data_size) != Some(map.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "perf ring layout does not match the mapping",
            ));
        }
        Ok(BackwardRing {
            map,
            data_offset: page,
            data_size,
            last_head: None,
        })
    }

    /// Copies the data area and `data_head`. Call with the output paused;
    /// otherwise the copy may hold a record the kernel is rewriting (the
    /// parser then stops at the first malformed header).
    fn snapshot(&self) -> (u64, Vec<u8>) {
        let meta = self.map.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: data_head is a naturally aligned u64 of the metadata page,
        // which lives as long as the mapping; the kernel stores it with
        // release semantics, so an acquire load makes the records below it
        // visible.
        let head = unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)) }
            .load(Ordering::Acquire);
        let mut copy = vec![0u8; self.data_size];
        // SAFETY: the data area is `data_size` bytes at `data_offset` inside
        // the mapping (checked in `new`); we copy it with volatile reads and
        // never form a reference to memory the kernel may write.
        let data = unsafe { self.map.as_ptr().add(self.data_offset) };
        for (i, b) in copy.iter_mut().enumerate() {
            // SAFETY: `i < data_size`, inside the data area.
            *b = unsafe { data.add(i).read_volatile() };
        }
        (head, copy)
    }

    /// The records written since the previous call (all of them, the first
    /// time) that are still in the ring, newest first.
    pub(crate) fn take_new(&mut self) -> Vec<OwnedRecord> {
        let (head, data) = self.snapshot();
        let limit = self.last_head.map(|prev| prev.wrapping_sub(head));
        self.last_head = Some(head);
        backward_records(&data, head, limit)
    }
}

/// Parses a copy of a backward ring's data area (`data.len()` a power of
/// two) from `head` (the kernel's `data_head`, which counts down): the
/// records, newest first, as far as they are whole. The walk stops at a
/// zero-sized header (never-written space), at a record that would run past
/// one full lap of the ring (its start was overwritten), at a malformed
/// header, or after `limit` bytes (the records already taken).
pub(crate) fn backward_records(data: &[u8], head: u64, limit: Option<u64>) -> Vec<OwnedRecord> {
    let mut out = Vec::new();
    let size = data.len();
    if size < HEADER_SIZE || !size.is_power_of_two() {
        return out;
    }
    let lap = limit.map_or(size as u64, |l| l.min(size as u64));
    let mut walked: u64 = 0;
    let byte = |at: u64| data[(at % size as u64) as usize];
    while walked + HEADER_SIZE as u64 <= lap {
        let at = head.wrapping_add(walked);
        let hdr: Vec<u8> = (0..HEADER_SIZE as u64)
            .map(|i| byte(at.wrapping_add(i)))
            .collect();
        let kind = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let misc = u16::from_ne_bytes([hdr[4], hdr[5]]);
        let rec_size = u64::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
        if rec_size < HEADER_SIZE as u64 || walked + rec_size > lap {
            break;
        }
        let body = (HEADER_SIZE as u64..rec_size)
            .map(|i| byte(at.wrapping_add(i)))
            .collect();
        out.push(OwnedRecord { kind, misc, body });
        walked += rec_size;
    }
    out
}

#[cfg(test)]
mod drain_tests;

/// The record header at `start` of the data area. The kernel keeps
/// records 8-byte aligned, so a header never runs past the area's end; it
/// is read byte by byte if one did.
///
/// # Safety
///
/// `data` points to the ring's data area of `mask + 1` readable bytes,
/// and `start <= mask`.
#[inline(always)]
unsafe fn header_at(data: *const u8, start: usize, mask: usize) -> [u8; HEADER_SIZE] {
    if start + HEADER_SIZE <= mask + 1 {
        // SAFETY: the 8 bytes from `start` lie inside the area.
        unsafe { data.add(start).cast::<[u8; HEADER_SIZE]>().read_unaligned() }
    } else {
        let mut hdr = [0u8; HEADER_SIZE];
        for (i, b) in hdr.iter_mut().enumerate() {
            // SAFETY: the index is masked into the area.
            *b = unsafe { data.add((start + i) & mask).read() };
        }
        hdr
    }
}

/// `len` bytes of the data area from `start`, as the two parts a range
/// has when it wraps around the area's end (the second empty when not).
///
/// # Safety
///
/// `data` points to the ring's data area of `size` readable bytes,
/// `start < size`, `len <= size`, and the kernel does not write those
/// bytes while the slices live.
#[inline(always)]
unsafe fn wrapped<'a>(
    data: *const u8,
    start: usize,
    len: usize,
    size: usize,
) -> (&'a [u8], &'a [u8]) {
    let first_len = len.min(size - start);
    // SAFETY: the first part runs from `start` at most to the area's end,
    // the second from the area's start for the rest (`len <= size`).
    unsafe {
        (
            std::slice::from_raw_parts(data.add(start), first_len),
            std::slice::from_raw_parts(data, len - first_len),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes records into `data` the way the kernel does in backward mode:
    /// each one at `head - size`, head moving down. Returns the new head.
    fn write_backward(data: &mut [u8], mut head: u64, records: &[(u32, Vec<u8>)]) -> u64 {
        let size = data.len() as u64;
        for (kind, body) in records {
            let len = (HEADER_SIZE + body.len()) as u64;
            head = head.wrapping_sub(len);
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&kind.to_ne_bytes());
            bytes.extend_from_slice(&0u16.to_ne_bytes());
            bytes.extend_from_slice(&(len as u16).to_ne_bytes());
            bytes.extend_from_slice(body);
            for (i, b) in bytes.iter().enumerate() {
                data[(head.wrapping_add(i as u64) % size) as usize] = *b;
            }
        }
        head
    }

    fn rec(n: u64) -> (u32, Vec<u8>) {
        (
            9,
            n.to_ne_bytes().iter().chain(&[0u8; 8]).copied().collect(),
        )
    }

    fn numbers(records: &[OwnedRecord]) -> Vec<u64> {
        records
            .iter()
            .map(|r| u64::from_ne_bytes(r.body[..8].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn partial_ring_reads_newest_first_and_stops_at_unwritten_space() {
        let mut data = vec![0u8; 256];
        let head = write_backward(&mut data, 0, &(1..=5).map(rec).collect::<Vec<_>>());
        let got = backward_records(&data, head, None);
        assert_eq!(numbers(&got), vec![5, 4, 3, 2, 1]);
        assert!(got.iter().all(|r| r.kind == 9 && r.body.len() == 16));
    }

    #[test]
    fn wrapped_ring_keeps_only_whole_newest_records() {
        // 24-byte records in a 256-byte ring: 10 fit (240 bytes); the 11th
        // is partly overwritten by the newest and must not be returned.
        let mut data = vec![0u8; 256];
        let head = write_backward(&mut data, 0, &(1..=100).map(rec).collect::<Vec<_>>());
        let got = backward_records(&data, head, None);
        assert_eq!(numbers(&got), (91..=100).rev().collect::<Vec<_>>());
    }

    #[test]
    fn records_straddling_the_end_of_the_area_are_joined() {
        let mut data = vec![0u8; 64];
        // Start so that the newest record wraps around offset 0.
        let head = write_backward(&mut data, 70, &[rec(1), rec(2)]);
        assert!(head % 64 + 24 > 64 || (head.wrapping_add(24) % 64) + 24 > 64);
        let got = backward_records(&data, head, None);
        assert_eq!(numbers(&got), vec![2, 1]);
    }

    #[test]
    fn limit_skips_records_already_taken() {
        let mut data = vec![0u8; 512];
        let first = write_backward(&mut data, 0, &(1..=3).map(rec).collect::<Vec<_>>());
        let second = write_backward(&mut data, first, &(4..=6).map(rec).collect::<Vec<_>>());
        let got = backward_records(&data, second, Some(first.wrapping_sub(second)));
        assert_eq!(numbers(&got), vec![6, 5, 4]);
    }

    #[test]
    fn malformed_header_stops_the_walk() {
        let mut data = vec![0u8; 128];
        let head = write_backward(&mut data, 0, &[rec(1), rec(2)]);
        // Corrupt the size of the older record (at head + 24) to 3.
        let at = (head.wrapping_add(24 + 6) % 128) as usize;
        data[at] = 3;
        data[at + 1] = 0;
        assert_eq!(numbers(&backward_records(&data, head, None)), vec![2]);
        assert!(backward_records(&data[..100], head, None).is_empty());
    }
}
