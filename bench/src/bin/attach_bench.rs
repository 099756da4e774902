//! Attach and detach N kprobes on distinct functions, system-wide, and do
//! the same with perf (perf probe + perf record) and bpftrace when they are
//! installed, in the same kernel. Run inside the VM by `cargo xtask bench
//! attach [N]`; needs root and a kernel with kprobes.
//!
//! The functions are drawn (seeded, printed) from the ftrace-able functions
//! that are unique text symbols in kallsyms, not on the kprobe blacklist,
//! and not in families known to be fragile or recursive under probes.
//!
//! With `--fprobe SIZES` (`1000,10000`) on a kernel with fprobe events,
//! it measures instead, per size, attach + detach of that many functions
//! through fprobe events (a few globs, each one definition) against
//! bpftrace given the same globs (kprobe_multi) and perf probe given the
//! same functions, and checks that the kernel armed exactly those
//! functions.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Instant;

use kprobe_perf_engine::plan::BackendChoice;
use kprobe_perf_engine::select::FRAGILE_FAMILIES;
use kprobe_perf_engine::{plan_probes_with, KernelSymbols, Session, SessionOptions};

use kprobe_perf_bench::rng::xorshift;

fn pick(n: usize, seed: u64) -> Vec<String> {
    let symbols = KernelSymbols::load().expect("reading /proc/kallsyms");
    let filter = std::fs::read_to_string("/sys/kernel/tracing/available_filter_functions")
        .expect("reading available_filter_functions");
    let blacklist: HashSet<String> = std::fs::read_to_string("/sys/kernel/debug/kprobes/blacklist")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    let mut seen = HashSet::new();
    let mut names: Vec<String> = filter
        .lines()
        .filter(|l| !l.contains('['))
        .map(|l| l.trim().to_string())
        .filter(|n| !n.contains('.') && !n.starts_with("__"))
        .filter(|n| !FRAGILE_FAMILIES.iter().any(|f| n.contains(f)))
        .filter(|n| !blacklist.contains(n))
        .filter(|n| {
            let inst = symbols.lookup(n);
            inst.len() == 1 && inst[0].is_text() && inst[0].module.is_none()
        })
        .filter(|n| seen.insert(n.clone()))
        .collect();
    names.sort();
    let mut state = seed | 1;
    for i in (1..names.len()).rev() {
        let j = (xorshift(&mut state) % (i as u64 + 1)) as usize;
        names.swap(i, j);
    }
    names.truncate(n);
    names
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ours(funcs: &[String], choice: BackendChoice) -> (f64, f64, &'static str) {
    let symbols = KernelSymbols::load().expect("kallsyms");
    let specs: Vec<String> = funcs.iter().map(|f| format!("p:{f}")).collect();
    let t = Instant::now();
    let plans = plan_probes_with(&specs, &symbols, choice).expect("planning");
    let route = match plans.first().map(|p| p.backend) {
        Some(kprobe_perf_engine::plan::Backend::Tracefs) => "tracefs",
        _ => "pmu",
    };
    let mut s = Session::open(plans, SessionOptions::default()).expect("attaching");
    s.enable().expect("enabling");
    let attach = secs(t);
    let t = Instant::now();
    drop(s);
    (attach, secs(t), route)
}

fn perf(funcs: &[String]) -> Option<(f64, f64)> {
    if !have("perf") {
        println!("perf: not installed (apt-get install linux-perf), skipped");
        return None;
    }
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", "probe:*"])
        .stderr(Stdio::null())
        .status();
    let t = Instant::now();
    for chunk in funcs.chunks(100) {
        let mut c = Command::new("perf");
        c.args(["probe", "-q"]);
        for f in chunk {
            c.args(["-a", f]);
        }
        let st = c.stdout(Stdio::null()).status().ok()?;
        if !st.success() {
            println!("perf probe failed ({st}), skipped");
            return None;
        }
    }
    let define = secs(t);
    // perf record arms every event on every CPU, runs `true`, and disarms.
    let t = Instant::now();
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-a",
            "-o",
            "/tmp/kprobe-perf-bench.data",
            "-e",
            "probe:*",
            "--",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    let record = secs(t);
    let t = Instant::now();
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", "probe:*"])
        .status();
    let delete = secs(t);
    if !st.success() {
        println!("perf record failed ({st})");
        return None;
    }
    println!(
        "perf: define {define:.1} s, record (arm + disarm) {record:.1} s, delete {delete:.1} s"
    );
    Some((define + record, delete))
}

fn bpftrace(funcs: &[String]) -> Option<(f64, f64)> {
    if !have("bpftrace") {
        println!("bpftrace: not installed (apt-get install bpftrace), skipped");
        return None;
    }
    let probes: Vec<String> = funcs.iter().map(|f| format!("kprobe:{f}")).collect();
    let prog = format!("{} {{ }}", probes.join(","));
    let t = Instant::now();
    let out = Command::new("bpftrace")
        // An absolute path: with a merged /usr, `true` matches two binaries.
        .args(["-e", &prog, "-c", "/usr/bin/true"])
        // bpftrace refuses more than 512 probes unless told otherwise.
        .env("BPFTRACE_MAX_PROBES", (funcs.len() + 16).to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    let total = secs(t);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        println!(
            "bpftrace failed ({}) after {total:.1} s, skipped; it said: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
        return None;
    }
    println!("bpftrace: attach + run + detach {total:.1} s");
    Some((total, 0.0))
}

/// A family's safe functions, and the others its glob matches.
type Family = (Vec<String>, Vec<String>);

/// Globs whose union is exactly `n` safe functions, and those functions. Functions are taken by whole families
/// (`ext4_*`), most functions per glob first; a family whose glob would
/// also match unsafe functions (or module ones, which the kernel's
/// wildcard also arms) is split into narrower globs when that takes at
/// most 8, else skipped; the last family is cut to reach `n` exactly.
fn pick_globs(n: usize, seed: u64) -> (Vec<String>, Vec<String>) {
    // Safe for fprobe and kprobe_multi alike: a traceable kernel function
    // (modules' are left out), not on the kprobe blacklist, not in a
    // fragile family. Names shared by several functions are fine: both
    // arm every function of the name.
    let symbols = KernelSymbols::load().expect("reading /proc/kallsyms");
    let blacklist: HashSet<String> = std::fs::read_to_string("/sys/kernel/debug/kprobes/blacklist")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    let filter = std::fs::read_to_string("/sys/kernel/tracing/available_filter_functions")
        .expect("reading available_filter_functions");
    let safe: HashSet<String> = filter
        .lines()
        .filter(|l| !l.contains('['))
        .map(|l| l.trim().to_string())
        .filter(|n| !FRAGILE_FAMILIES.iter().any(|f| n.contains(f)))
        .filter(|n| !blacklist.contains(n) && !n.starts_with("__"))
        .filter(|n| {
            let inst = symbols.lookup(n);
            !inst.is_empty() && inst.iter().all(|s| s.is_text() && s.module.is_none())
        })
        .collect();
    let mut families: std::collections::BTreeMap<String, (Vec<String>, Vec<String>)> =
        Default::default();
    for line in filter.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(cut) = name.get(1..).and_then(|r| r.find('_')).map(|i| i + 2) else {
            continue;
        };
        let fam = families.entry(name[..cut].to_string()).or_default();
        if safe.contains(name) && !line.contains('[') {
            fam.0.push(name.to_string());
        } else {
            fam.1.push(name.to_string());
        }
    }
    // Each fprobe event costs an ftrace_ops registration (and an RCU
    // tasks grace period when removed), whatever its size: the families
    // that give the most functions per glob come first (ties in a seeded
    // order), each split to leave out what is not safe.
    let mut order: Vec<(String, Family)> = families
        .into_iter()
        .filter(|(_, (keep, _))| !keep.is_empty())
        .collect();
    let mut state = seed | 1;
    for i in (1..order.len()).rev() {
        let j = (xorshift(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let split = |prefix: &str, keep: &[String], avoid: &[String]| {
        let keep_refs: Vec<&str> = keep.iter().map(String::as_str).collect();
        let avoid_refs: Vec<&str> = avoid.iter().map(String::as_str).collect();
        kprobe_perf_symbols::narrower_globs(&format!("{prefix}*"), &keep_refs, &avoid_refs)
            .filter(|g| g.len() <= 8)
    };
    let mut scored: Vec<(usize, String, Family)> = order
        .into_iter()
        .filter_map(|(prefix, (mut keep, avoid))| {
            keep.sort();
            keep.dedup();
            let g = split(&prefix, &keep, &avoid)?;
            Some((keep.len() * 1000 / g.len(), prefix, (keep, avoid)))
        })
        .collect();
    scored.sort_by_key(|(score, _, _)| std::cmp::Reverse(*score));
    let (mut globs, mut funcs) = (Vec::new(), Vec::new());
    for (_, prefix, (mut keep, mut avoid)) in scored {
        if funcs.len() >= n {
            break;
        }
        let need = n - funcs.len();
        if keep.len() > need {
            avoid.extend(keep.split_off(need));
        }
        if let Some(g) = split(&prefix, &keep, &avoid) {
            globs.extend(g);
            funcs.extend(keep);
        }
    }
    (globs, funcs)
}

/// Attaches the globs as fprobe events through the engine, checks what
/// the kernel armed, detaches; (attach s, detach s, functions armed).
fn ours_fprobe(globs: &[String], funcs: &[String]) -> (f64, f64, usize) {
    let symbols = KernelSymbols::load().expect("kallsyms");
    let specs: Vec<String> = globs.iter().map(|g| format!("f {g}")).collect();
    let t = Instant::now();
    let plans = plan_probes_with(&specs, &symbols, BackendChoice::Auto).expect("planning");
    let mut s = Session::open(plans, SessionOptions::default()).expect("attaching");
    s.enable().expect("enabling");
    let attach = secs(t);
    let want: HashSet<&str> = funcs.iter().map(String::as_str).collect();
    let enabled =
        std::fs::read_to_string("/sys/kernel/tracing/enabled_functions").unwrap_or_default();
    let armed: HashSet<&str> = enabled
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| globs.iter().any(|g| kprobe_perf_symbols::glob_match(g, n)))
        .collect();
    let extra: Vec<&&str> = armed
        .iter()
        .filter(|n| !want.contains(**n))
        .take(5)
        .collect();
    if armed.len() != want.len() || !extra.is_empty() {
        println!(
            "WARNING: the kernel armed {} functions of the globs, {} expected (unexpected: {extra:?})",
            armed.len(),
            want.len()
        );
    }
    let t = Instant::now();
    drop(s);
    (attach, secs(t), armed.len())
}

/// bpftrace on the same globs: wildcards, so kprobe_multi.
fn bpftrace_globs(globs: &[String], n: usize) -> Option<f64> {
    if !have("bpftrace") {
        println!("bpftrace: not installed (apt-get install bpftrace), skipped");
        return None;
    }
    let probes: Vec<String> = globs.iter().map(|g| format!("kprobe:{g}")).collect();
    let prog = format!("{} {{ }}", probes.join(","));
    let t = Instant::now();
    let out = Command::new("bpftrace")
        .args(["-e", &prog, "-c", "/usr/bin/true"])
        .env("BPFTRACE_MAX_PROBES", (n + 16).to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    let total = secs(t);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        println!(
            "bpftrace failed ({}) after {total:.1} s; it said: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
        return None;
    }
    Some(total)
}

/// Most functions perf probe is asked to define (~0.16 s each under TCG).
const PERF_MAX: usize = 2000;

fn fprobe_bench(sizes: &[usize], seed: u64, skip_peers: bool) {
    let mut rows = Vec::new();
    for &n in sizes {
        let (globs, funcs) = pick_globs(n, seed);
        println!(
            "fprobe bench: {} functions in {} globs (seed {seed}): {}",
            funcs.len(),
            globs.len(),
            globs.iter().take(8).cloned().collect::<Vec<_>>().join(" ")
        );
        let (a, d, armed) = ours_fprobe(&globs, &funcs);
        println!(
            "kprobe-perf (fprobe): attach {a:.2} s, detach {d:.2} s, total {:.2} s, {armed} functions armed",
            a + d
        );
        let bt = if skip_peers {
            None
        } else {
            bpftrace_globs(&globs, funcs.len())
        };
        if let Some(t) = bt {
            println!("bpftrace (kprobe_multi): attach + run + detach {t:.2} s");
        }
        let pf = if skip_peers {
            None
        } else if funcs.len() > PERF_MAX {
            println!(
                "perf: skipped above {PERF_MAX} functions (perf probe defines one kprobe at a time, ~0.16 s each under TCG)"
            );
            None
        } else {
            perf(&funcs).map(|(x, y)| x + y)
        };
        rows.push((funcs.len(), globs.len(), a, d, bt, pf));
    }
    println!();
    println!("| functions | globs | kprobe-perf fprobe attach | detach | total | bpftrace total | perf total | kprobe-perf / bpftrace |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let show = |v: Option<f64>| v.map_or("-".to_string(), |t| format!("{t:.2} s"));
    for (n, g, a, d, bt, pf) in rows {
        let ratio = bt.map_or("-".to_string(), |b| format!("{:.3}", (a + d) / b));
        println!(
            "| {n} | {g} | {a:.2} s | {d:.2} s | {:.2} s | {} | {} | {ratio} |",
            a + d,
            show(bt),
            show(pf)
        );
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let seed: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    let skip_peers = std::env::args().any(|a| a == "--no-peers");
    // --workload: a shell loop runs system calls on every CPU throughout,
    // so that probes are hit while they are armed and disarmed.
    let mut workload: Vec<std::process::Child> = if std::env::args().any(|a| a == "--workload") {
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
        (0..cpus)
            .filter_map(|_| {
                Command::new("sh")
                    .args([
                        "-c",
                        "while :; do cat /proc/self/status /etc/hostname >/dev/null; ls / >/dev/null; done",
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .ok()
            })
            .collect()
    } else {
        Vec::new()
    };
    if !workload.is_empty() {
        println!("workload: {} shell loops running", workload.len());
    }
    let fprobe_sizes: Option<Vec<usize>> = std::env::args()
        .skip_while(|a| a != "--fprobe")
        .nth(1)
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect());
    let has_fprobe =
        kprobe_perf_engine::plan::KernelFeatures::running_kernel().is_some_and(|f| f.fprobe);
    match (&fprobe_sizes, has_fprobe) {
        (Some(sizes), true) => {
            fprobe_bench(sizes, seed, skip_peers);
            stop(&mut workload);
            return;
        }
        (Some(_), false) => {
            println!("fprobe bench: this kernel's tracefs README has no fprobe events (CONFIG_FPROBE_EVENTS, Linux 6.4+); measuring kprobes instead");
        }
        _ => {}
    }
    let funcs = pick(n, seed);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "attach bench: {} functions (seed {seed}) on {cpus} CPUs; first: {}",
        funcs.len(),
        funcs.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
    );
    // The default is what the CLI does (`auto`); --pmu and --tracefs force
    // a route.
    let choice = if std::env::args().any(|a| a == "--tracefs") {
        BackendChoice::Tracefs
    } else if std::env::args().any(|a| a == "--pmu") {
        BackendChoice::Pmu
    } else {
        BackendChoice::Auto
    };
    let (a, d, route) = ours(&funcs, choice);
    println!(
        "kprobe-perf ({route}): attach {a:.1} s, detach {d:.1} s, total {:.1} s",
        a + d
    );
    if skip_peers {
        stop(&mut workload);
        return;
    }
    let mut best: Option<(&str, f64)> = None;
    for (name, r) in [("perf", perf(&funcs)), ("bpftrace", bpftrace(&funcs))] {
        if let Some((x, y)) = r {
            if best.is_none_or(|(_, b)| x + y < b) {
                best = Some((name, x + y));
            }
        }
    }
    if let Some((name, total)) = best {
        println!(
            "ratio: kprobe-perf total / fastest peer ({name}) total = {:.2}",
            (a + d) / total
        );
    }
    stop(&mut workload);
}

fn stop(workload: &mut [std::process::Child]) {
    for c in workload.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
