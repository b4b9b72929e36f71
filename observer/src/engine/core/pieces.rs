//! A large transaction cut into pieces, so that its lines are never all held at once.
//!
//! A kube-proxy nat table of 40,000 services loaded in one `iptables-legacy-restore` is one
//! transaction of 600,017 changes. Numbered, attributed and held whole before the first is
//! written, its lines took 1.2 KB each, 730 MiB in all, above a DaemonSet's memory limit. A
//! transaction that only creates (tables, chains, rules, sets, elements) or updates chains is
//! numbered, correlated and written [`PIECE`] changes at a time instead: a creation or a
//! `chain_update` raises no hit in the correlator's scan and is read against no other change of
//! its transaction, so its pieces come out exactly as the whole would. That covers the re-read
//! of a ruleset held at chain level, which says "rules changed: N -> M" of each chain it finds
//! changed (110,000 of them for a pod's 440,000-rule load). A transaction that deletes, flushes
//! or replaces anything stays whole, since its changes are read against each other (a flush
//! told from deletes of every rule, an unhook from the delete of its chain).

use crate::ruleset::{Change, ChangeResult, Op};

/// Changes per piece of a large creating transaction: about 15 ms of writing on a slow machine,
/// so that another namespace's change waits at most that long behind it.
pub const PIECE: usize = 1024;

/// A change read against no other change of its transaction: one that only adds to the
/// ruleset, or a chain's update (its policy, its name, or how many rules it holds at chain
/// level), which the correlator's scan passes by.
fn stands_alone(op: Op) -> bool {
    matches!(
        op,
        Op::TableCreate
            | Op::ChainCreate
            | Op::RuleAdd
            | Op::SetCreate
            | Op::ElementAdd
            | Op::ChainUpdate
    )
}

/// Whether a transaction is handled in pieces of `piece`: it holds more than `piece` changes,
/// all of them applied and each [standing alone](stands_alone).
pub fn cut(changes: &[(Change, ChangeResult)], piece: usize) -> bool {
    changes.len() > piece
        && changes
            .iter()
            .all(|(c, r)| r.is_applied() && stands_alone(c.op))
}

/// [`cut`], for a transaction whose changes were all applied.
pub fn cut_applied(changes: &[Change], piece: usize) -> bool {
    changes.len() > piece && changes.iter().all(|c| stands_alone(c.op))
}

/// The pieces a transaction is handled in, in order: one, unless it is [`cut`].
pub fn pieces(
    changes: Vec<(Change, ChangeResult)>,
    piece: usize,
) -> impl Iterator<Item = Vec<(Change, ChangeResult)>> + Send + 'static {
    let cut = cut(&changes, piece);
    split(changes, cut.then_some(piece))
}

/// [`pieces`] of a transaction whose changes were all applied: each piece gets its results as
/// it is taken, so that the changes are never held twice (with and without them).
pub fn applied(
    changes: Vec<Change>,
    piece: usize,
) -> impl Iterator<Item = Vec<(Change, ChangeResult)>> + Send + 'static {
    let cut = cut_applied(&changes, piece);
    split(changes, cut.then_some(piece))
        .map(|p| p.into_iter().map(|c| (c, ChangeResult::Applied)).collect())
}

/// `list` in pieces of `piece` (whole for `None`), in order; the list gives back its room as
/// the pieces are taken.
fn split<T: Send + 'static>(
    list: Vec<T>,
    piece: Option<usize>,
) -> impl Iterator<Item = Vec<T>> + Send + 'static {
    let mut rest = list;
    // Pieces are taken from the end of the reversed list, so the list shrinks as they go.
    if piece.is_some() {
        rest.reverse();
    }
    let piece = piece.map_or(usize::MAX, |p| p.max(1));
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if piece == usize::MAX {
            return Some(std::mem::take(&mut rest));
        }
        let mut p = rest.split_off(rest.len().saturating_sub(piece));
        p.reverse();
        // Give back the room the piece took (a large block shrinks in place).
        if rest.capacity() > 2 * rest.len() + piece {
            rest.shrink_to_fit();
        }
        Some(p)
    })
}

/// Changes made as they are read (all applied creations), in pieces of `piece`.
pub fn chunks(
    mut changes: impl Iterator<Item = Change> + Send + 'static,
    piece: usize,
) -> impl Iterator<Item = Vec<(Change, ChangeResult)>> + Send + 'static {
    let piece = piece.max(1);
    std::iter::from_fn(move || {
        let p: Vec<_> = changes
            .by_ref()
            .take(piece)
            .map(|c| (c, ChangeResult::Applied))
            .collect();
        (!p.is_empty()).then_some(p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::Family;

    fn change(op: Op, chain: &str) -> (Change, ChangeResult) {
        let mut c = Change::new(op, Family::Ip, "nat");
        c.chain = Some(chain.to_string());
        (c, ChangeResult::Applied)
    }

    fn chains(p: &[(Change, ChangeResult)]) -> Vec<String> {
        p.iter().map(|(c, _)| c.chain.clone().unwrap()).collect()
    }

    #[test]
    fn a_large_load_is_cut_in_order_and_nothing_is_lost() {
        let all: Vec<_> = (0..10)
            .map(|i| change(Op::RuleAdd, &format!("C{i}")))
            .collect();
        let got: Vec<Vec<String>> = pieces(all, 4).map(|p| chains(&p)).collect();
        assert_eq!(
            got,
            vec![
                vec!["C0", "C1", "C2", "C3"],
                vec!["C4", "C5", "C6", "C7"],
                vec!["C8", "C9"],
            ]
        );
    }

    #[test]
    fn a_transaction_that_deletes_flushes_or_replaces_stays_whole() {
        for op in [
            Op::ChainDelete,
            Op::ChainFlush,
            Op::RuleDelete,
            Op::RuleReplace,
            Op::TableFlush,
            Op::SetFlush,
            Op::ElementDelete,
        ] {
            let mut all: Vec<_> = (0..10)
                .map(|i| change(Op::RuleAdd, &format!("C{i}")))
                .collect();
            all.push(change(op, "X"));
            let got: Vec<usize> = pieces(all, 4).map(|p| p.len()).collect();
            assert_eq!(got, vec![11], "{op:?}");
        }
    }

    #[test]
    fn a_chain_level_re_read_of_creations_and_updates_is_cut() {
        // What a ruleset held at chain level reports after a re-read: its new chains, then
        // the rule count of each that holds rules.
        let mut all: Vec<_> = (0..5)
            .map(|i| change(Op::ChainCreate, &format!("C{i}")))
            .collect();
        all.extend((0..5).map(|i| change(Op::ChainUpdate, &format!("C{i}"))));
        let got: Vec<usize> = pieces(all.clone(), 4).map(|p| p.len()).collect();
        assert_eq!(got, vec![4, 4, 2]);
        // One flush among them keeps the whole together.
        all.push(change(Op::ChainFlush, "C0"));
        assert_eq!(pieces(all, 4).count(), 1);
    }

    #[test]
    fn applied_changes_come_in_the_same_pieces_with_their_results() {
        let all: Vec<_> = (0..10)
            .map(|i| change(Op::RuleAdd, &format!("C{i}")))
            .collect();
        let bare: Vec<Change> = all.iter().map(|(c, _)| c.clone()).collect();
        let got: Vec<_> = applied(bare.clone(), 4).collect();
        assert_eq!(got, pieces(all, 4).collect::<Vec<_>>());
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
        // A delete among them: one piece, still with its results.
        let mut whole = bare;
        whole.push(change(Op::ChainDelete, "X").0);
        let got: Vec<_> = applied(whole, 4).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), 11);
        assert!(got[0].iter().all(|(_, r)| r.is_applied()));
    }

    #[test]
    fn a_refused_change_keeps_its_transaction_whole() {
        let mut all: Vec<_> = (0..10)
            .map(|i| change(Op::RuleAdd, &format!("C{i}")))
            .collect();
        all[3].1 = ChangeResult::Refused("EPERM".into());
        assert_eq!(pieces(all, 4).count(), 1);
    }

    #[test]
    fn changes_made_as_they_are_read_come_in_pieces_in_order() {
        let made = (0..10).map(|i| change(Op::RuleAdd, &format!("C{i}")).0);
        let got: Vec<Vec<String>> = chunks(made, 4).map(|p| chains(&p)).collect();
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
        assert_eq!(
            got.concat(),
            (0..10).map(|i| format!("C{i}")).collect::<Vec<_>>()
        );
        assert_eq!(chunks(std::iter::empty(), 4).count(), 0);
    }

    #[test]
    fn a_small_transaction_is_one_piece_and_an_empty_one_none() {
        let all: Vec<_> = (0..4)
            .map(|i| change(Op::RuleAdd, &format!("C{i}")))
            .collect();
        assert_eq!(pieces(all, 4).map(|p| p.len()).collect::<Vec<_>>(), vec![4]);
        assert_eq!(pieces(Vec::new(), 4).count(), 0);
    }
}
