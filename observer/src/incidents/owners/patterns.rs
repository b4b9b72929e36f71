//! Compiling an ownership rule's patterns: a table's (`"inet firewalld"`) and chains' globs,
//! and one matcher over every rule's chain patterns.

use globset::{Glob, GlobMatcher, GlobSet, GlobSetBuilder};

use super::{OwnersError, Rule};
use crate::ruleset::Family;

/// `"inet firewalld"` → (family, name glob).
pub(super) fn table_pattern(p: &str) -> Result<(Family, GlobMatcher), OwnersError> {
    let bad = |why: String| OwnersError::Table {
        pattern: p.to_string(),
        why,
    };
    let (fam, name) = p
        .trim()
        .split_once(char::is_whitespace)
        .ok_or_else(|| bad("give the family and the name, e.g. `inet mytable`".into()))?;
    let family = match fam {
        "ip" => Family::Ip,
        "ip6" => Family::Ip6,
        "inet" => Family::Inet,
        "arp" => Family::Arp,
        "bridge" => Family::Bridge,
        "netdev" => Family::Netdev,
        other => {
            return Err(bad(format!(
                "`{other}` is not an nftables family (ip, ip6, inet, arp, bridge, netdev)"
            )))
        }
    };
    let name = Glob::new(name.trim())
        .map(|g| g.compile_matcher())
        .map_err(|e| bad(e.to_string()))?;
    Ok((family, name))
}

pub(super) fn globs(patterns: &[&str]) -> Vec<Glob> {
    patterns
        .iter()
        .map(|p| Glob::new(p).expect("catalog globs are valid"))
        .collect()
}

/// One matcher over every rule's patterns, and the rule of each pattern.
pub(super) fn index(rules: &[Rule]) -> Result<(GlobSet, Vec<usize>), globset::Error> {
    let mut set = GlobSetBuilder::new();
    let mut glob_rule = Vec::new();
    for (i, g) in rules
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.patterns.iter().map(move |g| (i, g)))
    {
        set.add(g.clone());
        glob_rule.push(i);
    }
    Ok((set.build()?, glob_rule))
}
