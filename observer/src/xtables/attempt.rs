//! A legacy table replace reported as one line instead of a diff: one the kernel refused (the
//! table is unchanged, so there is nothing to read or diff, but a person must see that a writer
//! tried and failed), and ebtables replaces whose table could not be read back (the others are
//! decoded and diffed like x_tables ones).

use crate::hooks::decode::XtKind;
use crate::ruleset::{Change, ChangeResult, Family, Op};

/// The errno of a failed syscall as `NAME: message` (`EBUSY: Device or resource busy`).
pub fn errno_text(ret: i64) -> String {
    // Any i64 may come from a ring-buffer record: -i64::MIN does not exist.
    let code = ret
        .checked_neg()
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(i32::MAX);
    let e = nix::errno::Errno::from_raw(code);
    if e == nix::errno::Errno::UnknownErrno {
        format!("error {code}")
    } else {
        format!("{e:?}: {}", e.desc())
    }
}

/// The `table_replace` line for a replace of `table` with `entries` entries that returned `ret`,
/// and its `result`.
pub fn replace_attempt(
    kind: XtKind,
    table: &str,
    entries: u32,
    ret: i64,
) -> (Change, ChangeResult) {
    let family = match kind {
        XtKind::Ipv4 => Family::Ip,
        XtKind::Ipv6 => Family::Ip6,
        XtKind::Arp => Family::Arp,
        XtKind::Bridge => Family::Bridge,
    };
    let mut c = Change::new(Op::TableReplace, family, table);
    let (detail, result) = match (kind, ret) {
        (XtKind::Bridge, 0) => (
            format!(
                "ebtables table replaced ({entries} rules); it could not be read back, so its \
                 changes are not known"
            ),
            ChangeResult::Applied,
        ),
        (XtKind::Bridge, _) => (
            format!(
                "the kernel refused an ebtables replace ({entries} rules); the table is unchanged"
            ),
            ChangeResult::Refused(errno_text(ret)),
        ),
        _ => (
            format!("the kernel refused a replace with {entries} entries; the table is unchanged"),
            ChangeResult::Refused(errno_text(ret)),
        ),
    };
    c.detail = Some(detail);
    (c, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_replaces_name_the_error() {
        let (c, result) = replace_attempt(XtKind::Ipv4, "filter", 12, -16);
        assert_eq!(c.op, Op::TableReplace);
        assert_eq!(c.family, Family::Ip);
        assert_eq!(c.table, "filter");
        assert_eq!(result, "EBUSY: Device or resource busy");
        assert!(c.detail.unwrap().contains("unchanged"));
        assert_eq!(errno_text(-2), "ENOENT: No such file or directory");
        assert_eq!(
            errno_text(-40),
            "ELOOP: Too many symbolic links encountered"
        );
        assert_eq!(errno_text(-100000), "error 100000");
    }

    /// Found by the `kernel_event` fuzz target: a replace record whose `ret` is i64::MIN (its
    /// header's length made right, as the target does) overflowed the negation.
    #[test]
    fn fuzz_replace_record_with_the_smallest_ret() {
        let mut record = include_bytes!("testdata/fuzz/kernel_event-ret-min.bin").to_vec();
        let len = record.len() as u32;
        record[4..8].copy_from_slice(&len.to_ne_bytes());
        let ev = crate::hooks::decode::KernelEvent::parse(&record).expect("a replace record");
        let crate::hooks::decode::KernelEvent::XtReplace(x) = ev else {
            panic!("not a replace: {ev:?}")
        };
        assert_eq!(x.ret, i64::MIN);
        let (c, result) = replace_attempt(x.kind, &x.table, x.num_entries, x.ret);
        assert_eq!(result, "error 2147483647");
        assert_eq!(c.table, "nat");
    }

    #[test]
    fn any_return_value_has_a_text() {
        assert_eq!(errno_text(i64::MIN), "error 2147483647");
        assert_eq!(errno_text(i64::MAX), "error 2147483647");
        assert_eq!(errno_text(1), "error -1");
        let (_, result) = replace_attempt(XtKind::Ipv4, "nat", 9, i64::MIN);
        assert_eq!(result, "error 2147483647");
    }

    #[test]
    fn ebtables_replace_lines_say_why_there_is_no_diff() {
        let (c, result) = replace_attempt(XtKind::Bridge, "broute", 3, 0);
        assert_eq!(result, "ok");
        assert_eq!(c.family, Family::Bridge);
        assert!(c.detail.unwrap().contains("could not be read back"));
        let (c, result) = replace_attempt(XtKind::Bridge, "filter", 3, -22);
        assert_eq!(result, "EINVAL: Invalid argument");
        assert!(c.detail.unwrap().contains("unchanged"));
    }
}
