//! The binaries of uprobe and USDT definitions as a perf or bpftrace user
//! names them, made into the absolute paths the grammar takes, before
//! anything is planned:
//!
//! - a relative path (`p:./prog:walk`, `latency build/prog:walk`) is
//!   the file from the current directory, its symbolic links resolved,
//!   as `perf probe -x` resolves one;
//! - a bare name that is no loaded kernel module but an executable on
//!   PATH (`p:bash:readline`) is that executable, as a shell finds it;
//! - with `-- CMD`, `usdt:*:PROVIDER:NAME` is the command's binary;
//! - bpftrace's heads (`uprobe:`, `uretprobe:`, `kprobe:`, `kretprobe:`,
//!   and `u:`, `ur:`, `k:`, `kr:`) are `p:` and `r:`.
//!
//! - a library's short name (`p:libc:fopen64`, `p:libssl:SSL_write`) is
//!   the library a `-p` process maps, else the one the loader would map
//!   (libraries.rs); a `libNAME` found nowhere is refused with the
//!   libraries of ldconfig's cache near it;
//! - perf's event names (`probe_libc:fopen64`, `probe:do_sys_open`) and
//!   kprobe-perf's own (`kprobes:p_vfs_read_0`) are the probes they name
//!   (perf_names.rs).

use std::path::PathBuf;

use anyhow::Result;

use crate::libraries::{self, Library};
use crate::perf_names;

/// `-v`: say what the binaries named were resolved to.
#[derive(clap::Args, Clone, Copy, Default)]
pub(crate) struct VerboseArg {
    /// Say on stderr what each binary named in a definition was resolved
    /// to (a relative path, a name on PATH, bpftrace's spelling).
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// What a definition became, and what was resolved on the way (for -v).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub definition: String,
    pub notes: Vec<String>,
}

/// What the rewriting asks of the system (a fake in the tests).
pub(crate) trait Lookup {
    /// The absolute path of `path` (relative to the current directory),
    /// its links resolved.
    fn real_path(&self, path: &str) -> std::io::Result<PathBuf>;
    /// The executable `name` on PATH, its links resolved.
    fn on_path(&self, name: &str) -> Option<PathBuf>;
    /// Whether a kernel module of this name is loaded.
    fn is_module(&self, name: &str) -> bool;
    /// The library a short name (`libc`) names: the one a recorded
    /// process maps, else the one the loader would map.
    fn library(&self, name: &str) -> Option<Library>;
    /// The libraries of the loader's cache whose names are near `name`.
    fn libraries_near(&self, name: &str) -> Vec<String>;
    /// Whether `path` is an ELF file (not a script).
    fn is_elf(&self, path: &std::path::Path) -> bool;
}

/// The running system, and the processes of `-p`.
pub(crate) struct System<'a> {
    pub pids: &'a [i32],
}

impl Lookup for System<'_> {
    fn real_path(&self, path: &str) -> std::io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn on_path(&self, name: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .and_then(|p| std::fs::canonicalize(p).ok())
    }

    fn is_module(&self, name: &str) -> bool {
        let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        let wanted = name.replace('-', "_");
        modules
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .any(|m| m == wanted)
    }

    fn library(&self, name: &str) -> Option<Library> {
        self.pids
            .iter()
            .find_map(|&pid| libraries::mapped_by(pid, name))
            .or_else(|| {
                self.pids
                    .iter()
                    .find_map(|&pid| libraries::loaders_of(pid, name))
            })
            .or_else(|| libraries::loaders(name))
    }

    fn libraries_near(&self, name: &str) -> Vec<String> {
        libraries::near(&libraries::ldconfig_listing(), name, std::env::consts::ARCH)
    }

    fn is_elf(&self, path: &std::path::Path) -> bool {
        use std::io::Read;
        let mut magic = [0u8; 4];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok_and(|()| magic == *b"\x7fELF")
    }
}

/// bpftrace's probe heads and the kind each is here.
const BPFTRACE_HEADS: [(&str, &str); 8] = [
    ("uprobe:", "p:"),
    ("uretprobe:", "r:"),
    ("kprobe:", "p:"),
    ("kretprobe:", "r:"),
    ("u:", "p:"),
    ("ur:", "r:"),
    ("k:", "p:"),
    ("kr:", "r:"),
];

/// `definition` with its binaries resolved (see the module's doc);
/// `command` is the recorded command's argv, if any.
pub(crate) fn definition(
    definition: &str,
    command: &[String],
    look: &dyn Lookup,
) -> Result<Resolved, String> {
    let mut notes = Vec::new();
    let mut text = definition.to_string();
    if let Some((bpf, ours)) = BPFTRACE_HEADS.iter().find(|(h, _)| text.starts_with(h)) {
        text = format!("{ours}{}", &text[bpf.len()..]);
        notes.push(format!("{definition}: bpftrace's {bpf} is {ours} here"));
    }
    if let Some((meant, note)) = perf_names::definition(&text, command, look)? {
        notes.push(note);
        text = meant;
    }
    let targets = target_spans(&text);
    // From the last, so that the earlier spans stay where they are.
    for (start, sdt) in targets.into_iter().rev() {
        let rest = &text[start..];
        let word = rest.split_ascii_whitespace().next().unwrap_or_default();
        let Some(end) = word.find(':') else { continue };
        let binary = &word[..end];
        let resolved = if sdt && binary == "*" {
            // Without a command, `*` is every file the processes of -p map.
            let Some(cmd) = command.first() else { continue };
            command_binary(cmd, look)?
        } else {
            match binary_path(binary, look) {
                Ok(Some((p, found))) => {
                    if let Some(found) = found {
                        notes.push(format!("{binary} is {} ({found})", p.display()));
                        text.replace_range(start..start + end, &p.to_string_lossy());
                        continue;
                    }
                    p
                }
                Ok(None) => continue,
                Err(Refusal::Unresolved(why)) => return Err(caret(&text, start, end, &why)),
                Err(Refusal::NoLibrary(near)) => {
                    let why = no_library(binary, &near, &word[end..]);
                    return Err(caret(&text, start, end, &why));
                }
            }
        };
        let what = if sdt && binary == "*" {
            "usdt:* (the command's binary)"
        } else {
            binary
        };
        notes.push(format!("{what} is {}", resolved.display()));
        text.replace_range(start..start + end, &resolved.to_string_lossy());
    }
    Ok(Resolved {
        definition: text,
        notes,
    })
}

/// The start of each place in `text` where a uprobe's binary may be
/// named, and whether it is an SDT probe's (`usdt:` before it): after
/// the head's `KIND:` (`p:./prog:walk`), and the second word (`p:ev
/// ./prog:walk`).
fn target_spans(text: &str) -> Vec<(usize, bool)> {
    let mut out = Vec::new();
    let mut words = text.split_ascii_whitespace();
    let head = words.next().unwrap_or_default();
    let head_at = text.len() - text.trim_start().len();
    let mut see = |at: usize, word: &str| match word.strip_prefix("usdt:") {
        Some(_) => out.push((at + "usdt:".len(), true)),
        None => out.push((at, false)),
    };
    if head.starts_with("usdt:") {
        see(head_at, head);
    } else if let Some((kind, _)) = head.split_once(':') {
        if is_kind(kind) {
            see(head_at + kind.len() + 1, &head[kind.len() + 1..]);
        }
    }
    if let Some(second) = words.next() {
        let at = head_at + head.len();
        let at = at + text[at..].find(second).unwrap_or(0);
        see(at, second);
    }
    out
}

/// `p`, `r`, `rN` (maxactive): the kinds a uprobe may have.
fn is_kind(kind: &str) -> bool {
    match kind.strip_prefix(['p', 'r']) {
        Some(rest) => rest.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Why a binary's name is refused.
enum Refusal {
    /// A path that names no file.
    Unresolved(String),
    /// A library's short name that names no library: the names near it.
    NoLibrary(Vec<String>),
}

/// The path `binary` names, and for a library's short name where it was
/// found, or `None` when it is to be left as it is (an absolute path, a
/// kernel module, a glob, a name found nowhere that is no library's).
fn binary_path(
    binary: &str,
    look: &dyn Lookup,
) -> Result<Option<(PathBuf, Option<String>)>, Refusal> {
    let fetch_arg = binary.starts_with(['%', '$', '@', '+', '-', '\\']) || binary.contains('=');
    if binary.is_empty() || fetch_arg || binary.starts_with('/') || binary.contains(['*', '?', '['])
    {
        return Ok(None);
    }
    if binary.contains('/') {
        return look
            .real_path(binary)
            .map(|p| Some((p, None)))
            .map_err(|e| {
                Refusal::Unresolved(format!(
                    "cannot resolve {binary} from the current directory (as perf's -x does): {e}"
                ))
            });
    }
    if binary == "vmlinux" || look.is_module(binary) {
        return Ok(None);
    }
    if let Some(p) = look.on_path(binary) {
        return Ok(Some((p, None)));
    }
    match look.library(binary) {
        Some(lib) => Ok(Some((lib.path, Some(lib.found)))),
        // A library's name (libNAME) found nowhere: say so. Any other
        // name may be a kernel module's, loaded or not.
        None if binary.starts_with("lib") => Err(Refusal::NoLibrary(look.libraries_near(binary))),
        None => Ok(None),
    }
}

/// Why a library's short name names nothing, and what to write.
fn no_library(name: &str, near: &[String], after: &str) -> String {
    let near = match near {
        [] => "it has none like it".to_string(),
        _ => format!("it has {}", near.join(", ")),
    };
    format!(
        "no library {name}: no recorded process maps it, and neither LD_LIBRARY_PATH nor \
         ldconfig's cache (/etc/ld.so.cache) has {name}.so ({near}); name it by its \
         path (p:/PATH/{name}.so{after})"
    )
}

/// With `-- CMD`: the command's binary, found as the shell finds it.
fn command_binary(cmd: &str, look: &dyn Lookup) -> Result<PathBuf, String> {
    let found = if cmd.contains('/') {
        look.real_path(cmd).ok()
    } else {
        look.on_path(cmd)
    };
    let path = found.ok_or_else(|| {
        format!("usdt:* stands for the command's binary, and {cmd} is no file nor on PATH")
    })?;
    if !look.is_elf(&path) {
        return Err(format!(
            "usdt:* stands for the command's binary, and {cmd} is {}, not an ELF binary \
             (a script, or a shim that runs another program): name the binary that has the \
             probes, as in usdt:/usr/bin/python3.11:PROVIDER:NAME",
            path.display()
        ));
    }
    Ok(path)
}

/// `why`, then `text` with carets under `len` bytes from `start`, as the
/// grammar's errors show a definition.
pub(crate) fn caret(text: &str, start: usize, len: usize, why: &str) -> String {
    format!(
        "{why}\n  {text}\n  {}{}",
        " ".repeat(text[..start].chars().count()),
        "^".repeat(text[start..start + len].chars().count().max(1))
    )
}

/// Each of `definitions` resolved in place; with `verbose`, what was
/// resolved is said on stderr.
pub(crate) fn all(
    definitions: &mut [String],
    command: &[String],
    pids: &[i32],
    verbose: bool,
) -> Result<()> {
    for d in definitions.iter_mut() {
        let r = definition(d, command, &System { pids }).map_err(|e| anyhow::anyhow!("{e}"))?;
        if verbose {
            for n in &r.notes {
                say!("kprobe-perf: {n}");
            }
        }
        *d = r.definition;
    }
    Ok(())
}

/// `probe -x BINARY`: a path (relative to the current directory), a
/// program on PATH, or a library's short name (`-x libc`), as perf's -x
/// takes them; with `verbose`, what it was resolved to is said.
pub(crate) fn exec(binary: &str, verbose: bool) -> Result<String> {
    if std::path::Path::new(binary).is_file() {
        let p = std::fs::canonicalize(binary)?;
        return Ok(p.to_string_lossy().into_owned());
    }
    let mut one = [format!("p:{binary}:x")];
    all(&mut one, &[], &[], verbose)?;
    let [p] = one;
    let path = p
        .strip_prefix("p:")
        .and_then(|p| p.strip_suffix(":x"))
        .unwrap_or(binary);
    if path.starts_with('/') {
        return Ok(path.to_string());
    }
    anyhow::bail!(
        "-x {binary}: no such file in the current directory, program on PATH or library \
         (give the binary's path)"
    )
}

/// `latency`'s FUNC (`./prog:walk`, `bash:readline`, a kernel function):
/// the target of its probes, resolved as a definition's is.
pub(crate) fn function(func: &str, pids: &[i32], verbose: bool) -> Result<String> {
    let mut one = [format!("p:{func}")];
    all(&mut one, &[], pids, verbose)?;
    let [p] = one;
    Ok(p.strip_prefix("p:").map(str::to_string).unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    struct Fake;

    impl Lookup for Fake {
        fn real_path(&self, path: &str) -> std::io::Result<PathBuf> {
            match path.strip_prefix("./") {
                Some(rest) if !rest.contains("missing") => Ok(Path::new("/home/u").join(rest)),
                _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
            }
        }
        fn on_path(&self, name: &str) -> Option<PathBuf> {
            ["bash", "python3"]
                .contains(&name)
                .then(|| Path::new("/usr/bin").join(name))
        }
        fn is_module(&self, name: &str) -> bool {
            name == "ext4"
        }
        fn library(&self, name: &str) -> Option<Library> {
            (name == "libc").then(|| Library {
                path: PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                found: "libc.so.6 in ldconfig's cache, the loader's".into(),
            })
        }
        fn libraries_near(&self, name: &str) -> Vec<String> {
            match name {
                "libss" => vec!["libssl.so.3".into(), "libssl.so.1.1".into()],
                _ => Vec::new(),
            }
        }
        fn is_elf(&self, path: &Path) -> bool {
            !path.ends_with("shim")
        }
    }

    fn resolve(d: &str) -> Result<String, String> {
        definition(d, &["python3".to_string()], &Fake).map(|r| r.definition)
    }

    #[test]
    fn relative_paths_and_path_binaries_become_absolute() {
        for (given, meant) in [
            ("p:./prog:walk", "p:/home/u/prog:walk"),
            (
                "r:./prog:walk ret=$retval",
                "r:/home/u/prog:walk ret=$retval",
            ),
            ("p:ev ./prog:walk n=$arg1", "p:ev /home/u/prog:walk n=$arg1"),
            ("p:bash:readline", "p:/usr/bin/bash:readline"),
            (
                "usdt:./py:python:gc__start",
                "usdt:/home/u/py:python:gc__start",
            ),
            (
                "usdt:*:python:gc__start",
                "usdt:/usr/bin/python3:python:gc__start",
            ),
            ("uprobe:/bin/sh:main", "p:/bin/sh:main"),
            ("uretprobe:./prog:walk", "r:/home/u/prog:walk"),
            ("kprobe:do_sys_openat2", "p:do_sys_openat2"),
            // Left as they are: kernel targets, absolute paths, globs.
            ("p:ext4:ext4_file_open", "p:ext4:ext4_file_open"),
            ("p:vmlinux:do_sys_open", "p:vmlinux:do_sys_open"),
            (
                "p:myprobe do_sys_open+5 %si:u32",
                "p:myprobe do_sys_open+5 %si:u32",
            ),
            ("p:/bin/sh:main", "p:/bin/sh:main"),
            ("p:*:ext4_*", "p:*:ext4_*"),
            ("p:do_sys_openat2 dfd=%di", "p:do_sys_openat2 dfd=%di"),
        ] {
            assert_eq!(resolve(given).as_deref(), Ok(meant), "{given}");
        }
        let r = definition("uprobe:./prog:walk", &[], &Fake).unwrap();
        assert_eq!(
            r.notes,
            [
                "uprobe:./prog:walk: bpftrace's uprobe: is p: here",
                "./prog is /home/u/prog"
            ]
        );
    }

    #[test]
    fn a_library_short_name_is_the_library_the_loader_maps() {
        let r = definition("p:libc:fopen64 path=+0($arg1):ustring", &[], &Fake).unwrap();
        assert_eq!(
            r.definition,
            "p:/lib/x86_64-linux-gnu/libc.so.6:fopen64 path=+0($arg1):ustring"
        );
        assert_eq!(
            r.notes,
            ["libc is /lib/x86_64-linux-gnu/libc.so.6 (libc.so.6 in ldconfig's cache, the loader's)"]
        );
        assert_eq!(
            resolve("p:libss:SSL_write").unwrap_err(),
            "no library libss: no recorded process maps it, and neither LD_LIBRARY_PATH nor \
             ldconfig's cache (/etc/ld.so.cache) has libss.so (it has libssl.so.3, libssl.so.1.1); \
             name it by its path (p:/PATH/libss.so:SSL_write)\n  p:libss:SSL_write\n    ^^^^^"
        );
        assert_eq!(
            resolve("p:libzz:f").unwrap_err(),
            "no library libzz: no recorded process maps it, and neither LD_LIBRARY_PATH nor \
             ldconfig's cache (/etc/ld.so.cache) has libzz.so (it has none like it); \
             name it by its path (p:/PATH/libzz.so:f)\n  p:libzz:f\n    ^^^^^"
        );
        // A name that is no library's may be a module's, loaded later.
        assert_eq!(
            resolve("p:9p:v9fs_file_open").as_deref(),
            Ok("p:9p:v9fs_file_open")
        );
    }

    #[test]
    fn perf_event_names_are_the_probes_perf_defined() {
        for (given, meant) in [
            (
                "probe_libc:fopen64",
                "p:probe_libc/fopen64 /lib/x86_64-linux-gnu/libc.so.6:fopen64",
            ),
            (
                "probe_libc:fopen64__return ret=$retval",
                "r:probe_libc/fopen64__return /lib/x86_64-linux-gnu/libc.so.6:fopen64 ret=$retval",
            ),
            (
                "probe_bash:readline",
                "p:probe_bash/readline /usr/bin/bash:readline",
            ),
            (
                "probe_prog:walk n=$arg1:s32",
                "p:probe_prog/walk /home/u/prog:walk n=$arg1:s32",
            ),
            (
                "probe:do_sys_open dfd=%di",
                "p:probe/do_sys_open do_sys_open dfd=%di",
            ),
            (
                "probe:do_sys_open__return",
                "r:probe/do_sys_open__return do_sys_open",
            ),
            ("kprobes:p_do_sys_open_0", "p:do_sys_open"),
            ("kprobes:r_vfs_read_0 ret=$retval", "r:vfs_read ret=$retval"),
            ("kprobes:p_do_sys_open_5", "p:do_sys_open+5"),
            ("fprobes:vfs_read__entry", "f:vfs_read"),
            ("fprobes:vfs_read__exit", "f:vfs_read%return"),
            // With a command: its binary.
            (
                "sdt_python:gc__start",
                "usdt:/usr/bin/python3:python:gc__start",
            ),
        ] {
            assert_eq!(resolve(given).as_deref(), Ok(meant), "{given}");
        }
        let r = definition("probe_libc:fopen64", &[], &Fake).unwrap();
        assert_eq!(
            r.notes,
            ["probe_libc:fopen64 is p:probe_libc/fopen64 /lib/x86_64-linux-gnu/libc.so.6:fopen64"]
        );
    }

    #[test]
    fn what_cannot_be_meant_says_the_form_to_use() {
        assert_eq!(
            resolve("p:./missing:walk").unwrap_err(),
            "cannot resolve ./missing from the current directory (as perf's -x does): entity not found\n  \
             p:./missing:walk\n    ^^^^^^^^^"
        );
        assert_eq!(
            definition("usdt:*:python:gc__start", &["./shim".into()], &Fake).unwrap_err(),
            "usdt:* stands for the command's binary, and ./shim is /home/u/shim, not an ELF \
             binary (a script, or a shim that runs another program): name the binary that has \
             the probes, as in usdt:/usr/bin/python3.11:PROVIDER:NAME"
        );
        assert_eq!(
            resolve("probe_missing:f").unwrap_err(),
            "probe_missing:f is perf's name of a uprobe in the binary missing, and no library, \
             program on PATH or file of the current directory is missing; write p:PATH:f, PATH \
             the missing binary's path\n  probe_missing:f\n  ^^^^^^^^^^^^^^^"
        );
        assert_eq!(
            definition("sdt_python:gc__start", &[], &Fake).unwrap_err(),
            "sdt_python:gc__start is the name perf gives an SDT event, which does not say the \
             binary; write usdt:BINARY:python:gc__start, BINARY the binary's path (or \
             usdt:*:python:gc__start with -- CMD)\n  sdt_python:gc__start\n  ^^^^^^^^^^^^^^^^^^^^"
        );
        assert_eq!(
            resolve("uprobes:p_sh_main_0").unwrap_err(),
            "uprobes:p_sh_main_0 is a name kprobe-perf gives a uprobe, which says neither the \
             binary's path nor where the function's name ends; write p:PATH:FUNC (r: for a \
             return), PATH the binary's path\n  uprobes:p_sh_main_0\n  ^^^^^^^^^^^^^^^^^^^"
        );
    }
}
