//! strata-adapters: strata's edges, where all I/O happens.
//!
//! What it is for: the `strata` command line, workspace and configuration files, the system
//! clock and id generator behind the engine's ports, and (as their issues land) the daemon, the
//! MCP server, provider adapters and hooks.
//!
//! The main trade-off: this crate may do anything a program may do (files, processes, clocks,
//! randomness), so everything it computes that matters is pushed down into the engine or the
//! journal, where it is pure and testable; what stays here is parsing, formatting and effects.
//!
//! What it deliberately does not do: decide anything the engine decides, or write events except
//! through the journal's API.

#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

#[macro_use]
pub mod output;

pub mod app;
pub mod cli;
pub mod config;
pub mod coordinator;
pub mod daemon;
pub mod diagnostic;
pub mod discover;
pub mod eval_run;
pub mod files;
pub mod harness;
pub mod inflight;
pub mod mcp;
pub mod measure;
pub mod plural;
pub mod providers;
pub mod steering;
pub mod style;
pub mod system;
pub mod table;
