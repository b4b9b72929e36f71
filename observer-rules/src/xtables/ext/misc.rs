//! Extensions of one or two fields each that belong to no family of their own: cpu, helper,
//! realm, rpfilter, cgroup, connbytes, nfacct; the AUDIT and CONNSECMARK targets. Tables of
//! rows as in [`header`](super::header).
//!
//! Part of [`ext`](super), dispatched from [`match_options`](super::match_options) and
//! [`target_options`](super::target_options).

use std::fmt::Write as _;

use crate::xtables::bytes::{i32_at, str_at, u16_at, u32_at, u8_at};
use crate::xtables::text::{inv, save_string};

use super::header::Row;

pub(super) const MATCHES: &[Row] = &[
    ("cpu", 0, 0, |o, _, d, _| {
        inv(o, u32_at(d, 4)? != 0);
        let _ = write!(o, " --cpu {}", u32_at(d, 0)?);
        Some(())
    }),
    ("helper", 0, 0, |o, _, d, _| {
        inv(o, i32_at(d, 0)? != 0);
        o.push_str(" --helper");
        save_string(o, &str_at(d, 4, 30)?);
        Some(())
    }),
    ("realm", 0, 0, |o, _, d, _| {
        let (id, mask) = (u32_at(d, 0)?, u32_at(d, 4)?);
        inv(o, u8_at(d, 8)? != 0);
        if mask != u32::MAX {
            let _ = write!(o, " --realm 0x{id:x}/0x{mask:x}");
        } else {
            let _ = write!(o, " --realm 0x{id:x}");
        }
        Some(())
    }),
    ("rpfilter", 0, 0, |o, _, d, _| {
        let flags = u8_at(d, 0)?;
        for (bit, opt) in [
            (0x1, " --loose"),
            (0x2, " --validmark"),
            (0x4, " --accept-local"),
            (0x8, " --invert"),
        ] {
            if flags & bit != 0 {
                o.push_str(opt);
            }
        }
        Some(())
    }),
    ("cgroup", 0, 0, |o, _, d, _| {
        inv(o, u32_at(d, 4)? != 0);
        let _ = write!(o, " --cgroup {}", u32_at(d, 0)?);
        Some(())
    }),
    // v1: has_path, has_classid, invert_path, invert_classid, path[4096], classid;
    // v2: the same flags, then path[512] and classid in one union.
    ("cgroup", 1, 2, |o, _, d, rev| {
        let (has_path, has_id) = (u8_at(d, 0)? != 0, u8_at(d, 1)? != 0);
        let (inv_path, inv_id) = (u8_at(d, 2)? != 0, u8_at(d, 3)? != 0);
        let (path_len, id_at) = if rev == 1 { (4096, 4100) } else { (512, 4) };
        if has_path {
            inv(o, inv_path);
            o.push_str(" --path");
            save_string(o, &str_at(d, 4, path_len)?);
        }
        if has_id {
            inv(o, inv_id);
            let _ = write!(o, " --cgroup {}", u32_at(d, id_at)?);
        }
        Some(())
    }),
    ("connbytes", 0, 0, |o, _, d, _| {
        // xt_connbytes_info: from, to (u64), what, direction.
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(d.get(at..at + 8)?.try_into().ok()?))
        };
        let (mut from, mut to) = (u64_at(0)?, u64_at(8)?);
        let (what, dir) = (u8_at(d, 16)?, u8_at(d, 17)?);
        if from > to {
            o.push_str(" !");
            std::mem::swap(&mut from, &mut to);
        }
        let _ = write!(o, " --connbytes {from}");
        if to != 0 && to < u64::MAX {
            let _ = write!(o, ":{to}");
        }
        let what = ["packets", "bytes", "avgpkt"]
            .get(usize::from(what))
            .unwrap_or(&"unknown");
        let dir = ["original", "reply", "both"]
            .get(usize::from(dir))
            .unwrap_or(&"unknown");
        let _ = write!(o, " --connbytes-mode {what} --connbytes-dir {dir}");
        Some(())
    }),
    // xt_nfacct_match_info: name[32], then the kernel's pointer to the object (8-aligned in
    // rev 1). iptables prints `--nfacct-name ` and then the quoted name with a space of its
    // own: two spaces, as iptables-save writes them.
    ("nfacct", 0, 1, |o, _, d, _| {
        o.push_str(" --nfacct-name ");
        save_string(o, &str_at(d, 0, 32)?);
        Some(())
    }),
    ("cluster", 0, 0, |o, _, d, _| {
        // xt_cluster_match_info: total_nodes, node_mask, hash_seed, flags.
        let (total, mask, seed) = (u32_at(d, 0)?, u32_at(d, 4)?, u32_at(d, 8)?);
        inv(o, u32_at(d, 12)? & 0x1 != 0);
        let _ = write!(
            o,
            " --cluster-local-nodemask 0x{mask:08x} --cluster-total-nodes {total} --cluster-hash-seed 0x{seed:08x}"
        );
        Some(())
    }),
    ("connlabel", 0, 0, |o, _, d, _| {
        // xt_connlabel_mtinfo: bit, options (invert, set). No connlabel.conf: numbers.
        let (bit, opts) = (u16_at(d, 0)?, u16_at(d, 2)?);
        inv(o, opts & 0x1 != 0);
        let _ = write!(o, " --label \"{bit}\"");
        if opts & 0x2 != 0 {
            o.push_str(" --set");
        }
        Some(())
    }),
    ("bpf", 0, 1, |o, _, d, rev| {
        // v0: num_elem, program[64]; v1: mode, num_elem, fd, then program[64] or path[512].
        let (mode, n, prog) = if rev == 0 {
            (0, u16_at(d, 0)?, 2)
        } else {
            (u16_at(d, 0)?, u16_at(d, 2)?, 8)
        };
        match mode {
            0 => {
                let _ = write!(o, " --bytecode \"{n},");
                for i in 0..usize::from(n.min(64)) {
                    let at = prog + 8 * i;
                    let (code, jt, jf, k) = (
                        u16_at(d, at)?,
                        u8_at(d, at + 2)?,
                        u8_at(d, at + 3)?,
                        u32_at(d, at + 4)?,
                    );
                    let tail = if i + 1 < usize::from(n) { ',' } else { '"' };
                    let _ = write!(o, "{code} {jt} {jf} {k}{tail}");
                }
            }
            1 => {
                let _ = write!(o, " --object-pinned {}", str_at(d, 8, 512)?);
            }
            _ => return None,
        }
        Some(())
    }),
    ("u32", 0, 0, |o, _, d, _| u32_match(o, d)),
    ("osf", 0, 0, |o, _, d, _| {
        // xt_osf_info: genre[32], len, flags (genre, ttl, log, invert), loglevel, ttl.
        let (flags, log, ttl) = (u32_at(d, 36)?, u32_at(d, 40)?, u32_at(d, 44)?);
        inv(o, flags & 0x8 != 0);
        let _ = write!(o, " --genre {}", str_at(d, 0, 32)?);
        if flags & 0x2 != 0 {
            let _ = write!(o, " --ttl {ttl}");
        }
        if flags & 0x4 != 0 {
            let _ = write!(o, " --log {log}");
        }
        Some(())
    }),
];

pub(super) const TARGETS: &[Row] = &[
    ("AUDIT", 0, 0, |o, _, d, _| {
        if let Some(t) = ["accept", "drop", "reject"].get(usize::from(u8_at(d, 0)?)) {
            let _ = write!(o, " --type {t}");
        }
        Some(())
    }),
    ("CONNSECMARK", 0, 0, |o, _, d, _| {
        match u8_at(d, 0)? {
            1 => o.push_str(" --save"),
            2 => o.push_str(" --restore"),
            _ => return None,
        }
        Some(())
    }),
];

/// `xt_u32`: tests[11] of 180 bytes (location[11] as number and next operator, value[11] as
/// min and max, nnums, nvalues), ntests, invert.
fn u32_match(o: &mut String, d: &[u8]) -> Option<()> {
    const TEST: usize = 180;
    let (ntests, invert) = (usize::from(u8_at(d, 11 * TEST)?), u8_at(d, 11 * TEST + 1)?);
    inv(o, invert != 0);
    o.push_str(" --u32 \"");
    for t in 0..ntests.min(11) {
        let at = t * TEST;
        let (nnums, nvalues) = (
            usize::from(u8_at(d, at + 176)?),
            usize::from(u8_at(d, at + 177)?),
        );
        if t > 0 {
            o.push_str("&&");
        }
        for i in 0..nnums.clamp(1, 11) {
            let (number, op) = (u32_at(d, at + 8 * i)?, u8_at(d, at + 8 * i + 4)?);
            if i > 0 {
                o.push_str(["&", "<<", ">>", "@"].get(usize::from(op)).unwrap_or(&""));
            }
            let _ = write!(o, "0x{number:x}");
        }
        o.push('=');
        for i in 0..nvalues.min(11) {
            let (min, max) = (u32_at(d, at + 88 + 8 * i)?, u32_at(d, at + 92 + 8 * i)?);
            if i > 0 {
                o.push(',');
            }
            if min == max {
                let _ = write!(o, "0x{min:x}");
            } else {
                let _ = write!(o, "0x{min:x}:0x{max:x}");
            }
        }
    }
    o.push('"');
    Some(())
}
