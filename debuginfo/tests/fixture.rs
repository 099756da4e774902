//! Lines, variables and inlined copies of a small C program compiled at
//! test time with `gcc -g -O2` (skipped, with the reason printed, without gcc).

use std::path::PathBuf;
use std::process::Command;

use kprobe_perf_debuginfo::{DebugFile, DebugInfo, Error, Instance, Options, ProbeArg, ProbePoint};

const SOURCE: &str = r#"
struct point { int x; int y; struct point *next; };

static inline __attribute__((always_inline)) int add(int a, int b)
{
	return a + b;
}

__attribute__((noinline)) int walk(struct point *p, int n)
{
	int sum = 0;
	for (int i = 0; i < n; i++) {
		sum += add(p->x, p->y);
		p = p->next; /* NEXT */
	}
	return sum;
}

__attribute__((noinline)) long twice(long v)
{
	return add((int)v, (int)v) * 2L;
}

int main(int argc, char **argv)
{
	struct point p = { 1, 2, 0 };
	return walk(&p, argc) + (int)twice(argc) + argv[0][0];
}
"#;

/// Compiles the fixture into a fresh temporary directory; None (with the reason printed) without gcc.
fn compile() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "kprobe-perf-debuginfo-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("fixture.c");
    std::fs::write(&src, SOURCE).ok()?;
    let bin = dir.join("fixture");
    match Command::new("gcc")
        .args([
            "-g",
            "-O2",
            "-fno-omit-frame-pointer",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .status()
    {
        Ok(s) if s.success() => Some(bin),
        Ok(s) => {
            eprintln!("skipped: gcc failed ({s}) on the fixture");
            None
        }
        Err(e) => {
            eprintln!("skipped: gcc is not available ({e})");
            None
        }
    }
}

fn line_of(marker: &str) -> u64 {
    SOURCE
        .lines()
        .position(|l| l.contains(marker))
        .map_or(0, |i| i as u64 + 1)
}

fn args(list: &[&str]) -> Vec<ProbeArg> {
    list.iter().map(|a| ProbeArg::parse(a).unwrap()).collect()
}

#[test]
fn entry_variables_and_fields() {
    let Some(bin) = compile() else { return };
    let file = DebugFile::open(&bin).unwrap();
    let di = DebugInfo::with_cache(&file, None).unwrap();
    let point = ProbePoint::parse("walk").unwrap();
    let r = di
        .resolve(
            &point,
            &args(&["p", "n", "p->y", "p->next->x"]),
            &Options::default(),
        )
        .unwrap();
    assert_eq!(r.probes.len(), 1, "{r:?}");
    let p = &r.probes[0];
    assert_eq!(p.site.location, "walk+0");
    assert_eq!(p.site.instance, Instance::OutOfLine);
    assert_eq!(
        p.definition("probe", "walk"),
        "p:probe/walk walk+0 p=%di:x64 n=%si:s32 y=+4(%di):s32 x=+0(+8(%di)):s32"
    );
    let vars: Vec<String> = di
        .variables(&p.site)
        .unwrap()
        .iter()
        .map(|v| format!("{} {}", v.type_name, v.name))
        .collect();
    assert!(vars.contains(&"struct point* p".to_string()), "{vars:?}");
    assert!(vars.contains(&"int n".to_string()), "{vars:?}");
    // $params: both parameters, in declaration order.
    let r = di
        .resolve(&point, &[ProbeArg::Params], &Options::default())
        .unwrap();
    let names: Vec<&str> = r.probes[0].args.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["p", "n"]);
    // A string through char **: argv[0].
    let r = di
        .resolve(
            &ProbePoint::parse("main").unwrap(),
            &args(&["argv[0]:string"]),
            &Options::default(),
        )
        .unwrap();
    assert_eq!(r.probes[0].args[0].fetch, "+0(+0(%si))");
    assert_eq!(r.probes[0].args[0].kind.as_deref(), Some("string"));
    // Wrong member access says what to write instead.
    let e = di
        .resolve(&point, &args(&["p.x"]), &Options::default())
        .unwrap_err();
    assert!(e.to_string().contains("use '->x'"), "{e}");
    let e = di
        .resolve(&point, &args(&["nosuch"]), &Options::default())
        .unwrap_err();
    assert!(matches!(e, Error::NoVariable { .. }), "{e}");
}

#[test]
fn inlined_copies() {
    let Some(bin) = compile() else { return };
    let file = DebugFile::open(&bin).unwrap();
    let di = DebugInfo::with_cache(&file, None).unwrap();
    let point = ProbePoint::parse("add").unwrap();
    let sites = di.sites(&point, &Options::default()).unwrap();
    let into: Vec<String> = sites
        .iter()
        .map(|s| match &s.instance {
            Instance::Inlined { into, .. } => into.clone(),
            Instance::OutOfLine => "out-of-line".into(),
        })
        .collect();
    assert!(into.iter().any(|i| i == "walk"), "{into:?}");
    assert!(
        into.iter()
            .any(|i| i.starts_with("twice") || i.starts_with("main")),
        "{into:?}"
    );
    assert!(!into.iter().any(|i| i == "out-of-line"), "{into:?}");
    // With inlines off there is nothing left to probe.
    assert!(di.sites(&point, &Options { inlines: false }).is_err());
}

#[test]
fn lines() {
    let Some(bin) = compile() else { return };
    let file = DebugFile::open(&bin).unwrap();
    let di = DebugInfo::with_cache(&file, None).unwrap();
    let l = di.lines("walk", None).unwrap();
    assert_eq!(l.decl_line, line_of("int walk("));
    let next = line_of("/* NEXT */");
    assert!(l.lines.contains(&next), "{l:?}");
    // FUNC:RLINE and FILE:LINE name the same statement.
    let rel = ProbePoint::parse(&format!("walk:{}", next - l.decl_line)).unwrap();
    let abs = ProbePoint::parse(&format!("fixture.c:{next}")).unwrap();
    let a: Vec<u64> = di
        .sites(&rel, &Options::default())
        .unwrap()
        .iter()
        .map(|s| s.address)
        .collect();
    let b: Vec<u64> = di
        .sites(&abs, &Options::default())
        .unwrap()
        .iter()
        .map(|s| s.address)
        .collect();
    assert_eq!(a, b);
    assert!(!a.is_empty());
    let sites = di.sites(&abs, &Options::default()).unwrap();
    assert!(sites[0].location.starts_with("walk+"), "{:?}", sites[0]);
    assert!(
        sites[0].source.ends_with(&format!("/fixture.c:{next}")),
        "{:?}",
        sites[0]
    );
    // A line without code is refused with the lines that have some.
    let e = di
        .sites(
            &ProbePoint::parse("walk:1000").unwrap(),
            &Options::default(),
        )
        .unwrap_err();
    assert!(matches!(e, Error::NoCodeAtLine { .. }), "{e}");
}

#[test]
fn build_id_mismatch_is_refused() {
    let Some(bin) = compile() else { return };
    if std::fs::read("/sys/kernel/notes").is_err() {
        eprintln!("skipped: /sys/kernel/notes is not readable");
        return;
    }
    // The fixture is not the running kernel: its build ID differs.
    match kprobe_perf_debuginfo::locate::find_kernel(Some(&bin)) {
        Err(Error::BuildIdMismatch { .. }) => {}
        other => panic!("expected a build-ID mismatch, got {other:?}"),
    }
    // A user binary with its own DWARF is its own debug file.
    let found = kprobe_perf_debuginfo::locate::find_user(&bin).unwrap();
    assert_eq!(found.path(), bin);
}
