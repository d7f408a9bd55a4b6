//! `strata hook claude|codex pre-tool-use`: the write guard a worker's runtime runs before each
//! tool call. It reads the runtime's hook JSON on stdin, decides against the journal's ownership
//! map ([`strata_engine::guard`]), records the decision, and on a denial prints the runtime's
//! JSON deny on stdout and the reason on stderr and exits 2 (both runtimes block on exit 2;
//! Claude Code shows the JSON reason, Codex the stderr text).
//!
//! Where it decides: when the journal's owner serves a socket in the workspace given as
//! `--journal` (`strata serve`, or `strata run` while real workers run), the call is sent there
//! with the id the decision is to be recorded under and the instant after which the asker has
//! given up; otherwise the hook opens the journal itself.
//!
//! Fail closed, whatever strata's own processes do: the hook answers within `--deadline-ms`
//! (default [`HOOK_DEADLINE_MS_DEFAULT`], well inside the runtime's hook timeout that strata's
//! worker settings set to [`HOOK_TIMEOUT_S`](crate::providers::worker_process::HOOK_TIMEOUT_S)),
//! and it exits 0 only for an allowed write and 2 for everything else: a stopped, killed or
//! busy daemon or journal, unreadable input, bad arguments, an unknown lineage, a panic. A
//! denial that cannot be recorded in the journal is written to the journal's `pending/`
//! directory ([`strata_journal::pending`]) and appended by the next process that opens it.
//! Targets are resolved through symbolic links ([`crate::files::resolve_links`]) before they
//! are placed, so a link inside the worktree that leads out of it does not let a write out.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Subcommand;
use serde_json::{Value, json};
use strata_engine::ce::interactive;
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::guard::{self, Runtime, Verdict};
use strata_engine::ports::{Clock as _, Ids as _};
use strata_journal::projection::catch_up_one;
use strata_journal::{ExpectedVersion, Journal, StreamAppend};
use uuid::Uuid;

use crate::app::workspace::Workspace;
use crate::system::{SystemClock, V7Ids};

/// Largest hook input read.
const INPUT_BYTES_MAX: u64 = 1 << 20;
/// How long the hook takes at most, by default, ms.
pub const HOOK_DEADLINE_MS_DEFAULT: u64 = 20_000;
/// Shortest `--deadline-ms`.
pub const HOOK_DEADLINE_MS_MIN: u64 = 200;
/// Longest `--deadline-ms`: well below the runtime's hook timeout strata sets, so the runtime
/// (which lets the call through when its timeout fires) never decides first.
pub const HOOK_DEADLINE_MS_MAX: u64 = 45_000;
const _: () = assert!(HOOK_DEADLINE_MS_MAX + 10_000 <= crate::providers::worker_process::HOOK_TIMEOUT_S * 1000);
/// Part of the deadline kept back for printing the answer and writing a deferred record, ms.
const ANSWER_MARGIN_MS_MAX: u64 = 1_000;

/// The exit codes the hook can give: 0 lets the call go ahead, 2 blocks it in both runtimes.
/// Every exit of the hook goes through [`exit_code`] (a tidy test checks it).
const ALLOW: u8 = 0;
const DENY: u8 = 2;

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
    /// PreToolUse: deny writes outside the lineage's owned files. Exits 0 (allow) or 2 (deny,
    /// also for any error, bad arguments and `--help`), within --deadline-ms.
    PreToolUse {
        /// The journal holding the ownership map (a journal directory or a workspace root);
        /// default: `--dir`/`STRATA_DIR`, else the workspace found upward from the hook input's
        /// `cwd` (else the hook's own working directory).
        #[arg(long, value_parser = crate::cli::path_arg)]
        journal: Option<PathBuf>,
        /// The lineage the worker runs as; default: the interactive session the hook input's
        /// `session_id` names (a person's own session: it may write what `strata claim`
        /// gave it or every interactive session).
        #[arg(long)]
        lineage: Option<String>,
        /// The worker's directory (absolute): owned paths are relative to it; default: the
        /// workspace root.
        #[arg(long, value_parser = crate::cli::path_arg)]
        root: Option<PathBuf>,
        /// Answer within this many ms whatever happens (a call strata cannot decide in time is
        /// denied); keep it below the runtime's hook timeout.
        #[arg(long, default_value_t = HOOK_DEADLINE_MS_DEFAULT,
              value_parser = clap::value_parser!(u64).range(HOOK_DEADLINE_MS_MIN..=HOOK_DEADLINE_MS_MAX))]
        deadline_ms: u64,
        /// Set by a hook that forwards the call to the journal's owner: the event id to record
        /// the decision under.
        #[arg(long, hide = true)]
        decision_id: Option<Uuid>,
        /// Set by a hook that forwards the call: after this instant (Unix ms) the asking hook
        /// has denied the call and recorded that itself.
        #[arg(long, hide = true)]
        answer_by_ms: Option<i64>,
    },
}

/// One hook call's arguments as given.
#[derive(Clone, Debug)]
struct Given {
    runtime: Runtime,
    journal: Option<PathBuf>,
    lineage: Option<String>,
    root: Option<PathBuf>,
    deadline_ms: u64,
    decision_id: Option<Uuid>,
    answer_by_ms: Option<i64>,
    /// `--dir` / `STRATA_DIR`.
    dir: Option<PathBuf>,
}

impl Given {
    fn of(cmd: HookCommand, dir: Option<PathBuf>) -> Given {
        let (runtime, HookEvent::PreToolUse { journal, lineage, root, deadline_ms, decision_id, answer_by_ms }) =
            match cmd {
                HookCommand::Claude(e) => (Runtime::Claude, e),
                HookCommand::Codex(e) => (Runtime::Codex, e),
            };
        Given { runtime, journal, lineage, root, deadline_ms, decision_id, answer_by_ms, dir }
    }

    /// The call with every default filled in from the hook input (`None` while it is not
    /// read) and the process's working directory. Never fails: what cannot be found is left
    /// for [`Call::unusable`] to deny with.
    fn resolve(&self, input: Option<&Value>) -> Call {
        let field = |k: &str| input.and_then(|i| i.get(k)).and_then(Value::as_str);
        let session = if self.lineage.is_some() { None } else { field("session_id").map(str::to_owned) };
        let lineage = match (&self.lineage, &session) {
            (Some(l), _) => l.clone(),
            (None, Some(s)) => interactive::session_lineage(s),
            (None, None) => UNIDENTIFIED.to_owned(),
        };
        let journal = self.journal.clone().or_else(|| self.dir.clone()).or_else(|| {
            let from =
                field("cwd").map(PathBuf::from).filter(|p| p.is_absolute()).or_else(|| std::env::current_dir().ok());
            from.and_then(|cwd| {
                cwd.ancestors()
                    .take(crate::cli::locate::DISCOVERY_DEPTH_MAX)
                    .find(|d| d.join(".strata").is_dir())
                    .map(Path::to_path_buf)
            })
        });
        let root = self.root.clone().or_else(|| journal.as_ref().and_then(|j| std::fs::canonicalize(j).ok()));
        Call {
            runtime: self.runtime,
            journal,
            lineage,
            session,
            named: self.lineage.is_some(),
            root: root.unwrap_or_default(),
            deadline_ms: self.deadline_ms,
            decision_id: self.decision_id,
            answer_by_ms: self.answer_by_ms,
        }
    }
}

/// The lineage a denial is recorded under when neither `--lineage` nor the hook input names one.
const UNIDENTIFIED: &str = "session/unidentified";

/// One hook call, resolved.
#[derive(Clone, Debug)]
struct Call {
    runtime: Runtime,
    /// The workspace or journal (`None`: none given, none found).
    journal: Option<PathBuf>,
    /// The lineage decided for and recorded under.
    lineage: String,
    /// The interactive session, when no `--lineage` was given and the input names one.
    session: Option<String>,
    /// `--lineage` was given.
    named: bool,
    root: PathBuf,
    deadline_ms: u64,
    decision_id: Option<Uuid>,
    answer_by_ms: Option<i64>,
}

impl Call {
    /// Why this call cannot be decided at all, if it cannot.
    fn unusable(&self) -> Option<String> {
        if !self.named && self.session.is_none() {
            return Some(
                "[STRATA-E2608] the hook was given no --lineage and its input names no session_id, so strata cannot tell whose write this is; denied"
                    .to_owned(),
            );
        }
        if self.journal.is_none() {
            return Some(
                "[STRATA-E2609] no strata workspace: no --journal or --dir was given and no directory at or above the hook's cwd holds .strata/; run `strata init` in the repository, or pass --journal; denied"
                    .to_owned(),
            );
        }
        None
    }

    fn journal_path(&self) -> &Path {
        self.journal.as_deref().unwrap_or(Path::new("."))
    }

    fn runtime_name(&self) -> &'static str {
        match self.runtime {
            Runtime::Claude => "claude",
            Runtime::Codex => "codex",
        }
    }
}

/// What a check came to.
enum Answer {
    /// Decided and recorded in the journal (by this process or by the journal's owner).
    Recorded { allow: bool, reason: String },
    /// Denied, and the journal does not have it yet: it goes to the deferred record.
    Unrecorded(Verdict),
}

/// The process exit for a decision: the only place the hook turns one into an exit code.
fn exit_code(allow: bool) -> ExitCode {
    ExitCode::from(if allow { ALLOW } else { DENY })
}

/// Whether `args` (a process's arguments) run a hook: a hook's bad arguments are answered as a
/// denial too, never with clap's usage exit.
pub fn named(args: &[OsString]) -> bool {
    args.windows(2).any(|w| w[0] == "hook" && (w[1] == "claude" || w[1] == "codex"))
}

/// A hook invocation whose arguments did not parse (or asked for help): denied.
pub fn refuse_arguments(e: &clap::Error) -> ExitCode {
    let text = e.render().to_string();
    deny(
        &crate::output::Out::process(),
        &format!("[STRATA-E2004] strata's hook was called with arguments it cannot use; denied\n{text}"),
    )
}

/// Runs a hook as its own process: the answer is given within the call's deadline, and the
/// exit code is 0 for an allowed write and 2 for everything else.
pub fn main(cmd: HookCommand, dir: Option<PathBuf>) -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        deny(&crate::output::Out::process(), &format!("[STRATA-E2005] strata's hook failed ({info}); denied"));
        std::process::exit(i32::from(DENY));
    }));
    let given = Given::of(cmd, dir);
    let started = Instant::now();
    let margin = Duration::from_millis((given.deadline_ms / 4).min(ANSWER_MARGIN_MS_MAX));
    let by = started + Duration::from_millis(given.deadline_ms) - margin;
    let seen: Arc<OnceLock<Value>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let (asked, input) = (given.clone(), seen.clone());
    let spawned = std::thread::Builder::new().name("strata-hook".into()).spawn(move || {
        let _ = tx.send(check(&asked, by, &input));
    });
    let answer = match spawned {
        Ok(_) => rx.recv_timeout(by.saturating_duration_since(Instant::now())).unwrap_or_else(|_| {
            // What the call resolves to with the input read by now (as the helper resolves it).
            let call = given.resolve(seen.get());
            Answer::Unrecorded(guard::refused(
                &call.lineage,
                call.runtime,
                &call.root.to_string_lossy(),
                seen.get(),
                format!(
                    "[STRATA-E2001] strata did not answer within {} ms (its daemon or journal is stopped, hung or busy); denied",
                    call.deadline_ms
                ),
            ))
        }),
        Err(e) => {
            let call = given.resolve(None);
            Answer::Unrecorded(guard::refused(
                &call.lineage,
                call.runtime,
                &call.root.to_string_lossy(),
                None,
                format!("[STRATA-E2005] strata's hook cannot start its check ({e}); denied"),
            ))
        }
    };
    match answer {
        Answer::Recorded { allow: true, .. } => exit_code(true),
        Answer::Recorded { allow: false, reason } => deny(&crate::output::Out::process(), &reason),
        Answer::Unrecorded(v) => {
            let call = given.resolve(seen.get());
            let deferred = call.journal.as_deref().ok_or_else(|| "no workspace".to_owned()).and_then(|j| defer(j, &v));
            let reason = match deferred {
                Ok(()) => v.reason,
                Err(why) => format!("{} (the denial could not be recorded: {why})", v.reason),
            };
            deny(&crate::output::Out::process(), &reason)
        }
    }
}

/// Runs a hook call sent to the journal's owner (`strata serve`, `strata run`): decides on its
/// journal handle and records the decision under the asker's id, unless the asker has already
/// given up.
pub fn served(cmd: HookCommand, journal: &Journal, ws: &Workspace) -> ExitCode {
    let given = Given::of(cmd, Some(ws.root().to_path_buf()));
    let input = match read_input(ws.stdin_bytes(INPUT_BYTES_MAX)) {
        Ok(v) => v,
        Err(why) => return deny(ws.out(), &why),
    };
    let call = given.resolve(Some(&input));
    if let Some(why) = call.unusable() {
        return deny(ws.out(), &why);
    }
    if call.answer_by_ms.is_some_and(|by| now_ms() >= by) {
        return deny(
            ws.out(),
            "[STRATA-E2001] the journal's owner got to this call after the asking hook's deadline; the hook denied it and recorded that itself",
        );
    }
    // Denials other hooks could not record while this process was unreachable.
    let _ = journal.fold_pending();
    match decide_on(journal, &call, &input) {
        Answer::Recorded { allow, reason } => {
            if allow {
                exit_code(true)
            } else {
                deny(ws.out(), &reason)
            }
        }
        Answer::Unrecorded(v) => {
            let reason = match journal.dir().ok_or("an in-memory journal".to_owned()).and_then(|d| defer_into(d, &v)) {
                Ok(()) => v.reason,
                Err(why) => format!("{} (the denial could not be recorded: {why})", v.reason),
            };
            deny(ws.out(), &reason)
        }
    }
}

/// Prints the runtime's deny and the reason to `o` (the hook process's own streams, or the
/// asking hook's buffers when the journal's owner decides); the exit code that blocks the call.
fn deny(o: &crate::output::Out, reason: &str) -> ExitCode {
    let out = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": reason}});
    outln!(o, "{out}");
    errln!(o, "{reason}");
    exit_code(false)
}

fn now_ms() -> i64 {
    SystemClock.now_ns() / 1_000_000
}

/// The hook call's JSON from `read` (its stdin, at most one byte over the limit).
fn read_input(read: std::io::Result<Vec<u8>>) -> Result<Value, String> {
    let bytes =
        read.map_err(|e| format!("strata could not check this write (stdin unreadable: {e}) [STRATA-E2002]; denied"))?;
    if bytes.len() as u64 > INPUT_BYTES_MAX {
        return Err(format!(
            "strata could not check this write (hook input over {INPUT_BYTES_MAX} bytes) [STRATA-E2002]; denied"
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("strata could not check this write (hook input is not JSON: {e}) [STRATA-E2002]; denied"))
}

/// The check a hook process runs on its helper thread: read the call, then ask the journal's
/// owner or decide on the journal, all before `by`.
fn check(given: &Given, by: Instant, seen: &OnceLock<Value>) -> Answer {
    let unread = given.resolve(None);
    let refused = |call: &Call, input: Option<&Value>, why: String| {
        Answer::Unrecorded(guard::refused(&call.lineage, call.runtime, &call.root.to_string_lossy(), input, why))
    };
    let input = match read_input(crate::output::stdin_bytes(INPUT_BYTES_MAX)) {
        Ok(v) => v,
        Err(why) => return refused(&unread, None, why),
    };
    let input = seen.get_or_init(|| input);
    let call = &given.resolve(Some(input));
    if let Some(why) = call.unusable() {
        return refused(call, Some(input), why);
    }
    if let Err(e) = ledger::check_lineage_id(&call.lineage) {
        let what = if call.named { "--lineage" } else { "the hook input's session_id" };
        return refused(call, Some(input), format!("[STRATA-E2004] {what}: {}; denied", e.detail));
    }
    if let Some(stream) = crate::daemon::connect(&Workspace::at(call.journal_path())) {
        return ask_owner(call, input, stream, by);
    }
    let left = by.saturating_duration_since(Instant::now());
    let j = match super::ce::open_journal_at(call.journal_path(), false, left) {
        Ok(j) => j,
        Err(e) => {
            return refused(
                call,
                Some(input),
                format!("[STRATA-E2003] the journal cannot be opened ({}); denied", e.detail),
            );
        }
    };
    let answer = decide_on(&j, call, input);
    let _ = j.close_blocking();
    answer
}

/// Sends the call to the process serving the journal and takes its answer, or denies when it
/// does not come before `by` (stopped or hung owner) or the connection breaks (killed owner).
fn ask_owner(call: &Call, input: &Value, stream: std::os::unix::net::UnixStream, by: Instant) -> Answer {
    let refused = |why: String| {
        Answer::Unrecorded(guard::refused(&call.lineage, call.runtime, &call.root.to_string_lossy(), Some(input), why))
    };
    let left = by.saturating_duration_since(Instant::now());
    let answer_by_ms = now_ms() + i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
    let mut argv: Vec<String> = vec![
        "strata".into(),
        "hook".into(),
        call.runtime_name().into(),
        "pre-tool-use".into(),
        "--journal".into(),
        call.journal_path().display().to_string(),
    ];
    // An interactive session is named by the input the owner is sent, as here.
    if call.named {
        argv.extend(["--lineage".into(), call.lineage.clone()]);
    }
    argv.extend([
        "--root".into(),
        call.root.display().to_string(),
        "--deadline-ms".into(),
        call.deadline_ms.to_string(),
        "--decision-id".into(),
        V7Ids.next_id().to_string(),
        "--answer-by-ms".into(),
        answer_by_ms.to_string(),
    ]);
    let dir = match std::fs::canonicalize(call.journal_path()) {
        Ok(d) => d,
        Err(e) => {
            return refused(format!("[STRATA-E2003] --journal {}: {e}; denied", call.journal_path().display()));
        }
    };
    match crate::daemon::exchange(stream, argv, &dir, Some(input.to_string()), Some(left)) {
        Ok(reply) if reply.code == ALLOW => Answer::Recorded { allow: true, reason: String::new() },
        Ok(reply) if reply.code == DENY => Answer::Recorded { allow: false, reason: reply.stderr.trim().to_owned() },
        Ok(reply) => refused(format!(
            "[STRATA-E2003] the journal's owner did not decide this call (exit {}: {}); denied",
            reply.code,
            reply.stderr.trim()
        )),
        // Its read timing out is the deadline passing, whichever of the two clocks sees it first.
        Err(e) if timed_out(&e) => refused(format!(
            "[STRATA-E2001] strata did not answer within {} ms (its daemon or journal is stopped, hung or busy); denied",
            call.deadline_ms
        )),
        Err(e) => refused(format!("[STRATA-E2003] the journal's owner did not answer ({e:#}); denied")),
    }
}

/// Whether `e` is a socket read or write that ran out of its time (`EAGAIN` under a timeout).
fn timed_out(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| matches!(io.kind(), WouldBlock | TimedOut)))
}

/// Decides on `j` and records the verdict under the call's id.
fn decide_on(j: &Journal, call: &Call, input: &Value) -> Answer {
    let refused = |why: String| {
        Answer::Unrecorded(guard::refused(&call.lineage, call.runtime, &call.root.to_string_lossy(), Some(input), why))
    };
    let Some(root) = call.root.to_str() else {
        return refused("[STRATA-E2004] --root is not UTF-8; denied".to_owned());
    };
    let mut state = Ledger::default();
    if let Err(e) = catch_up_one(&mut state, j) {
        return refused(format!("[STRATA-E2003] the ownership map cannot be read ({e}); denied"));
    }
    let links = |p: &str| {
        let resolved = crate::files::resolve_links(Path::new(p))?;
        resolved.into_os_string().into_string().map_err(|p| format!("{} is not UTF-8", p.to_string_lossy()))
    };
    let v = match &call.session {
        Some(session) => guard::decide_session(&state, session, call.runtime, root, input, &links),
        None => guard::decide_resolved(&state, &call.lineage, call.runtime, root, input, &links),
    };
    let mut ids = ChosenId(call.decision_id);
    let event = match guard::event(&v, &mut ids, &SystemClock) {
        Ok(e) => e,
        Err(e) => return Answer::Unrecorded(Verdict { allow: false, reason: format!("{}; denied", e.detail), ..v }),
    };
    let append =
        StreamAppend { stream: guard::stream(&call.lineage), expected: ExpectedVersion::Any, events: vec![event] };
    match j.append_multi_blocking(vec![append]) {
        Ok(Ok(_)) => Answer::Recorded { allow: v.allow, reason: v.reason },
        Ok(Err(conflict)) => Answer::Unrecorded(Verdict {
            allow: false,
            reason: format!("[STRATA-E2003] the decision could not be recorded ({conflict:?}); denied"),
            ..v
        }),
        Err(e) => Answer::Unrecorded(Verdict {
            allow: false,
            reason: format!("[STRATA-E2003] the decision could not be recorded ({e}); denied"),
            ..v
        }),
    }
}

/// Ids for the decision event: the one the asking hook chose, else a fresh one.
struct ChosenId(Option<Uuid>);

impl strata_engine::ports::Ids for ChosenId {
    fn next_id(&mut self) -> Uuid {
        self.0.take().unwrap_or_else(|| V7Ids.next_id())
    }
}

/// The journal directory `--journal` names (a workspace root or a journal directory). A
/// workspace whose journal lives in PostgreSQL has no `sled/`, only its config; its journal
/// directory on this machine still takes deferred denials, which the next open folds in.
fn journal_dir(given: &Path) -> Result<PathBuf, String> {
    let in_workspace = given.join(".strata").join("journal");
    if in_workspace.join("sled").is_dir() || given.join(".strata").join("config.toml").is_file() {
        Ok(in_workspace)
    } else if given.join("sled").is_dir() {
        Ok(given.to_owned())
    } else {
        Err(format!("no journal at {}", given.display()))
    }
}

/// Writes the denial `v` to the pending record of the journal `--journal` names.
fn defer(journal: &Path, v: &Verdict) -> Result<(), String> {
    defer_into(&journal_dir(journal)?, v)
}

fn defer_into(dir: &Path, v: &Verdict) -> Result<(), String> {
    let event = guard::event(v, &mut V7Ids, &SystemClock).map_err(|e| e.detail)?;
    strata_journal::pending::defer(dir, &guard::stream(&v.lineage_id), &event).map_err(|e| e.to_string())?;
    Ok(())
}
