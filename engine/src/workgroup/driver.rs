//! The coordinator's loop, written once: `strata run` (the adapters' coordinator, with git
//! worktrees, prompt files and provider processes behind it) and the `coordinator-faults`
//! simulation (simulated time, a crash disk, the seeded provider model) both execute [`run`].
//! What differs between them is only what the [`Coordinate`] methods do at the edges.
//!
//! The loop keeps no state of its own between rounds: each round starts from the workgroup as
//! folded from the journal. A coordinator that stops (a crash) therefore continues by calling
//! [`run`] again on the state rebuilt from the journal, which is what `strata run --resume` does.

use super::caps::Paused;
use super::decide;
use super::events::Held;
use super::state::{WorkerEnd, Workgroup};
use super::verify::{SuiteDue, suite_due};

/// What the loop needs from a coordinator.
pub trait Coordinate {
    /// Why the loop stopped early.
    type Error;

    /// The workgroup as folded now.
    fn group(&self) -> Result<&Workgroup, Self::Error>;

    /// The coordinator's clock, nanoseconds since the Unix epoch.
    fn now_ns(&self) -> i64;

    /// Records `held`, in one append.
    fn hold(&mut self, held: &[Held]) -> Result<(), Self::Error>;

    /// Routes, claims and records the dispatch of `task` (or holds it); its worker starts
    /// elsewhere, from the recorded dispatch.
    fn dispatch(&mut self, task: &str) -> Result<(), Self::Error>;

    /// Attempts dispatched and not yet judged.
    fn in_flight(&self) -> usize;

    /// Waits until the end of at least one attempt in flight is recorded, and returns those
    /// ends; or until `wake_at_ns` (a retry's backoff ran out), possibly with none.
    fn wait(&mut self, wake_at_ns: Option<i64>) -> Result<Vec<(String, WorkerEnd)>, Self::Error>;

    /// Judges the recorded end of `task`'s attempt (completed, or failed and maybe retried
    /// after its backoff) and releases what it claimed.
    fn finish(&mut self, task: &str, end: WorkerEnd) -> Result<(), Self::Error>;

    /// Records the workgroup's end once every task ended.
    fn finished(&mut self) -> Result<(), Self::Error>;

    /// Records that a safety boundary paused the workgroup ([`decide::paused`]).
    fn pause(&mut self, paused: &Paused) -> Result<(), Self::Error>;

    /// Assembles and verifies the prompt of every task of `phase` and records the result
    /// ([`decide::phase_planned`]), before the phase's first worker: the planning gate.
    fn plan_phase(&mut self, phase: &'static str) -> Result<(), Self::Error>;

    /// Runs the plan's consolidated suite on the integration branch and records its result
    /// ([`decide::suite_checked`]), which the review gate then reads.
    fn suite(&mut self, due: &SuiteDue) -> Result<(), Self::Error>;

    /// The error for a round that recorded nothing although it had tasks to dispatch or hold
    /// (an edge that neither dispatched nor held a task: a bug, which would loop for ever).
    fn stalled(&self, detail: String) -> Self::Error;
}

/// Runs the workgroup until every task ended: holds what can never run, dispatches what is
/// ready up to the free workers, waits for ends (or a backoff), judges them, and so on. A
/// workgroup that reaches a safety boundary (its total cap; a judged end that pauses it) is
/// paused: nothing new is dispatched, the attempts in flight are waited for and judged, and the
/// loop returns with the workgroup paused and not finished.
pub fn run<C: Coordinate>(c: &mut C) -> Result<(), C::Error> {
    loop {
        if let Some(p) = decide::pause_needed(c.group()?) {
            c.pause(&p)?;
        }
        if c.group()?.paused.is_some() {
            if c.in_flight() == 0 {
                return Ok(());
            }
            for (task, end) in c.wait(None)? {
                c.finish(&task, end)?;
            }
            continue;
        }
        // The consolidated suite before a review phase starts: the review gate reads its result.
        if let Some(due) = suite_due(c.group()?, false) {
            c.suite(&due)?;
            continue;
        }
        let version = c.group()?.version;
        let next = decide::next(c.group()?, c.now_ns());
        // The planning gate: a phase's prompts are all assembled and verified before its first
        // worker is dispatched.
        let unplanned = super::gates::unplanned_phases(c.group()?, &next.dispatch);
        if !unplanned.is_empty() {
            for phase in unplanned {
                c.plan_phase(phase)?;
            }
            continue;
        }
        if !next.hold.is_empty() {
            c.hold(&next.hold)?;
        }
        for task in &next.dispatch {
            c.dispatch(task)?;
        }
        if c.in_flight() == 0 {
            if !next.dispatch.is_empty() || !next.hold.is_empty() {
                if c.group()?.version == version {
                    let holds: Vec<&str> = next.hold.iter().map(|h| h.task.as_str()).collect();
                    return Err(c.stalled(format!(
                        "a round to dispatch [{}] and hold [{}] recorded nothing",
                        next.dispatch.join(", "),
                        holds.join(", ")
                    )));
                }
                // Those dispatches were held, or the holds freed the schedule: decide again.
                continue;
            }
            if next.wake_at_ns.is_none() {
                // Nothing left to run: changes that landed after the suite last ran (a fix
                // round after the review) are checked before the end is recorded.
                if let Some(due) = suite_due(c.group()?, true) {
                    c.suite(&due)?;
                    continue;
                }
                break;
            }
        }
        for (task, end) in c.wait(next.wake_at_ns)? {
            c.finish(&task, end)?;
        }
    }
    c.finished()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;
    use strata_journal::{Journal, StreamAppend};

    use super::*;
    use crate::ports::{CountingIds, FixedClock};
    use crate::workgroup::events::{Dispatched, PromptRef, WorkerEnded, WorkerStarted};
    use crate::workgroup::plan::{Plan, check};
    use crate::workgroup::state::{Status, Workgroups};

    const MS: i64 = 1_000_000;

    /// A coordinator whose workers end at once, failing the attempts in `failing`; it stops
    /// (as a crash would) after `stop_after` judged ends.
    struct Fake {
        journal: Journal,
        groups: Workgroups,
        ids: CountingIds,
        now: i64,
        failing: BTreeSet<(&'static str, u32)>,
        dispatched: Vec<(String, u32, i64)>,
        waits: Vec<Option<i64>>,
        stop_after: Option<usize>,
        judged: usize,
        /// Dispatching records nothing (a broken edge).
        inert: bool,
    }

    impl Fake {
        fn new(failing: &[(&'static str, u32)]) -> Fake {
            let plan: Plan = serde_json::from_value(json!({
                "workgroup": "wg", "pipeline": "light", "retries": 1, "retry_backoff_ms": 1_000,
                "task": [
                    {"id": "a", "role": "backend-builder", "objective": "A.", "owns": ["src/a/"]},
                    {"id": "b", "role": "backend-builder", "objective": "B.", "owns": ["src/b/"], "after": ["a"]},
                ],
            }))
            .expect("plan");
            let mut f = Fake {
                journal: Journal::in_memory("driver").expect("journal"),
                groups: Workgroups::default(),
                ids: CountingIds::new(1),
                now: 1_000 * MS,
                failing: failing.iter().copied().collect(),
                dispatched: Vec::new(),
                waits: Vec::new(),
                stop_after: None,
                judged: 0,
                inert: false,
            };
            let planned = decide::plan(&f.groups, check(&plan).expect("checks"), 1, &mut f.ids, &FixedClock(f.now))
                .expect("plan");
            f.commit(planned);
            f
        }

        fn commit(&mut self, append: StreamAppend) {
            self.journal.append_multi_blocking(vec![append]).expect("append").expect("no conflict");
            strata_journal::projection::catch_up_one(&mut self.groups, &self.journal).expect("fold");
        }

        fn g(&self) -> &Workgroup {
            self.groups.get("wg").expect("planned")
        }
    }

    impl Coordinate for Fake {
        type Error = String;

        fn group(&self) -> Result<&Workgroup, String> {
            Ok(self.g())
        }

        fn now_ns(&self) -> i64 {
            self.now
        }

        fn hold(&mut self, held: &[Held]) -> Result<(), String> {
            Err(format!("nothing should be held: {held:?}"))
        }

        fn pause(&mut self, paused: &Paused) -> Result<(), String> {
            Err(format!("nothing should pause: {paused:?}"))
        }

        fn plan_phase(&mut self, phase: &'static str) -> Result<(), String> {
            // Every prompt of the phase, as its dispatch will state it.
            let g = self.g();
            let prompts = g
                .plan
                .tasks
                .iter()
                .filter(|t| crate::workgroup::plan::PHASES[t.phase] == phase)
                .map(|t| crate::workgroup::gates::PlannedPrompt {
                    task: t.id().to_owned(),
                    prompt: PromptRef {
                        prompt_task: format!("wg.{}", t.id()),
                        prompt_hash: "sha256:00".into(),
                        tokens: 1,
                    },
                    position: 0,
                })
                .collect();
            let x = crate::workgroup::gates::PhasePlanned { phase: phase.to_owned(), prompts, problems: Vec::new() };
            let g = self.groups.get("wg").ok_or("not planned")?;
            let append =
                decide::phase_planned(g, &x, &mut self.ids, &FixedClock(self.now)).map_err(|e| e.to_string())?;
            self.commit(append);
            Ok(())
        }

        fn suite(&mut self, due: &SuiteDue) -> Result<(), String> {
            Err(format!("these plans have no suite: {due:?}"))
        }

        fn dispatch(&mut self, task: &str) -> Result<(), String> {
            if self.inert {
                return Ok(());
            }
            let attempt = self.g().tasks[task].attempts + 1;
            let d = Dispatched {
                task: task.into(),
                attempt,
                lineage_id: format!("wg.{task}"),
                provider: "sim".into(),
                routed: crate::ce::router::Mode::FreshCapsule,
                runs_as: crate::ce::router::Mode::FreshCapsule,
                reason_codes: Vec::new(),
                prompt: PromptRef { prompt_task: format!("wg.{task}"), prompt_hash: "sha256:00".into(), tokens: 1 },
                baseline_tokens: 0,
                from_session: None,
                capsule_hash: None,
                lineage_check: None,
                gate: None,
                evidence: None,
                caps: Default::default(),
                fallback_after: None,
                without_knowledge: false,
                model: None,
            };
            let clock = FixedClock(self.now);
            let g = self.groups.get("wg").ok_or("not planned")?;
            let e = decide::dispatched(g, &d, &mut self.ids, &clock).map_err(|e| e.to_string())?;
            let append = decide::append(g, vec![e]);
            self.commit(append);
            self.dispatched.push((task.to_owned(), attempt, self.now));
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.g().count(Status::Dispatched) + self.g().count(Status::Running)
        }

        fn wait(&mut self, wake_at_ns: Option<i64>) -> Result<Vec<(String, WorkerEnd)>, String> {
            self.waits.push(wake_at_ns);
            self.now = wake_at_ns.map_or(self.now + MS, |at| at.max(self.now + MS));
            let clock = FixedClock(self.now);
            let open: Vec<(String, u32)> = self
                .g()
                .tasks
                .iter()
                .filter(|(_, t)| t.status == Status::Dispatched)
                .map(|(id, t)| (id.clone(), t.attempts))
                .collect();
            for (task, attempt) in open {
                let session = format!("s-{task}-{attempt}");
                let s = WorkerStarted {
                    task: task.clone(),
                    attempt,
                    session_id: session.clone(),
                    provider: "sim".into(),
                    synthetic: true,
                    pid: None,
                };
                let started = decide::started("wg", &s, &mut self.ids, &clock).map_err(|e| e.to_string())?;
                self.commit(started);
                let fails = self.failing.contains(&(task.as_str(), attempt));
                let e = WorkerEnded {
                    task: task.clone(),
                    attempt,
                    session_id: Some(session),
                    summary: "done".into(),
                    usage: Default::default(),
                    accounting: None,
                    synthetic: true,
                    ..WorkerEnded::default()
                };
                let ended = decide::worker_ended("wg", &e, !fails, "", true, &mut self.ids, &clock)
                    .map_err(|e| e.to_string())?;
                self.commit(ended);
            }
            Ok(self
                .g()
                .tasks
                .iter()
                .filter(|(_, t)| t.status == Status::Running)
                .filter_map(|(id, t)| Some((id.clone(), t.worker_end.clone()?)))
                .collect())
        }

        fn finish(&mut self, task: &str, end: WorkerEnd) -> Result<(), String> {
            if self.stop_after.is_some_and(|n| self.judged >= n) {
                return Err("stopped".into());
            }
            self.judged += 1;
            let clock = FixedClock(self.now);
            let g = self.groups.get("wg").ok_or("not planned")?;
            let closed = crate::workgroup::step::close(
                g,
                &crate::ce::ledger::Ledger::default(),
                crate::workgroup::step::End {
                    task,
                    attempt: end.ended.attempt,
                    ended: &end.ended,
                    failure: (!end.succeeded).then(|| "failed".to_owned()),
                    retryable: true,
                    files: Vec::new(),
                    commit: None,
                    handoff: None,
                    keeps_warm: false,
                    now_ns: self.now,
                    warm_minutes: 1,
                    failed_by: Default::default(),
                },
                |ms| ms,
                &mut self.ids,
                &clock,
            )
            .map_err(|e| e.to_string())?;
            let append = decide::append(g, vec![closed.task_event]);
            self.commit(append);
            Ok(())
        }

        fn stalled(&self, detail: String) -> String {
            detail
        }

        fn finished(&mut self) -> Result<(), String> {
            let g = self.groups.get("wg").ok_or("not planned")?;
            if let Some(append) = decide::finish(g, &mut self.ids, &FixedClock(self.now)).map_err(|e| e.to_string())? {
                self.commit(append);
            }
            Ok(())
        }
    }

    #[test]
    fn the_loop_waits_out_a_retry_backoff_and_runs_dependants_after() {
        let mut f = Fake::new(&[("a", 1)]);
        run(&mut f).expect("runs");
        assert!(f.g().finished);
        assert_eq!((f.g().tasks["a"].status, f.g().tasks["b"].status), (Status::Completed, Status::Completed));
        let order: Vec<(&str, u32)> = f.dispatched.iter().map(|(t, a, _)| (t.as_str(), *a)).collect();
        assert_eq!(order, [("a", 1), ("a", 2), ("b", 1)]);
        // a failed at 1001 ms; with nothing in flight the loop waited for the 1 s backoff, then
        // for a's second attempt, then for b.
        assert_eq!(f.waits, [None, Some(2_001 * MS), None, None]);
        assert_eq!(f.dispatched[1].2, 2_001 * MS, "attempt 2 no sooner than its backoff allowed");
    }

    #[test]
    fn a_stopped_loop_continues_from_the_folded_state_without_rerunning_what_completed() {
        let mut f = Fake::new(&[]);
        f.stop_after = Some(1);
        assert_eq!(run(&mut f), Err("stopped".to_owned()), "stops while judging b's end");
        assert_eq!(f.g().tasks["a"].status, Status::Completed);
        assert_eq!(f.g().tasks["b"].status, Status::Running, "b's end is recorded, not judged");
        f.stop_after = None;
        run(&mut f).expect("runs again");
        assert!(f.g().finished);
        let order: Vec<(&str, u32)> = f.dispatched.iter().map(|(t, a, _)| (t.as_str(), *a)).collect();
        assert_eq!(order, [("a", 1), ("b", 1)], "nothing dispatched twice");
    }

    #[test]
    fn a_round_that_records_nothing_stops_the_loop_instead_of_spinning() {
        let mut f = Fake::new(&[]);
        f.inert = true;
        let err = run(&mut f).expect_err("stalls");
        assert!(err.contains("a round to dispatch [a] and hold [] recorded nothing"), "{err}");
    }
}
