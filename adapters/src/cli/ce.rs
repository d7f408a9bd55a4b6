//! `strata ce <operation>`: the context-efficiency wire protocol over stdin/stdout. One JSON
//! object in (at most 1 MiB, enforced while reading), exactly one JSON line out, exit 0 on
//! success and 1 on a rejection. A rejection carries a code and its fixed message, never input
//! content; `--explain` adds the field and rule on stderr (which may quote input).
//!
//! With `--journal DIR` the operation is decided against the journal's dispatch ledger and its
//! events are appended before the answer is printed; a rejection appends nothing.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::ce::wire::journaled::{self, LEDGER_OPERATIONS};
use strata_engine::ce::{self, CeError, Code, Context, REQUEST_BYTES_MAX};
use strata_journal::projection::{catch_up_one, save_one};
use strata_journal::{ExpectedVersion, Journal, JournalError, StreamAppend};

use strata_engine::ports::Clock as _;

use crate::system::{SystemClock, V7Ids};

/// How long `--journal` waits for another process to let go of the journal.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Pause before looking again at a journal another process is still creating (its lock file may
/// not exist yet, so there is nothing to wait on).
const CREATE_RETRY: Duration = Duration::from_millis(10);
/// Decisions retried when another writer moved the ledger between reading and appending.
pub(crate) const LEDGER_RETRIES: usize = 16;

/// Runs one operation on standard input.
pub fn run(operation: Option<&str>, journal: Option<&Path>, explain: bool) -> ExitCode {
    let stdin = std::io::stdin();
    let result = match journal {
        None => respond(operation, &mut stdin.lock(), i128::from(SystemClock.now_ns())),
        Some(dir) => respond_journaled(operation, &mut stdin.lock(), dir),
    };
    let (line, ok) = match result {
        Ok(result) => (success_line(operation.unwrap_or_default(), &result), true),
        Err(e) => {
            if explain {
                errln!("{}", e.detail);
            }
            (failure_line(e.code), false)
        }
    };
    outln!("{line}");
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// `{"ok":true,"operation":…,"result":…}`, keys in the reference's order.
pub fn success_line(op: &str, result: &Value) -> String {
    format!(r#"{{"ok":true,"operation":{},"result":{result}}}"#, Value::from(op))
}

/// `{"ok":false,"code":…,"message":…}`, keys in the reference's order.
pub fn failure_line(code: Code) -> String {
    format!(r#"{{"ok":false,"code":"{}","message":{}}}"#, code.as_str(), Value::from(code.message()))
}

/// Reads and checks the request: the payload object and the operation.
fn request<'a>(
    operation: Option<&'a str>,
    input: &mut dyn std::io::Read,
    journaled: bool,
) -> Result<(&'a str, Value), CeError> {
    let Some(op) = operation else {
        return Err(CeError::new(Code::UnsupportedOperation, "no operation given"));
    };
    let mut bytes = Vec::new();
    input
        .take(REQUEST_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CeError::new(Code::StdinUnreadable, format!("stdin: {e}")))?;
    if bytes.len() > REQUEST_BYTES_MAX {
        return Err(CeError::new(Code::RequestTooLarge, "stdin: more than 1,048,576 bytes"));
    }
    let payload: Value = serde_json::from_slice(&bytes)
        .map_err(|e| CeError::new(Code::InvalidRequest, format!("stdin: not one JSON document ({e})")))?;
    if !payload.is_object() {
        return Err(CeError::new(Code::InvalidRequest, "stdin: the request must be a JSON object"));
    }
    let known = ce::OPERATIONS.contains(&op) || (journaled && LEDGER_OPERATIONS.contains(&op));
    if !known {
        let why =
            if LEDGER_OPERATIONS.contains(&op) { "release needs --journal" } else { "not one of the eight operations" };
        return Err(CeError::new(Code::UnsupportedOperation, why));
    }
    Ok((op, payload))
}

fn context(now_ns: i128) -> Context {
    Context {
        now_ns,
        workspace: ce::paths::Workspace::default(),
        warm_lease_minutes: ce::lineage::WARM_LEASE_MINUTES_DEFAULT,
    }
}

/// The whole exchange, minus the output: the operation's result or the rejection.
pub fn respond(operation: Option<&str>, input: &mut dyn std::io::Read, now_ns: i128) -> Result<Value, CeError> {
    let (op, payload) = request(operation, input, false)?;
    ce::run(op, &payload, &context(now_ns))
}

/// [`respond`] against the journal in `dir`: decided on the ledger, recorded, then answered.
pub fn respond_journaled(operation: Option<&str>, input: &mut dyn std::io::Read, dir: &Path) -> Result<Value, CeError> {
    let (op, payload) = request(operation, input, true)?;
    if is_missing_or_empty(&journal_dir(dir)) {
        // No journal yet: decide on the empty ledger first, so that a rejection, or a decision
        // that records nothing, leaves the path as it was (a mistyped `--journal` creates
        // nothing). A journal is created for the first decision that records something.
        let decided = journaled::run(op, &payload, &context(0), &Ledger::default(), &mut V7Ids, &SystemClock)?;
        if decided.events.is_empty() {
            return Ok(decided.result);
        }
    }
    let journal = open_journal(dir)?;
    let result = decide_and_record(&journal, op, &payload);
    let closed = journal.close_blocking().map_err(unavailable);
    let value = result?;
    closed?;
    Ok(value)
}

fn unavailable(e: impl std::fmt::Display) -> CeError {
    CeError::new(Code::JournalUnavailable, e.to_string())
}

/// Opens the journal at `dir` (or a workspace's, when `dir` holds `.strata/journal`), creating
/// one in a missing or empty directory, waiting up to [`LOCK_WAIT`] for another holder.
pub(crate) fn open_journal(dir: &Path) -> Result<Journal, CeError> {
    open_journal_at(dir, true, LOCK_WAIT)
}

/// The journal directory `dir` names: `dir` itself, or its workspace's `.strata/journal`.
fn journal_dir(dir: &Path) -> PathBuf {
    let workspace = dir.join(".strata").join("journal");
    if workspace.join("sled").exists() { workspace } else { dir.to_owned() }
}

/// [`open_journal`], creating a journal in a missing or empty directory only when `create`.
pub(crate) fn open_journal_at(dir: &Path, create: bool, wait: Duration) -> Result<Journal, CeError> {
    // A workspace whose journal lives in PostgreSQL: opened as every command opens it (with
    // this machine's journal directory for deferred appends); there is no lock to wait for.
    let ws = crate::workspace::Workspace::at(dir);
    if ws.config_path().is_file() {
        let config = ws.config().map_err(|e| unavailable(format!("{e:#}")))?;
        if let Some(pg) = config.backend.pg_options("ce").map_err(|e| unavailable(format!("{e:#}")))? {
            return Journal::open_postgres_at(&pg, &ws.journal_dir()).map_err(unavailable);
        }
    }
    let dir = journal_dir(dir);
    let dir = dir.as_path();
    let options = super::journal::demo_options("ce");
    let deadline = Instant::now() + wait;
    loop {
        match Journal::open(dir, &options) {
            Ok(j) => return Ok(j),
            Err(JournalError::NotAJournal { .. }) if create && is_missing_or_empty(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| unavailable(format!("{}: {e}", dir.display())))?;
                match Journal::create(dir, "ce", &options) {
                    Ok(j) => return Ok(j),
                    // Another process created it first: open theirs.
                    Err(_) if Instant::now() < deadline => continue,
                    Err(e) => return Err(unavailable(e)),
                }
            }
            // Another process is creating it right now: wait for it to let go, then open it.
            Err(e @ JournalError::NotAJournal { .. }) if create && Instant::now() < deadline => {
                if !lock_released(&dir.join("LOCK"), deadline) {
                    return Err(unavailable(e));
                }
                std::thread::sleep(CREATE_RETRY);
            }
            Err(e @ JournalError::Locked { .. }) => {
                if !lock_released(&dir.join("LOCK"), deadline) {
                    return Err(unavailable(e));
                }
            }
            Err(e) => return Err(unavailable(e)),
        }
    }
}

/// Waits, until `deadline`, for the holder of `lock` to let go.
fn lock_released(lock: &Path, deadline: Instant) -> bool {
    strata_journal::wait_for_unlock(lock, deadline.saturating_duration_since(Instant::now()))
}

fn is_missing_or_empty(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Catches the ledger up, decides, appends expecting the ledger version read; decides again
/// on the newer ledger if another writer moved it in between. A journal shared with other
/// processes (PostgreSQL) is refreshed first, so the decision is made on what every process
/// committed so far; one committed after that makes the append conflict, and it is decided again.
fn decide_and_record(journal: &Journal, op: &str, payload: &Value) -> Result<Value, CeError> {
    let mut state = Ledger::default();
    for _ in 0..LEDGER_RETRIES {
        journal.refresh().map_err(unavailable)?;
        catch_up_one(&mut state, journal).map_err(unavailable)?;
        let decided = journaled::run(op, payload, &context(0), &state, &mut V7Ids, &SystemClock)?;
        if decided.events.is_empty() {
            return Ok(decided.result);
        }
        let append = StreamAppend {
            stream: ledger::STREAM.to_owned(),
            expected: ExpectedVersion::Exact(state.version()),
            events: decided.events,
        };
        match journal.append_multi_blocking(vec![append]).map_err(unavailable)? {
            Ok(_) => {
                catch_up_one(&mut state, journal).map_err(unavailable)?;
                save_one(&state, journal, journal.head().seq).map_err(unavailable)?;
                return Ok(decided.result);
            }
            Err(_conflict) => continue,
        }
    }
    Err(unavailable("the ledger kept moving under this decision; run it again"))
}
