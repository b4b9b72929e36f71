//! The pieces of a rule's structural fingerprint: which bytes of an extension's payload count
//! ([`user_size`], [`trim_zeros`]) and the word-wise hash that combines them ([`Fp`]).
//!
//! Below the table walk in [`decode`](super), whose `fingerprint` feeds a rule's parts to it; it
//! imports nothing.

/// The bytes of a match's or target's payload that userspace set, without kernel-private state
/// (pointers, running counters) at the end. The kernel zeroes that state when it copies an
/// entry out (`xt_data_to_user`), but leaving it out keeps the fingerprint independent of that.
pub(super) fn user_size(name: &[u8], revision: u8, target: bool) -> Option<usize> {
    Some(match (name, target) {
        (b"limit", false) => 8,
        (b"statistic", false) => 16,
        (b"quota", false) => 16,
        (b"connlimit", false) => 24,
        (b"hashlimit", false) => match revision {
            1 => 48,
            2 => 296,
            3 => 304,
            _ => return None,
        },
        (b"string", false) => 152,
        (b"cgroup", false) => match revision {
            1 => 4104,
            2 => 520,
            _ => return None,
        },
        (b"bpf", false) => 520,
        (b"nfacct", false) => 32,
        (b"rateest", false) => 56,
        (b"CT", true) => match revision {
            0 => 32,
            _ => 64,
        },
        (b"IDLETIMER", true) => match revision {
            0 => 32,
            _ => 40,
        },
        (b"LED", true) | (b"TEE", true) => 32,
        (b"RATEEST", true) => 24,
        _ => return None,
    })
}

/// `d` without its trailing zero bytes. A payload has a fixed size per extension and revision,
/// so trailing zeros (alignment padding, the unused end of a comment or a name) carry no
/// information; skipping them makes hashing a 256-byte `--comment` cheap.
pub(super) fn trim_zeros(d: &[u8]) -> &[u8] {
    let mut end = d.len();
    while end >= 8 && d[end - 8..end] == [0u8; 8] {
        end -= 8;
    }
    while end > 0 && d[end - 1] == 0 {
        end -= 1;
    }
    &d[..end]
}

/// A fast structural hash: per 8-byte word `h = (rotl(h, 23) ^ w) * K`, which is a bijection of
/// both `h` and `w`, so two inputs of the same shape that differ in one word never collide.
pub(super) struct Fp(pub(super) u64);

impl Fp {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    pub(super) fn word(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(23) ^ w).wrapping_mul(Self::K);
    }

    pub(super) fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
        let rem = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rem.len()].copy_from_slice(rem);
        self.word(u64::from_le_bytes(w));
        self.word(b.len() as u64);
    }

    pub(super) fn finish(self) -> u64 {
        // murmur3's fmix64, so that nearby inputs spread over the whole range.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}
