//! `probe --definition` and `probe --vars`: source-level probe points and
//! variables answered from the kernel's DWARF, without opening a probe.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use kprobe_perf_engine::kernel::source::{self, Instance, SourceExpansion};
use kprobe_perf_engine::kernel::{Kernel, KernelError, SizesFrom};
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

/// `probe --definition SPEC...`: each site's kprobe_events definition on
/// stdout, the sites left out on stderr; exit 0 only if every SPEC has a
/// site.
pub(crate) fn definitions(
    specs: &[String],
    image: &ImageArgs,
    inlines: bool,
    other_kernel: bool,
    exec: Option<&Path>,
) -> Result<ExitCode> {
    let kernel = kernel(image, other_kernel);
    let binary = exec.map(absolute).transpose()?;
    let mut out = std::io::stdout().lock();
    let mut ok = true;
    for spec in specs {
        let ours = if looks_like_ours(spec) {
            spec.clone()
        } else {
            source::from_perf_syntax_in(spec, binary.as_deref())
        };
        match kernel.expand_source(&ours, inlines) {
            Ok(Some(expansion)) => {
                report_refused(&expansion);
                for p in &expansion.probes {
                    writeln!(out, "{}", p.definition)?;
                }
            }
            // A definition with no source point: as written.
            Ok(None) => writeln!(out, "{spec}")?,
            Err(e) => {
                ok = false;
                let e = on_the_text_given(e, spec);
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

/// `-x BINARY` as the absolute path a uprobe names (perf's -x does the same).
fn absolute(binary: &Path) -> Result<String> {
    let p = std::fs::canonicalize(binary)
        .with_context(|| format!("-x {}: cannot find the binary", binary.display()))?;
    Ok(p.to_string_lossy().into_owned())
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
    image: &ImageArgs,
    inlines: bool,
    other_kernel: bool,
    exec: Option<&Path>,
) -> Result<ExitCode> {
    let kernel = kernel(image, other_kernel);
    let sites = match exec {
        Some(b) => {
            let ours = source::perf_point_to_ours(point);
            kernel.source_variables(&format!("{}:{ours}", absolute(b)?), inlines)?
        }
        None => kernel.source_variables(point, inlines)?,
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
