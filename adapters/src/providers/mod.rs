//! Provider adapters: reading what the agent runtimes print. So far the Claude Code stream-json
//! reader ([`claude`]) and the Codex JSONL reader ([`codex`]); spawning, resuming and forking
//! workers arrive with the run loop.

pub mod claude;
pub mod codex;
