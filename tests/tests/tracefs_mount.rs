//! tracefs mounted when a probe needs it, as perf mounts it: with
//! /sys/kernel/tracing unmounted (as on a fresh machine), a uprobe of a
//! recorded command (which takes the uprobe_events route) mounts it,
//! says so on stderr, records, and leaves the mount in place. Uprobes on
//! the kprobe-perf binary itself, so this also runs natively.

use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, skip, uprobes_available};

const AT: &str = "/sys/kernel/tracing";

fn mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(AT))
}

#[test]
fn a_probe_that_needs_tracefs_mounts_it_as_perf_does() {
    const TEST: &str = "a_probe_that_needs_tracefs_mounts_it_as_perf_does";
    if !uprobes_available(TEST) {
        return;
    }
    if mounted() {
        let st = Command::new("umount").arg(AT).status().unwrap();
        if !st.success() {
            // Another tracer holds it open; nothing to show here then.
            return skip(TEST, "tracefs is mounted and in use (umount failed)");
        }
    }
    let bin = kprobe_perf_bin();
    let probe = format!("p:{}:main", bin.display());
    let workload = format!(
        "for i in 1 2 3; do '{}' --version >/dev/null; done",
        bin.display()
    );
    let out = Command::new(&bin)
        .args(["record", "-e", &probe, "--", "sh", "-c", &workload])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "record: {stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l == kprobe_perf_tests::TRACEFS_MOUNTED_NOTE.trim_end()),
        "{stderr}"
    );
    assert!(mounted(), "the mount is left in place");
    let events = stdout
        .lines()
        .filter(|l| l.contains(": p_kprobe_main_0: "))
        .count();
    assert_eq!(events, 3, "{stdout}\n{stderr}");
    // The next run finds it mounted and says nothing of it.
    let again = Command::new(&bin)
        .args([
            "record",
            "-e",
            &probe,
            "--",
            &bin.display().to_string(),
            "--version",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "record: {stderr}");
    assert!(!stderr.contains("tracefs was not mounted"), "{stderr}");
}
