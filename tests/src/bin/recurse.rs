//! A workload for `latency` tests: a function that calls itself.
//!
//! `recurse DEPTH SLEEP_US` calls `kprobe_perf_recurse(1, DEPTH, SLEEP_US)`;
//! level L sleeps SLEEP_US microseconds, then calls level L+1 (up to
//! DEPTH), and returns 1000 + L. So level L lasts at least
//! (DEPTH - L + 1) * SLEEP_US. Prints, per level, what it measured itself:
//! `level L: NS ns`, outermost first.

use std::cell::RefCell;
use std::time::Instant;

thread_local! {
    static TIMES: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// The probed function: not inlined, not mangled, so the symbol table has
/// it by this name.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kprobe_perf_recurse(level: u64, depth: u64, sleep_us: u64) -> u64 {
    let start = Instant::now();
    std::thread::sleep(std::time::Duration::from_micros(sleep_us));
    if level < depth {
        std::hint::black_box(kprobe_perf_recurse(level + 1, depth, sleep_us));
    }
    let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    TIMES.with(|t| t.borrow_mut().push((level, ns)));
    std::hint::black_box(1000 + level)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: recurse DEPTH SLEEP_US";
    let depth: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{usage} (DEPTH a whole number)"))?;
    let sleep_us: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{usage} (SLEEP_US a whole number)"))?;
    kprobe_perf_recurse(1, depth, sleep_us);
    let mut times = TIMES.with(|t| t.take());
    times.sort_unstable();
    for (level, ns) in times {
        println!("level {level}: {ns} ns");
    }
    Ok(())
}
