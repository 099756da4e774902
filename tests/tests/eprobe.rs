//! Event probes (`e:`) recorded end to end. The kernel gives eprobes no
//! perf handler (kernel/trace/trace_eprobe.c, `eprobe_register`), so
//! kprobe-perf reads them from ftrace's buffer in a tracing instance of
//! its own. These tests record an eprobe on `syscalls.sys_enter_openat`
//! with fields and a string fetched from user memory, check the values of
//! the command's opens, and check that nothing (definition or instance)
//! is left after a normal exit, a SIGINT and a SIGKILL. A kernel without
//! eprobes (5.10) is skipped with the reason.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip_here};

const TRACEFS: &str = "/sys/kernel/tracing";

/// The eprobe every test records: the directory fd as a signed int, the
/// flags in hex, and the path the kernel reads from user memory.
const OPENAT: &str =
    "e:openat syscalls.sys_enter_openat dfd=$dfd:s32 flags=$flags:x32 path=+0($filename):ustring";

/// True when the kernel here can define eprobes on syscall events; prints
/// why not otherwise.
fn eprobes_here(test: &str) -> bool {
    if !kprobes_available(test) {
        return false;
    }
    let readme = std::fs::read_to_string(format!("{TRACEFS}/README")).unwrap_or_default();
    if !readme.contains("e[:[<group>/][<event>]]") {
        skip_here(
            test,
            "this kernel has no event probes (its tracefs README lacks the e: form; Linux 5.15+ with CONFIG_EPROBE_EVENTS)",
        );
        return false;
    }
    if !std::path::Path::new(&format!("{TRACEFS}/events/syscalls/sys_enter_openat")).exists() {
        skip_here(
            test,
            "this kernel has no syscalls.sys_enter_openat event (CONFIG_FTRACE_SYSCALLS)",
        );
        return false;
    }
    true
}

/// What a recorder of pid `pid` left: lines of `dynamic_events` in its
/// groups, and its instances.
fn left_by(pid: u32) -> (Vec<String>, Vec<String>) {
    let prefix = format!("kprobe_perf_{pid}_");
    let defs = std::fs::read_to_string(format!("{TRACEFS}/dynamic_events"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!(":{prefix}")))
        .map(str::to_string)
        .collect();
    let instances = std::fs::read_dir(format!("{TRACEFS}/instances"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    (defs, instances)
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// The command's two opens have exact values: `cat /etc/hostname`
/// (read-only) and the shell's `: > PATH` of a made-up path (write,
/// create, truncate); only the command's processes are recorded; the
/// summary counts every event and loses none; nothing is left after.
#[test]
fn openat_fields_and_strings_of_a_command() {
    if !eprobes_here("openat_fields_and_strings_of_a_command") {
        return;
    }
    let made_up = format!("/tmp/kpf-eprobe-made-up-{}", std::process::id());
    let script = format!("cat /etc/hostname; : > {made_up}");
    let rec = Command::new(kprobe_perf_bin())
        .args(["record", "--json", "-e", OPENAT, "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = rec.id();
    let out = rec.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&made_up);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<&serde_json::Value> = lines.iter().filter(|v| v["type"] == "event").collect();
    let opens_of = |path: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .copied()
            .filter(|v| v["args"]["path"] == path)
            .collect()
    };
    let hostname = opens_of("/etc/hostname");
    assert_eq!(hostname.len(), 1, "{stdout}");
    assert_eq!(hostname[0]["event"], "openat");
    assert_eq!(hostname[0]["args"]["dfd"], -100, "AT_FDCWD");
    assert_eq!(hostname[0]["args"]["flags"], 0, "O_RDONLY");
    let created = opens_of(&made_up);
    assert_eq!(created.len(), 1, "{stdout}");
    assert_eq!(created[0]["args"]["dfd"], -100, "AT_FDCWD");
    // O_WRONLY | O_CREAT | O_TRUNC (x86_64 and arm64 agree).
    assert_eq!(created[0]["args"]["flags"], 0o1101, "{}", created[0]);
    // The command's processes only: the shell and cat.
    let mut tids: Vec<i64> = events.iter().filter_map(|v| v["tid"].as_i64()).collect();
    tids.sort_unstable();
    tids.dedup();
    assert!((1..=2).contains(&tids.len()), "threads {tids:?}: {stdout}");
    // Times from the perf clock, in order.
    let times: Vec<u64> = events
        .iter()
        .filter_map(|v| v["time_ns"].as_u64())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let summary = lines.iter().find(|v| v["type"] == "summary").unwrap();
    assert_eq!(summary["events"], events.len() as u64, "{summary}");
    assert_eq!(summary["lost"], 0, "{summary}");
    assert!(
        stderr.contains(&format!(
            "kprobe-perf: {} events (openat: {}), 0 lost",
            events.len(),
            events.len()
        )),
        "{stderr}"
    );
    assert_eq!(left_by(pid), (vec![], vec![]));
}

/// The text output: one ftrace-like line per event, the values printed
/// as the types say (`s32` decimal, `x32` hex, strings quoted).
#[test]
fn text_lines_of_a_command() {
    if !eprobes_here("text_lines_of_a_command") {
        return;
    }
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", OPENAT, "--", "cat", "/etc/hostname"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert!(out.status.success(), "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("\"/etc/hostname\""))
        .unwrap_or_else(|| panic!("no open of /etc/hostname: {stdout}"));
    assert!(
        line.ends_with(": openat: dfd=-100 flags=0x0 path=\"/etc/hostname\""),
        "{line}"
    );
    assert!(line.trim_start().starts_with("<...>-"), "{line}");
}

/// A system-wide recording: started, seen armed (its definition and its
/// instance exist), then stopped by `signal`.
fn recording_stopped_by(signal: i32) -> (Child, u32) {
    let mut rec = Command::new(kprobe_perf_bin())
        .args(["record", "-a", "-q", "-e", OPENAT])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = rec.id();
    let armed = wait_for(Duration::from_secs(60), || {
        let (d, i) = left_by(pid);
        !d.is_empty() && !i.is_empty()
    });
    if !armed {
        let _ = rec.kill();
        let out = rec.wait_with_output().unwrap();
        panic!(
            "not armed within 60 s: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (defs, instances) = left_by(pid);
    assert_eq!(defs.len(), 1, "{defs:?}");
    assert!(
        defs[0].starts_with(&format!("e:kprobe_perf_{pid}_")),
        "{defs:?}"
    );
    assert_eq!(instances.len(), 1, "{instances:?}");
    // Let some opens happen system-wide.
    let _ = std::fs::read_to_string("/etc/hostname");
    // SAFETY: kill(2) reads no memory of ours.
    let r = unsafe { libc::kill(pid as i32, signal) };
    assert_eq!(r, 0);
    (rec, pid)
}

/// Ctrl-C ends the recording cleanly: exit 0 (an interrupted recording
/// without a command), a summary, and nothing left.
#[test]
fn sigint_removes_the_eprobe_and_its_instance() {
    if !eprobes_here("sigint_removes_the_eprobe_and_its_instance") {
        return;
    }
    let (rec, pid) = recording_stopped_by(libc::SIGINT);
    let out = rec.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("kprobe-perf: "), "{stderr}");
    assert!(stderr.contains(" lost"), "{stderr}");
    assert_eq!(left_by(pid), (vec![], vec![]), "{stderr}");
}

/// SIGKILL drops nothing; the guardian removes the instance and then the
/// definition, within a few seconds.
#[test]
fn sigkill_leaves_nothing_after_the_guardian() {
    if !eprobes_here("sigkill_leaves_nothing_after_the_guardian") {
        return;
    }
    let (mut rec, pid) = recording_stopped_by(libc::SIGKILL);
    rec.wait().unwrap();
    let clean = wait_for(Duration::from_secs(15), || left_by(pid) == (vec![], vec![]));
    assert!(clean, "left after SIGKILL: {:?}", left_by(pid));
}
