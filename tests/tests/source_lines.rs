//! Issue #27: a probe on a source line fetches local variables by name,
//! from the kernel's DWARF (the Debian -dbg vmlinux the VM harness keeps
//! beside each kernel). On 6.1, `do_sys_openat2@+17` is fs/open.c:1321,
//! `struct file *f = do_filp_open(dfd, tmp, &op);`, where `fd` (from
//! get_unused_fd_flags), `tmp` (the copied path) and `op` (from
//! build_open_flags) are locals. `open_held` creates files with modes it
//! chooses, keeps them open and prints each fd: the recording must give
//! exactly those fds, paths and modes.

use std::path::PathBuf;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip_here, vm_kernel};

/// The -dbg vmlinux of the running kernel under `target/vm/kernels/`.
fn debug_vmlinux() -> Option<PathBuf> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let release = release.trim();
    let kernels = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vm/kernels");
    std::fs::read_dir(kernels).ok()?.flatten().find_map(|d| {
        let p = d
            .path()
            .join(format!("usr/lib/debug/boot/vmlinux-{release}"));
        p.is_file().then_some(p)
    })
}

const SPEC: &str = "p:do_sys_openat2@+17 fd path=tmp->name:string mode=op.mode:x16";

#[test]
fn a_source_line_probe_fetches_locals_by_name() {
    let test = "a_source_line_probe_fetches_locals_by_name";
    if !kprobes_available(test) {
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if !release.starts_with("6.1.0-") {
        return skip_here(test, "the line numbers of do_sys_openat2 tested are 6.1's");
    }
    let Some(vmlinux) = debug_vmlinux() else {
        return skip_here(
            test,
            "no -dbg vmlinux of this kernel under target/vm/kernels",
        );
    };
    let dir = format!("/tmp/kpf-source-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let held = env!("CARGO_BIN_EXE_open_held");
    let modes = ["600", "640", "444", "755", "1777"];
    let vm = vmlinux.to_string_lossy();
    let out = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "--vmlinux",
            &vm,
            "-e",
            SPEC,
            "--",
            held,
            &dir,
            "7",
        ])
        .args(modes)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("on {:?}:\n{stdout}{stderr}", vm_kernel());
    assert!(out.status.success(), "{stderr}");
    // What the workload got: `FD PATH MODE`.
    let expected: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            let mode = u32::from_str_radix(w[2], 8).unwrap();
            // op.mode = (mode & S_IALLUGO) | S_IFREG, with umask 0.
            format!("fd={} path=\"{}\" mode=0x{:x}", w[0], w[1], mode | 0o100000)
        })
        .collect();
    assert_eq!(expected.len(), 7, "{stdout}");
    // What the probe saw for those files (the loader's opens of its
    // libraries fire too, with other paths).
    let seen: Vec<String> = stdout
        .lines()
        .filter(|l| l.contains(": do_sys_openat2_L17: (do_sys_openat2+0xb2/"))
        .filter_map(|l| l.find(" fd=").map(|i| l[i + 1..].to_string()))
        .filter(|l| l.contains(&format!("path=\"{dir}/")))
        .collect();
    assert_eq!(seen, expected, "{stdout}");
    assert!(
        stderr.contains("kprobe-perf: ") && stderr.contains(" 0 lost"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn probe_definition_matches_what_perf_probe_prints() {
    // No kernel needed: the -dbg vmlinux of 6.1, the kernel the VM runs,
    // answered for that kernel (--other-kernel) anywhere.
    let test = "probe_definition_matches_what_perf_probe_prints";
    let kernels = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vm/kernels");
    let v = kernels
        .join("linux-image-6.1.0-56-amd64-unsigned/usr/lib/debug/boot/vmlinux-6.1.0-56-amd64");
    if !v.is_file() {
        return skip_here(test, "no 6.1.0-56 -dbg vmlinux under target/vm/kernels");
    }
    let out = Command::new(kprobe_perf_bin())
        .args(["probe", "--definition", "--other-kernel", "--vmlinux"])
        .arg(&v)
        .args([
            "do_sys_openat2:17 fd path=tmp->name:string mode=op.mode:x16",
            "do_sys_openat2 filename dfd how->flags",
            SPEC,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout,
        "p:probe/do_sys_openat2_L17 do_sys_openat2+178 fd=%bx:s32 path=+0(+0(%r12)):string mode=+8(%sp):x16\n\
         p:probe/do_sys_openat2 do_sys_openat2+0 filename=%si:x64 dfd=%di:s32 flags=+0(%dx):x64\n\
         p:do_sys_openat2_L17 do_sys_openat2+178 fd=%bx:s32 path=+0(+0(%r12)):string mode=+8(%sp):x16\n"
    );
}
