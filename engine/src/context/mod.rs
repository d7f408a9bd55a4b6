//! Context assembly: what an agent is given, decided deterministically from the journal.
//!
//! * [`render`]: artifacts at L1 (full), L2 (summary), L3 (one line).
//! * [`summary`]: the hierarchical summaries (system L3, entity L2), incremental, with sources;
//!   published summaries and their staleness check.
//! * [`paths`]: the virtual paths profiles address, and the glob language of `never`.
//! * [`profile`]: context profiles, validated and versioned.
//! * [`assemble`]: the assembler and its bill of materials, enforcing budget, never-list and
//!   `maxFullSpecs`.
//! * [`continuation`]: what earlier attempts of a task did, read from the workgroup's journal
//!   stream, as the "Continuation status" section.
//! * [`fetch`]: on-demand context: a worker's later request for an `onDemand` item, served
//!   within the prompt's remaining budget or refused, recorded either way.
//! * [`prompts`]: assembled prompts in the journal, superseded context, verification.
//! * [`state`]: the `context` projection over profiles, published summaries and prompts.

pub mod assemble;
pub mod continuation;
pub mod fetch;
pub mod paths;
pub mod profile;
pub mod prompts;
pub mod render;
pub mod state;
pub mod summary;
