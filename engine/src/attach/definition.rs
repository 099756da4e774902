//! The tracefs side of a plan: the `kprobe_events` line that defines it,
//! and its arguments as the kernel's `format` file describes them once
//! it is defined. Attach-time code, on [`ProbePlan`].

use crate::attach::tracefs::{parse_format, Field};
use crate::plan::{ArgPlan, ArgSource, AttachPoint, ProbePlan};
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
        ProbeSpec {
            group: Some(group.to_string()),
            event: Some(self.event.clone()),
            target,
            ..self.spec.clone()
        }
        .to_string()
    }
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
