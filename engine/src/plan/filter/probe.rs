//! A filter attached to one probe ([`ProbePlan::filter`]): compiled
//! against the probe's arguments when it is planned, then placed when the
//! session opens the probe — in the kernel (`PERF_EVENT_IOC_SET_FILTER` on
//! every fd of the probe) when the event's record carries every field it
//! tests, else in user space, where the session drops the events it
//! rejects before any sink sees them.

use std::fmt;

use super::{common_fields, FieldDef, FieldType, Filter, FilterError, Placement};
use crate::plan::{ArgPlan, Backend, ProbePlan};

/// Where a probe's filter runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterRuns {
    /// In the kernel, with this string (the filter in the event's own
    /// field names).
    Kernel(String),
    /// In user space, and why not in the kernel.
    UserSpace(String),
}

impl fmt::Display for FilterRuns {
    /// `kernel`, or `user space (REASON)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterRuns::Kernel(_) => f.write_str("kernel"),
            FilterRuns::UserSpace(why) => write!(f, "user space ({why})"),
        }
    }
}

/// A probe's filter: as written, compiled, and where it runs.
#[derive(Debug, Clone)]
pub struct ProbeFilter {
    text: String,
    filter: Filter,
    runs: FilterRuns,
}

impl PartialEq for ProbeFilter {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.runs == other.runs
    }
}

impl Eq for ProbeFilter {}

/// The fields a filter may test on a probe with these arguments: each
/// argument under its name, with the type of its declared type.
pub fn fields_of(args: &[ArgPlan]) -> Vec<FieldDef> {
    args.iter()
        .map(|a| FieldDef::new(a.name.clone(), FieldType::of_arg(&a.ty)))
        .collect()
}

/// The fields of a probe's record as the kernel will define them: the
/// common fields, then for a tracefs probe its arguments (a PMU probe's
/// record carries no argument).
pub fn expected_format(plan: &ProbePlan) -> Vec<FieldDef> {
    let mut format = common_fields();
    if plan.backend == Backend::Tracefs {
        format.extend(fields_of(&plan.args));
    }
    format
}

impl ProbeFilter {
    /// Compiles `text` against `plan`'s arguments (see
    /// [`Filter::compile`]) and places it where `plan`'s record lets it
    /// run ([`ProbeFilter::place`] with [`expected_format`]); a joined
    /// return probe ([`crate::plan::entry_join`]) filters in user space.
    pub fn compile(text: &str, plan: &ProbePlan) -> Result<ProbeFilter, FilterError> {
        let filter = Filter::compile(text, &fields_of(&plan.args))?;
        let mut f = ProbeFilter {
            text: text.to_string(),
            filter,
            runs: FilterRuns::UserSpace(String::new()),
        };
        if plan.entry_join.is_some() {
            f.runs = FilterRuns::UserSpace(
                "its entry values are joined to the return in user space".into(),
            );
        } else {
            f.place(&expected_format(plan));
            if plan.backend == Backend::Pmu && !f.in_kernel() {
                f.explain_pmu();
            }
        }
        Ok(f)
    }

    /// The reason a PMU probe's filter runs in user space, in one
    /// sentence: the arguments it tests are in no PMU record; `pid` is in
    /// no record at all.
    fn explain_pmu(&mut self) {
        let mut args: Vec<&str> = Vec::new();
        let mut pid = false;
        for (p, r) in self
            .filter
            .expr()
            .predicates()
            .into_iter()
            .zip(self.filter.fields())
        {
            match r {
                super::FieldRef::Arg(_) if !args.contains(&p.field.as_str()) => args.push(&p.field),
                super::FieldRef::Pid => pid = true,
                _ => {}
            }
        }
        let mut why = Vec::new();
        if !args.is_empty() {
            let list: Vec<String> = args.iter().map(|a| format!("`{a}`")).collect();
            why.push(format!(
                "a PMU probe's record carries no argument ({}); a tracefs-defined one's does \
                 (the automatic or tracefs backend)",
                list.join(", ")
            ));
        }
        if pid {
            why.push("`pid` is in no kernel record (they carry the thread id, `tid`)".to_string());
        }
        if !why.is_empty() {
            self.runs = FilterRuns::UserSpace(why.join("; "));
        }
    }

    /// The filter as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The compiled filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// Where it runs.
    pub fn runs(&self) -> &FilterRuns {
        &self.runs
    }

    /// True when the kernel runs it.
    pub fn in_kernel(&self) -> bool {
        matches!(self.runs, FilterRuns::Kernel(_))
    }

    /// Places the filter for an event whose `format` lists these fields
    /// (common fields included): in the kernel when it can run there
    /// ([`Filter::where_it_can_run`]).
    pub fn place(&mut self, format: &[FieldDef]) {
        self.runs = match self.filter.where_it_can_run(format) {
            Placement::Kernel(s) => FilterRuns::Kernel(s),
            Placement::UserSpace(why) => FilterRuns::UserSpace(why.reason),
        };
    }

    /// Runs it in user space from now on, for `reason`.
    pub fn run_in_user_space(&mut self, reason: impl Into<String>) {
        self.runs = FilterRuns::UserSpace(reason.into());
    }

    /// Compiles the filter again against new arguments (the kernel named
    /// and typed them: [`ProbePlan::set_args_from_format`]), keeping
    /// where it runs.
    pub(crate) fn recompile(&mut self, args: &[ArgPlan]) -> Result<(), FilterError> {
        self.filter = Filter::compile(&self.text, &fields_of(args))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::probes::plan_probes_filtered;
    use crate::plan::PlanError;
    use crate::plan::{Backend, BackendChoice};
    use kprobe_perf_symbols::KernelSymbols;

    use super::FilterRuns;

    fn symbols() -> KernelSymbols {
        KernelSymbols::parse("ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\n")
            .unwrap()
    }

    /// (backend, where the filter runs) of one probe planned with `filter`.
    fn placed(filter: &str, choice: BackendChoice) -> (Backend, FilterRuns) {
        let specs = [("p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32", Some(filter))];
        let plans = plan_probes_filtered(&specs, &symbols(), choice).unwrap();
        let p = &plans[0];
        (p.backend, p.filter.as_ref().unwrap().runs().clone())
    }

    #[test]
    fn auto_takes_the_tracefs_route_when_the_kernel_can_then_filter() {
        // Arguments: only a tracefs event's record has them.
        assert_eq!(
            placed("dfd == -100 && flags & 0x40", BackendChoice::Auto),
            (
                Backend::Tracefs,
                FilterRuns::Kernel("dfd == -100 && flags & 0x40".into())
            )
        );
        // Common fields: any record has them, the PMU stays.
        assert_eq!(
            placed("comm == \"cat\" || tid == 7", BackendChoice::Auto),
            (
                Backend::Pmu,
                FilterRuns::Kernel("comm == \"cat\" || common_pid == 7".into())
            )
        );
        // `pid` runs in user space whatever the route: the PMU stays.
        let (backend, runs) = placed("pid == 7 && dfd == 3", BackendChoice::Auto);
        assert_eq!(backend, Backend::Pmu);
        assert_eq!(
            runs,
            FilterRuns::UserSpace(
                "a PMU probe's record carries no argument (`dfd`); a tracefs-defined one's does \
                 (the automatic or tracefs backend); `pid` is in no kernel record (they carry the \
                 thread id, `tid`)"
                    .into()
            )
        );
    }

    #[test]
    fn an_explicit_backend_is_kept() {
        assert_eq!(
            placed("dfd == -100", BackendChoice::Pmu),
            (
                Backend::Pmu,
                FilterRuns::UserSpace(
                    "a PMU probe's record carries no argument (`dfd`); a tracefs-defined one's \
                     does (the automatic or tracefs backend)"
                        .into()
                )
            )
        );
        assert_eq!(
            placed("dfd == -100", BackendChoice::Tracefs),
            (Backend::Tracefs, FilterRuns::Kernel("dfd == -100".into()))
        );
        // A glob that the kernel reads otherwise stays in user space.
        let (backend, runs) = placed("comm ~ \"*sh\"", BackendChoice::Tracefs);
        assert_eq!(backend, Backend::Tracefs);
        assert!(
            matches!(&runs, FilterRuns::UserSpace(why) if why.contains("16-byte buffer")),
            "{runs:?}"
        );
    }

    #[test]
    fn a_bad_filter_is_refused_with_a_caret_before_anything_opens() {
        let specs = [
            ("p:do_sys_openat2 dfd=%di:s32", None),
            (
                "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32",
                Some("flags & 0x40 && mode == 1"),
            ),
        ];
        let e = plan_probes_filtered(&specs, &symbols(), BackendChoice::Auto).unwrap_err();
        assert!(matches!(e, PlanError::Filter { .. }));
        assert_eq!(
            e.to_string(),
            "the filter of p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32 is refused: unknown field \
             `mode`: this probe's fields are dfd, flags, comm, pid, tid, cpu\n  flags & 0x40 && \
             mode == 1\n                  ^^^^"
        );
        let specs = [("p:do_sys_openat2 dfd=%di:s32", Some("(dfd == 1"))];
        let e = plan_probes_filtered(&specs, &symbols(), BackendChoice::Auto).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the filter of p:do_sys_openat2 dfd=%di:s32 is refused: unbalanced parenthesis: this \
             `(` is never closed\n  (dfd == 1\n  ^"
        );
        let specs = [("p:do_sys_openat2 dfd=%di:s32", Some("dfd ~ \"3*\""))];
        let e = plan_probes_filtered(&specs, &symbols(), BackendChoice::Auto).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the filter of p:do_sys_openat2 dfd=%di:s32 is refused: `~` matches strings, but \
             `dfd` is a number (s32): use ==, !=, <, <=, >, >= or &\n  dfd ~ \"3*\"\n      ^"
        );
    }
}
