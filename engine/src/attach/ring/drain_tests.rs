//! Draining a ring without a kernel: the fake mmap of `sys::fake` hands the
//! ring heap memory laid out as the kernel lays out a perf mapping (the
//! metadata page with `data_head`, `data_tail`, `data_offset` and
//! `data_size`, then the data area), and the test plays the kernel: it
//! writes records at `data_head` and publishes it.

use std::alloc::Layout;
use std::cell::RefCell;
use std::fs::File;
use std::rc::Rc;

use super::*;
use crate::attach::sys::fake;
use crate::attach::sys::Syscall;

/// Heap memory shaped like a perf mapping of `1 + data_pages` pages.
struct FakeMapping {
    base: *mut u8,
    layout: Layout,
    page: usize,
    data_size: usize,
}

impl FakeMapping {
    fn new(data_pages: usize) -> FakeMapping {
        let page = sys::page_size();
        let layout = Layout::from_size_align((data_pages + 1) * page, page).unwrap();
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null());
        let m = FakeMapping {
            base,
            layout,
            page,
            data_size: data_pages * page,
        };
        m.set_layout(page as u64, m.data_size as u64);
        m
    }

    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base.cast()
    }

    /// What the kernel sets before mmap returns.
    fn set_layout(&self, data_offset: u64, data_size: u64) {
        // SAFETY: both fields lie in the first page of our allocation, which
        // is page-aligned, so they are aligned u64s.
        unsafe {
            std::ptr::addr_of_mut!((*self.meta()).data_offset).write(data_offset);
            std::ptr::addr_of_mut!((*self.meta()).data_size).write(data_size);
        }
    }

    fn atomic(&self, tail: bool) -> &AtomicU64 {
        // SAFETY: aligned u64 fields of the metadata page, which lives as
        // long as `self`; the ring accesses them atomically too.
        unsafe {
            AtomicU64::from_ptr(if tail {
                std::ptr::addr_of_mut!((*self.meta()).data_tail)
            } else {
                std::ptr::addr_of_mut!((*self.meta()).data_head)
            })
        }
    }

    fn head(&self) -> u64 {
        self.atomic(false).load(Ordering::Acquire)
    }

    fn tail(&self) -> u64 {
        self.atomic(true).load(Ordering::Acquire)
    }

    /// Moves both ends to `at`, as if that many bytes had gone through.
    fn start_at(&self, at: u64) {
        self.atomic(false).store(at, Ordering::Release);
        self.atomic(true).store(at, Ordering::Release);
    }

    fn set_head(&self, at: u64) {
        self.atomic(false).store(at, Ordering::Release);
    }

    /// Writes `bytes` at ring position `at` (modulo the data size).
    fn write(&self, at: u64, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            let off = (at.wrapping_add(i as u64) % self.data_size as u64) as usize;
            // SAFETY: `page + off` is inside the data area of the allocation.
            unsafe { self.base.add(self.page + off).write(*b) };
        }
    }

    /// Writes one record at `data_head` and publishes it, as the kernel
    /// does; `size` in the header is `size_field` (the true size unless a
    /// test corrupts it).
    fn push_with_size(&self, kind: u32, misc: u16, body: &[u8], size_field: u16) {
        let head = self.head();
        let bytes = record_bytes(kind, misc, size_field, body);
        self.write(head, &bytes);
        self.set_head(head.wrapping_add(bytes.len() as u64));
    }

    fn push(&self, kind: u32, misc: u16, body: &[u8]) {
        self.push_with_size(kind, misc, body, (8 + body.len()) as u16);
    }
}

/// A record as the kernel lays it out: the header (`size` as given),
/// then `body`.
fn record_bytes(kind: u32, misc: u16, size: u16, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(8 + body.len());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(&misc.to_ne_bytes());
    bytes.extend_from_slice(&size.to_ne_bytes());
    bytes.extend_from_slice(body);
    bytes
}

impl Drop for FakeMapping {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

/// A ring over a fake mapping. Fields drop in order: the ring (whose
/// munmap the fake answers), then the fake, then the memory.
struct Harness<R> {
    ring: R,
    calls: Rc<RefCell<Vec<String>>>,
    _fake: fake::Installed,
    mem: FakeMapping,
}

fn open<R>(
    data_pages: usize,
    map: impl FnOnce(&OwnedFd) -> io::Result<R>,
) -> io::Result<Harness<R>> {
    let mem = FakeMapping::new(data_pages);
    let base = mem.base as i64;
    let calls: Rc<RefCell<Vec<String>>> = Rc::default();
    let log = calls.clone();
    let fake = fake::install(move |call| {
        log.borrow_mut().push(format!("{call:?}"));
        match call {
            Syscall::Mmap { .. } => Ok(base),
            Syscall::Munmap(_) => Ok(0),
            _ => Err(fake::errno(libc::ENOSYS)),
        }
    });
    let fd = OwnedFd::from(File::open("/dev/null").unwrap());
    let ring = map(&fd)?;
    Ok(Harness {
        ring,
        calls,
        _fake: fake,
        mem,
    })
}

fn forward(data_pages: usize) -> Harness<RingBuffer> {
    open(data_pages, |fd| RingBuffer::new(fd, data_pages)).unwrap()
}

/// A record as the drain handed it: type, misc, body joined, and the
/// lengths of the body's two parts.
type Got = (u32, u16, Vec<u8>, (usize, usize));

/// Drains with [`RingBuffer::drain_then`], and checks that the bytes it
/// gives are the good records as the kernel wrote them, headers
/// included, handed over before the tail moves.
fn drain_all(h: &mut Harness<RingBuffer>) -> (Result<usize, CorruptRecord>, Vec<Got>) {
    let mut got = Vec::new();
    let mut bytes = None;
    let tail_before = h.mem.tail();
    let mem = &h.mem;
    let r = h.ring.drain_then(
        |rec| {
            // The kernel sees no space freed while records are being read.
            assert_eq!(mem.tail(), tail_before);
            got.push((
                rec.kind,
                rec.misc,
                [rec.body.0, rec.body.1].concat(),
                (rec.body.0.len(), rec.body.1.len()),
            ));
        },
        |parts: (&[u8], &[u8])| {
            assert_eq!(mem.tail(), tail_before);
            bytes = Some([parts.0, parts.1].concat());
        },
    );
    let want: Vec<u8> = got
        .iter()
        .flat_map(|(kind, misc, body, _)| {
            record_bytes(*kind, *misc, u16::try_from(8 + body.len()).unwrap(), body)
        })
        .collect();
    // No bytes when no record was good.
    assert_eq!(bytes.unwrap_or_default(), want, "the drain's bytes");
    (r, got)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
fn records_come_out_in_order_and_the_tail_is_stored_once_per_drain() {
    let mut h = forward(1);
    assert_eq!(h.ring.pending(), 0);
    h.mem.push(9, 1, &pattern(10, 16));
    h.mem.push(2, 0, &pattern(50, 8));
    h.mem.push(3, 0x4000, &pattern(90, 24));
    assert_eq!(h.ring.pending(), 72);
    assert_eq!(h.ring.tail_stores, 0);
    let (r, got) = drain_all(&mut h);
    assert_eq!(r, Ok(3));
    assert_eq!(
        got,
        [
            (9, 1, pattern(10, 16), (16, 0)),
            (2, 0, pattern(50, 8), (8, 0)),
            (3, 0x4000, pattern(90, 24), (24, 0)),
        ]
    );
    assert_eq!((h.mem.head(), h.mem.tail()), (72, 72));
    assert_eq!(h.ring.tail_stores, 1);
    assert_eq!(h.ring.pending(), 0);
    // Nothing new: no record, one more (unchanged) tail store.
    let (r, got) = drain_all(&mut h);
    assert_eq!((r, got.len(), h.mem.tail()), (Ok(0), 0, 72));
    assert_eq!(h.ring.tail_stores, 2);
    // Half a header pending (the kernel never publishes that, but a
    // drain must not read past head): left for later.
    h.mem.set_head(76);
    let (r, got) = drain_all(&mut h);
    assert_eq!((r, got.len(), h.mem.tail()), (Ok(0), 0, 72));
    assert_eq!(h.ring.drain(|_| panic!("no record")), 0);
    assert_eq!(h.ring.tail_stores, 4);
}

#[test]
fn the_ring_wraps_around_many_times_past_the_end_of_u64() {
    let mut h = forward(1);
    let size = h.mem.data_size as u64;
    // Positions are byte counts that wrap at 2^64; start just before.
    let start = (u64::MAX - 10 * size) & !7;
    h.mem.start_at(start);
    let (mut next, mut seen, mut split_expected, mut drains) = (0u32, 0u32, 0u32, 0);
    let mut split_seen = 0u32;
    while h.mem.head().wrapping_sub(start) < 40 * size {
        // Fill the ring as far as it goes, then drain it.
        loop {
            let body_len = 8 + (next as usize * 8) % 200;
            let rec = (8 + body_len) as u64;
            let pending = h.mem.head().wrapping_sub(h.mem.tail());
            if pending + rec > size {
                break;
            }
            let at = h.mem.head() % size;
            if at + 8 < size && at + rec > size {
                split_expected += 1;
            }
            let mut body = next.to_ne_bytes().to_vec();
            body.resize(body_len, next as u8);
            h.mem.push(7, 0, &body);
            next += 1;
        }
        let (r, got) = drain_all(&mut h);
        drains += 1;
        assert_eq!(r, Ok(got.len()));
        for (kind, _, body, parts) in got {
            assert_eq!(kind, 7);
            assert_eq!(body[..4], seen.to_ne_bytes(), "record {seen}");
            assert_eq!(body.len(), 8 + (seen as usize * 8) % 200);
            assert!(body[4..].iter().all(|&b| b == seen as u8));
            if parts.1 > 0 {
                split_seen += 1;
            }
            seen += 1;
        }
        assert_eq!(h.mem.tail(), h.mem.head());
    }
    assert_eq!(seen, next);
    assert_eq!(split_seen, split_expected);
    assert!(split_seen >= 30, "{split_seen} records split over 40 laps");
    assert!(h.mem.head() < start, "the position wrapped past 2^64");
    assert_eq!(h.ring.tail_stores, drains);
}

#[test]
fn a_record_split_across_the_end_of_the_data_area_is_handed_over_in_two_parts() {
    let mut h = forward(1);
    let size = h.mem.data_size as u64;
    // Header in the last 16 bytes, body: 8 bytes at the end, 32 at the start.
    h.mem.start_at(size - 16);
    h.mem.push(9, 2, &pattern(1, 40));
    let (r, got) = drain_all(&mut h);
    assert_eq!(r, Ok(1));
    assert_eq!(got, [(9, 2, pattern(1, 40), (8, 32))]);
    // A header that is itself split (4 bytes each side; unaligned, which
    // the kernel never writes, but the reader reads byte by byte).
    h.mem.start_at(2 * size - 4);
    h.mem.push(5, 7, &pattern(200, 12));
    let (r, got) = drain_all(&mut h);
    assert_eq!(r, Ok(1));
    assert_eq!(got, [(5, 7, pattern(200, 12), (12, 0))]);
    // A body that ends exactly at the end: one part, and the next record
    // starts at offset 0.
    h.mem.start_at(3 * size - 24);
    h.mem.push(6, 0, &pattern(3, 16));
    h.mem.push(6, 1, &pattern(4, 16));
    let (r, got) = drain_all(&mut h);
    assert_eq!(r, Ok(2));
    assert_eq!(
        got,
        [
            (6, 0, pattern(3, 16), (16, 0)),
            (6, 1, pattern(4, 16), (16, 0))
        ]
    );
    assert_eq!(h.mem.tail(), 3 * size + 24);
}

#[test]
fn a_corrupt_header_ends_the_drain_with_an_error_and_frees_what_is_pending() {
    let page = sys::page_size();
    let two_rings = u16::try_from(2 * page).expect("pages of at most 16 KiB");
    // (size written in the header, bytes pending from it): too small,
    // zero, more than is pending, and more than the ring holds although
    // less than is pending (a head more than a ring ahead of the tail).
    let cases: [(u16, u64); 4] = [(4, 40), (0, 40), (256, 40), (two_rings, 3 * page as u64)];
    for (bad_size, extra) in cases {
        let mut h = forward(1);
        h.mem.start_at(1000);
        h.mem.push(9, 0, &pattern(0, 16));
        let bad_at = h.mem.head();
        h.mem.push_with_size(77, 0, &[0u8; 8], bad_size);
        h.mem.set_head(bad_at + extra);
        let (r, got) = drain_all(&mut h);
        assert_eq!(got, [(9, 0, pattern(0, 16), (16, 0))], "size {bad_size}");
        assert_eq!(
            r,
            Err(CorruptRecord {
                position: 1024,
                offset: 1024,
                kind: 77,
                size: usize::from(bad_size),
                pending: extra,
                data_size: page,
                delivered: 1,
            }),
            "size {bad_size}"
        );
        assert_eq!(h.mem.tail(), bad_at + extra, "everything pending freed");
        assert_eq!(h.ring.tail_stores, 1);
        // The next drain starts afresh at the kernel's next record.
        h.mem.push(3, 0, &pattern(5, 8));
        let (r, got) = drain_all(&mut h);
        assert_eq!((r, got), (Ok(1), vec![(3, 0, pattern(5, 8), (8, 0))]));
    }
    let mut h = forward(1);
    h.mem.push(1, 0, &pattern(0, 8));
    h.mem.push_with_size(2, 0, &[0u8; 8], 0);
    assert_eq!(h.ring.drain(|_| {}), 1, "drain counts the records before");
    assert_eq!(h.mem.tail(), 32);
    let e = CorruptRecord {
        position: 1024,
        offset: 1024,
        kind: 77,
        size: 0,
        pending: 40,
        data_size: 4096,
        delivered: 1,
    };
    assert_eq!(
        e.to_string(),
        "corrupt record header in a perf ring at position 1024 (byte 1024 of its 4096-byte data area): type 77, size 0, with 40 bytes pending; those 40 bytes were dropped after 1 good records. Nothing but the kernel should write to the ring: if nothing else maps it, report this as a bug"
    );
}

#[test]
fn a_ring_maps_a_metadata_page_and_the_data_and_checks_the_layout() {
    let page = sys::page_size();
    let h = forward(4);
    let fd = h.calls.borrow()[0].clone();
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    assert!(
        fd.starts_with("mmap(") && fd.ends_with(&format!(", {}, prot={prot:#x})", 5 * page)),
        "{fd}"
    );
    let calls = h.calls.clone();
    let base = h.mem.base;
    drop(h.ring);
    assert_eq!(
        calls.borrow()[1..],
        [format!("munmap({base:p}, {})", 5 * page)]
    );
    // Not a power of two: refused before mapping anything.
    let e = open(3, |fd| RingBuffer::new(fd, 3)).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        e.to_string(),
        "ring size must be a power of two pages, not 3"
    );
    // The kernel's layout must cover the mapping exactly.
    let mem = FakeMapping::new(2);
    mem.set_layout(page as u64, page as u64);
    let base = mem.base as i64;
    let _fake = fake::install(move |call| match call {
        Syscall::Mmap { .. } => Ok(base),
        _ => Ok(0),
    });
    let fd = OwnedFd::from(File::open("/dev/null").unwrap());
    let e = RingBuffer::new(&fd, 2).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert_eq!(e.to_string(), "perf ring layout does not match the mapping");
    // Kernels before 4.1 leave the layout 0: the data follows page one.
    mem.set_layout(0, 0);
    let mut ring = RingBuffer::new(&fd, 2).unwrap();
    assert_eq!((ring.data_offset, ring.data_size), (page, 2 * page));
    mem.push(4, 0, &pattern(0, 8));
    assert_eq!(ring.drain(|r| assert_eq!(r.kind, 4)), 1);
    drop(ring);
    drop(_fake);
    drop(mem);
}

#[test]
fn a_backward_ring_is_mapped_read_only_and_read_newest_first() {
    let page = sys::page_size();
    let mut h = open(1, |fd| BackwardRing::new(fd, 1)).unwrap();
    assert!(
        h.calls.borrow()[0].ends_with(&format!(", {}, prot={:#x})", 2 * page, libc::PROT_READ)),
        "{:?}",
        h.calls.borrow()
    );
    // The kernel writes each record below the previous one.
    let mut head = 0u64;
    for n in 1..=3u8 {
        let body = pattern(n * 10, 16);
        head = head.wrapping_sub(24);
        let mut rec = 9u32.to_ne_bytes().to_vec();
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&24u16.to_ne_bytes());
        rec.extend_from_slice(&body);
        h.mem.write(head, &rec);
    }
    h.mem.set_head(head);
    let bodies: Vec<Vec<u8>> = h.ring.take_new().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies, [pattern(30, 16), pattern(20, 16), pattern(10, 16)]);
    assert!(h.ring.take_new().is_empty(), "nothing new since");
}

#[test]
fn taking_the_bytes_hands_everything_pending_as_written_and_frees_it() {
    let mut h = forward(1);
    let size = h.mem.data_size as u64;
    // Three records from 16 bytes before the end: the second wraps.
    h.mem.start_at(5 * size - 16);
    h.mem.push(9, 1, &pattern(10, 8));
    h.mem.push(2, 0, &pattern(50, 24));
    h.mem.push(3, 0, &pattern(90, 8));
    let want = [
        record_bytes(9, 1, 16, &pattern(10, 8)),
        record_bytes(2, 0, 32, &pattern(50, 24)),
        record_bytes(3, 0, 16, &pattern(90, 8)),
    ]
    .concat();
    let tail_before = h.mem.tail();
    let mem = &h.mem;
    let mut got = None;
    let n = h.ring.take_bytes(|parts| {
        // Handed over before the kernel may reuse the space.
        assert_eq!(mem.tail(), tail_before);
        got = Some((parts.0.len(), [parts.0, parts.1].concat()));
    });
    assert_eq!(n, 64);
    assert_eq!(got, Some((16, want)), "two parts, 16 bytes before the end");
    assert_eq!(h.mem.tail(), h.mem.head());
    assert_eq!(h.ring.tail_stores, 1);
    // Nothing pending: nothing handed over, the tail left alone.
    assert_eq!(h.ring.take_bytes(|_| panic!("nothing pending")), 0);
    assert_eq!(h.ring.tail_stores, 1);
}
