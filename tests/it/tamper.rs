//! Tamper evidence, end to end: build a journal with the real `strata` binary, sign checkpoints,
//! then edit sled's stored frames directly (as an attacker with file access would) and require
//! `strata journal verify` to exit non-zero naming the first bad sequence.

use std::path::{Path, PathBuf};

use strata_journal::frame::{self, FrameBuilder, frame_key, frame_key_seq};
use strata_journal::hash::{Hash, event_hash};
use strata_journal::record;
use strata_journal::{Durability, ExpectedVersion, Journal};
use strata_tests::{event, options, strata, strata_bin, strata_ok};
use uuid::Uuid;

const BIN: &str = strata_bin!();

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    key_pub: PathBuf,
    /// The checkpoint printed by `strata journal checkpoint` at size 40, kept "elsewhere".
    external_note: PathBuf,
}

fn journal_dir(ws: &Path) -> PathBuf {
    ws.join(".strata").join("journal")
}

/// 1 init event, 39 example events (singles and 10-event batches), checkpoint (size 40, event
/// 41), 20 more events, checkpoint (size 61, event 62).
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    let key = tmp.path().join("audit.key");
    strata_ok(BIN, &ws, &["keygen", "--name", "auditor", "--out", key.to_str().unwrap()]);
    let append = |from: u128, n: u128| {
        let j = Journal::open(&journal_dir(&ws), &options(Durability::Process)).unwrap();
        let mut i = from;
        while i < from + n {
            let batch = if i.is_multiple_of(3) { 10.min(from + n - i) } else { 1 };
            let events = (i..i + batch)
                .map(|k| {
                    event(
                        Uuid::from_u128(k),
                        "bench.sample",
                        &serde_json::json!({"k": k as u64, "text": "some payload text"}),
                    )
                })
                .collect();
            j.append_blocking(&format!("s/{}", i % 4), ExpectedVersion::Any, events).unwrap().unwrap();
            i += batch;
        }
        j.close_blocking().unwrap();
    };
    append(1000, 39);
    let note = strata_ok(BIN, &ws, &["journal", "checkpoint", "--key", key.to_str().unwrap()]);
    assert!(note.starts_with("strata.local/"), "{note}");
    assert!(note.contains("\n40\n"), "{note}");
    let external_note = tmp.path().join("kept-elsewhere.note");
    std::fs::write(&external_note, &note).unwrap();
    append(2000, 20);
    strata_ok(BIN, &ws, &["journal", "checkpoint", "--key", key.to_str().unwrap()]);
    let key_pub = PathBuf::from(format!("{}.pub", key.display()));
    // Untouched: verifies.
    strata_ok(BIN, &ws, &["journal", "verify", "--pubkey", key_pub.to_str().unwrap()]);
    Fixture { _tmp: tmp, ws, key_pub, external_note }
}

type Entries = Vec<(Hash, Vec<u8>)>;

/// Every stored (hash, record) in key order, and the sled handle.
fn load(ws: &Path) -> (sled::Db, sled::Tree, Entries) {
    let db = sled::open(journal_dir(ws).join("sled")).unwrap();
    let tree = db.open_tree("journal").unwrap();
    let mut out = Vec::new();
    for kv in tree.scan_prefix([frame::FRAME_PREFIX]) {
        let (k, v) = kv.unwrap();
        assert!(frame_key_seq(&k).is_some());
        for e in frame::entries(&v).unwrap() {
            let (h, r) = e.unwrap();
            out.push((h, r.to_vec()));
        }
    }
    (db, tree, out)
}

/// Replaces all frames with `entries`, three records per frame, keyed by each frame's first
/// record's sequence (or `fallback_key` positions when a record does not decode).
fn store(db: &sled::Db, tree: &sled::Tree, entries: &Entries) {
    for k in tree.scan_prefix([frame::FRAME_PREFIX]).keys() {
        tree.remove(k.unwrap()).unwrap();
    }
    for (i, chunk) in entries.chunks(3).enumerate() {
        let mut b = FrameBuilder::new();
        for (h, r) in chunk {
            b.push(h, r);
        }
        let key_seq = record::decode(&chunk[0].1).map(|r| r.seq).unwrap_or(1 + 3 * i as u64);
        tree.insert(frame_key(key_seq), b.finish()).unwrap();
    }
    db.flush().unwrap();
}

fn set_head(db: &sled::Db, tree: &sled::Tree, seq: u64, hash: &Hash) {
    let mut v = seq.to_be_bytes().to_vec();
    v.extend_from_slice(&hash.0);
    tree.insert(b"mhead", v).unwrap();
    db.flush().unwrap();
}

fn seq_of(entries: &Entries, seq: u64) -> usize {
    entries.iter().position(|(_, r)| record::decode(r).unwrap().seq == seq).unwrap()
}

/// Runs verify and returns (exit code, stdout).
fn verify(f: &Fixture, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["journal", "verify", "--pubkey", f.key_pub.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = strata(BIN, &f.ws, &args);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn assert_detected(f: &Fixture, first_bad: u64, kind: &str, extra: &[&str]) {
    let (code, out) = verify(f, extra);
    assert_eq!(code, 3, "verify must exit 3 on tampering:\n{out}");
    assert!(
        out.contains(&format!("first bad sequence {first_bad}")),
        "expected first bad sequence {first_bad}:\n{out}"
    );
    assert!(out.contains(&format!("[{kind}]")), "expected a {kind} problem:\n{out}");
    let json = strata(
        BIN,
        &f.ws,
        &[&["--json", "journal", "verify", "--pubkey", f.key_pub.to_str().unwrap()][..], extra].concat(),
    );
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["first_bad_seq"], first_bad);
}

#[test]
fn a_flipped_byte_is_found_at_its_sequence() {
    let f = fixture();
    let (db, tree, mut e) = load(&f.ws);
    let i = seq_of(&e, 20);
    let last = e[i].1.len() - 3;
    e[i].1[last] ^= 0x01; // inside the payload
    store(&db, &tree, &e);
    drop((tree, db));
    assert_detected(&f, 20, "altered", &[]);
}

#[test]
fn a_removed_event_is_found_as_a_gap() {
    let f = fixture();
    let (db, tree, mut e) = load(&f.ws);
    let i = seq_of(&e, 20);
    e.remove(i);
    store(&db, &tree, &e);
    drop((tree, db));
    assert_detected(&f, 20, "gap", &[]);
}

#[test]
fn swapped_events_are_found_at_the_first_one() {
    let f = fixture();
    let (db, tree, mut e) = load(&f.ws);
    let (a, b) = (seq_of(&e, 20), seq_of(&e, 25));
    e.swap(a, b);
    store(&db, &tree, &e);
    drop((tree, db));
    assert_detected(&f, 20, "gap", &[]);
}

#[test]
fn a_truncated_tail_behind_a_signed_checkpoint_is_found() {
    let f = fixture();
    let (db, tree, mut e) = load(&f.ws);
    // Keep sequences 1..=30 and make the journal self-consistent again (head record too), as a
    // careful attacker would; only the signed checkpoints can tell.
    e.truncate(seq_of(&e, 30) + 1);
    store(&db, &tree, &e);
    let last = e.last().unwrap();
    set_head(&db, &tree, 30, &event_hash(&last.1));
    drop((tree, db));
    assert_detected(&f, 31, "truncated", &[]);

    // With the saved notes deleted too, the journal alone cannot show it: it is a valid
    // 30-event journal. A checkpoint kept elsewhere still does.
    std::fs::remove_dir_all(journal_dir(&f.ws).join("checkpoints")).unwrap();
    let (code, out) = verify(&f, &[]);
    assert_eq!(code, 3, "under --pubkey a history no trusted key signed does not verify:\n{out}");
    assert!(out.contains("[unsigned-by-key]") && out.contains("all 30 events unattested"), "{out}");
    let plain = strata(BIN, &f.ws, &["journal", "verify"]);
    let text = String::from_utf8_lossy(&plain.stdout);
    assert_eq!(plain.status.code(), Some(0), "without keys a consistent prefix verifies, unattested:\n{text}");
    assert!(text.contains("no checkpoint: all 30 events unattested"), "{text}");
    assert_detected(&f, 31, "truncated", &["--checkpoint", f.external_note.to_str().unwrap()]);
}

/// Changes event 10's payload, drops the checkpoint events if `strip`, and renumbers and
/// re-chains everything after, so sequences, the chain and the stored hashes are consistent
/// again, as a careful attacker would leave them. Returns the new head.
fn rewrite(f: &Fixture, strip: bool) -> u64 {
    let (db, tree, e) = load(&f.ws);
    let mut out: Entries = Vec::new();
    let mut prev = Hash::ZERO;
    for (_, raw) in &e {
        let rec = record::decode(raw).unwrap();
        if strip && rec.event_type == strata_journal::CHECKPOINT_EVENT_TYPE {
            continue;
        }
        let payload = if rec.seq == 10 { br#"{"k":0,"text":"forged"}"#.to_vec() } else { rec.payload.to_vec() };
        let fixed = record::Record { seq: out.len() as u64 + 1, prev, payload: &payload, ..rec };
        let bytes = fixed.encode();
        let h = event_hash(&bytes);
        out.push((h, bytes));
        prev = h;
    }
    store(&db, &tree, &out);
    set_head(&db, &tree, out.len() as u64, &prev);
    drop((tree, db));
    out.len() as u64
}

#[test]
fn a_rewritten_and_rechained_history_is_caught_by_the_signed_root() {
    let f = fixture();
    rewrite(&f, false);
    assert_detected(&f, 1, "checkpoint-root", &[]);
    let (_, text) = verify(&f, &[]);
    assert!(text.contains("1..=40"), "the root mismatch names the range it covers:\n{text}");
}

#[test]
fn a_checkpoint_signed_by_an_untrusted_key_fails_verification() {
    let f = fixture();
    let other = f.ws.join("other.key");
    strata_ok(BIN, &f.ws, &["keygen", "--name", "auditor", "--out", other.to_str().unwrap()]);
    let other_pub = format!("{}.pub", other.display());
    let out = strata(BIN, &f.ws, &["journal", "verify", "--pubkey", &other_pub]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("[checkpoint-signature]"));
}

/// The same rewrite with its checkpoints stripped (events and saved notes) chains perfectly; it
/// still never verifies under `--pubkey`, live or as a bundle, because no trusted key signed it.
#[test]
fn a_rechained_rewrite_with_its_checkpoints_stripped_never_verifies_under_pubkey() {
    let f = fixture();
    let head = rewrite(&f, true);
    assert_eq!(head, 60);
    std::fs::remove_dir_all(journal_dir(&f.ws).join("checkpoints")).unwrap();
    let (code, out) = verify(&f, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("[unsigned-by-key]") && out.contains("all 60 events unattested"), "{out}");
    let bundle = f.ws.join("rewritten.jsonl");
    strata_ok(BIN, &f.ws, &["journal", "export", "--bundle", bundle.to_str().unwrap()]);
    let (code, out) = verify(&f, &["--bundle", bundle.to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("[unsigned-by-key]"), "{out}");
}

/// An export whose events contradict the signed checkpoints it carries is refused by import
/// (before, import took it and only a later verify found it): nothing is created.
#[test]
fn an_export_that_contradicts_its_signed_checkpoints_is_not_imported() {
    let f = fixture();
    rewrite(&f, false);
    for kind in ["--jsonl", "--bundle"] {
        let file = f.ws.join(format!("export{kind}.jsonl"));
        let args = if kind == "--jsonl" {
            vec!["journal", "export", "--jsonl", "--out", file.to_str().unwrap()]
        } else {
            vec!["journal", "export", "--bundle", file.to_str().unwrap()]
        };
        strata_ok(BIN, &f.ws, &args);
        let target = f.ws.join(format!("target{kind}"));
        let out = strata(BIN, &target, &["journal", "import", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{kind}: {stderr}");
        assert!(stderr.contains("STRATA-E0307") && stderr.contains(file.to_str().unwrap()), "{kind}: {stderr}");
        assert!(stderr.contains("signed a different Merkle root"), "{kind}: {stderr}");
        assert!(!target.join(".strata").exists(), "{kind}: a refused import created {}", target.display());
    }
}
