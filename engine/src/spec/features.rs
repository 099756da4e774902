//! Which forms of the probe language the running kernel accepts, read
//! from tracefs's `README` (the kernel's own list of the dynamic_events
//! syntax), never guessed from the version.

/// The forms of the probe language the running kernel accepts, read from
/// tracefs's `README` (its list of the dynamic_events syntax), never
/// guessed from the version.
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
        }
    }

    /// The running kernel's, from `/sys/kernel/tracing/README` (or the
    /// debugfs mount); `None` when neither can be read. Read once.
    pub fn running_kernel() -> Option<&'static KernelFeatures> {
        static FEATURES: std::sync::OnceLock<Option<KernelFeatures>> = std::sync::OnceLock::new();
        FEATURES
            .get_or_init(|| {
                [
                    "/sys/kernel/tracing/README",
                    "/sys/kernel/debug/tracing/README",
                ]
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok())
                .map(|t| KernelFeatures::from_readme(&t))
            })
            .as_ref()
    }
}
