//! Context-efficient dispatch benchmarks, each against a baseline measured in the same run.
//!
//! * Route decision in process: typed facts read from the request JSON, paths canonicalised,
//!   the decision made (and, separately, the decision alone on facts already read). Baseline: the naive implementation the issue names, which compiles the
//!   routing-facts JSON Schema and the role and path regexes on every call before deciding.
//! * Capsule seal of an ~8 KiB capsule (schema, privacy scan, canonical JSON, hash), against the
//!   naive pipeline that compiles the schema and every privacy regex per call.
//! * `strata ce route` as a whole process (spawn, read stdin, decide, one line out), against the
//!   floor of spawning a process that does nothing (`true`).
//!
//! Requests: 64 seeded ones with two to four owned paths, up to six active writers of three
//! paths each, lineage, inheritance and team facts.
//!
//! Run: `cargo bench -p strata-benches --bench ce`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::LazyLock;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use strata_benches::{Ratio, Samples, report, timed_per_call};
use strata_engine::ce::paths::Workspace;
use strata_engine::ce::router::{RouteFacts, route};

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);

fn next(x: &mut u64, n: u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x % n
}

fn requests() -> Vec<Value> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let dirs = ["src/api", "src/web", "src/core", "docs", "tests", "lib/db", "lib/auth", "tools"];
    let files = ["mod.rs", "lib.rs", "handler.rs", "Types.rs", "README.md"];
    let paths = |x: &mut u64, n: u64| -> Vec<String> {
        (0..n).map(|_| format!("{}/{}", dirs[next(x, 8) as usize], files[next(x, 5) as usize])).collect()
    };
    (0..64)
        .map(|_| {
            let k = next(&mut x, 2);
            let owned = paths(&mut x, 2 + k);
            let writers: Vec<Value> = (0..next(&mut x, 7))
                .map(|i| json!({"owned_files": paths(&mut x, 3), "lineage_id": format!("L-{i}")}))
                .collect();
            let r = next(&mut x, 60);
            json!({
                "task_id": "T-1", "role": if r.is_multiple_of(2) { "builder" } else { "analyst" },
                "owned_files": owned, "active_writers": writers,
                "nesting_depth": r % 2, "coupling": "moderate", "sensitivity": "normal",
                "lineage": {"compatible": r.is_multiple_of(3), "resumable": true, "role": "builder", "lineage_id": "L-9"},
                "active_inherited_writers": r % 3,
                "inheritance": {"affinity": "high", "safe": true, "within_budget": !r.is_multiple_of(5), "full_supported": true},
                "team": {"coordination_required": r.is_multiple_of(4), "peers": 2, "provider_supported": true, "safe": true,
                         "sensitivity_approved": true, "within_budget": true, "latency_ratio": 0.5,
                         "scopes": [{"owned_files": ["ui"]}, {"owned_files": ["server"]}]},
                "capsule_sufficient": false
            })
        })
        .collect()
}

const ROUTING_SCHEMA: &str = include_str!("../../schemas/routing-facts.schema.json");

/// The naive implementation: validator and regexes compiled per call, then the same decision.
fn naive_route(v: &Value, ws: &Workspace) -> Value {
    let schema: Value = serde_json::from_str(ROUTING_SCHEMA).expect("schema");
    let validator = jsonschema::validator_for(&schema).expect("compiles");
    assert!(validator.is_valid(v));
    let writer_role = regex::Regex::new(r"(?i)(^|[-_])(builder|writer|implementer)($|[-_])").expect("regex");
    let unsafe_path =
        regex::Regex::new(r"^(/|[A-Za-z]:|[A-Za-z][A-Za-z0-9+.-]*:)|(^|/)\.\.(/|$)|[\x00-\x1f\x7f]").expect("regex");
    let role = v["role"].as_str().unwrap_or("");
    std::hint::black_box(writer_role.is_match(role));
    for p in v["owned_files"].as_array().into_iter().flatten() {
        std::hint::black_box(unsafe_path.is_match(p.as_str().unwrap_or("")));
    }
    let f = RouteFacts::from_json(v, ws).expect("facts");
    route(&f).expect("routes").to_json()
}

fn bench_route(c: &mut Criterion) {
    let reqs = requests();
    let ws = Workspace::default();
    for r in &reqs {
        let ours = route(&RouteFacts::from_json(r, &ws).expect("facts")).expect("routes").to_json();
        assert_eq!(ours, naive_route(r, &ws), "the baseline decides the same");
    }
    timed_per_call(c, &SAMPLES, "ce-route", "strata-route", 2, |i| {
        let f = RouteFacts::from_json(&reqs[i % reqs.len()], &ws).expect("facts");
        std::hint::black_box(route(&f).expect("routes"));
    });
    let typed: Vec<RouteFacts> = reqs.iter().map(|r| RouteFacts::from_json(r, &ws).expect("facts")).collect();
    timed_per_call(c, &SAMPLES, "ce-route", "strata-route-typed", 2, |i| {
        std::hint::black_box(route(&typed[i % typed.len()]).expect("routes"));
    });
    timed_per_call(c, &SAMPLES, "ce-route", "naive-route", 2, |i| {
        std::hint::black_box(naive_route(&reqs[i % reqs.len()], &ws));
    });
}

/// A draft capsule whose sealed canonical form is a little over 8 KiB.
fn capsule_8k() -> Value {
    let mut c: Value =
        serde_json::from_str(include_str!("../../tests/fixtures/ce/capsule-draft.json")).expect("fixture");
    c["risks"] = json!(
        (0..16)
            .map(|i| format!(
                "Risk {i}: the currency table for region {i} may lag the ledger by a day; totals must not round twice."
            ))
            .collect::<Vec<_>>()
    );
    c["constraints"] = json!(
        (0..16)
            .map(|i| format!(
                "Constraint {i}: keep amounts in integer minor units and never widen the public API of module {i}."
            ))
            .collect::<Vec<_>>()
    );
    c["approved_decisions"] = json!(
        (0..16)
            .map(|i| format!(
                "Decision {i}: rounding is half-even at the last step only, per the approved spec section {i}."
            ))
            .collect::<Vec<_>>()
    );
    c["evidence"] = json!((0..30).map(|i| json!({"kind": "test", "summary": format!("case {i}: ledger::total({i}) returned the wrong sum for mixed EUR and JPY inputs")})).collect::<Vec<_>>());
    c
}

/// The naive pipeline: the schema and every privacy regex compiled per call, each regex run over
/// each string, then the hash.
fn naive_seal(c: &Value) -> String {
    let schema: Value =
        serde_json::from_str(include_str!("../../schemas/context-capsule.schema.json")).expect("schema");
    let validator = jsonschema::validator_for(&schema).expect("compiles");
    let mut draft = c.clone();
    draft["capsule_hash"] = json!(format!("sha256:{}", "0".repeat(64)));
    assert!(validator.is_valid(&draft));
    let regexes: Vec<regex::Regex> =
        strata_engine::ce::privacy::RULES.iter().map(|r| regex::Regex::new(r.regex).expect("regex")).collect();
    fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    strings(c, &mut all);
    for s in all {
        for re in &regexes {
            std::hint::black_box(re.is_match(s));
        }
    }
    let json = strata_engine::ce::json::to_string_without(c, "capsule_hash");
    strata_engine::ce::json::sha256_tagged(json.as_bytes())
}

fn bench_capsule(c: &mut Criterion) {
    let draft = capsule_8k();
    let seal = || {
        strata_engine::ce::wire::capsule::seal(&strata_engine::ce::wire::capsule::SealRequest {
            capsule: &draft,
            max_bytes: 12_288,
            artifact_path: None,
            artifact_roots: vec![],
        })
        .expect("seals")
    };
    let sealed = seal();
    SAMPLES.value("capsule-bytes", sealed.bytes as f64);
    assert_eq!(sealed.hash, naive_seal(&draft), "the baseline hashes the same");
    timed_per_call(c, &SAMPLES, "ce-capsule", "strata-capsule-seal", 2, |_| {
        std::hint::black_box(seal());
    });
    timed_per_call(c, &SAMPLES, "ce-capsule", "naive-capsule-seal", 2, |_| {
        std::hint::black_box(naive_seal(&draft));
    });
}

fn bench_process(c: &mut Criterion) {
    let reqs: Vec<String> = requests().iter().map(|r| json!({"input": r}).to_string()).collect();
    let bin = env!("CARGO_BIN_EXE_strata-bench-cli");
    let run = |input: &str| {
        let mut child = Command::new(bin)
            .args(["ce", "route"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        out.stdout
    };
    timed_per_call(c, &SAMPLES, "ce-process", "strata-ce-route-process", 3, |i| {
        std::hint::black_box(run(&reqs[i % reqs.len()]));
    });
    timed_per_call(c, &SAMPLES, "ce-process", "spawn-true-process", 3, |_| {
        let st = Command::new("true").status().expect("true runs");
        assert!(st.success());
    });
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    println!("\n== ce: p50 over every timed call");
    for (label, v, target) in [
        ("route decision, in process (facts read from JSON + decide)", m("strata-route-us"), "≤ 5 µs"),
        ("  of which the decision on typed facts", m("strata-route-typed-us"), "-"),
        ("naive route (schema + regexes compiled per call)", m("naive-route-us"), "-"),
        ("capsule seal, ~8 KiB (schema, privacy scan, hash)", m("strata-capsule-seal-us"), "≤ 100 µs"),
        ("naive capsule seal (schema + regexes compiled per call)", m("naive-capsule-seal-us"), "-"),
        ("`strata ce route`, whole process", m("strata-ce-route-process-us"), "≤ 5000 µs"),
        ("spawning `true` (process floor)", m("spawn-true-process-us"), "-"),
    ] {
        println!("  {label:<52} {v:>10.1} µs  (target {target})");
    }
    report(
        "ce",
        &SAMPLES,
        &[Ratio {
            label: "naive route / strata route",
            ours: "naive-route-us",
            baseline: "strata-route-us",
            target: 1.0,
        }],
        &[
            ("route decision p50 (µs)", m("strata-route-us"), "µs"),
            ("decision on typed facts p50 (µs)", m("strata-route-typed-us"), "µs"),
            ("naive route p50 (µs)", m("naive-route-us"), "µs"),
            ("capsule seal p50 (µs)", m("strata-capsule-seal-us"), "µs"),
            ("naive capsule seal p50 (µs)", m("naive-capsule-seal-us"), "µs"),
            ("sealed capsule size (bytes)", m("capsule-bytes"), "bytes"),
            ("strata ce route process p50 (µs)", m("strata-ce-route-process-us"), "µs"),
            ("spawn true p50 (µs)", m("spawn-true-process-us"), "µs"),
        ],
    );
}

criterion_group!(benches, bench_route, bench_capsule, bench_process, summary);
criterion_main!(benches);
