//! The simulated provider: a stand-in agent runtime for the demo, benchmarks and simulations,
//! clearly named as such. Each turn's success, latency, usage and cost come from the engine's
//! seeded model ([`strata_engine::workgroup::sim::Model`]); its figures are marked synthetic and
//! recorded as estimated, never billed. A successful writing turn writes a short note into each
//! file the worker owns (a file named `<task>.md` inside an owned directory), so the coordinator's
//! post-turn diff check and `strata audit file` see real changes; now and then (as the model
//! draws) it also writes a file it does not own, which that check must catch.
//!
//! Latency is simulated, then waited for divided by `time_scale` (0: not waited at all).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use strata_engine::telemetry::events::{AccountingSource, Counters};
use strata_engine::workgroup::provider::{Brief, Capabilities, Outcome, Provider, ProviderError, Worker};
use strata_engine::workgroup::sim::{self, Model};

const NAME: &str = "sim";

#[derive(Debug)]
struct Running {
    brief: Brief,
    interrupted: bool,
}

/// The simulated provider.
#[derive(Debug)]
pub struct SimProvider {
    model: Model,
    time_scale: u64,
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, Running>>,
    sessions: Mutex<BTreeMap<String, Counters>>,
}

impl SimProvider {
    /// A provider drawing from `seed`, waiting simulated latency divided by `time_scale`.
    pub fn new(seed: u64, time_scale: u64) -> SimProvider {
        SimProvider {
            model: Model { seed },
            time_scale,
            next: AtomicU64::new(1),
            running: Mutex::new(BTreeMap::new()),
            sessions: Mutex::new(BTreeMap::new()),
        }
    }

    fn start(&self, brief: &Brief, session_id: String) -> Worker {
        let handle = self.next.fetch_add(1, Ordering::Relaxed);
        let r = Running { brief: brief.clone(), interrupted: false };
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(handle, r);
        Worker { session_id, handle }
    }

    /// A session id that depends only on the seed and the task's attempt, so reruns match.
    fn session_for(&self, brief: &Brief) -> String {
        self.model.session(&brief.lineage_id, brief.attempt)
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a.unwrap_or(0).saturating_add(b?))
}

/// Writes the simulated change ([`sim::changed_files`]): a note in every owned file (or
/// `<task>.md` in an owned directory), and, for a stray turn, a file at the top of the worker's
/// directory, owned by nobody.
fn write_changes(brief: &Brief, stray: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    let is_dir = |rel: &str| brief.workdir.join(rel).is_dir();
    for rel in sim::changed_files(&brief.task, &brief.owns, is_dir, stray) {
        let file = brief.workdir.join(&rel);
        if rel == sim::stray_file(&brief.task) {
            std::fs::write(&file, "[simulated] a write outside ownership\n")?;
            continue;
        }
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&file)?;
        writeln!(
            f,
            "[simulated] {} (attempt {}): {}",
            brief.task,
            brief.attempt,
            brief.prompt.lines().next().unwrap_or("")
        )?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl Provider for SimProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        strata_engine::workgroup::sim::CAPABILITIES
    }

    async fn spawn(&self, brief: &Brief) -> Result<Worker, ProviderError> {
        Ok(self.start(brief, self.session_for(brief)))
    }

    async fn resume(&self, brief: &Brief) -> Result<Worker, ProviderError> {
        let Some(session) = brief.from_session.clone() else {
            return Err(ProviderError::Unavailable {
                provider: NAME,
                detail: "resume needs the session to resume".into(),
            });
        };
        Ok(self.start(brief, session))
    }

    async fn wait(&self, worker: &Worker) -> Result<Outcome, ProviderError> {
        let brief = {
            let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            let r =
                running.get(&worker.handle).ok_or(ProviderError::NoWorker { provider: NAME, handle: worker.handle })?;
            r.brief.clone()
        };
        let drawn = self.model.turn(&brief.workgroup, &brief.task, brief.attempt, brief.mode, brief.prompt_tokens);
        let sim::Capped { turn, turns, reached: capped } = sim::under_caps(drawn, &brief.caps);
        if let Some(ms) = turn.latency_ms.checked_div(self.time_scale) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let interrupted =
            self.running.lock().unwrap_or_else(|p| p.into_inner()).get(&worker.handle).is_none_or(|r| r.interrupted);
        let succeeded = turn.succeeded && !interrupted;
        let mut summary = turn.summary;
        if succeeded && !brief.owns.is_empty() {
            if let Err(e) = write_changes(&brief, turn.stray) {
                return Err(ProviderError::Unavailable {
                    provider: NAME,
                    detail: format!("writing the simulated change: {e}"),
                });
            }
        } else if interrupted {
            summary = format!("[simulated] {}: interrupted", brief.task);
        }
        let cumulative = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            let c = sessions.entry(worker.session_id.clone()).or_default();
            let u = &turn.usage;
            *c = Counters {
                input_tokens: add(c.input_tokens, u.input_tokens),
                cache_creation_tokens: add(c.cache_creation_tokens, u.cache_creation_tokens),
                cache_read_tokens: add(c.cache_read_tokens, u.cache_read_tokens),
                output_tokens: add(c.output_tokens, u.output_tokens),
                cost_micros: add(c.cost_micros, u.cost_micros),
                wall_ms: add(c.wall_ms, u.wall_ms),
            };
            *c
        };
        Ok(Outcome {
            session_id: worker.session_id.clone(),
            succeeded,
            output: vec![summary.clone()],
            summary,
            usage: turn.usage,
            cumulative,
            accounting: Some(AccountingSource::Estimated),
            synthetic: true,
            writes: Vec::new(),
            turns: Some(turns),
            capped,
            authentication_failed: false,
        })
    }

    async fn interrupt(&self, worker: &Worker) -> Result<(), ProviderError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let r =
            running.get_mut(&worker.handle).ok_or(ProviderError::NoWorker { provider: NAME, handle: worker.handle })?;
        r.interrupted = true;
        Ok(())
    }

    async fn release(&self, worker: &Worker) -> Result<(), ProviderError> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&worker.handle);
        Ok(())
    }
}
