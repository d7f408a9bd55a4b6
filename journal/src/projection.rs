//! Projections: state folded from the journal, with snapshots so startup replays only the tail.
//!
//! A [`Projection`] is a pure fold over records. The [`Projections`] registry runs a set of them:
//! [`Projections::catch_up`] loads each one's newest valid snapshot (see [`crate::snapshot`] for
//! what "valid" means) and replays only the events after it; [`Projections::rebuild`] replays
//! from sequence 1 and ignores snapshots. Both end with every projection at the journal head and
//! report each one's state hash, so incremental state, snapshot + tail and a full replay can be
//! compared byte for byte.

use std::collections::BTreeMap;

use crate::body::Body;
use crate::error::JournalError;
use crate::hash::Hash;
use crate::journal::Journal;
use crate::record::Record;
use crate::snapshot::{self, Discarded};

/// A projection failed to apply an event: the journal holds something this code cannot fold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[STRATA-E0501] projection {projection} cannot apply event {seq} ({event_type}): {detail}")]
pub struct ProjectionError {
    /// Projection name.
    pub projection: String,
    /// Event sequence.
    pub seq: u64,
    /// Event type.
    pub event_type: String,
    /// Why.
    pub detail: String,
}

/// State derived from the journal by folding events in order.
pub trait Projection: Send {
    /// Stable name; also the snapshot key.
    fn name(&self) -> &str;
    /// Bump when the state layout or the fold changes: older snapshots are then discarded.
    fn version(&self) -> u32;
    /// Folds one event. Must be deterministic and must ignore event types it does not know.
    fn apply(&mut self, record: &Record<'_>) -> Result<(), String>;
    /// blake3 over a canonical encoding of the state (independent of insertion order).
    fn state_hash(&self) -> Hash;
    /// rkyv bytes of the state.
    fn encode_snapshot(&self) -> Result<Vec<u8>, String>;
    /// Replaces the state with a decoded snapshot (validated access); an error discards it.
    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String>;
    /// [`Projection::restore_snapshot`] given the body itself, for a projection that keeps the
    /// bytes and reads them where they lie later instead of copying everything out at once (the
    /// default puts them in one buffer, borrows it and lets it go).
    fn restore_snapshot_body(&mut self, body: Body) -> Result<(), String> {
        self.restore_snapshot(&body.into_aligned())
    }
    /// The alignment of the chunk cuts of this projection's snapshot bodies (see
    /// [`snapshot::save`]): 16 for a body of 16-padded archives that it reads in place, else 1.
    fn snapshot_cut_align(&self) -> usize {
        1
    }
    /// Back to the empty state.
    fn reset(&mut self);
    /// The event types this projection folds, when it folds only some (`None`, the default: any
    /// event). A registry does not call [`Projection::apply`] for other types, which `apply` must
    /// ignore anyway; it still counts them as applied.
    fn event_types(&self) -> Option<&[&'static str]> {
        None
    }
}

/// How one projection got to the head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectionStatus {
    /// Name.
    pub name: String,
    /// Version.
    pub version: u32,
    /// Sequence of the snapshot it started from (0: from scratch).
    pub from_snapshot: u64,
    /// Snapshots discarded on the way, and why.
    pub discarded: Vec<Discarded>,
    /// Events applied.
    pub applied: u64,
    /// The journal sequence the projection now reflects (every event up to it folded); a
    /// snapshot saved right after catching up belongs at this sequence.
    pub through: u64,
    /// State hash at the head.
    pub state_hash: Hash,
}

/// A set of projections run together.
pub struct Projections {
    items: Vec<(Box<dyn Projection>, u64)>,
    /// Per event type met so far, whether each projection folds it (its [`Projection::event_types`]).
    routes: Vec<(Box<str>, Vec<bool>)>,
    /// Index in `routes` of the last type met: consecutive events often share a type.
    last_route: usize,
}

impl Projections {
    /// A registry of `items`; names must be unique.
    pub fn new(items: Vec<Box<dyn Projection>>) -> Projections {
        debug_assert!({
            let mut names: Vec<&str> = items.iter().map(|p| p.name()).collect();
            names.sort_unstable();
            names.windows(2).all(|w| w[0] != w[1])
        });
        Projections { items: items.into_iter().map(|p| (p, 0)).collect(), routes: Vec::new(), last_route: 0 }
    }

    /// The index in `routes` of `event_type`, added on first sight.
    fn route(&mut self, event_type: &str) -> usize {
        if self.routes.get(self.last_route).is_some_and(|(t, _)| &**t == event_type) {
            return self.last_route;
        }
        let i = match self.routes.iter().position(|(t, _)| &**t == event_type) {
            Some(i) => i,
            None => {
                let wants =
                    self.items.iter().map(|(p, _)| p.event_types().is_none_or(|ts| ts.contains(&event_type))).collect();
                self.routes.push((event_type.into(), wants));
                self.routes.len() - 1
            }
        };
        self.last_route = i;
        i
    }

    /// Sequence every projection has applied up to (the minimum).
    pub fn position(&self) -> u64 {
        self.items.iter().map(|(_, c)| *c).min().unwrap_or(0)
    }

    /// The projection called `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Projection> {
        self.items.iter().find(|(p, _)| p.name() == name).map(|(p, _)| p.as_ref())
    }

    /// State hash of every projection, by name.
    pub fn state_hashes(&self) -> BTreeMap<String, Hash> {
        self.items.iter().map(|(p, _)| (p.name().to_owned(), p.state_hash())).collect()
    }

    /// Applies one event to every projection that has not seen it (live, incremental use).
    pub fn apply(&mut self, record: &Record<'_>) -> Result<(), ProjectionError> {
        let r = self.route(record.event_type);
        for ((p, cursor), &wants) in self.items.iter_mut().zip(&self.routes[r].1) {
            apply_one(p.as_mut(), cursor, record, wants)?;
        }
        Ok(())
    }

    /// Replays every projection from sequence 1, ignoring snapshots.
    pub fn rebuild(&mut self, journal: &Journal) -> Result<Vec<ProjectionStatus>, ProjectionRunError> {
        for (p, cursor) in &mut self.items {
            p.reset();
            *cursor = 0;
        }
        let statuses = self.items.iter().map(|(p, _)| (p.name().to_owned(), p.version(), 0, Vec::new())).collect();
        self.replay_tail(journal, statuses)
    }

    /// Starts each projection from its newest valid snapshot and replays the rest.
    pub fn catch_up(&mut self, journal: &Journal) -> Result<Vec<ProjectionStatus>, ProjectionRunError> {
        let mut statuses = Vec::with_capacity(self.items.len());
        let hash_at = |seq: u64| journal.hash_at(seq);
        for (p, cursor) in &mut self.items {
            let loaded = snapshot::load(journal.store().as_ref(), p.name(), p.version(), &hash_at)?;
            let (seq, discarded) = restore_loaded(p.as_mut(), journal, loaded)?;
            *cursor = seq;
            statuses.push((p.name().to_owned(), p.version(), *cursor, discarded));
        }
        self.replay_tail(journal, statuses)
    }

    fn replay_tail(
        &mut self,
        journal: &Journal,
        statuses: Vec<(String, u32, u64, Vec<Discarded>)>,
    ) -> Result<Vec<ProjectionStatus>, ProjectionRunError> {
        let head = journal.head().seq;
        let from = self.position() + 1;
        let mut applied = vec![0u64; self.items.len()];
        let r = journal.scan(from, head, |rec, _| {
            let r = self.route(rec.event_type);
            for (i, ((p, cursor), &wants)) in self.items.iter_mut().zip(&self.routes[r].1).enumerate() {
                if apply_one(p.as_mut(), cursor, rec, wants)? {
                    applied[i] += 1;
                }
            }
            Ok::<bool, ProjectionError>(true)
        })?;
        r?;
        // Projections whose snapshot was already at the head are at the head too.
        for (_, cursor) in &mut self.items {
            *cursor = (*cursor).max(head);
        }
        Ok(statuses
            .into_iter()
            .zip(&self.items)
            .zip(applied)
            .map(|(((name, version, from_snapshot, discarded), (p, cursor)), applied)| ProjectionStatus {
                name,
                version,
                from_snapshot,
                discarded,
                applied,
                through: *cursor,
                state_hash: p.state_hash(),
            })
            .collect())
    }

    /// Saves a snapshot of every projection at its current position.
    pub fn save_snapshots(&self, journal: &Journal) -> Result<(), ProjectionRunError> {
        for (p, cursor) in &self.items {
            save_one(p.as_ref(), journal, *cursor)?;
        }
        Ok(())
    }
}

/// Brings one projection to the journal head: newest valid snapshot, then the tail. For callers
/// that hold a concrete projection type rather than a registry.
pub fn catch_up_one<P: Projection>(p: &mut P, journal: &Journal) -> Result<ProjectionStatus, ProjectionRunError> {
    let (from_snapshot, discarded, applied, through) = catch_up_inner(p, journal)?;
    Ok(ProjectionStatus {
        name: p.name().to_owned(),
        version: p.version(),
        from_snapshot,
        discarded,
        applied,
        through,
        state_hash: p.state_hash(),
    })
}

/// [`catch_up_one`] for a caller that wants only the state (a query): the same snapshot and
/// tail, without the state hash (a walk of the whole state); the sequence `p` now reflects.
pub fn catch_up_state<P: Projection>(p: &mut P, journal: &Journal) -> Result<u64, ProjectionRunError> {
    Ok(catch_up_inner(p, journal)?.3)
}

/// Snapshot plus tail: (the snapshot's sequence, what was discarded, events applied, through).
fn catch_up_inner<P: Projection>(
    p: &mut P,
    journal: &Journal,
) -> Result<(u64, Vec<Discarded>, u64, u64), ProjectionRunError> {
    let hash_at = |seq: u64| journal.hash_at(seq);
    let loaded = snapshot::load(journal.store().as_ref(), p.name(), p.version(), &hash_at)?;
    let (mut cursor, discarded) = restore_loaded(p, journal, loaded)?;
    let from_snapshot = cursor;
    let mut applied = 0u64;
    let head = journal.head().seq;
    let r = journal.scan(cursor + 1, head, |rec, _| {
        if apply_one(p, &mut cursor, rec, true)? {
            applied += 1;
        }
        Ok::<bool, ProjectionError>(true)
    })?;
    r?;
    Ok((from_snapshot, discarded, applied, cursor.max(head)))
}

/// Resets `p` and restores it from what [`snapshot::load`] found; returns the sequence `p` then
/// reflects (0 when no snapshot was usable) and why snapshots were not used. A body that does not
/// decode, or whose chunks fail the hash check that ran beside the restore, leaves `p` reset.
fn restore_loaded<P: Projection + ?Sized>(
    p: &mut P,
    journal: &Journal,
    loaded: snapshot::Loaded,
) -> Result<(u64, Vec<Discarded>), JournalError> {
    let snapshot::Loaded { found, pending, mut discarded } = loaded;
    p.reset();
    let Some((seq, body)) = found else { return Ok((0, discarded)) };
    let restored = p.restore_snapshot_body(body).is_ok();
    if !pending.holds(journal.store().as_ref())? {
        p.reset();
        discarded.push(Discarded::Incomplete);
        return Ok((0, discarded));
    }
    if !restored {
        p.reset();
        discarded.push(Discarded::Damaged);
        return Ok((0, discarded));
    }
    Ok((seq, discarded))
}

/// Brings `p`, which reflects the journal through `through`, to the head by folding only the
/// tail; returns the sequence it now reflects. For a caller that keeps `p` between reads.
pub fn catch_up_tail<P: Projection>(p: &mut P, journal: &Journal, through: u64) -> Result<u64, ProjectionRunError> {
    let head = journal.head().seq;
    if through >= head {
        return Ok(through);
    }
    let wanted: Option<Vec<&'static str>> = p.event_types().map(<[_]>::to_vec);
    let mut cursor = through;
    let r = journal.scan(through + 1, head, |rec, _| {
        let wants = wanted.as_ref().is_none_or(|t| t.contains(&rec.event_type));
        apply_one(p, &mut cursor, rec, wants)?;
        Ok::<bool, ProjectionError>(true)
    })?;
    r?;
    Ok(cursor.max(head))
}

/// Saves one projection's snapshot at journal sequence `seq` (the last event it applied).
pub fn save_one<P: Projection + ?Sized>(p: &P, journal: &Journal, seq: u64) -> Result<(), ProjectionRunError> {
    let hash = if seq == 0 { Hash::ZERO } else { journal.hash_at(seq)?.unwrap_or(Hash::ZERO) };
    let body = p.encode_snapshot().map_err(|detail| ProjectionError {
        projection: p.name().to_owned(),
        seq,
        event_type: String::new(),
        detail: format!("snapshot encoding failed: {detail}"),
    })?;
    snapshot::save(journal.store().as_ref(), p.name(), p.version(), seq, &hash, &body, p.snapshot_cut_align())?;
    Ok(())
}

/// Applies `record` to `p` unless its cursor is already past it; true if applied. When `p` does
/// not fold the record's type (`wants` false) it only moves the cursor.
fn apply_one<P: Projection + ?Sized>(
    p: &mut P,
    cursor: &mut u64,
    record: &Record<'_>,
    wants: bool,
) -> Result<bool, ProjectionError> {
    if record.seq <= *cursor {
        return Ok(false);
    }
    if !wants {
        *cursor = record.seq;
        return Ok(true);
    }
    p.apply(record).map_err(|detail| ProjectionError {
        projection: p.name().to_owned(),
        seq: record.seq,
        event_type: record.event_type.to_owned(),
        detail,
    })?;
    *cursor = record.seq;
    Ok(true)
}

/// Running projections failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionRunError {
    /// A projection rejected an event.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// Reading the journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}
