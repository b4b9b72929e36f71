//! The record's file: every change and incident `observer run` saw, in an SQLite file, to
//! answer "who deleted KUBE-SVC-X at 03:12?" after the fact. This module is the file's layout
//! and its reading; [`crate::sinks::record_writer`] is the thread that writes it.
//!
//! The file is kept small (layout 2): the text columns hold numbers standing for strings kept
//! once in `strs`, and the JSON line is compressed with zstd and a dictionary trained on the
//! record's own first rows ([`encode`]). A kube-proxy-like change takes about a quarter of layout
//! 1's 865 bytes. Layout 1 records are read as they are and converted the first time `observer
//! run` opens them. Layout 3 is layout 2 with snapshots stored as frames, deltas of the snapshot
//! before ([`crate::forensics::frames`]), which an observer of layout 2 cannot read: it refuses
//! the record instead of misreading it. A layout 2 record becomes layout 3 when `observer run`
//! opens it (its snapshots stay as they are). Layout 4 adds the `gaps` table ([`gaps`]): the
//! stretches the record could not take, and since when it covers everything; any older record
//! is read as having none, and gets the table when `observer run` opens it.

use std::path::PathBuf;

mod encode;
pub mod gaps;
mod schema;
mod select;

pub use encode::ChangeRow;
#[cfg(test)]
pub(crate) use encode::{compressor, DICT_SAMPLES, STRS_SWEPT_FROM};
pub(crate) use encode::{Encoder, INSERT_CHANGE};
pub use gaps::{select_gaps, RecordGap};
pub(crate) use schema::SCHEMA_VERSION;
#[cfg(test)]
pub(crate) use schema::SNAPSHOT_SCHEMA;
pub use schema::{inode, last_numbers, open_ro, open_rw, record_id};
pub use select::{
    any_between, frame_size, frame_size_at_most, pending, select_changes, select_changes_with,
    select_incidents, DictFrameError, DictFrames, FrameSizeError, Pending, Selection, Stored,
};

/// What can go wrong with the record file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened or created.
    #[error("cannot open the record {path}: {cause} (check that the directory exists and is writable, or pass --record PATH or --no-record)")]
    Open {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    /// There is no record at that path.
    #[error("no record at {0} (observer run writes it; pass --record PATH)")]
    Missing(PathBuf),
    /// The file exists but is not an observer record (or is damaged).
    #[error("{path} is not a readable observer record ({cause}); it was left untouched: move it away or pass another --record PATH")]
    NotARecord {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    /// An SQLite file of something else.
    #[error(
        "{0} is an SQLite file but not an observer record; pass the record's path with --record"
    )]
    Foreign(PathBuf),
    /// The file was written by a newer observer.
    #[error("{path} has record layout {found}, this observer knows {SCHEMA_VERSION}: use a newer observer or another --record PATH")]
    Version { path: PathBuf, found: i64 },
    /// A query failed.
    #[error("reading the record: {0}")]
    Query(#[from] rusqlite::Error),
    /// A stored row does not decode.
    #[error("change {seq} of the record cannot be read ({cause}): the file is damaged at that row; rows before and after it still read with --until/--since around its time")]
    Damaged { seq: u64, cause: String },
}
