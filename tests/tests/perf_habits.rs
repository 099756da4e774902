//! A perf user's habits on uprobes, natively: what perf and the kernel
//! print, kprobe-perf prints, and perf's spellings work. The workload is
//! tests/data/habits.c, built with `cc -g -fno-omit-frame-pointer`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use kprobe_perf_tests::{
    build_c, kprobe_perf_bin, online_cpus, skip_here, uprobes_available, wait_until_recording,
    CProgram,
};

/// Builds tests/data/habits.c with frame pointers and DWARF; `None`
/// (after a SKIP line) without uprobes or a C compiler.
fn build(test: &str) -> Option<CProgram> {
    if !uprobes_available(test) {
        return None;
    }
    build_c(test, "habits", &["-O1", "-g", "-fno-omit-frame-pointer"])
}

/// kprobe-perf with `args`, run in `dir`.
fn kprobe_perf(dir: &Path, args: &[&str]) -> Output {
    Command::new(kprobe_perf_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// The `name=value ...` part of each event line of `out`.
fn args_of(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(") ").map(|(_, args)| args.to_string()))
        .collect()
}

/// `out`'s stderr, without the note of a tracefs mount only a fresh
/// machine prints.
fn stderr(out: &Output) -> String {
    kprobe_perf_tests::without_mount_note(&String::from_utf8_lossy(&out.stderr))
}

/// `:char` prints `'a'`, as the kernel's print fmt (`c='%c'`) prints it
/// for the same uprobe in uprobe_events.
#[test]
fn a_char_prints_as_the_kernel_prints_it() {
    let Some(b) = build("a_char_prints_as_the_kernel_prints_it") else {
        return;
    };
    let spec = format!("p:{}:pick c=$arg1:char", b.bin.display());
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(&b.dir, &["record", "-e", &spec, "--", &bin, "4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(args_of(&out), ["c='a'", "c='b'", "c='c'", "c='a'"]);
}

/// `latency --by ret` keys an int's -1 as -1 (it printed 4294967295).
#[test]
fn latency_by_ret_prints_an_ints_minus_one() {
    let Some(b) = build("latency_by_ret_prints_an_ints_minus_one") else {
        return;
    };
    let func = format!("{}:walk", b.bin.display());
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(&b.dir, &["latency", "--by", "ret", &func, "--", &bin, "6"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{func} ")))
        .filter_map(|l| l.split_once(", avg").map(|(k, _)| k.to_string()))
        .collect();
    assert_eq!(
        keys,
        [
            "ret=-1: count 2",
            "ret=1: count 1",
            "ret=2: count 1",
            "ret=4: count 1",
            "ret=5: count 1"
        ]
    );
}

/// perf's `-m 512K` and `--call-graph fp` are taken: each event has its
/// user frames by frame pointer. At `walk+0x0` the frame is not pushed
/// yet, so the next frame is main's caller in libc, as perf's fp chain
/// gives it.
#[test]
fn perfs_ring_sizes_and_fp_call_graph() {
    let Some(b) = build("perfs_ring_sizes_and_fp_call_graph") else {
        return;
    };
    let spec = format!("p:{}:walk", b.bin.display());
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-m",
            "512K",
            "--call-graph",
            "fp",
            "-e",
            &spec,
            "--",
            &bin,
            "1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let frames: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| l.starts_with('\t'))
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(1);
            Some((w.next()?, w.next()?))
        })
        .collect();
    assert_eq!(frames.len(), 2, "{text}");
    assert_eq!(frames[0], ("walk+0x0", &*format!("({bin})")));
    assert!(frames[1].1.contains("/libc.so"), "{text}");
}

/// A relative path, as perf's -x takes it, and the binary found on PATH,
/// in `record -e` and `latency`; -v says what each was resolved to.
/// bpftrace's `uretprobe:` head is `r:`.
#[test]
fn relative_paths_and_names_on_path_are_the_binaries() {
    let Some(b) = build("relative_paths_and_names_on_path_are_the_binaries") else {
        return;
    };
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-v",
            "-e",
            "p:./habits:walk n=$arg1:s32",
            "--",
            "./habits",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(args_of(&out), ["n=0", "n=1"]);
    assert_eq!(
        stderr(&out).lines().next(),
        Some(&*format!("kprobe-perf: ./habits is {bin}"))
    );
    let path = format!("{}:/usr/bin:/bin", b.dir.display());
    let out = Command::new(kprobe_perf_bin())
        .env("PATH", &path)
        .args([
            "record",
            "-v",
            "-e",
            "uretprobe:habits:walk r=$retval:s32",
            "--",
            "habits",
            "2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(args_of(&out).len(), 2, "{out:?}");
    assert!(args_of(&out).iter().all(|a| a == "r=-1" || a == "r=1"));
    let said: Vec<String> = stderr(&out).lines().take(2).map(str::to_string).collect();
    assert_eq!(
        said,
        [
            "kprobe-perf: uretprobe:habits:walk r=$retval:s32: bpftrace's uretprobe: is r: here"
                .to_string(),
            format!("kprobe-perf: habits is {bin}"),
        ]
    );
    let out = kprobe_perf(&b.dir, &["latency", "./habits:walk", "--", "./habits", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with(&format!("{bin}:walk: count 3, avg "))),
        "{out:?}"
    );
}

/// What cannot be meant is refused with the form to write: a relative
/// path to nothing, a library's short name that names no library (with
/// the libraries near it), perf's name of a binary found nowhere.
#[test]
fn names_a_uprobe_cannot_take_say_the_form_to_use() {
    let Some(b) = build("names_a_uprobe_cannot_take_say_the_form_to_use") else {
        return;
    };
    let out = kprobe_perf(&b.dir, &["record", "-e", "p:./nowhere:walk", "--", "true"]);
    assert_eq!(
        stderr(&out),
        "kprobe-perf: cannot resolve ./nowhere from the current directory (as perf's -x does): \
         No such file or directory (os error 2)\n  p:./nowhere:walk\n    ^^^^^^^^^\n"
    );
    let out = kprobe_perf(
        &b.dir,
        &["record", "-e", "probe_nowhere:walk", "--", "true"],
    );
    assert_eq!(
        stderr(&out),
        "kprobe-perf: probe_nowhere:walk is perf's name of a uprobe in the binary nowhere, and \
         no library, program on PATH or file of the current directory is nowhere; write \
         p:PATH:walk, PATH the nowhere binary's path\n  probe_nowhere:walk\n  \
         ^^^^^^^^^^^^^^^^^^\n"
    );
    let out = kprobe_perf(&b.dir, &["record", "-e", "p:libkpfnothing:f", "--", "true"]);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out),
        "kprobe-perf: no library libkpfnothing: no recorded process maps it, and neither \
         LD_LIBRARY_PATH nor ldconfig's cache (/etc/ld.so.cache) has libkpfnothing.so (it has \
         none like it); name it by its path (p:/PATH/libkpfnothing.so:f)\n  \
         p:libkpfnothing:f\n    ^^^^^^^^^^^^^\n"
    );
}

/// perf's event names are the probes `perf probe` defines for them:
/// `probe_habits:walk` (as `perf probe -x ./habits walk` names it) is a
/// uprobe on ./habits's walk, named as perf names it; `probe_libc:strtol`
/// and `p:libc:strtol` are libc's strtol, the libc the loader maps
/// (ldconfig's cache), and `-v` says so.
#[test]
fn perf_event_names_are_the_probes_perf_defined() {
    let Some(b) = build("perf_event_names_are_the_probes_perf_defined") else {
        return;
    };
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-v",
            "-e",
            "probe_habits:walk n=$arg1:s32",
            "--",
            "./habits",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let events: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("]").map(|(_, rest)| rest.to_string()))
        .filter_map(|l| l.split_once(": ").map(|(_, ev)| ev.to_string()))
        .collect();
    assert_eq!(
        events,
        ["walk: (0x0) n=0", "walk: (0x0) n=1", "walk: (0x0) n=2"]
            .map(|e| e.replace("(0x0)", &format!("({})", addr_of(&out)))),
        "{out:?}"
    );
    let bin = b.bin.display();
    assert_eq!(
        stderr(&out),
        format!(
            "kprobe-perf: probe_habits:walk is p:probe_habits/walk {bin}:walk\n\
             kprobe-perf: 3 events (walk: 3), 0 lost\n"
        )
    );
    // habits's atoi is glibc's inline strtol(s, NULL, 10).
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-v",
            "-e",
            "probe_libc:strtol s=+0($arg1):ustring base=$arg3:s32",
            "--",
            "./habits",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(args_of(&out), ["s=\"3\" base=10"]);
    let libc = libc_path();
    assert_eq!(
        stderr(&out),
        format!(
            "kprobe-perf: probe_libc:strtol is p:probe_libc/strtol {libc}:strtol\n\
             kprobe-perf: 1 events (strtol: 1), 0 lost\n"
        )
    );
    let out = kprobe_perf(
        &b.dir,
        &["record", "-v", "-e", "p:libc:strtol", "--", "./habits", "3"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let soname = Path::new(&libc)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        stderr(&out),
        format!(
            "kprobe-perf: libc is {libc} ({soname} in ldconfig's cache, the loader's)\n\
             kprobe-perf: 1 events (p_libc_strtol_0: 1), 0 lost\n"
        )
    );
}

/// The address of the first event line of `out` (`(0x...)`).
fn addr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.split_once(": (")?
                .1
                .split_once(')')
                .map(|(a, _)| a.to_string())
        })
        .unwrap_or_default()
}

/// libc as ldconfig's cache names it for this architecture.
fn libc_path() -> String {
    let out = Command::new("/sbin/ldconfig").arg("-p").output().unwrap();
    let arch = if cfg!(target_arch = "x86_64") {
        "x86-64"
    } else {
        "AArch64"
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let (left, path) = l.trim().split_once(" => ")?;
            (left.starts_with("libc.so.6 ") && left.contains(arch)).then(|| path.to_string())
        })
        .unwrap()
}

/// `usdt:*` with a command is the command's binary; a script there is
/// said to be one (no "name the processes": a command was given).
#[test]
fn usdt_any_file_with_a_command_is_its_binary() {
    let Some(b) = build("usdt_any_file_with_a_command_is_its_binary") else {
        return;
    };
    let script = b.dir.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-e",
            "usdt:*:python:function__entry",
            "--",
            "./script.sh",
        ],
    );
    assert_eq!(
        stderr(&out),
        format!(
            "kprobe-perf: usdt:* stands for the command's binary, and ./script.sh is {}, not an \
             ELF binary (a script, or a shim that runs another program): name the binary that \
             has the probes, as in usdt:/usr/bin/python3.11:PROVIDER:NAME\n",
            script.display()
        )
    );
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-v",
            "-e",
            "usdt:*:python:function__entry",
            "--",
            "./habits",
        ],
    );
    let bin = b.bin.to_string_lossy();
    assert_eq!(
        stderr(&out),
        format!(
            "kprobe-perf: usdt:* (the command's binary) is {bin}\nkprobe-perf: \
             usdt:{bin}:python:function__entry matches no SDT probe of {bin}: it has no SDT \
             notes (.note.stapsdt)\n"
        )
    );
}

/// Without kprobes, a kernel probe's error says what can be probed here,
/// not how this project's developers see a kernel that has them.
#[test]
fn a_kernel_without_kprobes_says_what_can_be_probed() {
    let test = "a_kernel_without_kprobes_says_what_can_be_probed";
    if Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        return skip_here(test, "this kernel has the kprobe PMU");
    }
    let out = kprobe_perf(
        Path::new("/"),
        &["record", "-e", "p:do_sys_openat2", "--", "true"],
    );
    assert_eq!(
        stderr(&out),
        "kprobe-perf: this kernel has no kprobe PMU (/sys/bus/event_source/devices/kprobe is \
         missing): it was built without CONFIG_KPROBE_EVENTS or is older than 4.17, so kernel \
         functions cannot be probed here; uprobes and USDT probes can (p:/PATH:FUNC, \
         usdt:/PATH:PROVIDER:NAME), as `kprobe-perf info` shows\n"
    );
}

/// `--stacks-folded` on a uprobe without -g draws its user stacks (by
/// frame pointer), and says so; the kernel stack it drew before is empty
/// for a uprobe (the file was one line, `habits 3`).
#[test]
fn a_uprobes_picture_of_stacks_has_its_user_frames() {
    let Some(b) = build("a_uprobes_picture_of_stacks_has_its_user_frames") else {
        return;
    };
    let folded = b.dir.join("walk.folded");
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-q",
            "--stacks-folded",
            "walk.folded",
            "-e",
            "p:./habits:walk",
            "--",
            "./habits",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).lines().next(),
        Some(
            "kprobe-perf: no -g or --call-graph given: the stacks drawn are the uprobes' user \
             stacks, by frame pointer (as --call-graph user)"
        )
    );
    let text = std::fs::read_to_string(folded).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    // At walk+0 main's frame is the newest: its caller is next, as in
    // perf's fp chains.
    assert!(
        lines[0].starts_with("habits;") && lines[0].ends_with(";walk 3"),
        "{text}"
    );
}

/// `latency --min` prints an int's -1 as --by ret keys it.
#[test]
fn latency_min_prints_an_ints_minus_one() {
    let Some(b) = build("latency_min_prints_an_ints_minus_one") else {
        return;
    };
    let out = kprobe_perf(
        &b.dir,
        &[
            "latency",
            "--min",
            "0ns",
            "./habits:walk",
            "--",
            "./habits",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let rets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' ').map(|(_, r)| r.to_string()))
        .filter(|r| r.starts_with("ret="))
        .collect();
    assert_eq!(rets, ["ret=-1", "ret=1", "ret=2"]);
}

/// `record -a --exclude-perf`, perf record's spelling: kprobe-perf's own
/// waits (epoll_wait in libc, every 100 ms of its loop) are dropped in
/// the kernel; without it they are recorded.
#[test]
fn exclude_perf_drops_kprobe_perfs_own_hits() {
    let test = "exclude_perf_drops_kprobe_perfs_own_hits";
    if !uprobes_available(test) {
        return;
    }
    let Some(libc) = kprobe_perf_tests::libc_path() else {
        return skip_here(test, "no libc mapped here");
    };
    let spec = format!("p:{libc}:epoll_wait");
    let own = |exclude: bool| {
        let mut args = vec!["record", "-a", "-d", "1", "-e", &spec];
        if exclude {
            args.push("--exclude-perf");
        }
        // Its own pid: other tests' kprobe-perf may run meanwhile.
        let child = Command::new(kprobe_perf_bin())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let me = format!("kprobe-perf-{} ", child.id());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.trim_start().starts_with(&me))
            .count()
    };
    assert!(own(false) >= 5);
    assert_eq!(own(true), 0);
}

/// An `-o` file names its probes' binaries with their build IDs (perf's
/// HEADER_BUILD_ID): `perf buildid-list -i FILE` lists the binary with
/// the ID `perf buildid-list -i BINARY` reads from it.
#[test]
fn output_files_carry_the_binaries_build_ids() {
    let test = "output_files_carry_the_binaries_build_ids";
    let Some(b) = build(test) else {
        return;
    };
    let perf = |args: &[&str]| Command::new("perf").args(args).current_dir(&b.dir).output();
    let Ok(id) = perf(&["buildid-list", "-i", "habits"]) else {
        return skip_here(test, "no perf here to compare with");
    };
    let id = String::from_utf8_lossy(&id.stdout).trim().to_string();
    assert_eq!(id.len(), 40, "{id:?}");
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-q",
            "-o",
            "walk.data",
            "-e",
            "p:./habits:walk",
            "--",
            "./habits",
            "1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = perf(&["buildid-list", "-i", "walk.data"]).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        format!("{id} {}\n", b.bin.display())
    );
}

/// Under -a, a process alive when the recording starts that then execs
/// has its name of the moment on each event, as perf record -a gives
/// it: its old name before the exec (it had its new one, read from
/// /proc after the exec), its new one after (the exec's COMM record).
#[test]
fn an_exec_under_a_names_each_event_as_it_was() {
    let Some(b) = build("an_exec_under_a_names_each_event_as_it_was") else {
        return;
    };
    // The same file under another name: the uprobe fires in both.
    let renamed = b.dir.join("renamed");
    std::fs::hard_link(&b.bin, &renamed).unwrap();
    // Alive before the recording opens, held until it records.
    let mut workload = Command::new(&b.bin)
        .arg("2")
        .arg(&renamed)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = workload.id();
    let spec = format!("p:{}:walk", b.bin.display());
    let rec = Command::new(kprobe_perf_bin())
        .current_dir(&b.dir)
        .args(["record", "-a", "-d", "60", "-e", &spec])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(rec.id(), online_cpus().len());
    let mut go = workload.stdin.take().unwrap();
    go.write_all(b"\n").unwrap();
    drop(go);
    assert!(workload.wait().unwrap().success());
    // The recording ends on SIGINT, draining what its rings hold.
    // SAFETY: kill with the recorder's pid, a child of this process.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert_eq!(
        names,
        [
            format!("habits-{pid}"),
            format!("habits-{pid}"),
            format!("renamed-{pid}"),
            format!("renamed-{pid}"),
        ]
    );
}

/// `script -F` with perf's field names prints the fields as perf script
/// does for perf's own recording of the same uprobe, the addresses
/// aside (each run maps the program elsewhere): a uprobe's function and
/// binary named, where the usual line has its address only.
#[test]
fn script_fields_print_as_perf_scripts() {
    let test = "script_fields_print_as_perf_scripts";
    let Some(b) = build(test) else {
        return;
    };
    let bin = b.bin.to_string_lossy();
    let perf = |args: &[&str]| Command::new("perf").args(args).current_dir(&b.dir).output();
    let Ok(added) = perf(&["probe", "-q", "-x", &bin, "walk"]) else {
        return skip_here(test, "no perf here to compare with");
    };
    if !added.status.success() {
        return skip_here(test, &format!("perf probe failed here: {}", stderr(&added)));
    }
    let recorded = perf(&[
        "record",
        "-q",
        "-o",
        "perf.data",
        "-e",
        "probe_habits:walk",
        "--",
        &bin,
        "2",
    ]);
    let _ = perf(&["probe", "-q", "-d", "probe_habits:walk"]);
    assert!(recorded.unwrap().status.success());
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-q",
            "-o",
            "ours.data",
            "-e",
            "p:./habits:walk",
            "--",
            "./habits",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // Addresses (12 or more hex digits) masked.
    let masked = |text: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(text)
            .lines()
            .map(|l| {
                l.split(' ')
                    .map(|w| {
                        if w.len() >= 12 && w.bytes().all(|c| c.is_ascii_hexdigit()) {
                            "ADDR"
                        } else {
                            w
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    for fields in ["ip,sym", "ip,sym,symoff,dso", "comm,ip,sym,dso"] {
        let theirs = perf(&["script", "-i", "perf.data", "-F", fields]).unwrap();
        let ours = kprobe_perf(&b.dir, &["script", "-i", "ours.data", "-F", fields]);
        assert!(ours.status.success(), "{}", stderr(&ours));
        assert_eq!(masked(&ours.stdout), masked(&theirs.stdout), "-F {fields}");
        assert_eq!(masked(&ours.stdout).len(), 2);
    }
    let ours = kprobe_perf(
        &b.dir,
        &["script", "-i", "ours.data", "-F", "ip,sym,symoff,dso"],
    );
    assert_eq!(
        masked(&ours.stdout),
        [
            format!("     ADDR walk+0x0 ({bin})"),
            format!("     ADDR walk+0x0 ({bin})")
        ]
    );
}

/// A return uprobe prints its entry's arguments, joined from a hidden
/// entry probe as a kernel return probe's are on kernels that cannot
/// fetch them at the return; a replay of its -o file joins them again.
#[test]
fn a_return_uprobe_prints_its_entry_arguments() {
    let Some(b) = build("a_return_uprobe_prints_its_entry_arguments") else {
        return;
    };
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-o",
            "ret.data",
            "-e",
            "r:./habits:walk n=$arg1:s32 ret=$retval:s32",
            "--",
            "./habits",
            "4",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let want = ["n=0 ret=-1", "n=1 ret=1", "n=2 ret=2", "n=3 ret=-1"];
    assert_eq!(args_of(&out), want);
    // (A line saying tracefs was mounted may follow the summary.)
    assert!(
        stderr(&out)
            .lines()
            .any(|l| l == "kprobe-perf: 4 events (r_habits_walk_0: 4), 0 lost"),
        "{}",
        stderr(&out)
    );
    let replay = kprobe_perf(&b.dir, &["script", "-i", "ret.data"]);
    assert!(replay.status.success(), "{}", stderr(&replay));
    // The program's own line aside, the same lines.
    let events = |o: &Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains(": r_habits_walk_0: "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(events(&replay), events(&out));
    assert_eq!(events(&out).len(), 4);
}
