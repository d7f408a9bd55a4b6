//! The journal's hash type and the three hash constructions it uses.
//!
//! * event hash: `blake3(record bytes)`, over the exact stored bytes, never a re-serialisation;
//! * Merkle leaf: `blake3(0x00 || event hash)`;
//! * Merkle node: `blake3(0x01 || left || right)`.
//!
//! The leaf/node prefixes are RFC 6962's domain separation; the hash function is blake3, so tools
//! that assume SHA-256 roots will not recompute ours (the checkpoint note format still verifies).

use std::fmt;

/// A 32-byte blake3 digest.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The all-zero hash: the `prev` of the first event.
    pub const ZERO: Hash = Hash([0; 32]);

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
        s
    }

    /// Parses 64 hex characters (either case).
    pub fn from_hex(s: &str) -> Option<Hash> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
        }
        Some(Hash(out))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Hash of one stored record.
pub fn event_hash(record: &[u8]) -> Hash {
    Hash(*blake3::hash(record).as_bytes())
}

/// Merkle leaf hash of an event hash.
pub fn leaf_hash(event: &Hash) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(&[0x00]);
    h.update(&event.0);
    Hash(*h.finalize().as_bytes())
}

/// Merkle interior node hash.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(&[0x01]);
    h.update(&left.0);
    h.update(&right.0);
    Hash(*h.finalize().as_bytes())
}

/// Root of the empty tree: the hash of the empty string (RFC 6962 §2.1).
pub fn empty_root() -> Hash {
    Hash(*blake3::hash(b"").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_bad_input() {
        let h = event_hash(b"strata");
        assert_eq!(Hash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(Hash::from_hex(&h.to_hex().to_uppercase()), Some(h));
        assert_eq!(Hash::from_hex("zz"), None);
        assert_eq!(Hash::from_hex(&"g".repeat(64)), None);
    }

    #[test]
    fn golden_vectors_are_pinned() {
        // Changing any of these breaks every existing journal: they are part of the format.
        assert_eq!(event_hash(b"").to_hex(), "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
        let leaf = leaf_hash(&Hash::ZERO);
        let node = node_hash(&leaf, &leaf);
        assert_eq!(leaf.to_hex(), "232b17a92a13d46fdeeba07519406dcdad6d67b7399159364b5e26af0ab95bcf");
        assert_eq!(node.to_hex(), "ba69e024fb3dc34ddbc9ccb12d6984c22bc61e85e0d95f2164cc74a4085fc080");
        assert_eq!(empty_root(), event_hash(b""));
    }
}
