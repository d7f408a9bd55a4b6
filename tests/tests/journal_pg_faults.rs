//! Faults on a PostgreSQL journal, for real: the server SIGKILLed and restarted under twelve
//! concurrent appenders, and a writer process SIGKILLed while it commits. Each test runs a
//! server of its own (it kills it), started like `.ci/postgres` starts the shared one.

mod pg;

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::sync::{Arc, Condvar, Mutex};

use strata_journal::pg::PgStore;
use strata_journal::verify::verify_store;
use strata_journal::{EventData, ExpectedVersion, Journal, StreamAppend};
use strata_tests::event;
use uuid::Uuid;

const ORIGIN: &str = "strata.test/faults";

fn ev(id: u128) -> EventData {
    event(Uuid::from_u128(id), "bench.sample", &serde_json::json!({ "id": id as u64 }))
}

fn server_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", Uuid::now_v7().simple()))
}

/// A request of 1 to 3 events across distinct streams of 20; ids derived from `(writer, n)`.
fn request(writer: u128, n: u128) -> Vec<StreamAppend> {
    let width = (n % 3 + 1) as usize;
    (0..width)
        .map(|k| StreamAppend {
            stream: format!("s/{}", (writer * 7 + n + k as u128 * 5) % 20),
            expected: ExpectedVersion::Any,
            events: vec![ev((writer << 64) | (n << 8) | k as u128)],
        })
        .collect()
}

#[derive(Default)]
struct Progress {
    acked: BTreeMap<u128, u64>,
    restarted: bool,
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn sigkill_of_the_server_under_twelve_appenders_loses_nothing_acknowledged() {
    const WRITERS: u128 = 12;
    const APPENDS: u128 = 40;
    let server = pg::Server::start(&server_dir("pg-kill"));
    let mut options = pg::fresh_options(&server.url());
    options.connect_timeout = std::time::Duration::from_secs(2);
    let first = Journal::create_postgres(&options, ORIGIN).unwrap();
    let handles = [first.clone(), Journal::open_postgres(&options).unwrap(), Journal::open_postgres(&options).unwrap()];
    let state = Arc::new((Mutex::new(Progress::default()), Condvar::new()));
    let workers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (j, state) = (handles[w as usize % 3].clone(), state.clone());
            std::thread::spawn(move || {
                let mut in_doubt = 0u32;
                for n in 0..APPENDS {
                    let req = request(w, n);
                    let mut tries = 0;
                    let appended = loop {
                        tries += 1;
                        assert!(tries < 200, "writer {w} append {n} never got through");
                        match j.append_multi_blocking(req.clone()) {
                            Ok(r) => break r.expect("Any never conflicts"),
                            Err(e) => {
                                assert!(e.to_string().starts_with("[STRATA-E230"), "a typed backend error: {e}");
                                in_doubt += 1;
                                // In doubt: wait for the server to be back, then retry the same ids.
                                let (m, cv) = &*state;
                                let mut p = m.lock().unwrap();
                                while !p.restarted {
                                    p = cv.wait(p).unwrap();
                                }
                            }
                        }
                    };
                    let (m, cv) = &*state;
                    let mut p = m.lock().unwrap();
                    for (s, pos) in req.iter().flat_map(|s| &s.events).zip(&appended.positions) {
                        p.acked.insert(s.id.as_u128(), pos.seq);
                    }
                    cv.notify_all();
                }
                in_doubt
            })
        })
        .collect();
    {
        let (m, cv) = &*state;
        let mut p = m.lock().unwrap();
        while p.acked.len() < 150 {
            p = cv.wait(p).unwrap();
        }
    }
    server.kill9();
    server.up();
    {
        let (m, cv) = &*state;
        m.lock().unwrap().restarted = true;
        cv.notify_all();
    }
    let in_doubt: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(in_doubt > 0, "the kill landed while appends were in flight");
    let expected: usize = (0..WRITERS).flat_map(|w| (0..APPENDS).map(move |n| request(w, n).len())).sum();
    drop(handles);
    first.close_blocking().unwrap();
    drop(first);
    let j = Journal::open_postgres(&options).unwrap();
    let head = j.head();
    assert_eq!(head.seq as usize, expected, "every request landed once (never doubled): {in_doubt} were in doubt");
    let all = j.read_range(1, expected + 1).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=head.seq).collect::<Vec<_>>(), "gapless");
    let stored: BTreeMap<u128, u64> = all.iter().map(|e| (e.id.as_u128(), e.seq)).collect();
    let acked = std::mem::take(&mut state.0.lock().unwrap().acked);
    assert_eq!(acked.len(), expected);
    for (id, seq) in &acked {
        assert_eq!(stored.get(id), Some(seq), "event {id:x} is at the sequence it was acknowledged with");
    }
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!((report.events, report.head_hash, report.root), (head.seq, head.hash, head.root));
}

/// The child side of the writer-kill test: appends 6-event batches across 3 streams forever,
/// printing each acknowledged batch number.
fn child_writer(schema: &str, url: &str, child: u128) {
    let options = pg::fresh_options(url).with_schema(schema).unwrap();
    let j = Journal::open_postgres(&options).unwrap();
    let mut out = std::io::stdout().lock();
    for k in 0..1_000_000u128 {
        let req: Vec<StreamAppend> = (0..3u128)
            .map(|s| StreamAppend {
                stream: format!("c/{s}"),
                expected: ExpectedVersion::Any,
                events: vec![ev((child << 64) | (k << 8) | (s * 2)), ev((child << 64) | (k << 8) | (s * 2 + 1))],
            })
            .collect();
        j.append_multi_blocking(req).unwrap().unwrap();
        std::io::Write::write_all(&mut out, format!("acked {k}\n").as_bytes()).unwrap();
        std::io::Write::flush(&mut out).unwrap();
    }
}

#[test]
#[ignore = "needs PostgreSQL; CI runs them"]
fn sigkill_of_a_writer_mid_commit_leaves_no_partial_batch_and_others_carry_on() {
    if let (Ok(schema), Ok(url), Ok(child)) =
        (std::env::var("STRATA_FAULT_SCHEMA"), std::env::var("STRATA_FAULT_URL"), std::env::var("STRATA_FAULT_CHILD"))
    {
        return child_writer(&schema, &url, child.parse().unwrap());
    }
    let server = pg::Server::start(&server_dir("pg-writer"));
    let options = pg::fresh_options(&server.url());
    Journal::create_postgres(&options, ORIGIN).unwrap().close_blocking().unwrap();
    let spawn = |child: u32| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "sigkill_of_a_writer_mid_commit_leaves_no_partial_batch_and_others_carry_on"])
            .args(["--include-ignored", "--nocapture", "--test-threads=1"])
            .env("STRATA_FAULT_SCHEMA", &options.schema)
            .env("STRATA_FAULT_URL", server.url())
            .env("STRATA_FAULT_CHILD", child.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let acks = |c: &mut std::process::Child| std::io::BufReader::new(c.stdout.take().unwrap()).lines();
    let (mut victim, mut survivor) = (spawn(1), spawn(2));
    let (mut victim_acks, mut survivor_acks) = (acks(&mut victim), acks(&mut survivor));
    // Both are committing, contending for the ordering lock; kill one while it works.
    let mut seen = 0;
    while seen < 30 {
        let line = victim_acks.next().expect("the victim acknowledges").unwrap();
        if line.starts_with("acked ") {
            seen += 1;
        }
    }
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    // The other coordinator is not stalled by the dead one's transaction: it keeps committing.
    let mut after = 0;
    while after < 30 {
        let line = survivor_acks.next().expect("the survivor carries on").unwrap();
        if line.starts_with("acked ") {
            after += 1;
        }
    }
    survivor.kill().unwrap();
    survivor.wait().unwrap();
    let j = Journal::open_postgres(&options).unwrap();
    let head = j.head().seq;
    let all = j.read_range(1, head as usize).unwrap();
    assert_eq!(all.len() as u64, head);
    let mut batches: BTreeMap<(u128, u128), u32> = BTreeMap::new();
    for e in &all {
        let id = e.id.as_u128();
        *batches.entry((id >> 64, (id >> 8) & 0xffff_ffff_ffff)).or_default() += 1;
    }
    assert!(batches.keys().any(|(c, _)| *c == 1) && batches.keys().any(|(c, _)| *c == 2));
    assert!(batches.values().all(|&n| n == 6), "every batch whole or absent: {batches:?}");
    let report = verify_store(&PgStore::connect(&options).unwrap(), None, Vec::new(), &[]).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
