//! What a traced function returns and takes, from the running kernel's
//! BTF (`/sys/kernel/btf/vmlinux`, read once per process).

use kprobe_perf_symbols::prototypes::{KernelBtf, Shape};

use super::builder::TracedFunction;
use super::tree::ReturnKind;

/// The return kind of a BTF shape.
fn return_kind(shape: Shape) -> ReturnKind {
    match shape {
        Shape::Int { size, signed } | Shape::Enum { size, signed } => ReturnKind::Integer {
            size: u8::try_from(size).unwrap_or(8),
            signed,
        },
        Shape::Pointer => ReturnKind::Pointer,
        Shape::Void => ReturnKind::Void,
        _ => ReturnKind::Unknown,
    }
}

impl TracedFunction {
    /// `name` as the running kernel's BTF declares it: its return type
    /// and its parameters' names. A function BTF does not know (a
    /// compiler clone such as `foo.isra.0`, a kernel without BTF) gets
    /// [`ReturnKind::Unknown`] (its returns are never errors) and no
    /// parameter names.
    pub fn from_kernel_btf(name: &str, root: bool) -> TracedFunction {
        let proto = KernelBtf::running_kernel().and_then(|btf| btf.function(name));
        let mut f = TracedFunction::new(name, ReturnKind::Unknown, root);
        if let Ok(p) = proto {
            f.returns = return_kind(p.ret.shape);
            f.params = p.params.into_iter().map(|p| p.name).collect();
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_become_return_kinds() {
        assert_eq!(
            return_kind(Shape::Int {
                size: 4,
                signed: true
            }),
            ReturnKind::Integer {
                size: 4,
                signed: true
            }
        );
        assert_eq!(return_kind(Shape::Pointer), ReturnKind::Pointer);
        assert_eq!(return_kind(Shape::Void), ReturnKind::Void);
        assert_eq!(return_kind(Shape::Float { size: 8 }), ReturnKind::Unknown);
    }
}
