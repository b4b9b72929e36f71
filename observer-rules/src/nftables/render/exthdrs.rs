//! Header templates below the fixed protocol headers, as nft names them: IPv6 extension headers
//! (`frag frag-off`, `rt seg-left`, `srh sid[1]`...), TCP options (`tcp option sack1 left`) and
//! SCTP chunks (`sctp chunk init num-inbound-streams`). Each header is a table of fields by bit
//! offset and length, as in nft's `exthdr.c`, `tcpopt.c` and `sctp_chunk.c`; an exthdr load
//! (or a load and a mask, for the fields that are not whole bytes) is named by looking its bits
//! up in the table of its header, and printed raw (`tcp option @6,16,8`) when none matches.

use crate::nftables::render::fields::{Field, Layer};
use crate::nftables::render::values::{Order, Ty};

/// One field of a header: its name, bit offset, bit length and datatype.
type Tmpl = (&'static str, u32, u32, Ty);

/// A header: its name, its type number (IP protocol, TCP option kind, SCTP chunk type) and its
/// fields.
type Desc = (&'static str, u8, &'static [Tmpl]);

const OP_IPV6: u32 = 0;
const OP_TCPOPT: u32 = 1;
const OP_SCTP: u32 = 3;

const NEXTHDR_HDRLENGTH: &[Tmpl] = &[
    ("nexthdr", 0, 8, Ty::InetProto),
    ("hdrlength", 8, 8, Ty::Integer),
];

const IPV6: &[Desc] = &[
    ("hbh", 0, NEXTHDR_HDRLENGTH),
    (
        "rt",
        43,
        &[
            ("nexthdr", 0, 8, Ty::InetProto),
            ("hdrlength", 8, 8, Ty::Integer),
            ("type", 16, 8, Ty::Integer),
            ("seg-left", 24, 8, Ty::Integer),
        ],
    ),
    (
        "frag",
        44,
        &[
            ("nexthdr", 0, 8, Ty::InetProto),
            ("reserved", 8, 8, Ty::Integer),
            ("frag-off", 16, 13, Ty::Integer),
            ("reserved2", 29, 2, Ty::Integer),
            ("more-fragments", 31, 1, Ty::Integer),
            ("id", 32, 32, Ty::Integer),
        ],
    ),
    ("dst", 60, NEXTHDR_HDRLENGTH),
    (
        "mh",
        135,
        &[
            ("nexthdr", 0, 8, Ty::InetProto),
            ("hdrlength", 8, 8, Ty::Integer),
            ("type", 16, 8, Ty::MhType),
            ("reserved", 24, 8, Ty::Integer),
            ("checksum", 32, 16, Ty::Integer),
        ],
    ),
];

/// Routing header variants tried after the generic one, in nft's order.
const ROUTING: &[Desc] = &[
    (
        "srh",
        43,
        &[
            ("last-entry", 32, 8, Ty::Integer),
            ("flags", 40, 8, Ty::Integer),
            ("tag", 48, 16, Ty::Integer),
            ("sid[1]", 64, 128, Ty::Ipv6),
            ("sid[2]", 192, 128, Ty::Ipv6),
        ],
    ),
    (
        "rt0",
        43,
        &[
            ("reserved", 32, 32, Ty::Integer),
            ("addr[1]", 64, 128, Ty::Ipv6),
            ("addr[2]", 192, 128, Ty::Ipv6),
        ],
    ),
];

const KIND: &[Tmpl] = &[("kind", 0, 8, Ty::Integer)];
const KIND_LENGTH: &[Tmpl] = &[("kind", 0, 8, Ty::Integer), ("length", 8, 8, Ty::Integer)];

const TCP_OPTIONS: &[Desc] = &[
    ("eol", 0, KIND),
    ("nop", 1, KIND),
    (
        "maxseg",
        2,
        &[
            ("kind", 0, 8, Ty::Integer),
            ("length", 8, 8, Ty::Integer),
            ("size", 16, 16, Ty::Integer),
        ],
    ),
    (
        "window",
        3,
        &[
            ("kind", 0, 8, Ty::Integer),
            ("length", 8, 8, Ty::Integer),
            ("count", 16, 8, Ty::Integer),
        ],
    ),
    ("sack-perm", 4, KIND_LENGTH),
    (
        "sack",
        5,
        &[
            ("kind", 0, 8, Ty::Integer),
            ("length", 8, 8, Ty::Integer),
            ("left", 16, 32, Ty::Integer),
            ("right", 48, 32, Ty::Integer),
            ("left", 80, 32, Ty::Integer),
            ("right", 112, 32, Ty::Integer),
            ("left", 144, 32, Ty::Integer),
            ("right", 176, 32, Ty::Integer),
            ("left", 208, 32, Ty::Integer),
            ("right", 240, 32, Ty::Integer),
        ],
    ),
    (
        "timestamp",
        8,
        &[
            ("kind", 0, 8, Ty::Integer),
            ("length", 8, 8, Ty::Integer),
            ("tsval", 16, 32, Ty::Integer),
            ("tsecr", 48, 32, Ty::Integer),
        ],
    ),
    ("md5sig", 19, KIND_LENGTH),
    (
        "mptcp",
        30,
        &[
            ("kind", 0, 8, Ty::Integer),
            ("length", 8, 8, Ty::Integer),
            ("subtype", 16, 4, Ty::Integer),
        ],
    ),
    ("fastopen", 34, KIND_LENGTH),
];

const CHUNK: &[Tmpl] = &[
    ("type", 0, 8, Ty::Integer),
    ("flags", 8, 8, Ty::Integer),
    ("length", 16, 16, Ty::Integer),
];

const CHUNK_INIT: &[Tmpl] = &[
    ("type", 0, 8, Ty::Integer),
    ("flags", 8, 8, Ty::Integer),
    ("length", 16, 16, Ty::Integer),
    ("init-tag", 32, 32, Ty::Integer),
    ("a-rwnd", 64, 32, Ty::Integer),
    ("num-outbound-streams", 96, 16, Ty::Integer),
    ("num-inbound-streams", 112, 16, Ty::Integer),
    ("initial-tsn", 128, 32, Ty::Integer),
];

const fn chunk_with(name: &'static str) -> [Tmpl; 4] {
    [
        ("type", 0, 8, Ty::Integer),
        ("flags", 8, 8, Ty::Integer),
        ("length", 16, 16, Ty::Integer),
        (name, 32, 32, Ty::Integer),
    ]
}

const CHUNK_CUM_TSN: &[Tmpl] = &chunk_with("cum-tsn-ack");
const CHUNK_LOWEST_TSN: &[Tmpl] = &chunk_with("lowest-tsn");
const CHUNK_SEQNO: &[Tmpl] = &chunk_with("seqno");
const CHUNK_NEW_CUM_TSN: &[Tmpl] = &chunk_with("new-cum-tsn");

const SCTP_CHUNKS: &[Desc] = &[
    (
        "data",
        0,
        &[
            ("type", 0, 8, Ty::Integer),
            ("flags", 8, 8, Ty::Integer),
            ("length", 16, 16, Ty::Integer),
            ("tsn", 32, 32, Ty::Integer),
            ("stream", 64, 16, Ty::Integer),
            ("ssn", 80, 16, Ty::Integer),
            ("ppid", 96, 32, Ty::Integer),
        ],
    ),
    ("init", 1, CHUNK_INIT),
    ("init-ack", 2, CHUNK_INIT),
    (
        "sack",
        3,
        &[
            ("type", 0, 8, Ty::Integer),
            ("flags", 8, 8, Ty::Integer),
            ("length", 16, 16, Ty::Integer),
            ("cum-tsn-ack", 32, 32, Ty::Integer),
            ("a-rwnd", 64, 32, Ty::Integer),
            ("num-gap-ack-blocks", 96, 16, Ty::Integer),
            ("num-dup-tsns", 112, 16, Ty::Integer),
        ],
    ),
    ("heartbeat", 4, CHUNK),
    ("heartbeat-ack", 5, CHUNK),
    ("abort", 6, CHUNK),
    ("shutdown", 7, CHUNK_CUM_TSN),
    ("shutdown-ack", 8, CHUNK),
    ("error", 9, CHUNK),
    ("cookie-echo", 10, CHUNK),
    ("cookie-ack", 11, CHUNK),
    ("ecne", 12, CHUNK_LOWEST_TSN),
    ("cwr", 13, CHUNK_LOWEST_TSN),
    ("shutdown-complete", 14, CHUNK),
    ("asconf-ack", 128, CHUNK_SEQNO),
    ("forward-tsn", 192, CHUNK_NEW_CUM_TSN),
    ("asconf", 193, CHUNK_SEQNO),
];

fn desc(table: &'static [Desc], ty: u8) -> Option<&'static Desc> {
    table.iter().find(|d| d.1 == ty)
}

fn tmpl(d: &Desc, off: u32, len: u32) -> Option<&'static Tmpl> {
    d.2.iter().find(|t| t.1 == off && t.2 == len)
}

/// The protocol an exthdr operation relies on (nft adds it as a dependency in inet tables).
fn needs(op: u32) -> Option<(Layer, u32)> {
    match op {
        OP_IPV6 => Some((Layer::L3, 10)),
        OP_TCPOPT => Some((Layer::L4, 6)),
        OP_SCTP => Some((Layer::L4, 132)),
        _ => None,
    }
}

/// The named field of an exthdr load of `len` bits at bit `off` of header `ty`, if nft names it.
pub(crate) fn field(op: u32, ty: u8, off: u32, len: u32) -> Option<Field> {
    let (text, t) = match op {
        OP_IPV6 => {
            let d = desc(IPV6, ty)?;
            let found = std::iter::once(d)
                .chain(if ty == 43 { ROUTING } else { &[] })
                .find_map(|d| tmpl(d, off, len).map(|t| (d, t)));
            let (d, t) = found?;
            (format!("{} {}", d.0, t.0), t)
        }
        OP_TCPOPT => {
            let d = desc(TCP_OPTIONS, ty)?;
            let t = tmpl(d, off, len)?;
            let nth = off / 64;
            let n = if nth > 0 {
                nth.to_string()
            } else {
                String::new()
            };
            (format!("tcp option {}{n} {}", d.0, t.0), t)
        }
        OP_SCTP => {
            let d = desc(SCTP_CHUNKS, ty)?;
            let t = tmpl(d, off, len)?;
            (format!("sctp chunk {} {}", d.0, t.0), t)
        }
        _ => return None,
    };
    let mut f = Field::sized(text, t.3, Order::Big, len.div_ceil(8) as usize);
    f.needs = needs(op);
    Some(f)
}

/// The header an exthdr presence test (or a reset) names: `exthdr frag`, `tcp option sack`,
/// `tcp option 6`, `sctp chunk init`.
pub(crate) fn header(op: u32, ty: u8) -> String {
    match op {
        OP_IPV6 => match desc(IPV6, ty) {
            Some(d) => format!("exthdr {}", d.0),
            None => format!("exthdr unknown-exthdr {ty}"),
        },
        OP_TCPOPT => match desc(TCP_OPTIONS, ty) {
            Some(d) => format!("tcp option {}", d.0),
            None => format!("tcp option {ty}"),
        },
        OP_SCTP => match desc(SCTP_CHUNKS, ty) {
            Some(d) => format!("sctp chunk {}", d.0),
            None => format!("sctp chunk {ty}"),
        },
        2 => format!("ip option {ty}"),
        _ => format!("exthdr op {op} type {ty}"),
    }
}

/// An exthdr load no template names, in nft's raw syntax where it has one.
pub(crate) fn raw(op: u32, ty: u8, off: u32, len: u32) -> Field {
    let text = match op {
        OP_TCPOPT => format!("tcp option @{ty},{off},{len}"),
        2 => format!("ip option @{ty},{off},{len}"),
        _ => format!("exthdr op {op} type {ty} @{off},{len}"),
    };
    let mut f = Field::sized(
        text,
        if len <= 64 { Ty::Integer } else { Ty::Hex },
        Order::Big,
        len.div_ceil(8) as usize,
    );
    f.needs = needs(op);
    f
}

/// The protocol a presence test relies on.
pub(crate) fn presence_needs(op: u32) -> Option<(Layer, u32)> {
    needs(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_name_fields_by_bits() {
        let name = |op, ty, off, len| field(op, ty, off, len).map(|f| f.text);
        assert_eq!(name(0, 44, 0, 8).as_deref(), Some("frag nexthdr"));
        assert_eq!(name(0, 44, 16, 13).as_deref(), Some("frag frag-off"));
        assert_eq!(name(0, 43, 64, 128).as_deref(), Some("srh sid[1]"));
        assert_eq!(name(0, 43, 32, 32).as_deref(), Some("rt0 reserved"));
        assert_eq!(name(1, 5, 80, 32).as_deref(), Some("tcp option sack1 left"));
        assert_eq!(name(1, 5, 16, 32).as_deref(), Some("tcp option sack left"));
        assert_eq!(
            name(1, 30, 16, 4).as_deref(),
            Some("tcp option mptcp subtype")
        );
        assert_eq!(
            name(3, 1, 112, 16).as_deref(),
            Some("sctp chunk init num-inbound-streams")
        );
        assert_eq!(name(1, 6, 16, 8), None);
        assert_eq!(header(1, 6), "tcp option 6");
        assert_eq!(header(0, 60), "exthdr dst");
    }
}
