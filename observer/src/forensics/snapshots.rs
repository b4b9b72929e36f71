//! Snapshots in the record, and the ruleset at a moment rebuilt from them.
//!
//! A snapshot is one namespace's tables of one backend after change `seq`. Snapshots are
//! written as frames, each a delta of the one before or a key ([`super::frames`], layout 3).
//! Records written before keep their snapshots as layout 2 wrote them, and they are read as
//! they are: the row holds the tables with each chain named by the hash of its content, the
//! chains kept once in `snap_chains`, zstd-compressed with a dictionary trained on the first
//! large snapshot (`snap_dicts`), or as a delta of the chain's full version (its `base`, never
//! another delta), so that a chain is read with at most two frames.

use std::collections::{BTreeMap, HashMap};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::model::{Chain, Set, Table, Tables};
use super::replay::{replay, Recorded};
use super::ForensicsError;
use crate::ruleset::{Backend, Family, Op};
use crate::store::{self, Selection};

/// Change times may run a little behind the snapshot taken after them (a legacy change's time is
/// the kernel's, its snapshot's the engine's): changes after a snapshot are looked for from this
/// long before it.
const SLACK_NS: i64 = 60_000_000_000;

/// A snapshot's row body: the tables, chains by content hash.
#[derive(Serialize, Deserialize)]
struct Body {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns_name: Option<String>,
    tables: Vec<BodyTable>,
}

#[derive(Serialize, Deserialize)]
struct BodyTable {
    family: Family,
    name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sets: Vec<Set>,
    chains: Vec<i64>,
}

fn decompress(what: &str, bytes: &[u8]) -> Result<Vec<u8>, ForensicsError> {
    zstd::stream::decode_all(bytes).map_err(|e| ForensicsError::Damaged {
        what: what.to_string(),
        cause: e.to_string(),
    })
}

/// A stored chain's JSON: its frame decompressed, with the dictionary its row names if any.
fn read_chain(
    frames: &mut store::DictFrames,
    conn: &Connection,
    what: &str,
    body: &[u8],
    dict: Option<i64>,
) -> Result<Vec<u8>, ForensicsError> {
    let Some(id) = dict else {
        return decompress(what, body);
    };
    frames
        .decompress(conn, "snap_dicts", id, body)?
        .map_err(|e| ForensicsError::Damaged {
            what: format!("{what}, a chain"),
            cause: e.to_string(),
        })
}

/// Reads stored chain versions: the record's dictionaries and one decompressor for deltas, each
/// loaded once; the rows through one prepared statement.
struct ChainReader<'c> {
    conn: &'c Connection,
    get: rusqlite::CachedStatement<'c>,
    frames: store::DictFrames,
    deltas: zstd::zstd_safe::DCtx<'static>,
}

/// A `snap_chains` row: its frame, its dictionary, its base.
type ChainRow = (Vec<u8>, Option<i64>, Option<i64>);

impl<'c> ChainReader<'c> {
    fn new(conn: &'c Connection) -> rusqlite::Result<ChainReader<'c>> {
        Ok(ChainReader {
            conn,
            get: conn.prepare_cached("SELECT body, dict, base FROM snap_chains WHERE hash = ?1")?,
            frames: store::DictFrames::default(),
            deltas: zstd::zstd_safe::DCtx::create(),
        })
    }

    fn row(&mut self, h: i64) -> rusqlite::Result<Option<ChainRow>> {
        self.get
            .query_row([h], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()
    }

    /// A chain version's JSON, by its hash: its row's frame, or, for a delta, its base's JSON
    /// and the delta decompressed with it. `None`: no such row.
    fn json(&mut self, what: &str, h: i64) -> Result<Option<Vec<u8>>, ForensicsError> {
        let Some((body, dict, base)) = self.row(h)? else {
            return Ok(None);
        };
        let Some(b) = base else {
            return read_chain(&mut self.frames, self.conn, what, &body, dict).map(Some);
        };
        let damaged = |cause: String| ForensicsError::Damaged {
            what: format!("{what}, chain {h:x}"),
            cause,
        };
        let (base_body, base_dict, base_base) = self
            .row(b)?
            .ok_or_else(|| damaged(format!("its base {b:x} is missing")))?;
        if base_base.is_some() {
            return Err(damaged(format!("its base {b:x} is itself a delta")));
        }
        let base_json = read_chain(&mut self.frames, self.conn, what, &base_body, base_dict)?;
        let size = store::frame_size(&body).map_err(|e| damaged(e.to_string()))?;
        // The base is loaded into the context for this one frame (no prepared dictionary:
        // each base serves one delta here).
        let mut out = Vec::with_capacity(size);
        self.deltas
            .decompress_using_dict(&mut out, &body, &base_json)
            .map_err(|code| {
                damaged(format!(
                    "decompressing its delta: {}",
                    zstd::zstd_safe::get_error_name(code)
                ))
            })?;
        Ok(Some(out))
    }
}

/// Whether the record has snapshot tables (a record written before them has none).
pub fn has_snapshots(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'snapshots'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// A snapshot read back.
struct Base {
    seq: u64,
    time_ns: i64,
    netns_name: Option<String>,
    tables: Tables,
}

fn load(conn: &Connection, id: i64) -> Result<Base, ForensicsError> {
    // A layout 2 record read as it is (`query`) has no `frame` column: every snapshot is
    // layout 2's.
    let framed: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('snapshots') WHERE name = 'frame'",
        [],
        |r| r.get(0),
    )?;
    let sql = if framed > 0 {
        "SELECT seq, time_ns, body, frame FROM snapshots WHERE id = ?1"
    } else {
        "SELECT seq, time_ns, body, NULL FROM snapshots WHERE id = ?1"
    };
    let (seq, time_ns, blob, frame): (i64, i64, Vec<u8>, Option<i64>) =
        conn.query_row(sql, [id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
    if let Some(frame) = frame {
        let stored = super::frames::load(conn, id, frame)?;
        return Ok(Base {
            seq: seq as u64,
            time_ns,
            netns_name: stored.netns_name,
            tables: stored.tables,
        });
    }
    let what = format!("snapshot {id}");
    let body: Body = serde_json::from_slice(&decompress(&what, &blob)?).map_err(|e| {
        ForensicsError::Damaged {
            what: what.clone(),
            cause: e.to_string(),
        }
    })?;
    // Each chain read once, in the order of the table's key: a snapshot's chains (thousands,
    // scattered among every snapshot's) are then met in one pass over the file, not in a jump
    // per chain.
    let mut uses: HashMap<i64, usize> = HashMap::new();
    for h in body.tables.iter().flat_map(|t| &t.chains) {
        *uses.entry(*h).or_default() += 1;
    }
    let mut wanted: Vec<i64> = uses.keys().copied().collect();
    wanted.sort_unstable();
    let mut reader = ChainReader::new(conn)?;
    let mut read: HashMap<i64, Chain> = HashMap::with_capacity(wanted.len());
    for h in wanted {
        let json = reader
            .json(&what, h)?
            .ok_or_else(|| ForensicsError::Damaged {
                what: what.clone(),
                cause: format!("its chain {h:x} is missing"),
            })?;
        let c: Chain = serde_json::from_slice(&json).map_err(|e| ForensicsError::Damaged {
            what: what.clone(),
            cause: e.to_string(),
        })?;
        read.insert(h, c);
    }
    let mut tables = Tables::default();
    for t in body.tables {
        let chains = t
            .chains
            .iter()
            // The same chain in two places (an empty chain of one name in two tables): the
            // last use takes it, the others get a copy.
            .filter_map(|h| {
                let left = uses.get_mut(h)?;
                *left -= 1;
                if *left == 0 {
                    read.remove(h)
                } else {
                    read.get(h).cloned()
                }
            })
            .collect();
        tables.tables.push(Table {
            family: t.family,
            name: t.name,
            sets: t.sets,
            chains,
        });
    }
    Ok(Base {
        seq: seq as u64,
        time_ns,
        netns_name: body.netns_name,
        tables,
    })
}

/// The ruleset of one backend in one namespace at a moment.
#[derive(Debug, Clone, Serialize)]
pub struct State {
    pub netns: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_name: Option<String>,
    pub backend: Backend,
    /// The snapshot it was built from (seq), if any, and how many changes were replayed on it.
    pub snapshot_seq: Option<u64>,
    pub replayed: usize,
    #[serde(flatten)]
    pub tables: Tables,
}

crate::output::people::texts!(State: netns_name, tables);

/// The last change at or before `at_ns` (0: none), or the snapshot standing for it.
pub fn seq_at(conn: &Connection, at_ns: i64) -> Result<u64, ForensicsError> {
    let s: Option<i64> = conn.query_row(
        "SELECT MAX(seq) FROM changes WHERE time_ns <= ?1",
        [at_ns],
        |r| r.get(0),
    )?;
    // The changes before a snapshot may have gone (retention): the snapshot stands for them.
    let snap: Option<i64> = if has_snapshots(conn)? {
        conn.query_row(
            "SELECT MAX(seq) FROM snapshots WHERE time_ns <= ?1",
            [at_ns],
            |r| r.get(0),
        )?
    } else {
        None
    };
    Ok(s.max(snap).unwrap_or(0) as u64)
}

/// Every namespace's ruleset (or only `netns`'s) after change `seq`, from snapshots taken no
/// later than `at_ns`.
pub fn states(
    conn: &Connection,
    seq: u64,
    at_ns: i64,
    netns: Option<u32>,
) -> Result<Vec<State>, ForensicsError> {
    let mut bases: BTreeMap<(u32, String), i64> = BTreeMap::new();
    if has_snapshots(conn)? {
        let mut stmt = conn.prepare(
            "SELECT netns, backend, id FROM snapshots s WHERE seq <= ?1 AND time_ns <= ?2 \
             AND (?3 IS NULL OR netns = ?3) AND id = (SELECT id FROM snapshots t \
             WHERE t.netns = s.netns AND t.backend = s.backend AND t.seq <= ?1 \
             AND t.time_ns <= ?2 ORDER BY t.seq DESC, t.time_ns DESC LIMIT 1)",
        )?;
        let rows = stmt.query_map(params![seq as i64, at_ns, netns], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for r in rows {
            let (n, b, id) = r?;
            bases.insert((n, b), id);
        }
    }
    let mut out = Vec::new();
    if bases.is_empty() {
        // A record without snapshots (written before them): replay every change.
        let sel = Selection {
            netns,
            before: Some(seq.saturating_add(1)),
            ..Selection::default()
        };
        let mut by_pair: BTreeMap<(u32, Backend), (Option<String>, Vec<Recorded>)> =
            BTreeMap::new();
        for row in store::select_changes(conn, &sel)? {
            let (c, name) = decode(row.number, &row.json)?;
            let e = by_pair.entry((c.netns, c.backend)).or_default();
            e.0 = e.0.take().or(name);
            e.1.push(c);
        }
        for ((n, b), (name, changes)) in by_pair {
            if b == Backend::Ipset {
                continue;
            }
            let mut tables = Tables::default();
            let replayed = replay(&mut tables, &changes);
            out.push(State {
                netns: n,
                netns_name: name,
                backend: b,
                snapshot_seq: None,
                replayed,
                tables,
            });
        }
        return Ok(out);
    }
    for ((n, b), id) in bases {
        let base = load(conn, id)?;
        let backend = if b == "nft" {
            Backend::Nft
        } else {
            Backend::Legacy
        };
        let sel = Selection {
            netns: Some(n),
            backend: Some(b.clone()),
            since_ns: Some(base.time_ns.saturating_sub(SLACK_NS)),
            // Bounded above too: the time index is then read over the hour after the snapshot,
            // not to the end of the record (a moment early in a week's record read every later
            // change's row to filter it out).
            until_ns: Some(at_ns.saturating_add(SLACK_NS)),
            after: Some(base.seq),
            before: Some(seq.saturating_add(1)),
            ..Selection::default()
        };
        let mut changes = Vec::new();
        let mut name = base.netns_name.clone();
        for row in store::select_changes(conn, &sel)? {
            let (c, nm) = decode(row.number, &row.json)?;
            name = name.or(nm);
            changes.push(c);
        }
        let mut tables = base.tables;
        let replayed = replay(&mut tables, &changes);
        out.push(State {
            netns: n,
            netns_name: name,
            backend,
            snapshot_seq: Some(base.seq),
            replayed,
            tables,
        });
    }
    Ok(out)
}

/// A stored change line, and its namespace's name.
fn decode(seq: u64, json: &str) -> Result<(Recorded, Option<String>), ForensicsError> {
    let mut c: Recorded = serde_json::from_str(json).map_err(|e| ForensicsError::Damaged {
        what: format!("change {seq}"),
        cause: e.to_string(),
    })?;
    let name = c.netns_name.take();
    Ok((c, name))
}

/// Before changes up to `seq` are deleted (retention, `--max-record`): each namespace's state
/// after `seq` becomes a snapshot, the older snapshots go, and chains no snapshot uses go.
pub fn roll_forward(conn: &Connection, seq: u64) -> Result<(), ForensicsError> {
    if seq == 0 || !has_snapshots(conn)? {
        return Ok(());
    }
    let time_ns: Option<i64> = conn
        .query_row(
            "SELECT time_ns FROM changes WHERE seq = ?1",
            [seq as i64],
            |r| r.get(0),
        )
        .optional()?;
    let Some(time_ns) = time_ns else {
        return Ok(());
    };
    for st in states(conn, seq, time_ns, None)? {
        if st.replayed > 0 {
            super::frames::insert(
                conn,
                seq,
                time_ns,
                st.netns,
                st.netns_name.as_deref(),
                st.backend,
                &st.tables,
            )?;
        }
    }
    // Each pair keeps its newest snapshot at or before `seq` (the base of what follows).
    conn.execute(
        "DELETE FROM snapshots WHERE seq <= ?1 AND id NOT IN (SELECT (SELECT id FROM snapshots t \
         WHERE t.netns = s.netns AND t.backend = s.backend AND t.seq <= ?1 \
         ORDER BY t.seq DESC, t.time_ns DESC LIMIT 1) FROM snapshots s WHERE s.seq <= ?1)",
        [seq as i64],
    )?;
    sweep_chains(conn)?;
    super::frames::sweep(conn)?;
    Ok(())
}

/// Chains that no layout 2 snapshot names any more, and that no delta in use is based on, go.
fn sweep_chains(conn: &Connection) -> Result<(), ForensicsError> {
    let any: i64 = conn.query_row(
        "SELECT COUNT(*) FROM (SELECT 1 FROM snap_chains LIMIT 1)",
        [],
        |r| r.get(0),
    )?;
    if any == 0 {
        return Ok(());
    }
    let mut used = std::collections::HashSet::new();
    let mut stmt = conn.prepare("SELECT id FROM snapshots WHERE frame IS NULL")?;
    let ids: Vec<i64> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in ids {
        let blob: Vec<u8> =
            conn.query_row("SELECT body FROM snapshots WHERE id = ?1", [id], |r| {
                r.get(0)
            })?;
        let body: Body = serde_json::from_slice(&decompress("snapshot", &blob)?).map_err(|e| {
            ForensicsError::Damaged {
                what: format!("snapshot {id}"),
                cause: e.to_string(),
            }
        })?;
        used.extend(body.tables.into_iter().flat_map(|t| t.chains));
    }
    let all: Vec<(i64, Option<i64>)> = conn
        .prepare("SELECT hash, base FROM snap_chains")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    // A delta in use keeps its base.
    let bases: Vec<i64> = all
        .iter()
        .filter(|(h, _)| used.contains(h))
        .filter_map(|(_, b)| *b)
        .collect();
    used.extend(bases);
    let mut del = conn.prepare("DELETE FROM snap_chains WHERE hash = ?1")?;
    for (h, _) in all.into_iter().filter(|(h, _)| !used.contains(h)) {
        del.execute([h])?;
    }
    Ok(())
}

type ChainKey = (u32, Backend, Family, String, String);

/// Each chain's and set's last writer, kept by the record's writer from the change rows it
/// writes, to be stamped on the snapshots it writes.
#[derive(Default)]
pub struct LastWriters {
    last: HashMap<ChainKey, super::model::Last>,
}

impl LastWriters {
    /// From a record: each namespace's newest snapshot, then the changes after it.
    pub fn load(conn: &Connection) -> Result<LastWriters, ForensicsError> {
        let mut w = LastWriters::default();
        let any: i64 = if has_snapshots(conn)? {
            conn.query_row(
                "SELECT COUNT(*) FROM (SELECT 1 FROM snapshots LIMIT 1)",
                [],
                |r| r.get(0),
            )?
        } else {
            0
        };
        if any == 0 {
            // A record without snapshots: its chains' writers are learnt from now on.
            return Ok(w);
        }
        let newest = store::last_numbers(conn)?.0;
        for st in states(conn, newest, i64::MAX, None)? {
            for t in &st.tables.tables {
                let keyed = t
                    .chains
                    .iter()
                    .map(|c| (&c.name, &c.last))
                    .chain(t.sets.iter().map(|s| (&s.name, &s.last)));
                for (name, last) in keyed {
                    if let Some(l) = last {
                        let key = (st.netns, st.backend, t.family, t.name.clone(), name.clone());
                        w.last.insert(key, l.clone());
                    }
                }
            }
        }
        Ok(w)
    }

    /// Note a change line as written.
    pub fn note(&mut self, json: &str) {
        let Ok(c) = serde_json::from_str::<Recorded>(json) else {
            return;
        };
        if !c.applied() {
            return;
        }
        match (c.op, &c.chain) {
            (Op::TableFlush, _) => {
                for (k, v) in self.last.iter_mut() {
                    if k.0 == c.netns && k.1 == c.backend && k.2 == c.family && k.3 == c.table {
                        *v = c.last();
                    }
                }
            }
            (Op::TableDelete, _) => {
                self.last.retain(|k, _| {
                    !(k.0 == c.netns && k.1 == c.backend && k.2 == c.family && k.3 == c.table)
                });
            }
            (Op::ChainDelete | Op::SetDelete, Some(ch)) => {
                self.last
                    .remove(&(c.netns, c.backend, c.family, c.table.clone(), ch.clone()));
            }
            (_, Some(ch)) => {
                let key = (c.netns, c.backend, c.family, c.table.clone(), ch.clone());
                self.last.insert(key, c.last());
            }
            _ => {}
        }
    }

    /// Stamp a snapshot's chains and sets with their last writers.
    pub fn stamp(&self, netns: u32, backend: Backend, tables: &mut Tables) {
        for t in &mut tables.tables {
            for c in &mut t.chains {
                let key = (netns, backend, t.family, t.name.clone(), c.name.clone());
                c.last = self.last.get(&key).cloned();
            }
            for s in &mut t.sets {
                let key = (netns, backend, t.family, t.name.clone(), s.name.clone());
                s.last = self.last.get(&key).cloned();
            }
        }
    }
}

#[cfg(test)]
mod tests;
