//! `cargo xtask test`: the one test command, and `cargo xtask demo`.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kernels::{self, GuestArch, ARM64_MATRIX, MATRIX, SMOKE_MATRIX};
use crate::testlog::{self, Digest};
use crate::vm::{self, VmRun};
use crate::{host, passthrough_env, report_problems, vm_cache, workspace_root};

/// Passed, failed and skipped counts: libtest's `test result:` lines, less
/// the tests that printed a skip line (libtest counts those as passed).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// The test a skip line names: `SKIP <test>: <reason>`, as the tests
/// crate's `skip` helpers print it (kprobe_perf_tests::skip_line). The
/// line starts with it under `--show-output`; under `--nocapture` it may
/// follow libtest's `test <name> ... `.
fn skipped_test(line: &str) -> Option<&str> {
    let rest = match line.strip_prefix("SKIP ") {
        Some(r) => r,
        None => line.split_once(" ... SKIP ")?.1,
    };
    let (test, _reason) = rest.split_once(": ")?;
    (!test.is_empty() && !test.contains(char::is_whitespace)).then_some(test)
}

/// Sums `test result: ok. 5 passed; 1 failed; ...` lines, and moves the
/// tests that printed a skip line from passed to skipped.
fn parse_counts(output: &str) -> Counts {
    let mut c = Counts {
        skipped: output.lines().filter_map(skipped_test).count() as u64,
        ..Counts::default()
    };
    for line in output.lines().filter(|l| l.contains("test result:")) {
        let num_before = |word: &str| -> u64 {
            line.split(';')
                .find_map(|part| part.trim().strip_suffix(word))
                .and_then(|n| n.split_whitespace().last())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        c.passed += num_before(" passed");
        c.failed += num_before(" failed");
    }
    c.passed = c.passed.saturating_sub(c.skipped);
    c
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

/// Runs a command, echoing what [`Digest`] shows of its output, and returns
/// (success, the whole output).
fn run_echo(cmd: &mut Command) -> Result<(bool, String)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting cargo")?;
    let stderr = child.stderr.take().context("stderr")?;
    let err_thread = std::thread::spawn(move || {
        let mut filter = Digest::default();
        let mut text = String::new();
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if filter.show(&line) {
                eprintln!("{line}");
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let mut filter = Digest::default();
    let mut text = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if filter.show(&line) {
                println!("{line}");
            }
            text.push_str(&line);
            text.push('\n');
        }
    }
    let status = child.wait()?;
    text.push_str(&err_thread.join().unwrap_or_default());
    Ok((status.success(), text))
}

/// The test executables of the `tests/` crate (built, not run), and the
/// kprobe-perf binary they run, for the host or, with `target`, for that
/// musl target linked by rust-lld (no cross C toolchain).
/// The VM tests run release builds: under TCG a debug build spends
/// seconds just parsing /proc/kallsyms.
fn build_tests_for(target: Option<&str>) -> Result<Vec<PathBuf>> {
    let what = target.unwrap_or("the host");
    let cargo_for = || {
        let mut c = cargo();
        if let Some(t) = target {
            let linker = format!("CARGO_TARGET_{}_LINKER", t.to_uppercase().replace('-', "_"));
            c.env(linker, "rust-lld");
        }
        c
    };
    // A musl target builds without `zstd` (libzstd is C; no C compiler
    // for musl is at hand), as the static binary does.
    let target_args: Vec<&str> = target
        .map(|t| vec!["--target", t, "--no-default-features"])
        .unwrap_or_default();
    let (ok, _) = run_echo(
        cargo_for()
            .args(["build", "--release"])
            .args(&target_args)
            .args(["--package", "kprobe-perf"]),
    )?;
    if !ok {
        bail!("building kprobe-perf (release) for {what} failed");
    }
    // The engine's examples that VM tests run (tests/tokio_example.rs,
    // tests/read_sizes_example.rs (read_sizes, perfdata_answers),
    // tests/exclude_self.rs, tests/perfdata_sink.rs) and the tests, in
    // one cargo run: features are unified within a run, so the engine
    // (and all that depends on it) is built once for both, where two runs
    // built it twice (`tokio`, then `test-util` and `tokio`).
    let mut build = cargo_for();
    build
        .args(["build", "--release", "--message-format=json"])
        .args(&target_args)
        .args([
            "--package",
            "kprobe-perf-engine",
            "--package",
            "kprobe-perf-tests",
        ])
        .args(["--features", "kprobe-perf-engine/tokio"]);
    for example in VM_EXAMPLES {
        build.args(["--example", example]);
    }
    for test in vm_test_names()? {
        build.args(["--test", &test]);
    }
    let out = build
        .arg("--bins") // the tests' workloads
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build of the VM tests")?;
    if !out.status.success() {
        bail!("building the VM tests and the engine's examples for {what} failed");
    }
    let exes = test_executables(&String::from_utf8_lossy(&out.stdout));
    if exes.is_empty() {
        bail!("cargo reported no test executables for kprobe-perf-tests ({what})");
    }
    Ok(exes)
}

/// The integration tests of kprobe-perf-tests (tests/tests/NAME.rs), by
/// name: `--test '*'` would build the engine's own integration tests too.
fn vm_test_names() -> Result<Vec<String>> {
    let dir = crate::workspace_root().join("tests/tests");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "rs") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                names.push(stem.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// The x86_64 VM's tests: the host's own build.
fn build_vm_tests() -> Result<Vec<PathBuf>> {
    build_tests_for(None)
}

/// The static aarch64 builds for the arm64 VM.
fn build_vm_tests_arm64() -> Result<Vec<PathBuf>> {
    let target = GuestArch::Arm64.musl_target();
    crate::dist::ensure_target(target)?;
    build_tests_for(Some(target))
}

/// The engine's examples the VM tests run.
const VM_EXAMPLES: [&str; 5] = [
    "tokio_record",
    "read_sizes",
    "malloc_profiler",
    "record_perfdata",
    "perfdata_answers",
];

/// The test executables of kprobe-perf-tests cargo's JSON messages name.
fn test_executables(json: &str) -> Vec<PathBuf> {
    let mut exes = Vec::new();
    for line in json.lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"")
            || !line.contains("\"test\":true")
            || !line.contains("#kprobe-perf-tests@")
        {
            continue;
        }
        if let Some(rest) = line.split("\"executable\":\"").nth(1) {
            if let Some(path) = rest.split('"').next() {
                exes.push(PathBuf::from(path));
            }
        }
    }
    exes
}

/// Which tests a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    /// Every test of the tests/ crate.
    Full,
    /// The named smoke set ([`SMOKE`]).
    Smoke,
    /// The named arm64 set ([`ARM64`]), static aarch64 builds in the arm64
    /// VM.
    Arm64,
}

impl Suite {
    fn describe(self) -> &'static str {
        match self {
            Suite::Full => "full suite",
            Suite::Smoke => "smoke set",
            Suite::Arm64 => "arm64 set",
        }
    }
}

/// The smoke set run on the kernels of [`SMOKE_MATRIX`]: per test file
/// (the executable's name before its hash), the tests to run (by name;
/// empty: all of the file). What each shows on an older, a real-time and
/// the newest kernel:
/// - skeleton: the demo's recording (a kprobe and a kretprobe on a
///   command, values checked) and the exact entry/return values;
/// - differential: the same values as perf record;
/// - tracefs: the tracefs route with maxactive, misses counted, and a
///   kernel-fetched string;
/// - boundaries: predicted verdicts against perf_event_open on
///   [`SMOKE_AGREEMENT_FUNCTIONS`] functions;
/// - guardian: nothing left after SIGKILL;
/// - uprobes: uprobe and uretprobe values;
/// - fprobe: fprobe events where the kernel has them, a clear refusal
///   where it does not;
/// - eprobe: an eprobe's fields and string through ftrace's buffer, and
///   nothing left after exit, SIGINT and SIGKILL (skipped without eprobes).
/// - calls: a call tree of vfs_read rebuilt whole, and a call running at
///   the start left out (kprobes and kretprobes before 6.12, fprobes
///   from it).
const SMOKE: &[(&str, &[&str])] = &[
    (
        "skeleton",
        &[
            "record_a_command_prints_ftrace_lines",
            "openat_entry_and_return_values_of_a_known_thread",
        ],
    ),
    ("differential", &[]),
    (
        "tracefs",
        &[
            "maxactive_bounds_concurrent_returns_and_misses_are_counted",
            "kernel_fetched_string_is_exact",
        ],
    ),
    ("boundaries", &[]),
    (
        "guardian",
        &["sigkill_of_a_system_wide_recording_leaves_nothing"],
    ),
    ("uprobes", &[]),
    ("fprobe", &[]),
    ("eprobe", &[]),
    (
        "calls",
        &["a_call_running_at_the_start_makes_no_wrong_tree"],
    ),
];

/// The arm64 set, run on [`ARM64_MATRIX`] in the arm64 VM (TCG emulating
/// another architecture is several times slower, so it is small):
/// - skeleton: a kprobe and a kretprobe with exact values, registers named
///   the arm64 way (`%x0`);
/// - tracefs: the tracefs route with maxactive, misses counted, and a
///   kernel-fetched string;
/// - btf: BTF argument names fetch the right registers;
/// - uprobes: uprobe and uretprobe values on an arm64 binary (the test
///   executable itself);
/// - differential: prints its SKIP reason (no arm64 perf in the VM);
/// - boundaries: predicted verdicts against perf_event_open on
///   [`SMOKE_AGREEMENT_FUNCTIONS`] functions, arm64 rules;
/// - calls: a call tree of vfs_read rebuilt whole and a call running at
///   the start left out (its two functions probed by name: kprobes and
///   kretprobes). Not `denied_functions_get_no_probe`: it reads ftrace's
///   `enabled_functions`, which listed none of the probed functions on
///   arm64-6.12 (2026-11-28; its kprobes do not go through ftrace).
const ARM64: &[(&str, &[&str])] = &[
    (
        "skeleton",
        &[
            "record_a_command_prints_ftrace_lines",
            "openat_entry_and_return_values_of_a_known_thread",
        ],
    ),
    (
        "tracefs",
        &[
            "maxactive_bounds_concurrent_returns_and_misses_are_counted",
            "kernel_fetched_string_is_exact",
        ],
    ),
    ("btf", &[]),
    ("uprobes", &[]),
    ("differential", &[]),
    ("boundaries", &[]),
    (
        "calls",
        &["a_call_running_at_the_start_makes_no_wrong_tree"],
    ),
];

/// Functions the boundary agreement test takes in the smoke set.
const SMOKE_AGREEMENT_FUNCTIONS: usize = 30;

/// Functions the boundary agreement test takes in the full suite (its own
/// default, 150, is for a run of its own): each costs about 1.2 s on 6.1
/// under TCG, most of it closing the accepted probes, and 60 functions
/// still ask the kernel about 4,000 offsets per kernel (the seed is fixed,
/// so each kernel is asked the same functions on every run).
const FULL_AGREEMENT_FUNCTIONS: usize = 60;

/// Tests the two full suites (6.1 and 6.12, [`MATRIX`]) run once between
/// them: on the kernel `on`, and on the other only when `on` is not part
/// of the run (`--kernel 6.12` alone runs everything). Each proves
/// something of kprobe-perf that is the same on both kernels: user-space
/// code (uprobes at an address the binary decides, DWARF unwinding of user
/// stacks, SDT notes), file formats and file handling. A test whose
/// verdict depends on the kernel (a kprobe, tracefs's grammar, a type the
/// kernel knows or not, the kernel's own stacks) is never here.
struct Once {
    /// The test file (tests/tests/FILE.rs).
    file: &'static str,
    /// Its tests run once (empty: the whole file).
    tests: &'static [&'static str],
    /// The kernel of [`MATRIX`] that runs them.
    on: &'static str,
    /// Why the other kernel would prove nothing more.
    why: &'static str,
}

const ONCE_PER_PAIR: &[Once] = &[
    Once {
        file: "perf_habits",
        tests: &[
            "latency_by_ret_prints_an_ints_minus_one",
            "perfs_ring_sizes_and_fp_call_graph",
            "relative_paths_and_names_on_path_are_the_binaries",
            "names_a_uprobe_cannot_take_say_the_form_to_use",
            "usdt_any_file_with_a_command_is_its_binary",
            "a_uprobes_picture_of_stacks_has_its_user_frames",
            "latency_min_prints_an_ints_minus_one",
            "output_files_carry_the_binaries_build_ids",
            "script_fields_print_as_perf_scripts",
            "a_return_uprobe_prints_its_entry_arguments",
        ],
        on: "6.1",
        why: "uprobes on a test binary: names, paths, build ids, output forms \
              (the char type, kprobe-less kernels, exclude-perf and exec naming run on both)",
    },
    Once {
        file: "user_source_lines",
        tests: &[],
        on: "6.1",
        why: "a user binary's DWARF (locals, debuglink, debuginfod) against perf probe -x",
    },
    Once {
        file: "latency",
        tests: &["latency_of_each_level_of_a_recursion"],
        on: "6.1",
        why: "a user-space recursion's uprobes and their pairing",
    },
    Once {
        file: "stacks",
        tests: &["uprobe_stack_has_its_callers"],
        on: "6.1",
        why: "a user stack walked by frame pointers",
    },
    Once {
        file: "bpftrace_diff",
        tests: &["uprobe_filters_count_what_bpftrace_counts"],
        on: "6.1",
        why: "a uprobe's filter against bpftrace's (the vfs_write one runs on both)",
    },
    Once {
        file: "dlopen_later",
        tests: &[],
        on: "6.1",
        why: "a library dlopened by a test program, probed by its short name (uprobes on a file)",
    },
    Once {
        file: "output_file",
        tests: &[],
        on: "6.1",
        why: "the -o file's creation (planted links, mode, owner) and what it holds",
    },
    Once {
        file: "usdt",
        tests: &[],
        on: "6.12",
        why: "SDT notes of python3.11 and libstdc++, their semaphores and operands, on uprobes",
    },
    Once {
        file: "dwarf_stacks",
        tests: &[],
        on: "6.12",
        why: "user stacks unwound from DWARF call frame information, and perf.data's samples",
    },
    Once {
        file: "read_sizes_example",
        tests: &[],
        on: "6.12",
        why: "the engine's examples on a uprobe of libc's read, and a perf.data file",
    },
    Once {
        file: "readme",
        tests: &["every_kprobe_perf_command_of_the_from_perf_tables_succeeds"],
        on: "6.1",
        why: "docs/from-perf.md's program tables: uprobes and USDT on test binaries (the kernel table runs on both)",
    },
    Once {
        file: "rotation",
        tests: &[],
        on: "6.12",
        why: "--switch-output's files and limits, on uprobes of a test binary: file handling",
    },
    Once {
        file: "soak",
        tests: &[],
        on: "6.1",
        why: "a minute of switching files on a uprobe: the recorder's memory and fds",
    },
    Once {
        file: "crash_safe",
        tests: &[],
        on: "6.12",
        why: "a killed recording's -o file read back: the writer's and reader's file handling (both routes run there)",
    },
    Once {
        file: "long_runs",
        tests: &[],
        on: "6.12",
        why: "uprobes of a test binary: -z files against perf's, and a recording stopped by signals (file handling, not the kernel's)",
    },
];

/// The kernel of the pair other than `kernel`, when `kernel` is one of
/// [`MATRIX`].
fn pair_of(kernel: &str) -> Option<&'static str> {
    if !MATRIX.contains(&kernel) {
        return None;
    }
    MATRIX.iter().copied().find(|k| *k != kernel)
}

/// What `kernel`'s full suite leaves to the other kernel of the pair, in
/// a run that boots both: per test file, the tests it skips (empty: the
/// whole file).
fn left_to_the_pair(kernel: &str, runs: &[&str]) -> Vec<&'static Once> {
    match pair_of(kernel) {
        Some(other) if runs.contains(&other) => {
            ONCE_PER_PAIR.iter().filter(|o| o.on == other).collect()
        }
        _ => Vec::new(),
    }
}

/// The plan line: what runs where.
fn plan_line(runs: &[(String, Suite)]) -> String {
    let names: Vec<&str> = runs.iter().map(|(k, _)| k.as_str()).collect();
    let mut parts = Vec::new();
    for (k, suite) in runs {
        let mut part = format!("{k}: {}", suite.describe());
        let once: Vec<String> = ONCE_PER_PAIR
            .iter()
            .filter(|o| o.on == k.as_str() && *suite == Suite::Full)
            .filter(|_| pair_of(k).is_some_and(|p| names.contains(&p)))
            .map(|o| match o.tests.len() {
                0 => o.file.to_string(),
                1 => format!("{} (1 test)", o.file),
                n => format!("{} ({n} tests)", o.file),
            })
            .collect();
        if !once.is_empty() {
            part.push_str(&format!(", and alone of the pair: {}", once.join(", ")));
        }
        let functions = match suite {
            Suite::Full => FULL_AGREEMENT_FUNCTIONS,
            Suite::Smoke | Suite::Arm64 => SMOKE_AGREEMENT_FUNCTIONS,
        };
        part.push_str(&format!(", {functions} agreement functions"));
        parts.push(part);
    }
    let mut plan = format!("xtask: plan: {}", parts.join("; "));
    if runs
        .iter()
        .any(|(k, s)| k == BOOT_KERNEL && *s == Suite::Full)
    {
        plan.push_str(&format!(
            "\n  {BOOT_KERNEL} booted again with the boot-time probes of tests/data/boot_probes.txt: {BOOT_FILE}"
        ));
    }
    for o in ONCE_PER_PAIR {
        if names.contains(&o.on) && pair_of(o.on).is_some_and(|p| names.contains(&p)) {
            let what = match o.tests {
                [] => format!("{} (all)", o.file),
                tests => format!("{}: {}", o.file, tests.join(", ")),
            };
            plan.push_str(&format!("\n  on {} alone: {what}: {}", o.on, o.why));
        }
    }
    plan
}

/// The test file an executable was built from: `skeleton-0123abcd` ->
/// `skeleton`.
fn test_file_of(exe: &std::path::Path) -> Option<&str> {
    let name = exe.file_name()?.to_str()?;
    Some(name.rsplit_once('-').map_or(name, |(stem, _)| stem))
}

/// The guest's shell script: each test executable with its filters. A
/// full suite leaves out what `left` gives to the other kernel of the
/// pair (`--skip NAME --exact`, or the whole file).
fn vm_script(exes: &[PathBuf], suite: Suite, left: &[&Once]) -> String {
    let mut runs = Vec::new();
    for exe in exes {
        if test_file_of(exe) == Some(BOOT_FILE) {
            continue; // run in a boot of its own: boot_probes_run
        }
        let filters: Vec<String> = match suite {
            Suite::Full => {
                let file = test_file_of(exe).unwrap_or_default();
                let mine: Vec<&&Once> = left.iter().filter(|o| o.file == file).collect();
                if mine.iter().any(|o| o.tests.is_empty()) {
                    continue;
                }
                let skips: Vec<String> = mine
                    .iter()
                    .flat_map(|o| o.tests.iter())
                    .map(|t| format!(" --skip '{t}'"))
                    .collect();
                if skips.is_empty() {
                    skips
                } else {
                    std::iter::once(" --exact".to_string())
                        .chain(skips)
                        .collect()
                }
            }
            Suite::Smoke | Suite::Arm64 => {
                let set = if suite == Suite::Smoke { SMOKE } else { ARM64 };
                let Some(file) = test_file_of(exe) else {
                    continue;
                };
                let Some((_, names)) = set.iter().find(|(f, _)| *f == file) else {
                    continue;
                };
                names.iter().map(|n| format!(" '{n}'")).collect()
            }
        };
        runs.push(format!(
            "'{}' --test-threads=1 --color never --show-output{} || rc=1",
            exe.display(),
            filters.concat()
        ));
    }
    format!("rc=0; {}; exit $rc", runs.join("; "))
}

/// How many VMs run at once: KPROBE_PERF_VM_JOBS, else one per host core
/// (each VM keeps one busy), at most `kernels`.
fn vm_jobs(kernels: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::env::var("KPROBE_PERF_VM_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cores)
        .clamp(1, kernels.max(1))
}

/// What the run has seen so far: counts, one summary line per step, and
/// the failures to repeat at the end.
#[derive(Default)]
struct Tally {
    total: Counts,
    summary: Vec<String>,
    failures: Vec<String>,
}

impl Tally {
    /// A step that is one check: passed, or failed with its reason.
    fn check(&mut self, name: &str, r: Result<()>) {
        match r {
            Ok(()) => {
                self.summary.push(format!("{name}: ok"));
                self.total.passed += 1;
            }
            Err(e) => self.fail(name, &e),
        }
    }

    /// A step that failed outside any test: one failure, said at once and
    /// again at the end.
    fn fail(&mut self, name: &str, e: &anyhow::Error) {
        eprintln!("xtask: {name}: FAILED: {e:#}");
        self.summary.push(format!("{name}: FAILED"));
        self.failures.push(format!("{name}: {e:#}"));
        self.total.failed += 1;
    }

    /// A libtest run: its counts, its failures and where its log is.
    fn tests(&mut self, name: &str, ok: bool, output: &str, extra: &str) {
        let mut c = parse_counts(output);
        if !ok && c.failed == 0 {
            c.failed = 1; // a build or a guest failed outside any test
            self.failures.push(format!(
                "{name}: failed outside any test (a build, the test binary, or the guest)"
            ));
        }
        for f in testlog::failures(output) {
            self.failures.push(format!("{name}: {f}"));
        }
        let log = testlog::save(name, output)
            .map(|p| format!(", log {}", p.display()))
            .unwrap_or_default();
        self.summary.push(format!("{name}: {c}{extra}{log}"));
        self.total.add(c);
    }

    /// The summary, the failures again, and the closing counts line.
    fn finish(self, started: Instant) -> Result<()> {
        println!();
        println!(
            "xtask test summary ({:.0} s):",
            started.elapsed().as_secs_f64()
        );
        for s in &self.summary {
            println!("  {s}");
        }
        if !self.failures.is_empty() {
            println!("failures ({}):", self.failures.len());
            for f in &self.failures {
                println!("  FAILED {f}");
            }
        }
        println!("{}", self.total);
        if self.total.failed > 0 {
            std::process::exit(1);
        }
        Ok(())
    }
}

/// What a full run from an empty target/ writes: the debug and release
/// test binaries, two static builds, the kernel packages and their debug
/// vmlinux files (about 4 GB), with room to spare.
const FULL_RUN_GB: u64 = 20;

/// Says, before the first build, when the file system under target/ has
/// less room than a full run writes: a run that fills the disk otherwise
/// fails late, on whichever step writes last.
fn warn_if_disk_is_short() {
    let target = workspace_root().join("target");
    let dir = if target.exists() {
        target
    } else {
        workspace_root()
    };
    let Ok(out) = Command::new("df").args(["-Pk"]).arg(&dir).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // POSIX format: the second line's fourth field is the free KiB.
    let free_kib = text
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|f| f.parse::<u64>().ok());
    if let Some(kib) = free_kib {
        let gb = kib / (1024 * 1024);
        println!("xtask: {gb} GB free under {}", dir.display());
        if gb < FULL_RUN_GB {
            println!(
                "xtask: warning: a full run from an empty target/ writes about {FULL_RUN_GB} GB; \
                 free some room (cargo clean, or old target/ folders) if a step fails with \
                 'No space left on device'"
            );
        }
    }
}

/// fmt, clippy, native tests, then the VM matrix. Every step is counted,
/// a failed one too, and the run always ends with the summary, the
/// failures again and `N passed, N failed, N skipped`.
/// The peers the tests run, installed before the native step: (Debian
/// package, a file it installs).
const NATIVE_PEERS: [(&str, &str); 10] = [
    ("debuginfod", "/usr/bin/debuginfod"),
    ("curl", "/usr/bin/curl"),
    ("libarchive-tools", "/usr/bin/bsdtar"),
    ("linux-perf", "/usr/bin/perf"),
    ("bpftrace", "/usr/bin/bpftrace"),
    ("lintian", "/usr/bin/lintian"),
    ("libc6-dbg", "/usr/share/doc/libc6-dbg"),
    ("dwz", "/usr/bin/dwz"),
    ("clang", "/usr/bin/clang"),
    ("python3", "/usr/bin/python3"),
];

/// Where a fresh machine has no tracefs mounted and this one has, the
/// mount goes before the native tests, so that they see what a fresh
/// machine shows (kprobe-perf mounts tracefs itself when a probe needs
/// it, as perf does). A mount in use stays, and the line says so.
fn unmount_tracefs() {
    const AT: &str = "/sys/kernel/tracing";
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mounted = mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(AT));
    if !mounted {
        return;
    }
    match Command::new("umount").arg(AT).status() {
        Ok(s) if s.success() => println!(
            "xtask: unmounted tracefs at {AT}, as a fresh machine has it, for the native tests"
        ),
        Ok(s) => println!(
            "xtask: tracefs at {AT} stays mounted (umount: {s}); the native tests see it mounted"
        ),
        Err(e) => println!(
            "xtask: tracefs at {AT} stays mounted (umount: {e}); the native tests see it mounted"
        ),
    }
}

pub(crate) fn run(kernel_args: &[String], no_lint: bool, vm_only: bool) -> Result<()> {
    let started = Instant::now();
    let mut tally = Tally::default();
    warn_if_disk_is_short();
    if vm_only {
        install_peers(&mut tally);
    } else if !host_steps(kernel_args, no_lint, &mut tally) {
        return tally.finish(started);
    }
    let exes = match build_vm_tests() {
        Ok(exes) => exes,
        Err(e) => {
            tally.fail("building the VM tests", &e);
            return tally.finish(started);
        }
    };
    if !vm_only {
        // The README's first command, as a newcomer types it.
        println!("xtask: running `cargo xtask demo` (kernel {DEMO_KERNEL})");
        tally.check(
            &format!("demo (cargo xtask demo, kernel {DEMO_KERNEL})"),
            demo(DEMO_KERNEL),
        );
    }
    let runs = kernel_runs(kernel_args);
    println!("{}", plan_line(&runs));
    let scripts = Scripts::new(&exes, &runs, &mut tally);
    let resolved = resolve_kernels(&runs, &scripts, &mut tally);
    let outcomes = run_vms(&resolved, &scripts);
    for (run, outcome) in resolved.iter().zip(outcomes) {
        report_vm(run, outcome, &mut tally);
    }
    boot_probes_run(&exes, &resolved, &mut tally);
    tally.finish(started)
}

/// The test file that runs in a boot of its own: the kernel booted with
/// the parameters `kprobe-perf boot` prints for its probes.
const BOOT_FILE: &str = "boot_probes";
/// The kernel booted for it, when the run has that kernel's full suite.
const BOOT_KERNEL: &str = "6.12";

/// Boots [`BOOT_KERNEL`] with the boot-time probes of
/// tests/data/boot_probes.txt (as `kprobe-perf boot` prints them) and
/// runs [`BOOT_FILE`] there, which reads their events back.
fn boot_probes_run(exes: &[PathBuf], resolved: &[KernelRun], tally: &mut Tally) {
    let Some((_, kernel, _)) = resolved
        .iter()
        .find(|(k, _, s)| k == BOOT_KERNEL && *s == Suite::Full)
    else {
        return;
    };
    let name = format!("kernel {BOOT_KERNEL} booted with boot-time probes ({BOOT_FILE})");
    let Some(exe) = exes.iter().find(|e| test_file_of(e) == Some(BOOT_FILE)) else {
        return tally.fail(
            &name,
            &anyhow::anyhow!("no {BOOT_FILE} test executable was built"),
        );
    };
    println!("xtask: running {BOOT_FILE} on kernel {BOOT_KERNEL}, booted with its probes");
    let run = boot_parameters().and_then(|append| {
        println!("xtask: kernel parameters: {append}");
        vm::run(&VmRun {
            kernel,
            command: &[
                exe.display().to_string(),
                "--test-threads=1".into(),
                "--color".into(),
                "never".into(),
                "--show-output".into(),
            ],
            cwd: workspace_root(),
            env: passthrough_env(),
            timeout: Duration::from_secs(900),
            silence: Duration::from_secs(600),
            echo: vm::Echo::Digest,
            label: None,
            work_dir: vm_cache(),
            append: &append,
        })
    });
    match run {
        Ok(outcome) => {
            report_problems(&outcome);
            for p in &outcome.problems {
                tally.failures.push(format!("{name}: {p}"));
            }
            let extra = format!(", boot {:.1} s", outcome.boot_secs.unwrap_or(f64::NAN));
            tally.tests(&name, outcome.success(), &outcome.output, &extra);
        }
        Err(e) => tally.fail(&name, &e),
    }
}

/// What the release `kprobe-perf boot` prints for the probes of
/// tests/data/boot_probes.txt.
fn boot_parameters() -> Result<String> {
    let root = workspace_root();
    let list = root.join("tests/data/boot_probes.txt");
    let text =
        std::fs::read_to_string(&list).with_context(|| format!("reading {}", list.display()))?;
    let specs: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let out = Command::new(root.join("target/release/kprobe-perf"))
        .arg("boot")
        .args(&specs)
        .output()
        .context("running kprobe-perf boot")?;
    if !out.status.success() {
        bail!(
            "kprobe-perf boot refused {}: {}",
            list.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What runs on the host before the VM tests: lint, the native tests, the
/// packages. False when kprobe-perf could not be built (nothing after it
/// can run).
fn host_steps(kernel_args: &[String], no_lint: bool, tally: &mut Tally) -> bool {
    if !no_lint {
        lint(tally);
    }
    if let Err(e) = build_cli() {
        tally.fail("building kprobe-perf", &e);
        return false;
    }
    install_peers(tally);
    unmount_tracefs();
    native_tests(tally);
    // The library crates' packages, and a project outside the workspace built from them.
    tally.check("cargo xtask package", crate::package::run());
    package_checks(kernel_args, tally);
    true
}

/// cargo fmt --check and clippy, one check each.
fn lint(tally: &mut Tally) {
    for (name, args) in [
        ("cargo fmt --check", &["fmt", "--all", "--check"][..]),
        (
            "cargo clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ][..],
        ),
    ] {
        let r = run_echo(cargo().args(args)).and_then(|(ok, out)| {
            testlog::save(name, &out);
            if ok {
                Ok(())
            } else {
                bail!("see the lines above")
            }
        });
        tally.check(name, r);
    }
}

/// The tests/ crate runs the kprobe-perf binary, which `cargo test` does
/// not build by itself.
fn build_cli() -> Result<()> {
    let (ok, _) = run_echo(cargo().args(["build", "--package", "kprobe-perf"]))?;
    if !ok {
        bail!("see the lines above");
    }
    Ok(())
}

/// Every peer a test runs is installed before the first test, so that a
/// fresh machine runs what a used one runs: debuginfod, curl, bsdtar for
/// the debuginfod client's test (Debian's server on loopback over a
/// dbgsym package, tests/user_source_lines.rs); perf and bpftrace for the
/// differentials, natively and inside the VM (where they must not skip);
/// lintian for the Debian package's check; libc6-dbg, dwz and clang for
/// debuginfo's tests on compressed DWARF, dwz files and clang's DWARF,
/// and its differential against perf probe -x (debuginfo/tests/forms.rs,
/// libc_differential.rs).
fn install_peers(tally: &mut Tally) {
    let peers = NATIVE_PEERS.map(|(pkg, _)| pkg).join(", ");
    if let Err(e) = host::ensure_packages(&NATIVE_PEERS) {
        tally.fail(&format!("installing {peers}"), &e);
    }
}

/// The workspace's tests on this host. `--show-output`: the skip lines
/// of passing tests are printed, and counted.
fn native_tests(tally: &mut Tally) {
    match run_echo(cargo().args(["test", "--workspace", "--", "--show-output"])) {
        Ok((ok, out)) => tally.tests("native", ok, &out, ""),
        Err(e) => tally.fail("native tests", &e),
    }
}

/// The static binary and the Debian package (cargo xtask dist/deb --check).
fn package_checks(kernel_args: &[String], tally: &mut Tally) {
    let (lines, passed, failed, skipped) = crate::deb::test_step(kernel_args);
    for l in lines.iter().filter(|l| l.contains("FAILED")) {
        tally.failures.push(l.clone());
    }
    tally.summary.extend(lines);
    tally.total.add(Counts {
        passed,
        failed,
        skipped,
    });
}

/// The kernels to boot and what each runs: the full suite on the matrix,
/// the smoke set on the other series, the arm64 set on `arm64-6.1` and
/// `arm64-6.12` (the whole ARM64_MATRIX by default); `--kernel K` runs
/// the full suite on K, or K's own set.
fn kernel_runs(kernel_args: &[String]) -> Vec<(String, Suite)> {
    if kernel_args.is_empty() {
        return MATRIX
            .iter()
            .map(|s| (s.to_string(), Suite::Full))
            .chain(SMOKE_MATRIX.iter().map(|s| (s.to_string(), Suite::Smoke)))
            .chain(
                ARM64_MATRIX
                    .iter()
                    .map(|s| (format!("arm64-{s}"), Suite::Arm64)),
            )
            .collect();
    }
    kernel_args
        .iter()
        .map(|k| {
            let suite = if SMOKE_MATRIX.contains(&k.as_str()) {
                Suite::Smoke
            } else if k.starts_with("arm64-") {
                Suite::Arm64
            } else {
                Suite::Full
            };
            (k.clone(), suite)
        })
        .collect()
}

/// The guest's script of each suite; the arm64 one is empty when its
/// QEMU or build could not be had (one failure, said here).
struct Scripts {
    /// Per kernel of the full suite: its script (each leaves the pair's
    /// other kernel its share of [`ONCE_PER_PAIR`]).
    full: Vec<(String, String)>,
    smoke: String,
    arm64: String,
}

impl Scripts {
    fn new(exes: &[PathBuf], runs: &[(String, Suite)], tally: &mut Tally) -> Scripts {
        let mut arm64 = String::new();
        if runs.iter().any(|(_, s)| *s == Suite::Arm64) {
            let built =
                host::ensure_packages(&[("qemu-system-arm", "/usr/bin/qemu-system-aarch64")])
                    .and_then(|()| build_vm_tests_arm64());
            match built {
                Ok(exes) => arm64 = vm_script(&exes, Suite::Arm64, &[]),
                Err(e) => tally.fail("the arm64 set (QEMU and the aarch64 build)", &e),
            }
        }
        let names: Vec<&str> = runs.iter().map(|(k, _)| k.as_str()).collect();
        let full = runs
            .iter()
            .filter(|(_, s)| *s == Suite::Full)
            .map(|(k, _)| {
                let left = left_to_the_pair(k, &names);
                (k.clone(), vm_script(exes, Suite::Full, &left))
            })
            .collect();
        Scripts {
            full,
            smoke: vm_script(exes, Suite::Smoke, &[]),
            arm64,
        }
    }

    fn of(&self, kernel: &str, suite: Suite) -> &str {
        match suite {
            Suite::Full => self
                .full
                .iter()
                .find(|(k, _)| k == kernel)
                .map_or("", |(_, s)| s.as_str()),
            Suite::Smoke => &self.smoke,
            Suite::Arm64 => &self.arm64,
        }
    }
}

/// One kernel to boot: its name, the kernel, and its suite.
type KernelRun = (String, kernels::Kernel, Suite);

/// Every kernel first (downloads print their own progress). A kernel
/// that cannot be had is one failure; the others still run.
fn resolve_kernels(
    runs: &[(String, Suite)],
    scripts: &Scripts,
    tally: &mut Tally,
) -> Vec<KernelRun> {
    let mut resolved = Vec::new();
    for (k, suite) in runs {
        if scripts.of(k, *suite).is_empty() {
            continue; // said when the scripts were made
        }
        let cache = vm_cache().join("kernels");
        // Only the full suite reads the -dbg package (vmlinux, System.map,
        // modules' debug files: tests/vmlinux.rs, source_lines.rs,
        // module_source.rs and the README's examples); the smoke set
        // boots without its gigabyte.
        let kernel = match (k.strip_prefix("arm64-"), suite) {
            (Some(series), Suite::Arm64) => kernels::resolve_arm64(series, &cache),
            (_, Suite::Full) => kernels::resolve(k, &cache),
            _ => kernels::resolve_image_only(k, &cache),
        };
        match kernel {
            Ok(kernel) => resolved.push((k.clone(), kernel, *suite)),
            Err(e) => tally.fail(&format!("kernel {k}"), &e),
        }
    }
    resolved
}

/// A VM's outcome and its seconds; `None` when its thread panicked.
type VmResult = Option<Result<(vm::VmOutcome, f64)>>;

/// The VMs: side by side when the host has a core for each, as each runs
/// its vCPUs on one host thread (single-threaded TCG). A queue: each of
/// the threads takes the next kernel as soon as its VM is done, so a
/// short smoke run fills the gap a long one leaves. The outcomes are in
/// `resolved`'s order.
fn run_vms(resolved: &[KernelRun], scripts: &Scripts) -> Vec<VmResult> {
    let jobs = vm_jobs(resolved.len());
    let tagged = jobs > 1;
    if tagged {
        println!(
            "xtask: running the VM tests on {} kernels, {jobs} at a time (lines tagged [kernel]; KPROBE_PERF_VM_JOBS=1 runs one at a time)",
            resolved.len()
        );
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                let next = &next;
                scope.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(run) = resolved.get(i) else {
                            return done;
                        };
                        done.push((i, run_vm(run, scripts.of(&run.0, run.2), tagged)));
                    }
                })
            })
            .collect();
        let mut all: Vec<VmResult> = (0..resolved.len()).map(|_| None).collect();
        for h in handles {
            match h.join() {
                Ok(done) => {
                    for (i, o) in done {
                        all[i] = Some(o);
                    }
                }
                Err(_) => eprintln!("xtask: a VM thread panicked"),
            }
        }
        all
    })
}

/// Boots one kernel and runs its suite's script.
fn run_vm(
    (k, kernel, suite): &KernelRun,
    script: &str,
    tagged: bool,
) -> Result<(vm::VmOutcome, f64)> {
    println!("xtask: running the {} on kernel {k}", suite.describe());
    let t0 = Instant::now();
    let mut env = passthrough_env();
    if let Some(d) = &kernel.debug_boot {
        env.push((
            "KPROBE_PERF_DEBUG_BOOT".to_string(),
            d.display().to_string(),
        ));
    }
    let functions = match suite {
        Suite::Full => FULL_AGREEMENT_FUNCTIONS,
        Suite::Smoke | Suite::Arm64 => SMOKE_AGREEMENT_FUNCTIONS,
    };
    env.push(("KPROBE_PERF_FUNCTIONS".to_string(), functions.to_string()));
    let outcome = vm::run(&VmRun {
        kernel,
        command: &["sh".to_string(), "-c".to_string(), script.to_string()],
        cwd: workspace_root(),
        env,
        // A hang is silence: the slowest test prints nothing for up to
        // ~5 min on a slow machine; a guest that keeps printing results
        // runs on, up to CI's own limit.
        timeout: Duration::from_secs(5400),
        silence: Duration::from_secs(900),
        echo: vm::Echo::Digest,
        label: tagged.then(|| k.clone()),
        work_dir: vm_cache(),
        append: "",
    })?;
    let secs = t0.elapsed().as_secs_f64();
    println!("xtask: kernel {k} finished in {secs:.0} s");
    Ok((outcome, secs))
}

/// One kernel's outcome into the tally: its problems, its slowest tests,
/// and its libtest counts.
fn report_vm((k, kernel, suite): &KernelRun, outcome: VmResult, tally: &mut Tally) {
    let name = format!("kernel {k}");
    let (outcome, secs) =
        match outcome.unwrap_or_else(|| Err(anyhow::anyhow!("a VM thread panicked"))) {
            Ok(o) => o,
            Err(e) => return tally.fail(&name, &e),
        };
    if !outcome.problems.is_empty() {
        eprintln!("xtask: kernel {k}:");
        for p in &outcome.problems {
            tally.failures.push(format!("{name}: {p}"));
        }
    }
    report_problems(&outcome);
    // Every test's seconds, slowest first, kept beside the log: where a
    // suite's time goes.
    let times = outcome.slowest(usize::MAX).join("\n") + "\n";
    let kept = testlog::save(&format!("{name} times"), &times)
        .map(|p| format!(" (every test: {})", p.display()))
        .unwrap_or_default();
    println!(
        "xtask: kernel {k}: slowest tests: {}{kept}",
        outcome.slowest(8).join(", ")
    );
    let image = kernel
        .image
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extra = format!(
        " ({image}, {}), boot {:.1} s, {secs:.0} s in all{}",
        suite.describe(),
        outcome.boot_secs.unwrap_or(f64::NAN),
        if outcome.problems.is_empty() {
            String::new()
        } else {
            format!(", problems: {}", outcome.problems.join("; "))
        }
    );
    tally.tests(&name, outcome.success(), &outcome.output, &extra);
}

/// The kernel `cargo xtask demo` boots by default.
pub(crate) const DEMO_KERNEL: &str = "6.12";

/// The demo's workload: two opens that succeed and one that fails
/// (`ret=-2`). It exits 0, so that kprobe-perf, which passes on its
/// command's exit status, exits 0 when the recording worked.
pub(crate) const DEMO_WORKLOAD: &str = "cat /etc/hostname; cat /no/such/file || true";

/// Boots the VM and records a kprobe and a kretprobe on a small workload,
/// printing every line. Fails, with one line saying which, when the VM
/// did not boot or the kernel complained, when kprobe-perf exited non-zero
/// (the recording errored, or the workload failed), or when its output
/// lacks the decoded events: the entry probe's `dfd=`, the failed open's
/// `ret=-2`, and a summary with no event lost.
pub(crate) fn demo(kernel: &str) -> Result<()> {
    host::ensure_packages(&[])?;
    let (ok, _) = run_echo(cargo().args(["build", "--release", "--package", "kprobe-perf"]))?;
    if !ok {
        bail!("building kprobe-perf failed");
    }
    let bin = workspace_root().join("target/release/kprobe-perf");
    let kernel = kernels::resolve_image_only(kernel, &vm_cache().join("kernels"))?;
    let command: Vec<String> = [
        bin.to_string_lossy().as_ref(),
        "record",
        "-e",
        "p:do_sys_openat2 dfd=%di:s32",
        "-e",
        "r:do_sys_openat2 ret=$retval:s64",
        "--",
        "sh",
        "-c",
        DEMO_WORKLOAD,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    println!(
        "xtask: booting kernel {} and running: kprobe-perf {}",
        kernel.label,
        command[1..]
            .iter()
            .map(|a| if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    let outcome = vm::run(&VmRun {
        kernel: &kernel,
        command: &command,
        cwd: workspace_root(),
        env: passthrough_env(),
        timeout: Duration::from_secs(300),
        silence: Duration::from_secs(300),
        echo: vm::Echo::All,
        label: None,
        work_dir: vm_cache(),
        append: "",
    })?;
    report_problems(&outcome);
    demo_verdict(&kernel.label, &outcome)?;
    println!("xtask: the demo worked on kernel {}", kernel.label);
    Ok(())
}

/// Why the demo failed, from what the VM gave back; `Ok` when it worked.
fn demo_verdict(kernel: &str, outcome: &vm::VmOutcome) -> Result<()> {
    if outcome.boot_secs.is_none() {
        bail!("the demo failed: the VM (kernel {kernel}) did not boot to the command (see the console lines above)");
    }
    if !outcome.problems.is_empty() {
        bail!(
            "the demo failed: the kernel {kernel} reported a problem: {}",
            outcome.problems.join("; ")
        );
    }
    match outcome.status {
        Some(0) => {}
        Some(n) => bail!(
            "the demo failed: kprobe-perf exited with status {n} (its lines above say why; the workload `{DEMO_WORKLOAD}` should exit 0)"
        ),
        None => bail!("the demo failed: the VM gave no exit status for kprobe-perf"),
    }
    let out = &outcome.output;
    let entries = out
        .lines()
        .filter(|l| l.contains(": p_do_sys_openat2_0: ") && l.contains("dfd="))
        .count();
    let failed_open = out
        .lines()
        .any(|l| l.contains(": r_do_sys_openat2_0: ") && l.trim_end().ends_with("ret=-2"));
    let summary = out
        .lines()
        .find(|l| l.starts_with("kprobe-perf: ") && l.contains(" events ("));
    if entries == 0 {
        bail!("the demo failed: kprobe-perf decoded no entry event (no `p_do_sys_openat2_0: ... dfd=` line)");
    }
    if !failed_open {
        bail!("the demo failed: no return event shows the failed open (`ret=-2`)");
    }
    match summary {
        Some(s) if s.trim_end().ends_with(", 0 lost") => Ok(()),
        Some(s) => bail!("the demo failed: events were lost: {s}"),
        None => bail!("the demo failed: kprobe-perf printed no summary line"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: Option<i32>, output: &str) -> vm::VmOutcome {
        vm::VmOutcome {
            status,
            output: output.to_string(),
            boot_secs: Some(3.0),
            problems: Vec::new(),
            console_tail: Vec::new(),
            test_secs: Vec::new(),
        }
    }

    const DEMO_OUTPUT: &str = "\
kprobe-perf-vm
cat: /no/such/file: No such file or directory
             cat-162     [000] 16.928522: p_do_sys_openat2_0: (do_sys_openat2+0x0/0xe0) dfd=-100
             cat-162     [000] 16.936766: r_do_sys_openat2_0: (__x64_sys_openat+0x6e/0xa0 <- do_sys_openat2) ret=3
             cat-163     [000] 16.946766: r_do_sys_openat2_0: (__x64_sys_openat+0x6e/0xa0 <- do_sys_openat2) ret=-2
kprobe-perf: 2 events (p_do_sys_openat2_0: 1; r_do_sys_openat2_0: 2), 0 lost
";

    #[test]
    fn the_demo_fails_only_when_it_really_failed() {
        assert!(demo_verdict("6.12", &outcome(Some(0), DEMO_OUTPUT)).is_ok());
        let e = demo_verdict("6.12", &outcome(Some(1), DEMO_OUTPUT)).unwrap_err();
        assert!(e.to_string().contains("exited with status 1"), "{e}");
        let e = demo_verdict(
            "6.12",
            &outcome(Some(0), "kprobe-perf: 0 events (), 0 lost\n"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("decoded no entry event"), "{e}");
        let no_fail = DEMO_OUTPUT.replace("ret=-2", "ret=4");
        let e = demo_verdict("6.12", &outcome(Some(0), &no_fail)).unwrap_err();
        assert!(e.to_string().contains("ret=-2"), "{e}");
        let lost = DEMO_OUTPUT.replace(", 0 lost", ", 3 lost");
        let e = demo_verdict("6.12", &outcome(Some(0), &lost)).unwrap_err();
        assert!(e.to_string().contains("events were lost"), "{e}");
        let mut no_boot = outcome(None, "");
        no_boot.boot_secs = None;
        let e = demo_verdict("6.12", &no_boot).unwrap_err();
        assert!(e.to_string().contains("did not boot"), "{e}");
    }

    #[test]
    fn counts_sum_libtest_lines() {
        let out = "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured\n\
                   noise\n\
                   test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured\n";
        assert_eq!(
            parse_counts(out),
            Counts {
                passed: 8,
                failed: 2,
                skipped: 0
            }
        );
    }

    #[test]
    fn skip_lines_move_tests_from_passed_to_skipped() {
        // --show-output (the native run, and the VM's), then --nocapture
        // with one test thread.
        let out = "running 3 tests\n\
                   test a ... ok\n\
                   successes:\n\
                   \n\
                   ---- a stdout ----\n\
                   SKIP a: kprobes: CONFIG_KPROBES is off\n\
                   \n\
                   ---- b stdout ----\n\
                   SKIP is a word here, not a skip line\n\
                   test c ... SKIP c: perf is not installed (apt-get install linux-perf)\n\
                   ok\n\
                   test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured\n\
                   test result: FAILED. 4 passed; 1 failed; 0 ignored; 0 measured\n";
        assert_eq!(
            parse_counts(out),
            Counts {
                passed: 5,
                failed: 1,
                skipped: 2
            }
        );
        assert_eq!(
            parse_counts(out).to_string(),
            "5 passed, 1 failed, 2 skipped"
        );
        assert_eq!(skipped_test("SKIP t: why: because"), Some("t"));
        assert_eq!(skipped_test("  SKIP t: indented"), None);
    }

    #[test]
    fn smoke_script_runs_only_the_named_tests() {
        let exes = [
            PathBuf::from("/t/release/deps/skeleton-0123abcd"),
            PathBuf::from("/t/release/deps/flight-89ab"),
            PathBuf::from("/t/release/deps/differential-77"),
        ];
        assert_eq!(test_file_of(&exes[0]), Some("skeleton"));
        let smoke = vm_script(&exes, Suite::Smoke, &[]);
        assert_eq!(
            smoke,
            "rc=0; '/t/release/deps/skeleton-0123abcd' --test-threads=1 --color never --show-output \
             'record_a_command_prints_ftrace_lines' 'openat_entry_and_return_values_of_a_known_thread' || rc=1; \
             '/t/release/deps/differential-77' --test-threads=1 --color never --show-output || rc=1; exit $rc"
        );
        let full = vm_script(&exes, Suite::Full, &[]);
        assert_eq!(full.matches("|| rc=1").count(), 3);
        assert!(!full.contains("record_a_command"));
    }

    #[test]
    fn the_boot_probes_file_runs_only_in_its_own_boot() {
        let exes = [
            PathBuf::from("/t/release/deps/boot_probes-01"),
            PathBuf::from("/t/release/deps/tracefs-03"),
        ];
        for suite in [Suite::Full, Suite::Smoke, Suite::Arm64] {
            let script = vm_script(&exes, suite, &[]);
            assert!(!script.contains("boot_probes"), "{script}");
        }
        let list = workspace_root().join("tests/data/boot_probes.txt");
        assert!(std::fs::read_to_string(list)
            .unwrap()
            .contains("kernel_execve"));
    }

    #[test]
    fn the_pair_runs_its_once_tests_on_one_kernel() {
        let exes = [
            PathBuf::from("/t/release/deps/usdt-01"),
            PathBuf::from("/t/release/deps/perf_habits-02"),
            PathBuf::from("/t/release/deps/tracefs-03"),
        ];
        let both = ["6.1", "6.12"];
        let on_61 = vm_script(&exes, Suite::Full, &left_to_the_pair("6.1", &both));
        assert!(!on_61.contains("usdt-01"), "{on_61}");
        assert!(on_61.contains("tracefs-03' --test-threads=1 --color never --show-output ||"));
        assert!(!on_61.contains("--skip"), "{on_61}");
        let on_612 = vm_script(&exes, Suite::Full, &left_to_the_pair("6.12", &both));
        assert!(on_612
            .contains("'/t/release/deps/usdt-01' --test-threads=1 --color never --show-output ||"));
        assert!(on_612.contains("perf_habits-02' --test-threads=1 --color never --show-output --exact --skip 'latency_by_ret_prints_an_ints_minus_one'"), "{on_612}");
        assert!(!on_612.contains("a_char_prints"), "{on_612}");
        // Alone, a kernel of the pair runs everything.
        assert!(left_to_the_pair("6.12", &["6.12"]).is_empty());
        assert!(left_to_the_pair("5.10", &["5.10", "6.1"]).is_empty());
        let plan = plan_line(&kernel_runs(&[]));
        assert!(
            plan.starts_with(
                "xtask: plan: 6.1: full suite, and alone of the pair: perf_habits (10 tests)"
            ),
            "{plan}"
        );
        assert!(
            plan.contains("; 6.12: full suite, and alone of the pair: usdt, dwarf_stacks"),
            "{plan}"
        );
        assert!(
            plan.contains("5.10: smoke set, 30 agreement functions"),
            "{plan}"
        );
    }

    /// Every file and test the selection names exists, and no test is
    /// given to one kernel twice: a misspelt name would skip nothing, or
    /// everything, silently.
    #[test]
    fn the_selection_names_tests_that_exist() {
        let dir = workspace_root().join("tests/tests");
        for o in ONCE_PER_PAIR {
            assert!(
                MATRIX.contains(&o.on),
                "{}: {} is not a kernel of the pair",
                o.file,
                o.on
            );
            assert!(!o.why.is_empty());
            let src = std::fs::read_to_string(dir.join(format!("{}.rs", o.file)))
                .unwrap_or_else(|e| panic!("tests/tests/{}.rs: {e}", o.file));
            for t in o.tests {
                assert!(
                    src.contains(&format!("fn {t}()")),
                    "{}: no test {t}",
                    o.file
                );
            }
            let same_file = ONCE_PER_PAIR.iter().filter(|p| p.file == o.file).count();
            assert_eq!(same_file, 1, "{} is named twice", o.file);
        }
    }

    #[test]
    fn arm64_script_runs_the_arm64_set() {
        let exes = [
            PathBuf::from("/t/aarch64-unknown-linux-musl/release/deps/tracefs-01"),
            PathBuf::from("/t/aarch64-unknown-linux-musl/release/deps/guardian-02"),
            PathBuf::from("/t/aarch64-unknown-linux-musl/release/deps/btf-03"),
        ];
        assert_eq!(
            vm_script(&exes, Suite::Arm64, &[]),
            "rc=0; '/t/aarch64-unknown-linux-musl/release/deps/tracefs-01' --test-threads=1 --color never --show-output \
             'maxactive_bounds_concurrent_returns_and_misses_are_counted' 'kernel_fetched_string_is_exact' || rc=1; \
             '/t/aarch64-unknown-linux-musl/release/deps/btf-03' --test-threads=1 --color never --show-output || rc=1; exit $rc"
        );
        let json = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kprobe-perf-tests@0.1.0","profile":{"test":true},"executable":"/t/a/deps/btf-03","fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine#kprobe-perf-engine@0.1.0","profile":{"test":true},"executable":"/t/a/deps/layering-04","fresh":true}"#;
        assert_eq!(
            test_executables(json),
            vec![PathBuf::from("/t/a/deps/btf-03")]
        );
    }
}
