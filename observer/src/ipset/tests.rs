use super::*;

/// An ipset request as the `ipset` tool builds it.
fn request(cmd: u8, flags: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0u8; netlink::NLMSG_HDRLEN];
    m.extend_from_slice(&[2, 0, 0, 0]);
    for (kind, value) in attrs {
        netlink::push_attr(&mut m, *kind, value);
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&((NFNL_SUBSYS_IPSET << 8) | u16::from(cmd)).to_ne_bytes());
    m[6..8].copy_from_slice(&(flags | 0x5).to_ne_bytes());
    m
}

fn element(ip: [u8; 4]) -> Vec<u8> {
    let mut inner = Vec::new();
    netlink::push_attr(&mut inner, 1 | 0x8000, &{
        let mut v = Vec::new();
        netlink::push_attr(&mut v, 1 | netlink::NLA_F_NET_BYTEORDER, &ip);
        v
    });
    inner
}

fn adt(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        netlink::push_attr(&mut v, ATTR_DATA | 0x8000, &element([10, 0, 0, i as u8]));
    }
    v
}

fn sets(list: &[(&str, u32, u32)]) -> Sets {
    list.iter()
        .map(|(n, e, r)| {
            (
                n.to_string(),
                SetHeader {
                    typename: "hash:ip".into(),
                    family: 2,
                    elements: Some(*e),
                    references: Some(*r),
                },
            )
        })
        .collect()
}

#[test]
fn commands_are_decoded_from_captured_requests() {
    let create = request(
        IPSET_CMD_CREATE,
        0x600,
        &[
            (ATTR_PROTOCOL, vec![7]),
            (ATTR_SETNAME, netlink::cstr("s1")),
            (ATTR_TYPENAME, netlink::cstr("hash:ip")),
        ],
    );
    let c = Command::parse(&create).unwrap();
    assert_eq!(c.cmd, IPSET_CMD_CREATE);
    assert_eq!(c.set.as_deref(), Some("s1"));
    assert_eq!(c.set2, None);
    assert!(c.exclusive());

    let swap = request(
        IPSET_CMD_SWAP,
        0,
        &[
            (ATTR_SETNAME, netlink::cstr("a")),
            (ATTR_TYPENAME, netlink::cstr("b")),
        ],
    );
    let c = Command::parse(&swap).unwrap();
    assert_eq!(c.set2.as_deref(), Some("b"));

    // `ipset restore` puts several elements under IPSET_ATTR_ADT.
    let add = request(
        IPSET_CMD_ADD,
        0x200,
        &[
            (ATTR_SETNAME, netlink::cstr("s2")),
            (ATTR_ADT | 0x8000, adt(3)),
        ],
    );
    assert_eq!(Command::parse(&add).unwrap().elements, Some(3));
    let single = request(
        IPSET_CMD_DEL,
        0x200,
        &[
            (ATTR_SETNAME, netlink::cstr("s2")),
            (ATTR_DATA | 0x8000, element([1, 2, 3, 4])),
        ],
    );
    assert_eq!(Command::parse(&single).unwrap().elements, Some(1));
    // Cut (a large restore): the name is still there, the count is not claimed.
    let big = request(
        IPSET_CMD_ADD,
        0,
        &[
            (ATTR_SETNAME, netlink::cstr("s2")),
            (ATTR_ADT | 0x8000, adt(40)),
        ],
    );
    let c = Command::parse(&big[..256]).unwrap();
    assert_eq!(c.set.as_deref(), Some("s2"));
    assert_eq!(c.elements, None);
}

#[test]
fn malformed_requests_are_not_trusted() {
    assert_eq!(Command::parse(&[]), None);
    assert_eq!(Command::parse(&[0xff; 19]), None);
    let mut nft = request(IPSET_CMD_CREATE, 0, &[]);
    nft[5] = 10; // the nftables subsystem
    assert_eq!(Command::parse(&nft), None);
    // Attribute lengths running past the end are ignored, not read.
    let mut bad = request(IPSET_CMD_DESTROY, 0, &[(ATTR_SETNAME, netlink::cstr("x"))]);
    bad[20] = 200;
    assert_eq!(Command::parse(&bad).unwrap().set, None);
}

fn cmd(c: u8, set: &str, set2: Option<&str>, flags: u16) -> Command {
    Command {
        cmd: c,
        flags,
        set: Some(set.into()),
        set2: set2.map(str::to_string),
        elements: Some(1),
    }
}

#[test]
fn outcomes_follow_what_the_listing_shows() {
    let before = sets(&[("a", 4, 0), ("used", 2, 1)]);
    // Destroyed.
    let after = sets(&[("used", 2, 1)]);
    let out = outcome(&cmd(IPSET_CMD_DESTROY, "a", None, 0), Some(&before), &after);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.op, Op::SetDelete);
    assert_eq!(out[0].0.chain.as_deref(), Some("a"));
    assert_eq!(out[0].0.table, TABLE);
    assert_eq!(out[0].0.family, Family::Ip);
    assert_eq!(out[0].1, "ok");
    assert_eq!(out[0].0.detail.as_deref(), Some("held 4 elements"));
    // Refused: still referenced.
    let out = outcome(
        &cmd(IPSET_CMD_DESTROY, "used", None, 0),
        Some(&before),
        &before,
    );
    assert!(out[0].1.as_str().starts_with("failed"), "{out:?}");
    assert!(out[0].1.as_str().contains("1 references"), "{out:?}");
    // Created, and created again without -exist.
    let after = sets(&[("a", 4, 0), ("used", 2, 1), ("new", 0, 0)]);
    let out = outcome(
        &cmd(IPSET_CMD_CREATE, "new", None, 0x200),
        Some(&before),
        &after,
    );
    assert_eq!((out[0].0.op, out[0].1.as_str()), (Op::SetCreate, "ok"));
    let out = outcome(
        &cmd(IPSET_CMD_CREATE, "new", None, 0x200),
        Some(&after),
        &after,
    );
    assert!(out[0].1.as_str().starts_with("failed"));
    let out = outcome(&cmd(IPSET_CMD_CREATE, "new", None, 0), Some(&after), &after);
    assert!(
        out.is_empty(),
        "create -exist of an existing set is no change"
    );
    // Elements.
    let after = sets(&[("a", 5, 0), ("used", 2, 1)]);
    let out = outcome(&cmd(IPSET_CMD_ADD, "a", None, 0x200), Some(&before), &after);
    assert_eq!(out[0].0.op, Op::ElementAdd);
    assert_eq!(
        out[0].0.detail.as_deref(),
        Some("1 elements requested; the set holds 5 (was 4)")
    );
    let out = outcome(
        &cmd(IPSET_CMD_ADD, "a", None, 0x200),
        Some(&before),
        &before,
    );
    assert!(out[0].1.as_str().starts_with("failed"));
    // Flush, rename, swap.
    let after = sets(&[("a", 0, 0), ("used", 2, 1)]);
    let out = outcome(&cmd(IPSET_CMD_FLUSH, "a", None, 0), Some(&before), &after);
    assert_eq!(out[0].0.detail.as_deref(), Some("4 elements removed"));
    let after = sets(&[("b", 4, 0), ("used", 2, 1)]);
    let out = outcome(
        &cmd(IPSET_CMD_RENAME, "a", Some("b"), 0),
        Some(&before),
        &after,
    );
    assert_eq!((out[0].0.op, out[0].1.as_str()), (Op::SetRename, "ok"));
    let out = outcome(
        &cmd(IPSET_CMD_SWAP, "a", Some("used"), 0),
        Some(&before),
        &before,
    );
    assert_eq!((out[0].0.op, out[0].1.as_str()), (Op::SetSwap, "ok"));
}

#[test]
fn the_sets_of_a_fresh_namespace_are_listed() {
    // Runs in the test's own namespace; an empty list or a kernel without ipset both pass, but
    // a malformed reply or a hang would not.
    if !nix::unistd::geteuid().is_root() {
        test_support::skip(format_args!("not root"));
        return;
    }
    match list() {
        Ok(_) => {}
        Err(IpsetError::Kernel(e)) => test_support::skip(format_args!("{e}")),
        Err(e) => panic!("{e}"),
    }
}
