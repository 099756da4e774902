//! The glob of lazy lines: `*` any text, `?` one character, spaces ignored.

/// Whether the whole of `line` matches `pattern` (spaces ignored on both sides).
pub(crate) fn lazy_match(line: &str, pattern: &str) -> bool {
    let l: Vec<char> = line.chars().filter(|c| !c.is_whitespace()).collect();
    let p: Vec<char> = pattern.chars().filter(|c| !c.is_whitespace()).collect();
    glob(&l, &p)
}

fn glob(s: &[char], p: &[char]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some(('*', rest)) => (0..=s.len()).any(|i| glob(&s[i..], rest)),
        Some(('?', rest)) => !s.is_empty() && glob(&s[1..], rest),
        Some((c, rest)) => s.first() == Some(c) && glob(&s[1..], rest),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lazy() {
        assert!(super::lazy_match(
            "\tfd = get_unused_fd_flags(how->flags);",
            "fd=get_unused*"
        ));
        assert!(!super::lazy_match("return fd;", "fd=*"));
    }
}
