//! Transactions: notifications grouped by the `NFT_MSG_NEWGEN` that closes them.
//!
//! [`GenerationBuilder`] takes notifications in order, buffers them until the NEWGEN of their
//! transaction (the kernel sends it after the objects), applies them to the [`NftState`] and
//! returns a [`Transaction`] whose changes went through [`crate::ruleset::summarize`] with the
//! rule counts from before the transaction. Tables, chains, sets and set elements get their
//! *net* change over the whole transaction (a restore that deletes and recreates a table as it
//! was is no change); rules go to `summarize` one by one, which pairs deletes and re-adds.
//!
//! How rules find their positions is described in `txn_apply`.
//!
//! A builder given a cap ([`GenerationBuilder::with_rule_cap`]) holds the ruleset at chain
//! level once it passes it (`chain_level`).
//!
//! Layering: the top of the transaction code. [`GenerationBuilder`] uses `txn` (`Txn`, its
//! book-keeping, applied to the state by `txn_apply`), `catch_up` (resync after lost
//! notifications) and `chain_level`; below them are `state`, `render`, `decode` and the dump
//! (`Dump`).

use crate::netlink::NlMsg;
use crate::nftables::model::catch_up::catch_up;
use crate::nftables::model::chain_level::{self, ChainLevel};
use crate::nftables::model::state::NftState;
use crate::nftables::model::txn::Txn;
use crate::nftables::netlink::decode::{self, Gen, Notification, Skipped, Verb};
use crate::nftables::render::ifnames::{self, InterfaceNames, Lent};
use crate::nftables::Dump;
use crate::ruleset::Change;

/// The changes of one nft generation, summarized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub gen_id: u32,
    /// The writer's thread id, from NEWGEN (0 when the kernel does not send it).
    pub pid: u32,
    /// The writer's comm (`NFTA_GEN_PROC_NAME`), at most 15 characters.
    pub comm: String,
    pub changes: Vec<Change>,
}

/// What one datagram produced.
#[derive(Debug, Default)]
pub struct Fed {
    pub transactions: Vec<Transaction>,
    /// Messages that were not understood or not tracked (counted, never fatal).
    pub skipped: Vec<Skipped>,
}

/// A notification waiting for the NEWGEN of its transaction.
///
/// A rule's message is kept as its bytes and decoded when it is applied. A rule decoded is
/// several times its message's size (each expression's name and data apart), and a table
/// loaded in one transaction sends every rule before its NEWGEN: decoded at once, they were
/// the transaction's peak, and what they left between the objects the state kept stayed
/// resident after it.
///
/// Either is a pointer wide and a little: the list of a big transaction is one block of 24
/// bytes a notification, not of the largest notification's size (170 bytes).
#[derive(Debug)]
enum Waiting {
    Decoded(Box<Notification>),
    Rule {
        msg_type: u16,
        flags: u16,
        payload: Box<[u8]>,
    },
}

impl Waiting {
    fn rule(msg: &NlMsg<'_>) -> Waiting {
        Waiting::Rule {
            msg_type: msg.msg_type,
            flags: msg.flags,
            payload: msg.payload.into(),
        }
    }

    /// The notification; a message that does not decode is a [`Notification::Skipped`].
    fn decode(self) -> Notification {
        match self {
            Waiting::Decoded(n) => *n,
            Waiting::Rule {
                msg_type,
                flags,
                payload,
            } => decode::decode_message(&NlMsg {
                msg_type,
                flags,
                seq: 0,
                payload: &payload,
            }),
        }
    }
}

/// Decode what waited, counting what does not decode into `skipped` (its reasons into
/// `late`, for the caller of the feed that applies it).
fn decoded(w: Waiting, skipped: &mut u64, late: &mut Vec<Skipped>) -> Notification {
    let n = w.decode();
    if let Notification::Skipped(s) = &n {
        *skipped += 1;
        late.push(s.clone());
    }
    n
}

/// Groups notifications into transactions and applies them to a state.
#[derive(Debug)]
pub struct GenerationBuilder {
    state: NftState,
    pending: Vec<Waiting>,
    skipped: u64,
    /// Rule messages of a transaction that did not decode when it was applied.
    late_skipped: Vec<Skipped>,
    /// The namespace's interface names, for `iif`/`oif` in rule text.
    ifnames: Option<Box<dyn Lent>>,
    /// The most rules the state may hold with those of the transaction under way: past it, the
    /// ruleset is held at chain level (see [`chain_level`](super::chain_level)).
    rule_cap: Option<usize>,
    /// The rules the state holds.
    held: usize,
    /// Rules added by the notifications waiting for their NEWGEN.
    pending_rules: usize,
    /// Held at chain level: each chain's rule count, and the transaction's counted rules.
    chain_level: Option<ChainLevel>,
    /// The rules seen when the ruleset went to chain level, until [`Self::take_chain_level`].
    went: Option<usize>,
}

impl GenerationBuilder {
    /// Start from a state (usually [`NftState::from_dump`] of a dump taken after subscribing):
    /// transactions up to `state.gen_id` are already in it and are dropped when they close.
    pub fn new(state: NftState) -> GenerationBuilder {
        GenerationBuilder {
            held: state.rule_count(),
            state,
            pending: Vec::new(),
            skipped: 0,
            late_skipped: Vec::new(),
            ifnames: None,
            rule_cap: None,
            pending_rules: 0,
            chain_level: None,
            went: None,
        }
    }

    /// Hold at most `cap` rules rule by rule: past it (the state's rules and those a
    /// transaction under way adds), the ruleset is held at chain level from then on, so that a
    /// namespace's ruleset never costs more memory than that many rules and its chains, however
    /// big a transaction it makes. [`Self::take_chain_level`] says when that happened.
    pub fn with_rule_cap(mut self, cap: usize) -> GenerationBuilder {
        self.rule_cap = Some(cap);
        self.check_cap();
        self
    }

    /// Hold the state at chain level from the start, with each chain's rule count from a dump
    /// that counted them ([`Dump::rule_counts`]).
    pub fn at_chain_level(
        mut self,
        counts: std::collections::HashMap<(u8, String, String), usize>,
    ) -> GenerationBuilder {
        let cl = ChainLevel::with_counts(counts);
        self.went = Some(cl.rules());
        self.chain_level = Some(cl);
        self.held = 0;
        self
    }

    /// The cap given to [`Self::with_rule_cap`].
    pub fn rule_cap(&self) -> Option<usize> {
        self.rule_cap
    }

    /// Whether the ruleset is held at chain level.
    pub fn chain_level(&self) -> bool {
        self.chain_level.is_some()
    }

    /// Once, after the ruleset went to chain level: the rules it had then (those held and those
    /// of the transaction under way, as far as they were seen).
    pub fn take_chain_level(&mut self) -> Option<usize> {
        self.went.take()
    }

    fn check_cap(&mut self) {
        let seen = self.held + self.pending_rules;
        if self.chain_level.is_some() || self.rule_cap.is_none_or(|cap| seen <= cap) {
            return;
        }
        let mut cl = ChainLevel::take(&mut self.state);
        let pending = std::mem::take(&mut self.pending);
        self.pending = pending
            .into_iter()
            .map(|w| decoded(w, &mut self.skipped, &mut self.late_skipped))
            .filter_map(|n| cl.fold(n))
            .map(|n| Waiting::Decoded(Box::new(n)))
            .collect();
        self.chain_level = Some(cl);
        self.went = Some(seen);
        self.held = 0;
        self.pending_rules = 0;
    }

    /// Name interfaces in rule text from this namespace's link table (see [`ifnames`]).
    pub fn with_ifnames<N: InterfaceNames>(mut self, names: Option<N>) -> GenerationBuilder {
        self.ifnames = names.map(|n| Box::new(n) as Box<dyn Lent>);
        self
    }

    /// Run `f` with the namespace's interface names lent to the renderer.
    fn named<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let mut names = self.ifnames.take();
        let out = ifnames::scope_lent(&mut names, || f(self));
        self.ifnames = names;
        out
    }

    #[allow(
        dead_code,
        reason = "for the pipeline: inspect the namespace's ruleset"
    )]
    pub fn state(&self) -> &NftState {
        &self.state
    }

    /// Messages skipped so far.
    #[allow(dead_code, reason = "for the pipeline: report undecodable messages")]
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Objects waiting for their NEWGEN.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Decode a datagram and feed every message in it.
    pub fn feed(&mut self, datagram: &[u8]) -> Fed {
        self.named(|b| b.feed_named(datagram))
    }

    fn feed_named(&mut self, datagram: &[u8]) -> Fed {
        let mut fed = Fed::default();
        for msg in decode::messages(datagram) {
            let n = match msg {
                Ok(m) => match decode::rule_verb(&m) {
                    // At chain level a rule is only counted: decoded at once, and let go.
                    Some(verb) if self.chain_level.is_none() => {
                        self.wait_rule(verb, Waiting::rule(&m));
                        continue;
                    }
                    _ => decode::decode_message(&m),
                },
                Err(s) => Notification::Skipped(s),
            };
            match n {
                Notification::Skipped(s) => {
                    self.skipped += 1;
                    fed.skipped.push(s);
                }
                n => fed.transactions.extend(self.push_named(n)),
            }
        }
        fed.skipped.append(&mut self.late_skipped);
        fed
    }

    /// A rule's notification, waiting for its NEWGEN.
    fn wait_rule(&mut self, verb: Verb, w: Waiting) {
        self.pending.push(w);
        if verb == Verb::New {
            self.pending_rules += 1;
            self.check_cap();
        }
    }

    /// Feed one notification; a NEWGEN closes the transaction and returns it (unless the
    /// generation is not newer than the state, i.e. already in the dump).
    pub fn push(&mut self, n: Notification) -> Option<Transaction> {
        self.named(|b| b.push_named(n))
    }

    fn push_named(&mut self, n: Notification) -> Option<Transaction> {
        let gen = match n {
            Notification::Gen(g) => g,
            Notification::Skipped(_) => {
                self.skipped += 1;
                return None;
            }
            other => {
                let other = match self.chain_level.as_mut() {
                    Some(cl) => cl.fold(other)?,
                    None => other,
                };
                match &other {
                    Notification::Rule(verb, _) => {
                        self.wait_rule(*verb, Waiting::Decoded(Box::new(other)))
                    }
                    _ => self.pending.push(Waiting::Decoded(Box::new(other))),
                }
                return None;
            }
        };
        let pending = std::mem::take(&mut self.pending);
        self.pending_rules = 0;
        if (gen.id.wrapping_sub(self.state.gen_id) as i32) <= 0 {
            if let Some(cl) = self.chain_level.as_mut() {
                // Already in the dump: what it counted stands.
                cl.discard();
            }
            return None;
        }
        let (skipped, late) = (&mut self.skipped, &mut self.late_skipped);
        let items = pending.into_iter().map(|w| decoded(w, skipped, late));
        let mut changes = Txn::default().apply(&mut self.state, items);
        self.state.gen_id = gen.id;
        match self.chain_level.as_mut() {
            Some(cl) => changes.extend(cl.finish(&self.state)),
            None => self.held = self.state.rule_count(),
        }
        Some(transaction(gen, changes))
    }
}

impl GenerationBuilder {
    /// Catch up with a dump taken after notifications were lost (ENOBUFS): the changes between
    /// the state and the dump, summarized as one transaction (generation `dump.gen_id`, no writer),
    /// and the dump becomes the state. Notifications waiting for their NEWGEN are dropped: the
    /// dump holds what they described.
    pub fn resync(&mut self, mut dump: Dump) -> Transaction {
        // Let go of the room too: a lost burst left it as large as the burst.
        self.pending = Vec::new();
        self.pending_rules = 0;
        // Interfaces may have been renamed meanwhile.
        if let Some(n) = self.ifnames.as_mut() {
            n.clear();
        }
        // A dump that counted the rules, or any dump of a ruleset held at chain level: the
        // ruleset is (or goes) to chain level.
        let counts = match dump.rule_counts.take() {
            Some(c) => Some(c),
            None if self.chain_level.is_some() => Some(counted(&dump)),
            None => None,
        };
        let gen_id = dump.gen_id;
        if let Some(counts) = counts {
            if self.chain_level.is_none() {
                self.chain_level = Some(ChainLevel::take(&mut self.state));
                self.went = Some(counts.values().sum());
                self.held = 0;
            }
            let changes = self.named(|b| {
                let mut new = NftState::from_dump(&dump);
                chain_level::strip(&mut new);
                let items = catch_up(&b.state, &new, &dump);
                // The dump is in `new` and `items` now: it goes before the state is caught up,
                // which makes a second copy of every chain.
                drop(dump);
                let mut changes = Txn::default().apply(&mut b.state, items);
                // The state caught up has told its changes; the dump's replaces it at once.
                b.state = new;
                if let Some(cl) = b.chain_level.as_mut() {
                    let counted = cl.resync(&b.state, counts);
                    changes.reserve_exact(counted.len());
                    changes.extend(counted);
                }
                changes
            });
            return Transaction {
                gen_id,
                pid: 0,
                comm: String::new(),
                changes,
            };
        }
        let changes = self.named(|b| {
            let new = NftState::from_dump(&dump);
            let items = catch_up(&b.state, &new, &dump);
            drop(dump);
            let changes = Txn::default().apply(&mut b.state, items);
            b.state = new;
            changes
        });
        self.held = self.state.rule_count();
        self.check_cap();
        Transaction {
            gen_id,
            pid: 0,
            comm: String::new(),
            changes,
        }
    }
}

/// Each chain's rules in a dump that kept them, counted.
fn counted(dump: &Dump) -> std::collections::HashMap<(u8, String, String), usize> {
    let mut counts = std::collections::HashMap::new();
    for r in &dump.rules {
        *counts
            .entry((r.family, r.table.clone(), r.chain.clone()))
            .or_default() += 1;
    }
    counts
}

fn transaction(gen: Gen, changes: Vec<Change>) -> Transaction {
    Transaction {
        gen_id: gen.id,
        pid: gen.pid.unwrap_or(0),
        comm: gen.comm.unwrap_or_default(),
        changes,
    }
}

#[cfg(test)]
mod waiting_tests {
    use super::*;

    #[test]
    fn a_waiting_notification_is_a_pointer_and_a_little() {
        assert!(std::mem::size_of::<Waiting>() <= 24);
        assert!(std::mem::size_of::<Notification>() > 100);
    }
}
