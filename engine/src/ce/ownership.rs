//! The global writer-ownership map, kept in the [`Ledger`]. Every routing decision of a writer is
//! recorded on the ledger stream with its version expected, so concurrent claims are serialised
//! by the journal: at any journal position at most one lineage owns a path (by alias and
//! containment), and a claim that would overlap is recorded as a conflict and routed `local`
//! with `WRITER_OWNERSHIP_CONFLICT`. Active writers and the count of active inherited writers
//! come from the ledger, never from the caller.

use strata_journal::{EventData, ExpectedVersion, StreamAppend};

use super::error::CeError;
use super::ledger::{self, Claimed, Conflicted, Ledger, Released, RouteDecided, check_lineage_id, event};
use super::router::{Mode, Reason, Route, RouteFacts, route};
use crate::ports::{Clock, Ids};

pub use super::ledger::STREAM;

/// Replaces the caller's active writers and inherited-writer count in `facts` with the ledger's,
/// leaving out `lineage_id`'s own claim (a lineage never conflicts with itself).
pub fn apply_ledger(state: &Ledger, lineage_id: &str, facts: &mut RouteFacts) -> Result<(), CeError> {
    check_lineage_id(lineage_id)?;
    facts.active_writers = state.active_writers(Some(lineage_id));
    facts.active_inherited_writers = state.active_inherited_writers(Some(lineage_id));
    Ok(())
}

/// The events recording `decided` for `lineage_id` (facts already from [`apply_ledger`]): the
/// route with its evidence, and a claim (replacing what the lineage owned before, skipped when
/// unchanged) or a conflict when the unit writes. `runs_as` is the mode that executes, which
/// decides whether the writer counts toward the inherited cap.
pub fn route_events(
    state: &Ledger,
    lineage_id: &str,
    facts: &RouteFacts,
    decided: &Route,
    runs_as: Mode,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Vec<EventData>, CeError> {
    let mut events = vec![event(
        ids,
        clock,
        ledger::ROUTE_DECIDED,
        &RouteDecided {
            lineage_id: lineage_id.to_owned(),
            mode: decided.mode.as_str().to_owned(),
            reason_codes: decided.reason_codes.iter().map(|r| r.as_str().to_owned()).collect(),
            proposed: facts.proposed.clone(),
            active_writers: facts
                .active_writers
                .iter()
                .map(|w| (w.lineage_id.clone().unwrap_or_default(), w.paths.clone()))
                .collect(),
            active_inherited_writers: facts.active_inherited_writers,
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
            events.push(event(ids, clock, ledger::CONFLICT, &c)?);
        }
    } else if facts.is_writer() {
        let claim = Claimed {
            lineage_id: lineage_id.to_owned(),
            paths: facts.proposed.clone(),
            mode: Some(runs_as.as_str().to_owned()),
        };
        let unchanged = state.owners().get(lineage_id).is_some_and(|o| o.paths == claim.paths && o.mode == claim.mode);
        if !unchanged {
            events.push(event(ids, clock, ledger::CLAIMED, &claim)?);
        }
    }
    Ok(events)
}

/// Routes `facts` for `lineage_id` against the ledger ([`apply_ledger`]) and returns the
/// decision with one append recording it ([`route_events`], running as the routed mode) that
/// expects the ledger version the state was read at, so a concurrent decision makes it
/// conflict and the caller decides again on the newer state.
pub fn decide(
    state: &Ledger,
    lineage_id: &str,
    mut facts: RouteFacts,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<(Route, StreamAppend), CeError> {
    apply_ledger(state, lineage_id, &mut facts)?;
    let decided = route(&facts)?;
    let events = route_events(state, lineage_id, &facts, &decided, decided.mode, ids, clock)?;
    Ok((decided, StreamAppend { stream: STREAM.to_owned(), expected: ExpectedVersion::Exact(state.version()), events }))
}

/// The event releasing everything `lineage_id` owns; `None` when it owns nothing.
pub fn release_event(
    state: &Ledger,
    lineage_id: &str,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Option<EventData>, CeError> {
    check_lineage_id(lineage_id)?;
    if !state.owners().contains_key(lineage_id) {
        return Ok(None);
    }
    event(ids, clock, ledger::RELEASED, &Released { lineage_id: lineage_id.to_owned() }).map(Some)
}

/// [`release_event`] as one append expecting the ledger version.
pub fn release(
    state: &Ledger,
    lineage_id: &str,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Option<StreamAppend>, CeError> {
    Ok(release_event(state, lineage_id, ids, clock)?.map(|e| StreamAppend {
        stream: STREAM.to_owned(),
        expected: ExpectedVersion::Exact(state.version()),
        events: vec![e],
    }))
}
