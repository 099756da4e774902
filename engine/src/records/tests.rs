//! Decoding and ordering made-up records, round by round.

use std::collections::HashMap;

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

use super::*;
use crate::plan::{self, BackendChoice};
use crate::spec::ProbeSpec;
use crate::Value;

const FUNC: u64 = 0xffff_ffff_8123_45a0;
const ID: u64 = 40;

fn decoder() -> (RecordDecoder, ProbePlan) {
    let syms = KernelSymbols::parse(
        "ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\nffffffff81234690 T do_sys_open\n",
    )
    .unwrap();
    let plan = plan::resolve(
        ProbeSpec::parse("p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32", Arch::X86_64).unwrap(),
        &syms,
        Arch::X86_64,
        BackendChoice::Pmu,
    )
    .unwrap();
    let d = RecordDecoder::new(
        vec![plan.clone()],
        vec![Vec::new()],
        vec![sample_attr_bytes(&plan)],
        HashMap::from([(ID, 0)]),
        false,
    )
    .unwrap();
    (d, plan)
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
fn take(d: &mut RecordDecoder, all: bool) -> Vec<(u64, i32, String, u64)> {
    let mut got = Vec::new();
    d.round(all, |e, plans| {
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
        d.record(RECORD_SAMPLE, 0, (&sample(&plan, 7, cpu, time, flags), &[]))
            .unwrap();
    }
    // Nothing is known to be complete yet: a CPU may still be writing.
    assert!(take(&mut d, false).is_empty());
    assert_eq!(d.waiting(), 4);
    for (cpu, time, flags) in [(0, 50, 0x50), (1, 25, 0x25)] {
        d.record(RECORD_SAMPLE, 0, (&sample(&plan, 7, cpu, time, flags), &[]))
            .unwrap();
    }
    // Up to round 1's newest time (35), in order, with their own values.
    let times: Vec<(u64, u64)> = take(&mut d, false)
        .into_iter()
        .map(|(t, _, _, f)| (t, f))
        .collect();
    assert_eq!(
        times,
        [(10, 0x10), (20, 0x20), (25, 0x25), (30, 0x30), (35, 0x35)]
    );
    assert_eq!(d.waiting(), 1);
    // The event left over keeps its arguments across the round.
    d.record(RECORD_SAMPLE, 0, (&sample(&plan, 7, 1, 60, 0x60), &[]))
        .unwrap();
    assert_eq!(take(&mut d, false), [(50, 7, "<...>".to_string(), 0x50)]);
    assert_eq!(take(&mut d, true), [(60, 7, "<...>".to_string(), 0x60)]);
    assert_eq!(d.waiting(), 0);
    assert_eq!(d.stats().hits, [7]);
}

#[test]
fn names_are_those_at_the_time_of_the_record() {
    let (mut d, plan) = decoder();
    let comm = |name: &str| comm_record_body(9, 9, name, 0, 0, ID);
    d.record(RECORD_COMM, 0, (&comm("sh"), &[])).unwrap();
    d.record(RECORD_SAMPLE, 0, (&sample(&plan, 9, 0, 1, 1), &[]))
        .unwrap();
    // exec: the same thread, a new name, in the same round.
    d.record(RECORD_COMM, 0, (&comm("cat"), &[])).unwrap();
    d.record(RECORD_SAMPLE, 0, (&sample(&plan, 9, 0, 2, 2), &[]))
        .unwrap();
    d.record(RECORD_SAMPLE, 0, (&sample(&plan, 8, 0, 3, 3), &[]))
        .unwrap();
    assert_eq!(
        take(&mut d, true),
        [
            (1, 9, "sh".to_string(), 1),
            (2, 9, "cat".to_string(), 2),
            (3, 8, "<...>".to_string(), 3)
        ]
    );
}

#[test]
fn an_undecodable_sample_leaves_nothing_waiting() {
    let (mut d, plan) = decoder();
    d.record(RECORD_SAMPLE, 0, (&sample(&plan, 7, 0, 5, 5), &[]))
        .unwrap();
    let mut short = sample(&plan, 7, 0, 6, 6);
    // Registers cut off: the sample no longer has the attr's layout.
    short.truncate(short.len() - 16);
    assert!(d.record(RECORD_SAMPLE, 0, (&short, &[])).is_err());
    // No registers (ABI 0): decoding starts, then fails on %dx.
    let mut no_regs = sample(&plan, 7, 0, 7, 7);
    let at = no_regs.len() - 24;
    no_regs[at..at + 8].copy_from_slice(&0u64.to_ne_bytes());
    no_regs.truncate(at + 8);
    let err = d.record(RECORD_SAMPLE, 0, (&no_regs, &[])).unwrap_err();
    assert!(
        matches!(err, RecordError::Decode(DecodeError::MissingRegister(_))),
        "{err}"
    );
    assert_eq!(d.waiting(), 1);
    assert_eq!(d.stats().undecodable, 2);
    assert_eq!(take(&mut d, true), [(5, 7, "<...>".to_string(), 5)]);
}
