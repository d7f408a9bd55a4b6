//! One behavioural suite for the journal, run against both backends: sled on disk and
//! PostgreSQL (a real server; those tests are ignored unless `.ci/postgres` provides one).
//! Each case is written once as a function of a [`Target`]; `conformance!` instantiates it per
//! backend. PostgreSQL-only cases (two handles on one journal, migrations, lock timeouts,
//! keepalives, sled → PostgreSQL → sled) follow.

use crate::pg;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use strata_journal::export::{check_bytes, export_jsonl, load};
use strata_journal::note::SignerKey;
use strata_journal::pg::{PgError, PgOptions, PgStore};
use strata_journal::projection::Projections;
use strata_journal::verify::verify_store;
use strata_journal::{
    Conflict, Durability, EventData, ExpectedVersion, InputError, Journal, JournalError, SledStore, Store, StreamAppend,
};
use strata_tests::{event, options};
use uuid::Uuid;

const ORIGIN: &str = "strata.test/conformance";

fn ev(n: u128) -> EventData {
    event(Uuid::from_u128(n), "bench.sample", &serde_json::json!({ "n": n as u64, "text": "payload" }))
}

/// Where a test journal lives.
enum Target {
    Sled { _tmp: tempfile::TempDir, dir: PathBuf },
    Pg { url: String, options: Box<PgOptions> },
}

impl Target {
    fn sled() -> Target {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        Target::Sled { _tmp: tmp, dir }
    }

    fn pg() -> Target {
        let url = pg::url();
        let options = Box::new(pg::fresh_options(&url));
        Target::Pg { url, options }
    }

    /// Another empty target of the same kind.
    fn sibling(&self) -> Target {
        match self {
            Target::Sled { .. } => Target::sled(),
            Target::Pg { .. } => Target::pg(),
        }
    }

    fn create(&self, origin: &str) -> Journal {
        match self {
            Target::Sled { dir, .. } => Journal::create(dir, origin, &options(Durability::Process)).unwrap(),
            Target::Pg { options, .. } => Journal::create_postgres(options, origin).unwrap(),
        }
    }

    fn open(&self) -> Journal {
        match self {
            Target::Sled { dir, .. } => Journal::open(dir, &options(Durability::Process)).unwrap(),
            Target::Pg { options, .. } => Journal::open_postgres(options).unwrap(),
        }
    }

    /// `n` handles appending to the journal: with sled the one handle its process owns; with
    /// PostgreSQL independent handles, each with its own writer and sessions (as separate
    /// coordinators would have).
    fn handles(&self, j: &Journal, n: usize) -> Vec<Journal> {
        match self {
            Target::Sled { .. } => vec![j.clone(); n],
            Target::Pg { .. } => std::iter::once(j.clone()).chain((1..n).map(|_| self.open())).collect(),
        }
    }

    /// Verifies what is stored, through a store of its own.
    fn verify(&self, key: Option<&SignerKey>) -> strata_journal::verify::VerifyReport {
        let keys = key.map(|k| vec![k.verifier()]).unwrap_or_default();
        match self {
            Target::Sled { dir, .. } => {
                strata_journal::verify::verify_dir(dir, &options(Durability::Process), keys, &[]).unwrap()
            }
            Target::Pg { options, .. } => verify_store(&PgStore::connect(options).unwrap(), None, keys, &[]).unwrap(),
        }
    }

    /// Flips one bit of the stored bytes of event `seq`, leaving its stored hash (the journal must
    /// be closed).
    fn tamper(&self, seq: u64) {
        match self {
            Target::Sled { dir, .. } => {
                let store = SledStore::open(&dir.join("sled"), Durability::Process, 8 << 20).unwrap();
                let (first, bytes) = store.frame_containing(seq).unwrap().unwrap();
                let mut rebuilt = strata_journal::frame::FrameBuilder::new();
                for entry in strata_journal::frame::entries(bytes.as_ref()).unwrap() {
                    let (hash, raw) = entry.unwrap();
                    let mut raw = raw.to_vec();
                    if strata_journal::record::decode(&raw).unwrap().seq == seq {
                        let last = raw.len() - 2;
                        raw[last] ^= 1;
                    }
                    rebuilt.push(&hash, &raw);
                }
                store.commit(&[(first, rebuilt.finish())], &[]).unwrap();
                store.sync().unwrap();
            }
            Target::Pg { url, options } => {
                pg::psql(
                    url,
                    &format!(
                        "UPDATE {}.strata_events SET record = set_byte(record, length(record) - 2, get_byte(record, length(record) - 2) # 1) WHERE seq = {seq}",
                        options.schema
                    ),
                );
            }
        }
    }
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sled_backend {
            $(#[test] fn $case() { super::$case(&super::Target::sled()); })*
        }
        mod postgres_backend {
            $(#[test] #[ignore = "needs PostgreSQL; CI runs them"] fn $case() { super::$case(&super::Target::pg()); })*
        }
    };
}

conformance!(
    optimistic_concurrency_gives_the_typed_conflict,
    concurrent_appenders_get_gapless_sequences_in_one_chain,
    idempotency_by_event_id_is_permanent,
    multi_stream_appends_are_all_or_nothing,
    subscriptions_catch_up_then_follow_without_gaps,
    export_then_import_keeps_every_hash,
    verify_passes_then_names_the_tampered_event,
    projection_snapshots_resume_at_the_head,
    a_long_scan_reads_every_event_in_order_and_stops_where_asked,
);

/// Longer than the pages PostgreSQL scans read (8,192 rows), so most of it is read ahead on the
/// scan's own thread: every event once, in order; a visitor that stops mid-way stops the
/// read-ahead; the journal's sessions read normally afterwards.
fn a_long_scan_reads_every_event_in_order_and_stops_where_asked(t: &Target) {
    const EVENTS: u64 = 20_000;
    let j = t.create(ORIGIN);
    for k in 0..20u128 {
        let events = (0..1_000u128).map(|i| ev(k * 1_000 + i + 1)).collect();
        j.append_blocking(&format!("s/{k}"), ExpectedVersion::Any, events).unwrap().unwrap();
    }
    let mut seqs = Vec::new();
    j.scan(1, EVENTS, |rec, _| {
        seqs.push(rec.seq);
        Ok::<_, ()>(true)
    })
    .unwrap()
    .unwrap();
    assert_eq!(seqs, (1..=EVENTS).collect::<Vec<_>>());
    let mut seen = 0u64;
    j.scan(3, EVENTS, |rec, _| {
        seen += 1;
        assert_eq!(rec.seq, seen + 2);
        Ok::<_, ()>(seen < 12_345)
    })
    .unwrap()
    .unwrap();
    assert_eq!(seen, 12_345, "the visitor stopped the scan where it asked");
    let tail = j.read_range(EVENTS - 9, 100).unwrap();
    assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), ((EVENTS - 9)..=EVENTS).collect::<Vec<_>>());
    let mut again = 0u64;
    j.scan(1, EVENTS, |_, _| {
        again += 1;
        Ok::<_, ()>(true)
    })
    .unwrap()
    .unwrap();
    assert_eq!(again, EVENTS);
}

fn optimistic_concurrency_gives_the_typed_conflict(t: &Target) {
    let j = t.create(ORIGIN);
    let a = j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    assert_eq!((a.positions[0].seq, a.positions[0].version), (1, 1));
    let head = j.head();
    let c = j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(2)]).unwrap().unwrap_err();
    assert_eq!(c, Conflict { stream: "s/a".into(), expected: ExpectedVersion::Exact(0), actual: 1 });
    assert!(c.to_string().starts_with("[STRATA-E0100]"));
    assert_eq!(j.head(), head, "a refused append appends nothing");
    // The other handle (another coordinator, with PostgreSQL) is refused the same way.
    let other = t.handles(&j, 2).pop().unwrap();
    let c2 = other.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(3)]).unwrap().unwrap_err();
    assert_eq!(c2, c);
    let ok = other.append_blocking("s/a", ExpectedVersion::Exact(1), vec![ev(4)]).unwrap().unwrap();
    assert_eq!((ok.positions[0].seq, ok.positions[0].version), (2, 2));
}

fn concurrent_appenders_get_gapless_sequences_in_one_chain(t: &Target) {
    const THREADS: usize = 12;
    const APPENDS: u128 = 15;
    let j = t.create(ORIGIN);
    let handles = t.handles(&j, 3);
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (h, barrier) = (handles[w % handles.len()].clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut conflicts = 0u32;
                for i in 0..APPENDS {
                    let id = (w as u128) * 1000 + i + 1;
                    let stream = format!("s/{}", (w + i as usize) % 4);
                    // Read, decide, append at the read version; a conflict means someone else
                    // appended first: read again.
                    loop {
                        let v = h.refresh().map(|_| h.stream_version(&stream)).unwrap();
                        match h.append_blocking(&stream, ExpectedVersion::Exact(v), vec![ev(id)]).unwrap() {
                            Ok(_) => break,
                            Err(c) => {
                                assert_eq!(c.stream, stream);
                                conflicts += 1;
                                assert!(conflicts < 10_000, "livelock");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let total = THREADS as u64 * APPENDS as u64;
    assert_eq!(j.refresh().unwrap().seq, total);
    let all = j.read_range(1, total as usize + 10).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>());
    for w in all.windows(2) {
        assert_eq!(w[1].prev, w[0].hash, "one chain over the commit order");
    }
    let mut versions: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &all {
        let v = versions.entry(&e.stream).or_default();
        *v += 1;
        assert_eq!(e.version, *v, "stream versions gapless");
    }
    let stats: Vec<_> = handles.iter().map(Journal::writer_stats).collect();
    let (batches, requests): (u64, u64) = stats.iter().fold((0, 0), |a, s| (a.0 + s.batches, a.1 + s.requests));
    assert!(batches < requests, "group commit: {batches} commits for {requests} requests");
    j.close_blocking().unwrap();
    drop((j, handles));
    assert!(t.verify(None).ok());
}

fn idempotency_by_event_id_is_permanent(t: &Target) {
    let j = t.create(ORIGIN);
    let first = j.append_blocking("s/i", ExpectedVersion::EMPTY, vec![ev(1), ev(2)]).unwrap().unwrap();
    j.append_blocking("s/other", ExpectedVersion::Any, vec![ev(3)]).unwrap().unwrap();
    let head = j.head();
    // A retry whose expected version no longer holds still gets the original positions.
    let again = j.append_blocking("s/i", ExpectedVersion::EMPTY, vec![ev(1), ev(2)]).unwrap().unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.positions, first.positions);
    assert_eq!(j.head(), head);
    // Half a retry is refused, naming the id.
    let e = j.append_blocking("s/i", ExpectedVersion::Any, vec![ev(1), ev(9)]).unwrap_err();
    assert!(matches!(e, JournalError::Input(InputError::IdempotencyMismatch { .. })), "{e}");
    assert_eq!(j.head(), head);
    drop(t.handles(&j, 2));
    j.close_blocking().unwrap();
    drop(j);
    // Permanent: after a reopen, and from another handle.
    let j = t.open();
    let later = t.handles(&j, 2).pop().unwrap();
    let again = later.append_blocking("s/i", ExpectedVersion::Any, vec![ev(1), ev(2)]).unwrap().unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.positions, first.positions);
    assert_eq!(later.refresh().unwrap(), head);
}

fn multi_stream_appends_are_all_or_nothing(t: &Target) {
    let j = t.create(ORIGIN);
    j.append_blocking("s/y", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let head = j.head();
    let req = |x: ExpectedVersion, y: ExpectedVersion, base: u128| {
        vec![
            StreamAppend { stream: "s/x".into(), expected: x, events: vec![ev(base), ev(base + 1)] },
            StreamAppend { stream: "s/y".into(), expected: y, events: vec![ev(base + 2)] },
        ]
    };
    let c = j.append_multi_blocking(req(ExpectedVersion::EMPTY, ExpectedVersion::Exact(5), 10)).unwrap().unwrap_err();
    assert_eq!(c.stream, "s/y");
    assert_eq!(j.head(), head);
    assert_eq!(j.stream_version("s/x"), 0, "the half that matched was not appended");
    let ok = j.append_multi_blocking(req(ExpectedVersion::EMPTY, ExpectedVersion::Exact(1), 20)).unwrap().unwrap();
    let got: Vec<_> = ok.positions.iter().map(|p| (p.seq, p.version)).collect();
    assert_eq!(got, vec![(2, 1), (3, 2), (4, 2)]);
    let reopened = t.handles(&j, 2).pop().unwrap();
    assert_eq!(reopened.refresh().unwrap().seq, 4);
    assert_eq!(reopened.stream_version("s/x"), 2);
}

fn subscriptions_catch_up_then_follow_without_gaps(t: &Target) {
    let j = t.create(ORIGIN);
    for i in 1..=5 {
        j.append_blocking("s/sub", ExpectedVersion::Any, vec![ev(i)]).unwrap().unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let mut sub = j.subscribe(1);
    let reader = std::thread::spawn(move || {
        for _ in 0..15 {
            let e = sub.next_blocking().unwrap().expect("an event");
            tx.send(e.seq).unwrap();
        }
    });
    // Live events come from another handle (with PostgreSQL, another coordinator's writer).
    let other = t.handles(&j, 2).pop().unwrap();
    for i in 6..=15 {
        other.append_blocking("s/sub", ExpectedVersion::Any, vec![ev(i)]).unwrap().unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..15 {
        seen.push(rx.recv_timeout(std::time::Duration::from_secs(120)).expect("the subscription delivers"));
    }
    reader.join().unwrap();
    assert_eq!(seen, (1..=15).collect::<Vec<_>>());
}

fn export_then_import_keeps_every_hash(t: &Target) {
    let j = t.create(ORIGIN);
    for i in 0..30u128 {
        j.append_blocking(&format!("s/{}", i % 3), ExpectedVersion::Any, vec![ev(i + 1)]).unwrap().unwrap();
    }
    let key = SignerKey::from_seed("auditor", [7; 32]).unwrap();
    j.checkpoint_blocking(Arc::new(key), Uuid::from_u128(999), 1_795_000_000_000_000_000).unwrap();
    let mut out = Vec::new();
    let summary = export_jsonl(&j, &mut out).unwrap();
    let target = t.sibling();
    let copy = target.create(ORIGIN);
    let checked = check_bytes(std::path::Path::new("export.jsonl"), &out, &|_, _| true).unwrap();
    load(&copy, &checked).unwrap();
    assert_eq!(copy.head(), j.head());
    assert_eq!((summary.events, summary.head, summary.root), (j.head().seq, j.head().hash, j.head().root));
    let mut again = Vec::new();
    export_jsonl(&copy, &mut again).unwrap();
    assert_eq!(again, out, "the import exports byte for byte the same");
    // The checkpoint's note is kept beside the copy as beside the original.
    let notes = |j: &Journal| j.saved_notes().unwrap().into_iter().map(|(_, n)| n).collect::<Vec<_>>();
    assert_eq!(notes(&copy).len(), 1);
    assert_eq!(notes(&copy), notes(&j));
}

fn verify_passes_then_names_the_tampered_event(t: &Target) {
    let j = t.create(ORIGIN);
    for i in 0..20u128 {
        j.append_blocking(&format!("s/{}", i % 2), ExpectedVersion::Any, vec![ev(i + 1), ev(i + 101)])
            .unwrap()
            .unwrap();
    }
    let key = Arc::new(SignerKey::from_seed("auditor", [9; 32]).unwrap());
    j.checkpoint_blocking(key.clone(), Uuid::from_u128(999), 1_795_000_000_000_000_000).unwrap();
    let head = j.head();
    j.close_blocking().unwrap();
    drop(j);
    let good = t.verify(Some(&key));
    assert!(good.ok(), "{:?}", good.problems);
    assert_eq!((good.events, good.head_hash, good.root), (head.seq, head.hash, head.root));
    t.tamper(17);
    let bad = t.verify(Some(&key));
    assert!(!bad.ok());
    assert_eq!(bad.first_bad_seq, Some(17), "{:?}", bad.problems);
}

fn projection_snapshots_resume_at_the_head(t: &Target) {
    let j = t.create(ORIGIN);
    for i in 0..25u128 {
        j.append_blocking(&format!("s/{}", i % 5), ExpectedVersion::Any, vec![ev(i + 1)]).unwrap().unwrap();
    }
    let mut p = Projections::new(strata_engine::projections::standard_projections());
    p.catch_up(&j).unwrap();
    p.save_snapshots(&j).unwrap();
    let hashes = p.state_hashes();
    j.append_blocking("s/0", ExpectedVersion::Any, vec![ev(100)]).unwrap().unwrap();
    j.close_blocking().unwrap();
    drop(j);
    let j = t.open();
    let mut resumed = Projections::new(strata_engine::projections::standard_projections());
    let status = resumed.catch_up(&j).unwrap();
    assert!(status.iter().all(|s| s.from_snapshot == 25 && s.applied == 1), "{status:?}");
    let mut rebuilt = Projections::new(strata_engine::projections::standard_projections());
    rebuilt.rebuild(&j).unwrap();
    assert_eq!(resumed.state_hashes(), rebuilt.state_hashes());
    assert_ne!(resumed.state_hashes(), hashes);
}

// ---- PostgreSQL only ----

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn a_journal_moved_sled_to_postgres_to_sled_keeps_every_hash() {
    let sled = Target::sled();
    let j = sled.create(ORIGIN);
    for i in 0..40u128 {
        j.append_blocking(&format!("s/{}", i % 4), ExpectedVersion::Any, vec![ev(i + 1)]).unwrap().unwrap();
    }
    let mut first = Vec::new();
    export_jsonl(&j, &mut first).unwrap();
    let pg = Target::pg();
    let on_pg = pg.create(ORIGIN);
    load(&on_pg, &check_bytes(std::path::Path::new("a"), &first, &|_, _| true).unwrap()).unwrap();
    assert_eq!(on_pg.head(), j.head());
    let mut second = Vec::new();
    export_jsonl(&on_pg, &mut second).unwrap();
    let back = Target::sled();
    let again = back.create(ORIGIN);
    load(&again, &check_bytes(std::path::Path::new("b"), &second, &|_, _| true).unwrap()).unwrap();
    assert_eq!(again.head(), j.head());
    assert_eq!(first, second);
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn migrations_are_idempotent_and_a_newer_schema_is_refused() {
    let url = pg::url();
    let options = pg::fresh_options(&url);
    assert!(matches!(Journal::open_postgres(&options), Err(JournalError::NotAJournal { .. })));
    let m1 = PgStore::migrate(&options).unwrap();
    assert_eq!((m1.from, m1.to), (0, strata_journal::pg::SCHEMA_VERSION));
    let m2 = PgStore::migrate(&options).unwrap();
    assert_eq!((m2.from, m2.to), (m1.to, m1.to), "a second run changes nothing");
    let j = Journal::create_postgres(&options, ORIGIN).unwrap();
    j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    assert!(matches!(Journal::create_postgres(&options, ORIGIN), Err(JournalError::AlreadyExists { .. })));
    // A journal made by the previous schema version: refused until `init` upgrades it, then
    // the same journal.
    let head = j.head();
    drop(j);
    let s = &options.schema;
    pg::psql(
        &url,
        &format!("DROP TABLE {s}.strata_checkpoints; DELETE FROM {s}.strata_schema_version WHERE version = 2"),
    );
    let older = Journal::open_postgres(&options).unwrap_err();
    assert!(older.to_string().starts_with("[STRATA-E2304]"), "{older}");
    let up = PgStore::migrate(&options).unwrap();
    assert_eq!((up.from, up.to), (1, 2));
    let j = Journal::open_postgres(&options).unwrap();
    assert_eq!(j.head(), head);
    drop(j);
    pg::psql(&url, &format!("INSERT INTO {}.strata_schema_version (version) VALUES (99)", options.schema));
    for e in [Journal::open_postgres(&options).unwrap_err(), PgStore::migrate(&options).unwrap_err()] {
        assert!(matches!(e, JournalError::Postgres(PgError::SchemaNewer { found: 99, .. })), "{e}");
        assert!(e.to_string().starts_with("[STRATA-E2303]"), "{e}");
    }
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn lock_timeout_bounds_a_stuck_holder_of_the_order_and_appends_nothing() {
    let url = pg::url();
    let mut options = pg::fresh_options(&url);
    options.lock_timeout = std::time::Duration::from_millis(200);
    let j = Journal::create_postgres(&options, ORIGIN).unwrap();
    j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let head = j.head();
    // A client that took the ordering lock and then stopped (it never commits).
    let mut stuck = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    stuck.batch_execute(&format!("BEGIN; SELECT * FROM {}.strata_head FOR UPDATE", options.schema)).unwrap();
    let e = j.append_blocking("s/a", ExpectedVersion::Exact(1), vec![ev(2)]).unwrap_err();
    assert!(matches!(e, JournalError::Postgres(PgError::LockTimeout { ms: 200, .. })), "{e}");
    assert!(e.to_string().starts_with("[STRATA-E2307]"), "{e}");
    assert_eq!(j.refresh().unwrap(), head, "nothing appended");
    stuck.batch_execute("ROLLBACK").unwrap();
    // The journal was not poisoned: the same append goes through once the holder let go.
    let ok = j.append_blocking("s/a", ExpectedVersion::Exact(1), vec![ev(2)]).unwrap().unwrap();
    assert_eq!(ok.positions[0].seq, 2);
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn idle_in_transaction_timeout_ends_a_client_that_stopped_holding_the_order() {
    let url = pg::url();
    let options = pg::fresh_options(&url);
    let j = Journal::create_postgres(&options, ORIGIN).unwrap();
    // A client with the journal's session settings (a short idle timeout here) takes the order
    // and stops talking, as a coordinator frozen mid-commit would.
    let mut stuck = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    stuck
        .batch_execute(&format!(
            "SET idle_in_transaction_session_timeout = 300; BEGIN; SELECT * FROM {}.strata_head FOR UPDATE",
            options.schema
        ))
        .unwrap();
    // Waits behind it (lock_timeout is 10 s) until the server ends the idle session.
    let ok = j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    assert_eq!(ok.positions[0].seq, 1);
    let e = stuck.batch_execute("SELECT 1").unwrap_err();
    let code = e.as_db_error().map(|d| d.code().code().to_owned());
    assert!(e.is_closed() || code.as_deref() == Some("25P03"), "the server ended it: {e:?}");
    // The journal's own sessions carry such a setting (the default, 30 s).
    let store = PgStore::connect(&options).unwrap();
    assert_eq!(store.session_setting("idle_in_transaction_session_timeout").unwrap(), "30s");
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn sessions_set_the_journal_timeouts_and_tcp_keepalives() {
    let url = pg::url();
    let mut options = pg::fresh_options(&url);
    options.lock_timeout = std::time::Duration::from_millis(1234);
    options.statement_timeout = std::time::Duration::from_millis(56_000);
    options.idle_in_transaction_timeout = std::time::Duration::from_millis(4321);
    options.keepalive_idle = std::time::Duration::from_secs(7);
    options.application_name = format!("strata-keepalive-{}", std::process::id());
    let j = Journal::create_postgres(&options, ORIGIN).unwrap();
    j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    // Server side: what a session of the journal runs with.
    let store = PgStore::connect(&options).unwrap();
    assert_eq!(store.session_setting("lock_timeout").unwrap(), "1234ms");
    assert_eq!(store.session_setting("statement_timeout").unwrap(), "56s");
    assert_eq!(store.session_setting("idle_in_transaction_session_timeout").unwrap(), "4321ms");
    // Client side: each of the journal's sockets runs a keepalive timer no longer than the
    // configured idle time (the kernel default is two hours).
    let ports = pg::psql(
        &url,
        &format!("SELECT client_port FROM pg_stat_activity WHERE application_name = '{}'", options.application_name),
    );
    let ports: Vec<&str> = ports.lines().collect();
    assert!(ports.len() >= 2, "writer and reader sessions: {ports:?}");
    for port in ports {
        let out = std::process::Command::new("ss")
            .args(["-tnoH", "state", "established", &format!("( sport = :{port} )")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let timer = text.split("timer:(keepalive,").nth(1).unwrap_or_else(|| panic!("no keepalive timer: {text}"));
        let left = timer.split(',').next().unwrap();
        let secs: f64 = if let Some(ms) = left.strip_suffix("ms") {
            ms.parse::<f64>().unwrap() / 1000.0
        } else if let Some(m) = left.split_once("min") {
            m.0.parse::<f64>().unwrap() * 60.0
        } else {
            left.trim_end_matches("sec").parse().unwrap()
        };
        assert!(secs <= 7.0, "keepalive idle {left} on port {port}");
    }
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn two_workspaces_that_name_one_database_see_one_journal() {
    const BIN: &str = strata_tests::strata_bin!();
    let url = pg::url();
    let schema = pg::fresh_options(&url).schema;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // A password in the URL is refused before anything is written.
    let with_pw = url.replacen("strata@", "strata:hunter2@", 1);
    let out = strata_tests::strata(BIN, &a, &["init", "--backend", "postgres", "--url", &with_pw]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("[STRATA-E2305]") && !err.contains("hunter2"), "{err}");
    assert!(!a.join(".strata").exists());
    // So is a URL (or PGSSLMODE) asking for TLS, which strata's client does not have: refused,
    // never connected in plain text.
    let tls = format!("{url}?sslmode=require");
    let out = strata_tests::strata(BIN, &a, &["init", "--backend", "postgres", "--url", &tls]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("[STRATA-E2410]") && err.contains("sslmode=require"), "{err}");
    assert!(!a.join(".strata").exists());
    let c = tmp.path().join("c");
    std::fs::create_dir_all(&c).unwrap();
    let out = std::process::Command::new(BIN)
        .arg("--dir")
        .arg(&c)
        .args(["init", "--backend", "postgres", "--url", &url, "--schema", &schema])
        .env("PGSSLMODE", "verify-full")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("[STRATA-E2410]") && err.contains("PGSSLMODE"), "{err}");
    assert_eq!(pg::psql(&url, &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'")), "0");
    let init = ["init", "--backend", "postgres", "--url", &url, "--schema", &schema];
    let first = strata_tests::strata_ok(BIN, &a, &init);
    assert!(first.contains("created the shared journal"), "{first}");
    let second = strata_tests::strata_ok(BIN, &b, &init);
    assert!(second.contains("attached to the shared journal"), "{second}");
    let config = std::fs::read_to_string(b.join(".strata/config.toml")).unwrap();
    assert!(config.contains("backend = \"postgres\"") && config.contains(&format!("url = \"{url}\"")), "{config}");
    // What one workspace appended, the other reads; both verify the one journal.
    for ws in [&a, &b] {
        let log = strata_tests::strata_ok(BIN, ws, &["--json", "journal", "log"]);
        assert_eq!(log.matches("workspace.initialized").count(), 1, "{log}");
        strata_tests::strata_ok(BIN, ws, &["journal", "verify"]);
    }
}

/// A sled workspace at `dir` holding `events` events on 8 streams (plus `workspace.initialized`
/// and a signed checkpoint), exported through the CLI to `dir/export.jsonl`.
fn sled_export(bin: &str, dir: &std::path::Path, events: u128) -> PathBuf {
    strata_tests::strata_ok(bin, dir, &["init", "--durability", "process", "--origin", ORIGIN]);
    let j = Journal::open(&dir.join(".strata/journal"), &options(Durability::Process)).unwrap();
    let mut n = 0u128;
    while n < events {
        let appends: Vec<StreamAppend> = (0..8u128)
            .map(|s| StreamAppend {
                stream: format!("s/{s}"),
                expected: ExpectedVersion::Any,
                events: (0..(events - n).div_ceil(8).min(512)).map(|k| ev(1 + n + s * 512 + k)).collect(),
            })
            .collect();
        n += appends.iter().map(|a| a.events.len() as u128).sum::<u128>();
        j.append_multi_blocking(appends).unwrap().unwrap();
    }
    let key = SignerKey::from_seed("auditor", [5; 32]).unwrap();
    j.checkpoint_blocking(Arc::new(key), Uuid::from_u128(u128::MAX), 1_795_000_000_000_000_000).unwrap();
    j.close_blocking().unwrap();
    drop(j);
    let file = dir.join("export.jsonl");
    strata_tests::strata_ok(bin, dir, &["journal", "export", "--jsonl", "--out", file.to_str().unwrap()]);
    file
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn journal_import_into_postgres_through_the_cli_is_all_or_nothing() {
    const BIN: &str = strata_tests::strata_bin!();
    let url = pg::url();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let file = sled_export(BIN, &src, 200);
    let exported = std::fs::read_to_string(&file).unwrap();
    let schema_exists =
        |s: &str| pg::psql(&url, &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{s}'")) == "1";
    let import = |ws: &std::path::Path, file: &std::path::Path, schema: &str| {
        std::fs::create_dir_all(ws).unwrap();
        let args =
            ["journal", "import", file.to_str().unwrap(), "--backend", "postgres", "--url", &url, "--schema", schema];
        strata_tests::strata(BIN, ws, &args)
    };

    // A good import: the journal lands in a new schema, the workspace names it, and it exports
    // byte for byte what was imported.
    let schema = pg::fresh_options(&url).schema;
    let dst = tmp.path().join("dst");
    let out = import(&dst, &file, &schema);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let config = std::fs::read_to_string(dst.join(".strata/config.toml")).unwrap();
    assert!(
        config.contains("backend = \"postgres\"") && config.contains(&format!("schema = \"{schema}\"")),
        "{config}"
    );
    strata_tests::strata_ok(BIN, &dst, &["journal", "verify"]);
    assert_eq!(strata_tests::strata_ok(BIN, &dst, &["journal", "export", "--jsonl"]), exported);

    // Refused imports leave nothing: no workspace, no schema, no temporary schema.
    let lines: Vec<&str> = exported.lines().collect();
    let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    edited[3] = edited[3].replacen("\"payload\":{\"n\":", "\"payload\":{\"n\":1", 1);
    assert_ne!(edited[3], lines[3]);
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, edited.join("\n") + "\n").unwrap();
    let existing = pg::fresh_options(&url).schema;
    pg::psql(&url, &format!("CREATE SCHEMA {existing}"));
    let cases = [
        ("an altered export", bad.as_path(), pg::fresh_options(&url).schema, "STRATA-E0305"),
        ("a schema holding a journal", file.as_path(), schema.clone(), "STRATA-E0306"),
        ("a schema that exists", file.as_path(), existing.clone(), "STRATA-E2310"),
    ];
    let head = strata_tests::strata_ok(BIN, &dst, &["--json", "journal", "log", "--limit", "1"]);
    for (i, (what, f, target, code)) in cases.iter().enumerate() {
        let ws = tmp.path().join(format!("refused-{i}"));
        let out = import(&ws, f, target);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(code), "{what}: expected {code}: {err}");
        assert!(!ws.join(".strata").exists(), "{what}: the workspace was left behind");
        assert_eq!(schema_exists(target), target == &schema || target == &existing, "{what}");
    }
    assert_eq!(strata_tests::strata_ok(BIN, &dst, &["--json", "journal", "log", "--limit", "1"]), head);
    assert_eq!(pg::psql(&url, &format!("SELECT count(*) FROM pg_tables WHERE schemaname = '{existing}'")), "0");

    // An import killed half-way leaves no journal in its target; the next import drops what it
    // left and puts the whole journal in place.
    let big_src = tmp.path().join("big");
    std::fs::create_dir_all(&big_src).unwrap();
    let big = sled_export(BIN, &big_src, 40_000);
    let target = pg::fresh_options(&url).schema;
    let ws = tmp.path().join("killed");
    std::fs::create_dir_all(&ws).unwrap();
    let mut child = std::process::Command::new(BIN)
        .arg("--dir")
        .arg(&ws)
        .args(["journal", "import", big.to_str().unwrap(), "--backend", "postgres", "--url", &url])
        .args(["--schema", &target])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let temp_like = format!("strata_importing_%_{}", child.id());
    let mut watcher = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    // Bounded poll for the temporary schema's first events, then hold its ordering lock (the
    // import's next append waits on it) and kill the import there.
    let mut temp = None;
    for _ in 0..2_000_000 {
        let found = watcher
            .query_opt("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1", &[&temp_like])
            .unwrap()
            .map(|r| r.get::<_, String>(0));
        if let Some(t) = found
            && watcher
                .query_one(&format!("SELECT to_regclass('{t}.strata_head') IS NOT NULL"), &[])
                .unwrap()
                .get::<_, bool>(0)
            && watcher.query_one(&format!("SELECT last_seq FROM {t}.strata_head"), &[]).unwrap().get::<_, i64>(0) > 0
        {
            temp = Some(t);
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the import ended before it could be interrupted");
    }
    let temp = temp.expect("the import started loading");
    let mut hold = watcher.transaction().unwrap();
    let loaded: i64 =
        hold.query_one(&format!("SELECT last_seq FROM {temp}.strata_head FOR UPDATE"), &[]).unwrap().get(0);
    child.kill().unwrap();
    child.wait().unwrap();
    hold.rollback().unwrap();
    let total = std::fs::read_to_string(&big).unwrap().lines().count() as i64 - 2;
    assert!(loaded > 0 && loaded < total, "killed half-way: {loaded} of {total} loaded");
    assert!(!schema_exists(&target), "no journal where the import was going");
    let log = strata_tests::strata(BIN, &ws, &["journal", "log"]);
    assert!(String::from_utf8_lossy(&log.stderr).contains("STRATA-E0204"), "{}", String::from_utf8_lossy(&log.stderr));
    let again = import(&ws, &big, &target);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(!schema_exists(&temp), "the leftover of the killed import was dropped");
    strata_tests::strata_ok(BIN, &ws, &["journal", "verify"]);
    assert_eq!(
        strata_tests::strata_ok(BIN, &ws, &["journal", "export", "--jsonl"]),
        std::fs::read_to_string(&big).unwrap()
    );
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn checkpoint_notes_on_postgres_are_kept_in_the_journal_for_every_process_and_verified() {
    let url = pg::url();
    let options = pg::fresh_options(&url);
    let j = Journal::create_postgres(&options, ORIGIN).unwrap();
    for i in 1..=10u128 {
        j.append_blocking("s/n", ExpectedVersion::Any, vec![ev(i)]).unwrap().unwrap();
    }
    let key = Arc::new(SignerKey::from_seed("auditor", [3; 32]).unwrap());
    let signed = j.checkpoint_blocking(key.clone(), Uuid::from_u128(500), 1_795_000_000_000_000_000).unwrap();
    let table = format!("{}.strata_checkpoints", options.schema);
    assert_eq!(pg::psql(&url, &format!("SELECT size FROM {table}")), "10");
    // Another coordinator (its own handle) finds the note; saving it again keeps one row.
    let other = Journal::open_postgres(&options).unwrap();
    let notes = other.saved_notes().unwrap();
    assert_eq!(notes.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>(), [signed.note.as_str()]);
    other.save_note(10, &signed.note).unwrap();
    assert_eq!(pg::psql(&url, &format!("SELECT count(*) FROM {table}")), "1");
    // `journal verify` checks the table's notes like sled's note files.
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, vec![key.verifier()], &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert!(
        report.checkpoints.iter().any(|c| c.source.contains("strata_checkpoints") && c.root_matches),
        "{:?}",
        report.checkpoints
    );
    // A note over another history (a fork, or a forgery) kept there is a finding.
    let forged =
        strata_journal::note::Checkpoint { origin: ORIGIN.into(), size: 5, root: strata_journal::Hash([9; 32]) };
    other.save_note(5, &key.sign_note(&forged.body()).unwrap()).unwrap();
    let head = other.head();
    let bad = verify_store(&PgStore::connect(&options).unwrap(), None, vec![key.verifier()], &[]).unwrap();
    assert!(!bad.ok());
    assert!(bad.problems.iter().any(|p| p.kind == "checkpoint-root"), "{:?}", bad.problems);
    assert_eq!(other.refresh().unwrap(), head, "saving a note appends nothing");
    // A bundle carries every note kept.
    let mut bundle = Vec::new();
    strata_journal::export::export_bundle(&j, &mut bundle, &[key.verifier()], &[]).unwrap();
    let text = String::from_utf8(bundle).unwrap();
    assert_eq!(text.lines().filter(|l| l.starts_with("{\"checkpoint\"")).count(), 2);
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn deferred_appends_in_the_local_pending_directory_reach_a_postgres_journal() {
    use strata_journal::pending;
    let url = pg::url();
    let options = pg::fresh_options(&url);
    let first = Journal::create_postgres(&options, ORIGIN).unwrap();
    first.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".strata/journal");
    // Two denials a write guard could not record in time, one already recorded (its retry), and
    // a damaged file.
    for id in [11u128, 12, 1] {
        let stream = if id == 1 { "s/a" } else { "guard/L-1" };
        pending::defer(&dir, stream, &ev(id)).unwrap();
    }
    std::fs::write(pending::pending_dir(&dir).join("01a00000-0000-7000-8000-000000000000.json"), "{not json").unwrap();
    assert_eq!(pending::count(&dir), 4);
    let head = first.head().seq;
    let j = Journal::open_postgres_at(&options, &dir).unwrap();
    assert_eq!(j.dir(), Some(dir.as_path()));
    let guard: Vec<u128> = j.read_stream("guard/L-1", 1, 10).unwrap().iter().map(|e| e.id.as_u128()).collect();
    assert_eq!(guard, [11, 12], "folded at open, in the order they were made");
    assert_eq!(j.head().seq, head + 2, "the retry was not appended twice");
    assert_eq!(pending::count(&dir), 0);
    assert_eq!(std::fs::read_dir(pending::pending_dir(&dir).join("rejected")).unwrap().count(), 1);
    // While it runs, the next one is folded when it looks; every other coordinator sees it.
    pending::defer(&dir, "guard/L-1", &ev(13)).unwrap();
    assert_eq!(j.fold_pending().unwrap(), 1);
    assert_eq!(first.refresh().unwrap().seq, head + 3);
    assert_eq!(first.read_stream("guard/L-1", 3, 1).unwrap()[0].id.as_u128(), 13);
    // Without a directory there is nothing to fold.
    assert_eq!(first.fold_pending().unwrap(), 0);
}
