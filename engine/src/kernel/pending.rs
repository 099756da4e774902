//! Probes on a module that is not loaded (`p:MOD:SYM` planned with
//! [`ProbePlan::pending_module`]): checked against the module's `.ko` for
//! the running kernel before anything is defined, since kallsyms cannot
//! show a module that is not there. The `.ko` is the one given for it
//! (`-m PATH`), else Debian's `/lib/modules/RELEASE/` from `modules.dep`;
//! `.ko.xz`, `.ko.zst` and `.ko.gz` are read as the kernel's module
//! loader reads them.

use std::io::Read;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};

use super::module_debug::{installed_path, module_name_of, normalize};
use crate::plan::{AttachPoint, PlanError, ProbePlan};

/// Checks the pending probe `plan` on module `module`: the function is in
/// the module's `.ko`, and the offset is inside it.
pub(super) fn check(
    plan: &ProbePlan,
    module: &str,
    release: &str,
    given: &[PathBuf],
) -> Result<(), PlanError> {
    let AttachPoint::Symbol { name, offset } = &plan.attach else {
        return Ok(());
    };
    let function = name.rsplit(':').next().unwrap_or(name);
    let ko = module_file(module, release, given)?;
    let bytes = read_module(&ko)?;
    let (size, names) = functions(&bytes, function).map_err(|why| {
        PlanError::User(format!(
            "cannot read {} (the .ko of module {module}, which is not loaded): {why}",
            ko.display()
        ))
    })?;
    let ko = ko.display();
    match size {
        None => Err(PlanError::User(format!(
            "unknown symbol {function} in module {module}: its .ko ({ko}; the module is not loaded) has no such function{}",
            nearest(&names, function)
                .map(|n| format!("; did you mean {n}?"))
                .unwrap_or_else(|| format!("; list its functions with: nm {ko}"))
        ))),
        Some(code) if *offset >= code && code > 0 => Err(PlanError::User(format!(
            "{function}+{offset} is past the end of {function} ({code} bytes in {ko}, the .ko of module {module}, which is not loaded): the probe would never fire"
        ))),
        Some(_) => Ok(()),
    }
}

/// A function name one or two edits from `name`, if any.
fn nearest<'a>(names: &[&'a str], name: &str) -> Option<&'a str> {
    names
        .iter()
        .filter(|n| n.len().abs_diff(name.len()) <= 2)
        .filter_map(|n| {
            let d = kprobe_perf_arch::edit_distance(n, name);
            (d <= 2).then_some((d, *n))
        })
        .min()
        .map(|(_, n)| n)
}

/// The `.ko` of `module`: the one given for it, else the installed one.
fn module_file(module: &str, release: &str, given: &[PathBuf]) -> Result<PathBuf, PlanError> {
    if let Some(p) = given
        .iter()
        .find(|p| module_name_of(p) == normalize(module))
    {
        return Ok(p.clone());
    }
    installed_path(release, module)
        .map(|rel| PathBuf::from(format!("/lib/modules/{release}/{rel}")))
        .ok_or_else(|| PlanError::User(format!(
            "module {module} is not loaded and /lib/modules/{release}/modules.dep names no {module}.ko for this kernel; install it, load it first, or give its .ko with --module-debug PATH"
        )))
}

/// The bytes of a module file, decompressed by its suffix.
fn read_module(path: &Path) -> Result<Vec<u8>, PlanError> {
    let fail = |why: String| {
        PlanError::User(format!(
            "cannot read {}: {why}; give an uncompressed .ko with --module-debug PATH",
            path.display()
        ))
    };
    let raw = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let name = path.to_string_lossy();
    let mut out = Vec::new();
    if name.ends_with(".xz") {
        lzma_rs::xz_decompress(&mut raw.as_slice(), &mut out).map_err(|e| fail(e.to_string()))?;
    } else if name.ends_with(".zst") {
        ruzstd::decoding::StreamingDecoder::new(raw.as_slice())
            .map_err(|e| fail(e.to_string()))?
            .read_to_end(&mut out)
            .map_err(|e| fail(e.to_string()))?;
    } else if name.ends_with(".gz") {
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| fail(e.to_string()))?;
    } else {
        out = raw;
    }
    Ok(out)
}

/// The size of function `name` in the ELF `bytes` (`None`: no such
/// function) and the names of all its functions.
fn functions<'a>(
    bytes: &'a [u8],
    name: &str,
) -> Result<(Option<u64>, Vec<&'a str>), object::Error> {
    let file = object::File::parse(bytes)?;
    let text: Vec<(&str, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| Some((s.name().ok()?, s.size())))
        .collect();
    let size = text.iter().find(|(n, _)| *n == name).map(|(_, z)| *z);
    Ok((size, text.into_iter().map(|(n, _)| n).collect()))
}
