//! Pure workgroup decisions. Each returns events for the workgroup's stream, checked against the
//! task's folded state, for one append expecting the stream version they were decided at; the
//! adapter adds the ledger and prompt events that belong to the same step to the same batch.

use serde::Serialize;
use strata_journal::{EventData, ExpectedVersion, StreamAppend};

use super::WorkgroupError;
use super::events::{self, Completed, Dispatched, Failed, Finished, Held, Planned, Violation, WorkerStarted};
use super::plan::{Checked, PHASES};
use super::state::{Status, Workgroup, Workgroups, stream};
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
    if state.get(&plan.workgroup).is_some() {
        return Err(WorkgroupError::AlreadyPlanned(plan.workgroup));
    }
    let json = serde_json::to_value(&plan).map_err(|e| WorkgroupError::Encode(e.to_string()))?;
    let plan_digest = crate::canonical::hash(&json).to_hex();
    let s = stream(&plan.workgroup);
    let mut header = plan;
    let tasks = std::mem::take(&mut header.tasks);
    let planned = Planned { plan: header, task_count: tasks.len() as u64, plan_digest, seed };
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
    Ok(StreamAppend { stream: s, expected: ExpectedVersion::EMPTY, events: out })
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
}

/// Most blockers named in one `task.held` (the rest are counted in its reason).
pub const BLOCKERS_NAMED_MAX: usize = 16;

/// The tasks ready to dispatch (dependencies completed, every earlier phase completed) up to the
/// free slots, and the pending tasks a failure blocks for good (a dependency failed, conflicted
/// or held, or an earlier phase did not complete). One pass over the plan in schedule order,
/// which runs phase by phase, so what earlier phases hold is known when a phase starts.
pub fn next(g: &Workgroup) -> Next {
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
            out.hold.push(Held { task: t.id().to_owned(), blocked_by, reason });
            continue;
        }
        let deps_done = t.spec.after.iter().all(|d| status(d) == Status::Completed);
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

fn state_of<'a>(g: &'a Workgroup, task: &str) -> Result<&'a super::state::TaskState, WorkgroupError> {
    g.tasks.get(task).ok_or_else(|| order(task, format!("not a task of workgroup {}", g.plan.workgroup)))
}

/// `task.dispatched`: a pending task's first attempt, or the next attempt of a task whose
/// coordinator stopped while it was dispatched or running.
pub fn dispatched(
    g: &Workgroup,
    d: &Dispatched,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &d.task)?;
    if t.status.is_terminal() || d.attempt != t.attempts + 1 {
        return Err(order(
            &d.task,
            format!("is {} after {} attempt(s); cannot dispatch attempt {}", t.status.as_str(), t.attempts, d.attempt),
        ));
    }
    event(ids, clock, events::DISPATCHED, d)
}

/// `worker.started` for the task's current attempt.
pub fn started(
    g: &Workgroup,
    s: &WorkerStarted,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &s.task)?;
    if t.status != Status::Dispatched || s.attempt != t.attempts {
        return Err(order(
            &s.task,
            format!("is {}, attempt {}; a worker starts only for a dispatched attempt", t.status.as_str(), t.attempts),
        ));
    }
    event(ids, clock, events::WORKER_STARTED, s)
}

/// `task.completed` for the running attempt.
pub fn completed(
    g: &Workgroup,
    c: &Completed,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &c.task)?;
    if t.status != Status::Running || c.attempt != t.attempts {
        return Err(order(
            &c.task,
            format!("is {}, attempt {}; only a running attempt completes", t.status.as_str(), t.attempts),
        ));
    }
    event(ids, clock, events::COMPLETED, c)
}

/// `task.failed` for the dispatched or running attempt.
pub fn failed(g: &Workgroup, f: &Failed, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &f.task)?;
    if !matches!(t.status, Status::Dispatched | Status::Running) || f.attempt != t.attempts {
        return Err(order(
            &f.task,
            format!("is {}, attempt {}; only an open attempt fails", t.status.as_str(), t.attempts),
        ));
    }
    event(ids, clock, events::FAILED, f)
}

/// `task.held` for a pending task.
pub fn held(g: &Workgroup, h: &Held, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &h.task)?;
    if t.status != Status::Pending {
        return Err(order(&h.task, format!("is {}; only a pending task is held", t.status.as_str())));
    }
    event(ids, clock, events::HELD, h)
}

/// `task.write-violation` for the current attempt.
pub fn violation(
    g: &Workgroup,
    v: &Violation,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &v.task)?;
    if v.attempt != t.attempts || v.paths.is_empty() {
        return Err(order(&v.task, "a violation names the current attempt and at least one path"));
    }
    event(ids, clock, events::VIOLATION, v)
}

/// `task.conflicted` for a completed task.
pub fn conflicted(
    g: &Workgroup,
    c: &events::Conflicted,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<EventData, WorkgroupError> {
    let t = state_of(g, &c.task)?;
    if t.status != Status::Completed || c.attempt != t.attempts {
        return Err(order(&c.task, format!("is {}; only a completed task's changes conflict", t.status.as_str())));
    }
    event(ids, clock, events::CONFLICTED, c)
}

/// `workgroup.finished`, once every task is completed, failed or held.
pub fn finished(g: &Workgroup, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<Option<EventData>, WorkgroupError> {
    if g.finished || g.tasks.len() as u64 != g.task_count || !g.tasks.values().all(|t| t.status.is_terminal()) {
        return Ok(None);
    }
    let f = Finished {
        completed: g.count(Status::Completed) as u64,
        failed: g.count(Status::Failed) as u64,
        held: g.count(Status::Held) as u64,
    };
    event(ids, clock, events::FINISHED, &f).map(Some)
}
