//! Planning probe definitions given as text: parse each, resolve it
//! against the kernel's symbols and choose its backend (many kernel probes
//! at once go through tracefs), with an optional filter per probe. An
//! embedder calls [`Kernel::plan`](crate::Kernel::plan) and
//! [`Kernel::plan_filtered`](crate::Kernel::plan_filtered); the
//! workspace's tests reach these through `testing`.

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

use crate::plan::{resolve, Backend, BackendChoice, PlanError, ProbePlan};
use kprobe_perf_spec::{ProbeSpec, Target};

/// Parses and plans probe definitions for this machine's architecture,
/// choosing the backend of each automatically (see [`plan_probes_with`]).
///
/// `symbols` may be empty (kallsyms unreadable); names are then left for
/// the kernel to check.
#[cfg(feature = "test-util")]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn plan_probes<S: AsRef<str>>(
    specs: &[S],
    symbols: &KernelSymbols,
) -> Result<Vec<ProbePlan>, PlanError> {
    plan_probes_with(specs, symbols, BackendChoice::Auto)
}

/// As [`plan_probes_with`], each definition with its filter (`None`: no
/// filter) in the kernel's ftrace grammar (see [`filter`](crate::plan::filter)). A filter is
/// checked against its probe's arguments before anything is opened (a
/// refusal has a caret under the token). With
/// [`Auto`](BackendChoice::Auto), a probe whose filter the kernel
/// could run only on a tracefs-defined event (it tests an argument, which
/// a PMU probe's record does not carry) goes through tracefs, so that the
/// kernel drops what the filter rejects before it reaches the ring.
pub(crate) fn plan_probes_filtered<S: AsRef<str>, F: AsRef<str>>(
    specs: &[(S, Option<F>)],
    symbols: &KernelSymbols,
    choice: BackendChoice,
) -> Result<Vec<ProbePlan>, PlanError> {
    let texts: Vec<&str> = specs.iter().map(|(s, _)| s.as_ref()).collect();
    let plans = plan_probes_with(&texts, symbols, choice)?;
    let arch = Arch::host().ok_or(PlanError::UnsupportedArch)?;
    plans
        .into_iter()
        .zip(specs)
        .map(|(plan, (text, filter))| {
            let Some(filter) = filter else {
                return Ok(plan);
            };
            let refused = |error| PlanError::Filter {
                probe: text.as_ref().to_string(),
                error,
            };
            let event = plan.event.clone();
            let plan = plan.with_filter(filter.as_ref()).map_err(refused)?;
            let in_kernel = plan.filter.as_ref().is_some_and(|f| f.in_kernel());
            if in_kernel
                || choice != BackendChoice::Auto
                || plan.backend != Backend::Pmu
                || plan.entry_join.is_some()
            {
                return Ok(plan);
            }
            // Through tracefs, the record carries the arguments.
            let spec = ProbeSpec::parse(text.as_ref(), arch)?;
            let Ok(mut traced) = resolve(spec, symbols, arch, BackendChoice::Tracefs) else {
                return Ok(plan);
            };
            traced.event = event;
            let traced = traced.with_filter(filter.as_ref()).map_err(refused)?;
            Ok(if traced.filter.as_ref().is_some_and(|f| f.in_kernel()) {
                traced
            } else {
                plan
            })
        })
        .collect()
}

/// From this many kernel probes on, [`plan_probes_with`] puts every kernel
/// probe on the tracefs route when the choice is
/// [`Auto`](BackendChoice::Auto).
pub(crate) const BULK_THROUGH_TRACEFS: usize = 64;

/// As [`plan_probes`], with an explicit backend choice. With
/// [`Auto`](BackendChoice::Auto) and at least
/// [`BULK_THROUGH_TRACEFS`] kernel probes, all kernel probes go through
/// tracefs. Event names that repeat get a `_2`, `_3` ... suffix so each
/// probe stays distinct. The plans are the user's probes only, in order:
/// the calls a PMU kretprobe saw enter but not return are counted by the
/// [`Session`](crate::session::Session) itself
/// ([`Session::call_counts`](crate::session::Session::call_counts)).
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn plan_probes_with<S: AsRef<str>>(
    specs: &[S],
    symbols: &KernelSymbols,
    choice: BackendChoice,
) -> Result<Vec<ProbePlan>, PlanError> {
    let arch = Arch::host().ok_or(PlanError::UnsupportedArch)?;
    let parsed = specs
        .iter()
        .map(|s| ProbeSpec::parse(s.as_ref(), arch))
        .collect::<Result<Vec<ProbeSpec>, _>>()?;
    let is_kernel = |s: &ProbeSpec| !matches!(s.target, Target::User { .. });
    // Many kernel probes at once go through tracefs under `auto`: one
    // kernel kprobe per function, shared by every CPU's event, where the
    // PMU registers one per CPU and fd; detaching 1,000 is ~40% faster.
    let bulk = choice == BackendChoice::Auto
        && parsed.iter().filter(|s| is_kernel(s)).count() >= BULK_THROUGH_TRACEFS;
    parsed
        .into_iter()
        .map(|spec| {
            let choice = if bulk && is_kernel(&spec) {
                BackendChoice::Tracefs
            } else {
                choice
            };
            resolve(spec, symbols, arch, choice)
        })
        .collect::<Result<Vec<ProbePlan>, PlanError>>()
        .map(|mut plans| {
            let mut seen = std::collections::HashMap::<String, usize>::new();
            for p in &mut plans {
                let n = seen.entry(p.event.clone()).or_insert(0);
                *n += 1;
                if *n > 1 {
                    p.event = format!("{}_{n}", p.event);
                }
            }
            plans
        })
}
