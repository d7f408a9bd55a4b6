//! The evaluation corpus, signed measurement envelopes and `strata eval promote`: freshness at
//! exactly 30 days and 5 minutes, every provenance failure (tampered pair, wrong corpus digest,
//! unknown key, reused run id, stale envelope), synthetic pairs never promoting, consumption
//! recorded in the journal so a second use fails from another process, and byte-identical
//! evaluations.

use serde_json::{Value, json};
use strata_engine::ce::time::{format_rfc3339, parse_rfc3339};
use strata_engine::promotion::envelope::{self, Claims, Expected, TrustedKeys};
use strata_engine::promotion::promote::{self, Options};
use strata_engine::promotion::{corpus, gates::Thresholds};
use strata_tests::eval::{bundled_corpus, measured_corpus, promote_args, write_json as write};
use strata_tests::{strata, strata_bin};

const NOW: &str = "2026-11-30T12:00:00Z";
const RUNTIME: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const KEY_ID: &str = "measurement-key-lab";
const RUN: &str = "measurement-0123456789abcdef";

fn bundled() -> Value {
    bundled_corpus()
}

fn pairs_for(corpus: &Value, kind: &str) -> Value {
    strata_tests::eval::pairs_for(corpus, kind, 40)
}

fn key() -> ed25519_dalek::SigningKey {
    envelope::signing_key_from_seed([7; 32])
}

fn claims(measured_at: &str) -> Claims {
    Claims {
        candidate_version: "cand-2".into(),
        corpus_version: "1.0.0".into(),
        runtime_digest: RUNTIME.into(),
        measured_at: measured_at.into(),
        measurement_run_id: RUN.into(),
        signer_key_id: KEY_ID.into(),
        promotion_authorized: true,
    }
}

fn now_ns() -> i128 {
    parse_rfc3339(NOW, "now").unwrap()
}

fn verify_at(env: &Value, pairs: &Value, now_ns: i128) -> Result<envelope::Trusted, Vec<String>> {
    let keys = TrustedKeys::single(KEY_ID, key().verifying_key());
    let expected =
        Expected { now_ns, candidate_version: "cand-2", corpus_version: "1.0.0", runtime_digest: RUNTIME, keys: &keys };
    envelope::verify(env, pairs, &expected, &|_| None)
}

fn ns(s: &str) -> i128 {
    parse_rfc3339(s, "t").unwrap()
}

#[test]
fn ceo_19_freshness_holds_at_exactly_thirty_days_and_five_minutes_and_not_a_nanosecond_beyond() {
    let pairs = pairs_for(&measured_corpus(), "measured")["pairs"].clone();
    let measured = "2026-10-31T12:00:00Z"; // 30 days before NOW
    let env = envelope::sign(&claims(measured), &pairs, &key()).unwrap();
    assert!(verify_at(&env, &pairs, ns(NOW)).is_ok(), "exactly 30 days old is fresh");
    let stale = verify_at(&env, &pairs, ns(NOW) + 1).unwrap_err();
    assert_eq!(stale, vec!["measured_at: older than 30 days; measure again".to_owned()]);

    let ahead = envelope::sign(&claims("2026-11-30T12:05:00Z"), &pairs, &key()).unwrap();
    assert!(verify_at(&ahead, &pairs, ns(NOW)).is_ok(), "exactly 5 minutes ahead is within skew");
    let too_far = verify_at(&ahead, &pairs, ns(NOW) - 1).unwrap_err();
    assert_eq!(too_far, vec!["measured_at: more than 5 minutes in the future".to_owned()]);
}

#[test]
fn ceo_19_a_tampered_pair_a_wrong_digest_an_unknown_key_and_an_edited_field_each_fail() {
    let pairs = pairs_for(&measured_corpus(), "measured")["pairs"].clone();
    let env = envelope::sign(&claims(NOW), &pairs, &key()).unwrap();
    assert!(verify_at(&env, &pairs, now_ns()).is_ok());

    let mut tampered = pairs.clone();
    tampered[3]["candidate"]["cost_micros"] = json!(1);
    let why = verify_at(&env, &tampered, now_ns()).unwrap_err();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].starts_with("corpus_digest: the pairs given digest to sha256:"), "{why:?}");

    let mut reordered = pairs.clone();
    reordered.as_array_mut().unwrap().swap(0, 1);
    assert!(verify_at(&env, &reordered, now_ns()).unwrap_err()[0].starts_with("corpus_digest"), "order is signed");

    let mut wrong_digest = env.clone();
    wrong_digest["corpus_digest"] = json!(format!("sha256:{}", "0".repeat(64)));
    let why = verify_at(&wrong_digest, &pairs, now_ns()).unwrap_err();
    assert!(why.iter().any(|w| w.starts_with("corpus_digest")), "{why:?}");
    assert!(why.iter().any(|w| w.starts_with("signature: does not verify")), "{why:?}");

    let other = envelope::signing_key_from_seed([9; 32]);
    let mut by_other = claims(NOW);
    by_other.signer_key_id = "measurement-key-unknown".into();
    let env_other = envelope::sign(&by_other, &pairs, &other).unwrap();
    assert_eq!(
        verify_at(&env_other, &pairs, now_ns()).unwrap_err(),
        vec!["signer_key_id: \"measurement-key-unknown\" is not a trusted key".to_owned()]
    );
    // A trusted key id with another key's signature.
    let forged = envelope::sign(&claims(NOW), &pairs, &other).unwrap();
    assert_eq!(
        verify_at(&forged, &pairs, now_ns()).unwrap_err(),
        vec![format!("signature: does not verify under {KEY_ID}")]
    );

    let mut edited = env.clone();
    edited["candidate_version"] = json!("cand-3");
    let why = verify_at(&edited, &pairs, now_ns()).unwrap_err();
    assert!(why.contains(&"candidate_version: \"cand-3\" but \"cand-2\" is expected".to_owned()), "{why:?}");
    assert!(why.contains(&format!("signature: does not verify under {KEY_ID}")), "{why:?}");

    let mut extra = env.clone();
    extra["note"] = json!("hi");
    assert!(verify_at(&extra, &pairs, now_ns()).unwrap_err()[0].starts_with("envelope: exactly the 12 v2 keys"));

    let keys = TrustedKeys::single(KEY_ID, key().verifying_key());
    let expected = Expected {
        now_ns: now_ns(),
        candidate_version: "cand-2",
        corpus_version: "1.0.0",
        runtime_digest: RUNTIME,
        keys: &keys,
    };
    let why = envelope::verify(&env, &pairs, &expected, &|id| (id == RUN).then_some(42)).unwrap_err();
    assert_eq!(
        why,
        vec![format!("measurement_run_id: {RUN} was already consumed (journal seq 42); a run is used once")]
    );
}

#[test]
fn keys_round_trip_through_pem_and_only_ed25519_is_trusted() {
    let k = key();
    let back = envelope::signing_key_from_pem(&envelope::signing_key_to_pem(&k)).unwrap();
    assert_eq!(back.to_bytes(), k.to_bytes());
    let public = envelope::public_key_to_pem(&k.verifying_key());
    assert_eq!(envelope::public_key_from_pem(&public).unwrap(), k.verifying_key());
    // An RSA SubjectPublicKeyInfo is refused, not guessed at.
    let rsa = "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAMEPa0PaOMJ9dLQ8sCPhbdzbqHHRLgqY\nP7L2cdq+xknCv7e3i4q6b8V2m0b1t2JmpdXzTKLeoGdtz5z8wWT9bDkCAwEAAQ==\n-----END PUBLIC KEY-----\n";
    assert!(envelope::public_key_from_pem(rsa).unwrap_err().to_string().contains("only Ed25519"));
    assert!(TrustedKeys::from_json(&json!({"lab": public})).is_err(), "key ids are measurement-key-…");
    assert!(TrustedKeys::from_json(&json!({KEY_ID: public})).is_ok());
}

fn opts(keys: &TrustedKeys) -> Options<'_> {
    Options {
        thresholds: Thresholds::default(),
        resamples: 2_000,
        evaluation_id: None,
        stage: None,
        expected: Expected {
            now_ns: now_ns(),
            candidate_version: "cand-2",
            corpus_version: "",
            runtime_digest: RUNTIME,
            keys,
        },
        engine_version: "test",
        recordable: true,
    }
}

/// Claims for pairs measured on `corpus`: its version bound to its digest.
fn claims_on(corpus: &Value) -> Claims {
    let mut c = claims(NOW);
    c.corpus_version = corpus::envelope_version("1.0.0", &corpus::digest(corpus));
    c
}

#[test]
fn ceo_13_synthetic_pairs_never_promote_and_measured_ones_under_a_trusted_envelope_do() {
    let keys = TrustedKeys::single(KEY_ID, key().verifying_key());
    let schema: Value = serde_json::from_str(include_str!("../../schemas/promotion-evaluation.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let corpus = measured_corpus();
    let doc = pairs_for(&corpus, "measured");
    let env = envelope::sign(&claims_on(&corpus), &doc["pairs"], &key()).unwrap();
    let (eval, trusted) = promote::evaluate(&corpus, &doc, Some(&env), &opts(&keys), &|_| None).unwrap();
    let bad: Vec<String> = eval
        .evaluation
        .gates
        .iter()
        .filter(|g| g.verdict != strata_engine::promotion::gates::Verdict::Pass)
        .map(|g| format!("{}: {}", g.gate, g.reason))
        .collect();
    assert!(eval.evaluation.promote, "{bad:?}");
    assert_eq!(trusted.unwrap().measurement_run_id, RUN);
    let v = serde_json::to_value(&eval).unwrap();
    assert!(validator.is_valid(&v), "{:?}", validator.iter_errors(&v).map(|e| e.to_string()).collect::<Vec<_>>());
    assert_eq!(v["gates"][0]["gate"], "provenance");

    // The same numbers, marked synthetic: every statistical gate still passes, provenance fails.
    let synthetic = pairs_for(&corpus, "synthetic");
    let env = envelope::sign(&claims_on(&corpus), &synthetic["pairs"], &key()).unwrap();
    let (eval, trusted) = promote::evaluate(&corpus, &synthetic, Some(&env), &opts(&keys), &|_| None).unwrap();
    assert!(!eval.evaluation.promote && trusted.is_none());
    assert!(eval.evaluation.gates[1..].iter().all(|g| g.verdict == strata_engine::promotion::gates::Verdict::Pass));
    assert!(
        eval.evaluation.gates[0].reason.contains("40 pair(s) are not measured"),
        "{}",
        eval.evaluation.gates[0].reason
    );

    // Measured pairs on the bundled synthetic corpus never promote either.
    let on_synthetic = pairs_for(&bundled(), "measured");
    let env = envelope::sign(&claims_on(&bundled()), &on_synthetic["pairs"], &key()).unwrap();
    let (eval, _) = promote::evaluate(&bundled(), &on_synthetic, Some(&env), &opts(&keys), &|_| None).unwrap();
    assert!(!eval.evaluation.promote);
    assert_eq!(eval.evaluation.gates[0].reason, "the corpus is synthetic; synthetic pairs never promote");
    let v = serde_json::to_value(&eval).unwrap();
    assert!(validator.is_valid(&v));
    // Flipping the corpus's flag (and the digest the pairs name) breaks the signed binding.
    let mut flipped = bundled();
    flipped["synthetic"] = json!(false);
    let mut relabelled = on_synthetic.clone();
    relabelled["corpus"]["digest"] = json!(corpus::digest(&flipped));
    let (eval, trusted) = promote::evaluate(&flipped, &relabelled, Some(&env), &opts(&keys), &|_| None).unwrap();
    assert!(!eval.evaluation.promote && trusted.is_none());
    assert!(
        eval.evaluation.gates[0].reason.starts_with("corpus_version: \"1.0.0+"),
        "{}",
        eval.evaluation.gates[0].reason
    );

    // Each task is measured once.
    let mut twice = pairs_for(&corpus, "measured");
    let first = twice["pairs"][0].clone();
    twice["pairs"].as_array_mut().unwrap().push(first);
    let err = promote::evaluate(&corpus, &twice, None, &opts(&keys), &|_| None).unwrap_err();
    assert!(err.to_string().contains("measured twice"), "{err}");
    // Pairs measured on another corpus are refused outright.
    let err = promote::evaluate(&corpus, &on_synthetic, Some(&env), &opts(&keys), &|_| None).unwrap_err();
    assert!(err.to_string().contains("not on the corpus given"), "{err}");
}

#[test]
fn ceo_13_the_bundled_corpus_checks_and_a_broken_one_lists_every_problem() {
    let report = corpus::check(&bundled()).unwrap();
    assert!(report.ok, "{:?}", report.problems);
    assert!(report.synthetic);
    assert_eq!(report.n_tasks, 40);
    assert_eq!(report.oracles_agreeing, 40);
    assert!(report.strata.values().all(|n| *n == 8));

    let mut broken = bundled();
    let tasks = broken["tasks"].as_array_mut().unwrap();
    tasks.remove(0); // small-tier2 down to 7, the corpus to 39
    tasks[0]["oracle"]["mode"] = json!("resume"); // small-tier2-02 expects local
    tasks[1]["id"] = tasks[2]["id"].clone();
    tasks[3]["stratum"] = json!("backend-refactor"); // id says small-tier2
    let report = corpus::check(&broken).unwrap();
    assert!(!report.ok);
    let rules: Vec<(Option<&str>, &str)> = report.problems.iter().map(|p| (p.task.as_deref(), p.rule)).collect();
    assert!(rules.contains(&(Some("small-tier2-02"), "oracle")), "{rules:?}");
    assert!(rules.contains(&(Some("small-tier2-04"), "unique-id")), "{rules:?}");
    assert!(rules.contains(&(Some("small-tier2-05"), "stratum")), "{rules:?}");
    assert!(rules.contains(&(None, "size")), "{rules:?}");
    assert!(corpus::check(&json!({"schema": "strata.eval-corpus/v1"})).is_err());
}

#[test]
fn ceo_19_promote_records_each_run_once_in_the_journal_and_a_second_process_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = strata_bin!();
    let out =
        strata(bin, dir, &["eval", "keygen", "--key-id", KEY_ID, "--out", &dir.join("k.pem").display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let public = std::fs::read_to_string(dir.join("k.pem.pub")).unwrap();
    let keys = write(dir, "keys.json", &json!({ KEY_ID: public }));
    let corpus = measured_corpus();
    let corpus_file = write(dir, "corpus.json", &corpus);
    let pairs_file = write(dir, "pairs.json", &pairs_for(&corpus, "measured"));
    let sign = |measured_at: &str, run: &str| {
        let out = strata(
            bin,
            dir,
            &[
                "eval",
                "sign",
                "--pairs",
                &pairs_file,
                "--key",
                &dir.join("k.pem").display().to_string(),
                "--key-id",
                KEY_ID,
                "--candidate-version",
                "cand-2",
                "--runtime-digest",
                RUNTIME,
                "--measured-at",
                measured_at,
                "--run-id",
                run,
            ],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let env: Value = serde_json::from_slice(&out.stdout).unwrap();
        write(dir, &format!("{run}.json"), &env)
    };
    let now = format_rfc3339(
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()).unwrap(),
    );
    let env = sign(&now, RUN);
    // The journal must exist: a run consumed in a journal made up on the spot protects nothing.
    let missing = dir.join("nowhere").display().to_string();
    let mut args = promote_args(&corpus_file, &pairs_file, &env, &keys, "cand-2", RUNTIME);
    args.extend(["--journal", &missing]);
    let out = strata(bin, dir, &args);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("create it with `strata init`"));
    let ws = dir.join("ws");
    std::fs::create_dir(&ws).unwrap();
    assert!(strata(bin, &ws, &["init", "--durability", "process"]).status.success());
    let journal = ws.display().to_string();
    let promote = |env: &str, journal: Option<&str>| {
        let mut args = vec!["--json"];
        args.extend(promote_args(&corpus_file, &pairs_file, env, &keys, "cand-2", RUNTIME));
        if let Some(j) = journal {
            args.extend(["--journal", j]);
        }
        let out = strata(bin, dir, &args);
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), v, out.stdout)
    };
    // Without a journal nothing can be recorded, so nothing is trusted; twice, byte for byte.
    let (code, first, bytes_1) = promote(&env, None);
    let (_, _, bytes_2) = promote(&env, None);
    assert_eq!(code, Some(3));
    assert_eq!(bytes_1, bytes_2, "the same input evaluates to byte-identical JSON");
    assert!(first["gates"][0]["reason"].as_str().unwrap().contains("no journal"));

    let (code, v, _) = promote(&env, Some(&journal));
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["promote"], true);
    let schema: Value = serde_json::from_str(include_str!("../../schemas/promotion-evaluation.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(
        validator.is_valid(&v) && validator.is_valid(&first),
        "what `eval promote --json` writes matches its schema"
    );
    assert_eq!(v["measurement_run_id"], RUN);
    // A second process, same envelope: the journal remembers the run.
    let (code, v, _) = promote(&env, Some(&journal));
    assert_eq!(code, Some(3));
    let reason = v["gates"][0]["reason"].as_str().unwrap();
    assert!(reason.contains(&format!("{RUN} was already consumed")), "{reason}");

    // A stale envelope fails provenance and consumes nothing.
    let old =
        format_rfc3339(i64::try_from(parse_rfc3339(&now, "now").unwrap()).unwrap() - 31 * 24 * 3600 * 1_000_000_000);
    let stale = sign(&old, "measurement-00000000000000aa");
    let (code, v, _) = promote(&stale, Some(&journal));
    assert_eq!(code, Some(3));
    assert!(v["gates"][0]["reason"].as_str().unwrap().contains("older than 30 days"));
    let out = strata(bin, dir, &["eval", "corpus", "check", &corpus_file]);
    assert!(out.status.success());
}
