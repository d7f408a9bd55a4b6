//! The Claude and Codex providers driven through the engine's `Provider` port, with the real
//! `claude` (2.1.332) and `codex` (0.171.0) CLIs against the scripted fake model server on
//! 127.0.0.1: spawn, resume and fork with session ids taken from the streams; this turn's usage
//! as the difference of the sessions' cumulative totals across resume and fork; API errors as
//! failed outcomes; the write guard (strata's own hook, on a real journal) blocking a write
//! outside the lineage's ownership and letting one inside through, both recorded; interrupt
//! and release ending a stalled turn with nothing left running (the session still resumable
//! after an interrupt); and Claude and Codex workers calling strata's `get_knowledge` over MCP,
//! the serve recorded in the journal.
//!
//! Ignored by default: they need the npm CLIs, which `.ci/run` installs and names in
//! `STRATA_TEST_CLAUDE` / `STRATA_TEST_CODEX`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use strata_adapters::providers::claude_worker::{ClaudeConfig, ClaudeProvider, Knowledge};
use strata_adapters::providers::codex_worker::{CodexConfig, CodexProvider, ModelProvider};
use strata_adapters::providers::worker_process::group_alive;
use strata_engine::ce::router::Mode;
use strata_engine::guard;
use strata_engine::knowledge::fixture::{EXAMPLE_CONCERNS, EXAMPLE_PROJECTS};
use strata_engine::telemetry::events::{AccountingSource, Counters};
use strata_engine::workgroup::provider::{Brief, Outcome, Provider, ProviderError, Worker};
use strata_journal::{Durability, Journal};
use strata_tests::fake_model::{FakeModel, Turn, Usage};
use strata_tests::real_cli::{self, CLAUDE_VAR, CODEX_VAR, RUN_S_MAX, Scratch};
use strata_tests::{strata_bin, strata_ok, strata_with_stdin};

const BIN: &str = strata_bin!();

fn claude_bin() -> PathBuf {
    real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"))
}

fn codex_bin() -> PathBuf {
    real_cli::cli_path(CODEX_VAR).unwrap_or_else(|e| panic!("{e}"))
}

/// Time a CLI may take to name its session, and a whole turn, ms: generous bounds that end hung
/// children and measure nothing.
const BOUND_MS: u64 = RUN_S_MAX * 1000;

/// The write guard's deadline in these tests: short, so a stopped daemon costs seconds.
const HOOK_DEADLINE_MS: u64 = 3_000;

fn claude(fake: &FakeModel, s: &Scratch, knowledge: Knowledge) -> ClaudeProvider {
    ClaudeProvider::new(claude_config(fake, s, knowledge))
}

fn claude_config(fake: &FakeModel, s: &Scratch, knowledge: Knowledge) -> ClaudeConfig {
    let mut c = ClaudeConfig::new(claude_bin(), s.root().join("state"));
    c.strata_program = Some(PathBuf::from(BIN));
    c.model = Some(real_cli::CLAUDE_MODEL.to_owned());
    c.knowledge = knowledge;
    c.inherit_env = false;
    c.env = real_cli::base_env_vars(s);
    c.env.extend(real_cli::claude_env_vars(fake));
    (c.start_ms_max, c.turn_ms_max) = (BOUND_MS, BOUND_MS);
    c.hook_deadline_ms = HOOK_DEADLINE_MS;
    c
}

fn codex(fake: &FakeModel, s: &Scratch, knowledge: Knowledge) -> CodexProvider {
    CodexProvider::new(codex_config(fake, s, knowledge))
}

fn codex_config(fake: &FakeModel, s: &Scratch, knowledge: Knowledge) -> CodexConfig {
    let mut c = CodexConfig::new(codex_bin(), s.root().join("state"));
    c.strata_program = Some(PathBuf::from(BIN));
    c.model = Some(real_cli::CODEX_MODEL.to_owned());
    c.model_provider = Some(ModelProvider {
        id: "mock".to_owned(),
        name: "fake model (strata-tests)".to_owned(),
        base_url: format!("{}/v1", fake.base_url()),
        wire_api: "responses".to_owned(),
        env_key: None,
        // Fail on the first error: a retry would take the next scripted turn.
        request_max_retries: Some(0),
        stream_max_retries: Some(0),
    });
    c.knowledge = knowledge;
    c.inherit_env = false;
    c.env = real_cli::base_env_vars(s);
    (c.start_ms_max, c.turn_ms_max) = (BOUND_MS, BOUND_MS);
    c.hook_deadline_ms = HOOK_DEADLINE_MS;
    c
}

fn brief(s: &Scratch, journal: &Path, lineage: &str, mode: Mode, from: Option<&str>, prompt: &str) -> Brief {
    Brief {
        workgroup: "wg-1".to_owned(),
        task: "t-1".to_owned(),
        attempt: 1,
        lineage_id: lineage.to_owned(),
        mode,
        from_session: from.map(str::to_owned),
        prompt: prompt.to_owned(),
        prompt_tokens: 10,
        owns: vec!["src/api".to_owned()],
        workdir: s.work.clone(),
        journal: journal.to_owned(),
        caps: Default::default(),
        knowledge: true,
        model: None,
    }
}

/// Runs one turn to its end and releases the worker; checks nothing of the CLI is left.
async fn turn(p: &dyn Provider, started: Result<Worker, ProviderError>) -> (Worker, Outcome) {
    let w = started.unwrap_or_else(|e| panic!("{} did not start: {e}", p.name()));
    let o = p.wait(&w).await.unwrap_or_else(|e| panic!("{} wait: {e}", p.name()));
    assert!(!group_alive(w.handle as u32), "{}: nothing of the turn runs after wait: {o:?}", p.name());
    p.release(&w).await.unwrap_or_else(|e| panic!("{} release: {e}", p.name()));
    assert!(matches!(p.wait(&w).await, Err(ProviderError::NoWorker { .. })), "a released worker is forgotten");
    (w, o)
}

fn tokens(u: Usage) -> Counters {
    Counters {
        input_tokens: Some(u.input_tokens),
        cache_creation_tokens: Some(u.cache_creation_input_tokens),
        cache_read_tokens: Some(u.cache_read_input_tokens),
        output_tokens: Some(u.output_tokens),
        cost_micros: None,
        wall_ms: None,
    }
}

/// Codex reports cached input inside input: strata counts it as cache reads only.
fn codex_tokens(u: Usage) -> Counters {
    Counters { input_tokens: Some(u.input_tokens - u.cache_read_input_tokens), ..tokens(u) }
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

/// The token counters only (cost and wall time checked apart).
fn token_part(c: &Counters) -> Counters {
    Counters { cost_micros: None, wall_ms: None, ..*c }
}

/// `claude-sonnet-4-5` prices in micro-USD per token: input 3, output 15, cache write 3.75,
/// cache read 0.30.
fn sonnet_micros(u: Usage) -> f64 {
    u.input_tokens as f64 * 3.0
        + u.output_tokens as f64 * 15.0
        + u.cache_creation_input_tokens as f64 * 3.75
        + u.cache_read_input_tokens as f64 * 0.30
}

const U1: Usage = Usage {
    input_tokens: 1200,
    cache_creation_input_tokens: 400,
    cache_read_input_tokens: 600,
    output_tokens: 200,
    reasoning_output_tokens: 40,
};
const U2: Usage = Usage {
    input_tokens: 3000,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 1600,
    output_tokens: 300,
    reasoning_output_tokens: 0,
};
const U4: Usage = Usage {
    input_tokens: 900,
    cache_creation_input_tokens: 20,
    cache_read_input_tokens: 300,
    output_tokens: 45,
    reasoning_output_tokens: 0,
};
const U3: Usage = Usage {
    input_tokens: 500,
    cache_creation_input_tokens: 100,
    cache_read_input_tokens: 0,
    output_tokens: 70,
    reasoning_output_tokens: 5,
};

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn claude_spawn_resume_and_fork_through_the_port_with_usage_deltas() {
    let fake = FakeModel::start(vec![
        Turn::text("first answer").with_usage(U1),
        Turn::text("second answer").with_usage(U2),
        Turn::text("forked answer").with_usage(U3),
        Turn::text("answer after a restart").with_usage(U4),
    ])
    .expect("fake server");
    let s = Scratch::new().expect("scratch");
    let p = claude(&fake, &s, Knowledge::Off);
    let j = s.root().join("journal");

    let (w1, o1) = turn(&p, p.spawn(&brief(&s, &j, "L1", Mode::FreshCapsule, None, "first prompt")).await).await;
    assert!(o1.succeeded, "{o1:?}");
    assert!(uuid::Uuid::parse_str(&w1.session_id).is_ok(), "{}", w1.session_id);
    assert_eq!(o1.session_id, w1.session_id, "the stream's id");
    assert_eq!(o1.summary, "first answer");
    assert_eq!(o1.accounting, Some(AccountingSource::Estimated), "the CLI's cost is an estimate");
    assert!(!o1.synthetic);
    assert_eq!(token_part(&o1.usage), tokens(U1));
    assert_eq!(token_part(&o1.cumulative), tokens(U1));
    let c1 = o1.cumulative.cost_micros.expect("a cost");
    assert!((c1 as f64 - sonnet_micros(U1)).abs() <= 1.0, "{c1}");
    assert_eq!(o1.usage.cost_micros, Some(c1));
    assert!(o1.usage.wall_ms.is_some(), "the turn's wall time is measured");
    assert!(fake.model_requests()[0].text().contains("first prompt"), "the prompt went in on stdin");

    let r = brief(&s, &j, "L1", Mode::Resume, Some(&w1.session_id), "second prompt");
    let (w2, o2) = turn(&p, p.resume(&r).await).await;
    assert!(o2.succeeded, "{o2:?}");
    assert_eq!(w2.session_id, w1.session_id, "--resume keeps the session");
    assert_eq!(o2.session_id, w1.session_id);
    assert_eq!(o2.summary, "second answer");
    assert_eq!(token_part(&o2.cumulative), tokens(sum(&[U1, U2])), "the CLI's running totals");
    assert_eq!(token_part(&o2.usage), tokens(U2), "this turn = cumulative after − cumulative before");
    let c2 = o2.cumulative.cost_micros.expect("a cost");
    assert_eq!(o2.usage.cost_micros, Some(c2 - c1), "this turn's cost is the difference");
    assert!((c2 as f64 - sonnet_micros(sum(&[U1, U2]))).abs() <= 1.0, "{c2}");
    let second = &fake.model_requests()[1];
    assert!(second.text().contains("first answer") && second.text().contains("second prompt"));

    let f = brief(&s, &j, "L2", Mode::InheritFull, Some(&w1.session_id), "fork prompt");
    let (w3, o3) = turn(&p, p.spawn(&f).await).await;
    assert!(o3.succeeded, "{o3:?}");
    assert_ne!(w3.session_id, w1.session_id, "a fork is a new session");
    assert!(uuid::Uuid::parse_str(&w3.session_id).is_ok());
    assert_eq!(o3.session_id, w3.session_id);
    assert_eq!(token_part(&o3.cumulative), tokens(sum(&[U1, U2, U3])), "a fork starts from the parent's totals");
    assert_eq!(token_part(&o3.usage), tokens(U3), "the fork's turn alone");
    let third = &fake.model_requests()[2];
    assert!(third.text().contains("second answer") && third.text().contains("fork prompt"));

    // A provider that never saw the session (a restarted coordinator) has no baseline: this
    // turn's figures come from the result's `model_usage_since_last_result`.
    let restarted = claude(&fake, &s, Knowledge::Off);
    let r = brief(&s, &j, "L1", Mode::Resume, Some(&w1.session_id), "after a restart");
    let (_, o4) = turn(&restarted, restarted.resume(&r).await).await;
    assert!(o4.succeeded, "{o4:?}");
    assert_eq!(token_part(&o4.cumulative), tokens(sum(&[U1, U2, U4])), "the fork did not add to its parent");
    assert_eq!(token_part(&o4.usage), tokens(U4), "the CLI's own per-invocation figures");
    let c4 = o4.usage.cost_micros.expect("the invocation's cost");
    assert!((c4 as f64 - sonnet_micros(U4)).abs() <= 1.0, "{c4}");

    assert_eq!(fake.unscripted(), 0);
    assert!(
        !s.root().join("state/claude-workers").read_dir().expect("workers dir").any(|_| true),
        "release removed every private directory"
    );
    assert!(!p.capabilities().followup && p.capabilities().resume && p.capabilities().fork);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn codex_spawn_resume_and_fork_through_the_port_with_usage_deltas() {
    let fake = FakeModel::start(vec![
        Turn::text("first answer").with_usage(U1),
        Turn::text("second answer").with_usage(U2),
        Turn::text("forked answer").with_usage(U3),
        Turn::text("answer after a restart").with_usage(U4),
    ])
    .expect("fake server");
    let s = Scratch::new().expect("scratch");
    let p = codex(&fake, &s, Knowledge::Off);
    let j = s.root().join("journal");

    let (w1, o1) = turn(&p, p.spawn(&brief(&s, &j, "L1", Mode::FreshCapsule, None, "first prompt")).await).await;
    assert!(o1.succeeded, "{o1:?}");
    assert!(uuid::Uuid::parse_str(&w1.session_id).is_ok(), "{}", w1.session_id);
    assert_eq!(o1.session_id, w1.session_id);
    assert_eq!(o1.summary, "first answer");
    assert_eq!(o1.accounting, Some(AccountingSource::ProviderReported));
    assert_eq!(o1.usage, Counters { wall_ms: o1.usage.wall_ms, ..codex_tokens(U1) });
    assert_eq!(o1.cumulative, codex_tokens(U1));
    assert_eq!(o1.cumulative.cost_micros, None, "codex reports no cost: unknown, never zero");
    assert!(fake.model_requests()[0].text().contains("first prompt"), "the prompt went in on stdin");

    // A later worker (another private CODEX_HOME) resumes the thread through the shared sessions.
    let r = brief(&s, &j, "L1", Mode::Resume, Some(&w1.session_id), "second prompt");
    let (w2, o2) = turn(&p, p.resume(&r).await).await;
    assert!(o2.succeeded, "{o2:?}");
    assert_eq!(w2.session_id, w1.session_id, "resume keeps the thread");
    assert_eq!(o2.cumulative, codex_tokens(sum(&[U1, U2])), "turn.completed carries the thread's totals");
    assert_eq!(token_part(&o2.usage), codex_tokens(U2), "this turn = cumulative after − cumulative before");
    let req = &fake.model_requests()[1];
    assert!(req.text().contains("first answer") && req.text().contains("second prompt"));
    let meta: Value =
        req.header("x-codex-turn-metadata").and_then(|h| serde_json::from_str(h).ok()).unwrap_or(Value::Null);
    assert_eq!(meta["sandbox_mode"], "workspace-write", "the sandbox is given on resume too: {meta}");

    let f = brief(&s, &j, "L2", Mode::InheritFull, Some(&w1.session_id), "fork prompt");
    let (w3, o3) = turn(&p, p.spawn(&f).await).await;
    assert!(o3.succeeded, "{o3:?}");
    assert_ne!(w3.session_id, w1.session_id, "a fork is a new thread");
    assert_eq!(o3.cumulative, codex_tokens(sum(&[U1, U2, U3])), "a fork starts from the parent's totals");
    assert_eq!(token_part(&o3.usage), codex_tokens(U3));
    let req = &fake.model_requests()[2];
    assert!(req.text().contains("second answer") && req.text().contains("fork prompt"));

    // A provider that never saw the thread has no baseline, and codex reports only totals:
    // this turn's usage is unknown, never a guess.
    let restarted = codex(&fake, &s, Knowledge::Off);
    let r = brief(&s, &j, "L1", Mode::Resume, Some(&w1.session_id), "after a restart");
    let (_, o4) = turn(&restarted, restarted.resume(&r).await).await;
    assert!(o4.succeeded, "{o4:?}");
    assert_eq!(o4.cumulative, codex_tokens(sum(&[U1, U2, U4])));
    assert_eq!(token_part(&o4.usage), Counters::default(), "unknown without a baseline");
    assert!(o4.usage.wall_ms.is_some());
    assert_eq!(fake.unscripted(), 0);
}

/// A journal where lineage `L1` owns `src/api` (claimed with the real binary).
fn journal_with_owner(dir: &Path) {
    let j = dir.display().to_string();
    let claim = json!({"lineage_id": "L1", "input": {"owned_files": ["src/api"], "is_writer": true}});
    let out = strata_with_stdin(BIN, &["ce", "route", "--journal", &j], claim.to_string().as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(answer["ok"], true, "{answer}");
}

/// `(event type, payload)` of every event of a type starting with `prefix` (the journal is
/// free: the turn and everything it started are gone).
fn events(dir: &Path, prefix: &str) -> Vec<(String, Value)> {
    tokio::task::block_in_place(|| events_blocking(dir, prefix))
}

fn events_blocking(dir: &Path, prefix: &str) -> Vec<(String, Value)> {
    let j = Journal::open(dir, &strata_tests::options(Durability::Process)).expect("the journal is free again");
    let evs = j.read_range(1, 100_000).expect("read");
    let out = evs
        .iter()
        .filter(|e| e.event_type.starts_with(prefix))
        .map(|e| (e.event_type.clone(), serde_json::from_slice(&e.payload).expect("JSON payload")))
        .collect();
    j.close_blocking().expect("close");
    out
}

/// Both guard verdicts, in order, with their paths.
fn verdicts(dir: &Path) -> Vec<(String, Value)> {
    events(dir, "guard.").into_iter().map(|(t, p)| (t, p["paths"].clone())).collect()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn claude_worker_writes_only_inside_ownership() {
    let s = Scratch::new().expect("scratch");
    let j = s.root().join("journal");
    journal_with_owner(&j);
    std::fs::create_dir_all(s.work.join("src/api")).expect("src/api");
    let outside = s.work.join("notes.md");
    let inside = s.work.join("src/api/handler.rs");
    let fake = FakeModel::start(vec![
        Turn::claude_write(&outside.display().to_string(), "must not land\n"),
        Turn::claude_write(&inside.display().to_string(), "fn handler() {}\n"),
        Turn::text("one refused, one written"),
    ])
    .expect("fake server");
    let p = claude(&fake, &s, Knowledge::Off);
    let (_, o) = turn(&p, p.spawn(&brief(&s, &j, "L1", Mode::FreshCapsule, None, "write two files")).await).await;
    assert!(o.succeeded, "a refused write does not fail the turn: {o:?}");
    assert!(!outside.exists(), "the guard kept notes.md out");
    assert_eq!(std::fs::read_to_string(&inside).ok().as_deref(), Some("fn handler() {}\n"));
    let reqs = fake.model_requests();
    let refused = reqs[1].tool_results();
    assert!(refused[0].is_error && refused[0].text.contains("write outside owned files"), "{refused:?}");
    assert_eq!(
        verdicts(&j),
        vec![
            (guard::DENIED.to_owned(), json!(["notes.md"])),
            (guard::ALLOWED.to_owned(), json!(["src/api/handler.rs"]))
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn codex_worker_patches_only_inside_ownership() {
    let s = Scratch::new().expect("scratch");
    let j = s.root().join("journal");
    journal_with_owner(&j);
    std::fs::create_dir_all(s.work.join("src/api")).expect("src/api");
    let fake = FakeModel::start(vec![
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: notes.md\n+must not land\n*** End Patch\n"),
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/api/new.rs\n+fn new() {}\n*** End Patch\n"),
        Turn::text("one refused, one patched"),
    ])
    .expect("fake server");
    let p = codex(&fake, &s, Knowledge::Off);
    let (_, o) = turn(&p, p.spawn(&brief(&s, &j, "L1", Mode::FreshCapsule, None, "add two files")).await).await;
    assert!(o.succeeded, "a refused patch does not fail the turn: {o:?}");
    assert!(!s.work.join("notes.md").exists(), "the guard kept notes.md out");
    assert_eq!(std::fs::read_to_string(s.work.join("src/api/new.rs")).ok().as_deref(), Some("fn new() {}\n"));
    let refused = fake.model_requests()[1].tool_results();
    assert!(refused[0].text.contains("blocked by PreToolUse hook"), "{refused:?}");
    assert!(refused[0].text.contains("write outside owned files"), "{refused:?}");
    assert_eq!(
        verdicts(&j),
        vec![(guard::DENIED.to_owned(), json!(["notes.md"])), (guard::ALLOWED.to_owned(), json!(["src/api/new.rs"]))]
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn api_errors_are_failed_outcomes() {
    let s = Scratch::new().expect("scratch");
    let j = s.root().join("journal");
    // claude retries a 400 six times in all: a sticky error answers every try.
    let fake = FakeModel::start(vec![Turn::error(400, "invalid_request_error", "scripted failure").sticky()])
        .expect("fake server");
    let p = claude(&fake, &s, Knowledge::Off);
    let (w, o) = turn(&p, p.spawn(&brief(&s, &j, "L1", Mode::FreshCapsule, None, "fail please")).await).await;
    assert!(!o.succeeded, "an API error is a failure though its subtype says success: {o:?}");
    assert_eq!(o.session_id, w.session_id);
    assert!(o.summary.starts_with("claude: API error 400"), "{}", o.summary);

    let fake =
        FakeModel::start(vec![Turn::error(400, "invalid_prompt", "scripted failure").sticky()]).expect("fake server");
    let p = codex(&fake, &s, Knowledge::Off);
    let (w, o) = turn(&p, p.spawn(&brief(&s, &j, "L1", Mode::FreshCapsule, None, "fail please")).await).await;
    assert!(!o.succeeded, "{o:?}");
    assert_eq!(o.session_id, w.session_id, "the thread was started before the failure");
    assert_eq!(o.summary, "codex: the turn failed: scripted failure");
    assert_eq!(o.accounting, None, "no usage was reported: nothing to account");
    assert_eq!(o.usage, Counters::default(), "unknown, never zero");
}

/// Starts a worker whose model request stalls, and waits until it is held.
async fn stalled(p: &dyn Provider, fake: &FakeModel, b: &Brief) -> Worker {
    let w = p.spawn(b).await.unwrap_or_else(|e| panic!("{} did not start: {e}", p.name()));
    let held = tokio::task::block_in_place(|| fake.wait_for_stall(Duration::from_secs(RUN_S_MAX)));
    assert!(held, "{}: the model request was never made", p.name());
    assert!(group_alive(w.handle as u32), "{}: the worker runs while its request is held", p.name());
    w
}

async fn interrupt_keeps_the_session(p: &dyn Provider, fake: &FakeModel, s: &Scratch) {
    let j = s.root().join("journal");
    let w = stalled(p, fake, &brief(s, &j, "L1", Mode::FreshCapsule, None, "take your time")).await;
    p.interrupt(&w).await.unwrap_or_else(|e| panic!("{} interrupt: {e}", p.name()));
    let o = p.wait(&w).await.unwrap_or_else(|e| panic!("{} wait: {e}", p.name()));
    assert!(!o.succeeded, "{}: an interrupted turn did not succeed: {o:?}", p.name());
    assert!(o.summary.starts_with(&format!("{}: interrupted", p.name())), "{}", o.summary);
    assert!(!group_alive(w.handle as u32), "{}: the process is gone", p.name());
    p.release(&w).await.unwrap_or_else(|e| panic!("{} release: {e}", p.name()));
    fake.release_stalled();
    // The session survives the interrupt: a resume runs in it.
    fake.push(Turn::text("resumed after the interrupt"));
    let r = brief(s, &j, "L1", Mode::Resume, Some(&w.session_id), "go on");
    let (w2, o2) = turn(p, p.resume(&r).await).await;
    assert!(o2.succeeded, "{}: {o2:?}", p.name());
    assert_eq!(w2.session_id, w.session_id);
    assert_eq!(o2.summary, "resumed after the interrupt");
}

async fn release_ends_a_running_turn(p: &std::sync::Arc<dyn Provider>, fake: &FakeModel, s: &Scratch) {
    let j = s.root().join("journal");
    let w = stalled(p.as_ref(), fake, &brief(s, &j, "L1", Mode::FreshCapsule, None, "take your time")).await;
    let waiting = {
        let (p, w) = (std::sync::Arc::clone(p), w.clone());
        tokio::spawn(async move { p.wait(&w).await })
    };
    p.release(&w).await.unwrap_or_else(|e| panic!("{} release: {e}", p.name()));
    assert!(!group_alive(w.handle as u32), "{}: the group is gone after release", p.name());
    let o = waiting.await.expect("the waiting task").unwrap_or_else(|e| panic!("{} wait: {e}", p.name()));
    assert!(!o.succeeded, "{}: a released turn did not succeed: {o:?}", p.name());
    assert!(matches!(p.wait(&w).await, Err(ProviderError::NoWorker { .. })));
    fake.release_stalled();
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn claude_interrupt_and_release_end_the_worker() {
    let fake = FakeModel::start(vec![Turn::stall()]).expect("fake server");
    let s = Scratch::new().expect("scratch");
    let p = claude(&fake, &s, Knowledge::Off);
    interrupt_keeps_the_session(&p, &fake, &s).await;
    fake.push(Turn::stall());
    let p: std::sync::Arc<dyn Provider> = std::sync::Arc::new(p);
    release_ends_a_running_turn(&p, &fake, &s).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn codex_interrupt_and_release_end_the_worker() {
    let fake = FakeModel::start(vec![Turn::stall()]).expect("fake server");
    let s = Scratch::new().expect("scratch");
    let p = codex(&fake, &s, Knowledge::Off);
    interrupt_keeps_the_session(&p, &fake, &s).await;
    fake.push(Turn::stall());
    let p: std::sync::Arc<dyn Provider> = std::sync::Arc::new(p);
    release_ends_a_running_turn(&p, &fake, &s).await;
}

/// A workspace holding the bundled example knowledge (as `tests/it/mcp.rs` sets it up).
fn example_workspace(root: &Path) -> PathBuf {
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    let files = root.join("chunks");
    strata_ok(BIN, &ws, &["knowledge", "example", "--out", &files.display().to_string()]);
    let mut args = vec!["knowledge", "declare"];
    for c in EXAMPLE_CONCERNS {
        args.extend(["--concern", c]);
    }
    for p in EXAMPLE_PROJECTS {
        args.extend(["--project", p]);
    }
    strata_ok(BIN, &ws, &args);
    strata_ok(BIN, &ws, &["knowledge", "put", &files.display().to_string()]);
    ws
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn claude_worker_gets_knowledge_over_mcp_and_the_serve_is_recorded() {
    let s = Scratch::new().expect("scratch");
    let ws = example_workspace(s.root());
    let (concern, project) = (EXAMPLE_CONCERNS[0], EXAMPLE_PROJECTS[0]);
    let fake = FakeModel::start(vec![
        Turn::claude_mcp(
            strata_adapters::providers::worker_process::KNOWLEDGE_SERVER,
            "get_knowledge",
            json!({"concerns": [concern], "project": project,
            "task_context": "providers_real"}),
        ),
        Turn::text("read the knowledge"),
    ])
    .expect("fake server");
    let p = claude(&fake, &s, Knowledge::FromJournal);
    let journal = ws.join(".strata/journal");
    let (_, o) =
        turn(&p, p.spawn(&brief(&s, &journal, "L1", Mode::FreshCapsule, None, "what do we know?")).await).await;
    assert!(o.succeeded, "{o:?}");
    let results = fake.model_requests()[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].is_error, "{results:?}");
    // claude 2.1.332 appends a `<system-reminder>` block to an MCP tool's text: the JSON answer
    // is the first value.
    let served: Value = serde_json::Deserializer::from_str(&results[0].text)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("the tool's JSON answer: {}", results[0].text));
    let chunks = served["chunks"].as_array().expect("chunks");
    assert!(!chunks.is_empty(), "{served}");
    let serves = events(&journal, "knowledge.served");
    assert_eq!(serves.len(), 1, "one serve recorded: {serves:?}");
    let recorded = serves[0].1.to_string();
    assert!(recorded.contains(concern) && recorded.contains("providers_real"), "{recorded}");
    for ch in chunks {
        let slug = ch["slug"].as_str().expect("a slug");
        assert!(recorded.contains(slug), "{slug} is in the serve record: {recorded}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn codex_worker_gets_knowledge_over_mcp_and_the_serve_is_recorded() {
    let s = Scratch::new().expect("scratch");
    let ws = example_workspace(s.root());
    let (concern, project) = (EXAMPLE_CONCERNS[0], EXAMPLE_PROJECTS[0]);
    let fake = FakeModel::start(vec![
        Turn::codex_mcp(
            strata_adapters::providers::worker_process::KNOWLEDGE_SERVER,
            "get_knowledge",
            json!({"concerns": [concern], "project": project,
            "task_context": "providers_real codex"}),
        ),
        Turn::text("read the knowledge"),
    ])
    .expect("fake server");
    let p = codex(&fake, &s, Knowledge::Workspace(ws.clone()));
    let journal = ws.join(".strata/journal");
    let (_, o) =
        turn(&p, p.spawn(&brief(&s, &journal, "L1", Mode::FreshCapsule, None, "what do we know?")).await).await;
    assert!(o.succeeded, "{o:?}");
    let results = fake.model_requests()[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].text.contains("\"chunks\""), "{results:?}");
    let serves = events(&journal, "knowledge.served");
    assert_eq!(serves.len(), 1, "one serve recorded: {serves:?}");
    assert!(serves[0].1.to_string().contains("providers_real codex"), "{serves:?}");
}

/// A workspace (journal under `.strata/`) in the scratch root where lineage `L1` owns `src/api`.
fn workspace_with_owner(s: &Scratch) -> PathBuf {
    let ws = s.root().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    journal_with_owner(&ws);
    std::fs::create_dir_all(s.work.join("src/api")).expect("src/api");
    ws
}

fn denied_in_audit(ws: &Path, path: &str) -> Vec<Value> {
    let shown: Value =
        serde_json::from_str(&strata_ok(BIN, ws, &["--json", "audit", "file", path])).expect("audit file JSON");
    shown["denied"].as_array().cloned().unwrap_or_default()
}

/// The faults with the real CLIs: (a) `strata serve` stopped with SIGSTOP while the
/// workers run, and (d) a write through a symbolic link inside the worktree that points out of
/// it. In both, the write outside ownership is denied by strata's hook within its own deadline
/// (the runtime's timeout never fires), the outside file is absent, and the denial is in the
/// journal after recovery and in `audit file`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn real_workers_are_denied_with_the_daemon_stopped_and_through_links_out_of_the_worktree() {
    let s = Scratch::new().expect("scratch");
    let ws = workspace_with_owner(&s);
    let outside = s.root().join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::os::unix::fs::symlink(&outside, s.work.join("src/api/link")).expect("link");

    // (d) through a link, no daemon: the hook opens the journal itself.
    let through = s.work.join("src/api/link/escape.rs");
    let fake = FakeModel::start(vec![
        Turn::claude_write(&through.display().to_string(), "must not land\n"),
        Turn::text("refused"),
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/api/link/patched.rs\n+no\n*** End Patch\n"),
        Turn::text("refused"),
    ])
    .expect("fake server");
    let p = claude(&fake, &s, Knowledge::Off);
    let (_, o) =
        turn(&p, p.spawn(&brief(&s, &ws, "L1", Mode::FreshCapsule, None, "write through the link")).await).await;
    assert!(o.succeeded, "{o:?}");
    assert!(!outside.join("escape.rs").exists(), "the link did not let the write out");
    let x = codex(&fake, &s, Knowledge::Off);
    let (_, o) =
        turn(&x, x.spawn(&brief(&s, &ws, "L1", Mode::FreshCapsule, None, "patch through the link")).await).await;
    assert!(o.succeeded, "{o:?}");
    assert!(!outside.join("patched.rs").exists(), "the link did not let the patch out");
    let through_raw = through.display().to_string();
    let shown = tokio::task::block_in_place(|| denied_in_audit(&ws, &through_raw));
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0]["reason"].as_str().unwrap_or_default().contains("as the file system resolves it"));

    // (a) the daemon stopped: every write is denied within the hook's deadline.
    let d = tokio::task::block_in_place(|| strata_tests::daemon::Daemon::start(BIN, &ws, &[]));
    d.signal("STOP");
    let inside = s.work.join("src/api/stopped.rs");
    fake.clear_turns();
    fake.push(Turn::claude_write(&inside.display().to_string(), "must not land\n"));
    fake.push(Turn::text("refused"));
    fake.push(Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/api/stopped2.rs\n+no\n*** End Patch\n"));
    fake.push(Turn::text("refused"));
    let (_, o) = turn(&p, p.spawn(&brief(&s, &ws, "L1", Mode::FreshCapsule, None, "write while stopped")).await).await;
    assert!(o.succeeded, "{o:?}");
    assert!(!inside.exists(), "a stopped daemon lets nothing through");
    let x = codex(&fake, &s, Knowledge::Off);
    let (_, o) = turn(&x, x.spawn(&brief(&s, &ws, "L1", Mode::FreshCapsule, None, "patch while stopped")).await).await;
    assert!(o.succeeded, "{o:?}");
    assert!(!s.work.join("src/api/stopped2.rs").exists(), "a stopped daemon lets no patch through");
    let refused = fake.model_requests();
    assert!(
        refused.iter().any(|r| r.tool_results().iter().any(|t| t.text.contains("STRATA-E2001"))),
        "the model was told why"
    );
    d.signal("KILL");
    drop(d);
    // Recovery: the next opener folds the deferred denials in, and the audit shows them.
    for path in ["src/api/stopped.rs", "src/api/stopped2.rs"] {
        let shown = tokio::task::block_in_place(|| denied_in_audit(&ws, path));
        assert_eq!(shown.len(), 1, "{path}: {shown:?}");
        assert!(shown[0]["reason"].as_str().unwrap_or_default().contains("STRATA-E2001"), "{shown:?}");
    }
}

/// A `strata hook … pre-tool-use` process deciding for the journal of `ws` and connected to its
/// daemon, if one runs.
fn hook_waiting(ws: &Path) -> Option<u32> {
    let journal = ws.display().to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let hook = args.iter().any(|a| a == "pre-tool-use") && args.iter().any(|a| a.starts_with(&journal));
        // Waiting: a Unix socket of its beyond stdin, stdout and stderr (which a runtime may
        // give as socket pairs) is connected (state 03 in /proc/net/unix), not only created (a
        // connect that is about to be refused holds a socket too).
        let connected = || {
            let inodes: Vec<String> = std::fs::read_dir(e.path().join("fd"))
                .map(|fds| {
                    fds.flatten()
                        .filter(|f| f.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n > 2))
                        .filter_map(|f| std::fs::read_link(f.path()).ok())
                        .filter_map(|l| {
                            let l = l.to_string_lossy().into_owned();
                            l.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')).map(str::to_owned)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
            table.lines().skip(1).any(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                cols.len() > 6 && cols[5] == "03" && inodes.iter().any(|i| i == cols[6])
            })
        };
        (hook && connected()).then_some(pid)
    })
}

/// The fault (b) with the real CLIs: `strata serve` is SIGKILLed while a worker's hook
/// waits for its answer (the daemon was stopped first, so the hook is connected and waiting,
/// and its deadline is long, so the deadline does not decide). The hook sees the connection
/// drop, denies with exit 2, the outside file is absent, and the denial, deferred to
/// `pending/`, is in `audit file` once the journal is opened again.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
async fn real_workers_are_denied_when_the_daemon_is_killed_while_their_hook_waits() {
    let s = Scratch::new().expect("scratch");
    let ws = workspace_with_owner(&s);
    let fake = FakeModel::start(vec![]).expect("fake server");
    // Long deadlines: the kill, not the deadline, ends each hook's wait.
    let mut c = claude_config(&fake, &s, Knowledge::Off);
    c.hook_deadline_ms = strata_adapters::cli::HOOK_DEADLINE_MS_MAX;
    let claude = ClaudeProvider::new(c);
    let mut x = codex_config(&fake, &s, Knowledge::Off);
    x.hook_deadline_ms = strata_adapters::cli::HOOK_DEADLINE_MS_MAX;
    let codex = CodexProvider::new(x);

    let cases: [(&dyn Provider, Turn, &str); 2] = [
        (&claude, Turn::claude_write(&s.work.join("src/killed.rs").display().to_string(), "no\n"), "src/killed.rs"),
        (
            &codex,
            Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/killed2.rs\n+no\n*** End Patch\n"),
            "src/killed2.rs",
        ),
    ];
    for (p, write, path) in cases {
        let d = tokio::task::block_in_place(|| strata_tests::daemon::Daemon::start(BIN, &ws, &[]));
        d.signal("STOP");
        fake.clear_turns();
        fake.push(write);
        fake.push(Turn::text("refused"));
        let started = p.spawn(&brief(&s, &ws, "L1", Mode::FreshCapsule, None, "write while the daemon dies")).await;
        let waiting = {
            let ws = ws.clone();
            tokio::task::spawn_blocking(move || {
                (0..12_000).find_map(|_| {
                    hook_waiting(&ws).or_else(|| {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        None
                    })
                })
            })
            .await
            .expect("poll")
        };
        d.signal("KILL");
        assert!(waiting.is_some(), "{}: its hook ran and waited on the stopped daemon", p.name());
        drop(d);
        let (_, o) = turn(p, started).await;
        assert!(o.succeeded, "{o:?}");
        assert!(!s.work.join(path).exists(), "{}: a daemon killed mid-answer lets nothing through", p.name());
        let told: Vec<String> =
            fake.model_requests().iter().flat_map(|r| r.tool_results()).map(|t| t.text.clone()).collect();
        assert!(told.last().is_some_and(|t| t.contains("STRATA-E2003")), "{}: told why: {told:?}", p.name());
        let shown = tokio::task::block_in_place(|| denied_in_audit(&ws, path));
        assert_eq!(shown.len(), 1, "{path}: {shown:?}");
        assert!(shown[0]["reason"].as_str().unwrap_or_default().contains("STRATA-E2003"), "{shown:?}");
    }
}
