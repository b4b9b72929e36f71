//! Rows into the record's layout 2: strings to the numbers that stand for them in `strs`, JSON
//! lines compressed with zstd and a dictionary trained on the record's own first rows (kept in
//! `dicts`; rows written before it exists stay plain text).

use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

/// The string columns of `changes`, in the order of [`ChangeRow`]'s fields.
pub(crate) const STR_COLUMNS: [&str; 6] = ["backend", "tbl", "chain", "op", "actor", "comm"];

/// Rows kept to train the record's dictionary, and its size.
pub(crate) const DICT_SAMPLES: usize = 1000;
const DICT_BYTES: usize = 16 * 1024;
/// zstd's level for rows: 3 is its default; higher levels gain nothing on rows this short.
const ZSTD_LEVEL: i32 = 3;

/// `strs` is swept of unused strings once it holds this many.
pub(crate) const STRS_SWEPT_FROM: i64 = 10_000;

pub(crate) const INSERT_CHANGE: &str =
    "INSERT OR REPLACE INTO changes (seq, time_ns, netns, backend, tbl, \
     chain, op, actor, comm, dict, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// A change's row: the columns queries filter on, and the JSON line exactly as it was streamed.
#[derive(Debug, Clone)]
pub struct ChangeRow {
    pub seq: u64,
    pub time_ns: i64,
    pub netns: Option<u32>,
    pub backend: Option<String>,
    pub table: Option<String>,
    pub chain: Option<String>,
    pub op: Option<String>,
    pub actor: Option<String>,
    pub comm: Option<String>,
    pub json: Arc<str>,
}

/// Turns rows into layout 2: strings to their numbers in `strs`, JSON lines compressed with
/// the record's dictionary (trained on its first [`DICT_SAMPLES`] rows, plain text before).
#[derive(Default)]
pub(crate) struct Encoder {
    /// Numbers of strings already in `strs` (cleared when large or when `strs` is swept).
    ids: std::collections::HashMap<String, i64>,
    dict: Option<(i64, zstd::bulk::Compressor<'static>)>,
    samples: Vec<Vec<u8>>,
}

/// A compressor with `dict` for frames that [`DictFrames`] reads back.
pub(crate) fn compressor(dict: &[u8]) -> std::io::Result<zstd::bulk::Compressor<'static>> {
    let mut c = zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, dict)?;
    // The row knows its dictionary; the frame keeps its size (to decompress in one step).
    c.include_checksum(false)?;
    c.include_dictid(false)?;
    c.include_contentsize(true)?;
    Ok(c)
}

impl Encoder {
    /// The encoder for a record: its newest dictionary, if it has one.
    pub(crate) fn load(conn: &Connection) -> rusqlite::Result<Encoder> {
        let newest: Option<(i64, Vec<u8>)> = conn
            .query_row(
                "SELECT id, dict FROM dicts ORDER BY id DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let dict = newest.and_then(|(id, bytes)| match compressor(&bytes) {
            Ok(c) => Some((id, c)),
            Err(e) => {
                tracing::warn!(
                    "the record's dictionary {id} does not load ({e}); a new one will be trained"
                );
                None
            }
        });
        Ok(Encoder {
            dict,
            ..Encoder::default()
        })
    }

    /// The number standing for `s` in `strs`, added when new.
    fn id(&mut self, conn: &Connection, s: &str) -> rusqlite::Result<i64> {
        if let Some(&id) = self.ids.get(s) {
            return Ok(id);
        }
        if self.ids.len() >= 100_000 {
            self.ids.clear();
        }
        let found: Option<i64> = conn
            .query_row("SELECT id FROM strs WHERE s = ?1", [s], |r| r.get(0))
            .optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                conn.execute("INSERT INTO strs (s) VALUES (?1)", [s])?;
                conn.last_insert_rowid()
            }
        };
        self.ids.insert(s.to_string(), id);
        Ok(id)
    }

    /// The stored form of a JSON line: (dictionary, bytes), or (None, the text itself).
    fn body(
        &mut self,
        conn: &Connection,
        json: &str,
    ) -> rusqlite::Result<(Option<i64>, rusqlite::types::Value)> {
        use rusqlite::types::Value;
        if let Some((id, c)) = &mut self.dict {
            match c.compress(json.as_bytes()) {
                Ok(b) => return Ok((Some(*id), Value::Blob(b))),
                Err(e) => tracing::debug!("compressing a record row: {e}; kept as text"),
            }
        } else {
            self.samples.push(json.as_bytes().to_vec());
            if self.samples.len() >= DICT_SAMPLES {
                self.train(conn)?;
            }
        }
        Ok((None, Value::Text(json.to_string())))
    }

    /// Train the dictionary on the rows seen so far and keep it in the record.
    fn train(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let samples = std::mem::take(&mut self.samples);
        let dict = zstd::dict::from_samples(&samples, DICT_BYTES).unwrap_or_else(|e| {
            // Too uniform to train on (zstd's trainer refuses some inputs): the rows
            // themselves serve as a raw dictionary, newest last.
            tracing::debug!("training the record's dictionary: {e}; using raw rows");
            let mut raw: Vec<u8> = samples.concat();
            let cut = raw.len().saturating_sub(DICT_BYTES);
            raw.drain(..cut);
            raw
        });
        conn.execute("INSERT INTO dicts (dict) VALUES (?1)", [&dict])?;
        let id = conn.last_insert_rowid();
        match compressor(&dict) {
            Ok(c) => self.dict = Some((id, c)),
            Err(e) => tracing::warn!(
                "the record's new dictionary does not load ({e}); rows stay plain text"
            ),
        }
        Ok(())
    }

    pub(crate) fn insert_change(
        &mut self,
        conn: &Connection,
        insert: &mut rusqlite::Statement<'_>,
        row: &ChangeRow,
    ) -> rusqlite::Result<()> {
        let ChangeRow {
            seq,
            time_ns,
            netns,
            backend,
            table,
            chain,
            op,
            actor,
            comm,
            json,
        } = row;
        let mut ids = [None; STR_COLUMNS.len()];
        for (slot, v) in ids.iter_mut().zip([backend, table, chain, op, actor, comm]) {
            *slot = v.as_deref().map(|s| self.id(conn, s)).transpose()?;
        }
        let (dict, body) = self.body(conn, json)?;
        insert.execute(params![
            *seq as i64,
            time_ns,
            netns,
            ids[0],
            ids[1],
            ids[2],
            ids[3],
            ids[4],
            ids[5],
            dict,
            body
        ])?;
        Ok(())
    }

    /// Strings no row uses any more (their rows expired) go, once there are many of them: a
    /// node's chain names come and go (kube-proxy's per-endpoint chains).
    pub(crate) fn sweep_strings(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM strs", [], |r| r.get(0))?;
        if n < STRS_SWEPT_FROM {
            return Ok(());
        }
        let used = STR_COLUMNS
            .iter()
            .map(|c| format!("SELECT {c} FROM changes WHERE {c} IS NOT NULL"))
            .collect::<Vec<_>>()
            .join(" UNION ");
        conn.execute(&format!("DELETE FROM strs WHERE id NOT IN ({used})"), [])?;
        self.ids.clear();
        Ok(())
    }
}
