//! `record -o FILE ... 2>&1 | head`: stderr is a pipe whose reader has
//! gone by the time the summary is printed. The file is finished all the
//! same, and the run does not die on the failed write. Uprobes on the
//! kprobe-perf binary itself, so this also runs natively.

use std::process::{Command, Stdio};

use kprobe_perf_tests::{kprobe_perf_bin, uprobes_available};

#[test]
fn a_closed_stderr_leaves_a_whole_file() {
    if !uprobes_available("a_closed_stderr_leaves_a_whole_file") {
        return;
    }
    let bin = kprobe_perf_bin();
    let dir =
        std::env::temp_dir().join(format!("kprobe-perf-closed-stderr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.data");
    let probe = format!("p:{}:main", bin.display());
    let workload = format!(
        "for i in 1 2 3 4 5; do '{}' --version >/dev/null; done",
        bin.display()
    );
    let mut child = Command::new(&bin)
        .args(["record", "-q", "-o"])
        .arg(&file)
        .args(["-e", &probe, "--", "sh", "-c", &workload])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is written.
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "record: {status}");
    let out = Command::new(&bin)
        .args(["script", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "script -i: {stderr}");
    let events: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": p_kprobe_main_0: "))
        .collect();
    assert_eq!(events.len(), 5, "{stdout}");
    assert!(
        stderr.contains("5 events (p_kprobe_main_0: 5), 0 lost"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
