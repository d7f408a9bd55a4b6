//! RFC 6962 / RFC 9162 Merkle tree over event hashes, with blake3 as the hash.
//!
//! Leaves are `leaf_hash(event hash)`; interior nodes `node_hash(left, right)`; a tree of `n`
//! leaves splits at the largest power of two below `n`. [`Frontier`] keeps the O(log n) perfect
//! subtree roots of the current tree so the writer knows the root after every append without
//! keeping the leaves; proofs are computed from the full leaf list on demand.

use crate::hash::{Hash, empty_root, leaf_hash, node_hash};

/// Largest power of two strictly below `n` (n >= 2).
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    let mut k = 1usize;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// Root of the tree whose leaves (already leaf-hashed) are `leaves`.
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// Audit path for leaf `index` in the tree of `leaves` (RFC 6962 §2.1.1).
pub fn inclusion_proof(index: usize, leaves: &[Hash]) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut out = Vec::new();
    path(index, leaves, &mut out);
    Some(out)
}

fn path(m: usize, d: &[Hash], out: &mut Vec<Hash>) {
    let n = d.len();
    if n <= 1 {
        return;
    }
    let k = split(n);
    if m < k {
        path(m, &d[..k], out);
        out.push(root(&d[k..]));
    } else {
        path(m - k, &d[k..], out);
        out.push(root(&d[..k]));
    }
}

/// Consistency proof that the tree of the first `m` leaves is a prefix of the tree of `leaves`
/// (RFC 6962 §2.1.2). Empty when `m` is 0 or equals the full size.
pub fn consistency_proof(m: usize, leaves: &[Hash]) -> Option<Vec<Hash>> {
    if m > leaves.len() {
        return None;
    }
    let mut out = Vec::new();
    if m > 0 && m < leaves.len() {
        subproof(m, leaves, true, &mut out);
    }
    Some(out)
}

fn subproof(m: usize, d: &[Hash], whole: bool, out: &mut Vec<Hash>) {
    let n = d.len();
    if m == n {
        if !whole {
            out.push(root(d));
        }
        return;
    }
    let k = split(n);
    if m <= k {
        subproof(m, &d[..k], whole, out);
        out.push(root(&d[k..]));
    } else {
        subproof(m - k, &d[k..], false, out);
        out.push(root(&d[..k]));
    }
}

/// Checks an inclusion proof (RFC 9162 §2.1.3.2). `leaf` is the leaf hash (already
/// `leaf_hash`ed).
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, proof: &[Hash], root_hash: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut fnode, mut snode) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(p, &r);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    snode == 0 && r == *root_hash
}

/// Checks a consistency proof between the tree of size `m` with root `old_root` and the tree of
/// size `n` with root `new_root` (RFC 9162 §2.1.4.2).
pub fn verify_consistency(m: u64, n: u64, old_root: &Hash, new_root: &Hash, proof: &[Hash]) -> bool {
    if m > n {
        return false;
    }
    if m == n {
        return proof.is_empty() && old_root == new_root;
    }
    if m == 0 {
        return proof.is_empty();
    }
    if proof.is_empty() {
        return false;
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if m.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let (mut fnode, mut snode) = (m - 1, n - 1);
    while fnode & 1 == 1 {
        fnode >>= 1;
        snode >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    fr == *old_root && sr == *new_root && snode == 0
}

/// The roots of the perfect subtrees that make up a tree of `size` leaves, largest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// `(height, root)` pairs, left to right.
    peaks: Vec<(u32, Hash)>,
}

impl Frontier {
    /// The empty tree.
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends one event hash as a leaf.
    pub fn push_event(&mut self, event: &Hash) {
        self.push_leaf(leaf_hash(event));
    }

    /// Appends one leaf hash.
    pub fn push_leaf(&mut self, leaf: Hash) {
        self.peaks.push((0, leaf));
        while self.peaks.len() >= 2 {
            let (h2, r2) = self.peaks[self.peaks.len() - 1];
            let (h1, r1) = self.peaks[self.peaks.len() - 2];
            if h1 != h2 {
                break;
            }
            self.peaks.truncate(self.peaks.len() - 2);
            self.peaks.push((h1 + 1, node_hash(&r1, &r2)));
        }
        self.size += 1;
    }

    /// The root of the current tree.
    pub fn root(&self) -> Hash {
        let mut it = self.peaks.iter().rev();
        let Some(&(_, mut r)) = it.next() else {
            return empty_root();
        };
        for (_, left) in it {
            r = node_hash(left, &r);
        }
        r
    }

    /// Serialises to `size || (height u32 || root)*`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.peaks.len() * 36);
        out.extend_from_slice(&self.size.to_be_bytes());
        for (h, r) in &self.peaks {
            out.extend_from_slice(&h.to_be_bytes());
            out.extend_from_slice(&r.0);
        }
        out
    }

    /// Parses [`Frontier::to_bytes`] output, checking that the peaks describe `size` exactly.
    pub fn from_bytes(bytes: &[u8]) -> Option<Frontier> {
        if bytes.len() < 8 || !(bytes.len() - 8).is_multiple_of(36) {
            return None;
        }
        let size = u64::from_be_bytes(bytes[..8].try_into().ok()?);
        let mut peaks = Vec::new();
        let mut total: u64 = 0;
        let mut last_height = u32::MAX;
        for chunk in bytes[8..].chunks_exact(36) {
            let h = u32::from_be_bytes(chunk[..4].try_into().ok()?);
            if h >= 64 || h >= last_height {
                return None;
            }
            last_height = h;
            let mut r = [0u8; 32];
            r.copy_from_slice(&chunk[4..]);
            total = total.checked_add(1u64 << h)?;
            peaks.push((h, Hash(r)));
        }
        (total == size).then_some(Frontier { size, peaks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::event_hash;
    use proptest::prelude::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&event_hash(&(i as u64).to_be_bytes()))).collect()
    }

    #[test]
    fn frontier_matches_recursive_root_for_every_size_to_70() {
        let all = leaves(70);
        let mut f = Frontier::new();
        assert_eq!(f.root(), root(&[]));
        for n in 1..=70 {
            f.push_leaf(all[n - 1]);
            assert_eq!(f.root(), root(&all[..n]), "size {n}");
            assert_eq!(Frontier::from_bytes(&f.to_bytes()), Some(f.clone()));
        }
    }

    #[test]
    fn frontier_bytes_reject_inconsistent_sizes() {
        let mut f = Frontier::new();
        for l in leaves(5) {
            f.push_leaf(l);
        }
        let mut b = f.to_bytes();
        b[7] = 6;
        assert_eq!(Frontier::from_bytes(&b), None);
    }

    #[test]
    fn every_inclusion_and_consistency_proof_verifies_to_33() {
        let all = leaves(33);
        for n in 1..=all.len() {
            let r = root(&all[..n]);
            for i in 0..n {
                let p = inclusion_proof(i, &all[..n]).unwrap();
                assert!(verify_inclusion(&all[i], i as u64, n as u64, &p, &r), "incl {i}/{n}");
                assert!(!verify_inclusion(&all[(i + 1) % n.max(2) % n], i as u64, n as u64, &p, &r) || n == 1);
            }
            for m in 0..=n {
                let p = consistency_proof(m, &all[..n]).unwrap();
                let old = root(&all[..m]);
                assert!(verify_consistency(m as u64, n as u64, &old, &r, &p), "cons {m}/{n}");
                if m > 0 && m < n {
                    let wrong = Hash([0xaa; 32]);
                    assert!(!verify_consistency(m as u64, n as u64, &wrong, &r, &p));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn tampered_proofs_fail(n in 2usize..200, i in 0usize..200, flip in 0usize..32) {
            let all = leaves(n);
            let i = i % n;
            let r = root(&all);
            let mut p = inclusion_proof(i, &all).unwrap();
            prop_assume!(!p.is_empty());
            p[0].0[flip] ^= 1;
            prop_assert!(!verify_inclusion(&all[i], i as u64, n as u64, &p, &r));
        }
    }
}
