//! Snapshots in the record, and the ruleset at a moment rebuilt from them.
//!
//! A snapshot is one namespace's tables of one backend after change `seq`. Its row holds the
//! tables with each chain named by the hash of its content; the chains themselves are kept once
//! in `snap_chains`, zstd-compressed, so a snapshot whose chains did not change since the last
//! one costs a few bytes per chain. A chain is a few hundred bytes, too short for zstd to find
//! much in it alone: the first snapshot with enough chains trains a dictionary on them (kept in
//! `snap_dicts`, its id in each chain's row), and every chain stored after it is compressed
//! with it. A new version of a chain the record already holds is stored as a delta: compressed
//! with the chain's full version (its `base`) as the dictionary: on a week of kube-proxy churn a
//! delta costs about 90 bytes, a full version about 180. A delta's base is always a full
//! version (never another delta), so a chain is read with at most two frames; when a chain has
//! drifted so far that its delta is no longer small, the new version is stored full and becomes
//! the base of the next ones. The tables are added to a layout 2 record when missing; an older
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
CREATE TABLE IF NOT EXISTS snap_chains (
    hash INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    dict INTEGER,
    base INTEGER
);
CREATE TABLE IF NOT EXISTS snap_dicts (id INTEGER PRIMARY KEY, dict BLOB NOT NULL);
";

/// A snapshot with at least this many chains to store trains the record's chain dictionary,
/// when it has none yet.
const DICT_MIN_CHAINS: usize = 64;

/// The chain dictionary's size.
const DICT_BYTES: usize = 32 * 1024;

/// zstd's level, as for the record's rows.
const LEVEL: i32 = 3;

/// A chain version is stored as a delta of its base only when that takes at most this share
/// (in percent) of its full frame; otherwise it is stored full and based on nothing. (Half is
/// the best of 25, 35, 50 and 70 % on `bench-record`'s week.)
const DELTA_MAX_PERCENT: usize = 50;

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

/// Add the `dict` and `base` columns to a `snap_chains` table made without them.
pub fn upgrade(conn: &Connection) -> rusqlite::Result<()> {
    for column in ["dict", "base"] {
        let has: i64 = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('snap_chains') WHERE name = ?1",
            [column],
            |r| r.get(0),
        )?;
        if has == 0 {
            conn.execute_batch(&format!(
                "ALTER TABLE snap_chains ADD COLUMN {column} INTEGER"
            ))?;
        }
    }
    Ok(())
}

/// The record's chain dictionary: its id in `snap_dicts` and a compressor, trained on the chains
/// of the snapshot being written (`new`) when the record has none and they are enough.
fn chain_dict(
    conn: &Connection,
    new: &[&[u8]],
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
        None if new.len() >= DICT_MIN_CHAINS => match zstd::dict::from_samples(new, DICT_BYTES) {
            Ok(d) => {
                conn.execute("INSERT INTO snap_dicts (dict) VALUES (?1)", [&d])?;
                Some((conn.last_insert_rowid(), d))
            }
            Err(e) => {
                tracing::debug!("training the snapshots' chain dictionary: {e}");
                None
            }
        },
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
        let size = store::frame_size(&body).map_err(|e| damaged(e.into()))?;
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

/// Which stored version of each chain the next version of it is a delta of, per namespace and
/// backend: what the record's writer remembers between the snapshots it writes. Empty after a
/// restart (the first new version of each chain is then stored full). The namespaces seen last
/// are kept; a namespace long gone falls out.
pub struct ChainBases {
    pairs: lru::LruCache<(u32, Backend), HashMap<TableChain, Stored>>,
}

/// A chain in a namespace's backend: its table's family and name, and its name.
type TableChain = (Family, String, String);

/// A chain version as stored: its hash, and its base if it is a delta.
#[derive(Clone, Copy)]
struct Stored {
    hash: i64,
    base: Option<i64>,
}

/// Namespaces whose chains' bases the writer keeps.
const BASES_NETNS: usize = 1024;

impl Default for ChainBases {
    fn default() -> Self {
        ChainBases {
            pairs: lru::LruCache::new(
                std::num::NonZeroUsize::new(BASES_NETNS).expect("a non-zero constant"),
            ),
        }
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

/// Write one snapshot (inside the writer's transaction). New chain versions are stored as deltas
/// of the chain's base where `bases` knows one and the delta is small.
#[allow(clippy::too_many_arguments)]
pub fn insert(
    conn: &Connection,
    bases: &mut ChainBases,
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
        "INSERT OR IGNORE INTO snap_chains (hash, body, dict, base) VALUES (?1, ?2, ?3, ?4)",
    )?;
    let mut known = conn.prepare_cached("SELECT base FROM snap_chains WHERE hash = ?1")?;
    let before = bases.pairs.pop(&(netns, backend)).unwrap_or_default();
    let mut after: HashMap<TableChain, Stored> = HashMap::new();
    // The chains the record does not hold yet, each once.
    let mut new: Vec<(TableChain, i64, Vec<u8>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in &tables.tables {
        let mut chains = Vec::with_capacity(t.chains.len());
        for c in &t.chains {
            let json = serde_json::to_vec(c).map_err(to_sql_err)?;
            let h = hash(&json);
            let key = (t.family, t.name.clone(), c.name.clone());
            if seen.insert(h) {
                match known
                    .query_row([h], |r| r.get::<_, Option<i64>>(0))
                    .optional()?
                {
                    Some(base) => {
                        after.insert(key, Stored { hash: h, base });
                    }
                    None => new.push((key, h, json)),
                }
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
        let jsons: Vec<&[u8]> = new.iter().map(|(_, _, json)| json.as_slice()).collect();
        let mut dict = chain_dict(conn, &jsons)?;
        let mut reader = ChainReader::new(conn)?;
        let mut deltas = zstd::zstd_safe::CCtx::create();
        for (key, h, json) in new {
            let (full, dict_id) = match dict.as_mut() {
                Some((id, c)) => (c.compress(&json).map_err(to_sql_err)?, Some(*id)),
                None => (compress(&json)?, None),
            };
            // The base: the full version the chain's newest version is, or is a delta of.
            let base = before.get(&key).map(|s| s.base.unwrap_or(s.hash));
            let base_json = match base {
                Some(b) => reader.json("a chain's base", b).unwrap_or_else(|e| {
                    tracing::debug!("snapshot: chain {h:x} stored full: {e}");
                    None
                }),
                None => None,
            };
            let small = match (base, base_json) {
                (Some(b), Some(base_json)) => {
                    let mut d = Vec::with_capacity(zstd::zstd_safe::compress_bound(json.len()));
                    deltas
                        .compress_using_dict(&mut d, &json, &base_json, LEVEL)
                        .map_err(|code| {
                            to_sql_err(std::io::Error::other(zstd::zstd_safe::get_error_name(code)))
                        })?;
                    (d.len() * 100 <= full.len() * DELTA_MAX_PERCENT).then_some((b, d))
                }
                _ => None,
            };
            let (body, dict_id, base) = match small {
                Some((b, d)) => (d, None, Some(b)),
                None => (full, dict_id, None),
            };
            put.execute(params![h, body, dict_id, base])?;
            after.insert(key, Stored { hash: h, base });
        }
    }
    bases.pairs.put((netns, backend), after);
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
pub fn roll_forward(
    conn: &Connection,
    bases: &mut ChainBases,
    seq: u64,
) -> Result<(), ForensicsError> {
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
                bases,
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

/// Chains that no snapshot names any more, and that no delta in use is based on, go.
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
mod tests {
    use super::*;

    fn nat(rules: impl Fn(usize) -> Vec<String>) -> Tables {
        let mut t = Table::new(Family::Ip, "nat");
        t.chains = (0..DICT_MIN_CHAINS * 2)
            .map(|i| Chain {
                name: format!("KUBE-SEP-{i:016X}"),
                head: None,
                rules: rules(i),
                last: None,
            })
            .collect();
        Tables { tables: vec![t] }
    }

    /// Four rules of an endpoint chain, with addresses that differ from chain to chain as a real
    /// node's do (a dictionary learns the words, not the addresses).
    fn sep_rules(i: usize, seed: usize) -> Vec<String> {
        (0..4)
            .map(|r| {
                let x = (i * 7919 + r * 104_729 + seed).wrapping_mul(2_654_435_761) >> 7;
                format!(
                    "-s 10.{}.{}.{}/32 -m comment --comment \"ns-{}/svc-{}:port-{}\" -j KUBE-MARK-MASQ",
                    x % 251,
                    (x >> 8) % 251,
                    (x >> 16) % 251,
                    x % 97,
                    i,
                    (x >> 24) % 9000
                )
            })
            .collect()
    }

    /// A record whose chain dictionary was trained on another namespace's chains, as a real
    /// record's is by the time a chain changes (the first large snapshot trains it).
    fn record() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let other = nat(|i| sep_rules(i, 1_000_000));
        let mut bases = ChainBases::default();
        insert(&conn, &mut bases, 0, 0, 99, None, Backend::Legacy, &other).unwrap();
        conn
    }

    /// Chain `c`'s rule `r` with another source address: an endpoint's pod replaced.
    fn readdress(t: &mut Tables, c: usize, r: usize) {
        let rule = &mut t.tables[0].chains[c].rules[r];
        *rule = rule.replacen("-s 10.", "-s 172.16.", 1);
    }

    /// Two snapshots of namespace 7: the nat table, then the same with one rule readdressed.
    fn two_snapshots(conn: &Connection, chain: usize, rule: usize) -> (Tables, Tables) {
        let mut bases = ChainBases::default();
        let first = nat(|i| sep_rules(i, 1));
        insert(conn, &mut bases, 1, 1, 7, None, Backend::Legacy, &first).unwrap();
        let mut second = first.clone();
        readdress(&mut second, chain, rule);
        insert(conn, &mut bases, 2, 2, 7, None, Backend::Legacy, &second).unwrap();
        (first, second)
    }

    fn row(conn: &Connection, c: &Chain) -> (usize, Option<i64>) {
        let h = hash(&serde_json::to_vec(c).unwrap());
        conn.query_row(
            "SELECT length(body), base FROM snap_chains WHERE hash = ?1",
            [h],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    fn last_id(conn: &Connection) -> i64 {
        conn.query_row("SELECT MAX(id) FROM snapshots", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_changed_chain_is_stored_as_a_delta_of_its_full_version_and_read_back_whole() {
        let conn = record();
        let mut bases = ChainBases::default();
        let put = |bases: &mut ChainBases, seq: u64, t: &Tables| {
            insert(&conn, bases, seq, seq as i64, 7, None, Backend::Legacy, t).unwrap();
        };
        let first = nat(|i| sep_rules(i, 1));
        put(&mut bases, 1, &first);
        // One rule of one chain rewritten: a delta of the first version, much smaller than it.
        let mut second = first.clone();
        readdress(&mut second, 3, 2);
        put(&mut bases, 2, &second);
        let (full_len, none) = row(&conn, &first.tables[0].chains[3]);
        assert_eq!(none, None, "the first version is stored full");
        let (delta_len, base) = row(&conn, &second.tables[0].chains[3]);
        let first_hash = hash(&serde_json::to_vec(&first.tables[0].chains[3]).unwrap());
        assert_eq!(base, Some(first_hash), "the second is a delta of the first");
        assert!(
            delta_len * 2 <= full_len,
            "delta {delta_len} B, full {full_len} B"
        );
        // A third version is a delta of the same full one (never of a delta).
        let mut third = second.clone();
        readdress(&mut third, 3, 0);
        put(&mut bases, 3, &third);
        assert_eq!(row(&conn, &third.tables[0].chains[3]).1, Some(first_hash));
        assert_eq!(load(&conn, last_id(&conn)).unwrap().tables, third);
        // A chain rewritten whole: its delta would not be small, so it is stored full.
        let mut fourth = third.clone();
        fourth.tables[0].chains[3].rules = vec!["-j RETURN".into()];
        put(&mut bases, 4, &fourth);
        assert_eq!(row(&conn, &fourth.tables[0].chains[3]).1, None);
        assert_eq!(load(&conn, last_id(&conn)).unwrap().tables, fourth);
    }

    #[test]
    fn the_sweep_keeps_the_base_of_a_delta_in_use() {
        let conn = record();
        let (_, second) = two_snapshots(&conn, 5, 1);
        let second_id = last_id(&conn);
        // The first snapshot goes (retention); its version of chain 5 is the base of the
        // second's, so it stays, and the second snapshot still reads back.
        conn.execute("DELETE FROM snapshots WHERE id <> ?1", [second_id])
            .unwrap();
        sweep_chains(&conn).unwrap();
        assert_eq!(load(&conn, second_id).unwrap().tables, second);
        let kept: i64 = conn
            .query_row("SELECT COUNT(*) FROM snap_chains", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            kept as usize,
            DICT_MIN_CHAINS * 2 + 1,
            "every chain and one base"
        );
    }

    #[test]
    fn a_delta_whose_base_is_gone_is_a_clear_error() {
        let conn = record();
        let (first, _) = two_snapshots(&conn, 0, 3);
        let base = hash(&serde_json::to_vec(&first.tables[0].chains[0]).unwrap());
        conn.execute("DELETE FROM snap_chains WHERE hash = ?1", [base])
            .unwrap();
        let Err(err) = load(&conn, last_id(&conn)) else {
            panic!("a snapshot whose chain's base is gone was read");
        };
        let err = err.to_string();
        assert!(
            err.contains("is missing") && err.contains("damaged"),
            "{err}"
        );
    }
}
