//! Snapshots stored as frames (layout 3). A snapshot's whole ruleset (one namespace, one
//! backend) is one zstd frame in `snap_frames`: a *key* frame holds it whole; a *delta* frame is
//! compressed with the ruleset of the frame before it (its `base`, the pair's previous snapshot)
//! as its prefix, so what did not change since costs a few bytes per long match (zstd's
//! long-distance matcher finds them across the whole table) and what changed costs its new
//! bytes. Reading a snapshot decompresses its key and the deltas after it, in order: at most
//! [`MAX_DEPTH`] of them, each a few milliseconds for a 20,000-rule table (only the last one is
//! parsed). A snapshot equal to the one before shares its frame.
//!
//! A chain is short (a few hundred bytes), too short for zstd to find much in it alone, and
//! consecutive snapshots of a table share nearly everything: on a week of kube-proxy churn over
//! a 21,000-rule table, storing each changed chain on its own (layout 2, still read by
//! [`super::snapshots`]) cost several times what these frames do (BENCHMARKS.md).

use std::collections::{HashMap, HashSet};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use zstd::zstd_safe::{CCtx, CParameter, DCtx, DParameter};

use super::model::Tables;
use super::ForensicsError;
use crate::ruleset::Backend;

/// zstd's level for deltas (written every snapshot) and for keys (written seldom, read by every
/// snapshot after them).
const DELTA_LEVEL: i32 = 3;
const KEY_LEVEL: i32 = 9;

/// Deltas after a key before the next snapshot is a key again: a snapshot is read with at most
/// this many deltas decompressed after its key.
pub const MAX_DEPTH: i64 = 11;

/// A frame further than this from its key is damage (bases that loop), not a record this
/// observer or an earlier one wrote.
const MAX_FRAMES_READ: usize = 4096;

/// The largest window a frame is written with (128 MiB, what a decoder accepts by default): a
/// larger table still compresses, finding less of its base.
const WINDOW_LOG_MAX: u32 = 27;

/// The largest ruleset a snapshot holds (about two million rules); a frame claiming more is
/// damage, not a table, and a larger ruleset is not snapshotted (its changes still are).
const MAX_BYTES: u64 = 256 << 20;

/// A snapshot's content: the namespace's name and its tables.
#[derive(Serialize)]
struct Content<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    netns_name: Option<&'a str>,
    tables: &'a Tables,
}

/// [`Content`] read back.
#[derive(Deserialize)]
pub struct Stored {
    #[serde(default)]
    pub netns_name: Option<String>,
    pub tables: Tables,
}

pub(super) fn sql_err(e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(e))
}

/// Why zstd could not write a delta or read a frame back.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// zstd refused a parameter, the base or the data (its error's name).
    #[error("{}", zstd::zstd_safe::get_error_name(*.0))]
    Zstd(zstd::zstd_safe::ErrorCode),
    /// The frame's header gives no size a snapshot may have.
    #[error(transparent)]
    Size(#[from] crate::store::FrameSizeError),
}

/// Why a snapshot's frames do not give its content back: the cause of the snapshot's
/// [`ForensicsError::Damaged`].
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A frame's row could not be read.
    #[error(transparent)]
    Query(#[from] rusqlite::Error),
    /// A frame of the chain from the snapshot's frame to its key is not in the record.
    #[error("its frame {0} is missing")]
    Missing(i64),
    /// The bases lead further than a key ever is from its deltas (they loop).
    #[error("frame {0} is more than {MAX_FRAMES_READ} frames from a key (a loop)")]
    Loop(i64),
    /// A frame of the chain does not decompress.
    #[error("its frame {frame}: {cause}")]
    Decompress {
        frame: i64,
        #[source]
        cause: CodecError,
    },
    /// No frame was read (cannot happen: the snapshot's own frame is read first).
    #[error("no frame")]
    NoFrame,
}

/// The window that covers a base and the content after it.
fn window_log(bytes: usize) -> u32 {
    let log = usize::BITS - bytes.max(1).saturating_sub(1).leading_zeros();
    log.clamp(10, WINDOW_LOG_MAX)
}

/// `content` compressed with `base` as its prefix.
fn delta(content: &[u8], base: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut c = CCtx::create();
    let set = |c: &mut CCtx, p| c.set_parameter(p).map(|_| ()).map_err(CodecError::Zstd);
    set(&mut c, CParameter::CompressionLevel(DELTA_LEVEL))?;
    set(&mut c, CParameter::EnableLongDistanceMatching(true))?;
    set(
        &mut c,
        CParameter::WindowLog(window_log(base.len() + content.len())),
    )?;
    set(&mut c, CParameter::ContentSizeFlag(true))?;
    c.ref_prefix(base).map_err(CodecError::Zstd)?;
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(content.len()));
    c.compress2(&mut out, content).map_err(CodecError::Zstd)?;
    Ok(out)
}

/// A frame decompressed, with its base's content as prefix when it is a delta.
fn decompress(frame: &[u8], base: Option<&[u8]>) -> Result<Vec<u8>, CodecError> {
    let mut d = DCtx::create();
    d.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
        .map_err(CodecError::Zstd)?;
    if let Some(b) = base {
        d.ref_prefix(b).map_err(CodecError::Zstd)?;
    }
    let size = crate::store::frame_size_at_most(frame, MAX_BYTES)?;
    let mut out = Vec::with_capacity(size);
    d.decompress(&mut out, frame).map_err(CodecError::Zstd)?;
    Ok(out)
}

/// A `snap_frames` row: its base and its frame.
fn frame_row(conn: &Connection, id: i64) -> rusqlite::Result<Option<(Option<i64>, Vec<u8>)>> {
    conn.prepare_cached("SELECT base, body FROM snap_frames WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

/// Frame `id`'s content (JSON): its key decompressed, then each delta after it in turn.
fn content_of(conn: &Connection, id: i64) -> Result<Vec<u8>, FrameError> {
    let mut frames = Vec::new();
    let mut next = Some(id);
    while let Some(f) = next {
        let (base, body) = frame_row(conn, f)?.ok_or(FrameError::Missing(f))?;
        frames.push((f, body));
        if frames.len() > MAX_FRAMES_READ {
            return Err(FrameError::Loop(id));
        }
        next = base;
    }
    let mut content: Option<Vec<u8>> = None;
    for (f, body) in frames.iter().rev() {
        let c = decompress(body, content.as_deref())
            .map_err(|cause| FrameError::Decompress { frame: *f, cause })?;
        content = Some(c);
    }
    content.ok_or(FrameError::NoFrame)
}

/// The frame a pair's newest snapshot uses, and how many deltas it is from its key.
fn newest_frame(
    conn: &Connection,
    netns: u32,
    backend: Backend,
) -> rusqlite::Result<Option<(i64, i64)>> {
    conn.query_row(
        "SELECT f.id, f.depth FROM snapshots s JOIN snap_frames f ON f.id = s.frame \
         WHERE s.netns = ?1 AND s.backend = ?2 ORDER BY s.seq DESC, s.id DESC LIMIT 1",
        params![netns, backend.as_str()],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
}

/// Write one snapshot (inside the writer's transaction): the same frame as the pair's newest
/// snapshot when nothing changed, a delta of it, or a new key after [`MAX_DEPTH`] deltas (or
/// when the newest cannot be read).
pub fn insert(
    conn: &Connection,
    seq: u64,
    time_ns: i64,
    netns: u32,
    netns_name: Option<&str>,
    backend: Backend,
    tables: &Tables,
) -> rusqlite::Result<()> {
    let content = serde_json::to_vec(&Content { netns_name, tables }).map_err(sql_err)?;
    if content.len() as u64 > MAX_BYTES {
        tracing::warn!(
            "namespace {netns}'s {} ruleset is {} MiB, more than a snapshot holds ({} MiB): not \
             snapshotted; `query --at` replays its changes from an earlier snapshot",
            backend.as_str(),
            content.len() >> 20,
            MAX_BYTES >> 20
        );
        return Ok(());
    }
    let mut frame = None;
    if let Some((id, depth)) = newest_frame(conn, netns, backend)? {
        match content_of(conn, id) {
            Ok(base) if base == content => frame = Some(id),
            Ok(base) if depth < MAX_DEPTH => {
                let body = delta(&content, &base).map_err(sql_err)?;
                conn.prepare_cached(
                    "INSERT INTO snap_frames (base, depth, body) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![id, depth + 1, body])?;
                frame = Some(conn.last_insert_rowid());
            }
            Ok(_) => {}
            // This snapshot is a new key; the one before stays as it is.
            Err(e) => tracing::warn!("the record's snapshot frame {id} cannot be read ({e})"),
        }
    }
    let frame = match frame {
        Some(f) => f,
        None => {
            let body = zstd::bulk::compress(&content, KEY_LEVEL).map_err(sql_err)?;
            conn.prepare_cached(
                "INSERT INTO snap_frames (base, depth, body) VALUES (NULL, 0, ?1)",
            )?
            .execute([body])?;
            conn.last_insert_rowid()
        }
    };
    conn.prepare_cached(
        "INSERT INTO snapshots (seq, time_ns, netns, backend, body, frame) \
         VALUES (?1, ?2, ?3, ?4, x'', ?5)",
    )?
    .execute(params![seq as i64, time_ns, netns, backend.as_str(), frame])?;
    Ok(())
}

/// Snapshot `id`'s content, from its frame `frame`.
pub fn load(conn: &Connection, id: i64, frame: i64) -> Result<Stored, ForensicsError> {
    let damaged = |cause: String| ForensicsError::Damaged {
        what: format!("snapshot {id}"),
        cause,
    };
    let json = content_of(conn, frame).map_err(|e| damaged(e.to_string()))?;
    serde_json::from_slice(&json).map_err(|e| damaged(e.to_string()))
}

/// Frames that no snapshot uses, and that no frame in use is a delta of, go.
pub fn sweep(conn: &Connection) -> rusqlite::Result<()> {
    let bases: HashMap<i64, Option<i64>> = conn
        .prepare("SELECT id, base FROM snap_frames")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut used = HashSet::new();
    let mut stmt = conn.prepare("SELECT DISTINCT frame FROM snapshots WHERE frame IS NOT NULL")?;
    for f in stmt.query_map([], |r| r.get::<_, i64>(0))? {
        let mut next = Some(f?);
        while let Some(id) = next {
            if !used.insert(id) {
                break;
            }
            next = bases.get(&id).copied().flatten();
        }
    }
    let mut del = conn.prepare_cached("DELETE FROM snap_frames WHERE id = ?1")?;
    for id in bases.keys().filter(|id| !used.contains(id)) {
        del.execute([id])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forensics::model::{Chain, Table};
    use crate::ruleset::Family;

    /// A nat table of `n` endpoint chains whose addresses differ from chain to chain.
    fn nat(n: usize, seed: usize) -> Tables {
        let mut t = Table::new(Family::Ip, "nat");
        t.chains = (0..n)
            .map(|i| Chain {
                name: format!("KUBE-SEP-{i:016X}"),
                head: None,
                rules: (0..4)
                    .map(|r| {
                        let x = (i * 7919 + r * 104_729 + seed).wrapping_mul(2_654_435_761) >> 7;
                        format!(
                            "-s 10.{}.{}.{}/32 -m comment --comment \"svc-{i}\" -j KUBE-MARK-MASQ",
                            x % 251,
                            (x >> 8) % 251,
                            (x >> 16) % 251
                        )
                    })
                    .collect(),
                last: None,
            })
            .collect();
        Tables { tables: vec![t] }
    }

    fn record() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(crate::store::SNAPSHOT_SCHEMA).unwrap();
        conn
    }

    /// Namespace 7's snapshots: (id, frame).
    fn snapshots(conn: &Connection) -> Vec<(i64, i64)> {
        conn.prepare("SELECT id, frame FROM snapshots WHERE netns = 7 ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// Every frame: (id, base, depth, length).
    fn frames(conn: &Connection) -> Vec<(i64, Option<i64>, i64, usize)> {
        conn.prepare("SELECT id, base, depth, length(body) FROM snap_frames ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn read(conn: &Connection, (id, frame): (i64, i64)) -> Tables {
        load(conn, id, frame).unwrap().tables
    }

    fn put(conn: &Connection, seq: u64, t: &Tables) {
        insert(conn, seq, seq as i64, 7, Some("ns"), Backend::Legacy, t).unwrap();
    }

    #[test]
    fn a_snapshot_that_changed_little_is_a_small_delta_of_the_one_before() {
        let conn = record();
        let first = nat(2000, 1);
        put(&conn, 1, &first);
        let mut second = first.clone();
        second.tables[0].chains[17].rules[2] = "-s 172.16.0.9/32 -j KUBE-MARK-MASQ".into();
        second.tables[0].chains.remove(1500);
        put(&conn, 2, &second);
        let mut third = second.clone();
        third.tables[0].chains[3].rules.clear();
        put(&conn, 3, &third);
        // Nothing changed: the same frame.
        put(&conn, 4, &third);
        let f = frames(&conn);
        assert_eq!(f.len(), 3, "{f:?}");
        assert_eq!((f[0].1, f[0].2), (None, 0), "the first is a key");
        assert_eq!((f[1].1, f[1].2), (Some(f[0].0), 1), "a delta of the first");
        assert_eq!((f[2].1, f[2].2), (Some(f[1].0), 2), "a delta of the second");
        assert!(
            f[1].3 * 50 < f[0].3,
            "a delta of {} B against a key of {} B",
            f[1].3,
            f[0].3
        );
        let s = snapshots(&conn);
        assert_eq!(s[3].1, s[2].1, "an unchanged snapshot shares its frame");
        for (snap, want) in s.iter().zip([&first, &second, &third, &third]) {
            assert_eq!(&read(&conn, *snap), want);
        }
        assert_eq!(
            load(&conn, s[0].0, s[0].1).unwrap().netns_name.as_deref(),
            Some("ns")
        );
    }

    #[test]
    fn a_key_comes_after_max_depth_deltas_and_frames_in_use_are_kept() {
        let conn = record();
        let mut t = nat(300, 1);
        let mut all = Vec::new();
        for seq in 0..(MAX_DEPTH as u64 + 3) {
            t.tables[0].chains[seq as usize].rules.pop();
            put(&conn, seq + 1, &t);
            all.push(t.clone());
        }
        let f = frames(&conn);
        let depths: Vec<i64> = f.iter().map(|r| r.2).collect();
        let mut want: Vec<i64> = (0..=MAX_DEPTH).collect();
        want.extend([0, 1]);
        assert_eq!(depths, want);
        let s = snapshots(&conn);
        for (snap, want) in s.iter().zip(&all) {
            assert_eq!(&read(&conn, *snap), want);
        }
        // Retention keeps only the last three snapshots: the second key's chain and the
        // frames the third-last needs (its key and every delta before it) stay.
        let third_last = s[s.len() - 3];
        conn.execute("DELETE FROM snapshots WHERE id < ?1", [third_last.0])
            .unwrap();
        sweep(&conn).unwrap();
        let kept: Vec<i64> = frames(&conn).iter().map(|r| r.0).collect();
        assert_eq!(
            kept,
            f.iter().map(|r| r.0).collect::<Vec<_>>(),
            "all in use"
        );
        conn.execute("DELETE FROM snapshots WHERE id < ?1", [s[s.len() - 2].0])
            .unwrap();
        sweep(&conn).unwrap();
        let kept: Vec<i64> = frames(&conn).iter().map(|r| r.0).collect();
        assert_eq!(
            kept,
            vec![f[f.len() - 2].0, f[f.len() - 1].0],
            "the first chain went"
        );
        assert_eq!(read(&conn, s[s.len() - 1]), all[all.len() - 1]);
    }

    #[test]
    fn a_snapshot_whose_frame_is_gone_or_damaged_is_a_clear_error() {
        let conn = record();
        put(&conn, 1, &nat(50, 1));
        put(&conn, 2, &nat(50, 2));
        let s = snapshots(&conn)[1];
        let f = frames(&conn);
        conn.execute(
            "UPDATE snap_frames SET body = x'00010203' WHERE id = ?1",
            [f[0].0],
        )
        .unwrap();
        let err = load(&conn, s.0, s.1)
            .err()
            .expect("a damaged key")
            .to_string();
        assert!(
            err.contains("its frame") && err.contains("damaged"),
            "{err}"
        );
        conn.execute("DELETE FROM snap_frames WHERE id = ?1", [f[0].0])
            .unwrap();
        let err = load(&conn, s.0, s.1).err().expect("no key").to_string();
        assert!(err.contains("is missing"), "{err}");
    }

    #[test]
    fn frames_whose_bases_loop_are_damage_not_a_hang() {
        let conn = record();
        put(&conn, 1, &nat(20, 1));
        put(&conn, 2, &nat(20, 2));
        let s = snapshots(&conn)[1];
        let f = frames(&conn);
        conn.execute(
            "UPDATE snap_frames SET base = ?1 WHERE id = ?2",
            [f[1].0, f[0].0],
        )
        .unwrap();
        let err = load(&conn, s.0, s.1).err().expect("a loop").to_string();
        assert!(err.contains("a loop") && err.contains("damaged"), "{err}");
    }

    #[test]
    fn a_damaged_frame_says_why_in_the_words_it_had() {
        let code = DCtx::create()
            .decompress(&mut Vec::with_capacity(64), &[0; 16])
            .unwrap_err();
        // zstd's own name for the error, nothing around it.
        let name = zstd::zstd_safe::get_error_name(code);
        let garbage = || CodecError::Zstd(code);
        assert_eq!(garbage().to_string(), name);
        let size = || CodecError::Size(crate::store::FrameSizeError);
        assert_eq!(size().to_string(), "no usable size in its compressed frame");
        let cases = [
            (FrameError::Missing(4), "its frame 4 is missing".to_string()),
            (
                FrameError::Loop(9),
                "frame 9 is more than 4096 frames from a key (a loop)".to_string(),
            ),
            (
                FrameError::Decompress {
                    frame: 3,
                    cause: garbage(),
                },
                format!("its frame 3: {name}"),
            ),
            (
                FrameError::Decompress {
                    frame: 3,
                    cause: size(),
                },
                "its frame 3: no usable size in its compressed frame".to_string(),
            ),
            (FrameError::NoFrame, "no frame".to_string()),
            (
                FrameError::Query(rusqlite::Error::QueryReturnedNoRows),
                rusqlite::Error::QueryReturnedNoRows.to_string(),
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn windows_cover_base_and_content() {
        assert_eq!(window_log(1), 10);
        assert_eq!(window_log(5 << 20), 23);
        assert_eq!(window_log(1 << 23), 23);
        assert_eq!(window_log(usize::MAX), WINDOW_LOG_MAX);
    }
}
