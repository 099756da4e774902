//! Finding a kernel module's debug file (its `.ko` with DWARF), as
//! `perf probe -m` does: a path given for it, Debian's -dbg layout
//! (`/usr/lib/debug/lib/modules/RELEASE/` and the module's path under
//! `/lib/modules/RELEASE` from `modules.dep`, uncompressed), the build-ID
//! file of the loaded module (`/sys/module/NAME/notes/.note.gnu.build-id`),
//! and the installed module itself when it carries DWARF. A file whose
//! build ID is not the loaded module's is skipped when found, refused
//! when given.

use std::path::{Path, PathBuf};

use kprobe_perf_debuginfo::{locate, DebugFile};

use super::error::KernelError;

/// The module name a `.ko` file stands for: its file name up to the
/// first `.`, with `-` read as `_` (as the kernel names modules).
pub fn module_name_of(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = file.split('.').next().unwrap_or("");
    normalize(stem)
}

/// A module name as the kernel spells it (`-` as `_`).
pub fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// The module's path under `/lib/modules/RELEASE` (`kernel/fs/9p/9p.ko`,
/// perhaps with `.xz`, `.zst` or `.gz`), from `modules.dep`.
pub(super) fn installed_path(release: &str, name: &str) -> Option<String> {
    let dep = std::fs::read_to_string(format!("/lib/modules/{release}/modules.dep")).ok()?;
    let want = normalize(name);
    dep.lines()
        .filter_map(|l| l.split_once(':').map(|(m, _)| m))
        .find(|m| module_name_of(Path::new(m)) == want)
        .map(str::to_string)
}

/// The loadable modules loaded now (those with notes in `/sys/module`),
/// sorted by name.
pub fn loaded_modules() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/module")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("notes/.note.gnu.build-id").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The build ID of the loaded module `name`, when it is loaded and its
/// notes are readable.
pub(super) fn loaded_build_id(name: &str) -> Option<Vec<u8>> {
    let path = format!("/sys/module/{}/notes/.note.gnu.build-id", normalize(name));
    locate::build_id_from_notes(&std::fs::read(path).ok()?)
}

/// `path` without a compression suffix (`9p.ko.xz` -> `9p.ko`).
fn uncompressed(path: &str) -> &str {
    [".xz", ".zst", ".gz"]
        .iter()
        .find_map(|s| path.strip_suffix(s))
        .unwrap_or(path)
}

/// Where the debug file of module `name` is looked for, in order, when
/// no path is given for it: Debian's -dbg layout, the build-ID file,
/// the installed module (uncompressed ones only).
pub fn candidates(release: &str, name: &str, build_id: Option<&[u8]>) -> Vec<PathBuf> {
    let mut c = Vec::new();
    let installed = installed_path(release, name);
    if let Some(rel) = &installed {
        c.push(PathBuf::from(format!(
            "/usr/lib/debug/lib/modules/{release}/{}",
            uncompressed(rel)
        )));
    }
    if let Some(p) = build_id.and_then(|id| locate::build_id_path(Path::new("/usr/lib/debug"), id))
    {
        c.push(p);
    }
    if let Some(rel) = installed.filter(|r| uncompressed(r) == r) {
        c.push(PathBuf::from(format!("/lib/modules/{release}/{rel}")));
    }
    c
}

/// The build ID the debug file of module `name` must have: the loaded
/// module's, else (not loaded) the installed module's, else unknown.
pub(super) fn wanted_build_id(release: &str, name: &str) -> Option<Vec<u8>> {
    loaded_build_id(name).or_else(|| {
        let rel = installed_path(release, name)?;
        let file = DebugFile::open(format!("/lib/modules/{release}/{rel}")).ok()?;
        file.build_id().ok().flatten()
    })
}

/// Finds the debug file of module `name`: the given path whose name is
/// the module's alone (a build ID other than `want` refused, unless
/// `other_kernel`), else the first of `candidates` with DWARF and the
/// build ID `want` (when known), else (when `ask_servers`) the
/// debuginfod servers' file of that build ID.
pub(super) fn find(
    name: &str,
    given: &[PathBuf],
    candidates: Vec<PathBuf>,
    want: Option<&[u8]>,
    other_kernel: bool,
    ask_servers: bool,
) -> Result<DebugFile, KernelError> {
    let what = format!("module {}", normalize(name));
    let explicit = given.iter().find(|p| module_name_of(p) == normalize(name));
    Ok(match explicit {
        Some(p) => {
            let want = want.filter(|_| !other_kernel);
            locate::first_local_match(vec![p.clone()], want, &what, true)?
        }
        None if ask_servers => locate::first_match(candidates, want, &what, false)?,
        None => locate::first_local_match(candidates, want, &what, false)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert_eq!(module_name_of(Path::new("/x/kernel/fs/9p/9p.ko")), "9p");
        assert_eq!(
            module_name_of(Path::new("kernel/net/nf-conntrack.ko.xz")),
            "nf_conntrack"
        );
        assert_eq!(uncompressed("kernel/fs/9p/9p.ko.xz"), "kernel/fs/9p/9p.ko");
        assert_eq!(uncompressed("kernel/fs/9p/9p.ko"), "kernel/fs/9p/9p.ko");
    }
}
