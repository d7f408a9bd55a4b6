//! The `Provider` port: how the coordinator runs a task on an agent runtime. Adapters implement
//! it (Claude Code, Codex, the simulated provider); the engine only declares it and decides, from
//! a provider's [`Capabilities`], which mode actually runs.
//!
//! A mode the provider cannot run is never faked: it degrades to a fresh capsule and the dispatch
//! records `CAPABILITY_FALLBACK` ([`degrade`]).

use std::path::PathBuf;

use crate::ce::router::{Mode, Reason, Route};
use crate::telemetry::events::{AccountingSource, Counters};

/// What a provider can do, declared by its adapter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Run a task in the coordinator's own context (`local`).
    pub local: bool,
    /// Resume an earlier session (`resume`).
    pub resume: bool,
    /// Fork a session with its whole history (`inherit-full`).
    pub fork: bool,
    /// Start from a bounded recent window of a session (`inherit-recent`).
    pub recent: bool,
    /// A native team runtime (`coordinated-team`).
    pub team: bool,
    /// The runtime takes a follow-up message into a running turn. Reported only: strata sends
    /// none (a turn's prompt is whole when it starts), so the port has no method for it.
    pub followup: bool,
    /// Interrupt a running worker's turn and keep its session.
    pub interrupt: bool,
}

impl Capabilities {
    /// Whether `mode` can run here. A fresh capsule always can.
    pub fn supports(&self, mode: Mode) -> bool {
        match mode {
            Mode::Local => self.local,
            Mode::Resume => self.resume,
            Mode::InheritFull => self.fork,
            Mode::InheritRecent => self.recent,
            Mode::FreshCapsule => true,
            Mode::CoordinatedTeam => self.team,
        }
    }
}

/// The mode that runs for `route` on a provider with `caps`, and the reasons to record: the
/// route's own, or a fresh capsule with `INDEPENDENT_CAPSULE` and `CAPABILITY_FALLBACK` when the
/// provider cannot run the routed mode.
pub fn degrade(route: &Route, caps: &Capabilities) -> (Mode, Vec<Reason>) {
    if caps.supports(route.mode) {
        return (route.mode, route.reason_codes.iter().copied().collect());
    }
    let mut reasons: std::collections::BTreeSet<Reason> = route.reason_codes.clone();
    reasons.insert(Reason::IndependentCapsule);
    reasons.insert(Reason::CapabilityFallback);
    (Mode::FreshCapsule, reasons.into_iter().collect())
}

/// Everything a worker is started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Brief {
    /// Workgroup.
    pub workgroup: String,
    /// Task.
    pub task: String,
    /// Attempt.
    pub attempt: u32,
    /// The lineage it runs as (the hook checks writes against what this lineage owns).
    pub lineage_id: String,
    /// The mode that runs.
    pub mode: Mode,
    /// The session to resume or fork, for `resume` and the inherit modes.
    pub from_session: Option<String>,
    /// The assembled prompt.
    pub prompt: String,
    /// Prompt tokens, as assembled.
    pub prompt_tokens: u64,
    /// Files the worker owns, repository-relative.
    pub owns: Vec<String>,
    /// The directory the worker runs in (its own worktree when it writes).
    pub workdir: PathBuf,
    /// The journal directory the worker's hooks and MCP server reach strata through.
    pub journal: PathBuf,
    /// The attempt's caps: the adapter interrupts the worker at the first one its live usage
    /// reaches, and passes them to the runtime where it has a cap of its own.
    pub caps: super::caps::Caps,
    /// The worker gets the Knowledge API its provider attaches (`false`: the run's probe of
    /// that server failed in this phase, [`super::health`]).
    pub knowledge: bool,
    /// The model to run on (the dispatch's choice); none: the provider's default.
    pub model: Option<String>,
}

/// The session a worker's `session_id` names: none when it is empty (a worker strata stopped
/// before its stream named a new session).
pub fn named_session(session_id: String) -> Option<String> {
    (!session_id.is_empty()).then_some(session_id)
}

/// A started worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worker {
    /// The provider's session id (taken from its stream where the provider reports one); empty
    /// when strata stopped the worker before its stream named a new one.
    pub session_id: String,
    /// The adapter's handle (process id, or a simulated worker's number).
    pub handle: u64,
}

/// How a worker's turn ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The session, as the provider reported it at the end.
    pub session_id: String,
    /// Success by the provider's rules (for the CLIs: a clean result and exit 0).
    pub succeeded: bool,
    /// The worker's closing words, or what went wrong.
    pub summary: String,
    /// Output excerpts worth recording.
    pub output: Vec<String>,
    /// This invocation's usage.
    pub usage: Counters,
    /// The session's cumulative usage, as the provider reports it.
    pub cumulative: Counters,
    /// Who vouches for the billing figures.
    pub accounting: Option<AccountingSource>,
    /// The worker is simulated.
    pub synthetic: bool,
    /// Files the runtime's stream shows the worker wrote or tried to write, as it names them.
    pub writes: Vec<String>,
    /// Model turns the stream showed, when it shows them.
    pub turns: Option<u32>,
    /// The cap the worker was interrupted at, and what it had spent then.
    pub capped: Option<(super::caps::Reached, super::caps::Spend)>,
    /// The runtime refused the worker's credentials.
    pub authentication_failed: bool,
}

/// Why a provider operation did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The operation is not among the provider's capabilities.
    #[error("[STRATA-E1711] {provider} cannot {operation}; the coordinator degrades the mode instead")]
    Unsupported {
        /// Provider.
        provider: &'static str,
        /// Operation.
        operation: &'static str,
    },
    /// The runtime could not be started or reached.
    #[error("[STRATA-E1712] {provider}: {detail}")]
    Unavailable {
        /// Provider.
        provider: &'static str,
        /// What happened and what to do.
        detail: String,
    },
    /// No worker with that handle.
    #[error("[STRATA-E1713] {provider}: no worker {handle}")]
    NoWorker {
        /// Provider.
        provider: &'static str,
        /// Handle.
        handle: u64,
    },
}

/// An agent runtime the coordinator runs tasks on.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// The provider's name (`sim`, `claude`, `codex`).
    fn name(&self) -> &'static str;

    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Starts a worker for `brief` (a fresh session, or a fork of `brief.from_session` for the
    /// inherit modes).
    async fn spawn(&self, brief: &Brief) -> Result<Worker, ProviderError>;

    /// Starts a turn in the existing session `brief.from_session`.
    async fn resume(&self, brief: &Brief) -> Result<Worker, ProviderError>;

    /// Waits for the worker's turn to end.
    async fn wait(&self, worker: &Worker) -> Result<Outcome, ProviderError>;

    /// Interrupts the worker's turn, keeping its session.
    async fn interrupt(&self, worker: &Worker) -> Result<(), ProviderError>;

    /// Ends the worker and frees what it holds.
    async fn release(&self, worker: &Worker) -> Result<(), ProviderError>;
}
