//! Journal benchmarks, each against a baseline measured in the same run.
//!
//! * durable appends/s of 256-byte payloads with 1 and 12 concurrent writers, in `process` and
//!   `power` durability, against (a) raw sled inserts of the same payloads with one flush per
//!   100, per 10 and none, (b) raw `write` + `fdatasync` of the same payloads, one sync per event,
//!   and (c) a raw `write` per event (what surviving a process crash needs);
//! * replay of 1,000,000 events into the standard projections against raw sled iteration of the
//!   same tree; peak memory of `strata replay` on that journal, as a child process.
//!
//! Run: `cargo bench -p strata-benches --bench journal`. The ratio report at the end is what
//! BENCHMARKS.md records.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, LazyLock};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use strata_adapters::app::workspace::Workspace;
use strata_adapters::config::Config;
use strata_benches::{Ratio, Samples, bench_event, payload, report, target_dir};
use strata_journal::projection::Projections;
use strata_journal::{Durability, ExpectedVersion, Journal, OpenOptions};

const PAYLOAD_BYTES: usize = 256;
const REPLAY_EVENTS: u64 = 1_000_000;

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn options(durability: Durability) -> OpenOptions {
    OpenOptions {
        durability,
        cache_bytes: 64 * 1024 * 1024,
        holder: "strata journal bench".into(),
        lock_wait: strata_journal::LOCK_WAIT_DEFAULT,
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = target_dir().join("strata-bench").join("scratch").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Appends `events` single-event appends spread over `writers` threads; returns the elapsed time
/// from the moment all writers start.
fn strata_appends(journal: &Journal, writers: usize, events: u64) -> Duration {
    let per = events / writers as u64;
    let barrier = Arc::new(Barrier::new(writers + 1));
    let p = Arc::new(payload(PAYLOAD_BYTES));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let j = journal.clone();
            let barrier = barrier.clone();
            let p = p.clone();
            std::thread::spawn(move || {
                let stream = format!("bench/{w}");
                barrier.wait();
                for _ in 0..per {
                    let id = u128::from(NEXT_ID.fetch_add(1, Ordering::Relaxed));
                    let r = j.append_blocking(&stream, ExpectedVersion::Any, vec![bench_event(id, &p)]);
                    assert!(matches!(r, Ok(Ok(_))), "append failed: {r:?}");
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("writer thread");
    }
    start.elapsed()
}

fn bench_appends(c: &mut Criterion) {
    let mut g = c.benchmark_group("journal-append-256B");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(4));
    let configs = [
        (Durability::Process, 1usize, 2_000u64),
        (Durability::Process, 12, 12_000),
        (Durability::Power, 1, 300),
        (Durability::Power, 12, 3_600),
    ];
    for (durability, writers, events) in configs {
        let name = format!("strata-{}-{writers}w", durability.as_str());
        let dir = scratch(&name);
        let journal = Journal::create(&dir.join("j"), "strata.bench/append", &options(durability)).expect("journal");
        g.throughput(Throughput::Elements(events));
        g.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let d = strata_appends(&journal, writers, events);
                    SAMPLES.record(&name, events - events % writers as u64, d);
                    total += d;
                }
                total
            })
        });
        let stats = journal.writer_stats();
        SAMPLES.value(&format!("{name}-events-per-batch"), stats.events as f64 / stats.batches.max(1) as f64);
        journal.close_blocking().expect("close");
    }

    // Baseline (a): the same payloads as raw sled inserts, one flush per 100; and, to show what
    // the flush itself costs against the `process` promise, one flush per 10 (about strata's
    // events per sync with 12 writers) and no flush at all (the bytes stay in sled's buffers).
    let events = 12_000u64;
    let dir = scratch("raw-sled");
    let db = sled::Config::new().path(&dir).cache_capacity(64 * 1024 * 1024).flush_every_ms(None).open().expect("sled");
    let tree = db.open_tree("raw").expect("tree");
    let p = payload(PAYLOAD_BYTES);
    let mut key = 0u64;
    g.throughput(Throughput::Elements(events));
    for (name, every) in
        [("raw-sled-flush-per-100", Some(100)), ("raw-sled-flush-per-10", Some(10)), ("raw-sled-no-flush", None)]
    {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    for i in 0..events {
                        key += 1;
                        tree.insert(key.to_be_bytes(), p.as_slice()).expect("insert");
                        if every.is_some_and(|e| i % e == e - 1) {
                            tree.flush().expect("flush");
                        }
                    }
                    if every.is_some() {
                        tree.flush().expect("flush");
                    }
                    let d = start.elapsed();
                    SAMPLES.record(name, events, d);
                    total += d;
                }
                total
            })
        });
    }
    tree.flush().expect("flush");
    drop(tree);
    drop(db);

    // The floor of the `process` promise: a write(2) per event puts the bytes in the kernel,
    // which is all a process crash needs.
    let events = 12_000u64;
    let dir = scratch("raw-write");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("log")).expect("file");
    g.throughput(Throughput::Elements(events));
    g.bench_function("raw-write-per-event", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                for _ in 0..events {
                    file.write_all(&p).expect("write");
                }
                let d = start.elapsed();
                SAMPLES.record("raw-write-per-event", events, d);
                total += d;
            }
            total
        })
    });
    drop(file);

    // Baseline (b): the same payloads as raw write + fdatasync per event.
    let events = 300u64;
    let dir = scratch("raw-fdatasync");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("log")).expect("file");
    g.throughput(Throughput::Elements(events));
    g.bench_function("raw-write-fdatasync-per-event", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                for _ in 0..events {
                    file.write_all(&p).expect("write");
                    file.sync_data().expect("fdatasync");
                }
                let d = start.elapsed();
                SAMPLES.record("raw-write-fdatasync-per-event", events, d);
                total += d;
            }
            total
        })
    });
    g.finish();
}

/// A workspace holding a 1M-event journal written the way journals are written: 12 concurrent
/// writers appending single events (process durability), so frames have their natural size.
/// Built once and reused across runs.
fn replay_workspace() -> PathBuf {
    let root = target_dir().join("strata-bench").join("replay-1m");
    let ws = Workspace::at(&root);
    let done = root.join("complete");
    if done.exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("dir");
    let config = Config { durability: Durability::Process, ..Config::default() };
    let journal = ws.create("strata.bench/replay-1m", &config).expect("journal");
    eprintln!("building a {REPLAY_EVENTS}-event journal with 12 writers (once; cached in {})", root.display());
    let start = Instant::now();
    strata_appends(&journal, 12, REPLAY_EVENTS - REPLAY_EVENTS % 12);
    let rest = REPLAY_EVENTS - journal.head().seq;
    let p = payload(PAYLOAD_BYTES);
    for _ in 0..rest {
        let id = u128::from(NEXT_ID.fetch_add(1, Ordering::Relaxed));
        journal
            .append_blocking("bench/rest", ExpectedVersion::Any, vec![bench_event(id, &p)])
            .expect("append")
            .expect("no conflict");
    }
    assert_eq!(journal.head().seq, REPLAY_EVENTS);
    journal.close_blocking().expect("close");
    eprintln!("built in {:.1}s", start.elapsed().as_secs_f64());
    std::fs::write(&done, "ok\n").expect("marker");
    root
}

fn bench_replay(c: &mut Criterion) {
    let root = replay_workspace();
    let ws = Workspace::at(&root);
    let mut g = c.benchmark_group("journal-replay-1M");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(REPLAY_EVENTS));

    // Baseline: raw sled iteration of the same tree, touching every stored byte range.
    {
        let db = sled::Config::new()
            .path(ws.journal_dir().join("sled"))
            .cache_capacity(64 * 1024 * 1024)
            .open()
            .expect("sled");
        let tree = db.open_tree("journal").expect("tree");
        g.bench_function("raw-sled-iteration", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let mut bytes = 0u64;
                    for kv in tree.iter() {
                        let (_, v) = kv.expect("iter");
                        bytes += v.len() as u64;
                    }
                    let d = start.elapsed();
                    assert!(bytes > REPLAY_EVENTS * PAYLOAD_BYTES as u64);
                    SAMPLES.record("raw-sled-iteration", REPLAY_EVENTS, d);
                    total += d;
                }
                total
            })
        });
    }

    // strata: open the journal and rebuild every standard projection from sequence 1.
    {
        let journal = Journal::open(&ws.journal_dir(), &options(Durability::Process)).expect("open");
        g.bench_function("strata-replay-into-projections", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let mut p = Projections::new(strata_engine::standard_projections());
                    let s = p.rebuild(&journal).expect("replay");
                    let d = start.elapsed();
                    assert_eq!(s[0].applied, REPLAY_EVENTS);
                    SAMPLES.record("strata-replay-into-projections", REPLAY_EVENTS, d);
                    total += d;
                }
                total
            })
        });
    }
    g.finish();
    peak_memory(&root);
}

/// Peak RSS of `strata replay` on the 1M journal, run as a child process.
fn peak_memory(root: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata-bench-cli"))
        .arg("--dir")
        .arg(root)
        .args(["--json", "replay"])
        .output()
        .expect("run strata replay");
    assert!(out.status.success(), "strata replay failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    if let Some(mib) = v["peak_rss_mib"].as_f64() {
        SAMPLES.value("strata-replay-1M-peak-rss-MiB", mib);
    }
}

fn summary(_: &mut Criterion) {
    let ratios = [
        Ratio {
            label: "power, 12 writers vs raw fdatasync per event",
            ours: "strata-power-12w",
            baseline: "raw-write-fdatasync-per-event",
            target: 8.0,
        },
        Ratio {
            label: "power, 1 writer vs raw fdatasync per event",
            ours: "strata-power-1w",
            baseline: "raw-write-fdatasync-per-event",
            target: 0.0,
        },
        Ratio {
            label: "process, 12 writers vs raw sled flush/100",
            ours: "strata-process-12w",
            baseline: "raw-sled-flush-per-100",
            target: 0.5,
        },
        Ratio {
            label: "process, 12 writers vs raw sled flush/10 (its own batch size)",
            ours: "strata-process-12w",
            baseline: "raw-sled-flush-per-10",
            target: 0.5,
        },
        Ratio {
            label: "raw sled flush/10 vs raw sled without flush (the flush's cost)",
            ours: "raw-sled-flush-per-10",
            baseline: "raw-sled-no-flush",
            target: 0.0,
        },
        Ratio {
            label: "process, 1 writer vs raw sled flush/100",
            ours: "strata-process-1w",
            baseline: "raw-sled-flush-per-100",
            target: 0.0,
        },
        Ratio {
            label: "replay 1M into projections vs raw sled iteration",
            ours: "strata-replay-into-projections",
            baseline: "raw-sled-iteration",
            target: 0.5,
        },
    ];
    let rss = SAMPLES.median("strata-replay-1M-peak-rss-MiB").unwrap_or(f64::NAN);
    let batch = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    report(
        "journal",
        &SAMPLES,
        &ratios,
        &[
            ("peak RSS of `strata replay` on 1M events (target < 512)", rss, "MiB"),
            ("group commit: events per sync, power, 12 writers", batch("strata-power-12w-events-per-batch"), "events"),
            (
                "group commit: events per sync, process, 12 writers",
                batch("strata-process-12w-events-per-batch"),
                "events",
            ),
        ],
    );
}

criterion_group!(benches, bench_appends, bench_replay, summary);
criterion_main!(benches);
