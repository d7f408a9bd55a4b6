//! `strata telemetry record` and `report` end to end, on the real binary and a real sled journal:
//! per-invocation deltas from cumulative counters (unknown kept apart from zero, regressions
//! refused with nothing appended), estimated billing kept out of billed sums, the privacy scan,
//! rollup quantiles against hand-computed values, the 2% reconciliation boundary per session,
//! arm and overall, and byte-identical reports across runs and replays.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use strata_tests::{strata, strata_bin, strata_ok};

const BIN: &str = strata_bin!();

fn workspace() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    strata_ok(BIN, tmp.path(), &["init", "--durability", "process", "--origin", "strata.test/telemetry"]);
    tmp
}

fn record(ws: &Path, request: &Value) -> Output {
    let dir = ws.display().to_string();
    let args = ["--dir", dir.as_str(), "--json", "telemetry", "record"];
    strata_tests::strata_with_stdin(BIN, &args, request.to_string().as_bytes())
}

/// Records and returns the recorded payload.
fn record_ok(ws: &Path, request: &Value) -> Value {
    let out = record(ws, request);
    assert!(out.status.success(), "{request}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    v["payload"].clone()
}

/// Records, expects a refusal mentioning `needle`, and checks the head did not move. Under
/// `--json` the refusal is one JSON error object on stdout; returns that line.
fn record_refused(ws: &Path, request: &Value, needle: &str) -> String {
    let before = head(ws);
    let out = record(ws, request);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{request}: {stdout}");
    let refusal: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(refusal["code"].as_str().is_some_and(|c| c.starts_with("STRATA-E")), "{refusal}");
    assert!(refusal["message"].as_str().unwrap().contains(needle), "{needle} not in {stdout}");
    assert_eq!(head(ws), before, "a refusal appended something");
    stdout
}

fn head(ws: &Path) -> u64 {
    let log: Value = serde_json::from_str(&strata_ok(BIN, ws, &["--json", "journal", "log"])).unwrap();
    log.as_array().unwrap().last().unwrap()["seq"].as_u64().unwrap()
}

fn report(ws: &Path) -> (String, Value) {
    let text = strata_ok(BIN, ws, &["--json", "telemetry", "report"]);
    let v = serde_json::from_str(&text).unwrap();
    (text, v)
}

fn usage(session: &str, source: &str, cumulative: Value) -> Value {
    json!({"kind": "usage", "session": session, "provider": "claude", "model": "sonnet", "profile": "balanced",
           "mode": "fresh-capsule", "stratum": "small-tier2", "accounting_source": source, "currency": "USD",
           "cumulative": cumulative})
}

fn counters(input: Value, creation: Value, read: Value, output: Value, cost: Value, wall: Value) -> Value {
    json!({"input_tokens": input, "cache_creation_tokens": creation, "cache_read_tokens": read,
           "output_tokens": output, "cost_micros": cost, "wall_ms": wall})
}

#[test]
fn deltas_come_from_cumulative_counters_and_unknown_is_not_zero() {
    let tmp = workspace();
    let ws = tmp.path();
    let n = Value::Null;
    // First report: the delta is the cumulative value; unknown stays unknown, zero stays zero.
    let first = counters(json!(100), n.clone(), json!(0), json!(50), json!(1000), json!(2000));
    let p = record_ok(ws, &usage("w-1", "provider-reported", first.clone()));
    assert_eq!(p["cumulative"], first);
    assert_eq!(p["delta"], first);
    // Second: differences where both are known; unknown where either side is.
    let second = counters(json!(150), json!(10), json!(0), json!(80), json!(1500), n.clone());
    let p = record_ok(ws, &usage("w-1", "provider-reported", second));
    assert_eq!(p["delta"], counters(json!(50), n.clone(), json!(0), json!(30), json!(500), n.clone()));
    // A counter going back is refused, naming the counter and the fix; nothing is appended.
    let back = counters(json!(140), json!(10), json!(0), json!(80), json!(1500), json!(3000));
    let e = record_refused(ws, &usage("w-1", "provider-reported", back), "STRATA-E1504");
    assert!(e.contains("cumulative.input_tokens: 140 is below 150"), "{e}");
    assert!(e.contains("new session pseudonym"), "{e}");
    // Below an earlier known value even when the last report did not know it.
    let back = counters(json!(150), json!(10), json!(0), json!(80), json!(1500), json!(1999));
    let e = record_refused(ws, &usage("w-1", "provider-reported", back), "STRATA-E1504");
    assert!(e.contains("cumulative.wall_ms"), "{e}");
    // Previously unknown: the delta stays unknown even though the value is known now.
    let third = counters(json!(200), json!(10), json!(5), json!(90), json!(1700), json!(5000));
    let p = record_ok(ws, &usage("w-1", "provider-reported", third));
    assert_eq!(p["delta"], counters(json!(50), json!(0), json!(5), json!(10), json!(200), n.clone()));
    // The rollup: three invocations; the unknown values are counted, not summed.
    let (_, r) = report(ws);
    let g = &r["rollups"][0];
    assert_eq!(g["invocations"], 3);
    assert_eq!(g["billed"]["input_tokens"]["sum"], 200);
    assert_eq!(g["billed"]["cache_creation_tokens"]["known"], 1);
    assert_eq!(g["billed"]["cache_creation_tokens"]["unknown"], 2);
    assert_eq!(g["billed"]["cache_read_tokens"]["sum"], 5);
    assert_eq!(g["billed"]["cache_read_tokens"]["unknown"], 0);
    assert_eq!(g["billed"]["tokens"]["unknown"], 2);
    assert_eq!(g["billed"]["cost_micros"]["USD"]["sum"], 1700);
    assert_eq!(g["wall_ms"]["known"], 1);
    assert_eq!(g["wall_ms"]["unknown"], 2);
    // Reconciliation with an unknown delta on a reported counter is incomplete.
    record_ok(
        ws,
        &json!({"kind": "session", "session": "w-1", "provider": "claude",
                 "totals": {"cache_creation_tokens": 10, "input_tokens": 200}, "total_cost_usd": 0.0017}),
    );
    let (_, r) = report(ws);
    let s = &r["reconciliation"]["sessions"]["w-1"];
    assert_eq!(s["counters"]["input_tokens"]["verdict"], "within");
    assert_eq!(s["counters"]["cost_micros"]["reported"], 1700);
    assert_eq!(s["counters"]["cost_micros"]["verdict"], "within");
    assert_eq!(s["counters"]["cache_creation_tokens"]["verdict"], "incomplete");
    assert_eq!(s["counters"]["cache_creation_tokens"]["events"], Value::Null);
    assert_eq!(s["verdict"], "incomplete");
}

#[test]
fn estimated_billing_is_recorded_but_never_billed() {
    let tmp = workspace();
    let ws = tmp.path();
    let n = Value::Null;
    record_ok(
        ws,
        &usage("b-1", "provider-reported", counters(json!(10), n.clone(), n.clone(), json!(5), json!(300), n.clone())),
    );
    let p = record_ok(
        ws,
        &usage("e-1", "estimated", counters(json!(40), n.clone(), n.clone(), json!(20), json!(900), n.clone())),
    );
    assert_eq!(p["accounting_source"], "estimated");
    assert_eq!(p["delta"]["cost_micros"], 900);
    let (_, r) = report(ws);
    let g = &r["rollups"][0];
    assert_eq!(g["invocations"], 2);
    assert_eq!(g["billed"]["cost_micros"]["USD"]["sum"], 300);
    assert_eq!(g["billed"]["cost_micros"]["USD"]["known"], 1);
    assert_eq!(g["billed"]["input_tokens"]["sum"], 10);
    assert_eq!(g["estimated"]["cost_micros"]["USD"]["sum"], 900);
    assert_eq!(g["estimated"]["input_tokens"]["sum"], 40);
    // An estimated session never reconciles: its billed side is unknown.
    record_ok(
        ws,
        &json!({"kind": "session", "session": "e-1", "provider": "claude", "currency": "USD", "totals": {"cost_micros": 900}}),
    );
    let (_, r) = report(ws);
    assert_eq!(r["reconciliation"]["sessions"]["e-1"]["counters"]["cost_micros"]["events"], Value::Null);
    assert_eq!(r["reconciliation"]["sessions"]["e-1"]["verdict"], "incomplete");
    // A session keeps its accounting class; billing counters need a source.
    let e = record_refused(
        ws,
        &usage("e-1", "provider-reported", counters(json!(50), n.clone(), n.clone(), n.clone(), json!(950), n.clone())),
        "STRATA-E1506",
    );
    assert!(e.contains("accounting_source"), "{e}");
    record_refused(
        ws,
        &usage("u-1", "unknown", counters(json!(1), n.clone(), n.clone(), n.clone(), n.clone(), n.clone())),
        "STRATA-E1505",
    );
    // Unknown source with only wall time is fine.
    record_ok(ws, &usage("u-1", "unknown", counters(n.clone(), n.clone(), n.clone(), n.clone(), n.clone(), json!(10))));
}

fn efficiency(event: Value) -> Value {
    json!({"kind": "efficiency", "session": "k-1", "arm": "candidate", "stratum": "ui-integration", "event": event})
}

#[test]
fn efficiency_events_are_normalised_and_private_content_is_refused() {
    let tmp = workspace();
    let ws = tmp.path();
    let ok = json!({"event": "worker_completed", "observed_at": "2026-03-01T10:00:00Z", "provider": "codex",
                    "model": "gpt-5", "mode": "fresh-capsule", "outcome": {"verify_passed": 3, "verify_total": 4}});
    let p = record_ok(ws, &efficiency(ok.clone()));
    assert_eq!(p["event"]["schema"], "knowzcode.efficiency-event/v1");
    assert_eq!(p["event"]["billed"]["accounting_source"], "unknown");
    assert_eq!(p["event"]["logical"]["prompt_bytes"], Value::Null);
    // A home-directory path anywhere in the event is private: refused, nothing appended.
    let mut private = ok.clone();
    private["task_corpus_id"] = json!("/home/alice/work");
    let e = record_refused(ws, &efficiency(private), "PRIVATE_TELEMETRY");
    assert!(!e.contains("alice"), "the refusal quotes private input: {e}");
    // Anywhere in the request, too.
    let mut request = efficiency(ok.clone());
    request["stratum"] = json!("/home/alice");
    record_refused(ws, &request, "PRIVATE_TELEMETRY");
    // Schema and accounting rules of the wire protocol apply.
    let mut bad = ok.clone();
    bad["model"] = json!("arbitrary-unapproved-model");
    record_refused(ws, &efficiency(bad), "EFFICIENCY_EVENT_INVALID");
    let mut billed = ok.clone();
    billed["billed"] = json!({"output_tokens": 5});
    record_refused(ws, &efficiency(billed), "ACCOUNTING_SOURCE_REQUIRED");
    // strata's own fields: the session pseudonym, the stratum, unknown fields.
    let mut request = efficiency(ok.clone());
    request["session"] = json!("Has Spaces");
    record_refused(ws, &request, "STRATA-E1502");
    let mut request = efficiency(ok.clone());
    request["stratum"] = json!("frontend");
    record_refused(ws, &request, "STRATA-E1502");
    let mut request = efficiency(ok.clone());
    request["colour"] = json!("red");
    record_refused(ws, &request, "unknown field `colour`");
    // The arm is fixed per session.
    let mut request = efficiency(ok);
    request["arm"] = json!("baseline");
    record_refused(ws, &request, "STRATA-E1506");
    let (_, r) = report(ws);
    assert_eq!(r["events"], 1);
    let g = &r["rollups"][0];
    assert_eq!(
        (g["provider"].as_str(), g["model"].as_str(), g["stratum"].as_str()),
        (Some("codex"), Some("gpt-5"), Some("ui-integration"))
    );
    assert_eq!(g["efficiency_events"], 1);
    assert_eq!(g["invocations"], 0);
}

#[test]
fn oversized_and_malformed_input_is_refused() {
    let tmp = workspace();
    let ws = tmp.path();
    let big = json!({"kind": "usage", "pad": "x".repeat(1 << 20)});
    record_refused(ws, &big, "STRATA-E1508");
    let out =
        Command::new(BIN).arg("--dir").arg(ws).args(["telemetry", "record"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E1501"));
    record_refused(ws, &json!({"kind": "bill"}), "unknown variant `bill`");
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn rollup_quantiles_match_hand_computed_type_7_values() {
    let tmp = workspace();
    let ws = tmp.path();
    // Per-invocation costs 10, 20, 30, 40, 100 (cumulative 10, 30, 60, 100, 200); wall times
    // 5, 1, 4, 2, 3 (cumulative 5, 6, 10, 12, 15).
    let cumulative_cost = [10, 30, 60, 100, 200];
    let cumulative_wall = [5, 6, 10, 12, 15];
    for (i, (c, w)) in cumulative_cost.iter().zip(cumulative_wall).enumerate() {
        let t = (i as u64 + 1) * 100;
        let req = usage("q-1", "authoritative", counters(json!(t), json!(0), json!(0), json!(t), json!(c), json!(w)));
        record_ok(ws, &req);
    }
    let (_, r) = report(ws);
    let g = &r["rollups"][0];
    let cost = &g["billed"]["cost_micros"]["USD"];
    assert_eq!(cost["known"], 5);
    assert_eq!(cost["sum"], 200);
    // Type 7: h = (n−1)q. p50: h = 2 → 30. p75: h = 3 → 40. p95: h = 3.8 → 40 + 0.8·60 = 88.
    assert!(close(cost["p50"].as_f64().unwrap(), 30.0), "{cost}");
    assert!(close(cost["p75"].as_f64().unwrap(), 40.0), "{cost}");
    assert!(close(cost["p95"].as_f64().unwrap(), 88.0), "{cost}");
    // Sorted walls 1, 2, 3, 4, 5: p50 3, p75 4, p95 4 + 0.8·1 = 4.8.
    let wall = &g["wall_ms"];
    assert!(close(wall["p50"].as_f64().unwrap(), 3.0), "{wall}");
    assert!(close(wall["p75"].as_f64().unwrap(), 4.0), "{wall}");
    assert!(close(wall["p95"].as_f64().unwrap(), 4.8), "{wall}");
    // Tokens per invocation: 200 each (100 in, 100 out).
    let tokens = &g["billed"]["tokens"];
    assert_eq!(tokens["sum"], 1000);
    assert!(close(tokens["p95"].as_f64().unwrap(), 200.0), "{tokens}");
    // The table shows the same group.
    let table = strata_ok(BIN, ws, &["telemetry", "report"]);
    assert!(table.starts_with("PROVIDER"), "{table}");
    assert!(table.contains("200 USD"), "{table}");
}

fn cost_usage(session: &str, arm: &str, cost: u64) -> Value {
    json!({"kind": "usage", "session": session, "provider": "claude", "arm": arm,
           "accounting_source": "provider-reported", "currency": "USD", "cumulative": {"cost_micros": cost}})
}

fn cost_session(session: &str, cost: u64) -> Value {
    json!({"kind": "session", "session": session, "provider": "claude", "currency": "USD", "totals": {"cost_micros": cost}})
}

/// Verdicts of every session, then every arm, then overall, in report order.
fn verdicts(r: &Value) -> Vec<String> {
    let rec = &r["reconciliation"];
    let scopes = rec["sessions"].as_object().unwrap().values().chain(rec["arms"].as_object().unwrap().values());
    scopes.chain([&rec["overall"]]).map(|s| s["verdict"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn reconciliation_is_within_at_exactly_two_percent_and_over_just_past_it() {
    let tmp = workspace();
    let ws = tmp.path();
    // Exactly 2% over the provider's totals in every scope: within.
    record_ok(ws, &cost_usage("b-1", "baseline", 6_000));
    record_ok(ws, &cost_usage("b-1", "baseline", 10_200));
    record_ok(ws, &cost_session("b-1", 10_000));
    record_ok(ws, &cost_usage("c-1", "candidate", 9_800));
    record_ok(ws, &cost_session("c-1", 10_000));
    record_ok(ws, &cost_usage("c-2", "candidate", 10_600));
    record_ok(ws, &cost_session("c-2", 10_000));
    let (_, r) = report(ws);
    let rec = &r["reconciliation"];
    assert_eq!(rec["sessions"]["b-1"]["counters"]["cost_micros"]["difference"], 200);
    assert_eq!(rec["sessions"]["c-1"]["counters"]["cost_micros"]["difference"], -200);
    assert_eq!(rec["arms"]["candidate"]["counters"]["cost_micros"]["events"], 20_400);
    assert_eq!(rec["overall"]["counters"]["cost_micros"]["events"], 30_600);
    assert_eq!(rec["overall"]["counters"]["cost_micros"]["reported"], 30_000);
    // Sessions b-1, c-1, c-2, arms baseline, candidate, overall.
    assert_eq!(verdicts(&r), ["within", "within", "over", "within", "within", "within"]);
    // c-1 (−2%) and c-2 (+6%) offset in the candidate arm; the report names c-2 anyway.
    assert_eq!(
        rec["largest_cost_discrepancy"],
        json!({"session": "c-2", "difference": 600, "reported": 10_000, "verdict": "over"})
    );
    // One micro more in c-1: the candidate arm and the whole run go just past 2%.
    record_ok(ws, &cost_usage("c-1", "candidate", 9_801));
    let (_, r) = report(ws);
    assert_eq!(r["reconciliation"]["arms"]["candidate"]["counters"]["cost_micros"]["difference"], 401);
    assert_eq!(r["reconciliation"]["overall"]["counters"]["cost_micros"]["difference"], 601);
    assert_eq!(verdicts(&r), ["within", "within", "over", "within", "over", "over"]);
    // A session without the provider's totals makes its scopes incomplete, never within.
    record_ok(ws, &cost_usage("b-2", "baseline", 5));
    let (_, r) = report(ws);
    let rec = &r["reconciliation"];
    assert_eq!(rec["sessions"]["b-2"]["verdict"], "incomplete");
    assert_eq!(rec["arms"]["baseline"]["verdict"], "incomplete");
    assert_eq!(rec["arms"]["baseline"]["counters"]["cost_micros"]["reported"], Value::Null);
    assert_eq!(rec["overall"]["verdict"], "incomplete");
    assert_eq!(rec["arms"]["candidate"]["verdict"], "over");
}

#[test]
fn the_report_is_byte_identical_across_runs_and_replays() {
    let tmp = workspace();
    let ws = tmp.path();
    record_ok(ws, &cost_usage("b-1", "baseline", 1_000));
    record_ok(ws, &cost_usage("b-1", "baseline", 3_500));
    record_ok(ws, &cost_session("b-1", 3_450));
    record_ok(ws, &usage("q-1", "estimated", counters(json!(7), json!(1), json!(2), json!(3), json!(11), json!(13))));
    let (first, _) = report(ws);
    let (second, _) = report(ws);
    assert_eq!(first, second);
    let replay: Value = serde_json::from_str(&strata_ok(BIN, ws, &["--json", "replay", "--save-snapshots"])).unwrap();
    let names: Vec<&str> =
        replay["projections"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"telemetry"), "{names:?}");
    let (after, _) = report(ws);
    assert_eq!(first, after);
    let check = strata(BIN, ws, &["replay", "--check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let text1 = strata_ok(BIN, ws, &["telemetry", "report"]);
    let text2 = strata_ok(BIN, ws, &["telemetry", "report"]);
    assert_eq!(text1, text2);
}

#[test]
fn counters_are_bounded_and_an_unknown_source_fixes_no_accounting_class() {
    let tmp = workspace();
    let ws = tmp.path();
    let n = Value::Null;
    let huge = counters(json!(u64::MAX), n.clone(), n.clone(), n.clone(), n.clone(), n.clone());
    let e = record_refused(ws, &usage("w-9", "provider-reported", huge), "STRATA-E1502");
    assert!(e.contains("input_tokens is above 1000000000000000"), "{e}");
    // Wall time first, with no billing known: `unknown` is no class yet.
    let wall_only = counters(n.clone(), n.clone(), n.clone(), n.clone(), n.clone(), json!(10));
    record_ok(ws, &usage("w-9", "unknown", wall_only));
    let billed = counters(json!(5), n.clone(), n.clone(), n.clone(), n.clone(), json!(20));
    record_ok(ws, &usage("w-9", "authoritative", billed));
    // Once billed, estimated figures never join the session.
    let estimated = counters(json!(9), n.clone(), n.clone(), n.clone(), n.clone(), json!(30));
    record_refused(ws, &usage("w-9", "estimated", estimated), "STRATA-E1506");
}

#[test]
fn the_example_records_an_efficiency_event_for_every_attempt_with_its_namespaces_apart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let at = tmp.path().join("example");
    let at_arg = at.display().to_string();
    let out = strata(strata_bin!(), tmp.path(), &["run", "--example", "--at", &at_arg, "--time-scale", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let audit: Value =
        serde_json::from_slice(&strata(strata_bin!(), &at, &["audit", "run", "cr-1-rollout", "--json"]).stdout)
            .expect("audit JSON");
    let attempts: u64 =
        audit["tasks"].as_array().expect("tasks").iter().map(|t| t["attempts"].as_u64().unwrap_or(0)).sum();
    let out = strata(strata_bin!(), &at, &["telemetry", "report", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let rollups = r["rollups"].as_array().expect("rollups");
    let efficiency: u64 = rollups.iter().map(|g| g["efficiency_events"].as_u64().unwrap_or(0)).sum();
    let invocations: u64 = rollups.iter().map(|g| g["invocations"].as_u64().unwrap_or(0)).sum();
    assert!(attempts > 0);
    assert_eq!(
        (efficiency, invocations),
        (attempts, attempts),
        "one efficiency event and one usage report per attempt"
    );
    for g in rollups.iter().filter(|g| g["efficiency_events"].as_u64() > Some(0)) {
        // Simulated figures are estimates: never billed, in either the usage or the efficiency rows.
        assert_eq!(g["billed"]["cost_micros"], serde_json::json!({}), "{g}");
        assert!(g["logical"]["prompt_bytes"]["known"].as_u64() > Some(0), "{g}");
        assert!(g["outcome"]["accepted"].as_u64().is_some(), "{g}");
    }
    // Simulated sessions report no totals of their own: nothing to reconcile, never "within".
    assert_eq!(r["reconciliation"]["overall"]["verdict"], "incomplete");
}
