//! The newer probe language against a real kernel: fprobe events (one
//! definition for a glob of functions), tracepoint probes, BTF names and
//! member access, entry arguments in return probes, and the `char`,
//! `symstr` and `%pD` types. On a kernel whose tracefs README lacks a
//! form (6.1), the planner refuses it naming the feature (entry arguments
//! in return probes excepted: entry_args.rs).

use std::io::Read;
use std::time::{Duration, Instant};

use kprobe_perf_engine::cli::plan::{running_kernel_features, Backend, KernelFeatures};
use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{Event, Value};
use kprobe_perf_engine::{KernelSymbols, Session, SessionOptions};
use kprobe_perf_tests::{kprobes_available, vm_kernel};

/// The features of the running kernel; `None` (with the reason printed)
/// when fprobe events are missing, after checking the refusal message.
fn fprobe_kernel(test: &str) -> Option<&'static KernelFeatures> {
    if !kprobes_available(test) {
        return None;
    }
    let features = running_kernel_features().expect("tracefs README readable");
    if !features.fprobe {
        println!("SKIP {test}: this kernel has no fprobe events (its README)");
        return None;
    }
    Some(features)
}

/// A file of `size` bytes in /tmp, named after the test.
fn file_of(name: &str, size: usize) -> String {
    let path = format!("/tmp/{name}-{}", std::process::id());
    std::fs::write(&path, vec![b'k'; size]).unwrap();
    path
}

/// Reads `path` in one read() of a `buf`-byte buffer on a new thread;
/// returns that thread's id.
fn read_once(path: &str, buf: usize) -> i32 {
    let path = path.to_string();
    std::thread::spawn(move || {
        let mut f = std::fs::File::open(&path).unwrap();
        let mut b = vec![0u8; buf];
        let n = f.read(&mut b).unwrap();
        assert!(n > 0);
        kprobe_perf_engine::cli::os::gettid()
    })
    .join()
    .unwrap()
}

/// Events of thread `tid` until `want` arrive or 20 s pass.
fn events_of(session: &mut Session, tid: i32, want: usize) -> Vec<Event> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < want && Instant::now() < deadline {
        session
            .poll(
                Some(Duration::from_millis(100)),
                &mut kprobe_perf_engine::sink_fn(|e| {
                    if e.tid == tid {
                        seen.push(e.clone());
                    }
                }),
            )
            .unwrap();
    }
    session
        .poll(
            Some(Duration::from_millis(200)),
            &mut kprobe_perf_engine::sink_fn(|e| {
                if e.tid == tid {
                    seen.push(e.clone());
                }
            }),
        )
        .unwrap();
    seen
}

/// `f:vfs_read%return count $retval`: one read() of a 12,345-byte file
/// with a 65,536-byte buffer returns 12,345, and the entry argument
/// `count` saved by the kernel is 65,536.
#[test]
fn fprobe_return_value_is_the_size_read() {
    if fprobe_kernel("fprobe_return_value_is_the_size_read").is_none() {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(&["f:vfs_read%return count $retval"], &symbols).unwrap();
    assert_eq!(plans[0].backend, Backend::Tracefs);
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    let group = session.tracefs_group().unwrap().to_string();
    let defined = std::fs::read_to_string("/sys/kernel/tracing/dynamic_events").unwrap();
    let ours: Vec<&str> = defined.lines().filter(|l| l.contains(&group)).collect();
    assert_eq!(
        ours,
        vec![format!("f:{group}/vfs_read__exit vfs_read%return count=count arg2=$retval").as_str()]
    );
    let names: Vec<&str> = session.plans()[0]
        .args
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, vec!["count", "arg2"], "the kernel's field names");
    session.enable().unwrap();
    let path = file_of("fprobe-ret", 12_345);
    let tid = read_once(&path, 65_536);
    let seen = events_of(&mut session, tid, 1);
    let reads: Vec<(Option<i64>, Option<i64>)> = seen
        .iter()
        .map(|e| (e.args[0].as_i64(), e.args[1].as_i64()))
        .filter(|(c, _)| *c == Some(65_536))
        .collect();
    assert_eq!(reads, vec![(Some(65_536), Some(12_345))], "{seen:?}");
    let func = symbols.symbolize(seen[0].probe_addr).unwrap();
    assert_eq!(
        func.symbol.name, "vfs_read",
        "__probe_func names the function"
    );
    drop(session);
    let defined = std::fs::read_to_string("/sys/kernel/tracing/dynamic_events").unwrap();
    assert!(!defined.contains(&group), "removed at drop: {defined}");
    let _ = std::fs::remove_file(path);
}

/// `f:kpf/all vfs_*` is one definition; the kernel arms every traceable
/// vfs_ function (listed in enabled_functions), and a read() by our
/// thread is reported as vfs_read, named from the event's ip.
#[test]
fn fprobe_glob_is_one_definition_for_all_its_functions() {
    if fprobe_kernel("fprobe_glob_is_one_definition_for_all_its_functions").is_none() {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(&["f:kpf/all vfs_*"], &symbols).unwrap();
    assert_eq!(plans.len(), 1);
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    let group = session.tracefs_group().unwrap().to_string();
    let defined = std::fs::read_to_string("/sys/kernel/tracing/dynamic_events").unwrap();
    let ours: Vec<&str> = defined.lines().filter(|l| l.contains(&group)).collect();
    assert_eq!(ours, vec![format!("f:{group}/all vfs_*").as_str()]);
    session.enable().unwrap();
    let enabled = std::fs::read_to_string("/sys/kernel/tracing/enabled_functions").unwrap();
    let armed: Vec<&str> = enabled
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("vfs_"))
        .collect();
    let traceable =
        std::fs::read_to_string("/sys/kernel/tracing/available_filter_functions").unwrap();
    let mut want: Vec<&str> = traceable
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("vfs_"))
        .collect();
    want.sort();
    want.dedup();
    let mut got = armed.clone();
    got.sort();
    got.dedup();
    assert_eq!(got, want, "every traceable vfs_ function armed");
    println!("armed {} vfs_ functions", got.len());
    let path = file_of("fprobe-all", 100);
    let tid = read_once(&path, 4096);
    let seen = events_of(&mut session, tid, 1);
    let names: Vec<String> = seen
        .iter()
        .map(|e| {
            let l = symbols.symbolize(e.probe_addr).unwrap();
            format!("{}+{}", l.symbol.name, l.offset)
        })
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("vfs_read+")),
        "vfs_read among {names:?}"
    );
    assert!(names.iter().all(|n| n.starts_with("vfs_")), "{names:?}");
    drop(session);
    let _ = std::fs::remove_file(path);
}

/// BTF names and members, `%pD`, `symstr` and `char`, fetched by the
/// kernel at a kprobe: the name of the file read, its file operations,
/// and the first letter of its name.
#[test]
fn btf_members_and_new_types() {
    if fprobe_kernel("btf_members_and_new_types").is_none() {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(
        &["p:vfs_read file:%pD count fop=file->f_op:symstr c=+0(file->f_path.dentry->d_name.name):char"],
        &symbols,
    )
    .unwrap();
    assert_eq!(plans[0].backend, Backend::Tracefs);
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    session.enable().unwrap();
    let path = file_of("btf-types", 10);
    let base = path.rsplit('/').next().unwrap().to_string();
    let tid = read_once(&path, 777);
    let seen = events_of(&mut session, tid, 1);
    let ours: Vec<&Event> = seen
        .iter()
        .filter(|e| e.args[1].as_i64() == Some(777))
        .collect();
    assert_eq!(ours.len(), 1, "{seen:?}");
    let args = &ours[0].args;
    assert_eq!(args[0].as_str(), Some(base.as_str()), "%pD");
    let fop = args[2].as_str().unwrap_or_default();
    assert!(
        fop.starts_with("shmem_file_operations+0x0"),
        "symstr: {fop}"
    );
    assert_eq!(
        args[3],
        Value::Int {
            raw: u64::from(b'b'),
            ty: kprobe_perf_engine::spec::BaseType::Char
        }
    );
    assert_eq!(args[3].to_string(), "'b'");
    drop(session);
    let _ = std::fs::remove_file(path);
}

/// `t:sched_process_fork parent child`, and `$arg1` at a kretprobe: the
/// kernel names the fields from BTF.
#[test]
fn tracepoint_probe_and_entry_args_at_return() {
    if fprobe_kernel("tracepoint_probe_and_entry_args_at_return").is_none() {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(
        &[
            "t:kpf/fork sched_process_fork parent",
            "r:kpf/rd vfs_read $arg3 $retval",
        ],
        &symbols,
    )
    .unwrap();
    let mut session = Session::open(plans, SessionOptions::default()).unwrap();
    let names: Vec<Vec<&str>> = session
        .plans()
        .iter()
        .map(|p| p.args.iter().map(|a| a.name.as_str()).collect())
        .collect();
    assert_eq!(names, vec![vec!["parent"], vec!["count", "arg2"]]);
    session.enable().unwrap();
    let path = file_of("rd", 5);
    let tid = read_once(&path, 999);
    let seen = events_of(&mut session, tid, 1);
    let rd: Vec<(Option<i64>, Option<i64>)> = seen
        .iter()
        .filter(|e| e.probe == 1 && e.args[0].as_i64() == Some(999))
        .map(|e| (e.args[0].as_i64(), e.args[1].as_i64()))
        .collect();
    assert_eq!(rd, vec![(Some(999), Some(5))]);
    // One fork by this process: the parent is our thread's task_struct
    // pointer, non-zero.
    let child = std::process::Command::new("/bin/true").status().unwrap();
    assert!(child.success());
    let me = kprobe_perf_engine::cli::os::gettid();
    let forks = events_of(&mut session, me, 1);
    let forks: Vec<&Event> = forks.iter().filter(|e| e.probe == 0).collect();
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_ne!(forks[0].args[0].as_i64(), Some(0));
    drop(session);
    let _ = std::fs::remove_file(path);
}

/// Where the README lacks fprobe events (Debian's 6.1), `f:` is refused
/// at plan time, naming the feature; nothing is defined.
#[test]
fn fprobe_refused_where_the_kernel_lacks_it() {
    if !kprobes_available("fprobe_refused_where_the_kernel_lacks_it") {
        return;
    }
    let features = running_kernel_features().expect("tracefs README readable");
    let symbols = KernelSymbols::load().unwrap();
    let got = plan_probes(&["f:vfs_read%return $retval"], &symbols);
    if features.fprobe {
        assert!(got.is_ok(), "{got:?}");
        println!("fprobe events present on {:?}", vm_kernel());
        return;
    }
    assert_eq!(
        got.unwrap_err().to_string(),
        "this kernel's tracefs README has no fprobe events (f:); needs CONFIG_FPROBE_EVENTS, Linux 6.5+"
    );
    // Entry arguments in return probes are not refused: a hidden entry
    // probe fetches them, joined to the return in user space (see
    // entry_args.rs).
    let got = plan_probes(&["r:vfs_read $arg1"], &symbols).unwrap();
    assert!(got[0].entry_join.is_some(), "{got:?}");
    let out = std::process::Command::new(kprobe_perf_tests::kprobe_perf_bin())
        .args(["record", "-e", "f:vfs_read", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("this kernel's tracefs README has no fprobe events (f:); needs CONFIG_FPROBE_EVENTS, Linux 6.5+"),
        "{err}"
    );
}

/// `--backend auto` turns a glob into one fprobe event: `r:vfs_rea*
/// $retval:s64` over `cat` of a 12-byte file reports that read as
/// `vfs_read` returning 12, lists the functions the kernel armed, and
/// `list --why` names the route.
#[test]
fn cli_glob_becomes_one_fprobe_event() {
    if fprobe_kernel("cli_glob_becomes_one_fprobe_event").is_none() {
        return;
    }
    let path = format!("/tmp/cli-glob-{}", std::process::id());
    std::fs::write(&path, b"hello world\n").unwrap();
    let out = std::process::Command::new(kprobe_perf_tests::kprobe_perf_bin())
        .args(["record", "-e", "r:vfs_rea* $retval:s64", "--", "cat", &path])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "r:vfs_rea* $retval:s64: one fprobe event f vfs_rea*%return $retval:s64 over the"
        ),
        "{stderr}"
    );
    let armed = stderr
        .lines()
        .find(|l| l.contains("the kernel armed"))
        .unwrap_or_default();
    assert!(
        armed.contains(" vfs_read ") || armed.ends_with(" vfs_read"),
        "{armed}"
    );
    assert!(armed.contains("vfs_readv"), "{armed}");
    let twelve: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("cat") || l.trim_start().starts_with("cat-"))
        .filter(|l| l.ends_with(" arg1=12"))
        .collect();
    assert_eq!(twelve.len(), 1, "{stdout}");
    assert!(twelve[0].contains("<- vfs_read)"), "{}", twelve[0]);
    let list = std::process::Command::new(kprobe_perf_tests::kprobe_perf_bin())
        .args(["list", "--why", "vfs_rea*"])
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&list.stderr);
    assert!(
        why.contains("vfs_rea*: route with --backend auto: one fprobe event f vfs_rea*"),
        "{why}"
    );
    // vfs_* holds fragile functions the kernel's wildcard would arm
    // (vfs_dentry_acceptable, the "entry" family): narrower fprobe
    // events leave them out, and none of them is armed.
    let out = std::process::Command::new(kprobe_perf_tests::kprobe_perf_bin())
        .args(["record", "-e", "p:vfs_*", "--", "cat", &path])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("fprobe events (vfs_") && stderr.contains("leaving out"),
        "{stderr}"
    );
    let armed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the kernel armed"))
        .collect();
    assert!(armed.len() > 1, "{stderr}");
    assert!(
        armed.iter().all(|l| !l.contains("vfs_dentry_acceptable")),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(vfs_read+"), "{stdout}");
    let _ = std::fs::remove_file(path);
}
