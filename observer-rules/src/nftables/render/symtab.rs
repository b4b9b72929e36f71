//! The symbol tables nft carries built in (`datatype.c`, `proto.c`, `ct.c`, `meta.c`, `exthdr.c`):
//! protocol numbers, ct state and status bits, tcp flags, icmp types and codes, link types,
//! packet types, DSCP and ECN code points... as `(value, name)` pairs. `values` prints with them.

pub(crate) const INET_PROTO: &[(u64, &str)] = &[
    (1, "icmp"),
    (2, "igmp"),
    (4, "ipencap"),
    (6, "tcp"),
    (17, "udp"),
    (33, "dccp"),
    (41, "ipv6"),
    (47, "gre"),
    (50, "esp"),
    (51, "ah"),
    (58, "ipv6-icmp"),
    (132, "sctp"),
    (136, "udplite"),
];

pub(crate) const CT_STATE: &[(u64, &str)] = &[
    (1, "invalid"),
    (2, "established"),
    (4, "related"),
    (8, "new"),
    (64, "untracked"),
];

pub(crate) const CT_STATUS: &[(u64, &str)] = &[
    (1, "expected"),
    (2, "seen-reply"),
    (4, "assured"),
    (8, "confirmed"),
    (16, "snat"),
    (32, "dnat"),
    (512, "dying"),
];

/// Conntrack event bits (enum ip_conntrack_events), as `ct event set` names them.
pub(crate) const CT_EVENT: &[(u64, &str)] = &[
    (1, "new"),
    (2, "related"),
    (4, "destroy"),
    (8, "reply"),
    (16, "assured"),
    (32, "protoinfo"),
    (64, "helper"),
    (128, "mark"),
    (256, "seqadj"),
    (512, "secmark"),
    (1024, "label"),
];

pub(crate) const TCP_FLAGS: &[(u64, &str)] = &[
    (1, "fin"),
    (2, "syn"),
    (4, "rst"),
    (8, "psh"),
    (16, "ack"),
    (32, "urg"),
    (64, "ecn"),
    (128, "cwr"),
];

pub(crate) const ICMP_TYPE: &[(u64, &str)] = &[
    (0, "echo-reply"),
    (3, "destination-unreachable"),
    (4, "source-quench"),
    (5, "redirect"),
    (8, "echo-request"),
    (9, "router-advertisement"),
    (10, "router-solicitation"),
    (11, "time-exceeded"),
    (12, "parameter-problem"),
    (13, "timestamp-request"),
    (14, "timestamp-reply"),
    (15, "info-request"),
    (16, "info-reply"),
    (17, "address-mask-request"),
    (18, "address-mask-reply"),
];

pub(crate) const ICMP6_TYPE: &[(u64, &str)] = &[
    (1, "destination-unreachable"),
    (2, "packet-too-big"),
    (3, "time-exceeded"),
    (4, "parameter-problem"),
    (128, "echo-request"),
    (129, "echo-reply"),
    (130, "mld-listener-query"),
    (131, "mld-listener-report"),
    (132, "mld-listener-done"),
    (133, "nd-router-solicit"),
    (134, "nd-router-advert"),
    (135, "nd-neighbor-solicit"),
    (136, "nd-neighbor-advert"),
    (137, "nd-redirect"),
    (138, "router-renumbering"),
    (141, "ind-neighbor-solicit"),
    (142, "ind-neighbor-advert"),
    (143, "mld2-listener-report"),
];

/// icmp codes as `reject with icmp <code>` prints them (ICMP_DEST_UNREACH codes).
pub(crate) const ICMP_CODE: &[(u64, &str)] = &[
    (0, "net-unreachable"),
    (1, "host-unreachable"),
    (2, "prot-unreachable"),
    (3, "port-unreachable"),
    (4, "frag-needed"),
    (9, "net-prohibited"),
    (10, "host-prohibited"),
    (13, "admin-prohibited"),
];

pub(crate) const ICMP6_CODE: &[(u64, &str)] = &[
    (0, "no-route"),
    (1, "admin-prohibited"),
    (3, "addr-unreachable"),
    (4, "port-unreachable"),
    (5, "policy-fail"),
    (6, "reject-route"),
];

pub(crate) const FIB_ADDR: &[(u64, &str)] = &[
    (0, "unspec"),
    (1, "unicast"),
    (2, "local"),
    (3, "broadcast"),
    (4, "anycast"),
    (5, "multicast"),
    (6, "blackhole"),
    (7, "unreachable"),
    (8, "prohibit"),
];

pub(crate) const PKTTYPE: &[(u64, &str)] = &[
    (0, "host"),
    (1, "broadcast"),
    (2, "multicast"),
    (3, "other"),
];

pub(crate) const ARPOP: &[(u64, &str)] = &[
    (1, "request"),
    (2, "reply"),
    (3, "rrequest"),
    (4, "rreply"),
    (8, "inrequest"),
    (9, "inreply"),
    (10, "nak"),
];

pub(crate) const ECN: &[(u64, &str)] = &[(0, "not-ect"), (1, "ect1"), (2, "ect0"), (3, "ce")];

pub(crate) const IGMP_TYPE: &[(u64, &str)] = &[
    (0x11, "membership-query"),
    (0x12, "membership-report-v1"),
    (0x16, "membership-report-v2"),
    (0x22, "membership-report-v3"),
    (0x17, "leave-group"),
];

pub(crate) const DCCP_TYPE: &[(u64, &str)] = &[
    (0, "request"),
    (1, "response"),
    (2, "data"),
    (3, "ack"),
    (4, "dataack"),
    (5, "closereq"),
    (6, "close"),
    (7, "reset"),
    (8, "sync"),
    (9, "syncack"),
];

pub(crate) const ARPHRD: &[(u64, &str)] = &[
    (1, "ether"),
    (512, "ppp"),
    (768, "ipip"),
    (769, "ipip6"),
    (772, "loopback"),
    (776, "sit"),
    (778, "ipgre"),
];

pub(crate) const MH_TYPE: &[(u64, &str)] = &[
    (0, "binding-refresh-request"),
    (1, "home-test-init"),
    (2, "careof-test-init"),
    (3, "home-test"),
    (4, "careof-test"),
    (5, "binding-update"),
    (6, "binding-acknowledgement"),
    (7, "binding-error"),
    (8, "fast-binding-update"),
    (9, "fast-binding-acknowledgement"),
    (10, "fast-binding-advertisement"),
    (11, "experimental-mobility-header"),
    (12, "home-agent-switch-message"),
];

pub(crate) const DSCP: &[(u64, &str)] = &[
    (0, "cs0"),
    (1, "lephb"),
    (8, "cs1"),
    (16, "cs2"),
    (24, "cs3"),
    (32, "cs4"),
    (40, "cs5"),
    (48, "cs6"),
    (56, "cs7"),
    (10, "af11"),
    (12, "af12"),
    (14, "af13"),
    (18, "af21"),
    (20, "af22"),
    (22, "af23"),
    (26, "af31"),
    (28, "af32"),
    (30, "af33"),
    (34, "af41"),
    (36, "af42"),
    (38, "af43"),
    (44, "va"),
    (46, "ef"),
];
