//! Issue #27: source points in kernel modules (`MOD:FUNC@+N`, perf's
//! `-m MODULE FUNC:N`), read from the module's debug file (a relocatable
//! `.ko` with DWARF, which the VM harness unpacks from Debian's -dbg
//! package beside the vmlinux).
//!
//! Natively, `module_definitions_match_perf_probe_m` asks perf and
//! kprobe-perf the same [`QUESTIONS`] on Debian's 6.1.0-56 `9p.ko` (the
//! module the VM's root file system is on): perf's answers are kept in
//! tests/data/module_probes-6.1.0-56-amd64.defs (regenerated with
//! `KPROBE_PERF_BLESS=1` when perf 6.1 is installed, and compared with it
//! when it is). Every question must agree, except those of [`KNOWN`],
//! each with its reason.
//!
//! In the VM, `a_module_source_line_probe_fetches_locals_by_name`
//! records a line of 9p's `v9fs_file_open` with its local `omode` while
//! the test opens a file of the 9p root with flags it chooses, and checks
//! the values; and a debug file of another build is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kprobe_perf_tests::{
    kernel_arch, kprobe_perf_bin, kprobes_available, skip, skip_here, vm_kernel,
};

/// The release the fixture is perf's answer for.
const RELEASE: &str = "6.1.0-56-amd64";

/// perf probe's questions (`-m 9p.ko -D QUESTION`): functions drawn at
/// random from 9p.ko's symbols (seed 27) at a random relative line, with
/// variables picked from what perf's `-V` lists there, then points and
/// fetches written by hand (fields, `$vars`, `$params`, FILE:LINE,
/// FUNC@FILE, a line that shares its address, a named event).
const QUESTIONS: &[&str] = &[
    "v9fs_file_fsync:6 inode",
    "v9fs_show_options m",
    "v9fs_invalidate_folio:3 length",
    "v9fs_open_fid_add:12 access v9ses",
    "v9fs_file_read_iter:12 iocb err",
    "v9fs_vfs_atomic_open:8 fid",
    "v9fs_refresh_inode_dotl:8 st",
    "v9fs_fid_find:15 ret",
    "v9fs_kill_super:12 s v9ses",
    "v9fs_vfs_write_folio_locked:8 err v9inode from",
    "v9fs_vfs_setattr_dotl dentry",
    "v9fs_file_lock:5 filp",
    "v9fs_vfs_getattr request_mask",
    "v9fs_statfs rs dentry buf",
    "v9fs_acl_chmod:10 retval fid inode",
    "v9fs_evict_inode:10 v9inode",
    "v9fs_put_acl:3 acl",
    "p9mode2unixmode:10 stat",
    "v9fs_cache_session_get_cookie:3 dev_name v9ses",
    "v9fs_mapped_iattr_valid:15 dotl_iattr_map",
    "v9fs_vfs_get_link:4 inode done dentry",
    "v9fs_set_create_acl:10 dacl acl",
    "v9fs_vfs_unlink:12 i",
    "v9fs_get_inode:5 v9inode version inode",
    "v9fs_acl_mode:3 pacl modep dir",
    "v9fs_vfs_create:5 perm",
    "v9fs_listxattr:15 size",
    "v9fs_vfs_atomic_open_dotl:8 mode file",
    "v9fs_direct_IO err",
    "v9fs_write_inode_dotl:8 buf rs dentry",
    "v9fs_file_flock_dotl:3 cmd ret",
    "v9fs_dir_readdir_dotl:2 curdirent",
    "v9fs_lookup_revalidate:10 inode dentry",
    "v9fs_stat2inode_dotl flags",
    "v9fs_test_new_inode:2 data",
    "v9fs_free_request:3 v9inode",
    "v9fs_vm_page_mkwrite:4 vmf",
    "v9fs_dentry_release dentry head",
    "v9fs_launder_folio:2 folio",
    "v9fs_set_super:2 s",
    "v9fs_file_open file->f_flags inode->i_ino",
    "v9fs_vfs_lookup dentry->d_name.name:string flags",
    "v9fs_file_open:2 $vars",
    "v9fs_vfs_lookup $params",
    "v9fs_file_open:8 file",
    "fs/9p/vfs_file.c:60 file",
    "v9fs_file_open@fs/9p/vfs_file.c:2 file",
    "kpfmod:open=v9fs_file_open file->f_flags",
    "v9fs_vfs_lookup:5 dentry->d_name.name:string",
    "v9fs_vfs_lookup:26 name:string dfid",
    "v9fs_file_open:16 omode flags=file->f_flags:x32 name=file->f_path.dentry->d_name.name:string",
];

/// The questions the two tools answer differently, and why.
const KNOWN: &[(&str, &str)] = &[
    (
        "v9fs_file_read_iter:12 iocb err",
        "perf reads 0xdeade12d for iocb in the copy inlined into v9fs_mmap_file_read_iter, \
         where it is optimized out; kprobe-perf leaves those two sites out and says why",
    ),
    (
        "fs/9p/vfs_file.c:60 file",
        "the event's name only: perf names a FILE:LINE probe after the function \
         (v9fs_file_open), kprobe-perf after the file and line (vfs_file_L60)",
    ),
];

fn kernels() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/vm/kernels")
}

/// The -dbg files of [`RELEASE`] under `target/vm/kernels`: the vmlinux
/// and 9p.ko.
fn fixture_files() -> (PathBuf, PathBuf) {
    let dir = kernels().join(format!("linux-image-{RELEASE}-unsigned/usr/lib/debug"));
    (
        dir.join(format!("boot/vmlinux-{RELEASE}")),
        dir.join(format!("lib/modules/{RELEASE}/kernel/fs/9p/9p.ko")),
    )
}

const FIXTURE: &str = include_str!("../data/module_probes-6.1.0-56-amd64.defs");

/// The fixture's answers: question -> perf's definitions, or `! ERROR`.
fn fixture() -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in FIXTURE.lines() {
        if let Some(q) = line.strip_prefix("## ") {
            out.insert(q.to_string(), Vec::new());
            current = Some(q.to_string());
        } else if let (Some(q), false) = (&current, line.starts_with('#') || line.is_empty()) {
            out.get_mut(q).expect("a question").push(line.to_string());
        }
    }
    out
}

/// One tool's answer: its definitions, or `! ` and the first error line.
fn answer(out: &std::process::Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<String> = stdout.lines().map(str::to_string).collect();
    if lines.is_empty() {
        vec!["! no site".to_string()]
    } else {
        lines
    }
}

fn perf() -> Option<&'static str> {
    ["/usr/bin/perf", "/usr/sbin/perf"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// perf's answers, live (when perf 6.1 is installed): written to the
/// fixture with `KPROBE_PERF_BLESS=1`, else compared with it.
fn check_perf_still_answers_the_fixture(vmlinux: &Path, ko: &Path) {
    let Some(perf) = perf() else {
        println!("perf is not installed: its answers are the fixture's");
        return;
    };
    let version = Command::new(perf).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.starts_with("perf version 6.1.") {
        println!("the fixture is perf 6.1's answer, this perf is {version:?}: not asked");
        return;
    }
    let mut text = format!(
        "# perf probe -k vmlinux-{RELEASE} -m 9p.ko -D QUESTION ({version}, Debian's\n\
         # linux-image-{RELEASE}-dbg), for the questions of tests/tests/module_source.rs;\n\
         # `! no site` where perf printed no definition. Regenerated and compared\n\
         # by module_definitions_match_perf_probe_m in that file.\n"
    );
    for q in QUESTIONS {
        let out = Command::new(perf)
            .args(["probe", "-k"])
            .arg(vmlinux)
            .arg("-m")
            .arg(ko)
            .arg("-D")
            .arg(q)
            .output()
            .unwrap();
        text.push_str(&format!("## {q}\n"));
        for l in answer(&out) {
            text.push_str(&l);
            text.push('\n');
        }
    }
    if std::env::var_os("KPROBE_PERF_BLESS").is_some() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("data/module_probes-{RELEASE}.defs"));
        std::fs::write(&path, text).unwrap();
        return;
    }
    // The header names perf's version, which moves with Debian's point
    // releases: the answers are compared, not the header.
    assert_eq!(
        answers_only(&text),
        answers_only(FIXTURE),
        "perf no longer answers tests/data/module_probes-{RELEASE}.defs \
         (KPROBE_PERF_BLESS=1 cargo test -p kprobe-perf-tests --test module_source writes its answer)"
    );
}

/// A fixture's text without its `# ` header lines.
fn answers_only(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with("# ")).collect()
}

#[test]
fn module_definitions_match_perf_probe_m() {
    let test = "module_definitions_match_perf_probe_m";
    let (vmlinux, ko) = fixture_files();
    if !vmlinux.is_file() || !ko.is_file() {
        return skip_here(
            test,
            &format!(
                "no {RELEASE} -dbg vmlinux and 9p.ko under target/vm/kernels \
                 (cargo xtask vm --kernel 6.1 unpacks them)"
            ),
        );
    }
    if vm_kernel().is_none() {
        check_perf_still_answers_the_fixture(&vmlinux, &ko);
    }
    let theirs = fixture();
    assert_eq!(theirs.len(), QUESTIONS.len(), "the fixture's questions");
    let cache = std::env::temp_dir().join(format!("kpf-module-defs-{}", std::process::id()));
    let mut agree = 0;
    let mut differ = Vec::new();
    for q in QUESTIONS {
        let out = Command::new(kprobe_perf_bin())
            .env("KPROBE_PERF_CACHE_DIR", &cache)
            .args(["probe", "--definition", "--other-kernel", "--vmlinux"])
            .arg(&vmlinux)
            .arg("-m")
            .arg(&ko)
            .arg(q)
            .output()
            .unwrap();
        let ours = answer(&out);
        let perfs = kprobe_perf_tests::numbered_like_perf_probe(&theirs[*q]);
        if ours == perfs {
            agree += 1;
        } else {
            differ.push(format!("{q}\n  perf: {perfs:?}\n  ours: {ours:?}"));
            if !KNOWN.iter().any(|(k, _)| k == q) {
                panic!(
                    "kprobe-perf and perf answer {q:?} differently:\n  perf: {perfs:?}\n  ours: {ours:?}\n  stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&cache);
    println!(
        "{agree} of {} questions agree with perf probe -m exactly; {} differ as known:\n{}",
        QUESTIONS.len(),
        differ.len(),
        differ.join("\n")
    );
    assert_eq!(agree + KNOWN.len(), QUESTIONS.len(), "{differ:#?}");
}

#[test]
fn a_module_functions_lines_list_as_perf_probe_l_lists_them() {
    // perf probe -L needs the source text: a stand-in file of numbered
    // lines at the unit's path serves both tools.
    let test = "a_module_functions_lines_list_as_perf_probe_l_lists_them";
    let (vmlinux, ko) = fixture_files();
    if !vmlinux.is_file() || !ko.is_file() {
        return skip_here(
            test,
            &format!("no {RELEASE} -dbg vmlinux and 9p.ko under target/vm/kernels"),
        );
    }
    let src = std::env::temp_dir().join(format!("kprobe-perf-module-src-{}", std::process::id()));
    std::fs::create_dir_all(src.join("fs/9p")).unwrap();
    let text: String = (1..3000).map(|i| format!("text of line {i}\n")).collect();
    std::fs::write(src.join("fs/9p/vfs_file.c"), text).unwrap();
    let ours = Command::new(kprobe_perf_bin())
        .args([
            "probe",
            "--source",
            "v9fs_file_open",
            "--other-kernel",
            "-m",
        ])
        .arg(&ko)
        .arg("--vmlinux")
        .arg(&vmlinux)
        .arg("--source-dir")
        .arg(&src)
        .output()
        .unwrap();
    assert!(ours.status.success(), "{ours:?}");
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    // The lines a probe can go on, numbered from the declaration (line 42).
    let numbered: Vec<u32> = ours
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(
        numbered,
        [
            0, 6, 11, 12, 14, 16, 17, 18, 19, 22, 23, 24, 27, 29, 31, 34, 35, 45, 46, 47, 48, 49,
            51, 53, 54, 55, 57, 58, 61, 62
        ]
    );
    assert_eq!(ours.lines().nth(1), Some("      0  text of line 42"));
    match perf() {
        Some(perf) if vm_kernel().is_none() => {
            let theirs = Command::new(perf)
                .args(["probe", "-k"])
                .arg(&vmlinux)
                .arg("-m")
                .arg(&ko)
                .arg("-s")
                .arg(&src)
                .args(["-L", "v9fs_file_open"])
                .output()
                .unwrap();
            assert_eq!(ours, String::from_utf8_lossy(&theirs.stdout), "{theirs:?}");
        }
        _ => eprintln!("{test}: perf probe -L not compared (no perf here)"),
    }
    let _ = std::fs::remove_dir_all(&src);
}

/// The debug file of the running kernel's 9p.ko under `target/vm/kernels`.
fn running_9p_debug() -> Option<PathBuf> {
    kprobe_perf_tests::running_kernel_debug_file(|r| {
        format!("usr/lib/debug/lib/modules/{r}/kernel/fs/9p/9p.ko")
    })
}

/// Line 16 of v9fs_file_open on 6.1 is fs/9p/vfs_file.c:58, `fid =
/// file->private_data;`, after `omode = v9fs_open_to_dotl_flags(...)`.
const SPEC: &str = "p:kpfmod 9p:v9fs_file_open@+16 omode flags=file->f_flags:x32 name=file->f_path.dentry->d_name.name:string";

#[test]
fn a_module_source_line_probe_fetches_locals_by_name() {
    let test = "a_module_source_line_probe_fetches_locals_by_name";
    if !kprobes_available(test) {
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if !release.starts_with("6.1.0-") || kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip_here(
            test,
            "the line of v9fs_file_open tested (and its local omode) is x86_64 6.1's",
        );
    }
    if !Path::new("/sys/module/9p/notes").exists() {
        return skip(test, "the 9p module is not loaded (the VM's root is 9p)");
    }
    let Some(ko) = running_9p_debug() else {
        return skip_here(test, "no -dbg 9p.ko of this kernel under target/vm/kernels");
    };
    // A file on 9p (the workspace is the VM's 9p root, read-only there):
    // this test's own source.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/module_source.rs");
    let name = "module_source.rs";
    // dd opens it O_RDONLY|O_NONBLOCK; the kernel adds O_LARGEFILE.
    let iff = format!("if={}", path.display());
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "--module-debug"])
        .arg(&ko)
        .args([
            "-e",
            SPEC,
            "--",
            "dd",
            &iff,
            "iflag=nonblock",
            "of=/dev/null",
            "status=none",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    println!("{stdout}{stderr}");
    let mine: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(&format!("name=\"{name}\"")))
        .collect();
    assert!(!mine.is_empty(), "dd's open of {name}: {stdout}");
    for line in mine {
        // O_NONBLOCK|O_LARGEFILE; 9p's dotl flags (omode) have the same bits.
        assert!(line.contains("kpfmod: (v9fs_file_open+0x56"), "{line}");
        assert!(line.contains(" omode=34816 flags=0x8800 "), "{line}");
    }
}

#[test]
fn a_module_debug_file_of_another_build_is_refused() {
    let test = "a_module_debug_file_of_another_build_is_refused";
    if vm_kernel().is_none() {
        return skip_here(test, "it needs the 9p module loaded, as in the VM");
    }
    if !Path::new("/sys/module/9p/notes").exists() {
        return skip(test, "the 9p module is not loaded (the VM's root is 9p)");
    }
    let Some(ko) = running_9p_debug() else {
        return skip_here(test, "no -dbg 9p.ko of this kernel under target/vm/kernels");
    };
    // 9pnet.ko under the name 9p.ko: another build than the loaded 9p.
    let other = ko.with_file_name("../../net/9p/9pnet.ko");
    let dir = std::env::temp_dir().join(format!("kpf-module-other-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("9p.ko");
    std::fs::copy(&other, &fake).unwrap();
    let out = Command::new(kprobe_perf_bin())
        .args(["probe", "--definition", "--module-debug"])
        .arg(&fake)
        .arg("p:9p:v9fs_file_open@+16 omode")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains("but module 9p has") && stderr.contains("belongs to another build"),
        "{stderr}"
    );
}
