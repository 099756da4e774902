//! Function prototypes from the kernel's BTF (`/sys/kernel/btf/vmlinux`):
//! parameter names, their C types, and the shape a probe needs to fetch
//! and print them (size, signedness, pointer). Read with btf-rs; loaded
//! only when a probe names an argument.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use btf_rs::{Btf, BtfType, Type};

/// Where the running kernel exposes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Errors from BTF lookups.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BtfError {
    /// The kernel has no BTF (CONFIG_DEBUG_INFO_BTF off), or it is unreadable.
    #[error("{path}: {reason}; argument names need the kernel's BTF (CONFIG_DEBUG_INFO_BTF): name arguments with $argN instead, as in dfd=$arg1")]
    Unavailable {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: String,
    },
    /// The function is not in BTF.
    #[error("{name} has no prototype in the kernel's BTF{}", clone_hint(.name))]
    NoFunction {
        /// The function.
        name: String,
    },
    /// The BTF data is malformed.
    #[error("the kernel's BTF cannot be read for {name}: {reason}")]
    Malformed {
        /// The function being looked up.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

fn clone_hint(name: &str) -> String {
    match name.split_once('.') {
        Some((base, _)) if !base.is_empty() => format!(
            " (it is a compiler clone of {base}, whose calling convention may differ from {base}'s: fetch its registers, e.g. %di, instead of names)"
        ),
        _ => "; name arguments with $argN instead, as in dfd=$arg1".into(),
    }
}

/// What a value looks like to a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An integer of `size` bytes (char and bool included).
    Int {
        /// Size in bytes.
        size: usize,
        /// Signed or not.
        signed: bool,
    },
    /// An enum of `size` bytes.
    Enum {
        /// Size in bytes.
        size: usize,
        /// Signed or not.
        signed: bool,
    },
    /// A pointer (or a function pointer).
    Pointer,
    /// A floating-point number of `size` bytes.
    Float {
        /// Size in bytes.
        size: usize,
    },
    /// A struct or union passed by value.
    Aggregate {
        /// Size in bytes.
        size: usize,
    },
    /// `void` (a return type).
    Void,
}

/// One parameter (or the return value) of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The name (empty for the return value, or an unnamed parameter).
    pub name: String,
    /// The C type as written, e.g. `const char *` or `umode_t`.
    pub c_type: String,
    /// What it resolves to.
    pub shape: Shape,
}

/// A function's prototype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prototype {
    /// The function.
    pub name: String,
    /// Parameters in order.
    pub params: Vec<Param>,
    /// The return type (name empty).
    pub ret: Param,
    /// True when the function takes `...`.
    pub variadic: bool,
}

impl Prototype {
    /// The 1-based position (`$argN`) of the parameter called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.params
            .iter()
            .position(|p| p.name == name)
            .map(|i| i + 1)
    }
}

/// A loaded BTF object.
pub struct KernelBtf {
    btf: Btf,
    path: PathBuf,
}

impl std::fmt::Debug for KernelBtf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelBtf")
            .field("path", &self.path)
            .finish()
    }
}

/// How deep typedef/const/pointer chains are followed.
const MAX_CHAIN: usize = 32;

impl KernelBtf {
    /// Loads the running kernel's BTF.
    pub fn load() -> Result<Self, BtfError> {
        Self::load_from(Path::new(VMLINUX_BTF))
    }

    /// Loads a BTF file (raw BTF, as under /sys/kernel/btf).
    pub fn load_from(path: &Path) -> Result<Self, BtfError> {
        let unavailable = |reason: String| BtfError::Unavailable {
            path: path.to_path_buf(),
            reason,
        };
        // Mapping avoids parsing all ~150k types up front; sysfs files
        // that cannot be mapped (kernels before 6.16) are read and parsed.
        let btf = match Btf::from_file_with_backend(path, btf_rs::Backend::Mmap) {
            Ok(b) => b,
            Err(_) => {
                let bytes = std::fs::read(path).map_err(|e| unavailable(e.to_string()))?;
                Btf::from_bytes(&bytes).map_err(|e| unavailable(e.to_string()))?
            }
        };
        Ok(KernelBtf {
            btf,
            path: path.to_path_buf(),
        })
    }

    /// The running kernel's BTF, loaded on first use and kept.
    pub fn running_kernel() -> Result<&'static KernelBtf, BtfError> {
        static BTF: OnceLock<Result<KernelBtf, BtfError>> = OnceLock::new();
        BTF.get_or_init(KernelBtf::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The prototype of function `name`.
    pub fn function(&self, name: &str) -> Result<Prototype, BtfError> {
        let malformed = |e: btf_rs::Error| BtfError::Malformed {
            name: name.to_string(),
            reason: e.to_string(),
        };
        let found = self.btf.resolve_types_by_name(name).unwrap_or_default();
        let func = found
            .iter()
            .find_map(|t| match t {
                Type::Func(f) => Some(f),
                _ => None,
            })
            .ok_or_else(|| BtfError::NoFunction {
                name: name.to_string(),
            })?;
        let Type::FuncProto(proto) = self.btf.resolve_chained_type(func).map_err(malformed)? else {
            return Err(BtfError::Malformed {
                name: name.to_string(),
                reason: "its BTF type is not a function prototype".into(),
            });
        };
        let mut params = Vec::new();
        let mut variadic = false;
        for p in &proto.parameters {
            if p.is_variadic() {
                variadic = true;
                continue;
            }
            let pname = self.btf.resolve_name(p).unwrap_or_default();
            let (c_type, shape) = self
                .describe(p.get_type_id().unwrap_or(0))
                .map_err(malformed)?;
            params.push(Param {
                name: pname,
                c_type,
                shape,
            });
        }
        let (c_type, shape) = self.describe(proto.return_type_id()).map_err(malformed)?;
        Ok(Prototype {
            name: name.to_string(),
            params,
            ret: Param {
                name: String::new(),
                c_type,
                shape,
            },
            variadic,
        })
    }

    /// The C spelling and the shape of type `id`.
    fn describe(&self, id: u32) -> Result<(String, Shape), btf_rs::Error> {
        if id == 0 {
            return Ok(("void".into(), Shape::Void));
        }
        let mut t = self.btf.resolve_type_by_id(id)?;
        let mut spelled: Option<String> = None;
        let mut qualifiers = String::new();
        for _ in 0..MAX_CHAIN {
            let next = match &t {
                Type::Typedef(td) => {
                    if spelled.is_none() {
                        spelled = Some(format!("{qualifiers}{}", self.btf.resolve_name(td)?));
                    }
                    self.btf.resolve_chained_type(td)?
                }
                Type::Const(c) => {
                    qualifiers.push_str("const ");
                    self.btf.resolve_chained_type(c)?
                }
                Type::Volatile(v) => {
                    qualifiers.push_str("volatile ");
                    self.btf.resolve_chained_type(v)?
                }
                Type::Restrict(r) => self.btf.resolve_chained_type(r)?,
                Type::TypeTag(tt) => self.btf.resolve_chained_type(tt)?,
                _ => break,
            };
            t = next;
        }
        let (base, shape) = match &t {
            Type::Void => ("void".to_string(), Shape::Void),
            Type::Int(i) => (
                self.btf.resolve_name(i)?,
                Shape::Int {
                    size: i.size(),
                    signed: i.is_signed(),
                },
            ),
            Type::Enum(e) => (
                format!("enum {}", self.btf.resolve_name(e)?),
                Shape::Enum {
                    size: e.size(),
                    signed: e.is_signed(),
                },
            ),
            Type::Enum64(e) => (
                format!("enum {}", self.btf.resolve_name(e)?),
                Shape::Enum {
                    size: e.size(),
                    signed: e.is_signed(),
                },
            ),
            Type::Float(f) => (self.btf.resolve_name(f)?, Shape::Float { size: f.size() }),
            Type::Struct(s) => (
                format!("struct {}", self.btf.resolve_name(s)?),
                Shape::Aggregate { size: s.size() },
            ),
            Type::Union(u) => (
                format!("union {}", self.btf.resolve_name(u)?),
                Shape::Aggregate { size: u.size() },
            ),
            Type::Ptr(p) => {
                let pointee = p.get_type_id().unwrap_or(0);
                let inner = self.spell_pointee(pointee)?;
                (format!("{inner} *"), Shape::Pointer)
            }
            other => (other.name().to_string(), Shape::Pointer),
        };
        let c_type = spelled.unwrap_or_else(|| format!("{qualifiers}{base}"));
        Ok((c_type, shape))
    }

    /// How a pointer's target is spelled (`const char`, `struct file`,
    /// `void`), without following further pointers' shapes.
    fn spell_pointee(&self, id: u32) -> Result<String, btf_rs::Error> {
        if id == 0 {
            return Ok("void".into());
        }
        let t = self.btf.resolve_type_by_id(id)?;
        Ok(match &t {
            Type::Const(c) => {
                let inner = c.get_type_id().unwrap_or(0);
                format!("const {}", self.spell_pointee(inner)?)
            }
            Type::Volatile(v) => {
                let inner = v.get_type_id().unwrap_or(0);
                format!("volatile {}", self.spell_pointee(inner)?)
            }
            Type::Ptr(p) => format!("{} *", self.spell_pointee(p.get_type_id().unwrap_or(0))?),
            Type::Struct(s) => format!("struct {}", self.btf.resolve_name(s)?),
            Type::Union(u) => format!("union {}", self.btf.resolve_name(u)?),
            Type::Enum(e) => format!("enum {}", self.btf.resolve_name(e)?),
            Type::FuncProto(_) => "fn".into(),
            Type::Typedef(td) => self.btf.resolve_name(td)?,
            Type::Int(i) => self.btf.resolve_name(i)?,
            Type::Fwd(f) => self.btf.resolve_name(f)?,
            other => other.name().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's own BTF; these prototypes are stable across 6.x. Without
    /// one, `test` is skipped (the line `cargo xtask test` counts).
    fn btf(test: &str) -> Option<&'static KernelBtf> {
        match KernelBtf::running_kernel() {
            Ok(b) => Some(b),
            Err(e) => {
                println!("SKIP {test}: {e}");
                None
            }
        }
    }

    fn shape_of(p: &Prototype) -> Vec<(&str, &str, Shape)> {
        p.params
            .iter()
            .map(|a| (a.name.as_str(), a.c_type.as_str(), a.shape))
            .collect()
    }

    #[test]
    fn do_sys_openat2_and_ksys_write() {
        let Some(btf) = btf("do_sys_openat2_and_ksys_write") else {
            return;
        };
        let p = btf.function("do_sys_openat2").unwrap();
        assert_eq!(
            shape_of(&p),
            [
                (
                    "dfd",
                    "int",
                    Shape::Int {
                        size: 4,
                        signed: true
                    }
                ),
                ("filename", "const char *", Shape::Pointer),
                ("how", "struct open_how *", Shape::Pointer),
            ]
        );
        // long until 6.x changed it to int.
        assert!(
            [
                (
                    "long",
                    Shape::Int {
                        size: 8,
                        signed: true
                    }
                ),
                (
                    "int",
                    Shape::Int {
                        size: 4,
                        signed: true
                    }
                )
            ]
            .contains(&(p.ret.c_type.as_str(), p.ret.shape)),
            "{:?}",
            p.ret
        );
        assert_eq!(p.position("how"), Some(3));
        let w = btf.function("ksys_write").unwrap();
        assert_eq!(
            shape_of(&w),
            [
                (
                    "fd",
                    "unsigned int",
                    Shape::Int {
                        size: 4,
                        signed: false
                    }
                ),
                ("buf", "const char *", Shape::Pointer),
                (
                    "count",
                    "size_t",
                    Shape::Int {
                        size: 8,
                        signed: false
                    }
                ),
            ]
        );
    }

    #[test]
    fn missing_functions_and_clones_say_what_to_do() {
        let Some(btf) = btf("missing_functions_and_clones_say_what_to_do") else {
            return;
        };
        let e = btf.function("no_such_function_here").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no_such_function_here has no prototype in the kernel's BTF; name arguments with $argN instead, as in dfd=$arg1"
        );
        let e = btf.function("tcp_v4_md5_hash_hdr.isra.0").unwrap_err();
        assert_eq!(
            e.to_string(),
            "tcp_v4_md5_hash_hdr.isra.0 has no prototype in the kernel's BTF (it is a compiler clone of tcp_v4_md5_hash_hdr, whose calling convention may differ from tcp_v4_md5_hash_hdr's: fetch its registers, e.g. %di, instead of names)"
        );
    }

    #[test]
    fn a_missing_file_says_how_to_do_without() {
        let e = KernelBtf::load_from(Path::new("/nonexistent/btf")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/nonexistent/btf: No such file or directory (os error 2); argument names need the kernel's BTF (CONFIG_DEBUG_INFO_BTF): name arguments with $argN instead, as in dfd=$arg1"
        );
    }
}
