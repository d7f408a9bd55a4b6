//! The knowledge base and the context state, as every command and `strata run` load them.

use strata_engine::context::profile;
use strata_engine::context::state::ContextState;
use strata_engine::kb::graph::Graph;
use strata_journal::Journal;
use strata_journal::projection::{ProjectionRunError, catch_up_state, catch_up_tail};

use super::append::{AppendError, Decided, decide_and_append};
use crate::system::{SystemClock, V7Ids};

/// The spec graph at the journal head: its newest valid snapshot plus the tail.
pub fn load_graph(journal: &Journal) -> Result<Graph, ProjectionRunError> {
    let mut g = Graph::new();
    catch_up_state(&mut g, journal)?;
    Ok(g)
}

/// The spec graph kept in memory by a process that answers many queries (`strata serve`):
/// loaded on first use, then brought to the journal's head by folding only the tail before each
/// query. Queries take turns on it.
#[derive(Clone, Default)]
pub struct SharedGraph(std::sync::Arc<std::sync::Mutex<Option<(u64, Graph)>>>);

impl std::fmt::Debug for SharedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedGraph")
    }
}

impl SharedGraph {
    /// Runs `query` on the graph at `journal`'s head.
    pub fn with<T>(&self, journal: &Journal, query: impl FnOnce(&Graph) -> T) -> Result<T, ProjectionRunError> {
        let mut slot = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (through, graph) = match slot.take() {
            Some((through, mut g)) => (catch_up_tail(&mut g, journal, through)?, g),
            None => {
                let mut g = Graph::new();
                (catch_up_state(&mut g, journal)?, g)
            }
        };
        let answer = query(&graph);
        *slot = Some((through, graph));
        Ok(answer)
    }
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
