//! `--call-graph dwarf`: user stacks of binaries built without frame
//! pointers (Debian's `ls` and libc), unwound from DWARF call frame
//! information. A uprobe on libc's `opendir` under `ls /` (one call, from
//! `main` through two functions of `ls`) gives the same frames live, from
//! the `-o` file (`script -i`), and in `perf script` of that file; and
//! the same as a frame-pointer walk cannot (it stops after one frame).

use std::path::Path;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, libc_path, skip, skip_here, uprobes_available};

/// The user frames under the event line: (address, symbol, object).
fn frames(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let addr = w.next()?.to_string();
            let sym = w.next()?.to_string();
            let obj = w.next()?.trim_matches(|c| c == '(' || c == ')').to_string();
            Some((addr, sym, obj))
        })
        .collect()
}

/// Runs `program args`, asserts that it succeeded, and returns its
/// stdout.
fn stdout_of(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{stdout}\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn record(args: &[&str]) -> String {
    stdout_of(&kprobe_perf_bin(), &[&["record"], args].concat())
}

/// The probe on libc's `opendir` and a new directory for the test's
/// files; `None` (the test skipped, with its reason) without uprobes, the
/// C library or `/usr/bin/ls`.
fn opendir_probe(test: &str, what: &str) -> Option<(String, std::path::PathBuf)> {
    if !uprobes_available(test) {
        return None;
    }
    let (Some(libc), true) = (libc_path(), Path::new("/usr/bin/ls").exists()) else {
        skip(
            test,
            "no libc in this process's mappings, or no /usr/bin/ls",
        );
        return None;
    };
    let dir = std::env::temp_dir().join(format!("kpf-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    Some((format!("p:{libc}:opendir"), dir))
}

#[test]
fn dwarf_unwinds_ls_through_main_live_from_the_file_and_in_perf() {
    let test = "dwarf_unwinds_ls_through_main_live_from_the_file_and_in_perf";
    let Some((probe, dir)) = opendir_probe(test, "dwarf") else {
        return;
    };
    let file = dir.join("ls.data");
    let file = file.to_str().unwrap();
    let live = record(&[
        "--call-graph",
        "dwarf",
        "-o",
        file,
        "-e",
        &probe,
        "--",
        "/usr/bin/ls",
        "/",
    ]);
    let live_frames = frames(&live);
    // opendir, two functions of ls, __libc_start_call_main,
    // __libc_start_main, _start (in ls); and, where libc's DWARF is
    // installed, the functions inlined in them (`(inlined)` lines, as
    // __libc_start_main_impl is, named apart from its symbol's alias).
    assert!(live_frames.len() >= 6, "{live}");
    let own: Vec<_> = live_frames.iter().filter(|f| f.2 != "inlined").collect();
    assert!(own[0].1.contains("opendir"), "{live}");
    assert!(own[1].2.ends_with("/ls"), "{live}");
    assert!(own[2].2.ends_with("/ls"), "{live}");
    assert!(
        live_frames
            .iter()
            .any(|f| f.1.starts_with("__libc_start_call_main+")),
        "{live}"
    );
    assert!(
        live_frames.last().is_some_and(|f| f.2.ends_with("/ls")),
        "{live}"
    );

    // The file holds the registers and stack bytes: unwound again.
    let replay = stdout_of(&kprobe_perf_bin(), &["script", "-i", file]);
    assert_eq!(frames(&replay), live_frames, "{replay}");

    // A frame-pointer walk stops at the first frame of this code.
    let fp = record(&[
        "--call-graph",
        "user",
        "-e",
        &probe,
        "--",
        "/usr/bin/ls",
        "/",
    ]);
    assert!(frames(&fp).len() < live_frames.len(), "{fp}");

    // perf unwinds the same file to the same frames, inlined ones
    // included (where the binaries' DWARF is installed, as libc6-dbg on
    // the test host: `(inlined)` lines at the address of the frame they
    // are inlined in), with file-relative addresses.
    let Ok(perf) = Command::new("perf").args(["script", "-i", file]).output() else {
        return skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    let text = String::from_utf8_lossy(&perf.stdout);
    let theirs = frames(&text);
    assert_eq!(
        theirs.len(),
        live_frames.len(),
        "perf:\n{text}\nours:\n{live}"
    );
    for (a, b) in live_frames.iter().zip(&theirs) {
        // The same object and offset into the same function, where perf
        // names it the same way (its inline-aware names may differ from
        // the symbol table's aliases).
        assert_eq!(
            Path::new(&a.2).file_name(),
            Path::new(&b.2).file_name(),
            "{a:?} {b:?}"
        );
        let off = |s: &str| s.rsplit_once("+0x").map(|(_, o)| o.to_string());
        if a.1 != "[unknown]" && b.1 != "[unknown]" {
            assert_eq!(off(&a.1), off(&b.1), "{a:?} {b:?}");
        }
        let addr = u64::from_str_radix(&a.0, 16).unwrap();
        let rel = u64::from_str_radix(&b.0, 16).unwrap();
        assert_eq!(addr & 0xfff, rel & 0xfff, "page offset of {a:?} and {b:?}");
    }
    // --srcline: the source lines of the frames, as perf's srcline field
    // prints them, where libc's DWARF is installed (libc6-dbg).
    let perf_src = Command::new("perf")
        .args([
            "script",
            "-F",
            "comm,tid,time,event,ip,sym,symoff,dso,srcline",
            "-i",
            file,
        ])
        .output()
        .unwrap();
    let src_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   ") && !l.ends_with(']'))
            .map(str::to_string)
            .collect()
    };
    let theirs_src = src_lines(&String::from_utf8_lossy(&perf_src.stdout));
    let ours_src = Command::new(kprobe_perf_bin())
        .args(["script", "--srcline", "-i", file])
        .output()
        .unwrap();
    let ours_src = src_lines(&String::from_utf8_lossy(&ours_src.stdout));
    if theirs_src.is_empty() {
        println!("{test}: no source lines from perf (libc's DWARF is not installed): --srcline not compared");
        assert!(ours_src.is_empty(), "{ours_src:?}");
    } else {
        // opendir's frames: the function inlined at the probe and its own.
        assert!(
            theirs_src.len() >= 2 && ours_src.len() >= 2,
            "{theirs_src:?} {ours_src:?}"
        );
        assert_eq!(ours_src[..2], theirs_src[..2]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--profile`: a Firefox Profiler profile of the same probe: one thread,
/// `ls`, with the event as one sample whose stack holds the unwound
/// frames and, innermost, the probe's event name.
#[test]
fn a_profile_holds_each_event_as_a_sample_with_its_stack() {
    let test = "a_profile_holds_each_event_as_a_sample_with_its_stack";
    let Some((probe, dir)) = opendir_probe(test, "profile") else {
        return;
    };
    let path = dir.join("ls.json");
    record(&[
        "-q",
        "--call-graph",
        "dwarf",
        "--profile",
        path.to_str().unwrap(),
        "-e",
        &probe,
        "--",
        "/usr/bin/ls",
        "/",
    ]);
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(profile["meta"]["product"], "kprobe-perf");
    let threads = profile["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{profile}");
    let t = &threads[0];
    assert_eq!(t["name"], "ls");
    assert_eq!(t["samples"]["length"], 1);
    let strings: Vec<&str> = profile["shared"]["stringArray"]
        .as_array()
        .or_else(|| t["stringArray"].as_array())
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert!(strings.contains(&"p_libc_opendir_0"), "{strings:?}");
    assert!(
        strings.iter().any(|s| s.starts_with("__opendir (libc.so")),
        "{strings:?}"
    );
    assert!(
        strings
            .iter()
            .any(|s| s.starts_with("__libc_start_call_main (")),
        "{strings:?}"
    );
}

/// One sample's user frames as both tools print them: (symbol+offset,
/// object file name, the address's offset in its page). kprobe-perf
/// prints run-time addresses and perf file-relative ones; both keep the
/// page offset.
type Frame = (String, String, u64);

/// The samples of `script` output: the frames under each event line.
fn samples(text: &str) -> Vec<Vec<Frame>> {
    let mut all: Vec<Vec<Frame>> = Vec::new();
    for line in text.lines() {
        if !line.starts_with('\t') {
            if !line.trim().is_empty() {
                all.push(Vec::new());
            }
            continue;
        }
        let mut w = line.split_whitespace();
        let (Some(addr), Some(sym), Some(obj)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let obj = obj.trim_matches(|c| c == '(' || c == ')');
        let obj = Path::new(obj)
            .file_name()
            .map_or(obj.into(), |f| f.to_string_lossy());
        let page = u64::from_str_radix(addr, 16).map_or(u64::MAX, |a| a & 0xfff);
        if let Some(s) = all.last_mut() {
            s.push((sym.to_string(), obj.into_owned(), page));
        }
    }
    all
}

/// The share of samples whose frames are equal in both lists, counted
/// as multisets (a sample one tool lost counts against it).
fn equal_share(ours: &[Vec<Frame>], theirs: &[Vec<Frame>]) -> f64 {
    let mut counts = std::collections::HashMap::<&Vec<Frame>, i64>::new();
    for s in ours {
        *counts.entry(s).or_default() += 1;
    }
    let mut equal = 0;
    for s in theirs {
        if let Some(c) = counts.get_mut(s).filter(|c| **c > 0) {
            *c -= 1;
            equal += 1;
        }
    }
    equal as f64 / ours.len().max(theirs.len()).max(1) as f64
}

/// tests/data/inlined_chain.c built `-O2 -g -fomit-frame-pointer` in
/// `dir`; `None` (the test skipped, with its reason) without a compiler.
fn inlined_chain(test: &str, dir: &Path) -> Option<std::path::PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/inlined_chain.c");
    let bin = dir.join("chain");
    let built = Command::new("cc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(&src)
        .output();
    match built {
        Ok(o) if o.status.success() => Some(bin),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            skip_here(test, &format!("cc cannot build {}: {err}", src.display()));
            None
        }
        Err(e) => {
            skip_here(
                test,
                &format!("no C compiler (cc: {e}): apt-get install gcc"),
            );
            None
        }
    }
}

/// `perf record --call-graph dwarf` of `bin 1000` (16 MiB ring buffers,
/// as ours, so that neither loses a sample) under perf's own uprobe
/// on `leaf` (`perf probe -x`), then `perf script` of its file; `None`
/// (the test skipped) without perf.
fn perf_recording(test: &str, bin: &Path, dir: &Path) -> Option<String> {
    let command = [bin.to_str()?, "1000"];
    perf_uprobe_script(test, (bin, "leaf", "probe_chain"), &command, dir)
}

/// `perf script` of `perf record --call-graph dwarf` of `command` under
/// perf's own uprobe (`perf probe -x OBJECT`) on `function` of `object`,
/// whose event group perf names `group`; `None` (the test skipped)
/// without perf.
fn perf_uprobe_script(
    test: &str,
    (object, function, group): (&Path, &str, &str),
    command: &[&str],
    dir: &Path,
) -> Option<String> {
    let Some(perf) = ["/usr/bin/perf", "/usr/sbin/perf"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        skip_here(test, "perf is not installed (apt-get install linux-perf)");
        return None;
    };
    // An event name of this process's own, so that a concurrent test's
    // probe never collides with it.
    let name = format!("kpf{function}{}", std::process::id());
    let added = Command::new(perf)
        .args(["probe", "-q", "-f", "-x"])
        .arg(object)
        .args(["-a", &format!("{name}={function}")])
        .output()
        .unwrap();
    if !added.status.success() {
        let err = String::from_utf8_lossy(&added.stderr);
        skip(
            test,
            &format!("perf probe -x cannot add a uprobe (is tracefs mounted?): {err}"),
        );
        return None;
    }
    let event = format!("{group}:{name}");
    let data = dir.join("perf.data");
    let rec = Command::new(perf)
        .args([
            "record",
            "-q",
            "--call-graph",
            "dwarf",
            "-m",
            "4096",
            "-e",
            &event,
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", &event])
        .stderr(std::process::Stdio::null())
        .status();
    assert!(
        rec.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    Some(stdout_of(
        Path::new(perf),
        &["script", "-i", data.to_str().unwrap()],
    ))
}

/// The frame lines of `script` output (each trimmed): the address, as
/// perf prints a user frame (its offset in its file, which does not move
/// with the address-space layout), `symbol+0xOFFSET`, and the object or
/// `(inlined)`.
fn frame_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .map(|l| l.trim().to_string())
        .collect()
}

/// The separate debug file of `binary` by build ID, as libc6-dbg
/// installs libc's, when it is there.
fn debug_file_of(binary: &Path) -> Option<std::path::PathBuf> {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(binary)
        .output()
        .ok()?;
    let notes = String::from_utf8_lossy(&out.stdout);
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))?
        .trim()
        .to_string();
    let file = Path::new("/usr/lib/debug/.build-id")
        .join(id.get(..2)?)
        .join(format!("{}.debug", id.get(2..)?));
    file.exists().then_some(file)
}

/// A uprobe on libc's `inet_pton`, called from Python
/// (`socket.inet_pton`), unwound from DWARF with libc6-dbg installed:
/// every frame kprobe-perf prints, live and from its file, is the line
/// `perf script` prints of `perf record --call-graph dwarf` on perf's own
/// probe: the address (relative to the file), the name perf picks among
/// the aliases (`__GI___inet_pton`), the offset, the object, and the
/// `(inlined)` lines.
#[test]
fn frames_of_libc_under_python_are_perfs() {
    let test = "frames_of_libc_under_python_are_perfs";
    if !uprobes_available(test) {
        return;
    }
    let python = Path::new("/usr/bin/python3");
    let Some(libc) = libc_path() else {
        return skip(test, "no libc in this process's mappings");
    };
    if !python.exists() {
        return skip(test, "no /usr/bin/python3 (apt-get install python3)");
    }
    if debug_file_of(Path::new(&libc)).is_none() {
        return skip(
            test,
            &format!("no debug file of {libc} by build ID (apt-get install libc6-dbg; readelf of binutils reads the build ID)"),
        );
    }
    let dir = std::env::temp_dir().join(format!("kpf-pton-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ours.data");
    let script = "import socket; socket.inet_pton(socket.AF_INET, '127.0.0.1')";
    let command = [python.to_str().unwrap(), "-c", script];
    let probe = format!("p:{libc}:inet_pton");
    let live = record(
        &[
            &["--call-graph", "dwarf", "-o", file.to_str().unwrap()][..],
            &["-e", &probe, "--"],
            &command,
        ]
        .concat(),
    );
    let ours = frame_lines(&live);
    let replay = stdout_of(
        &kprobe_perf_bin(),
        &["script", "-i", file.to_str().unwrap()],
    );
    assert_eq!(frame_lines(&replay), ours, "{replay}");
    let libc_name = Path::new(&libc)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        ours.first()
            .is_some_and(|f| f.ends_with(&format!(" __GI___inet_pton+0x0 ({libc})"))),
        "{live}"
    );
    assert!(
        ours.iter()
            .any(|f| f.ends_with(" __libc_start_main_impl+0x84 (inlined)")),
        "{live}"
    );
    let group = format!("probe_{}", libc_name.split('.').next().unwrap_or("libc"));
    let Some(perf_text) = perf_uprobe_script(
        test,
        (Path::new(&libc), "inet_pton", &group),
        &command,
        &dir,
    ) else {
        return;
    };
    assert_eq!(
        ours,
        frame_lines(&perf_text),
        "perf:\n{perf_text}\nours:\n{live}"
    );
    ld_so_frames_are_perfs(&libc, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The address of `function` in the symbol table of `debug_file`.
fn symbol_address(debug_file: &Path, function: &str) -> Option<u64> {
    let out = Command::new("readelf")
        .arg("-sW")
        .arg(debug_file)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.len() == 8 && w[7] == function).then(|| u64::from_str_radix(w[1], 16).ok())?
    })
}

/// libc's `__init_misc`, which ld.so's `_dl_init` runs from
/// `_dl_start_user` (a label of ld.so's text, no function): probed at
/// its offset (a local symbol), every frame line of `/bin/true`'s stack
/// is perf's, `_dl_start_user+0x…` included.
fn ld_so_frames_are_perfs(libc: &str, dir: &Path) {
    let debug = debug_file_of(Path::new(libc)).unwrap();
    let at = symbol_address(&debug, "__init_misc").expect("__init_misc in libc6-dbg's symbols");
    let file = dir.join("init.data");
    let probe = format!("p:{libc}:{at:#x}");
    let file = file.to_str().unwrap();
    let live = record(&[
        "--call-graph",
        "dwarf",
        "-o",
        file,
        "-e",
        &probe,
        "--",
        "/bin/true",
    ]);
    let ours = frame_lines(&live);
    assert!(
        ours.last()
            .is_some_and(|f| f.contains(" _dl_start_user+0x")),
        "{live}"
    );
    let perf = stdout_of(Path::new("perf"), &["script", "-i", file]);
    assert_eq!(ours, frame_lines(&perf), "perf:\n{perf}\nours:\n{live}");
}

/// A program built without frame pointers, with two functions inlined
/// above the probed one: `kprobe-perf script` of our recording and `perf
/// script` of perf's own (`perf record --call-graph dwarf`) print the
/// same frames (symbol, offset, object, page offset of the address) for
/// at least 99% of the 1,000 samples (here, all of them); and each
/// sample is the program's call chain, the inlined functions at the
/// address of the frame that holds them.
#[test]
fn dwarf_stacks_of_an_inlined_chain_without_frame_pointers_equal_perf() {
    let test = "dwarf_stacks_of_an_inlined_chain_without_frame_pointers_equal_perf";
    if !uprobes_available(test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("kpf-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(bin) = inlined_chain(test, &dir) else {
        return;
    };
    let file = dir.join("ours.data");
    record(&[
        "-q",
        "--call-graph",
        "dwarf",
        "-m",
        "4096",
        "-o",
        file.to_str().unwrap(),
        "-e",
        &format!("p:{}:leaf", bin.display()),
        "--",
        bin.to_str().unwrap(),
        "1000",
    ]);
    let text = stdout_of(
        &kprobe_perf_bin(),
        &["script", "-i", file.to_str().unwrap()],
    );
    let ours = samples(&text);
    assert_eq!(ours.len(), 1000, "{text}");

    // The known chain: leaf at its entry; mix and scramble inlined in
    // middle, at middle's return address into it; outer; main; then the
    // C library's start (its inlined __libc_start_main_impl only where
    // libc's DWARF is installed) and _start.
    let names = |s: &[Frame]| -> Vec<(String, String)> {
        s.iter()
            .map(|f| {
                let name = f.0.split_once('+').map_or(f.0.as_str(), |(n, _)| n);
                (name.to_string(), f.1.clone())
            })
            .collect()
    };
    for s in &ours {
        let got = names(s);
        let want = [
            ("leaf", "chain"),
            ("mix", "inlined"),
            ("scramble", "inlined"),
            ("middle", "chain"),
            ("outer", "chain"),
            ("main", "chain"),
            ("__libc_start_call_main", ""),
        ];
        assert!(got.len() > want.len(), "{s:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0, w.0, "{s:?}");
            if !w.1.is_empty() {
                assert_eq!(g.1, w.1, "{s:?}");
            }
        }
        assert!(got[6].1.starts_with("libc.so"), "{s:?}");
        assert_eq!(s[0].0, "leaf+0x0", "{s:?}");
        // The inlined frames: the offset and address of middle's frame.
        let off = |f: &Frame| f.0.split_once('+').map(|(_, o)| o.to_string());
        assert!(
            off(&s[1]) == off(&s[3]) && off(&s[2]) == off(&s[3]),
            "{s:?}"
        );
        assert!(s[1].2 == s[3].2 && s[2].2 == s[3].2, "{s:?}");
        let start = ("_start".to_string(), "chain".to_string());
        assert_eq!(got.last(), Some(&start), "{s:?}");
    }

    let Some(perf_text) = perf_recording(test, &bin, &dir) else {
        return;
    };
    let theirs = samples(&perf_text);
    let share = equal_share(&ours, &theirs);
    println!(
        "{test}: {:.2}% of {} samples equal ({} in perf's file)",
        share * 100.0,
        ours.len(),
        theirs.len()
    );
    assert!(
        share >= 0.99,
        "perf:\n{}\nours:\n{}",
        perf_text.lines().take(40).collect::<Vec<_>>().join("\n"),
        text.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `record --drain-log FILE` (hidden, for debugging losses) writes one
/// line per drain: its columns, a pending count per ring, the bytes read
/// (at least the events' stacks: each sample of `--call-graph dwarf`
/// carries 8 KiB of them), and the losses so far, rising to the figure
/// of the summary.
#[test]
fn a_drain_log_accounts_for_the_bytes_and_the_losses() {
    let test = "a_drain_log_accounts_for_the_bytes_and_the_losses";
    let Some((opendir, dir)) = opendir_probe(test, "drain-log") else {
        return;
    };
    let free = opendir.replace(":opendir", ":free");
    let (data, log) = (dir.join("free.data"), dir.join("drains.log"));
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "--call-graph", "dwarf", "-o"])
        .arg(&data)
        .arg("--drain-log")
        .arg(&log)
        .args(["-e", &free, "--", "/usr/bin/ls", "-la", "/usr/bin"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    let figure = |after: &str| -> u64 {
        let at = stderr
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} in {stderr}"));
        let digits: String = stderr[..at]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.chars().rev().collect::<String>().parse().unwrap()
    };
    let (events, lost) = (figure(" events ("), figure(" lost\n"));
    assert!(events > 100, "{stderr}");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = text.lines();
    assert!(
        lines.next().unwrap().starts_with("# ms since start"),
        "{text}"
    );
    let rings = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|s| {
            s.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                    None => 1,
                })
                .sum::<usize>()
        })
        .unwrap();
    // `-q -o` counts the samples at the end, from the file: no loss is
    // known while it records, and the log says so with `-`.
    let (mut read, mut drains) = (0u64, 0);
    for l in lines {
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(f.len(), 8, "{l}");
        assert_eq!(
            f[3].split(',').count(),
            rings,
            "one pending count per CPU: {l}"
        );
        read += f[4].parse::<u64>().unwrap();
        assert_eq!(f[7], "-", "{l}");
        drains += 1;
    }
    assert!(drains >= 1, "{text}");
    // Every sample the summary counts (and every loss record) was read
    // in some drain.
    assert!(
        read >= events * 8192,
        "{read} bytes read for {events} events ({lost} lost)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
