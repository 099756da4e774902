//! The vmlinux and System.map of the VM kernel (from Debian's -dbg
//! package, which `cargo xtask test` fetches and names in
//! KPROBE_PERF_DEBUG_BOOT): found where distributions install them, placed
//! at the running addresses by the KASLR slide, checked by build ID, and
//! used for function sizes and, without /proc/kcore, for the bytes the
//! boundary checker reads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use kprobe_perf_arch::boundary::{FunctionLayout, ProbeSite};
use kprobe_perf_arch::Arch;
use kprobe_perf_engine::cli::kernel::preflight::{KernelTextSource, Prediction, Preflight};
use kprobe_perf_engine::testing::kcore::{ImageText, Kcore};
use kprobe_perf_symbols::image::{running_build_id, KernelImage};
use kprobe_perf_symbols::{Blacklist, KernelSymbols};
use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip, xorshift};

/// The debug files of the booted kernel; inside the VM they must be there.
fn debug_files(test: &str) -> Option<(PathBuf, PathBuf, String)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string();
    let Ok(dir) = std::env::var("KPROBE_PERF_DEBUG_BOOT") else {
        skip(
            test,
            "KPROBE_PERF_DEBUG_BOOT does not name the kernel's -dbg files (cargo xtask test sets it)",
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    Some((
        dir.join(format!("vmlinux-{release}")),
        dir.join(format!("System.map-{release}")),
        release,
    ))
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kprobe_perf_bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{out}"))
}

#[test]
fn vmlinux_is_found_matched_and_used() {
    if !kprobes_available("vmlinux_is_found_matched_and_used") {
        return;
    }
    let Some((vmlinux, map, release)) = debug_files("vmlinux_is_found_matched_and_used") else {
        return;
    };
    let symbols = KernelSymbols::load().unwrap();
    let text_at = symbols.lookup("_text")[0].address;
    // Debian links x86_64 kernels at 0xffffffff81000000.
    let slide = text_at.wrapping_sub(0xffff_ffff_8100_0000);
    println!("_text at 0x{text_at:x}: KASLR slide 0x{slide:x}");

    // Given explicitly.
    let v = vmlinux.to_str().unwrap();
    let m = map.to_str().unwrap();
    let (ok, out, err) = run(&["info", "--vmlinux", v, "--system-map", m]);
    assert!(ok, "{err}");
    println!("{out}");
    let vline = line(&out, "vmlinux: ");
    assert!(
        vline.starts_with(&format!("vmlinux: {v} ("))
            && vline.contains(" symbols), build ID matches the running kernel, KASLR slide ")
            && vline.contains(&format!(
                "KASLR slide 0x{slide:x} (from _text, confirmed on "
            )),
        "{vline}"
    );
    let mline = line(&out, "System.map: ");
    assert!(
        mline.starts_with(&format!("System.map: {m} ("))
            && mline.contains(&format!("KASLR slide 0x{slide:x}, confirmed on ")),
        "{mline}"
    );
    assert_eq!(
        line(&out, "kernel text: "),
        format!("kernel text: /proc/kcore (live text); function sizes from {v}")
    );

    // Found where Debian installs it: a tmpfs over /usr/lib/debug (the VM's
    // root is read-only) with links to the files.
    let debug = "/usr/lib/debug";
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "none", debug])
        .status()
        .unwrap();
    assert!(mounted.success());
    std::fs::create_dir_all(format!("{debug}/boot")).unwrap();
    std::os::unix::fs::symlink(&vmlinux, format!("{debug}/boot/vmlinux-{release}")).unwrap();
    std::os::unix::fs::symlink(&map, format!("{debug}/boot/System.map-{release}")).unwrap();
    let found = run(&["info"]);
    let lines_vm = run(&[
        "probe",
        "--lines",
        "do_sys_openat2",
        "--text-from",
        "vmlinux",
    ]);
    let _ = Command::new("umount").arg(debug).status();
    let (ok, out, err) = found;
    assert!(ok, "{err}");
    assert!(
        line(&out, "vmlinux: ")
            .starts_with(&format!("vmlinux: /usr/lib/debug/boot/vmlinux-{release} (")),
        "{out}"
    );
    let (ok, out, err) = lines_vm;
    assert!(ok, "{err}");
    let elf_size = KernelImage::open_vmlinux(&vmlinux)
        .unwrap()
        .lookup("do_sys_openat2")[0]
        .size;
    let head = out.lines().next().unwrap();
    assert!(
        head.contains(&format!(
            "bytes from /usr/lib/debug/boot/vmlinux-{release} (link-time text moved by the KASLR slide 0x{slide:x}; runtime patching is not visible)"
        )),
        "{head}"
    );
    assert!(
        head.contains(&format!(", code {elf_size} bytes then padding"))
            || head.contains(&format!(", {elf_size} bytes (")),
        "{head}"
    );
    // The link-time entry is the call ftrace later turns into a NOP; it is
    // the ftrace site all the same.
    let first = out.lines().nth(2).unwrap();
    assert!(first.starts_with("  +0      p r    e8 "), "{first}");
    assert!(first.contains("call"), "{first}");
}

#[test]
fn vmlinux_text_agrees_with_the_live_text() {
    if !kprobes_available("vmlinux_text_agrees_with_the_live_text") {
        return;
    }
    let Some((vmlinux, _, release)) = debug_files("vmlinux_text_agrees_with_the_live_text") else {
        return;
    };
    let mut symbols = KernelSymbols::load().unwrap();
    symbols.set_blacklist(Blacklist::load().unwrap());
    let image = KernelImage::open_vmlinux(&vmlinux).unwrap();
    let slide = image
        .slide_against(&symbols, running_build_id().as_deref())
        .unwrap();
    assert!(slide.build_id_checked);

    // Every core function's ELF size fits in its kallsyms extent.
    let mut sized = 0usize;
    let mut shorter = 0usize;
    let mut longer = Vec::new();
    for s in symbols.iter().filter(|s| s.module.is_none() && s.is_text()) {
        let Some(loc) = symbols.symbolize(s.address) else {
            continue;
        };
        let Some(f) = image.function_at(slide.to_link(s.address)) else {
            continue;
        };
        if f.size == 0 || loc.offset != 0 || loc.symbol.name != s.name {
            continue;
        }
        sized += 1;
        if f.size > loc.size {
            // Assembly whose .size spans global labels inside it
            // (ftrace_caller and ftrace_caller_op_ptr ...).
            longer.push(format!("{} ({} > {})", s.name, f.size, loc.size));
            continue;
        }
        shorter += usize::from(f.size < loc.size);
    }
    println!(
        "{sized} functions sized by the vmlinux; {shorter} end before the next symbol, {} run past it: {}",
        longer.len(),
        longer.join(", ")
    );
    assert!(sized > 20_000, "{sized}");
    assert!(longer.len() * 1000 < sized, "{longer:?}");

    // Verdicts from the vmlinux's bytes against those from the live text,
    // at every instruction of functions picked at random.
    let live = Kcore::open().unwrap();
    let img = ImageText::new(image, slide);
    let arch = Arch::X86_64;
    let from_live = Preflight::new(&symbols, &live, arch).with_release(&release);
    let from_image = Preflight::new(&symbols, &img, arch).with_release(&release);
    let core: Vec<_> = symbols
        .iter()
        .filter(|s| s.module.is_none() && s.is_text() && symbols.lookup(&s.name).len() == 1)
        .collect();
    let mut state = 0x5eed_0002u64;
    let (mut same_bytes, mut functions, mut agree, mut total) = (0, 0, 0, 0);
    let mut differ: BTreeMap<String, usize> = BTreeMap::new();
    while functions < 300 {
        let s = core[(xorshift(&mut state) % core.len() as u64) as usize];
        let (Ok(a), Ok(b)) = (from_live.function(s), from_image.function(s)) else {
            continue;
        };
        functions += 1;
        same_bytes += usize::from(a.bytes == b.bytes);
        assert_eq!(a.size, b.size);
        let layout_a = FunctionLayout::new(arch, &a.text());
        let layout_b = FunctionLayout::new(arch, &b.text());
        let (ra, rb) = (
            from_live.function_refusal(&a),
            from_image.function_refusal(&b),
        );
        for insn in kprobe_perf_arch::boundary::instructions(&a.text()) {
            let pa = match &ra {
                Some(_) => Prediction::Refuse {
                    errno: kprobe_perf_arch::boundary::Errno::Einval,
                    reason: String::new(),
                },
                None => from_live.predict_in(&a, &layout_a, insn.offset, ProbeSite::Entry),
            };
            let pb = match &rb {
                Some(_) => Prediction::Refuse {
                    errno: kprobe_perf_arch::boundary::Errno::Einval,
                    reason: String::new(),
                },
                None => from_image.predict_in(&b, &layout_b, insn.offset, ProbeSite::Entry),
            };
            total += 1;
            if pa.errno() == pb.errno() {
                agree += 1;
            } else {
                *differ
                    .entry(format!("live {:?} vmlinux {:?}", pa.errno(), pb.errno()))
                    .or_default() += 1;
                if differ.values().sum::<usize>() <= 10 {
                    println!(
                        "differs: {}+{} {}: live {pa:?} / vmlinux {pb:?}",
                        s.name, insn.offset, insn.text
                    );
                }
            }
        }
    }
    println!(
        "{functions} functions, {same_bytes} byte-identical; verdicts agree at {agree} of {total} offsets ({:.2}%); text from {}",
        100.0 * agree as f64 / total as f64,
        img.describe()
    );
    for (k, n) in &differ {
        println!("  {n:>6}  {k}");
    }
    // Runtime patching changes sites: every `jmp __x86_return_thunk`
    // becomes `ret; int3 ...` (6.1: 93.7% agreement over these 300
    // functions), plus alternatives, jump labels, static calls and the
    // ftrace call. That is why live text wins whenever it is readable.
    assert!(agree * 100 >= total * 90, "{agree} of {total}");
}

#[test]
fn padding_past_the_code_is_refused_with_a_vmlinux() {
    if !kprobes_available("padding_past_the_code_is_refused_with_a_vmlinux") {
        return;
    }
    let Some((vmlinux, _, release)) =
        debug_files("padding_past_the_code_is_refused_with_a_vmlinux")
    else {
        return;
    };
    let symbols = KernelSymbols::load().unwrap();
    let image = KernelImage::open_vmlinux(&vmlinux).unwrap();
    let slide = image
        .slide_against(&symbols, running_build_id().as_deref())
        .unwrap();
    let live = Kcore::open().unwrap();
    let img = ImageText::new(image, slide);
    let both = kprobe_perf_engine::testing::kcore::TextSources {
        live: Some(live),
        image: Some(img),
    };
    let pre = Preflight::new(&symbols, &both, Arch::X86_64).with_release(&release);
    // A function whose padding starts with an instruction the kernel
    // accepts (a NOP), so that only the vmlinux size tells it never runs.
    let mut names: Vec<String> = ["do_sys_openat2", "vfs_read", "vfs_write", "ksys_read"]
        .iter()
        .map(|n| n.to_string())
        .collect();
    names.extend(
        symbols
            .iter()
            .filter(|s| s.module.is_none() && s.is_text())
            .map(|s| s.name.clone()),
    );
    let (name, code) = names
        .iter()
        .find_map(|n| {
            let found = symbols.lookup(n);
            let [s] = found.as_slice() else { return None };
            let f = pre.function(s).ok()?;
            let code = f.code_size.filter(|&c| c < f.size)?;
            (pre.predict(&f, code, ProbeSite::Entry) == Prediction::Accept)
                .then(|| (n.clone(), code))
        })
        .expect("some function has probe-able padding");
    println!("{name}: code ends at +{code}");
    let spec = format!("p:{name}+{code}");
    let (ok, _, err) = run(&[
        "record",
        "-e",
        &spec,
        "--vmlinux",
        vmlinux.to_str().unwrap(),
        "-d",
        "0.1",
    ]);
    assert!(!ok);
    assert_eq!(
        err.trim_end(),
        format!(
            "kprobe-perf: {name}+{code} is past the last instruction of {name} (its code is {code} bytes by the vmlinux symbol table): the alignment padding there never runs, so the probe would never fire; see kprobe-perf probe --lines {name}"
        )
    );
}
