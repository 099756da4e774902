//! `record -o FILE` in a directory every user can write (/tmp): a symbolic
//! link another user planted at FILE is renamed (or with --force removed),
//! never followed, and the new FILE is a regular file of mode 0600 owned by
//! root holding perf.data.
//!
//! The link is planted by an unprivileged user (nobody, through setpriv)
//! with `fs.protected_symlinks=0`, so that root opening FILE would follow
//! it: the test first shows that it does, then that `record -o` does not.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, vm_kernel};

const PROTECTED_SYMLINKS: &str = "/proc/sys/fs/protected_symlinks";
const FILE: &str = "/tmp/x.data";
const OLD: &str = "/tmp/x.data.old";
const VICTIM: &str = "/tmp/victim";
const NOBODY: u32 = 65534;

/// Sets `fs.protected_symlinks` and puts the old value back when dropped;
/// removes the test's files.
struct Setup {
    old: String,
}

impl Setup {
    fn new() -> Setup {
        let old = fs::read_to_string(PROTECTED_SYMLINKS)
            .unwrap()
            .trim()
            .to_string();
        fs::write(PROTECTED_SYMLINKS, "0").unwrap();
        remove_files();
        Setup { old }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        remove_files();
        let _ = fs::write(PROTECTED_SYMLINKS, &self.old);
    }
}

fn remove_files() {
    for p in [FILE, OLD, VICTIM] {
        let _ = fs::remove_file(p);
    }
}

/// The victim: a root-owned file with known contents.
fn victim_contents() -> Vec<u8> {
    let mut v = b"root's file: must survive record -o\n".to_vec();
    v.extend((0..=255u8).cycle().take(4096));
    v
}

/// `ln -s VICTIM FILE` as nobody.
fn plant_link() {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "ln",
            "-s",
            VICTIM,
            FILE,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "setpriv ... ln -s: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = fs::symlink_metadata(FILE).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!(m.uid(), NOBODY, "the link is nobody's");
    // With protected_symlinks=0 root follows it: what the old `-o` did.
    assert_eq!(fs::read(FILE).unwrap(), victim_contents());
}

/// Runs `record -o FILE` (with `extra` flags) on a kprobe; returns stderr.
fn record(extra: &[&str]) -> String {
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "-o", FILE])
        .args(extra)
        .args(["-e", "p:do_sys_openat2", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {stderr}");
    print!("{stderr}");
    stderr
}

/// FILE is a new regular file, mode 0600, root's, holding perf.data
/// whose samples `script` prints.
fn assert_new_perf_data() {
    let m = fs::symlink_metadata(FILE).unwrap();
    assert!(m.file_type().is_file(), "{FILE} is a regular file");
    assert_eq!(m.permissions().mode() & 0o7777, 0o600);
    assert_eq!((m.uid(), m.gid()), (0, 0));
    let data = fs::read(FILE).unwrap();
    assert_eq!(&data[..8], b"PERFILE2");
    let out = Command::new(kprobe_perf_bin())
        .args(["script", "-i", FILE])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.contains("p_do_sys_openat2_0:")),
        "true opens its libraries: {text}"
    );
}

fn assert_victim_untouched(before: &fs::Metadata) {
    let now = fs::read(VICTIM).unwrap();
    assert!(
        now == victim_contents(),
        "{VICTIM} changed: {} bytes now, starting {:?}",
        now.len(),
        String::from_utf8_lossy(&now[..now.len().min(8)])
    );
    let m = fs::metadata(VICTIM).unwrap();
    assert_eq!(m.ino(), before.ino());
    assert_eq!(m.mode(), before.mode());
    assert_eq!((m.uid(), m.len()), (0, before.len()));
    assert_eq!(
        (m.mtime(), m.mtime_nsec()),
        (before.mtime(), before.mtime_nsec())
    );
}

#[test]
fn a_planted_symlink_is_renamed_not_followed() {
    if !kprobes_available("a_planted_symlink_is_renamed_not_followed") {
        return;
    }
    if vm_kernel().is_none() {
        // It rewrites a sysctl and files in /tmp: only in the VM.
        println!("SKIP a_planted_symlink_is_renamed_not_followed: runs only in the VM");
        return;
    }
    let _setup = Setup::new();
    let tmp = fs::metadata("/tmp").unwrap();
    assert_eq!(
        tmp.mode() & 0o1777,
        0o1777,
        "/tmp is world-writable, sticky"
    );
    fs::write(VICTIM, victim_contents()).unwrap();
    fs::set_permissions(VICTIM, fs::Permissions::from_mode(0o644)).unwrap();
    let before = fs::metadata(VICTIM).unwrap();
    plant_link();

    let stderr = record(&[]);
    assert_victim_untouched(&before);
    assert!(
        stderr.lines().any(|l| l
            == format!(
                "kprobe-perf: {FILE} was a symbolic link to {VICTIM}; kept the link as {OLD} \
                 without following it, {VICTIM} is untouched"
            )),
        "{stderr}"
    );
    let old = fs::symlink_metadata(OLD).unwrap();
    assert!(old.file_type().is_symlink(), "{OLD} is the link");
    assert_eq!(old.uid(), NOBODY);
    assert_eq!(fs::read_link(OLD).unwrap(), Path::new(VICTIM));
    assert_new_perf_data();
    println!(
        "{FILE}: mode {:o}, uid 0, {} bytes, PERFILE2; {OLD} -> {VICTIM}; victim unchanged",
        fs::metadata(FILE).unwrap().mode() & 0o7777,
        fs::metadata(FILE).unwrap().len()
    );
}

#[test]
fn force_removes_a_planted_symlink_not_its_target() {
    if !kprobes_available("force_removes_a_planted_symlink_not_its_target") {
        return;
    }
    if vm_kernel().is_none() {
        println!("SKIP force_removes_a_planted_symlink_not_its_target: runs only in the VM");
        return;
    }
    let _setup = Setup::new();
    fs::write(VICTIM, victim_contents()).unwrap();
    let before = fs::metadata(VICTIM).unwrap();
    plant_link();

    let stderr = record(&["--force"]);
    assert!(
        stderr.lines().any(|l| l
            == format!(
                "kprobe-perf: {FILE} was a symbolic link to {VICTIM}; removed the link \
                 (--force), {VICTIM} is untouched"
            )),
        "{stderr}"
    );
    assert_victim_untouched(&before);
    assert!(fs::symlink_metadata(OLD).is_err(), "no {OLD} with --force");
    assert_new_perf_data();

    // A second run keeps the first file, byte for byte, as FILE.old.
    let first = fs::read(FILE).unwrap();
    let stderr = record(&[]);
    assert!(
        stderr
            .lines()
            .any(|l| l == format!("kprobe-perf: {FILE} existed; kept it as {OLD}")),
        "{stderr}"
    );
    assert_eq!(fs::read(OLD).unwrap(), first);
    assert_new_perf_data();
}

/// `script -i PATH`'s lines of `comm`'s threads, without what differs
/// between two runs of one command: its pid, CPU and times.
fn script_lines_of(path: &str, comm: &str) -> (Vec<String>, String) {
    let out = Command::new(kprobe_perf_bin())
        .args(["script", "-i", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "script -i {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (task, _cpu, _time) = (f.next()?, f.next()?, f.next()?);
            let (name, _pid) = task.rsplit_once('-')?;
            (name == comm).then(|| format!("{name} {}", f.collect::<Vec<_>>().join(" ")))
        })
        .collect();
    (lines, text)
}

/// `record -o path --force` (with `-q` when `quiet`) with `options`
/// and `-e entry`, of `open_loop` opening /etc/hostname 20 times on CPU
/// 0; asserts it succeeded and lost nothing.
fn record_open_loop(path: &str, quiet: bool, options: &[&str], entry: &str) {
    let _ = fs::remove_file(path);
    let mut args = vec!["record", "-o", path, "--force"];
    if quiet {
        args.push("-q");
    }
    args.extend_from_slice(options);
    args.extend_from_slice(&[
        "-e",
        entry,
        "--",
        "taskset",
        "-c",
        "0",
        env!("CARGO_BIN_EXE_open_loop"),
        "/etc/hostname",
        "20",
        "/dev/null",
    ]);
    let out = Command::new(kprobe_perf_bin())
        .args(&args)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    assert!(
        stderr.contains(", 0 lost"),
        "{args:?}: nothing lost: {stderr}"
    );
}

/// `-q -o` counts the samples without decoding them (nothing looks at the
/// events): the file must hold what a run that decodes and prints every
/// event writes, its kretprobe callers named from the file's symbols, on
/// the PMU (`-C 0`) and through kprobe_events (`-a`).
#[test]
fn a_quiet_file_holds_what_a_printing_run_writes() {
    let test = "a_quiet_file_holds_what_a_printing_run_writes";
    if !kprobes_available(test) {
        return;
    }
    let entry = kprobe_perf_tests::for_kernel("p:do_sys_openat2 dfd=%di:s32");
    for cpus in [&["-C", "0"][..], &["-a"][..]] {
        let run = |quiet: bool, path: &str| -> (Vec<String>, String) {
            let mut options = cpus.to_vec();
            options.extend_from_slice(&["-e", "r:do_sys_openat2 ret=$retval:s64"]);
            record_open_loop(path, quiet, &options, &entry);
            let lines = script_lines_of(path, "open_loop");
            let _ = fs::remove_file(path);
            lines
        };
        let (printed, printed_text) = run(false, "/tmp/kp-printed.data");
        let (quiet, quiet_text) = run(true, "/tmp/kp-quiet.data");
        println!("{cpus:?}: {} lines of open_loop in each file", quiet.len());
        let returns: Vec<&String> = quiet
            .iter()
            .filter(|l| l.contains("<- do_sys_openat2)"))
            .collect();
        // The loader's opens, then the 20 of /etc/hostname.
        assert!(returns.len() >= 20, "{cpus:?}: {quiet:#?}");
        // Each of the 20 opens returns fd 3 (it is closed again); the
        // loader's opens return 3 too.
        assert!(
            returns.iter().filter(|l| l.ends_with(" ret=3")).count() >= 20,
            "{cpus:?}: {quiet:#?}"
        );
        assert!(
            quiet.iter().filter(|l| l.ends_with(" dfd=-100")).count() >= 20,
            "{cpus:?}: AT_FDCWD: {quiet:#?}"
        );
        for l in &returns {
            // `(CALLER+0xOFF/0xSIZE <- do_sys_openat2)`: named, not an
            // address.
            let caller = l.split('(').nth(1).unwrap_or_default();
            assert!(
                !caller.starts_with("0x") && caller.contains("+0x"),
                "{cpus:?}: the caller is named: {l}"
            );
        }
        // Lines before the command's exec may be named either way (its
        // name read from /proc before or after the exec, a race of each
        // run); after it, the 20 opens and the report's open (21 entries
        // and returns) are the same in both files.
        let last = |v: &[String]| v[v.len().saturating_sub(42)..].to_vec();
        assert!(
            quiet.len() >= 42 && printed.len() >= 42,
            "{cpus:?}: -q -o:\n{quiet_text}\nprinted:\n{printed_text}"
        );
        assert_eq!(
            last(&quiet),
            last(&printed),
            "{cpus:?}: -q -o:\n{quiet_text}\nprinted:\n{printed_text}"
        );
    }
}

/// `-q -o --call-graph kernel` counts samples with callchains without
/// decoding them (the file keeps the chains as the kernel wrote them):
/// their kernel frames must still be named from the file's symbols, as
/// in a file a printing run wrote.
#[test]
fn a_quiet_file_with_stacks_names_their_frames() {
    let test = "a_quiet_file_with_stacks_names_their_frames";
    if !kprobes_available(test) {
        return;
    }
    let entry = kprobe_perf_tests::for_kernel("p:do_sys_openat2 dfd=%di:s32");
    let run = |quiet: bool, path: &str| -> Vec<Vec<String>> {
        record_open_loop(path, quiet, &["--call-graph", "kernel", "-C", "0"], &entry);
        let (_, text) = script_lines_of(path, "open_loop");
        let _ = fs::remove_file(path);
        // Each open_loop event's frames: `sym+0xOFF (object)`.
        let mut stacks: Vec<Vec<String>> = Vec::new();
        let mut mine = false;
        for l in text.lines() {
            if !l.starts_with('\t') {
                mine = l.trim_start().starts_with("open_loop-");
                if mine {
                    stacks.push(Vec::new());
                }
            } else if let (true, Some(s)) = (mine, stacks.last_mut()) {
                let frame = l.split_whitespace().skip(1).collect::<Vec<_>>().join(" ");
                s.push(frame);
            }
        }
        stacks
    };
    let printed = run(false, "/tmp/kp-printed-g.data");
    let quiet = run(true, "/tmp/kp-quiet-g.data");
    println!(
        "{} and {} stacks; the last: {:#?}",
        printed.len(),
        quiet.len(),
        quiet.last()
    );
    for (what, stacks) in [("printed", &printed), ("quiet", &quiet)] {
        assert!(stacks.len() >= 21, "{what}: {stacks:#?}");
        for s in stacks {
            assert!(s.len() >= 3, "{what}: {s:#?}");
            assert!(
                s.iter()
                    .all(|f| f.contains("+0x") && f.ends_with("([kernel.kallsyms])")),
                "{what}: every kernel frame named: {s:#?}"
            );
        }
    }
    // The 20 opens of /etc/hostname (and the report's): the same frames.
    let last = |v: &[Vec<String>]| v[v.len() - 21..].to_vec();
    assert_eq!(last(&quiet), last(&printed));
}
