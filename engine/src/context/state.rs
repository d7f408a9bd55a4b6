//! The `context` projection: registered profiles, published summaries and assembled prompts, kept
//! together because every context command needs all three and they share one fold.
//!
//! The state is the ordered list of the context events seen (profile registrations, summary
//! publications and retractions, prompt assemblies, supersessions) with three indexes over it.
//! The snapshot is that list; restoring re-folds it. Context events are few next to knowledge-base
//! events (one per registration, publication or assembly), so the list stays small.

use strata_journal::projection::Projection;
use strata_journal::{Hash, Record};

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
pub const EVENT_TYPES: [&str; 5] =
    [profile::REGISTERED, summary::PUBLISHED, summary::RETRACTED, prompts::ASSEMBLED, prompts::SUPERSEDED];

impl ContextState {
    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        self.profiles.apply(r)?;
        self.published.apply(r)?;
        self.prompts.apply(r)
    }
}

impl Projection for ContextState {
    fn name(&self) -> &str {
        "context"
    }

    fn version(&self) -> u32 {
        2
    }

    fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        if !EVENT_TYPES.contains(&r.event_type) {
            return Ok(());
        }
        self.fold(r)?;
        self.kept.push(r);
        Ok(())
    }

    fn state_hash(&self) -> Hash {
        self.kept.state_hash("context/2")
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
        self.kept.encode()
    }

    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.reset();
        let mut fresh = ContextState::default();
        let kept = EventLog::restore(bytes, |r| fresh.fold(r))?;
        *self = ContextState { kept, ..fresh };
        Ok(())
    }

    fn reset(&mut self) {
        *self = ContextState::default();
    }
}
