//! Group-qualified event names (`GROUP:EVENT`), as perf names the events
//! `perf probe` defines and as `probe --parse` prints kprobe-perf's own,
//! made into the definition of the probe they name, where that is clear:
//!
//! | name | the probe |
//! |---|---|
//! | `probe:FUNC` | `p:probe/FUNC FUNC` (perf probe's kprobe on FUNC) |
//! | `probe:FUNC__return` | `r:probe/FUNC__return FUNC` |
//! | `probe_BIN:FUNC` | `p:probe_BIN/FUNC PATH:FUNC`, PATH the binary `perf probe -x BIN` takes: a library's short name (`probe_libc`), a name on PATH, a file of the current directory |
//! | `sdt_PROVIDER:NAME` | with `-- CMD`: `usdt:*:PROVIDER:NAME` (the command's binary) |
//! | `kprobes:p_FUNC_OFF` | `p:FUNC+OFF` (`r_` for `r:`) |
//! | `fprobes:FUNC__entry` | `f:FUNC` (`__exit` for `f:FUNC%return`) |
//!
//! The rest of the definition (its arguments) is kept. What a name
//! cannot say (the binary of `uprobes:p_sh_main_0`, the provider's binary
//! of an `sdt_` name without a command) is refused with the form to
//! write.

use crate::binaries::{caret, Lookup};

/// `text` with its head, a `GROUP:EVENT` name, made into the definition
/// it names, and a note saying so; `None` when the head is no such name.
pub(crate) fn definition(
    text: &str,
    command: &[String],
    look: &dyn Lookup,
) -> Result<Option<(String, String)>, String> {
    let head = text.split_ascii_whitespace().next().unwrap_or_default();
    let rest = &text[text.find(head).unwrap_or(0) + head.len()..];
    let Some((group, event)) = head.split_once(':') else {
        return Ok(None);
    };
    if !simple(event) {
        return Ok(None);
    }
    let refuse = |form: String, why: &str| {
        Err(caret(
            text,
            0,
            head.len(),
            &format!("{head} is {why}; write {form}"),
        ))
    };
    let meant = match group {
        "probe" => Some(kernel_function(group, event)),
        "kprobes" => own_kprobe(event),
        "fprobes" => own_fprobe(event),
        "uprobes" => {
            return refuse(
                "p:PATH:FUNC (r: for a return), PATH the binary's path".into(),
                "a name kprobe-perf gives a uprobe, which says neither the binary's path nor \
                 where the function's name ends",
            )
        }
        _ => None,
    };
    let meant = match (meant, group.strip_prefix("sdt_").filter(|p| simple(p))) {
        (Some(m), _) => m,
        (None, Some(provider)) if !command.is_empty() => format!("usdt:*:{provider}:{event}"),
        (None, Some(provider)) => {
            return refuse(
                format!("usdt:BINARY:{provider}:{event}, BINARY the binary's path (or usdt:*:{provider}:{event} with -- CMD)"),
                "the name perf gives an SDT event, which does not say the binary",
            )
        }
        (None, None) => match group.strip_prefix("probe_").filter(|b| simple(b)) {
            Some(binary) => match binary_of(binary, look) {
                Some(path) => user_function(group, &path, event),
                None => {
                    return refuse(
                        format!("p:PATH:{event}, PATH the {binary} binary's path"),
                        &format!(
                            "perf's name of a uprobe in the binary {binary}, and no library, \
                             program on PATH or file of the current directory is {binary}"
                        ),
                    )
                }
            },
            None => return Ok(None),
        },
    };
    let note = format!("{head} is {meant}");
    Ok(Some((format!("{meant}{rest}"), note)))
}

fn simple(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// perf probe's `probe:FUNC` / `probe:FUNC__return`.
fn kernel_function(group: &str, event: &str) -> String {
    match event.strip_suffix("__return") {
        Some(func) => format!("r:{group}/{event} {func}"),
        None => format!("p:{group}/{event} {event}"),
    }
}

/// perf probe's `probe_BIN:FUNC` / `probe_BIN:FUNC__return` in `path`.
fn user_function(group: &str, path: &str, event: &str) -> String {
    match event.strip_suffix("__return") {
        Some(func) => format!("r:{group}/{event} {path}:{func}"),
        None => format!("p:{group}/{event} {path}:{event}"),
    }
}

/// kprobe-perf's (the kernel's) `kprobes:p_FUNC_OFF`, `r_FUNC_OFF`.
fn own_kprobe(event: &str) -> Option<String> {
    let (kind, rest) = event.split_once('_')?;
    if kind != "p" && kind != "r" {
        return None;
    }
    let (func, off) = rest.rsplit_once('_')?;
    if func.is_empty() || !off.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(match off {
        "0" => format!("{kind}:{func}"),
        _ => format!("{kind}:{func}+{off}"),
    })
}

/// kprobe-perf's `fprobes:FUNC__entry`, `fprobes:FUNC__exit`.
fn own_fprobe(event: &str) -> Option<String> {
    if let Some(func) = event.strip_suffix("__entry") {
        return Some(format!("f:{func}"));
    }
    event
        .strip_suffix("__exit")
        .map(|func| format!("f:{func}%return"))
}

/// The file `perf probe -x BIN` named, for the group `probe_BIN`.
fn binary_of(binary: &str, look: &dyn Lookup) -> Option<String> {
    look.library(binary)
        .map(|l| l.path)
        .or_else(|| look.on_path(binary))
        .or_else(|| look.real_path(&format!("./{binary}")).ok())
        .map(|p| p.to_string_lossy().into_owned())
}
