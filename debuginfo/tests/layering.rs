//! The crate's files import one another without a circle, and its
//! messages name no command-line flag (the CLI adds its flags).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module of src/ and the modules it names (`crate::X`), in code
/// (comment lines left out). `lib.rs` only declares and re-exports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut uses = BTreeSet::new();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let module: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                // `crate::{a, b}` and re-exports at the root are not files.
                if !module.is_empty() && src.join(format!("{module}.rs")).exists() {
                    uses.insert(module);
                }
            }
        }
        uses.remove(&name);
        graph.insert(name, uses);
    }
    graph
}

/// A circle through `at`, if the walk from it finds one.
fn circle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == at) {
        let mut c = path[i..].to_vec();
        c.push(at.to_string());
        return Some(c);
    }
    if done.contains(at) {
        return None;
    }
    path.push(at.to_string());
    for next in graph.get(at).into_iter().flatten() {
        if let Some(c) = circle(graph, next, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(at.to_string());
    None
}

#[test]
fn the_files_import_without_a_circle() {
    let graph = imports();
    assert!(graph.len() >= 15, "{graph:?}");
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        let found = circle(&graph, module, &mut Vec::new(), &mut done);
        assert!(
            found.is_none(),
            "import circle: {}",
            found.unwrap_or_default().join(" -> ")
        );
    }
}

#[test]
fn messages_name_no_flag() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| l.contains("#[error(")) {
            let flag = line
                .split(|c: char| c.is_whitespace() || c == '(' || c == '`')
                .find(|w| {
                    w.len() > 2 && w.starts_with("--") && w.as_bytes()[2].is_ascii_lowercase()
                });
            assert!(flag.is_none(), "{}: {line}", path.display());
        }
    }
}
