//! The `workgroups` projection: every workgroup's plan and the state of each task, the sessions
//! that ran them, and for each file the writes that touched it (from completed tasks' post-turn
//! diffs and from the write guard's allowed calls), so `strata audit` answers from the journal.
//!
//! The fold is strict: an event out of its task's order (completed before dispatched, a second
//! plan for one workgroup, a stale attempt) is an error, never silently absorbed.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use strata_journal::Record;

use super::events::{self, Completed, Dispatched, Failed, Held, Planned, Violation, WorkerEnded, WorkerStarted};
use super::plan::Checked;
use crate::guard::{self, Verdict};
use crate::projections::kept::EventLog;
use crate::telemetry::events::Counters;

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Not started.
    Pending,
    /// Routed and claimed; no session yet.
    Dispatched,
    /// A worker runs it.
    Running,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Completed, but its changes did not apply to the integration branch.
    Conflicted,
    /// Cannot run: a dependency failed.
    Held,
}

impl Status {
    /// Completed, failed, conflicted or held.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Conflicted | Status::Held)
    }

    /// Failed, conflicted or held: what depends on it can never run.
    pub fn blocks(self) -> bool {
        matches!(self, Status::Failed | Status::Conflicted | Status::Held)
    }

    /// Name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Dispatched => "dispatched",
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Conflicted => "conflicted",
            Status::Held => "held",
        }
    }
}

/// The one rule of a task's order, shared by the fold and the deciders: whether an event of
/// `event_type` for `attempt` may follow the task's state. A dispatch opens the next attempt of
/// a task not yet ended; the start, output, outcome, violation and conflict events name the
/// current attempt, each from its own state: the worker's events come before its end, the
/// task's completion after the worker's; only a pending task is held.
pub fn admits(t: &TaskState, event_type: &str, attempt: u32) -> Result<(), String> {
    let current = attempt == t.attempts;
    let open = t.worker_end.is_none();
    let ok = match event_type {
        events::DISPATCHED => !t.status.is_terminal() && attempt == t.attempts + 1,
        events::WORKER_STARTED => current && open && t.status == Status::Dispatched,
        events::WORKER_OUTPUT | events::WORKER_COMPLETED => current && open && t.status == Status::Running,
        events::WORKER_FAILED => current && open && matches!(t.status, Status::Dispatched | Status::Running),
        events::COMPLETED => {
            current && t.status == Status::Running && t.worker_end.as_ref().is_some_and(|e| e.succeeded)
        }
        events::FAILED => current && matches!(t.status, Status::Dispatched | Status::Running),
        events::CONFLICTED => current && t.status == Status::Completed,
        events::VIOLATION => current,
        events::WORKER_CAPPED | events::WORKER_CHECKED => current && open && t.status == Status::Running,
        events::HELD => t.status == Status::Pending,
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let worker = match &t.worker_end {
        Some(e) if e.succeeded => ", its worker completed",
        Some(_) => ", its worker failed",
        None => "",
    };
    Err(format!(
        "{event_type} for attempt {attempt} cannot follow a task that is {} after {} attempt(s){worker}",
        t.status.as_str(),
        t.attempts
    ))
}

/// How the current attempt's worker ended (`worker.completed` or `worker.failed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerEnd {
    /// Journal sequence of the event.
    pub seq: u64,
    /// `worker.completed`, not `worker.failed`.
    pub succeeded: bool,
    /// What the adapter recorded.
    pub ended: WorkerEnded,
}

/// One task as folded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskState {
    /// Where it is.
    pub status: Status,
    /// Attempts dispatched.
    pub attempts: u32,
    /// The latest dispatch.
    pub dispatch: Option<(u64, Dispatched)>,
    /// The latest worker session.
    pub session_id: Option<String>,
    /// The latest real worker's process, while it runs.
    pub pid: Option<u64>,
    /// How the current attempt's worker ended, once its adapter recorded it.
    pub worker_end: Option<WorkerEnd>,
    /// The completion.
    pub completed: Option<(u64, Completed)>,
    /// The failure.
    pub failed: Option<(u64, Failed)>,
    /// Why it is held.
    pub held: Option<Held>,
    /// The conflict applying its changes.
    pub conflicted: Option<events::Conflicted>,
    /// Write violations found.
    pub violations: Vec<Violation>,
    /// Bytes of `worker.output` recorded.
    pub output_bytes: u64,
    /// Usage of every attempt, summed.
    pub spent: Counters,
    /// Attempts that failed on their own: every `task.failed` but those of workers a stopped
    /// run abandoned. The plan's retries are counted against these.
    pub failures: u32,
    /// Model turns of every attempt whose worker showed them, summed.
    pub turns: u32,
    /// The cap the current attempt's worker was interrupted at (`worker.capped`).
    pub capped: Option<super::caps::Capped>,
    /// Attempts interrupted at a cap.
    pub caps_reached: u32,
    /// The current attempt's checks (`worker.checked`).
    pub checked: Option<super::verify::Checked>,
}

impl TaskState {
    /// While the task waits to be retried: the time its next attempt may be dispatched (the
    /// backoff its failure recorded).
    pub fn not_before_ns(&self) -> Option<i64> {
        if self.status != Status::Pending {
            return None;
        }
        self.failed.as_ref().and_then(|(_, f)| f.not_before_ns)
    }
}

/// One workgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workgroup {
    /// The plan.
    pub plan: Checked,
    /// Its digest.
    pub plan_digest: String,
    /// The simulated provider's seed.
    pub seed: u64,
    /// What the run was started on.
    pub started: super::events::RunStart,
    /// Version of the workgroup's stream.
    pub version: u64,
    /// Tasks by id.
    pub tasks: BTreeMap<String, TaskState>,
    /// Tasks the plan declared (all of them are in `tasks` once its append is folded).
    pub task_count: u64,
    /// Whether `workgroup.finished` was recorded.
    pub finished: bool,
    /// The context-efficiency policy its run works under (the last `workgroup.policy-set`; the
    /// default for a workgroup planned before policies were recorded).
    pub policy: super::policy::Policy,
    /// The safety boundary that paused it, until a resumed run continues it.
    pub paused: Option<super::caps::Paused>,
    /// The last run of the plan's consolidated suite, with its journal sequence.
    pub suite: Option<(u64, super::verify::SuiteChecked)>,
    /// The last probe of the knowledge server workers start ([`super::health`]).
    pub knowledge: Option<super::health::Probed>,
    /// The planned phases by name ([`super::gates::PhasePlanned`]).
    pub planned: BTreeMap<String, super::gates::PhasePlanned>,
}

impl Workgroup {
    /// Whether every task of the plan is in and completed, failed, conflicted or held.
    pub fn all_ended(&self) -> bool {
        self.tasks.len() as u64 == self.task_count && self.tasks.values().all(|t| t.status.is_terminal())
    }

    /// Tasks with `status`.
    pub fn count(&self, status: Status) -> usize {
        self.tasks.values().filter(|t| t.status == status).count()
    }
}

/// A write to a file, as the audit reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Write {
    /// Journal sequence of the event that shows it.
    pub seq: u64,
    /// `diff` (the post-turn check of a completed task) or `guard` (an allowed hook call).
    pub source: &'static str,
    /// Workgroup.
    pub workgroup: String,
    /// Task.
    pub task: String,
    /// Attempt.
    pub attempt: u32,
    /// Session, when known.
    pub session_id: Option<String>,
    /// The prompt the worker was given before it wrote.
    pub prompt_task: String,
    /// That prompt's hash.
    pub prompt_hash: String,
}

/// A write the guard refused, as the audit reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Denial {
    /// Journal sequence of the `guard.write-denied` event.
    pub seq: u64,
    /// The lineage the worker ran as.
    pub lineage_id: String,
    /// The workgroup and task that dispatched it, when a workgroup did.
    pub workgroup: Option<String>,
    /// The task.
    pub task: Option<String>,
    /// The tool the call used.
    pub tool: Option<String>,
    /// Why the guard refused it.
    pub reason: String,
}

/// The projection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workgroups {
    groups: BTreeMap<String, Workgroup>,
    lineages: BTreeMap<String, (String, String)>,
    writes: BTreeMap<String, Vec<Write>>,
    denials: BTreeMap<String, Vec<Denial>>,
    kept: EventLog,
}

/// The stream of a workgroup.
pub fn stream(workgroup: &str) -> String {
    format!("{}{workgroup}", super::STREAM_PREFIX)
}

/// The stream of one worker: the attempt `attempt` of `task` in `workgroup`.
pub fn worker_stream(workgroup: &str, task: &str, attempt: u32) -> String {
    format!("{}{workgroup}/{task}/{attempt}", super::WORKER_STREAM_PREFIX)
}

/// `(workgroup, task, attempt)` of a worker stream's name.
pub fn parse_worker_stream(stream: &str) -> Option<(&str, &str, u32)> {
    let rest = stream.strip_prefix(super::WORKER_STREAM_PREFIX)?;
    let mut parts = rest.split('/');
    let (wg, task, attempt) = (parts.next()?, parts.next()?, parts.next()?.parse().ok()?);
    parts.next().is_none().then_some((wg, task, attempt))
}

fn de<T: DeserializeOwned>(r: &Record<'_>) -> Result<T, String> {
    serde_json::from_slice(r.payload).map_err(|e| format!("{} at seq {}: {e}", r.event_type, r.seq))
}

/// Event types folded: the workgroup and worker events and the guard's decisions.
pub const FOLDED: [&str; 23] = [
    events::PLANNED,
    events::TASKS_ADDED,
    events::DISPATCHED,
    events::WORKER_STARTED,
    events::WORKER_OUTPUT,
    events::WORKER_COMPLETED,
    events::WORKER_FAILED,
    events::COMPLETED,
    events::FAILED,
    events::HELD,
    events::VIOLATION,
    events::CONFLICTED,
    events::FINISHED,
    events::POLICY_SET,
    events::WORKER_CAPPED,
    events::WORKER_CHECKED,
    events::PAUSED,
    events::UNPAUSED,
    events::SUITE_CHECKED,
    events::KNOWLEDGE_PROBED,
    events::PHASE_PLANNED,
    guard::ALLOWED,
    guard::DENIED,
];

impl Workgroups {
    /// Workgroups by name.
    pub fn groups(&self) -> &BTreeMap<String, Workgroup> {
        &self.groups
    }

    /// The workgroup `name`.
    pub fn get(&self, name: &str) -> Option<&Workgroup> {
        self.groups.get(name)
    }

    /// Writes by repository-relative path.
    pub fn writes(&self) -> &BTreeMap<String, Vec<Write>> {
        &self.writes
    }

    /// Writes the guard refused, by the path as the refusal names it (repository-relative where
    /// it could be placed, else as the runtime gave it).
    pub fn denials(&self) -> &BTreeMap<String, Vec<Denial>> {
        &self.denials
    }

    /// The workgroup and task a lineage runs, when a dispatch recorded it.
    pub fn lineage(&self, lineage_id: &str) -> Option<(&str, &str)> {
        self.lineages.get(lineage_id).map(|(w, t)| (w.as_str(), t.as_str()))
    }

    /// `(workgroup, task, state)` of every task a session ran.
    pub fn by_session(&self, session: &str) -> Vec<(&str, &str, &TaskState)> {
        let mut out = Vec::new();
        for (w, g) in &self.groups {
            for (t, s) in &g.tasks {
                let started = s.session_id.as_deref() == Some(session)
                    || s.completed.as_ref().is_some_and(|(_, c)| c.session_id == session)
                    || s.failed.as_ref().is_some_and(|(_, f)| f.session_id.as_deref() == Some(session));
                if started {
                    out.push((w.as_str(), t.as_str(), s));
                }
            }
        }
        out
    }

    fn group(&mut self, r: &Record<'_>) -> Result<&mut Workgroup, String> {
        let name = r.stream.strip_prefix(super::STREAM_PREFIX).unwrap_or_default();
        let g = self
            .groups
            .get_mut(name)
            .ok_or_else(|| format!("{} at seq {}: workgroup {name} was never planned", r.event_type, r.seq))?;
        g.version = r.version;
        Ok(g)
    }

    fn task<'a>(g: &'a mut Workgroup, r: &Record<'_>, task: &str) -> Result<&'a mut TaskState, String> {
        g.tasks.get_mut(task).ok_or_else(|| format!("{} at seq {}: no task {task} in the plan", r.event_type, r.seq))
    }

    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        let bad = |what: &str| Err(format!("{} at seq {}: {what}", r.event_type, r.seq));
        if r.event_type == guard::ALLOWED {
            return self.fold_guard(r);
        }
        if r.event_type == guard::DENIED {
            return self.fold_denial(r);
        }
        if r.stream.starts_with(super::WORKER_STREAM_PREFIX) {
            return self.fold_worker(r);
        }
        if !r.stream.starts_with(super::STREAM_PREFIX) {
            return bad(&format!("on stream {}, not a workgroup stream", r.stream));
        }
        match r.event_type {
            events::PLANNED => {
                let x: Planned = de(r)?;
                let name = x.plan.workgroup.clone();
                if r.stream != stream(&name) || self.groups.contains_key(&name) {
                    return bad(&format!("workgroup {name} planned twice or on the wrong stream"));
                }
                if !x.plan.tasks.is_empty() {
                    return bad("the plan's tasks come in workgroup.tasks-added");
                }
                let g = Workgroup {
                    plan: x.plan,
                    plan_digest: x.plan_digest,
                    seed: x.seed,
                    started: x.started,
                    version: r.version,
                    tasks: BTreeMap::new(),
                    task_count: x.task_count,
                    finished: false,
                    policy: super::policy::Policy::default(),
                    paused: None,
                    suite: None,
                    knowledge: None,
                    planned: BTreeMap::new(),
                };
                self.groups.insert(name, g);
            }
            events::TASKS_ADDED => {
                let x: events::TasksAdded = de(r)?;
                let g = self.group(r)?;
                if g.plan.tasks.len() + x.tasks.len() > g.task_count as usize {
                    return bad("more tasks than the plan declared");
                }
                for t in x.tasks {
                    if g.tasks.contains_key(t.id()) {
                        return bad(&format!("task {} added twice", t.id()));
                    }
                    let s = TaskState {
                        status: Status::Pending,
                        attempts: 0,
                        dispatch: None,
                        session_id: None,
                        pid: None,
                        worker_end: None,
                        completed: None,
                        failed: None,
                        held: None,
                        conflicted: None,
                        violations: Vec::new(),
                        output_bytes: 0,
                        spent: Counters::default(),
                        failures: 0,
                        turns: 0,
                        capped: None,
                        caps_reached: 0,
                        checked: None,
                    };
                    g.tasks.insert(t.id().to_owned(), s);
                    g.plan.tasks.push(t);
                }
            }
            events::DISPATCHED => {
                let x: Dispatched = de(r)?;
                let g = self.group(r)?;
                let wg = g.plan.workgroup.clone();
                let t = Self::task(g, r, &x.task)?;
                admits(t, r.event_type, x.attempt).or_else(|e| bad(&format!("task {}: {e}", x.task)))?;
                t.status = Status::Dispatched;
                t.attempts = x.attempt;
                t.session_id = None;
                t.worker_end = None;
                t.capped = None;
                t.checked = None;
                let lineage = (x.lineage_id.clone(), (wg, x.task.clone()));
                t.dispatch = Some((r.seq, x));
                self.lineages.insert(lineage.0, lineage.1);
            }
            events::COMPLETED => {
                let x: Completed = de(r)?;
                let g = self.group(r)?;
                let wg = g.plan.workgroup.clone();
                let t = Self::task(g, r, &x.task)?;
                admits(t, r.event_type, x.attempt).or_else(|e| bad(&format!("task {}: {e}", x.task)))?;
                t.status = Status::Completed;
                let prompt = t.dispatch.as_ref().map(|(_, d)| d.prompt.clone());
                if let Some(p) = prompt {
                    for f in &x.files {
                        self.writes.entry(f.clone()).or_default().push(Write {
                            seq: r.seq,
                            source: "diff",
                            workgroup: wg.clone(),
                            task: x.task.clone(),
                            attempt: x.attempt,
                            session_id: Some(x.session_id.clone()),
                            prompt_task: p.prompt_task.clone(),
                            prompt_hash: p.prompt_hash.clone(),
                        });
                    }
                }
                let t = Self::task(self.group(r)?, r, &x.task)?;
                t.spent = t.spent.plus(&x.usage);
                t.pid = None;
                t.completed = Some((r.seq, x));
            }
            events::FAILED => {
                let x: Failed = de(r)?;
                let t = Self::task(self.group(r)?, r, &x.task)?;
                admits(t, r.event_type, x.attempt).or_else(|e| bad(&format!("task {}: {e}", x.task)))?;
                if !t.worker_end.as_ref().is_some_and(|w| w.ended.abandoned) && !x.not_counted {
                    t.failures += 1;
                }
                t.status = if x.retry { Status::Pending } else { Status::Failed };
                t.pid = None;
                t.spent = t.spent.plus(&x.usage);
                t.failed = Some((r.seq, x));
            }
            events::HELD => {
                let x: Held = de(r)?;
                let t = Self::task(self.group(r)?, r, &x.task)?;
                admits(t, r.event_type, t.attempts).or_else(|e| bad(&format!("task {}: {e}", x.task)))?;
                t.status = Status::Held;
                t.held = Some(x);
            }
            events::VIOLATION => {
                let x: Violation = de(r)?;
                let t = Self::task(self.group(r)?, r, &x.task)?;
                admits(t, r.event_type, x.attempt).or_else(|e| bad(&format!("task {}: {e}", x.task)))?;
                t.violations.push(x);
            }
            events::CONFLICTED => {
                let x: events::Conflicted = de(r)?;
                let t = Self::task(self.group(r)?, r, &x.task)?;
                admits(t, r.event_type, x.attempt).or_else(|e| bad(&format!("task {}: {e}", x.task)))?;
                t.status = Status::Conflicted;
                t.conflicted = Some(x);
            }
            events::FINISHED => {
                let _: events::Finished = de(r)?;
                let g = self.group(r)?;
                if g.finished || !g.all_ended() {
                    return bad("finished twice, or with tasks still open");
                }
                g.finished = true;
            }
            events::POLICY_SET => {
                let x: super::policy::PolicySet = de(r)?;
                self.group(r)?.policy = x.policy;
            }
            events::PAUSED => {
                let x: super::caps::Paused = de(r)?;
                let g = self.group(r)?;
                if g.paused.is_some() || g.finished {
                    return bad("paused twice, or after the workgroup finished");
                }
                g.paused = Some(x);
            }
            events::UNPAUSED => {
                let x: super::caps::Unpaused = de(r)?;
                let g = self.group(r)?;
                if g.paused.as_ref().map(|p| p.reason) != Some(x.reason) {
                    return bad("ends a pause the workgroup is not in");
                }
                g.paused = None;
            }
            events::SUITE_CHECKED => {
                let x: super::verify::SuiteChecked = de(r)?;
                let g = self.group(r)?;
                let next = g.suite.as_ref().map_or(1, |(_, s)| s.run + 1);
                if x.run != next {
                    return bad(&format!("suite run {} where run {next} comes next", x.run));
                }
                g.suite = Some((r.seq, x));
            }
            events::PHASE_PLANNED => {
                let x: super::gates::PhasePlanned = de(r)?;
                let g = self.group(r)?;
                if g.planned.contains_key(&x.phase) {
                    return bad(&format!("phase {} planned twice", x.phase));
                }
                g.planned.insert(x.phase.clone(), x);
            }
            events::KNOWLEDGE_PROBED => {
                let x: super::health::Probed = de(r)?;
                self.group(r)?.knowledge = Some(x);
            }
            _ => {}
        }
        Ok(())
    }

    /// A worker event, on `worker/<workgroup>/<task>/<attempt>`, about that attempt.
    fn fold_worker(&mut self, r: &Record<'_>) -> Result<(), String> {
        let bad = |what: &str| Err(format!("{} at seq {}: {what}", r.event_type, r.seq));
        let Some((wg, task, attempt)) = parse_worker_stream(r.stream) else {
            return bad(&format!("{} is not a worker stream (worker/<workgroup>/<task>/<attempt>)", r.stream));
        };
        let (named_task, named_attempt, event) = match r.event_type {
            events::WORKER_STARTED => {
                let x: WorkerStarted = de(r)?;
                (x.task.clone(), x.attempt, Worker::Started(x))
            }
            events::WORKER_OUTPUT => {
                let x: events::WorkerOutput = de(r)?;
                (x.task.clone(), x.attempt, Worker::Output(x.text))
            }
            events::WORKER_COMPLETED | events::WORKER_FAILED => {
                let x: WorkerEnded = de(r)?;
                (x.task.clone(), x.attempt, Worker::Ended(x))
            }
            events::WORKER_CAPPED => {
                let x: super::caps::Capped = de(r)?;
                (x.task.clone(), x.attempt, Worker::Capped(x))
            }
            events::WORKER_CHECKED => {
                let x: super::verify::Checked = de(r)?;
                (x.task.clone(), x.attempt, Worker::Checked(x))
            }
            _ => return bad(&format!("not a worker event, on worker stream {}", r.stream)),
        };
        if named_task != task || named_attempt != attempt {
            return bad(&format!(
                "names task {named_task} attempt {named_attempt}, on the stream of {task} attempt {attempt}"
            ));
        }
        let g = self
            .groups
            .get_mut(wg)
            .ok_or_else(|| format!("{} at seq {}: workgroup {wg} was never planned", r.event_type, r.seq))?;
        let t = Self::task(g, r, task)?;
        admits(t, r.event_type, attempt).or_else(|e| bad(&format!("task {task}: {e}")))?;
        match event {
            Worker::Started(x) => {
                t.status = Status::Running;
                t.session_id = super::provider::named_session(x.session_id);
                t.pid = x.pid;
            }
            Worker::Output(text) => {
                t.output_bytes += text.len() as u64;
            }
            Worker::Capped(x) => {
                t.caps_reached += 1;
                t.capped = Some(x);
            }
            Worker::Checked(x) => t.checked = Some(x),
            Worker::Ended(x) => {
                if let Some(s) = &x.session_id {
                    t.session_id = Some(s.clone());
                }
                t.turns = t.turns.saturating_add(x.turns.unwrap_or(0));
                t.worker_end =
                    Some(WorkerEnd { seq: r.seq, succeeded: r.event_type == events::WORKER_COMPLETED, ended: x });
            }
        }
        Ok(())
    }

    /// A denied hook call is a refused write of each target, whoever the lineage works for.
    fn fold_denial(&mut self, r: &Record<'_>) -> Result<(), String> {
        let x: Verdict = de(r)?;
        let (workgroup, task) = self.lineages.get(&x.lineage_id).cloned().unzip();
        for p in &x.paths {
            self.denials.entry(p.clone()).or_default().push(Denial {
                seq: r.seq,
                lineage_id: x.lineage_id.clone(),
                workgroup: workgroup.clone(),
                task: task.clone(),
                tool: x.tool.clone(),
                reason: x.reason.clone(),
            });
        }
        Ok(())
    }

    /// An allowed hook call of a lineage a workgroup dispatched is a write to each target.
    fn fold_guard(&mut self, r: &Record<'_>) -> Result<(), String> {
        let x: Verdict = de(r)?;
        let Some((wg, task)) = self.lineages.get(&x.lineage_id).cloned() else { return Ok(()) };
        let Some(t) = self.groups.get(&wg).and_then(|g| g.tasks.get(&task)) else { return Ok(()) };
        let Some((_, d)) = &t.dispatch else { return Ok(()) };
        for p in &x.paths {
            self.writes.entry(p.clone()).or_default().push(Write {
                seq: r.seq,
                source: "guard",
                workgroup: wg.clone(),
                task: task.clone(),
                attempt: d.attempt,
                session_id: t.session_id.clone(),
                prompt_task: d.prompt.prompt_task.clone(),
                prompt_hash: d.prompt.prompt_hash.clone(),
            });
        }
        Ok(())
    }
}

enum Worker {
    Started(WorkerStarted),
    Output(String),
    Capped(super::caps::Capped),
    Checked(super::verify::Checked),
    Ended(WorkerEnded),
}

crate::projections::kept::kept_projection!(Workgroups, "workgroups", 5, FOLDED);
