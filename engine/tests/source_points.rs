//! Source points in definitions (`p:FUNC@+N var`), expanded by the kernel
//! stage from a small C program's DWARF compiled at test time with
//! `gcc -g -O2` (skipped, with the reason printed, without gcc): the
//! definitions each site becomes, their names, and arguments that are not
//! variables kept as written and in place.

use std::path::PathBuf;
use std::process::Command;

use kprobe_perf_engine::KernelSymbols;
use kprobe_perf_engine::{Kernel, KernelOptions};

const SOURCE: &str = r#"
static inline __attribute__((always_inline)) int add(int a, int b)
{
	return a + b;
}

__attribute__((noinline)) long twice(long v)
{
	return add((int)v, (int)v) * 2L;
}

__attribute__((noinline)) int thrice(int v)
{
	return add(v, add(v, v));
}

int main(int argc, char **argv)
{
	return (int)twice(argc) + thrice(argc) + argv[0][0];
}
"#;

fn compile() -> Option<PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("kprobe-perf-source-points-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("points.c");
    std::fs::write(&src, SOURCE).ok()?;
    let bin = dir.join("points");
    let ok = Command::new("gcc")
        .args(["-g", "-O2", "-Wl,--build-id", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: gcc is not available or failed on the fixture");
        return None;
    }
    Some(bin)
}

/// A kernel whose debug file is the fixture (of another build than the
/// running kernel, hence `other_kernel`).
fn kernel(bin: PathBuf) -> Kernel {
    Kernel::with_symbols(
        KernelSymbols::default(),
        KernelOptions::default().vmlinux(bin).other_kernel(true),
    )
}

#[test]
fn a_source_point_becomes_one_definition_per_site() {
    let Some(bin) = compile() else { return };
    let k = kernel(bin);
    // `twice` has its own body: one site, the entry by DWARF.
    let e = k
        .expand_source("p:twice@ v $comm", true)
        .unwrap()
        .expect("a source point");
    let defs: Vec<&str> = e.probes.iter().map(|p| p.definition.as_str()).collect();
    assert_eq!(defs.len(), 1, "{defs:?}");
    assert!(
        defs[0].starts_with("p:twice twice+0 v=%di:s64 $comm"),
        "{defs:?}"
    );
    // `add` is inlined (into twice and, twice, into thrice): one
    // definition per copy, the first named `add`, the others `add_N`.
    let e = k
        .expand_source("p:grp/sum add@ $comm", true)
        .unwrap()
        .expect("a source point");
    let names: Vec<String> = e
        .probes
        .iter()
        .map(|p| p.definition.split(' ').next().unwrap_or("").to_string())
        .collect();
    assert!(names.len() >= 2, "{e:?}");
    for (i, n) in names.iter().enumerate() {
        let want = if i == 0 {
            "p:grp/sum".to_string()
        } else {
            format!("p:grp/sum_{i}")
        };
        assert_eq!(n, &want, "{names:?}");
    }
    // Other definitions are not touched (and need no debug info).
    assert!(k.expand_source("p:twice %di", true).unwrap().is_none());
}

#[test]
fn mistakes_are_shown_under_the_text() {
    let Some(bin) = compile() else { return };
    let k = kernel(bin);
    let e = k.expand_source("p:twice@ v nosuch", true).unwrap_err();
    assert!(e.to_string().contains("nosuch"), "{e}");
    let e = k.expand_source("p:twice@ v->", true).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("\n  p:twice@ v->\n") && text.contains("^^^"),
        "{text}"
    );
    let e = k.expand_source("p:nosuchfunc@+2 v", true).unwrap_err();
    assert!(e.to_string().contains("nosuchfunc"), "{e}");
}
