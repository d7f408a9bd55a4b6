//! `strata ce <operation>`: the context-efficiency wire protocol over stdin/stdout. One JSON
//! object in (at most 1 MiB, enforced while reading), exactly one JSON line out, exit 0 on
//! success and 1 on a rejection. A rejection carries a code and its fixed message, never input
//! content; `--explain` adds the field and rule on stderr (which may quote input).
//!
//! With `--journal DIR` the operation is decided against the journal's dispatch ledger and its
//! events are appended before the answer is printed; a rejection appends nothing.
//!
//! This is the edge where the file system is read: when a `route` or `dispatch` request names an
//! existing `workspace_root`, the symbolic links along its owned paths are looked up here
//! ([`FsProbe`], never opening a file) and handed to the decision as link facts.

use std::io::{ErrorKind, Read as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::ce::links::{Entry, Target};
use strata_engine::ce::wire::journaled::{self, LEDGER_OPERATIONS};
use strata_engine::ce::{self, CeError, Code, Context, REQUEST_BYTES_MAX};
use strata_journal::{ExpectedVersion, Journal, StreamAppend};

use strata_engine::ports::Clock as _;

use crate::app::append::{AppendError, Decided, decide_and_append};
use crate::app::workspace::{Open, names_no_journal, open_at};
use crate::system::{SystemClock, V7Ids};

/// How long `--journal` waits for another process to let go of the journal.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Runs one operation on standard input.
pub fn run(o: &crate::output::Out, operation: Option<&str>, journal: Option<&Path>, explain: bool) -> ExitCode {
    let stdin = std::io::stdin();
    let result = match journal {
        None => respond(operation, &mut stdin.lock(), i128::from(SystemClock.now_ns())),
        Some(dir) => respond_journaled(operation, &mut stdin.lock(), dir),
    };
    answer(o, operation, result, explain)
}

/// `strata ce OPERATION --journal DIR` run by the daemon that holds DIR's journal (`strata serve`
/// or `strata mcp`): the request is the client's stdin, the decision is recorded through the
/// daemon's handle, so a served workspace answers at once instead of waiting for its lock.
pub fn run_served(
    o: &crate::output::Out,
    operation: Option<&str>,
    journal: &Journal,
    input: &[u8],
    explain: bool,
) -> ExitCode {
    let result = request(operation, &mut &input[..], true).and_then(|(op, mut payload)| {
        discover_links(op, &mut payload)?;
        decide_and_record(journal, op, &payload)
    });
    answer(o, operation, result, explain)
}

/// The answer to a request a client could not send along (over the size limit or not UTF-8):
/// the refusal reading it gives.
pub fn run_served_refusal(o: &crate::output::Out, operation: Option<&str>, input: &[u8], explain: bool) -> ExitCode {
    // Reading it refuses it (too long, or not JSON, which is UTF-8); the fallback is for form.
    let result = request(operation, &mut &input[..], true)
        .and_then(|_| Err(CeError::new(Code::InvalidRequest, "the request is not UTF-8 text")));
    answer(o, operation, result, explain)
}

/// Prints the answer line of `result` (and with `explain` a rejection's detail on stderr).
fn answer(o: &crate::output::Out, operation: Option<&str>, result: Result<Value, CeError>, explain: bool) -> ExitCode {
    let (line, ok) = match result {
        Ok(result) => (success_line(operation.unwrap_or_default(), &result), true),
        Err(e) => {
            if explain {
                errln!(o, "{}", e.detail);
            }
            (failure_line(e.code), false)
        }
    };
    outln!(o, "{line}");
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
    let (op, mut payload) = request(operation, input, false)?;
    discover_links(op, &mut payload)?;
    ce::run(op, &payload, &context(now_ns))
}

/// Adds the links along the request's owned paths, when it names an existing `workspace_root`
/// directory, to its workspace facts. A root that does not exist (or is not a directory) leaves
/// the lexical model; one that cannot be examined is refused.
fn discover_links(op: &str, payload: &mut Value) -> Result<(), CeError> {
    let Some((root, owned)) = ce::wire::route::workspace_paths(op, payload) else { return Ok(()) };
    let root = Path::new(&root);
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => return Ok(()),
        Err(e) => {
            return Err(CeError::new(Code::InvalidOwnershipPath, format!("workspace_root: cannot be examined ({e})")));
        }
    }
    let mut probe = FsProbe::new(root)?;
    let owned: Vec<&str> = owned.iter().map(String::as_str).collect();
    let links = ce::links::discover(&owned, &mut probe)?;
    ce::wire::add_links(payload, links)
}

/// The workspace's file system as [`ce::links::Probe`] sees it: `lstat` and `readlink`, so a
/// FIFO, a device or a large file along a path is never opened or read.
struct FsProbe {
    root: PathBuf,
    /// The root as absolute paths name it: as given (made absolute) and resolved.
    bases: [PathBuf; 2],
}

impl FsProbe {
    fn new(root: &Path) -> Result<FsProbe, CeError> {
        let cannot = |e: std::io::Error| {
            CeError::new(Code::InvalidOwnershipPath, format!("workspace_root: cannot be examined ({e})"))
        };
        let absolute = std::path::absolute(root).map_err(cannot)?;
        let real = std::fs::canonicalize(root).map_err(cannot)?;
        Ok(FsProbe { root: root.to_owned(), bases: [real, absolute] })
    }
}

impl ce::links::Probe for FsProbe {
    fn entry(&mut self, path: &str) -> Result<Entry, String> {
        let at = self.root.join(path);
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => return Ok(Entry::Absent),
            Err(e) => return Err(e.to_string()),
        };
        if meta.is_dir() {
            return Ok(Entry::Dir);
        }
        if !meta.file_type().is_symlink() {
            return Ok(Entry::Other);
        }
        let target = std::fs::read_link(&at).map_err(|e| e.to_string())?;
        let text = |p: &Path| p.to_str().map(str::to_owned).ok_or_else(|| "a link target that is not UTF-8".to_owned());
        if !target.is_absolute() {
            return Ok(Entry::Link(Target::Relative(text(&target)?)));
        }
        match self.bases.iter().find_map(|b| target.strip_prefix(b).ok()) {
            Some(rest) => Ok(Entry::Link(Target::FromRoot(text(rest)?))),
            None => Ok(Entry::Link(Target::Outside)),
        }
    }
}

/// [`respond`] against the journal in `dir`: decided on the ledger, recorded, then answered.
pub fn respond_journaled(operation: Option<&str>, input: &mut dyn std::io::Read, dir: &Path) -> Result<Value, CeError> {
    let (op, mut payload) = request(operation, input, true)?;
    discover_links(op, &mut payload)?;
    if names_no_journal(dir) {
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

/// [`open_journal`], creating a journal in a missing or empty directory only when `create`
/// (the one open policy, [`crate::app::workspace::open_at`]).
pub(crate) fn open_journal_at(dir: &Path, create: bool, wait: Duration) -> Result<Journal, CeError> {
    open_at(dir, &Open { command: "ce", create, wait: Some(wait) }).map_err(unavailable)
}

/// Decides on the ledger and records the decision through the one decide-and-append: decided
/// again on the newer ledger when another writer moved it in between (on a shared journal,
/// after reading what every process committed).
fn decide_and_record(journal: &Journal, op: &str, payload: &Value) -> Result<Value, CeError> {
    let decided = decide_and_append(journal, &mut Ledger::default(), |state| {
        let decided = journaled::run(op, payload, &context(0), state, &mut V7Ids, &SystemClock)?;
        let appends = if decided.events.is_empty() {
            Vec::new()
        } else {
            let expected = ExpectedVersion::Exact(state.version());
            vec![StreamAppend { stream: ledger::STREAM.to_owned(), expected, events: decided.events }]
        };
        Ok(Decided { appends, answer: decided.result })
    });
    match decided {
        Ok(done) => Ok(done.answer),
        Err(AppendError::Refused(e)) => Err(e),
        Err(AppendError::Contended { .. }) => {
            Err(unavailable("the ledger kept moving under this decision; run it again"))
        }
        Err(e) => Err(unavailable(e)),
    }
}
