//! Timing: N questions in one process (default 1,000), against one
//! `perf probe -D` on the same file.
//!
//! ```text
//! cargo build --release -p kprobe-perf-debuginfo --example bench --example probe
//! /usr/bin/time -v target/release/examples/probe VMLINUX -D 'do_sys_openat2 filename dfd how->flags'   # cold process, first answer
//! /usr/bin/time -v target/release/examples/bench VMLINUX 1000                                         # 1,000 questions
//! ```
//! The questions: random functions with `$params` at every site, and a
//! random line of each with the variables there (`-V`).

use std::time::Instant;

use kprobe_perf_debuginfo::{DebugFile, DebugInfo, Options, ProbeArg, ProbePoint};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: bench VMLINUX [N] [SEED]");
        std::process::exit(2);
    };
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(7);
    let t0 = Instant::now();
    let file = match DebugFile::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let di = match DebugInfo::new(&file) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let open = t0.elapsed();
    let functions: Vec<&str> = match di.functions() {
        Ok(f) => f.collect(),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let t = Instant::now();
    let (mut probes, mut refused, mut failed, mut vars) = (0usize, 0usize, 0usize, 0usize);
    let opts = Options::default();
    for i in 0..n {
        let f = functions[(next() % functions.len() as u64) as usize];
        if i % 2 == 0 {
            match ProbePoint::parse(f).and_then(|p| di.resolve(&p, &[ProbeArg::Params], &opts)) {
                Ok(r) => {
                    probes += r.probes.len();
                    refused += r.refused.len();
                }
                Err(_) => failed += 1,
            }
        } else {
            let point = di
                .lines(f, None)
                .ok()
                .and_then(|l| {
                    let line = *l
                        .lines
                        .get((next() % l.lines.len().max(1) as u64) as usize)?;
                    ProbePoint::parse(&format!("{f}:{}", line.saturating_sub(l.decl_line))).ok()
                })
                .unwrap_or_else(|| ProbePoint::Function {
                    name: f.into(),
                    file: None,
                    at: kprobe_perf_debuginfo::FunctionPart::Entry,
                });
            match di.sites(&point, &opts) {
                Ok(sites) => {
                    for s in &sites {
                        vars += di.variables(s).map_or(0, |v| v.len());
                    }
                }
                Err(_) => failed += 1,
            }
        }
    }
    let all = t.elapsed();
    println!(
        "open (index {}): {:.3} s; {n} questions: {:.3} s ({:.2} ms each); {probes} probes, {refused} sites refused, {vars} variables listed, {failed} questions without an answer",
        if open.as_secs_f64() > 0.5 { "built" } else { "cached" },
        open.as_secs_f64(),
        all.as_secs_f64(),
        all.as_secs_f64() * 1000.0 / n as f64
    );
}
