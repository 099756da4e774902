use crate::decode::records::{OpenedProbe, RingRecord};
use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

use super::*;
use crate::decode::records::{
    comm_record_body, sample_attr_bytes, sample_record_body, RecordDecoder, RecordSink,
    SampleFields, ThreadNames, RECORD_COMM, RECORD_SAMPLE,
};
use crate::plan::{self, BackendChoice};
use kprobe_perf_spec::ProbeSpec;

const KALLSYMS: &str = "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\nffffffff81234750 T ksys_close\n";

fn plans() -> Vec<crate::plan::ProbePlan> {
    let syms = KernelSymbols::parse(KALLSYMS).unwrap();
    [
        "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
        "r:do_sys_openat2 ret=$retval:s32",
    ]
    .iter()
    .map(|s| {
        plan::resolve(
            ProbeSpec::parse(s, Arch::X86_64).unwrap(),
            &syms,
            Arch::X86_64,
            BackendChoice::Auto,
        )
        .unwrap()
    })
    .collect()
}

/// A file with a kernel MMAP, a COMM, samples of both probes over two
/// rounds (the second round holding an event older than the first's).
fn file() -> (Vec<u8>, Vec<String>) {
    let bytes = file_of(&plans());
    let lines = vec![
        "cat 43 1 100 p_do_sys_openat2_0 -100 0x3".to_string(),
        "cat 43 0 200 r_do_sys_openat2_0 -2".to_string(),
        "cat 43 1 300 p_do_sys_openat2_0 -100 0x3".to_string(),
    ];
    (bytes, lines)
}

/// The file of [`file`], recorded with `plans`.
fn file_of(plans: &[crate::plan::ProbePlan]) -> Vec<u8> {
    file_hiding(plans, 0)
}

/// The file of [`file`], recorded with `plans`, the last `hidden` of
/// them hidden from perf.
fn file_hiding(plans: &[crate::plan::ProbePlan], hidden: usize) -> Vec<u8> {
    file_written(plans, hidden, false)
}

/// The file of [`file_hiding`]; with `as_bytes`, its samples are given
/// as a ring's bytes, one piece per round split in two parts, as
/// [`Writer::ring_bytes`] takes them.
fn file_written(plans: &[crate::plan::ProbePlan], hidden: usize, as_bytes: bool) -> Vec<u8> {
    file_made(plans, hidden, as_bytes, How::Plain)
}

/// How [`file_made`] writes its file.
#[derive(PartialEq)]
enum How {
    /// [`Writer::new`], finished.
    Plain,
    /// [`Writer::new_readable`], finished.
    Readable,
    /// [`Writer::new_readable`], never finished.
    Unfinished,
}

/// The file of [`file_written`], written `how`.
fn file_made(plans: &[crate::plan::ProbePlan], hidden: usize, as_bytes: bool, how: How) -> Vec<u8> {
    let attrs: Vec<Vec<u8>> = plans.iter().map(sample_attr_bytes).collect();
    let ids = vec![vec![100, 101], vec![200, 201]];
    let syms = KernelSymbols::parse(KALLSYMS).unwrap();
    let meta = Metadata {
        arch: Arch::X86_64,
        probes: plans
            .iter()
            .map(|p| StoredProbe::from_plan(p, &[]))
            .collect(),
        attrs: attrs.clone(),
        ids: ids.clone(),
        hidden,
        symbols: symbol_subset(&syms, [0xffffffff81234570, 0xffffffff81234661]),
        hostname: "host".into(),
        osrelease: "6.1.0".into(),
        nr_cpus: (2, 2),
        cmdline: vec!["kprobe-perf".into(), "record".into()],
        notes: vec![("summary".into(), "a\nb".into())],
        tracing_data: None,
        build_ids: Vec::new(),
    };
    let mut w = match how {
        How::Plain => Writer::new(Cursor::new(Vec::new())).unwrap(),
        _ => Writer::new_readable(Cursor::new(Vec::new()), &meta).unwrap(),
    };
    if hidden > 0 {
        let hide = ids[ids.len() - hidden..].concat();
        w.hide(hide, tempfile::tempfile().unwrap());
    }
    w.kernel_mmap(0xffffffff81000000).unwrap();
    let body = comm_record_body(42, 43, "cat", 90, 1, 100);
    w.record(RingRecord::new(RECORD_COMM, 0, (&body, &[])))
        .unwrap();
    let mut ring = Vec::new();
    let mut raw = vec![0u8; 20];
    raw[8..16].copy_from_slice(&0xffffffff81234570u64.to_ne_bytes());
    let mut rraw = vec![0u8; 28];
    rraw[8..16].copy_from_slice(&0xffffffff81234570u64.to_ne_bytes());
    for (time, probe, cpu) in [(300u64, 0usize, 1u32), (200, 1, 0), (100, 0, 1)] {
        let (id, raw, regs): (u64, &[u8], Vec<u64>) = if probe == 0 {
            (100 + u64::from(cpu), &raw, vec![3, 0xffff_ff9c])
        } else {
            (200 + u64::from(cpu), &rraw, vec![u64::MAX - 1])
        };
        let f = SampleFields {
            id,
            ip: 0xffffffff81234661,
            pid: 42,
            tid: 43,
            time,
            cpu,
            raw,
            regs: &regs,
        };
        let body = sample_record_body(&f, plans[probe].regs_mask);
        if as_bytes {
            super::writer::write_record(&mut ring, RECORD_SAMPLE, 1, (&body, &[])).unwrap();
        } else {
            w.record(RingRecord::new(RECORD_SAMPLE, 1, (&body, &[])))
                .unwrap();
        }
        if time == 200 {
            if as_bytes {
                // A round of two samples, wrapping inside the second.
                let split = ring.len() - 12;
                w.ring_bytes((&ring[..split], &ring[split..])).unwrap();
                ring.clear();
            }
            w.round_end().unwrap();
        }
    }
    if as_bytes {
        w.ring_bytes((&ring, &[])).unwrap();
    }
    w.round_end().unwrap();
    match how {
        How::Unfinished => w.round_end().map(|()| w.into_inner()).unwrap().into_inner(),
        _ => w.finish(&meta).unwrap().into_inner(),
    }
}

/// A ring's records written as its bytes make the file that writing
/// them one by one makes, byte for byte.
#[test]
fn a_rings_bytes_make_the_file_its_records_make() {
    let by_record = file_written(&plans(), 0, false);
    let by_bytes = file_written(&plans(), 0, true);
    assert_eq!(by_record.len(), by_bytes.len());
    assert!(by_record == by_bytes, "the two files differ");
    assert_eq!(replay_lines(&by_bytes).unwrap(), file().1);
}

/// A file [`Writer::new_readable`] started reads, never finished, up to
/// its last whole record, and says so and where; perf's data size in its
/// header covers every record written at the last round's end. Finished,
/// it reads as [`Writer::new`]'s.
#[test]
fn a_file_never_finished_reads_to_its_last_whole_record() {
    let finished = file_made(&plans(), 0, false, How::Readable);
    assert_eq!(replay_lines(&finished).unwrap(), file().1);
    let r = Reader::new(Cursor::new(&finished[..])).unwrap();
    assert_eq!(r.unfinished(), None);

    let bytes = file_made(&plans(), 0, false, How::Unfinished);
    assert_eq!(replay_lines(&bytes).unwrap(), file().1);
    let (data_at, data_size) = (u64_le(&bytes, 40), u64_le(&bytes, 48));
    assert_eq!(data_at + data_size, bytes.len() as u64);
    let whole = |b: &[u8]| {
        let mut r = Replay::new(Reader::new(Cursor::new(b)).unwrap()).unwrap();
        let n = r.run(|_, _, _, _| {}).unwrap();
        let u = r.unfinished().unwrap();
        (n, u.whole_to, u.len)
    };
    let len = bytes.len() as u64;
    assert_eq!(whole(&bytes), (3, len, len));

    // Cut inside the last sample: the two before it.
    let cut = &bytes[..bytes.len() - 5];
    assert_eq!(replay_lines(cut).unwrap(), file().1[1..]);
    let last = sample_len();
    assert_eq!(whole(cut), (2, len - last, len - 5));

    // Zeros after the records (a power loss's unwritten blocks).
    let mut zeroed = bytes.clone();
    zeroed.resize(bytes.len() + 4096, 0);
    assert_eq!(whole(&zeroed), (3, len, len + 4096));
}

fn u64_le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The size of the last sample record of [`file_made`]'s files.
fn sample_len() -> u64 {
    let bytes = file_made(&plans(), 0, false, How::Readable);
    let mut r = Reader::new(Cursor::new(&bytes[..])).unwrap();
    let mut last = 0;
    while let Some(rec) = r.next_record().unwrap() {
        if rec.kind == RECORD_SAMPLE {
            last = rec.body.len() as u64 + 8;
        }
    }
    last
}

/// A filter the recording ran in user space is stored with its probe
/// (the file holds every sample) and run again by a replay; one the
/// kernel ran is not (the file holds only what passed).
#[test]
fn a_user_space_filter_is_stored_and_run_again() {
    let mut plans = plans();
    plans[0] = plans[0].clone().with_filter("flags == 0x4").unwrap();
    plans[1] = plans[1].clone().with_filter("comm == \"cat\"").unwrap();
    assert!(plans[1].filter.as_ref().unwrap().in_kernel());
    let bytes = file_of(&plans);
    assert_eq!(
        replay_lines(&bytes).unwrap(),
        ["cat 43 0 200 r_do_sys_openat2_0 -2"]
    );
    let r = Reader::new(Cursor::new(&bytes[..])).unwrap();
    let meta = r.metadata().unwrap();
    let filters: Vec<Option<&str>> = meta.probes.iter().map(|p| p.filter.as_deref()).collect();
    assert_eq!(filters, [Some("flags == 0x4"), None]);
}

fn replay_lines(bytes: &[u8]) -> Result<Vec<String>, PerfDataError> {
    let mut r = Replay::new(Reader::new(Cursor::new(bytes))?)?;
    let mut lines = Vec::new();
    r.run(|e, plans, _, _| {
        let args: Vec<String> = e.args.iter().map(|a| a.to_string()).collect();
        lines.push(format!(
            "{} {} {} {} {} {}",
            e.comm,
            e.tid,
            e.cpu,
            e.time_ns,
            plans[e.probe].event,
            args.join(" ")
        ));
    })?;
    Ok(lines)
}

#[test]
fn round_trip() {
    let (bytes, want) = file();
    assert_eq!(replay_lines(&bytes).unwrap(), want);
    let r = Reader::new(Cursor::new(&bytes[..])).unwrap();
    let meta = r.metadata().unwrap();
    assert_eq!(meta.hostname, "host");
    assert_eq!(meta.nr_cpus, (2, 2));
    assert_eq!(meta.cmdline, ["kprobe-perf", "record"]);
    assert_eq!(meta.note("summary"), Some("a\nb"));
    let syms = KernelSymbols::parse(&meta.symbols).unwrap();
    let l = syms.symbolize(0xffffffff81234661).unwrap();
    assert_eq!(
        (l.symbol.name.as_str(), l.offset, l.size),
        ("do_sys_open", 1, 0xf0)
    );
    assert_eq!(r.attrs()[1].ids, [200, 201]);
}

/// A hidden probe's attr and samples are not where perf reads (the
/// header's attrs, the event descriptions, the data section), and a
/// replay still decodes them in their place in time.
#[test]
fn a_hidden_probe_is_out_of_perfs_sight_and_replayed_in_order() {
    let plans = plans();
    let (open, _) = file();
    let bytes = file_hiding(&plans, 1);
    assert_eq!(replay_lines(&bytes).unwrap(), replay_lines(&open).unwrap());
    let at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
    // One attr in perf's attr section: attr size, then the section size.
    assert_eq!(at(32), at(16));
    let mut r = Reader::new(Cursor::new(&bytes[..])).unwrap();
    assert_eq!(r.attrs().len(), 2);
    assert_eq!(r.hidden_attrs(), 1);
    assert_eq!(r.attrs()[1].ids, [200, 201]);
    assert_eq!(r.metadata().unwrap().hidden, 1);
    let (_, desc) = r.feature(FEAT_EVENT_DESC).unwrap();
    assert_eq!(u32::from_le_bytes(desc[..4].try_into().unwrap()), 1);
    let mut ids = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if rec.kind == RECORD_SAMPLE {
            ids.push(u64::from_ne_bytes(rec.body[..8].try_into().unwrap()));
        }
    }
    assert_eq!(ids, [101, 101]);
    let mut hidden = Vec::new();
    while let Some(rec) = r.next_hidden_record().unwrap() {
        hidden.push((rec.kind, rec.body.len()));
    }
    // The return sample, then the mark of the round it belongs to (0).
    assert_eq!(hidden.len(), 2);
    assert_eq!(hidden[1], (RECORD_FINISHED_ROUND, 8));
    // An independent reader sees what perf sees: one event, its samples.
    let linux_perf_data::PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = linux_perf_data::PerfFileReader::parse_file(Cursor::new(&bytes[..])).unwrap();
    let names: Vec<Option<&str>> = perf_file
        .event_attributes()
        .iter()
        .map(|a| a.name())
        .collect();
    assert_eq!(names, [Some("p_do_sys_openat2_0")]);
    let mut samples = 0;
    while let Some(rec) = record_iter.next_record(&mut perf_file).unwrap() {
        if let linux_perf_data::PerfFileRecord::EventRecord { attr_index, record } = rec {
            if record.record_type.0 == RECORD_SAMPLE {
                assert_eq!(attr_index, 0);
                samples += 1;
            }
        }
    }
    assert_eq!(samples, 2);
    // A file cut anywhere is still an error, never a panic.
    for cut in 0..bytes.len() {
        assert!(replay_lines(&bytes[..cut]).is_err(), "{cut}");
    }
}

#[test]
fn the_record_decoder_names_the_sample_it_cannot_decode() {
    let plans = plans();
    let attrs: Vec<Vec<u8>> = plans.iter().map(sample_attr_bytes).collect();
    let ids = HashMap::from([(7u64, 0usize)]);
    let d = RecordDecoder::new(
        plans
            .into_iter()
            .zip(attrs)
            .map(|(plan, attr)| OpenedProbe {
                plan,
                attr,
                field_offsets: Vec::new(),
            })
            .collect(),
        ids,
        ThreadNames::RecordsOnly,
    )
    .unwrap();
    let f = SampleFields {
        id: 7,
        raw: &[0u8; 20],
        regs: &[1, 2],
        ..Default::default()
    };
    let body = sample_record_body(&f, d.plans()[0].regs_mask);
    let comm: Arc<str> = Arc::from("x");
    assert!(d.decode_sample_bytes(0, &body, &comm).is_ok());
    for cut in 0..body.len() {
        assert!(
            d.decode_sample_bytes(0, &body[..cut], &comm).is_err(),
            "{cut}"
        );
    }
}

#[test]
fn truncated_and_corrupted_files_are_errors_not_panics() {
    let (bytes, _) = file();
    for cut in 0..bytes.len() {
        let e = replay_lines(&bytes[..cut]).expect_err("a truncated file");
        assert!(e.to_string().contains("byte"), "{e}");
    }
    // A record whose size runs past the data section.
    let mut bad = bytes.clone();
    let first = HEADER_SIZE as usize;
    bad[first + 6..first + 8].copy_from_slice(&0xfff0u16.to_ne_bytes());
    let e = replay_lines(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("record #0 (type 1) at byte 104: size 65520 runs past"),
        "{e}"
    );
    let mut x = 0x1234_5678u64;
    for i in 0..20_000 {
        let mut b = bytes.clone();
        for _ in 0..1 + i % 4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) % b.len();
            b[at] = (x >> 32) as u8;
        }
        let _ = replay_lines(&b);
    }
}

#[test]
fn sections_sharing_bytes_cannot_multiply_the_memory_taken() {
    let (bytes, _) = file();
    // Every feature section pointed at the whole file: each lies inside
    // it, but together they would take (features x file size) bytes.
    let mut bad = bytes.clone();
    let at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let table = (at(&bytes, 40) + at(&bytes, 48)) as usize;
    let features: u32 = (0..4).map(|w| at(&bytes, 72 + w * 8).count_ones()).sum();
    assert!(features >= 2, "{features}");
    for i in 0..features as usize {
        let entry = table + i * 16;
        bad[entry..entry + 8].copy_from_slice(&0u64.to_le_bytes());
        bad[entry + 8..entry + 16].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    }
    let e = Reader::new(Cursor::new(&bad[..]))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("overlaps others: the sections hold more bytes than the file"),
        "{e}"
    );
    assert!(Reader::new(Cursor::new(&bytes[..])).is_ok());
}

/// The bytes of `bytes` as a file, read back mapped.
fn mapped(bytes: &[u8]) -> Result<Reader<std::fs::File>, PerfDataError> {
    use std::io::{Seek, Write};
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(bytes).unwrap();
    f.rewind().unwrap();
    Reader::mapped(f)
}

/// Every record left (of the hidden probes' region with `hidden`): its
/// offset, type and body.
fn all_records<R: std::io::Read + std::io::Seek>(
    r: &mut Reader<R>,
    hidden: bool,
) -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let rec = if hidden {
            r.next_hidden_record()
        } else {
            r.next_record()
        };
        match rec.unwrap() {
            Some(rec) => out.push((rec.offset, rec.kind, rec.body.to_vec())),
            None => return out,
        }
    }
}

/// A mapped file gives the records, the replay (hidden probes too) and
/// the errors a read one gives.
#[test]
fn a_mapped_file_reads_as_a_read_one() {
    let (bytes, want) = file();
    let mut r = Replay::new(mapped(&bytes).unwrap()).unwrap();
    let mut lines = Vec::new();
    r.run(|e, plans, _, _| lines.push(format!("{} {}", e.time_ns, plans[e.probe].event)))
        .unwrap();
    let want: Vec<String> = want
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            format!("{} {}", w[3], w[4])
        })
        .collect();
    assert_eq!(lines, want);
    let hiding = file_hiding(&plans(), 1);
    let mut read = Reader::new(Cursor::new(&hiding[..])).unwrap();
    let mut map = mapped(&hiding).unwrap();
    for hidden in [false, true] {
        let a = all_records(&mut read, hidden);
        assert!(!a.is_empty());
        assert_eq!(a, all_records(&mut map, hidden));
    }
    // A record whose size runs past the data section.
    let mut bad = bytes.clone();
    let data = u64::from_le_bytes(bad[40..48].try_into().unwrap()) as usize;
    bad[data + 6..data + 8].copy_from_slice(&u16::MAX.to_ne_bytes());
    let err = |r: Result<Option<FileRecord<'_>>, PerfDataError>| r.unwrap_err().to_string();
    let a = err(Reader::new(Cursor::new(&bad[..])).unwrap().next_record());
    let b = err(mapped(&bad).unwrap().next_record());
    assert_eq!(a, b);
    assert!(a.contains("runs past the end of the data section"), "{a}");
}

/// A record's bytes as a ring holds them: header, then body.
fn ring_record(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut b = kind.to_ne_bytes().to_vec();
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&u16::try_from(8 + body.len()).unwrap().to_ne_bytes());
    b.extend_from_slice(body);
    b
}

#[test]
fn the_ring_bytes_taken_are_read_back_record_by_record() {
    let mut w = Writer::new(Cursor::new(Vec::new())).unwrap();
    let (a, b, c, d) = (
        ring_record(9, &[1; 16]),
        ring_record(9, &[2; 24]),
        ring_record(3, &[3; 8]),
        ring_record(9, &[6; 8]),
    );
    // Two rings' bytes (the second wrapped), a round's mark (written
    // with the next bytes), bytes a drain counted (not read back), a
    // third ring's.
    w.taken_bytes((&a, &[])).unwrap();
    w.taken_bytes((&b[..12], &b[12..])).unwrap();
    w.round_end().unwrap();
    w.ring_bytes((&d, &[])).unwrap();
    w.taken_bytes((&c, &[])).unwrap();
    // A ring whose second header has a size under 8: what follows it in
    // its range (up to the next bytes a drain counted or record written)
    // cannot be found.
    let mut bad = ring_record(9, &[4; 8]);
    bad.extend_from_slice(&ring_record(9, &[5; 8])[..6]);
    bad.extend_from_slice(&[4, 0, 9, 9, 9, 9, 9, 9, 9, 9]);
    w.taken_bytes((&bad, &[])).unwrap();
    w.taken_bytes((&d, &[])).unwrap();
    // A record of the writer's own starts a new range, which is read.
    w.record(RingRecord::new(3, 0, (&[7; 8], &[]))).unwrap();
    w.taken_bytes((&d, &[])).unwrap();
    let mut got = Vec::new();
    let corrupt = w
        .taken_records(|r| got.push((r.kind, [r.body.0, r.body.1].concat())))
        .unwrap();
    assert_eq!(corrupt, 1);
    assert_eq!(
        got,
        [
            (9, vec![1; 16]),
            (9, vec![2; 24]),
            (3, vec![3; 8]),
            (9, vec![4; 8]),
            (9, vec![6; 8])
        ]
    );
    // Read back once.
    assert_eq!(w.taken_records(|_| panic!("read twice")).unwrap(), 0);
}

#[test]
fn the_ranges_taken_stay_one_however_many_drains_there_are() {
    let mut w = Writer::new(Cursor::new(Vec::new())).unwrap();
    let (a, b) = (ring_record(9, &[1; 16]), ring_record(9, &[2; 24]));
    for _ in 0..10_000 {
        w.taken_bytes((&a, &[])).unwrap();
        w.taken_bytes((&b, &[])).unwrap();
        w.round_end().unwrap();
    }
    assert_eq!(w.taken_ranges(), 1);
    let mut n = 0;
    // The round marks between the drains' bytes are passed over.
    assert_eq!(
        w.taken_records(|r| n += usize::from(r.kind == 9)).unwrap(),
        0
    );
    assert_eq!(n, 20_000);
}
