//! Debian's real `netfilter-persistent reload`, run against a namespace of the test's own.

use std::path::Path;
use std::process::{Command, Output};

use crate::Netns;

/// Where `cargo xtask setup` unpacks Debian's netfilter-persistent, iptables-persistent and
/// ipset-persistent (not installed: ufw, which other tests run, breaks them).
pub const NETFILTER_PERSISTENT: &str = "/var/cache/observer-tests/netfilter-persistent";

/// Whether netfilter-persistent is unpacked; when not, the test is skipped (a failure under
/// CI=true) with the fix.
pub fn netfilter_persistent_unpacked() -> bool {
    let root = Path::new(NETFILTER_PERSISTENT);
    let plugins = root.join("usr/share/netfilter-persistent/plugins.d");
    if root.join("usr/sbin/netfilter-persistent").exists()
        && plugins.join("15-ip4tables").exists()
        && plugins.join("40-ipset").exists()
    {
        return true;
    }
    crate::skip(format_args!(
        "netfilter-persistent is not unpacked in {NETFILTER_PERSISTENT} (run `cargo xtask setup`)"
    ));
    false
}

/// `netfilter-persistent reload` in `ns`, of these rules files: its plugins run by `run-parts`,
/// `plugins.d/15-ip4tables` running `iptables-restore` on /etc/iptables/rules.v4 (and
/// ipset-persistent's `10-ipset` finding no /etc/iptables/ipsets). It runs in a mount namespace
/// whose /etc is the machine's under an overlay with the test's rules files and the package's
/// defaults pointing at its unpacked plugins (the machine's /etc is never written).
pub fn netfilter_persistent_reload(ns: &Netns, rules_v4: &str, rules_v6: &str) -> Output {
    netfilter_persistent(ns, "reload", rules_v4, rules_v6)
}

/// `netfilter-persistent flush` in `ns`, as [`netfilter_persistent_reload`] runs its reload:
/// `15-ip4tables` and `25-ip6tables` set every policy to ACCEPT, flush every chain and delete
/// every user chain (through `iptables`, iptables-nft on Debian 12), then ipset-persistent's
/// `40-ipset` destroys every ipset.
pub fn netfilter_persistent_flush(ns: &Netns) -> Output {
    netfilter_persistent(ns, "flush", "", "")
}

fn netfilter_persistent(ns: &Netns, verb: &str, rules_v4: &str, rules_v6: &str) -> Output {
    let root = Path::new(NETFILTER_PERSISTENT);
    let script = root.join("usr/sbin/netfilter-persistent");
    let plugins = root.join("usr/share/netfilter-persistent/plugins.d");
    let dir = tempfile::tempdir().expect("tempdir");
    let upper = dir.path().join("upper");
    std::fs::create_dir_all(upper.join("iptables")).expect("mkdir");
    std::fs::create_dir_all(upper.join("default")).expect("mkdir");
    std::fs::write(upper.join("iptables/rules.v4"), rules_v4).expect("rules.v4");
    std::fs::write(upper.join("iptables/rules.v6"), rules_v6).expect("rules.v6");
    let defaults =
        std::fs::read_to_string(root.join("etc/default/netfilter-persistent")).unwrap_or_default();
    std::fs::write(
        upper.join("default/netfilter-persistent"),
        format!("{defaults}\nPLUGINS={}\n", plugins.display()),
    )
    .expect("defaults");
    // The upper directory on a tmpfs of the mount namespace's own (an overlay's upper layer
    // cannot be on an overlay, as /tmp may be).
    let tmp = dir.path().join("tmp");
    let sh = format!(
        "set -e; mkdir -p {tmp}; mount -t tmpfs obs {tmp}; cp -a {upper} {tmp}/upper; \
         mkdir {tmp}/work; \
         mount -t overlay obs -o lowerdir=/etc,upperdir={tmp}/upper,workdir={tmp}/work /etc; \
         exec ip netns exec {ns} {script} {verb}",
        tmp = tmp.display(),
        upper = upper.display(),
        ns = ns.name(),
        script = script.display(),
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &sh])
        .output()
        .expect("unshare")
}
