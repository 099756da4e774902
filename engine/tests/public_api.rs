//! The engine's public API, pinned: the names the crate root exports
//! (`pub mod` and `pub use`), read from `src/lib.rs` and compared with
//! `public-api.txt`. A change to the root's list is a change to this
//! file too, so it shows in review. Regenerate with
//! `KPROBE_PERF_BLESS=1 cargo test -p kprobe-perf-engine --test public_api`.
//!
//! Stable Rust has no rustdoc JSON, so this pins the root's list only;
//! what the public modules hold is kept small by `pub(crate)` and the
//! `unreachable_pub` lint.

use std::fs;
use std::path::Path;

/// `pub mod NAME` and each name a `pub use` brings in, one a line, as
/// `mod NAME` or `use NAME`, with ` (test-util, hidden)` or
/// ` (cli, hidden)` after an item gated on that feature and
/// ` (hidden)` after one hidden from the documentation; sorted.
fn root_names(lib: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut gated: Option<&str> = None;
    let mut hidden = false;
    // `pub use` statements may span lines: join each up to its `;`.
    let mut pending = String::new();
    for line in lib.lines().map(str::trim) {
        if !pending.is_empty() {
            pending.push(' ');
            pending.push_str(line);
        } else if let Some(rest) = line.strip_prefix("#[cfg(feature = \"") {
            gated = rest.strip_suffix("\")]");
            continue;
        } else if line.starts_with("#[doc(hidden)]") {
            hidden = true;
            continue;
        } else if line.starts_with("#[") || line.starts_with("//") {
            continue;
        } else if let Some(name) = line.strip_prefix("pub mod ") {
            out.push(tag(
                format!("mod {}", name.trim_end_matches(';')),
                gated,
                hidden,
            ));
        } else if line.starts_with("pub use ") {
            pending.push_str(line);
        }
        if pending.ends_with(';') {
            for name in use_names(&pending) {
                out.push(tag(format!("use {name}"), gated, hidden));
            }
            pending.clear();
        }
        if pending.is_empty() {
            gated = None;
            hidden = false;
        }
    }
    out.sort();
    out
}

fn tag(line: String, gated: Option<&str>, hidden: bool) -> String {
    match (gated, hidden) {
        (Some(feature), true) => format!("{line} ({feature}, hidden)"),
        (Some(feature), false) => format!("{line} ({feature})"),
        (None, true) => format!("{line} (hidden)"),
        (None, false) => line,
    }
}

/// The names a `pub use ...;` statement brings in.
fn use_names(stmt: &str) -> Vec<String> {
    let body = stmt.trim_start_matches("pub use ").trim_end_matches(';');
    let list = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => &body[a + 1..b],
        _ => body.rsplit("::").next().unwrap_or(body),
    };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once(" as ") {
            Some((_, alias)) => alias.trim().to_string(),
            None => item.rsplit("::").next().unwrap_or(item).to_string(),
        })
        .collect()
}

#[test]
fn the_root_exports_what_public_api_txt_lists() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = fs::read_to_string(dir.join("src/lib.rs")).expect("reading src/lib.rs");
    let got = root_names(&lib).join("\n") + "\n";
    let pinned = dir.join("public-api.txt");
    if std::env::var_os("KPROBE_PERF_BLESS").is_some() {
        fs::write(&pinned, &got).expect("writing public-api.txt");
        return;
    }
    let want = fs::read_to_string(&pinned).unwrap_or_default();
    assert_eq!(
        got, want,
        "the crate root's public names changed: update engine/public-api.txt \
         (KPROBE_PERF_BLESS=1 cargo test -p kprobe-perf-engine --test public_api)"
    );
}
