//! The differential against perf on a real package: `probe -x libc.so.6
//! --vars/--definition` against `perf probe -x libc.so.6 -V/-D`, with
//! Debian's libc6-dbg (compressed DWARF 5, found by build ID). 200
//! questions over libc's functions (parameters, locals, relative lines),
//! seed 1: examples/differential.rs run in `-x` mode. `cargo xtask test`
//! installs libc6-dbg and linux-perf; a run without them prints why it
//! skipped.

#[allow(dead_code)]
#[path = "../examples/differential.rs"]
mod differential;

use std::path::Path;

/// Verdict classes that count as agreeing: equal, equivalent, or perf's
/// mistake shown (each named in docs/source-vs-perf.md).
fn counts(verdict: &str) -> bool {
    verdict == "agree" || verdict.starts_with("equivalent") || verdict.starts_with("perf wrong")
}

#[test]
fn libc6_dbg_answers_as_perf_probe_does() {
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    if !Path::new("/usr/share/doc/libc6-dbg").exists() {
        println!("SKIP libc6_dbg_answers_as_perf_probe_does: libc6-dbg is not installed (apt-get install libc6-dbg; cargo xtask test installs it)");
        return;
    }
    if !Path::new("/usr/bin/perf").exists() {
        println!("SKIP libc6_dbg_answers_as_perf_probe_does: perf is not installed (apt-get install linux-perf; cargo xtask test installs it)");
        return;
    }
    let _ = differential::USER_BINARY.set(libc.to_string());
    let report =
        std::env::temp_dir().join(format!("kpp-libc-differential-{}.txt", std::process::id()));
    let tally = differential::run(libc, 200, 1, &report.to_string_lossy()).unwrap();
    let total: usize = tally.values().sum();
    let good: usize = tally
        .iter()
        .filter(|(k, _)| counts(k))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total, 200);
    let others: Vec<_> = tally.iter().filter(|(k, _)| !counts(k)).collect();
    // At least 99% (198 of 200); each other answer is in the report.
    assert!(
        good >= 198,
        "{good} of 200 agree, are equivalent or perf's mistake; others: {others:?}; see {}",
        report.display()
    );
    // The same sites and arguments, to the byte, for most of them.
    assert!(tally.get("agree").copied().unwrap_or(0) >= 170, "{tally:?}");
    let _ = std::fs::remove_file(&report);
}
