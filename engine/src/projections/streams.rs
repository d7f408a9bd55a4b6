//! The stream catalogue projection.

use rkyv::rancor;
use strata_journal::projection::Projection;
use strata_journal::{Hash, Record};

use super::{FastMap, StateHasher, aligned};

/// What the catalogue knows about one stream.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct StreamInfo {
    /// Events in the stream.
    pub version: u64,
    /// Sequence of its first event.
    pub first_seq: u64,
    /// Sequence of its last event.
    pub last_seq: u64,
    /// Type of its last event.
    pub last_type: String,
}

/// Every stream, by id.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct StreamCatalog {
    streams: FastMap<Box<str>, StreamInfo>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Snapshot {
    streams: Vec<(String, StreamInfo)>,
}

impl StreamCatalog {
    /// Streams sorted by id.
    pub fn sorted(&self) -> Vec<(&str, &StreamInfo)> {
        let mut v: Vec<(&str, &StreamInfo)> = self.streams.iter().map(|(k, v)| (k.as_ref(), v)).collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// One stream.
    pub fn get(&self, stream: &str) -> Option<&StreamInfo> {
        self.streams.get(stream)
    }

    /// Number of streams.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// True when no event was applied.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

impl Projection for StreamCatalog {
    fn name(&self) -> &str {
        "streams"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        match self.streams.get_mut(r.stream) {
            Some(info) => {
                if r.version != info.version + 1 {
                    return Err(format!("stream {} jumps from version {} to {}", r.stream, info.version, r.version));
                }
                info.version = r.version;
                info.last_seq = r.seq;
                if info.last_type != r.event_type {
                    r.event_type.clone_into(&mut info.last_type);
                }
            }
            None => {
                if r.version != 1 {
                    return Err(format!("stream {} starts at version {}", r.stream, r.version));
                }
                self.streams.insert(
                    r.stream.into(),
                    StreamInfo { version: 1, first_seq: r.seq, last_seq: r.seq, last_type: r.event_type.to_owned() },
                );
            }
        }
        Ok(())
    }

    fn state_hash(&self) -> Hash {
        let mut h = StateHasher::new("streams/1");
        for (name, info) in self.sorted() {
            h.str(name);
            h.u64(info.version);
            h.u64(info.first_seq);
            h.u64(info.last_seq);
            h.str(&info.last_type);
        }
        h.finish()
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
        let snap = Snapshot { streams: self.sorted().into_iter().map(|(k, v)| (k.to_owned(), v.clone())).collect() };
        rkyv::to_bytes::<rancor::Error>(&snap).map(|b| b.to_vec()).map_err(|e| e.to_string())
    }

    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        let snap: Snapshot = rkyv::from_bytes::<Snapshot, rancor::Error>(&aligned(bytes)).map_err(|e| e.to_string())?;
        self.streams = snap.streams.into_iter().map(|(k, v)| (k.into_boxed_str(), v)).collect();
        Ok(())
    }

    fn reset(&mut self) {
        self.streams.clear();
    }
}
