//! The application layer: what every edge (the CLI, the daemon, `strata run`, hooks) does the
//! same way, so it is written once.
//!
//! - [`workspace`]: a workspace as one command sees it, and its one open policy.
//! - [`append`]: the one decide-and-append, with its one retry rule.
//! - [`react`]: reactions to recorded events (a prompt whose context changed is flagged), run
//!   after every append that can trigger them and caught up by any later one.
//! - [`kb`]: the knowledge base and context state every command and `strata run` load.
//! - [`fetch`]: a worker's on-demand context request (`get_context`), decided and recorded.
//!
//! CLI commands parse arguments and print; what they decide goes through here. Nothing in this
//! layer keeps state between calls: a command's caller (the process itself, or the daemon for a
//! client) is in the [`workspace::Workspace`] it passes.

pub mod append;
pub mod fetch;
pub mod kb;
pub mod react;
pub mod workspace;
