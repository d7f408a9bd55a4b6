//! On-demand context at the edge: a worker's `get_context` request (through the MCP server, over
//! stdio, the daemon's socket or HTTP) decided by the engine's [`fetch::decide`] and recorded
//! through the one decide-and-append, served or refused.
//!
//! The decision reads the `context` projection (the prompt, its profile version, the earlier
//! fetches) at the head, and the knowledge base at the prompt's own position, rebuilt from the
//! journal and kept in a [`PositionCache`] so the requests of one worker, which all name the same
//! prompt, rebuild it once.

use std::sync::{Arc, Mutex};

use strata_engine::context::assemble::Item;
use strata_engine::context::fetch::{self, Ask, FetchError, Outcome, Refusal};
use strata_engine::context::state::ContextState;
use strata_engine::context::summary::Summaries;
use strata_engine::kb::graph::Graph;
use strata_journal::Journal;

use super::append::{AppendError, Decided, decide_and_append};
use crate::system::{SystemClock, V7Ids};

/// The knowledge base at one journal position, with its summaries.
type AtPosition = Arc<(u64, Graph, Summaries)>;

/// The knowledge base at the position of the prompt last asked about.
#[derive(Clone, Default)]
pub struct PositionCache(Arc<Mutex<Option<AtPosition>>>);

impl std::fmt::Debug for PositionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PositionCache")
    }
}

impl PositionCache {
    fn at(&self, journal: &Journal, position: u64) -> Result<AtPosition, String> {
        let mut slot = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(kept) = slot.as_ref().filter(|k| k.0 == position) {
            return Ok(kept.clone());
        }
        let mut g = Graph::at(journal, position)?;
        let s = Summaries::build(&mut g);
        let kept = Arc::new((position, g, s));
        *slot = Some(kept.clone());
        Ok(kept)
    }
}

/// A served request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The prompt's version.
    pub prompt_version: u64,
    /// The items with their text.
    pub items: Vec<(Item, String)>,
    /// Tokens served.
    pub tokens: usize,
    /// Tokens left of the prompt's budget.
    pub remaining: usize,
    /// Journal sequence of the `context.fetched` event.
    pub seq: u64,
}

/// Why a request was not served.
#[derive(Debug, thiserror::Error)]
pub enum FetchFailed {
    /// Refused by a rule; the refusal is recorded at `seq`.
    #[error("{refusal} (recorded at journal sequence {seq})")]
    Refused {
        /// The rule's refusal.
        refusal: Refusal,
        /// Sequence of the `context.fetch-refused` event.
        seq: u64,
    },
    /// The request names no prompt or is malformed; nothing was recorded.
    #[error(transparent)]
    Input(#[from] FetchError),
    /// The journal failed; nothing may have been recorded.
    #[error("[STRATA-E2711] the journal could not record the get_context request: {0}; retry it")]
    Journal(String),
}

/// Decides `ask` and records the serve or the refusal.
pub fn get_context(journal: &Journal, cache: &PositionCache, ask: &Ask) -> Result<Served, FetchFailed> {
    let mut state = ContextState::default();
    let done = decide_and_append(journal, &mut state, |st| {
        let (version, rec) = fetch::resolve(&st.prompts, ask)?;
        let m = &rec.manifest;
        let profile = st.profiles.version(&m.profile, m.profile_version).ok_or_else(|| FetchError::NoProfile {
            task: ask.task.clone(),
            profile: m.profile.clone(),
            version: m.profile_version,
        })?;
        let kb = cache
            .at(journal, m.position)
            .map_err(|detail| FetchError::Unresolvable { task: ask.task.clone(), detail })?;
        let d = fetch::decide(&st.prompts, profile, &kb.1, &kb.2, ask, version, &mut V7Ids, &SystemClock)?;
        Ok(Decided { appends: vec![d.append], answer: (d.prompt_version, d.outcome) })
    });
    let done = match done {
        Ok(d) => d,
        Err(AppendError::Refused(e)) => return Err(FetchFailed::Input(e)),
        Err(e) => return Err(FetchFailed::Journal(e.to_string())),
    };
    match done.answer {
        (_, Outcome::Refused(refusal)) => Err(FetchFailed::Refused { refusal, seq: done.seq }),
        (prompt_version, Outcome::Served { items, tokens, remaining }) => {
            Ok(Served { prompt_version, items, tokens, remaining, seq: done.seq })
        }
    }
}
