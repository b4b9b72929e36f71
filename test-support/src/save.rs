//! `iptables-save` text read as rules by chain.

use std::collections::BTreeMap;

/// The rules of an `iptables-save` (or `-nft-save`, `-legacy-save`) text, by (table, chain), in
/// order, each without its `-A CHAIN ` prefix.
pub fn save_rules(text: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut table = String::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let (chain, rule) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry((table.clone(), chain.to_string()))
                .or_default()
                .push(rule.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_kept_by_table_and_chain_in_order() {
        let text = "*nat\n:X - [0:0]\n-A X -j RETURN\n-A X -p tcp -j DNAT --to-destination 1.2.3.4\nCOMMIT\n*filter\n-A INPUT\nCOMMIT\n";
        let r = save_rules(text);
        assert_eq!(
            r[&("nat".into(), "X".into())],
            ["-j RETURN", "-p tcp -j DNAT --to-destination 1.2.3.4"]
        );
        assert_eq!(r[&("filter".into(), "INPUT".into())], [""]);
        assert_eq!(r.len(), 2);
    }
}
