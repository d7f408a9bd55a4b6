//! The provider adapters' side of a run: a catch-up subscription to the journal that starts a
//! worker for each `task.dispatched` of the workgroup and records what the worker does on that
//! attempt's own stream (`worker.started`, `worker.output`, `worker.completed` or
//! `worker.failed`). The coordinator never calls a provider: it records dispatches, and follows
//! the journal for the workers' ends.
//!
//! The subscription starts from the coordinator's folded state (a snapshot of the `workgroups`
//! projection plus the journal's tail) and from there reads every event in order, switching to
//! live ones with no gap and no duplicate. What it caught up on is acted on once it is caught
//! up: a dispatch whose worker never started (the run stopped in between) is started now, as
//! the same attempt; a worker a stopped run started and never saw end is released (a real one
//! by its recorded process group) and recorded as `worker.failed` with `abandoned`, which sends
//! the task back to be dispatched again. One attempt starts at most once: its `worker.started`
//! is appended expecting an empty stream.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use strata_engine::ce::router::Mode;
use strata_engine::workgroup::caps::{Capped, Reached, Spend};
use strata_engine::workgroup::events::{self, Dispatched, WorkerEnded, WorkerStarted};
use strata_engine::workgroup::provider::{Brief, Outcome, Provider, named_session};
use strata_engine::workgroup::state::{Workgroups, stream};
use strata_engine::workgroup::{decide, lineage_id};
use strata_journal::projection::Projection;
use strata_journal::{Journal, StreamAppend};

use crate::system::{SystemClock, V7Ids};

/// Largest worker input (prompt file) read: a prompt is bounded by its token budget long before.
const INPUT_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// Where workers run and find their input.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Prompts, manifests and worker inputs, under `<workgroup>/`.
    pub prompts_dir: PathBuf,
    /// The target repository's top directory, when the run has one.
    pub repo_root: Option<PathBuf>,
    /// The workspace whose socket real workers' hooks and `strata mcp` reach.
    pub workspace: PathBuf,
    /// Where readers run without a repository.
    pub cwd: PathBuf,
}

/// What the runner tells the coordinator besides the journal: its own time per attempt (the
/// adapter's share of the coordinator overhead), progress lines, and errors that stop it.
#[derive(Debug, Default)]
pub struct Shared {
    /// Adapter time per `(task, attempt)`: its own (preparing the brief, recording start and end,
    /// the work around the checks) and its check processes' lives.
    pub overhead: BTreeMap<(String, u32), Spent>,
    /// Lines for the progress display.
    pub notes: Vec<String>,
    /// What stopped a worker from being recorded (the coordinator stops the run on one).
    pub errors: Vec<String>,
}

/// The shared part, locked.
pub type SharedRef = Arc<Mutex<Shared>>;

fn lock(s: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The worker input of an attempt: its prompt and, for a fresh worker, the sealed capsule.
pub fn input_path(prompts_dir: &std::path::Path, workgroup: &str, task: &str, attempt: u32) -> PathBuf {
    prompts_dir.join(workgroup).join(format!("{task}.{attempt}.input.md"))
}

/// One workgroup's dispatch subscriber.
pub struct Runner {
    journal: Journal,
    workgroup: String,
    groups: Workgroups,
    providers: BTreeMap<String, Arc<dyn Provider>>,
    setup: Setup,
    shared: SharedRef,
    /// The workers' tasks, with the attempt each runs.
    workers: tokio::task::JoinSet<()>,
    attempts: BTreeMap<tokio::task::Id, (String, u32)>,
}

/// How long a stopping runner waits for its workers' last records.
const DRAIN: Duration = Duration::from_secs(10);

impl Runner {
    /// A runner over `groups` (folded up to `journal`'s sequence `from - 1`).
    pub fn new(
        journal: Journal,
        workgroup: &str,
        groups: Workgroups,
        providers: BTreeMap<String, Arc<dyn Provider>>,
        setup: Setup,
        shared: SharedRef,
    ) -> Runner {
        Runner {
            journal,
            workgroup: workgroup.to_owned(),
            groups,
            providers,
            setup,
            shared,
            workers: tokio::task::JoinSet::new(),
            attempts: BTreeMap::new(),
        }
    }

    /// Acts on what the folded state left open, then follows the journal from `from` until
    /// `stop` fires or the journal closes; then waits (a bounded time) for its workers' last
    /// records, so what they report is complete when this returns.
    pub async fn run(mut self, from: u64, mut stop: tokio::sync::oneshot::Receiver<()>) {
        if let Err(e) = self.follow(from, &mut stop).await {
            lock(&self.shared).errors.push(e);
        }
        let drained = tokio::time::timeout(DRAIN, async {
            while let Some(joined) = self.workers.join_next_with_id().await {
                self.joined(joined).await;
            }
        })
        .await;
        if drained.is_err() {
            self.workers.abort_all();
        }
    }

    /// A worker's task ended: one that panicked still ends its attempt, as a failure.
    async fn joined(&mut self, joined: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let (id, panic) = match joined {
            Ok((id, ())) => (id, None),
            Err(e) => (e.id(), Some(e)),
        };
        let Some((task, attempt)) = self.attempts.remove(&id) else { return };
        let Some(e) = panic else { return };
        let ended = ended_without_start(&task, attempt, format!("the worker's task ended abnormally: {e}"));
        // Whether it got as far as its start is unknown: the end goes after it if so.
        let recorded = match fail(&self.journal, &self.workgroup, &ended, true).await {
            Ok(_) => Ok(()),
            Err(_) => fail(&self.journal, &self.workgroup, &ended, false).await.map(|_| ()),
        };
        if let Err(e) = recorded {
            lock(&self.shared).errors.push(format!("{task} attempt {attempt}: {e}"));
        }
    }

    async fn follow(&mut self, from: u64, stop: &mut tokio::sync::oneshot::Receiver<()>) -> Result<(), String> {
        self.backlog().await?;
        let mine = stream(&self.workgroup);
        let mut sub = self.journal.subscribe(from);
        loop {
            let next = tokio::select! {
                _ = &mut *stop => return Ok(()),
                Some(joined) = self.workers.join_next_with_id(), if !self.workers.is_empty() => {
                    self.joined(joined).await;
                    continue;
                }
                next = sub.next() => next,
            };
            let Some(e) = next.map_err(|e| format!("the dispatch subscription stopped: {e}"))? else {
                return Ok(());
            };
            let r = e.as_record();
            self.groups.apply(&r).map_err(|e| format!("workgroups: {e}"))?;
            if r.event_type == events::DISPATCHED && r.stream == mine {
                let d: Dispatched =
                    serde_json::from_slice(r.payload).map_err(|e| format!("task.dispatched at seq {}: {e}", r.seq))?;
                self.start(&d.task, d.attempt);
            }
        }
    }

    /// What the caught-up state leaves open: dispatches without a worker start now; workers a
    /// stopped run started and never saw end are released and recorded as abandoned.
    async fn backlog(&mut self) -> Result<(), String> {
        let Some(g) = self.groups.get(&self.workgroup) else { return Ok(()) };
        for open in decide::open_attempts(g) {
            let (task, attempt, session, pid, provider) = match open {
                decide::Open::Unstarted { task, attempt } => {
                    self.start(&task, attempt);
                    continue;
                }
                decide::Open::Orphaned { task, attempt, session_id, pid, provider } => {
                    (task, attempt, session_id, pid, provider)
                }
            };
            let provider_name = provider.clone();
            let released = match pid.and_then(|p| u32::try_from(p).ok()) {
                Some(pgid) => tokio::task::spawn_blocking(move || {
                    crate::providers::worker_process::release_orphan(pgid, &provider, Duration::from_secs(5))
                })
                .await
                .unwrap_or(false),
                None => false,
            };
            let summary = match (released, pid) {
                (true, Some(pid)) => {
                    format!("the run that started it stopped; released the {provider_name} worker (pid {pid})")
                }
                _ => "the run that started it stopped; its worker is gone".to_owned(),
            };
            lock(&self.shared).notes.push(format!("{task}: {summary}"));
            let e = decide::abandoned(&task, attempt, session, summary, false);
            let append = decide::worker_ended(&self.workgroup, &e, false, "", true, &mut V7Ids, &SystemClock)
                .map_err(|e| e.to_string())?;
            record(&self.journal, append).await?;
        }
        Ok(())
    }

    /// Starts the worker of `task`'s dispatched `attempt` on its own tokio task.
    fn start(&mut self, task: &str, attempt: u32) {
        let began = Instant::now();
        let brief = self.brief(task, attempt);
        let (journal, wg, shared) = (self.journal.clone(), self.workgroup.clone(), self.shared.clone());
        let (task, name, prep) = (task.to_owned(), task.to_owned(), began.elapsed());
        let checks = self.checks(&task);
        let handle = self.workers.spawn(async move {
            let result = match brief {
                Ok((provider, brief)) => run_worker(&journal, &wg, provider, brief, checks).await,
                Err(reason) => {
                    let e = ended_without_start(&task, attempt, reason);
                    fail(&journal, &wg, &e, false).await.map(Spent::own)
                }
            };
            let mut s = lock(&shared);
            match result {
                Ok(spent) => {
                    s.overhead.insert((task, attempt), Spent { own: prep + spent.own, ..spent });
                }
                Err(e) => s.errors.push(format!("{task} attempt {attempt}: {e}")),
            }
        });
        self.attempts.insert(handle.id(), (name, attempt));
    }

    /// The task's `verify` commands and their time limit, with the workspace their logs go
    /// under; `None` when it has none.
    fn checks(&self, task: &str) -> Option<Checks> {
        let g = self.groups.get(&self.workgroup)?;
        let t = g.plan.task(task)?;
        (!t.spec.verify.is_empty()).then(|| Checks {
            commands: t.spec.verify.clone(),
            timeout_ms: g.plan.verify_timeout_ms,
            workspace: self.setup.workspace.clone(),
        })
    }

    /// The attempt's brief: its dispatch, its plan entry, its input file (written before the
    /// dispatch: the planning gate) and its directory.
    fn brief(&self, task: &str, attempt: u32) -> Result<(Arc<dyn Provider>, Brief), String> {
        let g = self.groups.get(&self.workgroup).ok_or_else(|| format!("no workgroup {}", self.workgroup))?;
        let t = g.plan.task(task).ok_or_else(|| format!("no task {task} in the plan"))?;
        let d = g
            .tasks
            .get(task)
            .and_then(|s| s.dispatch.as_ref())
            .map(|(_, d)| d)
            .filter(|d| d.attempt == attempt)
            .ok_or_else(|| format!("attempt {attempt} of {task} was not dispatched"))?;
        let provider = self
            .providers
            .get(&d.provider)
            .cloned()
            .ok_or_else(|| format!("provider {} is not available to this run", d.provider))?;
        let mode = d.runs_as;
        let input = input_path(&self.setup.prompts_dir, &self.workgroup, task, attempt);
        let prompt = crate::files::read_text_bounded(&input, INPUT_BYTES_MAX, "the worker's input").map_err(|e| {
            format!("[STRATA-E1725] its input {} cannot be read ({e}); no worker starts without it", input.display())
        })?;
        let workdir = match (&self.setup.repo_root, t.writer) {
            (Some(_), true) => {
                let w = super::git::worktree_path(&self.setup.workspace, &self.workgroup, task, attempt);
                if !w.is_dir() {
                    return Err(format!("its worktree {} is missing", w.display()));
                }
                w
            }
            (Some(root), false) => root.clone(),
            (None, _) => self.setup.cwd.clone(),
        };
        let brief = Brief {
            workgroup: self.workgroup.clone(),
            task: task.to_owned(),
            attempt,
            lineage_id: lineage_id(&self.workgroup, task),
            mode,
            from_session: d.from_session.clone(),
            prompt,
            prompt_tokens: d.prompt.tokens,
            owns: t.spec.owns.clone(),
            workdir,
            journal: self.setup.workspace.clone(),
            caps: d.caps,
            knowledge: !d.without_knowledge,
            model: d.model.as_ref().and_then(|m| m.name.clone()),
        };
        Ok((provider, brief))
    }
}

fn ended_without_start(task: &str, attempt: u32, reason: String) -> WorkerEnded {
    WorkerEnded {
        task: task.to_owned(),
        attempt,
        session_id: None,
        summary: events::bounded(&reason),
        usage: Default::default(),
        accounting: None,
        ..WorkerEnded::default()
    }
}

/// Appends `append`; the time it took.
async fn record(journal: &Journal, append: StreamAppend) -> Result<Duration, String> {
    let began = Instant::now();
    let stream = append.stream.clone();
    match journal.append_multi(vec![append]).await {
        Ok(Ok(_)) => Ok(began.elapsed()),
        Ok(Err(c)) => {
            Err(format!("{stream} was written by someone else ({c}); is another run of this workgroup active?"))
        }
        Err(e) => Err(format!("cannot record on {stream}: {e}")),
    }
}

async fn fail(journal: &Journal, wg: &str, e: &WorkerEnded, started: bool) -> Result<Duration, String> {
    let append =
        decide::worker_ended(wg, e, false, "", started, &mut V7Ids, &SystemClock).map_err(|e| e.to_string())?;
    record(journal, append).await
}

/// A task's `verify` commands, as the runner carries them to its worker's end.
struct Checks {
    commands: Vec<String>,
    timeout_ms: u64,
    workspace: PathBuf,
}

/// Starts the worker, records its start, waits for its turn, releases it, runs the task's
/// checks after a successful turn, and records the end (with the cap it was stopped at and the
/// checks' results); the adapter's own time (the two appends, the work around the checks) and
/// the check processes' time.
async fn run_worker(
    journal: &Journal,
    wg: &str,
    provider: Arc<dyn Provider>,
    brief: Brief,
    checks: Option<Checks>,
) -> Result<Spent, String> {
    let (task, attempt) = (brief.task.clone(), brief.attempt);
    let started = if brief.mode == Mode::Resume { provider.resume(&brief).await } else { provider.spawn(&brief).await };
    let worker = match started {
        Ok(w) => w,
        Err(e) => {
            let e = ended_without_start(&task, attempt, format!("the worker did not start: {e}"));
            return fail(journal, wg, &e, false).await.map(Spent::own);
        }
    };
    let real = provider.name() != "sim";
    let s = WorkerStarted {
        task: task.clone(),
        attempt,
        session_id: worker.session_id.clone(),
        provider: provider.name().to_owned(),
        synthetic: !real,
        pid: real.then_some(worker.handle),
    };
    let append = decide::started(wg, &s, &mut V7Ids, &SystemClock).map_err(|e| e.to_string())?;
    let own = match record(journal, append).await {
        Ok(d) => d,
        Err(e) => {
            let _ = provider.release(&worker).await;
            return Err(e);
        }
    };
    let result = provider.wait(&worker).await;
    let _ = provider.release(&worker).await;
    let (mut ended, succeeded, output, capped) = match result {
        Ok(o) => ended_from(&task, attempt, o),
        Err(e) => {
            let mut x = ended_without_start(&task, attempt, format!("waiting for the worker failed: {e}"));
            x.session_id = named_session(worker.session_id.clone());
            (x, false, String::new(), None)
        }
    };
    ended.input_bytes = Some(brief.prompt.len() as u64);
    let capped =
        capped.map(|(reached, spend)| Capped { task: task.clone(), attempt, reached, caps: brief.caps, spend });
    // What strata does around the checks (the worktree's snapshot and restore, the logs, their
    // hashes) counts in the adapter's time; the checks' own processes are their time, as a
    // worker's turn is its own.
    let checking = Instant::now();
    let (checked, processes) = match checks {
        Some(c) if succeeded && capped.is_none() => {
            let (checked, processes) = super::verify::run(super::verify::Run {
                workspace: &c.workspace,
                workdir: &brief.workdir,
                workgroup: wg,
                task: &task,
                attempt,
                commands: &c.commands,
                timeout_ms: c.timeout_ms,
            })
            .await;
            (Some(checked), processes)
        }
        _ => (None, Duration::ZERO),
    };
    let record_end = decide::EndRecord {
        ended: &ended,
        succeeded,
        output: &output,
        started: true,
        capped: capped.as_ref(),
        checked: checked.as_ref(),
    };
    let append = decide::worker_end(wg, &record_end, &mut V7Ids, &SystemClock).map_err(|e| e.to_string())?;
    let checking = if checked.is_some() { checking.elapsed().saturating_sub(processes) } else { Duration::ZERO };
    Ok(Spent { own: own + checking + record(journal, append).await?, checks: processes })
}

/// The runner's time for one attempt: its own (the coordinator overhead's share), and the
/// lives of the attempt's check processes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spent {
    /// Preparing, recording and checking around the worker and the check processes.
    pub own: Duration,
    /// The check processes, spawn to exit.
    pub checks: Duration,
}

impl Spent {
    /// Time of the runner's own, no check run.
    fn own(own: Duration) -> Spent {
        Spent { own, checks: Duration::ZERO }
    }
}

type Ends = (WorkerEnded, bool, String, Option<(Reached, Spend)>);

fn ended_from(task: &str, attempt: u32, o: Outcome) -> Ends {
    let e = WorkerEnded {
        task: task.to_owned(),
        attempt,
        session_id: named_session(o.session_id),
        summary: events::bounded(&o.summary),
        usage: o.usage,
        accounting: o.accounting,
        synthetic: o.synthetic,
        abandoned: false,
        writes: o.writes.into_iter().take(events::WRITES_MAX).collect(),
        turns: o.turns,
        authentication_failed: o.authentication_failed,
        // A simulated session's totals are the process's own sums, not a provider's figure.
        cumulative: (!o.synthetic && o.cumulative.any_billing()).then_some(o.cumulative),
        input_bytes: None,
    };
    (e, o.succeeded, o.output.join("\n"), o.capped)
}
