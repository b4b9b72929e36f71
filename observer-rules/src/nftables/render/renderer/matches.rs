//! The core matches that consume registers: `cmp` (plain, on a field, under a mask), `range`
//! and `lookup`, and how set keys and set references print. A child of `renderer` so that
//! they write to the renderer's state directly.

use super::*;

impl<'a> Renderer<'a> {
    pub(crate) fn cmp(&mut self, a: &Attrs<'_>) {
        let v = self.load(a.reg(1));
        let op = a.u32(2).unwrap_or(CMP_EQ);
        let data = a.value(3).unwrap_or_default();
        match &v {
            Val::Bits { src, mask, xor } if xor.iter().all(|b| *b == 0) => {
                self.cmp_masked(src, mask, op, &data)
            }
            Val::Presence(text) => {
                let present = values::int(&data, Order::Host) != 0;
                let word = if present { "exists" } else { "missing" };
                let ne = if op == CMP_EQ { "" } else { "!= " };
                self.emit_match(format!("{text} {ne}{word}"));
            }
            Val::Payload { base, offset, len } if op == CMP_EQ => {
                match fields::expand(*base, *offset, *len, self.ctx()) {
                    Some(parts) => {
                        for (f, at, n) in parts {
                            let part = data.get(at..at + n).unwrap_or(&[]);
                            self.note_needs(&f);
                            self.cmp_field(f, Some(*base), op, part);
                        }
                    }
                    None => self.cmp_plain(&v, op, &data),
                }
            }
            Val::Bits { .. } => {
                let f = self.field(&v);
                let sym = if op == CMP_EQ { "== " } else { op_prefix(op) };
                self.emit_match(format!("{} {sym}{}", f.text, rhs(&f, &data)));
            }
            _ => self.cmp_plain(&v, op, &data),
        }
    }

    fn cmp_plain(&mut self, v: &Val, op: u32, data: &[u8]) {
        let f = self.field(v);
        let base = match v {
            Val::Payload { base, .. } => Some(*base),
            _ => None,
        };
        self.cmp_field(f, base, op, data);
    }

    /// A field (of payload base `base`, if a payload) compared with a value; a match on a field
    /// that names a layer's protocol is a dependency for what follows.
    fn cmp_field(&mut self, f: Field, base: Option<u32>, op: u32, data: &[u8]) {
        let text = if f.ty.is_flags() && (op == CMP_EQ || op == CMP_NEQ) {
            // A whole flag word compared: nft says `==` (the bare form tests any of the bits)
            // and names only a single flag.
            let n = values::int(data, f.order);
            let value = if n.count_ones() == 1 {
                values::flags(f.ty, n)
            } else {
                format!("0x{n:x}")
            };
            let sym = if op == CMP_EQ { "== " } else { "!= " };
            format!("{} {sym}{value}", f.text)
        } else {
            format!("{} {}{}", f.text, op_prefix(op), rhs(&f, data))
        };
        match f.key_of {
            Some(layer) if op == CMP_EQ => {
                let raw = values::int(data, f.order) as u32;
                let proto = match (layer, f.ty) {
                    (Layer::L3, Ty::EtherType) => match raw {
                        0x0800 => 2,
                        0x86dd => 10,
                        0x0806 => 3,
                        // A VLAN header inside a VLAN header: one deeper.
                        other if f.text == "vlan type" => {
                            (other << 16) | (self.l3.map_or(0, |p| p & 0xff) + 1)
                        }
                        other => other << 16,
                    },
                    _ => raw,
                };
                match layer {
                    Layer::L2 => {}
                    Layer::L3 => self.l3 = Some(proto),
                    Layer::L4 => self.l4 = Some(proto),
                    Layer::IcmpType => self.icmp = Some(proto),
                }
                self.push(text, Some((layer, proto)), base, true);
            }
            _ => self.emit_match(text),
        }
    }

    fn cmp_masked(&mut self, src: &Val, mask: &[u8], op: u32, data: &[u8]) {
        if let Some((f, shift)) = self.bit_field(src, mask) {
            let v = data.iter().fold(0u128, |v, b| (v << 8) | u128::from(*b)) >> shift;
            let bytes = v.to_be_bytes();
            let value = values::format(f.ty, Order::Big, &bytes[16 - f.full_len.max(1)..]);
            self.emit_match(format!("{} {}{value}", f.text, op_prefix(op)));
            return;
        }
        let f = self.field(src);
        if matches!(f.ty, Ty::Ipv4 | Ty::Ipv6) {
            if let Some(plen) = values::prefix_len(mask) {
                let p = values::prefix(f.ty, data, plen);
                self.emit_match(format!("{} {}{p}", f.text, op_prefix(op)));
                return;
            }
        }
        if f.ty == Ty::CtLabel && op == CMP_NEQ && data.iter().all(|b| *b == 0) {
            let label = values::format(f.ty, f.order, mask);
            self.emit_match(format!("{} {label}", f.text));
            return;
        }
        if f.ty.is_flags() && mask.len() == f.full_len && mask.iter().all(|b| *b == 0xff) {
            // The mask covers the whole field: a plain compare.
            self.cmp_plain(src, op, data);
            return;
        }
        if f.ty == Ty::Mark && (op == CMP_EQ || op == CMP_NEQ) {
            let (m, d) = (values::int(mask, f.order), values::int(data, f.order));
            // A mask of leading ones is a prefix: `meta mark 0x12340000/16`.
            let bits = mask.len() as u32 * 8;
            // An empty mask (malformed input) has no prefix: no shift by the whole width.
            let plen = if (1..=32).contains(&bits) {
                (m << (64 - bits)).leading_ones()
            } else {
                0
            };
            let prefix = plen > 0 && plen < bits && m.count_ones() == plen;
            if prefix && d & !m == 0 {
                let value = values::format(f.ty, f.order, data);
                self.emit_match(format!("{} {}{value}/{plen}", f.text, op_prefix(op)));
                return;
            }
        }
        if f.ty.is_flags() {
            let (m, d) = (values::int(mask, f.order), values::int(data, f.order));
            let text = match (d, op) {
                (0, CMP_NEQ) => format!("{} {}", f.text, values::flags(f.ty, m)),
                (0, CMP_EQ) => format!("{} ! {}", f.text, values::flags(f.ty, m)),
                (_, CMP_EQ | CMP_NEQ) if d == m && m.count_ones() == 1 => {
                    let sym = if op == CMP_EQ { "==" } else { "!=" };
                    let name = values::flags(f.ty, m);
                    format!("{} & {name} {sym} {name}", f.text)
                }
                (_, op) => format!(
                    "{} {}{} / {}",
                    f.text,
                    op_prefix(op),
                    values::flags(f.ty, d),
                    values::flags(f.ty, m)
                ),
            };
            self.emit_match(text);
            return;
        }
        if f.text == "ip dscp" || (mask == [0xfc] && f.text == "@nh,8,8" && self.l3() == Some(2)) {
            let d = values::int(data, Order::Big) >> 2;
            let name = values::format(Ty::Dscp, Order::Big, &[d as u8]);
            self.emit_match(format!("ip dscp {}{name}", op_prefix(op)));
            return;
        }
        let sym = if op == CMP_EQ {
            "== ".to_string()
        } else {
            op_prefix(op).to_string()
        };
        let text = format!(
            "{} & {} {sym}{}",
            f.text,
            values::format(f.ty, f.order, mask),
            values::format(f.ty, f.order, data)
        );
        self.emit_match(text);
    }

    pub(crate) fn range(&mut self, v: &Val, neq: bool, from: &[u8], to: &[u8]) {
        if let Val::Bits { src, mask, .. } = v {
            if let Some((f, shift)) = self.bit_field(src, mask) {
                let at = |d: &[u8]| {
                    let v = d.iter().fold(0u128, |v, b| (v << 8) | u128::from(*b)) >> shift;
                    let bytes = v.to_be_bytes();
                    values::format(f.ty, Order::Big, &bytes[16 - f.full_len.max(1)..])
                };
                let ne = if neq { "!= " } else { "" };
                let text = format!("{} {ne}{}-{}", f.text, at(from), at(to));
                self.emit_match(text);
                return;
            }
        }
        let f = self.field(v);
        let ne = if neq { "!= " } else { "" };
        let text = format!(
            "{} {ne}{}-{}",
            f.text,
            values::range_end(f.ty, f.order, from),
            values::range_end(f.ty, f.order, to)
        );
        self.emit_match(text);
    }

    pub(crate) fn lookup(&mut self, a: &Attrs<'_>) {
        let name = a.string(1).unwrap_or_default();
        let inv = a.u32(5).unwrap_or(0) & 1 != 0;
        let loaded = self.load(a.reg(2));
        let mut masked = false;
        let mark = self.needs.len();
        let (key, set) = match &loaded {
            // A header field narrower than its bytes: the set holds the masked bytes, printed
            // as the field's values (`ip dscp { cs1, af41 }`).
            Val::Bits { src, mask, xor } if xor.iter().all(|b| *b == 0) => {
                match self.bit_field(src, mask) {
                    Some((f, shift)) => {
                        let set = self.shifted_set_ref(&name, f.ty, shift);
                        (f.text, set)
                    }
                    None => {
                        masked = true;
                        let (key, types, sizes) = self.key_text(a.reg(2), &name);
                        (key, self.set_ref(&name, &types, &sizes, RULE_SET_MAX))
                    }
                }
            }
            _ => {
                let (key, types, sizes) = self.key_text(a.reg(2), &name);
                (key, self.set_ref(&name, &types, &sizes, RULE_SET_MAX))
            }
        };
        match a.reg(3) {
            None => {
                // A masked key is a binary operation: nft spells out `==`.
                let ne = match (inv, masked) {
                    (true, _) => "!= ",
                    (false, true) => "== ",
                    _ => "",
                };
                self.emit_match(format!("{key} {ne}{set}"));
            }
            Some(REG_VERDICT) => self.emit_match(format!("{key} vmap {set}")),
            reg => {
                // The map's value is consumed by a later statement (nat, set...), which
                // inherits the protocols the key relied on.
                let needs = self.needs.split_off(mark.min(self.needs.len()));
                let v = Val::Map {
                    text: format!("{key} map {set}"),
                    set: name,
                    needs,
                };
                self.store(reg, v);
            }
        }
    }

    /// The key of a set operation starting at register `sreg`: one field, or a concatenation
    /// spanning several registers when the set's key type says so.
    /// Also the parts' types and byte sizes: a part of a type nft gives no size (integers,
    /// raw payloads) is as wide as its load (`vlan id` 2 bytes, `@th,160,128` 16).
    pub(crate) fn key_text(
        &mut self,
        sreg: Option<u32>,
        set: &str,
    ) -> (String, Vec<(Ty, Order)>, Vec<usize>) {
        let set_types = self
            .sets
            .set_info(set)
            .map(|(s, _)| values::concat_types(s.key_type))
            .unwrap_or_default();
        let count = set_types.len().max(1);
        let mut texts = Vec::new();
        let mut types = Vec::new();
        let mut sizes = Vec::new();
        let mut reg = sreg;
        for i in 0..count {
            let v = self.load(reg);
            let f = self.field(&v);
            let ty = match set_types.get(i) {
                Some(Ty::Other) | None => f.ty,
                Some(Ty::Integer) if f.ty == Ty::HexInt => f.ty,
                Some(t) => *t,
            };
            let sizeless = matches!(ty, Ty::Integer | Ty::Hex | Ty::HexInt | Ty::Other);
            let size = match ty.size() {
                Some(_) if sizeless && f.full_len > 0 => f.full_len,
                Some(n) => n,
                None => f.full_len.max(1),
            };
            types.push((ty, f.order));
            sizes.push(size);
            texts.push(f.text);
            reg = reg.map(|r| r.saturating_add(size.div_ceil(4) as u32));
        }
        (texts.join(" . "), types, sizes)
    }

    /// The elements of an anonymous set keyed by a bit field, each shifted down to the field.
    fn shifted_set_ref(&self, name: &str, ty: Ty, shift: u32) -> String {
        match self.sets.set_info(name) {
            Some((set, elems)) if set.is_anonymous() => {
                let shift_key = |k: &[u8]| -> Vec<u8> {
                    let v = (to_u128(k) >> shift).to_be_bytes();
                    v[16 - k.len().min(16)..].to_vec()
                };
                let moved: Vec<Element> = elems
                    .iter()
                    .map(|e| {
                        let mut e = (*e).clone();
                        e.key = shift_key(&e.key);
                        if let Some(m) = e.more.as_mut() {
                            m.key_end = m.key_end.as_deref().map(shift_key);
                        }
                        e
                    })
                    .collect();
                let refs: Vec<&Element> = moved.iter().collect();
                elements_text(set, &refs, &[(ty, Order::Big)], RULE_SET_MAX)
            }
            _ => format!("@{name}"),
        }
    }

    /// `@name`, or the elements of an anonymous set.
    pub(crate) fn set_ref(
        &self,
        name: &str,
        key: &[(Ty, Order)],
        sizes: &[usize],
        max: usize,
    ) -> String {
        match self.sets.set_info(name) {
            Some((set, elems)) if set.is_anonymous() => {
                elements_text_sized(set, &elems, key, sizes, max)
            }
            _ => format!("@{name}"),
        }
    }
}

/// Bytes as one big-endian number (the last 16 bytes).
pub(super) fn to_u128(bytes: &[u8]) -> u128 {
    bytes.iter().fold(0u128, |v, b| (v << 8) | u128::from(*b))
}

/// The mask of a bit operation: flags as `(syn | ack)`, anything else as a value.
pub(super) fn mask_text(ty: Ty, order: Order, mask: &[u8]) -> String {
    if ty.is_flags() {
        let m = values::int(mask, order);
        let names = values::flags_or(ty, m);
        return if names.contains(" | ") {
            format!("({names})")
        } else {
            names
        };
    }
    values::format(ty, order, mask)
}

fn op_prefix(op: u32) -> &'static str {
    match op {
        CMP_EQ => "",
        CMP_NEQ => "!= ",
        2 => "< ",
        CMP_LTE => "<= ",
        4 => "> ",
        CMP_GTE => ">= ",
        _ => "?? ",
    }
}

/// The right-hand side of a comparison with a field: prefixes for short address loads,
/// wildcards for interface names compared without their NUL.
fn rhs(f: &Field, data: &[u8]) -> String {
    if matches!(f.ty, Ty::Ipv4 | Ty::Ipv6) && data.len() < f.full_len {
        return values::prefix(f.ty, data, data.len() as u32 * 8);
    }
    if f.ty == Ty::Ifname && !data.contains(&0) && data.len() < 16 {
        return format!("\"{}*\"", String::from_utf8_lossy(data));
    }
    values::format(f.ty, f.order, data)
}
