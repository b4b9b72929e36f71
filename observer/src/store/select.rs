//! Reading the record: the changes and incidents a selection wants, their stored bodies turned
//! back into the JSON lines that were streamed.

use rusqlite::{Connection, OptionalExtension};

use super::StoreError;

/// Which rows a query wants. Glob filters are applied in SQL (SQLite's GLOB has the same `*`,
/// `?` and `[...]` syntax, case-sensitive) and can use the indexes.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
    pub chain_glob: Option<String>,
    pub actor: Option<String>,
    pub ops: Vec<String>,
    pub netns: Option<u32>,
    pub backend: Option<String>,
    pub table: Option<String>,
    pub types: Vec<String>,
    /// Rows after this number (`seq` for changes, record number for incidents).
    pub after: Option<u64>,
    /// Rows before this number.
    pub before: Option<u64>,
    pub limit: Option<usize>,
}

/// A stored row, as streamed.
#[derive(Debug, Clone)]
pub struct Stored {
    /// `seq` for changes, the record number for incidents.
    pub number: u64,
    pub time_ns: i64,
    pub json: String,
}

/// A WHERE clause with numbered parameters, for a record of layout 1 (text columns) or 2
/// (string numbers).
#[derive(Default)]
struct Where {
    sql: String,
    args: Vec<rusqlite::types::Value>,
    numbered_strings: bool,
}

impl Where {
    fn for_record(conn: &Connection) -> Result<Where, StoreError> {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        Ok(Where {
            numbered_strings: version >= 2,
            ..Where::default()
        })
    }

    fn arg(&mut self, v: rusqlite::types::Value) -> String {
        self.args.push(v);
        format!("?{}", self.args.len())
    }

    fn cond(&mut self, cond: &str, v: rusqlite::types::Value) {
        let mark = self.arg(v);
        self.sql.push_str(&format!(" AND {cond} {mark}"));
    }

    /// `column` holds a string matching `test` (e.g. `= ?1`, `GLOB ?1`, `IN (?1,?2)`).
    fn string_is(&self, column: &str, test: &str) -> String {
        if self.numbered_strings {
            format!("{column} IN (SELECT id FROM strs WHERE s {test})")
        } else {
            format!("{column} {test}")
        }
    }

    /// A string column compared with one value.
    fn string_cond(&mut self, column: &str, op: &str, value: &str) {
        let mark = self.arg(rusqlite::types::Value::Text(value.into()));
        let c = self.string_is(column, &format!("{op} {mark}"));
        self.sql.push_str(&format!(" AND {c}"));
    }

    fn any_of(&mut self, column: &str, values: &[String]) {
        if values.is_empty() {
            return;
        }
        let marks: Vec<String> = values
            .iter()
            .map(|v| self.arg(rusqlite::types::Value::Text(v.clone())))
            .collect();
        let c = self.string_is(column, &format!("IN ({})", marks.join(",")));
        self.sql.push_str(&format!(" AND {c}"));
    }

    fn common(&mut self, s: &Selection, number: &str) {
        use rusqlite::types::Value as V;
        if let Some(t) = s.since_ns {
            self.cond("time_ns >=", V::Integer(t));
        }
        if let Some(t) = s.until_ns {
            self.cond("time_ns <", V::Integer(t));
        }
        if let Some(n) = s.netns {
            self.cond("netns =", V::Integer(n as i64));
        }
        if let Some(a) = s.after {
            self.cond(
                &format!("{number} >"),
                V::Integer(a.min(i64::MAX as u64) as i64),
            );
        }
        if let Some(b) = s.before {
            self.cond(
                &format!("{number} <"),
                V::Integer(b.min(i64::MAX as u64) as i64),
            );
        }
    }

    /// Run `select` (number, time, dictionary, body) with this clause and decode the rows.
    fn run(
        mut self,
        conn: &Connection,
        select: &str,
        order: &str,
        limit: Option<usize>,
        dec: &mut DictFrames,
    ) -> Result<Vec<Stored>, StoreError> {
        self.sql.push_str(&format!(" ORDER BY {order}"));
        if let Some(l) = limit {
            self.sql.push_str(&format!(" LIMIT {l}"));
        }
        // Readers that follow the record ask the same question again and again.
        let mut stmt = conn.prepare_cached(&format!("{select} WHERE 1{}", self.sql))?;
        let mut rows = stmt.query(rusqlite::params_from_iter(self.args))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let number = r.get::<_, i64>(0)? as u64;
            out.push(Stored {
                number,
                time_ns: r.get(1)?,
                json: decode(dec, conn, number, r.get(2)?, r.get_ref(3)?)?,
            });
        }
        Ok(out)
    }
}

/// Why a frame compressed with a dictionary of the record, or that dictionary, is damaged (the
/// caller's error names what it was reading).
#[derive(Debug, thiserror::Error)]
pub enum DictFrameError {
    /// The dictionary the row names is not in the record.
    #[error("its dictionary {0} is missing")]
    MissingDict(i64),
    /// The dictionary is there but zstd does not load it.
    #[error("dictionary {id}: {cause}")]
    Dict {
        id: i64,
        #[source]
        cause: std::io::Error,
    },
    /// The frame's header gives no size the frame may have.
    #[error(transparent)]
    Size(#[from] FrameSizeError),
    /// The frame does not decompress with its dictionary.
    #[error("decompressing: {0}")]
    Decompress(#[source] std::io::Error),
}

/// Frames compressed with a dictionary of the record (the rows' `dicts`, the snapshots'
/// `snap_dicts`), each dictionary loaded once.
#[derive(Default)]
pub struct DictFrames {
    dicts: std::collections::HashMap<i64, zstd::bulk::Decompressor<'static>>,
}

impl DictFrames {
    /// `frame` decompressed with dictionary `id` of `table`; the inner error says why the frame
    /// or its dictionary is damaged (for the caller's error, which names what it was reading).
    pub fn decompress(
        &mut self,
        conn: &Connection,
        table: &'static str,
        id: i64,
        frame: &[u8],
    ) -> rusqlite::Result<Result<Vec<u8>, DictFrameError>> {
        let d = match self.dicts.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let raw: Option<Vec<u8>> = conn
                    .query_row(
                        &format!("SELECT dict FROM {table} WHERE id = ?1"),
                        [id],
                        |r| r.get(0),
                    )
                    .optional()?;
                let Some(raw) = raw else {
                    return Ok(Err(DictFrameError::MissingDict(id)));
                };
                match zstd::bulk::Decompressor::with_dictionary(&raw) {
                    Ok(d) => e.insert(d),
                    Err(cause) => return Ok(Err(DictFrameError::Dict { id, cause })),
                }
            }
        };
        let size = match frame_size(frame) {
            Ok(n) => n,
            Err(e) => return Ok(Err(e.into())),
        };
        Ok(d.decompress(frame, size)
            .map_err(DictFrameError::Decompress))
    }
}

/// A zstd frame of the record whose header gives no size, or a size larger than what it holds
/// may be (a row, a snapshot's ruleset): damage.
#[derive(Debug, thiserror::Error)]
#[error("no usable size in its compressed frame")]
pub struct FrameSizeError;

/// The size a zstd frame of the record decompresses to, as its header says; no size, or one
/// larger than a row may be, is damage.
pub fn frame_size(frame: &[u8]) -> Result<usize, FrameSizeError> {
    frame_size_at_most(frame, MAX_ROW_BYTES)
}

/// [`frame_size`] with another bound (a snapshot's whole ruleset may be larger than a row).
pub fn frame_size_at_most(frame: &[u8], max: u64) -> Result<usize, FrameSizeError> {
    zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .filter(|&n| n <= max)
        .map(|n| n as usize)
        .ok_or(FrameSizeError)
}

/// A stored body turned back into the JSON line that was streamed.
fn decode(
    frames: &mut DictFrames,
    conn: &Connection,
    seq: u64,
    dict: Option<i64>,
    body: rusqlite::types::ValueRef<'_>,
) -> Result<String, StoreError> {
    use rusqlite::types::ValueRef;
    let damaged = |cause: String| StoreError::Damaged { seq, cause };
    let bytes = match (dict, body) {
        (None, ValueRef::Text(t)) | (None, ValueRef::Blob(t)) => t.to_vec(),
        (Some(id), ValueRef::Blob(b)) => frames
            .decompress(conn, "dicts", id, b)?
            .map_err(|e| damaged(e.to_string()))?,
        (_, other) => return Err(damaged(format!("a body of type {:?}", other.data_type()))),
    };
    String::from_utf8(bytes).map_err(|e| damaged(format!("not UTF-8: {e}")))
}

/// The largest JSON line a row may decode to (a guard against a damaged size).
const MAX_ROW_BYTES: u64 = 64 << 20;

/// Changes matching the selection, oldest first.
pub fn select_changes(conn: &Connection, s: &Selection) -> Result<Vec<Stored>, StoreError> {
    select_changes_with(conn, s, &mut DictFrames::default())
}

/// [`select_changes`] for a reader that reads the record again and again: the dictionaries
/// its rows were compressed with are loaded once into `frames` (kept for this record only).
pub fn select_changes_with(
    conn: &Connection,
    s: &Selection,
    frames: &mut DictFrames,
) -> Result<Vec<Stored>, StoreError> {
    let mut w = Where::for_record(conn)?;
    w.common(s, "seq");
    if let Some(g) = &s.chain_glob {
        w.string_cond("chain", "GLOB", g);
    }
    if let Some(a) = &s.actor {
        // The actor, or the command itself (as `tail --actor`).
        let mark = w.arg(rusqlite::types::Value::Text(a.clone()));
        let test = format!("= {mark}");
        let c = format!(
            " AND ({} OR {})",
            w.string_is("actor", &test),
            w.string_is("comm", &test)
        );
        w.sql.push_str(&c);
    }
    if let Some(b) = &s.backend {
        w.string_cond("backend", "=", b);
    }
    if let Some(t) = &s.table {
        w.string_cond("tbl", "=", t);
    }
    w.any_of("op", &s.ops);
    let select = if w.numbered_strings {
        "SELECT seq, time_ns, dict, body FROM changes"
    } else {
        "SELECT seq, time_ns, NULL, json FROM changes"
    };
    w.run(conn, select, "seq", s.limit, frames)
}

/// Incidents in the time and number range and of the types asked for, oldest first. Chain,
/// actor and backend filters are applied by the caller on the JSON (an incident names several
/// chains and actors).
pub fn select_incidents(conn: &Connection, s: &Selection) -> Result<Vec<Stored>, StoreError> {
    // Incidents keep plain columns in every layout.
    let mut w = Where::default();
    w.common(s, "no");
    w.any_of("type", &s.types);
    w.run(
        conn,
        "SELECT no, time_ns, NULL, json FROM incidents",
        "no",
        s.limit,
        &mut DictFrames::default(),
    )
}

/// Rows of the record after a reader's position: how many, and the time of the oldest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub rows: u64,
    /// `time_ns` of the oldest of them (None: there are none).
    pub oldest_ns: Option<i64>,
}

/// The changes after `change` and the incident lines after `incident` that are not older than
/// `since_ns`: what a reader at that position (the NATS publisher) has still to deliver.
pub fn pending(
    conn: &Connection,
    change: u64,
    incident: u64,
    since_ns: i64,
) -> Result<Pending, StoreError> {
    let mut total = Pending::default();
    for (table, number, after) in [("changes", "seq", change), ("incidents", "no", incident)] {
        let after = after.min(i64::MAX as u64) as i64;
        let (rows, oldest): (i64, Option<i64>) = conn.query_row(
            &format!(
                "SELECT count(*), min(time_ns) FROM {table} WHERE {number} > ?1 AND time_ns >= ?2"
            ),
            rusqlite::params![after, since_ns],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        total.rows += rows.max(0) as u64;
        total.oldest_ns = match (total.oldest_ns, oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(total)
}

/// Whether the record holds a change (`changes`: true; else an incident line) numbered strictly
/// between `after` and `before`, recorded at `since_ns` or later.
pub fn any_between(
    conn: &Connection,
    changes: bool,
    after: u64,
    before: u64,
    since_ns: i64,
) -> Result<bool, StoreError> {
    let (table, number) = if changes {
        ("changes", "seq")
    } else {
        ("incidents", "no")
    };
    let n = |v: u64| v.min(i64::MAX as u64) as i64;
    Ok(conn.query_row(
        &format!(
            "SELECT EXISTS (SELECT 1 FROM {table} WHERE {number} > ?1 AND {number} < ?2 \
             AND time_ns >= ?3)"
        ),
        rusqlite::params![n(after), n(before), since_ns],
        |r| r.get(0),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_frame_or_dictionary_says_why_in_the_words_it_had() {
        assert_eq!(
            frame_size(b"\x00\x01\x02\x03").unwrap_err().to_string(),
            "no usable size in its compressed frame"
        );
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE dicts (id INTEGER PRIMARY KEY, dict BLOB)")
            .unwrap();
        let missing = DictFrames::default()
            .decompress(&conn, "dicts", 7, b"")
            .unwrap()
            .unwrap_err();
        assert_eq!(missing.to_string(), "its dictionary 7 is missing");
        let zstd = |m: &str| std::io::Error::other(m.to_string());
        let cases = [
            (
                DictFrameError::Dict {
                    id: 7,
                    cause: zstd("Dictionary mismatch"),
                },
                "dictionary 7: Dictionary mismatch",
            ),
            (
                DictFrameError::Size(FrameSizeError),
                "no usable size in its compressed frame",
            ),
            (
                DictFrameError::Decompress(zstd("Data corruption detected")),
                "decompressing: Data corruption detected",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }
}
