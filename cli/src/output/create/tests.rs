//! The `-o` file's creation, on the real file system, in a fresh
//! directory of the host's temporary directory.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

/// A fresh empty directory, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "kprobe-perf-create-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir(&d).unwrap();
        Dir(d)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `path` is a new, empty regular file of mode exactly 0600, owned by
/// this process's user, and `f` is it.
fn assert_new_file(path: &Path, f: &File) {
    let m = fs::symlink_metadata(path).unwrap();
    assert!(
        m.file_type().is_file(),
        "{} is a regular file",
        path.display()
    );
    assert_eq!(m.permissions().mode() & 0o7777, 0o600);
    assert_eq!(m.len(), 0);
    let fm = f.metadata().unwrap();
    assert_eq!((fm.dev(), fm.ino()), (m.dev(), m.ino()));
    assert_eq!(m.uid(), fs::metadata("/proc/self").unwrap().uid());
}

/// Runs [`create`] and keeps the file (as the writer does).
fn make(path: &Path, force: bool) -> Result<(File, Option<String>), String> {
    let (f, note) = create(path, force)?;
    Ok((f.into_file().unwrap(), note))
}

/// An error is one line naming the path, with the OS error text once.
fn assert_one_line(msg: &str, path: &Path) {
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(
        msg.starts_with(&format!("-o {}: ", path.display())),
        "{msg}"
    );
    assert!(
        msg.matches("(os error").count() <= 1,
        "OS error once: {msg}"
    );
}

#[test]
fn a_new_path_is_created_mode_0600() {
    let d = Dir::new();
    let p = d.join("x.data");
    let (f, note) = make(&p, false).unwrap();
    assert_eq!(note, None);
    assert_new_file(&p, &f);
    assert!(!old_path(&p).exists());
}

#[test]
fn an_existing_file_is_kept_as_old_byte_for_byte() {
    let d = Dir::new();
    let p = d.join("x.data");
    let contents: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    fs::write(&p, &contents).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    let ino = fs::metadata(&p).unwrap().ino();
    let (f, note) = make(&p, false).unwrap();
    let old = d.join("x.data.old");
    assert_eq!(
        note.unwrap(),
        format!("{} existed; kept it as {}", p.display(), old.display())
    );
    assert_new_file(&p, &f);
    assert_eq!(fs::read(&old).unwrap(), contents);
    let om = fs::metadata(&old).unwrap();
    assert_eq!(om.ino(), ino, "renamed, not copied");
    assert_eq!(om.permissions().mode() & 0o7777, 0o644);
}

#[test]
fn a_previous_old_file_is_replaced_and_said_so() {
    let d = Dir::new();
    let p = d.join("x.data");
    let old = d.join("x.data.old");
    fs::write(&p, b"second").unwrap();
    fs::write(&old, b"first").unwrap();
    let (f, note) = make(&p, false).unwrap();
    assert_eq!(
        note.unwrap(),
        format!(
            "{p} existed; kept it as {o} (replacing the previous {o})",
            p = p.display(),
            o = old.display()
        )
    );
    assert_new_file(&p, &f);
    assert_eq!(fs::read(&old).unwrap(), b"second");
}

#[test]
fn a_symlink_is_renamed_never_followed() {
    let d = Dir::new();
    let victim = d.join("victim");
    let contents = b"root-owned contents\n\x00\xff".to_vec();
    fs::write(&victim, &contents).unwrap();
    let victim_ino = fs::metadata(&victim).unwrap().ino();
    let p = d.join("x.data");
    symlink(&victim, &p).unwrap();
    let (f, note) = make(&p, false).unwrap();
    let old = d.join("x.data.old");
    assert_eq!(
        note.unwrap(),
        format!(
            "{p} was a symbolic link to {v}; kept the link as {o} without following it, {v} is untouched",
            p = p.display(),
            v = victim.display(),
            o = old.display()
        )
    );
    assert_new_file(&p, &f);
    assert_ne!(fs::metadata(&p).unwrap().ino(), victim_ino);
    assert_eq!(fs::read(&victim).unwrap(), contents);
    assert!(fs::symlink_metadata(&old).unwrap().file_type().is_symlink());
    assert_eq!(fs::read_link(&old).unwrap(), victim);
}

#[test]
fn a_dangling_symlink_is_renamed_and_its_target_not_created() {
    let d = Dir::new();
    let target = d.join("nothing-here");
    let p = d.join("x.data");
    symlink(&target, &p).unwrap();
    let (f, _) = make(&p, false).unwrap();
    assert_new_file(&p, &f);
    assert!(fs::symlink_metadata(&target).is_err(), "target not created");
    assert_eq!(fs::read_link(d.join("x.data.old")).unwrap(), target);
}

#[test]
fn force_replaces_a_file_without_writing_into_it() {
    let d = Dir::new();
    let p = d.join("x.data");
    let other = d.join("hard-link");
    fs::write(&p, b"old contents").unwrap();
    fs::hard_link(&p, &other).unwrap();
    let (f, note) = make(&p, true).unwrap();
    assert_eq!(
        note.unwrap(),
        format!("{} existed; replaced it (--force)", p.display())
    );
    assert_new_file(&p, &f);
    // The old inode was unlinked, not truncated: its other name still
    // holds it.
    assert_eq!(fs::read(&other).unwrap(), b"old contents");
    assert!(!old_path(&p).exists());
}

#[test]
fn force_removes_a_symlink_and_leaves_its_target() {
    let d = Dir::new();
    let victim = d.join("victim");
    fs::write(&victim, b"keep me").unwrap();
    let p = d.join("x.data");
    symlink(&victim, &p).unwrap();
    let (f, note) = make(&p, true).unwrap();
    assert_eq!(
        note.unwrap(),
        format!(
            "{p} was a symbolic link to {v}; removed the link (--force), {v} is untouched",
            p = p.display(),
            v = victim.display()
        )
    );
    assert_new_file(&p, &f);
    assert_eq!(fs::read(&victim).unwrap(), b"keep me");
    assert!(!old_path(&p).exists());
}

#[test]
fn a_link_planted_between_rename_and_create_stops_the_run() {
    let d = Dir::new();
    let victim = d.join("victim");
    fs::write(&victim, b"victim").unwrap();
    let p = d.join("x.data");
    fs::write(&p, b"previous run").unwrap();
    assert!(move_aside(&p, false).unwrap().is_some());
    // The hostile user's move, between the two steps.
    symlink(&victim, &p).unwrap();
    let err = create_new(&p).unwrap_err();
    assert_one_line(&err, &p);
    assert!(
        err.contains(&format!(
            "a symbolic link (to {}) appeared at {}",
            victim.display(),
            p.display()
        )),
        "{err}"
    );
    assert!(err.contains("Nothing was written through it"), "{err}");
    assert_eq!(fs::read(&victim).unwrap(), b"victim");
    assert_eq!(fs::read(d.join("x.data.old")).unwrap(), b"previous run");
    // A dangling link too (O_CREAT would otherwise create its target).
    fs::remove_file(&p).unwrap();
    let target = d.join("made-by-us");
    symlink(&target, &p).unwrap();
    assert!(create_new(&p).is_err());
    assert!(fs::symlink_metadata(&target).is_err());
}

#[test]
fn a_directory_is_refused_even_with_force() {
    let d = Dir::new();
    for force in [false, true] {
        let err = make(&d.0, force).unwrap_err();
        assert_one_line(&err, &d.0);
        assert_eq!(
            err,
            format!(
                "-o {p}: {p} is a directory; give a file name, such as {p}/perf.data",
                p = d.0.display()
            )
        );
        assert!(d.0.is_dir());
        assert!(!old_path(&d.0).exists());
    }
}

#[test]
fn a_fifo_is_refused_and_left_in_place() {
    let d = Dir::new();
    let p = d.join("fifo");
    let ok = std::process::Command::new("mkfifo")
        .arg(&p)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("SKIP a_fifo_is_refused_and_left_in_place: mkfifo failed");
        return;
    }
    for force in [false, true] {
        let err = make(&p, force).unwrap_err();
        assert_eq!(
            err,
            format!(
                "-o {p}: {p} is a FIFO; -o writes a regular file; choose another path",
                p = p.display()
            )
        );
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
    }
}

#[test]
fn a_missing_directory_is_one_line_with_the_os_error_once() {
    let d = Dir::new();
    let p = d.join("no/such/dir/x.data");
    let err = make(&p, false).unwrap_err();
    assert_one_line(&err, &p);
    assert_eq!(
        err,
        format!(
            "-o {p}: cannot create the file: No such file or directory (os error 2); \
             the directory {d} does not exist: create it, or choose another path",
            p = p.display(),
            d = d.join("no/such/dir").display()
        )
    );
}

#[test]
fn an_old_name_taken_by_a_directory_is_refused_before_anything_moves() {
    let d = Dir::new();
    let p = d.join("x.data");
    fs::write(&p, b"data").unwrap();
    fs::create_dir(d.join("x.data.old")).unwrap();
    let err = make(&p, false).unwrap_err();
    assert_one_line(&err, &p);
    assert!(err.contains("which is a directory"), "{err}");
    assert_eq!(fs::read(&p).unwrap(), b"data");
}

#[test]
fn dropping_an_unused_file_removes_only_that_file() {
    let d = Dir::new();
    let p = d.join("x.data");
    let (f, _) = create(&p, false).unwrap();
    drop(f);
    assert!(fs::symlink_metadata(&p).is_err(), "removed");

    // Replaced meanwhile by someone else's file: left alone.
    let (f, _) = create(&p, false).unwrap();
    fs::remove_file(&p).unwrap();
    fs::write(&p, b"not ours").unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"not ours");
}

#[test]
fn advice_names_the_directory() {
    let p = Path::new("/ro/x.data");
    let e = io::Error::from_raw_os_error(libc::EROFS);
    assert_eq!(
        advice(p, &e),
        "/ro is on a read-only file system: choose a path on a writable one"
    );
    let e = io::Error::from_raw_os_error(libc::ENOSPC);
    assert_eq!(
        advice(Path::new("x.data"), &e),
        "the file system of . is full: free space there, or choose another path"
    );
}

#[test]
fn a_proc_file_is_refused_and_left_alone() {
    if fs::metadata("/proc/self").unwrap().uid() != 0 {
        println!(
            "SKIP a_proc_file_is_refused_and_left_alone: needs root (a user gets EACCES first)"
        );
        return;
    }
    let p = Path::new("/proc/version");
    let before = fs::read(p).unwrap();
    let err = make(p, false).unwrap_err();
    assert_one_line(&err, p);
    assert_eq!(
        err,
        "-o /proc/version: cannot rename the existing file to /proc/version.old: \
         No such file or directory (os error 2); the file system of /proc does not let \
         its files be renamed or removed (a pseudo file system such as /proc or /sys): \
         choose another path"
    );
    let err = make(p, true).unwrap_err();
    assert_one_line(&err, p);
    assert!(
        err.starts_with("-o /proc/version: cannot remove the existing file (--force): "),
        "{err}"
    );
    assert_eq!(fs::read(p).unwrap(), before);
}
