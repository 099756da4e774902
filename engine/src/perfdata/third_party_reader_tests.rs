//! The writer's files read by an independent parser, the `linux-perf-data`
//! crate: its attrs, names, ids, features and every record's fields must
//! be what was written, so the files are not only readable by our own
//! reader.

use crate::decode::records::RingRecord;
use std::io::Cursor;

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use super::*;
use crate::decode::records::{
    comm_record_body, sample_attr_bytes, sample_record_body, sample_type, RecordSink, SampleFields,
    RECORD_COMM, RECORD_SAMPLE,
};
use crate::plan::{self, BackendChoice};
use kprobe_perf_spec::ProbeSpec;

const KALLSYMS: &str = "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\n";
const TEXT: u64 = 0xffff_ffff_8100_0000;

fn plans() -> Vec<crate::plan::ProbePlan> {
    let syms = KernelSymbols::parse(KALLSYMS).unwrap();
    [
        "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
        "r:do_sys_openat2 ret=$retval:s32",
    ]
    .iter()
    .map(|s| {
        let spec = ProbeSpec::parse(s, Arch::X86_64).unwrap();
        plan::resolve(spec, &syms, Arch::X86_64, BackendChoice::Auto).unwrap()
    })
    .collect()
}

/// What each sample is made of: (probe, id, time, cpu, raw, regs).
type Sample = (usize, u64, u64, u32, Vec<u8>, Vec<u64>);

fn samples() -> Vec<Sample> {
    let mut raw = vec![0u8; 20];
    raw[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_ne_bytes());
    raw[8..16].copy_from_slice(&0xffff_ffff_8123_4570u64.to_ne_bytes());
    let mut rraw = vec![0u8; 28];
    rraw[8..16].copy_from_slice(&0xffff_ffff_8123_4570u64.to_ne_bytes());
    rraw[16..24].copy_from_slice(&0xffff_ffff_8100_1234u64.to_ne_bytes());
    vec![
        (0, 101, 1_000, 1, raw, vec![3, 0xffff_ff9c]),
        (1, 200, 2_000, 0, rraw, vec![u64::MAX - 1]),
    ]
}

/// A file as a session writes it: the kernel's MMAP, a COMM, then one
/// sample of each probe, each in a round of its own.
fn file() -> Vec<u8> {
    let plans = plans();
    let mut w = Writer::new(Cursor::new(Vec::new())).unwrap();
    w.kernel_mmap(TEXT).unwrap();
    let comm = comm_record_body(42, 43, "cat", 900, 1, 101);
    w.record(RingRecord::new(RECORD_COMM, 0, (&comm, &[])))
        .unwrap();
    for (probe, id, time, cpu, raw, regs) in &samples() {
        let f = SampleFields {
            id: *id,
            ip: 0xffff_ffff_8123_4571,
            pid: 42,
            tid: 43,
            time: *time,
            cpu: *cpu,
            raw,
            regs,
        };
        let body = sample_record_body(&f, plans[*probe].regs_mask);
        // The body in two parts, as a ring hands over a record that wraps.
        let (a, b) = body.split_at(body.len() / 2);
        w.record(RingRecord::new(RECORD_SAMPLE, MISC_KERNEL, (a, b)))
            .unwrap();
        w.round_end().unwrap();
    }
    let meta = Metadata {
        hidden: 0,
        arch: Arch::X86_64,
        probes: plans
            .iter()
            .map(|p| StoredProbe::from_plan(p, &[]))
            .collect(),
        attrs: plans.iter().map(sample_attr_bytes).collect(),
        ids: vec![vec![100, 101], vec![200, 201]],
        symbols: String::new(),
        hostname: "testhost".into(),
        osrelease: "6.1.0-test".into(),
        nr_cpus: (4, 2),
        cmdline: vec!["kprobe-perf".into(), "record".into(), "-o".into()],
        notes: vec![],
        tracing_data: None,
        build_ids: vec![
            crate::perfdata::FileBuildId {
                kernel: true,
                id: (1..=20).collect(),
                path: "[kernel.kallsyms]".into(),
            },
            crate::perfdata::FileBuildId {
                kernel: false,
                id: vec![0xab; 20],
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            },
        ],
    };
    w.finish(&meta).unwrap().into_inner()
}

#[test]
fn linux_perf_data_reads_the_attrs_names_ids_and_features() {
    let plans = plans();
    let bytes = file();
    let PerfFileReader { perf_file, .. } = PerfFileReader::parse_file(Cursor::new(&bytes[..]))
        .unwrap_or_else(|e| panic!("linux-perf-data refuses the file: {e}"));
    let attrs = perf_file.event_attributes();
    assert_eq!(attrs.len(), 2);
    let names: Vec<Option<&str>> = attrs.iter().map(|a| a.name()).collect();
    assert_eq!(
        names,
        [Some("p_do_sys_openat2_0"), Some("r_do_sys_openat2_0")]
    );
    for (i, a) in attrs.iter().enumerate() {
        assert_eq!(
            a.attr.sample_format.bits(),
            sample_type(&plans[i]),
            "attr {i}"
        );
        assert_eq!(a.attr.sample_regs_intr, plans[i].regs_mask, "attr {i}");
    }
    // IDENTIFIER | IP | TID | TIME | CPU | RAW | REGS_INTR.
    assert_eq!(
        attrs[0].attr.sample_format.bits(),
        0x1_0000 | 0x1 | 0x2 | 0x4 | 0x80 | 0x400 | 0x4_0000
    );
    // dx (3) and di (5); the return probe's ax (0).
    assert_eq!(plans[0].regs_mask, (1 << 3) | (1 << 5));
    assert_eq!(plans[1].regs_mask, 1);
    assert_eq!(attrs[0].event_ids, [100, 101]);
    assert_eq!(attrs[1].event_ids, [200, 201]);
    assert_eq!(perf_file.hostname().unwrap(), Some("testhost"));
    assert_eq!(perf_file.os_release().unwrap(), Some("6.1.0-test"));
    assert_eq!(perf_file.arch().unwrap(), Some("x86_64"));
    assert_eq!(
        perf_file.perf_version().unwrap(),
        Some(concat!("kprobe-perf ", env!("CARGO_PKG_VERSION")))
    );
    // HEADER_BUILD_ID, as perf writes it.
    let ids = perf_file.build_ids().unwrap();
    let mut ids: Vec<(String, Vec<u8>)> = ids
        .values()
        .map(|d| {
            (
                String::from_utf8_lossy(&d.path).into_owned(),
                d.build_id.clone(),
            )
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            (
                "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string(),
                vec![0xab; 20]
            ),
            ("[kernel.kallsyms]".to_string(), (1..=20).collect()),
        ]
    );
    let cpus = perf_file.nr_cpus().unwrap().unwrap();
    assert_eq!((cpus.nr_cpus_available, cpus.nr_cpus_online), (4, 2));
    assert_eq!(
        perf_file.cmdline().unwrap(),
        Some(vec!["kprobe-perf", "record", "-o"])
    );
}

#[test]
fn linux_perf_data_reads_every_record_field_as_written() {
    let plans = plans();
    let bytes = file();
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(Cursor::new(&bytes[..])).unwrap();
    let mut seen = Vec::new();
    let mut samples = samples().into_iter();
    while let Some(record) = record_iter.next_record(&mut perf_file).unwrap() {
        let PerfFileRecord::EventRecord { attr_index, record } = record else {
            panic!("a user record in the file");
        };
        match record.parse().unwrap() {
            EventRecord::Mmap(m) => {
                assert_eq!((m.pid, m.tid), (-1, 0));
                assert_eq!(
                    (m.address, m.length, m.page_offset),
                    (TEXT, u64::MAX - TEXT, TEXT)
                );
                assert_eq!(m.cpu_mode, CpuMode::Kernel);
                assert_eq!(&m.path.as_slice()[..], b"[kernel.kallsyms]_text");
                seen.push("mmap".to_string());
            }
            EventRecord::Comm(c) => {
                assert_eq!((c.pid, c.tid, c.is_execve), (42, 43, false));
                assert_eq!(&c.name.as_slice()[..], b"cat");
                let common = record.common_data().unwrap();
                assert_eq!(
                    (common.timestamp, common.cpu, common.id),
                    (Some(900), Some(1), Some(101))
                );
                assert_eq!(attr_index, 0, "id 101 belongs to the first attr");
                seen.push("comm".to_string());
            }
            EventRecord::Sample(s) => {
                let (probe, id, time, cpu, raw, regs) = samples.next().unwrap();
                assert_eq!(attr_index, probe, "sample {id}");
                assert_eq!(s.id, Some(id));
                assert_eq!(s.ip, Some(0xffff_ffff_8123_4571));
                assert_eq!((s.pid, s.tid), (Some(42), Some(43)));
                assert_eq!((s.timestamp, s.cpu), (Some(time), Some(cpu)));
                assert_eq!(s.cpu_mode, CpuMode::Kernel);
                assert_eq!(s.raw.map(|r| r.as_slice().into_owned()), Some(raw));
                let intr = s.intr_regs.unwrap();
                let indices: Vec<u64> = (0..64)
                    .filter(|i| plans[probe].regs_mask & (1 << i) != 0)
                    .collect();
                let got: Vec<Option<u64>> = indices.iter().map(|&i| intr.get(i)).collect();
                assert_eq!(got, regs.into_iter().map(Some).collect::<Vec<_>>());
                assert_eq!((s.user_regs.is_none(), s.callchain.is_none()), (true, true));
                seen.push(format!("sample {id}"));
            }
            other => panic!("unexpected record {other:?}"),
        }
    }
    assert_eq!(seen, ["mmap", "comm", "sample 101", "sample 200"]);
}
