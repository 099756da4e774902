//! `kprobe-perf list` and `kprobe-perf probe --lines`: what a glob selects
//! and where in a function a probe may go, answered without opening a
//! probe.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kprobe_perf_engine::cli::kernel::preflight::{Listing, Prediction, Preflight};
use kprobe_perf_engine::cli::kernel::source::AddressLookup;
use kprobe_perf_engine::cli::kernel::Symbol;
use kprobe_perf_engine::cli::kernel::{
    self, ExpandedAs, FprobeRoute, GlobOptions, GlobRoute, Kernel, KernelOptions, NotraceBy,
    Selection, SizesFrom,
};
use kprobe_perf_engine::cli::plan::BackendChoice;
use kprobe_perf_engine::spec::{ProbeSpec, Target};
use kprobe_perf_engine::KernelSymbols;

use crate::image_args::{self, describe_image, discover, explain, report_skipped, ImageArgs};

/// The kernel for `record`: kallsyms may be unreadable or hide addresses;
/// probes then go by name and output shows raw addresses. Nothing is said
/// about either, nor about the blacklist.
pub(crate) fn record_kernel(image: &ImageArgs) -> Kernel {
    let options: KernelOptions = image.options(SizesFrom::Kallsyms);
    Kernel::discover(options.clone())
        .unwrap_or_else(|_| Kernel::with_symbols(KernelSymbols::default(), options))
}

/// The checks over the kernel's text, with what the kernel left out said
/// on stderr; `None` when there is no text.
fn preflight(kernel: &Kernel) -> Result<Option<Preflight<'_>>> {
    image_args::text(kernel)?;
    Ok(kernel.preflight()?)
}

/// The judge of glob candidates, with what the kernel left out said on
/// stderr.
pub(crate) fn selection<'k>(kernel: &'k Kernel, opts: &GlobOptions) -> Result<Selection<'k>> {
    image_args::text(kernel)?;
    Ok(kernel.selection(opts)?)
}

/// Refuses, before anything is opened, a probe the kernel would refuse
/// (a mid-instruction offset, a notrace or blacklisted function ...),
/// when the kernel's text is readable; otherwise the kernel decides.
pub(crate) fn check_plans(kernel: &Kernel, plans: &[kprobe_perf_engine::ProbePlan]) -> Result<()> {
    image_args::text(kernel)?;
    kernel.check(plans)?;
    report_pending(plans);
    Ok(())
}

/// Says which probes wait for their module to load.
fn report_pending(plans: &[kprobe_perf_engine::ProbePlan]) {
    for p in plans {
        if let Some(m) = &p.pending_module {
            say!(
                "kprobe-perf: {}: pending: module {m} is not loaded; kprobe_events keeps the probe ({}) and arms it each time {m} loads",
                p.event,
                p.spec
            );
        }
    }
}

/// Expands globs in the definitions (`p:tcp_v4_*`) into one definition
/// per function `list` would keep, and says on stderr how many each made.
/// Under `--backend auto`, on a kernel with fprobe events, a glob becomes
/// one fprobe event instead (or a few narrower ones, when the kernel's
/// wildcard would also arm functions `list` leaves out).
pub(crate) fn expand_globs(
    kernel: &Kernel,
    specs: &[String],
    all_instances: bool,
    choice: BackendChoice,
    processes: &[i32],
) -> Result<Vec<String>> {
    let opts = GlobOptions::default()
        .all_instances(all_instances)
        .backend(choice)
        .processes(
            processes
                .iter()
                .filter_map(|&p| u32::try_from(p).ok())
                .collect(),
        );
    let expanded = kernel.expand_globs(specs, &opts).map_err(explain);
    report_skipped(kernel);
    let mut out = Vec::new();
    for e in expanded? {
        match &e.how {
            ExpandedAs::Fprobe(f) => {
                say!("kprobe-perf: {}: {}", e.definition, fprobe_note(f));
            }
            ExpandedAs::Kprobes { not_fprobe } => {
                let why = match not_fprobe {
                    Some(why) => format!("; not an fprobe event: {why}"),
                    None => String::new(),
                };
                say!(
                    "kprobe-perf: {}: {} probes (what was left out and why: kprobe-perf list --why PATTERN){why}",
                    e.definition,
                    e.definitions.len()
                );
            }
            ExpandedAs::SdtSites if e.definitions.len() > 1 => {
                say!(
                    "kprobe-perf: {}: {} SDT probe sites (each listed by: kprobe-perf list usdt:PATH)",
                    e.definition,
                    e.definitions.len()
                );
            }
            _ => {}
        }
        out.extend(e.definitions);
    }
    Ok(out)
}

/// What to tell the user of a glob made fprobe events.
fn fprobe_note(f: &FprobeRoute) -> String {
    if f.left_out == 0 {
        format!(
            "one fprobe event {} over the {} functions kept (the kernel arms every traceable match)",
            f.definitions[0], f.kept
        )
    } else {
        format!(
            "{} fprobe event{} ({}) over the {} functions kept, leaving out {} the kernel's wildcard would arm (kprobe-perf list --why {})",
            f.globs.len(),
            if f.globs.len() == 1 { "" } else { "s" },
            f.globs.join(" "),
            f.kept,
            f.left_out,
            f.pattern
        )
    }
}

/// After the session is enabled: for each fprobe event over a glob, the
/// functions the kernel armed (`enabled_functions`, the lines matching the
/// event's glob), on stderr.
pub(crate) fn report_armed(plans: &[kprobe_perf_engine::ProbePlan]) {
    let globs: Vec<(&str, &str)> = plans
        .iter()
        .filter_map(|p| match &p.spec.target {
            Target::Fprobe { name } if kernel::is_glob(name) => {
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
        say!("kprobe-perf: enabled_functions is unreadable: cannot list the functions the kernel armed");
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
            .filter(|n| kernel::glob_match(glob, n))
            .collect();
        armed.sort_unstable();
        armed.dedup();
        say!(
            "kprobe-perf: {event} ({glob}): the kernel armed {} functions: {}",
            armed.len(),
            armed.join(" ")
        );
    }
}

/// `kprobe-perf list PATTERN... [--why] [--include-fragile]`.
pub(crate) fn list(
    patterns: &[String],
    why: bool,
    include_fragile: bool,
    image: &ImageArgs,
) -> Result<ExitCode> {
    // A binary's SDT probes need no kernel.
    let (sdt, patterns): (Vec<&String>, Vec<&String>) = patterns
        .iter()
        .partition(|p| kprobe_perf_engine::cli::plan::sdt::names_sdt(p));
    let sdt_found = list_sdt(&sdt)?;
    if patterns.is_empty() {
        return Ok(if sdt_found {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let kernel = discover(image, SizesFrom::Kallsyms)?;
    let symbols = kernel.symbols();
    let selection = selection(
        &kernel,
        &GlobOptions::default().include_fragile(include_fragile),
    )?;
    let notrace_by = match selection.notrace_by() {
        NotraceBy::Bytes(source) => format!("notrace judged from the function bytes ({source})"),
        NotraceBy::FilterList => "notrace judged from available_filter_functions".to_string(),
        _ => "notrace NOT checked (neither /proc/kcore nor available_filter_functions is readable)"
            .to_string(),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut any = false;
    for pattern in patterns {
        let found = selection.candidates(pattern);
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
        say!(
            "kprobe-perf: {pattern}: {} matched, {kept} kept, {} excluded; {notrace_by}",
            found.len(),
            found.len() - kept
        );
        if why {
            say!(
                "kprobe-perf: {pattern}: {}",
                route_text(pattern, &kernel, &selection)
            );
        }
    }
    Ok(if any || sdt_found {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints the SDT probes of every file process `pid` maps (as
/// [`list_sdt`] does), those whose `PROVIDER:NAME` matches one of
/// `patterns` (every one when none is given).
pub(crate) fn list_sdt_of_process(pid: u32, patterns: &[String]) -> Result<ExitCode> {
    let files = kprobe_perf_engine::cli::plan::sdt::mapped_files(pid)?;
    let globs: Vec<String> = if patterns.is_empty() {
        vec!["*:*".into()]
    } else {
        patterns
            .iter()
            .map(|p| match p.split_once(':') {
                Some(_) => p.clone(),
                None => format!("{p}:*"),
            })
            .collect()
    };
    let mut wanted = Vec::new();
    for file in &files {
        let probes = kprobe_perf_engine::cli::plan::sdt::listed(&format!("usdt:{file}"));
        // Files without SDT notes (most) are passed over.
        if !matches!(probes, Some(Ok(ref p)) if !p.is_empty()) {
            continue;
        }
        for g in &globs {
            wanted.push(format!("usdt:{file}:{g}"));
        }
    }
    let wanted: Vec<&String> = wanted.iter().collect();
    let any = list_sdt_lenient(&wanted)?;
    say!(
        "kprobe-perf: process {pid} maps {} executable files",
        files.len()
    );
    Ok(if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// As [`list_sdt`], passing over a pattern that matches nothing.
fn list_sdt_lenient(patterns: &[&String]) -> Result<bool> {
    let mut any = false;
    for p in patterns {
        if let Some(Ok(found)) = kprobe_perf_engine::cli::plan::sdt::listed(p) {
            if !found.is_empty() {
                any |= list_sdt(&[*p])?;
            }
        }
    }
    Ok(any)
}

/// Prints the SDT probes each pattern names (`usdt:PATH[:PROVIDER:NAME]`
/// or `/PATH`), one site a line, as `-e` takes them, with the site's file
/// offset, its semaphore's (or `none`) and its operands; true when any.
fn list_sdt(patterns: &[&String]) -> Result<bool> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut any = false;
    for pattern in patterns {
        let Some(found) = kprobe_perf_engine::cli::plan::sdt::listed(pattern) else {
            continue;
        };
        let found = found?;
        let path = pattern.strip_prefix("usdt:").unwrap_or(pattern);
        let path = match std::path::Path::new(path).is_file() {
            true => path,
            false => path.rsplitn(3, ':').nth(2).unwrap_or(path),
        };
        for p in &found {
            let semaphore = p
                .semaphore_offset
                .map_or_else(|| "none".to_string(), |s| format!("0x{s:x}"));
            let args = if p.args_text.is_empty() {
                "none"
            } else {
                p.args_text.as_str()
            };
            writeln!(
                out,
                "usdt:{path}:{}:{}  at 0x{:x}  semaphore {semaphore}  args {args}",
                p.provider, p.name, p.file_offset
            )
            .context("writing the list")?;
        }
        out.flush().context("writing the list")?;
        let counted = found.iter().filter(|p| p.semaphore.is_some()).count();
        say!(
            "kprobe-perf: {pattern}: {} SDT probe sites, {counted} with a semaphore",
            found.len()
        );
        any |= !found.is_empty();
    }
    Ok(any)
}

/// The route `p:PATTERN` takes under `--backend auto`, in words.
fn route_text(pattern: &str, kernel: &Kernel, selection: &Selection<'_>) -> String {
    let Ok(arch) = kernel.arch() else {
        return "route unknown on this architecture".into();
    };
    let Ok(spec) = ProbeSpec::parse(&format!("p:{pattern}"), arch) else {
        return "route: one kprobe per kept function".into();
    };
    match selection.route(&spec) {
        GlobRoute::Fprobe(f) => format!("route with --backend auto: {}", fprobe_note(&f)),
        GlobRoute::Kprobes(why) => {
            format!("route with --backend auto: one kprobe per kept function; not an fprobe event: {why}")
        }
        _ => "route: one kprobe per kept function".into(),
    }
}

/// `kprobe-perf probe --lines FUNC`: every instruction of FUNC with the
/// kernel's predicted answer for a kprobe there (and, with `srcline`, the
/// source line above the instructions of each line).
pub(crate) fn lines(func: &str, image: &ImageArgs, srcline: bool) -> Result<ExitCode> {
    let kernel = discover(image, SizesFrom::Vmlinux)?;
    let symbols = kernel.symbols();
    kernel.arch()?;
    if symbols.addresses_hidden() {
        bail!("--lines needs kernel addresses, which /proc/kallsyms hides from this process: run as root");
    }
    let Some(pre) = preflight(&kernel)? else {
        bail!("--lines needs the kernel's text: /proc/kcore is not readable here (run as root on a kernel with CONFIG_PROC_KCORE) and no vmlinux was found (looked in {}; give --vmlinux)", kernel::looked_in(&kernel.vmlinux_candidates()));
    };
    let sym = function_symbol(symbols, func)?;
    let name = sym.name.as_str();
    let f = pre.function(sym).map_err(|e| anyhow::anyhow!("{e}"))?;
    let listing = pre.listing(&f);
    let lines_at = if srcline {
        Some(line_lookup(&kernel)?)
    } else {
        None
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    print_listing(&mut out, &listing, lines_at.as_ref())?;
    writeln!(
        out,
        "p: a kprobe (p:{name}+OFFSET) is accepted; r: a kretprobe is too; -: refused, with the errno the kernel would answer"
    )?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The one function `func` (`NAME` or `MOD:NAME`) names in kallsyms.
fn function_symbol<'k>(symbols: &'k KernelSymbols, func: &str) -> Result<&'k Symbol> {
    let (module, name) = match func.split_once(':') {
        Some((m, n)) => (Some(m), n),
        None => (None, func),
    };
    let found: Vec<_> = symbols
        .lookup(name)
        .into_iter()
        .filter(|s| s.is_text() && (module.is_none() || s.module.as_deref() == module))
        .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => bail!("{func} is not a function in /proc/kallsyms"),
        many => bail!(
            "{func} names {} functions ({}); give MOD:{name} for a module's",
            many.len(),
            many.iter()
                .map(|s| s.label())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `--lines`' table: a head line, then each instruction with the kernel's
/// answer for a probe there, under its source line when `lines_at` has one.
fn print_listing(
    out: &mut impl Write,
    listing: &Listing,
    lines_at: Option<&(AddressLookup, u64)>,
) -> Result<()> {
    let mut last_line = String::new();
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
        if let Some((lookup, slide)) = lines_at {
            let at = listing
                .address
                .wrapping_add(l.insn.offset)
                .wrapping_sub(*slide);
            let here = source_line(&lookup.frames(at), &listing.name);
            if !here.is_empty() && here != last_line {
                writeln!(out, "  {here}")?;
                last_line = here;
            }
        }
        writeln!(
            out,
            "  +{:<6} {marks}    {:<24} {}{why}",
            l.insn.offset,
            bytes.join(" "),
            l.insn.text
        )?;
    }
    Ok(())
}

/// `--srcline`'s lookup in the running kernel's DWARF, and the KASLR
/// slide its addresses are moved by.
fn line_lookup(kernel: &Kernel) -> Result<(AddressLookup, u64)> {
    let (path, slide) = kernel
        .kernel_dwarf()
        .map_err(crate::image_args::explain)
        .context("--srcline needs the running kernel's DWARF (Debian: linux-image-VERSION-dbg; give --vmlinux)")?;
    let lookup = AddressLookup::open(&path)
        .with_context(|| format!("--srcline: reading {}", path.display()))?;
    Ok((lookup, slide))
}

/// The source line of an instruction, from the DWARF frames at its
/// address (innermost first): `file:line`, with the function inlined
/// there when it is not `function` itself.
fn source_line(
    frames: &[kprobe_perf_engine::cli::kernel::source::AddressFrame],
    function: &str,
) -> String {
    let Some(f) = frames.first() else {
        return String::new();
    };
    let mut s = format!("{}:{}", f.file.as_deref().unwrap_or("??"), f.line);
    if let Some(inlined) = f.function.as_deref().filter(|n| *n != function) {
        s.push_str(&format!(" ({inlined}, inlined)"));
    }
    s
}

/// `kprobe-perf info`: first the doctor's checks (can this kernel and
/// this process probe, and what to do if not), then the running kernel
/// as kprobe-perf sees it.
pub(crate) fn info(image: &ImageArgs) -> Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let rel = kernel::running_release();
    writeln!(out, "kernel: {rel} ({})", std::env::consts::ARCH)?;
    writeln!(out, "kprobe-perf: {}", env!("KPROBE_PERF_VERSION"))?;
    crate::doctor::print(&mut out, &crate::doctor::checks(&rel))?;
    out.flush()?;
    let kernel = discover(image, SizesFrom::Vmlinux)?;
    symbols_info(&mut out, &kernel)?;
    debug_info(&mut out, &kernel)?;
    module_debug_info(&mut out, &kernel)?;
    text_info(&mut out, &kernel)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `info`'s lines on the kernel's symbols: kallsyms, the build ID, and the
/// vmlinux and System.map matched to the running kernel.
fn symbols_info(out: &mut impl Write, kernel: &Kernel) -> Result<()> {
    let symbols = kernel.symbols();
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
    match kernel.running_build_id() {
        Some(id) => writeln!(out, "build ID: {} (/sys/kernel/notes)", hex(id))?,
        None => writeln!(out, "build ID: unknown (/sys/kernel/notes has none)")?,
    }
    let m = kernel.images().map_err(explain);
    report_skipped(kernel);
    let m = m?;
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
            let id = match (v.build_id(), kernel.running_build_id()) {
                (Some(_), Some(_)) => "build ID matches the running kernel",
                (Some(_), None) => "build ID not compared (the running kernel shows none)",
                (None, _) => "no build ID in the image",
            };
            writeln!(out, "vmlinux: {}, {id}, {slide}", describe_image(v))?;
        }
        None => writeln!(
            out,
            "vmlinux: none (looked in {}; give --vmlinux)",
            kernel::looked_in(&kernel.vmlinux_candidates())
        )?,
    }
    match &m.system_map {
        Some(map) => {
            let own = map.slide_against(symbols, None).map_or_else(
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
            kernel::looked_in(&kernel.system_map_candidates())
        )?,
    }
    Ok(())
}

/// `info`'s lines on what probes are checked against: the kernel's text,
/// BTF and the kprobe blacklist.
fn text_info(out: &mut impl Write, kernel: &Kernel) -> Result<()> {
    match image_args::text(kernel)? {
        Some(t) => writeln!(out, "kernel text: {}", t.describe())?,
        None => writeln!(
            out,
            "kernel text: none (/proc/kcore unreadable and no vmlinux): offsets are left to the kernel"
        )?,
    }
    let btf = std::fs::metadata(kernel::VMLINUX_BTF);
    match btf {
        Ok(md) => writeln!(out, "BTF: {} ({} bytes)", kernel::VMLINUX_BTF, md.len())?,
        Err(e) => writeln!(
            out,
            "BTF: none ({}: {e}); argument names need CONFIG_DEBUG_INFO_BTF",
            kernel::VMLINUX_BTF
        )?,
    }
    match (kernel.blacklist(), kernel.blacklist_error()) {
        (Some(b), _) => writeln!(out, "kprobe blacklist: {} ranges", b.len())?,
        (None, Some(e)) => writeln!(out, "kprobe blacklist: not readable ({e})")?,
        (None, None) => writeln!(out, "kprobe blacklist: not read")?,
    }
    Ok(())
}

/// `info`'s line on the kernel's DWARF: the debug file source points and
/// variables are read from, or where it was looked for.
fn debug_info(out: &mut impl Write, kernel: &Kernel) -> Result<()> {
    match kernel.local_debug_info() {
        Ok(f) => writeln!(
            out,
            "debug info: {} (DWARF{}): source lines and variables (probe --definition, --vars, p:FUNC@+N)",
            f.path().display(),
            match kernel.running_build_id() {
                Some(_) => ", build ID matches the running kernel",
                None => ", build ID not compared: the running kernel shows none",
            }
        )?,
        Err(kernel::KernelError::DebugInfo(kernel::source::DebugInfoError::NotFound {
            ..
        })) => writeln!(
            out,
            "debug info: none (looked in {}; {}): source lines and variables need the kernel's DWARF (Debian: linux-image-{}-dbg; or give --vmlinux)",
            kernel::looked_in(&kernel.debug_info_candidates()),
            match std::env::var("DEBUGINFOD_URLS").ok().filter(|u| !u.trim().is_empty()) {
                Some(urls) => format!(
                    "not asked of the debuginfod servers {}: the first source-level probe or listing asks them, and caches the file",
                    urls.trim()
                ),
                None => "no debuginfod server: DEBUGINFOD_URLS is not set".to_string(),
            },
            kernel.release()
        )?,
        Err(e) => writeln!(out, "debug info: not usable: {}", crate::hints::render(&e.into()))?,
    }
    Ok(())
}

/// `info`'s line on modules' DWARF: which loaded modules (and modules
/// given `--module-debug`) have a debug file, found locally.
fn module_debug_info(out: &mut impl Write, kernel: &Kernel) -> Result<()> {
    use kprobe_perf_engine::cli::kernel::module_debug;
    let mut names = module_debug::loaded_modules();
    let loaded = names.len();
    for p in &kernel.options().module_debug {
        names.push(module_debug::module_name_of(p));
    }
    names.sort();
    names.dedup();
    let mut found = Vec::new();
    for n in &names {
        match kernel.local_module_debug_info(n) {
            Ok(f) => found.push(format!("{n}: {}", f.path().display())),
            Err(kernel::KernelError::DebugInfo(kernel::source::DebugInfoError::NotFound {
                ..
            })) => {}
            Err(e) => found.push(format!(
                "{n}: not usable: {}",
                crate::hints::render(&e.into())
            )),
        }
    }
    writeln!(
        out,
        "module debug info: {} of {loaded} loaded modules{}: source points MOD:FUNC@+N (Debian: linux-image-{}-dbg; or give --module-debug){}",
        found.len(),
        if names.len() > loaded { " and those given" } else { "" },
        kernel.release(),
        if found.is_empty() { String::new() } else { format!(": {}", found.join(", ")) }
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::cli::kernel::glob_route;
    use kprobe_perf_engine::cli::kernel::select::SelectOptions;
    use kprobe_perf_engine::cli::plan::KernelFeatures;
    use kprobe_perf_engine::Arch;

    /// A glob's route as the CLI tells it.
    #[derive(Debug, PartialEq)]
    enum Told {
        Fprobe {
            definitions: Vec<String>,
            note: String,
        },
        Kprobes(String),
    }

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

    fn route(text: &str, traceable: &[&str], fprobe: bool) -> Told {
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
        match glob_route(
            &ProbeSpec::parse(text, Arch::X86_64).unwrap(),
            &symbols,
            &opts,
            Some(&traceable),
            Some(&features),
        ) {
            GlobRoute::Fprobe(f) => Told::Fprobe {
                note: fprobe_note(&f),
                definitions: f.definitions,
            },
            GlobRoute::Kprobes(why) => Told::Kprobes(why),
            other => panic!("{other:?}"),
        }
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
            Told::Fprobe {
                definitions: vec!["f vfs_*".into()],
                note: "one fprobe event f vfs_* over the 2 functions kept (the kernel arms every traceable match)".into()
            }
        );
        assert_eq!(
            route("r:ev vfs_r* $retval", &["vfs_read", "vfs_readv"], true),
            Told::Fprobe {
                definitions: vec!["f:ev vfs_r*%return $retval".into()],
                note: "one fprobe event f:ev vfs_r*%return $retval over the 2 functions kept (the kernel arms every traceable match)".into()
            }
        );
    }

    #[test]
    fn a_fragile_family_splits_the_glob() {
        // vfs_lock_file is in the "lock" family and traceable: one glob
        // would arm it, so vfs_* becomes a narrower glob that leaves it
        // out (o, r and w in one class; no name has a byte between).
        assert_eq!(
            route("p:vfs_* $arg1", TRACEABLE, true),
            Told::Fprobe {
                definitions: vec!["f vfs_[o-w]* $arg1".into()],
                note: "1 fprobe event (vfs_[o-w]*) over the 4 functions kept, leaving out 1 the kernel's wildcard would arm (kprobe-perf list --why vfs_*)".into()
            }
        );
        // The tail of the pattern stays in the narrower glob.
        let traceable = ["vfs_read", "vfs_readv", "vfs_open", "tcp_lock_read"];
        assert_eq!(
            route("p:*_read*", &traceable, true),
            Told::Fprobe {
                definitions: vec!["f v*_read*".into()],
                note: "1 fprobe event (v*_read*) over the 2 functions kept, leaving out 1 the kernel's wildcard would arm (kprobe-perf list --why *_read*)".into()
            }
        );
    }

    #[test]
    fn what_fprobe_cannot_do_stays_on_kprobes() {
        assert_eq!(
            route("p:vfs_* %di", TRACEABLE, true),
            Told::Kprobes("%di: fprobe events cannot fetch registers (use $argN)".into())
        );
        assert_eq!(
            route("r5:vfs_*", TRACEABLE, true),
            Told::Kprobes("maxactive is kept on kprobes".into())
        );
        assert_eq!(
            route("p:vfs_*", TRACEABLE, false),
            Told::Kprobes("this kernel's tracefs README has no fprobe events (f:; CONFIG_FPROBE_EVENTS, Linux 6.5+)".into())
        );
        // A pattern with `?` before its `*` is covered afresh.
        assert_eq!(
            route("p:v?s_*", TRACEABLE, true),
            Told::Fprobe {
                definitions: vec!["f vfs_[o-w]*".into()],
                note: "1 fprobe event (vfs_[o-w]*) over the 4 functions kept, leaving out 1 the kernel's wildcard would arm (kprobe-perf list --why v?s_*)".into()
            }
        );
    }
}
