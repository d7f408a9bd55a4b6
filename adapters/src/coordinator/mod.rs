//! The coordinator behind `strata run`: the edges of the engine's loop
//! (`strata_engine::workgroup::driver`) for a workgroup's plan, deciding on one thread and letting
//! workers run concurrently on a tokio runtime.
//!
//! For each task that becomes ready (dependencies completed, earlier phases completed, a retry's
//! backoff over, a worker slot free) it routes the task against the dispatch ledger (writers claim their files there),
//! degrades a mode the provider cannot run to a fresh capsule, assembles the task's prompt with
//! its bill of materials, writes both to `.strata/prompts/` with the worker's input (the planning
//! gate: no worker starts before they exist), seals a context capsule for every worker it starts, forks or resumes (a seal
//! the privacy scan or schema refuses holds the task), prepares the worker's directory (its own
//! git worktree when it writes) and records route, claim, capsule, prompt and dispatch in one
//! atomic append. The coordinator never calls a provider: the [`runner`], the adapters' catch-up
//! subscription to the journal, starts the worker of each dispatch and records its start and
//! end on the attempt's worker stream. When the journal shows a worker's end, its changes are
//! collected with the post-turn diff check (writes outside ownership are violations: `flag`
//! discards the task's changes, `stop` fails the task), the task's outcome, the release of its
//! files and its usage are recorded in one append, and then its commit is applied to the
//! integration branch (completion order is dependency order); a conflict is recorded as
//! `task.conflicted`. A task whose dependency failed, conflicted or was held is held.
//!
//! The journal is the only state: after a crash, `strata run --resume WG` rebuilds everything
//! from it. The runner starts the workers of dispatches that never got one and releases workers
//! the stopped run left (recorded as abandoned, so their tasks are dispatched again as their next
//! attempt; their lineage still owns its files, so no second claim is made); completed commits
//! the integration branch is missing are applied; a completed task is never rerun.

pub mod example;
pub mod from_env;
pub mod git;
pub mod health;
pub mod preflight;
pub mod runner;
mod shared;
mod summary;
pub mod verify;

pub use summary::{Summary, TaskLine, summary};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use strata_engine::ce::ledger::Ledger;
use strata_engine::ce::router::Mode;
use strata_engine::context::assemble::{Inputs, Task as AssemblyTask, TokenCounter, assemble};
use strata_engine::context::prompts;
use strata_engine::context::render::{Level, render};
use strata_engine::context::state::ContextState;
use strata_engine::context::summary::Summaries;
use strata_engine::kb::graph::Graph;
use strata_engine::ports::Clock as _;
use strata_engine::telemetry::state::Telemetry;
use strata_engine::workgroup::dispatch::{self, Brief, CapsuleFacts, Effect, Planned, Routing};
use strata_engine::workgroup::events::RunStart;
use strata_engine::workgroup::events::{self, PromptRef};
use strata_engine::workgroup::plan::Checked;
use strata_engine::workgroup::policy::RolloutCap;
use strata_engine::workgroup::provider::Provider;
use strata_engine::workgroup::state::{Status, WorkerEnd, Workgroup, Workgroups};
use strata_engine::workgroup::{self, decide, judge, step};
use strata_journal::projection::{Projection, catch_up_one, save_one};
use strata_journal::{Journal, StreamAppend};

use crate::config::Config;
use crate::providers::claude_worker::ClaudeProvider;
use crate::providers::codex_worker::CodexProvider;
use crate::providers::sim::SimProvider;
use crate::system::{SystemClock, V7Ids};

/// How a run goes.
#[derive(Clone, Debug)]
pub struct Options {
    /// Replaces every task's provider (`sim`, `claude`, `codex`, `auto`).
    pub provider: Option<String>,
    /// The simulated provider's seed (new workgroups; a resumed one keeps its recorded seed).
    pub seed: u64,
    /// Simulated latency is waited for divided by this (0: not waited).
    pub time_scale: u64,
    /// Print a line per step on stderr.
    pub progress: bool,
    /// Keep a status line (tasks done, running, failed, held; time) redrawn below the steps:
    /// for a terminal.
    pub live: bool,
    /// The repository writing tasks change (default: none; then writers are refused).
    pub repo: Option<PathBuf>,
    /// What a write outside ownership does: `flag` or `stop`.
    pub on_violation: String,
    /// Where prompts and manifests are written.
    pub prompts_dir: PathBuf,
    /// The workspace root (its `.strata/` holds the journal; real workers' hooks and `strata
    /// mcp` reach it through the socket the run serves there).
    pub workspace: PathBuf,
    /// How deep in delegation this run is (0 at the top; `STRATA_NESTING_DEPTH`).
    pub nesting_depth: u64,
    /// What each real provider's installed CLI showed it can do (`fork-session`, `fork`,
    /// `resume`, …), by provider; a provider missing here keeps its declared capabilities.
    pub detected: BTreeMap<String, Vec<String>>,
    /// The rollout a new workgroup's dispatches are decided under (`--rollout NAME`); a resumed
    /// one keeps its recorded rollout.
    pub rollout: Option<String>,
}

/// Refuses `--rollout NAME` for a rollout `journal` does not have, or under a configuration that
/// honours no rollout stage (a guard that cannot decide denies); checked before anything is
/// recorded. Says at which stage the run honours it.
pub fn check_rollout(journal: &Journal, config: &Config, name: &str) -> anyhow::Result<String> {
    let mut rollouts = strata_engine::promotion::rollout::Rollouts::default();
    catch_up_one(&mut rollouts, journal)?;
    let Some(ro) = rollouts.get(name) else {
        anyhow::bail!(
            "[STRATA-E2317] --rollout {name}: no rollout of that name in this journal; start it with `strata rollout start {name} …` or check `strata rollout status`"
        );
    };
    let cap = config.efficiency.rollout;
    if cap == RolloutCap::Off {
        anyhow::bail!(
            "[STRATA-E2318] --rollout {name}: the configuration honours no rollout stage ([context_efficiency] rollout = \"off\"); set rollout to the highest stage runs may honour (observe, shadow, canary or on)"
        );
    }
    Ok(format!(
        "rollout {name} at {} (honoured as {}, a canary exposes at most {}%)",
        ro.stage.as_str(),
        workgroup::rollouts::honoured(ro.stage, cap).as_str(),
        config.efficiency.canary_percent
    ))
}

/// What a run measured about itself.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Measured {
    /// Coordinator time per task (dispatch plus completion handling), microseconds, sorted.
    pub overhead_us: Vec<u64>,
    /// The same per task with the lives of its check processes added (the checks' own time,
    /// which `overhead_us` leaves out as it leaves out the worker's), microseconds, sorted;
    /// empty when no check ran.
    pub with_checks_us: Vec<u64>,
    /// Wall time of the whole run, milliseconds.
    pub elapsed_ms: u64,
    /// The integration branch, when writers ran.
    pub branch: Option<String>,
}

impl Measured {
    /// Median per-task overhead, microseconds.
    pub fn overhead_p50_us(&self) -> Option<u64> {
        lower_median(&self.overhead_us)
    }

    /// Median per-task overhead with the check processes' lives counted, microseconds.
    pub fn with_checks_p50_us(&self) -> Option<u64> {
        lower_median(&self.with_checks_us)
    }
}

/// The lower median of sorted figures.
fn lower_median(sorted: &[u64]) -> Option<u64> {
    (!sorted.is_empty()).then(|| sorted[(sorted.len() - 1) / 2])
}

/// A dispatched attempt the coordinator waits for.
struct InFlight {
    attempt: u32,
    owns: Vec<String>,
    mode: Mode,
    provider: String,
    worktree: Option<PathBuf>,
    overhead: Duration,
    /// When this coordinator dispatched it (the epoch for a worker it took over on resume):
    /// a file outside the worktree changed since then, that the stream shows the worker
    /// writing, is a write that escaped.
    started_at: std::time::SystemTime,
}

/// The coordinator over one open journal.
pub struct Coordinator<'j> {
    journal: &'j Journal,
    config: Config,
    options: Options,
    cursor: u64,
    graph: Graph,
    /// The graph's validation findings, computed the first time a build gate needs them (the
    /// graph does not change during a run).
    findings: Option<Vec<strata_engine::kb::graph::Finding>>,
    summaries: Summaries,
    context: ContextState,
    ledger: Ledger,
    groups: Workgroups,
    telemetry: Telemetry,
    rollouts: strata_engine::promotion::rollout::Rollouts,
    baseline: Option<u64>,
    /// Token counters by model-family factor, kept across tasks: their cache (by text hash)
    /// makes the specifications many prompts share cost one count.
    counters: BTreeMap<u32, TokenCounter>,
    sim: Option<Arc<SimProvider>>,
    claude: Option<Arc<ClaudeProvider>>,
    codex: Option<Arc<CodexProvider>>,
    repo: Option<git::Repo>,
    runtime: tokio::runtime::Runtime,
    in_flight: BTreeMap<String, InFlight>,
    runner: runner::SharedRef,
    /// Coordinator time per attempt closed in this run.
    overheads: BTreeMap<(String, u32), Duration>,
    /// The live status line, when the display is live.
    status: String,
    measured: Measured,
    /// The workgroup's coordinator lease on a shared journal ([`shared`]).
    fence: shared::Fence,
}

/// What task `spec` is assembled as, for lineage `lineage`: its objective, the specifications
/// it follows and the files it may change, under its change request.
pub(crate) fn assembly_task(spec: &strata_engine::workgroup::plan::TaskSpec, lineage: &str) -> AssemblyTask {
    let mut objective = spec.objective.clone();
    if !spec.specs.is_empty() {
        objective.push_str(&format!("\n\nSpecifications to follow: {}.", spec.specs.join(", ")));
    }
    if !spec.owns.is_empty() {
        objective.push_str(&format!("\n\nYou may change only: {}.", spec.owns.join(", ")));
    }
    AssemblyTask { id: lineage.to_owned(), objective, plan: spec.change_request.clone() }
}

impl<'j> Coordinator<'j> {
    /// Loads every state the run reads from `journal`.
    pub fn open(journal: &'j Journal, mut config: Config, options: Options) -> anyhow::Result<Coordinator<'j>> {
        config.efficiency.models = from_env::pin_models(std::mem::take(&mut config.efficiency.models));
        crate::app::kb::register_builtin(journal).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut graph = crate::app::kb::load_graph(journal)?;
        let summaries = Summaries::build(&mut graph);
        let mut c = Coordinator {
            journal,
            config,
            options,
            cursor: 0,
            graph,
            findings: None,
            summaries,
            context: ContextState::default(),
            ledger: Ledger::default(),
            groups: Workgroups::default(),
            telemetry: Telemetry::default(),
            rollouts: Default::default(),
            baseline: None,
            counters: BTreeMap::new(),
            sim: None,
            claude: None,
            codex: None,
            repo: None,
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("cannot start the worker runtime")?,
            in_flight: BTreeMap::new(),
            runner: runner::SharedRef::default(),
            overheads: BTreeMap::new(),
            status: String::new(),
            measured: Measured::default(),
            fence: shared::Fence::default(),
        };
        let head = journal.head().seq;
        catch_up_one(&mut c.context, journal)?;
        catch_up_one(&mut c.ledger, journal)?;
        catch_up_one(&mut c.groups, journal)?;
        catch_up_one(&mut c.telemetry, journal)?;
        catch_up_one(&mut c.rollouts, journal)?;
        c.cursor = head;
        Ok(c)
    }

    /// Applies what was appended since the last look to every state.
    fn follow(&mut self) -> anyhow::Result<()> {
        let journal = self.journal;
        let head = journal.head().seq;
        let mut cursor = self.cursor;
        let mut states: [&mut dyn Projection; 5] =
            [&mut self.context, &mut self.ledger, &mut self.groups, &mut self.telemetry, &mut self.rollouts];
        journal.scan(cursor + 1, head, |r, _| {
            for s in states.iter_mut() {
                s.apply(r).map_err(|e| anyhow::anyhow!("{}: {e}", s.name()))?;
            }
            cursor = r.seq;
            Ok::<bool, anyhow::Error>(true)
        })??;
        self.cursor = cursor;
        Ok(())
    }

    fn commit(&mut self, appends: Vec<StreamAppend>) -> anyhow::Result<()> {
        shared::commit(self, appends)
    }

    fn group(&self, wg: &str) -> anyhow::Result<&Workgroup> {
        self.groups.get(wg).ok_or_else(|| workgroup::WorkgroupError::Unknown(wg.to_owned()).into())
    }

    /// Records a new workgroup's plan.
    pub fn plan(&mut self, plan: Checked) -> anyhow::Result<String> {
        let wg = plan.workgroup.clone();
        // What the run starts on, so that `--resume` is the same run: the provider for every
        // task (`auto` resolved now), the repository and the commit its branch starts from.
        let provider = self.options.provider.as_deref().map(|p| if p == "auto" { from_env::auto() } else { p });
        let (repo, base) = match self.options.repo.as_deref().and_then(git::top_and_head) {
            Some((top, head)) => {
                let top = std::fs::canonicalize(&top).unwrap_or(top);
                (Some(top.display().to_string()), Some(head))
            }
            None => (None, None),
        };
        let started =
            RunStart { provider: provider.map(str::to_owned), repo, base, rollout: self.options.rollout.clone() };
        self.options.provider = started.provider.clone();
        let policy = &self.config.efficiency;
        let append =
            decide::plan_started(&self.groups, plan, self.options.seed, started, policy, &mut V7Ids, &SystemClock)?;
        self.commit(vec![append])?;
        self.progress(format_args!("{}", self.config.efficiency.describe()));
        Ok(wg)
    }

    /// Makes this run continue `wg` as it was started: its recorded provider and repository.
    /// A `--provider` or `--repo` given now (`given_*`) must name the same ones.
    pub fn resume_as(
        &mut self,
        wg: &str,
        given_provider: Option<&str>,
        given_repo: Option<&Path>,
    ) -> anyhow::Result<()> {
        let g = self.groups.get(wg).ok_or_else(|| strata_engine::workgroup::WorkgroupError::Unknown(wg.to_owned()))?;
        let started = g.started.clone();
        let recorded = started.provider.as_deref();
        if let Some(given) = given_provider {
            let given = if given == "auto" { from_env::auto() } else { given };
            if Some(given) != recorded {
                anyhow::bail!(
                    "[STRATA-E2010] --provider {given}: workgroup {wg} was started {}; a resumed run keeps its provider (drop --provider)",
                    recorded.map_or("with each task's own provider".to_owned(), |p| format!("on provider {p}"))
                );
            }
        }
        if let Some(repo) = &started.repo {
            if let Some(given) = given_repo {
                let top = git::top_and_head(given).map(|(t, _)| std::fs::canonicalize(&t).unwrap_or(t));
                if top.as_deref() != Some(Path::new(repo)) {
                    anyhow::bail!(
                        "[STRATA-E2011] --repo {}: workgroup {wg} was started on the repository {repo}; a resumed run keeps its repository (drop --repo)",
                        given.display()
                    );
                }
            }
            self.options.repo = Some(PathBuf::from(repo));
        }
        self.options.provider = started.provider;
        // A resumed run works under the configuration as it is now; a change is its own event.
        let g = self.group(wg)?;
        if let Some(append) = decide::policy_changed(g, &self.config.efficiency, &mut V7Ids, &SystemClock)? {
            let from = g.policy.profile.as_str();
            self.commit(vec![append])?;
            self.progress(format_args!(
                "policy changed (profile {from} before): {}",
                self.config.efficiency.describe()
            ));
        }
        // A paused workgroup continues: a person acted. One still over its cap pauses again.
        let g = self.group(wg)?;
        if let Some(append) = decide::unpaused(g, &mut V7Ids, &SystemClock)? {
            let reason = g.paused.as_ref().map_or("", |p| p.reason.as_str());
            self.commit(vec![append])?;
            self.progress(format_args!("continuing after the pause ({reason})"));
        }
        Ok(())
    }

    /// The workgroups in the journal.
    pub fn groups(&self) -> &Workgroups {
        &self.groups
    }

    fn provider(&mut self, name: &str, seed: u64) -> anyhow::Result<Arc<dyn Provider>> {
        match name {
            "sim" => {
                let sim = self.sim.get_or_insert_with(|| Arc::new(SimProvider::new(seed, self.options.time_scale)));
                Ok(sim.clone())
            }
            "claude" => {
                let state = self.options.workspace.join(".strata").join("workers");
                let depth = self.options.nesting_depth;
                Ok(self.claude.get_or_insert_with(|| Arc::new(from_env::claude(state, depth))).clone())
            }
            "codex" => {
                let state = self.options.workspace.join(".strata").join("workers");
                let depth = self.options.nesting_depth;
                Ok(self.codex.get_or_insert_with(|| Arc::new(from_env::codex(state, depth))).clone())
            }
            "auto" => self.provider(from_env::auto(), seed),
            other => anyhow::bail!("[STRATA-E1724] no provider {other}; use sim, claude, codex or auto"),
        }
    }

    fn baseline(&mut self, factor: u32) -> u64 {
        let tc = self.counters.entry(factor).or_insert_with(|| TokenCounter::new(factor));
        *self.baseline.get_or_insert_with(|| {
            self.graph
                .artifacts()
                .iter()
                .filter(|n| n.key.kind.is_spec())
                .map(|n| tc.count(&render(n, Level::L1)) as u64)
                .sum()
        })
    }

    /// Runs workgroup `wg` until every task is completed, failed or held.
    pub fn run(&mut self, wg: &str) -> anyhow::Result<Measured> {
        let started = Instant::now();
        let g = self.group(wg)?.clone();
        if g.finished {
            self.measured.elapsed_ms = 0;
            return Ok(self.measured.clone());
        }
        shared::take_lease(self, wg)?;
        // Every provider the plan names, for the runner; a stopped run's dispatches name theirs.
        let mut providers: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        let named = g.plan.tasks.iter().map(|t| self.options.provider.clone().or(t.spec.provider.clone()));
        let recorded = g.tasks.values().filter_map(|s| s.dispatch.as_ref().map(|(_, d)| Some(d.provider.clone())));
        for name in named.chain(recorded).collect::<Vec<_>>() {
            let p = self.provider(&name.unwrap_or_else(|| "sim".into()), g.seed)?;
            providers.insert(p.name().to_owned(), p);
        }
        let real = providers.keys().any(|p| p != "sim");
        // Real workers' hooks and `strata mcp` reach the journal this run holds through the
        // workspace's socket, served for as long as the run lasts.
        let served = if real {
            let (stop, stopped) = tokio::sync::oneshot::channel();
            let ws = crate::app::workspace::Workspace::at(&self.options.workspace);
            let task = self.runtime.spawn(crate::daemon::listen(ws, self.journal.clone(), stopped));
            Some((stop, task))
        } else {
            None
        };
        let result = self.prepare(wg).and_then(|()| {
            let setup = runner::Setup {
                prompts_dir: self.options.prompts_dir.clone(),
                repo_root: self.repo.as_ref().map(|r| r.root().to_path_buf()),
                workspace: self.options.workspace.clone(),
                cwd: std::env::current_dir().context("no current directory")?,
            };
            let r = runner::Runner::new(
                self.journal.clone(),
                wg,
                self.groups.clone(),
                providers,
                setup,
                self.runner.clone(),
            );
            let (stop, stopped) = tokio::sync::oneshot::channel();
            let task = self.runtime.spawn(r.run(self.cursor + 1, stopped));
            let result = self.run_tasks(wg, started);
            // A run that stopped early still waits for the worktrees it was removing (one that
            // ended has waited in `Repo::close`); their errors matter only to a run that succeeded.
            if let (Err(_), Some(repo)) = (&result, &self.repo) {
                let _ = repo.wait_for_removals();
            }
            let _ = stop.send(());
            let _ = self.runtime.block_on(task);
            // Per attempt closed in this run: the coordinator's time plus the runner's.
            let runner = std::mem::take(&mut self.runner.lock().unwrap_or_else(PoisonError::into_inner).overhead);
            let mut checks = BTreeMap::new();
            for (attempt, spent) in runner {
                if let Some(t) = self.overheads.get_mut(&attempt) {
                    *t += spent.own;
                    if !spent.checks.is_zero() {
                        checks.insert(attempt, *t + spent.checks);
                    }
                }
            }
            let sorted_us = |ds: Vec<Duration>| {
                let mut us: Vec<u64> = ds.iter().map(|d| d.as_micros() as u64).collect();
                us.sort_unstable();
                us
            };
            self.measured.overhead_us = sorted_us(self.overheads.values().copied().collect());
            // Only where checks ran: a run without them has one figure.
            self.measured.with_checks_us = if checks.is_empty() {
                Vec::new()
            } else {
                sorted_us(self.overheads.iter().map(|(a, d)| checks.get(a).copied().unwrap_or(*d)).collect())
            };
            result.map(|_| self.measured.clone())
        });
        if let Some((stop, task)) = served {
            let _ = stop.send(());
            let _ = self.runtime.block_on(task);
        }
        shared::release_lease(self, result)
    }

    /// Opens the repository writers change, applies what a stopped run completed and the
    /// integration branch misses, and waits again for the attempts it left in flight.
    fn prepare(&mut self, wg: &str) -> anyhow::Result<()> {
        let g = self.group(wg)?.clone();
        if g.plan.tasks.iter().any(|t| t.writer) {
            let dir = self.options.repo.clone().ok_or_else(|| {
                anyhow::anyhow!(
                    "[STRATA-E1722] the plan has writing tasks; give the repository they change with --repo DIR"
                )
            })?;
            let repo = git::Repo::open(&dir, &self.options.workspace, wg)?;
            self.measured.branch = Some(repo.branch().to_owned());
            self.repo = Some(repo);
            self.reconcile(wg)?;
        }
        for t in &g.plan.tasks {
            let Some(s) = g.tasks.get(t.id()) else { continue };
            let Some((_, d)) = s.dispatch.as_ref().filter(|_| matches!(s.status, Status::Dispatched | Status::Running))
            else {
                continue;
            };
            let worktree = match (&self.repo, t.writer) {
                (Some(_), true) => Some(git::worktree_path(&self.options.workspace, wg, t.id(), d.attempt)),
                _ => None,
            };
            let flight = InFlight {
                attempt: d.attempt,
                owns: t.spec.owns.clone(),
                mode: d.runs_as,
                provider: d.provider.clone(),
                worktree,
                overhead: Duration::ZERO,
                started_at: std::time::SystemTime::UNIX_EPOCH,
            };
            self.in_flight.insert(t.id().to_owned(), flight);
        }
        Ok(())
    }

    fn run_tasks(&mut self, wg: &str, started: Instant) -> anyhow::Result<Measured> {
        workgroup::driver::run(&mut Looping { c: self, wg, started })?;
        if self.options.live && self.options.progress {
            err!(crate::output::Out::process(), "\r\x1b[2K");
            self.status.clear();
        }
        if let Some(repo) = &self.repo {
            repo.close()?;
        }
        for p in [&self.context as &dyn Projection, &self.ledger, &self.groups, &self.telemetry] {
            save_one(p, self.journal, self.cursor)?;
        }
        self.measured.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(self.measured.clone())
    }

    /// Follows the journal until it shows the end of at least one attempt in flight (those ends),
    /// or until `wake_at_ns`, when a task's retry backoff runs out (no ends).
    fn await_ends(
        &mut self,
        wg: &str,
        started: Instant,
        wake_at_ns: Option<i64>,
    ) -> anyhow::Result<Vec<(String, WorkerEnd)>> {
        loop {
            shared::keep_lease(self)?;
            self.redraw(wg, started);
            let g = self.group(wg)?;
            let ended: Vec<(String, WorkerEnd)> = self
                .in_flight
                .iter()
                .filter_map(|(id, f)| {
                    let t = g.tasks.get(id).filter(|t| t.attempts == f.attempt)?;
                    Some((id.clone(), t.worker_end.clone()?))
                })
                .collect();
            let (notes, errors) = {
                let mut s = self.runner.lock().unwrap_or_else(PoisonError::into_inner);
                (std::mem::take(&mut s.notes), std::mem::take(&mut s.errors))
            };
            for n in notes {
                self.progress(format_args!("{n}"));
            }
            if !errors.is_empty() {
                anyhow::bail!(
                    "[STRATA-E1726] a worker's start or end could not be recorded: {}; fix that, then continue with --resume",
                    errors.join("; ")
                );
            }
            let now = SystemClock.now_ns();
            if !ended.is_empty() || wake_at_ns.is_some_and(|at| at <= now) {
                return Ok(ended);
            }
            let until_wake = wake_at_ns.map_or(u64::MAX, |at| at.saturating_sub(now).unsigned_abs());
            let wait = Duration::from_millis(250).min(Duration::from_nanos(until_wake));
            self.journal.wait_for_head_timeout(self.cursor + 1, wait);
            self.follow()?;
        }
    }

    fn progress(&self, line: std::fmt::Arguments<'_>) {
        if !self.options.progress {
            return;
        }
        if self.options.live {
            // The status line is cleared, the step printed above it, the status line redrawn.
            err!(crate::output::Out::process(), "\r\x1b[2K  {line}\n{}", self.status);
        } else {
            errln!(crate::output::Out::process(), "  {line}");
        }
    }

    /// Redraws the live status line of workgroup `wg` (a terminal only).
    fn redraw(&mut self, wg: &str, started: Instant) {
        if !(self.options.progress && self.options.live) {
            return;
        }
        let Some(g) = self.groups.get(wg) else { return };
        let running = g.count(Status::Dispatched) + g.count(Status::Running);
        let now = SystemClock.now_ns();
        let backing_off = g.tasks.values().filter(|t| t.not_before_ns().is_some_and(|at| at > now)).count();
        let waiting = if backing_off > 0 { format!(" · {backing_off} waiting to retry") } else { String::new() };
        let caps = strata_engine::workgroup::caps::for_workgroup(g);
        let spent = if caps.is_empty() {
            String::new()
        } else {
            format!(
                " · {}",
                strata_engine::workgroup::caps::against(&caps, &strata_engine::workgroup::caps::workgroup_spend(g))
            )
        };
        self.status = format!(
            "  [{wg}] {}/{} completed · {running} running{waiting} · {} failed · {} held{spent} · {:.1} s",
            g.count(Status::Completed),
            g.tasks.len(),
            g.count(Status::Failed) + g.count(Status::Conflicted),
            g.count(Status::Held),
            started.elapsed().as_secs_f64()
        );
        err!(crate::output::Out::process(), "\r\x1b[2K{}", self.status);
    }

    /// Routes, assembles, claims and records task `id` through the engine's one dispatch
    /// decision ([`dispatch::route`], then [`dispatch::Cleared::brief`] once its prompt is
    /// assembled), carries out its effects, then appends; the runner starts its worker.
    fn dispatch(&mut self, wg: &str, id: &str) -> anyhow::Result<()> {
        let began = Instant::now();
        let g = self.group(wg)?;
        let t = g.plan.task(id).ok_or_else(|| anyhow::anyhow!("no task {id} in workgroup {wg}"))?.clone();
        let attempt =
            g.tasks.get(id).map(|s| s.attempts).ok_or_else(|| anyhow::anyhow!("no task {id} in workgroup {wg}"))? + 1;
        let seed = g.seed;
        let lineage = workgroup::lineage_id(wg, id);
        let provider_name = self.options.provider.clone().or(t.spec.provider.clone()).unwrap_or_else(|| "sim".into());
        let prior = step::prior(self.group(wg)?, &t);
        let provider = self.provider(&provider_name, seed)?;
        let provider_name = provider.name().to_owned();
        let mut caps = provider.capabilities();
        // A fork only where the installed CLI shows one (`--fork-session`, `fork`).
        if let Some(shown) = self.options.detected.get(&provider_name) {
            caps.fork &= shown.iter().any(|c| c == "fork-session" || c == "fork");
        }

        // The capsule facts of the task continued, as they stand now.
        let mut prior_facts = prior.as_ref().map(|(prior_lineage, _, prior_id, _)| {
            self.capsule_facts(wg, prior_id, prior_lineage).map_err(|e| format!("{e:#}"))
        });
        // A real worker starts its own knowledge server: probed first, unless a healthy probe is
        // fresh (or a failed one is for this phase).
        let attaches_knowledge = matches!(provider_name.as_str(), "claude" | "codex");
        if attaches_knowledge {
            self.probe_knowledge(wg, strata_engine::workgroup::plan::PHASES[t.phase])?;
        }
        // What the knowledge base (as this run loaded it) says of the change request it implements.
        let build_facts = t.spec.change_request.as_deref().map(|cr| {
            let findings = self.findings.get_or_insert_with(|| self.graph.validate());
            strata_engine::workgroup::gates::build_facts(&self.graph, findings, cr)
        });
        let req = dispatch::Request {
            group: self.group(wg)?,
            ledger: &self.ledger,
            task: &t,
            provider: &provider_name,
            caps: &caps,
            now_ns: SystemClock.now_ns(),
            nesting_depth: self.options.nesting_depth,
            hold_fix: "release it (`strata ce --journal DIR release`) and run --resume",
            build_facts: build_facts.as_ref(),
            skip_reconcile: false,
            rollout: self
                .group(wg)?
                .started
                .rollout
                .as_deref()
                .filter(|_| self.group(wg).is_ok_and(|g| g.policy.rollout != RolloutCap::Off))
                .and_then(|name| self.rollouts.get(name)),
            attaches_knowledge,
        };
        let routing = dispatch::route(
            req,
            &mut |_, _| prior_facts.take().unwrap_or_else(|| Err("no task it continues".to_owned())),
            &mut V7Ids,
            &SystemClock,
        )?;
        let cleared = match routing {
            Routing::Held { appends, held } => return self.hold(appends, &held),
            Routing::Cleared(c) => c,
        };
        // The prompt its phase was planned with, read back from its file (the planning gate then
        // checks it is that one); read only for an attempt no claim blocks.
        let (assembly, factor) = self.planned_prompt(wg, &t, &lineage)?;
        // A retry: the planned prompt with what the earlier attempts did, where its profile asks
        // for the continuation status.
        let (assembly, planned_as) = self.with_continuation(wg, &t, attempt, assembly)?;
        let brief = Brief {
            prompt: PromptRef {
                prompt_task: lineage.clone(),
                prompt_hash: assembly.manifest.prompt_hash.clone(),
                tokens: assembly.manifest.total_tokens as u64,
            },
            prompt_text: assembly.prompt.clone(),
            baseline_tokens: self.baseline(factor),
            facts: self.facts_of(&assembly),
            planned_as,
        };
        let d = match cleared.brief(self.group(wg)?, &t, brief, &mut V7Ids, &SystemClock)? {
            Planned::Held { appends, held } => return self.hold(appends, &held),
            Planned::Dispatch(d) => d,
        };
        for n in &d.notes {
            self.progress(format_args!("{n}"));
        }

        // The effects, before the append: the prompt with its bill of materials, the writer's
        // worktree, the capsule and the worker's input. With the prompt and manifest, the input
        // is the planning gate: no worker starts without all three.
        let prompt_path = self.options.prompts_dir.join(wg).join(format!("{id}.{attempt}.prompt.md"));
        let manifest_path = prompt_path.with_extension("manifest.json");
        if let Some(parent) = prompt_path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let write = crate::files::write_replacing;
        write(&prompt_path, assembly.prompt.as_bytes())
            .with_context(|| format!("cannot write {}", prompt_path.display()))?;
        write(&manifest_path, &serde_json::to_vec_pretty(&assembly.manifest)?)
            .with_context(|| format!("cannot write {}", manifest_path.display()))?;
        let prompt_append =
            prompts::record(&assembly.manifest, &mut V7Ids, &SystemClock).map_err(anyhow::Error::msg)?;
        let input = runner::input_path(&self.options.prompts_dir, wg, id, attempt);
        let mut worktree = None;
        for effect in &d.effects {
            match effect {
                Effect::Worktree => {
                    if let Some(repo) = &self.repo {
                        worktree = Some(repo.worktree(id, attempt)?);
                    }
                }
                Effect::Capsule(text) => write(&prompt_path.with_extension("capsule.json"), text.as_bytes())
                    .with_context(|| format!("cannot write the capsule beside {}", prompt_path.display()))?,
                Effect::Input(text) => {
                    write(&input, text.as_bytes()).with_context(|| format!("cannot write {}", input.display()))?
                }
            }
        }
        if !prompt_path.exists() || !manifest_path.exists() || !input.exists() {
            anyhow::bail!(
                "[STRATA-E1725] task {id}: its prompt, manifest or input is missing; no worker starts without all three"
            );
        }
        // The planning gate, read back from disk: the prompt passes `prompt verify`'s file check
        // against its manifest, and the manifest is the one assembled, before any worker starts.
        let verified = std::fs::read(&prompt_path).ok().zip(std::fs::read(&manifest_path).ok()).map(|(p, m)| {
            let m: Option<strata_engine::context::assemble::Manifest> = serde_json::from_slice(&m).ok();
            match m {
                Some(m) if m == assembly.manifest => prompts::prompt_problem(&m, &p),
                _ => Some("the manifest on disk is not the one assembled".to_owned()),
            }
        });
        if let Some(problem) = verified.unwrap_or_else(|| Some("it cannot be read back".to_owned())) {
            anyhow::bail!(
                "[STRATA-E1725] task {id}: its prompt {} does not verify: {problem}; no worker starts on it",
                prompt_path.display()
            );
        }
        let runs_as = d.runs_as;
        self.in_flight.insert(
            id.to_owned(),
            InFlight {
                attempt,
                owns: t.spec.owns.clone(),
                mode: runs_as,
                provider: provider_name.clone(),
                worktree,
                overhead: Duration::ZERO,
                started_at: std::time::SystemTime::now(),
            },
        );
        let mut appends = d.appends;
        appends.insert(1, prompt_append);
        self.commit(appends)?;
        self.progress(format_args!(
            "{id}: dispatched to {provider_name} as {} ({}), prompt {} tokens",
            runs_as.as_str(),
            d.dispatched.reason_codes.join(", "),
            d.dispatched.prompt.tokens
        ));
        if let Some(f) = self.in_flight.get_mut(id) {
            f.overhead = began.elapsed();
        }
        Ok(())
    }

    /// Commits a hold and says so.
    fn hold(&mut self, appends: Vec<StreamAppend>, held: &events::Held) -> anyhow::Result<()> {
        self.commit(appends)?;
        self.progress(format_args!("{}: held, {}", held.task, held.reason));
        Ok(())
    }

    /// The capsule facts of a prompt assembled now: the knowledge it was assembled from, and the
    /// integration tip.
    fn facts_of(&self, assembly: &strata_engine::context::assemble::Assembly) -> CapsuleFacts {
        CapsuleFacts {
            knowledge: Some(assembly.manifest.knowledge_digest()),
            checkpoint: self.repo.as_ref().and_then(|r| r.tip().ok()),
            ..CapsuleFacts::default()
        }
    }

    /// The capsule facts of the completed task `prior` (run as `lineage`) as they stand now: its
    /// prompt reassembled at the head.
    fn capsule_facts(&mut self, wg: &str, prior: &str, lineage: &str) -> anyhow::Result<CapsuleFacts> {
        let t = self.group(wg)?.plan.task(prior).cloned().ok_or_else(|| anyhow::anyhow!("no task {prior} in {wg}"))?;
        let (assembly, _) = self.assemble_prompt(&t, lineage)?;
        Ok(self.facts_of(&assembly))
    }

    /// Where the prompt (and beside it the manifest) of `task` is written when its phase is
    /// planned.
    fn planned_path(&self, wg: &str, task: &str) -> PathBuf {
        self.options.prompts_dir.join(wg).join("planned").join(format!("{task}.prompt.md"))
    }

    /// The planning gate's work for `phase`: the prompt of each of its tasks assembled, written
    /// under `.strata/prompts/<wg>/planned/` with its manifest, read back and put through `prompt
    /// verify` (re-assembled from the journal at its position, byte for byte, one replay of the
    /// graph for the phase), then recorded.
    fn plan_phase(&mut self, wg: &str, phase: &'static str) -> anyhow::Result<()> {
        use strata_engine::workgroup::gates::{PhasePlanned, PlannedPrompt};
        use strata_engine::workgroup::plan::PHASES;
        let tasks: Vec<_> = self.group(wg)?.plan.tasks.iter().filter(|t| PHASES[t.phase] == phase).cloned().collect();
        let (mut prompts, mut problems, mut written) = (Vec::new(), Vec::new(), Vec::new());
        for t in &tasks {
            let lineage = workgroup::lineage_id(wg, t.id());
            let assembly = match self.assemble_prompt(t, &lineage) {
                Ok((a, _)) => a,
                Err(e) => {
                    problems.push(format!("{}: its prompt cannot be assembled: {e:#}", t.id()));
                    continue;
                }
            };
            let path = self.planned_path(wg, t.id());
            let manifest = path.with_extension("manifest.json");
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
            }
            crate::files::write_replacing(&path, assembly.prompt.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            crate::files::write_replacing(&manifest, &serde_json::to_vec_pretty(&assembly.manifest)?)
                .with_context(|| format!("cannot write {}", manifest.display()))?;
            prompts.push(PlannedPrompt {
                task: t.id().to_owned(),
                prompt: PromptRef {
                    prompt_task: lineage,
                    prompt_hash: assembly.manifest.prompt_hash.clone(),
                    tokens: assembly.manifest.total_tokens as u64,
                },
                position: assembly.manifest.position,
            });
            written.push((t.id().to_owned(), path));
        }
        // `prompt verify` on what is on disk now, not on what was meant to be written.
        let mut read = Vec::new();
        for (task, path) in &written {
            match self.read_planned(path) {
                Ok(a) => read.push((task.clone(), a)),
                Err(e) => problems.push(format!("{task}: {e:#}")),
            }
        }
        let items: Vec<_> = read.iter().map(|(_, a)| (&a.manifest, a.prompt.as_bytes())).collect();
        let verified = prompts::verify_all(self.journal, &items).map_err(anyhow::Error::msg)?;
        for ((task, _), found) in read.iter().zip(verified) {
            problems.extend(found.into_iter().map(|p| format!("{task}: its prompt does not verify: {p}")));
        }
        problems.truncate(strata_engine::workgroup::gates::REASONS_MAX);
        let passed = problems.is_empty();
        let x = PhasePlanned { phase: phase.to_owned(), prompts, problems };
        let append = decide::phase_planned(self.group(wg)?, &x, &mut V7Ids, &SystemClock)?;
        self.commit(vec![append])?;
        if !passed {
            self.progress(format_args!("the {phase} phase's prompts do not all verify; its tasks are held"));
        }
        Ok(())
    }

    /// A planned prompt and its manifest, read back from disk.
    fn read_planned(&self, path: &Path) -> anyhow::Result<strata_engine::context::assemble::Assembly> {
        let max = crate::cli::context::DOC_BYTES_MAX;
        let prompt = crate::files::read_text_bounded(path, max, "planned prompt")?;
        let manifest = path.with_extension("manifest.json");
        let bytes = crate::files::read_bounded(&manifest, max, "planned manifest")?;
        let manifest: strata_engine::context::assemble::Manifest = serde_json::from_slice(&bytes)
            .with_context(|| format!("[STRATA-E1725] {} is not a context manifest", manifest.display()))?;
        // The bytes must be the ones the manifest describes: an edited planned prompt is not the
        // one its phase verified.
        if let Some(problem) = prompts::prompt_problem(&manifest, prompt.as_bytes()) {
            anyhow::bail!("[STRATA-E1725] {}: {problem}", path.display());
        }
        Ok(strata_engine::context::assemble::Assembly { prompt, manifest })
    }

    /// The prompt `t`'s phase was planned with, read back from its file, with its token factor;
    /// where the file cannot be read, assembled again (then the planning gate holds the task,
    /// since a prompt assembled later differs from the one verified).
    fn planned_prompt(
        &mut self,
        wg: &str,
        t: &strata_engine::workgroup::plan::Task,
        lineage: &str,
    ) -> anyhow::Result<(strata_engine::context::assemble::Assembly, u32)> {
        let path = self.planned_path(wg, t.id());
        match self.read_planned(&path) {
            Ok(a) => {
                let factor = a.manifest.factor_milli;
                Ok((a, factor))
            }
            Err(e) => {
                // Assembled again at the position its phase was planned at (another machine on a
                // shared journal has no copy of the file): the same prompt while the knowledge
                // base and profile are as they were, else one the planning gate holds.
                // A file that is there but does not read as planned (edited) is assembled at the
                // head instead, which the gate holds.
                let missing = std::fs::symlink_metadata(&path).is_err();
                let at = self
                    .group(wg)?
                    .planned
                    .values()
                    .flat_map(|p| &p.prompts)
                    .find(|p| p.task == t.id())
                    .map(|p| p.position)
                    .filter(|p| *p > 0 && missing);
                self.progress(format_args!("{}: its planned prompt cannot be read ({e:#}); assembled again", t.id()));
                self.assemble_prompt_at(t, lineage, at)
            }
        }
    }

    /// The prompt of attempt `attempt` of `t`: for a retry, `planned` assembled again as `prompt
    /// verify` re-assembles it (the graph replayed to its position, its profile version, task and
    /// token factor) with the continuation status (what the task's earlier attempts did, read
    /// from the journal at its head), and the hash of the planned prompt it extends; `planned`
    /// itself for a first attempt, or when its profile does not ask for the status.
    fn with_continuation(
        &mut self,
        wg: &str,
        t: &strata_engine::workgroup::plan::Task,
        attempt: u32,
        planned: strata_engine::context::assemble::Assembly,
    ) -> anyhow::Result<(strata_engine::context::assemble::Assembly, Option<String>)> {
        if attempt <= 1 {
            return Ok((planned, None));
        }
        let head = self.journal.head().seq;
        let read = strata_engine::context::continuation::read(self.journal, wg, t.id(), head);
        let Some(c) = read.map_err(anyhow::Error::msg)? else { return Ok((planned, None)) };
        let m = &planned.manifest;
        let Some(profile) = self.context.profiles.version(&m.profile, m.profile_version).cloned() else {
            return Ok((planned, None));
        };
        let Some(position_hash) = self.journal.hash_at(m.position)? else { return Ok((planned, None)) };
        let mut g = strata_engine::kb::graph::Graph::at(self.journal, m.position).map_err(anyhow::Error::msg)?;
        let summaries = strata_engine::context::summary::Summaries::build(&mut g);
        let task =
            AssemblyTask { id: m.task.id.clone(), objective: m.task.objective.clone(), plan: m.task.plan.clone() };
        let inputs = Inputs {
            graph: &g,
            summaries: &summaries,
            profile: &profile,
            profile_version: m.profile_version,
            task: &task,
            position: m.position,
            position_hash,
            continuation: Some(&c),
        };
        let a = assemble(&inputs, &mut TokenCounter::new(m.factor_milli))
            .with_context(|| format!("task {}: assembling its retry's prompt", t.id()))?;
        if a.manifest.prompt_hash == planned.manifest.prompt_hash {
            return Ok((planned, None));
        }
        let base = a.manifest.continuation.as_ref().map(|c| c.base_prompt_hash.clone());
        Ok((a, base))
    }

    /// The prompt of `t` for lineage `lineage`, assembled at the journal's head, with the token
    /// factor of its profile's model.
    fn assemble_prompt(
        &mut self,
        t: &strata_engine::workgroup::plan::Task,
        lineage: &str,
    ) -> anyhow::Result<(strata_engine::context::assemble::Assembly, u32)> {
        self.assemble_prompt_at(t, lineage, None)
    }

    /// [`Self::assemble_prompt`] at journal position `at` (default: the head).
    fn assemble_prompt_at(
        &mut self,
        t: &strata_engine::workgroup::plan::Task,
        lineage: &str,
        at: Option<u64>,
    ) -> anyhow::Result<(strata_engine::context::assemble::Assembly, u32)> {
        let id = t.id();
        let profile_name = t.spec.profile.clone().unwrap_or_else(|| "backend-developer".into());
        let Some((profile_version, profile)) = self.context.profiles.latest(&profile_name).map(|(v, p)| (v, p.clone()))
        else {
            anyhow::bail!(
                "[STRATA-E0905] task {id}: profile {profile_name} is not registered (`strata profile register`)"
            );
        };
        let factor = self.config.token_factor(&profile.model);
        let task = assembly_task(&t.spec, lineage);
        let mut head = self.journal.head();
        if let Some(seq) = at
            && let Some(hash) = self.journal.hash_at(seq)?
        {
            head.seq = seq;
            head.hash = hash;
        }
        let inputs = Inputs::at_head(&self.graph, &self.summaries, &profile, profile_version, &task, &head);
        let tc = self.counters.entry(factor).or_insert_with(|| TokenCounter::new(factor));
        let assembly = assemble(&inputs, tc).with_context(|| format!("task {id}: assembling its prompt"))?;
        Ok((assembly, factor))
    }

    /// Judges the attempt whose worker ended: the post-turn diff check, then the task's
    /// completion or failure with the release of its files and its usage, in one append.
    fn finish_task(&mut self, wg: &str, id: &str, end: WorkerEnd) -> anyhow::Result<()> {
        let began = Instant::now();
        let Some(flight) = self.in_flight.remove(id) else { return Ok(()) };
        let attempt = flight.attempt;
        // Denials other hooks had to defer (this process stopped or busy) go in first, so the
        // stream's writes are judged against every recorded denial.
        self.journal.fold_pending()?;
        self.follow()?;
        // What the edge observes: writes that escaped the guard, and the worktree's diff.
        let escaped = self.escapes(wg, id, &flight, &end.ended.writes);
        let changes = match (&self.repo, flight.worktree.as_ref().filter(|t| t.is_dir())) {
            (Some(repo), Some(tree)) => {
                let dispatched = self.group(wg)?.tasks.get(id).and_then(|t| t.dispatch.as_ref());
                let message =
                    git::commit_message(wg, id, attempt, dispatched.map(|(s, d)| (*s, d.prompt.prompt_hash.as_str())));
                let c = repo.collect(tree, &message)?;
                Some(judge::Changes { files: c.files, commit: c.commit })
            }
            _ => None,
        };
        // A capped attempt's partial work is kept as an artifact (its diff), never integrated.
        let capped =
            self.group(wg)?.tasks.get(id).and_then(|t| t.capped.as_ref()).is_some_and(|c| c.attempt == attempt);
        let partial = match (&self.repo, &changes) {
            (Some(repo), Some(judge::Changes { commit: Some(commit), .. })) if capped => {
                Some(self.keep_partial(repo, wg, id, attempt, commit)?)
            }
            _ => None,
        };
        let denials = self.denials_of(wg, id);
        let sim = flight.provider == "sim";
        let time_scale = self.options.time_scale;
        let judged = judge::judge(
            judge::Ending {
                group: self.group(wg)?,
                ledger: &self.ledger,
                telemetry: &self.telemetry,
                task: id,
                attempt,
                owns: &flight.owns,
                mode: flight.mode,
                provider: &flight.provider,
                end: &end,
                observed: judge::Observed { escaped, changes, partial, denials },
                on_violation: &self.options.on_violation,
                keeps_warm: self.resumes(&flight.provider),
                now_ns: SystemClock.now_ns(),
            },
            // A simulated worker's backoff passes like its latency: divided by the time scale.
            |ms| if sim { ms.checked_div(time_scale).unwrap_or(0) } else { ms },
            &mut V7Ids,
            &SystemClock,
        )?;
        // The handoff file first: the completion that names it is appended only once it exists.
        if let Some((path, text)) = &judged.handoff {
            let file = self.options.workspace.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
            }
            crate::files::write_replacing(&file, text.as_bytes())
                .with_context(|| format!("cannot write the handoff {}", file.display()))?;
        }
        self.commit(judged.appends)?;
        for n in &judged.notes {
            self.progress(format_args!("{n}"));
        }
        if let (Some(repo), Some(tree)) = (&self.repo, &flight.worktree) {
            repo.remove_soon(tree)?;
        }
        self.overheads.insert((id.to_owned(), attempt), flight.overhead + began.elapsed());
        // The completion is durable; now its changes go onto the integration branch.
        if let Some(commit) = judged.integrate {
            self.integrate(wg, id, attempt, &commit)?;
        }
        Ok(())
    }

    /// Writes the worker's own stream shows outside its worktree that escaped: the file changed
    /// since the dispatch, or no denial of it by the write guard is recorded for this attempt
    /// (a hook that never ran). Writes inside the worktree are judged by the diff.
    fn escapes(&self, wg: &str, id: &str, flight: &InFlight, writes: &[String]) -> Vec<String> {
        let Some(tree) = flight.worktree.as_ref() else { return Vec::new() };
        let tree = std::fs::canonicalize(tree).unwrap_or_else(|_| tree.clone());
        let since =
            self.groups.get(wg).and_then(|g| g.tasks.get(id)).and_then(|s| s.dispatch.as_ref()).map_or(0, |d| d.0);
        let denied = |p: &str| {
            self.groups.denials().get(p).is_some_and(|ds| {
                ds.iter().any(|d| d.seq > since && d.workgroup.as_deref() == Some(wg) && d.task.as_deref() == Some(id))
            })
        };
        let mut out = Vec::new();
        for raw in writes {
            let given = if raw.starts_with('/') { PathBuf::from(raw) } else { tree.join(raw) };
            let real = crate::files::resolve_links(&given).unwrap_or_else(|_| given.clone());
            if real.starts_with(&tree) {
                continue;
            }
            let changed =
                std::fs::symlink_metadata(&real).and_then(|m| m.modified()).is_ok_and(|at| at >= flight.started_at);
            let shown = real.display().to_string();
            if (changed || !(denied(raw) || denied(&shown))) && !out.contains(&shown) {
                out.push(shown);
            }
        }
        out
    }

    /// Saves the diff of a capped attempt's `commit` under `.strata/artifacts/`.
    fn keep_partial(
        &self,
        repo: &git::Repo,
        wg: &str,
        id: &str,
        attempt: u32,
        commit: &str,
    ) -> anyhow::Result<strata_engine::workgroup::verify::ArtifactRef> {
        let diff = repo.diff_of(commit)?;
        let rel = format!("{}/{wg}/{id}.{attempt}.partial.diff", strata_engine::workgroup::verify::ARTIFACTS_DIR);
        let file = self.options.workspace.join(&rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        crate::files::write_replacing(&file, diff.as_bytes())
            .with_context(|| format!("cannot write the partial diff {}", file.display()))?;
        Ok(strata_engine::workgroup::verify::ArtifactRef {
            path: rel,
            blake3: blake3::hash(diff.as_bytes()).to_hex().to_string(),
            bytes: diff.len() as u64,
        })
    }

    /// Write-guard denials recorded for `id`'s current attempt.
    fn denials_of(&self, wg: &str, id: &str) -> u64 {
        let since =
            self.groups.get(wg).and_then(|g| g.tasks.get(id)).and_then(|s| s.dispatch.as_ref()).map_or(0, |d| d.0);
        self.groups
            .denials()
            .values()
            .flatten()
            .filter(|d| d.seq > since && d.workgroup.as_deref() == Some(wg) && d.task.as_deref() == Some(id))
            .count() as u64
    }

    /// Whether `provider` resumes sessions (a session it completed is kept warm).
    fn resumes(&self, provider: &str) -> bool {
        match provider {
            "sim" => self.sim.as_ref().is_some_and(|p| p.capabilities().resume),
            "claude" => self.claude.as_ref().is_some_and(|p| p.capabilities().resume),
            "codex" => self.codex.as_ref().is_some_and(|p| p.capabilities().resume),
            _ => false,
        }
    }

    /// Applies a completed task's commit to the integration branch; a conflict is recorded and
    /// holds the task's dependants.
    fn integrate(&mut self, wg: &str, id: &str, attempt: u32, commit: &str) -> anyhow::Result<()> {
        let Some(repo) = &self.repo else { return Ok(()) };
        let Err(files) = repo.apply(commit)? else { return Ok(()) };
        let branch = repo.branch().to_owned();
        let g = self.group(wg)?;
        let c = events::Conflicted { task: id.to_owned(), attempt, branch: branch.clone(), files: files.clone() };
        let e = decide::conflicted(g, &c, &mut V7Ids, &SystemClock)?;
        let append = decide::append(g, vec![e]);
        self.commit(vec![append])?;
        self.progress(format_args!(
            "{id}: its changes conflict on {branch} ({}); its dependants are held",
            files.join(", ")
        ));
        Ok(())
    }

    /// Probes the knowledge server a worker dispatched in `phase` would start, when the engine's
    /// rule asks for a probe, and records the result.
    fn probe_knowledge(&mut self, wg: &str, phase: &str) -> anyhow::Result<()> {
        use strata_engine::workgroup::health::{self, Need, Probed};
        let now = SystemClock.now_ns();
        if health::need(self.group(wg)?, phase, now) != Need::Probe {
            return Ok(());
        }
        let program = match from_env::strata_program() {
            Some(p) => p,
            None => std::env::current_exe().context("cannot find strata's own executable to probe `strata mcp`")?,
        };
        let answer = self::health::probe(&program, &self.options.workspace, self::health::DEADLINE);
        let ttl_minutes = self.group(wg)?.policy.mcp_health_ttl_minutes;
        let p = Probed {
            healthy: answer.is_ok(),
            detail: health::bounded(answer.as_ref().unwrap_or_else(|e| e)),
            phase: phase.to_owned(),
            at_ns: now,
            ttl_minutes,
        };
        let append = decide::knowledge_probed(self.group(wg)?, &p, &mut V7Ids, &SystemClock)?;
        self.commit(vec![append])?;
        if !p.healthy {
            self.progress(format_args!(
                "the knowledge server does not answer ({}); workers in the {phase} phase run without the Knowledge API",
                p.detail
            ));
        }
        Ok(())
    }

    /// Runs the plan's consolidated suite in a fresh worktree at the integration branch's tip
    /// (without a repository, in the workspace), with the checks' limits and confinement, then
    /// records the result for the review gate.
    fn run_suite(&mut self, wg: &str, due: &strata_engine::workgroup::verify::SuiteDue) -> anyhow::Result<()> {
        let g = self.group(wg)?;
        let (commands, timeout_ms) = (g.plan.suite.clone(), g.plan.verify_timeout_ms);
        self.progress(format_args!(
            "consolidated suite, run {}: {} on the changes of [{}]",
            due.run,
            crate::plural::count(commands.len() as u64, "command", "commands"),
            due.covers.join(", ")
        ));
        // `_suite` is no task's id (ids start with a letter or digit), so its worktree is its own.
        let tree = match &self.repo {
            Some(repo) => Some(repo.worktree("_suite", due.run)?),
            None => None,
        };
        let workdir = tree.clone().unwrap_or_else(|| self.options.workspace.clone());
        let (checked, _) = self.runtime.block_on(verify::run(verify::Run {
            workspace: &self.options.workspace,
            workdir: &workdir,
            workgroup: wg,
            task: "_suite",
            attempt: due.run,
            commands: &commands,
            timeout_ms,
        }));
        if let (Some(repo), Some(tree)) = (&self.repo, &tree) {
            repo.remove_soon(tree)?;
        }
        let x = strata_engine::workgroup::verify::SuiteChecked {
            run: due.run,
            covers: due.covers.clone(),
            checks: checked.checks,
        };
        let append = decide::suite_checked(self.group(wg)?, &x, &mut V7Ids, &SystemClock)?;
        self.commit(vec![append])?;
        self.progress(format_args!("consolidated suite {}", x.describe(commands.len())));
        Ok(())
    }

    /// After a stop: applies completed tasks' commits the integration branch does not hold yet (in
    /// completion order). The worktrees of attempts in flight stay: a dispatched worker that never
    /// started runs in its own, and an abandoned one's goes when its task fails.
    fn reconcile(&mut self, wg: &str) -> anyhow::Result<()> {
        let Some(repo) = &self.repo else { return Ok(()) };
        let applied = repo.applied()?;
        let g = self.group(wg)?;
        let mut pending: Vec<(u64, String, u32, String)> = Vec::new();
        for (id, t) in &g.tasks {
            if let (Status::Completed, Some((seq, c))) = (&t.status, &t.completed)
                && let Some(commit) = c.commit.as_ref().filter(|c| !applied.contains(*c))
            {
                pending.push((*seq, id.clone(), c.attempt, commit.clone()));
            }
        }
        pending.sort();
        for (_, id, attempt, commit) in pending {
            self.integrate(wg, &id, attempt, &commit)?;
        }
        Ok(())
    }
}

/// The coordinator as the engine's loop sees it ([`workgroup::driver`]): one workgroup's run.
struct Looping<'c, 'j> {
    c: &'c mut Coordinator<'j>,
    wg: &'c str,
    started: Instant,
}

impl workgroup::driver::Coordinate for Looping<'_, '_> {
    type Error = anyhow::Error;

    fn group(&self) -> anyhow::Result<&Workgroup> {
        self.c.group(self.wg)
    }

    fn now_ns(&self) -> i64 {
        SystemClock.now_ns()
    }

    fn hold(&mut self, held: &[events::Held]) -> anyhow::Result<()> {
        let append = decide::holds(self.c.group(self.wg)?, held, &mut V7Ids, &SystemClock)?;
        self.c.commit(vec![append])?;
        for h in held {
            self.c.progress(format_args!("{}: held, {} ({})", h.task, h.reason, h.blocked_by.join(", ")));
        }
        Ok(())
    }

    fn dispatch(&mut self, task: &str) -> anyhow::Result<()> {
        shared::dispatch(self.c, self.wg, task)
    }

    fn in_flight(&self) -> usize {
        self.c.in_flight.len()
    }

    fn wait(&mut self, wake_at_ns: Option<i64>) -> anyhow::Result<Vec<(String, WorkerEnd)>> {
        self.c.await_ends(self.wg, self.started, wake_at_ns)
    }

    fn finish(&mut self, task: &str, end: WorkerEnd) -> anyhow::Result<()> {
        self.c.finish_task(self.wg, task, end)
    }

    fn stalled(&self, detail: String) -> anyhow::Error {
        anyhow::anyhow!("[STRATA-E1727] workgroup {}: {detail}; this is a bug, report it", self.wg)
    }

    fn pause(&mut self, paused: &strata_engine::workgroup::caps::Paused) -> anyhow::Result<()> {
        let append = decide::paused(self.c.group(self.wg)?, paused, &mut V7Ids, &SystemClock)?;
        self.c.commit(vec![append])?;
        self.c.progress(format_args!(
            "workgroup paused ({}): {}; {}",
            paused.reason.as_str(),
            paused.detail,
            paused.reason.fix()
        ));
        Ok(())
    }

    fn suite(&mut self, due: &strata_engine::workgroup::verify::SuiteDue) -> anyhow::Result<()> {
        self.c.run_suite(self.wg, due)
    }

    fn plan_phase(&mut self, phase: &'static str) -> anyhow::Result<()> {
        self.c.plan_phase(self.wg, phase)
    }

    fn finished(&mut self) -> anyhow::Result<()> {
        if let Some(append) = decide::finish(self.c.group(self.wg)?, &mut V7Ids, &SystemClock)? {
            self.c.commit(vec![append])?;
        }
        Ok(())
    }
}
