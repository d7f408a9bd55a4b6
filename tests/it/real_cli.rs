//! The real `claude` (2.1.332) and `codex` (0.171.0) CLIs against the scripted fake model server
//! on 127.0.0.1: spawn, resume and fork keep or mint session ids as the adapters expect, a tool
//! call really changes the working directory, API errors make failed runs, the usage the server
//! reported is what strata's stream readers collect, a PreToolUse hook (the write guard's
//! mechanism) blocks a write in both CLIs, and both call a tool of `strata mcp`.
//!
//! Ignored by default: they need the npm CLIs, which `.ci/run` installs and names in
//! `STRATA_TEST_CLAUDE` / `STRATA_TEST_CODEX`. Nothing here reaches the network: the CLIs only
//! talk to the fake server. `STRATA_TEST_CLI_ECHO=1` with `--nocapture` prints what they said.
//! The fake server's own tests at the end need no CLI and always run.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use strata_adapters::providers::{claude, codex};
use strata_tests::fake_model::{FakeModel, ToolResult, Turn, Usage};
use strata_tests::real_cli::{
    self, CLAUDE_VAR, CODEX_VAR, ClaudeRun, ClaudeSession, CodexRun, CodexSession, Finished, Scratch,
};
use strata_tests::{strata_bin, strata_ok};

const BIN: &str = strata_bin!();

fn claude_bin() -> PathBuf {
    real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"))
}

fn codex_bin() -> PathBuf {
    real_cli::cli_path(CODEX_VAR).unwrap_or_else(|e| panic!("{e}"))
}

fn claude_run(fake: &FakeModel, s: &Scratch, run: &ClaudeRun) -> Finished {
    let f = real_cli::run_claude(&claude_bin(), s, fake, run).expect("claude starts");
    assert!(!f.timed_out, "claude hung:\n{}", f.describe());
    f
}

fn codex_run(s: &Scratch, run: &CodexRun) -> Finished {
    let f = real_cli::run_codex(&codex_bin(), s, run).expect("codex starts");
    assert!(!f.timed_out, "codex hung:\n{}", f.describe());
    f
}

/// claude's usage for a fake-server usage (same four fields).
fn claude_usage(u: Usage) -> claude::Usage {
    claude::Usage {
        input_tokens: u.input_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
        output_tokens: u.output_tokens,
    }
}

fn sum(us: &[Usage]) -> Usage {
    us.iter().fold(Usage::default(), |a, u| Usage {
        input_tokens: a.input_tokens + u.input_tokens,
        cache_creation_input_tokens: a.cache_creation_input_tokens + u.cache_creation_input_tokens,
        cache_read_input_tokens: a.cache_read_input_tokens + u.cache_read_input_tokens,
        output_tokens: a.output_tokens + u.output_tokens,
        reasoning_output_tokens: a.reasoning_output_tokens + u.reasoning_output_tokens,
    })
}

/// `claude-sonnet-4-5` prices, USD per Mtok: input 3, output 15, cache write 3.75, cache read 0.30.
fn sonnet_cost_usd(u: Usage) -> f64 {
    (u.input_tokens as f64 * 3.0
        + u.output_tokens as f64 * 15.0
        + u.cache_creation_input_tokens as f64 * 3.75
        + u.cache_read_input_tokens as f64 * 0.30)
        / 1_000_000.0
}

/// Claude's transcript of `session` run in `cwd`: `~/.claude/projects/<cwd, / as ->/<id>.jsonl`.
fn claude_transcript(s: &Scratch, cwd: &Path, session: &str) -> PathBuf {
    let escaped: String =
        cwd.display().to_string().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    s.home.join(".claude/projects").join(escaped).join(format!("{session}.jsonl"))
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn claude_spawn_resume_and_fork_keep_and_mint_session_ids() {
    let u1 = Usage {
        input_tokens: 120,
        cache_creation_input_tokens: 40,
        cache_read_input_tokens: 60,
        output_tokens: 20,
        ..Usage::default()
    };
    let u2 = Usage {
        input_tokens: 300,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 160,
        output_tokens: 30,
        ..Usage::default()
    };
    let u3 = Usage {
        input_tokens: 50,
        cache_creation_input_tokens: 10,
        cache_read_input_tokens: 0,
        output_tokens: 7,
        ..Usage::default()
    };
    let fake = FakeModel::start(vec![
        Turn::text("first answer").with_usage(u1),
        Turn::text("second answer").with_usage(u2),
        Turn::text("forked answer").with_usage(u3),
    ])
    .expect("fake server");
    let s = Scratch::new().expect("scratch");
    let id = "6f1d2b7e-3c4a-4e5f-9a0b-1c2d3e4f5a6b";

    // Spawn with a chosen session id.
    let f = claude_run(&fake, &s, &ClaudeRun::new("first prompt").session(ClaudeSession::NewWithId(id.to_owned())));
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "a clean run succeeds:\n{}", f.describe());
    assert_eq!(r.session_id.as_deref(), Some(id));
    assert_eq!(r.model.as_deref(), Some(real_cli::CLAUDE_MODEL));
    let out = r.result.clone().expect("a result line");
    assert_eq!(out.usage, claude_usage(u1), "result.usage is this invocation's usage");
    assert_eq!(out.cumulative, Some(claude_usage(u1)), "modelUsage is the session's usage");
    // The assistant lines repeat message_start's usage: the input counts are final there, the
    // output count is not (the fake server, like the API, sends 1 there and the total in
    // message_delta, which only reaches result.usage); the reader takes the output count from
    // the result once it has one.
    let per_message = r.message_usage();
    assert_eq!(per_message, claude_usage(u1));
    let lines = f.json_lines();
    let assistant = lines.iter().find(|l| l["type"] == "assistant").expect("an assistant line");
    assert_eq!(assistant["message"]["usage"]["output_tokens"], 1, "assistant lines carry message_start's output count");
    let cost = out.total_cost_usd.expect("a cost");
    assert!((cost - sonnet_cost_usd(u1)).abs() < 1e-9, "cost {cost} from the sonnet price table");
    let reqs = fake.model_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("x-api-key"), Some("sk-ant-fake-strata-tests"));
    let body = reqs[0].json().expect("a JSON request");
    assert_eq!(body["model"], real_cli::CLAUDE_MODEL);
    assert_eq!(body["stream"], true);
    assert!(reqs[0].text().contains("first prompt"));
    assert!(claude_transcript(&s, &s.work, id).is_file(), "the session transcript is kept");

    // Resume: the same session id, history resent, cumulative usage and cost across both runs.
    let f = claude_run(&fake, &s, &ClaudeRun::new("second prompt").session(ClaudeSession::Resume(id.to_owned())));
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    assert_eq!(r.session_id.as_deref(), Some(id), "--resume keeps the session id");
    let out = r.result.clone().expect("a result line");
    assert_eq!(out.usage, claude_usage(u2), "result.usage covers only the resumed invocation");
    assert_eq!(out.cumulative, Some(claude_usage(sum(&[u1, u2]))), "modelUsage is restored and added to");
    let cost = out.total_cost_usd.expect("a cost");
    assert!((cost - sonnet_cost_usd(sum(&[u1, u2]))).abs() < 1e-9, "cumulative cost {cost}");
    let second = &fake.model_requests()[1];
    for said in ["first prompt", "first answer", "second prompt"] {
        assert!(second.text().contains(said), "the resumed request carries {said:?}");
    }

    // Fork: a new session id from the stream, the parent's history, the parent left in place.
    let f = claude_run(&fake, &s, &ClaudeRun::new("fork prompt").session(ClaudeSession::Fork(id.to_owned())));
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    let forked = r.session_id.clone().expect("a session id");
    assert_ne!(forked, id, "--fork-session mints a new id");
    assert!(uuid::Uuid::parse_str(&forked).is_ok(), "{forked} is a UUID");
    let out = r.result.clone().expect("a result line");
    assert_eq!(out.usage, claude_usage(u3));
    assert_eq!(out.cumulative, Some(claude_usage(sum(&[u1, u2, u3]))), "a fork starts from the parent's totals");
    let third = &fake.model_requests()[2];
    for said in ["first prompt", "second answer", "fork prompt"] {
        assert!(third.text().contains(said), "the forked request carries {said:?}");
    }
    assert!(claude_transcript(&s, &s.work, &forked).is_file());
    assert!(claude_transcript(&s, &s.work, id).is_file(), "the parent session stays");

    assert_eq!(fake.unscripted(), 0, "every model request was scripted");
    assert_eq!(fake.turns_left(), 0);
    let side: Vec<String> =
        fake.requests().iter().filter(|r| !r.is_model_call()).map(|r| format!("{} {}", r.method, r.target)).collect();
    assert!(side.is_empty(), "no side requests with nonessential traffic off: {side:?}");
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn claude_write_tool_creates_the_file_and_its_result_goes_back() {
    let s = Scratch::new().expect("scratch");
    let target = s.work.join("hello.txt");
    let fake = FakeModel::start(vec![
        Turn::claude_write(&target.display().to_string(), "hello from the fake model\n"),
        Turn::text("wrote hello.txt"),
    ])
    .expect("fake server");
    let f = claude_run(&fake, &s, &ClaudeRun::new("write hello.txt"));
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    assert_eq!(std::fs::read_to_string(&target).ok().as_deref(), Some("hello from the fake model\n"));
    assert_eq!(r.tool_uses.len(), 1, "{:?}", r.tool_uses);
    let (tool_id, tool) = &r.tool_uses[0];
    assert_eq!(tool, "Write");
    let reqs = fake.model_requests();
    assert_eq!(reqs.len(), 2, "the tool result comes back in a second request");
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(&results[0].call_id, tool_id);
    assert!(!results[0].is_error, "{results:?}");
    assert_eq!(r.result.expect("a result").permission_denials, 0);
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn claude_api_errors_make_failed_runs() {
    // claude retries a 400 (with fewer beta headers each time) before giving up: a sticky error
    // answers every try.
    let fake = FakeModel::start(vec![Turn::error(400, "invalid_request_error", "scripted failure").sticky()])
        .expect("fake server");
    let s = Scratch::new().expect("scratch");
    let f = claude_run(&fake, &s, &ClaudeRun::new("fail please"));
    let r = f.claude_stream();
    assert_eq!(f.code(), Some(1), "{}", f.describe());
    assert!(!r.succeeded(f.code()));
    assert!(r.api_error, "the synthetic API-error message is seen");
    let out = r.result.clone().expect("a result line even on an API error");
    assert!(out.is_error);
    assert_eq!(out.subtype.as_deref(), Some("success"), "an API error still says subtype success");
    assert_eq!(out.terminal_reason.as_deref(), Some("api_error"));
    assert_eq!(out.api_error_status, Some(400));
    assert!(r.session_id.is_some(), "the session id is on the error result too");
    assert_eq!(fake.model_requests().len(), 6, "a 400 is sent 6 times in all");

    // A 500 with retries off: one request, a failed run.
    fake.clear_turns();
    fake.push(Turn::error(500, "api_error", "scripted outage").sticky());
    let mut run = ClaudeRun::new("fail again");
    run.max_retries = Some(0);
    let f = claude_run(&fake, &s, &run);
    let r = f.claude_stream();
    assert_eq!(f.code(), Some(1), "{}", f.describe());
    assert!(!r.succeeded(f.code()));
    assert_eq!(r.result.expect("a result").api_error_status, Some(500));
    assert_eq!(fake.model_requests().len(), 7, "no retry with CLAUDE_CODE_MAX_RETRIES=0");

    // One 400, then an answer: the retry takes the answer and the run succeeds.
    fake.clear_turns();
    fake.push(Turn::error(400, "invalid_request_error", "once"));
    fake.push(Turn::text("recovered"));
    let f = claude_run(&fake, &s, &ClaudeRun::new("recover"));
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    assert!(!r.api_error);
    assert_eq!(fake.model_requests().len(), 9);
    assert_eq!(fake.unscripted(), 0);
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn claude_pre_tool_use_hook_blocks_a_write() {
    let s = Scratch::new().expect("scratch");
    let hook_log = s.root().join("hook-input.json");
    let hook = real_cli::write_script(
        s.root(),
        "guard.sh",
        "cat > \"$STRATA_TEST_HOOK_LOG\"\necho 'write outside owned files: strata-tests guard' >&2\nexit 2\n",
    )
    .expect("hook script");
    let settings = json!({"hooks": {"PreToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit",
        "hooks": [{"type": "command", "command": hook.display().to_string(), "timeout": 10}]}]}});
    // Inside the cwd, so only the hook can refuse it (acceptEdits allows writes there).
    let target = s.work.join("blocked.txt");
    let fake = FakeModel::start(vec![
        Turn::claude_write(&target.display().to_string(), "must not land\n"),
        Turn::text("the guard refused"),
    ])
    .expect("fake server");
    let mut run = ClaudeRun::new("write blocked.txt").settings(&settings.to_string());
    run.env.push(("STRATA_TEST_HOOK_LOG".to_owned(), hook_log.display().to_string()));
    let f = claude_run(&fake, &s, &run);
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "a blocked tool call does not fail the run:\n{}", f.describe());
    assert!(!target.exists(), "the hook kept the file from being written");

    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(&hook_log).expect("the hook ran")).expect("hook input is JSON");
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "Write");
    assert_eq!(input["tool_input"]["file_path"], target.display().to_string());

    let reqs = fake.model_requests();
    assert_eq!(reqs.len(), 2);
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].is_error);
    assert!(results[0].text.contains("write outside owned files: strata-tests guard"), "{results:?}");
    assert_eq!(r.result.expect("a result").permission_denials, 1);
    // The stream says the hook (not the permission system) refused it.
    let meta: Vec<Value> = f
        .json_lines()
        .iter()
        .filter(|l| l["type"] == "user")
        .flat_map(|l| l["tool_result_meta"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(meta.iter().any(|m| m["permission_decision"]["source"] == "hook"), "{meta:?}");
}

/// Codex usage for a fake-server usage.
fn codex_totals(u: Usage) -> codex::Totals {
    codex::Totals {
        input_tokens: u.input_tokens,
        cached_input_tokens: u.cache_read_input_tokens,
        cache_write_input_tokens: u.cache_creation_input_tokens,
        output_tokens: u.output_tokens,
        reasoning_output_tokens: u.reasoning_output_tokens,
    }
}

fn codex_scratch(fake: &FakeModel, extra: &str) -> Scratch {
    let s = Scratch::new().expect("scratch");
    s.write_codex_config(fake, extra).expect("config.toml");
    s
}

/// The `x-codex-turn-metadata` header of a request, parsed.
fn turn_metadata(r: &strata_tests::fake_model::Request) -> Value {
    r.header("x-codex-turn-metadata").and_then(|h| serde_json::from_str(h).ok()).unwrap_or(Value::Null)
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn codex_exec_resume_and_fork_keep_and_mint_thread_ids_with_cumulative_usage() {
    let u1 = Usage {
        input_tokens: 1000,
        cache_read_input_tokens: 200,
        cache_creation_input_tokens: 50,
        output_tokens: 100,
        reasoning_output_tokens: 40,
    };
    let u2 = Usage {
        input_tokens: 1500,
        cache_read_input_tokens: 900,
        cache_creation_input_tokens: 0,
        output_tokens: 60,
        reasoning_output_tokens: 0,
    };
    let u3 = Usage {
        input_tokens: 700,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 30,
        output_tokens: 25,
        reasoning_output_tokens: 5,
    };
    let fake = FakeModel::start(vec![
        Turn::text("first answer").with_usage(u1),
        Turn::text("second answer").with_usage(u2),
        Turn::text("forked answer").with_usage(u3),
    ])
    .expect("fake server");
    let s = codex_scratch(&fake, "");

    let f = codex_run(&s, &CodexRun::new("first prompt"));
    let r = f.codex_jsonl();
    assert!(r.succeeded(f.code()), "a clean run succeeds:\n{}", f.describe());
    let thread = r.thread_id.clone().expect("thread.started gives the thread id");
    assert!(uuid::Uuid::parse_str(&thread).is_ok(), "{thread} is a UUID");
    assert_eq!(r.totals, Some(codex_totals(u1)));
    assert_eq!(r.last_message.as_deref(), Some("first answer"));
    assert_eq!(r.turns_completed, 1);
    let req = &fake.model_requests()[0];
    let body = req.json().expect("a JSON request");
    assert_eq!(body["model"], real_cli::CODEX_MODEL);
    assert_eq!(body["stream"], true);
    assert!(req.text().contains("first prompt"));
    let meta = turn_metadata(req);
    assert_eq!(meta["thread_id"], thread.as_str(), "turn metadata names the thread: {meta}");

    // Resume: same thread id, sandbox and cwd given again before `resume`, usage cumulative.
    let f = codex_run(&s, &CodexRun::new("second prompt").session(CodexSession::Resume(thread.clone())));
    let r = f.codex_jsonl();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    assert_eq!(r.thread_id.as_deref(), Some(thread.as_str()), "resume keeps the thread id");
    assert_eq!(r.totals, Some(codex_totals(sum(&[u1, u2]))), "turn.completed usage is the thread's total");
    let req = &fake.model_requests()[1];
    for said in ["first prompt", "first answer", "second prompt"] {
        assert!(req.text().contains(said), "the resumed request carries {said:?}");
    }
    let meta = turn_metadata(req);
    assert_eq!(meta["thread_id"], thread.as_str(), "{meta}");
    assert_eq!(meta["sandbox_mode"], "workspace-write", "the explicit sandbox holds on resume: {meta}");
    let usage = r.usage_request("w-1").expect("a usage request");
    let total = sum(&[u1, u2]);
    assert_eq!(usage["cumulative"]["input_tokens"], total.input_tokens - total.cache_read_input_tokens);
    assert_eq!(usage["cumulative"]["cache_read_tokens"], total.cache_read_input_tokens);
    assert_eq!(usage["cumulative"]["cost_micros"], Value::Null, "codex reports no cost");

    // Fork: a new thread id carrying the parent's history and totals.
    let f = codex_run(&s, &CodexRun::new("fork prompt").session(CodexSession::Fork(thread.clone())));
    let r = f.codex_jsonl();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    let forked = r.thread_id.clone().expect("a thread id");
    assert_ne!(forked, thread, "fork mints a new thread id");
    assert_eq!(r.totals, Some(codex_totals(sum(&[u1, u2, u3]))), "a fork starts from the parent's totals");
    let req = &fake.model_requests()[2];
    for said in ["first prompt", "second answer", "fork prompt"] {
        assert!(req.text().contains(said), "the forked request carries {said:?}");
    }
    assert_eq!(turn_metadata(req)["thread_id"], forked.as_str());

    assert_eq!(fake.unscripted(), 0, "every model request was scripted");
    assert_eq!(fake.turns_left(), 0);
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn codex_apply_patch_and_exec_command_change_the_work_dir_and_their_results_go_back() {
    let fake = FakeModel::start(vec![
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch\n"),
        Turn::codex_exec_command("cp hello.txt copy.txt && echo copied"),
        Turn::text("patched and copied"),
    ])
    .expect("fake server");
    let s = codex_scratch(&fake, "");
    let f = codex_run(&s, &CodexRun::new("add hello.txt, then copy it"));
    let r = f.codex_jsonl();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    let target = s.work.join("hello.txt");
    assert_eq!(std::fs::read_to_string(&target).ok().as_deref(), Some("hello from codex\n"));
    assert_eq!(std::fs::read_to_string(s.work.join("copy.txt")).ok().as_deref(), Some("hello from codex\n"));
    assert_eq!(r.file_changes, vec![(target.display().to_string(), "add".to_owned())]);
    let command = f
        .json_lines()
        .into_iter()
        .find(|l| l["type"] == "item.completed" && l["item"]["type"] == "command_execution")
        .expect("a command_execution item");
    assert_eq!(command["item"]["exit_code"], 0, "{command}");
    assert_eq!(command["item"]["aggregated_output"], "copied\n", "{command}");
    let reqs = fake.model_requests();
    assert_eq!(reqs.len(), 3, "each tool result comes back in the next request");
    let patched = reqs[1].tool_results();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert!(patched[0].call_id.starts_with("call_fake_"), "{patched:?}");
    let ran = reqs[2].tool_results();
    assert_eq!(ran.len(), 2, "the history keeps the first result: {ran:?}");
    assert!(ran[1].text.contains("Process exited with code 0") && ran[1].text.contains("copied"), "{ran:?}");
    assert_eq!(r.last_message.as_deref(), Some("patched and copied"));
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn codex_api_errors_make_failed_runs() {
    // A code codex knows: turn.failed carries just the message.
    let fake =
        FakeModel::start(vec![Turn::error(400, "invalid_prompt", "scripted failure").sticky()]).expect("fake server");
    let s = codex_scratch(&fake, "");
    let f = codex_run(&s, &CodexRun::new("fail please"));
    let r = f.codex_jsonl();
    assert_eq!(f.code(), Some(1), "{}", f.describe());
    assert!(!r.succeeded(f.code()));
    assert_eq!(r.turns_completed, 0);
    assert_eq!(r.failed.as_deref(), Some("scripted failure"));
    assert!(r.thread_id.is_some(), "the thread was started before the failure");
    assert_eq!(fake.model_requests().len(), 1, "a 400 is not retried");

    // Any other code: turn.failed carries the whole error body.
    fake.clear_turns();
    fake.push(Turn::error(400, "invalid_request_error", "scripted failure").sticky());
    let f = codex_run(&s, &CodexRun::new("fail again"));
    let r = f.codex_jsonl();
    assert_eq!(f.code(), Some(1), "{}", f.describe());
    assert!(!r.succeeded(f.code()));
    let body: Value = serde_json::from_str(r.failed.as_deref().expect("turn.failed")).expect("the message is the body");
    assert_eq!(body["error"]["message"], "scripted failure");

    // A 500 (provider retries off in the scratch config): a failed run after one request.
    fake.clear_turns();
    fake.push(Turn::error(500, "server_error", "scripted outage").sticky());
    let f = codex_run(&s, &CodexRun::new("fail once more"));
    let r = f.codex_jsonl();
    assert_eq!(f.code(), Some(1), "{}", f.describe());
    assert!(!r.succeeded(f.code()));
    assert!(r.failed.is_some());
    assert_eq!(fake.model_requests().len(), 3);
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn codex_pre_tool_use_hook_blocks_apply_patch() {
    let fake = FakeModel::start(vec![
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: blocked.txt\n+must not land\n*** End Patch\n"),
        Turn::text("the guard refused"),
    ])
    .expect("fake server");
    let s = codex_scratch(&fake, "");
    let hook_log = s.root().join("hook-input.json");
    let hook = real_cli::write_script(
        s.root(),
        "guard.sh",
        "cat > \"$STRATA_TEST_HOOK_LOG\"\necho 'write outside owned files: strata-tests guard' >&2\nexit 2\n",
    )
    .expect("hook script");
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "apply_patch",
        "hooks": [{"type": "command", "command": hook.display().to_string(), "timeout": 10}]}]}});
    std::fs::write(s.codex_home.join("hooks.json"), hooks.to_string()).expect("hooks.json");
    let mut run = CodexRun::new("add blocked.txt");
    run.bypass_hook_trust = true;
    run.env.push(("STRATA_TEST_HOOK_LOG".to_owned(), hook_log.display().to_string()));
    let f = codex_run(&s, &run);
    let r = f.codex_jsonl();
    assert!(r.succeeded(f.code()), "a blocked tool call does not fail the run:\n{}", f.describe());
    assert!(!s.work.join("blocked.txt").exists(), "the hook kept the patch out");
    assert!(r.file_changes.is_empty(), "a blocked patch leaves no file_change item: {:?}", r.file_changes);
    assert!(
        f.stderr.contains("Command blocked by PreToolUse hook"),
        "the only trace is a stderr log line:\n{}",
        f.stderr
    );

    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(&hook_log).expect("the hook ran")).expect("hook input is JSON");
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "apply_patch");
    assert!(
        input["tool_input"]["command"].as_str().is_some_and(|p| p.contains("*** Add File: blocked.txt")),
        "{input}"
    );

    let reqs = fake.model_requests();
    assert_eq!(reqs.len(), 2);
    let results = reqs[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].text.contains("blocked by PreToolUse hook"), "{results:?}");
    assert!(results[0].text.contains("write outside owned files: strata-tests guard"), "{results:?}");
}

/// An initialised strata workspace with one concern and one project, for `strata mcp`.
fn knowledge_workspace(s: &Scratch) -> PathBuf {
    let ws = s.root().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace dir");
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    strata_ok(BIN, &ws, &["knowledge", "declare", "--concern", "auth", "--project", "p1"]);
    ws
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn claude_calls_an_mcp_tool_of_strata_mcp() {
    let s = Scratch::new().expect("scratch");
    let ws = knowledge_workspace(&s);
    let fake = FakeModel::start(vec![Turn::claude_mcp("knowledge", "list_knowledge", json!({})), Turn::text("listed")])
        .expect("fake server");
    let mut run = ClaudeRun::new("list the knowledge");
    run.mcp_config = Some(
        json!({"mcpServers": {"knowledge": {"type": "stdio", "command": BIN,
            "args": ["--dir", ws.display().to_string(), "mcp"]}}})
        .to_string(),
    );
    run.allowed_tools = vec!["mcp__knowledge".to_owned()];
    let f = claude_run(&fake, &s, &run);
    let r = f.claude_stream();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    let init = f.json_lines().into_iter().find(|l| l["subtype"] == "init").expect("system/init");
    assert_eq!(init["mcp_servers"][0]["name"], "knowledge", "{init}");
    assert_eq!(init["mcp_servers"][0]["status"], "connected", "{init}");
    assert_eq!(r.tool_uses.iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["mcp__knowledge__list_knowledge"]);
    let results = fake.model_requests()[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].is_error, "{results:?}");
    assert!(results[0].text.contains("\"auth\"") && results[0].text.contains("\"p1\""), "{results:?}");
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn codex_calls_an_mcp_tool_of_strata_mcp() {
    let fake = FakeModel::start(vec![Turn::codex_mcp("knowledge", "list_knowledge", json!({})), Turn::text("listed")])
        .expect("fake server");
    let s = Scratch::new().expect("scratch");
    let ws = knowledge_workspace(&s);
    // `exec` never asks for approval, so an MCP call fails unless the server's tools are approved.
    let extra = format!(
        "[mcp_servers.knowledge]\ncommand = {}\nargs = [\"--dir\", {}, \"mcp\"]\ndefault_tools_approval_mode = \"approve\"\n",
        toml_string(BIN),
        toml_string(&ws.display().to_string())
    );
    s.write_codex_config(&fake, &extra).expect("config.toml");
    let f = codex_run(&s, &CodexRun::new("list the knowledge"));
    let r = f.codex_jsonl();
    assert!(r.succeeded(f.code()), "{}", f.describe());
    let call = f
        .json_lines()
        .into_iter()
        .find(|l| l["type"] == "item.completed" && l["item"]["type"] == "mcp_tool_call")
        .expect("an mcp_tool_call item");
    assert_eq!(call["item"]["server"], "knowledge", "{call}");
    assert_eq!(call["item"]["tool"], "list_knowledge", "{call}");
    assert_eq!(call["item"]["status"], "completed", "{call}");
    let results = fake.model_requests()[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].text.contains("\"auth\"") && results[0].text.contains("\"p1\""), "{results:?}");
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

// The fake server on its own (no CLI needed): raw HTTP against it.

fn post(base_url: &str, path: &str, body: &Value) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let addr = base_url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn sse_data(sse: &str) -> Vec<Value> {
    sse.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).expect("JSON event")).collect()
}

#[test]
fn fake_server_takes_turns_in_order_and_records_requests() {
    let fake = FakeModel::start(vec![
        Turn::error(400, "invalid_request_error", "bad").times(2),
        Turn::claude_write("/w/a.txt", "hi\n").with_usage(Usage {
            input_tokens: 7,
            output_tokens: 3,
            ..Usage::default()
        }),
    ])
    .expect("start");
    let url = fake.base_url();
    let req = json!({"model": "claude-sonnet-4-5", "stream": true, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "no"}], "is_error": true}]}]});
    let (status, body) = post(&url, "/v1/messages?beta=true", &req);
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<Value>(&body).expect("JSON")["error"]["message"], "bad");
    assert_eq!(post(&url, "/v1/messages", &req).0, 400, "the error answers twice");
    let (status, sse) = post(&url, "/v1/messages", &req);
    assert_eq!(status, 200);
    let events = sse_data(&sse);
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[0]["message"]["usage"]["input_tokens"], 7);
    assert_eq!(events[0]["message"]["usage"]["output_tokens"], 1, "message_start carries at most 1 output token");
    assert_eq!(events[1]["content_block"]["name"], "Write");
    let input: Value =
        serde_json::from_str(events[2]["delta"]["partial_json"].as_str().expect("partial json")).expect("JSON");
    assert_eq!(input, json!({"file_path": "/w/a.txt", "content": "hi\n"}));
    assert_eq!(events[4]["delta"]["stop_reason"], "tool_use");
    assert_eq!(events[4]["usage"]["output_tokens"], 3);
    let (status, _) = post(&url, "/v1/messages", &json!({"model": "m", "messages": []}));
    assert_eq!(status, 200, "a request past the script is answered");
    assert_eq!(fake.unscripted(), 1);
    assert_eq!(post(&url, "/nope", &json!({})).0, 404);
    let turns: Vec<Option<usize>> = fake.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [Some(0), Some(0), Some(1), None, None]);
    assert_eq!(fake.model_requests().len(), 4);
    assert_eq!(fake.requests()[0].path(), "/v1/messages");
    assert_eq!(
        fake.requests()[0].tool_results(),
        [ToolResult { call_id: "toolu_1".to_owned(), text: "no".to_owned(), is_error: true }]
    );
}

#[test]
fn fake_server_streams_responses_items_and_usage() {
    let usage = Usage {
        input_tokens: 100,
        cache_read_input_tokens: 60,
        cache_creation_input_tokens: 5,
        output_tokens: 20,
        reasoning_output_tokens: 8,
    };
    let fake = FakeModel::start(vec![
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n").with_usage(usage),
        Turn::codex_mcp("knowledge", "list_knowledge", json!({})),
        Turn::error(400, "invalid_prompt", "nope").sticky(),
    ])
    .expect("start");
    let url = fake.base_url();
    let req = json!({"model": "gpt-5.5", "stream": true, "input": [
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Success"}]});
    let (status, sse) = post(&url, "/v1/responses", &req);
    assert_eq!(status, 200);
    let events = sse_data(&sse);
    assert_eq!(events.first().map(|e| e["type"].clone()), Some(json!("response.created")));
    let done = events.last().expect("events");
    assert_eq!(done["type"], "response.completed");
    let u = &done["response"]["usage"];
    assert_eq!((u["input_tokens"].clone(), u["output_tokens"].clone()), (json!(100), json!(20)));
    assert_eq!(u["input_tokens_details"], json!({"cached_tokens": 60, "cache_write_tokens": 5}));
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 8);
    let item = &done["response"]["output"][0];
    assert_eq!((item["type"].as_str(), item["name"].as_str()), (Some("custom_tool_call"), Some("apply_patch")));
    assert!(item["input"].as_str().is_some_and(|p| p.starts_with("*** Begin Patch")));
    let (_, sse) = post(&url, "/v1/responses", &req);
    let item = sse_data(&sse).last().expect("events")["response"]["output"][0].clone();
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["namespace"], "mcp__knowledge");
    assert_eq!(item["name"], "list_knowledge");
    assert_eq!(item["arguments"], "{}");
    for _ in 0..3 {
        let (status, body) = post(&url, "/v1/responses", &req);
        assert_eq!(status, 400, "a sticky error answers every request");
        let v: Value = serde_json::from_str(&body).expect("JSON error");
        assert_eq!(v["error"]["code"], "invalid_prompt", "the code is a string");
    }
    assert_eq!(fake.turns_left(), 1, "a sticky turn stays");
    assert_eq!(
        fake.requests()[0].tool_results(),
        [ToolResult { call_id: "call_1".to_owned(), text: "Success".to_owned(), is_error: false }]
    );
}

#[test]
fn a_hung_child_is_killed_at_its_timeout() {
    // The shell and its background child share the process group that the timeout kills.
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "echo started; sleep 300 & wait"]);
    let f = real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(1)).expect("sh runs");
    assert!(f.timed_out, "{}", f.describe());
    assert_eq!(f.code(), None, "killed by a signal: {}", f.describe());
    assert_eq!(f.stdout_lines, ["started"], "output before the kill is kept");
}

#[test]
fn a_stall_turn_holds_the_request_until_released_then_closes_without_an_answer() {
    let fake = FakeModel::start(vec![Turn::stall(), Turn::text("after the stall")]).expect("start");
    let url = fake.base_url();
    let req = json!({"model": "claude-sonnet-4-5", "stream": true, "messages": []});
    let held = {
        let (url, req) = (url.clone(), req.clone());
        std::thread::spawn(move || post(&url, "/v1/messages", &req))
    };
    assert!(fake.wait_for_stall(std::time::Duration::from_secs(real_cli::RUN_S_MAX)), "the request is held");
    assert_eq!(fake.stalled(), 1);
    fake.release_stalled();
    let (status, body) = held.join().expect("the client thread");
    assert_eq!((status, body.as_str()), (0, ""), "the connection closed with no response");
    assert_eq!(fake.stalled(), 0);
    let (status, sse) = post(&url, "/v1/messages", &req);
    assert_eq!(status, 200, "the next request takes the next turn");
    assert!(sse.contains("after the stall"));
    assert_eq!(fake.model_requests().iter().map(|r| r.turn).collect::<Vec<_>>(), [Some(0), Some(1)]);
}
