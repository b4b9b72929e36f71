//! Kernel hooks: load the eBPF programs, attach them, and read what they report.
//!
//! Backends, best first, are fentry/fexit, kprobes and syscall tracepoints (see `backend`;
//! `attach` puts each hook's programs on the best one the kernel allows); the
//! tracepoint backend works on every kernel with BPF and tracepoints (5.8+ for the ring buffer).
//! Without BPF at all observer runs netlink-only: nftables changes are still seen, iptables-legacy
//! changes are not, and the ready line says so.
//!
//! The ring buffer is read by a task of the runtime ([`KernelHooks::spawn_reader`]), woken by
//! the kernel through the ring's descriptor: it feeds nftables writers straight to the
//! [`writers::WriterCache`] the netlink readers consult, puts the pieces of legacy writers'
//! tables together, and hands every other record to the engine's queue.

mod attach;
pub mod backend;
pub mod blob;
pub mod btf;
pub mod decode;
mod error;
pub mod nlattr;
pub mod refused;
pub mod tracefs;
pub mod writers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::{Ebpf, EbpfLoader};
use observer_common::{DROP_MAP, DROP_PENDING, DROP_READ, DROP_RINGBUF};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use self::decode::KernelEvent;
use self::writers::WriterCache;

/// The eBPF object built by build.rs (empty when built with AYA_BUILD_SKIP=1).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer"));

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

fn privilege_hint(msg: &str) -> String {
    if msg.contains("Operation not permitted") || msg.contains("EPERM") {
        // Each capability, what it is for and what is lost without it: crate::caps.
        format!(" (observer needs root, or {})", crate::caps::NEEDED)
    } else {
        String::new()
    }
}

/// Options for [`KernelHooks::load`].
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// Ring buffer size in bytes (a power of two, a multiple of the page size).
    pub ringbuf_bytes: u32,
    /// Put the x_tables hook on this backend only (fail if it cannot attach, unless the backend
    /// carries the other hooks: then the next one, the reason kept); `None` tries the best first.
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
    pub writers: Arc<WriterCache>,
}

impl KernelHooks {
    /// Load the programs and attach every hook on the backend `opts` asks for.
    pub fn load(opts: &HookOptions) -> Result<KernelHooks, HookError> {
        if EBPF_OBJECT.is_empty() {
            return Err(HookError::NotBuilt);
        }
        let mut report = HookReport::default();
        let (resolved, resolved_nl) = resolve_offsets(&mut report);
        report.mounted_tracefs = tracefs::ensure()? == tracefs::Tracefs::MountedNow;
        if report.mounted_tracefs {
            tracing::info!("mounted tracefs at {}", tracefs::TRACEFS);
        }

        // The programs read kernel structs at offsets resolved above, not through CO-RE
        // relocations (the object has none), so the loader need not parse the kernel's BTF
        // again: only fentry attachment needs it, and parses it when it is tried.
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .override_global("OFFSETS", &resolved.offsets, true)
            .override_global("NL_OFFSETS", &resolved_nl.offsets, true)
            .override_global("XT_BLOB_MAX", &blob::max_bytes(opts.ringbuf_bytes), true)
            .map_max_entries("EVENTS", opts.ringbuf_bytes)
            .load(EBPF_OBJECT)
            .map_err(|e| HookError::Load(error_chain(&e)))?;
        fill_walk_past(&mut ebpf)?;
        let o = &resolved_nl.offsets;
        let skb_missing = (o.skb_data == u32::MAX || o.skb_len == u32::MAX)
            .then_some("sk_buff.data or sk_buff.len is not in this kernel's BTF");
        let mount_missing = [o.path_dentry, o.dentry_sb, o.sb_magic]
            .contains(&u32::MAX)
            .then_some(
                "path.dentry, dentry.d_sb or super_block.s_magic is not in this kernel's BTF",
            );
        let needs = backend::Needs {
            sock_net_missing: resolved.sock_net_missing.as_deref(),
            skb_missing,
            mount_missing,
            skb_sk_missing: (o.skb_sk == u32::MAX)
                .then_some("sk_buff.sk is not in this kernel's BTF"),
        };
        let writers_ok = report.netlink_lost.is_none();
        let mut placer = attach::Placer {
            ebpf: &mut ebpf,
            only: opts.backend,
            needs,
            btf: None,
            placement: &mut report.placement,
            attached: &mut report.attached,
        };
        // A backend asked for that refuses the x_tables hook fails the start, unless it
        // carries the other hooks: then the kernel refuses that one function there (5.10's
        // trampolines take no struct argument, and `nf_setsockopt` takes a `sockptr_t` by
        // value), and the hook goes on the next backend with the reason in the ready line.
        let xt_refused = match (placer.place(&backend::X_TABLES, true), opts.backend) {
            (Ok(()), _) => None,
            (Err(HookError::Backend { reason, .. }), Some(asked)) => Some((asked, reason)),
            (Err(e), _) => return Err(e),
        };
        placer.place(&backend::NAMESPACES, false)?;
        placer.place(&backend::UNMOUNTS, false)?;
        // The writer hooks read the socket buffer (kprobe, fentry) or the socket behind a
        // descriptor (tracepoint); the generation and refusal hooks are worth nothing without
        // them.
        if writers_ok {
            placer.place(&backend::NF_WRITERS, false)?;
            placer.place(&backend::NFT_GENS, false)?;
            placer.place(&backend::NF_REFUSALS, false)?;
        }
        if let Some((asked, reason)) = xt_refused {
            if !placer.placement.carries(asked) {
                return Err(HookError::Backend {
                    backend: asked.as_str(),
                    reason,
                });
            }
            placer.place_after_refusal(&backend::X_TABLES, asked, reason)?;
        }
        let placement = &report.placement;
        if placement.nf_writers.is_none() && report.netlink_lost.is_none() {
            report.netlink_lost = Some(
                "in-kernel attribution of nftables and ipset writers (no backend attached their \
                 hook); nftables writers are resolved through /proc and ipset changes are not seen"
                    .into(),
            );
        }
        let Maps {
            ring,
            seen,
            drops,
            await_ack,
        } = Maps::take(&mut ebpf)?;
        let writers = Arc::new(WriterCache::default());
        writers.set_gens_hooked(report.placement.nft_gens.is_some());
        Ok(KernelHooks {
            _ebpf: ebpf,
            ring: Some(ring),
            seen,
            await_ack,
            drops,
            report,
            writers,
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

    /// The kernel side's error counters, summed over the CPUs.
    pub fn errors(&self) -> KernelErrors {
        let sum = |i: u32| {
            self.drops
                .get(&i, 0)
                .map(|v| v.iter().sum::<u64>())
                .unwrap_or(0)
        };
        KernelErrors {
            ringbuf_full: sum(DROP_RINGBUF),
            pending_full: sum(DROP_PENDING),
            read_failed: sum(DROP_READ),
            map_full: sum(DROP_MAP),
        }
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

/// The kernel struct offsets the programs read at, from the running kernel's BTF; what this
/// kernel lacks goes in `report` (the writers' attribution it costs).
fn resolve_offsets(report: &mut HookReport) -> (btf::Resolved, btf::ResolvedNl) {
    let kbtf = btf::KernelBtf::running();
    let (mut resolved, resolved_nl) = match &kbtf {
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
        tracing::warn!("nfnetlink writer hooks disabled: {lost}");
        report.netlink_lost = Some(lost);
    }
    for m in &resolved.missing {
        tracing::warn!(
            "{m}: parent, grandparent and network namespace of legacy writers will be unknown"
        );
    }
    report.missing_fields = std::mem::take(&mut resolved.missing);
    (resolved, resolved_nl)
}

/// The maps userspace reads, taken from the loaded object.
struct Maps {
    ring: RingBuf<MapData>,
    seen: BpfHashMap<MapData, u32, u8>,
    drops: PerCpuArray<MapData, u64>,
    await_ack: Option<BpfHashMap<MapData, u64, u32>>,
}

impl Maps {
    fn take(ebpf: &mut Ebpf) -> Result<Maps, HookError> {
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
        Ok(Maps {
            ring,
            seen,
            drops,
            await_ack,
        })
    }
}

/// What went wrong in the eBPF programs since they were loaded (per-CPU counters, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelErrors {
    /// Records lost: the ring buffer was full.
    pub ringbuf_full: u64,
    /// Calls not followed to their return (a table replace, an ipset command, an unmount): the
    /// map of calls in flight was full.
    pub pending_full: u64,
    /// Kernel or user memory reads that failed where a record needed them.
    pub read_failed: u64,
    /// Other map updates that failed.
    pub map_full: u64,
}

impl KernelErrors {
    /// `(metric label, count)` of each counter.
    pub fn by_kind(&self) -> [(&'static str, u64); 4] {
        [
            ("ringbuf_full", self.ringbuf_full),
            ("pending_full", self.pending_full),
            ("read_failed", self.read_failed),
            ("map_full", self.map_full),
        ]
    }
}

/// The kernel's maps could not be listed (to find the error counters of the observers running):
/// aya's error with its causes, on one line.
#[derive(Debug, thiserror::Error)]
#[error("{}", error_chain(.0))]
pub struct MapListError(#[source] aya::maps::MapError);

/// The error counters of every observer running on this kernel (each one's `DROPS` map, found
/// among the kernel's maps), for `observer doctor`. Needs the privilege to enumerate maps.
pub fn running_errors() -> Result<Vec<(u32, KernelErrors)>, MapListError> {
    use aya::maps::{loaded_maps, Map, MapData, MapType};
    let mut found = Vec::new();
    for info in loaded_maps() {
        let info = info.map_err(MapListError)?;
        if info.name_as_str() != Some("DROPS")
            || !matches!(info.map_type(), Ok(MapType::PerCpuArray))
        {
            continue;
        }
        let id = info.id();
        let Ok(map) = MapData::from_id(id).and_then(Map::from_map_data) else {
            continue;
        };
        let Ok(array) = PerCpuArray::<MapData, u64>::try_from(map) else {
            continue;
        };
        let sum = |i: u32| array.get(&i, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0);
        found.push((
            id,
            KernelErrors {
                ringbuf_full: sum(DROP_RINGBUF),
                pending_full: sum(DROP_PENDING),
                read_failed: sum(DROP_READ),
                map_full: sum(DROP_MAP),
            },
        ));
    }
    Ok(found)
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
    writers: Arc<WriterCache>,
) {
    writers.set_reader_live(true);
    let mut blobs = blob::Blobs::default();
    // The programs wake the reader at most once per linger (`WAKE_LINGER_NS`): after a read
    // that found records, the ring is read again that long after, until a read finds none.
    let linger = std::time::Duration::from_nanos(observer_common::WAKE_LINGER_NS) + LINGER_MARGIN;
    let mut again: Option<tokio::time::Instant> = None;
    loop {
        // Woken by the kernel, by a NEWGEN that waits for its writer's record (the ring may
        // hold it unannounced), or when the linger after the last read is up.
        let ready = tokio::select! {
            r = fd.readable_mut() => Wake::Kernel(r),
            () = writers.drain_wanted() => Wake::Wanted,
            () = sleep_until(again) => Wake::Linger,
        };
        let lingered = matches!(ready, Wake::Linger);
        let read = match ready {
            Wake::Kernel(Ok(mut guard)) => {
                let read = drain(guard.get_inner_mut(), &tx, &stats, &writers, &mut blobs).await;
                guard.clear_ready();
                read
            }
            Wake::Kernel(Err(e)) => {
                tracing::error!("ring buffer poll failed: {e}");
                None
            }
            Wake::Wanted | Wake::Linger => {
                drain(fd.get_mut(), &tx, &stats, &writers, &mut blobs).await
            }
        };
        let Some(read) = read else {
            break;
        };
        if read > 0 {
            again = Some(tokio::time::Instant::now() + linger);
        } else if lingered {
            again = None;
        }
        if tx.is_closed() {
            break;
        }
    }
    writers.set_reader_live(false);
}

/// Beyond the programs' linger, for the two clocks (the programs' and the reader's timer).
const LINGER_MARGIN: std::time::Duration = std::time::Duration::from_millis(1);

/// What woke the ring buffer's reader.
enum Wake<G> {
    Kernel(std::io::Result<G>),
    Wanted,
    Linger,
}

/// Until `at`; never when there is none.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Read every record in the ring: how many, or `None` when the engine is gone.
async fn drain(
    ring: &mut RingBuf<MapData>,
    tx: &mpsc::Sender<KernelEvent>,
    stats: &ReaderStats,
    writers: &WriterCache,
    blobs: &mut blob::Blobs,
) -> Option<usize> {
    let mut read = 0;
    loop {
        let began = std::time::Instant::now();
        let Some(item) = ring.next() else {
            writers.drained(began);
            return Some(read);
        };
        read += 1;
        match KernelEvent::parse(&item) {
            // nftables writers go straight to the cache the netlink readers consult: no
            // engine work stands between a batch and its attribution.
            Ok(KernelEvent::NfnlSend(send)) if send.is_nftables() => writers.insert(&send),
            Ok(KernelEvent::NftGen {
                process,
                netns,
                genid,
            }) => writers.insert_gen(netns, genid, process),
            // Pieces of a writer's table: kept until their replace record comes.
            Ok(KernelEvent::XtBlob(chunk)) => blobs.add(chunk),
            Ok(mut ev) => {
                if let KernelEvent::XtReplace(x) = &mut ev {
                    x.blob = blobs.take(x);
                }
                // The event is decoded: give its space back to the kernel before waiting for
                // room in the engine's queue.
                drop(item);
                if let Err(mpsc::error::TrySendError::Full(ev)) = tx.try_send(ev) {
                    // Back-pressure rather than loss: wait for room.
                    if tx.send(ev).await.is_err() {
                        return None;
                    }
                }
            }
            Err(e) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("skipping a kernel record: {e}");
            }
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

/// Give the programs the comms their ancestry walk goes on past, before any is attached.
fn fill_walk_past(ebpf: &mut Ebpf) -> Result<(), HookError> {
    let map = ebpf
        .map_mut("WALK_PAST")
        .ok_or(HookError::Map("WALK_PAST"))?;
    let mut walk: BpfHashMap<_, [u8; observer_common::process::COMM_LEN], u8> =
        BpfHashMap::try_from(map).map_err(|e| HookError::Load(error_chain(&e)))?;
    let names = crate::attribution::walk_past();
    // The map's room is fixed in the object; the owners file may name more wrappers.
    let room = observer_common::process::WALK_PAST_LEN as usize;
    if names.len() > room {
        tracing::warn!(
            "{} wrappers and front ends, the kernel's ancestry walk knows {room}: chains \
             through the others are completed from /proc",
            names.len()
        );
    }
    for (name, kind) in names.iter().take(room) {
        walk.insert(name, kind, 0)
            .map_err(|e| HookError::Load(error_chain(&e)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_that_cannot_be_listed_say_why_with_the_kernel_s_reason() {
        let e = MapListError(aya::maps::MapError::SyscallError(aya::sys::SyscallError {
            call: "bpf_map_get_next_id",
            io_error: std::io::Error::from_raw_os_error(libc::EPERM),
        }));
        assert_eq!(
            e.to_string(),
            "`bpf_map_get_next_id` failed: Operation not permitted (os error 1)"
        );
    }
}
