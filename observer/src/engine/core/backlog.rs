//! Work waiting to be written, kept per namespace and taken in turns.
//!
//! A namespace's large load (a kube-proxy table of 10,000 services is 150,000 changes) is
//! written a piece at a time, between the other sources' events, so that another namespace's
//! small change goes out meanwhile instead of waiting seconds behind it. Within a namespace the
//! order stays: whatever that namespace reports next (a transaction, a snapshot) queues behind
//! its unwritten work. Between namespaces with work waiting, the turn passes after each piece,
//! so that two large loads share the loop.

use std::collections::{HashMap, VecDeque};

/// Per-namespace queues of work (`T`), and whose turn it is.
#[derive(Debug)]
pub struct Backlog<T> {
    queues: HashMap<u32, VecDeque<T>>,
    /// The namespaces with work waiting, in turn order (each once).
    turns: VecDeque<u32>,
}

impl<T> Default for Backlog<T> {
    fn default() -> Self {
        Backlog {
            queues: HashMap::new(),
            turns: VecDeque::new(),
        }
    }
}

impl<T> Backlog<T> {
    /// No work waits.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// Namespace `netns` has work waiting: what it reports next queues behind it.
    pub fn holds(&self, netns: u32) -> bool {
        self.queues.contains_key(&netns)
    }

    /// Queue `item` behind namespace `netns`'s other work.
    pub fn push(&mut self, netns: u32, item: T) {
        self.queues.entry(netns).or_default().push_back(item);
        if !self.turns.contains(&netns) {
            self.turns.push_back(netns);
        }
    }

    /// The first item of the namespace whose turn it is, taken out; the turn passes to the
    /// next namespace. An item not finished goes back with [`Backlog::put_back`].
    pub fn take(&mut self) -> Option<(u32, T)> {
        let netns = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&netns)?;
        let item = queue.pop_front()?;
        if queue.is_empty() {
            self.queues.remove(&netns);
        } else {
            self.turns.push_back(netns);
        }
        Some((netns, item))
    }

    /// An item taken and not finished: first again in its namespace's queue, whose next turn
    /// comes after the namespaces waiting now.
    pub fn put_back(&mut self, netns: u32, item: T) {
        self.queues.entry(netns).or_default().push_front(item);
        if !self.turns.contains(&netns) {
            self.turns.push_back(netns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Take every item, putting back those marked unfinished once: the order they came out.
    fn drain(b: &mut Backlog<(char, bool)>) -> Vec<(u32, char)> {
        let mut out = Vec::new();
        while let Some((ns, (c, again))) = b.take() {
            out.push((ns, c));
            if again {
                b.put_back(ns, (c, false));
            }
        }
        out
    }

    #[test]
    fn one_namespace_keeps_its_order() {
        let mut b = Backlog::default();
        for c in ['a', 'b', 'c'] {
            b.push(1, (c, false));
        }
        assert!(b.holds(1) && !b.holds(2));
        assert_eq!(drain(&mut b), vec![(1, 'a'), (1, 'b'), (1, 'c')]);
        assert!(b.is_empty() && !b.holds(1));
    }

    #[test]
    fn an_unfinished_item_goes_first_again_after_the_others_turn() {
        let mut b = Backlog::default();
        // Namespace 1's load takes two turns; namespace 2's change, queued meanwhile, goes
        // out between them; namespace 1's next item waits behind its load.
        b.push(1, ('L', true));
        b.push(1, ('n', false));
        b.push(2, ('x', false));
        assert_eq!(drain(&mut b), vec![(1, 'L'), (2, 'x'), (1, 'L'), (1, 'n')]);
    }

    #[test]
    fn two_large_loads_take_turns() {
        let mut b = Backlog::default();
        b.push(1, ('a', true));
        b.push(2, ('b', true));
        assert_eq!(drain(&mut b), vec![(1, 'a'), (2, 'b'), (1, 'a'), (2, 'b')]);
    }

    #[test]
    fn a_namespace_holds_while_its_item_is_out_only_if_more_waits() {
        let mut b = Backlog::default();
        b.push(1, ('a', false));
        let (ns, item) = b.take().unwrap();
        assert!(!b.holds(1), "nothing else of namespace 1 waits");
        b.put_back(ns, item);
        assert!(b.holds(1));
        assert!(b.take().is_some() && b.take().is_none());
    }
}
