//! What an unprivileged user given only CAP_PERFMON (a copy of kprobe-perf
//! with `setcap cap_perfmon+ep`, run as uid 65534) gets, and that the
//! message names the capability or sysctl that is really missing. Needs
//! root (for setcap and the uid change); uprobes run natively on the
//! development hosts too, kprobes only in the VM.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kprobe_perf_tests::{kprobe_perf_bin, vm_kernel};

const NOBODY: u32 = 65534;

/// A world-readable directory holding a copy of kprobe-perf with
/// `cap_perfmon+ep`, or `None` (after printing SKIP) where that cannot be
/// made.
fn perfmon_copy(test: &str) -> Option<(PathBuf, PathBuf)> {
    let skip = |why: String| {
        if let Some(k) = vm_kernel() {
            panic!("{test}: must run inside the VM (kernel {k}): {why}");
        }
        println!("SKIP {test}: {why}");
        None
    };
    if !kprobe_perf_engine::testing::Privilege::current().sys_admin {
        return skip("needs root to setcap a copy and run it as another user".into());
    }
    let dir = std::env::temp_dir().join(format!("kprobe-perf-caps-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o755);
    let copy = dir.join("kprobe-perf");
    std::fs::copy(kprobe_perf_bin(), &copy).unwrap();
    set_mode(&copy, 0o755);
    match Command::new("setcap")
        .arg("cap_perfmon+ep")
        .arg(&copy)
        .status()
    {
        Ok(s) if s.success() => Some((dir, copy)),
        r => skip(format!("setcap cap_perfmon+ep failed: {r:?}")),
    }
}

/// Removes the copy and its directory.
fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn as_nobody(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap()
}

/// Uprobes need CAP_SYS_ADMIN on current kernels ("perf: Revert to
/// requiring CAP_SYS_ADMIN for uprobes"): CAP_PERFMON gets EACCES, and the
/// message says so instead of blaming a missing CAP_PERFMON.
#[test]
fn uprobe_with_only_cap_perfmon_is_told_it_needs_cap_sys_admin() {
    let test = "uprobe_with_only_cap_perfmon_is_told_it_needs_cap_sys_admin";
    if !Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        println!("SKIP {test}: no uprobe PMU");
        return;
    }
    let Some((dir, copy)) = perfmon_copy("uprobe") else {
        return;
    };
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    if !Path::new(libc).exists() {
        println!("SKIP {test}: no {libc}");
        return;
    }
    let spec = format!("p:{libc}:getpid");
    let out = as_nobody(&copy, &["record", "-a", "-d", "0.2", "-e", &spec]);
    remove(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // A kernel from before the change (5.8 to 6.15 without the stable
        // backport) still takes CAP_PERFMON.
        println!("this kernel accepts CAP_PERFMON for uprobes: {err}");
        assert!(
            vm_kernel().is_none(),
            "the VM kernels have the change: {err}"
        );
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "kprobe-perf: cannot attach p {libc}:getpid on CPU 0: uprobes need CAP_SYS_ADMIN on Linux 6.16+ and on stable \
             kernels updated since July 2025 (this process has CAP_PERFMON, which they no longer accept): run as root, \
             or `setcap cap_sys_admin+ep {}`: Permission denied (os error 13)\n",
            copy.display()
        )
    );
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .to_string()
}

fn set_paranoid(v: &str) {
    std::fs::write("/proc/sys/kernel/perf_event_paranoid", v).unwrap();
}

/// Kprobes take CAP_PERFMON (`perf_kprobe_event_init` wants
/// `perfmon_capable()`), except at Debian's perf_event_paranoid level 3,
/// where every perf_event_open wants CAP_SYS_ADMIN: the message names the
/// sysctl, and at level 2 the same copy records.
#[test]
fn kprobe_with_only_cap_perfmon_depends_on_paranoid() {
    let test = "kprobe_with_only_cap_perfmon_depends_on_paranoid";
    if vm_kernel().is_none() {
        println!("SKIP {test}: kprobes and Debian's paranoid level 3 are tried in the VM only");
        return;
    }
    let Some((dir, copy)) = perfmon_copy("kprobe") else {
        return;
    };
    let before = paranoid();
    let args = ["record", "-a", "-d", "0.5", "-e", "p:do_sys_openat2"];
    set_paranoid("3");
    let at3 = as_nobody(&copy, &args);
    set_paranoid("2");
    let at2 = as_nobody(&copy, &args);
    set_paranoid(&before);
    remove(&dir);
    let err3 = String::from_utf8_lossy(&at3.stderr);
    assert_eq!(at3.status.code(), Some(1), "{err3}");
    assert_eq!(
        err3,
        format!(
            "kprobe-perf: cannot attach p do_sys_openat2 on CPU 0: kernel.perf_event_paranoid is 3 (a Debian kernel patch), \
             which lets only CAP_SYS_ADMIN open perf events; CAP_PERFMON is not enough: run `sysctl kernel.perf_event_paranoid=2` \
             (then CAP_PERFMON is enough for kprobes), run as root, or `setcap cap_sys_admin+ep {}`: Permission denied (os error 13)\n",
            copy.display()
        )
    );
    let err2 = String::from_utf8_lossy(&at2.stderr);
    assert_eq!(at2.status.code(), Some(0), "{err2}");
    assert!(
        err2.contains("kprobe-perf: ") && err2.contains("events (p_do_sys_openat2_0: "),
        "{err2}"
    );
}
