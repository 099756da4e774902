//! A uprobe checked on its binary's own bytes while it is planned: the
//! uprobe rules of [`FunctionLayout`] (the kernel's, and those it does not
//! check but should), and the file offset the uprobe PMU takes.

use kprobe_perf_arch::boundary::{
    FunctionLayout, FunctionText, ProbeSite, RefuseReason, Rules, Verdict,
};
use kprobe_perf_arch::Arch;

use crate::plan::PlanError;

/// Largest user function decoded for a uprobe check.
const MAX_USER_FUNCTION_BYTES: u64 = 16 << 20;

/// Checks a uprobe at `location` of the binary at `path` on the binary's
/// own bytes, before anything is opened, and returns the file offset the
/// uprobe PMU takes, with the reference counter's (`PATH:OFFS(CTR)`).
/// `BINARY:SYM+OFF` is always checked; `BINARY:0xOFFSET` when a function with a size in the symbol tables holds it (else only
/// its place in the file, and alignment on arm64). A file this process
/// cannot read is left to the kernel for the offset form.
pub(crate) fn check_uprobe(
    path: &str,
    location: &kprobe_perf_spec::UserLocation,
    kind: ProbeSite,
    arch: Arch,
) -> Result<(u64, Option<u64>), PlanError> {
    use kprobe_perf_spec::UserLocation;
    use kprobe_perf_symbols::elf::{ElfError, UserBinary};
    let user_err = |e: ElfError| PlanError::User(e.to_string());
    let file = std::path::Path::new(path);
    match location {
        UserLocation::Symbol { name, offset } => {
            let bin = UserBinary::open(file).map_err(user_err)?;
            let sym = bin.function(name).map_err(user_err)?;
            check_user_offset(&bin, &sym, *offset, kind, arch, &format!("{name}+{offset}"))?;
            Ok((sym.file_offset.saturating_add(*offset), None))
        }
        UserLocation::Sdt { provider, name } => Err(PlanError::User(format!(
            "usdt:{path}:{provider}:{name} was not resolved to its sites before planning (an internal error)"
        ))),
        UserLocation::Counted { offset, ref_ctr } => {
            let at = check_offset(path, *offset, kind, arch)?;
            Ok((at, Some(*ref_ctr)))
        }
        UserLocation::Offset(o) => Ok((check_offset(path, *o, kind, arch)?, None)),
    }
}

/// Checks the uprobe at file offset `o` of `path` (see [`check_uprobe`]).
fn check_offset(path: &str, o: u64, kind: ProbeSite, arch: Arch) -> Result<u64, PlanError> {
    use kprobe_perf_symbols::elf::{ElfError, UserBinary};
    let bin = match UserBinary::open(std::path::Path::new(path)) {
        Ok(b) => b,
        // Unreadable by us only (permissions): the kernel, which opens it
        // with its own rights, decides. Anything else (no such file, a
        // device or FIFO, an I/O error) is refused.
        Err(ElfError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            return Ok(o)
        }
        Err(e) => return Err(PlanError::User(e.to_string())),
    };
    let label = format!("{path}:0x{o:x}");
    if o >= bin.len() {
        return Err(PlanError::Preflight {
            probe: label,
            reason: format!(
                "is beyond the end of the file ({} bytes; the kernel would answer EINVAL)",
                bin.len()
            ),
        });
    }
    match bin.function_at(o) {
        Ok(Some(sym)) => {
            let rel = o - sym.file_offset;
            let label = format!("{label} ({}+{rel})", sym.name);
            check_user_offset(&bin, &sym, rel, kind, arch, &label)?;
        }
        _ if arch == Arch::Aarch64 && !o.is_multiple_of(4) => {
            return Err(PlanError::Preflight {
                probe: label,
                reason: "is not 4-byte aligned (arm64 instructions are 4 bytes; the kernel would answer EINVAL)".into(),
            })
        }
        _ => {}
    }
    Ok(o)
}

/// Refuses `offset` into `sym` unless the uprobe rules accept it.
fn check_user_offset(
    bin: &kprobe_perf_symbols::elf::UserBinary,
    sym: &kprobe_perf_symbols::elf::UserSymbol,
    offset: u64,
    kind: ProbeSite,
    arch: Arch,
    label: &str,
) -> Result<(), PlanError> {
    if sym.size == 0 {
        // No size known: nothing to decode against.
        return Ok(());
    }
    let bytes = bin.bytes(sym, MAX_USER_FUNCTION_BYTES);
    let text = FunctionText {
        start: sym.address,
        bytes,
    };
    let layout = FunctionLayout::with_rules(arch, &text, Rules::Uprobe);
    let path = bin.path().display();
    let v = layout.verdict(offset, kind);
    let said = v.describe("").to_string();
    let why = said.split_once(' ').map_or(said.as_str(), |(_, w)| w);
    let reason = match &v {
        Verdict::Accept { .. } | Verdict::AcceptFtraceSite { .. } => return Ok(()),
        Verdict::OutsideFunction { size, .. } => {
            let last = layout.nearest_valid(offset).before;
            let nearby = last.map(|l| format!("; valid nearby: +{l}")).unwrap_or_default();
            format!(
                "is past the end of {} ({size} bytes){nearby} (a probe there would land in whatever follows the function in {path})",
                sym.name
            )
        }
        Verdict::Refuse(r) => match &r.reason {
            RefuseReason::InsideInstruction { .. } => format!(
                "{why} (the kernel does not check this: its int3 would land inside an instruction, corrupting it in every process that maps {path})"
            ),
            RefuseReason::UprobeUndecodable { at } if *at != offset => format!(
                "{why} (in {path})"
            ),
            RefuseReason::UprobeInstruction { rule, .. } if !rule.kernel_refuses() => format!(
                "{why} (the kernel accepts it, and the program would compute wrong results; bytes from {path})"
            ),
            RefuseReason::NotFunctionEntry { .. } => format!(
                "{why} (the kernel does not check this: a uretprobe elsewhere would overwrite whatever is on top of the stack with its trampoline's address)"
            ),
            _ => format!("{why} (the kernel would answer {}; bytes from {path})", r.errno()),
        },
        _ => return Ok(()),
    };
    Err(PlanError::Preflight {
        probe: label.to_string(),
        reason,
    })
}
