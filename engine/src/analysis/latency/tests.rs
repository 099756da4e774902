//! Unit tests of the parent module.

use super::*;
use crate::decode::pairing::SWEEP_MIN;
use kprobe_perf_spec::BaseType;

const ENTRY: usize = 0;
const RET: usize = 1;

fn ev(probe: usize, tid: i32, pid: i32, time_ns: u64, args: Vec<Value>) -> Event {
    Event {
        probe,
        cpu: (tid % 2) as u32,
        pid,
        tid,
        comm: Arc::from(format!("t{tid}")),
        time_ns,
        ip: 0,
        probe_addr: 0,
        ret_addr: (probe == RET).then_some(0),
        callchain: Vec::new(),
        args,
    }
}

fn u(v: u64) -> Value {
    Value::new(v, BaseType::Unsigned(64))
}

fn s(v: i64) -> Value {
    Value::new(v as u64, BaseType::Signed(64))
}

fn pairer(options: LatencyOptions) -> LatencyPairer {
    LatencyPairer::new(
        &[FunctionProbes::new(ENTRY, RET).with_return_value(0)],
        options,
    )
    .unwrap()
}

fn every_call() -> LatencyOptions {
    LatencyOptions {
        calls_from_ns: Some(0),
        ..LatencyOptions::default()
    }
}

/// Depth 64: level d (0 outermost) enters at 1000*d and returns at
/// 1_000_000 - 1000*d, so its duration is 1_000_000 - 2000*d.
#[test]
fn recursion_depth_64_gets_each_level() {
    let mut p = pairer(every_call());
    for d in 0..64u64 {
        assert_eq!(p.record(&ev(ENTRY, 7, 7, 1000 * d, vec![u(d)])), None);
    }
    let mut seen = Vec::new();
    for d in (0..64u64).rev() {
        let c = p
            .record(&ev(RET, 7, 7, 1_000_000 - 1000 * d, vec![s(-(d as i64))]))
            .unwrap();
        assert_eq!(c.duration_ns, 1_000_000 - 2000 * d);
        assert_eq!(c.entry_args, vec![u(d)]);
        assert_eq!(c.return_args, vec![s(-(d as i64))]);
        assert_eq!(
            (c.tid, c.pid, &*c.comm, c.entry_time_ns),
            (7, 7, "t7", 1000 * d)
        );
        seen.push(c.duration_ns);
    }
    assert_eq!(seen.len(), 64);
    let snap = p.take();
    let f = &snap.functions[0];
    assert_eq!(
        (
            f.paired,
            f.unpaired_returns,
            f.dropped_entries,
            f.unreturned
        ),
        (64, 0, 0, 0)
    );
    let Hist::Log2(h) = &f.total else {
        panic!("log2 expected")
    };
    // 1_000_000 - 2000*d for d in 0..64: 874_000..=1_000_000, all in
    // [2^19, 2^20).
    assert_eq!(h.count_in_bucket_of(1 << 19), 64);
    assert_eq!((h.min(), h.max()), (Some(874_000), Some(1_000_000)));
    assert_eq!(p.unreturned(), vec![0]);
}

#[test]
fn interleaved_threads_pair_by_thread() {
    let mut p = pairer(LatencyOptions {
        by: Some(Key::Tid),
        ..every_call()
    });
    // Thread 1 and 2 interleave, each nesting two calls.
    let evs = [
        ev(ENTRY, 1, 1, 100, vec![u(1)]),
        ev(ENTRY, 2, 2, 110, vec![u(2)]),
        ev(ENTRY, 1, 1, 120, vec![u(11)]),
        ev(ENTRY, 2, 2, 130, vec![u(22)]),
        ev(RET, 1, 1, 150, vec![s(0)]), // t1 inner: 30
        ev(RET, 2, 2, 190, vec![s(0)]), // t2 inner: 60
        ev(RET, 2, 2, 200, vec![s(0)]), // t2 outer: 90
        ev(RET, 1, 1, 400, vec![s(0)]), // t1 outer: 300
    ];
    let got: Vec<(i32, u64, Vec<Value>)> = evs
        .iter()
        .filter_map(|e| p.record(e))
        .map(|c| (c.tid, c.duration_ns, c.entry_args))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, 30, vec![u(11)]),
            (2, 60, vec![u(22)]),
            (2, 90, vec![u(2)]),
            (1, 300, vec![u(1)]),
        ]
    );
    let snap = p.snapshot();
    let keys: Vec<(KeyPart, u64)> = snap.functions[0]
        .by_key
        .iter()
        .map(|k| (k.key.clone(), k.hist.count()))
        .collect();
    assert_eq!(keys, vec![(KeyPart::Tid(1), 2), (KeyPart::Tid(2), 2)]);
}

#[test]
fn unpaired_returns_and_unreturned_entries() {
    let mut p = pairer(every_call());
    // A return before any entry; a return of another thread; a return
    // timed before the pending entry.
    assert_eq!(p.record(&ev(RET, 1, 1, 50, vec![])), None);
    p.record(&ev(ENTRY, 1, 1, 100, vec![]));
    assert_eq!(p.record(&ev(RET, 2, 2, 150, vec![])), None);
    assert_eq!(p.record(&ev(RET, 1, 1, 90, vec![])), None);
    // Two entries that never return.
    p.record(&ev(ENTRY, 3, 3, 200, vec![]));
    let c = p.record(&ev(RET, 1, 1, 300, vec![])).unwrap();
    assert_eq!(c.duration_ns, 200);
    p.record(&ev(ENTRY, 1, 1, 400, vec![]));
    let f = &p.snapshot().functions[0];
    assert_eq!(
        (
            f.paired,
            f.unpaired_returns,
            f.dropped_entries,
            f.unreturned
        ),
        (1, 3, 0, 2)
    );
    assert_eq!(f.total.count(), 1);
    // An interval keeps the pending entries, resets the counters.
    let _ = p.take();
    let c = p.record(&ev(RET, 3, 3, 1200, vec![])).unwrap();
    assert_eq!(c.duration_ns, 1000);
    let f = &p.take().functions[0];
    assert_eq!((f.paired, f.unpaired_returns, f.unreturned), (1, 0, 1));
}

#[test]
fn tid_reuse_exit_and_loss_drop_entries() {
    let mut p = pairer(every_call());
    p.record(&ev(ENTRY, 5, 100, 10, vec![]));
    // tid 5 now belongs to process 200: its return must not pair.
    assert_eq!(p.record(&ev(RET, 5, 200, 20, vec![])), None);
    p.record(&ev(ENTRY, 6, 6, 30, vec![]));
    p.record(&ev(ENTRY, 6, 6, 31, vec![]));
    p.thread_exited(6);
    assert_eq!(p.record(&ev(RET, 6, 6, 40, vec![])), None);
    p.record(&ev(ENTRY, 8, 8, 50, vec![]));
    p.events_lost();
    assert_eq!(p.record(&ev(RET, 8, 8, 60, vec![])), None);
    let f = &p.snapshot().functions[0];
    assert_eq!(
        (
            f.paired,
            f.unpaired_returns,
            f.dropped_entries,
            f.unreturned
        ),
        (0, 3, 4, 0)
    );
}

/// An exit record handed over before the thread's last events (a
/// session hands a poll's raw records before its events) takes effect
/// at its time: the return before it pairs, the entry left is dropped.
#[test]
fn a_thread_exit_applies_in_time_order() {
    let mut p = pairer(every_call());
    p.thread_exits(7, 100);
    p.thread_exits(0, 10);
    p.record(&ev(ENTRY, 7, 7, 10, vec![]));
    p.record(&ev(ENTRY, 7, 7, 20, vec![]));
    let c = p.record(&ev(RET, 7, 7, 30, vec![])).unwrap();
    assert_eq!(c.duration_ns, 10);
    // Another thread's event after the exit: tid 7's entry is dropped.
    p.record(&ev(ENTRY, 9, 9, 150, vec![]));
    let f = &p.snapshot().functions[0];
    assert_eq!(
        (f.paired, f.dropped_entries, f.unreturned),
        (1, 1, 1),
        "tid 9's entry is the one unreturned"
    );
    // tid 7 again (reused by the same pid): a fresh stack.
    assert_eq!(p.record(&ev(RET, 7, 7, 160, vec![])), None);
    assert_eq!(p.snapshot().functions[0].unpaired_returns, 1);
    // An exit after the last event applies at the end.
    p.thread_exits(9, 200);
    assert_eq!(p.snapshot().functions[0].unreturned, 1);
    p.apply_exits();
    let f = &p.snapshot().functions[0];
    assert_eq!((f.dropped_entries, f.unreturned), (2, 0));
}

/// tid 0 on two CPUs: two idle tasks, two stacks.
#[test]
fn idle_tid_0_is_per_cpu() {
    let mut p = pairer(every_call());
    let on = |probe, cpu, t| Event {
        cpu,
        ..ev(probe, 0, 0, t, vec![])
    };
    p.record(&on(ENTRY, 0, 10));
    p.record(&on(ENTRY, 1, 20));
    let c = p.record(&on(RET, 0, 50)).unwrap();
    assert_eq!((c.duration_ns, c.cpu, c.entry_cpu), (40, 0, 0));
    let c = p.record(&on(RET, 1, 100)).unwrap();
    assert_eq!((c.duration_ns, c.cpu, c.entry_cpu), (80, 1, 1));
    p.thread_exited(0);
    assert_eq!(p.record(&on(RET, 1, 200)), None);
    assert_eq!(p.snapshot().functions[0].unpaired_returns, 1);
}

/// Empty stacks of gone threads are swept once the map doubles; a
/// pending entry survives the sweep.
#[test]
fn empty_stacks_are_swept() {
    let mut p = pairer(every_call());
    p.record(&ev(ENTRY, 1, 1, 0, vec![]));
    for tid in 2..=(SWEEP_MIN as i32) {
        p.record(&ev(ENTRY, tid, tid, 1, vec![]));
        p.record(&ev(RET, tid, tid, 2, vec![]));
    }
    assert_eq!(p.stacks.stacks.len(), SWEEP_MIN);
    p.record(&ev(ENTRY, 9999, 9999, 3, vec![]));
    assert_eq!(p.stacks.stacks.len(), 2);
    assert_eq!(p.stacks.sweep_at, SWEEP_MIN);
    let c = p.record(&ev(RET, 1, 1, 10, vec![])).unwrap();
    assert_eq!(c.duration_ns, 10);
    assert_eq!(p.snapshot().functions[0].paired, SWEEP_MIN as u64);
}

#[test]
fn depth_limit_drops_oldest() {
    let mut p = pairer(LatencyOptions {
        max_depth: 2,
        ..every_call()
    });
    for t in [10, 20, 30] {
        p.record(&ev(ENTRY, 1, 1, t, vec![]));
    }
    let d: Vec<Option<u64>> = [100, 200, 300]
        .iter()
        .map(|&t| p.record(&ev(RET, 1, 1, t, vec![])).map(|c| c.duration_ns))
        .collect();
    assert_eq!(d, vec![Some(70), Some(180), None]);
    let f = &p.snapshot().functions[0];
    assert_eq!((f.paired, f.unpaired_returns, f.dropped_entries), (2, 1, 1));
}

/// With the stack pointer, a missed inner return does not shift the
/// outer pairing.
#[test]
fn frame_match_skips_entries_whose_return_was_missed() {
    let f = FunctionProbes::new(ENTRY, RET).with_frame(FrameMatch::new(0, 0, 8));
    let mut p = LatencyPairer::new(&[f], every_call()).unwrap();
    p.record(&ev(ENTRY, 1, 1, 10, vec![u(0x1000)]));
    p.record(&ev(ENTRY, 1, 1, 20, vec![u(0x0f00)])); // its return is missed
    let c = p.record(&ev(RET, 1, 1, 100, vec![u(0x1008)])).unwrap();
    assert_eq!((c.duration_ns, c.entry_time_ns), (90, 10));
    // A return matching no frame is unpaired, leaving the stack.
    p.record(&ev(ENTRY, 1, 1, 110, vec![u(0x1000)]));
    assert_eq!(p.record(&ev(RET, 1, 1, 120, vec![u(0x2000)])), None);
    let s = &p.snapshot().functions[0];
    assert_eq!(
        (
            s.paired,
            s.unpaired_returns,
            s.dropped_entries,
            s.unreturned
        ),
        (1, 1, 1, 1)
    );
}

#[test]
fn by_ret_unit_and_threshold() {
    let mut p = pairer(LatencyOptions {
        by: Some(Key::Ret),
        unit: TimeUnit::Us,
        calls_from_ns: Some(5_000),
        ..LatencyOptions::default()
    });
    let mut slow = Vec::new();
    for (i, (dur, ret)) in [(1_500u64, 0i64), (2_999, 0), (7_000, -2), (4_999, 0)]
        .into_iter()
        .enumerate()
    {
        let t = 100_000 * i as u64;
        p.record(&ev(ENTRY, 1, 1, t, vec![]));
        if let Some(c) = p.record(&ev(RET, 1, 1, t + dur, vec![s(ret)])) {
            slow.push((c.duration_ns, c.return_args));
        }
    }
    assert_eq!(slow, vec![(7_000, vec![s(-2)])]);
    let snap = p.take();
    let f = &snap.functions[0];
    let Hist::Log2(total) = &f.total else {
        panic!("log2 expected")
    };
    // In us: 1, 2, 7, 4.
    assert_eq!(
        total.buckets().iter().map(|b| b.count).collect::<Vec<_>>(),
        vec![1, 1, 2]
    );
    assert_eq!(total.max(), Some(7));
    let keys: Vec<(String, u64)> = f
        .by_key
        .iter()
        .map(|k| (k.key.to_string(), k.hist.count()))
        .collect();
    assert_eq!(keys, vec![("-2".to_string(), 1), ("0".to_string(), 3)]);
    assert_eq!(
        serde_json::to_value(&snap).unwrap()["functions"][0]["by_key"][0]["key"],
        serde_json::json!(-2)
    );
}

/// An int's -1 in a 64-bit register (upper half zero) is keyed -1, not
/// 4294967295; a 64-bit -1 and values below 2^31 are as they are.
#[test]
fn by_ret_keys_an_ints_negative_values_as_negative() {
    let mut p = pairer(LatencyOptions {
        by: Some(Key::Ret),
        ..LatencyOptions::default()
    });
    for (i, ret) in [0xffff_ffffi64, -1, 0x7fff_ffff, 0xffff_fff2, 0x1_ffff_ffff]
        .into_iter()
        .enumerate()
    {
        let t = 100_000 * i as u64;
        p.record(&ev(ENTRY, 1, 1, t, vec![]));
        p.record(&ev(RET, 1, 1, t + 10, vec![s(ret)]));
    }
    let snap = p.take();
    let keys: Vec<(String, u64)> = snap.functions[0]
        .by_key
        .iter()
        .map(|k| (k.key.to_string(), k.hist.count()))
        .collect();
    let want = [("-14", 1), ("-1", 2), ("2147483647", 1), ("8589934591", 1)];
    assert_eq!(keys, want.map(|(k, n)| (k.to_string(), n)));
}

#[test]
fn durations_parse_to_ns() {
    for (text, ns) in [
        ("250ns", 250),
        ("500us", 500_000),
        ("1.5ms", 1_500_000),
        ("2s", 2_000_000_000),
        (".25us", 250),
        ("0.000000001s", 1),
        ("1.0000001ms", 1_000_000),
    ] {
        assert_eq!(parse_duration(text), Ok(ns), "{text}");
    }
    for (text, why) in [
        ("10", "it has no unit"),
        ("10m", "\"m\" is not a unit"),
        ("ms", "it has no number"),
        ("1.2.3ms", "\"1.2.3\" is not a number"),
        ("1.0000000001s", "it has more than 9 decimals"),
        ("20000000000s", "it is more than 2^64 nanoseconds"),
    ] {
        assert_eq!(
            parse_duration(text).unwrap_err().to_string(),
            format!("duration {text:?}: {why}; write a number and a unit: 250ns, 500us, 1.5ms, 2s"),
        );
    }
}

#[test]
fn setup_errors() {
    assert_eq!(
        LatencyPairer::new(&[FunctionProbes::new(0, 0)], LatencyOptions::default()).err(),
        Some(AnalysisError::ProbeReused { probe: 0 })
    );
    let by_ret = LatencyOptions {
        by: Some(Key::Ret),
        ..LatencyOptions::default()
    };
    assert_eq!(
        LatencyPairer::new(&[FunctionProbes::new(0, 1)], by_ret).err(),
        Some(AnalysisError::NoReturnValue { function: 0 })
    );
    assert_eq!(Key::parse("cpu").unwrap(), Key::Cpu);
    assert_eq!(
        Key::parse("uid").unwrap_err().to_string(),
        "unknown latency key \"uid\": use comm, pid, tid, cpu or ret"
    );
    assert_eq!(TimeUnit::parse("us").unwrap(), TimeUnit::Us);
    assert_eq!(
        TimeUnit::parse("s").unwrap_err().to_string(),
        "unknown unit \"s\": use ns, us or ms"
    );
}
