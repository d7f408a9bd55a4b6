//! Continuation status: what earlier attempts of a task did and why they ended, read from the
//! workgroup's journal stream and rendered as a prompt section ("Continuation status").
//!
//! It is a function of the journal up to a recorded position and nothing else: [`read`] folds
//! the `workgroup/<wg>` stream's `task.dispatched`, `task.write-violation`, `task.conflicted`
//! and `task.failed` events of one task up to that sequence, so `prompt verify` derives the same
//! attempts, byte for byte, from the position the manifest names
//! ([`super::assemble::ContinuationSource`]). A profile reaches it with the template variable
//! `{continuationStatus}` at a level (its virtual path is `continuation/<task>`, which `never`
//! globs match like any other); it is counted and budgeted like every other item.
//!
//! * **L1**: every earlier attempt with its provider, mode and model, how it ended (the whole
//!   reason, at most [`REASON_CHARS_MAX`] characters), the cap it reached, the check that failed
//!   it, the paths written outside ownership, the files in conflict, whether it was retried.
//! * **L2**: one line per attempt: how it ended and the first line of its reason.
//! * **L3**: one line for the task: how many attempts ended and how the last one did.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_journal::{Hash, Journal};

use super::render::Level;

/// Characters of a failure's reason an L1 rendering keeps.
pub const REASON_CHARS_MAX: usize = 1_000;
/// Characters of a failure's reason an L2 line keeps.
pub const LINE_CHARS_MAX: usize = 160;
/// Earlier attempts a continuation lists (the latest ones).
pub const ATTEMPTS_MAX: usize = 20;
/// Events of a workgroup stream read per page.
const PAGE_EVENTS: usize = 1_000;

/// One earlier attempt and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Attempt {
    /// Attempt number (1 first).
    pub attempt: u32,
    /// Provider it was dispatched to.
    pub provider: String,
    /// Mode it ran as.
    pub mode: String,
    /// Model it ran on, when the dispatch names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How it ended: `failed`, or `running` when nothing ended it by the position read.
    pub ended: String,
    /// The failure's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The cap it reached, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<String>,
    /// The check command that failed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// Paths it wrote outside its ownership.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<String>,
    /// Files in conflict when its changes were applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// Whether the failure sent the task back for another attempt.
    pub retried: bool,
}

/// What the earlier attempts of a task did, as read from the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Continuation {
    /// The workgroup.
    pub workgroup: String,
    /// The plan's task id.
    pub task: String,
    /// Journal sequence read through.
    pub position: u64,
    /// Earlier attempts that ended, oldest first (at most [`ATTEMPTS_MAX`], the latest).
    pub attempts: Vec<Attempt>,
    /// Attempts left out for [`ATTEMPTS_MAX`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn text(v: &Value, field: &str) -> String {
    v.get(field).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    v.get(field).and_then(Value::as_array).into_iter().flatten().filter_map(|x| x.as_str().map(str::to_owned)).collect()
}

/// The first `max` characters of `s`, with ` …` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let kept: String = s.chars().take(max).collect();
    format!("{} …", kept.trim_end())
}

/// The continuation of task `task` of workgroup `workgroup` from the journal through sequence
/// `position`: `None` when no attempt of it had ended by then (a first attempt).
pub fn read(journal: &Journal, workgroup: &str, task: &str, position: u64) -> Result<Option<Continuation>, String> {
    use crate::workgroup::events as ev;
    let stream = crate::workgroup::state::stream(workgroup);
    let mut attempts: std::collections::BTreeMap<u32, Attempt> = std::collections::BTreeMap::new();
    let mut from = 1u64;
    'pages: loop {
        let page = journal.read_stream(&stream, from, PAGE_EVENTS).map_err(|e| e.to_string())?;
        if page.is_empty() {
            break;
        }
        from += page.len() as u64;
        for e in &page {
            if e.seq > position {
                break 'pages;
            }
            if ![ev::DISPATCHED, ev::FAILED, ev::VIOLATION, ev::CONFLICTED].contains(&e.event_type.as_str()) {
                continue;
            }
            let v: Value = serde_json::from_slice(&e.payload).map_err(|x| format!("{}: {x}", e.event_type))?;
            if v.get("task").and_then(Value::as_str) != Some(task) {
                continue;
            }
            let n = v.get("attempt").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
            let a = attempts.entry(n).or_insert_with(|| Attempt {
                attempt: n,
                ended: "running".into(),
                ..Attempt::default()
            });
            match e.event_type.as_str() {
                ev::DISPATCHED => {
                    a.provider = text(&v, "provider");
                    a.mode = text(&v, "runs_as");
                    a.model = v
                        .pointer("/model/name")
                        .or_else(|| v.pointer("/model/tier"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                ev::VIOLATION => a.violations.extend(strings(&v, "paths")),
                ev::CONFLICTED => a.conflicts.extend(strings(&v, "files")),
                _ => {
                    a.ended = "failed".into();
                    a.reason = cut(&text(&v, "reason"), REASON_CHARS_MAX);
                    a.retried = v.get("retry").and_then(Value::as_bool).unwrap_or(false);
                    a.check = v.pointer("/check/command").and_then(Value::as_str).map(str::to_owned);
                    a.capped = v.get("capped").filter(|c| !c.is_null()).map(|c| {
                        format!(
                            "{}: {} reached the cap of {}",
                            text(c, "measure"),
                            c.get("observed").and_then(Value::as_u64).unwrap_or(0),
                            c.get("limit").and_then(Value::as_u64).unwrap_or(0)
                        )
                    });
                }
            }
        }
    }
    let mut ended: Vec<Attempt> = attempts.into_values().filter(|a| a.ended != "running").collect();
    if ended.is_empty() {
        return Ok(None);
    }
    let omitted = ended.len().saturating_sub(ATTEMPTS_MAX);
    ended.drain(..omitted);
    for a in &mut ended {
        a.violations.sort();
        a.violations.dedup();
        a.conflicts.sort();
        a.conflicts.dedup();
    }
    Ok(Some(Continuation {
        workgroup: workgroup.to_owned(),
        task: task.to_owned(),
        position,
        attempts: ended,
        omitted,
    }))
}

impl Continuation {
    /// blake3 of its canonical JSON: the content hash the bill of materials records.
    pub fn hash(&self) -> Hash {
        crate::canonical::hash(&serde_json::to_value(self).unwrap_or_default())
    }

    /// The section's text at `level`.
    pub fn render(&self, level: Level) -> String {
        let n = self.attempts.len() + self.omitted;
        let last = self.attempts.last();
        match level {
            Level::L3 => format!(
                "- {} earlier attempt{} of task {} ended; the last, attempt {}, {}\n",
                n,
                if n == 1 { "" } else { "s" },
                self.task,
                last.map_or(0, |a| a.attempt),
                last.map_or_else(String::new, |a| format!(
                    "{}: {}",
                    a.ended,
                    cut(first_line(&a.reason), LINE_CHARS_MAX)
                )),
            ),
            Level::L2 | Level::L1 => {
                let mut out = format!(
                    "### Continuation of task {} ({} earlier attempt{}, journal sequence {})\n",
                    self.task,
                    n,
                    if n == 1 { "" } else { "s" },
                    self.position
                );
                if self.omitted > 0 {
                    out.push_str(&format!("({} earlier attempts not listed)\n", self.omitted));
                }
                for a in &self.attempts {
                    let how =
                        if level == Level::L2 { cut(first_line(&a.reason), LINE_CHARS_MAX) } else { a.reason.clone() };
                    out.push_str(&format!(
                        "- attempt {} ({} on {}{}): {}: {how}{}\n",
                        a.attempt,
                        a.mode,
                        a.provider,
                        a.model.as_ref().map(|m| format!(", model {m}")).unwrap_or_default(),
                        a.ended,
                        if a.retried { "; retried" } else { "" }
                    ));
                    if level == Level::L1 {
                        if let Some(c) = &a.capped {
                            out.push_str(&format!("  - cap: {c}\n"));
                        }
                        if let Some(c) = &a.check {
                            out.push_str(&format!("  - failed check: {c}\n"));
                        }
                        if !a.violations.is_empty() {
                            out.push_str(&format!("  - wrote outside its files: {}\n", a.violations.join(", ")));
                        }
                        if !a.conflicts.is_empty() {
                            out.push_str(&format!("  - conflicted on: {}\n", a.conflicts.join(", ")));
                        }
                    }
                }
                out
            }
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}
