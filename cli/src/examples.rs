//! The example lines every command's help ends with (clap's
//! `after_help`), which the man pages print as their EXAMPLES section.
//! Each probe definition in them is checked by the grammar (the tests
//! below), so that an example never shows what `probe --parse` refuses.

/// `kprobe-perf --help`: the probe language's forms, then commands.
pub(crate) const TOP: &str = "\
Probe definitions:
  'p:/usr/bin/bash:readline'                      uprobe: a function of a binary (./prog, or a name on PATH)
  'r:/usr/bin/bash:readline line=+0($retval):ustring'
                                                  return uprobe with the returned string
  'usdt:/usr/bin/python3:python:function__entry'  USDT (SDT) probe of a binary
  'p:do_sys_openat2 dfd=%di'                      kprobe with a register
  'r:do_sys_openat2 ret=$retval'                  kretprobe with the return value
  'p:myprobe do_sys_open+5 %si:u32'               named kprobe at an offset

Examples:
  kprobe-perf record -e 'p:/usr/bin/bash:readline' -p PID
  kprobe-perf latency /usr/bin/python3:PyObject_GetAttr -- python3 -c 'import json'
  kprobe-perf stat -e 'usdt:/usr/bin/python3:python:function__entry' -- python3 -c 'import json'
  kprobe-perf probe -x ./prog -V walk";

/// `record --help`.
pub(crate) const RECORD: &str = "\
Examples:
  kprobe-perf record -e 'p:/lib/x86_64-linux-gnu/libc.so.6:fopen64 path=+0($arg1):ustring' -- ./prog
  kprobe-perf record -e 'r:./prog:walk ret=$retval' -e 'p:./prog:walk n=$arg1' -- ./prog
  kprobe-perf record -e 'usdt:/usr/bin/python3:python:function__entry file=+0($arg1):ustring' -p PID
  kprobe-perf record -g -o perf.data -e 'p:/lib/x86_64-linux-gnu/libc.so.6:malloc size=$arg1' -- ls
  kprobe-perf record -a -d 5 -e 'p:do_sys_openat2 path=+0(%si):string'
  kprobe-perf record -a -q -z -o run.data -e 'p:/usr/bin/bash:readline'";

/// `latency --help`.
pub(crate) const LATENCY: &str = "\
Examples:
  kprobe-perf latency ./prog:walk -- ./prog
  kprobe-perf latency --unit us --by ret /lib/x86_64-linux-gnu/libc.so.6:fopen64 -p PID
  kprobe-perf latency -d 10 vfs_read";

/// `calls --help`.
pub(crate) const CALLS: &str = "\
Examples:
  kprobe-perf calls -e do_sys_openat2 --allow do_filp_open --allow path_openat --allow lookup_fast -- cat /nonexistent
  kprobe-perf calls --graph --min 1ms -e vfs_read --allow 'ext4_*' -a -d 10
  kprobe-perf calls --json --timeline open.json -e do_sys_openat2 --allow 'getname*' -p PID";

/// `stat --help`.
pub(crate) const STAT: &str = "\
Examples:
  kprobe-perf stat -e 'p:/lib/x86_64-linux-gnu/libc.so.6:malloc' -e 'p:/lib/x86_64-linux-gnu/libc.so.6:free' -- ls
  kprobe-perf stat -I 1000 -e 'usdt:/usr/bin/python3:python:function__entry' -p PID";

/// `cleanup --help`.
pub(crate) const CLEANUP: &str = "\
Examples:
  kprobe-perf cleanup";

/// `script --help`.
pub(crate) const SCRIPT: &str = "\
Examples:
  kprobe-perf script -i perf.data
  kprobe-perf script -i perf.data --json
  kprobe-perf script -i perf.data --flamegraph stacks.svg";

/// `probe --help`.
pub(crate) const PROBE: &str = "\
Examples:
  kprobe-perf probe --parse 'p:/opt/app/prog:walk n=$arg1' 'r:do_sys_openat2 ret=$retval'
  kprobe-perf probe -x ./prog -V walk
  kprobe-perf probe -x ./prog -L walk
  kprobe-perf probe -x ./prog -D 'walk:4 total i'
  kprobe-perf probe --lines do_sys_openat2";

/// `boot --help`.
pub(crate) const BOOT: &str = "\
Examples:
  kprobe-perf boot 'p:kpboot/execve kernel_execve file=+0($arg1):string'
  kprobe-perf boot --collect --json
  kprobe-perf boot --collect -o boot.data && kprobe-perf script -i boot.data";

/// `list --help`.
pub(crate) const LIST: &str = "\
Examples:
  kprobe-perf list usdt:/usr/bin/python3
  kprobe-perf list -p PID 'python:*'
  kprobe-perf list 'tcp_v4_*'";

/// `info --help`.
pub(crate) const INFO: &str = "\
Examples:
  kprobe-perf info";

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::{spec::Definition, Arch};

    /// The words of `line`, as a shell splits them; a quoted word is
    /// marked true.
    fn words(line: &str) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        let mut quoted = false;
        for part in line.split('\'') {
            if quoted {
                out.push((part.to_string(), true));
            } else {
                out.extend(part.split_whitespace().map(|w| (w.to_string(), false)));
            }
            quoted = !quoted;
        }
        out
    }

    /// The probe definitions of `text`: the word after each `-e`, the
    /// words after `--parse`, and the first word of a line that starts
    /// with one (the top help's list of forms).
    fn definitions(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for line in text.lines() {
            let words = words(line);
            if line.starts_with("  '") {
                out.extend(words.first().map(|w| w.0.clone()));
            }
            let mut parse = false;
            for pair in words.windows(2) {
                let [(before, _), (word, quoted)] = pair else {
                    continue;
                };
                parse = (parse && *quoted) || before == "--parse";
                if *quoted && (before == "-e" || parse) {
                    out.push(word.clone());
                }
            }
        }
        out
    }

    const ALL: [&str; 9] = [
        TOP, RECORD, LATENCY, STAT, CLEANUP, SCRIPT, PROBE, LIST, INFO,
    ];

    #[test]
    fn every_definition_shown_parses() {
        let defs: Vec<String> = ALL.iter().flat_map(|t| definitions(t)).collect();
        assert!(defs.len() >= 16, "{defs:?}");
        for d in defs {
            // `record` makes ./prog absolute before the grammar sees it
            // (binaries.rs); `probe --parse` takes no relative path.
            let d = d.replace(":./prog:", ":/prog:");
            if let Err(e) = Definition::parse(&d, Arch::X86_64) {
                panic!("{d}: {e}");
            }
        }
    }

    /// The tool speaks of uprobes and USDT as of kprobes: the top help's
    /// first line, and what `record -e` takes.
    #[test]
    fn help_names_uprobes_and_usdt() {
        let mut cli = <crate::Cli as clap::CommandFactory>::command();
        let top = cli.render_help().to_string();
        assert_eq!(
            top.lines().next(),
            Some("Dynamic probes of the kernel and of programs (kprobes, uprobes, USDT) through perf_event_open")
        );
        let record = cli
            .find_subcommand_mut("record")
            .unwrap()
            .render_long_help()
            .to_string();
        for form in [
            "p:BINARY:FUNC [ARGS]",
            "usdt:BINARY:PROVIDER:NAME",
            "uprobe:",
            "./prog",
        ] {
            assert!(record.contains(form), "{form}");
        }
    }

    /// Each command's help ends with at least one example of that very
    /// command, and nothing else after the heading.
    #[test]
    fn every_command_shows_examples() {
        let mut cli = <crate::Cli as clap::CommandFactory>::command();
        cli.build();
        let top = cli.render_help().to_string();
        assert!(top.contains("\nExamples:\n  kprobe-perf record "), "{top}");
        for sub in cli.get_subcommands_mut().filter(|s| s.get_name() != "help") {
            let name = sub.get_name().to_string();
            let help = sub.render_help().to_string();
            let (_, examples) = help
                .split_once("\nExamples:\n")
                .unwrap_or_else(|| panic!("{name} has no examples:\n{help}"));
            let lines: Vec<&str> = examples.lines().collect();
            assert!(!lines.is_empty(), "{name}");
            let own = format!("  kprobe-perf {name}");
            for l in lines {
                assert!(l.starts_with(&own), "{name}: {l}");
            }
        }
    }
}
