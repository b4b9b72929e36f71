//! Ring-buffer records from the eBPF programs, turned into typed events.
//!
//! Every record is checked before it is read: long enough for its header, a known kind, a length
//! that matches the kind's struct. Bodies are copied with `read_unaligned`; kinds go through a
//! checked conversion. Byte strings are cut at their first NUL here and nowhere else.

use std::mem::size_of;

use super::backend::HookBackend;
use crate::attribution::{KernelAncestor, KernelProcess};

use observer_common::{
    nfnl::{NfnlAck, NfnlRefused, NfnlSend},
    ns::{NetnsSeen, Umount},
    process::{Process, ANCESTORS},
    xt::{XtBlob, XtBlobHead, XtReplace, BLOB_CHUNK, BLOB_WHOLE, SOL_IPV6},
    EventKind, Header,
};

pub use super::error::DecodeError;

/// Which x_tables front end a replace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XtKind {
    Ipv4,
    Ipv6,
    Arp,
    Bridge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XtReplaceEvent {
    pub process: KernelProcess,
    pub kind: XtKind,
    pub table: String,
    /// 0 or a negative errno.
    pub ret: i64,
    pub num_entries: u32,
    pub ktime_ns: u64,
    /// Which backend's hook saw it.
    pub source: HookBackend,
    /// The writer's command line as the kernel hook read it (the first
    /// [`observer_common::xt::ARGS_LEN`] bytes); empty when it could not be read.
    pub args: Vec<String>,
    /// What the kernel side copied of the writer's table ([`super::blob`]).
    pub blob_copy: BlobCopy,
    /// The writer's replace struct, whole, when it was copied and every piece arrived (set by
    /// the ring reader from the pieces before this record).
    pub blob: Option<Vec<u8>>,
}

/// How the kernel side says it copied a replace's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobCopy {
    pub cookie: u64,
    /// Size of the replace struct when it was copied, 0 when not.
    pub len: u32,
    /// Every piece was written (`false`: none was, or one was lost).
    pub whole: bool,
}

/// A piece of a writer's replace struct ([`observer_common::xt::XtBlob`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobChunk {
    pub cookie: u64,
    pub tgid: u32,
    pub tid: u32,
    pub offset: u32,
    /// Size of the whole replace struct.
    pub total: u32,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelEvent {
    XtReplace(XtReplaceEvent),
    /// A piece of the table an x_tables writer installed; its replace follows.
    XtBlob(BlobChunk),
    NetnsSeen {
        /// The task in the namespace, or its creator (`created`); `process.netns` is the
        /// namespace either way.
        process: KernelProcess,
        /// Made just now (`copy_net_ns`): the creator may not be in it yet.
        created: bool,
    },
    Umount {
        process: KernelProcess,
        path: String,
    },
    /// An nftables batch or ipset command on a `NETLINK_NETFILTER` socket.
    NfnlSend(super::nlattr::NfnlSendEvent),
    /// Replies (errors, acknowledgements) read by a writer after such a request.
    NfnlAck(super::refused::NfnlAckEvent),
    /// A request the kernel refused, seen where it sent the error.
    NfnlRefused(super::refused::RefusedEvent),
    /// An nftables batch committed generation `genid` in `netns` (kprobe, fentry).
    NftGen {
        process: KernelProcess,
        netns: u32,
        genid: u32,
    },
}

/// Cut a NUL-padded byte string at its first NUL.
/// The NUL-separated strings of a captured command line, cut at its real length (`len`; the
/// capture may hold the start of the environment after it). A string cut by the capture's end
/// is kept as far as it goes.
pub fn args(bytes: &[u8], len: u32) -> Vec<String> {
    let end = (len as usize).min(bytes.len());
    bytes[..end]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

pub fn c_str(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn read<T: Copy>(bytes: &[u8], offset: usize) -> Result<T, DecodeError> {
    check_size::<T>(bytes, offset)?;
    // SAFETY: the bounds are checked above; T is a plain-old-data #[repr(C)] type from
    // observer-common (integers and byte arrays, every bit pattern valid); read_unaligned copes
    // with the ring buffer's alignment.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().add(offset).cast::<T>()) })
}

/// An error unless `bytes` holds a whole `T` at `offset`.
fn check_size<T>(bytes: &[u8], offset: usize) -> Result<(), DecodeError> {
    let need = offset + size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::Short {
            got: bytes.len(),
            need,
        });
    }
    Ok(())
}

fn process(p: &Process) -> KernelProcess {
    let mut ancestors = Vec::new();
    for i in 0..ANCESTORS {
        if p.ancestor_tgid[i] == 0 {
            break;
        }
        ancestors.push(KernelAncestor {
            tgid: p.ancestor_tgid[i],
            comm: c_str(&p.ancestor_comm[i]),
        });
    }
    KernelProcess {
        tgid: p.tgid,
        tid: p.tid,
        uid: p.uid,
        comm: c_str(&p.comm),
        ancestors,
        netns: p.netns,
        cgroup_id: p.cgroup_id,
        top_reached: p.top != 0,
    }
}

impl KernelEvent {
    /// Decode one ring-buffer record.
    pub fn parse(bytes: &[u8]) -> Result<KernelEvent, DecodeError> {
        let header: Header = read(bytes, 0)?;
        let kind = EventKind::try_from(header.kind).map_err(DecodeError::UnknownKind)?;
        if header.len as usize != bytes.len() {
            return Err(DecodeError::Length {
                said: header.len,
                got: bytes.len(),
            });
        }
        let body = size_of::<Header>();
        Ok(match kind {
            EventKind::XtReplace => {
                let x: XtReplace = read(bytes, body)?;
                let kind = match (x.level, x.optname) {
                    (SOL_IPV6, _) => XtKind::Ipv6,
                    (_, observer_common::xt::ARPT_SO_SET_REPLACE) => XtKind::Arp,
                    (_, observer_common::xt::EBT_SO_SET_ENTRIES) => XtKind::Bridge,
                    _ => XtKind::Ipv4,
                };
                KernelEvent::XtReplace(XtReplaceEvent {
                    process: process(&x.process),
                    kind,
                    table: c_str(&x.table),
                    ret: x.ret,
                    num_entries: x.num_entries,
                    ktime_ns: header.ktime_ns,
                    source: HookBackend::from_raw(x.source)
                        .ok_or(DecodeError::UnknownHook(x.source))?,
                    args: args(&x.args, x.args_len),
                    blob_copy: BlobCopy {
                        cookie: x.blob_cookie,
                        len: x.blob_len,
                        whole: x.blob_state == BLOB_WHOLE,
                    },
                    blob: None,
                })
            }
            EventKind::XtBlob => {
                // The head, then the bytes straight from the record (a piece is 64 KiB).
                let x: XtBlobHead = read(bytes, body)?;
                check_size::<XtBlob>(bytes, body)?;
                let at = body + std::mem::offset_of!(XtBlob, data);
                // Only the first `len` bytes are the blob's.
                let len = (x.len as usize).min(BLOB_CHUNK);
                KernelEvent::XtBlob(BlobChunk {
                    cookie: x.cookie,
                    tgid: x.tgid,
                    tid: x.tid,
                    offset: x.offset,
                    total: x.total,
                    data: bytes[at..at + len].to_vec(),
                })
            }
            EventKind::NetnsSeen => {
                let n: NetnsSeen = read(bytes, body)?;
                KernelEvent::NetnsSeen {
                    process: process(&n.process),
                    created: n.via == observer_common::ns::VIA_CREATE,
                }
            }
            EventKind::Umount => {
                let u: Umount = read(bytes, body)?;
                KernelEvent::Umount {
                    process: process(&u.process),
                    path: c_str(&u.path),
                }
            }
            EventKind::NfnlSend => {
                let n: NfnlSend = read(bytes, body)?;
                KernelEvent::NfnlSend(super::nlattr::NfnlSendEvent::from_raw(
                    &n,
                    process(&n.process),
                    header.ktime_ns,
                ))
            }
            EventKind::NfnlRefused => {
                let n: NfnlRefused = read(bytes, body)?;
                KernelEvent::NfnlRefused(super::refused::RefusedEvent::from_raw(
                    &n,
                    process(&n.process),
                    header.ktime_ns,
                )?)
            }
            EventKind::NfnlAck => {
                let n: NfnlAck = read(bytes, body)?;
                KernelEvent::NfnlAck(super::refused::NfnlAckEvent::from_raw(
                    &n,
                    process(&n.process),
                    header.ktime_ns,
                ))
            }
            EventKind::NftGen => {
                let g: observer_common::nfnl::NftGen = read(bytes, body)?;
                KernelEvent::NftGen {
                    process: process(&g.process),
                    netns: g.netns,
                    genid: g.genid,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::{xt::IPT_SO_SET_REPLACE, Event, KIND_XT_REPLACE};

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a #[repr(C)] value without padding.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    fn sample() -> Event<XtReplace> {
        let mut p = Process::zeroed();
        p.tgid = 42;
        p.tid = 43;
        p.netns = 4026531840;
        p.comm[..15].copy_from_slice(b"iptables-legacy");
        p.ancestor_tgid[..2].copy_from_slice(&[41, 1]);
        p.ancestor_comm[0][..10].copy_from_slice(b"kube-proxy");
        p.ancestor_comm[1][..7].copy_from_slice(b"systemd");
        let mut table = [0u8; 32];
        table[..3].copy_from_slice(b"nat");
        let mut args = [0u8; observer_common::xt::ARGS_LEN];
        let line = b"ip6tables-legacy\0-F\0KUBE-FW\0";
        args[..line.len()].copy_from_slice(line);
        Event {
            header: Header {
                kind: KIND_XT_REPLACE,
                len: size_of::<Event<XtReplace>>() as u32,
                ktime_ns: 7,
            },
            data: XtReplace {
                process: p,
                ret: -2,
                start_ns: 1,
                table,
                level: SOL_IPV6,
                optname: IPT_SO_SET_REPLACE,
                num_entries: 9,
                size: 100,
                source: observer_common::hook::HOOK_KPROBE,
                _pad: 0,
                args_len: line.len() as u32,
                _pad2: 0,
                args,
                blob_cookie: 7,
                blob_len: 4100,
                blob_state: BLOB_WHOLE,
            },
        }
    }

    #[test]
    fn decodes_a_piece_of_a_writers_table() {
        let mut data = [0xeeu8; BLOB_CHUNK];
        data[..3].copy_from_slice(b"abc");
        let ev = Event {
            header: Header {
                kind: observer_common::KIND_XT_BLOB,
                len: size_of::<Event<XtBlob>>() as u32,
                ktime_ns: 7,
            },
            data: XtBlob {
                head: XtBlobHead {
                    cookie: 7,
                    tgid: 10,
                    tid: 11,
                    offset: 4096,
                    len: 3,
                    total: 4099,
                    _pad: 0,
                },
                data,
            },
        };
        let got = KernelEvent::parse(&bytes_of(&ev)).unwrap();
        assert_eq!(
            got,
            KernelEvent::XtBlob(BlobChunk {
                cookie: 7,
                tgid: 10,
                tid: 11,
                offset: 4096,
                total: 4099,
                data: b"abc".to_vec()
            })
        );
        // A length past the piece is cut at the piece.
        let mut long = ev;
        long.data.head.len = 99_999;
        let KernelEvent::XtBlob(c) = KernelEvent::parse(&bytes_of(&long)).unwrap() else {
            panic!("wrong kind")
        };
        assert_eq!(c.data.len(), BLOB_CHUNK);
    }

    #[test]
    fn decodes_a_replace() {
        let ev = KernelEvent::parse(&bytes_of(&sample())).unwrap();
        let KernelEvent::XtReplace(x) = ev else {
            panic!("wrong kind: {ev:?}")
        };
        assert_eq!(x.table, "nat");
        assert_eq!(x.kind, XtKind::Ipv6);
        assert_eq!(x.ret, -2);
        assert_eq!(x.source, HookBackend::Kprobe);
        assert_eq!(x.process.comm, "iptables-legacy");
        assert_eq!(x.process.ancestors.len(), 2);
        assert_eq!(x.process.ancestors[0].comm, "kube-proxy");
        assert_eq!(x.process.ancestors[1].tgid, 1);
        assert_eq!(x.args, vec!["ip6tables-legacy", "-F", "KUBE-FW"]);
        assert_eq!(
            x.blob_copy,
            BlobCopy {
                cookie: 7,
                len: 4100,
                whole: true
            }
        );
        assert_eq!(x.blob, None, "joined by the ring reader, not here");
    }

    #[test]
    fn rejects_short_unknown_and_mislabelled_records() {
        let good = bytes_of(&sample());
        for n in 0..good.len() {
            assert!(
                KernelEvent::parse(&good[..n]).is_err(),
                "accepted {n} bytes"
            );
        }
        let mut unknown = good.clone();
        unknown[0] = 77;
        assert_eq!(
            KernelEvent::parse(&unknown),
            Err(DecodeError::UnknownKind(77))
        );
        let mut no_hook = good.clone();
        let at = size_of::<Header>() + std::mem::offset_of!(XtReplace, source);
        no_hook[at] = 9;
        assert_eq!(
            KernelEvent::parse(&no_hook),
            Err(DecodeError::UnknownHook(9))
        );
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 8]);
        assert!(matches!(
            KernelEvent::parse(&longer),
            Err(DecodeError::Length { .. })
        ));
    }

    #[test]
    fn command_lines_are_cut_at_their_length() {
        let mut raw = [0u8; 32];
        let line = b"iptables\0-F\0KUBE-FW\0HOME=/root\0";
        raw[..line.len()].copy_from_slice(line);
        assert_eq!(args(&raw, 20), vec!["iptables", "-F", "KUBE-FW"]);
        assert_eq!(args(&raw, 0), Vec::<String>::new());
        // Longer than the capture: what was captured, the last string cut.
        assert_eq!(args(&raw[..14], 200), vec!["iptables", "-F", "KU"]);
    }

    #[test]
    fn c_strings_stop_at_nul() {
        assert_eq!(c_str(b"abc\0def"), "abc");
        assert_eq!(c_str(b"abcd"), "abcd");
        assert_eq!(c_str(b""), "");
    }
}
