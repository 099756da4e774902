//! Cold load of /proc/kallsyms: reads and parses it N times (default 20)
//! and prints the minimum and median time and the symbol count.

use std::time::Instant;

use kprobe_perf_symbols::KernelSymbols;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut times = Vec::with_capacity(n);
    let mut count = 0;
    for _ in 0..n {
        let t = Instant::now();
        let s = KernelSymbols::load().expect("reading /proc/kallsyms");
        times.push(t.elapsed().as_secs_f64() * 1e3);
        count = s.len();
    }
    times.sort_by(f64::total_cmp);
    let read_only = {
        let t = Instant::now();
        let text = std::fs::read_to_string("/proc/kallsyms").expect("reading /proc/kallsyms");
        std::hint::black_box(text.len());
        t.elapsed().as_secs_f64() * 1e3
    };
    println!(
        "kallsyms load: {count} symbols, min {:.1} ms, median {:.1} ms over {n} runs (reading the file alone: {read_only:.1} ms)",
        times[0],
        times[n / 2]
    );
}
