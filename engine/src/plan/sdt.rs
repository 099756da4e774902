//! SDT (USDT) probes: `usdt:PATH:PROVIDER:NAME [ARGS]` becomes one uprobe
//! per matching site of the binary's `.note.stapsdt` notes, at the site's
//! file offset, with its semaphore as the reference counter, and each
//! `$argN` replaced by the Nth operand the note gives (`8@%rbx` a
//! register, `-4@112(%rsp)` memory), typed by the operand's size and
//! sign unless the argument says otherwise.

use kprobe_perf_arch::Arch;
use kprobe_perf_spec::{
    ArgType, BaseType, Deref, Fetch, FetchArg, FetchBase, Immediate, ProbeSpec, Target,
    UserLocation,
};
use kprobe_perf_symbols::elf::UserBinary;
use kprobe_perf_symbols::sdt::{SdtArg, SdtOperand, SdtProbe};

use crate::plan::PlanError;

/// The SDT probes of the binary at `path` whose provider and name match
/// the globs `provider` and `name`, in the order of the binary's notes.
pub(crate) fn matching_probes(
    path: &str,
    provider: &str,
    name: &str,
) -> Result<Vec<SdtProbe>, PlanError> {
    let bin =
        UserBinary::open(std::path::Path::new(path)).map_err(|e| PlanError::User(e.to_string()))?;
    matching_in(&bin, path, provider, name)
}

/// [`matching_probes`] of a binary already read.
fn matching_in(
    bin: &UserBinary,
    path: &str,
    provider: &str,
    name: &str,
) -> Result<Vec<SdtProbe>, PlanError> {
    let all = bin
        .sdt_probes()
        .map_err(|e| PlanError::User(e.to_string()))?;
    let matched: Vec<SdtProbe> = all
        .iter()
        .filter(|p| {
            kprobe_perf_symbols::glob_match(provider, &p.provider)
                && kprobe_perf_symbols::glob_match(name, &p.name)
        })
        .cloned()
        .collect();
    if matched.is_empty() {
        let have = if all.is_empty() {
            "it has no SDT notes (.note.stapsdt)".to_string()
        } else {
            let mut names: Vec<String> = all
                .iter()
                .map(|p| format!("{}:{}", p.provider, p.name))
                .collect();
            names.dedup();
            format!("it has {}", names.join(", "))
        };
        return Err(PlanError::User(format!(
            "usdt:{path}:{provider}:{name} matches no SDT probe of {path}: {have}"
        )));
    }
    Ok(matched)
}

/// The files process `pid` maps executable (`/proc/PID/maps`), each
/// once, in address order: where its SDT probes can be.
pub fn mapped_files(pid: u32) -> Result<Vec<String>, PlanError> {
    let path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&path).map_err(|e| {
        PlanError::User(format!(
            "cannot read {path}: {e} (is {pid} a running process this user may trace?)"
        ))
    })?;
    let mut out: Vec<String> = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let perms = f.nth(1).unwrap_or_default();
        let Some(file) = f.nth(3) else { continue };
        if perms.contains('x') && file.starts_with('/') && !out.iter().any(|o| o == file) {
            out.push(file.to_string());
        }
    }
    Ok(out)
}

/// True when a `list` pattern names a binary's SDT probes (see
/// [`listed`]) rather than kernel functions.
pub fn names_sdt(pattern: &str) -> bool {
    pattern.starts_with("usdt:") || pattern.starts_with('/')
}

/// The SDT probes a `list` pattern names: `usdt:PATH` or a bare `/PATH`
/// (every probe of the binary), or `usdt:PATH:PROVIDER:NAME` (globs);
/// `None` when `pattern` is none of these (a kernel glob).
pub fn listed(pattern: &str) -> Option<Result<Vec<SdtProbe>, PlanError>> {
    if !names_sdt(pattern) {
        return None;
    }
    let text = pattern.strip_prefix("usdt:").unwrap_or(pattern);
    if std::path::Path::new(text).is_file() {
        return Some(matching_probes(text, "*", "*"));
    }
    let mut parts = text.rsplitn(3, ':');
    Some(match (parts.next(), parts.next(), parts.next()) {
        (Some(name), Some(provider), Some(path)) => matching_probes(path, provider, name),
        _ => Err(PlanError::User(format!(
            "{pattern}: no such file; give a binary's path, or usdt:PATH:PROVIDER:NAME"
        ))),
    })
}

/// The uprobes `spec` stands for when it is an SDT probe (`None`
/// otherwise): one per matching site, each at its file offset (with
/// its semaphore as the reference counter), its `$argN` replaced by
/// the site's operands. With no arguments given, every operand is
/// fetched, as `arg1`..`argN`.
pub fn sites(spec: &ProbeSpec, arch: Arch) -> Result<Option<Vec<ProbeSpec>>, PlanError> {
    let Target::User {
        path,
        location: UserLocation::Sdt { provider, name },
    } = &spec.target
    else {
        return Ok(None);
    };
    if path == ANY_MAPPED_FILE {
        return Err(PlanError::User(format!(
            "{spec} stands for the files of the processes recorded, and none are named; name the processes, or the binary's path"
        )));
    }
    let bin =
        UserBinary::open(std::path::Path::new(path)).map_err(|e| PlanError::User(e.to_string()))?;
    let probes = matching_in(&bin, path, provider, name)?;
    sites_of(spec, path, &bin, &probes, arch).map(Some)
}

/// The uprobes of `spec` at `probes`, sites of the binary `bin` at `path`.
fn sites_of(
    spec: &ProbeSpec,
    path: &str,
    bin: &UserBinary,
    probes: &[SdtProbe],
    arch: Arch,
) -> Result<Vec<ProbeSpec>, PlanError> {
    let symbols = |name: &str| bin.symbol_address(name);
    probes
        .iter()
        .map(|p| site(spec, path, p, arch, &symbols))
        .collect()
}

/// The path of `usdt:*:PROVIDER:NAME`: every file the processes recorded
/// map.
const ANY_MAPPED_FILE: &str = "*";

/// The uprobes of an SDT probe (see [`sites`]); for
/// `usdt:*:PROVIDER:NAME`, over every file `processes` map (the program
/// and its libraries), those with matching probes.
pub(crate) fn sites_in(
    spec: &ProbeSpec,
    arch: Arch,
    processes: &[u32],
) -> Result<Vec<ProbeSpec>, PlanError> {
    let Target::User {
        path,
        location: UserLocation::Sdt { provider, name },
    } = &spec.target
    else {
        return Ok(vec![spec.clone()]);
    };
    if path != ANY_MAPPED_FILE || processes.is_empty() {
        return Ok(sites(spec, arch)?.unwrap_or_default());
    }
    let mut files: Vec<String> = Vec::new();
    for &pid in processes {
        for f in mapped_files(pid)? {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    let mut out = Vec::new();
    for file in &files {
        // Files without such probes (most libraries), or unreadable to
        // this process, are passed over.
        let Ok(bin) = UserBinary::open(std::path::Path::new(file)) else {
            continue;
        };
        let probes = match matching_in(&bin, file, provider, name) {
            Ok(p) => p,
            Err(_) => continue,
        };
        let one = ProbeSpec {
            target: Target::User {
                path: file.clone(),
                location: UserLocation::Sdt {
                    provider: provider.clone(),
                    name: name.clone(),
                },
            },
            ..spec.clone()
        };
        // A site whose arguments cannot be fetched is refused.
        out.extend(sites_of(&one, file, &bin, &probes, arch)?);
    }
    if out.is_empty() {
        return Err(PlanError::User(format!(
            "{spec} matches no SDT probe in the {} files the processes map ({})",
            files.len(),
            files.join(", ")
        )));
    }
    Ok(out)
}

/// Where a symbol of the binary is, as its virtual address (for operands
/// that name a global, `kpf_global(%rip)`).
type SymbolOffsets<'a> = dyn Fn(&str) -> Option<u64> + 'a;

/// One site of `spec` at `probe`.
fn site(
    spec: &ProbeSpec,
    path: &str,
    probe: &SdtProbe,
    arch: Arch,
    symbols: &SymbolOffsets<'_>,
) -> Result<ProbeSpec, PlanError> {
    let label = format!("{}:{} in {path}", probe.provider, probe.name);
    let location = match probe.semaphore_offset {
        Some(ref_ctr) => UserLocation::Counted {
            offset: probe.file_offset,
            ref_ctr,
        },
        None if probe.semaphore.is_some() => {
            return Err(PlanError::User(format!(
                "{label}: its semaphore at 0x{:x} lies in no loadable segment, so the kernel cannot count on it",
                probe.semaphore.unwrap_or_default()
            )))
        }
        None => UserLocation::Offset(probe.file_offset),
    };
    let args = if spec.args.is_empty() {
        (1..=probe.args.len())
            .map(|n| {
                let n = u32::try_from(n).unwrap_or(u32::MAX);
                bare_arg(n, None, probe, arch, &label, symbols)
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        spec.args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                substitute(a, probe, arch, &label, symbols).map_err(|e| marked(spec, i, e))
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok(ProbeSpec {
        event: Some(spec.event.clone().unwrap_or_else(|| sanitize(&probe.name))),
        target: Target::User {
            path: path.to_string(),
            location,
        },
        args,
        ..spec.clone()
    })
}

/// `e`, about argument `i` of `spec`, with the definition below it and a
/// caret under that argument.
fn marked(spec: &ProbeSpec, i: usize, e: PlanError) -> PlanError {
    let text = spec.to_string();
    let arg = spec.args[i].to_string();
    // Arguments follow the target in order, each after a space.
    let mut at = text.len()
        - spec
            .args
            .iter()
            .map(|a| a.to_string().len() + 1)
            .sum::<usize>();
    for a in &spec.args[..i] {
        at += a.to_string().len() + 1;
    }
    let at = at + 1;
    PlanError::User(format!(
        "{e}\n  {text}\n  {}{}",
        " ".repeat(at),
        "^".repeat(arg.len().max(1))
    ))
}

/// `$argN` of `probe` alone, named `argN` (or `name`).
fn bare_arg(
    n: u32,
    name: Option<String>,
    probe: &SdtProbe,
    arch: Arch,
    label: &str,
    symbols: &SymbolOffsets<'_>,
) -> Result<FetchArg, PlanError> {
    let op = operand(probe, n, label)?;
    Ok(FetchArg {
        name: Some(name.unwrap_or_else(|| format!("arg{n}"))),
        fetch: operand_fetch(op, probe, arch, label, symbols)?,
        ty: Some(operand_type(op)),
    })
}

/// `arg` with its `$argN` (as the base of any fetch) replaced by the
/// operand: typed by the operand when it is `$argN` alone and untyped.
fn substitute(
    arg: &FetchArg,
    probe: &SdtProbe,
    arch: Arch,
    label: &str,
    symbols: &SymbolOffsets<'_>,
) -> Result<FetchArg, PlanError> {
    let FetchBase::Arg(n) = arg.fetch.base else {
        return Ok(arg.clone());
    };
    if arg.fetch.derefs.is_empty() {
        let mut out = bare_arg(n, arg.name.clone(), probe, arch, label, symbols)?;
        if arg.ty.is_some() {
            out.ty = arg.ty;
        }
        return Ok(out);
    }
    let op = operand(probe, n, label)?;
    let mut fetch = operand_fetch(op, probe, arch, label, symbols)?;
    fetch.derefs.extend(arg.fetch.derefs.iter().copied());
    Ok(FetchArg {
        // The kernel would name it by its position, as before.
        name: arg.name.clone(),
        fetch,
        ty: arg.ty,
    })
}

/// Operand `n` (from 1) of `probe`.
fn operand<'p>(probe: &'p SdtProbe, n: u32, label: &str) -> Result<&'p SdtArg, PlanError> {
    usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| probe.args.get(i))
        .ok_or_else(|| {
            PlanError::User(match probe.args.len() {
                0 => format!("{label} has no arguments, so $arg{n} names nothing"),
                k => format!(
                    "$arg{n} is beyond the {k} argument{} of {label} ({}): use $arg1..$arg{k}",
                    if k == 1 { "" } else { "s" },
                    probe.args_text
                ),
            })
        })
}

/// Where the value of an operand is, as a fetch.
fn operand_fetch(
    op: &SdtArg,
    probe: &SdtProbe,
    arch: Arch,
    label: &str,
    symbols: &SymbolOffsets<'_>,
) -> Result<Fetch, PlanError> {
    let register = |r: &str| {
        arch.assembler_register(r)
            .map(|(reg, _)| reg.name.to_string())
            .ok_or_else(|| {
                PlanError::User(format!(
                    "{label}: the operand {op} names the register %{r}, which a {} probe cannot fetch",
                    arch.name()
                ))
            })
    };
    Ok(match &op.operand {
        SdtOperand::Register(r) => Fetch {
            base: FetchBase::Register(register(r)?),
            derefs: Vec::new(),
        },
        SdtOperand::Memory { base, .. } if base == "rip" => {
            return Err(PlanError::Unsupported {
                what: format!(
                    "the operand {op} of {label} (relative to the next instruction, whose address the note does not give)"
                ),
                instead: "fetch the registers of another operand instead".into(),
            })
        }
        SdtOperand::Symbol { name, offset } => {
            let address = symbols(name).ok_or_else(|| {
                PlanError::User(format!(
                    "{label}: the operand {op} names {name}, which is not in the binary's symbol tables (stripped?)"
                ))
            })?;
            // The kernel reads `@+X` at the probe's mapped address minus
            // its file offset, plus X (translate_user_vaddr): X is the
            // variable's distance from the probe, plus the probe's file
            // offset, whichever segment the variable is in.
            let x = address
                .wrapping_add_signed(*offset)
                .wrapping_sub(probe.address)
                .wrapping_add(probe.file_offset);
            Fetch {
                base: FetchBase::FileOffset(x),
                derefs: Vec::new(),
            }
        }
        SdtOperand::Memory { offset, base } => Fetch {
            base: FetchBase::Register(register(base)?),
            derefs: vec![Deref {
                offset: *offset,
                user: false,
            }],
        },
        SdtOperand::Immediate(v) => Fetch {
            base: FetchBase::Immediate(Immediate::Number(*v)),
            derefs: Vec::new(),
        },
        SdtOperand::Other(text) => {
            return Err(PlanError::Unsupported {
                what: format!("the operand {text} of {label} (an index register or a symbol)"),
                instead: "fetch the registers it uses instead".into(),
            })
        }
    })
}

/// The type an operand's size and sign give it (`-4@` is `s32`).
fn operand_type(op: &SdtArg) -> ArgType {
    let bits = op.size.saturating_mul(8);
    ArgType::scalar(if op.signed {
        BaseType::Signed(bits)
    } else {
        BaseType::Unsigned(bits)
    })
}

/// An event name from a probe's name (letters, digits and `_`).
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_symbols::sdt::parse_arg;

    fn probe(args: &str, semaphore: Option<u64>) -> SdtProbe {
        SdtProbe {
            provider: "python".into(),
            name: "function__entry".into(),
            address: 0x4f20a1,
            file_offset: 0xf20a1,
            semaphore: semaphore.map(|s| s + 0x401000),
            semaphore_offset: semaphore,
            args_text: args.into(),
            args: args.split_whitespace().map(parse_arg).collect(),
        }
    }

    fn one(text: &str, p: &SdtProbe) -> Result<String, PlanError> {
        let spec = ProbeSpec::parse(text, Arch::X86_64).unwrap();
        let symbols = |name: &str| (name == "kpf_global").then_some(0x4f3010);
        site(&spec, "/usr/bin/python3.11", p, Arch::X86_64, &symbols).map(|s| s.to_string())
    }

    #[test]
    fn operands_become_registers_and_memory_typed_by_their_size() {
        let p = probe("8@%rbp 8@%r12 -4@%eax -4@112(%rsp)", Some(0x683260));
        // No arguments: every operand, typed.
        assert_eq!(
            one("usdt:/usr/bin/python3.11:python:function__entry", &p).unwrap(),
            "p:function__entry /usr/bin/python3.11:0xf20a1(0x683260) arg1=%bp:u64 arg2=%r12:u64 arg3=%ax:s32 arg4=+112(%sp):s32"
        );
        // Composed with the language: a string through $arg1, a type given.
        assert_eq!(
            one(
                "usdt:/usr/bin/python3.11:python:function__entry f=+0($arg1):ustring $arg3 l=$arg3:x32",
                &p
            )
            .unwrap(),
            "p:function__entry /usr/bin/python3.11:0xf20a1(0x683260) f=+0(%bp):ustring arg3=%ax:s32 l=%ax:x32"
        );
        // The event name given is kept; no semaphore: no counter.
        let p = probe(
            "-8@%r12 2@$5 -8@kpf_global(%rip) 4@kpf_global+8(%rip)",
            None,
        );
        assert_eq!(
            one("p:ev usdt:/usr/bin/python3.11:python:gc__done", &p).unwrap(),
            "p:ev /usr/bin/python3.11:0xf20a1 arg1=%r12:s64 arg2=\\5:u16 arg3=@+0xf3010:s64 arg4=@+0xf3018:u32"
        );
        // A global the symbol tables do not have, and a bare %rip offset.
        let p = probe("-8@nowhere(%rip)", None);
        let e = one("usdt:/usr/bin/python3.11:python:gc__done", &p).unwrap_err();
        assert_eq!(e.to_string(), "python:function__entry in /usr/bin/python3.11: the operand -8@nowhere(%rip) names nowhere, which is not in the binary's symbol tables (stripped?)");
        let p = probe("4@16(%rip)", None);
        assert!(one("usdt:/usr/bin/python3.11:python:gc__done", &p).is_err());
    }

    #[test]
    fn arguments_past_the_operands_are_refused() {
        let p = probe("8@%rbp", Some(0x683260));
        let e = one(
            "usdt:/usr/bin/python3.11:python:function__entry $arg1 s=+0($arg2):string",
            &p,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("$arg2 is beyond the 1 argument of python:function__entry in /usr/bin/python3.11 (8@%rbp): use $arg1..$arg1\n  usdt:/usr/bin/python3.11:python:function__entry $arg1 s=+0($arg2):string\n  {}^^^^^^^^^^^^^^^^^^",
            " ".repeat(54))
        );
        let p = probe("8@8(%rax,%rbx,8)", None);
        let e = one("usdt:/usr/bin/python3.11:python:function__entry", &p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the operand 8(%rax,%rbx,8) of python:function__entry in /usr/bin/python3.11 (an index register or a symbol) is not supported yet; fetch the registers it uses instead"
        );
    }

    /// Globs over the notes of Debian's python3.11.
    #[test]
    fn globs_select_the_sites_of_a_real_binary() {
        if !std::path::Path::new("/usr/bin/python3.11").exists() {
            return;
        }
        let names = |p: &str, n: &str| -> Vec<String> {
            matching_probes("/usr/bin/python3.11", p, n)
                .unwrap()
                .into_iter()
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(names("python", "gc__*"), ["gc__done", "gc__start"]);
        assert_eq!(names("py*", "function__[er]*").len(), 2);
        let e = matching_probes("/usr/bin/python3.11", "python", "nope").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "usdt:/usr/bin/python3.11:python:nope matches no SDT probe of /usr/bin/python3.11: it has python:audit, python:gc__done"
            ),
            "{e}"
        );
    }
}
