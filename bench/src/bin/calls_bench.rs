//! A perf.data file as `kprobe-perf calls -o` writes it, made up:
//! `calls_bench EVENTS FILE` writes EVENTS (rounded down to whole trees)
//! entries and returns of `do_sys_openat2` (the root) and three
//! functions it calls, on 8 threads in turn, each root call a tree of
//! 8 events (every fourth returns -ENOENT through its callees), as kprobes
//! and kretprobes (the PMU's), with the traced functions stored beside
//! them; for `cargo xtask bench calls` to time `kprobe-perf calls -i` on.
//! Prints one line.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;

use kprobe_perf_arch::Arch;
use kprobe_perf_engine::analysis::{functions_note, FUNCTIONS_NOTE, LOST_NOTE};
use kprobe_perf_engine::cli::plan::{self, BackendChoice, ProbePlan};
use kprobe_perf_engine::cli::records::{
    comm_record_body, sample_attr_bytes, sample_record_body, RecordSink, RingRecord, SampleFields,
    RECORD_COMM, RECORD_SAMPLE,
};
use kprobe_perf_engine::perfdata::{symbol_subset, Metadata, StoredProbe, Writer, MISC_KERNEL};
use kprobe_perf_engine::{KernelSymbols, ProbeSpec, ReturnKind, TracedFunction};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const THREADS: i32 = 8;
const CPUS: u32 = 2;
/// Trees per poll round (a FINISHED_ROUND record after each).
const ROUND: usize = 512;
/// The functions: the root first, then those it calls.
const FUNCTIONS: [(&str, u64); 4] = [
    ("do_sys_openat2", 0xffffffff81234560),
    ("do_filp_open", 0xffffffff81235000),
    ("path_openat", 0xffffffff81236000),
    ("lookup_fast", 0xffffffff81237000),
];
/// One tree: (function, entry or return), in time order.
const TREE: [(usize, bool); 8] = [
    (0, false),
    (1, false),
    (2, false),
    (3, false),
    (3, true),
    (2, true),
    (1, true),
    (0, true),
];

fn main() -> BenchResult<()> {
    let mut args = std::env::args().skip(1);
    let events: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let path = args.next().ok_or("usage: calls_bench EVENTS FILE")?;
    let symbols = KernelSymbols::parse(&kallsyms())?;
    let plans = FUNCTIONS
        .iter()
        .map(|(f, _)| format!("p:{f}"))
        .chain(
            FUNCTIONS
                .iter()
                .map(|(f, _)| format!("r:{f} ret=$retval:x64")),
        )
        .map(|s| {
            let spec = ProbeSpec::parse(&s, Arch::X86_64)?;
            Ok(plan::resolve(
                spec,
                &symbols,
                Arch::X86_64,
                BackendChoice::Pmu,
            )?)
        })
        .collect::<BenchResult<Vec<ProbePlan>>>()?;
    let trees = events / TREE.len();
    write_file(&path, &symbols, &plans, trees)?;
    println!(
        "calls_bench: wrote {path}: {} events ({trees} trees of {} calls)",
        trees * TREE.len(),
        TREE.len() / 2
    );
    Ok(())
}

/// The made-up kernel's symbols.
fn kallsyms() -> String {
    let mut s = String::from("ffffffff81000000 T _text\n");
    for (name, addr) in FUNCTIONS {
        s.push_str(&format!("{addr:x} T {name}\n"));
    }
    s.push_str("ffffffff81238000 T after_the_traced\n");
    s
}

/// The traced functions, as `calls` finds them in BTF.
fn traced() -> Vec<TracedFunction> {
    let int = ReturnKind::Integer {
        size: 4,
        signed: true,
    };
    let mut root = TracedFunction::new(FUNCTIONS[0].0, int, true);
    root.params = vec!["dfd".into(), "filename".into(), "how".into()];
    let mut out = vec![root];
    out.extend(
        FUNCTIONS[1..]
            .iter()
            .map(|(f, _)| TracedFunction::new(*f, ReturnKind::Pointer, false)),
    );
    out
}

/// The event ids of probe `probe` (one per CPU).
fn id(probe: usize, cpu: u32) -> u64 {
    1000 + probe as u64 * 16 + u64::from(cpu)
}

/// The body of one sample: `function`'s entry or return (-ENOENT when
/// `fails`, else a pointer or 3) by `tid` at `time`.
fn sample(
    plans: &[ProbePlan],
    function: usize,
    ret: bool,
    tid: i32,
    time: u64,
    fails: bool,
) -> Vec<u8> {
    let probe = function + if ret { FUNCTIONS.len() } else { 0 };
    let cpu = (tid as u32) % CPUS;
    let addr = FUNCTIONS[function].1;
    let mut raw = vec![0u8; if ret { 28 } else { 20 }];
    raw[8..16].copy_from_slice(&addr.to_ne_bytes());
    let value = match (fails, function) {
        (true, _) => (-2i64) as u64,
        (false, 0) => 3,
        (false, _) => 0xffff_8880_1234_5600,
    };
    let regs = [value];
    let f = SampleFields {
        id: id(probe, cpu),
        ip: addr + 4,
        pid: tid,
        tid,
        time,
        cpu,
        raw: &raw,
        regs: if plans[probe].regs_mask != 0 {
            &regs
        } else {
            &[]
        },
    };
    sample_record_body(&f, plans[probe].regs_mask)
}

/// Writes the file: the threads' names, `trees` trees round by round,
/// then the metadata with the traced functions' note.
fn write_file(
    path: &str,
    symbols: &KernelSymbols,
    plans: &[ProbePlan],
    trees: usize,
) -> BenchResult<()> {
    let mut w = Writer::new(BufWriter::with_capacity(1 << 20, File::create(path)?))?;
    w.kernel_mmap(0xffffffff81000000)?;
    for t in 0..THREADS {
        let tid = 5000 + t;
        let b = comm_record_body(tid, tid, &format!("opener-{t}"), 0, 0, id(0, 0));
        w.record(RingRecord::new(RECORD_COMM, 0, (&b, &[])))?;
    }
    let mut time = 1_000_000_000_000u64;
    for i in 0..trees {
        let tid = 5000 + (i as i32 % THREADS);
        let fails = i % 4 == 0;
        for (function, ret) in TREE {
            time += 300 + (i as u64 * 7919) % 200;
            let body = sample(plans, function, ret, tid, time, fails);
            w.record(RingRecord::new(RECORD_SAMPLE, MISC_KERNEL, (&body, &[])))?;
        }
        if i % ROUND == ROUND - 1 {
            w.round_end()?;
        }
    }
    w.round_end()?;
    let mut ids: HashMap<usize, Vec<u64>> = HashMap::new();
    for p in 0..plans.len() {
        ids.insert(p, (0..CPUS).map(|c| id(p, c)).collect());
    }
    let meta = Metadata {
        hidden: 0,
        arch: Arch::X86_64,
        probes: plans
            .iter()
            .map(|p| StoredProbe::from_plan(p, &[]))
            .collect(),
        attrs: plans.iter().map(sample_attr_bytes).collect(),
        ids: (0..plans.len()).map(|p| ids[&p].clone()).collect(),
        symbols: symbol_subset(symbols, FUNCTIONS.iter().map(|(_, a)| *a)),
        hostname: "bench".into(),
        osrelease: "bench".into(),
        nr_cpus: (CPUS, CPUS),
        cmdline: std::env::args().collect(),
        notes: vec![
            (FUNCTIONS_NOTE.into(), functions_note(&traced())),
            (LOST_NOTE.into(), "0".into()),
            (
                "summary".into(),
                format!("kprobe-perf: {} events", trees * TREE.len()),
            ),
        ],
        tracing_data: None,
        build_ids: Vec::new(),
    };
    w.finish(&meta)?;
    Ok(())
}
