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
//! What cannot be meant as a definition is refused with the form to use:
//! perf's event names (`probe_libc:open64`, `sdt_python:gc__start`), and
//! a library's short name (`p:libc:fopen64`), with the path the loader
//! maps for it.

use std::path::PathBuf;

use anyhow::Result;

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
    /// The library the loader maps for a short name (`libc`).
    fn library(&self, name: &str) -> Option<PathBuf>;
    /// Whether `path` is an ELF file (not a script).
    fn is_elf(&self, path: &std::path::Path) -> bool;
}

/// The running system.
pub(crate) struct System;

impl Lookup for System {
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

    fn library(&self, name: &str) -> Option<PathBuf> {
        let out = std::process::Command::new("ldconfig")
            .arg("-p")
            .output()
            .ok()?;
        let listing = String::from_utf8_lossy(&out.stdout);
        library_in(&listing, name, std::env::consts::ARCH)
    }

    fn is_elf(&self, path: &std::path::Path) -> bool {
        use std::io::Read;
        let mut magic = [0u8; 4];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok_and(|()| magic == *b"\x7fELF")
    }
}

/// From `ldconfig -p`'s listing, the library `NAME.so...` of this
/// architecture (`x86-64`, `AArch64` in its words).
fn library_in(listing: &str, name: &str, arch: &str) -> Option<PathBuf> {
    let arch_word = match arch {
        "x86_64" => "x86-64",
        "aarch64" => "AArch64",
        other => other,
    };
    let soname = format!("{name}.so");
    listing.lines().find_map(|l| {
        let (left, path) = l.trim().split_once(" => ")?;
        let (lib, flags) = left.split_once(' ')?;
        (lib.starts_with(&soname) && flags.contains(arch_word)).then(|| PathBuf::from(path))
    })
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
    refuse_perf_event_names(&text, look)?;
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
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(Refusal::Unresolved(why)) => return Err(caret(&text, start, end, &why)),
                Err(Refusal::Library(lib)) => {
                    let mut meant = text.clone();
                    meant.replace_range(start..start + end, &lib.to_string_lossy());
                    let why = format!(
                        "no kernel module {binary} is loaded, and a uprobe takes the binary's \
                         path, not a library's name: write {meant} (the {binary} the loader \
                         maps, from ldconfig -p)"
                    );
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
    /// A library's short name, and the library the loader maps for it.
    Library(PathBuf),
}

/// The path `binary` names, or `None` when it is to be left as it is
/// (an absolute path, a kernel module, a glob, a name found nowhere).
fn binary_path(binary: &str, look: &dyn Lookup) -> Result<Option<PathBuf>, Refusal> {
    let fetch_arg = binary.starts_with(['%', '$', '@', '+', '-', '\\']) || binary.contains('=');
    if binary.is_empty() || fetch_arg || binary.starts_with('/') || binary.contains(['*', '?', '['])
    {
        return Ok(None);
    }
    if binary.contains('/') {
        return look.real_path(binary).map(Some).map_err(|e| {
            Refusal::Unresolved(format!(
                "cannot resolve {binary} from the current directory (as perf's -x does): {e}"
            ))
        });
    }
    if binary == "vmlinux" || look.is_module(binary) {
        return Ok(None);
    }
    if let Some(p) = look.on_path(binary) {
        return Ok(Some(p));
    }
    match look.library(binary) {
        Some(lib) => Err(Refusal::Library(lib)),
        None => Ok(None),
    }
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

/// perf's names of the events `perf probe` defines (`probe:EVENT`,
/// `probe_BINARY:EVENT`, `sdt_PROVIDER:NAME`) are no probe point: the
/// form to write instead.
fn refuse_perf_event_names(text: &str, look: &dyn Lookup) -> Result<(), String> {
    let head = text.split_ascii_whitespace().next().unwrap_or_default();
    let Some((group, event)) = head.split_once(':') else {
        return Ok(());
    };
    let simple =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !simple(event) {
        return Ok(());
    }
    let form = if let Some(provider) = group.strip_prefix("sdt_").filter(|p| simple(p)) {
        format!("usdt:BINARY:{provider}:{event} (the binary's path)")
    } else if group == "probe" {
        format!("p:{event} (a kernel function)")
    } else if let Some(binary) = group.strip_prefix("probe_").filter(|b| simple(b)) {
        match look.on_path(binary).or_else(|| look.library(binary)) {
            Some(path) => format!("p:{}:{event}", path.display()),
            None => format!("p:PATH:{event}, PATH the {binary} binary's path"),
        }
    } else {
        return Ok(());
    };
    Err(caret(
        text,
        0,
        head.len(),
        &format!(
            "{head} is the name perf gives an event `perf probe` defined, not a probe: \
             kprobe-perf defines its own; write {form}"
        ),
    ))
}

/// `why`, then `text` with carets under `len` bytes from `start`, as the
/// grammar's errors show a definition.
fn caret(text: &str, start: usize, len: usize, why: &str) -> String {
    format!(
        "{why}\n  {text}\n  {}{}",
        " ".repeat(text[..start].chars().count()),
        "^".repeat(text[start..start + len].chars().count().max(1))
    )
}

/// Each of `definitions` resolved in place; with `verbose`, what was
/// resolved is said on stderr.
pub(crate) fn all(definitions: &mut [String], command: &[String], verbose: bool) -> Result<()> {
    for d in definitions.iter_mut() {
        let r = definition(d, command, &System).map_err(|e| anyhow::anyhow!("{e}"))?;
        if verbose {
            for n in &r.notes {
                say!("kprobe-perf: {n}");
            }
        }
        *d = r.definition;
    }
    Ok(())
}

/// `latency`'s FUNC (`./prog:walk`, `bash:readline`, a kernel function):
/// the target of its probes, resolved as a definition's is.
pub(crate) fn function(func: &str, verbose: bool) -> Result<String> {
    let mut one = [format!("p:{func}")];
    all(&mut one, &[], verbose)?;
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
        fn library(&self, name: &str) -> Option<PathBuf> {
            (name == "libc").then(|| PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"))
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
    fn what_cannot_be_meant_says_the_form_to_use() {
        assert_eq!(
            resolve("p:libc:fopen64").unwrap_err(),
            "no kernel module libc is loaded, and a uprobe takes the binary's path, not a library's \
             name: write p:/lib/x86_64-linux-gnu/libc.so.6:fopen64 (the libc the loader maps, from \
             ldconfig -p)\n  p:libc:fopen64\n    ^^^^"
        );
        assert_eq!(
            resolve("p:./missing:walk").unwrap_err(),
            "cannot resolve ./missing from the current directory (as perf's -x does): entity not found\n  \
             p:./missing:walk\n    ^^^^^^^^^"
        );
        assert_eq!(
            resolve("probe_libc:open64").unwrap_err(),
            "probe_libc:open64 is the name perf gives an event `perf probe` defined, not a probe: \
             kprobe-perf defines its own; write p:/lib/x86_64-linux-gnu/libc.so.6:open64\n  \
             probe_libc:open64\n  ^^^^^^^^^^^^^^^^^"
        );
        assert_eq!(
            definition("usdt:*:python:gc__start", &["./shim".into()], &Fake).unwrap_err(),
            "usdt:* stands for the command's binary, and ./shim is /home/u/shim, not an ELF \
             binary (a script, or a shim that runs another program): name the binary that has \
             the probes, as in usdt:/usr/bin/python3.11:PROVIDER:NAME"
        );
        assert_eq!(
            resolve("probe_zz:f").unwrap_err(),
            "probe_zz:f is the name perf gives an event `perf probe` defined, not a probe: \
             kprobe-perf defines its own; write p:PATH:f, PATH the zz binary's path\n  \
             probe_zz:f\n  ^^^^^^^^^^"
        );
        assert_eq!(
            resolve("sdt_python:gc__start").unwrap_err(),
            "sdt_python:gc__start is the name perf gives an event `perf probe` defined, not a probe: \
             kprobe-perf defines its own; write usdt:BINARY:python:gc__start (the binary's path)\n  \
             sdt_python:gc__start\n  ^^^^^^^^^^^^^^^^^^^^"
        );
    }

    #[test]
    fn ldconfig_names_the_library_of_this_architecture() {
        let listing = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibc.so.6 (libc6) => /lib/i386-linux-gnu/libc.so.6\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n\
            \tlibcap.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcap.so.2\n";
        assert_eq!(
            library_in(listing, "libc", "x86_64"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"))
        );
        assert_eq!(
            library_in(listing, "libcap", "x86_64"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libcap.so.2"))
        );
        assert_eq!(library_in(listing, "libz", "x86_64"), None);
    }
}
