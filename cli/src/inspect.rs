//! `kprobe-perf list` and `kprobe-perf probe --lines`: what a glob selects
//! and where in a function a probe may go, answered without opening a
//! probe.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kprobe_perf_engine::plan::{BackendChoice, KernelFeatures};
use kprobe_perf_engine::preflight::{KernelTextSource, Prediction, Preflight};
use kprobe_perf_engine::select::{self, SelectOptions};
use kprobe_perf_engine::spec::{Definition, FetchBase, ProbeKind, ProbeSpec, Target};
use kprobe_perf_engine::{Arch, KernelSymbols};
use kprobe_perf_symbols::Blacklist;

/// The running kernel's symbols with the debugfs blacklist when readable;
/// says on stderr what could not be read.
pub fn kernel_symbols() -> Result<KernelSymbols> {
    let mut symbols = KernelSymbols::load().context("reading the kernel's symbols")?;
    if symbols.addresses_hidden() {
        eprintln!(
            "kprobe-perf: /proc/kallsyms hides addresses from this process (kernel.kptr_restrict, or no CAP_SYSLOG): run as root or lower kernel.kptr_restrict; section and address checks are skipped"
        );
    }
    match Blacklist::load() {
        Ok(b) => symbols.set_blacklist(b),
        Err(e) => eprintln!("kprobe-perf: the kprobe blacklist is not checked: {e}"),
    }
    Ok(symbols)
}

use crate::text_source::{release, ImageArgs};

/// The kernel text for checks (see [`crate::text_source::open`]).
fn kernel_text(
    args: &ImageArgs,
    symbols: &KernelSymbols,
    with_sizes: bool,
) -> Result<Option<Box<dyn KernelTextSource>>> {
    crate::text_source::open(args, symbols, with_sizes)
}

/// The running kernel's architecture (`/proc/sys/kernel/arch`, as
/// `uname -m` says it), which decides how its text is decoded; the
/// build's own when that file is missing.
fn host_arch() -> Result<Arch> {
    std::fs::read_to_string("/proc/sys/kernel/arch")
        .ok()
        .and_then(|m| Arch::from_machine(&m))
        .or_else(Arch::host)
        .context("kprobe-perf supports x86_64 and aarch64 only")
}

/// Refuses, before anything is opened, a probe the kernel would refuse
/// (a mid-instruction offset, a notrace or blacklisted function ...),
/// when the kernel's text is readable; otherwise the kernel decides.
pub fn check_plans(
    plans: &[kprobe_perf_engine::ProbePlan],
    symbols: &KernelSymbols,
    image: &ImageArgs,
) -> Result<()> {
    let Some(text) = kernel_text(image, symbols, false)? else {
        return Ok(());
    };
    let rel = release();
    let pre = Preflight::new(symbols, text.as_ref(), host_arch()?).with_release(&rel);
    for p in plans {
        pre.check(p)?;
    }
    Ok(())
}

/// Expands globs in the definitions (`p:tcp_v4_*`) into one definition
/// per function `list` would keep, and says on stderr how many each made.
/// Under `--backend auto`, on a kernel with fprobe events, a glob becomes
/// one fprobe event instead (or a few narrower ones, when the kernel's
/// wildcard would also arm functions `list` leaves out): see [`glob_route`].
pub fn expand_globs(
    specs: &[String],
    symbols: &KernelSymbols,
    all_instances: bool,
    image: &ImageArgs,
    choice: BackendChoice,
) -> Result<Vec<String>> {
    let arch = host_arch()?;
    // The target is the first or second word (`p:tcp_*`, `p:ev tcp_*`);
    // skip reading kernel text when no definition has a glob there.
    let has_glob = |s: &String| {
        s.split_whitespace()
            .take(2)
            .any(kprobe_perf_symbols::is_glob)
    };
    if !all_instances && !specs.iter().any(has_glob) {
        return Ok(specs.to_vec());
    }
    let text = kernel_text(image, symbols, false)?;
    let rel = release();
    let preflight = text
        .as_deref()
        .map(|t| Preflight::new(symbols, t, arch).with_release(&rel));
    let traceable = select::traceable_functions().ok();
    let opts = SelectOptions {
        preflight: preflight.as_ref(),
        traceable: if preflight.is_some() {
            None
        } else {
            traceable.as_ref()
        },
        include_fragile: false,
        all_instances,
    };
    let features = KernelFeatures::running_kernel();
    let mut out = Vec::new();
    for s in specs {
        let route = match (choice, ProbeSpec::parse(s, arch)) {
            (BackendChoice::Auto, Ok(spec)) if has_glob(s) => Some(glob_route(
                &spec,
                symbols,
                &opts,
                traceable.as_ref(),
                features,
            )),
            _ => None,
        };
        if let Some(GlobRoute::Fprobe { definitions, note }) = &route {
            eprintln!("kprobe-perf: {s}: {note}");
            out.extend(definitions.iter().cloned());
            continue;
        }
        let expanded = select::expand_globs(std::slice::from_ref(s), symbols, arch, &opts)?;
        if expanded.len() != 1 || expanded[0] != *s {
            let why = match &route {
                Some(GlobRoute::Kprobes(why)) => format!("; not an fprobe event: {why}"),
                _ => String::new(),
            };
            eprintln!(
                "kprobe-perf: {s}: {} probes (what was left out and why: kprobe-perf list --why PATTERN){why}",
                expanded.len()
            );
        }
        out.extend(expanded);
    }
    Ok(out)
}

/// Most narrower fprobe events one glob is split into before the engine
/// falls back to one kprobe per function.
const MAX_FPROBE_SPLIT: usize = 32;

/// How a glob definition reaches the kernel under `--backend auto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobRoute {
    /// fprobe definitions: one for the glob, or narrower ones that leave
    /// out what `list` excludes; `note` says which.
    Fprobe {
        /// The `f:` definitions.
        definitions: Vec<String>,
        /// What to tell the user.
        note: String,
    },
    /// One kprobe per kept function, and why not an fprobe event.
    Kprobes(String),
}

/// Whether a glob definition can be fprobe events on this kernel, and
/// which. The kernel's wildcard arms every function of
/// `available_filter_functions` it matches (`traceable`), and an fprobe
/// definition takes one glob with no exclusion (trace_fprobe.c: no symbol
/// list); so when it would also arm a function `list` leaves out, the glob
/// is split into narrower ones (`narrower_globs`), or, past
/// [`MAX_FPROBE_SPLIT`], left to kprobes.
pub fn glob_route(
    spec: &ProbeSpec,
    symbols: &KernelSymbols,
    opts: &SelectOptions<'_>,
    traceable: Option<&std::collections::HashSet<String>>,
    features: Option<&KernelFeatures>,
) -> GlobRoute {
    let kprobes = |why: &str| GlobRoute::Kprobes(why.to_string());
    if !features.is_some_and(|f| f.fprobe) {
        return kprobes("this kernel's tracefs README has no fprobe events (f:; CONFIG_FPROBE_EVENTS, Linux 6.4+)");
    }
    let Target::Symbol {
        module: None,
        name: pattern,
        instance: None,
        offset: 0,
    } = &spec.target
    else {
        return kprobes("an fprobe event takes a function glob with no module and no offset");
    };
    let kind = match spec.kind {
        ProbeKind::Entry => ProbeKind::Entry,
        ProbeKind::Return { maxactive: None } => ProbeKind::Return { maxactive: None },
        ProbeKind::Return { .. } => return kprobes("maxactive is kept on kprobes"),
    };
    if let Some(a) = spec
        .args
        .iter()
        .find(|a| matches!(a.fetch.base, FetchBase::Register(_)))
    {
        return kprobes(&format!(
            "{a}: fprobe events cannot fetch registers (use $argN)"
        ));
    }
    let Some(traceable) = traceable else {
        return kprobes("available_filter_functions is unreadable, so what the kernel's wildcard arms is unknown");
    };
    let found = select::candidates(symbols, pattern, opts);
    let kept: std::collections::HashSet<&str> = found
        .iter()
        .filter(|c| c.excluded.is_none())
        .map(|c| c.symbol.name.as_str())
        .collect();
    if kept.is_empty() {
        return kprobes("it keeps no function");
    }
    let mut avoid: Vec<&str> = found
        .iter()
        .filter(|c| c.excluded.is_some())
        .map(|c| c.symbol.name.as_str())
        .filter(|n| traceable.contains(*n) && !kept.contains(n))
        .collect();
    avoid.sort_unstable();
    avoid.dedup();
    let globs = if avoid.is_empty() {
        vec![pattern.clone()]
    } else {
        let keep: Vec<&str> = kept.iter().copied().collect();
        match kprobe_perf_symbols::narrower_globs(pattern, &keep, &avoid) {
            Some(g) if g.len() <= MAX_FPROBE_SPLIT => g,
            Some(g) => {
                return kprobes(&format!(
                    "leaving out {} functions the kernel's wildcard would arm (e.g. {}) takes {} narrower fprobe events, more than {MAX_FPROBE_SPLIT}",
                    avoid.len(),
                    avoid[0],
                    g.len()
                ))
            }
            None => {
                return kprobes(&format!(
                    "the kernel's wildcard would arm {} functions left out (e.g. {}), and {pattern} cannot be split into narrower globs",
                    avoid.len(),
                    avoid[0]
                ))
            }
        }
    };
    let mut definitions = Vec::with_capacity(globs.len());
    for g in &globs {
        let f = ProbeSpec {
            kind,
            target: Target::Fprobe { name: g.clone() },
            ..spec.clone()
        };
        // The fprobe grammar is stricter (no BTF names on a glob): what
        // it refuses stays on kprobes.
        let text = f.to_string();
        if let Err(e) = Definition::parse(&text, Arch::host().unwrap_or(Arch::X86_64)) {
            return GlobRoute::Kprobes(format!("as an fprobe event: {}", e.message));
        }
        definitions.push(text);
    }
    let note = if globs.len() == 1 {
        format!(
            "one fprobe event {} over the {} functions kept (the kernel arms every traceable match)",
            definitions[0],
            kept.len()
        )
    } else {
        format!(
            "{} fprobe events ({}) over the {} functions kept, leaving out {} the kernel's wildcard would arm (kprobe-perf list --why {pattern})",
            globs.len(),
            globs.join(" "),
            kept.len(),
            avoid.len()
        )
    };
    GlobRoute::Fprobe { definitions, note }
}

/// After the session is enabled: for each fprobe event over a glob, the
/// functions the kernel armed (`enabled_functions`, the lines matching the
/// event's glob), on stderr.
pub fn report_armed(plans: &[kprobe_perf_engine::ProbePlan]) {
    let globs: Vec<(&str, &str)> = plans
        .iter()
        .filter_map(|p| match &p.spec.target {
            Target::Fprobe { name } if kprobe_perf_symbols::is_glob(name) => {
                Some((p.event.as_str(), name.as_str()))
            }
            _ => None,
        })
        .collect();
    if globs.is_empty() {
        return;
    }
    let Ok(text) = std::fs::read_to_string("/sys/kernel/tracing/enabled_functions")
        .or_else(|_| std::fs::read_to_string("/sys/kernel/debug/tracing/enabled_functions"))
    else {
        eprintln!("kprobe-perf: enabled_functions is unreadable: cannot list the functions the kernel armed");
        return;
    };
    let enabled: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for (event, glob) in globs {
        let mut armed: Vec<&str> = enabled
            .iter()
            .copied()
            .filter(|n| kprobe_perf_symbols::glob_match(glob, n))
            .collect();
        armed.sort_unstable();
        armed.dedup();
        eprintln!(
            "kprobe-perf: {event} ({glob}): the kernel armed {} functions: {}",
            armed.len(),
            armed.join(" ")
        );
    }
}

/// `kprobe-perf list PATTERN... [--why] [--include-fragile]`.
pub fn list(
    patterns: &[String],
    why: bool,
    include_fragile: bool,
    image: &ImageArgs,
) -> Result<ExitCode> {
    let symbols = kernel_symbols()?;
    let arch = host_arch()?;
    let text = kernel_text(image, &symbols, false)?;
    let rel = release();
    let preflight = text
        .as_deref()
        .map(|t| Preflight::new(&symbols, t, arch).with_release(&rel));
    let traceable = match &preflight {
        Some(_) => None,
        None => select::traceable_functions().ok(),
    };
    let notrace_by = match (&preflight, &traceable) {
        (Some(p), _) => format!(
            "notrace judged from the function bytes ({})",
            p.text_source()
        ),
        (None, Some(_)) => "notrace judged from available_filter_functions".to_string(),
        (None, None) => {
            "notrace NOT checked (neither /proc/kcore nor available_filter_functions is readable)"
                .to_string()
        }
    };
    let opts = SelectOptions {
        preflight: preflight.as_ref(),
        traceable: traceable.as_ref(),
        include_fragile,
        all_instances: false,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut any = false;
    for pattern in patterns {
        let found = select::candidates(&symbols, pattern, &opts);
        let kept = found.iter().filter(|c| c.excluded.is_none()).count();
        let mut shown = std::collections::HashSet::new();
        for c in &found {
            // Hidden addresses are zeros: never show them as labels.
            if symbols.addresses_hidden() && !shown.insert((&c.symbol.name, &c.symbol.module)) {
                continue;
            }
            let name = if c.duplicate && !symbols.addresses_hidden() {
                c.symbol.label()
            } else {
                match &c.symbol.module {
                    Some(m) => format!("{m}:{}", c.symbol.name),
                    None => c.symbol.name.clone(),
                }
            };
            let line = match (&c.excluded, why) {
                (None, false) => name,
                (Some(_), false) => continue,
                (None, true) if c.duplicate => {
                    format!("kept      {name}: one of several with this name, probed by address")
                }
                (None, true) => format!("kept      {name}"),
                (Some(x), true) => format!("excluded  {name}: {}", crate::hints::excluded(x)),
            };
            writeln!(out, "{line}").context("writing the list")?;
        }
        any |= kept > 0;
        out.flush().context("writing the list")?;
        eprintln!(
            "kprobe-perf: {pattern}: {} matched, {kept} kept, {} excluded; {notrace_by}",
            found.len(),
            found.len() - kept
        );
        if why {
            eprintln!(
                "kprobe-perf: {pattern}: {}",
                route_text(pattern, &symbols, &opts)
            );
        }
    }
    Ok(if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The route `p:PATTERN` takes under `--backend auto`, in words.
fn route_text(pattern: &str, symbols: &KernelSymbols, opts: &SelectOptions<'_>) -> String {
    let Ok(arch) = host_arch() else {
        return "route unknown on this architecture".into();
    };
    let Ok(spec) = ProbeSpec::parse(&format!("p:{pattern}"), arch) else {
        return "route: one kprobe per kept function".into();
    };
    let traceable = select::traceable_functions().ok();
    match glob_route(
        &spec,
        symbols,
        opts,
        traceable.as_ref(),
        KernelFeatures::running_kernel(),
    ) {
        GlobRoute::Fprobe { note, .. } => format!("route with --backend auto: {note}"),
        GlobRoute::Kprobes(why) => {
            format!("route with --backend auto: one kprobe per kept function; not an fprobe event: {why}")
        }
    }
}

/// `kprobe-perf probe --lines FUNC`: every instruction of FUNC with the
/// kernel's predicted answer for a kprobe there.
pub fn lines(func: &str, image: &ImageArgs) -> Result<ExitCode> {
    let symbols = kernel_symbols()?;
    let arch = host_arch()?;
    if symbols.addresses_hidden() {
        bail!("--lines needs kernel addresses, which /proc/kallsyms hides from this process: run as root");
    }
    let Some(text) = kernel_text(image, &symbols, true)? else {
        bail!("--lines needs the kernel's text: /proc/kcore is not readable here (run as root on a kernel with CONFIG_PROC_KCORE) and no vmlinux was found (looked in {}; give --vmlinux)", crate::text_source::looked_in(&kprobe_perf_symbols::image::vmlinux_candidates(&release())));
    };
    let (module, name) = match func.split_once(':') {
        Some((m, n)) => (Some(m), n),
        None => (None, func),
    };
    let found: Vec<_> = symbols
        .lookup(name)
        .into_iter()
        .filter(|s| s.is_text() && (module.is_none() || s.module.as_deref() == module))
        .collect();
    let sym = match found.as_slice() {
        [one] => *one,
        [] => bail!("{func} is not a function in /proc/kallsyms"),
        many => bail!(
            "{func} names {} functions ({}); give MOD:{name} for a module's",
            many.len(),
            many.iter()
                .map(|s| s.label())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let rel = release();
    let pre = Preflight::new(&symbols, text.as_ref(), arch).with_release(&rel);
    let f = pre.function(sym).map_err(|e| anyhow::anyhow!("{e}"))?;
    let listing = pre.listing(&f);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match listing.code_size {
        Some(c) if c < listing.size => format!(", code {c} bytes then padding"),
        _ => String::new(),
    };
    writeln!(
        out,
        "{} at 0x{:x}, {} bytes{code} (bytes from {})",
        listing.name, listing.address, listing.size, listing.source
    )?;
    if let Some(r) = &listing.refusal {
        writeln!(out, "the kernel refuses every probe here: {r}")?;
    }
    writeln!(out, "  offset  probes  instruction")?;
    for l in &listing.lines {
        let marks = match (&l.entry, l.ret) {
            (Prediction::Accept, true) => "p r",
            (Prediction::Accept, false) => "p  ",
            (Prediction::Refuse { .. }, _) => "-  ",
        };
        let bytes: Vec<String> = l.insn.bytes.iter().map(|b| format!("{b:02x}")).collect();
        let why = match &l.entry {
            Prediction::Refuse { errno, reason } if listing.refusal.is_none() => {
                format!("   ; {errno}: {reason}")
            }
            Prediction::Accept if l.padding => {
                "   ; padding after the last instruction: accepted, but never runs".to_string()
            }
            _ => String::new(),
        };
        writeln!(
            out,
            "  +{:<6} {marks}    {:<24} {}{why}",
            l.insn.offset,
            bytes.join(" "),
            l.insn.text
        )?;
    }
    writeln!(
        out,
        "p: a kprobe (p:{name}+OFFSET) is accepted; r: a kretprobe is too; -: refused, with the errno the kernel would answer"
    )?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `kprobe-perf info`: first the doctor's checks (can this kernel and
/// this process probe, and what to do if not), then the running kernel
/// as kprobe-perf sees it.
pub fn info(image: &ImageArgs) -> Result<ExitCode> {
    use crate::text_source::{describe_image, match_image};
    use kprobe_perf_symbols::image as img;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let rel = release();
    writeln!(out, "kernel: {rel} ({})", std::env::consts::ARCH)?;
    writeln!(out, "kprobe-perf: {}", env!("KPROBE_PERF_VERSION"))?;
    crate::doctor::print(&mut out, &crate::doctor::checks(&rel))?;
    out.flush()?;
    let symbols = kernel_symbols()?;
    let core = symbols.iter().filter(|s| s.module.is_none()).count();
    writeln!(
        out,
        "kallsyms: {} symbols ({core} core, {} in modules), addresses {}",
        symbols.len(),
        symbols.len() - core,
        if symbols.addresses_hidden() {
            "HIDDEN (kernel.kptr_restrict, or no CAP_SYSLOG)"
        } else {
            "visible"
        }
    )?;
    let hex = |x: &[u8]| x.iter().map(|b| format!("{b:02x}")).collect::<String>();
    match img::running_build_id() {
        Some(id) => writeln!(out, "build ID: {} (/sys/kernel/notes)", hex(&id))?,
        None => writeln!(out, "build ID: unknown (/sys/kernel/notes has none)")?,
    }
    let m = match_image(image, &symbols)?;
    let slide = m.slide.map_or_else(
        || "KASLR slide unknown".to_string(),
        |s| {
            format!(
                "KASLR slide 0x{:x} (from _text, confirmed on {} functions)",
                s.slide, s.checked
            )
        },
    );
    match &m.vmlinux {
        Some(v) => {
            // match_image refused a vmlinux whose build ID differs.
            let id = match (v.build_id(), img::running_build_id()) {
                (Some(_), Some(_)) => "build ID matches the running kernel",
                (Some(_), None) => "build ID not compared (the running kernel shows none)",
                (None, _) => "no build ID in the image",
            };
            writeln!(out, "vmlinux: {}, {id}, {slide}", describe_image(v))?;
        }
        None => writeln!(
            out,
            "vmlinux: none (looked in {}; give --vmlinux)",
            crate::text_source::looked_in(&img::vmlinux_candidates(&rel))
        )?,
    }
    match &m.system_map {
        Some(map) => {
            let own = map.slide_against(&symbols, None).map_or_else(
                |e| format!("{e}"),
                |s| {
                    format!(
                        "KASLR slide 0x{:x}, confirmed on {} functions",
                        s.slide, s.checked
                    )
                },
            );
            writeln!(out, "System.map: {}, {own}", describe_image(map))?;
        }
        None => writeln!(
            out,
            "System.map: none usable (looked in {}; give --system-map)",
            crate::text_source::looked_in(&img::system_map_candidates(&rel))
        )?,
    }
    match kernel_text(image, &symbols, true)? {
        Some(t) => writeln!(out, "kernel text: {}", t.describe())?,
        None => writeln!(
            out,
            "kernel text: none (/proc/kcore unreadable and no vmlinux): offsets are left to the kernel"
        )?,
    }
    let btf = std::fs::metadata(kprobe_perf_symbols::prototypes::VMLINUX_BTF);
    match btf {
        Ok(md) => writeln!(
            out,
            "BTF: {} ({} bytes)",
            kprobe_perf_symbols::prototypes::VMLINUX_BTF,
            md.len()
        )?,
        Err(e) => writeln!(
            out,
            "BTF: none ({}: {e}); argument names need CONFIG_DEBUG_INFO_BTF",
            kprobe_perf_symbols::prototypes::VMLINUX_BTF
        )?,
    }
    match Blacklist::load() {
        Ok(b) => writeln!(out, "kprobe blacklist: {} ranges", b.len())?,
        Err(e) => writeln!(out, "kprobe blacklist: not readable ({e})")?,
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syms() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _text\n\
             ffffffff81100000 T vfs_read\n\
             ffffffff81100100 T vfs_readv\n\
             ffffffff81100200 T vfs_write\n\
             ffffffff81100300 T vfs_lock_file\n\
             ffffffff81100400 T vfs_open\n\
             ffffffff81100500 T vfs_notrace_me\n",
        )
        .unwrap()
    }

    fn route(text: &str, traceable: &[&str], fprobe: bool) -> GlobRoute {
        let symbols = syms();
        let traceable: std::collections::HashSet<String> =
            traceable.iter().map(|s| s.to_string()).collect();
        let opts = SelectOptions {
            traceable: Some(&traceable),
            ..SelectOptions::default()
        };
        let features = KernelFeatures {
            fprobe,
            ..KernelFeatures::default()
        };
        glob_route(
            &ProbeSpec::parse(text, Arch::X86_64).unwrap(),
            &symbols,
            &opts,
            Some(&traceable),
            Some(&features),
        )
    }

    const TRACEABLE: &[&str] = &[
        "vfs_read",
        "vfs_readv",
        "vfs_write",
        "vfs_lock_file",
        "vfs_open",
    ];

    #[test]
    fn a_glob_becomes_one_fprobe_event_when_nothing_armable_is_left_out() {
        // vfs_notrace_me is not traceable: the kernel's wildcard skips it.
        assert_eq!(
            route("p:vfs_*", &["vfs_read", "vfs_open"], true),
            GlobRoute::Fprobe {
                definitions: vec!["f vfs_*".into()],
                note: "one fprobe event f vfs_* over the 2 functions kept (the kernel arms every traceable match)".into()
            }
        );
        assert_eq!(
            route("r:ev vfs_r* $retval", &["vfs_read", "vfs_readv"], true),
            GlobRoute::Fprobe {
                definitions: vec!["f:ev vfs_r*%return $retval".into()],
                note: "one fprobe event f:ev vfs_r*%return $retval over the 2 functions kept (the kernel arms every traceable match)".into()
            }
        );
    }

    #[test]
    fn a_fragile_family_splits_the_glob() {
        // vfs_lock_file is in the "lock" family and traceable: one glob
        // would arm it, so vfs_* becomes narrower globs that leave it out.
        assert_eq!(
            route("p:vfs_* $arg1", TRACEABLE, true),
            GlobRoute::Fprobe {
                definitions: vec!["f vfs_o* $arg1".into(), "f vfs_r* $arg1".into(), "f vfs_w* $arg1".into()],
                note: "3 fprobe events (vfs_o* vfs_r* vfs_w*) over the 4 functions kept, leaving out 1 the kernel's wildcard would arm (kprobe-perf list --why vfs_*)".into()
            }
        );
    }

    #[test]
    fn what_fprobe_cannot_do_stays_on_kprobes() {
        assert_eq!(
            route("p:vfs_* %di", TRACEABLE, true),
            GlobRoute::Kprobes("%di: fprobe events cannot fetch registers (use $argN)".into())
        );
        assert_eq!(
            route("r5:vfs_*", TRACEABLE, true),
            GlobRoute::Kprobes("maxactive is kept on kprobes".into())
        );
        assert_eq!(
            route("p:vfs_*", TRACEABLE, false),
            GlobRoute::Kprobes("this kernel's tracefs README has no fprobe events (f:; CONFIG_FPROBE_EVENTS, Linux 6.4+)".into())
        );
        assert_eq!(
            route("p:v?s_*", TRACEABLE, true),
            GlobRoute::Kprobes("the kernel's wildcard would arm 1 functions left out (e.g. vfs_lock_file), and v?s_* cannot be split into narrower globs".into())
        );
    }
}
