//! The coordinator on a journal other processes append to (PostgreSQL): every `strata run` on
//! any workspace naming the same database shares one writer-ownership map and one lease per
//! workgroup.
//!
//! * Decisions are made on a fresh view: before a dispatch is decided the journal is refreshed
//!   (what every process committed so far), and a dispatch whose append conflicts because
//!   another process moved the ledger in between is decided again on the newer ledger; nothing
//!   of the conflicting attempt was recorded, so its claim never exists twice
//!   ([`dispatch`]). Any other append that conflicts only because other lineages' ledger events
//!   moved the ledger's version (a release, a warm lease of this run's own lineage) is made
//!   again expecting the new version, since those events cannot change what it decides.
//! * The workgroup's coordinator lease ([`strata_engine::workgroup::lease`]) is taken when the
//!   run starts and renewed by every append of the run, in the same atomic append, expecting
//!   the lease stream's version this run last wrote; waiting runs renew it when a third of it has
//!   passed ([`keep_lease`]). A run whose lease was taken over finds its next append refused
//!   with STRATA-E2311 and stops; nothing of that append is recorded. A run that ends, done or
//!   with an error, releases its lease ([`release_lease`]); one that crashed leaves it to end at
//!   the time recorded.
//!
//! On a journal this process owns (sled) there is no other coordinator: no lease is taken and
//! appends are as before.

use strata_engine::ce::ledger;
use strata_engine::ports::Clock as _;
use strata_engine::workgroup::lease::{self, CoordinatorLease, Held, LeaseError};
use strata_journal::{Conflict, ExpectedVersion, Journal, StreamAppend};

use super::Coordinator;
use crate::system::{SystemClock, V7Ids};

/// Times a dispatch is decided again after another process moved the ledger under it.
const DISPATCH_RETRIES: usize = 16;
/// Times an append is made again after other lineages moved the ledger's version.
const REBASE_RETRIES: usize = 16;
/// Times taking the lease is tried again after another taker won the race.
const TAKE_RETRIES: usize = 4;
/// Most lease-stream events folded (the stream grows by one per append of a run).
const LEASE_EVENTS_MAX: usize = 100_000;
/// Most ledger events looked at when deciding whether an append may expect a newer version.
const REBASE_EVENTS_MAX: usize = 4096;
/// The environment variable that sets the lease, milliseconds.
pub const LEASE_MS_ENV: &str = "STRATA_COORDINATOR_LEASE_MS";

/// A conflict no retry resolves: the journal changed in a way this run did not decide on.
#[derive(Debug, thiserror::Error)]
#[error("[STRATA-E1723] another writer changed the journal during the run ({0}); stop it and continue with --resume")]
pub struct Stale(pub Conflict);

/// The run's coordinator lease on a shared journal.
#[derive(Debug, Default)]
pub struct Fence {
    held: Option<Held>,
    lease_ms: u64,
}

fn shared(journal: &Journal) -> bool {
    journal.store().shared_order().is_some()
}

/// The lease time: [`LEASE_MS_ENV`] when set, else the default.
fn lease_ms() -> anyhow::Result<u64> {
    match std::env::var(LEASE_MS_ENV) {
        Err(_) => Ok(lease::LEASE_MS_DEFAULT),
        Ok(v) => {
            let Ok(ms) = v.trim().parse::<u64>() else {
                anyhow::bail!(
                    "[STRATA-E2314] {LEASE_MS_ENV}={v:?} is not a whole number of milliseconds; set it within {}..={} (or unset it for {} ms)",
                    lease::LEASE_MS_MIN,
                    lease::LEASE_MS_MAX,
                    lease::LEASE_MS_DEFAULT
                );
            };
            if !(lease::LEASE_MS_MIN..=lease::LEASE_MS_MAX).contains(&ms) {
                return Err(LeaseError::Duration { ms }.into());
            }
            Ok(ms)
        }
    }
}

/// The lease stream of `wg` as recorded.
fn folded(journal: &Journal, wg: &str) -> anyhow::Result<CoordinatorLease> {
    let mut l = CoordinatorLease::default();
    for e in journal.read_stream(&lease::stream(wg), 1, LEASE_EVENTS_MAX)? {
        l.apply(wg, &e.event_type, &e.payload, e.version)?;
    }
    Ok(l)
}

/// Reads what other processes committed and applies it to every state of the run; a run whose
/// lease was taken over meanwhile stops here with STRATA-E2311, before it decides anything on
/// the workgroup another coordinator now runs.
fn refresh(c: &mut Coordinator<'_>) -> anyhow::Result<()> {
    c.journal.refresh()?;
    c.follow()?;
    match &c.fence.held {
        Some(h) if c.journal.stream_version(&lease::stream(&h.workgroup)) != h.version => {
            let state = folded(c.journal, &h.workgroup)?;
            let fenced = lease::fenced(h, &state).unwrap_or_else(|| LeaseError::Fenced {
                workgroup: h.workgroup.clone(),
                epoch: h.epoch,
                by: String::new(),
                by_epoch: 0,
            });
            Err(fenced.into())
        }
        _ => Ok(()),
    }
}

/// Takes workgroup `wg`'s lease for this run (a shared journal only); refused with
/// STRATA-E2312 while another coordinator's lease lives.
pub(super) fn take_lease(c: &mut Coordinator<'_>, wg: &str) -> anyhow::Result<()> {
    if !shared(c.journal) {
        return Ok(());
    }
    c.fence.lease_ms = lease_ms()?;
    let holder = format!("pid {} run {}", std::process::id(), strata_engine::ports::Ids::next_id(&mut V7Ids).simple());
    for _ in 0..TAKE_RETRIES {
        refresh(c)?;
        let state = folded(c.journal, wg)?;
        let (held, append) =
            lease::take(&state, wg, &holder, SystemClock.now_ns(), c.fence.lease_ms, &mut V7Ids, &SystemClock)?;
        if c.journal.append_multi_blocking(vec![append])?.is_ok() {
            c.fence.held = Some(held);
            return c.follow();
        }
        // Another coordinator took or renewed it meanwhile: look again.
    }
    anyhow::bail!(
        "[STRATA-E2312] workgroup {wg}: other coordinators kept taking or renewing its lease while this run tried to take it; stop them, then run `strata run --resume {wg}` again"
    )
}

/// Renews the lease when a third of it has passed (a run waiting for its workers appends
/// nothing else for a while).
pub(super) fn keep_lease(c: &mut Coordinator<'_>) -> anyhow::Result<()> {
    match &c.fence.held {
        Some(h) if lease::due(h, SystemClock.now_ns()) => commit(c, Vec::new()),
        _ => Ok(()),
    }
}

/// Releases the run's lease when the run ends (its `result`), so another coordinator can take
/// the workgroup at once instead of waiting for the recorded end. A run that was taken over
/// releases nothing (the release expects the lease version it last wrote and conflicts); a run
/// that cannot reach the journal leaves the lease to end at its recorded time. Neither changes
/// `result`.
pub(super) fn release_lease<T>(c: &mut Coordinator<'_>, result: anyhow::Result<T>) -> anyhow::Result<T> {
    let Some(held) = c.fence.held.take() else { return result };
    let released = lease::release(&held, SystemClock.now_ns(), &mut V7Ids, &SystemClock)
        .map_err(anyhow::Error::from)
        .and_then(|append| Ok(c.journal.append_multi_blocking(vec![append])?));
    match released {
        Ok(Ok(_)) => {
            let followed = c.follow();
            result.and_then(|r| followed.map(|()| r))
        }
        Ok(Err(_)) => result,
        Err(e) => {
            c.progress(format_args!(
                "workgroup {}: its lease was not released ({e}); it ends at its recorded time",
                held.workgroup
            ));
            result
        }
    }
}

/// Appends `appends` atomically, fenced by the run's lease when it holds one, then applies them
/// to every state. A conflict caused only by other lineages' ledger events is appended again
/// expecting the newer ledger; a taken-over lease is STRATA-E2311; anything else is [`Stale`].
pub(super) fn commit(c: &mut Coordinator<'_>, appends: Vec<StreamAppend>) -> anyhow::Result<()> {
    let mut appends: Vec<StreamAppend> = appends.into_iter().filter(|a| !a.events.is_empty()).collect();
    if appends.is_empty() && c.fence.held.is_none() {
        return Ok(());
    }
    for _ in 0..REBASE_RETRIES {
        let mut batch = appends.clone();
        let renewed = match &c.fence.held {
            Some(h) => {
                let (next, renewal) =
                    lease::renew(h, SystemClock.now_ns(), c.fence.lease_ms, &mut V7Ids, &SystemClock)?;
                batch.insert(0, renewal);
                Some(next)
            }
            None => None,
        };
        let conflict = match c.journal.append_multi_blocking(batch)? {
            Ok(_) => {
                if renewed.is_some() {
                    c.fence.held = renewed;
                }
                return c.follow();
            }
            Err(conflict) => conflict,
        };
        // A taken-over lease stops the run here (STRATA-E2311).
        refresh(c)?;
        if !rebase(c, &mut appends, &conflict)? {
            return Err(Stale(conflict).into());
        }
    }
    Err(anyhow::anyhow!(
        "[STRATA-E1723] the dispatch ledger kept moving under this run's append; stop it and continue with --resume"
    ))
}

/// Moves the ledger append of `appends` on to the ledger's version now, when `conflict` was on
/// the ledger and every ledger event since the version it expected is about other lineages
/// (and it claims nothing, which would have to be decided again). Returns whether it did.
fn rebase(c: &Coordinator<'_>, appends: &mut [StreamAppend], conflict: &Conflict) -> anyhow::Result<bool> {
    if conflict.stream != ledger::STREAM {
        return Ok(false);
    }
    let Some(append) = appends.iter_mut().find(|a| a.stream == ledger::STREAM) else { return Ok(false) };
    let ExpectedVersion::Exact(expected) = append.expected else { return Ok(false) };
    let decided_on_owners = [ledger::ROUTE_DECIDED, ledger::CLAIMED, ledger::CONFLICT];
    if append.events.iter().any(|e| decided_on_owners.contains(&e.event_type.as_str())) {
        return Ok(false);
    }
    let lineage = |payload: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|v| v.get("lineage_id").and_then(serde_json::Value::as_str).map(str::to_owned))
    };
    let mut mine = Vec::new();
    for e in &append.events {
        match lineage(&e.payload) {
            Some(l) => mine.push(l),
            None => return Ok(false),
        }
    }
    let now = c.ledger.version();
    let moved = c.journal.read_stream(ledger::STREAM, expected + 1, REBASE_EVENTS_MAX)?;
    if moved.len() as u64 != now.saturating_sub(expected) {
        return Ok(false);
    }
    for e in &moved {
        match lineage(&e.payload) {
            Some(l) if !mine.contains(&l) => {}
            _ => return Ok(false),
        }
    }
    append.expected = ExpectedVersion::Exact(now);
    Ok(true)
}

/// Dispatches `task` on a view refreshed first; decided again when another process moved the
/// journal under the decision (its append, which recorded nothing, conflicted).
pub(super) fn dispatch(c: &mut Coordinator<'_>, wg: &str, task: &str) -> anyhow::Result<()> {
    for _ in 0..DISPATCH_RETRIES {
        if shared(c.journal) {
            refresh(c)?;
        }
        match c.dispatch(wg, task) {
            Err(e) if e.is::<Stale>() => {
                c.in_flight.remove(task);
            }
            r => return r,
        }
    }
    Err(anyhow::anyhow!(
        "[STRATA-E1723] task {task}: other coordinators kept moving the dispatch ledger under its dispatch; continue with --resume"
    ))
}
