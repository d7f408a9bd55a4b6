//! The workgroup events (all schema version 1). The coordinator's are on the workgroup's stream
//! `workgroup/<name>`; the provider adapter's, about one worker, on that attempt's own stream
//! `worker/<workgroup>/<task>/<attempt>` (so the two never contend for a stream version).
//!
//! A task moves `pending → dispatched → running → completed | failed`: the coordinator records
//! `task.dispatched`; the adapter, which follows the journal, starts the worker and records
//! `worker.started`, then `worker.output` and `worker.completed` or `worker.failed`; the
//! coordinator judges the attempt (post-turn diff check) and records `task.completed` or
//! `task.failed`. A failure the plan's retries allow sends the task back to `pending`, and so
//! does a worker abandoned by a stopped coordinator; a completed task whose changes do not apply
//! is `conflicted`; a pending task whose dependency failed, conflicted or was held is `held`.
//! Ownership claims and releases are on the dispatch ledger (`ce/ledger`), appended in the same
//! atomic batch as the task event they belong to.

use serde::{Deserialize, Serialize};

use super::plan::{Checked, Task};
use crate::ce::router::Mode;
use crate::telemetry::events::{AccountingSource, Counters};

/// `workgroup.planned`: the checked plan's settings; its tasks follow in `workgroup.tasks-added`.
pub const PLANNED: &str = "workgroup.planned";
/// `workgroup.tasks-added`: a chunk of the plan's tasks, in schedule order, in the same append
/// as `workgroup.planned` (a plan of thousands of tasks is larger than one event may be).
pub const TASKS_ADDED: &str = "workgroup.tasks-added";
/// `task.dispatched`: routed, prompt assembled, ownership claimed, about to start a worker.
pub const DISPATCHED: &str = "task.dispatched";
/// `worker.started`: the provider gave the worker a session.
pub const WORKER_STARTED: &str = "worker.started";
/// `worker.output`: a bounded excerpt of what the worker said.
pub const WORKER_OUTPUT: &str = "worker.output";
/// `worker.completed`: the worker's turn ended in success by its provider's rules.
pub const WORKER_COMPLETED: &str = "worker.completed";
/// `worker.failed`: the worker could not start, its turn failed, or it was abandoned.
pub const WORKER_FAILED: &str = "worker.failed";
/// `task.completed`: the worker succeeded; its changes and usage.
pub const COMPLETED: &str = "task.completed";
/// `task.failed`: the worker failed, or could not be started.
pub const FAILED: &str = "task.failed";
/// `task.held`: the task cannot run (a dependency failed or was held).
pub const HELD: &str = "task.held";
/// `task.write-violation`: the post-turn check found writes outside the task's ownership.
pub const VIOLATION: &str = "task.write-violation";
/// `task.conflicted`: a completed task's changes did not apply to the integration branch.
pub const CONFLICTED: &str = "task.conflicted";
/// `workgroup.finished`: every task is completed, failed, conflicted or held.
pub const FINISHED: &str = "workgroup.finished";
/// `workgroup.policy-set`: the context-efficiency policy the run works under from here on.
pub const POLICY_SET: &str = "workgroup.policy-set";
/// `worker.capped`: the worker was interrupted at a cap ([`super::caps::Capped`]).
pub const WORKER_CAPPED: &str = "worker.capped";
/// `worker.checked`: the attempt's `verify` commands ran ([`super::verify::Checked`]).
pub const WORKER_CHECKED: &str = "worker.checked";
/// `workgroup.paused`: a safety boundary stopped new dispatches ([`super::caps::Paused`]).
pub const PAUSED: &str = "workgroup.paused";
/// `workgroup.unpaused`: a resumed run continues a paused workgroup.
pub const UNPAUSED: &str = "workgroup.unpaused";
/// `workgroup.suite-checked`: the plan's consolidated suite ran on the integration branch
/// ([`super::verify::SuiteChecked`]).
pub const SUITE_CHECKED: &str = "workgroup.suite-checked";
/// `workgroup.knowledge-probed`: the knowledge server workers start was probed
/// ([`super::health::Probed`]).
pub const KNOWLEDGE_PROBED: &str = "workgroup.knowledge-probed";
/// `workgroup.phase-planned`: a phase's prompts were assembled and verified before its first
/// worker ([`super::gates::PhasePlanned`]).
pub const PHASE_PLANNED: &str = "workgroup.phase-planned";
/// Every type the `workgroups` projection folds from workgroup and worker streams.
pub const ALL: [&str; 21] = [
    PLANNED,
    TASKS_ADDED,
    DISPATCHED,
    WORKER_STARTED,
    WORKER_OUTPUT,
    WORKER_COMPLETED,
    WORKER_FAILED,
    COMPLETED,
    FAILED,
    HELD,
    VIOLATION,
    CONFLICTED,
    FINISHED,
    POLICY_SET,
    WORKER_CAPPED,
    WORKER_CHECKED,
    PAUSED,
    UNPAUSED,
    SUITE_CHECKED,
    KNOWLEDGE_PROBED,
    PHASE_PLANNED,
];

/// Longest text of a `worker.output` or a summary, bytes.
pub const TEXT_BYTES_MAX: usize = 4 * 1024;

/// `workgroup.planned` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Planned {
    /// The checked plan without its tasks.
    pub plan: Checked,
    /// Tasks the `workgroup.tasks-added` events that follow carry.
    pub task_count: u64,
    /// blake3 of the whole checked plan's canonical JSON, hex.
    pub plan_digest: String,
    /// Seed of the simulated provider's model (recorded so a rerun is the same run).
    pub seed: u64,
    /// What the run was started on; `--resume` keeps it.
    #[serde(default, flatten)]
    pub started: RunStart,
}

/// What a workgroup's run was started on, recorded in `workgroup.planned` so that a resumed run
/// is the same run: the provider every task runs on when one was chosen for the whole run, the
/// repository writing tasks change, and the commit its integration branch starts from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStart {
    /// The provider for every task (`sim`, `claude`, `codex`), when the run named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The repository, absolute and canonical.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The commit the integration branch starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The rollout every dispatch is decided under (`strata run --rollout NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
}

/// `workgroup.tasks-added` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksAdded {
    /// The next tasks of the plan, in schedule order.
    pub tasks: Vec<Task>,
}

/// Largest serialised chunk of tasks in one `workgroup.tasks-added`, bytes (the journal takes
/// payloads up to 256 KiB; one task is at most about 140 KiB).
pub const TASKS_CHUNK_BYTES: usize = 96 * 1024;

/// The prompt a task was given: the assembly recorded on `prompt/<prompt_task>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptRef {
    /// The assembly's task id (its stream is `prompt/<id>`).
    pub prompt_task: String,
    /// `sha256:` of the prompt bytes, as in the manifest.
    pub prompt_hash: String,
    /// Prompt tokens, as assembled.
    pub tokens: u64,
}

/// `task.dispatched` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dispatched {
    /// The task.
    pub task: String,
    /// 1 for the first dispatch, one more for each dispatch after a crash.
    pub attempt: u32,
    /// The lineage the worker runs as (owner in the ledger).
    pub lineage_id: String,
    /// The provider.
    pub provider: String,
    /// The router's mode.
    pub routed: Mode,
    /// The mode that runs (the routed one, or `fresh-capsule` when the provider cannot do it).
    pub runs_as: Mode,
    /// Reason codes, `CAPABILITY_FALLBACK` added when the mode degraded.
    pub reason_codes: Vec<String>,
    /// The prompt.
    pub prompt: PromptRef,
    /// Tokens of the load-everything baseline (every specification at full detail).
    pub baseline_tokens: u64,
    /// The session resumed or forked from, when the mode reuses one.
    pub from_session: Option<String>,
    /// The sealed context capsule a fresh worker is briefed with (`ce.capsule-sealed` on the
    /// ledger in the same append).
    #[serde(default)]
    pub capsule_hash: Option<String>,
    /// The lineage evaluator's answer for the warm lineage a continuation would resume (the
    /// same evaluation as `strata ce lineage`), when it was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage_check: Option<LineageCheck>,
    /// The build gate it passed, with the facts it was decided on, when it applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<super::gates::GateCheck>,
    /// Every routing input the dispatch was decided on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Box<Evidence>>,
    /// The attempt's caps (the worker is interrupted at any of them).
    #[serde(default, skip_serializing_if = "super::caps::Caps::is_empty")]
    pub caps: super::caps::Caps,
    /// The cap the previous attempt reached, when this one is its fallback (a fresh capsule,
    /// nothing resumed or inherited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_after: Option<super::caps::Reached>,
    /// Its provider would start the Knowledge API for it, but the last probe of that server in
    /// this phase failed: the worker runs without it ([`super::health`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_knowledge: bool,
    /// The model the worker runs on: the tier its profile (or the task) chose and the
    /// provider's name for it ([`super::models`]); none with context efficiency off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<super::models::Choice>,
}

/// The routing evidence of a dispatch: what the router was given, recorded before the worker
/// starts, so `audit run` can say why each task ran as it did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The knowledge-base node the task works on: its change request, else its first spec.
    pub node: Option<String>,
    /// Phase.
    pub phase: String,
    /// Role.
    pub role: String,
    /// Owned files, as the plan names them.
    pub owned_files: Vec<String>,
    /// The tasks it waited for, every one completed at dispatch (its readiness).
    pub after: Vec<String>,
    /// Whether the coordinator waits on it (it never does in `strata run`: workers run while it
    /// dispatches others).
    pub blocking: bool,
    /// `tight`, `moderate` or `independent`.
    pub coupling: String,
    /// Expected context reuse: `high` (it continues or inherits a session), `medium` (a task it
    /// waited for worked on the same node), `low`.
    pub expected_reuse: String,
    /// `normal`, `restricted` or `isolated`, and whether the plan wrote it out.
    pub sensitivity: String,
    /// The plan declared the sensitivity.
    pub sensitivity_declared: bool,
    /// It must be reviewed by a worker that shares no context with the builders.
    pub independent_reviewer: bool,
    /// Bytes of its sealed capsule (none for work done locally).
    pub capsule_bytes: Option<u64>,
    /// Its prompt's tokens.
    pub prompt_tokens: u64,
    /// Prompt tokens of the session it would resume or inherit, when there is one.
    pub inherited_tokens: Option<u64>,
    /// Expected output size: not estimated (`null`), recorded so the gap is visible.
    pub expected_output_tokens: Option<u64>,
    /// `high` when other tasks wait for it, else `low`.
    pub latency_priority: String,
    /// The warm lineage it could resume or fork.
    pub lineage_candidate: Option<String>,
    /// The lineage evaluator's state for that candidate (`HOT`, `INVALID`, …).
    pub invalidation: Option<String>,
    /// Delegation depth and its limit.
    pub nesting_depth: u64,
    /// The policy's nesting limit.
    pub max_nesting_depth: u64,
    /// Inherited or resumed writers running when it was routed, and the policy's cap.
    pub active_inherited_writers: u64,
    /// The policy's cap.
    pub max_active_inherited: u64,
    /// Context efficiency was on.
    pub efficiency: bool,
}

/// What the lineage evaluator said of a warm lineage a dispatch would resume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageCheck {
    /// The warm lineage.
    pub lineage_id: String,
    /// `HOT`, `RECONCILE_REQUIRED`, `COLD_VALID` or `INVALID`.
    pub state: String,
    /// Its invalidation codes, in output order.
    pub invalidations: Vec<String>,
}

/// `worker.started` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerStarted {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The provider's session id; empty when strata stopped the worker (at a cap, or for
    /// refused credentials) before its stream named a new session.
    pub session_id: String,
    /// The provider.
    pub provider: String,
    /// The worker is simulated.
    pub synthetic: bool,
    /// The worker's process (its process group's leader), for a real worker: after a crash the
    /// next run releases a worker still running there.
    #[serde(default)]
    pub pid: Option<u64>,
}

/// `worker.output` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerOutput {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// At most [`TEXT_BYTES_MAX`] bytes.
    pub text: String,
}

/// `worker.completed` and `worker.failed` v1: how the worker's turn ended, as its adapter saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerEnded {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The worker's session, if one started.
    pub session_id: Option<String>,
    /// The worker's closing words, or what went wrong, at most [`TEXT_BYTES_MAX`] bytes.
    pub summary: String,
    /// This invocation's usage (unknown counters `null`).
    pub usage: Counters,
    /// Who vouches for the billing counters, when the provider reported any.
    pub accounting: Option<AccountingSource>,
    /// The worker is simulated.
    pub synthetic: bool,
    /// The worker was started by a coordinator that stopped before it ended; the adapter that
    /// caught up released it. Not the task's fault: it runs again whatever its retries.
    #[serde(default)]
    pub abandoned: bool,
    /// Files the runtime's own stream shows the worker wrote or tried to write (as the runtime
    /// names them: absolute, or relative to the worker's directory), at most
    /// [`WRITES_MAX`]; the post-turn check judges them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Model turns the worker's stream showed, when the provider shows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
    /// The provider refused the worker's credentials (a safety boundary: the workgroup pauses).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub authentication_failed: bool,
    /// The session's running totals as the provider reported them at the end (for the
    /// reconciliation of the usage deltas against the provider's own figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cumulative: Option<Counters>,
    /// Bytes of the input the worker was given (prompt, reconciliation, capsule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_bytes: Option<u64>,
}

/// Most write targets a worker's end records.
pub const WRITES_MAX: usize = 1_024;

/// `task.completed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Completed {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The worker's session.
    pub session_id: String,
    /// Files the worker changed (from the post-turn diff), repository-relative, sorted.
    pub files: Vec<String>,
    /// The worker's closing words, at most [`TEXT_BYTES_MAX`] bytes.
    pub summary: String,
    /// This invocation's usage (unknown counters `null`).
    pub usage: Counters,
    /// The usage is simulated.
    pub synthetic: bool,
    /// The commit holding the changes, applied to the integration branch after this event.
    #[serde(default)]
    pub commit: Option<String>,
    /// The handoff file written for the result, when the policy's threshold asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffRef>,
}

/// A result's handoff file: where it is and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffRef {
    /// Workspace-relative path (`.strata/handoffs/<workgroup>/<task>.<attempt>.md`).
    pub path: String,
    /// blake3 of its bytes, hex.
    pub blake3: String,
    /// Why it was written: `material` or `always`.
    pub reason: String,
}

/// `task.conflicted` v1: recorded after the completion, when its commit did not apply; the
/// task's dependants are held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conflicted {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The integration branch.
    pub branch: String,
    /// Files in conflict.
    pub files: Vec<String>,
}

/// `task.failed` v1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failed {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The worker's session, if one started.
    pub session_id: Option<String>,
    /// What went wrong.
    pub reason: String,
    /// This invocation's usage, when known.
    pub usage: Counters,
    /// The task goes back to pending and is dispatched again as its next attempt.
    #[serde(default)]
    pub retry: bool,
    /// With `retry`: the next attempt is not dispatched before this time (the retry's backoff),
    /// nanoseconds since the Unix epoch. Absent: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ns: Option<i64>,
    /// The cap the attempt reached, when it was capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<super::caps::Reached>,
    /// The attempt's partial changes, kept as an artifact and never integrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<super::verify::ArtifactRef>,
    /// The check that failed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<super::verify::Check>,
    /// Not counted against the plan's retries: a cap's one fallback attempt, or an
    /// authentication failure that paused the workgroup.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_counted: bool,
}

/// `task.held` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Held {
    /// The task.
    pub task: String,
    /// The dependencies that failed or were held.
    pub blocked_by: Vec<String>,
    /// Why, in words.
    pub reason: String,
    /// The gate that holds it, with its facts and reasons, when a gate does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Box<super::gates::GateCheck>>,
}

/// `task.write-violation` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Violation {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The worker's session.
    pub session_id: String,
    /// Paths written outside ownership, sorted.
    pub paths: Vec<String>,
    /// `flag` (recorded, changes discarded) or `stop` (the task fails).
    pub policy: String,
}

/// `workgroup.finished` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finished {
    /// Tasks completed.
    pub completed: u64,
    /// Tasks failed.
    pub failed: u64,
    /// Tasks held.
    pub held: u64,
}

/// `text` cut to at most [`TEXT_BYTES_MAX`] bytes at a character boundary, `…` marking a cut.
pub fn bounded(text: &str) -> String {
    bounded_to(text, TEXT_BYTES_MAX)
}

/// `text` cut to at most `max` bytes (at least 3) at a character boundary, `…` marking a cut.
pub fn bounded_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
