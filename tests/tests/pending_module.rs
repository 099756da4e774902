//! Issue #46: probes on a module that is not loaded (`p:MOD:SYM`). The
//! probe is checked against the module's `.ko`, told pending, and armed
//! by kprobe_events each time the module loads.
//!
//! In the VM, `record` runs over a script that loads binfmt_misc (which
//! the VM does not load at boot) from its `.ko.xz` (or `.ko`) under
//! `target/vm/kernels`, writes its `status` file (one byte), unloads it,
//! loads it again, writes two bytes, and unloads it: the entry probe's
//! `count` and the return probe's `$retval` of both loads come back
//! exact, and nothing is left in kprobe_events afterwards.

use std::path::PathBuf;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip_here, vm_kernel};

const ENTRY: &str = "p:binfmt_misc:bm_status_write count=$arg3:u64";
const RETURN: &str = "r:binfmt_misc:bm_status_write ret=$retval:s64";

/// The running kernel's binfmt_misc module file under
/// `target/vm/kernels` (the VM's kernels; this machine has none there).
fn binfmt_misc_ko() -> Option<PathBuf> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let kernels = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vm/kernels");
    std::fs::read_dir(kernels).ok()?.flatten().find_map(|pkg| {
        let dir = pkg
            .path()
            .join(format!("lib/modules/{}/kernel/fs", release.trim()));
        ["binfmt_misc.ko.xz", "binfmt_misc.ko.zst", "binfmt_misc.ko"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file())
    })
}

/// Loads binfmt_misc, writes `bytes` to its status file, unloads it.
fn load_write_unload(ko: &std::path::Path, bytes: &str) -> String {
    format!(
        "insmod {ko} && mount -t binfmt_misc none /proc/sys/fs/binfmt_misc && \
         printf '{bytes}' > /proc/sys/fs/binfmt_misc/status && \
         umount /proc/sys/fs/binfmt_misc && rmmod binfmt_misc",
        ko = ko.display()
    )
}

#[test]
fn a_probe_on_a_module_loaded_later_fires_on_each_load() {
    let test = "a_probe_on_a_module_loaded_later_fires_on_each_load";
    if !kprobes_available(test) {
        return;
    }
    let Some(ko) = binfmt_misc_ko() else {
        if vm_kernel().is_some() {
            panic!("{test}: no binfmt_misc.ko of the running kernel under target/vm/kernels");
        }
        return skip_here(
            test,
            "no binfmt_misc.ko of the running kernel under target/vm/kernels (a VM test)",
        );
    };
    if std::path::Path::new("/sys/module/binfmt_misc").exists() {
        return skip_here(test, "binfmt_misc is loaded here (built in or in use)");
    }
    // Two loads: 1 byte ("1"), then 2 ("1\n"); status takes both.
    let script = format!(
        "{} && {}",
        load_write_unload(&ko, "1"),
        load_write_unload(&ko, "1\\n")
    );
    let out = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "--json",
            "-e",
            ENTRY,
            "-e",
            RETURN,
            "--module-debug",
        ])
        .arg(&ko)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("stderr: {stderr}");
    assert!(out.status.success(), "record failed: {stderr}");
    // $arg3 is fetched from its register: before the load, the kernel
    // cannot tell that the point is the function's entry.
    for (event, definition) in [
        (
            "p_binfmt_misc_bm_status_write_0",
            if cfg!(target_arch = "x86_64") {
                "p binfmt_misc:bm_status_write count=%dx:u64"
            } else {
                "p binfmt_misc:bm_status_write count=%x2:u64"
            },
        ),
        (
            "r_binfmt_misc_bm_status_write_0",
            "r binfmt_misc:bm_status_write ret=$retval:s64",
        ),
    ] {
        let said = format!(
            "kprobe-perf: {event}: pending: module binfmt_misc is not loaded; kprobe_events keeps the probe ({definition}) and arms it each time binfmt_misc loads"
        );
        assert!(stderr.contains(&said), "{said}\n{stderr}");
    }
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "event")
        .collect();
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|e| (e["event"].to_string(), e["args"].to_string()))
        .collect();
    println!("{seen:#?}");
    let counts: Vec<u64> = events
        .iter()
        .filter_map(|e| e["args"]["count"].as_u64())
        .collect();
    let rets: Vec<i64> = events
        .iter()
        .filter_map(|e| e["args"]["ret"].as_i64())
        .collect();
    assert_eq!(counts, [1, 2], "{seen:#?}");
    assert_eq!(rets, [1, 2], "{seen:#?}");
    assert_eq!(events.len(), 4, "{seen:#?}");
    let defined = std::fs::read_to_string("/sys/kernel/tracing/kprobe_events").unwrap();
    assert_eq!(defined, "", "left in kprobe_events");
}

#[test]
fn a_pending_probe_on_a_function_the_module_lacks_is_refused() {
    let test = "a_pending_probe_on_a_function_the_module_lacks_is_refused";
    let Some(ko) = binfmt_misc_ko() else {
        return skip_here(
            test,
            "no binfmt_misc.ko of the running kernel under target/vm/kernels (a VM test)",
        );
    };
    if !kprobes_available(test) {
        return;
    }
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", "p:binfmt_misc:bm_status_writ"])
        .arg("--module-debug")
        .arg(&ko)
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "kprobe-perf: unknown symbol bm_status_writ in module binfmt_misc: its .ko ({}; the module is not loaded) has no such function; did you mean bm_status_write?",
            ko.display()
        )
    );
}
