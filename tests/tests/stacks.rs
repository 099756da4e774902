//! Callchains (`-g` / `--call-graph`): the kernel stack of a syscall's
//! probe, a kretprobe's stack starting at its caller, a uprobe's user
//! stack through a known chain of functions, Debian's `perf script`
//! showing the same frames from a `-o` file, and the folded stacks and
//! flame graph made from them.

use std::path::{Path, PathBuf};
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip, uprobes_available};
use serde_json::Value;

/// One frame of a `--json` event's `callchain`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    address: u64,
    symbol: Option<String>,
    offset: u64,
    object: String,
}

impl Frame {
    fn name(&self) -> &str {
        self.symbol.as_deref().unwrap_or("[unknown]")
    }
}

/// Runs `kprobe-perf record ARGS` and returns its stdout; it must exit 0.
fn record(args: &[&str]) -> String {
    let out = Command::new(kprobe_perf_bin())
        .arg("record")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "record {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The events of JSON Lines output (the summary, and what the workload
/// printed, left out).
fn events(json: &str) -> Vec<Value> {
    json.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "event")
        .collect()
}

fn frames(event: &Value) -> Vec<Frame> {
    event["callchain"]
        .as_array()
        .unwrap_or_else(|| panic!("no callchain in {event}"))
        .iter()
        .map(|f| Frame {
            address: f["address"].as_u64().unwrap(),
            symbol: f["symbol"].as_str().map(String::from),
            offset: f["offset"].as_u64().unwrap(),
            object: f["object"].as_str().unwrap().to_string(),
        })
        .collect()
}

fn names(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(Frame::name).collect()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kprobe-perf-stacks-{}-{name}", std::process::id()))
}

/// The kernel stack of `do_sys_openat2` in `cat FILE`: the probed
/// function itself (ip = entry + 1), then `__x64_sys_openat`, then,
/// further out, `do_syscall_64`, all in the kernel's object.
#[test]
fn openat2_stack_has_the_syscall_path() {
    if !kprobes_available("openat2_stack_has_the_syscall_path") {
        return;
    }
    let out = record(&[
        "--json",
        "--call-graph",
        "kernel",
        "-e",
        "p:do_sys_openat2",
        "--",
        "cat",
        "/etc/hostname",
    ]);
    let events: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["comm"] == "cat")
        .collect();
    // ld.so.cache, libc.so.6, /etc/hostname at least.
    assert!(events.len() >= 3, "{out}");
    for e in &events {
        let f = frames(e);
        println!("{}", names(&f).join(" <- "));
        assert_eq!(f[0].name(), "do_sys_openat2", "{f:?}");
        assert_eq!(f[0].offset, 1, "the int3/ftrace ip: {f:?}");
        assert_eq!(f[0].object, "[kernel.kallsyms]");
        let n = names(&f);
        let sys = n.iter().position(|&s| s == "__x64_sys_openat");
        let syscall = n.iter().position(|&s| s == "do_syscall_64");
        assert!(
            matches!((sys, syscall), (Some(a), Some(b)) if a == 1 && b > a),
            "__x64_sys_openat right after do_sys_openat2, then do_syscall_64: {n:?}"
        );
        // --call-graph kernel: no user frame.
        assert!(
            f.iter().all(|f| f.address >= 0xffff_0000_0000_0000),
            "{f:?}"
        );
    }
}

/// A kretprobe's stack starts at its function's caller (the return
/// address the event reports), never at the kernel's return trampoline.
#[test]
fn kretprobe_stack_starts_at_the_caller() {
    if !kprobes_available("kretprobe_stack_starts_at_the_caller") {
        return;
    }
    let out = record(&[
        "--json",
        "--call-graph",
        "kernel",
        // A kprobe on the same function too: the case where the raw record
        // holds the trampoline.
        "-e",
        "p:do_sys_openat2",
        "-e",
        "r:do_sys_openat2 ret=$retval",
        "--",
        "cat",
        "/etc/hostname",
    ]);
    let rets: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["comm"] == "cat" && e.get("ret_addr").is_some())
        .collect();
    assert!(rets.len() >= 3, "{out}");
    for e in &rets {
        let f = frames(e);
        println!("{}", names(&f).join(" <- "));
        assert_eq!(
            f[0].address,
            e["ret_addr"].as_u64().unwrap(),
            "the first frame is the return address: {e}"
        );
        assert_eq!(f[0].name(), "__x64_sys_openat", "{f:?}");
        assert!(names(&f).iter().all(|n| !n.contains("trampoline")), "{f:?}");
        assert!(names(&f).contains(&"do_syscall_64"), "{f:?}");
    }
}

/// The uprobe at `kpf_stack_leaf+4` (after its prologue) in the
/// `stack_chain` workload: its user stack is leaf, inner, middle, outer,
/// at the exact return offsets, named from the binary's symbol table.
#[test]
fn uprobe_stack_has_its_callers() {
    if !uprobes_available("uprobe_stack_has_its_callers") {
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        return skip(
            "uprobe_stack_has_its_callers",
            "the workload is x86_64 assembly",
        );
    }
    let bin = env!("CARGO_BIN_EXE_stack_chain");
    let probe = format!("p:{bin}:kpf_stack_leaf+4");
    let out = record(&[
        "--json",
        "--call-graph",
        "user",
        "-e",
        &probe,
        "--",
        bin,
        "3",
    ]);
    let events = events(&out);
    assert_eq!(events.len(), 3, "{out}");
    for e in &events {
        let f = frames(e);
        println!("{}", names(&f).join(" <- "));
        let top: Vec<(&str, u64)> = f.iter().take(4).map(|f| (f.name(), f.offset)).collect();
        assert_eq!(
            top,
            vec![
                ("kpf_stack_leaf", 4),
                ("kpf_stack_inner", 9),
                ("kpf_stack_middle", 9),
                ("kpf_stack_outer", 9),
            ],
            "{f:?}"
        );
        assert!(f.iter().take(4).all(|f| f.object == bin), "{f:?}");
    }
}

/// One sample of `perf script`: its frames as (address, symbol+offset).
fn perf_samples(file: &Path) -> Vec<Vec<(u64, String)>> {
    let out = Command::new("perf")
        .args(["script", "-F", "ip,sym,symoff", "-i"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut samples = Vec::new();
    let mut cur: Vec<(u64, String)> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            if !cur.is_empty() {
                samples.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let mut f = t.splitn(2, ' ');
        let (Some(addr), Some(sym)) = (f.next(), f.next()) else {
            panic!("perf script line: {line}");
        };
        cur.push((
            u64::from_str_radix(addr, 16).unwrap_or_else(|_| panic!("address in {line}")),
            sym.trim().to_string(),
        ));
    }
    if !cur.is_empty() {
        samples.push(cur);
    }
    samples
}

/// `perf script` on a `-o` file shows, sample by sample, the frames this
/// run printed: the same kernel addresses and names, and the same names
/// and offsets for the workload's user frames.
#[test]
fn perf_script_shows_the_same_frames() {
    if !kprobes_available("perf_script_shows_the_same_frames") {
        return;
    }
    if !Path::new("/usr/bin/perf").exists() || !cfg!(target_arch = "x86_64") {
        return skip(
            "perf_script_shows_the_same_frames",
            "needs /usr/bin/perf (apt-get install linux-perf) and x86_64",
        );
    }
    let bin = env!("CARGO_BIN_EXE_stack_chain");
    let file = temp("perf.data");
    let probe = format!("p:{bin}:kpf_stack_leaf+4");
    let out = record(&[
        "--json",
        "-g",
        "-o",
        file.to_str().unwrap(),
        "-e",
        "p:do_sys_openat2",
        "-e",
        "r:do_sys_openat2 ret=$retval",
        "-e",
        &probe,
        "--",
        bin,
        "2",
    ]);
    let ours: Vec<Vec<Frame>> = events(&out).iter().map(frames).collect();
    let theirs = perf_samples(&file);
    // The text lines too, from both replays of the file: our frame lines
    // are perf script's default ones (user addresses aside, which perf
    // prints relative to their object).
    let text_frames = |out: Vec<u8>| -> Vec<String> {
        String::from_utf8(out)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with('\t'))
            .filter(|l| l.contains("([kernel.kallsyms])") || l.contains(" kpf_stack_"))
            .map(|l| match l.contains("([kernel.kallsyms])") {
                true => l.to_string(),
                false => l.trim().split_once(' ').unwrap().1.to_string(),
            })
            .collect()
    };
    let perf_text = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(&file)
        .output()
        .unwrap();
    let our_text = Command::new(kprobe_perf_bin())
        .args(["script", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(our_text.status.success());
    let (ours_t, perf_t) = (text_frames(our_text.stdout), text_frames(perf_text.stdout));
    assert!(ours_t.len() >= 16, "{ours_t:?}");
    assert_eq!(ours_t, perf_t);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(ours.len(), theirs.len(), "samples: {out}\nperf: {theirs:?}");
    let mut user_frames = 0;
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(o.len(), t.len(), "sample {i}: ours {o:?}\nperf's {t:?}");
        for (a, (addr, sym)) in o.iter().zip(t) {
            let ours_sym = format!("{}+0x{:x}", a.name(), a.offset);
            if a.address >= 0xffff_0000_0000_0000 {
                assert_eq!(
                    (a.address, ours_sym.as_str()),
                    (*addr, sym.as_str()),
                    "sample {i}: ours {o:?}\nperf's {t:?}"
                );
            } else if a.name().starts_with("kpf_stack_") {
                user_frames += 1;
                assert_eq!(ours_sym, *sym, "sample {i}: ours {o:?}\nperf's {t:?}");
            }
        }
    }
    // Two calls, four frames of the chain each.
    assert_eq!(user_frames, 8, "{ours:?}");
}

/// `--stacks-folded` counts every event once (the counts sum to the
/// events printed), `script -i FILE --stacks-folded` gives the same
/// lines, and `--flamegraph` writes well-formed SVG naming the probed
/// function's callers.
#[test]
fn folded_stacks_and_flame_graph() {
    if !kprobes_available("folded_stacks_and_flame_graph") {
        return;
    }
    let (folded, svg, data) = (temp("folded"), temp("flame.svg"), temp("fold.data"));
    let (folded2, svg2) = (temp("folded2"), temp("flame2.svg"));
    let out = record(&[
        "--json",
        "--call-graph",
        "kernel",
        "--stacks-folded",
        folded.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
        "-o",
        data.to_str().unwrap(),
        "-e",
        "p:do_sys_openat2",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3 4 5; do cat /etc/hostname >/dev/null; done",
    ]);
    let n = events(&out).len();
    assert!(n >= 10, "{out}");
    let live = out.clone();
    let text = std::fs::read_to_string(&folded).unwrap();
    println!("{text}");
    let mut sum = 0;
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        sum += count.parse::<usize>().unwrap();
        let parts: Vec<&str> = stack.split(';').collect();
        assert!(["sh", "cat"].contains(&parts[0]), "comm first: {line}");
        assert_eq!(parts.last(), Some(&"do_sys_openat2"), "innermost: {line}");
    }
    assert_eq!(sum, n, "the counts sum to the events");
    assert!(
        text.lines().any(|l| l.starts_with("cat;")
            && l.contains(";do_syscall_64;__x64_sys_openat;do_sys_openat2 ")),
        "{text}"
    );
    check_svg(&svg);

    let out = Command::new(kprobe_perf_bin())
        .args(["script", "-i"])
        .arg(&data)
        .arg("--stacks-folded")
        .arg(&folded2)
        .arg("--flamegraph")
        .arg(&svg2)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&folded2).unwrap(), text);
    check_svg(&svg2);
    // The replay prints each event and its frames as the recording did.
    let replayed = Command::new(kprobe_perf_bin())
        .args(["script", "--json", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(replayed.stdout).unwrap(), live);
    // An existing file is moved aside as -o does, never overwritten.
    let again = Command::new(kprobe_perf_bin())
        .args(["script", "-i"])
        .arg(&data)
        .arg("--stacks-folded")
        .arg(&folded2)
        .output()
        .unwrap();
    assert!(again.status.success());
    let old = PathBuf::from(format!("{}.old", folded2.display()));
    assert_eq!(std::fs::read_to_string(&old).unwrap(), text);
    for p in [&folded, &svg, &data, &folded2, &svg2, &old] {
        let _ = std::fs::remove_file(p);
    }
}

/// The SVG parses as XML to its end, and its text names the callers.
fn check_svg(path: &Path) {
    use quick_xml::events::Event;
    let xml = std::fs::read_to_string(path).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let mut titles = Vec::new();
    let mut in_title = false;
    loop {
        match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(Event::Start(s)) => in_title = s.name().as_ref() == b"title",
            Ok(Event::Text(t)) if in_title => {
                titles.push(String::from_utf8_lossy(t.as_ref()).into_owned());
            }
            Ok(_) => {}
            Err(e) => panic!(
                "{} is not well-formed XML at {}: {e}",
                path.display(),
                reader.buffer_position()
            ),
        }
    }
    for name in ["do_sys_openat2", "__x64_sys_openat", "do_syscall_64"] {
        assert!(
            titles.iter().any(|t| t.starts_with(name)),
            "{name} in the flame graph's boxes: {titles:?}"
        );
    }
}

/// Frames in modules are named from kallsyms with `[MODULE]` as their
/// object: the VM's root file system is 9p, so reading a file goes
/// through `p9_client_rpc` (module 9pnet) from `v9fs_*` (module 9p).
/// perf script on the `-o` file shows the same addresses (it names
/// module functions, and keeps them in their modules, only where it
/// finds the module files under /lib/modules, which the VM's root file
/// system, the host's, lacks: there it gives the first sample's module
/// frames their module and later ones `[unknown]`).
#[test]
fn module_frames_are_named() {
    if !kprobes_available("module_frames_are_named") {
        return;
    }
    if !Path::new("/sys/module/9pnet").exists() {
        return skip(
            "module_frames_are_named",
            "module 9pnet is not loaded (the VM's root is 9p)",
        );
    }
    let file = temp("mod.data");
    let out = record(&[
        "--json",
        "--call-graph",
        "kernel",
        "-o",
        file.to_str().unwrap(),
        "-e",
        "p:9pnet:p9_client_rpc",
        "--",
        "cat",
        "/etc/hostname",
    ]);
    let ours: Vec<Vec<Frame>> = events(&out).iter().map(frames).collect();
    assert!(!ours.is_empty(), "{out}");
    for f in &ours {
        assert_eq!(
            (f[0].name(), f[0].offset, f[0].object.as_str()),
            ("p9_client_rpc", 1, "[9pnet]"),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|f| f.object == "[9p]" && f.name().starts_with("v9fs_")),
            "a v9fs_ caller in module 9p: {f:?}"
        );
    }
    if Path::new("/usr/bin/perf").exists() {
        let perf = Command::new("perf")
            .args(["script", "-F", "ip", "-i"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(perf.status.success());
        let theirs: Vec<String> = String::from_utf8(perf.stdout)
            .unwrap()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        let ours_lines: Vec<String> = ours
            .iter()
            .flatten()
            .map(|f| format!("{:x}", f.address))
            .collect();
        assert_eq!(ours_lines, theirs);
    }
    std::fs::remove_file(&file).unwrap();
}
