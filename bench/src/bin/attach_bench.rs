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

use kprobe_perf_engine::kernel::select::FRAGILE_FAMILIES;
use kprobe_perf_engine::plan::BackendChoice;
use kprobe_perf_engine::testing::plan_probes_with;
use kprobe_perf_engine::{KernelSymbols, Session, SessionOptions};

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
        // -f: a second function of the same name (or a clone whose
        // name perf shortens to an existing event's) gets a numbered
        // event instead of failing with EEXIST.
        c.args(["probe", "-q", "-f"]);
        for f in chunk {
            c.args(["-a", f]);
        }
        let out = c
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .ok()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            println!(
                "perf probe failed ({}), skipped; it said: {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
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

/// The traceable functions (`available_filter_functions`, modules'
/// included, by name), and those of them safe for fprobe and
/// kprobe_multi alike: a kernel function (not a module's), not on the
/// kprobe blacklist, not in a fragile family. Names shared by several
/// functions are fine: both arm every function of the name.
fn traceable_and_safe() -> (Vec<String>, HashSet<String>) {
    let symbols = KernelSymbols::load().expect("reading /proc/kallsyms");
    let blacklist: HashSet<String> = std::fs::read_to_string("/sys/kernel/debug/kprobes/blacklist")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    let filter = std::fs::read_to_string("/sys/kernel/tracing/available_filter_functions")
        .expect("reading available_filter_functions");
    let modules: HashSet<&str> = filter
        .lines()
        .filter(|l| l.contains('['))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut traceable: Vec<String> = filter
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    traceable.sort_unstable();
    traceable.dedup();
    let safe = traceable
        .iter()
        .filter(|n| !modules.contains(n.as_str()))
        .filter(|n| !FRAGILE_FAMILIES.iter().any(|f| n.contains(f)))
        .filter(|n| !blacklist.contains(*n) && !n.starts_with("__"))
        .filter(|n| {
            let inst = symbols.lookup(n);
            !inst.is_empty() && inst.iter().all(|s| s.is_text() && s.module.is_none())
        })
        .cloned()
        .collect();
    (traceable, safe)
}

/// The globs whose union is exactly `keep` among `traceable`.
fn cover(keep: &[&str], traceable: &[String]) -> Vec<kprobe_perf_symbols::CoverGlob> {
    let kept: HashSet<&str> = keep.iter().copied().collect();
    let avoid: Vec<&str> = traceable
        .iter()
        .map(String::as_str)
        .filter(|n| !kept.contains(n))
        .collect();
    kprobe_perf_symbols::cover_globs("*", keep, &avoid).unwrap_or_default()
}

/// Globs whose union is exactly `n` safe functions, and those functions:
/// the cover of every safe function by globs that arm nothing else
/// ([`kprobe_perf_symbols::cover_globs`]), largest globs first (ties in
/// a seeded order), each taken whole when it fits in what is left of
/// `n`.
fn pick_globs(n: usize, seed: u64) -> (Vec<String>, Vec<String>) {
    let (traceable, safe) = traceable_and_safe();
    let mut keep: Vec<&str> = safe.iter().map(String::as_str).collect();
    keep.sort_unstable();
    let mut all = cover(&keep, &traceable);
    let mut state = seed | 1;
    for i in (1..all.len()).rev() {
        let j = (xorshift(&mut state) % (i as u64 + 1)) as usize;
        all.swap(i, j);
    }
    all.sort_by_key(|g| std::cmp::Reverse(g.kept));
    let (mut globs, mut funcs) = (Vec::new(), Vec::new());
    for g in all {
        if funcs.len() >= n {
            break;
        }
        // Each glob whole, the largest that still fits: the last few
        // are small ones that land on `n` exactly.
        if g.kept > n - funcs.len() {
            continue;
        }
        funcs.extend(
            keep.iter()
                .filter(|k| kprobe_perf_symbols::glob_match(&g.pattern, k))
                .map(|k| k.to_string()),
        );
        globs.push(g.pattern);
    }
    (globs, funcs)
}

/// The tracefs the measurements write to, and their group.
const MEASURE_ROOT: &str = "/sys/kernel/tracing";
const MEASURE_GROUP: &str = "kpf_measure";

/// Where the time of fprobe definitions goes, kernel side (writes to
/// `dynamic_events`) and perf side (perf_event_open of the event on each
/// CPU, enable, close), by glob size and by number of definitions.
fn measure_fprobe(defs: usize) {
    let (traceable, safe) = traceable_and_safe();
    let mut keep: Vec<&str> = safe.iter().map(String::as_str).collect();
    keep.sort_unstable();
    let mut all = cover(&keep, &traceable);
    all.sort_by_key(|g| std::cmp::Reverse(g.kept));
    let near = |want: usize| {
        all.iter()
            .min_by_key(|g| g.kept.abs_diff(want))
            .map(|g| g.pattern.clone())
    };
    let mut globs: Vec<String> = [1, 10, 100, usize::MAX]
        .into_iter()
        .filter_map(near)
        .collect();
    // Show handlers (sysfs, seq files) run only when a file is read:
    // a large glob, fragile-sounding names included, off the probe path.
    globs.push("*_show".into());
    measure_globs(&globs);
    measure_definitions(&keep[..keep.len().min(defs)]);
}

/// Appends `line` to `dynamic_events`; the seconds it took.
fn write_dynamic(line: &str) -> Result<f64, String> {
    use std::io::Write;
    let t = Instant::now();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(std::path::Path::new(MEASURE_ROOT).join("dynamic_events"))
        .map_err(|e| e.to_string())?;
    f.write_all(line.as_bytes())
        .map_err(|e| format!("{line:?}: {e}"))?;
    Ok(secs(t))
}

/// Opens tracepoint `id` on each CPU and enables it: (open seconds,
/// enable seconds, the descriptors).
fn open_all(cpus: usize, id: u64) -> (f64, f64, Vec<std::os::fd::OwnedFd>) {
    use kprobe_perf_engine::testing::sys;
    let mut attr = sys::perf_event_attr {
        type_: 2, // PERF_TYPE_TRACEPOINT
        config: id,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.sample_type = 1 << 10; // PERF_SAMPLE_RAW
    attr.set_disabled(1);
    let t = Instant::now();
    let fds: Vec<_> = (0..cpus)
        .filter_map(|c| sys::perf_event_open(&attr, None, -1, c as i32, 0).ok())
        .collect();
    let open = secs(t);
    let t = Instant::now();
    for fd in &fds {
        let _ = sys::enable(fd);
    }
    (open, secs(t), fds)
}

/// Per glob: define, open on every CPU, enable, close, remove; a table
/// row each.
fn measure_globs(globs: &[String]) {
    let root = std::path::Path::new(MEASURE_ROOT);
    let group = MEASURE_GROUP;
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!("measure: {cpus} CPUs; per glob: define (write to dynamic_events), perf_event_open on each CPU, enable, close, remove");
    println!("| glob | functions armed | define | open (all CPUs) | enable | close | remove |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (i, g) in globs.iter().enumerate() {
        let ev = format!("g{i}");
        let define = match write_dynamic(&format!("f:{group}/{ev} {g}\n")) {
            Ok(t) => t,
            Err(e) => {
                println!("| {g} | refused: {e} | | | | | |");
                continue;
            }
        };
        let armed = std::fs::read_to_string(root.join("enabled_functions"))
            .map_or(0, |t| t.lines().count());
        let id: u64 = std::fs::read_to_string(root.join(format!("events/{group}/{ev}/id")))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let (open, enable, fds) = open_all(cpus, id);
        let opened = fds.len();
        let t = Instant::now();
        drop(fds);
        let close = secs(t);
        let remove = write_dynamic(&format!("-:{group}/{ev}\n")).unwrap_or(f64::NAN);
        println!(
            "| `{g}` | {armed} | {:.0} ms | {:.0} ms ({opened} fds) | {:.1} ms | {:.1} ms | {:.0} ms |",
            define * 1e3,
            open * 1e3,
            enable * 1e3,
            close * 1e3,
            remove * 1e3
        );
    }
}

/// Many definitions of one function each: one write each, then all in
/// one write, and the group's removal in one write.
fn measure_definitions(singles: &[&str]) {
    let group = MEASURE_GROUP;
    let mut define_each = Vec::new();
    for (i, f) in singles.iter().enumerate() {
        define_each.push(write_dynamic(&format!("f:{group}/s{i} {f}\n")).unwrap_or(f64::NAN));
    }
    let mut remove_each = Vec::new();
    for i in 0..singles.len() {
        remove_each.push(write_dynamic(&format!("-:{group}/s{i}\n")).unwrap_or(f64::NAN));
    }
    let ms = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{:.0}", x * 1e3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    println!(
        "{} definitions of one function, one write each: define {:.2} s (ms each: {}), remove one by one {:.2} s (ms each: {})",
        singles.len(),
        sum(&define_each),
        ms(&define_each),
        sum(&remove_each),
        ms(&remove_each)
    );
    let batch: String = singles
        .iter()
        .enumerate()
        .map(|(i, f)| format!("f:{group}/b{i} {f}\n"))
        .collect();
    let define_batch = write_dynamic(&batch).unwrap_or(f64::NAN);
    let remove_group = write_dynamic(&format!("-:{group}/\n")).unwrap_or(f64::NAN);
    println!(
        "{} definitions in one write: define {define_batch:.2} s; removal of the whole group in one write ('-:{group}/'): {remove_group:.2} s",
        singles.len()
    );
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

/// The globs as bpftrace takes them: its probe names have `*` but no
/// character class, so `crypto_[a-rtu]*` becomes `crypto_a*`,
/// `crypto_b*` ..., one per first byte the class lets through among
/// `funcs` (the same functions).
fn without_classes(globs: &[String], funcs: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for g in globs {
        let Some((head, rest)) = g.split_once('[') else {
            out.push(g.clone());
            continue;
        };
        let Some((_, tail)) = rest.split_once(']') else {
            out.push(g.clone());
            continue;
        };
        let mut firsts: Vec<char> = funcs
            .iter()
            .filter(|f| kprobe_perf_symbols::glob_match(g, f))
            .filter_map(|f| f[head.len()..].chars().next())
            .collect();
        firsts.sort_unstable();
        firsts.dedup();
        out.extend(firsts.into_iter().map(|c| format!("{head}{c}{tail}")));
    }
    out
}

/// bpftrace on the same globs: wildcards, so kprobe_multi.
fn bpftrace_globs(globs: &[String], funcs: &[String]) -> Option<f64> {
    if !have("bpftrace") {
        println!("bpftrace: not installed (apt-get install bpftrace), skipped");
        return None;
    }
    let n = funcs.len();
    let plain = without_classes(globs, funcs);
    println!(
        "bpftrace: the {} globs as {} wildcards without classes",
        globs.len(),
        plain.len()
    );
    let probes: Vec<String> = plain.iter().map(|g| format!("kprobe:{g}")).collect();
    let prog = format!("{} {{ }}", probes.join(","));
    // bpftrace holds descriptors per attached function and aborts
    // ("dup(fd): Too many open files") past the default limit: it is
    // started with a limit that fits, as a user of it would.
    let limit = (4 * n + 4096).to_string();
    let t = Instant::now();
    let out = Command::new("sh")
        .args([
            "-c",
            "ulimit -n \"$0\" && exec bpftrace \"$@\"",
            &limit,
            "-e",
            &prog,
            "-c",
            "/usr/bin/true",
        ])
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
            bpftrace_globs(&globs, &funcs)
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
    if let Some(defs) = std::env::args()
        .skip_while(|a| a != "--measure")
        .nth(1)
        .and_then(|v| v.parse().ok())
    {
        measure_fprobe(defs);
        stop(&mut workload);
        return;
    }
    let fprobe_sizes: Option<Vec<usize>> = std::env::args()
        .skip_while(|a| a != "--fprobe")
        .nth(1)
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect());
    let has_fprobe = kprobe_perf_engine::plan::running_kernel_features().is_some_and(|f| f.fprobe);
    match (&fprobe_sizes, has_fprobe) {
        (Some(sizes), true) => {
            fprobe_bench(sizes, seed, skip_peers);
            stop(&mut workload);
            return;
        }
        (Some(_), false) => {
            println!("fprobe bench: this kernel's tracefs README has no fprobe events (CONFIG_FPROBE_EVENTS, Linux 6.5+); measuring kprobes instead");
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
