//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), for the decoders that are not
//! public: thin wrappers, so that the targets drive the same code the daemon runs. Not an API.

use std::path::Path;
use std::sync::OnceLock;

use crate::incidents::owners::{self, Owners};
use crate::xtables::{decode, XtError, XtProto, XtTable};

/// Decode an x_tables table from its `GET_INFO` reply followed by its entries (the layout of
/// `xtables/testdata/*.bin`). With `fix_size`, the entries' size in `GET_INFO` is replaced by
/// the real one, as a kernel reply has it, so that the decoder gets past that check.
pub fn xt_table(proto: XtProto, bytes: &[u8], fix_size: bool) -> Result<XtTable, XtError> {
    let n = decode::layout(proto).info_size;
    let Some(head) = bytes.get(..n) else {
        return Err(XtError::Malformed {
            offset: bytes.len(),
            reason: "shorter than GET_INFO",
        });
    };
    let mut info = decode::parse_info(proto, head)?;
    if fix_size {
        info.size = u32::try_from(bytes.len() - n).unwrap_or(u32::MAX);
    }
    decode::decode_table_at(proto, &info, bytes.to_vec(), n)
}

/// An owners file (`ext`: `toml`, `yaml` or `yml`) put in front of the catalog, as `--owners`
/// does, without the process-wide list of wrappers it also sets.
pub fn owners(ext: &str, text: &str) -> Result<Owners, owners::OwnersError> {
    static CATALOG: OnceLock<Owners> = OnceLock::new();
    let file = owners::parse_file(Path::new(&format!("owners.{ext}")), text)?;
    let mut o = CATALOG.get_or_init(Owners::catalog).clone();
    o.apply(file)?;
    Ok(o)
}
