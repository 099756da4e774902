use super::*;

#[test]
fn proc_maps_lines_give_executable_file_mappings() {
    let text = "\
55d0c0a00000-55d0c0a04000 r--p 00000000 fe:01 1234   /usr/bin/ls
55d0c0a04000-55d0c0a19000 r-xp 00004000 fe:01 1234   /usr/bin/ls
7f1c2c026000-7f1c2c17b000 r-xp 00026000 fe:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd5c1f6000-7ffd5c1f8000 r-xp 00000000 00:00 0      [vdso]
7f1c2c400000-7f1c2c401000 r-xp 00000000 00:05 7      /tmp/a b (deleted)
";
    let maps = parse_proc_maps(text);
    assert_eq!(maps.len(), 3);
    assert_eq!(
        maps[0],
        Mapping {
            start: 0x55d0c0a04000,
            end: 0x55d0c0a19000,
            pgoff: 0x4000,
            path: "/usr/bin/ls".into()
        }
    );
    assert_eq!(maps[1].pgoff, 0x26000);
    assert_eq!(maps[2].path, PathBuf::from("/tmp/a b"));
}

#[test]
fn a_process_without_modules_gives_its_ip_and_says_truncated() {
    let mut u = Unwinder::new(UnwindArch::X86_64);
    let mut out = Vec::new();
    let regs = UserRegs {
        pc: 0x1234,
        sp: 0x7000,
        fp: 0,
        lr: 0,
    };
    assert_eq!(u.unwind(9, &regs, &[0; 64], &mut out), Ending::Truncated);
    assert_eq!(out, vec![0x1234]);
}

#[test]
fn frames_are_named_from_split_dwarf_dwo_files() {
    let dir = std::env::temp_dir().join(format!("kprobe-perf-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("m.c");
    std::fs::write(
        &src,
        "static inline __attribute__((always_inline)) int inner(int x) { return x * 3 + 1; }\n\
         __attribute__((noinline)) int outer(int x) { return inner(x) + 2; }\n\
         int main(int c, char **v) { (void)v; return outer(c); }\n",
    )
    .unwrap();
    let exe = dir.join("m");
    let built = std::process::Command::new("cc")
        .current_dir(&dir)
        .args(["-O2", "-g", "-gsplit-dwarf", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(built.success(), "cc -gsplit-dwarf failed");
    assert!(dir.join("m-m.dwo").exists() || dir.join("m.dwo").exists());
    let bytes = std::fs::read(&exe).unwrap();
    let obj = ::object::File::parse(&bytes[..]).unwrap();
    use ::object::{Object as _, ObjectSymbol as _};
    let outer = obj
        .symbols()
        .find(|s| s.name() == Ok("outer"))
        .unwrap()
        .address();
    let frames = SourceLookup::new().frames(&exe, outer);
    let names: Vec<_> = frames
        .iter()
        .map(|f| f.function.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["outer"]);
    assert_eq!(frames[0].line, 2);
    assert!(frames[0]
        .file
        .as_deref()
        .is_some_and(|p| p.ends_with("m.c")));
    // The binary holds only the skeleton: without the .dwo the function
    // has no name (its line, from the binary's own line table, stays).
    for dwo in ["m-m.dwo", "m.dwo"] {
        let _ = std::fs::remove_file(dir.join(dwo));
    }
    let frames = SourceLookup::new().frames(&exe, outer);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].function, None);
    std::fs::remove_dir_all(&dir).unwrap();
}
