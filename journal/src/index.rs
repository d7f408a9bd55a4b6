//! The journal's in-memory index: head, Merkle frontier, stream → sequences, event id → sequence.
//!
//! It is derived state. Writing it to sled on every append would cost a sled key per entry, which
//! is what frames exist to avoid, so it lives in memory and is snapshotted with rkyv (to
//! `index.snapshot` beside the sled directory) every
//! [`INDEX_SNAPSHOT_EVENTS_MAX`](crate::limits::INDEX_SNAPSHOT_EVENTS_MAX) events and at close.
//! Opening loads the newest valid snapshot and replays only the frames after it; a snapshot that
//! fails its checksum, its validation or the journal's own hash at its sequence is ignored.
//!
//! Memory: 8 bytes per event for the stream lists, 24 per event for the ids up to the last
//! snapshot (a sorted array, searched by bisection), about 40 per event for ids since then.

use std::collections::HashMap;

use rkyv::rancor;
use uuid::Uuid;

use crate::hash::Hash;
use crate::merkle::Frontier;

/// Derived lookup state of a journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Index {
    pub head_seq: u64,
    pub head_hash: Hash,
    pub frontier: Frontier,
    /// Sequence of each event of a stream; version `v` is at `[v - 1]`.
    pub streams: HashMap<Box<str>, Vec<u64>>,
    /// Ids up to the last compaction, sorted by id.
    ids_base: Vec<(u128, u64)>,
    /// Ids since then.
    ids_tail: HashMap<u128, u64>,
}

impl Index {
    /// Current version (event count) of `stream`.
    pub fn version(&self, stream: &str) -> u64 {
        self.streams.get(stream).map_or(0, |v| v.len() as u64)
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
            None => self.streams.entry(stream.into()).or_default(),
        };
        debug_assert_eq!(version, seqs.len() as u64 + 1);
        seqs.push(seq);
        self.ids_tail.insert(id.as_u128(), seq);
        self.frontier.push_event(&hash);
        self.head_seq = seq;
        self.head_hash = hash;
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
    pub fn compact_and_encode(&mut self) -> Result<rkyv::util::AlignedVec, rancor::Error> {
        self.compact();
        let mut streams: Vec<(String, Vec<u64>)> =
            self.streams.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        streams.sort();
        let snap = IndexSnapshot {
            head_seq: self.head_seq,
            head_hash: self.head_hash.0,
            frontier: self.frontier.to_bytes(),
            streams,
            ids: self.ids_base.clone(),
        };
        rkyv::to_bytes::<rancor::Error>(&snap)
    }

    /// Rebuilds an index from snapshot bytes (16-aligned), validating the archive and the
    /// structure.
    pub fn from_snapshot(bytes: &[u8]) -> Option<Index> {
        let snap: IndexSnapshot = rkyv::from_bytes::<IndexSnapshot, rancor::Error>(bytes).ok()?;
        let frontier = Frontier::from_bytes(&snap.frontier)?;
        if frontier.size() != snap.head_seq || snap.ids.len() as u64 != snap.head_seq {
            return None;
        }
        if snap.ids.windows(2).any(|w| w[0].0 >= w[1].0) {
            return None;
        }
        let mut total = 0u64;
        let mut streams = HashMap::with_capacity(snap.streams.len());
        for (name, seqs) in snap.streams {
            total += seqs.len() as u64;
            if seqs.windows(2).any(|w| w[0] >= w[1]) || seqs.last().is_some_and(|&s| s > snap.head_seq) {
                return None;
            }
            streams.insert(name.into_boxed_str(), seqs);
        }
        if total != snap.head_seq {
            return None;
        }
        Some(Index {
            head_seq: snap.head_seq,
            head_hash: Hash(snap.head_hash),
            frontier,
            streams,
            ids_base: snap.ids,
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
    streams: Vec<(String, Vec<u64>)>,
    ids: Vec<(u128, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::event_hash;

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
        let back = Index::from_snapshot(&bytes).unwrap();
        assert_eq!(back, ix);
        for seq in 1..=50u64 {
            assert_eq!(back.seq_of(u128::from(seq).wrapping_mul(0x9e37_79b9_7f4a_7c15)), Some(seq));
        }
        assert_eq!(back.seq_of(12345), None);
        // Byte-level damage is caught by the sealed envelope's checksum (snapshot.rs); here the
        // structural checks must refuse an index whose parts disagree.
        let mut inconsistent = ix.clone();
        inconsistent.head_seq += 1;
        assert_eq!(Index::from_snapshot(&inconsistent.compact_and_encode().unwrap()), None);
        assert_eq!(Index::from_snapshot(&bytes[..bytes.len() - 3]), None);
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
