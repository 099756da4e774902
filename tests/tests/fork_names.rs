//! A child is named what its parent was until it execs, as perf names it:
//! `bash -c 'cat < FILE > /dev/null; true'` forks a child that opens the
//! two redirections (libc's `open64`) and only then execs cat. Those two
//! opens are bash's, not cat's, live, in `script -i` of the `-o` file,
//! and in perf's reading of it. Uprobes on libc, so this runs natively
//! too.

use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, libc_path, uprobes_available};

/// (comm, tid) of each event line of kprobe-perf's text output.
fn events(text: &str) -> Vec<(String, i32)> {
    text.lines()
        .filter(|l| l.contains(": p_libc_open64_0: "))
        .filter_map(|l| {
            let head = l.split_whitespace().next()?;
            let (comm, tid) = head.rsplit_once('-')?;
            Some((comm.to_string(), tid.parse().ok()?))
        })
        .collect()
}

/// The two redirection opens of the forked child: the events of the one
/// thread that made exactly two (the parent makes its own, or none).
fn child_events(ev: &[(String, i32)]) -> Vec<(String, i32)> {
    let mut tids: Vec<i32> = ev.iter().map(|e| e.1).collect();
    tids.dedup();
    let child = tids
        .iter()
        .copied()
        .rev()
        .find(|t| ev.iter().filter(|e| e.1 == *t).count() == 2);
    ev.iter().filter(|e| Some(e.1) == child).cloned().collect()
}

#[test]
fn a_forked_child_has_its_parents_name_until_exec() {
    let test = "a_forked_child_has_its_parents_name_until_exec";
    if !uprobes_available(test) {
        return;
    }
    let Some(libc) = libc_path() else {
        panic!("{test}: no libc.so in this test's mappings");
    };
    let dir = std::env::temp_dir().join(format!("kprobe-perf-fork-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.data");
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-o"])
        .arg(&file)
        .args(["-e", &format!("p:{libc}:open64")])
        .args(["--", "bash", "-c", "cat < /etc/hostname > /dev/null; true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record: {stderr}");
    let live = events(&String::from_utf8_lossy(&out.stdout));
    let child = child_events(&live);
    assert_eq!(child.len(), 2, "the child's two opens in {live:?}");
    assert!(
        child.iter().all(|(comm, _)| comm == "bash"),
        "the child's opens before its exec are bash's: {live:?}"
    );
    assert!(
        !live.iter().any(|(comm, _)| comm == "cat"),
        "cat itself calls no open64: {live:?}"
    );

    let replay = Command::new(kprobe_perf_bin())
        .args(["script", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(replay.status.success());
    assert_eq!(
        events(&String::from_utf8_lossy(&replay.stdout)),
        live,
        "script -i names every event as the recording did"
    );

    if std::path::Path::new("/usr/bin/perf").exists() {
        let perf = Command::new("perf")
            .args(["script", "-F", "comm,tid", "-i"])
            .arg(&file)
            .output()
            .unwrap();
        let perf: Vec<(String, i32)> = String::from_utf8_lossy(&perf.stdout)
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some((w.next()?.to_string(), w.next()?.parse().ok()?))
            })
            .collect();
        assert_eq!(perf, live, "perf script names them the same");
    } else {
        println!("note: {test}: no /usr/bin/perf here, perf's reading not compared");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A uprobe the user puts on the PMU (`--backend pmu`) cannot follow a
/// command's forks: refused before anything is attached, with the
/// reason and the way out, where auto takes uprobe_events silently.
#[test]
fn a_uprobe_on_the_pmu_is_refused_for_a_command_with_the_reason() {
    let test = "a_uprobe_on_the_pmu_is_refused_for_a_command_with_the_reason";
    if !uprobes_available(test) {
        return;
    }
    let Some(libc) = libc_path() else {
        panic!("{test}: no libc.so in this test's mappings");
    };
    let spec = format!("p:{libc}:getpid");
    for verb in ["record", "stat"] {
        let out = Command::new(kprobe_perf_bin())
            .args([verb, "--backend", "pmu", "-e", &spec, "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{verb}: {stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "kprobe-perf: --backend pmu cannot follow forks with the uprobe p {libc}:getpid: the kernel re-creates an inherited uprobe PMU event at each fork and re-reads its binary's path there, from an address in kprobe-perf's memory, not the forking process's; use --backend auto or tracefs (a uprobe_events probe, which every fork inherits), or record system-wide (-a) with the PMU"
            ),
            "{verb}"
        );
    }
}
