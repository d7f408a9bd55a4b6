//! The deterministic simulator's speed, against a baseline measured in the same run.
//!
//! * Ours: the `canary` scenario with 600 pairs per window: a rollout from shadow through
//!   canary 10/25/50 to on over about 10,200 simulated tasks, every unit routed by the real
//!   rollout deciders and recorded in the journal on the simulated disk, the real gates
//!   evaluating each window, invariants checked after every window, the promotion check at the
//!   end. Targets: at least 10,000 simulated tasks per second of host time; the rollout in
//!   under 10 s.
//! * Baseline: the journal alone: as many 256-byte events appended in batches of 256 to the
//!   in-memory journal, the floor of recording one event per task.

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use strata_benches::{Ratio, Samples, bench_event, payload, report};
use strata_journal::{ExpectedVersion, Journal, StreamAppend};
use strata_simulations::store::Defects;
use strata_simulations::{Config, canary};

static SAMPLES: std::sync::LazyLock<Samples> = std::sync::LazyLock::new(Samples::default);

fn bench(c: &mut Criterion) {
    let mut tasks = 0;
    let mut g = c.benchmark_group("simulation");
    g.sample_size(10).measurement_time(std::time::Duration::from_secs(20));
    g.bench_function("canary-rollout-10k", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for i in 0..iters {
                let t = Instant::now();
                let r = canary::run("canary", Config { seed: 1 + i % 4, steps: 600, defects: Defects::default() })
                    .expect("the rollout keeps its invariants");
                let d = t.elapsed();
                assert!(r.tasks >= 10_000, "a 10,000-task rollout: {}", r.tasks);
                SAMPLES.record("canary-tasks-per-s", r.tasks, d);
                SAMPLES.value("canary-rollout-ms", d.as_secs_f64() * 1e3);
                tasks = r.tasks;
                total += d;
            }
            total
        });
    });
    let p = payload(256);
    g.bench_function("raw-journal-appends", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                let journal = Journal::in_memory("baseline").expect("journal");
                let t = Instant::now();
                let mut n = 0u128;
                while n < tasks.max(1) as u128 {
                    let events = (0..256).map(|k| bench_event(n + k + 1, &p)).collect();
                    let append = StreamAppend { stream: "bench".into(), expected: ExpectedVersion::Any, events };
                    journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
                    n += 256;
                }
                let d = t.elapsed();
                SAMPLES.record("raw-journal-events-per-s", n as u64, d);
                total += d;
            }
            total
        });
    });
    g.finish();
    let per_s = SAMPLES.median("canary-tasks-per-s").unwrap_or(f64::NAN);
    let ms = SAMPLES.median("canary-rollout-ms").unwrap_or(f64::NAN);
    println!("canary rollout of {tasks} tasks: {per_s:.0} tasks/s (target >= 10,000), {ms:.0} ms (target < 10,000)");
    report(
        "simulation",
        &SAMPLES,
        &[Ratio {
            label: "simulated tasks/s vs raw in-memory journal events/s",
            ours: "canary-tasks-per-s",
            baseline: "raw-journal-events-per-s",
            target: 0.0,
        }],
        &[
            ("simulated tasks per second (target >= 10000)", per_s, "tasks/s"),
            ("10k-task rollout (target < 10000)", ms, "ms"),
        ],
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
