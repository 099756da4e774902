//! The forms distributions ship debug info in: compressed sections (zlib,
//! zstd, GNU's `.zdebug_*`), made with `objcopy` from a program compiled at
//! test time, and Debian's libc6-dbg (compressed, found by build ID).
//! `cargo xtask test` installs gcc's binutils and libc6-dbg; a test run
//! without them prints why it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use kprobe_perf_debuginfo::{locate, DebugFile, DebugInfo, Options, ProbeArg, ProbePoint};

const SOURCE: &str = r#"
struct point { int x; int y; struct point *next; };

__attribute__((noinline)) int walk(struct point *p, int n)
{
	int sum = 0;
	for (int i = 0; i < n; i++) {
		sum += p->x * p->y;
		p = p->next;
	}
	return sum;
}

int main(int argc, char **argv)
{
	struct point p = { 1, 2, 0 };
	return walk(&p, argc) + argv[0][0];
}
"#;

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kpp-forms-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `cmd`; false (with the reason printed) when it cannot run or fails.
fn run(cmd: &mut Command) -> bool {
    match cmd.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            println!(
                "SKIP: {cmd:?} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            false
        }
        Err(e) => {
            println!("SKIP: cannot run {cmd:?}: {e}");
            false
        }
    }
}

/// The fixture compiled with gcc -g -O2 in `dir`.
fn compile(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("forms.c");
    std::fs::write(&src, SOURCE).ok()?;
    let bin = dir.join("forms");
    run(Command::new("gcc")
        .args(["-g", "-O2", "-o"])
        .arg(&bin)
        .arg(&src))
    .then_some(bin)
}

/// `walk`'s probe with its two parameters and a field, from `path`.
fn walk_definition(path: &Path) -> String {
    let file = DebugFile::open(path).unwrap();
    let di = DebugInfo::with_cache(&file, None).unwrap();
    let args: Vec<ProbeArg> = ["p", "n", "p->y"]
        .iter()
        .map(|a| ProbeArg::parse(a).unwrap())
        .collect();
    let point = ProbePoint::parse("walk").unwrap();
    let r = di.resolve(&point, &args, &Options::default()).unwrap();
    assert_eq!(r.probes.len(), 1, "{r:?}");
    r.probes[0].definition("probe", "walk")
}

/// The names of the sections of `path` (readelf -S).
fn section_names(path: &Path) -> String {
    let out = Command::new("readelf")
        .args(["-SW"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn compressed_sections_answer_as_plain_ones() {
    let dir = scratch("compressed");
    let Some(bin) = compile(&dir) else { return };
    let want = "p:probe/walk walk+0 p=%di:x64 n=%si:s32 y=+4(%di):s32";
    assert_eq!(walk_definition(&bin), want);
    for (how, zdebug) in [("zlib", false), ("zstd", false), ("zlib-gnu", true)] {
        let out = dir.join(format!("forms.{how}"));
        if !run(Command::new("objcopy")
            .arg(format!("--compress-debug-sections={how}"))
            .arg(&bin)
            .arg(&out))
        {
            panic!("objcopy cannot compress with {how}: binutils is part of gcc's toolchain");
        }
        let names = section_names(&out);
        // The copy is compressed: GNU's form renames the sections, the
        // ELF form flags them (C).
        if zdebug {
            assert!(names.contains(".zdebug_info"), "{how}: {names}");
        } else {
            let info = names.lines().find(|l| l.contains(".debug_info")).unwrap();
            assert!(info.contains(" C "), "{how}: {info}");
        }
        assert_eq!(walk_definition(&out), want, "{how}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// libc.so.6's debug file from libc6-dbg (compressed sections, found by
/// build ID), or None with the reason printed.
fn libc_debug() -> Option<(DebugFile, DebugFile)> {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    if !Path::new("/usr/share/doc/libc6-dbg").exists() || !libc.exists() {
        println!("SKIP: libc6-dbg is not installed (apt-get install libc6-dbg; cargo xtask test installs it)");
        return None;
    }
    let debug = locate::find_user(libc).unwrap();
    Some((debug, DebugFile::open(libc).unwrap()))
}

#[test]
fn libc6_dbg_answers_malloc_as_perf_does() {
    let Some((debug, libc)) = libc_debug() else {
        return;
    };
    assert!(
        debug.path().starts_with("/usr/lib/debug/.build-id"),
        "{}",
        debug.path().display()
    );
    let di = DebugInfo::with_cache(&debug, None)
        .unwrap()
        .with_call_frames_of(&libc)
        .unwrap();
    // perf probe -x /lib/x86_64-linux-gnu/libc.so.6 -V malloc
    let point = ProbePoint::parse("malloc").unwrap();
    let sites = di.sites(&point, &Options::default()).unwrap();
    assert_eq!(sites.len(), 1, "{sites:?}");
    assert_eq!(sites[0].location, "__libc_malloc+0");
    assert_eq!(sites[0].source, "malloc.c:3281");
    let mut vars: Vec<String> = di
        .variables(&sites[0])
        .unwrap()
        .iter()
        .map(|v| format!("{}\t{}", v.type_name, v.name))
        .collect();
    // DWARF order is the parameter first; perf lists them sorted.
    vars.sort();
    assert_eq!(vars, ["char*\t__PRETTY_FUNCTION__", "size_t\tbytes"]);
    // perf probe -x ... -D 'malloc bytes'
    let r = di
        .resolve(
            &point,
            &[ProbeArg::parse("bytes").unwrap()],
            &Options::default(),
        )
        .unwrap();
    assert_eq!(
        r.probes[0].definition("probe", "malloc"),
        "p:probe/malloc __libc_malloc+0 bytes=%di:x64"
    );
}

const DWZ_HEADER: &str = r#"struct point { int x; int y; struct point *next; };
static inline __attribute__((always_inline)) int add(int a, int b)
{
	return a + b;
}
"#;

const DWZ_A: &str = r#"#include "h.h"
__attribute__((noinline)) int walk(struct point *p, int n)
{
	int s = 0;
	for (int i = 0; i < n; i++) {
		s += add(p->x, p->y);
		p = p->next;
	}
	return s;
}
"#;

const DWZ_B: &str = r#"#include "h.h"
__attribute__((noinline)) int walk2(struct point *p, int n) { return add(p->x, n) + p->y; }
int walk(struct point *p, int n);
int main(int argc, char **argv)
{
	struct point p = { 1, 2, 0 };
	return walk(&p, argc) + walk2(&p, argc) + argv[0][0];
}
"#;

/// Two copies of a two-file program, processed by `dwz -m` (with
/// `dwz_flags`) into a shared supplementary file (`alt.debug`), and the
/// plain program: (plain, dwz'd copy), or None with the reason printed.
fn dwz_pair(dir: &Path, dwz_flags: &[&str]) -> Option<(PathBuf, PathBuf)> {
    for (name, text) in [("h.h", DWZ_HEADER), ("a.c", DWZ_A), ("b.c", DWZ_B)] {
        std::fs::write(dir.join(name), text).ok()?;
    }
    let plain = dir.join("plain");
    if !run(Command::new("gcc").current_dir(dir).args([
        "-g",
        "-O2",
        "-Wl,--build-id",
        "-o",
        "plain",
        "a.c",
        "b.c",
    ])) {
        return None;
    }
    let (one, two) = (dir.join("one"), dir.join("two"));
    std::fs::copy(&plain, &one).ok()?;
    std::fs::copy(&plain, &two).ok()?;
    let alt = dir.join("alt.debug");
    if !Path::new("/usr/bin/dwz").exists() {
        println!("SKIP: dwz is not installed (apt-get install dwz; cargo xtask test installs it)");
        return None;
    }
    let ok = run(Command::new("dwz")
        .args(dwz_flags)
        .arg("-m")
        .arg(&alt)
        .arg("-M")
        .arg(&alt)
        .arg(&one)
        .arg(&two));
    assert!(ok, "dwz -m failed on the fixture");
    Some((plain, one))
}

/// What a file answers about the fixture: walk's probe, its variables,
/// the sites of the inlined `add` and of its line 2, and the lines of
/// `add` with code.
fn dwz_answers(path: &Path) -> (String, Vec<String>, Vec<String>, Vec<u64>) {
    let file = DebugFile::open(path).unwrap();
    let di = DebugInfo::with_cache(&file, None).unwrap();
    let args: Vec<ProbeArg> = ["p", "n", "p->y", "p->next->x"]
        .iter()
        .map(|a| ProbeArg::parse(a).unwrap())
        .collect();
    let walk = ProbePoint::parse("walk").unwrap();
    let r = di.resolve(&walk, &args, &Options::default()).unwrap();
    let definition = r.probes[0].definition("probe", "walk");
    let site = &di.sites(&walk, &Options::default()).unwrap()[0];
    let mut vars: Vec<String> = di
        .variables(site)
        .unwrap()
        .iter()
        .map(|v| format!("{}\t{}", v.type_name, v.name))
        .collect();
    vars.sort();
    let mut sites = Vec::new();
    for point in ["add", "add:2"] {
        let point = ProbePoint::parse(point).unwrap();
        for s in di.sites(&point, &Options::default()).unwrap() {
            sites.push(format!("{} {} {:?}", s.location, s.source, s.instance));
        }
    }
    let lines = di.lines("add", None).unwrap().lines;
    (definition, vars, sites, lines)
}

#[test]
fn dwz_supplementary_files_answer_as_the_plain_program() {
    let dir = scratch("dwz");
    let Some((plain, dwz)) = dwz_pair(&dir, &[]) else {
        return;
    };
    // dwz moved the shared types and strings out, and says where.
    assert!(section_names(&dwz).contains(".gnu_debugaltlink"));
    let sup_dir = scratch("dwz5");
    // The DWARF 5 form: .debug_sup, DW_FORM_ref_sup4 and strp_sup.
    let (_, sup) = dwz_pair(&sup_dir, &["--dwarf-5"]).unwrap();
    assert!(section_names(&sup).contains(".debug_sup"));
    assert_eq!(dwz_answers(&sup), dwz_answers(&dwz));
    let _ = std::fs::remove_dir_all(&sup_dir);
    let (definition, vars, sites, lines) = dwz_answers(&dwz);
    assert_eq!(
        definition,
        "p:probe/walk walk+0 p=%di:x64 n=%si:s32 y=+4(%di):s32 x=+0(+8(%di)):s32"
    );
    assert_eq!(vars, ["int\ti", "int\tn", "int\ts", "struct point*\tp"]);
    // The abstract `add` is in a partial unit; its copies in the units
    // that import it, at its entry and at its line 2 (perf finds the
    // latter, "add_L2" at the same two addresses, and not the former).
    let copies = [
        "walk+16 h.h:4 Inlined { into: \"walk\", call: \"a.c:6\" }",
        "walk2+0 h.h:4 Inlined { into: \"walk2\", call: \"b.c:2\" }",
    ];
    assert_eq!(sites, [copies, copies].concat());
    // Its lines, from the copies in the importing units.
    assert_eq!(lines, [2, 4]);
    assert_eq!(dwz_answers(&plain), (definition, vars, sites, lines));
    // Without its supplementary file, the message says which and where.
    std::fs::rename(dir.join("alt.debug"), dir.join("moved.debug")).unwrap();
    let file = DebugFile::open(&dwz).unwrap();
    let e = DebugInfo::with_cache(&file, None).unwrap_err().to_string();
    assert!(
        e.contains("keeps part of its DWARF in a supplementary file")
            && e.contains(&dir.join("alt.debug").display().to_string()),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fixture compiled by `cc` with `-O2` and `flags`, in its own
/// directory under `dir` (split DWARF's `.dwo` lands beside it); None
/// (with the reason printed) without that compiler.
fn build(cc: &str, flags: &[&str], dir: &Path, name: &str) -> Option<PathBuf> {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("forms.c"), SOURCE).ok()?;
    run(Command::new(cc)
        .current_dir(&dir)
        .args(flags)
        .args(["-O2", "-o", name, "forms.c"]))
    .then(|| dir.join(name))
}

/// `walk`'s probe and the sites of `walk:4` in `bin`.
fn answers(bin: &Path) -> (String, Vec<String>) {
    let file = DebugFile::open(bin).unwrap();
    let di = DebugInfo::with_cache(&file, None).unwrap();
    let line = ProbePoint::parse("walk:4").unwrap();
    let sites = di
        .sites(&line, &Options::default())
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s.location, s.source))
        .collect();
    (walk_definition(bin), sites)
}

/// gcc's answers, as perf probe -x gives them (perf 6.1).
fn gcc_answers() -> (String, Vec<String>) {
    (
        "p:probe/walk walk+0 p=%di:x64 n=%si:s32 y=+4(%di):s32".to_string(),
        vec!["walk+16 forms.c:8".to_string()],
    )
}

/// clang's: the pointer has no fetch type (perf's neither), and the line
/// is five statements of the unrolled loop.
fn clang_answers() -> (String, Vec<String>) {
    (
        "p:probe/walk walk+0 p=%di n=%si:s32 y=+4(%di):s32".to_string(),
        ["walk+32", "walk+44", "walk+56", "walk+66", "walk+96"]
            .map(|s| format!("{s} forms.c:8"))
            .to_vec(),
    )
}

const NO_CLANG: &str =
    "clang is not installed (apt-get install clang; cargo xtask test installs it)";

#[test]
fn dwarf_4_and_5_from_gcc_and_clang() {
    let dir = scratch("versions");
    // perf 6.1 crashes (SIGSEGV) on -V walk:4 of clang's DWARF 5.
    for version in [4, 5] {
        let flag = format!("-gdwarf-{version}");
        let gcc = build("gcc", &[&flag], &dir, &format!("gcc-{version}")).unwrap();
        assert_eq!(answers(&gcc), gcc_answers(), "gcc {flag}");
        match build("clang", &[&flag], &dir, &format!("clang-{version}")) {
            Some(clang) => assert_eq!(answers(&clang), clang_answers(), "clang {flag}"),
            None => println!("SKIP clang {flag}: {NO_CLANG}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `llvm-dwp` in /usr/bin (clang's LLVM has one, versioned).
fn llvm_dwp() -> Option<PathBuf> {
    std::fs::read_dir("/usr/bin")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "llvm-dwp" || n.starts_with("llvm-dwp-"))
        })
}

#[test]
fn split_dwarf_in_dwo_files_and_dwp_packages() {
    let dir = scratch("split");
    // gcc -gsplit-dwarf: the units are in gcc-split-N-forms.dwo, DWARF 4
    // (GNU's extension) and 5 (perf 6.1 answers neither: "Failed to add
    // events").
    for version in [4, 5] {
        let flag = format!("-gdwarf-{version}");
        let name = format!("gcc-split-{version}");
        let gcc = build("gcc", &[&flag, "-gsplit-dwarf"], &dir, &name).unwrap();
        assert!(gcc.with_file_name(format!("{name}-forms.dwo")).exists());
        assert_eq!(answers(&gcc), gcc_answers(), "gcc {flag}");
        let name = format!("clang-split-{version}");
        match build("clang", &[&flag, "-gsplit-dwarf"], &dir, &name) {
            Some(clang) => assert_eq!(answers(&clang), clang_answers(), "clang {flag}"),
            None => println!("SKIP clang -gsplit-dwarf: {NO_CLANG}"),
        }
    }
    let Some(clang) = build("clang", &["-g", "-gsplit-dwarf"], &dir, "clang-split") else {
        println!("SKIP clang -gsplit-dwarf: {NO_CLANG}");
        return;
    };
    assert_eq!(answers(&clang), clang_answers());
    // The .dwo packed into clang-split.dwp beside the binary, and gone.
    let dwp = llvm_dwp().expect("clang's LLVM has llvm-dwp");
    let package = clang.with_extension("dwp");
    assert!(run(Command::new(dwp)
        .arg("-e")
        .arg(&clang)
        .arg("-o")
        .arg(&package)));
    std::fs::remove_file(clang.with_file_name("forms.dwo")).unwrap();
    assert_eq!(answers(&clang), clang_answers());
    // Without either, the function is unknown, as in a stripped file;
    // and that index is not cached: once the package is back, it is read.
    let saved = dir.join("saved.dwp");
    std::fs::rename(&package, &saved).unwrap();
    let cache = dir.join("cache");
    let walk = ProbePoint::parse("walk").unwrap();
    let file = DebugFile::open(&clang).unwrap();
    let di = DebugInfo::with_cache(&file, Some(&cache)).unwrap();
    let e = di.sites(&walk, &Options::default());
    assert!(e.is_err(), "{e:?}");
    std::fs::rename(&saved, &package).unwrap();
    let file = DebugFile::open(&clang).unwrap();
    let di = DebugInfo::with_cache(&file, Some(&cache)).unwrap();
    assert_eq!(di.sites(&walk, &Options::default()).unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
