//! Caps and checks in `strata run`, with the simulated provider (the real CLIs are in
//! `caps_real.rs`): a task over its cap is interrupted there (`worker.capped`), its work never
//! integrated, and it continues once as a fresh capsule; a workgroup over its total cap pauses
//! (exit 4) until a person raises the cap and resumes; a failing `verify` command fails the
//! attempt, its whole log is an artifact with the recorded hash, and the retry is briefed with
//! the bounded summary and the log's path, never the log; a check writes nowhere but the
//! worktree, and what it leaves there never reaches the diff.

use serde_json::Value;
use strata_tests::{git, journal_events as events, run_setting, strata, strata_bin};

const FILES: [(&str, &str); 1] = [("src/lib.rs", "// the crate\n")];

fn of<'a>(all: &'a [(String, String, Value)], ty: &str, task: &str) -> Vec<&'a Value> {
    all.iter().filter(|(_, t, v)| t == ty && v["task"] == task).map(|(_, _, v)| v).collect()
}

/// Runs `plan` in a fresh setting: (the setting's root, workspace, repository, exit code, stderr).
fn run(plan: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Option<i32>, String) {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, plan);
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    let out = strata(strata_bin!(), &ws, &args);
    (tmp, ws, repo, out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_task_over_its_cap_is_interrupted_falls_back_once_and_is_never_integrated() {
    let plan = r#"
workgroup = "capped"
pipeline = "light"
retries = 0
[caps.task]
output_tokens = 200
[[task]]
id = "big"
role = "backend-builder"
objective = "Write too much."
owns = ["src/big.rs"]
[[task]]
id = "small"
role = "backend-builder"
objective = "Write a little."
owns = ["src/small.rs"]
caps = { output_tokens = 1000000, wall_seconds = 3600 }
"#;
    let (_tmp, ws, repo, code, err) = run(plan);
    assert_eq!(code, Some(3), "a failed task: {err}");
    let all = events(&ws);
    let capped = of(&all, "worker.capped", "big");
    assert_eq!(capped.len(), 2, "the attempt and its one fallback: {capped:?}");
    for c in &capped {
        assert_eq!(
            (c["reached"]["measure"].as_str(), c["reached"]["limit"].as_u64()),
            (Some("output-tokens"), Some(200))
        );
        assert!(c["spend"]["output_tokens"].as_u64() >= Some(200), "{c}");
        assert_eq!(c["caps"]["output_tokens"], 200);
    }
    let failed = of(&all, "task.failed", "big");
    assert_eq!(
        (failed[0]["retry"].as_bool(), failed[0]["not_counted"].as_bool()),
        (Some(true), Some(true)),
        "{failed:?}"
    );
    assert_eq!(failed[1]["retry"].as_bool(), Some(false), "a second cap fails the task");
    let dispatched = of(&all, "task.dispatched", "big");
    assert!(dispatched[0]["fallback_after"].is_null());
    assert_eq!(dispatched[1]["fallback_after"]["measure"], "output-tokens", "{}", dispatched[1]);
    assert_eq!(dispatched[1]["runs_as"], "fresh-capsule");
    assert!(of(&all, "task.completed", "big").is_empty());
    let branch = git(&repo, &["ls-tree", "-r", "--name-only", "strata/capped"]);
    assert!(!branch.contains("src/big.rs") && branch.contains("src/small.rs"), "{branch}");
    // The task's own caps override the plan's.
    assert_eq!(of(&all, "task.dispatched", "small")[0]["caps"]["output_tokens"], 1_000_000);
}

#[test]
fn a_wall_time_cap_stops_a_simulated_worker_at_the_cap() {
    // A simulated fresh worker takes 5 to 40 simulated seconds.
    let plan = r#"
workgroup = "walled"
pipeline = "light"
retries = 0
[[task]]
id = "slow"
role = "analyst"
objective = "Think for a long time."
caps = { wall_seconds = 1 }
"#;
    let (_tmp, ws, _repo, code, err) = run(plan);
    assert_eq!(code, Some(3), "{err}");
    let all = events(&ws);
    let capped = of(&all, "worker.capped", "slow");
    assert_eq!(capped[0]["reached"]["measure"], "wall-time", "{capped:?}");
    assert_eq!(capped[0]["reached"]["limit"], 1000);
    assert!(err.contains("capped at wall-time"), "{err}");
}

/// Two tasks one after the other, the workgroup capped so that it pauses after the first (also
/// the plan of `suite::a_phase_is_planned_…`).
pub(crate) const PAUSING: &str = r#"
workgroup = "paused"
pipeline = "light"
parallel = 1
[caps.workgroup]
cost_usd = 0.000001
[[task]]
id = "first"
role = "analyst"
objective = "Look around."
[[task]]
id = "second"
role = "analyst"
objective = "Look again."
after = ["first"]
"#;

#[test]
fn a_workgroup_over_its_cap_pauses_with_exit_4_and_resumes_once_a_person_raises_it() {
    let (_tmp, ws, _repo, code, err) = run(PAUSING);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("paused (workgroup-cap)") && err.contains("--resume"), "{err}");
    let all = events(&ws);
    let paused: Vec<&Value> = all.iter().filter(|(_, t, _)| t == "workgroup.paused").map(|(_, _, v)| v).collect();
    assert_eq!(paused.len(), 1);
    assert_eq!(
        (paused[0]["reason"].as_str(), paused[0]["reached"]["measure"].as_str()),
        (Some("workgroup-cap"), Some("cost"))
    );
    assert!(of(&all, "task.dispatched", "second").is_empty(), "nothing new is dispatched");
    // Resumed without raising it: paused again at once, nothing dispatched.
    let out = strata(strata_bin!(), &ws, &["run", "--resume", "paused"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(of(&events(&ws), "task.dispatched", "second").is_empty());
    // A person raises the cap in the configuration and resumes.
    let config = ws.join(".strata/config.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("\n[context_efficiency.caps.workgroup]\ncost_usd = 1000\n");
    std::fs::write(&config, text).expect("config");
    let out = strata(strata_bin!(), &ws, &["run", "--resume", "paused"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all = events(&ws);
    assert_eq!(all.iter().filter(|(_, t, _)| t == "workgroup.unpaused").count(), 2);
    assert_eq!(of(&all, "task.completed", "second").len(), 1);
    assert!(
        all.iter()
            .any(|(_, t, v)| t == "workgroup.policy-set" && v["policy"]["caps"]["workgroup"]["cost_usd"] == 1000.0)
    );
}

#[test]
fn a_failing_check_fails_the_attempt_keeps_its_log_and_briefs_the_retry_with_its_summary() {
    let plan = r#"
workgroup = "checked"
pipeline = "light"
retries = 1
retry_backoff_ms = 0
[[task]]
id = "api"
role = "backend-builder"
objective = "Write the API."
owns = ["src/api.rs"]
verify = ["printf 'first%slog\\n' -line-of-the-; for i in $(seq 1 400); do echo noise line $i; done; echo 'error: the last line'; exit 7"]
"#;
    let (_tmp, ws, repo, code, err) = run(plan);
    assert_eq!(code, Some(3), "{err}");
    let all = events(&ws);
    let checked = of(&all, "worker.checked", "api");
    assert_eq!(checked.len(), 2, "the attempt and its retry ran the check");
    let c = &checked[0]["checks"][0];
    assert_eq!((c["exit_code"].as_i64(), c["passed"].as_bool()), (Some(7), Some(false)), "{c}");
    let path = c["log"]["path"].as_str().expect("a log");
    let bytes = std::fs::read(ws.join(path)).expect("the log artifact");
    assert_eq!(c["log"]["blake3"].as_str(), Some(blake3::hash(&bytes).to_hex().as_str()));
    assert!(String::from_utf8_lossy(&bytes).starts_with("first-line-of-the-log\n"));
    let summary = c["summary"].as_str().expect("summary");
    assert!(summary.len() <= 1024 && summary.ends_with("error: the last line"), "{summary}");
    let failed = of(&all, "task.failed", "api");
    assert!(failed[0]["reason"].as_str().is_some_and(|r| r.contains("exited 7") && r.contains(path)), "{failed:?}");
    // The retry's capsule: the bounded summary and the log's path, not the log.
    let input = std::fs::read_to_string(ws.join(".strata/prompts/checked/api.2.input.md")).expect("the retry's input");
    assert!(input.contains("error: the last line") && input.contains(path), "{input}");
    assert!(!input.contains("first-line-of-the-log"), "the whole log never reaches a worker");
    assert!(!git(&repo, &["ls-tree", "-r", "--name-only", "strata/checked"]).contains("src/api.rs"));
}

#[test]
fn a_check_writes_only_inside_the_worktree_and_its_leftovers_never_reach_the_diff() {
    let tmp = tempfile::tempdir().expect("tmp");
    let outside = tmp.path().join("escaped");
    let plan = format!(
        r#"
workgroup = "confined"
pipeline = "light"
retries = 0
[[task]]
id = "leaky"
role = "backend-builder"
objective = "Write a file."
owns = ["src/leaky.rs"]
verify = ["echo junk > build.out", "touch {}"]
[[task]]
id = "tidy"
role = "backend-builder"
objective = "Write another file."
owns = ["src/tidy.rs"]
verify = ["echo junk > build.out && mkdir -p target && echo x > target/o"]
"#,
        outside.display()
    );
    let (ws, repo, plan_path) = run_setting(strata_bin!(), &tmp.path().join("s"), &FILES, &plan);
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    let out = strata(strata_bin!(), &ws, &args);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let all = events(&ws);
    let leaky = &of(&all, "worker.checked", "leaky")[0]["checks"];
    assert_eq!(leaky[0]["passed"], true);
    assert_eq!((leaky[1]["passed"].as_bool(), leaky[1]["confined"].as_bool()), (Some(false), Some(true)), "{leaky}");
    assert!(!outside.exists(), "a check cannot write outside the worktree");
    let done = of(&all, "task.completed", "tidy");
    assert_eq!(done[0]["files"], serde_json::json!(["src/tidy.rs"]), "what a check leaves is not the worker's change");
    let branch = git(&repo, &["ls-tree", "-r", "--name-only", "strata/confined"]);
    assert!(
        branch.contains("src/tidy.rs") && !branch.contains("build.out") && !branch.contains("target/o"),
        "{branch}"
    );
}

#[test]
fn caps_too_small_for_the_prompts_fail_the_preflight_recording_nothing_and_raised_they_run() {
    let plan = |task_cap: u64, group_cap: u64| {
        format!(
            r#"
workgroup = "budget"
pipeline = "light"
[caps.workgroup]
input_tokens = {group_cap}
[[task]]
id = "look"
role = "analyst"
objective = "Say what the crate does."
caps = {{ input_tokens = {task_cap} }}
[[task]]
id = "also"
role = "analyst"
objective = "Say what the crate exports."
"#
        )
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &FILES, &plan(10, 20));
    let head = strata_tests::head_seq(strata_bin!(), &ws);
    let args =
        ["run", plan_path.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
    let out = strata(strata_bin!(), &ws, &[&args[..], &["--check", "--json"]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("the preflight's JSON");
    let problems = report["problems"].as_array().expect("problems");
    let codes: Vec<(&str, &str)> =
        problems.iter().map(|p| (p["code"].as_str().unwrap_or(""), p["input"].as_str().unwrap_or(""))).collect();
    assert_eq!(
        codes,
        [("STRATA-E2114", "task look: caps.input_tokens"), ("STRATA-E2115", "caps.workgroup.input_tokens")],
        "{report}"
    );
    // The prompt's own count, as the run would assemble it: the rule names it.
    let look: u64 = problems[0]["rule"]
        .as_str()
        .and_then(|r| r.strip_prefix("its prompt alone is "))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{report}"));
    assert!(look > 10, "{report}");
    assert_eq!(strata_tests::head_seq(strata_bin!(), &ws), head, "a refused preflight records nothing");
    // Raised well past the prompts: a worker reads its sealed capsule and its own turns too, so
    // the prompt is only the budgets' lower bound.
    std::fs::write(&plan_path, plan(look * 50, look * 500)).expect("plan");
    let out = strata(strata_bin!(), &ws, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all = events(&ws);
    let dispatched = of(&all, "task.dispatched", "look");
    assert_eq!(dispatched[0]["prompt"]["tokens"].as_u64(), Some(look), "the preflight counted the prompt the run sent");
}
