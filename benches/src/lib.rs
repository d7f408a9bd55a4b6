//! Shared pieces of strata's benchmarks: workloads and the ratio report.
//!
//! Every benchmark measures a baseline in the same run (raw sled, raw file + fdatasync, a naive
//! implementation) and reports the ratio, because absolute numbers on a shared, noisy machine
//! mean little; ratios measured side by side do. Results are also written as JSON to
//! `target/strata-bench/<bench>.json` for BENCHMARKS.md.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use strata_journal::EventData;
use uuid::Uuid;

/// A compact JSON payload of exactly `bytes` bytes (a string of `x`).
pub fn payload(bytes: usize) -> Vec<u8> {
    assert!(bytes >= 2);
    let mut p = Vec::with_capacity(bytes);
    p.push(b'"');
    p.resize(bytes - 1, b'x');
    p.push(b'"');
    p
}

/// A benchmark event with id `n` and the given payload.
pub fn bench_event(n: u128, payload: &[u8]) -> EventData {
    EventData {
        id: Uuid::from_u128(n),
        event_type: "bench.sample".to_owned(),
        schema_version: 1,
        recorded_at_ns: 1_795_000_000_000_000_000,
        causation: None,
        correlation: None,
        payload: payload.to_vec(),
    }
}

/// Throughput samples (per second) by name, collected while criterion runs.
#[derive(Default)]
pub struct Samples {
    by_name: Mutex<BTreeMap<String, Vec<f64>>>,
}

impl Samples {
    /// Records `count` units done in `elapsed`.
    pub fn record(&self, name: &str, count: u64, elapsed: Duration) {
        let rate = count as f64 / elapsed.as_secs_f64().max(1e-9);
        self.by_name.lock().unwrap_or_else(|e| e.into_inner()).entry(name.to_owned()).or_default().push(rate);
    }

    /// Records a plain value (not a rate).
    pub fn value(&self, name: &str, v: f64) {
        self.by_name.lock().unwrap_or_else(|e| e.into_inner()).entry(name.to_owned()).or_default().push(v);
    }

    /// Median of the samples of `name`.
    pub fn median(&self, name: &str) -> Option<f64> {
        let map = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        let mut v = map.get(name)?.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }
}

/// Times every call of `f(i)` (i = 0, 1, 2, …) under criterion in group `group`, recording each
/// call's microseconds as `<name>-us` in `samples` (p50 over every call, not criterion's mean
/// of batches).
pub fn timed_per_call(
    c: &mut criterion::Criterion,
    samples: &Samples,
    group: &str,
    name: &str,
    secs: u64,
    mut f: impl FnMut(usize),
) {
    let mut g = c.benchmark_group(group);
    g.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(secs));
    let mut next = 0usize;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = std::time::Instant::now();
                f(next);
                let d = t.elapsed();
                samples.value(&format!("{name}-us"), d.as_secs_f64() * 1e6);
                total += d;
                next += 1;
            }
            total
        });
    });
    g.finish();
}

/// Runs `n` threads: thread `w` calls `setup(w)` (connections, statements: not timed), all wait
/// until every one is set up, then each runs the work its `setup` returned. Returns the time
/// from the moment they all start until the last one ends.
pub fn timed_threads<W: FnOnce()>(n: usize, setup: impl Fn(usize) -> W + Sync) -> Duration {
    let barrier = std::sync::Barrier::new(n + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|w| {
                let (barrier, setup) = (&barrier, &setup);
                s.spawn(move || {
                    let work = setup(w);
                    barrier.wait();
                    work();
                })
            })
            .collect();
        barrier.wait();
        let start = std::time::Instant::now();
        for h in handles {
            h.join().expect("a timed thread");
        }
        start.elapsed()
    })
}

/// One line of the ratio report.
pub struct Ratio<'a> {
    /// What is compared.
    pub label: &'a str,
    /// Measured sample name.
    pub ours: &'a str,
    /// Baseline sample name.
    pub baseline: &'a str,
    /// Required ratio (ours / baseline) at least.
    pub target: f64,
}

/// Prints medians and ratios and writes them to `target/strata-bench/<bench>.json`.
pub fn report(bench: &str, samples: &Samples, ratios: &[Ratio<'_>], extra: &[(&str, f64, &str)]) {
    let names: Vec<String> = samples.by_name.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
    println!("\n== {bench}: medians");
    let mut medians = serde_json::Map::new();
    for n in &names {
        if let Some(m) = samples.median(n) {
            println!("  {n:<44} {m:>14.1}");
            medians.insert(n.clone(), serde_json::json!(m));
        }
    }
    println!("== {bench}: ratios (ours / baseline, measured in this run)");
    let mut out = Vec::new();
    for r in ratios {
        let (Some(a), Some(b)) = (samples.median(r.ours), samples.median(r.baseline)) else { continue };
        let ratio = a / b;
        let verdict = if ratio >= r.target { "meets" } else { "MISSES" };
        println!("  {:<52} {ratio:>7.2}x  (target >= {}x: {verdict})", r.label, r.target);
        out.push(serde_json::json!({"label": r.label, "ours": r.ours, "baseline": r.baseline, "ratio": ratio, "target": r.target, "meets": ratio >= r.target}));
    }
    for (label, value, unit) in extra {
        println!("  {label:<52} {value:>7.1} {unit}");
        out.push(serde_json::json!({"label": label, "value": value, "unit": unit}));
    }
    let dir = target_dir().join("strata-bench");
    let _ = std::fs::create_dir_all(&dir);
    let doc = serde_json::json!({"bench": bench, "medians": medians, "ratios": out});
    let _ = std::fs::write(dir.join(format!("{bench}.json")), serde_json::to_string_pretty(&doc).unwrap_or_default());
}

/// The cargo target directory (where criterion also writes).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(|p| p.join("target"))
            .unwrap_or_else(|| PathBuf::from("target")),
    }
}
