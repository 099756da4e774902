//! Decoding and ordering made-up records, round by round.

use std::collections::{BTreeMap, HashMap};

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

use super::*;
use crate::decode::stats::Throttling;
use crate::decode::Value;
use crate::plan::{self, BackendChoice};
use kprobe_perf_spec::ProbeSpec;

const FUNC: u64 = 0xffff_ffff_8123_45a0;
const ID: u64 = 40;

fn decoder() -> (RecordDecoder, ProbePlan) {
    decoder_reading_proc(ThreadNames::RecordsOnly)
}

/// The same, reading /proc for threads it has no name for with
/// [`ThreadNames::ReadProc`].
fn decoder_reading_proc(names: ThreadNames) -> (RecordDecoder, ProbePlan) {
    decoder_of(
        "ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\nffffffff81234690 T do_sys_open\n",
        "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
        names,
    )
}

/// A decoder of the one probe `spec` planned against `symbols` (kallsyms
/// text), its samples of event id [`ID`].
fn decoder_of(symbols: &str, spec: &str, names: ThreadNames) -> (RecordDecoder, ProbePlan) {
    let syms = KernelSymbols::parse(symbols).unwrap();
    let plan = plan::resolve(
        ProbeSpec::parse(spec, Arch::X86_64).unwrap(),
        &syms,
        Arch::X86_64,
        BackendChoice::Pmu,
    )
    .unwrap();
    (decoder_of_plan(&plan, names), plan)
}

/// A decoder of `plan`, its samples of event id [`ID`].
fn decoder_of_plan(plan: &ProbePlan, names: ThreadNames) -> RecordDecoder {
    RecordDecoder::new(
        vec![OpenedProbe::with_session_layout(plan.clone())],
        HashMap::from([(ID, 0)]),
        names,
    )
    .unwrap()
}

/// A sample of thread `tid` on `cpu` at `time` with `flags` in %dx.
fn sample(plan: &ProbePlan, tid: i32, cpu: u32, time: u64, flags: u64) -> Vec<u8> {
    let mut raw = [0u8; 20];
    raw[8..16].copy_from_slice(&FUNC.to_ne_bytes());
    // In perf_regs order: %dx (index 2) before %di (index 5).
    let f = SampleFields {
        id: ID,
        ip: FUNC + 1,
        pid: tid,
        tid,
        time,
        cpu,
        raw: &raw,
        regs: &[flags, 0xffff_ff9c],
    };
    sample_record_body(&f, plan.regs_mask)
}

/// (time, tid, comm, flags) of each event handed over.
fn take(d: &mut RecordDecoder, handover: Handover) -> Vec<(u64, i32, String, u64)> {
    let mut got = Vec::new();
    d.round(handover, |e, plans| {
        assert_eq!(plans.len(), 1);
        assert_eq!(e.probe_addr, FUNC);
        assert_eq!(e.ret_addr, None);
        assert_eq!(e.args.len(), 2);
        assert_eq!(e.args[0].as_i64(), Some(-100));
        let Value::Int { raw: flags, .. } = e.args[1] else {
            panic!("flags is not an integer: {:?}", e.args[1]);
        };
        got.push((e.time_ns, e.tid, e.comm.to_string(), flags));
    });
    got
}

#[test]
fn events_come_in_time_order_one_round_late() {
    let (mut d, plan) = decoder();
    // Round 1, as two CPUs' rings are read one after the other.
    for (cpu, time, flags) in [(0, 30, 0x30), (0, 35, 0x35), (1, 10, 0x10), (1, 20, 0x20)] {
        d.record(RingRecord::new(
            RECORD_SAMPLE,
            0,
            (&sample(&plan, 7, cpu, time, flags), &[]),
        ))
        .unwrap();
    }
    // Nothing is known to be complete yet: a CPU may still be writing.
    assert!(take(&mut d, Handover::Ordered).is_empty());
    assert_eq!(d.waiting(), 4);
    for (cpu, time, flags) in [(0, 50, 0x50), (1, 25, 0x25)] {
        d.record(RingRecord::new(
            RECORD_SAMPLE,
            0,
            (&sample(&plan, 7, cpu, time, flags), &[]),
        ))
        .unwrap();
    }
    // Up to round 1's newest time (35), in order, with their own values.
    let times: Vec<(u64, u64)> = take(&mut d, Handover::Ordered)
        .into_iter()
        .map(|(t, _, _, f)| (t, f))
        .collect();
    assert_eq!(
        times,
        [(10, 0x10), (20, 0x20), (25, 0x25), (30, 0x30), (35, 0x35)]
    );
    assert_eq!(d.waiting(), 1);
    // The event left over keeps its arguments across the round.
    d.record(RingRecord::new(
        RECORD_SAMPLE,
        0,
        (&sample(&plan, 7, 1, 60, 0x60), &[]),
    ))
    .unwrap();
    assert_eq!(
        take(&mut d, Handover::Ordered),
        [(50, 7, "<...>".to_string(), 0x50)]
    );
    assert_eq!(
        take(&mut d, Handover::All),
        [(60, 7, "<...>".to_string(), 0x60)]
    );
    assert_eq!(d.waiting(), 0);
    assert_eq!(d.stats().hits, [7]);
}

/// Over many rounds, with events left waiting at each and the
/// handed-over ones dropped only every few rounds, every event comes out
/// once, in time order, with its own arguments.
#[test]
fn many_rounds_hand_over_every_event_once_in_order() {
    let (mut d, plan) = decoder();
    let (rounds, per_round) = (40u64, 3000u64);
    let mut got = Vec::new();
    for r in 0..rounds {
        // Two CPUs' rings read one after the other: the second's events
        // are older than the first's newest.
        for cpu in 0..2u32 {
            for i in 0..per_round / 2 {
                let time = 1 + r * per_round + 2 * i + u64::from(cpu);
                d.record(RingRecord::new(
                    RECORD_SAMPLE,
                    0,
                    (&sample(&plan, 7, cpu, time, time), &[]),
                ))
                .unwrap();
            }
        }
        got.extend(take(&mut d, Handover::Ordered));
        assert!(d.waiting() <= 2 * per_round as usize);
    }
    got.extend(take(&mut d, Handover::All));
    let n = rounds * per_round;
    assert_eq!(got.len() as u64, n);
    for (k, (time, _, _, flags)) in got.iter().enumerate() {
        assert_eq!((*time, *flags), (k as u64 + 1, k as u64 + 1));
    }
    assert_eq!(d.waiting(), 0);
}

/// Hands the decoder records, in this order, as one round.
fn feed(d: &mut RecordDecoder, records: &[(u32, Vec<u8>)]) {
    for (kind, body) in records {
        d.record(RingRecord::new(*kind, 0, (body, &[]))).unwrap();
    }
}

/// A COMM record naming thread 9 `name` from `time` on, read from `cpu`.
fn comm9(name: &str, time: u64, cpu: u32) -> (u32, Vec<u8>) {
    (RECORD_COMM, comm_record_body(9, 9, name, time, cpu, ID))
}

/// A FORK record: thread `tid` of process `pid` made by `ptid` of `ppid`
/// at `time`, read from CPU 0.
fn fork(pid: i32, ppid: i32, tid: i32, ptid: i32, time: u64) -> (u32, Vec<u8>) {
    let mut b = Vec::new();
    for v in [pid, ppid, tid, ptid] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&time.to_ne_bytes());
    super::build::push_sample_id(&mut b, pid, tid, time, 0, ID);
    (perf_event_open_sys::bindings::PERF_RECORD_FORK, b)
}

/// A child is called what its parent was until its exec, whether the
/// exec's COMM record is read before or after the FORK record (rings are
/// read one after the other).
#[test]
fn a_child_has_its_parents_name_until_it_execs() {
    for exec_first in [false, true] {
        let (mut d, plan) = decoder();
        let s = |tid, time, flags| (RECORD_SAMPLE, sample(&plan, tid, 0, time, flags));
        let sh = (RECORD_COMM, comm_record_body(8, 8, "sh", 1, 0, ID));
        let cat = comm9("cat", 15, 1);
        let mut records = vec![sh, s(8, 2, 1)];
        if exec_first {
            records.extend([cat.clone(), fork(9, 8, 9, 8, 5)]);
        } else {
            records.extend([fork(9, 8, 9, 8, 5), cat.clone()]);
        }
        records.extend([s(9, 10, 2), s(9, 20, 3)]);
        feed(&mut d, &records);
        assert_eq!(
            take(&mut d, Handover::All),
            [
                (2, 8, "sh".to_string(), 1),
                (10, 9, "sh".to_string(), 2),
                (20, 9, "cat".to_string(), 3),
            ],
            "exec's COMM read first: {exec_first}"
        );
    }
}

#[test]
fn names_are_those_at_the_time_of_the_sample() {
    let (mut d, plan) = decoder();
    let s = |tid, time, flags| (RECORD_SAMPLE, sample(&plan, tid, 0, time, flags));
    feed(
        &mut d,
        &[
            comm9("sh", 5, 0),
            s(9, 10, 1),
            // exec: the same thread, a new name, in the same round.
            comm9("cat", 15, 0),
            s(9, 20, 2),
            s(8, 30, 3),
            // exec again, keeping the name: nothing changes.
            comm9("cat", 35, 0),
            s(9, 40, 4),
        ],
    );
    assert_eq!(
        take(&mut d, Handover::All),
        [
            (10, 9, "sh".to_string(), 1),
            (20, 9, "cat".to_string(), 2),
            (30, 8, "<...>".to_string(), 3),
            (40, 9, "cat".to_string(), 4),
        ]
    );
}

/// Rings are read one after the other: a thread that names itself on one
/// CPU, opens a file on another, then renames itself and opens another
/// file on the first, may have its samples read before or after the COMM
/// records that precede them in time. Each sample still gets the name its
/// thread had when it was taken.
#[test]
fn names_follow_time_across_cpus_in_any_reading_order() {
    for cpu1_first in [true, false] {
        let (mut d, plan) = decoder();
        let cpu0 = [
            comm9("before", 10, 0),
            comm9("after", 30, 0),
            (RECORD_SAMPLE, sample(&plan, 9, 0, 40, 4)),
        ];
        let cpu1 = [(RECORD_SAMPLE, sample(&plan, 9, 1, 20, 2))];
        let (first, second) = if cpu1_first {
            (&cpu1[..], &cpu0[..])
        } else {
            (&cpu0[..], &cpu1[..])
        };
        feed(&mut d, first);
        feed(&mut d, second);
        assert_eq!(
            take(&mut d, Handover::All),
            [
                (20, 9, "before".to_string(), 2),
                (40, 9, "after".to_string(), 4),
            ],
            "CPU 1 read first: {cpu1_first}"
        );
    }
}

/// COMM records of one thread read out of time order, across rounds: each
/// sample is named by the newest name given before it.
#[test]
fn names_read_out_of_order_are_put_in_time_order() {
    let (mut d, plan) = decoder();
    let s = |cpu, time, flags| (RECORD_SAMPLE, sample(&plan, 9, cpu, time, flags));
    feed(
        &mut d,
        &[
            comm9("third", 50, 0),
            s(0, 60, 6),
            comm9("second", 30, 1),
            s(1, 40, 4),
            comm9("first", 10, 1),
            s(1, 20, 2),
        ],
    );
    assert!(take(&mut d, Handover::Ordered).is_empty());
    feed(&mut d, &[s(1, 70, 7)]);
    assert_eq!(
        take(&mut d, Handover::Ordered),
        [
            (20, 9, "first".to_string(), 2),
            (40, 9, "second".to_string(), 4),
            (60, 9, "third".to_string(), 6),
        ]
    );
    assert_eq!(
        take(&mut d, Handover::All),
        [(70, 9, "third".to_string(), 7)]
    );
}

#[test]
fn an_undecodable_sample_leaves_nothing_waiting() {
    let (mut d, plan) = decoder();
    d.record(RingRecord::new(
        RECORD_SAMPLE,
        0,
        (&sample(&plan, 7, 0, 5, 5), &[]),
    ))
    .unwrap();
    let mut short = sample(&plan, 7, 0, 6, 6);
    // Registers cut off: the sample no longer has the attr's layout.
    short.truncate(short.len() - 16);
    assert!(d
        .record(RingRecord::new(RECORD_SAMPLE, 0, (&short, &[])))
        .is_err());
    // No registers (ABI 0): decoding starts, then fails on %dx.
    let mut no_regs = sample(&plan, 7, 0, 7, 7);
    let at = no_regs.len() - 24;
    no_regs[at..at + 8].copy_from_slice(&0u64.to_ne_bytes());
    no_regs.truncate(at + 8);
    let err = d
        .record(RingRecord::new(RECORD_SAMPLE, 0, (&no_regs, &[])))
        .unwrap_err();
    assert!(
        matches!(err, RecordError::Decode(DecodeError::MissingRegister(_))),
        "{err}"
    );
    assert_eq!(d.waiting(), 1);
    assert_eq!(d.stats().undecodable, 2);
    assert_eq!(
        take(&mut d, Handover::All),
        [(5, 7, "<...>".to_string(), 5)]
    );
}

/// `$comm` read by the engine is the name at the time of the sample too,
/// whichever ring was read first.
#[test]
fn comm_arguments_are_named_at_handover() {
    let (mut d, plan) = decoder_of(
        "ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\n",
        "p:do_sys_openat2 c=$comm flags=%dx:x32",
        ThreadNames::RecordsOnly,
    );
    let raw = [0u8; 20];
    let sample = |cpu: u32, time: u64| {
        let f = SampleFields {
            id: ID,
            ip: FUNC + 1,
            pid: 9,
            tid: 9,
            time,
            cpu,
            raw: &raw,
            regs: &[time],
        };
        sample_record_body(&f, plan.regs_mask)
    };
    let comm = |name: &str, time: u64| comm_record_body(9, 9, name, time, 0, ID);
    for (kind, body) in [
        (RECORD_SAMPLE, sample(1, 20)),
        (RECORD_COMM, comm("before", 10)),
        (RECORD_COMM, comm("after", 30)),
        (RECORD_SAMPLE, sample(0, 40)),
    ] {
        d.record(RingRecord::new(kind, 0, (&body, &[]))).unwrap();
    }
    let mut got = Vec::new();
    d.round(Handover::All, |e, _| {
        got.push((
            e.time_ns,
            e.comm.to_string(),
            e.args[0].as_str().map(str::to_string),
            e.args[1].as_i64(),
        ))
    });
    assert_eq!(
        got,
        [
            (
                20,
                "before".to_string(),
                Some("before".to_string()),
                Some(20)
            ),
            (40, "after".to_string(), Some("after".to_string()), Some(40)),
        ]
    );
}

/// A name is stored once, however many threads or execs give it: a long
/// session over many short-lived `ls` processes holds one `ls`.
#[test]
fn names_are_stored_once() {
    let (mut d, _) = decoder();
    for tid in 100..1100 {
        let body = comm_record_body(tid, tid, "ls", 1, 0, ID);
        d.record(RingRecord::new(RECORD_COMM, 0, (&body, &[])))
            .unwrap();
        let body = comm_record_body(tid, tid, "sh", 2, 0, ID);
        d.record(RingRecord::new(RECORD_COMM, 0, (&body, &[])))
            .unwrap();
    }
    let names: Vec<&str> = d.comms.names.iter().map(|n| &**n).collect();
    assert_eq!(names, ["<...>", "ls", "sh"]);
    assert_eq!(d.comms.at(100, 1), (1, false));
    assert_eq!(d.comms.at(1099, 2), (2, false));
}

/// A thread of this process, alive and named `name` until dropped: its
/// (pid, tid).
struct Named {
    ids: (i32, i32),
    stop: std::sync::mpsc::Sender<()>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Named {
    fn new(name: &str) -> Named {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                tx.send(crate::attach::sys::gettid()).unwrap();
                let _ = wait.recv();
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        Named {
            ids: (std::process::id() as i32, tid),
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A sample record of thread `(pid, tid)` on CPU 0 at `time` with
/// `flags` in %dx.
fn sample_of_thread(
    plan: &ProbePlan,
    (pid, tid): (i32, i32),
    time: u64,
    flags: u64,
) -> (u32, Vec<u8>) {
    let mut raw = [0u8; 20];
    raw[8..16].copy_from_slice(&FUNC.to_ne_bytes());
    let f = SampleFields {
        id: ID,
        ip: FUNC + 1,
        pid,
        tid,
        time,
        cpu: 0,
        raw: &raw,
        regs: &[flags, 0xffff_ff9c],
    };
    (RECORD_SAMPLE, sample_record_body(&f, plan.regs_mask))
}

/// A live session reads /proc for a thread it first meets in a sample;
/// that gives the name at the time of reading, possibly after a rename.
/// It names only samples no COMM record names, and is dated (and
/// reported as learned) at the first sample it names.
#[test]
fn names_from_proc_name_only_what_no_comm_record_names() {
    let thread = Named::new("kpp-now");
    let (pid, tid) = thread.ids;
    let (mut d, plan) = decoder_reading_proc(ThreadNames::ReadProc);
    let sample_of = |time: u64, flags: u64| sample_of_thread(&plan, (pid, tid), time, flags);
    let comm = |name: &str, time: u64| (RECORD_COMM, comm_record_body(pid, tid, name, time, 1, ID));
    // CPU 0's ring first: a sample at 20, then one at 50; /proc says
    // kpp-now. Then CPU 1's: the thread was kpp-old from 30 on, kpp-now
    // from 40 on.
    feed(
        &mut d,
        &[
            sample_of(20, 2),
            sample_of(50, 5),
            comm("kpp-old", 30),
            comm("kpp-now", 40),
        ],
    );
    let names = |d: &mut RecordDecoder, handover| {
        take(d, handover)
            .into_iter()
            .map(|(t, _, c, _)| (t, c))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&mut d, Handover::All),
        [(20, "kpp-now".to_string()), (50, "kpp-now".to_string())]
    );
    // The sample at 20 is before any COMM record: the /proc name, dated
    // just before it. (A COMM record at 10 would have named it instead.)
    let learned = d.take_learned();
    assert_eq!(
        learned,
        [LearnedComm {
            pid,
            tid,
            name: Arc::from("kpp-now"),
            time_ns: 19,
            cpu: 0,
            id: ID
        }]
    );

    // With an older COMM record, /proc's name (read after the rename)
    // names nothing and is not reported.
    let (mut d, _) = decoder_reading_proc(ThreadNames::ReadProc);
    feed(
        &mut d,
        &[
            sample_of(20, 2),
            comm("kpp-first", 10),
            comm("kpp-now", 30),
            sample_of(40, 4),
        ],
    );
    assert_eq!(
        names(&mut d, Handover::All),
        [(20, "kpp-first".to_string()), (40, "kpp-now".to_string())]
    );
    assert_eq!(d.take_learned(), []);

    // A replay of the first case, with the learned name as the COMM
    // record a perf.data file holds, names every sample the same way.
    let (mut replay, _) = decoder_reading_proc(ThreadNames::RecordsOnly);
    let l = &learned[0];
    feed(
        &mut replay,
        &[
            sample_of(20, 2),
            sample_of(50, 5),
            comm("kpp-old", 30),
            comm("kpp-now", 40),
            (
                RECORD_COMM,
                comm_record_body(l.pid, l.tid, &l.name, l.time_ns, l.cpu, l.id),
            ),
        ],
    );
    assert_eq!(
        names(&mut replay, Handover::All),
        [(20, "kpp-now".to_string()), (50, "kpp-now".to_string())]
    );
}

/// A decoder of a kretprobe on do_sys_openat2, on a kernel whose
/// kretprobe trampoline is at 0xffffffff81002000.
fn kretprobe_decoder() -> (RecordDecoder, ProbePlan) {
    decoder_of(
        "ffffffff81000000 T _text\nffffffff81000400 T __x64_sys_openat\nffffffff81002000 T kretprobe_trampoline\nffffffff812345a0 T do_sys_openat2\n",
        "r:do_sys_openat2 ret=$retval:s32",
        ThreadNames::RecordsOnly,
    )
}

/// A sample of the kretprobe of [`kretprobe_decoder`] at `time` on
/// thread `tid` of process 7: its sampled ip and the return address its
/// raw record holds (the return value -2).
fn kretprobe_sample(plan: &ProbePlan, (time, tid): (u64, i32), ip: u64, raw_ret: u64) -> Vec<u8> {
    let mut raw = [0u8; 28];
    raw[8..16].copy_from_slice(&FUNC.to_ne_bytes());
    raw[16..24].copy_from_slice(&raw_ret.to_ne_bytes());
    let f = SampleFields {
        id: ID,
        ip,
        pid: 7,
        tid,
        time,
        cpu: 0,
        raw: &raw,
        regs: &[0xffff_fffe],
    };
    sample_record_body(&f, plan.regs_mask)
}

/// The caller a kretprobe reports: the sampled ip (6.x, where the raw
/// record may hold the trampoline), or the raw record's return address
/// when the sampled ip is the trampoline (5.10).
#[test]
fn kretprobe_caller_comes_from_the_raw_record_when_the_ip_is_the_trampoline() {
    const TRAMPOLINE: u64 = 0xffff_ffff_8100_2000;
    const CALLER: u64 = 0xffff_ffff_8100_0456;
    let (mut d, plan) = kretprobe_decoder();
    assert_eq!(plan.return_trampoline, Some(TRAMPOLINE));
    // (sampled ip, raw return address) as 5.10 and 6.x write them.
    for (time, ip, raw_ret) in [
        (10, TRAMPOLINE, CALLER),
        (20, CALLER, TRAMPOLINE),
        (30, CALLER, CALLER),
    ] {
        let body = kretprobe_sample(&plan, (time, 7), ip, raw_ret);
        d.record(RingRecord::new(RECORD_SAMPLE, 0, (&body, &[])))
            .unwrap();
    }
    let mut got = Vec::new();
    d.round(Handover::All, |e, _| {
        got.push((e.ret_addr, e.args[0].as_i64()))
    });
    assert_eq!(got, [(Some(CALLER), Some(-2)); 3]);
}

/// A decoder for two probes with ids 7 (probe 0) and 8 (probe 1).
fn two_probes() -> RecordDecoder {
    let syms = kprobe_perf_symbols::KernelSymbols::parse(
        "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\n",
    )
    .unwrap();
    let plans: Vec<ProbePlan> = ["p:a do_sys_openat2", "p:b do_sys_open"]
        .iter()
        .map(|s| {
            crate::plan::resolve(
                kprobe_perf_spec::ProbeSpec::parse(s, kprobe_perf_arch::Arch::X86_64).unwrap(),
                &syms,
                kprobe_perf_arch::Arch::X86_64,
                crate::plan::BackendChoice::Auto,
            )
            .unwrap()
        })
        .collect();
    let ids = HashMap::from([(7u64, 0usize), (8, 1)]);
    RecordDecoder::new(
        plans
            .into_iter()
            .map(OpenedProbe::with_session_layout)
            .collect(),
        ids,
        ThreadNames::RecordsOnly,
    )
    .unwrap()
}

/// `fields` then the sample_id trailer (pid, tid, time, cpu, id).
fn with_sample_id(fields: &[u64], cpu: u32, id: u64) -> Vec<u8> {
    let mut b: Vec<u8> = fields.iter().flat_map(|v| v.to_ne_bytes()).collect();
    b.extend_from_slice(&1i32.to_ne_bytes());
    b.extend_from_slice(&1i32.to_ne_bytes());
    b.extend_from_slice(&100u64.to_ne_bytes());
    b.extend_from_slice(&cpu.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&id.to_ne_bytes());
    b
}

#[test]
fn throttle_and_lost_records_are_counted_per_cpu_and_probe() {
    const LOST: u32 = 2;
    const THROTTLE: u32 = 5;
    const UNTHROTTLE: u32 = 6;
    let mut d = two_probes();
    let mut feed = |kind, body: Vec<u8>| d.record(RingRecord::new(kind, 0, (&body, &[]))).unwrap();
    // THROTTLE/UNTHROTTLE: time, id, stream_id; LOST: id, count.
    feed(THROTTLE, with_sample_id(&[50, 7, 7], 1, 7));
    feed(UNTHROTTLE, with_sample_id(&[60, 7, 7], 1, 7));
    feed(THROTTLE, with_sample_id(&[70, 7, 7], 1, 7));
    feed(THROTTLE, with_sample_id(&[80, 8, 8], 0, 8));
    feed(LOST, with_sample_id(&[7, 5], 1, 7));
    feed(LOST, with_sample_id(&[8, 3], 0, 8));
    feed(LOST, with_sample_id(&[7, 2], 1, 7));
    assert_eq!(d.round(Handover::All, |_, _| {}), 0);
    let st = d.stats();
    assert_eq!(st.lost, 10);
    assert_eq!(
        st.lost_per_cpu,
        BTreeMap::from([(Some(0), 3), (Some(1), 7)])
    );
    assert_eq!(
        st.throttling.get(&(Some(1), 0)),
        Some(&Throttling {
            throttled: 2,
            unthrottled: 1
        })
    );
    assert_eq!(
        st.throttling_of(1),
        Throttling {
            throttled: 1,
            unthrottled: 0
        }
    );
    assert_eq!(st.throttling.len(), 2);
}

#[test]
fn a_break_keeps_the_rest_of_the_round_queued_with_its_arguments() {
    let (mut d, plan) = decoder();
    for (cpu, time, flags) in [(0, 30, 0x30), (1, 10, 0x10), (0, 40, 0x40), (1, 20, 0x20)] {
        d.record(RingRecord::new(
            RECORD_SAMPLE,
            0,
            (&sample(&plan, 7, cpu, time, flags), &[]),
        ))
        .unwrap();
    }
    let mut got = Vec::new();
    let n = d.try_round(Handover::All, |e, _| {
        let Value::Int { raw, .. } = e.args[1] else {
            panic!("flags is not an integer: {:?}", e.args[1]);
        };
        got.push((e.time_ns, raw));
        if got.len() == 2 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    assert_eq!(n, 2);
    assert_eq!(got, [(10, 0x10), (20, 0x20)]);
    assert_eq!(d.waiting(), 2);
    // A new event older than those left is put in its place.
    d.record(RingRecord::new(
        RECORD_SAMPLE,
        0,
        (&sample(&plan, 7, 1, 25, 0x25), &[]),
    ))
    .unwrap();
    let rest: Vec<(u64, u64)> = take(&mut d, Handover::All)
        .into_iter()
        .map(|(t, _, _, f)| (t, f))
        .collect();
    assert_eq!(rest, [(25, 0x25), (30, 0x30), (40, 0x40)]);
    assert_eq!(d.waiting(), 0);
    assert_eq!(d.stats().hits, [5]);
}

/// A user-space filter runs at handover, where the thread's name is
/// known: what it rejects is counted in `filtered` (and in `hits`, which
/// count decoded samples), never handed over.
#[test]
fn a_user_space_filter_drops_events_at_handover_and_counts_them() {
    let (_, plan) = decoder();
    let plan = plan.with_filter("flags == 0x2 || comm == \"cat\"").unwrap();
    // A PMU probe's record has no `flags`: the filter runs here.
    assert!(!plan.filter.as_ref().unwrap().in_kernel());
    let mut d = decoder_of_plan(&plan, ThreadNames::RecordsOnly);
    let s = |tid, time, flags| (RECORD_SAMPLE, sample(&plan, tid, 0, time, flags));
    feed(
        &mut d,
        &[
            comm9("sh", 5, 0),
            s(9, 10, 1),
            s(9, 12, 2),
            comm9("cat", 15, 0),
            s(9, 20, 3),
            s(8, 30, 2),
            s(8, 40, 4),
        ],
    );
    assert_eq!(
        take(&mut d, Handover::All),
        [
            (12, 9, "sh".to_string(), 2),
            (20, 9, "cat".to_string(), 3),
            (30, 8, "<...>".to_string(), 2),
        ]
    );
    assert_eq!(d.stats().hits, [5]);
    assert_eq!(d.stats().filtered, [2]);
}

/// Without a user-space filter nothing is counted as filtered.
#[test]
fn no_filter_counts_nothing_filtered() {
    let (d, _) = decoder();
    assert!(d.stats().filtered.is_empty());
}

/// An EXIT record's thread and time, whole or split by a ring wrap
/// anywhere; other records and short bodies give nothing.
#[test]
fn thread_exit_reads_an_exit_record_however_it_is_split() {
    let mut b = Vec::new();
    for v in [10u32, 1, 11, 1] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&12_345u64.to_ne_bytes());
    b.extend_from_slice(&[0u8; 32]); // the sample_id trailer
    for cut in 0..=b.len() {
        assert_eq!(
            super::thread_exit(RingRecord::new(
                super::RECORD_EXIT,
                0,
                (&b[..cut], &b[cut..])
            )),
            Some((11, 12_345)),
            "{cut}"
        );
    }
    assert_eq!(
        super::thread_exit(RingRecord::new(super::RECORD_COMM, 0, (&b, &[]))),
        None
    );
    assert_eq!(
        super::thread_exit(RingRecord::new(super::RECORD_EXIT, 0, (&b[..23], &[]))),
        None
    );
}

/// [`RecordDecoder::count`] keeps what [`RecordDecoder::record`] keeps
/// for a file: the same counts, the same names learned from /proc (dated
/// at the thread's earliest sample, and none where an older COMM record
/// read later names it), and the probe address; nothing waits for a
/// round.
#[test]
fn counting_keeps_the_counts_and_names_a_file_needs() {
    let thread = Named::new("kpc-now");
    let (pid, tid) = thread.ids;
    let sample_of = |plan: &ProbePlan, time: u64| sample_of_thread(plan, (pid, tid), time, 7);
    let comm = |name: &str, time: u64| (RECORD_COMM, comm_record_body(pid, tid, name, time, 1, ID));
    let count = |d: &mut RecordDecoder, records: &[(u32, Vec<u8>)]| {
        for (kind, body) in records {
            d.count(RingRecord::new(*kind, 0, (body, &[]))).unwrap();
        }
        let mut handed = 0;
        d.round(Handover::All, |_, _| handed += 1);
        assert_eq!(handed, 0, "counted samples are not handed over");
    };

    // Read out of time order (CPU 1's ring after CPU 0's): the name is
    // dated just before the earliest sample, as a decoding round dates it.
    let (mut d, plan) = decoder_reading_proc(ThreadNames::ReadProc);
    assert!(d.can_count_only());
    count(
        &mut d,
        &[
            sample_of(&plan, 50),
            sample_of(&plan, 20),
            sample_of(&plan, 60),
        ],
    );
    assert_eq!(d.stats().hits, [3]);
    assert_eq!(d.stats().undecodable, 0);
    assert_eq!(d.waiting(), 0);
    assert_eq!(
        d.take_learned(),
        [LearnedComm {
            pid,
            tid,
            name: Arc::from("kpc-now"),
            time_ns: 19,
            cpu: 0,
            id: ID
        }]
    );
    assert_eq!(
        d.counted_addresses(),
        &std::collections::HashSet::from([FUNC])
    );
    // Settled once: later rounds learn nothing more.
    count(&mut d, &[sample_of(&plan, 70)]);
    assert_eq!(d.take_learned(), []);
    assert_eq!(d.stats().hits, [4]);

    // An older COMM record read after the sample names it: /proc's name
    // (read after a rename) is not learned, as with decoding.
    let (mut d, plan) = decoder_reading_proc(ThreadNames::ReadProc);
    count(
        &mut d,
        &[
            sample_of(&plan, 20),
            comm("kpc-first", 10),
            comm("kpc-now", 30),
        ],
    );
    assert_eq!(d.take_learned(), []);
    assert_eq!(d.stats().hits, [1]);
}

/// A sample with a callchain and a user stack (`--call-graph dwarf`) is
/// counted as one without: the same hit, the probe address and the
/// kernel frames noted for the file's symbols (user frames are not
/// kernel addresses), nothing queued, and the registers and stack after
/// the raw record never read.
#[test]
fn counting_passes_over_callchains_and_user_stacks() {
    use perf_event_open_sys::bindings::{
        PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    };
    let (_, plan) = decoder();
    let mut attr = crate::attach::attr::sample_layout(&plan);
    attr.sample_type |=
        u64::from(PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER);
    attr.sample_regs_user = 0b111;
    attr.sample_stack_user = 64;
    let opened = || OpenedProbe {
        plan: plan.clone(),
        attr: crate::attach::sys::attr_bytes(&attr),
        field_offsets: Vec::new(),
    };
    let new = || {
        RecordDecoder::new(
            vec![opened()],
            HashMap::from([(ID, 0)]),
            ThreadNames::RecordsOnly,
        )
        .unwrap()
    };
    let (k1, k2, user_ip) = (
        0xffff_ffff_8100_1234u64,
        0xffff_ffff_8100_5678u64,
        0x5555_1234u64,
    );
    let sample = |time: u64| {
        let mut b = Vec::new();
        for w in [ID, FUNC + 1] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(&7i32.to_ne_bytes());
        b.extend_from_slice(&8i32.to_ne_bytes());
        b.extend_from_slice(&time.to_ne_bytes());
        b.extend_from_slice(&1u64.to_ne_bytes()); // cpu 1, res
        let chain = [
            crate::decode::frames::PERF_CONTEXT_KERNEL,
            FUNC + 1,
            k1,
            k2,
            (-512i64) as u64, // PERF_CONTEXT_USER
            user_ip,
        ];
        b.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
        for ip in chain {
            b.extend_from_slice(&ip.to_ne_bytes());
        }
        let mut raw = [0u8; 20];
        raw[8..16].copy_from_slice(&FUNC.to_ne_bytes());
        b.extend_from_slice(&20u32.to_ne_bytes());
        b.extend_from_slice(&raw);
        // REGS_USER: ABI 64, three registers; STACK_USER: 64 bytes, 48 used.
        for w in [2u64, 0x5555_0000, 0x7ffe_0000, 0x7ffe_0040, 64] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(&[0xa5; 64]);
        b.extend_from_slice(&48u64.to_ne_bytes());
        // REGS_INTR: ABI 64, the plan's registers (dx, di).
        for w in [2u64, 0x4, 0xffff_ff9c] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b
    };
    let records = [sample(10), sample(20)];
    let mut counted = new();
    let mut decoded = new();
    let mut frames = Vec::new();
    for body in &records {
        counted
            .count(RingRecord::new(RECORD_SAMPLE, 0, (body, &[])))
            .unwrap();
        decoded
            .record(RingRecord::new(RECORD_SAMPLE, 0, (body, &[])))
            .unwrap();
    }
    decoded.round(Handover::All, |e, _| frames.push(e.callchain.clone()));
    assert_eq!(counted.waiting(), 0);
    assert_eq!(counted.stats().hits, [2]);
    assert_eq!(decoded.stats().hits, [2]);
    assert_eq!(counted.stats().undecodable, 0);
    // What the decoding path sees: the same kernel frames.
    assert_eq!(frames.len(), 2);
    let kernel: Vec<u64> = frames[0]
        .iter()
        .filter(|f| !f.user)
        .map(|f| f.address)
        .collect();
    assert_eq!(kernel, [FUNC + 1, k1, k2]);
    assert_eq!(
        counted.counted_addresses(),
        &std::collections::HashSet::from([FUNC, FUNC + 1, k1, k2])
    );
}

/// Counting passes over a sample that repeats the last one counted in
/// full (same probe, thread, size, a later time, and for a return probe
/// the same sampled caller), and still notes every caller a kretprobe
/// reports: a new sampled ip, and the raw record's caller wherever the
/// sampled ip is the trampoline (which no repeat is measured against).
#[test]
fn counting_repeats_notes_every_caller_of_a_return_probe() {
    const TRAMPOLINE: u64 = 0xffff_ffff_8100_2000;
    let callers = [
        0xffff_ffff_8100_0456u64,
        0xffff_ffff_8100_0480,
        0xffff_ffff_8100_04a0,
        0xffff_ffff_8100_04c0,
    ];
    let (mut d, plan) = kretprobe_decoder();
    assert!(d.can_count_only());
    // (time, sampled ip, raw return address, thread)
    let samples = [
        (10, callers[0], TRAMPOLINE, 7),
        (20, callers[0], TRAMPOLINE, 7), // a repeat
        (30, callers[1], TRAMPOLINE, 7), // a new caller
        (40, callers[1], TRAMPOLINE, 8), // another thread
        (35, callers[1], TRAMPOLINE, 8), // earlier: counted in full
        (50, TRAMPOLINE, callers[2], 8), // 5.10: the raw record's caller
        (60, TRAMPOLINE, callers[3], 8), // not a repeat of it
        (70, TRAMPOLINE, callers[3], 8),
    ];
    for (time, ip, raw_ret, tid) in samples {
        let body = kretprobe_sample(&plan, (time, tid), ip, raw_ret);
        d.count(RingRecord::new(RECORD_SAMPLE, 0, (&body, &[])))
            .unwrap();
    }
    assert_eq!(d.stats().hits, [8]);
    assert_eq!(d.stats().undecodable, 0);
    let mut want: std::collections::HashSet<u64> = callers.into_iter().collect();
    want.insert(FUNC);
    assert_eq!(d.counted_addresses(), &want);
}
