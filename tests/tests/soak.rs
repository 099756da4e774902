//! A short soak: `record -q -o FILE --switch-output=SIZE
//! --switch-max-files 3` of a uprobe hit as fast as a test program can
//! hit it, for `KPROBE_PERF_SOAK_SECS` seconds (60 unless set). The
//! recorder's resident memory and its file descriptors stay flat while it
//! switches files: RSS at the end within 10% (and 1 MiB) of its value
//! after the first quarter, the fewest fds open the same in both halves,
//! and the events the files held adding up to the summary's. Prints the
//! looks as a table.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_tests::{kprobe_perf_bin, uprobes_available, wait_until_recording};

/// One look at the recorder.
#[derive(Debug, Clone, Copy)]
struct Look {
    secs: u64,
    rss_kib: u64,
    fds: usize,
    cpu_ms: u64,
}

/// The recorder `pid`'s RSS, open fds and CPU time now.
fn look(pid: u32, secs: u64) -> Option<Look> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // utime and stime: fields 14 and 15, after the comm's ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(Look {
        secs,
        rss_kib,
        fds,
        cpu_ms: ticks * 10,
    })
}

#[test]
fn memory_and_fds_stay_flat_while_files_switch() {
    let test = "memory_and_fds_stay_flat_while_files_switch";
    if !uprobes_available(test) {
        return;
    }
    let secs: u64 = std::env::var("KPROBE_PERF_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let dir = std::env::temp_dir().join(format!("kp-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = env!("CARGO_BIN_EXE_filter_calls");
    // The workload, recorded with -p and ended here after.
    let mut work = Command::new(bin)
        .arg("100000000000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let rec = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "-o"])
        .arg(dir.join("f.data"))
        .args(["--switch-output=1M", "--switch-max-files", "3"])
        .args(["-d", &secs.to_string()])
        .args(["-e", &format!("p:{bin}:kpf_filter_target")])
        .args(["-p", &work.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = rec.id();
    wait_until_recording(pid, 1);
    let start = Instant::now();
    let step = (secs / 12).max(1);
    let mut looks = Vec::new();
    while start.elapsed() < Duration::from_secs(secs.saturating_sub(2)) {
        std::thread::sleep(Duration::from_secs(step));
        match look(pid, start.elapsed().as_secs()) {
            Some(l) => looks.push(l),
            None => break,
        }
    }
    let out = rec.wait_with_output().unwrap();
    let _ = work.kill();
    let _ = work.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    println!(
        "{:>5} {:>9} {:>4} {:>8}",
        "secs", "RSS KiB", "fds", "CPU ms"
    );
    for l in &looks {
        println!(
            "{:>5} {:>9} {:>4} {:>8}",
            l.secs, l.rss_kib, l.fds, l.cpu_ms
        );
    }
    let switched = stderr.lines().filter(|l| l.contains(": wrote ")).count();
    assert!(switched > 4, "too few switches to show anything: {stderr}");
    assert!(looks.len() >= 8, "{looks:?}");
    let base = looks[looks.len() / 4];
    let last = looks[looks.len() - 1];
    let limit = (base.rss_kib + base.rss_kib / 10).max(base.rss_kib + 1024);
    assert!(
        last.rss_kib <= limit,
        "RSS grew from {} KiB at {} s to {} KiB at {} s",
        base.rss_kib,
        base.secs,
        last.rss_kib,
        last.secs
    );
    // A look during a switch may see a file or /proc entry open for a
    // moment: a leak raises the floor, which stays where it was.
    let half = looks.len() / 2;
    let floor = |ls: &[Look]| ls.iter().map(|l| l.fds).min().unwrap_or(0);
    assert_eq!(
        floor(&looks[half..]),
        floor(&looks[..half]),
        "the fewest fds open, first half against second: {looks:?}"
    );
    let most = looks.iter().map(|l| l.fds).max().unwrap_or(0);
    assert!(most <= floor(&looks) + 2, "{looks:?}");
    // The summary's events against what the kept files and those removed
    // held: every switch named its events.
    let wrote: u64 = stderr
        .lines()
        .filter_map(|l| {
            let (_, n) = l.split_once(": wrote ")?.1.rsplit_once('(')?;
            n.strip_suffix(" events)")?.parse::<u64>().ok()
        })
        .sum();
    let summary = stderr
        .lines()
        .find(|l| l.contains(" events (") && !l.contains(": wrote "))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let events: u64 = summary
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(wrote, events, "{stderr}");
    println!(
        "{events} events in {switched} files; {:.3} us CPU per event",
        last.cpu_ms as f64 * 1000.0 / events.max(1) as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}
