//! A `record -o` killed with SIGKILL mid-run leaves a file that
//! `kprobe-perf script -i` reads up to its last whole record, saying that
//! it was cut short, and that `perf script` reads too (perf's own file,
//! killed so, gives it nothing: its header's data size is 0).

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, online_cpus, wait_until_recording};

/// Opens of /etc/hostname the workload makes before the kill.
const OPENS: usize = 2000;

/// Waits until `path` has not grown for a second (the recorder has
/// drained what the workload made), at most 60 s.
fn wait_until_still(path: &str) {
    let started = Instant::now();
    let mut last = (0, Instant::now());
    while started.elapsed() < Duration::from_secs(60) {
        let len = fs::metadata(path).map_or(0, |m| m.len());
        if len != last.0 {
            last = (len, Instant::now());
        } else if last.1.elapsed() >= Duration::from_secs(1) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lines of `text` of open_loop's events (perf script and script -i
/// both start a line with the comm).
fn open_loop_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("open_loop"))
        .collect()
}

/// What [`killed_run`] read back.
struct ReadBack {
    /// script -i's opens of /etc/hostname.
    opens: usize,
    /// script -i's events of open_loop.
    ours: usize,
    /// perf script's events of open_loop.
    perf: usize,
}

/// `record -a -o` (with `-q` when `quiet`) of `probe` (kprobe_events
/// syntax, x86_64 registers) while open_loop opens /etc/hostname
/// [`OPENS`] times, killed with SIGKILL once the file stops growing: what
/// script -i and perf script read of it. Asserts that script -i says the
/// file was cut short.
fn killed_run(quiet: bool, probe: &str, backend: &str) -> ReadBack {
    let path = "/tmp/kp-killed.data";
    let _ = fs::remove_file(path);
    let probe = kprobe_perf_tests::for_kernel(probe);
    let mut args = vec!["record", "-a", "-o", path, "--force", "-e", &probe];
    args.extend(["--backend", backend]);
    if quiet {
        args.push("-q");
    }
    let mut rec = Command::new(kprobe_perf_bin())
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until_recording(rec.id(), online_cpus().len());
    let status = Command::new(env!("CARGO_BIN_EXE_open_loop"))
        .args(["/etc/hostname", &OPENS.to_string(), "/dev/null"])
        .status()
        .unwrap();
    assert!(status.success(), "open_loop: {status}");
    wait_until_still(path);
    rec.kill().unwrap();
    let killed = rec.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9),
        "{args:?}: {killed}"
    );

    let ours = Command::new(kprobe_perf_bin())
        .args(["script", "-i", path])
        .output()
        .unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&ours.stderr),
    );
    assert!(ours.status.success(), "script -i {path}: {err}");
    let ours_lines = open_loop_lines(&text);
    let opens = ours_lines
        .iter()
        .filter(|l| l.contains("\"/etc/hostname\""))
        .count();
    assert!(
        err.contains("was cut short") && err.contains("read its records up to byte"),
        "{args:?}: script -i says the file was cut short: {err}"
    );
    let perf = Command::new("perf")
        .args(["script", "-i", path])
        .output()
        .unwrap();
    let perf_text = String::from_utf8_lossy(&perf.stdout);
    let read = ReadBack {
        opens,
        ours: ours_lines.len(),
        perf: open_loop_lines(&perf_text).len(),
    };
    println!(
        "{args:?}: killed; script -i reads {} opens of /etc/hostname, {} events of open_loop; \
         perf script {} events of open_loop; {}; perf: {}",
        read.opens,
        read.ours,
        read.perf,
        err.trim(),
        String::from_utf8_lossy(&perf.stderr).trim()
    );
    let _ = fs::remove_file(path);
    read
}

/// Killed mid-run: through kprobe_events (a string argument, `-q -o`),
/// script -i reads each of the workload's opens of /etc/hostname (perf
/// cannot read this file: its tracing data is written at the end); on
/// the PMU, with `-q -o` and with `-o` alone, script -i and perf script
/// both read as many events of the workload (its loader's opens and its
/// own).
#[test]
fn a_killed_recording_reads_to_its_last_drain() {
    if !kprobes_available("a_killed_recording_reads_to_its_last_drain") {
        return;
    }
    let named = killed_run(true, "p:do_sys_openat2 path=+0(%si):ustring", "tracefs");
    assert_eq!(named.opens, OPENS);
    // The workload's events: its loader's opens, then its own.
    assert!(named.ours >= OPENS, "{}", named.ours);
    for quiet in [true, false] {
        let pmu = killed_run(quiet, "p:do_sys_openat2 dfd=%di:s32", "pmu");
        assert_eq!(pmu.ours, named.ours, "quiet: {quiet}");
        assert_eq!(pmu.perf, named.ours, "quiet: {quiet}");
    }
}
