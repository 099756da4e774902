//! The engine's folders are the stages of a probe's path, and each stage
//! imports only from the stages before it (see the crate documentation).
//! This test reads the `crate::` paths of `src/` (test code left out) and
//! holds the line: no import against the stages' order, and no function
//! over 100 lines.

mod common;

use std::fs;
use std::path::Path;

use common::sources;

/// The stages in the order data flows through them. Each stage owns its
/// error; `error` is the root error, which wraps those of plan, kernel
/// and attach and is what session and above return; `stack` names the
/// frames decode reads.
const ORDER: [&str; 9] = [
    "plan", "kernel", "attach", "decode", "error", "stack", "session", "analysis", "perfdata",
];

/// The code of a file: up to its `#[cfg(test)] mod ... {` block, without
/// `//` comments.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests {").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn stage_of(rel: &str) -> &str {
    rel.split(['/', '.']).next().unwrap_or(rel)
}

#[test]
fn stages_import_only_earlier_stages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut against = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let Some(from) = ORDER.iter().position(|s| *s == stage_of(&rel)) else {
            continue;
        };
        let text = fs::read_to_string(path).unwrap_or_default();
        let code = code(&text);
        for (i, _) in code.match_indices("crate::") {
            let first: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                first.is_empty() || first.starts_with(|c: char| c.is_ascii_lowercase()),
                "{rel} imports crate::{first} through the crate root: name its stage"
            );
            if let Some(to) = ORDER.iter().position(|s| *s == first) {
                if to > from && !against.contains(&(rel.clone(), ORDER[to])) {
                    against.push((rel.clone(), ORDER[to]));
                }
            }
        }
    }
    against.sort();
    assert!(
        against.is_empty(),
        "imports against the stages' order (a stage imports a later one): {against:?}"
    );
}

#[test]
fn no_function_is_over_100_lines() {
    // Every crate of the workspace, xtask and the benchmarks included
    // (tests aside: a `tests.rs` file or module holds tables, and a
    // `tests/` folder below a root is tests; the tests crate's own
    // library and workloads are read).
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for root in [
        "src",
        "../spec/src",
        "../cli/src",
        "../arch/src",
        "../symbols/src",
        "../debuginfo/src",
        "../unwind/src",
        "../xtask/src",
        "../bench/src",
        "../tests/src",
        "../fuzz/src",
    ] {
        let root = here.join(root);
        let mut found = Vec::new();
        sources(&root, &mut found);
        files.extend(found.into_iter().filter(|p| {
            !p.strip_prefix(&root)
                .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == "tests"))
        }));
    }
    let mut long = Vec::new();
    for path in &files {
        let text = fs::read_to_string(path).unwrap_or_default();
        let code = code(&text).replace("'{'", "' '").replace("'}'", "' '");
        let lines: Vec<&str> = code.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let l = lines[i].trim_start();
            // `fn` after any visibility and qualifiers.
            let mut rest = l;
            while let Some(r) = [
                "pub(crate) ",
                "pub(super) ",
                "pub ",
                "const ",
                "async ",
                "unsafe ",
                "extern \"C\" ",
            ]
            .iter()
            .find_map(|q| rest.strip_prefix(q))
            {
                rest = r;
            }
            let is_fn = rest.starts_with("fn ");
            if !is_fn {
                i += 1;
                continue;
            }
            // A `;` ends a declaration without a body only outside the
            // signature's brackets (`[u64; 4]` is a type).
            let (mut depth, mut started, mut j, mut nested) = (0i32, false, i, 0i32);
            'scan: while j < lines.len() {
                let mut in_str = false;
                let mut prev = ' ';
                for c in lines[j].chars() {
                    match c {
                        '"' if prev != '\\' => in_str = !in_str,
                        '{' if !in_str => {
                            depth += 1;
                            started = true;
                        }
                        '}' if !in_str => depth -= 1,
                        '(' | '[' if !in_str && !started => nested += 1,
                        ')' | ']' if !in_str && !started => nested -= 1,
                        ';' if !in_str && !started && nested == 0 => break 'scan,
                        _ => {}
                    }
                    prev = c;
                }
                if started && depth == 0 {
                    break;
                }
                j += 1;
            }
            if started && j + 1 - i > 100 {
                long.push(format!(
                    "{}:{} ({} lines)",
                    path.display(),
                    i + 1,
                    j + 1 - i
                ));
            }
            i += 1;
        }
    }
    assert!(long.is_empty(), "functions over 100 lines: {long:?}");
}
