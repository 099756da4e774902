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
    kprobe_perf_tests::running_kernel_debug_file(|r| format!("usr/lib/debug/boot/vmlinux-{r}"))
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

/// Debian's 6.1.0-56 -dbg vmlinux under `target/vm/kernels/`, answering
/// for that kernel (`--other-kernel`) on any host.
fn vmlinux_61() -> Option<PathBuf> {
    let v = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../target/vm/kernels/linux-image-6.1.0-56-amd64-unsigned/usr/lib/debug/boot/vmlinux-6.1.0-56-amd64",
    );
    v.is_file().then_some(v)
}

/// `probe --definition` of `points` on `vmlinux`.
fn definitions(vmlinux: &std::path::Path, points: &[&str]) -> std::process::Output {
    Command::new(kprobe_perf_bin())
        .args(["probe", "--definition", "--other-kernel", "--vmlinux"])
        .arg(vmlinux)
        .args(points)
        .output()
        .unwrap()
}

#[test]
fn probe_definition_matches_what_perf_probe_prints() {
    // No kernel needed: the -dbg vmlinux of 6.1, the kernel the VM runs,
    // answered for that kernel (--other-kernel) anywhere.
    let test = "probe_definition_matches_what_perf_probe_prints";
    let Some(v) = vmlinux_61() else {
        return skip_here(test, "no 6.1.0-56 -dbg vmlinux under target/vm/kernels");
    };
    let out = definitions(
        &v,
        &[
            "do_sys_openat2:17 fd path=tmp->name:string mode=op.mode:x16",
            "do_sys_openat2 filename dfd how->flags",
            "kpf:open17=do_sys_openat2:17 fd",
            SPEC,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout,
        "p:probe/do_sys_openat2_L17 do_sys_openat2+178 fd=%bx:s32 path=+0(+0(%r12)):string mode=+8(%sp):x16\n\
         p:probe/do_sys_openat2 do_sys_openat2+0 filename=%si:x64 dfd=%di:s32 flags=+0(%dx):x64\n\
         p:kpf/open17 do_sys_openat2+178 fd=%bx:s32\n\
         p:do_sys_openat2_L17 do_sys_openat2+178 fd=%bx:s32 path=+0(+0(%r12)):string mode=+8(%sp):x16\n"
    );
    // perf's offset and return forms name no source point: refused, not
    // echoed back as if they were definitions.
    let out = definitions(&v, &["do_sys_openat2%return"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        stderr.starts_with(
            "kprobe-perf: do_sys_openat2%return: not a source-level probe point in perf probe's syntax"
        ),
        "{stderr}"
    );
}

#[test]
fn a_variable_located_through_loads_is_fetched_through_all_of_them() {
    // DWARF may locate a variable by loads from a register:
    // `rdt_default_ctrl_show`'s `r = s->res`, with `s =
    // of->kn->parent->priv`, is at `DW_OP_breg5 0; DW_OP_deref;
    // DW_OP_plus_uconst 8; DW_OP_deref; DW_OP_plus_uconst 96; DW_OP_deref;
    // DW_OP_plus_uconst 32`, and `__ipv6_ifa_notify`'s `net =
    // dev_net(ifa->idev->dev)` at `DW_OP_breg3 168; DW_OP_deref;
    // DW_OP_deref; DW_OP_plus_uconst 1280`. Each is a fetch nested as
    // deep as the loads, and the same one the member path spelled out in
    // the source gives. (perf probe -D reads the first load only here:
    // `r=+0(%di)`, which is `of->kn`, and `net=+168(%bx)`, `ifa->idev`.)
    let test = "a_variable_located_through_loads_is_fetched_through_all_of_them";
    let Some(v) = vmlinux_61() else {
        return skip_here(test, "no 6.1.0-56 -dbg vmlinux under target/vm/kernels");
    };
    let out = definitions(
        &v,
        &[
            "rdt_default_ctrl_show:4 r",
            "rdt_default_ctrl_show:4 s=of->kn->parent->priv",
            "inet6_ifa_notify net",
            "inet6_ifa_notify n=ifa->idev->dev->nd_net.net",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout,
        "p:probe/rdt_default_ctrl_show_L4 rdt_default_ctrl_show+8 r=+32(+96(+8(+0(%di)))):x64\n\
         p:probe/rdt_default_ctrl_show_L4 rdt_default_ctrl_show+8 s=+96(+8(+0(%di))):x64\n\
         p:probe/inet6_ifa_notify __ipv6_ifa_notify+89 net=+1280(+0(+168(%bx))):x64\n\
         p:probe/inet6_ifa_notify __ipv6_ifa_notify+89 n=+1280(+0(+168(%bx))):x64\n"
    );
}

#[test]
fn a_function_with_no_code_of_its_own_is_refused_with_its_symbol() {
    // 6.1's spi_mem_no_dirmap_write has the address of
    // spi_mem_no_dirmap_read (the two are identical): its DWARF has no
    // code, so no source point; its symbol is what can be probed.
    let test = "a_function_with_no_code_of_its_own_is_refused_with_its_symbol";
    let Some(v) = vmlinux_61() else {
        return skip_here(test, "no 6.1.0-56 -dbg vmlinux under target/vm/kernels");
    };
    let out = definitions(&v, &["spi_mem_no_dirmap_write desc"]);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().next(),
        Some(
            "kprobe-perf: spi_mem_no_dirmap_write desc: spi_mem_no_dirmap_write has no code of \
             its own in the debug info (the compiler merged it with an identical function, or \
             dropped it): probe its symbol instead (`p:spi_mem_no_dirmap_write`), if the kernel \
             has one"
        )
    );
}

/// The frames of `record`'s text output: per event, each frame's address,
/// name (`sym+0xOFF`, or `sym` for an inlined one), and `file:line`.
fn printed_frames(stdout: &str) -> Vec<Vec<(u64, String, String)>> {
    let mut events = Vec::new();
    let mut lines = stdout.lines().peekable();
    while let Some(l) = lines.next() {
        // An event's line (a frame's source line is read with its frame).
        if !l.starts_with('\t') {
            if !l.is_empty() {
                events.push(Vec::new());
            }
            continue;
        }
        let mut f = l.trim().splitn(2, ' ');
        let (Some(addr), Some(rest)) = (f.next(), f.next()) else {
            continue;
        };
        let name = rest.split([' ', '+']).next().unwrap_or("").to_string();
        let src = match lines.peek() {
            Some(s) if s.starts_with("  ") => {
                let s = lines.next().unwrap_or_default().trim();
                s.split(' ').next().unwrap_or("").to_string()
            }
            _ => String::new(),
        };
        if let (Ok(a), Some(e)) = (u64::from_str_radix(addr, 16), events.last_mut()) {
            e.push((a, name, src));
        }
    }
    events.retain(|e| !e.is_empty());
    events
}

/// `_text` in /proc/kallsyms and in `vmlinux`: the KASLR slide.
fn kaslr_slide(vmlinux: &std::path::Path) -> u64 {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let text = |table: &str| {
        table
            .lines()
            .find(|l| l.ends_with(" _text"))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
    };
    let nm = Command::new("nm").arg(vmlinux).output().unwrap();
    let live = text(&kallsyms).expect("_text in kallsyms");
    let image = text(&String::from_utf8_lossy(&nm.stdout)).expect("_text in the vmlinux");
    live.wrapping_sub(image)
}

/// With `--vmlinux`, kernel frames name the functions inlined at each
/// address and, with `--srcline`, the source lines, from the kernel's
/// DWARF. binutils' `addr2line -i -f` on the same addresses (moved back
/// by the KASLR slide) is the oracle: the same functions, innermost
/// first, and the same `file:line` for each frame (an assembly frame,
/// which DWARF does not name, keeps its symbol's name). On this path,
/// `__x64_sys_openat` calls `do_sys_openat2`, and 6.1 and 6.12 inline
/// `do_syscall_x64` into `do_syscall_64`.
#[test]
fn kernel_frames_name_inlined_functions_and_lines_from_the_vmlinux() {
    let test = "kernel_frames_name_inlined_functions_and_lines_from_the_vmlinux";
    if !kprobes_available(test) {
        return;
    }
    if kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip_here(test, "the call path tested is x86_64's");
    }
    let Some(vmlinux) = debug_vmlinux() else {
        return skip_here(
            test,
            "no -dbg vmlinux of this kernel under target/vm/kernels",
        );
    };
    let started = std::time::Instant::now();
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "--call-graph", "kernel", "--srcline", "--vmlinux"])
        .arg(&vmlinux)
        .args(["-e", "p:do_sys_openat2", "--", "cat", "/etc/hostname"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    let events = printed_frames(&stdout);
    assert!(events.len() >= 3, "{stdout}");
    let slide = kaslr_slide(&vmlinux);
    let mut addresses: Vec<u64> = events.iter().flatten().map(|f| f.0).collect();
    addresses.sort_unstable();
    addresses.dedup();
    // binutils answers each address (`-a` prints it first) with
    // (function, file:line) pairs, innermost first.
    let a2l = Command::new("addr2line")
        .args(["-a", "-i", "-f", "-e"])
        .arg(&vmlinux)
        .args(
            addresses
                .iter()
                .map(|a| format!("0x{:x}", a.wrapping_sub(slide))),
        )
        .output()
        .unwrap();
    assert!(a2l.status.success(), "{a2l:?}");
    let a2l = String::from_utf8_lossy(&a2l.stdout);
    let mut per_address: Vec<(u64, Vec<(String, String)>)> = Vec::new();
    let mut lines = a2l.lines();
    while let Some(l) = lines.next() {
        if let Some(hex) = l.strip_prefix("0x") {
            let link = u64::from_str_radix(hex, 16).unwrap();
            per_address.push((link.wrapping_add(slide), Vec::new()));
            continue;
        }
        let file_line = lines.next().unwrap_or("");
        let base = file_line.rsplit('/').next().unwrap_or("");
        let base = base.split(' ').next().unwrap_or("");
        if let Some((_, pairs)) = per_address.last_mut() {
            pairs.push((l.to_string(), base.to_string()));
        }
    }
    assert_eq!(per_address.len(), addresses.len(), "{a2l}");
    let mut checked = 0;
    for event in &events {
        for &(a, ref pairs) in &per_address {
            let ours: Vec<&(u64, String, String)> = event.iter().filter(|f| f.0 == a).collect();
            if ours.is_empty() {
                continue;
            }
            assert_eq!(ours.len(), pairs.len(), "0x{a:x}: {ours:?} vs {pairs:?}");
            for (o, (func, src)) in ours.iter().zip(pairs) {
                if func != "??" {
                    assert_eq!(&o.1, func, "0x{a:x}: {ours:?} vs {pairs:?}");
                }
                assert_eq!(&o.2, src, "0x{a:x}: {ours:?} vs {pairs:?}");
                checked += 1;
            }
        }
        let names: Vec<&str> = event.iter().map(|f| f.1.as_str()).collect();
        let at = |n: &str| names.iter().position(|x| *x == n);
        assert_eq!(at("do_sys_openat2"), Some(0), "{names:?}");
        assert!(at("__x64_sys_openat").is_some(), "{names:?}");
        let (x64, s64) = (at("do_syscall_x64"), at("do_syscall_64"));
        assert!(
            x64.is_some() && s64 == x64.map(|i| i + 1),
            "do_syscall_x64 inlined just inside do_syscall_64: {names:?}"
        );
    }
    println!(
        "{} events, {checked} frames equal to addr2line's; record took {took:?}",
        events.len()
    );
}

/// `probe --lines FUNC --srcline` prints, above the instructions of each
/// source line, that line from the kernel's DWARF: each equals binutils'
/// `addr2line -i` innermost answer for the instruction below it.
#[test]
fn instruction_listings_show_their_source_lines() {
    let test = "instruction_listings_show_their_source_lines";
    if !kprobes_available(test) {
        return;
    }
    let Some(vmlinux) = debug_vmlinux() else {
        return skip_here(
            test,
            "no -dbg vmlinux of this kernel under target/vm/kernels",
        );
    };
    let out = Command::new(kprobe_perf_bin())
        .args([
            "probe",
            "--lines",
            "do_sys_openat2",
            "--srcline",
            "--vmlinux",
        ])
        .arg(&vmlinux)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = stdout.lines().next().unwrap_or("");
    let start = head
        .split(" at 0x")
        .nth(1)
        .and_then(|r| u64::from_str_radix(r.split(',').next()?, 16).ok())
        .expect("the function's address in the first line");
    // (source line as printed, offset of the instruction below it)
    let mut shown: Vec<(String, u64)> = Vec::new();
    let mut lines = stdout.lines().skip(2).peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("  +") || !l.starts_with("  ") {
            continue;
        }
        let below = lines.peek().and_then(|n| {
            let off = n.trim_start().strip_prefix('+')?.split(' ').next()?;
            off.parse::<u64>().ok()
        });
        if let Some(off) = below {
            shown.push((l.trim().to_string(), off));
        }
    }
    assert!(shown.len() >= 5, "{stdout}");
    let slide = kaslr_slide(&vmlinux);
    let a2l = Command::new("addr2line")
        .args(["-a", "-e"])
        .arg(&vmlinux)
        .args(
            shown
                .iter()
                .map(|(_, off)| format!("0x{:x}", (start + off).wrapping_sub(slide))),
        )
        .output()
        .unwrap();
    let a2l = String::from_utf8_lossy(&a2l.stdout);
    let answers: Vec<&str> = a2l.lines().filter(|l| !l.starts_with("0x")).collect();
    assert_eq!(answers.len(), shown.len(), "{a2l}");
    for ((ours, off), theirs) in shown.iter().zip(&answers) {
        let theirs = theirs.split(" (discriminator").next().unwrap_or(theirs);
        let file_line = ours.split(" (").next().unwrap_or(ours);
        assert_eq!(file_line, theirs, "+{off}\n{stdout}");
    }
    println!("{} source lines, each addr2line's", shown.len());
}
