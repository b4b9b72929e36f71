//! A namespace's ruleset as the record keeps it: tables, chains (header and rules as text) and
//! named sets, per backend. Built from what the engine holds (an x_tables table read from the
//! kernel, the nf_tables state) and printed back in `iptables-save` and `nft list ruleset` syntax.

use serde::{Deserialize, Serialize};

use crate::nftables::state::{describe_chain, describe_set, NftState};
use crate::ruleset::{Backend, Family};
use crate::timestamp::Timestamp;
use crate::xtables::XtTable;

/// Who wrote a chain (or set) last, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Last {
    pub seq: u64,
    pub time: Timestamp,
    pub actor: String,
    pub comm: String,
    pub pid: u32,
    pub op: String,
}

/// One chain: its header (a legacy built-in chain's policy; an nft base chain's `type ... hook
/// ... priority ...; policy ...`) and its rules in the backend's syntax.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    pub rules: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Last>,
}

/// A named nft set or map: its declaration (`type ipv4_addr; flags interval`) and elements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Set {
    pub name: String,
    pub decl: String,
    pub elements: Vec<String>,
    /// Some elements are not known: an element change listed only the first of them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Last>,
}

crate::output::people::texts!(Last: actor, comm, op);
crate::output::people::texts!(Chain: name, head, rules, last);
crate::output::people::texts!(Set: name, decl, elements, last);
crate::output::people::texts!(Table: name, sets, chains);
crate::output::people::texts!(Tables: tables);

/// One table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub family: Family,
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<Set>,
    pub chains: Vec<Chain>,
}

impl Table {
    pub fn new(family: Family, name: &str) -> Table {
        Table {
            family,
            name: name.to_string(),
            sets: Vec::new(),
            chains: Vec::new(),
        }
    }
}

/// The tables of one backend in one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables {
    pub tables: Vec<Table>,
}

impl Tables {
    /// Legacy tables from the engine's copies, in a stable order (family, name).
    pub fn from_legacy<'t>(tables: impl IntoIterator<Item = &'t XtTable>) -> Tables {
        let mut out: Vec<Table> = tables
            .into_iter()
            .map(|t| Table {
                family: t.proto.family(),
                name: t.name.clone(),
                sets: Vec::new(),
                chains: t
                    .chains
                    .iter()
                    .map(|c| Chain {
                        name: c.name.clone(),
                        head: c.policy.clone(),
                        rules: c.rules.iter().map(|r| t.rule_text(r)).collect(),
                        last: None,
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| (a.family, &a.name).cmp(&(b.family, &b.name)));
        Tables { tables: out }
    }

    /// nf_tables tables from the reader's state, in the kernel's order (creation: handles).
    pub fn from_nft(state: &NftState) -> Tables {
        let mut tables: Vec<(Option<u64>, Table)> = state
            .tables
            .values()
            .map(|t| {
                let family = Family::from_nfproto(t.table.family);
                let mut sets: Vec<(Option<u64>, Set)> = t
                    .sets
                    .values()
                    .filter(|s| !s.set.is_anonymous())
                    .map(|s| {
                        let elems: Vec<_> = s.elements.values().collect();
                        let elements = crate::nftables::render::element_items(&s.set, &elems, &[]);
                        (
                            s.set.handle,
                            Set {
                                name: s.set.name.clone(),
                                decl: describe_set(&s.set),
                                elements,
                                incomplete: false,
                                last: None,
                            },
                        )
                    })
                    .collect();
                sets.sort_by_key(|(h, _)| h.unwrap_or(u64::MAX));
                let mut chains: Vec<(Option<u64>, Chain)> = t
                    .chains
                    .values()
                    .map(|c| {
                        (
                            c.chain.handle,
                            Chain {
                                name: c.chain.name.clone(),
                                head: describe_chain(&c.chain),
                                // In the writer's syntax, as the change lines replayed on top of it.
                                rules: c.rules.iter().map(|r| r.forms().0).collect(),
                                last: None,
                            },
                        )
                    })
                    .collect();
                chains.sort_by_key(|(h, _)| h.unwrap_or(u64::MAX));
                (
                    t.table.handle,
                    Table {
                        family,
                        name: t.table.name.clone(),
                        sets: sets.into_iter().map(|(_, s)| s).collect(),
                        chains: chains.into_iter().map(|(_, c)| c).collect(),
                    },
                )
            })
            .collect();
        tables.sort_by_key(|(h, _)| h.unwrap_or(u64::MAX));
        Tables {
            tables: tables.into_iter().map(|(_, t)| t).collect(),
        }
    }
}

fn last_comment(what: &str, name: &str, last: &Option<Last>) -> String {
    match last {
        Some(l) => format!(
            "# {what} {name}: last written by {} ({} {}) at {}, {} (seq {})\n",
            l.actor, l.comm, l.pid, l.time, l.op, l.seq
        ),
        None => format!("# {what} {name}: not written since the record began\n"),
    }
}

/// One legacy table in `iptables-save` syntax (counters `[0:0]`, so that it can be restored),
/// with each chain's last writer in `#` comments when `writers`.
pub fn render_legacy(t: &Table, writers: bool) -> String {
    let mut out = String::new();
    if writers {
        for c in &t.chains {
            out.push_str(&last_comment("chain", &c.name, &c.last));
        }
    }
    out.push_str(&format!("*{}\n", t.name));
    for c in &t.chains {
        out.push_str(&format!(
            ":{} {} [0:0]\n",
            c.name,
            c.head.as_deref().unwrap_or("-")
        ));
    }
    for c in &t.chains {
        for r in &c.rules {
            out.push_str("-A ");
            out.push_str(&c.name);
            if !r.is_empty() {
                out.push(' ');
                out.push_str(r);
            }
            out.push('\n');
        }
    }
    out.push_str("COMMIT\n");
    out
}

/// One nft table in `nft list ruleset` syntax, with each chain's and set's last writer in `#`
/// comments when `writers`.
pub fn render_nft(t: &Table, writers: bool) -> String {
    let mut out = format!("table {} {} {{\n", t.family, t.name);
    let mut first = true;
    for s in &t.sets {
        if !first {
            out.push('\n');
        }
        first = false;
        if writers {
            out.push('\t');
            out.push_str(&last_comment("set", &s.name, &s.last));
        }
        let map = s.decl.contains(" : ");
        out.push_str(&format!(
            "\t{} {} {{\n",
            if map { "map" } else { "set" },
            s.name
        ));
        for part in s.decl.split("; ") {
            out.push_str(&format!("\t\t{part}\n"));
        }
        if s.incomplete {
            out.push_str("\t\t# elements incomplete: an element change listed only some\n");
        }
        if !s.elements.is_empty() {
            out.push_str(&format!("\t\telements = {{ {} }}\n", s.elements.join(", ")));
        }
        out.push_str("\t}\n");
    }
    for c in &t.chains {
        if !first {
            out.push('\n');
        }
        first = false;
        if writers {
            out.push('\t');
            out.push_str(&last_comment("chain", &c.name, &c.last));
        }
        out.push_str(&format!("\tchain {} {{\n", c.name));
        if let Some(h) = &c.head {
            out.push_str(&format!("\t\t{h};\n"));
        }
        for r in &c.rules {
            out.push_str(&format!("\t\t{r}\n"));
        }
        out.push_str("\t}\n");
    }
    out.push_str("}\n");
    out
}

/// A table in its backend's syntax.
pub fn render(backend: Backend, t: &Table, writers: bool) -> String {
    match backend {
        Backend::Nft => render_nft(t, writers),
        _ => render_legacy(t, writers),
    }
}
