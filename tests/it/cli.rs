//! The `strata` binary end to end: init, log, export/import round trips, the bad-import
//! catalogue, keys, bundles, replay, and the single-owner rule.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use strata_journal::{Durability, EventData, ExpectedVersion, Journal, StreamAppend};
use strata_tests::{event, options, strata, strata_bin, strata_ok};
use uuid::Uuid;

const BIN: &str = strata_bin!();

fn journal_dir(ws: &Path) -> std::path::PathBuf {
    ws.join(".strata").join("journal")
}

/// A workspace with a varied history: single and batched appends, multi-stream appends,
/// causation/correlation ids, unicode and escapes in payloads.
fn populated(tmp: &Path) -> std::path::PathBuf {
    let ws = tmp.join("src");
    std::fs::create_dir_all(&ws).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process", "--origin", "strata.test/round-trip"]);
    let j = Journal::open(&journal_dir(&ws), &options(Durability::Process)).unwrap();
    for i in 0..30u128 {
        let mut e = event(
            Uuid::from_u128(i + 1),
            "bench.sample",
            &serde_json::json!({"id": format!("CR-{i}"), "title": "naïve “quotes” \\ and \n newlines", "n": i as u64, "f": 1.5}),
        );
        e.recorded_at_ns = 1_795_000_000_000_000_000 + (i as i64) * 1_000_003;
        if i % 3 == 0 {
            e.causation = Some(Uuid::from_u128(i + 1000));
            e.correlation = Some(Uuid::from_u128(7));
        }
        if i % 5 == 0 {
            let other = event(Uuid::from_u128(i + 500), "bench.sample", &serde_json::json!({"id": format!("CR-{i}")}));
            j.append_multi_blocking(vec![
                StreamAppend { stream: format!("artifact/CR-{i}"), expected: ExpectedVersion::EMPTY, events: vec![e] },
                StreamAppend { stream: "workgroup/WG-1".into(), expected: ExpectedVersion::Any, events: vec![other] },
            ])
            .unwrap()
            .unwrap();
        } else {
            j.append_blocking(&format!("artifact/CR-{i}"), ExpectedVersion::EMPTY, vec![e]).unwrap().unwrap();
        }
    }
    j.close_blocking().unwrap();
    ws
}

#[test]
fn init_log_and_json_output() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let out = strata_ok(BIN, ws, &["--json", "init"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["head"], 1);
    assert_eq!(v["durability"], "power");
    let config = std::fs::read_to_string(ws.join(".strata/config.toml")).unwrap();
    assert!(config.contains("durability = \"power\""));
    let log: serde_json::Value = serde_json::from_str(&strata_ok(BIN, ws, &["--json", "journal", "log"])).unwrap();
    assert_eq!(log[0]["type"], "workspace.initialized");
    assert_eq!(log[0]["seq"], 1);
    let table = strata_ok(BIN, ws, &["journal", "log"]);
    assert!(table.starts_with("SEQ  STREAM"), "{table}");
    // A second init is refused, naming the fix.
    let again = strata(BIN, ws, &["init"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("STRATA-E0205"));
    // Commands in a directory without a workspace say how to make one.
    let none = strata(BIN, &tmp.path().join("elsewhere"), &["journal", "log"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("strata init"));
}

#[test]
fn export_import_round_trips_with_identical_hashes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = populated(tmp.path());
    let exp = tmp.path().join("export.jsonl");
    strata_ok(BIN, &src, &["journal", "export", "--jsonl", "--out", exp.to_str().unwrap()]);
    let dst = tmp.path().join("dst");
    let out = strata_ok(BIN, &dst, &["--json", "journal", "import", exp.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["origin"], "strata.test/round-trip");
    // Export the imported journal again: byte-identical, so every hash is identical.
    let exp2 = tmp.path().join("export2.jsonl");
    strata_ok(BIN, &dst, &["journal", "export", "--jsonl", "--out", exp2.to_str().unwrap()]);
    let a = std::fs::read_to_string(&exp).unwrap();
    let b = std::fs::read_to_string(&exp2).unwrap();
    assert_eq!(a.lines().count(), 1 + 37 + 1);
    assert_eq!(a, b);
    // And the imported journal verifies and replays to the same state.
    strata_ok(BIN, &dst, &["journal", "verify"]);
    let r1: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &src, &["--json", "replay"])).unwrap();
    let r2: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &dst, &["--json", "replay"])).unwrap();
    assert_eq!(r1["projections"], r2["projections"]);
    // Stdout export equals the file export.
    let stdout = strata_ok(BIN, &src, &["journal", "export", "--jsonl"]);
    assert_eq!(stdout, a);
}

/// Each bad export: the import fails with the expected code and creates nothing.
#[test]
fn bad_imports_are_refused_and_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let src = populated(tmp.path());
    let exp = tmp.path().join("export.jsonl");
    strata_ok(BIN, &src, &["journal", "export", "--jsonl", "--out", exp.to_str().unwrap()]);
    let good = std::fs::read_to_string(&exp).unwrap();
    let lines: Vec<&str> = good.lines().collect();
    let n = lines.len();
    let join = |ls: &[String]| ls.join("\n") + "\n";
    let owned: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    let mut cases: Vec<(&str, String, &str)> = Vec::new();
    // Truncated: the end line is missing.
    cases.push(("no end line", join(&owned[..n - 1]), "STRATA-E0302"));
    // Truncated mid-line.
    cases.push(("cut mid-line", good[..good.len() - 40].to_owned(), "STRATA-E0302"));
    // An event removed from the middle.
    let mut gap = owned.clone();
    gap.remove(5);
    cases.push(("missing event", join(&gap), "STRATA-E0305"));
    // A payload edited: its hash no longer matches.
    let mut edited = owned.clone();
    let at = owned.iter().position(|l| l.contains("\"n\":2,")).unwrap();
    edited[at] = edited[at].replacen("\"n\":2,", "\"n\":3,", 1);
    cases.push(("edited payload", join(&edited), "STRATA-E0305"));
    // Two events swapped.
    let mut swapped = owned.clone();
    swapped.swap(4, 6);
    cases.push(("swapped events", join(&swapped), "STRATA-E0305"));
    // An event type this strata does not know.
    let mut unknown = owned.clone();
    unknown[2] = unknown[2].replacen("\"type\":\"bench.sample\"", "\"type\":\"artifact.teleported\"", 1);
    assert_ne!(unknown[2], owned[2]);
    cases.push(("unknown type", join(&unknown), "STRATA-E0304"));
    // A known type at an unknown schema version.
    let mut newer = owned.clone();
    newer[2] = newer[2].replacen("\"schema\":1", "\"schema\":9", 1);
    cases.push(("unknown schema", join(&newer), "STRATA-E0304"));
    // Not JSON.
    let mut garbage = owned.clone();
    garbage[2] = "{not json".into();
    cases.push(("garbage line", join(&garbage), "STRATA-E0303"));
    // An unknown field.
    let mut extra = owned.clone();
    extra[2] = extra[2].replacen("{\"seq\"", "{\"sneaky\":1,\"seq\"", 1);
    cases.push(("unknown field", join(&extra), "STRATA-E0303"));
    // No header.
    cases.push(("no header", join(&owned[1..]), "STRATA-E0303"));
    // Payload over the size limit.
    let mut huge = owned.clone();
    huge[2] = huge[2].replacen("\"payload\":{", &format!("\"payload\":{{\"big\":\"{}\",", "x".repeat(300 * 1024)), 1);
    cases.push(("oversize payload", join(&huge), "STRATA-E0303"));
    // The end line lies about the count.
    let mut lie = owned.clone();
    lie[n - 1] = lie[n - 1].replacen("\"events\":37", "\"events\":38", 1);
    cases.push(("end line mismatch", join(&lie), "STRATA-E0303"));
    // Binary data.
    cases.push(("binary", String::from_utf8_lossy(&[0xff, 0xfe, 0x00, 0x01, b'\n']).into_owned(), "STRATA-E0303"));
    // Empty file.
    cases.push(("empty", String::new(), "STRATA-E0302"));
    for (name, text, code) in cases {
        let f = tmp.path().join(format!("{}.jsonl", name.replace(' ', "-")));
        std::fs::write(&f, text).unwrap();
        let dst = tmp.path().join(format!("dst-{}", name.replace(' ', "-")));
        let out = strata(BIN, &dst, &["journal", "import", f.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(code), "{name}: expected {code}, got {stderr}");
        assert!(!dst.join(".strata").exists(), "{name}: import left a workspace behind");
    }
    // Importing over an existing journal is refused and leaves it alone.
    let before = strata_ok(BIN, &src, &["journal", "export", "--jsonl"]);
    let out = strata(BIN, &src, &["journal", "import", exp.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0306"));
    assert_eq!(strata_ok(BIN, &src, &["journal", "export", "--jsonl"]), before);
}

#[test]
fn a_second_process_is_told_who_holds_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    strata_ok(BIN, ws, &["init"]);
    let held = Journal::open(&journal_dir(ws), &options(Durability::Power)).unwrap();
    // Waits a short while for the holder (the default is 30 s), then names it.
    let out = std::process::Command::new(BIN)
        .env("STRATA_LOCK_WAIT_MS", "300")
        .args(["--dir", ws.to_str().unwrap(), "journal", "log"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("STRATA-E0203") && stderr.contains(&format!("pid {}", std::process::id())), "{stderr}");
    // Nothing was appended by the refused process.
    assert_eq!(held.head().seq, 1);
    let checkpoint = std::process::Command::new(BIN)
        .env("STRATA_LOCK_WAIT_MS", "300")
        .args(["--dir", ws.to_str().unwrap(), "journal", "checkpoint", "--key", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(checkpoint.status.code(), Some(1));
    assert_eq!(held.head().seq, 1);
}

#[test]
fn keygen_writes_private_key_0600_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("k");
    let out = strata_ok(BIN, tmp.path(), &["--json", "keygen", "--name", "ops", "--out", key.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["public_key"].as_str().unwrap().starts_with("ops+"));
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&key).unwrap().starts_with("PRIVATE+KEY+ops+"));
    let again = strata(BIN, tmp.path(), &["keygen", "--out", key.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("STRATA-E0602"));
    let bad =
        strata(BIN, tmp.path(), &["keygen", "--name", "has space", "--out", tmp.path().join("k2").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("STRATA-E0401"));
}

#[test]
fn checkpoint_prints_a_signed_note_that_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = populated(tmp.path());
    let key = tmp.path().join("k");
    strata_ok(BIN, &ws, &["keygen", "--name", "ops", "--out", key.to_str().unwrap()]);
    let note = strata_ok(BIN, &ws, &["journal", "checkpoint", "--key", key.to_str().unwrap()]);
    let lines: Vec<&str> = note.lines().collect();
    assert_eq!(lines[0], "strata.test/round-trip");
    assert_eq!(lines[1], "37");
    assert_eq!(lines[3], "");
    assert!(lines[4].starts_with("\u{2014} ops "), "{note}");
    let parsed = strata_journal::note::SignedNote::parse(&note).unwrap();
    let vkey =
        strata_journal::note::VerifierKey::parse(&std::fs::read_to_string(format!("{}.pub", key.display())).unwrap())
            .unwrap();
    assert_eq!(parsed.verified_by(&[vkey]), vec!["ops".to_owned()]);
    // The checkpoint is itself an event.
    let log: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "journal", "log", "--stream", "$journal"])).unwrap();
    assert_eq!(log[0]["type"], "journal.checkpoint");
    assert_eq!(log[0]["payload"]["size"], 37);
}

#[test]
fn an_offline_bundle_verifies_without_the_database_and_catches_edits() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = populated(tmp.path());
    let key = tmp.path().join("k");
    strata_ok(BIN, &ws, &["keygen", "--name", "ops", "--out", key.to_str().unwrap()]);
    let pubkey = format!("{}.pub", key.display());
    strata_ok(BIN, &ws, &["journal", "checkpoint", "--key", key.to_str().unwrap()]);
    strata_ok(BIN, &ws, &["journal", "checkpoint", "--key", key.to_str().unwrap()]);
    let bundle = tmp.path().join("audit.jsonl");
    strata_ok(BIN, &ws, &["journal", "export", "--bundle", bundle.to_str().unwrap(), "--pubkey", &pubkey]);
    // Verify somewhere with no workspace at all, and with the database gone.
    std::fs::remove_dir_all(ws.join(".strata")).unwrap();
    let elsewhere = tmp.path().join("auditor");
    let out = strata_ok(
        BIN,
        &elsewhere,
        &["--json", "journal", "verify", "--bundle", bundle.to_str().unwrap(), "--pubkey", &pubkey],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["events"], 39);
    assert_eq!(v["checkpoints"].as_array().unwrap().len(), 2);
    assert!(v["attestations"].as_array().unwrap().iter().all(|a| a["matches"] == true));
    // Edit one event in the bundle: verification fails at it.
    let text = std::fs::read_to_string(&bundle).unwrap();
    let edited = text.replacen("\"n\":4,", "\"n\":5,", 1);
    assert_ne!(edited, text);
    let bad = tmp.path().join("edited.jsonl");
    std::fs::write(&bad, edited).unwrap();
    let out = strata(
        BIN,
        &elsewhere,
        &["--json", "journal", "verify", "--bundle", bad.to_str().unwrap(), "--pubkey", &pubkey],
    );
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(v["first_bad_seq"].as_u64().is_some());
    // A truncated bundle is an error.
    let cut = tmp.path().join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let out = strata(BIN, &elsewhere, &["journal", "verify", "--bundle", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0302"));
}

#[test]
fn replay_check_compares_snapshot_plus_tail_with_a_full_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = populated(tmp.path());
    // A plain replay writes nothing; --save-snapshots stores them; then more events; then --check
    // starts from the snapshots.
    let sled_before = std::fs::read(journal_dir(&ws).join("sled").join("db")).unwrap();
    strata_ok(BIN, &ws, &["replay"]);
    assert!(
        std::fs::read(journal_dir(&ws).join("sled").join("db")).unwrap() == sled_before,
        "replay wrote to the journal"
    );
    strata_ok(BIN, &ws, &["replay", "--save-snapshots"]);
    let j = Journal::open(&journal_dir(&ws), &options(Durability::Process)).unwrap();
    let more: Vec<EventData> =
        (0..7).map(|i| event(Uuid::from_u128(9000 + i), "bench.sample", &serde_json::json!({"i": i as u64}))).collect();
    j.append_blocking("bench/x", ExpectedVersion::EMPTY, more).unwrap().unwrap();
    j.close_blocking().unwrap();
    drop(j);
    let v: serde_json::Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "replay", "--check"])).unwrap();
    assert_eq!(v["ok"], true);
    for p in v["projections"].as_array().unwrap() {
        assert_eq!(p["snapshot_seq"], 37, "{p}");
        assert_eq!(p["state_hash"], p["snapshot_plus_tail_hash"]);
        assert_eq!(p["events"], 44);
    }
}

#[test]
fn demo_runs_and_every_check_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let at = tmp.path().join("demo");
    let out = strata_ok(BIN, tmp.path(), &["--json", "demo", "--at", at.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["artifacts"], 451, "288 of the ten original kinds, 163 of the sections' five");
    assert_eq!(v["spec_files"], 164);
    assert_eq!(v["validation_findings"], 0);
    assert_eq!(v["approval_gate_held"], true);
    assert!(v["suspects_after_edit"].as_u64().unwrap() > 0);
    // Rerunnable: it replaces its own earlier output, and only that.
    strata_ok(BIN, tmp.path(), &["demo", "--at", at.to_str().unwrap()]);
    let other = tmp.path().join("not-a-demo");
    std::fs::create_dir_all(&other).unwrap();
    let refused = strata(BIN, tmp.path(), &["demo", "--at", other.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("STRATA-E0602"));
    // Its journal round-trips through export and import byte for byte.
    assert!(strata_tests::assert_round_trips(BIN, &at, "strata demo") > 288);
}

fn head(ws: &Path) -> serde_json::Value {
    let log: serde_json::Value =
        serde_json::from_str(&strata_ok(BIN, ws, &["--json", "journal", "log", "--limit", "1"])).unwrap();
    log[0]["hash"].clone()
}

/// Verification attests or fails: with `--pubkey`, a journal or bundle no trusted key signed
/// fails (exit 3), whatever its chain; every report says how far the checkpoints reach and how
/// many events lie beyond them; `--require-attested` makes that tail a failure.
#[test]
fn verify_says_how_far_signed_checkpoints_reach_and_fails_what_no_trusted_key_signed() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    let key = tmp.path().join("k");
    strata_ok(BIN, &ws, &["keygen", "--name", "ops", "--out", key.to_str().unwrap()]);
    let pubkey = format!("{}.pub", key.display());
    let bundle = tmp.path().join("f.jsonl");
    let verify = |args: &[&str]| {
        let out = strata(BIN, &ws, &[&["--json", "journal", "verify"][..], args].concat());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {} {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
        });
        (out.status.code(), v)
    };
    // No checkpoint at all: the reproduction, live and as a bundle.
    strata_ok(BIN, &ws, &["journal", "export", "--bundle", bundle.to_str().unwrap()]);
    let before = head(&ws);
    for args in [vec!["--pubkey", &pubkey], vec!["--bundle", bundle.to_str().unwrap(), "--pubkey", &pubkey]] {
        let (code, v) = verify(&args);
        assert_eq!(code, Some(3), "{args:?}: {v}");
        assert_eq!(v["ok"], false);
        assert!(v["problems"].as_array().unwrap().iter().any(|p| p["kind"] == "unsigned-by-key"), "{v}");
        assert_eq!(v["coverage"]["keys"][0]["attested_to"], serde_json::Value::Null, "{v}");
        assert_eq!(v["coverage"]["keys"][0]["unattested"], 1, "{v}");
        let human = strata(BIN, &ws, &[&["journal", "verify"][..], &args].concat());
        let text = String::from_utf8_lossy(&human.stdout);
        assert!(text.contains("NO CHECKPOINT signed by this key: all 1 event unattested"), "{text}");
        assert!(text.contains("[unsigned-by-key]") && text.contains("FAILED"), "{text}");
    }
    // Without keys nothing is claimed, and the report says so.
    let (code, v) = verify(&[]);
    assert_eq!(
        (code, &v["coverage"]["unattested"], &v["coverage"]["signatures_checked"]),
        (Some(0), &1.into(), &false.into())
    );
    assert_eq!(head(&ws), before, "verify appends nothing");

    // Signed: the checkpoint covers event 1; its own event (2) carries the note and is not a tail.
    strata_ok(BIN, &ws, &["journal", "checkpoint", "--key", key.to_str().unwrap()]);
    let (code, v) = verify(&["--pubkey", &pubkey, "--require-attested"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["coverage"]["keys"][0]["key"].as_str().map(|k| k.starts_with("ops+")), Some(true), "{v}");
    assert_eq!((&v["coverage"]["attested_to"], &v["coverage"]["unattested"]), (&1.into(), &0.into()), "{v}");
    // Three events after it: reported; a failure only under --require-attested, naming the first.
    let j = Journal::open(&journal_dir(&ws), &options(Durability::Process)).unwrap();
    let more =
        (0..3).map(|i| event(Uuid::from_u128(70 + i), "bench.sample", &serde_json::json!({"i": i as u64}))).collect();
    j.append_blocking("bench/tail", ExpectedVersion::EMPTY, more).unwrap().unwrap();
    j.close_blocking().unwrap();
    drop(j);
    strata_ok(BIN, &ws, &["journal", "export", "--bundle", bundle.to_str().unwrap()]);
    for extra in [vec![], vec!["--bundle", bundle.to_str().unwrap()]] {
        let (code, v) = verify(&[&["--pubkey", pubkey.as_str()][..], &extra].concat());
        assert_eq!(code, Some(0), "{v}");
        assert_eq!((&v["coverage"]["attested_to"], &v["coverage"]["unattested"]), (&1.into(), &3.into()), "{v}");
        let (code, v) = verify(&[&["--pubkey", pubkey.as_str(), "--require-attested"][..], &extra].concat());
        assert_eq!(code, Some(3), "{v}");
        assert_eq!(v["first_bad_seq"], 3, "{v}");
        assert!(v["problems"].as_array().unwrap().iter().any(|p| p["kind"] == "unattested"), "{v}");
        let text = String::from_utf8_lossy(
            &strata(BIN, &ws, &[&["journal", "verify", "--pubkey", pubkey.as_str()][..], &extra].concat()).stdout,
        )
        .into_owned();
        assert!(text.contains("events 1..=1; 3 events after it unattested"), "{text}");
    }
    // A second trusted key that never signed anything fails, the first still reported.
    let other = tmp.path().join("other");
    strata_ok(BIN, &ws, &["keygen", "--name", "other", "--out", other.to_str().unwrap()]);
    let other_pub = format!("{}.pub", other.display());
    let (code, v) = verify(&["--pubkey", &pubkey, "--pubkey", &other_pub]);
    assert_eq!(code, Some(3), "{v}");
    let keys = v["coverage"]["keys"].as_array().unwrap();
    assert_eq!((&keys[0]["attested_to"], &keys[1]["attested_to"]), (&1.into(), &serde_json::Value::Null), "{v}");
    // --require-attested needs a key to attest with: a usage error.
    assert_eq!(strata(BIN, &ws, &["journal", "verify", "--require-attested"]).status.code(), Some(2));
}

/// E0202 says to run `journal verify` for a full report: on a journal too damaged to open,
/// verify reports the damage as its finding (exit 3), instead of failing with E0202 again.
#[test]
fn verify_reports_a_journal_too_damaged_to_open_as_a_finding() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    strata_ok(BIN, ws, &["init", "--durability", "process"]);
    let db = journal_dir(ws).join("sled").join("db");
    let len = std::fs::metadata(&db).unwrap().len() as usize;
    std::fs::write(&db, vec![0u8; len]).unwrap();
    let log = strata(BIN, ws, &["journal", "log"]);
    let stderr = String::from_utf8_lossy(&log.stderr);
    assert_eq!(log.status.code(), Some(1));
    assert!(stderr.contains("STRATA-E0202") && stderr.contains("strata journal verify"), "{stderr}");
    let out = strata(BIN, ws, &["journal", "verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("PROBLEM [damaged]") && text.contains("restore it from an export"), "{text}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("STRATA-E0202"));
    let json = strata(BIN, ws, &["--json", "journal", "verify"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((json.status.code(), &v["ok"], &v["problems"][0]["kind"]), (Some(3), &false.into(), &"damaged".into()));
}

/// Twelve direct CLI writers (no daemon), ten calls each, at once: every call waits its turn for
/// the journal's lock and succeeds, each learning is recorded once, and the journal verifies.
#[test]
fn concurrent_direct_writers_all_wait_their_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_owned();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    strata_ok(BIN, &ws, &["knowledge", "session", "--session", "s-1"]);
    let writers: Vec<_> = (0..12)
        .map(|w| {
            let ws = ws.clone();
            std::thread::spawn(move || {
                (0..10)
                    .map(|i| {
                        let text = format!("writer {w} call {i}");
                        let out = strata(BIN, &ws, &["knowledge", "log", "--session", "s-1", "--learning", &text]);
                        (text, out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<_> = writers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let failed: Vec<_> = results.iter().filter(|r| r.1 != Some(0)).collect();
    assert!(failed.is_empty(), "{} of 120 calls failed: {failed:?}", failed.len());
    let j = Journal::open(&journal_dir(&ws), &options(Durability::Process)).unwrap();
    let learned: Vec<String> = j
        .read_range(1, 10_000)
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "learning.logged")
        .map(|e| serde_json::from_slice::<serde_json::Value>(&e.payload).unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    j.close_blocking().unwrap();
    drop(j);
    for (text, _, _) in &results {
        assert_eq!(learned.iter().filter(|l| *l == text).count(), 1, "{text} recorded once");
    }
    assert_eq!(learned.len(), 120);
    let verify = strata(BIN, &ws, &["journal", "verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// A plan with problems is refused before anything is recorded: not even the built-in profiles
/// a run registers (E1701 says nothing was appended, and the head proves it).
#[test]
fn an_invalid_plan_appends_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    strata_ok(BIN, ws, &["init", "--durability", "process"]);
    let head = || {
        let j = Journal::open(&journal_dir(ws), &options(Durability::Process)).unwrap();
        let h = j.head();
        j.close_blocking().unwrap();
        h
    };
    let before = head();
    let plan = ws.join("plan.toml");
    std::fs::write(
        &plan,
        "workgroup = \"w\"\n[[task]]\nid = \"a\"\nrole = \"backend-builder\"\nobjective = \"x\"\nafter = [\"nope\"]\n",
    )
    .unwrap();
    let out = strata(BIN, ws, &["run", plan.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STRATA-E1701"), "{stderr}");
    assert_eq!(head(), before, "the refused plan moved the head");
}
