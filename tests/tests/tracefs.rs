//! The tracefs route against a real kernel: fetch args the kernel reads at
//! hit time, kretprobe maxactive and its misses, and nothing left behind.

use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use kprobe_perf_engine::cli::plan::Backend;
use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{KernelSymbols, Session, SessionOptions};
use kprobe_perf_tests::{
    for_kernel, kprobe_perf_bin, kprobes_available, online_cpus, possible_cpus, skip_here, xorshift,
};

const KPROBE_EVENTS: &str = "/sys/kernel/tracing/kprobe_events";

fn our_event_lines() -> Vec<String> {
    std::fs::read_to_string(KPROBE_EVENTS)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(":kprobe_perf_"))
        .map(str::to_string)
        .collect()
}

/// The kernel reads the path string (a user pointer) at hit time; the
/// event of our thread carries exactly the path we opened.
#[test]
fn kernel_fetched_string_is_exact() {
    if !kprobes_available("kernel_fetched_string_is_exact") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    // jiffies is a data symbol: without CONFIG_KALLSYMS_ALL (Debian's arm64
    // 6.1) kallsyms lacks it and the kernel refuses @jiffies; the function's
    // own first bytes are as good a kernel-memory read.
    let sym = if symbols.lookup("jiffies").is_empty() {
        "do_sys_openat2"
    } else {
        "jiffies"
    };
    let plans = plan_probes(
        &[for_kernel(&format!(
            "p:do_sys_openat2 dfd=%di:s32 path=+0(%si):ustring j=@{sym}:u64 c=$comm"
        ))],
        &symbols,
    )
    .unwrap();
    assert_eq!(plans[0].backend, Backend::Tracefs);
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    let group = session.tracefs_group().unwrap().to_string();
    assert!(
        group.starts_with(&format!("kprobe_perf_{}_", std::process::id())),
        "{group}"
    );
    assert_eq!(
        our_event_lines(),
        vec![for_kernel(&format!("p:{group}/p_do_sys_openat2_0 do_sys_openat2 dfd=%di:s32 path=+0(%si):ustring j=@{sym}:u64 c=$comm"))]
    );
    session.enable().unwrap();
    let path = format!("/nonexistent/kprobe-perf-{}-string", std::process::id());
    let p2 = path.clone();
    let tid = std::thread::Builder::new()
        .name("probe-me".into())
        .spawn(move || {
            let _ = std::fs::File::open(&p2);
            kprobe_perf_engine::cli::os::gettid()
        })
        .unwrap()
        .join()
        .unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.is_empty() && Instant::now() < deadline {
        session
            .poll(
                Some(Duration::from_millis(100)),
                &mut kprobe_perf_engine::sink_fn(|e| {
                    if e.tid == tid {
                        seen.push(e.args.clone());
                    }
                }),
            )
            .unwrap();
    }
    assert_eq!(seen.len(), 1, "one open by tid {tid}");
    let args = &seen[0];
    assert_eq!(args[0].as_i64(), Some(-100));
    assert_eq!(args[1].as_str(), Some(path.as_str()));
    assert!(
        args[2].as_i64().unwrap() != 0,
        "{sym} read from kernel memory"
    );
    assert_eq!(
        args[3].as_str(),
        Some("probe-me"),
        "the kernel's current->comm"
    );
    drop(session);
    assert_eq!(our_event_lines(), Vec::<String>::new(), "removed at drop");
}

/// Eight threads sleep at once inside hrtimer_nanosleep: a kretprobe with
/// maxactive 1 reports one return and the kernel counts exactly 7 misses;
/// with maxactive 16 all eight return and nothing is missed.
#[test]
fn maxactive_bounds_concurrent_returns_and_misses_are_counted() {
    if !kprobes_available("maxactive_bounds_concurrent_returns_and_misses_are_counted") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    for (maxactive, want_returns, want_misses) in [(1u32, 1usize, 7u64), (16, 8, 0)] {
        let spec = format!("r{maxactive}:hrtimer_nanosleep ret=$retval:s64");
        let plans = plan_probes(&[spec.as_str()], &symbols).unwrap();
        let mut session = Session::open(plans, SessionOptions::default()).unwrap();
        session.enable().unwrap();
        let barrier = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let b = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    b.wait();
                    std::thread::sleep(Duration::from_millis(800));
                    kprobe_perf_engine::cli::os::gettid()
                })
            })
            .collect();
        let tids: Vec<i32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let mut returns = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && returns.len() < want_returns {
            session
                .poll(
                    Some(Duration::from_millis(100)),
                    &mut kprobe_perf_engine::sink_fn(|e| {
                        if tids.contains(&e.tid) {
                            returns.push(e.args[0].as_i64());
                        }
                    }),
                )
                .unwrap();
        }
        session
            .poll(
                Some(Duration::from_millis(200)),
                &mut kprobe_perf_engine::sink_fn(|e| {
                    if tids.contains(&e.tid) {
                        returns.push(e.args[0].as_i64());
                    }
                }),
            )
            .unwrap();
        assert_eq!(
            returns.len(),
            want_returns,
            "returns with maxactive {maxactive}"
        );
        assert!(returns.iter().all(|r| *r == Some(0)), "{returns:?}");
        let counts = session.kernel_counts()[0].expect("tracefs counts");
        assert_eq!(
            counts.misses, want_misses,
            "misses with maxactive {maxactive}"
        );
        assert_eq!(
            counts.hits, want_returns as u64,
            "hits with maxactive {maxactive}"
        );
    }
}

/// The CLI says how many returns were missed and which maxactive to use.
#[test]
fn cli_reports_misses_with_the_maxactive_to_use() {
    if !kprobes_available("cli_reports_misses_with_the_maxactive_to_use") {
        return;
    }
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", "r1:hrtimer_nanosleep", "--", "sh", "-c"])
        .arg("sleep 1 & sleep 1 & sleep 1 & sleep 1 & wait")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.lines().any(|l| l
            == "kprobe-perf: r_hrtimer_nanosleep_0 missed 3 of 4 hits in the kernel: more calls were in flight than its 1 kretprobe instance(s); use r4: (maxactive)"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

/// 50 recordings killed with SIGKILL at random moments during attach and
/// recording; the next start removes what they left, so that afterwards
/// kprobe_events holds none of ours.
#[test]
fn killed_sessions_leave_nothing_after_the_next_start() {
    if !kprobes_available("killed_sessions_leave_nothing_after_the_next_start") {
        return;
    }
    let bin = kprobe_perf_bin();
    let record = |duration: &str| {
        let mut c = Command::new(&bin);
        c.args(["record", "-a", "-d", duration])
            .args([
                "-e",
                &for_kernel("p:do_sys_openat2 path=+0(%si):ustring"),
                "-e",
                "r4:do_sys_openat2",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    // How long a run takes to define its events here (TCG is slow): kill
    // times are drawn from twice that, to land in attach and in recording.
    let start = Instant::now();
    let mut probe_run = record("30").spawn().unwrap();
    while our_event_lines().is_empty() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let define_ms = start.elapsed().as_millis() as u64;
    probe_run.kill().unwrap();
    probe_run.wait().unwrap();
    let seed = 0x5eed_u64 ^ u64::from(std::process::id());
    println!("kill test: seed {seed}, events defined {define_ms} ms after start");
    let mut state = seed | 1;
    let mut killed_with_events = 0;
    // 20 kills: about three in four land after the definition (36 and
    // 38 of 50 on 6.1 and 6.12 under TCG), and each costs the run's start.
    const KILLS: usize = 20;
    for _ in 0..KILLS {
        let mut child = record("30").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(
            xorshift(&mut state) % (2 * define_ms + 1),
        ));
        let own = format!(":kprobe_perf_{}_", child.id());
        if our_event_lines().iter().any(|l| l.contains(&own)) {
            killed_with_events += 1;
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    println!(
        "kill test: {killed_with_events} of {KILLS} runs were killed with their events defined"
    );
    assert!(
        killed_with_events > 0,
        "no kill landed after the definition; the test proved nothing"
    );
    let status = record("0.2").status().unwrap();
    assert!(status.success());
    assert_eq!(our_event_lines(), Vec::<String>::new());
}

/// `kprobe-perf cleanup` removes an event of a process that is gone.
#[test]
fn cleanup_removes_events_of_dead_processes() {
    if !kprobes_available("cleanup_removes_events_of_dead_processes") {
        return;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(KPROBE_EVENTS)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, b"p:kprobe_perf_999999/left do_sys_openat2\n")
        })
        .unwrap();
    assert_eq!(
        our_event_lines(),
        vec!["p:kprobe_perf_999999/left do_sys_openat2".to_string()]
    );
    let out = Command::new(kprobe_perf_bin())
        .arg("cleanup")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "kprobe-perf: removed 1 tracefs events\n"
    );
    assert_eq!(our_event_lines(), Vec::<String>::new());
}

/// A PMU kretprobe has the kernel's default instances, max(10, 2 x possible
/// CPUs) (10 on the default 2-CPU VM): with 6 threads more than that asleep
/// in hrtimer_nanosleep at once, that many returns are reported, and the
/// kernel's count of entries (a counting-only entry event, no second
/// sampling probe) shows the 6 calls whose return never came.
#[test]
fn pmu_kretprobe_misses_are_inferred_from_entries() {
    if !kprobes_available("pmu_kretprobe_misses_are_inferred_from_entries") {
        return;
    }
    let instances = (2 * possible_cpus().len() as u64).max(10);
    let sleepers = instances as usize + 6;
    let symbols = KernelSymbols::load().unwrap();
    // On the PMU by choice: on every CPU, `auto` defines it through
    // kprobe_events (one kprobe for all CPUs), whose misses the kernel
    // counts itself.
    let plans = kprobe_perf_engine::testing::plan_probes_with(
        &["r:hrtimer_nanosleep"],
        &symbols,
        kprobe_perf_engine::cli::plan::BackendChoice::Pmu,
    )
    .unwrap();
    assert_eq!(plans.len(), 1, "the user's probe only");
    assert_eq!(plans[0].backend, Backend::Pmu);
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    session.enable().unwrap();
    let barrier = Arc::new(Barrier::new(sleepers));
    let threads: Vec<_> = (0..sleepers)
        .map(|_| {
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                std::thread::sleep(Duration::from_millis(1500));
                kprobe_perf_engine::cli::os::gettid()
            })
        })
        .collect();
    let tids: Vec<i32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    session.disable().unwrap();
    let mut returns = 0;
    let mut all = 0;
    for _ in 0..3 {
        session
            .poll(
                Some(Duration::from_millis(100)),
                &mut kprobe_perf_engine::sink_fn(|e| {
                    all += 1;
                    if tids.contains(&e.tid) {
                        returns += 1;
                    }
                }),
            )
            .unwrap();
    }
    let calls = session.call_counts().unwrap()[0].expect("a PMU kretprobe has call counts");
    println!(
        "hrtimer_nanosleep: entries {}, returns {}, unreturned {}, events {all}, of our threads {returns}",
        calls.entries,
        calls.returns,
        calls.unreturned()
    );
    // Each CPU's PMU event is a kretprobe of its own, with its own pool
    // of `instances`, and records the returns made on its CPU. The pools
    // fill in the order of entry, so they catch the same threads, but for
    // the last free instance: when two CPUs enter at that moment, one
    // pool can give it to one thread and the other to the other. Each of
    // those two is then recorded only if it returns on the CPU whose pool
    // caught it (seen once in a full run: 9 of 10 with two busy VMs).
    let cpus = possible_cpus().len() as u64;
    assert_eq!(calls.entries, sleepers as u64, "every sleeper entered");
    assert!(
        returns <= instances && returns + cpus > instances,
        "returns of our {sleepers} threads: {returns}, expected {instances} (at most \
         {} fewer when CPUs race for the pools' last instance)",
        cpus - 1
    );
    assert_eq!(calls.returns, all, "the kretprobe's count is its events");
    assert_eq!(calls.unreturned(), calls.entries - returns);
    assert!(
        calls.unreturned() >= 6,
        "at least the 6 sleepers past the pool"
    );
}

/// A panic while a session is open still removes its tracefs events
/// (the guard's Drop runs during unwinding).
#[test]
fn a_panic_removes_the_events() {
    if !kprobes_available("a_panic_removes_the_events") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let result = std::panic::catch_unwind(|| {
        let plans = plan_probes(&["r4:do_sys_openat2 ret=$retval"], &symbols).unwrap();
        let _session = Session::open(plans, SessionOptions::default()).unwrap();
        assert_eq!(
            our_event_lines().len(),
            1,
            "defined while the session lives"
        );
        panic!("deliberate panic with a session open");
    });
    assert!(result.is_err());
    assert_eq!(our_event_lines(), Vec::<String>::new());
}

/// `$comm` on the PMU route comes from the engine's own pid-to-comm table
/// (COMM records and /proc); it must equal what the kernel reads from
/// current->comm at the same hit (a tracefs probe fetching $comm), before
/// and after the thread renames itself (the write to /proc/.../comm is
/// the kernel's set_task_comm, as prctl(PR_SET_NAME) is).
///
/// The thread moves from the second online CPU to the first between its
/// renames, so that the ring read first (the first CPU's) holds a sample
/// taken before the rename whose COMM record lies in the ring read second:
/// the name must come from the sample's time, not from the order the rings
/// are read in.
#[test]
fn pmu_comm_matches_the_kernels_current_comm() {
    if !kprobes_available("pmu_comm_matches_the_kernels_current_comm") {
        return;
    }
    let online = online_cpus();
    if online.len() < 2 {
        return skip_here(
            "pmu_comm_matches_the_kernels_current_comm",
            "it moves a thread between 2 CPUs and only 1 is online (KPROBE_PERF_VM_SMP=1?)",
        );
    }
    let (first, second) = (online[0].to_string(), online[1].to_string());
    let (first_cpu, second_cpu) = (first.clone(), second.clone());
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(
        &[
            "p:do_sys_openat2 c=$comm",
            "p:kernel_comm do_sys_openat2 c=$comm path=+0(%si):ustring",
        ],
        &symbols,
    )
    .unwrap();
    assert_eq!(plans[0].backend, Backend::Pmu);
    assert_eq!(plans[1].backend, Backend::Tracefs);
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    session.enable().unwrap();
    let (tid, cpus) = std::thread::Builder::new()
        .name("kpp-start".into())
        .spawn(move || {
            let tid = kprobe_perf_engine::cli::os::gettid();
            let rename = |name: &str| {
                std::fs::write(format!("/proc/self/task/{tid}/comm"), name).unwrap();
            };
            let mut cpus = Vec::new();
            // Moves this thread (taskset -p acts on the one thread). Its
            // output goes to pipes: opening /dev/null would be one more
            // open by this thread.
            let mut pin = |cpu: &str| {
                let out = Command::new("taskset")
                    .args(["-p", "-c", cpu, &tid.to_string()])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "taskset -p -c {cpu} {tid}: {out:?}");
                let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
                // Field 39, "processor", counted after the ")" of comm.
                let after = stat.rsplit_once(')').unwrap().1;
                cpus.push(after.split_whitespace().nth(36).unwrap().to_string());
            };
            pin(&second_cpu);
            rename("kpp-before");
            let _ = std::fs::File::open("/nonexistent/kprobe-perf-comm-1");
            pin(&first_cpu);
            rename("kpp-after");
            let _ = std::fs::File::open("/nonexistent/kprobe-perf-comm-2");
            (tid, cpus)
        })
        .unwrap()
        .join()
        .unwrap();
    // Where the thread was after each move.
    assert_eq!(cpus, [second, first]);
    // Every open of the thread, as each probe saw it: (cpu, comm) from
    // ours, (cpu, comm, path) from the kernel's.
    let mut pmu = Vec::new();
    let mut kernel = Vec::new();
    let last = "/nonexistent/kprobe-perf-comm-2";
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = |k: &[(u32, String, String)], p: &[(u32, String)]| {
        k.iter().any(|(_, _, path)| path == last) && p.len() >= k.len()
    };
    while !done(&kernel, &pmu) && Instant::now() < deadline {
        session
            .poll(
                Some(Duration::from_millis(100)),
                &mut kprobe_perf_engine::sink_fn(|e| {
                    if e.tid != tid {
                        return;
                    }
                    let c = e.args[0].as_str().unwrap_or("?").to_string();
                    if e.probe == 0 {
                        assert_eq!(*e.comm, c, "the event's comm and its $comm");
                        pmu.push((e.cpu, c))
                    } else {
                        let path = e.args[1].as_str().unwrap_or("?").to_string();
                        kernel.push((e.cpu, c, path))
                    }
                }),
            )
            .unwrap();
    }
    // Both probes fire on each open.
    let theirs: Vec<(u32, String)> = kernel.iter().map(|(cpu, c, _)| (*cpu, c.clone())).collect();
    assert_eq!(pmu, theirs);
    // The opens this test made, as the kernel named them.
    let ours: Vec<(u32, &str, &str)> = kernel
        .iter()
        .filter(|(_, _, path)| {
            path.starts_with("/proc/self/task/") || path.starts_with("/nonexistent/")
        })
        .map(|(cpu, c, path)| (*cpu, c.as_str(), path.rsplit('/').next().unwrap_or("")))
        .collect();
    let (one, zero) = (online[1], online[0]);
    assert_eq!(
        ours,
        [
            (one, "kpp-start", "stat"),
            (one, "kpp-start", "comm"),
            (one, "kpp-before", "kprobe-perf-comm-1"),
            (zero, "kpp-before", "stat"),
            (zero, "kpp-before", "comm"),
            (zero, "kpp-after", "kprobe-perf-comm-2"),
        ],
        "all opens: {kernel:?}"
    );
}

/// `auto` opens a kernel probe through kprobe_events whenever it would
/// otherwise open one PMU kprobe per perf event: system-wide on the VM's
/// CPUs, a kretprobe is then one kprobe whose hits and misses the kernel
/// counts; on one CPU it stays on the PMU, with its counting entry event.
/// Each run counts the 20 opens of its command exactly.
#[test]
fn auto_routes_a_probe_opened_on_several_cpus_through_kprobe_events() {
    let test = "auto_routes_a_probe_opened_on_several_cpus_through_kprobe_events";
    if !kprobes_available(test) {
        return;
    }
    if kprobe_perf_tests::online_cpus().len() < 2 {
        kprobe_perf_tests::skip(test, "one online CPU: every target opens a probe once");
        return;
    }
    let run = |cpus: &[&str]| -> serde_json::Value {
        let mut args = vec!["record", "--json"];
        args.extend_from_slice(cpus);
        args.extend_from_slice(&[
            "-e",
            "r:do_sys_openat2 ret=$retval:s64",
            "--filter",
            "comm == \"open_loop\"",
            "--",
            "taskset",
            "-c",
            "0",
            env!("CARGO_BIN_EXE_open_loop"),
            "/etc/hostname",
            "20",
            "/dev/null",
        ]);
        let out = Command::new(kprobe_perf_bin())
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["type"] == "summary")
            .expect("a summary");
        println!("{args:?}: {summary}");
        summary["probes"][0].clone()
    };
    let all = run(&["-a"]);
    assert_eq!(all["backend"], "tracefs", "{all}");
    assert_eq!(all["kernel_misses"], 0, "{all}");
    assert!(
        all.get("entries").is_none(),
        "no counting entry event: {all}"
    );
    // The loader's opens of open_loop, then its 20: the same in both runs.
    let one = run(&["-C", "0"]);
    assert_eq!(one["backend"], "pmu", "{one}");
    assert_eq!(one["unreturned"], 0, "{one}");
    assert_eq!(all["events"], one["events"], "{all} {one}");
    assert!(one["events"].as_u64().unwrap() >= 20, "{one}");
}
