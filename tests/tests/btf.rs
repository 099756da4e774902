//! Argument names from the kernel's BTF, on the kernel itself.

use std::process::Command;

use kprobe_perf_tests::{kernel_arch, kprobe_perf_bin, kprobes_available};

#[test]
fn btf_names_fetch_the_right_registers() {
    if !kprobes_available("btf_names_fetch_the_right_registers") {
        return;
    }
    let out = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "-e",
            "p:do_sys_openat2 dfd filename +0(filename):ustring",
            "--",
            "cat",
            "/etc/hostname",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // cat opens its libraries, then the file: the last open is ours.
    let line = stdout
        .lines()
        .rfind(|l| l.contains(" cat-") && l.contains("p_do_sys_openat2_0:"))
        .unwrap_or_else(|| panic!("no event from cat:\n{stdout}\n{err}"));
    let args = line.split(") ").nth(1).unwrap_or_default();
    let mut it = args.split(' ');
    assert_eq!(it.next(), Some("dfd=-100"), "{line}");
    let ptr = it.next().unwrap_or_default();
    // The top of the user address space, where the stack is: 47 bits on
    // x86_64, 48 on Debian's arm64.
    let stack = match kernel_arch() {
        kprobe_perf_arch::Arch::Aarch64 => "filename=0xffff",
        _ => "filename=0x7ff",
    };
    assert!(ptr.starts_with(stack), "a user stack pointer: {line}");
    assert_eq!(it.next(), Some("arg3=\"/etc/hostname\""), "{line}");

    // A misspelt name is refused with the function's parameters.
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", "p:do_sys_openat2 dfdd", "-d", "0.1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(
        err.trim_end(),
        "kprobe-perf: do_sys_openat2: it has no parameter dfdd; did you mean dfd? its parameters are dfd, filename, how"
    );
}
