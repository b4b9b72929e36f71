//! The record's file: its tables, opening it for writing (creating or converting it) or for
//! reading (refusing what is not a record, or a newer layout), and the numbers kept in it.
//!
//! Each row keeps the record's JSON line exactly as it was streamed, plus the columns that
//! queries filter on (time, chain, actor, op, netns...), each indexed with the time. Snapshots of
//! the ruleset have their own tables (`snapshots`, `snap_frames`; layout 2's `snap_chains` and
//! `snap_dicts`), written and read by [`crate::forensics`]; the stretches the record lacks have
//! theirs (`gaps`, layout 4, [`super::gaps`]).

use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::encode::{ChangeRow, Encoder, INSERT_CHANGE};
use super::StoreError;

/// Version of the file layout, kept in `PRAGMA user_version`.
pub(crate) const SCHEMA_VERSION: i64 = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS strs (id INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS dicts (id INTEGER PRIMARY KEY, dict BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS changes (
    seq     INTEGER PRIMARY KEY,
    time_ns INTEGER NOT NULL,
    netns   INTEGER,
    backend INTEGER,
    tbl     INTEGER,
    chain   INTEGER,
    op      INTEGER,
    actor   INTEGER,
    comm    INTEGER,
    dict    INTEGER,
    body    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_time  ON changes(time_ns);
CREATE INDEX IF NOT EXISTS changes_chain ON changes(chain, time_ns);
CREATE INDEX IF NOT EXISTS changes_actor ON changes(actor, time_ns);
CREATE INDEX IF NOT EXISTS changes_op    ON changes(op, time_ns);
CREATE INDEX IF NOT EXISTS changes_netns ON changes(netns, time_ns);
CREATE TABLE IF NOT EXISTS incidents (
    no       INTEGER PRIMARY KEY,
    time_ns  INTEGER NOT NULL,
    type     TEXT,
    netns    INTEGER,
    json     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incidents_time ON incidents(time_ns);
CREATE INDEX IF NOT EXISTS incidents_type ON incidents(type, time_ns);
";

pub(crate) const SNAPSHOT_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS snapshots (
    id      INTEGER PRIMARY KEY,
    seq     INTEGER NOT NULL,
    time_ns INTEGER NOT NULL,
    netns   INTEGER NOT NULL,
    backend TEXT NOT NULL,
    body    BLOB NOT NULL,
    frame   INTEGER
);
CREATE INDEX IF NOT EXISTS snapshots_at ON snapshots(netns, backend, seq);
CREATE TABLE IF NOT EXISTS snap_frames (
    id    INTEGER PRIMARY KEY,
    base  INTEGER,
    depth INTEGER NOT NULL,
    body  BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS snap_chains (
    hash INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    dict INTEGER,
    base INTEGER
);
CREATE TABLE IF NOT EXISTS snap_dicts (id INTEGER PRIMARY KEY, dict BLOB NOT NULL);
";

/// Open (or create) a record for writing and check it.
pub fn open_rw(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
                path: path.into(),
                cause: rusqlite::Error::InvalidPath(format!("{}: {e}", dir.display()).into()),
            })?;
        }
    }
    let mut conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.into(),
        cause: source,
    })?;
    let not_a_record = |source| StoreError::NotARecord {
        path: path.into(),
        cause: source,
    };
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(not_a_record)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Version {
            path: path.into(),
            found: version,
        });
    }
    // auto_vacuum only takes effect on an empty file: set it before the first table.
    conn.execute_batch(
        "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
    )
    .map_err(|source| classify(path, source))?;
    if version == 1 {
        migrate_v1(&mut conn, path)?;
    }
    conn.execute_batch(SCHEMA)
        .map_err(|source| classify(path, source))?;
    // Snapshots (layout 3 adds frames to a layout 2 record's snapshot tables).
    conn.execute_batch(SNAPSHOT_SCHEMA)
        .and_then(|()| upgrade_snapshots(&conn))
        .map_err(|source| classify(path, source))?;
    // Layout 4: the record's gaps (a new table; the rest is layout 3's).
    conn.execute_batch(super::gaps::GAPS_SCHEMA)
        .map_err(|source| classify(path, source))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|source| classify(path, source))?;
    Ok(conn)
}

/// Add the columns that earlier observers made their tables without: `snap_chains`' `dict` and
/// `base`, `snapshots`' `frame`.
pub(crate) fn upgrade_snapshots(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column) in [
        ("snap_chains", "dict"),
        ("snap_chains", "base"),
        ("snapshots", "frame"),
    ] {
        let has: i64 = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get(0),
        )?;
        if has == 0 {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} INTEGER"))?;
        }
    }
    Ok(())
}

/// Convert a layout 1 record (text columns, plain JSON) to layout 2, in one transaction: a
/// failure leaves the file as it was.
fn migrate_v1(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM changes", [], |r| r.get(0))?;
    tracing::info!(
        "converting the record {} to layout 2 ({n} changes; once, the first time this version \
         opens it)",
        path.display()
    );
    let tx = conn.transaction()?;
    tx.execute_batch(
        "DROP INDEX IF EXISTS changes_time; DROP INDEX IF EXISTS changes_chain;
         DROP INDEX IF EXISTS changes_actor; DROP INDEX IF EXISTS changes_op;
         DROP INDEX IF EXISTS changes_netns; ALTER TABLE changes RENAME TO changes_v1;",
    )?;
    tx.execute_batch(SCHEMA)?;
    let mut enc = Encoder::load(&tx)?;
    {
        let mut old = tx.prepare(
            "SELECT seq, time_ns, netns, backend, tbl, chain, op, actor, comm, json \
             FROM changes_v1 ORDER BY seq",
        )?;
        let mut insert = tx.prepare(INSERT_CHANGE)?;
        let mut rows = old.query([])?;
        while let Some(r) = rows.next()? {
            let row = ChangeRow {
                seq: r.get::<_, i64>(0)? as u64,
                time_ns: r.get(1)?,
                netns: r.get(2)?,
                backend: r.get(3)?,
                table: r.get(4)?,
                chain: r.get(5)?,
                op: r.get(6)?,
                actor: r.get(7)?,
                comm: r.get(8)?,
                json: r.get::<_, String>(9)?.into(),
            };
            enc.insert_change(&tx, &mut insert, &row)?;
        }
    }
    tx.execute_batch("DROP TABLE changes_v1;")?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    conn.execute_batch("PRAGMA incremental_vacuum;")?;
    Ok(())
}

/// A damaged file reads as "not a database"; anything else is a problem opening it.
fn classify(path: &Path, source: rusqlite::Error) -> StoreError {
    match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::NotARecord {
                path: path.into(),
                cause: source,
            }
        }
        _ => StoreError::Open {
            path: path.into(),
            cause: source,
        },
    }
}

/// Open a record read-only (for `observer query` and the HTTP backlog). A copied file works.
pub fn open_ro(path: &Path) -> Result<Connection, StoreError> {
    if !path.exists() {
        return Err(StoreError::Missing(path.into()));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Open {
        path: path.into(),
        cause: source,
    })?;
    let (conn, version) = match conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) {
        Ok(v) => (conn, v),
        // A copy in a read-only place: the write-ahead log's shared memory cannot be created.
        // Read it as an immutable file.
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen) => {
            let mut uri = String::from("file:");
            uri.extend(form_urlencoded::byte_serialize(
                path.as_os_str().as_encoded_bytes(),
            ));
            uri.push_str("?immutable=1");
            let conn = Connection::open_with_flags(&uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .map_err(|source| StoreError::Open {
                    path: path.into(),
                    cause: source,
                })?;
            let v = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|source| classify(path, source))?;
            (conn, v)
        }
        Err(source) => return Err(classify(path, source)),
    };
    let has_changes: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'changes'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|source| classify(path, source))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Version {
            path: path.into(),
            found: version,
        });
    }
    if has_changes.is_none() {
        return Err(StoreError::Foreign(path.into()));
    }
    Ok(conn)
}

/// The record's identity: a random id made when the record is first opened for writing and kept
/// in it. Change `seq`s and incident numbers are unique within one record, so (node, id, number)
/// names a row for good (NATS message ids are made of it).
pub fn record_id(conn: &Connection) -> Result<String, StoreError> {
    // Made the first time it is asked for (only publishing to NATS needs it).
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    )?;
    let found: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'id'", [], |r| r.get(0))
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    let id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|u| u.trim().replace('-', ""))
        .unwrap_or_else(|_| format!("{:x}", crate::timestamp::Timestamp::now().unix_nanos()));
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('id', ?1)",
        params![id],
    )?;
    Ok(conn.query_row("SELECT value FROM meta WHERE key = 'id'", [], |r| r.get(0))?)
}

/// The last change `seq` and incident number stored (0 when empty).
pub fn last_numbers(conn: &Connection) -> Result<(u64, u64), StoreError> {
    let seq: i64 = conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM changes", [], |r| {
        r.get(0)
    })?;
    let no: i64 = conn.query_row("SELECT COALESCE(MAX(no), 0) FROM incidents", [], |r| {
        r.get(0)
    })?;
    Ok((seq as u64, no as u64))
}

/// The inode of the file at `path` (to notice it replaced).
pub fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| m.ino())
}
