//! Cold load of /proc/kallsyms: loads it N times (default 20) and prints
//! the minimum and median time and the symbol count, next to the cost of
//! the parts: reading the file alone (the kernel formatting ~45 bytes a
//! symbol), loading the same text from a regular file, parsing text
//! already in memory, and the first lookup (which builds the name index).
//!
//! `cargo run --release -p kprobe-perf-symbols --example load_speed -- 50`

use std::io::Read;
use std::time::Instant;

use kprobe_perf_symbols::KernelSymbols;

/// Runs `f` `n` times; (min ms, median ms, last result).
fn time<T>(n: usize, mut f: impl FnMut() -> T) -> (f64, f64, T) {
    let mut times = Vec::with_capacity(n);
    let mut last = f();
    for _ in 0..n {
        let t = Instant::now();
        last = std::hint::black_box(f());
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[0], times[n / 2], last)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
        .max(1);
    let (min, med, syms) = time(n, || KernelSymbols::load().expect("loading /proc/kallsyms"));
    println!(
        "load /proc/kallsyms: {} symbols, min {min:.1} ms, median {med:.1} ms over {n} runs",
        syms.len()
    );
    let (min, med, text) = time(n, || {
        let mut text = String::new();
        std::fs::File::open("/proc/kallsyms")
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("reading /proc/kallsyms");
        text
    });
    println!(
        "  reading it alone, no parsing: min {min:.1} ms, median {med:.1} ms ({} bytes)",
        text.len()
    );
    let copy = std::env::temp_dir().join(format!("kallsyms-copy-{}", std::process::id()));
    std::fs::write(&copy, &text).expect("writing a copy of kallsyms");
    let (min, med, _) = time(n, || {
        KernelSymbols::load_from(&copy).expect("loading the copy")
    });
    let _ = std::fs::remove_file(&copy);
    println!("  load of a copy in a regular file: min {min:.1} ms, median {med:.1} ms");
    let (min, med, _) = time(n, || KernelSymbols::parse(&text).expect("parsing kallsyms"));
    println!("  parse of the text in memory: min {min:.1} ms, median {med:.1} ms");
    let mut first: Vec<f64> = (0..n)
        .map(|_| {
            let s = KernelSymbols::parse(&text).expect("parsing kallsyms");
            let t = Instant::now();
            std::hint::black_box(s.lookup("do_sys_openat2").len());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    first.sort_by(f64::total_cmp);
    println!(
        "  first lookup (builds the name index): min {:.1} ms, median {:.1} ms",
        first[0],
        first[n / 2]
    );
}
