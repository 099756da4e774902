//! The engine's tokio example (`engine/examples/tokio_record.rs`) against
//! a real kernel: the session moves to a reader task, which waits on the
//! session's fd with tokio's `AsyncFd` and drains it, and records every
//! open of a file, exactly.

use std::process::Command;

use kprobe_perf_tests::{example_bin, for_kernel, kprobes_available};

/// The opens the example makes of its file.
const OPENS: u64 = 3000;

/// The value of the example's line `name: N`.
fn figure(out: &str, name: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")?.parse().ok())
}

#[test]
fn tokio_reader_task_records_every_open() {
    if !kprobes_available("tokio_reader_task_records_every_open") {
        return;
    }
    let file = std::env::temp_dir().join(format!("kprobe-perf-tokio-{}", std::process::id()));
    std::fs::write(&file, "x\n").unwrap();
    let out = Command::new(example_bin("tokio_record"))
        .arg(for_kernel("p:do_sys_openat2 path=+0(%si):ustring"))
        .arg(&file)
        .arg(OPENS.to_string())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("tokio_record: {stdout}{stderr}");
    assert!(out.status.success(), "tokio_record failed: {stderr}");
    assert_eq!(figure(&stdout, "opens"), Some(OPENS));
    // Each open is one do_sys_openat2 of the file, by the example itself.
    assert_eq!(figure(&stdout, "matching events"), Some(OPENS), "{stdout}");
    assert_eq!(figure(&stdout, "lost"), Some(0), "{stdout}");
    let all = figure(&stdout, "all events").unwrap();
    assert!(all >= OPENS, "{stdout}");
}
