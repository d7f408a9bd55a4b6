//! Pure workgroup decisions. Each returns events for the workgroup's stream, checked against the
//! task's folded state, for one append expecting the stream version they were decided at; the
//! adapter adds the ledger and prompt events that belong to the same step to the same batch.

use serde::Serialize;
use strata_journal::{EventData, ExpectedVersion, StreamAppend};

use super::WorkgroupError;
use super::events::{
    self, Completed, Dispatched, Failed, Finished, Held, Planned, Violation, WorkerEnded, WorkerStarted,
};
use super::plan::{Checked, PHASES, RETRY_BACKOFF_MS_MAX, Task};
use super::state::{Status, Workgroup, Workgroups, stream, worker_stream};
use crate::ce::CeError;
use crate::ce::paths::Workspace;
use crate::ce::router::{LineageFacts, RouteFacts, Sensitivity, canonical_owned};
use crate::ports::{Clock, Ids};

/// Builds one event, stamped by the ports.
pub fn event(
    ids: &mut dyn Ids,
    clock: &dyn Clock,
    t: &str,
    payload: &impl Serialize,
) -> Result<EventData, WorkgroupError> {
    crate::ce::ledger::event(ids, clock, t, payload).map_err(|e| WorkgroupError::Encode(e.detail))
}

/// The append of `events` to `g`'s stream, expecting its folded version.
pub fn append(g: &Workgroup, events: Vec<EventData>) -> StreamAppend {
    StreamAppend { stream: stream(&g.plan.workgroup), expected: ExpectedVersion::Exact(g.version), events }
}

/// `workgroup.planned` for a new workgroup; refused when the journal has one of that name.
pub fn plan(
    state: &Workgroups,
    plan: Checked,
    seed: u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    plan_started(state, plan, seed, events::RunStart::default(), &super::policy::Policy::default(), ids, clock)
}

/// [`plan`], recording what the run is started on.
pub fn plan_started(
    state: &Workgroups,
    plan: Checked,
    seed: u64,
    started: events::RunStart,
    policy: &super::policy::Policy,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    if state.get(&plan.workgroup).is_some() {
        return Err(WorkgroupError::AlreadyPlanned(plan.workgroup));
    }
    let json = serde_json::to_value(&plan).map_err(|e| WorkgroupError::Encode(e.to_string()))?;
    let plan_digest = crate::canonical::hash(&json).to_hex();
    let s = stream(&plan.workgroup);
    let mut header = plan;
    let tasks = std::mem::take(&mut header.tasks);
    let planned = Planned { plan: header, task_count: tasks.len() as u64, plan_digest, seed, started };
    let mut out = vec![event(ids, clock, events::PLANNED, &planned)?];
    let mut chunk: Vec<super::plan::Task> = Vec::new();
    let mut bytes = 0usize;
    for t in tasks {
        let size = serde_json::to_vec(&t).map_err(|e| WorkgroupError::Encode(e.to_string()))?.len();
        if !chunk.is_empty() && bytes + size > events::TASKS_CHUNK_BYTES {
            out.push(event(
                ids,
                clock,
                events::TASKS_ADDED,
                &events::TasksAdded { tasks: std::mem::take(&mut chunk) },
            )?);
            bytes = 0;
        }
        bytes += size;
        chunk.push(t);
    }
    if !chunk.is_empty() {
        out.push(event(ids, clock, events::TASKS_ADDED, &events::TasksAdded { tasks: chunk })?);
    }
    let set = super::policy::PolicySet { policy: policy.clone(), replaces: None };
    out.push(event(ids, clock, events::POLICY_SET, &set)?);
    Ok(StreamAppend { stream: s, expected: ExpectedVersion::EMPTY, events: out })
}

/// `workgroup.policy-set` when a run of `g` is to work under `policy` and the recorded one
/// differs (a resumed run under a changed configuration); nothing when they agree.
pub fn policy_changed(
    g: &Workgroup,
    policy: &super::policy::Policy,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Option<StreamAppend>, WorkgroupError> {
    if g.policy == *policy {
        return Ok(None);
    }
    let set = super::policy::PolicySet { policy: policy.clone(), replaces: Some(g.policy.profile) };
    Ok(Some(append(g, vec![event(ids, clock, events::POLICY_SET, &set)?])))
}

/// What to do next in a workgroup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Next {
    /// Tasks to dispatch now, in schedule order, at most the free worker slots.
    pub dispatch: Vec<String>,
    /// Tasks that can never run, with why.
    pub hold: Vec<Held>,
    /// Every task is completed, failed or held (after `hold` is recorded).
    pub done: bool,
    /// The earliest time a task now waiting out its retry's backoff may be dispatched: with
    /// nothing in flight and nothing to dispatch, wait until then.
    pub wake_at_ns: Option<i64>,
}

/// Most blockers named in one `task.held` (the rest are counted in its reason).
pub const BLOCKERS_NAMED_MAX: usize = 16;

/// The tasks ready to dispatch at `now_ns` (dependencies completed, every earlier phase
/// completed, a retry's backoff over) up to the free slots, and the pending tasks a failure
/// blocks for good (a dependency failed, conflicted or held, or an earlier phase did not
/// complete). One pass over the plan in schedule order, which runs phase by phase, so what
/// earlier phases hold is known when a phase starts.
pub fn next(g: &Workgroup, now_ns: i64) -> Next {
    if g.paused.is_some() {
        // A safety boundary: nothing new starts and nothing is held until a person acts.
        return Next::default();
    }
    let status = |id: &str| g.tasks.get(id).map_or(Status::Pending, |t| t.status);
    let running = g.tasks.values().filter(|t| matches!(t.status, Status::Dispatched | Status::Running)).count();
    let mut free = (g.plan.parallel as usize).saturating_sub(running);
    let mut out = Next::default();
    let mut blocked: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    // Earlier phases: whether all completed, and which tasks block for good (with the phase of
    // the first); then the same for the phase being walked.
    let (mut earlier_open, mut earlier_blockers, mut earlier_first) = (false, Vec::<&str>::new(), None);
    let (mut phase, mut phase_open, mut phase_blockers) = (0usize, false, Vec::<&str>::new());
    for t in &g.plan.tasks {
        if t.phase != phase {
            earlier_open |= phase_open;
            if earlier_first.is_none() && !phase_blockers.is_empty() {
                earlier_first = Some(phase);
            }
            earlier_blockers.append(&mut phase_blockers);
            phase = t.phase;
            phase_open = false;
        }
        let st = status(t.id());
        let mut deps: Vec<&str> =
            t.spec.after.iter().map(String::as_str).filter(|d| status(d).blocks() || blocked.contains(d)).collect();
        if st.blocks() {
            phase_blockers.push(t.id());
        }
        phase_open |= st != Status::Completed;
        if st != Status::Pending {
            continue;
        }
        if !deps.is_empty() || !earlier_blockers.is_empty() {
            let reason = if deps.is_empty() {
                format!(
                    "phase {} did not complete, so phase {} does not start",
                    PHASES[earlier_first.unwrap_or_default()],
                    PHASES[t.phase]
                )
            } else {
                "a task it waits for failed, conflicted or was held".to_owned()
            };
            deps.extend(earlier_blockers.iter().copied());
            deps.sort_unstable();
            deps.dedup();
            let more = deps.len().saturating_sub(BLOCKERS_NAMED_MAX);
            let reason = if more > 0 { format!("{reason} (and {more} more)") } else { reason };
            let blocked_by = deps.iter().take(BLOCKERS_NAMED_MAX).map(|d| (*d).to_owned()).collect();
            blocked.insert(t.id());
            phase_blockers.push(t.id());
            out.hold.push(Held { task: t.id().to_owned(), blocked_by, reason, gate: None });
            continue;
        }
        let deps_done = t.spec.after.iter().all(|d| status(d) == Status::Completed);
        let waits = g.tasks.get(t.id()).and_then(|s| s.not_before_ns()).filter(|at| *at > now_ns);
        if let (Some(at), true) = (waits, deps_done && !earlier_open) {
            out.wake_at_ns = Some(out.wake_at_ns.map_or(at, |w| w.min(at)));
            continue;
        }
        if deps_done && !earlier_open && free > 0 {
            out.dispatch.push(t.id().to_owned());
            free -= 1;
        }
    }
    let open = g.tasks.iter().filter(|(id, t)| !t.status.is_terminal() && !blocked.contains(id.as_str())).count();
    out.done = open == 0;
    out
}

fn order(task: &str, rule: impl Into<String>) -> WorkgroupError {
    WorkgroupError::Order { task: task.to_owned(), rule: rule.into() }
}

/// Event `t` about `task`'s `attempt`, refused unless the task's state admits it (the same
/// rule the fold applies: [`super::state::admits`]).
fn task_event(
    g: &Workgroup,
    task: &str,
    attempt: u32,
    t: &str,
    payload: &impl Serialize,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let state =
        g.tasks.get(task).ok_or_else(|| order(task, format!("not a task of workgroup {}", g.plan.workgroup)))?;
    super::state::admits(state, t, attempt).map_err(|rule| order(task, rule))?;
    event(ids, clock, t, payload)
}

/// `task.dispatched`: a pending task's first attempt, or the next attempt of a task whose
/// coordinator stopped while it was dispatched or running.
pub fn dispatched(
    g: &Workgroup,
    d: &Dispatched,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    task_event(g, &d.task, d.attempt, events::DISPATCHED, d, ids, clock)
}

/// `worker.started`, the first event on the attempt's worker stream (expected empty: a second
/// start of one attempt is a version conflict, never a second record).
pub fn started(
    workgroup: &str,
    s: &WorkerStarted,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    Ok(StreamAppend {
        stream: worker_stream(workgroup, &s.task, s.attempt),
        expected: ExpectedVersion::EMPTY,
        events: vec![event(ids, clock, events::WORKER_STARTED, s)?],
    })
}

/// The end of the attempt's worker: its output excerpt (when there is one) and
/// `worker.completed` or `worker.failed`, after the `worker.started` when `started` (expecting
/// the stream at that version, so one attempt ends once).
pub fn worker_ended(
    workgroup: &str,
    e: &WorkerEnded,
    succeeded: bool,
    output: &str,
    started: bool,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    worker_end(workgroup, &EndRecord { ended: e, succeeded, output, started, capped: None, checked: None }, ids, clock)
}

/// Everything the adapter records at a worker's end.
#[derive(Clone, Copy, Debug)]
pub struct EndRecord<'a> {
    /// How it ended.
    pub ended: &'a WorkerEnded,
    /// By its provider's rules.
    pub succeeded: bool,
    /// Its output excerpt (may be empty).
    pub output: &'a str,
    /// Its `worker.started` is recorded.
    pub started: bool,
    /// The cap it was interrupted at.
    pub capped: Option<&'a super::caps::Capped>,
    /// Its `verify` commands' results.
    pub checked: Option<&'a super::verify::Checked>,
}

/// [`worker_ended`] with the cap the worker was stopped at (`worker.capped`) and the results of
/// its checks (`worker.checked`) before its end, in one append. A capped or failed check makes
/// the end `worker.failed`.
pub fn worker_end(
    workgroup: &str,
    x: &EndRecord<'_>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    let (e, output, started) = (x.ended, x.output, x.started);
    let mut out = Vec::new();
    if started && !output.is_empty() {
        let o = events::WorkerOutput { task: e.task.clone(), attempt: e.attempt, text: events::bounded(output) };
        out.push(event(ids, clock, events::WORKER_OUTPUT, &o)?);
    }
    if let (true, Some(c)) = (started, x.capped) {
        out.push(event(ids, clock, events::WORKER_CAPPED, c)?);
    }
    if let (true, Some(c)) = (started, x.checked) {
        out.push(event(ids, clock, events::WORKER_CHECKED, c)?);
    }
    let succeeded = x.succeeded && x.capped.is_none();
    let t = if succeeded && started { events::WORKER_COMPLETED } else { events::WORKER_FAILED };
    out.push(event(ids, clock, t, e)?);
    Ok(StreamAppend {
        stream: worker_stream(workgroup, &e.task, e.attempt),
        expected: ExpectedVersion::Exact(u64::from(started)),
        events: out,
    })
}

/// The routing facts of dispatching `t`, its owned files canonical under `ws`: role, owned
/// files, sensitivity, `trivial`, review independence, a capsule that suffices; with `prior` (the
/// lineage it continues, and whether the ledger keeps that lineage's session resumable) the
/// candidate lineage. Limits are the router's defaults; active writers come from the ledger.
pub fn route_facts(t: &Task, prior: Option<(&str, bool)>, ws: &Workspace) -> Result<RouteFacts, CeError> {
    let mut f = RouteFacts {
        role: Some(t.spec.role.clone()),
        sensitivity: Sensitivity::parse(t.spec.sensitivity.as_deref()),
        trivial: t.spec.trivial,
        independent_reviewer: PHASES[t.phase] == "review",
        capsule_sufficient: Some(true),
        lineage: prior.map(|(lineage, warm)| LineageFacts {
            compatible: warm,
            resumable: warm,
            role: Some(t.spec.role.clone()),
            lineage_id: Some(lineage.to_owned()),
        }),
        ..RouteFacts::defaults()
    };
    let owned = t.spec.owns.iter().map(|p| canonical_owned(ws, p, "input.owned_files")).collect::<Result<_, _>>()?;
    f.set_proposed(owned)?;
    Ok(f)
}

/// Whether `task`'s failed attempt runs again, and how many milliseconds later: at once when its
/// worker was abandoned by a stopped run (not the task's own failure); otherwise when the failure
/// allows a retry (`retryable`) and the task's own failures so far leave retries in the plan,
/// after the plan's backoff, doubled for each of the task's own failures before this one, at
/// most [`RETRY_BACKOFF_MS_MAX`]. `None`: it does not run again.
///
/// Without the backoff a provider outage would spend every retry within seconds and fail the
/// task (the `coordinator-faults` simulation found this).
pub fn retry(g: &Workgroup, task: &str, abandoned: bool, retryable: bool) -> Option<u64> {
    if abandoned {
        return Some(0);
    }
    let failures = g.tasks.get(task).map_or(0, |t| t.failures);
    if !retryable || failures >= g.plan.retries {
        return None;
    }
    let doubled = g.plan.retry_backoff_ms.saturating_mul(1u64 << failures.min(32));
    Some(doubled.min(RETRY_BACKOFF_MS_MAX))
}

/// The `not_before_ns` a failure records for a retry `wait_ms` after `now_ns` (none for no wait).
pub fn not_before(now_ns: i64, wait_ms: u64) -> Option<i64> {
    let wait_ns = i64::try_from(wait_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
    (wait_ms > 0).then(|| now_ns.saturating_add(wait_ns))
}

/// An attempt a stopped run left without a recorded end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Open {
    /// Dispatched, never started: start it now (the same attempt).
    Unstarted {
        /// Task.
        task: String,
        /// Attempt.
        attempt: u32,
    },
    /// Started, never seen to end: its worker is gone with the run (release it if it lives) and
    /// is recorded as abandoned; the task runs again as its next attempt.
    Orphaned {
        /// Task.
        task: String,
        /// Attempt.
        attempt: u32,
        /// Its session, when known.
        session_id: Option<String>,
        /// Its process (group), when a real worker recorded one.
        pid: Option<u64>,
        /// Its provider.
        provider: String,
    },
}

/// The attempts open in `g`, in task order.
pub fn open_attempts(g: &Workgroup) -> Vec<Open> {
    g.tasks
        .iter()
        .filter(|(_, t)| t.worker_end.is_none())
        .filter_map(|(id, t)| match t.status {
            Status::Dispatched => Some(Open::Unstarted { task: id.clone(), attempt: t.attempts }),
            Status::Running => Some(Open::Orphaned {
                task: id.clone(),
                attempt: t.attempts,
                session_id: t.session_id.clone(),
                pid: t.pid,
                provider: t.dispatch.as_ref().map(|(_, d)| d.provider.clone()).unwrap_or_default(),
            }),
            _ => None,
        })
        .collect()
}

/// The end recorded for an orphaned worker: abandoned, with `summary` saying what became of it.
pub fn abandoned(
    task: &str,
    attempt: u32,
    session_id: Option<String>,
    summary: String,
    synthetic: bool,
) -> WorkerEnded {
    WorkerEnded {
        task: task.to_owned(),
        attempt,
        session_id,
        summary,
        usage: Default::default(),
        accounting: None,
        synthetic,
        abandoned: true,
        ..WorkerEnded::default()
    }
}

/// `task.completed` for the running attempt whose worker completed.
pub fn completed(
    g: &Workgroup,
    c: &Completed,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    task_event(g, &c.task, c.attempt, events::COMPLETED, c, ids, clock)
}

/// `task.failed` for the dispatched or running attempt.
pub fn failed(g: &Workgroup, f: &Failed, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<EventData, WorkgroupError> {
    task_event(g, &f.task, f.attempt, events::FAILED, f, ids, clock)
}

/// `task.held` for a pending task.
pub fn held(g: &Workgroup, h: &Held, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<EventData, WorkgroupError> {
    let attempts = g.tasks.get(&h.task).map_or(0, |t| t.attempts);
    task_event(g, &h.task, attempts, events::HELD, h, ids, clock)
}

/// `task.write-violation` for the current attempt, naming at least one path.
pub fn violation(
    g: &Workgroup,
    v: &Violation,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    if v.paths.is_empty() {
        return Err(order(&v.task, "a violation names at least one path"));
    }
    task_event(g, &v.task, v.attempt, events::VIOLATION, v, ids, clock)
}

/// `task.conflicted` for a completed task.
pub fn conflicted(
    g: &Workgroup,
    c: &events::Conflicted,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    task_event(g, &c.task, c.attempt, events::CONFLICTED, c, ids, clock)
}

/// `workgroup.finished`, once every task is completed, failed or held.
pub fn finished(g: &Workgroup, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<Option<EventData>, WorkgroupError> {
    if g.finished || !g.all_ended() {
        return Ok(None);
    }
    let f = Finished {
        completed: g.count(Status::Completed) as u64,
        failed: g.count(Status::Failed) as u64,
        held: g.count(Status::Held) as u64,
    };
    event(ids, clock, events::FINISHED, &f).map(Some)
}

/// `task.held` for each of `held`, as one append to the workgroup's stream.
pub fn holds(
    g: &Workgroup,
    held: &[Held],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    let mut out = Vec::with_capacity(held.len());
    for h in held {
        out.push(self::held(g, h, ids, clock)?);
    }
    Ok(append(g, out))
}

/// [`finished`] as an append to the workgroup's stream, when it is due.
pub fn finish(g: &Workgroup, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<Option<StreamAppend>, WorkgroupError> {
    Ok(finished(g, ids, clock)?.map(|e| append(g, vec![e])))
}

/// The pause a workgroup's own state calls for: its spend reached a workgroup cap.
pub fn pause_needed(g: &Workgroup) -> Option<super::caps::Paused> {
    // Nothing left to dispatch: nothing to pause.
    if g.paused.is_some() || g.finished || g.all_ended() {
        return None;
    }
    let r = super::caps::workgroup_reached(g)?;
    Some(super::caps::Paused {
        reason: super::caps::PauseReason::WorkgroupCap,
        reached: Some(r),
        task: None,
        detail: format!("the workgroup's {}", r.describe()),
    })
}

/// `workgroup.paused`.
pub fn paused(
    g: &Workgroup,
    p: &super::caps::Paused,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    Ok(append(g, vec![event(ids, clock, events::PAUSED, p)?]))
}

/// `workgroup.suite-checked`: a run of the consolidated suite, as the edge ran it.
pub fn suite_checked(
    g: &Workgroup,
    x: &super::verify::SuiteChecked,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    Ok(append(g, vec![event(ids, clock, events::SUITE_CHECKED, x)?]))
}

/// `workgroup.phase-planned`: a phase's prompts, as the edge assembled and verified them.
pub fn phase_planned(
    g: &Workgroup,
    x: &super::gates::PhasePlanned,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    Ok(append(g, vec![event(ids, clock, events::PHASE_PLANNED, x)?]))
}

/// `workgroup.knowledge-probed`: a probe of the knowledge server, as the edge made it.
pub fn knowledge_probed(
    g: &Workgroup,
    x: &super::health::Probed,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, WorkgroupError> {
    Ok(append(g, vec![event(ids, clock, events::KNOWLEDGE_PROBED, x)?]))
}

/// `workgroup.unpaused`, when a resumed run continues a paused workgroup (else nothing).
pub fn unpaused(g: &Workgroup, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<Option<StreamAppend>, WorkgroupError> {
    let Some(p) = &g.paused else { return Ok(None) };
    let u = super::caps::Unpaused { reason: p.reason };
    Ok(Some(append(g, vec![event(ids, clock, events::UNPAUSED, &u)?])))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::workgroup::plan::{Plan, check};

    fn task(id: &str, role: &str, phase: &str) -> Task {
        // A role that writes owns `src/a/`; one that does not owns nothing.
        let writes = crate::workgroup::roles::role(role).is_some_and(|r| r.writes);
        let owns = if writes { json!(["src/a/"]) } else { json!([]) };
        let plan: Plan = serde_json::from_value(json!({
            "workgroup": "wg",
            "pipeline": "light",
            "task": [{"id": id, "role": role, "phase": phase, "objective": "Do it.", "owns": owns,
                      "sensitivity": "restricted"}],
        }))
        .expect("plan");
        check(&plan).expect("checks").tasks.remove(0)
    }

    #[test]
    fn route_facts_carry_the_facts_the_router_needs_and_the_warm_candidate() {
        let ws = Workspace::default();
        let t = task("api", "backend-builder", "build");
        let facts = route_facts(&t, None, &ws).unwrap();
        assert_eq!(facts.proposed, vec!["src/a"]);
        assert_eq!(facts.sensitivity, Sensitivity::Restricted);
        assert!(!facts.independent_reviewer);
        assert!(facts.lineage.is_none());
        let warm = route_facts(&t, Some(("wg.prior", true)), &ws).unwrap();
        let candidate = LineageFacts {
            compatible: true,
            resumable: true,
            role: Some("backend-builder".to_owned()),
            lineage_id: Some("wg.prior".to_owned()),
        };
        assert_eq!(warm.lineage, Some(candidate));
        let review = task("review", "reviewer", "review");
        assert!(route_facts(&review, Some(("wg.prior", false)), &ws).unwrap().independent_reviewer);
    }

    #[test]
    fn route_facts_are_the_facts_the_wire_reads_from_the_same_task() {
        // The JSON the router used to be given, read by the wire: the typed facts are the same.
        let ws = Workspace::default();
        for (t, prior) in [
            (task("api", "backend-builder", "build"), None),
            (task("api", "backend-builder", "build"), Some(("wg.prior", true))),
            (task("review", "reviewer", "review"), Some(("wg.prior", false))),
        ] {
            let mut input = json!({
                "role": t.spec.role, "owned_files": t.spec.owns, "sensitivity": t.spec.sensitivity,
                "trivial": t.spec.trivial, "independent_reviewer": PHASES[t.phase] == "review",
                "capsule_sufficient": true,
            });
            if let Some((lineage, warm)) = prior {
                input["lineage"] =
                    json!({"lineage_id": lineage, "role": t.spec.role, "compatible": warm, "resumable": warm});
            }
            assert_eq!(route_facts(&t, prior, &ws).unwrap(), RouteFacts::from_json(&input, &ws).unwrap());
        }
    }

    /// Appends `append` and folds the journal.
    fn step(journal: &strata_journal::Journal, groups: &mut Workgroups, append: StreamAppend) {
        journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
        strata_journal::projection::catch_up_one(groups, journal).expect("fold");
    }

    #[test]
    fn a_failed_task_is_retried_after_a_doubling_backoff_and_an_abandoned_one_at_once() {
        use crate::ports::{CountingIds, FixedClock};
        use crate::workgroup::events::PromptRef;

        const MS: i64 = 1_000_000;
        let plan: Plan = serde_json::from_value(json!({
            "workgroup": "wg", "pipeline": "light", "retries": 2, "retry_backoff_ms": 1_000,
            "task": [{"id": "api", "role": "backend-builder", "objective": "Build it.", "owns": ["src/a/"]}],
        }))
        .expect("plan");
        let checked = check(&plan).expect("checks");
        let journal = strata_journal::Journal::in_memory("retry").expect("journal");
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let mut groups = Workgroups::default();
        let planned = super::plan(&groups, checked, 1, &mut ids, &clock).expect("plan events");
        step(&journal, &mut groups, planned);
        let mut now = 5_000 * MS;
        let mut waits = Vec::new();
        for attempt in 1..=4 {
            let g = groups.get("wg").expect("planned");
            let ready = next(g, now);
            assert_eq!(ready.dispatch, ["api"], "attempt {attempt} is dispatched once its backoff ran out");
            let d = Dispatched {
                task: "api".into(),
                attempt,
                lineage_id: "wg.api".into(),
                provider: "sim".into(),
                routed: crate::ce::router::Mode::FreshCapsule,
                runs_as: crate::ce::router::Mode::FreshCapsule,
                reason_codes: Vec::new(),
                prompt: PromptRef { prompt_task: "wg.api".into(), prompt_hash: "sha256:00".into(), tokens: 1 },
                baseline_tokens: 0,
                from_session: None,
                capsule_hash: None,
                lineage_check: None,
                gate: None,
                evidence: None,
                caps: Default::default(),
                fallback_after: None,
                without_knowledge: false,
                model: None,
            };
            let a = append(g, vec![dispatched(g, &d, &mut ids, &clock).expect("dispatch")]);
            step(&journal, &mut groups, a);
            let g = groups.get("wg").expect("planned");
            // Attempt 2's worker is abandoned by a stopped run: not the task's failure.
            let stopped = attempt == 2;
            let backoff = retry(g, "api", stopped, true);
            let f = Failed {
                task: "api".into(),
                attempt,
                session_id: None,
                reason: "provider unavailable".into(),
                usage: Default::default(),
                retry: backoff.is_some(),
                not_before_ns: backoff.and_then(|ms| not_before(now, ms)),
                ..Failed::default()
            };
            if stopped {
                let end = abandoned("api", attempt, None, "its run stopped".into(), true);
                step(&journal, &mut groups, worker_ended("wg", &end, false, "", false, &mut ids, &clock).expect("end"));
            }
            let g = groups.get("wg").expect("planned");
            let a = append(g, vec![failed(g, &f, &mut ids, &clock).expect("failed")]);
            step(&journal, &mut groups, a);
            waits.push(backoff);
            let Some(wait) = backoff else { break };
            let g = groups.get("wg").expect("planned");
            let waiting = next(g, now);
            if wait > 0 {
                assert!(waiting.dispatch.is_empty() && !waiting.done, "{waiting:?}");
                assert_eq!(waiting.wake_at_ns, Some(now + wait as i64 * MS));
                now += wait as i64 * MS;
            } else {
                assert_eq!(waiting.wake_at_ns, None);
            }
        }
        assert_eq!(waits, [Some(1_000), Some(0), Some(2_000), None], "1 s, at once, 2 s, retries spent");
        let g = groups.get("wg").expect("planned");
        assert_eq!(g.tasks["api"].status, Status::Failed);
        assert!(next(g, now).done);
    }
}
