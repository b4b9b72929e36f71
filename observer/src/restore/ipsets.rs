//! The ipsets that iptables rules name (`-m set --match-set NAME`, `-j SET --add-set NAME`),
//! kept so that a restore can give back a set a wipe destroyed with the chains that used it
//! (`netfilter-persistent flush` with ipset-persistent's plugin destroys every set after
//! flushing the tables).
//!
//! The kernel sends no notifications for ipset and observer lists only the sets' headers, so
//! with `--restore` on, the engine runs the node's `ipset save` in a namespace after every ipset
//! command there (and when it starts watching it): its text, set by set, is what a restore
//! writes back through `ipset restore`. A set that a later save no longer shows is kept a while
//! as gone. Members that change without an ipset command (a `-j SET` rule adding addresses as
//! packets pass) are as the last save saw them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::timestamp::Timestamp;

use super::plan::{Script, Tool};

/// At most this much saved text is kept for one namespace; past it, none (a namespace with
/// sets this big gets no set back, and its restores say `failed` with the tool's words when a
/// rule needs a destroyed set).
pub const MAX_TEXT_PER_NAMESPACE: usize = 16 << 20;

/// Each set as `ipset save` prints it (its `create` line, then its `add` lines), by name.
#[derive(Debug, Default)]
struct Namespace {
    now: BTreeMap<String, String>,
    /// Sets that were there at an earlier save, and when they were first missed.
    gone: BTreeMap<String, (String, Timestamp)>,
    /// The last save was too big to keep.
    too_big: bool,
}

/// The saved sets of every namespace.
#[derive(Debug)]
pub struct Ipsets {
    namespaces: HashMap<u32, Namespace>,
    /// How long a gone set is kept.
    keep: Duration,
}

/// Why a save was not kept.
#[derive(Debug, PartialEq, Eq)]
pub struct TooBig(pub usize);

impl Ipsets {
    pub fn new(keep: Duration) -> Ipsets {
        Ipsets {
            namespaces: HashMap::new(),
            keep,
        }
    }

    /// The text of `ipset save` in `netns`, at `now`. `Err` when it is over
    /// [`MAX_TEXT_PER_NAMESPACE`] (nothing of it is kept; said once until a save fits again).
    pub fn saved(&mut self, netns: u32, text: &str, now: Timestamp) -> Result<(), TooBig> {
        let keep = self.keep;
        let ns = self.namespaces.entry(netns).or_default();
        ns.gone
            .retain(|_, (_, since)| now.elapsed_since(*since) <= keep);
        if text.len() > MAX_TEXT_PER_NAMESPACE {
            ns.now.clear();
            return if std::mem::replace(&mut ns.too_big, true) {
                Ok(())
            } else {
                Err(TooBig(text.len()))
            };
        }
        ns.too_big = false;
        let sets = parse_save(text);
        for (name, old) in std::mem::take(&mut ns.now) {
            if !sets.contains_key(&name) {
                ns.gone.insert(name, (old, now));
            }
        }
        for name in sets.keys() {
            ns.gone.remove(name);
        }
        ns.now = sets;
        Ok(())
    }

    pub fn forget(&mut self, netns: u32) {
        self.namespaces.remove(&netns);
    }

    /// The `ipset restore` script that creates again the sets among `names` that were destroyed
    /// in `netns` and are known (each once, in the order named), or None when none is to be
    /// created. Its undo destroys them again.
    pub fn script<'a>(
        &self,
        netns: u32,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Option<Script> {
        let ns = self.namespaces.get(&netns)?;
        let mut text = String::new();
        let mut undo = String::new();
        let mut sets: Vec<String> = Vec::new();
        for name in names {
            if ns.now.contains_key(name) || sets.iter().any(|s| s == name) {
                continue;
            }
            let Some((saved, _)) = ns.gone.get(name) else {
                continue;
            };
            text.push_str(saved);
            undo.push_str(&format!("destroy {name}\n"));
            sets.push(name.to_string());
        }
        if sets.is_empty() {
            return None;
        }
        Some(Script {
            tool: Tool::Ipset,
            text,
            chains: Vec::new(),
            jumps: 0,
            sets,
            undo: Some(undo),
        })
    }
}

/// `ipset save`'s text, set by set: each `create NAME ...` line with the `add NAME ...` lines
/// that follow it. Other lines (there are none in ipset 7's output) are left out.
fn parse_save(text: &str) -> BTreeMap<String, String> {
    let mut sets: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(verb), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        match verb {
            "create" => {
                sets.insert(name.to_string(), format!("{line}\n"));
            }
            "add" => {
                if let Some(s) = sets.get_mut(name) {
                    s.push_str(line);
                    s.push('\n');
                }
            }
            _ => {}
        }
    }
    sets
}

/// The sets an iptables-restore script's rules name: `--match-set NAME` (the set match),
/// `--add-set`, `--del-set` and `--map-set NAME` (the SET target). Quoted words (a comment) are
/// never taken for options.
pub fn named_in(script: &str) -> impl Iterator<Item = &str> {
    script.lines().flat_map(|l| {
        let words = crate::ruleset::words(l);
        words
            .windows(2)
            .filter(|w| {
                matches!(
                    w[0],
                    "--match-set" | "--add-set" | "--del-set" | "--map-set"
                )
            })
            .map(|w| w[1])
            .collect::<Vec<_>>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str =
        "create kr-src hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n\
                        add kr-src 10.0.0.1\n\
                        add kr-src 10.0.0.2\n\
                        create other hash:net family inet6 hashsize 1024 maxelem 65536\n\
                        add other 2001:db8::/64\n";

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix_nanos(1_700_000_000_000_000_000 + s * 1_000_000_000)
    }

    #[test]
    fn a_destroyed_set_comes_back_with_its_members_and_its_undo() {
        let mut m = Ipsets::new(Duration::from_secs(60));
        m.saved(7, SAVE, t(0)).unwrap();
        // Both still there: nothing to create.
        assert_eq!(m.script(7, ["kr-src", "other"]), None);
        m.saved(7, "create other hash:net family inet6\n", t(1))
            .unwrap();
        let s = m
            .script(7, ["kr-src", "kr-src", "other", "unknown"])
            .unwrap();
        assert_eq!(s.tool, Tool::Ipset);
        assert_eq!(
            s.text,
            "create kr-src hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n\
             add kr-src 10.0.0.1\nadd kr-src 10.0.0.2\n"
        );
        assert_eq!(s.undo.as_deref(), Some("destroy kr-src\n"));
        assert_eq!(s.sets, ["kr-src"]);
        // Another namespace knows nothing of it.
        assert_eq!(m.script(8, ["kr-src"]), None);
    }

    #[test]
    fn a_gone_set_is_kept_for_a_while_and_a_set_made_again_is_not_gone() {
        let mut m = Ipsets::new(Duration::from_secs(60));
        m.saved(7, SAVE, t(0)).unwrap();
        m.saved(7, "", t(1)).unwrap();
        assert!(m.script(7, ["kr-src"]).is_some());
        // Made again by someone: there now, nothing to create.
        m.saved(7, "create kr-src hash:ip family inet\n", t(2))
            .unwrap();
        assert_eq!(m.script(7, ["kr-src"]), None);
        m.saved(7, "", t(3)).unwrap();
        // Its newest text is the one kept.
        assert_eq!(
            m.script(7, ["kr-src"]).unwrap().text,
            "create kr-src hash:ip family inet\n"
        );
        // Past the keep, forgotten.
        m.saved(7, "", t(100)).unwrap();
        assert_eq!(m.script(7, ["kr-src"]), None);
        m.saved(7, SAVE, t(101)).unwrap();
        m.forget(7);
        assert_eq!(m.script(7, ["kr-src"]), None);
    }

    #[test]
    fn a_save_too_big_to_keep_is_said_once_and_keeps_nothing() {
        let mut m = Ipsets::new(Duration::from_secs(60));
        m.saved(7, SAVE, t(0)).unwrap();
        let big = format!(
            "create big hash:ip family inet\n{}",
            "add big 10.1.2.3\n".repeat(MAX_TEXT_PER_NAMESPACE / 17 + 1)
        );
        assert_eq!(m.saved(7, &big, t(1)), Err(TooBig(big.len())));
        assert_eq!(m.saved(7, &big, t(2)), Ok(()));
        m.saved(7, "", t(3)).unwrap();
        assert_eq!(m.script(7, ["big", "kr-src"]), None);
    }

    #[test]
    fn the_sets_an_iptables_script_names() {
        let script = "*filter\n:KUBE-ROUTER-INPUT - [0:0]\n\
                      -A KUBE-ROUTER-INPUT -m set --match-set kr-src src -j ACCEPT\n\
                      -A KUBE-ROUTER-INPUT -m set ! --match-set kr-dst dst,dst -j SET --add-set kr-seen src --exist\n\
                      -A KUBE-ROUTER-INPUT -j SET --del-set kr-old src\n\
                      -A KUBE-ROUTER-INPUT -j SET --map-set kr-map src --map-mark\n\
                      -A KUBE-ROUTER-INPUT -m comment --comment \"x \\\" --match-set y\" -j ACCEPT\nCOMMIT\n";
        let names: Vec<&str> = named_in(script).collect();
        assert_eq!(names, ["kr-src", "kr-dst", "kr-seen", "kr-old", "kr-map"]);
    }
}
