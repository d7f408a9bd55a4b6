//! Event counts by type and by stream category.

use std::collections::BTreeMap;

use rkyv::rancor;
use strata_journal::projection::Projection;
use strata_journal::{Hash, Record};

use super::{FastMap, StateHasher, aligned};

/// Counts of events by (type, schema version) and by stream category.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct EventTypeCounts {
    /// A short list: event types are bounded by the catalogue, so a scan beats hashing the name.
    by_type: Vec<(Box<str>, u32, u64)>,
    by_category: FastMap<Box<str>, u64>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Snapshot {
    by_type: Vec<(String, u32, u64)>,
    by_category: Vec<(String, u64)>,
}

/// The category of a stream id: everything before the first `/` (the whole id if none).
pub fn category(stream: &str) -> &str {
    stream.split_once('/').map_or(stream, |(c, _)| c)
}

impl EventTypeCounts {
    /// `(type, schema) → count`, sorted.
    pub fn by_type(&self) -> BTreeMap<(String, u32), u64> {
        self.by_type.iter().map(|(t, v, n)| ((t.to_string(), *v), *n)).collect()
    }

    /// `category → count`, sorted.
    pub fn by_category(&self) -> BTreeMap<String, u64> {
        self.by_category.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    /// Total events.
    pub fn total(&self) -> u64 {
        self.by_type.iter().map(|(_, _, n)| n).sum()
    }
}

impl Projection for EventTypeCounts {
    fn name(&self) -> &str {
        "event-types"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        match self.by_type.iter_mut().find(|(t, v, _)| &**t == r.event_type && *v == r.schema_version) {
            Some((_, _, n)) => *n += 1,
            None => self.by_type.push((r.event_type.into(), r.schema_version, 1)),
        }
        let cat = category(r.stream);
        match self.by_category.get_mut(cat) {
            Some(n) => *n += 1,
            None => {
                self.by_category.insert(cat.into(), 1);
            }
        }
        Ok(())
    }

    fn state_hash(&self) -> Hash {
        let mut h = StateHasher::new("event-types/1");
        for ((t, v), n) in self.by_type() {
            h.str(&t);
            h.u64(u64::from(v));
            h.u64(n);
        }
        for (c, n) in self.by_category() {
            h.str(&c);
            h.u64(n);
        }
        h.finish()
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
        let snap = Snapshot {
            by_type: self.by_type().into_iter().map(|((t, v), n)| (t, v, n)).collect(),
            by_category: self.by_category().into_iter().collect(),
        };
        rkyv::to_bytes::<rancor::Error>(&snap).map(|b| b.to_vec()).map_err(|e| e.to_string())
    }

    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        let snap: Snapshot = rkyv::from_bytes::<Snapshot, rancor::Error>(&aligned(bytes)).map_err(|e| e.to_string())?;
        self.by_type = snap.by_type.into_iter().map(|(t, v, n)| (t.into_boxed_str(), v, n)).collect();
        self.by_category = snap.by_category.into_iter().map(|(c, n)| (c.into_boxed_str(), n)).collect();
        Ok(())
    }

    fn reset(&mut self) {
        self.by_type.clear();
        self.by_category.clear();
    }
}
