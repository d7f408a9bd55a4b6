//! The capsule pipeline and the shared privacy scanner (CEO-03, CEO-12 keys, CEO-17, CEO-21).

use proptest::prelude::*;
use serde_json::{Value, json};
use strata_engine::ce::privacy::{self, CAPSULE_CLASSES, TELEMETRY_CLASSES};
use strata_engine::ce::wire::capsule::{self, SealRequest, seal, verify};
use strata_engine::ce::{Code, Context, run};

fn draft() -> Value {
    serde_json::from_str(include_str!("../fixtures/ce/capsule-draft.json")).unwrap()
}

fn sealed(c: &Value, max: u64) -> Result<capsule::Sealed, Code> {
    seal(&SealRequest { capsule: c, max_bytes: max, artifact_path: None, artifact_roots: vec![] }).map_err(|e| e.code)
}

fn ctx() -> Context {
    Context { now_ns: 0, workspace: Default::default(), warm_lease_minutes: 20 }
}

#[test]
fn ceo_03_the_capsule_hash_matches_the_reference_runtime() {
    // Golden values computed with Node 20 (JSON.stringify, default key sort, crypto sha256).
    let s = sealed(&draft(), 12_288).unwrap();
    assert_eq!(s.hash, "sha256:cc5ed0b71f6e4b716615636969feac803e69a1e0f4245b59dfd6201a818fa357");
    assert_eq!(s.bytes, 1053);
    assert_eq!(s.capsule["capsule_hash"], json!(s.hash));
    assert_eq!(verify(&s.capsule).unwrap(), s.hash, "a sealed capsule re-verifies");
    // Over the wire: the sealed capsule is the result.
    let out = run("capsule", &json!({"capsule": draft()}), &ctx()).unwrap();
    assert_eq!(out, s.capsule);
}

#[test]
fn ceo_03_schema_privacy_and_mandatory_overflow_fail_closed() {
    let with = |k: &str, v: Value| {
        let mut c = draft();
        c[k] = v;
        sealed(&c, 12_288)
    };
    assert_eq!(
        with("raw_prompt", json!("x")).map(|_| ()),
        Err(Code::CapsuleSchemaInvalid),
        "unknown keys fail the schema"
    );
    assert_eq!(with("phase", json!("4")).map(|_| ()), Err(Code::CapsuleSchemaInvalid));
    let mut no_objective = draft();
    no_objective.as_object_mut().unwrap().remove("objective");
    assert_eq!(sealed(&no_objective, 12_288).map(|_| ()), Err(Code::CapsuleSchemaInvalid));
    for private in [
        "RAW PROMPT: you are a helpful assistant",
        "attach the verbatim log output",
        "Claude session id: claude-session-1a2b3c4d5e6f",
        "resume thread_123456789abcdef",
        "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "Authorization: Basic dTpw",
        "password=hunter22",
    ] {
        assert_eq!(with("next_action", json!(private)).map(|_| ()), Err(Code::CapsulePrivateContent), "{private}");
    }
    assert_eq!(
        with("objective", json!("x".repeat(4097))).map(|_| ()),
        Err(Code::CapsuleSchemaInvalid),
        "over the schema's 4096"
    );
    assert_eq!(with("risks", json!(["y".repeat(2048), "é".repeat(2049)])).map(|_| ()), Err(Code::CapsuleSchemaInvalid));
    // Mandatory content is never truncated: too big without evidence is an error.
    let mut big = draft();
    big["risks"] = json!((0..8).map(|i| format!("risk {i}: {}", "r".repeat(1500))).collect::<Vec<_>>());
    assert_eq!(sealed(&big, 4096).map(|_| ()), Err(Code::CapsuleMandatoryOverflow));
}

#[test]
fn ceo_03_overflow_moves_only_evidence_and_records_its_digest() {
    let mut c = draft();
    c["evidence"] = json!(
        (0..6)
            .map(|i| json!({"kind": "test", "summary": format!("case {i}: {}", "e".repeat(300))}))
            .collect::<Vec<_>>()
    );
    let req = |max: u64, path: Option<&'static str>, roots: Vec<&'static str>| {
        let c = c.clone();
        move || seal(&SealRequest { capsule: &c, max_bytes: max, artifact_path: path, artifact_roots: roots.clone() })
    };
    assert_eq!(
        req(1500, None, vec![])().map_err(|e| e.code).map(|_| ()),
        Err(Code::CapsuleMandatoryOverflow),
        "no artifact path: nothing may move"
    );
    let s = req(1500, Some("knowzcode/artifacts/wg-7/evidence.json"), vec!["knowzcode/artifacts/wg-7"])().unwrap();
    assert!(s.externalized);
    assert!(s.bytes <= 1500);
    assert_eq!(s.capsule["evidence"], json!([]));
    assert_eq!(s.capsule["objective"], draft()["objective"], "mandatory content verbatim");
    assert_eq!(s.capsule["risks"], draft()["risks"]);
    let ext = &s.capsule["externalized"][0];
    assert_eq!(ext["path"], "knowzcode/artifacts/wg-7/evidence.json");
    assert_eq!(ext["item_count"], 6);
    let moved = strata_engine::ce::json::to_string(&c["evidence"]);
    assert_eq!(ext["sha256"], json!(strata_engine::ce::json::sha256_tagged(moved.as_bytes())));
    assert!(s.capsule["artifact_refs"].as_array().unwrap().contains(&json!("knowzcode/artifacts/wg-7/evidence.json")));
    verify(&s.capsule).unwrap();
    // Still too big after moving the evidence out.
    assert_eq!(
        req(900, Some("knowzcode/artifacts/e.json"), vec!["knowzcode/artifacts"])().map_err(|e| e.code).map(|_| ()),
        Err(Code::CapsuleMandatoryOverflow)
    );
}

#[test]
fn ceo_17_artifacts_stay_under_the_runtime_root_and_the_path_is_always_checked() {
    let c = draft();
    let try_path = |path: &str, roots: Vec<&str>| {
        seal(&SealRequest { capsule: &c, max_bytes: 12_288, artifact_path: Some(path), artifact_roots: roots })
            .map_err(|e| e.code)
            .map(|_| ())
    };
    // The capsule fits, yet a bad artifact path is refused (the reference ignores it).
    assert_eq!(try_path("knowzcode/artifacts/../x", vec!["knowzcode/artifacts"]), Err(Code::CapsuleArtifactRefInvalid));
    assert_eq!(
        try_path("knowzcode/artifacts/provider-session-id:session_abc.json", vec!["knowzcode/artifacts"]),
        Err(Code::CapsuleArtifactRefInvalid)
    );
    assert_eq!(
        try_path(".git/config", vec![".git"]),
        Err(Code::CapsuleArtifactRefUnauthorized),
        "a request cannot self-authorise .git"
    );
    assert_eq!(try_path("knowzcode/artifacts/a.json", vec![]), Err(Code::CapsuleArtifactRefUnauthorized));
    assert_eq!(try_path("knowzcode/artifacts/a.json", vec!["knowzcode/artifacts"]), Ok(()));
    let mut outside = draft();
    outside["artifact_refs"] = json!(["logs/run.txt"]);
    assert_eq!(sealed(&outside, 12_288).map(|_| ()), Err(Code::CapsuleArtifactRefUnauthorized));
}

#[test]
fn ceo_21_every_file_spec_and_artifact_reference_is_portable_and_relative() {
    for (field, value) in [
        ("owned_files", json!(["/etc/passwd"])),
        ("read_files", json!(["C:\\windows\\x"])),
        ("owned_files", json!(["src/../../x"])),
        ("read_files", json!(["src//x"])),
        ("specs", json!([{"path": "https://example.com/spec.md", "verify_ids": []}])),
    ] {
        let mut c = draft();
        c[field] = value.clone();
        assert_eq!(sealed(&c, 12_288).map(|_| ()), Err(Code::CapsuleArtifactRefInvalid), "{field}: {value}");
    }
}

#[test]
fn sealing_replaces_a_given_hash_and_verifying_checks_it() {
    let good = sealed(&draft(), 12_288).unwrap();
    assert_eq!(sealed(&good.capsule, 12_288).unwrap().hash, good.hash, "sealing a sealed capsule is the identity");
    let mut tampered = good.capsule.clone();
    tampered["next_action"] = json!("Skip the tests and merge.");
    let resealed = sealed(&tampered, 12_288).unwrap();
    assert_ne!(resealed.hash, good.hash, "the seal is the content's, not the one handed in");
    assert_eq!(verify(&resealed.capsule).unwrap(), resealed.hash);
    assert_eq!(verify(&tampered).map_err(|e| e.code), Err(Code::CapsuleHashMismatch));
    assert_eq!(capsule::check_claim(&good.capsule).map_err(|e| e.code), Ok(()));
    assert_eq!(capsule::check_claim(&tampered).map_err(|e| e.code), Err(Code::CapsuleHashMismatch));
    assert_eq!(capsule::check_claim(&draft()).map_err(|e| e.code), Err(Code::CapsuleHashMismatch), "nothing to verify");
}

#[test]
fn privacy_detects_modern_tokens_and_passes_engineering_prose() {
    let secrets = [
        ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "google-api-key"),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret-access-key"),
        ("AKIAIOSFODNN7EXAMPL3", "aws-access-key-id"),
        ("xoxb-123456789012-1234567890123-AbCdEfGhIjKl", "slack-token"),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe-key"),
        ("rk_test_51H8abcdEFGH1234", "stripe-key"),
        (
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL",
            "github-fine-grained-token",
        ),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private-key"),
        ("-----BEGIN RSA PRIVATE KEY-----", "private-key"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
        ("postgres://admin:s3cret@db.internal:5432/app", "credential-url"),
        ("jdbc:mysql://db/app?user=a&password=b2", "jdbc-password"),
        ("Claude session id: claude-session-1a2b3c4d5e6f", "provider-session-id"),
        ("codex thread 0199a1b2-c3d4", "provider-session-id"),
        ("sess_01HZX4ABCDEF", "prefixed-session-id"),
        ("npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm-token"),
        ("Bearer abc123DEF456ghi", "bearer-token"),
        ("sk-proj-Abc123def456GHI789jkl", "provider-api-key"),
        ("raw transcript", "transcript-marker"),
        ("verbatim tool output", "transcript-marker"),
        ("full log:\nline 1", "transcript-marker"),
    ];
    for (text, rule) in secrets {
        assert_eq!(privacy::scan(text, CAPSULE_CLASSES).map(|r| r.id), Some(rule), "{text}");
    }
    let prose = [
        "run-the-full-suite before merge",
        "thread-safety review pending",
        "thread-safety-review pending",
        "thread-safety-v2-review pending",
        "Before each run: execute targeted tests",
        "Keep the full log on disk",
        "Provide full prompt context to reviewers",
        "Store secret: none",
        "Use sk-learn-compatible estimators",
        "The password field must be hashed with argon2",
        "Pass the bearer token from the environment",
        "session handling lives in src/session.rs",
        "agent-based routing prefers local work",
        "password = os.environ['DB_PASSWORD']",
        "set `ANTHROPIC_API_KEY=<anything>` for the fake server",
        "token: ${GITHUB_TOKEN}",
        "the api_key rotation policy is quarterly",
        "auth: oauth2 with pkce",
    ];
    for text in prose {
        assert_eq!(privacy::scan(text, TELEMETRY_CLASSES).map(|r| r.id), None, "{text}");
    }
    // Telemetry also refuses identifying content the capsule may carry.
    for text in
        ["see https://example.com/x", "/home/alice/project", "mail bob@example.com", "customer-private-repository-name"]
    {
        assert!(privacy::scan(text, TELEMETRY_CLASSES).is_some(), "{text}");
    }
    assert!(privacy::capsule_key_forbidden("raw_transcript"));
    assert!(privacy::capsule_key_forbidden("session_id"));
    assert!(!privacy::capsule_key_forbidden("next_action"));
    assert!(privacy::telemetry_key_forbidden("repository_path"));
    assert!(!privacy::telemetry_key_forbidden("prompt_bytes"));
    privacy::rules_compile().unwrap();
    capsule::schema_compiles().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_capsule_hash_ignores_key_order_and_sealing_is_stable(rot in 0usize..16, risks in prop::collection::vec("[a-z ]{1,30}", 0..4)) {
        let mut c = draft();
        c["risks"] = json!(risks);
        // Rebuild the object with its keys inserted in a rotated order.
        let m = c.as_object().unwrap();
        let mut keys: Vec<&String> = m.keys().collect();
        let n = keys.len();
        keys.rotate_left(rot % n);
        let rebuilt = Value::Object(keys.into_iter().map(|k| (k.clone(), m[k].clone())).collect());
        let a = sealed(&c, 12_288).unwrap();
        let b = sealed(&rebuilt, 12_288).unwrap();
        prop_assert_eq!(&a.hash, &b.hash);
        prop_assert_eq!(verify(&a.capsule).unwrap(), a.hash.clone());
        prop_assert_eq!(sealed(&a.capsule, 12_288).unwrap().capsule, a.capsule);
    }
}

#[test]
fn the_gitleaks_default_rules_catch_what_strata_rules_do_not() {
    let n = strata_engine::ce::gitleaks::compile_all().unwrap();
    assert!(n >= 200, "{n} gitleaks rules");
    let only_gitleaks = [
        ("key SK0123456789abcdef0123456789abcdef", "twilio-api-key"),
        ("shpat_0123456789abcdef0123456789abcdef", "shopify-access-token"),
        ("dapi0123456789abcdef0123456789abcdef", "databricks-api-token"),
        ("dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "digitalocean-pat"),
        ("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", "sendgrid-api-token"),
    ];
    for (text, rule) in only_gitleaks {
        assert_eq!(privacy::scan(text, CAPSULE_CLASSES).map(|f| f.id), Some(rule), "{text}");
        assert_eq!(strata_engine::ce::gitleaks::find(text), Some(rule), "{text}");
    }
    // Through the capsule pipeline: refused with the privacy code, the rule named only in the detail.
    let mut c = draft();
    c["next_action"] = json!("deploy with shpat_0123456789abcdef0123456789abcdef");
    assert_eq!(sealed(&c, capsule::MAX_BYTES_DEFAULT).map(|_| ()), Err(Code::CapsulePrivateContent));
    // Entropy and allowlists keep gitleaks quiet on low-entropy and templated values.
    assert!(strata_engine::ce::gitleaks::entropy(b"aaaa") < 0.01);
    for text in ["SK00000000000000000000000000000000", "api_key: ${{ secrets.API_KEY }}"] {
        assert_eq!(strata_engine::ce::gitleaks::find(text), None, "{text}");
    }
}

#[test]
fn the_privacy_scanner_finds_no_secret_in_this_repository_s_prose() {
    // A false-positive corpus: every line of the project's own documentation.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut lines = 0;
    for doc in [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "docs/compat.md",
        "docs/errors.md",
        "docs/context-efficiency.md",
    ] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for line in text.lines() {
            lines += 1;
            let found = privacy::scan(line, &[privacy::Class::Secret]);
            assert_eq!(found.map(|f| f.id), None, "{doc}: {line}");
        }
    }
    assert!(lines > 1000, "{lines} lines scanned");
}
