//! Names and datatypes of what an expression loads into a register: payload header fields
//! (by base, offset and length, in the protocol context the rule has established), meta keys
//! and conntrack keys, as `nft list ruleset` names them.

use crate::nftables::render::values::{Order, Ty};

/// A protocol layer whose protocol a rule can pin with a "dependency" match
/// (`meta nfproto ipv4`, `meta l4proto tcp`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Layer {
    /// Link layer; the value is an ARPHRD type (`meta iiftype ether`).
    L2,
    /// Network layer; the value is an NFPROTO (2 ipv4, 10 ipv6, 3 arp).
    L3,
    /// Transport layer; the value is an IP protocol number.
    L4,
    /// The ICMP or ICMPv6 type, which some fields of the header depend on (`icmp mtu` only
    /// exists in destination-unreachable messages).
    IcmpType,
}

/// How to print what a register holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub text: String,
    pub ty: Ty,
    pub order: Order,
    /// The field's full width in bytes; a shorter load of an address is a prefix match.
    pub full_len: usize,
    /// This field names the protocol of a layer (`meta l4proto`, `ip protocol`, `ether type`).
    pub key_of: Option<Layer>,
    /// This field only makes sense once the layer's protocol is pinned to this value.
    pub needs: Option<(Layer, u32)>,
    /// The ICMP type this field belongs to, for the dependency nft hides (`icmp type
    /// redirect` before `icmp gateway`); echo fields have none since either echo type fits.
    pub icmp_need: Option<u32>,
}

impl Field {
    fn new(text: impl Into<String>, ty: Ty, order: Order, full_len: usize) -> Field {
        Field {
            text: text.into(),
            ty,
            order,
            full_len,
            key_of: None,
            needs: None,
            icmp_need: None,
        }
    }

    fn key(mut self, layer: Layer) -> Field {
        self.key_of = Some(layer);
        self
    }

    /// A field of the given type, byte order and width in bytes.
    pub(crate) fn sized(text: impl Into<String>, ty: Ty, order: Order, full_len: usize) -> Field {
        Field::new(text, ty, order, full_len)
    }

    pub(crate) fn opaque(text: impl Into<String>) -> Field {
        Field::new(text, Ty::Other, Order::Big, 0)
    }
}

pub(crate) const NFPROTO_INET: u8 = 1;
pub(crate) const NFPROTO_IPV4: u8 = 2;
pub(crate) const NFPROTO_ARP: u8 = 3;
pub(crate) const NFPROTO_NETDEV: u8 = 5;
pub(crate) const NFPROTO_BRIDGE: u8 = 7;
pub(crate) const NFPROTO_IPV6: u8 = 10;

/// The protocols a rule has pinned so far: network (an NFPROTO, or what the table family
/// implies), transport (an IP protocol) and the ICMP type a single `icmp type` match gave.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ctx {
    pub l3: Option<u32>,
    /// What the link layer header said comes next, whatever the family (`ether type 8021q`).
    pub link: Option<u32>,
    pub l4: Option<u32>,
    pub icmp: Option<u32>,
}

/// A payload field in the protocol context the rule has established.
pub(crate) fn payload(base: u32, offset: u32, len: u32, ctx: Ctx) -> Field {
    let Ctx { l3, l4, icmp, .. } = ctx;
    let raw = |tag: &str| {
        Field::new(
            format!("@{tag},{},{}", u64::from(offset) * 8, u64::from(len) * 8),
            Ty::HexInt,
            Order::Big,
            len as usize,
        )
    };
    let (o, l) = (offset, len);
    match base {
        0 => {
            if let Some((depth, need)) = ctx.link.and_then(vlan_ctx) {
                if (o, l) == (16 + 4 * depth, 2) {
                    let mut f =
                        Field::new("vlan type", Ty::EtherType, Order::Big, 2).key(Layer::L3);
                    f.needs = need;
                    return f;
                }
            }
            let mut f = match (o, l) {
                (0, 6) => Field::new("ether daddr", Ty::EtherAddr, Order::Big, 6),
                (6, 6) => Field::new("ether saddr", Ty::EtherAddr, Order::Big, 6),
                (12, 2) => Field::new("ether type", Ty::EtherType, Order::Big, 2).key(Layer::L3),
                _ => return raw("ll"),
            };
            // An Ethernet header: nft pins `meta iiftype ether` first where it is not implied.
            f.needs = Some((Layer::L2, 1));
            f
        }
        1 => {
            let f = match l3 {
                Some(2) => ipv4_field(o, l),
                Some(10) => ipv6_field(o, l),
                Some(3) => arp_field(o, l),
                _ => None,
            };
            match f {
                Some(mut f) => {
                    f.needs = l3.map(|p| (Layer::L3, p));
                    f
                }
                None => raw("nh"),
            }
        }
        2 => {
            let Some(p) = l4 else {
                return match (o, l) {
                    (0, 2) => Field::new("th sport", Ty::Port, Order::Big, 2),
                    (2, 2) => Field::new("th dport", Ty::Port, Order::Big, 2),
                    _ => raw("th"),
                };
            };
            match transport_field(p, o, l, icmp) {
                Some(mut f) => {
                    f.needs = Some((Layer::L4, p));
                    f
                }
                None => raw("th"),
            }
        }
        3 => raw("ih"),
        _ => Field::opaque(format!("payload base {base} offset {o} len {l}")),
    }
}

/// Split a load that nft merged from several adjacent header fields (`tcp sport 1 tcp dport 2`
/// is one 4-byte compare) back into its fields: `(field, offset in the load, length)`.
pub(crate) fn expand(
    base: u32,
    offset: u32,
    len: u32,
    ctx: Ctx,
) -> Option<Vec<(Field, usize, usize)>> {
    // nft merges loads only within one 16-byte register.
    if len > 16 {
        return None;
    }
    let mut out = Vec::new();
    let mut cur = 0;
    while cur < len {
        let found = (1..=len - cur).rev().find_map(|l| {
            let f = payload(base, offset + cur, l, ctx);
            (!f.text.starts_with('@') && f.full_len == l as usize).then_some((f, l))
        });
        let (f, l) = found?;
        out.push((f, cur as usize, l as usize));
        cur += l;
    }
    (out.len() > 1).then_some(out)
}

fn ipv4_field(o: u32, l: u32) -> Option<Field> {
    let f = |name: &str, ty, full| Field::new(format!("ip {name}"), ty, Order::Big, full);
    Some(match (o, l) {
        (2, 2) => f("length", Ty::Integer, 2),
        (4, 2) => f("id", Ty::Integer, 2),
        (6, 2) => f("frag-off", Ty::Integer, 2),
        (8, 1) => f("ttl", Ty::Integer, 1),
        (9, 1) => f("protocol", Ty::InetProto, 1).key(Layer::L4),
        (10, 2) => f("checksum", Ty::Integer, 2),
        (12, 1..=4) => f("saddr", Ty::Ipv4, 4),
        (16, 1..=4) => f("daddr", Ty::Ipv4, 4),
        _ => return None,
    })
}

fn ipv6_field(o: u32, l: u32) -> Option<Field> {
    let f = |name: &str, ty, full| Field::new(format!("ip6 {name}"), ty, Order::Big, full);
    Some(match (o, l) {
        (4, 2) => f("length", Ty::Integer, 2),
        (6, 1) => f("nexthdr", Ty::InetProto, 1).key(Layer::L4),
        (7, 1) => f("hoplimit", Ty::Integer, 1),
        (8, 1..=16) => f("saddr", Ty::Ipv6, 16),
        (24, 1..=16) => f("daddr", Ty::Ipv6, 16),
        _ => return None,
    })
}

fn arp_field(o: u32, l: u32) -> Option<Field> {
    let f = |name: &str, ty, full| Field::new(format!("arp {name}"), ty, Order::Big, full);
    Some(match (o, l) {
        (0, 2) => f("htype", Ty::Integer, 2),
        (2, 2) => f("ptype", Ty::EtherType, 2),
        (4, 1) => f("hlen", Ty::Integer, 1),
        (5, 1) => f("plen", Ty::Integer, 1),
        (6, 2) => f("operation", Ty::ArpOp, 2),
        (8, 6) => f("saddr ether", Ty::EtherAddr, 6),
        (14, 4) => f("saddr ip", Ty::Ipv4, 4),
        (18, 6) => f("daddr ether", Ty::EtherAddr, 6),
        (24, 4) => f("daddr ip", Ty::Ipv4, 4),
        _ => return None,
    })
}

/// ICMP types whose messages carry a field (nft's `icmp_dep`): the type nft pins for it and
/// whether it hides that dependency (not for echo fields: request or reply both fit).
const ICMP_ECHO: &[u32] = &[0, 8];
const ICMP_UNREACH: &[u32] = &[3];
const ICMP_REDIRECT: &[u32] = &[5];
const ICMP6_ECHO: &[u32] = &[128, 129];
const ICMP6_TOO_BIG: &[u32] = &[2];
const ICMP6_MLD: &[u32] = &[130, 131, 132];

/// Header templates of the transport protocols: `(offset, length, name, type, icmp types)`,
/// in nft's order. A template for given ICMP types applies when the rule pinned none of the
/// type or one of these; otherwise the next one at that offset is tried.
type Template = (u32, u32, &'static str, Ty, &'static [u32]);

/// The name and header templates of transport protocol `proto` (an IP protocol number).
fn transport_templates(proto: u32) -> Option<(&'static str, &'static [Template])> {
    Some(match proto {
        6 => (
            "tcp",
            &[
                (0, 2, "sport", Ty::Port, &[]),
                (2, 2, "dport", Ty::Port, &[]),
                (4, 4, "sequence", Ty::Integer, &[]),
                (8, 4, "ackseq", Ty::Integer, &[]),
                (13, 1, "flags", Ty::TcpFlags, &[]),
                (14, 2, "window", Ty::Integer, &[]),
                (16, 2, "checksum", Ty::Integer, &[]),
                (18, 2, "urgptr", Ty::Integer, &[]),
            ],
        ),
        17 | 136 => (
            if proto == 17 { "udp" } else { "udplite" },
            &[
                (0, 2, "sport", Ty::Port, &[]),
                (2, 2, "dport", Ty::Port, &[]),
                (4, 2, "length", Ty::Integer, &[]),
                (6, 2, "checksum", Ty::Integer, &[]),
            ],
        ),
        132 => (
            "sctp",
            &[
                (0, 2, "sport", Ty::Port, &[]),
                (2, 2, "dport", Ty::Port, &[]),
                (4, 4, "vtag", Ty::Integer, &[]),
                (8, 4, "checksum", Ty::Integer, &[]),
            ],
        ),
        33 => (
            "dccp",
            &[
                (0, 2, "sport", Ty::Port, &[]),
                (2, 2, "dport", Ty::Port, &[]),
            ],
        ),
        1 => (
            "icmp",
            &[
                (0, 1, "type", Ty::IcmpType, &[]),
                (1, 1, "code", Ty::IcmpCode, &[]),
                (2, 2, "checksum", Ty::Integer, &[]),
                (4, 2, "id", Ty::Integer, ICMP_ECHO),
                (6, 2, "sequence", Ty::Integer, ICMP_ECHO),
                (4, 4, "gateway", Ty::Integer, ICMP_REDIRECT),
                (6, 2, "mtu", Ty::Integer, ICMP_UNREACH),
            ],
        ),
        58 => (
            "icmpv6",
            &[
                (0, 1, "type", Ty::Icmp6Type, &[]),
                (1, 1, "code", Ty::Icmp6Code, &[]),
                (2, 2, "checksum", Ty::Integer, &[]),
                (4, 4, "mtu", Ty::Integer, ICMP6_TOO_BIG),
                (4, 2, "id", Ty::Integer, ICMP6_ECHO),
                (6, 2, "sequence", Ty::Integer, ICMP6_ECHO),
                (4, 2, "max-delay", Ty::Integer, ICMP6_MLD),
            ],
        ),
        51 => (
            "ah",
            &[
                (0, 1, "nexthdr", Ty::InetProto, &[]),
                (1, 1, "hdrlength", Ty::Integer, &[]),
                (2, 2, "reserved", Ty::Integer, &[]),
                (4, 4, "spi", Ty::Integer, &[]),
                (8, 4, "sequence", Ty::Integer, &[]),
            ],
        ),
        108 => (
            "comp",
            &[
                (0, 1, "nexthdr", Ty::InetProto, &[]),
                (1, 1, "flags", Ty::HexInt, &[]),
                (2, 2, "cpi", Ty::Integer, &[]),
            ],
        ),
        2 => (
            "igmp",
            &[
                (0, 1, "type", Ty::IgmpType, &[]),
                (1, 1, "mrt", Ty::Integer, &[]),
                (2, 2, "checksum", Ty::Integer, &[]),
                (4, 4, "group", Ty::Integer, &[]),
            ],
        ),
        50 => (
            "esp",
            &[
                (0, 4, "spi", Ty::Integer, &[]),
                (4, 4, "sequence", Ty::Integer, &[]),
            ],
        ),
        _ => return None,
    })
}

fn transport_field(proto: u32, o: u32, l: u32, icmp: Option<u32>) -> Option<Field> {
    let (name, fields) = transport_templates(proto)?;
    fields
        .iter()
        .filter(|(fo, _, _, _, types)| {
            *fo == o && (types.is_empty() || icmp.is_none_or(|t| types.contains(&t)))
        })
        // The first template at this offset that fits decides (nft's order): a 4-byte load
        // at an echo message's offset 4 is `id` and `sequence`, not `gateway`.
        .find(|(_, fl, _, _, _)| *fl <= l)
        .filter(|(_, fl, _, _, _)| *fl == l)
        .map(|(_, fl, field, ty, types)| {
            let mut f = Field::new(format!("{name} {field}"), *ty, Order::Big, *fl as usize);
            // Echo fields fit both echo types: nft keeps the `icmp type` match before them.
            if *types != ICMP_ECHO && *types != ICMP6_ECHO {
                f.icmp_need = icmp.filter(|t| types.contains(t));
            }
            if f.text.ends_with(" type") && (proto == 1 || proto == 58) {
                f.key_of = Some(Layer::IcmpType);
            }
            f
        })
}

/// Header fields that are not whole bytes, by base, bit offset and bit length (nft's
/// `HDR_BITFIELD` templates): `(protocol it needs, base, bit offset, bit length, name, type)`.
/// The network protocol is an NFPROTO (2, 10), the transport one an IP protocol; 0x8100 << 16
/// stands for a VLAN header after the Ethernet one.
const BITFIELDS: &[(Layer, u32, u32, u32, u32, &str, Ty)] = &[
    (Layer::L3, 2, 1, 0, 4, "ip version", Ty::Integer),
    (Layer::L3, 2, 1, 4, 4, "ip hdrlength", Ty::Integer),
    (Layer::L3, 2, 1, 8, 6, "ip dscp", Ty::Dscp),
    (Layer::L3, 2, 1, 14, 2, "ip ecn", Ty::Ecn),
    (Layer::L3, 10, 1, 0, 4, "ip6 version", Ty::Integer),
    (Layer::L3, 10, 1, 4, 6, "ip6 dscp", Ty::Dscp),
    (Layer::L3, 10, 1, 10, 2, "ip6 ecn", Ty::Ecn),
    (Layer::L3, 10, 1, 12, 20, "ip6 flowlabel", Ty::Integer),
    (Layer::L4, 6, 2, 96, 4, "tcp doff", Ty::Integer),
    (Layer::L4, 6, 2, 100, 4, "tcp reserved", Ty::Integer),
    (Layer::L4, 33, 2, 67, 4, "dccp type", Ty::DccpType),
];

/// A header field narrower than its bytes (`ip hdrlength`, `vlan id`), by bit offset and
/// length within the base, in the protocol context the rule has established.
/// Where the rule is inside VLAN headers (`ether type 8021q`, `8021ad`, then `vlan type
/// 8021q`...): how many headers deep the current one is, and the dependency its fields hide
/// (only the plain 802.1Q one nft adds itself).
fn vlan_ctx(l3: u32) -> Option<(u32, Option<(Layer, u32)>)> {
    if !matches!(l3 >> 16, 0x8100 | 0x88a8) {
        return None;
    }
    let need = (l3 == 0x8100 << 16).then_some((Layer::L3, l3));
    Some((l3 & 0xff, need))
}

/// The fields of a VLAN header, by bit offset from its start.
const VLAN_BITS: &[(u32, u32, &str)] =
    &[(0, 3, "vlan pcp"), (3, 1, "vlan dei"), (4, 12, "vlan id")];

pub(crate) fn payload_bits(base: u32, off: u32, len: u32, ctx: Ctx) -> Option<Field> {
    let Ctx { l3, l4, .. } = ctx;
    if let Some((depth, need)) = ctx.link.filter(|_| base == 0).and_then(vlan_ctx) {
        let start = (14 + 4 * depth) * 8;
        if let Some((_, _, name)) = VLAN_BITS
            .iter()
            .find(|(o, l, _)| off.checked_sub(start) == Some(*o) && *l == len)
        {
            let mut f = Field::new(*name, Ty::Integer, Order::Big, len.div_ceil(8) as usize);
            f.needs = need;
            return Some(f);
        }
    }
    BITFIELDS
        .iter()
        .find(|(layer, proto, b, o, l, _, _)| {
            let pinned = match layer {
                Layer::L2 | Layer::IcmpType => None,
                Layer::L3 => l3,
                Layer::L4 => l4,
            };
            pinned == Some(*proto) && *b == base && *o == off && *l == len
        })
        .map(|(layer, proto, _, _, l, name, ty)| {
            let mut f = Field::new(*name, *ty, Order::Big, l.div_ceil(8) as usize);
            f.needs = Some((*layer, *proto));
            f
        })
}

/// A meta key (enum nft_meta_keys).
pub(crate) fn meta(key: u32) -> Field {
    let host = |text: &str, ty| Field::new(text, ty, Order::Host, 4);
    match key {
        0 => host("meta length", Ty::Integer),
        1 => Field::new("meta protocol", Ty::EtherType, Order::Big, 2).key(Layer::L3),
        2 => host("meta priority", Ty::TcHandle),
        3 => host("meta mark", Ty::Mark),
        4 => host("iif", Ty::Ifindex),
        5 => host("oif", Ty::Ifindex),
        6 => Field::new("iifname", Ty::Ifname, Order::Big, 16),
        7 => Field::new("oifname", Ty::Ifname, Order::Big, 16),
        8 => Field::new("meta iiftype", Ty::Arphrd, Order::Host, 2).key(Layer::L2),
        9 => Field::new("meta oiftype", Ty::Arphrd, Order::Host, 2),
        10 => host("meta skuid", Ty::Integer),
        11 => host("meta skgid", Ty::Integer),
        12 => host("meta nftrace", Ty::Integer),
        13 => host("meta rtclassid", Ty::Realm),
        14 => host("meta secmark", Ty::Integer),
        15 => Field::new("meta nfproto", Ty::NfProto, Order::Host, 1).key(Layer::L3),
        16 => Field::new("meta l4proto", Ty::InetProto, Order::Host, 1).key(Layer::L4),
        17 => Field::new("meta ibrname", Ty::Ifname, Order::Big, 16),
        18 => Field::new("meta obrname", Ty::Ifname, Order::Big, 16),
        19 => Field::new("meta pkttype", Ty::PktType, Order::Host, 1),
        20 => host("meta cpu", Ty::Integer),
        21 => host("iifgroup", Ty::Devgroup),
        22 => host("oifgroup", Ty::Devgroup),
        23 => host("meta cgroup", Ty::Integer),
        24 => Field::new("meta random", Ty::Integer, Order::Big, 4),
        25 => Field::new("meta ipsec", Ty::Boolean, Order::Host, 1),
        26 => Field::new("meta iifkind", Ty::Ifname, Order::Big, 16),
        27 => Field::new("meta oifkind", Ty::Ifname, Order::Big, 16),
        28 => host("meta ibrpvid", Ty::Integer),
        29 => host("meta ibrvproto", Ty::EtherType),
        30 => Field::new("meta time", Ty::Time, Order::Host, 8),
        31 => Field::new("meta day", Ty::Day, Order::Host, 1),
        32 => host("meta hour", Ty::Hour),
        33 => host("meta sdif", Ty::Ifindex),
        34 => Field::new("meta sdifname", Ty::Ifname, Order::Big, 16),
        35 => host("meta broute", Ty::Integer),
        _ => Field::opaque(format!("meta key {key}")),
    }
}

/// A conntrack key (enum nft_ct_keys), with its direction when the expression has one.
pub(crate) fn ct(key: u32, dir: Option<u8>) -> Field {
    let d = match dir {
        Some(0) => "original ",
        Some(1) => "reply ",
        _ => "",
    };
    let host = |name: &str, ty| Field::new(format!("ct {d}{name}"), ty, Order::Host, 4);
    let big = |name: &str, ty, len| Field::new(format!("ct {d}{name}"), ty, Order::Big, len);
    match key {
        0 => host("state", Ty::CtState),
        1 => Field::new(format!("ct {d}direction"), Ty::CtDir, Order::Host, 1),
        2 => host("status", Ty::CtStatus),
        3 => host("mark", Ty::Mark),
        4 => host("secmark", Ty::Integer),
        5 => host("expiration", Ty::Msecs),
        6 => big("helper", Ty::Ifname, 16),
        7 => Field::new(format!("ct {d}l3proto"), Ty::NfProto, Order::Host, 1),
        8 => big("saddr", Ty::Ipv4, 4),
        9 => big("daddr", Ty::Ipv4, 4),
        10 => Field::new(format!("ct {d}protocol"), Ty::InetProto, Order::Host, 1),
        11 => big("proto-src", Ty::Port, 2),
        12 => big("proto-dst", Ty::Port, 2),
        13 => big("label", Ty::CtLabel, 16),
        14 => Field::new(format!("ct {d}packets"), Ty::Integer, Order::Host, 8),
        15 => Field::new(format!("ct {d}bytes"), Ty::Integer, Order::Host, 8),
        16 => Field::new(format!("ct {d}avgpkt"), Ty::Integer, Order::Host, 8),
        17 => Field::new(format!("ct {d}zone"), Ty::Integer, Order::Host, 2),
        18 => host("event", Ty::CtEvent),
        19 => big("ip saddr", Ty::Ipv4, 4),
        20 => big("ip daddr", Ty::Ipv4, 4),
        21 => big("ip6 saddr", Ty::Ipv6, 16),
        22 => big("ip6 daddr", Ty::Ipv6, 16),
        23 => big("id", Ty::Integer, 4),
        _ => Field::opaque(format!("ct key {key}")),
    }
}

/// The nft name of a chain's hook, for the chain's family.
pub(crate) fn hook_name(family: u8, num: u32) -> String {
    let name = match (family, num) {
        (5, 0) => "ingress",
        (5, 1) => "egress",
        (3, 0) => "input",
        (3, 1) => "output",
        (_, 0) => "prerouting",
        (_, 1) => "input",
        (_, 2) => "forward",
        (_, 3) => "output",
        (_, 4) => "postrouting",
        (_, 5) => "ingress",
        _ => return num.to_string(),
    };
    name.into()
}

/// A chain priority as nft prints it: a standard name (`filter`, `srcnat - 5`) where the
/// family and hook allow one, else the number.
pub(crate) fn priority_text(family: u8, hook: u32, prio: i32) -> String {
    const BRIDGE: u8 = 7;
    let table: &[(&str, i32, Option<u32>)] = match family {
        BRIDGE => &[
            ("dstnat", -300, Some(0)),
            ("filter", -200, None),
            ("out", 100, Some(3)),
            ("srcnat", 300, Some(4)),
        ],
        NFPROTO_ARP => &[("filter", 0, None)],
        5 => &[("filter", 0, None)],
        _ => &[
            ("raw", -300, None),
            ("mangle", -150, None),
            ("dstnat", -100, Some(0)),
            ("filter", 0, None),
            ("security", 50, None),
            ("srcnat", 100, Some(4)),
        ],
    };
    for (name, base, only_hook) in table {
        if only_hook.is_some_and(|h| h != hook) {
            continue;
        }
        let delta = i64::from(prio) - i64::from(*base);
        if delta == 0 {
            return (*name).to_string();
        }
        if delta.abs() <= 10 {
            let sign = if delta > 0 { '+' } else { '-' };
            return format!("{name} {sign} {}", delta.abs());
        }
    }
    prio.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_fields_follow_the_protocol_context() {
        let ctx = |l3, l4| Ctx {
            l3,
            l4,
            ..Ctx::default()
        };
        assert_eq!(payload(2, 2, 2, ctx(Some(2), Some(6))).text, "tcp dport");
        assert_eq!(payload(2, 2, 2, ctx(Some(2), None)).text, "th dport");
        assert_eq!(
            payload(2, 2, 2, ctx(Some(2), Some(17))).needs,
            Some((Layer::L4, 17))
        );
        assert_eq!(payload(1, 12, 1, ctx(Some(2), None)).text, "ip saddr");
        assert_eq!(payload(1, 12, 4, ctx(None, None)).text, "@nh,96,32");
        assert_eq!(payload(1, 9, 1, ctx(Some(2), None)).key_of, Some(Layer::L4));
        let icmp = |t| Ctx {
            l3: Some(2),
            l4: Some(1),
            icmp: t,
            ..Ctx::default()
        };
        assert_eq!(payload(2, 6, 2, icmp(None)).text, "icmp sequence");
        assert_eq!(payload(2, 6, 2, icmp(Some(3))).text, "icmp mtu");
        assert_eq!(payload(2, 6, 2, icmp(Some(3))).icmp_need, Some(3));
        assert_eq!(payload(2, 4, 4, icmp(Some(5))).text, "icmp gateway");
        assert_eq!(payload(2, 4, 4, icmp(None)).text, "@th,32,32");
    }

    #[test]
    fn priorities_use_standard_names() {
        assert_eq!(priority_text(2, 1, 0), "filter");
        assert_eq!(priority_text(1, 2, -5), "filter - 5");
        assert_eq!(priority_text(2, 4, 100), "srcnat");
        assert_eq!(priority_text(2, 0, -100), "dstnat");
        assert_eq!(priority_text(2, 1, 100), "100");
        assert_eq!(priority_text(2, 1, 60), "security + 10");
        assert_eq!(priority_text(7, 2, 0), "0");
        assert_eq!(priority_text(5, 0, -500), "-500");
    }
}
