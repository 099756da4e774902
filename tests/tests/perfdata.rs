//! `record -o FILE`: the perf.data file replays exactly as the live run
//! printed (text and JSON Lines), and Debian's `perf script` reads it,
//! showing event name, comm, tid, cpu, time, ip and symbol for every
//! sample, for PMU kprobes, kretprobes and tracefs-defined probes alike.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip};

const WORKLOAD: &str = "for i in 1 2 3 4 5 6 7 8 9 10; do cat /etc/hostname /nonexistent/kprobe-perf-pd 2>/dev/null >/dev/null; done";

fn probes() -> Vec<&'static str> {
    vec![
        "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
        "r:do_sys_openat2 ret=$retval:s32",
        "p:pd_path do_sys_openat2 path=+0(%si):ustring",
    ]
}

fn record(file: &Path, json: bool) -> String {
    let mut cmd = Command::new(kprobe_perf_bin());
    cmd.arg("record").arg("-o").arg(file);
    if json {
        cmd.arg("--json");
    }
    for p in probes() {
        cmd.args(["-e", p]);
    }
    let out = cmd.args(["--", "sh", "-c", WORKLOAD]).output().unwrap();
    // record exits with the workload's status: 1, its last cat's (a
    // missing file).
    assert_eq!(
        out.status.code(),
        Some(1),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn script(file: &Path, json: bool) -> String {
    let mut cmd = Command::new(kprobe_perf_bin());
    cmd.arg("script").arg("-i").arg(file);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn script_prints_what_the_live_run_printed() {
    if !kprobes_available("script_prints_what_the_live_run_printed") {
        return;
    }
    let dir = std::env::temp_dir();
    let text_file = dir.join(format!("kprobe-perf-pd-{}.data", std::process::id()));
    let live = record(&text_file, false);
    assert!(live.lines().count() >= 30, "a live run with events: {live}");
    let replayed = script(&text_file, false);
    for (i, (a, b)) in live.lines().zip(replayed.lines()).enumerate() {
        assert_eq!(a, b, "line {i}");
    }
    assert_eq!(live.lines().count(), replayed.lines().count());

    let json_file = dir.join(format!("kprobe-perf-pd-{}.json.data", std::process::id()));
    let live = record(&json_file, true);
    assert_eq!(live, script(&json_file, true));
    std::fs::remove_file(&json_file).unwrap();

    // Debian's perf reads the file: every sample shows its event name,
    // comm, tid, cpu, time, ip and symbol.
    if !Path::new("/usr/bin/perf").exists() {
        return skip(
            "script_prints_what_the_live_run_printed",
            "its perf script half needs /usr/bin/perf (apt-get install linux-perf)",
        );
    }
    let out = Command::new("perf")
        .args(["script", "-F", "comm,tid,cpu,time,event,ip,sym", "-i"])
        .arg(&text_file)
        .output()
        .unwrap();
    std::fs::remove_file(&text_file).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf script failed: {stderr}");
    let perf = String::from_utf8(out.stdout).unwrap();
    let mut per_event = HashMap::<String, usize>::new();
    for line in perf.lines() {
        // `cat   123 [001]    50.953686: p_do_sys_openat2_0:  ffffffffa6163fa1 do_sys_openat2+0x1`
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(f.len() >= 7, "perf line: {line}");
        assert!(["cat", "sh"].contains(&f[0]), "comm in: {line}");
        assert!(f[1].parse::<i32>().is_ok(), "tid in: {line}");
        assert!(
            f[2].starts_with('[') && f[2].ends_with(']'),
            "cpu in: {line}"
        );
        assert!(f[3].ends_with(':'), "time in: {line}");
        let event = f[4].trim_end_matches(':');
        assert!(u64::from_str_radix(f[5], 16).is_ok(), "ip in: {line}");
        assert!(
            f[6].contains("do_sys_openat2") || f[6].contains("openat"),
            "symbol in: {line}"
        );
        *per_event.entry(event.to_string()).or_default() += 1;
    }
    // The same number of samples of each probe as the live run printed.
    let mut live_per_event = HashMap::<String, usize>::new();
    for line in replayed.lines() {
        let event = line
            .split(": ")
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_string();
        *live_per_event.entry(event).or_default() += 1;
    }
    for (event, n) in &live_per_event {
        assert_eq!(
            per_event.get(event),
            Some(n),
            "{event} in perf script: {perf}"
        );
    }
}

/// Uprobes (runs natively too): the file replays as the live run printed,
/// and perf names the probed libc function of every sample, also for
/// processes started during the recording.
#[test]
fn uprobe_files_replay_and_perf_names_the_function() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let ok = Path::new("/sys/bus/event_source/devices/uprobe").exists()
        && kprobe_perf_engine::testing::check_capabilities().is_ok()
        && libc.exists()
        && Path::new("/usr/bin/perf").exists();
    if !ok {
        return skip(
            "uprobe_files_replay_and_perf_names_the_function",
            "no uprobe PMU, CAP_PERFMON/CAP_SYS_ADMIN, x86_64 libc or /usr/bin/perf",
        );
    }
    let file = std::env::temp_dir().join(format!("kprobe-perf-pd-u-{}.data", std::process::id()));
    let live_file = file.with_extension("live");
    let mut rec = Command::new(kprobe_perf_bin())
        .args(["record", "-a", "-d", "4", "-o"])
        .arg(&file)
        .arg("-e")
        .arg(format!("p:{}:open64 flags=%si:x32", libc.display()))
        .stdout(std::fs::File::create(&live_file).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Processes started during the recording (their mappings come from the
    // kernel), until it ends: its start takes a while under TCG.
    let status = loop {
        if let Some(status) = rec.try_wait().unwrap() {
            break status;
        }
        let _ = Command::new("cat").arg("/etc/hostname").output();
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut e) = rec.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
    }
    assert!(status.success(), "{stderr}");
    let live = std::fs::read_to_string(&live_file).unwrap();
    std::fs::remove_file(&live_file).unwrap();
    assert!(live.contains(" cat-"), "cat's opens were recorded: {live}");
    assert_eq!(live, script(&file, false));
    let perf = Command::new("perf")
        .args(["script", "-F", "comm,tid,event,ip,sym", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    let perf = String::from_utf8(perf.stdout).unwrap();
    let cat: Vec<&str> = perf
        .lines()
        .filter(|l| l.trim_start().starts_with("cat "))
        .collect();
    assert!(!cat.is_empty(), "perf shows cat's samples: {perf}");
    for l in cat {
        assert!(l.contains("open"), "perf names the function: {l}");
    }
}
