//! Workgroups: a coordinator's run of a plan. Each task is routed, given an assembled prompt,
//! claims the files it owns, runs on a provider's worker, and is completed, failed or held; every
//! step is an event, so a run survives the coordinator's crash and `strata audit` can say which
//! task, session and prompt preceded each write.
//!
//! * [`plan`]: the plan (TOML in the adapter) and its checks: names, dependencies without
//!   cycles, phases as gates, ownership ordered by dependencies, the pipeline's rule.
//! * [`events`]: the workgroup events on `workgroup/<name>` and the worker events on
//!   `worker/<workgroup>/<task>/<attempt>`.
//! * [`state`]: the `workgroups` projection (tasks, sessions, writes per file).
//! * [`preflight`]: every check a run makes before it records anything (the plan, profiles,
//!   change requests and specs, the repository, provider CLIs, profile globs), at once, over
//!   facts the adapter probed.
//! * [`decide`]: pure decisions: the plan event, what to dispatch or hold next, each task event
//!   checked against the task's state.
//! * [`driver`]: the coordinator's loop over those decisions, which `strata run` and the
//!   simulation both execute.
//! * [`step`]: the decisions inside one dispatch (routing with the warm candidate and the
//!   provider's capabilities, resuming a warm session) and one judged end (outcome, retry,
//!   release, warm session), shared by `strata run` and the simulation.
//! * [`judge`]: one ended attempt judged whole (post-turn check, outcome, release, warm session,
//!   usage), shared by `strata run` and the simulation.
//! * [`provider`]: the `Provider` port adapters implement (spawn, resume, send a follow-up, wait,
//!   interrupt, release, form a team) with its capability declaration, and how a mode a provider
//!   cannot run degrades to a fresh capsule with `CAPABILITY_FALLBACK`.
//! * [`sim`]: the simulated provider's seeded model of cost, latency and outcome per mode.
//! * [`warm`]: completed sessions kept warm as ledger lineages with leases, and when a task that
//!   `continues` one may resume it.
//! * [`policy`]: the `[context_efficiency]` policy a run works under (`workgroup.policy-set`).
//! * [`discovery`]: a task's `request` resolved to the specifications it follows, with evidence.
//! * [`models`]: the model tier the profile gives each role, and its name per provider.
//! * [`caps`]: hard caps per attempt and per workgroup, the fallback after a cap and the
//!   safety boundaries that pause a workgroup (`worker.capped`, `workgroup.paused`).
//! * [`verify`]: the results of the `verify` commands a run carries out (`worker.checked`).
//! * [`rollouts`]: a rollout's two policies deciding each dispatch of a run, as its stage asks.
//! * [`lease`]: which coordinator process runs a workgroup (a lease with an epoch on its own
//!   stream, ended by a time recorded in the journal) and the fence that refuses every append
//!   of a coordinator whose lease was taken over.

pub mod caps;
pub mod decide;
pub mod discovery;
pub mod dispatch;
pub mod driver;
pub mod events;
pub mod gates;
pub mod health;
pub mod judge;
pub mod lease;
pub mod models;
pub mod plan;
pub mod policy;
pub mod preflight;
pub mod provider;
pub mod roles;
pub mod rollouts;
pub mod sim;
pub mod state;
pub mod step;
pub mod verify;
pub mod warm;

/// Stream prefix; a workgroup's stream is the prefix followed by its name.
pub const STREAM_PREFIX: &str = "workgroup/";

/// Prefix of the streams provider adapters append one worker's events to:
/// `worker/<workgroup>/<task>/<attempt>`.
pub const WORKER_STREAM_PREFIX: &str = "worker/";

/// The lineage a task's workers run as: `<workgroup>.<task>` (at most 127 bytes).
pub fn lineage_id(workgroup: &str, task: &str) -> String {
    format!("{workgroup}.{task}")
}

/// Why a workgroup command was refused; each message names the input, the rule and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkgroupError {
    /// The plan breaks its rules (every problem listed).
    #[error("[STRATA-E1701] the plan has {} problem(s): {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Plan(Vec<plan::Problem>),
    /// A workgroup of that name is in the journal already.
    #[error(
        "[STRATA-E1702] workgroup {0} was planned in this journal before; continue it with `strata run --resume {0}` or rename the workgroup"
    )]
    AlreadyPlanned(String),
    /// No such workgroup.
    #[error(
        "[STRATA-E1703] no workgroup {0} in this journal; `strata audit run` lists none by that name — check the name"
    )]
    Unknown(String),
    /// A task event out of the task's order.
    #[error("[STRATA-E1704] task {task}: {rule}")]
    Order {
        /// The task.
        task: String,
        /// What is wrong.
        rule: String,
    },
    /// The dispatch ledger refused to route or release a task's lineage.
    #[error("[STRATA-E1706] task {task}: the dispatch ledger refused it: {detail}")]
    Route {
        /// The task.
        task: String,
        /// The ledger's reason.
        detail: String,
    },
    /// The telemetry decider refused a worker's usage report (its own code says why).
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// A payload could not be encoded (a bug).
    #[error("[STRATA-E1705] internal error building a workgroup event: {0}; report a bug")]
    Encode(String),
}
