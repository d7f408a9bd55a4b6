//! Vault deltas (CEO-11, CEO-20) and efficiency events (CEO-12, CEO-19) over the wire
//! operations.

use serde_json::{Value, json};
use strata_engine::ce::{Code, Context, run};

fn ctx() -> Context {
    Context { now_ns: 0, workspace: Default::default(), warm_lease_minutes: 20 }
}

fn vault(input: Value) -> Result<Value, Code> {
    run("vault-delta", &json!({ "input": input }), &ctx()).map_err(|e| e.code)
}

fn action(v: Result<Value, Code>) -> Result<(String, String), Code> {
    v.map(|v| (v["action"].as_str().unwrap().to_owned(), v["reason"].as_str().unwrap().to_owned()))
}

fn ar(a: &str, r: &str) -> Result<(String, String), Code> {
    Ok((a.to_owned(), r.to_owned()))
}

#[test]
fn ceo_11_vault_deltas_skip_duplicates_amend_changed_content_and_batch_the_rest() {
    assert_eq!(action(vault(json!({}))), ar("skip", "EMPTY_DELTA"));
    assert_eq!(
        action(vault(json!({"delta": {"category": "pattern", "semantic_key": "k"}}))),
        ar("skip", "EMPTY_DELTA")
    );
    let prev = json!({"title": "Rounding", "content": "Use half-even rounding.", "category": "pattern", "semantic_key": "rounding", "KnowledgeId": "K-1"});
    let same = json!({"title": "rounding", "content": "use   HALF-EVEN rounding", "category": "Pattern", "semantic_key": "Rounding"});
    assert_eq!(action(vault(json!({"delta": same, "previous_deltas": [prev]}))), ar("skip", "SEMANTIC_DUPLICATE"));
    let changed = json!({"title": "Rounding", "content": "Use banker's rounding everywhere.", "category": "pattern", "semantic_key": "rounding"});
    let out = vault(json!({"delta": changed, "previous_deltas": [prev]})).unwrap();
    assert_eq!(out, json!({"action": "amend", "reason": "SEMANTIC_IDENTITY_CHANGED", "KnowledgeId": "K-1"}));
    // Previous hashes from an earlier session count too.
    let first = json!({"title": "Cache", "content": "Cache keys include the locale."});
    let hashes: Vec<String> = Vec::new();
    assert_eq!(action(vault(json!({"delta": first, "previous_hashes": hashes}))), ar("batch", "NORMAL_DELTA"));
    // Flush precedence: explicit save, then interruption, then high risk, then durability.
    let d = json!({"title": "t", "content": "c", "category": "correction"});
    assert_eq!(
        action(vault(json!({"delta": d, "explicit_save": true, "interruption_sensitive": true, "severity": "high"}))),
        ar("flush", "EXPLICIT_SAVE")
    );
    assert_eq!(
        action(vault(json!({"delta": d, "interruption_sensitive": true, "severity": "high"}))),
        ar("flush", "INTERRUPTION_SENSITIVE")
    );
    assert_eq!(action(vault(json!({"delta": d, "severity": " critical "}))), ar("flush", "HIGH_RISK"));
    assert_eq!(action(vault(json!({"delta": d}))), ar("flush", "DURABILITY_REQUIRED"));
    assert_eq!(
        action(vault(json!({"delta": {"title": "t", "content": "c", "category": "deprecation"}}))),
        ar("flush", "DURABILITY_REQUIRED")
    );
}

#[test]
fn vault_normalisation_keeps_distinct_knowledge_apart() {
    // The reference strips punctuation, so these collide and the second is silently skipped.
    for (a, b) in [("C++ guidance", "C guidance"), ("Pin v1.2 of the SDK", "Pin v1 2 of the SDK")] {
        let prev = json!({"title": "Lang", "content": a, "KnowledgeId": "K-9"});
        assert_eq!(
            action(vault(json!({"delta": {"title": "Lang", "content": b}, "previous_deltas": [prev]}))),
            ar("batch", "NORMAL_DELTA"),
            "{a} / {b}"
        );
    }
    // The same text under a new semantic key is an exact content duplicate (as in the reference).
    let prev = json!({"title": "T", "content": "same text", "semantic_key": "old-key", "KnowledgeId": "K-2"});
    assert_eq!(
        action(vault(
            json!({"delta": {"title": "T", "content": "same text", "semantic_key": "new-key"}, "previous_deltas": [prev]})
        )),
        ar("skip", "SEMANTIC_DUPLICATE")
    );
    // Trailing punctuation and spacing alone do not make new knowledge.
    let prev = json!({"title": "T", "content": "Use tabs."});
    assert_eq!(
        action(vault(json!({"delta": {"title": "T", "content": "use  tabs"}, "previous_deltas": [prev]}))),
        ar("skip", "SEMANTIC_DUPLICATE")
    );
}

#[test]
fn ceo_20_severity_is_closed_and_mutations_need_exactly_one_stable_target() {
    assert_eq!(vault(json!({"delta": {"title": "t"}, "severity": "urgent"})), Err(Code::InvalidSeverity));
    assert_eq!(vault(json!({"delta": {"title": "t"}, "severity": 3})), Err(Code::InvalidSeverity));
    let delta = json!({"title": "T", "content": "new", "semantic_key": "k"});
    let no_id = json!({"title": "T", "content": "old", "semantic_key": "k"});
    assert_eq!(vault(json!({"delta": delta, "previous_deltas": [no_id]})), Err(Code::VaultTargetRequired));
    let two = [
        json!({"title": "T", "content": "a", "semantic_key": "k", "KnowledgeId": "K-1"}),
        json!({"title": "T", "content": "b", "semantic_key": "k", "KnowledgeId": "K-2"}),
    ];
    assert_eq!(vault(json!({"delta": delta, "previous_deltas": two})), Err(Code::VaultTargetAmbiguous));
    let clash = json!({"title": "T", "content": "a", "semantic_key": "k", "KnowledgeId": "K-1", "knowledge_id": "K-3"});
    assert_eq!(vault(json!({"delta": delta, "previous_deltas": [clash]})), Err(Code::VaultTargetAmbiguous));
    // The same id under two spellings is one id (the reference calls it ambiguous).
    let spelled =
        json!({"title": "T", "content": "a", "semantic_key": "k", "KnowledgeId": "K-1", "knowledge_id": "K-1"});
    assert_eq!(vault(json!({"delta": delta, "previous_deltas": [spelled]})).unwrap()["KnowledgeId"], "K-1");
    // Supersession: the target id comes from the previous record, never from the delta.
    let prev = json!({"title": "Old", "content": "old rule", "category": "decision", "knowledge_id": "K-7"});
    let out = vault(json!({"delta": {"title": "New", "content": "new rule", "category": "decision", "supersedes": "K-7", "KnowledgeId": "K-FAKE"}, "previous_deltas": [prev]})).unwrap();
    assert_eq!(out, json!({"action": "update", "reason": "SUPERSESSION_CHANGED", "KnowledgeId": "K-7"}));
}

fn event(overrides: Value) -> Value {
    let mut e = json!({"event": "dispatch_decision", "observed_at": "2026-11-30T10:00:00Z", "provider": "claude",
        "mode": "fresh-capsule", "reason_codes": ["INDEPENDENT_CAPSULE"], "task_corpus_id": "backend-refactor-03",
        "logical": {"capsule_bytes": 2048, "prompt_bytes": 9000}, "billed": {"output_tokens": 1200, "accounting_source": "provider-reported"},
        "outcome": {"verify_passed": 3, "verify_total": 4}});
    for (k, v) in overrides.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

fn telemetry(e: Value) -> Result<Value, Code> {
    run("telemetry", &json!({ "event": e }), &ctx()).map_err(|e| e.code)
}

#[test]
fn ceo_12_efficiency_events_keep_namespaces_apart_and_refuse_private_content() {
    let out =
        telemetry(event(json!({"reason_codes": ["INDEPENDENT_CAPSULE", "LOCAL_CHEAPER", "LOCAL_CHEAPER"]}))).unwrap();
    assert_eq!(out["schema"], "knowzcode.efficiency-event/v1");
    assert_eq!(out["reason_codes"], json!(["LOCAL_CHEAPER", "INDEPENDENT_CAPSULE"]), "deduplicated, canonical order");
    assert_eq!(out["logical"].as_object().unwrap().len(), 6);
    assert_eq!(
        out["billed"]["uncached_input_tokens"],
        Value::Null,
        "unreported billed figures are null, never inferred"
    );
    assert_eq!(out["outcome"]["elapsed_ms"], Value::Null);
    assert_eq!(out["model"], Value::Null);
    for private in [
        json!({"model": "anon-model-0123456789abcdef", "session_id": "abc"}),
        json!({"provider_session_id": "x"}),
        json!({"outcome": {"verify_passed": 1, "verify_total": 1, "email": "a@b.co"}}),
    ] {
        assert_eq!(telemetry(event(private.clone())), Err(Code::PrivateTelemetry), "{private}");
    }
    for value in [
        "https://github.com/acme/private",
        "/home/alice/src",
        "bob@example.com",
        "customer-private-repository-name",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ] {
        assert_eq!(telemetry(event(json!({"task_corpus_id": value}))), Err(Code::PrivateTelemetry), "{value}");
    }
    for invalid in [
        json!({"model": "arbitrary-unapproved-model"}),
        json!({"task_corpus_id": "private-customer-task"}),
        json!({"mode": null}),
        json!({"reason_codes": []}),
        json!({"outcome": {"verify_passed": 5, "verify_total": 4}}),
        json!({"outcome": {"audit_score": 101}}),
        json!({"observed_at": "2026-02-31T00:00:00Z"}),
        json!({"logical": {"capsule_bytez": 1}}),
        json!({"billed": {"currency": "EUR", "accounting_source": "authoritative"}}),
        json!({"extra_counter": 1}),
    ] {
        assert_eq!(telemetry(event(invalid.clone())), Err(Code::EfficiencyEventInvalid), "{invalid}");
    }
    assert_eq!(
        telemetry(event(json!({"model": "anon-model-0123456789abcdef"}))).unwrap()["model"],
        "anon-model-0123456789abcdef"
    );
}

#[test]
fn ceo_19_billed_figures_need_an_authoritative_accounting_source() {
    for source in [json!(null), json!("unknown"), json!("estimated")] {
        let e = event(json!({"billed": {"amount": 0.12, "currency": "USD", "accounting_source": source}}));
        assert_eq!(telemetry(e), Err(Code::AccountingSourceRequired), "{source}");
    }
    let ok =
        telemetry(event(json!({"billed": {"amount": 0.12, "currency": "USD", "accounting_source": "authoritative"}})))
            .unwrap();
    assert_eq!(ok["billed"]["amount"], 0.12);
    let none = telemetry(event(json!({"billed": {}}))).unwrap();
    assert_eq!(none["billed"]["accounting_source"], "unknown");
}

#[test]
fn ceo_10_targeted_checks_in_fix_loops_consolidated_before_gate3_and_after_production_fixes() {
    use strata_engine::ce::budget::{self, Tier};
    let verification_plan = |tier, changed| budget::verification_plan(tier, changed).to_json();
    assert_eq!(
        verification_plan(Tier::Tdd, false),
        json!({"checks": ["targeted"], "consolidated": false, "artifact_logs": true})
    );
    assert_eq!(verification_plan(Tier::Microtask, false)["checks"], json!(["affected-surface"]));
    let gate = verification_plan(Tier::Gate3, false);
    assert_eq!(gate["checks"], json!(["full-tests", "static-analysis", "build", "package", "install-smoke"]));
    assert_eq!(gate["consolidated"], true);
    assert_eq!(verification_plan(Tier::AuditFix, false)["checks"], json!(["targeted"]));
    let after = verification_plan(Tier::AuditFix, true);
    assert_eq!(after["checks"].as_array().unwrap().len(), 6);
    assert_eq!(after["consolidated"], true);
    assert_eq!(Tier::parse("nightly").map_err(|e| e.code), Err(Code::InvalidFact));
}

#[test]
fn ceo_11_mcp_health_is_reused_only_while_healthy_and_fresh() {
    use strata_engine::ce::budget::health_reusable;
    let min = 60_000_000_000i128;
    assert!(health_reusable(true, 0, 14 * min, 15));
    assert!(!health_reusable(true, 0, 15 * min, 15), "the TTL is exclusive");
    assert!(!health_reusable(false, 0, min, 15), "a failure is retried, not reused");
    assert!(!health_reusable(true, 10 * min, 0, 15), "a check from the future is not trusted");
}

#[test]
fn budget_levels_preserve_mandatory_gates() {
    use strata_engine::ce::budget::{BudgetLevel, budget};
    assert_eq!(budget(5.0, None).unwrap().level, BudgetLevel::Unbounded);
    for (used, level) in [
        (69.0, BudgetLevel::Normal),
        (70.0, BudgetLevel::Soft),
        (90.0, BudgetLevel::Checkpoint),
        (100.0, BudgetLevel::Hard),
    ] {
        let b = budget(used, Some(100.0)).unwrap();
        assert_eq!(b.level, level, "{used}");
        assert_eq!(b.to_json()["mandatory_gates_preserved"], true);
    }
    assert_eq!(budget(-1.0, Some(100.0)).map(|_| ()).map_err(|e| e.code), Err(Code::InvalidFact));
    assert_eq!(budget(1.0, Some(0.0)).map(|_| ()).map_err(|e| e.code), Err(Code::InvalidFact));
}

#[test]
fn ceo_14_documentation_makes_no_token_removal_claim_for_cache_reads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md"), root.join("BENCHMARKS.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let claim = regex::Regex::new(
        r"(?i)cach\w*[^.\n]{0,60}\b(remov|eliminat|free|sav)\w*[^.\n]{0,30}\b(context|logical)[^.\n]{0,20}tokens",
    )
    .unwrap();
    assert!(claim.is_match("Prompt caching removes most logical context tokens"), "the check can see a claim");
    let mut described = false;
    for d in &docs {
        let text = std::fs::read_to_string(d).unwrap();
        if let Some(m) = claim.find(&text) {
            panic!("{}: claims cached input removes context tokens: {:?}", d.display(), m.as_str());
        }
        described |= text.contains("Cache reads are billing and context-reuse behaviour");
    }
    assert!(described, "some document describes cache reads as billing and context-reuse behaviour");
}
