//! The frames of a sample's callchain (`PERF_SAMPLE_CALLCHAIN`) once its
//! context markers are read. Naming them is [`crate::stack`]'s, above.

/// Frames of a chain at or above this value are context markers
/// (`PERF_CONTEXT_MAX` is -4095).
pub(crate) const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// `PERF_CONTEXT_KERNEL`: kernel frames follow.
pub(crate) const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// `PERF_CONTEXT_USER`: user frames follow.
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// One frame of a callchain, innermost first: a return address (the
/// first frame of each part is the sampled ip itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct StackFrame {
    /// The address.
    pub address: u64,
    /// A user-space frame (else a kernel frame).
    pub user: bool,
}

/// Appends the frames of a raw `PERF_SAMPLE_CALLCHAIN` array to `out`:
/// context markers say whether the frames after them are kernel or user
/// frames and are not frames themselves; frames of other contexts
/// (hypervisor, guest) are left out.
pub(crate) fn push_frames(ips: impl Iterator<Item = u64>, out: &mut Vec<StackFrame>) {
    // Before any marker: the kernel puts one first, so this is only a
    // guess for made-up chains.
    let mut context = Some(false);
    for ip in ips {
        if ip >= PERF_CONTEXT_MAX {
            context = match ip {
                PERF_CONTEXT_KERNEL => Some(false),
                PERF_CONTEXT_USER => Some(true),
                _ => None,
            };
            continue;
        }
        if let Some(user) = context {
            out.push(StackFrame { address: ip, user });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_set_the_context_and_are_not_frames() {
        let mut out = Vec::new();
        let chain = [
            PERF_CONTEXT_KERNEL,
            0xffff_ffff_8100_0001,
            0xffff_ffff_8100_0002,
            PERF_CONTEXT_USER,
            0x5555_0000_1000,
            (-32i64) as u64, // PERF_CONTEXT_HV: its frames are left out
            0x1234,
        ];
        push_frames(chain.into_iter(), &mut out);
        assert_eq!(
            out,
            vec![
                StackFrame {
                    address: 0xffff_ffff_8100_0001,
                    user: false
                },
                StackFrame {
                    address: 0xffff_ffff_8100_0002,
                    user: false
                },
                StackFrame {
                    address: 0x5555_0000_1000,
                    user: true
                },
            ]
        );
    }
}
