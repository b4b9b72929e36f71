//! Who owns a chain: the built-in catalog, the user's `--owners` file, and what is learned.
//!
//! An *owner* is named like an actor (`kube-proxy`, `kubelet`, `calico-node`, `iptables.service`).
//! Several actor names can stand for one owner (`calico-node` and `calico-felix` are Calico), and
//! a chain can be shared by several writers (`KUBE-MARK-MASQ`: kubelet and kube-proxy).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{Glob, GlobMatcher, GlobSet};

use patterns::{globs, index, table_pattern};
use serde::{Deserialize, Serialize};

use crate::attribution::ProcessInfo;
use crate::ruleset::{Backend, Family};

/// How an owner is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// The built-in catalog (KEP-3178 and the CNIs' documented prefixes).
    Catalog,
    /// The `--owners` file.
    Config,
    /// The actor that created the chain (or first wrote a chain nobody was known to own).
    Learned,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Catalog => "catalog",
            How::Config => "config",
            How::Learned => "learned",
        }
    }
}

/// What the catalog or the file says about a chain name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// One owner.
    Owned { owner: String, how: How },
    /// Several writers share the chain: none of their changes to it is an incident.
    Shared { writers: Vec<String>, how: How },
}

/// One entry of the catalog or the file.
#[derive(Debug, Clone)]
struct Rule {
    patterns: Vec<Glob>,
    /// Shared with every object of the model it names.
    claim: Arc<Claim>,
}

/// An owner and the actor names (or systemd units) that act for it.
#[derive(Debug, Clone)]
struct Alias {
    owner: String,
    actors: Vec<String>,
}

/// The `--owners` file, TOML or YAML:
///
/// ```toml
/// [[owner]]
/// name = "calico"
/// actors = ["calico-node", "calico-felix"]
/// chains = ["cali-*", "felix-*"]
///
/// [[shared]]
/// chains = ["KUBE-MARK-MASQ"]
/// writers = ["kubelet", "kube-proxy"]
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnersFile {
    #[serde(default)]
    pub owner: Vec<OwnerEntry>,
    #[serde(default)]
    pub shared: Vec<SharedEntry>,
    /// Commands that only run others (site-specific wrappers, like `iptables-wrapper` scripts):
    /// the actor is found above them, as above `sh` or `timeout`.
    #[serde(default)]
    pub wrappers: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerEntry {
    pub name: String,
    /// Actor names (process names or systemd units) that act for this owner, besides `name`.
    #[serde(default)]
    pub actors: Vec<String>,
    /// Chain (or set) names or globs this owner owns.
    #[serde(default)]
    pub chains: Vec<String>,
    /// Components that write this owner's objects on its behalf without being it (docker's
    /// rules put in by firewalld's passthrough interface): their changes are not incidents.
    #[serde(default)]
    pub via: Vec<String>,
    /// nftables tables this owner owns whole (`"inet mytable"`, family and name; the name may
    /// be a glob): every chain and set in them is its own, whatever its name.
    #[serde(default)]
    pub tables: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedEntry {
    pub chains: Vec<String>,
    /// Owners or actors allowed to change these chains.
    pub writers: Vec<String>,
}

/// The catalog: KEP-3178 (kube-proxy, kubelet), the CNIs' documented prefixes, and the host
/// firewall managers and runtimes that share the ruleset with them. Each pattern is checked
/// against the chain names these components really create (see the tests).
const CATALOG: &[(&str, &[&str])] = &[
    (
        "kube-proxy",
        &[
            "KUBE-SERVICES",
            "KUBE-SVC-*",
            "KUBE-SVL-*",
            "KUBE-SEP-*",
            "KUBE-NODEPORTS",
            "KUBE-FW-*",
            "KUBE-XLB-*",
            "KUBE-EXT-*",
            "KUBE-FORWARD",
            "KUBE-PROXY-*",
            "KUBE-EXTERNAL-SERVICES",
            "KUBE-LOAD-BALANCER",
            "KUBE-NODE-PORT",
        ],
    ),
    (
        "kubelet",
        &[
            "KUBE-FIREWALL",
            "KUBE-KUBELET-CANARY",
            "KUBE-IPTABLES-HINT",
            "KUBE-MARK-DROP",
        ],
    ),
    ("calico-node", &["cali-*", "felix-*"]),
    ("cilium-agent", &["CILIUM_*", "OLD_CILIUM_*"]),
    ("azure-npm", &["AZURE-NPM*"]),
    (
        "kube-router",
        &["KUBE-ROUTER-*", "KUBE-NWPLCY-*", "KUBE-POD-FW-*"],
    ),
    ("flanneld", &["FLANNEL-*"]),
    ("antrea-agent", &["ANTREA-*"]),
    ("aws-node", &["AWS-*"]),
    ("istio", &["ISTIO_*"]),
    // The CNI plugins a runtime runs (portmap's hostports, bridge's masquerade, firewall).
    ("cni-plugins", &["CNI-*"]),
    ("weave", &["WEAVE", "WEAVE-*"]),
    ("tailscaled", &["ts-*"]),
    ("dockerd", &["DOCKER*"]),
    ("netavark", &["NETAVARK*"]),
    ("libvirtd", &["LIBVIRT_*"]),
    ("ufw", &["ufw-*", "ufw6-*"]),
    ("fail2ban", &["f2b-*"]),
    // firewalld's iptables backend: direct rules, zone dispatch, and each zone's and policy's
    // chains (`IN_public_allow`, `FWD_public`, `PRE_public_pre`, `POST_public`...).
    (
        "firewalld",
        &[
            "*_direct",
            "*_ZONES",
            "*_ZONES_SOURCE",
            "*_POLICIES",
            "*_POLICIES_pre",
            "*_POLICIES_post",
            "IN_*",
            "FWD_*",
            "FWDI_*",
            "FWDO_*",
            "PRE_*",
            "POST_*",
            "OUT_*",
        ],
    ),
];

/// nftables tables one component owns whole: every chain and set in them is its own, whatever
/// its name (kube-proxy's nftables mode names chains `service-…`, `endpoint-…`).
const CATALOG_TABLES: &[(&str, &[&str])] = &[
    ("kube-proxy", &["ip kube-proxy", "ip6 kube-proxy"]),
    (
        "firewalld",
        &["inet firewalld", "ip firewalld", "ip6 firewalld"],
    ),
    (
        "fail2ban",
        &["inet f2b-table", "ip f2b-table", "ip6 f2b-table"],
    ),
    ("netavark", &["inet netavark"]),
    ("dockerd", &["ip docker-bridges", "ip6 docker-bridges"]),
    ("libvirtd", &["ip libvirt_network", "ip6 libvirt_network"]),
    (
        "tailscaled",
        &["ip ts-filter", "ip ts-nat", "ip6 ts-filter", "ip6 ts-nat"],
    ),
];

/// Components that write other owners' objects for them: firewalld inserts the rules docker,
/// libvirt and podman hand it through its direct/passthrough interface (on firewalld hosts they
/// do not run iptables themselves).
const CATALOG_DELEGATES: &[(&str, &[&str])] =
    &[("firewalld", &["dockerd", "libvirtd", "netavark"])];

/// Chains kubelet and kube-proxy both write (KEP-3178).
const CATALOG_SHARED: &[(&[&str], &[&str])] = &[(
    &["KUBE-MARK-MASQ", "KUBE-POSTROUTING"],
    &["kubelet", "kube-proxy"],
)];

/// Actor names that act for a catalog owner.
const CATALOG_ALIASES: &[(&str, &[&str])] = &[
    ("kube-proxy", &["kube-proxy"]),
    ("kubelet", &["kubelet"]),
    ("calico-node", &["calico-node", "calico-felix", "calico"]),
    ("cilium-agent", &["cilium-agent", "cilium"]),
    ("azure-npm", &["azure-npm", "npm"]),
    ("kube-router", &["kube-router"]),
    ("flanneld", &["flanneld", "flannel"]),
    ("antrea-agent", &["antrea-agent", "antrea"]),
    ("aws-node", &["aws-node", "aws-k8s-agent"]),
    (
        "istio",
        &[
            "istio-iptables",
            "pilot-agent",
            "istio-cni",
            "istio-clean-ip",
        ],
    ),
    ("cni-plugins", &["portmap", "bridge", "firewall"]),
    ("weave", &["weave", "weaver", "weave-npc", "weave-kube"]),
    ("tailscaled", &["tailscaled", "tailscale"]),
    ("dockerd", &["dockerd", "docker"]),
    ("netavark", &["netavark", "podman"]),
    ("libvirtd", &["libvirtd", "virtnetworkd"]),
    ("ufw", &["ufw", "ufw-init"]),
    (
        "fail2ban",
        &["fail2ban-server", "fail2ban-client", "fail2ban"],
    ),
    ("firewalld", &["firewalld", "firewall-cmd"]),
];

/// The ownership rules in force.
#[derive(Debug, Clone)]
pub struct Owners {
    rules: Vec<Rule>,
    /// Every rule's patterns in one matcher (one automaton), and the rule of each pattern.
    chain_globs: GlobSet,
    glob_rule: Vec<usize>,
    /// (writer, owner): `writer` may change `owner`'s objects on its behalf.
    delegates: Vec<(String, String)>,
    /// nftables tables owned whole, first match wins (the file's before the catalog's).
    tables: Vec<TableRule>,
    aliases: Vec<Alias>,
}

/// What is wrong with an ownership file (`--owners`).
#[derive(Debug, thiserror::Error)]
pub enum OwnersError {
    /// The file cannot be read.
    #[error("--owners {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// Not valid TOML or YAML, or not the shape of an ownership file.
    #[error("{}: {cause}", path.display())]
    Syntax { path: PathBuf, cause: String },
    /// An extension that says neither TOML nor YAML.
    #[error("{}: unknown format; name the file *.toml, *.yaml or *.yml", .0.display())]
    Format(PathBuf),
    /// A `[[shared]]` entry without writers.
    #[error("a [[shared]] entry has no writers")]
    NoWriters,
    /// An `[[owner]]` entry without a name.
    #[error("an [[owner]] entry has an empty name")]
    EmptyName,
    /// A chain pattern that is not a glob.
    #[error("chain pattern `{pattern}`: {cause}")]
    ChainPattern {
        pattern: String,
        cause: globset::Error,
    },
    /// A table that is not `FAMILY NAME-GLOB`.
    #[error("table `{pattern}`: {why}")]
    Table { pattern: String, why: String },
    /// One of the above, in the file at `path`.
    #[error("--owners {}: {cause}", path.display())]
    InFile {
        path: PathBuf,
        cause: Box<OwnersError>,
    },
}

/// An nftables table owned whole.
#[derive(Debug, Clone)]
struct TableRule {
    family: Family,
    name: GlobMatcher,
    claim: Arc<Claim>,
}

impl Owners {
    /// The built-in catalog only.
    pub fn catalog() -> Owners {
        let mut rules = Vec::new();
        for (patterns, writers) in CATALOG_SHARED {
            rules.push(Rule {
                patterns: globs(patterns),
                claim: Arc::new(Claim::Shared {
                    writers: writers.iter().map(|w| w.to_string()).collect(),
                    how: How::Catalog,
                }),
            });
        }
        for (owner, patterns) in CATALOG {
            rules.push(Rule {
                patterns: globs(patterns),
                claim: Arc::new(Claim::Owned {
                    owner: owner.to_string(),
                    how: How::Catalog,
                }),
            });
        }
        let aliases = CATALOG_ALIASES
            .iter()
            .map(|(owner, actors)| Alias {
                owner: owner.to_string(),
                actors: actors.iter().map(|a| a.to_string()).collect(),
            })
            .collect();
        let mut tables = Vec::new();
        for (owner, patterns) in CATALOG_TABLES {
            for p in *patterns {
                let (family, name) = table_pattern(p).expect("catalog tables are valid");
                tables.push(TableRule {
                    family,
                    name,
                    claim: Arc::new(Claim::Owned {
                        owner: owner.to_string(),
                        how: How::Catalog,
                    }),
                });
            }
        }
        let delegates = CATALOG_DELEGATES
            .iter()
            .flat_map(|(via, owners)| owners.iter().map(|o| (via.to_string(), o.to_string())))
            .collect();
        let (chain_globs, glob_rule) = index(&rules).expect("catalog globs are valid");
        Owners {
            rules,
            chain_globs,
            glob_rule,
            delegates,
            tables,
            aliases,
        }
    }

    /// May `writer` (an identity) change `owner`'s objects on its behalf?
    pub fn writes_for(&self, writer: &str, owner: &str) -> bool {
        self.delegates
            .iter()
            .any(|(w, o)| self.canonical(w) == writer && o == owner)
    }

    /// The catalog with a user file's entries in front of it (the file wins).
    pub fn with_file(path: &Path) -> Result<Owners, OwnersError> {
        let text = std::fs::read_to_string(path).map_err(|cause| OwnersError::Read {
            path: path.into(),
            cause,
        })?;
        let file = parse_file(path, &text)?;
        crate::attribution::add_wrappers(file.wrappers.clone());
        let mut owners = Owners::catalog();
        owners.apply(file).map_err(|e| OwnersError::InFile {
            path: path.into(),
            cause: Box::new(e),
        })?;
        Ok(owners)
    }

    pub(crate) fn apply(&mut self, file: OwnersFile) -> Result<(), OwnersError> {
        let compile = |patterns: &[String]| -> Result<Vec<Glob>, OwnersError> {
            patterns
                .iter()
                .map(|p| {
                    Glob::new(p).map_err(|cause| OwnersError::ChainPattern {
                        pattern: p.clone(),
                        cause,
                    })
                })
                .collect()
        };
        let mut rules = Vec::new();
        for s in &file.shared {
            if s.writers.is_empty() {
                return Err(OwnersError::NoWriters);
            }
            rules.push(Rule {
                patterns: compile(&s.chains)?,
                claim: Arc::new(Claim::Shared {
                    writers: s.writers.clone(),
                    how: How::Config,
                }),
            });
        }
        let mut tables = Vec::new();
        for o in &file.owner {
            if o.name.trim().is_empty() {
                return Err(OwnersError::EmptyName);
            }
            for v in &o.via {
                self.delegates.push((v.clone(), o.name.clone()));
            }
            for t in &o.tables {
                let (family, name) = table_pattern(t)?;
                tables.push(TableRule {
                    family,
                    name,
                    claim: Arc::new(Claim::Owned {
                        owner: o.name.clone(),
                        how: How::Config,
                    }),
                });
            }
            rules.push(Rule {
                patterns: compile(&o.chains)?,
                claim: Arc::new(Claim::Owned {
                    owner: o.name.clone(),
                    how: How::Config,
                }),
            });
            let mut actors = vec![o.name.clone()];
            actors.extend(o.actors.iter().cloned());
            // The file's aliases come first, so an actor the file names acts for the file's owner.
            self.aliases.insert(
                0,
                Alias {
                    owner: o.name.clone(),
                    actors,
                },
            );
        }
        rules.append(&mut self.rules);
        let (chain_globs, glob_rule) =
            index(&rules).map_err(|cause| OwnersError::ChainPattern {
                pattern: cause.glob().unwrap_or("?").to_string(),
                cause,
            })?;
        self.rules = rules;
        self.chain_globs = chain_globs;
        self.glob_rule = glob_rule;
        tables.append(&mut self.tables);
        self.tables = tables;
        Ok(())
    }

    /// What the catalog or the file says about a chain or set in a table: an nftables table
    /// owned whole decides for everything in it; otherwise the name does ([`Owners::claim`]).
    pub fn claim_in(
        &self,
        backend: Backend,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Option<&Arc<Claim>> {
        if backend == Backend::Nft {
            if let Some(t) = self
                .tables
                .iter()
                .find(|t| t.family == family && t.name.is_match(table))
            {
                return Some(&t.claim);
            }
        }
        self.claim(chain)
    }

    /// What the catalog or the file says about this chain, if anything.
    pub fn claim(&self, chain: &str) -> Option<&Arc<Claim>> {
        // The first rule with a matching pattern; most names match none (`is_match` says so).
        if !self.chain_globs.is_match(chain) {
            return None;
        }
        let first = self.chain_globs.matches(chain).into_iter().min()?;
        self.rules
            .get(*self.glob_rule.get(first)?)
            .map(|r| &r.claim)
    }

    /// The owner name a writer acts for: by its actor name, then by its systemd unit (with and
    /// without `.service`). A writer no alias names acts for itself (its actor name, or its unit
    /// when the actor is unknown).
    pub fn identity(&self, p: &ProcessInfo) -> String {
        let mut names: Vec<&str> = vec![p.actor.as_str()];
        if let Some(unit) = p.unit.as_deref() {
            names.push(unit);
            if let Some(stem) = unit.strip_suffix(".service") {
                names.push(stem);
            }
        }
        for a in &self.aliases {
            if names.iter().any(|n| a.actors.iter().any(|x| x == n)) {
                return a.owner.clone();
            }
        }
        if p.actor == "unknown" {
            if let Some(unit) = p.unit.as_deref() {
                return unit.to_string();
            }
        }
        p.actor.clone()
    }

    /// Every owner the catalog and the file name, sorted (learned owners are not known before
    /// they write).
    pub fn names(&self) -> Vec<String> {
        let owned = |c: &Claim| match c {
            Claim::Owned { owner, .. } => Some(owner.clone()),
            Claim::Shared { .. } => None,
        };
        let mut names: Vec<String> = self
            .rules
            .iter()
            .filter_map(|r| owned(&r.claim))
            .chain(self.tables.iter().filter_map(|t| owned(&t.claim)))
            .chain(self.aliases.iter().map(|a| a.owner.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The owner a name (an owner or an actor name) stands for.
    pub fn canonical(&self, name: &str) -> String {
        self.aliases
            .iter()
            .find(|a| a.owner == name || a.actors.iter().any(|x| x == name))
            .map(|a| a.owner.clone())
            .unwrap_or_else(|| name.to_string())
    }
}

/// Parse an owners file by its extension (`.toml`, `.yaml`/`.yml`).
pub fn parse_file(path: &Path, text: &str) -> Result<OwnersFile, OwnersError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let syntax = |cause: String| OwnersError::Syntax {
        path: path.into(),
        cause,
    };
    match ext {
        "toml" => toml::from_str(text).map_err(|e| syntax(e.to_string())),
        "yaml" | "yml" => serde_yaml_ng::from_str(text).map_err(|e| syntax(e.to_string())),
        _ => Err(OwnersError::Format(path.into())),
    }
}

mod patterns;
#[cfg(test)]
mod tests;
