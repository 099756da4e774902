//! Decoding speed on one core: N (default 2,000,000) samples of
//! `p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32`, laid out as the kernel
//! writes them for a session, decoded into events and handed to a binary
//! sink in time order, round by round.
//! With a second argument, also writes them as a perf.data file (as
//! `record -o` would), for `cargo xtask bench decode` to time
//! `kprobe-perf script` and `perf script` on. Prints one line of figures.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::time::Instant;

use kprobe_perf_arch::Arch;
use kprobe_perf_engine::cli::plan::{self, BackendChoice};
use kprobe_perf_engine::cli::records::{
    comm_record_body, sample_attr_bytes, sample_record_body, Handover, RecordDecoder, RecordSink,
    SampleFields, ThreadNames, RECORD_COMM, RECORD_SAMPLE,
};
use kprobe_perf_engine::cli::records::{OpenedProbe, RingRecord};
use kprobe_perf_engine::perfdata::{symbol_subset, Metadata, StoredProbe, Writer, MISC_KERNEL};
use kprobe_perf_engine::{KernelSymbols, ProbeSpec};

const SPEC: &str = "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32";
const THREADS: i32 = 64;
const CPUS: u32 = 4;
/// Samples per poll round (a FINISHED_ROUND record after each).
const ROUND: usize = 4096;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> BenchResult<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let out = std::env::args().nth(2);
    let symbols = bench_symbols()?;
    let func = symbols.lookup("do_sys_openat2")[0].address;
    let plan = plan::resolve(
        ProbeSpec::parse(SPEC, Arch::X86_64)?,
        &symbols,
        Arch::X86_64,
        BackendChoice::Pmu,
    )?;
    let ids: Vec<u64> = (0..u64::from(CPUS)).map(|c| 1000 + c).collect();
    let samples = Samples::new(n, &plan, func, &ids);
    let comms: Vec<(i32, String)> = (0..THREADS)
        .map(|t| (4000 + t, format!("worker-{t}")))
        .collect();
    let (best, decoded) = time_decoding(&plan, &ids, &samples, &comms)?;
    assert_eq!(decoded, n, "every sample decodes");
    println!(
        "decode: {n} samples ({:.0} MB) into events on one core in {:.1} ms (best of 3): {:.2} M events/s (goal: 5)",
        samples.records.len() as f64 / 1e6,
        best * 1e3,
        n as f64 / best / 1e6
    );
    if let Some(path) = out {
        write_perf_data(&path, &symbols, &plan, ids, &samples, &comms)?;
        println!("decode: wrote {path}");
    }
    Ok(())
}

/// The host's kallsyms when it shows do_sys_openat2 (so perf script
/// symbolizes against it), else a made-up table.
fn bench_symbols() -> BenchResult<KernelSymbols> {
    let host = KernelSymbols::load().ok().filter(|s| {
        !s.addresses_hidden()
            && s.lookup("do_sys_openat2").len() == 1
            && s.lookup("_text").len() == 1
    });
    Ok(match host {
        Some(s) => s,
        None => KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\nffffffff81234690 T do_sys_open\n",
        )?,
    })
}

/// The sample records, as the rings would hold them (header + body).
struct Samples {
    records: Vec<u8>,
    offsets: Vec<usize>,
}

impl Samples {
    fn new(n: usize, plan: &plan::ProbePlan, func: u64, ids: &[u64]) -> Samples {
        let mut raw = [0u8; 20];
        raw[8..16].copy_from_slice(&func.to_ne_bytes());
        let mut records: Vec<u8> = Vec::with_capacity(n * 112);
        let mut offsets = Vec::with_capacity(n);
        let mut time = 1_000_000_000_000u64;
        for i in 0..n {
            time += 500 + (i as u64 * 7919) % 400;
            let tid = 4000 + (i as i32 % THREADS);
            let cpu = i as u32 % CPUS;
            let flags = [0x8000u64, 0x80000, 0x88241, 0x98800][i % 4];
            let f = SampleFields {
                id: ids[cpu as usize],
                ip: func + 1,
                pid: tid,
                tid,
                time,
                cpu,
                raw: &raw,
                regs: &[flags, 0xffff_ff9c],
            };
            let body = sample_record_body(&f, plan.regs_mask);
            offsets.push(records.len());
            records.extend_from_slice(&RECORD_SAMPLE.to_ne_bytes());
            records.extend_from_slice(&MISC_KERNEL.to_ne_bytes());
            records.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
            records.extend_from_slice(&body);
        }
        Samples { records, offsets }
    }

    /// The body of the record at `off`.
    fn body(&self, off: usize) -> &[u8] {
        let size = u16::from_ne_bytes([self.records[off + 6], self.records[off + 7]]) as usize;
        &self.records[off + 8..off + size]
    }
}

/// Decodes every sample, round by round, three times: (the best time in
/// seconds, the events decoded).
fn time_decoding(
    plan: &plan::ProbePlan,
    ids: &[u64],
    samples: &Samples,
    comms: &[(i32, String)],
) -> BenchResult<(f64, usize)> {
    let attr = sample_attr_bytes(plan);
    let probe_of_id: HashMap<u64, usize> = ids.iter().map(|&i| (i, 0)).collect();
    let mut best = f64::MAX;
    let mut decoded = 0usize;
    for _ in 0..3 {
        let mut d = RecordDecoder::new(
            vec![OpenedProbe {
                plan: plan.clone(),
                attr: attr.clone(),
                field_offsets: Vec::new(),
            }],
            probe_of_id.clone(),
            ThreadNames::RecordsOnly,
        )?;
        for (tid, name) in comms {
            let b = comm_record_body(*tid, *tid, name, 0, 0, ids[0]);
            d.record(RingRecord::new(RECORD_COMM, 0, (&b, &[])))?;
        }
        let start = Instant::now();
        let mut count = 0usize;
        for chunk in samples.offsets.chunks(ROUND) {
            for &off in chunk {
                d.record(RingRecord::new(
                    RECORD_SAMPLE,
                    MISC_KERNEL,
                    (samples.body(off), &[]),
                ))?;
            }
            count += d.round(Handover::Ordered, |e, _| {
                std::hint::black_box(e);
            });
        }
        count += d.round(Handover::All, |e, _| {
            std::hint::black_box(e);
        });
        best = best.min(start.elapsed().as_secs_f64());
        decoded = count;
    }
    Ok((best, decoded))
}

/// The samples as a perf.data file, as `record -o` would write it.
fn write_perf_data(
    path: &str,
    symbols: &KernelSymbols,
    plan: &plan::ProbePlan,
    ids: Vec<u64>,
    samples: &Samples,
    comms: &[(i32, String)],
) -> BenchResult<()> {
    let func = symbols.lookup("do_sys_openat2")[0].address;
    let text = symbols.lookup("_text")[0].address;
    let mut w = Writer::new(BufWriter::with_capacity(1 << 20, File::create(path)?))?;
    w.kernel_mmap(text)?;
    for (tid, name) in comms {
        let b = comm_record_body(*tid, *tid, name, 0, 0, ids[0]);
        w.record(RingRecord::new(RECORD_COMM, 0, (&b, &[])))?;
    }
    for chunk in samples.offsets.chunks(ROUND) {
        for &off in chunk {
            w.record(RingRecord::new(
                RECORD_SAMPLE,
                MISC_KERNEL,
                (samples.body(off), &[]),
            ))?;
        }
        w.round_end()?;
    }
    let meta = Metadata {
        hidden: 0,
        arch: Arch::X86_64,
        probes: vec![StoredProbe::from_plan(plan, &[])],
        attrs: vec![sample_attr_bytes(plan)],
        ids: vec![ids],
        symbols: symbol_subset(symbols, [func]),
        hostname: "bench".into(),
        osrelease: "bench".into(),
        nr_cpus: (CPUS, CPUS),
        cmdline: std::env::args().collect(),
        notes: Vec::new(),
        tracing_data: None,
        build_ids: Vec::new(),
    };
    w.finish(&meta)?;
    Ok(())
}
