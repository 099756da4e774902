//! Hostile and mistaken inputs: each is refused with one `kprobe-perf: `
//! line on stderr and exit status 1, within 10 s and a 2 GiB address
//! space, with no panic. Every input here is refused before a probe is
//! opened, so the test needs no kprobes and runs on any host.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kprobe-perf");
/// The address-space limit of each run.
const ADDRESS_SPACE: u64 = 2 << 30;
const TIME_LIMIT: Duration = Duration::from_secs(10);

/// Files and directories the inputs point at.
struct Fixtures {
    dir: PathBuf,
    fifo: PathBuf,
    not_perf: PathBuf,
    short_perf: PathBuf,
    big: PathBuf,
}

impl Fixtures {
    fn new() -> Fixtures {
        let dir =
            std::env::temp_dir().join(format!("kprobe-perf-bad-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success(), "mkfifo {}", fifo.display());
        let not_perf = dir.join("not-perf.data");
        std::fs::write(&not_perf, "this is not a perf.data file\n".repeat(8)).unwrap();
        // 3 GiB of nothing (sparse): more than a 2 GiB address space holds.
        let big = dir.join("big");
        File::create(&big).unwrap().set_len(3 << 30).unwrap();
        let short_perf = dir.join("short.data");
        std::fs::write(&short_perf, b"PERFILE2\x68\0\0\0").unwrap();
        Fixtures {
            dir,
            fifo,
            not_perf,
            short_perf,
            big,
        }
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one run printed and how it ended.
struct Outcome {
    /// The exit status; `None` when it was killed at the time limit.
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs kprobe-perf with `args` under the address-space limit (prlimit)
/// and the time limit, its output in files so a full pipe cannot stall it.
fn run(args: &[String], out_dir: &Path, n: usize) -> Outcome {
    let out = out_dir.join(format!("out-{n}"));
    let err = out_dir.join(format!("err-{n}"));
    let mut child = Command::new("prlimit")
        .arg(format!("--as={ADDRESS_SPACE}"))
        .arg("--")
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .env("RUST_BACKTRACE", "1")
        .spawn()
        .expect("running prlimit (util-linux)");
    let start = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > TIME_LIMIT {
            // prlimit execs kprobe-perf: this is its pid.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome {
        code,
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    }
}

/// The table: arguments, and a phrase the error must contain.
fn table(f: &Fixtures) -> Vec<(Vec<String>, &'static str)> {
    let bin = BIN;
    let dir = f.dir.display().to_string();
    let fifo = f.fifo.display().to_string();
    let not_perf = f.not_perf.display().to_string();
    let short_perf = f.short_perf.display().to_string();
    let big = f.big.display().to_string();
    let pid_max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(4_194_304);
    let no_pid = (pid_max + 1).to_string();
    let kprobe = "p:do_sys_openat2";
    let record = |extra: &[&str]| -> Vec<String> {
        ["record", "-q", "-e", kprobe]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let with_spec =
        |spec: String| -> Vec<String> { vec!["record".into(), "-q".into(), "-e".into(), spec] };
    let with_stat = |spec: String| -> Vec<String> { vec!["stat".into(), "-e".into(), spec] };
    let cmd = |words: &[&str]| -> Vec<String> { words.iter().map(|s| s.to_string()).collect() };
    vec![
        // -d: finite, more than 0, at most 365 days.
        (record(&["-d", "inf"]), "not a finite number"),
        (record(&["-d", "1e300"]), "too long"),
        (record(&["-d", "NaN"]), "not a finite number"),
        (record(&["-d=-1"]), "not more than 0"),
        (record(&["-d", "-1"]), "not more than 0"),
        (record(&["-d", "0"]), "not more than 0"),
        (record(&["-d", "10s"]), "not a number"),
        // -C: bounded before expansion, online CPUs only.
        (
            record(&["-C", "0-4294967295"]),
            "CPU 4294967295 does not exist",
        ),
        (record(&["-C", "99999999999999999999"]), "does not exist"),
        (record(&["-C", "8191"]), "CPU 8191 does not exist"),
        (record(&["-C", ""]), "names no CPU"),
        (record(&["-C", ",,"]), "names no CPU"),
        (record(&["-C", "1-0"]), "runs backward"),
        (record(&["-C", "0-"]), "is not a CPU number"),
        (record(&["-C", "-1"]), "is not a CPU number"),
        // -m and --overwrite-size: powers of two, bounded.
        (record(&["-m", "3"]), "not a power of two"),
        (record(&["-m", "0"]), "at least one page"),
        (record(&["-m", "1099511627776"]), "more than"),
        (record(&["-m", "-1"]), "not a number of pages"),
        (
            record(&["--overwrite", "--overwrite-size", "0"]),
            "from 1 to 1024",
        ),
        (
            record(&["--overwrite", "--overwrite-size", "18446744073709551616"]),
            "from 1 to 1024",
        ),
        // -p and -t: running tasks.
        (record(&["-p", "0"]), "no process has this number"),
        (record(&["-p", "-5"]), "no process has this number"),
        (record(&["-p", &no_pid]), "is running"),
        (record(&["-p", "2147483648"]), "no process has this number"),
        (record(&["-p", "1,x"]), "not a process"),
        (record(&["-t", "-1"]), "no thread has this number"),
        (record(&["-t", ""]), "not a thread"),
        (record(&["-t", &no_pid]), "is running"),
        // -G, -o.
        (
            record(&["-G", "no/such/cgroup/kprobe-perf"]),
            "no cgroup directory",
        ),
        (record(&["-o", &dir]), "a directory"),
        (record(&["-o", ""]), "a value is required"),
        (record(&["-o", &fifo]), "FIFO"),
        (record(&["-o", "/dev/zero"]), "character device"),
        // Uprobe binaries: regular files, offsets inside them.
        (with_spec("p:/dev/zero:main".into()), "character device"),
        (with_spec("p:/dev/zero:0".into()), "character device"),
        (with_spec(format!("p:{fifo}:main")), "FIFO"),
        (with_spec(format!("p:{dir}:main")), "directory"),
        (
            with_spec("p:/no/such/binary:main".into()),
            "No such file or directory",
        ),
        (
            // The kernel reads the offset as a long: past it, the
            // definition is refused before the binary is read.
            with_spec(format!("p:{bin}:main+0xffffffffffffffff")),
            "not a valid offset",
        ),
        (
            with_spec(format!("p:{bin}:0x7fffffffffffffff")),
            "0x7fffffffffffffff",
        ),
        (
            with_spec(format!("p:{big}:main")),
            "3221225472 bytes, more than the",
        ),
        // Malformed definitions (the parser's caret display follows).
        (with_spec("p:".into()), "missing probe target"),
        (with_spec("x:foo".into()), "a probe starts with p"),
        (
            with_spec("p:do_sys_openat2+99999999999999999999".into()),
            "not a valid offset",
        ),
        (with_spec("p:do_sys_openat2 %zz".into()), "unknown register"),
        (with_spec("r99999999999999999999:do_sys_openat2".into()), ""),
        (with_spec("p:do_sys_openat2 +0(+0(+0(%di".into()), ""),
        (with_spec("p:do_sys_openat2 x=%di:u4096".into()), ""),
        // vmlinux and System.map: regular files.
        (
            cmd(&["info", "--system-map", "/dev/zero"]),
            "character device",
        ),
        (cmd(&["info", "--system-map", &fifo]), "FIFO"),
        (cmd(&["info", "--vmlinux", "/dev/zero"]), "character device"),
        (cmd(&["info", "--vmlinux", &fifo]), "FIFO"),
        (cmd(&["list", "--vmlinux", &dir, "do_sys*"]), "directory"),
        (record(&["--system-map", &big]), "more than the 256 MiB"),
        (record(&["--vmlinux", &big]), "not a vmlinux ELF image"),
        // script -i: a perf.data file.
        (cmd(&["script", "-i", "/dev/zero"]), "character device"),
        (cmd(&["script", "-i", &fifo]), "FIFO"),
        (cmd(&["script", "-i", &dir]), "directory"),
        (cmd(&["script", "-i", &not_perf]), "not a perf.data file"),
        (cmd(&["script", "-i", &big]), "not a perf.data file"),
        (
            cmd(&["script", "-i", &short_perf]),
            "inside the 104-byte header",
        ),
        (
            cmd(&["script", "-i", "/no/such/perf.data"]),
            "No such file or directory",
        ),
        // Usage mistakes clap finds.
        (cmd(&["record"]), "--event"),
        (record(&["--bogus"]), "unexpected argument '--bogus'"),
        (record(&["--backend", "nope"]), "invalid value 'nope'"),
        (record(&["-p", "1", "-t", "1"]), "cannot be used with"),
        // stat: -I in whole milliseconds, and record's checks.
        (
            cmd(&["stat", "-e", kprobe, "-I", "5"]),
            "from 10 to 3600000",
        ),
        (
            cmd(&["stat", "-e", kprobe, "-I", "-1"]),
            "from 10 to 3600000",
        ),
        (
            cmd(&["stat", "-e", kprobe, "-I", "0.5"]),
            "from 10 to 3600000",
        ),
        (cmd(&["stat", "-e", kprobe, "-d", "0"]), "not more than 0"),
        (
            cmd(&["stat", "-e", kprobe, "-C", "0-4294967295"]),
            "does not exist",
        ),
        (cmd(&["stat", "-I", "100"]), "--event"),
        (with_stat("p:".into()), "missing probe target"),
    ]
}

#[test]
fn bad_inputs_are_refused_with_one_line() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        println!(
            "SKIP bad_inputs_are_refused_with_one_line: prlimit (util-linux) is not installed"
        );
        return;
    }
    let f = Fixtures::new();
    let rows = table(&f);
    assert!(rows.len() >= 30);
    let mut failures = Vec::new();
    println!(
        "{:<4} {:<58} {:<5} first line of stderr",
        "#", "input", "exit"
    );
    for (n, (args, phrase)) in rows.iter().enumerate() {
        let o = run(args, &f.dir, n);
        let shown = args.join(" ").replace(BIN, "BIN");
        let first = o.stderr.lines().next().unwrap_or("");
        let code = o.code.map_or("KILL".to_string(), |c| c.to_string());
        println!("{n:<4} {shown:<58} {code:<5} {first}");
        let mut problems = Vec::new();
        if o.code.is_none() {
            problems.push(format!("still running after {TIME_LIMIT:?}: killed"));
        } else if o.code != Some(1) {
            problems.push(format!("exit status {code}, not 1"));
        }
        if !first.starts_with("kprobe-perf: ") {
            problems.push("stderr does not start with `kprobe-perf: `".to_string());
        }
        if !first.contains(phrase) {
            problems.push(format!("the error does not say {phrase:?}"));
        }
        // One line; the only continuation is the caret display under a
        // probe definition, indented.
        if o.stderr.lines().skip(1).any(|l| !l.starts_with("  ")) {
            problems.push("more than one line on stderr".to_string());
        }
        for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
            if o.stderr.contains(bad) {
                problems.push(format!("stderr says {bad:?}"));
            }
        }
        if !o.stdout.is_empty() {
            problems.push(format!("stdout is not empty: {:?}", o.stdout));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "#{n} `{shown}`: {}\n  stderr: {:?}",
                problems.join("; "),
                o.stderr
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} inputs were not refused cleanly:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}
