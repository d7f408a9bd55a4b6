//! The global writer-ownership map, owned by the journal. Every routing decision of a writer is
//! recorded on one stream (`ce/ownership`) with that stream's version expected, so concurrent
//! claims are serialised by the journal: at any journal position at most one lineage owns a
//! path (by alias and containment), and a claim that would overlap is recorded as a conflict and
//! routed `local` with `WRITER_OWNERSHIP_CONFLICT`. Active writers come from this projection,
//! never from the caller.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_journal::{EventData, ExpectedVersion, Record, StreamAppend};

use super::error::{CeError, Code, fail};
use super::paths;
use super::router::{ActiveWriter, Reason, Route, RouteFacts, route};
use crate::ports::{Clock, Ids};
use crate::projections::kept::EventLog;

/// The one stream every ownership decision is appended to.
pub const STREAM: &str = "ce/ownership";
/// `ce.route-decided`: a routing decision with its evidence.
pub const ROUTE_DECIDED: &str = "ce.route-decided";
/// `ce.ownership-claimed`: a lineage now owns paths.
pub const CLAIMED: &str = "ce.ownership-claimed";
/// `ce.ownership-conflict`: a claim refused because another lineage owns an overlapping path.
pub const CONFLICT: &str = "ce.ownership-conflict";
/// `ce.ownership-released`: a lineage owns nothing any more.
pub const RELEASED: &str = "ce.ownership-released";
/// Every type folded here.
pub const ALL: [&str; 4] = [ROUTE_DECIDED, CLAIMED, CONFLICT, RELEASED];
/// Longest lineage id.
pub const LINEAGE_ID_BYTES_MAX: usize = 128;

/// `ce.route-decided` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteDecided {
    /// The unit's lineage.
    pub lineage_id: String,
    /// Mode.
    pub mode: String,
    /// Reason codes, canonical order.
    pub reason_codes: Vec<String>,
    /// Canonical paths it proposed to own.
    pub proposed: Vec<String>,
    /// The lineages it was checked against, with their paths, at this stream version.
    pub active_writers: BTreeMap<String, Vec<String>>,
}

/// `ce.ownership-claimed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claimed {
    /// Lineage.
    pub lineage_id: String,
    /// Canonical paths now owned.
    pub paths: Vec<String>,
}

/// `ce.ownership-conflict` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conflicted {
    /// Lineage refused.
    pub lineage_id: String,
    /// The lineage holding the overlapping path.
    pub holder: String,
    /// The held path.
    pub held: String,
    /// The path asked for.
    pub asked: String,
}

/// `ce.ownership-released` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Released {
    /// Lineage.
    pub lineage_id: String,
}

/// The projection: who owns what, and the stream version it was read at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    owners: BTreeMap<String, Vec<String>>,
    version: u64,
    kept: EventLog,
}

impl Ownership {
    /// Lineage → canonical paths it owns.
    pub fn owners(&self) -> &BTreeMap<String, Vec<String>> {
        &self.owners
    }

    /// The `ce/ownership` stream version folded so far.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The owners as the router's active writers.
    pub fn active_writers(&self) -> Vec<ActiveWriter> {
        self.owners.iter().map(|(l, p)| ActiveWriter { lineage_id: Some(l.clone()), paths: p.clone() }).collect()
    }

    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        let bad = |e: serde_json::Error| format!("{} at seq {}: {e}", r.event_type, r.seq);
        if r.stream == STREAM {
            self.version = r.version;
        }
        match r.event_type {
            CLAIMED => {
                let c: Claimed = serde_json::from_slice(r.payload).map_err(bad)?;
                // The decider never records an overlapping claim; a journal that holds one was not
                // written by it.
                for (holder, held) in &self.owners {
                    if let Some(p) = held.iter().find(|h| c.paths.iter().any(|p| paths::overlaps(h, p))) {
                        return Err(format!("seq {}: claim by {} overlaps {p} held by {holder}", r.seq, c.lineage_id));
                    }
                }
                self.owners.insert(c.lineage_id, c.paths);
            }
            RELEASED => {
                let x: Released = serde_json::from_slice(r.payload).map_err(bad)?;
                self.owners.remove(&x.lineage_id);
            }
            ROUTE_DECIDED => {
                let _: RouteDecided = serde_json::from_slice(r.payload).map_err(bad)?;
            }
            CONFLICT => {
                let _: Conflicted = serde_json::from_slice(r.payload).map_err(bad)?;
            }
            _ => {}
        }
        Ok(())
    }
}

crate::projections::kept::kept_projection!(Ownership, "ownership", 1, ALL);

fn event(ids: &mut dyn Ids, clock: &dyn Clock, t: &str, payload: &impl Serialize) -> Result<EventData, CeError> {
    Ok(EventData {
        id: ids.next_id(),
        event_type: t.to_owned(),
        schema_version: 1,
        recorded_at_ns: clock.now_ns(),
        causation: None,
        correlation: None,
        payload: serde_json::to_vec(payload).map_err(|e| CeError::new(Code::InvalidRequest, e.to_string()))?,
    })
}

fn check_lineage_id(id: &str) -> Result<(), CeError> {
    if id.is_empty() || id.len() > LINEAGE_ID_BYTES_MAX || id.chars().any(char::is_control) {
        return fail(Code::InvalidFact, "lineage_id: 1–128 bytes, no control characters");
    }
    Ok(())
}

/// Routes `facts` for `lineage_id` against the journal's owners (any caller-given active
/// writers are replaced) and returns the decision with the append that records it: the route
/// with its evidence, and a claim or a conflict when the unit writes. The append expects the
/// stream version the map was read at, so a concurrent decision makes it conflict and the caller
/// decides again on the newer map.
pub fn decide(
    state: &Ownership,
    lineage_id: &str,
    mut facts: RouteFacts,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<(Route, StreamAppend), CeError> {
    check_lineage_id(lineage_id)?;
    facts.active_writers = state.active_writers();
    let decided = route(&facts)?;
    let mut events = vec![event(
        ids,
        clock,
        ROUTE_DECIDED,
        &RouteDecided {
            lineage_id: lineage_id.to_owned(),
            mode: decided.mode.as_str().to_owned(),
            reason_codes: decided.reason_codes.iter().map(|r| r.as_str().to_owned()).collect(),
            proposed: facts.proposed.clone(),
            active_writers: state.owners.clone(),
        },
    )?];
    if decided.reason_codes.contains(&Reason::WriterOwnershipConflict) {
        if let Some((holder, held, asked)) = facts.conflict() {
            let c = Conflicted {
                lineage_id: lineage_id.to_owned(),
                holder: holder.lineage_id.clone().unwrap_or_default(),
                held: held.to_owned(),
                asked: asked.to_owned(),
            };
            events.push(event(ids, clock, CONFLICT, &c)?);
        }
    } else if facts.is_writer() {
        if state.owners.contains_key(lineage_id) {
            return fail(Code::InvalidFact, "lineage_id: already owns paths; release them before claiming again");
        }
        events.push(event(
            ids,
            clock,
            CLAIMED,
            &Claimed { lineage_id: lineage_id.to_owned(), paths: facts.proposed.clone() },
        )?);
    }
    let append = StreamAppend { stream: STREAM.to_owned(), expected: ExpectedVersion::Exact(state.version), events };
    Ok((decided, append))
}

/// Releases everything `lineage_id` owns; `None` when it owns nothing.
pub fn release(
    state: &Ownership,
    lineage_id: &str,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Option<StreamAppend>, CeError> {
    check_lineage_id(lineage_id)?;
    if !state.owners.contains_key(lineage_id) {
        return Ok(None);
    }
    let e = event(ids, clock, RELEASED, &Released { lineage_id: lineage_id.to_owned() })?;
    Ok(Some(StreamAppend {
        stream: STREAM.to_owned(),
        expected: ExpectedVersion::Exact(state.version),
        events: vec![e],
    }))
}
