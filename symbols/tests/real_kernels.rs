//! Symbol tables of real kernels, captured with the scripts in
//! `tests/fixtures/` (see the README there): the development host's 6.18
//! kernel (no kprobes, no modules) and Debian's 6.1 in the project's VM
//! (kprobes, modules, the debugfs blacklist). Every expected value below was
//! read off those files independently of this crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kprobe_perf_symbols::{Blacklist, Exclusion, KernelSymbols, Symbol};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(name: &str) -> KernelSymbols {
    KernelSymbols::load_from(&fixture(name)).unwrap()
}

fn one<'a>(s: &'a KernelSymbols, name: &str) -> &'a Symbol {
    let found = s.lookup(name);
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    found[0]
}

fn names(syms: &[&Symbol]) -> Vec<String> {
    syms.iter().map(|s| s.name.clone()).collect()
}

/// How many text symbols get each verdict.
fn verdicts(s: &KernelSymbols) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for sym in s.iter().filter(|s| s.is_text()) {
        let key = match s.exclusion(sym) {
            None => "probeable".to_string(),
            Some(Exclusion::Generated { .. }) => "Generated".to_string(),
            Some(Exclusion::Blacklisted { .. }) => "Blacklisted".to_string(),
            Some(Exclusion::CompilerClone { reason, .. }) => match *reason {
                Exclusion::Blacklisted { .. } => "CompilerClone(Blacklisted)".to_string(),
                other => format!("CompilerClone({other:?})"),
            },
            Some(other) => format!("{other:?}"),
        };
        *out.entry(key).or_default() += 1;
    }
    out
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

const HOST_INIT_ONCE: [u64; 12] = [
    0xffffffff816df460,
    0xffffffff817749d0,
    0xffffffff817f3890,
    0xffffffff818240f0,
    0xffffffff818288c0,
    0xffffffff81945f20,
    0xffffffff819499e0,
    0xffffffff8198a5c0,
    0xffffffff81a6c210,
    0xffffffff81ae6350,
    0xffffffff81d9aa70,
    0xffffffff81e28100,
];

#[test]
fn host_counts_and_sizes() {
    let s = load("host-6.18-kallsyms.txt");
    assert_eq!(s.len(), 643);
    assert!(!s.addresses_hidden());
    assert_eq!(s.names().count(), 619);
    let open = one(&s, "do_sys_openat2");
    assert_eq!((open.address, open.kind), (0xffffffff816b2110, 't'));
    let at = s.symbolize(0xffffffff816b2115).unwrap();
    assert_eq!(
        (at.symbol.name.as_str(), at.offset, at.size),
        ("do_sys_openat2", 5, 0xd0)
    );
    // The size stops at the next function's __pfx_ padding.
    let rcv = s.symbolize(0xffffffff82030580 + 0x13ef).unwrap();
    assert_eq!((rcv.symbol.name.as_str(), rcv.size), ("tcp_v4_rcv", 0x13f0));
    let after = s.symbolize(0xffffffff82030580 + 0x13f0).unwrap();
    assert_eq!(
        (after.symbol.name.as_str(), after.offset),
        ("__pfx_tcp4_proc_exit", 0)
    );
    let cold = s.symbolize(0xffffffff8120020d).unwrap();
    assert_eq!(
        (cold.symbol.name.as_str(), cold.size),
        ("wait_for_initramfs.cold", 0x13)
    );
    // srso_alias_untrain_ret, _stext, _text and __pi__text share an
    // address: the last listed holds it, as before.
    assert_eq!(
        s.symbolize(0xffffffff81000001).unwrap().symbol.name,
        "__pi__text"
    );
    let tramp = one(&s, "ftrace_trampoline");
    assert_eq!(tramp.module.as_deref(), Some("__builtin__ftrace"));
    assert_eq!(tramp.address, 0xffffffffc0203000);
}

#[test]
fn host_duplicates_are_labelled_by_address() {
    let s = load("host-6.18-kallsyms.txt");
    let all = s.lookup("init_once");
    let addrs: Vec<u64> = all.iter().map(|s| s.address).collect();
    assert_eq!(addrs, HOST_INIT_ONCE);
    assert_eq!(all[8].label(), "init_once@0xffffffff81a6c210");
    for sym in &all {
        assert_eq!(s.by_label(&sym.label()), Some(*sym));
    }
    assert_eq!(
        s.by_label("init_once@ffffffff81a6c210").map(|s| s.address),
        Some(0xffffffff81a6c210),
        "0x is optional"
    );
    assert!(s.by_label("init_once@0xffffffff81a6c211").is_none());
    assert!(s.by_label("init_once@0xffffffff81a6c210 [ext4]").is_none());
    assert!(s.by_label("init_once").is_none());
    let tramp = one(&s, "ftrace_trampoline");
    assert_eq!(
        tramp.label(),
        "ftrace_trampoline@0xffffffffc0203000 [__builtin__ftrace]"
    );
    assert_eq!(s.by_label(&tramp.label()), Some(tramp));
}

#[test]
fn host_globs() {
    let s = load("host-6.18-kallsyms.txt");
    let tcp = s.matches("tcp_v4_*");
    assert_eq!(tcp.len(), 28);
    assert_eq!(tcp[0].name, "tcp_v4_init_seq_and_ts_off");
    assert_eq!(tcp[27].name, "tcp_v4_init");
    assert!(tcp.windows(2).all(|w| w[0].address <= w[1].address));
    assert!(tcp.iter().any(|s| s.name == "tcp_v4_md5_hash_hdr.isra.0"));
    assert_eq!(
        names(&s.matches("do_sys_open*")),
        ["do_sys_openat2", "do_sys_open"]
    );
    assert_eq!(names(&s.matches("vmlinux:do_sys_open")), ["do_sys_open"]);
    assert_eq!(s.matches("init_once").len(), 12);
    assert_eq!(s.matches("*.cold").len(), 15);
    assert_eq!(names(&s.matches("*:*")), ["ftrace_trampoline"]);
    assert_eq!(names(&s.matches("__builtin__*:*")), ["ftrace_trampoline"]);
    assert!(s.matches("vmlinux:ftrace_trampoline").is_empty());
    assert!(s.matches("ext4:*").is_empty());
    // Data symbols are never matched.
    assert_eq!(one(&s, "x86_verw_sel").kind, 'T');
    let data: Vec<_> = s.iter().filter(|s| !s.is_text()).collect();
    assert_eq!(data.len(), 12);
    for d in data {
        assert!(s.matches(&d.name).is_empty(), "{}", d.name);
    }
}

#[test]
fn host_exclusions() {
    let s = load("host-6.18-kallsyms.txt");
    let why = |name: &str| s.exclusion(one(&s, name));
    assert_eq!(why("__pfx_do_sys_openat2"), Some(Exclusion::Padding));
    assert_eq!(
        why("wait_for_initramfs.cold"),
        Some(Exclusion::ColdFragment)
    );
    assert_eq!(why("entry_SYSCALL_64"), Some(Exclusion::EntryText));
    assert_eq!(why("__entry_text_start"), Some(Exclusion::EntryText));
    assert_eq!(why("do_syscall_64"), Some(Exclusion::NoinstrText));
    assert_eq!(why("cpu_idle_poll.isra.0"), Some(Exclusion::NoinstrText));
    assert_eq!(why("start_kernel"), Some(Exclusion::InitText));
    assert_eq!(
        why("ftrace_trampoline"),
        Some(Exclusion::Generated {
            area: "__builtin__ftrace".into()
        })
    );
    assert_eq!(why("do_sys_openat2"), None);
    // A clone whose base was inlined away everywhere.
    assert_eq!(why("class_preempt_notrace_destructor.isra.0"), None);
    for sym in s.lookup("init_once") {
        assert_eq!(s.exclusion(sym), None);
    }
    // This kernel has no kprobes: its __kprobes section is empty.
    assert_eq!(
        s.lookup("__kprobes_text_start")[0].address,
        s.lookup("__kprobes_text_end")[0].address
    );
    assert_eq!(
        verdicts(&s),
        counts(&[
            ("Padding", 267),
            ("NoinstrText", 180),
            ("EntryText", 83),
            ("probeable", 81),
            ("ColdFragment", 15),
            ("InitText", 4),
            ("Generated", 1),
        ])
    );
    assert_eq!(
        why("do_syscall_64").unwrap().to_string(),
        "it is in the noinstr section (between __noinstr_text_start and __noinstr_text_end), which must not be instrumented"
    );
    assert_eq!(
        why("__pfx_do_sys_openat2").unwrap().to_string(),
        "it is padding the compiler put before a function (__pfx_/__cfi_), not a function; probe the function that follows it"
    );
}

#[test]
fn host_hidden_addresses() {
    let s = load("host-6.18-kallsyms-hidden.txt");
    assert!(s.addresses_hidden());
    assert_eq!(s.len(), 643);
    assert!(s.iter().all(|s| s.address == 0));
    let once = s.lookup("init_once");
    assert_eq!(once.len(), 12);
    assert_eq!(once[0].label(), "init_once@0x0");
    assert!(
        s.by_label("init_once@0x0").is_none(),
        "labels need addresses"
    );
    assert!(s.symbolize(0).is_none());
    assert!(s.symbolize(0xffffffff816b2115).is_none());
    assert_eq!(s.matches("tcp_v4_*").len(), 28);
    // Name-based reasons still hold; the sections need addresses.
    let why = |name: &str| s.exclusion(one(&s, name));
    assert_eq!(why("__pfx_do_sys_openat2"), Some(Exclusion::Padding));
    assert_eq!(
        why("wait_for_initramfs.cold"),
        Some(Exclusion::ColdFragment)
    );
    assert_eq!(why("entry_SYSCALL_64"), None);
    assert_eq!(why("start_kernel"), None);
    // Same lines, same order as the visible capture.
    let visible = load("host-6.18-kallsyms.txt");
    let mut a: Vec<_> = s.iter().map(|s| (&s.name, s.kind)).collect();
    let mut b: Vec<_> = visible.iter().map(|s| (&s.name, s.kind)).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

#[test]
fn load_and_parse_agree() {
    for f in ["host-6.18-kallsyms.txt", "deb-6.1-kallsyms.txt"] {
        let loaded = load(f);
        let text = std::fs::read_to_string(fixture(f)).unwrap();
        let parsed = KernelSymbols::parse(&text).unwrap();
        assert!(loaded.iter().eq(parsed.iter()), "{f}");
        assert_eq!(loaded.len(), text.lines().count());
    }
}

fn deb() -> KernelSymbols {
    load("deb-6.1-kallsyms.txt")
}

fn deb_blacklist() -> Blacklist {
    Blacklist::load_from(&fixture("deb-6.1-kprobes-blacklist.txt")).unwrap()
}

#[test]
fn debian_modules_and_duplicates() {
    let s = deb();
    assert_eq!(s.len(), 854);
    assert_eq!(s.names().count(), 825);
    assert!(!s.addresses_hidden());
    // Module symbols are listed out of address order; lookups still work.
    let probe = one(&s, "vp_legacy_probe");
    assert_eq!(probe.module.as_deref(), Some("virtio_pci_legacy_dev"));
    assert_eq!(probe.address, 0xffffffffc05e81e0);
    let at = s.symbolize(0xffffffffc05e8080 + 4).unwrap();
    assert_eq!(
        (at.symbol.name.as_str(), at.offset, at.size),
        ("vp_legacy_get_status", 4, 0x20)
    );
    assert_eq!(s.matches("virtio_pci_legacy_dev:*").len(), 13);
    assert_eq!(s.matches("*:*").len(), 31);
    assert_eq!(
        names(&s.matches("9pnet_virtio:p9_virtio_*")),
        [
            "p9_virtio_cancel",
            "p9_virtio_close",
            "p9_virtio_remove",
            "p9_virtio_cancelled",
            "p9_virtio_create",
            "p9_virtio_request",
            "p9_virtio_probe",
            "p9_virtio_zc_request",
            "p9_virtio_remove.cold",
            "p9_virtio_probe.cold",
            "p9_virtio_cleanup",
        ]
    );
    let once: Vec<u64> = s.lookup("init_once").iter().map(|s| s.address).collect();
    assert_eq!(
        once,
        [
            0xffffffffa5b8b140,
            0xffffffffa5c05090,
            0xffffffffa5c20db0,
            0xffffffffa5c36920,
            0xffffffffa5cd1560,
            0xffffffffa5f2c770,
            0xffffffffa5fafc20,
        ]
    );
    assert_eq!(s.lookup("modalias_show").len(), 10);
    // `__this_module` is data in two modules: one label each.
    let this: Vec<String> = s
        .lookup("__this_module")
        .iter()
        .map(|s| s.label())
        .collect();
    assert_eq!(
        this,
        [
            "__this_module@0xffffffffc05ea000 [virtio_pci_legacy_dev]",
            "__this_module@0xffffffffc0640280 [9pnet_virtio]",
        ]
    );
    assert_eq!(
        s.by_label("__this_module@0xffffffffc0640280 [9pnet_virtio]")
            .and_then(|s| s.module.as_deref()),
        Some("9pnet_virtio")
    );
}

#[test]
fn debian_blacklist_file() {
    let b = deb_blacklist();
    assert_eq!(b.len(), 427);
    assert!(!b.addresses_hidden());
    let int3 = b.by_name("do_int3", None).unwrap();
    assert_eq!(int3.range, Some(0xffffffffa5832980..0xffffffffa58329d0));
    assert_eq!(b.containing(0xffffffffa5832990).unwrap().name, "do_int3");
    assert!(b.containing(0xffffffffa58329d0).is_none());
    let hidden = Blacklist::load_from(&fixture("deb-6.1-kprobes-blacklist-hidden.txt")).unwrap();
    assert!(hidden.addresses_hidden());
    assert_eq!(hidden.len(), 427);
    assert!(hidden.entries().iter().all(|e| e.range.is_none()));
    assert!(hidden.containing(0).is_none());
    assert!(hidden.by_name("do_int3", None).is_some());
    let e = Blacklist::load_from(&fixture("no-such-file")).unwrap_err();
    assert!(e.to_string().contains("debugfs"), "{e}");
}

#[test]
fn debian_exclusions() {
    let mut s = deb();
    // Without the blacklist, only what kallsyms itself shows.
    assert_eq!(
        verdicts(&s),
        counts(&[
            ("probeable", 474),
            ("NoinstrText", 156),
            ("EntryText", 99),
            ("ColdFragment", 18),
            ("InitText", 10),
        ])
    );
    assert_eq!(s.exclusion(one(&s, "do_int3")), None);
    s.set_blacklist(deb_blacklist());
    assert_eq!(
        verdicts(&s),
        counts(&[
            ("probeable", 340),
            ("NoinstrText", 156),
            ("Blacklisted", 129),
            ("EntryText", 99),
            ("ColdFragment", 18),
            ("InitText", 10),
            ("CompilerClone(Blacklisted)", 5),
        ])
    );
    let int3 = s.exclusion(one(&s, "do_int3")).unwrap();
    assert_eq!(
        int3,
        Exclusion::Blacklisted {
            entry: "do_int3 0xffffffffa5832980-0xffffffffa58329d0".into()
        }
    );
    assert_eq!(
        int3.to_string(),
        "the kernel's kprobe blacklist lists it (entry do_int3 0xffffffffa5832980-0xffffffffa58329d0)"
    );
    let clone = s.exclusion(one(&s, "nmi_handle.part.0")).unwrap();
    assert_eq!(
        clone,
        Exclusion::CompilerClone {
            base: "nmi_handle".into(),
            reason: Box::new(Exclusion::Blacklisted {
                entry: "nmi_handle 0xffffffffa5836ac0-0xffffffffa5836af0".into()
            })
        }
    );
    assert!(clone
        .to_string()
        .starts_with("it is a compiler clone of nmi_handle, and the kernel refuses clones of a refused function (nmi_handle: the kernel's kprobe blacklist lists it"));
    assert_eq!(
        s.exclusion(one(&s, "nmi_handle.part.0.cold")),
        Some(Exclusion::ColdFragment)
    );
    assert_eq!(s.exclusion(one(&s, "do_sys_openat2")), None);
    assert_eq!(s.exclusion(one(&s, "vp_legacy_probe")), None);
    assert_eq!(
        s.exclusion(one(&s, "p9_virtio_probe.cold")),
        Some(Exclusion::ColdFragment)
    );

    // Without privilege the blacklist has names only: still enough.
    s.set_blacklist(
        Blacklist::load_from(&fixture("deb-6.1-kprobes-blacklist-hidden.txt")).unwrap(),
    );
    assert_eq!(
        s.exclusion(one(&s, "do_int3")),
        Some(Exclusion::Blacklisted {
            entry: "do_int3".into()
        })
    );
    assert!(matches!(
        s.exclusion(one(&s, "nmi_handle.part.0")),
        Some(Exclusion::CompilerClone { ref base, .. }) if base == "nmi_handle"
    ));
    // By name, three aliases inside listed ranges (ftrace_ops_list_func in
    // arch_ftrace_ops_list_func, __x86_indirect_thunk_rax in
    // __x86_indirect_thunk_array ...) are no longer caught.
    assert_eq!(verdicts(&s).get("Blacklisted"), Some(&126));
}
