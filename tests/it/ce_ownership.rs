//! The journal-owned writer-ownership map under contention: twelve writers claiming overlapping
//! paths through the engine on a real sled journal.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

use serde_json::json;
use strata_engine::ce::Code;
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::ce::ownership;
use strata_engine::ce::paths::{Workspace, overlaps};
use strata_engine::ce::router::{Mode, Reason, Route, RouteFacts};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::projection::Projection as _;
use strata_journal::{Durability, Journal, StreamAppend};
use strata_tests::create_journal;

/// Catches `state` up to the journal head.
fn catch_up(j: &Journal, state: &mut Ledger, at: &mut u64) {
    let head = j.head().seq;
    if head > *at {
        j.scan(*at + 1, head, |r, _| state.apply(r).map(|()| true)).unwrap().unwrap();
        *at = head;
    }
}

/// Decides and appends until the append lands on the version it was decided at.
fn decide_and_append(
    j: &Journal,
    state: &mut Ledger,
    at: &mut u64,
    mut step: impl FnMut(&Ledger) -> Option<(Option<Route>, StreamAppend)>,
) -> Option<Route> {
    loop {
        catch_up(j, state, at);
        let (route, append) = step(state)?;
        match j.append_multi_blocking(vec![append]).unwrap() {
            Ok(_) => return route,
            Err(_stale) => continue,
        }
    }
}

#[test]
fn ceo_06_twelve_concurrent_writers_never_share_a_path_and_losers_run_local() {
    let tmp = tempfile::tempdir().unwrap();
    let j = create_journal(&tmp.path().join("j"), Durability::Process);
    let barrier = Arc::new(Barrier::new(12));
    let handles: Vec<_> = (0..12u128)
        .map(|i| {
            let (j, barrier) = (j.clone(), barrier.clone());
            std::thread::spawn(move || {
                let owned: Vec<String> = match i % 4 {
                    0 => vec!["src/shared".into()],
                    1 => vec!["SRC/shared/x.rs".into(), format!("src/own{i}")],
                    2 => vec!["src".into()],
                    _ => vec![format!("docs/{i}.md")],
                };
                let mut ids = CountingIds::new((i + 1) << 64);
                let (mut state, mut at) = (Ledger::default(), 0u64);
                let mut outcomes = Vec::new();
                barrier.wait();
                for round in 0..6 {
                    let lineage = format!("L-{i}-{round}");
                    let facts =
                        RouteFacts::from_json(&json!({"role": "builder", "owned_files": owned}), &Workspace::default())
                            .unwrap();
                    let route = decide_and_append(&j, &mut state, &mut at, |s| {
                        let (route, append) =
                            ownership::decide(s, &lineage, facts.clone(), &mut ids, &FixedClock(0)).unwrap();
                        Some((Some(route), append))
                    })
                    .unwrap();
                    let won = !route.reason_codes.contains(&Reason::WriterOwnershipConflict);
                    if won {
                        std::thread::yield_now();
                        decide_and_append(&j, &mut state, &mut at, |s| {
                            ownership::release(s, &lineage, &mut ids, &FixedClock(0)).unwrap().map(|a| (None, a))
                        });
                    }
                    outcomes.push((lineage, route));
                }
                outcomes
            })
        })
        .collect();
    let outcomes: Vec<(String, Route)> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(outcomes.len(), 72);
    let (mut won, mut lost) = (0, 0);
    for (lineage, route) in &outcomes {
        if route.reason_codes.contains(&Reason::WriterOwnershipConflict) {
            assert_eq!(route.mode, Mode::Local, "{lineage}: a loser runs locally, serialised");
            assert_eq!(route.reason_codes.len(), 1, "{lineage}: {route:?}");
            lost += 1;
        } else {
            won += 1;
        }
    }
    assert!(won > 0 && lost > 0, "contention happened: {won} won, {lost} lost");
    // Replay the journal: after every event, no two lineages own overlapping paths, every
    // conflict names a real holder, and every claim and conflict has its routing decision.
    let mut state = Ledger::default();
    let mut decided: BTreeMap<String, usize> = BTreeMap::new();
    j.scan(1, j.head().seq, |rec, _| {
        if rec.event_type == ledger::CONFLICT {
            let c: ledger::Conflicted = serde_json::from_slice(rec.payload).unwrap();
            let held = state
                .owners()
                .get(&c.holder)
                .unwrap_or_else(|| panic!("seq {}: holder {} owns nothing", rec.seq, c.holder));
            assert!(held.paths.contains(&c.held) && overlaps(&c.held, &c.asked), "seq {}", rec.seq);
        }
        if rec.event_type == ledger::ROUTE_DECIDED {
            let d: ledger::RouteDecided = serde_json::from_slice(rec.payload).unwrap();
            *decided.entry(d.lineage_id).or_default() += 1;
        }
        state.apply(rec)?;
        let owners: Vec<(&String, &Vec<String>)> = state.owners().iter().map(|(l, o)| (l, &o.paths)).collect();
        for (a, (la, pa)) in owners.iter().enumerate() {
            for (lb, pb) in &owners[a + 1..] {
                assert!(
                    !pa.iter().any(|x| pb.iter().any(|y| overlaps(x, y))),
                    "seq {}: {la} and {lb} overlap",
                    rec.seq
                );
            }
        }
        Ok::<bool, String>(true)
    })
    .unwrap()
    .unwrap();
    assert_eq!(decided.len(), 72, "one recorded decision per unit");
    assert!(decided.values().all(|n| *n == 1), "a stale decision is never recorded");
    assert!(state.owners().is_empty(), "everyone released");
}

#[test]
fn a_lineage_reclaiming_replaces_its_claim_and_the_caller_cannot_hide_an_owner() {
    let mut state = Ledger::default();
    let mut ids = CountingIds::new(1);
    let facts = |owned: &[&str], active: serde_json::Value| {
        RouteFacts::from_json(&json!({"owned_files": owned, "active_writers": active}), &Workspace::default()).unwrap()
    };
    let (route, append) =
        ownership::decide(&state, "L-1", facts(&["src"], json!([])), &mut ids, &FixedClock(0)).unwrap();
    assert_eq!(route.mode, Mode::FreshCapsule);
    let j = Journal::in_memory("strata.test/own").unwrap();
    j.append_multi_blocking(vec![append]).unwrap().unwrap();
    j.scan(1, j.head().seq, |r, _| state.apply(r).map(|()| true)).unwrap().unwrap();
    assert_eq!(state.owners()["L-1"].paths, vec!["src".to_owned()]);
    assert_eq!(state.owners()["L-1"].mode.as_deref(), Some("fresh-capsule"));
    // The caller's (empty) list of active writers is replaced by the journal's.
    let (route, _) =
        ownership::decide(&state, "L-2", facts(&["src/a.rs"], json!([])), &mut ids, &FixedClock(0)).unwrap();
    assert_eq!(
        (route.mode, route.reason_codes.iter().copied().collect::<Vec<_>>()),
        (Mode::Local, vec![Reason::WriterOwnershipConflict])
    );
    // A lineage never conflicts with its own claim; claiming again replaces it, and the same
    // claim again records only the decision.
    let (route, again) =
        ownership::decide(&state, "L-1", facts(&["src/lib.rs"], json!([])), &mut ids, &FixedClock(0)).unwrap();
    assert_eq!(route.mode, Mode::FreshCapsule);
    j.append_multi_blocking(vec![again]).unwrap().unwrap();
    state = Ledger::default();
    j.scan(1, j.head().seq, |r, _| state.apply(r).map(|()| true)).unwrap().unwrap();
    assert_eq!(state.owners()["L-1"].paths, vec!["src/lib.rs".to_owned()]);
    let (_, same) =
        ownership::decide(&state, "L-1", facts(&["src/lib.rs"], json!([])), &mut ids, &FixedClock(0)).unwrap();
    assert_eq!(same.events.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), [ledger::ROUTE_DECIDED]);
    let bad = ownership::decide(&state, "", facts(&["docs"], json!([])), &mut ids, &FixedClock(0));
    assert_eq!(bad.map(|_| ()).map_err(|e| e.code), Err(Code::InvalidFact));
    assert!(ownership::release(&state, "L-9", &mut ids, &FixedClock(0)).unwrap().is_none());
}
