//! The journal's in-memory index: head, Merkle frontier, stream → sequences, event id → sequence.
//!
//! It is derived state. Writing it to sled on every append would cost a sled key per entry, which
//! is what frames exist to avoid, so it lives in memory (about 8 bytes per event for the stream
//! lists and about 32 for the id map) and is snapshotted with rkyv every
//! [`INDEX_SNAPSHOT_EVENTS_MAX`](crate::limits::INDEX_SNAPSHOT_EVENTS_MAX) events and at close.
//! Opening loads the newest valid snapshot and replays only the frames after it; a snapshot that
//! fails validation or does not match the journal's own hash at its sequence is ignored.

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
    pub ids: HashMap<u128, u64>,
}

impl Index {
    /// Current version (event count) of `stream`.
    pub fn version(&self, stream: &str) -> u64 {
        self.streams.get(stream).map_or(0, |v| v.len() as u64)
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
        self.ids.insert(id.as_u128(), seq);
        self.frontier.push_event(&hash);
        self.head_seq = seq;
        self.head_hash = hash;
    }

    pub fn to_snapshot(&self) -> Result<Vec<u8>, rancor::Error> {
        let mut streams: Vec<(String, Vec<u64>)> =
            self.streams.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        streams.sort();
        let mut ids: Vec<(u128, u64)> = self.ids.iter().map(|(k, v)| (*k, *v)).collect();
        ids.sort_unstable();
        let snap = IndexSnapshot {
            head_seq: self.head_seq,
            head_hash: self.head_hash.0,
            frontier: self.frontier.to_bytes(),
            streams,
            ids,
        };
        Ok(rkyv::to_bytes::<rancor::Error>(&snap)?.to_vec())
    }

    /// Rebuilds an index from snapshot bytes, validating the archive and the structure.
    pub fn from_snapshot(bytes: &[u8]) -> Option<Index> {
        let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        let snap: IndexSnapshot = rkyv::from_bytes::<IndexSnapshot, rancor::Error>(&aligned).ok()?;
        let frontier = Frontier::from_bytes(&snap.frontier)?;
        if frontier.size() != snap.head_seq || snap.ids.len() as u64 != snap.head_seq {
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
            ids: snap.ids.into_iter().collect(),
        })
    }
}

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

    #[test]
    fn snapshot_round_trips_and_rejects_damage() {
        let mut ix = Index::default();
        for seq in 1..=50u64 {
            let stream = format!("s/{}", seq % 4);
            let version = ix.version(&stream) + 1;
            ix.push(seq, Uuid::from_u128(u128::from(seq) * 7), &stream, version, event_hash(&seq.to_be_bytes()));
        }
        let bytes = ix.to_snapshot().unwrap();
        assert_eq!(Index::from_snapshot(&bytes).as_ref(), Some(&ix));
        // Byte-level damage is caught by the snapshot envelope's checksum (snapshot.rs); here the
        // structural checks must refuse an index whose parts disagree.
        let mut inconsistent = ix.clone();
        inconsistent.head_seq += 1;
        assert_eq!(Index::from_snapshot(&inconsistent.to_snapshot().unwrap()), None);
        assert_eq!(Index::from_snapshot(&bytes[..bytes.len() - 3]), None);
    }
}
