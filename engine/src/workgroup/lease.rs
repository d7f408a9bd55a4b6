//! Coordinator leases: which process coordinates a workgroup, fenced by an epoch.
//!
//! On a journal shared by many processes (PostgreSQL), a coordinator that stopped answering (a
//! partition, a SIGSTOP, a crash) must be replaceable, and once replaced it must never record
//! anything for the workgroup again, even if it wakes up believing it still coordinates. A
//! workgroup's lease is its own stream, [`stream`] (`coordinator/<workgroup>`):
//!
//! * `coordinator.lease-taken` starts an epoch: who holds it, when it was taken and when it
//!   ends. A lease may be taken only when there is none or the last one ended by the taker's
//!   clock, recorded in the event, so the fold never reads a clock and replay is deterministic.
//! * `coordinator.lease-renewed` moves the end of the current epoch on, by its holder only.
//! * `coordinator.lease-released` ends the current epoch at once, by its holder only, when its
//!   run ends cleanly: the next taker starts the next epoch whatever its clock says. A holder that
//!   crashed releases nothing, so its lease ends only at the end it recorded.
//!
//! The fence is the journal's optimistic concurrency, not a clock: every append a holder makes
//! for its run carries a renewal of its lease that expects the lease stream's version it last
//! wrote, in the same atomic multi-stream append ([`renew`]). A takeover appends to that stream,
//! so every later append of the old holder conflicts on it and is refused as a whole: nothing
//! it sends under the old epoch is recorded ([`fenced`]). Clocks only decide when a lease may be
//! taken over; a coordinator with a fast or slow clock can take over early or late, never record
//! under an epoch it lost.

use serde::{Deserialize, Serialize};
use strata_journal::{EventData, ExpectedVersion, StreamAppend};

use crate::ce::time::format_rfc3339;
use crate::ports::{Clock, Ids};

/// Prefix of a workgroup's lease stream.
pub const STREAM_PREFIX: &str = "coordinator/";
/// `coordinator.lease-taken`: a new epoch of a workgroup's lease.
pub const TAKEN: &str = "coordinator.lease-taken";
/// `coordinator.lease-renewed`: the holder moved its lease's end on.
pub const RENEWED: &str = "coordinator.lease-renewed";
/// `coordinator.lease-released`: the holder's run ended; the lease is free now.
pub const RELEASED: &str = "coordinator.lease-released";
/// Every type of the lease stream.
pub const ALL: [&str; 3] = [TAKEN, RENEWED, RELEASED];
/// Longest holder name.
pub const HOLDER_BYTES_MAX: usize = 128;
/// Shortest lease, milliseconds (a waiting coordinator looks at its lease at least every
/// 250 ms and renews it when a third has passed).
pub const LEASE_MS_MIN: u64 = 1_000;
/// Longest lease, milliseconds (one hour).
pub const LEASE_MS_MAX: u64 = 3_600_000;
/// The lease a coordinator takes unless told otherwise, milliseconds.
pub const LEASE_MS_DEFAULT: u64 = 30_000;

/// The lease stream of `workgroup`.
pub fn stream(workgroup: &str) -> String {
    format!("{STREAM_PREFIX}{workgroup}")
}

/// `coordinator.lease-taken` and `coordinator.lease-renewed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSet {
    /// Who holds it (a coordinator process's run).
    pub holder: String,
    /// The epoch: 1 for the first lease, one more for each takeover.
    pub epoch: u64,
    /// When it was taken or renewed (the holder's clock), ns since the epoch.
    pub at_ns: i64,
    /// When it ends, ns since the epoch.
    pub expires_at_ns: i64,
}

/// `coordinator.lease-released` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseReleased {
    /// Who held it.
    pub holder: String,
    /// The epoch it ends.
    pub epoch: u64,
    /// When it was released (the holder's clock), ns since the epoch.
    pub at_ns: i64,
}

/// A workgroup's lease as its stream records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorLease {
    /// The current epoch's lease (`None`: never taken).
    pub current: Option<LeaseSet>,
    /// Whether the current epoch's holder released it (it is free whatever the clock says).
    pub released: bool,
    /// The lease stream's version folded so far.
    pub version: u64,
}

/// A lease this coordinator holds: what its next fenced append expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The workgroup.
    pub workgroup: String,
    /// This coordinator.
    pub holder: String,
    /// The epoch it holds.
    pub epoch: u64,
    /// The lease stream's version after its own last append.
    pub version: u64,
    /// When it last took or renewed the lease, ns.
    pub at_ns: i64,
    /// When the lease ends unless renewed, ns.
    pub expires_at_ns: i64,
}

/// Why a lease was refused; each message names the workgroup, the rule and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// This coordinator's lease was taken over: its append was refused.
    #[error(
        "[STRATA-E2311] workgroup {workgroup}: this coordinator's lease (epoch {epoch}) was taken over by {by} (epoch {by_epoch}); its append was refused and nothing of it was recorded; stop this run, the workgroup carries on under {by}"
    )]
    Fenced {
        /// The workgroup.
        workgroup: String,
        /// The epoch this coordinator held.
        epoch: u64,
        /// The holder now.
        by: String,
        /// Its epoch.
        by_epoch: u64,
    },
    /// Another coordinator holds a live lease.
    #[error(
        "[STRATA-E2312] workgroup {workgroup} is coordinated by {holder} (lease epoch {epoch}) until {until}; stop that run, or wait until its lease ends and run `strata run --resume {workgroup}` again"
    )]
    HeldByOther {
        /// The workgroup.
        workgroup: String,
        /// Who holds it.
        holder: String,
        /// Its epoch.
        epoch: u64,
        /// When it ends (RFC 3339).
        until: String,
    },
    /// A lease time outside the bounds.
    #[error(
        "[STRATA-E2314] a coordinator lease of {ms} ms is outside {LEASE_MS_MIN}..={LEASE_MS_MAX} ms; set STRATA_COORDINATOR_LEASE_MS within it (or unset it for {LEASE_MS_DEFAULT} ms)"
    )]
    Duration {
        /// What was asked.
        ms: u64,
    },
    /// A holder name that is empty, too long or has control characters.
    #[error(
        "[STRATA-E2316] coordinator holder name {holder:?}: 1 to {HOLDER_BYTES_MAX} bytes without control characters; report a bug"
    )]
    Holder {
        /// The name.
        holder: String,
    },
    /// A payload could not be encoded (a bug).
    #[error("[STRATA-E1705] internal error building a workgroup event: {0}; report a bug")]
    Encode(String),
    /// The lease stream holds something a coordinator never writes.
    #[error(
        "[STRATA-E2315] the lease stream of workgroup {workgroup}, version {version}: {detail}; the journal was not written by strata's coordinators (run `strata journal verify`)"
    )]
    Corrupt {
        /// The workgroup.
        workgroup: String,
        /// The stream version of the bad event.
        version: u64,
        /// What is wrong.
        detail: String,
    },
}

impl CoordinatorLease {
    /// Folds the lease stream's event at `version` (of type `event_type` with `payload`).
    pub fn apply(&mut self, workgroup: &str, event_type: &str, payload: &[u8], version: u64) -> Result<(), LeaseError> {
        let bad = |detail: String| LeaseError::Corrupt { workgroup: workgroup.to_owned(), version, detail };
        if event_type == RELEASED {
            let x: LeaseReleased = serde_json::from_slice(payload).map_err(|e| bad(format!("{event_type}: {e}")))?;
            match &self.current {
                Some(p) if p.holder == x.holder && p.epoch == x.epoch && !self.released => {}
                _ => return Err(bad(format!("released by {} (epoch {}), who does not hold it", x.holder, x.epoch))),
            }
            self.released = true;
            self.version = version;
            return Ok(());
        }
        let x: LeaseSet = serde_json::from_slice(payload).map_err(|e| bad(format!("{event_type}: {e}")))?;
        if x.expires_at_ns <= x.at_ns {
            return Err(bad(format!("epoch {} ends before it starts", x.epoch)));
        }
        match (event_type, &self.current) {
            (TAKEN, prior) => {
                let next = prior.as_ref().map_or(1, |p| p.epoch + 1);
                if x.epoch != next {
                    return Err(bad(format!("lease taken as epoch {}, the next is {next}", x.epoch)));
                }
                let ran = |p: &&LeaseSet| p.holder != x.holder && p.expires_at_ns > x.at_ns && !self.released;
                if let Some(p) = prior.as_ref().filter(ran) {
                    return Err(bad(format!("taken by {} while {}'s epoch {} still ran", x.holder, p.holder, p.epoch)));
                }
            }
            (RENEWED, Some(p)) if p.holder == x.holder && p.epoch == x.epoch && !self.released => {}
            (RENEWED, _) => {
                return Err(bad(format!("renewed by {} (epoch {}), who does not hold it", x.holder, x.epoch)));
            }
            (other, _) => return Err(bad(format!("event type {other} on a lease stream"))),
        }
        self.current = Some(x);
        self.released = false;
        self.version = version;
        Ok(())
    }

    /// Whether the lease is live at `now_ns` (taken, not released, not ended).
    pub fn live(&self, now_ns: i64) -> bool {
        !self.released && self.current.as_ref().is_some_and(|l| l.expires_at_ns > now_ns)
    }
}

fn check(holder: &str, lease_ms: u64) -> Result<i64, LeaseError> {
    if holder.is_empty() || holder.len() > HOLDER_BYTES_MAX || holder.chars().any(char::is_control) {
        return Err(LeaseError::Holder { holder: holder.chars().take(HOLDER_BYTES_MAX).collect() });
    }
    if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
        return Err(LeaseError::Duration { ms: lease_ms });
    }
    Ok(i64::try_from(lease_ms).unwrap_or(i64::MAX).saturating_mul(1_000_000))
}

fn event(t: &str, x: &impl Serialize, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<EventData, LeaseError> {
    crate::ce::ledger::event(ids, clock, t, x).map_err(|e| LeaseError::Encode(e.detail))
}

/// Takes `workgroup`'s lease for `holder` at `now_ns` for `lease_ms`: a new epoch when there
/// is no lease or it ended, a renewal when `holder` holds it already; refused while another
/// holder's lease lives. The append expects the stream version `state` was folded at, so two
/// coordinators taking over at once cannot both win; what it returns is held once appended.
pub fn take(
    state: &CoordinatorLease,
    workgroup: &str,
    holder: &str,
    now_ns: i64,
    lease_ms: u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<(Held, StreamAppend), LeaseError> {
    let ttl = check(holder, lease_ms)?;
    let (t, epoch) = match &state.current {
        Some(l) if state.released => (TAKEN, l.epoch + 1),
        Some(l) if l.holder == holder && l.expires_at_ns > now_ns => (RENEWED, l.epoch),
        Some(l) if l.expires_at_ns > now_ns => {
            return Err(LeaseError::HeldByOther {
                workgroup: workgroup.to_owned(),
                holder: l.holder.clone(),
                epoch: l.epoch,
                until: format_rfc3339(l.expires_at_ns),
            });
        }
        Some(l) => (TAKEN, l.epoch + 1),
        None => (TAKEN, 1),
    };
    let x = LeaseSet { holder: holder.to_owned(), epoch, at_ns: now_ns, expires_at_ns: now_ns.saturating_add(ttl) };
    let held = Held {
        workgroup: workgroup.to_owned(),
        holder: holder.to_owned(),
        epoch,
        version: state.version + 1,
        at_ns: now_ns,
        expires_at_ns: x.expires_at_ns,
    };
    let append = StreamAppend {
        stream: stream(workgroup),
        expected: ExpectedVersion::Exact(state.version),
        events: vec![event(t, &x, ids, clock)?],
    };
    Ok((held, append))
}

/// The renewal that fences one append of `held`'s holder: the lease moved on to `now_ns` plus
/// `lease_ms`, expecting the version the holder last wrote. Add it to the append it fences; the
/// `Held` it returns is what the holder holds once that append is acknowledged.
pub fn renew(
    held: &Held,
    now_ns: i64,
    lease_ms: u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<(Held, StreamAppend), LeaseError> {
    let ttl = check(&held.holder, lease_ms)?;
    let x = LeaseSet {
        holder: held.holder.clone(),
        epoch: held.epoch,
        at_ns: now_ns,
        expires_at_ns: now_ns.saturating_add(ttl).max(held.expires_at_ns),
    };
    let next = Held { version: held.version + 1, at_ns: now_ns, expires_at_ns: x.expires_at_ns, ..held.clone() };
    let append = StreamAppend {
        stream: stream(&held.workgroup),
        expected: ExpectedVersion::Exact(held.version),
        events: vec![event(RENEWED, &x, ids, clock)?],
    };
    Ok((next, append))
}

/// The release of `held` at `now_ns`, when its run ended cleanly: expecting the version the
/// holder last wrote, so a holder that was taken over releases nothing (the append conflicts).
pub fn release(held: &Held, now_ns: i64, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<StreamAppend, LeaseError> {
    let x = LeaseReleased { holder: held.holder.clone(), epoch: held.epoch, at_ns: now_ns };
    let events = vec![event(RELEASED, &x, ids, clock)?];
    Ok(StreamAppend { stream: stream(&held.workgroup), expected: ExpectedVersion::Exact(held.version), events })
}

/// Whether `held` was taken over, given the lease stream as folded now: the typed refusal when
/// someone else wrote the stream since the holder's last append.
pub fn fenced(held: &Held, state: &CoordinatorLease) -> Option<LeaseError> {
    if state.version == held.version {
        return None;
    }
    let (by, by_epoch) = state.current.as_ref().map_or_else(|| (String::new(), 0), |l| (l.holder.clone(), l.epoch));
    Some(LeaseError::Fenced { workgroup: held.workgroup.clone(), epoch: held.epoch, by, by_epoch })
}

/// Whether `held` is due a renewal at `now_ns`: a third of the lease has passed since the last.
pub fn due(held: &Held, now_ns: i64) -> bool {
    let span = held.expires_at_ns.saturating_sub(held.at_ns);
    now_ns >= held.at_ns.saturating_add(span / 3)
}

#[cfg(test)]
mod tests {
    use strata_journal::Journal;

    use super::*;
    use crate::ports::{CountingIds, FixedClock};

    const MS: i64 = 1_000_000;

    /// Folds the lease stream of `wg` from `journal`.
    fn folded(journal: &Journal, wg: &str) -> Result<CoordinatorLease, LeaseError> {
        let mut l = CoordinatorLease::default();
        for e in journal.read_stream(&stream(wg), 1, 1000).expect("read") {
            l.apply(wg, &e.event_type, &e.payload, e.version)?;
        }
        Ok(l)
    }

    #[test]
    fn a_takeover_after_the_recorded_end_fences_every_later_append_of_the_old_holder() {
        let j = Journal::in_memory("lease").expect("journal");
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let at = 1_000 * MS;
        let (a, append) = take(&folded(&j, "wg").expect("fold"), "wg", "A", at, 1_000, &mut ids, &clock).expect("A");
        j.append_multi_blocking(vec![append]).expect("append").expect("A takes epoch 1");
        assert_eq!((a.epoch, a.version), (1, 1));
        // A renews with its appends; the renewal is what fences them.
        let (a, append) = renew(&a, at + 500 * MS, 1_000, &mut ids, &clock).expect("renew");
        j.append_multi_blocking(vec![append]).expect("append").expect("A renews");
        assert_eq!(fenced(&a, &folded(&j, "wg").expect("fold")), None);

        // B is refused while A's lease lives, by the time recorded in the journal.
        let state = folded(&j, "wg").expect("fold");
        let live = take(&state, "wg", "B", at + 1_499 * MS, 1_000, &mut ids, &clock).expect_err("A's lease lives");
        assert!(live.to_string().starts_with("[STRATA-E2312] workgroup wg is coordinated by A"), "{live}");
        // Once it ended, B takes epoch 2.
        let (b, append) = take(&state, "wg", "B", at + 1_500 * MS, 1_000, &mut ids, &clock).expect("B takes over");
        j.append_multi_blocking(vec![append]).expect("append").expect("B takes epoch 2");
        assert_eq!((b.epoch, b.version), (2, 3));

        // A's next append under epoch 1 conflicts on the lease stream and records nothing.
        let head = j.head().seq;
        let (_, stale) = renew(&a, at + 1_600 * MS, 1_000, &mut ids, &clock).expect("renewal");
        let work = StreamAppend {
            stream: "workgroup/wg".into(),
            expected: ExpectedVersion::Any,
            events: vec![event(RENEWED, &state.current.clone().expect("lease"), &mut ids, &clock).expect("event")],
        };
        let conflict = j.append_multi_blocking(vec![stale, work]).expect("append").expect_err("fenced");
        assert_eq!(conflict.stream, stream("wg"));
        assert_eq!(j.head().seq, head, "a refused append records nothing");
        let err = fenced(&a, &folded(&j, "wg").expect("fold")).expect("A is fenced");
        assert_eq!(err, LeaseError::Fenced { workgroup: "wg".into(), epoch: 1, by: "B".into(), by_epoch: 2 });
        assert!(err.to_string().starts_with("[STRATA-E2311]"), "{err}");

        // Two takers of an ended lease at once: one wins, the other conflicts.
        let state = folded(&j, "wg").expect("fold");
        let late = at + 10_000 * MS;
        let (_, c) = take(&state, "wg", "C", late, 1_000, &mut ids, &clock).expect("C");
        let (_, d) = take(&state, "wg", "D", late, 1_000, &mut ids, &clock).expect("D");
        j.append_multi_blocking(vec![c]).expect("append").expect("C wins");
        assert!(j.append_multi_blocking(vec![d]).expect("append").is_err(), "D conflicts");
        assert_eq!(folded(&j, "wg").expect("fold").current.map(|l| (l.holder, l.epoch)), Some(("C".into(), 3)));
    }

    #[test]
    fn a_released_lease_is_taken_at_once_and_an_unreleased_one_only_at_its_recorded_end() {
        let j = Journal::in_memory("lease").expect("journal");
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let at = 1_000 * MS;
        let (a, append) = take(&folded(&j, "wg").expect("fold"), "wg", "A", at, 60_000, &mut ids, &clock).expect("A");
        j.append_multi_blocking(vec![append]).expect("append").expect("A takes epoch 1");
        // A's run ends cleanly: released, B takes the next epoch long before A's recorded end,
        // even with a clock behind A's.
        j.append_multi_blocking(vec![release(&a, at + MS, &mut ids, &clock).expect("release")])
            .expect("append")
            .expect("A releases");
        let state = folded(&j, "wg").expect("fold");
        assert!(state.released && !state.live(at + 2 * MS));
        let (b, append) = take(&state, "wg", "B", at - 5 * MS, 60_000, &mut ids, &clock).expect("taken at once");
        j.append_multi_blocking(vec![append]).expect("append").expect("B takes epoch 2");
        assert_eq!(b.epoch, 2);
        let state = folded(&j, "wg").expect("fold");
        assert!(!state.released && state.live(at));
        // A released holder renews and releases nothing more: its appends conflict.
        assert!(
            j.append_multi_blocking(vec![release(&a, at + 3 * MS, &mut ids, &clock).expect("r")])
                .expect("append")
                .is_err()
        );
        // B crashes (no release): C is refused until B's recorded end.
        let refused =
            take(&state, "wg", "C", b.expires_at_ns - 1, 1_000, &mut ids, &clock).expect_err("B's lease lives");
        assert!(refused.to_string().starts_with("[STRATA-E2312]"), "{refused}");
        assert!(take(&state, "wg", "C", b.expires_at_ns, 1_000, &mut ids, &clock).is_ok());
        // The fold refuses a release by anyone but the holder, twice, or a renewal after it.
        let rel = |holder: &str, epoch| {
            serde_json::to_vec(&LeaseReleased { holder: holder.into(), epoch, at_ns: at }).expect("json")
        };
        let renewal = serde_json::to_vec(&LeaseSet { holder: "B".into(), epoch: 2, at_ns: at, expires_at_ns: at + MS })
            .expect("json");
        assert!(state.clone().apply("wg", RELEASED, &rel("A", 1), 4).is_err(), "A no longer holds it");
        let mut gone = state.clone();
        gone.apply("wg", RELEASED, &rel("B", 2), 4).expect("B releases");
        assert!(gone.clone().apply("wg", RELEASED, &rel("B", 2), 5).is_err(), "released twice");
        let late = gone.apply("wg", RENEWED, &renewal, 5).expect_err("renewed after its release");
        assert!(late.to_string().starts_with("[STRATA-E2315]"), "{late}");
    }

    #[test]
    fn the_fold_refuses_a_takeover_of_a_live_lease_and_a_renewal_by_another_holder() {
        let set = |holder: &str, epoch, at_ns, expires_at_ns| {
            serde_json::to_vec(&LeaseSet { holder: holder.into(), epoch, at_ns, expires_at_ns }).expect("json")
        };
        let mut l = CoordinatorLease::default();
        l.apply("wg", TAKEN, &set("A", 1, 0, 10), 1).expect("first epoch");
        let early = l.clone().apply("wg", TAKEN, &set("B", 2, 5, 20), 2).expect_err("A's lease lives at 5");
        assert!(early.to_string().contains("while A's epoch 1 still ran"), "{early}");
        let skipped = l.clone().apply("wg", TAKEN, &set("B", 3, 10, 20), 2).expect_err("epochs are consecutive");
        assert!(skipped.to_string().contains("the next is 2"), "{skipped}");
        let other = l.clone().apply("wg", RENEWED, &set("B", 1, 5, 20), 2).expect_err("only the holder renews");
        assert!(other.to_string().starts_with("[STRATA-E2315]"), "{other}");
        l.apply("wg", TAKEN, &set("B", 2, 10, 20), 2).expect("taken at the end");
        assert!(l.live(19) && !l.live(20));
        assert_eq!(check("", 1_000), Err(LeaseError::Holder { holder: String::new() }));
        assert_eq!(check("A", 99), Err(LeaseError::Duration { ms: 99 }));
        let held =
            Held { workgroup: "wg".into(), holder: "A".into(), epoch: 1, version: 1, at_ns: 0, expires_at_ns: 30 };
        assert!(!due(&held, 9) && due(&held, 10));
    }
}
