//! `probe --source FUNC` against `perf probe -L FUNC`, offline, on the
//! Debian 6.1 -dbg vmlinux the VM harness keeps (`--other-kernel`): for
//! functions picked at random, the two listings are equal line for line.
//! perf needs the source text; a tree of placeholder files (`L<n>` on
//! line n) at the paths the DWARF names stands in for it.

use std::path::{Path, PathBuf};
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, skip_here, vm_kernel, xorshift};

const PERF: &str = "/usr/bin/perf";

/// Functions compared (`KPROBE_PERF_FUNCTIONS` for another count).
const FUNCTIONS: usize = 20;

fn vmlinux() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../target/vm/kernels/linux-image-6.1.0-56-amd64-unsigned/usr/lib/debug/boot/vmlinux-6.1.0-56-amd64",
    )
}

fn listing(args: &[&str], vm: &Path, tree: Option<&Path>) -> (bool, String) {
    let mut c = Command::new(kprobe_perf_bin());
    c.args(["probe", "--other-kernel", "--vmlinux"])
        .arg(vm)
        .args(args);
    if let Some(t) = tree {
        c.arg("--source-dir").arg(t);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn source_listings_equal_perf_probe_lines() {
    let test = "source_listings_equal_perf_probe_lines";
    if vm_kernel().is_some() {
        return skip_here(
            test,
            "offline (no kernel needed): run on the host, where it is quick",
        );
    }
    let vm = vmlinux();
    if !vm.is_file() || !Path::new(PERF).exists() {
        return skip_here(
            test,
            "needs perf and the 6.1.0-56 -dbg vmlinux under target/vm/kernels",
        );
    }
    let nm = Command::new("nm").arg(&vm).output().unwrap();
    let nm = String::from_utf8_lossy(&nm.stdout);
    let mut names: Vec<&str> = nm
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "t" || kind == "T").then_some(name)
        })
        .filter(|n| n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .collect();
    names.sort_unstable();
    names.dedup();
    let tree = std::env::temp_dir().join(format!("kpf-src-{}", std::process::id()));
    let mut state = 0x1157_0001u64;
    let functions: usize = std::env::var("KPROBE_PERF_FUNCTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(FUNCTIONS);
    let (mut compared, mut equal, mut neither) = (0, 0, 0);
    let mut differences = Vec::new();
    while compared + neither < functions {
        let name = names[(xorshift(&mut state) % names.len() as u64) as usize];
        // The file the DWARF names, from the listing without text.
        let (ok, plain) = listing(&["--source", name], &vm, None);
        let file = plain
            .lines()
            .next()
            .and_then(|h| h.strip_prefix('<'))
            .and_then(|h| h.split_once('@'))
            .and_then(|(_, f)| f.strip_suffix(":0>"));
        let Some(file) = file.filter(|_| ok) else {
            neither += 1;
            continue;
        };
        let path = tree.join(file.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text: String = (1..=40_000).map(|n| format!("L{n}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let perf = Command::new(PERF)
            .args(["probe", "-k"])
            .arg(&vm)
            .arg("-s")
            .arg(&tree)
            .args(["-L", name])
            .output()
            .unwrap();
        let theirs = String::from_utf8_lossy(&perf.stdout).into_owned();
        let (_, ours) = listing(&["--source", name], &vm, Some(&tree));
        if !perf.status.success() {
            neither += 1;
            continue;
        }
        compared += 1;
        if ours == theirs {
            equal += 1;
        } else {
            differences.push(format!(
                "{name}:\n--- perf\n{theirs}--- kprobe-perf\n{ours}"
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&tree);
    println!(
        "{equal} of {compared} listings equal to perf probe -L ({neither} functions neither lists)"
    );
    assert!(compared >= functions / 2, "only {compared} compared");
    // The differences left are listed in docs/source-vs-perf.md.
    for d in &differences {
        println!("{d}");
    }
    // 97% of 189 on the sample of 200 in the docs; the suite's 20 allow
    // the one difference among them (rtm_new_nexthop).
    assert!(
        equal * 100 >= compared * 90,
        "{equal} of {compared} equal:\n{}",
        differences.join("\n")
    );
}
