//! Crash safety with real processes: a child appends from 12 threads and is SIGKILLed at a
//! random moment, 50 times over one journal. After every kill the journal must reopen with
//! every acknowledged event present at its acknowledged sequence, gapless sequences, and a chain
//! and Merkle root that verify.
//!
//! The kill moment is chosen by event, not by time: the parent kills after a random number of
//! acknowledgements (seeded; the seed is printed), while all 12 threads keep appends in flight,
//! so the writer is caught at arbitrary points of its batch cycle.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};
use strata_journal::verify::verify_dir;
use strata_journal::{Durability, Journal};
use strata_tests::{create_journal, options};

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
        let report = verify_dir(&dir, &options(Durability::Process), vec![], &[]).expect("verify");
        assert!(report.ok(), "round {round}: verify found problems: {:?}", report.problems);
        assert_eq!(report.events, head);
    }
    assert!(dups > 0, "no idempotent retry was exercised");
    println!("crash test: {} acknowledged events survived {rounds} SIGKILLs; {dups} retries deduplicated", acked.len());
}
