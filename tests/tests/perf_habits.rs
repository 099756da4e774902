//! A perf user's habits on uprobes, natively: what perf and the kernel
//! print, kprobe-perf prints, and perf's spellings work. The workload is
//! tests/data/habits.c, built with `cc -g -fno-omit-frame-pointer`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kprobe_perf_tests::{kprobe_perf_bin, skip_here, uprobes_available};

/// The workload, built in a directory of its own, removed after.
struct Built {
    dir: PathBuf,
    bin: PathBuf,
}

impl Drop for Built {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Builds tests/data/habits.c; `None` (after a SKIP line) without uprobes
/// or a C compiler.
fn build(test: &str) -> Option<Built> {
    if !uprobes_available(test) {
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/habits.c");
    let dir = std::env::temp_dir().join(format!("kpf-habits-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("habits");
    let built = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(&src)
        .status();
    match built {
        Ok(s) if s.success() => Some(Built { dir, bin }),
        r => {
            let _ = std::fs::remove_dir_all(&dir);
            skip_here(
                test,
                &format!("cannot build {} with cc ({r:?})", src.display()),
            );
            None
        }
    }
}

/// kprobe-perf with `args`, run in `dir`.
fn kprobe_perf(dir: &Path, args: &[&str]) -> Output {
    Command::new(kprobe_perf_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// The `name=value ...` part of each event line of `out`.
fn args_of(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(") ").map(|(_, args)| args.to_string()))
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `:char` prints `'a'`, as the kernel's print fmt (`c='%c'`) prints it
/// for the same uprobe in uprobe_events.
#[test]
fn a_char_prints_as_the_kernel_prints_it() {
    let Some(b) = build("a_char_prints_as_the_kernel_prints_it") else {
        return;
    };
    let spec = format!("p:{}:pick c=$arg1:char", b.bin.display());
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(&b.dir, &["record", "-e", &spec, "--", &bin, "4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(args_of(&out), ["c='a'", "c='b'", "c='c'", "c='a'"]);
}

/// `latency --by ret` keys an int's -1 as -1 (it printed 4294967295).
#[test]
fn latency_by_ret_prints_an_ints_minus_one() {
    let Some(b) = build("latency_by_ret_prints_an_ints_minus_one") else {
        return;
    };
    let func = format!("{}:walk", b.bin.display());
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(&b.dir, &["latency", "--by", "ret", &func, "--", &bin, "6"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{func} ")))
        .filter_map(|l| l.split_once(", avg").map(|(k, _)| k.to_string()))
        .collect();
    assert_eq!(
        keys,
        [
            "ret=-1: count 2",
            "ret=1: count 1",
            "ret=2: count 1",
            "ret=4: count 1",
            "ret=5: count 1"
        ]
    );
}

/// perf's `-m 512K` and `--call-graph fp` are taken: each event has its
/// user frames by frame pointer. At `walk+0x0` the frame is not pushed
/// yet, so the next frame is main's caller in libc, as perf's fp chain
/// gives it.
#[test]
fn perfs_ring_sizes_and_fp_call_graph() {
    let Some(b) = build("perfs_ring_sizes_and_fp_call_graph") else {
        return;
    };
    let spec = format!("p:{}:walk", b.bin.display());
    let bin = b.bin.to_string_lossy();
    let out = kprobe_perf(
        &b.dir,
        &[
            "record",
            "-m",
            "512K",
            "--call-graph",
            "fp",
            "-e",
            &spec,
            "--",
            &bin,
            "1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let frames: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| l.starts_with('\t'))
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(1);
            Some((w.next()?, w.next()?))
        })
        .collect();
    assert_eq!(frames.len(), 2, "{text}");
    assert_eq!(frames[0], ("walk+0x0", &*format!("({bin})")));
    assert!(frames[1].1.contains("/libc.so"), "{text}");
}
