use super::*;

#[test]
fn clean_text_is_borrowed_not_copied() {
    for s in [
        "",
        "KUBE-SVC-X",
        "ns/svc:http cluster IP",
        "\"quoted\" \\ back",
        "日本語 ü ß ✓",
    ] {
        assert!(
            matches!(escape(s), Cow::Borrowed(b) if std::ptr::eq(b, s)),
            "{s}"
        );
        assert!(
            matches!(escape_bytes(s.as_bytes()), Cow::Borrowed(_)),
            "{s}"
        );
        assert_eq!(Shown(s).to_string(), s);
    }
}

#[test]
fn c0_and_del_are_hex_escapes() {
    assert_eq!(escape("e\x1b[31mvil"), "e\\x1b[31mvil");
    assert_eq!(
        escape("\x00\x07\x08\t\n\r\x1f"),
        "\\x00\\x07\\x08\\x09\\x0a\\x0d\\x1f"
    );
    assert_eq!(escape("a\x7fb"), "a\\x7fb");
    // Every C0 byte and DEL.
    for b in (0u8..0x20).chain([0x7f]) {
        let s = char::from(b).to_string();
        assert_eq!(escape(&s), format!("\\x{b:02x}"));
    }
}

#[test]
fn c1_and_bidi_controls_are_unicode_escapes() {
    assert_eq!(escape("a\u{9b}31m"), "a\\u009b31m");
    assert_eq!(escape("\u{80}\u{9f}"), "\\u0080\\u009f");
    for c in ('\u{202a}'..='\u{202e}').chain('\u{2066}'..='\u{2069}') {
        assert_eq!(escape(&format!("x{c}y")), format!("x\\u{:04x}y", c as u32));
    }
    // The neighbours are kept: U+00A0, U+2029, U+202F, U+2065, U+206A.
    for s in ["\u{a0}", "\u{2029}", "\u{202f}", "\u{2065}", "\u{206a}"] {
        assert_eq!(escape(s), s);
    }
}

#[test]
fn the_comment_of_the_example_is_shown_inert() {
    let comment = "ok\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\rX\x08Y";
    let shown = escape(comment);
    assert_eq!(
        shown,
        "ok\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mRED\\x0dX\\x08Y"
    );
    assert!(!shown.chars().any(is_escaped));
}

#[test]
fn escaping_twice_changes_nothing() {
    let once = escape("a\x1bb\u{202e}c\\x1b");
    assert_eq!(escape(&once), once);
    assert!(matches!(escape(&once), Cow::Borrowed(_)));
}

#[test]
fn invalid_utf8_bytes_are_hex_escapes() {
    assert_eq!(escape_bytes(b"ab\xffcd"), "ab\\xffcd");
    // A truncated sequence is escaped byte by byte, valid text around it kept and escaped.
    assert_eq!(escape_bytes(b"\xe2\x80x\x1b\xc3\xbc"), "\\xe2\\x80x\\x1bü");
    assert_eq!(escape_bytes(b"\x80"), "\\x80");
    assert_eq!(escape_bytes("é\u{202e}".as_bytes()), "é\\u202e");
}

#[test]
fn shown_formats_like_escape_and_pads_what_is_shown() {
    let s = "a\x1bb";
    assert_eq!(format!("{}", Shown(s)), "a\\x1bb");
    assert_eq!(format!("[{:<8}]", Shown(s)), "[a\\x1bb  ]");
    assert_eq!(format!("[{:>8}]", Shown("ok")), "[      ok]");
    assert_eq!(format!("[{:.3}]", Shown(s)), "[a\\x]");
}
