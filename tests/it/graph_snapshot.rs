//! The spec graph read from its snapshot in place (issue 27, Deliver 3), on sled on disk: a
//! restored graph decodes an artifact's fields and body only when something reads them, so it
//! must answer every query exactly as the graph folded from the journal does; saving it again
//! copies the nodes that did not change, and the bytes must be those a fresh encoding gives; a
//! snapshot whose checksums hold but whose nodes do not decode, or that ends early, is discarded
//! and the graph rebuilt from the journal, never trusted. `strata serve` answers graph queries
//! from the graph it keeps in memory: the same answers as a command that loads the graph, also
//! after an intake it ran moved the head.

use std::path::Path;

use strata_engine::kb::fixture::{Fixture, FixtureSpec, generate, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::{SourceFile, plan};
use strata_engine::kb::kind::ArtifactKind;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::projection::{Projection, catch_up_one, save_one};
use strata_journal::snapshot::{self, Discarded};
use strata_journal::{Durability, Journal};
use strata_tests::daemon::Daemon;
use strata_tests::{apply_tail, options, strata_bin, strata_ok};

fn seed(dir: &Path) -> (Journal, Graph, Fixture) {
    let fx = generate(&FixtureSpec::seed_scale(9));
    let j = Journal::create(&dir.join("j"), "strata.test/graph-snapshot", &options(Durability::Process)).unwrap();
    let mut g = Graph::new();
    let p = plan(&g, &fx.files(), &mut CountingIds::new(1), &FixedClock(0)).unwrap();
    j.append_multi_blocking(p.appends).unwrap().unwrap();
    apply_tail(&j, &mut g);
    (j, g, fx)
}

/// Appends a line to the body of the fixture's `i`-th artifact through intake.
fn edit(j: &Journal, g: &Graph, fx: &Fixture, i: usize, ids: u128) {
    let mut d = fx.drafts[i].clone();
    let node = g.get(&d.key).unwrap();
    d.body = format!("{}\nEdited in place.\n", node.body);
    d.fields = node.fields.clone();
    let f = render(&d);
    let p =
        plan(g, &[SourceFile { path: f.path, bytes: f.bytes }], &mut CountingIds::new(ids), &FixedClock(1)).unwrap();
    j.append_multi_blocking(p.appends).unwrap().unwrap();
}

fn restored(j: &Journal) -> Graph {
    let mut g = Graph::new();
    let s = catch_up_one(&mut g, j).unwrap();
    assert!(s.discarded.is_empty() && s.from_snapshot > 0, "{s:?}");
    g
}

/// Every query of `back` answers as `live` does, node by node.
fn same_graph(back: &Graph, live: &Graph) {
    assert_eq!(back.state_hash(), live.state_hash());
    assert_eq!(back.len(), live.len());
    for a in live.artifacts() {
        let n = back.node_id(&a.key).unwrap();
        assert_eq!(back.key(n), &a.key);
        assert_eq!((back.state_of(n), back.hash_of(n)), (a.state.as_str(), a.hash));
        assert_eq!(back.entity_field(n), a.fields.get("entity").and_then(|v| v.as_str()), "{}", a.key);
        let b = back.get(&a.key).unwrap();
        assert_eq!(
            (&b.fields, &b.body, b.version, b.last_seq),
            (&a.fields, &a.body, a.version, a.last_seq),
            "{}",
            a.key
        );
        assert_eq!(b.out, a.out, "{}", a.key);
        let (mut bi, mut ai) = (b.inn.clone(), a.inn.clone());
        bi.sort();
        ai.sort();
        assert_eq!(bi, ai, "{}", a.key);
    }
    assert_eq!(back.validate(), live.validate());
    assert_eq!(back.entities(), live.entities());
    assert_eq!(back.groups(), live.groups());
    assert_eq!(back.suspects(), live.suspects());
    for cr in live.artifacts_of(ArtifactKind::ChangeRequest) {
        let (a, b) = (live.node_id(&cr.key).unwrap(), back.node_id(&cr.key).unwrap());
        let (ra, rb) = (live.impact(a), back.impact(b));
        let keys = |r: &[strata_engine::kb::graph::Reached]| r.iter().map(|x| x.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&rb), keys(&ra), "impact of {}", cr.key);
    }
}

#[test]
fn a_restored_graph_answers_as_the_folded_one_and_saves_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (j, mut live, fx) = seed(tmp.path());
    save_one(&live, &j, live.seq()).unwrap();
    let back = restored(&j);
    same_graph(&back, &live);
    // Unchanged: copying every node's archive gives the bytes encoding them does.
    assert_eq!(back.encode_snapshot().unwrap(), live.encode_snapshot().unwrap());

    // Edits folded into a restored graph (cold nodes made warm as they change, suspicion spread
    // to cold neighbours) give the bytes and the answers of the folded graph.
    let mut back = back;
    for (round, i) in [17usize, 101, 230].into_iter().enumerate() {
        edit(&j, &live, &fx, i, 90_000 + round as u128 * 100);
        apply_tail(&j, &mut live);
        apply_tail(&j, &mut back);
        assert_eq!(back.encode_snapshot().unwrap(), live.encode_snapshot().unwrap(), "round {round}");
        save_one(&back, &j, back.seq()).unwrap();
        back = restored(&j);
        same_graph(&back, &live);
    }
    assert!(!live.suspects().is_empty(), "the edits made something suspect");
}

#[test]
fn a_snapshot_whose_nodes_do_not_decode_is_discarded_and_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let (j, live, _) = seed(tmp.path());
    let body = live.encode_snapshot().unwrap();
    let seq = live.seq();
    let hash = j.hash_at(seq).unwrap().unwrap();
    let version = Projection::version(&live);
    // Each stored with valid checksums, so only the graph's own checks can refuse it.
    let title = body.windows(7).position(|w| w == b"\"title\"").expect("a title in some node's fields");
    let mut bad_utf8 = body.clone();
    bad_utf8[title + 1] = 0xff;
    let mut bad_frame = body.clone();
    bad_frame[48] ^= 0x40;
    let mut bad_count = body.clone();
    bad_count[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let bodies: [(&str, Vec<u8>); 5] = [
        ("cut short", body[..body.len() / 2].to_vec()),
        ("a string that is not UTF-8", bad_utf8),
        ("a frame length that is wrong", bad_frame),
        ("a node count it cannot hold", bad_count),
        ("trailing bytes", [body.as_slice(), &[0u8; 16]].concat()),
    ];
    for (what, bad) in bodies {
        snapshot::save(j.store().as_ref(), "graph", version, seq, &hash, &bad, 16).unwrap();
        let mut g = Graph::new();
        let s = catch_up_one(&mut g, &j).unwrap();
        assert_eq!(s.discarded, vec![Discarded::Damaged], "{what}");
        assert_eq!((s.from_snapshot, s.applied), (0, seq), "{what}: rebuilt from the journal");
        same_graph(&g, &live);
    }
    // And the good one is used again.
    save_one(&live, &j, seq).unwrap();
    same_graph(&restored(&j), &live);
}

#[test]
fn the_daemon_answers_graph_queries_from_its_graph_as_a_fresh_load_does() {
    const BIN: &str = strata_bin!();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    let kb = ws.join("kb");
    strata_ok(BIN, &ws, &["fixture", "--out", kb.to_str().unwrap()]);
    strata_ok(BIN, &ws, &["intake", kb.to_str().unwrap()]);
    let queries: [&[&str]; 3] = [
        &["--json", "graph", "impact", "CR-1"],
        &["--json", "graph", "impact", "CR-2"],
        &["--json", "graph", "validate"],
    ];
    let answers = |ws: &Path| queries.map(|q| strata_ok(BIN, ws, q));
    let local = answers(&ws);
    let d = Daemon::start(BIN, &ws, &[]);
    assert_eq!(answers(&ws), local, "the first queries (the graph loaded)");
    assert_eq!(answers(&ws), local, "again (the graph kept)");
    // An intake through the daemon moves the head; the kept graph folds it before answering.
    let file = kb.join("changes").join("CR-1.md");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}\nEdited while the daemon runs.\n")).unwrap();
    strata_ok(BIN, &ws, &["intake", file.to_str().unwrap()]);
    let served = answers(&ws);
    assert_ne!(served[0], local[0], "the edit shows (a new head)");
    let (status, stderr) = d.stop();
    assert!(status.success(), "{stderr}");
    assert_eq!(served, answers(&ws), "the served answers are what a fresh load gives");
}
