//! The engine's public API, pinned, so that a change to it is a visible
//! diff in review:
//!
//! - the names the crate root exports (`pub mod` and `pub use`), read
//!   from `src/lib.rs` and compared with `public-api.txt`;
//! - every public item of the source (types, functions, methods, fields,
//!   variants, constants, trait impls), read from `src/` with `syn` and
//!   compared with `public-items.txt`. The workspace denies
//!   `unreachable_pub`, so an item written `pub` is one an embedder (or
//!   the CLI, through `cli`) can reach, and one it cannot reach is not
//!   `pub`: the `pub` items of the source are the public surface.
//!
//! Stable Rust has no rustdoc JSON, hence the source walk. Regenerate
//! both files with
//! `KPROBE_PERF_BLESS=1 cargo test -p kprobe-perf-engine --test public_api`.

mod common;

use std::fs;
use std::path::Path;

use common::sources;

use quote::ToTokens;
use syn::{Attribute, Fields, FnArg, ImplItem, Item, Pat, Signature, TraitItem, Visibility};

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

/// Compares `got` with the pinned file `name`, or writes it when blessing.
fn pinned(name: &str, got: &str, what: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    if std::env::var_os("KPROBE_PERF_BLESS").is_some() {
        fs::write(&path, got).expect("writing a pinned listing");
        return;
    }
    let want = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "{what} changed: update engine/{name} \
         (KPROBE_PERF_BLESS=1 cargo test -p kprobe-perf-engine --test public_api)\n{}",
        first_difference(&want, got)
    );
}

/// The first line that differs, as `- pinned` / `+ now`.
fn first_difference(want: &str, got: &str) -> String {
    let (mut w, mut g) = (want.lines(), got.lines());
    loop {
        match (w.next(), g.next()) {
            (Some(a), Some(b)) if a == b => continue,
            (None, None) => return String::new(),
            (a, b) => return format!("- {}\n+ {}", a.unwrap_or(""), b.unwrap_or("")),
        }
    }
}

#[test]
fn the_root_exports_what_public_api_txt_lists() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = fs::read_to_string(dir.join("src/lib.rs")).expect("reading src/lib.rs");
    let got = root_names(&lib).join("\n") + "\n";
    pinned("public-api.txt", &got, "the crate root's public names");
}

#[test]
fn the_public_items_are_what_public_items_txt_lists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    let mut out = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let text = fs::read_to_string(path).expect("reading a source file");
        let file = syn::parse_file(&text).expect("parsing a source file");
        let module = module_path(&rel);
        items(&module, &file.items, &mut out);
    }
    pinned(
        "public-items.txt",
        &(out.join("\n") + "\n"),
        "the engine's public items",
    );
}

/// `attach/open.rs` -> `attach::open`, `decode/mod.rs` -> `decode`,
/// `lib.rs` -> `crate`.
fn module_path(rel: &str) -> String {
    let rel = rel.trim_end_matches(".rs");
    let rel = rel.strip_suffix("/mod").unwrap_or(rel);
    if rel == "lib" {
        "crate".to_string()
    } else {
        rel.replace('/', "::")
    }
}

fn is_pub(v: &Visibility) -> bool {
    matches!(v, Visibility::Public(_))
}

/// Test code (`#[cfg(test)]`) is no part of the surface.
fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.to_token_stream().to_string().contains("test")
            && !a.meta.to_token_stream().to_string().contains("feature")
    })
}

/// `#[cfg(feature = "x")]` as ` [x]`, for an item only some builds have.
fn feature(attrs: &[Attribute]) -> String {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .map(|a| format!(" [{}]", tokens(&a.meta).trim_start_matches("cfg")))
        .collect()
}

/// Tokens as text, with the spaces the printer puts around punctuation
/// taken out where Rust writes none.
fn tokens(t: &impl ToTokens) -> String {
    let mut s = t.to_token_stream().to_string();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" ,", ","),
        ("( ", "("),
        (" )", ")"),
        (" (", "("),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        ("& ", "&"),
        ("[ ", "["),
        (" ]", "]"),
        (" ;", ";"),
        (" : ", ": "),
        (" ?", "?"),
        ("# ", "#"),
        ("! ", "!"),
    ] {
        s = s.replace(from, to);
    }
    s
}

/// A function's signature as its callers see it: a `mut` binding of a
/// parameter (`mut out: W`, `mut self`) is the body's business, not the
/// API's, and is left out.
fn signature(sig: &Signature) -> String {
    let mut sig = sig.clone();
    for input in &mut sig.inputs {
        match input {
            FnArg::Typed(t) => {
                if let Pat::Ident(p) = t.pat.as_mut() {
                    p.mutability = None;
                }
            }
            FnArg::Receiver(r) if r.reference.is_none() => r.mutability = None,
            FnArg::Receiver(_) => {}
        }
    }
    tokens(&sig)
}

/// One line per public item of `items` (in module `module`), and one per
/// public field, variant, method and trait impl.
fn items(module: &str, list: &[Item], out: &mut Vec<String>) {
    for item in list {
        match item {
            Item::Fn(f) if is_pub(&f.vis) && !is_test(&f.attrs) => {
                out.push(format!(
                    "{module}: {}{}",
                    signature(&f.sig),
                    feature(&f.attrs)
                ));
            }
            Item::Struct(s) if is_pub(&s.vis) && !is_test(&s.attrs) => {
                let name = format!("{module}::{}", s.ident);
                out.push(format!(
                    "{module}: struct {}{}{}",
                    s.ident,
                    tokens(&s.generics),
                    feature(&s.attrs)
                ));
                fields(&name, &s.fields, true, out);
            }
            Item::Enum(e) if is_pub(&e.vis) && !is_test(&e.attrs) => {
                out.push(format!(
                    "{module}: enum {}{}{}",
                    e.ident,
                    tokens(&e.generics),
                    feature(&e.attrs)
                ));
                for v in &e.variants {
                    let name = format!("{module}::{}::{}", e.ident, v.ident);
                    out.push(name.clone());
                    fields(&name, &v.fields, false, out);
                }
            }
            Item::Trait(t) if is_pub(&t.vis) && !is_test(&t.attrs) => {
                out.push(format!(
                    "{module}: trait {}{}{}",
                    t.ident,
                    tokens(&t.generics),
                    feature(&t.attrs)
                ));
                for ti in &t.items {
                    match ti {
                        TraitItem::Fn(f) => {
                            out.push(format!("{module}::{}: {}", t.ident, signature(&f.sig)))
                        }
                        TraitItem::Type(ty) => {
                            out.push(format!("{module}::{}: type {}", t.ident, ty.ident))
                        }
                        TraitItem::Const(c) => out.push(format!(
                            "{module}::{}: const {}: {}",
                            t.ident,
                            c.ident,
                            tokens(&c.ty)
                        )),
                        _ => {}
                    }
                }
            }
            Item::Const(c) if is_pub(&c.vis) && !is_test(&c.attrs) => out.push(format!(
                "{module}: const {}: {}{}",
                c.ident,
                tokens(&c.ty),
                feature(&c.attrs)
            )),
            Item::Static(s) if is_pub(&s.vis) && !is_test(&s.attrs) => {
                out.push(format!("{module}: static {}: {}", s.ident, tokens(&s.ty)))
            }
            Item::Type(t) if is_pub(&t.vis) && !is_test(&t.attrs) => out.push(format!(
                "{module}: type {}{} = {}",
                t.ident,
                tokens(&t.generics),
                tokens(&t.ty)
            )),
            Item::Use(u) if is_pub(&u.vis) && !is_test(&u.attrs) => out.push(format!(
                "{module}: use {}{}",
                tokens(&u.tree),
                feature(&u.attrs)
            )),
            Item::Mod(m) if !is_test(&m.attrs) => {
                if is_pub(&m.vis) {
                    out.push(format!("{module}: mod {}{}", m.ident, feature(&m.attrs)));
                }
                if let Some((_, inner)) = &m.content {
                    items(&format!("{module}::{}", m.ident), inner, out);
                }
            }
            Item::Impl(i) if !is_test(&i.attrs) => impl_items(module, i, out),
            _ => {}
        }
    }
}

/// The public fields of `name` (`pub` ones of a struct, all of a
/// variant's).
fn fields(name: &str, fields: &Fields, struct_fields: bool, out: &mut Vec<String>) {
    for (k, f) in fields.iter().enumerate() {
        if struct_fields && !is_pub(&f.vis) {
            continue;
        }
        let field = f
            .ident
            .as_ref()
            .map_or_else(|| k.to_string(), ToString::to_string);
        out.push(format!("{name}.{field}: {}", tokens(&f.ty)));
    }
}

/// A trait impl as one line; an inherent impl's public methods and
/// constants, one line each.
fn impl_items(module: &str, i: &syn::ItemImpl, out: &mut Vec<String>) {
    let ty = tokens(&i.self_ty);
    if let Some((_, trait_, _)) = &i.trait_ {
        out.push(format!(
            "{module}: impl{} {} for {ty}{}",
            tokens(&i.generics),
            tokens(trait_),
            feature(&i.attrs)
        ));
        return;
    }
    for ii in &i.items {
        match ii {
            ImplItem::Fn(f) if is_pub(&f.vis) && !is_test(&f.attrs) => out.push(format!(
                "{module}::{ty}: {}{}",
                signature(&f.sig),
                feature(&f.attrs)
            )),
            ImplItem::Const(c) if is_pub(&c.vis) => out.push(format!(
                "{module}::{ty}: const {}: {}",
                c.ident,
                tokens(&c.ty)
            )),
            _ => {}
        }
    }
}
