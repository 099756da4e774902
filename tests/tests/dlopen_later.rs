//! A library's short name for a library the recorded process maps only
//! later, with dlopen (tests/data/dlopen_later.c loading
//! tests/data/kpfplug.c's libkpfplug.so, found through LD_LIBRARY_PATH):
//! `p:libkpfplug:plug_add` is the file the loader will map, and the
//! kernel's uprobe, which belongs to that file, fires from the moment the
//! process maps it. Every call made after the dlopen is recorded, with
//! its arguments and return value. A system-wide `-a` uprobe on the
//! library's path fires in a process started after the recording began.
//! Natively (a uprobe PMU is enough) and in the VM.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use kprobe_perf_tests::{build_c, kprobe_perf_bin, uprobes_available, CProgram};

/// dlopen_later, with libkpfplug.so beside it.
fn build(test: &str) -> Option<CProgram> {
    if !uprobes_available(test) {
        return None;
    }
    let prog = build_c(test, "dlopen_later", &["-O1", "-g"])?;
    let lib = build_c(test, "kpfplug", &["-O1", "-g", "-shared", "-fPIC"])?;
    std::fs::copy(&lib.bin, prog.dir.join("libkpfplug.so")).unwrap();
    Some(prog)
}

const DEFINITIONS: [&str; 4] = [
    "-e",
    "p:libkpfplug:plug_add a=$arg1:s32 b=$arg2:s32",
    "-e",
    "r:libkpfplug:plug_add ret=$retval:s32",
];

/// The probe and arguments of each event line of `out`.
fn events(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("]")?;
            let (_, rest) = rest.split_once(": ")?;
            let (probe, rest) = rest.split_once(": ")?;
            let (_, args) = rest.split_once(") ")?;
            Some(format!("{probe}: {args}"))
        })
        .collect()
}

fn expected() -> Vec<String> {
    (0..4)
        .flat_map(|i| {
            [
                format!("p_libkpfplug_plug_add_0: a={i} b={}", 10 * i),
                format!("r_libkpfplug_plug_add_0: ret={}", 11 * i),
            ]
        })
        .collect()
}

#[test]
fn a_library_dlopened_by_the_command_is_probed_by_its_short_name() {
    let Some(b) = build("a_library_dlopened_by_the_command_is_probed_by_its_short_name") else {
        return;
    };
    let out = Command::new(kprobe_perf_bin())
        .current_dir(&b.dir)
        .env("LD_LIBRARY_PATH", &b.dir)
        .arg("record")
        .arg("-v")
        .args(DEFINITIONS)
        .args(["--", "./dlopen_later", "4"])
        .output()
        .unwrap();
    let stderr = kprobe_perf_tests::without_mount_note(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(events(&out), expected(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("mapped before dlopen: 0\nsum 66\n"),
        "{stdout}"
    );
    let lib = b.dir.join("libkpfplug.so");
    let dir = b.dir.display();
    let note = format!(
        "kprobe-perf: libkpfplug is {} (in LD_LIBRARY_PATH's {dir})\n",
        lib.display()
    );
    assert_eq!(
        stderr,
        format!(
            "{note}{note}kprobe-perf: 8 events (p_libkpfplug_plug_add_0: 4; \
             r_libkpfplug_plug_add_0: 4), 0 lost\n"
        )
    );
}

/// With `-p`: the library the process will map is found through the
/// process's own LD_LIBRARY_PATH (its /proc/PID/environ), not the
/// recorder's; the process dlopens it once the recording has begun.
#[test]
fn a_library_a_running_process_dlopens_later_is_probed_by_its_short_name() {
    let test = "a_library_a_running_process_dlopens_later_is_probed_by_its_short_name";
    let Some(b) = build(test) else {
        return;
    };
    let mut prog = Command::new(b.dir.join("dlopen_later"))
        .current_dir(&b.dir)
        .env("LD_LIBRARY_PATH", &b.dir)
        .args(["4", "wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = prog.id().to_string();
    let recorder = Command::new(kprobe_perf_bin())
        .current_dir(&b.dir)
        .env_remove("LD_LIBRARY_PATH")
        .arg("record")
        .arg("-v")
        .args(DEFINITIONS)
        .args(["-p", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kprobe_perf_tests::wait_until_recording(recorder.id(), 2);
    prog.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let done = prog.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        "mapped before dlopen: 0\nsum 66\n"
    );
    let out = recorder.wait_with_output().unwrap();
    let stderr = kprobe_perf_tests::without_mount_note(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(events(&out), expected(), "{out:?}");
    let lib = b.dir.join("libkpfplug.so");
    let note = format!(
        "kprobe-perf: libkpfplug is {} (in LD_LIBRARY_PATH's {} of process {pid})\n",
        lib.display(),
        b.dir.display()
    );
    assert!(stderr.starts_with(&format!("{note}{note}")), "{stderr}");
    assert!(
        stderr.ends_with(
            "kprobe-perf: 8 events (p_libkpfplug_plug_add_0: 4; r_libkpfplug_plug_add_0: 4), 0 lost\n"
        ),
        "{stderr}"
    );
}

/// A system-wide (`-a`) uprobe on a library's path fires in a process
/// started after the recording began, which maps the library only then
/// (dlopen): a uprobe belongs to the file, not to the processes mapping
/// it when it is opened.
#[test]
fn a_system_wide_uprobe_on_a_library_fires_in_a_process_started_later() {
    let test = "a_system_wide_uprobe_on_a_library_fires_in_a_process_started_later";
    let Some(b) = build(test) else {
        return;
    };
    let lib = b.dir.join("libkpfplug.so");
    let lib = lib.display();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let recorder = Command::new(kprobe_perf_bin())
        .arg("record")
        .arg("-a")
        .args(["-e", &format!("p:{lib}:plug_add a=$arg1:s32 b=$arg2:s32")])
        .args(["-e", &format!("r:{lib}:plug_add ret=$retval:s32")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kprobe_perf_tests::wait_until_recording(recorder.id(), 2 * cpus);
    let done = Command::new(b.dir.join("dlopen_later"))
        .current_dir(&b.dir)
        .env("LD_LIBRARY_PATH", &b.dir)
        .arg("4")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        "mapped before dlopen: 0\nsum 66\n"
    );
    let interrupted = Command::new("kill")
        .args(["-INT", &recorder.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let out = recorder.wait_with_output().unwrap();
    let stderr = kprobe_perf_tests::without_mount_note(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(events(&out), expected(), "{out:?}");
    assert!(
        stderr.ends_with(
            "kprobe-perf: 8 events (p_libkpfplug_plug_add_0: 4; r_libkpfplug_plug_add_0: 4), 0 lost\n"
        ),
        "{stderr}"
    );
}
