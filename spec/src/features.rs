//! Which forms of the probe language the running kernel accepts, read
//! from tracefs's `README` (the kernel's own list of the dynamic_events
//! syntax). Two changes of the kernel's parser left its README as it was,
//! and only those are told from the release (`uname -r`): the symbol
//! types refused on uprobes since 6.2 (d4505aa6afae, "tracing/probes:
//! Reject symbol/symstr type for uprobe") and fprobes' maxactive removed
//! in 6.14 (a2224559cbba, "tracing/fprobe: Remove nr_maxactive from
//! fprobe"). The reading of those files is the engine's; this crate only
//! turns their text into [`KernelFeatures`].

use crate::{BaseType, FetchBase, ProbeSpec, Target};

/// The forms of the probe language the running kernel accepts, read from
/// tracefs's `README` (its list of the dynamic_events syntax), and from
/// its release where the README is silent (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelFeatures {
    /// `f[:[<group>/][<event>]] <func-name>[%return]` (CONFIG_FPROBE_EVENTS).
    pub fprobe: bool,
    /// `t[:[<group>/][<event>]] <tracepoint>`.
    pub tprobe: bool,
    /// `<argname>` and `$arg*` (CONFIG_PROBE_EVENTS_BTF_ARGS).
    pub btf_args: bool,
    /// `<argname>->field[->field|.field...]`.
    pub btf_members: bool,
    /// `kernel return probes support: $retval, $arg<N>`.
    pub return_args: bool,
    /// The `symstr` type.
    pub symstr: bool,
    /// The `char` type.
    pub char_type: bool,
    /// The `%pd`/`%pD` types.
    pub dentry: bool,
    /// Event probes: `e[:[<group>/][<event>]] <attached-group>.<attached-event>`
    /// (Linux 5.15+).
    pub eprobe: bool,
    /// The release as (major, minor), from `uname -r`
    /// ([`KernelFeatures::with_release`]). `None` when unknown: the
    /// changes the README does not show are then left to the kernel.
    pub release: Option<(u32, u32)>,
}

/// A form of the probe language a kernel lacks, and what adds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lacking {
    /// The form, with the argument that uses it.
    pub what: String,
    /// The kernel configuration or version that has it.
    pub needs: &'static str,
    /// The kernel's release (major, minor) when it, not the README, tells
    /// that the form is not taken.
    pub release: Option<(u32, u32)>,
}

impl KernelFeatures {
    /// Reads the forms from the text of tracefs's `README`.
    pub fn from_readme(text: &str) -> KernelFeatures {
        // The `type:` paragraph, up to the synthetic events' `field:`.
        let types = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("type:"))
            .take_while(|l| !l.trim_start().starts_with("field:"))
            .collect::<Vec<_>>()
            .join(" ");
        KernelFeatures {
            fprobe: text.contains("f[:[<group>/][<event>]]"),
            tprobe: text.contains("t[:[<group>/][<event>]]"),
            btf_args: text.contains("<argname>"),
            btf_members: text.contains("<argname>[->field"),
            return_args: text
                .lines()
                .any(|l| l.contains("return probes support:") && l.contains("$arg<N>")),
            symstr: types.contains("symstr"),
            char_type: types.split([' ', ',', '\t']).any(|w| w == "char"),
            dentry: types.contains("%pd"),
            eprobe: text.contains("e[:[<group>/][<event>]]"),
            release: None,
        }
    }

    /// The same, knowing the kernel's release (`uname -r`, e.g.
    /// `6.1.0-56-amd64`); a release that does not start with
    /// `MAJOR.MINOR` leaves it unknown.
    pub fn with_release(self, release: &str) -> KernelFeatures {
        let digits = |s: &str| {
            let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            s[..end].parse::<u32>().ok()
        };
        let release = release
            .split_once('.')
            .and_then(|(major, rest)| Some((major.parse::<u32>().ok()?, digits(rest)?)));
        KernelFeatures { release, ..self }
    }

    /// True when the release is known and at least `major.minor`.
    fn since(&self, major: u32, minor: u32) -> bool {
        self.release.is_some_and(|r| r >= (major, minor))
    }

    /// The first form of `definition` this kernel lacks (`None`: it has
    /// them all). Deletions need nothing.
    pub fn lacking_definition(&self, definition: &crate::Definition) -> Option<Lacking> {
        match definition {
            crate::Definition::Probe(spec) => self.lacking(spec),
            crate::Definition::EventProbe(_) if !self.eprobe => Some(Lacking {
                what: "event probes (e:)".into(),
                needs: "CONFIG_EPROBE_EVENTS, Linux 5.15+",
                release: None,
            }),
            _ => None,
        }
    }

    /// A form of `spec` this kernel's release refuses though its README
    /// lists it (see the module documentation), whichever route the
    /// probe takes.
    pub fn refused_by_release(&self, spec: &ProbeSpec) -> Option<Lacking> {
        if let (Target::Fprobe { .. }, crate::ProbeKind::Return { maxactive: Some(n) }) =
            (&spec.target, spec.kind)
        {
            if self.since(6, 14) {
                return Some(Lacking {
                    what: format!("a maxactive on an fprobe (f{n}:)"),
                    needs: "Linux 6.13 or older (6.14 removed it: write f:)",
                    release: self.release,
                });
            }
        }
        if !spec.target.is_user() || !self.since(6, 2) {
            return None;
        }
        let a = spec
            .args
            .iter()
            .find(|a| matches!(a.effective_type().base, BaseType::Symbol | BaseType::SymStr))?;
        Some(Lacking {
            what: format!("the {} type on a uprobe ({a})", a.effective_type().base),
            needs: "Linux 6.1 or older (6.2 made symbol and symstr kernel-only; a uprobe reads user memory: use x64)",
            release: self.release,
        })
    }

    /// The kind of probe point `spec` needs, when this kernel lacks it.
    fn lacking_target(&self, spec: &ProbeSpec) -> Option<Lacking> {
        let lacks = |what: String, needs: &'static str| {
            Some(Lacking {
                what,
                needs,
                release: None,
            })
        };
        match &spec.target {
            Target::Fprobe { .. } if !self.fprobe => lacks(
                "fprobe events (f:)".into(),
                "CONFIG_FPROBE_EVENTS, Linux 6.5+",
            ),
            Target::Tracepoint { .. } if !self.tprobe => lacks(
                "tracepoint probes (t:)".into(),
                "CONFIG_FPROBE_EVENTS, Linux 6.5+",
            ),
            _ => None,
        }
    }

    /// The first form of `spec` this kernel lacks, naming the feature
    /// (`None`: it has them all).
    pub fn lacking(&self, spec: &ProbeSpec) -> Option<Lacking> {
        let lacks = |what: String, needs: &'static str| {
            Some(Lacking {
                what,
                needs,
                release: None,
            })
        };
        if let Some(lack) = self
            .lacking_target(spec)
            .or_else(|| self.refused_by_release(spec))
        {
            return Some(lack);
        }
        // Without BTF arguments the kernel names a bare `$argN` `argN`,
        // which may collide with a name given to another argument.
        if !self.btf_args {
            for i in (0..spec.args.len()).filter(|&i| crate::parse::unnamed_arg(spec, i)) {
                let name = spec.arg_name(i);
                if (0..spec.args.len()).any(|j| j != i && spec.arg_name(j) == name) {
                    return lacks(
                        format!("two arguments named {name} ({name} is what this kernel calls ${name})"),
                        "CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.5+ (names $argN after the parameter)",
                    );
                }
            }
        }
        // Names on a p:/r: entry probe are turned into $argN here (from
        // BTF); elsewhere the kernel looks them up.
        let kernel_names = spec.target.is_dynamic_only() || spec.is_return();
        for a in &spec.args {
            match &a.fetch.base {
                FetchBase::Name(n) if kernel_names && !self.btf_args => {
                    return lacks(
                        format!("BTF argument names ({n} resolved by the kernel)"),
                        "CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.5+",
                    )
                }
                FetchBase::AllArgs if !self.btf_args => {
                    return lacks(
                        "$arg* (every parameter by BTF)".into(),
                        "CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.5+",
                    )
                }
                FetchBase::Member { .. } if !self.btf_members => {
                    return lacks(
                        format!("BTF member access ({})", a.fetch),
                        "CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.7+",
                    )
                }
                _ => {}
            }
            let entry_value = matches!(
                a.fetch.base,
                FetchBase::Arg(_)
                    | FetchBase::Name(_)
                    | FetchBase::Member { .. }
                    | FetchBase::AllArgs
            );
            if spec.is_return() && entry_value && !self.return_args {
                return lacks(
                    format!("entry arguments in return probes ({})", a.fetch),
                    "Linux 6.10+ (\"kernel return probes support: $retval, $arg<N>\")",
                );
            }
            // 6.12 takes a return value as a string (its BTF type says
            // where it points); older kernels want a dereference.
            if a.fetch.base == FetchBase::Retval
                && a.fetch.derefs.is_empty()
                && a.ty.is_some_and(|t| t.base.is_string())
                && !self.btf_args
            {
                return lacks(
                    format!("a string read straight from $retval ({a}); write +0($retval):string"),
                    "CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.5+",
                );
            }
            let ty = a.effective_type().base;
            let missing = match ty {
                // No kernel takes it on a uprobe without its README listing
                // it: 6.2+ have the type and refuse it on uprobes.
                BaseType::SymStr if !self.symstr && spec.target.is_user() => {
                    Some("a kernel before 6.2 with symstr backported (6.2+ refuse it on uprobes)")
                }
                BaseType::SymStr if !self.symstr => Some("Linux 6.2+"),
                BaseType::Char if !self.char_type => Some("Linux 6.7+"),
                BaseType::Dentry | BaseType::File if !self.dentry => {
                    Some("CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.9+")
                }
                _ => None,
            };
            if let Some(needs) = missing {
                return lacks(format!("{ty} type ({a})"), needs);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::KernelFeatures;

    const README_6_1: &str = include_str!("fixtures/README-6.1");
    const README_6_12: &str = include_str!("fixtures/README-6.12");

    /// The READMEs of Debian's 6.1 and 6.12 kernels, as read in the VM.
    #[test]
    fn features_from_the_readme() {
        let old = KernelFeatures::from_readme(README_6_1);
        assert_eq!(
            old,
            KernelFeatures {
                symstr: true,
                eprobe: true,
                ..KernelFeatures::default()
            }
        );
        let new = KernelFeatures::from_readme(README_6_12);
        assert_eq!(
            new,
            KernelFeatures {
                fprobe: true,
                tprobe: true,
                btf_args: true,
                btf_members: true,
                return_args: true,
                symstr: true,
                char_type: true,
                dentry: true,
                eprobe: true,
                release: None,
            }
        );
        assert_eq!(
            new.with_release("6.12.117+deb12-amd64").release,
            Some((6, 12))
        );
        assert_eq!(old.with_release("6.1.0-56-amd64").release, Some((6, 1)));
        assert_eq!(old.with_release("weird").release, None);
        assert_eq!(old.with_release("6-12").release, None);
        assert_eq!(old.with_release("7.2").release, Some((7, 2)));
    }

    /// The two changes the README does not show, told from the release.
    #[test]
    fn uprobe_symbols_and_fprobe_maxactive_follow_the_release() {
        let spec = |text| crate::ProbeSpec::parse(text, kprobe_perf_arch::Arch::X86_64).unwrap();
        let features = |readme, release| KernelFeatures::from_readme(readme).with_release(release);
        let symbol = spec("p:ev /bin/true:0x1000 +0(%di):symbol");
        assert_eq!(
            features(README_6_1, "6.1.0-56-amd64").lacking(&symbol),
            None
        );
        let lack = features(README_6_12, "6.12.117+deb12-amd64")
            .lacking(&symbol)
            .unwrap();
        assert_eq!(lack.what, "the symbol type on a uprobe (+0(%di):symbol)");
        // Whatever the route (a register fetch planned for the PMU still
        // goes to uprobe_events for a command).
        let register = spec("p:ev /bin/true:0x1000 x=%di:symbol");
        let new = features(README_6_12, "6.12.117+deb12-amd64");
        assert_eq!(
            new.refused_by_release(&register).unwrap().release,
            Some((6, 12))
        );
        let old = features(README_6_1, "6.1.0-56-amd64");
        assert_eq!(old.refused_by_release(&register), None);
        // Unknown release: left to the kernel.
        assert_eq!(
            KernelFeatures::from_readme(README_6_12).lacking(&symbol),
            None
        );
        let maxactive = spec("f1:ev vfs_read%return");
        assert_eq!(
            features(README_6_12, "6.12.117+deb12-amd64").lacking(&maxactive),
            None
        );
        let lack = features(README_6_12, "7.2.13+deb14-amd64")
            .lacking(&maxactive)
            .unwrap();
        assert_eq!(lack.what, "a maxactive on an fprobe (f1:)");
        let plain = spec("f:ev vfs_read%return");
        assert_eq!(
            features(README_6_12, "7.2.13+deb14-amd64").lacking(&plain),
            None
        );
    }
}
