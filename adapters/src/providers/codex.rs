//! Reading a `codex exec --json` run (JSONL, shapes as captured from codex-cli 0.171.0):
//! lenient about every line, the thread id from `thread.started` (or the older
//! `session.created`), warnings (`item.completed` of type `error`) kept apart from failures, and
//! success only when `turn.completed` was seen, no `turn.failed`, and the process exited 0.
//!
//! Usage: `turn.completed` carries the thread's **cumulative** totals (missing fields are 0; there
//! is no cost), so [`JsonlRun::usage_request`] sends them as cumulative counters and the telemetry
//! decider derives the per-invocation delta against the thread's last report. Cached input is a
//! subset of input: it is reported as cache reads and taken out of the uncached count.

use serde_json::{Value, json};

/// Cumulative usage of a thread, as the last `turn.completed` reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Input tokens, cached ones included.
    pub input_tokens: u64,
    /// The cached part of the input.
    pub cached_input_tokens: u64,
    /// Input tokens written to the cache.
    pub cache_write_input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// The reasoning part of the output.
    pub reasoning_output_tokens: u64,
}

/// What a run's stream said so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JsonlRun {
    /// The thread id (`codex exec resume <id>` takes it).
    pub thread_id: Option<String>,
    /// Turns completed.
    pub turns_completed: u64,
    /// The last `turn.failed` message, if any turn failed.
    pub failed: Option<String>,
    /// The last cumulative usage.
    pub totals: Option<Totals>,
    /// Files changed, as (path, kind), from completed `file_change` items.
    pub file_changes: Vec<(String, String)>,
    /// Non-fatal warnings (`item.completed` items of type `error`).
    pub warnings: Vec<String>,
    /// The last agent message.
    pub last_message: Option<String>,
    /// Lines that were not JSON objects.
    pub malformed_lines: u64,
    /// Lines of a type this reader does not use.
    pub other_lines: u64,
    /// Agent steps completed (messages, commands, file changes, tool calls): the turns a cap
    /// counts, since the stream has no per-request event.
    pub steps: u32,
}

/// Item types that are one step of the agent each.
const STEP_ITEMS: [&str; 6] =
    ["agent_message", "command_execution", "file_change", "mcp_tool_call", "web_search", "todo_list"];

impl JsonlRun {
    /// What the thread spent so far: steps, and tokens as the last `turn.completed` gave them
    /// (cumulative for the thread; there is no live count between, and no cost: unknown).
    pub fn spend(&self) -> strata_engine::workgroup::caps::Spend {
        strata_engine::workgroup::caps::Spend {
            cost_micros: None,
            input_tokens: self.totals.map(|t| t.input_tokens + t.cache_write_input_tokens),
            output_tokens: self.totals.map(|t| t.output_tokens),
            wall_ms: 0,
            turns: self.steps,
        }
    }

    /// Reads one line of the stream.
    pub fn feed(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let Some(v) = serde_json::from_str::<Value>(line).ok().filter(Value::is_object) else {
            self.malformed_lines += 1;
            return;
        };
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        match v.get("type").and_then(Value::as_str) {
            Some("thread.started") => self.thread_id = s(&v, "thread_id").or(self.thread_id.take()),
            Some("session.created") => self.thread_id = s(&v, "session_id").or(self.thread_id.take()),
            Some("turn.completed") => {
                self.turns_completed += 1;
                let u = &v["usage"];
                let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                self.totals = Some(Totals {
                    input_tokens: n("input_tokens"),
                    cached_input_tokens: n("cached_input_tokens"),
                    cache_write_input_tokens: n("cache_write_input_tokens"),
                    output_tokens: n("output_tokens"),
                    reasoning_output_tokens: n("reasoning_output_tokens"),
                });
            }
            Some("turn.failed") => {
                self.failed = Some(s(&v["error"], "message").unwrap_or_else(|| "turn failed".to_owned()));
            }
            Some("item.completed") => self.item(&v["item"]),
            _ => self.other_lines += 1,
        }
    }

    fn item(&mut self, item: &Value) {
        if item.get("type").and_then(Value::as_str).is_some_and(|t| STEP_ITEMS.contains(&t)) {
            self.steps = self.steps.saturating_add(1);
        }
        match item.get("type").and_then(Value::as_str) {
            Some("error") => self.warnings.push(item["message"].as_str().unwrap_or_default().to_owned()),
            Some("agent_message") => self.last_message = item["text"].as_str().map(str::to_owned),
            Some("file_change") if item["status"] == "completed" => {
                for c in item["changes"].as_array().into_iter().flatten() {
                    if let (Some(p), Some(k)) = (c["path"].as_str(), c["kind"].as_str()) {
                        self.file_changes.push((p.to_owned(), k.to_owned()));
                    }
                }
            }
            _ => self.other_lines += 1,
        }
    }

    /// Success: a turn completed, none failed, and the process exited 0.
    pub fn succeeded(&self, exit_code: Option<i32>) -> bool {
        exit_code == Some(0) && self.turns_completed > 0 && self.failed.is_none()
    }

    /// A `strata telemetry record` usage request for this run under `session` (strata's
    /// pseudonym for the worker), cumulative for the thread; `None` before a completed turn.
    /// Codex reports no cost: cost is unknown, never zero.
    pub fn usage_request(&self, session: &str) -> Option<Value> {
        let t = self.totals?;
        Some(json!({
            "kind": "usage",
            "session": session,
            "provider": "codex",
            "accounting_source": "provider-reported",
            "cumulative": {
                "input_tokens": t.input_tokens.saturating_sub(t.cached_input_tokens),
                "cache_creation_tokens": t.cache_write_input_tokens,
                "cache_read_tokens": t.cached_input_tokens,
                "output_tokens": t.output_tokens,
                "cost_micros": null,
                "wall_ms": null,
            },
        }))
    }
}
