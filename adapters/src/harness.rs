//! The harness service: the Knowledge API and the session tools over one journal, shared by the
//! CLI, the MCP server (stdio and HTTP) and the daemon.
//!
//! Each call reads the `knowledge` projection (caught up to the journal head under a short lock),
//! decides with the engine's pure deciders, then appends outside the lock. Concurrent callers
//! therefore never block each other on disk; the journal's group commit batches their appends.
//! On a journal shared with other processes (PostgreSQL) each call first reads what they
//! committed ([`Harness::refresh`]), so every `strata serve` and `strata mcp` on that database
//! answers from one catalogue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strata_engine::knowledge::KnowledgeError;
use strata_engine::knowledge::decide::{self, Log};
use strata_engine::knowledge::events::SessionStarted;
use strata_engine::knowledge::state::{Knowledge, Request};
use strata_journal::projection::{Projection, catch_up_one};
use strata_journal::{Journal, StreamAppend};

use crate::inflight::InFlight;

use crate::system::{SystemClock, V7Ids};

/// Why a harness call failed: the caller's input (a tool error the agent can correct) or the
/// journal (an internal failure).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The request was refused; nothing was appended.
    #[error(transparent)]
    Refused(#[from] KnowledgeError),
    /// The journal failed.
    #[error("[STRATA-E1011] the journal could not record the call: {0}")]
    Journal(String),
    /// A journal shared with other processes could not be read before answering.
    #[error(
        "[STRATA-E2313] the shared journal could not be read before answering ({0}); nothing was appended; check that its database is reachable, then retry the call"
    )]
    Refresh(String),
    /// A `suggest_for` text could not be ranked (no searchable word, too long).
    #[error(transparent)]
    Suggest(#[from] crate::discover::DiscoverError),
    /// A `get_context` request was refused (and recorded), malformed, or not recorded.
    #[error(transparent)]
    Context(#[from] crate::app::fetch::FetchFailed),
    /// The daemon is shutting down and takes no new writes.
    #[error(
        "[STRATA-E1014] strata is shutting down and recorded nothing for this call; retry it (with the same idempotency_key) once `strata serve` or `strata mcp` runs again"
    )]
    Closing,
}

/// `get_knowledge` arguments.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// Concerns of the task (from the declared vocabulary; see list_knowledge).
    pub concerns: Vec<String>,
    /// Project; omit for shared chunks only.
    #[serde(default)]
    pub project: Option<String>,
    /// Session id from start_session, so the serve is linked to the session's outcome.
    #[serde(default)]
    pub session: Option<String>,
    /// What the agent is doing (recorded with the serve).
    #[serde(default)]
    pub task_context: Option<String>,
    /// Token cap of the answer (default 20000); chunks beyond it are listed as omitted.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A task text ("multi-currency rounding is wrong on invoices"): the answer also suggests
    /// concerns for it (`suggested`), ranked by a full-text match of the chunks that carry them
    /// and apply to the project. With no concerns given, the call only suggests: nothing is
    /// served or recorded.
    #[serde(default)]
    pub suggest_for: Option<String>,
    /// Retrying with the same key records the serve once and answers with the first serve's
    /// chunks (duplicate: true), even if the knowledge changed since.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// One served chunk.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ChunkOut {
    /// Slug.
    pub slug: String,
    /// Title.
    pub title: String,
    /// Concerns.
    pub concerns: Vec<String>,
    /// Projects it applies to (empty: shared).
    pub project_scope: Vec<String>,
    /// The knowledge itself.
    pub content: String,
    /// o200k tokens of the content.
    pub tokens: u32,
    /// Version.
    pub version: u64,
    /// Content hash (blake3, hex).
    pub hash: String,
}

/// `get_knowledge` result.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct GetResult {
    /// Matching chunks, by slug.
    pub chunks: Vec<ChunkOut>,
    /// Matching chunks left out by the token cap.
    pub omitted: Vec<String>,
    /// Tokens of the chunks served.
    pub total_tokens: u64,
    /// Journal sequence of the serve event.
    pub logged_at: u64,
    /// True when this call retried an idempotency key already recorded: the answer is the one
    /// recorded then, and nothing new was recorded.
    #[serde(default)]
    pub duplicate: bool,
    /// Concerns suggested for `suggest_for`, best first (empty without it); the concerns asked
    /// for are not repeated.
    #[serde(default)]
    pub suggested: Vec<SuggestedOut>,
}

/// One concern suggested for a task text.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct SuggestedOut {
    /// The concern (pass it in `concerns` to be served its chunks).
    pub concern: String,
    /// Summed BM25 score of the chunks that suggest it, four decimals.
    pub score: f64,
    /// Those chunks, best first (at most five).
    pub chunks: Vec<String>,
    /// The words of the text they matched.
    pub matched: Vec<String>,
}

/// One catalogue line.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ListedOut {
    /// Slug.
    pub slug: String,
    /// Title.
    pub title: String,
    /// Concerns.
    pub concerns: Vec<String>,
    /// Projects it applies to (empty: shared).
    pub project_scope: Vec<String>,
    /// o200k tokens.
    pub token_estimate: u32,
    /// Version.
    pub version: u64,
}

/// `list_knowledge` result.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ListResult {
    /// Every live chunk, by slug.
    pub chunks: Vec<ListedOut>,
    /// The concern vocabulary.
    pub concerns: Vec<String>,
    /// The declared projects.
    pub projects: Vec<String>,
}

/// `start_session` arguments.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartArgs {
    /// Session id to use (e.g. the agent runtime's own); omit for a fresh one.
    #[serde(default)]
    pub session: Option<String>,
    /// Agent or interface name.
    #[serde(default)]
    pub agent: Option<String>,
    /// Project.
    #[serde(default)]
    pub project: Option<String>,
    /// What the session is for.
    #[serde(default)]
    pub task_context: Option<String>,
}

/// `start_session` result.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct StartResult {
    /// Session id.
    pub session: String,
    /// False when the session had been started already.
    pub started: bool,
}

/// `log_learning` arguments.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LearningArgs {
    /// Session id.
    pub session: String,
    /// What was learned.
    pub text: String,
    /// Concerns it relates to.
    #[serde(default)]
    pub concerns: Vec<String>,
    /// Retrying with the same key records it once.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// `log_decision` arguments.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionArgs {
    /// Session id.
    pub session: String,
    /// What was decided.
    pub decision: String,
    /// Why.
    #[serde(default)]
    pub rationale: Option<String>,
    /// Retrying with the same key records it once.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// `log_outcome` arguments.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomeArgs {
    /// Session id.
    pub session: String,
    /// success, failure, partial or abandoned.
    pub outcome: String,
    /// Details.
    #[serde(default)]
    pub detail: Option<String>,
    /// Retrying with the same key records it once.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// What a log call recorded.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Logged {
    /// Journal sequence of the event.
    pub seq: u64,
    /// True when this call was a retry of one already recorded (nothing new appended).
    pub duplicate: bool,
}

/// `get_context` arguments.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextArgs {
    /// The task id from your prompt's first line (`# Task <id>`).
    pub task: String,
    /// What you need: an item of your prompt's "On demand" section (e.g. `domain:billing-domain-1`),
    /// its virtual path, or an onDemand entry of your profile as written (e.g.
    /// `{functionalDomainSpec}`) for everything it gives.
    pub item: String,
    /// L1 (full), L2 (summary) or L3 (one line); default: the level offered, which is also the
    /// finest you may ask for.
    #[serde(default)]
    pub level: Option<String>,
    /// Why you need it (recorded in the prompt's bill of materials).
    pub reason: String,
    /// Which prompt of the task (its version); default: the latest.
    #[serde(default)]
    pub prompt_version: Option<u64>,
    /// Your session id, if you have one (recorded with the request).
    #[serde(default)]
    pub session: Option<String>,
}

/// One item served by `get_context`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ContextItemOut {
    /// `kind:id` (or `summary:L3`, `summary:L2/<entity>`, `rules:pipeline`).
    pub item: String,
    /// Virtual path.
    pub path: String,
    /// Level served.
    pub level: String,
    /// The prompt section it belongs to.
    pub section: String,
    /// Tokens it counts against the prompt's budget.
    pub tokens: u64,
    /// Content hash of the artifact or summary (hex).
    pub content_hash: String,
    /// The content, rendered at the level.
    pub content: String,
    /// Why it is served, as the bill of materials records it.
    pub reason: String,
}

/// `get_context` result.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ContextResult {
    /// The task.
    pub task: String,
    /// The prompt's version.
    pub prompt_version: u64,
    /// The items served.
    pub items: Vec<ContextItemOut>,
    /// Tokens served.
    pub tokens: u64,
    /// Tokens left of the prompt's budget after this serve.
    pub remaining: u64,
    /// Journal sequence of the serve's record.
    pub logged_at: u64,
}

struct Cached {
    k: Knowledge,
    seq: u64,
    /// The full-text index of the live chunks, and the position it was built at.
    chunks: Option<(u64, crate::discover::Discovery)>,
}

/// The harness over one journal.
pub struct Harness {
    journal: Journal,
    state: Mutex<Cached>,
    in_flight: Arc<InFlight>,
    closing: AtomicBool,
    /// The knowledge base at the position of the prompt `get_context` last served.
    positions: crate::app::fetch::PositionCache,
}

impl Harness {
    /// Loads the knowledge projection (snapshot plus tail).
    pub fn new(journal: Journal) -> anyhow::Result<Arc<Harness>> {
        let mut k = Knowledge::default();
        catch_up_one(&mut k, &journal)?;
        let seq = journal.head().seq;
        Ok(Arc::new(Harness {
            journal,
            state: Mutex::new(Cached { k, seq, chunks: None }),
            in_flight: Arc::new(InFlight::default()),
            closing: AtomicBool::new(false),
            positions: crate::app::fetch::PositionCache::default(),
        }))
    }

    /// Refuses new appends from now on ([`HarnessError::Closing`]); appends already under way
    /// finish and are acknowledged. Returns how many were under way.
    pub fn stop_writes(&self) -> usize {
        self.closing.store(true, Ordering::SeqCst);
        self.in_flight.count()
    }

    /// Appends under way.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// For a journal shared with other processes (PostgreSQL): reads what they committed since
    /// this process last looked, so the call that follows answers from the catalogue every
    /// process shares (a chunk put through another machine is served at the next call). A no-op
    /// on a journal this process owns. The read runs off the async workers (the database client
    /// blocks).
    pub async fn refresh(&self) -> Result<(), HarnessError> {
        if self.journal.store().shared_order().is_none() {
            return Ok(());
        }
        let journal = self.journal.clone();
        let refreshed = tokio::task::spawn_blocking(move || journal.refresh().map(|_| ()));
        match refreshed.await {
            Ok(r) => r.map_err(|e| HarnessError::Refresh(e.to_string())),
            Err(e) => Err(HarnessError::Refresh(e.to_string())),
        }
    }

    /// Runs `f` on the projection caught up to the journal head.
    pub fn read<R>(&self, f: impl FnOnce(&Knowledge) -> R) -> Result<R, HarnessError> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let head = self.journal.head().seq;
        if head > st.seq {
            let from = st.seq + 1;
            let Cached { k, .. } = &mut *st;
            self.journal
                .scan(from, head, |r, _| k.apply(r).map(|()| true))
                .map_err(|e| HarnessError::Journal(e.to_string()))?
                .map_err(HarnessError::Journal)?;
            st.seq = head;
        }
        Ok(f(&st.k))
    }

    /// The concerns suggested for `text` at the head ([`strata_engine::knowledge::suggest`]),
    /// from a full-text index of the live chunks built once per journal position.
    fn suggest(&self, text: &str, project: Option<&str>, asked: &[String]) -> Result<Vec<SuggestedOut>, HarnessError> {
        use strata_engine::knowledge::suggest::{ChunkHit, concerns};
        self.read(|_| ())?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let seq = st.seq;
        if st.chunks.as_ref().is_none_or(|(at, _)| *at != seq) {
            let docs = strata_engine::kb::discover::documents(&strata_engine::kb::graph::Graph::new(), Some(&st.k));
            st.chunks = Some((seq, crate::discover::Discovery::build(docs, seq)?));
        }
        let Cached { k, chunks, .. } = &*st;
        let Some((_, index)) = chunks else { return Ok(Vec::new()) };
        let hits = index.search(text, crate::discover::RESULTS_MAX, &["chunk"])?;
        let hits: Vec<ChunkHit<'_>> =
            hits.iter().map(|h| ChunkHit { slug: &h.id, score: h.score, matched: &h.matched }).collect();
        Ok(concerns(k, project, asked, &hits)?
            .into_iter()
            .map(|s| SuggestedOut {
                concern: s.concern,
                score: (s.score * 10_000.0).round() / 10_000.0,
                chunks: s.chunks,
                matched: s.matched,
            })
            .collect())
    }

    async fn append(&self, a: StreamAppend) -> Result<Logged, HarnessError> {
        self.append_counted(a, false).await
    }

    /// `async_commit`: acknowledged once written, before the sync (see
    /// [`Journal::append_multi_async_commit`]); only for serve records.
    async fn append_counted(&self, a: StreamAppend, async_commit: bool) -> Result<Logged, HarnessError> {
        // Count first, then look at the flag: `stop_writes` sets the flag, then reads the count,
        // so an append either sees the flag or is counted (both orders are sequentially consistent).
        // A guard, so a call dropped mid-append (its client went away) is still uncounted.
        let _counted = self.in_flight.enter();
        if self.closing.load(Ordering::SeqCst) {
            return Err(HarnessError::Closing);
        }
        let appended = if async_commit {
            self.journal.append_multi_async_commit(vec![a]).await
        } else {
            self.journal.append_multi(vec![a]).await
        };
        match appended {
            Ok(Ok(done)) => {
                Ok(Logged { seq: done.positions.first().map_or(0, |p| p.seq), duplicate: done.deduplicated })
            }
            Ok(Err(conflict)) => Err(HarnessError::Journal(format!("{conflict}; retry the call"))),
            Err(e) => Err(HarnessError::Journal(e.to_string())),
        }
    }

    /// `get_knowledge`.
    pub async fn get_knowledge(&self, a: GetArgs) -> Result<GetResult, HarnessError> {
        self.refresh().await?;
        let suggested = match &a.suggest_for {
            Some(text) => self.suggest(text, a.project.as_deref(), &a.concerns)?,
            None => Vec::new(),
        };
        if a.concerns.is_empty() && a.suggest_for.is_some() {
            return Ok(GetResult {
                chunks: Vec::new(),
                omitted: Vec::new(),
                total_tokens: 0,
                logged_at: 0,
                duplicate: false,
                suggested,
            });
        }
        let req = Request { concerns: a.concerns, project: a.project, max_tokens: a.max_tokens.map(|t| t as usize) };
        let (mut result, append) = self.read(|k| {
            let (answer, append) = decide::serve(
                k,
                &req,
                a.session.as_deref(),
                a.task_context.as_deref(),
                a.idempotency_key.as_deref(),
                &mut V7Ids,
                &SystemClock,
            )?;
            let chunks = answer
                .chunks
                .iter()
                .map(|c| ChunkOut {
                    slug: c.slug.clone(),
                    title: c.title.clone(),
                    concerns: c.concerns.clone(),
                    project_scope: c.project_scope.clone(),
                    content: c.content.clone(),
                    tokens: c.tokens,
                    version: c.version,
                    hash: c.hash.clone(),
                })
                .collect();
            let omitted = answer.omitted.iter().map(ToString::to_string).collect();
            Ok::<_, HarnessError>((
                GetResult {
                    chunks,
                    omitted,
                    total_tokens: answer.total_tokens,
                    logged_at: 0,
                    duplicate: false,
                    suggested,
                },
                append,
            ))
        })??;
        match append {
            decide::ServeRecord::Duplicate(seq) => {
                result.logged_at = seq;
                result.duplicate = true;
            }
            decide::ServeRecord::New(append) => {
                // The serve's usage record does not wait for the sync: a crash can lose the last
                // few serve records, never a learning, decision, outcome or chunk.
                let logged = self.append_counted(append, true).await?;
                result.logged_at = logged.seq;
                result.duplicate = logged.duplicate;
            }
        }
        Ok(result)
    }

    /// `get_context`: an onDemand item of a prompt, served within its remaining budget or
    /// refused; recorded either way (a malformed request records nothing). The decision and its
    /// append run off the async workers (both block on the journal).
    pub async fn get_context(&self, a: ContextArgs) -> Result<ContextResult, HarnessError> {
        let _counted = self.in_flight.enter();
        if self.closing.load(Ordering::SeqCst) {
            return Err(HarnessError::Closing);
        }
        let ask = strata_engine::context::fetch::Ask {
            task: a.task.clone(),
            prompt_version: a.prompt_version,
            item: a.item,
            level: a.level,
            reason: a.reason,
            session: a.session,
        };
        let (journal, positions) = (self.journal.clone(), self.positions.clone());
        let served = tokio::task::spawn_blocking(move || crate::app::fetch::get_context(&journal, &positions, &ask))
            .await
            .map_err(|e| HarnessError::Journal(e.to_string()))??;
        Ok(ContextResult {
            task: a.task,
            prompt_version: served.prompt_version,
            items: served
                .items
                .into_iter()
                .map(|(i, content)| ContextItemOut {
                    item: i.item,
                    path: i.path,
                    level: i.level,
                    section: i.section,
                    tokens: i.tokens as u64,
                    content_hash: i.content_hash,
                    content,
                    reason: i.reason,
                })
                .collect(),
            tokens: served.tokens as u64,
            remaining: served.remaining as u64,
            logged_at: served.seq,
        })
    }

    /// `list_knowledge` (after [`Harness::refresh`] when the journal is shared: the MCP tool
    /// refreshes first).
    pub fn list_knowledge(&self) -> Result<ListResult, HarnessError> {
        self.read(|k| ListResult {
            chunks: k
                .list()
                .into_iter()
                .map(|c| ListedOut {
                    slug: c.slug.to_owned(),
                    title: c.title.to_owned(),
                    concerns: c.concerns.to_vec(),
                    project_scope: c.project_scope.to_vec(),
                    token_estimate: c.tokens,
                    version: c.version,
                })
                .collect(),
            concerns: k.concerns().cloned().collect(),
            projects: k.projects().cloned().collect(),
        })
    }

    /// `start_session`.
    pub async fn start_session(&self, a: StartArgs) -> Result<StartResult, HarnessError> {
        self.refresh().await?;
        let s = SessionStarted {
            session: a.session.unwrap_or_default(),
            agent: a.agent,
            project: a.project,
            task_context: a.task_context,
        };
        let (session, append) = self.read(|k| decide::start_session(k, s, &mut V7Ids, &SystemClock))??;
        let started = match append {
            Some(a) => !self.append(a).await?.duplicate,
            None => false,
        };
        Ok(StartResult { session, started })
    }

    async fn log(&self, session: &str, entry: Log, key: Option<&str>) -> Result<Logged, HarnessError> {
        self.refresh().await?;
        let append = self.read(|k| decide::log(k, session, entry, key, &mut V7Ids, &SystemClock))??;
        self.append(append).await
    }

    /// `log_learning`.
    pub async fn log_learning(&self, a: LearningArgs) -> Result<Logged, HarnessError> {
        self.log(&a.session, Log::Learning { text: a.text, concerns: a.concerns }, a.idempotency_key.as_deref()).await
    }

    /// `log_decision`.
    pub async fn log_decision(&self, a: DecisionArgs) -> Result<Logged, HarnessError> {
        self.log(
            &a.session,
            Log::Decision { decision: a.decision, rationale: a.rationale },
            a.idempotency_key.as_deref(),
        )
        .await
    }

    /// `log_outcome`.
    pub async fn log_outcome(&self, a: OutcomeArgs) -> Result<Logged, HarnessError> {
        self.log(&a.session, Log::Outcome { outcome: a.outcome, detail: a.detail }, a.idempotency_key.as_deref()).await
    }
}
