//! Scenario `coordinator-faults`: a workgroup of 30 tasks, two workers at once (a planner, 28
//! builders in layered dependencies, some owning overlapping paths in dependency order, a
//! reviewer), run by the engine's coordinator loop (`workgroup::driver::run`, the same function
//! `strata run` executes) over the real workgroup deciders, dispatch ledger and seeded provider
//! model, on the crash disk, through faults: coordinator crashes and restarts at random points,
//! provider outages (a worker cannot start) and latency spikes, and dispatch deliveries to the
//! runner that come late or twice.
//!
//! The plan goes through the preflight every `strata run` starts with
//! (`workgroup::preflight::check`), over the simulated world's facts, before it is recorded.
//!
//! What this file supplies are the loop's edges (`driver::Coordinate`), in simulated time:
//! dispatch (route, claim, capsule and `task.dispatched` in one append, decided by the engine's
//! `dispatch::route` and `Cleared::brief`, as `strata run` decides it), a wait that advances the
//! clock a second at a time (faults strike, the runner starts what was delivered, workers whose
//! time came end, the invariants are checked) until an attempt ends or a retry's backoff runs
//! out, and judging an end (`judge::judge`, as `strata run` judges it: outcome, retry and
//! backoff, release, warm session) in one append. What it does not run are the adapters' edges: git
//! worktrees, prompt files, provider processes, tokio. The runner, fed by the dispatch events,
//! starts each attempt once (`worker.started` expects an empty worker stream) and records its
//! end. A crash stops the loop; everything is rebuilt from the journal (a dispatch without a
//! start is started, a start without an end is recorded as abandoned and its task runs again,
//! `decide::open_attempts`) and the loop runs again, as `strata run --resume` does.
//!
//! Some builders continue the session of the builder they wait for, on that builder's files (so
//! the lineage evaluator every resume goes through finds them bound to the same work): a
//! completed session is kept warm on the ledger with a lease of one simulated minute (the real
//! `warm` deciders), so delays, spikes and crashes race the lease's expiry; a continuation
//! resumes only a live lease and otherwise starts fresh.
//!
//! The knowledge base changes under the workers (`ce.vault-delta-applied` through the real
//! journaled `vault-delta` decider, on one of three topics). Every dispatch that starts or
//! resumes a worker is briefed with a capsule sealed by the real capsule pipeline from its task
//! and the current knowledge of its topic, so a change on a warm session's topic leaves that
//! session's capsule stale: a continuation resumes it only reconciled (`ce.lineage-reconciled`
//! with the capsule as sealed now), never silently hot.
//!
//! After every step: `gapless`; `exclusive-ownership` (no two lineages own overlapping paths);
//! `one-lease-holder` (at most one attempt in flight resumes a session); `no-stale-resume` (after
//! a resume is recorded, the resumed lineage's record names its capsule as sealed now); `start-once` (a
//! duplicated delivery never starts an attempt twice); `projection-rebuild`
//! (workgroups and ledger folded from scratch equal the incremental folds, every 25 steps and
//! after each restart); `retry-backoff` (an outage refuses each task at most once: its retry
//! waits out the backoff); at the end `chain` and `finished` (every task ended).

use std::collections::BTreeMap;

use rand::Rng as _;
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use strata_engine::ce::Context;
use strata_engine::ce::ledger::Ledger;
use strata_engine::ce::ownership;
use strata_engine::ce::router::Mode;
use strata_engine::ce::wire::journaled;
use strata_engine::context::profile::ProfileIndex;
use strata_engine::kb::graph::Graph;
use strata_engine::ports::Clock as _;
use strata_engine::telemetry::state::Telemetry;
use strata_engine::workgroup::dispatch::{self, Brief, CapsuleFacts, Planned, Routing};
use strata_engine::workgroup::events::{Held, PromptRef, RunStart, WorkerEnded, WorkerStarted};
use strata_engine::workgroup::plan::{self, Plan};
use strata_engine::workgroup::policy::Policy;
use strata_engine::workgroup::preflight;
use strata_engine::workgroup::sim::{Model, Turn};
use strata_engine::workgroup::state::{Status, WorkerEnd, Workgroup, Workgroups};
use strata_engine::workgroup::{decide, driver, judge, lineage_id, sim};
use strata_journal::{ExpectedVersion, Journal, StreamAppend};

use crate::store::CrashStore;
use crate::{Config, Failure, SeededIds, SimClock, component_rng};

/// The scenario's name.
pub const NAME: &str = "coordinator-faults";

const WG: &str = "sim";
const SECOND: i64 = 1_000_000_000;
/// Warm leases last one simulated minute here, so that delays and crashes let them expire.
const WARM_MINUTES: u64 = 1;
/// How long a provider outage lasts; the plan's first retry waits as long, so one outage refuses
/// a task's start at most once (invariant `retry-backoff`).
const OUTAGE_SECONDS: u64 = 10;
/// Why a worker did not start in an outage.
const REFUSED: &str = "the provider is unavailable (simulated outage)";
/// Knowledge topics; builder `b<i>` works on topic `i % 3`, the planner and reviewer on 0.
const TOPICS: u32 = 3;

/// What a run did and checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: &'static str,
    /// Its seed.
    pub seed: u64,
    /// Steps (simulated seconds) run.
    pub steps: u64,
    /// Tasks completed, failed, held.
    pub completed: u64,
    /// Tasks failed.
    pub failed: u64,
    /// Tasks held.
    pub held: u64,
    /// Attempts dispatched.
    pub dispatches: u64,
    /// Coordinator crashes.
    pub crashes: u64,
    /// Workers recorded as abandoned after a crash.
    pub abandoned: u64,
    /// Provider outages begun.
    pub outages: u64,
    /// Workers that could not start in an outage.
    pub refused_starts: u64,
    /// Failed attempts retried only after waiting out the plan's backoff.
    pub backoffs: u64,
    /// Tasks failed for good by a refused start (an outage outlasted their retries' backoff).
    pub lost_to_outages: u64,
    /// Latency spikes begun.
    pub spikes: u64,
    /// Deliveries that came twice (the second never started anything).
    pub duplicate_deliveries: u64,
    /// Deliveries that came late.
    pub late_deliveries: u64,
    /// Tasks that resumed the warm session they continue.
    pub resumes: u64,
    /// Tasks whose warm session's lease had ended (or was never kept): they started fresh.
    pub cold_continuations: u64,
    /// Knowledge-base changes (each may leave warm sessions' capsules stale).
    pub knowledge_deltas: u64,
    /// Resumes of a warm session whose capsule was stale, reconciled first.
    pub reconciliations: u64,
    /// Invariant checks made.
    pub checks: u64,
    /// Whether every task ended within the steps.
    pub finished: bool,
    /// The journal's head at the end.
    pub head_seq: u64,
    /// Its hash, hex.
    pub head_hash: String,
}

/// The builder whose files builder `i`, a continuation, works on: the first of its chain.
fn continued(i: usize) -> usize {
    if i >= 8 && i.is_multiple_of(4) { continued(i - 4) } else { i }
}

fn plan() -> Plan {
    let mut tasks = vec![json!({"id": "plan", "role": "planner", "phase": "plan", "objective": "Plan the change."})];
    for i in 0..28 {
        let after = if i < 4 { "plan".to_owned() } else { format!("b{}", i - 4) };
        // Every seventh builder owns a file inside the previous one's directory: overlapping
        // ownership, ordered by the dependency.
        let owns = |i: usize| if i % 7 == 6 { format!("src/p{}/shared.rs", i - 4) } else { format!("src/p{i}/") };
        // Every fourth builder from b8 on continues the session of the one it waits for, on the
        // same files (so the lineage evaluator lets it resume that session).
        let continues = i >= 8 && i % 4 == 0;
        let own = if continues { owns(continued(i)) } else { owns(i) };
        let mut t = json!({"id": format!("b{i}"), "role": "backend-builder", "objective": format!("Build part {i}."), "owns": [own], "after": [after]});
        if continues {
            t["continues"] = json!(format!("b{}", i - 4));
        }
        tasks.push(t);
    }
    tasks.push(json!({"id": "review", "role": "reviewer", "phase": "review", "objective": "Review it all."}));
    let backoff_ms = OUTAGE_SECONDS * 1_000;
    serde_json::from_value(
        json!({"workgroup": WG, "parallel": 2, "retries": 2, "retry_backoff_ms": backoff_ms, "task": tasks}),
    )
    .unwrap_or_else(|e| unreachable!("the scenario's plan is well formed: {e}"))
}

/// The scenario's plan through the preflight `strata run` starts with (the engine's
/// `workgroup::preflight::check`), over the simulated run's world: an empty knowledge base, the
/// shipped profiles, a repository with a base, the simulated provider (no CLI to find).
fn preflight(groups: &Workgroups) -> Result<plan::Checked, Vec<preflight::Problem>> {
    let profiles = preflight::run_profiles(&ProfileIndex::default()).map_err(|e| {
        vec![preflight::Problem {
            code: "STRATA-E0901",
            input: "profiles".into(),
            rule: e.to_string(),
            fix: String::new(),
        }]
    })?;
    let facts = preflight::Facts {
        repo: preflight::RepoFact::Ready { top: "sim://repo".into(), base: "0".repeat(40), branch_taken: false },
        clis: BTreeMap::new(),
        outside: BTreeMap::new(),
        // The simulated world's prompts: every task's is the one it is dispatched with.
        prompt_tokens: plan().tasks.iter().map(|t| (t.id.clone(), stand_in_prompt(&t.id).tokens)).collect(),
        discovered: BTreeMap::new(),
    };
    preflight::check(&preflight::Inputs {
        plan: &plan(),
        provider: None,
        auto: "sim",
        resuming: false,
        groups,
        graph: &Graph::new(),
        profiles: &profiles,
        facts: &facts,
        configured: &Default::default(),
    })
}

struct Run {
    cfg: Config,
    disk: CrashStore,
    journal: Journal,
    groups: Workgroups,
    ledger: Ledger,
    cursors: (u64, u64),
    rng: ChaCha8Rng,
    ids: SeededIds,
    clock: SimClock,
    model: Model,
    /// Dispatch deliveries to the runner: (due, task, attempt).
    deliveries: Vec<(i64, String, u32)>,
    /// Workers running: (task, attempt) → (ends at, turn).
    running: BTreeMap<(String, u32), (i64, Turn)>,
    /// For each task refused a start, the outage (its number) that refused it last: the
    /// checker's memory, kept across crashes.
    refused: BTreeMap<String, u64>,
    /// The journal is checked gapless up to here.
    checked_to: u64,
    outage_until: i64,
    spike_until: i64,
    report: Report,
    step: u64,
}

/// Runs the scenario; the first broken invariant is a [`Failure`].
pub fn run(cfg: Config) -> Result<Report, Failure> {
    run_keeping_journal(cfg).map(|(r, _)| r)
}

/// [`run`], also returning the run's journal (closed, still readable), for tests that export it.
pub fn run_keeping_journal(cfg: Config) -> Result<(Report, Journal), Failure> {
    let fail0 = |invariant: &str, detail: String| Failure::new(NAME, &cfg, 0, invariant, detail);
    let (disk, journal) = CrashStore::open(cfg.defects).map_err(|e| fail0("open", e.to_string()))?;
    let mut r = Run {
        cfg,
        disk,
        journal,
        groups: Workgroups::default(),
        ledger: Ledger::default(),
        cursors: (0, 0),
        rng: component_rng(cfg.seed, "coordinator-faults/faults"),
        ids: SeededIds::new(component_rng(cfg.seed, "coordinator-faults/ids").random()),
        clock: SimClock::new(1_795_000_000_000_000_000),
        model: Model { seed: cfg.seed },
        deliveries: Vec::new(),
        running: BTreeMap::new(),
        refused: BTreeMap::new(),
        checked_to: 0,
        outage_until: 0,
        spike_until: 0,
        report: Report { scenario: NAME, seed: cfg.seed, ..Report::default() },
        step: 0,
    };
    let checked = preflight(&r.groups).map_err(|p| fail0("preflight", format!("{p:?}")))?;
    // Leases a minute long, so that the model's stops outlast some of them.
    let policy = Policy { warm_lease_minutes: WARM_MINUTES, ..Policy::default() };
    let append = decide::plan_started(&r.groups, checked, cfg.seed, RunStart::default(), &policy, &mut r.ids, &r.clock)
        .map_err(|e| fail0("plan", e.to_string()))?;
    r.commit(vec![append])?;
    // The engine's coordinator loop, as `strata run` runs it; after a crash, run again on the
    // state rebuilt from the journal, as `strata run --resume` does.
    loop {
        match driver::run(&mut r) {
            Ok(()) | Err(Stop::OutOfSteps) => break,
            Err(Stop::Crashed) => r.restart()?,
            Err(Stop::Broken(f)) => return Err(f),
        }
    }
    r.report.steps = r.step;
    // What the last round appended after the last step's checks.
    r.check_step()?;
    r.check_starts()?;
    r.report.checks += 1;
    crate::invariants::chain(&r.journal).map_err(|e| r.fail("chain", e))?;
    if let Some(g) = r.groups.get(WG) {
        r.report.completed = g.count(Status::Completed) as u64;
        r.report.failed = g.count(Status::Failed) as u64;
        r.report.held = g.count(Status::Held) as u64;
        r.report.finished = g.finished;
    }
    (r.report.head_seq, r.report.head_hash) = crate::invariants::finish(&r.journal);
    Ok((r.report, r.journal))
}

impl Run {
    fn fail(&self, invariant: &str, detail: String) -> Failure {
        Failure::new(NAME, &self.cfg, self.step, invariant, detail)
    }

    /// Appends `appends` atomically, then folds.
    fn commit(&mut self, appends: Vec<StreamAppend>) -> Result<(), Failure> {
        let appends: Vec<StreamAppend> = appends.into_iter().filter(|a| !a.events.is_empty()).collect();
        if appends.is_empty() {
            return Ok(());
        }
        match self.journal.append_multi_blocking(appends) {
            Ok(Ok(_)) => {}
            Ok(Err(c)) => return Err(self.fail("projection-rebuild", format!("a folded version is stale: {c}"))),
            Err(e) => return Err(self.fail("append", e.to_string())),
        }
        self.follow()
    }

    fn follow(&mut self) -> Result<(), Failure> {
        crate::invariants::follow(&self.journal, &mut self.groups, &mut self.cursors.0)
            .map_err(|e| self.fail("projection-rebuild", e))?;
        crate::invariants::follow(&self.journal, &mut self.ledger, &mut self.cursors.1)
            .map_err(|e| self.fail("projection-rebuild", e))
    }

    /// This second's fault, if any; `true`: the coordinator crashed.
    fn faults(&mut self) -> Result<bool, Failure> {
        let now = self.clock.now_ns();
        let roll: f64 = self.rng.random();
        if roll < 0.03 {
            return Ok(true);
        } else if roll < 0.04 && now >= self.outage_until {
            self.outage_until = now + OUTAGE_SECONDS as i64 * SECOND;
            self.report.outages += 1;
        } else if roll < 0.07 && now >= self.spike_until {
            self.spike_until = now + 60 * SECOND;
            self.report.spikes += 1;
        } else if roll < 0.09 {
            self.knowledge_delta()?;
        }
        Ok(false)
    }

    /// The knowledge of one topic changes: a vault delta through the journaled decider.
    fn knowledge_delta(&mut self) -> Result<(), Failure> {
        let topic = self.rng.random_range(0..TOPICS);
        self.report.knowledge_deltas += 1;
        let payload = json!({"input": {"delta": {
            "category": "pattern",
            "title": format!("Topic {topic}"),
            "content": format!("Topic {topic}, revision {}: the decision as it now stands.", self.report.knowledge_deltas),
            "semantic_key": format!("topic-{topic}"),
        }}});
        let ctx = Context {
            now_ns: i128::from(self.clock.now_ns()),
            workspace: self.ledger.workspace().clone(),
            warm_lease_minutes: WARM_MINUTES,
        };
        let decided = journaled::run("vault-delta", &payload, &ctx, &self.ledger, &mut self.ids, &self.clock)
            .map_err(|e| self.fail("vault-delta", e.to_string()))?;
        let append = StreamAppend {
            stream: ownership::STREAM.to_owned(),
            expected: ExpectedVersion::Exact(self.ledger.version()),
            events: decided.events,
        };
        self.commit(vec![append])
    }

    /// The capsule facts of `task`: its topic, and what the knowledge base knows of it now.
    fn capsule_facts(ledger: &Ledger, task: &str) -> CapsuleFacts {
        let key = format!("topic-{}", topic(task));
        let known = ledger
            .vault()
            .values()
            .filter(|v| v["semantic_key"].as_str() == Some(key.as_str()))
            .map(|v| v["content"].as_str().unwrap_or_default().to_owned())
            .collect();
        CapsuleFacts { nodes: vec![key], known, ..CapsuleFacts::default() }
    }

    /// One simulated second: a fault may strike, the runner starts what was delivered, workers
    /// whose time came end; then the invariants are checked.
    fn tick(&mut self) -> Result<(), Stop> {
        if self.step >= self.cfg.steps {
            return Err(Stop::OutOfSteps);
        }
        self.step += 1;
        self.clock.advance(SECOND);
        if self.faults()? {
            return Err(Stop::Crashed);
        }
        self.deliver()?;
        self.end_workers()?;
        Ok(self.check_step()?)
    }

    /// The invariants checked after every step: gapless, exclusive ownership, one lease holder,
    /// and every 25 steps the rebuild.
    fn check_step(&mut self) -> Result<(), Failure> {
        self.report.checks += 3;
        self.checked_to =
            crate::invariants::gapless(&self.journal, self.checked_to + 1).map_err(|e| self.fail("gapless", e))?;
        self.check_exclusive()?;
        self.check_lease_holders()?;
        if self.step.is_multiple_of(25) {
            self.check_rebuild()?;
        }
        Ok(())
    }

    fn dispatch(&mut self, task: &str) -> Result<(), Failure> {
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        let Some(t) = g.plan.task(task).cloned() else { return Ok(()) };
        let req = dispatch::Request {
            group: g,
            ledger: &self.ledger,
            task: &t,
            provider: "sim",
            caps: &sim::CAPABILITIES,
            now_ns: self.clock.now_ns(),
            nesting_depth: 0,
            hold_fix: "",
            // Its tasks implement no change request: the build gate does not apply.
            build_facts: None,
            skip_reconcile: self.cfg.defects.stale_resume,
            rollout: None,
            // The simulated provider starts no knowledge server.
            attaches_knowledge: false,
        };
        let ledger = &self.ledger;
        let routing =
            dispatch::route(req, &mut |pt, _| Ok(Self::capsule_facts(ledger, pt.id())), &mut self.ids, &self.clock)
                .map_err(|e| self.fail("decide", e.to_string()))?;
        // A writer another lineage's claim blocks is held, as `strata run` holds it; the
        // simulation's effects are its own bookkeeping (no files, no worktrees).
        let cleared = match routing {
            Routing::Held { appends, .. } => return self.commit(appends),
            Routing::Cleared(c) => c,
        };
        let brief = Brief {
            prompt: stand_in_prompt(task),
            prompt_text: String::new(),
            baseline_tokens: 600_000,
            facts: Self::capsule_facts(&self.ledger, task),
            planned_as: None,
        };
        let g = self.groups.get(WG).ok_or_else(|| self.fail("decide", "no workgroup".to_owned()))?;
        let d = match cleared
            .brief(g, &t, brief, &mut self.ids, &self.clock)
            .map_err(|e| self.fail("decide", e.to_string()))?
        {
            Planned::Held { appends, .. } => return self.commit(appends),
            Planned::Dispatch(d) => d,
        };
        if d.continues {
            if d.resumed.is_some() {
                self.report.resumes += 1;
            } else {
                self.report.cold_continuations += 1;
            }
        }
        self.report.reconciliations += u64::from(d.reconciled);
        let attempt = d.dispatched.attempt;
        self.commit(d.appends)?;
        self.report.dispatches += 1;
        if let Some((l, current)) = &d.resumed {
            self.report.checks += 1;
            let named = self.ledger.lineages().get(l).and_then(|e| e.record.capsule_hash.as_deref());
            if named != Some(current.hash.as_str()) {
                return Err(self.fail(
                    "no-stale-resume",
                    format!(
                        "{task} resumed {l}, whose record names capsule {named:?}, not the current {}",
                        current.hash
                    ),
                ));
            }
        }
        // The runner hears of it now, late, or twice.
        let now = self.clock.now_ns();
        let late = self.rng.random_bool(0.1);
        if late {
            self.report.late_deliveries += 1;
        }
        let delay = if late { self.rng.random_range(10..40) } else { self.rng.random_range(0..3) };
        self.deliveries.push((now + delay * SECOND, task.to_owned(), attempt));
        if self.rng.random_bool(0.1) {
            self.report.duplicate_deliveries += 1;
            self.deliveries.push((now + self.rng.random_range(0..20) * SECOND, task.to_owned(), attempt));
        }
        Ok(())
    }

    /// The runner: starts the attempt of each delivery that is due, once.
    fn deliver(&mut self) -> Result<(), Failure> {
        let now = self.clock.now_ns();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.deliveries).into_iter().partition(|(at, _, _)| *at <= now);
        self.deliveries = later;
        for (_, task, attempt) in due {
            self.start(&task, attempt)?;
        }
        Ok(())
    }

    fn start(&mut self, task: &str, attempt: u32) -> Result<(), Failure> {
        let Some(s) = self.groups.get(WG).and_then(|g| g.tasks.get(task)) else { return Ok(()) };
        let mode = s.dispatch.as_ref().map_or(Mode::FreshCapsule, |(_, d)| d.runs_as);
        if s.attempts != attempt || s.status != Status::Dispatched || s.worker_end.is_some() {
            // A stale or repeated delivery: the attempt started already, or ended.
            return Ok(());
        }
        let now = self.clock.now_ns();
        if now < self.outage_until {
            self.report.refused_starts += 1;
            // Outages last no longer than the first retry's backoff: one outage refuses a task once.
            let outage = self.report.outages;
            if self.refused.insert(task.to_owned(), outage) == Some(outage) {
                let detail = format!(
                    "task {task}: attempt {attempt} was refused in the same outage as its previous attempt: the \
                     retry did not wait out its backoff"
                );
                return Err(self.fail("retry-backoff", detail));
            }
            let e = ended(task, attempt, None, REFUSED);
            let append = decide::worker_ended(WG, &e, false, "", false, &mut self.ids, &self.clock)
                .map_err(|e| self.fail("decide", e.to_string()))?;
            return self.commit(vec![append]);
        }
        let turn = self.model.turn(WG, task, attempt, mode, 20_000);
        let s = WorkerStarted {
            task: task.to_owned(),
            attempt,
            session_id: format!("sim-{task}-{attempt}"),
            provider: "sim".to_owned(),
            synthetic: true,
            pid: None,
        };
        let append =
            decide::started(WG, &s, &mut self.ids, &self.clock).map_err(|e| self.fail("decide", e.to_string()))?;
        match self.journal.append_multi_blocking(vec![append]) {
            Ok(Ok(_)) => self.follow()?,
            // The worker stream is not empty: the attempt started before. Never twice.
            Ok(Err(_)) => return Ok(()),
            Err(e) => return Err(self.fail("append", e.to_string())),
        }
        let factor = if now < self.spike_until { 5 } else { 1 };
        let ends = now + i64::try_from(turn.latency_ms * factor).unwrap_or(i64::MAX / 4) * 1_000_000;
        self.running.insert((task.to_owned(), attempt), (ends, turn));
        Ok(())
    }

    fn end_workers(&mut self) -> Result<(), Failure> {
        let now = self.clock.now_ns();
        let done: Vec<(String, u32)> =
            self.running.iter().filter(|(_, (at, _))| *at <= now).map(|(k, _)| k.clone()).collect();
        for (task, attempt) in done {
            let Some((_, turn)) = self.running.remove(&(task.clone(), attempt)) else { continue };
            let mut e = ended(&task, attempt, Some(format!("sim-{task}-{attempt}")), &turn.summary);
            e.usage = turn.usage;
            let append = decide::worker_ended(WG, &e, turn.succeeded, &turn.summary, true, &mut self.ids, &self.clock)
                .map_err(|e| self.fail("decide", e.to_string()))?;
            self.commit(vec![append])?;
        }
        Ok(())
    }

    /// The coordinator judges an ended worker: the task's outcome and the release (and, for a
    /// completed session, its warm lineage), at once.
    fn judge(&mut self, task: &str, end: WorkerEnd) -> Result<(), Failure> {
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        let Some(attempt) = g.tasks.get(task).map(|t| t.attempts) else { return Ok(()) };
        let no_backoff = self.cfg.defects.no_backoff;
        let owns = g.plan.task(task).map(|t| t.spec.owns.clone()).unwrap_or_default();
        let dispatch = g.tasks.get(task).and_then(|s| s.dispatch.as_ref());
        let mode = dispatch.map_or(Mode::FreshCapsule, |(_, d)| d.runs_as);
        let telemetry = Telemetry::default(); // the model's turns here report no usage
        let judged = judge::judge(
            judge::Ending {
                group: g,
                ledger: &self.ledger,
                telemetry: &telemetry,
                task,
                attempt,
                owns: &owns,
                mode,
                provider: "sim",
                end: &end,
                // No worktrees here: nothing is observed beyond the worker's own report.
                observed: judge::Observed::default(),
                on_violation: "stop",
                keeps_warm: sim::CAPABILITIES.resume,
                now_ns: self.clock.now_ns(),
            },
            |ms| if no_backoff { 0 } else { ms },
            &mut self.ids,
            &self.clock,
        )
        .map_err(|e| self.fail("decide", e.to_string()))?;
        match (judged.retry_ms, judged.not_before_ns) {
            (Some(_), Some(_)) => self.report.backoffs += 1,
            (None, _) if !end.succeeded && end.ended.summary == REFUSED => self.report.lost_to_outages += 1,
            _ => {}
        }
        self.commit(judged.appends)
    }

    /// The coordinator (and its runner) crash; everything is rebuilt from the journal.
    fn restart(&mut self) -> Result<(), Failure> {
        self.report.crashes += 1;
        let (_, reopened) = self.disk.crash_and_reopen(&mut self.rng);
        self.journal =
            reopened.map_err(|e| self.fail("recovery", format!("the journal does not open after a crash: {e}")))?;
        // Every append was acknowledged, hence durable: the state rebuilt must be the one before.
        self.check_rebuild()?;
        self.cursors = (self.journal.head().seq, self.journal.head().seq);
        // The process died with its workers and its undelivered dispatches.
        self.running.clear();
        self.deliveries.clear();
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        let now = self.clock.now_ns();
        for open in decide::open_attempts(g) {
            let (task, attempt, session) = match open {
                decide::Open::Unstarted { task, attempt } => {
                    self.deliveries.push((now, task, attempt));
                    continue;
                }
                decide::Open::Orphaned { task, attempt, session_id, .. } => (task, attempt, session_id),
            };
            self.report.abandoned += 1;
            let summary = "the run that started it stopped; its worker is gone".to_owned();
            let e = decide::abandoned(&task, attempt, session, summary, true);
            let append = decide::worker_ended(WG, &e, false, "", true, &mut self.ids, &self.clock)
                .map_err(|e| self.fail("decide", e.to_string()))?;
            self.commit(vec![append])?;
        }
        Ok(())
    }

    /// At most one attempt in flight resumes a given session: the lease has one holder.
    fn check_lease_holders(&mut self) -> Result<(), Failure> {
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        let mut holders: BTreeMap<&str, &str> = BTreeMap::new();
        for (id, t) in &g.tasks {
            let Some((_, d)) = t.dispatch.as_ref().filter(|_| matches!(t.status, Status::Dispatched | Status::Running))
            else {
                continue;
            };
            let Some(session) = d.from_session.as_deref() else { continue };
            if let Some(other) = holders.insert(session, id) {
                return Err(self.fail("one-lease-holder", format!("{other} and {id} resume session {session} at once")));
            }
        }
        Ok(())
    }

    fn check_exclusive(&mut self) -> Result<(), Failure> {
        crate::invariants::exclusive(&self.ledger).map_err(|e| self.fail("exclusive-ownership", e))
    }

    fn check_rebuild(&mut self) -> Result<(), Failure> {
        self.report.checks += 1;
        crate::invariants::rebuild_matches(&self.journal, &self.groups, "the workgroups")
            .and_then(|()| crate::invariants::rebuild_matches(&self.journal, &self.ledger, "the ledger"))
            .map_err(|e| self.fail("projection-rebuild", e))
    }

    /// Every attempt's worker stream holds at most one start.
    fn check_starts(&mut self) -> Result<(), Failure> {
        self.report.checks += 1;
        let mut starts: BTreeMap<String, u32> = BTreeMap::new();
        let head = self.journal.head().seq;
        let scanned = self.journal.scan(1, head, |r, _| {
            if r.event_type == "worker.started" {
                *starts.entry(r.stream.to_owned()).or_default() += 1;
            }
            Ok::<bool, String>(true)
        });
        if !matches!(scanned, Ok(Ok(()))) {
            return Err(self.fail("start-once", "the journal could not be scanned".to_owned()));
        }
        match starts.iter().find(|(_, n)| **n > 1) {
            Some((stream, n)) => Err(self.fail("start-once", format!("{stream} started {n} times"))),
            None => Ok(()),
        }
    }
}

/// Why the coordinator's loop stopped early.
enum Stop {
    /// The coordinator crashed: rebuild from the journal and run the loop again.
    Crashed,
    /// The simulated seconds ran out.
    OutOfSteps,
    /// An invariant broke, or a step failed.
    Broken(Failure),
}

impl From<Failure> for Stop {
    fn from(f: Failure) -> Stop {
        Stop::Broken(f)
    }
}

/// The prompt the scenario briefs `task` with: it assembles none, so a stand-in of the seed's
/// size.
fn stand_in_prompt(task: &str) -> PromptRef {
    PromptRef { prompt_task: lineage_id(WG, task), prompt_hash: format!("sha256:{}", "0".repeat(64)), tokens: 20_000 }
}

/// The simulated coordinator's edges under the engine's loop: appends to the crash disk, a
/// runner fed by delayed or duplicated deliveries, workers ending in simulated time.
impl driver::Coordinate for Run {
    type Error = Stop;

    fn group(&self) -> Result<&Workgroup, Stop> {
        self.groups.get(WG).ok_or_else(|| Stop::Broken(self.fail("decide", "no workgroup".to_owned())))
    }

    fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    fn hold(&mut self, held: &[Held]) -> Result<(), Stop> {
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        let append =
            decide::holds(g, held, &mut self.ids, &self.clock).map_err(|e| self.fail("decide", e.to_string()))?;
        Ok(self.commit(vec![append])?)
    }

    fn dispatch(&mut self, task: &str) -> Result<(), Stop> {
        Ok(Run::dispatch(self, task)?)
    }

    fn in_flight(&self) -> usize {
        self.groups.get(WG).map_or(0, |g| g.count(Status::Dispatched) + g.count(Status::Running))
    }

    fn wait(&mut self, wake_at_ns: Option<i64>) -> Result<Vec<(String, WorkerEnd)>, Stop> {
        loop {
            let ended: Vec<(String, WorkerEnd)> = self.groups.get(WG).map_or_else(Vec::new, |g| {
                g.tasks
                    .iter()
                    .filter(|(_, t)| matches!(t.status, Status::Dispatched | Status::Running))
                    .filter_map(|(id, t)| Some((id.clone(), t.worker_end.clone()?)))
                    .collect()
            });
            if !ended.is_empty() || wake_at_ns.is_some_and(|at| at <= self.clock.now_ns()) {
                return Ok(ended);
            }
            self.tick()?;
        }
    }

    fn finish(&mut self, task: &str, end: WorkerEnd) -> Result<(), Stop> {
        Ok(self.judge(task, end)?)
    }

    fn stalled(&self, detail: String) -> Stop {
        Stop::Broken(self.fail("progress", detail))
    }

    fn pause(&mut self, paused: &strata_engine::workgroup::caps::Paused) -> Result<(), Stop> {
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        let append =
            decide::paused(g, paused, &mut self.ids, &self.clock).map_err(|e| self.fail("decide", e.to_string()))?;
        Ok(self.commit(vec![append])?)
    }

    fn plan_phase(&mut self, phase: &'static str) -> Result<(), Stop> {
        use strata_engine::workgroup::gates::{PhasePlanned, PlannedPrompt};
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        // The stand-in prompt each of the phase's dispatches is briefed with.
        let prompts = g
            .plan
            .tasks
            .iter()
            .filter(|t| strata_engine::workgroup::plan::PHASES[t.phase] == phase)
            .map(|t| PlannedPrompt { task: t.id().to_owned(), prompt: stand_in_prompt(t.id()), position: 0 })
            .collect();
        let x = PhasePlanned { phase: phase.to_owned(), prompts, problems: Vec::new() };
        let append =
            decide::phase_planned(g, &x, &mut self.ids, &self.clock).map_err(|e| self.fail("decide", e.to_string()))?;
        Ok(self.commit(vec![append])?)
    }

    fn suite(&mut self, due: &strata_engine::workgroup::verify::SuiteDue) -> Result<(), Stop> {
        // The scenario's generated plans declare no consolidated suite, so it is never due.
        Err(Stop::Broken(self.fail("decide", format!("a suite is due in a plan without one: {due:?}"))))
    }

    fn finished(&mut self) -> Result<(), Stop> {
        let Some(g) = self.groups.get(WG) else { return Ok(()) };
        if let Some(append) =
            decide::finish(g, &mut self.ids, &self.clock).map_err(|e| self.fail("decide", e.to_string()))?
        {
            self.commit(vec![append])?;
        }
        Ok(())
    }
}

/// The knowledge topic `task` works on.
fn topic(task: &str) -> u32 {
    task.strip_prefix('b').and_then(|i| i.parse::<u32>().ok()).map_or(0, |i| i % TOPICS)
}

fn ended(task: &str, attempt: u32, session: Option<String>, summary: &str) -> WorkerEnded {
    WorkerEnded {
        task: task.to_owned(),
        attempt,
        session_id: session,
        summary: summary.to_owned(),
        usage: Default::default(),
        accounting: None,
        synthetic: true,
        ..WorkerEnded::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Defects;

    #[test]
    fn the_workgroup_finishes_through_crashes_outages_and_duplicated_deliveries_and_the_seed_repeats_it() {
        let cfg = Config { seed: 1, steps: 5_000, defects: Defects::default() };
        let r = run(cfg).unwrap_or_else(|f| panic!("{f}"));
        assert!(r.finished, "{r:?}");
        assert_eq!(r.completed + r.failed + r.held, 30, "{r:?}");
        assert!(r.crashes > 0 && r.duplicate_deliveries > 0 && r.late_deliveries > 0, "{r:?}");
        assert!(r.resumes > 0 && r.cold_continuations > 0, "warm sessions resumed, and leases raced: {r:?}");
        assert!(r.knowledge_deltas > 0 && r.reconciliations > 0, "stale capsules were reconciled: {r:?}");
        assert_eq!(r, run(cfg).expect("again"));
    }

    /// The first failure `defects` cause within the CI seed budget, after checking that it
    /// breaks `invariant`, that its seed reproduces it and names the defect, and that the same
    /// seed without the defect holds every invariant (that run's report).
    fn caught(defects: Defects, inject: &str, invariant: &str) -> Report {
        let cfg = |seed| Config { seed, steps: crate::CI_STEPS, defects };
        let failure = (1..=crate::CI_SEEDS)
            .find_map(|seed| run(cfg(seed)).err())
            .unwrap_or_else(|| panic!("the invariants catch --inject {inject} within the CI seed budget"));
        assert_eq!(failure.invariant, invariant, "{failure}");
        assert_eq!(run(cfg(failure.seed)).expect_err("the seed reproduces it"), failure);
        let tail = format!("--seed {} --steps {} --inject {inject}", failure.seed, crate::CI_STEPS);
        assert!(failure.reproduce().ends_with(&tail), "{}", failure.reproduce());
        run(Config { defects: Defects::default(), ..cfg(failure.seed) }).unwrap_or_else(|f| panic!("{f}"))
    }

    #[test]
    fn retries_without_backoff_are_caught_spending_an_outage_and_the_seed_reproduces_it() {
        let r = caught(Defects { no_backoff: true, ..Defects::default() }, "no-backoff", "retry-backoff");
        // With the backoff the same seed's retries waited.
        assert!(r.backoffs > 0 && r.refused_starts > 0, "{r:?}");
    }

    #[test]
    fn resuming_stale_capsules_unreconciled_is_caught_within_the_seed_budget_and_the_seed_reproduces_it() {
        caught(Defects { stale_resume: true, ..Defects::default() }, "stale-resume", "no-stale-resume");
    }
}
