//! Helpers for kprobe-perf's privileged integration tests.
//!
//! These tests run inside the VM (`cargo xtask test` boots Debian kernels
//! with kprobes and sets `KPROBE_PERF_IN_VM`). There, a test that cannot run
//! fails. Elsewhere it is skipped with the reason printed.

use std::path::PathBuf;

/// The kernel label when running inside the xtask VM.
pub fn vm_kernel() -> Option<String> {
    std::env::var("KPROBE_PERF_IN_VM").ok()
}

/// True when kprobes can be opened here. Inside the VM, panics instead of
/// returning false; outside, prints why the test is skipped.
pub fn kprobes_available(test: &str) -> bool {
    match kprobe_perf_engine::session::preflight() {
        Ok(_) => true,
        Err(e) => {
            if let Some(k) = vm_kernel() {
                panic!("{test}: kprobes must work inside the VM (kernel {k}): {e}");
            }
            println!("SKIP {test}: {e}");
            false
        }
    }
}

/// The `kprobe-perf` binary built next to this test (`target/<profile>/`),
/// or `KPROBE_PERF_BIN`.
pub fn kprobe_perf_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KPROBE_PERF_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/kprobe-perf
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let bin = dir.join("kprobe-perf");
    assert!(
        bin.exists(),
        "{} not found: build it first (cargo build -p kprobe-perf) or set KPROBE_PERF_BIN",
        bin.display()
    );
    bin
}

/// xorshift64*: seeded randomness for tests (print the seed so a failure
/// can be replayed).
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}
