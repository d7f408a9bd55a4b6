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

/// `workgroup.suite-checked` v1: one run of the plan's consolidated suite on the integration
/// branch, holding the changes of the tasks in `covers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteChecked {
    /// Which run of the suite this is in the workgroup (1, 2, …; names its logs).
    pub run: u32,
    /// The completed tasks whose changes the branch held, sorted.
    pub covers: Vec<String>,
    /// The checks, in the plan's order (the first failure ends the list).
    pub checks: Vec<Check>,
}

impl SuiteChecked {
    /// Whether every command ran and passed (`of`: how many the suite has).
    pub fn passed(&self, of: usize) -> bool {
        self.checks.len() == of && self.checks.iter().all(|c| c.passed)
    }

    /// One line: `passed 2/2 on the changes of 3 tasks`, or the first failure's reason.
    pub fn describe(&self, of: usize) -> String {
        let passed = self.checks.iter().filter(|c| c.passed).count();
        let tasks = match self.covers.len() {
            1 => "1 task".to_owned(),
            n => format!("{n} tasks"),
        };
        match self.checks.iter().find(|c| !c.passed) {
            None if self.checks.len() == of => format!("passed {passed}/{of} on the changes of {tasks}"),
            None => format!("ran {} of its {of} commands on the changes of {tasks}", self.checks.len()),
            Some(c) => format!("failed on the changes of {tasks}: {}", failure_reason(c)),
        }
    }
}

/// The consolidated suite is due: run it on the integration branch, now holding the changes of
/// `covers`, as the suite's run `run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteDue {
    /// Its run number in the workgroup.
    pub run: u32,
    /// The completed tasks whose changes the integration branch holds, sorted.
    pub covers: Vec<String>,
}

/// The completed tasks whose changes went onto the integration branch (a completion with a
/// commit), sorted. Without a repository no task has a commit, so the suite runs once.
pub fn integrated(g: &super::state::Workgroup) -> Vec<String> {
    g.tasks
        .iter()
        .filter(|(_, t)| t.status == super::state::Status::Completed)
        .filter(|(_, t)| t.completed.as_ref().is_some_and(|(_, c)| c.commit.is_some()))
        .map(|(id, _)| id.clone())
        .collect()
}

/// Whether the plan's consolidated suite must run now: it has one, every build-phase task
/// completed, the integration branch holds changes the last run of the suite did not see, and
/// either a review-phase task is ready to start (the suite comes before the review phase) or
/// the run is `ending` (so a change made after the review phase, in a fix round, is checked
/// too). A failed suite is not run again on the same changes: the review gate holds the reviews.
pub fn suite_due(g: &super::state::Workgroup, ending: bool) -> Option<SuiteDue> {
    use super::plan::PHASES;
    use super::state::Status;
    if g.plan.suite.is_empty() || g.paused.is_some() {
        return None;
    }
    let status = |id: &str| g.tasks.get(id).map_or(Status::Pending, |t| t.status);
    if !g.plan.tasks.iter().filter(|t| PHASES[t.phase] == "build").all(|t| status(t.id()) == Status::Completed) {
        return None;
    }
    let covers = integrated(g);
    if g.suite.as_ref().is_some_and(|(_, s)| s.covers == covers) {
        return None;
    }
    let review_ready = g.plan.tasks.iter().any(|t| {
        PHASES[t.phase] == "review"
            && status(t.id()) == Status::Pending
            && t.spec.after.iter().all(|d| status(d) == Status::Completed)
    });
    (ending || review_ready).then(|| SuiteDue { run: g.suite.as_ref().map_or(1, |(_, s)| s.run + 1), covers })
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
