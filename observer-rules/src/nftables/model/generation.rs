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
//! Layering: the top of the transaction code. [`GenerationBuilder`] uses `txn` (`Txn`, its
//! book-keeping, applied to the state by `txn_apply`) and `catch_up` (resync after lost
//! notifications); below them are `state`, `render`, `decode` and the dump (`Dump`).

use crate::nftables::model::catch_up::catch_up;
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

/// Groups notifications into transactions and applies them to a state.
#[derive(Debug)]
pub struct GenerationBuilder {
    state: NftState,
    pending: Vec<Notification>,
    skipped: u64,
    /// The namespace's interface names, for `iif`/`oif` in rule text.
    ifnames: Option<Box<dyn Lent>>,
    /// The most rules the state may hold with those of the transaction under way (see
    /// [`Self::too_big`]).
    rule_cap: Option<usize>,
    /// The rules the state holds.
    held: usize,
    /// Rules added by the notifications waiting for their NEWGEN.
    pending_rules: usize,
    /// Rules seen when the cap was passed: the state and what was pending are let go.
    too_big: Option<usize>,
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
            ifnames: None,
            rule_cap: None,
            pending_rules: 0,
            too_big: None,
        }
    }

    /// Hold at most `cap` rules: past it (the state's rules and those a transaction under way
    /// adds), the builder lets go of its state and of the transaction, reports nothing more and
    /// says so through [`Self::too_big`], so that a namespace's ruleset never costs more memory
    /// than that many rules, however big a transaction it makes.
    pub fn with_rule_cap(mut self, cap: usize) -> GenerationBuilder {
        self.rule_cap = Some(cap);
        self.check_cap();
        self
    }

    /// The cap given to [`Self::with_rule_cap`].
    pub fn rule_cap(&self) -> Option<usize> {
        self.rule_cap
    }

    /// The rules seen when the cap was passed, once it was: the builder follows nothing more.
    pub fn too_big(&self) -> Option<usize> {
        self.too_big
    }

    fn check_cap(&mut self) {
        let seen = self.held + self.pending_rules;
        if self.too_big.is_none() && self.rule_cap.is_some_and(|cap| seen > cap) {
            self.too_big = Some(seen);
            self.pending = Vec::new();
            self.state = NftState {
                gen_id: self.state.gen_id,
                tables: Default::default(),
            };
            self.held = 0;
            self.pending_rules = 0;
        }
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
        for n in decode::decode(datagram) {
            match n {
                Notification::Skipped(s) => {
                    self.skipped += 1;
                    fed.skipped.push(s);
                }
                n => fed.transactions.extend(self.push_named(n)),
            }
        }
        fed
    }

    /// Feed one notification; a NEWGEN closes the transaction and returns it (unless the
    /// generation is not newer than the state, i.e. already in the dump).
    pub fn push(&mut self, n: Notification) -> Option<Transaction> {
        self.named(|b| b.push_named(n))
    }

    fn push_named(&mut self, n: Notification) -> Option<Transaction> {
        if self.too_big.is_some() {
            return None;
        }
        let gen = match n {
            Notification::Gen(g) => g,
            Notification::Skipped(_) => {
                self.skipped += 1;
                return None;
            }
            other => {
                if matches!(other, Notification::Rule(Verb::New, _)) {
                    self.pending_rules += 1;
                    self.check_cap();
                    if self.too_big.is_some() {
                        return None;
                    }
                }
                self.pending.push(other);
                return None;
            }
        };
        let pending = std::mem::take(&mut self.pending);
        self.pending_rules = 0;
        if (gen.id.wrapping_sub(self.state.gen_id) as i32) <= 0 {
            return None;
        }
        let changes = Txn::default().apply(&mut self.state, pending);
        self.state.gen_id = gen.id;
        self.held = self.state.rule_count();
        Some(transaction(gen, changes))
    }
}

impl GenerationBuilder {
    /// Catch up with a dump taken after notifications were lost (ENOBUFS): the changes between
    /// the state and the dump, summarized as one transaction (generation `dump.gen_id`, no writer),
    /// and the dump becomes the state. Notifications waiting for their NEWGEN are dropped: the
    /// dump holds what they described.
    pub fn resync(&mut self, dump: &Dump) -> Transaction {
        self.pending.clear();
        self.pending_rules = 0;
        // Interfaces may have been renamed meanwhile.
        if let Some(n) = self.ifnames.as_mut() {
            n.clear();
        }
        let (new, changes) = self.named(|b| {
            let new = NftState::from_dump(dump);
            let items = catch_up(&b.state, &new, dump);
            let changes = Txn::default().apply(&mut b.state, items);
            (new, changes)
        });
        self.state = new;
        self.held = self.state.rule_count();
        self.check_cap();
        Transaction {
            gen_id: dump.gen_id,
            pid: 0,
            comm: String::new(),
            changes,
        }
    }
}
fn transaction(gen: Gen, changes: Vec<Change>) -> Transaction {
    Transaction {
        gen_id: gen.id,
        pid: gen.pid.unwrap_or(0),
        comm: gen.comm.unwrap_or_default(),
        changes,
    }
}
