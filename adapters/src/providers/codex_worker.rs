//! The Codex provider: each turn is one `codex exec --json` process (the prompt on stdin as `-`),
//! in its own process group, with the sandbox (`-s`) and working directory (`-C`) always given
//! as exec-level flags, before `resume <id>` / `fork <id>` too (`codex exec resume` refuses `-s`
//! and `-C` after it, and reports disagree on whether a resumed turn inherits them).
//!
//! * **A private `CODEX_HOME` per worker**, so nothing of a user's `~/.codex` (other MCP servers,
//!   hooks, trust) leaks in: `config.toml` carries the model and model provider from
//!   [`CodexConfig`], no update check, analytics or feedback, and `strata mcp` as the `strata`
//!   MCP server with `default_tools_approval_mode = "approve"` (`exec` runs with approval policy
//!   `never`, so an MCP call not approved up front fails); `hooks.json` carries the PreToolUse
//!   hook on `apply_patch` running `strata hook codex pre-tool-use --journal … --lineage …
//!   --root <workdir>`. Codex runs a hook only once a person trusted it and `exec` skips
//!   untrusted ones silently, so every turn passes `--dangerously-bypass-hook-trust`: the hook is
//!   strata's own, written by this adapter a moment before.
//! * **Threads outlive workers.** The private homes share one `sessions/` directory (a symbolic
//!   link to `<state_dir>/codex-sessions`), so a later worker can `resume` or `fork` a thread an
//!   earlier one started.
//! * **Outcome.** Success only with `turn.completed`, no `turn.failed` and exit 0, and not
//!   interrupted. `turn.completed.usage` is the thread's cumulative total: this turn's usage is
//!   the difference from the thread's last total (for a fork, the parent's), kept per thread id;
//!   unknown when that baseline is. Codex reports no cost: cost is unknown, never zero; the
//!   token counts are the provider's own (`provider-reported`).
//! * **Signals** as for Claude: SIGINT to the CLI interrupts, SIGTERM then SIGKILL to the group
//!   releases.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use strata_engine::ce::router::Mode;
use strata_engine::telemetry::events::{AccountingSource, Counters};
use strata_engine::workgroup::provider::{Brief, Capabilities, Outcome, Provider, ProviderError, Worker};

use strata_engine::workgroup::caps::Spend;

use super::codex::{JsonlRun, Totals};
pub use super::worker_process::Knowledge;
use super::worker_process::{
    self as wp, Ended, Entry, HOOK_TIMEOUT_S, KNOWLEDGE_SERVER, Limits, Turn, Wiring, Workers,
};

const NAME: &str = "codex";
/// The tool the write guard is asked about (codex's file edits all go through it).
pub const GUARDED_TOOL: &str = "apply_patch";
/// Largest summary or output excerpt kept in an outcome, bytes.
pub const EXCERPT_BYTES_MAX: usize = 4096;

/// A custom model provider for `config.toml` (`[model_providers.<id>]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelProvider {
    /// The table key, also written as `model_provider`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Base URL (for the Responses API, ending in `/v1`).
    pub base_url: String,
    /// `responses` (the only wire API current codex speaks to custom providers).
    pub wire_api: String,
    /// The environment variable holding the API key, if the endpoint needs one.
    pub env_key: Option<String>,
    /// Retries of a failed request (`None`: codex's default).
    pub request_max_retries: Option<u32>,
    /// Retries of a dropped stream (`None`: codex's default).
    pub stream_max_retries: Option<u32>,
}

/// How the Codex provider runs `codex`.
#[derive(Clone, Debug)]
pub struct CodexConfig {
    /// The `codex` executable (the npm launcher or the native binary).
    pub program: PathBuf,
    /// The `strata` executable the hook and the MCP server run (default: this process's own).
    pub strata_program: Option<PathBuf>,
    /// `model` (and `-m`); default: codex's own choice.
    pub model: Option<String>,
    /// A custom model provider (codex ignores `OPENAI_BASE_URL`); `None`: codex's built-in one.
    pub model_provider: Option<ModelProvider>,
    /// More `config.toml` settings, merged over the ones this adapter writes.
    pub config: toml::Table,
    /// `-s`: `workspace-write` lets the worker write in its directory (and `/tmp`).
    pub sandbox: String,
    /// Where the private homes and the shared sessions directory are made.
    pub state_dir: PathBuf,
    /// The Knowledge API attached over MCP.
    pub knowledge: Knowledge,
    /// Keep this process's environment for the CLI (else only `env` is set; `CODEX_HOME` is
    /// always the worker's own).
    pub inherit_env: bool,
    /// Environment for the CLI (and so its hooks and MCP servers).
    pub env: Vec<(String, String)>,
    /// More exec-level arguments, placed before `resume` / `fork`.
    pub extra_args: Vec<String>,
    /// Time for the stream to name the thread, ms.
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

impl CodexConfig {
    /// `program` with the defaults: `workspace-write`, codex's own model and provider, the
    /// Knowledge API from the brief's journal, this process's environment, 2 minutes to start,
    /// 1 hour a turn.
    pub fn new(program: PathBuf, state_dir: PathBuf) -> CodexConfig {
        CodexConfig {
            program,
            strata_program: None,
            model: None,
            model_provider: None,
            config: toml::Table::new(),
            sandbox: "workspace-write".to_owned(),
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

/// The Codex provider.
#[derive(Debug)]
pub struct CodexProvider {
    config: CodexConfig,
    workers: Workers<JsonlRun>,
}

enum Thread<'a> {
    New,
    Resume(&'a str),
    Fork(&'a str),
}

fn unavailable(detail: String) -> ProviderError {
    ProviderError::Unavailable { provider: NAME, detail }
}

impl CodexProvider {
    /// A provider running `codex` as `config` says.
    pub fn new(config: CodexConfig) -> CodexProvider {
        CodexProvider { config, workers: Workers::new(NAME) }
    }

    /// The `config.toml` of a worker wired as `wiring` says.
    fn config_toml(&self, wiring: &Wiring, model: Option<&str>) -> Result<String, ProviderError> {
        let c = &self.config;
        let mut t = toml::Table::new();
        if let Some(m) = model {
            t.insert("model".into(), m.into());
        }
        t.insert("check_for_update_on_startup".into(), false.into());
        let off = |t: &mut toml::Table, k: &str| {
            let mut sub = toml::Table::new();
            sub.insert("enabled".into(), false.into());
            t.insert(k.into(), sub.into());
        };
        off(&mut t, "analytics");
        off(&mut t, "feedback");
        if let Some(p) = &c.model_provider {
            t.insert("model_provider".into(), p.id.clone().into());
            let mut mp = toml::Table::new();
            mp.insert("name".into(), p.name.clone().into());
            mp.insert("base_url".into(), p.base_url.clone().into());
            mp.insert("wire_api".into(), p.wire_api.clone().into());
            if let Some(k) = &p.env_key {
                mp.insert("env_key".into(), k.clone().into());
            }
            if let Some(n) = p.request_max_retries {
                mp.insert("request_max_retries".into(), i64::from(n).into());
            }
            if let Some(n) = p.stream_max_retries {
                mp.insert("stream_max_retries".into(), i64::from(n).into());
            }
            let mut providers = toml::Table::new();
            providers.insert(p.id.clone(), mp.into());
            t.insert("model_providers".into(), providers.into());
        }
        if let Some(args) = wiring.mcp_args() {
            let mut server = toml::Table::new();
            server.insert("command".into(), wiring.strata.display().to_string().into());
            server.insert("args".into(), args.into_iter().map(toml::Value::from).collect::<Vec<_>>().into());
            server.insert("default_tools_approval_mode".into(), "approve".into());
            let mut servers = toml::Table::new();
            servers.insert(KNOWLEDGE_SERVER.into(), server.into());
            t.insert("mcp_servers".into(), servers.into());
        }
        merge(&mut t, &c.config);
        toml::to_string(&t).map_err(|e| unavailable(format!("config.toml: {e}")))
    }

    async fn start(&self, brief: &Brief, thread: Thread<'_>) -> Result<Worker, ProviderError> {
        let c = &self.config;
        let wiring = Wiring::resolve(NAME, c.strata_program.as_deref(), &c.knowledge, brief)?;
        let sessions = c.state_dir.join("codex-sessions");
        std::fs::create_dir_all(&sessions).map_err(|e| unavailable(format!("{}: {e}", sessions.display())))?;
        let home = wp::private_dir(&c.state_dir.join("codex-workers"))
            .map_err(|e| unavailable(format!("a private CODEX_HOME under {}: {e}", c.state_dir.display())))?;
        let cleanup = |e: ProviderError| {
            let _ = std::fs::remove_dir_all(&home);
            e
        };
        std::os::unix::fs::symlink(&sessions, home.join("sessions"))
            .map_err(|e| cleanup(unavailable(format!("linking the shared sessions into {}: {e}", home.display()))))?;
        // The dispatch's model, else the one configured for every worker.
        let model = brief.model.as_deref().or(c.model.as_deref());
        let config = self.config_toml(&wiring, model).map_err(cleanup)?;
        wp::write_private(&home.join("config.toml"), config.as_bytes())
            .map_err(|e| cleanup(unavailable(format!("writing config.toml: {e}"))))?;
        let hook = wiring.hook_command("codex", &brief.lineage_id, c.hook_deadline_ms);
        let hooks = json!({"hooks": {"PreToolUse": [{"matcher": GUARDED_TOOL,
            "hooks": [{"type": "command", "command": hook, "timeout": HOOK_TIMEOUT_S}]}]}});
        wp::write_private(&home.join("hooks.json"), hooks.to_string().as_bytes())
            .map_err(|e| cleanup(unavailable(format!("writing hooks.json: {e}"))))?;

        let mut cmd = tokio::process::Command::new(&c.program);
        if !c.inherit_env {
            cmd.env_clear();
        }
        cmd.envs(c.env.iter().map(|(k, v)| (k, v))).env("CODEX_HOME", &home).current_dir(&wiring.workdir);
        cmd.args(["exec", "--json"]);
        if let Some(m) = model {
            cmd.args(["-m", m]);
        }
        cmd.args(["-s", &c.sandbox]).arg("-C").arg(&wiring.workdir);
        cmd.args(["--skip-git-repo-check", "--dangerously-bypass-hook-trust"]);
        cmd.args(&c.extra_args);
        let zero = Counters {
            input_tokens: Some(0),
            cache_creation_tokens: Some(0),
            cache_read_tokens: Some(0),
            output_tokens: Some(0),
            cost_micros: None,
            wall_ms: None,
        };
        let (baseline, expected) = match thread {
            Thread::New => (Some(zero), None),
            Thread::Resume(id) => {
                cmd.args(["resume", id]);
                (self.workers.last_cumulative(id), Some(id.to_owned()))
            }
            Thread::Fork(id) => {
                cmd.args(["fork", id]);
                (self.workers.last_cumulative(id), None)
            }
        };
        // The prompt on stdin: an assembled prompt can be longer than one argument may be.
        cmd.arg("-");
        let before = baseline.map(|b| Spend::of(&b, 0)).unwrap_or_default();
        let limits = Limits { turn_ms_max: c.turn_ms_max, exit_grace_ms: c.exit_grace_ms, caps: brief.caps, before };
        let turn = Turn::<JsonlRun>::start(cmd, brief.prompt.clone().into_bytes(), limits)
            .map_err(|e| cleanup(unavailable(format!("cannot start {}: {e}", c.program.display()))))?;
        let entry = Entry {
            turn,
            dir: home.clone(),
            baseline,
            expected_session: expected,
            interrupted: AtomicBool::new(false),
            caps: brief.caps,
        };
        self.workers.started(entry, c.start_ms_max).await
    }

    fn outcome(&self, worker: &Worker, entry: &Entry<JsonlRun>, ended: &Ended<JsonlRun>) -> Outcome {
        let run = &ended.run;
        let interrupted = entry.interrupted.load(Ordering::SeqCst);
        let succeeded = run.succeeded(ended.exit_code) && !interrupted && !ended.timed_out;
        let session_id = run.thread_id.clone().unwrap_or_else(|| worker.session_id.clone());
        let text = run.last_message.clone().unwrap_or_default();
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
            let what = if ended.timed_out {
                format!("the turn ran past {} ms and was killed", self.config.turn_ms_max)
            } else if interrupted {
                format!("interrupted (exit {:?}, signal {:?})", ended.exit_code, ended.signal)
            } else if let Some(f) = &run.failed {
                format!("the turn failed: {}", wp::head_of(f, 512))
            } else if run.turns_completed == 0 {
                format!(
                    "no completed turn (exit {:?}, signal {:?}): {}",
                    ended.exit_code,
                    ended.signal,
                    wp::tail_of(stderr, 512)
                )
            } else {
                format!("exit {:?}: {}", ended.exit_code, wp::tail_of(stderr, 512))
            };
            format!("codex: {what}")
        };
        let mut writes: Vec<String> = Vec::new();
        for (p, _) in &run.file_changes {
            if !writes.contains(p) && writes.len() < strata_engine::workgroup::events::WRITES_MAX {
                writes.push(p.clone());
            }
        }
        let turns = Some(run.steps);
        let capped = ended.capped;
        let succeeded = succeeded && capped.is_none();
        let authentication_failed =
            run.failed.as_deref().is_some_and(refused_credentials) || refused_credentials(&ended.stderr_tail);
        let Some(totals) = run.totals else {
            return Outcome {
                session_id,
                succeeded,
                summary,
                output,
                writes,
                turns,
                capped,
                authentication_failed,
                ..Outcome::default()
            };
        };
        let now = cumulative(totals);
        let (usage, cumulative) = match entry.baseline_for(&session_id) {
            Some(before) if !wp::went_back(&now, &before) => (wp::delta(&now, &before), now),
            // Totals behind the last ones seen: this turn's figures are unknown.
            Some(before) => (Counters::default(), before),
            None => (Counters::default(), now),
        };
        // A thread the stream never named has no totals to carry to a later turn.
        if !session_id.is_empty() {
            self.workers.remember(&session_id, cumulative);
        }
        let usage = Counters { wall_ms: Some(ended.wall_ms), cost_micros: None, ..usage };
        Outcome {
            session_id,
            succeeded,
            summary,
            output,
            usage,
            cumulative,
            accounting: Some(AccountingSource::ProviderReported),
            synthetic: false,
            writes,
            turns,
            capped,
            authentication_failed,
        }
    }
}

/// Whether a failure text says the provider refused the credentials (HTTP 401 or 403).
fn refused_credentials(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("401 unauthorized")
        || t.contains("403 forbidden")
        || t.contains("status 401")
        || t.contains("invalid api key")
}

/// A thread's totals as counters: cached input is a subset of input, reported as cache reads
/// and taken out of the uncached count (as `JsonlRun::usage_request` does). No cost.
fn cumulative(t: Totals) -> Counters {
    Counters {
        input_tokens: Some(t.input_tokens.saturating_sub(t.cached_input_tokens)),
        cache_creation_tokens: Some(t.cache_write_input_tokens),
        cache_read_tokens: Some(t.cached_input_tokens),
        output_tokens: Some(t.output_tokens),
        cost_micros: None,
        wall_ms: None,
    }
}

/// `over` merged into `base`: tables recursively, anything else replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[async_trait::async_trait]
impl Provider for CodexProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Resume and fork are native (`exec resume`, `exec fork`), and SIGINT ends a turn while the
    /// thread stays resumable. Not offered: `local` (the coordinator's own context), `recent`
    /// (a fork carries the whole thread), `followup` (an `exec` turn takes its prompt once) and
    /// `team` (codex's collaboration tools are driven by the model, not by the caller).
    fn capabilities(&self) -> Capabilities {
        super::worker_process::CLI_CAPABILITIES
    }

    async fn spawn(&self, brief: &Brief) -> Result<Worker, ProviderError> {
        match brief.mode {
            Mode::InheritFull => {
                let Some(from) = brief.from_session.as_deref() else {
                    return Err(unavailable("an inherit mode needs the thread to fork".to_owned()));
                };
                self.start(brief, Thread::Fork(from)).await
            }
            Mode::FreshCapsule | Mode::Resume => self.start(brief, Thread::New).await,
            Mode::InheritRecent => Err(ProviderError::Unsupported { provider: NAME, operation: "inherit-recent" }),
            Mode::Local => Err(ProviderError::Unsupported { provider: NAME, operation: "local" }),
            Mode::CoordinatedTeam => Err(ProviderError::Unsupported { provider: NAME, operation: "coordinated-team" }),
        }
    }

    async fn resume(&self, brief: &Brief) -> Result<Worker, ProviderError> {
        let Some(from) = brief.from_session.as_deref() else {
            return Err(unavailable("resume needs the thread to resume".to_owned()));
        };
        self.start(brief, Thread::Resume(from)).await
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
