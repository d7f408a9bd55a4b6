//! Reading `codex exec --json` (shapes as captured from codex-cli 0.171.0): warnings are not
//! failures, success needs `turn.completed`, no `turn.failed` and exit 0, and the thread's
//! cumulative usage becomes per-invocation deltas across resumes through `strata telemetry`.

use serde_json::{Value, json};
use strata_adapters::providers::codex::JsonlRun;
use strata_tests::strata_bin;

const THREAD: &str = "01a228f8-4510-7212-8f05-954b40657188";

fn completed(input: u64, cached: u64, output: u64) -> String {
    json!({"type": "turn.completed", "usage": {"input_tokens": input, "cached_input_tokens": cached,
        "cache_write_input_tokens": 0, "output_tokens": output, "reasoning_output_tokens": 40}})
    .to_string()
}

fn run_of(lines: &[String]) -> JsonlRun {
    let mut r = JsonlRun::default();
    for l in lines {
        r.feed(l);
    }
    r
}

fn success_lines(input: u64, cached: u64, output: u64) -> Vec<String> {
    vec![
        json!({"type": "thread.started", "thread_id": THREAD}).to_string(),
        json!({"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": "Model metadata for `gpt-5.1-codex` not found."}}).to_string(),
        json!({"type": "turn.started"}).to_string(),
        json!({"type": "item.started", "item": {"id": "item_1", "type": "command_execution", "command": "/bin/bash -lc 'echo hi > f.txt'", "status": "in_progress"}}).to_string(),
        json!({"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "/bin/bash -lc '…'", "aggregated_output": "done\n", "exit_code": 0, "status": "completed"}}).to_string(),
        json!({"type": "item.completed", "item": {"id": "item_2", "type": "file_change", "changes": [{"path": "/abs/hello.txt", "kind": "add"}], "status": "completed"}}).to_string(),
        json!({"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "all done"}}).to_string(),
        "garbage".to_owned(),
        completed(input, cached, output),
    ]
}

#[test]
fn a_run_is_read_leniently_and_warnings_are_not_failures() {
    let r = run_of(&success_lines(2000, 1200, 100));
    assert_eq!(r.thread_id.as_deref(), Some(THREAD));
    assert_eq!(r.warnings.len(), 1);
    assert_eq!(r.file_changes, vec![("/abs/hello.txt".to_owned(), "add".to_owned())]);
    assert_eq!(r.last_message.as_deref(), Some("all done"));
    assert_eq!(r.malformed_lines, 1);
    assert!(r.succeeded(Some(0)));
    assert!(!r.succeeded(Some(1)), "a non-zero exit after a completed turn is a failure");
    // Older builds send three usage fields: the rest default to 0.
    let old = run_of(&[
        json!({"type": "session.created", "session_id": "s-old"}).to_string(),
        json!({"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 5}})
            .to_string(),
    ]);
    assert_eq!(old.thread_id.as_deref(), Some("s-old"));
    assert_eq!(old.totals.unwrap().reasoning_output_tokens, 0);
}

#[test]
fn a_failed_turn_is_a_failure_even_with_exit_0() {
    let failed = run_of(&[
        json!({"type": "turn.started"}).to_string(),
        json!({"type": "error", "message": "The model `nope` does not exist"}).to_string(),
        json!({"type": "turn.failed", "error": {"message": "The model `nope` does not exist"}}).to_string(),
    ]);
    assert!(!failed.succeeded(Some(0)));
    assert_eq!(failed.failed.as_deref(), Some("The model `nope` does not exist"));
    assert!(failed.usage_request("w-1").is_none(), "no completed turn, no usage");
    let mut both = run_of(&success_lines(2000, 0, 10));
    both.feed(&json!({"type": "turn.failed", "error": {"message": "later"}}).to_string());
    assert!(!both.succeeded(Some(0)));
}

#[test]
fn cumulative_thread_usage_becomes_per_invocation_deltas_across_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let strata =
        |args: &[&str], stdin: &str| strata_tests::strata_ok_with_stdin(strata_bin!(), tmp.path(), args, stdin);
    strata(&["init", "--durability", "process"], "");
    // The first exec, then two resumes of the same thread: 2000, 3000, 4000 cumulative input.
    for (input, cached) in [(2000, 1200), (3000, 1800), (4000, 2400)] {
        let r = run_of(&success_lines(input, cached, input / 20));
        strata(&["telemetry", "record"], &r.usage_request("codex-worker-1").unwrap().to_string());
    }
    let report: Value = serde_json::from_str(&strata(&["--json", "telemetry", "report"], "")).unwrap();
    let billed = &report["rollups"][0]["billed"];
    assert_eq!(billed["input_tokens"]["sum"], 1600, "uncached input: 800 + 400 + 400");
    assert_eq!(billed["input_tokens"]["p50"].as_f64(), Some(400.0));
    assert_eq!(billed["cache_read_tokens"]["sum"], 2400);
    assert_eq!(billed["output_tokens"]["sum"], 200);
    assert_eq!(billed["cost_micros"], json!({}), "Codex reports no cost: unknown, never zero");
    assert_eq!(billed["cost_unknown"], 3);
}
