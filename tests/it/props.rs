//! Property tests over random event histories:
//! * projections applied live, event by event, equal a from-scratch replay;
//! * a snapshot at any point plus the tail equals a full replay;
//! * export → import preserves every hash;
//!
//! and the snapshot rules: a snapshot of another version, or a damaged one, is discarded and
//! rebuilt, never trusted.

use proptest::prelude::*;
use strata_journal::export::{check_bytes, export_jsonl, load};
use strata_journal::projection::{Projection, Projections};
use strata_journal::snapshot::Discarded;
use strata_journal::{EventData, ExpectedVersion, Hash, Journal, Record, StreamAppend};
use uuid::Uuid;

#[derive(Debug, Clone, Copy)]
struct Op {
    stream: u8,
    events: usize,
    payload_len: usize,
    second_stream: Option<u8>,
    event_type: usize,
}

fn op() -> impl Strategy<Value = Op> {
    (0u8..6, 1usize..4, 0usize..300, proptest::option::of(0u8..6), 0usize..3).prop_map(
        |(stream, events, payload_len, second_stream, event_type)| Op {
            stream,
            events,
            payload_len,
            second_stream,
            event_type,
        },
    )
}

const TYPES: [&str; 3] = ["bench.sample", "test.alpha", "test.beta"];

fn events(next_id: &mut u128, op: &Op) -> Vec<EventData> {
    (0..op.events)
        .map(|_| {
            *next_id += 1;
            let mut e = strata_tests::event(
                Uuid::from_u128(*next_id),
                TYPES[op.event_type],
                &serde_json::json!({"n": *next_id as u64, "pad": "p".repeat(op.payload_len)}),
            );
            e.recorded_at_ns += *next_id as i64;
            e
        })
        .collect()
}

fn apply_ops(j: &Journal, ops: &[Op], mut after_each: impl FnMut(usize)) {
    let mut next_id = 0u128;
    for (i, op) in ops.iter().enumerate() {
        let mut req = vec![StreamAppend {
            stream: format!("s/{}", op.stream),
            expected: ExpectedVersion::Any,
            events: events(&mut next_id, op),
        }];
        if let Some(second) = op.second_stream.filter(|s| *s != op.stream) {
            req.push(StreamAppend {
                stream: format!("t/{second}"),
                expected: ExpectedVersion::Any,
                events: events(&mut next_id, op),
            });
        }
        j.append_multi_blocking(req).unwrap().unwrap();
        after_each(i);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn live_projections_equal_a_full_replay_and_snapshot_plus_tail_does_too(ops in proptest::collection::vec(op(), 1..50), cut in 0usize..50) {
        let j = Journal::in_memory("strata.test/prop").unwrap();
        let mut live = Projections::new(strata_engine::standard_projections());
        let mut sub = j.subscribe(1);
        let cut = cut % ops.len();
        let mut snapshot_at = 0;
        apply_ops(&j, &ops, |i| {
            while let Some(e) = sub.try_next().unwrap() {
                live.apply(&e.as_record()).unwrap();
            }
            if i == cut {
                live.save_snapshots(&j).unwrap();
                snapshot_at = j.head().seq;
            }
        });
        let mut full = Projections::new(strata_engine::standard_projections());
        full.rebuild(&j).unwrap();
        prop_assert_eq!(live.state_hashes(), full.state_hashes());
        let mut resumed = Projections::new(strata_engine::standard_projections());
        let statuses = resumed.catch_up(&j).unwrap();
        for s in &statuses {
            prop_assert_eq!(s.from_snapshot, snapshot_at);
            prop_assert!(s.discarded.is_empty());
            prop_assert_eq!(s.applied, j.head().seq - snapshot_at);
        }
        prop_assert_eq!(resumed.state_hashes(), full.state_hashes());
    }

    #[test]
    fn export_then_import_preserves_every_hash(ops in proptest::collection::vec(op(), 1..40)) {
        let j = Journal::in_memory("strata.test/prop").unwrap();
        apply_ops(&j, &ops, |_| {});
        let mut buf = Vec::new();
        let summary = export_jsonl(&j, &mut buf).unwrap();
        let copy = Journal::in_memory("strata.test/prop").unwrap();
        let known = |_: &str, _: u32| true;
        let checked = check_bytes(std::path::Path::new("<memory>"), &buf, &known).unwrap();
        load(&copy, &checked).unwrap();
        prop_assert_eq!(checked.summary().events, summary.events);
        prop_assert_eq!(copy.head(), j.head());
        prop_assert_eq!(copy.event_hashes().unwrap(), j.event_hashes().unwrap());
        let mut again = Vec::new();
        export_jsonl(&copy, &mut again).unwrap();
        prop_assert_eq!(again, buf);
    }
}

/// Counts events; its version is set per test to exercise snapshot versioning.
struct Counter {
    version: u32,
    n: u64,
}

impl Projection for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn apply(&mut self, _: &Record<'_>) -> Result<(), String> {
        self.n += 1;
        Ok(())
    }
    fn state_hash(&self) -> Hash {
        Hash(*blake3::hash(&self.n.to_be_bytes()).as_bytes())
    }
    fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(self.n.to_be_bytes().to_vec())
    }
    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.n = u64::from_be_bytes(bytes.try_into().map_err(|_| "bad length".to_owned())?);
        Ok(())
    }
    fn reset(&mut self) {
        self.n = 0;
    }
}

fn counter(version: u32) -> Projections {
    Projections::new(vec![Box::new(Counter { version, n: 0 })])
}

#[test]
fn wrong_version_and_damaged_snapshots_are_discarded_and_rebuilt() {
    let j = Journal::in_memory("strata.test/snap").unwrap();
    apply_ops(&j, &[Op { stream: 0, events: 3, payload_len: 5, second_stream: None, event_type: 0 }; 4], |_| {});
    let mut p = counter(1);
    p.rebuild(&j).unwrap();
    p.save_snapshots(&j).unwrap();
    // Same version: used.
    let s = counter(1).catch_up(&j).unwrap();
    assert_eq!((s[0].from_snapshot, s[0].applied), (12, 0));
    // New version: the old snapshot is discarded and the state rebuilt from sequence 1.
    let mut v2 = counter(2);
    let s = v2.catch_up(&j).unwrap();
    assert_eq!(s[0].discarded, vec![Discarded::WrongVersion { found: 1 }]);
    assert_eq!((s[0].from_snapshot, s[0].applied), (0, 12));
    assert_eq!(v2.state_hashes(), p.state_hashes());
    // A damaged snapshot (the body no longer matches its checksum) is discarded.
    v2.save_snapshots(&j).unwrap();
    let store = j.store();
    let (k, mut v) = store.snapshots(b"counter\0").unwrap().remove(0);
    let last = v.len() - 1;
    v[last] ^= 0x40;
    store.put_snapshot(&k, &v).unwrap();
    let mut again = counter(2);
    let s = again.catch_up(&j).unwrap();
    assert_eq!(s[0].discarded, vec![Discarded::Damaged]);
    assert_eq!(again.state_hashes(), p.state_hashes());
    // A snapshot that decodes but that the projection refuses is discarded too.
    let mut bad = v.clone();
    bad.push(0);
    let body_start = bad.len() - 9;
    let checksum = blake3::hash(&bad[body_start..]);
    bad[48..80].copy_from_slice(checksum.as_bytes());
    store.put_snapshot(&k, &bad).unwrap();
    let mut third = counter(2);
    let s = third.catch_up(&j).unwrap();
    assert_eq!(s[0].discarded, vec![Discarded::Damaged]);
    assert_eq!(third.state_hashes(), p.state_hashes());
}

#[test]
fn a_snapshot_taken_on_another_history_is_never_trusted() {
    // Two journals with the same length but different events: a snapshot from one must not be
    // accepted by the other (its recorded journal hash does not match).
    let a = Journal::in_memory("strata.test/a").unwrap();
    apply_ops(&a, &[Op { stream: 0, events: 2, payload_len: 1, second_stream: None, event_type: 0 }], |_| {});
    let b = Journal::in_memory("strata.test/b").unwrap();
    apply_ops(&b, &[Op { stream: 1, events: 2, payload_len: 9, second_stream: None, event_type: 1 }], |_| {});
    let mut p = counter(1);
    p.rebuild(&a).unwrap();
    p.save_snapshots(&a).unwrap();
    let (k, v) = a.store().snapshots(b"counter\0").unwrap().remove(0);
    b.store().put_snapshot(&k, &v).unwrap();
    let s = counter(1).catch_up(&b).unwrap();
    assert_eq!(s[0].discarded, vec![Discarded::JournalMismatch { seq: 2 }]);
    assert_eq!(s[0].from_snapshot, 0);
}
