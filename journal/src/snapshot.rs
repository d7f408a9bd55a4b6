//! The snapshot store: derived state saved beside the journal so an open can skip a replay.
//!
//! Keys are `name || 0x00 || version (u32 BE) || sequence (u64 BE)`; values are *sealed*:
//!
//! ```text
//! b"SNP1" | u32 version | u64 sequence | [32] journal hash at that sequence | [32] blake3(body) | body
//! ```
//!
//! The header is 80 bytes, so a body read into 16-aligned memory stays 16-aligned, as rkyv's
//! validated access needs.
//!
//! A snapshot is trusted only if its version is the reader's, its checksum holds, the journal
//! still has the same event hash at its sequence (so a rewritten or restored journal cannot pair
//! with old derived state), and the body decodes. Anything else is deleted and rebuilt from the
//! journal.

use crate::error::JournalError;
use crate::hash::Hash;
use crate::store::Store;

const MAGIC: &[u8; 4] = b"SNP1";
/// Bytes before the body of a sealed snapshot.
pub const HEADER_BYTES: usize = 4 + 4 + 8 + 32 + 32;

const _: () = assert!(HEADER_BYTES.is_multiple_of(16), "bodies must stay 16-aligned for rkyv");

/// Seals `body` as the state after event `seq` (whose hash is `journal_hash`).
pub fn seal(version: u32, seq: u64, journal_hash: &Hash, body: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(HEADER_BYTES + body.len());
    value.extend_from_slice(MAGIC);
    value.extend_from_slice(&version.to_be_bytes());
    value.extend_from_slice(&seq.to_be_bytes());
    value.extend_from_slice(&journal_hash.0);
    value.extend_from_slice(blake3::hash(body).as_bytes());
    value.extend_from_slice(body);
    value
}

/// Checks a sealed value: magic, version, checksum, and that the journal still has the recorded
/// hash at the recorded sequence. Returns `(seq, body)` or why it must be discarded.
pub fn unseal<'a>(
    value: &'a [u8],
    version: u32,
    hash_at: &dyn Fn(u64) -> Result<Option<Hash>, JournalError>,
) -> Result<Result<(u64, &'a [u8]), Discarded>, JournalError> {
    if value.len() < HEADER_BYTES || &value[..4] != MAGIC {
        return Ok(Err(Discarded::Damaged));
    }
    let found_version = u32::from_be_bytes([value[4], value[5], value[6], value[7]]);
    if found_version != version {
        return Ok(Err(Discarded::WrongVersion { found: found_version }));
    }
    let mut sb = [0u8; 8];
    sb.copy_from_slice(&value[8..16]);
    let seq = u64::from_be_bytes(sb);
    let mut jh = [0u8; 32];
    jh.copy_from_slice(&value[16..48]);
    let body = &value[HEADER_BYTES..];
    if blake3::hash(body).as_bytes()[..] != value[48..80] {
        return Ok(Err(Discarded::Damaged));
    }
    if seq > 0 && hash_at(seq)? != Some(Hash(jh)) {
        return Ok(Err(Discarded::JournalMismatch { seq }));
    }
    Ok(Ok((seq, body)))
}

fn prefix(name: &str) -> Vec<u8> {
    let mut k = name.as_bytes().to_vec();
    k.push(0);
    k
}

fn key(name: &str, version: u32, seq: u64) -> Vec<u8> {
    let mut k = prefix(name);
    k.extend_from_slice(&version.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Saves a snapshot of `name` at `version` taken after applying event `seq` (whose hash is
/// `journal_hash`), then deletes older snapshots of the same name.
pub fn save(
    store: &dyn Store,
    name: &str,
    version: u32,
    seq: u64,
    journal_hash: &Hash,
    body: &[u8],
) -> Result<(), JournalError> {
    let value = seal(version, seq, journal_hash, body);
    let new_key = key(name, version, seq);
    store.put_snapshot(&new_key, &value)?;
    for (k, _) in store.snapshots(&prefix(name))? {
        if k != new_key {
            store.delete_snapshot(&k)?;
        }
    }
    Ok(())
}

/// Why a stored snapshot was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discarded {
    /// Written by another version of the projection.
    WrongVersion {
        /// The stored version.
        found: u32,
    },
    /// Header, checksum or key damaged.
    Damaged,
    /// The journal no longer has the recorded hash at the snapshot's sequence.
    JournalMismatch {
        /// The snapshot's sequence.
        seq: u64,
    },
}

/// What [`load`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The newest snapshot that passed every check, as `(seq, body)`.
    pub found: Option<(u64, Vec<u8>)>,
    /// What was discarded (and deleted) on the way.
    pub discarded: Vec<Discarded>,
}

/// The newest snapshot of `name` at `version` that passes every check. `hash_at(seq)` returns
/// the journal's event hash at `seq`, or `None` if the journal is shorter.
pub fn load(
    store: &dyn Store,
    name: &str,
    version: u32,
    hash_at: &dyn Fn(u64) -> Result<Option<Hash>, JournalError>,
) -> Result<Loaded, JournalError> {
    let p = prefix(name);
    let mut candidates = store.snapshots(&p)?;
    // Newest first: sort by (version, seq) encoded big-endian after the prefix.
    candidates.sort_by(|a, b| b.0.cmp(&a.0));
    let mut discarded = Vec::new();
    let mut found = None;
    for (k, v) in candidates {
        if found.is_some() {
            store.delete_snapshot(&k)?;
            continue;
        }
        let rest = &k[p.len()..];
        let verdict = check(rest, &v, version, hash_at)?;
        match verdict {
            Ok((seq, body)) => found = Some((seq, body.to_vec())),
            Err(why) => {
                discarded.push(why);
                store.delete_snapshot(&k)?;
            }
        }
    }
    Ok(Loaded { found, discarded })
}

type Checked<'a> = Result<(u64, &'a [u8]), Discarded>;

fn check<'a>(
    key_rest: &[u8],
    value: &'a [u8],
    version: u32,
    hash_at: &dyn Fn(u64) -> Result<Option<Hash>, JournalError>,
) -> Result<Checked<'a>, JournalError> {
    if key_rest.len() != 12 {
        return Ok(Err(Discarded::Damaged));
    }
    let key_version = u32::from_be_bytes([key_rest[0], key_rest[1], key_rest[2], key_rest[3]]);
    if key_version != version {
        return Ok(Err(Discarded::WrongVersion { found: key_version }));
    }
    let mut sb = [0u8; 8];
    sb.copy_from_slice(&key_rest[4..12]);
    let key_seq = u64::from_be_bytes(sb);
    Ok(match unseal(value, version, hash_at)? {
        Ok((seq, _)) if seq != key_seq => Err(Discarded::Damaged),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    #[test]
    fn newest_valid_snapshot_wins_and_bad_ones_are_deleted() {
        let store = MemStore::new("t");
        let good = Hash([1; 32]);
        let hash_at = |seq: u64| -> Result<Option<Hash>, JournalError> { Ok((seq <= 10).then_some(good)) };
        save(&store, "p", 2, 5, &good, b"five").unwrap();
        assert_eq!(load(&store, "p", 2, &hash_at).unwrap().found, Some((5, b"five".to_vec())));
        // Wrong version is discarded.
        let Loaded { found: got, discarded: why } = load(&store, "p", 3, &hash_at).unwrap();
        assert_eq!(got, None);
        assert_eq!(why, vec![Discarded::WrongVersion { found: 2 }]);
        // Journal mismatch is discarded.
        save(&store, "p", 3, 11, &good, b"eleven").unwrap();
        let Loaded { found: got, discarded: why } = load(&store, "p", 3, &hash_at).unwrap();
        assert_eq!(got, None);
        assert_eq!(why, vec![Discarded::JournalMismatch { seq: 11 }]);
        // Damaged body is discarded.
        save(&store, "p", 3, 7, &good, b"seven").unwrap();
        let k = key("p", 3, 7);
        let mut v = store.snapshots(&k).unwrap().remove(0).1;
        let last = v.len() - 1;
        v[last] ^= 1;
        store.put_snapshot(&k, &v).unwrap();
        let Loaded { found: got, discarded: why } = load(&store, "p", 3, &hash_at).unwrap();
        assert_eq!(got, None);
        assert_eq!(why, vec![Discarded::Damaged]);
        assert!(store.snapshots(b"p\0").unwrap().is_empty());
    }
}
