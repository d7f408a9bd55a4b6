//! The one way a decision reaches the journal.
//!
//! Load the state the decision reads (its projections, caught up to the head), decide, append
//! the events expecting exactly the stream versions decided on, and if another writer moved one
//! of them in between, decide again on the newer state — at most [`ATTEMPTS_MAX`] times. A
//! journal shared with other processes (PostgreSQL) is refreshed before each decision, so it is
//! made on everything committed so far. A refused decision appends nothing. After an append,
//! the reactions it wakes run ([`super::react`]).

use strata_journal::projection::{Projection, ProjectionRunError, catch_up_one, catch_up_tail, save_one};
use strata_journal::{Journal, JournalError, StreamAppend};

/// Decisions made before a command gives up because its streams keep moving under it.
pub const ATTEMPTS_MAX: usize = 16;

/// State a decision reads: caught up before each attempt, saved as a snapshot after an append.
pub trait Folded {
    /// Brings the state to the journal head: from its snapshot and the tail when `from` is
    /// `None`, else only the tail after `from` (what the last call returned). Returns the
    /// sequence each projection in it now reflects, in order.
    fn catch_up(&mut self, journal: &Journal, from: Option<&[u64]>) -> Result<Vec<u64>, ProjectionRunError>;
    /// Saves a snapshot of each projection at the sequence [`Folded::catch_up`] returned for it.
    fn save(&self, journal: &Journal, through: &[u64]) -> Result<(), ProjectionRunError>;
}

fn fold<P: Projection>(p: &mut P, journal: &Journal, from: Option<u64>) -> Result<u64, ProjectionRunError> {
    match from {
        None => Ok(catch_up_one(p, journal)?.through),
        Some(through) => catch_up_tail(p, journal, through),
    }
}

impl<P: Projection> Folded for P {
    fn catch_up(&mut self, journal: &Journal, from: Option<&[u64]>) -> Result<Vec<u64>, ProjectionRunError> {
        Ok(vec![fold(self, journal, from.and_then(|f| f.first().copied()))?])
    }

    fn save(&self, journal: &Journal, through: &[u64]) -> Result<(), ProjectionRunError> {
        save_one(self, journal, through.first().copied().unwrap_or(0))
    }
}

/// Two states one decision reads.
#[derive(Debug, Default)]
pub struct Both<A, B>(pub A, pub B);

impl<A: Projection, B: Projection> Folded for Both<A, B> {
    fn catch_up(&mut self, journal: &Journal, from: Option<&[u64]>) -> Result<Vec<u64>, ProjectionRunError> {
        let at = |i: usize| from.and_then(|f| f.get(i).copied());
        Ok(vec![fold(&mut self.0, journal, at(0))?, fold(&mut self.1, journal, at(1))?])
    }

    fn save(&self, journal: &Journal, through: &[u64]) -> Result<(), ProjectionRunError> {
        save_one(&self.0, journal, through.first().copied().unwrap_or(0))?;
        save_one(&self.1, journal, through.get(1).copied().unwrap_or(0))
    }
}

/// What a decision wants appended, and what the command answers.
#[derive(Debug)]
pub struct Decided<T> {
    /// The appends, each expecting the stream version the decision read (empty: nothing to
    /// record).
    pub appends: Vec<StreamAppend>,
    /// The answer.
    pub answer: T,
}

impl<T> Decided<T> {
    /// A decision that records nothing.
    pub fn nothing(answer: T) -> Decided<T> {
        Decided { appends: Vec::new(), answer }
    }
}

/// What was appended.
#[derive(Debug)]
pub struct Committed<T> {
    /// The decision's answer.
    pub answer: T,
    /// Events appended (0: the decision recorded nothing).
    pub events: usize,
    /// Sequence of the last event appended, or the head the decision read.
    pub seq: u64,
    /// What the reactions the append woke appended.
    pub reacted: super::react::Reacted,
}

/// Why a decision was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum AppendError<E> {
    /// The decision refused the command.
    #[error(transparent)]
    Refused(E),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A projection could not be folded or saved.
    #[error(transparent)]
    Fold(#[from] ProjectionRunError),
    /// The decision is recorded; a reaction to it is not (yet).
    #[error(transparent)]
    Reaction(#[from] super::react::Failed),
    /// Other writers moved the streams under every attempt.
    #[error("other writers changed what this decision reads {attempts} times in a row; run the command again")]
    Contended {
        /// Attempts made.
        attempts: usize,
    },
}

/// Decides on `state` and appends what `decide` returns, deciding again after a conflict (see
/// the module doc). `state` is caught up and its snapshot saved after the append.
pub fn decide_and_append<S: Folded, T, E>(
    journal: &Journal,
    state: &mut S,
    mut decide: impl FnMut(&S) -> Result<Decided<T>, E>,
) -> Result<Committed<T>, AppendError<E>> {
    let mut through: Option<Vec<u64>> = None;
    for _ in 0..ATTEMPTS_MAX {
        journal.refresh()?;
        let now = state.catch_up(journal, through.as_deref())?;
        let read = now.iter().copied().min().unwrap_or(0);
        through = Some(now);
        let decided = decide(state).map_err(AppendError::Refused)?;
        let events: usize = decided.appends.iter().map(|a| a.events.len()).sum();
        if events == 0 {
            return Ok(Committed { answer: decided.answer, events: 0, seq: read, reacted: Default::default() });
        }
        let types: Vec<String> = decided.appends.iter().flat_map(|a| &a.events).map(|e| e.event_type.clone()).collect();
        if let Ok(appended) = journal.append_multi_blocking(decided.appends)? {
            let seq = appended.positions.last().map_or(read, |p| p.seq);
            let after = state.catch_up(journal, through.as_deref())?;
            state.save(journal, &after)?;
            let reacted = super::react::after(journal, types.iter().map(String::as_str))?;
            return Ok(Committed { answer: decided.answer, events, seq, reacted });
        }
    }
    Err(AppendError::Contended { attempts: ATTEMPTS_MAX })
}

#[cfg(test)]
mod tests {
    use strata_journal::{EventData, ExpectedVersion, Hash, Record};

    use super::*;

    /// The version of stream `s`, folded.
    #[derive(Default)]
    struct Version(u64);

    impl Projection for Version {
        fn name(&self) -> &str {
            "test-version"
        }
        fn version(&self) -> u32 {
            1
        }
        fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
            if r.stream == "s" {
                self.0 = r.version;
            }
            Ok(())
        }
        fn state_hash(&self) -> Hash {
            Hash(*blake3::hash(&self.0.to_le_bytes()).as_bytes())
        }
        fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
            Ok(self.0.to_le_bytes().to_vec())
        }
        fn restore_snapshot(&mut self, b: &[u8]) -> Result<(), String> {
            self.0 = u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes".to_owned())?);
            Ok(())
        }
        fn reset(&mut self) {
            self.0 = 0;
        }
    }

    fn event(n: u8) -> EventData {
        EventData {
            id: uuid::Uuid::from_bytes([n; 16]),
            event_type: "test.event".into(),
            schema_version: 1,
            recorded_at_ns: 0,
            causation: None,
            correlation: None,
            payload: b"{}".to_vec(),
        }
    }

    fn at(version: u64, n: u8) -> StreamAppend {
        StreamAppend { stream: "s".into(), expected: ExpectedVersion::Exact(version), events: vec![event(n)] }
    }

    #[test]
    fn a_decision_another_writer_moved_under_is_decided_again_on_the_newer_state() {
        let j = Journal::in_memory("strata.test/append").unwrap();
        let mut attempts = Vec::new();
        let done = decide_and_append(&j, &mut Version::default(), |v| {
            attempts.push(v.0);
            if attempts.len() == 1 {
                // Another writer appends between this read and this append.
                j.append_multi_blocking(vec![at(0, 1)]).unwrap().unwrap();
            }
            Ok::<_, String>(Decided { appends: vec![at(v.0, 2)], answer: v.0 })
        })
        .unwrap();
        assert_eq!(attempts, [0, 1], "decided on version 0, then again on version 1");
        assert_eq!((done.answer, done.events, done.seq), (1, 1, 2));
        assert_eq!(j.stream_version("s"), 2);
    }

    #[test]
    fn a_refusal_appends_nothing_and_streams_that_never_stop_moving_give_up() {
        let j = Journal::in_memory("strata.test/append").unwrap();
        let before = j.head();
        let refused = decide_and_append(&j, &mut Version::default(), |_| Err::<Decided<()>, _>("no".to_owned()));
        assert!(matches!(refused, Err(AppendError::Refused(e)) if e == "no"));
        assert_eq!(j.head(), before);
        let mut n = 0u8;
        let contended = decide_and_append(&j, &mut Version::default(), |v| {
            n += 1;
            j.append_multi_blocking(vec![at(v.0, n)]).unwrap().unwrap();
            Ok::<_, String>(Decided { appends: vec![at(v.0, 200)], answer: () })
        });
        assert!(matches!(contended, Err(AppendError::Contended { attempts: ATTEMPTS_MAX })));
        assert_eq!(usize::from(n), ATTEMPTS_MAX);
    }
}
