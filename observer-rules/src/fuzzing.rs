//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), for the decoders that are not
//! public: thin wrappers, so that the targets drive the same code the agent runs. Not an API.

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
