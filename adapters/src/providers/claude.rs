//! Reading a `claude -p --output-format stream-json --verbose` run: lenient about every line
//! (unknown types and fields are counted and skipped, never fatal), usage de-duplicated by
//! message id (several assistant lines share one message), the session id taken from the stream,
//! and success decided only from a seen `result` with `is_error: false` and exit code 0 (an API
//! error reports `subtype: "success"` with `is_error: true`).
//!
//! Cost: `total_cost_usd` and `modelUsage` are cumulative for the session (restored on resume
//! and fork); [`StreamRun::usage_request`] turns them into a `strata telemetry record` usage
//! request carrying the cumulative counters, so the per-invocation delta is derived against the
//! session's last report by the telemetry decider. The CLI computes cost from its own price
//! table, so the accounting source is `estimated`: recorded, never billed.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// One assistant message's usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Cache-creation input tokens.
    pub cache_creation_input_tokens: u64,
    /// Cache-read input tokens.
    pub cache_read_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl Usage {
    fn of(v: &Value) -> Usage {
        let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        Usage {
            input_tokens: n("input_tokens"),
            cache_creation_input_tokens: n("cache_creation_input_tokens"),
            cache_read_input_tokens: n("cache_read_input_tokens"),
            output_tokens: n("output_tokens"),
        }
    }
}

/// The final `result` line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// `is_error`.
    pub is_error: bool,
    /// `subtype` (`success` even for API errors).
    pub subtype: Option<String>,
    /// `terminal_reason`.
    pub terminal_reason: Option<String>,
    /// `api_error_status`.
    pub api_error_status: Option<u64>,
    /// Cumulative session cost, USD (a client-side estimate).
    pub total_cost_usd: Option<f64>,
    /// This invocation's main-loop usage.
    pub usage: Usage,
    /// Cumulative per-model token counts (`modelUsage`), summed over models.
    pub cumulative: Option<Usage>,
    /// This invocation's per-model token counts (`model_usage_since_last_result`, 2.1.332),
    /// summed over models; subagents included, unlike `usage`.
    pub invocation: Option<Usage>,
    /// This invocation's cost, USD (the `costUSD` of `model_usage_since_last_result`, summed;
    /// an estimate like the cumulative one).
    pub invocation_cost_usd: Option<f64>,
    /// The closing text (`result`), or the error text.
    pub text: Option<String>,
    /// Tool calls the permission layer or a hook denied.
    pub permission_denials: usize,
    /// Wall time the CLI reports, ms.
    pub duration_ms: Option<u64>,
    /// Turns the CLI counted (`num_turns`).
    pub num_turns: Option<u64>,
}

/// Most write targets a run keeps.
pub const WRITE_TARGETS_MAX: usize = 1_024;
/// Credential refusals in a row (`system/api_retry` answered 401 or 403) at which a worker is
/// stopped and its workgroup paused, rather than left to the CLI's own retries.
pub const CREDENTIAL_REFUSALS_STOP: u32 = 3;

/// What a run's stream said so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamRun {
    /// Session id, from `system/init` or any later line carrying one.
    pub session_id: Option<String>,
    /// Model from `system/init`.
    pub model: Option<String>,
    /// Usage per assistant message id (last line wins: later lines of a message repeat it).
    pub usage_by_message: BTreeMap<String, Usage>,
    /// Tool calls requested, in order: (tool use id, tool name).
    pub tool_uses: Vec<(String, String)>,
    /// Files the write tools were asked to write (`file_path` / `notebook_path`), in order,
    /// each once, at most [`WRITE_TARGETS_MAX`].
    pub write_targets: Vec<String>,
    /// A synthetic API-error message was seen.
    pub api_error: bool,
    /// The `result`, once seen.
    pub result: Option<Outcome>,
    /// `system/api_retry` lines in a row (no answered message between them) whose status says
    /// the API refused the credentials (401 or 403).
    pub credential_refusals: u32,
    /// Lines that were not JSON objects.
    pub malformed_lines: u64,
    /// Lines of a type this reader does not use.
    pub other_lines: u64,
}

impl StreamRun {
    /// Reads one line of the stream.
    pub fn feed(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            self.malformed_lines += 1;
            return;
        };
        if !v.is_object() {
            self.malformed_lines += 1;
            return;
        }
        if let Some(id) = v.get("session_id").and_then(Value::as_str) {
            self.session_id = Some(id.to_owned());
        }
        match (v.get("type").and_then(Value::as_str), v.get("subtype").and_then(Value::as_str)) {
            (Some("system"), Some("init")) => {
                self.model = v.get("model").and_then(Value::as_str).map(str::to_owned);
            }
            (Some("system"), Some("api_retry")) => {
                if matches!(v.get("error_status").and_then(Value::as_u64), Some(401 | 403)) {
                    self.credential_refusals = self.credential_refusals.saturating_add(1);
                }
            }
            (Some("assistant"), _) => self.assistant(&v),
            (Some("result"), _) => self.result = Some(outcome(&v)),
            _ => self.other_lines += 1,
        }
    }

    fn assistant(&mut self, v: &Value) {
        let m = &v["message"];
        if m["model"] == "<synthetic>" || v.get("error").is_some() {
            self.api_error = true;
        } else {
            self.credential_refusals = 0;
        }
        if let (Some(id), Some(u)) = (m.get("id").and_then(Value::as_str), m.get("usage")) {
            self.usage_by_message.insert(id.to_owned(), Usage::of(u));
        }
        for block in m.get("content").and_then(Value::as_array).into_iter().flatten() {
            if block["type"] == "tool_use"
                && let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str())
            {
                self.tool_uses.push((id.to_owned(), name.to_owned()));
                let key = if name == "NotebookEdit" { "notebook_path" } else { "file_path" };
                if strata_engine::guard::CLAUDE_WRITE_TOOLS.contains(&name)
                    && let Some(p) = block["input"][key].as_str()
                    && !self.write_targets.iter().any(|t| t == p)
                    && self.write_targets.len() < WRITE_TARGETS_MAX
                {
                    self.write_targets.push(p.to_owned());
                }
            }
        }
    }

    /// Whether the API kept refusing the credentials: [`CREDENTIAL_REFUSALS_STOP`] retries in a
    /// row were answered 401 or 403. The CLI would go on retrying with growing waits (ten
    /// retries, about three minutes); a credential refused that often is not coming back by
    /// itself, while a token that is being refreshed gets through well before.
    pub fn credentials_refused(&self) -> bool {
        self.credential_refusals >= CREDENTIAL_REFUSALS_STOP
    }

    /// This invocation's usage summed over distinct messages. The assistant lines repeat the
    /// usage of `message_start`: final input and cache counts, but an output count of at most 1
    /// (the final one arrives with `message_delta`, which only the `result` reflects). So once a
    /// `result` was seen, the output count is the larger of the messages' sum and the result's
    /// own `usage.output_tokens` (the main loop's; subagent messages only add to the sum);
    /// before it, the messages' sum is a lower bound.
    pub fn message_usage(&self) -> Usage {
        let summed = self.usage_by_message.values().fold(Usage::default(), |a, u| Usage {
            input_tokens: a.input_tokens + u.input_tokens,
            cache_creation_input_tokens: a.cache_creation_input_tokens + u.cache_creation_input_tokens,
            cache_read_input_tokens: a.cache_read_input_tokens + u.cache_read_input_tokens,
            output_tokens: a.output_tokens + u.output_tokens,
        });
        let final_output = self.result.as_ref().map_or(0, |r| r.usage.output_tokens);
        Usage { output_tokens: summed.output_tokens.max(final_output), ..summed }
    }

    /// What the turn spent so far: turns are distinct assistant messages, tokens their summed
    /// usage (a lower bound for output before the `result`), cost only once the `result` gives
    /// this invocation's (unknown before: never zero).
    pub fn spend(&self) -> strata_engine::workgroup::caps::Spend {
        let u = self.message_usage();
        let cost = self
            .result
            .as_ref()
            .and_then(|r| r.invocation_cost_usd)
            .and_then(|usd| strata_engine::telemetry::decide::usd_to_micros(usd).ok());
        strata_engine::workgroup::caps::Spend {
            cost_micros: cost,
            input_tokens: Some(u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens),
            output_tokens: Some(u.output_tokens),
            wall_ms: 0,
            turns: u32::try_from(self.usage_by_message.len()).unwrap_or(u32::MAX),
        }
    }

    /// The cap the CLI itself stopped at (`--max-turns`, `--max-budget-usd`), as its `result`
    /// says: `(measure, figure seen)`.
    pub fn own_cap(&self) -> Option<(strata_engine::workgroup::caps::Measure, u64)> {
        use strata_engine::workgroup::caps::Measure;
        let r = self.result.as_ref()?;
        match (r.subtype.as_deref(), r.terminal_reason.as_deref()) {
            (Some("error_max_turns"), _) | (_, Some("max_turns")) => {
                Some((Measure::Turns, r.num_turns.unwrap_or(0).saturating_add(1)))
            }
            (Some("error_max_budget_usd"), _) | (_, Some("budget_exhausted")) => Some((
                Measure::Cost,
                r.total_cost_usd.and_then(|usd| strata_engine::telemetry::decide::usd_to_micros(usd).ok()).unwrap_or(0),
            )),
            _ => None,
        }
    }

    /// Success: a `result` was seen, it is not an error, the turn was not aborted, no API error
    /// came before it, and the process exited 0. (A turn ended by SIGINT exits 0 with
    /// `terminal_reason: "aborted_streaming"` or `"aborted_tools"`.)
    pub fn succeeded(&self, exit_code: Option<i32>) -> bool {
        exit_code == Some(0)
            && !self.api_error
            && self
                .result
                .as_ref()
                .is_some_and(|r| !r.is_error && !r.terminal_reason.as_deref().is_some_and(|t| t.starts_with("aborted")))
    }

    /// A `strata telemetry record` usage request for this run under `session` (strata's
    /// pseudonym for the worker, never the provider's id), cumulative as the CLI reports it.
    /// `None` before a result.
    pub fn usage_request(&self, session: &str) -> Option<Value> {
        let r = self.result.as_ref()?;
        let c = r.cumulative;
        let cost = r.total_cost_usd.and_then(|usd| strata_engine::telemetry::decide::usd_to_micros(usd).ok());
        Some(json!({
            "kind": "usage",
            "session": session,
            "provider": "claude",
            "accounting_source": "estimated",
            "currency": cost.map(|_| "USD"),
            "cumulative": {
                "input_tokens": c.map(|u| u.input_tokens),
                "cache_creation_tokens": c.map(|u| u.cache_creation_input_tokens),
                "cache_read_tokens": c.map(|u| u.cache_read_input_tokens),
                "output_tokens": c.map(|u| u.output_tokens),
                "cost_micros": cost,
                "wall_ms": null,
            },
        }))
    }
}

/// A per-model usage object (`modelUsage` and its kind) summed over models, with the summed
/// `costUSD` when any model reports one.
fn per_model(v: Option<&Value>) -> Option<(Usage, Option<f64>)> {
    let models = v?.as_object()?;
    let usage = models.values().fold(Usage::default(), |a, m| {
        let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
        Usage {
            input_tokens: a.input_tokens + n("inputTokens"),
            cache_creation_input_tokens: a.cache_creation_input_tokens + n("cacheCreationInputTokens"),
            cache_read_input_tokens: a.cache_read_input_tokens + n("cacheReadInputTokens"),
            output_tokens: a.output_tokens + n("outputTokens"),
        }
    });
    let costs: Vec<f64> = models.values().filter_map(|m| m.get("costUSD").and_then(Value::as_f64)).collect();
    Some((usage, if costs.is_empty() { None } else { Some(costs.iter().sum()) }))
}

fn outcome(v: &Value) -> Outcome {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let cumulative = per_model(v.get("modelUsage")).map(|(u, _)| u);
    let invocation = per_model(v.get("model_usage_since_last_result"));
    Outcome {
        is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(true),
        subtype: s("subtype"),
        terminal_reason: s("terminal_reason"),
        api_error_status: v.get("api_error_status").and_then(Value::as_u64),
        total_cost_usd: v.get("total_cost_usd").and_then(Value::as_f64),
        usage: v.get("usage").map(Usage::of).unwrap_or_default(),
        cumulative,
        invocation: invocation.map(|(u, _)| u),
        invocation_cost_usd: invocation.and_then(|(_, c)| c),
        text: s("result"),
        permission_denials: v.get("permission_denials").and_then(Value::as_array).map_or(0, Vec::len),
        duration_ms: v.get("duration_ms").and_then(Value::as_u64),
        num_turns: v.get("num_turns").and_then(Value::as_u64),
    }
}
