//! Probe points and variables by source line and name, from the kernel's
//! DWARF (a debug vmlinux found and matched to the running kernel): source
//! points turned into kprobe_events definitions at `SYMBOL+OFFSET`, which
//! then go through the same planning and checks as any definition.
//!
//! Nothing here is read unless a definition names a source point or a
//! listing is asked for: a definition without one costs a scan of its
//! text for `@`.
//!
//! The spelling in kprobe-perf's language (it must not clash with `MOD:SYM`
//! or a uprobe's `PATH:SYM`, hence `@`, as SystemTap writes source points):
//!
//! | kprobe-perf | perf probe | meaning |
//! |---|---|---|
//! | `FUNC@` | `FUNC` | the function's entry (and inlined copies), variables by DWARF |
//! | `FUNC@+N` | `FUNC:N` | line N after the function's declaration line |
//! | `FUNC@FILE` | `FUNC@FILE` | the entry of FUNC defined in a file ending in FILE |
//! | `FUNC@FILE+N` | `FUNC@FILE:N` | both |
//! | `@FILE:LINE` | `FILE:LINE` | an absolute line of a source file |
//! | `FUNC@;PATTERN` | `FUNC;PATTERN` | the function's lines whose source matches the glob (perf's lazy lines; spaces ignored) |
//!
//! In a user binary (a uprobe), the same points follow the binary's path
//! and `:`, as a uprobe's symbol does: `/PATH:FUNC@+N` is perf's `-x /PATH
//! FUNC:N`, `/PATH:@FILE:LINE` its `-x /PATH FILE:LINE`. Each site becomes
//! `/PATH:0xOFFSET`; the binary's DWARF is its own, or its debug file (by
//! build ID, or `.gnu_debuglink`).

use std::path::{Path, PathBuf};

use kprobe_perf_debuginfo::{locate, DebugInfo, Options, ProbeArg, ProbePoint};
pub use kprobe_perf_debuginfo::{
    AddressFrame, AddressLookup, DebugFile, Error as DebugInfoError, FunctionLines, Instance, Site,
    Variable,
};

use super::error::KernelError;

/// Where the running kernel's debug info is looked for when none is given:
/// the vmlinux paths, then `/usr/lib/debug/.build-id/NN/REST.debug` by the
/// running kernel's build ID, then the debuginfod cache's file of that
/// build ID (when `DEBUGINFOD_URLS` is set).
pub(super) fn candidates(vmlinux: Vec<PathBuf>, build_id: Option<&[u8]>) -> Vec<PathBuf> {
    let mut c = vmlinux;
    if let Some(p) = build_id.and_then(|id| locate::build_id_path(Path::new("/usr/lib/debug"), id))
    {
        c.push(p);
    }
    // A file a debuginfod server gave earlier, in its cache.
    if let (Some(id), Some(client)) = (
        build_id,
        kprobe_perf_debuginfo::debuginfod::Debuginfod::from_env(),
    ) {
        c.push(client.cached_path(id));
    }
    c
}

/// Finds the debug file: `explicit` alone when given (a build ID other
/// than `running`'s is refused unless `other_kernel`), else the first
/// candidate with DWARF and the running kernel's build ID, else (when
/// `ask_servers`) the debuginfod servers' file of that build ID.
pub(super) fn find(
    explicit: Option<&Path>,
    candidates: Vec<PathBuf>,
    running: Option<&[u8]>,
    other_kernel: bool,
    ask_servers: bool,
) -> Result<DebugFile, KernelError> {
    let (list, is_explicit) = match explicit {
        Some(p) => (vec![p.to_path_buf()], true),
        None => (candidates, false),
    };
    let want = if other_kernel && is_explicit {
        None
    } else {
        running
    };
    let what = "the running kernel";
    Ok(if ask_servers {
        locate::first_match(list, want, what, is_explicit)?
    } else {
        locate::first_local_match(list, want, what, is_explicit)?
    })
}

/// The debug file of a user binary: its build-ID file under
/// `/usr/lib/debug/.build-id`, its `.gnu_debuglink` (beside it, in
/// `.debug/`, under `/usr/lib/debug`), or the binary itself.
pub(super) fn find_user(binary: &str) -> Result<DebugFile, KernelError> {
    Ok(locate::find_user(Path::new(binary))?)
}

/// A probe a source-level definition stands for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceProbe {
    /// The kprobe_events definition (`p:EVENT SYMBOL+OFFSET ARGS`).
    pub definition: String,
    /// The source file and line at the address.
    pub source: String,
    /// Which copy of the function: its own body, or inlined into another.
    pub instance: Instance,
}

/// The probes of one source-level definition, and the sites left out.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SourceExpansion {
    /// One per site where every argument can be fetched, in address order
    /// of the function's copies.
    pub probes: Vec<SourceProbe>,
    /// The sites left out: `SYMBOL+OFFSET` and why (a variable optimized
    /// out in that copy ...).
    pub refused: Vec<(String, String)>,
}

/// A definition in kprobe-perf's language whose probe point is a source
/// point, split into its parts.
#[derive(Debug)]
struct SourceDefinition<'t> {
    /// `p` or `p:[GRP/]EVENT` before the point.
    group: Option<&'t str>,
    /// The user binary, for a uprobe's source point.
    binary: Option<&'t str>,
    /// The kernel module, for a module function's source point.
    module: Option<&'t str>,
    event: Option<&'t str>,
    /// The point, as perf spells it.
    point: String,
    /// Where the point is in the text, and its length (for a caret).
    at: usize,
    len: usize,
    args: Vec<&'t str>,
}

/// Whether a word is a source point: `FUNC@` (the entry, by DWARF),
/// `FUNC@+N`, `FUNC@FILE[+N]` or `@FILE:LINE`; never `NAME@0xADDR`, a fetch argument (`@SYM`,
/// `@0xADDR`), `MOD:SYM` or a uprobe's `/PATH:SYM`.
fn is_source_point(word: &str) -> bool {
    if word.starts_with('/') {
        return false;
    }
    let Some((head, tail)) = word.split_once('@') else {
        return false;
    };
    if head.is_empty() {
        return tail
            .rsplit_once(':')
            .is_some_and(|(f, l)| !f.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
    }
    let ident = head
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    ident && !tail.starts_with("0x") && !tail.starts_with("0X")
}

/// A uprobe target naming a source point (`/PATH:FUNC@+N`), split into
/// the binary's path and the point.
fn user_point(word: &str) -> Option<(&str, &str)> {
    crate::plan::user_source::split_target(word, is_source_point)
}

/// A module function's source point (`9p:v9fs_file_open@+2`,
/// `9p:@fs/9p/vfs_file.c:60`), split into the module's name and the
/// point: `MOD:` as in `MOD:SYM`.
fn module_point(word: &str) -> Option<(&str, &str)> {
    let (module, point) = word.split_once(':')?;
    let name = !module.is_empty()
        && module
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (name && is_source_point(point)).then_some((module, point))
}

/// Whether a word is a probe point naming a source point, in the kernel,
/// a module or a user binary.
fn is_any_source_point(word: &str) -> bool {
    is_source_point(word) || user_point(word).is_some() || module_point(word).is_some()
}

/// The kernel module whose source point a definition names
/// (`p:9p:v9fs_file_open@+2 file`), or None.
pub(crate) fn module_name(definition: &str) -> Option<&str> {
    if user_binary(definition).is_some() {
        return None;
    }
    let mut words = definition.split_whitespace();
    let first = words.next().unwrap_or("");
    let short = first.split_once(':').and_then(|(_, t)| module_point(t));
    short
        .or_else(|| words.next().and_then(module_point))
        .map(|(module, _)| module)
}

/// Whether a definition names a source point (and needs debug info).
pub(crate) fn names_source_point(definition: &str) -> bool {
    let mut words = definition.split_whitespace();
    let first = words.next().unwrap_or("");
    let short = first
        .split_once(':')
        .is_some_and(|(_, t)| is_any_source_point(t));
    short || words.next().is_some_and(is_any_source_point)
}

/// The user binary whose source point a definition names
/// (`p:/usr/bin/prog:main@+3 argc`), or None for the kernel's.
pub(crate) fn user_binary(definition: &str) -> Option<&str> {
    let mut words = definition.split_whitespace();
    let first = words.next().unwrap_or("");
    let short = first.split_once(':').and_then(|(_, t)| user_point(t));
    short
        .or_else(|| words.next().and_then(user_point))
        .map(|(path, _)| path)
}

/// The source point in kprobe-perf's spelling, as perf spells it.
fn perf_point(word: &str) -> String {
    // FUNC@;PATTERN, FUNC@FILE;PATTERN: the pattern as written.
    if let Some((head, pattern)) = word.split_once(';') {
        return format!("{};{pattern}", perf_point(head));
    }
    match word.split_once('@') {
        Some(("", file_line)) => file_line.to_string(),
        Some((func, "")) => func.to_string(),
        Some((func, rest)) => match rest.strip_prefix('+') {
            Some(n) => format!("{func}:{n}"),
            None => match rest.rsplit_once('+') {
                Some((file, n)) => format!("{func}@{file}:{n}"),
                None => format!("{func}@{rest}"),
            },
        },
        None => word.to_string(),
    }
}

/// Offset of a word inside the text it was split from.
fn offset_in(text: &str, word: &str) -> usize {
    (word.as_ptr() as usize).saturating_sub(text.as_ptr() as usize)
}

fn split(text: &str) -> Result<SourceDefinition<'_>, KernelError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let first = words.first().copied().unwrap_or("");
    let (kind, name) = first.split_once(':').unwrap_or((first, ""));
    let (point_word, named, rest) = if is_any_source_point(name) {
        (name, None, words.get(1..).unwrap_or(&[]))
    } else {
        let w = words.get(1).copied().unwrap_or("");
        (w, Some(name), words.get(2..).unwrap_or(&[]))
    };
    let caret = |word: &str, reason: &str| KernelError::Source {
        text: text.to_string(),
        at: offset_in(text, word),
        len: word.len().max(1),
        reason: reason.to_string(),
    };
    if kind != "p" {
        return Err(caret(
            first,
            "a source point takes an entry probe (p:): a line has no return; for a function's return write r:FUNC",
        ));
    }
    let (group, event) = match named.filter(|n| !n.is_empty()) {
        Some(n) => match n.split_once('/') {
            Some((g, e)) => (Some(g), (!e.is_empty()).then_some(e)),
            None => (None, Some(n)),
        },
        None => (None, None),
    };
    let (binary, module, point_word) = match (user_point(point_word), module_point(point_word)) {
        (Some((path, point)), _) => (Some(path), None, point),
        (None, Some((module, point))) => (None, Some(module), point),
        (None, None) => (None, None, point_word),
    };
    Ok(SourceDefinition {
        group,
        binary,
        module,
        event,
        point: perf_point(point_word),
        at: offset_in(text, point_word),
        len: point_word.len().max(1),
        args: rest.to_vec(),
    })
}

/// An argument is read from DWARF when it names a variable (`var`,
/// `NAME=var->f`, `$vars`, `$params`); any other fetch (`%di`, `$comm`,
/// `+8(%sp)`) is kept as written.
fn is_variable(arg: &str) -> bool {
    if arg == "$vars" || arg == "$params" {
        return true;
    }
    let expr = match arg.split_once('=') {
        Some((_, e)) => e,
        None => arg,
    };
    expr.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// The event name of a source point with no name given: `FUNC` for an
/// entry, `FUNC_L8` for a line, `FILE_L1200` for a file's line.
fn default_event(point: &ProbePoint) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    match point {
        ProbePoint::Function { name, at, .. } => match at {
            kprobe_perf_debuginfo::FunctionPart::RelativeLine(n) => {
                format!("{}_L{n}", clean(name))
            }
            _ => clean(name),
        },
        ProbePoint::Line { file, line } => {
            let base = file.rsplit('/').next().unwrap_or(file);
            let stem = base.split('.').next().unwrap_or(base);
            format!("{}_L{line}", clean(stem))
        }
    }
}

/// Expands one definition in kprobe-perf's language whose probe point is a
/// source point into one definition per site (each inlined copy, and the
/// out-of-line body). The first site takes the event name, the others
/// `NAME_1`, `NAME_2` ... in the order listed.
pub(super) fn expand(
    file: &DebugFile,
    text: &str,
    inlines: bool,
    source_dir: Option<&Path>,
) -> Result<SourceExpansion, KernelError> {
    let def = split(text)?;
    let point = ProbePoint::parse(&def.point).map_err(|e| KernelError::Source {
        text: text.to_string(),
        at: def.at,
        len: def.len,
        reason: e.to_string(),
    })?;
    let event = def
        .event
        .map_or_else(|| default_event(&point), str::to_string);
    let head = match def.group {
        Some(g) => format!("p:{g}/"),
        None => "p:".to_string(),
    };
    // A user binary's separate debug file has no call frame information:
    // the binary's own (for frame bases that are the CFA).
    let binary = match def.binary {
        Some(b) if Path::new(b) != file.path() => DebugFile::open(b).ok(),
        _ => None,
    };
    let mut di = DebugInfo::new(file)?.with_source_dir(source_dir);
    if let Some(b) = &binary {
        di = di.with_call_frames_of(b)?;
    }
    let vars = parsed_variables(text, &def.args)?;
    let sites = di.sites(&point, &Options { inlines })?;
    let segments = match def.binary {
        Some(path) => Some(
            crate::plan::user_source::Segments::of(path).map_err(|reason| KernelError::Source {
                text: text.to_string(),
                at: offset_in(text, path),
                len: path.len().max(1),
                reason,
            })?,
        ),
        None => None,
    };
    let mut out = SourceExpansion::default();
    let mut first_error = None;
    for site in sites {
        let args = site_args(&di, &site, &def.args, &vars);
        let args = match (&segments, args) {
            (Some(_), Ok(args)) => user_args(&site, &def.args, args),
            (_, args) => args,
        };
        let target = match (&segments, def.module) {
            (Some(s), _) => s.target(site.address),
            // A module's function as kprobe_events names it: MOD:SYM+OFFS.
            (None, Some(m)) => Ok(format!(
                "{}:{}",
                super::module_debug::normalize(m),
                site.location
            )),
            (None, None) => Ok(site.location.clone()),
        };
        match (args, target) {
            (Ok(args), Ok(target)) => {
                let n = out.probes.len();
                out.probes.push(SourceProbe {
                    definition: site_definition(&head, &event, n, &target, args),
                    source: site.source.clone(),
                    instance: site.instance.clone(),
                });
            }
            (_, Err(why)) => out.refused.push((site.location.clone(), why)),
            (Err((arg, e)), _) => {
                out.refused.push((site.location.clone(), e.to_string()));
                first_error.get_or_insert((arg, e));
            }
        }
    }
    match first_error {
        // When no site is left, the first refusal, under the argument.
        Some((arg, e)) if out.probes.is_empty() => Err(KernelError::Source {
            text: text.to_string(),
            at: offset_in(text, arg),
            len: arg.len().max(1),
            reason: e.to_string(),
        }),
        _ => Ok(out),
    }
}

/// The arguments of a definition that name variables, parsed; a mistake
/// is refused under its argument.
fn parsed_variables(text: &str, args: &[&str]) -> Result<Vec<ProbeArg>, KernelError> {
    args.iter()
        .filter(|a| is_variable(a))
        .map(|a| {
            ProbeArg::parse(a).map_err(|e| KernelError::Source {
                text: text.to_string(),
                at: offset_in(text, a),
                len: a.len().max(1),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The `n`th site's definition: `HEAD` (`p:` or `p:GRP/`), the event
/// name (`EVENT` for the first site, `EVENT_N` for the others), the
/// target and the arguments.
fn site_definition(head: &str, event: &str, n: usize, target: &str, args: Vec<String>) -> String {
    let mut definition = if n == 0 {
        format!("{head}{event} {target}")
    } else {
        format!("{head}{event}_{n} {target}")
    };
    for a in args {
        definition.push(' ');
        definition.push_str(&a);
    }
    definition
}

/// A uprobe's arguments: a global's fetch (`@SYM`) names a link-time
/// address, which a uprobe cannot read (it reads `@ADDR` in the process,
/// where a position-independent binary is elsewhere), so it is refused.
fn user_args<'t>(
    site: &Site,
    written: &[&'t str],
    args: Vec<String>,
) -> Result<Vec<String>, (&'t str, kprobe_perf_debuginfo::Error)> {
    let Some(i) = args
        .iter()
        .position(|a| a.split_once('=').is_some_and(|(_, f)| f.contains('@')))
    else {
        return Ok(args);
    };
    let var = args[i].split_once('=').map_or("", |(n, _)| n);
    let w = written
        .iter()
        .copied()
        .find(|w| w.contains(var))
        .or_else(|| written.first().copied())
        .unwrap_or("");
    Err((
        w,
        kprobe_perf_debuginfo::Error::Unsupported {
            name: var.to_string(),
            site: site.location.clone(),
            reason: "it is a global variable at a link-time address, and a uprobe reads memory at addresses of the process (not done yet: write the fetch by hand)".into(),
        },
    ))
}

/// The fetch arguments at one site, in the order written: variables from
/// DWARF, the others as written; or the argument that cannot be fetched
/// there, and why.
fn site_args<'t>(
    di: &DebugInfo<'_>,
    site: &Site,
    written: &[&'t str],
    vars: &[ProbeArg],
) -> Result<Vec<String>, (&'t str, kprobe_perf_debuginfo::Error)> {
    let mut vars = vars.iter();
    let mut out = Vec::new();
    for &w in written {
        if !is_variable(w) {
            out.push(w.to_string());
            continue;
        }
        let Some(v) = vars.next() else { continue };
        let probe = di
            .probe_at(site, std::slice::from_ref(v))
            .map_err(|e| (w, e))?;
        out.extend(probe.args.iter().map(ToString::to_string));
    }
    Ok(out)
}

/// `from_perf_syntax_in` for the kernel.
#[cfg(test)]
fn from_perf_syntax(text: &str) -> String {
    from_perf_syntax_in(text, None)
}

/// perf probe's event syntax (`[[GROUP:]EVENT=]POINT [ARGS]`, e.g.
/// `do_sys_openat2:8 fd how->flags`, `fs/open.c:1200 fd`,
/// `mygroup:myev=do_sys_openat2 dfd`) in kprobe-perf's:
/// `p:GROUP/[EVENT] POINT ARGS` with the point spelled with `@` (a
/// function's entry by DWARF as `FUNC@`). Without a group, perf's:
/// `probe`, or for perf's `-x BINARY` when `binary` is given `probe_`
/// and the file's name (the point is then `BINARY:POINT`).
pub fn from_perf_syntax_in(text: &str, binary: Option<&str>) -> String {
    let mut words = text.split_whitespace();
    let first = words.next().unwrap_or("");
    let (group, event, point) = match first.split_once('=') {
        Some((e, p)) if !e.contains(['@', ';']) => match e.split_once(':') {
            None => (None, Some(e), p),
            Some((g, e)) if !g.is_empty() && !e.contains(':') => (Some(g), Some(e), p),
            Some(_) => (None, None, first),
        },
        _ => (None, None, first),
    };
    let ours = perf_point_to_ours(point);
    let mut out = match binary {
        Some(b) => {
            // perf's group: the file's name up to its first character
            // that is no letter, digit or _ (libc.so.6 -> probe_libc).
            let stem: String = Path::new(b)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let group = group.map_or_else(|| format!("probe_{stem}"), str::to_string);
            format!("p:{group}/{} {b}:{ours}", event.unwrap_or(""))
        }
        None => format!(
            "p:{}/{} {ours}",
            group.unwrap_or("probe"),
            event.unwrap_or("")
        ),
    };
    for w in words {
        out.push(' ');
        out.push_str(w);
    }
    out
}

/// [`from_perf_syntax_in`] for perf's `-m MODULE`: the point is the
/// module's (`MOD:POINT`), the group perf's `probe`.
pub fn from_perf_syntax_in_module(text: &str, module: &str) -> String {
    let ours = from_perf_syntax_in(text, None);
    let mut words = ours.splitn(3, ' ');
    let head = words.next().unwrap_or("");
    let point = words.next().unwrap_or("");
    let mut out = format!("{head} {module}:{point}");
    if let Some(rest) = words.next() {
        out.push(' ');
        out.push_str(rest);
    }
    out
}

/// A probe point as perf writes it (`FUNC`, `FUNC:N`, `FUNC@FILE:N`,
/// `FILE:LINE`) in kprobe-perf's spelling (`FUNC@`, `FUNC@+N`,
/// `FUNC@FILE+N`, `@FILE:LINE`).
pub fn perf_point_to_ours(point: &str) -> String {
    if point.starts_with('@') {
        return point.to_string();
    }
    // FUNC;PATTERN and FUNC@FILE;PATTERN (perf's lazy lines).
    if let Some((head, pattern)) = point.split_once(';') {
        let head = if head.contains('@') {
            head.to_string()
        } else {
            format!("{head}@")
        };
        return format!("{head};{pattern}");
    }
    match point.rsplit_once(':') {
        Some((head, line)) => match head.split_once('@') {
            Some((func, file)) => format!("{func}@{file}+{line}"),
            None if is_file(head) => format!("@{head}:{line}"),
            None => format!("{head}@+{line}"),
        },
        None if point.contains('@') => point.to_string(),
        None => format!("{point}@"),
    }
}

/// Whether perf would read a point's head as a source file.
fn is_file(s: &str) -> bool {
    s.contains('/') || s.ends_with(".c") || s.ends_with(".h") || s.ends_with(".S")
}

/// One site of a source point, with the variables that have a value
/// there (perf probe -V).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SiteVariables {
    /// The site.
    pub site: Site,
    /// Its variables, in DWARF order.
    pub variables: Vec<Variable>,
}

/// The variables at each site of a point written as perf does
/// (`FUNC[:RLINE]`, `FILE:LINE`) or as kprobe-perf does (`FUNC@+N`).
pub(super) fn variables(
    file: &DebugFile,
    point_text: &str,
    inlines: bool,
) -> Result<Vec<SiteVariables>, KernelError> {
    let (binary, point_text) = match user_point(point_text) {
        Some((b, p)) if Path::new(b) != file.path() => (DebugFile::open(b).ok(), p),
        Some((_, p)) => (None, p),
        None => (
            None,
            module_point(point_text).map_or(point_text, |(_, p)| p),
        ),
    };
    let perf = if is_source_point(point_text) {
        perf_point(point_text)
    } else {
        point_text.to_string()
    };
    let point = ProbePoint::parse(&perf).map_err(|e| KernelError::Source {
        text: point_text.to_string(),
        at: 0,
        len: point_text.len().max(1),
        reason: e.to_string(),
    })?;
    let mut di = DebugInfo::new(file)?;
    if let Some(b) = &binary {
        di = di.with_call_frames_of(b)?;
    }
    let mut out = Vec::new();
    for site in di.sites(&point, &Options { inlines })? {
        let variables = di.variables(&site)?;
        out.push(SiteVariables { site, variables });
    }
    Ok(out)
}

/// The lines of function `name` a probe can go on (perf -L's numbered
/// lines: with code, not starting at another line's address; `in_file`:
/// the function defined in a file ending so), with the offset of each
/// one's first statement from the start of `range` (the function's
/// link-time addresses), when the line table has one inside it.
pub(super) fn function_lines(
    file: &DebugFile,
    name: &str,
    in_file: Option<&str>,
    range: Option<(u64, u64)>,
) -> Result<(FunctionLines, Vec<Option<u64>>), KernelError> {
    let di = DebugInfo::new(file)?;
    let lines = di.listed_lines(name, in_file)?;
    let rows = match range {
        Some((from, to)) => di.rows_between(name, from, to)?,
        None => Vec::new(),
    };
    let same_file = |f: &str| f.ends_with(&lines.file) || lines.file.ends_with(f);
    let start = range.map_or(0, |r| r.0);
    let offsets = lines
        .lines
        .iter()
        .map(|&l| {
            if l == lines.decl_line && range.is_some() {
                // The declaration's line is the entry's (perf's rule).
                return Some(0);
            }
            rows.iter()
                .filter(|r| r.2 == l && r.3 && same_file(&r.1))
                .map(|r| r.0 - start)
                .min()
        })
        .collect();
    Ok((lines, offsets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_points_are_told_apart_from_other_targets() {
        for yes in [
            "p:do_sys_openat2@+8 fd",
            "p:ev do_sys_openat2@+8",
            "p:grp/ev @fs/open.c:1200 fd",
            "p:do_sys_openat2@fs/open.c",
            "p:do_sys_openat2@open.c+3",
        ] {
            assert!(names_source_point(yes), "{yes}");
        }
        for no in [
            "p:do_sys_openat2 dfd",
            "p:ext4:ext4_file_open",
            "p:init_once@0xffffffff81000000+4 %di",
            "p:/usr/bin/bash:readline %di",
            "p:do_sys_openat2 @jiffies",
            "p:vfs_read @0xffffffff82000000:u64",
            "r:do_sys_openat2 $retval",
        ] {
            assert!(!names_source_point(no), "{no}");
        }
    }

    #[test]
    fn user_source_points_name_their_binary() {
        for (def, binary, point) in [
            ("p:/usr/bin/prog:main@+3 argc", "/usr/bin/prog", "main:3"),
            ("p:ev /tmp/w:@walk.c:18 m", "/tmp/w", "walk.c:18"),
            ("p:g/e ./prog:walk@ p", "./prog", "walk"),
        ] {
            assert!(names_source_point(def), "{def}");
            assert_eq!(user_binary(def), Some(binary), "{def}");
            let d = split(def).unwrap();
            assert_eq!((d.binary, d.point.as_str()), (Some(binary), point));
        }
        assert_eq!(user_binary("p:do_sys_openat2@+8 fd"), None);
        assert!(!names_source_point("p:/usr/bin/prog:main+3 %di"));
    }

    #[test]
    fn module_source_points_name_their_module() {
        for (def, module, point) in [
            ("p:9p:v9fs_file_open@+2 file", "9p", "v9fs_file_open:2"),
            ("p:ev 9p:v9fs_vfs_lookup@ dentry", "9p", "v9fs_vfs_lookup"),
            (
                "p:g/e 9pnet:@net/9p/client.c:700 c",
                "9pnet",
                "net/9p/client.c:700",
            ),
        ] {
            assert!(names_source_point(def), "{def}");
            assert_eq!(module_name(def), Some(module), "{def}");
            assert_eq!(user_binary(def), None, "{def}");
            let d = split(def).unwrap();
            assert_eq!((d.module, d.point.as_str()), (Some(module), point));
        }
        assert_eq!(module_name("p:do_sys_openat2@+8 fd"), None);
        assert_eq!(module_name("p:/usr/bin/prog:main@+3 argc"), None);
        assert!(!names_source_point("p:9p:v9fs_file_open+41 %si"));
        assert_eq!(
            from_perf_syntax_in_module("v9fs_file_open:2 file", "9p"),
            "p:probe/ 9p:v9fs_file_open@+2 file"
        );
        assert_eq!(
            from_perf_syntax_in_module("g:e=fs/9p/vfs_file.c:60", "9p"),
            "p:g/e 9p:@fs/9p/vfs_file.c:60"
        );
    }

    #[test]
    fn our_spelling_maps_to_perfs() {
        assert_eq!(perf_point("do_sys_openat2@+8"), "do_sys_openat2:8");
        assert_eq!(perf_point("f@fs/open.c"), "f@fs/open.c");
        assert_eq!(perf_point("f@fs/open.c+3"), "f@fs/open.c:3");
        assert_eq!(perf_point("@fs/open.c:1200"), "fs/open.c:1200");
        assert_eq!(perf_point("vfs_read@;ret=*"), "vfs_read;ret=*");
        assert_eq!(perf_point("f@a/b.c;x+=*"), "f@a/b.c;x+=*");
        assert_eq!(perf_point_to_ours("vfs_read;ret=*"), "vfs_read@;ret=*");
        assert_eq!(perf_point_to_ours("f@a/b.c;x:y"), "f@a/b.c;x:y");
        assert!(names_source_point("p:vfs_read@;ret=rw_verify_area* ret"));
        assert_eq!(
            user_binary("p:/usr/bin/prog:walk@;sink(step)* total"),
            Some("/usr/bin/prog")
        );
    }

    #[test]
    fn perfs_syntax_maps_to_ours() {
        assert_eq!(
            from_perf_syntax("do_sys_openat2:8 fd dfd how->flags"),
            "p:probe/ do_sys_openat2@+8 fd dfd how->flags"
        );
        assert_eq!(
            from_perf_syntax("fs/open.c:1200 fd"),
            "p:probe/ @fs/open.c:1200 fd"
        );
        assert_eq!(
            from_perf_syntax("myev=do_sys_openat2 dfd"),
            "p:probe/myev do_sys_openat2@ dfd"
        );
        assert_eq!(
            from_perf_syntax("kpf:myev=do_sys_openat2:17 fd"),
            "p:kpf/myev do_sys_openat2@+17 fd"
        );
        assert_eq!(
            from_perf_syntax_in("grp:ev=walk:3 x", Some("/usr/bin/prog")),
            "p:grp/ev /usr/bin/prog:walk@+3 x"
        );
        assert_eq!(
            from_perf_syntax_in("ev=walk x", Some("/usr/bin/prog")),
            "p:probe_prog/ev /usr/bin/prog:walk@ x"
        );
        assert_eq!(from_perf_syntax("f@a/b.c:3 x"), "p:probe/ f@a/b.c+3 x");
        assert_eq!(from_perf_syntax("f@a/b.c"), "p:probe/ f@a/b.c");
        let d = split("p:probe/ do_sys_openat2@+8 fd").unwrap();
        assert_eq!((d.group, d.event), (Some("probe"), None));
        assert_eq!(d.point, "do_sys_openat2:8");
        for s in [
            "p:do_sys_openat2@+8 fd",
            "p:@fs/open.c:1200 fd",
            "p:f@a/b.c+3 x",
        ] {
            let d = split(s).unwrap();
            assert_eq!(
                &s[d.at..d.at + d.len],
                s.split_whitespace()
                    .next()
                    .unwrap()
                    .trim_start_matches("p:")
            );
        }
    }

    #[test]
    fn return_probes_at_a_line_are_refused_with_a_caret() {
        let e = split("r:do_sys_openat2@+8 fd").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("^"), "{text}");
        assert!(text.contains("entry probe"), "{text}");
    }
}
