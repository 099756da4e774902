//! Helpers for kprobe-perf's privileged integration tests.
//!
//! These tests run inside the VM (`cargo xtask test` boots Debian kernels
//! with kprobes and sets `KPROBE_PERF_IN_VM`). There, a test that cannot run
//! fails. Elsewhere it is skipped with the reason printed.
//!
//! # Skipping a test
//!
//! libtest has no "skipped" outcome, so a test that cannot run here calls
//! one of the two helpers below and returns; `cargo xtask test` finds the
//! line they print (`SKIP <test>: <reason>`, at the start of a line) and
//! counts the test as skipped, not passed:
//!
//! ```no_run
//! # use kprobe_perf_tests::{skip, skip_here};
//! #[test]
//! fn my_test() {
//!     if !std::path::Path::new("/usr/bin/perf").exists() {
//!         // Missing privilege or tool: panics inside the VM, where
//!         // everything a privileged test needs is there.
//!         return skip("my_test", "perf is not installed (apt-get install linux-perf)");
//!     }
//!     if kprobe_perf_tests::online_cpus().len() < 2 {
//!         // The machine's shape, not a missing piece: skips in the VM too.
//!         return skip_here("my_test", "it needs 2 online CPUs");
//!     }
//!     // ...
//! }
//! ```
//!
//! [`kprobes_available`] and the other `*_available` style checks call
//! [`skip`] themselves. Write the test's own function name: the summary
//! lists it.

use std::path::PathBuf;

pub mod perf_control;
pub mod readme;

/// The kernel label when running inside the xtask VM.
pub fn vm_kernel() -> Option<String> {
    std::env::var("KPROBE_PERF_IN_VM").ok()
}

/// The fixed form of a skip line, as `cargo xtask test` parses it.
pub fn skip_line(test: &str, reason: &str) -> String {
    format!("SKIP {test}: {reason}")
}

/// Skips `test` because something it needs is missing here (privilege, a
/// kernel feature, a tool): prints `SKIP <test>: <reason>`. Inside the VM
/// it panics instead, since there every privileged test must run. The
/// caller returns right after (`return skip(...)`).
pub fn skip(test: &str, reason: &str) {
    if let Some(k) = vm_kernel() {
        panic!("{test} must not skip inside the VM (kernel {k}): {reason}");
    }
    println!("{}", skip_line(test, reason));
}

/// The line kprobe-perf prints when it mounted tracefs itself (a fresh
/// machine, where no earlier test or user mounted it).
pub const TRACEFS_MOUNTED_NOTE: &str = "kprobe-perf: tracefs was not mounted; mounted it at /sys/kernel/tracing for the probes that need it, and left it mounted, as perf does\n";

/// A command's stderr without the one line that says kprobe-perf mounted
/// tracefs, which a recording prints only when it is the first to need
/// it: the rest is the same on a fresh machine and a used one.
pub fn without_mount_note(stderr: &str) -> String {
    stderr.replacen(TRACEFS_MOUNTED_NOTE, "", 1)
}

/// Skips `test` because the machine is not the shape it tests (a kernel
/// that has the feature whose absence is tested, a single CPU): prints
/// `SKIP <test>: <reason>`, inside the VM too.
pub fn skip_here(test: &str, reason: &str) {
    println!("{}", skip_line(test, reason));
}

/// Where the VM tests (and the host) find bpftrace.
pub const BPFTRACE: &str = "/usr/bin/bpftrace";

/// True when bpftrace is installed and runs a program here. Inside the VM
/// a missing or failing bpftrace fails the test, with the reason ([`skip`]
/// panics there); elsewhere the test is skipped.
pub fn bpftrace_runs(test: &str) -> bool {
    if !std::path::Path::new(BPFTRACE).exists() {
        skip(
            test,
            &format!("{BPFTRACE} is not installed (apt-get install bpftrace)"),
        );
        return false;
    }
    let check = std::process::Command::new(BPFTRACE)
        .env("HOME", std::env::temp_dir())
        .args(["-e", "BEGIN { exit(); }"])
        .output();
    match check {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            skip(
                test,
                &format!(
                    "bpftrace cannot run a program here ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            );
            false
        }
        Err(e) => {
            skip(test, &format!("{BPFTRACE} cannot be started: {e}"));
            false
        }
    }
}

/// The C library the calling test runs with, from its own mappings.
pub fn libc_path() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .map(str::to_string)
}

/// True when kprobes can be opened here. Inside the VM, panics instead of
/// returning false; outside, prints why the test is skipped ([`skip`]).
pub fn kprobes_available(test: &str) -> bool {
    match kprobe_perf_engine::testing::preflight() {
        Ok(_) => true,
        Err(e) => {
            skip(test, &e.to_string());
            false
        }
    }
}

/// True when uprobes can be opened here: the uprobe PMU exists and this
/// process holds CAP_SYS_ADMIN, which uprobes need on kernels with the
/// 6.16 change (and its stable backports; CAP_PERFMON is not enough there).
/// Inside the VM, panics instead of returning false; outside, prints why
/// the test is skipped ([`skip`]).
pub fn uprobes_available(test: &str) -> bool {
    let pmu = std::path::Path::new("/sys/bus/event_source/devices/uprobe").exists();
    let admin = kprobe_perf_engine::cli::os::effective_capabilities()
        .is_ok_and(|c| c & (1u64 << kprobe_perf_engine::cli::os::CAP_SYS_ADMIN) != 0);
    if !(pmu && admin) {
        skip(test, "no uprobe PMU here, or no CAP_SYS_ADMIN");
    }
    pmu && admin
}

/// The online CPUs (/sys/devices/system/cpu/online): the VM has as many as
/// `KPROBE_PERF_VM_SMP` says (2 by default); tests read them, never assume.
pub fn online_cpus() -> Vec<u32> {
    kprobe_perf_engine::cli::cpus::online_cpus().expect("reading the online CPUs")
}

/// The possible CPUs (/sys/devices/system/cpu/possible), which size the
/// kernel's per-CPU tables (kretprobe instances among them).
pub fn possible_cpus() -> Vec<u32> {
    kprobe_perf_engine::cli::cpus::possible_cpus().expect("reading the possible CPUs")
}

/// The `kprobe-perf` binary built next to this test (`target/<profile>/`),
/// or `KPROBE_PERF_BIN`.
pub fn kprobe_perf_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KPROBE_PERF_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/kprobe-perf
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let bin = dir.join("kprobe-perf");
    assert!(
        bin.exists(),
        "{} not found: build it first (cargo build -p kprobe-perf) or set KPROBE_PERF_BIN",
        bin.display()
    );
    bin
}

/// The engine's example `name` built next to this test
/// (`target/<profile>/examples/`), as `cargo xtask test` builds them
/// (`cargo build --release -p kprobe-perf-engine --example NAME`).
pub fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/examples/<name>
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("examples").join(name))
        .unwrap_or_default();
    assert!(
        bin.exists(),
        "{} not found: build it first (cargo build --release -p kprobe-perf-engine --example {name})",
        bin.display()
    );
    bin
}

/// The running kernel's architecture: `/proc/sys/kernel/arch` (what
/// `uname -m` says), the build's own when that file is missing.
pub fn kernel_arch() -> kprobe_perf_arch::Arch {
    std::fs::read_to_string("/proc/sys/kernel/arch")
        .ok()
        .and_then(|m| kprobe_perf_arch::Arch::from_machine(&m))
        .or_else(kprobe_perf_arch::Arch::host)
        .unwrap_or(kprobe_perf_arch::Arch::X86_64)
}

/// A probe definition written with x86_64 argument registers (`%di`,
/// `%si`, `%dx`, `%cx`, `%r8`, `%r9`) and `%ax`, for the running kernel:
/// unchanged on x86_64, `%x0`..`%x5` and `%x0` on arm64.
pub fn for_kernel(definition: &str) -> String {
    match kernel_arch() {
        kprobe_perf_arch::Arch::Aarch64 => {
            let mut d = definition.to_string();
            for (x86, arm) in [
                ("%di", "%x0"),
                ("%si", "%x1"),
                ("%dx", "%x2"),
                ("%cx", "%x3"),
                ("%r8", "%x4"),
                ("%r9", "%x5"),
                ("%ax", "%x0"),
            ] {
                d = d.replace(x86, arm);
            }
            d
        }
        _ => definition.to_string(),
    }
}

/// xorshift64*: seeded randomness for tests (print the seed so a failure
/// can be replayed).
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The perf_event descriptors process `pid` holds (`anon_inode:[perf_event]`
/// links in /proc/PID/fd).
pub fn perf_event_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| l.to_string_lossy() == "anon_inode:[perf_event]")
                .count()
        })
        .unwrap_or(0)
}

/// Waits (up to 120 s) until the recorder `pid` holds at least `fds`
/// perf events and their number has not changed for 300 ms, then 500 ms
/// more (it enables them right after opening the last): a fixed sleep
/// was too short on a loaded host under single-threaded TCG.
pub fn wait_until_recording(pid: u32, fds: usize) {
    let started = std::time::Instant::now();
    let mut last = (0usize, std::time::Instant::now());
    loop {
        let n = perf_event_fds(pid);
        if n != last.0 {
            last = (n, std::time::Instant::now());
        } else if n >= fds && last.1.elapsed() >= std::time::Duration::from_millis(300) {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the recorder (pid {pid}) held {n} perf events after 120 s, {fds} expected"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
}

/// Keeps the calling thread on the CPU it runs on until dropped (then
/// its former CPU mask is restored): for counts that must not depend on
/// migration between per-CPU events.
pub struct PinnedToThisCpu {
    former: libc::cpu_set_t,
}

impl PinnedToThisCpu {
    /// Pins the calling thread to its current CPU.
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity and
        // sched_setaffinity read or fill exactly size_of::<cpu_set_t>()
        // bytes of the sets passed, and pid 0 is the calling thread.
        unsafe {
            let mut former: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut former) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            let cpu = libc::sched_getcpu();
            if cpu < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut one);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(PinnedToThisCpu { former })
        }
    }
}

impl Drop for PinnedToThisCpu {
    fn drop(&mut self) {
        // SAFETY: as in new(): a full cpu_set_t for the calling thread.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.former);
        }
    }
}

/// A file of the running kernel's unpacked -dbg package under
/// `target/vm/kernels/` (in the VM, the harness's kernels), its path
/// within the package made from the running kernel's release by `rel`.
pub fn running_kernel_debug_file(rel: impl Fn(&str) -> String) -> Option<PathBuf> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let path = rel(release.trim());
    let kernels = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vm/kernels");
    std::fs::read_dir(kernels).ok()?.flatten().find_map(|d| {
        let p = d.path().join(&path);
        p.is_file().then_some(p)
    })
}

/// perf probe -D's definitions named as `perf probe -a` (and kprobe-perf)
/// name the sites of one probe: -D prints one name on each, where the
/// second site of `EVENT` becomes `EVENT_1`, the third `EVENT_2`.
pub fn numbered_like_perf_probe(lines: &[String]) -> Vec<String> {
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    lines
        .iter()
        .map(|l| {
            let (head, rest) = l.split_once(' ').unwrap_or((l, ""));
            let n = seen.entry(head.to_string()).or_default();
            let named = match *n {
                0 => l.clone(),
                k => format!("{head}_{k} {rest}"),
            };
            *n += 1;
            named
        })
        .collect()
}

/// A C program of `tests/data`, built for one test in a directory of its
/// own, removed when dropped.
pub struct CProgram {
    /// The directory.
    pub dir: PathBuf,
    /// The built executable.
    pub bin: PathBuf,
}

impl Drop for CProgram {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Builds `tests/data/NAME.c` with `cc FLAGS` into a new directory for
/// `test`, the executable named NAME; `None` (after a SKIP line saying
/// why) where it cannot be built.
pub fn build_c(test: &str, name: &str, flags: &[&str]) -> Option<CProgram> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("data/{name}.c"));
    let dir = std::env::temp_dir().join(format!(
        "kpf-{}-{test}-{}",
        name.replace('_', "-"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join(name);
    let built = std::process::Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status();
    match built {
        Ok(s) if s.success() => Some(CProgram { dir, bin }),
        r => {
            let _ = std::fs::remove_dir_all(&dir);
            skip_here(
                test,
                &format!(
                    "cannot build {} with `cc {}` here ({r:?})",
                    src.display(),
                    flags.join(" ")
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_lines_have_one_form() {
        assert_eq!(skip_line("t", "no perf"), "SKIP t: no perf");
    }
}

/// The README, whose Rust block (the embedding example) is compiled as a
/// doctest of this crate, so it keeps up with the engine's API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
