//! The governed knowledge base: typed artifacts with schemas, lifecycles and typed
//! cross-references, taken in from files, projected into a graph, validated, analysed for impact,
//! and kept honest by suspicion that spreads when content changes.
//!
//! * [`kind`], [`lifecycle`], [`links`]: the declarations (what exists, how it may change, how it
//!   connects), each one table.
//! * [`intake`]: files → one atomic plan of events, or every problem with file, pointer, rule and
//!   hint.
//! * [`graph`]: the projection and its queries.
//! * [`commands`]: pure deciders for transitions, promotions and reviews.
//! * [`fixture`]: a deterministic seed-scale knowledge base, with defect injection.
//! * [`discover`]: the documents discovery (`strata discover`) indexes.

pub mod artifact;
pub mod commands;
pub mod discover;
pub mod fixture;
pub mod frontmatter;
#[cfg(test)]
mod gate_tests;
pub mod graph;
pub mod intake;
pub mod kind;
pub mod lifecycle;
pub mod links;
pub mod schema;

pub use artifact::ArtifactDraft;
pub use graph::Graph;
pub use kind::{ArtifactKey, ArtifactKind};
