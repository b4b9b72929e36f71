//! Part 4 of `cargo xtask bench`: the memory of `observer tail` tracking the 20,000-rule table
//! (VmRSS at the ready line, when one change's line arrives, once it is handled, and VmHWM),
//! and that change's latency: with the default ring buffer, where the table is read back after
//! the change, and with one large enough for the eBPF side to copy the writer's table.

use std::{path::Path, thread, time::Duration};

use anyhow::Result;
use serde_json::Value;

use super::{
    netns::Netns,
    not_measured,
    procfs::status_kib,
    row,
    spawn::{is_change, run_timed, Observer},
    stats::{mib, ms, signed_ms},
    table::BigTable,
    Row, BIG_EVENT_TIMEOUT,
};

/// The ring buffer under which the big table (7.5 MB) is copied from the writer: 16 MiB, of
/// which half may hold one table.
pub(super) const COPYING_RING: u32 = 16 << 20;

pub(super) struct Rss {
    /// The default ring buffer (4 MiB): the table is read back.
    read: One,
    /// `--ringbuf-size` [`COPYING_RING`]: the writer's copy.
    copied: Result<One, String>,
}

struct One {
    ready_kib: u64,
    /// When the change's line arrived: the table before and after the change both still held.
    rss_kib: u64,
    /// 300 ms later, once the change is handled and the older copy freed.
    settled_kib: u64,
    hwm_kib: u64,
    /// From the writer's exit to observer's line, for this change of the big table.
    latency_ms: f64,
    command_ms: f64,
    /// Change lines printed for that one change (1 expected).
    lines: usize,
}

pub(super) fn rss(
    bin: &Path,
    ns: &Netns,
    table: &BigTable,
    notes: &mut Vec<String>,
) -> Result<Rss> {
    let read = one(bin, ns, table, "OBSB-RSS", &[], notes)?;
    let ring = COPYING_RING.to_string();
    let copied = one(
        bin,
        ns,
        table,
        "OBSB-RSS2",
        &["--ringbuf-size", &ring],
        notes,
    )
    .map_err(|e| format!("{e:#}"));
    Ok(Rss { read, copied })
}

fn one(
    bin: &Path,
    ns: &Netns,
    table: &BigTable,
    chain: &str,
    extra: &[&str],
    notes: &mut Vec<String>,
) -> Result<One> {
    let mut args = vec!["tail", "--json", "--netns", &ns.name];
    args.extend_from_slice(extra);
    let mut obs = Observer::start(bin, &args, "rss")?;
    let ready_kib = status_kib(obs.pid, "VmRSS:")?;
    obs.drain();
    let (done, took) = run_timed(&mut ns.legacy(&["-N", chain]))?;
    let (at, v) = obs.wait(
        BIG_EVENT_TIMEOUT,
        &format!(
            "legacy chain_create line for {chain} (table of {} rules)",
            table.rules
        ),
        |v| is_change(v, "legacy", "chain_create", chain),
    )?;
    let rss_kib = status_kib(obs.pid, "VmRSS:")?;
    let hwm_kib = status_kib(obs.pid, "VmHWM:")?;
    // Count the lines of that change: those that came before it, and any that follow at once.
    thread::sleep(Duration::from_millis(300));
    let settled_kib = status_kib(obs.pid, "VmRSS:")?;
    let txn = v["txn"].clone();
    let same = |x: &Value| !txn.is_null() && x["kind"] == "change" && x["txn"] == txn;
    let before = obs.skipped.iter().filter(|x| same(x)).count();
    let after = obs
        .drain()
        .into_iter()
        .filter(|(_, l)| serde_json::from_str::<Value>(l).is_ok_and(|x| same(&x)))
        .count();
    obs.finish("rss", notes);
    Ok(One {
        ready_kib,
        rss_kib,
        settled_kib,
        hwm_kib,
        latency_ms: signed_ms(at, done),
        command_ms: ms(took),
        lines: before + 1 + after,
    })
}

/// Part 4's lines of the report.
pub(super) fn rows(rss: &Result<Rss, String>, rows: &mut Vec<Row>) {
    match rss {
        Ok(Rss { read: r, copied }) => {
            rows.push(row(
                "4. RSS on the big table",
                format!(
                    "VmRSS {} once one change is handled ({} when its line arrived, both \
                     copies of the table still held; VmHWM {}; {} at the ready line)",
                    mib(r.settled_kib),
                    mib(r.rss_kib),
                    mib(r.hwm_kib),
                    mib(r.ready_kib)
                ),
                "RSS < 32 MiB, HWM < 48 MiB",
            ));
            rows.push(row(
                "4. latency of that change",
                format!(
                    "{:.1} ms after the writer exited (iptables-legacy -N itself: {:.0} ms); {} line(s) for it",
                    r.latency_ms, r.command_ms, r.lines
                ),
                "",
            ));
            let label = "4. the same with --ringbuf-size 16 MiB (the writer's copy)";
            rows.push(match copied {
                Ok(c) => row(
                    label,
                    format!(
                        "latency {:.1} ms after the writer exited (iptables-legacy -N itself: \
                         {:.0} ms; {} line(s)); VmRSS {} once handled, VmHWM {} (the ring \
                         buffer is mapped twice: +24 MiB against the default 4 MiB)",
                        c.latency_ms,
                        c.command_ms,
                        c.lines,
                        mib(c.settled_kib),
                        mib(c.hwm_kib)
                    ),
                    "",
                ),
                Err(e) => row(label, not_measured(e), ""),
            });
        }
        Err(e) => rows.push(row(
            "4. RSS on the big table",
            not_measured(e),
            "RSS < 32 MiB, HWM < 48 MiB",
        )),
    }
}
