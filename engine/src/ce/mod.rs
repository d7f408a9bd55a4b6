//! Context-efficient dispatch (seed 002), in two layers.
//!
//! The typed dispatch core: the router ([`router`]), result policy ([`policy`]), budget and
//! verification rules ([`budget`]), lineage compatibility ([`lineage`]), the journal's dispatch
//! ledger and writer ownership ([`ledger`], [`ownership`]), the capsule pipeline ([`capsule`])
//! and the privacy scanner ([`privacy`]), over canonical paths ([`paths`]), link facts an adapter
//! discovers in a real workspace ([`links`]) and strict times ([`time`]). They take and return Rust values; none of them reads or builds JSON documents
//! (a tidy test keeps `serde_json::Value` out of them).
//!
//! The wire adapter ([`wire`]): the operations `strata ce` speaks, with the reference runtime's
//! request and result shapes, its canonical JSON and typed rejections. It reads a request into
//! the core's values, decides with the core, and writes the answer back; telemetry, rollout and
//! vault deltas are wire-only operations and stay JSON there.
//!
//! Pure: the current time, the workspace's link facts and the configured limits arrive as
//! arguments; nothing here reads a clock, the environment or the filesystem.

pub mod budget;
pub mod capsule;
pub mod digest;
pub mod error;
pub mod gitleaks;
pub mod interactive;
pub mod ledger;
pub mod lineage;
pub mod links;
pub mod ownership;
pub mod paths;
pub mod policy;
pub mod privacy;
pub mod router;
pub mod time;
pub mod wire;

pub use error::{CeError, Code};
pub use wire::{Context, OPERATIONS, REQUEST_BYTES_MAX, json, run};
