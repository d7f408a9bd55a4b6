//! Interactive sessions as writers: a person's own Claude Code or Codex session claims and
//! returns files through the same ownership map, router check and events as `strata run`'s
//! workers (`ce.route-decided` with `ce.ownership-claimed`, `ce.ownership-released`), so a task
//! of a workgroup and a person's session can never own one path at once.
//!
//! Who a session is: [`session_lineage`] of the runtime's own session id (the `session_id` of
//! the hook input), or the one shared [`INTERACTIVE`] lineage for paths any interactive session
//! may write. A claim adds paths to what the lineage owns and is routed `local` (the person does
//! the work in their own session) against every other owner; an overlap is a typed refusal that
//! records nothing. A release returns some or all of a lineage's paths; a path a workgroup's
//! worker owns is never released here (its task's end releases it).

use strata_journal::{EventData, ExpectedVersion, StreamAppend};

use super::error::CeError;
use super::ledger::{self, Claimed, Ledger, STREAM, check_lineage_id, event};
use super::router::{self, Reason, RouteFacts};
use super::{ownership, paths};
use crate::ports::{Clock, Ids};

/// The lineage paths any interactive session may write are claimed for.
pub const INTERACTIVE: &str = "interactive";
/// The prefix of a session's own lineage.
pub const SESSION_PREFIX: &str = "session/";

/// The lineage of the interactive session whose runtime calls itself `session_id`.
pub fn session_lineage(session_id: &str) -> String {
    format!("{SESSION_PREFIX}{session_id}")
}

/// Whether `lineage_id` is an interactive one ([`INTERACTIVE`] or a [`session_lineage`]).
pub fn is_interactive(lineage_id: &str) -> bool {
    lineage_id == INTERACTIVE || lineage_id.starts_with(SESSION_PREFIX)
}

/// Why a claim or release records nothing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClaimError {
    /// Another lineage owns an overlapping path.
    #[error(
        "[STRATA-E2600] {lineage} cannot claim {asked}: {holder} owns {held}; release it first (`strata release --for …` for a session, or wait for the workgroup task to end)"
    )]
    Held {
        /// The lineage asking.
        lineage: String,
        /// The owner.
        holder: String,
        /// The path it holds.
        held: String,
        /// The path asked for.
        asked: String,
    },
    /// A path cannot be placed in the workspace.
    #[error("[STRATA-E2601] {path}: {detail}; name a file or directory inside the workspace")]
    Path {
        /// The path as given.
        path: String,
        /// The rule it broke.
        detail: String,
    },
    /// The session id or lineage is unusable.
    #[error(
        "[STRATA-E2602] session {given:?}: {detail}; pass the runtime's own session id (1–120 bytes, no control characters)"
    )]
    Session {
        /// The id as given.
        given: String,
        /// The rule it broke.
        detail: String,
    },
    /// A release names a path the lineage does not own.
    #[error(
        "[STRATA-E2603] {path}: {lineage} owns nothing at or under it (it owns {owned}); `strata claim` without paths lists who owns what"
    )]
    NotOwned {
        /// The path.
        path: String,
        /// The lineage.
        lineage: String,
        /// What it owns, comma-separated (or `nothing`).
        owned: String,
    },
    /// A release would take a path from a workgroup's worker.
    #[error(
        "[STRATA-E2604] {path} is owned by {holder}, a workgroup's worker, not an interactive session; it is released when that task ends"
    )]
    Worker {
        /// The path.
        path: String,
        /// The worker's lineage.
        holder: String,
    },
    /// A release names a path no interactive session owns (or only inside a larger claim).
    #[error(
        "[STRATA-E2607] {0}: no interactive session owns it or anything under it; `strata claim` without paths lists who owns what (a larger claim is released whole)"
    )]
    Unowned(String),
    /// No paths and no session to act on.
    #[error("[STRATA-E2605] {0}")]
    Nothing(String),
    /// An event could not be built.
    #[error("[STRATA-E2606] internal error building an ownership event: {0}; report a bug")]
    Encode(String),
}

fn encode(e: CeError) -> ClaimError {
    ClaimError::Encode(e.to_string())
}

/// Checks a lineage an interactive claim names.
pub fn check(lineage_id: &str) -> Result<(), ClaimError> {
    check_lineage_id(lineage_id).map_err(|e| ClaimError::Session { given: lineage_id.to_owned(), detail: e.detail })
}

/// `raw` (workspace-relative) in the ledger's canonical form.
pub fn canonical(state: &Ledger, raw: &str) -> Result<String, ClaimError> {
    paths::canonical(state.workspace(), raw, "path")
        .map_err(|e| ClaimError::Path { path: raw.to_owned(), detail: e.detail })
}

/// What a claim decided: the lineage's paths after it, and the append (`None`: it owned them
/// all already, nothing to record).
#[derive(Debug)]
pub struct Claim {
    /// Every path the lineage owns once recorded, sorted.
    pub owned: Vec<String>,
    /// The paths this claim added.
    pub added: Vec<String>,
    /// `ce.route-decided` and `ce.ownership-claimed`, expecting the ledger version read.
    pub append: Option<StreamAppend>,
}

/// Claims `raw` (workspace-relative paths) for `lineage_id` on top of what it owns: routed as a
/// writer doing its own work (`local`, `BLOCKING`) against every other owner, with the same
/// events [`ownership::route_events`] records for a workgroup's task.
pub fn claim(
    state: &Ledger,
    lineage_id: &str,
    raw: &[String],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Claim, ClaimError> {
    check(lineage_id)?;
    if raw.is_empty() {
        return Err(ClaimError::Nothing("strata claim: name at least one path to claim".to_owned()));
    }
    let before: Vec<String> = state.owners().get(lineage_id).map(|o| o.paths.clone()).unwrap_or_default();
    let mut asked = Vec::with_capacity(raw.len());
    for r in raw {
        asked.push(canonical(state, r)?);
    }
    let added: Vec<String> =
        asked.iter().filter(|p| !before.iter().any(|b| paths::contains(b, p))).cloned().collect::<Vec<_>>();
    let mut facts = RouteFacts::defaults();
    facts.is_writer = Some(true);
    // The person works in their own session: the router's `local` for a unit that blocks its
    // coordinator.
    facts.blocking = true;
    // A path inside another one owned is implied by it.
    let union: Vec<String> = before.iter().chain(&added).cloned().collect();
    let kept: Vec<String> =
        union.iter().filter(|p| !union.iter().any(|q| q != *p && paths::contains(q, p))).cloned().collect();
    facts.set_proposed(kept).map_err(|e| ClaimError::Path { path: raw.join(", "), detail: e.detail })?;
    ownership::apply_ledger(state, lineage_id, &mut facts).map_err(encode)?;
    if let Some((holder, held, asked)) = facts.conflict() {
        return Err(ClaimError::Held {
            lineage: lineage_id.to_owned(),
            holder: holder.lineage_id.clone().unwrap_or_default(),
            held: held.to_owned(),
            asked: asked.to_owned(),
        });
    }
    let owned = facts.proposed.clone();
    if added.is_empty() {
        return Ok(Claim { owned, added, append: None });
    }
    let decided = router::route(&facts).map_err(encode)?;
    debug_assert!(!decided.reason_codes.contains(&Reason::WriterOwnershipConflict));
    let events =
        ownership::route_events(state, lineage_id, &facts, &decided, decided.mode, ids, clock).map_err(encode)?;
    Ok(Claim { owned, added, append: Some(at_version(state, events)) })
}

fn at_version(state: &Ledger, events: Vec<EventData>) -> StreamAppend {
    StreamAppend { stream: STREAM.to_owned(), expected: ExpectedVersion::Exact(state.version()), events }
}

/// What one lineage gives back.
#[derive(Debug, PartialEq, Eq)]
pub struct Returned {
    /// The lineage.
    pub lineage: String,
    /// The paths it no longer owns.
    pub released: Vec<String>,
    /// What it still owns.
    pub kept: Vec<String>,
}

/// What a release decided.
#[derive(Debug)]
pub struct Release {
    /// Per lineage, in lineage order.
    pub returned: Vec<Returned>,
    /// The events (`ce.ownership-released` for a lineage left with nothing, else
    /// `ce.ownership-claimed` with what it keeps); `None` when nothing changes.
    pub append: Option<StreamAppend>,
}

/// Returns paths: with `lineage_id`, that lineage's paths at or under `raw` (all of them when
/// `raw` is empty); without, each path of `raw` from whichever interactive lineage owns paths at
/// or under it. A path a workgroup's worker owns, or that no one named owns, is refused.
pub fn release(
    state: &Ledger,
    lineage_id: Option<&str>,
    raw: &[String],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Release, ClaimError> {
    if let Some(l) = lineage_id {
        check(l)?;
    }
    let mut asked = Vec::with_capacity(raw.len());
    for r in raw {
        asked.push(canonical(state, r)?);
    }
    // Lineage → paths it gives back.
    let mut giving: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    match (lineage_id, asked.is_empty()) {
        (None, true) => {
            return Err(ClaimError::Nothing(
                "strata release: name the paths to release, or the session (`--for SESSION`, `--interactive`) whose paths all go"
                    .to_owned(),
            ));
        }
        (Some(l), true) => {
            if let Some(o) = state.owners().get(l) {
                giving.insert(l.to_owned(), o.paths.clone());
            }
        }
        (Some(l), false) => {
            let owned = state.owners().get(l).map(|o| o.paths.clone()).unwrap_or_default();
            for p in &asked {
                let under: Vec<String> = owned.iter().filter(|o| paths::contains(p, o)).cloned().collect();
                if under.is_empty() {
                    return Err(not_owned(p, l, &owned));
                }
                giving.entry(l.to_owned()).or_default().extend(under);
            }
        }
        (None, false) => {
            for p in &asked {
                let mut found = false;
                for (holder, o) in state.owners() {
                    let under: Vec<String> = o.paths.iter().filter(|h| paths::contains(p, h)).cloned().collect();
                    let overlapping = o.paths.iter().find(|h| paths::overlaps(h, p));
                    if under.is_empty() {
                        if let Some(h) = overlapping.filter(|_| !is_interactive(holder)) {
                            return Err(ClaimError::Worker { path: h.clone(), holder: holder.clone() });
                        }
                        continue;
                    }
                    if !is_interactive(holder) {
                        return Err(ClaimError::Worker { path: under[0].clone(), holder: holder.clone() });
                    }
                    found = true;
                    giving.entry(holder.clone()).or_default().extend(under);
                }
                if !found {
                    return Err(ClaimError::Unowned(p.clone()));
                }
            }
        }
    }
    let mut returned = Vec::new();
    let mut events = Vec::new();
    for (lineage, mut gone) in giving {
        if !is_interactive(&lineage) {
            return Err(ClaimError::Worker { path: gone.join(", "), holder: lineage });
        }
        gone.sort();
        gone.dedup();
        let owned = state.owners().get(&lineage).map(|o| o.paths.clone()).unwrap_or_default();
        let kept: Vec<String> = owned.iter().filter(|o| !gone.contains(o)).cloned().collect();
        if kept.is_empty() {
            if let Some(e) = ownership::release_event(state, &lineage, ids, clock).map_err(encode)? {
                events.push(e);
            }
        } else {
            let mode = state.owners().get(&lineage).and_then(|o| o.mode.clone());
            let c = Claimed { lineage_id: lineage.clone(), paths: kept.clone(), mode };
            events.push(event(ids, clock, ledger::CLAIMED, &c).map_err(encode)?);
        }
        returned.push(Returned { lineage, released: gone, kept });
    }
    let append = if events.is_empty() { None } else { Some(at_version(state, events)) };
    Ok(Release { returned, append })
}

fn not_owned(path: &str, lineage: &str, owned: &[String]) -> ClaimError {
    ClaimError::NotOwned {
        path: path.to_owned(),
        lineage: lineage.to_owned(),
        owned: if owned.is_empty() { "nothing".to_owned() } else { owned.join(", ") },
    }
}

/// The paths the interactive session `session_id` may write: its own claims and the shared
/// [`INTERACTIVE`] ones, sorted; `None` when neither owns anything.
pub fn session_paths(state: &Ledger, session_id: &str) -> Option<Vec<String>> {
    let own = state.owners().get(&session_lineage(session_id));
    let shared = state.owners().get(INTERACTIVE);
    if own.is_none() && shared.is_none() {
        return None;
    }
    let mut all: Vec<String> = own.into_iter().chain(shared).flat_map(|o| o.paths.iter().cloned()).collect();
    all.sort();
    all.dedup();
    Some(all)
}

#[cfg(test)]
mod tests {
    use strata_journal::{Journal, projection::catch_up_one};

    use super::*;
    use crate::ports::{CountingIds, FixedClock};

    fn apply(j: &Journal, a: Option<StreamAppend>) -> Ledger {
        if let Some(a) = a {
            j.append_multi_blocking(vec![a]).unwrap().unwrap();
        }
        let mut l = Ledger::default();
        catch_up_one(&mut l, j).unwrap();
        l
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn two_sessions_never_own_one_path_and_a_release_frees_it() {
        let j = Journal::in_memory("strata.test/interactive").unwrap();
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let a = session_lineage("A");
        let b = session_lineage("B");
        let l = apply(&j, claim(&Ledger::default(), &a, &s(&["src/lib.rs", "docs"]), &mut ids, &clock).unwrap().append);
        assert_eq!(l.owners()[&a].paths, s(&["docs", "src/lib.rs"]));
        assert_eq!(l.owners()[&a].mode.as_deref(), Some("local"));
        let refused = claim(&l, &b, &s(&["docs/guide.md"]), &mut ids, &clock).unwrap_err();
        assert!(
            matches!(&refused, ClaimError::Held { holder, held, .. } if *holder == a && held == "docs"),
            "{refused}"
        );
        let again = claim(&l, &a, &s(&["docs/guide.md"]), &mut ids, &clock).unwrap();
        assert!(again.append.is_none() && again.added.is_empty(), "already inside what it owns");
        let r = release(&l, None, &s(&["docs"]), &mut ids, &clock).unwrap();
        assert_eq!(r.returned, vec![Returned { lineage: a.clone(), released: s(&["docs"]), kept: s(&["src/lib.rs"]) }]);
        let l = apply(&j, r.append);
        let for_b = claim(&l, &b, &s(&["docs/guide.md"]), &mut ids, &clock).unwrap();
        assert!(for_b.append.is_some());
        let l = apply(&j, for_b.append);
        let all = release(&l, Some(&a), &[], &mut ids, &clock).unwrap();
        let l = apply(&j, all.append);
        assert!(!l.owners().contains_key(&a));
        assert_eq!(session_paths(&l, "B"), Some(s(&["docs/guide.md"])));
        assert_eq!(session_paths(&l, "A"), None);
    }

    #[test]
    fn a_worker_s_paths_are_never_released_here_and_bad_input_is_refused() {
        let j = Journal::in_memory("strata.test/interactive").unwrap();
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let l = apply(&j, claim(&Ledger::default(), "wg/WG-1/T1", &s(&["src"]), &mut ids, &clock).unwrap().append);
        assert!(matches!(release(&l, None, &s(&["src/a.rs"]), &mut ids, &clock), Err(ClaimError::Worker { .. })));
        assert!(matches!(release(&l, None, &s(&["src"]), &mut ids, &clock), Err(ClaimError::Worker { .. })));
        assert!(matches!(claim(&l, INTERACTIVE, &s(&["../x"]), &mut ids, &clock), Err(ClaimError::Path { .. })));
        assert!(matches!(claim(&l, INTERACTIVE, &[], &mut ids, &clock), Err(ClaimError::Nothing(_))));
        assert!(matches!(release(&l, None, &[], &mut ids, &clock), Err(ClaimError::Nothing(_))));
        assert!(matches!(
            release(&l, Some(INTERACTIVE), &s(&["docs"]), &mut ids, &clock),
            Err(ClaimError::NotOwned { .. })
        ));
        assert!(matches!(claim(&l, &"x".repeat(200), &s(&["a"]), &mut ids, &clock), Err(ClaimError::Session { .. })));
    }
}
