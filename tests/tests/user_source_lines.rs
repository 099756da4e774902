//! Issue #27 in user space: source points and local variables of a user
//! binary's DWARF, in uprobes. tests/data/user_source.c, built here with
//! `cc -O2 -g`, is probed by line and variable name; the recording must
//! give exactly the values the program computes, the definitions must be
//! those `perf probe -x BIN -D` prints (or differ as
//! docs/source-vs-perf.md explains), and a variable kprobe fetch arguments
//! cannot read is refused with its reason under the argument.
//!
//! `walk(&p, rounds)` with p = {10, 7, "hello"} and 3 rounds: at
//! `walk:4` (`long step = mix(p->x + i, p->y);`, line 26) `total` is 0,
//! 37, 77 and `i` 0, 1, 2; in mix's inlined copy, at line 18
//! (`sink(m);`), `m = (p->x + i) * 3 + p->y` is 37, 40, 43.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kprobe_perf_tests::{
    build_c, kprobe_perf_bin, skip_here, uprobes_available, vm_kernel, CProgram,
};

/// The program, built for one test in a directory of its own, removed
/// after.
type Built = CProgram;

/// Builds tests/data/user_source.c with `cc -O2 -g`; `None` (after a
/// SKIP line saying why) where there is no C compiler.
fn build(test: &str) -> Option<Built> {
    build_c(test, "user_source", &["-O2", "-g"])
}

/// True (after a SKIP line) inside the VM: the offline tests involve no
/// kernel, and take a second on the host where TCG takes minutes.
fn in_the_vm(test: &str) -> bool {
    if vm_kernel().is_some() {
        skip_here(
            test,
            "offline (no kernel involved): it runs on the host, where it takes a second, not TCG's minutes",
        );
        return true;
    }
    false
}

/// The program built for a comparison with perf, on the host: `None`
/// (after a SKIP line saying why) in the VM, without perf, or without a
/// C compiler.
fn built_beside_perf(test: &str) -> Option<Built> {
    if in_the_vm(test) {
        return None;
    }
    let perf_runs = Command::new("perf").arg("--version").output();
    if !perf_runs.is_ok_and(|o| o.status.success()) {
        skip_here(test, "no perf here to compare with");
        return None;
    }
    build(test)
}

/// Splits the built program's DWARF off with objcopy: the debug file
/// (`user_source.debug`) and a copy stripped of its DWARF (`stripped`),
/// with a `.gnu_debuglink` to the debug file when `link`. `None` when
/// objcopy fails or is missing.
fn split_debug(b: &Built, link: bool) -> Option<(PathBuf, PathBuf)> {
    let debug = b.dir.join("user_source.debug");
    let stripped = b.dir.join("stripped");
    let run = |args: &[&std::ffi::OsStr]| {
        Command::new("objcopy")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let linked = format!("--add-gnu-debuglink={}", debug.display());
    let mut strip: Vec<&std::ffi::OsStr> = vec!["--strip-debug".as_ref()];
    if link {
        strip.push(linked.as_ref());
    }
    strip.extend([b.bin.as_os_str(), stripped.as_os_str()]);
    let ok = run(&[
        "--only-keep-debug".as_ref(),
        b.bin.as_os_str(),
        debug.as_os_str(),
    ]) && run(&strip);
    ok.then_some((debug, stripped))
}

fn kprobe_perf(args: &[&str]) -> Output {
    Command::new(kprobe_perf_bin()).args(args).output().unwrap()
}

/// `EVENT: (ADDRESS) ARGS` lines of a recording's text, as (EVENT, ARGS).
fn hits(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("]")?;
            let (_, rest) = rest.split_once(": ")?;
            let (event, rest) = rest.split_once(": (")?;
            let (_, args) = rest.split_once(") ")?;
            Some((event.to_string(), args.to_string()))
        })
        .collect()
}

/// The arguments of each hit of `event`, in order.
fn of(hits: &[(String, String)], event: &str) -> Vec<String> {
    hits.iter()
        .filter(|(e, _)| e == event)
        .map(|(_, a)| a.clone())
        .collect()
}

#[test]
fn locals_of_a_user_source_line_are_recorded_by_name() {
    let test = "locals_of_a_user_source_line_are_recorded_by_name";
    if !uprobes_available(test) {
        return;
    }
    let Some(b) = build(test) else { return };
    let bin = b.bin.to_string_lossy();
    // A line of walk, relative to its declaration; an absolute line of
    // the file, inside the inlined copy of mix; mix's inlined entry; and
    // an out-of-line function's entry.
    let line = format!("p:{bin}:walk@+4 total i rounds p->x p->y p->name:string");
    let inlined = format!("p:{bin}:@user_source.c:18 m");
    let entry = format!("p:mix_b {bin}:mix@ b");
    let sink = format!("p:{bin}:sink@ v");
    // perf's lazy line `walk;sink(total)*`: the two calls of sink(total),
    // after the loop (total 120 here) and where rounds <= 0 (total is the
    // constant 0 there; not run).
    let lazy = format!("p:lazy_total {bin}:walk@;sink(total)* total");
    let out = Command::new(kprobe_perf_bin())
        .args([
            "record", "-e", &line, "-e", &inlined, "-e", &entry, "-e", &sink, "-e", &lazy, "--",
        ])
        .arg(&b.bin)
        .args(["10", "7", "hello", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("on {:?}:\n{stdout}{stderr}", vm_kernel());
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.lines().any(|l| l == "120"),
        "the program's own answer: {stdout}"
    );
    let hits = hits(&stdout);
    assert_eq!(
        of(&hits, "walk_L4"),
        [
            "total=0 i=0 rounds=3 x=10 y=7 name=\"hello\"",
            "total=37 i=1 rounds=3 x=10 y=7 name=\"hello\"",
            "total=77 i=2 rounds=3 x=10 y=7 name=\"hello\"",
        ],
        "{stdout}"
    );
    assert_eq!(
        of(&hits, "user_source_L18"),
        ["m=37", "m=40", "m=43"],
        "{stdout}"
    );
    assert_eq!(of(&hits, "mix_b"), ["b=7", "b=7", "b=7"], "{stdout}");
    // sink(m) in mix, then sink(step) in walk, each round; then sink(total).
    assert_eq!(
        of(&hits, "sink"),
        ["v=37", "v=37", "v=40", "v=40", "v=43", "v=43", "v=120"],
        "{stdout}"
    );
    assert_eq!(of(&hits, "lazy_total"), ["total=120"], "{stdout}");
    assert_eq!(of(&hits, "lazy_total_1"), Vec::<String>::new(), "{stdout}");
    assert!(stderr.contains(" 0 lost"), "{stderr}");
}

/// The points asked of both tools (perf's syntax), and what kprobe-perf
/// answers where the two differ on purpose.
const POINTS: &[&str] = &[
    "walk p rounds",
    "walk $params",
    "walk:4 total i rounds p->x p->y p->name:string",
    "walk:4 $vars",
    "user_source.c:18 m b",
    "mix b",
    "main:6 p.x p.y p.name:string rounds",
    "sink v",
    // Both refuse: the line shares its address with another; the variable
    // has no location there.
    "walk:5 total",
    "main:5 rounds",
    // Lazy lines (perf's FUNC;PATTERN), one site or several.
    "walk;sink(*",
    "walk;sink(total)* total",
    "walk;*mix(*",
    "mix;sink(m)* m b",
    "walk;* rounds",
    // perf reads `a` (computed: p->x + i) as the memory at p, kprobe-perf
    // refuses it.
    "mix a",
];

/// The definitions without their `p:GROUP/EVENT` heads (a FILE:LINE
/// probe's default name differs: perf names it after the function there,
/// kprobe-perf after the file and line; perf names every site of a lazy
/// line alike, kprobe-perf adds `_1`, `_2` ...), one a line.
fn body(definitions: &str) -> Option<String> {
    let bodies: Vec<&str> = definitions
        .lines()
        .filter(|l| l.starts_with("p:"))
        .filter_map(|l| l.split_once(' ').map(|(_, rest)| rest))
        .collect();
    (!bodies.is_empty()).then(|| bodies.join("\n"))
}

#[test]
fn user_definitions_match_perf_probe_x() {
    let test = "user_definitions_match_perf_probe_x";
    let Some(b) = built_beside_perf(test) else {
        return;
    };
    let bin = b.bin.to_string_lossy();
    let mut agree = 0;
    let mut differ = Vec::new();
    for point in POINTS {
        let perf = Command::new("perf")
            .args(["probe", "-x", &bin, "-D", point])
            .output()
            .unwrap();
        let perf_err = String::from_utf8_lossy(&perf.stderr);
        if perf_err.contains("tracefs") || perf_err.contains("debugfs") {
            return skip_here(
                test,
                &format!("perf probe needs tracefs mounted: {perf_err}"),
            );
        }
        let ours = kprobe_perf(&["probe", "--definition", "-x", &bin, point]);
        let theirs = body(&String::from_utf8_lossy(&perf.stdout));
        let mine = body(&String::from_utf8_lossy(&ours.stdout));
        println!("{point}\n  perf:        {theirs:?}\n  kprobe-perf: {mine:?}");
        assert_eq!(ours.status.success(), mine.is_some(), "{ours:?}");
        if theirs == mine {
            agree += 1;
        } else {
            differ.push((*point, theirs, mine));
        }
    }
    println!("{agree} of {} points: the same definitions", POINTS.len());
    // The differences, each a class of docs/source-vs-perf.md: where
    // rounds <= 0, `total` is the constant 0, which perf does not fetch
    // (it fails the whole point) and kprobe-perf fetches as `\0`; and
    // perf fetches the memory at p for a value that is p->x + i, which
    // kprobe-perf refuses to.
    assert_eq!(differ.len(), 2, "{differ:#?}");
    let (point, theirs, mine) = &differ[0];
    assert_eq!((*point, theirs), ("walk;sink(total)* total", &None));
    assert!(
        mine.as_deref()
            .is_some_and(|m| m.ends_with(" total=\\0:s64")),
        "{mine:?}"
    );
    let (point, theirs, mine) = &differ[1];
    assert_eq!((*point, mine), ("mix a", &None));
    assert!(
        theirs.as_deref().is_some_and(|t| t.contains("a=+0(%")),
        "{theirs:?}"
    );
}

#[test]
fn a_computed_user_variable_is_refused_under_its_name() {
    let test = "a_computed_user_variable_is_refused_under_its_name";
    if in_the_vm(test) {
        return;
    }
    let Some(b) = build(test) else { return };
    let bin = b.bin.to_string_lossy();
    let spec = format!("p:{bin}:@user_source.c:18 m a");
    let out = kprobe_perf(&["probe", "--definition", &spec]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    // kprobe-perf: cannot fetch a at walk+34: its value is computed ...
    let (head, why) = lines[0].split_once(": its").unwrap_or_default();
    assert!(
        head.starts_with("kprobe-perf: cannot fetch a at walk+"),
        "{stderr}"
    );
    assert_eq!(
        why,
        " value is computed (DW_OP_stack_value over an expression) and kprobe fetch arguments cannot compute",
        "{stderr}"
    );
    assert_eq!(lines[1], format!("  {spec}"), "{stderr}");
    assert_eq!(
        lines[2],
        format!("  {}^", " ".repeat(spec.len() - 1)),
        "{stderr}"
    );
    assert_eq!(lines.len(), 3, "{stderr}");
}

/// A binary stripped of its DWARF, with a `.gnu_debuglink` to a debug
/// file beside it: the debug file gives the lines and variables, the
/// binary its call frame information (which the debug file keeps without
/// bytes), so `p` in main's frame is still found (perf gives up there).
#[test]
fn a_debuglink_file_answers_for_a_stripped_binary() {
    let test = "a_debuglink_file_answers_for_a_stripped_binary";
    if in_the_vm(test) {
        return;
    }
    let Some(b) = build(test) else { return };
    let Some((_, stripped)) = split_debug(&b, true) else {
        return skip_here(test, "no objcopy here to split the debug info off");
    };
    let s = stripped.to_string_lossy();
    let full = kprobe_perf(&[
        "probe",
        "--definition",
        "-x",
        &b.bin.to_string_lossy(),
        "main:6 p.x p.name:string",
    ]);
    let split = kprobe_perf(&[
        "probe",
        "--definition",
        "-x",
        &s,
        "main:6 p.x p.name:string",
    ]);
    let full = String::from_utf8_lossy(&full.stdout).into_owned();
    let split = String::from_utf8_lossy(&split.stdout).into_owned();
    println!("{full}{split}");
    // The same site and fetches, in the stripped binary.
    let b_path = b.bin.to_string_lossy().into_owned();
    assert!(full.contains(" x=+") && full.contains(" name=+"), "{full}");
    assert_eq!(
        split
            .replace(&*s, &b_path)
            .replace("probe_stripped/", "probe_user_source/"),
        full
    );
}

/// The build ID of an ELF file, as `readelf -n` prints it.
fn build_id(file: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-n").arg(file).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

/// A debuginfod server (Debian's `debuginfod -U`, elfutils' own) on a
/// free loopback port, indexing the Debian packages in `dir`; ended on
/// drop.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts it and waits (30 s at most) until it serves `id`.
    fn start(dir: &Path, id: &str) -> Option<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = Command::new("debuginfod")
            .args(["-U", "-p", &port.to_string(), "-d"])
            .arg(dir.join("index.sqlite"))
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let address = format!("{}/buildid/{id}/debuginfo", server.url);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let got = Command::new("curl")
                .args(["--fail", "--silent", "--output", "/dev/null", &address])
                .status();
            if got.is_ok_and(|s| s.success()) {
                return Some(server);
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        None
    }
}

/// A binary stripped of its DWARF, with no debuglink and no local debug
/// file: its build ID, asked of a debuginfod server on loopback (Debian's
/// own, over a dbgsym package of the debug file built here), gives the same
/// definition as the unstripped binary, and the file lands in the cache
/// where elfutils' client keeps it. Without DEBUGINFOD_URLS the refusal
/// says to set it; a server that is down is named with curl's reason; a
/// server that answers with another build's file is refused.
#[test]
fn debuginfod_gives_a_stripped_binary_its_debug_info() {
    let test = "debuginfod_gives_a_stripped_binary_its_debug_info";
    if in_the_vm(test) {
        return;
    }
    for tool in [
        "debuginfod",
        "curl",
        "objcopy",
        "readelf",
        "dpkg-deb",
        "bsdtar",
    ] {
        if Command::new(tool).arg("--version").output().is_err() {
            return skip_here(
                test,
                &format!("{tool} is not installed (cargo xtask test installs debuginfod, curl and libarchive-tools)"),
            );
        }
    }
    let Some(b) = build(test) else { return };
    let served = b.dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let (debug_file, stripped) = split_debug(&b, false).expect("objcopy splits the debug info");
    let id = build_id(&stripped).expect("cc links a build ID");
    // A dbgsym package as Debian builds them: the debug file at its
    // build-ID path.
    let pkg = b.dir.join("pkg");
    let in_pkg = pkg.join(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    std::fs::create_dir_all(in_pkg.parent().unwrap()).unwrap();
    std::fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
    std::fs::copy(&debug_file, &in_pkg).unwrap();
    std::fs::write(
        pkg.join("DEBIAN/control"),
        "Package: user-source-dbgsym\nVersion: 1.0\nArchitecture: amd64\n\
         Maintainer: kprobe-perf tests <tests@example.invalid>\n\
         Description: debug symbols of tests/data/user_source.c\n",
    )
    .unwrap();
    let deb = Command::new("dpkg-deb")
        .arg("--build")
        .arg(&pkg)
        .arg(served.join("user-source-dbgsym_1.0_amd64.deb"))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(deb.success());
    let s = stripped.to_string_lossy().into_owned();
    let point = "main:6 p.x p.name:string";
    let cache = b.dir.join("cache");
    let with_urls = |urls: Option<&str>| {
        let mut c = Command::new(kprobe_perf_bin());
        c.args(["probe", "--definition", "-x", &s, point])
            .env("DEBUGINFOD_CACHE_PATH", &cache)
            .env_remove("DEBUGINFOD_URLS");
        if let Some(u) = urls {
            c.env("DEBUGINFOD_URLS", u);
        }
        c.output().unwrap()
    };

    // No server set: refused, saying where it looked and what to set.
    let none = with_urls(None);
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(!none.status.success());
    assert!(
        err.contains(&format!("no debug info found for {s}")) && err.contains("DEBUGINFOD_URLS="),
        "{err}"
    );

    // A server that is down, then Debian's: the second one answers.
    let server = Server::start(&served, &id).expect("debuginfod serves the debug file");
    let urls = format!("http://127.0.0.1:1 {}", server.url);
    let got = with_urls(Some(&urls));
    let full = kprobe_perf(&[
        "probe",
        "--definition",
        "-x",
        &b.bin.to_string_lossy(),
        point,
    ]);
    let (got_out, full_out) = (
        String::from_utf8_lossy(&got.stdout).into_owned(),
        String::from_utf8_lossy(&full.stdout).into_owned(),
    );
    println!("{got_out}{}", String::from_utf8_lossy(&got.stderr));
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(
        full_out.contains(" x=+") && full_out.contains(" name=+"),
        "{full_out}"
    );
    assert_eq!(
        got_out
            .replace(&s, &b.bin.to_string_lossy())
            .replace("probe_stripped/", "probe_user_source/"),
        full_out
    );
    let cached = cache.join(&id).join("debuginfo");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(&debug_file).unwrap(),
        "the cache holds the server's file"
    );
    drop(server);

    // From the cache, with the server gone.
    let again = with_urls(Some("http://127.0.0.1:1"));
    assert_eq!(String::from_utf8_lossy(&again.stdout), got_out);

    // Only the server that is down: named, with curl's reason.
    std::fs::remove_dir_all(&cache).unwrap();
    let down = with_urls(Some("http://127.0.0.1:1"));
    let err = String::from_utf8_lossy(&down.stderr);
    assert!(!down.status.success());
    assert!(
        err.contains("and the debuginfod servers http://127.0.0.1:1 (Failed to connect"),
        "{err}"
    );

    // A server whose answer is another build's file: refused, not used.
    let other = b.dir.join("other");
    std::fs::create_dir_all(other.join("buildid").join(&id)).unwrap();
    let other_build = b.dir.join("other.debug");
    let built = Command::new("cc")
        .args(["-O0", "-g", "-o"])
        .arg(&other_build)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/user_source.c"))
        .status()
        .unwrap();
    assert!(built.success());
    std::fs::copy(
        &other_build,
        other.join("buildid").join(&id).join("debuginfo"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut http = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .current_dir(&other)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut lying = with_urls(Some(&url));
    for _ in 0..50 {
        if !String::from_utf8_lossy(&lying.stderr).contains("Failed to connect") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(&cache);
        lying = with_urls(Some(&url));
    }
    let _ = http.kill();
    let _ = http.wait();
    let err = String::from_utf8_lossy(&lying.stderr);
    assert!(!lying.status.success());
    assert!(
        err.contains(&format!("but {s} has {id}")) && err.contains("belongs to another build"),
        "{err}"
    );
}

/// `probe --source FUNC -x BINARY` prints what `perf probe -x BINARY -L
/// FUNC` prints, byte for byte: the header with the source file's path
/// (found under the unit's compilation directory), the lines from the
/// declaration, numbered where a probe can go. For every function of
/// tests/data/user_source.c, from another working directory than the
/// build's, and for `walk` of the stripped copy with a debuglink; but for
/// `mix`, which is only ever inlined, perf's listing leaves line 0 (the
/// declaration, whose row starts the inlined copy) unnumbered while
/// `perf probe -D 'mix:0'` puts a probe there: kprobe-perf numbers it,
/// at the address both give.
#[test]
fn user_source_listings_equal_perf_probe_x_l() {
    let test = "user_source_listings_equal_perf_probe_x_l";
    let Some(b) = built_beside_perf(test) else {
        return;
    };
    let Some((_, stripped)) = split_debug(&b, true) else {
        return skip_here(test, "no objcopy here to split the debug info off");
    };
    let bin = b.bin.to_string_lossy().into_owned();
    // (ours on, perf on, function): perf does not follow the stripped
    // copy's debuglink for -L, so it lists the unstripped binary there.
    let stripped = stripped.to_string_lossy().into_owned();
    let cases = [
        (bin.as_str(), bin.as_str(), "walk"),
        (bin.as_str(), bin.as_str(), "mix"),
        (bin.as_str(), bin.as_str(), "main"),
        (stripped.as_str(), bin.as_str(), "walk"),
    ];
    for (binary, perf_binary, func) in cases {
        let run = |program: &Path, args: &[&str]| {
            let out = Command::new(program)
                .args(args)
                .current_dir("/")
                .output()
                .unwrap();
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (perf, perf_err) = run(Path::new("perf"), &["probe", "-x", perf_binary, "-L", func]);
        if perf_err.contains("tracefs") || perf_err.contains("debugfs") {
            return skip_here(test, &format!("perf probe needs tracefs here: {perf_err}"));
        }
        let (ours, ours_err) = run(
            &kprobe_perf_bin(),
            &["probe", "--source", func, "-x", binary],
        );
        println!("{binary} {func}:\n{ours}{ours_err}");
        assert!(perf.lines().count() > 3, "perf -L {func}: {perf}{perf_err}");
        if func != "mix" {
            assert_eq!(ours, perf, "{binary}: {func}");
            continue;
        }
        assert_eq!(ours.replacen("\n      0  ", "\n         ", 1), perf);
        let (perf_d, _) = run(Path::new("perf"), &["probe", "-x", binary, "-D", "mix:0"]);
        let (ours_d, _) = run(
            &kprobe_perf_bin(),
            &["probe", "--definition", "-x", binary, "mix:0"],
        );
        let at = |d: &str| d.split_whitespace().nth(1).map(str::to_string);
        assert!(at(&perf_d).is_some(), "perf -D mix:0: {perf_d}");
        assert_eq!(at(&ours_d), at(&perf_d), "mix:0: {ours_d} / {perf_d}");
    }
}

/// perf probe's short flags, in perf's order (`-x BIN` first or last):
/// `-L FUNC` lists the lines byte for byte as perf probe -L does, `-V`
/// and `-D` print what `--vars` and `--definition` print.
#[test]
fn perf_probes_short_flags_work_as_perfs() {
    let test = "perf_probes_short_flags_work_as_perfs";
    let Some(b) = built_beside_perf(test) else {
        return;
    };
    let bin = b.bin.to_string_lossy();
    let perf = Command::new("perf")
        .args(["probe", "-x", &bin, "-L", "walk"])
        .output()
        .unwrap();
    let ours = kprobe_perf(&["probe", "-x", &bin, "-L", "walk"]);
    assert!(ours.status.success(), "{ours:?}");
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&perf.stdout)
    );
    for (short, long, what) in [
        ("-V", "--vars", "walk:4"),
        ("-D", "--definition", "walk:4 total"),
    ] {
        let a = kprobe_perf(&["probe", short, what, "-x", &bin]);
        let b = kprobe_perf(&["probe", "-x", &bin, long, what]);
        assert!(a.status.success(), "{a:?}");
        assert_eq!(a.stdout, b.stdout, "{short}");
        assert!(!a.stdout.is_empty());
    }
}
