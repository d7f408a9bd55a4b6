//! Projections over the whole journal that every strata workspace runs.
//!
//! * [`streams::StreamCatalog`]: every stream with its version, first and last sequence and the
//!   type of its last event; what `strata journal log --streams` shows.
//! * [`event_types::EventTypeCounts`]: events per type and schema version, and per stream
//!   category (the stream id up to its first `/`).
//!
//! * [`crate::kb::graph::Graph`]: the spec graph of the knowledge base.
//!
//! * [`crate::telemetry::state::Telemetry`]: telemetry sessions and rollup groups.
//!
//! * [`crate::workgroup::state::Workgroups`]: workgroups, their tasks and the writes per file.
//!
//! Further domain projections join this list with their issues.

pub mod event_types;
pub mod kept;
pub mod streams;

use strata_journal::Hash;
use strata_journal::projection::Projection;

/// The projections `strata replay` runs, in a fixed order.
pub fn standard_projections() -> Vec<Box<dyn Projection>> {
    vec![
        Box::new(streams::StreamCatalog::default()),
        Box::new(event_types::EventTypeCounts::default()),
        Box::new(crate::kb::graph::Graph::new()),
        Box::new(crate::context::state::ContextState::default()),
        Box::new(crate::knowledge::state::Knowledge::default()),
        Box::new(crate::ce::ledger::Ledger::default()),
        Box::new(crate::promotion::rollout::Rollouts::default()),
        Box::new(crate::telemetry::state::Telemetry::default()),
        Box::new(crate::workgroup::state::Workgroups::default()),
    ]
}

/// A hash map for projection state on the replay path, keyed by names read from the journal
/// (stream ids, categories). Its order is never observed: every output of these maps is sorted.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

/// The Fx hash (rustc's): a multiply and a rotate per word, several times cheaper than SipHash
/// on short keys. Not DoS-resistant, which state folded from one's own journal does not need.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.add(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Incremental blake3 over length-prefixed fields, for canonical state hashes.
pub(crate) struct StateHasher(blake3::Hasher);

impl StateHasher {
    pub(crate) fn new(domain: &str) -> StateHasher {
        let mut h = StateHasher(blake3::Hasher::new());
        h.str(domain);
        h
    }
    pub(crate) fn str(&mut self, s: &str) {
        self.0.update(&(s.len() as u64).to_be_bytes());
        self.0.update(s.as_bytes());
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.0.update(&(b.len() as u64).to_be_bytes());
        self.0.update(b);
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.update(&v.to_be_bytes());
    }
    pub(crate) fn finish(self) -> Hash {
        Hash(*self.0.finalize().as_bytes())
    }
}

/// `bytes` in 16-aligned memory, as rkyv's validated access needs: borrowed when they already are
/// (snapshot bodies as loaded), copied otherwise (sled values are not aligned).
pub(crate) fn aligned(bytes: &[u8]) -> Aligned<'_> {
    if (bytes.as_ptr() as usize).is_multiple_of(16) {
        Aligned::Borrowed(bytes)
    } else {
        let mut v = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
        v.extend_from_slice(bytes);
        Aligned::Copied(v)
    }
}

/// What [`aligned`] returns.
pub(crate) enum Aligned<'a> {
    Borrowed(&'a [u8]),
    Copied(rkyv::util::AlignedVec<16>),
}

impl std::ops::Deref for Aligned<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Aligned::Borrowed(b) => b,
            Aligned::Copied(v) => v,
        }
    }
}
