//! Uprobe offsets checked on the binary's own bytes, before anything is
//! opened, against a small assembled program (tests/data/uprobe_target.S)
//! whose instructions are known. The refusals need no privilege; the
//! comparison with the kernel and the firing test need the uprobe PMU and
//! CAP_SYS_ADMIN (the development hosts have both as root).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kprobe_perf_arch::boundary::{
    Errno, FunctionLayout, FunctionText, ProbeSite, RefuseReason, Rules, Verdict,
};
use kprobe_perf_arch::Arch;
use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{KernelSymbols, Session, SessionOptions};
use kprobe_perf_symbols::elf::UserBinary;
use kprobe_perf_tests::vm_kernel;

/// An assembled target program, removed (with its directory, once empty)
/// when dropped.
struct Target(PathBuf);

impl std::ops::Deref for Target {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The assembled target, built for each test in a directory of this test
/// process; `None` (after printing SKIP) where it cannot be built.
fn target(test: &str) -> Option<Target> {
    if !cfg!(target_arch = "x86_64") {
        println!("SKIP {test}: the target program is x86-64 assembly");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/uprobe_target.S");
    let dir =
        std::env::temp_dir().join(format!("kprobe-perf-uprobe-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("target-{test}"));
    match Command::new("cc").arg("-o").arg(&out).arg(&src).status() {
        Ok(s) if s.success() => Some(Target(out)),
        r => {
            if let Some(k) = vm_kernel() {
                panic!(
                    "{test}: cannot assemble {} in the VM (kernel {k}): {r:?}",
                    src.display()
                );
            }
            println!(
                "SKIP {test}: cannot assemble {} with cc: {r:?}",
                src.display()
            );
            None
        }
    }
}

fn refusal(spec: &str) -> String {
    match plan_probes(&[spec], &KernelSymbols::default()) {
        Ok(_) => panic!("{spec} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn mid_instruction_and_past_the_end_are_refused_with_valid_offsets() {
    let Some(bin) = target("refusals") else {
        return;
    };
    let b = bin.display();
    assert_eq!(
        refusal(&format!("p:{b}:probe_target+2")),
        format!(
            "probe_target+2 falls inside the instruction at +1 (mov %rsp,%rbp, 3 bytes); valid nearby: +1, +4 \
             (the kernel does not check this: its int3 would land inside an instruction, corrupting it in every process that maps {b})"
        )
    );
    assert_eq!(
        refusal(&format!("p:{b}:probe_target+6")),
        format!(
            "probe_target+6 falls inside the instruction at +4 (movabs $0x1122334455667788,%rax, 10 bytes); valid nearby: +4, +14 \
             (the kernel does not check this: its int3 would land inside an instruction, corrupting it in every process that maps {b})"
        )
    );
    assert_eq!(
        refusal(&format!("p:{b}:probe_target+100000")),
        format!(
            "probe_target+100000 is past the end of probe_target (19 bytes); valid nearby: +18 \
             (a probe there would land in whatever follows the function in {b})"
        )
    );
    // A file offset inside a known function is checked the same way.
    let f = UserBinary::open(&bin)
        .unwrap()
        .function("probe_target")
        .unwrap();
    assert_eq!(
        refusal(&format!("p:{b}:0x{:x}", f.file_offset + 2)),
        format!(
            "{b}:0x{:x} (probe_target+2) falls inside the instruction at +1 (mov %rsp,%rbp, 3 bytes); valid nearby: +1, +4 \
             (the kernel does not check this: its int3 would land inside an instruction, corrupting it in every process that maps {b})",
            f.file_offset + 2
        )
    );
    // A VEX instruction the kernel would emulate as a branch.
    assert_eq!(
        refusal(&format!("p:{b}:mixed_insns+58")),
        format!(
            "mixed_insns+58 is vpcmpeqb %xmm1,%xmm0,%xmm0, which uprobes refuse: the kernel would take its opcode byte 0x74 \
             for a branch or nop and emulate that instead of running it (branch_setup_xol_ops ignores the VEX/EVEX prefix); \
             valid nearby: +53, +62 (the kernel accepts it, and the program would compute wrong results; bytes from {b})"
        )
    );
    // An instruction the uprobe layer refuses, with the kernel's reason.
    assert_eq!(
        refusal(&format!("p:{b}:mixed_insns+12")),
        format!(
            "mixed_insns+12 is lock cmpxchg %rcx,(%rdx), which uprobes refuse: it has the lock prefix 0xf0 (is_prefix_bad); \
             valid nearby: +10, +33 (the kernel would answer ENOTSUPP (524); bytes from {b})"
        )
    );
    // The valid offsets are exactly the instruction starts.
    let ub = UserBinary::open(&bin).unwrap();
    let layout = FunctionLayout::with_rules(
        Arch::X86_64,
        &FunctionText {
            start: f.address,
            bytes: ub.bytes(&f, u64::MAX),
        },
        Rules::Uprobe,
    );
    assert_eq!(layout.accepted_offsets(), vec![0, 1, 4, 14, 17, 18]);
    // Accepted offsets plan without error.
    for off in [0, 1, 4, 14, 17, 18] {
        plan_probes(
            &[format!("p:{b}:probe_target+{off}")],
            &KernelSymbols::default(),
        )
        .unwrap_or_else(|e| panic!("+{off}: {e}"));
    }
}

fn uprobes_usable(test: &str) -> Option<kprobe_perf_engine::testing::pmu::ProbePmu> {
    let pmu = kprobe_perf_engine::testing::pmu::ProbePmu::discover("uprobe")
        .ok()
        .flatten();
    let p = kprobe_perf_engine::testing::Privilege::current();
    match pmu {
        Some(pmu) if p.sys_admin => Some(pmu),
        _ => {
            if let Some(k) = vm_kernel() {
                panic!("{test}: uprobes must work inside the VM (kernel {k})");
            }
            println!("SKIP {test}: no uprobe PMU here, or no CAP_SYS_ADMIN");
            None
        }
    }
}

/// A child running the target, stopped in `getchar` until released, so the
/// binary is mapped (the kernel analyses a uprobe's instruction when it
/// installs it in a process).
fn start_target(bin: &Path) -> std::process::Child {
    Command::new(bin)
        .args(["a", "b"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The model's verdict for every instruction of `mixed_insns` is what the
/// kernel answers when asked directly (no preflight), ENOTSUPP (524) or a
/// file descriptor.
#[test]
fn uprobe_rules_agree_with_the_kernel() {
    let Some(bin) = target("agree") else { return };
    let Some(pmu) = uprobes_usable("uprobe_rules_agree_with_the_kernel") else {
        return;
    };
    let ub = UserBinary::open(&bin).unwrap();
    let f = ub.function("mixed_insns").unwrap();
    let text = FunctionText {
        start: f.address,
        bytes: ub.bytes(&f, u64::MAX),
    };
    let layout = FunctionLayout::with_rules(Arch::X86_64, &text, Rules::Uprobe);
    let mut child = start_target(&bin);
    // Let the child reach getchar (mapped and waiting).
    std::thread::sleep(Duration::from_millis(200));
    let path = std::ffi::CString::new(bin.as_os_str().as_encoded_bytes()).unwrap();
    let mut seen = Vec::new();
    for insn in layout.instructions() {
        let v = layout.verdict(insn.offset, ProbeSite::Entry);
        let mut attr = kprobe_perf_engine::testing::sys::perf_event_attr {
            type_: pmu.type_,
            size: kprobe_perf_engine::testing::sys::ATTR_SIZE,
            ..Default::default()
        };
        attr.__bindgen_anon_4.config2 = f.file_offset + insn.offset;
        attr.set_disabled(1);
        let kernel =
            kprobe_perf_engine::testing::sys::perf_event_open(&attr, Some(&path), -1, 0, 0)
                .map(drop)
                .map_err(|e| e.raw_os_error().unwrap_or(0));
        let model = match &v {
            Verdict::Accept { .. } => Ok(()),
            // Refused here, accepted by the kernel (which would emulate it
            // as a branch).
            Verdict::Refuse(r) if matches!(r.reason, RefuseReason::UprobeInstruction { rule, .. } if !rule.kernel_refuses()) => {
                Ok(())
            }
            Verdict::Refuse(r) => Err(r.errno().raw()),
            other => panic!("{other:?}"),
        };
        seen.push(format!("+{} {}: kernel {kernel:?}", insn.offset, insn.text));
        assert_eq!(kernel, model, "+{} {} ({v})", insn.offset, insn.text);
    }
    drop(child.stdin.take());
    child.wait().unwrap();
    println!("{}", seen.join("\n"));
    let refused = seen.iter().filter(|s| s.contains("Err(524)")).count();
    assert_eq!(refused, 8, "{seen:#?}");
    assert_eq!(Errno::Enotsupp.raw(), 524);
}

/// An accepted offset fires once per call, with the register value the
/// instruction there sees, and the program's result is intact.
#[test]
fn a_valid_offset_fires_with_exact_count_and_value() {
    let Some(bin) = target("fires") else { return };
    if uprobes_usable("a_valid_offset_fires_with_exact_count_and_value").is_none() {
        return;
    }
    let b = bin.display();
    let plans = plan_probes(
        &[format!("p:{b}:probe_target+14 rax=%ax rdi=%di")],
        &KernelSymbols::default(),
    )
    .unwrap();
    let mut s = Session::open(plans, SessionOptions::default()).unwrap();
    s.enable().unwrap();
    let mut child = start_target(&bin);
    let pid = i32::try_from(child.id()).unwrap();
    child.stdin.take().unwrap().write_all(b"x").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "112233445566778b ffff\n"
    );
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while events.len() < 7 && Instant::now() < deadline {
        s.poll(
            Some(Duration::from_millis(100)),
            &mut kprobe_perf_engine::sink_fn(|e| {
                if e.pid == pid {
                    events.push((e.args[0].to_string(), e.args[1].to_string()));
                }
            }),
        )
        .unwrap();
    }
    // Anything late would show up now.
    s.poll(
        Some(Duration::from_millis(300)),
        &mut kprobe_perf_engine::sink_fn(|e| {
            if e.pid == pid {
                events.push((e.args[0].to_string(), e.args[1].to_string()));
            }
        }),
    )
    .unwrap();
    assert_eq!(
        events,
        vec![("0x1122334455667788".to_string(), "0x3".to_string()); 7]
    );
}

/// Why a VEX instruction with a branch's opcode byte is refused although
/// the kernel accepts it: probed directly (bypassing the check), the
/// `vpcmpeqb` at cmp_fn+10 is emulated as a jump and never runs, and the
/// program's result changes from ffff to 0.
#[test]
fn kernel_skips_a_probed_vex_instruction_taken_for_a_branch() {
    let Some(bin) = target("vex") else { return };
    let Some(pmu) = uprobes_usable("kernel_skips_a_probed_vex_instruction_taken_for_a_branch")
    else {
        return;
    };
    let b = bin.display();
    let refused = refusal(&format!("p:{b}:cmp_fn+10"));
    assert!(
        refused.starts_with("cmp_fn+10 is vpcmpeqb %xmm1,%xmm0,%xmm0, which uprobes refuse"),
        "{refused}"
    );
    let f = UserBinary::open(&bin).unwrap().function("cmp_fn").unwrap();
    let path = std::ffi::CString::new(bin.as_os_str().as_encoded_bytes()).unwrap();
    let run = |probe: bool| {
        let mut child = start_target(&bin);
        let pid = i32::try_from(child.id()).unwrap();
        let fd = probe.then(|| {
            let mut attr = kprobe_perf_engine::testing::sys::perf_event_attr {
                type_: pmu.type_,
                size: kprobe_perf_engine::testing::sys::ATTR_SIZE,
                ..Default::default()
            };
            attr.__bindgen_anon_4.config2 = f.file_offset + 10;
            kprobe_perf_engine::testing::sys::perf_event_open(&attr, Some(&path), pid, -1, 0)
                .unwrap()
        });
        child.stdin.take().unwrap().write_all(b"x").unwrap();
        let out = child.wait_with_output().unwrap();
        drop(fd);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(run(false), "112233445566778b ffff\n");
    assert_eq!(run(true), "112233445566778b 0\n");
}
