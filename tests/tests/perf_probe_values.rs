//! Issue #27: source-level probes (a function, a line relative to it and
//! variables, in `perf probe`'s syntax) recorded at the same time by perf
//! and by `kprobe-perf record` print the same values.
//!
//! perf's side is perf's own resolution of the 50 probes of [`PROBES`]:
//! what `perf probe -k VMLINUX -D` prints for them on Debian's 6.1.0-56
//! -dbg vmlinux, kept in tests/data/perf_probe_values-6.1.0-56-amd64.defs.
//! `perf probe -a` would resolve them again in the VM, reading the
//! vmlinux's DWARF for about nine minutes under TCG, and then write those
//! same lines to kprobe_events; the VM test writes them itself (group
//! `kpfvalues`, a second site named `_1` as `perf probe -a` names it) and
//! `perf record` records them. Natively,
//! `perf_probe_and_kprobe_perf_define_the_fixture` regenerates them with
//! the host's perf in one invocation and checks that they are still
//! perf's answer and that `kprobe-perf probe --definition` gives the same
//! 54 sites; in the VM, kprobe-perf's definitions on the running kernel
//! are checked against them again before recording.
//!
//! In the 6.1 VM, both tools attach to the workload's process (`fs_calls`,
//! stopped until both are armed): kprobe-perf records its own resolution
//! (`p:oursNN FUNC@+RLINE VARS`), perf records its definitions, while the
//! workload makes a fixed series of file, pipe, eventfd and memory calls
//! that passes every probe. Per probe, the sequence of values each tool
//! printed must be the same, hit for hit, and each probe must have
//! fired; a few values are checked against what the workload passed.
//! Neither tool may lose an event, and perf's definitions are removed
//! whatever happens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_engine::tracefs::{ProbeKind, Tracefs};
use kprobe_perf_tests::{
    kernel_arch, kprobe_perf_bin, kprobes_available, online_cpus, perf_control, skip, skip_here,
    vm_kernel, wait_until_recording,
};

/// The probes, as `perf probe` writes them: `FUNC:RLINE VAR...`.
const PROBES: &[&str] = &[
    "do_sys_openat2:17 fd tmp->name:string op.mode op.open_flag op.acc_mode",
    "do_sys_openat2:14 dfd how->flags how->mode",
    "do_sys_openat2:22 fd f->f_flags f->f_mode",
    "do_mkdirat:13 dfd mode name->name:string",
    "do_mkdirat:21 error mode",
    "do_unlinkat:24 dfd type last.len last.name:string",
    "do_rmdir:30 dfd type last.len last.name:string",
    "do_symlinkat:17 newdfd from=from->name:string to=to->name:string",
    "do_symlinkat:25 error",
    "do_readlinkat:12 dfd bufsiz",
    "do_readlinkat:24 bufsiz error",
    "vfs_write:17 count",
    "vfs_read:17 count",
    "vfs_statx:18 error stat->size stat->mode stat->nlink",
    "vfs_statx:12 dfd flags request_mask lookup_flags filename->name:string",
    "cp_new_stat:36 tmp.st_size tmp.st_mode tmp.st_nlink tmp.st_blksize",
    "chmod_common:26 error",
    "ksys_dup3:15 oldfd newfd flags",
    "do_fcntl:22 fd cmd arg",
    "do_fcntl:25 fd cmd arg",
    "do_fcntl:12 fd cmd arg",
    "do_pipe2:7 flags error",
    "pipe_read:23 total_len",
    "vfs_fallocate:9 mode offset len",
    "do_mmap:12 addr len prot flags pgoff",
    "do_mmap:48 addr len prot flags pgoff",
    "do_madvise:13 start len_in behavior",
    "do_unlinkat:32 dfd type last.len",
    "ksys_dup3:25 oldfd newfd flags err",
    "do_dup2:29 fd flags",
    "setfl:28 fd arg",
    "filldir64:14 name:string namlen d_type reclen",
    "chown_common:11 user group",
    "do_eventfd:20 count flags",
    "do_eventfd:37 fd flags",
    "do_mknodat:18 dfd mode dev name->name:string",
    "do_unlinkat:54 error",
    "do_rmdir:42 type error",
    "do_linkat:44 olddfd newdfd how error",
    "do_renameat2:57 flags old_type new_type",
    "do_sys_openat2:10 dfd fd op.mode op.open_flag",
    "do_sys_openat2:25 fd tmp->name:string",
    "pipe_read:54 total_len ret head tail",
    "pipe_write:29 total_len",
    "do_faccessat:42 mode inode->i_mode",
    "__do_pipe_flags:8 flags",
    "vfs_fallocate:37 mode offset len",
    "do_linkat:40 how",
    "do_readlinkat:20 bufsiz",
    "fd_install:2 fd file->f_flags",
];

/// The tracefs group of perf's events (`kpfvalues/perfNN`).
const GROUP: &str = "kpfvalues";

/// The workload's comm (its binary's name) and its rounds.
const COMM: &str = "fs_calls";
const ROUNDS: u32 = 3;

/// The kernel whose vmlinux the fixture was resolved on.
const FIXTURE_RELEASE: &str = "6.1.0-56-amd64";

/// `perf probe -k vmlinux-6.1.0-56-amd64 -D` of [`PROBES`], event
/// `kpfvalues:perfNN` for the NNth: one line per site, a probe with
/// several sites printing its name on each.
const FIXTURE: &str = include_str!("../data/perf_probe_values-6.1.0-56-amd64.defs");

/// The -dbg vmlinux of [`FIXTURE_RELEASE`] under `target/vm/kernels/`.
fn fixture_vmlinux() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/vm/kernels/linux-image-6.1.0-56-amd64-unsigned/usr/lib/debug/boot")
        .join(format!("vmlinux-{FIXTURE_RELEASE}"))
}

fn perf() -> Option<&'static str> {
    ["/usr/bin/perf", "/usr/sbin/perf"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// The event names of probe `i`: `perf01` for perf's, `ours01` for
/// kprobe-perf's (a probe with several sites gives `NAME`, `NAME_1` ...
/// in both tools); hits are matched by the number, `01`.
fn event(tool: &str, i: usize) -> String {
    format!("{tool}{}", key(i))
}

fn key(i: usize) -> String {
    format!("{:02}", i + 1)
}

/// `FUNC:RLINE VARS` -> kprobe-perf's `p:NAME FUNC@+RLINE VARS`.
fn kprobe_perf_spec(i: usize, probe: &str) -> String {
    let (point, vars) = probe.split_once(' ').unwrap_or((probe, ""));
    let (func, line) = point.split_once(':').expect("FUNC:RLINE");
    format!("p:{} {func}@+{line} {vars}", event("ours", i))
}

/// The definitions of `text`, one per line, without comments and blank
/// lines.
fn definition_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// `kprobe-perf probe --definition` of [`PROBES`] as the recording
/// writes them (`p:oursNN FUNC@+RLINE VARS`), renamed to perf's events
/// (`p:oursNN` -> `p:kpfvalues/perfNN`). `other_kernel`: `vmlinux` is
/// not the running kernel's.
fn our_definitions(vmlinux: &Path, other_kernel: bool, cache: &Path) -> Vec<String> {
    let specs: Vec<String> = PROBES
        .iter()
        .enumerate()
        .map(|(i, p)| kprobe_perf_spec(i, p))
        .collect();
    let mut cmd = Command::new(kprobe_perf_bin());
    cmd.env("KPROBE_PERF_CACHE_DIR", cache)
        .args(["probe", "--definition"]);
    if other_kernel {
        cmd.arg("--other-kernel");
    }
    let out = cmd
        .arg("--vmlinux")
        .arg(vmlinux)
        .args(&specs)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kprobe-perf probe --definition: {}{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    definition_lines(&text)
        .iter()
        .map(|l| l.replacen("p:ours", &format!("p:{GROUP}/perf"), 1))
        .collect()
}

/// Natively: `perf probe -k VMLINUX -D` of [`PROBES`] (all 50 in one
/// invocation, the DWARF read once) still prints the fixture, and
/// `kprobe-perf probe --definition` the same sites.
#[test]
fn perf_probe_and_kprobe_perf_define_the_fixture() {
    let test = "perf_probe_and_kprobe_perf_define_the_fixture";
    if let Some(k) = vm_kernel() {
        return skip_here(
            test,
            &format!(
                "it runs natively: perf probe -D of these 50 probes reads the vmlinux's DWARF \
                 for minutes under TCG (kernel {k}); in the VM the values test checks \
                 kprobe-perf's definitions against the fixture"
            ),
        );
    }
    let vmlinux = fixture_vmlinux();
    if !vmlinux.is_file() {
        return skip_here(
            test,
            &format!(
                "no {FIXTURE_RELEASE} -dbg vmlinux under target/vm/kernels \
                 (cargo xtask vm --kernel 6.1 fetches it)"
            ),
        );
    }
    let Some(perf) = perf() else {
        return skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    let version = Command::new(perf).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.starts_with("perf version 6.1.") {
        return skip_here(
            test,
            &format!("the fixture is perf 6.1's answer, this perf is {version:?}"),
        );
    }
    let started = Instant::now();
    let mut cmd = Command::new(perf);
    cmd.args(["probe", "-k"]).arg(&vmlinux);
    for (i, p) in PROBES.iter().enumerate() {
        cmd.arg("-D")
            .arg(format!("{GROUP}:{}={p}", event("perf", i)));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "perf probe -D: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = definition_lines(&String::from_utf8_lossy(&out.stdout));
    if std::env::var_os("KPROBE_PERF_BLESS").is_some() {
        let header: String = FIXTURE
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("data/perf_probe_values-{FIXTURE_RELEASE}.defs"));
        std::fs::write(&path, header + &theirs.join("\n") + "\n").unwrap();
        return;
    }
    let fixture = definition_lines(FIXTURE);
    assert_eq!(
        theirs, fixture,
        "perf probe -D no longer prints tests/data/perf_probe_values-{FIXTURE_RELEASE}.defs \
         (KPROBE_PERF_BLESS=1 cargo test -p kprobe-perf-tests --test perf_probe_values \
         writes perf's answer there)"
    );
    let perf_took = started.elapsed();

    let cache = std::env::temp_dir().join(format!("kpf-values-defs-{}", std::process::id()));
    let ours = our_definitions(&vmlinux, true, &cache);
    let _ = std::fs::remove_dir_all(&cache);
    assert_eq!(
        ours,
        kprobe_perf_tests::numbered_like_perf_probe(&fixture),
        "kprobe-perf probe --definition differs from perf's"
    );
    println!(
        "{} probes, {} sites: perf probe -D and kprobe-perf probe --definition agree \
         (perf {perf_took:?}, kprobe-perf {:?})",
        PROBES.len(),
        fixture.len(),
        started.elapsed() - perf_took
    );
}

/// One printed value: an integer (decimal or `0x` hex, as the type
/// prints it), a string (quoted), or anything else as printed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Int(i128),
    Str(String),
    Other(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Other(s) => write!(f, "{s}"),
        }
    }
}

/// `name=value name="str" ...` -> the values, in order (names differ
/// between the tools where perf adds a type suffix; the order is the
/// definition's in both).
fn values(args: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = args.trim();
    while let Some((_, after)) = rest.split_once('=') {
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find("\" ").or_else(|| quoted.rfind('"')) {
                Some(end) => (Value::Str(quoted[..end].to_string()), &quoted[end + 1..]),
                None => (Value::Other(after.to_string()), ""),
            }
        } else {
            let (v, next) = after.split_once(' ').unwrap_or((after, ""));
            let n = match v.strip_prefix("0x") {
                Some(hex) => i128::from_str_radix(hex, 16).ok(),
                None => v.parse::<i128>().ok(),
            };
            (
                n.map_or_else(|| Value::Other(v.to_string()), Value::Int),
                next,
            )
        };
        out.push(value);
        rest = next.trim_start();
    }
    out
}

/// A probe's hits: per hit, (time in µs, values).
type Hits = BTreeMap<String, Vec<(u64, Vec<Value>)>>;

/// `12.345678` -> 12345678.
fn micros(t: &str) -> Option<u64> {
    let (s, us) = t.trim().split_once('.')?;
    Some(s.parse::<u64>().ok()? * 1_000_000 + us.get(..6)?.parse::<u64>().ok()?)
}

/// After the time: `EVENT: (PLACE) ARGS` -> (probe number, values): the
/// event name loses perf's group, a site's `_N` and the tool's prefix.
fn event_and_values(rest: &str) -> Option<(String, Vec<Value>)> {
    let (event, rest) = rest.split_once(": ")?;
    let event = event.rsplit(':').next()?;
    let base = event
        .split('_')
        .next()?
        .trim_start_matches(char::is_alphabetic);
    let args = rest.trim_start().strip_prefix('(')?.split_once(')')?.1;
    Some((base.to_string(), values(args)))
}

/// kprobe-perf's text: `COMM-TID [CPU] SECS: EVENT: (PLACE) ARGS`, the
/// lines of process `pid` only.
fn our_hits(text: &str, pid: u32) -> Hits {
    let mut hits = Hits::new();
    for line in text.lines() {
        let Some((head, rest)) = line.split_once(" [") else {
            continue;
        };
        let Some((comm, tid)) = head.trim().rsplit_once('-') else {
            continue;
        };
        if comm != COMM || tid.parse::<u32>().ok() != Some(pid) {
            continue;
        }
        let Some((_, rest)) = rest.split_once("] ") else {
            continue;
        };
        let Some((time, rest)) = rest.split_once(": ") else {
            continue;
        };
        if let (Some(t), Some((probe, v))) = (micros(time), event_and_values(rest)) {
            hits.entry(probe).or_default().push((t, v));
        }
    }
    hits
}

/// `perf script -F comm,tid,time,event,trace`: `COMM TID SECS: GROUP:EVENT:
/// (ADDR) ARGS`, the lines of process `pid` only.
fn perf_hits(text: &str, pid: u32) -> Hits {
    let mut hits = Hits::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(comm), Some(tid)) = (words.next(), words.next()) else {
            continue;
        };
        if comm != COMM || tid.parse::<u32>().ok() != Some(pid) {
            continue;
        }
        let Some((_, rest)) = line.split_once(tid) else {
            continue;
        };
        let Some((time, rest)) = rest.trim_start().split_once(": ") else {
            continue;
        };
        if let (Some(t), Some((probe, v))) = (micros(time), event_and_values(rest)) {
            hits.entry(probe).or_default().push((t, v));
        }
    }
    hits
}

/// perf's definitions, the recorders and the workload: whatever happens,
/// the processes are ended and the definitions removed.
struct Recording {
    fs: Tracefs,
    /// perf's events defined so far (`perfNN`, `perfNN_1`).
    events: Vec<String>,
    children: Vec<Child>,
    workload: Option<Child>,
}

impl Recording {
    /// Writes `definition` (`p:kpfvalues/EVENT ...`) to kprobe_events,
    /// removing first an event of the same name a killed run left.
    fn define(&mut self, definition: &str) {
        let event = definition
            .split_whitespace()
            .next()
            .and_then(|h| h.split_once('/'))
            .map(|(_, e)| e.to_string())
            .expect("p:GROUP/EVENT");
        let _ = self.fs.remove(ProbeKind::Kernel, GROUP, &event);
        self.fs
            .define(ProbeKind::Kernel, definition)
            .unwrap_or_else(|e| panic!("kprobe_events refuses {definition}: {e}"));
        self.events.push(event);
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(w) = &mut self.workload {
            let _ = w.kill();
            let _ = w.wait();
        }
        for c in &mut self.children {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for e in &self.events {
            if let Err(err) = self.fs.remove(ProbeKind::Kernel, GROUP, e) {
                eprintln!("removing {GROUP}/{e}: {err}");
            }
        }
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a child's pid and a signal number.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill -{sig} {pid}");
}

/// Waits until process `pid` is stopped (state `T` in /proc/PID/stat).
fn wait_stopped(pid: u32) {
    let started = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, s)| s.chars().next());
        if state == Some('T') {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the workload ({pid}) did not stop itself within 60 s: {stat}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Per event name of our group: (hits, misses) from kprobe_profile.
fn kprobe_profile() -> BTreeMap<String, (u64, u64)> {
    let root = kprobe_perf_engine::tracefs::Tracefs::find()
        .expect("tracefs")
        .root()
        .to_path_buf();
    let text = std::fs::read_to_string(root.join("kprobe_profile")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.rsplit('/').next()?.to_string();
            let hits = w.next()?.parse().ok()?;
            let missed = w.next()?.parse().ok()?;
            name.starts_with("perf").then_some((name, (hits, missed)))
        })
        .filter(|(n, _)| {
            n[4..]
                .split('_')
                .next()
                .is_some_and(|d| d.len() == 2 && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect()
}

#[test]
fn source_probes_recorded_by_perf_and_kprobe_perf_print_the_same_values() {
    let test = "source_probes_recorded_by_perf_and_kprobe_perf_print_the_same_values";
    if !kprobes_available(test) {
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    if release != FIXTURE_RELEASE || kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip_here(
            test,
            &format!(
                "perf's definitions (tests/data/perf_probe_values-{FIXTURE_RELEASE}.defs) are \
                 for {FIXTURE_RELEASE}'s vmlinux, this kernel is {release} ({:?})",
                kernel_arch()
            ),
        );
    }
    let vmlinux = fixture_vmlinux();
    if !vmlinux.is_file() {
        return skip(
            test,
            &format!("no {FIXTURE_RELEASE} -dbg vmlinux under target/vm/kernels"),
        );
    }
    let Some(perf) = perf() else {
        return skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("kpf-values-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();

    // perf's definitions, and kprobe-perf's on this kernel: the same
    // sites (this also builds kprobe-perf's name index of the vmlinux
    // once, before the recording).
    let perf_defs = kprobe_perf_tests::numbered_like_perf_probe(&definition_lines(FIXTURE));
    assert_eq!(
        our_definitions(&vmlinux, false, &dir.join("cache")),
        perf_defs,
        "kprobe-perf probe --definition differs from perf's on the running kernel"
    );
    let sites = perf_defs.len();

    let r = record_both(perf, &vmlinux, &dir, &perf_defs, started);
    let mut theirs = perf_hits(&r.perf_text, r.pid);
    let mut mine = our_hits(&r.our_text, r.pid);
    // Each tool's events in time order (both print them so already; a
    // stable sort keeps the printed order of equal times).
    for hits in theirs.values_mut().chain(mine.values_mut()) {
        hits.sort_by_key(|h| h.0);
    }
    let (compared, values, failures) = compare(&theirs, &mine);
    println!(
        "{} probes ({sites} sites), {compared} hits and {values} values compared, {} probes \
         disagree or never fired; workload {:?}, {:?} in all",
        PROBES.len(),
        failures.len(),
        r.workload_took,
        started.elapsed()
    );
    println!("kprobe-perf: {}", r.our_err.trim());
    println!("perf report --stats:\n{}", r.perf_stats);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // No hit of another process slipped in: every hit is the workload's.
    let printed = r.our_text.lines().filter(|l| l.contains(": ours")).count();
    assert_eq!(printed, compared, "kprobe-perf's hits of other processes");

    // Nothing lost: kprobe-perf's summary, perf's LOST records, and no
    // kprobe missed a hit (kprobe_profile's third column).
    assert!(r.our_err.contains(" 0 lost"), "{}", r.our_err);
    for l in r.perf_stats.lines().filter(|l| l.contains("LOST")) {
        let n = l
            .split(':')
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok());
        assert_eq!(n, Some(0), "perf lost events: {l}");
    }
    assert_eq!(r.profile.len(), sites, "perf's events in kprobe_profile");
    let missed: Vec<_> = r.profile.iter().filter(|(_, h)| h.1 > 0).collect();
    assert!(missed.is_empty(), "kprobes missed hits: {missed:?}");

    check_values(&mine, &dir.join("work"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the two recorders printed.
struct Recorded {
    /// The workload's pid.
    pid: u32,
    workload_took: Duration,
    /// `perf script -F comm,tid,time,event,trace`.
    perf_text: String,
    /// `perf report --stats`.
    perf_stats: String,
    /// kprobe-perf record's output and its summary.
    our_text: String,
    our_err: String,
    /// kprobe_profile's (hits, misses) of perf's events.
    profile: BTreeMap<String, (u64, u64)>,
}

/// Defines `perf_defs`, records the workload (`fs_calls DIR/work
/// ROUNDS`) with kprobe-perf and perf, and removes the definitions
/// (`started`: when the test did, for the time printed).
fn record_both(
    perf: &str,
    vmlinux: &Path,
    dir: &Path,
    perf_defs: &[String],
    started: Instant,
) -> Recorded {
    // The workload stops itself before its first call.
    let workload = Command::new(env!("CARGO_BIN_EXE_fs_calls"))
        .arg(dir.join("work"))
        .arg(ROUNDS.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = workload.id();
    let mut rec = Recording {
        fs: Tracefs::find().expect("tracefs"),
        events: Vec::new(),
        children: Vec::new(),
        workload: Some(workload),
    };
    wait_stopped(pid);
    // perf's events, defined, not enabled: no int3 in the text yet.
    for d in perf_defs {
        rec.define(d);
    }

    // kprobe-perf first: it checks the live text of each site, where an
    // armed kprobe of perf's would be an int3 it cannot tell from another
    // subsystem's; the kernel shares one kprobe between the two tools.
    let mut ours = Command::new(kprobe_perf_bin());
    ours.env("KPROBE_PERF_CACHE_DIR", dir.join("cache"))
        .args(["record", "-p", &pid.to_string(), "--vmlinux"])
        .arg(vmlinux);
    for (i, p) in PROBES.iter().enumerate() {
        ours.args(["-e", &kprobe_perf_spec(i, p)]);
    }
    let ours = ours
        .stdout(std::fs::File::create(dir.join("ours.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("ours.err")).unwrap())
        .spawn()
        .unwrap();
    let our_pid = ours.id();
    rec.children.push(ours);
    // One perf event per site and CPU for the workload's one thread.
    wait_until_recording(our_pid, perf_defs.len() * online_cpus().len());

    // Then perf, enabled once it has opened every event.
    start_perf(perf, pid, dir, &mut rec);
    println!("both recording after {:?}", started.elapsed());

    // The workload, released.
    let workload_started = Instant::now();
    signal(pid, libc::SIGCONT);
    let out = rec
        .workload
        .take()
        .expect("the workload")
        .wait_with_output()
        .unwrap();
    assert!(
        out.status.success(),
        "fs_calls: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let workload_took = workload_started.elapsed();
    stop_recorders(&mut rec.children, dir);
    let profile = kprobe_profile();

    let script = Command::new(perf)
        .args(["script", "-F", "comm,tid,time,event,trace", "-i"])
        .arg(dir.join("perf.data"))
        .output()
        .unwrap();
    assert!(
        script.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&script.stderr)
    );
    let stats = Command::new(perf)
        .args(["report", "--stats", "-i"])
        .arg(dir.join("perf.data"))
        .output()
        .unwrap();
    // Removes perf's definitions; none may be left.
    drop(rec);
    let root = Tracefs::find().expect("tracefs").root().to_path_buf();
    let left = std::fs::read_to_string(root.join("kprobe_events")).unwrap_or_default();
    assert!(
        !left.contains(&format!("{GROUP}/")),
        "perf's definitions left behind:\n{left}"
    );
    Recorded {
        pid,
        workload_took,
        perf_text: String::from_utf8_lossy(&script.stdout).into_owned(),
        perf_stats: String::from_utf8_lossy(&stats.stdout).into_owned(),
        our_text: std::fs::read_to_string(dir.join("ours.out")).unwrap(),
        our_err: std::fs::read_to_string(dir.join("ours.err")).unwrap_or_default(),
        profile,
    }
}

/// Starts `perf record` of perf's events for process `pid`, writing
/// `DIR/perf.data`, as the last of `rec`'s children (ended by it should
/// anything fail): it opens its events disabled (-D -1) and enables
/// them all when told on its control FIFO, then acknowledges; this
/// returns after the acknowledgement.
fn start_perf(perf: &str, pid: u32, dir: &Path, rec: &mut Recording) {
    let (ctl, ack) = perf_control::fifos(dir);
    let perf_err = dir.join("perf.err");
    let perf_rec = Command::new(perf)
        .args(["record", "-q", "-D", "-1", "-p", &pid.to_string(), "-e"])
        .arg(format!("{GROUP}:*"))
        .arg("--control")
        .arg(perf_control::control_arg(&ctl, &ack))
        .arg("-o")
        .arg(dir.join("perf.data"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&perf_err).unwrap())
        .spawn()
        .unwrap();
    rec.children.push(perf_rec);
    let perf_rec = rec.children.last_mut().expect("perf record");
    perf_control::enable(&ctl, &ack, perf_rec, &perf_err);
}

/// Ends the recorders ([kprobe-perf, perf], as started), each on its
/// own once its target has exited, else on SIGINT, and checks how they
/// ended.
fn stop_recorders(children: &mut [Child], dir: &Path) {
    use std::os::unix::process::ExitStatusExt;
    let ending = Instant::now();
    while ending.elapsed() < Duration::from_secs(3)
        && children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            signal(c.id(), libc::SIGINT);
        }
    }
    let statuses: Vec<_> = children.iter_mut().map(|c| c.wait().unwrap()).collect();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    assert!(
        statuses[1].success()
            || statuses[1].code() == Some(130)
            || statuses[1].signal() == Some(libc::SIGINT),
        "perf record: {}: {}",
        statuses[1],
        read("perf.err")
    );
    assert!(
        statuses[0].success(),
        "kprobe-perf record: {}: {}",
        statuses[0],
        read("ours.err")
    );
}

/// Prints the table of hits per probe and tool; returns the hits and
/// values compared where they agree, and a line per probe where they
/// do not (or it never fired).
fn compare(theirs: &Hits, mine: &Hits) -> (usize, usize, Vec<String>) {
    println!(
        "{:<4} {:<72} {:>6} {:>6}  agree",
        "", "probe", "perf", "ours"
    );
    let (mut compared, mut values) = (0, 0);
    let mut failures = Vec::new();
    for (i, p) in PROBES.iter().enumerate() {
        let name = key(i);
        let a: Vec<&Vec<Value>> = theirs
            .get(&name)
            .map_or(vec![], |h| h.iter().map(|h| &h.1).collect());
        let b: Vec<&Vec<Value>> = mine
            .get(&name)
            .map_or(vec![], |h| h.iter().map(|h| &h.1).collect());
        let agree = a == b && !a.is_empty();
        if agree {
            compared += a.len();
            values += a.iter().map(|v| v.len()).sum::<usize>();
        } else {
            let first = a
                .iter()
                .zip(&b)
                .position(|(x, y)| x != y)
                .or((a.len() != b.len()).then(|| a.len().min(b.len())));
            failures.push(format!(
                "{name} {p}: perf {} hits, ours {}; first difference at hit {first:?}: perf {:?} ours {:?}",
                a.len(),
                b.len(),
                first.and_then(|f| a.get(f)),
                first.and_then(|f| b.get(f)),
            ));
        }
        println!(
            "{name} {p:<72} {:>6} {:>6}  {}",
            a.len(),
            b.len(),
            if agree { "yes" } else { "NO" }
        );
    }
    (compared, values, failures)
}

/// The values of `probe` (its `FUNC:RLINE VARS` in [`PROBES`]), per hit.
fn hits_of<'a>(hits: &'a Hits, probe: &str) -> Vec<&'a Vec<Value>> {
    let i = PROBES
        .iter()
        .position(|p| *p == probe)
        .unwrap_or_else(|| panic!("{probe} is not in PROBES"));
    hits.get(&key(i))
        .map_or(vec![], |h| h.iter().map(|h| &h.1).collect())
}

/// A few values the workload chose, exactly.
fn check_values(hits: &Hits, work: &Path) {
    let work = work.to_string_lossy();
    let int = |n: i128| Value::Int(n);
    let s = |t: String| Value::Str(t);
    let rounds = 0..i128::from(ROUNDS);
    // mkdir(work/subR, 0750): AT_FDCWD, the mode as given, the name.
    assert_eq!(
        hits_of(hits, "do_mkdirat:13 dfd mode name->name:string"),
        rounds
            .clone()
            .map(|r| vec![int(-100), int(0o750), s(format!("{work}/sub{r}"))])
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    // chown(work/fileR, 1000 + R, 2000 + R).
    assert_eq!(
        hits_of(hits, "chown_common:11 user group"),
        rounds
            .clone()
            .map(|r| vec![int(1000 + r), int(2000 + r)])
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    // eventfd(7 + R, EFD_CLOEXEC).
    assert_eq!(
        hits_of(hits, "do_eventfd:20 count flags"),
        rounds
            .clone()
            .map(|r| vec![int(7 + r), int(i128::from(libc::EFD_CLOEXEC))])
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    // symlink("fileR", work/linkR).
    assert_eq!(
        hits_of(
            hits,
            "do_symlinkat:17 newdfd from=from->name:string to=to->name:string"
        ),
        rounds
            .clone()
            .map(|r| vec![
                int(-100),
                s(format!("file{r}")),
                s(format!("{work}/link{r}"))
            ])
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    // fallocate(fd, 0, 4096, 8192).
    assert_eq!(
        hits_of(hits, "vfs_fallocate:9 mode offset len"),
        rounds
            .clone()
            .map(|_| vec![int(0), int(4096), int(8192)])
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    // open(work/fileR, O_CREAT|O_WRONLY|O_TRUNC, 0640 + R): op.mode is
    // S_IFREG | mode (umask 0).
    let created: Vec<i128> = hits_of(
        hits,
        "do_sys_openat2:17 fd tmp->name:string op.mode op.open_flag op.acc_mode",
    )
    .iter()
    .filter(|v| matches!(v.get(1), Some(Value::Str(p)) if p.starts_with(&format!("{work}/file"))))
    .filter_map(|v| match v.get(2) {
        Some(Value::Int(m)) if *m != 0 => Some(*m),
        _ => None,
    })
    .collect();
    assert_eq!(
        created,
        rounds.map(|r| 0o100640 + r).collect::<Vec<_>>(),
        "the modes of the created files"
    );
}
