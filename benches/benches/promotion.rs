//! Promotion and telemetry speed, each against a baseline measured in the same run:
//!
//! * A full evaluation of 1,000 pairs (200 per stratum) with 10,000 bootstrap resamples per
//!   bootstrapped gate, against a naive evaluator that clones every pair (strings, findings)
//!   into each resample and sorts the whole records. Target: ≤ 2 s.
//! * The whole `strata eval promote` evaluation of the same kind of pairs on a 1,000-task corpus:
//!   corpus check with every oracle replayed, pairs bound to the corpus, the Ed25519 envelope
//!   verified over the canonical pairs, then the gates (reported; the target applies to it too).
//! * Telemetry normalisation of one efficiency event, against the naive way (the event schema
//!   compiled per call before normalising). Target: p50 ≤ 20 µs.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use strata_benches::{Ratio, Samples, report, timed_per_call};
use strata_engine::promotion::gates::{Arm, Finding, Pair, STRATA, Thresholds, evaluate};
use strata_engine::promotion::stats;

static SAMPLES: std::sync::LazyLock<Samples> = std::sync::LazyLock::new(Samples::default);

const RESAMPLES: usize = 10_000;

fn pairs() -> Vec<Pair> {
    (0..1_000u64)
        .map(|i| {
            let b = 1_000_000 + 7_919 * (i % 97);
            let c = b * (5_500 + 37 * (i % 83)) / 10_000;
            let arm = |cost: u64, wall: u64, q: f64, fp: &str| Arm {
                cost_micros: cost,
                wall_ms: wall,
                quality: q,
                rework: (i % 5) as u32,
                findings: vec![Finding { fingerprint: format!("{fp}-{}", i % 13), severity: "medium".into() }],
                telemetry_cost_micros: Some(cost),
            };
            Pair {
                task_id: format!("task-{i:04}"),
                stratum: STRATA[(i % 5) as usize].to_owned(),
                baseline: arm(b, 20_000 + 11 * (i % 71), 88.0, "b"),
                candidate: arm(c, 15_000 + 13 * (i % 67), 87.5 + (i % 3) as f64 * 0.5, "c"),
            }
        })
        .collect()
}

/// The same two bootstrapped statistics, naively: each resample clones whole pairs.
fn naive_bootstrap(pairs: &[Pair]) -> (f64, f64) {
    let mut by: std::collections::BTreeMap<String, Vec<Pair>> = std::collections::BTreeMap::new();
    for p in pairs {
        by.entry(p.stratum.clone()).or_default().push(p.clone());
    }
    let strata: Vec<Vec<Pair>> = by.into_values().collect();
    let p75 = |s: &[Pair]| {
        let mut v: Vec<Pair> = s.to_vec();
        v.sort_by(|a, b| {
            (a.candidate.cost_micros as f64 / a.baseline.cost_micros as f64)
                .total_cmp(&(b.candidate.cost_micros as f64 / b.baseline.cost_micros as f64))
        });
        let r: Vec<f64> = v.iter().map(|p| p.candidate.cost_micros as f64 / p.baseline.cost_micros as f64).collect();
        stats::quantile7(&r, 0.75).unwrap_or(f64::NAN)
    };
    let p95 = |s: &[Pair]| {
        let mut b: Vec<Pair> = s.to_vec();
        b.sort_by_key(|p| p.baseline.cost_micros);
        let mut c: Vec<Pair> = s.to_vec();
        c.sort_by_key(|p| p.candidate.cost_micros);
        let bq = stats::quantile7(&b.iter().map(|p| p.baseline.cost_micros as f64).collect::<Vec<_>>(), 0.95);
        let cq = stats::quantile7(&c.iter().map(|p| p.candidate.cost_micros as f64).collect::<Vec<_>>(), 0.95);
        cq.unwrap_or(f64::NAN) / bq.unwrap_or(f64::NAN)
    };
    let a = stats::bootstrap_bounds(&strata, RESAMPLES, [1; 32], 0.05, p75).map_or(f64::NAN, |x| x.0);
    let b = stats::bootstrap_bounds(&strata, RESAMPLES, [2; 32], 0.05, p95).map_or(f64::NAN, |x| x.1);
    (a, b)
}

fn bench_evaluation(c: &mut Criterion) {
    let pairs = pairs();
    timed_per_call(c, &SAMPLES, "promotion", "strata-evaluate-1000x10000", 25, |_| {
        let e = evaluate(&pairs, &Thresholds::default(), "bench", RESAMPLES).expect("valid corpus");
        std::hint::black_box(e);
    });
    timed_per_call(c, &SAMPLES, "promotion", "naive-bootstrap-1000x10000", 25, |_| {
        std::hint::black_box(naive_bootstrap(&pairs));
    });
}

/// A 1,000-task corpus (the bundled tasks, cycled under anonymous ids), measured pairs on it,
/// and an envelope over them signed with a fixed key.
fn full_inputs() -> (Value, Value, Value, strata_engine::promotion::envelope::TrustedKeys) {
    use strata_engine::promotion::{corpus, envelope};
    let mut doc: Value =
        serde_json::from_str(include_str!("../../corpus/synthetic.json")).expect("the bundled corpus is JSON");
    let templates = doc["tasks"].as_array().cloned().unwrap_or_default();
    let tasks: Vec<Value> = (0..1_000usize)
        .map(|i| {
            let mut t = templates[i % templates.len()].clone();
            t["id"] = json!(format!("anon-{i:016x}"));
            t
        })
        .collect();
    doc["tasks"] = json!(tasks);
    doc["synthetic"] = json!(false);
    let digest = corpus::digest(&doc);
    let pairs: Vec<Value> = pairs()
        .iter()
        .zip(tasks.iter())
        .map(|(p, t)| {
            let arm = |a: &Arm| {
                json!({"cost_micros": a.cost_micros, "wall_ms": a.wall_ms, "quality": a.quality,
                "rework": a.rework, "findings": [], "telemetry_cost_micros": a.telemetry_cost_micros})
            };
            json!({"task_id": t["id"], "stratum": t["stratum"],
                "provenance": {"kind": "measured", "empirical": true, "promotion_authorized": true},
                "baseline": arm(&p.baseline), "candidate": arm(&p.candidate)})
        })
        .collect();
    let pairs_doc = json!({"schema": "strata.paired-results/v1",
        "corpus": {"name": doc["name"], "version": doc["version"], "digest": digest}, "pairs": pairs});
    let key = envelope::signing_key_from_seed([3; 32]);
    let claims = envelope::Claims {
        candidate_version: "bench".into(),
        corpus_version: corpus::envelope_version("1.0.0", &digest),
        runtime_digest: format!("sha256:{}", "a".repeat(64)),
        measured_at: "2026-11-30T00:00:00Z".into(),
        measurement_run_id: "measurement-00000000000000bb".into(),
        signer_key_id: "measurement-key-bench".into(),
        promotion_authorized: true,
    };
    let env = envelope::sign(&claims, &pairs_doc["pairs"], &key).expect("signs");
    let keys = envelope::TrustedKeys::single("measurement-key-bench", key.verifying_key());
    (doc, pairs_doc, env, keys)
}

fn bench_full(c: &mut Criterion) {
    use strata_engine::promotion::{envelope, promote};
    let (corpus, pairs_doc, env, keys) = full_inputs();
    let runtime = format!("sha256:{}", "a".repeat(64));
    let now_ns = strata_engine::ce::time::parse_rfc3339("2026-11-30T01:00:00Z", "now").expect("time");
    let opts = promote::Options {
        thresholds: Thresholds::default(),
        resamples: RESAMPLES,
        evaluation_id: Some("bench"),
        stage: None,
        expected: envelope::Expected {
            now_ns,
            candidate_version: "bench",
            corpus_version: "",
            runtime_digest: &runtime,
            keys: &keys,
        },
        engine_version: "bench",
        recordable: true,
    };
    timed_per_call(c, &SAMPLES, "promotion", "strata-promote-1000x10000", 10, |_| {
        let (doc, trusted) = promote::evaluate(&corpus, &pairs_doc, Some(&env), &opts, &|_| None).expect("evaluates");
        assert!(trusted.is_some(), "the envelope verifies");
        std::hint::black_box(doc);
    });
}

fn event(i: usize) -> Value {
    json!({"event": "dispatch_decision", "observed_at": "2026-11-30T10:00:00Z", "provider": "claude",
        "mode": "fresh-capsule", "reason_codes": ["INDEPENDENT_CAPSULE", "LOCAL_CHEAPER"],
        "task_corpus_id": format!("backend-refactor-{:02}", i % 40),
        "logical": {"capsule_bytes": 2048 + i, "prompt_bytes": 9000}, "billed": {"output_tokens": 1200, "accounting_source": "provider-reported"},
        "outcome": {"verify_passed": 3, "verify_total": 4}})
}

fn bench_telemetry(c: &mut Criterion) {
    let events: Vec<Value> = (0..64).map(event).collect();
    timed_per_call(c, &SAMPLES, "telemetry", "strata-normalise", 3, |i| {
        std::hint::black_box(strata_engine::ce::wire::telemetry::normalise(&events[i % events.len()]).expect("valid"));
    });
    let schema: Value =
        serde_json::from_str(include_str!("../../schemas/efficiency-event.schema.json")).expect("schema");
    timed_per_call(c, &SAMPLES, "telemetry", "naive-normalise", 3, |i| {
        let v = jsonschema::validator_for(&schema).expect("compiles");
        let e = &events[i % events.len()];
        std::hint::black_box(v.is_valid(e));
        std::hint::black_box(strata_engine::ce::wire::telemetry::normalise(e).expect("valid"));
    });
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    println!("\n== promotion: p50 over every timed call");
    for (label, v, unit, target) in [
        ("evaluation, 1,000 pairs x 10,000 resamples", m("strata-evaluate-1000x10000-us") / 1e6, "s", "≤ 2 s"),
        ("naive bootstrap of the two bootstrapped gates", m("naive-bootstrap-1000x10000-us") / 1e6, "s", "-"),
        ("whole eval promote (corpus, envelope, gates)", m("strata-promote-1000x10000-us") / 1e6, "s", "≤ 2 s"),
        ("telemetry normalisation", m("strata-normalise-us"), "µs", "≤ 20 µs"),
        ("naive normalisation (schema compiled per call)", m("naive-normalise-us"), "µs", "-"),
    ] {
        println!("  {label:<52} {v:>10.3} {unit}  (target {target})");
    }
    report(
        "promotion",
        &SAMPLES,
        &[
            Ratio {
                label: "naive bootstrap / strata evaluation",
                ours: "naive-bootstrap-1000x10000-us",
                baseline: "strata-evaluate-1000x10000-us",
                target: 1.0,
            },
            Ratio {
                label: "naive normalisation / strata normalisation",
                ours: "naive-normalise-us",
                baseline: "strata-normalise-us",
                target: 1.0,
            },
        ],
        &[
            ("evaluation p50 (s)", m("strata-evaluate-1000x10000-us") / 1e6, "s"),
            ("whole eval promote p50 (s)", m("strata-promote-1000x10000-us") / 1e6, "s"),
            ("telemetry normalisation p50 (µs)", m("strata-normalise-us"), "µs"),
        ],
    );
}

criterion_group!(benches, bench_evaluation, bench_full, bench_telemetry, summary);
criterion_main!(benches);
