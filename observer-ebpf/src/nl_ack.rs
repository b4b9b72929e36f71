//! Refused nftables writes, where the kernel acknowledges them with an error (kprobe and fentry
//! backends).
//!
//! nfnetlink hands every error of a batch to `netlink_ack` (net/netlink/af_netlink.c), with the
//! request message it refers to, in the writer's own context (a batch is processed inside the
//! writer's `sendmsg`). It is built into the kernel and exported, so both backends can hook it
//! whether or not nf_tables is loaded yet, and it sees a refusal even when the writer never reads
//! its replies. The tracepoint backend reads the replies instead (module `netlink`).
//!
//! Most calls are acknowledgements (error 0) or other netlink families: the program returns after
//! the error check, or after reading the socket's protocol.

use aya_ebpf::{
    helpers::generated as gen,
    macros::{fentry, kprobe, map},
    maps::PerCpuArray,
    programs::{FEntryContext, ProbeContext},
};
use observer_common::{
    hook::{HOOK_FENTRY, HOOK_KPROBE},
    nfnl::{NfnlRefused, NETLINK_NETFILTER, NFNL_REFUSED_LEN, NFNL_SUBSYS_NFTABLES},
    process::Process,
    Event, KIND_NFNL_REFUSED,
};

use crate::{fill_process, header, netlink::nl_offsets, offsets, output, read_at, verifier_bound};

/// Room to build a record.
#[map]
static REFUSED_SCRATCH: PerCpuArray<Event<NfnlRefused>> = PerCpuArray::with_max_entries(1, 0);

fn on_ack(skb: u64, nlh: u64, err: i32, source: u32) {
    if err >= 0 || nlh == 0 {
        return;
    }
    let off = nl_offsets();
    let Some(sk) = read_at::<u64>(skb, off.skb_sk) else {
        return;
    };
    if read_at::<u16>(sk, off.sk_protocol) != Some(NETLINK_NETFILTER) {
        return;
    }
    // struct nlmsghdr { u32 len; u16 type; ... }: nftables writes only (not the batch itself,
    // not ipset, whose commands are followed elsewhere).
    let Some(head) = read_at::<[u32; 2]>(nlh, 0) else {
        return;
    };
    if (head[1] as u16) >> 8 != NFNL_SUBSYS_NFTABLES {
        return;
    }
    let Some(ev) = REFUSED_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    let want = if head[0] < NFNL_REFUSED_LEN as u32 {
        head[0]
    } else {
        NFNL_REFUSED_LEN as u32
    };
    // SAFETY: `ev` points at this CPU's scratch slot, used only while this program runs.
    unsafe {
        (*ev).header = header(
            KIND_NFNL_REFUSED,
            core::mem::size_of::<Event<NfnlRefused>>(),
        );
        let d = &mut (*ev).data;
        d.process = Process::zeroed();
        let net: u64 = read_at(sk, off.sk_net).unwrap_or(0);
        d.sock_netns = read_at(net, offsets().net_ns_inum).unwrap_or(0);
        d.errno = err;
        d.source = source;
        let n = verifier_bound(want, NFNL_REFUSED_LEN as u32);
        let ok = gen::bpf_probe_read_kernel(d.request.as_mut_ptr().cast(), n, nlh as *const _) == 0;
        d.captured = if ok { n } else { 0 };
        fill_process(&mut d.process);
        output(&*ev);
    }
}

// match-proto: void netlink_ack(struct sk_buff *in_skb, struct nlmsghdr *nlh, int err,
//   const struct netlink_ext_ack *extack), net/netlink/af_netlink.c
#[kprobe]
pub fn nl_ack_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(skb), Some(nlh), Some(err)) =
        (ctx.arg::<u64>(0), ctx.arg::<u64>(1), ctx.arg::<u64>(2))
    {
        on_ack(skb, nlh, err as i32, HOOK_KPROBE);
    }
    0
}

// match-proto: as above; fentry slots 0 in_skb, 1 nlh, 2 err, 3 extack.
#[fentry(function = "netlink_ack")]
pub fn nl_ack_fentry(ctx: FEntryContext) -> u32 {
    let skb: u64 = ctx.arg(0);
    let nlh: u64 = ctx.arg(1);
    let err: u64 = ctx.arg(2);
    on_ack(skb, nlh, err as i32, HOOK_FENTRY);
    0
}
