//! Probe points and arguments by source, as `perf probe` spells them.

use crate::error::{Error, Result};

/// Where to probe, in source terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbePoint {
    /// `FUNC[@FILE]`: the entry of a function (every inlined copy too, unless
    /// inlines are turned off), `FUNC[@FILE]:RLINE` a line relative to the
    /// function's declaration line, `FUNC[@FILE];PATTERN` the lines whose
    /// source matches a glob (needs the source file).
    Function {
        /// The function's name.
        name: String,
        /// `@FILE`: only definitions in a file whose path ends with this.
        file: Option<String>,
        /// What part of the function.
        at: FunctionPart,
    },
    /// `FILE:LINE`: an absolute line of a source file.
    Line {
        /// The file, matched by its path's tail.
        file: String,
        /// The line.
        line: u64,
    },
}

/// The part of a function a [`ProbePoint::Function`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionPart {
    /// The entry.
    Entry,
    /// `:N`, the line N lines after the function's declaration line.
    RelativeLine(u64),
    /// `;PATTERN`, the lines whose source text matches the glob.
    Lazy(String),
}

impl ProbePoint {
    /// Parses `FUNC`, `FUNC@FILE`, `FUNC:RLINE`, `FUNC;PATTERN`, `FILE:LINE`.
    pub fn parse(text: &str) -> Result<Self> {
        let err = |reason: &str| Error::Syntax {
            input: text.to_string(),
            reason: reason.to_string(),
        };
        let text_t = text.trim();
        if text_t.is_empty() {
            return Err(err(
                "empty probe point; give FUNC, FUNC:RLINE, FILE:LINE or FUNC;PATTERN",
            ));
        }
        if let Some((head, pattern)) = text_t.split_once(';') {
            let (name, file) = split_at_file(head);
            if name.is_empty() || is_file(name) {
                return Err(err("a lazy pattern needs a function (FUNC;PATTERN)"));
            }
            return Ok(ProbePoint::Function {
                name: name.to_string(),
                file,
                at: FunctionPart::Lazy(pattern.to_string()),
            });
        }
        let (head, line) = match text_t.rsplit_once(':') {
            Some((h, l)) => {
                let n = l
                    .parse::<u64>()
                    .map_err(|_| err("the part after ':' must be a line number"))?;
                (h, Some(n))
            }
            None => (text_t, None),
        };
        // FUNC@FILE[:RLINE] names a file too, after the function.
        if is_file(head) && !head.contains('@') {
            let line = line.ok_or_else(|| err("a file needs a line (FILE:LINE)"))?;
            return Ok(ProbePoint::Line {
                file: head.to_string(),
                line,
            });
        }
        let (name, file) = split_at_file(head);
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(err("a function name is letters, digits and '_'"));
        }
        let at = match line {
            Some(n) => FunctionPart::RelativeLine(n),
            None => FunctionPart::Entry,
        };
        Ok(ProbePoint::Function {
            name: name.to_string(),
            file,
            at,
        })
    }
}

fn is_file(s: &str) -> bool {
    s.contains('/') || s.ends_with(".c") || s.ends_with(".h") || s.ends_with(".S")
}

fn split_at_file(s: &str) -> (&str, Option<String>) {
    match s.split_once('@') {
        Some((n, f)) => (n, Some(f.to_string())),
        None => (s, None),
    }
}

/// One step into a variable: `->field`, `.field` or `[N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// `->field`: through a pointer.
    Arrow(String),
    /// `.field`: inside a structure.
    Dot(String),
    /// `[N]`: an element of an array or pointer.
    Index(u64),
}

/// An argument to fetch at a probe site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeArg {
    /// `[NAME=]VAR[->F|.F|[N]]...[:TYPE]`.
    Var {
        /// `NAME=`, if given.
        name: Option<String>,
        /// The variable.
        var: String,
        /// Field and index steps.
        path: Vec<Access>,
        /// `:TYPE` (a kprobe type such as `u32`, `x64`, `string`).
        cast: Option<String>,
    },
    /// `$vars`: every local variable and parameter with a location at the site.
    Vars,
    /// `$params`: every parameter with a location at the site.
    Params,
}

impl ProbeArg {
    /// Parses one argument.
    pub fn parse(text: &str) -> Result<Self> {
        let err = |reason: &str| Error::Syntax {
            input: text.to_string(),
            reason: reason.to_string(),
        };
        match text {
            "$vars" => return Ok(ProbeArg::Vars),
            "$params" => return Ok(ProbeArg::Params),
            _ => {}
        }
        let (name, rest) = match text.split_once('=') {
            Some((n, r)) if is_ident(n) => (Some(n.to_string()), r),
            Some(_) => return Err(err("NAME= must be an identifier")),
            None => (None, text),
        };
        let (expr, cast) = match rest.rsplit_once(':') {
            Some((e, c)) if !c.is_empty() && !c.contains(['>', '.', '[']) => {
                (e, Some(c.to_string()))
            }
            _ => (rest, None),
        };
        let var_end = expr.find(['-', '.', '[']).unwrap_or(expr.len());
        let var = &expr[..var_end];
        if !is_ident(var) {
            return Err(err(
                "expected a C variable name, then ->field, .field or [N]",
            ));
        }
        let mut path = Vec::new();
        let mut s = &expr[var_end..];
        while !s.is_empty() {
            let (step, len) = if let Some(r) = s.strip_prefix("->") {
                let n = r.find(['-', '.', '[']).unwrap_or(r.len());
                (Access::Arrow(r[..n].to_string()), 2 + n)
            } else if let Some(r) = s.strip_prefix('.') {
                let n = r.find(['-', '.', '[']).unwrap_or(r.len());
                (Access::Dot(r[..n].to_string()), 1 + n)
            } else if let Some(r) = s.strip_prefix('[') {
                let close = r.find(']').ok_or_else(|| err("'[' without ']'"))?;
                let i = r[..close]
                    .parse::<u64>()
                    .map_err(|_| err("an index is a number"))?;
                (Access::Index(i), close + 2)
            } else {
                return Err(err("expected ->field, .field or [N]"));
            };
            if let Access::Arrow(f) | Access::Dot(f) = &step {
                if !is_ident(f) {
                    return Err(err("a field name is an identifier"));
                }
            }
            path.push(step);
            s = &s[len..];
        }
        Ok(ProbeArg::Var {
            name,
            var: var.to_string(),
            path,
            cast,
        })
    }

    /// The argument's name in the kprobe_events definition: `NAME=` if given,
    /// else the last field, else the variable (`_TYPE` added for a cast, as perf does).
    pub fn event_name(&self) -> String {
        match self {
            ProbeArg::Var { name: Some(n), .. } => n.clone(),
            ProbeArg::Var {
                var, path, cast, ..
            } => {
                let base = path
                    .iter()
                    .rev()
                    .find_map(|a| match a {
                        Access::Arrow(f) | Access::Dot(f) => Some(f.clone()),
                        Access::Index(_) => None,
                    })
                    .unwrap_or_else(|| var.clone());
                match cast {
                    Some(c) if path.is_empty() => format!("{base}_{c}"),
                    _ => base,
                }
            }
            ProbeArg::Vars => "$vars".into(),
            ProbeArg::Params => "$params".into(),
        }
    }
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points() {
        assert_eq!(
            ProbePoint::parse("do_sys_openat2:3").unwrap(),
            ProbePoint::Function {
                name: "do_sys_openat2".into(),
                file: None,
                at: FunctionPart::RelativeLine(3)
            }
        );
        assert_eq!(
            ProbePoint::parse("fs/open.c:1400").unwrap(),
            ProbePoint::Line {
                file: "fs/open.c".into(),
                line: 1400
            }
        );
        assert_eq!(
            ProbePoint::parse("f@a.c;x = *").unwrap(),
            ProbePoint::Function {
                name: "f".into(),
                file: Some("a.c".into()),
                at: FunctionPart::Lazy("x = *".into())
            }
        );
        for (text, file, at) in [
            (
                "do_sys_openat2@fs/open.c:3",
                "fs/open.c",
                FunctionPart::RelativeLine(3),
            ),
            (
                "v9fs_file_open@vfs_file.c",
                "vfs_file.c",
                FunctionPart::Entry,
            ),
        ] {
            assert_eq!(
                ProbePoint::parse(text).unwrap(),
                ProbePoint::Function {
                    name: text.split('@').next().unwrap().into(),
                    file: Some(file.into()),
                    at
                },
                "{text}"
            );
        }
        assert!(ProbePoint::parse("f:x").is_err());
        assert!(ProbePoint::parse("a.c").is_err());
    }

    #[test]
    fn args() {
        let a = ProbeArg::parse("how->flags").unwrap();
        assert_eq!(a.event_name(), "flags");
        let a = ProbeArg::parse("x=a.b[3]->c:u8").unwrap();
        assert_eq!(
            a,
            ProbeArg::Var {
                name: Some("x".into()),
                var: "a".into(),
                path: vec![
                    Access::Dot("b".into()),
                    Access::Index(3),
                    Access::Arrow("c".into())
                ],
                cast: Some("u8".into()),
            }
        );
        assert_eq!(
            ProbeArg::parse("filename:string").unwrap().event_name(),
            "filename_string"
        );
        assert!(ProbeArg::parse("a->").is_err());
        assert!(ProbeArg::parse("1x").is_err());
    }
}
