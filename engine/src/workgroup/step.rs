//! The decisions inside one dispatch and one judged end of the coordinator's loop, apart from
//! their I/O: routing a task against the dispatch ledger with its warm candidate and the
//! provider's capabilities, the ledger events of resuming a warm session (reconciled first when
//! its capsule went stale), and closing an attempt (completion, or failure with its retry and
//! backoff; the release of its claim; a completed session kept warm). The adapters' coordinator
//! and the `coordinator-faults` simulation both build their [`super::driver::Coordinate`] edges
//! from these, so the simulation exercises the same decisions `strata run` records.

use strata_journal::EventData;

use super::WorkgroupError;
use super::events::{Completed, Failed, Held, WorkerEnded};
use super::plan::Task;
use super::policy::Policy;
use super::provider::{self, Capabilities};
use super::state::Workgroup;
use super::{decide, lineage_id, warm};
use crate::ce::capsule::Sealed;
use crate::ce::ledger::{self, Ledger};
use crate::ce::ownership;
use crate::ce::router::{self, Inheritance, Mode, Reason, Route, RouteFacts};
use crate::ports::{Clock, Ids};

/// What routing a dispatch decided.
#[derive(Clone, Debug)]
pub struct Routed {
    /// The routing facts, with the ledger's active writers.
    pub facts: RouteFacts,
    /// The router's decision.
    pub route: Route,
    /// The mode that runs: the route's, or a fresh capsule when the provider cannot run it.
    pub runs_as: Mode,
    /// The reasons to record with the dispatch.
    pub reasons: Vec<Reason>,
    /// The ledger's route and claim (or conflict) events, for the dispatch's (or hold's) append.
    pub ledger_events: Vec<EventData>,
}

impl Routed {
    /// Another lineage owns a path this writer would: the task is held, not dispatched.
    pub fn conflicted(&self) -> bool {
        self.route.reason_codes.contains(&Reason::WriterOwnershipConflict)
    }

    /// The hold of `task`, which another lineage's claim blocks, naming who holds which path;
    /// `fix` (how to free it, for the user) is added to the reason.
    pub fn conflict_hold(&self, task: &str, fix: &str) -> Held {
        let holder = self
            .facts
            .conflict()
            .map(|(w, held, _)| format!("{} holds {held}", w.lineage_id.clone().unwrap_or_default()))
            .unwrap_or_default();
        let reason = if fix.is_empty() {
            format!("writer ownership conflict: {holder}")
        } else {
            format!("writer ownership conflict: {holder}; {fix}")
        };
        Held { task: task.to_owned(), blocked_by: Vec::new(), reason, gate: None }
    }
}

/// The completed task whose warm session `t` continues: its lineage, session, id and the
/// attempt that completed it. `None` when `t` continues nothing (or that task did not complete).
pub fn prior(g: &Workgroup, t: &Task) -> Option<(String, String, String, u32)> {
    let p = t.spec.continues.as_ref()?;
    let (_, done) = g.tasks.get(p)?.completed.as_ref()?;
    Some((lineage_id(&g.plan.workgroup, p), done.session_id.clone(), p.clone(), done.attempt))
}

/// The warm sessions a task may reuse: the one it `continues` (and whether that may be
/// resumed), and the one of its `affinity` task (and whether that may be forked).
#[derive(Clone, Copy, Debug, Default)]
pub struct Candidates<'a> {
    /// The warm lineage it continues.
    pub resume: Option<(&'a str, bool)>,
    /// The lineage whose context it would inherit.
    pub fork: Option<Fork<'a>>,
}

/// The session a task's `affinity` names, as the dispatch found it.
#[derive(Clone, Copy, Debug)]
pub struct Fork<'a> {
    /// Its lineage.
    pub lineage: &'a str,
    /// Its sensitivity.
    pub sensitivity: &'a str,
    /// The ledger and the lineage evaluator allow forking it.
    pub forkable: bool,
}

/// The inheritance facts of `t` for the session `fork`: high affinity, safe only when the plan
/// wrote `sensitivity = "normal"` out for the task and the session it inherits is normal too,
/// within budget only when the plan approved the inherited context's cost, and a whole fork
/// supported only when the provider can fork and the session may be forked. An absent fact never
/// authorises: the router then falls back to a fresh capsule with `CAPABILITY_FALLBACK`.
fn inheritance(t: &Task, fork: Fork<'_>, caps: &Capabilities) -> Inheritance {
    let normal =
        t.sensitivity_declared && t.spec.sensitivity.as_deref() == Some("normal") && fork.sensitivity == "normal";
    Inheritance {
        affinity_high: true,
        safe: normal.then_some(true),
        within_budget: t.spec.affinity_approved,
        full_supported: caps.fork && fork.forkable,
        recent_supported: false,
        recent_sufficient: false,
    }
}

/// The limits a route is decided under: the run's policy and how deep in delegation it runs.
#[derive(Clone, Copy, Debug)]
pub struct Limits<'a> {
    /// The workgroup's context-efficiency policy.
    pub policy: &'a Policy,
    /// The coordinator's nesting depth (0 at the top).
    pub nesting_depth: u64,
}

/// The completed task whose session `t`'s `affinity` names: its lineage, session and
/// sensitivity. `None` when `t` names none (or that task did not complete).
pub fn affinity(g: &Workgroup, t: &Task) -> Option<(String, String, String)> {
    let a = t.spec.affinity.as_ref()?;
    let (_, done) = g.tasks.get(a)?.completed.as_ref()?;
    let sensitivity = g.plan.task(a)?.spec.sensitivity.clone().unwrap_or_else(|| "normal".to_owned());
    Some((lineage_id(&g.plan.workgroup, a), done.session_id.clone(), sensitivity))
}

/// Routes task `t`, running as `lineage`, against `ledger`: its routing facts
/// ([`decide::route_facts`]) with `candidate` (the warm lineage it continues, and whether that
/// may be resumed), the policy's limits, the ledger's active writers, the router's decision,
/// and a mode the provider's `caps` cannot run degraded to a fresh capsule with
/// `CAPABILITY_FALLBACK`. With context efficiency off the facts are the baseline's: no warm
/// candidate, nothing trivial done locally (ownership and the nesting limit still hold).
#[allow(clippy::too_many_arguments)]
pub fn route(
    t: &Task,
    lineage: &str,
    candidates: Candidates<'_>,
    ledger: &Ledger,
    caps: &Capabilities,
    limits: Limits<'_>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Routed, WorkgroupError> {
    let refused = |e: crate::ce::CeError| WorkgroupError::Route { task: t.id().to_owned(), detail: e.to_string() };
    let mut facts = decide::route_facts(t, candidates.resume, ledger.workspace()).map_err(refused)?;
    let p = limits.policy;
    facts.max_active_inherited = p.max_active_inherited;
    facts.max_nesting_depth = p.max_nesting_depth;
    facts.nesting_depth = limits.nesting_depth;
    facts.tight = t.spec.coupling.as_deref() == Some("tight");
    if let Some(fork) = candidates.fork {
        facts.inheritance = inheritance(t, fork, caps);
    }
    if !p.enabled {
        facts.lineage = None;
        facts.trivial = false;
        facts.tight = false;
        facts.inheritance = Inheritance::default();
    }
    ownership::apply_ledger(ledger, lineage, &mut facts).map_err(refused)?;
    let route = router::route(&facts).map_err(refused)?;
    let (runs_as, reasons) = provider::degrade(&route, caps);
    let ledger_events =
        ownership::route_events(ledger, lineage, &facts, &route, runs_as, ids, clock).map_err(refused)?;
    Ok(Routed { facts, route, runs_as, reasons, ledger_events })
}

/// The ledger events of resuming the warm session of lineage `prior` at `now_ns`: when its
/// capsule went stale (`stale`: the capsule its record names, and the capsule as sealed now),
/// `ce.lineage-reconciled` and the current capsule's `ce.capsule-sealed` first; then its lease
/// renewed for `warm_minutes`.
pub fn resumed(
    prior: &str,
    stale: Option<(Option<&str>, &Sealed)>,
    now_ns: i64,
    warm_minutes: u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Vec<EventData>, WorkgroupError> {
    let mut out = Vec::new();
    if let Some((recorded, current)) = stale {
        out.push(warm::reconciled(prior, recorded, &current.hash, now_ns, ids, clock)?);
        out.push(ledger::capsule_sealed(ids, clock, current).map_err(|e| WorkgroupError::Encode(e.detail))?);
    }
    out.push(warm::renewed(prior, now_ns, warm_minutes, ids, clock)?);
    Ok(out)
}

/// An attempt's end, as the coordinator judges it.
pub struct End<'a> {
    /// The task.
    pub task: &'a str,
    /// Its attempt.
    pub attempt: u32,
    /// What the adapter recorded of the worker's end.
    pub ended: &'a WorkerEnded,
    /// `None`: the task completed; otherwise why it failed.
    pub failure: Option<String>,
    /// The failure may be retried (a write violation that stops the task may not).
    pub retryable: bool,
    /// Files the completed task changed.
    pub files: Vec<String>,
    /// The commit holding its changes.
    pub commit: Option<String>,
    /// The handoff written for a completed result.
    pub handoff: Option<super::events::HandoffRef>,
    /// The provider resumes sessions: a completed one is kept warm on the ledger.
    pub keeps_warm: bool,
    /// The coordinator's clock.
    pub now_ns: i64,
    /// How long a warm session's lease lasts.
    pub warm_minutes: u64,
    /// What else the failure carries: a cap, the partial work, a failed check.
    pub failed_by: FailedBy,
}

/// What a failure carries besides its reason.
#[derive(Clone, Debug, Default)]
pub struct FailedBy {
    /// The cap the worker was interrupted at.
    pub capped: Option<super::caps::Reached>,
    /// Its partial changes, kept as an artifact.
    pub partial: Option<super::verify::ArtifactRef>,
    /// The check that failed.
    pub check: Option<super::verify::Check>,
    /// The provider refused the worker's credentials.
    pub authentication: bool,
}

/// What closing an attempt decided.
#[derive(Clone, Debug)]
pub struct Closed {
    /// `task.completed` or `task.failed`, for the workgroup's append.
    pub task_event: EventData,
    /// The claim's release and, for a completed session kept warm, its lineage and lease.
    pub ledger_events: Vec<EventData>,
    /// For a failure retried: the plan's backoff, milliseconds (0: at once).
    pub retry_ms: Option<u64>,
    /// The time its next attempt may be dispatched, as recorded.
    pub not_before_ns: Option<i64>,
}

/// Closes `end`'s attempt in workgroup `g`: completed (and kept warm when its provider resumes
/// sessions), or failed and retried after [`decide::retry`]'s backoff, of which `wait_ms` turns
/// the milliseconds into the wait the coordinator keeps (a simulated worker's passes like its
/// latency); and the claim of the task's lineage released.
pub fn close(
    g: &Workgroup,
    ledger: &Ledger,
    end: End<'_>,
    wait_ms: impl Fn(u64) -> u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Closed, WorkgroupError> {
    let x = end.ended;
    let session = x.session_id.clone().unwrap_or_default();
    let completed = end.failure.is_none();
    let (task_event, retry_ms, not_before_ns) = match end.failure {
        None => {
            let c = Completed {
                task: end.task.to_owned(),
                attempt: end.attempt,
                session_id: session.clone(),
                files: end.files,
                summary: x.summary.clone(),
                usage: x.usage,
                synthetic: x.synthetic,
                commit: end.commit,
                handoff: end.handoff,
            };
            (decide::completed(g, &c, ids, clock)?, None, None)
        }
        Some(reason) => {
            let by = end.failed_by;
            // A first cap falls back once, at once; a second fails the task. A refused
            // credential waits for the person the pause calls, then runs again.
            let caps_reached = g.tasks.get(end.task).map_or(0, |t| t.caps_reached);
            let (retry_ms, not_counted) = match (&by.capped, by.authentication) {
                (Some(_), _) if caps_reached <= 1 => (Some(0), true),
                (Some(_), _) => (None, false),
                (None, true) => (Some(0), true),
                (None, false) => (decide::retry(g, end.task, x.abandoned, end.retryable), false),
            };
            let not_before_ns = retry_ms.and_then(|ms| decide::not_before(end.now_ns, wait_ms(ms)));
            let f = Failed {
                task: end.task.to_owned(),
                attempt: end.attempt,
                session_id: x.session_id.clone(),
                reason,
                usage: x.usage,
                retry: retry_ms.is_some(),
                not_before_ns,
                capped: by.capped,
                partial: by.partial,
                check: by.check,
                not_counted,
            };
            (decide::failed(g, &f, ids, clock)?, retry_ms, not_before_ns)
        }
    };
    let lineage = lineage_id(&g.plan.workgroup, end.task);
    let mut ledger_events: Vec<EventData> = ownership::release_event(ledger, &lineage, ids, clock)
        .map_err(|e| WorkgroupError::Route { task: end.task.to_owned(), detail: e.to_string() })?
        .into_iter()
        .collect();
    if completed
        && end.keeps_warm
        && !session.is_empty()
        && let (Some(t), Some((_, d))) =
            (g.plan.task(end.task), g.tasks.get(end.task).and_then(|s| s.dispatch.as_ref()))
    {
        let parent = t.spec.continues.as_ref().or(t.spec.affinity.as_ref()).map(|p| lineage_id(&g.plan.workgroup, p));
        let c = warm::Completion {
            workgroup: &g.plan.workgroup,
            task: t,
            dispatch: d,
            session: &session,
            parent: parent.as_deref(),
            checkpoint: None,
            now_ns: end.now_ns,
            warm_minutes: end.warm_minutes,
        };
        ledger_events.extend(warm::completed(ledger, &c, ids, clock)?);
    }
    Ok(Closed { task_event, ledger_events, retry_ms, not_before_ns })
}
