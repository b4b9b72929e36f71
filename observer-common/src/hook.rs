//! Which kind of kernel hook wrote a record (so userspace can say where each change was seen).

/// A syscall tracepoint (`syscalls:sys_enter/exit_*`).
pub const HOOK_TRACEPOINT: u32 = 1;
/// A kprobe/kretprobe pair on a kernel function.
pub const HOOK_KPROBE: u32 = 2;
/// A BTF trampoline (fentry/fexit) on a kernel function.
pub const HOOK_FENTRY: u32 = 3;
