//! Nothing stays in the kernel: a recording killed with SIGKILL has its
//! tracefs definitions removed by its guardian within 2 s, with no later
//! start and no `cleanup`; sessions of one process have their own groups.
//! Uprobes follow a command's forks through uprobe_events.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_engine::cli::plan::Backend;
use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{KernelSymbols, Session, SessionOptions};
use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, vm_kernel};

const TRACEFS: &str = "/sys/kernel/tracing";
const FORKER: &str = env!("CARGO_BIN_EXE_forker");

/// The lines of a tracefs event list that belong to groups starting with
/// `prefix` (`kprobe_perf_<pid>_`).
fn lines_of(file: &str, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{TRACEFS}/{file}"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!(":{prefix}")))
        .map(str::to_string)
        .collect()
}

/// kprobes and uprobes of groups starting with `prefix`.
fn defined(prefix: &str) -> (Vec<String>, Vec<String>) {
    (
        lines_of("kprobe_events", prefix),
        lines_of("uprobe_events", prefix),
    )
}

/// Waits up to `limit` for `done`; returns the time it took, or None.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done().then(|| start.elapsed())
}

/// The pids of a process's children (`/proc/PID/task/*/children`).
fn children_of(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `record -a -e 'r8:myret do_sys_openat2'` killed with SIGKILL: within
/// 2 s dynamic_events holds nothing of its group, and a reader of its
/// output sees end-of-file (the guardian holds none of its descriptors).
#[test]
fn sigkill_of_a_system_wide_recording_leaves_nothing() {
    if !kprobes_available("sigkill_of_a_system_wide_recording_leaves_nothing") {
        return;
    }
    let mut rec = Command::new(kprobe_perf_bin())
        .args(["record", "-a", "-e", "r8:myret do_sys_openat2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("kprobe_perf_{}_", rec.id());
    let armed = wait_for(Duration::from_secs(60), || {
        !lines_of("dynamic_events", &prefix).is_empty()
    });
    assert!(armed.is_some(), "no definition of {prefix} within 60 s");
    assert_eq!(
        defined(&prefix).0,
        vec![format!("r8:{prefix}0/myret do_sys_openat2")]
    );
    let mut out = rec.stdout.take().unwrap();
    kill9(&mut rec);
    let gone = wait_for(Duration::from_secs(2), || {
        lines_of("dynamic_events", &prefix).is_empty() && defined(&prefix) == (vec![], vec![])
    });
    println!("definitions of {prefix} gone {gone:?} after SIGKILL");
    assert!(
        gone.is_some(),
        "still defined 2 s after SIGKILL: {:?}",
        defined(&prefix)
    );
    // EOF on the recorder's stdout: nothing else holds the pipe.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        tx.send(out.read_to_end(&mut sink).is_ok()).unwrap();
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(2)),
        Ok(true),
        "the recorder's stdout did not reach EOF: someone still holds it"
    );
}

/// A recording of a command with a kretprobe (maxactive, so tracefs) and
/// a uprobe (a command: uprobe_events) killed with SIGKILL: within 2 s
/// neither dynamic_events nor uprobe_events holds anything of its group.
#[test]
fn sigkill_of_a_command_recording_leaves_no_kprobe_and_no_uprobe() {
    if !kprobes_available("sigkill_of_a_command_recording_leaves_no_kprobe_and_no_uprobe") {
        return;
    }
    let mut rec = Command::new(kprobe_perf_bin())
        .args(["record", "-e", "r8:myret do_sys_openat2", "-e"])
        .arg(format!("p:{FORKER}:kprobe_perf_fork_target a=$arg1"))
        .args(["--", "sleep", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("kprobe_perf_{}_", rec.id());
    let armed = wait_for(Duration::from_secs(60), || {
        let (k, u) = defined(&prefix);
        !k.is_empty() && !u.is_empty()
    });
    assert!(
        armed.is_some(),
        "not both defined within 60 s: {:?}",
        defined(&prefix)
    );
    let (k, u) = defined(&prefix);
    assert_eq!(k, vec![format!("r8:{prefix}0/myret do_sys_openat2")]);
    assert_eq!(u.len(), 1, "{u:?}");
    assert!(
        u[0].starts_with(&format!(
            "p:{prefix}0/p_forker_kprobe_perf_fork_target_0 {FORKER}:0x"
        )) && u[0].ends_with(" a=%di"),
        "{u:?}"
    );
    let sleepers = children_of(rec.id());
    kill9(&mut rec);
    let gone = wait_for(Duration::from_secs(2), || {
        defined(&prefix) == (vec![], vec![]) && lines_of("dynamic_events", &prefix).is_empty()
    });
    println!("kprobe and uprobe of {prefix} gone {gone:?} after SIGKILL");
    for pid in sleepers {
        let _ = Command::new("kill")
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status();
    }
    assert!(
        gone.is_some(),
        "still defined 2 s after SIGKILL: {:?}",
        defined(&prefix)
    );
}

/// Two sessions of one process get different groups, and each removes
/// only its own definitions.
#[test]
fn two_sessions_have_their_own_groups() {
    if !kprobes_available("two_sessions_have_their_own_groups") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let open = || {
        let plans = plan_probes(&["r4:do_sys_openat2"], &symbols).unwrap();
        assert_eq!(plans[0].backend, Backend::Tracefs);
        Session::open(plans, SessionOptions::default()).unwrap()
    };
    let a = open();
    let b = open();
    let (ga, gb) = (
        a.tracefs_group().unwrap().to_string(),
        b.tracefs_group().unwrap().to_string(),
    );
    let pid = std::process::id();
    assert_ne!(ga, gb);
    for g in [&ga, &gb] {
        assert!(g.starts_with(&format!("kprobe_perf_{pid}_")), "{g}");
    }
    let line = |g: &str| format!("r4:{g}/r_do_sys_openat2_0 do_sys_openat2");
    let ours = format!("kprobe_perf_{pid}_");
    let mut both = vec![line(&ga), line(&gb)];
    both.sort();
    let mut now = defined(&ours).0;
    now.sort();
    assert_eq!(now, both);
    drop(a);
    assert_eq!(defined(&ours).0, vec![line(&gb)]);
    drop(b);
    assert_eq!(defined(&ours).0, Vec::<String>::new());
}

/// `record -e 'p:BIN:func' -e 'r:BIN:func' -- BIN` where BIN forks: every
/// call of parent and child is recorded, with its arguments, return value,
/// pid and tid. Needs only uprobes and tracefs, so it also runs natively.
#[test]
fn uprobes_follow_a_forking_command() {
    let tracefs_uprobes = std::path::Path::new(TRACEFS).join("uprobe_events").exists();
    let root = kprobe_perf_engine::testing::check_capabilities().is_ok();
    if !tracefs_uprobes || !root {
        if let Some(k) = vm_kernel() {
            panic!("uprobe_events must work inside the VM (kernel {k})");
        }
        println!("SKIP uprobes_follow_a_forking_command: no {TRACEFS}/uprobe_events, or no CAP_PERFMON/CAP_SYS_ADMIN");
        return;
    }
    let pidfile = std::env::temp_dir().join(format!("kprobe-perf-forker-{}", std::process::id()));
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "--json", "-e"])
        .arg(format!(
            "p:{FORKER}:kprobe_perf_fork_target a=$arg1 b=%si:u32"
        ))
        .arg("-e")
        .arg(format!("r:{FORKER}:kprobe_perf_fork_target ret=$retval"))
        .arg("--")
        .arg(FORKER)
        .arg(&pidfile)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("kprobe_perf_{}_", out.id());
    let out = out.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let pids = std::fs::read_to_string(&pidfile).unwrap();
    let _ = std::fs::remove_file(&pidfile);
    let pids: Vec<i64> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (parent, child) = (pids[0], pids[1]);
    let events: Vec<(String, i64, i64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "event")
        .map(|v| {
            (
                v["event"].as_str().unwrap().to_string(),
                v["pid"].as_i64().unwrap(),
                v["tid"].as_i64().unwrap(),
                v["args"].to_string(),
            )
        })
        .collect();
    let entry = "p_forker_kprobe_perf_fork_target_0".to_string();
    let ret = "r_forker_kprobe_perf_fork_target_0".to_string();
    let want = vec![
        (
            entry.clone(),
            parent,
            parent,
            r#"{"a":1,"b":16}"#.to_string(),
        ),
        (ret.clone(), parent, parent, r#"{"ret":1016}"#.to_string()),
        (entry.clone(), child, child, r#"{"a":2,"b":32}"#.to_string()),
        (ret.clone(), child, child, r#"{"ret":2032}"#.to_string()),
        (entry, parent, parent, r#"{"a":3,"b":48}"#.to_string()),
        (ret, parent, parent, r#"{"ret":3048}"#.to_string()),
    ];
    assert_eq!(events, want, "{stderr}");
    // And nothing of it stays defined.
    assert_eq!(lines_of("uprobe_events", &prefix), Vec::<String>::new());
}

/// Live guardians (comm `kprobe-perf-gd`, not zombies) whose command line
/// (the recorder's, inherited at fork) contains `marker`.
fn live_guardians(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            stat.contains("(kprobe-perf-gd) ")
                && !stat.contains(") Z ")
                && String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

/// Ctrl-C reaches the whole process group: the recorder removes its
/// uprobe, and its guardian, which ignores the signal, exits once the
/// recorder is gone. Needs uprobes and tracefs, so it also runs natively.
#[test]
fn ctrl_c_of_the_process_group_leaves_nothing_and_no_guardian() {
    use std::os::unix::process::CommandExt;
    let tracefs_uprobes = std::path::Path::new(TRACEFS).join("uprobe_events").exists();
    let root = kprobe_perf_engine::testing::check_capabilities().is_ok();
    if !tracefs_uprobes || !root {
        if let Some(k) = vm_kernel() {
            panic!("uprobe_events must work inside the VM (kernel {k})");
        }
        println!("SKIP ctrl_c_of_the_process_group_leaves_nothing_and_no_guardian: no {TRACEFS}/uprobe_events, or no CAP_PERFMON/CAP_SYS_ADMIN");
        return;
    }
    let marker = format!("117.{}", std::process::id());
    let mut rec = Command::new(kprobe_perf_bin())
        .args(["record", "-e"])
        .arg(format!("p:{FORKER}:kprobe_perf_fork_target a=$arg1"))
        .args(["--", "sleep", &marker])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let prefix = format!("kprobe_perf_{}_", rec.id());
    let armed = wait_for(Duration::from_secs(60), || {
        !defined(&prefix).1.is_empty() && !children_of(rec.id()).is_empty()
    });
    assert!(armed.is_some(), "no uprobe of {prefix} within 60 s");
    assert_eq!(live_guardians(&marker).len(), 1, "one guardian runs");
    let status = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", rec.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let ended = wait_for(Duration::from_secs(10), || {
        rec.try_wait().unwrap().is_some()
    });
    assert!(ended.is_some(), "the recorder did not end on SIGINT");
    let gone = wait_for(Duration::from_secs(2), || {
        defined(&prefix).1.is_empty() && live_guardians(&marker).is_empty()
    });
    assert!(
        gone.is_some(),
        "2 s after the recorder ended: uprobes {:?}, guardians {:?}",
        defined(&prefix).1,
        live_guardians(&marker)
    );
}

/// Appends one line to a tracefs event list.
fn append(file: &str, line: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(format!("{TRACEFS}/{file}"))
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
        .unwrap();
}

/// A start that needs no tracefs at all (a PMU probe) still removes the
/// kprobes and uprobes of kprobe-perf processes that are gone, in the old
/// (`kprobe_perf_<pid>`) and new (`kprobe_perf_<pid>_<n>`) group forms.
/// Natively (no kprobes) only the uprobe part runs.
#[test]
fn any_start_removes_definitions_of_dead_processes() {
    let tracefs_uprobes = std::path::Path::new(TRACEFS).join("uprobe_events").exists();
    let root = kprobe_perf_engine::testing::check_capabilities().is_ok();
    if !tracefs_uprobes || !root {
        if let Some(k) = vm_kernel() {
            panic!("uprobe_events must work inside the VM (kernel {k})");
        }
        println!("SKIP any_start_removes_definitions_of_dead_processes: no {TRACEFS}/uprobe_events, or no CAP_PERFMON/CAP_SYS_ADMIN");
        return;
    }
    let kernel = vm_kernel().is_some();
    // pids above pid_max (4194304 at most) belong to no process.
    if kernel {
        append("kprobe_events", "p:kprobe_perf_4999999/left do_sys_openat2");
        append(
            "kprobe_events",
            "r:kprobe_perf_4999998_3/left_ret do_sys_openat2",
        );
    }
    append(
        "uprobe_events",
        &format!("p:kprobe_perf_4999997_0/left_u {FORKER}:0x1000"),
    );
    let planted = |file| lines_of(file, "kprobe_perf_499999");
    assert_eq!(planted("kprobe_events").len(), if kernel { 2 } else { 0 });
    assert_eq!(planted("uprobe_events").len(), 1);
    // A PMU probe only: a uprobe system-wide (and a kprobe in the VM).
    let mut args = vec![
        "record".to_string(),
        "-a".into(),
        "-d".into(),
        "0.1".into(),
        "-e".into(),
        format!("p:{FORKER}:kprobe_perf_fork_target"),
    ];
    if kernel {
        args.extend(["-e".into(), "p:do_sys_openat2".into()]);
    }
    let out = Command::new(kprobe_perf_bin())
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(planted("kprobe_events"), Vec::<String>::new());
    assert_eq!(planted("uprobe_events"), Vec::<String>::new());
}

/// A process with threads (`#[tokio::main]`, a host application) cannot
/// fork its guardian: `Guardian::start` runs the program again, detached,
/// and that copy guards. The copy runs (named `kprobe-perf-gd`, the
/// program's command line), and after SIGKILL of the recorder the
/// uprobe_events definition of its session is gone within 2 s and the
/// guardian exits. Uprobes only, so it also runs natively.
#[test]
fn a_process_with_threads_is_guarded_by_a_copy_of_itself() {
    let test = "a_process_with_threads_is_guarded_by_a_copy_of_itself";
    if !kprobe_perf_tests::uprobes_available(test) {
        return;
    }
    let mut rec = Command::new(env!("CARGO_BIN_EXE_threaded_guardian"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // "armed GROUP\n" once the session's uprobe is defined and armed.
    let mut out = rec.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let prefix = format!("kprobe_perf_{}_", rec.id());
    let Some(group) = line.strip_prefix("armed ") else {
        let mut err = String::new();
        let _ = rec.stderr.take().unwrap().read_to_string(&mut err);
        kill9(&mut rec);
        panic!("no 'armed GROUP' line: {line:?} {err}");
    };
    assert!(group.starts_with(&prefix), "{group}");
    assert_eq!(lines_of("uprobe_events", &prefix).len(), 1);
    let guardians = live_guardians("threaded_guardian");
    assert_eq!(guardians.len(), 1, "one guardian copy: {guardians:?}");
    let sleepers = children_of(rec.id());
    kill9(&mut rec);
    let gone = wait_for(Duration::from_secs(2), || {
        lines_of("uprobe_events", &prefix).is_empty()
    });
    let exited = wait_for(Duration::from_secs(10), || {
        live_guardians("threaded_guardian").is_empty()
    });
    for pid in sleepers {
        let _ = Command::new("kill")
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status();
    }
    assert!(gone.is_some(), "still defined 2 s after SIGKILL");
    assert!(exited.is_some(), "the guardian copy still runs");
}
