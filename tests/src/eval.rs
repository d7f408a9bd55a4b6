//! Evaluation fixtures: the bundled corpus as a measured corpus, and paired results on it whose
//! candidate clearly passes every statistical gate.

use serde_json::{Value, json};
use strata_engine::promotion::corpus;

/// The bundled synthetic corpus.
pub fn bundled_corpus() -> Value {
    serde_json::from_str(include_str!("../../corpus/synthetic.json")).expect("the bundled corpus is JSON")
}

/// The bundled tasks as a measured (not synthetic) corpus named `lab-corpus`.
pub fn measured_corpus() -> Value {
    let mut c = bundled_corpus();
    c["name"] = json!("lab-corpus");
    c["synthetic"] = json!(false);
    c
}

/// Pairs of provenance `kind` for the first `n` tasks of `corpus`: the candidate costs 60% and
/// takes 70% of a varied baseline, quality equal or a point better, no rework, telemetry exact.
pub fn pairs_for(corpus: &Value, kind: &str, n: usize) -> Value {
    let digest = corpus::digest(corpus);
    let tasks = corpus["tasks"].as_array().map(Vec::as_slice).unwrap_or_default();
    let pairs: Vec<Value> = tasks
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, t)| {
            let cost = 100_000 + 37_000 * (i as u64 % 11);
            let wall = 20_000 + 9_000 * (i as u64 % 7);
            let q = 80 + i as u64 % 10;
            let arm = |c: u64, w: u64, q: u64| {
                json!({"cost_micros": c, "wall_ms": w, "quality": q, "rework": 0, "findings": [], "telemetry_cost_micros": c})
            };
            json!({
                "task_id": t["id"], "stratum": t["stratum"],
                "provenance": {"kind": kind, "empirical": kind == "measured", "promotion_authorized": kind == "measured"},
                "baseline": arm(cost, wall, q),
                "candidate": arm(cost * 6 / 10, wall * 7 / 10, q + i as u64 % 2),
            })
        })
        .collect();
    json!({
        "schema": "strata.paired-results/v1",
        "corpus": {"name": corpus["name"], "version": corpus["version"], "digest": digest},
        "pairs": pairs,
    })
}

/// Writes `v` as pretty JSON to `dir/name`; returns the path as a string for arguments.
pub fn write_json(dir: &std::path::Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).expect("JSON")).expect("write a test file");
    p.display().to_string()
}

/// `eval promote` with these files and the expected candidate version and runtime digest; add
/// `--journal`, `--rollout` or `--json` after (or before) as needed.
pub fn promote_args<'a>(
    corpus: &'a str,
    pairs: &'a str,
    envelope: &'a str,
    keys: &'a str,
    candidate: &'a str,
    runtime: &'a str,
) -> Vec<&'a str> {
    vec![
        "eval",
        "promote",
        "--corpus",
        corpus,
        "--pairs",
        pairs,
        "--envelope",
        envelope,
        "--trusted-keys",
        keys,
        "--candidate-version",
        candidate,
        "--runtime-digest",
        runtime,
    ]
}
