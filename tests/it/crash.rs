//! Crash safety with real processes: a child appends from 12 threads and is SIGKILLed at a
//! random moment, 50 times over one journal. After every kill the journal must reopen with
//! every acknowledged event present at its acknowledged sequence, gapless sequences, and a chain
//! and Merkle root that verify.
//!
//! The kill moment is chosen by event, not by time: the parent kills after a random number of
//! acknowledgements (seeded; the seed is printed), while all 12 threads keep appends in flight,
//! so the writer is caught at arbitrary points of its batch cycle.
//!
//! `strata journal import` is atomic under the same treatment: SIGKILLed at 50 seeded moments of
//! a 9,000-event import (the moment is a poll count, drawn from the polls a whole import takes),
//! it leaves no journal or the whole one, and the next import succeeds and clears what the killed
//! one left. An export file changed while it is imported never brings in anything unchecked.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use strata_journal::verify::verify_dir;
use strata_journal::{Durability, ExpectedVersion, Journal, StreamAppend};
use strata_tests::{create_journal, event, options, strata, strata_bin};

const ROUNDS_DEFAULT: usize = 50;

#[test]
fn sigkilled_appender_never_loses_an_acknowledged_event() {
    let rounds: usize =
        std::env::var("STRATA_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(ROUNDS_DEFAULT);
    let seed: u64 = std::env::var("STRATA_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_c0de);
    println!("crash test: {rounds} rounds, seed {seed} (rerun with STRATA_CRASH_SEED={seed})");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("journal");
    create_journal(&dir, Durability::Process).close_blocking().expect("close");
    // Everything ever acknowledged: seq -> event id.
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut dups = 0usize;
    for round in 0..rounds {
        let durability = if round % 2 == 0 { "process" } else { "power" };
        let kill_after = rng.random_range(1..400usize);
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash-child"))
            .arg(&dir)
            .arg(durability)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn crash-child");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok);
        assert_eq!(first.as_deref(), Some("READY"), "round {round}: child did not open the journal");
        let mut seen = 0usize;
        let mut killed = false;
        for line in lines {
            let Ok(line) = line else { break };
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["ACK", seq, id, _stream, _version] => {
                    let seq: u64 = seq.parse().expect("seq");
                    if let Some(prev) = acked.insert(seq, (*id).to_owned()) {
                        panic!("round {round}: sequence {seq} acknowledged twice ({prev} and {id})");
                    }
                    seen += 1;
                }
                ["DUP", _, _] => dups += 1,
                _ => panic!("round {round}: unexpected child output {line:?}"),
            }
            if seen == kill_after && !killed {
                // `Child::kill` sends SIGKILL on Unix: no destructors, no flush, no index snapshot.
                child.kill().expect("SIGKILL the child");
                killed = true;
            }
        }
        let status = child.wait().expect("wait");
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        assert!(killed, "round {round}: child exited before {kill_after} acks ({status}): {stderr}");

        // Reopen: every acknowledged event is there, at its acknowledged sequence.
        let journal = Journal::open(&dir, &options(Durability::Process))
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        let head = journal.head().seq;
        let max_acked = *acked.keys().next_back().expect("some acks");
        assert!(head >= max_acked, "round {round}: head {head} is behind acknowledged sequence {max_acked}");
        let mut expect_seq = 1u64;
        let mut found = 0usize;
        let r = journal.scan(1, head, |rec, _| {
            assert_eq!(rec.seq, expect_seq, "round {round}: gap in sequences");
            expect_seq += 1;
            if let Some(id) = acked.get(&rec.seq) {
                assert_eq!(&rec.id.to_string(), id, "round {round}: sequence {} holds another event", rec.seq);
                found += 1;
            }
            Ok::<bool, std::convert::Infallible>(true)
        });
        assert!(matches!(r, Ok(Ok(()))), "round {round}: scan failed: {r:?}");
        assert_eq!(expect_seq, head + 1);
        assert_eq!(found, acked.len(), "round {round}: acknowledged events missing");
        drop(journal);
        let report =
            verify_dir(&dir, &options(Durability::Process), vec![], &[]).unwrap_or_else(|e| panic!("verify: {e}"));
        assert!(report.ok(), "round {round}: verify found problems: {:?}", report.problems);
        assert_eq!(report.events, head);
    }
    assert!(dups > 0, "no idempotent retry was exercised");
    println!("crash test: {} acknowledged events survived {rounds} SIGKILLs; {dups} retries deduplicated", acked.len());
}

/// Writes the export of a journal of ~9,000 events (twelve streams, batches of one to 100, two
/// signed checkpoints) to `tmp/export.jsonl`; returns its path and its head (seq, hash).
fn large_export(tmp: &Path) -> (PathBuf, (u64, String)) {
    let dir = tmp.join("source");
    let j = create_journal(&dir, Durability::Process);
    let key = std::sync::Arc::new(strata_journal::note::SignerKey::from_seed("crash", [7; 32]).expect("key"));
    let mut n = 0u128;
    for round in 0..180u128 {
        let size = [1, 100, 7, 40, 2][(round % 5) as usize];
        let appends = (0..2u128)
            .map(|s| StreamAppend {
                stream: format!("load/{}", (round * 2 + s) % 12),
                expected: ExpectedVersion::Any,
                events: (0..size)
                    .map(|_| {
                        n += 1;
                        event(
                            uuid::Uuid::from_u128(n),
                            "bench.sample",
                            &serde_json::json!({"n": n as u64, "pad": "p".repeat(64)}),
                        )
                    })
                    .collect(),
            })
            .collect();
        j.append_multi_blocking(appends).expect("append").expect("no conflict");
        if round == 60 || round == 179 {
            j.checkpoint_blocking(key.clone(), uuid::Uuid::from_u128(1_000_000 + round), 1_795_000_000_000_000_000)
                .expect("checkpoint");
        }
    }
    let head = j.head();
    let path = tmp.join("export.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).expect("create export"));
    strata_journal::export::export_jsonl(&j, &mut w).expect("export");
    std::io::Write::flush(&mut w).expect("flush");
    j.close_blocking().expect("close");
    assert!(head.seq > 9_000, "{}", head.seq);
    (path, (head.seq, head.hash.to_hex()))
}

fn import_command(ws: &Path, file: &Path) -> Command {
    let mut cmd = Command::new(strata_bin!());
    cmd.arg("--dir").arg(ws).args(["journal", "import"]).arg(file).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

/// Temporary directories an import left in `.strata/`.
fn leftovers(ws: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(ws.join(".strata")) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("journal.importing-"))
        .collect()
}

/// The workspace's journal: `None` when there is none, else its verified head (seq, hash).
fn imported_head(ws: &Path, why: &str) -> Option<(u64, String)> {
    let dir = ws.join(".strata").join("journal");
    if !dir.join("sled").exists() {
        let out = strata(strata_bin!(), ws, &["journal", "log"]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("STRATA-E0204"), "{why}: not a clean absence");
        return None;
    }
    let report =
        verify_dir(&dir, &options(Durability::Process), vec![], &[]).unwrap_or_else(|e| panic!("{why}: verify: {e}"));
    assert!(report.ok(), "{why}: the journal does not verify: {:?}", report.problems);
    Some((report.events, report.head_hash.to_hex()))
}

/// Where an import is, as seen from outside: reading and checking (nothing on disk yet),
/// loading its temporary journal, or done (the journal renamed into place).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Checking = 0,
    Loading = 1,
    Placed = 2,
}

fn phase(ws: &Path) -> Phase {
    if ws.join(".strata").join("journal").exists() {
        Phase::Placed
    } else if !leftovers(ws).is_empty() {
        Phase::Loading
    } else {
        Phase::Checking
    }
}

/// Polls `child` (a poll looks at the workspace and yields) until it exits, or SIGKILLs it at
/// poll `offset` of phase `at` (or as soon as it is past that phase). Returns the polls seen in
/// each phase and whether it was killed.
fn poll_or_kill(child: &mut std::process::Child, ws: &Path, at: Option<(Phase, u64)>) -> ([u64; 3], bool) {
    let mut polls = [0u64; 3];
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return (polls, false);
        }
        let now = phase(ws);
        if let Some((target, offset)) = at
            && (now > target || (now == target && polls[now as usize] >= offset))
        {
            child.kill().expect("SIGKILL the import");
            child.wait().expect("wait");
            return (polls, true);
        }
        polls[now as usize] += 1;
        std::thread::yield_now();
    }
}

#[test]
fn a_sigkilled_import_leaves_no_journal_or_the_whole_one() {
    let rounds: u64 = std::env::var("STRATA_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed: u64 = std::env::var("STRATA_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x1a_7041c);
    println!("import crash test: {rounds} rounds, seed {seed} (rerun with STRATA_CRASH_SEED={seed})");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (file, head) = large_export(tmp.path());
    // How many polls each phase of a whole import takes here, now.
    let calibrate = tmp.path().join("calibrate");
    let mut child = import_command(&calibrate, &file).spawn().expect("spawn import");
    let (full, _) = poll_or_kill(&mut child, &calibrate, None);
    assert_eq!(imported_head(&calibrate, "calibration").as_ref(), Some(&head));
    let (mut none, mut whole, mut cleaned) = (0u32, 0u32, 0u32);
    for round in 0..rounds {
        let ws = tmp.path().join(format!("ws-{round}"));
        // Mostly while loading (the longest phase, and the one a partial journal came from), the
        // rest while checking and after the journal is in place.
        let at = match rng.random_range(0..10u32) {
            0..=2 => Phase::Checking,
            3..=8 => Phase::Loading,
            _ => Phase::Placed,
        };
        let offset = rng.random_range(0..=full[at as usize].max(1));
        let mut child = import_command(&ws, &file).spawn().expect("spawn import");
        let (_, killed) = poll_or_kill(&mut child, &ws, Some((at, offset)));
        let why = format!("round {round} (SIGKILL at poll {offset} of {at:?}, ~{full:?} polls a phase: {killed})");
        match imported_head(&ws, &why) {
            Some(h) => {
                assert_eq!(h, head, "{why}: a journal, but not the whole one");
                whole += 1;
            }
            None => {
                none += 1;
                cleaned += u32::from(!leftovers(&ws).is_empty());
                // The next import succeeds and clears what the killed one left.
                let out = import_command(&ws, &file).output().expect("import again");
                assert!(out.status.success(), "{why}: import after the kill: {}", String::from_utf8_lossy(&out.stderr));
                assert_eq!(imported_head(&ws, &why).as_ref(), Some(&head), "{why}: after the second import");
            }
        }
        assert!(leftovers(&ws).is_empty(), "{why}: temporary directories left: {:?}", leftovers(&ws));
        std::fs::remove_dir_all(&ws).expect("clean up");
    }
    println!(
        "import crash test: {none} kills left no journal ({cleaned} of them a temporary one the next import cleared), {whole} the whole one"
    );
    assert!(cleaned > 0 && whole > 0, "the kills did not land both inside and after an import (seed {seed})");
}

#[test]
fn an_export_changed_while_it_is_imported_brings_in_nothing_unchecked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (file, head) = large_export(tmp.path());
    let good = std::fs::read(&file).expect("read export");
    // The same bytes with one payload changed: its hash no longer matches.
    let text = String::from_utf8(good.clone()).expect("utf-8");
    let bad = text.replacen("{\"n\":4000,", "{\"n\":4001,", 1).into_bytes();
    assert_ne!(bad, good);
    assert_eq!(bad.len(), good.len());

    // Changed after the import read and checked it (its temporary journal exists): the import
    // goes on from the bytes it checked, and the journal is the one it checked.
    let ws = tmp.path().join("after-check");
    let changing = tmp.path().join("changing.jsonl");
    std::fs::write(&changing, &good).expect("write");
    let mut child = import_command(&ws, &changing).spawn().expect("spawn import");
    let mut changed = false;
    while child.try_wait().expect("try_wait").is_none() {
        if !changed && !leftovers(&ws).is_empty() {
            std::fs::write(&changing, &bad).expect("overwrite in place");
            changed = true;
        }
        std::thread::yield_now();
    }
    assert!(child.wait().expect("wait").success());
    assert!(changed, "the import finished before its temporary journal was seen");
    assert_eq!(imported_head(&ws, "changed after the check"), Some(head.clone()));

    // Changed in place, back and forth, while it is being read: refused with nothing behind, or
    // (the read saw only the good bytes) the whole journal. At least six rounds, and on a busy
    // machine (where an import may read the whole file before this process writes once) more,
    // until one read saw the change or forty rounds were run.
    let (mut refused, mut imported) = (0u32, 0u32);
    for round in 0..40 {
        if round >= 6 && refused > 0 {
            break;
        }
        let ws = tmp.path().join(format!("racing-{round}"));
        std::fs::write(&changing, &good).expect("write");
        let mut child = import_command(&ws, &changing).spawn().expect("spawn import");
        let mut flip = false;
        while child.try_wait().expect("try_wait").is_none() {
            let f = std::fs::OpenOptions::new().write(true).open(&changing).expect("open");
            std::os::unix::fs::FileExt::write_all_at(&f, if flip { &good } else { &bad }, 0).expect("write in place");
            flip = !flip;
        }
        let out = child.wait_with_output().expect("wait");
        if out.status.success() {
            imported += 1;
            assert_eq!(imported_head(&ws, "racing").as_ref(), Some(&head));
        } else {
            refused += 1;
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("[STRATA-E03"), "{stderr}");
            assert!(!ws.join(".strata").exists(), "a refused import left {}: {stderr}", ws.display());
        }
    }
    println!("changed while read: {refused} refused with nothing behind, {imported} imported whole");
    assert!(refused > 0, "no read saw the change; the race was not exercised");
}
