//! Knowledge-base benchmarks, each against a naive baseline measured in the same run.
//!
//! * intake of the seed-scale fixture into a fresh sled journal (time; peak memory of `strata
//!   intake` as a child process);
//! * impact closure at seed scale and on a generated 100,000-artifact graph, against a naive BFS
//!   that re-reads (parses) each artifact's JSON at every hop;
//! * validation of the 100,000-artifact graph, against a naive validator that parses the JSON of
//!   both ends of every reference.
//!
//! Run: `cargo bench -p strata-benches --bench kb`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;
use strata_benches::{Samples, report, target_dir};
use strata_engine::kb::fixture::{Fixture, FixtureSpec, generate};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake;
use strata_engine::kb::kind::ArtifactKey;
use strata_engine::kb::links::{Flow, LINKS};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::{Durability, Journal, OpenOptions};

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);

/// The graph of `fx`, built by applying `artifact.created` records directly (no intake: the
/// 100k graph is a benchmark fixture, not a knowledge base anyone writes by hand).
fn graph_of(fx: &Fixture) -> Graph {
    let mut g = Graph::new();
    for (i, d) in fx.drafts.iter().enumerate() {
        let payload = serde_json::to_vec(&strata_engine::kb::artifact::Created {
            kind: d.key.kind.name().into(),
            id: d.key.id.clone(),
            state: d.state.clone(),
            fields: d.fields.clone(),
            body: d.body.clone(),
            hash: d.content_hash().to_hex(),
            source: None,
        })
        .expect("payload");
        let rec = strata_journal::Record {
            seq: i as u64 + 1,
            id: uuid::Uuid::from_u128(i as u128 + 1),
            stream: "artifact",
            version: 1,
            event_type: "artifact.created",
            schema_version: 1,
            recorded_at_ns: 0,
            causation: None,
            correlation: None,
            payload: &payload,
            prev: strata_journal::Hash::ZERO,
        };
        g.apply_record(&rec).expect("apply");
    }
    g
}

/// The naive store: each artifact's JSON document as text, re-parsed whenever it is read.
fn naive_store(fx: &Fixture) -> HashMap<ArtifactKey, String> {
    fx.drafts.iter().map(|d| (d.key.clone(), d.document().to_string())).collect()
}

/// Naive impact: BFS that parses the current artifact's JSON at every hop and follows its
/// forward impact fields.
fn naive_impact(store: &HashMap<ArtifactKey, String>, start: &ArtifactKey) -> usize {
    let mut seen = BTreeSet::from([start.clone()]);
    let mut queue = VecDeque::from([start.clone()]);
    while let Some(k) = queue.pop_front() {
        let Some(text) = store.get(&k) else { continue };
        let doc: Value = serde_json::from_str(text).expect("json");
        for l in LINKS.iter().filter(|l| l.from == k.kind && l.impact == Flow::Forward) {
            let targets: Vec<String> = match doc.get(l.field) {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                _ => Vec::new(),
            };
            for t in targets {
                let tk = ArtifactKey::new(l.to, &t);
                if store.contains_key(&tk) && seen.insert(tk.clone()) {
                    queue.push_back(tk);
                }
            }
        }
    }
    seen.len() - 1
}

/// Naive validation: parse both ends of every reference; check existence and the inverse.
fn naive_validate(store: &HashMap<ArtifactKey, String>) -> usize {
    let mut findings = 0;
    for (k, text) in store {
        let doc: Value = serde_json::from_str(text).expect("json");
        for l in LINKS.iter().filter(|l| l.from == k.kind) {
            let targets: Vec<String> = match doc.get(l.field) {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                _ => Vec::new(),
            };
            for t in targets {
                let Some(ttext) = store.get(&ArtifactKey::new(l.to, &t)) else {
                    findings += 1;
                    continue;
                };
                if let Some(inv) = l.inverse {
                    let tdoc: Value = serde_json::from_str(ttext).expect("json");
                    let back = match tdoc.get(inv) {
                        Some(Value::String(s)) => s == &k.id,
                        Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(&k.id)),
                        _ => false,
                    };
                    if !back {
                        findings += 1;
                    }
                }
            }
        }
    }
    findings
}

fn bench_impact(c: &mut Criterion, label: &str, fx: &Fixture) {
    let g = graph_of(fx);
    let store = naive_store(fx);
    let starts: Vec<ArtifactKey> =
        fx.of(strata_engine::kb::kind::ArtifactKind::ChangeRequest).map(|d| d.key.clone()).take(64).collect();
    let nodes: Vec<u32> = starts.iter().map(|k| g.node_id(k).expect("node")).collect();
    // Sanity: what the naive BFS reaches, strata reaches too.
    for (k, n) in starts.iter().zip(&nodes) {
        assert!(
            g.impact(*n).iter().filter(|r| r.key.kind != strata_engine::kb::kind::ArtifactKind::Entity).count()
                >= naive_impact(&store, k)
        );
    }
    let mut group = c.benchmark_group(format!("kb-impact-{label}"));
    group.sample_size(30).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(3));
    let mut i = 0usize;
    let name = format!("strata-impact-{label}");
    group.bench_function(&name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let n = nodes[i % nodes.len()];
                i += 1;
                std::hint::black_box(g.impact_closure(n));
            }
            let d = start.elapsed();
            SAMPLES.value(&format!("{name}-us"), d.as_secs_f64() * 1e6 / iters as f64);
            d
        })
    });
    let naive = format!("naive-impact-{label}");
    group.bench_function(&naive, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let k = &starts[i % starts.len()];
                i += 1;
                std::hint::black_box(naive_impact(&store, k));
            }
            let d = start.elapsed();
            SAMPLES.value(&format!("{naive}-us"), d.as_secs_f64() * 1e6 / iters as f64);
            d
        })
    });
    group.finish();
}

fn bench_seed_scale(c: &mut Criterion) {
    let fx = generate(&FixtureSpec::seed_scale(7));
    bench_impact(c, "seed", &fx);
    // Intake of the whole fixture into a fresh sled journal: plan (parse, schema, classify) and
    // one atomic append.
    let files = fx.files();
    let mut group = c.benchmark_group("kb-intake-seed");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(5));
    let mut round = 0u64;
    group.bench_function("strata-intake-seed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                let dir = target_dir().join("strata-bench").join("scratch").join(format!("intake-{round}"));
                let _ = std::fs::remove_dir_all(&dir);
                let j = Journal::create(
                    &dir,
                    "strata.bench/intake",
                    &OpenOptions {
                        durability: Durability::Power,
                        cache_bytes: 64 << 20,
                        holder: "bench".into(),
                        lock_wait: strata_journal::LOCK_WAIT_DEFAULT,
                    },
                )
                .expect("journal");
                let start = Instant::now();
                let g = Graph::new();
                let p = intake::plan(&g, &files, &mut CountingIds::new(1), &FixedClock(0)).expect("plan");
                j.append_multi_blocking(p.appends).expect("append").expect("no conflict");
                let d = start.elapsed();
                total += d;
                SAMPLES.value("strata-intake-seed-ms", d.as_secs_f64() * 1e3);
                drop(j);
                let _ = std::fs::remove_dir_all(&dir);
            }
            total
        })
    });
    group.finish();
    intake_peak_memory(&fx);
}

/// Peak RSS of `strata intake` of the seed fixture, as a child process.
fn intake_peak_memory(fx: &Fixture) {
    let root = target_dir().join("strata-bench").join("scratch").join("intake-rss");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("kb")).expect("dir");
    for f in fx.files() {
        let p = root.join("kb").join(&f.path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(p, &f.bytes).expect("write");
    }
    let bin = env!("CARGO_BIN_EXE_strata-bench-cli");
    let run = |args: &[&str]| std::process::Command::new(bin).arg("--dir").arg(&root).args(args).output().expect("run");
    assert!(run(&["init"]).status.success());
    let out = run(&["--json", "intake", root.join("kb").to_str().expect("path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("intake json");
    if let Some(mib) = v["peak_rss_mib"].as_f64() {
        SAMPLES.value("strata-intake-seed-peak-rss-MiB", mib);
    }
}

fn bench_100k(c: &mut Criterion) {
    // 200 product entities + 1 cross-cutting, 500 specification artifacts each (~100,500), plus
    // change requests, initiatives and issues.
    let fx = generate(&FixtureSpec::scaled(11, 200, 500));
    let g = graph_of(&fx);
    let total = g.len();
    SAMPLES.value("graph-100k-artifacts", total as f64);
    bench_impact(c, "100k", &fx);
    let store = naive_store(&fx);
    let mut group = c.benchmark_group("kb-validate-100k");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(8));
    group.bench_function("strata-validate-100k", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                assert!(g.validate().is_empty());
            }
            let d = start.elapsed();
            SAMPLES.value("strata-validate-100k-ms", d.as_secs_f64() * 1e3 / iters as f64);
            d
        })
    });
    group.bench_function("naive-validate-100k", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                assert_eq!(naive_validate(&store), 0);
            }
            let d = start.elapsed();
            SAMPLES.value("naive-validate-100k-ms", d.as_secs_f64() * 1e3 / iters as f64);
            d
        })
    });
    group.finish();
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    // Ratios of times: baseline time / our time (so > 1 means faster).
    let speedup = |ours: &str, naive: &str| m(naive) / m(ours);
    println!("\n== kb: medians");
    for (label, v, unit, target) in [
        ("impact p50, seed scale", m("strata-impact-seed-us"), "µs", "≤ 1000"),
        ("impact p50, 100k artifacts", m("strata-impact-100k-us"), "µs", "≤ 20000"),
        ("validate, 100k artifacts", m("strata-validate-100k-ms"), "ms", "≤ 2000"),
        ("intake of the seed fixture (plan + one atomic append, power)", m("strata-intake-seed-ms"), "ms", "-"),
        ("peak RSS of `strata intake` of the seed fixture", m("strata-intake-seed-peak-rss-MiB"), "MiB", "-"),
        ("artifacts in the large graph", m("graph-100k-artifacts"), "", "-"),
    ] {
        println!("  {label:<62} {v:>12.1} {unit:<3} (target {target})");
    }
    let speedups = [
        ("impact, seed scale, vs naive JSON-per-hop BFS", speedup("strata-impact-seed-us", "naive-impact-seed-us")),
        ("impact, 100k, vs naive JSON-per-hop BFS", speedup("strata-impact-100k-us", "naive-impact-100k-us")),
        (
            "validate, 100k, vs naive JSON-per-reference validator",
            speedup("strata-validate-100k-ms", "naive-validate-100k-ms"),
        ),
    ];
    println!("== kb: speed-ups (naive time / strata time, measured in this run; target ≥ 10)");
    for (label, s) in speedups {
        println!("  {label:<62} {s:>8.1}x  {}", if s >= 10.0 { "meets" } else { "MISSES" });
    }
    report(
        "kb",
        &SAMPLES,
        &[],
        &[
            ("impact p50 seed (µs)", m("strata-impact-seed-us"), "µs"),
            ("impact p50 100k (µs)", m("strata-impact-100k-us"), "µs"),
            ("validate 100k (ms)", m("strata-validate-100k-ms"), "ms"),
            ("intake seed (ms)", m("strata-intake-seed-ms"), "ms"),
            ("intake seed peak RSS (MiB)", m("strata-intake-seed-peak-rss-MiB"), "MiB"),
            ("speed-up impact seed", speedups[0].1, "x"),
            ("speed-up impact 100k", speedups[1].1, "x"),
            ("speed-up validate 100k", speedups[2].1, "x"),
        ],
    );
}

criterion_group!(benches, bench_seed_scale, bench_100k, summary);
criterion_main!(benches);
