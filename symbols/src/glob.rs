//! Shell-style globs over symbol and module names: `*` (any run of
//! characters), `?` (one byte: kernel symbol names are ASCII), `[abc]`, `[a-z]`, `[!a-z]` or `[^a-z]`
//! (one character of, or not of, a set) and `\x` (a literal `x`). A `[`
//! without its `]` is a literal `[`.

/// One compiled element of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Byte(u8),
    Any,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

impl Token {
    fn matches(&self, b: u8) -> bool {
        match self {
            Token::Byte(x) => *x == b,
            Token::Any => true,
            Token::Star => false,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= b && b <= hi) != *negated
            }
        }
    }
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    tokens: Vec<Token>,
}

/// True when `pattern` has a glob metacharacter (`*`, `?` or `[`), that is
/// when it names a set of symbols rather than one.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

impl Glob {
    /// Compiles `pattern`; every string is a valid pattern.
    pub(crate) fn new(pattern: &str) -> Self {
        let p = pattern.as_bytes();
        let mut tokens = Vec::with_capacity(p.len());
        let mut i = 0;
        while i < p.len() {
            match p[i] {
                b'*' => {
                    if tokens.last() != Some(&Token::Star) {
                        tokens.push(Token::Star);
                    }
                }
                b'?' => tokens.push(Token::Any),
                b'\\' if i + 1 < p.len() => {
                    i += 1;
                    tokens.push(Token::Byte(p[i]));
                }
                b'[' => match class(&p[i + 1..]) {
                    Some((token, used)) => {
                        tokens.push(token);
                        i += used;
                    }
                    None => tokens.push(Token::Byte(b'[')),
                },
                b => tokens.push(Token::Byte(b)),
            }
            i += 1;
        }
        Glob { tokens }
    }

    /// True when the whole of `text` matches.
    pub(crate) fn is_match(&self, text: &str) -> bool {
        let t = text.as_bytes();
        let toks = &self.tokens;
        let (mut ti, mut pi) = (0, 0);
        // Where to resume after the last `*`: (pattern index, text index).
        let mut resume: Option<(usize, usize)> = None;
        while ti < t.len() {
            match toks.get(pi) {
                Some(Token::Star) => {
                    pi += 1;
                    resume = Some((pi, ti));
                    continue;
                }
                Some(tok) if tok.matches(t[ti]) => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
            match resume {
                // Let the last `*` take one more character and retry.
                Some((p, s)) => {
                    pi = p;
                    ti = s + 1;
                    resume = Some((p, s + 1));
                }
                None => return false,
            }
        }
        toks[pi..].iter().all(|t| *t == Token::Star)
    }

    /// The literal text this glob matches when it has no metacharacter.
    pub(crate) fn literal(&self) -> Option<String> {
        let bytes = self
            .tokens
            .iter()
            .map(|t| match t {
                Token::Byte(b) => Some(*b),
                _ => None,
            })
            .collect::<Option<Vec<u8>>>()?;
        String::from_utf8(bytes).ok()
    }
}

/// Parses a class after its `[`: the token and the bytes used, `]`
/// included; `None` when the class never closes.
fn class(p: &[u8]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = matches!(p.first(), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let b = *p.get(i)?;
        // A `]` right after `[` or `[!` is a member, as in shells.
        if b == b']' && !first {
            return Some((Token::Class { negated, ranges }, i + 1));
        }
        first = false;
        let lo = if b == b'\\' {
            i += 1;
            *p.get(i)?
        } else {
            b
        };
        if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&c| c != b']') {
            let hi = p[i + 2];
            ranges.push((lo.min(hi), lo.max(hi)));
            i += 3;
        } else {
            ranges.push((lo, lo));
            i += 1;
        }
    }
}

/// True when the whole of `text` matches the glob `pattern`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).is_match(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).is_match(t)
    }

    #[test]
    fn stars_and_question_marks() {
        assert!(m("tcp_*", "tcp_sendmsg"));
        assert!(m("tcp_*", "tcp_"));
        assert!(!m("tcp_*", "tcp"));
        assert!(!m("tcp_*", "__pfx_tcp_sendmsg"));
        assert!(m("*sendmsg", "tcp_sendmsg"));
        assert!(m("*_send*", "tcp_sendmsg_locked"));
        assert!(m("do_sys_open*", "do_sys_open"));
        assert!(m("do_sys_open*", "do_sys_openat2"));
        assert!(m("a*b*c", "aXXbYYbZZc"));
        assert!(!m("a*b*c", "aXXbYYbZZ"));
        assert!(m("f?o", "foo"));
        assert!(!m("f?o", "fo"));
        assert!(m("***", ""));
        assert!(!m("", "x"));
        assert!(m("", ""));
    }

    #[test]
    fn classes_and_escapes() {
        assert!(m("vfs_[rw]*", "vfs_read"));
        assert!(m("vfs_[rw]*", "vfs_write"));
        assert!(!m("vfs_[rw]*", "vfs_open"));
        assert!(m("x[0-9]", "x7"));
        assert!(m("x[9-0]", "x7"), "reversed ranges are normalised");
        assert!(!m("x[!0-9]", "x7"));
        assert!(m("x[^0-9]", "xa"));
        assert!(m("x[]]", "x]"));
        assert!(m("x[a-]", "x-"));
        assert!(m("a\\*", "a*"));
        assert!(!m("a\\*", "ab"));
        assert!(m("a[", "a["), "an unclosed class is literal");
        assert!(m("a[b", "a[b"));
    }

    #[test]
    fn literal_and_is_glob() {
        assert_eq!(
            Glob::new("do_sys_open").literal().as_deref(),
            Some("do_sys_open")
        );
        assert_eq!(Glob::new("a\\*").literal().as_deref(), Some("a*"));
        assert_eq!(Glob::new("tcp_*").literal(), None);
        assert!(is_glob("tcp_*") && is_glob("f?") && is_glob("x[ab]"));
        assert!(!is_glob("do_sys_open") && !is_glob("ext4:ext4_file_open"));
    }
}
