//! `record -G CGROUP`: only tasks in the cgroup are recorded, on every CPU.
//!
//! In the VM, child cgroups of the cgroup2 root get no perf_event css
//! (perf_event_open answers ENOENT, and `perf stat -G` says "not
//! supported" the same way), so the test mounts a cgroup v1 perf_event
//! hierarchy, which takes the same PERF_FLAG_PID_CGROUP path.

use std::process::{Command, Stdio};
use std::time::Duration;

use kprobe_perf_tests::{
    kprobe_perf_bin, kprobes_available, skip, vm_kernel, wait_until_recording,
};

#[test]
fn only_tasks_in_the_cgroup_are_recorded() {
    if !kprobes_available("only_tasks_in_the_cgroup_are_recorded") {
        return;
    }
    if vm_kernel().is_none() {
        return skip(
            "only_tasks_in_the_cgroup_are_recorded",
            "it mounts a cgroup hierarchy, which only the VM may",
        );
    }
    let root = std::path::PathBuf::from(format!("/tmp/kprobe-perf-cg-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let st = Command::new("mount")
        .args(["-t", "cgroup", "-o", "perf_event", "none"])
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success(), "mounting a perf_event cgroup hierarchy");
    let dir = root.join("test");
    std::fs::create_dir(&dir).unwrap();
    let name = dir.to_string_lossy().into_owned();

    let rec = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "-G",
            &name,
            "-e",
            "p:do_sys_openat2 path=+0(%si):ustring",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A cgroup event on every CPU.
    wait_until_recording(
        rec.id(),
        kprobe_perf_engine::cli::cpus::online_cpus().map_or(1, |c| c.len()),
    );
    // One shell joins the cgroup and opens a file; another, outside,
    // opens a different one.
    let inside = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec cat /etc/hostname",
            dir.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let inside_pid = inside.id() as i32;
    assert!(inside.wait_with_output().unwrap().status.success());
    let outside = Command::new("cat")
        .arg("/etc/passwd")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(outside.success());
    std::thread::sleep(Duration::from_secs(1));
    let st = Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = rec.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir(&dir);
    let _ = Command::new("umount").arg(&root).status();
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.iter().any(
            |l| l.ends_with("path=\"/etc/hostname\"") && l.contains(&format!("-{inside_pid} "))
        ),
        "the open inside the cgroup was recorded:\n{stdout}\n{err}"
    );
    for l in &lines {
        let tid = l
            .split(" [")
            .next()
            .and_then(|h| h.rsplit('-').next())
            .and_then(|t| t.trim().parse::<i32>().ok());
        assert_eq!(tid, Some(inside_pid), "only the cgroup's task: {l}");
    }
    assert!(!stdout.contains("/etc/passwd"), "{stdout}");
}
