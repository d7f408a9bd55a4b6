//! Scenario `plan-run`: any plan run fault-free in simulated time by the engine's coordinator
//! loop (`workgroup::driver::run`) with the simulated provider's seeded model, deciding every
//! dispatch with `dispatch::route` and `Cleared::brief` and judging every end with
//! `judge::judge`, the functions `strata run` calls. It exists to show that what the simulation
//! proves is what `strata run` does: run the same plan with the same seed through both, and the
//! decision events agree (the equivalence test in `tests/it/simulation.rs`).
//!
//! The edges here are simulated: the runner starts each dispatched attempt at once, its worker
//! ends when the model's latency has passed (ties in task order), and the changes it made are the
//! ones the simulated provider writes (`sim::changed_files`), observed as a diff would observe
//! them. What a simulation cannot know of the world comes from a [`Briefing`]: each attempt's
//! assembled prompt and the facts its capsule is drafted from (the knowledge digest, the
//! integration branch's tip), which `strata run` takes from its knowledge base and repository.

use std::collections::BTreeMap;

use strata_engine::ce::ledger::Ledger;
use strata_engine::ce::router::Mode;
use strata_engine::ports::Clock as _;
use strata_engine::telemetry::events::AccountingSource;
use strata_engine::telemetry::state::Telemetry;
use strata_engine::workgroup::caps::{Capped, Paused};
use strata_engine::workgroup::decide::EndRecord;
use strata_engine::workgroup::dispatch::{self, Brief, CapsuleFacts, Planned, Routing};
use strata_engine::workgroup::events::{Held, RunStart, WorkerEnded, WorkerStarted};
use strata_engine::workgroup::gates::BuildFacts;
use strata_engine::workgroup::gates::PhasePlanned;
use strata_engine::workgroup::judge::{self, Changes, Observed};
use strata_engine::workgroup::plan::{Checked, Task};
use strata_engine::workgroup::sim::{self, Model};
use strata_engine::workgroup::state::{Status, WorkerEnd, Workgroup, Workgroups};
use strata_engine::workgroup::verify::{self, Check, SuiteChecked, SuiteDue};
use strata_engine::workgroup::{decide, driver, lineage_id};
use strata_journal::projection::Projection;
use strata_journal::{Journal, StreamAppend};

use crate::{SeededIds, SimClock};

/// Where an attempt's prompt and capsule facts come from: the edge's knowledge base and
/// repository in `strata run`, whatever the caller supplies here.
pub trait Briefing {
    /// The assembled prompt and capsule facts of `task`'s attempt `attempt`, run as `lineage`.
    fn brief(&mut self, task: &Task, attempt: u32, lineage: &str) -> Result<Brief, String>;

    /// The capsule facts of the completed task `prior` (run as `lineage`) as they stand when
    /// `dispatching` (a task and its attempt) is dispatched to continue its session.
    fn facts_now(&mut self, dispatching: (&str, u32), prior: &Task, lineage: &str) -> Result<CapsuleFacts, String>;

    /// What the knowledge base says of the change request `task`'s attempt `attempt`
    /// implements, for the build gate (`None`: it implements none, or nothing is known).
    fn build_facts(&mut self, task: &Task, attempt: u32) -> Option<BuildFacts>;

    /// What the plan's consolidated suite answers when `due` (the simulation runs no command:
    /// the world says how each check ended).
    fn suite(&mut self, due: &SuiteDue) -> Result<Vec<Check>, String>;

    /// How `task`'s `verify` commands ended after its attempt `attempt` succeeded (asked only of
    /// a task that declares some, for a turn that succeeded under its caps, as `strata run`
    /// runs them).
    fn checks(&mut self, task: &Task, attempt: u32) -> Result<Vec<Check>, String>;

    /// What assembling and verifying the prompts of `phase`'s tasks gave, before its first
    /// worker (the planning gate).
    fn planned(&mut self, phase: &str) -> Result<PhasePlanned, String>;
}

/// A plan run to simulate.
pub struct Setup<'a> {
    /// The checked plan.
    pub plan: Checked,
    /// The simulated provider's seed (recorded with the plan).
    pub seed: u64,
    /// What the run starts on (provider, repository, base), as `strata run` records it.
    pub started: RunStart,
    /// The context-efficiency policy the run works under, as `strata run` records it.
    pub policy: strata_engine::workgroup::policy::Policy,
    /// What a write outside ownership does: `flag` or `stop`.
    pub on_violation: &'a str,
    /// Whether writers have worktrees (a repository): their changes are observed as a diff.
    pub worktrees: bool,
    /// The clock's start, nanoseconds since the Unix epoch.
    pub start_ns: i64,
}

/// Runs `setup` to its end and returns the journal it recorded.
pub fn run(setup: Setup<'_>, briefing: &mut dyn Briefing) -> Result<Journal, String> {
    let journal = Journal::in_memory("strata.sim/plan-run").map_err(|e| e.to_string())?;
    let wg = setup.plan.workgroup.clone();
    let mut r = PlanRun {
        journal,
        wg,
        groups: Workgroups::default(),
        ledger: Ledger::default(),
        telemetry: Telemetry::default(),
        cursor: 0,
        ids: SeededIds::new(setup.seed),
        clock: SimClock::new(setup.start_ns),
        model: Model { seed: setup.seed },
        running: BTreeMap::new(),
        briefing,
        on_violation: setup.on_violation,
        worktrees: setup.worktrees,
    };
    let append =
        decide::plan_started(&r.groups, setup.plan, setup.seed, setup.started, &setup.policy, &mut r.ids, &r.clock)
            .map_err(|e| e.to_string())?;
    r.commit(vec![append])?;
    driver::run(&mut r)?;
    Ok(r.journal)
}

/// A worker in flight: its attempt, session, turn under its caps and input bytes.
type Running = (u32, String, sim::Capped, Option<u64>);

struct PlanRun<'b> {
    journal: Journal,
    wg: String,
    groups: Workgroups,
    ledger: Ledger,
    telemetry: Telemetry,
    cursor: u64,
    ids: SeededIds,
    clock: SimClock,
    model: Model,
    /// Workers running: when each ends (simulated ns), keyed for the order they end in.
    running: BTreeMap<(i64, String), Running>,
    briefing: &'b mut dyn Briefing,
    on_violation: &'b str,
    worktrees: bool,
}

impl PlanRun<'_> {
    fn commit(&mut self, appends: Vec<StreamAppend>) -> Result<(), String> {
        let appends: Vec<StreamAppend> = appends.into_iter().filter(|a| !a.events.is_empty()).collect();
        if appends.is_empty() {
            return Ok(());
        }
        match self.journal.append_multi_blocking(appends) {
            Ok(Ok(_)) => {}
            Ok(Err(c)) => return Err(format!("a folded version is stale: {c}")),
            Err(e) => return Err(e.to_string()),
        }
        let head = self.journal.head().seq;
        let (groups, ledger, telemetry) = (&mut self.groups, &mut self.ledger, &mut self.telemetry);
        let folded = self.journal.scan(self.cursor + 1, head, |r, _| {
            for p in [groups as &mut dyn Projection, ledger, telemetry] {
                p.apply(r)?;
            }
            Ok::<bool, String>(true)
        });
        self.cursor = head;
        match folded {
            Ok(result) => result,
            Err(e) => Err(e.to_string()),
        }
    }

    fn workgroup(&self) -> Result<&Workgroup, String> {
        workgroup_of(&self.groups, &self.wg)
    }

    fn dispatch_task(&mut self, id: &str) -> Result<(), String> {
        let g = workgroup_of(&self.groups, &self.wg)?;
        let t = g.plan.task(id).cloned().ok_or_else(|| format!("no task {id}"))?;
        let attempt = g.tasks.get(id).map_or(1, |s| s.attempts + 1);
        let build_facts = self.briefing.build_facts(&t, attempt);
        let req = dispatch::Request {
            group: g,
            ledger: &self.ledger,
            task: &t,
            provider: "sim",
            caps: &sim::CAPABILITIES,
            now_ns: self.clock.now_ns(),
            nesting_depth: 0,
            hold_fix: "release it (`strata ce --journal DIR release`) and run --resume",
            build_facts: build_facts.as_ref(),
            skip_reconcile: false,
            rollout: None,
            // The simulated provider starts no knowledge server.
            attaches_knowledge: false,
        };
        let routing = dispatch::route(
            req,
            &mut |pt, l| self.briefing.facts_now((id, attempt), pt, l),
            &mut self.ids,
            &self.clock,
        )
        .map_err(|e| e.to_string())?;
        let cleared = match routing {
            Routing::Held { appends, .. } => return self.commit(appends),
            Routing::Cleared(c) => c,
        };
        let lineage = lineage_id(&self.wg, id);
        let brief = self.briefing.brief(&t, attempt, &lineage)?;
        let g = workgroup_of(&self.groups, &self.wg)?;
        let d = match cleared.brief(g, &t, brief, &mut self.ids, &self.clock).map_err(|e| e.to_string())? {
            Planned::Held { appends, .. } => return self.commit(appends),
            Planned::Dispatch(d) => d,
        };
        let (mode, tokens) = (d.runs_as, d.dispatched.prompt.tokens);
        // What the runner reads and hands the worker: the input the dispatch wrote.
        let input_bytes = d.effects.iter().find_map(|e| match e {
            dispatch::Effect::Input(text) => Some(text.len() as u64),
            _ => None,
        });
        let session = match &d.dispatched.from_session {
            Some(s) if mode == Mode::Resume => s.clone(),
            _ => self.model.session(&lineage, attempt),
        };
        self.commit(d.appends)?;
        // The runner starts the worker at once.
        let s = WorkerStarted {
            task: id.to_owned(),
            attempt,
            session_id: session,
            provider: "sim".to_owned(),
            synthetic: true,
            pid: None,
        };
        let append = decide::started(&self.wg, &s, &mut self.ids, &self.clock).map_err(|e| e.to_string())?;
        self.commit(vec![append])?;
        let turn = sim::under_caps(self.model.turn(&self.wg, id, attempt, mode, tokens), &d.dispatched.caps);
        let ends = self.clock.now_ns() + i64::try_from(turn.turn.latency_ms).unwrap_or(i64::MAX / 4) * 1_000_000;
        self.running.insert((ends, id.to_owned()), (attempt, s.session_id, turn, input_bytes));
        Ok(())
    }

    /// Ends the next worker to end (in simulated time), recording its end as the runner does.
    fn end_next(&mut self, until: Option<i64>) -> Result<(), String> {
        let next = self.running.first_key_value().map(|((at, _), _)| *at);
        // Nothing ends before `until`: time passes to it.
        if let Some(u) = until.filter(|u| next.is_none_or(|at| *u < at)) {
            self.clock.advance((u - self.clock.now_ns()).max(0));
            return Ok(());
        }
        let Some(((at, task), (attempt, session, capped, input_bytes))) = self.running.pop_first() else {
            return Ok(());
        };
        self.clock.advance((at - self.clock.now_ns()).max(0));
        let turn = &capped.turn;
        let e = WorkerEnded {
            task: task.clone(),
            attempt,
            session_id: Some(session),
            summary: turn.summary.clone(),
            usage: turn.usage,
            accounting: Some(AccountingSource::Estimated),
            synthetic: true,
            turns: Some(capped.turns),
            input_bytes,
            ..WorkerEnded::default()
        };
        let caps = workgroup_of(&self.groups, &self.wg)?
            .tasks
            .get(&task)
            .and_then(|t| t.dispatch.as_ref())
            .map(|(_, d)| d.caps)
            .unwrap_or_default();
        let event = capped.reached.map(|(reached, spend)| Capped { task: task.clone(), attempt, reached, caps, spend });
        // The checks run after a turn that succeeded under its caps, as the runner runs them.
        let spec = workgroup_of(&self.groups, &self.wg)?.plan.task(&task).cloned();
        let checked = match spec {
            Some(t) if !t.spec.verify.is_empty() && turn.succeeded && event.is_none() => {
                Some(verify::Checked { task: task.clone(), attempt, checks: self.briefing.checks(&t, attempt)? })
            }
            _ => None,
        };
        let record = EndRecord {
            ended: &e,
            succeeded: turn.succeeded,
            output: &turn.summary,
            started: true,
            capped: event.as_ref(),
            checked: checked.as_ref(),
        };
        let append = decide::worker_end(&self.wg, &record, &mut self.ids, &self.clock).map_err(|e| e.to_string())?;
        self.commit(vec![append])
    }

    fn judge_end(&mut self, id: &str, end: WorkerEnd) -> Result<(), String> {
        let g = workgroup_of(&self.groups, &self.wg)?;
        let t = g.plan.task(id).cloned().ok_or_else(|| format!("no task {id}"))?;
        let s = g.tasks.get(id).ok_or_else(|| format!("no task {id}"))?;
        let attempt = s.attempts;
        let mode = s.dispatch.as_ref().map_or(Mode::FreshCapsule, |(_, d)| d.runs_as);
        // What a diff of the worker's directory shows: what the simulated provider wrote.
        let changes = (self.worktrees && t.writer).then(|| {
            let turn =
                self.model.turn(&self.wg, id, attempt, mode, s.dispatch.as_ref().map_or(0, |(_, d)| d.prompt.tokens));
            let mut files = if end.succeeded && !t.spec.owns.is_empty() {
                sim::changed_files(id, &t.spec.owns, |_| false, turn.stray)
            } else {
                Vec::new()
            };
            files.sort();
            // A commit of the simulated changes, as `git commit` would make one.
            Changes { commit: (!files.is_empty()).then(|| format!("sim-commit-{id}-{attempt}")), files }
        });
        let judged = judge::judge(
            judge::Ending {
                group: g,
                ledger: &self.ledger,
                telemetry: &self.telemetry,
                task: id,
                attempt,
                owns: &t.spec.owns,
                mode,
                provider: "sim",
                end: &end,
                observed: Observed { escaped: Vec::new(), changes, partial: None, denials: 0 },
                on_violation: self.on_violation,
                keeps_warm: sim::CAPABILITIES.resume,
                now_ns: self.clock.now_ns(),
            },
            |ms| ms,
            &mut self.ids,
            &self.clock,
        )
        .map_err(|e| e.to_string())?;
        self.commit(judged.appends)
    }
}

impl driver::Coordinate for PlanRun<'_> {
    type Error = String;

    fn group(&self) -> Result<&Workgroup, String> {
        self.workgroup()
    }

    fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    fn hold(&mut self, held: &[Held]) -> Result<(), String> {
        let append = decide::holds(workgroup_of(&self.groups, &self.wg)?, held, &mut self.ids, &self.clock)
            .map_err(|e| e.to_string())?;
        self.commit(vec![append])
    }

    fn dispatch(&mut self, task: &str) -> Result<(), String> {
        self.dispatch_task(task)
    }

    fn in_flight(&self) -> usize {
        self.workgroup().map_or(0, |g| g.count(Status::Dispatched) + g.count(Status::Running))
    }

    fn wait(&mut self, wake_at_ns: Option<i64>) -> Result<Vec<(String, WorkerEnd)>, String> {
        loop {
            let ended: Vec<(String, WorkerEnd)> = self
                .workgroup()?
                .tasks
                .iter()
                .filter(|(_, t)| matches!(t.status, Status::Dispatched | Status::Running))
                .filter_map(|(id, t)| Some((id.clone(), t.worker_end.clone()?)))
                .collect();
            if !ended.is_empty() || wake_at_ns.is_some_and(|at| at <= self.clock.now_ns()) {
                return Ok(ended);
            }
            if self.running.is_empty() && wake_at_ns.is_none() {
                return Err("waiting with no worker running and nothing to wake for".to_owned());
            }
            self.end_next(wake_at_ns)?;
        }
    }

    fn finish(&mut self, task: &str, end: WorkerEnd) -> Result<(), String> {
        self.judge_end(task, end)
    }

    fn stalled(&self, detail: String) -> String {
        detail
    }

    fn pause(&mut self, paused: &Paused) -> Result<(), String> {
        let append = decide::paused(workgroup_of(&self.groups, &self.wg)?, paused, &mut self.ids, &self.clock)
            .map_err(|e| e.to_string())?;
        self.commit(vec![append])
    }

    fn plan_phase(&mut self, phase: &'static str) -> Result<(), String> {
        let x = self.briefing.planned(phase)?;
        let append = decide::phase_planned(workgroup_of(&self.groups, &self.wg)?, &x, &mut self.ids, &self.clock)
            .map_err(|e| e.to_string())?;
        self.commit(vec![append])
    }

    fn suite(&mut self, due: &SuiteDue) -> Result<(), String> {
        let checks = self.briefing.suite(due)?;
        let x = SuiteChecked { run: due.run, covers: due.covers.clone(), checks };
        let append = decide::suite_checked(workgroup_of(&self.groups, &self.wg)?, &x, &mut self.ids, &self.clock)
            .map_err(|e| e.to_string())?;
        self.commit(vec![append])
    }

    fn finished(&mut self) -> Result<(), String> {
        if let Some(append) = decide::finish(workgroup_of(&self.groups, &self.wg)?, &mut self.ids, &self.clock)
            .map_err(|e| e.to_string())?
        {
            self.commit(vec![append])?;
        }
        Ok(())
    }
}

fn workgroup_of<'g>(groups: &'g Workgroups, wg: &str) -> Result<&'g Workgroup, String> {
    groups.get(wg).ok_or_else(|| format!("no workgroup {wg}"))
}
