//! A global allocator that counts: live bytes, the peak since a mark, and
//! a ceiling on any single allocation. The fuzzers use it to show that
//! what a reader allocates is bounded by the size of its input, and to
//! stop with the seed and input index, before the allocation, when one
//! request alone passes the ceiling (a length field taken on trust).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The system allocator, counted.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static CEILING: AtomicUsize = AtomicUsize::new(0);
static SEED: AtomicU64 = AtomicU64::new(0);
static INPUT: AtomicU64 = AtomicU64::new(0);
static INPUTS: AtomicU64 = AtomicU64::new(0);
static TARGET: AtomicUsize = AtomicUsize::new(0);
const TARGETS: [&str; 3] = ["?", "spec", "record"];

fn grew(size: usize) {
    let ceiling = CEILING.load(Ordering::Relaxed);
    if ceiling != 0 && size > ceiling {
        refuse(size, ceiling);
    }
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(size: usize) {
    LIVE.fetch_sub(size, Ordering::Relaxed);
}

/// Reports the request that passed the ceiling and exits, allocating
/// nothing (the message is written from a stack buffer).
fn refuse(size: usize, ceiling: usize) -> ! {
    let mut buf = [0u8; 320];
    let mut w = &mut buf[..];
    let target = TARGETS
        .get(TARGET.load(Ordering::Relaxed))
        .copied()
        .unwrap_or("?");
    let (seed, input, inputs) = (
        SEED.load(Ordering::Relaxed),
        INPUT.load(Ordering::Relaxed),
        INPUTS.load(Ordering::Relaxed),
    );
    // write! into a slice does not allocate.
    let _ = write!(
        w,
        "FAIL {target} fuzz: input #{input} (seed {seed}) asked for one allocation of {size} bytes, past the ceiling of {ceiling} for its size\n  replay: cargo xtask fuzz {target} {inputs} --seed {seed} --input {input}\n"
    );
    let left = w.len();
    let used = buf.len() - left;
    let _ = std::io::stderr().write_all(&buf[..used]);
    std::process::exit(1)
}

// SAFETY: every method forwards to the system allocator with the caller's
// own pointer and layout, unchanged; the counting around it touches only
// atomics and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's layout contract is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            shrank(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: as for alloc.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            shrank(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System with this layout (alloc,
        // alloc_zeroed and realloc above all use System).
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        // SAFETY: ptr was allocated by System with layout; new_size is the
        // caller's, under GlobalAlloc::realloc's contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            shrank(new_size);
        } else {
            shrank(layout.size());
        }
        p
    }
}

/// Names the run in the ceiling's message.
pub fn set_context(seed: u64, target: &str, inputs: u64) {
    SEED.store(seed, Ordering::Relaxed);
    INPUTS.store(inputs, Ordering::Relaxed);
    let t = TARGETS.iter().position(|t| *t == target).unwrap_or(0);
    TARGET.store(t, Ordering::Relaxed);
}

/// The input being run, for the ceiling's message.
pub fn set_input(index: u64) {
    INPUT.store(index, Ordering::Relaxed);
}

/// Bytes allocated and not freed.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a measurement: the peak restarts from what is live now, and no
/// single allocation may pass `ceiling` bytes (0: no ceiling) until
/// [`end`]. Returns the live bytes at the start.
pub fn begin(ceiling: usize) -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    CEILING.store(ceiling, Ordering::Relaxed);
    live
}

/// Ends a measurement begun when `start` bytes were live: returns the
/// most bytes allocated at once on top of them.
pub fn end(start: usize) -> usize {
    CEILING.store(0, Ordering::Relaxed);
    PEAK.load(Ordering::Relaxed).saturating_sub(start)
}
