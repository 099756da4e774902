//! `kprobe-perf calls`: the trees it rebuilds against the kernel's own
//! `function_graph` tracer with `funcgraph-retval` (Linux 6.5+), limited
//! to the same functions and run on the same workload (run after a warm
//! up, so that both see the same caches):
//!
//! - an `open()` of a missing path: the same trees, and the errors mode
//!   names the function where -ENOENT first appears as function_graph
//!   shows it;
//! - a `read()` of a file;
//! - a TCP connect over loopback.
//!
//! Trees are compared as their frames' (depth, function, return value
//! cut to 32 bits: function_graph prints the whole register, where an
//! `int`'s upper bits are not part of its value; a value outside
//! -4095..4095, a pointer each run allocates anew, compared only as
//! such). Debian's kernels build
//! function_graph without return values (CONFIG_FUNCTION_GRAPH_RETVAL is
//! off in 6.12), so the missing path's open is also compared, entries
//! and returns with their values, with the kernel's own kprobe and
//! kretprobe events defined in kprobe_events and read as trace text.

use std::fs;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available};

const TRACING: &str = "/sys/kernel/tracing";

/// One frame: depth, function, return value's class ([`class`]).
type Frame = (usize, String, Option<u32>);

/// A return value as two runs can compare it: its low 32 bits when they
/// are an errno, 0 or a small number (-4095..4095); one mark for any
/// other (a pointer to an object each run allocates anew).
fn class(v: u64) -> u32 {
    let low = v as u32;
    if (-4095..=4095).contains(&(low as i32)) {
        low
    } else {
        0x8000_0000
    }
}

/// The functions `kprobe-perf list` keeps of `globs`, in its order.
fn functions(globs: &[&str]) -> Vec<String> {
    let out = Command::new(kprobe_perf_bin())
        .arg("list")
        .args(globs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty() && !l.contains('@') && !l.contains(':'))
        .collect()
}

/// A tree's frames, and whether each returned an error (by its BTF type).
type Tree = (Vec<Frame>, Vec<bool>);

/// `calls --json` over `workload`: its trees.
fn calls_trees(root: &str, inside: &[String], workload: &[&str]) -> Vec<Tree> {
    let mut cmd = Command::new(kprobe_perf_bin());
    cmd.args(["calls", "--json", "-e", root]);
    for f in inside {
        cmd.args(["--allow", f]);
    }
    let out = cmd.arg("--").args(workload).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(", 0 lost"), "{stderr}");
    let mut trees = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // The workload's own output shares stdout: a line may start
        // with what it printed without a newline.
        let Some(at) = line.find("{\"") else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line[at..]) else {
            continue;
        };
        assert_eq!(v["complete"], true, "an incomplete tree: {line}\n{stderr}");
        let list = v["frames"].as_array().unwrap();
        let errors = list.iter().map(|f| !f["error"].is_null()).collect();
        let frames = list
            .iter()
            .map(|f| {
                (
                    f["depth"].as_u64().unwrap() as usize,
                    f["function"].as_str().unwrap().to_string(),
                    f["ret"].as_i64().map(|r| class(r as u64)),
                )
            })
            .collect();
        trees.push((frames, errors));
    }
    trees
}

/// The errors mode's text: the last function of the first error path.
fn errors_mode_origin(root: &str, inside: &[String], workload: &[&str]) -> String {
    let mut cmd = Command::new(kprobe_perf_bin());
    cmd.args(["calls", "-e", root]);
    for f in inside {
        cmd.args(["--allow", f]);
    }
    let out = cmd.arg("--").args(workload).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // The path lines of the last tree printed: `  DURATION  <indent>name() = ERR`.
    let block: Vec<&str> = text
        .split('\n')
        .collect::<Vec<_>>()
        .rsplit(|l| !l.starts_with(' '))
        .find(|b| !b.is_empty())
        .unwrap_or_default()
        .to_vec();
    let last = block
        .iter()
        .rev()
        .find(|l| l.contains("() = "))
        .unwrap_or_else(|| panic!("no error path in {text}"));
    last.split("()")
        .next()
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .to_string()
}

fn write(file: &str, what: &str) {
    fs::write(format!("{TRACING}/{file}"), what)
        .unwrap_or_else(|e| panic!("writing {what:?} to {file}: {e}"));
}

/// function_graph over `workload` (its pid only, from its exec on),
/// limited to `all`: the trees rooted at `root`, as frames, and whether
/// they carry return values.
fn function_graph_trees(root: &str, all: &[String], workload: &[&str]) -> (Vec<Vec<Frame>>, bool) {
    write("tracing_on", "0");
    write("current_tracer", "nop");
    write("trace", "");
    write("set_ftrace_filter", &all.join("\n"));
    // The tracer's options appear once it is the current tracer.
    write("current_tracer", "function_graph");
    write("tracing_on", "0");
    write("trace", "");
    let retval = has_retval();
    if retval {
        write("options/funcgraph-retval", "1");
    }
    write("options/funcgraph-irqs", "1");
    // The shell names itself, then becomes the workload (same pid).
    let script =
        format!("echo $$ > {TRACING}/set_ftrace_pid; echo 1 > {TRACING}/tracing_on; exec \"$@\"");
    let status = Command::new("/bin/sh")
        .args(["-c", &script, "sh"])
        .args(workload)
        .status()
        .unwrap();
    let _ = status;
    write("tracing_on", "0");
    let text = fs::read_to_string(format!("{TRACING}/trace")).unwrap();
    write("current_tracer", "nop");
    write("set_ftrace_pid", "");
    write("set_ftrace_filter", "");
    (parse_function_graph(&text, root), retval)
}

/// `name` and return value of a `/* name = ret */` or `/* = ret */` comment.
fn retval_of(comment: &str) -> Option<u32> {
    let v = comment.rsplit("= ").next()?.trim_end_matches("*/").trim();
    let n = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => v.parse::<i64>().ok()? as u64,
    };
    Some(class(n))
}

/// The trees of function_graph's text rooted at `root`.
fn parse_function_graph(text: &str, root: &str) -> Vec<Vec<Frame>> {
    let mut trees = Vec::new();
    let mut tree: Vec<Frame> = Vec::new();
    // Open calls: index of their frame in `tree`.
    let mut open: Vec<usize> = Vec::new();
    for line in text.lines() {
        let Some((_, body)) = line.split_once('|') else {
            continue;
        };
        let body = body.trim();
        if body.starts_with('}') {
            let Some(i) = open.pop() else { continue };
            tree[i].2 = retval_of(body);
            if open.is_empty() {
                trees.push(std::mem::take(&mut tree));
            }
            continue;
        }
        let Some((name, rest)) = body.split_once("()") else {
            continue;
        };
        if open.is_empty() && name != root {
            continue;
        }
        let depth = open.len();
        if rest.trim_start().starts_with('{') {
            tree.push((depth, name.to_string(), None));
            open.push(tree.len() - 1);
        } else {
            tree.push((depth, name.to_string(), retval_of(rest)));
            if open.is_empty() {
                trees.push(std::mem::take(&mut tree));
            }
        }
    }
    trees
}

/// Whether function_graph prints return values (`funcgraph-retval`,
/// Linux 6.5+ with CONFIG_FUNCTION_GRAPH_RETVAL, which Debian's 6.12
/// leaves out); asked while function_graph is the current tracer.
fn has_retval() -> bool {
    std::path::Path::new(&format!("{TRACING}/options/funcgraph-retval")).exists()
}

/// Both tools' trees of `root` over `workload` (after a warm-up run),
/// asserted equal; returns function_graph's, each with the errors ours
/// found in it.
fn same_trees(root: &str, globs: &[&str], workload: &[&str]) -> Vec<Tree> {
    let all = functions(globs);
    assert!(all.iter().any(|f| f == root), "{root} not in {all:?}");
    let inside: Vec<String> = all.iter().filter(|f| *f != root).cloned().collect();
    let _ = Command::new(workload[0]).args(&workload[1..]).output();
    let mut ours = calls_trees(root, &inside, workload);
    let (kernels, retval) = function_graph_trees(root, &all, workload);
    if !retval {
        println!(
            "{root}: this kernel's function_graph has no funcgraph-retval \
             (CONFIG_FUNCTION_GRAPH_RETVAL): calls and nesting compared, not return values"
        );
        for (frames, _) in &mut ours {
            for f in frames {
                f.2 = None;
            }
        }
    }
    assert!(!ours.is_empty(), "no tree of {root}");
    assert_eq!(
        ours.len(),
        kernels.len(),
        "trees of {root}: ours {ours:#?}\nfunction_graph {kernels:#?}"
    );
    for (a, b) in ours.iter().zip(&kernels) {
        assert_eq!(&a.0, b, "a tree of {root} differs from function_graph's");
    }
    println!("{root}: {} trees, the same as function_graph's", ours.len());
    kernels
        .into_iter()
        .zip(ours)
        .map(|(k, (_, errors))| (k, errors))
        .collect()
}

#[test]
fn open_of_a_missing_path_matches_function_graph() {
    if !kprobes_available("open_of_a_missing_path_matches_function_graph") {
        return;
    }
    let globs = [
        "do_sys_openat2",
        "getname_flags*",
        "do_filp_open",
        "path_openat",
        "link_path_walk*",
        "walk_component",
        "lookup_fast",
        "lookup_open*",
        "open_last_lookups",
        "do_open",
    ];
    let workload = ["/bin/cat", "/tmp/kpf-calls-missing"];
    let trees = same_trees("do_sys_openat2", &globs, &workload);
    // The missing path's open is the last; where its -ENOENT arose.
    let (last, errors) = trees.last().unwrap();
    let enoent = (-2i64) as u32;
    if last[0].2.is_some() {
        assert_eq!(last[0].2, Some(enoent), "{last:?}");
    }
    assert!(
        errors[0],
        "the missing path's open is not an error: {last:?}"
    );
    let all = functions(&globs);
    let inside: Vec<String> = all
        .iter()
        .filter(|f| *f != "do_sys_openat2")
        .cloned()
        .collect();
    let named = errors_mode_origin("do_sys_openat2", &inside, &workload);
    let origin = error_origin(last, errors);
    println!("-ENOENT first appears in {origin} (function_graph), {named} (calls)");
    assert_eq!(named, origin);
    // Return values: against the kernel's own kprobe and kretprobe events
    // (tracefs text), the entries and returns of the missing path's open.
    let ours = calls_last_steps("do_sys_openat2", &inside, &workload);
    let kernels = kprobe_events_last_steps("do_sys_openat2", &all, &workload);
    assert_eq!(
        ours, kernels,
        "the open's calls and return values differ from kprobe_events'"
    );
    assert_eq!(ours.last().and_then(|s| s.1), Some(enoent));
    println!(
        "the open's {} entries and returns, values included, as kprobe_events gives them",
        ours.len()
    );
}

/// One entry (`None`) or return (its value's low 32 bits) of a function.
type Step = (String, Option<u32>);

/// The last tree of `calls --json` over `workload`, as its entries and
/// returns in time order.
fn calls_last_steps(root: &str, inside: &[String], workload: &[&str]) -> Vec<Step> {
    let mut cmd = Command::new(kprobe_perf_bin());
    cmd.args(["calls", "--json", "-e", root]);
    for f in inside {
        cmd.args(["--allow", f]);
    }
    let out = cmd.arg("--").args(workload).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(&l[l.find("{\"")?..]).ok())
        .unwrap();
    let mut timed: Vec<(u64, u8, Step)> = Vec::new();
    for f in last["frames"].as_array().unwrap() {
        let name = f["function"].as_str().unwrap().to_string();
        timed.push((f["entry_ns"].as_u64().unwrap(), 0, (name.clone(), None)));
        let ret = f["ret"].as_i64().map(|r| class(r as u64));
        timed.push((f["return_ns"].as_u64().unwrap(), 1, (name, ret)));
    }
    timed.sort_by_key(|t| (t.0, t.1));
    timed.into_iter().map(|t| t.2).collect()
}

/// The kernel's own kprobe and kretprobe events (defined in
/// kprobe_events, read as trace text) on `all` over `workload`: the
/// entries and returns of the last call of `root`, in order.
fn kprobe_events_last_steps(root: &str, all: &[String], workload: &[&str]) -> Vec<Step> {
    write("tracing_on", "0");
    write("current_tracer", "nop");
    write("trace", "");
    let mut defs = String::new();
    for (i, f) in all.iter().enumerate() {
        defs.push_str(&format!(
            "p:kpfo/e{i} {f}\nr:kpfo/r{i} {f} ret=$retval:x64\n"
        ));
    }
    fs::OpenOptions::new()
        .append(true)
        .open(format!("{TRACING}/kprobe_events"))
        .and_then(|mut k| std::io::Write::write_all(&mut k, defs.as_bytes()))
        .unwrap();
    write("events/kpfo/enable", "1");
    let script =
        format!("echo $$ > {TRACING}/set_event_pid; echo 1 > {TRACING}/tracing_on; exec \"$@\"");
    let _ = Command::new("/bin/sh")
        .args(["-c", &script, "sh"])
        .args(workload)
        .status();
    write("tracing_on", "0");
    let text = fs::read_to_string(format!("{TRACING}/trace")).unwrap();
    write("events/kpfo/enable", "0");
    write("set_event_pid", "");
    let removal: String = (0..all.len())
        .map(|i| format!("-:kpfo/e{i}\n-:kpfo/r{i}\n"))
        .collect();
    let _ = fs::OpenOptions::new()
        .append(true)
        .open(format!("{TRACING}/kprobe_events"))
        .and_then(|mut k| std::io::Write::write_all(&mut k, removal.as_bytes()));
    let mut steps: Vec<Step> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let parts: Vec<&str> = line.split(": ").collect();
        let Some(ev) = parts.get(1) else { continue };
        let (entry, idx) = match ev.split_at(1) {
            ("e", n) => (true, n.parse::<usize>()),
            ("r", n) => (false, n.parse::<usize>()),
            _ => continue,
        };
        let Some(name) = idx.ok().and_then(|i| all.get(i)) else {
            continue;
        };
        let ret = (!entry).then(|| {
            let v = line.rsplit("ret=").next().unwrap_or("").trim();
            class(u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or(0))
        });
        steps.push((name.clone(), ret));
    }
    let start = steps
        .iter()
        .rposition(|s| s.0 == root && s.1.is_none())
        .unwrap_or_else(|| panic!("no entry of {root} in the trace:\n{text}"));
    let end = steps[start..]
        .iter()
        .position(|s| s.0 == root && s.1.is_some())
        .map_or(steps.len(), |e| start + e + 1);
    steps[start..end].to_vec()
}

/// Where function_graph's tree shows the error arose, by the rule of
/// the errors mode: from the root, the last callee returning an error,
/// down (`errors`: which frames' values are errors by their BTF type).
fn error_origin(tree: &[Frame], errors: &[bool]) -> String {
    let mut at = 0;
    loop {
        let depth = tree[at].0;
        let mut next = None;
        for (j, f) in tree.iter().enumerate().skip(at + 1) {
            if f.0 <= depth {
                break;
            }
            if f.0 == depth + 1 && errors[j] {
                next = Some(j);
            }
        }
        match next {
            Some(j) => at = j,
            None => return tree[at].1.clone(),
        }
    }
}

#[test]
fn read_of_a_file_matches_function_graph() {
    if !kprobes_available("read_of_a_file_matches_function_graph") {
        return;
    }
    let path = "/tmp/kpf-calls-read";
    let mut text = vec![b'x'; 9999];
    text.push(b'\n');
    fs::write(path, text).unwrap();
    let globs = [
        "vfs_read",
        "rw_verify_area",
        "shmem_file_read_iter",
        "touch_atime",
        "filemap_read",
    ];
    same_trees("vfs_read", &globs, &["/bin/cat", path]);
}

#[test]
fn tcp_connect_over_loopback_matches_function_graph() {
    if !kprobes_available("tcp_connect_over_loopback_matches_function_graph") {
        return;
    }
    // The VM starts with the loopback interface down.
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status();
    if !up.is_ok_and(|s| s.success()) {
        let up = Command::new("busybox")
            .args(["ifconfig", "lo", "up"])
            .status();
        assert!(up.is_ok_and(|s| s.success()), "cannot bring lo up");
    }
    let globs = [
        "__sys_connect",
        "inet_stream_connect",
        "__inet_stream_connect",
        "tcp_v4_connect",
        "tcp_connect",
        "inet_hash_connect",
    ];
    same_trees(
        "__sys_connect",
        &globs,
        &[env!("CARGO_BIN_EXE_tcp_connect")],
    );
}

/// A root call already running when the recording starts (a `cat`
/// blocked reading its stdin) has no return event (a return probe takes
/// over the return address at the entry, which came before it was
/// armed): it is not printed, nor are its callees made after the start
/// shown as a tree; the next call of the same root is whole.
#[test]
fn a_call_running_at_the_start_makes_no_wrong_tree() {
    use std::io::Write;
    use std::process::Stdio;
    if !kprobes_available("a_call_running_at_the_start_makes_no_wrong_tree") {
        return;
    }
    let mut cat = Command::new("/bin/cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // cat is in vfs_read, waiting for its input.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let calls = Command::new(kprobe_perf_bin())
        .args([
            "calls",
            "--json",
            "-e",
            "vfs_read",
            "--allow",
            "rw_verify_area",
        ])
        .args(["-p", &cat.id().to_string(), "-d", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kprobe_perf_tests::wait_until_recording(calls.id(), 2);
    let mut stdin = cat.stdin.take().unwrap();
    stdin.write_all(b"x\n").unwrap();
    drop(stdin);
    cat.wait().unwrap();
    let out = calls.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let trees: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // The read that saw the end of the input, whole; nothing else.
    assert_eq!(trees.len(), 1, "{trees:?}\n{stderr}");
    let tree = &trees[0];
    assert_eq!(tree["complete"], true, "{tree}");
    assert_eq!(tree["ret"], 0, "{tree}");
    let names: Vec<&str> = tree["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["vfs_read", "rw_verify_area"], "{tree}");
}

/// `calls -o FILE` writes perf.data beside its output, and `calls -i
/// FILE` prints the same trees from it, byte for byte (JSON Lines with
/// arguments, and the graph of the same file).
#[test]
fn a_recorded_file_gives_the_same_trees_again() {
    if !kprobes_available("a_recorded_file_gives_the_same_trees_again") {
        return;
    }
    let file = "/tmp/kpf-calls-replay.data";
    let _ = fs::remove_file(file);
    let workload = [
        "/bin/sh",
        "-c",
        "cat /etc/hostname > /dev/null; cat /tmp/kpf-calls-missing 2>/dev/null; true",
    ];
    let traced = [
        "-e",
        "do_sys_openat2",
        "--allow",
        "getname_flags*",
        "--allow",
        "do_filp_open",
        "--allow",
        "path_openat",
        "--allow",
        "lookup_fast",
    ];
    let run = |args: &[&str]| {
        let out = Command::new(kprobe_perf_bin())
            .arg("calls")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "calls {args:?}: {stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
    };
    let mut live_args = vec!["--json", "--args", "-o", file];
    live_args.extend(traced);
    live_args.push("--");
    live_args.extend(workload);
    let (live, stderr) = run(&live_args);
    assert!(stderr.contains(", 0 lost"), "{stderr}");
    let trees = live.lines().count();
    assert!(trees >= 2, "{live}\n{stderr}");
    assert!(live.contains("\"error\":\"-ENOENT\""), "{live}");
    let (replayed, stderr) = run(&["--json", "--args", "-i", file]);
    assert_eq!(replayed, live, "the replay of {file} differs: {stderr}");
    let (graph, _) = run(&["--graph", "-i", file]);
    assert_eq!(
        graph.matches("| do_sys_openat2() {").count(),
        trees,
        "{graph}"
    );
    println!("{trees} trees, the same from {file}");
    let _ = fs::remove_file(file);
}

/// `--deny GLOB` leaves the functions it selects out of the attach set:
/// while the workload runs, ftrace's enabled_functions lists the
/// allowed functions and none of the denied ones.
#[test]
fn denied_functions_get_no_probe() {
    if !kprobes_available("denied_functions_get_no_probe") {
        return;
    }
    let denied = functions(&["getname_flags*"]);
    assert!(!denied.is_empty(), "no getname_flags* function to deny");
    let seen = "/tmp/kpf-calls-enabled";
    let _ = fs::remove_file(seen);
    let out = Command::new(kprobe_perf_bin())
        .args(["calls", "-e", "do_sys_openat2", "--allow", "getname*"])
        .args(["--deny", "getname_flags*", "--", "/bin/sh", "-c"])
        .arg(format!("cat {TRACING}/enabled_functions > {seen}"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let enabled: Vec<String> = fs::read_to_string(seen)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    for f in ["do_sys_openat2", "getname"] {
        assert!(
            enabled.iter().any(|e| e == f),
            "{f} not probed: {enabled:?}"
        );
    }
    for f in &denied {
        assert!(
            !enabled.iter().any(|e| e == f),
            "{f} is denied but probed: {enabled:?}"
        );
    }
    println!(
        "denied {denied:?}: not in enabled_functions ({} probed)",
        enabled.len()
    );
    let _ = fs::remove_file(seen);
}
