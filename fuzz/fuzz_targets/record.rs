//! The record (`observer run`'s SQLite file) as `observer query` and the HTTP backlog read it:
//! the input written to a file of this process, opened with `store::open_ro`, then
//! `store::select_changes` and `store::select_incidents` with the default selection and with
//! filters. A damaged file must give errors, never a panic or a hang.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use observer::store::{self, Selection};

fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| observer_fuzz::scratch_dir().join("record.db"))
}

/// The record and what SQLite may have left beside it.
fn clean(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

fuzz_target!(|data: &[u8]| {
    let path = path();
    clean(path);
    std::fs::write(path, data).expect("writing the record");
    if let Ok(conn) = store::open_ro(path) {
        let filtered = Selection {
            since_ns: Some(1),
            chain_glob: Some("KUBE-*".into()),
            actor: Some("kube-proxy".into()),
            ops: vec!["rule_add".into(), "chain_delete".into()],
            backend: Some("legacy".into()),
            table: Some("nat".into()),
            types: vec!["foreign_flush".into()],
            after: Some(0),
            limit: Some(100),
            ..Selection::default()
        };
        for s in [Selection::default(), filtered] {
            std::hint::black_box(store::select_changes(&conn, &s).ok());
            std::hint::black_box(store::select_incidents(&conn, &s).ok());
        }
    }
    clean(path);
});
