//! The knowledge base and the context state, as every command and `strata run` load them.

use strata_engine::context::profile;
use strata_engine::context::state::ContextState;
use strata_engine::kb::graph::Graph;
use strata_journal::Journal;
use strata_journal::projection::{ProjectionRunError, catch_up_one};

use super::append::{AppendError, Decided, decide_and_append};
use crate::system::{SystemClock, V7Ids};

/// The spec graph at the journal head: its newest valid snapshot plus the tail.
pub fn load_graph(journal: &Journal) -> Result<Graph, ProjectionRunError> {
    let mut g = Graph::new();
    catch_up_one(&mut g, journal)?;
    Ok(g)
}

/// A shipped profile that does not parse or register (a defect of this build).
#[derive(Debug, thiserror::Error)]
#[error("the shipped profile {name} is broken: {detail}")]
pub struct BuiltinBroken {
    /// The profile.
    pub name: String,
    /// What is wrong.
    pub detail: String,
}

/// Registers the shipped profiles that are not registered yet (or changed), in one append;
/// returns how many were registered.
pub fn register_builtin(journal: &Journal) -> Result<usize, AppendError<BuiltinBroken>> {
    let mut state = ContextState::default();
    let done = decide_and_append(journal, &mut state, |s| {
        let mut appends = Vec::new();
        for (name, text) in profile::BUILTIN {
            let broken = |detail: String| BuiltinBroken { name: (*name).to_owned(), detail };
            let p = profile::parse(name, text).map_err(|e| broken(e.to_string()))?;
            if let Some(a) = profile::register(&s.profiles, &p, &mut V7Ids, &SystemClock).map_err(broken)? {
                appends.push(a);
            }
        }
        let n = appends.len();
        Ok(Decided { appends, answer: n })
    })?;
    Ok(done.answer)
}
