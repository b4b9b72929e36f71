//! The fentry backend: BTF trampolines (fentry/fexit), the cheapest way into a kernel function.
//! Needs the function in the kernel's BTF, and a kernel whose policy allows tracing programs.
//! Arguments are 8-byte slots of the trampoline's context; a 16-byte struct argument takes two
//! (kernel 6.1+ accepts such arguments in trampolines).

use aya_ebpf::{macros::fexit, programs::FExitContext};
use observer_common::hook::HOOK_FENTRY;

use crate::xt_hook::{self, SetsockoptArgs};

// match-proto: int nf_setsockopt(struct sock *sk, u_int8_t pf, int val, sockptr_t opt,
//   unsigned int len), net/netfilter/nf_sockopt.c
// Slots: 0 sk, 1 pf, 2 val, 3 opt.kernel/user, 4 opt.is_kernel, 5 len. fexit sees the arguments
// and the result at once, still in the writer's context, so one program is enough.
#[fexit(function = "nf_setsockopt")]
pub fn xt_fexit(ctx: FExitContext) -> u32 {
    let ret: i64 = crate::kfunc::fexit_ret(&ctx, 6);
    let sk: u64 = ctx.arg(0);
    let pf: u64 = ctx.arg(1);
    let val: u64 = ctx.arg(2);
    let optval: u64 = ctx.arg(3);
    let is_kernel: u64 = ctx.arg(4);
    xt_hook::report_call(
        &SetsockoptArgs {
            sk,
            pf: pf as u8 as u32,
            optname: val as u32,
            optval,
            is_kernel: is_kernel as u8 != 0,
        },
        ret as i32 as i64,
        HOOK_FENTRY,
    );
    0
}
