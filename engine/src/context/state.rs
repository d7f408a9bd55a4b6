//! The `context` projection: registered profiles, published summaries and assembled prompts, kept
//! together because every context command needs all three and they share one fold.
//!
//! The state is the ordered list of the context events seen (profile registrations, summary
//! publications and retractions, prompt assemblies, supersessions) with three indexes over it.
//! The snapshot is that list; restoring re-folds it. Context events are few next to knowledge-base
//! events (one per registration, publication or assembly), so the list stays small.

use rkyv::rancor;
use strata_journal::projection::Projection;
use strata_journal::{Hash, Record};

use super::profile::{self, ProfileIndex};
use super::prompts::{self, PromptIndex};
use super::summary::{self, PublishedIndex};
use crate::projections::{StateHasher, aligned};

#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Kept {
    seq: u64,
    stream: String,
    version: u64,
    event_type: String,
    payload: Vec<u8>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Snapshot {
    kept: Vec<Kept>,
}

/// Registered profiles, published summaries and assembled prompts at a journal position.
#[derive(Clone, Debug, Default)]
pub struct ContextState {
    kept: Vec<Kept>,
    /// Every registered profile version.
    pub profiles: ProfileIndex,
    /// The latest published summaries.
    pub published: PublishedIndex,
    /// Every assembled prompt and what superseded it.
    pub prompts: PromptIndex,
}

/// Event types this projection folds.
pub const EVENT_TYPES: [&str; 5] =
    [profile::REGISTERED, summary::PUBLISHED, summary::RETRACTED, prompts::ASSEMBLED, prompts::SUPERSEDED];

impl ContextState {
    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        self.profiles.apply(r)?;
        self.published.apply(r)?;
        self.prompts.apply(r)
    }
}

impl Projection for ContextState {
    fn name(&self) -> &str {
        "context"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        if !EVENT_TYPES.contains(&r.event_type) {
            return Ok(());
        }
        self.fold(r)?;
        self.kept.push(Kept {
            seq: r.seq,
            stream: r.stream.to_owned(),
            version: r.version,
            event_type: r.event_type.to_owned(),
            payload: r.payload.to_vec(),
        });
        Ok(())
    }

    fn state_hash(&self) -> Hash {
        let mut h = StateHasher::new("context/1");
        h.u64(self.kept.len() as u64);
        for k in &self.kept {
            h.u64(k.seq);
            h.str(&k.stream);
            h.u64(k.version);
            h.str(&k.event_type);
            h.bytes(&k.payload);
        }
        h.finish()
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
        let snap = Snapshot { kept: self.kept.clone() };
        rkyv::to_bytes::<rancor::Error>(&snap).map(|b| b.to_vec()).map_err(|e| e.to_string())
    }

    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        let snap: Snapshot = rkyv::from_bytes::<Snapshot, rancor::Error>(&aligned(bytes)).map_err(|e| e.to_string())?;
        self.reset();
        for k in &snap.kept {
            let r = Record {
                seq: k.seq,
                id: uuid::Uuid::nil(),
                stream: &k.stream,
                version: k.version,
                event_type: &k.event_type,
                schema_version: 1,
                recorded_at_ns: 0,
                causation: None,
                correlation: None,
                payload: &k.payload,
                prev: Hash::default(),
            };
            self.fold(&r)?;
        }
        self.kept = snap.kept;
        Ok(())
    }

    fn reset(&mut self) {
        *self = ContextState::default();
    }
}
