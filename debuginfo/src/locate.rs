//! Finding the debug file for the running kernel or for a user binary.

use std::path::{Path, PathBuf};

use crate::debuginfod::Debuginfod;
use crate::error::{Error, Result};
use crate::file::{hex, DebugFile};

/// Parses the GNU build ID out of ELF notes such as `/sys/kernel/notes`.
pub fn build_id_from_notes(notes: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let word = |o: usize| -> Option<usize> {
            Some(u32::from_ne_bytes(notes.get(at + o..at + o + 4)?.try_into().ok()?) as usize)
        };
        let (namesz, descsz, kind) = (word(0)?, word(4)?, word(8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.div_ceil(4) * 4)?;
        let next = desc_at.checked_add(descsz.div_ceil(4) * 4)?;
        let name = notes.get(name_at..name_at + namesz)?;
        if kind == 3 && name.starts_with(b"GNU") {
            return Some(notes.get(desc_at..desc_at + descsz)?.to_vec());
        }
        at = next;
    }
    None
}

/// `/usr/lib/debug/.build-id/NN/REST.debug` for a build ID.
pub fn build_id_path(root: &Path, id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    Some(
        root.join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{}.debug", hex(rest))),
    )
}

/// The candidate debug files of the running kernel, in the order tried:
/// `explicit` (e.g. `--vmlinux`), then the usual places for `release`
/// (`uname -r`), then the build-ID path.
pub fn kernel_candidates(
    explicit: Option<&Path>,
    release: &str,
    build_id: Option<&[u8]>,
) -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    c.extend(
        [
            format!("/usr/lib/debug/boot/vmlinux-{release}"),
            format!("/boot/vmlinux-{release}"),
            format!("/lib/modules/{release}/build/vmlinux"),
            format!("/usr/lib/debug/lib/modules/{release}/vmlinux"),
        ]
        .map(PathBuf::from),
    );
    if let Some(p) = build_id.and_then(|id| build_id_path(Path::new("/usr/lib/debug"), id)) {
        c.push(p);
    }
    c
}

/// Finds the running kernel's debug file: the first candidate that exists,
/// has DWARF, and whose build ID matches `/sys/kernel/notes` (when readable).
pub fn find_kernel(explicit: Option<&Path>) -> Result<DebugFile> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let running = std::fs::read("/sys/kernel/notes")
        .ok()
        .and_then(|n| build_id_from_notes(&n));
    let candidates = kernel_candidates(explicit, release.trim(), running.as_deref());
    first_match(
        candidates,
        running.as_deref(),
        "the running kernel",
        explicit.is_some(),
    )
}

/// Finds the debug file of a user binary: build-ID file, `.gnu_debuglink`
/// (beside it, in `.debug/`, under `/usr/lib/debug/DIR`), or the binary itself.
pub fn find_user(binary: &Path) -> Result<DebugFile> {
    let file = DebugFile::open(binary)?;
    let id = file.build_id()?;
    let mut c = Vec::new();
    if let Some(p) = id
        .as_deref()
        .and_then(|id| build_id_path(Path::new("/usr/lib/debug"), id))
    {
        c.push(p);
    }
    if let Some((name, _crc)) = file.debuglink()? {
        let dir = binary.parent().unwrap_or(Path::new("/"));
        c.push(dir.join(&name));
        c.push(dir.join(".debug").join(&name));
        let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        c.push(
            Path::new("/usr/lib/debug")
                .join(abs.strip_prefix("/").unwrap_or(&abs))
                .join(&name),
        );
    }
    if file.has_dwarf() {
        c.push(binary.to_path_buf());
    }
    first_match(c, id.as_deref(), &binary.display().to_string(), false)
}

/// The first of `candidates` that exists and has DWARF, and whose build
/// ID is `want` (when both are known): a candidate of another build is
/// skipped, except the first when `first_is_explicit` (a path the user
/// gave), which is an error then. When none is, and `want` is known, the
/// debuginfod servers of `DEBUGINFOD_URLS` are asked for it (not when the
/// user named the file). `what` names the code described (for
/// messages: "the running kernel").
pub fn first_match(
    candidates: Vec<PathBuf>,
    want: Option<&[u8]>,
    what: &str,
    first_is_explicit: bool,
) -> Result<DebugFile> {
    let searched = match first_local_match(candidates, want, what, first_is_explicit) {
        Err(Error::NotFound { searched, .. }) => searched,
        found => return found,
    };
    let mut asked = Vec::new();
    if let (Some(want), false, Some(client)) = (want, first_is_explicit, Debuginfod::from_env()) {
        match client.fetch(want)? {
            Ok(path) => return fetched(path, want, what),
            Err(attempts) => asked = attempts,
        }
    }
    Err(Error::NotFound {
        what: what.to_string(),
        searched,
        asked,
    })
}

/// [`first_match`] among the local `candidates` only: no debuginfod
/// server is asked (for a report that must not start a download).
pub fn first_local_match(
    candidates: Vec<PathBuf>,
    want: Option<&[u8]>,
    what: &str,
    first_is_explicit: bool,
) -> Result<DebugFile> {
    for (i, path) in candidates.iter().enumerate() {
        let explicit = i == 0 && first_is_explicit;
        if !explicit && !path.is_file() {
            continue;
        }
        let file = DebugFile::open(path)?;
        if !file.has_dwarf() {
            if explicit {
                return Err(Error::NoDwarf { path: path.clone() });
            }
            continue;
        }
        if let (Some(want), Some(found)) = (want, file.build_id()?) {
            if want != found.as_slice() {
                if explicit {
                    return Err(Error::BuildIdMismatch {
                        path: path.clone(),
                        what: what.to_string(),
                        expected: hex(want),
                        found: hex(&found),
                    });
                }
                continue;
            }
        }
        return Ok(file);
    }
    Err(Error::NotFound {
        what: what.to_string(),
        searched: candidates,
        asked: Vec::new(),
    })
}

/// The file a debuginfod server gave for `want`, checked as a local one
/// is: a server's answer of another build is refused, not used.
fn fetched(path: PathBuf, want: &[u8], what: &str) -> Result<DebugFile> {
    let file = DebugFile::open(&path)?;
    if !file.has_dwarf() {
        return Err(Error::NoDwarf { path });
    }
    match file.build_id()? {
        Some(found) if found.as_slice() != want => Err(Error::BuildIdMismatch {
            path,
            what: what.to_string(),
            expected: hex(want),
            found: hex(&found),
        }),
        _ => Ok(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes() {
        let mut n = Vec::new();
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0xab, 0xcd, 0xef, 0x01]);
        assert_eq!(build_id_from_notes(&n), Some(vec![0xab, 0xcd, 0xef, 0x01]));
        assert_eq!(
            build_id_path(Path::new("/usr/lib/debug"), &[0xab, 0xcd, 0xef]).unwrap(),
            PathBuf::from("/usr/lib/debug/.build-id/ab/cdef.debug")
        );
        assert!(build_id_from_notes(&n[..10]).is_none());
    }
}
