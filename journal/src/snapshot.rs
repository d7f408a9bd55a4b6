//! The snapshot store: derived state saved beside the journal so an open can skip a replay.
//!
//! Keys of snapshots are `name || 0x00 || version (u32 BE) || sequence (u64 BE)`; values are
//! *sealed* manifests:
//!
//! ```text
//! b"SNP1" | u32 version | u64 sequence | [32] journal hash at that sequence | [32] blake3(body) | body
//! b"SNP2" | u32 version | u64 sequence | [32] journal hash at that sequence | [32] blake3(list) | list
//! list = u32 chunk count | per chunk: [32] blake3(chunk), u32 chunk length
//! ```
//!
//! The header is 80 bytes, so a body read into 16-aligned memory stays 16-aligned, as rkyv's
//! validated access needs.
//!
//! A body of up to [`INLINE_BYTES_MAX`] is kept inline (`SNP1`). A larger one is cut into
//! content-defined chunks (a gear rolling hash picks the cut points, so an edit in the middle of a
//! body moves the cuts near it and no others) stored once each under
//! `0x00 "chunk" 0x00 || blake3(chunk)`; its manifest (`SNP2`) lists them. Saving a snapshot
//! writes only the chunks the store does not hold yet, so a body that changed in one place costs
//! a few chunks, not the whole body; after the manifest is written, older manifests of the same
//! projection are deleted and so is every chunk no manifest lists, without reading either.
//!
//! A snapshot is trusted only if its version is the reader's, its checksum holds, every chunk it
//! lists is present with its hash and length, the journal still has the same event hash at its
//! sequence (so a rewritten or restored journal cannot pair with old derived state), and the body
//! decodes. Anything else is deleted and rebuilt from the journal.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use rkyv::util::AlignedVec;

use crate::body::{Body, Segment};
use crate::error::JournalError;
use crate::hash::Hash;
#[cfg(test)]
use crate::store::CHUNK_PREFIX;
use crate::store::Store;

const MAGIC: &[u8; 4] = b"SNP1";
const MAGIC_CHUNKED: &[u8; 4] = b"SNP2";

/// Largest body kept inline in its manifest; larger bodies are chunked.
pub const INLINE_BYTES_MAX: usize = 64 * 1024;
/// Smallest chunk a cut makes (the last chunk of a body may be shorter).
pub const CHUNK_BYTES_MIN: usize = 16 * 1024;
/// Largest chunk: a cut is forced here when the rolling hash found none.
pub const CHUNK_BYTES_MAX: usize = 128 * 1024;
/// Cut when the top bits of the rolling hash are zero: one position in 2^15, so chunks average
/// about `CHUNK_BYTES_MIN + 32 KiB`. With cuts only at multiples of `align` (see [`save`]), the
/// hash needs `log2(align)` fewer zero bits for the same average.
const CUT_BITS: u32 = 15;
/// The largest alignment of cuts a saver may ask for.
pub const CUT_ALIGN_MAX: usize = 16;

const _: () = assert!(CHUNK_BYTES_MIN.is_multiple_of(CUT_ALIGN_MAX) && CHUNK_BYTES_MAX.is_multiple_of(CUT_ALIGN_MAX));
/// Largest chunk count a manifest may list (16 GiB of body at the smallest chunk).
pub const CHUNKS_MAX: usize = 1 << 20;

/// Saves (and the collection of unreferenced chunks that follows each one) run one at a time in
/// a process, so a collection never deletes a chunk a concurrent save has just written.
static SAVING: Mutex<()> = Mutex::new(());
/// Bytes before the body of a sealed snapshot.
pub const HEADER_BYTES: usize = 4 + 4 + 8 + 32 + 32;

const _: () = assert!(HEADER_BYTES.is_multiple_of(16), "bodies must stay 16-aligned for rkyv");

/// Seals `body` as the state after event `seq` (whose hash is `journal_hash`).
pub fn seal(version: u32, seq: u64, journal_hash: &Hash, body: &[u8]) -> Vec<u8> {
    seal_as(MAGIC, version, seq, journal_hash, body)
}

fn seal_as(magic: &[u8; 4], version: u32, seq: u64, journal_hash: &Hash, body: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(HEADER_BYTES + body.len());
    value.extend_from_slice(magic);
    value.extend_from_slice(&version.to_be_bytes());
    value.extend_from_slice(&seq.to_be_bytes());
    value.extend_from_slice(&journal_hash.0);
    value.extend_from_slice(blake3::hash(body).as_bytes());
    value.extend_from_slice(body);
    value
}

/// Checks a sealed value: magic, version, checksum, and that the journal still has the recorded
/// hash at the recorded sequence. Returns `(seq, body)` (for a chunked manifest, its chunk list)
/// or why it must be discarded.
pub fn unseal<'a>(
    value: &'a [u8],
    version: u32,
    hash_at: &dyn Fn(u64) -> Result<Option<Hash>, JournalError>,
) -> Result<Result<(u64, &'a [u8]), Discarded>, JournalError> {
    if value.len() < HEADER_BYTES || (&value[..4] != MAGIC && &value[..4] != MAGIC_CHUNKED) {
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
/// `journal_hash`), then deletes older snapshots of the same name and every chunk no snapshot
/// lists any more. `cut_align` (a power of two up to [`CUT_ALIGN_MAX`]; 1 for none) puts every
/// chunk cut at a multiple of it: a body made of records padded to 16 bytes asks for 16, so each
/// chunk starts 16-aligned and a chunk read where it lies keeps its records aligned for rkyv.
/// (Cuts stay content-defined for such a body, whose edits move what follows by multiples of 16.)
pub fn save(
    store: &dyn Store,
    name: &str,
    version: u32,
    seq: u64,
    journal_hash: &Hash,
    body: &[u8],
    cut_align: usize,
) -> Result<(), JournalError> {
    let _one_at_a_time = SAVING.lock().unwrap_or_else(PoisonError::into_inner);
    let new_key = key(name, version, seq);
    if body.len() <= INLINE_BYTES_MAX {
        store.put_snapshot(&new_key, &seal(version, seq, journal_hash, body))?;
    } else {
        let held: BTreeSet<[u8; 32]> = store.chunk_hashes()?.into_iter().collect();
        let mut list = Vec::new();
        let mut fresh: Vec<([u8; 32], &[u8])> = Vec::new();
        let cuts = chunk_ends(body, cut_align);
        list.extend_from_slice(&(cuts.len() as u32).to_be_bytes());
        let mut start = 0;
        for end in cuts {
            let chunk = &body[start..end];
            let h = *blake3::hash(chunk).as_bytes();
            list.extend_from_slice(&h);
            list.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
            if !held.contains(&h) && !fresh.iter().any(|(fh, _)| *fh == h) {
                fresh.push((h, chunk));
            }
            start = end;
        }
        // Chunks first: a manifest is never stored before what it lists.
        store.put_chunks(&fresh)?;
        store.put_snapshot(&new_key, &seal_as(MAGIC_CHUNKED, version, seq, journal_hash, &list))?;
    }
    let older: Vec<Vec<u8>> = store.snapshot_keys(&prefix(name))?.into_iter().filter(|k| *k != new_key).collect();
    store.delete_snapshots(&older)?;
    collect_chunks(store)
}

/// Deletes every chunk that no stored manifest lists. Reads manifests (small), never chunks.
fn collect_chunks(store: &dyn Store) -> Result<(), JournalError> {
    let chunks = store.chunk_hashes()?;
    if chunks.is_empty() {
        return Ok(());
    }
    let mut listed: BTreeSet<[u8; 32]> = BTreeSet::new();
    for m in store.snapshot_keys(b"")? {
        let Some(v) = store.snapshot(&m)? else { continue };
        if let Some(list) = chunk_list(&v) {
            listed.extend(list.into_iter().map(|(h, _)| h));
        }
    }
    let unlisted: Vec<[u8; 32]> = chunks.into_iter().filter(|h| !listed.contains(h)).collect();
    store.delete_chunks(&unlisted)
}

/// The `(hash, length)` list of a chunked manifest whose list checksum holds; `None` for an
/// inline or damaged one.
fn chunk_list(value: &[u8]) -> Option<Vec<([u8; 32], usize)>> {
    if value.len() < HEADER_BYTES + 4 || &value[..4] != MAGIC_CHUNKED {
        return None;
    }
    let list = &value[HEADER_BYTES..];
    if blake3::hash(list).as_bytes()[..] != value[48..80] {
        return None;
    }
    parse_list(list)
}

/// Parses a chunk list: `u32 count | count × ([32] hash, u32 length)`.
fn parse_list(list: &[u8]) -> Option<Vec<([u8; 32], usize)>> {
    if list.len() < 4 {
        return None;
    }
    let count = u32::from_be_bytes([list[0], list[1], list[2], list[3]]) as usize;
    if count > CHUNKS_MAX || list.len() != 4 + count * 36 {
        return None;
    }
    Some(
        list[4..]
            .chunks_exact(36)
            .map(|c| {
                let mut h = [0u8; 32];
                h.copy_from_slice(&c[..32]);
                (h, u32::from_be_bytes([c[32], c[33], c[34], c[35]]) as usize)
            })
            .collect(),
    )
}

/// The gear table of the rolling hash: fixed pseudo-random words (splitmix64 from a constant),
/// so cut points are the same on every machine and in every version that keeps this table.
const GEAR: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut state: u64 = 0x5354_5241_5441_534e; // "STRATASN"
    let mut i = 0;
    while i < 256 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        t[i] = z ^ (z >> 31);
        i += 1;
    }
    t
};

/// End offsets of the content-defined chunks of `body`: a cut after a position where the gear
/// hash of the 64 bytes before it has its top bits zero ([`CUT_BITS`] less `log2(align)`) and
/// that is a multiple of `align` (clamped to a power of two up to [`CUT_ALIGN_MAX`]), no chunk
/// shorter than [`CHUNK_BYTES_MIN`] (but the last) or longer than [`CHUNK_BYTES_MAX`].
pub fn chunk_ends(body: &[u8], align: usize) -> Vec<usize> {
    let align = if align.is_power_of_two() { align.min(CUT_ALIGN_MAX) } else { 1 };
    let bits = CUT_BITS - align.trailing_zeros();
    let mut ends = Vec::with_capacity(body.len() / (CHUNK_BYTES_MIN * 2) + 1);
    let mut start = 0;
    while start < body.len() {
        let rest = &body[start..body.len().min(start + CHUNK_BYTES_MAX)];
        let mut cut = rest.len();
        if rest.len() > CHUNK_BYTES_MIN {
            let mut h = 0u64;
            for (i, &b) in rest.iter().enumerate().skip(CHUNK_BYTES_MIN - 64) {
                h = (h << 1).wrapping_add(GEAR[usize::from(b)]);
                if i >= CHUNK_BYTES_MIN && (i + 1).is_multiple_of(align) && h >> (64 - bits) == 0 {
                    cut = i + 1;
                    break;
                }
            }
        }
        start += cut;
        ends.push(start);
    }
    ends
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
    /// A chunk the manifest lists is missing or does not match its hash or length (a partial
    /// save, or a damaged chunk).
    Incomplete,
}

/// What [`load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The newest snapshot that passed every check so far, as `(seq, body)`.
    pub found: Option<(u64, Body)>,
    /// The check of its chunks' hashes when that still runs beside the caller's restore (a
    /// large body mapped from chunk files): nothing built from `found` may be used before
    /// [`Pending::holds`] says so.
    pub pending: Pending,
    /// What was discarded (and deleted) on the way.
    pub discarded: Vec<Discarded>,
}

/// Mapped chunks at least this large in all are checked against their hashes on a thread of
/// their own while the caller restores from them; smaller bodies are checked before [`load`]
/// returns. At 116k artifacts the check was 14 % of a `graph impact` process.
pub const CHECK_BESIDE_BYTES_MIN: usize = 1 << 20;

/// The check of a snapshot's chunks against their hashes, perhaps still running.
#[derive(Debug, Default)]
pub struct Pending(Option<PendingCheck>);

#[derive(Debug)]
struct PendingCheck {
    check: std::thread::JoinHandle<bool>,
    /// The manifest's key, deleted when the check fails.
    key: Vec<u8>,
}

impl Pending {
    /// Waits for the check: true when every chunk matched its hash (or nothing was pending).
    /// A snapshot that fails is deleted, as [`load`] deletes one that fails before it returns;
    /// a check that panicked counts as failed.
    pub fn holds(self, store: &dyn Store) -> Result<bool, JournalError> {
        let Some(PendingCheck { check, key }) = self.0 else { return Ok(true) };
        if check.join().unwrap_or(false) {
            return Ok(true);
        }
        store.delete_snapshot(&key)?;
        Ok(false)
    }
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
    let mut loaded = Loaded::default();
    for (k, v) in candidates {
        if loaded.found.is_some() {
            store.delete_snapshot(&k)?;
            continue;
        }
        let rest = &k[p.len()..];
        let verdict = match check(rest, &v, version, hash_at)? {
            Ok((seq, body)) if v.starts_with(MAGIC_CHUNKED) => assemble(store, body).map(|(b, check)| (seq, b, check)),
            Ok((seq, body)) => {
                let mut b = AlignedVec::<16>::with_capacity(body.len());
                b.extend_from_slice(body);
                Ok((seq, Body::from(b), None))
            }
            Err(why) => Err(why),
        };
        match verdict {
            Ok((seq, body, check)) => {
                loaded.found = Some((seq, body));
                loaded.pending = Pending(check.map(|check| PendingCheck { check, key: k.clone() }));
            }
            Err(why) => {
                loaded.discarded.push(why);
                store.delete_snapshot(&k)?;
            }
        }
    }
    Ok(loaded)
}

/// The body a chunk list (already checksummed) names, its chunks kept where the store has them,
/// and each checked against its hash: here, or, for mapped chunks of [`CHECK_BESIDE_BYTES_MIN`]
/// or more, on a thread whose handle is returned.
fn assemble(store: &dyn Store, list: &[u8]) -> Result<(Body, Option<std::thread::JoinHandle<bool>>), Discarded> {
    let matches = |bytes: &[u8], h: &[u8; 32]| blake3::hash(bytes).as_bytes() == h;
    let chunks = parse_list(list).ok_or(Discarded::Damaged)?;
    let mut body = Body::default();
    let mut mapped = Vec::new();
    for (h, len) in chunks {
        // A store that cannot read a chunk is as good as a missing chunk: rebuild.
        let Ok(Some(chunk)) = store.chunk_segment(&h, len) else { return Err(Discarded::Incomplete) };
        if chunk.as_bytes().len() != len {
            return Err(Discarded::Incomplete);
        }
        match &chunk {
            Segment::Mapped(m) => mapped.push((std::sync::Arc::clone(m), h)),
            read => {
                if !matches(read.as_bytes(), &h) {
                    return Err(Discarded::Incomplete);
                }
            }
        }
        body.push(chunk);
    }
    if mapped.iter().map(|(m, _)| m.len()).sum::<usize>() >= CHECK_BESIDE_BYTES_MIN {
        let theirs = mapped.clone();
        let beside = std::thread::Builder::new()
            .name("snapshot-check".into())
            .spawn(move || theirs.iter().all(|(m, h)| matches(m, h)));
        // A thread that cannot be started leaves the check to this one.
        if let Ok(check) = beside {
            return Ok((body, Some(check)));
        }
    }
    if mapped.iter().all(|(m, h)| matches(m, h)) { Ok((body, None)) } else { Err(Discarded::Incomplete) }
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
        save(&store, "p", 2, 5, &good, b"five", 1).unwrap();
        let found = |l: Loaded| l.found.map(|(s, b)| (s, b.to_aligned().to_vec()));
        assert_eq!(found(load(&store, "p", 2, &hash_at).unwrap()), Some((5, b"five".to_vec())));
        // Wrong version is discarded.
        let Loaded { found: got, discarded: why, .. } = load(&store, "p", 3, &hash_at).unwrap();
        assert!(got.is_none());
        assert_eq!(why, vec![Discarded::WrongVersion { found: 2 }]);
        // Journal mismatch is discarded.
        save(&store, "p", 3, 11, &good, b"eleven", 1).unwrap();
        let Loaded { found: got, discarded: why, .. } = load(&store, "p", 3, &hash_at).unwrap();
        assert!(got.is_none());
        assert_eq!(why, vec![Discarded::JournalMismatch { seq: 11 }]);
        // Damaged body is discarded.
        save(&store, "p", 3, 7, &good, b"seven", 1).unwrap();
        let k = key("p", 3, 7);
        let mut v = store.snapshots(&k).unwrap().remove(0).1;
        let last = v.len() - 1;
        v[last] ^= 1;
        store.put_snapshot(&k, &v).unwrap();
        let Loaded { found: got, discarded: why, .. } = load(&store, "p", 3, &hash_at).unwrap();
        assert!(got.is_none());
        assert_eq!(why, vec![Discarded::Damaged]);
        assert!(store.snapshots(b"p\0").unwrap().is_empty());
    }

    /// `n` pseudo-random bytes (xorshift from `seed`).
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn an_edit_in_the_middle_moves_only_the_cuts_near_it_and_chunks_are_shared() {
        // Pseudo-random bytes (not a repeating pattern, which would offer no cut points).
        let body = noise(2_000_000, 1);
        let ends = chunk_ends(&body, 1);
        assert_eq!(*ends.last().unwrap(), body.len());
        let sizes: Vec<usize> = ends.iter().scan(0, |s, &e| Some(e - std::mem::replace(s, e))).collect();
        assert!(sizes[..sizes.len() - 1].iter().all(|&n| (CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&n)));
        let mut edited = body.clone();
        edited.splice(1_000_000..1_000_010, *b"an edit that is longer");
        let cuts_of = |b: &[u8], align: usize| -> BTreeSet<Vec<u8>> {
            let mut start = 0;
            chunk_ends(b, align).into_iter().map(|e| b[std::mem::replace(&mut start, e)..e].to_vec()).collect()
        };
        let (a, b) = (cuts_of(&body, 1), cuts_of(&edited, 1));
        assert!(b.difference(&a).count() <= 2, "{} new chunks", b.difference(&a).count());
        // Cuts at multiples of 16: every chunk starts aligned, and an edit that moves what
        // follows by a multiple of 16 (a body of 16-padded records) still changes only its own.
        let aligned = chunk_ends(&body, 16);
        assert!(aligned.iter().all(|e| e % 16 == 0 || *e == body.len()));
        let mut edited16 = body.clone();
        edited16.splice(1_000_000..1_000_016, *b"an edit of 32 bytes, 16 more....");
        let (a16, b16) = (cuts_of(&body, 16), cuts_of(&edited16, 16));
        assert!(b16.difference(&a16).count() <= 2, "{} new chunks", b16.difference(&a16).count());
        assert!(
            a16.len() * 2 >= a.len() && a.len() * 2 >= a16.len(),
            "about as many chunks: {} and {}",
            a16.len(),
            a.len()
        );

        let store = MemStore::new("t");
        let good = Hash([1; 32]);
        let hash_at = |_: u64| -> Result<Option<Hash>, JournalError> { Ok(Some(good)) };
        save(&store, "big", 1, 1, &good, &body, 1).unwrap();
        let chunks = store.chunk_hashes().unwrap().len();
        save(&store, "big", 1, 2, &good, &edited, 1).unwrap();
        // The old manifest and its own chunks are gone; shared chunks stay.
        assert_eq!(store.snapshot_keys(b"big\0").unwrap().len(), 1);
        assert!(store.chunk_hashes().unwrap().len() <= chunks + 2);
        assert_eq!(store.snapshot_keys(CHUNK_PREFIX).unwrap().len(), store.chunk_hashes().unwrap().len());
        let got = load(&store, "big", 1, &hash_at).unwrap().found.unwrap();
        assert_eq!((got.0, &got.1.to_aligned()[..]), (2, &edited[..]));
    }

    /// A body of mapped chunks large enough to be checked beside the restore: handed out at
    /// once with its check pending; the check holds for an intact body and fails for one with a
    /// damaged chunk, which is then deleted like any snapshot that fails a check.
    #[test]
    fn a_large_mapped_body_is_checked_beside_the_restore_and_a_damaged_chunk_fails_the_check() {
        use crate::store::{Durability, SledStore};
        let tmp = tempfile::tempdir().unwrap();
        let store = SledStore::open(&tmp.path().join("sled"), Durability::Process, 1 << 20).unwrap();
        let body = noise(CHECK_BESIDE_BYTES_MIN + 300_000, 7);
        let good = Hash([3; 32]);
        let hash_at = |_: u64| -> Result<Option<Hash>, JournalError> { Ok(Some(good)) };
        save(&store, "big", 1, 4, &good, &body, 16).unwrap();
        let l = load(&store, "big", 1, &hash_at).unwrap();
        assert!(l.pending.0.is_some(), "the check runs beside the caller");
        assert_eq!(l.found.as_ref().map(|(s, b)| (*s, b.to_aligned().to_vec())), Some((4, body.clone())));
        assert!(l.pending.holds(&store).unwrap());
        assert_eq!(store.snapshot_keys(b"big\0").unwrap().len(), 1);

        // One byte of one chunk changed where the store keeps it: the body is still handed out
        // (its length is right), but the check fails and the manifest is deleted.
        let victim = store.chunk_hashes().unwrap()[1];
        let path = tmp.path().join("snapshot-chunks").join(Hash(victim).to_hex());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let l = load(&store, "big", 1, &hash_at).unwrap();
        assert!(l.found.is_some() && l.discarded.is_empty());
        assert!(!l.pending.holds(&store).unwrap());
        assert!(store.snapshot_keys(b"big\0").unwrap().is_empty());
    }
}
