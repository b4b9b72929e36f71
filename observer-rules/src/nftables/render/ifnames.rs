//! Interface names for `iif`, `oif`, `meta sdif` and `fwd`/`dup` devices.
//!
//! The kernel keeps an interface index in the rule; `nft list ruleset` prints the name the index
//! has at listing time, in the lister's namespace. Indices are per namespace, so the names come
//! from whoever can ask the namespace: the agent opens a `NETLINK_ROUTE` socket there and
//! implements [`InterfaceNames`] with it; this crate opens nothing.
//!
//! Rule text is rendered deep inside the decoders, so the names are handed down through a scope:
//! [`scope`] lends an [`InterfaceNames`] to the current thread while a closure decodes, and the
//! renderer asks [`lookup`]. Outside a scope (or when an index is unknown) the index is printed
//! as a number, as `nft` does for an interface that is gone; index 1 is always `lo`.

use std::any::Any;
use std::cell::RefCell;

/// Where interface names come from: a namespace's link table, looked up on demand; and the
/// names of the namespace's ipsets, which iptables-nft's `-m set` and `-j SET` refer to by
/// index (as the legacy tables do; `iptables-nft-save` asks the kernel for the name).
pub trait InterfaceNames: std::fmt::Debug + Send + 'static {
    /// The name of interface `index`, if it exists.
    fn name(&mut self, index: u32) -> Option<String>;
    /// Forget cached names (after a re-read: interfaces may have been renamed).
    fn clear(&mut self) {}
    /// The name of the ipset at `index`, if one is there.
    fn ipset(&mut self, _index: u16) -> Option<String> {
        None
    }
}

/// A lent [`InterfaceNames`], boxed so that the thread can hold any kind, and given back as
/// the kind it was.
pub(crate) trait Lent: std::fmt::Debug + Send {
    fn name(&mut self, index: u32) -> Option<String>;
    fn clear(&mut self);
    fn ipset(&mut self, index: u16) -> Option<String>;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: InterfaceNames> Lent for T {
    fn name(&mut self, index: u32) -> Option<String> {
        InterfaceNames::name(self, index)
    }
    fn clear(&mut self) {
        InterfaceNames::clear(self)
    }
    fn ipset(&mut self, index: u16) -> Option<String> {
        InterfaceNames::ipset(self, index)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Box<dyn Lent>>> = const { RefCell::new(None) };
}

/// Run `f` with `names` answering [`lookup`] on this thread; `names` is handed back after.
pub fn scope<N: InterfaceNames, R>(names: &mut Option<N>, f: impl FnOnce() -> R) -> R {
    let mut lent: Option<Box<dyn Lent>> = names.take().map(|n| Box::new(n) as Box<dyn Lent>);
    let out = scope_lent(&mut lent, f);
    *names = lent.and_then(|b| b.into_any().downcast::<N>().ok().map(|n| *n));
    out
}

/// [`scope`] for names already boxed (a builder keeps them so, to lend them per datagram
/// without boxing each time).
pub(crate) fn scope_lent<R>(names: &mut Option<Box<dyn Lent>>, f: impl FnOnce() -> R) -> R {
    struct Restore<'a>(&'a mut Option<Box<dyn Lent>>);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            *self.0 = CURRENT.with(|c| c.borrow_mut().take());
        }
    }
    if names.is_none() {
        return f();
    }
    CURRENT.with(|c| *c.borrow_mut() = names.take());
    let _restore = Restore(names);
    f()
}

/// The name of the ipset at `index` in the namespace being decoded, when known (outside a
/// scope, or when no set is there, the rule prints `#<index>`).
pub fn ipset_lookup(index: u16) -> Option<String> {
    CURRENT.with(|c| c.borrow_mut().as_mut().and_then(|n| n.ipset(index)))
}

/// The name of interface `index` in the namespace being decoded, when known.
pub fn lookup(index: u32) -> Option<String> {
    if index == 1 {
        return Some("lo".into());
    }
    CURRENT.with(|c| c.borrow_mut().as_mut().and_then(|n| n.name(index)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed(u32);

    impl InterfaceNames for Fixed {
        fn name(&mut self, index: u32) -> Option<String> {
            self.0 += 1;
            (index == 7).then(|| "eth0".to_string())
        }
        fn ipset(&mut self, index: u16) -> Option<String> {
            (index == 2).then(|| "KUBE-DST-ABC".to_string())
        }
    }

    #[test]
    fn names_are_lent_for_the_scope_and_handed_back() {
        assert_eq!(lookup(1).as_deref(), Some("lo"));
        // Outside a scope an unknown index stays a number.
        assert_eq!(lookup(7), None);
        let mut names = Some(Fixed(0));
        let got = scope(&mut names, || (lookup(7), lookup(8), lookup(1)));
        assert_eq!(got, (Some("eth0".into()), None, Some("lo".into())));
        assert_eq!(
            names.as_ref().map(|n| n.0),
            Some(2),
            "the scope hands the names back"
        );
        assert_eq!(lookup(7), None);
    }

    #[test]
    fn ipset_names_are_asked_of_the_lent_names() {
        assert_eq!(ipset_lookup(2), None, "outside a scope");
        let mut names = Some(Fixed(0));
        let got = scope(&mut names, || (ipset_lookup(2), ipset_lookup(3)));
        assert_eq!(got, (Some("KUBE-DST-ABC".into()), None));
    }
}
