//! strata-engine: strata's domain, as pure functions over events.
//!
//! What it is for: turning commands into events (`decide`) and events into state (`evolve`,
//! projections), with every input that could differ between runs (time, ids) arriving through a
//! port and being recorded in the events. The same journal therefore always folds to the same
//! state, byte for byte, and the simulator can drive the real engine.
//!
//! The main trade-off: the engine never performs I/O of its own. It reads the journal only
//! through `strata-journal`'s API and reaches everything else through the traits in [`ports`];
//! adapters supply the implementations.
//!
//! What it deliberately does not do: read the wall clock, an RNG or the environment, spawn
//! processes or open sockets. A tidy test enforces the first three.
//!
//! It holds the ports, the event catalogue, the journal-level projections and the domains: the
//! knowledge base, context assembly, the Knowledge API's catalogue, the `strata ce` decisions,
//! telemetry, rollouts and promotion, and workgroups (dispatch, judging, the coordinator's loop).

#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod canonical;
pub mod catalogue;
pub mod ce;
pub mod context;
pub mod guard;
pub mod kb;
pub mod knowledge;
pub mod ports;
pub mod projections;
pub mod promotion;
pub mod telemetry;
pub mod tokens;
pub mod workgroup;

pub use catalogue::is_known_event;
pub use projections::standard_projections;
