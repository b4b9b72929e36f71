//! Kernel hooks: load the eBPF programs, attach them, and read what they report.
//!
//! Backends, best first, are fentry/fexit, kprobes and syscall tracepoints (see `backend`); the
//! tracepoint backend works on every kernel with BPF and tracepoints (5.8+ for the ring buffer).
//! Without BPF at all observer runs netlink-only: nftables changes are still seen, iptables-legacy
//! changes are not, and the ready line says so.

pub mod backend;
pub mod btf;
pub mod decode;
pub mod nlattr;
pub mod refused;
pub mod tracefs;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::{Ebpf, EbpfLoader};
use observer_common::{DROP_PENDING, DROP_RINGBUF};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use self::decode::KernelEvent;

/// The eBPF object built by build.rs (empty when built with AYA_BUILD_SKIP=1).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer"));

/// nftables and ipset writers (`NETLINK_NETFILTER` requests); attached only when the socket
/// offsets resolve.
const NETLINK_TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("sendmsg_enter", "syscalls", "sys_enter_sendmsg"),
    ("sendto_enter", "syscalls", "sys_enter_sendto"),
    ("send_exit", "syscalls", "sys_exit_sendmsg"),
    ("send_exit", "syscalls", "sys_exit_sendto"),
];

/// Why the kernel hooks could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// This binary was built without its eBPF programs.
    #[error(
        "this observer binary carries no eBPF programs (it was built with AYA_BUILD_SKIP=1); \
         build it with `cargo xtask build`"
    )]
    NotBuilt,
    /// tracefs is missing and could not be mounted.
    #[error(transparent)]
    Tracefs(#[from] tracefs::TracefsError),
    /// The kernel refused to load the object or a program.
    #[error("the kernel refused the eBPF programs: {0}{hint}", hint = privilege_hint(.0))]
    Load(String),
    /// A tracepoint could not be attached.
    #[error("cannot attach tracepoint {category}:{name}: {reason}")]
    Attach {
        category: String,
        name: String,
        reason: String,
    },
    /// The x_tables hook could not be put on the backend asked for (or on any, with `auto`).
    #[error("cannot attach the x_tables hook on the {backend} backend: {reason}")]
    Backend {
        backend: &'static str,
        reason: String,
    },
    /// A map the programs define is missing from the object.
    #[error("eBPF map {0} is missing from the object")]
    Map(&'static str),
}

fn privilege_hint(msg: &str) -> &'static str {
    if msg.contains("Operation not permitted") || msg.contains("EPERM") {
        " (observer needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)"
    } else {
        ""
    }
}

/// Options for [`KernelHooks::load`].
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// Ring buffer size in bytes (a power of two, a multiple of the page size).
    pub ringbuf_bytes: u32,
    /// Put the x_tables hook on this backend only (fail if it cannot attach); `None` tries the
    /// best first.
    pub backend: Option<backend::HookBackend>,
}

impl Default for HookOptions {
    fn default() -> Self {
        HookOptions {
            ringbuf_bytes: 1 << 22,
            backend: None,
        }
    }
}

/// What was attached and what could not be resolved.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HookReport {
    /// `category:name` of every tracepoint attached, `kprobe:function` of every kprobe...
    pub attached: Vec<String>,
    /// Which backend each hook is on, and what was refused.
    pub placement: backend::Placement,
    /// Kernel struct fields this kernel lacks (their attribution is left empty).
    pub missing_fields: Vec<String>,
    /// True when observer mounted tracefs itself.
    pub mounted_tracefs: bool,
    /// Why nftables and ipset writers are not captured in the kernel, when they are not.
    pub netlink_lost: Option<String>,
}

/// The loaded and attached programs. Dropping this detaches everything.
pub struct KernelHooks {
    // Keeps the programs and their links alive.
    _ebpf: Ebpf,
    ring: Option<RingBuf<MapData>>,
    seen: BpfHashMap<MapData, u32, u8>,
    /// Tasks that sent a ruleset request, until their replies are read (kernel LRU).
    await_ack: Option<BpfHashMap<MapData, u64, u32>>,
    drops: PerCpuArray<MapData, u64>,
    pub report: HookReport,
    /// nfnetlink writers captured in the kernel, for attributing nftables generations.
    pub writers: Arc<nlattr::WriterCache>,
}

impl KernelHooks {
    /// Load the programs and attach every hook on the backend `opts` asks for.
    pub fn load(opts: &HookOptions) -> Result<KernelHooks, HookError> {
        if EBPF_OBJECT.is_empty() {
            return Err(HookError::NotBuilt);
        }
        let mut report = HookReport::default();
        let kbtf = btf::KernelBtf::running();
        let (resolved, resolved_nl) = match &kbtf {
            Ok(kbtf) => (btf::resolve_offsets(kbtf), btf::resolve_nl_offsets(kbtf)),
            Err(e) => (
                btf::Resolved {
                    offsets: observer_common::offsets::Offsets::unset(),
                    missing: vec![e.to_string()],
                    sock_net_missing: Some(e.to_string()),
                },
                btf::ResolvedNl {
                    offsets: observer_common::nfnl::NlOffsets::unset(),
                    missing: vec![e.to_string()],
                },
            ),
        };
        drop(kbtf);
        if let Some(m) = resolved_nl.missing.first() {
            let lost = format!(
                "in-kernel attribution of nftables and ipset writers ({m}); nftables writers are \
                 resolved through /proc and ipset changes are not seen"
            );
            tracing::warn!("sendmsg/sendto hooks disabled: {lost}");
            report.netlink_lost = Some(lost);
        }
        for m in &resolved.missing {
            tracing::warn!(
                "{m}: parent, grandparent and network namespace of legacy writers will be unknown"
            );
        }
        report.missing_fields = resolved.missing;
        report.mounted_tracefs = tracefs::ensure()? == tracefs::Tracefs::MountedNow;
        if report.mounted_tracefs {
            tracing::info!("mounted tracefs at {}", tracefs::TRACEFS);
        }

        let mut ebpf = EbpfLoader::new()
            .override_global("OFFSETS", &resolved.offsets, true)
            .override_global("NL_OFFSETS", &resolved_nl.offsets, true)
            .map_max_entries("EVENTS", opts.ringbuf_bytes)
            .load(EBPF_OBJECT)
            .map_err(|e| HookError::Load(error_chain(&e)))?;
        let netlink: &[(&str, &str, &str)] = if report.netlink_lost.is_none() {
            NETLINK_TRACEPOINTS
        } else {
            &[]
        };
        for (prog, category, name) in backend::NS_TRACEPOINTS.iter().chain(netlink) {
            backend::attach_tracepoint(&mut ebpf, prog, category, name)?;
            report.attached.push(format!("{category}:{name}"));
        }
        report.placement.nfnl_writers = !netlink.is_empty();
        backend::place_xt(
            &mut ebpf,
            opts.backend,
            &backend::Needs {
                sock_net_missing: resolved.sock_net_missing.as_deref(),
            },
            &mut report.placement,
            &mut report.attached,
        )?;
        if report.placement.nfnl_writers {
            backend::place_refusals(
                &mut ebpf,
                opts.backend,
                resolved_nl.offsets.skb_sk != u32::MAX,
                &mut report.placement,
                &mut report.attached,
            );
        }
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").ok_or(HookError::Map("EVENTS"))?)
            .map_err(|e| HookError::Load(error_chain(&e)))?;
        let seen = BpfHashMap::try_from(
            ebpf.take_map("SEEN_NETNS")
                .ok_or(HookError::Map("SEEN_NETNS"))?,
        )
        .map_err(|e| HookError::Load(error_chain(&e)))?;
        let drops = PerCpuArray::try_from(ebpf.take_map("DROPS").ok_or(HookError::Map("DROPS"))?)
            .map_err(|e| HookError::Load(error_chain(&e)))?;
        let await_ack = ebpf
            .take_map("AWAIT_ACK")
            .and_then(|m| BpfHashMap::try_from(m).ok());
        Ok(KernelHooks {
            _ebpf: ebpf,
            ring: Some(ring),
            seen,
            await_ack,
            drops,
            report,
            writers: Arc::new(nlattr::WriterCache::default()),
        })
    }

    /// Tell the kernel side that a namespace is known (so it is not reported again).
    pub fn mark_netns_seen(&mut self, inode: u32) {
        if let Err(e) = self.seen.insert(inode, 1, 0) {
            tracing::debug!("cannot mark netns {inode} as seen: {e}");
        }
    }

    /// Forget a namespace that went away (its inode may be reused).
    pub fn forget_netns(&mut self, inode: u32) {
        let _ = self.seen.remove(&inode);
    }

    /// Remove the kernel's entries of tasks that exited (their pid may be reused): the kernel
    /// side drops a task's entry only when its LRU map is full. Returns how many went.
    pub fn sweep_exited(&mut self) -> usize {
        let Some(map) = self.await_ack.as_mut() else {
            return 0;
        };
        let gone: Vec<u64> = map
            .keys()
            .filter_map(Result::ok)
            .filter(|k| {
                !std::path::Path::new(&format!("/proc/{}/task/{}", k >> 32, k & 0xffff_ffff))
                    .exists()
            })
            .collect();
        gone.iter().filter(|k| map.remove(k).is_ok()).count()
    }

    /// Events the kernel side could not report: (ring buffer full, pending map full).
    pub fn drops(&self) -> (u64, u64) {
        let sum = |i: u32| {
            self.drops
                .get(&i, 0)
                .map(|v| v.iter().sum::<u64>())
                .unwrap_or(0)
        };
        (sum(DROP_RINGBUF), sum(DROP_PENDING))
    }

    /// Start reading the ring buffer into `tx`. Call once.
    pub fn spawn_reader(
        &mut self,
        tx: mpsc::Sender<KernelEvent>,
        stats: Arc<ReaderStats>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let ring = self
            .ring
            .take()
            .ok_or_else(|| std::io::Error::other("ring buffer reader already started"))?;
        // SAFETY: the ring buffer owns its fd and is moved into the AsyncFd, which keeps it
        // open (and registered) until the reader task ends.
        let fd = unsafe { AsyncFd::register(ring) }.map_err(std::io::Error::from)?;
        Ok(tokio::spawn(read_ring(fd, tx, stats, self.writers.clone())))
    }
}

/// Counters of the userspace side of the ring buffer.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Records that failed to decode (logged and skipped). A full pipeline is never a loss:
    /// the reader waits for room, and the kernel side counts what the ring buffer could not hold.
    pub malformed: AtomicU64,
}

async fn read_ring(
    mut fd: AsyncFd<RingBuf<MapData>>,
    tx: mpsc::Sender<KernelEvent>,
    stats: Arc<ReaderStats>,
    writers: Arc<nlattr::WriterCache>,
) {
    loop {
        let mut guard = match fd.readable_mut().await {
            Ok(g) => g,
            Err(e) => {
                tracing::error!("ring buffer poll failed: {e}");
                return;
            }
        };
        let ring = guard.get_inner_mut();
        while let Some(item) = ring.next() {
            match KernelEvent::parse(&item) {
                // nftables writers go straight to the cache the netlink readers consult: no
                // engine work stands between a batch and its attribution.
                Ok(KernelEvent::NfnlSend(send)) if send.is_nftables() => writers.insert(&send),
                Ok(ev) => {
                    if let Err(mpsc::error::TrySendError::Full(ev)) = tx.try_send(ev) {
                        // Back-pressure rather than loss: wait for room.
                        if tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    stats.malformed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("skipping a kernel record: {e}");
                }
            }
        }
        guard.clear_ready();
        if tx.is_closed() {
            return;
        }
    }
}

/// An error and its sources on one line (aya's errors keep the kernel's reason in the source).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}
