//! The command of a [`RecordTarget::Command`](crate::attach::target::RecordTarget::Command):
//! found in `PATH`, forked held before exec so its events can be opened
//! first, released once they are armed, and reaped.

use std::ffi::CString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::attach::error::AttachError;
use crate::attach::sys;

/// A child process that waits before exec(2) until [`HeldCommand::release`],
/// so perf events can be attached to its pid first. (std's
/// `Command::spawn` waits for exec to happen, so it cannot hold.)
pub(crate) struct HeldCommand {
    /// `argv[0]`, for messages.
    program: String,
    pid: i32,
    /// The gate: `None` once released.
    gate: Option<std::fs::File>,
    /// Where the child reports exec's errno: `None` once read.
    exec_error: Option<std::fs::File>,
    status: Option<ExitStatus>,
}

impl HeldCommand {
    /// Forks a child that will run `argv` once released. `argv[0]` is
    /// looked up in `PATH` here, in the parent (see [`find_program`]), so
    /// a missing command is an error before anything else happens. Once
    /// released, the child resets every signal to its default action and
    /// unblocks all signals, then execs.
    pub(crate) fn spawn(argv: &[String]) -> Result<HeldCommand, AttachError> {
        let program = argv.first().map_or("", String::as_str);
        let path = find_program(program)?;
        let nul = || AttachError::CommandHasNul {
            program: program.to_string(),
        };
        let path = CString::new(std::os::unix::ffi::OsStringExt::into_vec(
            path.into_os_string(),
        ))
        .map_err(|_| nul())?;
        let argv = argv
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| nul()))
            .collect::<Result<Vec<_>, _>>()?;
        let fork = sys::fork_held(&path, &argv)
            .map_err(|e| AttachError::io(format!("cannot start {program}"), e))?;
        Ok(HeldCommand {
            program: program.to_string(),
            pid: fork.pid,
            gate: Some(fork.gate.into()),
            exec_error: Some(fork.exec_error.into()),
            status: None,
        })
    }

    /// The child's pid.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// True once [`HeldCommand::release`] has let the child exec.
    pub(crate) fn released(&self) -> bool {
        self.gate.is_none()
    }

    /// Lets the child exec, and reports exec's failure.
    pub(crate) fn release(&mut self) -> Result<(), AttachError> {
        let cannot_run = |e| AttachError::io(format!("cannot run {}", self.program), e);
        if let Some(mut gate) = self.gate.take() {
            gate.write_all(&[1]).map_err(cannot_run)?;
        }
        if let Some(mut err) = self.exec_error.take() {
            // The write end closes at exec (CLOEXEC): end-of-file with
            // nothing read means exec worked.
            let mut errno = Vec::with_capacity(4);
            err.read_to_end(&mut errno).map_err(cannot_run)?;
            if let Ok(bytes) = <[u8; 4]>::try_from(errno.as_slice()) {
                return Err(cannot_run(std::io::Error::from_raw_os_error(
                    i32::from_ne_bytes(bytes),
                )));
            }
        }
        Ok(())
    }

    /// The exit status if the child has ended, reaping it (does not block).
    /// The exit status if it is known already (no system call).
    pub(crate) fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    pub(crate) fn try_wait(&mut self) -> Result<Option<ExitStatus>, AttachError> {
        if self.status.is_none() {
            self.status = sys::try_reap(self.pid)
                .map_err(|e| AttachError::io("waiting for the command", e))?;
        }
        Ok(self.status)
    }

    /// The exit status once the child has ended, waiting up to `grace`
    /// for it (checking every 10 ms); `None` if it still runs then.
    pub(crate) fn wait(&mut self, grace: Duration) -> Result<Option<ExitStatus>, AttachError> {
        let until = Instant::now() + grace;
        loop {
            let status = self.try_wait()?;
            if status.is_some() || Instant::now() >= until {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for HeldCommand {
    fn drop(&mut self) {
        // Unreleased, the child would exit on its own once the gate
        // closes; it is killed and reaped so no zombie is left. A
        // released child is left running on its own.
        if self.gate.take().is_some() && self.status.is_none() {
            self.status = sys::kill_and_reap(self.pid);
        }
    }
}

/// Where exec would find `program`: itself when it names a path (contains
/// a `/`), else the first executable regular file of that name in a
/// directory of `PATH` (an empty entry is the current directory; without
/// `PATH`, `/usr/local/bin:/usr/bin:/bin`). Errors:
/// [`AttachError::CommandNotFound`] when there is none,
/// [`AttachError::CommandNotExecutable`] when the file found is not executable.
pub(crate) fn find_program(program: &str) -> Result<PathBuf, AttachError> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    let not_found = |path: Option<String>| AttachError::CommandNotFound {
        program: program.to_string(),
        path,
    };
    let not_executable = |reason: String| AttachError::CommandNotExecutable {
        program: program.to_string(),
        reason,
    };
    if program.is_empty() {
        return Err(not_found(None));
    }
    if program.contains('/') {
        let path = PathBuf::from(program);
        return match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_found(None)),
            Err(e) => Err(AttachError::io(format!("cannot run {program}"), e)),
            Ok(_) if !executable(&path) => {
                Err(not_executable("not an executable regular file".into()))
            }
            Ok(_) => Ok(path),
        };
    }
    let search = std::env::var_os("PATH")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_string());
    let mut unusable = None;
    for dir in search.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = Path::new(dir).join(program);
        if executable(&candidate) {
            return Ok(candidate);
        }
        if unusable.is_none() && candidate.is_file() {
            unusable = Some(candidate);
        }
    }
    Err(match unusable {
        Some(p) => not_executable(format!(
            "{} is not executable, and no other {program} is in PATH ({search})",
            p.display()
        )),
        None => not_found(Some(search)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn programs_are_found_in_path_or_refused_by_name() {
        let sh = find_program("sh").unwrap();
        assert!(sh.is_absolute() || sh.starts_with("."), "{}", sh.display());
        assert_eq!(sh.file_name().and_then(|n| n.to_str()), Some("sh"));
        let e = find_program("kprobe-perf-no-such-command").unwrap_err();
        assert!(matches!(e, AttachError::CommandNotFound { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with(
                "command not found: kprobe-perf-no-such-command (in no directory of PATH="
            ),
            "{e}"
        );
        let e = find_program("./kprobe-perf-no-such-command").unwrap_err();
        assert_eq!(
            e.to_string(),
            "command not found: ./kprobe-perf-no-such-command (no such file)"
        );
        let e = find_program("/").unwrap_err();
        assert!(
            matches!(e, AttachError::CommandNotExecutable { .. }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "cannot run /: not an executable regular file"
        );
        assert_eq!(
            find_program("").unwrap_err().to_string(),
            "command not found: the command name is empty"
        );
    }

    #[test]
    fn a_held_command_runs_only_once_released_and_is_reaped() {
        let dir = std::env::temp_dir().join(format!("kprobe-perf-held-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            format!("touch {}; exit 7", dir.display()),
        ];
        let mut c = HeldCommand::spawn(&argv).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!dir.exists(), "ran before release");
        assert_eq!(c.try_wait().unwrap(), None);
        c.release().unwrap();
        let status = c.wait(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(status.code(), Some(7));
        assert!(dir.exists());
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_command_killed_by_a_signal_says_so() {
        let argv: Vec<String> = vec!["sh".into(), "-c".into(), "kill -TERM $$".into()];
        let mut c = HeldCommand::spawn(&argv).unwrap();
        c.release().unwrap();
        let status = c.wait(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert_eq!(status.to_string(), "signal: 15 (SIGTERM)");
    }

    #[test]
    fn an_unreleased_command_is_killed_and_reaped_on_drop() {
        let c = HeldCommand::spawn(&["true".to_string()]).unwrap();
        let pid = c.pid();
        drop(c);
        // Reaped: no such child any more.
        assert_eq!(
            sys::try_reap(pid).unwrap_err().raw_os_error(),
            Some(libc::ECHILD)
        );
    }
}
