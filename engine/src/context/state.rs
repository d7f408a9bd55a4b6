//! The `context` projection: registered profiles, published summaries and assembled prompts, kept
//! together because every context command needs all three and they share one fold.
//!
//! The state is the ordered list of the context events seen (profile registrations, summary
//! publications and retractions, prompt assemblies, supersessions, on-demand fetches and refusals) with three indexes over it.
//! The snapshot is that list; restoring re-folds it. Context events are few next to knowledge-base
//! events (one per registration, publication or assembly), so the list stays small.

use strata_journal::Record;

use super::fetch;
use super::profile::{self, ProfileIndex};
use super::prompts::{self, PromptIndex};
use super::summary::{self, PublishedIndex};
use crate::projections::kept::EventLog;

/// Registered profiles, published summaries and assembled prompts at a journal position.
#[derive(Clone, Debug, Default)]
pub struct ContextState {
    kept: EventLog,
    /// Every registered profile version.
    pub profiles: ProfileIndex,
    /// The latest published summaries.
    pub published: PublishedIndex,
    /// Every assembled prompt and what superseded it.
    pub prompts: PromptIndex,
}

/// Event types this projection folds.
pub const EVENT_TYPES: [&str; 7] = [
    profile::REGISTERED,
    summary::PUBLISHED,
    summary::RETRACTED,
    prompts::ASSEMBLED,
    prompts::SUPERSEDED,
    fetch::FETCHED,
    fetch::REFUSED,
];

impl ContextState {
    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        self.profiles.apply(r)?;
        self.published.apply(r)?;
        self.prompts.apply(r)
    }
}

crate::projections::kept::kept_projection!(ContextState, "context", 3, EVENT_TYPES);
