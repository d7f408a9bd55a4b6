//! Discovery benchmarks on the seed-scale fixture, against a naive baseline measured in the same
//! run.
//!
//! * index build from the journal: replaying the journal into the graph, taking the documents and
//!   building the BM25 index (tantivy, in memory), and the index build alone;
//! * `strata discover` in process, warm (one index, many requests: each change request's title),
//!   p50 per request, against a naive scan that splits and lower-cases every document's text per
//!   request and counts the request's words.
//!
//! Targets (issue 24): p50 ≤ 20 ms warm, index build from the journal ≤ 2 s.
//!
//! Run: `cargo bench -p strata-benches --bench discover`.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;
use strata_adapters::discover::Discovery;
use strata_benches::{Samples, report, timed_per_call};
use strata_engine::kb::discover::{Doc, documents};
use strata_engine::kb::fixture::{FixtureSpec, generate};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::kind::ArtifactKind;

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);

fn queries() -> Vec<String> {
    let fx = generate(&FixtureSpec::seed_scale(7));
    fx.of(ArtifactKind::ChangeRequest)
        .map(|d| d.fields.get("title").and_then(Value::as_str).unwrap_or("").to_owned())
        .collect()
}

/// The naive baseline: every document split and lower-cased per request, its words counted.
fn naive(docs: &[Doc], query: &str) -> Vec<(usize, usize)> {
    let words: Vec<String> =
        query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    let mut scored: Vec<(usize, usize)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let text = format!("{} {} {}", d.title, d.text, d.entity_name).to_lowercase();
            let n = text.split(|c: char| !c.is_alphanumeric()).filter(|w| words.iter().any(|q| q == w)).count();
            (n, i)
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(10);
    scored
}

fn bench_discover(c: &mut Criterion) {
    let fx = generate(&FixtureSpec::seed_scale(7));
    let (journal, _) = fx.in_memory("strata.bench/discover").expect("fixture");
    let head = journal.head().seq;
    // Index build from the journal, end to end, and the index alone.
    let mut group = c.benchmark_group("discover-build");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(5));
    group.bench_function("strata-discover-build-from-journal", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let g = Graph::at(&journal, head).expect("replay");
                let index = Discovery::build(documents(&g, None), head).expect("index");
                let d = t.elapsed();
                std::hint::black_box(index.len());
                SAMPLES.value("strata-discover-build-from-journal-ms", d.as_secs_f64() * 1e3);
                total += d;
            }
            total
        })
    });
    let g = Graph::at(&journal, head).expect("replay");
    let docs = documents(&g, None);
    group.bench_function("strata-discover-index-only", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let docs = docs.clone();
                let t = Instant::now();
                let index = Discovery::build(docs, head).expect("index");
                let d = t.elapsed();
                std::hint::black_box(index.len());
                SAMPLES.value("strata-discover-index-only-ms", d.as_secs_f64() * 1e3);
                total += d;
            }
            total
        })
    });
    group.finish();

    let index = Discovery::build(docs.clone(), head).expect("index");
    let qs = queries();
    timed_per_call(c, &SAMPLES, "discover-search", "strata-discover-warm", 3, |i| {
        std::hint::black_box(index.search(&qs[i % qs.len()], 10, &[]).expect("search"));
    });
    timed_per_call(c, &SAMPLES, "discover-search", "naive-discover", 3, |i| {
        std::hint::black_box(naive(&docs, &qs[i % qs.len()]));
    });
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    let warm_ms = m("strata-discover-warm-us") / 1e3;
    let naive_ms = m("naive-discover-us") / 1e3;
    println!("\n== discover: medians");
    for (label, v, target) in [
        (
            "index build from the journal (replay + documents + index)",
            m("strata-discover-build-from-journal-ms"),
            "≤ 2000",
        ),
        ("index build alone", m("strata-discover-index-only-ms"), "-"),
        ("discover p50, warm, in process", warm_ms, "≤ 20"),
        ("naive scan p50", naive_ms, "-"),
    ] {
        println!("  {label:<60} {v:>10.3} ms (target {target})");
    }
    report(
        "discover",
        &SAMPLES,
        &[],
        &[
            ("index build from the journal (ms)", m("strata-discover-build-from-journal-ms"), "ms"),
            ("index build alone (ms)", m("strata-discover-index-only-ms"), "ms"),
            ("discover p50 warm (ms)", warm_ms, "ms"),
            ("naive scan p50 (ms)", naive_ms, "ms"),
            ("speed-up vs naive scan", naive_ms / warm_ms, "x"),
        ],
    );
}

criterion_group!(benches, bench_discover, summary);
criterion_main!(benches);
