//! What `cargo xtask test` prints while it runs, and the logs it keeps.
//!
//! The suite runs libtest with `--show-output` so that the skip lines of
//! passing tests reach the counts. Shown as they come, the captured output
//! of several hundred passing tests buries the one that failed; so the
//! console gets a digest (each test's verdict, every skip line, every
//! failure in full), the whole output goes to a log file under
//! `target/xtask-test/`, and the summary ends with the failures again.

use std::path::PathBuf;

/// Cargo's per-crate progress lines, which the console does without.
const PROGRESS: &[&str] = &[
    "Compiling ",
    "Checking ",
    "Downloaded ",
    "Downloading ",
    "Fresh ",
    "Documenting ",
];

/// Decides line by line what the console shows of a libtest run printed
/// under `--show-output`.
#[derive(Debug, Default)]
pub(crate) struct Digest {
    /// Inside libtest's `successes:` block (the captured output of passing
    /// tests), which ends at `failures:` or `test result:`.
    in_successes: bool,
    /// Lines kept from the console (they are in the log).
    pub(crate) hidden: u64,
}

impl Digest {
    /// Whether the console shows `line`.
    pub(crate) fn show(&mut self, line: &str) -> bool {
        let shown = self.decide(line);
        if !shown {
            self.hidden += 1;
        }
        shown
    }

    fn decide(&mut self, line: &str) -> bool {
        if line.starts_with(' ') && PROGRESS.iter().any(|p| line.trim_start().starts_with(p)) {
            return false;
        }
        if line == "successes:" {
            self.in_successes = true;
            return false;
        }
        if line == "failures:" || line.starts_with("test result:") {
            self.in_successes = false;
            return true;
        }
        if self.in_successes {
            // A passing test's skip line is a verdict: shown.
            return line.starts_with("SKIP ");
        }
        true
    }
}

/// The failing tests of a libtest output and the first lines each printed:
/// `NAME: line; line; ...`, for the summary.
pub(crate) fn failures(output: &str) -> Vec<String> {
    const LINES: usize = 6;
    let mut found = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    let mut in_failures = false;
    let flush = |cur: &mut Option<(String, Vec<String>)>, found: &mut Vec<String>| {
        if let Some((name, lines)) = cur.take() {
            found.push(format!("{name}: {}", lines.join(" | ")));
        }
    };
    for line in output.lines() {
        if line == "failures:" {
            in_failures = true;
            continue;
        }
        if line.starts_with("test result:") || line == "successes:" {
            flush(&mut current, &mut found);
            in_failures = false;
            continue;
        }
        if !in_failures {
            continue;
        }
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|r| r.strip_suffix(" stdout ----"))
        {
            flush(&mut current, &mut found);
            current = Some((name.to_string(), Vec::new()));
            continue;
        }
        // The list of names after the blocks ends the last block.
        if line.starts_with("    ") && !line.trim().contains(' ') && current.is_some() {
            flush(&mut current, &mut found);
            continue;
        }
        if let Some((_, lines)) = current.as_mut() {
            let t = line.trim();
            if !t.is_empty() && lines.len() < LINES && !t.starts_with("note: run with") {
                lines.push(t.to_string());
            }
        }
    }
    flush(&mut current, &mut found);
    found
}

/// Where the whole output of one step goes: `target/xtask-test/NAME.log`.
pub(crate) fn log_path(name: &str) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    crate::workspace_root()
        .join("target")
        .join("xtask-test")
        .join(format!("{safe}.log"))
}

/// Writes a step's whole output to its log, and says where; a log that
/// cannot be written is said once and does not stop the run.
pub(crate) fn save(name: &str, text: &str) -> Option<PathBuf> {
    let path = log_path(name);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, text));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            eprintln!("xtask: cannot write {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
running 3 tests
test a ... ok
test b ... ok
test c ... FAILED

successes:

---- a stdout ----
kprobe-perf: cannot read /no/such: No such file or directory (os error 2)
SKIP a: no kprobe PMU

successes:
    a
    b

failures:

---- c stdout ----
thread 'c' panicked at tests/c.rs:10:5:
assertion `left == right` failed
  left: 3
 right: 4
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

failures:
    c

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
";

    #[test]
    fn the_console_shows_verdicts_skips_and_failures_not_passing_output() {
        let mut d = Digest::default();
        let shown: Vec<&str> = RUN.lines().filter(|l| d.show(l)).collect();
        assert_eq!(
            shown,
            [
                "running 3 tests",
                "test a ... ok",
                "test b ... ok",
                "test c ... FAILED",
                "",
                "SKIP a: no kprobe PMU",
                "failures:",
                "",
                "---- c stdout ----",
                "thread 'c' panicked at tests/c.rs:10:5:",
                "assertion `left == right` failed",
                "  left: 3",
                " right: 4",
                "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
                "",
                "failures:",
                "    c",
                "",
                "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
            ]
        );
        assert_eq!(d.hidden, 9);
    }

    #[test]
    fn cargo_progress_is_hidden_its_errors_are_not() {
        let mut d = Digest::default();
        assert!(!d.show("   Compiling quick-error v1.2.3"));
        assert!(!d.show("    Checking xtask v0.1.0 (/ci/xtask)"));
        assert!(d.show("error[E0425]: cannot find value `x` in this scope"));
        assert!(d.show("    Finished `dev` profile [unoptimized + debuginfo] target(s) in 1.0s"));
    }

    #[test]
    fn failures_name_the_test_and_its_first_lines() {
        assert_eq!(
            failures(RUN),
            ["c: thread 'c' panicked at tests/c.rs:10:5: | assertion `left == right` failed | left: 3 | right: 4"]
        );
        assert!(failures("test result: ok. 1 passed; 0 failed").is_empty());
    }
}
