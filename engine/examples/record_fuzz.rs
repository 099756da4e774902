//! Robustness of the record decoder and the perf.data reader: feeds N
//! mutated inputs (default one million), three in four a PERF_RECORD_SAMPLE
//! of a PMU or a tracefs probe through the decoder, one in four a whole
//! perf.data file through the reader and replay, and reports how many were
//! decoded, how many refused, and any panic. `cargo xtask fuzz record [N]`
//! runs this in release mode.

use std::collections::HashMap;
use std::io::Cursor;
use std::panic;
use std::sync::Arc;
use std::time::Instant;

use kprobe_perf_arch::Arch;
use kprobe_perf_engine::perfdata::{symbol_subset, Metadata, Reader, Replay, StoredProbe, Writer};
use kprobe_perf_engine::plan::{self, BackendChoice};
use kprobe_perf_engine::records::{
    comm_record_body, sample_attr_bytes, sample_record_body, RecordDecoder, RecordSink,
    SampleFields, RECORD_COMM, RECORD_SAMPLE,
};
use kprobe_perf_engine::{KernelSymbols, ProbePlan, ProbeSpec};

#[path = "common/rng.rs"]
mod rng;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        rng::xorshift(&mut self.0)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const KALLSYMS: &str = "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\nffffffff81234750 T ksys_close\n";

fn plans() -> Vec<ProbePlan> {
    let syms = KernelSymbols::parse(KALLSYMS).expect("fixture kallsyms");
    [
        (
            "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
            BackendChoice::Pmu,
        ),
        (
            "r:do_sys_openat2 ret=$retval:s32 c=$comm",
            BackendChoice::Pmu,
        ),
        (
            "p:do_sys_openat2 path=+0(%si):string dfd=%di:s32 a=+8(%di):u16[3]",
            BackendChoice::Tracefs,
        ),
    ]
    .iter()
    .map(|(s, choice)| {
        let spec = ProbeSpec::parse(s, Arch::X86_64).expect("fixture spec");
        plan::resolve(spec, &syms, Arch::X86_64, *choice).expect("fixture plan")
    })
    .collect()
}

/// Field offsets of the tracefs probe: 16-byte head, __data_loc, s32, u16[3].
const FIELDS: [usize; 3] = [16, 20, 24];

/// One valid sample body per probe.
fn samples(plans: &[ProbePlan]) -> Vec<Vec<u8>> {
    let mut kraw = vec![0u8; 20];
    kraw[8..16].copy_from_slice(&0xffffffff81234570u64.to_ne_bytes());
    let mut rraw = vec![0u8; 28];
    rraw[8..16].copy_from_slice(&0xffffffff81234570u64.to_ne_bytes());
    rraw[16..24].copy_from_slice(&0xffffffff81234661u64.to_ne_bytes());
    let mut traw = vec![0u8; 16];
    traw.extend_from_slice(&((12u32 << 16) | 30).to_le_bytes());
    traw.extend_from_slice(&(-100i32).to_le_bytes());
    for v in [1u16, 2, 3] {
        traw.extend_from_slice(&v.to_le_bytes());
    }
    traw.extend_from_slice(b"/etc/hosts\0\0");
    while (traw.len() + 4) % 8 != 0 {
        traw.push(0);
    }
    let raws: [(&[u8], &[u64]); 3] = [(&kraw, &[3, 0xffff_ff9c]), (&rraw, &[5]), (&traw, &[])];
    plans
        .iter()
        .zip(raws)
        .enumerate()
        .map(|(i, (p, (raw, regs)))| {
            let f = SampleFields {
                id: 100 + i as u64,
                ip: 0xffffffff81234661,
                pid: 42,
                tid: 43,
                time: 1000 + i as u64,
                cpu: 1,
                raw,
                regs,
            };
            sample_record_body(&f, p.regs_mask)
        })
        .collect()
}

fn offsets() -> Vec<Vec<usize>> {
    vec![Vec::new(), Vec::new(), FIELDS.to_vec()]
}

fn file(plans: &[ProbePlan], samples: &[Vec<u8>]) -> Vec<u8> {
    let run = || -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let mut w = Writer::new(Cursor::new(Vec::new()))?;
        w.kernel_mmap(0xffffffff81000000)?;
        let c = comm_record_body(42, 43, "cat", 900, 1, 100);
        w.record(RECORD_COMM, 0, (&c, &[]))?;
        for s in samples {
            w.record(RECORD_SAMPLE, 1, (s, &[]))?;
        }
        w.round_end()?;
        let syms = KernelSymbols::parse(KALLSYMS)?;
        let meta = Metadata {
            arch: Arch::X86_64,
            probes: plans
                .iter()
                .zip(offsets())
                .map(|(p, o)| StoredProbe::from_plan(p, &o))
                .collect(),
            attrs: plans.iter().map(sample_attr_bytes).collect(),
            ids: vec![vec![100], vec![101], vec![102]],
            symbols: symbol_subset(&syms, [0xffffffff81234570, 0xffffffff81234661]),
            hostname: "fuzz".into(),
            osrelease: "6.1".into(),
            nr_cpus: (2, 2),
            cmdline: vec!["record_fuzz".into()],
            notes: vec![("summary".into(), "x".into())],
            tracing_data: None,
        };
        Ok(w.finish(&meta)?.into_inner())
    };
    run().expect("the base perf.data file")
}

/// Byte-level mutations, and sizes and counts set to edge values.
fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(7) {
            0 => b.truncate(at),
            1 if at < b.len() => b[at] ^= 1 << rng.below(8),
            2 if at < b.len() => b[at] = rng.next() as u8,
            3 => {
                let edge = [
                    0u64,
                    1,
                    7,
                    8,
                    0xff,
                    0xffff,
                    0x7fff_ffff,
                    u32::MAX.into(),
                    u64::MAX,
                ];
                let v = edge[rng.below(edge.len())].to_ne_bytes();
                let w = [1, 2, 4, 8][rng.below(4)];
                let at = at & !(w - 1);
                if at + w <= b.len() {
                    b[at..at + w].copy_from_slice(&v[..w]);
                }
            }
            4 => {
                let n = rng.below(16);
                b.splice(at..at, (0..n).map(|_| rng.next() as u8));
            }
            5 if !b.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(b.len());
                b.drain(at.min(end)..end);
            }
            _ => {
                let from = rng.below(b.len());
                let to = (from + rng.below(64)).min(b.len());
                let chunk = b[from..to].to_vec();
                b.splice(at..at, chunk);
            }
        }
    }
    b
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7265_636f);
    let plans = plans();
    let samples = samples(&plans);
    let base_file = file(&plans, &samples);
    let attrs: Vec<Vec<u8>> = plans.iter().map(sample_attr_bytes).collect();
    let ids: HashMap<u64, usize> = [(100, 0), (101, 1), (102, 2)].into_iter().collect();
    let mut decoder =
        RecordDecoder::new(plans.clone(), offsets(), attrs, ids, false).expect("fixture decoder");
    // The unmutated inputs decode.
    let comm: Arc<str> = Arc::from("cat");
    for s in &samples {
        if let Err(e) = decoder.decode_sample_bytes(1, s, &comm) {
            eprintln!("a valid sample does not decode: {e}");
            std::process::exit(1);
        }
    }
    let replay = |bytes: &[u8]| -> Result<u64, String> {
        let reader = Reader::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
        let mut r = Replay::new(reader).map_err(|e| e.to_string())?;
        r.run(|_, _, _| {}).map_err(|e| e.to_string())
    };
    if let Err(e) = replay(&base_file) {
        eprintln!("the base perf.data file does not replay: {e}");
        std::process::exit(1);
    }
    panic::set_hook(Box::new(|_| {}));
    let (mut decoded, mut refused, mut files) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    for i in 0..n {
        let is_file = rng_pick(&mut Rng(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1));
        let mut rng = Rng((seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d)) | 1);
        let input = if is_file {
            mutate(&mut rng, &base_file)
        } else {
            let which = rng.below(samples.len());
            mutate(&mut rng, &samples[which])
        };
        let outcome = panic::catch_unwind(panic::AssertUnwindSafe(|| {
            if is_file {
                replay(&input).is_ok()
            } else {
                let a = decoder.decode_sample_bytes(1, &input, &comm).is_ok();
                let b = decoder.record(RECORD_SAMPLE, 1, (&input, &[])).is_ok();
                // Split the record as a ring wrap would.
                let cut = input.len() / 2;
                let c = decoder
                    .record(RECORD_SAMPLE, 1, (&input[..cut], &input[cut..]))
                    .is_ok();
                decoder.round(true, |e, _| {
                    std::hint::black_box(e);
                });
                a && b && c
            }
        }));
        match outcome {
            Ok(true) => decoded += 1,
            Ok(false) => refused += 1,
            Err(_) => {
                let _ = panic::take_hook();
                eprintln!(
                    "PANIC on input #{i} (seed {seed}, {}): {:02x?}",
                    if is_file { "perf.data file" } else { "sample" },
                    input
                );
                std::process::exit(1);
            }
        }
        files += u64::from(is_file);
    }
    println!(
        "record fuzz: {n} inputs (seed {seed}; {} samples, {files} perf.data files) in {:.2} s: {decoded} decoded, {refused} refused, 0 panics",
        n - files,
        start.elapsed().as_secs_f64()
    );
}

/// One input in four is a whole file.
fn rng_pick(rng: &mut Rng) -> bool {
    rng.below(4) == 0
}
