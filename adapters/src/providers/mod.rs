//! Provider adapters: the agent runtimes behind the engine's `Provider` port. The simulated
//! provider ([`sim`]) runs workers today; for the real CLIs there are the readers of what they
//! print, the Claude Code stream-json reader ([`claude`]) and the Codex JSONL reader ([`codex`]),
//! while the adapters that spawn, resume and fork them are being built.

pub mod claude;
pub mod codex;
pub mod sim;
