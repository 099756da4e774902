//! The README's examples as tests: every ```console block of README.md is
//! preceded by `<!-- example: KERNEL [shape] -->`, and each `# COMMAND`
//! line in it is run on that kernel (tests/tests/readme.rs) and its output
//! compared with the lines the README shows under it. The same runner
//! runs the commands of docs/from-perf.md's tables ([`table_commands`]),
//! each of which must succeed.
//!
//! The comparison is line by line, with whitespace runs collapsed:
//! - a line that is exactly `...` stands for any number of lines;
//! - what varies from run to run is masked on both sides: the
//!   `comm-PID [CPU] TIME:` head of an event line, kernel and user
//!   addresses (`0x` and 9 or more hex digits) and decimal fractions
//!   (times, durations, averages);
//! - a `shape` block also masks every integer and the bars of a
//!   histogram: for output whose counts depend on the run (latency
//!   histograms, system-wide counts), only the shape of each line is
//!   checked.

/// One command of the README and what it should print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// The kernel the block names (`6.1`, `6.12`, `arm64-6.1`).
    pub kernel: String,
    /// Whether only the shape of the lines is compared.
    pub shape: bool,
    /// The command's line number in the README (1-based).
    pub line: usize,
    /// The command, as given to `sh -c`.
    pub command: String,
    /// The lines the README shows under it.
    pub expected: Vec<String>,
    /// The block it belongs to (its opening fence's line), so that the
    /// commands of one block share a directory.
    pub block: usize,
}

/// A console block without a marker, or a marker without a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmarked {
    /// Its line in the README (1-based).
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// The examples of `readme`, in order, or the blocks that cannot be
/// tested (a console block without a marker names no kernel).
pub fn examples(readme: &str) -> Result<Vec<Example>, Vec<Unmarked>> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut bad = Vec::new();
    let mut marker: Option<(usize, String, bool)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        if let Some(rest) = line
            .strip_prefix("<!-- example:")
            .and_then(|r| r.strip_suffix("-->"))
        {
            let mut words = rest.split_whitespace();
            let kernel = words.next().unwrap_or_default().to_string();
            let shape = words.any(|w| w == "shape");
            if kernel.is_empty() {
                bad.push(Unmarked {
                    line: i + 1,
                    why: "the marker names no kernel".into(),
                });
            }
            marker = Some((i + 1, kernel, shape));
            i += 1;
            continue;
        }
        if line.starts_with("```") {
            let console = line == "```console";
            let fence = i + 1;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_end().starts_with("```") {
                body.push((i + 1, lines[i].trim_end()));
                i += 1;
            }
            i += 1; // the closing fence
            let taken = marker.take();
            if !console {
                if let Some((at, _, _)) = taken {
                    bad.push(Unmarked {
                        line: at,
                        why: "the marker is not followed by a ```console block".into(),
                    });
                }
                continue;
            }
            let Some((_, kernel, shape)) = taken else {
                bad.push(Unmarked {
                    line: fence,
                    why: "a ```console block without `<!-- example: KERNEL -->` before it".into(),
                });
                continue;
            };
            out.extend(commands_of(&body, &kernel, shape, fence));
            continue;
        }
        if !line.trim().is_empty() {
            // A marker applies to the block right after it.
            if let Some((at, _, _)) = marker.take() {
                bad.push(Unmarked {
                    line: at,
                    why: "the marker is not followed by a ```console block".into(),
                });
            }
        }
        i += 1;
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(bad)
    }
}

fn commands_of(body: &[(usize, &str)], kernel: &str, shape: bool, block: usize) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    for &(n, text) in body {
        if let Some(command) = text.strip_prefix("# ") {
            out.push(Example {
                kernel: kernel.to_string(),
                shape,
                line: n,
                command: command.to_string(),
                expected: Vec::new(),
                block,
            });
        } else if let Some(last) = out.last_mut() {
            last.expected.push(text.to_string());
        }
    }
    for e in &mut out {
        while e.expected.last().is_some_and(|l| l.trim().is_empty()) {
            e.expected.pop();
        }
    }
    out
}

/// A command of a table of the docs (docs/from-perf.md): the last cell
/// of a row, when it is one `code span`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCommand {
    /// Its line in the file (1-based).
    pub line: usize,
    /// The `## ` heading the table is under.
    pub heading: String,
    /// The row's first cell (the task).
    pub task: String,
    /// The command, as given to `sh -c` (`\|` made `|`).
    pub command: String,
}

/// The commands of the four-column tables of `doc`: the last column's,
/// where it is one code span (a `—` cell has none).
pub fn table_commands(doc: &str) -> Vec<TableCommand> {
    let mut heading = String::new();
    let mut out = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        if let Some(h) = line.strip_prefix("## ") {
            heading = h.to_string();
            continue;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        let [task, _, _, last] = cells[..] else {
            continue;
        };
        let Some(command) = last
            .trim_end_matches(" |")
            .strip_prefix('`')
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        out.push(TableCommand {
            line: n + 1,
            heading: heading.clone(),
            task: task.trim_start_matches("| ").to_string(),
            command: command.replace("\\|", "|"),
        });
    }
    out
}

/// A line with what varies by run masked (see the module's doc).
pub fn normalize(line: &str, shape: bool) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    mask_event_head(&mut words);
    let joined = words.join(" ");
    let mut out = mask_numbers(&joined, shape);
    if shape {
        out = mask_bars(&out);
    }
    out
}

/// `cat-162 [000] 16.928522: ...` -> `cat-PID [CPU] TIME: ...`.
fn mask_event_head(words: &mut [String]) {
    if words.len() < 3 {
        return;
    }
    let cpu = &words[1];
    let is_cpu = cpu.len() > 2
        && cpu.starts_with('[')
        && cpu.ends_with(']')
        && cpu[1..cpu.len() - 1].bytes().all(|b| b.is_ascii_digit());
    let time = words[2].strip_suffix(':').unwrap_or("");
    let is_time = !time.is_empty() && time.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let Some((comm, pid)) = words[0].rsplit_once('-') else {
        return;
    };
    if !is_cpu || !is_time || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return;
    }
    words[0] = format!("{comm}-PID");
    words[1] = "[CPU]".into();
    words[2] = "TIME:".into();
}

/// Addresses (`0x` and 9+ hex digits) -> `0xADDR`; decimal fractions ->
/// `N.N`; with `shape`, every other integer -> `N`.
fn mask_numbers(s: &str, shape: bool) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let prev_word = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i] == b'0' && b.get(i + 1) == Some(&b'x') && !prev_word {
            let digits = b[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_hexdigit())
                .count();
            if digits >= 9 {
                out.push_str("0xADDR");
                i += 2 + digits;
                continue;
            }
            if shape && digits > 0 {
                out.push('N');
                i += 2 + digits;
                continue;
            }
        }
        if b[i].is_ascii_digit() && !prev_word {
            let int = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            let after = i + int;
            let frac = if b.get(after) == Some(&b'.') {
                b[after + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count()
            } else {
                0
            };
            if frac > 0 {
                out.push_str("N.N");
                i = after + 1 + frac;
                continue;
            }
            if shape {
                // Thousands separators belong to the number.
                let mut j = after;
                while b.get(j) == Some(&b',')
                    && b.get(j + 1..j + 4)
                        .is_some_and(|d| d.len() == 3 && d.iter().all(|c| c.is_ascii_digit()))
                {
                    j += 4;
                }
                out.push('N');
                i = j;
                continue;
            }
            out.push_str(&s[i..after]);
            i = after;
            continue;
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// `|@@@@     |` -> `|BAR|`: a histogram's bar, whatever its length.
fn mask_bars(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find('|') {
        let after = &rest[start + 1..];
        match after.find('|') {
            Some(end) if after[..end].chars().all(|c| c == '@' || c == ' ') => {
                out.push_str(&rest[..start]);
                out.push_str("|BAR|");
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(&rest[..=start]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `actual` is what `expected` shows (`...` lines match any
/// number of lines). On a mismatch, says which expected line was not
/// found and shows both sides.
pub fn compare(expected: &[String], actual: &str, shape: bool) -> Result<(), String> {
    let want: Vec<Option<String>> = expected
        .iter()
        .map(|l| (l.trim() != "...").then(|| normalize(l, shape)))
        .collect();
    let mut got: Vec<String> = actual.lines().map(|l| normalize(l, shape)).collect();
    while got.last().is_some_and(|l| l.is_empty()) {
        got.pop();
    }
    if glob_lines(&want, &got) {
        return Ok(());
    }
    // The first expected line that cannot be placed, for the message.
    let mut first_bad = None;
    for k in 1..=want.len() {
        let mut prefix = want[..k].to_vec();
        prefix.push(None);
        if !glob_lines(&prefix, &got) {
            first_bad = Some(k - 1);
            break;
        }
    }
    let what = match first_bad {
        Some(k) => format!("README line {} of the example is not in the output", k + 1),
        None => "the output has lines the README does not show (add `...`?)".into(),
    };
    Err(format!(
        "{what}\n--- README (masked) ---\n{}\n--- output (masked) ---\n{}",
        want.iter()
            .map(|w| w.as_deref().unwrap_or("..."))
            .collect::<Vec<_>>()
            .join("\n"),
        got.join("\n")
    ))
}

/// Line glob: `None` matches any run of lines.
fn glob_lines(want: &[Option<String>], got: &[String]) -> bool {
    // can[i][j]: want[i..] matches got[j..].
    let (n, m) = (want.len(), got.len());
    let mut can = vec![vec![false; m + 1]; n + 1];
    can[n][m] = true;
    for i in (0..n).rev() {
        for j in (0..=m).rev() {
            can[i][j] = match &want[i] {
                None => can[i + 1][j] || (j < m && can[i][j + 1]),
                Some(w) => j < m && *w == got[j] && can[i + 1][j + 1],
            };
        }
    }
    can[0][0]
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "\
# Title

<!-- example: 6.1 -->
```console
# kprobe-perf record -e p:x -- cat /etc/hostname
             cat-162     [000] 16.928522: p_x_0: (x+0x0/0xe0) dfd=-100
...
kprobe-perf: 6 events (p_x_0: 6), 0 lost

# cat f.folded
cat;x 3
```

```sh
cargo xtask demo
```

<!-- example: arm64-6.1 shape -->
```console
# kprobe-perf stat -a -d 1 -e p:x
count probe
   12 p_x_0
```
";

    #[test]
    fn commands_and_their_lines_are_read_with_the_kernel_named() {
        let ex = examples(README).unwrap();
        assert_eq!(ex.len(), 3);
        assert_eq!(ex[0].kernel, "6.1");
        assert!(!ex[0].shape);
        assert_eq!(ex[0].line, 5);
        assert_eq!(
            ex[0].command,
            "kprobe-perf record -e p:x -- cat /etc/hostname"
        );
        assert_eq!(ex[0].expected.len(), 3);
        assert_eq!(ex[1].command, "cat f.folded");
        assert_eq!(ex[1].expected, vec!["cat;x 3".to_string()]);
        assert_eq!(ex[0].block, ex[1].block);
        assert_eq!(ex[2].kernel, "arm64-6.1");
        assert!(ex[2].shape);
        assert_eq!(ex[2].expected.len(), 2);
    }

    #[test]
    fn a_console_block_without_a_kernel_is_refused() {
        let bad = examples("text\n```console\n# kprobe-perf info\n```\n").unwrap_err();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].line, 2);
        let bad = examples("<!-- example: 6.1 -->\nsome text\n").unwrap_err();
        assert_eq!(bad[0].line, 1);
    }

    #[test]
    fn what_varies_is_masked_and_values_are_kept() {
        let a = normalize(
            "             cat-162     [000] 16.928522: p_x_0: (x+0x0/0xe0) dfd=-100 sp=0xffff800008473b80",
            false,
        );
        assert_eq!(
            a,
            "cat-PID [CPU] TIME: p_x_0: (x+0x0/0xe0) dfd=-100 sp=0xADDR"
        );
        let b = normalize(
            "kworker/0:1-7 [001] 3.5: p_x_0: (x+0x0/0xe0) dfd=-100 sp=0xffff12345",
            false,
        );
        assert_eq!(
            b,
            "kworker/0:1-PID [CPU] TIME: p_x_0: (x+0x0/0xe0) dfd=-100 sp=0xADDR"
        );
        assert_eq!(
            normalize("kprobe-perf: counted for 1.449 s", false),
            "kprobe-perf: counted for N.N s"
        );
        // Values that do not vary stay, names with digits too.
        assert_eq!(
            normalize("ret=-2 p_vfs_read_0: 37", false),
            "ret=-2 p_vfs_read_0: 37"
        );
        assert_eq!(
            normalize("[512, 1K)    12 |@@@@@@@@@@      |", true),
            "[N, NK) N |BAR|"
        );
        assert_eq!(normalize("total 1,234,567 x64", true), "total N x64");
    }

    #[test]
    fn a_tables_last_cell_is_its_command() {
        let doc = "# T\n\n## Programs\n\n| Task | perf | bpftrace | kprobe-perf |\n|---|---|---|---|\n\
            | Count | `perf stat` | — | `kprobe-perf stat -e 'p:./prog:walk' \\| cat` |\n\
            | Nothing | `perf x` | — | — |\n\n## Kernel\n\n| Trace | a | b | `kprobe-perf record -a` |\n";
        let t = table_commands(doc);
        assert_eq!(
            t,
            [
                TableCommand {
                    line: 7,
                    heading: "Programs".into(),
                    task: "Count".into(),
                    command: "kprobe-perf stat -e 'p:./prog:walk' | cat".into(),
                },
                TableCommand {
                    line: 12,
                    heading: "Kernel".into(),
                    task: "Trace".into(),
                    command: "kprobe-perf record -a".into(),
                },
            ]
        );
    }

    #[test]
    fn dots_match_any_lines_and_a_missing_line_is_named() {
        let want: Vec<String> = ["a 1", "...", "z 2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(compare(&want, "a 1\nz 2\n", false).is_ok());
        assert!(compare(&want, "a 1\nb\nc\nz 2\n\n", false).is_ok());
        let e = compare(&want, "a 1\nb\nz 3\n", false).unwrap_err();
        assert!(e.starts_with("README line 3 of the example"), "{e}");
        let e = compare(&want[..1], "a 1\nb\n", false).unwrap_err();
        assert!(e.starts_with("the output has lines"), "{e}");
        // Shape mode lets counts differ, not words.
        let want = vec!["x: 3 events".to_string()];
        assert!(compare(&want, "x: 5 events", true).is_ok());
        assert!(compare(&want, "x: 5 events", false).is_err());
        assert!(compare(&want, "y: 5 events", true).is_err());
    }
}
