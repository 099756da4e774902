//! A plan's filter run on decoded events: the compiled program of a
//! [`Filter`] (compiling it is the plan's) evaluated on an [`Event`].

use crate::decode::{Event, Value};
use crate::plan::filter::eval::{compare, glob_match, MatchKind, Program, Test, FALSE};
use crate::plan::filter::{FieldRef, Filter};

impl Filter {
    /// True when `event` passes the filter. Allocation-free; an event
    /// whose argument is missing or of another type than compiled for
    /// (which a session built from the same plan never produces) fails
    /// that predicate.
    pub fn matches(&self, event: &Event) -> bool {
        self.program.run(event)
    }
}

impl Program {
    pub(crate) fn run(&self, ev: &Event) -> bool {
        let mut i = 0;
        while let Some(step) = self.steps.get(i) {
            let r = self.tests.get(step.test).is_some_and(|t| t.eval(ev));
            if r == step.jump_when {
                if step.target == FALSE {
                    return false;
                }
                i = step.target;
            } else {
                i += 1;
            }
        }
        true
    }
}

fn int_of(field: FieldRef, ev: &Event) -> Option<u64> {
    match field {
        FieldRef::Arg(i) => match ev.args.get(i)? {
            Value::Int { raw, .. } => Some(*raw),
            _ => None,
        },
        FieldRef::Pid => Some(ev.pid as i64 as u64),
        FieldRef::Tid => Some(ev.tid as i64 as u64),
        FieldRef::Cpu => Some(u64::from(ev.cpu)),
        FieldRef::Comm => None,
    }
}

fn str_of(field: FieldRef, ev: &Event) -> Option<&str> {
    match field {
        FieldRef::Arg(i) => match ev.args.get(i)? {
            Value::Str(Some(s)) => Some(s),
            _ => None,
        },
        FieldRef::Comm => Some(&ev.comm),
        _ => None,
    }
}

impl Test {
    fn eval(&self, ev: &Event) -> bool {
        match self {
            Test::Int {
                field,
                op,
                value,
                bits,
                signed,
            } => int_of(*field, ev).is_some_and(|a| compare(a, *op, *value, *bits, *signed)),
            Test::Str {
                field,
                kind,
                pattern,
                negate,
            } => {
                // A string the kernel could not read (a fault) matches
                // nothing, `!=` included.
                let Some(s) = str_of(*field, ev) else {
                    return false;
                };
                let m = match kind {
                    MatchKind::Full => s == &**pattern,
                    MatchKind::Prefix => s.starts_with(&**pattern),
                    MatchKind::Suffix => s.ends_with(&**pattern),
                    MatchKind::Contains => s.contains(&**pattern),
                    MatchKind::Glob => glob_match(pattern.as_bytes(), s.as_bytes()),
                };
                m != *negate
            }
        }
    }
}
