//! Hidden kernel addresses (kernel.kptr_restrict=2, which hides them even
//! from root): detected and reported, never used as zeros; probes by name
//! still work, since the kernel resolves names itself.

use std::process::Command;

use kprobe_perf_engine::KernelSymbols;
use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available};

const KPTR: &str = "/proc/sys/kernel/kptr_restrict";

struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(KPTR, self.0.trim());
    }
}

#[test]
fn hidden_addresses_are_reported_and_names_still_work() {
    if !kprobes_available("hidden_addresses_are_reported_and_names_still_work") {
        return;
    }
    let _restore = Restore(std::fs::read_to_string(KPTR).unwrap());
    std::fs::write(KPTR, "2").unwrap();

    let syms = KernelSymbols::load().unwrap();
    assert!(syms.addresses_hidden());
    assert!(syms.len() > 10_000, "kallsyms still lists the names");
    assert!(syms.symbolize(0xffff_ffff_8100_0000).is_none());
    assert!(syms.by_label("do_sys_openat2@0x0").is_none());

    let out = Command::new(kprobe_perf_bin())
        .args(["list", "init_once"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/proc/kallsyms hides addresses from this process (kernel.kptr_restrict, or no CAP_SYSLOG): run as root or lower kernel.kptr_restrict"),
        "{err}"
    );
    // No instance is shown with a made-up address.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("@0x0\n"), "{stdout}");

    let out = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "-e",
            "p:do_sys_openat2 dfd=%di:s32",
            // Following a command's children needs addresses; every CPU
            // does not.
            "-a",
            "--",
            "cat",
            "/proc/sys/kernel/kptr_restrict",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = stdout
        .lines()
        .find(|l| l.contains("p_do_sys_openat2_0:") && l.contains(" cat-"))
        .unwrap_or_else(|| panic!("no event from cat: {stdout}\n{err}"));
    assert!(line.ends_with(" dfd=-100"), "{line}");
}
