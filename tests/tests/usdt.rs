//! SDT (USDT) probes, on Debian's python3.11 (8 probes, each with a
//! semaphore). The development hosts have the uprobe PMU and tracefs, so
//! these run natively as well as in the VM.
//!
//! Python 3.11 reaches its `function__entry` probe only while a trace or
//! profile function is set (seen here: without `sys.settrace` a script's
//! own calls fire nothing, with perf's `sdt_python:function__entry` as
//! with kprobe-perf), so the scripts set one.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_tests::{kprobe_perf_bin, perf_event_fds, skip_here, uprobes_available};

const PYTHON: &str = "/usr/bin/python3.11";
const ENTRY: &str = "usdt:/usr/bin/python3.11:python:function__entry";

/// True when python3.11 with its SDT notes is here, and uprobes too.
fn python_here(test: &str) -> bool {
    if !std::path::Path::new(PYTHON).exists() {
        skip_here(
            test,
            "no /usr/bin/python3.11 (Debian 12's python3.11-minimal)",
        );
        return false;
    }
    uprobes_available(test)
}

/// A script in a fresh directory of its own, `tag` naming it (short: the
/// path must fit bpftrace's default string size, 64 bytes).
fn script(tag: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kpu-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("calls.py");
    std::fs::write(&path, text).unwrap();
    path
}

/// fib(3) makes 5 calls, each entering at line 5; the trace function
/// turns Python's function__entry on.
const FIB: &str = "import sys\n\n\n\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\nsys.settrace(lambda *a: None)\nfib(3)\n";

/// `function__entry` with the file and function names (strings fetched
/// by the kernel from the pointers in `%rbp` and `%r12`) and the line
/// (`-4@%eax`, an s32): the script's 5 calls of fib, exactly.
#[test]
fn python_function_entry_prints_file_function_and_line() {
    let test = "python_function_entry_prints_file_function_and_line";
    if !python_here(test) {
        return;
    }
    let path = script("entry", FIB);
    let probe = format!("{ENTRY} file=+0($arg1):ustring func=+0($arg2):ustring line=$arg3");
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", &probe, "--", PYTHON])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(&format!("file=\"{}\"", path.display())))
        .map(|l| l.split_once("(0x").map_or(l, |(_, rest)| rest))
        .collect();
    let want = format!("4f20a1) file=\"{}\" func=\"fib\" line=5", path.display());
    assert_eq!(ours.len(), 5, "{stdout}");
    for l in &ours {
        // The site's address is that of Debian 12's build; elsewhere
        // only the values are compared.
        if l.starts_with("4f20a1)") {
            assert_eq!(*l, want);
        } else {
            assert!(l.ends_with(want.split_once(' ').unwrap().1), "{l}");
        }
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// The u16 semaphore of `function__entry` in process `pid`: the note's
/// file offset of it, mapped through the process's mapping of the file.
fn semaphore(pid: u32) -> u16 {
    use kprobe_perf_symbols::elf::UserBinary;
    let bin = UserBinary::open(std::path::Path::new(PYTHON)).unwrap();
    let probes = bin.sdt_probes().unwrap();
    let entry = probes.iter().find(|p| p.name == "function__entry").unwrap();
    let file_off = entry.semaphore_offset.unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let addr = maps
        .lines()
        .filter(|l| l.ends_with(PYTHON))
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (range, off) = (f.next()?, f.nth(1)?);
            let (start, end) = range.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            let off = u64::from_str_radix(off, 16).ok()?;
            (file_off >= off && file_off - off < end - start).then(|| start + file_off - off)
        })
        .unwrap_or_else(|| panic!("no mapping of {PYTHON} holds 0x{file_off:x}:\n{maps}"));
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut buf = [0u8; 2];
    use std::io::{Seek, SeekFrom};
    mem.seek(SeekFrom::Start(addr)).unwrap();
    mem.read_exact(&mut buf).unwrap();
    u16::from_ne_bytes(buf)
}

/// A python3.11 that sleeps `secs`, returned once the interpreter runs
/// its script: it says so on stdout. (`spawn` returns when the exec has
/// begun, before the kernel has mapped the new image: a reader of
/// `/proc/PID/maps` then may see only the stack.)
fn sleeping_python(secs: u32) -> Child {
    use std::io::BufRead;
    let mut py = Command::new(PYTHON)
        .args([
            "-c",
            &format!("import time; print('ready', flush=True); time.sleep({secs})"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = py.stdout.take().unwrap();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n", "python3.11 did not start");
    py
}

/// Polls `f` every 20 ms until it holds or `limit` passes.
fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A recorder of `function__entry` (`route` its target arguments).
fn recorder(route: &[&str]) -> Child {
    Command::new(kprobe_perf_bin())
        .arg("record")
        .args(route)
        .args(["-e", ENTRY])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The semaphore of a running python3.11 reads 0 before any recording,
/// 1 or more while one runs (system-wide: the uprobe PMU with the
/// counter in `config`; with `-p`: uprobe_events with `PATH:OFFS(CTR)`),
/// and 0 again after it ends, whether by SIGINT or by SIGKILL.
#[test]
fn python_semaphore_counts_only_while_recording() {
    let test = "python_semaphore_counts_only_while_recording";
    if !python_here(test) {
        return;
    }
    let mut py = sleeping_python(300);
    let pid = py.id();
    assert_eq!(semaphore(pid), 0, "before any recording");
    let pid_arg = pid.to_string();
    for (route, how) in [
        (vec!["-a"], "SIGINT"),
        (vec!["-a"], "SIGKILL"),
        (vec!["-p", &pid_arg], "SIGINT"),
        (vec!["-p", &pid_arg], "SIGKILL"),
    ] {
        let mut rec = recorder(&route);
        let on = wait_for(Duration::from_secs(60), || semaphore(pid) >= 1);
        let during = semaphore(pid);
        assert!(
            on.is_some(),
            "{route:?}: the semaphore stayed {during} for 60 s of recording ({} perf events)",
            perf_event_fds(rec.id())
        );
        if route[0] == "-p" {
            // Through uprobe_events, with the kernel's PATH:OFFS(CTR).
            let defined =
                std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
            let ours = format!("p:kprobe_perf_{}_", rec.id());
            let line = defined.lines().find(|l| l.starts_with(&ours));
            assert!(
                line.is_some_and(|l| l.contains(&format!("{PYTHON}:0x")) && l.contains(")")),
                "{defined}"
            );
        }
        let signal = if how == "SIGINT" { "-INT" } else { "-KILL" };
        let sent = Command::new("kill")
            .args([signal, &rec.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let rec_id = rec.id();
        rec.wait().unwrap();
        let group = format!("p:kprobe_perf_{rec_id}_");
        let off = wait_for(Duration::from_secs(5), || semaphore(pid) == 0);
        // Nothing left in uprobe_events either (the guardian's part after
        // SIGKILL).
        let removed = wait_for(Duration::from_secs(2), || {
            !std::fs::read_to_string("/sys/kernel/tracing/uprobe_events")
                .unwrap_or_default()
                .contains(&group)
        });
        assert!(
            removed.is_some(),
            "{route:?}: {group} still defined 2 s after {how}"
        );
        println!("{route:?} {how}: semaphore {during} while recording, 0 after {off:?}");
        assert!(
            off.is_some(),
            "{route:?}: the semaphore still reads {} 5 s after {how}",
            semaphore(pid)
        );
    }
    let _ = py.kill();
    let _ = py.wait();
}

/// Memory and string fetches in a plain uprobe go through uprobe_events:
/// `fopen64`'s path (a user string from `%di`), the same path's first
/// bytes as an array, and the mode through `$arg2`, exactly, for a call
/// Python makes through ctypes (glibc's `fopen` is `fopen64`).
#[test]
fn uprobe_strings_and_arrays_from_memory() {
    let test = "uprobe_strings_and_arrays_from_memory";
    if !python_here(test) {
        return;
    }
    let Some(libc) = kprobe_perf_tests::libc_path() else {
        return skip_here(test, "no libc mapped in this test");
    };
    let target = std::env::temp_dir().join(format!("kprobe-perf-fopen-{}", std::process::id()));
    let probe =
        format!("p:{libc}:fopen64 path=+0(%di):ustring head=+0(%di):u8[4] mode=+0($arg2):ustring");
    let call = format!(
        "import ctypes; ctypes.CDLL(None).fopen(b'{}', b'r')",
        target.display()
    );
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", &probe, "--", PYTHON, "-c", &call])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target.display().to_string();
    let head: Vec<String> = path.bytes().take(4).map(|b| b.to_string()).collect();
    // "/tmp" is {47,116,109,112}.
    let want = format!("path=\"{path}\" head={{{}}} mode=\"r\"", head.join(","));
    let hits: Vec<&str> = stdout.lines().filter(|l| l.ends_with(&want)).collect();
    assert_eq!(hits.len(), 1, "{want}\n{stdout}");
}

/// `gc__start`'s argument is a memory operand (`-4@112(%rsp)` in Debian's
/// build): the generation of each collection, read by the kernel from the
/// stack. With automatic collection off, `gc.collect(1)` and
/// `gc.collect(0)` are seen in order, then only the interpreter's final
/// full collections (generation 2).
#[test]
fn python_gc_start_reads_the_generation_from_memory() {
    let test = "python_gc_start_reads_the_generation_from_memory";
    if !python_here(test) {
        return;
    }
    let out = Command::new(kprobe_perf_bin())
        .args([
            "record",
            "-e",
            "usdt:/usr/bin/python3.11:python:gc__start gen=$arg1",
            "--",
            PYTHON,
            "-S",
            "-c",
            "import gc; gc.disable(); gc.collect(1); gc.collect(0)",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let gens: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.rsplit_once(" gen=").map(|(_, g)| g))
        .collect();
    let ours = gens
        .iter()
        .position(|g| *g == "1")
        .unwrap_or_else(|| panic!("no gc.collect(1) in {gens:?}"));
    assert_eq!(gens[ours + 1], "0", "{gens:?}");
    assert!(gens[ours + 2..].iter().all(|g| *g == "2"), "{gens:?}");
}

/// (file, function, line) of each `function__entry` line kprobe-perf
/// printed with `file=`, `func=` and `line=`.
fn our_calls(stdout: &str) -> Vec<(String, String, i64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(" file=\"")?;
            let (file, rest) = rest.split_once("\" func=\"")?;
            let (func, line) = rest.split_once("\" line=")?;
            Some((
                file.to_string(),
                func.to_string(),
                line.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// The same script under kprobe-perf, bpftrace (`usdt:` with `str(arg0)`,
/// `str(arg1)`, `arg2`) and perf (`sdt_python:function__entry`, whose
/// `arg3` is the line): the same sequence of calls, start-up included,
/// and the script's own five calls of fib at line 5.
#[test]
fn python_calls_match_bpftrace_and_perf() {
    let test = "python_calls_match_bpftrace_and_perf";
    if !python_here(test) {
        return;
    }
    let path = script("peers", FIB);
    let probe = format!("{ENTRY} file=+0($arg1):ustring func=+0($arg2):ustring line=$arg3");
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-e", &probe, "--", PYTHON])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let ours = our_calls(&String::from_utf8_lossy(&out.stdout));
    let script_calls: Vec<_> = ours
        .iter()
        .filter(|c| c.0 == path.display().to_string())
        .collect();
    assert_eq!(script_calls.len(), 5, "{ours:?}");
    assert!(script_calls.iter().all(|c| c.1 == "fib" && c.2 == 5));

    if kprobe_perf_tests::bpftrace_runs(test) {
        let program = "usdt:/usr/bin/python3.11:python:function__entry /pid == cpid/ { printf(\"%s|%s|%d\\n\", str(arg0), str(arg1), arg2); }";
        let bt = Command::new(kprobe_perf_tests::BPFTRACE)
            .env("HOME", std::env::temp_dir())
            .args(["-e", program, "-c"])
            .arg(format!("{PYTHON} {}", path.display()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&bt.stdout);
        let theirs: Vec<(String, String, i64)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, '|');
                Some((
                    f.next()?.to_string(),
                    f.next()?.to_string(),
                    f.next()?.parse().ok()?,
                ))
            })
            .collect();
        assert_eq!(ours, theirs, "bpftrace printed:\n{text}");
    }

    let Some(perf) = ["/usr/bin/perf", "/usr/sbin/perf"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        return kprobe_perf_tests::skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    // Forced (-f): another test's kprobe-perf may have an event of the
    // same name defined (in its own group) at this moment; perf then
    // names its own function__entry_1, which it says.
    let added = Command::new(perf)
        .args([
            "probe",
            "-f",
            "-x",
            PYTHON,
            "-a",
            "sdt_python:function__entry",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&added.stderr).into_owned();
    assert!(added.status.success(), "perf probe -a failed: {said}");
    let event = said
        .lines()
        .skip_while(|l| !l.starts_with("Added new event"))
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no event named in: {said}"))
        .to_string();
    let event = event.as_str();
    let data = path.with_file_name("perf.data");
    let rec = Command::new(perf)
        .args(["record", "-q", "-e", event, "-o"])
        .arg(&data)
        .args(["--", PYTHON])
        .arg(&path)
        .output()
        .unwrap();
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", event])
        .stderr(Stdio::null())
        .status();
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let script = Command::new(perf)
        .args(["script", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&script.stdout);
    let perf_lines: Vec<i64> = text
        .lines()
        .filter_map(|l| l.rsplit_once(" arg3=")?.1.trim().parse().ok())
        .collect();
    let our_lines: Vec<i64> = ours.iter().map(|c| c.2).collect();
    assert_eq!(our_lines, perf_lines, "perf script printed:\n{text}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// A C++ program that throws `int` three times and a `runtime_error`
/// once, each caught: libstdc++'s `libstdcxx:throw` (no semaphore) fires
/// once per throw, its second operand the thrown type's `std::type_info`,
/// whose name (at +8) is the mangled type; `catch` once per catch.
#[test]
fn libstdcxx_throw_names_each_thrown_type() {
    let test = "libstdcxx_throw_names_each_thrown_type";
    let lib = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";
    if !std::path::Path::new(lib).exists() || !std::path::Path::new("/usr/bin/g++").exists() {
        return skip_here(test, "no libstdc++ or g++ here (apt-get install g++)");
    }
    if !uprobes_available(test) {
        return;
    }
    let src = script("cxx", "");
    let dir = src.parent().unwrap();
    let prog = dir.join("throw");
    std::fs::write(
        dir.join("throw.cc"),
        "#include <stdexcept>\nint main() {\n  int caught = 0;\n  for (int i = 0; i < 3; i++) {\n    try { throw i; } catch (int) { caught++; }\n  }\n  try { throw std::runtime_error(\"x\"); } catch (const std::exception &) { caught++; }\n  return caught == 4 ? 0 : 1;\n}\n",
    )
    .unwrap();
    let built = Command::new("/usr/bin/g++")
        .arg("-o")
        .arg(&prog)
        .arg(dir.join("throw.cc"))
        .status()
        .unwrap();
    assert!(built.success());
    let out = Command::new(kprobe_perf_bin())
        .arg("record")
        .arg("-e")
        .arg(format!(
            "usdt:{lib}:libstdcxx:throw type=+0(+8($arg2)):ustring"
        ))
        .arg("-e")
        .arg(format!("usdt:{lib}:libstdcxx:catch"))
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(": (0x").map(|(head, _)| head))
        .filter_map(|head| head.rsplit_once(' ').map(|(_, ev)| ev))
        .collect();
    assert_eq!(
        events,
        ["throw", "catch", "throw", "catch", "throw", "catch", "throw", "catch"],
        "{stdout}"
    );
    let types: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.rsplit_once(" type=").map(|(_, t)| t))
        .collect();
    assert_eq!(types, ["\"i\"", "\"i\"", "\"i\"", "\"St13runtime_error\""]);
    let _ = std::fs::remove_dir_all(dir);
}

/// `list usdt:BINARY` and `list -p PID PROVIDER:NAME`: the sites of
/// python3.11's probes as `-e` takes them, with their file offsets,
/// semaphores and operands (Debian 12's build: `readelf -n`).
#[test]
fn list_shows_the_sdt_probes_of_a_binary_and_a_process() {
    let test = "list_shows_the_sdt_probes_of_a_binary_and_a_process";
    if !std::path::Path::new(PYTHON).exists() {
        return skip_here(test, "no /usr/bin/python3.11");
    }
    let list = |args: &[&str]| {
        let out = Command::new(kprobe_perf_bin())
            .arg("list")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let all = list(&["usdt:/usr/bin/python3.11"]);
    assert_eq!(all.lines().count(), 8, "{all}");
    assert!(all
        .lines()
        .all(|l| l.starts_with("usdt:/usr/bin/python3.11:python:")));
    let mut py = sleeping_python(60);
    let pid = py.id().to_string();
    let entries = list(&["-p", &pid, "python:function__*"]);
    let _ = py.kill();
    let _ = py.wait();
    let lines: Vec<&str> = entries.lines().collect();
    assert_eq!(lines.len(), 2, "{entries}");
    if all.contains("function__entry  at 0xf20a1") {
        assert_eq!(
            lines,
            [
                "usdt:/usr/bin/python3.11:python:function__entry  at 0xf20a1  semaphore 0x683260  args 8@%rbp 8@%r12 -4@%eax",
                "usdt:/usr/bin/python3.11:python:function__return  at 0xf20d4  semaphore 0x683262  args 8@%rbp 8@%r12 -4@%eax",
            ]
        );
    }
}

/// A program with SDT probes of every operand form `<sys/sdt.h>` makes
/// (the header comes with Debian's systemtap-sdt-dev): registers of 1 to
/// 8 bytes, signed and unsigned (`1@%dil`, `-2@%dx`); globals
/// (`-8@kpf_global(%rip)`, at -O2), stack slots (`-4@-12(%rsp)`,
/// `1@-20(%rbp)` at -O0) and a pointer's target (`-4@(%rax)`); constants
/// (`-4@$5`); and a probe behind a semaphore in a PIE.
const FORMS_C: &str = r#"#include <sys/sdt.h>
#include <stdint.h>
volatile int64_t kpf_global = -1234567890123;
volatile uint16_t kpf_global16 = 65000;
struct pair { int32_t a; uint8_t b; };
void counted(uint8_t b);
__attribute__((noinline)) void work(uint8_t u8, int8_t s8, int16_t s16, uint32_t u32,
                                    int64_t s64, const char *str, struct pair *p) {
    volatile int32_t local = -77;
    STAP_PROBE6(kpf, regs, u8, s8, s16, u32, s64, str);
    STAP_PROBE4(kpf, memory, kpf_global, kpf_global16, p->a, local);
    STAP_PROBE2(kpf, consts, 5, -3);
    counted(p->b);
}
int main(void) {
    struct pair p = { -42, 200 };
    work(250, -5, -300, 4000000000u, -9000000000LL, "hello sdt", &p);
    return 0;
}
"#;

/// The probe behind a semaphore, in a unit of its own (`<sys/sdt.h>`
/// gives every probe of a unit a semaphore, or none).
const COUNTED_C: &str = r#"#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdint.h>
unsigned short kpf_counted_semaphore __attribute__((section(".probes")));
__attribute__((noinline)) void counted(uint8_t b) {
    if (kpf_counted_semaphore)
        STAP_PROBE1(kpf, counted, b);
}
"#;

#[test]
fn every_operand_form_decodes_to_its_exact_value() {
    let test = "every_operand_form_decodes_to_its_exact_value";
    let header = "/usr/include/x86_64-linux-gnu/sys/sdt.h";
    if !std::path::Path::new(header).exists() || !std::path::Path::new("/usr/bin/gcc").exists() {
        return skip_here(
            test,
            "no <sys/sdt.h> or gcc here (apt-get install systemtap-sdt-dev gcc)",
        );
    }
    if !uprobes_available(test) {
        return;
    }
    let dir = script("forms", "").parent().unwrap().to_path_buf();
    std::fs::write(dir.join("forms.c"), FORMS_C).unwrap();
    std::fs::write(dir.join("counted.c"), COUNTED_C).unwrap();
    for opt in ["-O0", "-O2"] {
        let prog = dir.join(format!("forms{opt}"));
        let built = Command::new("/usr/bin/gcc")
            .arg(opt)
            .arg("-o")
            .arg(&prog)
            .arg(dir.join("forms.c"))
            .arg(dir.join("counted.c"))
            .status()
            .unwrap();
        assert!(built.success());
        let p = prog.display();
        let out = Command::new(kprobe_perf_bin())
            .arg("record")
            .arg("-e")
            .arg(format!(
                "usdt:{p}:kpf:regs $arg1 $arg2 $arg3 $arg4 $arg5 s=+0($arg6):ustring"
            ))
            .arg("-e")
            .arg(format!("usdt:{p}:kpf:[mc]*"))
            .arg("--")
            .arg(&prog)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let values: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once(") ").map(|(_, v)| v))
            .collect();
        assert_eq!(
            values,
            [
                "arg1=250 arg2=-5 arg3=-300 arg4=4000000000 arg5=-9000000000 s=\"hello sdt\"",
                "arg1=-1234567890123 arg2=65000 arg3=-42 arg4=-77",
                "arg1=5 arg2=-3",
                "arg1=200",
            ],
            "{opt}:\n{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `record -p PID -e 'usdt:*:PROVIDER:NAME'`: the probes of every file
/// the process maps (here python3.11's own), without naming the binary.
/// A running interpreter calls `tick` (line 2) every 100 ms with a trace
/// function set; one second of recording sees only those calls.
#[test]
fn processes_probe_the_sdt_probes_of_their_mapped_files() {
    let test = "processes_probe_the_sdt_probes_of_their_mapped_files";
    if !python_here(test) {
        return;
    }
    let mut py = Command::new(PYTHON)
        .args([
            "-c",
            "import sys, time\ndef tick(n):\n    return n\nsys.settrace(lambda *a: None)\nprint('ready', flush=True)\nfor i in range(300):\n    tick(i); time.sleep(0.1)\n",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = py.id().to_string();
    // Past its start-up (whose own calls would show too), into the loop.
    let mut ready = [0u8; 6];
    py.stdout.as_mut().unwrap().read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-p", &pid, "-d", "2", "-e"])
        .arg("usdt:*:python:function__entry f=+0($arg2):ustring line=$arg3")
        .output()
        .unwrap();
    let _ = py.kill();
    let _ = py.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(") ").map(|(_, v)| v))
        .collect();
    // About 10 a second; at least a few whatever the load.
    assert!(calls.len() >= 3, "{stdout}");
    assert!(calls.iter().all(|c| *c == "f=\"tick\" line=2"), "{stdout}");
}

/// `latency FUNC --end PROBE` pairs two SDT probes per thread, as calls
/// nest: every `function__entry` Python reports (5 calls of fib, and the
/// functions it runs at exit) ends at its `function__return`: as many
/// paired calls as entries, none dropped or unreturned. Returns of frames
/// entered before the trace function was set (Python reports no entry
/// for them) are counted apart, as unpaired.
#[test]
fn latency_pairs_python_function_entry_and_return() {
    let test = "latency_pairs_python_function_entry_and_return";
    if !python_here(test) {
        return;
    }
    let path = script("lat", FIB);
    let ret = ENTRY.replace("function__entry", "function__return");
    let out = Command::new(kprobe_perf_bin())
        .args(["latency", ENTRY, "--end", &ret, "--", PYTHON])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let figure = |after: &str, before: &str| -> u64 {
        stderr
            .lines()
            .find_map(|l| {
                let (head, _) = l.split_once(before)?;
                head.rsplit(after).next()?.trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("no {before:?} in {stderr}"))
    };
    let paired = figure(": ", " paired calls");
    let entries = figure("function__entry: ", "; function__return");
    assert!(paired >= 5, "{stderr}");
    assert_eq!(paired, entries, "{stderr}");
    assert!(
        stderr.contains(" 0 dropped entries, 0 unreturned calls, 0 events lost"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
