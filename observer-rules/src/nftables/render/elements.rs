//! Set elements as `nft list ruleset` prints them (`{ 10.0.0.0/8, 22 : accept }`), and
//! verdicts (`accept`, `jump chain`), for rules' anonymous sets, verdict maps and immediates and
//! for set element changes.
//!
//! Layering: below `render` (rules' anonymous sets, verdict maps, immediates) and the
//! transaction code (element changes); imports only `decode` and `values`. `render` re-exports
//! [`elements_text`] and [`element_items`], the paths the rest of the crate uses.

use crate::nftables::netlink::decode::{self, Data, Element, Set, Verdict};
use crate::nftables::render::values::{self, Order, Ty};

pub(crate) fn verdict(v: &Verdict) -> String {
    let chain = v.chain.as_deref().unwrap_or("?");
    match v.code {
        decode::NF_ACCEPT => "accept".into(),
        decode::NF_DROP => "drop".into(),
        decode::NF_QUEUE => "queue".into(),
        decode::NFT_CONTINUE => "continue".into(),
        decode::NFT_BREAK => "break".into(),
        decode::NFT_RETURN => "return".into(),
        decode::NFT_JUMP => format!("jump {chain}"),
        decode::NFT_GOTO => format!("goto {chain}"),
        other => format!("verdict {other}"),
    }
}

/// The key (and data) types of a set's elements, from the set alone.
pub(crate) fn set_key_types(set: &Set) -> Vec<(Ty, Order)> {
    values::concat_types(set.key_type)
        .into_iter()
        .map(|t| {
            let order = match set.key_host_order {
                Some(true) if set.key_type <= 0x3f => Order::Host,
                _ => t.natural_order(),
            };
            (t, order)
        })
        .collect()
}

/// A set's elements as nft prints them, sorted: `{ 10.0.0.0/8, 192.168.0.1 }`,
/// `{ 22 : accept }`. Intervals stored as start/end pairs become prefixes or ranges. More than
/// `max` elements are cut short with a count of the rest.
pub fn elements_text(set: &Set, elems: &[&Element], key: &[(Ty, Order)], max: usize) -> String {
    elements_text_sized(set, elems, key, &[], max)
}

/// [`elements_text`] with the byte size of each part of a concatenated key, where the rule's
/// loads say it (`vlan id` is 2 bytes, `@th,160,128` 16): empty for the types' own sizes.
pub(crate) fn elements_text_sized(
    set: &Set,
    elems: &[&Element],
    key: &[(Ty, Order)],
    sizes: &[usize],
    max: usize,
) -> String {
    let items = items(set, elems, key, sizes);
    let total = items.len();
    let mut shown: Vec<String> = items.into_iter().take(max).collect();
    if total > max {
        shown.push(format!("… ({} more)", total - max));
    }
    if shown.is_empty() {
        return "{ }".into();
    }
    format!("{{ {} }}", shown.join(", "))
}

/// Each element (or interval) printed on its own, in key order.
pub fn element_items(set: &Set, elems: &[&Element], key: &[(Ty, Order)]) -> Vec<String> {
    items(set, elems, key, &[])
}

fn items(set: &Set, elems: &[&Element], key: &[(Ty, Order)], sizes: &[usize]) -> Vec<String> {
    let key: Vec<(Ty, Order)> = if key.is_empty() {
        set_key_types(set)
    } else {
        key.to_vec()
    };
    // A map's data: one type or a concatenation (`192.168.2.3 . 80`), in the byte order the
    // set's userdata gives.
    let data_ty: Option<Vec<(Ty, Order)>> = set
        .data_type
        .filter(|t| *t != decode::NFT_DATA_VERDICT)
        .map(|t| {
            values::concat_types(t)
                .into_iter()
                .map(|ty| match set.data_host_order {
                    Some(true) if t <= 0x3f => (ty, Order::Host),
                    _ => (ty, ty.natural_order()),
                })
                .collect()
        });
    let data_ty = data_ty.as_deref();
    let mut sorted: Vec<&Element> = elems.to_vec();
    // nft sorts by value (its mergesort): a single key by its own value; a concatenation, or a
    // key in host order (strings are too), as one host-order number of all its bytes, from the
    // last byte (`{ 10.0.0.1 . 22, 192.168.0.1 . 22, 10.0.0.1 . 443 }`: the port first). The
    // catch-all element comes last.
    let host = key.len() > 1
        || (!key.is_empty()
            && key
                .iter()
                .all(|(ty, order)| *order == Order::Host || *ty == Ty::Ifname));
    // Flag words come in nft's order for them: by their lowest flag, more flags first (`{ fin
    // | ack, fin, syn | ack, syn }`): the bits reversed, descending.
    let flags = match key.as_slice() {
        [(ty, order)] if ty.is_flags() => Some((*ty, *order)),
        _ => None,
    };
    let value = |e: &Element| {
        let mut k = e.key.clone();
        if let Some((_, order)) = flags {
            k = (!values::int(&k, order).reverse_bits())
                .to_be_bytes()
                .to_vec();
        } else if host && cfg!(target_endian = "little") {
            k.reverse();
        }
        (e.flags & decode::NFT_SET_ELEM_CATCHALL != 0, k)
    };
    sorted.sort_by(|a, b| value(a).cmp(&value(b)).then(a.flags.cmp(&b.flags)));
    let interval = set.flags & decode::NFT_SET_INTERVAL != 0;
    let mut out = Vec::new();
    let mut open: Option<&Element> = None;
    for e in sorted {
        if e.flags & decode::NFT_SET_ELEM_CATCHALL != 0 {
            out.push(with_data("*".into(), e, set, data_ty));
            continue;
        }
        if let Some(end) = e.key_end() {
            out.push(with_data(
                key_range(&key, sizes, &e.key, end),
                e,
                set,
                data_ty,
            ));
            continue;
        }
        if !interval {
            out.push(with_data(key_value(&key, sizes, &e.key), e, set, data_ty));
            continue;
        }
        if e.flags & decode::NFT_SET_ELEM_INTERVAL_END != 0 {
            if let Some(start) = open.take() {
                let last = values::minus_one(&e.key);
                out.push(with_data(
                    key_range(&key, sizes, &start.key, &last),
                    start,
                    set,
                    data_ty,
                ));
            }
            continue;
        }
        // Adjacent intervals have no end element between them: one ends where the next starts.
        if let Some(start) = open.replace(e) {
            let last = values::minus_one(&e.key);
            out.push(with_data(
                key_range(&key, sizes, &start.key, &last),
                start,
                set,
                data_ty,
            ));
        }
    }
    if let Some(start) = open {
        let top = vec![0xff; start.key.len()];
        out.push(with_data(
            key_range(&key, sizes, &start.key, &top),
            start,
            set,
            data_ty,
        ));
    }
    out
}

fn with_data(text: String, e: &Element, set: &Set, data_ty: Option<&[(Ty, Order)]>) -> String {
    let mut text = text;
    match &e.data {
        Some(Data::Verdict(v)) => text = format!("{text} : {}", verdict(v)),
        Some(Data::Value(v)) if set.data_interval => {
            let types = data_ty.unwrap_or(&[(Ty::Other, Order::Big)]);
            text = format!("{text} : {}", data_interval(types, v));
        }
        Some(Data::Value(v)) => {
            let types = data_ty.unwrap_or(&[(Ty::Other, Order::Big)]);
            text = format!("{text} : {}", key_value(types, &[], v));
        }
        None => {}
    }
    if let Some(obj) = e.objref() {
        text = format!("{text} : \"{obj}\"");
    }
    if let Some(c) = e.comment() {
        text = format!("{text} comment \"{c}\"");
    }
    text
}

/// Split a (concatenated) key into its fields: each field is padded to 4 bytes.
/// `sizes`, where given, are the parts' byte sizes; else each type's own.
fn key_parts<'k>(
    key: &[(Ty, Order)],
    sizes: &[usize],
    bytes: &'k [u8],
) -> Vec<(Ty, Order, &'k [u8])> {
    if key.len() <= 1 {
        let (ty, order) = key.first().copied().unwrap_or((Ty::Other, Order::Big));
        return vec![(ty, order, bytes)];
    }
    let mut out = Vec::new();
    let mut off = 0;
    for (i, (ty, order)) in key.iter().enumerate() {
        let size = match sizes.get(i) {
            Some(n) if *n > 0 => *n,
            _ => ty.size().unwrap_or(4),
        };
        let part = bytes
            .get(off.min(bytes.len())..(off + size).min(bytes.len()))
            .unwrap_or(&[]);
        out.push((*ty, *order, part));
        off += size.div_ceil(4) * 4;
    }
    out
}

fn key_value(key: &[(Ty, Order)], sizes: &[usize], bytes: &[u8]) -> String {
    key_parts(key, sizes, bytes)
        .into_iter()
        .map(|(ty, order, b)| {
            if ty.is_flags() && key.len() == 1 {
                values::flags_or(ty, values::int(b, order))
            } else {
                values::format(ty, order, b)
            }
        })
        .collect::<Vec<_>>()
        .join(" . ")
}

fn key_range(key: &[(Ty, Order)], sizes: &[usize], start: &[u8], end: &[u8]) -> String {
    let a = key_parts(key, sizes, start);
    let b = key_parts(key, sizes, end);
    a.into_iter()
        .zip(b)
        .map(|((ty, order, s), (_, _, e))| values::interval(ty, order, s, e))
        .collect::<Vec<_>>()
        .join(" . ")
}

/// A map value made of intervals: the low ends of its parts, then their high ends. Like nft, a
/// part whose ends are equal prints as one value in a concatenation, and an address range that
/// is a prefix as the prefix; a single address interval is always a prefix where it can be one
/// (`192.168.2.0/24`, and `/32` for one address).
fn data_interval(types: &[(Ty, Order)], bytes: &[u8]) -> String {
    let (low, high) = bytes.split_at(bytes.len() / 2);
    let lows = key_parts(types, &[], low);
    let highs = key_parts(types, &[], high);
    if let ([(ty, order, l)], [(_, _, h)]) = (lows.as_slice(), highs.as_slice()) {
        if l == h && matches!(ty, Ty::Ipv4 | Ty::Ipv6) {
            return values::prefix(*ty, l, l.len() as u32 * 8);
        }
        return values::interval(*ty, *order, l, h);
    }
    lows.into_iter()
        .zip(highs)
        .map(|((ty, order, l), (_, _, h))| values::interval(ty, order, l, h))
        .collect::<Vec<_>>()
        .join(" . ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_values_that_are_intervals() {
        let v4 = [(Ty::Ipv4, Order::Big)];
        assert_eq!(
            data_interval(&v4, &[192, 168, 2, 2, 192, 168, 2, 4]),
            "192.168.2.2-192.168.2.4"
        );
        assert_eq!(
            data_interval(&v4, &[192, 168, 2, 0, 192, 168, 2, 255]),
            "192.168.2.0/24"
        );
        assert_eq!(
            data_interval(&v4, &[10, 0, 0, 1, 10, 0, 0, 1]),
            "10.0.0.1/32"
        );
        // address . port: the low ends, then the high ends, each part padded to 4 bytes.
        let pair = [(Ty::Ipv4, Order::Big), (Ty::Port, Order::Big)];
        let low = [10, 141, 10, 0, 0x22, 0xb8, 0, 0];
        let high = [10, 141, 10, 255, 0x23, 0x27, 0, 0];
        assert_eq!(
            data_interval(&pair, &[low, high].concat()),
            "10.141.10.0/24 . 8888-8999"
        );
        let high = [10, 141, 10, 2, 0x22, 0xb8, 0, 0];
        let low = [10, 141, 10, 2, 0x22, 0xb8, 0, 0];
        assert_eq!(
            data_interval(&pair, &[low, high].concat()),
            "10.141.10.2 . 8888"
        );
    }

    #[test]
    fn concatenated_parts_as_wide_as_their_loads() {
        // ether saddr . vlan id: 6 bytes padded to 8, then a 2-byte integer padded to 4.
        let key = [(Ty::EtherAddr, Order::Big), (Ty::Integer, Order::Big)];
        let bytes = [10, 11, 12, 13, 14, 15, 0, 0, 0, 42, 0, 0];
        assert_eq!(key_value(&key, &[6, 2], &bytes), "0a:0b:0c:0d:0e:0f . 42");
        assert_eq!(key_value(&key, &[], &bytes), "0a:0b:0c:0d:0e:0f . 2752512");
    }
}
