//! Issue #7 item 6: the same probe recorded at the same time by
//! kprobe-perf and by `perf probe` + `perf record`, over a workload of
//! many opens from several threads: the two sets of (tid, argument values)
//! must be identical.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kprobe_perf_tests::{
    kernel_arch, kprobe_perf_bin, kprobes_available, perf_control, skip, skip_here,
};

const THREADS: usize = 4;
const OPENS: usize = 150;

/// (tid, dfd, filename pointer, open_how pointer) -> how many times.
type Hits = BTreeMap<(i32, i64, String, String), usize>;

fn perf() -> Option<&'static str> {
    ["/usr/bin/perf", "/usr/sbin/perf"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

fn interrupt(child: &Child) {
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// `dfd=-100 ptr=0x... how=0x...` -> the three values.
fn args(text: &str) -> Option<(i64, String, String)> {
    let mut dfd = None;
    let (mut ptr, mut how) = (None, None);
    for kv in text.split_whitespace() {
        match kv.split_once('=') {
            Some(("dfd", v)) => dfd = v.parse().ok(),
            Some(("ptr", v)) => ptr = Some(v.to_string()),
            Some(("how", v)) => how = Some(v.to_string()),
            _ => {}
        }
    }
    Some((dfd?, ptr?, how?))
}

#[test]
fn kprobe_perf_and_perf_record_the_same_values() {
    if !kprobes_available("kprobe_perf_and_perf_record_the_same_values") {
        return;
    }
    if kernel_arch() == kprobe_perf_arch::Arch::Aarch64 {
        // Debian's arm64 perf is a dynamic executable with a dozen shared
        // libraries; the arm64 VM shows the host's x86_64 root and runs
        // only static builds, so there is no arm64 perf to compare with.
        return skip_here(
            "kprobe_perf_and_perf_record_the_same_values",
            "no arm64 user space in the arm64 VM for Debian's arm64 perf (a dynamic executable)",
        );
    }
    let Some(perf) = perf() else {
        return skip(
            "kprobe_perf_and_perf_record_the_same_values",
            "perf is not installed (apt-get install linux-perf)",
        );
    };
    let dir = std::env::temp_dir().join(format!("kprobe-perf-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("perf.data");

    // perf's side: perf probe defines the event, perf record records it.
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", "probe:kpdiff"])
        .stderr(Stdio::null())
        .status();
    let st = Command::new(perf)
        .args([
            "probe",
            "-q",
            "-a",
            "kpdiff=do_sys_openat2 dfd=%di:s32 ptr=%si:x64 how=%dx:x64",
        ])
        .status()
        .unwrap();
    assert!(st.success(), "perf probe failed");
    // perf opens its events disabled and enables them when told, then
    // acknowledges: it records from the workload's first call.
    let (ctl, ack) = perf_control::fifos(&dir);
    let perf_err = dir.join("perf.err");
    let mut perf_rec = Command::new(perf)
        .args(["record", "-q", "-D", "-1", "-a", "-e", "probe:kpdiff"])
        .arg("--control")
        .arg(perf_control::control_arg(&ctl, &ack))
        .arg("-o")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&perf_err).unwrap())
        .spawn()
        .unwrap();
    perf_control::enable(&ctl, &ack, &mut perf_rec, &perf_err);
    let ours = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "-a",
            "-e",
            "p:kpdiff do_sys_openat2 dfd=%di:s32 ptr=%si:x64 how=%dx:x64",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_armed(ours.id());

    // The workload: threads opening missing files with paths of different
    // lengths, so that the pointers vary.
    let tids: Vec<i32> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let dir = dir.clone();
                s.spawn(move || {
                    for i in 0..OPENS {
                        let name = dir.join(format!("missing-{t}-{}", "x".repeat(i % 7)));
                        assert!(std::fs::File::open(&name).is_err());
                    }
                    kprobe_perf_engine::os::gettid()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    std::thread::sleep(Duration::from_secs(2));
    interrupt(&ours);
    interrupt(&perf_rec);
    let ours = ours.wait_with_output().unwrap();
    let perf_rec = perf_rec.wait_with_output().unwrap();
    // perf record ends on SIGINT with 130, or by re-raising it, after
    // writing its file.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        perf_rec.status.success()
            || perf_rec.status.code() == Some(130)
            || perf_rec.status.signal() == Some(libc::SIGINT),
        "perf record failed: {}",
        perf_rec.status
    );
    let our_text = String::from_utf8_lossy(&ours.stdout);
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", "probe:kpdiff"])
        .status();

    let script = Command::new(perf)
        .args(["script", "-F", "tid,trace", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        script.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&script.stderr)
    );
    let perf_text = String::from_utf8_lossy(&script.stdout);

    let mut theirs = Hits::new();
    for line in perf_text.lines() {
        let mut it = line.trim_start().splitn(2, char::is_whitespace);
        let (Some(tid), Some(rest)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(tid) = tid.parse::<i32>() else {
            continue;
        };
        if let (true, Some((dfd, ptr, how))) = (tids.contains(&tid), args(rest)) {
            *theirs.entry((tid, dfd, ptr, how)).or_default() += 1;
        }
    }
    let mut mine = Hits::new();
    for line in our_text.lines() {
        // `comm-TID [cpu] secs: kpdiff: (sym+off/size) args`
        let Some((head, rest)) = line.split_once(" [") else {
            continue;
        };
        let Some(tid) = head
            .rsplit('-')
            .next()
            .and_then(|t| t.trim().parse::<i32>().ok())
        else {
            continue;
        };
        if let (true, Some((dfd, ptr, how))) = (tids.contains(&tid), args(rest)) {
            *mine.entry((tid, dfd, ptr, how)).or_default() += 1;
        }
    }
    let total: usize = mine.values().sum();
    if theirs.is_empty() {
        println!(
            "perf script printed:\n{}\n{}",
            perf_text.lines().take(5).collect::<Vec<_>>().join("\n"),
            String::from_utf8_lossy(&script.stderr)
        );
    }
    println!(
        "workload tids {tids:?}: kprobe-perf {total} events, perf {} events",
        theirs.values().sum::<usize>()
    );
    assert_eq!(
        total,
        THREADS * OPENS,
        "kprobe-perf saw every open: {}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(mine, theirs, "the two tools disagree");
    assert!(mine.keys().all(|k| k.1 == i64::from(libc::AT_FDCWD)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits (up to 120 s) until kprobe-perf holds an event per CPU (perf
/// was enabled before it started, through its control FIFO); a fixed
/// sleep was too short under single-threaded TCG.
fn wait_until_armed(ours: u32) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let our_events = || kprobe_perf_tests::perf_event_fds(ours);
    while our_events() < cpus {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "kprobe-perf ({} events) did not arm within 120 s",
            our_events()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Ours maps and enables its rings right after opening them.
    std::thread::sleep(Duration::from_secs(1));
}
