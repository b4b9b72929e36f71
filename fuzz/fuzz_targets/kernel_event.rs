//! Ring-buffer records from the eBPF programs → typed events: `hooks::decode::KernelEvent::parse`
//! on the bytes as given and with the header's length made right (so that mutated bodies of
//! every kind get past that check), then what the daemon decodes from each event: nftables batch
//! heads (`nlattr::batch_table`, `flush_evidence`, `set_flush_evidence`), ipset commands
//! (`ipset::Command::parse`), the replies of refused batches (`refused::refusals`) and refused
//! requests (`RefusedEvent::refusal`); the pieces of a writer's table are put together with the
//! replace that follows them (`hooks::blob::Blobs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer::hooks::blob::Blobs;
use observer::hooks::decode::KernelEvent;
use observer::hooks::{nlattr, refused};

fn derived(ev: &KernelEvent) {
    match ev {
        KernelEvent::NfnlSend(s) => {
            assert!(s.head.len() <= observer_common::nfnl::NFNL_HEAD_LEN);
            std::hint::black_box(nlattr::batch_table(&s.head));
            std::hint::black_box(nlattr::flush_evidence(&s.head));
            std::hint::black_box(nlattr::set_flush_evidence(&s.head));
            std::hint::black_box(observer::ipset::Command::parse(&s.head));
            std::hint::black_box(s.netns());
        }
        KernelEvent::NfnlAck(a) => {
            assert!(a.data.len() <= observer_common::nfnl::NFNL_ACK_LEN);
            std::hint::black_box(refused::refusals(&a.data));
        }
        KernelEvent::NfnlRefused(r) => {
            assert!(r.request.len() <= observer_common::nfnl::NFNL_REFUSED_LEN);
            std::hint::black_box(r.refusal());
        }
        KernelEvent::XtReplace(x) => {
            std::hint::black_box(observer::xtables::replace_attempt(
                x.kind,
                &x.table,
                x.num_entries,
                x.ret,
            ));
        }
        KernelEvent::XtBlob(c) => {
            assert!(c.data.len() <= observer_common::xt::BLOB_CHUNK);
        }
        KernelEvent::NetnsSeen { .. } | KernelEvent::Umount { .. } | KernelEvent::NftGen { .. } => {
        }
    }
}

/// Pieces go to the assembler; a replace takes what it has.
fn assemble(blobs: &mut Blobs, ev: KernelEvent) {
    match ev {
        KernelEvent::XtBlob(c) => blobs.add(c),
        KernelEvent::XtReplace(x) => {
            if let Some(b) = blobs.take(&x) {
                assert_eq!(b.len(), x.blob_copy.len as usize);
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let mut blobs = Blobs::default();
    if let Ok(ev) = KernelEvent::parse(data) {
        derived(&ev);
        assemble(&mut blobs, ev);
    }
    if data.len() >= 8 {
        let mut fixed = data.to_vec();
        fixed[4..8].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        if let Ok(ev) = KernelEvent::parse(&fixed) {
            derived(&ev);
            assemble(&mut blobs, ev);
        }
    }
});
