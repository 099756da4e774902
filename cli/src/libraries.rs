//! A library's short name (`libc`, `libssl`), as `perf probe -x libc`
//! takes it, made into the file a uprobe names:
//!
//! 1. the library a `-p PID` process maps (its /proc/PID/maps), when one
//!    of its mappings is that library, else the one its loader would map
//!    from its own LD_LIBRARY_PATH (/proc/PID/environ);
//! 2. else the one the system's loader would map for a program started
//!    now (`-- CMD`, or any process later): the first directory of
//!    LD_LIBRARY_PATH that holds it, then ldconfig's cache
//!    (/etc/ld.so.cache, read with `ldconfig -p`), for this
//!    architecture.
//!
//! A uprobe belongs to the file (its inode), so a library found in 2.
//! before any process maps it is probed in every process that maps it
//! later, through `dlopen` too.

use std::path::{Path, PathBuf};

/// A library found for a short name, and where it was found (for -v).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Library {
    pub path: PathBuf,
    pub found: String,
}

/// Whether `file` (a file name, `libc.so.6`) is the library `name`
/// names: `libc` is `libc.so`, `libc.so.6`, `libc-2.31.so`; the file's
/// own name is itself.
pub(crate) fn names(name: &str, file: &str) -> bool {
    let Some(rest) = file.strip_prefix(name) else {
        return false;
    };
    rest.is_empty()
        || rest == ".so"
        || rest.starts_with(".so.")
        || (rest.starts_with('-') && rest.ends_with(".so"))
}

/// The library `name` names among the files `pid` maps.
pub(crate) fn mapped_by(pid: i32, name: &str) -> Option<Library> {
    let files = kprobe_perf_engine::cli::plan::sdt::mapped_files(u32::try_from(pid).ok()?).ok()?;
    in_mapped(&files, name).map(|path| Library {
        path,
        found: format!("mapped by process {pid}"),
    })
}

/// Of the files a process maps executable, the one `name` names.
fn in_mapped(files: &[String], name: &str) -> Option<PathBuf> {
    files
        .iter()
        .find(|p| file_name(p).is_some_and(|f| names(name, f)))
        .map(PathBuf::from)
}

fn file_name(path: &str) -> Option<&str> {
    Path::new(path).file_name().and_then(|f| f.to_str())
}

/// The library the loader would map for `name` in process `pid`: the
/// directories of its own LD_LIBRARY_PATH (its /proc/PID/environ).
pub(crate) fn loaders_of(pid: i32, name: &str) -> Option<Library> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let dirs = environ
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"LD_LIBRARY_PATH="))?;
    let mut lib = in_dirs(&String::from_utf8_lossy(dirs), name)?;
    lib.found = format!("{} of process {pid}", lib.found);
    Some(lib)
}

/// The library the loader would map for `name`: LD_LIBRARY_PATH's
/// directories first, then ldconfig's cache.
pub(crate) fn loaders(name: &str) -> Option<Library> {
    let dirs = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    in_dirs(&dirs, name).or_else(|| {
        in_cache(&ldconfig_listing(), name, std::env::consts::ARCH).map(|(soname, path)| Library {
            path,
            found: format!("{soname} in ldconfig's cache, the loader's"),
        })
    })
}

/// The library `name` names in the directories of an LD_LIBRARY_PATH
/// value (the loader tries `NAME.so` there, then the sonames).
fn in_dirs(dirs: &str, name: &str) -> Option<Library> {
    for dir in dirs.split(':').filter(|d| !d.is_empty()) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| names(name, f) && f != name)
            .collect();
        files.sort();
        if let Some(f) = files.first() {
            let path = Path::new(dir).join(f);
            return Some(Library {
                path: std::fs::canonicalize(&path).unwrap_or(path),
                found: format!("in LD_LIBRARY_PATH's {dir}"),
            });
        }
    }
    None
}

/// `ldconfig -p`'s listing of /etc/ld.so.cache (ldconfig is in /sbin,
/// which a user's PATH may lack); empty when it cannot run.
pub(crate) fn ldconfig_listing() -> String {
    ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|l| std::process::Command::new(l).arg("-p").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The cache's lines of this architecture (`x86-64`, `AArch64` in its
/// words): (soname, path), in the cache's order (newest version first).
fn cache_entries<'a>(listing: &'a str, arch: &str) -> impl Iterator<Item = (&'a str, &'a str)> {
    let arch_word = match arch {
        "x86_64" => "x86-64",
        "aarch64" => "AArch64",
        other => other,
    }
    .to_string();
    listing.lines().filter_map(move |l| {
        let (left, path) = l.trim().split_once(" => ")?;
        let (lib, flags) = left.split_once(' ')?;
        flags.contains(&arch_word).then_some((lib, path))
    })
}

/// From `ldconfig -p`'s listing, the library `name` names: its soname
/// and path.
pub(crate) fn in_cache(listing: &str, name: &str, arch: &str) -> Option<(String, PathBuf)> {
    cache_entries(listing, arch)
        .find(|(lib, _)| names(name, lib))
        .map(|(lib, path)| (lib.to_string(), PathBuf::from(path)))
}

/// The cache's sonames that look like `name` (they contain it, or, when
/// none does, share its first three letters after `lib`), at most eight:
/// for the message when nothing is `name`.
pub(crate) fn near(listing: &str, name: &str, arch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let stem = name.strip_prefix("lib").unwrap_or(name);
    let prefix: String = format!("lib{}", stem.chars().take(3).collect::<String>());
    let contain = |lib: &str| lib.contains(stem);
    let share = |lib: &str| stem.len() >= 2 && lib.starts_with(&prefix);
    for test in [&contain as &dyn Fn(&str) -> bool, &share] {
        for (lib, _) in cache_entries(listing, arch) {
            if test(lib) && !out.iter().any(|o| o == lib) && out.len() < 8 {
                out.push(lib.to_string());
            }
        }
        if !out.is_empty() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "1234 libs found in cache `/etc/ld.so.cache'\n\
        \tlibssl.so.3 (libc6,x86-64) => /lib/x86_64-linux-gnu/libssl.so.3\n\
        \tlibssl.so.1.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libssl.so.1.1\n\
        \tlibc.so.6 (libc6) => /lib/i386-linux-gnu/libc.so.6\n\
        \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n\
        \tlibcap.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcap.so.2\n\
        \tlibcrypto.so.3 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcrypto.so.3\n";

    #[test]
    fn a_short_name_is_the_library_of_this_architecture_newest_first() {
        assert_eq!(
            in_cache(LISTING, "libc", "x86_64"),
            Some((
                "libc.so.6".to_string(),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
            ))
        );
        assert_eq!(
            in_cache(LISTING, "libssl", "x86_64").map(|(s, _)| s),
            Some("libssl.so.3".to_string())
        );
        assert_eq!(
            in_cache(LISTING, "libssl.so.1.1", "x86_64").map(|(s, _)| s),
            Some("libssl.so.1.1".to_string())
        );
        assert_eq!(in_cache(LISTING, "libz", "x86_64"), None);
        // libc is not libcap, nor libcrypto.
        assert!(!names("libc", "libcap.so.2"));
        assert!(names("libc", "libc-2.31.so"));
    }

    #[test]
    fn the_names_near_a_missing_one_are_offered() {
        assert_eq!(
            near(LISTING, "libss", "x86_64"),
            ["libssl.so.3", "libssl.so.1.1"]
        );
        assert_eq!(near(LISTING, "libcrypt", "x86_64"), ["libcrypto.so.3"]);
        assert_eq!(near(LISTING, "libcapz", "x86_64"), ["libcap.so.2"]);
        assert!(near(LISTING, "libzzz", "x86_64").is_empty());
    }

    #[test]
    fn a_process_maps_its_own_copy() {
        // What plan::sdt::mapped_files reads from /proc/PID/maps.
        let files = [
            "/opt/app/lib/libssl.so.3".to_string(),
            "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string(),
        ];
        assert_eq!(
            in_mapped(&files, "libssl"),
            Some(PathBuf::from("/opt/app/lib/libssl.so.3"))
        );
        assert_eq!(in_mapped(&files, "libcrypto"), None);
    }
}
