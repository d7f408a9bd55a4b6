//! Provider adapters: the agent runtimes behind the engine's `Provider` port. The simulated
//! provider ([`sim`]) stands in for an agent in the demo, benchmarks and simulations; the real
//! CLIs run as one child process per turn: Claude Code ([`claude_worker`], `claude -p`) and
//! Codex ([`codex_worker`], `codex exec`), each wired per worker to strata's write guard (a
//! PreToolUse hook) and Knowledge API (an MCP server). What the CLIs print is read by the
//! lenient readers [`claude`] (stream-json) and [`codex`] (JSONL); [`worker_process`] holds what
//! both adapters share (process groups, signals, the turn task, usage baselines).

pub mod claude;
pub mod claude_worker;
pub mod codex;
pub mod codex_worker;
pub mod sim;
pub mod worker_process;
