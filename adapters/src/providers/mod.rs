//! Provider adapters: reading what the agent runtimes print. So far the Claude Code stream-json
//! reader ([`claude`]); spawning, resuming and forking workers arrive with the run loop.

pub mod claude;
