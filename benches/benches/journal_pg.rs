//! PostgreSQL journal benchmarks, each against baselines measured in the same run on the same
//! server (the one `STRATA_TEST_PG_URL` names; without it the bench says so and exits 0).
//!
//! * appends/s of single-event appends (256-byte payloads, each writer waiting for its
//!   acknowledgement) with 1 and 12 writers in one process, and 12 writers split over 2 and 4
//!   coordinator processes (this binary re-run as children), against
//!   (a) a minimal client inserting the same rows under the same ordering lock (the head row
//!   `FOR UPDATE`), one append per transaction, from 1 and 12 connections, and
//!   (b) plain inserts of the same rows with no ordering guarantee (a sequence default, no head
//!   lock, no chain), one per transaction, from 1 and 12 connections;
//! * replay of `STRATA_BENCH_PG_REPLAY_EVENTS` events (default 1,000,000) from PostgreSQL into the
//!   standard projections (and the journal's scan alone, decoding every event) against a raw
//!   sequential read of the same rows through the same client library (`postgres`), and the
//!   peak RSS of `strata replay` on that journal (a child process).
//!
//! Contenders are measured in rounds (each criterion iteration runs strata and its baselines once
//! each, in rotating order), so every ratio compares runs made at the same moment of a shared
//! machine. Sample sizes: 10 rounds (plus warm-up) of 200 appends for one writer, of 12 × 60
//! appends for twelve, and of one full replay each.
//!
//! Run: `.ci/postgres cargo bench -p strata-benches --bench journal_pg` (the replay size:
//! `STRATA_BENCH_PG_REPLAY_EVENTS=…`). The report at the end is what BENCHMARKS.md records.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use strata_adapters::config::{Backend, Config};
use strata_benches::{Ratio, Samples, bench_event, payload, report, target_dir, timed_threads};
use strata_journal::hash::Hash;
use strata_journal::pg::{PgEnv, PgOptions, PgStore};
use strata_journal::projection::Projections;
use strata_journal::{EventData, ExpectedVersion, Journal, StreamAppend};

const PAYLOAD_BYTES: usize = 256;
/// Appends per writer per measured iteration (the single writer does `SINGLE_APPENDS`).
const APPENDS_PER_WRITER: u64 = 60;
const SINGLE_APPENDS: u64 = 200;
const WRITERS: usize = 12;
const REPLAY_EVENTS_DEFAULT: u64 = 1_000_000;
/// Events per append while the replay journal is built (one transaction each).
const BUILD_EVENTS_PER_APPEND: usize = 4096;
/// Set in a child process: `url schema writers`.
const CHILD_ENV: &str = "STRATA_BENCH_PG_CHILD";

static SAMPLES: LazyLock<Samples> = LazyLock::new(Samples::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn options(url: &str, schema: &str) -> PgOptions {
    let mut o = PgOptions::new(url, "STRATA_TEST_PG_URL")
        .and_then(|o| o.with_schema(schema))
        .expect("STRATA_TEST_PG_URL is a PostgreSQL URL without a password");
    o.env = PgEnv::from_vars(|k| std::env::var(k).ok());
    o.application_name = "strata-bench".into();
    o
}

/// A new schema name, distinct per run and per use.
fn schema(what: &str) -> String {
    format!("bench_{what}_{}", uuid::Uuid::now_v7().simple())
}

fn ev(p: &[u8]) -> EventData {
    bench_event(u128::from(NEXT_ID.fetch_add(1, Ordering::Relaxed)) | (u128::from(std::process::id()) << 64), p)
}

/// `writers` threads appending `per` single events each to their own stream through `journal`;
/// the time from the moment all start until the last is acknowledged.
fn strata_appends(journal: &Journal, writers: usize, per: u64, tag: &str) -> Duration {
    timed_threads(writers, |w| {
        let (j, p, stream) = (journal.clone(), payload(PAYLOAD_BYTES), format!("bench/{tag}/{w}"));
        move || {
            for _ in 0..per {
                let r = j.append_blocking(&stream, ExpectedVersion::Any, vec![ev(&p)]);
                assert!(matches!(r, Ok(Ok(_))), "append failed: {r:?}");
            }
        }
    })
}

/// The child side of the multi-process runs: opens the journal, says `ready`, then for each
/// `go <per>` line runs `writers` writers of `per` appends and says `done`.
fn child(spec: &str) {
    let mut parts = spec.split(' ');
    let (url, schema, writers) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let writers: usize = writers.parse().expect("writers");
    let journal = Journal::open_postgres(&options(url, schema)).expect("open the bench journal");
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").and_then(|()| out.flush()).expect("stdout");
    let tag = format!("p{}", std::process::id());
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let Some(per) = line.strip_prefix("go ") else { break };
        strata_appends(&journal, writers, per.parse().expect("per"), &tag);
        writeln!(out, "done").and_then(|()| out.flush()).expect("stdout");
    }
    journal.close_blocking().expect("close");
}

struct Coordinators {
    children: Vec<(Child, ChildStdin, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>)>,
}

impl Coordinators {
    fn start(url: &str, schema: &str, processes: usize, writers_each: usize) -> Coordinators {
        let exe = std::env::current_exe().expect("current exe");
        let mut children: Vec<_> = (0..processes)
            .map(|_| {
                let mut c = Command::new(&exe)
                    .env(CHILD_ENV, format!("{url} {schema} {writers_each}"))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn a coordinator process");
                let stdin = c.stdin.take().expect("stdin");
                let lines = std::io::BufReader::new(c.stdout.take().expect("stdout")).lines();
                (c, stdin, lines)
            })
            .collect();
        for (_, _, lines) in &mut children {
            assert_eq!(lines.next().expect("child ready").expect("read"), "ready");
        }
        Coordinators { children }
    }

    /// One measured round: every child runs its writers; the time until the last is done.
    fn round(&mut self, per: u64) -> Duration {
        let start = Instant::now();
        for (_, stdin, _) in &mut self.children {
            writeln!(stdin, "go {per}").and_then(|()| stdin.flush()).expect("to child");
        }
        for (_, _, lines) in &mut self.children {
            assert_eq!(lines.next().expect("child done").expect("read"), "done");
        }
        start.elapsed()
    }
}

impl Drop for Coordinators {
    fn drop(&mut self) {
        for (mut c, stdin, _) in self.children.drain(..) {
            drop(stdin);
            let _ = c.wait();
        }
    }
}

fn connect(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("connect to the bench server")
}

/// Baseline (a): each of `conns` connections appends `per` events to its own stream, one per
/// transaction, under the journal's ordering lock (the head row `FOR UPDATE`), chaining the same
/// record bytes the journal would store.
fn ordered_client(url: &str, schema: &str, conns: usize, per: u64) -> Duration {
    timed_threads(conns, |w| {
        let mut c = connect(url);
        let lock = c.prepare(&format!("SELECT last_seq, last_hash FROM {schema}.strata_head WHERE id = 1 FOR UPDATE"));
        let insert = c.prepare(&format!(
            "INSERT INTO {schema}.strata_events (seq, event_id, stream, version, event_type, hash, record) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ));
        let head = c.prepare(&format!("UPDATE {schema}.strata_head SET last_seq = $1, last_hash = $2 WHERE id = 1"));
        let (lock, insert, head) = (lock.expect("prepare"), insert.expect("prepare"), head.expect("prepare"));
        let stream = format!("raw/{}/{w}", std::process::id());
        let count = format!("SELECT count(*) FROM {schema}.strata_events WHERE stream = $1");
        let version0: i64 = c.query_one(&count, &[&stream]).expect("version").get(0);
        let mut version = u64::try_from(version0).unwrap_or(0);
        let p = payload(PAYLOAD_BYTES);
        move || {
            for _ in 0..per {
                let e = ev(&p);
                let mut tx = c.transaction().expect("begin");
                let row = tx.query_one(&lock, &[]).expect("ordering lock");
                let (last, prev): (i64, &[u8]) = (row.get(0), row.get(1));
                let mut prev_hash = [0u8; 32];
                prev_hash.copy_from_slice(prev);
                let seq = u64::try_from(last).unwrap_or(0) + 1;
                version += 1;
                let bytes = e.placed(&stream, seq, version, Hash(prev_hash)).encode();
                let hash = strata_journal::hash::event_hash(&bytes);
                let (seq_i, ver_i) = (seq as i64, version as i64);
                tx.execute(&insert, &[&seq_i, &e.id, &stream, &ver_i, &e.event_type, &hash.0.as_slice(), &bytes])
                    .expect("insert");
                tx.execute(&head, &[&seq_i, &hash.0.as_slice()]).expect("head");
                tx.commit().expect("commit");
            }
        }
    })
}

/// Baseline (b): the same rows as plain inserts, one per transaction, positions from a sequence:
/// no ordering lock and no chain (readers could skip an event that commits late).
fn plain_inserts(url: &str, schema: &str, conns: usize, per: u64) -> Duration {
    timed_threads(conns, |w| {
        let mut c = connect(url);
        let insert = c
            .prepare(&format!(
                "INSERT INTO {schema}.bench_plain (event_id, stream, version, event_type, hash, record) VALUES ($1, $2, $3, $4, $5, $6)"
            ))
            .expect("prepare");
        let stream = format!("plain/{}/{w}/{}", std::process::id(), uuid::Uuid::now_v7().simple());
        let p = payload(PAYLOAD_BYTES);
        move || {
            for version in 1..=per {
                let e = ev(&p);
                let bytes = e.placed(&stream, version, version, Hash([0; 32])).encode();
                let hash = strata_journal::hash::event_hash(&bytes);
                let ver_i = version as i64;
                c.execute(&insert, &[&e.id, &stream, &ver_i, &e.event_type, &hash.0.as_slice(), &bytes])
                    .expect("insert");
            }
        }
    })
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(1));
    g
}

/// One contender of a round: its sample name, the events one run appends or reads, and the run.
type Contender<'a> = (String, u64, Box<dyn FnMut() -> Duration + 'a>);

/// Runs `contenders` as one criterion benchmark `name` whose every iteration is a round that
/// runs each contender once (starting with a different one each round), recording each run's
/// events/s under its own name. Measured side by side like this, strata and its baselines see
/// the same moment of a shared machine, so their ratios hold even when the machine's speed
/// drifts from one moment to the next (the time of a disk flush here moves between about 0.2
/// and 4 ms with what else runs).
fn rounds(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    mut contenders: Vec<Contender<'_>>,
) {
    let mut round = 0usize;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let n = contenders.len();
                for k in 0..n {
                    let (label, events, run) = &mut contenders[(round + k) % n];
                    let d = run();
                    SAMPLES.record(label, *events, d);
                    total += d;
                }
                round += 1;
            }
            total
        })
    });
}

/// A schema with the journal's tables for the minimal ordered client, and one with a copy of
/// the events table whose positions come from a sequence, for plain inserts.
fn baseline_schemas(url: &str, tag: &str) -> (String, String) {
    let a = schema(&format!("a{tag}"));
    PgStore::migrate(&options(url, &a)).expect("baseline schema");
    let b = schema(&format!("b{tag}"));
    PgStore::migrate(&options(url, &b)).expect("baseline schema");
    connect(url)
        .batch_execute(&format!(
            "CREATE TABLE {b}.bench_plain (LIKE {b}.strata_events INCLUDING ALL);
             CREATE SEQUENCE {b}.bench_plain_seq;
             ALTER TABLE {b}.bench_plain ALTER COLUMN seq SET DEFAULT nextval('{b}.bench_plain_seq')"
        ))
        .expect("plain table");
    (a, b)
}

fn bench_appends(c: &mut Criterion, url: &str) {
    let mut g = group(c, "journal-pg-append-256B");
    // One writer: strata, (a) and (b) from one connection each.
    {
        let s = schema("w1");
        let journal = Journal::create_postgres(&options(url, &s), "strata.bench/pg-append").expect("journal");
        let (a, b) = baseline_schemas(url, "1");
        let per = SINGLE_APPENDS;
        rounds(
            &mut g,
            "round-1-writer",
            vec![
                ("strata-1w-1p".into(), per, Box::new(|| strata_appends(&journal, 1, per, "in"))),
                ("a-ordered-client-1c".into(), per, Box::new(|| ordered_client(url, &a, 1, per))),
                ("b-plain-insert-1c".into(), per, Box::new(|| plain_inserts(url, &b, 1, per))),
            ],
        );
        journal.close_blocking().expect("close");
    }
    // Twelve writers: in one process (one handle: group commit), split over 2 and 4 coordinator
    // processes on one journal, and (a), (b) from 12 connections.
    {
        let per = APPENDS_PER_WRITER;
        let events = per * WRITERS as u64;
        let s = schema("w12");
        let journal = Journal::create_postgres(&options(url, &s), "strata.bench/pg-append").expect("journal");
        let split = |processes: usize| {
            let s = schema(&format!("p{processes}"));
            Journal::create_postgres(&options(url, &s), "strata.bench/pg-append")
                .expect("journal")
                .close_blocking()
                .expect("close");
            Coordinators::start(url, &s, processes, WRITERS / processes)
        };
        let (mut c2, mut c4) = (split(2), split(4));
        let (a, b) = baseline_schemas(url, "12");
        rounds(
            &mut g,
            "round-12-writers",
            vec![
                (format!("strata-{WRITERS}w-1p"), events, Box::new(|| strata_appends(&journal, WRITERS, per, "in"))),
                (format!("strata-{WRITERS}w-2p"), events, Box::new(|| c2.round(per))),
                (format!("strata-{WRITERS}w-4p"), events, Box::new(|| c4.round(per))),
                (format!("a-ordered-client-{WRITERS}c"), events, Box::new(|| ordered_client(url, &a, WRITERS, per))),
                (format!("b-plain-insert-{WRITERS}c"), events, Box::new(|| plain_inserts(url, &b, WRITERS, per))),
            ],
        );
        let stats = journal.writer_stats();
        SAMPLES.value("strata-12w-1p-events-per-commit", stats.events as f64 / stats.batches.max(1) as f64);
        journal.close_blocking().expect("close");
    }
    g.finish();
}

fn replay_events() -> u64 {
    std::env::var("STRATA_BENCH_PG_REPLAY_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(REPLAY_EVENTS_DEFAULT)
}

/// A journal of `events` events (appends of up to 4,096 events on 64 streams) and a workspace
/// whose config points at it, for `strata replay`.
fn replay_journal(url: &str, events: u64) -> (PgOptions, PathBuf) {
    let s = schema("replay");
    let o = options(url, &s);
    let journal = Journal::create_postgres(&o, "strata.bench/pg-replay").expect("journal");
    eprintln!("building a {events}-event journal in PostgreSQL schema {s}");
    let start = Instant::now();
    let p = payload(PAYLOAD_BYTES);
    let mut left = events;
    let mut round = 0usize;
    while left > 0 {
        let n = left.min(BUILD_EVENTS_PER_APPEND as u64) as usize;
        let streams: Vec<StreamAppend> = (0..64)
            .map(|k| StreamAppend {
                stream: format!("bench/replay/{}", (round * 64 + k) % 512),
                expected: ExpectedVersion::Any,
                events: (0..n / 64 + usize::from(k < n % 64)).map(|_| ev(&p)).collect(),
            })
            .filter(|s| !s.events.is_empty())
            .collect();
        journal.append_multi_blocking(streams).expect("append").expect("no conflict");
        left -= n as u64;
        round += 1;
    }
    assert_eq!(journal.head().seq, events);
    journal.close_blocking().expect("close");
    eprintln!("built in {:.1}s", start.elapsed().as_secs_f64());
    let root = target_dir().join("strata-bench").join("pg-replay");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join(".strata")).expect("dir");
    let config = Config { backend: Backend::postgres(url, &s, "bench").expect("backend"), ..Config::default() };
    std::fs::write(root.join(".strata").join("config.toml"), config.render()).expect("config");
    (o, root)
}

fn bench_replay(c: &mut Criterion, url: &str) {
    let events = replay_events();
    let (o, root) = replay_journal(url, events);
    let mut g = group(c, "journal-pg-replay");
    g.measurement_time(Duration::from_secs(2));
    let journal = Journal::open_postgres(&o).expect("open");
    let mut raw = connect(url);
    let sql = format!("SELECT seq, hash, record FROM {}.strata_events ORDER BY seq", o.schema);
    rounds(
        &mut g,
        "round-replay",
        vec![
            // Raw: one sequential read of every row through the client library, touching every byte.
            (
                "raw-sequential-read".into(),
                events,
                Box::new(|| {
                    use postgres::fallible_iterator::FallibleIterator as _;
                    let start = Instant::now();
                    let mut rows = raw.query_raw(&sql, std::iter::empty::<i64>()).expect("query");
                    let (mut n, mut bytes) = (0u64, 0u64);
                    while let Some(row) = rows.next().expect("row") {
                        let (_, h, r): (i64, &[u8], &[u8]) = (row.get(0), row.get(1), row.get(2));
                        bytes += (h.len() + r.len()) as u64;
                        n += 1;
                    }
                    assert_eq!(n, events);
                    assert!(bytes > events * PAYLOAD_BYTES as u64);
                    start.elapsed()
                }),
            ),
            // strata's read path alone: every event decoded from its stored bytes, in order.
            (
                "strata-scan".into(),
                events,
                Box::new(|| {
                    let start = Instant::now();
                    let mut bytes = 0u64;
                    let r: Result<(), std::convert::Infallible> = journal
                        .scan(1, events, |rec, _| {
                            bytes += rec.payload.len() as u64;
                            Ok(true)
                        })
                        .expect("scan");
                    let Ok(()) = r;
                    assert_eq!(bytes, events * PAYLOAD_BYTES as u64);
                    start.elapsed()
                }),
            ),
            // strata: every standard projection rebuilt from sequence 1.
            (
                "strata-replay-into-projections".into(),
                events,
                Box::new(|| {
                    let start = Instant::now();
                    let mut p = Projections::new(strata_engine::standard_projections());
                    let s = p.rebuild(&journal).expect("replay");
                    assert_eq!(s[0].applied, events);
                    start.elapsed()
                }),
            ),
        ],
    );
    g.finish();
    journal.close_blocking().expect("close");
    drop(journal);
    let out = Command::new(env!("CARGO_BIN_EXE_strata-bench-cli"))
        .arg("--dir")
        .arg(&root)
        .args(["--json", "replay"])
        .output()
        .expect("run strata replay");
    assert!(out.status.success(), "strata replay failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["head"].as_u64(), Some(events));
    if let Some(mib) = v["peak_rss_mib"].as_f64() {
        SAMPLES.value("strata-replay-peak-rss-MiB", mib);
    }
}

fn summary(events: u64) {
    let r = |label, ours, baseline, target| Ratio { label, ours, baseline, target };
    let ratios = [
        r("1 writer vs (a) ordered client, 1 connection", "strata-1w-1p", "a-ordered-client-1c", 0.8),
        r("12 writers, 1 process vs (a), 1 connection", "strata-12w-1p", "a-ordered-client-1c", 5.0),
        r("12 writers, 1 process vs (a), 12 connections", "strata-12w-1p", "a-ordered-client-12c", 5.0),
        r("12 writers, 2 processes vs (a), 12 connections", "strata-12w-2p", "a-ordered-client-12c", 0.0),
        r("12 writers, 4 processes vs (a), 12 connections", "strata-12w-4p", "a-ordered-client-12c", 0.0),
        r("(a) ordered vs (b) plain, 1 connection", "a-ordered-client-1c", "b-plain-insert-1c", 0.0),
        r("(a) ordered vs (b) plain, 12 connections", "a-ordered-client-12c", "b-plain-insert-12c", 0.0),
        r("strata 12 writers vs (b) plain, 12 connections", "strata-12w-1p", "b-plain-insert-12c", 0.0),
        r(
            "replay into projections vs raw sequential read",
            "strata-replay-into-projections",
            "raw-sequential-read",
            0.5,
        ),
        r("journal scan (decode only) vs raw sequential read", "strata-scan", "raw-sequential-read", 0.0),
    ];
    let v = |n: &str| SAMPLES.median(n).unwrap_or(f64::NAN);
    report(
        "journal_pg",
        &SAMPLES,
        &ratios,
        &[
            ("replay events", events as f64, "events"),
            ("peak RSS of `strata replay` (target < 512)", v("strata-replay-peak-rss-MiB"), "MiB"),
            ("group commit: events per commit, 12 writers, 1 process", v("strata-12w-1p-events-per-commit"), "events"),
        ],
    );
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let Ok(url) = std::env::var("STRATA_TEST_PG_URL") else {
        println!(
            "journal_pg needs PostgreSQL: set STRATA_TEST_PG_URL, or run `.ci/postgres cargo bench -p strata-benches --bench journal_pg`"
        );
        return;
    };
    let mut c = Criterion::default().configure_from_args();
    bench_appends(&mut c, &url);
    bench_replay(&mut c, &url);
    summary(replay_events());
    c.final_summary();
}
