//! `probe --definition` and `probe --vars`: source-level probe points and
//! variables answered from the kernel's DWARF, without opening a probe.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Result};
use kprobe_perf_engine::cli::kernel::source::{self, Instance, SourceExpansion};
use kprobe_perf_engine::cli::kernel::{Kernel, KernelError, SizesFrom};
use kprobe_perf_engine::{Error, KernelSymbols};

use crate::image_args::ImageArgs;

/// The kernel for source listings: no kallsyms or text is read (the
/// definitions name `SYMBOL+OFFSET`), only the debug info.
fn kernel(image: &ImageArgs, other_kernel: bool) -> Kernel {
    let options = image
        .options(SizesFrom::Kallsyms)
        .other_kernel(other_kernel);
    Kernel::with_symbols(KernelSymbols::default(), options)
}

/// Where the points of `probe --definition`, `--vars` and `--source` are: the
/// kernel, a user binary (`-x`), or a kernel module (`-m`).
pub(crate) struct Target {
    /// The kernel image options, with a module's debug file given by
    /// `-m PATH` added.
    image: ImageArgs,
    /// `-x BINARY`, absolute.
    binary: Option<String>,
    /// `-m MODULE`'s name.
    module: Option<String>,
}

impl Target {
    /// `-x` and `-m` over the image options.
    pub(crate) fn new(
        exec: Option<&Path>,
        module: Option<&str>,
        image: &ImageArgs,
        verbose: bool,
    ) -> Result<Target> {
        let mut image = image.clone();
        let module = match module {
            // perf's -m takes a name or the path of the module's file.
            Some(m) if m.contains('/') || m.ends_with(".ko") => {
                let path = PathBuf::from(m);
                if !path.is_file() {
                    bail!("-m {m}: no such file (give a module's name, or the path of its .ko with debug info)");
                }
                let name = kprobe_perf_engine::cli::kernel::module_debug::module_name_of(&path);
                image.module_debug.insert(0, path);
                Some(name)
            }
            Some(m) => Some(kprobe_perf_engine::cli::kernel::module_debug::normalize(m)),
            None => None,
        };
        Ok(Target {
            image,
            binary: exec
                .map(|b| crate::binaries::exec(&b.to_string_lossy(), verbose))
                .transpose()?,
            module,
        })
    }

    /// perf's syntax in kprobe-perf's, for this target.
    fn ours(&self, spec: &str) -> String {
        match &self.module {
            Some(m) => source::from_perf_syntax_in_module(spec, m),
            None => source::from_perf_syntax_in(spec, self.binary.as_deref()),
        }
    }
}

/// `probe --definition SPEC...`: each site's kprobe_events definition on
/// stdout, the sites left out on stderr; exit 0 only if every SPEC has a
/// site.
pub(crate) fn definitions(
    specs: &[String],
    target: &Target,
    inlines: bool,
    other_kernel: bool,
) -> Result<ExitCode> {
    let kernel = kernel(&target.image, other_kernel);
    let mut out = std::io::stdout().lock();
    let mut ok = true;
    for spec in specs {
        let perf_syntax = !looks_like_ours(spec);
        let ours = if perf_syntax {
            target.ours(spec)
        } else {
            spec.clone()
        };
        match kernel.expand_source(&ours, inlines) {
            Ok(Some(expansion)) => {
                report_refused(&expansion);
                for p in &expansion.probes {
                    writeln!(out, "{}", p.definition)?;
                }
            }
            // A definition of ours with no source point: as written.
            Ok(None) if !perf_syntax => writeln!(out, "{spec}")?,
            // perf's syntax is read for source points only.
            Ok(None) => {
                ok = false;
                say!(
                    "kprobe-perf: {spec}: not a source-level probe point in perf probe's syntax \
                     ([[GROUP:]EVENT=]FUNC[@FILE][:RLINE|;PATTERN] or FILE:LINE, then variables); \
                     perf's FUNC+OFFS and FUNC%return forms are not read here: write the probe as \
                     kprobe_events does (`p:probe/EVENT FUNC+OFFS`, `r:probe/EVENT FUNC`)"
                );
            }
            Err(e) => {
                ok = false;
                let e = on_the_text_given(e.into(), spec);
                // A caret error shows the text; the others are named by it.
                let caret = matches!(e, Error::Kernel(KernelError::Source { .. }));
                let shown = crate::hints::render(&e.into());
                if caret {
                    say!("kprobe-perf: {shown}");
                } else {
                    say!("kprobe-perf: {spec}: {shown}");
                }
            }
        }
    }
    out.flush()?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A caret error about the text the engine was given (perf's syntax
/// rewritten in kprobe-perf's) put under the text the user gave.
fn on_the_text_given(e: Error, given: &str) -> Error {
    let Error::Kernel(KernelError::Source {
        text,
        at,
        len,
        reason,
    }) = e
    else {
        return e;
    };
    if text == given {
        return Error::Kernel(KernelError::Source {
            text,
            at,
            len,
            reason,
        });
    }
    let token = text.get(at..at + len).unwrap_or("");
    // The word the token is (`a` in `walk.c:18 m a`, not the `a` of
    // `walk`), else where it occurs first.
    let word = given
        .split_whitespace()
        .find(|w| *w == token)
        .map(|w| w.as_ptr() as usize - given.as_ptr() as usize);
    let (at, len) = match word
        .or_else(|| given.find(token))
        .filter(|_| !token.is_empty())
    {
        Some(i) => (i, len),
        None => (0, given.split_whitespace().next().map_or(1, str::len)),
    };
    Error::Kernel(KernelError::Source {
        text: given.to_string(),
        at,
        len,
        reason,
    })
}

/// A definition in kprobe-perf's language (`p:...`, `p ...`) rather than
/// perf's event syntax.
fn looks_like_ours(spec: &str) -> bool {
    let first = spec.split_whitespace().next().unwrap_or("");
    first == "p" || first.starts_with("p:") || first.starts_with("r:") || first == "r"
}

/// The sites of a source point left out, and why, on stderr.
pub(crate) fn report_refused(expansion: &SourceExpansion) {
    for (site, why) in &expansion.refused {
        say!("kprobe-perf: skipped {site}: {why}");
    }
}

/// `probe --vars POINT`: perf probe -V's listing.
pub(crate) fn variables(
    point: &str,
    target: &Target,
    inlines: bool,
    other_kernel: bool,
) -> Result<ExitCode> {
    let kernel = kernel(&target.image, other_kernel);
    let sites = match (&target.binary, &target.module) {
        (Some(b), _) => {
            let ours = source::perf_point_to_ours(point);
            kernel.source_variables(&format!("{b}:{ours}"), inlines)?
        }
        (None, Some(m)) => {
            let ours = source::perf_point_to_ours(point);
            kernel.source_variables(&format!("{m}:{ours}"), inlines)?
        }
        (None, None) => kernel.source_variables(point, inlines)?,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "Available variables at {point}")?;
    for s in sites {
        let how = match &s.site.instance {
            Instance::Inlined { call, .. } => format!(", inlined at {call}"),
            _ => String::new(),
        };
        writeln!(
            out,
            "        @<{}> ({}{how})",
            s.site.location, s.site.source
        )?;
        // Sorted as perf sorts them, so that the two listings compare.
        let mut vars: Vec<String> = s
            .variables
            .iter()
            .map(|v| format!("{}\t{}", v.type_name, v.name))
            .collect();
        vars.sort();
        for v in vars {
            writeln!(out, "                {v}")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `probe --source FUNC` (`-x BINARY`: a function of that user binary):
/// the function's lines from its declaration to
/// its last line with code, those a probe can go on numbered from the
/// declaration (perf probe -L's layout), with their text when the source
/// file is found under `dir` (or at the path DWARF gives), else each
/// line's `file:line` and its first instruction's offset.
pub(crate) fn listing(func: &str, target: &Target, other_kernel: bool) -> Result<ExitCode> {
    let image = &target.image;
    let dir = image.source_dir.as_deref();
    let kernel = kernel(image, other_kernel);
    let (name, in_file) = match func.split_once('@') {
        Some((n, f)) => (n, Some(f)),
        None => (func, None),
    };
    let (lines, offsets) = match (&target.binary, &target.module) {
        (Some(binary), _) => kernel.user_function_lines(binary, name, in_file)?,
        (None, Some(m)) => kernel.module_function_lines(m, name, in_file)?,
        (None, None) => kernel.function_lines(name, in_file)?,
    };
    let Some(&last) = lines.lines.last() else {
        bail!("{func}: its DWARF gives no line a probe can go on");
    };
    // perf's -L shows two more lines after the one past the last numbered
    // (NR_ADDITIONAL_LINES in tools/perf/util/probe-event.c).
    let last = last + 3;
    let text = source_text(&lines.file, lines.comp_dir.as_deref(), dir);
    let mut out = std::io::stdout().lock();
    match &text {
        Some((path, _)) => writeln!(out, "<{name}@{}:0>", path.display())?,
        None => writeln!(out, "<{name}@{}:0>", lines.file)?,
    }
    for line in lines.decl_line..=last {
        let numbered = lines.lines.binary_search(&line);
        let number = match numbered {
            Ok(_) => format!("{:>7}", line - lines.decl_line),
            Err(_) => " ".repeat(7),
        };
        let body = match &text {
            Some((_, t)) => {
                let Some(l) = t.get(usize::try_from(line).unwrap_or(usize::MAX).wrapping_sub(1))
                else {
                    break;
                };
                l.clone()
            }
            None => {
                let base = lines.file.rsplit('/').next().unwrap_or(&lines.file);
                let at = numbered
                    .ok()
                    .and_then(|i| offsets.get(i).copied().flatten())
                    .map(|o| format!("  {name}+0x{o:x}"))
                    .unwrap_or_default();
                format!("{base}:{line}{at}")
            }
        };
        writeln!(out, "{number}  {body}")?;
    }
    if text.is_none() {
        say!(
            "kprobe-perf: no source text for {} (give --source-dir DIR, the tree its path is relative to): lines shown by number",
            lines.file
        );
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The lines of source file `file` (as DWARF names it): under `dir`
/// with its leading directories dropped one by one until a file is
/// there (perf's rule for --source), else under its unit's compilation
/// directory `comp_dir` (where the compiler read it), else at `file`
/// itself.
fn source_text(
    file: &str,
    comp_dir: Option<&str>,
    dir: Option<&Path>,
) -> Option<(PathBuf, Vec<String>)> {
    let mut tries = Vec::new();
    if let Some(dir) = dir {
        let parts: Vec<&str> = file.trim_start_matches('/').split('/').collect();
        for i in 0..parts.len() {
            tries.push(dir.join(parts[i..].join("/")));
        }
    }
    if let Some(comp_dir) = comp_dir.filter(|_| !file.starts_with('/')) {
        tries.push(Path::new(comp_dir).join(file));
    }
    tries.push(PathBuf::from(file));
    tries.into_iter().find_map(|p| {
        let text = std::fs::read_to_string(&p).ok()?;
        Some((p, text.lines().map(str::to_string).collect()))
    })
}
