//! Developer tasks: `cargo xtask vm | test | demo | dist | deb`.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod bench_debuginfo;
mod bench_unwind;
mod deb;
mod dist;
mod fuzz;
mod host;
mod kernels;
mod live;
mod package;
mod test;
mod testlog;
mod vm;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "kprobe-perf developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run a command inside a VM booted from a Debian kernel with kprobes.
    ///
    /// The host's root file system is visible read-only, /tmp is a tmpfs,
    /// the current directory is kept, and /proc, /sys, debugfs and tracefs
    /// are mounted. Exits with the command's exit status.
    Vm {
        /// Kernel: a series (5.10, 6.1, 6.12, 6.12-rt, sid; with --arch
        /// arm64: 6.1, 6.12) or a path to a vmlinuz.
        #[arg(long, default_value = "6.12")]
        kernel: String,
        /// The guest's architecture: x86_64, or arm64 (qemu-system-aarch64
        /// -M virt under TCG, Debian's arm64 kernels and busybox; the host's
        /// root is mounted at /host, its /work, /root ... linked at the same
        /// paths, and commands must be static aarch64 builds, e.g. from
        /// `cargo build --target aarch64-unknown-linux-musl`).
        #[arg(long, default_value = "x86_64")]
        arch: String,
        /// Give up after this many seconds (boot included).
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// More kernel command-line parameters, after the harness's own
        /// (console, rdinit, ...), e.g. the boot-time probes `kprobe-perf
        /// boot` prints: `--append "$(kprobe-perf boot 'p:ev FUNC ...')"`.
        #[arg(long, default_value = "", allow_hyphen_values = true)]
        append: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The one test command: fmt, clippy, native tests, then the tests/
    /// crate inside the VM on every kernel of the matrix.
    Test {
        /// Only these kernels (repeatable); default: the whole matrix.
        #[arg(long)]
        kernel: Vec<String>,
        /// Skip cargo fmt and clippy.
        #[arg(long)]
        no_lint: bool,
        /// Only the VM suites: no lint, native tests, package checks or
        /// demo (to time the VM suites, e.g.
        /// `cargo xtask test --vm-only --kernel 6.1 --kernel 6.12`).
        #[arg(long)]
        vm_only: bool,
    },
    /// Coverage-guided fuzzing with cargo fuzz (libFuzzer; installed
    /// when missing, run on the stable toolchain with RUSTC_BOOTSTRAP=1
    /// and no sanitizer): `spec_parse` (the probe parser: every accepted
    /// definition's canonical form must parse to the same definition and
    /// print identically), `record_decode` (the record decoder),
    /// `perfdata_read` (the perf.data reader and replay), or `all`. Each
    /// runs for --secs from its corpus in fuzz/libfuzzer/corpus/TARGET
    /// (new inputs are kept there); a crash stops it, the input saved in
    /// fuzz/libfuzzer/artifacts/TARGET. `seed` writes the seed corpora.
    Fuzz {
        /// What to fuzz.
        #[arg(value_parser = ["all", "spec_parse", "record_decode", "perfdata_read", "seed"], default_value = "all")]
        target: String,
        /// Seconds per target.
        #[arg(long, default_value_t = 600)]
        secs: u64,
    },
    /// Print benchmark figures in release mode: `spec` (parse speed on
    /// the host), `attach` (attach and detach N kprobes in the VM while
    /// shell loops keep every CPU busy, against perf probe + perf record
    /// and bpftrace in the same VM), `opens` (the cost per call of an
    /// entry probe bare and with arguments, a return and a string probe on
    /// do_sys_openat2 in the VM:
    /// a workload's opens of a tmpfs file, bare, under kprobe-perf record
    /// and stat, and under perf probe + perf record and perf stat;
    /// xtask/bench-opens.sh) or `decode`
    /// (decoding and text formatting of recorded samples on one core on the
    /// host, against `perf script` on the same perf.data file) or `live`
    /// (the live path: a workload of tmpfs opens and of calls of a uprobed
    /// function, on one thread and on every CPU, at stepped rates, bare and
    /// recorded by kprobe-perf (text and --json to /dev/null, -q -o FILE;
    /// for the kretprobe also --backend tracefs), perf record, perf's live
    /// text (perf record -o - | perf script, the peer of the text) and
    /// bpftrace (where it runs), with entry, return, string, stack and
    /// (uprobes) --call-graph dwarf probes; per probe
    /// kind a table of the workload's added microseconds per call, the
    /// events lost per round, and the consumer's CPU time per event from
    /// getrusage; in the VM, or with --native on this host (uprobes only))
    /// or `filter` (the bytes read from the ring buffers for --calls
    /// calls of a uprobed function, without a filter, with one keeping
    /// 1% that the kernel runs, and with the same one in user space; in
    /// the VM; xtask/bench-filter.sh) or `unwind` (reading back a
    /// `--call-graph dwarf` file of /usr/bin/python3.11 under a libc free
    /// uprobe, --calls byte strings of 1,000 bytes it makes: `kprobe-perf script -i` against
    /// `perf script -i` on the same file, least of --rounds; on this
    /// host) or `calls` (`kprobe-perf calls` in the VM, best of
    /// --rounds: --functions functions attached, in seconds; the added
    /// cost per traced call of --opens tmpfs opens against ftrace's
    /// function_graph on the same functions; trees rebuilt from a file,
    /// events per second; xtask/bench-calls.sh).
    Bench {
        /// What to measure.
        #[arg(value_parser = ["spec", "attach", "opens", "decode", "live", "analysis", "filter", "unwind", "debuginfo", "calls"], default_value = "spec")]
        what: String,
        /// For decode: how many samples.
        #[arg(long, default_value_t = 2_000_000)]
        samples: usize,
        /// For attach: how many functions.
        #[arg(long, default_value_t = 1000)]
        functions: usize,
        /// For opens: opens per run.
        #[arg(long, default_value_t = 100_000)]
        opens: u64,
        /// For opens and unwind: rounds (each runs every tool once).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// For attach, opens and live: the kernel series (6.1, 6.12) or a
        /// vmlinuz path.
        #[arg(long, default_value = "6.1")]
        kernel: String,
        /// For live: calls per run (split between the threads); for
        /// unwind, the byte strings the workload makes.
        #[arg(long, default_value_t = 100_000)]
        calls: u64,
        /// For live: the workload's rates, calls per second per thread, or
        /// `max` (as fast as it goes), comma-separated.
        #[arg(long, default_value = "20000,max")]
        rates: String,
        /// For live: the workloads, `open` (tmpfs opens: kprobes) and
        /// `call` (calls of a uprobed function), comma-separated.
        #[arg(long, default_value = "open,call")]
        workloads: String,
        /// For live: only these probe kinds (entry, return, string, stack,
        /// dwarf: uprobes with --call-graph dwarf), comma-separated;
        /// default: all.
        #[arg(long, default_value = "")]
        probes: String,
        /// For live: instead of the tables, profile the consumers on one
        /// thread at full rate (perf stat counters of each tool's own
        /// process, and a call graph of kprobe-perf's).
        #[arg(long)]
        profile: bool,
        /// For live: run on this host instead of the VM (uprobes only:
        /// the host kernel has no kprobes).
        #[arg(long)]
        native: bool,
        /// For decode and live --native: an earlier kprobe-perf binary,
        /// timed beside this tree's in the same rounds (before/after).
        #[arg(long, value_name = "KPROBE_PERF")]
        baseline: Option<PathBuf>,
    },
    /// (internal) `bench live` inside the VM.
    #[command(hide = true)]
    LiveGuest {
        #[arg(long)]
        kprobe_perf: PathBuf,
        #[arg(long)]
        rounds: u32,
        #[arg(long)]
        calls: u64,
        #[arg(long)]
        rates: String,
        #[arg(long)]
        workloads: String,
        #[arg(long, default_value = "")]
        probes: String,
        #[arg(long)]
        profile: bool,
    },
    /// (internal) The workload of `bench live`: KIND (open, call) PATH
    /// CALLS THREADS RATE (per thread per second, or max) REPORT.
    #[command(hide = true)]
    LiveWorkload {
        kind: String,
        path: PathBuf,
        calls: u64,
        threads: usize,
        rate: String,
        report: PathBuf,
    },
    /// Build a static x86_64 (or, with --arch arm64, aarch64) binary (musl, rust-lld) with its man pages
    /// and bash/zsh/fish completions in target/dist/, and a tarball.
    /// --check runs it in an empty chroot here and in the VM on each kernel.
    Dist {
        /// Also check it: an empty chroot on the host, then a kprobe
        /// record in an empty chroot in the VM.
        #[arg(long)]
        check: bool,
        /// With --check: only these kernels (repeatable); default: the matrix.
        #[arg(long)]
        kernel: Vec<String>,
        /// x86_64, or arm64: a static aarch64 binary
        /// (target/dist/kprobe-perf-VERSION-aarch64-linux-musl/), checked
        /// in the arm64 VM (kernels 6.1 and 6.12).
        #[arg(long, default_value = "x86_64")]
        arch: String,
    },
    /// Build the Debian package (target/dist/kprobe-perf_VERSION_amd64.deb)
    /// from the dist tree. --check installs it on this host (root), checks
    /// it, and removes and purges it.
    Deb {
        /// Install, check, remove and purge the package on this host.
        #[arg(long)]
        check: bool,
    },
    /// Package the library crates (target/package/*.crate) into a local
    /// registry (target/package-registry/), then build and run an outside
    /// project that depends on the packaged engine by version
    /// (target/embedder/).
    Package,
    /// Boot the VM and record a kprobe and a kretprobe on a workload.
    Demo {
        /// The kernel series to boot (as `vm --kernel`).
        #[arg(long, default_value = test::DEMO_KERNEL)]
        kernel: String,
    },
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where kernels, initramfs images and other VM state are cached.
pub fn vm_cache() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("vm")
}

/// Runs the task; an error is one line (`xtask: what failed: why`), never
/// a backtrace, whatever RUST_BACKTRACE says.
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.task {
        Task::Vm {
            kernel,
            arch,
            timeout,
            append,
            command,
        } => vm_command(&kernel, &arch, timeout, &append, &command),
        Task::Test {
            kernel,
            no_lint,
            vm_only,
        } => test::run(&kernel, no_lint, vm_only),
        Task::Demo { kernel } => test::demo(&kernel),
        Task::Dist {
            check,
            kernel,
            arch,
        } => match kernels::GuestArch::parse(&arch)? {
            kernels::GuestArch::X86_64 => dist::run(check, &kernel),
            kernels::GuestArch::Arm64 => dist::run_arm64(check, &kernel),
        },
        Task::Deb { check } => deb::run(check),
        Task::Package => package::run(),
        Task::Fuzz { target, secs } => fuzz::run(&target, secs),
        task @ Task::Bench { .. } => bench(task),
        Task::LiveGuest {
            kprobe_perf,
            rounds,
            calls,
            rates,
            workloads,
            probes,
            profile,
        } => live::measure(&live_options(
            kprobe_perf,
            rounds,
            calls,
            &rates,
            &workloads,
            &probes,
            profile,
        )?),
        Task::LiveWorkload {
            kind,
            path,
            calls,
            threads,
            rate,
            report,
        } => live::workload(
            live::CallKind::parse(&kind)?,
            &path,
            calls,
            threads,
            live::Rate::parse(&rate)?,
            &report,
        ),
    }
}

/// `cargo xtask vm`: boots `kernel` and runs `command` there, exiting
/// with its status.
fn vm_command(
    kernel: &str,
    arch: &str,
    timeout: u64,
    append: &str,
    command: &[String],
) -> Result<()> {
    host::ensure_packages(&[])?;
    let kernel = match kernels::GuestArch::parse(arch)? {
        kernels::GuestArch::X86_64 => kernels::resolve(kernel, &vm_cache().join("kernels"))?,
        kernels::GuestArch::Arm64 => {
            host::ensure_packages(&[("qemu-system-arm", "/usr/bin/qemu-system-aarch64")])?;
            kernels::resolve_arm64(kernel, &vm_cache().join("kernels"))?
        }
    };
    let outcome = vm::run(&vm::VmRun {
        kernel: &kernel,
        command,
        cwd: std::env::current_dir().context("current directory")?,
        env: passthrough_env(),
        timeout: Duration::from_secs(timeout),
        silence: Duration::from_secs(timeout),
        echo: vm::Echo::All,
        label: None,
        work_dir: vm_cache(),
        append,
    })?;
    report_problems(&outcome);
    if let Some(b) = outcome.boot_secs {
        eprintln!("xtask: {} booted to the command in {b:.1} s", kernel.label);
    }
    if !outcome.problems.is_empty() {
        bail!("the VM run failed");
    }
    std::process::exit(outcome.status.unwrap_or(125));
}

/// `cargo xtask bench WHAT`: the benchmark WHAT names.
fn bench(task: Task) -> Result<()> {
    match task {
        Task::Bench { what, .. } if what == "spec" => run_harness("spec_bench", &[]),
        Task::Bench {
            what,
            functions,
            rounds,
            kernel,
            ..
        } if what == "debuginfo" => bench_debuginfo::run(functions, rounds, &kernel),
        Task::Bench {
            what,
            samples,
            baseline,
            ..
        } if what == "decode" => bench_decode(samples, baseline.as_deref()),
        Task::Bench {
            what,
            calls,
            rounds,
            ..
        } if what == "unwind" => bench_unwind::run(calls, rounds),
        Task::Bench {
            what,
            opens,
            rounds,
            kernel,
            ..
        } if what == "opens" => bench_opens("bench-opens.sh", opens, rounds, &kernel),
        Task::Bench {
            what,
            opens,
            rounds,
            kernel,
            ..
        } if what == "analysis" => bench_opens("bench-analysis.sh", opens, rounds, &kernel),
        Task::Bench {
            what,
            kernel,
            calls,
            ..
        } if what == "filter" => bench_filter(calls, &kernel),
        Task::Bench {
            what,
            opens,
            rounds,
            functions,
            kernel,
            ..
        } if what == "calls" => bench_calls(opens, rounds, functions, &kernel),
        Task::Bench {
            what,
            rounds,
            kernel,
            calls,
            rates,
            workloads,
            probes,
            profile,
            native,
            baseline,
            ..
        } if what == "live" => bench_live(&LiveArgs {
            rounds,
            kernel,
            calls,
            rates,
            workloads,
            probes,
            profile,
            native,
            baseline,
        }),
        Task::Bench {
            functions, kernel, ..
        } => bench_attach(functions, &kernel),
        _ => bail!("bench() was handed a task that is not a benchmark"),
    }
}

/// The options of `bench live` as given.
struct LiveArgs {
    rounds: u32,
    kernel: String,
    calls: u64,
    rates: String,
    workloads: String,
    probes: String,
    profile: bool,
    native: bool,
    baseline: Option<PathBuf>,
}

fn live_options(
    kprobe_perf: PathBuf,
    rounds: u32,
    calls: u64,
    rates: &str,
    workloads: &str,
    probes: &str,
    profile: bool,
) -> Result<live::LiveOptions> {
    if rounds == 0 || calls == 0 {
        bail!("--rounds and --calls must be at least 1");
    }
    let workloads = workloads
        .split(',')
        .filter(|w| !w.is_empty())
        .map(live::CallKind::parse)
        .collect::<Result<Vec<_>>>()?;
    let probes: Vec<String> = probes
        .split(',')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    if let Some(p) = probes
        .iter()
        .find(|p| !live::PROBE_KINDS.contains(&p.as_str()))
    {
        bail!("--probes takes {}, not {p:?}", live::PROBE_KINDS.join(", "));
    }
    Ok(live::LiveOptions {
        kprobe_perf,
        baseline: None,
        rounds,
        calls,
        rates: live::parse_rates(rates)?,
        workloads,
        profile,
        probes,
    })
}

/// `bench live`: builds kprobe-perf, then measures in the VM, or here
/// with --native (uprobes only).
fn bench_live(a: &LiveArgs) -> Result<()> {
    cargo_release(
        &["--package", "kprobe-perf", "--bin", "kprobe-perf"],
        "kprobe-perf",
    )?;
    let kp = PathBuf::from(release_path("kprobe-perf"));
    if a.native {
        let mut opts = live_options(
            kp,
            a.rounds,
            a.calls,
            &a.rates,
            &a.workloads,
            &a.probes,
            a.profile,
        )?;
        if opts.workloads.contains(&live::CallKind::Open) {
            eprintln!("xtask: --native measures uprobes only (the `call` workload): this host has no kprobes");
        }
        opts.workloads = vec![live::CallKind::Call];
        opts.baseline = a.baseline.clone();
        return live::measure(&opts);
    }
    if a.baseline.is_some() {
        bail!("--baseline is for --native runs (and decode): the VM guest measures one binary");
    }
    // Checked here, where a mistake costs no boot.
    live_options(
        kp.clone(),
        a.rounds,
        a.calls,
        &a.rates,
        &a.workloads,
        &a.probes,
        a.profile,
    )?;
    host::ensure_packages(&[("linux-perf", "/usr/bin/perf"), ("time", "/usr/bin/time")])?;
    let exe = std::env::current_exe().context("finding the xtask executable")?;
    let mut command = vec![
        exe.to_string_lossy().into_owned(),
        "live-guest".into(),
        "--kprobe-perf".into(),
        kp.to_string_lossy().into_owned(),
        format!("--rounds={}", a.rounds),
        format!("--calls={}", a.calls),
        format!("--rates={}", a.rates),
        format!("--workloads={}", a.workloads),
        format!("--probes={}", a.probes),
    ];
    if a.profile {
        command.push("--profile".into());
    }
    bench_in_vm(
        &a.kernel,
        &command,
        Duration::from_secs(4 * 3600),
        "the live benchmark",
    )
}

/// Boots the VM and runs the attach benchmark there, peers included.
fn bench_attach(functions: usize, kernel: &str) -> Result<()> {
    host::ensure_packages(&[
        ("linux-perf", "/usr/bin/perf"),
        ("bpftrace", "/usr/bin/bpftrace"),
    ])?;
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(workspace_root())
            .args([
                "build",
                "--quiet",
                "--release",
                "--package",
                "kprobe-perf-bench",
                "--bin",
                "attach_bench",
            ])
            .status()
            .context("running cargo")?;
    if !status.success() {
        bail!("building attach_bench failed");
    }
    let kernel = kernels::resolve(kernel, &vm_cache().join("kernels"))?;
    let exe = workspace_root().join("target/release/attach_bench");
    let outcome = vm::run(&vm::VmRun {
        kernel: &kernel,
        command: &[
            exe.to_string_lossy().into_owned(),
            functions.to_string(),
            "42".into(),
            "--workload".into(),
            // On a kernel with fprobe events: 1,000 and 10,000 functions
            // through fprobe against bpftrace (kprobe_multi) and perf.
            "--fprobe".into(),
            "1000,10000".into(),
        ],
        cwd: workspace_root(),
        env: passthrough_env(),
        timeout: Duration::from_secs(3600),
        silence: Duration::from_secs(3600),
        echo: vm::Echo::All,
        label: None,
        work_dir: vm_cache(),
        append: "",
    })?;
    report_problems(&outcome);
    if !outcome.success() {
        bail!("the attach benchmark failed");
    }
    Ok(())
}

/// Builds, in release, kprobe-perf and the tests' `open_loop` workload
/// the VM benchmarks run.
fn build_kprobe_perf_and_open_loop() -> Result<()> {
    cargo_release(
        &[
            "--package",
            "kprobe-perf",
            "--package",
            "kprobe-perf-tests",
            "--bin",
            "kprobe-perf",
            "--bin",
            "open_loop",
        ],
        "kprobe-perf and open_loop",
    )?;
    Ok(())
}

/// Boots the VM and runs `xtask/SCRIPT` there: the cost per call on
/// do_sys_openat2 of kprobe-perf's probes against perf's (bench-opens.sh),
/// or of stat, latency and count-by against perf and bpftrace
/// (bench-analysis.sh).
fn bench_opens(script: &str, opens: u64, rounds: u32, kernel: &str) -> Result<()> {
    host::ensure_packages(&[("linux-perf", "/usr/bin/perf")])?;
    build_kprobe_perf_and_open_loop()?;
    bench_in_vm(
        kernel,
        &[
            "sh".into(),
            workspace_root()
                .join("xtask")
                .join(script)
                .to_string_lossy()
                .into_owned(),
            release_path("kprobe-perf"),
            release_path("open_loop"),
            opens.to_string(),
            rounds.to_string(),
        ],
        Duration::from_secs(3600),
        &format!("the benchmark {script}"),
    )
}

/// Boots the VM and runs `xtask/bench-calls.sh` there: `kprobe-perf
/// calls`' attach time, its cost per traced call against function_graph
/// and its rebuild rate from a file.
fn bench_calls(opens: u64, rounds: u32, functions: usize, kernel: &str) -> Result<()> {
    build_kprobe_perf_and_open_loop()?;
    bench_calls_rebuild()?;
    bench_in_vm(
        kernel,
        &[
            "sh".into(),
            workspace_root()
                .join("xtask")
                .join("bench-calls.sh")
                .to_string_lossy()
                .into_owned(),
            release_path("kprobe-perf"),
            release_path("open_loop"),
            opens.to_string(),
            rounds.to_string(),
            functions.to_string(),
        ],
        Duration::from_secs(3600),
        "the calls benchmark",
    )
}

/// The rebuild from a file, natively (no kprobe is needed to read one):
/// the bench harness calls_bench writes a made-up `calls -o` file of
/// 2,000,000 events and one of 8 (the start-up), and `kprobe-perf calls
/// [--json] -i FILE > /dev/null` is timed on each, best of 3.
fn bench_calls_rebuild() -> Result<()> {
    let dir = workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (big, small) = (dir.join("calls-big.data"), dir.join("calls-small.data"));
    for (n, f) in [(2_000_000u64, &big), (8, &small)] {
        run_harness(
            "calls_bench",
            &[n.to_string(), f.to_string_lossy().into_owned()],
        )?;
    }
    let kp = PathBuf::from(release_path("kprobe-perf"));
    println!("| calls -i FILE > /dev/null (natively) | seconds (best of 3, wall) | M events/s |");
    println!("|---|---|---|");
    for (what, file, events, json) in [
        ("start-up (8 events, --json)", &small, 8u64, true),
        ("2,000,000 events, errors mode", &big, 2_000_000, false),
        ("2,000,000 events, --json", &big, 2_000_000, true),
    ] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let devnull = std::fs::File::create("/dev/null").context("opening /dev/null")?;
            let mut cmd = std::process::Command::new(&kp);
            cmd.arg("calls");
            if json {
                cmd.arg("--json");
            }
            let start = std::time::Instant::now();
            let status = cmd
                .arg("-i")
                .arg(file)
                .stdout(devnull)
                .stderr(std::process::Stdio::null())
                .status()
                .context("running kprobe-perf calls -i")?;
            best = best.min(start.elapsed().as_secs_f64());
            if !status.success() {
                bail!("kprobe-perf calls -i {} failed ({status})", file.display());
            }
        }
        let rate = if events > 8 {
            format!("{:.2}", events as f64 / best / 1e6)
        } else {
            String::new()
        };
        println!("| {what} | {best:.4} | {rate} |");
    }
    Ok(())
}

/// `cargo build --quiet --release ARGS` in the workspace; `what` names
/// what failed.
fn cargo_release(args: &[&str], what: &str) -> Result<()> {
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(workspace_root())
            .args(["build", "--quiet", "--release"])
            .args(args)
            .status()
            .context("running cargo")?;
    if !status.success() {
        bail!("building {what} failed");
    }
    Ok(())
}

/// The release build directory the VM sees (`target/release/...`).
fn release_path(p: &str) -> String {
    vm_cache()
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release")
        .join(p)
        .to_string_lossy()
        .into_owned()
}

/// Boots `kernel` and runs a benchmark's `command` there, its output
/// shown as it comes; `what` names the benchmark if it fails.
fn bench_in_vm(kernel: &str, command: &[String], timeout: Duration, what: &str) -> Result<()> {
    let kernel = kernels::resolve(kernel, &vm_cache().join("kernels"))?;
    let outcome = vm::run(&vm::VmRun {
        kernel: &kernel,
        command,
        cwd: workspace_root(),
        env: passthrough_env(),
        timeout,
        silence: timeout,
        echo: vm::Echo::All,
        label: None,
        work_dir: vm_cache(),
        append: "",
    })?;
    report_problems(&outcome);
    if !outcome.success() {
        bail!("{what} failed");
    }
    Ok(())
}

/// Boots the VM and runs `xtask/bench-filter.sh` there: the ring bytes of
/// a uprobe recorded without a filter and with one keeping 1% of `calls`
/// calls (the engine's filter_bytes example on the filter_calls workload).
fn bench_filter(calls: u64, kernel: &str) -> Result<()> {
    cargo_release(
        &["--package", "kprobe-perf-tests", "--bin", "filter_calls"],
        "filter_calls",
    )?;
    cargo_release(
        &[
            "--package",
            "kprobe-perf-engine",
            "--example",
            "filter_bytes",
        ],
        "filter_bytes",
    )?;
    let script = workspace_root().join("xtask").join("bench-filter.sh");
    bench_in_vm(
        kernel,
        &[
            "sh".into(),
            script.to_string_lossy().into_owned(),
            release_path("examples/filter_bytes"),
            release_path("filter_calls"),
            calls.to_string(),
        ],
        Duration::from_secs(1800),
        "the filter benchmark",
    )
}

/// Decoding speed: the engine's decode_bench example (binary sink, and a
/// perf.data file of the same samples), then `kprobe-perf script` and
/// `perf script` on that file, each to /dev/null, timed here; with
/// `baseline`, an earlier kprobe-perf binary is timed in the same rounds.
fn bench_decode(samples: usize, baseline: Option<&Path>) -> Result<()> {
    host::ensure_packages(&[("linux-perf", "/usr/bin/perf")])?;
    cargo_release(
        &["--package", "kprobe-perf", "--bin", "kprobe-perf"],
        "kprobe-perf",
    )?;
    let target = vm_cache()
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let dir = target.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("decode.data");
    run_harness(
        "decode_bench",
        &[samples.to_string(), file.to_string_lossy().into_owned()],
    )?;
    let mut tools = vec![
        ("kprobe-perf", target.join("release/kprobe-perf")),
        ("perf", PathBuf::from("perf")),
    ];
    if let Some(b) = baseline {
        tools.push(("baseline kprobe-perf", b.to_path_buf()));
    }
    // Best of 3 for each, taken in turn, so that a slow moment of the
    // machine weighs on no side alone.
    let mut best = vec![f64::MAX; tools.len()];
    for _ in 0..3 {
        for (i, (_, exe)) in tools.iter().enumerate() {
            best[i] = best[i].min(time_script(exe, &file)?);
        }
    }
    print_decode_figures(samples, &tools, &best);
    Ok(())
}

/// Seconds one `PROGRAM script -i FILE > /dev/null` takes.
fn time_script(program: &Path, file: &Path) -> Result<f64> {
    let devnull = std::fs::File::create("/dev/null").context("opening /dev/null")?;
    let start = std::time::Instant::now();
    let status = std::process::Command::new(program)
        .args(["script".as_ref(), "-i".as_ref(), file.as_os_str()])
        .stdout(devnull)
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running {}", program.display()))?;
    let secs = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{} failed ({status})", program.display());
    }
    Ok(secs)
}

/// The decode bench's lines: each tool's best time and rate, the ratio to
/// perf, and the current build against the baseline when there is one.
fn print_decode_figures(samples: usize, tools: &[(&str, PathBuf)], best: &[f64]) {
    let rate = |secs: f64| samples as f64 / secs / 1e6;
    for ((name, _), secs) in tools.iter().zip(best) {
        println!(
            "{name} script -i decode.data > /dev/null: {samples} samples in {:.1} ms (best of 3): {:.2} M events/s",
            secs * 1e3,
            rate(*secs)
        );
    }
    println!(
        "ratio: kprobe-perf script is {:.1}x the event rate of perf script (goal: 15x)",
        best[1] / best[0]
    );
    if let Some(base) = best.get(2) {
        println!(
            "ratio: this build takes {:.3}x the baseline's time (1.000: unchanged)",
            best[0] / base
        );
    }
}

/// Runs a harness of the kprobe-perf-bench crate in release mode.
fn run_harness(name: &str, args: &[String]) -> Result<()> {
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(workspace_root())
            .args([
                "run",
                "--quiet",
                "--release",
                "--package",
                "kprobe-perf-bench",
                "--bin",
                name,
                "--",
            ])
            .args(args)
            .status()
            .context("running cargo")?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Environment variables carried into the guest.
pub fn passthrough_env() -> Vec<(String, String)> {
    ["RUST_BACKTRACE", "RUST_LOG", "KPROBE_PERF_LOG"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// Prints a failed run's problems and the console lines leading up to them.
pub fn report_problems(outcome: &vm::VmOutcome) {
    if outcome.problems.is_empty() {
        return;
    }
    for p in &outcome.problems {
        eprintln!("xtask: VM problem: {p}");
    }
    eprintln!("xtask: last console lines:");
    for l in &outcome.console_tail {
        eprintln!("  | {l}");
    }
}
