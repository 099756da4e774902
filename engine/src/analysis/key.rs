//! One part of a map key: a built-in property of an event or an argument
//! value, ordered and hashable (unlike [`Value`]).

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::decode::Value;
use kprobe_perf_spec::BaseType;

/// One part of a map key. Keys order by variant, then value: numbers
/// numerically, strings bytewise, probes by their index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KeyPart {
    /// A probe, by index (shown by its event name).
    Probe {
        /// Index in the session's plan list.
        index: usize,
        /// Its event name.
        name: Arc<str>,
    },
    /// A command name.
    Comm(Arc<str>),
    /// A process id.
    Pid(i32),
    /// A thread id.
    Tid(i32),
    /// A CPU.
    Cpu(u32),
    /// A signed argument (`sN`).
    Signed(i64),
    /// An unsigned argument (`uN`, bitfields).
    Unsigned(u64),
    /// A hexadecimal argument (`xN`, `symbol`).
    Hex(u64),
    /// A `char` argument.
    Char(u8),
    /// A string argument; `None` when the kernel could not read it.
    Text(Option<String>),
    /// An array argument.
    List(Vec<KeyPart>),
    /// The probe has no argument of that name.
    Missing,
}

impl KeyPart {
    /// The key of an argument value.
    pub(crate) fn of_value(v: &Value) -> KeyPart {
        match v {
            Value::Int { raw, ty } => match ty {
                BaseType::Signed(_) => KeyPart::Signed(*raw as i64),
                BaseType::Hex(_) | BaseType::Symbol => KeyPart::Hex(*raw),
                BaseType::Char => KeyPart::Char(*raw as u8),
                _ => KeyPart::Unsigned(*raw),
            },
            Value::Str(s) => KeyPart::Text(s.clone()),
            Value::Array(items) => KeyPart::List(items.iter().map(KeyPart::of_value).collect()),
            Value::Unknown => KeyPart::Missing,
        }
    }
}

impl fmt::Display for KeyPart {
    /// As the event lines print values: decimal, `0x` hex, strings in
    /// double quotes, `(fault)`, `{a,b}`; `-` for a missing argument.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Probe { name, .. } => f.write_str(name),
            KeyPart::Comm(c) => f.write_str(c),
            KeyPart::Pid(v) | KeyPart::Tid(v) => write!(f, "{v}"),
            KeyPart::Cpu(v) => write!(f, "{v}"),
            KeyPart::Signed(v) => write!(f, "{v}"),
            KeyPart::Unsigned(v) => write!(f, "{v}"),
            KeyPart::Hex(v) => write!(f, "0x{v:x}"),
            KeyPart::Char(c) => write!(f, "'{}'", char::from(*c)),
            KeyPart::Text(Some(s)) => write!(f, "\"{s}\""),
            KeyPart::Text(None) => f.write_str("(fault)"),
            KeyPart::List(items) => {
                f.write_str("{")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("}")
            }
            KeyPart::Missing => f.write_str("-"),
        }
    }
}

impl Serialize for KeyPart {
    /// Numbers as JSON numbers (hex ones too), names and strings as
    /// strings, a char as a one-character string, a fault or a missing
    /// argument as `null`, an array as an array.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            KeyPart::Probe { name, .. } | KeyPart::Comm(name) => s.serialize_str(name),
            KeyPart::Pid(v) | KeyPart::Tid(v) => s.serialize_i32(*v),
            KeyPart::Cpu(v) => s.serialize_u32(*v),
            KeyPart::Signed(v) => s.serialize_i64(*v),
            KeyPart::Unsigned(v) | KeyPart::Hex(v) => s.serialize_u64(*v),
            KeyPart::Char(c) => s.serialize_char(char::from(*c)),
            KeyPart::Text(Some(t)) => s.serialize_str(t),
            KeyPart::Text(None) | KeyPart::Missing => s.serialize_none(),
            KeyPart::List(items) => items.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_like_values() {
        let cases = [
            (Value::new(u64::MAX, BaseType::Signed(64)), "-1", "-1"),
            (Value::new(4096, BaseType::Unsigned(64)), "4096", "4096"),
            (Value::new(255, BaseType::Hex(32)), "0xff", "255"),
            (Value::new(0x41, BaseType::Char), "'A'", "\"A\""),
            (Value::Str(Some("/etc".into())), "\"/etc\"", "\"/etc\""),
            (Value::Str(None), "(fault)", "null"),
            (
                Value::Array(vec![
                    Value::new(1, BaseType::Unsigned(8)),
                    Value::new(2, BaseType::Unsigned(8)),
                ]),
                "{1,2}",
                "[1,2]",
            ),
        ];
        for (v, text, json) in cases {
            let k = KeyPart::of_value(&v);
            assert_eq!(k.to_string(), v.to_string(), "{v:?}");
            assert_eq!(k.to_string(), text);
            assert_eq!(serde_json::to_string(&k).unwrap(), json);
        }
        assert!(KeyPart::Signed(-2) < KeyPart::Signed(1));
    }
}
