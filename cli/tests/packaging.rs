//! What the packages ship besides the binary: man pages and completions
//! generated from the clap definitions (`kprobe-perf __generate`), and
//! the version line. Every flag `--help` shows must be in the man page of
//! its command, so a flag added later cannot be left out of the pages.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kprobe-perf");

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kprobe-perf {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A fresh directory under the system's temp dir.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kprobe-perf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The subcommands `kprobe-perf --help` lists (its `Commands:` section,
/// without `help`).
fn subcommands() -> Vec<String> {
    let help = run(&["--help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every `-x` and `--long` flag named on the option lines of a `--help`
/// text (lines indented by 2 to 6 spaces and starting with `-`: `  -e,
/// --event`, `      --json`; description lines are indented by 10).
fn help_flags(help: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in help.lines() {
        let rest = line.trim_start_matches(' ');
        let indent = line.len() - rest.len();
        if !(2..=6).contains(&indent) || !rest.starts_with('-') {
            continue;
        }
        let words = rest
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty());
        for word in words {
            let word = word.split(['=', '[', '<']).next().unwrap_or("");
            let is_short = word.len() == 2
                && word.starts_with('-')
                && word[1..].chars().all(|c| c.is_ascii_alphanumeric());
            let is_long = word.len() > 2
                && word.starts_with("--")
                && word[2..]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-');
            if is_short || is_long {
                flags.push(word.to_string());
            } else if !word.starts_with('-') {
                break; // the value name or the description
            }
        }
    }
    flags
}

/// Whether `flag` occurs in roff `page` as a whole word (`\-` unescaped,
/// font changes such as `\fB` dropped):
/// `--overwrite` is not found in `--overwrite-size`.
fn page_has_flag(page: &str, flag: &str) -> bool {
    let mut text = page.replace("\\-", "-");
    for font in ["\\fB", "\\fI", "\\fR", "\\fP"] {
        text = text.replace(font, " ");
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(flag).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + flag.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

fn generate(what: &str, dir: &Path) -> Vec<String> {
    let listed = run(&["__generate", what, dir.to_str().unwrap()]);
    listed.lines().map(str::to_string).collect()
}

#[test]
fn every_help_flag_is_in_the_man_page() {
    let dir = scratch("man");
    let written = generate("man", &dir);
    let subs = subcommands();
    assert!(
        subs.iter().any(|s| s == "record") && subs.iter().any(|s| s == "info"),
        "{subs:?}"
    );
    let mut expected: Vec<String> = vec!["kprobe-perf.1".into()];
    expected.extend(subs.iter().map(|s| format!("kprobe-perf-{s}.1")));
    let mut got: Vec<String> = written
        .iter()
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "one man page per command");

    let mut checked = 0;
    for (args, page) in std::iter::once((vec!["--help"], "kprobe-perf.1".to_string())).chain(
        subs.iter()
            .map(|s| (vec![s.as_str(), "--help"], format!("kprobe-perf-{s}.1"))),
    ) {
        let help = run(&args);
        let flags = help_flags(&help);
        assert!(
            flags.iter().any(|f| f == "--help") && flags.iter().any(|f| f == "-h"),
            "no -h/--help parsed from `kprobe-perf {}`: {flags:?}",
            args.join(" ")
        );
        let text = std::fs::read_to_string(dir.join(&page)).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
        for f in &flags {
            assert!(
                page_has_flag(&text, f),
                "{f} is in `kprobe-perf {}` but not in {page}",
                args.join(" ")
            );
            checked += 1;
        }
        println!("{page}: {} flags: {}", flags.len(), flags.join(" "));
    }
    // record alone has 20 or more flags; the count grows as flags are added.
    assert!(checked >= 30, "only {checked} flags checked");
    let record = std::fs::read_to_string(dir.join("kprobe-perf-record.1")).unwrap();
    assert!(record.contains(".TH kprobe-perf-record 1"), "{record}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_flag_matcher_wants_whole_words() {
    let page = r"\fB\-\-overwrite\-size\fR \fI<MIB>\fR";
    assert!(page_has_flag(page, "--overwrite-size"));
    assert!(!page_has_flag(page, "--overwrite"));
    assert_eq!(
        help_flags(
            "Options:\n  -e, --event <SPEC>\n          A probe -x definition\n      --json\n  -h, --help  Print help\n"
        ),
        ["-e", "--event", "--json", "-h", "--help"]
    );
}

#[test]
fn completions_for_three_shells() {
    let dir = scratch("completions");
    let mut written = generate("completions", &dir);
    written.sort();
    let names: Vec<String> = written
        .iter()
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        ["_kprobe-perf", "kprobe-perf.bash", "kprobe-perf.fish"]
    );
    let bash = std::fs::read_to_string(dir.join("kprobe-perf.bash")).unwrap();
    assert!(
        bash.lines()
            .any(|l| l.trim_start().starts_with("complete ") && l.ends_with(" kprobe-perf")),
        "{bash}"
    );
    let zsh = std::fs::read_to_string(dir.join("_kprobe-perf")).unwrap();
    assert!(zsh.starts_with("#compdef kprobe-perf"), "{zsh}");
    let fish = std::fs::read_to_string(dir.join("kprobe-perf.fish")).unwrap();
    for sub in subcommands() {
        assert!(
            fish.contains(&format!("-a \"{sub}\"")),
            "no {sub} in the fish completions"
        );
    }
    // Flags of record complete in each shell.
    for (shell, text) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish)] {
        assert!(
            text.contains("--overwrite-size") || text.contains("-l overwrite-size"),
            "{shell}: no --overwrite-size"
        );
    }
    // bash loads it and registers the completion for kprobe-perf.
    let registered = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p kprobe-perf",
            dir.join("kprobe-perf.bash").display()
        ))
        .output();
    match registered {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.trim_end().ends_with(" kprobe-perf"),
                "bash did not load the completions: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) => println!("note: the bash completions were not loaded: no bash ({e})"),
    }
    // The generator itself is no command anyone completes or reads about.
    for text in [&bash, &zsh, &fish] {
        assert!(!text.contains("__generate"));
    }
    assert!(!run(&["--help"]).contains("__generate"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn version_names_the_commit() {
    let v = run(&["--version"]);
    let v = v.trim();
    let rest = v
        .strip_prefix(&format!("kprobe-perf {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{v}"));
    match rest.strip_prefix("git ") {
        Some(c) => {
            let hash = c.strip_suffix("-dirty").unwrap_or(c);
            assert!(
                hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit()),
                "{v}"
            );
            // Built from this checkout: the commit is this checkout's HEAD.
            if let Ok(out) = Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
            {
                let head = String::from_utf8_lossy(&out.stdout);
                if out.status.success() {
                    assert!(head.starts_with(hash), "{v} but HEAD is {head}");
                }
            }
        }
        None => assert_eq!(rest, "commit unknown: not built from a git checkout"),
    }
}

#[test]
fn info_is_a_doctor() {
    let out = Command::new(BIN).arg("info").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let line = |what: &str| -> String {
        text.lines()
            .find(|l| {
                l.strip_prefix("  ")
                    .and_then(|l| l.split_once(' '))
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with(what))
            })
            .unwrap_or_else(|| panic!("no {what:?} check in:\n{text}"))
            .to_string()
    };
    let fix_after = |check: &str| -> Option<String> {
        let mut lines = text.lines();
        lines.find(|l| *l == check)?;
        lines
            .next()
            .and_then(|l| l.trim_start().strip_prefix("fix: "))
            .map(str::to_string)
    };
    for what in [
        "kprobe PMU:",
        "uprobe PMU:",
        "tracefs:",
        "fprobe events:",
        "BTF:",
        "kptr_restrict:",
        "perf_event_paranoid:",
        "lockdown:",
        "capabilities:",
    ] {
        let l = line(what);
        let ok = l.trim_start().starts_with("ok ");
        assert!(ok || l.trim_start().starts_with("missing "), "no mark: {l}");
        if !ok {
            assert!(fix_after(&l).is_some(), "{what} missing without a fix");
        }
    }
    // Today's content follows.
    assert!(text.lines().any(|l| l.starts_with("kallsyms: ")), "{text}");
    // This host's facts, where it is the development machine: no kprobe
    // PMU, the uprobe PMU present.
    let kprobe_pmu = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    let uprobe_pmu = Path::new("/sys/bus/event_source/devices/uprobe").exists();
    let k = line("kprobe PMU:");
    if kprobe_pmu {
        assert!(k.starts_with("  ok       kprobe PMU: "), "{k}");
    } else {
        assert!(
            k.starts_with("  missing  kprobe PMU: /sys/bus/event_source/devices/kprobe is absent"),
            "{k}"
        );
        assert_eq!(
            fix_after(&k).as_deref(),
            Some("run a kernel built with CONFIG_KPROBES=y and CONFIG_KPROBE_EVENTS=y (Linux 4.17 or later has this PMU)")
        );
    }
    let u = line("uprobe PMU:");
    if uprobe_pmu {
        let ty = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type").unwrap();
        assert_eq!(
            u,
            format!(
                "  ok       uprobe PMU: /sys/bus/event_source/devices/uprobe (type {})",
                ty.trim()
            )
        );
    } else {
        assert!(u.starts_with("  missing  uprobe PMU: "), "{u}");
    }
    if std::env::var_os("KPROBE_PERF_IN_VM").is_none() && !kprobe_pmu && uprobe_pmu {
        println!("the development host: kprobe PMU missing with its fix, uprobe PMU ok");
    }
}
