//! The JSON Schemas in `schemas/` are a stability boundary: each one compiles, and what strata
//! actually writes validates against it (and a wrong instance does not).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_adapters::config::Config;
use strata_journal::export::{Attestation, export_bundle, export_jsonl};
use strata_journal::note::SignerKey;
use strata_journal::{Durability, ExpectedVersion, Journal};
use strata_tests::event;
use uuid::Uuid;

fn schemas_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("root").join("schemas")
}

fn validator(name: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(schemas_dir().join(name)).expect("schema file");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name} does not compile: {e}"))
}

#[test]
fn every_schema_compiles_and_declares_draft_2020_12() {
    let mut n = 0;
    for entry in std::fs::read_dir(schemas_dir()).expect("schemas/") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "json") {
            let name = p.file_name().and_then(|f| f.to_str()).expect("name").to_owned();
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
            assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name}");
            validator(&name);
            n += 1;
        }
    }
    assert!(n >= 2);
}

#[test]
fn exports_and_bundles_match_their_schema() {
    let j = Journal::in_memory("strata.test/schema").unwrap();
    for i in 0..5u128 {
        let mut e = event(Uuid::from_u128(i + 1), "artifact.created", &serde_json::json!({"i": i as u64, "s": "x\"y"}));
        if i == 2 {
            e.causation = Some(Uuid::from_u128(99));
        }
        j.append_blocking(&format!("artifact/A-{i}"), ExpectedVersion::EMPTY, vec![e]).unwrap().unwrap();
        if i % 2 == 1 {
            let key = Arc::new(SignerKey::from_seed("schema", [3; 32]).unwrap());
            j.checkpoint_blocking(key, Uuid::from_u128(1000 + i), 1_795_000_000_000_000_000).unwrap();
        }
    }
    let v = validator("journal-export-line.schema.json");
    let mut out = Vec::new();
    export_jsonl(&j, &mut out).unwrap();
    let key = SignerKey::from_seed("schema", [3; 32]).unwrap().verifier();
    export_bundle(&j, &mut out, &[key], &[Attestation { name: "projection:streams".into(), value: "ab".into() }])
        .unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for line in String::from_utf8(out).unwrap().lines() {
        let instance: serde_json::Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = v.iter_errors(&instance).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "line does not match the schema: {line}\n{errors:?}");
        // serde_json sorts keys: an event line starts with "causation", a header with "format".
        kinds.insert(instance.as_object().unwrap().keys().next().unwrap().clone());
    }
    for k in ["checkpoint", "consistency", "key", "attestation", "end", "format", "causation"] {
        assert!(kinds.contains(k), "no {k} line was checked: {kinds:?}");
    }
    assert!(!v.is_valid(&serde_json::json!({"seq": 0, "id": "x"})));
    assert!(!v.is_valid(&serde_json::json!({"end": {"events": 1, "head": "zz", "root": "zz"}})));
}

#[test]
fn the_config_strata_writes_matches_its_schema() {
    let v = validator("config.schema.json");
    for durability in [Durability::Power, Durability::Process] {
        let text = Config { durability, cache_mib: 64, ..Config::default() }.render();
        let value: toml::Value = toml::from_str(&text).unwrap();
        let json = serde_json::to_value(value).unwrap();
        assert!(v.is_valid(&json), "{text}");
    }
    assert!(!v.is_valid(&serde_json::json!({"journal": {"durability": "disk"}})));
    assert!(!v.is_valid(&serde_json::json!({"journal": {"cache_mib": 1}})));
    assert!(!v.is_valid(&serde_json::json!({"journal": {"durabilty": "power"}})));
    assert!(!v.is_valid(&serde_json::json!({"tokens": {"claude": 0}})));
    assert!(!v.is_valid(&serde_json::json!({"tokens": {"gemini": 1.1}})));
}

#[test]
fn artifact_examples_pass_or_fail_at_the_expected_pointer() {
    let dir = schemas_dir().join("examples");
    let mut checked = 0;
    for kind in strata_engine::kb::kind::ArtifactKind::ALL {
        let v = validator(&format!("{}.schema.json", kind.name()));
        let valid: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{}.valid.json", kind.name()))).unwrap())
                .unwrap();
        let errors: Vec<String> = v.iter_errors(&valid).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{kind}: valid example fails: {errors:?}");
        // The engine's own validation agrees.
        assert!(strata_engine::kb::schema::validate(kind, &valid).unwrap().is_empty());
        let invalid: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{}.invalid.json", kind.name()))).unwrap())
                .unwrap();
        let expected = invalid["expectedPointer"].as_str().unwrap();
        let pointers: Vec<String> =
            v.iter_errors(&invalid["instance"]).map(|e| e.instance_path().to_string()).collect();
        assert_eq!(pointers, vec![expected.to_owned()], "{kind}: invalid example should fail exactly at {expected}");
        checked += 2;
    }
    assert_eq!(checked, 30);
}

#[test]
fn the_bundled_corpus_and_the_pairs_strata_writes_match_their_schemas() {
    use strata_engine::promotion::{corpus, synthetic};
    let corpus_schema = validator("eval-corpus.schema.json");
    let pairs_schema = validator("paired-results.schema.json");
    let doc = strata_tests::eval::bundled_corpus();
    let errors: Vec<String> = corpus_schema.iter_errors(&doc).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let parsed = corpus::parse(&doc).unwrap();
    let pairs = serde_json::to_value(synthetic::synthesize(&parsed, &corpus::digest(&doc), 7)).unwrap();
    let errors: Vec<String> = pairs_schema.iter_errors(&pairs).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(pairs["cost_basis"], "amount", "synthetic costs are amounts, and say so");
    // Pairs written before the cost basis was stated are still valid.
    assert!(pairs_schema.is_valid(&strata_tests::eval::pairs_for(&doc, "measured", 40)));
    let mut bad = pairs.clone();
    bad["cost_basis"] = serde_json::json!("dollars");
    assert!(!pairs_schema.is_valid(&bad));
    // Wrong instances are refused.
    let mut bad = doc.clone();
    bad["tasks"][0]["oracle"]["mode"] = serde_json::json!("teleport");
    assert!(!corpus_schema.is_valid(&bad));
    let mut bad = pairs;
    bad["pairs"][0]["baseline"]["cost_micros"] = serde_json::json!(0);
    assert!(!pairs_schema.is_valid(&bad));
}
