//! Few globs for many functions: the cover of a set of names by globs
//! the kernel's ftrace filter understands (`lib/glob.c`, through
//! `filter_parse_regex`: `*`, `?`, `[abc]`, `[a-z]`, `[!a-z]`, `\x`; no
//! `[^...]`), each matching only wanted names.
//!
//! An fprobe event takes one glob and no exclusion on the kernels that
//! have them (6.4 to 6.15 at least: `register_fprobe(fp, symbol, NULL)`),
//! and each definition costs the kernel an ftrace_ops registration, so
//! covering N functions cheaply means few globs, each as large as it can
//! be while matching nothing to leave out.
//!
//! The cover walks the sorted names as a trie, one byte per level: a
//! subtree with nothing to avoid is one glob `PREFIX*`; at a node that has
//! something to avoid, the clean children are gathered in one character
//! class (`ext4_[a-km-z]*`), a wanted name ending there is given alone,
//! and the children with something to avoid are walked in turn. The globs
//! are disjoint: each wanted name is matched by exactly one of them.

use crate::glob::Glob;

/// One glob of a cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoverGlob {
    /// The glob, in the kernel's syntax.
    pub pattern: String,
    /// How many wanted names it matches.
    pub kept: usize,
}

/// Bytes that are glob syntax somewhere (escaped in a literal part, never
/// put in a character class, where `]`, `-`, `!` and `^` also mean
/// something to one reader or another: `^` negates a class for shells and
/// for [`glob_match`](crate::glob_match) but not for the kernel).
fn special(b: u8) -> bool {
    matches!(b, b'*' | b'?' | b'[' | b']' | b'\\' | b'-' | b'!' | b'^')
}

fn escape_into(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        if matches!(b, b'*' | b'?' | b'[' | b'\\') {
            out.push('\\');
        }
        out.push(char::from(b));
    }
}

/// Globs that together match every name of `keep` and no name of
/// `avoid` that matches `pattern`, each a subset of `pattern`, each kept
/// name matched by exactly one, in trie order. `avoid` must hold every name the kernel could arm that
/// `pattern` matches and that is not wanted (names of `avoid` outside
/// `pattern` are ignored; a name in both lists is avoided, so left out
/// of the cover). With `pattern` `*`, `avoid` is every other traceable
/// name.
///
/// `None` when `pattern` has no `*`, has glob syntax before its first
/// `*`, or a kept name does not match it.
pub fn cover_globs(pattern: &str, keep: &[&str], avoid: &[&str]) -> Option<Vec<CoverGlob>> {
    let star = pattern.find('*')?;
    let (head, tail) = (&pattern[..star], &pattern[star + 1..]);
    if head.bytes().any(|b| matches!(b, b'?' | b'[' | b'\\')) {
        return None;
    }
    let whole = Glob::new(pattern);
    let avoided: std::collections::HashSet<&str> = avoid.iter().copied().collect();
    // (rest after the head, wanted?), sorted; an avoided name wins.
    let mut names: Vec<(&[u8], bool)> = Vec::with_capacity(keep.len() + avoid.len());
    for k in keep {
        if !whole.is_match(k) {
            return None;
        }
        if !avoided.contains(k) {
            names.push((&k.as_bytes()[head.len()..], true));
        }
    }
    for a in avoid {
        if whole.is_match(a) {
            names.push((&a.as_bytes()[head.len()..], false));
        }
    }
    names.sort_unstable();
    names.dedup();
    // avoid_before[i]: avoided names among names[..i].
    let mut avoid_before = Vec::with_capacity(names.len() + 1);
    avoid_before.push(0usize);
    for (_, keep) in &names {
        let last = avoid_before.last().copied().unwrap_or(0);
        avoid_before.push(last + usize::from(!keep));
    }
    let walk = Walk {
        head,
        tail,
        names: &names,
        avoid_before: &avoid_before,
    };
    let mut out = Vec::new();
    walk.node(0, names.len(), 0, &mut out);
    Some(out)
}

struct Walk<'a> {
    head: &'a str,
    tail: &'a str,
    names: &'a [(&'a [u8], bool)],
    avoid_before: &'a [usize],
}

impl Walk<'_> {
    fn clean(&self, lo: usize, hi: usize) -> bool {
        self.avoid_before[hi] == self.avoid_before[lo]
    }

    /// The kept name `rest` alone.
    fn literal(&self, rest: &[u8], out: &mut Vec<CoverGlob>) {
        let mut p = String::with_capacity(self.head.len() + rest.len() + 2);
        escape_into(&mut p, self.head.as_bytes());
        escape_into(&mut p, rest);
        out.push(CoverGlob {
            pattern: p,
            kept: 1,
        });
    }

    /// `HEAD PREFIX CLASS * TAIL` over the kept names of `groups` (each a
    /// clean child: its byte and its range of names); a kept name the
    /// glob misses (its end overlaps the tail) is given alone.
    fn class_glob(
        &self,
        prefix: &[u8],
        class: &str,
        groups: &[(u8, usize, usize)],
        out: &mut Vec<CoverGlob>,
    ) {
        let mut p = String::new();
        // The head is the pattern's own text, already in glob syntax.
        p.push_str(self.head);
        escape_into(&mut p, prefix);
        p.push_str(class);
        p.push('*');
        p.push_str(self.tail);
        let g = Glob::new(&p);
        let mut kept = 0;
        let mut alone = Vec::new();
        for &(_, lo, hi) in groups {
            for (rest, _) in &self.names[lo..hi] {
                let mut full = String::with_capacity(self.head.len() + rest.len());
                full.push_str(self.head);
                full.push_str(&String::from_utf8_lossy(rest));
                if g.is_match(&full) {
                    kept += 1;
                } else {
                    alone.push(*rest);
                }
            }
        }
        if kept > 0 {
            out.push(CoverGlob { pattern: p, kept });
        }
        for rest in alone {
            self.literal(rest, out);
        }
    }

    /// Covers `names[lo..hi]`, which share their first `depth` bytes.
    fn node(&self, lo: usize, hi: usize, depth: usize, out: &mut Vec<CoverGlob>) {
        if lo >= hi {
            return;
        }
        let prefix = &self.names[lo].0[..depth];
        if self.clean(lo, hi) {
            self.class_glob(prefix, "", &[(0, lo, hi)], out);
            return;
        }
        let mut i = lo;
        // A name ending here sorts first.
        if self.names[i].0.len() == depth {
            if self.names[i].1 {
                self.literal(self.names[i].0, out);
            }
            i += 1;
        }
        // Children: (byte, lo, hi).
        let mut children: Vec<(u8, usize, usize)> = Vec::new();
        while i < hi {
            let b = self.names[i].0[depth];
            let start = i;
            while i < hi && self.names[i].0[depth] == b {
                i += 1;
            }
            children.push((b, start, i));
        }
        // Clean children in runs: a dirty or special child breaks a run
        // (bytes no name has may sit inside a range).
        let mut runs: Vec<Vec<(u8, usize, usize)>> = Vec::new();
        let mut run: Vec<(u8, usize, usize)> = Vec::new();
        let mut clean_groups: Vec<(u8, usize, usize)> = Vec::new();
        for &(b, clo, chi) in &children {
            let clean = self.clean(clo, chi);
            if clean && !special(b) && self.names[clo..chi].iter().any(|n| n.1) {
                run.push((b, clo, chi));
                clean_groups.push((b, clo, chi));
                continue;
            }
            if !run.is_empty() {
                runs.push(std::mem::take(&mut run));
            }
            if !clean || special(b) {
                // Walked on its own (a clean special byte is one glob).
                self.node(clo, chi, depth + 1, out);
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
        if clean_groups.is_empty() {
            return;
        }
        let class = if clean_groups.len() == 1 {
            let mut s = String::new();
            escape_into(&mut s, &[clean_groups[0].0]);
            s
        } else {
            let mut s = String::from("[");
            for r in &runs {
                let (first, last) = (r[0].0, r[r.len() - 1].0);
                if r.len() >= 3 {
                    s.push(char::from(first));
                    s.push('-');
                    s.push(char::from(last));
                } else {
                    for &(b, _, _) in r {
                        s.push(char::from(b));
                    }
                }
            }
            s.push(']');
            s
        };
        self.class_glob(prefix, &class, &clean_groups, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kept name matched by exactly one glob, no avoided name by
    /// any: the union of the cover is the kept set.
    fn check_exact(pattern: &str, keep: &[&str], avoid: &[&str], cover: &[CoverGlob]) {
        let globs: Vec<Glob> = cover.iter().map(|c| Glob::new(&c.pattern)).collect();
        for k in keep {
            if avoid.contains(k) {
                continue;
            }
            let n = globs.iter().filter(|g| g.is_match(k)).count();
            assert_eq!(n, 1, "{k} matched by {n} globs of {cover:?}");
        }
        for a in avoid {
            if Glob::new(pattern).is_match(a) {
                assert!(
                    !globs.iter().any(|g| g.is_match(a)),
                    "{a} matched by {cover:?}"
                );
            }
        }
        let kept: usize = cover.iter().map(|c| c.kept).sum();
        let want = keep.iter().filter(|k| !avoid.contains(k)).count();
        assert_eq!(kept, want, "{cover:?}");
    }

    fn patterns(c: &[CoverGlob]) -> Vec<&str> {
        c.iter().map(|c| c.pattern.as_str()).collect()
    }

    #[test]
    fn clean_children_share_one_class() {
        let keep = [
            "ext4_alloc",
            "ext4_bmap",
            "ext4_create",
            "ext4_file_open",
            "ext4_readdir",
            "ext4_write_end",
            "ext4_lookup",
        ];
        let avoid = ["ext4_lock_group", "vfs_read"];
        let c = cover_globs("*", &keep, &avoid).unwrap();
        // a, b, c, f: a run (d and e have no name, so a-f is fine); r, w
        // after the dirty l; the clean part of l (lookup) on its own.
        assert_eq!(patterns(&c), ["ext4_loo*", "ext4_[a-frw]*"]);
        check_exact("*", &keep, &avoid, &c);
    }

    #[test]
    fn nothing_to_avoid_is_the_pattern_itself() {
        let c = cover_globs("vfs_*", &["vfs_read", "vfs_write"], &["tcp_x"]).unwrap();
        assert_eq!(
            c,
            [CoverGlob {
                pattern: "vfs_*".into(),
                kept: 2
            }]
        );
    }

    #[test]
    fn a_kept_prefix_of_an_avoided_name_stands_alone() {
        let keep = ["spin_x", "spin_y"];
        let avoid = ["spin_x_lock"];
        let c = cover_globs("spin_*", &keep, &avoid).unwrap();
        assert_eq!(patterns(&c), ["spin_x", "spin_y*"]);
        check_exact("spin_*", &keep, &avoid, &c);
    }

    #[test]
    fn the_tail_of_the_pattern_is_kept() {
        let keep = ["a_read", "ab_read", "b_read", "x_read"];
        let avoid = ["c_read", "x_lock_read", "a_write"];
        let c = cover_globs("*_read", &keep, &avoid).unwrap();
        // x_read: `x_[!l]*_read` would not match it (its `_` is the
        // tail's), so it is given alone.
        assert_eq!(patterns(&c), ["x_read", "[ab]*_read"]);
        check_exact("*_read", &keep, &avoid, &c);
    }

    #[test]
    fn refusals() {
        assert_eq!(cover_globs("vfs_read", &["vfs_read"], &[]), None);
        assert_eq!(cover_globs("v?s_*", &["vfs_read"], &[]), None);
        assert_eq!(cover_globs("vfs_*", &["tcp_x"], &[]), None);
        assert_eq!(cover_globs("*", &[], &["a"]), Some(vec![]));
    }

    #[test]
    fn special_bytes_never_enter_a_class() {
        let keep = ["f-a", "f!b", "f^c", "fa", "fb", "fc", "f*x"];
        let avoid = ["f_lock"];
        let c = cover_globs("*", &keep, &avoid).unwrap();
        check_exact("*", &keep, &avoid, &c);
        for g in &c {
            if let Some(class) = g.pattern.split_once('[').map(|(_, r)| r) {
                assert!(!class.starts_with(['!', '^', ']']), "{g:?}");
            }
        }
    }

    /// A deterministic pseudo-random name set: each glob of the cover
    /// agrees with the kernel's semantics as [`Glob`] implements them.
    #[test]
    fn random_sets_are_covered_exactly() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"abcdlk_0";
        for round in 0..200 {
            let mut names = Vec::new();
            for _ in 0..(next() % 60 + 1) {
                let len = (next() % 8 + 1) as usize;
                let s: String = (0..len)
                    .map(|_| char::from(alphabet[(next() % alphabet.len() as u64) as usize]))
                    .collect();
                names.push(s);
            }
            names.sort();
            names.dedup();
            let (keep, avoid): (Vec<&str>, Vec<&str>) = names
                .iter()
                .map(String::as_str)
                .partition(|n| !n.contains("lk") && (next() % 5 != 0));
            for pattern in ["*", "a*", "*_0", "a*b*"] {
                let kp: Vec<&str> = keep
                    .iter()
                    .copied()
                    .filter(|k| Glob::new(pattern).is_match(k))
                    .collect();
                let c = cover_globs(pattern, &kp, &avoid)
                    .unwrap_or_else(|| panic!("round {round} {pattern}"));
                check_exact(pattern, &kp, &avoid, &c);
            }
        }
    }
}
