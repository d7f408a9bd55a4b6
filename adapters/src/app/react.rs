//! Reactions: events a recorded change calls for, appended by whoever recorded the change.
//!
//! A reaction is a decision over the state after a change (for example: every assembled prompt
//! whose context has changed since is flagged `context.superseded`), so it does not depend on
//! which change woke it. [`crate::app::append::decide_and_append`] runs every reaction the
//! appended event types wake, right after the append; if a process dies in between, the next
//! append that wakes the reaction, or the daemon when it starts ([`catch_up`]), decides it on the
//! newer state and appends what is still missing — a reaction is never lost, only late.

use std::collections::BTreeMap;

use strata_engine::context::prompts;
use strata_engine::context::state::ContextState;
use strata_engine::kb::artifact::event_types;
use strata_engine::kb::graph::Graph;
use strata_journal::Journal;
use strata_journal::projection::catch_up_one;

use super::append::{AppendError, Both, Decided, decide_and_append};
use crate::system::{SystemClock, V7Ids};

/// One reaction: which appended event types wake it, and what it does.
struct Reaction {
    name: &'static str,
    woken_by: fn(&str) -> bool,
    run: fn(&Journal) -> Result<usize, Failed>,
}

/// Every reaction.
const REACTIONS: [Reaction; 1] =
    [Reaction { name: SUPERSEDED_CONTEXT, woken_by: changes_the_knowledge_base, run: flag_superseded }];

/// The reaction flagging prompts whose context changed.
pub const SUPERSEDED_CONTEXT: &str = "superseded-context";

/// A reaction that could not be decided or recorded.
#[derive(Debug, thiserror::Error)]
#[error(
    "the change is recorded, but the `{reaction}` reaction failed ({detail}); the next change, or `strata serve` when it starts, records it"
)]
pub struct Failed {
    /// The reaction.
    pub reaction: &'static str,
    /// Why.
    pub detail: String,
}

/// What the reactions appended: events per reaction, for those that appended any.
pub type Reacted = BTreeMap<&'static str, usize>;

/// Runs every reaction one of `appended` (event types just appended) wakes.
pub fn after<'a>(journal: &Journal, appended: impl IntoIterator<Item = &'a str>) -> Result<Reacted, Failed> {
    let appended: Vec<&str> = appended.into_iter().collect();
    run(journal, |r| appended.iter().any(|t| (r.woken_by)(t)))
}

/// Runs every reaction (what a process that died after its append left undone).
pub fn catch_up(journal: &Journal) -> Result<Reacted, Failed> {
    run(journal, |_| true)
}

fn run(journal: &Journal, wanted: impl Fn(&Reaction) -> bool) -> Result<Reacted, Failed> {
    let mut out = Reacted::new();
    for r in REACTIONS.iter().filter(|r| wanted(r)) {
        let n = (r.run)(journal)?;
        if n > 0 {
            out.insert(r.name, n);
        }
    }
    Ok(out)
}

fn changes_the_knowledge_base(event_type: &str) -> bool {
    event_types::ALL.contains(&event_type)
}

/// Flags every assembled prompt given an artifact that has changed since; returns the number of
/// `context.superseded` events appended.
fn flag_superseded(journal: &Journal) -> Result<usize, Failed> {
    let failed = |detail: String| Failed { reaction: SUPERSEDED_CONTEXT, detail };
    let mut context = ContextState::default();
    catch_up_one(&mut context, journal).map_err(|e| failed(e.to_string()))?;
    if context.prompts.all().next().is_none() {
        return Ok(0); // No prompt yet: nothing to flag, and no graph to load.
    }
    let mut state = Both(context, Graph::new());
    let done = decide_and_append(journal, &mut state, |s| {
        let appends = prompts::supersede(&s.0.prompts, &s.1, &mut V7Ids, &SystemClock)?;
        Ok::<_, String>(Decided { appends, answer: () })
    });
    match done {
        Ok(c) => Ok(c.events),
        Err(AppendError::Refused(detail)) => Err(failed(detail)),
        Err(e) => Err(failed(e.to_string())),
    }
}
