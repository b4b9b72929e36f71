//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz) that drive the agent's parsers
//! (owners files): thin wrappers, so that the targets drive the same code the daemon runs. The
//! decoders' entry points are the decoder crate's (`observer_rules::fuzzing`), re-exported.
//! Not an API.

use std::path::Path;
use std::sync::OnceLock;

use crate::incidents::owners::{self, Owners};

pub use observer_rules::fuzzing::xt_table;

/// An owners file (`ext`: `toml`, `yaml` or `yml`) put in front of the catalog, as `--owners`
/// does, without the process-wide list of wrappers it also sets.
pub fn owners(ext: &str, text: &str) -> Result<Owners, owners::OwnersError> {
    static CATALOG: OnceLock<Owners> = OnceLock::new();
    let file = owners::parse_file(Path::new(&format!("owners.{ext}")), text)?;
    let mut o = CATALOG.get_or_init(Owners::catalog).clone();
    o.apply(file)?;
    Ok(o)
}
