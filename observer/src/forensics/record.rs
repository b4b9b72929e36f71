//! Snapshots in the record, and the ruleset at a moment rebuilt from them.
//!
//! A snapshot is one namespace's tables of one backend after change `seq`. Its row holds the
//! tables with each chain named by the hash of its content; the chains themselves are kept once
//! in `snap_chains`, zstd-compressed, so a snapshot whose chains did not change since the last
//! one costs a few bytes per chain. A chain is a few hundred bytes, too short for zstd to find
//! much in it alone: the first snapshot with enough chains trains a dictionary on them (kept in
//! `snap_dicts`, its id in each chain's row), and every chain stored after it is compressed
//! with it. The tables are added to a layout 2 record when missing; an older
//! observer reading the record ignores them.

use std::collections::{BTreeMap, HashMap};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::model::{Chain, Set, Table, Tables};
use super::replay::{replay, Recorded};
use super::ForensicsError;
use crate::ruleset::{Backend, Family, Op};
use crate::store::{self, Selection};

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS snapshots (
    id      INTEGER PRIMARY KEY,
    seq     INTEGER NOT NULL,
    time_ns INTEGER NOT NULL,
    netns   INTEGER NOT NULL,
    backend TEXT NOT NULL,
    body    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS snapshots_at ON snapshots(netns, backend, seq);
CREATE TABLE IF NOT EXISTS snap_chains (hash INTEGER PRIMARY KEY, body BLOB NOT NULL, dict INTEGER);
CREATE TABLE IF NOT EXISTS snap_dicts (id INTEGER PRIMARY KEY, dict BLOB NOT NULL);
";

/// A snapshot with at least this many chains to store trains the record's chain dictionary,
/// when it has none yet.
const DICT_MIN_CHAINS: usize = 64;

/// The chain dictionary's size.
const DICT_BYTES: usize = 32 * 1024;

/// zstd's level, as for the record's rows.
const LEVEL: i32 = 3;

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

/// FNV-1a: a content hash that stays the same across builds.
fn hash(bytes: &[u8]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

fn to_sql_err(e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(e))
}

fn compress(bytes: &[u8]) -> rusqlite::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, LEVEL).map_err(to_sql_err)
}

fn decompress(what: &str, bytes: &[u8]) -> Result<Vec<u8>, ForensicsError> {
    zstd::stream::decode_all(bytes).map_err(|e| ForensicsError::Damaged {
        what: what.to_string(),
        cause: e.to_string(),
    })
}

/// Add the `dict` column to a `snap_chains` table made without it.
pub fn upgrade(conn: &Connection) -> rusqlite::Result<()> {
    let has: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('snap_chains') WHERE name = 'dict'",
        [],
        |r| r.get(0),
    )?;
    if has == 0 {
        conn.execute_batch("ALTER TABLE snap_chains ADD COLUMN dict INTEGER")?;
    }
    Ok(())
}

/// The record's chain dictionary: its id in `snap_dicts` and a compressor, trained on the chains
/// of the snapshot being written (`new`) when the record has none and they are enough.
fn chain_dict(
    conn: &Connection,
    new: &[(i64, Vec<u8>)],
) -> rusqlite::Result<Option<(i64, zstd::bulk::Compressor<'static>)>> {
    let newest: Option<(i64, Vec<u8>)> = conn
        .query_row(
            "SELECT id, dict FROM snap_dicts ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let dict = match newest {
        Some(d) => Some(d),
        None if new.len() >= DICT_MIN_CHAINS => {
            let samples: Vec<&[u8]> = new.iter().map(|(_, json)| json.as_slice()).collect();
            match zstd::dict::from_samples(&samples, DICT_BYTES) {
                Ok(d) => {
                    conn.execute("INSERT INTO snap_dicts (dict) VALUES (?1)", [&d])?;
                    Some((conn.last_insert_rowid(), d))
                }
                Err(e) => {
                    tracing::debug!("training the snapshots' chain dictionary: {e}");
                    None
                }
            }
        }
        None => None,
    };
    let Some((id, d)) = dict else {
        return Ok(None);
    };
    let c = store::compressor(&d).map_err(to_sql_err)?;
    Ok(Some((id, c)))
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
        .map_err(|cause| ForensicsError::Damaged {
            what: format!("{what}, a chain"),
            cause,
        })
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

/// Write one snapshot (inside the writer's transaction).
pub fn insert(
    conn: &Connection,
    seq: u64,
    time_ns: i64,
    netns: u32,
    netns_name: Option<&str>,
    backend: Backend,
    tables: &Tables,
) -> rusqlite::Result<()> {
    let mut body = Body {
        netns_name: netns_name.map(str::to_string),
        tables: Vec::new(),
    };
    let mut put = conn.prepare_cached(
        "INSERT OR IGNORE INTO snap_chains (hash, body, dict) VALUES (?1, ?2, ?3)",
    )?;
    let mut known = conn.prepare_cached("SELECT 1 FROM snap_chains WHERE hash = ?1")?;
    // The chains the record does not hold yet, each once.
    let mut new: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in &tables.tables {
        let mut chains = Vec::with_capacity(t.chains.len());
        for c in &t.chains {
            let json = serde_json::to_vec(c).map_err(to_sql_err)?;
            let h = hash(&json);
            if seen.insert(h) && !known.exists([h])? {
                new.push((h, json));
            }
            chains.push(h);
        }
        body.tables.push(BodyTable {
            family: t.family,
            name: t.name.clone(),
            sets: t.sets.clone(),
            chains,
        });
    }
    if !new.is_empty() {
        let mut dict = chain_dict(conn, &new)?;
        for (h, json) in &new {
            match dict.as_mut() {
                Some((id, c)) => {
                    put.execute(params![h, c.compress(json).map_err(to_sql_err)?, *id])?
                }
                None => put.execute(params![h, compress(json)?, None::<i64>])?,
            };
        }
    }
    let json = serde_json::to_vec(&body).map_err(to_sql_err)?;
    conn.prepare_cached(
        "INSERT INTO snapshots (seq, time_ns, netns, backend, body) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        seq as i64,
        time_ns,
        netns,
        backend.as_str(),
        compress(&json)?
    ])?;
    Ok(())
}

/// A snapshot read back.
struct Base {
    seq: u64,
    time_ns: i64,
    netns_name: Option<String>,
    tables: Tables,
}

fn load(conn: &Connection, id: i64) -> Result<Base, ForensicsError> {
    let (seq, time_ns, blob): (i64, i64, Vec<u8>) = conn.query_row(
        "SELECT seq, time_ns, body FROM snapshots WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
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
    let mut get = conn.prepare_cached("SELECT body, dict FROM snap_chains WHERE hash = ?1")?;
    let mut frames = store::DictFrames::default();
    let mut read: HashMap<i64, Chain> = HashMap::with_capacity(wanted.len());
    for h in wanted {
        let row: Option<(Vec<u8>, Option<i64>)> = get
            .query_row([h], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let (blob, dict) = row.ok_or_else(|| ForensicsError::Damaged {
            what: what.clone(),
            cause: format!("its chain {h:x} is missing"),
        })?;
        let json = read_chain(&mut frames, conn, &what, &blob, dict)?;
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
            insert(
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
    Ok(())
}

/// Chains that no snapshot names any more go.
fn sweep_chains(conn: &Connection) -> Result<(), ForensicsError> {
    let mut used = std::collections::HashSet::new();
    let mut stmt = conn.prepare("SELECT id FROM snapshots")?;
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
    let all: Vec<i64> = conn
        .prepare("SELECT hash FROM snap_chains")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut del = conn.prepare("DELETE FROM snap_chains WHERE hash = ?1")?;
    for h in all.into_iter().filter(|h| !used.contains(h)) {
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
