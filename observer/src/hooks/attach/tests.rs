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

#[test]
fn a_refusal_is_told_without_the_verifiers_statistics() {
    let raw = "loading fexit on nf_setsockopt: the BPF_PROG_LOAD syscall returned Invalid \
               argument (os error 22). Verifier output: The function nf_setsockopt arg3 type \
               STRUCT is unsupported.\nverification time 437 usec\nstack depth 0+0+0+0\n\
               processed 0 insns (limit 1000000) max_states_per_insn 0 total_states 0 \
               peak_states 0 mark_read 0\n: Invalid argument (os error 22)";
    let r = super::tidy_reason(raw);
    assert!(!r.contains('\n') && !r.contains("verification time"), "{r}");
    assert!(r.contains("arg3 type STRUCT is unsupported."), "{r}");
    assert!(r.contains("os error 22"), "{r}");
    assert!(
        r.ends_with("take no struct argument by value; 6.1 and later do)"),
        "{r}"
    );
    assert_eq!(super::tidy_reason("EPERM"), "EPERM");
}
