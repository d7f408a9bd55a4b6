//! The real providers as `strata run` builds them: the CLIs on `PATH` or named by `STRATA_CLAUDE`
//! / `STRATA_CODEX`, models by `STRATA_CLAUDE_MODEL` / `STRATA_CODEX_MODEL`, and a Responses-API
//! endpoint for Codex by `STRATA_CODEX_BASE_URL` (its key's variable by `STRATA_CODEX_ENV_KEY`),
//! the write guard's deadline by `STRATA_HOOK_DEADLINE_MS` (clamped to the hook's own range), and
//! the strata executable the workers' hooks and MCP servers run by `STRATA_PROGRAM` (default:
//! this process's own), and how deep in delegation this run is by `STRATA_NESTING_DEPTH` (set
//! for every worker it starts, one deeper than its own).

use std::path::PathBuf;

use crate::providers::claude_worker::{ClaudeConfig, ClaudeProvider};
use crate::providers::codex_worker::{CodexConfig, CodexProvider, ModelProvider};

fn program(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// The write guard's deadline: `STRATA_HOOK_DEADLINE_MS` within the hook's range, else the
/// default.
fn hook_deadline_ms() -> u64 {
    use crate::cli::{HOOK_DEADLINE_MS_DEFAULT, HOOK_DEADLINE_MS_MAX, HOOK_DEADLINE_MS_MIN};
    std::env::var("STRATA_HOOK_DEADLINE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(HOOK_DEADLINE_MS_DEFAULT, |ms| ms.clamp(HOOK_DEADLINE_MS_MIN, HOOK_DEADLINE_MS_MAX))
}

/// The strata executable workers' hooks and `strata mcp` run, if `STRATA_PROGRAM` names one.
pub(crate) fn strata_program() -> Option<PathBuf> {
    std::env::var_os("STRATA_PROGRAM").filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// Name of the variable that says how deep in delegation a process runs.
pub const NESTING_VAR: &str = "STRATA_NESTING_DEPTH";

/// How deep in delegation this run is: `STRATA_NESTING_DEPTH` (0 when unset).
pub fn nesting_depth() -> anyhow::Result<u64> {
    let Ok(v) = std::env::var(NESTING_VAR) else { return Ok(0) };
    v.trim().parse::<u64>().ok().filter(|d| *d <= 1_000).ok_or_else(|| {
        anyhow::anyhow!(
            "[STRATA-E0601] {NESTING_VAR} is {v:?}; it must be a whole number of delegation levels (0 at the top), or unset"
        )
    })
}

/// Claude Code workers keeping their state in `state`, started one level deeper than `depth`.
pub fn claude(state: PathBuf, depth: u64) -> ClaudeProvider {
    let mut config = ClaudeConfig::new(program("STRATA_CLAUDE", "claude"), state);
    config.env.push((NESTING_VAR.into(), (depth + 1).to_string()));
    config.env.push(("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(), "1".into()));
    config.env.push(("DISABLE_AUTOUPDATER".into(), "1".into()));
    config.model = std::env::var("STRATA_CLAUDE_MODEL").ok();
    config.hook_deadline_ms = hook_deadline_ms();
    config.strata_program = strata_program();
    ClaudeProvider::new(config)
}

/// Codex workers keeping their state in `state`, started one level deeper than `depth`.
pub fn codex(state: PathBuf, depth: u64) -> CodexProvider {
    let mut config = CodexConfig::new(program("STRATA_CODEX", "codex"), state);
    config.env.push((NESTING_VAR.into(), (depth + 1).to_string()));
    // A Responses-API endpoint other than OpenAI's (a gateway, a local server).
    if let Some(url) = std::env::var("STRATA_CODEX_BASE_URL").ok().filter(|u| !u.is_empty()) {
        config.model_provider = Some(ModelProvider {
            id: "strata".into(),
            name: "strata".into(),
            base_url: url,
            wire_api: "responses".into(),
            env_key: std::env::var("STRATA_CODEX_ENV_KEY").ok(),
            request_max_retries: Some(0),
            stream_max_retries: Some(0),
        });
    }
    config.model = std::env::var("STRATA_CODEX_MODEL").ok();
    config.hook_deadline_ms = hook_deadline_ms();
    config.strata_program = strata_program();
    CodexProvider::new(config)
}

/// `models` with every tier of a provider pinned to the model its variable names
/// (`STRATA_CLAUDE_MODEL`, `STRATA_CODEX_MODEL`): an operator's override of the profile's choice
/// for every role, recorded in the run's policy like any other setting.
pub fn pin_models(mut models: strata_engine::workgroup::models::Models) -> strata_engine::workgroup::models::Models {
    for (provider, var) in [("claude", "STRATA_CLAUDE_MODEL"), ("codex", "STRATA_CODEX_MODEL")] {
        if let Some(name) = std::env::var(var).ok().filter(|n| !n.trim().is_empty()) {
            models.insert(provider.to_owned(), strata_engine::workgroup::models::Names::all(name.trim()));
        }
    }
    models
}

/// What `--provider auto` runs on: `claude` if found, else `codex`, else the simulated provider.
pub fn auto() -> &'static str {
    let found = |var: &str, name: &str| {
        std::env::var_os(var).is_some()
            || std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    if found("STRATA_CLAUDE", "claude") {
        "claude"
    } else if found("STRATA_CODEX", "codex") {
        "codex"
    } else {
        "sim"
    }
}
