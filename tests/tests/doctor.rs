//! `kprobe-perf info` as a doctor, on the kernels of the matrix: the
//! kprobe PMU is there, and fprobe events are there on 6.12 (its tracefs
//! README lists the `f[:[<group>/][<event>]]` format) but not on 6.1.

use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, vm_kernel};

/// The check line for `what` (`  ok       kprobe PMU: ...`) and the fix
/// line after it, if any.
fn check<'a>(out: &'a str, what: &str) -> (&'a str, Option<&'a str>) {
    let mut lines = out.lines();
    let line = lines
        .by_ref()
        .find(|l| {
            let l = l.trim_start();
            (l.starts_with("ok ") || l.starts_with("missing "))
                && l.split_once(' ')
                    .is_some_and(|(_, r)| r.trim_start().starts_with(what))
        })
        .unwrap_or_else(|| panic!("no {what:?} check in:\n{out}"));
    let fix = lines
        .next()
        .and_then(|l| l.trim_start().strip_prefix("fix: "));
    (line, fix)
}

#[test]
fn info_doctor_on_this_kernel() {
    let Some(kernel) = vm_kernel() else {
        println!(
            "SKIP info_doctor_on_this_kernel: runs in the VM (kernels 6.1 and 6.12 of the matrix)"
        );
        return;
    };
    let out = Command::new(kprobe_perf_bin())
        .arg("info")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ty = std::fs::read_to_string("/sys/bus/event_source/devices/kprobe/type").unwrap();
    let (k, fix) = check(&text, "kprobe PMU:");
    assert_eq!(
        k,
        format!(
            "  ok       kprobe PMU: /sys/bus/event_source/devices/kprobe (type {})",
            ty.trim()
        )
    );
    assert_eq!(fix, None);
    let (u, _) = check(&text, "uprobe PMU:");
    assert!(u.starts_with("  ok       uprobe PMU: "), "{u}");
    // The VM mounts tracefs at /sys/kernel/tracing, with all three files.
    let (t, _) = check(&text, "tracefs:");
    assert!(t.starts_with("  ok       tracefs: mounted at "), "{t}");
    assert!(
        t.ends_with("; kprobe_events, uprobe_events, dynamic_events"),
        "{t}"
    );
    let (c, _) = check(&text, "capabilities:");
    assert!(c.contains("CAP_PERFMON, CAP_SYS_ADMIN"), "{c}");

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let (f, fix) = check(&text, "fprobe events:");
    let readme = std::fs::read_to_string(
        t.split("mounted at ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .map(|root| format!("{root}/README"))
            .unwrap(),
    )
    .unwrap();
    let has_f = readme.contains("f[:[<group>/][<event>]]");
    println!(
        "kernel {kernel} ({}): README has the f: format: {has_f}",
        release.trim()
    );
    if release.starts_with("6.1.") {
        assert!(!has_f, "6.1's README lists fprobe events?");
        assert!(f.starts_with("  missing  fprobe events: "), "{f}");
        assert_eq!(
            fix,
            Some("run a kernel built with CONFIG_FPROBE_EVENTS=y (Linux 6.5 or later)")
        );
    } else if release.starts_with("6.12.") {
        assert!(has_f, "6.12's README lacks the f: format");
        assert!(
            f.starts_with("  ok       fprobe events: ")
                && f.ends_with(" lists the f[:[<group>/][<event>]] format"),
            "{f}"
        );
        assert_eq!(fix, None);
    } else {
        assert_eq!(f.trim_start().starts_with("ok "), has_f, "{f}");
    }
}
