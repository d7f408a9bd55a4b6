//! The journal's in-memory index: head, Merkle frontier, stream → sequences, event id → sequence.
//!
//! It is derived state. Writing it to sled on every append would cost a sled key per entry, which
//! is what frames exist to avoid, so it lives in memory and is snapshotted with rkyv (to
//! `index.snapshot` beside the sled directory) every
//! [`INDEX_SNAPSHOT_EVENTS_MAX`](crate::limits::INDEX_SNAPSHOT_EVENTS_MAX) events and at close.
//! Opening loads the newest valid snapshot and replays only the frames after it; a snapshot that
//! fails its checksum, its validation or the journal's own hash at its sequence is ignored.
//!
//! The streams of a loaded snapshot are read where they lie in its bytes (a sorted table,
//! searched by bisection), not copied into a map: opening a journal of 100k streams to read a
//! few of them allocates nothing per stream. A stream appended to since is copied into a map
//! that shadows its entry.
//!
//! Memory: 8 bytes per event for the stream lists, 24 per event for the ids up to the last
//! snapshot (a sorted array, searched by bisection), about 40 per event for ids since then.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use rkyv::rancor;
use rkyv::util::AlignedVec;
use uuid::Uuid;

use crate::hash::Hash;
use crate::merkle::Frontier;

/// Derived lookup state of a journal.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    pub head_seq: u64,
    pub head_hash: Hash,
    pub frontier: Frontier,
    /// The streams of the snapshot this index was loaded from, read in place.
    base: Arc<BaseStreams>,
    /// Streams appended to since: the whole sequence list of each, shadowing its base entry.
    /// Version `v` of a stream is at `[v - 1]`.
    streams: HashMap<Box<str>, Vec<u64>>,
    /// Streams in `streams` that the base does not hold.
    new_streams: usize,
    /// Ids up to the last compaction, sorted by id.
    ids_base: Vec<(u128, u64)>,
    /// Ids since then.
    ids_tail: HashMap<u128, u64>,
}

/// The stream table of a loaded snapshot: its bytes, and per stream (in name order) where its
/// name and its sequence numbers (little-endian u64) lie in them.
#[derive(Default)]
struct BaseStreams {
    bytes: AlignedVec<16>,
    entries: Vec<(Range<usize>, Range<usize>)>,
}

impl std::fmt::Debug for BaseStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BaseStreams({} streams in {} bytes)", self.entries.len(), self.bytes.len())
    }
}

impl BaseStreams {
    fn name(&self, i: usize) -> &[u8] {
        &self.bytes[self.entries[i].0.clone()]
    }

    fn find(&self, stream: &str) -> Option<usize> {
        self.entries.binary_search_by(|(name, _)| self.bytes[name.clone()].cmp(stream.as_bytes())).ok()
    }

    fn len_of(&self, i: usize) -> usize {
        self.entries[i].1.len() / 8
    }

    fn seq(&self, i: usize, at: usize) -> u64 {
        let o = self.entries[i].1.start + 8 * at;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[o..o + 8]);
        u64::from_le_bytes(b)
    }

    fn seqs(&self, i: usize) -> impl Iterator<Item = u64> + '_ {
        (0..self.len_of(i)).map(move |at| self.seq(i, at))
    }
}

impl PartialEq for Index {
    /// Equal when they hold the same events: how the streams and ids are stored is not compared.
    fn eq(&self, other: &Self) -> bool {
        let ids = |ix: &Index| {
            let mut all: Vec<(u128, u64)> = ix.ids_base.clone();
            all.extend(ix.ids_tail.iter().map(|(k, v)| (*k, *v)));
            all.sort_unstable();
            all
        };
        self.head_seq == other.head_seq
            && self.head_hash == other.head_hash
            && self.frontier == other.frontier
            && self.all_streams() == other.all_streams()
            && ids(self) == ids(other)
    }
}

impl Eq for Index {}

impl Index {
    /// Current version (event count) of `stream`.
    pub fn version(&self, stream: &str) -> u64 {
        if let Some(v) = self.streams.get(stream) {
            return v.len() as u64;
        }
        self.base.find(stream).map_or(0, |i| self.base.len_of(i) as u64)
    }

    /// Number of streams.
    pub fn stream_count(&self) -> usize {
        self.base.entries.len() + self.new_streams
    }

    /// Up to `limit` sequences of `stream` from version `from_version` (1-based) on.
    pub fn stream_seqs(&self, stream: &str, from_version: u64, limit: usize) -> Vec<u64> {
        let start = usize::try_from(from_version.max(1) - 1).unwrap_or(usize::MAX);
        if let Some(all) = self.streams.get(stream) {
            return all.iter().skip(start).take(limit).copied().collect();
        }
        match self.base.find(stream) {
            Some(i) => self.base.seqs(i).skip(start).take(limit).collect(),
            None => Vec::new(),
        }
    }

    /// Sequence of the event with `id`, if stored.
    pub fn seq_of(&self, id: u128) -> Option<u64> {
        if let Some(&s) = self.ids_tail.get(&id) {
            return Some(s);
        }
        self.ids_base.binary_search_by_key(&id, |e| e.0).ok().map(|i| self.ids_base[i].1)
    }

    /// Adds one durable event. The caller guarantees contiguity (the writer assigned it, or open
    /// checked it).
    pub fn push(&mut self, seq: u64, id: Uuid, stream: &str, version: u64, hash: Hash) {
        debug_assert_eq!(seq, self.head_seq + 1);
        let seqs = match self.streams.get_mut(stream) {
            Some(s) => s,
            None => {
                let earlier: Vec<u64> = match self.base.find(stream) {
                    Some(i) => self.base.seqs(i).collect(),
                    None => {
                        self.new_streams += 1;
                        Vec::new()
                    }
                };
                self.streams.entry(stream.into()).or_insert(earlier)
            }
        };
        debug_assert_eq!(version, seqs.len() as u64 + 1);
        seqs.push(seq);
        self.ids_tail.insert(id.as_u128(), seq);
        self.frontier.push_event(&hash);
        self.head_seq = seq;
        self.head_hash = hash;
    }

    /// Every stream with its sequences, in name order (base entries shadowed by `streams`).
    fn all_streams(&self) -> BTreeMap<String, Vec<u64>> {
        let mut all: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for i in 0..self.base.entries.len() {
            let name = String::from_utf8_lossy(self.base.name(i)).into_owned();
            all.insert(name, self.base.seqs(i).collect());
        }
        for (k, v) in &self.streams {
            all.insert(k.to_string(), v.clone());
        }
        all
    }

    /// Moves the tail ids into the sorted base.
    fn compact(&mut self) {
        if self.ids_tail.is_empty() {
            return;
        }
        let mut tail: Vec<(u128, u64)> = self.ids_tail.drain().collect();
        tail.sort_unstable();
        let base = std::mem::take(&mut self.ids_base);
        let mut merged = Vec::with_capacity(base.len() + tail.len());
        let (mut a, mut b) = (base.into_iter().peekable(), tail.into_iter().peekable());
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.0 <= y.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_a { a.next() } else { b.next() };
            merged.extend(next);
        }
        self.ids_base = merged;
        self.ids_tail.shrink_to_fit();
    }

    /// rkyv bytes of the whole index (compacting the ids first).
    pub fn compact_and_encode(&mut self) -> Result<AlignedVec, rancor::Error> {
        self.compact();
        let streams: Vec<(String, Vec<u64>)> = self.all_streams().into_iter().collect();
        let snap = IndexSnapshot {
            head_seq: self.head_seq,
            head_hash: self.head_hash.0,
            frontier: self.frontier.to_bytes(),
            streams,
            ids: self.ids_base.clone(),
        };
        rkyv::to_bytes::<rancor::Error>(&snap)
    }

    /// Rebuilds an index from the snapshot that lies at `body` in `bytes` (16-aligned there),
    /// validating the archive and the structure. The stream table stays in `bytes`.
    pub fn from_snapshot(bytes: AlignedVec<16>, body: Range<usize>) -> Option<Index> {
        let b = bytes.get(body.clone())?;
        let snap = rkyv::access::<ArchivedIndexSnapshot, rancor::Error>(b).ok()?;
        let head_seq = snap.head_seq.to_native();
        let frontier = Frontier::from_bytes(&snap.frontier)?;
        if frontier.size() != head_seq || snap.ids.len() as u64 != head_seq {
            return None;
        }
        let ids_base: Vec<(u128, u64)> = snap.ids.iter().map(|e| (e.0.to_native(), e.1.to_native())).collect();
        if ids_base.windows(2).any(|w| w[0].0 >= w[1].0) {
            return None;
        }
        // Where a slice of the archive lies in `bytes` (it lies in `b`, which lies in `bytes`).
        let at = |p: *const u8, len: usize| {
            let start = body.start + (p as usize - b.as_ptr() as usize);
            start..start + len
        };
        let mut total = 0u64;
        let mut entries = Vec::with_capacity(snap.streams.len());
        let mut last: Option<&str> = None;
        for e in snap.streams.iter() {
            let (name, seqs) = (e.0.as_str(), &e.1);
            // Bisection needs the names strictly in order.
            if last.is_some_and(|l| l >= name) {
                return None;
            }
            last = Some(name);
            total += seqs.len() as u64;
            if seqs.windows(2).any(|w| w[0] >= w[1]) || seqs.last().is_some_and(|s| s.to_native() > head_seq) {
                return None;
            }
            entries.push((at(name.as_ptr(), name.len()), at(seqs.as_ptr().cast(), seqs.len() * 8)));
        }
        if total != head_seq {
            return None;
        }
        let head_hash = Hash(snap.head_hash);
        Some(Index {
            head_seq,
            head_hash,
            frontier,
            base: Arc::new(BaseStreams { bytes, entries }),
            streams: HashMap::new(),
            new_streams: 0,
            ids_base,
            ids_tail: HashMap::new(),
        })
    }
}

/// The archived form.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct IndexSnapshot {
    head_seq: u64,
    head_hash: [u8; 32],
    frontier: Vec<u8>,
    /// In name order, each name once.
    streams: Vec<(String, Vec<u64>)>,
    ids: Vec<(u128, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::event_hash;

    /// An index from snapshot bytes placed 16 bytes into a buffer, as a sealed snapshot places
    /// its body after its header.
    fn load(body: &[u8]) -> Option<Index> {
        let mut bytes = AlignedVec::<16>::new();
        bytes.extend_from_slice(&[0u8; 16]);
        bytes.extend_from_slice(body);
        Index::from_snapshot(bytes, 16..16 + body.len())
    }

    fn sample(n: u64) -> Index {
        let mut ix = Index::default();
        for seq in 1..=n {
            let stream = format!("s/{}", seq % 4);
            let version = ix.version(&stream) + 1;
            ix.push(
                seq,
                Uuid::from_u128(u128::from(seq).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                &stream,
                version,
                event_hash(&seq.to_be_bytes()),
            );
        }
        ix
    }

    #[test]
    fn snapshot_round_trips_and_ids_stay_findable() {
        let mut ix = sample(50);
        let bytes = ix.compact_and_encode().unwrap();
        let back = load(&bytes).unwrap();
        assert_eq!(back, ix);
        for seq in 1..=50u64 {
            assert_eq!(back.seq_of(u128::from(seq).wrapping_mul(0x9e37_79b9_7f4a_7c15)), Some(seq));
        }
        assert_eq!(back.seq_of(12345), None);
        // Byte-level damage is caught by the sealed envelope's checksum (snapshot.rs); here the
        // structural checks must refuse an index whose parts disagree.
        let mut inconsistent = ix.clone();
        inconsistent.head_seq += 1;
        assert_eq!(load(&inconsistent.compact_and_encode().unwrap()), None);
        assert_eq!(load(&bytes[..bytes.len() - 3]), None);
    }

    #[test]
    fn a_loaded_index_reads_its_streams_in_place_and_shadows_those_appended_to() {
        let mut whole = sample(40);
        let mut loaded = load(&whole.clone().compact_and_encode().unwrap()).unwrap();
        assert_eq!(loaded.streams.len(), 0, "nothing is copied out of the snapshot on load");
        assert_eq!(loaded.stream_count(), 4);
        for seq in 41..=48u64 {
            // Two base streams grow and a new one appears.
            let stream = if seq % 3 == 0 { "s/new".to_owned() } else { format!("s/{}", seq % 2) };
            let id = Uuid::from_u128(u128::from(seq) << 64);
            for ix in [&mut whole, &mut loaded] {
                let version = ix.version(&stream) + 1;
                ix.push(seq, id, &stream, version, event_hash(&seq.to_be_bytes()));
            }
        }
        assert_eq!(loaded, whole);
        assert_eq!(loaded.stream_count(), 5);
        assert_eq!(loaded.streams.len(), 3, "only the streams appended to are copied");
        for stream in ["s/0", "s/1", "s/2", "s/3", "s/new", "s/none"] {
            assert_eq!(loaded.version(stream), whole.version(stream), "{stream}");
            for (from, limit) in [(1, usize::MAX), (3, 2), (0, 1), (99, 5)] {
                assert_eq!(loaded.stream_seqs(stream, from, limit), whole.stream_seqs(stream, from, limit), "{stream}");
            }
        }
        // A snapshot of the loaded index is the snapshot of the whole one.
        assert_eq!(loaded.compact_and_encode().unwrap().as_slice(), whole.compact_and_encode().unwrap().as_slice());
    }

    #[test]
    fn a_snapshot_whose_streams_are_out_of_order_is_refused() {
        let ix = sample(8);
        let mut streams: Vec<(String, Vec<u64>)> = ix.all_streams().into_iter().collect();
        streams.swap(0, 1);
        let snap = IndexSnapshot {
            head_seq: ix.head_seq,
            head_hash: ix.head_hash.0,
            frontier: ix.frontier.to_bytes(),
            streams,
            ids: {
                let mut v: Vec<(u128, u64)> = ix.ids_tail.iter().map(|(k, v)| (*k, *v)).collect();
                v.sort_unstable();
                v
            },
        };
        let bytes = rkyv::to_bytes::<rancor::Error>(&snap).unwrap();
        assert_eq!(load(&bytes), None);
        let mut fixed = ix.clone();
        assert!(load(&fixed.compact_and_encode().unwrap()).is_some());
    }

    #[test]
    fn compaction_merges_tail_into_base() {
        let mut ix = sample(30);
        ix.compact();
        let mut more = ix.clone();
        for seq in 31..=60u64 {
            more.push(seq, Uuid::from_u128(u128::from(seq) * 7), "s/x", seq - 30, event_hash(&seq.to_be_bytes()));
        }
        more.compact();
        assert!(more.ids_base.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(more.ids_base.len(), 60);
        assert_eq!(more.seq_of(31 * 7), Some(31));
    }
}
