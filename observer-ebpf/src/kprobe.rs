//! The kprobe backend: kprobe/kretprobe pairs on kernel functions (any kernel with
//! CONFIG_KPROBES, which most production kernels have). Arguments come from the registers of the
//! x86-64 and arm64 calling conventions; a 16-byte struct argument takes two registers.

use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use observer_common::hook::HOOK_KPROBE;

use crate::xt_hook::{self, SetsockoptArgs};

// match-proto: int nf_setsockopt(struct sock *sk, u_int8_t pf, int val, sockptr_t opt,
//   unsigned int len), net/netfilter/nf_sockopt.c
// Registers: sk, pf, val, opt.kernel/user, opt.is_kernel, len.
#[kprobe]
pub fn xt_kprobe(ctx: ProbeContext) -> u32 {
    let (Some(sk), Some(pf), Some(val), Some(optval), Some(is_kernel)) = (
        ctx.arg::<u64>(0),
        ctx.arg::<u64>(1),
        ctx.arg::<u64>(2),
        ctx.arg::<u64>(3),
        ctx.arg::<u64>(4),
    ) else {
        return 0;
    };
    xt_hook::remember(&SetsockoptArgs {
        sk,
        pf: pf as u8 as u32,
        optname: val as u32,
        optval,
        is_kernel: is_kernel as u8 != 0,
    });
    0
}

// match-proto: the return of nf_setsockopt above (int: 0 or a negative errno).
#[kretprobe]
pub fn xt_kretprobe(ctx: RetProbeContext) -> u32 {
    let ret: u64 = ctx.ret();
    xt_hook::finish(ret as i32 as i64, HOOK_KPROBE);
    0
}
