//! `strata run` end to end with the simulated provider: the bundled example completes and
//! `strata audit file` answers for every file its workers wrote; the same seed gives the same run;
//! the post-turn diff check catches a write outside ownership under both policies; a coordinator
//! SIGKILLed mid-run continues with `--resume` without rerunning a completed task or leaving a
//! file owned twice; and the plan checks report every problem at once. The example's journal
//! round-trips through export and import.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use strata_engine::ce::ledger::Ledger;
use strata_engine::workgroup::plan::{self, Plan};
use strata_engine::workgroup::state::{Status, Workgroups};
use strata_journal::projection::catch_up_one;
use strata_tests::{git, init_repo, run_setting, strata, strata_bin, strata_ok};

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).expect("one JSON document")
}

fn run_example(at: &Path, extra: &[&str]) -> (Value, std::process::Output) {
    let mut args = vec!["run", "--example", "--at", at.to_str().expect("utf-8 path"), "--time-scale", "0", "--json"];
    args.extend_from_slice(extra);
    let out = strata(strata_bin!(), at.parent().expect("parent"), &args);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    (v, out)
}

fn load(dir: &Path) -> (Workgroups, Ledger) {
    let journal = strata_journal::Journal::open(
        &dir.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .expect("journal opens");
    let mut groups = Workgroups::default();
    let mut ledger = Ledger::default();
    catch_up_one(&mut groups, &journal).expect("workgroups");
    catch_up_one(&mut ledger, &journal).expect("ledger");
    journal.close_blocking().expect("close");
    (groups, ledger)
}

#[test]
fn the_example_completes_and_audit_names_task_session_and_prompt_for_every_written_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("example");
    let (s, out) = run_example(&at, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((s["completed"].as_u64(), s["failed"].as_u64(), s["held"].as_u64()), (Some(7), Some(0), Some(0)));
    assert!(s["synthetic"].as_bool().unwrap_or(false), "simulated figures are marked synthetic");
    let tasks = s["tasks"].as_array().expect("tasks");
    let mode = |t: &str| tasks.iter().find(|x| x["task"] == t).map(|x| x["mode"].clone()).unwrap_or_default();
    assert_eq!(mode("survey"), "local");
    assert_eq!(mode("billing-tests"), "resume", "a task continuing a warm session resumes it");
    assert_eq!(mode("review"), "fresh-capsule");
    let review = tasks.iter().find(|x| x["task"] == "review").expect("review");
    assert!(review["reasons"].as_array().expect("reasons").contains(&Value::from("REVIEW_INDEPENDENCE")));
    // Prompts are a small fraction of loading every specification.
    let (prompt, baseline) = (s["prompt_tokens"].as_u64().unwrap_or(0), s["baseline_tokens"].as_u64().unwrap_or(0));
    assert!(prompt > 0 && prompt * 10 < baseline, "prompt {prompt} vs baseline {baseline}");

    let written: Vec<(String, String)> = tasks
        .iter()
        .flat_map(|t| {
            let task = t["task"].as_str().unwrap_or_default().to_owned();
            t["files"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |f| (task.clone(), f.as_str().unwrap_or_default().to_owned()))
        })
        .collect();
    assert!(written.len() >= 5, "the builders wrote files: {written:?}");
    let repo = at.join("repo");
    for (task, file) in &written {
        let audit = json(&strata_ok(strata_bin!(), &at, &["audit", "file", file, "--json"]));
        let writes = audit["writes"].as_array().expect("writes");
        let w = writes
            .iter()
            .find(|w| w["task"] == task.as_str())
            .unwrap_or_else(|| panic!("{file}: no write by {task}: {audit}"));
        assert!(w["session_id"].as_str().is_some_and(|s| s.starts_with("sim-")), "{w}");
        let prompt_seq = w["prompt"]["recorded_at"].as_u64().expect("the prompt that preceded the write");
        assert!(prompt_seq < w["seq"].as_u64().expect("seq"), "the prompt precedes the write");
        assert_eq!(w["prompt"]["prompt_hash"], w["prompt_hash"]);
        // The change is on the integration branch.
        let shown = git(&repo, &["show", &format!("strata/cr-1-rollout:{file}")]);
        assert!(shown.contains(&format!("[simulated] {task}")), "{file}: {shown}");
    }
    // The session audit and the run audit answer from the journal too.
    let run = json(&strata_ok(strata_bin!(), &at, &["audit", "run", "cr-1-rollout", "--json"]));
    assert_eq!(run["completed"], 7);
    let session = run["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["task"] == "billing-api"))
        .expect("session")["session"]
        .clone();
    let by_session =
        json(&strata_ok(strata_bin!(), &at, &["audit", "session", session.as_str().expect("id"), "--json"]));
    let names: Vec<&str> =
        by_session["tasks"].as_array().expect("tasks").iter().filter_map(|t| t["task"].as_str()).collect();
    assert_eq!(names, ["billing-api", "billing-tests"], "the resumed task ran in the same session");
    // The journal verifies, replays, and round-trips through export and import byte for byte.
    strata_ok(strata_bin!(), &at, &["journal", "verify"]);
    strata_ok(strata_bin!(), &at, &["replay", "--check"]);
    strata_tests::assert_round_trips(strata_bin!(), &at, "strata run --example");
    let (groups, ledger) = load(&at);
    assert!(ledger.owners().is_empty(), "every claim was released: {:?}", ledger.owners());
    let g = groups.get("cr-1-rollout").expect("workgroup");
    assert!(g.finished);
    let log = json(&strata_ok(
        strata_bin!(),
        &at,
        &["journal", "log", "--stream", "ce/ledger", "--from", "1", "--limit", "100000", "--json"],
    ));
    let ledger_events = log.as_array().expect("events");
    // Every worker started fresh or resumed was briefed with a sealed capsule, recorded on the
    // ledger and written beside its prompt; a stale warm session was also given its own anew.
    let briefed: Vec<_> = g
        .tasks
        .values()
        .filter(|t| t.dispatch.as_ref().is_some_and(|(_, d)| ["fresh-capsule", "resume"].contains(&d.runs_as.as_str())))
        .collect();
    assert!(briefed.len() >= 5);
    assert!(briefed.iter().all(|t| {
        t.dispatch.as_ref().and_then(|(_, d)| d.capsule_hash.as_deref()).is_some_and(|h| h.starts_with("sha256:"))
    }));
    let attempts: u64 = briefed.iter().map(|t| u64::from(t.attempts)).sum();
    let reconciled: Vec<&Value> = ledger_events.iter().filter(|e| e["type"] == "ce.lineage-reconciled").collect();
    assert_eq!(
        ledger.capsules_sealed(),
        attempts + reconciled.len() as u64,
        "one capsule per briefed dispatch, retries included, and one per reconciliation"
    );
    let capsule: Value = serde_json::from_slice(
        &std::fs::read(at.join(".strata/prompts/cr-1-rollout/billing-api.1.prompt.capsule.json"))
            .expect("capsule file"),
    )
    .expect("capsule JSON");
    assert_eq!(capsule["owned_files"], serde_json::json!(["src/billing"]));
    assert_eq!(capsule["phase"], "2A");
    // Completed sessions are warm lineages on the ledger; billing-tests resumed billing-api's
    // session only because its lineage's lease was live, and the resume renewed it.
    let api = ledger.lineages().get("cr-1-rollout.billing-api").expect("billing-api's lineage is recorded");
    assert_eq!(api.record.to_json()["platform"], "other");
    assert_eq!(api.record.to_json()["platform_handle"], session);
    assert!(ledger.leases().contains_key("cr-1-rollout.billing-api"), "its lease is live");
    let tests = ledger.lineages().get("cr-1-rollout.billing-tests").expect("billing-tests' lineage");
    assert_eq!(tests.record.to_json()["parent_lineage_id"], "cr-1-rollout.billing-api");
    let renewed = ledger_events
        .iter()
        .filter(|e| e["type"] == "ce.lease-renewed" && e["payload"]["lineage_id"] == "cr-1-rollout.billing-api")
        .count();
    assert!(renewed >= 1, "the resume renewed billing-api's lease");
    // billing-api's own change moved the integration branch, so its session's capsule was stale
    // when billing-tests resumed it: reconciled first, and given the capsule as sealed now.
    let [r] = reconciled.as_slice() else { panic!("one reconciliation: {reconciled:?}") };
    assert_eq!(r["payload"]["lineage_id"], "cr-1-rollout.billing-api");
    assert_eq!(r["payload"]["from_capsule_hash"], api_capsule(g));
    assert_eq!(
        api.record.to_json()["capsule_hash"],
        r["payload"]["capsule_hash"],
        "the record names the current capsule"
    );
    let input = std::fs::read_to_string(at.join(".strata/prompts/cr-1-rollout/billing-tests.1.input.md"))
        .expect("billing-tests' input");
    let hash = r["payload"]["capsule_hash"].as_str().expect("hash");
    assert!(input.contains("## Reconciliation") && input.contains(hash), "{input}");
}

/// The capsule billing-api was first briefed with.
fn api_capsule(g: &strata_engine::workgroup::state::Workgroup) -> Value {
    let d = g.tasks.get("billing-api").and_then(|t| t.dispatch.as_ref()).map(|(_, d)| d.capsule_hash.clone());
    serde_json::json!(d.flatten())
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let strip = |mut v: Value| {
        for k in ["elapsed_ms", "coordinator_overhead_p50_us"] {
            v.as_object_mut().expect("object").remove(k);
        }
        v
    };
    let (a, _) = run_example(&tmp.path().join("a"), &["--seed", "3"]);
    let (b, _) = run_example(&tmp.path().join("b"), &["--seed", "3"]);
    let (c, _) = run_example(&tmp.path().join("c"), &["--seed", "4"]);
    let (a, b, c) = (strip(a), strip(b), strip(c));
    assert_eq!(a, b);
    assert_ne!(a["cost_micros"], c["cost_micros"], "another seed draws other figures");
}

#[test]
fn a_failed_task_is_dispatched_again_only_after_its_backoff() {
    // Under seed 6, at the default time scale (1000), the simulated billing-api's first attempt
    // fails and its 10 s backoff passes like simulated latency: 10 ms of wall time.
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("example");
    let out = strata(
        strata_bin!(),
        tmp.path(),
        &["run", "--example", "--at", at.to_str().expect("utf-8 path"), "--seed", "6", "--time-scale", "1000"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("billing-api: failed:") && err.contains("retrying in 10.0 s (simulated time)"), "{err}");
    let journal = strata_journal::Journal::open(
        &at.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .expect("journal opens");
    let mut seen: Vec<(String, i64, Value)> = Vec::new();
    journal
        .scan(1, u64::MAX, |r, _| {
            if r.stream == "workgroup/cr-1-rollout" && ["task.failed", "task.dispatched"].contains(&r.event_type) {
                let payload: Value = serde_json::from_slice(r.payload).unwrap_or_default();
                if payload["task"] == "billing-api" {
                    seen.push((r.event_type.to_owned(), r.recorded_at_ns, payload));
                }
            }
            Ok::<_, String>(true)
        })
        .expect("scan")
        .expect("read");
    journal.close_blocking().expect("close");
    let [(d1, _, _), (f, failed_at, failed), (d2, again_at, _)] = seen.as_slice() else { panic!("{seen:?}") };
    assert_eq!((d1.as_str(), f.as_str(), d2.as_str()), ("task.dispatched", "task.failed", "task.dispatched"));
    assert_eq!(failed["retry"], true);
    let not_before = failed["not_before_ns"].as_i64().expect("the retry's time is recorded");
    // Decided 10 ms after the failure's own clock reading, just before the append stamped it.
    assert!(not_before > failed_at + 9_000_000, "10 s at scale 1000 is 10 ms: {not_before} vs {failed_at}");
    assert!(*again_at >= not_before, "attempt 2 was dispatched at {again_at}, before {not_before}");
}

#[test]
fn a_write_outside_ownership_is_caught_after_the_turn_stop_fails_the_task_and_flag_discards_it() {
    // Seed 36 makes one simulated writer of the example also write a file it does not own (seed 19
    // did until the onDemand items left the prompts and with them the simulated draws changed).
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("stop");
    let (s, out) = run_example(&at, &["--seed", "36"]);
    assert_eq!(out.status.code(), Some(3), "a failed task is exit 3");
    assert_eq!(s["violations"], 1);
    let bad = s["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["violations"] == 1)
        .expect("the violating task")
        .clone();
    assert_eq!(bad["status"], "failed");
    assert!(bad["problem"].as_str().is_some_and(|p| p.contains("outside its owned files")), "{bad}");
    let stray = format!("{}.stray.md", bad["task"].as_str().expect("task"));
    let review = s["tasks"].as_array().expect("tasks").iter().find(|t| t["task"] == "review").expect("review").clone();
    assert_eq!(review["status"], "held", "the review phase does not start after a failed build");
    let listed = git(&at.join("repo"), &["ls-tree", "-r", "--name-only", "strata/cr-1-rollout"]);
    assert!(!listed.contains(&stray), "the stray write never reaches the integration branch");

    let at = tmp.path().join("flag");
    let (s, out) = run_example(&at, &["--seed", "36", "--on-violation", "flag"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((s["completed"].as_u64(), s["violations"].as_u64()), (Some(7), Some(1)));
    let listed = git(&at.join("repo"), &["ls-tree", "-r", "--name-only", "strata/cr-1-rollout"]);
    assert!(!listed.contains(&stray), "flagged changes are discarded");
}

const CRASH_PLAN: &str = r#"
workgroup = "crash"
parallel = 3
retries = 0

[[task]]
id = "plan"
role = "planner"
phase = "plan"
objective = "Plan the work."
"#;

fn crash_plan() -> String {
    let mut text = CRASH_PLAN.to_owned();
    for i in 0..10 {
        let after = if i % 3 == 0 { "[\"plan\"]".to_owned() } else { format!("[\"b{}\"]", i - 1) };
        text.push_str(&format!(
            "\n[[task]]\nid = \"b{i}\"\nrole = \"backend-builder\"\nobjective = \"Build part {i}.\"\nowns = [\"src/p{i}/\"]\nafter = {after}\n"
        ));
    }
    text.push_str(
        "\n[[task]]\nid = \"review\"\nrole = \"reviewer\"\nphase = \"review\"\nobjective = \"Review it all.\"\n",
    );
    text
}

#[test]
fn a_sigkilled_coordinator_resumes_without_rerunning_completed_tasks_or_owning_a_file_twice() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, repo, plan) = run_setting(strata_bin!(), tmp.path(), &[("src/README.md", "sources\n")], &crash_plan());

    // Simulated turns take 5–40 s; divided by 40 they take 0.1–1 s, so the kill lands mid-run.
    let mut child = Command::new(strata_bin!())
        .arg("--dir")
        .arg(&ws)
        .args([
            "run",
            plan.to_str().expect("utf-8"),
            "--repo",
            repo.to_str().expect("utf-8"),
            "--time-scale",
            "40",
            "--seed",
            "3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strata run starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut completed_before = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if let Some(task) = line.trim().strip_suffix(" files)").and_then(|l| l.split(": completed").next()) {
            completed_before.push(task.trim().to_owned());
            if completed_before.len() == 4 {
                break;
            }
        }
    }
    assert_eq!(completed_before.len(), 4, "the run completed four tasks before the kill");
    // SIGKILL: no chance to clean up.
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    let (groups, ledger) = load(&ws);
    let g = groups.get("crash").expect("the workgroup is in the journal");
    let open: Vec<&String> = g.tasks.iter().filter(|(_, t)| !t.status.is_terminal()).map(|(id, _)| id).collect();
    assert!(!open.is_empty(), "the kill left work to do");
    let owned_at_kill = ledger.owners().len();
    let in_flight_at_kill: Vec<(String, Status, u32, bool)> = g
        .tasks
        .iter()
        .filter(|(_, t)| matches!(t.status, Status::Dispatched | Status::Running))
        .map(|(id, t)| (id.clone(), t.status, t.attempts, t.worker_end.is_some()))
        .collect();

    let out = strata(
        strata_bin!(),
        &ws,
        &["run", "--resume", "crash", "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0", "--json"],
    );
    assert!(out.status.success(), "resume: {}", String::from_utf8_lossy(&out.stderr));
    let s = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(s["completed"], 12, "{s}");
    let (groups, ledger) = load(&ws);
    let g = groups.get("crash").expect("workgroup");
    assert!(g.finished);
    for t in &completed_before {
        let state = g.tasks.get(t).expect("task");
        assert_eq!(
            (state.status, state.attempts),
            (Status::Completed, 1),
            "{t} completed before the kill and did not run again"
        );
    }
    assert!(ledger.owners().is_empty(), "every file released (at the kill {owned_at_kill} lineages owned files)");
    // The runner's catch-up: a worker the killed run started and never saw end is recorded as
    // abandoned and its task runs again as the next attempt; a dispatch whose worker never started
    // runs as that attempt; a worker whose end the journal holds is judged as that attempt.
    for (id, status, attempts, ended) in &in_flight_at_kill {
        let state = g.tasks.get(id).expect("task");
        assert_eq!(state.status, Status::Completed, "{id}");
        if *ended {
            assert_eq!(state.attempts, *attempts, "{id}'s recorded worker end was judged, not rerun");
        } else if *status == Status::Running {
            assert_eq!(state.attempts, attempts + 1, "{id} ran again after its worker was abandoned");
            let (_, f) = state.failed.as_ref().expect("the abandoned attempt is a failure");
            assert_eq!(f.attempt, *attempts);
            assert!(f.retry && f.reason.contains("stopped"), "{id}: {f:?}");
        } else {
            assert_eq!(state.attempts, *attempts, "{id}'s dispatch ran as the attempt it was recorded as");
        }
    }
    // Each completed task's change reached the integration branch exactly once.
    let log = git(&repo, &["log", "--format=%s", "strata/crash"]);
    for i in 0..10 {
        let n = log.lines().filter(|l| l.starts_with(&format!("strata: crash/b{i} "))).count();
        assert_eq!(n, 1, "b{i} applied once:\n{log}");
    }
    strata_ok(strata_bin!(), &ws, &["journal", "verify"]);
}

#[test]
fn the_plan_checks_report_every_problem_at_once() {
    let text = r#"
workgroup = "Bad Name"
parallel = 0
retry_backoff_ms = 3600000
[[task]]
id = "a"
role = "backend-builder"
objective = "x"
after = ["b", "ghost"]
[[task]]
id = "b"
role = "backend-builder"
objective = "y"
owns = ["src/x/"]
after = ["a"]
[[task]]
id = "c"
role = "ui-builder"
objective = "z"
owns = ["src/x/file.rs"]
[[task]]
id = "d"
role = "reviewer"
phase = "plan"
objective = "r"
after = ["c"]
continues = "b"
[[task]]
id = "e"
role = "ui-builder"
objective = "e"
owns = ["ui/e/"]
after = ["c"]
continues = "c"
[[task]]
id = "f"
role = "ui-builder"
objective = "f"
owns = ["ui/f/"]
after = ["c"]
continues = "c"
"#;
    let plan: Plan = toml::from_str(text).expect("TOML");
    let problems = plan::check(&plan).expect_err("refused");
    let has = |task: Option<&str>, field: &str, words: &str| {
        problems.iter().any(|p| p.task.as_deref() == task && p.field == field && p.rule.contains(words))
    };
    assert!(has(None, "workgroup", "a-z"), "{problems:?}");
    assert!(has(None, "parallel", "outside"), "{problems:?}");
    assert!(has(None, "retry_backoff_ms", "above 600000"), "{problems:?}");
    assert!(has(Some("a"), "after", "not a task"), "{problems:?}");
    assert!(has(Some("a"), "owns", "writer role"), "{problems:?}");
    assert!(problems.iter().any(|p| p.field == "after" && p.rule.contains("cycle")), "{problems:?}");
    assert!(has(Some("c"), "owns", "overlaps"), "{problems:?}");
    assert!(has(Some("d"), "after", "phases are gates"), "{problems:?}");
    assert!(has(Some("d"), "continues", "must also be in after"), "{problems:?}");
    assert!(has(Some("f"), "continues", "one session cannot run two workers at once"), "{problems:?}");
    assert!(has(None, "task", "review"), "the full pipeline needs a review task: {problems:?}");
    // And through the CLI: exit 1 with the problems named, nothing appended.
    let tmp = tempfile::tempdir().expect("tempdir");
    strata_ok(strata_bin!(), tmp.path(), &["init"]);
    let file = tmp.path().join("bad.toml");
    std::fs::write(&file, text).expect("plan");
    let out = strata(strata_bin!(), tmp.path(), &["run", file.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("STRATA-E1701") && err.contains("task c: owns"), "{err}");
    let (groups, _) = load(tmp.path());
    assert!(groups.groups().is_empty(), "a refused plan appends nothing");
}

#[test]
fn a_change_that_does_not_apply_is_a_conflict_and_the_integration_branch_stays_clean() {
    use strata_adapters::coordinator::git::Repo;
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("repo");
    init_repo(&root, &[("shared.txt", "one\n")]);
    let repo = Repo::open(&root, &root, "conflict-test").expect("opens");
    // Two workers start from the same tip and change the same line.
    let a = repo.worktree("a", 1).expect("worktree a");
    let b = repo.worktree("b", 1).expect("worktree b");
    std::fs::write(a.join("shared.txt"), "one from a\n").expect("write a");
    std::fs::write(b.join("shared.txt"), "one from b\n").expect("write b");
    let ca = repo.collect(&a, "a").expect("collect a");
    let cb = repo.collect(&b, "b").expect("collect b");
    assert_eq!(ca.files, ["shared.txt"]);
    assert!(repo.apply(ca.commit.as_deref().expect("commit")).expect("apply a").is_ok());
    let conflict = repo.apply(cb.commit.as_deref().expect("commit")).expect("apply b");
    assert_eq!(conflict, Err(vec!["shared.txt".to_owned()]));
    // Nothing half applied: the branch holds a's change only, and a's commit is known as applied.
    assert_eq!(git(&root, &["show", "strata/conflict-test:shared.txt"]), "one from a\n");
    let applied = repo.applied().expect("applied");
    assert!(
        applied.contains(ca.commit.as_deref().expect("commit"))
            && !applied.contains(cb.commit.as_deref().expect("commit"))
    );
    for w in [&a, &b] {
        repo.remove(w).expect("remove");
        assert!(!w.exists());
    }
    repo.close().expect("close");
}

#[test]
fn a_plan_larger_than_one_event_is_recorded_in_chunks_in_one_append_and_folds_back_whole() {
    use strata_engine::ports::{CountingIds, FixedClock};
    use strata_engine::workgroup::decide;
    let mut text = String::from("workgroup = \"big\"\n");
    for i in 0..1_200 {
        text.push_str(&format!(
            "[[task]]\nid = \"t{i}\"\nrole = \"analyst\"\nobjective = \"Read part {i} of the system and summarise what changed there.\"\n"
        ));
    }
    let plan: Plan = toml::from_str(&text).expect("TOML");
    let checked = plan::check(&plan).expect("checks");
    let append = decide::plan(&Workgroups::default(), checked.clone(), 7, &mut CountingIds::new(1), &FixedClock(1))
        .expect("decided");
    assert!(append.events.len() > 2, "several task chunks: {}", append.events.len());
    assert!(
        append.events.iter().all(|e| e.payload.len() <= 256 * 1024),
        "every event fits the journal's payload limit"
    );
    let journal = strata_journal::Journal::in_memory("test").expect("journal");
    journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
    let mut groups = Workgroups::default();
    catch_up_one(&mut groups, &journal).expect("fold");
    let g = groups.get("big").expect("planned");
    assert_eq!(g.plan, checked, "the plan folds back exactly");
    assert_eq!(g.tasks.len(), 1_200);
    assert_eq!(decide::next(g, 0).dispatch.len(), 4, "four at once by default");
}

const CLASH_PLAN: &str = r#"
workgroup = "clash"
pipeline = "light"
retries = 0

[[task]]
id = "edit"
role = "backend-builder"
phase = "build"
objective = "Change the shared notes."
owns = ["docs/notes.txt"]

[[task]]
id = "follow"
role = "backend-builder"
phase = "build"
after = ["edit"]
objective = "Follow the change up."
owns = ["docs/follow.txt"]
"#;

#[test]
fn a_completed_change_that_no_longer_applies_is_conflicted_through_strata_run_and_holds_its_dependants() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, repo, plan) = run_setting(strata_bin!(), tmp.path(), &[("docs/notes.txt", "one\n")], CLASH_PLAN);
    // Simulated turns take 5–40 s; divided by 4, at least a second: time to move the
    // integration branch under the running worker.
    let mut child = Command::new(strata_bin!())
        .arg("--dir")
        .arg(&ws)
        .args(["run", plan.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8")])
        .args(["--time-scale", "4", "--seed", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strata run starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let dispatched = lines.by_ref().map_while(Result::ok).any(|l| l.contains("edit: dispatched"));
    assert!(dispatched, "edit was dispatched");
    // Someone commits a different change of the same file onto the integration branch while
    // edit's worker runs from the tip before it.
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    let integration = worktrees
        .split("\n\n")
        .find(|w| w.contains("branch refs/heads/strata/clash"))
        .and_then(|w| w.lines().next())
        .and_then(|l| l.strip_prefix("worktree "))
        .expect("the integration worktree")
        .to_owned();
    let integration = Path::new(&integration);
    std::fs::write(integration.join("docs/notes.txt"), "one\nchanged by hand\n").expect("write");
    git(integration, &["commit", "-qam", "a change by hand"]);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().expect("the run ends");
    assert_eq!(out.status.code(), Some(3), "a conflicted task ends the run with 3: {rest:?}");
    let s = json(&strata_ok(strata_bin!(), &ws, &["audit", "run", "clash", "--json"]));
    let status =
        |t: &str| s["tasks"].as_array().and_then(|a| a.iter().find(|x| x["task"] == t)).map(|x| x["status"].clone());
    assert_eq!(status("edit"), Some(Value::from("conflicted")), "{s}");
    assert_eq!(status("follow"), Some(Value::from("held")), "{s}");

    let (groups, ledger) = load(&ws);
    let g = groups.get("clash").expect("workgroup");
    let edit = g.tasks.get("edit").expect("edit");
    let c = edit.conflicted.as_ref().expect("the conflict is an event");
    assert_eq!((c.branch.as_str(), c.files.clone()), ("strata/clash", vec!["docs/notes.txt".to_owned()]));
    let held = g.tasks.get("follow").and_then(|t| t.held.clone()).expect("follow is held");
    assert_eq!(held.blocked_by, ["edit"]);
    assert!(g.finished && ledger.owners().is_empty());
    // Nothing half applied: the branch holds the change by hand only.
    assert_eq!(git(&repo, &["show", "strata/clash:docs/notes.txt"]), "one\nchanged by hand\n");
    strata_ok(strata_bin!(), &ws, &["journal", "verify"]);
}

/// The head (sequence, hash) of the workspace's journal at `ws`.
fn head_of(ws: &Path) -> (u64, String) {
    let journal = strata_journal::Journal::open(
        &ws.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .expect("journal opens");
    let h = journal.head();
    journal.close_blocking().expect("close");
    (h.seq, h.hash.to_hex())
}

/// A profile like the shipped backend-developer, named `strict-backend`, with `never` globs.
fn strict_profile(never: &[&str]) -> String {
    let mut v: Value = serde_json::from_str(include_str!("../../profiles/backend-developer.json")).expect("profile");
    v["agentId"] = "strict-backend".into();
    v["contextProfile"]["never"] = serde_json::json!(never);
    v["contextProfile"].as_object_mut().expect("object").remove("guards");
    v.to_string()
}

const BROKEN_PLAN: &str = r#"
workgroup = "pf"
provider = "claude"
pipeline = "full"
[[task]]
id = "a"
role = "backend-builder"
objective = "Change a."
owns = ["src/a/"]
profile = "nope"
change_request = "CR-77"
[[task]]
id = "b"
role = "backend-builder"
objective = "Change b."
owns = ["src/b/"]
profile = "strict-backend"
change_request = "CR-6"
[[task]]
id = "r"
role = "reviewer"
phase = "review"
after = ["a", "b"]
objective = "Review it."
change_request = "CR-1"
"#;

#[test]
fn a_failed_preflight_lists_every_problem_records_nothing_and_leaves_the_name_free() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (ws, repo, notgit, bin) = (root.join("ws"), root.join("repo"), root.join("notgit"), root.join("bin"));
    for d in [&ws, &notgit, &bin] {
        std::fs::create_dir_all(d).expect("directory");
    }
    // PATH holds git and nothing else: no provider CLI.
    let real_git = String::from_utf8(Command::new("sh").args(["-c", "command -v git"]).output().expect("sh").stdout)
        .expect("utf-8");
    std::os::unix::fs::symlink(real_git.trim(), bin.join("git")).expect("git link");
    init_repo(&repo, &[("src/a/a.rs", "// a\n"), ("src/b/b.rs", "// b\n")]);
    strata_ok(strata_bin!(), &ws, &["init", "--durability", "process"]);
    // The seed-scale knowledge base: CR-1 in progress, CR-6 in draft, no CR-77.
    let kb = root.join("kb");
    strata_ok(strata_bin!(), &ws, &["fixture", "--out", kb.to_str().expect("utf-8")]);
    strata_ok(strata_bin!(), &ws, &["intake", kb.to_str().expect("utf-8")]);
    // A profile whose never glob names a directory virtual paths do not have (modules are
    // `specs/<entity>/backend/<id>`): it registers, and the preflight says it matches nothing.
    let profile = root.join("strict.json");
    std::fs::write(&profile, strict_profile(&["specs/*/modules/**"])).expect("profile");
    let registered = strata(strata_bin!(), &ws, &["profile", "register", profile.to_str().expect("utf-8")]);
    assert!(registered.status.success());
    let warned = String::from_utf8_lossy(&registered.stderr);
    assert!(warned.contains("profile strict-backend: never[0] \"specs/*/modules/**\" matches no path"), "{warned}");
    let listed = json(&strata_ok(strata_bin!(), &ws, &["prompt", "paths", "specs/*/modules/**", "--json"]));
    assert_eq!(listed["count"], 0, "{listed}");
    let modules = json(&strata_ok(strata_bin!(), &ws, &["prompt", "paths", "specs/billing/backend/*", "--json"]));
    assert!(
        modules["paths"]
            .as_array()
            .is_some_and(|p| !p.is_empty()
                && p.iter().all(|x| x.as_str().is_some_and(|s| s.starts_with("specs/billing/backend/")))),
        "{modules}"
    );
    let plan = root.join("plan.toml");
    std::fs::write(&plan, BROKEN_PLAN).expect("plan");
    let run = |extra: &[&str], repo_dir: &Path| {
        let mut cmd = Command::new(strata_bin!());
        cmd.arg("--dir").arg(&ws).args(["run", plan.to_str().expect("utf-8"), "--repo"]).arg(repo_dir);
        cmd.args(["--time-scale", "0", "--json"]).args(extra);
        cmd.env("PATH", &bin).env_remove("STRATA_CLAUDE").env_remove("STRATA_CODEX");
        cmd.output().expect("strata runs")
    };
    let codes = |out: &std::process::Output| -> Vec<(String, String)> {
        let v = json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(v["ok"], false, "{v}");
        v["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .map(|p| {
                for k in ["code", "input", "rule", "fix"] {
                    assert!(p[k].as_str().is_some_and(|s| !s.is_empty()), "{k} of {p}");
                }
                (p["code"].as_str().unwrap_or_default().to_owned(), p["input"].as_str().unwrap_or_default().to_owned())
            })
            .collect()
    };
    let before = head_of(&ws);
    let notgit_input = format!("repository {}", notgit.display());
    let expected = |repo_problem: bool| {
        let mut v = vec![
            ("STRATA-E0905", "task a: profile".to_owned()),
            ("STRATA-E2102", "task a: change_request".to_owned()),
            ("STRATA-E2103", "task b: change_request".to_owned()),
        ];
        if repo_problem {
            v.push(("STRATA-E1722", notgit_input.clone()));
        }
        v.push(("STRATA-E2108", "provider claude".to_owned()));
        v.push(("STRATA-E2110", "profile strict-backend: never[0] \"specs/*/modules/**\"".to_owned()));
        v.into_iter().map(|(c, i)| (c.to_owned(), i)).collect::<Vec<_>>()
    };
    // With --check and without it, in a directory that is not a git repository and in one that
    // is: every problem at once, exit 1, nothing appended, no branch, no worktree.
    for (extra, dir, repo_problem) in [
        (&["--check"][..], &notgit, true),
        (&[][..], &notgit, true),
        (&["--check"][..], &repo, false),
        (&[][..], &repo, false),
    ] {
        let out = run(extra, dir);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(codes(&out), expected(repo_problem), "{extra:?} {}", dir.display());
        // Under --json the refusal is one object: the report with the error's code.
        assert_eq!(json(&String::from_utf8_lossy(&out.stdout))["code"], "STRATA-E2101");
        assert_eq!(head_of(&ws), before, "{extra:?}: the journal head did not move");
        assert_eq!(git(&repo, &["branch", "--list", "strata/*"]).trim(), "", "no branch");
        assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1, "no worktree");
    }
    // Fixed: the profile, the change requests, a real repository, the simulated provider. The
    // same workgroup name runs to completion.
    std::fs::write(&profile, strict_profile(&["specs/*/screens/**"])).expect("profile");
    strata_ok(strata_bin!(), &ws, &["profile", "register", profile.to_str().expect("utf-8")]);
    let fixed = BROKEN_PLAN.replace("profile = \"nope\"\n", "").replace("CR-77", "CR-1").replace("CR-6", "CR-1");
    std::fs::write(&plan, fixed).expect("plan");
    let checked = run(&["--check", "--provider", "sim"], &repo);
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stdout));
    let v = json(&String::from_utf8_lossy(&checked.stdout));
    assert_eq!((v["ok"].as_bool(), v["repository"]["status"].as_str()), (Some(true), Some("ready")), "{v}");
    assert_eq!(v["not_checked"][0]["check"], "budgets");
    let out = run(&["--provider", "sim"], &repo);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        (s["workgroup"].as_str(), s["completed"].as_u64(), s["failed"].as_u64()),
        (Some("pf"), Some(3), Some(0))
    );
    assert_eq!(git(&repo, &["branch", "--list", "strata/*"]).trim(), "strata/pf");
    // Now the name is taken: a new run of the same plan is refused by the preflight, listing it.
    let again = run(&["--check", "--provider", "sim"], &repo);
    assert_eq!(again.status.code(), Some(1));
    let listed: Vec<String> = codes(&again).into_iter().map(|(c, _)| c).collect();
    assert_eq!(listed, ["STRATA-E1702", "STRATA-E2107"]);
}

/// The build gate: a build task runs only on a change request that is approved or in progress
/// and sound; held otherwise, with the reasons recorded and shown by `audit run`. The same plan
/// on the approved change request runs.
#[test]
fn a_build_task_on_a_change_request_not_yet_approved_is_held_by_the_build_gate_and_audit_run_says_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, repo) = (tmp.path().join("ws"), tmp.path().join("repo"));
    std::fs::create_dir_all(&ws).expect("workspace");
    init_repo(&repo, &[("src/a/a.rs", "// a\n")]);
    strata_ok(strata_bin!(), &ws, &["init", "--durability", "process"]);
    let kb = tmp.path().join("kb");
    strata_ok(strata_bin!(), &ws, &["fixture", "--out", kb.to_str().expect("utf-8")]);
    strata_ok(strata_bin!(), &ws, &["intake", kb.to_str().expect("utf-8")]);
    // CR-6 is in draft (which the preflight refuses); proposed, it passes the preflight.
    strata_ok(strata_bin!(), &ws, &["artifact", "transition", "CR-6", "--to", "proposed"]);
    let run = |wg: &str| {
        let plan = tmp.path().join(format!("{wg}.toml"));
        let text = format!(
            "workgroup = \"{wg}\"\npipeline = \"light\"\n\n[[task]]\nid = \"build\"\nrole = \"backend-builder\"\nobjective = \"Implement CR-6.\"\nowns = [\"src/a/\"]\nchange_request = \"CR-6\"\n"
        );
        std::fs::write(&plan, text).expect("plan");
        let args = ["run", plan.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"];
        let out = strata(strata_bin!(), &ws, &args);
        let audit = json(&strata_ok(strata_bin!(), &ws, &["--json", "audit", "run", wg]));
        (out, audit)
    };
    let (out, audit) = run("gated");
    assert_eq!(out.status.code(), Some(3), "held: {}", String::from_utf8_lossy(&out.stderr));
    let gate = &audit["gates"][0];
    assert_eq!(
        (gate["task"].as_str(), gate["gate"].as_str(), gate["passed"].as_bool()),
        (Some("build"), Some("build"), Some(false)),
        "{audit}"
    );
    assert!(gate["reasons"][0].as_str().is_some_and(|r| r.contains("change request CR-6 is proposed")), "{gate}");
    assert_eq!(gate["facts"]["state"], "proposed");
    let text = strata_ok(strata_bin!(), &ws, &["audit", "run", "gated"]);
    assert!(text.contains("build: build gate (CR-6) refused: change request CR-6 is proposed"), "{text}");
    // Nothing was claimed or dispatched for the held task.
    let journal = strata_journal::Journal::open(
        &ws.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .expect("journal");
    let mut groups = Workgroups::default();
    catch_up_one(&mut groups, &journal).expect("fold");
    let g = groups.get("gated").expect("workgroup");
    assert_eq!(g.tasks["build"].status, Status::Held);
    assert!(g.tasks["build"].dispatch.is_none());
    journal.close_blocking().expect("close");
    drop(journal);

    strata_ok(strata_bin!(), &ws, &["artifact", "transition", "CR-6", "--to", "approved"]);
    let (out, audit) = run("gated-again");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(audit["gates"][0]["passed"], true, "{audit}");
    assert_eq!(audit["gates"][0]["facts"]["state"], "approved");
}

#[test]
fn fifos_where_a_runs_prompt_and_handoff_files_go_neither_block_nor_receive_the_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan = "workgroup = \"odd\"\npipeline = \"light\"\n\n[[task]]\nid = \"w\"\nrole = \"backend-builder\"\nobjective = \"Write it.\"\nowns = [\"src/w.rs\"]\n";
    let (ws, repo, plan_path) = run_setting(strata_bin!(), tmp.path(), &[("src/w.rs", "// w\n")], plan);
    let fifo = |p: &Path| {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        let out = Command::new("mkfifo").arg(p).output().expect("mkfifo runs");
        assert!(out.status.success(), "mkfifo {}", p.display());
    };
    let prompts = ws.join(".strata/prompts/odd");
    let odd = [
        prompts.join("w.1.prompt.md"),
        prompts.join("w.1.prompt.manifest.json"),
        prompts.join("w.1.input.md"),
        ws.join(".strata/handoffs/odd/w.1.md"),
    ];
    for p in &odd {
        fifo(p);
    }
    let mut cmd = Command::new(strata_bin!());
    cmd.arg("--dir").arg(&ws).args([
        "run",
        plan_path.to_str().expect("utf-8"),
        "--repo",
        repo.to_str().expect("utf-8"),
    ]);
    cmd.args(["--time-scale", "0"]);
    // A bound only so that a regression fails instead of hanging the suite.
    let out = strata_tests::real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(120)).expect("run");
    assert!(!out.timed_out && out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    for p in &odd {
        let m = std::fs::symlink_metadata(p).expect("replaced");
        assert!(m.file_type().is_file(), "{} is a regular file now", p.display());
    }
}

#[test]
fn the_review_gate_records_the_build_tasks_a_review_stood_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("example");
    let (v, out) = run_example(&at, &[]);
    assert!(out.status.success(), "{v}");
    let audit = json(&strata_ok(strata_bin!(), &at, &["--json", "audit", "run", "cr-1-rollout"]));
    let review =
        audit["gates"].as_array().expect("gates").iter().find(|g| g["gate"] == "review").expect("a review gate");
    assert_eq!((review["task"].as_str(), review["passed"].as_bool()), (Some("review"), Some(true)), "{review}");
    let builds: Vec<&str> = review["builds"].as_array().expect("builds").iter().filter_map(Value::as_str).collect();
    assert!(
        builds.contains(&"billing-api completed") && builds.iter().all(|b| b.ends_with(" completed")),
        "{builds:?}"
    );
}
