//! The lines as people are shown them. Every text field of a line (names, comments, rule text,
//! comms, units, pods, summaries) may come from a namespace observer does not trust; a human
//! form (the tail's screen and plain lines, `observer query`, a story, a ruleset printed back)
//! renders a copy whose texts went through [`crate::shown::escape`] once, before any colour or
//! column is added. JSON, SSE, NATS and the record keep the exact text.
//!
//! [`Texts`] lists each type's text fields; [`for_people`] is the copy. The escaped text holds
//! nothing that escapes again, so a field a renderer already escaped is left as it is.

use std::borrow::Cow;

use crate::attribution::{Ancestor, ProcessInfo, Requester};
use crate::cgroup::Pod;
use crate::output::line::{ChangeLine, IncidentLine, Line, OwnerHit, SplitBackends, StatusLine};
use crate::ruleset::{ChangeResult, RuleForms};

/// A value whose text fields a person's view escapes.
pub trait Texts {
    /// Call `f` on every text field, nested ones included.
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String));
}

/// A copy of `v` with every text field escaped for a terminal (clean fields are not touched).
pub fn for_people<T: Texts + Clone>(v: &T) -> T {
    let mut v = v.clone();
    v.texts_mut(&mut |s| {
        if let Cow::Owned(e) = crate::shown::escape(s) {
            *s = e;
        }
    });
    v
}

impl Texts for String {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        f(self);
    }
}

impl<T: Texts> Texts for Option<T> {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        if let Some(v) = self {
            v.texts_mut(f);
        }
    }
}

impl<T: Texts> Texts for Vec<T> {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        for v in self {
            v.texts_mut(f);
        }
    }
}

impl<T: Texts> Texts for Box<T> {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        (**self).texts_mut(f);
    }
}

impl<A: Texts, B: Texts> Texts for (A, B) {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        self.0.texts_mut(f);
        self.1.texts_mut(f);
    }
}

/// Shared text (a writer's process, one for all its lines) is escaped in a copy of its own.
impl<T: Texts + Clone> Texts for std::sync::Arc<T> {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        std::sync::Arc::make_mut(self).texts_mut(f);
    }
}

/// `Texts` for a struct: the fields that hold text (or values that do).
macro_rules! texts {
    ($t:ty: $($field:ident),+ $(,)?) => {
        impl $crate::output::people::Texts for $t {
            fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
                $( $crate::output::people::Texts::texts_mut(&mut self.$field, f); )+
            }
        }
    };
}
pub(crate) use texts;

impl Texts for Line {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        match self {
            Line::Status(s) => s.texts_mut(f),
            Line::Change(c) => c.texts_mut(f),
            Line::Incident(i) => i.texts_mut(f),
        }
    }
}

impl Texts for ChangeResult {
    fn texts_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        match self {
            ChangeResult::Applied => {}
            ChangeResult::Refused(e) => f(e),
        }
    }
}

texts!(StatusLine: message, hooks, lost);
texts!(ChangeLine: netns_name, node, table, chain, rule, forms, detail, txn, result, process, restore);
texts!(RuleForms: rule_nft, iptables_unreadable);
texts!(ProcessInfo: comm, parent_comm, actor, unit, container_id, pod, ancestry, requested_by);
texts!(Requester: comm, actor, method, unit, container_id, pod, ancestry);
texts!(Pod: uid, namespace, name, container);
texts!(Ancestor: comm);
texts!(
    IncidentLine: id,
    netns_name,
    node,
    table,
    chains,
    owner,
    actors,
    summary,
    rule,
    was,
    lost,
    owners,
    tables,
    merged_into,
    backends,
    restore,
    requested_by,
);
texts!(OwnerHit: owner, chains, repaired_by, failed);
texts!(SplitBackends: legacy, nft);

#[cfg(test)]
mod tests;
