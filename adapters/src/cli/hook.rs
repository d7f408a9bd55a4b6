//! `strata hook claude|codex pre-tool-use`: the write guard a worker's runtime runs before each
//! tool call. It reads the runtime's hook JSON on stdin, decides against the journal's ownership
//! map ([`strata_engine::guard`]), records the decision, and on a denial prints the runtime's
//! JSON deny on stdout and the reason on stderr and exits 2 (both runtimes block on exit 2;
//! Claude Code shows the JSON reason, Codex the stderr text).
//!
//! When the journal's owner serves a socket in the workspace given as `--journal` (`strata
//! serve`, or `strata run` while real workers run), the hook runs there, with its stdin sent
//! along; otherwise it opens the journal itself.
//!
//! Fail closed: unreadable input, a journal that cannot be opened within [`HOOK_LOCK_WAIT`]
//! (well inside the runtimes' hook timeouts, which fail open), an unknown lineage or a decision
//! that cannot be recorded all deny.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde_json::{Value, json};
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::guard::{self, Runtime, Verdict};
use strata_journal::projection::catch_up_one;
use strata_journal::{ExpectedVersion, Journal, StreamAppend};

use crate::system::{SystemClock, V7Ids};

/// Largest hook input read.
const INPUT_BYTES_MAX: u64 = 1 << 20;
/// How long the hook waits for another holder of the journal before denying.
pub const HOOK_LOCK_WAIT: Duration = Duration::from_secs(5);

/// `strata hook …`
#[derive(Subcommand, Debug)]
pub enum HookCommand {
    /// Claude Code hooks.
    #[command(subcommand)]
    Claude(HookEvent),
    /// Codex hooks.
    #[command(subcommand)]
    Codex(HookEvent),
}

/// The hook events strata answers.
#[derive(Subcommand, Debug)]
pub enum HookEvent {
    /// PreToolUse: deny writes outside the lineage's owned files.
    PreToolUse {
        /// The journal holding the ownership map (a journal directory or a workspace root).
        #[arg(long, value_parser = crate::cli::path_arg)]
        journal: PathBuf,
        /// The lineage the worker runs as.
        #[arg(long)]
        lineage: String,
        /// The worker's directory (absolute): owned paths are relative to it.
        #[arg(long, value_parser = crate::cli::path_arg)]
        root: PathBuf,
    },
}

/// Runs a hook; the exit code is the runtime's: 0 lets the call go ahead, 2 blocks it.
impl HookCommand {
    /// The journal (a journal directory or a workspace root) the hook decides against.
    pub fn journal(&self) -> &Path {
        let (HookCommand::Claude(HookEvent::PreToolUse { journal, .. })
        | HookCommand::Codex(HookEvent::PreToolUse { journal, .. })) = self;
        journal
    }
}

pub fn run(cmd: HookCommand) -> ExitCode {
    let (runtime, HookEvent::PreToolUse { journal, lineage, root }) = match cmd {
        HookCommand::Claude(e) => (Runtime::Claude, e),
        HookCommand::Codex(e) => (Runtime::Codex, e),
    };
    let verdict = match read_input() {
        Ok(input) => decide_and_record(&journal, &lineage, runtime, &root, &input),
        Err(why) => Err(why),
    };
    match verdict {
        Ok(v) if v.allow => ExitCode::SUCCESS,
        Ok(v) => deny(&v.reason),
        Err(why) => deny(&format!("strata could not check this write ({why}); denied")),
    }
}

fn deny(reason: &str) -> ExitCode {
    let out = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": reason}});
    outln!("{out}");
    errln!("{reason}");
    ExitCode::from(2)
}

fn read_input() -> Result<Value, String> {
    let bytes = crate::output::stdin_bytes(INPUT_BYTES_MAX).map_err(|e| format!("stdin unreadable: {e}"))?;
    if bytes.len() as u64 > INPUT_BYTES_MAX {
        return Err(format!("hook input over {INPUT_BYTES_MAX} bytes"));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("hook input is not JSON: {e}"))
}

fn decide_and_record(
    journal: &Path,
    lineage: &str,
    runtime: Runtime,
    root: &Path,
    input: &Value,
) -> Result<Verdict, String> {
    ledger::check_lineage_id(lineage).map_err(|e| e.detail)?;
    let root = root.to_str().ok_or("the worker root is not UTF-8")?;
    // Run by the journal's owner (`strata serve`, or `strata run` while its workers run): its
    // handle, kept open.
    if let Some(j) = crate::workspace::served_journal() {
        return decide_on(&j, lineage, runtime, root, input);
    }
    let j = super::ce::open_journal_at(journal, false, HOOK_LOCK_WAIT).map_err(|e| format!("journal: {}", e.detail))?;
    let result = decide_on(&j, lineage, runtime, root, input);
    let closed = j.close_blocking().map_err(|e| e.to_string());
    let v = result?;
    closed?;
    Ok(v)
}

fn decide_on(j: &Journal, lineage: &str, runtime: Runtime, root: &str, input: &Value) -> Result<Verdict, String> {
    let mut state = Ledger::default();
    catch_up_one(&mut state, j).map_err(|e| e.to_string())?;
    let v = guard::decide(&state, lineage, runtime, root, input);
    let event = guard::event(&v, &mut V7Ids, &SystemClock).map_err(|e| e.detail)?;
    let append = StreamAppend { stream: guard::stream(lineage), expected: ExpectedVersion::Any, events: vec![event] };
    match j.append_multi_blocking(vec![append]) {
        Ok(Ok(_)) => Ok(v),
        Ok(Err(conflict)) => Err(format!("the decision could not be recorded: {conflict:?}")),
        Err(e) => Err(format!("the decision could not be recorded: {e}")),
    }
}
