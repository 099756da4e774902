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
