//! What to write to put back what a wipe took, and whether to write it at all: a pure function
//! of what was lost (the chains as they were, the jumps into them, the sets their rules use) and
//! of the ruleset as it is now.
//!
//! Each lost chain is, now, one of:
//! - gone: it is declared again and its rules are added in order;
//! - there and empty: its rules are added;
//! - there with exactly the lost rules: its owner (or someone) already put it back;
//! - there with other rules: a newer writer's content, which is never written over.
//!
//! A jump is put back at its old position (or at the end of a chain that is shorter now) when
//! its rule is not in its chain any more. The script is one atomic write: `iptables-restore
//! --noflush` applies a table's lines in one replace (legacy) or one transaction (nft), and
//! `nft -f` one transaction.

use crate::forensics::model::{render_nft, Chain, Set, Table};
use crate::ruleset::{self, Backend, Family};

/// What one wipe took from one owner in one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    /// The owner's chains, as they were before the wipe, in the table's order.
    pub chains: Vec<Chain>,
    /// Rules of other chains (built-in or foreign) that jumped into them.
    pub jumps: Vec<Jump>,
    /// nft: the named sets and maps the lost rules use.
    pub sets: Vec<Set>,
}

/// A rule of another chain that jumped (or went) to a lost chain: at `position` (from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub chain: String,
    pub position: usize,
    pub rule: String,
}

/// The ruleset as it is now, as far as a plan asks.
pub trait Now {
    fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain>;
    fn has_set(&self, family: Family, table: &str, name: &str) -> bool;
}

/// The program that applies a script, with its arguments; the script goes to its stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    IptablesLegacy(Family),
    IptablesNft(Family),
    Nft,
    /// `ipset restore`: the sets the rules of an iptables script name, written before it.
    Ipset,
}

impl Tool {
    pub fn argv(self) -> [&'static str; 2] {
        match self {
            Tool::IptablesLegacy(Family::Ip6) => ["ip6tables-legacy-restore", "--noflush"],
            Tool::IptablesLegacy(_) => ["iptables-legacy-restore", "--noflush"],
            Tool::IptablesNft(Family::Ip6) => ["ip6tables-nft-restore", "--noflush"],
            Tool::IptablesNft(_) => ["iptables-nft-restore", "--noflush"],
            Tool::Nft => ["nft", "-f"],
            Tool::Ipset => ["ipset", "restore"],
        }
    }

    /// The command line, as a person would type it (the script on stdin).
    pub fn command(self) -> String {
        let [prog, arg] = self.argv();
        if self == Tool::Nft {
            format!("{prog} {arg} -")
        } else {
            format!("{prog} {arg}")
        }
    }
}

/// One atomic write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub tool: Tool,
    pub text: String,
    /// The chains it puts back (or fills), and the jumps it re-inserts, for the incident.
    pub chains: Vec<String>,
    pub jumps: usize,
    /// The ipsets it creates again.
    pub sets: Vec<String>,
    /// What takes it back, for the same tool, when a script after it is refused (so that the
    /// restore as a whole leaves nothing half-written).
    pub undo: Option<String>,
}

/// What to do about one owner's losses in one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Write(Script),
    /// Everything lost is there again: nothing to write.
    Repaired,
    /// Something now holds other content: nothing is written. Says what.
    Conflict(String),
    /// This kind of table cannot be restored (arptables, ebtables). Says why.
    Unsupported(String),
}

/// The decision for `lost`, against `now`.
pub fn plan(lost: &Lost, now: &dyn Now) -> Decision {
    if lost.backend == Backend::Legacy && !matches!(lost.family, Family::Ip | Family::Ip6) {
        return Decision::Unsupported(format!(
            "restoring {} legacy tables is not supported (only iptables and ip6tables)",
            lost.family
        ));
    }
    let mut put: Vec<(&Chain, bool)> = Vec::new(); // chain, declare it
    let mut conflicts: Vec<String> = Vec::new();
    for c in &lost.chains {
        match now.chain(lost.family, &lost.table, &c.name) {
            None => put.push((c, true)),
            Some(n) if n.rules == c.rules => {}
            Some(n) if n.rules.is_empty() => put.push((c, false)),
            Some(n) => conflicts.push(format!(
                "{} now holds {} that {} not what was lost",
                c.name,
                crate::ruleset::plural(n.rules.len() as u64, "rule", "rules"),
                if n.rules.len() == 1 { "is" } else { "are" }
            )),
        }
    }
    if !conflicts.is_empty() {
        return Decision::Conflict(format!(
            "a newer writer's content is there ({}): nothing was written over it",
            conflicts.join("; ")
        ));
    }
    let lost_names: Vec<&str> = lost.chains.iter().map(|c| c.name.as_str()).collect();
    let jumps = jumps_to_put(lost, now, &lost_names);
    if put.is_empty() && jumps.is_empty() {
        return Decision::Repaired;
    }
    let tool = tool_for(lost);
    let text = match tool {
        Tool::Nft => nft_script(lost, now, &put, &jumps),
        _ => iptables_script(&lost.table, &put, &jumps),
    };
    Decision::Write(Script {
        tool,
        text,
        chains: put.iter().map(|(c, _)| c.name.clone()).collect(),
        jumps: jumps.len(),
        sets: Vec::new(),
        undo: None,
    })
}

/// The jumps whose rule is not in its chain now, each with the index to insert it at, lowest
/// first. A jump whose chain is gone (a foreign nft chain that went with its table) is not
/// ours to put back.
fn jumps_to_put<'l>(lost: &'l Lost, now: &dyn Now, lost_names: &[&str]) -> Vec<(&'l Jump, usize)> {
    let mut js: Vec<&Jump> = lost
        .jumps
        .iter()
        .filter(|j| !lost_names.contains(&j.chain.as_str()))
        .collect();
    js.sort_by_key(|j| (j.chain.clone(), j.position));
    let mut out = Vec::new();
    let mut added: Vec<(&str, usize)> = Vec::new();
    for j in js {
        let len = match now.chain(lost.family, &lost.table, &j.chain) {
            Some(n) if n.rules.contains(&j.rule) => continue,
            Some(n) => n.rules.len(),
            // An iptables built-in chain: iptables-nft-restore makes it again with its table.
            None if lost.backend == Backend::Nft && is_iptables_builtin(&j.chain) => 0,
            None if lost.backend == Backend::Legacy => 0,
            None => continue,
        };
        let before = added.iter().filter(|(c, _)| *c == j.chain).count();
        out.push((j, j.position.min(len + before)));
        added.push((j.chain.as_str(), j.position));
    }
    out
}

fn is_iptables_builtin(chain: &str) -> bool {
    matches!(
        chain,
        "INPUT" | "OUTPUT" | "FORWARD" | "PREROUTING" | "POSTROUTING"
    )
}

/// iptables syntax (the rule as `iptables-save` prints it after `-A CHAIN`): empty, or options.
fn iptables_syntax(rule: &str) -> bool {
    rule.is_empty() || rule.starts_with('-') || rule.starts_with("! -")
}

/// Legacy tables through iptables-legacy-restore; nft tables that iptables-nft wrote (rules in
/// iptables syntax) through iptables-nft-restore; other nft tables through `nft -f`.
fn tool_for(lost: &Lost) -> Tool {
    if lost.backend == Backend::Legacy {
        return Tool::IptablesLegacy(lost.family);
    }
    let xt_table = matches!(lost.family, Family::Ip | Family::Ip6)
        && matches!(
            lost.table.as_str(),
            "filter" | "nat" | "mangle" | "raw" | "security"
        );
    let rules = lost
        .chains
        .iter()
        .flat_map(|c| c.rules.iter())
        .chain(lost.jumps.iter().map(|j| &j.rule));
    if xt_table && lost.sets.is_empty() && rules.clone().all(|r| iptables_syntax(r)) {
        Tool::IptablesNft(lost.family)
    } else {
        Tool::Nft
    }
}

fn iptables_script(table: &str, put: &[(&Chain, bool)], jumps: &[(&Jump, usize)]) -> String {
    let mut out = format!("*{table}\n");
    for (c, declare) in put {
        if *declare {
            out.push_str(&format!(":{} - [0:0]\n", c.name));
        }
    }
    for (c, _) in put {
        for r in &c.rules {
            out.push_str(&format!("-A {}", c.name));
            if !r.is_empty() {
                out.push(' ');
                out.push_str(r);
            }
            out.push('\n');
        }
    }
    for (j, at) in jumps {
        out.push_str(&format!("-I {} {} {}\n", j.chain, at + 1, j.rule));
    }
    out.push_str("COMMIT\n");
    out
}

fn nft_script(
    lost: &Lost,
    now: &dyn Now,
    put: &[(&Chain, bool)],
    jumps: &[(&Jump, usize)],
) -> String {
    let sets: Vec<Set> = lost
        .sets
        .iter()
        .filter(|s| !now.has_set(lost.family, &lost.table, &s.name))
        .cloned()
        .collect();
    let mut table = Table::new(lost.family, &lost.table);
    table.sets = sets;
    table.chains = put.iter().map(|(c, _)| (*c).clone()).collect();
    let mut out = render_nft(&table, false);
    for (j, at) in jumps {
        let len = now
            .chain(lost.family, &lost.table, &j.chain)
            .map_or(0, |c| c.rules.len());
        if *at >= len {
            out.push_str(&format!(
                "add rule {} {} {} {}\n",
                lost.family, lost.table, j.chain, j.rule
            ));
        } else {
            out.push_str(&format!(
                "insert rule {} {} {} index {} {}\n",
                lost.family, lost.table, j.chain, at, j.rule
            ));
        }
    }
    out
}

/// The chain a rule jumps or goes to, if any: `-j NAME`, `-g NAME` (iptables), `jump NAME`,
/// `goto NAME` (nft); never a word of its comment.
pub fn jump_target(rule: &str) -> Option<&str> {
    ruleset::jump_targets(None, rule).into_iter().next()
}

/// The named sets (`@name`) a rule uses; never a word of its comment (a quoted string).
pub fn set_refs(rule: &str) -> impl Iterator<Item = &str> {
    ruleset::words(rule)
        .into_iter()
        .filter(|w| !w.starts_with('"'))
        .flat_map(|w| w.split([',', '{', '}']))
        .filter_map(|w| w.strip_prefix('@'))
        .filter(|w| !w.is_empty())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    struct Fixed(Vec<Table>);

    impl Now for Fixed {
        fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain> {
            self.0
                .iter()
                .find(|t| t.family == family && t.name == table)?
                .chains
                .iter()
                .find(|c| c.name == name)
        }
        fn has_set(&self, family: Family, table: &str, name: &str) -> bool {
            self.0.iter().any(|t| {
                t.family == family && t.name == table && t.sets.iter().any(|s| s.name == name)
            })
        }
    }

    /// A chain for the restorer's tests: its name, header and rules.
    pub(crate) fn chain(name: &str, head: Option<&str>, rules: &[&str]) -> Chain {
        Chain {
            name: name.into(),
            head: head.map(str::to_string),
            rules: rules.iter().map(|r| r.to_string()).collect(),
            last: None,
        }
    }

    fn filter(chains: Vec<Chain>) -> Table {
        let mut t = Table::new(Family::Ip, "filter");
        t.chains = chains;
        t
    }

    fn kube_firewall(backend: Backend) -> Lost {
        Lost {
            backend,
            family: Family::Ip,
            table: "filter".into(),
            chains: vec![chain(
                "KUBE-FIREWALL",
                None,
                &["-m mark --mark 0x8000/0x8000 -j DROP"],
            )],
            jumps: vec![Jump {
                chain: "INPUT".into(),
                position: 0,
                rule: "-j KUBE-FIREWALL".into(),
            }],
            sets: vec![],
        }
    }

    #[test]
    fn a_deleted_chain_is_declared_filled_and_jumped_to_again_in_one_commit() {
        let now = Fixed(vec![filter(vec![chain(
            "INPUT",
            Some("ACCEPT"),
            &["-i lo -j ACCEPT"],
        )])]);
        let Decision::Write(s) = plan(&kube_firewall(Backend::Legacy), &now) else {
            panic!("expected a write");
        };
        assert_eq!(s.tool, Tool::IptablesLegacy(Family::Ip));
        assert_eq!(
            s.text,
            "*filter\n:KUBE-FIREWALL - [0:0]\n-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP\n\
             -I INPUT 1 -j KUBE-FIREWALL\nCOMMIT\n"
        );
        assert_eq!(s.chains, vec!["KUBE-FIREWALL"]);
        assert_eq!(s.jumps, 1);
    }

    #[test]
    fn what_is_back_already_is_not_written_again() {
        let now = Fixed(vec![filter(vec![
            chain("INPUT", Some("ACCEPT"), &["-j KUBE-FIREWALL"]),
            chain(
                "KUBE-FIREWALL",
                None,
                &["-m mark --mark 0x8000/0x8000 -j DROP"],
            ),
        ])]);
        assert_eq!(
            plan(&kube_firewall(Backend::Legacy), &now),
            Decision::Repaired
        );
    }

    #[test]
    fn an_empty_chain_there_now_is_filled_without_declaring_it() {
        let now = Fixed(vec![filter(vec![
            chain("INPUT", Some("ACCEPT"), &["-j KUBE-FIREWALL"]),
            chain("KUBE-FIREWALL", None, &[]),
        ])]);
        let Decision::Write(s) = plan(&kube_firewall(Backend::Legacy), &now) else {
            panic!("expected a write");
        };
        assert_eq!(
            s.text,
            "*filter\n-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP\nCOMMIT\n"
        );
    }

    #[test]
    fn a_chain_holding_other_rules_now_is_never_written_over() {
        let now = Fixed(vec![filter(vec![chain(
            "KUBE-FIREWALL",
            None,
            &["-j ACCEPT"],
        )])]);
        let Decision::Conflict(why) = plan(&kube_firewall(Backend::Legacy), &now) else {
            panic!("expected a conflict");
        };
        assert!(
            why.contains("KUBE-FIREWALL now holds 1 rule that is not what was lost"),
            "{why}"
        );
    }

    #[test]
    fn a_jump_goes_back_at_its_position_or_at_the_end_of_a_shorter_chain() {
        let mut lost = kube_firewall(Backend::Legacy);
        lost.jumps[0].position = 5;
        let now = Fixed(vec![filter(vec![
            chain("INPUT", Some("ACCEPT"), &["-i lo -j ACCEPT", "-j LOG"]),
            chain(
                "KUBE-FIREWALL",
                None,
                &["-m mark --mark 0x8000/0x8000 -j DROP"],
            ),
        ])]);
        let Decision::Write(s) = plan(&lost, &now) else {
            panic!("expected a write");
        };
        assert_eq!(s.text, "*filter\n-I INPUT 3 -j KUBE-FIREWALL\nCOMMIT\n");
        assert!(s.chains.is_empty());
    }

    #[test]
    fn an_iptables_nft_table_goes_back_through_iptables_nft_restore() {
        let now = Fixed(vec![]);
        let Decision::Write(s) = plan(&kube_firewall(Backend::Nft), &now) else {
            panic!("expected a write");
        };
        assert_eq!(s.tool, Tool::IptablesNft(Family::Ip));
        assert!(s.text.contains("-I INPUT 1 -j KUBE-FIREWALL"), "{}", s.text);
    }

    #[test]
    fn an_nft_table_goes_back_whole_with_its_sets_through_nft() {
        let lost = Lost {
            backend: Backend::Nft,
            family: Family::Inet,
            table: "podman".into(),
            chains: vec![
                chain(
                    "input",
                    Some("type filter hook input priority filter; policy accept"),
                    &["ip saddr @blocked drop", "jump allow"],
                ),
                chain("allow", None, &["tcp dport 8080 accept"]),
            ],
            jumps: vec![],
            sets: vec![Set {
                name: "blocked".into(),
                decl: "type ipv4_addr".into(),
                elements: vec!["10.0.0.1".into()],
                incomplete: false,
                last: None,
            }],
        };
        let Decision::Write(s) = plan(&lost, &Fixed(vec![])) else {
            panic!("expected a write");
        };
        assert_eq!(s.tool, Tool::Nft);
        assert_eq!(
            s.text,
            "table inet podman {\n\tset blocked {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1 }\n\t}\n\n\
             \tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\
             \t\tip saddr @blocked drop\n\t\tjump allow\n\t}\n\n\
             \tchain allow {\n\t\ttcp dport 8080 accept\n\t}\n}\n"
        );
    }

    #[test]
    fn arptables_and_ebtables_are_said_to_be_unsupported() {
        let mut lost = kube_firewall(Backend::Legacy);
        lost.family = Family::Bridge;
        assert!(matches!(
            plan(&lost, &Fixed(vec![])),
            Decision::Unsupported(_)
        ));
    }

    #[test]
    fn jump_targets_and_set_references_are_read_from_either_syntax() {
        assert_eq!(
            jump_target("-m comment --comment x -j KUBE-SVC-A"),
            Some("KUBE-SVC-A")
        );
        assert_eq!(jump_target("-g CNI-DN-1"), Some("CNI-DN-1"));
        assert_eq!(jump_target("ip daddr 1.2.3.4 jump \"svc\""), Some("svc"));
        assert_eq!(jump_target("-j ACCEPT"), Some("ACCEPT"));
        assert_eq!(jump_target("-m mark --mark 1"), None);
        let refs: Vec<&str> = set_refs("ip saddr @a tcp dport vmap @b,@c").collect();
        assert_eq!(refs, vec!["a", "b", "c"]);
    }

    #[test]
    fn a_comment_is_neither_a_jump_nor_a_set_reference() {
        assert_eq!(jump_target("-j KUBE-SVC-X"), Some("KUBE-SVC-X"));
        assert_eq!(jump_target("-p tcp --goto X"), Some("X"));
        assert_eq!(jump_target("ip saddr @set jump X"), Some("X"));
        assert_eq!(jump_target("goto X"), Some("X"));
        assert_eq!(jump_target("-m comment --comment \"x -j FOO\""), None);
        assert_eq!(
            jump_target("-m comment --comment \"x -j FOO\" -j KUBE-SVC-X"),
            Some("KUBE-SVC-X")
        );
        assert_eq!(
            jump_target("-m comment --comment -g -j KUBE-SVC-X"),
            Some("KUBE-SVC-X")
        );
        assert_eq!(jump_target("counter comment \"jump FOO\" accept"), None);

        let refs: Vec<&str> = set_refs("ip saddr @set counter drop").collect();
        assert_eq!(refs, vec!["set"]);
        let refs: Vec<&str> =
            set_refs("ip saddr { 10.0.0.1 } ip daddr @d comment \"see @myset\" accept").collect();
        assert_eq!(refs, vec!["d"]);
        assert_eq!(
            set_refs("tcp dport 22 comment \"@myset, {@other}\" drop").count(),
            0
        );
        let refs: Vec<&str> = set_refs("ip saddr . tcp dport {@a,@b} accept").collect();
        assert_eq!(refs, vec!["a", "b"]);
    }
}
