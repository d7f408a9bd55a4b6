//! A projection state that is a fold over a subset of the journal can snapshot that subset
//! itself: the ordered list of the events it folded. Restoring re-folds the list, so a restore
//! costs as much as folding those events again; what it saves is reading the rest of the journal.
//! Used by six projections (context, knowledge, the dispatch ledger, workgroups, telemetry,
//! rollouts); for one whose events grow with use (knowledge keeps every serve) the snapshot grows
//! with them.

use rkyv::rancor;
use strata_journal::{Hash, Record};

use super::{StateHasher, aligned};

#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Kept {
    seq: u64,
    stream: String,
    version: u64,
    event_type: String,
    recorded_at_ns: i64,
    payload: Vec<u8>,
}

impl Kept {
    fn record(&self) -> Record<'_> {
        Record {
            seq: self.seq,
            id: uuid::Uuid::nil(),
            stream: &self.stream,
            version: self.version,
            event_type: &self.event_type,
            schema_version: 1,
            recorded_at_ns: self.recorded_at_ns,
            causation: None,
            correlation: None,
            payload: &self.payload,
            prev: Hash::default(),
        }
    }
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Snapshot {
    kept: Vec<Kept>,
}

/// The events a projection folded, in journal order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventLog {
    kept: Vec<Kept>,
}

impl EventLog {
    /// Remembers `r`.
    pub fn push(&mut self, r: &Record<'_>) {
        self.kept.push(Kept {
            seq: r.seq,
            stream: r.stream.to_owned(),
            version: r.version,
            event_type: r.event_type.to_owned(),
            recorded_at_ns: r.recorded_at_ns,
            payload: r.payload.to_vec(),
        });
    }

    /// Number of events kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether nothing was kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The kept event recorded at journal sequence `seq`, if one was (the event id is not kept).
    pub fn record(&self, seq: u64) -> Option<Record<'_>> {
        let i = self.kept.binary_search_by_key(&seq, |k| k.seq).ok()?;
        Some(self.kept[i].record())
    }

    /// A canonical hash of the list under `domain`.
    pub fn state_hash(&self, domain: &str) -> Hash {
        let mut h = StateHasher::new(domain);
        h.u64(self.kept.len() as u64);
        for k in &self.kept {
            h.u64(k.seq);
            h.str(&k.stream);
            h.u64(k.version);
            h.str(&k.event_type);
            h.u64(k.recorded_at_ns as u64);
            h.bytes(&k.payload);
        }
        h.finish()
    }

    /// rkyv bytes of the list.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let snap = Snapshot { kept: self.kept.clone() };
        rkyv::to_bytes::<rancor::Error>(&snap).map(|b| b.to_vec()).map_err(|e| e.to_string())
    }

    /// Decodes a list and re-folds every event through `fold`, in order.
    pub fn restore(bytes: &[u8], mut fold: impl FnMut(&Record<'_>) -> Result<(), String>) -> Result<EventLog, String> {
        let snap: Snapshot = rkyv::from_bytes::<Snapshot, rancor::Error>(&aligned(bytes)).map_err(|e| e.to_string())?;
        for k in &snap.kept {
            fold(&k.record())?;
        }
        Ok(EventLog { kept: snap.kept })
    }
}

/// Implements [`strata_journal::projection::Projection`] for a state that folds the event types
/// `$types` with its own `fn fold(&mut self, &Record) -> Result<(), String>` and keeps them in a
/// field `kept: EventLog`; snapshots are that log, re-folded on restore.
macro_rules! kept_projection {
    ($ty:ty, $name:literal, $version:literal, $types:expr) => {
        impl strata_journal::projection::Projection for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn version(&self) -> u32 {
                $version
            }

            fn apply(&mut self, r: &strata_journal::Record<'_>) -> Result<(), String> {
                if !$types.contains(&r.event_type) {
                    return Ok(());
                }
                self.fold(r)?;
                self.kept.push(r);
                Ok(())
            }

            fn state_hash(&self) -> strata_journal::Hash {
                self.kept.state_hash(concat!($name, "/", $version))
            }

            fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
                self.kept.encode()
            }

            fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
                let mut fresh = <$ty>::default();
                let kept = $crate::projections::kept::EventLog::restore(bytes, |r| fresh.fold(r))?;
                *self = Self { kept, ..fresh };
                Ok(())
            }

            fn reset(&mut self) {
                *self = <$ty>::default();
            }

            fn event_types(&self) -> Option<&[&'static str]> {
                Some(&$types)
            }
        }
    };
}
pub(crate) use kept_projection;
