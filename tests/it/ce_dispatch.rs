//! Context-efficient dispatch: the router, lineage compatibility, result policy, rollout and
//! combined dispatch (engine), each VERIFY criterion of the seed named in a test.

use serde_json::{Value, json};
use strata_engine::ce::paths::Workspace;
use strata_engine::ce::router::{Mode, Reason, RouteFacts, route};
use strata_engine::ce::{Code, Context, run};

const NOW: &str = "2026-11-30T12:00:00Z";

fn ctx() -> Context {
    Context {
        now_ns: strata_engine::ce::time::parse_rfc3339(NOW, "now").unwrap(),
        workspace: Workspace::default(),
        warm_lease_minutes: 20,
    }
}

/// `route` on `input`: (mode, reasons) or the rejection code.
fn r(input: Value) -> Result<(String, Vec<String>), Code> {
    let out = run("route", &json!({ "input": input }), &ctx()).map_err(|e| e.code)?;
    let mode = out["mode"].as_str().unwrap().to_owned();
    let reasons = out["reason_codes"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect();
    Ok((mode, reasons))
}

fn ok(mode: &str, reasons: &[&str]) -> Result<(String, Vec<String>), Code> {
    Ok((mode.to_owned(), reasons.iter().map(|s| (*s).to_owned()).collect()))
}

fn lineage_record() -> Value {
    json!({
        "schema": "knowzcode.agent-lineage/v1", "lineage_id": "lin-1", "workgroup_id": "wg-1",
        "platform": "claude", "platform_handle": null, "parent_lineage_id": null, "role": "builder",
        "scope": "api", "phase": "2A", "fix_loop_id": null, "mode": "fresh-capsule", "model": "sonnet",
        "effort": null, "runtime_prefix_hash": format!("sha256:{}", "a".repeat(64)), "baseline_hash": null,
        "tools_hash": "tools-v1", "permissions_hash": "perm-v1", "spec_hash": "spec-v1", "scope_hash": "scope-v1",
        "checkpoint_sha": "abc1234", "capsule_hash": format!("sha256:{}", "b".repeat(64)), "sensitivity": "normal",
        "created_at": "2026-11-30T11:50:00Z", "last_used_at": "2026-11-30T11:55:00Z", "resumable": true,
        "lease_expires_at": "2026-11-30T12:10:00Z"
    })
}

fn current_for(lineage: &Value) -> Value {
    let mut c = serde_json::Map::new();
    for k in strata_engine::ce::lineage::CURRENT_KEYS {
        c.insert(k.to_owned(), lineage[k].clone());
    }
    Value::Object(c)
}

fn lineage(l: Value, c: Value) -> Result<(String, Vec<String>), Code> {
    let out = run("lineage", &json!({"lineage": l, "current": c, "now": NOW}), &ctx()).map_err(|e| e.code)?;
    let inv = out["invalidations"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect();
    Ok((out["state"].as_str().unwrap().to_owned(), inv))
}

#[test]
fn ceo_01_every_unit_resolves_one_mode_and_reason() {
    for input in [
        json!({}),
        json!({"trivial": true}),
        json!({"inheritance": {"affinity": "high"}}),
        json!({"team": {"coordination_required": true, "peers": 3}}),
        json!({"sensitivity": "isolated"}),
    ] {
        let (mode, reasons) = r(input.clone()).unwrap();
        assert!(Mode::parse(&mode).is_some(), "{input}");
        assert!(!reasons.is_empty(), "{input}: every decision carries a reason code");
    }
    // Wanted inheritance the provider cannot give is recorded as a fallback, never faked.
    assert_eq!(
        r(json!({"inheritance": {"affinity": "high"}})),
        ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"])
    );
}

#[test]
fn ceo_02_local_then_compatible_resume_before_new_workers() {
    assert_eq!(
        r(
            json!({"trivial": true, "inheritance": {"affinity": "high", "safe": true, "within_budget": true, "full_supported": true}})
        ),
        ok("local", &["LOCAL_CHEAPER"])
    );
    assert_eq!(r(json!({"coupling": "tight"})), ok("local", &["LOCAL_CHEAPER"]));
    assert_eq!(r(json!({"blocking": true, "trivial": true})), ok("local", &["LOCAL_CHEAPER", "BLOCKING"]));
    assert_eq!(r(json!({"coupling": "moderate"})), ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]));
    let resume = json!({"lineage": {"compatible": true, "resumable": true, "role": "analyst"},
        "inheritance": {"affinity": "high", "safe": true, "within_budget": true, "full_supported": true}});
    assert_eq!(r(resume), ok("resume", &["RESUME_COMPATIBLE"]));
    let inherit = json!({"inheritance": {"affinity": "high", "safe": true, "within_budget": true, "full_supported": true, "recent_supported": true, "recent_sufficient": true}});
    assert_eq!(r(inherit), ok("inherit-recent", &["BOUNDED_RECENT_CONTEXT"]), "recent is preferred over full");
    let full =
        json!({"inheritance": {"affinity": "high", "safe": true, "within_budget": true, "full_supported": true}});
    assert_eq!(r(full), ok("inherit-full", &["HIGH_CONTEXT_AFFINITY"]));
}

#[test]
fn ceo_04_lineage_invalidates_on_every_dimension_and_a_changed_capsule_needs_reconciliation() {
    let l = lineage_record();
    assert_eq!(lineage(l.clone(), current_for(&l)), Ok(("HOT".to_owned(), vec![])));
    let dims = [
        ("platform", json!("codex"), "PLATFORM_MISMATCH"),
        ("workgroup_id", json!("wg-2"), "WORKGROUP_MISMATCH"),
        ("role", json!("tester"), "ROLE_MISMATCH"),
        ("phase", json!("3"), "PHASE_MISMATCH"),
        ("fix_loop_id", json!("loop-2"), "FIX_LOOP_MISMATCH"),
        ("spec_hash", json!("spec-v2"), "SPEC_MISMATCH"),
        ("scope_hash", json!("scope-v2"), "SCOPE_MISMATCH"),
        ("checkpoint_sha", json!("def5678"), "CHECKPOINT_MISMATCH"),
        ("model", json!("opus"), "MODEL_MISMATCH"),
        ("effort", json!("high"), "EFFORT_MISMATCH"),
        ("runtime_prefix_hash", json!(format!("sha256:{}", "c".repeat(64))), "RUNTIME_PREFIX_MISMATCH"),
        ("baseline_hash", json!(format!("sha256:{}", "d".repeat(64))), "BASELINE_MISMATCH"),
        ("tools_hash", json!("tools-v2"), "TOOLS_MISMATCH"),
        ("permissions_hash", json!("perm-v2"), "PERMISSIONS_MISMATCH"),
        ("sensitivity", json!("restricted"), "SENSITIVITY_MISMATCH"),
    ];
    let mut all = current_for(&l);
    for (k, v, code) in &dims {
        let mut c = current_for(&l);
        c[*k] = v.clone();
        all[*k] = v.clone();
        assert_eq!(lineage(l.clone(), c), Ok(("INVALID".to_owned(), vec![(*code).to_owned()])), "{k}");
    }
    // Every mismatch at once is reported, in the canonical order.
    let (state, inv) = lineage(l.clone(), all).unwrap();
    assert_eq!(state, "INVALID");
    assert_eq!(inv, dims.iter().map(|d| d.2.to_owned()).collect::<Vec<_>>());
    let mut c = current_for(&l);
    c["capsule_hash"] = json!(format!("sha256:{}", "e".repeat(64)));
    assert_eq!(
        lineage(l.clone(), c),
        Ok(("RECONCILE_REQUIRED".to_owned(), vec!["RECONCILIATION_REQUIRED".to_owned()]))
    );
    let mut non = l.clone();
    non["resumable"] = json!(false);
    assert_eq!(lineage(non, current_for(&l)), Ok(("INVALID".to_owned(), vec!["NON_RESUMABLE".to_owned()])));
    let mut c = current_for(&l);
    c.as_object_mut().unwrap().remove("tools_hash");
    assert_eq!(lineage(l.clone(), c), Ok(("INVALID".to_owned(), vec!["UNKNOWN_PROVENANCE".to_owned()])));
    assert_eq!(
        lineage(json!({"schema": "other"}), current_for(&l)),
        Ok(("INVALID".to_owned(), vec!["UNKNOWN_PROVENANCE".to_owned()]))
    );
}

#[test]
fn ceo_04_leases_are_bounded_by_the_warm_lease_time_and_future_records_are_unknown() {
    let l = lineage_record();
    // The record promises a lease until 2099; strata holds it to last_used_at + 20 minutes.
    let mut long = l.clone();
    long["lease_expires_at"] = json!("2099-01-01T00:00:00Z");
    long["created_at"] = json!("2026-11-30T11:00:00Z");
    long["last_used_at"] = json!("2026-11-30T11:30:00Z");
    assert_eq!(lineage(long, current_for(&l)), Ok(("COLD_VALID".to_owned(), vec![])));
    let mut fresh = l.clone();
    fresh["lease_expires_at"] = json!("2099-01-01T00:00:00Z");
    assert_eq!(lineage(fresh, current_for(&l)), Ok(("HOT".to_owned(), vec![])), "used 5 minutes ago: still warm");
    let mut expired = l.clone();
    expired["lease_expires_at"] = json!(NOW);
    assert_eq!(lineage(expired, current_for(&l)), Ok(("COLD_VALID".to_owned(), vec![])), "now ≥ expiry is cold");
    let mut null_lease = l.clone();
    null_lease["lease_expires_at"] = Value::Null;
    assert_eq!(lineage(null_lease, current_for(&l)), Ok(("COLD_VALID".to_owned(), vec![])));
    let mut future = l.clone();
    future["created_at"] = json!("2027-01-01T00:00:00Z");
    future["last_used_at"] = json!("2027-01-01T00:00:00Z");
    assert_eq!(lineage(future, current_for(&l)), Ok(("INVALID".to_owned(), vec!["UNKNOWN_PROVENANCE".to_owned()])));
    let mut done = current_for(&l);
    done["scope_complete"] = json!(true);
    assert_eq!(lineage(l.clone(), done), Ok(("COLD_VALID".to_owned(), vec![])));
    let mut gate = current_for(&l);
    gate["final_gate"] = json!(true);
    assert_eq!(lineage(l.clone(), gate), Ok(("INVALID".to_owned(), vec!["FINAL_GATE".to_owned()])));
}

#[test]
fn ceo_05_an_independent_reviewer_never_reuses_the_builder_lineage() {
    let l = lineage_record();
    let mut c = current_for(&l);
    c["independent_reviewer"] = json!(true);
    let (state, inv) = lineage(l.clone(), c).unwrap();
    assert_eq!((state.as_str(), inv.first().map(String::as_str)), ("INVALID", Some("REVIEW_LINEAGE_CONTAMINATION")));
    // Any writer role counts, not only the literal "builder".
    let mut w = l.clone();
    w["role"] = json!("code-writer");
    let mut c = current_for(&w);
    c["independent_reviewer"] = json!(true);
    assert_eq!(lineage(w, c).unwrap().1, vec!["REVIEW_LINEAGE_CONTAMINATION".to_owned()]);
    // The router isolates a reviewer ahead of any reuse.
    let reviewer = json!({"role": "reviewer", "independent_reviewer": true, "lineage": {"compatible": true, "resumable": true, "role": "builder"}});
    assert_eq!(r(reviewer), ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "REVIEW_INDEPENDENCE"]));
    // A plain reviewer cannot resume a writer lineage either (any writer role).
    for role in ["builder", "implementer_2", "code-writer"] {
        let plain = json!({"role": "reviewer", "lineage": {"compatible": true, "resumable": true, "role": role}});
        assert_eq!(r(plain), ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]), "{role}");
    }
    let contaminated = json!({"lineage": {"compatible": true, "resumable": true, "role": "builder-contaminated"}, "owned_files": ["a"]});
    assert_eq!(r(contaminated), ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]));
}

#[test]
fn ceo_06_two_inherited_writers_nesting_two_and_global_zero_overlap() {
    let writer = |n: u64| {
        json!({"owned_files": ["src/a.rs"], "active_inherited_writers": n,
        "lineage": {"compatible": true, "resumable": true, "role": "builder"}})
    };
    assert_eq!(r(writer(1)), ok("resume", &["RESUME_COMPATIBLE"]));
    assert_eq!(
        r(writer(2)),
        ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"]),
        "the default cap is two"
    );
    // The cap applies to writers only.
    let reader =
        json!({"active_inherited_writers": 5, "lineage": {"compatible": true, "resumable": true, "role": "analyst"}});
    assert_eq!(r(reader), ok("resume", &["RESUME_COMPATIBLE"]));
    assert_eq!(r(json!({"nesting_depth": 2})), ok("local", &["NESTING_LIMIT"]));
    assert_eq!(
        r(json!({"nesting_depth": 2, "team": {"coordination_required": true, "peers": 2}})),
        ok("local", &["NESTING_LIMIT"])
    );
    assert_eq!(r(json!({"nesting_depth": 1})), ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]));
    assert_eq!(r(json!({"nesting_depth": 3, "max_nesting_depth": 4})), ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]));
    // Zero overlap across every kind of active writer, by containment and by alias.
    let conflict = ok("local", &["WRITER_OWNERSHIP_CONFLICT"]);
    assert_eq!(r(json!({"owned_files": ["src/api/x.rs"], "active_writers": [{"owned_files": ["src/api"]}]})), conflict);
    assert_eq!(
        r(json!({"owned_files": ["SRC\\API"], "active_writers": [{"resolved_owned_files": ["src/api/x.rs"]}]})),
        conflict
    );
    assert_eq!(
        r(json!({"owned_files": ["src/ap"], "active_writers": [{"owned_files": ["src/api"]}]})),
        ok("fresh-capsule", &["INDEPENDENT_CAPSULE"])
    );
    // A matching lineage id is no exemption.
    assert_eq!(
        r(
            json!({"owned_files": ["a"], "lineage": {"lineage_id": "L"}, "active_writers": [{"owned_files": ["a"], "lineage_id": "L"}]})
        ),
        conflict
    );
    // Resolved paths count toward the cap (CEO-21) and into the overlap check.
    let resolved = json!({"resolved_owned_files": ["x"], "active_inherited_writers": 2, "lineage": {"compatible": true, "resumable": true}});
    assert_eq!(r(resolved), ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"]));
}

#[test]
fn ceo_06_symlink_facts_make_aliases_overlap_without_reading_the_filesystem() {
    let req = |links: Value| {
        let p = json!({"workspace": {"links": links}, "input": {"owned_files": ["vendor/lib/x.rs"], "active_writers": [{"owned_files": ["third_party/lib"]}]}});
        run("route", &p, &ctx()).map(|v| v["mode"].clone()).map_err(|e| e.code)
    };
    assert_eq!(req(json!({})), Ok(json!("fresh-capsule")));
    assert_eq!(req(json!({"vendor/lib": "third_party/lib"})), Ok(json!("local")));
    assert_eq!(req(json!({"vendor": null})), Err(Code::InvalidOwnershipPath), "a link out of the workspace");
}

#[test]
fn ceo_07_unsupported_provider_modes_degrade_to_a_capsule() {
    let no_fork =
        json!({"inheritance": {"affinity": "high", "safe": true, "within_budget": true, "full_supported": false}});
    assert_eq!(r(no_fork), ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"]));
    let no_team = json!({"sensitivity": "normal", "capsule_sufficient": false, "team": {"coordination_required": true, "peers": 3, "provider_supported": false,
        "safe": true, "sensitivity_approved": true, "within_budget": true, "latency_ratio": 0.5, "scopes": [{"owned_files": ["a"]}, {"owned_files": ["b"]}]}});
    assert_eq!(r(no_team), ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"]));
    let recent_only = json!({"inheritance": {"affinity": "high", "safe": true, "within_budget": true, "recent_supported": false, "recent_sufficient": true}});
    assert_eq!(r(recent_only), ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"]));
}

fn team(overrides: Value) -> Value {
    let mut t = json!({"coordination_required": true, "peers": 2, "provider_supported": true, "safe": true,
        "sensitivity_approved": true, "within_budget": true, "latency_ratio": 0.5,
        "scopes": [{"owned_files": ["web"]}, {"owned_files": ["api"]}]});
    for (k, v) in overrides.as_object().unwrap() {
        t[k] = v.clone();
    }
    json!({"sensitivity": "normal", "capsule_sufficient": false, "team": t})
}

#[test]
fn ceo_16_teams_need_explicit_safety_closed_sensitivity_budget_and_disjoint_writer_scopes() {
    assert_eq!(r(team(json!({}))), ok("coordinated-team", &["TEAM_COORDINATION_REQUIRED"]));
    let fallback = ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "CAPABILITY_FALLBACK"]);
    for missing in ["safe", "sensitivity_approved", "within_budget", "provider_supported"] {
        let mut t = team(json!({}));
        t["team"].as_object_mut().unwrap().remove(missing);
        assert_eq!(r(t), fallback, "{missing} absent never authorises");
    }
    assert_eq!(r(team(json!({"latency_ratio": 0.75}))), ok("coordinated-team", &["TEAM_COORDINATION_REQUIRED"]));
    assert_eq!(r(team(json!({"latency_ratio": 0.76}))), fallback);
    assert_eq!(
        r(team(json!({"peers": 1}))),
        ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]),
        "one peer is no team request"
    );
    let mut unclassified = team(json!({}));
    unclassified.as_object_mut().unwrap().remove("sensitivity");
    assert_eq!(r(unclassified), fallback);
    // Overlap between team scopes, with every other fact satisfied.
    assert_eq!(r(team(json!({"scopes": [{"owned_files": ["src"]}, {"owned_files": ["src/api"]}]}))), fallback);
    // A team with no writer scope is not a compatible team.
    assert_eq!(r(team(json!({"scopes": []}))), fallback);
    // A writer scope without paths is refused; a read-only scope needs none.
    assert_eq!(
        r(team(json!({"scopes": [{"owned_files": []}, {"owned_files": ["a"]}]}))),
        Err(Code::WriterScopeRequired)
    );
    assert_eq!(
        r(team(json!({"scopes": [{"is_writer": false}, {"owned_files": ["a"]}]}))).unwrap().0,
        "coordinated-team"
    );
    // A sufficient capsule needs no team and is no fallback.
    let mut enough = team(json!({}));
    enough["capsule_sufficient"] = json!(true);
    assert_eq!(r(enough), ok("fresh-capsule", &["INDEPENDENT_CAPSULE"]));
    // Writers must name a canonical path.
    assert_eq!(r(json!({"role": "builder"})), Err(Code::WriterScopeRequired));
    assert_eq!(r(json!({"is_writer": true})), Err(Code::WriterScopeRequired));
    assert_eq!(r(json!({"owned_files": ["/etc/passwd"]})), Err(Code::InvalidOwnershipPath));
    assert_eq!(r(json!({"owned_files": "src"})), Err(Code::InvalidOwnershipPath));
    assert_eq!(r(json!({"owned_files": ["../x"]})), Err(Code::InvalidOwnershipPath));
    // Isolation: restricted, isolated and unsafe inheritance all isolate.
    for s in [
        json!({"sensitivity": "restricted"}),
        json!({"sensitivity": "isolated"}),
        json!({"inheritance": {"safe": false}}),
    ] {
        assert_eq!(r(s), ok("fresh-capsule", &["INDEPENDENT_CAPSULE", "SENSITIVITY_ISOLATION"]));
    }
}

fn policy(input: Value) -> Result<Value, Code> {
    run("result-policy", &json!({ "input": input }), &ctx()).map_err(|e| e.code)
}

#[test]
fn ceo_09_write_prohibited_work_writes_nothing_and_material_work_keeps_a_handoff() {
    let none = json!({"mode": "ephemeral", "write_prohibited": true, "writes": {"handoff": false, "artifact": false, "vault": false, "settings": false, "workgroup": false}});
    assert_eq!(
        policy(
            json!({"write_prohibited": true, "material": true, "large_raw_output": true, "authorize_vault_write": true})
        ),
        Ok(none)
    );
    assert_eq!(policy(json!({"material": true})).unwrap()["mode"], "durable");
    assert_eq!(
        policy(json!({})).unwrap(),
        json!({"mode": "ephemeral", "write_prohibited": false, "writes": {"handoff": false, "artifact": false, "vault": false, "settings": false, "workgroup": false}})
    );
    let v = policy(json!({"authorize_vault_write": true})).unwrap();
    assert_eq!(v["writes"]["vault"], true);
}

#[test]
fn ceo_18_material_or_writer_work_cannot_request_away_its_handoff() {
    for k in ["material", "writer", "partial", "resumable", "crosses_phase"] {
        let p = policy(json!({k: true, "requested_mode": "ephemeral"})).unwrap();
        assert_eq!((p["mode"].as_str(), p["writes"]["handoff"].as_bool()), (Some("durable"), Some(true)), "{k}");
        assert_eq!(policy(json!({k: true, "authorize_handoff": false})), Err(Code::ResultHandoffNotAuthorized), "{k}");
    }
    assert_eq!(policy(json!({"large_raw_output": true})).unwrap()["mode"], "artifact");
    assert_eq!(
        policy(json!({"large_raw_output": true, "authorize_artifact": false})),
        Err(Code::ResultArtifactNotAuthorized)
    );
    assert_eq!(policy(json!({"requested_mode": "forever"})), Err(Code::InvalidResultMode));
    assert_eq!(policy(json!({"write_prohibited": true, "requested_mode": "forever"})), Err(Code::InvalidResultMode));
}

fn rollout(input: Value) -> Result<Value, Code> {
    run("rollout", &json!({ "input": input }), &ctx()).map_err(|e| e.code)
}

#[test]
fn ceo_13_rollout_selection_is_deterministic_per_stage() {
    let base = json!({"actual_mode": "local", "recommended_mode": "fresh-capsule"});
    let with = |stage: &str| {
        let mut v = base.clone();
        v["rollout"] = json!(stage);
        v["task_corpus_id"] = json!("backend-refactor-03");
        rollout(v).unwrap()
    };
    assert_eq!(with("off")["selected_mode"], "local");
    assert_eq!(with("observe")["record_actual"], true);
    assert_eq!(with("shadow")["record_recommendation"], true);
    assert_eq!(with("shadow")["selected_mode"], "local");
    assert_eq!(with("on")["selected_mode"], "fresh-capsule");
    // The bucket is SHA-256 of the id: the same id, the same bucket, in every run.
    let b = with("canary")["canary_bucket"].as_f64().unwrap();
    assert_eq!(b, with("canary")["canary_bucket"].as_f64().unwrap());
    assert!((0.0..100.0).contains(&b));
    // 10% ⊆ 25% ⊆ 50% over every stratum id, and exact equality does not execute.
    let ids: Vec<String> =
        ["small-tier2", "backend-refactor", "ui-integration", "security-compliance", "recovery-invalidation"]
            .iter()
            .flat_map(|s| (0..20).map(move |i| format!("{s}-{i:02}")))
            .collect();
    let mut previous = 0;
    for pct in [10.0, 25.0, 50.0] {
        let n = ids
            .iter()
            .filter(|id| {
                let out = rollout(json!({"rollout": "canary", "actual_mode": "local", "recommended_mode": "resume", "canary_percent": pct, "task_corpus_id": id})).unwrap();
                let exec = out["execute_recommendation"].as_bool().unwrap();
                assert_eq!(exec, out["canary_bucket"].as_f64().unwrap() < pct);
                exec
            })
            .count();
        assert!(n >= previous, "{pct}%: {n} < {previous}");
        previous = n;
    }
    let exact = strata_engine::ce::wire::rollout::bucket("anon-0123456789abcdef");
    let out = rollout(json!({"rollout": "canary", "recommended_mode": "resume", "canary_percent": exact, "task_corpus_id": "anon-0123456789abcdef"})).unwrap();
    assert_eq!(out["execute_recommendation"], false, "bucket == pct does not execute");
    assert_eq!(
        rollout(json!({"rollout": "canary", "recommended_mode": "resume", "task_corpus_id": "private-repo"})),
        Err(Code::InvalidRollout)
    );
    assert_eq!(
        rollout(
            json!({"rollout": "canary", "recommended_mode": "resume", "canary_percent": 101, "task_corpus_id": "anon-0123456789abcdef"})
        ),
        Err(Code::InvalidRollout)
    );
    assert_eq!(rollout(json!({"rollout": "sometimes"})), Err(Code::InvalidRollout));
}

#[test]
fn ceo_15_dispatch_takes_rollout_from_the_router_and_lineage_before_resume() {
    let l = lineage_record();
    let mut cur = current_for(&l);
    cur["role"] = json!("builder");
    let req = |routing: Value, rollout: Value, cur: Value| {
        run("dispatch", &json!({"routing": {"input": routing}, "lineage": {"lineage": l, "current": cur, "now": NOW}, "rollout": {"input": rollout}}), &ctx())
            .map_err(|e| e.code)
    };
    // The caller's compatibility booleans are ignored: only a HOT evaluation resumes.
    let routing = json!({"owned_files": ["src/a.rs"], "lineage": {"compatible": false, "resumable": false}});
    let out = req(routing.clone(), json!({"rollout": "on"}), cur.clone()).unwrap();
    assert_eq!(out["lineage"]["state"], "HOT");
    assert_eq!(out["routing"]["mode"], "resume");
    assert_eq!(out["rollout"]["selected_mode"], "resume");
    let mut stale = cur.clone();
    stale["spec_hash"] = json!("spec-v9");
    let out = req(
        json!({"owned_files": ["src/a.rs"], "lineage": {"compatible": true, "resumable": true}}),
        json!({"rollout": "on", "recommended_mode": "coordinated-team"}),
        stale,
    )
    .unwrap();
    assert_eq!(out["lineage"]["state"], "INVALID");
    assert_eq!(
        out["routing"]["mode"], "fresh-capsule",
        "a caller's claim of compatibility does not resume an invalid lineage"
    );
    assert_eq!(out["rollout"]["selected_mode"], "fresh-capsule", "the caller's recommendation is ignored");
    // Shadow compares: the caller's baseline is kept as the actual mode.
    let out = req(routing.clone(), json!({"rollout": "shadow", "actual_mode": "fresh-capsule"}), cur.clone()).unwrap();
    assert_eq!(out["rollout"]["selected_mode"], "fresh-capsule");
    assert_eq!(out["routing"]["mode"], "resume");
    // A hard guard overrides the baseline.
    let conflict = json!({"owned_files": ["src/a.rs"], "active_writers": [{"owned_files": ["src"]}]});
    let out = req(conflict, json!({"rollout": "shadow", "actual_mode": "resume"}), cur.clone()).unwrap();
    assert_eq!(out["rollout"]["selected_mode"], "local");
    assert_eq!(
        run("dispatch", &json!({"routing": {"input": {}}}), &ctx()).map_err(|e| e.code),
        Err(Code::InvalidRequest),
        "rollout is required"
    );
    assert_eq!(
        run("rollout", &json!({"input": {"rollout": "on"}}), &ctx()).map_err(|e| e.code),
        Err(Code::RolloutRecommendationRequired)
    );
}

#[test]
fn ceo_21_dispatch_rejects_conflicting_role_or_sensitivity_facts() {
    let l = lineage_record();
    let cur = current_for(&l);
    for (k, v) in [("role", "reviewer"), ("sensitivity", "restricted")] {
        let mut routing = json!({"owned_files": ["a"]});
        routing[k] = json!(v);
        let out = run(
            "dispatch",
            &json!({"routing": routing, "lineage": {"lineage": l, "current": cur, "now": NOW}, "rollout": {}}),
            &ctx(),
        );
        assert_eq!(out.map_err(|e| e.code), Err(Code::DispatchFactMismatch), "{k}");
    }
}

#[test]
fn ceo_17_times_are_strict_rfc3339() {
    let l = lineage_record();
    for bad in ["not-a-date", "2026-02-31T00:00:00Z", "2026-07-30 00:00:00Z"] {
        let out = run("lineage", &json!({"lineage": l, "current": current_for(&l), "now": bad}), &ctx());
        assert_eq!(out.map_err(|e| e.code), Err(Code::InvalidDateTime), "{bad}");
    }
    let mut bad_record = l.clone();
    bad_record["last_used_at"] = json!("2026-11-30T11:55:00");
    assert_eq!(lineage(bad_record, current_for(&l)), Ok(("INVALID".to_owned(), vec!["UNKNOWN_PROVENANCE".to_owned()])));
}

#[test]
fn typed_facts_reject_wrong_types_with_specific_codes() {
    assert_eq!(r(json!({"nesting_depth": -1})), Err(Code::InvalidNesting));
    assert_eq!(r(json!({"nesting_depth": 1.5})), Err(Code::InvalidNesting));
    assert_eq!(r(json!({"max_nesting_depth": 0})), Err(Code::InvalidNesting));
    assert_eq!(r(json!({"owned_files": ["a"], "active_inherited_writers": "two"})), Err(Code::InvalidWriterCount));
    assert_eq!(r(json!({"trivial": "yes"})), Err(Code::InvalidFact));
    assert_eq!(
        r(json!({"nesting_depth": 1.0})).unwrap().0,
        "fresh-capsule",
        "a whole 1.0 counts as 1, as in JavaScript"
    );
    assert_eq!(run("route", &json!({}), &ctx()).map_err(|e| e.code), Err(Code::InvalidRequest));
    assert_eq!(run("route", &json!({"input": []}), &ctx()).map_err(|e| e.code), Err(Code::InvalidRequest));
    let l = lineage_record();
    let mut c = current_for(&l);
    c["model"] = json!(7);
    assert_eq!(lineage(l, c), Err(Code::InvalidFact));
}

#[test]
fn the_route_decision_is_the_engine_function_behind_the_wire() {
    let f = RouteFacts::from_json(&json!({"blocking": true}), &Workspace::default()).unwrap();
    let d = route(&f).unwrap();
    assert_eq!(d.mode, Mode::Local);
    assert_eq!(d.reason_codes.iter().copied().collect::<Vec<_>>(), vec![Reason::Blocking]);
}
