//! `record -p PIDS`: threads a process starts after the recording began
//! are recorded (the events are inherited), each pid once, and the
//! recording ends by itself when the process exits. Kernel probes, so
//! it runs in the VM.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available};

const THREADS: usize = 4;
const OPENS: usize = 25;

/// An event's pid, tid, event name and `path` argument.
type Event = (i64, i64, String, Option<String>);

/// A JSON event line's (pid, tid, event, path).
fn parse(line: &str) -> Option<Event> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["type"] != "event" {
        return None;
    }
    Some((
        v["pid"].as_i64()?,
        v["tid"].as_i64()?,
        v["event"].as_str()?.to_string(),
        v["args"]["path"].as_str().map(str::to_string),
    ))
}

/// A process with one thread besides its main one starts THREADS threads
/// once recorded; each opens a path OPENS times. Recorded with its pid
/// given twice, through a tracefs probe (path string) and a PMU probe
/// (inherited by address): exactly OPENS events per new thread and probe,
/// with the threads' tids; the recording ends within 2 s of the exit.
#[test]
fn threads_started_later_are_recorded_and_the_exit_ends_it() {
    if !kprobes_available("threads_started_later_are_recorded_and_the_exit_ends_it") {
        return;
    }
    let me = std::process::id();
    let ready = format!("/nonexistent/kprobe-perf-{me}-ready");
    let path = format!("/nonexistent/kprobe-perf-{me}-worker");
    let mut workload = Command::new(env!("CARGO_BIN_EXE_thread_workload"))
        .args([
            "burst",
            &ready,
            &path,
            &THREADS.to_string(),
            &OPENS.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = workload.id() as i64;
    let mut rec = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "--json",
            "-e",
            "p:opens do_sys_openat2 path=+0(%si):ustring",
            "-e",
            "p:opens_pmu do_sys_openat2 dfd=%di:s32",
            "-p",
            &format!("{pid},{pid}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (rx, reader) = events_of(&mut rec);
    // Recording has begun once the main thread's opens of READY show.
    let mut events = Vec::new();
    wait_for_open(&rx, &mut events, pid, &ready);
    assert!(rec.try_wait().unwrap().is_none(), "record ended early");
    workload.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let workload_out = workload.wait_with_output().unwrap();
    let exited = Instant::now();
    assert_eq!(workload_out.status.code(), Some(0));
    // The recording ends by itself.
    let status = loop {
        if let Some(s) = rec.try_wait().unwrap() {
            break s;
        }
        assert!(
            exited.elapsed() < Duration::from_secs(10),
            "record still running 10 s after the process exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = exited.elapsed();
    reader.join().unwrap();
    events.extend(rx.try_iter());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut rec.stderr.take().unwrap(), &mut stderr).unwrap();
    println!("record ended {took:?} after the process; stderr: {stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(took <= Duration::from_secs(2), "took {took:?}");

    let tids: Vec<i64> = String::from_utf8_lossy(&workload_out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("tid ")?.parse().ok())
        .collect();
    assert_eq!(tids.len(), THREADS, "{workload_out:?}");
    // Opens of PATH per tid, through the tracefs probe.
    let mut by_tid: BTreeMap<i64, usize> = BTreeMap::new();
    for (p, t, ev, f) in &events {
        if ev == "opens" && f.as_deref() == Some(path.as_str()) {
            assert_eq!(*p, pid, "the event's pid");
            *by_tid.entry(*t).or_default() += 1;
        }
    }
    let want: BTreeMap<i64, usize> = tids.iter().map(|&t| (t, OPENS)).collect();
    assert_eq!(by_tid, want, "opens of {path} per thread");
    // The PMU probe (inherited by address) fired on the same calls: the
    // workers open nothing else.
    let mut pmu_by_tid: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, t, ev, _) in &events {
        if ev == "opens_pmu" && tids.contains(t) {
            *pmu_by_tid.entry(*t).or_default() += 1;
        }
    }
    assert_eq!(pmu_by_tid, want, "PMU probe hits per worker thread");
    // Nothing from other processes.
    assert!(events.iter().all(|(p, ..)| *p == pid), "only pid {pid}");
}

/// Reads `record --json` events from `rec`'s stdout on a thread.
fn events_of(
    rec: &mut std::process::Child,
) -> (mpsc::Receiver<Event>, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let out = rec.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(e) = parse(&line) {
                let _ = tx.send(e);
            }
        }
    });
    (rx, reader)
}

/// Waits up to 60 s for an event of `pid` opening `path`.
fn wait_for_open(rx: &mpsc::Receiver<Event>, events: &mut Vec<Event>, pid: i64, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !events
        .iter()
        .any(|(p, _, _, f)| *p == pid && f.as_deref() == Some(path))
    {
        assert!(Instant::now() < deadline, "no event of {path} in 60 s");
        if let Ok(e) = rx.recv_timeout(Duration::from_millis(200)) {
            events.push(e);
        }
    }
}

/// A process that starts and ends threads without pause while the
/// recorder attaches (so the thread list changes between the scans, and
/// the engine attaches again): no thread is counted twice, and each
/// thread started after the recording is fully armed is counted once.
#[test]
fn threads_appearing_while_attaching_are_counted_once() {
    if !kprobes_available("threads_appearing_while_attaching_are_counted_once") {
        return;
    }
    let me = std::process::id();
    let ready = format!("/nonexistent/kprobe-perf-{me}-churn-ready");
    let path = format!("/nonexistent/kprobe-perf-{me}-churn");
    let mut workload = Command::new(env!("CARGO_BIN_EXE_thread_workload"))
        .args(["churn", &ready, &path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = workload.id() as i64;
    let mut rec = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "--json",
            "-e",
            "p:opens do_sys_openat2 path=+0(%si):ustring",
            "-p",
            &pid.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (rx, reader) = events_of(&mut rec);
    let mut events = Vec::new();
    wait_for_open(&rx, &mut events, pid, &ready);
    // Every probe is armed well before this (enable follows the first
    // event by a few ioctls).
    std::thread::sleep(Duration::from_secs(1));
    let mut stdin = workload.stdin.take().unwrap();
    stdin.write_all(b"mark\n").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    stdin.write_all(b"stop\n").unwrap();
    drop(stdin);
    let workload_out = workload.wait_with_output().unwrap();
    assert_eq!(workload_out.status.code(), Some(0));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = rec.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "record still running 10 s after the process exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    reader.join().unwrap();
    events.extend(rx.try_iter());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut rec.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let text = String::from_utf8_lossy(&workload_out.stdout).into_owned();
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut marked = false;
    for l in text.lines() {
        if l == "mark" {
            marked = true;
        } else if let Some(t) = l.strip_prefix("tid ").and_then(|t| t.parse::<i64>().ok()) {
            if marked {
                after.push(t)
            } else {
                before.push(t)
            }
        }
    }
    let mut by_tid: BTreeMap<i64, usize> = BTreeMap::new();
    for (p, t, _, f) in &events {
        if f.as_deref() == Some(path.as_str()) {
            assert_eq!(*p, pid);
            *by_tid.entry(*t).or_default() += 1;
        }
    }
    let twice: Vec<_> = by_tid.iter().filter(|(_, n)| **n > 1).collect();
    let missed: Vec<_> = after.iter().filter(|t| by_tid.get(t) != Some(&1)).collect();
    println!(
        "{} threads before the mark ({} recorded), {} after; {stderr}",
        before.len(),
        before.iter().filter(|t| by_tid.contains_key(t)).count(),
        after.len()
    );
    assert!(
        twice.is_empty(),
        "threads counted more than once: {twice:?}"
    );
    assert!(after.len() > 10, "{} threads after the mark", after.len());
    assert!(
        missed.is_empty(),
        "threads after the mark not counted once: {missed:?}"
    );
}

/// A thread's id is refused as a process, naming its process (by the
/// engine); a pid that does not exist is refused (as the command line is
/// parsed); both before anything is attached.
#[test]
fn a_thread_or_a_missing_pid_is_refused() {
    if !kprobes_available("a_thread_or_a_missing_pid_is_refused") {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        tx.send(kprobe_perf_engine::cli::os::gettid()).unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let me = std::process::id();
    let run = |p: String| {
        let out = Command::new(kprobe_perf_bin())
            .args(["record", "-q", "-e", "p:do_sys_openat2", "-p", &p])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(
        run(tid.to_string()),
        (
            Some(1),
            format!("kprobe-perf: {tid} is a thread of process {me}, not a process: record the process with -p {me}, or this thread alone with -t {tid}\n")
        )
    );
    let missing = 1 << 23;
    assert_eq!(
        run(missing.to_string()),
        (
            Some(1),
            format!("kprobe-perf: invalid value '{missing}' for '--pid <PIDS>': no process {missing} is running (nothing in /proc/{missing}); give the number of a running process, e.g. from ps (see --help)\n")
        )
    );
    done_tx.send(()).unwrap();
    t.join().unwrap();
}
