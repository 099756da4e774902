//! Kprobe events on the kernel command line (`kprobe_event=`), as
//! Documentation/trace/kprobetrace.rst ("Kernel Boot Parameter") and
//! kernel/trace/trace_kprobe.c define them:
//!
//! - `set_kprobe_boot_events` copies the value into
//!   `kprobe_boot_events_buf[COMMAND_LINE_SIZE]` (strscpy: a second
//!   `kprobe_event=` replaces the first, so every probe goes in one);
//! - `setup_boot_kprobe_events` (run from `init_kprobe_trace`, an
//!   fs_initcall) turns every `,` into a space, splits at `;` and hands
//!   each piece to `create_or_delete_trace_kprobe`, the parser of
//!   `kprobe_events`: kprobes and kretprobes only, no uprobes, fprobes
//!   or event probes;
//! - `enable_boot_kprobe_events` then enables every kprobe event in the
//!   top-level tracing instance.
//!
//! The command line itself is at most `COMMAND_LINE_SIZE - 1` bytes
//! (2048 on x86_64, arch/x86/include/asm/setup.h, and on arm64,
//! arch/arm64/include/uapi/asm/setup.h), and `parse_args`
//! (kernel/params.c, `next_arg`) ends a value at a space and treats a
//! `"` as a quote. A definition whose words hold a `,`, a `;` or a `"`
//! cannot be written there.

use crate::parse::SpecError;
use crate::{ProbeSpec, Span, Target};

/// The kernel's `COMMAND_LINE_SIZE` on x86_64 and arm64 (with the NUL).
pub const COMMAND_LINE_SIZE: usize = 2048;

/// The parameter that defines kprobe events at boot.
pub const KPROBE_EVENT: &str = "kprobe_event=";

/// The `kprobe_event=` parameter defining `probes` (each in its canonical
/// form), or the first refusal, with a caret under the word the kernel
/// could not take. `budget` is how many bytes of the command line the
/// parameter may use (the other parameters and their spaces taken out of
/// `COMMAND_LINE_SIZE - 1`).
pub fn kprobe_event_param(probes: &[ProbeSpec], budget: usize) -> Result<String, SpecError> {
    let mut param = KPROBE_EVENT.to_string();
    let mut names = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let text = p.to_string();
        check_kind(p, &text)?;
        let name = format!("{}/{}", p.group_name(), p.event_name());
        if names.contains(&name) {
            return Err(SpecError {
                span: Span {
                    start: 0,
                    len: text.find(' ').unwrap_or(text.len()),
                },
                message: format!("an earlier probe is already named {name}, and the kernel refuses a second event of that name (EEXIST): name this one (p:GROUP/EVENT)"),
                input: text,
            });
        }
        names.push(name);
        let words = encode_words(&text)?;
        if i > 0 {
            param.push(';');
        }
        param.push_str(&words);
        if param.len() > budget {
            return Err(SpecError {
                span: Span {
                    start: 0,
                    len: text.len(),
                },
                message: format!(
                    "the kernel's command line holds {} bytes (COMMAND_LINE_SIZE {COMMAND_LINE_SIZE}, less its NUL), and with this probe kprobe_event= needs {} of the {budget} left to it: define fewer probes at boot, or shorter ones (name fewer arguments, shorter event names)",
                    COMMAND_LINE_SIZE - 1,
                    param.len()
                ),
                input: text,
            });
        }
    }
    Ok(param)
}

/// Kprobes and kretprobes only: what `create_or_delete_trace_kprobe`
/// parses.
fn check_kind(p: &ProbeSpec, text: &str) -> Result<(), SpecError> {
    let what = match &p.target {
        Target::Symbol { .. } | Target::Address(_) => return Ok(()),
        Target::User { .. } => "a uprobe",
        Target::Fprobe { .. } => "an fprobe event",
        Target::Tracepoint { .. } => "a tracepoint probe",
    };
    let start = text.find(' ').map_or(0, |i| i + 1);
    let len = text[start..].find(' ').unwrap_or(text.len() - start);
    Err(SpecError {
        input: text.to_string(),
        span: Span { start, len },
        message: format!(
            "this is {what}, and kprobe_event= defines kprobe events only (the kernel parses it as kprobe_events, in create_or_delete_trace_kprobe): give a kernel function (p:/r: SYM or MOD:SYM)"
        ),
    })
}

/// The definition's words joined by `,`, or a refusal of the first word
/// holding a character the command line cannot carry.
fn encode_words(text: &str) -> Result<String, SpecError> {
    let refusal = |at: usize, why: &str| SpecError {
        input: text.to_string(),
        span: Span { start: at, len: 1 },
        message: why.to_string(),
    };
    for (at, c) in text.char_indices() {
        let why = match c {
            ',' => "the kernel turns every ',' of kprobe_event= into a space (setup_boot_kprobe_events), so this word would be split: write it without a comma",
            ';' => "the kernel ends a definition at each ';' of kprobe_event= (setup_boot_kprobe_events): write this word without a semicolon",
            '"' => "the kernel's command line takes '\"' as a quote (parse_args), so the value would change: write this word without a double quote",
            c if c.is_whitespace() && c != ' ' => "the kernel's command line ends a value at any white space (parse_args): write this definition with single spaces between its words",
            _ => continue,
        };
        return Err(refusal(at, why));
    }
    Ok(text
        .split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(","))
}

/// The definitions a `kprobe_event=` value holds, as the kernel reads
/// them: split at `;`, each `,` a space; empty pieces left out.
pub fn kprobe_event_definitions(value: &str) -> Vec<String> {
    value
        .split(';')
        .map(|d| d.replace(',', " ").trim().to_string())
        .filter(|d| !d.is_empty())
        .collect()
}

/// The value of the last `kprobe_event=` of a command line (the one the
/// kernel keeps), as `parse_args` reads it: words split at spaces
/// outside double quotes, the quotes removed.
pub fn kprobe_event_of_cmdline(cmdline: &str) -> Option<String> {
    let mut last = None;
    for word in cmdline_words(cmdline) {
        if let Some(v) = word.strip_prefix(KPROBE_EVENT) {
            last = Some(v.to_string());
        }
    }
    last
}

/// The command line's words, as `next_arg` splits them (a `"` toggles
/// quoting and is dropped).
fn cmdline_words(cmdline: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in cmdline.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_arch::Arch;

    fn spec(s: &str) -> ProbeSpec {
        ProbeSpec::parse(s, Arch::X86_64).unwrap()
    }

    #[test]
    fn words_are_joined_by_commas_and_probes_by_semicolons() {
        let p = [
            spec("p:myprobe do_sys_open dfd=%ax filename=%dx"),
            spec("r:myret do_sys_open ret=$retval:s64"),
        ];
        let param = kprobe_event_param(&p, COMMAND_LINE_SIZE - 1).unwrap();
        assert_eq!(
            param,
            "kprobe_event=p:myprobe,do_sys_open,dfd=%ax,filename=%dx;r:myret,do_sys_open,ret=$retval:s64"
        );
        let value = kprobe_event_of_cmdline(&format!("console=ttyS0 {param} quiet")).unwrap();
        assert_eq!(
            kprobe_event_definitions(&value),
            [
                "p:myprobe do_sys_open dfd=%ax filename=%dx",
                "r:myret do_sys_open ret=$retval:s64"
            ]
        );
    }

    #[test]
    fn the_last_kprobe_event_wins_and_quotes_are_removed() {
        let line = "kprobe_event=p:a,f1 x \"kprobe_event=p:b,f2\" y";
        assert_eq!(kprobe_event_of_cmdline(line).as_deref(), Some("p:b,f2"));
        assert_eq!(kprobe_event_of_cmdline("quiet"), None);
    }

    #[test]
    fn a_second_event_of_one_name_is_refused() {
        let p = [spec("p:a vfs_read"), spec("p:kprobes/a vfs_write")];
        let e = kprobe_event_param(&p, 2047).unwrap_err();
        assert!(
            e.message.contains("already named kprobes/a"),
            "{}",
            e.message
        );
        assert_eq!((e.span.start, e.span.len), (0, "p:kprobes/a".len()));
    }

    #[test]
    fn a_uprobe_is_refused_under_its_target() {
        let e = kprobe_event_param(&[spec("p:u /bin/sh:main")], 2047).unwrap_err();
        assert_eq!(e.input, "p:u /bin/sh:main");
        assert_eq!((e.span.start, e.span.len), (4, 12));
        assert!(e.message.starts_with("this is a uprobe"), "{}", e.message);
    }

    #[test]
    fn a_string_immediate_is_refused_at_its_quote() {
        let e = kprobe_event_param(&[spec(r#"p:a vfs_read s=\"x,y""#)], 2047).unwrap_err();
        let shown = e.to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].contains("as a quote (parse_args)"), "{shown}");
        assert_eq!(lines[2].find('^'), lines[1].find('"'), "{shown}");
        assert_eq!(lines[2].matches('^').count(), 1, "{shown}");
    }

    #[test]
    fn the_command_line_size_is_enforced_at_the_probe_that_crosses_it() {
        let p: Vec<ProbeSpec> = (0..60)
            .map(|i| spec(&format!("p:probe_number_{i:02} vfs_read a=%di b=%si c=%dx")))
            .collect();
        let budget = COMMAND_LINE_SIZE - 1 - 40;
        let e = kprobe_event_param(&p, budget).unwrap_err();
        assert!(
            e.message.contains("COMMAND_LINE_SIZE 2048"),
            "{}",
            e.message
        );
        // 13 bytes of `kprobe_event=`, then 44 per probe and a `;`
        // between them: 44 fit in 2007 (13 + 44 * 45 - 1 = 1992), the
        // 45th (probe_number_44) crosses it.
        assert_eq!(e.input, "p:probe_number_44 vfs_read a=%di b=%si c=%dx");
        assert_eq!((e.span.start, e.span.len), (0, e.input.len()));
        assert_eq!(kprobe_event_param(&p[..44], budget).unwrap().len(), 1992);
    }
}
