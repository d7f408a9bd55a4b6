//! The journal API on real sled: appends, optimistic concurrency, idempotency, atomic
//! multi-stream appends, reads, subscriptions, concurrency and bad input.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};

use strata_journal::limits::PAYLOAD_BYTES_MAX;
use strata_journal::{
    Conflict, Durability, EventData, ExpectedVersion, InputError, Journal, JournalError, StreamAppend,
};
use strata_tests::{create_journal, event, options};
use uuid::Uuid;

fn ev(n: u128) -> EventData {
    event(Uuid::from_u128(n), "bench.sample", &serde_json::json!({ "n": n as u64 }))
}

#[test]
fn sequences_and_versions_are_gapless_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = create_journal(&dir, Durability::Power);
    let a = j.append_blocking("s/a", ExpectedVersion::EMPTY, vec![ev(1), ev(2)]).unwrap().unwrap();
    assert_eq!(a.positions.iter().map(|p| (p.seq, p.version)).collect::<Vec<_>>(), vec![(1, 1), (2, 2)]);
    let b = j.append_blocking("s/b", ExpectedVersion::EMPTY, vec![ev(3)]).unwrap().unwrap();
    assert_eq!((b.positions[0].seq, b.positions[0].version), (3, 1));
    let head = j.head();
    j.close_blocking().unwrap();
    drop(j);
    let j = Journal::open(&dir, &options(Durability::Power)).unwrap();
    assert_eq!(j.head(), head);
    let c = j.append_blocking("s/a", ExpectedVersion::Exact(2), vec![ev(4)]).unwrap().unwrap();
    assert_eq!((c.positions[0].seq, c.positions[0].version), (4, 3));
    let all = j.read_range(1, 100).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    for w in all.windows(2) {
        assert_eq!(w[1].prev, w[0].hash, "chain");
    }
    let s = j.read_stream("s/a", 1, 100).unwrap();
    assert_eq!(s.iter().map(|e| (e.seq, e.version)).collect::<Vec<_>>(), vec![(1, 1), (2, 2), (4, 3)]);
    assert_eq!(j.read_stream("s/a", 3, 100).unwrap().len(), 1);
    assert_eq!(j.read_stream("s/none", 1, 100).unwrap(), vec![]);
    assert_eq!(j.read_range(2, 2).unwrap().iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(j.get(4).unwrap().unwrap().id, Uuid::from_u128(4));
    assert_eq!(j.get(5).unwrap(), None);
}

#[test]
fn a_damaged_index_snapshot_is_discarded_and_the_index_rebuilt_from_the_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = create_journal(&dir, Durability::Process);
    for i in 0..40u128 {
        let s = format!("s/{}", i % 5);
        let v = j.stream_version(&s);
        j.append_blocking(&s, ExpectedVersion::Exact(v), vec![ev(i + 1)]).unwrap().unwrap();
    }
    let head = j.head();
    assert_eq!(j.recovery().replayed_events, 0);
    // Dropping without close still snapshots the index (the writer's exit path).
    drop(j);
    let j = Journal::open(&dir, &options(Durability::Process)).unwrap();
    assert_eq!(j.recovery(), strata_journal::Recovery { index_snapshot_seq: 40, replayed_events: 0 });
    drop(j);
    // Damage the snapshot: it must be ignored and the index rebuilt from every frame.
    let snap = dir.join("index.snapshot");
    let mut bytes = std::fs::read(&snap).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&snap, bytes).unwrap();
    let j = Journal::open(&dir, &options(Durability::Process)).unwrap();
    assert_eq!(j.recovery(), strata_journal::Recovery { index_snapshot_seq: 0, replayed_events: 40 });
    assert_eq!(j.head(), head);
    for i in 0..5 {
        assert_eq!(j.stream_version(&format!("s/{i}")), 8);
    }
    // Retried ids are still known after the rebuild.
    let again = j.append_blocking("s/0", ExpectedVersion::Exact(0), vec![ev(1)]).unwrap().unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.positions[0].seq, 1);
}

#[test]
fn a_conflict_names_stream_expected_and_actual_and_appends_nothing() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    j.append_blocking("s/x", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let head = j.head();
    let c = j.append_blocking("s/x", ExpectedVersion::EMPTY, vec![ev(2)]).unwrap().unwrap_err();
    assert_eq!(c, Conflict { stream: "s/x".into(), expected: ExpectedVersion::Exact(0), actual: 1 });
    assert!(c.to_string().contains("STRATA-E0100"));
    assert_eq!(j.head(), head);
    // `Any` never conflicts.
    j.append_blocking("s/x", ExpectedVersion::Any, vec![ev(3)]).unwrap().unwrap();
}

#[test]
fn retried_appends_return_original_positions_and_append_nothing() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    let first = j.append_blocking("s/r", ExpectedVersion::EMPTY, vec![ev(10), ev(11)]).unwrap().unwrap();
    j.append_blocking("s/other", ExpectedVersion::EMPTY, vec![ev(12)]).unwrap().unwrap();
    let head = j.head();
    // Same request again (its expected version is stale now): deduplicated.
    let again = j.append_blocking("s/r", ExpectedVersion::EMPTY, vec![ev(10), ev(11)]).unwrap().unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.positions, first.positions);
    assert_eq!(j.head(), head);
    // A partial overlap is refused: never half-applied.
    let partial = j.append_blocking("s/r", ExpectedVersion::Exact(2), vec![ev(11), ev(13)]).unwrap_err();
    assert!(matches!(partial, JournalError::Input(InputError::IdempotencyMismatch { .. })), "{partial}");
    // The same id with other content is refused too.
    let mut changed = ev(10);
    changed.payload = b"{\"n\":999}".to_vec();
    let other = j.append_blocking("s/r", ExpectedVersion::Any, vec![changed]).unwrap_err();
    assert!(matches!(other, JournalError::Input(InputError::IdempotencyMismatch { .. })));
    // The same id on another stream is refused.
    let moved = j.append_blocking("s/elsewhere", ExpectedVersion::Any, vec![ev(12)]).unwrap_err();
    assert!(matches!(moved, JournalError::Input(InputError::IdempotencyMismatch { .. })));
    assert_eq!(j.head(), head);
}

#[test]
fn multi_stream_appends_are_all_or_nothing() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    j.append_blocking("a", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let head = j.head();
    let req = vec![
        StreamAppend { stream: "b".into(), expected: ExpectedVersion::EMPTY, events: vec![ev(2), ev(3)] },
        StreamAppend { stream: "a".into(), expected: ExpectedVersion::EMPTY, events: vec![ev(4)] },
    ];
    let c = j.append_multi_blocking(req).unwrap().unwrap_err();
    assert_eq!(c.stream, "a");
    assert_eq!(j.head(), head);
    assert_eq!(j.stream_version("b"), 0);
    let ok = vec![
        StreamAppend { stream: "b".into(), expected: ExpectedVersion::EMPTY, events: vec![ev(2), ev(3)] },
        StreamAppend { stream: "a".into(), expected: ExpectedVersion::Exact(1), events: vec![ev(4)] },
    ];
    let a = j.append_multi_blocking(ok).unwrap().unwrap();
    assert_eq!(a.positions.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!((j.stream_version("a"), j.stream_version("b")), (2, 2));
}

#[test]
fn bad_input_is_a_typed_error_and_appends_nothing() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    j.append_blocking("s", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let head = j.head();
    let big = event(Uuid::from_u128(2), "t", &serde_json::json!("x".repeat(PAYLOAD_BYTES_MAX)));
    let cases: Vec<(&str, Vec<StreamAppend>)> = vec![
        ("oversize", vec![StreamAppend { stream: "s".into(), expected: ExpectedVersion::Any, events: vec![big] }]),
        (
            "not json",
            vec![StreamAppend {
                stream: "s".into(),
                expected: ExpectedVersion::Any,
                events: vec![EventData { payload: b"{oops".to_vec(), ..ev(3) }],
            }],
        ),
        (
            "not compact",
            vec![StreamAppend {
                stream: "s".into(),
                expected: ExpectedVersion::Any,
                events: vec![EventData { payload: b"{\n}".to_vec(), ..ev(3) }],
            }],
        ),
        (
            "bad stream",
            vec![StreamAppend { stream: "has space".into(), expected: ExpectedVersion::Any, events: vec![ev(3)] }],
        ),
        (
            "bad type",
            vec![StreamAppend {
                stream: "s".into(),
                expected: ExpectedVersion::Any,
                events: vec![EventData { event_type: "a b".into(), ..ev(3) }],
            }],
        ),
        ("empty", vec![StreamAppend { stream: "s".into(), expected: ExpectedVersion::Any, events: vec![] }]),
        ("no streams", vec![]),
        (
            "dup id",
            vec![StreamAppend { stream: "s".into(), expected: ExpectedVersion::Any, events: vec![ev(5), ev(5)] }],
        ),
        (
            "dup stream",
            vec![
                StreamAppend { stream: "s".into(), expected: ExpectedVersion::Any, events: vec![ev(6)] },
                StreamAppend { stream: "s".into(), expected: ExpectedVersion::Any, events: vec![ev(7)] },
            ],
        ),
        (
            "too many",
            vec![StreamAppend {
                stream: "s".into(),
                expected: ExpectedVersion::Any,
                events: (0..4097).map(|i| ev(100 + i)).collect(),
            }],
        ),
    ];
    for (name, req) in cases {
        let err = j.append_multi_blocking(req).expect_err(name);
        let msg = err.to_string();
        assert!(matches!(err, JournalError::Input(_)), "{name}: {msg}");
        assert!(msg.contains("[STRATA-E01"), "{name}: {msg}");
        assert_eq!(j.head(), head, "{name} moved the head");
    }
}

#[test]
fn a_second_opener_is_refused_with_the_holder_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = create_journal(&dir, Durability::Process);
    j.append_blocking("s", ExpectedVersion::EMPTY, vec![ev(1)]).unwrap().unwrap();
    let err = Journal::open(&dir, &options(Durability::Process)).unwrap_err();
    match &err {
        JournalError::Locked { holder, .. } => assert!(holder.contains(&std::process::id().to_string()), "{holder}"),
        other => panic!("expected Locked, got {other}"),
    }
    assert!(err.to_string().contains("STRATA-E0203"));
    assert_eq!(j.head().seq, 1);
    // Creating over an existing journal is refused too.
    drop(j);
    assert!(matches!(
        Journal::create(&dir, "strata.test/again", &options(Durability::Process)),
        Err(JournalError::AlreadyExists { .. })
    ));
    assert!(matches!(
        Journal::open(&tmp.path().join("nothing"), &options(Durability::Process)),
        Err(JournalError::NotAJournal { .. })
    ));
}

#[test]
fn a_corrupted_database_directory_is_a_typed_error() {
    for damage in ["garbage-db", "truncated-db", "missing-conf"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        let j = create_journal(&dir, Durability::Process);
        for i in 0..200u128 {
            j.append_blocking("s", ExpectedVersion::Any, vec![ev(i + 1)]).unwrap().unwrap();
        }
        drop(j);
        let db = dir.join("sled").join("db");
        match damage {
            "garbage-db" => {
                let len = std::fs::metadata(&db).unwrap().len() as usize;
                std::fs::write(&db, vec![0xA5u8; len]).unwrap();
            }
            "truncated-db" => {
                let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
                f.set_len(100).unwrap();
            }
            _ => std::fs::remove_file(dir.join("sled").join("conf")).unwrap(),
        }
        let r = Journal::open(&dir, &options(Durability::Process));
        match damage {
            // sled only keeps its settings in `conf` and rewrites it; the data is intact.
            "missing-conf" => assert_eq!(r.expect("journal opens").head().seq, 200),
            _ => {
                let msg = r.expect_err(damage).to_string();
                assert!(msg.contains("[STRATA-E0202]"), "{damage}: {msg}");
            }
        }
    }
}

#[test]
fn twelve_concurrent_appenders_lose_nothing_and_detect_every_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = create_journal(&dir, Durability::Process);
    let per_thread = 150usize;
    let barrier = Arc::new(Barrier::new(12));
    let handles: Vec<_> = (0..12usize)
        .map(|t| {
            let j = j.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                // Threads 0..6 fight over two shared streams; 6..12 own a stream each.
                let stream = if t < 6 { format!("shared/{}", t % 2) } else { format!("own/{t}") };
                let mut acked = Vec::new();
                let mut conflicts = 0usize;
                for n in 0..per_thread {
                    let id = Uuid::from_u128(((t as u128) << 64) | n as u128);
                    let e = event(id, "bench.sample", &serde_json::json!({"t": t, "n": n}));
                    loop {
                        let seen = j.stream_version(&stream);
                        match j.append_blocking(&stream, ExpectedVersion::Exact(seen), vec![e.clone()]).unwrap() {
                            Ok(a) => {
                                assert!(!a.deduplicated);
                                acked.push((a.positions[0].seq, id, stream.clone(), a.positions[0].version));
                                break;
                            }
                            Err(c) => {
                                assert_eq!(c.stream, stream);
                                assert_ne!(c.actual, seen, "a conflict must report a different version");
                                conflicts += 1;
                            }
                        }
                    }
                    // Retry the same event: deduplicated, same position.
                    if n % 10 == 0 {
                        let last = acked.last().unwrap().clone();
                        let again =
                            j.append_blocking(&stream, ExpectedVersion::Exact(last.3 - 1), vec![e]).unwrap().unwrap();
                        assert!(again.deduplicated);
                        assert_eq!(again.positions[0].seq, last.0);
                    }
                }
                (acked, conflicts)
            })
        })
        .collect();
    let mut acked = Vec::new();
    let mut conflicts = 0;
    for h in handles {
        let (a, c) = h.join().unwrap();
        acked.extend(a);
        conflicts += c;
    }
    let total = 12 * per_thread;
    assert_eq!(acked.len(), total);
    let head = j.head().seq;
    assert_eq!(head, total as u64, "exactly one event per acknowledged append");
    let seqs: BTreeSet<u64> = acked.iter().map(|a| a.0).collect();
    assert_eq!(seqs.len(), total, "no two acks share a sequence");
    // Per stream, versions are exactly 1..=n in sequence order.
    let mut by_stream: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (seq, _, s, v) in &acked {
        by_stream.entry(s.clone()).or_default().push((*seq, *v));
    }
    for (s, mut v) in by_stream {
        v.sort();
        let versions: Vec<u64> = v.iter().map(|x| x.1).collect();
        assert_eq!(versions, (1..=versions.len() as u64).collect::<Vec<_>>(), "stream {s}");
    }
    for (seq, id, _, _) in &acked {
        assert_eq!(j.get(*seq).unwrap().unwrap().id, *id);
    }
    println!("{total} appends, {conflicts} conflicts detected and retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_subscription_switches_to_live_without_gap_or_duplicate() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    for i in 0..300u128 {
        j.append("s/before", ExpectedVersion::Any, vec![ev(i + 1)]).await.unwrap().unwrap();
    }
    let mut sub = j.subscribe(1);
    let writer = {
        let j = j.clone();
        tokio::spawn(async move {
            for i in 0..700u128 {
                j.append(&format!("s/live/{}", i % 3), ExpectedVersion::Any, vec![ev(1000 + i)])
                    .await
                    .unwrap()
                    .unwrap();
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 1000 {
        let e = sub.next().await.unwrap().expect("journal open");
        seen.push(e.seq);
    }
    writer.await.unwrap();
    assert_eq!(seen, (1..=1000).collect::<Vec<u64>>());
    assert!(sub.try_next().unwrap().is_none());
    // A subscription from the middle starts exactly there.
    let mut mid = j.subscribe(500);
    assert_eq!(mid.next().await.unwrap().unwrap().seq, 500);
    // Closing the journal ends waiting subscribers.
    let waiter = tokio::spawn(async move {
        let mut s = mid;
        while s.next().await.unwrap().is_some() {}
    });
    j.close().await.unwrap();
    waiter.await.unwrap();
}

#[test]
fn blocking_subscription_sees_every_event_once() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    let mut sub = j.subscribe(1);
    let writer = {
        let j = j.clone();
        std::thread::spawn(move || {
            for i in 0..500u128 {
                j.append_blocking("s", ExpectedVersion::Any, vec![ev(i + 1)]).unwrap().unwrap();
            }
        })
    };
    let mut expect = 1;
    while expect <= 500 {
        let e = sub.next_blocking().unwrap().unwrap();
        assert_eq!(e.seq, expect);
        expect += 1;
    }
    writer.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_racing_its_original_in_one_batch_gets_the_same_positions() {
    let j = Journal::in_memory("strata.test/mem").unwrap();
    for round in 0..50u128 {
        let e = ev(10_000 + round);
        let stream = format!("race/{round}");
        let (a, b) = tokio::join!(
            j.append(&stream, ExpectedVersion::EMPTY, vec![e.clone()]),
            j.append(&stream, ExpectedVersion::EMPTY, vec![e.clone()])
        );
        let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
        assert_eq!(a.positions, b.positions, "round {round}");
        assert!(a.deduplicated != b.deduplicated, "exactly one of the two appended (round {round})");
        assert_eq!(j.stream_version(&stream), 1);
        // The same id with another payload, racing: one appends, the other is refused.
        let mut other = ev(20_000 + round);
        let mut changed = other.clone();
        changed.payload = b"{\"changed\":true}".to_vec();
        other.id = Uuid::from_u128(20_000 + round);
        changed.id = other.id;
        let s2 = format!("race2/{round}");
        let (x, y) = tokio::join!(
            j.append(&s2, ExpectedVersion::Any, vec![other]),
            j.append(&s2, ExpectedVersion::Any, vec![changed])
        );
        let oks = [&x, &y].iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        let refused = [&x, &y]
            .iter()
            .filter(|r| matches!(r, Err(JournalError::Input(InputError::IdempotencyMismatch { .. }))))
            .count();
        assert_eq!((oks, refused), (1, 1), "round {round}: {x:?} / {y:?}");
        assert_eq!(j.stream_version(&s2), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_commit_appends_share_the_sequence_deduplicate_and_are_durable_after_close() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = create_journal(&dir, Durability::Process);
    let append = |n: u128, async_commit: bool| {
        let j = j.clone();
        async move {
            let s = vec![StreamAppend {
                stream: format!("s/{}", n % 3),
                expected: ExpectedVersion::Any,
                events: vec![ev(n)],
            }];
            if async_commit { j.append_multi_async_commit(s).await } else { j.append_multi(s).await }
        }
    };
    let mut tasks = Vec::new();
    for n in 1..=60u128 {
        tasks.push(tokio::spawn(append(n, n % 2 == 0)));
    }
    let mut seqs = BTreeMap::new();
    for (n, t) in (1..=60u128).zip(tasks) {
        let done = t.await.unwrap().unwrap().unwrap();
        assert!(!done.deduplicated);
        seqs.insert(done.positions[0].seq, n);
    }
    assert_eq!(seqs.keys().copied().collect::<Vec<_>>(), (1..=60).collect::<Vec<u64>>(), "gapless, no duplicate");
    // A retry of an asynchronously committed event gets its original position back.
    let again = append(2, true).await.unwrap().unwrap();
    assert!(again.deduplicated);
    assert_eq!(seqs[&again.positions[0].seq], 2);
    j.close().await.unwrap();
    drop(j);
    let j = Journal::open(&dir, &options(Durability::Process)).unwrap();
    let all = j.read_range(1, 100).unwrap();
    assert_eq!(all.len(), 60, "every acknowledged append, asynchronous or not, is there after a reopen");
    for e in &all {
        assert_eq!(e.id, Uuid::from_u128(seqs[&e.seq]));
    }
}
