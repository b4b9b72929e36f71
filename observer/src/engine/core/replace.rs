//! An x_tables replace, decided step by step: whether it changed anything, whether what
//! observer holds has it already, whether the writer's copy of its table is trusted or the
//! table is read back (and how), and whether the table read back is the writer's, or a gap to
//! report.
//!
//! The writer's copy (the replace struct the kernel side copied, [`crate::hooks::blob`]) is
//! exactly the table that writer installed, whatever was installed after it: it is used
//! whenever it arrived whole and decodes as the table replaced. Otherwise the table is read
//! back from the kernel, and may by then hold the next writer's replace too.

use crate::xtables::{XtError, XtProto};

/// Which way a replace record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// An ebtables replace the kernel took: its table is read back and diffed.
    Bridge,
    /// Refused by the kernel (nothing changed: no read, no diff): one line for the attempt.
    Attempt,
    /// An iptables, ip6tables or arptables replace the kernel took.
    Table(XtProto),
}

/// Which way a replace goes, from the kernel's result (`ret`: 0 or a negative errno) and its
/// protocol (`None`: ebtables).
pub fn route(ret: i64, proto: Option<XtProto>) -> Route {
    match (ret, proto) {
        (0, None) => Route::Bridge,
        (0, Some(proto)) => Route::Table(proto),
        _ => Route::Attempt,
    }
}

/// Whether what observer holds of a table already has a replace made at `ktime_ns` (boot
/// clock): the table was last read back from the kernel (`read_at`) after it. A read holds
/// every replace made before it began, so such a replace's copy, still queued, must not be
/// diffed against it (the read may also hold later replaces, which the diff would show undone).
pub fn held_already(read_at: Option<u64>, ktime_ns: u64) -> bool {
    read_at.is_some_and(|at| ktime_ns < at)
}

/// What came of the writer's copy of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterCopy {
    /// None came: the table was too large to copy, the ring buffer was too full, or a piece was
    /// lost, out of order or short.
    Missing,
    /// It does not decode.
    Undecodable,
    /// It decodes as another table than the one replaced.
    OtherTable,
    /// It decodes as the table replaced; `refers_to_sets`: its rules name ipsets by index
    /// (`-m set`), which only the namespace's sockets can name.
    Whole { refers_to_sets: bool },
}

/// Where the table a writer installed is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFrom {
    /// The writer's copy, trusted as it is; `name_sets`: its set indices are named first,
    /// through the namespace's sockets.
    Copy { name_sets: bool },
    /// Read back through the namespace's sockets, from a pooled thread.
    Sockets,
    /// Read back from a thread that enters the namespace and opens its sockets there (the
    /// namespace's first legacy replace).
    EnterNamespace,
}

impl TableFrom {
    /// Whether the table is read back from the kernel (and may hold later replaces too).
    pub fn read_back(self) -> bool {
        !matches!(self, TableFrom::Copy { .. })
    }
}

/// Where the table is taken from, given what came of the writer's copy and whether the
/// namespace's sockets are open. A copy that names sets is trusted only once the sockets are
/// open; reading the table back the first time opens them.
pub fn table_from(copy: WriterCopy, sockets_open: bool) -> TableFrom {
    match (copy, sockets_open) {
        (WriterCopy::Whole { refers_to_sets }, true) => TableFrom::Copy {
            name_sets: refers_to_sets,
        },
        (
            WriterCopy::Whole {
                refers_to_sets: false,
            },
            false,
        ) => TableFrom::Copy { name_sets: false },
        (_, true) => TableFrom::Sockets,
        (_, false) => TableFrom::EnterNamespace,
    }
}

/// The table a replace left, from its read (or its copy): the table, or none when the read
/// found no such table (it was gone by then: diffed against nothing). Other errors are the
/// caller's to report.
pub fn table_or_gone<T>(read: Result<T, XtError>) -> Result<Option<T>, XtError> {
    match read {
        Ok(t) => Ok(Some(t)),
        Err(XtError::NoSuchTable { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What is recorded of a replace once its table is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The table read back is not the one the writer installed (it has another number of
    /// entries): a gap is reported, since the changes found may include the next writer's.
    /// Holds the number of entries read.
    pub gap: Option<usize>,
    /// The table was read back: when its read began is recorded, so that the copies of
    /// replaces it already holds are not diffed against it.
    pub mark_read: bool,
}

/// What is recorded of a replace that installed `installed` entries, once its table is known
/// (`found`: the entries of the table read or decoded, `None` when it is gone), from `from`.
pub fn settle(from: TableFrom, installed: u32, found: Option<usize>) -> Settled {
    let read_back = from.read_back();
    Settled {
        gap: found.filter(|&n| read_back && n != installed as usize),
        mark_read: read_back,
    }
}

#[cfg(test)]
mod tests;
