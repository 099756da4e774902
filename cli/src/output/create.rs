//! Making the `-o` file without following a link or clobbering a file.
//!
//! An existing FILE is moved aside first: renamed to `FILE.old` (the link
//! itself when FILE is a symbolic link), or with `--force` removed (a
//! regular file or a link; the link's target is never touched). Then FILE
//! is created with `O_CREAT|O_EXCL|O_NOFOLLOW`, so if anything appears at
//! FILE between the two steps (a link planted by another user in a shared
//! directory such as /tmp), the creation fails instead of writing through
//! it. The new file is mode 0600: it holds the kernel's `_text` address and
//! the library bases of other processes.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of the file `-o` writes.
pub(super) const MODE: u32 = 0o600;

/// A newly created, still empty `-o` file. Dropped before it is handed to
/// the perf.data writer (an error between creating it and starting the
/// recording), it removes itself, so that a failed run leaves no empty file.
pub(crate) struct NewFile {
    path: PathBuf,
    file: Option<File>,
}

impl NewFile {
    /// The path given to `-o`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The file, which from now on stays even if the run fails.
    pub(crate) fn into_file(mut self) -> Option<File> {
        self.file.take()
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        // Remove only the file this run made (same inode), never one that
        // has replaced it since.
        let ours = match (file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `FILE.old`.
pub(super) fn old_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".old");
    PathBuf::from(s)
}

/// Moves an existing `path` aside and creates it anew (see the module
/// documentation). Returns the file and, when something existed, the line
/// that says what was done with it.
pub(super) fn create(path: &Path, force: bool) -> Result<(NewFile, Option<String>), String> {
    let note = move_aside(path, force)?;
    let file = create_new(path)?;
    Ok((
        NewFile {
            path: path.to_path_buf(),
            file: Some(file),
        },
        note,
    ))
}

/// What a file of type `m` is, in words, when `-o` cannot replace it.
fn refused_kind(m: &Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_file() || t.is_symlink() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// What is at `path` now (`None`: nothing), refusing what `-o` never
/// writes (a directory, device, FIFO or socket). Changes nothing, so it
/// can run before anything is attached.
pub(super) fn check(path: &Path) -> Result<Option<Metadata>, String> {
    let p = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "-o {p}: cannot look at the path: {e}; {}",
                advice(path, &e)
            ))
        }
    };
    if let Some(kind) = refused_kind(&meta) {
        let hint = if meta.is_dir() {
            format!(
                "give a file name, such as {}",
                path.join("perf.data").display()
            )
        } else {
            "-o writes a regular file; choose another path".to_string()
        };
        return Err(format!("-o {p}: {p} is {kind}; {hint}"));
    }
    Ok(Some(meta))
}

/// Renames (or with `force` removes) what exists at `path`, never
/// following a symbolic link. Returns what was done, or `None` when
/// nothing was there.
pub(super) fn move_aside(path: &Path, force: bool) -> Result<Option<String>, String> {
    let p = path.display();
    let Some(meta) = check(path)? else {
        return Ok(None);
    };
    let link = meta
        .file_type()
        .is_symlink()
        .then(|| std::fs::read_link(path).map_or_else(|_| "?".into(), |t| t.display().to_string()));
    if force {
        std::fs::remove_file(path).map_err(|e| {
            format!(
                "-o {p}: cannot remove the existing file (--force): {e}; {}",
                move_advice(path, &e)
            )
        })?;
        return Ok(Some(match link {
            Some(t) => format!(
                "{p} was a symbolic link to {t}; removed the link (--force), {t} is untouched"
            ),
            None => format!("{p} existed; replaced it (--force)"),
        }));
    }
    let old = old_path(path);
    let o = old.display();
    let replaced_old = match std::fs::symlink_metadata(&old) {
        Ok(m) if m.is_dir() => {
            return Err(format!(
                "-o {p}: {p} exists and cannot be kept as {o}, which is a directory; \
                 move {o} away, or pass --force to replace {p}"
            ))
        }
        Ok(_) => format!(" (replacing the previous {o})"),
        Err(_) => String::new(),
    };
    std::fs::rename(path, &old).map_err(|e| {
        format!(
            "-o {p}: cannot rename the existing file to {o}: {e}; {}",
            move_advice(path, &e)
        )
    })?;
    Ok(Some(match link {
        Some(t) => format!(
            "{p} was a symbolic link to {t}; kept the link as {o}{replaced_old} without following it, {t} is untouched"
        ),
        None => format!("{p} existed; kept it as {o}{replaced_old}"),
    }))
}

/// Creates `path`, which must not exist (not even as a dangling link),
/// mode 0600; open for reading too, as the samples are read back at the
/// end to be counted.
pub(super) fn create_new(path: &Path) -> Result<File, String> {
    let p = path.display();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true) // O_CREAT | O_EXCL
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(MODE)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                let what = match std::fs::symlink_metadata(path) {
                    Ok(m) if m.file_type().is_symlink() => format!(
                        "a symbolic link (to {})",
                        std::fs::read_link(path)
                            .map_or_else(|_| "?".into(), |t| t.display().to_string())
                    ),
                    Ok(m) if m.is_file() => format!("a file (owner uid {})", m.uid()),
                    Ok(_) => "something".to_string(),
                    Err(_) => "something (gone again)".to_string(),
                };
                format!(
                    "-o {p}: cannot create the file: {e}; {what} appeared at {p} after the \
                     old one was moved aside: another process is writing in {}. Nothing was \
                     written through it; choose a FILE in a directory only you can write",
                    parent(path).display()
                )
            } else {
                format!("-o {p}: cannot create the file: {e}; {}", advice(path, &e))
            }
        })?;
    // Exactly 0600 whatever the umask (which can only have removed bits).
    file.set_permissions(std::fs::Permissions::from_mode(MODE))
        .map_err(|e| format!("-o {p}: cannot set its mode to 0600: {e}; choose another path"))?;
    Ok(file)
}

/// The directory `path` is in.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// What to do about `e`, met while renaming or removing what exists at
/// `path`.
fn move_advice(path: &Path, e: &io::Error) -> String {
    if e.raw_os_error() != Some(libc::ENOENT) {
        return advice(path, e);
    }
    if std::fs::symlink_metadata(path).is_ok() {
        // procfs and sysfs answer ENOENT for a rename of their files.
        format!(
            "the file system of {} does not let its files be renamed or removed \
             (a pseudo file system such as /proc or /sys): choose another path",
            parent(path).display()
        )
    } else {
        "it was removed meanwhile by another process: run again".into()
    }
}

/// What to do about `e`, met while making `path`.
pub(super) fn advice(path: &Path, e: &io::Error) -> String {
    let dir = parent(path).display();
    match e.raw_os_error() {
        Some(libc::ENOENT) => {
            format!("the directory {dir} does not exist: create it, or choose another path")
        }
        Some(libc::ENOTDIR) => {
            "a component of the path is not a directory: choose another path".into()
        }
        Some(libc::EACCES | libc::EPERM) => {
            format!("{dir} does not let this user make or replace files there: choose another path")
        }
        Some(libc::EROFS) => {
            format!("{dir} is on a read-only file system: choose a path on a writable one")
        }
        Some(libc::ENOSPC | libc::EDQUOT) => {
            format!("the file system of {dir} is full: free space there, or choose another path")
        }
        Some(libc::ELOOP) => {
            "too many symbolic links in the directories of the path: choose another path".into()
        }
        Some(libc::ENAMETOOLONG) => "the path is too long: choose a shorter one".into(),
        _ => "choose another path".into(),
    }
}

#[cfg(test)]
mod tests;
