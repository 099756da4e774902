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

use kprobe_perf_tests::{kernel_arch, kprobe_perf_bin, kprobes_available, skip_here, vm_kernel};

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
    if !release.starts_with("6.1.0-") || kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip_here(
            test,
            "the line numbers and registers of do_sys_openat2 tested are x86_64 6.1's",
        );
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

/// `build_open_how` is inlined into the creat(2) syscall, where DWARF
/// gives its `flags` as a constant (creat's O_CREAT|O_WRONLY|O_TRUNC,
/// with O_LARGEFILE) and its `mode` as the syscall's saved `si`: the
/// probe on that inlined copy (one of several `build_open_how@` makes)
/// gives exactly the modes `open_held --creat` passed.
#[test]
fn an_inlined_copy_fetches_its_own_variables() {
    let test = "an_inlined_copy_fetches_its_own_variables";
    if !kprobes_available(test) {
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if !release.starts_with("6.1.0-") || kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip_here(
            test,
            "the inlined copies of build_open_how tested are x86_64 6.1's",
        );
    }
    let Some(vmlinux) = debug_vmlinux() else {
        return skip_here(
            test,
            "no -dbg vmlinux of this kernel under target/vm/kernels",
        );
    };
    let dir = format!("/tmp/kpf-inlined-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let held = env!("CARGO_BIN_EXE_open_held");
    let vm = vmlinux.to_string_lossy();
    let spec = "p:build_open_how@ flags:x32 mode:x16";
    let out = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "--vmlinux",
            &vm,
            "-e",
            spec,
            "--",
            held,
            "--creat",
        ])
        .args([dir.as_str(), "4", "600", "1777", "444"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("on {:?}:\n{stdout}{stderr}", vm_kernel());
    assert!(out.status.success(), "{stderr}");
    // Each copy is a probe of its own; the creat one is named for its
    // place among them, as `probe --definition` lists them.
    assert!(
        stderr.contains("build_open_how_3: 4"),
        "four hits of the creat copy: {stderr}"
    );
    let seen: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": build_open_how_3: (__x64_sys_creat+0x1d/"))
        .filter_map(|l| l.split_once(") ").map(|(_, args)| args))
        .collect();
    assert_eq!(
        seen,
        [
            "flags_x32=0x8241 mode_x16=0x180",
            "flags_x32=0x8241 mode_x16=0x3ff",
            "flags_x32=0x8241 mode_x16=0x124",
            "flags_x32=0x8241 mode_x16=0x180",
        ],
        "{stdout}"
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
