//! The consumer of a drain is an argument: against a real kernel, a sink
//! error ends the poll and is returned, a `Break` ends the drain cleanly,
//! and in both cases the events not handed over come with the next drain,
//! in order, none lost or repeated.

use std::ops::ControlFlow;
use std::process::Command;
use std::time::Duration;

use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::Flow;
use kprobe_perf_engine::{
    sink_fn, Error, Event, EventSink, KernelSymbols, RecordTarget, Session, SessionOptions, Value,
};
use kprobe_perf_tests::{for_kernel, kprobes_available};

/// Keeps the time and path of each event; fails at event `fail_at`
/// (counting from 1) or breaks at `break_at`.
struct Stopping {
    seen: Vec<(u64, Option<String>)>,
    fail_at: Option<usize>,
    break_at: Option<usize>,
}

impl Stopping {
    fn new(fail_at: Option<usize>, break_at: Option<usize>) -> Stopping {
        Stopping {
            seen: Vec::new(),
            fail_at,
            break_at,
        }
    }
}

impl EventSink for Stopping {
    type Error = Error;

    fn event(&mut self, e: &Event) -> Result<Flow, Error> {
        let path = match e.args.first() {
            Some(Value::Str(p)) => p.clone(),
            _ => None,
        };
        self.seen.push((e.time_ns, path));
        let n = self.seen.len();
        if self.fail_at == Some(n) {
            return Err(Error::Internal {
                what: format!("the sink failed at event {n}"),
            });
        }
        Ok(if self.break_at == Some(n) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }
}

#[test]
fn a_sink_error_or_break_stops_the_drain_and_the_rest_comes_next() {
    if !kprobes_available("a_sink_error_or_break_stops_the_drain_and_the_rest_comes_next") {
        return;
    }
    const OPENS: usize = 10;
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(
        &[for_kernel("p:do_sys_openat2 path=+0(%si):ustring")],
        &symbols,
    )
    .unwrap();
    let mut s = Session::open(
        plans,
        SessionOptions::default().with_target(RecordTarget::Cpus(vec![0])),
    )
    .unwrap();
    let tid = kprobe_perf_engine::cli::os::gettid();
    let pinned = Command::new("taskset")
        .args(["-p", "-c", "0", &tid.to_string()])
        .output()
        .expect("running taskset (util-linux)");
    assert!(pinned.status.success(), "taskset -p -c 0 {tid}: {pinned:?}");
    let file = std::env::temp_dir().join(format!("kprobe-perf-sinks-{}", std::process::id()));
    std::fs::write(&file, "x\n").unwrap();
    s.enable().unwrap();
    for _ in 0..OPENS {
        std::fs::File::open(&file).unwrap();
    }
    s.disable().unwrap();
    let _ = std::fs::remove_file(&file);

    // Disabled: one drain would hand over every event. The sink fails at
    // the third: the poll returns its error.
    let mut failing = Stopping::new(Some(3), None);
    let err = s
        .poll(Some(Duration::ZERO), &mut failing)
        .expect_err("the sink's error ends the poll");
    assert_eq!(
        err.to_string(),
        "the sink failed at event 3 (a bug: please report it)"
    );
    assert_eq!(failing.seen.len(), 3);
    // The next drain goes on after it; a Break at the second event ends
    // it cleanly.
    let mut breaking = Stopping::new(None, Some(2));
    assert_eq!(s.drain(&mut breaking).unwrap(), 2);
    assert_eq!(breaking.seen.len(), 2);
    // And the rest comes with the next, through a closure.
    let mut rest = Vec::new();
    let n = s
        .drain(&mut sink_fn(|e| {
            let path = match e.args.first() {
                Some(Value::Str(p)) => p.clone(),
                _ => None,
            };
            rest.push((e.time_ns, path));
        }))
        .unwrap();
    assert_eq!(n, rest.len());
    assert_eq!(s.drain(&mut Stopping::new(Some(1), None)).unwrap(), 0);

    let all: Vec<(u64, Option<String>)> = failing
        .seen
        .into_iter()
        .chain(breaking.seen)
        .chain(rest)
        .collect();
    println!("{} events over three drains", all.len());
    assert!(all.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
    let path = file.display().to_string();
    let ours = all
        .iter()
        .filter(|(_, p)| p.as_deref() == Some(&path))
        .count();
    assert_eq!(ours, OPENS);
    let summary = s.summary();
    assert_eq!(summary.events, all.len() as u64, "none repeated or dropped");
    assert_eq!(summary.loss.count(), Some(0), "{summary:?}");
}
