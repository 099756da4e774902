//! Entry values at a return probe on kernels that cannot fetch them there.
//!
//! `r:do_sys_openat2 path=+0($arg2):ustring ret=$retval` asks, at the
//! return, for what was true at the entry. Kernels whose tracefs `README`
//! says "kernel return probes support: $retval, `$arg<N>`" (6.10+) save the
//! entry values themselves: the definition goes to them as written. Older
//! ones (6.1) cannot, so the planner splits the probe in two
//! (`plan_joined`): a hidden entry probe fetching the entry values, and
//! the return probe fetching the rest, each also fetching the stack
//! pointer. The session opens them as `expand` lays them out; at decode
//! time a `Joiner` (decode) pairs each return with its entry
//! per thread, on a stack (recursion and nesting give each call its own
//! entry) and by stack frame (a return whose own entry was lost never
//! takes another call's), and gives the return event the entry's values,
//! in the order the user wrote them: the printed line is the one the
//! kernel-side form prints.
//!
//! A thread that exits inside the function (its kernel EXIT record)
//! lets its waiting entries go, so memory stays bounded and a later
//! thread of the same tid never takes them.
//!
//! The hidden probe is never shown: its events are not handed over, its
//! counts are not among the session's probes ([`crate::session::Session::plans`]
//! lists the user's probes only). A return whose entry was not seen (lost
//! to a full ring, before the start, out of stack) has its entry values
//! [`Value::Unknown`](crate::decode::Value::Unknown), counted per probe in
//! [`SessionStats::entry_unknown`](crate::decode::stats::SessionStats::entry_unknown).

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

use crate::plan::probe_plan::{ArgPlan, BackendChoice, PlanError, ProbePlan};
pub use crate::plan::probe_plan::{EntryJoin, JoinSource};
use kprobe_perf_spec::KernelFeatures;
use kprobe_perf_spec::{Fetch, FetchArg, FetchBase, ProbeKind, ProbeSpec, Target};

/// Name of the stack pointer argument the return half of a joined probe
/// fetches last (never shown). The entry half's is this, `_`, and the
/// order of the user's arguments, one letter each (`e` from the entry,
/// `r` from the return): the definitions alone, as a perf.data file
/// stores them, are enough to join them again ([`rejoin`]).
const FRAME_ARG: &str = "kpf_sp";

/// Suffix of the hidden entry probe's event name.
pub(crate) const ENTRY_SUFFIX: &str = "_kpf_entry";

/// The entry half's frame argument name for `order`.
fn entry_frame_name(order: &[JoinSource]) -> String {
    let letters: String = order
        .iter()
        .map(|s| match s {
            JoinSource::Entry(_) => 'e',
            JoinSource::Return(_) => 'r',
        })
        .collect();
    format!("{FRAME_ARG}_{letters}")
}

/// The order [`entry_frame_name`] wrote in `name`.
fn order_of_frame_name(name: &str) -> Option<Vec<JoinSource>> {
    let letters = name.strip_prefix(FRAME_ARG)?.strip_prefix('_')?;
    let (mut e, mut r) = (0, 0);
    letters
        .chars()
        .map(|c| match c {
            'e' => {
                e += 1;
                Some(JoinSource::Entry(e - 1))
            }
            'r' => {
                r += 1;
                Some(JoinSource::Return(r - 1))
            }
            _ => None,
        })
        .collect()
}

/// True when `a` is a value of the function's entry (an argument, by
/// number or BTF name, or what is fetched through one).
fn entry_value(a: &FetchArg) -> bool {
    matches!(
        a.fetch.base,
        FetchBase::Arg(_) | FetchBase::Name(_) | FetchBase::Member { .. } | FetchBase::AllArgs
    )
}

/// True when `spec` is a return probe with entry values and the kernel
/// cannot fetch them at the return: a kernel probe where `features`
/// (when known) say so, a uprobe always (the kernel saves no entry
/// values for a uretprobe, and the argument registers are overwritten
/// by then).
pub(crate) fn needs_join(spec: &ProbeSpec, features: Option<&KernelFeatures>) -> bool {
    let kernel_cannot = match spec.target {
        Target::Symbol { .. } | Target::Address(_) => features.is_some_and(|f| !f.return_args),
        Target::User { .. } => true,
        _ => false,
    };
    kernel_cannot && spec.is_return() && spec.args.iter().any(entry_value)
}

/// The stack pointer as an argument named `name`.
fn frame_arg(arch: Arch, name: String) -> FetchArg {
    FetchArg {
        name: Some(name),
        fetch: Fetch {
            base: FetchBase::Register(arch.stack_register().name.to_string()),
            derefs: Vec::new(),
        },
        ty: None,
    }
}

/// How much the stack pointer at a return exceeds the one at its entry:
/// x86_64's `ret` pops the return address; aarch64 returns through a
/// register.
pub(crate) fn frame_step(arch: Arch) -> i64 {
    match arch {
        Arch::X86_64 => 8,
        _ => 0,
    }
}

/// How `plan_joined` plans each half: [`crate::plan::resolve_with`],
/// given by the planner (which calls `plan_joined`), so that this module
/// does not call back into it.
pub(crate) type Resolver = fn(
    ProbeSpec,
    &KernelSymbols,
    Arch,
    BackendChoice,
    Option<&KernelFeatures>,
) -> Result<ProbePlan, PlanError>;

/// Plans a return probe with entry values ([`needs_join`]) as a hidden
/// entry probe and a return probe joined in user space. The plan returned
/// is the user's view; its [`ProbePlan::entry_join`] holds the two.
pub(crate) fn plan_joined(
    spec: ProbeSpec,
    symbols: &KernelSymbols,
    arch: Arch,
    choice: BackendChoice,
    features: Option<&KernelFeatures>,
    resolve_with: Resolver,
) -> Result<ProbePlan, PlanError> {
    let event = spec.event_name();
    let mut entry_args = Vec::new();
    let mut ret_args = Vec::new();
    let mut order = Vec::new();
    for (i, a) in spec.args.iter().enumerate() {
        // Each half names the argument as the whole would.
        let mut named = a.clone();
        named.name = Some(spec.arg_name(i));
        if entry_value(a) {
            order.push(JoinSource::Entry(entry_args.len()));
            entry_args.push(named);
        } else {
            order.push(JoinSource::Return(ret_args.len()));
            ret_args.push(named);
        }
    }
    if spec.args.len() > MAX_JOINED_ARGS {
        return Err(PlanError::Unsupported {
            what: format!(
                "{} arguments in a return probe with entry values on this kernel (at most {MAX_JOINED_ARGS} when they are joined to a hidden entry probe)",
                spec.args.len()
            ),
            instead: "split the arguments over two probes".into(),
        });
    }
    entry_args.push(frame_arg(arch, entry_frame_name(&order)));
    ret_args.push(frame_arg(arch, FRAME_ARG.to_string()));
    let entry_spec = ProbeSpec {
        kind: ProbeKind::Entry,
        group: spec.group.clone(),
        event: Some(format!("{event}{ENTRY_SUFFIX}")),
        target: spec.target.clone(),
        args: entry_args,
    };
    let ret_spec = ProbeSpec {
        event: Some(event.clone()),
        args: ret_args,
        ..spec.clone()
    };
    let entry = resolve_with(entry_spec, symbols, arch, choice, features)?;
    let ret = resolve_with(ret_spec, symbols, arch, choice, features)?;
    Ok(user_view(
        spec,
        EntryJoin {
            ret,
            entry,
            order,
            frame_step: frame_step(arch),
        },
    ))
}

/// The most arguments of a joined return probe: the entry half's frame
/// argument name spells their order, within the kernel's 32 bytes.
const MAX_JOINED_ARGS: usize = 24;

/// The plan the user sees for `join`: `spec`, the return's event and
/// place, the arguments of both halves in the user's order.
fn user_view(spec: ProbeSpec, join: EntryJoin) -> ProbePlan {
    let EntryJoin {
        ret, entry, order, ..
    } = &join;
    let shown_arg = |src: &JoinSource| -> Option<ArgPlan> {
        match *src {
            JoinSource::Entry(k) => entry.args.get(k).cloned(),
            JoinSource::Return(k) => ret.args.get(k).cloned(),
        }
    };
    let args = order.iter().filter_map(shown_arg).collect();
    ProbePlan {
        spec,
        event: ret.event.clone(),
        attach: ret.attach.clone(),
        backend: ret.backend,
        resolved_address: ret.resolved_address,
        args,
        regs_mask: ret.regs_mask,
        return_trampoline: ret.return_trampoline,
        entry_join: Some(Box::new(join)),
        filter: None,
        auto_backend: false,
        pending_module: None,
    }
}

/// The probes a session opens for the user's: entry joins expanded (see
/// [`expand`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expanded {
    /// What is opened: a joined probe's return part in its place, the
    /// hidden entry probes after the user's.
    pub(crate) opened: Vec<ProbePlan>,
    /// The user's probes, as shown (events refer to them).
    pub(crate) shown: Vec<ProbePlan>,
    /// One per joined probe, in the order of `shown`.
    pub(crate) joins: Vec<OpenedJoin>,
}

/// A joined probe among the opened probes: which two they are, and how
/// the decoder puts their values together again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenedJoin {
    /// Index of the return part (the user's probe's index).
    pub(crate) ret: usize,
    /// Index of the hidden entry probe.
    pub(crate) entry: usize,
    /// Index of the entry probe's frame argument (its last).
    pub(crate) entry_frame_arg: usize,
    /// Index of the return probe's frame argument (its last).
    pub(crate) ret_frame_arg: usize,
    /// The return's frame minus the entry's ([`frame_step`]).
    pub(crate) frame_step: i64,
    /// The user's arguments, each from the entry or the return.
    pub(crate) order: Vec<JoinSource>,
}

/// The probes a session opens for `plans` (the user's): a joined probe's
/// return part in its place, the hidden entry probes after the user's,
/// each under the user's event name (which planning may have made unique
/// since). The plans are complete here: attach opens `opened` as it is,
/// and decode joins what [`Expanded::joins`] names.
pub(crate) fn expand(plans: Vec<ProbePlan>) -> Expanded {
    let mut opened: Vec<ProbePlan> = Vec::with_capacity(plans.len() + 1);
    let mut hidden = Vec::new();
    let mut joins = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        let Some(j) = &p.entry_join else {
            opened.push(p.clone());
            continue;
        };
        joins.push(OpenedJoin {
            ret: i,
            entry: plans.len() + hidden.len(),
            entry_frame_arg: j.entry.args.len().saturating_sub(1),
            ret_frame_arg: j.ret.args.len().saturating_sub(1),
            frame_step: j.frame_step,
            order: j.order.clone(),
        });
        let mut ret = j.ret.clone();
        ret.event = p.event.clone();
        let mut entry = j.entry.clone();
        entry.event = format!("{}{ENTRY_SUFFIX}", p.event);
        opened.push(ret);
        hidden.push(entry);
    }
    opened.extend(hidden);
    Expanded {
        opened,
        shown: plans,
        joins,
    }
}

/// The inverse of [`expand`] for the probes of a perf.data file (planned
/// again from their definitions): the user's probes, a joined one put
/// together again from its return and hidden entry probes, found by
/// their names. `expand` of the result gives `opened` back, in order,
/// when `opened` is what a session opened.
pub(crate) fn rejoin(opened: &[ProbePlan], arch: Arch) -> Vec<ProbePlan> {
    let frame_name = |p: &ProbePlan| p.spec.args.last().and_then(|a| a.name.clone());
    let mut shown: Vec<ProbePlan> = Vec::with_capacity(opened.len());
    let mut hidden = Vec::new();
    for p in opened {
        let order = frame_name(p).and_then(|n| order_of_frame_name(&n));
        match (p.event.strip_suffix(ENTRY_SUFFIX), order, p.is_return()) {
            (Some(ret_event), Some(order), false) => {
                hidden.push((ret_event.to_string(), p.clone(), order))
            }
            _ => shown.push(p.clone()),
        }
    }
    for (ret_event, entry, order) in hidden {
        let Some(at) = shown.iter().position(|p| {
            p.event == ret_event
                && p.is_return()
                && p.entry_join.is_none()
                && frame_name(p).as_deref() == Some(FRAME_ARG)
        }) else {
            // No return to join it to: shown as it is.
            shown.push(entry);
            continue;
        };
        let ret = shown[at].clone();
        let mut spec = ret.spec.clone();
        spec.args = order
            .iter()
            .filter_map(|s| match *s {
                JoinSource::Entry(k) => entry.spec.args.get(k).cloned(),
                JoinSource::Return(k) => ret.spec.args.get(k).cloned(),
            })
            .collect();
        shown[at] = user_view(
            spec,
            EntryJoin {
                ret,
                entry,
                order,
                frame_step: frame_step(arch),
            },
        );
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::joiner::Joiner;
    use crate::decode::{Event, Value};
    use crate::plan::{resolve_with, Backend};
    use kprobe_perf_spec::BaseType;
    use std::ops::ControlFlow;
    use std::sync::Arc;

    fn syms() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T vfs_read\n",
        )
        .unwrap()
    }

    fn plan_on(text: &str, features: &KernelFeatures) -> ProbePlan {
        let spec = ProbeSpec::parse(text, Arch::X86_64).unwrap();
        resolve_with(
            spec,
            &syms(),
            Arch::X86_64,
            BackendChoice::Auto,
            Some(features),
        )
        .unwrap()
    }

    /// The opened probes of `plans`, and their joiner.
    fn expand(plans: Vec<ProbePlan>) -> (Vec<ProbePlan>, Option<Joiner>) {
        let expanded = super::expand(plans);
        let joiner = Joiner::new(&expanded);
        (expanded.opened, joiner)
    }

    const OPENAT2: &str = "r:do_sys_openat2 path=+0($arg2):ustring ret=$retval:s64";

    #[test]
    fn a_kernel_without_return_args_gets_an_entry_probe_and_a_return_probe() {
        let old = KernelFeatures::default();
        let p = plan_on(OPENAT2, &old);
        let j = p.entry_join.as_deref().unwrap();
        assert_eq!(
            j.entry.tracefs_definition("g"),
            "p:g/r_do_sys_openat2_0_kpf_entry do_sys_openat2 path=+0($arg2):ustring kpf_sp_er=%sp"
        );
        assert_eq!(j.entry.backend, Backend::Tracefs);
        // The return needs no memory: the PMU samples ax and sp.
        assert_eq!(j.ret.backend, Backend::Pmu);
        assert_eq!(j.ret.regs_mask, (1 << 0) | (1 << 7));
        assert_eq!(j.order, vec![JoinSource::Entry(0), JoinSource::Return(0)]);
        // The user's view: their spec, event and arguments in order.
        assert_eq!(p.spec, ProbeSpec::parse(OPENAT2, Arch::X86_64).unwrap());
        assert_eq!(p.event, "r_do_sys_openat2_0");
        assert!(p.is_return());
        let shown: Vec<_> = p
            .args
            .iter()
            .map(|a| (a.name.as_str(), a.ty.base))
            .collect();
        assert_eq!(
            shown,
            [("path", BaseType::UString), ("ret", BaseType::Signed(64))]
        );
        // Arguments in another order keep it; unnamed ones keep the names
        // of the whole (argN by position).
        let p = plan_on("r:vfs_read $retval $arg3 $arg1:u32", &old);
        let j = p.entry_join.as_deref().unwrap();
        assert_eq!(
            j.order,
            vec![
                JoinSource::Return(0),
                JoinSource::Entry(0),
                JoinSource::Entry(1)
            ]
        );
        let names: Vec<_> = p.args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["arg1", "arg2", "arg3"]);
        assert_eq!(j.entry.backend, Backend::Pmu);
        assert_eq!(j.entry.regs_mask, (1 << 3) | (1 << 5) | (1 << 7));
    }

    #[test]
    fn a_kernel_with_return_args_gets_the_definition() {
        let new = KernelFeatures {
            return_args: true,
            btf_args: true,
            ..KernelFeatures::default()
        };
        let p = plan_on(OPENAT2, &new);
        assert!(p.entry_join.is_none());
        assert_eq!(p.backend, Backend::Tracefs);
        assert_eq!(
            p.tracefs_definition("g"),
            "r:g/r_do_sys_openat2_0 do_sys_openat2 path=+0($arg2):ustring ret=$retval:s64"
        );
        // Without entry values, and unknown features: nothing is joined.
        let spec = ProbeSpec::parse("r:do_sys_openat2 $retval", Arch::X86_64).unwrap();
        assert!(!needs_join(&spec, Some(&KernelFeatures::default())));
        let spec = ProbeSpec::parse("r:do_sys_openat2 $arg1", Arch::X86_64).unwrap();
        assert!(!needs_join(&spec, None));
        // A uprobe's return always: the kernel saves nothing for it.
        let spec = ProbeSpec::parse("r:/bin/true:main $arg1", Arch::X86_64).unwrap();
        assert!(needs_join(&spec, None));
        let spec = ProbeSpec::parse("r:/bin/true:main $retval", Arch::X86_64).unwrap();
        assert!(!needs_join(&spec, None));
    }

    fn event(probe: usize, tid: i32, time_ns: u64, args: Vec<Value>) -> Event {
        Event {
            probe,
            cpu: 0,
            pid: tid,
            tid,
            comm: Arc::from("t"),
            time_ns,
            ip: 0,
            probe_addr: 0,
            ret_addr: Some(0x1000),
            callchain: Vec::new(),
            args,
        }
    }

    fn int(v: u64) -> Value {
        Value::new(v, BaseType::Hex(64))
    }

    fn s(v: &str) -> Value {
        Value::Str(Some(v.into()))
    }

    fn ret(v: i64) -> Value {
        Value::new(v as u64, BaseType::Signed(64))
    }

    /// Events of probe 0 (a joined return) and 1 (its hidden entry),
    /// through a joiner; what is handed over, and the unknown counts.
    fn join(events: &[Event]) -> (Vec<Vec<Value>>, u64) {
        let user = plan_on(OPENAT2, &KernelFeatures::default());
        let (opened, joiner) = expand(vec![user]);
        assert_eq!(opened.len(), 2);
        assert_eq!(opened[1].event, "r_do_sys_openat2_0_kpf_entry");
        let mut joiner = joiner.unwrap();
        assert_eq!(joiner.shown().len(), 1);
        let mut out = Vec::new();
        let mut unknown = 0;
        for e in events {
            let _ = joiner.pass(
                e,
                |_| unknown += 1,
                |m, _| {
                    out.push(m.args.clone());
                    ControlFlow::Continue(())
                },
            );
        }
        (out, unknown)
    }

    #[test]
    fn returns_take_their_own_entrys_values_in_the_users_order() {
        // Nested calls on thread 7 and one on thread 8 in between.
        let (out, unknown) = join(&[
            event(1, 7, 10, vec![s("/outer"), int(0x1000)]),
            event(1, 8, 11, vec![s("/other"), int(0x5000)]),
            event(1, 7, 12, vec![s("/inner"), int(0x0f00)]),
            event(0, 7, 13, vec![ret(4), int(0x0f08)]),
            event(0, 8, 14, vec![ret(-2), int(0x5008)]),
            event(0, 7, 15, vec![ret(3), int(0x1008)]),
        ]);
        assert_eq!(
            out,
            vec![
                vec![s("/inner"), ret(4)],
                vec![s("/other"), ret(-2)],
                vec![s("/outer"), ret(3)],
            ]
        );
        assert_eq!(unknown, 0);
    }

    #[test]
    fn a_return_whose_entry_was_not_seen_has_unknown_entry_values() {
        // The inner entry was lost: the inner return must not take the
        // outer's path (another frame), and is counted.
        let (out, unknown) = join(&[
            event(1, 7, 10, vec![s("/outer"), int(0x1000)]),
            event(0, 7, 13, vec![ret(4), int(0x0f08)]),
            event(0, 7, 15, vec![ret(3), int(0x1008)]),
            // A return before any entry of its thread.
            event(0, 9, 16, vec![ret(5), int(0x2008)]),
        ]);
        assert_eq!(
            out,
            vec![
                vec![Value::Unknown, ret(4)],
                vec![s("/outer"), ret(3)],
                vec![Value::Unknown, ret(5)],
            ]
        );
        assert_eq!(unknown, 2);
        assert_eq!(Value::Unknown.to_string(), "(unknown)");
    }

    /// A thread that exits inside the function leaves its entry: the exit
    /// lets it go once a later event comes, so a later thread of the same
    /// tid (same pid: not caught by the pid check) does not take it.
    #[test]
    fn an_exit_lets_the_threads_waiting_entry_go() {
        let user = plan_on(OPENAT2, &KernelFeatures::default());
        let (_, joiner) = expand(vec![user]);
        let mut j = joiner.unwrap();
        let mut out = Vec::new();
        let mut pass = |j: &mut Joiner, e: Event| {
            let _ = j.pass(
                &e,
                |_| {},
                |m, _| {
                    out.push(m.args.clone());
                    ControlFlow::Continue(())
                },
            );
        };
        pass(&mut j, event(1, 7, 10, vec![s("/gone"), int(0x1000)]));
        j.thread_exits(7, 11);
        pass(&mut j, event(1, 8, 12, vec![s("/other"), int(0x5000)]));
        // tid 7 again, the same frame: without the exit it would pair.
        pass(&mut j, event(0, 7, 13, vec![ret(4), int(0x1008)]));
        pass(&mut j, event(0, 8, 14, vec![ret(5), int(0x5008)]));
        assert_eq!(
            out,
            vec![vec![Value::Unknown, ret(4)], vec![s("/other"), ret(5)]]
        );
    }

    #[test]
    fn after_a_loss_waiting_entries_are_not_used() {
        let user = plan_on(OPENAT2, &KernelFeatures::default());
        let (_, joiner) = expand(vec![user]);
        let mut joiner = joiner.unwrap();
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        let mut pass = |j: &mut Joiner, e: Event| {
            j.pass(
                &e,
                |p| unknown.push(p),
                |m, plans| {
                    assert_eq!(plans.len(), 1);
                    out.push(m.args.clone());
                    ControlFlow::Continue(())
                },
            )
        };
        let _ = pass(&mut joiner, event(1, 7, 10, vec![s("/a"), int(0x1000)]));
        // Records were lost: this entry's return may have been among them,
        // and a later call of the same frame must not take its path.
        joiner.events_lost();
        let _ = pass(&mut joiner, event(0, 7, 20, vec![ret(3), int(0x1008)]));
        let _ = pass(&mut joiner, event(1, 7, 30, vec![s("/b"), int(0x1000)]));
        let _ = pass(&mut joiner, event(0, 7, 40, vec![ret(4), int(0x1008)]));
        assert_eq!(
            out,
            vec![vec![Value::Unknown, ret(3)], vec![s("/b"), ret(4)]]
        );
        assert_eq!(unknown, vec![0]);
    }

    #[test]
    fn a_return_the_consumer_stopped_at_comes_again_with_the_same_values() {
        let user = plan_on(OPENAT2, &KernelFeatures::default());
        let (_, joiner) = expand(vec![user]);
        let mut joiner = joiner.unwrap();
        let mut unknown = 0;
        let entry = event(1, 7, 10, vec![s("/a"), int(0x1000)]);
        let ret_event = event(0, 7, 20, vec![ret(3), int(0x1008)]);
        let _ = joiner.pass(&entry, |_| unknown += 1, |_, _| ControlFlow::Continue(()));
        let mut seen = Vec::new();
        for flow in [ControlFlow::Break(()), ControlFlow::Continue(())] {
            let got = joiner.pass(
                &ret_event,
                |_| unknown += 1,
                |m, _| {
                    seen.push(m.args.clone());
                    flow
                },
            );
            assert_eq!(got, flow);
        }
        assert_eq!(seen, vec![vec![s("/a"), ret(3)], vec![s("/a"), ret(3)]]);
        assert_eq!(unknown, 0);
        // Taken, it is not held any more: the same event again would be a
        // return without entry.
        let _ = joiner.pass(
            &ret_event,
            |_| unknown += 1,
            |m, _| {
                assert_eq!(m.args[0], Value::Unknown);
                ControlFlow::Continue(())
            },
        );
        assert_eq!(unknown, 1);
    }

    #[test]
    fn the_opened_probes_of_a_file_join_again() {
        let other = plan_on("p:vfs_read %di", &KernelFeatures::default());
        let user = plan_on(
            "r:vfs_read $retval $arg3 ret2=$retval",
            &KernelFeatures::default(),
        );
        let (opened, _) = expand(vec![user.clone(), other.clone()]);
        assert_eq!(opened.len(), 3);
        // As a perf.data file stores them: definitions planned again.
        let replanned: Vec<ProbePlan> = opened
            .iter()
            .map(|p| {
                let spec = ProbeSpec::parse(&p.spec.to_string(), Arch::X86_64).unwrap();
                let mut q = resolve_with(
                    spec,
                    &KernelSymbols::default(),
                    Arch::X86_64,
                    BackendChoice::Pmu,
                    Some(&KernelFeatures::default()),
                )
                .unwrap();
                q.event = p.event.clone();
                q
            })
            .collect();
        let shown = rejoin(&replanned, Arch::X86_64);
        assert_eq!(shown.len(), 2);
        assert_eq!(shown[1], replanned[1]);
        assert_eq!(shown[1].event, other.event);
        let names: Vec<_> = shown[0].args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["arg1", "arg2", "ret2"]);
        assert_eq!(shown[0].args, user.args);
        let (reopened, joiner) = expand(shown);
        assert!(joiner.is_some());
        assert_eq!(reopened, replanned);
        // Without a hidden entry probe, nothing changes.
        assert_eq!(
            rejoin(std::slice::from_ref(&other), Arch::X86_64),
            vec![other]
        );
        let _ = user;
    }

    #[test]
    fn other_probes_pass_unchanged() {
        let other = plan_on("p:vfs_read %di", &KernelFeatures::default());
        let user = plan_on(OPENAT2, &KernelFeatures::default());
        let (opened, joiner) = expand(vec![other.clone(), user]);
        assert_eq!(opened[0], other);
        assert_eq!(opened[2].event, "r_do_sys_openat2_0_kpf_entry");
        let mut joiner = joiner.unwrap();
        let e = event(0, 7, 1, vec![int(5)]);
        let mut out = Vec::new();
        let _ = joiner.pass(
            &e,
            |_| {},
            |m, _| {
                out.push(m.clone());
                ControlFlow::Continue(())
            },
        );
        assert_eq!(out, vec![e]);
        // No joined probe: no joiner, the plans as they were.
        let (opened, joiner) = expand(vec![other.clone()]);
        assert_eq!(opened, vec![other]);
        assert!(joiner.is_none());
    }
}
