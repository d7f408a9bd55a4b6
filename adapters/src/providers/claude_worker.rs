//! The Claude Code provider: each turn is one `claude -p --output-format stream-json --verbose`
//! process (the prompt on stdin), run in the worker's directory in its own process group.
//!
//! * **Sessions.** A new worker gets `--session-id <fresh UUID>`; `resume` runs `--resume <id>`
//!   (2.1.332 keeps the id); an inherit mode runs `--resume <id> --fork-session` (a new id). In
//!   every case the worker's session id is the one the stream names, never the one assumed.
//! * **Per-worker wiring, nothing written into the repository.** A private directory per worker
//!   holds the `--settings` file, whose PreToolUse hook on `Write|Edit|MultiEdit|NotebookEdit`
//!   runs `strata hook claude pre-tool-use --journal <brief.journal> --lineage <lineage> --root
//!   <workdir>` (strata's write guard: exit 2 and a JSON deny outside the lineage's ownership)
//!   and sets `disableAllHooks: false` (command-line settings outrank the user's and the
//!   project's, so neither can turn the guard off),
//!   and the `--mcp-config` file attaching `strata mcp` as the `strata` server
//!   (`--strict-mcp-config`, and `--allowedTools mcp__strata`: in `-p` mode an MCP tool is
//!   refused without it). `--permission-mode acceptEdits` lets headless writes inside the working
//!   directory through, so the hook is what decides about them.
//! * **Outcome.** Success only when a `result` was seen with `is_error: false`, no API error came
//!   before it, the process exited 0 and the turn was not interrupted. The CLI reports the
//!   session's cumulative usage (`modelUsage`, `total_cost_usd`, restored on resume and fork);
//!   this turn's usage is the difference from the session's last cumulative figures (for a fork,
//!   the parent's), kept per session id. When that baseline is unknown (a session this provider
//!   never ran), the turn's own figures from `model_usage_since_last_result` are used, else the
//!   main loop's `usage` with cost unknown. The cost is the CLI's estimate: accounting
//!   `estimated`.
//! * **Signals.** `interrupt` sends SIGINT to the CLI (it ends the turn and keeps the session);
//!   `release` sends SIGTERM, then SIGKILL, to the whole group (hooks, MCP servers, shells).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use strata_engine::ce::router::Mode;
use strata_engine::telemetry::events::{AccountingSource, Counters};
use strata_engine::workgroup::provider::{Brief, Capabilities, Outcome, Provider, ProviderError, Worker};

use strata_engine::workgroup::caps::{Measure, Reached, Spend};

use super::claude::{StreamRun, Usage};
pub use super::worker_process::Knowledge;
use super::worker_process::{
    self as wp, Ended, Entry, HOOK_TIMEOUT_S, KNOWLEDGE_SERVER, Limits, Turn, Wiring, Workers,
};

const NAME: &str = "claude";
/// The tools the write guard is asked about.
pub const GUARDED_TOOLS: &str = "Write|Edit|MultiEdit|NotebookEdit";
/// Largest summary or output excerpt kept in an outcome, bytes.
pub const EXCERPT_BYTES_MAX: usize = 4096;

/// How the Claude provider runs `claude`.
#[derive(Clone, Debug)]
pub struct ClaudeConfig {
    /// The `claude` executable.
    pub program: PathBuf,
    /// The `strata` executable the hook and the MCP server run (default: this process's own).
    pub strata_program: Option<PathBuf>,
    /// `--model` (default: the CLI's own choice).
    pub model: Option<String>,
    /// `--permission-mode`: `acceptEdits` lets headless writes inside the working directory run
    /// (the write guard still decides each one).
    pub permission_mode: String,
    /// Where the private per-worker directories are made.
    pub state_dir: PathBuf,
    /// The Knowledge API attached over MCP.
    pub knowledge: Knowledge,
    /// Keep this process's environment for the CLI (else only `env` is set).
    pub inherit_env: bool,
    /// Environment for the CLI (and so for its hooks and MCP servers): e.g. `ANTHROPIC_BASE_URL`,
    /// `ANTHROPIC_API_KEY`, `HOME`, `CLAUDE_CODE_MAX_RETRIES`.
    pub env: Vec<(String, String)>,
    /// More arguments, placed before the session flags.
    pub extra_args: Vec<String>,
    /// Time for the stream to name the session (MCP servers connect first), ms.
    pub start_ms_max: u64,
    /// A turn's whole time; past it the group is killed, ms.
    pub turn_ms_max: u64,
    /// After the CLI exited, how long its group may take to go before SIGTERM (then as long
    /// again before SIGKILL), ms.
    pub exit_grace_ms: u64,
    /// The write guard's own deadline, ms: the hook answers within it whatever strata's
    /// processes do (the runtime's hook timeout is set above it).
    pub hook_deadline_ms: u64,
}

impl ClaudeConfig {
    /// `program` with the defaults: `acceptEdits`, the Knowledge API from the brief's journal,
    /// this process's environment, 2 minutes to start, 1 hour a turn.
    pub fn new(program: PathBuf, state_dir: PathBuf) -> ClaudeConfig {
        ClaudeConfig {
            program,
            strata_program: None,
            model: None,
            permission_mode: "acceptEdits".to_owned(),
            state_dir,
            knowledge: Knowledge::FromJournal,
            inherit_env: true,
            env: Vec::new(),
            extra_args: Vec::new(),
            start_ms_max: 120_000,
            turn_ms_max: 3_600_000,
            exit_grace_ms: 10_000,
            hook_deadline_ms: crate::cli::HOOK_DEADLINE_MS_DEFAULT,
        }
    }
}

/// The Claude Code provider.
#[derive(Debug)]
pub struct ClaudeProvider {
    config: ClaudeConfig,
    workers: Workers<StreamRun>,
}

/// How a turn relates to a session.
enum Session<'a> {
    New(String),
    Resume(&'a str),
    Fork(&'a str),
}

impl ClaudeProvider {
    /// A provider running `claude` as `config` says.
    pub fn new(config: ClaudeConfig) -> ClaudeProvider {
        ClaudeProvider { config, workers: Workers::new(NAME) }
    }

    fn unavailable(detail: String) -> ProviderError {
        ProviderError::Unavailable { provider: NAME, detail }
    }

    async fn start(&self, brief: &Brief, session: Session<'_>) -> Result<Worker, ProviderError> {
        let c = &self.config;
        let wiring = Wiring::resolve(NAME, c.strata_program.as_deref(), &c.knowledge, brief)?;
        let dir = wp::private_dir(&c.state_dir.join("claude-workers"))
            .map_err(|e| Self::unavailable(format!("a private directory under {}: {e}", c.state_dir.display())))?;
        let cleanup = |e: ProviderError| {
            let _ = std::fs::remove_dir_all(&dir);
            e
        };
        let hook = wiring.hook_command("claude", &brief.lineage_id, c.hook_deadline_ms);
        let settings = json!({"disableAllHooks": false, "hooks": {"PreToolUse": [{"matcher": GUARDED_TOOLS,
            "hooks": [{"type": "command", "command": hook, "timeout": HOOK_TIMEOUT_S}]}]}});
        let settings_path = dir.join("settings.json");
        wp::write_private(&settings_path, settings.to_string().as_bytes())
            .map_err(|e| cleanup(Self::unavailable(format!("writing {}: {e}", settings_path.display()))))?;

        let mut cmd = tokio::process::Command::new(&c.program);
        if !c.inherit_env {
            cmd.env_clear();
        }
        cmd.envs(c.env.iter().map(|(k, v)| (k, v))).current_dir(&wiring.workdir);
        cmd.args(["-p", "--output-format", "stream-json", "--verbose"]);
        // The dispatch's model, else the one configured for every worker.
        if let Some(m) = brief.model.as_deref().or(c.model.as_deref()) {
            cmd.args(["--model", m]);
        }
        cmd.args(["--permission-mode", &c.permission_mode]);
        cmd.arg("--settings").arg(&settings_path);
        if let Some(args) = wiring.mcp_args() {
            let mcp = json!({"mcpServers": {KNOWLEDGE_SERVER: {"type": "stdio",
                "command": wiring.strata.display().to_string(), "args": args}}});
            let mcp_path = dir.join("mcp.json");
            wp::write_private(&mcp_path, mcp.to_string().as_bytes())
                .map_err(|e| cleanup(Self::unavailable(format!("writing {}: {e}", mcp_path.display()))))?;
            cmd.arg("--mcp-config").arg(&mcp_path).arg("--strict-mcp-config");
            cmd.args(["--allowedTools", &format!("mcp__{KNOWLEDGE_SERVER}")]);
        }
        cmd.args(&c.extra_args);
        let (baseline, expected) = match session {
            Session::New(id) => {
                cmd.args(["--session-id", &id]);
                (Some(zero()), Some(id))
            }
            Session::Resume(id) => {
                cmd.args(["--resume", id]);
                (self.workers.last_cumulative(id), Some(id.to_owned()))
            }
            Session::Fork(id) => {
                cmd.args(["--resume", id, "--fork-session"]);
                (self.workers.last_cumulative(id), None)
            }
        };
        // The CLI's own cost cap as well as strata's (which interrupts at the others).
        if let Some(micros) = brief.caps.cost_micros {
            cmd.args(["--max-budget-usd", &format!("{:.6}", micros as f64 / 1e6)]);
        }
        let limits = Limits {
            turn_ms_max: c.turn_ms_max,
            exit_grace_ms: c.exit_grace_ms,
            caps: brief.caps,
            before: Default::default(),
        };
        let turn = Turn::<StreamRun>::start(cmd, brief.prompt.clone().into_bytes(), limits)
            .map_err(|e| cleanup(Self::unavailable(format!("cannot start {}: {e}", c.program.display()))))?;
        let entry = Entry {
            turn,
            dir: dir.clone(),
            baseline,
            expected_session: expected,
            interrupted: AtomicBool::new(false),
            caps: brief.caps,
        };
        self.workers.started(entry, c.start_ms_max).await
    }

    fn outcome(&self, worker: &Worker, entry: &Entry<StreamRun>, ended: &Ended<StreamRun>) -> Outcome {
        let run = &ended.run;
        let interrupted = entry.interrupted.load(Ordering::SeqCst);
        let succeeded = run.succeeded(ended.exit_code) && !interrupted && !ended.timed_out && !ended.refused;
        let session_id = run.session_id.clone().unwrap_or_else(|| worker.session_id.clone());
        let text = run.result.as_ref().and_then(|r| r.text.clone()).unwrap_or_default();
        let mut output = Vec::new();
        if !text.is_empty() {
            output.push(wp::head_of(&text, EXCERPT_BYTES_MAX));
        }
        let summary = if succeeded {
            wp::head_of(&text, EXCERPT_BYTES_MAX)
        } else {
            let stderr = ended.stderr_tail.trim();
            if !stderr.is_empty() {
                output.push(wp::tail_of(stderr, EXCERPT_BYTES_MAX));
            }
            failure(run, ended, interrupted, &text, stderr, self.config.turn_ms_max)
        };
        let writes = run.write_targets.clone();
        let turns = Some(u32::try_from(run.usage_by_message.len()).unwrap_or(u32::MAX));
        let capped = ended.capped.or_else(|| own_cap(run, entry, ended));
        let succeeded = succeeded && capped.is_none();
        let authentication_failed =
            ended.refused || run.result.as_ref().and_then(|r| r.api_error_status).is_some_and(|s| s == 401 || s == 403);
        let Some(result) = &run.result else {
            // No report of usage at all: nothing to account.
            return Outcome { session_id, succeeded, summary, output, writes, turns, capped, ..Outcome::default() };
        };
        let cost = result.total_cost_usd.and_then(|usd| strata_engine::telemetry::decide::usd_to_micros(usd).ok());
        let reported = result.cumulative.map(|u| counters(u, cost));
        let baseline = entry.baseline_for(&session_id);
        let (usage, cumulative) = match (reported, baseline) {
            (Some(now), Some(before)) if !wp::went_back(&now, &before) => (wp::delta(&now, &before), now),
            (Some(now), None) => (this_invocation(result), now),
            // The CLI's totals went back (an API error reports zeros): this turn's figures
            // are unknown, the session's stay where they were.
            (_, Some(before)) => (Counters::default(), before),
            (None, None) => (this_invocation(result), Counters::default()),
        };
        if cumulative.any_billing() {
            self.workers.remember(&session_id, cumulative);
        }
        let usage = Counters { wall_ms: Some(ended.wall_ms), ..usage };
        Outcome {
            session_id,
            succeeded,
            summary,
            output,
            usage,
            cumulative,
            accounting: Some(AccountingSource::Estimated),
            synthetic: false,
            writes,
            turns,
            capped,
            authentication_failed,
        }
    }
}

/// The cap the CLI itself stopped at (`--max-budget-usd`), as strata's caps name it.
fn own_cap(run: &StreamRun, entry: &Entry<StreamRun>, ended: &Ended<StreamRun>) -> Option<(Reached, Spend)> {
    let (measure, observed) = run.own_cap()?;
    let caps = entry.caps;
    let limit = match measure {
        Measure::Turns => caps.turns.map(u64::from),
        Measure::Cost => caps.cost_micros,
        _ => None,
    }?;
    let spend = Spend { wall_ms: ended.wall_ms, ..run.spend() };
    Some((Reached { measure, limit, observed: observed.max(limit) }, spend))
}

/// Why a turn failed, in one line.
fn failure(
    run: &StreamRun,
    ended: &Ended<StreamRun>,
    interrupted: bool,
    text: &str,
    stderr: &str,
    turn_ms: u64,
) -> String {
    let r = run.result.as_ref();
    let what = if ended.timed_out {
        format!("the turn ran past {turn_ms} ms and was killed")
    } else if ended.refused {
        format!(
            "the API refused the credentials {} times in a row (401/403); stopped rather than left to retry",
            run.credential_refusals
        )
    } else if interrupted {
        format!(
            "interrupted (exit {:?}, signal {:?}, terminal reason {})",
            ended.exit_code,
            ended.signal,
            r.and_then(|r| r.terminal_reason.as_deref()).unwrap_or("none")
        )
    } else if let Some(status) = r.and_then(|r| r.api_error_status) {
        format!("API error {status}: {}", wp::head_of(text, 512))
    } else if r.is_some_and(|r| r.is_error) || run.api_error {
        format!(
            "the turn failed ({}): {}",
            r.and_then(|r| r.terminal_reason.clone().or(r.subtype.clone())).unwrap_or_else(|| "error".to_owned()),
            wp::head_of(text, 512)
        )
    } else if r.is_none() {
        format!("no result (exit {:?}, signal {:?}): {}", ended.exit_code, ended.signal, wp::tail_of(stderr, 512))
    } else {
        format!("exit {:?}: {}", ended.exit_code, wp::tail_of(stderr, 512))
    };
    format!("claude: {what}")
}

fn zero() -> Counters {
    Counters {
        input_tokens: Some(0),
        cache_creation_tokens: Some(0),
        cache_read_tokens: Some(0),
        output_tokens: Some(0),
        cost_micros: Some(0),
        wall_ms: None,
    }
}

fn counters(u: Usage, cost_micros: Option<u64>) -> Counters {
    Counters {
        input_tokens: Some(u.input_tokens),
        cache_creation_tokens: Some(u.cache_creation_input_tokens),
        cache_read_tokens: Some(u.cache_read_input_tokens),
        output_tokens: Some(u.output_tokens),
        cost_micros,
        wall_ms: None,
    }
}

/// This invocation's own figures, for a session whose earlier totals are unknown.
fn this_invocation(r: &super::claude::Outcome) -> Counters {
    match r.invocation {
        Some(u) => {
            counters(u, r.invocation_cost_usd.and_then(|usd| strata_engine::telemetry::decide::usd_to_micros(usd).ok()))
        }
        None => counters(r.usage, None),
    }
}

#[async_trait::async_trait]
impl Provider for ClaudeProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Resume and fork are native (`--resume`, `--fork-session`), and SIGINT ends a turn while
    /// keeping the session. Not offered: `local` (that is the coordinator's own context, not a
    /// spawned process), `recent` (a fork always carries the whole history; there is no bounded
    /// window), `followup` (a `-p` turn takes its prompt once; talking to a running worker needs
    /// the stream-json input mode, which this adapter does not run) and `team` (agent teams are
    /// experimental and their resumption and shutdown are unsupported headless).
    fn capabilities(&self) -> Capabilities {
        super::worker_process::CLI_CAPABILITIES
    }

    async fn spawn(&self, brief: &Brief) -> Result<Worker, ProviderError> {
        match brief.mode {
            Mode::InheritFull => {
                let Some(from) = brief.from_session.as_deref() else {
                    return Err(Self::unavailable("an inherit mode needs the session to fork".to_owned()));
                };
                self.start(brief, Session::Fork(from)).await
            }
            Mode::FreshCapsule | Mode::Resume => {
                self.start(brief, Session::New(uuid::Uuid::now_v7().to_string())).await
            }
            Mode::InheritRecent => Err(ProviderError::Unsupported { provider: NAME, operation: "inherit-recent" }),
            Mode::Local => Err(ProviderError::Unsupported { provider: NAME, operation: "local" }),
            Mode::CoordinatedTeam => Err(ProviderError::Unsupported { provider: NAME, operation: "coordinated-team" }),
        }
    }

    async fn resume(&self, brief: &Brief) -> Result<Worker, ProviderError> {
        let Some(from) = brief.from_session.as_deref() else {
            return Err(Self::unavailable("resume needs the session to resume".to_owned()));
        };
        self.start(brief, Session::Resume(from)).await
    }

    async fn wait(&self, worker: &Worker) -> Result<Outcome, ProviderError> {
        let (entry, ended) = self.workers.ended(worker).await?;
        Ok(self.outcome(worker, &entry, &ended))
    }

    async fn interrupt(&self, worker: &Worker) -> Result<(), ProviderError> {
        self.workers.interrupt(worker)
    }

    async fn release(&self, worker: &Worker) -> Result<(), ProviderError> {
        self.workers.release(worker).await
    }
}
