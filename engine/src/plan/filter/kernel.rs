//! The kernel's side: the string to hand to `PERF_EVENT_IOC_SET_FILTER`
//! for a tracefs-defined event, and whether the kernel can run a filter
//! at all.
//!
//! The kernel resolves a filter's field names against the event's own
//! fields (those of its `format` file), then its generic fields (`cpu`,
//! `CPU`, `comm`, `COMM`, and `common_cpu` — all accepted by Debian's
//! 6.1.0-56 and 6.12.117 kernels and a 6.18 one), then the
//! common ones (`common_type`, `common_flags`, `common_preempt_count`,
//! `common_pid`) — `trace_find_event_field()` in
//! kernel/trace/trace_events.c. The filter runs on the record the probe
//! just wrote, so:
//!
//! - an argument is a format field of the same name;
//! - `tid` is `common_pid` (the `pid` of `struct trace_entry` is the
//!   thread's id);
//! - `cpu` and `comm` are the generic fields (the CPU the probe fires on,
//!   `current->comm`), named `CPU`/`COMM` when a probe argument takes the
//!   lower-case name;
//! - `pid`, the process id, is in no field: a filter on it runs in user
//!   space.

use std::cell::Cell;
use std::fmt;

use super::eval::{classify, MatchKind};
use super::{FieldDef, FieldRef, FieldType, Filter, Literal, Op, Predicate};

/// Longest filter string the kernel copies from the ioctl's argument
/// (`strndup_user(arg, PAGE_SIZE)`: 4096 bytes with the NUL on 4 KiB
/// pages).
pub const MAX_KERNEL_FILTER: usize = 4095;

/// Why a filter must run in user space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpaceReason {
    /// The fields (as written in the filter) the kernel cannot test.
    pub fields: Vec<String>,
    /// What is missing, in a sentence.
    pub reason: String,
}

impl fmt::Display for UserSpaceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Where a filter can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In the kernel: this is the string for `PERF_EVENT_IOC_SET_FILTER`.
    Kernel(String),
    /// In user space only, and why.
    UserSpace(UserSpaceReason),
}

/// The kernel reads a `~` pattern differently from its documentation in
/// two cases, so a filter with them stays in user space (where it means
/// what it says):
///
/// - a pattern whose first character (after a `!`) is a digit is compared
///   literally (`filter_parse_regex()` returns `MATCH_INDEX` before looking
///   for `*`): `comm ~ "1*"` passed no exec of `1abc`;
/// - a suffix pattern (`*sh`) on the generic `comm` compares the end of the
///   16-byte `comm` buffer, not of the name (`filter_pred_comm()` passes
///   `TASK_COMM_LEN` as the length): `comm ~ "*sh"` passed no exec of
///   `kpfxbash` while `comm ~ "kpfx*"` passed it.
///
/// Both observed with `sched_process_exec` filters on Debian's 6.1.0-56
/// and 6.12.117 kernels (QEMU) and on a 6.18.44 host.
fn glob_quirk(p: &Predicate, r: FieldRef) -> Option<UserSpaceReason> {
    let Literal::Str(s) = &p.value else {
        return None;
    };
    if p.op != Op::Glob {
        return None;
    }
    let body = s.strip_prefix('!').unwrap_or(s);
    if body.starts_with(|c: char| c.is_ascii_digit()) {
        return Some(UserSpaceReason {
            fields: vec![p.field.clone()],
            reason: format!(
                "the kernel compares a ~ pattern that starts with a digit literally, not as a \
                 glob (write the digit as a class, \"[{}]{}\", to filter in the kernel)",
                &body[..1],
                &body[1..]
            ),
        });
    }
    let (kind, suffix, _) = classify(s);
    if r == FieldRef::Comm && kind == MatchKind::Suffix && !suffix.is_empty() {
        let mut chars = suffix.chars();
        let first = chars.next().map(String::from).unwrap_or_default();
        let bang = if s.starts_with('!') { "!" } else { "" };
        return Some(UserSpaceReason {
            fields: vec![p.field.clone()],
            reason: format!(
                "the kernel's suffix match on comm (\"{s}\") compares the end of its 16-byte \
                 buffer, not of the name, so it misses shorter names (a full glob, \
                 \"{bang}*[{first}]{}\", works in the kernel)",
                chars.as_str()
            ),
        });
    }
    None
}

const PID_REASON: &str = "`pid` (the process id) is in no field of the kernel's records, which \
                          carry only the thread id (`common_pid`, which `tid` names)";

impl Filter {
    /// The fields (as written) that no kernel event carries, so that a
    /// filter using them always runs in user space: `pid`, unless a probe
    /// argument has that name.
    pub fn user_space_fields(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (p, (r, _)) in self.expr.predicates().into_iter().zip(&self.resolved) {
            if *r == FieldRef::Pid && !out.contains(&p.field.as_str()) {
                out.push(&p.field);
            }
        }
        out
    }

    /// The filter in the kernel's names, for an event whose format has
    /// the probe's arguments under their own names and no field named
    /// `cpu` or `comm`: arguments as they are, `tid` as `common_pid`,
    /// `cpu` and `comm` as the generic fields. Fails when the filter
    /// tests `pid` or the string is longer than [`MAX_KERNEL_FILTER`].
    /// [`Filter::where_it_can_run`] checks against the actual format.
    pub fn to_kernel_string(&self) -> Result<String, UserSpaceReason> {
        let names: Vec<Result<String, UserSpaceReason>> = self
            .expr
            .predicates()
            .into_iter()
            .zip(&self.resolved)
            .map(|(p, (r, _))| match (glob_quirk(p, *r), r) {
                (Some(why), _) => Err(why),
                (None, FieldRef::Arg(_)) => Ok(p.field.clone()),
                (None, FieldRef::Tid) => Ok("common_pid".to_string()),
                (None, FieldRef::Cpu) => Ok("cpu".to_string()),
                (None, FieldRef::Comm) => Ok("comm".to_string()),
                (None, FieldRef::Pid) => Err(UserSpaceReason {
                    fields: vec![p.field.clone()],
                    reason: PID_REASON.to_string(),
                }),
            })
            .collect();
        self.render(names)
    }

    fn render(
        &self,
        names: Vec<Result<String, UserSpaceReason>>,
    ) -> Result<String, UserSpaceReason> {
        let mut fields = Vec::new();
        let mut reasons = Vec::new();
        let mut ok = Vec::new();
        for n in names {
            match n {
                Ok(s) => ok.push(s),
                Err(e) => {
                    for f in e.fields {
                        if !fields.contains(&f) {
                            fields.push(f);
                        }
                    }
                    if !reasons.contains(&e.reason) {
                        reasons.push(e.reason);
                    }
                }
            }
        }
        if !reasons.is_empty() {
            return Err(UserSpaceReason {
                fields,
                reason: reasons.join("; "),
            });
        }
        let mut out = String::new();
        let i = Cell::new(0usize);
        self.expr.write_with(&mut out, &|_| {
            let k = i.get();
            i.set(k + 1);
            ok.get(k).cloned().unwrap_or_default()
        });
        if out.len() > MAX_KERNEL_FILTER {
            return Err(UserSpaceReason {
                fields: Vec::new(),
                reason: format!(
                    "the filter is {} bytes long; the kernel takes at most {MAX_KERNEL_FILTER}",
                    out.len()
                ),
            });
        }
        Ok(out)
    }

    /// Whether the kernel can run this filter on an event whose format
    /// file lists `format` (common fields included), and with which
    /// string. User space when: the filter tests `pid`; an argument is
    /// missing from the format or has another type there (the kernel
    /// would compare at its own width); `tid` has no `common_pid`; both
    /// `cpu` and `CPU` (or `comm` and `COMM`) are taken by event fields,
    /// hiding the generic one; or the string is too long.
    pub fn where_it_can_run(&self, format: &[FieldDef]) -> Placement {
        let find = |n: &str| format.iter().find(|f| f.name == n);
        let generic = |lower: &'static str, upper: &'static str, field: &str| {
            if find(lower).is_none() {
                Ok(lower.to_string())
            } else if find(upper).is_none() {
                Ok(upper.to_string())
            } else {
                Err(UserSpaceReason {
                    fields: vec![field.to_string()],
                    reason: format!(
                        "the event has its own fields `{lower}` and `{upper}`, which hide the \
                         kernel's generic {lower} field"
                    ),
                })
            }
        };
        let names = self
            .expr
            .predicates()
            .into_iter()
            .zip(&self.resolved)
            .map(|(p, (r, ty))| match (glob_quirk(p, *r), r) {
                (Some(why), _) => Err(why),
                (None, FieldRef::Arg(_)) => match find(&p.field) {
                    Some(f) if f.ty == *ty => Ok(p.field.clone()),
                    Some(f) => Err(UserSpaceReason {
                        fields: vec![p.field.clone()],
                        reason: format!(
                            "`{}` is {} in the event's format but {ty} in the probe",
                            p.field, f.ty
                        ),
                    }),
                    None => Err(UserSpaceReason {
                        fields: vec![p.field.clone()],
                        reason: format!(
                            "`{}` is not a field of the event (PMU probes carry no arguments \
                             in their records; tracefs-defined ones do)",
                            p.field
                        ),
                    }),
                },
                (None, FieldRef::Tid) => match find("common_pid") {
                    Some(_) => Ok("common_pid".to_string()),
                    None => Err(UserSpaceReason {
                        fields: vec![p.field.clone()],
                        reason: "the event's format has no `common_pid`".to_string(),
                    }),
                },
                (None, FieldRef::Cpu) => generic("cpu", "CPU", &p.field),
                (None, FieldRef::Comm) => generic("comm", "COMM", &p.field),
                (None, FieldRef::Pid) => Err(UserSpaceReason {
                    fields: vec![p.field.clone()],
                    reason: PID_REASON.to_string(),
                }),
            })
            .collect();
        match self.render(names) {
            Ok(s) => Placement::Kernel(s),
            Err(r) => Placement::UserSpace(r),
        }
    }
}

/// The common fields every event's format starts with, as the kernel
/// defines them (`trace_define_common_fields()`), for callers that have
/// not read a format file.
pub fn common_fields() -> Vec<FieldDef> {
    let int = |bits, signed| FieldType::Int { bits, signed };
    vec![
        FieldDef::new("common_type", int(16, false)),
        FieldDef::new("common_flags", int(8, false)),
        FieldDef::new("common_preempt_count", int(8, false)),
        FieldDef::new("common_pid", int(32, true)),
    ]
}
