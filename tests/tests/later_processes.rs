//! A system-wide uprobe belongs to the file, not to the processes alive
//! when it was opened: the kernel keeps uprobes per inode, so processes
//! started after the recording began hit it too, as bpftrace's and perf's
//! do. Uprobes on the kprobe-perf binary itself, so this also runs
//! natively.

use std::process::{Command, Stdio};

use kprobe_perf_tests::{kprobe_perf_bin, online_cpus, uprobes_available, wait_until_recording};

/// The tid of an event line's `comm-TID [cpu] secs: event: ...` head.
fn tid_of(line: &str) -> Option<u32> {
    let (head, _) = line.split_once(" [")?;
    head.rsplit('-').next()?.trim().parse().ok()
}

#[test]
fn a_system_wide_uprobe_fires_in_processes_started_later() {
    if !uprobes_available("a_system_wide_uprobe_fires_in_processes_started_later") {
        return;
    }
    let bin = kprobe_perf_bin();
    let probe = format!("p:{}:main", bin.display());
    let rec = Command::new(&bin)
        .args(["record", "-a", "-e", &probe, "-d", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(rec.id(), online_cpus().len());
    // Started after the probe was opened, each one calls main once.
    let pids: Vec<u32> = (0..3)
        .map(|_| {
            let mut c = Command::new(&bin)
                .arg("--version")
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let pid = c.id();
            assert!(c.wait().unwrap().success());
            pid
        })
        .collect();
    // SAFETY: kill with the recorder's pid, a child of this process.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record -a: {}\n{stderr}", out.status);
    for pid in &pids {
        let hits: Vec<&str> = stdout
            .lines()
            .filter(|l| l.contains(": p_kprobe_main_0: ") && tid_of(l) == Some(*pid))
            .collect();
        assert_eq!(hits.len(), 1, "process {pid}: {hits:?}\n{stdout}\n{stderr}");
    }
}
