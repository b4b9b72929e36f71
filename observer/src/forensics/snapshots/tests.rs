//! Layout 2 snapshots (chains by content hash, chain deltas) read back. The writer below is the
//! one layout 2 observers ran, kept to make such records.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::*;
use crate::forensics::frames::sql_err as to_sql_err;
use crate::forensics::model::Chain;

/// FNV-1a: a content hash that stays the same across builds.
fn hash(bytes: &[u8]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

fn compress(bytes: &[u8]) -> rusqlite::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, LEVEL).map_err(to_sql_err)
}

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

/// Write one snapshot as a layout 2 observer did. New chain versions are stored as deltas of the
/// chain's base where `bases` knows one and the delta is small.
#[allow(clippy::too_many_arguments)]
pub fn insert_layout2(
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
    conn.execute_batch(store::SNAPSHOT_SCHEMA).unwrap();
    let other = nat(|i| sep_rules(i, 1_000_000));
    let mut bases = ChainBases::default();
    insert_layout2(&conn, &mut bases, 0, 0, 99, None, Backend::Legacy, &other).unwrap();
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
    insert_layout2(conn, &mut bases, 1, 1, 7, None, Backend::Legacy, &first).unwrap();
    let mut second = first.clone();
    readdress(&mut second, chain, rule);
    insert_layout2(conn, &mut bases, 2, 2, 7, None, Backend::Legacy, &second).unwrap();
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
        insert_layout2(&conn, bases, seq, seq as i64, 7, None, Backend::Legacy, t).unwrap();
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

#[test]
fn a_layout_2_record_goes_on_with_frames_and_both_kinds_read_back() {
    let conn = record();
    let mut bases = ChainBases::default();
    let first = nat(|i| sep_rules(i, 1));
    insert_layout2(&conn, &mut bases, 1, 1, 7, None, Backend::Legacy, &first).unwrap();
    let old = last_id(&conn);
    let mut second = first.clone();
    readdress(&mut second, 3, 2);
    super::super::frames::insert(&conn, 2, 2, 7, None, Backend::Legacy, &second).unwrap();
    let new = last_id(&conn);
    assert_eq!(load(&conn, old).unwrap().tables, first);
    assert_eq!(load(&conn, new).unwrap().tables, second);
    // Retention takes the layout 2 snapshots: their chains go, the frame stays.
    conn.execute("DELETE FROM snapshots WHERE frame IS NULL", [])
        .unwrap();
    sweep_chains(&conn).unwrap();
    super::super::frames::sweep(&conn).unwrap();
    let count = |table: &str| -> i64 {
        conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!((count("snap_chains"), count("snap_frames")), (0, 1));
    assert_eq!(load(&conn, new).unwrap().tables, second);
}

#[test]
fn a_layout_2_record_read_as_it_is_has_no_frame_column_and_reads_back() {
    let conn = Connection::open_in_memory().unwrap();
    let layout2 = store::SNAPSHOT_SCHEMA.replace(",\n    frame   INTEGER", "");
    assert_ne!(
        layout2,
        store::SNAPSHOT_SCHEMA,
        "the frame column is in the schema"
    );
    conn.execute_batch(&layout2).unwrap();
    let mut bases = ChainBases::default();
    let t = nat(|i| sep_rules(i, 5));
    insert_layout2(&conn, &mut bases, 1, 1, 7, None, Backend::Legacy, &t).unwrap();
    assert_eq!(load(&conn, last_id(&conn)).unwrap().tables, t);
}
