//! Context-assembly benchmarks on the seed-scale fixture, each against a naive baseline measured
//! in the same run.
//!
//! * assembly, warm (token counts cached from earlier assemblies) and cold (a new cache; the
//!   tokenizer itself is loaded once per process, measured separately), against a naive
//!   assembler that re-renders everything per request: it rebuilds every summary and counts
//!   every block afresh;
//! * summary regeneration after one specification edit: folding the edit and regenerating the
//!   summaries of the one entity it touches, against folding it and rebuilding every summary.
//!
//! Run: `cargo bench -p strata-benches --bench context`.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use strata_benches::{Samples, report};
use strata_engine::context::assemble::{Inputs, Task, TokenCounter, assemble};
use strata_engine::context::profile::{self, BUILTIN, Profile};
use strata_engine::context::summary::Summaries;
use strata_engine::kb::fixture::{Fixture, FixtureSpec, generate, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake;
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::Journal;

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);

struct Kb {
    journal: Journal,
    graph: Graph,
    fx: Fixture,
}

fn kb() -> Kb {
    let fx = generate(&FixtureSpec::seed_scale(7));
    let (journal, graph) = fx.in_memory("strata.bench/context").expect("fixture");
    Kb { journal, graph, fx }
}

fn profiles() -> Vec<Profile> {
    BUILTIN.iter().map(|(n, t)| profile::parse(n, t).expect("shipped profile")).collect()
}

/// Every (profile, change request) task, in a fixed order.
fn tasks(fx: &Fixture, profiles: &[Profile]) -> Vec<(usize, Task)> {
    let crs: Vec<String> = fx.of(ArtifactKind::ChangeRequest).map(|d| d.key.id.clone()).collect();
    let mut out = Vec::new();
    for (pi, p) in profiles.iter().enumerate() {
        for cr in &crs {
            out.push((
                pi,
                Task { id: format!("{cr}-{}", p.agent_id), objective: "Carry it out.".into(), plan: Some(cr.clone()) },
            ));
        }
    }
    out
}

#[derive(Clone, Copy)]
enum Mode {
    Warm,
    Cold,
    Naive,
}

fn bench_assembly(c: &mut Criterion) {
    let mut k = kb();
    let summaries = Summaries::build(&mut k.graph);
    let profiles = profiles();
    let tasks = tasks(&k.fx, &profiles);
    let head = k.journal.head();
    // The tokenizer's one-time load, then warm the shared cache with one pass over every task.
    let t = Instant::now();
    strata_engine::tokens::count("load");
    SAMPLES.value("tokenizer-load-ms", t.elapsed().as_secs_f64() * 1e3);
    let mut warm = TokenCounter::new(1300);
    let inputs = |i: usize| {
        let (pi, task) = &tasks[i % tasks.len()];
        Inputs {
            graph: &k.graph,
            summaries: &summaries,
            profile: &profiles[*pi],
            profile_version: 1,
            task,
            position: head.seq,
            position_hash: head.hash,
            continuation: None,
        }
    };
    for i in 0..tasks.len() {
        assemble(&inputs(i), &mut warm).expect("assembles");
    }
    // The naive assembler's own copy of the graph (it needs it mutable to rebuild summaries).
    let mut naive_graph = k.graph.clone();
    let mut group = c.benchmark_group("context-assembly");
    group.sample_size(20).measurement_time(Duration::from_secs(8)).warm_up_time(Duration::from_secs(1));
    for (name, mode) in
        [("strata-assemble-warm", Mode::Warm), ("strata-assemble-cold", Mode::Cold), ("naive-assemble", Mode::Naive)]
    {
        let mut next = 0usize;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    match mode {
                        Mode::Warm => {
                            std::hint::black_box(assemble(&inputs(next), &mut warm).expect("assembles"));
                        }
                        Mode::Cold => {
                            std::hint::black_box(
                                assemble(&inputs(next), &mut TokenCounter::new(1300)).expect("assembles"),
                            );
                        }
                        Mode::Naive => {
                            let s = Summaries::build(&mut naive_graph);
                            let (pi, task) = &tasks[next % tasks.len()];
                            let inp = Inputs {
                                graph: &naive_graph,
                                summaries: &s,
                                profile: &profiles[*pi],
                                profile_version: 1,
                                task,
                                position: head.seq,
                                position_hash: head.hash,
                                continuation: None,
                            };
                            std::hint::black_box(assemble(&inp, &mut TokenCounter::new(1300)).expect("assembles"));
                        }
                    }
                    let d = t.elapsed();
                    SAMPLES.value(&format!("{name}-ms"), d.as_secs_f64() * 1e3);
                    total += d;
                    next += 1;
                }
                total
            });
        });
    }
    group.finish();
}

fn bench_summary_refresh(c: &mut Criterion) {
    let mut k = kb();
    let mut summaries = Summaries::build(&mut k.graph);
    let screen = ArtifactKey::new(ArtifactKind::UiScreen, "billing-screen-2");
    let mut ids = CountingIds::new(1 << 60);
    let mut edit = 0u64;
    // One more edit of the screen, appended to the journal; returns its sequence.
    let mut next_edit = |k: &mut Kb| {
        edit += 1;
        let d = k.fx.get_mut(&screen).expect("screen");
        d.body = format!("{}\nEdit {edit}.\n", d.body.lines().next().unwrap_or(""));
        let file = render(d);
        let plan = intake::plan(&k.graph, &[file], &mut ids, &FixedClock(0)).expect("plan");
        k.journal.append_multi_blocking(plan.appends).expect("append").expect("no conflict");
        k.journal.head().seq
    };
    let mut group = c.benchmark_group("context-summaries");
    group.sample_size(20).measurement_time(Duration::from_secs(6)).warm_up_time(Duration::from_secs(1));
    for naive in [false, true] {
        let name = if naive { "naive-summaries-rebuild" } else { "strata-summaries-refresh" };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let seq = next_edit(&mut k);
                    let t = Instant::now();
                    let graph = &mut k.graph;
                    k.journal.scan(seq, seq, |r, _| graph.apply_record(r).map(|()| true)).expect("scan").expect("fold");
                    if naive {
                        summaries = Summaries::build(graph);
                    } else {
                        summaries.refresh(graph);
                    }
                    let d = t.elapsed();
                    SAMPLES.value(&format!("{name}-ms"), d.as_secs_f64() * 1e3);
                    total += d;
                }
                std::hint::black_box(&summaries);
                total
            });
        });
    }
    group.finish();
}

fn summary(_: &mut Criterion) {
    let m = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    println!("\n== context: medians (p50 over every timed call)");
    for (label, v, target) in [
        ("assembly p50, warm", m("strata-assemble-warm-ms"), "≤ 5"),
        ("assembly p50, cold (new token cache)", m("strata-assemble-cold-ms"), "≤ 50"),
        ("assembly p50, naive (re-render everything)", m("naive-assemble-ms"), "-"),
        ("summary regeneration after one edit", m("strata-summaries-refresh-ms"), "≤ 10"),
        ("summary rebuild after one edit, naive", m("naive-summaries-rebuild-ms"), "-"),
        ("tokenizer load, once per process", m("tokenizer-load-ms"), "-"),
    ] {
        println!("  {label:<52} {v:>10.3} ms (target {target})");
    }
    let speedups = [
        ("warm assembly vs naive", m("naive-assemble-ms") / m("strata-assemble-warm-ms")),
        ("cold assembly vs naive", m("naive-assemble-ms") / m("strata-assemble-cold-ms")),
        ("incremental summaries vs full rebuild", m("naive-summaries-rebuild-ms") / m("strata-summaries-refresh-ms")),
    ];
    println!("== context: speed-ups (naive time / strata time, measured in this run)");
    for (label, s) in speedups {
        println!("  {label:<52} {s:>8.1}x");
    }
    report(
        "context",
        &SAMPLES,
        &[],
        &[
            ("assembly p50 warm (ms)", m("strata-assemble-warm-ms"), "ms"),
            ("assembly p50 cold (ms)", m("strata-assemble-cold-ms"), "ms"),
            ("assembly p50 naive (ms)", m("naive-assemble-ms"), "ms"),
            ("summary refresh after one edit (ms)", m("strata-summaries-refresh-ms"), "ms"),
            ("summary rebuild after one edit, naive (ms)", m("naive-summaries-rebuild-ms"), "ms"),
            ("tokenizer load (ms)", m("tokenizer-load-ms"), "ms"),
            ("speed-up warm vs naive", speedups[0].1, "x"),
            ("speed-up cold vs naive", speedups[1].1, "x"),
            ("speed-up refresh vs rebuild", speedups[2].1, "x"),
        ],
    );
}

criterion_group!(benches, bench_assembly, bench_summary_refresh, summary);
criterion_main!(benches);
