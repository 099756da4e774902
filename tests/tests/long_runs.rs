//! Recordings left running: `record -z` writes zstd-compressed records
//! that perf script and script -i read as the same recording without
//! -z, the engine's reader decompresses perf's own `perf record -z`
//! files, and a recording stopped as a service manager stops it
//! (SIGTERM to its process group; SIGHUP, SIGINT) finishes its file.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use kprobe_perf_engine::perfdata::Reader;
use kprobe_perf_tests::{
    build_c, kprobe_perf_bin, online_cpus, skip_here, uprobes_available, wait_until_recording,
    without_mount_note, CProgram,
};

/// walk() calls the workload makes.
const CALLS: usize = 20_000;

fn build(test: &str) -> Option<CProgram> {
    if !uprobes_available(test) {
        return None;
    }
    build_c(test, "habits", &["-O1", "-g", "-fno-omit-frame-pointer"])
}

fn run(dir: &Path, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    without_mount_note(&String::from_utf8_lossy(&out.stderr))
}

/// perf, when this machine has it.
fn perf_here() -> bool {
    Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The argument part (`n=...`) of each event line of a script's output:
/// what two recordings of the same calls share (pids, times and the
/// binary's address differ from run to run).
fn values(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(") ").map(|(_, v)| v.trim().to_string()))
        .collect()
}

/// The records of the data section of `path`, by type, as the engine's
/// reader gives them (a compressed record's records in its place).
fn record_kinds(path: &Path) -> std::collections::BTreeMap<u32, usize> {
    let mut r = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut kinds = std::collections::BTreeMap::new();
    while let Some(rec) = r.next_record().unwrap() {
        *kinds.entry(rec.kind).or_default() += 1;
    }
    kinds
}

/// Counts `PERF_RECORD_COMPRESSED` records in the data section of
/// `path`, walking its records as they are in the file.
fn compressed_records(path: &Path) -> usize {
    let b = std::fs::read(path).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let (mut at, end) = (u64_at(40), u64_at(40) + u64_at(48));
    let mut n = 0;
    while at + 8 <= end {
        let kind = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes([b[at + 6], b[at + 7]]));
        assert!(size >= 8, "record at {at} of size {size}");
        n += usize::from(kind == 81);
        at += size;
    }
    n
}

/// `record -z` writes PERF_RECORD_COMPRESSED records and perf's
/// HEADER_COMPRESSED; perf script and script -i read the same events
/// from it as from the same recording without -z.
#[test]
fn z_files_read_as_the_same_recording_uncompressed() {
    let test = "z_files_read_as_the_same_recording_uncompressed";
    let Some(b) = build(test) else {
        return;
    };
    let kp = kprobe_perf_bin();
    let calls = CALLS.to_string();
    let spec = "p:./habits:walk n=%di:s32";
    for (file, z) in [
        ("plain.data", None),
        ("z.data", Some("-z")),
        ("z9.data", Some("-z9")),
    ] {
        // Rings that hold every call (20,000 of 72 bytes): the VM's
        // slow recorder loses none.
        let mut args = vec!["record", "-q", "-m", "4M", "-o", file, "-e", spec];
        args.extend(z);
        args.extend(["--", "./habits", &calls]);
        let out = run(&b.dir, &kp, &args);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{CALLS} events (p_habits_walk_0: {CALLS}), 0 lost"
            )),
            "{}",
            stderr(&out)
        );
    }
    let path = |f: &str| b.dir.join(f);
    let size = |f: &str| std::fs::metadata(path(f)).unwrap().len();
    assert_eq!(compressed_records(&path("plain.data")), 0);
    assert!(compressed_records(&path("z.data")) > 0);
    // 20,000 samples of a counter compress to far less than a fifth.
    assert!(
        size("z.data") * 5 < size("plain.data"),
        "{} {}",
        size("z.data"),
        size("plain.data")
    );
    assert!(
        size("z9.data") * 5 < size("plain.data"),
        "{} {}",
        size("z9.data"),
        size("plain.data")
    );
    let want: Vec<String> = (0..CALLS).map(|i| format!("n={i}")).collect();
    for f in ["plain.data", "z.data", "z9.data"] {
        let ours = run(&b.dir, &kp, &["script", "-i", f]);
        assert!(ours.status.success(), "{f}: {}", stderr(&ours));
        assert_eq!(values(&ours), want, "script -i {f}");
        assert_eq!(record_kinds(&path(f)).get(&9), Some(&CALLS), "{f}");
    }
    if !perf_here() {
        return skip_here(test, "no perf here: perf script's reading not compared");
    }
    let header = run(
        &b.dir,
        Path::new("perf"),
        &["report", "--header-only", "-i", "z9.data"],
    );
    assert!(
        String::from_utf8_lossy(&header.stdout)
            .contains("# compressed : Zstd, level = 9, ratio = "),
        "{}",
        String::from_utf8_lossy(&header.stdout)
    );
    let plain = run(&b.dir, Path::new("perf"), &["script", "-i", "plain.data"]);
    assert_eq!(
        values(&plain).len(),
        CALLS,
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    for f in ["z.data", "z9.data"] {
        let perf = run(&b.dir, Path::new("perf"), &["script", "-i", f]);
        assert!(
            perf.status.success(),
            "{}",
            String::from_utf8_lossy(&perf.stderr)
        );
        assert_eq!(values(&perf), values(&plain), "perf script -i {f}");
    }
}

/// The engine's reader decompresses perf's own `perf record -z` files:
/// the same records as perf's recording of the same calls without -z.
#[test]
fn perfs_own_z_files_read_as_its_plain_ones() {
    let test = "perfs_own_z_files_read_as_its_plain_ones";
    let Some(b) = build(test) else {
        return;
    };
    if !perf_here() {
        return skip_here(test, "no perf here to write its -z files");
    }
    let perf = |args: &[&str]| run(&b.dir, Path::new("perf"), args);
    let group = format!("kpfz{}", std::process::id());
    let event = format!("{group}:walk");
    let add = perf(&[
        "probe",
        "-q",
        "-x",
        "./habits",
        "-a",
        &format!("{event}=walk"),
    ]);
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let calls = CALLS.to_string();
    for (file, z) in [("perf-plain.data", None), ("perf-z.data", Some("-z"))] {
        let mut args = vec!["record", "-q", "-m", "4M", "-o", file, "-e", &event];
        args.extend(z);
        args.extend(["--", "./habits", &calls]);
        let out = perf(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = perf(&["probe", "-q", "-d", &event]);
    let path = |f: &str| b.dir.join(f);
    assert!(compressed_records(&path("perf-z.data")) > 0);
    let z = record_kinds(&path("perf-z.data"));
    let plain = record_kinds(&path("perf-plain.data"));
    assert_eq!(z.get(&9), Some(&CALLS), "{z:?}");
    assert_eq!(z.get(&81), None, "{z:?}");
    // The same records, perf's own (its header records, round marks)
    // aside, whose number depends on the run.
    let kernel = |m: &std::collections::BTreeMap<u32, usize>| {
        m.iter()
            .filter(|(k, _)| **k < 64)
            .map(|(k, n)| (*k, *n))
            .collect::<Vec<_>>()
    };
    assert_eq!(kernel(&z), kernel(&plain));
}

/// How a recording ends in [`stopped_as_a_service`].
struct Stop {
    signal: i32,
    /// `-z`.
    compressed: bool,
    /// `-q`: nothing on stdout.
    quiet: bool,
}

/// `record -a -o` started as a service manager starts one (its own
/// process group, stdout and stderr pipes as a journal's), stopped with
/// a signal to the whole group once the workload's calls are in:
/// `record` exits 0, its file is finished (script -i reads every call,
/// and does not say it was cut short), its summary counts every call,
/// and its event lines came down the pipe while it ran.
fn stopped_as_a_service(b: &CProgram, stop: &Stop) {
    let kp = kprobe_perf_bin();
    let file = format!("svc-{}-{}.data", stop.signal, stop.compressed);
    let spec = format!("p:{}:walk n=%di:s32", b.bin.display());
    let mut args = vec!["record", "-a", "-o", &file, "-e", &spec];
    if stop.compressed {
        args.push("-z");
    }
    if stop.quiet {
        args.push("-q");
    }
    let mut rec = Command::new(&kp)
        .current_dir(&b.dir)
        .args(&args)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A journal reads the lines as they come.
    let stdout = BufReader::new(rec.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for l in stdout.lines() {
            if tx.send(l.unwrap()).is_err() {
                break;
            }
        }
    });
    wait_until_recording(rec.id(), online_cpus().len());
    // The file's start (the MMAP records of every process, under -a)
    // comes before the probes are enabled.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut workload = Command::new(&b.bin)
        .args([&CALLS.to_string(), "/bin/true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    workload.stdin.take().unwrap().write_all(b"\n").unwrap();
    assert!(workload.wait().unwrap().success());
    if !stop.quiet {
        // The first event's line comes while the recording runs.
        let first = lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        assert!(
            first.contains("p_habits_walk_0: (") && first.ends_with("n=0"),
            "{first:?}"
        );
    } else {
        // Its drains have written the calls (the file grows no more).
        let mut last = 0;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let len = std::fs::metadata(b.dir.join(&file)).map_or(0, |m| m.len());
            if len == last {
                break;
            }
            last = len;
        }
    }
    // SAFETY: kill of the process group of a child of this process.
    assert_eq!(unsafe { libc::kill(-(rec.id() as i32), stop.signal) }, 0);
    reader.join().unwrap();
    let rest: Vec<String> = lines.iter().collect();
    let out = rec.wait_with_output().unwrap();
    let err = without_mount_note(&String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "signal {}: {:?} {err}",
        stop.signal,
        out.status
    );
    // The summary's count, with no loss: the kernel's count of the
    // calls made once the probe was enabled (all of them, but for a
    // recorder slower to start than the wait above).
    let n: usize = err
        .strip_prefix("kprobe-perf: ")
        .and_then(|e| e.split_once(" events (p_habits_walk_0: "))
        .filter(|(n, rest)| rest.starts_with(&format!("{n}), 0 lost")))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("signal {}: {err}", stop.signal));
    assert!(n > CALLS / 2, "signal {}: {err}", stop.signal);
    let printed = rest.len() + usize::from(!stop.quiet);
    assert_eq!(printed, if stop.quiet { 0 } else { n }, "{err}");
    let read = run(&b.dir, &kp, &["script", "-i", &file]);
    let read_err = stderr(&read);
    assert!(read.status.success(), "{read_err}");
    assert!(!read_err.contains("cut short"), "{read_err}");
    assert_eq!(values(&read).len(), n, "{read_err}");
    // The last calls are in: n=CALLS-1 ends it.
    assert_eq!(
        values(&read).last().map(String::as_str),
        Some(format!("n={}", CALLS - 1).as_str())
    );
    if perf_here() {
        // A PMU uprobe (-a): perf script prints no arguments.
        let perf = run(&b.dir, Path::new("perf"), &["script", "-i", &file]);
        let events = String::from_utf8_lossy(&perf.stdout)
            .lines()
            .filter(|l| l.contains(" p_habits_walk_0: "))
            .count();
        assert_eq!(events, n, "{}", String::from_utf8_lossy(&perf.stderr));
    }
    eprintln!(
        "signal {}{}{}: {n} of {CALLS} calls recorded, read back whole",
        stop.signal,
        if stop.compressed { " -z" } else { "" },
        if stop.quiet { " -q" } else { "" }
    );
}

/// SIGTERM (as systemd stops a unit: to its whole control group),
/// SIGINT and SIGHUP each finish the file, compressed or not, and a
/// recording whose stdout is a pipe writes its lines while it runs.
#[test]
fn a_service_stopped_by_a_signal_finishes_its_file() {
    let Some(b) = build("a_service_stopped_by_a_signal_finishes_its_file") else {
        return;
    };
    for stop in [
        Stop {
            signal: libc::SIGTERM,
            compressed: false,
            quiet: true,
        },
        Stop {
            signal: libc::SIGTERM,
            compressed: true,
            quiet: true,
        },
        Stop {
            signal: libc::SIGHUP,
            compressed: false,
            quiet: false,
        },
        Stop {
            signal: libc::SIGINT,
            compressed: true,
            quiet: false,
        },
    ] {
        stopped_as_a_service(&b, &stop);
    }
}
