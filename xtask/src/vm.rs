//! Boots a kernel under QEMU with a busybox initramfs, shows the host's root
//! file system read-only inside (9p), runs one command in it and reports the
//! command's output and exit status.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::kernels::{GuestArch, Kernel};

const READY: &str = "KPROBE_PERF_VM_READY";
const EXIT: &str = "KPROBE_PERF_VM_EXIT";
const DMESG: &str = "KPROBE_PERF_VM_DMESG";

/// Modules needed for the 9p root, roots of a dependency closure.
const ROOT_MODULES: &[&str] = &["virtio_pci", "9pnet_virtio", "9p"];

/// Options of one VM run.
pub(crate) struct VmRun<'a> {
    pub kernel: &'a Kernel,
    pub command: &'a [String],
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// The longest the guest may print nothing before it is taken for
    /// hung: a slow guest that keeps printing results is alive, however
    /// long it runs (within `timeout`).
    pub silence: Duration,
    /// What of the command's output to print as it arrives.
    pub echo: Echo,
    /// With `echo`, put `[label] ` before each line (VMs run side by side).
    pub label: Option<String>,
    pub work_dir: PathBuf,
    /// More kernel command-line parameters, after the harness's own
    /// (e.g. the `kprobe_event=` ... that `kprobe-perf boot` prints).
    pub append: &'a str,
}

/// What a VM run prints of its command's output as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Echo {
    /// Every line.
    All,
    /// A libtest run's digest ([`crate::testlog::Digest`]): verdicts, skip
    /// lines and failures, not the captured output of passing tests.
    Digest,
}

/// What came back from the guest.
#[derive(Debug)]
pub struct VmOutcome {
    /// The command's exit status; `None` when the guest never reported one.
    pub status: Option<i32>,
    /// The command's output (stdout and stderr interleaved, as on the console).
    pub output: String,
    /// Seconds from QEMU start to the guest being ready to run the command.
    pub boot_secs: Option<f64>,
    /// Kernel warnings, oopses, panics or a timeout: any of them is a failure.
    pub problems: Vec<String>,
    /// The last console lines, for diagnosing a failure.
    pub console_tail: Vec<String>,
    /// Each libtest test's name and seconds, from when its verdict line
    /// arrived after the line before it (the VM runs tests serially).
    pub test_secs: Vec<(String, f64)>,
}

impl VmOutcome {
    /// The `n` slowest tests, slowest first, as `NAME SECS s`.
    pub fn slowest(&self, n: usize) -> Vec<String> {
        let mut all: Vec<&(String, f64)> = self.test_secs.iter().collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        all.iter()
            .take(n)
            .map(|(name, secs)| format!("{name} {secs:.0} s"))
            .collect()
    }
}

impl VmOutcome {
    /// True when the command ran, exited 0, and the kernel stayed healthy.
    pub fn success(&self) -> bool {
        self.status == Some(0) && self.problems.is_empty()
    }
}

/// Boots the VM and runs the command.
pub(crate) fn run(opts: &VmRun) -> Result<VmOutcome> {
    std::fs::create_dir_all(&opts.work_dir)?;
    // One file per VM, also when one process boots several at once.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let initramfs = opts
        .work_dir
        .join(format!("initramfs-{}-{run}.cpio", std::process::id()));
    build_initramfs(opts, &initramfs)?;
    let result = boot(opts, &initramfs);
    let _ = std::fs::remove_file(&initramfs);
    result
}

/// The guest's kernel command line: the harness's parameters, then
/// `append`'s.
fn kernel_command_line(arch: GuestArch, console: &str, append: &str) -> String {
    let mut own =
        format!("console={console} quiet loglevel=3 panic=-1 rdinit=/init watchdog_thresh=60");
    // x86_64: no_timer_check skips the boot's check that the IO-APIC's
    // timer ticks within a few loops; a starved TCG guest on a busy host
    // failed it ("IO-APIC + timer doesn't work!", a panic) in 3 of a few
    // dozen boots at load 15. The timer works: a retry booted.
    if arch == GuestArch::X86_64 {
        own.push_str(" no_timer_check");
    }
    match append.trim() {
        "" => own,
        more => format!("{own} {more}"),
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The first path component of `cwd` under `/tmp`, if any: the guest's
/// `/tmp` is a tmpfs, so that directory of the host is bound back into it.
fn tmp_component(cwd: &Path) -> Option<String> {
    let rest = cwd.strip_prefix("/tmp").ok()?;
    rest.components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
}

/// The start of every guest's /init: busybox's applets, `dirs` made,
/// /proc, /sys and /dev mounted, and `modules` loaded in order.
fn init_prologue(dirs: &str, modules: &[String]) -> String {
    let mut s = format!(
        r#"#!/bin/busybox sh
/bin/busybox mkdir -p {dirs}
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
"#
    );
    for m in modules {
        s.push_str(&format!(
            "insmod /modules/{m} || echo 'kprobe-perf-vm: insmod {m} failed'\n"
        ));
    }
    s
}

fn init_script(modules: &[String], keep_tmp: Option<&str>) -> String {
    let mut s = init_prologue("/bin /sbin /proc /sys /dev /mnt", modules);
    s.push_str(&format!(
        r#"fail() {{ echo "kprobe-perf-vm: $*"; echo "{EXIT} 125"; echo o > /proc/sysrq-trigger; sleep 10; }}
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 hostroot /mnt || fail "cannot mount the host file system over 9p"
mkdir -p /hosttmp
mount -o bind /mnt/tmp /hosttmp
mount -t tmpfs -o mode=1777 tmpfs /mnt/tmp || fail "cannot mount /tmp"
{keep}mount -t proc proc /mnt/proc
mount -t sysfs sysfs /mnt/sys
mount -t devtmpfs devtmpfs /mnt/dev
mkdir -p /mnt/dev/shm /mnt/dev/pts
mount -t tmpfs tmpfs /mnt/dev/shm
mount -t devpts devpts /mnt/dev/pts
mount -t debugfs debugfs /mnt/sys/kernel/debug
mount -t tracefs tracefs /mnt/sys/kernel/tracing
mount -t cgroup2 cgroup2 /mnt/sys/fs/cgroup 2>/dev/null
mkdir -p /mnt/tmp/.kprobe-perf-vm
cp /cmd.sh /mnt/tmp/.kprobe-perf-vm/cmd.sh
echo "{READY} $(cut -d' ' -f1 /proc/uptime)"
chroot /mnt /bin/sh /tmp/.kprobe-perf-vm/cmd.sh </dev/null 2>&1
rc=$?
dmesg | grep -E 'Oops|BUG:|WARNING:|Kernel panic|general protection|Call Trace' | sed 's/^/{DMESG} /'
echo "{EXIT} $rc"
# Let the console print that line whole before the power-off message.
sleep 1
echo o > /proc/sysrq-trigger
sleep 10
"#,
        keep = keep_tmp
            .map(|c| {
                let q = shell_quote(c);
                format!("mkdir -p /mnt/tmp/{q} && mount -o bind /hosttmp/{q} /mnt/tmp/{q}\n")
            })
            .unwrap_or_default()
    ));
    s
}

/// The arm64 guest's /init: the host's root is x86_64, so it is mounted
/// at /host and not chrooted into; its top-level directories other than
/// the system ones (/work, /root, /home ...) are linked at the same paths,
/// so paths baked into test binaries resolve. The command runs with the
/// arm64 busybox's applets as its only tools.
fn init_script_arm64(modules: &[String], keep_tmp: Option<&str>) -> String {
    let mut s = init_prologue("/bin /sbin /proc /sys /dev /host /tmp /etc", modules);
    s.push_str(&format!(
        r#"fail() {{ echo "kprobe-perf-vm: $*"; echo "{EXIT} 125"; echo o > /proc/sysrq-trigger; sleep 10; }}
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 hostroot /host || fail "cannot mount the host file system over 9p"
mount -t tmpfs -o mode=1777 tmpfs /tmp || fail "cannot mount /tmp"
{keep}for d in /host/*; do
  n=${{d#/host/}}
  case "$n" in
    bin|sbin|lib|lib32|lib64|libx32|usr|etc|proc|sys|dev|tmp|run|host|init|modules|cmd.sh|lost+found) ;;
    *) [ -e "/$n" ] || ln -s "$d" "/$n" ;;
  esac
done
echo kprobe-perf-vm > /etc/hostname
hostname kprobe-perf-vm
echo 'root:x:0:0:root:/tmp:/bin/sh' > /etc/passwd
echo 'root:x:0:' > /etc/group
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
echo "{READY} $(cut -d' ' -f1 /proc/uptime)"
/bin/sh /cmd.sh </dev/null 2>&1
rc=$?
dmesg | grep -E 'Oops|BUG:|WARNING:|Kernel panic|general protection|Call Trace' | sed 's/^/{DMESG} /'
echo "{EXIT} $rc"
# Let the console print that line whole before the power-off message.
sleep 1
echo o > /proc/sysrq-trigger
sleep 10
"#,
        keep = keep_tmp
            .map(|c| {
                let q = shell_quote(c);
                format!("mkdir -p /tmp/{q} && mount -o bind /host/tmp/{q} /tmp/{q}\n")
            })
            .unwrap_or_default()
    ));
    s
}

fn command_script(opts: &VmRun) -> String {
    let path = match opts.kernel.arch {
        GuestArch::X86_64 => "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        GuestArch::Arm64 => "/bin",
    };
    let mut s = format!("export PATH={path}\nexport HOME=/tmp TMPDIR=/tmp\n");
    s.push_str(&format!(
        "export KPROBE_PERF_IN_VM={}\n",
        shell_quote(&opts.kernel.label)
    ));
    for (k, v) in &opts.env {
        s.push_str(&format!("export {k}={}\n", shell_quote(v)));
    }
    s.push_str(&format!(
        "cd {} || exit 126\n",
        shell_quote(&opts.cwd.to_string_lossy())
    ));
    let argv: Vec<String> = opts.command.iter().map(|a| shell_quote(a)).collect();
    s.push_str(&format!("exec {}\n", argv.join(" ")));
    s
}

/// Module files in load order (dependencies first), skipping built-ins.
fn module_closure(modules_dir: &Path) -> Result<Vec<PathBuf>> {
    let dep_file = modules_dir.join("modules.dep");
    if !dep_file.exists() {
        let release = modules_dir
            .file_name()
            .and_then(|n| n.to_str())
            .context("module directory has no release name")?;
        let base = modules_dir
            .parent()
            .and_then(|p| p.parent())
            .and_then(|p| p.parent())
            .context("module directory is not <root>/lib/modules/<release>")?;
        crate::host::run_status(
            Command::new("depmod").arg("-b").arg(base).arg(release),
            "depmod",
        )?;
    }
    let deps = std::fs::read_to_string(&dep_file)
        .with_context(|| format!("reading {}", dep_file.display()))?;
    let mut table = std::collections::HashMap::new();
    for line in deps.lines() {
        if let Some((m, rest)) = line.split_once(':') {
            table.insert(
                m.to_string(),
                rest.split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            );
        }
    }
    let name_of = |p: &str| {
        let file = p.rsplit('/').next().unwrap_or(p);
        file.split(".ko").next().unwrap_or(file).replace('-', "_")
    };
    let mut order: Vec<String> = Vec::new();
    fn visit(
        m: &str,
        table: &std::collections::HashMap<String, Vec<String>>,
        order: &mut Vec<String>,
    ) {
        if order.iter().any(|o| o == m) {
            return;
        }
        if let Some(deps) = table.get(m) {
            for d in deps {
                visit(d, table, order);
            }
        }
        order.push(m.to_string());
    }
    for root in ROOT_MODULES {
        if let Some(path) = table.keys().find(|k| name_of(k) == *root) {
            let path = path.clone();
            visit(&path, &table, &mut order);
        }
        // Absent from modules.dep: built into this kernel.
    }
    Ok(order.iter().map(|m| modules_dir.join(m)).collect())
}

fn build_initramfs(opts: &VmRun, out: &Path) -> Result<()> {
    let mut cpio = Cpio::default();
    cpio.dir("bin");
    cpio.dir("modules");
    let busybox_path = opts
        .kernel
        .busybox
        .clone()
        .unwrap_or_else(|| PathBuf::from("/bin/busybox"));
    let busybox = std::fs::read(&busybox_path)
        .with_context(|| format!("reading {} (busybox-static)", busybox_path.display()))?;
    cpio.file("bin/busybox", 0o755, &busybox);
    let mut names = Vec::new();
    if let Some(modules_dir) = &opts.kernel.modules {
        for path in module_closure(modules_dir)? {
            let file = path
                .file_name()
                .and_then(|n| n.to_str())
                .context("bad module file name")?;
            let (name, bytes) = if let Some(stem) = file.strip_suffix(".xz") {
                let out = Command::new("xz")
                    .arg("-dc")
                    .arg(&path)
                    .output()
                    .context("running xz")?;
                if !out.status.success() {
                    bail!("xz -dc {} failed", path.display());
                }
                (stem.to_string(), out.stdout)
            } else {
                (
                    file.to_string(),
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
                )
            };
            cpio.file(&format!("modules/{name}"), 0o644, &bytes);
            names.push(name);
        }
    }
    let keep = tmp_component(&opts.cwd);
    let init = match opts.kernel.arch {
        GuestArch::X86_64 => init_script(&names, keep.as_deref()),
        GuestArch::Arm64 => init_script_arm64(&names, keep.as_deref()),
    };
    cpio.file("init", 0o755, init.as_bytes());
    cpio.file("cmd.sh", 0o644, command_script(opts).as_bytes());
    std::fs::write(out, cpio.finish()).with_context(|| format!("writing {}", out.display()))
}

/// The guest's vCPU count: `DEFAULT_SMP` whatever the host, or
/// `KPROBE_PERF_VM_SMP` (1 to 64). Tests read the real count from the
/// guest's /sys/devices/system/cpu/{online,possible}.
const DEFAULT_SMP: usize = 2;

fn vm_smp(var: Option<&str>) -> Result<usize> {
    match var {
        None => Ok(DEFAULT_SMP),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n @ 1..=64) => Ok(n),
            _ => bail!(
                "KPROBE_PERF_VM_SMP={v:?} is not a vCPU count from 1 to 64; unset it for the default of {DEFAULT_SMP}"
            ),
        },
    }
}

fn boot(opts: &VmRun, initramfs: &Path) -> Result<VmOutcome> {
    // KPROBE_PERF_VM_SMP and KPROBE_PERF_VM_TCG (single|multi) let a
    // developer tell kernel behaviour from emulation artefacts.
    let smp = vm_smp(std::env::var("KPROBE_PERF_VM_SMP").ok().as_deref())?;
    // Single-threaded TCG by default: with one host thread per vCPU, a
    // 6.12 guest once died in __schedule (RIP inside a jump-label NOP)
    // while code was being patched, which real hardware serialises; the
    // VM tests take about 12% longer this way.
    let tcg = match std::env::var("KPROBE_PERF_VM_TCG").as_deref() {
        Ok("multi") => "tcg,thread=multi",
        _ => "tcg,thread=single",
    };
    let start = Instant::now();
    // arm64: the `virt` board; `pauth-impdef` makes TCG emulate pointer
    // authentication (every pac-ret kernel function uses it) with a cheap
    // implementation-defined algorithm instead of QARMA.
    let (qemu, machine, cpu, console): (&str, &[&str], &str, &str) = match opts.kernel.arch {
        GuestArch::X86_64 => ("qemu-system-x86_64", &[], "max", "ttyS0"),
        GuestArch::Arm64 => (
            "qemu-system-aarch64",
            &["-M", "virt"],
            "max,pauth-impdef=on",
            "ttyAMA0",
        ),
    };
    let mut child = Command::new(qemu)
        .args(machine)
        .args(["-accel", tcg, "-cpu", cpu])
        .args(["-smp", &smp.to_string(), "-m", "2048"])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .args(["-serial", "stdio", "-monitor", "none"])
        .arg("-kernel")
        .arg(&opts.kernel.image)
        .arg("-initrd")
        .arg(initramfs)
        // watchdog_thresh=60 (the kernel's most): a soft lockup is
        // reported after 120 s stuck, not 20 s. On a busy host the one
        // thread that runs the guest's vCPUs is starved for that long
        // (the demo on a host at load 15 saw "soft lockup - CPU#0 stuck
        // for 22s! [swapper/0:1]" during boot); a real lockup still shows.
        .args([
            "-append",
            &kernel_command_line(opts.kernel.arch, console, opts.append),
        ])
        .args([
            "-virtfs",
            "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {qemu}"))?;
    let rx = console_of(&mut child)?;
    let mut console = Console::new(opts, start);
    let deadline = start + opts.timeout;
    let mut last_heard = Instant::now();
    loop {
        let now = Instant::now();
        if let Some(problem) = console.guard(now, deadline, last_heard) {
            console.outcome.problems.push(problem);
            break;
        }
        let wait = (deadline - now).min(opts.silence.saturating_sub(now - last_heard));
        match rx.recv_timeout(wait) {
            Ok(ConsoleOutput::Out(bytes)) => {
                last_heard = Instant::now();
                console.take_bytes(&bytes);
            }
            Ok(ConsoleOutput::Err(line)) => {
                last_heard = Instant::now();
                console.take_line(format!("qemu: {line}"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let mut outcome = console.outcome;
    let _ = child.kill();
    let _ = child.wait();
    if outcome.status.is_none() && outcome.problems.is_empty() {
        outcome
            .problems
            .push("the guest stopped without reporting the command's exit status".into());
    }
    Ok(outcome)
}

/// What QEMU writes: the guest's console in raw pieces (a line may still
/// be incomplete, such as libtest's `test NAME ... ` while NAME runs),
/// and QEMU's own stderr by lines.
enum ConsoleOutput {
    Out(Vec<u8>),
    Err(String),
}

/// One thread per QEMU stream, both sending to the returned channel.
fn console_of(child: &mut std::process::Child) -> Result<mpsc::Receiver<ConsoleOutput>> {
    let mut stdout = child.stdout.take().context("qemu stdout")?;
    let stderr = child.stderr.take().context("qemu stderr")?;
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        while let Ok(n @ 1..) = std::io::Read::read(&mut stdout, &mut buf) {
            if tx.send(ConsoleOutput::Out(buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if tx2.send(ConsoleOutput::Err(line)).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// The guest's console as it is read: lines assembled from the pieces,
/// the outcome they make, and what is echoed.
struct Console<'a> {
    opts: &'a VmRun<'a>,
    start: Instant,
    outcome: VmOutcome,
    in_command: bool,
    digest: crate::testlog::Digest,
    /// The console's last, still incomplete line.
    partial: Vec<u8>,
    /// When the last whole line arrived.
    last_line_at: Instant,
}

impl<'a> Console<'a> {
    fn new(opts: &'a VmRun<'a>, start: Instant) -> Console<'a> {
        Console {
            opts,
            start,
            outcome: VmOutcome {
                status: None,
                output: String::new(),
                boot_secs: None,
                problems: Vec::new(),
                console_tail: Vec::new(),
                test_secs: Vec::new(),
            },
            in_command: false,
            last_line_at: start,
            digest: crate::testlog::Digest::default(),
            partial: Vec::new(),
        }
    }

    /// The guard's verdict: a guest silent for `silence` is hung (named
    /// by the test it was running, when libtest had named it), and one
    /// past `deadline` is cut, however lively.
    fn guard(&self, now: Instant, deadline: Instant, last_heard: Instant) -> Option<String> {
        let running = running_test(&String::from_utf8_lossy(&self.partial))
            .map(|t| format!("; the test running was {t}"))
            .unwrap_or_default();
        if now >= deadline {
            return Some(format!(
                "timeout: the guest did not finish within {} s{running}",
                self.opts.timeout.as_secs()
            ));
        }
        (now - last_heard >= self.opts.silence).then(|| {
            format!(
                "hang: the guest printed nothing for {} s ({:.0} s after it started){running}",
                self.opts.silence.as_secs(),
                (now - self.start).as_secs_f64()
            )
        })
    }

    /// Adds a piece of the console and handles each line it completes.
    fn take_bytes(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            let text = text.trim_end_matches('\r').to_string();
            self.take_line(text);
        }
    }

    /// One whole console line: the markers, kernel problems, and the
    /// command's output.
    fn take_line(&mut self, line: String) {
        self.take_whole_line(line);
        self.last_line_at = Instant::now();
    }

    fn take_whole_line(&mut self, line: String) {
        let outcome = &mut self.outcome;
        outcome.console_tail.push(line.clone());
        if outcome.console_tail.len() > 40 {
            outcome.console_tail.remove(0);
        }
        if line.contains("Kernel panic") {
            outcome.problems.push(line.clone());
        }
        if line.starts_with(READY) {
            outcome.boot_secs = Some(self.start.elapsed().as_secs_f64());
            self.in_command = true;
        } else if let Some(rest) = line.strip_prefix(DMESG) {
            outcome.problems.push(format!("kernel log:{rest}"));
        } else if let Some(rest) = line.strip_prefix(EXIT) {
            outcome.status = rest.trim().parse().ok();
            self.in_command = false;
        } else if self.in_command {
            if let Some(name) = finished_test(&line) {
                let secs = self.last_line_at.elapsed().as_secs_f64();
                outcome.test_secs.push((name.to_string(), secs));
            }
            outcome.output.push_str(&line);
            outcome.output.push('\n');
            self.echo(&line);
        }
    }

    fn echo(&mut self, line: &str) {
        let shown = match self.opts.echo {
            Echo::All => true,
            Echo::Digest => self.digest.show(line),
        };
        if shown {
            let mut out = std::io::stdout().lock();
            let _ = match &self.opts.label {
                Some(label) => writeln!(out, "[{label}] {line}"),
                None => writeln!(out, "{line}"),
            };
        }
    }
}

/// The test libtest is running, from its incomplete `test NAME ... `
/// line (a serial run prints the name before the test, the verdict after).
fn running_test(partial: &str) -> Option<&str> {
    let rest = partial.trim_start().strip_prefix("test ")?;
    let name = rest.strip_suffix(" ... ")?;
    (!name.is_empty() && !name.contains(' ')).then_some(name)
}

/// The test a libtest verdict line names (`test NAME ... ok`).
fn finished_test(line: &str) -> Option<&str> {
    let (name, verdict) = line.strip_prefix("test ")?.split_once(" ... ")?;
    matches!(verdict.trim(), "ok" | "FAILED" | "ignored").then_some(name)
}

/// A minimal writer of the "newc" cpio format the kernel unpacks.
#[derive(Default)]
struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.buf.extend_from_slice(header.as_bytes());
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_under_tmp_is_bound_back() {
        assert_eq!(
            tmp_component(Path::new("/tmp/fresh/sub")),
            Some("fresh".into())
        );
        assert_eq!(tmp_component(Path::new("/work/main")), None);
        let init = init_script(&[], Some("fresh"));
        assert!(
            init.contains("mount -o bind /hosttmp/'fresh' /mnt/tmp/'fresh'"),
            "{init}"
        );
    }

    #[test]
    fn the_arm64_guest_runs_without_chroot_and_links_host_paths() {
        let init = init_script_arm64(&["9p.ko".into()], Some("fresh"));
        assert!(init.contains("insmod /modules/9p.ko"), "{init}");
        assert!(init.contains("hostroot /host"), "{init}");
        assert!(!init.contains("chroot"), "{init}");
        assert!(init.contains(r#"ln -s "$d" "/$n""#), "{init}");
        assert!(
            init.contains("mount -o bind /host/tmp/'fresh' /tmp/'fresh'"),
            "{init}"
        );
        assert!(init.contains("mount -t tracefs tracefs /sys/kernel/tracing"));
    }

    #[test]
    fn vcpus_are_two_unless_overridden() {
        assert_eq!(vm_smp(None).unwrap(), 2);
        assert_eq!(vm_smp(Some("4")).unwrap(), 4);
        assert_eq!(vm_smp(Some("1")).unwrap(), 1);
        for bad in ["0", "65", "two", ""] {
            let e = vm_smp(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("KPROBE_PERF_VM_SMP"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_running_test_is_named_from_libtests_incomplete_line() {
        assert_eq!(
            running_test("test preflight_agrees_with_the_kernel ... "),
            Some("preflight_agrees_with_the_kernel")
        );
        assert_eq!(running_test("test a ... ok"), None);
        assert_eq!(running_test("running 3 tests"), None);
        assert_eq!(running_test(""), None);
        assert_eq!(finished_test("test a::b ... ok"), Some("a::b"));
        assert_eq!(finished_test("test a ... FAILED"), Some("a"));
        assert_eq!(finished_test("test result: ok. 3 passed"), None);
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut c = Cpio::default();
        c.file("init", 0o755, b"#!/bin/sh\n");
        let bytes = c.finish();
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
