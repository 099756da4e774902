//! The fixtures the record and perf.data fuzzers start from: five probes
//! (PMU and tracefs, entry and return, with strings and arrays), a run of
//! their records over two CPUs (samples, COMM, LOST, THROTTLE and
//! UNTHROTTLE), and a whole perf.data file of them.

use std::collections::HashMap;
use std::io::Cursor;

use kprobe_perf_arch::Arch;
use kprobe_perf_engine::cli::plan::{self, BackendChoice};
use kprobe_perf_engine::cli::records::{
    comm_record_body, sample_attr_bytes, sample_record_body, RecordDecoder, RecordSink,
    SampleFields, ThreadNames, RECORD_COMM, RECORD_SAMPLE,
};
use kprobe_perf_engine::cli::records::{OpenedProbe, RingRecord};
use kprobe_perf_engine::perfdata::{
    symbol_subset, tracing_data, Metadata, Reader, Replay, StoredProbe, Writer, RECORD_LOST,
};
use kprobe_perf_engine::{KernelSymbols, ProbePlan, ProbeSpec};

/// `PERF_RECORD_THROTTLE` and `PERF_RECORD_UNTHROTTLE`.
pub const RECORD_THROTTLE: u32 = 5;
pub const RECORD_UNTHROTTLE: u32 = 6;

pub const KALLSYMS: &str = "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\nffffffff81234750 T ksys_close\n";
pub const OPENAT2: u64 = 0xffffffff81234570;
pub const OPEN: u64 = 0xffffffff81234660;
pub const CLOSE: u64 = 0xffffffff81234750;

/// The probes: (definition, route, tracefs field offsets).
pub const PROBES: &[(&str, BackendChoice, &[usize])] = &[
    (
        "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
        BackendChoice::Pmu,
        &[],
    ),
    (
        "r:do_sys_openat2 ret=$retval:s32 c=$comm",
        BackendChoice::Pmu,
        &[],
    ),
    // 8-byte common head, __probe_ip, then __data_loc, s32, u16[3].
    (
        "p:do_sys_openat2 path=+0(%si):string dfd=%di:s32 a=+8(%di):u16[3]",
        BackendChoice::Tracefs,
        &[16, 20, 24],
    ),
    ("p:ksys_close", BackendChoice::Pmu, &[]),
    // Head, __probe_func, __probe_ret_ip, then s64 and __data_loc.
    (
        "r4:do_sys_open ret=$retval:s64 s=+0($retval):string",
        BackendChoice::Tracefs,
        &[24, 32],
    ),
];

pub fn plans() -> Vec<ProbePlan> {
    let syms = KernelSymbols::parse(KALLSYMS).expect("fixture kallsyms");
    PROBES
        .iter()
        .map(|(s, choice, _)| {
            let spec = ProbeSpec::parse(s, Arch::X86_64).expect("fixture spec");
            plan::resolve(spec, &syms, Arch::X86_64, *choice).expect("fixture plan")
        })
        .collect()
}

pub fn offsets() -> Vec<Vec<usize>> {
    PROBES.iter().map(|(_, _, o)| o.to_vec()).collect()
}

pub fn id_of(probe: usize) -> u64 {
    100 + probe as u64
}

/// Pads a tracefs raw record as the kernel does (with the u32 size before
/// it, a multiple of 8).
pub fn pad(mut raw: Vec<u8>) -> Vec<u8> {
    while !(raw.len() + 4).is_multiple_of(8) {
        raw.push(0);
    }
    raw
}

/// A tracefs string: its __data_loc (length << 16 | offset) goes at
/// `loc`, the bytes at the end of `raw`.
pub fn push_string(raw: &mut Vec<u8>, loc: usize, s: &str) {
    let offset = raw.len() as u32;
    let len = s.len() as u32 + 1;
    raw[loc..loc + 4].copy_from_slice(&((len << 16) | offset).to_le_bytes());
    raw.extend_from_slice(s.as_bytes());
    raw.push(0);
}

/// The raw data and registers of a sample of each probe.
pub fn raws(variant: u64) -> Vec<(Vec<u8>, Vec<u64>)> {
    let mut kraw = vec![0u8; 20];
    kraw[8..16].copy_from_slice(&OPENAT2.to_ne_bytes());
    let mut rraw = vec![0u8; 28];
    rraw[8..16].copy_from_slice(&OPENAT2.to_ne_bytes());
    rraw[16..24].copy_from_slice(&(OPEN + 0xf1).to_ne_bytes());
    let mut traw = vec![0u8; 30];
    traw[8..16].copy_from_slice(&OPENAT2.to_le_bytes());
    traw[20..24].copy_from_slice(&(-100i32).to_le_bytes());
    for (i, v) in [1u16, 2, 3].iter().enumerate() {
        traw[24 + 2 * i..26 + 2 * i].copy_from_slice(&v.to_le_bytes());
    }
    push_string(&mut traw, 16, if variant == 0 { "/etc/hosts" } else { "" });
    let mut craw = vec![0u8; 20];
    craw[8..16].copy_from_slice(&CLOSE.to_ne_bytes());
    let mut rtraw = vec![0u8; 36];
    rtraw[8..16].copy_from_slice(&OPEN.to_le_bytes());
    rtraw[16..24].copy_from_slice(&(OPENAT2 + 0x40).to_le_bytes());
    rtraw[24..32].copy_from_slice(&(-2i64 - variant as i64).to_le_bytes());
    push_string(&mut rtraw, 32, "/usr/lib/x86_64-linux-gnu/libc.so.6");
    vec![
        (kraw, vec![3 + variant, 0xffff_ff9c]),
        (rraw, vec![5]),
        (pad(traw), vec![]),
        (craw, vec![]),
        (pad(rtraw), vec![]),
    ]
}

/// The sample_id trailer of non-sample records (TID, TIME, CPU,
/// IDENTIFIER), as the kernel writes it for the engine's attrs.
pub fn trailer(b: &mut Vec<u8>, tid: i32, time: u64, cpu: u32, id: u64) {
    b.extend_from_slice(&42i32.to_ne_bytes());
    b.extend_from_slice(&tid.to_ne_bytes());
    b.extend_from_slice(&time.to_ne_bytes());
    b.extend_from_slice(&cpu.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&id.to_ne_bytes());
}

pub fn lost_body(probe: usize, count: u64, time: u64, cpu: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&id_of(probe).to_ne_bytes());
    b.extend_from_slice(&count.to_ne_bytes());
    trailer(&mut b, 43, time, cpu, id_of(probe));
    b
}

pub fn throttle_body(probe: usize, time: u64, cpu: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&time.to_ne_bytes());
    b.extend_from_slice(&id_of(probe).to_ne_bytes());
    b.extend_from_slice(&id_of(probe).to_ne_bytes());
    trailer(&mut b, 43, time, cpu, id_of(probe));
    b
}

/// The starting records: (kind, body), in time order over two CPUs.
pub fn records(plans: &[ProbePlan]) -> Vec<(u32, Vec<u8>)> {
    let mut out = vec![(RECORD_COMM, comm_record_body(42, 43, "cat", 900, 0, 100))];
    let mut time = 1000;
    for variant in 0..2u64 {
        for (i, (p, (raw, regs))) in plans.iter().zip(raws(variant)).enumerate() {
            let f = SampleFields {
                id: id_of(i),
                ip: OPENAT2 + 1,
                pid: 42,
                tid: 43 + variant as i32,
                time,
                cpu: (i % 2) as u32,
                raw: &raw,
                regs: &regs,
            };
            out.push((RECORD_SAMPLE, sample_record_body(&f, p.regs_mask)));
            time += 10;
        }
        if variant == 0 {
            out.push((RECORD_LOST, lost_body(2, 7, time, 1)));
            out.push((RECORD_THROTTLE, throttle_body(0, time + 1, 0)));
            out.push((RECORD_UNTHROTTLE, throttle_body(0, time + 2, 0)));
            out.push((
                RECORD_COMM,
                comm_record_body(42, 44, "renamed-thread", time + 3, 1, 101),
            ));
            time += 10;
        }
    }
    out
}

/// A tracefs `format` file as the kernel writes it for probe `i`.
pub fn format_file(i: usize, fields: &[(&str, usize, usize, u8)]) -> String {
    let mut s = format!(
        "name: fuzz_{i}\nID: {}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n",
        1500 + i
    );
    for (decl, offset, size, signed) in fields {
        s.push_str(&format!(
            "\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{signed};\n"
        ));
    }
    s.push_str("\nprint fmt: \"(%lx)\", REC->__probe_ip\n");
    s
}

pub fn file(plans: &[ProbePlan], records: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let run = || -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let mut w = Writer::new(Cursor::new(Vec::new()))?;
        // The last probe is hidden from perf, as a joined return probe's
        // entry half is: its samples go to the hidden region.
        let spill_path =
            std::env::temp_dir().join(format!("kprobe-perf-fuzz-{}.spill", std::process::id()));
        let spill = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&spill_path)?;
        std::fs::remove_file(&spill_path)?;
        w.hide(vec![id_of(plans.len() - 1)], spill);
        w.kernel_mmap(0xffffffff81000000)?;
        for (n, (kind, body)) in records.iter().enumerate() {
            w.record(RingRecord::new(*kind, 1, (body, &[])))?;
            if n % 4 == 3 {
                w.round_end()?;
            }
        }
        w.round_end()?;
        let syms = KernelSymbols::parse(KALLSYMS)?;
        let events = vec![
            (
                "kprobe_perf_1".to_string(),
                format_file(
                    2,
                    &[
                        ("unsigned long __probe_ip", 8, 8, 0),
                        ("__data_loc char[] path", 16, 4, 1),
                        ("s32 dfd", 20, 4, 1),
                        ("u16 a[3]", 24, 6, 0),
                    ],
                ),
            ),
            (
                "kprobe_perf_1".to_string(),
                format_file(
                    4,
                    &[
                        ("unsigned long __probe_func", 8, 8, 0),
                        ("unsigned long __probe_ret_ip", 16, 8, 0),
                        ("s64 ret", 24, 8, 1),
                        ("__data_loc char[] s", 32, 4, 1),
                    ],
                ),
            ),
        ];
        let meta = Metadata {
            arch: Arch::X86_64,
            probes: plans
                .iter()
                .zip(offsets())
                .map(|(p, o)| StoredProbe::from_plan(p, &o))
                .collect(),
            attrs: plans.iter().map(sample_attr_bytes).collect(),
            ids: (0..plans.len()).map(|i| vec![id_of(i)]).collect(),
            hidden: 1,
            symbols: symbol_subset(&syms, [OPENAT2, OPEN, CLOSE, OPENAT2 + 1]),
            hostname: "fuzz".into(),
            osrelease: "6.1".into(),
            nr_cpus: (2, 2),
            cmdline: vec!["record_fuzz".into()],
            notes: vec![("summary".into(), "x".into())],
            build_ids: Vec::new(),
            tracing_data: Some(tracing_data(
                4096,
                "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n",
                "# compressed entry header\n\ttype_len    :    5 bits\n",
                &events,
            )),
        };
        Ok(w.finish(&meta)?.into_inner())
    };
    run().expect("the base perf.data file")
}

pub fn replay(bytes: &[u8]) -> Result<u64, String> {
    let reader = Reader::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut r = Replay::new(reader).map_err(|e| e.to_string())?;
    r.run(|_, _, _, _| {}).map_err(|e| e.to_string())
}

/// A decoder of the fixture probes, as a session makes one.
pub fn decoder(plans: &[ProbePlan]) -> RecordDecoder {
    let attrs: Vec<Vec<u8>> = plans.iter().map(sample_attr_bytes).collect();
    let ids: HashMap<u64, usize> = (0..plans.len()).map(|i| (id_of(i), i)).collect();
    let probes = plans
        .iter()
        .zip(attrs)
        .zip(offsets())
        .map(|((plan, attr), field_offsets)| OpenedProbe {
            plan: plan.clone(),
            attr,
            field_offsets,
        })
        .collect();
    RecordDecoder::new(probes, ids, ThreadNames::RecordsOnly).expect("fixture decoder")
}
