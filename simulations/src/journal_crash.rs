//! Scenario `journal-crash`: twelve simulated writers append to the real journal, on the
//! [`CrashStore`](crate::store::CrashStore) disk, through power losses at random points (a
//! prefix of the unsynced writes survives, the next may be torn), injected flush failures (the
//! journal poisons itself and is restarted), stale expected versions and retried appends. After
//! every step the invariants are checked:
//!
//! * `gapless`: sequences run 1..=head with no gap;
//! * `chain`: the hash chain and Merkle tree verify (after each restart, every 64 steps and at
//!   the end: a full verification);
//! * `acknowledged-survive`: every acknowledged event is at its acknowledged sequence after a
//!   restart;
//! * `conflicts-detected`: an append with a stale expected version is refused, one with the
//!   current version is not;
//! * `retries-idempotent`: retrying an acknowledged append returns its original positions and
//!   appends nothing, and no event id is stored twice.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng as _;
use rand_chacha::ChaCha8Rng;
use strata_engine::ports::{Clock, Ids};
use strata_journal::{EventData, ExpectedVersion, Journal, StreamAppend};
use uuid::Uuid;

use crate::store::CrashStore;
use crate::{Config, Failure, SeededIds, SimClock, component_rng};

/// The scenario's name.
pub const NAME: &str = "journal-crash";

/// Simulated writers.
pub const WRITERS: usize = 12;

/// What a run did and checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: &'static str,
    /// Its seed.
    pub seed: u64,
    /// Steps run.
    pub steps: u64,
    /// Appends acknowledged.
    pub acknowledged: u64,
    /// Appends refused for a stale expected version.
    pub conflicts: u64,
    /// Retries answered from the original positions.
    pub retries: u64,
    /// Power losses.
    pub crashes: u64,
    /// Pending writes that survived a crash anyway.
    pub kept_unsynced: u64,
    /// Torn writes recovery discarded.
    pub torn: u64,
    /// Injected flush failures.
    pub flush_failures: u64,
    /// Invariant checks made.
    pub checks: u64,
    /// The journal's head at the end.
    pub head_seq: u64,
    /// Its hash, hex: the same seed gives the same hash.
    pub head_hash: String,
}

struct Acked {
    append: StreamAppend,
    positions: Vec<u64>,
}

struct Run {
    cfg: Config,
    disk: CrashStore,
    journal: Journal,
    rng: ChaCha8Rng,
    ids: SeededIds,
    clock: SimClock,
    acked: Vec<Acked>,
    /// Writers' view of their stream's version (refreshed from the journal after a restart).
    versions: Vec<u64>,
    checked_to: u64,
    report: Report,
    step: u64,
}

/// Runs the scenario; the first broken invariant is a [`Failure`].
pub fn run(cfg: Config) -> Result<Report, Failure> {
    run_keeping_journal(cfg).map(|(r, _)| r)
}

/// [`run`], also returning the run's journal (closed, still readable), for tests that export it.
pub fn run_keeping_journal(cfg: Config) -> Result<(Report, Journal), Failure> {
    let (disk, journal) = CrashStore::open(cfg.defects).map_err(|e| fail(&cfg, 0, "open", e.to_string()))?;
    let mut r = Run {
        cfg,
        disk,
        journal,
        rng: component_rng(cfg.seed, "journal-crash/steps"),
        ids: SeededIds::new(component_rng(cfg.seed, "journal-crash/ids").random()),
        clock: SimClock::new(1_795_000_000_000_000_000),
        acked: Vec::new(),
        versions: vec![0; WRITERS],
        checked_to: 0,
        report: Report { scenario: NAME, seed: cfg.seed, ..Report::default() },
        step: 0,
    };
    for step in 1..=cfg.steps {
        r.step = step;
        r.clock.advance(1_000_000);
        let roll: f64 = r.rng.random();
        if roll < 0.62 {
            r.append()?;
        } else if roll < 0.74 {
            r.retry()?;
        } else if roll < 0.80 {
            r.restart("power loss")?;
        } else if roll < 0.83 {
            r.disk.fail_next_sync();
            r.report.flush_failures += 1;
            // The next append's flush fails and poisons the journal; it is restarted.
            r.append()?;
            r.restart("after a flush failure")?;
        }
        r.check_gapless()?;
        if step % 64 == 0 {
            r.check_chain()?;
        }
    }
    r.restart("at the end")?;
    r.report.steps = cfg.steps;
    r.report.torn = r.disk.torn_discarded();
    (r.report.head_seq, r.report.head_hash) = crate::invariants::finish(&r.journal);
    Ok((r.report, r.journal))
}

fn fail(cfg: &Config, step: u64, invariant: &str, detail: String) -> Failure {
    Failure::new(NAME, cfg, step, invariant, detail)
}

impl Run {
    fn fail(&self, invariant: &str, detail: String) -> Failure {
        fail(&self.cfg, self.step, invariant, detail)
    }

    fn events(&mut self, writer: usize) -> Vec<EventData> {
        let n = self.rng.random_range(1..=3);
        (0..n)
            .map(|i| EventData {
                id: self.ids.next_id(),
                event_type: "bench.sample".to_owned(),
                schema_version: 1,
                recorded_at_ns: self.clock.now_ns(),
                causation: None,
                correlation: None,
                payload: format!(r#"{{"writer":{writer},"step":{},"i":{i}}}"#, self.step).into_bytes(),
            })
            .collect()
    }

    /// One writer appends, now and then with a stale expected version.
    fn append(&mut self) -> Result<(), Failure> {
        let writer = self.rng.random_range(0..WRITERS);
        let known = self.versions[writer];
        let stale = known > 0 && self.rng.random_bool(0.15);
        let expected = if stale { known - 1 } else { known };
        let events = self.events(writer);
        let append =
            StreamAppend { stream: format!("writer/{writer}"), expected: ExpectedVersion::Exact(expected), events };
        match self.journal.append_multi_blocking(vec![append.clone()]) {
            Ok(Ok(done)) => {
                if stale {
                    return Err(self.fail("conflicts-detected", format!("a stale append to writer/{writer} (expected {expected}, the stream has {known}) was accepted")));
                }
                self.versions[writer] = known + append.events.len() as u64;
                self.report.acknowledged += 1;
                let positions = done.positions.iter().map(|p| p.seq).collect();
                self.acked.push(Acked { append, positions });
            }
            Ok(Err(conflict)) => {
                if !stale {
                    return Err(self.fail(
                        "conflicts-detected",
                        format!("an append with the current version {known} was refused: {conflict}"),
                    ));
                }
                self.report.conflicts += 1;
            }
            // A failed flush: not acknowledged; the journal is poisoned until restarted.
            Err(_) => {}
        }
        Ok(())
    }

    /// An acknowledged append sent again must come back with its original positions.
    fn retry(&mut self) -> Result<(), Failure> {
        if self.acked.is_empty() {
            return Ok(());
        }
        let i = self.rng.random_range(0..self.acked.len());
        let (append, positions) = (self.acked[i].append.clone(), self.acked[i].positions.clone());
        let head = self.journal.head().seq;
        match self.journal.append_multi_blocking(vec![append]) {
            Ok(Ok(done)) => {
                let again: Vec<u64> = done.positions.iter().map(|p| p.seq).collect();
                if !done.deduplicated || again != positions || self.journal.head().seq != head {
                    return Err(self.fail(
                        "retries-idempotent",
                        format!(
                            "a retry answered {again:?} (deduplicated: {}), first {positions:?}",
                            done.deduplicated
                        ),
                    ));
                }
                self.report.retries += 1;
                Ok(())
            }
            Ok(Err(c)) => Err(self.fail("retries-idempotent", format!("a retry was refused as a conflict: {c}"))),
            Err(_) => Ok(()),
        }
    }

    /// Power is lost (or the poisoned journal is stopped) and the journal opens again.
    fn restart(&mut self, why: &str) -> Result<(), Failure> {
        let (crashed, reopened) = self.disk.crash_and_reopen(&mut self.rng);
        self.report.crashes += 1;
        self.report.kept_unsynced += crashed.kept as u64;
        self.journal = reopened.map_err(|e| self.fail("recovery", format!("the journal does not open {why}: {e}")))?;
        for (w, v) in self.versions.iter_mut().enumerate() {
            *v = self.journal.stream_version(&format!("writer/{w}"));
        }
        self.checked_to = 0;
        self.check_gapless()?;
        self.check_survivors()?;
        self.check_chain()
    }

    fn check_gapless(&mut self) -> Result<(), Failure> {
        self.report.checks += 1;
        self.checked_to =
            crate::invariants::gapless(&self.journal, self.checked_to + 1).map_err(|e| self.fail("gapless", e))?;
        Ok(())
    }

    fn check_survivors(&mut self) -> Result<(), Failure> {
        self.report.checks += 1;
        let mut seen = BTreeSet::new();
        let mut ids: BTreeMap<u64, Uuid> = BTreeMap::new();
        let head = self.journal.head().seq;
        let scanned = self.journal.scan(1, head, |r, _| {
            ids.insert(r.seq, r.id);
            Ok::<bool, String>(seen.insert(r.id))
        });
        if !matches!(scanned, Ok(Ok(()))) || ids.len() as u64 != head {
            return Err(self.fail("retries-idempotent", "an event id is stored twice, or the scan failed".to_owned()));
        }
        for a in &self.acked {
            for (e, seq) in a.append.events.iter().zip(&a.positions) {
                if ids.get(seq) != Some(&e.id) {
                    return Err(self.fail(
                        "acknowledged-survive",
                        format!("event {} acknowledged at sequence {seq} is gone after a crash (head {head})", e.id),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_chain(&mut self) -> Result<(), Failure> {
        self.report.checks += 1;
        crate::invariants::chain(&self.journal).map_err(|e| self.fail("chain", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Defects;

    fn cfg(seed: u64, steps: u64, defects: Defects) -> Config {
        Config { seed, steps, defects }
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_head_hash_and_another_seed_another() {
        let a = run(cfg(11, 400, Defects::default())).expect("seed 11 keeps every invariant");
        let b = run(cfg(11, 400, Defects::default())).expect("again");
        assert_eq!(a, b);
        assert!(a.crashes > 0 && a.conflicts > 0 && a.retries > 0 && a.flush_failures > 0, "{a:?}");
        assert!(a.acknowledged > 0 && a.head_seq > 0);
        let c = run(cfg(12, 400, Defects::default())).expect("seed 12");
        assert_ne!(a.head_hash, c.head_hash);
    }

    #[test]
    fn a_sync_that_lies_is_caught_within_the_seed_budget_and_its_seed_reproduces_it() {
        let caught =
            (1..=8).find_map(|seed| run(cfg(seed, 300, Defects { sync_lies: true, ..Defects::default() })).err());
        let failure = caught.expect("the invariants catch a lying sync within 8 seeds of 300 steps");
        assert_eq!(failure.invariant, "acknowledged-survive", "{failure}");
        let again = run(cfg(failure.seed, 300, Defects { sync_lies: true, ..Defects::default() }))
            .expect_err("the seed reproduces it");
        assert_eq!(again, failure);
        assert_eq!(
            failure.reproduce(),
            format!(
                "cargo run -p strata-simulations -- --scenario journal-crash --seed {} --steps 300 --inject sync-lies",
                failure.seed
            )
        );
    }
}
