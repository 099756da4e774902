//! Callchains against bpftrace's `kstack`: the same kprobes hit by the
//! very same calls give the same distinct kernel caller chains, cut to
//! the top 5 frames (the probed function and its 4 callers), each chain
//! counted the same number of times.
//!
//! `kprobe-perf record --call-graph kernel -- bpftrace -c CMD` runs
//! bpftrace, which runs the workload: both tools see the same calls of
//! the same process (bpftrace's `pid == cpid`; on kprobe-perf's side the
//! events whose pid is that `cpid`, which bpftrace prints).

use std::collections::BTreeMap;
use std::process::Command;

use kprobe_perf_tests::{bpftrace_runs, kprobe_perf_bin, kprobes_available, BPFTRACE};
use serde_json::Value;

/// A frame as both tools name it: the function and the offset in it
/// (bpftrace prints `function+DECIMAL`, kprobe-perf's JSON has `symbol`
/// and `offset` as numbers: both are read into the same pair).
type Frame = (String, u64);

/// Distinct chains (top 5 frames, innermost first) and their counts.
type Chains = BTreeMap<Vec<Frame>, u64>;

/// `function+123` as bpftrace's kstack prints a frame.
fn bpftrace_frame(line: &str) -> Frame {
    match line.rsplit_once('+') {
        Some((name, off)) => (
            name.to_string(),
            off.parse()
                .unwrap_or_else(|_| panic!("offset of bpftrace frame {line:?}")),
        ),
        None => (line.to_string(), 0),
    }
}

/// The chains of map `@NAME` in bpftrace's JSON output (`-f json`), whose
/// keys are the `kstack(5)` texts, one frame a line.
fn bpftrace_chains(output: &str, map: &str) -> Chains {
    let mut chains = Chains::new();
    for line in output.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["type"] != "map" {
            continue;
        }
        let Some(m) = v["data"][map].as_object() else {
            continue;
        };
        for (stack, count) in m {
            let frames: Vec<Frame> = stack
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(bpftrace_frame)
                .collect();
            *chains.entry(frames).or_default() += count.as_u64().unwrap();
        }
    }
    chains
}

/// The `cpid N` line the script's BEGIN printed.
fn bpftrace_cpid(output: &str) -> u64 {
    output
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "printf")
        .find_map(|v| {
            v["data"]
                .as_str()?
                .trim()
                .strip_prefix("cpid ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no cpid line in bpftrace's output:\n{output}"))
}

/// kprobe-perf's `--json` events of process `pid` whose innermost frame
/// is `function`, each callchain cut to its top 5 frames: those after the
/// process became `comm` by its execve (`execed`), or those before.
fn our_chains(json: &str, pid: u64, comm: &str, execed: bool, function: &str) -> Chains {
    let mut chains = Chains::new();
    for line in json.lines().filter(|l| l.starts_with('{')) {
        let e: Value = serde_json::from_str(line).unwrap();
        if e["type"] != "event" || e["pid"].as_u64() != Some(pid) {
            continue;
        }
        if (e["comm"].as_str() == Some(comm)) != execed {
            continue;
        }
        let frames: Vec<Frame> = e["callchain"]
            .as_array()
            .unwrap_or_else(|| panic!("no callchain in {e}"))
            .iter()
            .take(5)
            .map(|f| {
                (
                    f["symbol"].as_str().unwrap_or("[unknown]").to_string(),
                    f["offset"].as_u64().unwrap(),
                )
            })
            .collect();
        if frames.first().map(|f| f.0.as_str()) == Some(function) {
            *chains.entry(frames).or_default() += 1;
        }
    }
    chains
}

/// How many of kprobe-perf's `--json` events of process `pid` have
/// `do_exit` anywhere in their kernel callchain.
fn our_exiting(json: &str, pid: u64) -> usize {
    json.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "event" && e["pid"].as_u64() == Some(pid))
        .filter(|e| {
            e["callchain"]
                .as_array()
                .is_some_and(|c| c.iter().any(|f| f["symbol"] == "do_exit"))
        })
        .count()
}

fn show(chains: &Chains) -> String {
    chains
        .iter()
        .map(|(c, n)| {
            let names: Vec<String> = c.iter().map(|(s, o)| format!("{s}+{o}")).collect();
            format!("  {n:5} {}", names.join(" <- "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn names(chain: &[Frame]) -> Vec<&str> {
    chain.iter().map(|f| f.0.as_str()).collect()
}

/// `do_sys_openat2`, `vfs_read` and (the VM's root being 9p)
/// `p9_client_rpc` in `cat /etc/hostname`, under kprobe-perf's
/// `--call-graph kernel` and bpftrace's `kstack(5)` at once: the same set
/// of distinct chains, function names and offsets alike, and the same
/// count for each, over the calls cat makes after its execve and before
/// it starts to exit. `cat` opens through openat(2) only; it reaches
/// `vfs_read` through read(2) (`ksys_read`) and, in the dynamic loader,
/// pread64(2) (`__x64_sys_pread64`); `p9_client_rpc` through 11 (6.1) or
/// 12 (6.12) chains deeper than 5 frames.
#[test]
fn kstack_chains_agree_with_bpftrace() {
    let test = "kstack_chains_agree_with_bpftrace";
    if !kprobes_available(test) {
        return;
    }
    if !bpftrace_runs(test) {
        return;
    }
    let bpftrace = BPFTRACE;
    // The VM's root file system is 9p: cat's opens, reads and the rest
    // reach the 9p client's `p9_client_rpc` (module 9pnet) through many
    // paths, deeper than 5 frames, so that set is cut to the top 5.
    let p9 = std::path::Path::new("/sys/module/9pnet").exists();
    let mut probes = vec![("do_sys_openat2", "@open"), ("vfs_read", "@read")];
    if p9 {
        probes.push(("p9_client_rpc", "@p9"));
    } else {
        println!("module 9pnet is not loaded: p9_client_rpc left out");
    }
    // Both tools count the calls of bpftrace's child once it is cat
    // (after its execve; before it, the child waits in read(2) on a pipe
    // that kprobe-perf, attached first, sees enter vfs_read, and bpftrace
    // does not).
    let mut script = String::from("BEGIN { printf(\"cpid %d\\n\", cpid); }");
    let mut args: Vec<String> = ["record", "--json", "--call-graph", "kernel"]
        .map(String::from)
        .to_vec();
    // The calls of the exiting cat (PF_EXITING, 0x4, set: the 9p clunks
    // of its last files and dentries) are counted apart. do_exit detaches
    // the task's perf events (perf_event_exit_task) before it closes the
    // task's files (exit_files, then the deferred `__fput`s), so no
    // per-task event, kprobe-perf's with `-- CMD` or perf's with
    // `perf record -- CMD`, sees those calls; a per-CPU one (`-a`) does.
    for (function, map) in &probes {
        script.push_str(&format!(
            " kprobe:{function} /pid == cpid && comm == \"cat\" && !(curtask->flags & 4)/ \
             {{ {map}[kstack(5)] = count(); }} \
             kprobe:{function} /pid == cpid && comm == \"cat\" && (curtask->flags & 4)/ \
             {{ @exiting[kstack(5)] = count(); }}"
        ));
        args.extend(["-e".to_string(), format!("p:{function}")]);
    }
    let bt_out =
        std::env::temp_dir().join(format!("kprobe-perf-bt-stacks-{}.json", std::process::id()));
    let bt_path = bt_out.to_str().unwrap();
    let out = Command::new(kprobe_perf_bin())
        .args(&args)
        .args([
            "--",
            bpftrace,
            "-f",
            "json",
            "-o",
            bt_path,
            "-e",
            &script,
            "-c",
            "/usr/bin/cat /etc/hostname",
        ])
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&out.stdout);
    let bt_text = std::fs::read_to_string(&bt_out).unwrap_or_default();
    let _ = std::fs::remove_file(&bt_out);
    assert!(
        out.status.success(),
        "record failed: {}\nbpftrace's output:\n{bt_text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = json
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {json}"));
    assert_eq!(
        summary["lost"].as_u64(),
        Some(0),
        "events lost, so counts cannot be compared: {summary}"
    );
    let cpid = bpftrace_cpid(&bt_text);
    let exiting = bpftrace_chains(&bt_text, "@exiting");
    let ours_exiting = our_exiting(&json, cpid);
    println!(
        "calls of the exiting cat: bpftrace counts {}, kprobe-perf records {ours_exiting}:\n{}",
        exiting.values().sum::<u64>(),
        show(&exiting)
    );
    // The kernel's order, not a loss of kprobe-perf's: nothing of the
    // exiting cat reaches a per-task event, and the summary says 0 lost.
    assert_eq!(
        ours_exiting, 0,
        "events of cat (pid {cpid}) under do_exit, after the kernel detached its events"
    );
    if p9 {
        // On 6.1 and 6.12: cat's last 4 9p clunks (from `__fput` <-
        // `task_work_run` <- `do_exit`), the calls per-task events miss.
        assert_eq!(
            exiting.values().sum::<u64>(),
            4,
            "bpftrace's calls of the exiting cat:\n{}",
            show(&exiting)
        );
        assert!(
            exiting
                .keys()
                .all(|c| names(c).starts_with(&["p9_client_rpc", "p9_client_clunk"])),
            "{}",
            show(&exiting)
        );
    } else {
        assert!(exiting.is_empty(), "{}", show(&exiting));
    }
    for (function, map) in &probes {
        let ours = our_chains(&json, cpid, "cat", true, function);
        let theirs = bpftrace_chains(&bt_text, map);
        println!(
            "{function} in cat (pid {cpid}): kprobe-perf, {} distinct chains:\n{}\n\
             bpftrace, {} distinct chains:\n{}",
            ours.len(),
            show(&ours),
            theirs.len(),
            show(&theirs)
        );
        let our_set: Vec<&Vec<Frame>> = ours.keys().collect();
        let their_set: Vec<&Vec<Frame>> = theirs.keys().collect();
        assert_eq!(
            our_set, their_set,
            "{function}: the sets of distinct chains (top 5 frames) differ"
        );
        assert_eq!(
            ours, theirs,
            "{function}: the same chains, but counted differently by the two tools \
             although both saw the same calls of the same process"
        );
        // The chain known to be there: the function, the syscall's entry
        // right above it, then do_syscall_64.
        let known = match *function {
            "do_sys_openat2" => &["do_sys_openat2", "__x64_sys_openat"][..],
            "vfs_read" => &["vfs_read", "ksys_read"][..],
            _ => &["p9_client_rpc"][..],
        };
        let deep = ours.keys().any(|c| {
            let n = names(c);
            n.starts_with(known) && n[known.len()..].contains(&"do_syscall_64")
        });
        if *function == "p9_client_rpc" {
            // Deeper than 5 frames: do_syscall_64 is cut off.
            assert!(
                ours.len() >= 2 && ours.keys().all(|c| c.len() == 5),
                "{function}: chains of 5 frames, more than one: {}",
                show(&ours)
            );
        } else {
            assert!(
                deep,
                "{function}: no chain {known:?} <- ... do_syscall_64 among\n{}",
                show(&ours)
            );
        }
        assert!(ours.keys().all(|c| c.len() <= 5));
    }
    // Before its execve, bpftrace's child waits in read(2) on a pipe
    // until bpftrace has attached its probes and says go: kprobe-perf,
    // attached before bpftrace started, sees that one vfs_read (comm
    // still "bpftrace"); bpftrace, attached while the call was under way,
    // does not. Nothing else runs in the child before the execve.
    let before: Vec<(String, Chains)> = ["do_sys_openat2", "vfs_read"]
        .iter()
        .map(|f| (f.to_string(), our_chains(&json, cpid, "cat", false, f)))
        .collect();
    println!("pid {cpid} before its execve: {before:?}");
    assert!(before[0].1.is_empty(), "{before:?}");
    assert!(
        before[1].1.values().sum::<u64>() <= 1
            && before[1]
                .1
                .keys()
                .all(|c| names(c).starts_with(&["vfs_read", "ksys_read"])),
        "bpftrace's child read only its pipe before the execve: {before:?}"
    );
    // vfs_read is reached through more than one path.
    let reads = our_chains(&json, cpid, "cat", true, "vfs_read");
    assert!(
        reads
            .keys()
            .any(|c| names(c).contains(&"__x64_sys_pread64")),
        "vfs_read through pread64 (the dynamic loader): {}",
        show(&reads)
    );
    assert!(reads.len() >= 2, "{}", show(&reads));
}
