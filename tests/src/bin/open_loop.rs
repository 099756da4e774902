//! A workload for tests and benchmarks: opens (and closes) one file N
//! times, then prints how long that took.
//!
//! `open_loop PATH N [REPORT]` prints
//! `open_loop: N opens of PATH in MICROS us: PER us per open` on stdout,
//! or appends it to the file REPORT (so that a tracer may take stdout).
//! Each open is one openat(2), so one call of do_sys_openat2.

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(n)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: open_loop PATH N [REPORT] (opens PATH N times and prints the time taken, or appends it to REPORT)");
    };
    let n: u64 = n
        .parse()
        .map_err(|_| anyhow::anyhow!("N must be a whole number, not {n:?}"))?;
    let start = Instant::now();
    for _ in 0..n {
        std::fs::File::open(&path).map_err(|e| anyhow::anyhow!("cannot open {path}: {e}"))?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6;
    let per = if n == 0 { 0.0 } else { us / n as f64 };
    let line = format!("open_loop: {n} opens of {path} in {us:.0} us: {per:.2} us per open\n");
    match args.next() {
        Some(report) => {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&report)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| anyhow::anyhow!("cannot append to {report}: {e}"))?;
        }
        None => print!("{line}"),
    }
    Ok(())
}
