use super::*;

const L: PageLayout = PageLayout::SIXTY_FOUR_BIT;

/// A page of `size` bytes: header (timestamp, commit) then `data`, the
/// rest stale bytes (0xee) that must not be read.
fn page(ts: u64, commit: u64, data: &[u8], size: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(size);
    p.extend_from_slice(&ts.to_le_bytes());
    p.extend_from_slice(&commit.to_le_bytes());
    p.extend_from_slice(data);
    p.resize(size, 0xee);
    p
}

fn head(type_len: u32, delta: u32) -> [u8; 4] {
    (type_len | (delta << 5)).to_le_bytes()
}

/// A small data event: header, then `payload` (a multiple of 4).
fn small(delta: u32, payload: &[u8]) -> Vec<u8> {
    assert_eq!(payload.len() % 4, 0);
    let mut e = head(payload.len() as u32 / 4, delta).to_vec();
    e.extend_from_slice(payload);
    e
}

#[test]
fn small_events_time_extend_and_padding_up_to_the_commit() {
    let mut data = small(10, &[1, 2, 3, 4]);
    // A time extend of 5 + (2 << 27).
    data.extend_from_slice(&head(TIME_EXTEND, 5));
    data.extend_from_slice(&2u32.to_le_bytes());
    data.extend_from_slice(&small(7, &[5, 6, 7, 8, 9, 10, 11, 12]));
    // Padding of 8 bytes (a discarded event), then a large-form event.
    // Its length word counts itself and what follows: 8.
    data.extend_from_slice(&head(PADDING, 1));
    data.extend_from_slice(&8u32.to_le_bytes());
    data.extend_from_slice(&[0; 4]);
    data.extend_from_slice(&head(0, 3));
    data.extend_from_slice(&(4u32 + 6).to_le_bytes());
    data.extend_from_slice(&[0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0, 0]);
    let commit = data.len() as u64;
    let p = page(1000, commit, &data, 4096);
    let got = read_page(&p, L).unwrap();
    assert_eq!(got.missed, None);
    let extend = 5 + (2u64 << 27);
    assert_eq!(
        got.events,
        vec![
            PageEvent {
                time: 1010,
                record: &[1, 2, 3, 4]
            },
            PageEvent {
                time: 1010 + extend + 7,
                record: &[5, 6, 7, 8, 9, 10, 11, 12]
            },
            PageEvent {
                time: 1010 + extend + 7 + 3,
                record: &[0xa, 0xb, 0xc, 0xd, 0xe, 0xf]
            },
        ]
    );
}

#[test]
fn end_padding_and_absolute_timestamps() {
    let mut data = Vec::new();
    // Absolute time 0x1234 (high word 0): replaces the page's time.
    data.extend_from_slice(&head(TIME_STAMP, 0x1234));
    data.extend_from_slice(&0u32.to_le_bytes());
    data.extend_from_slice(&small(1, &[9, 9, 9, 9]));
    // Padding to the end of the page: delta 0.
    data.extend_from_slice(&head(PADDING, 0));
    data.extend_from_slice(&small(1, &[7, 7, 7, 7]));
    let p = page(5, data.len() as u64, &data, 4096);
    let got = read_page(&p, L).unwrap();
    assert_eq!(
        got.events,
        vec![PageEvent {
            time: 0x1235,
            record: &[9, 9, 9, 9]
        }]
    );
}

#[test]
fn lost_events_are_told() {
    let data = small(1, &[1, 1, 1, 1]);
    let mut p = page(
        0,
        data.len() as u64 | MISSED_EVENTS | MISSED_STORED,
        &data,
        4096,
    );
    p[16 + data.len()..16 + data.len() + 8].copy_from_slice(&42u64.to_le_bytes());
    assert_eq!(read_page(&p, L).unwrap().missed, Some(42));
    let p = page(0, data.len() as u64 | MISSED_EVENTS, &data, 4096);
    assert_eq!(read_page(&p, L).unwrap().missed, Some(0));
}

#[test]
fn truncated_and_corrupt_pages_are_errors() {
    assert_eq!(
        read_page(&[0; 10], L),
        Err(PageError::ShortHeader { len: 10, need: 16 })
    );
    // Commit beyond the page.
    let p = page(0, 5000, &[], 4096);
    assert_eq!(
        read_page(&p, L),
        Err(PageError::CommitPastEnd {
            commit: 5000,
            room: 4080
        })
    );
    // An event longer than the committed data.
    let data = small(1, &[1; 16]);
    let p = page(0, 8, &data, 4096);
    assert_eq!(
        read_page(&p, L),
        Err(PageError::EventPastCommit { at: 0, commit: 8 })
    );
    // A large-form event whose length word is cut off, and one claiming
    // more than there is.
    let p = page(0, 4, &head(0, 1), 64);
    assert!(read_page(&p, L).is_err());
    let mut d = head(0, 1).to_vec();
    d.extend_from_slice(&u32::MAX.to_le_bytes());
    let p = page(0, 8, &d, 64);
    assert!(read_page(&p, L).is_err());
    // Every prefix of a good page: an error or fewer events, never a panic.
    let mut data = small(1, &[1; 8]);
    data.extend_from_slice(&head(TIME_EXTEND, 1));
    data.extend_from_slice(&1u32.to_le_bytes());
    let good = page(0, data.len() as u64, &data, 64);
    for n in 0..good.len() {
        let _ = read_page(&good[..n], L);
    }
}

#[test]
fn layout_from_header_page() {
    let text = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
                \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
                \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
                \tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";
    let fields = crate::attach::tracefs::parse_format(text);
    assert_eq!(PageLayout::from_fields(&fields), Some(L));
}

/// A record as the kernel writes an eprobe on sys_enter_openat with
/// `flags=$flags name=+0($filename):ustring` (fields from its format).
#[test]
fn eprobe_record_fields_and_strings() {
    let format = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
        \n\
        \tfield:unsigned int __probe_type;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:s64 flags;\toffset:16;\tsize:8;\tsigned:1;\n\
        \tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:1;\n";
    let fields = crate::attach::tracefs::parse_format(format);
    let layout = RecordLayout::new(1234, &fields, &[None, None]).unwrap();
    assert_eq!(layout.arg_names(), ["flags", "name"]);
    let mut r = vec![0u8; 28];
    r[0..2].copy_from_slice(&1234u16.to_le_bytes());
    r[4..8].copy_from_slice(&4321i32.to_le_bytes());
    r[16..24].copy_from_slice(&(-1i64).to_le_bytes());
    let name = b"/etc/hostname\0";
    r[24..28].copy_from_slice(&(28u32 | ((name.len() as u32) << 16)).to_le_bytes());
    r.extend_from_slice(name);
    assert_eq!(record_type(&r), Some(1234));
    let (tid, args) = read_record(&r, &layout).unwrap();
    assert_eq!(tid, 4321);
    assert_eq!(args[0].to_string(), "-1");
    assert_eq!(args[1], Value::Str(Some("/etc/hostname".into())));
    // The string's location past the end: an error, not a panic.
    assert!(read_record(&r[..30], &layout).is_err());
    // A fault: an empty string location.
    r[24..28].copy_from_slice(&28u32.to_le_bytes());
    assert_eq!(read_record(&r, &layout).unwrap().1[1], Value::Str(None));
    // More arguments than the event has fields of its own.
    assert!(RecordLayout::new(1, &fields, &[None; 4]).is_none());
}
