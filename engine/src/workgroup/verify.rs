//! Verification a run carries out itself: a task's `verify` commands (the narrowest check that
//! proves its criterion) run in the worker's worktree after a successful turn, and the plan's
//! consolidated `suite` before the review phase starts. The edge runs the commands (a time limit,
//! bounded output, writes confined to the worktree) and saves each full log as an artifact under
//! `.strata/artifacts/`; the engine only sees the results, recorded as `worker.checked` on the
//! attempt's worker stream before its end, and decides: a failed check fails the attempt, and the
//! retry's capsule carries the check's bounded summary and the artifact's path in its
//! `failures`, never the log itself.

use serde::{Deserialize, Serialize};

/// Most `verify` commands of one task, and of the plan's suite.
pub const COMMANDS_MAX: usize = 8;
/// Longest command, bytes.
pub const COMMAND_BYTES_MAX: usize = 1024;
/// A command's time limit when the plan does not say, seconds.
pub const TIMEOUT_SECONDS_DEFAULT: u64 = 600;
/// Longest time limit a plan may give, seconds.
pub const TIMEOUT_SECONDS_MAX: u64 = 7_200;
/// Most bytes of a check's output kept in its artifact (the last ones).
pub const LOG_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Longest summary of a check recorded in the journal and given to a follow-up worker, bytes.
pub const SUMMARY_BYTES_MAX: usize = 1024;
/// Directory of artifacts, relative to the workspace.
pub const ARTIFACTS_DIR: &str = ".strata/artifacts";

/// An artifact a run saved: where it is and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRef {
    /// Workspace-relative path.
    pub path: String,
    /// blake3 of its bytes, hex.
    pub blake3: String,
    /// Its size, bytes.
    pub bytes: u64,
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The command, as the plan wrote it.
    pub command: String,
    /// Exit code (`None`: killed, or never started).
    pub exit_code: Option<i32>,
    /// It passed: exit 0 within its time limit.
    pub passed: bool,
    /// It ran past its time limit and was killed.
    pub timed_out: bool,
    /// Its wall time, milliseconds.
    pub wall_ms: u64,
    /// Its whole output (stdout then stderr), saved.
    pub log: Option<ArtifactRef>,
    /// The last lines of its output, at most [`SUMMARY_BYTES_MAX`] bytes.
    pub summary: String,
    /// Whether its writes were confined to the worktree (Landlock); `false` where the kernel
    /// cannot confine them, which the run reports.
    pub confined: bool,
}

/// `worker.checked` v1: the attempt's `verify` commands, as the edge ran them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checked {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The checks, in the plan's order (the first failure ends the list).
    pub checks: Vec<Check>,
}

impl Checked {
    /// The first failed check, if any.
    pub fn failed(&self) -> Option<&Check> {
        self.checks.iter().find(|c| !c.passed)
    }

    /// `(passed, total)`.
    pub fn tally(&self) -> (u64, u64) {
        (self.checks.iter().filter(|c| c.passed).count() as u64, self.checks.len() as u64)
    }
}

/// The failure reason of an attempt whose check `c` failed.
pub fn failure_reason(c: &Check) -> String {
    let how = match (c.timed_out, c.exit_code) {
        (true, _) => "ran past its time limit".to_owned(),
        (false, Some(code)) => format!("exited {code}"),
        (false, None) => "was killed".to_owned(),
    };
    let log = c.log.as_ref().map(|l| format!("; full log {}", l.path)).unwrap_or_default();
    format!("verify `{}` {how}{log}", c.command)
}

/// `text` cut to its last [`SUMMARY_BYTES_MAX`] bytes at a character boundary (`…` marks a cut).
pub fn summary_of(text: &str) -> String {
    let text = text.trim_end();
    if text.len() <= SUMMARY_BYTES_MAX {
        return text.to_owned();
    }
    let mut start = text.len() - (SUMMARY_BYTES_MAX - '…'.len_utf8());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// The problems of a list of commands, as `(field, rule)`.
pub fn problems(field: &'static str, commands: &[String]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if commands.len() > COMMANDS_MAX {
        out.push((field, format!("{} commands: at most {COMMANDS_MAX}", commands.len())));
    }
    for c in commands {
        if c.trim().is_empty() || c.len() > COMMAND_BYTES_MAX || c.contains('\0') {
            out.push((field, format!("each command is 1 to {COMMAND_BYTES_MAX} bytes, without NUL")));
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_keeps_the_end_and_a_reason_names_the_log() {
        let long = "x".repeat(5000) + "\nerror: the last line";
        let s = summary_of(&long);
        assert!(s.len() <= SUMMARY_BYTES_MAX && s.ends_with("the last line") && s.starts_with('…'));
        let c = Check {
            command: "cargo test".into(),
            exit_code: Some(101),
            passed: false,
            timed_out: false,
            wall_ms: 5,
            log: Some(ArtifactRef { path: ".strata/artifacts/a.log".into(), blake3: "00".into(), bytes: 1 }),
            summary: s,
            confined: true,
        };
        assert_eq!(failure_reason(&c), "verify `cargo test` exited 101; full log .strata/artifacts/a.log");
    }
}
