//! `strata ce --journal`: state the reference trusts its caller for comes from the journal's
//! dispatch ledger, and every decision that changes it is recorded there. Engine tests drive
//! the Clock port by hand; process tests run the real binary on a real sled journal.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::ce::paths::{Workspace, overlaps};
use strata_engine::ce::time::parse_rfc3339;
use strata_engine::ce::wire::journaled;
use strata_engine::ce::{Code, Context};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::projection::Projection as _;
use strata_journal::{ExpectedVersion, Journal, StreamAppend};

const MINUTE: i64 = 60_000_000_000;

/// An in-memory journal, its ledger, and a clock the test moves.
struct Bench {
    journal: Journal,
    ledger: Ledger,
    ids: CountingIds,
    now: i64,
}

impl Bench {
    fn new(at: &str) -> Bench {
        Bench {
            journal: Journal::in_memory("strata.test/ce-journal").unwrap(),
            ledger: Ledger::default(),
            ids: CountingIds::new(1),
            now: i64::try_from(parse_rfc3339(at, "at").unwrap()).unwrap(),
        }
    }

    /// Runs `op`, appends its events and folds them; returns the result and the event types.
    fn run(&mut self, op: &str, payload: Value) -> Result<(Value, Vec<String>), Code> {
        let ctx = Context { now_ns: 0, workspace: Workspace::default(), warm_lease_minutes: 20 };
        let head = self.journal.head().seq;
        let d = journaled::run(op, &payload, &ctx, &self.ledger, &mut self.ids, &FixedClock(self.now))
            .map_err(|e| e.code)?;
        let types: Vec<String> = d.events.iter().map(|e| e.event_type.clone()).collect();
        if !d.events.is_empty() {
            let append = StreamAppend {
                stream: ledger::STREAM.to_owned(),
                expected: ExpectedVersion::Exact(self.ledger.version()),
                events: d.events,
            };
            self.journal.append_multi_blocking(vec![append]).unwrap().unwrap();
        }
        let ledger = &mut self.ledger;
        self.journal.scan(head + 1, self.journal.head().seq, |r, _| ledger.apply(r).map(|()| true)).unwrap().unwrap();
        Ok((d.result, types))
    }

    /// The payload of the last event of type `t`.
    fn last(&self, t: &str) -> Value {
        let mut found = Value::Null;
        self.journal
            .scan(1, self.journal.head().seq, |r, _| {
                if r.event_type == t {
                    found = serde_json::from_slice(r.payload).unwrap();
                }
                Ok::<bool, String>(true)
            })
            .unwrap()
            .unwrap();
        found
    }

    /// The ledger folded from scratch, for comparison with the incremental one.
    fn rebuilt(&self) -> Ledger {
        let mut fresh = Ledger::default();
        self.journal.scan(1, self.journal.head().seq, |r, _| fresh.apply(r).map(|()| true)).unwrap().unwrap();
        fresh
    }
}

fn record(id: &str, role: &str, lease: &str) -> Value {
    json!({
        "schema": "knowzcode.agent-lineage/v1", "lineage_id": id, "workgroup_id": "wg-1",
        "platform": "claude", "platform_handle": null, "parent_lineage_id": null, "role": role,
        "scope": "api", "phase": "2A", "fix_loop_id": null, "mode": "fresh-capsule", "model": "sonnet",
        "effort": null, "runtime_prefix_hash": format!("sha256:{}", "a".repeat(64)), "baseline_hash": null,
        "tools_hash": "tools-v1", "permissions_hash": "perm-v1", "spec_hash": "spec-v1", "scope_hash": "scope-v1",
        "checkpoint_sha": "abc1234", "capsule_hash": format!("sha256:{}", "b".repeat(64)), "sensitivity": "normal",
        "created_at": "2026-11-30T11:50:00Z", "last_used_at": "2026-11-30T11:55:00Z", "resumable": true,
        "lease_expires_at": lease
    })
}

fn current_for(lineage: &Value) -> Value {
    let mut c = serde_json::Map::new();
    for k in strata_engine::ce::lineage::CURRENT_KEYS {
        c.insert(k.to_owned(), lineage[k].clone());
    }
    Value::Object(c)
}

fn state_of(out: &Value) -> (&str, Vec<&str>) {
    let lineage = if out.get("lineage").is_some_and(Value::is_object) { &out["lineage"] } else { out };
    let inv = lineage["invalidations"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    (lineage["state"].as_str().unwrap(), inv)
}

#[test]
fn ceo_04_journal_leases_are_granted_renewed_and_expired_by_the_clock_not_the_caller() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    let t0 = b.now;
    // The caller asks for a lease to 2099; the ledger grants the warm-lease time.
    let rec = record("lin-1", "builder", "2099-01-01T00:00:00Z");
    let cur = current_for(&rec);
    let (out, types) = b.run("lineage", json!({"lineage": rec, "current": cur})).unwrap();
    assert_eq!(state_of(&out), ("HOT", vec![]));
    assert_eq!(types, [ledger::LINEAGE_RECORDED, ledger::LEASE_GRANTED]);
    assert_eq!(b.last(ledger::LEASE_GRANTED)["expires_at_ns"], json!(t0 + 20 * MINUTE));

    // A caller-supplied `now` would move the ledger's clock: refused, nothing appended.
    let head = b.journal.head().seq;
    let moved = b.run("lineage", json!({"lineage": rec, "current": cur, "now": "2026-11-30T12:01:00Z"}));
    assert_eq!(moved.map(|_| ()), Err(Code::InvalidRequest));
    assert_eq!(b.journal.head().seq, head);

    // Resuming it ten minutes later renews the lease to twenty minutes from then.
    b.now = t0 + 10 * MINUTE;
    let dispatch = |cur: &Value| {
        json!({
            "lineage_id": "unit-7",
            "routing": {"input": {"owned_files": ["src/a.rs"]}},
            "lineage": {"lineage": record("lin-1", "builder", "2099-01-01T00:00:00Z"), "current": cur},
            "rollout": {"input": {"rollout": "on"}},
        })
    };
    let (out, types) = b.run("dispatch", dispatch(&cur)).unwrap();
    assert_eq!(
        (out["routing"]["mode"].as_str(), out["rollout"]["selected_mode"].as_str()),
        (Some("resume"), Some("resume"))
    );
    assert_eq!(types, [ledger::ROUTE_DECIDED, ledger::CLAIMED, ledger::LEASE_RENEWED]);
    assert_eq!(b.last(ledger::LEASE_RENEWED)["expires_at_ns"], json!(t0 + 30 * MINUTE));
    assert_eq!(b.ledger.owners()["unit-7"].mode.as_deref(), Some("resume"));

    // Still warm at +29 (it would have been cold at +20 without the renewal).
    b.now = t0 + 29 * MINUTE;
    let (out, types) = b.run("lineage", json!({"lineage_id": "lin-1", "current": cur})).unwrap();
    assert_eq!(state_of(&out), ("HOT", vec![]));
    assert!(types.is_empty(), "an evaluation that changes nothing records nothing: {types:?}");

    // At +30 the clock passes the lease: recorded as expired first, then the lineage is cold
    // even though the caller's record still promises 2099.
    b.now = t0 + 30 * MINUTE;
    let (out, types) = b
        .run("lineage", json!({"lineage": record("lin-1", "builder", "2099-01-01T00:00:00Z"), "current": cur}))
        .unwrap();
    assert_eq!(state_of(&out), ("COLD_VALID", vec![]));
    assert_eq!(types, [ledger::LEASE_EXPIRED]);
    assert!(b.ledger.leases().is_empty());
    // And a cold lineage is not resumed by dispatch.
    let (out, types) = b.run("dispatch", dispatch(&cur)).unwrap();
    assert_eq!(out["routing"]["mode"], "fresh-capsule");
    assert_eq!(types, [ledger::ROUTE_DECIDED, ledger::CLAIMED], "the claim moves to fresh-capsule; no renewal");

    assert_eq!(b.rebuilt(), b.ledger, "the ledger rebuilt from scratch equals the incremental one");
}

#[test]
fn ceo_04_journal_records_each_invalid_lineage_with_its_codes() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    let rec = record("lin-1", "builder", "2026-11-30T12:10:00Z");
    let mut cur = current_for(&rec);
    b.run("lineage", json!({"lineage": rec, "current": cur})).unwrap();
    cur["spec_hash"] = json!("spec-v2");
    cur["model"] = json!("opus");
    let (out, types) = b.run("lineage", json!({"lineage_id": "lin-1", "current": cur})).unwrap();
    assert_eq!(state_of(&out), ("INVALID", vec!["SPEC_MISMATCH", "MODEL_MISMATCH"]));
    assert_eq!(types, [ledger::LINEAGE_INVALIDATED]);
    assert_eq!(
        b.last(ledger::LINEAGE_INVALIDATED),
        json!({"lineage_id": "lin-1", "codes": ["SPEC_MISMATCH", "MODEL_MISMATCH"]})
    );
    // A future-dated record is unknown provenance and is not kept.
    let mut future = record("lin-2", "builder", "2026-11-30T12:10:00Z");
    future["created_at"] = json!("2026-11-30T13:00:00Z");
    future["last_used_at"] = json!("2026-11-30T13:00:00Z");
    let (out, types) = b.run("lineage", json!({"lineage": future, "current": current_for(&future)})).unwrap();
    assert_eq!(state_of(&out), ("INVALID", vec!["UNKNOWN_PROVENANCE"]));
    assert!(types.is_empty() && !b.ledger.lineages().contains_key("lin-2"), "{types:?}");
    // An unknown lineage has no record to invalidate: unknown provenance, nothing recorded.
    let (out, types) = b.run("lineage", json!({"lineage_id": "lin-9", "current": cur})).unwrap();
    assert_eq!(state_of(&out), ("INVALID", vec!["UNKNOWN_PROVENANCE"]));
    assert!(types.is_empty());
}

#[test]
fn ceo_21_journal_inherited_writers_and_warmth_come_from_the_ledger() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    for id in ["lin-a", "lin-b", "lin-c"] {
        let rec = record(id, "builder", "2026-11-30T12:15:00Z");
        b.run("lineage", json!({"lineage": rec, "current": current_for(&rec)})).unwrap();
    }
    let route = |unit: &str, lineage: &str, file: &str| {
        json!({
            "lineage_id": unit,
            "input": {
                "owned_files": [file],
                "lineage": {"lineage_id": lineage, "compatible": true, "resumable": true, "role": "builder"},
                "active_inherited_writers": 0,
                "active_writers": [],
            }
        })
    };
    let mode = |out: &Value| (out["mode"].as_str().unwrap().to_owned(), out["reason_codes"].clone());
    let (out, _) = b.run("route", route("u1", "lin-a", "src/a.rs")).unwrap();
    assert_eq!(mode(&out), ("resume".to_owned(), json!(["RESUME_COMPATIBLE"])));
    let (out, _) = b.run("route", route("u2", "lin-b", "src/b.rs")).unwrap();
    assert_eq!(mode(&out).0, "resume");
    // Two resumed writers hold the default cap of two; the caller's count of 0 is replaced.
    let (out, _) = b.run("route", route("u3", "lin-c", "src/c.rs")).unwrap();
    assert_ne!(mode(&out).0, "resume", "the third resumed writer is over the cap: {out}");
    assert_eq!(b.last(ledger::ROUTE_DECIDED)["active_inherited_writers"], json!(2));
    // The caller's compatibility claim for a lineage without a live lease is not believed.
    let (out, _) = b.run("route", route("u4", "lin-unknown", "docs/x.md")).unwrap();
    assert_ne!(mode(&out).0, "resume");
    // Releasing one frees a place.
    let (out, types) = b.run("release", json!({"lineage_id": "u1"})).unwrap();
    assert_eq!((out["released"].as_bool(), types.as_slice()), (Some(true), [ledger::RELEASED.to_owned()].as_slice()));
    let (out, _) = b.run("route", route("u3", "lin-c", "src/c.rs")).unwrap();
    assert_eq!(mode(&out).0, "resume");
    // The caller cannot hide an owner: an overlapping claim loses whatever active_writers says.
    let (out, types) = b.run("route", route("u5", "lin-x", "src")).unwrap();
    assert_eq!(mode(&out), ("local".to_owned(), json!(["WRITER_OWNERSHIP_CONFLICT"])));
    assert_eq!(types, [ledger::ROUTE_DECIDED, ledger::CONFLICT]);
    assert_eq!(b.rebuilt(), b.ledger);
}

#[test]
fn ceo_11_journal_vault_deltas_deduplicate_and_amend_against_the_ledger() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    let delta = |content: &str| json!({"input": {"delta": {"category": "pattern", "title": "Retry policy", "content": content, "semantic_key": "retry-policy"}}});
    let (out, types) = b.run("vault-delta", delta("Retry three times with jitter.")).unwrap();
    assert_eq!((out["action"].as_str(), out["reason"].as_str()), (Some("batch"), Some("NORMAL_DELTA")));
    let id = out["KnowledgeId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("kn-"), "{id}");
    assert_eq!(types, [ledger::VAULT_DELTA_APPLIED]);
    // The same capture again is a duplicate though the caller passes no previous deltas.
    let (out, types) = b.run("vault-delta", delta("Retry three times with jitter.")).unwrap();
    assert_eq!(out, json!({"action": "skip", "reason": "SEMANTIC_DUPLICATE"}));
    assert!(types.is_empty(), "a skip writes nothing");
    // Changed content under the same key amends the ledger's record, under its id; previous
    // deltas the caller asserts are not read.
    let mut changed = delta("Retry five times with jitter.");
    changed["input"]["previous_deltas"] = json!([{"semantic_key": "retry-policy", "KnowledgeId": "forged"}]);
    let (out, _) = b.run("vault-delta", changed).unwrap();
    assert_eq!(out, json!({"action": "amend", "reason": "SEMANTIC_IDENTITY_CHANGED", "KnowledgeId": id}));
    assert_eq!(b.ledger.vault().len(), 1);
    assert_eq!(b.ledger.vault()[&id]["content"], "Retry five times with jitter.");
    // The old content is no longer the record, so it amends again rather than being skipped.
    let (out, _) = b.run("vault-delta", delta("Retry three times with jitter.")).unwrap();
    assert_eq!(out["action"], "amend");
    assert_eq!(b.rebuilt(), b.ledger);
}

#[test]
fn ceo_03_journal_records_each_sealed_capsule_with_its_hash_and_size() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    let draft: Value = serde_json::from_str(include_str!("../fixtures/ce/capsule-draft.json")).unwrap();
    let (sealed, types) = b.run("capsule", json!({"capsule": draft})).unwrap();
    assert_eq!(types, [ledger::CAPSULE_SEALED]);
    let e = b.last(ledger::CAPSULE_SEALED);
    assert_eq!(e["capsule_hash"], sealed["capsule_hash"]);
    let canonical = strata_engine::ce::json::to_string(&sealed);
    assert!(e["bytes"].as_u64().unwrap() > 0 && e["bytes"].as_u64().unwrap() <= canonical.len() as u64);
    assert_eq!(e["externalized"], json!([]));
    assert_eq!(b.ledger.capsules_sealed(), 1);
}

#[test]
fn journal_rejections_append_nothing_for_every_operation() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    let cases = [
        ("route", json!({"input": {"owned_files": ["src"]}}), Code::InvalidRequest),
        ("route", json!({"lineage_id": "u", "input": {"owned_files": ["/etc"]}}), Code::InvalidOwnershipPath),
        ("route", json!({"lineage_id": "", "input": {}}), Code::InvalidFact),
        ("dispatch", json!({"routing": {"input": {}}, "rollout": {"input": {}}}), Code::InvalidRequest),
        ("lineage", json!({"current": "x"}), Code::InvalidRequest),
        ("lineage", json!({"current": {}, "lineage_id": 7}), Code::InvalidFact),
        ("capsule", json!({"capsule": {"schema": "x"}}), Code::CapsuleSchemaInvalid),
        ("vault-delta", json!({"input": {"severity": "urgent", "delta": {"title": "x"}}}), Code::InvalidSeverity),
        ("release", json!({}), Code::InvalidRequest),
        ("telemetry", json!({"event": {}}), Code::EfficiencyEventInvalid),
        ("rollout", json!({"input": {"rollout": "sometimes"}}), Code::InvalidRollout),
        ("result-policy", json!({"input": {"requested_mode": "forever"}}), Code::InvalidResultMode),
    ];
    for (op, payload, code) in cases {
        let got = b.run(op, payload.clone()).map(|_| ());
        assert_eq!(got, Err(code), "{op} {payload}");
        assert_eq!(b.journal.head().seq, 0, "{op}: nothing appended");
    }
}

#[test]
fn ceo_06_journal_symlink_facts_are_recorded_and_used_without_the_filesystem() {
    let mut b = Bench::new("2026-11-30T12:00:00Z");
    // The first request states the link; it is recorded before the claim it canonicalises.
    let first = json!({
        "lineage_id": "u1",
        "workspace": {"links": {"vendor/lib": "third_party/lib"}},
        "input": {"owned_files": ["vendor/lib/x.rs"]},
    });
    let (out, types) = b.run("route", first).unwrap();
    assert_eq!(out["mode"], "fresh-capsule");
    assert_eq!(types, [ledger::WORKSPACE_FACTS, ledger::ROUTE_DECIDED, ledger::CLAIMED]);
    assert_eq!(b.ledger.owners()["u1"].paths, ["third_party/lib/x.rs"]);
    // Later requests need not repeat it: the alias still conflicts.
    let (out, types) =
        b.run("route", json!({"lineage_id": "u2", "input": {"owned_files": ["third_party/lib"]}})).unwrap();
    assert_eq!(out["reason_codes"], json!(["WRITER_OWNERSHIP_CONFLICT"]));
    assert_eq!(types, [ledger::ROUTE_DECIDED, ledger::CONFLICT]);
    // Facts cannot change under live claims (they would re-canonicalise what is owned).
    let change = json!({"lineage_id": "u3", "workspace": {"case_sensitive": true}, "input": {"owned_files": ["docs"]}});
    assert_eq!(b.run("route", change.clone()).map(|_| ()), Err(Code::InvalidFact));
    b.run("release", json!({"lineage_id": "u1"})).unwrap();
    let (_, types) = b.run("route", change).unwrap();
    assert_eq!(types[0], ledger::WORKSPACE_FACTS);
    assert!(b.ledger.workspace().case_sensitive);
    assert_eq!(b.ledger.workspace().links.len(), 1, "earlier links are kept");
    assert_eq!(b.rebuilt(), b.ledger);
}

// ---- the binary on a real sled journal ----

fn catch_up(j: &Journal) -> Ledger {
    let mut l = Ledger::default();
    j.scan(1, j.head().seq, |r, _| l.apply(r).map(|()| true)).unwrap().unwrap();
    l
}

#[test]
fn ceo_19_a_consumed_measurement_run_is_refused_after_reopening_and_under_a_race() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let run = format!("measurement-{}", "ab".repeat(8));
    let digest = format!("sha256:{}", "c".repeat(64));
    let append = |j: &Journal, l: &Ledger, e| {
        j.append_multi_blocking(vec![StreamAppend {
            stream: ledger::STREAM.to_owned(),
            expected: ExpectedVersion::Exact(l.version()),
            events: vec![e],
        }])
        .unwrap()
    };
    let mut ids = CountingIds::new(1);
    {
        let j = strata_tests::create_journal(&dir, strata_journal::Durability::Power);
        // Two deciders read the same ledger; both may consume, only the first append lands.
        let l = catch_up(&j);
        let a = ledger::consume_run(&l, &run, &digest, &mut ids, &FixedClock(1)).unwrap();
        let b = ledger::consume_run(&l, &run, &digest, &mut ids, &FixedClock(1)).unwrap();
        assert!(append(&j, &l, a).is_ok());
        assert!(append(&j, &l, b).is_err(), "the second consumption conflicts on the ledger version");
        let again = ledger::consume_run(&catch_up(&j), &run, &digest, &mut ids, &FixedClock(2));
        assert_eq!(again.map(|_| ()).map_err(|e| e.code), Err(Code::MeasurementRunReplayed));
        j.close_blocking().unwrap();
    }
    // Another opener (as another process would) sees it consumed.
    let j = Journal::open(&dir, &strata_tests::options(strata_journal::Durability::Power)).unwrap();
    let l = catch_up(&j);
    assert_eq!(l.consumed_runs().len(), 1);
    let again = ledger::consume_run(&l, &run, &digest, &mut ids, &FixedClock(3));
    assert_eq!(again.map(|_| ()).map_err(|e| e.code), Err(Code::MeasurementRunReplayed));
    let bad = ledger::consume_run(&l, "measurement-XYZ", &digest, &mut ids, &FixedClock(3));
    assert_eq!(bad.map(|_| ()).map_err(|e| e.code), Err(Code::InvalidRequest));
    j.close_blocking().unwrap();
}

fn ce(dir: &Path, op: &str, journal: &Path, request: &Value) -> (i32, Value) {
    let mut child = Command::new(strata_tests::strata_bin!())
        .current_dir(dir)
        .args(["ce", op, "--journal"])
        .arg(journal)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one line: {stdout:?}");
    (out.status.code().unwrap_or(-1), serde_json::from_str(stdout.trim()).unwrap())
}

fn event_types(journal: &Path) -> Vec<String> {
    let j = Journal::open(journal, &strata_tests::options(strata_journal::Durability::Process)).unwrap();
    let mut types = Vec::new();
    j.scan(1, j.head().seq, |r, _| {
        types.push(r.event_type.to_owned());
        Ok::<bool, String>(true)
    })
    .unwrap()
    .unwrap();
    j.close_blocking().unwrap();
    types
}

#[test]
fn ceo_06_concurrent_ce_processes_on_one_journal_never_share_a_path() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = tmp.path().join("journal");
    // Six processes at once claim overlapping paths; the journal lock serialises them. Which
    // wins depends on the order, but "src" twice and "src/a.rs" twice mean at least three lose.
    let files = ["src", "src/a.rs", "src/a.rs", "src/b", "src/b/c.rs", "src"];
    let handles: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (dir, journal) = (tmp.path().to_owned(), journal.clone());
            let req = json!({"lineage_id": format!("unit-{i}"), "input": {"owned_files": [f], "active_writers": []}});
            std::thread::spawn(move || ce(&dir, "route", &journal, &req))
        })
        .collect();
    let outs: Vec<(i32, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let (mut won, mut lost) = (Vec::new(), Vec::new());
    for ((code, out), file) in outs.iter().zip(files) {
        assert_eq!((*code, &out["ok"]), (0, &json!(true)), "{out}");
        if out["result"]["mode"] == "local" {
            assert_eq!(out["result"]["reason_codes"], json!(["WRITER_OWNERSHIP_CONFLICT"]));
            lost.push(file);
        } else {
            won.push(file);
        }
    }
    // Winners own disjoint paths; every loser overlaps a winner.
    for (i, a) in won.iter().enumerate() {
        assert!(won[i + 1..].iter().all(|b| !overlaps(a, b)), "{won:?}");
    }
    assert!(lost.iter().all(|l| won.iter().any(|w| overlaps(l, w))), "won {won:?} lost {lost:?}");
    assert!(!won.is_empty() && lost.len() >= 3, "won {won:?} lost {lost:?}");
    let types = event_types(&journal);
    assert_eq!(types.iter().filter(|t| *t == ledger::ROUTE_DECIDED).count(), 6);
    assert_eq!(types.iter().filter(|t| *t == ledger::CLAIMED).count(), won.len());
    assert_eq!(types.iter().filter(|t| *t == ledger::CONFLICT).count(), lost.len());
}

#[test]
fn journal_mode_on_the_command_line_records_and_refuses_like_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let journal = tmp.path().join("j");
    let claim = |unit: &str| json!({"lineage_id": unit, "input": {"owned_files": ["docs"]}});
    let (code, out) = ce(tmp.path(), "route", &journal, &claim("u1"));
    assert_eq!((code, out["result"]["mode"].as_str()), (0, Some("fresh-capsule")));
    let (_, out) = ce(tmp.path(), "route", &journal, &claim("u2"));
    assert_eq!(out["result"]["mode"], "local");
    // A rejection: the documented code, one line, exit 1, nothing appended.
    let before = event_types(&journal);
    let (code, out) = ce(tmp.path(), "route", &journal, &json!({"input": {"owned_files": ["docs"]}}));
    assert_eq!((code, out["code"].as_str()), (1, Some("INVALID_REQUEST")));
    assert_eq!(event_types(&journal), before);
    let (code, out) = ce(tmp.path(), "release", &journal, &json!({"lineage_id": "u1"}));
    assert_eq!((code, &out["result"]), (0, &json!({"lineage_id": "u1", "released": true})));
    let (_, out) = ce(tmp.path(), "route", &journal, &claim("u2"));
    assert_eq!(out["result"]["mode"], "fresh-capsule");
    // Without --journal, `release` is not an operation.
    let mut child = Command::new(strata_tests::strata_bin!())
        .args(["ce", "release"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"{}").unwrap();
    let out = child.wait_with_output().unwrap();
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["code"], "UNSUPPORTED_OPERATION");
}
