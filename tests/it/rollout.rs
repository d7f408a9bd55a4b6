//! Rollouts as events: the stage machine moved by operators and by evaluations, extension and
//! error limits, shadow decisions recorded under both policies, canary exposure by bucket, and
//! `strata eval promote --rollout` recording the consumed run and the stage change in one append.

use serde_json::{Value, json};
use strata_engine::ce::json::sha256_tagged;
use strata_engine::ce::time::format_rfc3339;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_engine::promotion::envelope::{Expected, TrustedKeys};
use strata_engine::promotion::gates::{Thresholds, Verdict};
use strata_engine::promotion::promote::{self, Document, Options};
use strata_engine::promotion::rollout::{self, RolloutError, Rollouts, UNIT_ROUTED};
use strata_engine::promotion::stages::{self, Action, Stage};
use strata_journal::projection::{Projection as _, catch_up_one};
use strata_journal::{ExpectedVersion, Journal, StreamAppend};
use strata_tests::eval::{measured_corpus, pairs_for, promote_args, write_json as write};
use strata_tests::{strata, strata_bin};

/// An in-memory journal and the rollouts folded from it.
struct Bench {
    journal: Journal,
    state: Rollouts,
    ids: CountingIds,
    units: u64,
}

impl Bench {
    fn new() -> Bench {
        Bench::on(Journal::in_memory("strata.test/rollout").unwrap())
    }

    fn on(journal: Journal) -> Bench {
        let mut state = Rollouts::default();
        catch_up_one(&mut state, &journal).unwrap();
        Bench { journal, state, ids: CountingIds::new(1), units: 0 }
    }

    /// Appends `events` on rollout `name`'s stream expecting the folded version, then folds.
    fn apply(&mut self, name: &str, events: Result<rollout::Decided, RolloutError>) -> Result<(), RolloutError> {
        let events = events?;
        let before = self.journal.head().seq;
        if !events.is_empty() {
            let stamped = rollout::stamp(events, &mut self.ids, &FixedClock(1)).unwrap();
            let append = StreamAppend {
                stream: rollout::stream(name),
                expected: ExpectedVersion::Exact(self.state.version(name)),
                events: stamped,
            };
            self.journal.append_multi_blocking(vec![append]).unwrap().unwrap();
        }
        catch_up_one(&mut self.state, &self.journal).unwrap();
        assert!(self.journal.head().seq >= before);
        Ok(())
    }

    fn stage(&self, name: &str) -> Stage {
        self.state.get(name).unwrap().stage
    }

    /// Runs a command that must be refused, and checks that nothing was appended.
    fn refused(&mut self, name: &str, events: Result<rollout::Decided, RolloutError>) -> RolloutError {
        let before = self.journal.head().seq;
        let e = self.apply(name, events).unwrap_err();
        assert_eq!(self.journal.head().seq, before, "a refused command appends nothing");
        e
    }
}

fn started(name: &str) -> rollout::Started {
    rollout::Started {
        rollout: name.to_owned(),
        salt: name.to_owned(),
        baseline: Default::default(),
        candidate: rollout::policy(&json!({"max_nesting_depth": 3})).unwrap(),
        candidate_version: "cand-1".to_owned(),
        runtime_digest: format!("sha256:{}", "c".repeat(64)),
    }
}

fn start(b: &mut Bench, name: &str) {
    let s = b.state.clone();
    b.apply(name, rollout::start(&s, started(name))).unwrap();
}

/// At a canary stage, routes fresh units until each arm has run at least the minimum there.
fn expose(b: &mut Bench, name: &str) {
    if !matches!(b.stage(name), Stage::Canary10 | Stage::Canary25 | Stage::Canary50) {
        return;
    }
    let ran = |b: &Bench, arm: &str| b.state.get(name).unwrap().at_stage.get(arm).copied().unwrap_or(0);
    while ran(b, "candidate") < rollout::EXPOSED_MIN || ran(b, "baseline") < rollout::EXPOSED_MIN {
        b.units += 1;
        let s = b.state.clone();
        let (_, events) = rollout::route(&s, name, &format!("anon-{:016x}", b.units), &json!({})).unwrap();
        b.apply(name, Ok(events)).unwrap();
    }
}

fn operate(b: &mut Bench, name: &str, action: Action) -> Result<(), RolloutError> {
    let s = b.state.clone();
    b.apply(name, rollout::operate(&s, name, action, "test"))
}

/// An evaluation document for `stage` whose gates are all `verdict` (provenance passes).
fn document(stage: Stage, verdict: Verdict) -> Document {
    let corpus = measured_corpus();
    let pairs = pairs_for(&corpus, "measured", 40);
    let keys = TrustedKeys::default();
    let opts = Options {
        thresholds: Thresholds::default(),
        resamples: 200,
        evaluation_id: Some("eval-test"),
        stage: Some(stage),
        expected: Expected { now_ns: 0, candidate_version: "c", corpus_version: "", runtime_digest: "", keys: &keys },
        engine_version: "test",
        recordable: true,
    };
    let (mut doc, _) = promote::evaluate(&corpus, &pairs, None, &opts, &|_| None).unwrap();
    for g in &mut doc.evaluation.gates {
        g.verdict = verdict;
    }
    doc.evaluation.promote = verdict == Verdict::Pass;
    doc.measurement_run_id = Some("measurement-00000000000000aa".to_owned());
    doc
}

fn evaluate(b: &mut Bench, name: &str, verdict: Verdict) -> Result<(), RolloutError> {
    let doc = document(b.stage(name), verdict);
    let s = b.state.clone();
    let change = rollout::evaluated(&s, name, &doc).map(|mut c| {
        if let Some(e) = c.evaluation.as_mut() {
            e.digest = sha256_tagged(b"doc");
        }
        rollout::changed_event(&c)
    });
    b.apply(name, change)
}

/// Exposes enough units at a canary stage, then passes an evaluation.
fn pass(b: &mut Bench, name: &str) {
    expose(b, name);
    evaluate(b, name, Verdict::Pass).unwrap();
}

#[test]
fn operators_move_a_rollout_up_to_shadow_and_only_evaluations_move_it_further() {
    let mut b = Bench::new();
    start(&mut b, "r1");
    let s = b.state.clone();
    assert_eq!(b.refused("r1", rollout::start(&s, started("r1"))), RolloutError::Exists("r1".into()));
    assert!(matches!(b.refused("r2", rollout::operate(&s, "r2", Action::Advance, "x")), RolloutError::Unknown(_)));
    assert!(matches!(b.refused("bad name", rollout::start(&s, started("Bad Name"))), RolloutError::Invalid(_)));
    assert!(rollout::policy(&json!({"max_writers": 1})).unwrap_err().to_string().contains("unknown"));
    assert_eq!(b.stage("r1"), Stage::Off);
    assert!(
        matches!(b.refused("r1", rollout::operate(&s, "r1", Action::Rollback, "x")), RolloutError::Transition(_)),
        "off has no rollback"
    );
    operate(&mut b, "r1", Action::Advance).unwrap();
    operate(&mut b, "r1", Action::Advance).unwrap();
    assert_eq!(b.stage("r1"), Stage::Shadow);
    let s = b.state.clone();
    let e = b.refused("r1", rollout::operate(&s, "r1", Action::Advance, "x"));
    assert!(e.to_string().contains("needs an evaluation"), "{e}");
    // An evaluation made for another stage is refused.
    let doc = document(Stage::Canary10, Verdict::Pass);
    assert!(rollout::evaluated(&s, "r1", &doc).unwrap_err().to_string().contains("made for stage canary-10"));
    let mut wrong = started("r3");
    wrong.runtime_digest = "sha256:short".to_owned();
    assert!(matches!(b.refused("r3", rollout::start(&s, wrong)), RolloutError::Invalid(_)));
    // Evaluations walk it to on; every change is an event the projection folds.
    for want in [Stage::Canary10, Stage::Canary25, Stage::Canary50, Stage::On] {
        pass(&mut b, "r1");
        assert_eq!(b.stage("r1"), want);
    }
    let s = b.state.clone();
    assert!(
        rollout::evaluated(&s, "r1", &document(Stage::On, Verdict::Pass))
            .unwrap_err()
            .to_string()
            .contains("from shadow to canary-50")
    );
    operate(&mut b, "r1", Action::Rollback).unwrap();
    assert_eq!(b.stage("r1"), Stage::Off);
    assert_eq!(b.state.get("r1").unwrap().changes, 7);
}

#[test]
fn inconclusive_holds_for_two_extensions_then_rolls_back_and_a_fail_rolls_back_at_once() {
    let mut b = Bench::new();
    start(&mut b, "r");
    operate(&mut b, "r", Action::Advance).unwrap();
    operate(&mut b, "r", Action::Advance).unwrap();
    for _ in 0..3 {
        pass(&mut b, "r");
    }
    assert_eq!(b.stage("r"), Stage::Canary50);
    evaluate(&mut b, "r", Verdict::Inconclusive).unwrap();
    evaluate(&mut b, "r", Verdict::Inconclusive).unwrap();
    let r = b.state.get("r").unwrap();
    assert_eq!((r.stage, r.extensions), (Stage::Canary50, 2), "Inconclusive never promotes; it holds");
    // An operator's hold buys no extension.
    operate(&mut b, "r", Action::Hold).unwrap();
    assert_eq!(b.state.get("r").unwrap().extensions, 2);
    evaluate(&mut b, "r", Verdict::Inconclusive).unwrap();
    let r = b.state.get("r").unwrap();
    assert_eq!(r.stage, Stage::Off);
    assert!(r.last_reason.as_deref().unwrap().contains("after 2 extensions"), "{:?}", r.last_reason);

    let mut b = Bench::new();
    start(&mut b, "f");
    operate(&mut b, "f", Action::Advance).unwrap();
    operate(&mut b, "f", Action::Advance).unwrap();
    pass(&mut b, "f");
    evaluate(&mut b, "f", Verdict::Fail).unwrap();
    assert_eq!(b.stage("f"), Stage::Off);
}

#[test]
fn four_evaluations_in_error_in_a_row_roll_back_and_a_good_one_resets_the_count() {
    let mut b = Bench::new();
    start(&mut b, "e");
    operate(&mut b, "e", Action::Advance).unwrap();
    operate(&mut b, "e", Action::Advance).unwrap();
    evaluate(&mut b, "e", Verdict::Error).unwrap();
    assert_eq!(b.state.get("e").unwrap().consecutive_errors, 1);
    pass(&mut b, "e");
    assert_eq!((b.stage("e"), b.state.get("e").unwrap().consecutive_errors), (Stage::Canary10, 0));
    // Errors hold without spending extensions; an Inconclusive in between resets the run.
    evaluate(&mut b, "e", Verdict::Error).unwrap();
    expose(&mut b, "e");
    evaluate(&mut b, "e", Verdict::Inconclusive).unwrap();
    let r = b.state.get("e").unwrap();
    assert_eq!(
        (r.stage, r.consecutive_errors, r.extensions),
        (Stage::Canary25, 0, 0),
        "Inconclusive advances below 50%"
    );
    for n in 1..=3 {
        evaluate(&mut b, "e", Verdict::Error).unwrap();
        let r = b.state.get("e").unwrap();
        assert_eq!((r.stage, r.consecutive_errors, r.extensions), (Stage::Canary25, n, 0));
    }
    evaluate(&mut b, "e", Verdict::Error).unwrap();
    let r = b.state.get("e").unwrap();
    assert_eq!(r.stage, Stage::Off);
    assert_eq!(r.last_reason.as_deref(), Some("4 evaluations in error in a row"));
    assert_eq!(rollout::CONSECUTIVE_ERRORS_MAX, 4);
}

#[test]
fn shadow_records_both_decisions_and_canary_exposure_follows_the_bucket() {
    let mut b = Bench::new();
    start(&mut b, "s");
    let facts = json!({"nesting_depth": 2});
    let route = |b: &mut Bench, unit: &str| {
        let s = b.state.clone();
        let (routed, events) = rollout::route(&s, "s", unit, &facts).unwrap();
        b.apply("s", Ok(events)).unwrap();
        routed
    };
    let before = b.journal.head().seq;
    let off = route(&mut b, "small-tier2-01");
    assert_eq!((off.executed.as_str(), off.candidate.is_none()), ("baseline", true));
    assert_eq!(b.journal.head().seq, before, "off records nothing");
    operate(&mut b, "s", Action::Advance).unwrap();
    let observed = route(&mut b, "small-tier2-01");
    assert!(observed.candidate.is_none(), "observe decides the baseline only");
    operate(&mut b, "s", Action::Advance).unwrap();
    let shadow = route(&mut b, "small-tier2-01");
    assert_eq!(shadow.executed, "baseline");
    assert_eq!(
        (shadow.baseline.mode.as_str(), shadow.baseline.reason_codes.as_slice()),
        ("local", &["NESTING_LIMIT".to_owned()][..])
    );
    let cand = shadow.candidate.unwrap();
    assert_eq!(cand.mode, "fresh-capsule", "the candidate allows depth 3");
    let r = b.state.get("s").unwrap();
    assert_eq!((r.units_routed, r.disagreements), (2, 1));
    let kept: Vec<String> = b
        .journal
        .read_range(1, 1000)
        .unwrap()
        .iter()
        .filter(|e| e.event_type == UNIT_ROUTED)
        .map(|e| String::from_utf8(e.payload.clone()).unwrap())
        .collect();
    assert_eq!(kept.len(), 2);
    assert!(kept[1].contains("\"candidate\":{\"mode\":\"fresh-capsule\""), "{}", kept[1]);

    pass(&mut b, "s");
    assert_eq!(b.stage("s"), Stage::Canary10);
    let mut exposed = 0;
    for i in 0..200 {
        let unit = format!("anon-{i:016x}");
        let routed = route(&mut b, &unit);
        let want = stages::bucket_bps("s", &unit) < 1_000;
        assert_eq!(routed.executed == "candidate", want, "{unit}");
        exposed += usize::from(want);
    }
    assert!(exposed > 0 && exposed < 200);
}

#[test]
fn a_canary_stage_holds_until_each_arm_ran_fifty_units_and_rolls_back_if_it_never_does() {
    let mut b = Bench::new();
    start(&mut b, "x");
    operate(&mut b, "x", Action::Advance).unwrap();
    operate(&mut b, "x", Action::Advance).unwrap();
    pass(&mut b, "x");
    assert_eq!(b.stage("x"), Stage::Canary10);
    evaluate(&mut b, "x", Verdict::Pass).unwrap();
    let r = b.state.get("x").unwrap();
    assert_eq!((r.stage, r.extensions), (Stage::Canary10, 1), "every gate passed, but nobody ran the candidate");
    assert!(
        r.last_reason.as_deref().unwrap().starts_with("too little exposure at canary-10: 0 candidate"),
        "{:?}",
        r.last_reason
    );
    pass(&mut b, "x");
    let r = b.state.get("x").unwrap();
    assert_eq!((r.stage, r.extensions), (Stage::Canary25, 0));
    assert!(r.at_stage.is_empty(), "counts start afresh at each stage");
    for _ in 0..2 {
        evaluate(&mut b, "x", Verdict::Pass).unwrap();
    }
    assert_eq!(b.state.get("x").unwrap().extensions, 2);
    evaluate(&mut b, "x", Verdict::Pass).unwrap();
    let r = b.state.get("x").unwrap();
    assert_eq!(r.stage, Stage::Off);
    assert!(
        r.last_reason.as_deref().unwrap().contains("after 2 extensions: too little exposure"),
        "{:?}",
        r.last_reason
    );
}

#[test]
fn the_projection_refuses_histories_the_deciders_never_write() {
    let id = |n: u128| uuid::Uuid::from_u128(n);
    let started_json = |name: &str| serde_json::to_value(started(name)).unwrap();
    let fold = |events: Vec<(&str, &str, Value)>| -> Result<(), String> {
        let j = Journal::in_memory("strata.test/rollout-bad").unwrap();
        for (n, (stream, t, payload)) in events.into_iter().enumerate() {
            let e = strata_tests::event(id(n as u128 + 1), t, &payload);
            j.append_blocking(stream, ExpectedVersion::Any, vec![e]).unwrap().unwrap();
        }
        let mut state = Rollouts::default();
        catch_up_one(&mut state, &j).map(|_| ()).map_err(|e| e.to_string())
    };
    let start = ("rollout/a", rollout::STARTED, started_json("a"));
    assert!(fold(vec![start.clone()]).is_ok());
    let twice = fold(vec![start.clone(), start.clone()]).unwrap_err();
    assert!(twice.contains("started twice"), "{twice}");
    let elsewhere = fold(vec![("rollout/b", rollout::STARTED, started_json("a"))]).unwrap_err();
    assert!(elsewhere.contains("on stream rollout/b"), "{elsewhere}");
    let change = |from: &str, to: &str, by: &str| {
        json!({"rollout": "a", "from": from, "to": to, "action": "advance", "reason": "r", "by": by,
            "evaluation": null, "extensions": 0, "consecutive_errors": 0})
    };
    let by_hand = fold(vec![
        start.clone(),
        ("rollout/a", rollout::STAGE_CHANGED, change("off", "observe", "operator")),
        ("rollout/a", rollout::STAGE_CHANGED, change("observe", "shadow", "operator")),
        ("rollout/a", rollout::STAGE_CHANGED, change("shadow", "canary-10", "operator")),
    ])
    .unwrap_err();
    assert!(by_hand.contains("without a consumed measurement run"), "{by_hand}");
    let skipped =
        fold(vec![start, ("rollout/a", rollout::STAGE_CHANGED, change("off", "shadow", "operator"))]).unwrap_err();
    assert!(skipped.contains("not in the transition table"), "{skipped}");
}

#[test]
fn replay_of_the_journal_folds_the_same_rollouts() {
    let mut b = Bench::new();
    start(&mut b, "a");
    operate(&mut b, "a", Action::Advance).unwrap();
    let mut again = Rollouts::default();
    catch_up_one(&mut again, &b.journal).unwrap();
    assert_eq!(again, b.state);
    assert_eq!(again.state_hash(), b.state.state_hash());
}

#[test]
fn eval_promote_with_a_rollout_records_the_run_and_the_stage_change_together() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = strata_bin!();
    let run = |args: &[&str]| {
        let out = strata(bin, dir, args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let journal = dir.join("j").display().to_string();
    let key = dir.join("k.pem").display().to_string();
    assert_eq!(run(&["eval", "keygen", "--key-id", "measurement-key-lab", "--out", &key]).0, Some(0));
    let keys = write(
        dir,
        "keys.json",
        &json!({"measurement-key-lab": std::fs::read_to_string(format!("{key}.pub")).unwrap()}),
    );
    let corpus = measured_corpus();
    let corpus_file = write(dir, "corpus.json", &corpus);
    let pairs_file = write(dir, "pairs.json", &pairs_for(&corpus, "measured", 40));
    let now = format_rfc3339(
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()).unwrap(),
    );
    let digest = format!("sha256:{}", "b".repeat(64));
    let (code, env, err) = run(&[
        "eval",
        "sign",
        "--pairs",
        &pairs_file,
        "--key",
        &key,
        "--key-id",
        "measurement-key-lab",
        "--candidate-version",
        "c1",
        "--runtime-digest",
        &digest,
        "--measured-at",
        &now,
        "--run-id",
        "measurement-00000000000000ff",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let env_file = write(dir, "env.json", &serde_json::from_str(&env).unwrap());
    for args in [
        vec![
            "rollout",
            "--journal",
            &journal,
            "start",
            "p1",
            "--candidate",
            "{\"max_nesting_depth\": 3}",
            "--candidate-version",
            "c1",
            "--runtime-digest",
            &digest,
        ],
        vec![
            "rollout",
            "--journal",
            &journal,
            "start",
            "p2",
            "--candidate",
            "{\"max_nesting_depth\": 3}",
            "--candidate-version",
            "c9",
            "--runtime-digest",
            &digest,
        ],
        vec!["rollout", "--journal", &journal, "advance", "p1"],
        vec!["rollout", "--journal", &journal, "advance", "p1"],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
    let promote_on = |rollout: &str| {
        let mut args = vec!["--json"];
        args.extend(promote_args(&corpus_file, &pairs_file, &env_file, &keys, "c1", &digest));
        args.extend(["--journal", &journal, "--rollout", rollout]);
        run(&args)
    };
    let promote = || promote_on("p1");
    // A rollout of another candidate does not take this candidate's measurements.
    // Under --json the refusal is one JSON object on stdout.
    let (code, out, _) = promote_on("p2");
    assert_eq!(code, Some(1));
    let refusal: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(refusal["message"].as_str().unwrap().contains("rollout p2 is for candidate c9"), "{out}");
    let (code, out, err) = promote();
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((doc["stage"].as_str(), doc["action"].as_str()), (Some("shadow"), Some("advance")));
    let status = || -> Value {
        let out = strata(bin, dir, &["--json", "rollout", "--journal", &journal, "status", "p1"]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let s = status();
    assert_eq!(s[0]["stage"], "canary-10");
    assert_eq!(s[0]["runs"], json!(["measurement-00000000000000ff"]));
    // The same envelope again: provenance fails and the rollout does not move.
    let (code, out, err) = promote();
    assert_eq!(code, Some(3));
    assert!(err.contains("the rollout does not move"), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert!(doc["gates"][0]["reason"].as_str().unwrap().contains("already consumed"));
    assert_eq!(status()[0]["stage"], "canary-10");
}

/// A run plan of `n` independent read-only tasks.
fn units_plan(n: usize) -> String {
    let mut plan = "workgroup = \"under\"\npipeline = \"light\"\nparallel = 4\n".to_owned();
    for i in 0..n {
        plan.push_str(&format!("[[task]]\nid = \"t{i}\"\nrole = \"analyst\"\nobjective = \"Look at part {i}.\"\n"));
    }
    plan
}

/// A workspace whose journal holds rollout `r` brought to `stage` (by hand, then by passing
/// evaluations with the exposure each canary stage needs), configured to honour canary stages
/// exposing up to 25 %.
fn rollout_setting(stage: Stage, n: usize) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _repo, plan) = strata_tests::run_setting(strata_bin!(), tmp.path(), &[("README", "x\n")], &units_plan(n));
    let journal =
        Journal::open(&ws.join(".strata/journal"), &strata_tests::options(strata_journal::Durability::Process))
            .unwrap();
    let mut b = Bench::on(journal);
    start(&mut b, "r");
    operate(&mut b, "r", Action::Advance).unwrap();
    operate(&mut b, "r", Action::Advance).unwrap();
    while b.stage("r") < stage {
        pass(&mut b, "r");
    }
    assert_eq!(b.stage("r"), stage);
    b.journal.close_blocking().unwrap();
    let config = ws.join(".strata/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[context_efficiency]\nrollout = \"canary\"\ncanary_percent = 25\n");
    std::fs::write(&config, text).unwrap();
    (tmp, ws, plan)
}

/// The `rollout.unit-routed` events of units of workgroup `under` (`under.<task>`).
fn routed_units(ws: &std::path::Path) -> Vec<Value> {
    strata_tests::journal_events(ws)
        .into_iter()
        .filter(|(_, t, v)| t == UNIT_ROUTED && v["unit"].as_str().is_some_and(|u| u.starts_with("under.")))
        .map(|(_, _, v)| v)
        .collect()
}

fn run_under(ws: &std::path::Path, plan: &std::path::Path) {
    let out = strata(strata_bin!(), ws, &["run", plan.to_str().unwrap(), "--rollout", "r", "--time-scale", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_run_under_a_shadow_rollout_records_both_decisions_per_task_and_runs_the_baseline() {
    let (_tmp, ws, plan) = rollout_setting(Stage::Shadow, 6);
    run_under(&ws, &plan);
    let routed = routed_units(&ws);
    assert_eq!(routed.len(), 6, "one per dispatch: {routed:?}");
    for u in &routed {
        assert_eq!((u["stage"].as_str(), u["executed"].as_str()), (Some("shadow"), Some("baseline")), "{u}");
        assert!(u["baseline"]["mode"].is_string() && u["candidate"]["mode"].is_string(), "{u}");
    }
}

#[test]
fn a_run_under_a_canary_rollout_runs_the_candidate_where_strata_rollout_route_would() {
    let (_tmp, ws, plan) = rollout_setting(Stage::Canary25, 24);
    run_under(&ws, &plan);
    let routed = routed_units(&ws);
    assert_eq!(routed.len(), 24);
    for u in &routed {
        assert_eq!(u["stage"], "canary-25");
        let unit = u["unit"].as_str().unwrap();
        let mut child = std::process::Command::new(strata_bin!())
            .arg("--dir")
            .arg(&ws)
            .args(["--json", "rollout", "route", "r", "--unit", unit])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(b"{}").unwrap();
        let out = child.wait_with_output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["routed"]["bucket_bps"], u["bucket_bps"], "{unit}");
        assert_eq!(v["routed"]["executed"], u["executed"], "{unit}: the run and `strata rollout route` choose alike");
    }
    assert!(routed.iter().any(|u| u["executed"] == "candidate") && routed.iter().any(|u| u["executed"] == "baseline"));
}

#[test]
fn a_run_under_a_rollout_the_configuration_does_not_honour_is_refused() {
    let (_tmp, ws, plan) = rollout_setting(Stage::Shadow, 1);
    let config = ws.join(".strata/config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace("rollout = \"canary\"", "rollout = \"off\"");
    std::fs::write(&config, text).unwrap();
    let head = || strata_tests::head_seq(strata_bin!(), &ws);
    let before = head();
    let out = strata(strata_bin!(), &ws, &["run", plan.to_str().unwrap(), "--rollout", "r", "--time-scale", "0"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("STRATA-E2318"));
    let out = strata(strata_bin!(), &ws, &["run", plan.to_str().unwrap(), "--rollout", "nope", "--time-scale", "0"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("STRATA-E2317"));
    assert_eq!(head(), before, "a refused run appends nothing");
}
