use super::*;

#[test]
fn refusal_reasons_carry_the_kernels_error_and_its_causes() {
    let refused = || {
        ProgramError::SyscallError(aya::sys::SyscallError {
            call: "perf_event_open",
            io_error: std::io::Error::from_raw_os_error(libc::ENOENT),
        })
    };
    let attach = AttachError::Attach {
        kind: "kprobe",
        function: "do_ipt_set_ctl",
        cause: refused(),
    };
    assert_eq!(
        attach.to_string(),
        "attaching kprobe to do_ipt_set_ctl: `perf_event_open` failed: No such file or \
         directory (os error 2)"
    );
    let none = AttachError::NoKprobes {
        kind: "kretprobe",
        function: "do_ipt_set_ctl",
        cause: refused(),
    };
    assert_eq!(
        none.to_string(),
        "attaching kretprobe to do_ipt_set_ctl: `perf_event_open` failed: No such file or \
         directory (os error 2) (this kernel has no kprobe PMU: built without CONFIG_KPROBES)"
    );
    assert_eq!(
        AttachError::Missing("nf_writer").to_string(),
        "program nf_writer missing from the object"
    );
    assert_eq!(
        AttachError::Blocked("sk_buff.sk is not in this kernel's BTF".into()).to_string(),
        "a field its programs read is unknown (sk_buff.sk is not in this kernel's BTF)"
    );
}
