//! `-m nfacct` (kube-proxy's metrics rules) through the real tools: an accounting object made
//! with `nfacct add` in a throw-away namespace, a rule naming it written with iptables-legacy
//! and with iptables-nft, each read back by observer (getsockopt; nft dump) and compared with
//! the line the tool's own `-save` prints.

use super::live::Netns;
use super::*;
use crate::nftables::socket;
use crate::nftables::state::NftState;
use crate::nftables::xt_syntax::XtText;

/// The `-A INPUT` line of a save, `-A INPUT ` and counters left out.
fn saved_input(save: &str) -> Vec<String> {
    save.lines()
        .filter_map(|l| l.strip_prefix("-A INPUT "))
        .map(String::from)
        .collect()
}

#[test]
fn nfacct_rules_read_as_both_saves_print_them() {
    let tools = [
        "ip",
        "nfacct",
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-nft",
        "iptables-nft-save",
    ];
    if let Some(why) = test_support::skip_reason(&tools) {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let ns = Netns::add(format!("obs-xt-nfacct-{}", std::process::id())).expect("netns");
    ns.run("nfacct", &["add", "kube-proxy-metric"])
        .expect("nfacct add");
    let rule = [
        "-A",
        "INPUT",
        "-m",
        "nfacct",
        "--nfacct-name",
        "kube-proxy-metric",
    ];
    ns.run("iptables-legacy", &rule).expect("iptables-legacy");
    ns.run("iptables-nft", &rule).expect("iptables-nft");

    // Legacy: the blob read through the namespace's sockets.
    let want = saved_input(&ns.run("iptables-legacy-save", &[]).expect("save"));
    assert_eq!(want, ["-m nfacct --nfacct-name  kube-proxy-metric"]);
    let socks = ns.enter(XtSockets::open).expect("thread").expect("sockets");
    let t = read_existing_table(&socks, XtProto::Ipv4, "filter", None).expect("read");
    let input = t.chain("INPUT").expect("INPUT");
    let got: Vec<String> = input.rules.iter().map(|r| t.rule_text(r)).collect();
    assert_eq!(got, want, "iptables-legacy");

    // iptables-nft: the compat match in a dump of the namespace.
    let want = saved_input(&ns.run("iptables-nft-save", &[]).expect("save"));
    assert_eq!(want, ["-m nfacct --nfacct-name  kube-proxy-metric"]);
    let req = ns
        .enter(socket::request_socket)
        .expect("thread")
        .expect("request socket");
    let st = NftState::from_dump(&socket::dump_on(&req).expect("dump"));
    let t = st.table(2, "filter").expect("ip filter");
    let got: Vec<String> = t.chains["INPUT"]
        .rules
        .iter()
        .map(|r| match r.xt.as_deref() {
            Some(XtText::Saved(s)) => s.clone(),
            other => format!("{other:?} / nft: {}", r.text),
        })
        .collect();
    assert_eq!(got, want, "iptables-nft");
}
