//! `record -o FILE --switch-output`: a recording in several files, each
//! standing alone, named as perf names them (FILE.YYYYMMDDHHMMSSCC), with
//! no event between two files: the events of all the files add up to the
//! calls the probed program made. `--switch-max-files` keeps the newest,
//! `--max-size` ends the recording. Uprobes on a test binary, so this
//! runs natively too. Where the recorder loses samples (the VM's
//! emulated CPUs are slow), the files hold the recording's events and
//! the events and losses add up to the calls.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kprobe_perf_tests::{kprobe_perf_bin, uprobes_available, vm_kernel, wait_until_recording};

/// The probe of filter_calls' one function.
fn probe() -> String {
    format!("p:{}:kpf_filter_target", env!("CARGO_BIN_EXE_filter_calls"))
}

/// A fresh directory for `test`'s files.
fn dir_of(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kp-rotation-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The files switched from in `dir` (FILE.STAMP of `f.data`), by name
/// (oldest first). Asserts each stamp has perf's 16 digits.
fn switched(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("f.data."))
        })
        .collect();
    files.sort();
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        let stamp = name.strip_prefix("f.data.").unwrap();
        assert!(
            stamp.len() == 16 && stamp.bytes().all(|b| b.is_ascii_digit()),
            "{name}: not perf's FILE.YYYYMMDDHHMMSSCC"
        );
    }
    files
}

/// `kprobe-perf script -i FILE`: its event lines (each names the probed
/// function), and its stderr (the file's summary).
fn script_events(file: &Path) -> (usize, String) {
    let out = Command::new(kprobe_perf_bin())
        .args(["script", "-i"])
        .arg(file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "script -i {}: {stderr}",
        file.display()
    );
    let n = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("kpf_filter_target"))
        .count();
    (n, stderr)
}

/// `perf script -i FILE`'s sample lines, or `None` without perf
/// (natively; the VM has it).
fn perf_events(file: &Path) -> Option<usize> {
    let out = match Command::new("perf")
        .args(["script", "-i"])
        .arg(file)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(vm_kernel().is_none(), "perf in the VM: {e}");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "perf script -i {}: {stderr}",
        file.display()
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("filter_calls"))
            .count(),
    )
}

/// `record -q -o DIR/f.data` of filter_calls making `calls` calls, with
/// `flags`.
fn record(dir: &Path, calls: u64, flags: &[&str]) -> Output {
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "-o"])
        .arg(dir.join("f.data"))
        .args(["-e", &probe()])
        .args(flags)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_filter_calls"))
        .arg(calls.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record: {stderr}");
    out
}

/// The "N lost" the summary's first line gives (0 when it says none).
fn summary_lost(stderr: &str) -> u64 {
    stderr
        .lines()
        .find(|l| l.contains(" events (") && !l.contains(": wrote "))
        .and_then(|l| {
            let (head, _) = l.rsplit_once(" lost")?;
            head.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// The "N events" the summary's first line gives.
fn summary_events(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            let (n, _) = l.split_once(" events")?;
            n.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no event count in {stderr}"))
}

#[test]
fn switched_files_hold_every_call_once_and_each_reads_alone() {
    let test = "switched_files_hold_every_call_once_and_each_reads_alone";
    if !uprobes_available(test) {
        return;
    }
    let dir = dir_of("size");
    let calls = 30_000;
    let out = record(&dir, calls, &["--switch-output=128K"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The kernel's count: every call recorded or lost (a slow machine,
    // such as the VM's emulated CPUs, may lose some while switching).
    let (events, lost) = (summary_events(&stderr), summary_lost(&stderr));
    assert_eq!(events + lost, calls, "{stderr}");
    // Every file was renamed, the last one at the end too.
    assert!(!dir.join("f.data").exists());
    let files = switched(&dir);
    assert!(files.len() >= 3, "{files:?}; {stderr}");
    let wrote = stderr.lines().filter(|l| l.contains(": wrote ")).count();
    assert_eq!(wrote, files.len(), "{stderr}");
    let mut ours = 0;
    let mut perf = Some(0);
    for f in &files {
        let (n, summary) = script_events(f);
        // Each file's summary counts its own span.
        assert_eq!(
            summary_events(&summary),
            n as u64,
            "{}: {summary}",
            f.display()
        );
        ours += n;
        let theirs = perf_events(f);
        if let Some(p) = theirs {
            assert_eq!(p, n, "{}: perf script against script -i", f.display());
        }
        perf = perf.zip(theirs).map(|(a, b)| a + b);
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        println!("{name}: script -i {n}, perf script {theirs:?}");
    }
    println!(
        "{} files; {events} events, {lost} lost, {calls} calls",
        files.len()
    );
    assert_eq!(
        ours as u64, events,
        "the files' events against the recording's"
    );
    if let Some(p) = perf {
        assert_eq!(p as u64, events, "perf script's events of all the files");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn switch_max_files_keeps_the_newest() {
    let test = "switch_max_files_keeps_the_newest";
    if !uprobes_available(test) {
        return;
    }
    let dir = dir_of("max-files");
    let out = record(
        &dir,
        30_000,
        &["--switch-output=64K", "--switch-max-files", "2"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let wrote: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once(": wrote ").map(|(_, f)| f))
        .collect();
    assert!(wrote.len() > 2, "{stderr}");
    let files = switched(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    // The two newest named on stderr are the two left.
    for (f, said) in files.iter().zip(&wrote[wrote.len() - 2..]) {
        assert!(
            said.starts_with(f.to_str().unwrap()),
            "{said} against {f:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn max_size_ends_the_recording_and_says_so() {
    let test = "max_size_ends_the_recording_and_says_so";
    if !uprobes_available(test) {
        return;
    }
    let dir = dir_of("max-size");
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "-o"])
        .arg(dir.join("f.data"))
        .args(["-e", &probe(), "--max-size", "256K", "--"])
        .arg(env!("CARGO_BIN_EXE_filter_calls"))
        .arg("100000000")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("f.data reached --max-size (256 KiB); stopping the recording"),
        "{stderr}"
    );
    let len = std::fs::metadata(dir.join("f.data")).unwrap().len();
    // The drain that crossed the limit, and the last one, at most a ring
    // per CPU each beyond it.
    assert!(len >= 256 << 10, "{len}");
    let (n, _) = script_events(&dir.join("f.data"));
    assert_eq!(n as u64, summary_events(&stderr), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigusr2_switches_files() {
    let test = "sigusr2_switches_files";
    if !uprobes_available(test) {
        return;
    }
    let dir = dir_of("signal");
    // filter_calls runs long enough for two signals (a uprobe's hit
    // costs microseconds).
    let calls: u64 = 300_000;
    let child = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "--switch-output", "-o"])
        .arg(dir.join("f.data"))
        .args(["-e", &probe(), "--"])
        .arg(env!("CARGO_BIN_EXE_filter_calls"))
        .arg(calls.to_string())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(child.id(), 1);
    let file = dir.join("f.data");
    for _ in 0..2 {
        // Each switch after events were written.
        let at = std::fs::metadata(&file).map_or(0, |m| m.len());
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while std::fs::metadata(&file).map_or(0, |m| m.len()) < at + (64 << 10) {
            assert!(
                std::time::Instant::now() < deadline,
                "{} stopped growing",
                file.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = Command::new("kill")
            .args(["-USR2", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(s.success());
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let files = switched(&dir);
    assert!(files.len() >= 2, "{files:?}: {stderr}");
    let total: usize = files.iter().map(|f| script_events(f).0).sum();
    assert_eq!(total as u64, summary_events(&stderr), "{stderr}");
    assert_eq!(
        summary_events(&stderr) + summary_lost(&stderr),
        calls,
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
