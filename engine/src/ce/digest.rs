//! Tagged SHA-256 digests (`sha256:` and lower-case hex), the form every hash in the dispatch
//! protocol takes.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// `sha256:` and the lower-hex SHA-256 of `bytes`.
pub fn sha256_tagged(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Lower-hex SHA-256 of `bytes`, untagged.
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha256_tagged(bytes).split_off(7)
}
