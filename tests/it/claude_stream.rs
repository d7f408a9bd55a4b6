//! Reading `claude -p` stream-json (shapes as captured from Claude Code 2.1.332): lenient
//! parsing, usage de-duplicated by message id, success only from a clean result and exit 0, and
//! cumulative cost turned into per-invocation deltas across a resume by `strata telemetry`.

use serde_json::{Value, json};
use strata_adapters::providers::claude::{CREDENTIAL_REFUSALS_STOP, StreamRun, Usage};
use strata_tests::strata_bin;

fn init(session: &str) -> String {
    json!({"type": "system", "subtype": "init", "session_id": session, "cwd": "/w", "model": "claude-sonnet-4-5",
        "permissionMode": "acceptEdits", "tools": ["Bash", "Edit", "Read", "Write"], "mcp_servers": [],
        "claude_code_version": "2.1.332", "uuid": "u-0", "memory_paths": [], "fast_mode_state": "off"})
    .to_string()
}

fn assistant(session: &str, msg: &str, block: Value, usage: Value) -> String {
    json!({"type": "assistant", "message": {"id": msg, "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [block], "stop_reason": null, "usage": usage}, "parent_tool_use_id": null,
        "session_id": session, "uuid": "u-1", "timestamp": "2026-11-30T10:00:00Z"})
    .to_string()
}

fn result(session: &str, is_error: bool, cost: f64, cumulative_in: u64, cumulative_out: u64) -> String {
    json!({"type": "result", "subtype": "success", "is_error": is_error, "num_turns": 2, "result": "done",
        "session_id": session, "duration_ms": 584, "stop_reason": "end_turn",
        "terminal_reason": if is_error { "api_error" } else { "completed" },
        "api_error_status": if is_error { json!(400) } else { Value::Null }, "total_cost_usd": cost,
        "usage": {"input_tokens": 200, "cache_creation_input_tokens": 40, "cache_read_input_tokens": 60, "output_tokens": 84},
        "modelUsage": {"claude-sonnet-4-5": {"inputTokens": cumulative_in, "outputTokens": cumulative_out,
            "cacheReadInputTokens": 60, "cacheCreationInputTokens": 40, "costUSD": cost}},
        "permission_denials": [{"tool_name": "Write", "tool_use_id": "toolu_9", "tool_input": {}}], "uuid": "u-9"})
    .to_string()
}

fn run_of(lines: &[String]) -> StreamRun {
    let mut r = StreamRun::default();
    for l in lines {
        r.feed(l);
    }
    r
}

#[test]
fn a_stream_is_read_leniently_and_usage_counts_each_message_once() {
    let s = "db12d5d5-0000-4000-8000-000000000001";
    let usage = json!({"input_tokens": 100, "cache_creation_input_tokens": 40, "cache_read_input_tokens": 60, "output_tokens": 30});
    let lines = vec![
        json!({"type": "system", "subtype": "hook_started", "hook_id": "h", "hook_name": "SessionStart:startup", "session_id": s}).to_string(),
        init(s),
        // One message split over two lines (text, then tool_use): its usage counts once.
        assistant(s, "msg_1", json!({"type": "text", "text": "writing"}), usage.clone()),
        assistant(s, "msg_1", json!({"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {"file_path": "/w/a"}}), usage),
        json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": false}]}, "session_id": s}).to_string(),
        json!({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}).to_string(),
        json!({"type": "system", "subtype": "something_new_in_2_2", "session_id": s}).to_string(),
        "not json at all".to_owned(),
        "[1, 2]".to_owned(),
        assistant(s, "msg_2", json!({"type": "text", "text": "done"}), json!({"input_tokens": 100, "output_tokens": 54})),
        result(s, false, 0.002028, 200, 84),
    ];
    let r = run_of(&lines);
    assert_eq!(r.session_id.as_deref(), Some(s));
    assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(r.tool_uses, vec![("toolu_1".to_owned(), "Write".to_owned())]);
    assert_eq!(
        r.message_usage(),
        Usage { input_tokens: 200, cache_creation_input_tokens: 40, cache_read_input_tokens: 60, output_tokens: 84 }
    );
    assert_eq!((r.malformed_lines, r.other_lines), (2, 4));
    let out = r.result.as_ref().unwrap();
    assert_eq!((out.permission_denials, out.duration_ms), (1, Some(584)));
    assert!(r.succeeded(Some(0)));
    assert!(!r.succeeded(Some(1)), "a non-zero exit is a failure whatever the stream says");
    assert!(!r.succeeded(None), "killed by a signal");
}

#[test]
fn an_api_error_is_a_failure_though_its_subtype_says_success() {
    let s = "db12d5d5-0000-4000-8000-000000000002";
    let synthetic = json!({"type": "assistant", "message": {"id": "msg_x", "model": "<synthetic>", "role": "assistant",
        "content": [{"type": "text", "text": "API Error: 400 bad request"}], "usage": {"input_tokens": 0, "output_tokens": 0}},
        "error": "unknown", "session_id": s})
    .to_string();
    let r = run_of(&[init(s), synthetic, result(s, true, 0.0, 0, 0)]);
    assert!(r.api_error);
    assert_eq!(r.result.as_ref().unwrap().subtype.as_deref(), Some("success"));
    assert!(!r.succeeded(Some(0)));
    assert!(!run_of(&[init(s)]).succeeded(Some(0)), "no result, no success");
    // SIGINT ends a turn with exit 0 and an aborted terminal reason: not a success either.
    let mut aborted: Value = serde_json::from_str(&result(s, false, 0.0, 0, 0)).unwrap();
    aborted["terminal_reason"] = json!("aborted_streaming");
    assert!(!run_of(&[init(s), aborted.to_string()]).succeeded(Some(0)));
    assert!(run_of(&[init(s)]).usage_request("w-1").is_none());
}

#[test]
fn credentials_refused_again_and_again_are_seen_and_an_answer_between_starts_the_count_again() {
    let s = "db12d5d5-0000-4000-8000-000000000004";
    let retry = |status: u64, attempt: u64| {
        json!({"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 10,
            "retry_delay_ms": 500 << attempt, "error_status": status, "error": "authentication_failed", "session_id": s})
        .to_string()
    };
    assert_eq!(CREDENTIAL_REFUSALS_STOP, 3);
    assert!(!run_of(&[init(s), retry(401, 1), retry(401, 2)]).credentials_refused(), "two may be a token refresh");
    let refused = run_of(&[init(s), retry(401, 1), retry(403, 2), retry(401, 3)]);
    assert!(refused.credentials_refused());
    assert_eq!(refused.credential_refusals, 3);
    let overloaded = run_of(&[init(s), retry(529, 1), retry(529, 2), retry(529, 3), retry(500, 4)]);
    assert!(!overloaded.credentials_refused(), "an overloaded or failing API is not a refused credential");
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    let answered = assistant(s, "msg_1", json!({"type": "text", "text": "ok"}), usage);
    let between = run_of(&[init(s), retry(401, 1), retry(401, 2), answered, retry(401, 1), retry(401, 2)]);
    assert!(!between.credentials_refused(), "an answered message between refusals starts the count again");
}

#[test]
fn cumulative_cost_becomes_per_invocation_deltas_across_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let strata =
        |args: &[&str], stdin: &str| strata_tests::strata_ok_with_stdin(strata_bin!(), tmp.path(), args, stdin);
    strata(&["init", "--durability", "process"], "");
    let s = "db12d5d5-0000-4000-8000-000000000003";
    // The first run, then a --resume of the same session: the CLI reports the session's running
    // totals both times (restored from history on resume).
    let first = run_of(&[init(s), result(s, false, 0.002028, 200, 84)]);
    let resumed = run_of(&[init(s), result(s, false, 0.003042, 300, 126)]);
    for r in [&first, &resumed] {
        strata(&["telemetry", "record"], &r.usage_request("worker-1").unwrap().to_string());
    }
    let report: Value = serde_json::from_str(&strata(&["--json", "telemetry", "report"], "")).unwrap();
    let estimated = &report["rollups"][0]["estimated"];
    assert_eq!(estimated["cost_micros"]["USD"]["sum"], 3042, "deltas add up to the last cumulative");
    assert_eq!(estimated["cost_micros"]["USD"]["p50"].as_f64(), Some((2028.0 + 1014.0) / 2.0));
    assert_eq!(estimated["input_tokens"]["sum"], 300);
    assert_eq!(report["rollups"][0]["billed"]["cost_micros"], json!({}), "the CLI's cost is an estimate, never billed");
}
