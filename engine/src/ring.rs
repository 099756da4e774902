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

use crate::sys::{self, Mapping};

/// Size of `struct perf_event_header`.
const HEADER_SIZE: usize = 8;

/// One record in the ring, borrowed until the callback returns.
#[derive(Debug, Clone, Copy)]
pub struct RingRecord<'a> {
    /// `perf_event_header.type`.
    pub kind: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The record body after the header; two parts when it wraps.
    pub body: (&'a [u8], &'a [u8]),
}

/// A mapped ring buffer of one perf event fd.
pub struct RingBuffer {
    map: Mapping,
    data_offset: usize,
    data_size: usize,
}

impl RingBuffer {
    /// Maps `data_pages` (a power of two) data pages of `fd`.
    pub fn new(fd: &OwnedFd, data_pages: usize) -> io::Result<RingBuffer> {
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
        if data_offset.checked_add(data_size) != Some(map.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "perf ring layout does not match the mapping",
            ));
        }
        Ok(RingBuffer {
            map,
            data_offset,
            data_size,
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
    pub fn pending(&self) -> u64 {
        let (head, tail) = self.head_tail();
        head.load(Ordering::Acquire)
            .wrapping_sub(tail.load(Ordering::Relaxed))
    }

    /// Hands every available record to `f`, then frees their space.
    /// Returns the number of records read.
    pub fn drain(&mut self, mut f: impl FnMut(RingRecord<'_>)) -> usize {
        let (head_a, tail_a) = self.head_tail();
        let head = head_a.load(Ordering::Acquire);
        let mut tail = tail_a.load(Ordering::Relaxed);
        let size = self.data_size as u64;
        // SAFETY: the data area is `data_size` bytes at `data_offset` within
        // the mapping (checked in `new`). We only read `[tail, head)`, which
        // the kernel finished writing before publishing `head` (acquire load
        // above) and will not overwrite until we store a new tail below.
        let data = unsafe { self.map.as_ptr().add(self.data_offset) };
        let mut count = 0;
        while head.wrapping_sub(tail) >= HEADER_SIZE as u64 {
            let start = (tail % size) as usize;
            let mut hdr = [0u8; HEADER_SIZE];
            for (i, b) in hdr.iter_mut().enumerate() {
                // SAFETY: index is reduced modulo the data size, inside the area.
                *b = unsafe { data.add((start + i) % self.data_size).read() };
            }
            let kind = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let misc = u16::from_ne_bytes([hdr[4], hdr[5]]);
            let rec_size = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
            if rec_size < HEADER_SIZE || rec_size as u64 > head.wrapping_sub(tail) {
                // A corrupt header: drop everything that is pending rather
                // than read garbage.
                tail = head;
                break;
            }
            let body_start = (start + HEADER_SIZE) % self.data_size;
            let body_len = rec_size - HEADER_SIZE;
            let first_len = body_len.min(self.data_size - body_start);
            // SAFETY: both ranges lie inside the data area and inside
            // `[tail, head)`; the slices are dropped before `tail` is stored.
            let body = unsafe {
                (
                    std::slice::from_raw_parts(data.add(body_start), first_len),
                    std::slice::from_raw_parts(data, body_len - first_len),
                )
            };
            f(RingRecord { kind, misc, body });
            tail = tail.wrapping_add(rec_size as u64);
            count += 1;
        }
        tail_a.store(tail, Ordering::Release);
        count
    }
}
