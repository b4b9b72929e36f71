//! Reading what an nfnetlink request asks for, from its captured start.

use super::*;

/// A batch as nft sends it: batch begin, then one NEWCHAIN in `table` (family ip).
fn batch_head(table: &str) -> Vec<u8> {
    let mut v = Vec::new();
    let msg = |v: &mut Vec<u8>, ty: u16, family: u8, attrs: &[u8]| {
        let len = (16 + 4 + attrs.len()) as u32;
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(&[family, 0, 0, 10]);
        v.extend_from_slice(attrs);
    };
    msg(&mut v, 16, 0, &[]);
    let mut name = table.as_bytes().to_vec();
    name.push(0);
    let mut attr = ((4 + name.len()) as u16).to_ne_bytes().to_vec();
    attr.extend_from_slice(&1u16.to_ne_bytes());
    attr.extend_from_slice(&name);
    while !attr.len().is_multiple_of(4) {
        attr.push(0);
    }
    msg(&mut v, (10 << 8) | 3, 2, &attr);
    v
}

/// A batch of `DELRULE`s: each (chain, handle), either may be absent.
fn delrules(rules: &[(Option<&str>, Option<u64>)]) -> Vec<u8> {
    let mut v = Vec::new();
    let msg = |v: &mut Vec<u8>, ty: u16, attrs: &[u8]| {
        let len = (16 + 4 + attrs.len()) as u32;
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(&[1, 0, 0, 10]);
        v.extend_from_slice(attrs);
    };
    msg(&mut v, 16, &[]);
    for (chain, handle) in rules {
        let mut attrs = Vec::new();
        netlink::push_attr(&mut attrs, 1, b"filter\0");
        if let Some(c) = chain {
            netlink::push_attr(&mut attrs, NFTA_RULE_CHAIN, format!("{c}\0").as_bytes());
        }
        if let Some(h) = handle {
            netlink::push_attr(&mut attrs, NFTA_RULE_HANDLE, &h.to_be_bytes());
        }
        msg(&mut v, NFT_DELRULE, &attrs);
    }
    v
}

#[test]
fn a_batch_says_whether_it_flushes_or_deletes_single_rules() {
    use FlushEvidence::*;
    assert_eq!(
        flush_evidence(&delrules(&[(Some("input"), None)])),
        Flush(vec!["input".into()])
    );
    assert_eq!(flush_evidence(&delrules(&[(None, None)])), Flush(vec![]));
    assert_eq!(
        flush_evidence(&delrules(&[(Some("input"), Some(4))])),
        Delete
    );
    assert_eq!(
        flush_evidence(&delrules(&[(Some("a"), Some(4)), (Some("b"), None)])),
        Flush(vec!["b".into()])
    );
    assert_eq!(flush_evidence(&batch_head("filter")), Unknown);
    // A head cut anywhere says nothing it did not see, and never panics.
    let full = delrules(&[(Some("input"), Some(4))]);
    for n in 0..full.len() {
        assert!(
            matches!(flush_evidence(&full[..n]), Unknown | Delete),
            "cut at {n}"
        );
    }
}

#[test]
fn a_batch_says_whether_it_flushes_a_set_or_deletes_elements() {
    use FlushEvidence::*;
    let batch = |elements: bool| {
        let mut v = Vec::new();
        let mut attrs = Vec::new();
        netlink::push_attr(&mut attrs, 1, b"f2b-table\0");
        netlink::push_attr(&mut attrs, NFTA_SET_ELEM_LIST_SET, b"addr-set-sshd\0");
        if elements {
            let mut elem = Vec::new();
            netlink::push_attr(&mut elem, 1, &[192, 0, 2, 7]);
            netlink::push_attr(&mut attrs, NFTA_SET_ELEM_LIST_ELEMENTS, &elem);
        }
        let len = 16 + 4 + attrs.len();
        v.extend_from_slice(&(len as u32).to_ne_bytes());
        v.extend_from_slice(&NFT_DELSETELEM.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(&[1, 0, 0, 10]);
        v.extend_from_slice(&attrs);
        v
    };
    assert_eq!(
        set_flush_evidence(&batch(false)),
        Flush(vec!["addr-set-sshd".into()])
    );
    assert_eq!(set_flush_evidence(&batch(true)), Delete);
    // Rule deletes say nothing about sets, and the other way round.
    assert_eq!(
        set_flush_evidence(&delrules(&[(Some("input"), None)])),
        Unknown
    );
    assert_eq!(flush_evidence(&batch(false)), Unknown);
}

#[test]
fn the_table_of_a_batch_is_read_from_its_head() {
    assert_eq!(
        batch_table(&batch_head("filter")),
        Some((2, "filter".into()))
    );
    // Cut anywhere: never a panic, and no name made up from half an attribute.
    let head = batch_head("filter");
    for n in 0..head.len() {
        let t = batch_table(&head[..n]);
        assert!(t.is_none() || t == Some((2, "filter".into())), "{n}: {t:?}");
    }
    assert_eq!(batch_table(&[0xff; 64]), None);
}
