use super::*;

const INT: ReturnKind = ReturnKind::Integer {
    size: 4,
    signed: true,
};

/// Functions: 0 root `open` (int), 1 `walk` (pointer), 2 `lookup` (int),
/// 3 `irq_handler` (void).
fn builder() -> CallTreeBuilder {
    CallTreeBuilder::new(
        vec![
            TracedFunction::new("open", INT, true),
            TracedFunction::new("walk", ReturnKind::Pointer, false),
            TracedFunction::new("lookup", INT, false),
            TracedFunction::new("irq_handler", ReturnKind::Void, false),
        ],
        CallTreeOptions::default(),
    )
}

fn neg(errno: i64) -> Option<u64> {
    Some((-errno) as u64)
}

/// Feeds `(function, entry?, retval, time)` on thread 7.
fn feed(b: &mut CallTreeBuilder, events: &[(usize, bool, Option<u64>, u64)]) {
    for &(f, is_entry, retval, t) in events {
        let site = if is_entry {
            CallSite::Entry
        } else {
            CallSite::Return { retval }
        };
        b.record(CallEvent::new(f, site, 7, 7, t));
    }
}

/// The tree as `depth:function` items.
fn shape(t: &CallTree) -> Vec<String> {
    t.frames
        .iter()
        .map(|f| format!("{}:{}", f.depth, f.function))
        .collect()
}

#[test]
fn a_complete_tree_with_durations_self_times_and_its_error_path() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (2, true, None, 10),
            (2, false, Some(0), 20),
            (1, true, None, 30),
            (2, true, None, 40),
            (2, false, neg(2), 70),
            (1, false, neg(2), 80),
            (0, false, neg(2), 100),
        ],
    );
    let trees = b.take_finished();
    assert_eq!(trees.len(), 1);
    let t = &trees[0];
    assert!(t.is_complete(), "{:?}", t.missing);
    assert_eq!(shape(t), ["0:0", "1:2", "1:1", "2:2"]);
    assert_eq!(t.children(0).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(t.error_path(), [0, 2, 3]);
    assert_eq!(t.frames[3].error, Some(CallError::Errno(2)));
    assert_eq!(t.frames[3].error.unwrap().to_string(), "-ENOENT");
    assert_eq!(t.frames[2].error.unwrap().to_string(), "ERR_PTR(-ENOENT)");
    assert_eq!(t.frames[1].error, None);
    assert_eq!(t.root().retval_signed(), Some(-2));
    // open: 100 - 10 - 50 = 40; walk: 50 - 30 = 20.
    assert_eq!(t.root().self_ns, Some(40));
    assert_eq!(t.frames[2].self_ns, Some(20));
    let times = t.self_times();
    assert_eq!((times[0].function, times[0].self_ns), (0, 40));
    let lookup = times.iter().find(|x| x.function == 2).unwrap();
    assert_eq!((lookup.calls, lookup.total_ns, lookup.self_ns), (2, 40, 40));
}

#[test]
fn an_error_handled_by_a_callee_is_not_the_roots() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            // lookup failed, then walk succeeded: the error was handled.
            (2, true, None, 1),
            (2, false, neg(11), 2),
            (1, true, None, 3),
            (1, false, Some(0xffff_8880_0000_1000), 4),
            (0, false, Some(3), 5),
        ],
    );
    let t = &b.take_finished()[0];
    assert!(t.error_path().is_empty());
    assert_eq!(t.frames[1].error.unwrap().to_string(), "-EAGAIN");
    assert_eq!(t.frames[2].error, None);
}

#[test]
fn return_values_are_cut_to_their_type() {
    // An int's upper register bits are not its value.
    assert_eq!(INT.value(0x1234_5678_ffff_fffe), (-2i64) as u64);
    assert_eq!(INT.error(0x1234_5678_ffff_fffe), Some(CallError::Errno(2)));
    let unsigned = ReturnKind::Integer {
        size: 4,
        signed: false,
    };
    assert_eq!(unsigned.error(0xffff_fffe), None);
    assert_eq!(ReturnKind::Pointer.error(0), Some(CallError::Null));
    assert_eq!(ReturnKind::Pointer.error((-4096i64) as u64), None);
    assert_eq!(ReturnKind::Void.error(0), None);
    assert_eq!(CallError::Errno(600).to_string(), "-600");
    assert_eq!(CallError::Errno(512).to_string(), "-ERESTARTSYS");
}

#[test]
fn recursion_nests_each_call_under_its_caller() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (0, true, None, 10),
            (0, true, None, 20),
            (0, false, Some(1), 30),
            (0, false, Some(2), 40),
            (0, false, Some(3), 50),
        ],
    );
    let trees = b.take_finished();
    assert_eq!(trees.len(), 1, "one tree: the inner calls are its frames");
    let t = &trees[0];
    assert!(t.is_complete());
    assert_eq!(shape(t), ["0:0", "1:0", "2:0"]);
    let durations: Vec<_> = t.frames.iter().map(|f| f.duration_ns()).collect();
    assert_eq!(durations, [Some(50), Some(30), Some(10)]);
    let rets: Vec<_> = t.frames.iter().map(|f| f.retval).collect();
    assert_eq!(rets, [Some(3), Some(2), Some(1)]);
}

#[test]
fn an_interrupt_nests_inside_the_call_it_interrupted() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (1, true, None, 10),
            // The interrupt handler runs on the same thread, inside walk.
            (3, true, None, 12),
            (2, true, None, 13),
            (2, false, Some(0), 14),
            (3, false, None, 15),
            (1, false, Some(0x1000), 20),
            (0, false, Some(0), 30),
        ],
    );
    let t = &b.take_finished()[0];
    assert!(t.is_complete());
    assert_eq!(shape(t), ["0:0", "1:1", "2:3", "3:2"]);
    assert_eq!(t.frames[2].parent, Some(1));
    assert_eq!(t.frames[2].retval, None);
    assert_eq!(t.frames[1].self_ns, Some(7));
}

#[test]
fn a_root_running_at_the_start_is_incomplete_and_alone() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            // open and walk began before the first event.
            (2, true, None, 5),
            (2, false, neg(2), 6),
            (1, false, neg(2), 7),
            (0, false, neg(2), 10),
            // Then a whole call.
            (0, true, None, 20),
            (0, false, Some(3), 30),
        ],
    );
    let trees = b.take_finished();
    assert_eq!(trees.len(), 2);
    let first = &trees[0];
    assert_eq!(first.missing, [Missing::RootEntry]);
    assert_eq!(shape(first), ["0:0"], "no guessed callee");
    assert_eq!(first.root().entry_ns, None);
    assert_eq!(first.root().duration_ns(), None);
    assert_eq!(first.error_path(), [0]);
    assert!(trees[1].is_complete());
}

#[test]
fn lost_events_close_the_open_trees_and_mark_the_untaken_ones() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (0, false, Some(0), 1),
            (0, true, None, 2),
            (1, true, None, 3),
        ],
    );
    b.events_lost();
    // After the loss: the returns of the calls open before it.
    feed(&mut b, &[(1, false, Some(1), 8), (0, false, neg(2), 9)]);
    let trees = b.take_finished();
    assert_eq!(trees.len(), 3);
    assert_eq!(trees[0].missing, [Missing::EventsLost], "not taken yet");
    assert_eq!(shape(&trees[1]), ["0:0", "1:1"]);
    assert_eq!(trees[1].missing, [Missing::EventsLost]);
    assert_eq!(trees[1].frames[1].return_ns, None);
    assert_eq!(trees[1].root().duration_ns(), None);
    // The root's return after the loss is a tree of its own, incomplete.
    assert_eq!(trees[2].missing, [Missing::RootEntry]);
    // A tree taken before a loss stays complete.
    feed(&mut b, &[(0, true, None, 10), (0, false, Some(0), 11)]);
    let taken = b.take_finished();
    b.events_lost();
    assert!(taken[0].is_complete());
    assert!(b.take_finished().is_empty());
}

#[test]
fn a_missed_return_marks_the_call_not_a_different_path() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (1, true, None, 1),
            (2, true, None, 2),
            // lookup's return was missed: walk returns next.
            (1, false, neg(2), 5),
            (0, false, neg(2), 6),
        ],
    );
    let t = &b.take_finished()[0];
    assert_eq!(t.missing, [Missing::Return { frame: 2 }]);
    assert_eq!(shape(t), ["0:0", "1:1", "2:2"]);
    assert_eq!(t.frames[2].return_ns, None);
    assert_eq!(t.frames[1].self_ns, None, "a callee's duration is unknown");
}

#[test]
fn a_return_without_its_entry_inside_a_tree_is_said() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (2, false, Some(0), 3),
            (0, false, Some(0), 6),
        ],
    );
    let t = &b.take_finished()[0];
    assert_eq!(t.missing, [Missing::Entry { function: 2 }]);
}

#[test]
fn an_outer_return_closes_the_tree_whose_root_return_was_missed() {
    let mut b = builder();
    feed(
        &mut b,
        &[
            (1, true, None, 0),
            (0, true, None, 1),
            (2, true, None, 2),
            (2, false, Some(0), 3),
            // open's return missed; walk (its caller) returns.
            (1, false, Some(0x1000), 9),
        ],
    );
    let t = &b.take_finished()[0];
    assert_eq!(t.missing, [Missing::Return { frame: 0 }]);
    assert_eq!(shape(t), ["0:0", "1:2"]);
}

#[test]
fn threads_and_idle_cpus_are_kept_apart() {
    let mut b = builder();
    let ev = |f, site, tid, cpu, t| {
        let mut e = CallEvent::new(f, site, tid, tid, t);
        e.cpu = cpu;
        e
    };
    let r = |v| CallSite::Return { retval: Some(v) };
    b.record(ev(0, CallSite::Entry, 0, 0, 0));
    b.record(ev(0, CallSite::Entry, 0, 1, 1));
    b.record(ev(0, CallSite::Entry, 5, 1, 2));
    b.record(ev(0, r(1), 0, 0, 3));
    b.record(ev(0, r(2), 5, 0, 4));
    b.record(ev(0, r(3), 0, 1, 5));
    let trees = b.take_finished();
    let summary: Vec<_> = trees
        .iter()
        .map(|t| (t.tid, t.root().cpu, t.root().retval))
        .collect();
    assert_eq!(summary, [(0, 0, Some(1)), (5, 1, Some(2)), (0, 1, Some(3))]);
    assert!(trees.iter().all(CallTree::is_complete));
}

#[test]
fn a_thread_exiting_inside_a_call_closes_its_tree_in_time_order() {
    let mut b = builder();
    feed(&mut b, &[(0, true, None, 0), (1, true, None, 1)]);
    // The exit is told before the thread's last event.
    b.thread_exits(7, 5);
    feed(&mut b, &[(2, true, None, 4)]);
    assert!(b.take_finished().is_empty());
    let rest = b.finish();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].missing, [Missing::ThreadExited]);
    assert_eq!(shape(&rest[0]), ["0:0", "1:1", "2:2"]);
}

#[test]
fn the_end_of_the_recording_closes_what_runs() {
    let mut b = builder();
    feed(&mut b, &[(0, true, None, 0)]);
    let rest = b.finish();
    assert_eq!(rest[0].missing, [Missing::Unfinished]);
}

#[test]
fn a_tree_keeps_at_most_its_frames() {
    let o = CallTreeOptions {
        max_frames: 2,
        ..CallTreeOptions::default()
    };
    let mut b = CallTreeBuilder::new(builder().functions().to_vec(), o);
    feed(
        &mut b,
        &[
            (0, true, None, 0),
            (2, true, None, 1),
            (2, false, Some(0), 2),
            (2, true, None, 3),
            (2, false, Some(0), 4),
            (0, false, Some(0), 5),
        ],
    );
    let t = &b.take_finished()[0];
    assert_eq!(shape(t), ["0:0", "1:2"]);
    // The dropped call's return finds no entry in the tree.
    assert_eq!(
        t.missing,
        [
            Missing::Entry { function: 2 },
            Missing::TooManyFrames { dropped: 1 }
        ]
    );
}

#[test]
fn functions_outside_trees_are_ignored() {
    let mut b = builder();
    feed(&mut b, &[(1, true, None, 0), (1, false, Some(0), 1)]);
    assert!(b.finish().is_empty());
}

/// Events per second the builder takes: trees of a root and 3 callees
/// (8 events), on 4 threads in turn. A figure, not a check.
#[test]
#[ignore = "a figure: cargo test --release -p kprobe-perf-engine --lib rebuild_rate -- --ignored --nocapture"]
fn rebuild_rate() {
    let mut b = builder();
    let trees = 250_000u64;
    let mut events = Vec::with_capacity(trees as usize * 8);
    for i in 0..trees {
        let (tid, t) = ((i % 4) as i32 + 1, i * 100);
        for (f, entry, dt) in [
            (0, true, 0),
            (1, true, 10),
            (2, true, 20),
            (2, false, 30),
            (1, false, 40),
            (3, true, 50),
            (3, false, 60),
            (0, false, 70),
        ] {
            let site = if entry {
                CallSite::Entry
            } else {
                CallSite::Return { retval: Some(0) }
            };
            events.push(CallEvent::new(f, site, tid, tid, t + dt));
        }
    }
    let n = events.len();
    let start = std::time::Instant::now();
    let mut taken = 0;
    for (i, e) in events.into_iter().enumerate() {
        b.record(e);
        if i % 4096 == 0 {
            taken += b.take_finished().len();
        }
    }
    taken += b.finish().len();
    let s = start.elapsed().as_secs_f64();
    assert_eq!(taken as u64, trees);
    println!(
        "{n} events, {taken} trees in {s:.3} s: {:.1} M events/s",
        n as f64 / s / 1e6
    );
}
