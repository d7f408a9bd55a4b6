//! Write guards: what a worker's PreToolUse hook decides. A worker may write only paths its
//! lineage owns in the dispatch ledger's ownership map (a person's own interactive session:
//! what it or every interactive session claimed, [`decide_session`]); everything else is
//! denied, and so is anything the guard cannot read or place (fail closed).
//!
//! Pure: the hook's JSON (as Claude Code or Codex sends it), the ledger, the lineage and the
//! worker's root directory in; a [`Verdict`] out. The adapter prints the runtime's deny form and
//! records the verdict as an event ([`event`]).
//!
//! Which calls are checked: Claude Code's `Write`, `Edit`, `MultiEdit` and `NotebookEdit` (their
//! `file_path` / `notebook_path`), and Codex's `apply_patch` (every `*** Add File:`, `*** Update
//! File:`, `*** Delete File:` and `*** Move to:` line, relative to the hook's `cwd`). Shell
//! commands cannot be checked before they run; the post-turn diff check is the guard for them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_journal::EventData;

use crate::ce::ledger::{self, Ledger};
use crate::ce::{CeError, paths};
use crate::ports::{Clock, Ids};

/// `guard.write-allowed`.
pub const ALLOWED: &str = "guard.write-allowed";
/// `guard.write-denied`.
pub const DENIED: &str = "guard.write-denied";
/// Every write-guard event type.
pub const ALL: [&str; 2] = [ALLOWED, DENIED];
/// Claude Code tools that write a file.
pub const CLAUDE_WRITE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];
/// Most target paths one call may name.
pub const TARGETS_MAX: usize = 1_024;

/// The agent runtime whose hook asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// Claude Code.
    Claude,
    /// OpenAI Codex.
    Codex,
}

/// The guard's answer, recorded as `guard.write-allowed` or `guard.write-denied` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// The lineage the worker runs as.
    pub lineage_id: String,
    /// Which runtime asked.
    pub runtime: Runtime,
    /// The tool, if the input named one.
    pub tool: Option<String>,
    /// The targets, canonical and repository-relative where they could be placed.
    pub paths: Vec<String>,
    /// Whether the call may go ahead.
    pub allow: bool,
    /// Why, in words the model and the audit both read.
    pub reason: String,
}

/// The stream a lineage's guard decisions go to.
pub fn stream(lineage_id: &str) -> String {
    format!("guard/{lineage_id}")
}

/// The paths an `apply_patch` envelope touches, in order (duplicates kept out).
pub fn patch_targets(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in patch.lines() {
        let line = line.trim_end_matches('\r');
        let target = ["*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix));
        if let Some(t) = target.map(str::trim).filter(|t| !t.is_empty())
            && !out.iter().any(|o| o == t)
        {
            out.push(t.to_owned());
        }
    }
    out
}

/// The tool and the raw target paths of a hook input; `Ok(None)` for a call that writes no file
/// the guard can see.
pub fn targets(runtime: Runtime, input: &Value) -> Result<Option<(String, Vec<String>)>, String> {
    let tool = input.get("tool_name").and_then(Value::as_str).ok_or("the hook input has no tool_name")?;
    let args = input.get("tool_input").filter(|v| v.is_object()).ok_or("the hook input has no tool_input object")?;
    let field = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    let found = match runtime {
        Runtime::Claude if CLAUDE_WRITE_TOOLS.contains(&tool) => {
            let key = if tool == "NotebookEdit" { "notebook_path" } else { "file_path" };
            vec![field(key).ok_or_else(|| format!("{tool} without a {key}"))?]
        }
        Runtime::Codex if matches!(tool, "apply_patch" | "Edit" | "Write") => {
            let patch = field("command").or_else(|| field("patch")).ok_or("apply_patch without a patch")?;
            let t = patch_targets(&patch);
            if t.is_empty() {
                return Err("an apply_patch envelope naming no file".to_owned());
            }
            t
        }
        _ => return Ok(None),
    };
    if found.len() > TARGETS_MAX {
        return Err(format!("{} targets in one call; at most {TARGETS_MAX}", found.len()));
    }
    Ok(Some((tool.to_owned(), found)))
}

/// `raw` made absolute: absolute paths as they are, relative ones taken from `cwd`.
fn absolute(cwd: Option<&str>, raw: &str) -> Result<String, String> {
    if raw.starts_with('/') {
        return Ok(raw.to_owned());
    }
    let cwd = cwd.ok_or("a relative path but no cwd in the hook input")?;
    Ok(format!("{}/{raw}", cwd.trim_end_matches('/')))
}

/// `absolute` as a path relative to `root`, or why it lies outside.
fn relative(root: &str, absolute: &str, raw: &str) -> Result<String, String> {
    let root = root.trim_end_matches('/');
    let inside = absolute.strip_prefix(root).and_then(|r| r.strip_prefix('/'));
    inside.map(str::to_owned).ok_or_else(|| {
        if absolute == raw {
            format!("{raw} is outside the worker's directory {root}")
        } else {
            format!("{raw} (as the file system resolves it: {absolute}) is outside the worker's directory {root}")
        }
    })
}

/// How the edge resolves an absolute path through the file system's symbolic links before the
/// guard places it: the path the write would really reach, or why it cannot be told (which
/// denies). [`decide`] resolves nothing (a path is taken as written).
pub type Links<'a> = &'a dyn Fn(&str) -> Result<String, String>;

/// Decides a hook call for `lineage_id`, whose worker runs in `root` (absolute), taking paths
/// as written (no file-system links).
pub fn decide(ledger: &Ledger, lineage_id: &str, runtime: Runtime, root: &str, input: &Value) -> Verdict {
    decide_resolved(ledger, lineage_id, runtime, root, input, &|p: &str| Ok(p.to_owned()))
}

/// Decides a hook call as [`decide`], with the root and every target resolved through `links`
/// first, so a write through a link that leaves the owned paths is denied.
pub fn decide_resolved(
    ledger: &Ledger,
    lineage_id: &str,
    runtime: Runtime,
    root: &str,
    input: &Value,
    links: Links<'_>,
) -> Verdict {
    decide_for(ledger, lineage_id, Owner::Lineage, runtime, root, input, links)
}

/// Decides a hook call of the interactive session the runtime calls `session_id` (a person's
/// own Claude Code or Codex session, which strata did not start): allowed only inside what the
/// session claimed for itself or what was claimed for every interactive session
/// ([`crate::ce::interactive`]); recorded under the session's lineage.
pub fn decide_session(
    ledger: &Ledger,
    session_id: &str,
    runtime: Runtime,
    root: &str,
    input: &Value,
    links: Links<'_>,
) -> Verdict {
    let lineage = crate::ce::interactive::session_lineage(session_id);
    decide_for(ledger, &lineage, Owner::Session(session_id), runtime, root, input, links)
}

/// Whose paths a call is checked against.
#[derive(Clone, Copy)]
enum Owner<'a> {
    /// The lineage's own.
    Lineage,
    /// An interactive session's, with the shared interactive claims.
    Session(&'a str),
}

fn decide_for(
    ledger: &Ledger,
    lineage_id: &str,
    owner: Owner<'_>,
    runtime: Runtime,
    root: &str,
    input: &Value,
    links: Links<'_>,
) -> Verdict {
    let verdict = |tool: Option<String>, paths: Vec<String>, allow: bool, reason: String| Verdict {
        lineage_id: lineage_id.to_owned(),
        runtime,
        tool,
        paths,
        allow,
        reason,
    };
    let (tool, raw) = match targets(runtime, input) {
        Ok(Some(t)) => t,
        Ok(None) => {
            let tool = input.get("tool_name").and_then(Value::as_str).map(str::to_owned);
            return verdict(tool, vec![], true, "the call writes no file the guard checks".to_owned());
        }
        Err(why) => return verdict(None, vec![], false, format!("strata cannot read this call ({why}); denied")),
    };
    if !root.starts_with('/') {
        return verdict(Some(tool), vec![], false, "the guard was given no absolute worker root; denied".to_owned());
    }
    let root = match links(root) {
        Ok(r) => r,
        Err(why) => {
            return verdict(
                Some(tool),
                raw,
                false,
                format!("the worker's directory cannot be resolved ({why}); denied"),
            );
        }
    };
    let owned: Vec<String> = match owner {
        Owner::Lineage => match ledger.owners().get(lineage_id) {
            Some(o) => o.paths.clone(),
            None => {
                return verdict(
                    Some(tool),
                    raw,
                    false,
                    format!("lineage {lineage_id} owns no files; nothing may be written"),
                );
            }
        },
        Owner::Session(session) => match crate::ce::interactive::session_paths(ledger, session) {
            Some(p) => p,
            None => {
                let reason = format!(
                    "interactive session {session} owns no files; nothing may be written (claim them first: `strata claim PATHS --for {session}` or `strata claim PATHS --interactive`)"
                );
                return verdict(Some(tool), raw, false, reason);
            }
        },
    };
    let cwd = input.get("cwd").and_then(Value::as_str);
    let mut placed = Vec::with_capacity(raw.len());
    let mut outside = Vec::new();
    for r in &raw {
        let canonical = absolute(cwd, r)
            .and_then(|a| links(&a))
            .and_then(|a| relative(&root, &a, r))
            .and_then(|rel| paths::canonical(ledger.workspace(), &rel, "path").map_err(|e: CeError| e.detail));
        match canonical {
            Err(why) => {
                return verdict(Some(tool), raw.clone(), false, format!("write outside owned files: {why}"));
            }
            Ok(p) => {
                if !owned.iter().any(|o| paths::contains(o, &p)) {
                    outside.push(p.clone());
                }
                placed.push(p);
            }
        }
    }
    if outside.is_empty() {
        let n = placed.len();
        verdict(Some(tool), placed, true, format!("{n} path(s) inside what lineage {lineage_id} owns"))
    } else {
        let reason = format!(
            "write outside owned files: {} (lineage {lineage_id} owns {})",
            outside.join(", "),
            owned.join(", ")
        );
        verdict(Some(tool), placed, false, reason)
    }
}

/// A denial made without the ownership map (strata could not be reached in time, or the input
/// could not be read): the tool and the targets as the input names them, where it can be read,
/// each relative to `root` when it lies inside it (as written: links are not resolved).
pub fn refused(lineage_id: &str, runtime: Runtime, root: &str, input: Option<&Value>, reason: String) -> Verdict {
    let (tool, paths) = match input.map(|i| (i, targets(runtime, i))) {
        Some((i, Ok(Some((tool, raw))))) => {
            let cwd = i.get("cwd").and_then(Value::as_str);
            let placed = raw
                .iter()
                .map(|r| absolute(cwd, r).and_then(|a| relative(root, &a, r)).unwrap_or_else(|_| r.clone()))
                .collect();
            (Some(tool), placed)
        }
        _ => (input.and_then(|i| i.get("tool_name")).and_then(Value::as_str).map(str::to_owned), vec![]),
    };
    Verdict { lineage_id: lineage_id.to_owned(), runtime, tool, paths, allow: false, reason }
}

/// The event recording `v`.
pub fn event(v: &Verdict, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<EventData, CeError> {
    ledger::event(ids, clock, if v.allow { ALLOWED } else { DENIED }, v)
}
