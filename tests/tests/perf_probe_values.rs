//! Issue #27: source-level probes (a function, a line relative to it and
//! variables, in `perf probe`'s syntax) recorded at the same time by
//! `perf probe -a` + `perf record` and by `kprobe-perf record` print the
//! same values. Each probe of [`PROBES`] is defined by both tools from
//! the same DWARF (Debian's 6.1 -dbg vmlinux of the VM kernel): perf
//! writes its definitions to kprobe_events, kprobe-perf resolves its own
//! (`p:NAME FUNC@+LINE VARS`) and opens them (through tracefs where a
//! member or string must be fetched in the kernel). Both
//! record every CPU, each keeping only the events of the workload
//! (`fs_calls`, by its comm, in the kernel), while the workload makes a
//! fixed series of file, pipe, eventfd and memory calls that passes
//! every probe. Per probe, the sequence of values each tool printed for
//! that process must be the same, hit for hit, and each probe must have
//! fired; a few values are checked against what the workload passed.
//! Neither tool may lose an event.
//!
//! Every probe here was checked first, offline, to get the same
//! definition from `perf probe -k VMLINUX -D` and `kprobe-perf probe
//! --definition` (docs/source-vs-perf.md lists the classes where they
//! differ: no probe of such a class is used).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_tests::{
    kernel_arch, kprobe_perf_bin, kprobes_available, online_cpus, perf_event_fds, skip, skip_here,
    vm_kernel,
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

/// The tracefs group perf's events are put in (`GROUP:pNN`).
const GROUP: &str = "kpfvalues";

/// The workload's comm (its binary's name) and its rounds.
const COMM: &str = "fs_calls";
const ROUNDS: u32 = 3;

/// The -dbg vmlinux of the running kernel under `target/vm/kernels/`.
fn debug_vmlinux() -> Option<PathBuf> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let release = release.trim();
    let kernels = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vm/kernels");
    std::fs::read_dir(kernels).ok()?.flatten().find_map(|d| {
        let p = d
            .path()
            .join(format!("usr/lib/debug/boot/vmlinux-{release}"));
        p.is_file().then_some(p)
    })
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

/// The two recorders and perf's probes: whatever happens, the recorders
/// are stopped and perf's probes removed.
struct Recording {
    perf: &'static str,
    children: Vec<Child>,
}

impl Drop for Recording {
    fn drop(&mut self) {
        for c in &mut self.children {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = Command::new(self.perf)
            .args(["probe", "-q", "-d", &format!("{GROUP}:*")])
            .stderr(Stdio::null())
            .status();
    }
}

fn interrupt(child: &Child) {
    // SAFETY: kill(2) with a child's pid and SIGINT.
    let r = unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(r, 0, "kill -INT {}", child.id());
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
    if !release.starts_with("6.1.0-") || kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip_here(
            test,
            "the lines and variables probed are those of x86_64 6.1's DWARF",
        );
    }
    let Some(vmlinux) = debug_vmlinux() else {
        return skip_here(
            test,
            "no -dbg vmlinux of this kernel under target/vm/kernels",
        );
    };
    let Some(perf) = perf() else {
        return skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("kpf-values-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cache = dir.join("cache");
    let vm = vmlinux.to_string_lossy().to_string();

    // kprobe-perf's definitions first: how many sites (perf events per
    // CPU) the recording opens, and the name index of the vmlinux built
    // once, before the recording.
    let ours: Vec<String> = PROBES
        .iter()
        .enumerate()
        .map(|(i, p)| kprobe_perf_spec(i, p))
        .collect();
    let defs = Command::new(kprobe_perf_bin())
        .env("KPROBE_PERF_CACHE_DIR", &cache)
        .args(["probe", "--definition", "--vmlinux", &vm])
        .args(&ours)
        .output()
        .unwrap();
    let defs_text = String::from_utf8_lossy(&defs.stdout);
    assert!(
        defs.status.success(),
        "{defs_text}{}",
        String::from_utf8_lossy(&defs.stderr)
    );
    let sites = defs_text.lines().filter(|l| l.starts_with("p:")).count();
    assert!(sites >= PROBES.len(), "{defs_text}");

    // perf's side: perf probe writes the definitions, perf record
    // records the group, keeping the workload's events only.
    let mut rec = Recording {
        perf,
        children: Vec::new(),
    };
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", &format!("{GROUP}:*")])
        .stderr(Stdio::null())
        .status();
    let mut add = Command::new(perf);
    add.args(["probe", "-q", "-k", &vm]);
    for (i, p) in PROBES.iter().enumerate() {
        add.arg("-a")
            .arg(format!("{GROUP}:{}={p}", event("perf", i)));
    }
    let added = add.output().unwrap();
    assert!(
        added.status.success(),
        "perf probe -a: {}",
        String::from_utf8_lossy(&added.stderr)
    );
    let filter = format!("comm == \"{COMM}\"");
    let data = dir.join("perf.data");
    // kprobe-perf first: it checks the live text of each site, where an
    // armed kprobe of perf's would be an int3 it cannot tell from another
    // subsystem's; perf's events, defined and not yet enabled, leave the
    // text alone, and the kernel shares one kprobe between the two tools.
    // kprobe-perf's side: the same probes, every CPU, the same filter
    // (in the kernel), text output to a file.
    let mut ours_cmd = Command::new(kprobe_perf_bin());
    ours_cmd
        .env("KPROBE_PERF_CACHE_DIR", &cache)
        .args(["record", "-a", "--vmlinux", &vm]);
    for spec in &ours {
        ours_cmd.args(["-e", spec, "--filter", &filter]);
    }
    let our_rec = ours_cmd
        .stdout(std::fs::File::create(dir.join("ours.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("ours.err")).unwrap())
        .spawn()
        .unwrap();
    let our_pid = our_rec.id();
    rec.children.push(our_rec);

    let armed = Instant::now();
    // One perf event per site and CPU; or, should kprobe-perf open fewer,
    // as many as it holds once that number has not moved for 5 s.
    let (mut last, mut since) = (0, Instant::now());
    loop {
        let n = perf_event_fds(our_pid);
        if n != last {
            (last, since) = (n, Instant::now());
        }
        if n >= sites * online_cpus().len()
            || (n >= PROBES.len() && since.elapsed() > Duration::from_secs(5))
        {
            break;
        }
        assert!(
            armed.elapsed() < Duration::from_secs(600),
            "kprobe-perf held {n} perf events after 600 s: {}",
            std::fs::read_to_string(dir.join("ours.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Ours enables its events right after opening them.
    std::thread::sleep(Duration::from_secs(1));

    let perf_rec = Command::new(perf)
        .args([
            "record",
            "-q",
            "-a",
            "-e",
            &format!("{GROUP}:*"),
            "--filter",
        ])
        .arg(&filter)
        .arg("-o")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("perf.err")).unwrap())
        .spawn()
        .unwrap();
    rec.children.push(perf_rec);

    // Both armed: perf's kprobes count hits (of any process: the filter
    // comes after) once perf record has enabled them; ours hold one
    // event per site and CPU.
    loop {
        let _ = std::fs::File::open(work.join("marker"));
        let perf_hits: u64 = kprobe_profile().values().map(|h| h.0).sum();
        if perf_hits > 0 {
            break;
        }
        for c in &mut rec.children {
            if let Ok(Some(st)) = c.try_wait() {
                panic!(
                    "a recorder ended before the workload ({st}): perf: {} ours: {}",
                    std::fs::read_to_string(dir.join("perf.err")).unwrap_or_default(),
                    std::fs::read_to_string(dir.join("ours.err")).unwrap_or_default()
                );
            }
        }
        assert!(
            armed.elapsed() < Duration::from_secs(600),
            "perf record did not enable its probes within 600 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("both recording after {:?}", started.elapsed());

    // The workload.
    let workload = Command::new(env!("CARGO_BIN_EXE_fs_calls"))
        .arg(&work)
        .arg(ROUNDS.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = workload.id();
    let out = workload.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "fs_calls: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_secs(2));
    let profile = kprobe_profile();
    for c in &rec.children {
        interrupt(c);
    }
    // [ours, perf's], as started.
    let mut statuses = Vec::new();
    for c in &mut rec.children {
        statuses.push(c.wait().unwrap());
    }
    use std::os::unix::process::ExitStatusExt;
    let perf_err = std::fs::read_to_string(dir.join("perf.err")).unwrap_or_default();
    let our_err = std::fs::read_to_string(dir.join("ours.err")).unwrap_or_default();
    assert!(
        statuses[1].success()
            || statuses[1].code() == Some(130)
            || statuses[1].signal() == Some(libc::SIGINT),
        "perf record: {}: {perf_err}",
        statuses[1]
    );
    assert!(
        statuses[0].success(),
        "kprobe-perf record: {}: {our_err}",
        statuses[0]
    );
    let script = Command::new(perf)
        .args(["script", "-F", "comm,tid,time,event,trace", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        script.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&script.stderr)
    );
    let stats = Command::new(perf)
        .args(["report", "--stats", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    // Removes perf's probes (and finds the recorders ended).
    drop(rec);

    let perf_text = String::from_utf8_lossy(&script.stdout);
    let our_text = std::fs::read_to_string(dir.join("ours.out")).unwrap();
    let mut theirs = perf_hits(&perf_text, pid);
    let mut mine = our_hits(&our_text, pid);
    // Each tool's events in time order (both print them so already; a
    // stable sort keeps the printed order of equal times).
    for hits in theirs.values_mut().chain(mine.values_mut()) {
        hits.sort_by_key(|h| h.0);
    }

    // The table, then the checks.
    println!(
        "{:<4} {:<72} {:>6} {:>6}  agree",
        "", "probe", "perf", "ours"
    );
    let mut compared = 0;
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
        } else {
            let first = a.iter().zip(&b).position(|(x, y)| x != y);
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
    println!(
        "{} probes, {compared} hits compared, {} probes disagree or never fired; {:?} in all",
        PROBES.len(),
        failures.len(),
        started.elapsed()
    );
    println!("kprobe-perf: {}", our_err.trim());
    let stats_text = String::from_utf8_lossy(&stats.stdout);
    println!("perf report --stats:\n{stats_text}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Nothing lost: kprobe-perf's summary, perf's LOST records, and no
    // kprobe missed a hit (kprobe_profile's third column).
    assert!(our_err.contains(" 0 lost"), "{our_err}");
    for l in stats_text.lines().filter(|l| l.contains("LOST")) {
        let n = l
            .split(':')
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok());
        assert_eq!(n, Some(0), "perf lost events: {l}");
    }
    let missed: Vec<_> = profile.iter().filter(|(_, h)| h.1 > 0).collect();
    assert!(missed.is_empty(), "kprobes missed hits: {missed:?}");

    check_values(&mine, &work);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = vm_kernel();
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
