//! The tracefs side of a plan: the `kprobe_events` line that defines it,
//! and its arguments as the kernel's `format` file describes them once
//! it is defined. Attach-time code, on [`ProbePlan`]; [`define_events`]
//! defines a session's tracefs probes and says how each probe is opened.

use crate::attach::attr::Opener;
use crate::attach::error::AttachError;
use crate::attach::pmu::ProbePmu;
use crate::attach::sys::SYSFS_PMUS;
use crate::attach::tracefs::{
    filter_fields, parse_format, Field, ProbeKind, Tracefs, TracefsError, TracefsProbes,
};
use crate::plan::{ArgPlan, ArgSource, AttachPoint, Backend, PlanError, ProbePlan};
use kprobe_perf_spec::{ArgType, BaseType, FetchBase, ProbeSpec, Target};

impl ProbePlan {
    /// Replaces the argument plans with the fields of the event's `format`
    /// file (`text`), in order: the kernel's names, the type written in
    /// the definition when there is one, else the field's own type (hex
    /// where the kernel prints hex, `char` where it prints `%c`).
    pub(crate) fn set_args_from_format(&mut self, text: &str) {
        let print_fmt = text
            .lines()
            .find(|l| l.starts_with("print fmt:"))
            .unwrap_or("");
        let fields: Vec<_> = parse_format(text)
            .into_iter()
            .filter(|f| !f.name.starts_with("common_") && !f.name.starts_with("__probe_"))
            .collect();
        let one_to_one = !self
            .spec
            .args
            .iter()
            .any(|a| a.fetch.base == FetchBase::AllArgs)
            && fields.len() == self.spec.args.len();
        self.args = fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let written = if one_to_one {
                    self.spec.args[i].ty
                } else {
                    None
                };
                ArgPlan {
                    name: f.name.clone(),
                    source: ArgSource::Field,
                    ty: written.unwrap_or_else(|| field_type(f, print_fmt)),
                }
            })
            .collect();
    }

    /// The kprobe_events (or, for a uprobe, uprobe_events) line that
    /// defines this probe in `group`.
    pub(crate) fn tracefs_definition(&self, group: &str) -> String {
        let target = match (&self.spec.target, &self.attach) {
            // kprobe_events knows no NAME@ADDR: give it the address.
            (
                Target::Symbol {
                    instance: Some(_), ..
                },
                AttachPoint::Address(a),
            ) => Target::Address(*a),
            // uprobe_events knows no symbols or SDT notes: give it the
            // file offset, and the reference counter's.
            (
                Target::User { .. },
                AttachPoint::User {
                    path,
                    offset,
                    ref_ctr,
                },
            ) => Target::User {
                path: path.clone(),
                location: match ref_ctr {
                    Some(ref_ctr) => kprobe_perf_spec::UserLocation::Counted {
                        offset: *offset,
                        ref_ctr: *ref_ctr,
                    },
                    None => kprobe_perf_spec::UserLocation::Offset(*offset),
                },
            },
            (t, _) => t.clone(),
        };
        let args = match target {
            Target::User { .. } => self.spec.args.iter().map(char_as_u8).collect(),
            _ => self.spec.args.clone(),
        };
        ProbeSpec {
            group: Some(group.to_string()),
            event: Some(self.event.clone()),
            target,
            args,
            ..self.spec.clone()
        }
        .to_string()
    }
}

/// A register a uprobe's definition reads as `char` is written as `u8`:
/// the same byte, which this engine prints as the character (the
/// argument keeps its type here), on a kernel whose uprobe_events knows
/// no `char` (before 6.7) as on one that does. A planned register-only
/// uprobe reaches uprobe_events for a command or `--backend tracefs`
/// without the kernel's README being asked about its types.
fn char_as_u8(arg: &kprobe_perf_spec::FetchArg) -> kprobe_perf_spec::FetchArg {
    match arg.ty {
        Some(ty) if ty.base == kprobe_perf_spec::BaseType::Char && !arg.fetch.reads_memory() => {
            kprobe_perf_spec::FetchArg {
                ty: Some(kprobe_perf_spec::ArgType {
                    base: kprobe_perf_spec::BaseType::Unsigned(8),
                    ..ty
                }),
                ..arg.clone()
            }
        }
        _ => arg.clone(),
    }
}

/// How each probe is opened, after [`define_events`].
pub(crate) struct Defined {
    /// The private tracefs group, when a probe is defined there.
    pub(crate) tracefs: Option<TracefsProbes>,
    /// Per probe, how it is opened.
    pub(crate) openers: Vec<Opener>,
    /// Per probe, where its arguments lie in its raw record (empty for
    /// PMU probes).
    pub(crate) field_offsets: Vec<Vec<usize>>,
}

/// Picks each probe's opener; tracefs-defined probes are defined in our
/// private group first, and their arguments located in the event format
/// (named and typed by the kernel when it gives them).
pub(crate) fn define_events(
    plans: &mut [ProbePlan],
    (pmu, uprobe_pmu): (Option<ProbePmu>, Option<ProbePmu>),
) -> Result<Defined, AttachError> {
    let mut tracefs_guard = None;
    let mut openers = Vec::with_capacity(plans.len());
    let mut field_offsets = Vec::with_capacity(plans.len());
    for plan in plans.iter_mut() {
        match (plan.backend, pmu) {
            (Backend::Pmu, _) if plan.is_user() => {
                let Some(up) = uprobe_pmu else {
                    return Err(AttachError::NoUprobePmu {
                        dir: format!("{SYSFS_PMUS}/uprobe"),
                    });
                };
                openers.push(Opener::Pmu(up));
                field_offsets.push(Vec::new());
            }
            (Backend::Pmu, Some(pmu)) => {
                openers.push(Opener::Pmu(pmu));
                field_offsets.push(Vec::new());
            }
            _ => {
                let kind = if plan.is_user() {
                    ProbeKind::User
                } else {
                    ProbeKind::Kernel
                };
                let guard = match tracefs_guard.as_mut() {
                    Some(guard) => guard,
                    None => tracefs_guard.insert(TracefsProbes::new(Tracefs::find_or_mount()?)),
                };
                let group = guard.group().to_string();
                guard.define(kind, &plan.tracefs_definition(&group), &plan.event)?;
                let id = guard.tracefs().event_id(&group, &plan.event)?;
                let fields = guard.tracefs().format(&group, &plan.event)?;
                if plan.args_from_kernel() {
                    // BTF names, $arg*, fprobe/tracepoint probes: the
                    // kernel named and typed the fields.
                    let path = guard.tracefs().root().join("events").join(&group);
                    let path = path.join(&plan.event).join("format");
                    if let Ok(text) = std::fs::read_to_string(path) {
                        plan.set_args_from_format(&text);
                    }
                }
                let (from_kernel, joined) = (plan.args_from_kernel(), plan.entry_join.is_some());
                if let Some(filter) = plan.filter.as_mut() {
                    if from_kernel {
                        filter
                            .recompile(&plan.args)
                            .map_err(|error| PlanError::Filter {
                                probe: plan.spec.to_string(),
                                error,
                            })?;
                    }
                    if !joined {
                        filter.place(&filter_fields(&fields));
                    }
                }
                let offsets = plan
                    .args
                    .iter()
                    .map(|a| {
                        fields
                            .iter()
                            .find(|f| f.name == a.name)
                            .map(|f| f.offset)
                            .ok_or_else(|| {
                                AttachError::Tracefs(TracefsError::Format {
                                    path: guard.tracefs().format_path(&group, &plan.event),
                                    field: a.name.clone(),
                                })
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                openers.push(Opener::Tracepoint(id));
                field_offsets.push(offsets);
            }
        }
    }
    Ok(Defined {
        tracefs: tracefs_guard,
        openers,
        field_offsets,
    })
}

/// The type of a `format` field as the kernel declared and prints it.
fn field_type(f: &Field, print_fmt: &str) -> ArgType {
    if f.c_type.starts_with("__data_loc") {
        return ArgType::scalar(BaseType::String);
    }
    let bits = match f.c_type.trim_start_matches("unsigned ") {
        "u8" | "s8" | "char" => 8u8,
        "u16" | "s16" | "short" => 16,
        "u32" | "s32" | "int" => 32,
        _ => 64,
    };
    let elem = usize::from(bits / 8);
    let shown = |how: &str| {
        print_fmt.contains(&format!(" {}={how}", f.name))
            || print_fmt.contains(&format!(" {}={{{how}", f.name))
    };
    let base = if shown("'%c'") {
        BaseType::Char
    } else if shown("0x%") {
        BaseType::Hex(bits)
    } else if f.c_type.starts_with('s') {
        BaseType::Signed(bits)
    } else {
        BaseType::Unsigned(bits)
    };
    let n = f.size / elem.max(1);
    ArgType {
        base,
        array: (n > 1).then(|| u32::try_from(n).unwrap_or(u32::MAX)),
    }
}
